"""The reproducers of the project's seed bug reports (Lightning Thunder issues), adapted to the CPU and run
with thunder_c in Thunder's place (`import thunder_c as thunder`), each compared with what eager PyTorch
gives for the same code.

Adaptations, and nothing else: device "cuda" -> "cpu" and torch.autocast("cuda", ...) -> ("cpu", ...);
module paths under `thunder.` -> under `thunder_c.`; Thunder's torchcompile executor (seed 004) -> each
of thunder_c's executor lists.

* 000 — torch.autocast around thunder.prims.linear: the autocast dispatch must apply to prims too.
* 001 — jit(autocast(h, dtype=thunder.bfloat16)) with h = (a @ b) + c: the autocast function transform.
* 003 — float8 scaled_mm through torchao: needs torchao (not packaged by Debian) and a CUDA SM89+ GPU.
* 004 — `a += 1` on an argument (return None / return a): the RETURN must stay after the copy_.

The autocast parts (issue 4) compare with eager PyTorch under torch.autocast("cpu", torch.bfloat16)."""
import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder = import_thunder_c()

def top_level(trace):
    return [b.qualname for b in trace.bound_symbols]


# ---- seed 000: torch.autocast context manager got broken for prims.linear --------------------------------

def seed000():
    """The reproducer, adapted to the CPU. Returns (jfoo, jit_out, x, w)."""
    def foo(x, w):
        return thunder.prims.linear(x, w, None)

    device = torch.device("cpu")
    with device:
        # fp32 inputs
        x, w = torch.randn(16, 16), torch.randn(16, 16)
        print(x.dtype, w.dtype)

    with torch.autocast("cpu", torch.bfloat16):
        jfoo = thunder.jit(foo)
        jit_out = jfoo(x, w)

    print(thunder.last_traces(jfoo)[-1])
    return jfoo, jit_out, x, w


def test_seed000_runs():
    jfoo, jit_out, x, w = seed000()
    assert tuple(jit_out.shape) == (16, 16)
    final = thunder.last_traces(jfoo)[-1]
    assert "prims.linear" in top_level(final)
    assert top_level(final)[-1] == "prims.python_return"


def test_seed000_matches_eager_autocast():
    jfoo, jit_out, x, w = seed000()
    with torch.autocast("cpu", torch.bfloat16):
        eager_out = F.linear(x, w, None)  # what prims.linear is in PyTorch
    assert eager_out.dtype == torch.bfloat16
    assert jit_out.dtype == torch.bfloat16, jit_out.dtype
    torch.testing.assert_close(jit_out, eager_out, rtol=1e-2, atol=1e-2)
    # the trace before the execution transform converts both operands to bf16, then a top-level prims.linear
    names = top_level(thunder.last_traces(jfoo)[0])
    assert "prims.convert_element_type" in names and "prims.linear" in names, names
    assert names.index("prims.convert_element_type") < names.index("prims.linear")


def test_seed000_outside_autocast_is_f32_linear():
    def foo(x, w):
        return thunder.prims.linear(x, w, None)

    x, w = torch.randn(16, 16), torch.randn(16, 16)
    jfoo = thunder.jit(foo)
    out = jfoo(x, w)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, F.linear(x, w), rtol=1e-5, atol=1e-5)
    assert "prims.convert_element_type" not in str(thunder.last_traces(jfoo)[-1])


def test_seed000_mixed_dtypes_outside_autocast_raise():
    # thunder-reference §11 scenario 4: strict prims, the message of Thunder's check
    def foo(x, w):
        return thunder.prims.linear(x, w, None)

    with pytest.raises(RuntimeError, match=r"Expected a\.dtype=.*to be the same!"):
        thunder.jit(foo)(torch.randn(16, 16, dtype=torch.bfloat16), torch.randn(16, 16))

    def bar(a, b):
        return thunder.prims.matmul(a, b)

    with pytest.raises(RuntimeError, match=r"Expected a\.dtype=float32 and b\.dtype=bfloat16 to be the same"):
        thunder.jit(bar)(torch.randn(2, 2), torch.randn(2, 2, dtype=torch.bfloat16))


def test_seed000_mixed_dtypes_under_autocast():
    # scenario 8: x bf16, w f32 inside torch.autocast("cpu", bf16): w is converted, no dtype error
    def foo(x, w):
        return thunder.prims.linear(x, w, None)

    x, w = torch.randn(16, 16, dtype=torch.bfloat16), torch.randn(16, 16)
    with torch.autocast("cpu", torch.bfloat16):
        jfoo = thunder.jit(foo)
        out = jfoo(x, w)
        eager_out = F.linear(x, w)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, eager_out, rtol=1e-2, atol=1e-2)


