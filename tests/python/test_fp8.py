"""fp8 from Python: torch.float8_e4m3fn / float8_e5m2 tensors into and out of jitted code, casts to
fp8 inside it, torch._scaled_mm (thunder_c.torch._scaled_mm), the float8 training transform
(thunder_c.jit(..., float8=...), thunder_c.transforms.float8 on traces, functions and modules) and the
CLI's --float8.

References are independent of thunder-c: fp8 codes are decoded from their bit fields with integer
arithmetic in NumPy, casts are a brute-force round-to-nearest-even search over the codes (with
PyTorch's overflow rules: e4m3fn saturates at 448 since torch 2.12, e5m2 overflows to inf) and torch
2.14's own cast, products are float64 sums of the decoded values (and torch's CPU _scaled_mm where the
two must agree), and the float8 recipe (amax -> scale = M / clamp(amax, 1e-12) -> saturated cast ->
decode with 1/scale) is recomputed in float64 from the same float32 values, so the fp8 codes and scales
match the program's exactly and the only tolerance is float32 accumulation (plus the output dtype's
rounding)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import safetensors_ref as st
from conftest import import_thunder_c

thunder_c = import_thunder_c()
E4, E5 = "e4m3fn", "e5m2"
MAXV = {E4: 448.0, E5: 57344.0}


def th_dtype(fmt):
    return thunder_c.float8_e4m3fn if fmt == E4 else thunder_c.float8_e5m2


def torch_dtype(fmt):
    return torch.float8_e4m3fn if fmt == E4 else torch.float8_e5m2


def codes(t):
    """The raw codes of an fp8 torch tensor (any strides), as a NumPy uint8 array."""
    assert t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2), t.dtype
    return t.view(torch.uint8).numpy()


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
    codes 0 .. first-overflow (e4m3fn: 480 = a NaN code; e5m2: 65536 = inf), ties to the even code.
    e4m3fn's cast saturates (torch >= 2.12): anything beyond 448, inf included, gives 448."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64).ravel()
    over = 480.0 if fmt == E4 else 65536.0
    over_code = 0x7F if fmt == E4 else 0x7C
    grid = decode(fmt, np.arange(over_code + 1))
    grid[over_code] = over
    a = np.abs(x)
    if saturate or fmt == E4:
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
def test_casts_return_fp8_tensors(fmt, executors):
    def f(x):
        plain = x.to(th_dtype(fmt))
        sat = torch.clamp(x, -MAXV[fmt], MAXV[fmt]).to(th_dtype(fmt))
        return plain, sat

    jf = thunder_c.jit(f, executors=executors)
    x = torch.from_numpy(EDGE.copy())
    plain, sat = jf(x)
    assert plain.dtype == sat.dtype == torch_dtype(fmt) and plain.shape == (len(EDGE),)
    assert same_codes(fmt, codes(plain), encode(fmt, EDGE))
    assert same_codes(fmt, codes(sat), encode(fmt, EDGE, saturate=True))
    # bit for bit what torch's own casts give (NaN codes included)
    assert np.array_equal(codes(plain), codes(x.to(torch_dtype(fmt))))
    assert np.array_equal(codes(sat), codes(torch.clamp(x, -MAXV[fmt], MAXV[fmt]).to(torch_dtype(fmt))))
    assert f"f8_{fmt}[{len(EDGE)}]" in str(thunder_c.last_traces(jf)[-1])


@pytest.mark.parametrize("executors", EXECUTORS, ids=["eager", "fuser"])
def test_casts_match_torch_on_random_and_special_values(executors):
    """Every float32 exponent (random mantissas and signs), the neighbours of the overflow edges and the
    subnormal ties, through f32, bf16, f16 and f64 sources, against torch 2.14's casts bit for bit
    (tests/unit/sweep_dtype.c sweeps all 2^32 float32 patterns against the integer reference)."""
    g = torch.Generator().manual_seed(11)
    bits = torch.randint(0, 2 ** 32, (1 << 18,), generator=g, dtype=torch.int64).to(torch.int32)
    edges = torch.tensor([448.0, 464.0, 480.0, 57344.0, 61440.0, 2.0 ** -10, 2.0 ** -17], dtype=torch.float32)
    nb = edges.view(torch.int32)
    near = torch.cat([nb + d for d in range(-3, 4)]).view(torch.float32)
    x = torch.cat([bits.view(torch.float32), near, -near])

    def f(x):
        return x.to(thunder_c.float8_e4m3fn), x.to(thunder_c.float8_e5m2)

    jf = thunder_c.jit(f, executors=executors)
    for src in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        xs = x.to(src)
        q4, q5 = jf(xs)
        assert np.array_equal(codes(q4), codes(xs.to(torch.float8_e4m3fn))), src
        assert np.array_equal(codes(q5), codes(xs.to(torch.float8_e5m2))), src


def test_e4m3fn_saturates_as_torch():
    """torch 2.14's float8_e4m3fn cast saturates (1000, inf, -1e30 -> 448, 448, -448); NaN stays NaN;
    e5m2 still overflows to inf. thunder-c's cast is the same function."""
    x = torch.tensor([1000.0, float("inf"), -1e30, 464.0, 464.0001, 479.99, 480.0, float("nan"), -float("nan")])
    want4 = [0x7E, 0x7E, 0xFE, 0x7E, 0x7E, 0x7E, 0x7E, 0x7F, 0xFF]
    assert codes(x.to(torch.float8_e4m3fn)).tolist() == want4  # the rule, as torch 2.14 has it
    for ex in EXECUTORS:
        q4, q5 = thunder_c.jit(lambda x: (x.to(torch.float8_e4m3fn), x.to(torch.float8_e5m2)), executors=ex)(x)
        assert codes(q4).tolist() == want4
        assert np.array_equal(codes(q5), codes(x.to(torch.float8_e5m2)))
        assert codes(q5)[:3].tolist() == [0x64, 0x7C, 0xFC]  # 1024 (1000 rounded), inf, -inf


