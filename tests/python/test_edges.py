"""Edge inputs through thunder_c.jit against PyTorch eager: no wrong value at extreme inputs, forward or
gradient.

Every differentiable elementwise, reduction, normalization, softmax-family and loss op of the op table
(the OPS table below) runs on the edge classes of CLASSES (large magnitudes up to the dtype's maximum,
+-inf, NaN, +-0.0, subnormals and the smallest normal, rows of equal values, rows with one dominant
value), in float32, float64 and bfloat16, forward (under no_grad) and with a gradient (a fixed random
cotangent backpropagated to the edge input; the forward of that run is checked too), through the
default executors (`fused`: fuser, blas, eager) and through the eager executor alone (`eager`). Each
result is compared with PyTorch eager on the same inputs (`check`): the same NaN positions, the same
+inf and -inf positions, and the finite values within torch.testing.assert_close's tolerance for the
dtype, or else at most twice as far as eager's from PyTorch's float64 result (`_as_accurate`: where
the input's rounding alone leaves a result uncertain beyond the tolerance, as a layer_norm of values a
few ulps apart; an unstable formula is off by far more). Where eager's NaN or infinities are wrong, the
float64 result rounded to the dtype says where they belong (F64_REFERENCE says where and why); where
its finite values are wrong too, that result is the reference (F64_VALUES), and where float64 itself
overflows, a long-double one (EXACT_REFERENCE). test_param_edge adds the edges of the ops' other
arguments: correction >= N for var/std, empty and size-1 reduced dims, zero-size tensors, eps = 0 for
the norms, losses whose targets are all ignored, reductions that overflow (float32 and bfloat16 in the
fast subset, every dtype in the full sweep).

All edge classes of one op share a compilation: their rows are stacked into one input (every op here
works row by row, over dim -1 or, for the `_dim0` entries, over dim 0 of the transposed input, which
exercises the fuser's column reductions), run once per (op, dtype, mode, executor), and each test
checks its own rows. Test ids read `op-dtype-class-mode-executor` ("log_softmax-f32-equal_rows-grad-fused";
"-w37" ends those on rows of 37), and `edge-dtype-mode-executor` for test_param_edge
("var_correction_5-f32-grad-eager").

The default run is the fast subset (float32, float64 and bfloat16, rows of 5). THUNDER_EDGE_FULL=1
runs the full sweep: float16 too, and every case again on rows of 37 (past one vector width, so the
fused kernels' vector loops and their tails both run). THUNDER_EDGE_REPORT=PATH writes the run's per-op
results (passed / failed / expected failures, by thunder-c op) as JSON to PATH; tests/python/opinfo_report.py
runs this module that way to fill the "edge sweep" column of docs/ops.md.

Gradient failures of vjp rules (or of the gradient through a decomposition without a rule) are strict
expected failures (VJP_XFAIL) until the rules are fixed, as are forward results of kernels this module
does not fix (FORWARD_XFAIL)."""
import functools
import json
import math
import os
import pathlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import import_thunder_c

thunder_c = import_thunder_c()

# PyTorch's own warning for correction >= N (a parameter edge here)
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")

FULL = os.environ.get("THUNDER_EDGE_FULL") == "1"
REPORT = os.environ.get("THUNDER_EDGE_REPORT")

DTYPES = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16}
if FULL:
    DTYPES["f16"] = torch.float16
WIDTHS = (5, 37) if FULL else (5,)
MODES = ("fwd", "grad")
EXECUTORS = {"fused": None, "eager": ["eager"]}
INF, NAN = math.inf, math.nan


# ---- edge classes ------------------------------------------------------------------------------------

def _big(dt):
    """The large magnitudes of a dtype: 1e4, 1e8 and (close to) the largest finite value."""
    fi = torch.finfo(dt)
    return {torch.float32: [1e4, 1e8, 3e38], torch.float64: [1e4, 1e8, 3e38, 1e300],
            torch.bfloat16: [1e4, 1e8, fi.max], torch.float16: [1e4, fi.max]}[dt]


def _spread(dt):
    """A relative step: rows b * (1 - k * spread) are distinct values close together (8 ulps apart in
    float32, 4 in float16, 2 in bfloat16), where a variance or a softmax computed without care loses
    everything to cancellation. float64 steps by 2^26 ulps: its reference is PyTorch's own float64, no
    more exact than the kernels it checks, so its rows stay within what float64's tolerance can judge."""
    return {torch.float32: 2.0 ** -20, torch.float64: 2.0 ** -26, torch.bfloat16: 2.0 ** -6,
            torch.float16: 2.0 ** -8}[dt]


def _rows_large(dt):
    u, m = _spread(dt), _big(dt)[-1]
    rows = [[s * b * (1 - k * u) for k in range(5)] for b in _big(dt) for s in (1, -1)]
    rows.append([m, -m, m / 2, -m / 2, 0.0])  # both signs at the largest magnitude
    return rows


def _rows_inf(dt):
    return [[INF, 1, 2, 3, 4], [-INF, 1, 2, 3, 4], [INF, -INF, 0, 1, -1], [-INF] * 5, [INF] * 5]


def _rows_nan(dt):
    return [[NAN, 1, 2, 3, 4], [NAN] * 5, [NAN, INF, -INF, 0, 1]]


def _rows_zeros(dt):
    return [[0.0, -0.0, 0.0, -0.0, 0.0], [-0.0] * 5, [0.0, 1.0, -0.0, -1.0, 2.0]]


