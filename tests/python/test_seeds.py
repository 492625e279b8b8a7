"""The reproducers of the project's seed bug reports (Lightning Thunder issues), adapted to the CPU and run
with thunder_c in Thunder's place (`import thunder_c as thunder`), each compared with what eager PyTorch
gives for the same code.

Adaptations, and nothing else: device "cuda" -> "cpu" and torch.autocast("cuda", ...) -> ("cpu", ...);
module paths under `thunder.` -> under `thunder_c.`; Thunder's torchcompile executor (seed 004) -> each
of thunder_c's executor lists.

* 000 — torch.autocast around thunder.prims.linear: the autocast dispatch must apply to prims too.
* 001 — jit(autocast(h, dtype=thunder.bfloat16)) with h = (a @ b) + c: the autocast function transform.
* 003 — torchao's convert_to_float8_training model under jit: its Float8Linear (whose forward builds
  Float8TrainingTensor subclass instances and dispatches torch.mm to torch._scaled_mm) traced as the
  fp8 recipe (amax, scale, saturated casts, _scaled_mm), against eager torchao on the CPU (torch 2.14
  runs _scaled_mm there). Its adaptation: `from thunder.tests.make_tensor import make_tensor` ->
  torch.testing.make_tensor (same signature).
* 004 — `a += 1` on an argument (return None / return a): the RETURN must stay after the copy_.

The autocast parts compare with eager PyTorch under torch.autocast("cpu", torch.bfloat16)."""
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
    # strict prims: mixed dtypes outside autocast raise with the message of Thunder's check
    def foo(x, w):
        return thunder.prims.linear(x, w, None)

    with pytest.raises(RuntimeError, match=r"Expected a\.dtype=.*to be the same!"):
        thunder.jit(foo)(torch.randn(16, 16, dtype=torch.bfloat16), torch.randn(16, 16))

    def bar(a, b):
        return thunder.prims.matmul(a, b)

    with pytest.raises(RuntimeError, match=r"Expected a\.dtype=float32 and b\.dtype=bfloat16 to be the same"):
        thunder.jit(bar)(torch.randn(2, 2), torch.randn(2, 2, dtype=torch.bfloat16))


def test_seed000_mixed_dtypes_under_autocast():
    # x bf16, w f32 inside torch.autocast("cpu", bf16): w is converted, no dtype error
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
    # the matmul runs in bf16 on converted operands; the add in f32
    dce = str(thunder.last_traces(jfunc)[1])
    assert dce.count("prims.convert_element_type") >= 3, dce
    assert "bf16[2, 2]" in dce
    for tr in thunder.last_traces(jfunc):
        tr.verify()  # every recorded dtype is what the metas compute (also after renaming)


@pytest.mark.parametrize("fn,dtype", [(f_bf16, torch.bfloat16), (g_f32, torch.float32)], ids=["a@(b+c)", "a+b-c"])
def test_seed001_same_harness(fn, dtype):
    jfunc, out, want = seed001(fn)
    assert want.dtype == dtype and out.dtype == dtype, (want.dtype, out.dtype)
    torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)
    if dtype == torch.float32:
        assert "convert_element_type" not in str(thunder.last_traces(jfunc)[-1])


def test_seed001_autocast_rejects_non_low_precision_dtypes():
    from thunder_c.core.transforms import autocast

    with pytest.raises(ValueError, match=r"float16`? or `?thunder(_c)?\.bfloat16"):
        autocast(h, dtype=thunder.float32)
    with pytest.raises(ValueError):
        autocast(h, dtype=torch.bfloat16)


# ---- seed 003: fp8 scaled_mm through torchao ------------------------------------------------------------------