def test_reference_anchors():
    """The NumPy reference on known e4m3fn values: round to nearest even, saturation at 448 (torch >= 2.12), NaN."""
    assert list(decode(E4, encode(E4, [4.48, -8.96, 2.24, 450.0]))) == [4.5, -9.0, 2.25, 448.0]
    assert decode(E4, encode(E4, [500.0]))[0] == 448.0 and decode(E4, encode(E4, [-np.inf]))[0] == -448.0
    assert np.isnan(decode(E4, encode(E4, [np.nan]))[0])
    assert decode(E4, encode(E4, [464.0]))[0] == 448.0  # tie to even
    assert decode(E5, encode(E5, [60000.0]))[0] == 57344.0 and np.isinf(decode(E5, encode(E5, [70000.0]))[0])
    assert decode(E4, encode(E4, [np.inf], saturate=True))[0] == 448.0
    assert encode(E4, [-0.0])[0] == 0x80


# ---- fp8 tensors across the boundary ----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", [E4, E5])
def test_fp8_inputs_and_outputs_cross_without_copies(fmt):
    """fp8 torch tensors go in and come out by DLPack (torch 2.14 exports and imports kDLFloat8_e4m3fn /
    kDLFloat8_e5m2): every code reaches the program unchanged, views keep their strides, an input
    returned is the caller's memory, and decoding in the program is the format's value of each code."""
    dt = torch_dtype(fmt)
    allc = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    q = allc.view(dt)

    def f(q, qt):
        return q, q.float(), qt.t(), qt.to(torch.bfloat16), q[::2], q.reshape(16, 16).t().contiguous()

    qt = q.reshape(16, 16).t()  # a transposed (non-contiguous) fp8 view
    jf = thunder_c.jit(f)
    same, dec, back_t, bf, sl, tc = jf(q, qt)
    assert same.dtype == dt and same.data_ptr() == q.data_ptr()  # the input itself
    ref = decode(fmt, np.arange(256))
    got = dec.numpy().astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(got[~np.isnan(ref)], ref[~np.isnan(ref)])
    assert np.array_equal(np.signbit(got[ref == 0]), np.signbit(ref[ref == 0]))  # -0.0 is 0x80
    assert torch.equal(dec, q.float()) or np.array_equal(np.isnan(dec.numpy()), np.isnan(q.float().numpy()))
    assert back_t.dtype == dt and np.array_equal(codes(back_t.contiguous()), codes(q.reshape(16, 16)).ravel().reshape(16, 16))
    assert torch.equal(bf[~bf.isnan()], qt.to(torch.bfloat16)[~bf.isnan()])
    assert sl.dtype == dt and np.array_equal(codes(sl.contiguous()), np.arange(0, 256, 2))
    assert tc.dtype == dt and tc.is_contiguous() and np.array_equal(codes(tc), codes(q.reshape(16, 16).t().contiguous()))
    inputs = thunder_c.last_traces(jf)[0]
    assert f'q: "cpu f8_{fmt}[256]"' in str(inputs) and f'qt: "cpu f8_{fmt}[16, 16]"' in str(inputs)
    # the other format and uint8 codes are other cache entries, each read as what it is
    other = torch_dtype(E5 if fmt == E4 else E4)
    assert jf(q.view(other), qt.view(other))[0].dtype == other and thunder_c.cache_misses(jf) == 2
    u8, u8f = jf(q.view(torch.uint8), qt.view(torch.uint8))[:2]
    assert u8.dtype == torch.uint8 and u8f.tolist() == list(range(256)) and thunder_c.cache_misses(jf) == 3