def _rows_subnormal(dt):
    fi = torch.finfo(dt)
    t, s = fi.tiny, fi.tiny * fi.eps  # the smallest normal and the smallest subnormal
    return [[s, -s, 2 * s, t, -t], [s] * 5, [t, t / 2, t / 4, -t / 2, 0.0], [-t] * 5]


def _rows_equal(dt):
    b = _big(dt)[1] if dt != torch.float16 else 6e4
    return [[c] * 5 for c in (0.5, 1e4, -1e4, b, -b)]


def _rows_dominant(dt):
    b = _big(dt)[1] if dt != torch.float16 else 6e4
    return [[100.0, 0, 0, 0, 0], [0, 0, 0, 0, 1e4], [1e4, -1e4, 0, 1, 2], [b, 1, 2, 3, 4], [-1e4, 0, 0, 0, 0]]


CLASSES = {"large": _rows_large, "inf": _rows_inf, "nan": _rows_nan, "zeros": _rows_zeros,
           "subnormal": _rows_subnormal, "equal_rows": _rows_equal, "dominant": _rows_dominant}


@functools.lru_cache(maxsize=None)
def _stacked(dt, width):
    """The rows of every class (each padded to `width` with its last value) as one float64 tensor, and
    each class's row range."""
    rows, where = [], {}
    for name, make in CLASSES.items():
        r = make(dt)
        where[name] = (len(rows), len(rows) + len(r))
        rows += [row + [row[-1]] * (width - len(row)) for row in r]
    return torch.tensor(rows, dtype=torch.float64), where


# ---- ops ------------------------------------------------------------------------------------------------
#
# Each entry: (id, thunder-c op, fn, options). fn(x, c, m, t, p) gets the edge input x (R x W, or
# W x R for layout "cols"), a companion c of ordinary values (|c| in [0.5, 2], both signs), a bool mask m
# (both like x), class targets t (R) and class probabilities p (R x W); fn uses what it needs. Options:
# layout "cols" (x is the transposed stack, the op reduces dim 0), grad=False (no gradient: integer
# outputs).

def _unary(name):
    return (name, f"ltorch.{name}", lambda x, c, m, t, p, f=getattr(torch, name): f(x), {})


OPS = [_unary(n) for n in (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf", "erfc", "exp", "exp2",
    "expm1", "floor", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid",
    "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")]