def seed003():
    """The reproducer's main(), adapted to the CPU; returns what it computed and printed
    (jitted, fp8_model, x, y, printed traces)."""
    import torch.nn as nn
    from torchao.float8 import convert_to_float8_training
    from torch.testing import make_tensor  # Thunder: from thunder.tests.make_tensor import make_tensor

    batch_size, in_features, out_features = 16, 32, 64
    device = torch.device("cpu")
    dtype = torch.bfloat16
    bias = False

    model = nn.Sequential(
        nn.Linear(in_features, out_features, bias=bias),
        # nn.GELU(approximate="tanh"),
        # nn.Linear(out_features, out_features, bias=bias),
    ).to(device=device, dtype=dtype)
    fp8_model = convert_to_float8_training(model)
    x = make_tensor((batch_size, in_features), device=device, dtype=dtype)

    jitted = thunder.jit(fp8_model)
    y = jitted(x)

    printed = []
    for i, t in enumerate(traces := thunder.last_traces(jitted)):
        if i == len(traces) - 1:
            print(t)
            printed.append(t)
        if t._provenance is not None and ("subclass" in t._provenance.pss or "Subclass" in t._provenance.pss):
            print(t)
            printed.append(t)
    return jitted, fp8_model, x, y, printed


def torchao_codes(t, fmt):
    """torchao's own quantization of t (eager: hp_tensor_to_float8_dynamic): (float64 values of the fp8
    codes, float32 scale)."""
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import LinearMMConfig

    q = hp_tensor_to_float8_dynamic(t.detach(), fmt, LinearMMConfig())
    assert q._data.dtype == fmt
    return q._data.double(), q._scale


def float8_linear_ref(x, w, bias=None, fx=torch.float8_e4m3fn, fw=torch.float8_e4m3fn):
    """y = x @ w.T (+ bias) from torchao's fp8 codes and scales of x and w, in float64, and the bound for
    float32 accumulation: the quantized math recomputed independently of both implementations."""
    x2 = x.reshape(-1, x.shape[-1])
    qx, sx = torchao_codes(x2, fx)
    qw, sw = torchao_codes(w, fw)
    inv = sx.reciprocal().double() * sw.reciprocal().double()  # torchao's decode scales: float32 reciprocals
    p = qx @ qw.T
    y = p * inv + (0 if bias is None else bias.double())
    bound = (x.shape[-1] + 4) * 2.0 ** -24 * ((qx.abs() @ qw.abs().T) * inv + (0 if bias is None else bias.double().abs()))
    return y.reshape(*x.shape[:-1], w.shape[0]), bound.reshape(*x.shape[:-1], w.shape[0])


def test_seed003_runs_and_shows_the_fp8_recipe():
    pytest.importorskip("torchao.float8")
    torch.manual_seed(0)
    jitted, fp8_model, x, y, printed = seed003()
    assert type(fp8_model[0]).__name__ == "Float8Linear"
    assert y.dtype == torch.bfloat16 and y.shape == (16, 64)
    assert len(printed) == 1  # no trace of thunder_c is a tensor-subclass transform's
    final = str(printed[0])
    assert final.startswith("# Constructed by Delete Last Used")
    # the execution trace: the amax / scale / saturating-cast chains of input and weight (in fusion
    # regions), the fp8 casts, the weight's transpose and the GEMM
    for part in ("t_0_input_amax", "t_0_weight_amax", "prims.amax(", "prims.div(448.0,", "prims.gt(", "-448.0)",
                 "prims.lt(", "448.0)", "t_0_input_fp8", "t_0_weight_fp8", "prims.reciprocal(", "prims.transpose("):
        assert part in final, part
    assert final.count("dtypes.float8_e4m3fn)") == 2  # the two fp8 casts
    assert final.count("prims.scaled_mm(") == 1 and "dtypes.bfloat16)" in final
    names = top_level(printed[0]) + [s.qualname for b in printed[0].bound_symbols for s in b.subsymbols]
    assert "prims.scaled_mm" in names and not any(n.endswith(".linear") for n in names)
    f8 = [t for t in thunder.last_traces(jitted) if t._provenance is not None and t._provenance.pss.startswith("Float8")]
    assert len(f8) == 1
    code = [ln for ln in str(f8[0]).splitlines() if not ln.strip().startswith("#")]
    assert sum("ltorch._scaled_mm(" in ln for ln in code) == 1 and not any("ltorch.linear(" in ln for ln in code)
    # the Float8Linear's forward is back, and the cache holds
    assert "forward" not in vars(fp8_model[0])
    y2 = jitted(x)
    assert torch.equal(y2, y) and thunder.cache_hits(jitted) == 1 and thunder.cache_misses(jitted) == 1


