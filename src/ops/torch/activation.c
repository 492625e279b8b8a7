/* activation.c — the activations of torch.nn.functional beyond relu / gelu / silu (nn.c): hardswish,
 * hardsigmoid, hardtanh, relu6, leaky_relu, elu, selu, celu, mish, softplus, logsigmoid, glu, softsign,
 * tanhshrink, softshrink, hardshrink, threshold, prelu and rrelu (evaluation mode).
 *
 * Each is a composite of differentiable ops, so its gradient is the decomposition's. Numerics follow
 * PyTorch's CPU kernels (aten/src/ATen/native/cpu/Activation.cpp): an activation with a kernel of its own
 * computes every step in the computation dtype (float32 for bfloat16 and float16) and rounds once, with
 * the kernel's formula and operation order; softsign and tanhshrink are Python compositions in PyTorch
 * (torch/nn/functional.py) and are recorded as the same ltorch ops, each rounding to the tensor's dtype.
 * Where a kernel converts a Scalar parameter to the tensor's element type before comparing (threshold,
 * hardshrink, softshrink, hardtanh on integers) the parameter is rounded to that type here too.
 *
 * inplace=True is the in-place op ltorch.<name>_ (the out-of-place op, then prims.copy_ into the input;
 * torch/inplace.c): the Python frontend records F.elu(x, inplace=True) as ltorch.elu_(x, alpha). */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

#define L1(op, a, o) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_##op, a, o))
#define L2(op, a, b, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, b, o))
#define L3(op, a, b, c, o) TH_TRY(th_tu_call3(tr, TH_OP_ltorch_##op, a, b, c, o))

static th_status reject_inplace(const char *op, const th_arg *inplace) {
  bool b;
  TH_TRY(th_tu_bool(op, "inplace", inplace, &b));
  if (b) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: inplace=True is recorded as %s_ (call that op)", op, op);
  return TH_OK;
}

/* The tensor input of a floating-only activation converted to its computation dtype; *res is the dtype to
 * round the result to. PyTorch's kernels of these ops exist for floating dtypes only
 * ("\"elu_cpu\" not implemented for 'Long'"). */
static th_status float_input(th_trace *tr, const char *op, const char *kernel, th_arg a, th_arg *x, th_dtype *res) {
  const th_value *v = th_meta_tensor(&a);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"%s\" not implemented for '%s' (expected a floating-point input)", op, kernel,
                    th_tu_scalar_type_name(v->dtype));
  *res = v->dtype;
  *x = a;
  return th_tu_convert(tr, x, th_tu_computation_dtype(v->dtype));
}

static th_status finish(th_trace *tr, th_arg *out, th_dtype res) { return th_tu_convert(tr, out, res); }

/* A Scalar parameter as the kernel sees it after Scalar::to<scalar_t>(): rounded to float32, bfloat16 or
 * float16, or truncated toward zero for an integer dtype. */
static double as_element(th_dtype dt, double v) {
  switch (dt) {
    case TH_F32: return (double)(float)v;
    case TH_BF16: return (double)th_bf16_to_f32(th_f32_to_bf16((float)v));
    case TH_F16: return (double)th_f16_to_f32(th_f32_to_f16((float)v));
    case TH_F64: return v;
    default: return trunc(v);
  }
}

/* The number argument for an operand of dtype dt: a Python float for floating dtypes, an int otherwise. */
static th_arg number_for(th_dtype dt, double v) {
  return th_dtype_is_float(dt) ? th_arg_float(v) : th_arg_int((int64_t)v);
}

static th_status param(const char *op, const char *what, const th_arg *a, double *out) {
  return th_tu_float(op, what, a, out);
}

/* where(x < lo, lo, x), then where(r > hi, hi, r): NaN propagates, as PyTorch's clamp. */
static th_status clamp_numbers(th_trace *tr, th_arg x, th_arg lo, th_arg hi, th_arg *out) {
  th_arg m, r;
  L2(lt, x, lo, &m);
  L3(where, m, lo, x, &r);
  L2(gt, r, hi, &m);
  L3(where, m, hi, r, out);
  return TH_OK;
}

/* ---- the hard family ------------------------------------------------------------------------------ */