OPS += [
    ("relu", "ltorch.relu", lambda x, c, m, t, p: F.relu(x), {}),
    ("gelu", "ltorch.gelu", lambda x, c, m, t, p: F.gelu(x), {}),
    ("gelu_tanh", "ltorch.gelu", lambda x, c, m, t, p: F.gelu(x, approximate="tanh"), {}),
    ("silu", "ltorch.silu", lambda x, c, m, t, p: F.silu(x), {}),
    ("clamp", "ltorch.clamp", lambda x, c, m, t, p: torch.clamp(x, -1.0, 1.0), {}),
    ("clamp_tensor", "ltorch.clamp", lambda x, c, m, t, p: torch.clamp(x, min=c), {}),
    ("add", "ltorch.add", lambda x, c, m, t, p: x + c, {}),
    ("sub", "ltorch.sub", lambda x, c, m, t, p: c - x, {}),
    ("mul", "ltorch.mul", lambda x, c, m, t, p: x * c, {}),
    ("div", "ltorch.div", lambda x, c, m, t, p: x / c, {}),
    ("rdiv", "ltorch.div", lambda x, c, m, t, p: c / x, {}),
    ("remainder", "ltorch.remainder", lambda x, c, m, t, p: torch.remainder(x, c), {}),
    ("fmod", "ltorch.fmod", lambda x, c, m, t, p: torch.fmod(x, c), {}),
    ("pow_2", "ltorch.pow", lambda x, c, m, t, p: x ** 2, {}),
    ("pow_half", "ltorch.pow", lambda x, c, m, t, p: x ** 0.5, {}),
    ("pow_rsqrt", "ltorch.pow", lambda x, c, m, t, p: x ** -0.5, {}),
    ("pow_neg", "ltorch.pow", lambda x, c, m, t, p: x ** -1.5, {}),
    ("pow_tensor", "ltorch.pow", lambda x, c, m, t, p: torch.pow(x, c), {}),
    ("rpow", "ltorch.pow", lambda x, c, m, t, p: 1.5 ** x, {}),
    ("atan2", "ltorch.atan2", lambda x, c, m, t, p: torch.atan2(x, c), {}),
    ("ratan2", "ltorch.atan2", lambda x, c, m, t, p: torch.atan2(c, x), {}),
    ("maximum", "ltorch.maximum", lambda x, c, m, t, p: torch.maximum(x, c), {}),
    ("minimum", "ltorch.minimum", lambda x, c, m, t, p: torch.minimum(x, c), {}),
    ("where", "ltorch.where", lambda x, c, m, t, p: torch.where(m, x, c), {}),
    ("masked_fill", "ltorch.masked_fill", lambda x, c, m, t, p: x.masked_fill(m, 0.0), {}),
    ("lerp", "ltorch.lerp", lambda x, c, m, t, p: torch.lerp(x, c, 0.25), {}),
    # reductions over each row
    ("sum", "ltorch.sum", lambda x, c, m, t, p: x.sum(-1), {}),
    ("mean", "ltorch.mean", lambda x, c, m, t, p: x.mean(-1), {}),
    ("prod", "ltorch.prod", lambda x, c, m, t, p: x.prod(-1), {}),
    ("amax", "ltorch.amax", lambda x, c, m, t, p: x.amax(-1), {}),
    ("amin", "ltorch.amin", lambda x, c, m, t, p: x.amin(-1), {}),
    ("max_dim", "ltorch.max", lambda x, c, m, t, p: torch.max(x, -1), {}),
    ("min_dim", "ltorch.min", lambda x, c, m, t, p: torch.min(x, -1), {}),
    ("argmax", "ltorch.argmax", lambda x, c, m, t, p: torch.argmax(x, -1), {"grad": False}),
    ("argmin", "ltorch.argmin", lambda x, c, m, t, p: torch.argmin(x, -1), {"grad": False}),
    ("var", "ltorch.var", lambda x, c, m, t, p: torch.var(x, -1), {}),
    ("var_biased", "ltorch.var", lambda x, c, m, t, p: torch.var(x, -1, correction=0), {}),
    ("std", "ltorch.std", lambda x, c, m, t, p: torch.std(x, -1), {}),
    ("var_mean", "ltorch.var_mean", lambda x, c, m, t, p: torch.var_mean(x, -1), {}),
    ("std_mean", "ltorch.std_mean", lambda x, c, m, t, p: torch.std_mean(x, -1), {}),
    ("logsumexp", "ltorch.logsumexp", lambda x, c, m, t, p: torch.logsumexp(x, -1), {}),
    ("softmax", "ltorch.softmax", lambda x, c, m, t, p: F.softmax(x, -1), {}),
    ("log_softmax", "ltorch.log_softmax", lambda x, c, m, t, p: F.log_softmax(x, -1), {}),
    ("log_softmax_f64", "ltorch.log_softmax", lambda x, c, m, t, p: F.log_softmax(x, -1, dtype=torch.float64), {}),
    # the same over dim 0 of the transposed stack (the fuser's column nests)
    ("sum_dim0", "ltorch.sum", lambda x, c, m, t, p: x.sum(0), {"layout": "cols"}),
    ("amax_dim0", "ltorch.amax", lambda x, c, m, t, p: x.amax(0), {"layout": "cols"}),
    ("var_dim0", "ltorch.var", lambda x, c, m, t, p: torch.var(x, 0), {"layout": "cols"}),
    ("var_mean_dim0", "ltorch.var_mean", lambda x, c, m, t, p: torch.var_mean(x, 0), {"layout": "cols"}),
    ("logsumexp_dim0", "ltorch.logsumexp", lambda x, c, m, t, p: torch.logsumexp(x, 0), {"layout": "cols"}),
    ("softmax_dim0", "ltorch.softmax", lambda x, c, m, t, p: F.softmax(x, 0), {"layout": "cols"}),
    ("log_softmax_dim0", "ltorch.log_softmax", lambda x, c, m, t, p: F.log_softmax(x, 0), {"layout": "cols"}),
    # normalization over each row
    ("layer_norm", "ltorch.layer_norm", lambda x, c, m, t, p: F.layer_norm(x, x.shape[-1:]), {}),
    ("layer_norm_affine", "ltorch.layer_norm",
     lambda x, c, m, t, p: F.layer_norm(x, x.shape[-1:], c[0], c[1] * 0.1), {}),
    ("rms_norm", "ltorch.rms_norm", lambda x, c, m, t, p: F.rms_norm(x, x.shape[-1:]), {}),
    ("rms_norm_weight", "ltorch.rms_norm", lambda x, c, m, t, p: F.rms_norm(x, x.shape[-1:], c[0]), {}),
    # losses, one per row (reduction='none'; the reductions are param edges)
    ("cross_entropy", "ltorch.cross_entropy", lambda x, c, m, t, p: F.cross_entropy(x, t, reduction="none"), {}),
    ("cross_entropy_smooth", "ltorch.cross_entropy",
     lambda x, c, m, t, p: F.cross_entropy(x, t, reduction="none", label_smoothing=0.1), {}),
    ("cross_entropy_prob", "ltorch.cross_entropy", lambda x, c, m, t, p: F.cross_entropy(x, p, reduction="none"), {}),
    ("nll_loss", "ltorch.nll_loss", lambda x, c, m, t, p: F.nll_loss(x, t, reduction="none"), {}),
    ("mse_loss", "ltorch.mse_loss", lambda x, c, m, t, p: F.mse_loss(x, c, reduction="none"), {}),
]
OP_BY_ID = {e[0]: e for e in OPS}
# The ops from sum on reduce or normalize rows (mse_loss aside): their results are judged row by row.
ROW_OPS = {e[0] for e in OPS[[e[0] for e in OPS].index("sum"):]} - {"mse_loss"}

# Rules: (op ids, classes, dtype names or None for all, row widths or None for all, why). The first rule
# that names an (op, class, dtype, width) applies.
ALL = None
LOW = ("f32", "bf16", "f16")  # the dtypes computed in float32