def test_seed003_matches_eager_torchao():
    """Eager torchao runs on the CPU (torch 2.14's _scaled_mm): thunder_c's output agrees with it to the
    last bf16 bit here, and with the float64 recomputation from torchao's own codes and scales."""
    pytest.importorskip("torchao.float8")
    torch.manual_seed(0)
    jitted, fp8_model, x, y, _ = seed003()
    with torch.no_grad():
        eager = fp8_model(x)
    assert eager.dtype == y.dtype
    ulp = torch.finfo(torch.bfloat16).eps * eager.float().abs().clamp(min=2.0 ** -126)
    assert torch.all((y.float() - eager.float()).abs() <= ulp)  # at most one bf16 step apart
    assert (y == eager).float().mean() >= 0.99
    want, bound = float8_linear_ref(x, fp8_model[0].weight)
    assert torch.all((y.double() - want).abs() <= bound + 2.0 ** -8 * want.abs())


def test_seed003_float32_codes_and_scales_are_torchao_s():
    """A float32 Float8Linear (bias, 3-D input): the output leaves only float32 accumulation error
    against the float64 product of torchao's own codes and scales, so the program quantized x and w to
    exactly torchao's codes; eager torchao agrees within the same bound."""
    pytest.importorskip("torchao.float8")
    from torchao.float8 import convert_to_float8_training

    torch.manual_seed(1)
    model = convert_to_float8_training(torch.nn.Sequential(torch.nn.Linear(48, 40), torch.nn.GELU(),
                                                           torch.nn.Linear(40, 24, bias=False)))
    x = torch.randn(3, 5, 48)
    with torch.no_grad():
        jm = thunder.jit(model)
        y = jm(x)
        eager = model(x)
        h = torch.nn.functional.gelu(model[0](x))  # the second layer's input, eagerly
        hj = thunder.jit(model[:2])(x)
    want, bound = float8_linear_ref(h, model[2].weight)
    assert torch.all((y.double() - want).abs() <= bound + 2.0 ** -24 * want.abs())
    assert torch.all((eager.double() - want).abs() <= bound + 2.0 ** -24 * want.abs())
    want1, bound1 = float8_linear_ref(x, model[0].weight, model[0].bias)
    pre = thunder.jit(model[0])(x)
    assert torch.all((pre.double() - want1).abs() <= bound1 + 2.0 ** -24 * want1.abs())
    torch.testing.assert_close(hj, h, rtol=1e-5, atol=1e-5)
    assert str(thunder.last_traces(jm)[-1]).count("prims.scaled_mm(") == 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
def test_seed003_backward_matches_eager_torchao(dtype):
    """loss.backward() through the jitted fp8 model: torchao's backward (the cotangent in float8_e5m2,
    grad_input and grad_weight as _scaled_mm), against eager torchao's backward on a copy."""
    pytest.importorskip("torchao.float8")
    import copy

    from torchao.float8 import convert_to_float8_training

    torch.manual_seed(2)
    model = convert_to_float8_training(torch.nn.Sequential(torch.nn.Linear(32, 64, bias=True))).to(dtype)
    ref = copy.deepcopy(model)
    x = torch.randn(16, 32, dtype=dtype)
    xj, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ct = torch.randn(16, 64, dtype=dtype)
    jm = thunder.jit(model)
    (jm(xj) * ct).sum().backward()
    (ref(xe) * ct).sum().backward()
    tol = dict(rtol=2 ** -7, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xj.grad, xe.grad, **tol)
    torch.testing.assert_close(model[0].weight.grad, ref[0].weight.grad, **tol)
    torch.testing.assert_close(model[0].bias.grad, ref[0].bias.grad, **tol)
    bwd = str(thunder.last_backward_traces(jm)[-1])
    assert bwd.count("prims.scaled_mm(") == 2 and "dtypes.float8_e5m2)" in bwd