def test_fp8_outputs_under_autograd_do_not_require_grad():
    """The grad transform does not differentiate through fp8 values, so an fp8 output of a call under
    autograd does not require grad (a backward through it raises PyTorch's error instead of silently
    giving no gradient); the float outputs of the same call differentiate as usual."""
    x = torch.randn(4, requires_grad=True)
    q, y = thunder_c.jit(lambda x: ((x * 2).to(torch.float8_e4m3fn), x * 3))(x)
    assert q.dtype == torch.float8_e4m3fn and not q.requires_grad and y.requires_grad
    assert np.array_equal(codes(q), codes((x.detach() * 2).to(torch.float8_e4m3fn)))
    with pytest.raises(RuntimeError, match="does not require grad"):
        q.float().sum().backward()
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((4,), 3.0))


# ---- a worked quantization example: amax, scale, saturated cast, decode ----------------------------------

@pytest.mark.parametrize("executors", EXECUTORS, ids=["eager", "fuser"])
def test_worked_example(executors):
    def f(x):
        amax = x.abs().max()
        s = (448 / torch.clamp(amax, min=1e-12)).float()
        q = torch.clamp(x * s, -448, 448).to(thunder_c.float8_e4m3fn)
        return q, q.float() / s

    jf = thunder_c.jit(f, executors=executors)
    q, y = jf(torch.tensor([1.0, -2.0, 0.5, 100.0]))
    assert q.dtype == torch.float8_e4m3fn and q.tolist() == [4.5, -9.0, 2.25, 448.0]
    assert list(decode(E4, codes(q))) == [4.5, -9.0, 2.25, 448.0]
    np.testing.assert_allclose(y.numpy(), [1.00446, -2.00893, 0.50223, 100.0], atol=1e-4, rtol=0)
    assert not np.array_equal(y.numpy()[:3], [1.0, -2.0, 0.5])  # the lossy round trip stays


# ---- _scaled_mm ------------------------------------------------------------------------------------------

def fp8_values(fmt, shape, rng):
    """float32 values that are exactly fp8 values of fmt (so x.to(fp8) is exact), subnormals included,
    at most 16 in magnitude (so float16 outputs do not overflow)."""
    allv = decode(fmt, np.arange(256))
    ok = allv[np.isfinite(allv) & (np.abs(allv) <= 16)]
    return torch.from_numpy(rng.choice(ok, size=shape).astype(np.float32))