# Where PyTorch eager's NaN or infinities are wrong: there the float64 result rounded to the dtype says
# where they belong.
F64_REFERENCE = [
    (("gelu",), ("inf", "nan"), LOW, ALL, "PyTorch's vectorized erf gelu gives NaN at +inf (gelu(inf) = inf)"),
    (("gelu",), ("large",), LOW, ALL, "PyTorch's vectorized erf gelu overflows to inf near the float32 maximum, "
                                      "where gelu(x) = x"),
    (("fmod", "remainder"), ("large",), LOW, ALL, "PyTorch's vectorized float32 fmod and remainder give NaN for "
                                                  "dividends near 3e38 (the remainder is exact: |r| < |c|)"),
    (("prod",), ("large",), LOW, (5,), "PyTorch's float32 running product overflows to inf before the row's 0 and "
                                       "gives NaN; the product is 0"),
    (("prod",), ("dominant",), ("f16",), (5,), "PyTorch's float16 running product overflows before the row's 0"),
    (("prod",), ALL, ALL, (37,), "PyTorch's prod_backward gives NaN next to zeros and infinite partial products "
                                 "where the gradient (the product of the other elements) is 0 or finite"),
    (("mse_loss",), ("large",), LOW, ALL, "PyTorch's gradient 2 * (x - y) * g overflows where the gradient itself "
                                          "is finite"),
    (("mse_loss", "pow_2"), ("large", "equal_rows", "dominant"), ("f16",), ALL,
     "PyTorch's float16 gradient 2 * x * g (2 * (x - y) * g) overflows in float16 where the gradient is finite"),
    (("lgamma",), ("subnormal",), LOW, ALL, "PyTorch's float32 digamma gives inf at the smallest normal halved, "
                                            "where digamma(x) ~ -1/x is finite"),
    (("log10",), ("subnormal",), ("f16",), ALL, "PyTorch's float16 gradient g / (x ln 10) overflows in float16 "
                                                "where the gradient is finite"),
    (("layer_norm", "layer_norm_affine"), ("large",), LOW, ALL,
     "PyTorch's float32 layer_norm overflows the sum of values near 3e38 and gives NaN; the normalized values are "
     "finite"),
    (("pow_half", "pow_rsqrt"), ("inf", "nan", "zeros"), ("f16",), ALL,
     "PyTorch's float16 pow is C's pow for exponents 0.5 and -0.5 ((-inf)^0.5 = inf, (-0)^-0.5 = inf), where its "
     "float32, float64 and bfloat16 kernels (and thunder-c) are sqrt and rsqrt"),
    (("pow_tensor",), ("inf", "equal_rows", "subnormal"), ("bf16",), (37,),
     "PyTorch's bfloat16 pow gradient is finite or inf for negative bases with non-integer exponents, where it is "
     "NaN"),
    (("cross_entropy_smooth",), ("dominant",), ("f16",), ALL, "PyTorch's float16 label-smoothing sum overflows "
                                                              "float16; the loss is finite"),
]

# Where PyTorch eager's finite values are wrong as well: there the float64 result rounded to the dtype is
# the reference.
F64_VALUES = [
    (("rms_norm", "rms_norm_weight"), ("large",), LOW, ALL,
     "PyTorch's float32 rms_norm squares values near 3e38 to inf and gives 0 (gradient NaN); the normalized "
     "values are +-1"),
]



def _prod_longdouble(x, mode):
    """prod over the last dim and its gradient (the product of the other elements times the cotangent)
    in long double (x87: 64-bit significand, exponents to ~1e4932), rounded to x's dtype."""
    with np.errstate(all="ignore"):  # inf * 0 and overflow are results here
        xl = x.double().numpy().astype(np.longdouble)
        outs = [torch.from_numpy(np.prod(xl, axis=-1).astype(np.float64))]
        if mode == "fwd":
            return outs, None
        g = _cotangent(outs[0].to(x.dtype), 0).double().numpy().astype(np.longdouble)
        others = np.stack([np.prod(np.delete(xl, i, axis=-1), axis=-1) for i in range(xl.shape[-1])], -1)
        return outs, torch.from_numpy((others * g[:, None]).astype(np.float64))


# Where no dtype of PyTorch is exact enough: a reference computed apart, {op id: (dtype names, fn, why)};
# fn(x, mode) gives (outputs, gradient) in float64, as the float64 reference; it replaces eager as well.
EXACT_REFERENCE = {
    "prod": (("f64",), _prod_longdouble, "PyTorch's float64 prod_backward gives NaN where a partial product of "
                                         "values near 1e300 overflows next to the row's 0; the gradient there is 0 "
                                         "(the product of the others includes the 0)"),
}

# Per-op tolerance overrides, {op id: {dtype: (rtol, atol)}}, each with the reason.
TOLERANCES = {}

# Gradient failures of vjp rules (or of the gradient through a decomposition, for ops without a rule):
# strict expected failures until the rules are fixed, as (ops, classes, dtypes, widths, reason). None now.
VJP_XFAIL = []

# Forward results known wrong in kernels this module does not fix: strict expected failures (both modes).
FORWARD_XFAIL = [
    (("prod",), ("large",), ("f64",), ALL,
     "forward: prims.prod multiplies in order, so a float64 row whose partial product overflows before its 0 "
     "factor gives inf * 0 = NaN, where the product is 0 (as PyTorch's float64 prod)"),
]


def _rule(rules, op_id, cls, dname, width):
    for ops, classes, dts, widths, why in rules:
        if (op_id in ops and (classes is ALL or cls in classes) and (dts is ALL or dname in dts)
                and (widths is ALL or width in widths)):
            return why
    return None


# ---- running and comparing -------------------------------------------------------------------------------

