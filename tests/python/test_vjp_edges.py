"""Gradients at extreme inputs against PyTorch eager: the vjp rules of silu, sigmoid, gelu, logsumexp,
pow, atan2, clamp, prod, max / min, lgamma, the var / std family, layer_norm and rms_norm, at +-inf,
NaN, +-0, subnormals, ties, magnitudes up to 3e38 and rows at large offsets.

Each test runs one jitted loss (a sum of the op's results over one or more inputs, so each input's
gradient is one op's) in float32, float64 and bfloat16, with the default executors ("fused") and with
the eager executor alone, two ways: loss.backward() through thunder_c.jit's autograd, and
thunder_c.transforms.value_and_grad on the jitted function's initial trace. Every gradient must have
eager's NaN positions and eager's infinities (sign included); finite values agree within a per-dtype
tolerance (bfloat16: one rounding of a float32 computation against eager's). The oracle is the
installed torch (2.14); where its values are inaccurate (layer_norm's backward at large offsets), the
exact gradient (mpmath) is, with eager's NaN positions and infinities still required."""
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()

# var/std with N <= correction is what these tests are about
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning")

INF, NAN = math.inf, math.nan
DTYPES = [torch.float32, torch.float64, torch.bfloat16]
EXECUTORS = {"fused": None, "eager": ["eager"]}
PATHS = ["backward", "value_and_grad"]
# (rtol, atol) of finite values; atol covers float32 kernels whose tails differ from eager's by ~1e-8
# (eager's vectorized erf has an absolute error of ~1e-7 near -6, where gelu's gradient is ~1e-8)
TOL = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-10, 1e-12), torch.bfloat16: (1.6e-2, 1e-3)}


def edges(dtype, extra=()):
    """The extreme values of one dtype as a 1-D tensor: infinities, the largest finite magnitudes,
    large and moderate values, +-1, subnormals, signed zeros and NaN."""
    big, tiny = [3e38], [1e-40]
    if dtype == torch.float64:
        big, tiny = [3e38, 1e300], [1e-40, 1e-310]
    mags = sorted(set(big + [1e8, 1e4, 4096.0, 100.0, 20.0, 1.0] + list(extra) + tiny), reverse=True)
    vals = [-INF] + [-m for m in mags] + [-0.0, 0.0] + mags[::-1] + [INF, NAN]
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def t(vals, dtype):
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def eager_grads(fn, inputs, requires=None):
    """fn's gradients with respect to its inputs (requires: one bool per input, default all; None where
    not requested)."""
    requires = requires or [True] * len(inputs)
    xs = [x.clone().requires_grad_(r) for x, r in zip(inputs, requires)]
    fn(*xs).backward()
    return [x.grad for x in xs]


def thunder_grads(fn, inputs, executors, path, requires=None):
    requires = requires or [True] * len(inputs)
    if path == "backward":
        xs = [x.clone().requires_grad_(r) for x, r in zip(inputs, requires)]
        thunder_c.jit(fn, executors=executors)(*xs).backward()
        return [x.grad for x in xs]
    jf = thunder_c.jit(fn, executors=executors)
    jf(*inputs)
    _, grads = thunder_c.transforms.value_and_grad(thunder_c.last_traces(jf)[0], *inputs, executors=executors,
                                                   requires_grad=list(requires))
    return list(grads)


def assert_same_edges(got, want, x, what, tol):
    """got and want (gradients of input x) have the same NaN positions, the same infinities and close
    finite values; the message lists the inputs where they differ."""
    assert got is not None, f"{what}: no gradient"
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype} {tuple(got.shape)}, eager's {want.dtype} {tuple(want.shape)}"
    g, w = got.double().flatten(), want.double().flatten()
    rtol, atol = tol
    finite = w.isfinite() & g.isfinite()
    close = torch.zeros_like(finite)
    close[finite] = (g[finite] - w[finite]).abs() <= atol + rtol * w[finite].abs()
    ok = (g.isnan() & w.isnan()) | (~finite & (g == w)) | close
    if not bool(ok.all()):
        bad = [(x.double().flatten()[i].item() if x.numel() == g.numel() else i, w[i].item(), g[i].item())
               for i in torch.nonzero(~ok).flatten().tolist()]
        pytest.fail(f"{what}: (input, eager, thunder_c) where they differ: {bad[:12]}", pytrace=False)


