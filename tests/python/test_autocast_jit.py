"""Autocast through thunder_c.jit, against eager torch.autocast on the CPU: regions around the call and
inside the function (nested, enabled=False, another device type), the function path
thunder_c.autocast(fn, dtype), the cache key, and the dtype of every proxy after every pass (the cases
of Thunder's autocast tests; CUDA ones as their CPU equivalents)."""
import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()
from thunder_c.core.transforms import autocast  # noqa: E402  (Thunder's spelling, seed 001)

TOL = dict(rtol=1e-2, atol=1e-2)


def verify_all(jf):
    for t in thunder_c.last_traces(jf):
        t.verify()  # every proxy's shape, dtype and device re-derived by the metas


def test_prims_linear_mixed_inputs_under_autocast():
    def foo(x, w):
        return thunder_c.prims.linear(x, w, None)
    x, w = torch.randn(16, 16).bfloat16(), torch.randn(16, 16)
    with torch.autocast("cpu", torch.bfloat16):
        jf = thunder_c.jit(foo)
        out = jf(x, w)
    assert out.dtype == torch.bfloat16
    top = [b.qualname for b in thunder_c.last_traces(jf)[0].bound_symbols]
    assert "prims.convert_element_type" in top and "prims.linear" in top
    assert top.index("prims.convert_element_type") < top.index("prims.linear")
    verify_all(jf)


def test_linear_with_bias_matches_eager_and_f64_is_left_alone():
    x, w, b = torch.randn(8, 16), torch.randn(4, 16), torch.randn(4)
    f = lambda x, w, b: F.linear(x, w, b)  # noqa: E731
    jf = thunder_c.jit(f)
    with torch.autocast("cpu", torch.bfloat16):
        got, want = jf(x, w, b), f(x, w, b)
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == (8, 4)
    torch.testing.assert_close(got.float(), want.float(), **TOL)
    converts = [b for b in thunder_c.last_traces(jf)[0].bound_symbols if b.qualname == "prims.convert_element_type"]
    assert len(converts) == 3
    assert jf(x, w, b).dtype == torch.float32  # outside autocast: another cache entry, no converts
    with torch.autocast("cpu", torch.bfloat16):
        with pytest.raises(RuntimeError):  # float64 is not downcast: mixed dtypes reach prims.linear
            jf(x.double(), w, b)


def test_other_device_type_region_does_not_touch_cpu_tensors():
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    jf = thunder_c.jit(lambda a, b: a @ b)
    with torch.autocast("cuda", torch.bfloat16, enabled=True) if torch.cuda.is_available() else _cuda_autocast_state():
        out = jf(a, b)
    assert out.dtype == torch.float32
    assert not any(b.qualname == "prims.convert_element_type" for b in thunder_c.last_traces(jf)[0].bound_symbols)


class _cuda_autocast_state:
    """torch.autocast('cuda') refuses to enter without CUDA; set the same global state directly."""

    def __enter__(self):
        self.prev = torch.is_autocast_enabled()
        torch.set_autocast_enabled(True)

    def __exit__(self, *exc):
        torch.set_autocast_enabled(self.prev)


def test_regions_inside_the_function():
    def f(a, b):
        with torch.autocast("cpu", torch.bfloat16):
            o1 = a @ b
            with torch.autocast("cpu", torch.bfloat16, enabled=False):
                o2 = a @ b.to(a.dtype)
        return o1, o2
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    jf = thunder_c.jit(f)
    got, want = jf(a, b), f(a, b)
    assert [t.dtype for t in got] == [t.dtype for t in want] == [torch.bfloat16, torch.float32]
    # the bf16 product: the bf16 operands multiplied exactly enough (float64) and rounded once, as
    # thunder-c computes it; PyTorch 1.13's CPU bf16 mm rounds along the way (up to several bf16 ulps off)
    exact = (a.bfloat16().double() @ b.bfloat16().double()).bfloat16()
    torch.testing.assert_close(got[0].float(), exact.float(), rtol=2 ** -7, atol=1e-6)
    torch.testing.assert_close(got[0].float(), want[0].float(), rtol=0.05, atol=0.05)
    torch.testing.assert_close(got[1], want[1], **TOL)
    verify_all(jf)
    assert not torch.is_autocast_enabled("cpu")  # the regions ended with the trace


