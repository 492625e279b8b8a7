"""fp8 from Python: casts to thunder_c.float8_* inside jitted code (outputs come back as uint8 codes),
thunder_c.torch._scaled_mm, the float8 training transform (thunder_c.jit(..., float8=...),
thunder_c.transforms.float8 on traces and functions) and the CLI's --float8.

PyTorch 1.13 has no fp8 dtypes, so every reference here is NumPy: fp8 codes are decoded from their bit
fields with integer arithmetic, casts are a brute-force round-to-nearest-even search over the codes
(with PyTorch's overflow rules), products are float64 sums of the decoded values, and the float8 recipe
(amax -> scale = M / clamp(amax, 1e-12) -> saturated cast -> decode with 1/scale) is recomputed in
float64 from the same float32 values, so the fp8 codes and scales match the program's exactly and the
only tolerance is float32 accumulation (plus the output dtype's rounding)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import st
from conftest import import_thunder_c

thunder_c = import_thunder_c()
E4, E5 = "e4m3fn", "e5m2"
MAXV = {E4: 448.0, E5: 57344.0}


def th_dtype(fmt):
    return thunder_c.float8_e4m3fn if fmt == E4 else thunder_c.float8_e5m2


# ---- the independent fp8 reference ---------------------------------------------------------------------

def decode(fmt, codes):
    """float64 values of uint8 codes, from the sign / exponent / mantissa fields."""
    c = np.asarray(codes, dtype=np.int64)
    s = np.where(c & 0x80, -1.0, 1.0)
    if fmt == E4:
        e, m = (c >> 3) & 15, c & 7
        v = np.where(e == 0, np.ldexp(m.astype(np.float64), -9), np.ldexp((8 + m).astype(np.float64), e - 10))
        v = np.where((e == 15) & (m == 7), np.nan, v)
    else:
        e, m = (c >> 2) & 31, c & 3
        v = np.where(e == 0, np.ldexp(m.astype(np.float64), -16), np.ldexp((4 + m).astype(np.float64), e - 17))
        v = np.where(e == 31, np.where(m == 0, np.inf, np.nan), v)
    return s * v


def encode(fmt, x, saturate=False):
    """PyTorch's float32 -> fp8 cast (or the clamp-then-cast one) of float32 values: the nearest of the
    codes 0 .. first-overflow (e4m3fn: 480 = a NaN code; e5m2: 65536 = inf), ties to the even code."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64).ravel()
    over = 480.0 if fmt == E4 else 65536.0
    over_code = 0x7F if fmt == E4 else 0x7C
    grid = decode(fmt, np.arange(over_code + 1))
    grid[over_code] = over
    a = np.abs(x)
    if saturate:
        a = np.minimum(a, MAXV[fmt])
    d = np.abs(a[:, None] - grid[None, :])
    first = np.argmin(np.where(np.isnan(d), np.inf, d), axis=1)
    nxt = np.minimum(first + 1, over_code)
    tie = (d[np.arange(len(a)), nxt] == d[np.arange(len(a)), first]) & (first % 2 == 1) & (nxt != first)
    code = np.where(tie, nxt, first)
    code = np.where(a > over, over_code, code)
    code = np.where(np.isnan(x), 0x7F, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def same_codes(fmt, got, want):
    """Equal codes, where NaN results may be any NaN code."""
    got, want = np.asarray(got).ravel(), np.asarray(want).ravel()
    gn, wn = np.isnan(decode(fmt, got)), np.isnan(decode(fmt, want))
    return np.array_equal(gn, wn) and np.array_equal(got[~gn], want[~wn])


def quantize(fmt, x32):
    """The recipe on float32 values: (codes, float32 inverse scale)."""
    x32 = np.asarray(x32, dtype=np.float32)
    amax = np.float32(np.max(np.abs(x32)))
    scale = np.float32(MAXV[fmt] / float(max(amax, np.float32(1e-12))))
    scaled = (x32.astype(np.float64) * float(scale)).astype(np.float32)
    return encode(fmt, scaled, saturate=True).reshape(x32.shape), np.float32(1.0 / float(scale))


def ref_fp8_linear(x32, w32, b32, fx=E4, fw=E4, out_eps=2.0 ** -24):
    """y = x @ w.T + b through the recipe in float64, and the float32-accumulation error bound."""
    K = x32.shape[-1]
    x2 = np.asarray(x32, np.float32).reshape(-1, K)
    qx, ix = quantize(fx, x2)
    qw, iw = quantize(fw, w32)
    p = decode(fx, qx)[:, None, :] * decode(fw, qw)[None, :, :]
    s = float(ix) * float(iw)
    b = np.zeros(w32.shape[0]) if b32 is None else np.asarray(b32, np.float64)
    y = p.sum(-1) * s + b
    bound = (K + 4) * 2.0 ** -24 * (np.abs(p).sum(-1) * s + np.abs(b)) + out_eps * np.abs(y) + 1e-30
    return y.reshape(*x32.shape[:-1], w32.shape[0]), bound.reshape(*x32.shape[:-1], w32.shape[0])


def f32(t):
    return t.detach().float().numpy()


EDGE = np.array([0.0, -0.0, 1.0, 4.48, -8.96, 2.24, 448.0, 449.0, 463.99, 464.0, 464.01, 479.0, 480.0, 500.0,
                 -500.0, 1e6, 57344.0, 60000.0, 61439.0, 61440.0, 61441.0, 70000.0, -70000.0, np.inf, -np.inf, np.nan,
                 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -6, 2.0 ** -11, -(2.0 ** -10), 2.0 ** -16, 2.0 ** -17,
                 3 * 2.0 ** -17, 2.0 ** -14, -(2.0 ** -17), 1e-30, 0.1, -0.3, 3.14159, 12345.0], dtype=np.float32)

EXECUTORS = [["eager"], ["fuser", "blas", "eager"]]


# ---- casts -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("executors", EXECUTORS, ids=["eager", "fuser"])
@pytest.mark.parametrize("fmt", [E4, E5])
def test_casts_return_uint8_codes(fmt, executors):
    def f(x):
        plain = x.to(th_dtype(fmt))
        sat = torch.clamp(x, -MAXV[fmt], MAXV[fmt]).to(th_dtype(fmt))
        return plain, sat

    jf = thunder_c.jit(f, executors=executors)
    plain, sat = jf(torch.from_numpy(EDGE.copy()))
    assert plain.dtype == torch.uint8 and sat.dtype == torch.uint8 and plain.shape == (len(EDGE),)
    assert same_codes(fmt, plain.numpy(), encode(fmt, EDGE))
    assert same_codes(fmt, sat.numpy(), encode(fmt, EDGE, saturate=True))
    # the trace keeps the fp8 dtype; only the handover to PyTorch is uint8
    assert f"f8_{fmt}[{len(EDGE)}]" in str(thunder_c.last_traces(jf)[-1])


def test_reference_anchors():
    """The reference itself against §8.1 / scenario 23's numbers."""
    assert list(decode(E4, encode(E4, [4.48, -8.96, 2.24, 450.0]))) == [4.5, -9.0, 2.25, 448.0]
    assert np.isnan(decode(E4, encode(E4, [500.0]))[0])
    assert decode(E4, encode(E4, [464.0]))[0] == 448.0  # tie to even
    assert decode(E5, encode(E5, [60000.0]))[0] == 57344.0 and np.isinf(decode(E5, encode(E5, [70000.0]))[0])
    assert decode(E4, encode(E4, [np.inf], saturate=True))[0] == 448.0
    assert encode(E4, [-0.0])[0] == 0x80


# ---- the worked example (reference §8.2, scenario 24) ------------------------------------------------------

@pytest.mark.parametrize("executors", EXECUTORS, ids=["eager", "fuser"])
def test_worked_example(executors):
    def f(x):
        amax = x.abs().max()
        s = (448 / torch.clamp(amax, min=1e-12)).float()
        q = torch.clamp(x * s, -448, 448).to(thunder_c.float8_e4m3fn)
        return q, q.float() / s

    jf = thunder_c.jit(f, executors=executors)
    q, y = jf(torch.tensor([1.0, -2.0, 0.5, 100.0]))
    assert list(decode(E4, q.numpy())) == [4.5, -9.0, 2.25, 448.0]
    np.testing.assert_allclose(y.numpy(), [1.00446, -2.00893, 0.50223, 100.0], atol=1e-4, rtol=0)
    assert not np.array_equal(y.numpy()[:3], [1.0, -2.0, 0.5])  # the lossy round trip stays


# ---- _scaled_mm ------------------------------------------------------------------------------------------

def fp8_values(fmt, shape, rng):
    """float32 values that are exactly fp8 values of fmt (so x.to(fp8) is exact), subnormals included,
    at most 16 in magnitude (so float16 outputs do not overflow)."""
    allv = decode(fmt, np.arange(256))
    ok = allv[np.isfinite(allv) & (np.abs(allv) <= 16)]
    return torch.from_numpy(rng.choice(ok, size=shape).astype(np.float32))


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (1, 16, 7), (5, 1, 3), (3, 40, 1), (17, 33, 9), (64, 300, 40)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16, None])
@pytest.mark.parametrize("bias", [False, True])
def test_scaled_mm(M, K, N, out_dtype, bias):
    rng = np.random.default_rng(M * 1000 + K * 10 + N)
    fa, fb = (E4, E5) if K % 2 else (E4, E4)
    a, bt = fp8_values(fa, (M, K), rng), fp8_values(fb, (N, K), rng)
    sa, sb = torch.tensor(0.03), torch.tensor([1.7])
    want_dt = out_dtype or torch.bfloat16
    bvec = torch.from_numpy(rng.uniform(-3, 3, N).astype(np.float32)).to(want_dt) if bias else None

    def f(a, bt, sa, sb, *rest):
        aq, bq = a.to(th_dtype(fa)), bt.to(th_dtype(fb))
        kw = {} if out_dtype is None else {"out_dtype": out_dtype}
        return thunder_c.torch._scaled_mm(aq, bq.t(), sa, sb, rest[0] if rest else None, **kw), aq, bq

    y, aq, bq = thunder_c.jit(f)(a, bt, sa, sb, *([bvec] if bias else []))
    assert y.dtype == want_dt and y.shape == (M, N)
    da, db = decode(fa, aq.numpy()), decode(fb, bq.numpy())  # b is the transpose: non-contiguous [K, N]
    assert np.array_equal(da, a.numpy()) and np.array_equal(db, bt.numpy())
    p = da[:, None, :] * db[None, :, :]
    s = float(np.float32(0.03)) * float(np.float32(1.7))
    b = bvec.double().numpy() if bias else 0.0
    want = p.sum(-1) * s + b
    eps = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[want_dt]
    tol = (K + 3) * 2.0 ** -24 * (np.abs(p).sum(-1) * s + np.abs(b)) + eps * np.abs(want) + 2.0 ** -24
    assert np.all(np.abs(y.double().numpy() - want) <= tol)