def check(fn, inputs, dtype, executors, path, tols=None, oracle=None):
    """fn's gradients with respect to every input against eager's (tols: per-input (rtol, atol) overrides;
    oracle: a wider dtype for eager to compute in instead, from the same values, its gradients rounded
    to dtype)."""
    if oracle is None:
        want = eager_grads(fn, inputs)
    else:
        want = [g.to(dtype) for g in eager_grads(fn, [x.to(oracle) for x in inputs])]
    got = thunder_grads(fn, inputs, EXECUTORS[executors], path)
    for i, (g, w) in enumerate(zip(got, want)):
        tol = (tols or {}).get(i, TOL[dtype])
        assert_same_edges(g, w, inputs[i], f"input {i} ({dtype}, {executors}, {path})", tol)


def configs(dtypes=DTYPES):
    cases = [(d, e, p) for d in dtypes for e in EXECUTORS for p in PATHS]
    return pytest.mark.parametrize("dtype,executors,path", cases, ids=lambda v: str(v).replace("torch.", ""))


# ---- activations --------------------------------------------------------------------------------------

@configs()
def test_silu_gradient_at_extreme_inputs(dtype, executors, path):
    # x / (1 + exp(-x)) differentiated through its prims is inf / inf where exp(-x) overflows
    check(lambda x: F.silu(x).sum(), [edges(dtype)], dtype, executors, path)


@configs()
def test_sigmoid_gradient_at_extreme_inputs(dtype, executors, path):
    # from the output, g * (1 - y) * y: 0 where y rounds to 0 or 1
    check(lambda x: torch.sigmoid(x).sum(), [edges(dtype)], dtype, executors, path)


@configs()
def test_gelu_gradient_at_extreme_inputs(dtype, executors, path):
    def f(a, b):
        return F.gelu(a).sum() + F.gelu(b, approximate="tanh").sum()

    x = edges(dtype, extra=(1e13, 2e19, 1e20, 6.0))  # x^3 and x^2 overflow float32 in turn
    check(f, [x, x.clone()], dtype, executors, path)


# ---- logsumexp ----------------------------------------------------------------------------------------

@configs()
def test_logsumexp_gradient_with_infinite_and_huge_rows(dtype, executors, path):
    rows = t([[-INF, -INF, -INF], [INF, 1, 2], [INF, INF, 0], [-INF, 0, 1], [NAN, 0, 1], [3e38, 3e38, 0],
              [-3e38, -3e38, -3e38], [1e4, -1e4, 0], [1e-40, -0.0, 0.0]], dtype)

    def f(a, b, c):
        return (torch.logsumexp(a, 1).sum() + torch.logsumexp(b, 0, keepdim=True).sum()
                + torch.logsumexp(c, (0, 1)))

    check(f, [rows, rows.t().contiguous(), rows[3:].clone()], dtype, executors, path)


# ---- pow and atan2 ------------------------------------------------------------------------------------

@configs()
def test_pow_gradient_at_signed_zero_and_infinity(dtype, executors, path):
    exps = [0.5, -0.5, 1.5, -1.5, 2, 3, -1, -2, 0, 2.5]

    def f(*xs):
        loss = sum((x ** e).sum() for x, e in zip(xs, exps))
        k = len(exps)
        loss = loss + torch.pow(xs[k], xs[k + 1]).sum()  # tensor base and exponent
        return loss + (2.0 ** xs[k + 2]).sum() + (0.0 ** xs[k + 3]).sum() + ((-2.0) ** xs[k + 4]).sum()

    x = edges(dtype, extra=(0.5, 2.0))
    inputs = ([x.clone() for _ in range(len(exps))] + [x.abs().clone(), x.flip(0).clone()]
              + [x.clone() for _ in range(3)])
    check(f, inputs, dtype, executors, path)


@configs()
def test_atan2_gradient_where_the_denominator_vanishes(dtype, executors, path):
    x = edges(dtype)

    def f(y1, x1, y2, x2):
        return torch.atan2(y1, x1).sum() + torch.atan2(y2, x2).sum()

    check(f, [x, torch.zeros_like(x), torch.zeros_like(x), x.clone()], dtype, executors, path)