def _aux(dt, rows, width, layout):
    """The companion inputs of an op (c, m, t, p), deterministic."""
    g = torch.Generator().manual_seed(1234 + width)
    c = (torch.rand(rows, width, generator=g, dtype=torch.float64) * 1.5 + 0.5)
    c = torch.where(torch.rand(rows, width, generator=g) < 0.5, -c, c)
    m = torch.rand(rows, width, generator=g) < 0.5
    t = torch.arange(rows) % width
    p = torch.softmax(torch.randn(rows, width, generator=g, dtype=torch.float64), -1)
    if layout == "cols":
        c, m = c.t().contiguous(), m.t().contiguous()
    return c.to(dt), m, t, p.to(dt)


def _cotangent(o, k):
    g = torch.Generator().manual_seed(99 + k)
    return torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)


def _outputs(r):
    if isinstance(r, torch.Tensor):
        return [r]
    return list(r)


def _evaluate(fn, inputs, how, mode, grad_ok=True):
    """Runs fn on fresh copies of inputs (the first one is the edge input) with PyTorch (how=None) or
    thunder_c.jit with the executors `how` names ("fused", "eager"); returns (outputs, gradient of the
    first input or None), detached."""
    inputs = [i.clone() for i in inputs]
    f = fn if how is None else thunder_c.jit(fn, executors=EXECUTORS[how])
    if mode == "fwd" or not grad_ok:
        with torch.no_grad():
            return [o.clone() for o in _outputs(f(*inputs))], None
    x = inputs[0].requires_grad_()
    outs = _outputs(f(*inputs))
    loss = None
    for k, o in enumerate(outs):
        if o.dtype.is_floating_point and o.requires_grad:
            term = (o * _cotangent(o, k)).sum()
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    return [o.detach().clone() for o in outs], x.grad


def _reference_f64(fn, inputs, mode, grad_ok=True):
    """fn in PyTorch in float64 (every floating input upcast): (outputs, gradient), in float64."""
    up = [i.double() if i.dtype.is_floating_point else i for i in inputs]
    return _evaluate(fn, up, None, mode, grad_ok)


def _rounded(res, like):
    """A float64 reference's outputs and gradient rounded to the dtypes of `like`'s (eager's)."""
    outs = [o.to(w.dtype) for o, w in zip(res[0], like[0])]
    return outs, None if res[1] is None else res[1].to(like[1].dtype)


DEFAULT_TOL = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7), torch.bfloat16: (1.6e-2, 1e-5),
               torch.float16: (1e-3, 1e-5)}


def check(got, want, what, ref=None, tol=None, masks=None, rowwise=False):
    """got matches want: dtype and shape; NaN, +inf and -inf where `masks` has them (default: want);
    integers exactly; the finite values within assert_close's tolerance for the dtype (or tol = (rtol,
    atol)) of want's (of masks' where want is not finite), or else, with the float64 reference `ref`,
    about as close to it as want's (_as_accurate)."""
    masks = want if masks is None else masks
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), f"{what}: {got.tolist()} != {want.tolist()}"
        return
    for name, pred in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        g, w = pred(got), pred(masks)
        if not torch.equal(g, w):
            bad = (g != w).nonzero().tolist()[:6]
            raise AssertionError(f"{what}: {name} positions differ at {bad}: got "
                                 f"{[got[tuple(i)].item() for i in bad]}, want {[masks[tuple(i)].item() for i in bad]}")
    fin = torch.isfinite(masks)
    want = torch.where(torch.isfinite(want), want, masks)
    rtol, atol = tol or DEFAULT_TOL[want.dtype]
    try:
        torch.testing.assert_close(got[fin], want[fin], rtol=rtol, atol=atol,
                                   msg=lambda m: f"{what}: {m}\n got: {_short(got)}\nwant: {_short(want)}")
    except AssertionError:
        if ref is None or not _as_accurate(got, want, ref, fin, rtol, atol, rowwise):
            raise


def _as_accurate(got, want, ref, fin, rtol, atol, rowwise):
    """Where want's finite values are not within tolerance of ours, ours are still right when, row by
    row (the first dim; each element of a 1-D result), their largest distance from the float64
    reference, less the tolerance, is at most twice want's: the rounding of the input alone makes some
    results (a layer_norm of values a few ulps apart, the mean inside a variance's gradient there)
    uncertain beyond the dtype's tolerance, and PyTorch's kernels are no more exact there; an unstable
    formula is wrong by far more. The tolerance is each element's (atol + rtol * |ref|), or for a
    result computed from a whole row (rowwise) the row's, atol + rtol * max |ref| over the row. Where
    the reference is not finite, ours must be within tolerance of want's. fin: the positions of finite
    values."""
    g, w, r = got.double(), want.double(), ref.double()
    rfin = fin & torch.isfinite(r)
    if not torch.allclose(g[fin & ~rfin], w[fin & ~rfin], rtol=rtol, atol=atol):
        return False
    zero = torch.zeros((), dtype=torch.float64)
    scale = torch.where(rfin, r.abs(), zero)
    if rowwise and scale.ndim >= 2:
        scale = scale.flatten(1).amax(1).reshape((-1,) + (1,) * (scale.ndim - 1))
    eg = torch.where(rfin, ((g - r).abs() - atol - rtol * scale).clamp(min=0), zero)
    ew = torch.where(rfin, (w - r).abs(), zero)
    if eg.ndim >= 2:
        eg, ew = eg.flatten(1).amax(1), ew.flatten(1).amax(1)
    return bool((eg <= 2 * ew).all())


def _short(t):
    return str(t.tolist() if t.numel() <= 40 else t.flatten()[:40].tolist() + ["..."])