def scaled_mm_bracket(want, tol, out_dtype):
    """What an output may be when the exact result is `want` and float32 accumulation is off by at most
    `tol`: [lo, hi] per element (an fp8 output: the casts of want -+ tol, as casting is monotone)."""
    if out_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        fmt = E4 if out_dtype == torch.float8_e4m3fn else E5
        lo = decode(fmt, encode(fmt, want - tol)).reshape(want.shape)
        hi = decode(fmt, encode(fmt, want + tol)).reshape(want.shape)
        return lo, hi
    eps = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[out_dtype]
    t = tol + eps * np.abs(want) + (2.0 ** -24 if out_dtype == torch.float16 else 0)
    return want - t, want + t


def torch_fp8_out_via_float16():
    """Whether torch's CPU _scaled_mm makes an fp8 output through float16 (oneDNN's fp8 GEMM, which
    torch takes on CPUs with AMX) rather than by casting its float32 result (its other CPU kernel): an
    overflowing e4m3fn output is then NaN, not saturated at 448 as torch's casts do."""
    one = torch.ones((1, 1)).to(torch.float8_e4m3fn)
    y = torch._scaled_mm(one, one, torch.tensor(500.0), torch.tensor(1.0))
    return bool(torch.isnan(y.float()).all())


def torch_scaled_mm_bracket(want, tol, out_dtype):
    """What torch's own CPU kernel may give: scaled_mm_bracket, widened for an fp8 output made through
    float16 (a second rounding) when torch_fp8_out_via_float16()."""
    lo, hi = scaled_mm_bracket(want, tol, out_dtype)
    if out_dtype in (torch.float8_e4m3fn, torch.float8_e5m2) and torch_fp8_out_via_float16():
        fmt = E4 if out_dtype == torch.float8_e4m3fn else E5
        h = lambda x: np.float16(x).astype(np.float64)  # noqa: E731
        lo = np.minimum(lo, decode(fmt, encode(fmt, h(want - tol))).reshape(want.shape))
        hi = np.maximum(hi, decode(fmt, encode(fmt, h(want + tol))).reshape(want.shape))
    return lo, hi


def within(got, bracket):
    g = got.double().numpy()
    return bool(np.all((bracket[0] <= g) & (g <= bracket[1])))


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (1, 16, 7), (5, 1, 3), (3, 40, 1), (17, 33, 9), (64, 300, 40)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16, None, torch.float8_e5m2])
@pytest.mark.parametrize("bias", [False, True])
def test_scaled_mm(M, K, N, out_dtype, bias):
    """torch._scaled_mm recorded through jit (PyTorch 2.x's signature; out_dtype=None is a's dtype, an
    fp8 output), against the exact float64 product of the fp8 codes and against torch's CPU kernel."""
    rng = np.random.default_rng(M * 1000 + K * 10 + N)
    fa, fb = (E4, E5) if K % 2 else (E4, E4)
    a, bt = fp8_values(fa, (M, K), rng), fp8_values(fb, (N, K), rng)
    sa, sb = torch.tensor(0.03), torch.tensor([1.7])
    want_dt = out_dtype or torch_dtype(fa)
    fp8_out = want_dt in (torch.float8_e4m3fn, torch.float8_e5m2)
    bias_dt = torch.bfloat16 if fp8_out else want_dt
    bvec = torch.from_numpy(rng.uniform(-3, 3, N).astype(np.float32)).to(bias_dt) if bias else None

    def f(a, bt, sa, sb, *rest):
        aq, bq = a.to(th_dtype(fa)), bt.to(th_dtype(fb))
        kw = {} if out_dtype is None else {"out_dtype": out_dtype}
        return torch._scaled_mm(aq, bq.t(), sa, sb, rest[0] if rest else None, **kw), aq, bq

    jf = thunder_c.jit(f)
    y, aq, bq = jf(a, bt, sa, sb, *([bvec] if bias else []))
    assert any(b.qualname == "ltorch._scaled_mm" for b in thunder_c.last_traces(jf)[0].bound_symbols)
    assert y.dtype == want_dt and y.shape == (M, N)
    da, db = decode(fa, codes(aq)), decode(fb, codes(bq))  # b is the transpose: non-contiguous [K, N]
    assert np.array_equal(da, a.numpy()) and np.array_equal(db, bt.numpy())
    p = da[:, None, :] * db[None, :, :]
    s = float(np.float32(0.03)) * float(np.float32(1.7))
    b = bvec.double().numpy() if bias else 0.0
    want = p.sum(-1) * s + b
    tol = (K + 3) * 2.0 ** -24 * (np.abs(p).sum(-1) * s + np.abs(b)) + 2.0 ** -24
    bracket = scaled_mm_bracket(want, tol, want_dt)
    assert within(y, bracket)
    # torch 2.14 runs _scaled_mm on the CPU: its result is in the same bracket (it scales the operands
    # before its float32 GEMM, thunder-c the sum, so the two may differ in the last bits), widened by
    # the float16 step of its oneDNN kernel on CPUs with AMX
    kw = {} if out_dtype is None else {"out_dtype": out_dtype}
    eager = torch._scaled_mm(aq, bq.t(), sa, sb, bvec, **kw)
    assert eager.dtype == want_dt and within(eager, torch_scaled_mm_bracket(want, tol, want_dt))