@configs()
def test_clamp_gradient_at_nans_and_bounds(dtype, executors, path):
    # number bounds: g where min < x < max (0 at a NaN and at the bounds); tensor bounds: halved at a
    # tie, and each bound's own gradient
    x = t([-INF, -1, 0, 0.5, 1, 2, INF, NAN, -0.0], dtype)
    lo, hi = torch.zeros_like(x), torch.ones_like(x)

    def f(a, b, c, d, e, l1, h1, l2, h2):
        return (torch.clamp(a, 0.0, 1.0).sum() + torch.clamp(b, min=0.0).sum() + torch.clamp(c, max=1.0).sum()
                + torch.clamp(d, l1, h1).sum() + torch.clamp(e, l2).sum() + torch.clamp(e, max=h2).sum())

    check(f, [x, x.clone(), x.clone(), x.clone(), x.clone(), lo, hi, lo.clone() + 2, hi.clone()], dtype, executors,
          path)


# ---- prod, max, min -----------------------------------------------------------------------------------

@configs()
def test_prod_gradient_with_zeros_infinities_and_nans(dtype, executors, path):
    # the product of the other elements: never 0 / 0 or inf / inf, and no overflow the others' product
    # does not have (1e20 * -1e20 overflows float32; the others of 1e20 multiply to -2e20)
    rows = t([[-INF, -INF, -INF, 1], [INF, 1, 2, 3], [NAN, 0, 1, 2], [1e20, -1e20, 1, 2], [0, 0, 1, 2], [0, 1, 2, 3],
              [2, 3, 4, 5], [0, INF, 1, 2], [INF, INF, 2, 1], [-0.0, 3, 1, 1]], dtype)
    check(lambda a, b: a.prod(1).sum() + b.prod(0).sum(), [rows, rows.clone()], dtype, executors, path)


@configs()
def test_max_and_min_gradients_at_ties_and_nans(dtype, executors, path):
    # over a dim: to the index returned; over everything: evenly among the ties (or the NaNs)
    rows = t([[1, 3, 3, 2], [NAN, 1, NAN, 0], [INF, INF, 1, -INF], [-INF, -INF, -INF, -INF], [2, 2, 2, 2],
              [0, -0.0, 0, -1]], dtype)

    def f(a, b, c, d, e, k):
        return (torch.max(a, 1)[0].sum() + torch.min(b, 0, keepdim=True).values.sum() + torch.max(c) + torch.min(d[1])
                + torch.max(e, e[4:5]).sum() + torch.min(k, -1)[0].sum())

    check(f, [rows.clone() for _ in range(6)], dtype, executors, path)


# ---- lgamma -------------------------------------------------------------------------------------------

@configs()
def test_lgamma_gradient_at_poles_and_large_negative_inputs(dtype, executors, path):
    # digamma: NaN at the negative integers, -+inf at +-0; the reflection keeps its precision at
    # -999999.5 (float32 has no fractional bits left in pi * x there)
    x = torch.cat([edges(dtype), t([-999999.5, -100.5, -3.25, -2, 0.5, 2.5, 1e-3], dtype)])
    check(lambda a: torch.lgamma(a).sum(), [x], dtype, executors, path)


# ---- var / std ----------------------------------------------------------------------------------------

@configs()
def test_var_gradient_when_the_divisor_is_not_positive(dtype, executors, path):
    x3 = t([1, 2, 3], dtype)

    def f(a, b, c, d, e, g, h, k, m, n):
        return (torch.var(a, correction=5)       # dim=None, N < correction: g * where(x == mean, nan, inf)
                - torch.var(b, correction=5)     # a negative cotangent: -inf
                + torch.var(c, 0, correction=5)  # dim given: 2 / (N - correction), finite
                + torch.var(d, correction=3)     # N == correction
                + torch.var(e)                   # N == 1, unbiased
                + torch.var(g, True)             # the var(input, unbiased) overload
                + torch.var(h)                   # 0-dim
                + torch.var(k, 1, keepdim=True, correction=4).sum()
                + torch.var(m, correction=6)     # all dims of a 2-D tensor
                + torch.var(n, correction=5))    # x == mean everywhere: nan

    rows = t([[1, 2, 3], [4, 4, 4]], dtype)
    inputs = [x3, x3.clone(), x3.clone(), x3.clone(), t([4], dtype), t([4], dtype), t(2.0, dtype), rows,
              rows.clone(), t([2, 2, 2], dtype)]
    check(f, inputs, dtype, executors, path)


