"""thunder_c.compile_stats: hits, misses and why each miss happened; the recompile warning."""
import sys
import warnings

import pytest
import torch

import thunder_c


@pytest.fixture(autouse=True)
def default_limit():
    saved = thunder_c.config.recompile_limit
    yield
    thunder_c.config.recompile_limit = saved


def f(x, n=2):
    return x * n + 1


def test_first_call_and_hits():
    jf = thunder_c.jit(f)
    x = torch.randn(8, 4)
    for _ in range(3):
        torch.testing.assert_close(jf(x), f(x))
    s = thunder_c.compile_stats(jf)
    assert (s.calls, s.cache_hits, s.cache_misses, s.entries) == (3, 2, 1, 1)
    assert s.miss_reasons == ("first call",)
    assert "3 calls: 2 cache hits, 1 misses" in str(s)


def test_shape_change_names_the_argument_and_both_shapes():
    jf = thunder_c.jit(f)
    jf(torch.randn(8, 4))
    jf(torch.randn(16, 4))
    s = thunder_c.compile_stats(jf)
    assert s.cache_misses == 2 and s.entries == 2
    assert s.miss_reasons[1] == "x: shape f32[8, 4] -> f32[16, 4]"


def test_reason_is_against_the_closest_entry():
    jf = thunder_c.jit(f)
    jf(torch.randn(8, 4))
    jf(torch.randn(8, 4, dtype=torch.float64))
    jf(torch.randn(2, 4, dtype=torch.float64))  # differs from the f64 entry in its shape only
    assert thunder_c.compile_stats(jf).miss_reasons[1:] == (
        "x: shape f32[8, 4] -> f64[8, 4]", "x: shape f64[8, 4] -> f64[2, 4]")


def test_constant_argument_strides_and_requires_grad():
    jf = thunder_c.jit(f)
    x = torch.randn(4, 6)
    jf(x, 2)
    jf(x, 3)
    jf(x.t().contiguous().t(), 3)
    jf(x.clone().requires_grad_(), 3)
    r = thunder_c.compile_stats(jf).miss_reasons
    assert r[1] == "n: value int 2 -> int 3"
    assert r[2] == "x: contiguous -> strides (1, 4)"
    assert r[3] == "x: requires_grad=False -> requires_grad=True"


def test_grad_mode_and_autocast():
    jf = thunder_c.jit(f)
    x = torch.randn(4, 4)
    jf(x)
    with torch.no_grad():
        jf(x)
    with torch.autocast("cpu", torch.bfloat16):
        jf(x)
    r = thunder_c.compile_stats(jf).miss_reasons
    assert r[1] == "torch: grad enabled -> grad disabled"
    assert r[2] == "torch: autocast(cpu) off -> autocast(cpu) on"


def test_module_training_flag_and_replaced_parameter():
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Dropout(0.0))
    jm = thunder_c.jit(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        jm(x)
        m.eval()
        jm(x)
        m[0].weight = torch.nn.Parameter(torch.randn(3, 4, dtype=torch.float64))
        m[0].bias = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))
        jm(x.double())
        m.append(torch.nn.ReLU())
        torch.testing.assert_close(jm(x.double()), m(x.double()))
    r = thunder_c.compile_stats(jm).miss_reasons
    assert r[0] == "first call"
    assert r[1] == "the module: training=True -> training=False; submodule 0: training=True -> training=False; " \
                   "submodule 1: training=True -> training=False"
    assert r[2] == "input: shape f32[2, 4] -> f64[2, 4]; parameter 0.weight: shape f32[3, 4] -> f64[3, 4]; " \
                   "parameter 0.bias: shape f32[3] -> f64[3]"
    assert r[3] == "the module's parameters, buffers or submodules were replaced, added or removed"


def test_captured_value_change():
    scale = 2.0

    def g(x):
        return x * scale

    jg = thunder_c.jit(g)
    x = torch.randn(3)
    jg(x)
    scale = 3.0
    torch.testing.assert_close(jg(x), x * 3.0)
    assert "reads besides its arguments" in thunder_c.compile_stats(jg).miss_reasons[1]


def test_no_caching_reason():
    jf = thunder_c.jit(f, cache="no caching")
    x = torch.randn(3)
    jf(x)
    jf(x)
    s = thunder_c.compile_stats(jf)
    assert s.miss_reasons == ("cache='no caching'",) * 2 and s.entries == 0