def test_scaled_mm_bit_identical_to_torch():
    """With power-of-two scales and small codes every step is exact, so thunder-c and torch's CPU kernel
    agree bit for bit: every output dtype (fp8 ones saturating / overflowing as torch's casts), a bias,
    an ignored scale_result, use_fast_accum, row- and column-major operands, e5m2 inputs."""
    rng = np.random.default_rng(5)
    M, K, N = 24, 48, 20
    a = fp8_values(E4, (M, K), rng).to(torch.float8_e4m3fn)
    b5 = fp8_values(E5, (N, K), rng).to(torch.float8_e5m2)
    b4 = fp8_values(E4, (K, N), rng).to(torch.float8_e4m3fn)
    sa, sb, sr = torch.tensor(0.25), torch.tensor([[8.0]]), torch.tensor(4.0)
    bias_bf = torch.from_numpy(rng.integers(-8, 8, N).astype(np.float32)).to(torch.bfloat16)
    big = torch.tensor(64.0)  # pushes e4m3fn outputs past 448 (saturated) and e5m2 past 57344 (inf)

    def f(a, b5, b4, sa, sb, sr, bias_bf, big):
        bt = b5.t()
        return (torch._scaled_mm(a, bt, sa, sb, out_dtype=torch.float32),
                torch._scaled_mm(a, bt, sa, sb, bias=bias_bf, out_dtype=torch.bfloat16, use_fast_accum=True),
                torch._scaled_mm(a, bt, sa, sb, scale_result=sr, out_dtype=torch.float16),
                torch._scaled_mm(a, b4, sa, sb),                                  # default: e4m3fn out
                torch._scaled_mm(a, b4, big, sb, bias=bias_bf),                   # saturates at 448
                torch._scaled_mm(a, b4, big, sb, out_dtype=torch.float8_e5m2),     # overflows to inf
                torch._scaled_mm(a, bt, sa, sb, out_dtype=torch.float64))

    outs = thunder_c.jit(f)(a, b5, b4, sa, sb, sr, bias_bf, big)
    with torch.no_grad():
        eager = f(a, b5, b4, sa, sb, sr, bias_bf, big)
    # torch's oneDNN kernel (CPUs with AMX) makes an fp8 output through float16, a second rounding,
    # and turns an overflow into NaN: there the e4m3fn outputs are compared with torch's cast of the
    # exact result (exact in float32 here), which thunder-c's kernel is
    via_f16 = torch_fp8_out_via_float16()
    a64, b64 = a.double(), b4.double()
    exact = {3: a64 @ b64 * 2.0, 4: a64 @ b64 * 512.0 + bias_bf.double()}
    for i, (g, e) in enumerate(zip(outs, eager)):
        assert g.dtype == e.dtype and g.shape == e.shape, i
        if via_f16 and i in exact:
            e = exact[i].float().to(torch.float8_e4m3fn)
        assert torch.equal(g.view(torch.uint8) if g.element_size() == 1 else g,
                           e.view(torch.uint8) if e.element_size() == 1 else e), i
    assert (codes(outs[4]) & 0x7F == 0x7E).any() and torch.isinf(outs[5].float()).any()


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
    sr = torch.ones(())
    with pytest.raises(NotImplementedError, match=r"scale_result with an fp8 output \(out_dtype=float8_e4m3fn\)"):
        call(e4, e4, scale_result=sr)  # the default out_dtype: a's
    with pytest.raises(NotImplementedError, match=r"scale_result with an fp8 output \(out_dtype=float8_e5m2\)"):
        call(e4, e4, scale_result=sr, out_dtype=e5)
    with pytest.raises(RuntimeError, match="scale_result must be a float32 tensor with one element"):
        call(e4, e4, scale_result=torch.ones(2), out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="Bias must be a vector of size 2"):
        call(e4, e4, bias=torch.ones(3, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="Bias must be BFloat16 to compute BFloat16 output, but got Float"):
        call(e4, e4, bias=torch.ones(2), out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="Bias must be BFloat16 or Float to compute Float8_e4m3fn output, but got Half"):
        call(e4, e4, bias=torch.ones(2, dtype=torch.float16))
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


def test_transforms_float8_module_then_jit():
    """thunder_c.transforms.float8(module) is a ThunderModule running the float8 program; jitting it again
    (jit(float8(module))) inlines it, and its linears are still converted with its options: the same
    program as jit(module, float8=...), bit for bit, the filter seeing the same linears and names. A
    float8-jitted function called inside another jitted function keeps its float8 the same way."""
    torch.manual_seed(8)
    model = MLP()
    x = torch.randn(6, 64)
    with torch.no_grad():
        want = thunder_c.jit(model, float8={"weight_dtype": thunder_c.float8_e5m2})(x)
        seen = []
        f8 = thunder_c.transforms.float8(model, weight_dtype=thunder_c.float8_e5m2,
                                         filter=lambda info: seen.append(info) or info["module"] != "fc3")
        jm = thunder_c.jit(f8)
        got = jm(x)
        check_layers(model, x, got, converted=("fc1", "fc2"), fw=E5)
        unconverted = thunder_c.jit(model, float8={"weight_dtype": "e5m2", "filter": lambda i: i["module"] != "fc3"})(x)
        for g, w in zip(got, unconverted):
            assert torch.equal(g, w)
        assert [(i["index"], i["weight_param"], i["module"]) for i in seen] == \
            [(0, "fc1.weight", "fc1"), (1, "fc2.weight", "fc2"), (2, "fc3.weight", "fc3")]
        assert str(thunder_c.last_traces(jm)[-1]).count("prims.scaled_mm(") == 2
        assert not torch.equal(thunder_c.jit(model)(x)[0], got[0])  # not the full-precision program
        for g, w in zip(thunder_c.jit(thunder_c.transforms.float8(model, weight_dtype="e5m2"))(x), want):
            assert torch.equal(g, w)

        # a float8 function inlined into another jitted function
        jlin = thunder_c.jit(F.linear, float8=True)
        w, b = model.fc1.weight, model.fc1.bias
        outer = thunder_c.jit(lambda x, w, b: jlin(torch.tanh(x), w, b) * 2 + F.linear(x, w, b))
        y = outer(x, w, b)
        ref = thunder_c.jit(lambda x, w, b: F.linear(torch.tanh(x), w, b), float8=True)(x, w, b) * 2 + F.linear(x, w, b)
        torch.testing.assert_close(y, ref, rtol=1e-6, atol=1e-5)
        code = code_lines(thunder_c.last_traces(outer)[1])
        assert sum("ltorch._scaled_mm(" in ln for ln in code) == 1 and sum("ltorch.linear(" in ln for ln in code) == 1
    # and trains: the float8 backward runs through the inlined module
    jm = thunder_c.jit(thunder_c.transforms.float8(model))
    model.zero_grad()
    (jm(x)[-1] * torch.ones(6, 32)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    # grad_input and grad_weight per layer, but no grad_input for x (which does not require grad)
    assert str(thunder_c.last_backward_traces(jm)[-1]).count("prims.scaled_mm(") == 5


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