@configs()
def test_std_gradient_at_zero_and_infinite_std(dtype, executors, path):
    def f(a, b, c, d, e):
        return (torch.std(a)                      # std == 0: gradient 0, not nan
                + torch.std(b, 1).sum()           # one constant row
                + torch.std(c, correction=5)      # std == inf (the divisor clamped at 0)
                + torch.std(d)                    # N == 1: nan
                + sum(torch.std_mean(e)))         # std == 0 and the mean's gradient

    inputs = [t([2, 2, 2], dtype), t([[1, 2, 3], [5, 5, 5]], dtype), t([1, 2, 3], dtype), t([7], dtype),
              t([-3, -3, -3, -3], dtype)]
    check(f, inputs, dtype, executors, path)


@configs()
def test_var_mean_gradient_when_the_divisor_is_not_positive(dtype, executors, path):
    def f(a, b, c, d):
        v, m = torch.var_mean(a, correction=5)
        v2, m2 = torch.var_mean(b, 1, keepdim=True, correction=3)
        s3, m3 = torch.std_mean(c, correction=5)
        return v + m + (v2 * m2).sum() + s3 + m3 + torch.var_mean(d, correction=2)[1]  # the mean only

    inputs = [t([1, 2, 3], dtype), t([[1, 2, 3], [0, 0, 0]], dtype), t([1, 2, 3], dtype), t([1, 2], dtype)]
    check(f, inputs, dtype, executors, path)


@configs()
def test_var_and_std_gradients_at_a_large_offset(dtype, executors, path):
    # 1e4 + noise of 1e-2: in bfloat16 every element is 9984 (std 0: gradient 0, not nan). Eager's
    # float32 variance is ~8e-4 (relative) off the float64 accumulation thunder_c uses, which its std's
    # gradient (divided by the std) carries.
    noise = torch.randn(2, 500, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 1e-2
    x = (1e4 + noise).to(dtype)

    def f(a, b, c):
        return torch.var(a) + torch.std(b, 1).sum() + sum(torch.std_mean(c, 1)).sum()

    loose = {i: (2e-3, 1e-9) for i in range(3)} if dtype == torch.float32 else None
    check(f, [x, x.clone(), x.clone()], dtype, executors, path, tols=loose)


@configs(dtypes=[torch.float32, torch.float64])
def test_prims_var_gradient_with_a_clamped_divisor(dtype, executors, path):
    # prims.var divides by max(N - correction, 0) (PyTorch's forward); its gradient 2 (x - mean) / that
    # divisor is infinite or NaN where N <= correction
    def f(a, b, c):
        return (thunder_c.prims.var(a, (0,), correction=5.0) + thunder_c.prims.var(b, (0,), correction=3.0)
                + thunder_c.prims.var(c, (0,), correction=1.0))

    x = t([1, 2, 3], dtype)
    got = thunder_grads(f, [x, x.clone(), x.clone()], EXECUTORS[executors], path)
    d = (x - x.mean()).double() * 2
    for g, want in zip(got, [d / 0.0, d / 0.0, d / 2.0]):
        assert_same_edges(g, want.to(dtype), x, f"prims.var ({dtype}, {executors}, {path})", TOL[dtype])


# ---- layer_norm and rms_norm --------------------------------------------------------------------------

# (rtol, atol) against the exact gradient: atol is relative to the gradient's scale (norm_reference);
# bfloat16: the final rounding of a float32 computation
EXACT_TOL = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-10, 1e-13), torch.bfloat16: (1.6e-2, 1e-5)}