def test_scaled_mm_layouts_and_errors():
    a = torch.tensor([[1.0, 2.0], [0.5, -4.0]])

    def ok(a, b):
        aq, bq = a.to(thunder_c.float8_e4m3fn), b.to(thunder_c.float8_e4m3fn)
        one = torch.ones(())
        return (thunder_c.torch._scaled_mm(aq, bq, one, one, out_dtype=torch.float32),     # row-major b
                thunder_c.torch._scaled_mm(aq, bq.t().contiguous().t(), one, one, out_dtype=torch.float32))

    r1, r2 = thunder_c.jit(ok)(a, a)
    want = (a.double() @ a.double()).numpy()
    assert np.array_equal(r1.double().numpy(), want) and np.array_equal(r2.double().numpy(), want)

    def call(fmt_a, fmt_b, shape_b=(2, 2), scale=torch.ones(()), bias=None, **kw):
        def f(a, b, s):
            return thunder_c.torch._scaled_mm(a.to(fmt_a), b.to(fmt_b), s, s, bias, **kw)
        return thunder_c.jit(f)(a, torch.ones(shape_b), scale)

    e4, e5 = thunder_c.float8_e4m3fn, thunder_c.float8_e5m2
    with pytest.raises(RuntimeError, match="Multiplication of two Float8_e5m2 matrices is not supported"):
        call(e5, e5)
    with pytest.raises(RuntimeError, match="Expected mat2 to be Float8 matrix got BFloat16"):
        call(e4, torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x2 and 3x2\)"):
        call(e4, e4, shape_b=(3, 2))
    with pytest.raises(RuntimeError, match="must be float \\(fp32\\) tensors"):
        call(e4, e4, scale=torch.ones((), dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="only tensor-wise scaling"):
        call(e4, e4, scale=torch.ones(2))
    with pytest.raises(NotImplementedError, match="fp8 outputs"):
        call(e4, e4, out_dtype=e4)
    with pytest.raises(RuntimeError, match="Bias must be a vector of size 2"):
        call(e4, e4, bias=torch.ones(3, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="Bias must be BFloat16 to compute BFloat16 output, but got Float"):
        call(e4, e4, bias=torch.ones(2))
    with pytest.raises(RuntimeError, match="Expected mat1 to be Float8 matrix got Float"):
        thunder_c.jit(lambda a, s: thunder_c.torch._scaled_mm(a, a, s, s))(a, torch.ones(()))


# ---- the float8 transform -----------------------------------------------------------------------------------

class MLP(torch.nn.Module):
    """fc1 (bias) -> gelu -> fc2 (bias) -> gelu -> fc3 (no bias); returns every layer's output, so each
    layer is checked on the program's own input."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 96)
        self.fc2 = torch.nn.Linear(96, 48)
        self.fc3 = torch.nn.Linear(48, 32, bias=False)

    def forward(self, x):
        y1 = self.fc1(x)
        h1 = F.gelu(y1)
        y2 = self.fc2(h1)
        h2 = F.gelu(y2)
        return y1, h1, y2, h2, self.fc3(h2)


def check_layers(model, x, outs, converted=("fc1", "fc2", "fc3"), fx=E4, fw=E4):
    out_eps = 2.0 ** -8 if outs[0].dtype == torch.bfloat16 else 2.0 ** -24
    ins = [x, outs[1], outs[3]]
    for layer, inp, out in zip((model.fc1, model.fc2, model.fc3), ins, (outs[0], outs[2], outs[4])):
        name = [n for n, m in model.named_children() if m is layer][0]
        b = None if layer.bias is None else f32(layer.bias)
        got = out.double().numpy()
        if name in converted:
            want, bound = ref_fp8_linear(f32(inp), f32(layer.weight), b, fx, fw, out_eps)
            assert np.all(np.abs(got - want) <= bound), (name, np.max(np.abs(got - want) - bound))
        else:
            want = f32(inp).astype(np.float64) @ f32(layer.weight).astype(np.float64).T + (0 if b is None else b)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def rel_error_vs_unquantized(model, x, y):
    with torch.no_grad():
        want = model.double()(x.double())[-1]
    model.float()
    return float(torch.linalg.norm(y.double() - want) / torch.linalg.norm(want))


# The forward alone: these modules run under no_grad (the backward is tested at the end of this file).
@torch.no_grad()
def test_float8_module():
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 5, 64)
    jm = thunder_c.jit(model, float8=True)
    outs = jm(x)
    check_layers(model, x, outs)
    rel = rel_error_vs_unquantized(model, x, outs[-1])
    assert 1e-4 < rel < 0.1, rel  # the fp8 error is there, and within a few quantization steps
    traces = thunder_c.last_traces(jm)
    f8 = [t for t in traces if str(t).startswith("# Constructed by Float8")]
    assert len(f8) == 1
    text = str(f8[0])
    code = [ln for ln in text.splitlines() if not ln.strip().startswith("#")]
    assert sum("ltorch._scaled_mm(" in ln for ln in code) == 3 and not any("ltorch.linear(" in ln for ln in code)
    assert "# float8: " in text and "fc1_weight_scale_" in text and "fc3_input_fp8_" in text
    assert str(traces[-1]).count("prims.scaled_mm(") == 3
    assert thunder_c.jit(model)(x)[-1].sub(outs[-1]).abs().max() > 0  # float8=False: plain linears


@torch.no_grad()
def test_float8_filter_and_formats():
    torch.manual_seed(1)
    model = MLP()
    x = torch.randn(10, 64)
    seen = []

    def keep(info):
        seen.append(info)
        return info["module"] != "fc3"

    outs = thunder_c.jit(model, float8={"filter": keep})(x)
    assert [i["index"] for i in seen] == [0, 1, 2]
    assert seen[0]["weight_param"] == "fc1.weight" and seen[0]["module"] == "fc1" and seen[0]["op"] == "ltorch.linear"
    assert seen[1]["input_shape"] == (10, 96) and seen[1]["weight_shape"] == (48, 96)
    assert seen[2]["bias"] is None and seen[0]["dtype"] == thunder_c.float32
    check_layers(model, x, outs, converted=("fc1", "fc2"))
    # e5m2 activations (the format torchao uses for gradients; any operand may take it)
    outs = thunder_c.jit(model, float8={"input_dtype": thunder_c.float8_e5m2})(x)
    check_layers(model, x, outs, fx=E5)
    outs = thunder_c.jit(model, float8={"weight_dtype": "e5m2"})(x)
    check_layers(model, x, outs, fw=E5)
    with pytest.raises(ValueError, match="cannot both be float8_e5m2"):
        thunder_c.jit(model, float8={"input_dtype": "e5m2", "weight_dtype": "e5m2"})
    with pytest.raises(TypeError, match="unknown float8 option"):
        thunder_c.jit(model, float8={"recipe": "delayed"})
    with pytest.raises(ValueError, match="input_dtype must be"):
        thunder_c.jit(model, float8={"input_dtype": torch.float32})

    def boom(info):
        raise KeyError("no")

    with pytest.raises(KeyError):
        thunder_c.jit(model, float8={"filter": boom})(x)


@torch.no_grad()
def test_float8_bf16_and_autocast():
    torch.manual_seed(2)
    model = MLP().to(torch.bfloat16)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    outs = thunder_c.jit(model, float8=True)(x)
    assert outs[-1].dtype == torch.bfloat16
    check_layers(model, x, outs)
    # under torch.autocast, the linears run in bfloat16 (prims.linear after converts) and are converted too
    model = MLP()
    x = torch.randn(3, 64)
    jm = thunder_c.jit(model, float8=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs = jm(x)
    assert outs[0].dtype == torch.bfloat16
    text = str(thunder_c.last_traces(jm)[-1])
    assert text.count("prims.scaled_mm(") == 3 and "dtypes.bfloat16)" in text and "prims.linear(" not in text
    bf = [o.float() for o in outs]
    ins = [x.bfloat16().float(), bf[1], bf[3]]
    for layer, inp, out in zip((model.fc1, model.fc2, model.fc3), ins, (bf[0], bf[2], bf[4])):
        w = f32(layer.weight.bfloat16())
        b = None if layer.bias is None else f32(layer.bias.bfloat16())
        want, bound = ref_fp8_linear(f32(inp), w, b, out_eps=2.0 ** -8)
        assert np.all(np.abs(out.double().numpy() - want) <= bound)


def test_transforms_float8_on_traces_and_functions():
    def f(x, w, b):
        return F.linear(torch.tanh(x), w, b)

    x, w, b = torch.randn(6, 16), torch.randn(8, 16), torch.randn(8)
    jf = thunder_c.jit(f)
    jf(x, w, b)
    initial = thunder_c.last_traces(jf)[0]
    t8 = thunder_c.transforms.float8(initial)
    assert str(t8).startswith("# Constructed by Float8") and "ltorch._scaled_mm(" in str(t8)
    assert "ltorch._scaled_mm(" not in str(initial)  # the input is unchanged
    y = thunder_c.jit(t8)(x, w, b)
    want, bound = ref_fp8_linear(f32(torch.tanh(x)), f32(w), f32(b))
    assert np.all(np.abs(y.double().numpy() - want) <= bound + 1e-6 * np.abs(want))
    # a function: float8(fn) is thunder_c.jit(fn, float8=...)
    jf8 = thunder_c.transforms.float8(f, weight_dtype=thunder_c.float8_e5m2, executors=["blas", "eager"])
    y = jf8(x, w, b)
    want, bound = ref_fp8_linear(f32(torch.tanh(x)), f32(w), f32(b), fw=E5)
    assert np.all(np.abs(y.double().numpy() - want) <= bound + 1e-6 * np.abs(want))
    # jit(trace, float8=True) transforms the given trace
    y = thunder_c.jit(initial, float8=True)(x, w, b)
    assert np.all(np.abs(y.double().numpy() - ref_fp8_linear(f32(torch.tanh(x)), f32(w), f32(b))[0]) <= bound * 2)
    with pytest.raises(TypeError):
        thunder_c.transforms.float8(initial, executors=["eager"])


# ---- the CLI -----------------------------------------------------------------------------------------

PROGRAM = '''def computation(x, w1, b1, w2):
  # x: "cpu f32[8, 32]"
  # w1: "cpu f32[24, 32]"
  # b1: "cpu f32[24]"
  # w2: "cpu f32[16, 24]"
  t0 = ltorch.linear(x, w1, b1)  # t0: "cpu f32[8, 24]"
  t1 = ltorch.gelu(t0, approximate='none')  # t1: "cpu f32[8, 24]"
  t2 = ltorch.linear(t1, w2, None)  # t2: "cpu f32[16, 16]"
  return t0, t1, t2
'''.replace("t2: \"cpu f32[16, 16]\"", "t2: \"cpu f32[8, 16]\"")


def test_cli_float8(cli, tmp_path):
    prog = tmp_path / "mlp.py"
    prog.write_text(PROGRAM)
    p = cli("check", prog, "--float8", check=True)
    assert p.stdout.count("ltorch._scaled_mm(") == 2 and "# Constructed by Float8" in p.stdout
    rng = np.random.default_rng(3)
    arrays = {"x": rng.standard_normal((8, 32)), "w1": rng.uniform(-0.2, 0.2, (24, 32)),
              "b1": rng.uniform(-0.1, 0.1, 24), "w2": rng.uniform(-0.2, 0.2, (16, 24))}
    args = []
    for k, v in arrays.items():
        arrays[k] = v.astype(np.float32)
        np.save(tmp_path / f"{k}.npy", arrays[k])
        args += ["--input", f"{k}={tmp_path / (k + '.npy')}"]
    out = tmp_path / "out.safetensors"
    cli("run", prog, *args, "--float8", "--quiet", "--output", out, check=True)
    t = st.read(out)
    y1, h1, y2 = t["output0"], t["output1"], t["output2"]
    want, bound = ref_fp8_linear(arrays["x"], arrays["w1"], arrays["b1"])
    assert np.all(np.abs(y1 - want) <= bound)
    want, bound = ref_fp8_linear(h1, arrays["w2"], None)
    assert np.all(np.abs(y2 - want) <= bound)
    p = cli("run", prog, *args, "--float8", "--float8")
    assert p.returncode == 2 and "--float8 given twice" in p.stderr


# ---- the backward: float8 training (torchao's backward: the cotangent in e5m2, two _scaled_mm) ---------------

def ref_fp8_linear_grads(x32, w32, g32, fx=E4, fw=E4, out_eps=2.0 ** -24):
    """torchao's float8 backward of y = x @ w.T + b for the cotangent g, recomputed in float64 from the
    recipe's codes (the cotangent in e5m2, or e4m3fn against an e5m2 operand; x and w as in the forward):
    ((grad_x, bound), (grad_w, bound), (grad_b, bound)), bounds for float32 accumulation."""
    K, N = x32.shape[-1], w32.shape[0]
    x2 = np.asarray(x32, np.float32).reshape(-1, K)
    g2 = np.asarray(g32, np.float32).reshape(-1, N)
    M = x2.shape[0]
    qx, ix = quantize(fx, x2)
    qw, iw = quantize(fw, w32)
    fgx, fgw = (E4 if fw == E5 else E5), (E4 if fx == E5 else E5)
    qgx, igx = quantize(fgx, g2)
    qgw, igw = quantize(fgw, g2)
    a, b, s = decode(fgx, qgx), decode(fw, qw), float(igx) * float(iw)
    gx = a @ b * s
    bx = (N + 4) * 2.0 ** -24 * (np.abs(a) @ np.abs(b)) * s + out_eps * np.abs(gx) + 1e-30
    a, b, s = decode(fgw, qgw), decode(fx, qx), float(igw) * float(ix)
    gw = a.T @ b * s
    bw = (M + 4) * 2.0 ** -24 * (np.abs(a).T @ np.abs(b)) * s + out_eps * np.abs(gw) + 1e-30
    gb = g2.astype(np.float64).sum(0)
    bb = (M + 2) * 2.0 ** -24 * np.abs(g2).astype(np.float64).sum(0) + out_eps * np.abs(gb) + 1e-30
    return (gx.reshape(x32.shape), bx.reshape(x32.shape)), (gw, bw), (gb, bb)


def assert_within(got, ref, what):
    want, bound = ref
    err = np.abs(got.detach().double().numpy() - want)
    assert np.all(err <= bound), (what, float(np.max(err - bound)))


def code_lines(trace):
    return [ln for ln in str(trace).splitlines() if not ln.strip().startswith("#")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_float8_linear_backward(dtype):
    torch.manual_seed(4)
    lin = torch.nn.Linear(64, 32).to(dtype)
    x = torch.randn(4, 5, 64, dtype=dtype, requires_grad=True)
    jm = thunder_c.jit(lin, float8=True)
    y = jm(x)
    assert y.requires_grad and y.dtype == dtype
    with torch.no_grad():  # the forward is the same program with and without autograd
        assert torch.equal(thunder_c.jit(lin, float8=True)(x), y)
    ct = torch.randn(4, 5, 32).to(dtype)
    (y * ct).sum().backward()  # the cotangent of y is exactly ct
    out_eps = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -24
    gx, gw, gb = ref_fp8_linear_grads(f32(x), f32(lin.weight), f32(ct), out_eps=out_eps)
    assert x.grad.dtype == lin.weight.grad.dtype == dtype
    assert_within(x.grad, gx, "grad_input")
    assert_within(lin.weight.grad, gw, "grad_weight")
    assert_within(lin.bias.grad, gb, "grad_bias")
    # the backward: the cotangent cast to e5m2, grad_input and grad_weight as _scaled_mm
    bwd = thunder_c.last_backward_traces(jm)
    code = code_lines(bwd[0])
    assert sum("ltorch._scaled_mm(" in ln for ln in code) == 2
    assert any("dtype=dtypes.float8_e5m2" in ln and "_grad_output_fp8_" in ln for ln in code)
    assert str(bwd[-1]).count("prims.scaled_mm(") == 2
    fwd = [t for t in thunder_c.last_traces(jm) if str(t).startswith("# Constructed by Grad transform")]
    assert len(fwd) == 1 and sum("ltorch.float8_linear_output(" in ln for ln in code_lines(fwd[0])) == 1


def test_float8_mlp_gradients_and_training():
    torch.manual_seed(5)
    model = MLP()
    x = torch.randn(8, 64)
    jm = thunder_c.jit(model, float8=True)
    outs = jm(x)
    check_layers(model, x, [o.detach() for o in outs])  # the forward is the float8 recipe
    ct = torch.randn(8, 32)
    (outs[-1] * ct).sum().backward()
    # fc3: exactly torchao's recipe on the program's own input (h2) and cotangent
    _, gw, _ = ref_fp8_linear_grads(f32(outs[3]), f32(model.fc3.weight), f32(ct))
    assert_within(model.fc3.weight.grad, gw, "fc3 grad_weight")
    # every parameter: close to the unquantized model's gradients (float64 eager), within fp8 error
    ref = MLP().double()
    ref.load_state_dict(model.state_dict())
    (ref(x.double())[-1] * ct.double()).sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        rel = float(torch.linalg.norm(p.grad.double() - q.grad) / torch.linalg.norm(q.grad))
        assert 1e-4 < rel < 0.25, (name, rel)
    # Adam steps of a regression: the float8 model trains as the float32 one does
    target = torch.randn(8, 32)

    def train(m, fn, steps=40):
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = F.mse_loss(fn(x)[-1], target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    torch.manual_seed(6)
    m8, m32 = MLP(), MLP()
    m32.load_state_dict(m8.state_dict())
    l8, l32 = train(m8, thunder_c.jit(m8, float8=True)), train(m32, m32)
    assert l8[-1] < 0.02 * l8[0] and l32[-1] < 0.02 * l32[0], (l8, l32)
    assert abs(l8[10] - l32[10]) < 0.2 * l32[10], (l8[10], l32[10])


def test_transforms_grad_of_float8_trace():
    def f(x, w, b):
        return F.linear(x, w, b)

    torch.manual_seed(7)
    x, w, b = torch.randn(6, 16), torch.randn(8, 16), torch.randn(8)
    jf = thunder_c.jit(f)
    jf(x, w, b)
    t8 = thunder_c.transforms.float8(thunder_c.last_traces(jf)[0], weight_dtype=thunder_c.float8_e5m2)
    fwd, bwd = thunder_c.transforms.grad(t8)
    assert "ltorch.float8_linear_output(" in str(fwd) and "weight_dtype=dtypes.float8_e5m2" in str(fwd)
    ct = torch.randn(6, 8)
    y, grads = thunder_c.transforms.value_and_grad(t8, x, w, b, cotangents=(ct,))
    want, bound = ref_fp8_linear(f32(x), f32(w), f32(b), fw=E5)
    assert np.all(np.abs(y.double().numpy() - want) <= bound)
    # e5m2 weights: grad_input quantizes the cotangent to e4m3fn (_scaled_mm refuses e5m2 x e5m2)
    assert any("dtype=dtypes.float8_e4m3fn" in ln and "_grad_output_e4m3_fp8_" in ln for ln in code_lines(bwd))
    gx, gw, gb = ref_fp8_linear_grads(f32(x), f32(w), f32(ct), fw=E5)
    for got, ref, what in zip(grads, (gx, gw, gb), ("grad_input", "grad_weight", "grad_bias")):
        assert_within(got, ref, what)
    # a gradient through a plain _scaled_mm is refused
    s = torch.ones((), requires_grad=True)
    with pytest.raises(NotImplementedError, match="derivative of ltorch._scaled_mm is not implemented"):
        thunder_c.jit(lambda s: thunder_c.torch._scaled_mm(torch.ones(4, 8).to(thunder_c.float8_e4m3fn),
                                                           torch.ones(8, 4).to(thunder_c.float8_e4m3fn),
                                                           s, s, out_dtype=torch.float32))(s)