/* hardswish(x) = x * min(max(x + 3, 0), 6) / 6 (PyTorch's kernel, in this order). */
th_status ltorch_hardswish_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[1]));
  th_arg x, t;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, sym->qualname, "hardswish_cpu", args[0], &x, &res));
  L2(add, x, th_arg_float(3.0), &t);
  TH_TRY(clamp_numbers(tr, t, th_arg_float(0.0), th_arg_float(6.0), &t));
  L2(mul, x, t, &t);
  L2(true_divide, t, th_arg_float(6.0), out);
  return finish(tr, out, res);
}

/* hardsigmoid(x) = min(max(x + 3, 0), 6) / 6. */
th_status ltorch_hardsigmoid_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[1]));
  th_arg x, t;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, sym->qualname, "hardsigmoid_cpu", args[0], &x, &res));
  L2(add, x, th_arg_float(3.0), &t);
  TH_TRY(clamp_numbers(tr, t, th_arg_float(0.0), th_arg_float(6.0), &t));
  L2(true_divide, t, th_arg_float(6.0), out);
  return finish(tr, out, res);
}

/* hardtanh(x, lo, hi) = clamp(x, lo, hi) in x's dtype (integers too, with the bounds truncated toward
 * zero as the kernel's Scalar conversion does). PyTorch's checks: lo <= hi, no bool tensor, and an
 * unsigned tensor takes no negative bound. */
static th_status hardtanh(th_trace *tr, const char *op, th_arg a, double lo, double hi, th_arg *out) {
  const th_value *v = th_meta_tensor(&a);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (lo > hi) return th_error(TH_ERR_VALUE, "%s: min_val cannot be greater than max_val", op);
  if (v->dtype == TH_BOOL) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: Bool inputs not supported for hardtanh", op);
  if (th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"clamp_cpu\" not implemented for '%s'", op, th_tu_scalar_type_name(v->dtype));
  if (v->dtype == TH_U8 && (lo < 0 || hi < 0))
    return th_error(TH_ERR_RUNTIME, "%s: cannot do hardtanh on an unsigned type with negative limits", op);
  th_dtype dt = v->dtype;
  th_arg x = a;
  TH_TRY(th_tu_convert(tr, &x, th_tu_computation_dtype(dt)));
  TH_TRY(clamp_numbers(tr, x, number_for(dt, as_element(dt, lo)), number_for(dt, as_element(dt, hi)), out));
  return finish(tr, out, dt);
}

th_status ltorch_hardtanh_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[3]));
  double lo, hi;
  TH_TRY(param(sym->qualname, "min_val", &args[1], &lo));
  TH_TRY(param(sym->qualname, "max_val", &args[2], &hi));
  return hardtanh(tr, sym->qualname, args[0], lo, hi, out);
}

/* relu6(x) = hardtanh(x, 0, 6) (PyTorch's relu6). */
th_status ltorch_relu6_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[1]));
  return hardtanh(tr, sym->qualname, args[0], 0.0, 6.0, out);
}

/* ---- leaky_relu, rrelu, prelu ------------------------------------------------------------------------ */

/* x > 0 ? x : x * slope (PyTorch's leaky_relu kernel). */
static th_status leaky(th_trace *tr, const char *op, const char *kernel, th_arg a, double slope, th_arg *out) {
  th_arg x, m, t;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, op, kernel, a, &x, &res));
  L2(gt, x, th_arg_float(0.0), &m);
  L2(mul, x, th_arg_float(slope), &t);
  L3(where, m, x, t, out);
  return finish(tr, out, res);
}

th_status ltorch_leaky_relu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[2]));
  double slope;
  TH_TRY(param(sym->qualname, "negative_slope", &args[1], &slope));
  return leaky(tr, sym->qualname, "leaky_relu_cpu", args[0], slope, out);
}

/* rrelu in evaluation mode is leaky_relu with the slope (lower + upper) / 2. In training mode each
 * negative element draws its own slope from U(lower, upper), which is not implemented. */