def norm_reference(kind, x, nshape, w, b, c, eps):
    """The exact gradients of sum(norm(x) * c) ("layer_norm" or "rms_norm" over the trailing dims
    nshape; w and b tensors or None) with respect to x, w and b at the given (rounded) inputs, in
    200-bit arithmetic (mpmath, which torch's sympy brings), each with its scale: the size of the terms
    it sums (rstd * max |c * w| over the row for x; the sums of |c * xhat| and of |c| for weight and
    bias), which bounds what rounding in the computation dtype leaves."""
    import mpmath

    n = math.prod(nshape)

    def rows(a):
        return [[mpmath.mpf(v) for v in r] for r in a.double().reshape(-1, n).tolist()]

    with mpmath.workprec(200):
        X, C = rows(x), rows(c)
        W = rows(w)[0] if w is not None else [mpmath.mpf(1)] * n
        E = mpmath.mpf(eps)
        gx, sx = [], []
        gw, sw, gb, sb = ([mpmath.mpf(0)] * n for _ in range(4))
        for xr, cr in zip(X, C):
            m = mpmath.fsum(xr) / n if kind == "layer_norm" else 0
            d = [v - m for v in xr]
            r = 1 / mpmath.sqrt(mpmath.fsum(v * v for v in d) / n + E)
            xh = [v * r for v in d]
            gh = [p * q for p, q in zip(cr, W)]
            mgx = mpmath.fsum(p * q for p, q in zip(gh, xh)) / n
            mg = mpmath.fsum(gh) / n if kind == "layer_norm" else 0
            gx.append([r * (p - mg - q * mgx) for p, q in zip(gh, xh)])
            sx.append([r * max(abs(p) for p in gh)] * n)
            gw = [a + p * q for a, p, q in zip(gw, cr, xh)]
            sw = [a + abs(p * q) for a, p, q in zip(sw, cr, xh)]
            gb = [a + p for a, p in zip(gb, cr)]
            sb = [a + abs(p) for a, p in zip(sb, cr)]

    def tensor(v, shape):
        return torch.tensor([float(e) for e in v], dtype=torch.float64).reshape(shape)

    out = [(tensor([e for r in gx for e in r], x.shape), tensor([e for r in sx for e in r], x.shape))]
    for p, g, s in [(w, gw, sw), (b, gb, sb)]:
        if p is not None:
            out.append((tensor(g, p.shape), tensor(s, p.shape)))
    return out


def assert_near_exact(got, want, ref, scale, what, tol):
    """got has eager's (want's) dtype, shape, NaN positions and infinities; where eager's is finite, got
    is within rtol * |ref| + atol * scale of the exact gradient ref."""
    assert got is not None, f"{what}: no gradient"
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype} {tuple(got.shape)}, eager's {want.dtype} {tuple(want.shape)}"
    g, w, r, s = (a.double().flatten() for a in (got, want, ref, scale))
    rtol, atol = tol
    finite = w.isfinite()
    ok = torch.where(finite, g.isfinite() & ((g - r).abs() <= atol * s + rtol * r.abs()),
                     (g.isnan() & w.isnan()) | (g == w))
    if not bool(ok.all()):
        bad = [(i, r[i].item(), w[i].item(), g[i].item()) for i in torch.nonzero(~ok).flatten().tolist()]
        pytest.fail(f"{what}: (index, exact, eager, thunder_c) where they differ: {bad[:12]}", pytrace=False)


def check_norms(cases, dtype, executors, path):
    """cases: (kind, x, nshape, w, b, c, eps) tuples; one jitted loss sums norm(x) * c over them. The
    gradients of each x, w and b (not c) have eager's NaN positions and infinities, and elsewhere are
    close to the exact gradient: eager's own are not at large offsets (see the tests)."""
    inputs, requires, refs = [], [], []
    for kind, x, nshape, w, b, c, eps in cases:
        params = [w] + ([b] if kind == "layer_norm" else [])
        inputs += [x] + [p for p in params if p is not None] + [c]
        requires += [True] * (1 + sum(p is not None for p in params)) + [False]
        refs += norm_reference(kind, x, nshape, w, b, c, eps if eps is not None else rms_default_eps(dtype))

    def f(*args):
        it, loss = iter(args), 0
        for kind, _, nshape, w, b, _, eps in cases:
            x = next(it)
            w_ = next(it) if w is not None else None
            if kind == "layer_norm":
                b_ = next(it) if b is not None else None
                y = F.layer_norm(x, nshape, w_, b_, eps)
            else:
                y = F.rms_norm(x, nshape, w_, eps)
            loss = loss + (y * next(it)).sum()
        return loss

    want = eager_grads(f, inputs, requires)
    got = thunder_grads(f, inputs, EXECUTORS[executors], path, requires)
    k = 0
    for i, r in enumerate(requires):
        if r:
            assert_near_exact(got[i], want[i], *refs[k], f"input {i} ({dtype}, {executors}, {path})", EXACT_TOL[dtype])
            k += 1


def rms_default_eps(dtype):
    """rms_norm's eps when None: the epsilon of the computation dtype, stored in the input's dtype."""
    comp = torch.float64 if dtype == torch.float64 else torch.float32
    return torch.tensor(torch.finfo(comp).eps, dtype=dtype).item()


def ulps_from(offset, ks, dtype):
    """offset rounded to dtype, plus ks[i] of its ulps (within its binade)."""
    base = torch.tensor(offset, dtype=dtype).double()
    ulp = torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(base.item()))
    return (base + torch.tensor(ks, dtype=torch.float64) * ulp).to(dtype)