@functools.lru_cache(maxsize=None)
def _run_stacked(op_id, dname, width, mode, how):
    """One op on every class's rows at once: ((outputs, grad) of thunder_c or the exception it raised),
    (outputs, grad) of eager and of the float64 reference, and the class row ranges. Outputs and
    gradients come back row-major over the stack (the "cols" layout transposed back)."""
    _, _, fn, opts = OP_BY_ID[op_id]
    dt, layout, grad_ok = DTYPES[dname], opts.get("layout", "rows"), opts.get("grad", True)
    x64, where = _stacked(dt, width)
    x = x64.to(dt)
    if layout == "cols":
        x = x.t().contiguous()
    inputs = [x, *_aux(dt, x64.shape[0], width, layout)]

    def rowmajor(res):
        outs, grad = res
        if layout == "cols":
            outs = [o.t() if o.ndim == 2 else o for o in outs]
            grad = None if grad is None else grad.t()
        return outs, grad

    want = rowmajor(_evaluate(fn, inputs, None, mode, grad_ok))
    exact = EXACT_REFERENCE.get(op_id)
    if exact and dname in exact[0] and layout == "rows":
        ref = exact[1](x, mode)
        want = _rounded(ref, want)
    else:
        ref = rowmajor(_reference_f64(fn, inputs, mode, grad_ok))
    try:
        got = rowmajor(_evaluate(fn, inputs, how, mode, grad_ok))
    except Exception as e:  # reported by each class's test
        got = e
    return got, want, ref, where


RESULTS = {}  # thunder-c op -> {"passed", "failed", "xfailed", "failures": [test ids]}


def _record(op, test_id, ok, expected_failure):
    r = RESULTS.setdefault(op, {"passed": 0, "failed": 0, "xfailed": 0, "failures": []})
    if ok:
        r["passed"] += 1
    elif expected_failure:
        r["xfailed"] += 1
    else:
        r["failed"] += 1
        r["failures"].append(test_id)


@pytest.fixture(scope="module", autouse=True)
def _edge_report():
    """With THUNDER_EDGE_REPORT set: this run's per-op results, written when the module's tests end."""
    yield
    if REPORT:
        doc = {"sweep": "full" if FULL else "fast", "torch": torch.__version__,
               "dtypes": list(DTYPES), "widths": list(WIDTHS), "classes": list(CLASSES),
               "ops": dict(sorted(RESULTS.items()))}
        pathlib.Path(REPORT).write_text(json.dumps(doc, indent=1) + "\n")


def _cases():
    for op_id, op, fn, opts in OPS:
        for dname in DTYPES:
            for width in WIDTHS:
                for cls in CLASSES:
                    for mode in MODES:
                        if mode == "grad" and not opts.get("grad", True):
                            continue
                        for how in EXECUTORS:
                            tid = f"{op_id}-{dname}-{cls}-{mode}-{how}" + ("" if width == 5 else f"-w{width}")
                            reason = _rule(FORWARD_XFAIL, op_id, cls, dname, width) or \
                                (_rule(VJP_XFAIL, op_id, cls, dname, width) if mode == "grad" else None)
                            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                            yield pytest.param(op_id, dname, width, cls, mode, how, id=tid, marks=marks)


@pytest.mark.parametrize("op_id,dname,width,cls,mode,how", list(_cases()))
def test_edge(op_id, dname, width, cls, mode, how, request):
    op = OP_BY_ID[op_id][1]
    expected = bool(request.node.get_closest_marker("xfail"))
    ok = False
    try:
        got, want, ref, where = _run_stacked(op_id, dname, width, mode, how)
        if isinstance(got, Exception):
            raise AssertionError(f"thunder_c raised {type(got).__name__}: {got}") from got
        if _rule(F64_VALUES, op_id, cls, dname, width):
            want = _rounded(ref, want)
        masks = _rounded(ref, want) if _rule(F64_REFERENCE, op_id, cls, dname, width) else want
        lo, hi = where[cls]
        tol = TOLERANCES.get(op_id, {}).get(dname)
        (gouts, ggrad), (wouts, wgrad), (routs, rgrad), (mouts, mgrad) = got, want, ref, masks
        assert len(gouts) == len(wouts), f"{len(gouts)} outputs, want {len(wouts)}"
        rowwise = op_id in ROW_OPS
        for k, (g, w, r, mk) in enumerate(zip(gouts, wouts, routs, mouts)):
            check(g[lo:hi], w[lo:hi], f"output {k}", r[lo:hi], tol, mk[lo:hi], rowwise)
        if mode == "grad" and wgrad is not None:
            assert ggrad is not None, "no gradient"
            check(ggrad[lo:hi], wgrad[lo:hi], "gradient", rgrad[lo:hi], tol, mgrad[lo:hi], rowwise)
        ok = True
    finally:
        _record(op, request.node.callspec.id, ok, expected)


@pytest.mark.parametrize("how", EXECUTORS)
def test_log_softmax_keeps_the_shift(how):
    """log_softmax of equal values is -log(n) at any magnitude: the row maximum is subtracted before
    the log-sum-exp is, so nothing of the values' own rounding is left in the result."""
    x = torch.tensor([[-1e4, -1e4], [1e8, 1e8], [3e38, 3e38], [-1e8, 0.0]])
    got = thunder_c.jit(lambda z: F.log_softmax(z, -1), executors=EXECUTORS[how])(x)
    want = torch.tensor([[-math.log(2)] * 2] * 3 + [[-1e8, 0.0]])
    torch.testing.assert_close(got, want, rtol=1.3e-6, atol=0)
    torch.testing.assert_close(got, F.log_softmax(x, -1), rtol=1.3e-6, atol=0)