def test_seed003_autocast_as_torchao():
    """Under torch.autocast("cpu", bfloat16) eager torchao quantizes the float32 operands and writes a
    bfloat16 output (torch.mm of its subclass is autocast); thunder_c does the same."""
    pytest.importorskip("torchao.float8")
    from torchao.float8 import convert_to_float8_training

    torch.manual_seed(3)
    model = convert_to_float8_training(torch.nn.Sequential(torch.nn.Linear(32, 16)))
    x = torch.randn(8, 32)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        y = thunder.jit(model)(x)
        eager = model(x)
    assert y.dtype == eager.dtype == torch.bfloat16
    torch.testing.assert_close(y, eager, rtol=2 ** -7, atol=2 ** -7)


def test_seed003_what_is_refused():
    """torchao configurations the recipe does not cover, float64 layers, and torchao's subclass met
    outside a jitted module's Float8Linear raise NotImplementedError naming the setting or the class."""
    pytest.importorskip("torchao.float8")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    lin = lambda: torch.nn.Sequential(torch.nn.Linear(32, 16))  # noqa: E731
    rowwise = convert_to_float8_training(lin(), config=Float8LinearConfig.from_recipe_name("rowwise"))
    with pytest.raises(NotImplementedError, match=r"Float8Linear '0': cast_config_input.scaling_granularity=AXISWISE"):
        thunder.jit(rowwise)(torch.randn(4, 32))
    assert "forward" not in vars(rowwise[0])
    f64 = convert_to_float8_training(lin()).double()
    with pytest.raises(NotImplementedError, match="Float8Linear '0': float8 needs one linear"):
        thunder.jit(f64)(torch.randn(4, 32, dtype=torch.float64))
    m = convert_to_float8_training(lin())
    with pytest.raises(NotImplementedError, match="torchao.float8.float8_training_tensor.Float8TrainingTensor, a tensor subclass"):
        thunder.jit(lambda x: m(x))(torch.randn(4, 32))  # a closure, not a submodule: torchao's own code


class ToySubclass(torch.Tensor):
    """A wrapper tensor subclass (as torchao's): its data is an inner tensor, its ops __torch_dispatch__."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        unwrap = lambda a: a.inner if isinstance(a, ToySubclass) else a  # noqa: E731
        return func(*[unwrap(a) for a in args], **(kwargs or {}))


class PlainSubclass(torch.Tensor):
    pass


def test_tensor_subclasses_thunder_c_cannot_flatten_are_refused():
    name = r"test_seeds.ToySubclass, a tensor subclass \(it defines __torch_dispatch__\) that thunder_c cannot flatten"
    t = ToySubclass(torch.ones(3))
    assert torch.equal(t + 1, torch.full((3,), 2.0))  # eagerly it works
    with pytest.raises(NotImplementedError, match="a tensor of the call .* is a " + name):
        thunder.jit(lambda x: x + 1)(t)
    with pytest.raises(NotImplementedError, match="a tensor the function reads .* is a " + name):
        thunder.jit(lambda x: ToySubclass(x * 2) + 1)(torch.ones(3))  # made while tracing
    with pytest.raises(NotImplementedError, match=name):
        thunder.jit(lambda x: x + t)(torch.ones(3))  # captured
    # a subclass that overrides nothing is read as its tensor
    y = thunder.jit(lambda x: x + 1)(torch.ones(3).as_subclass(PlainSubclass))
    assert torch.equal(y, torch.full((3,), 2.0))


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