def randn(shape, seed, dtype, scale=1.0, offset=0.0):
    gen = torch.Generator().manual_seed(seed)
    return (offset + scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)


@configs()
def test_norm_gradients_at_large_offsets(dtype, executors, path):
    # rows at 1e4 and 1e6 spread over a few ulps, or by 1e-3 and 1e-1 (nothing in bfloat16, whose rows
    # are then constant). Eager's layer_norm backward (dx = rstd * w * dy + b * x + c, terms of the
    # offset's size that cancel) loses most of the gradient in float32 and bfloat16 here and ~1e-6 of
    # the weight's in float64, so the reference is the exact gradient.
    ks = torch.randint(-3, 4, (4, 16), generator=torch.Generator().manual_seed(1)).tolist()
    x = torch.stack([ulps_from(1e4, ks[0], dtype), ulps_from(1e4, ks[1], dtype), ulps_from(1e6, ks[2], dtype),
                     ulps_from(1e6, ks[3], dtype), randn(16, 2, dtype, 1e-3, 1e4), randn(16, 3, dtype, 1e-1, 1e6)])
    w, b, c = randn(16, 4, dtype, 0.5, 1.0), randn(16, 5, dtype), randn((6, 16), 6, dtype)
    check_norms([("layer_norm", x, (16,), w, b, c, 1e-5), ("layer_norm", x.clone(), (16,), None, None, c, 1e-5),
                 ("rms_norm", x.clone(), (16,), w.clone(), None, c, 1e-6)], dtype, executors, path)


@configs()
def test_layer_norm_gradient_on_near_constant_rows(dtype, executors, path):
    # the gradient of sum(layer_norm(x) * 2) with respect to x is exactly 0 (xhat sums to 0 for every x),
    # where a mean rounded to the offset's ulp and subtracted from x leaves an error rstd (~300) scales
    x = t([[1e4, 1e4 + 1e-3, 1e4, 1e4], [1e6, 1e6, 1e6 + 0.0625, 1e6], [5, 5, 5, 5], [1e4, 1e4, 1e4, 1e4 - 1e-3]],
          dtype)
    w, b, ones = t([2, 2, 2, 2], dtype), t([0, 0, 0, 0], dtype), torch.ones(4, 4, dtype=dtype)
    c = randn((4, 4), 7, dtype)
    check_norms([("layer_norm", x, (4,), w, b, ones, 1e-5),
                 ("layer_norm", x.clone(), (4,), w.clone(), b.clone(), c, 1e-5),
                 ("rms_norm", x.clone(), (4,), w.clone(), None, c, None)], dtype, executors, path)


@configs()
def test_norm_gradients_with_eps_zero(dtype, executors, path):
    # rstd = 1 / std, large where the spread is an ulp or two of a large offset
    x = torch.stack([t([1, 2, 3, 4], dtype), t([-3, 0.5, 7, 2], dtype), ulps_from(1e4, [-2, 0, 1, 2], dtype),
                     ulps_from(1e6, [0, 0, 1, -1], dtype)])
    w, b, c = t([2, -1, 0.5, 3], dtype), t([0, 1, 2, 3], dtype), randn((4, 4), 8, dtype)
    check_norms([("layer_norm", x, (4,), w, b, c, 0.0), ("rms_norm", x.clone(), (4,), w.clone(), None, c, 0.0)],
                dtype, executors, path)


@configs()
def test_norm_gradients_at_degenerate_shapes(dtype, executors, path):
    # a normalized dim of size 1 (xhat = 0: gradients 0, the bias's the sum of c), an empty batch, and
    # two normalized dims of a row an ulp or two off a large offset
    x1, w1, b1, c1 = t([[1e4], [-3], [0.5], [1e-3]], dtype), t([2], dtype), t([1], dtype), randn((4, 1), 9, dtype)
    x0, c0 = torch.zeros(2, 0, 4, dtype=dtype), torch.ones(2, 0, 4, dtype=dtype)
    w0, b0 = t([1, 2, 3, 4], dtype), t([0, 1, 0, 1], dtype)
    x2 = torch.stack([ulps_from(1e4, [0, 1, 2, -1, 0, 0, 3, -3], dtype).reshape(2, 4), randn((2, 4), 10, dtype)])
    w2, b2, c2 = randn((2, 4), 11, dtype, 0.5, 1.0), randn((2, 4), 12, dtype), randn((2, 2, 4), 13, dtype)
    check_norms([("layer_norm", x1, (1,), w1, b1, c1, 1e-5), ("rms_norm", x1.clone(), (1,), w1.clone(), None, c1, 1e-6),
                 ("layer_norm", x0, (4,), w0, b0, c0, 1e-5), ("rms_norm", x0.clone(), (4,), w0.clone(), None, c0, None),
                 ("layer_norm", x2, (2, 4), w2, b2, c2, 1e-5),
                 ("rms_norm", x2.clone(), (2, 4), w2.clone(), None, c2, None)],
                dtype, executors, path)