# ---- parameter edges -----------------------------------------------------------------------------------
#
# Each entry: (id, thunder-c op, fn, make_inputs(dtype) -> inputs (the first one gets the gradient)).

def _rand(*shape, seed=0):
    def make(dt):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dt)
    return make


def _with_targets(make_x, targets):
    return lambda dt: [make_x(dt), torch.tensor(targets, dtype=torch.int64)]


def _const(rows):
    return lambda dt: torch.tensor(rows, dtype=torch.float64).to(dt)


PARAM_OPS = [
    # correction >= N: a zero or negative divisor (PyTorch clamps N - correction at 0: inf or nan)
    *[(f"{name}_correction_{k}", f"ltorch.{name}", lambda x, name=name, k=k: getattr(torch, name)(x, -1, correction=k),
       lambda dt: [_rand(3, 5)(dt)]) for name in ("var", "std", "var_mean", "std_mean") for k in (5, 7)],
    ("var_size1", "ltorch.var", lambda x: torch.var(x, -1), lambda dt: [_rand(3, 1)(dt)]),
    ("std_size1", "ltorch.std", lambda x: torch.std(x, -1), lambda dt: [_rand(3, 1)(dt)]),
    ("var_mean_size1", "ltorch.var_mean", lambda x: torch.var_mean(x, -1), lambda dt: [_rand(3, 1)(dt)]),
    ("var_all_correction_numel", "ltorch.var", lambda x: torch.var(x, correction=6), lambda dt: [_rand(2, 3)(dt)]),
    # empty reduced dims and zero-size tensors
    *[(f"{name}_empty_dim", f"ltorch.{name}", lambda x, name=name: getattr(torch, name)(x, -1),
       lambda dt: [_rand(3, 0)(dt)]) for name in ("sum", "mean", "prod", "var", "std")],
    ("logsumexp_empty_dim", "ltorch.logsumexp", lambda x: torch.logsumexp(x, -1), lambda dt: [_rand(3, 0)(dt)]),
    ("amax_empty_dim", "ltorch.amax", lambda x: torch.amax(x, -1), lambda dt: [_rand(3, 0)(dt)]),
    ("softmax_empty_dim", "ltorch.softmax", lambda x: F.softmax(x, -1), lambda dt: [_rand(3, 0)(dt)]),
    ("log_softmax_empty_dim", "ltorch.log_softmax", lambda x: F.log_softmax(x, -1), lambda dt: [_rand(3, 0)(dt)]),
    *[(f"{name}_zero_size", f"ltorch.{name}", lambda x, name=name: getattr(torch, name)(x, -1),
       lambda dt: [_rand(0, 4)(dt)]) for name in ("sum", "mean", "amax", "var", "logsumexp")],
    ("softmax_zero_size", "ltorch.softmax", lambda x: F.softmax(x, -1), lambda dt: [_rand(0, 4)(dt)]),
    ("log_softmax_zero_size", "ltorch.log_softmax", lambda x: F.log_softmax(x, -1), lambda dt: [_rand(0, 4)(dt)]),
    ("exp_zero_size", "ltorch.exp", lambda x: torch.exp(x), lambda dt: [_rand(2, 0)(dt)]),
    ("layer_norm_zero_size", "ltorch.layer_norm", lambda x: F.layer_norm(x, (4,)), lambda dt: [_rand(0, 4)(dt)]),
    ("mean_all_zero_size", "ltorch.mean", lambda x: x.mean(), lambda dt: [_rand(0, 4)(dt)]),
    ("mse_loss_zero_size", "ltorch.mse_loss", lambda x, y: F.mse_loss(x, y),
     lambda dt: [_rand(0, 3)(dt), _rand(0, 3)(dt)]),
    ("cross_entropy_zero_size", "ltorch.cross_entropy", lambda x, t: F.cross_entropy(x, t),
     _with_targets(_rand(0, 4), [])),
    # size-1 dims
    ("softmax_size1", "ltorch.softmax", lambda x: F.softmax(x, -1), lambda dt: [_rand(4, 1)(dt)]),
    ("log_softmax_size1", "ltorch.log_softmax", lambda x: F.log_softmax(x, -1), lambda dt: [_rand(4, 1)(dt)]),
    ("logsumexp_size1", "ltorch.logsumexp", lambda x: torch.logsumexp(x, -1), lambda dt: [_rand(4, 1)(dt)]),
    ("layer_norm_size1", "ltorch.layer_norm", lambda x: F.layer_norm(x, (1,)), lambda dt: [_rand(4, 1)(dt)]),
    ("rms_norm_size1", "ltorch.rms_norm", lambda x: F.rms_norm(x, (1,)), lambda dt: [_rand(4, 1)(dt)]),
    ("cross_entropy_size1", "ltorch.cross_entropy", lambda x, t: F.cross_entropy(x, t),
     _with_targets(_rand(4, 1), [0, 0, 0, 0])),
    # eps = 0 for the norms: rows of equal values (layer_norm) or zeros (rms_norm) divide 0 by 0
    ("layer_norm_eps0", "ltorch.layer_norm", lambda x: F.layer_norm(x, (4,), eps=0.0), lambda dt: [_rand(3, 4)(dt)]),
    ("layer_norm_eps0_equal", "ltorch.layer_norm", lambda x: F.layer_norm(x, (4,), eps=0.0),
     lambda dt: [_const([[2.0] * 4, [0.0] * 4, [1.0, 2.0, 3.0, 4.0]])(dt)]),
    ("layer_norm_large_offset", "ltorch.layer_norm", lambda x: F.layer_norm(x, (4,)),
     lambda dt: [(_rand(3, 4)(torch.float64) + 1e4).to(dt)]),
    ("rms_norm_eps0", "ltorch.rms_norm", lambda x: F.rms_norm(x, (4,), eps=0.0), lambda dt: [_rand(3, 4)(dt)]),
    ("rms_norm_eps0_zeros", "ltorch.rms_norm", lambda x: F.rms_norm(x, (4,), eps=0.0),
     lambda dt: [_const([[0.0] * 4, [1.0, 0.0, 0.0, 0.0]])(dt)]),
    ("var_large_offset", "ltorch.var", lambda x: torch.var(x, -1),
     lambda dt: [(_rand(3, 16)(torch.float64) + 1e4).to(dt)]),
    # losses: reductions, every target ignored (mean divides 0 by 0), label smoothing at its ends
    ("cross_entropy_mean", "ltorch.cross_entropy", lambda x, t: F.cross_entropy(x, t),
     _with_targets(_rand(4, 5), [0, 1, 4, 2])),
    ("cross_entropy_sum", "ltorch.cross_entropy", lambda x, t: F.cross_entropy(x, t, reduction="sum"),
     _with_targets(_rand(4, 5), [0, 1, 4, 2])),
    ("cross_entropy_all_ignored", "ltorch.cross_entropy", lambda x, t: F.cross_entropy(x, t),
     _with_targets(_rand(3, 5), [-100, -100, -100])),
    ("cross_entropy_smoothing_1", "ltorch.cross_entropy", lambda x, t: F.cross_entropy(x, t, label_smoothing=1.0),
     _with_targets(_rand(3, 5), [0, 3, 1])),
    ("cross_entropy_large_mean", "ltorch.cross_entropy", lambda x, t: F.cross_entropy(x, t),
     _with_targets(_const([[1e8, 1e8, 0, 0], [-1e4, -1e4, -1e4, -1e4], [3e38, 0, 0, -3e38]]), [0, 2, 3])),
    ("nll_loss_all_ignored", "ltorch.nll_loss", lambda x, t: F.nll_loss(x, t),
     _with_targets(_rand(3, 5), [-100, -100, -100])),
    ("nll_loss_mean", "ltorch.nll_loss", lambda x, t: F.nll_loss(x, t), _with_targets(_rand(3, 5), [0, 4, 2])),
    ("mse_loss_mean_overflow", "ltorch.mse_loss", lambda x, y: F.mse_loss(x, y),
     lambda dt: [_const([[3e38, -3e38], [1.0, 2.0]])(dt), _const([[-3e38, 3e38], [1.0, 2.0]])(dt)]),
    ("sum_all_overflow", "ltorch.sum", lambda x: x.sum(), lambda dt: [_const([[3e38, 3e38], [-1.0, 1.0]])(dt)]),
    ("mean_all_large", "ltorch.mean", lambda x: x.mean(), lambda dt: [_const([[3e38, 3e38], [3e38, 3e38]])(dt)]),
]
PARAM_BY_ID = {e[0]: e for e in PARAM_OPS}
PARAM_DTYPES = DTYPES if FULL else {"f32": torch.float32, "bf16": torch.bfloat16}