# ---- seed 001: thunder.jit does not work for the autocast transform in some cases ----------------------------

def seed001(fn):
    from thunder_c.core.transforms import autocast  # Thunder: from thunder.core.transforms import autocast

    x, y, z = (torch.randn((2, 2), device="cpu", dtype=torch.float32) for _ in range(3))
    jfunc = thunder.jit(autocast(fn, dtype=thunder.bfloat16))
    out = jfunc(x, y, z)
    with torch.autocast("cpu", torch.bfloat16):
        want = fn(x, y, z)
    return jfunc, out, want


def h(a, b, c):
    return (a @ b) + c


def f_bf16(a, b, c):
    return a @ (b + c)


def g_f32(a, b, c):
    return a + b - c


def test_seed001_autocast_transform():
    jfunc, out, want = seed001(h)
    assert want.dtype == torch.float32
    assert out.dtype == torch.float32, out.dtype
    torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)
    # scenario 13: the matmul runs in bf16 on converted operands; the add in f32
    dce = str(thunder.last_traces(jfunc)[1])
    assert dce.count("prims.convert_element_type") >= 3, dce
    assert "bf16[2, 2]" in dce
    for tr in thunder.last_traces(jfunc):
        tr.verify()  # scenario 15: every recorded dtype is what the metas compute (the #283 rename bug)


@pytest.mark.parametrize("fn,dtype", [(f_bf16, torch.bfloat16), (g_f32, torch.float32)], ids=["a@(b+c)", "a+b-c"])
def test_seed001_same_harness(fn, dtype):
    jfunc, out, want = seed001(fn)
    assert want.dtype == dtype and out.dtype == dtype, (want.dtype, out.dtype)
    torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)
    if dtype == torch.float32:
        assert "convert_element_type" not in str(thunder.last_traces(jfunc)[-1])


def test_seed001_autocast_rejects_non_low_precision_dtypes():
    from thunder_c.core.transforms import autocast  # scenario 14

    with pytest.raises(ValueError, match=r"float16`? or `?thunder(_c)?\.bfloat16"):
        autocast(h, dtype=thunder.float32)
    with pytest.raises(ValueError):
        autocast(h, dtype=torch.bfloat16)


# ---- seed 003: fp8 scaled_mm through torchao ------------------------------------------------------------------

@pytest.mark.skip(reason="seed 003 needs torchao (not packaged by Debian) and float8 scaled_mm on a CUDA SM89+ GPU")
def test_seed003():
    pass


# ---- seed 004: toposort can put `return` before `copy_` on arguments --------------------------------------------

EXECUTORS = [None, ["eager"], ["blas", "eager"]]  # Thunder's seed used [thunder.get_executor("torchcompile")]


@pytest.mark.parametrize("executors", EXECUTORS, ids=["default", "eager", "blas+eager"])
def test_seed004_return_none(executors):
    def f(a):
        a += 1

    jitted = thunder.jit(f, executors=executors)
    a = torch.tensor(0)
    r = jitted(a)

    e = torch.tensor(0)
    want = f(e)  # eager: None, e == 1
    assert r is None and want is None
    assert a.item() == e.item() == 1
    for tr in thunder.last_traces(jitted):
        names = top_level(tr)
        assert names[-1] == "prims.python_return", str(tr)
    final = top_level(thunder.last_traces(jitted)[-1])
    assert "prims.copy_" in final and final.index("prims.copy_") < len(final) - 1
    jitted(a)  # a cached call updates the argument again
    assert a.item() == 2 and thunder.cache_hits(jitted) == 1


@pytest.mark.parametrize("executors", EXECUTORS, ids=["default", "eager", "blas+eager"])
def test_seed004_return_a(executors):
    def f(a):
        a += 1
        return a

    jitted = thunder.jit(f, executors=executors)
    a = torch.tensor(0)
    r = jitted(a)

    e = torch.tensor(0)
    want = f(e)
    assert want is e and e.item() == 1
    assert a.item() == 1 and r.item() == 1
    assert r.data_ptr() == a.data_ptr()  # eager returns `a` itself
    final = top_level(thunder.last_traces(jitted)[-1])
    assert final[-1] == "prims.python_return"
    assert final.index("prims.copy_") < len(final) - 1