@configs()
def test_norm_gradients_with_infinities_and_nans(dtype, executors, path):
    # a row with an infinity or a NaN is NaN throughout, and so is the weight's gradient wherever such a
    # row is summed; next to them, a row an ulp or two off 1e4
    x = torch.stack([t([1, 2, INF, 3], dtype), t([1, NAN, 2, 3], dtype), t([-INF, 0, 1, 2], dtype),
                     t([INF, INF, 1, 2], dtype), t([-INF, INF, 0, 0], dtype), ulps_from(1e4, [1, 0, -1, 2], dtype)])
    w, b, c = t([2, -1, 0.5, 3], dtype), t([0, 1, 2, 3], dtype), randn((6, 4), 14, dtype)
    fin = x[5:].clone()
    check_norms([("layer_norm", x, (4,), w, b, c, 1e-5), ("rms_norm", x.clone(), (4,), w.clone(), None, c, 1e-6),
                 ("layer_norm", fin, (4,), w.clone(), b.clone(), c[5:].clone(), 1e-5)], dtype, executors, path)


@configs()
def test_norm_gradients_on_ordinary_inputs(dtype, executors, path):
    # a regression check against eager: random inputs, one and two normalized dims, weight and bias
    # each given or not, rms_norm's default eps; each output weighted by an input of its own (whose
    # gradient is the output). Eager's bfloat16 layer_norm backward is off by ~0.5% (of the gradient's
    # largest entry) from its float32 and float64 ones here, so bfloat16 is checked against float64.
    x = randn((3, 5, 8), 15, dtype)
    w, b, w2 = randn(8, 16, dtype), randn(8, 17, dtype), randn((5, 8), 18, dtype)
    cs = [randn((3, 5, 8), 22 + i, dtype) for i in range(5)]

    def f(a, a2, a3, a4, a5, w_, b_, w2_, b2_, w3_, c1, c2, c3, c4, c5):
        return ((F.layer_norm(a, (8,), w_, b_) * c1).sum() + (F.layer_norm(a2, (5, 8), w2_, None) * c2).sum()
                + (F.layer_norm(a3, (8,), None, b2_, 1e-3) * c3).sum() + (F.rms_norm(a4, (8,), w3_) * c4).sum()
                + (F.rms_norm(a5, (5, 8), None, 1e-4) * c5).sum())

    check(f, [x, x.clone(), x.clone(), x.clone(), x.clone(), w, b, w2, b.clone(), w.clone()] + cs, dtype, executors,
          path, oracle=torch.float64 if dtype == torch.bfloat16 else None)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda v: str(v).replace("torch.", ""))
def test_norm_backward_saves_only_input_and_weight(dtype):
    # the rules recompute the row statistics (float64 for a float32 computation) from the input: they
    # are not saved for the backward, nor is anything but the input and the weight
    x, w, b = randn((3, 5, 8), 19, dtype), randn(8, 20, dtype), randn(8, 21, dtype)
    for fn, inputs in [(lambda a, w_, b_: F.layer_norm(a, (8,), w_, b_), [x, w, b]),
                       (lambda a: F.layer_norm(a, (5, 8)), [x]), (lambda a, w_: F.rms_norm(a, (8,), w_), [x, w])]:
        jf = thunder_c.jit(fn)
        jf(*inputs)
        fwd, _ = thunder_c.transforms.grad(thunder_c.last_traces(jf)[0])
        _, (saved, numbers) = thunder_c.jit(fwd)(*inputs)
        want = [x] + ([w] if len(inputs) > 1 else [])
        assert [(s.dtype, s.shape) for s in saved] == [(a.dtype, a.shape) for a in want] and not numbers