th_status ltorch_rrelu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  TH_TRY(reject_inplace(op, &args[4]));
  double lower, upper;
  bool training;
  TH_TRY(param(op, "lower", &args[1], &lower));
  TH_TRY(param(op, "upper", &args[2], &upper));
  TH_TRY(th_tu_bool(op, "training", &args[3], &training));
  if (lower > upper)
    return th_error(TH_ERR_RUNTIME, "%s: Lower bound should be less than or equal to the upper bound", op);
  if (training)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.nn.functional.rrelu with training=True (random slopes) is not supported", op);
  return leaky(tr, op, "rrelu_with_noise_cpu", args[0], (lower + upper) / 2, out);
}

/* prelu(x, w) = x > 0 ? x : w * x, w one value or one per channel (dim 1), broadcast over the other
 * dims (PyTorch's prelu and its checks). */
th_status ltorch_prelu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]), *w = th_meta_tensor(&args[1]);
  if (!v || !w) return th_error(TH_ERR_TYPE, "%s: expected input and weight to be tensors", op);
  if (v->dtype != w->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: prelu: Type promoting not supported. Got %s and %s", op,
                    th_tu_scalar_type_name(v->dtype), th_tu_scalar_type_name(w->dtype));
  int64_t wn = th_value_numel(w);
  if (wn != 1) {
    if (v->ndim == 0) return th_error(TH_ERR_RUNTIME, "%s: Not allow zero-dim input tensor.", op);
    int64_t channels = v->ndim > 1 ? v->shape[1] : 1;
    if (channels != wn)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Mismatch of parameter numbers and input channel size. Found parameter numbers = %lld and "
                      "channel size = %lld.",
                      op, (long long)wn, (long long)channels);
  }
  if (w->ndim > 1)
    return th_error(TH_ERR_RUNTIME, "%s: prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = %d", op,
                    w->ndim);
  th_arg x, wt = args[1], m, t;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, op, "prelu_cpu", args[0], &x, &res));
  TH_TRY(th_tu_convert(tr, &wt, th_tu_computation_dtype(w->dtype)));
  if (v->ndim >= 2) { /* [C] -> [1, C, 1, ...] */
    int64_t shape[TH_MAX_DIMS];
    for (int d = 0; d < v->ndim; d++) shape[d] = 1;
    shape[1] = wn;
    TH_TRY(th_tu_reshape(tr, wt, v->ndim, shape, &wt));
  } else if (w->ndim == 1 && v->ndim == 0) {
    TH_TRY(th_tu_reshape(tr, wt, 0, NULL, &wt));
  }
  L2(gt, x, th_arg_float(0.0), &m);
  L2(mul, wt, x, &t);
  L3(where, m, x, t, out);
  return finish(tr, out, res);
}

/* ---- the exponential family --------------------------------------------------------------------------- */

/* elu(x; alpha, scale, input_scale) = x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale, with
 * the coefficients in the computation dtype as PyTorch's kernel. The exponential's argument is
 * min(x, 0), which changes no selected value and keeps a large positive x from overflowing into an
 * infinite, unselected branch (whose zero gradient would become NaN). */
static th_status elu(th_trace *tr, const char *op, const char *kernel, th_arg a, double alpha, double scale,
                     double input_scale, th_arg *out) {
  th_arg x, m, pos, neg;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, op, kernel, a, &x, &res));
  const th_value *xv = th_meta_tensor(&x);
  double negcoef = xv->dtype == TH_F64 ? alpha * scale : (double)((float)alpha * (float)scale);
  L2(gt, x, th_arg_float(0.0), &m);
  L2(mul, x, th_arg_float(scale), &pos);
  L3(where, m, th_arg_float(0.0), x, &neg);
  L2(mul, neg, th_arg_float(input_scale), &neg);
  L1(expm1, neg, &neg);
  L2(mul, neg, th_arg_float(negcoef), &neg);
  L3(where, m, pos, neg, out);
  return finish(tr, out, res);
}

th_status ltorch_elu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[2]));
  double alpha;
  TH_TRY(param(sym->qualname, "alpha", &args[1], &alpha));
  return elu(tr, sym->qualname, "elu_cpu", args[0], alpha, 1.0, 1.0, out);
}