def test_recompile_warning_once_past_the_limit():
    thunder_c.config.recompile_limit = 3
    jf = thunder_c.jit(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(1, 4):  # the first compile and 2 recompiles: no warning
            jf(torch.randn(n, 2))
        assert not [x for x in w if issubclass(x.category, thunder_c.RecompileWarning)]
        for n in range(4, 8):
            jf(torch.randn(n, 2))
    rw = [x for x in w if issubclass(x.category, thunder_c.RecompileWarning)]
    assert len(rw) == 1
    msg = str(rw[0].message)
    assert "compiled again 3 times" in msg and "recompile_limit = 3" in msg
    assert "x: shape f32[3, 2] -> f32[4, 2]" in msg
    assert rw[0].filename == __file__  # points at the caller's line


def test_recompile_warning_off():
    thunder_c.config.recompile_limit = None
    jf = thunder_c.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", thunder_c.RecompileWarning)
        for n in range(1, 12):
            jf(torch.randn(n))
    assert thunder_c.compile_stats(jf).cache_misses == 11


def test_recompile_warning_as_error_fails_the_call():
    thunder_c.config.recompile_limit = 1
    jf = thunder_c.jit(f)
    jf(torch.randn(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", thunder_c.RecompileWarning)
        with pytest.raises(thunder_c.RecompileWarning, match="compiled again 1 times"):
            jf(torch.randn(2))
    torch.testing.assert_close(jf(torch.randn(3).fill_(1.0)), torch.full((3,), 3.0))  # later calls still work


@pytest.mark.parametrize("bad", [-1, 2.5, True, "8"])
def test_config_rejects_bad_limits(bad):
    with pytest.raises(ValueError, match="recompile_limit"):
        thunder_c.config.recompile_limit = bad


def test_config_rejects_unknown_settings():
    with pytest.raises(AttributeError, match="no setting 'cache_size'"):
        thunder_c.config.cache_size = 3


def test_compile_stats_of_a_plain_function_is_a_type_error():
    with pytest.raises(TypeError):
        thunder_c.compile_stats(f)


def g(x, y):
    return x + y


def test_keyword_and_positional_calls_differ():
    jg = thunder_c.jit(g)
    a, b = torch.randn(3), torch.randn(3)
    jg(a, b)
    jg(a, y=b)
    jg(y=b, x=a)
    assert thunder_c.compile_stats(jg).miss_reasons[1:] == (
        "the call: 2 positional, keywords [] -> 1 positional, keywords ['y']",
        "the call: 1 positional, keywords ['y'] -> 0 positional, keywords ['y', 'x']")


def test_aliasing_is_overlapping_bytes():
    jg = thunder_c.jit(g)
    x = torch.randn(10)
    jg(x[:5], x[5:])  # halves of one storage: no bytes in common, no aliasing
    jg(x[:5], x[3:8])  # overlapping
    jg(x[:5], x[5:])
    s = thunder_c.compile_stats(jg)
    assert s.miss_reasons == ("first call", "y: shares memory with x")
    assert s.cache_hits == 1


def test_nan_constants_by_their_bits():
    jf = thunder_c.jit(f)
    x = torch.randn(3)
    jf(x, float("nan"))
    jf(x, -float("nan"))
    assert thunder_c.compile_stats(jf).miss_reasons[1].startswith("n: value float nan (bits 7ff8")


def test_autocast_dtype_while_autocast_is_off():
    jf = thunder_c.jit(f)
    x = torch.randn(3)
    jf(x)
    old = torch.get_autocast_dtype("cpu")
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        jf(x)
    finally:
        torch.set_autocast_dtype("cpu", old)
    assert thunder_c.compile_stats(jf).miss_reasons[1] == \
        "torch: autocast(cpu) dtype torch.bfloat16 -> autocast(cpu) dtype torch.float16"


def test_entries_count_what_the_cache_holds():
    w = torch.randn(3)

    def h(x):
        return x * w

    jh = thunder_c.jit(h)
    x = torch.randn(3)
    jh(x)
    w.data = torch.randn(1)  # the captured tensor changes shape: its entry is compiled again, in place
    torch.testing.assert_close(jh(x), x * w)
    s = thunder_c.compile_stats(jh)
    assert s.cache_misses == 2 and s.entries == 1
    assert s.miss_reasons[1].startswith("a tensor the function captured")
    js = thunder_c.jit(f, cache="same input")
    js(x)
    js(x)
    assert thunder_c.compile_stats(js).entries == 1


def test_trace_inputs_by_name():
    tr = thunder_c.trace_from_text('''import thunder
import thunder.core.prims as prims
import torch
from thunder.executors.torchex import no_autocast

@torch.no_grad()
@no_autocast
def f(a, b):
  # a: "cpu f32[3]"
  # b: "cpu f32[3]"
  t0 = prims.add(a, b)  # t0: "cpu f32[3]"
  return t0
''')
    jt = thunder_c.jit(tr, cache="no caching")
    jt(torch.ones(3), torch.ones(3))
    assert thunder_c.compile_stats(jt).miss_reasons == ("cache='no caching'",)
    jt2 = thunder_c.jit(tr)
    jt2(torch.ones(3), torch.ones(3))
    jt2(torch.ones(6)[::2], torch.ones(3))
    assert thunder_c.compile_stats(jt2).miss_reasons[1] == "a: contiguous -> strides (2,)"


def test_no_caching_never_warns():
    thunder_c.config.recompile_limit = 2
    jf = thunder_c.jit(f, cache="no caching")
    with warnings.catch_warnings():
        warnings.simplefilter("error", thunder_c.RecompileWarning)
        for _ in range(5):
            jf(torch.ones(2))
    assert thunder_c.compile_stats(jf).cache_misses == 5


def test_module_warning_names_the_callers_line():
    thunder_c.config.recompile_limit = 1
    jm = thunder_c.jit(torch.nn.Linear(4, 4))
    with warnings.catch_warnings(record=True) as w, torch.no_grad():
        warnings.simplefilter("always")
        jm(torch.ones(1, 4))
        jm(torch.ones(2, 4)); line = sys._getframe().f_lineno  # noqa: E702
    (rw,) = [x for x in w if issubclass(x.category, thunder_c.RecompileWarning)]
    assert (rw.filename, rw.lineno) == (__file__, line)


def test_config_setting_cannot_be_deleted():
    with pytest.raises(AttributeError, match="cannot be deleted"):
        del thunder_c.config.recompile_limit
    assert thunder_c.config.recompile_limit == 8