# Parameter edges whose eager NaN or infinities are wrong: the float64 reference instead, {id: why}.
PARAM_F64_REFERENCE = {}

# Parameter edges whose gradient fails in a vjp rule: {id: reason}.
PARAM_VJP_XFAIL = {}


def _param_cases():
    for pid, op, fn, make in PARAM_OPS:
        for dname in PARAM_DTYPES:
            for mode in MODES:
                for how in EXECUTORS:
                    reason = PARAM_VJP_XFAIL.get(pid) if mode == "grad" else None
                    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                    yield pytest.param(pid, dname, mode, how, id=f"{pid}-{dname}-{mode}-{how}", marks=marks)


@pytest.mark.parametrize("pid,dname,mode,how", list(_param_cases()))
def test_param_edge(pid, dname, mode, how, request):
    _, op, fn, make = PARAM_BY_ID[pid]
    expected = bool(request.node.get_closest_marker("xfail"))
    ok = False
    try:
        inputs = make(DTYPES[dname])
        try:
            want = _evaluate(fn, inputs, None, mode)
        except Exception:  # PyTorch refuses it: so must thunder_c
            with pytest.raises(Exception):
                _evaluate(fn, inputs, how, mode)
            ok = True
            return
        ref = _reference_f64(fn, inputs, mode)
        masks = _rounded(ref, want) if pid in PARAM_F64_REFERENCE else want
        gouts, ggrad = _evaluate(fn, inputs, how, mode)
        (wouts, wgrad), (routs, rgrad), (mouts, mgrad) = want, ref, masks
        assert len(gouts) == len(wouts), f"{len(gouts)} outputs, want {len(wouts)}"
        for k, (g, w, r, mk) in enumerate(zip(gouts, wouts, routs, mouts)):
            check(g, w, f"output {k}", r, masks=mk, rowwise=True)
        if mode == "grad" and wgrad is not None:
            assert ggrad is not None, "no gradient"
            check(ggrad, wgrad, "gradient", rgrad, masks=mgrad, rowwise=True)
        ok = True
    finally:
        _record(op, request.node.callspec.id, ok, expected)