/* selu(x) = elu(x; alpha, scale, 1) with SELU's constants (PyTorch's at::selu). */
th_status ltorch_selu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[1]));
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return elu(tr, sym->qualname, "elu_cpu", args[0], alpha, scale, 1.0, out);
}

/* celu(x, alpha) = elu(x; alpha, 1, 1 / alpha) (PyTorch's at::celu, which rejects alpha == 0). */
th_status ltorch_celu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[2]));
  double alpha;
  TH_TRY(param(sym->qualname, "alpha", &args[1], &alpha));
  if (alpha == 0.0) return th_error(TH_ERR_RUNTIME, "%s: ZeroDivisionError: alpha cannot be 0 for CELU", sym->qualname);
  return elu(tr, sym->qualname, "elu_cpu", args[0], alpha, 1.0, 1.0 / alpha, out);
}

/* softplus(x, beta, threshold) = x * beta > threshold ? x : log1p(exp(x * beta)) / beta (PyTorch's kernel);
 * the exponential's argument is min(x * beta, threshold), equal where that branch is selected. */
th_status ltorch_softplus_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  double beta, threshold;
  TH_TRY(param(op, "beta", &args[1], &beta));
  TH_TRY(param(op, "threshold", &args[2], &threshold));
  th_arg x, xb, m, t;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, op, "softplus_cpu", args[0], &x, &res));
  L2(mul, x, th_arg_float(beta), &xb);
  L2(gt, xb, th_arg_float(threshold), &m);
  L3(where, m, th_arg_float(threshold), xb, &t);
  L1(exp, t, &t);
  L1(log1p, t, &t);
  L2(true_divide, t, th_arg_float(beta), &t);
  L3(where, m, x, t, out);
  return finish(tr, out, res);
}

/* mish(x) = x * tanh(log1p(exp(x))) (PyTorch's kernel). */
th_status ltorch_mish_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(reject_inplace(sym->qualname, &args[1]));
  th_arg x, t;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, sym->qualname, "mish_cpu", args[0], &x, &res));
  L1(exp, x, &t);
  L1(log1p, t, &t);
  L1(tanh, t, &t);
  L2(mul, x, t, out);
  return finish(tr, out, res);
}

/* logsigmoid(x) = min(x, 0) - log1p(exp(-|x|)) (PyTorch's log_sigmoid kernel). */
th_status ltorch_logsigmoid_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_arg x, m, lo, t;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, sym->qualname, "log_sigmoid_cpu", args[0], &x, &res));
  L2(lt, x, th_arg_float(0.0), &m);
  L3(where, m, x, th_arg_float(0.0), &lo);
  L1(abs, x, &t);
  L1(neg, t, &t);
  L1(exp, t, &t);
  L1(log1p, t, &t);
  L2(sub, lo, t, out);
  return finish(tr, out, res);
}

/* glu(x, dim) = a * sigmoid(b), a and b the halves of x along dim, with sigmoid spelled 1 / (1 + exp(-b))
 * in the computation dtype as PyTorch's kernel. */
th_status ltorch_glu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (v->ndim == 0)
    return th_error(TH_ERR_RUNTIME, "%s: glu does not support scalars because halving size must be even", op);
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  int64_t n = v->shape[d];
  if (n % 2)
    return th_error(TH_ERR_RUNTIME, "%s: Halving dimension must be even, but dimension %d is size %lld", op, d,
                    (long long)n);
  th_arg x, a, b, t;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, op, "glu_cpu", args[0], &x, &res));
  TH_TRY(th_tu_slice_in_dim(tr, x, 0, n / 2, 1, d, &a));
  TH_TRY(th_tu_slice_in_dim(tr, x, n / 2, n, 1, d, &b));
  L1(neg, b, &t);
  L1(exp, t, &t);
  L2(add, th_arg_float(1.0), t, &t);
  L2(true_divide, th_arg_float(1.0), t, &t);
  L2(mul, a, t, out);
  return finish(tr, out, res);
}

/* ---- Python compositions in PyTorch (each op rounds to the tensor's dtype) --------------------------- */