def test_matmul_3d_by_2d():
    a = torch.randn(3, 1, 2)
    for b in (torch.randn(2, 3), torch.randn(2, 3).bfloat16()):
        jf = thunder_c.jit(lambda a, b: torch.matmul(a, b))
        with torch.autocast("cpu", torch.bfloat16):
            got, want = jf(a, b), torch.matmul(a, b)
        assert got.dtype == want.dtype == torch.bfloat16 and got.shape == (3, 1, 3)
        torch.testing.assert_close(got.float(), want.float(), **TOL)


def test_function_path_seed001():
    def h(a, b, c):
        return (a @ b) + c
    x, y, z = (torch.randn(2, 2) for _ in range(3))
    # the prims of the final trace: without the fuser, which would group the converts and the add
    jf = thunder_c.jit(autocast(h, dtype=thunder_c.bfloat16), executors=["blas", "eager"])
    got = jf(x, y, z)
    with torch.autocast("cpu", torch.bfloat16):
        want = h(x, y, z)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, **TOL)
    final = [b.qualname for b in thunder_c.last_traces(jf)[-1].bound_symbols if b.qualname.startswith("prims.")
             and b.qualname not in ("prims.python_del", "prims.python_return", "prims.comment")]
    assert final == ["prims.convert_element_type", "prims.convert_element_type", "prims.matmul",
                     "prims.convert_element_type", "prims.add"]
    verify_all(jf)
    # same harness: f = a @ (b + c) -> bf16; g = a + b - c -> f32 without converts
    jf2 = thunder_c.jit(autocast(lambda a, b, c: a @ (b + c), dtype=thunder_c.bfloat16))
    assert jf2(x, y, z).dtype == torch.bfloat16
    jg = thunder_c.jit(autocast(lambda a, b, c: a + b - c, dtype=thunder_c.bfloat16))
    assert jg(x, y, z).dtype == torch.float32
    assert not any(b.qualname == "prims.convert_element_type" for b in thunder_c.last_traces(jg)[-1].bound_symbols)


def test_region_and_function_paths_give_the_same_trace():
    def h(a, b, c):
        return (a @ b) + c
    x, y, z = (torch.randn(2, 2) for _ in range(3))
    jf = thunder_c.jit(autocast(h, dtype=thunder_c.bfloat16))
    jr = thunder_c.jit(h)
    jf(x, y, z)
    with torch.autocast("cpu", torch.bfloat16):
        jr(x, y, z)
    strip = lambda t: [b.qualname for b in t.bound_symbols if b.qualname != "prims.comment"]  # noqa: E731
    assert strip(thunder_c.last_traces(jf)[-1]) == strip(thunder_c.last_traces(jr)[-1])


def test_only_thunder_float16_or_bfloat16():
    f = lambda a: a  # noqa: E731
    with pytest.raises(ValueError, match="float16 or .*bfloat16"):
        autocast(f, dtype=thunder_c.float32)
    with pytest.raises(ValueError):
        autocast(f, dtype=torch.bfloat16)  # not a thunder dtype (Thunder raises too)
    assert autocast(f, dtype=thunder_c.float16) is not None


def test_autocast_state_is_part_of_the_cache_key_and_does_not_leak():
    jf = thunder_c.jit(lambda a, b: a @ b)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    assert jf(a, b).dtype == torch.float32
    with torch.autocast("cpu", torch.bfloat16):
        assert jf(a, b).dtype == torch.bfloat16
    assert jf(a, b).dtype == torch.float32  # (PyTorch 1.13's CPU autocast has bfloat16 only)
    assert (thunder_c.cache_hits(jf), thunder_c.cache_misses(jf)) == (1, 2)


def test_autocast_trace_transform():
    text = str(thunder_c.last_traces(_run_once(lambda a, b: a @ b))[0])
    t = thunder_c.trace_from_text(text)
    at = thunder_c.transforms.autocast(t, thunder_c.bfloat16)
    assert at.provenance.startswith("Autocast")
    at.verify()
    out = thunder_c.jit(at)(torch.randn(2, 2), torch.randn(2, 2))
    assert out.dtype == torch.bfloat16


def _run_once(f):
    jf = thunder_c.jit(f)
    jf(torch.randn(2, 2), torch.randn(2, 2))
    return jf