/* softsign(x) = x / (|x| + 1) (torch.nn.functional.softsign). */
th_status ltorch_softsign_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  th_arg t;
  L1(abs, args[0], &t);
  L2(add, t, th_arg_int(1), &t);
  L2(true_divide, args[0], t, out);
  return TH_OK;
}

/* tanhshrink(x) = x - tanh(x) (torch.nn.functional.tanhshrink). */
th_status ltorch_tanhshrink_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  th_arg t;
  L1(tanh, args[0], &t);
  L2(sub, args[0], t, out);
  return TH_OK;
}

/* ---- shrinkage and threshold ------------------------------------------------------------------------- */

/* lambd as the kernel reads it, with PyTorch's range check for softshrink. */
static th_status lambd_of(const char *op, const th_arg *a, th_dtype dt, bool check, double *out) {
  double l = 0;
  TH_TRY(param(op, "lambd", a, &l));
  if (check && !(l >= 0))
    return th_error(TH_ERR_RUNTIME, "%s: lambda must be in range [0, %g] for input dtype %s, but found %g", op,
                    dt == TH_F64    ? 1.79769e+308
                    : dt == TH_F32  ? 3.40282e+38
                    : dt == TH_BF16 ? 3.38953e+38
                                    : 65504.0,
                    th_tu_scalar_type_name(dt), l);
  *out = as_element(dt, l);
  return TH_OK;
}

/* softshrink(x, l) = x > l ? x - l : (x < -l ? x + l : 0); NaN propagates (PyTorch's kernel). */
th_status ltorch_softshrink_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_arg x, m, t, u;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, op, "softshrink_cpu", args[0], &x, &res));
  double l = 0;
  TH_TRY(lambd_of(op, &args[1], res, true, &l));
  L2(lt, x, th_arg_float(-l), &m);
  L2(add, x, th_arg_float(l), &t);
  L3(where, m, t, th_arg_float(0.0), &u);
  L2(gt, x, th_arg_float(l), &m);
  L2(sub, x, th_arg_float(l), &t);
  L3(where, m, t, u, &u);
  L2(ne, x, x, &m);
  L3(where, m, x, u, out);
  return finish(tr, out, res);
}

/* hardshrink(x, l) = -l <= x <= l ? 0 : x (PyTorch's kernel; NaN stays NaN). */
th_status ltorch_hardshrink_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_arg x, m, m2;
  th_dtype res = TH_F32;
  TH_TRY(float_input(tr, op, "hardshrink_cpu", args[0], &x, &res));
  double l = 0;
  TH_TRY(lambd_of(op, &args[1], res, false, &l));
  L2(ge, x, th_arg_float(-l), &m);
  L2(le, x, th_arg_float(l), &m2);
  L2(logical_and, m, m2, &m);
  L3(where, m, th_arg_float(0.0), x, out);
  return finish(tr, out, res);
}

/* threshold(x, threshold, value) = x <= threshold ? value : x, in x's dtype: floating and integer tensors,
 * threshold and value converted to the element type as the kernel does (an unsigned tensor refuses a
 * value it cannot hold, as Scalar::to<uint8_t>). */
th_status ltorch_threshold_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  TH_TRY(reject_inplace(op, &args[3]));
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  th_dtype dt = v->dtype;
  if (dt == TH_BOOL || th_dtype_is_fp8(dt))
    return th_error(TH_ERR_RUNTIME, "%s: \"threshold_cpu\" not implemented for '%s'", op, th_tu_scalar_type_name(dt));
  double th, val;
  TH_TRY(param(op, "threshold", &args[1], &th));
  TH_TRY(param(op, "value", &args[2], &val));
  if (dt == TH_U8) {
    const char *bad = th < 0 || th >= 256 ? "threshold" : val < 0 || val >= 256 ? "value" : NULL;
    if (bad)
      return th_error(TH_ERR_RUNTIME, "%s: value cannot be converted to type uint8_t without overflow (%s)", op, bad);
  }
  th_arg x = args[0], m;
  TH_TRY(th_tu_convert(tr, &x, th_tu_computation_dtype(dt)));
  L2(le, x, number_for(dt, as_element(dt, th)), &m);
  L3(where, m, number_for(dt, as_element(dt, val)), x, out);
  return finish(tr, out, dt);
}
