/* nn.c — torch.nn.functional-level ops: activations (relu, gelu, silu), softmax / log_softmax /
 * logsumexp, layer_norm, rms_norm, embedding, scaled_dot_product_attention, the losses (cross_entropy,
 * nll_loss, mse_loss) and dropout.
 *
 * Numerics are designed to match PyTorch's kernels: activations and normalizations run every step in
 * the computation dtype (float32 for f16/bf16) and round once at the end, with PyTorch's formulas and
 * operation order (gelu: x * 0.5 * (1 + erf(x * M_SQRT1_2)); layer_norm: biased var_mean,
 * (x - mean) * rsqrt(var + eps); softmax: exp(x - max) / sum; log_softmax: (x - max) - log(sum)). The
 * row statistics of layer_norm and rms_norm are float64 for a float32 computation, where float32
 * would overflow for values beyond ~1.8e19 (PyTorch's give NaN or 0 there). Composite ops that
 * PyTorch itself builds from other ops (scaled_dot_product_attention's math path, logsumexp, mse_loss)
 * are recorded as nested ltorch calls, as Thunder does. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/torch/attention.h"
#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

/* sqrt(1/2) and sqrt(2/pi) = M_SQRT2 * M_2_SQRTPI * 0.5, as PyTorch's gelu kernels spell them */
static const double k_sqrt1_2 = 0.70710678118654752440;
static const double k_beta = 0.79788456080286535588;

static th_status kw_call1(th_trace *tr, th_op_id op, int nargs, const th_arg *args, const char *kwname, th_arg kwval,
                          th_arg *out) {
  const char *const names[1] = {kwname};
  return th_tu_call_kw(tr, op, nargs, args, 1, names, &kwval, out);
}

/* ---- activations ------------------------------------------------------------------------------------ */

/* inplace=True is the in-place op ltorch.<name>_ (the out-of-place op, then prims.copy_ into the input;
 * torch/inplace.c): the Python frontend records F.relu(x, inplace=True) as ltorch.relu_(x), so that the
 * tensor updated takes its new version; a trace written by hand calls ltorch.relu_ itself. */
static th_status no_inplace(const char *op, const th_arg *inplace) {
  bool b;
  TH_TRY(th_tu_bool(op, "inplace", inplace, &b));
  if (b) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: inplace=True is recorded as %s_(input) (call that op)", op, op);
  return TH_OK;
}

/* relu(a) = where(a <= 0, 0, a): NaN propagates (torch.relu(nan) is nan). */
th_status ltorch_relu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(no_inplace(sym->qualname, &args[1]));
  th_arg mask;
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_le, args[0], th_arg_int(0), &mask));
  return th_tu_call3(tr, TH_OP_ltorch_where, mask, th_arg_int(0), args[0], out);
}

/* The input in its computation dtype and the result dtype to convert back to. PyTorch's CPU kernels of
 * these activations exist for floating dtypes only: an integer or bool tensor is its error
 * ("\"GeluKernelImpl\" not implemented for 'Long'"), not a silently converted result. */
static th_status float_compute(th_trace *tr, const char *op, const char *kernel, th_arg a, th_arg *x, th_tu_type *res) {
  const th_value *v = th_meta_tensor(&a);
  if (v && !th_dtype_is_float(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"%s\" not implemented for '%s' (expected a floating-point input)", op, kernel,
                    th_tu_scalar_type_name(v->dtype));
  th_tu_type comp;
  TH_TRY(th_tu_promote(op, 1, &a, TH_TU_PROMO_INT_TO_FLOAT, &comp, res));
  *x = a;
  return th_tu_convert_type(tr, x, comp);
}

/* gelu, PyTorch's formulas in the computation dtype:
 *   'none': x * 0.5 * (1 + erf(x * M_SQRT1_2))
 *   'tanh': 0.5 * x * (1 + tanh(kBeta * (x + kKappa * x^3))), kBeta = sqrt(2 / pi), kKappa = 0.044715 */
th_status ltorch_gelu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname, *approx = args[1].u.s;
  bool tanh_form = !strcmp(approx, "tanh");
  if (!tanh_form && strcmp(approx, "none"))
    return th_error(TH_ERR_VALUE, "%s: gelu does not support the approximate=%s argument (expected 'none' or 'tanh')",
                    op, approx);
  th_arg x, t, u;
  th_tu_type res;
  TH_TRY(float_compute(tr, op, "GeluKernelImpl", args[0], &x, &res));
  if (!tanh_form) {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, th_arg_float(k_sqrt1_2), &t));
    TH_TRY(th_tu_call1(tr, TH_OP_prims_erf, t, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_add, th_arg_float(1.0), t, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, th_arg_float(0.5), &u));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, u, t, out));
  } else {
    const double kKappa = 0.044715;
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, x, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, t, x, &t)); /* x^3 */
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, th_arg_float(kKappa), t, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_add, x, t, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, th_arg_float(k_beta), t, &t));
    TH_TRY(th_tu_call1(tr, TH_OP_prims_tanh, t, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_add, th_arg_float(1.0), t, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, th_arg_float(0.5), x, &u));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, u, t, out));
  }
  return th_tu_convert_type(tr, out, res);
}

/* silu(x) = x / (1 + exp(-x)) in the computation dtype (PyTorch's kernel). */
th_status ltorch_silu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(no_inplace(sym->qualname, &args[1]));
  th_arg x, t;
  th_tu_type res;
  TH_TRY(float_compute(tr, sym->qualname, "silu_cpu", args[0], &x, &res));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, x, &t));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_exp, t, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, th_arg_float(1.0), t, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, x, t, out));
  return th_tu_convert_type(tr, out, res);
}

/* ---- softmax family ------------------------------------------------------------------------------ */

th_status th_tu_softmax(th_trace *tr, const char *op, th_arg a, int64_t dim, bool has_dtype, th_dtype dtype, bool log,
                        th_arg *out) {
  const th_value *v = a.u.value;
  th_dtype rdt = has_dtype ? dtype : v->dtype;
  int d;
  TH_TRY(th_meta_canonical_dim(op, dim, v->ndim, &d));
  if (!th_dtype_is_float(rdt)) /* PyTorch has no integer kernel (an integer input with dtype=float is fine) */
    return th_error(
      TH_ERR_RUNTIME, "%s: \"%s\" not implemented for '%s' (expected a floating-point input or dtype)", op,
      d == v->ndim - 1 || v->ndim == 0 ? (log ? "log_softmax_lastdim_kernel_impl" : "softmax_lastdim_kernel_impl")
                                       : (log ? "log_softmax_kernel_impl" : "softmax_kernel_impl"),
      th_tu_scalar_type_name(rdt));
  /* Both shift by the row maximum m = amax(x) first, as PyTorch's kernels: z = x - m is exact where x
   * is close to m and exp(z) cannot overflow. softmax = exp(z) / sum(exp(z)); log_softmax = z -
   * log(sum(exp(z))), which keeps the shift: x - logsumexp(x) subtracts two numbers of x's magnitude,
   * whose rounding error (an ulp of 1e8 is 8 in float32) swamps a result of order 1. An infinite or
   * NaN maximum makes its row NaN, as in PyTorch. An empty tensor has no maximum (and needs none). */
  th_arg x = a, dim_arg = th_arg_int(d), z, e, s, r;
  TH_TRY(th_tu_convert(tr, &x, th_tu_computation_dtype(rdt)));
  z = x;
  if (th_value_numel(v) > 0) {
    th_arg m;
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_amax, x, dim_arg, th_arg_bool(true), &m));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, x, m, &z));
  }
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_exp, z, &e));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_sum, e, dim_arg, th_arg_bool(true), &s));
  if (log) {
    TH_TRY(th_tu_call1(tr, TH_OP_ltorch_log, s, &s));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, z, s, &r));
  } else {
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, e, s, &r));
  }
  *out = r;
  return th_tu_convert(tr, out, rdt);
}

static th_status softmax_op(th_trace *tr, const th_symbol *sym, const th_arg *args, bool log, th_arg *out) {
  int64_t dim;
  bool has_dtype;
  th_dtype dtype;
  TH_TRY(th_meta_int(sym->qualname, "dim", &args[1], &dim));
  TH_TRY(th_tu_dtype_arg(sym->qualname, "dtype", &args[2], &dtype, &has_dtype));
  return th_tu_softmax(tr, sym->qualname, args[0], dim, has_dtype, dtype, log, out);
}

th_status ltorch_softmax_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return softmax_op(tr, sym, args, false, out);
}
th_status ltorch_log_softmax_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return softmax_op(tr, sym, args, true, out);
}

/* logsumexp(a, dim, keepdim) = log(sum(exp(a - m))) + m with m = amax(a, dim, keepdim=True) and
 * infinite maxima replaced by 0 (so all -inf rows give -inf, not nan), as PyTorch and Thunder. Bool and
 * integer inputs are converted to float32 first (PyTorch's result dtype for them). */
th_status ltorch_logsumexp_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_arg a0 = args[0];
  if (th_meta_dtype_is_exact(a0.u.value->dtype)) TH_TRY(th_tu_convert(tr, &a0, TH_F32));
  th_arg fargs[3] = {a0, args[1], args[2]};
  args = fargs;
  const th_value *v = args[0].u.value;
  int64_t dims[TH_MAX_DIMS];
  int nd;
  bool keepdim;
  TH_TRY(th_tu_reduction_dims(op, &args[1], v->ndim, dims, &nd));
  TH_TRY(th_tu_bool(op, "keepdim", &args[2], &keepdim));
  th_arg items[TH_MAX_DIMS], dim_arg = th_tu_ints(items, nd, dims);
  th_arg m, t, inf, s;
  if (th_value_numel(v) == 0) {
    /* nothing to stabilize (and amax rejects an empty reduced dim): log(sum(exp(a))), which is -inf
     * over an empty dim and empty over a non-empty one, as PyTorch */
    TH_TRY(th_tu_call1(tr, TH_OP_ltorch_exp, args[0], &t));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_sum, t, dim_arg, th_arg_bool(keepdim), &s));
    return th_tu_call1(tr, TH_OP_ltorch_log, s, out);
  }
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_amax, args[0], dim_arg, th_arg_bool(true), &m));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_abs, m, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, t, th_arg_float(INFINITY), &inf));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, inf, th_arg_int(0), m, &m));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, args[0], m, &t));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_exp, t, &t));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_sum, t, dim_arg, th_arg_bool(keepdim), &s));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_log, s, &s));
  if (!keepdim && v->ndim > 0) TH_TRY(th_tu_squeeze(tr, m, nd, dims, &m));
  return th_tu_call2(tr, TH_OP_ltorch_add, s, m, out);
}

/* ---- normalization ---------------------------------------------------------------------------------- */

/* Checks that `shape` (n entries) is the trailing shape of a and that weight/bias (if given) have it. */
static th_status check_normalized_shape(const char *op, const th_value *a, const int64_t *shape, int n,
                                        const th_arg *weight, const th_arg *bias) {
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  if (n < 1)
    return th_error(
      TH_ERR_RUNTIME,
      "%s: Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, "
      "but got normalized_shape = []",
      op);
  const th_arg *params[2] = {weight, bias};
  const char *names[2] = {"weight", "bias"};
  for (int i = 0; i < 2; i++) {
    if (!params[i] || params[i]->kind == TH_ARG_NONE) continue;
    const th_value *p = params[i]->u.value;
    if (p->ndim != n || memcmp(p->shape, shape, sizeof(int64_t) * (size_t)n))
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected %s to be of same shape as normalized_shape, but got %s of shape %s and "
                      "normalized_shape = %s",
                      op, names[i], names[i], th_meta_shape_str(p->shape, p->ndim, b0, sizeof b0),
                      th_meta_shape_str(shape, n, b1, sizeof b1));
  }
  if (a->ndim < n || memcmp(a->shape + a->ndim - n, shape, sizeof(int64_t) * (size_t)n)) {
    char b2[TH_META_SHAPE_BUF];
    char star[TH_META_SHAPE_BUF + 4];
    th_meta_shape_str(shape, n, b2, sizeof b2);
    snprintf(star, sizeof star, "[*, %s", b2 + 1);
    return th_error(
      TH_ERR_RUNTIME, "%s: Given normalized_shape=%s, expected input with shape %s, but got input of size%s", op,
      th_meta_shape_str(shape, n, b0, sizeof b0), star, th_meta_shape_str(a->shape, a->ndim, b1, sizeof b1));
  }
  return TH_OK;
}

/* Broadcasts a tensor reduced over the last n dims of v back to v's shape (one broadcast_in_dim). */
static th_status unreduce(th_trace *tr, th_arg r, const th_value *v, int n, th_arg *out) {
  int64_t kept[TH_MAX_DIMS];
  for (int i = 0; i < v->ndim - n; i++) kept[i] = i;
  th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, r, th_tu_ints(si, v->ndim, v->shape),
                     th_tu_ints(bi, v->ndim - n, kept), out);
}

/* layer_norm: var_mean(x, correction=0); out = (x - mean) * rsqrt(var + eps); out * weight + bias in
 * the computation dtype; one conversion back to a's dtype. The statistics and rstd are float64 for a
 * float32 computation (converted back once per row): var_mean accumulates in float64 anyway, and the
 * variance of float32 values spread beyond ~1.8e19 overflows float32 where rstd does not (rsqrt(inf)
 * would make every output 0). */
th_status ltorch_layer_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  int64_t nshape[TH_MAX_DIMS], dims[TH_MAX_DIMS];
  int n;
  double eps;
  TH_TRY(th_meta_int_list(op, "normalized_shape", &args[1], nshape, &n));
  TH_TRY(check_normalized_shape(op, v, nshape, n, &args[2], &args[3]));
  TH_TRY(th_tu_float(op, "eps", &args[4], &eps));
  for (int i = 0; i < n; i++) dims[i] = v->ndim - n + i;
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  th_arg x = args[0], xs, items[TH_MAX_DIMS], vm, var, mean, y;
  TH_TRY(th_tu_convert(tr, &x, comp));
  xs = x;
  TH_TRY(th_tu_convert(tr, &xs, comp == TH_F32 ? TH_F64 : comp));
  th_arg pargs[2] = {xs, th_tu_ints(items, n, dims)};
  TH_TRY(kw_call1(tr, TH_OP_prims_var_mean, 2, pargs, "correction", th_arg_float(0.0), &vm));
  var = vm.u.seq.items[0];
  mean = vm.u.seq.items[1];
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, var, th_arg_float(eps), &var));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_rsqrt, var, &var)); /* rstd */
  TH_TRY(th_tu_convert(tr, &var, comp));
  TH_TRY(th_tu_convert(tr, &mean, comp));
  TH_TRY(unreduce(tr, mean, v, n, &mean));
  TH_TRY(unreduce(tr, var, v, n, &var));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, x, mean, &y));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, y, var, &y));
  if (args[2].kind != TH_ARG_NONE) TH_TRY(th_tu_binary(tr, op, TH_OP_prims_mul, y, args[2], TH_TU_PROMO_DEFAULT, &y));
  if (args[3].kind != TH_ARG_NONE) TH_TRY(th_tu_binary(tr, op, TH_OP_prims_add, y, args[3], TH_TU_PROMO_DEFAULT, &y));
  *out = y;
  return th_tu_convert(tr, out, v->dtype);
}

/* rms_norm, PyTorch's composite: x = a upcast; y = x * rsqrt(mean(x * x, dims, keepdim) + eps);
 * y converted to a's dtype; then y * weight (with the usual promotion). eps defaults to the epsilon of
 * the computation dtype and, as PyTorch stores it in a's scalar type, is rounded to a's dtype. For a
 * float32 computation the mean of squares and its rsqrt are float64 (converted back once per row):
 * the squares of float32 values beyond ~1.8e19 overflow float32 where the result does not. */
th_status ltorch_rms_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"rms_norm\" not implemented for '%s'", op, th_dtype_name(v->dtype));
  int64_t nshape[TH_MAX_DIMS], dims[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(op, "normalized_shape", &args[1], nshape, &n));
  TH_TRY(check_normalized_shape(op, v, nshape, n, &args[2], NULL));
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  double eps = comp == TH_F64 ? DBL_EPSILON : FLT_EPSILON;
  if (args[3].kind != TH_ARG_NONE) TH_TRY(th_tu_float(op, "eps", &args[3], &eps));
  if (v->dtype == TH_F32)
    eps = (float)eps;
  else if (v->dtype == TH_BF16)
    eps = th_bf16_to_f32(th_f32_to_bf16((float)eps));
  else if (v->dtype == TH_F16)
    eps = th_f16_to_f32(th_f32_to_f16((float)eps));
  int64_t count;
  for (int i = 0; i < n; i++) dims[i] = v->ndim - n + i;
  if (!th_meta_numel(v->shape + v->ndim - n, n, &count)) /* bounded by th_value_new_tensor; a guard */
    return th_error(TH_ERR_RUNTIME, "%s: the number of normalized elements overflows int64", op);
  th_arg x = args[0], xs, items[TH_MAX_DIMS], t;
  TH_TRY(th_tu_convert(tr, &x, comp));
  xs = x;
  TH_TRY(th_tu_convert(tr, &xs, comp == TH_F32 ? TH_F64 : comp));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, xs, xs, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, t, th_tu_ints(items, n, dims), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, t, th_arg_float((double)count), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, t, th_arg_float(eps), &t));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_rsqrt, t, &t));
  TH_TRY(th_tu_convert(tr, &t, comp));
  TH_TRY(unreduce(tr, t, v, n, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, t, &t));
  TH_TRY(th_tu_convert(tr, &t, v->dtype));
  if (args[2].kind == TH_ARG_NONE) {
    *out = t;
    return TH_OK;
  }
  return th_tu_call2(tr, TH_OP_ltorch_mul, t, args[2], out);
}

/* ---- embedding ------------------------------------------------------------------------------------ */

/* embedding(idx, weight): weight rows gathered with prims.take along dim 0; indices of rank != 1 are
 * flattened first and the result reshaped to idx.shape + (embedding_dim,). padding_idx only affects the
 * gradient; max_norm (which renormalizes weight in place) is not supported. */
th_status ltorch_embedding_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *idx = args[0].u.value, *w = args[1].u.value;
  if (args[3].kind != TH_ARG_NONE) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: max_norm is not supported", op);
  if (idx->dtype != TH_I64 && idx->dtype != TH_I32)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, "
                    "Int; but got %s instead",
                    op, th_dtype_name(idx->dtype));
  if (w->ndim != 2) return th_error(TH_ERR_RUNTIME, "%s: 'weight' must be 2-D", op);
  if (args[2].kind != TH_ARG_NONE) {
    int64_t pad;
    TH_TRY(th_meta_int(op, "padding_idx", &args[2], &pad));
    if (pad >= w->shape[0] || pad < -w->shape[0])
      return th_error(TH_ERR_RUNTIME, "%s: Padding_idx must be within num_embeddings", op);
  }
  if (idx->ndim == 1) return th_tu_call3(tr, TH_OP_prims_take, args[1], args[0], th_arg_int(0), out);
  if (idx->ndim + 1 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: the result would have more than %d dimensions", op, TH_MAX_DIMS);
  int64_t flat = th_value_numel(idx), shape[TH_MAX_DIMS];
  th_arg f, r;
  TH_TRY(th_tu_reshape(tr, args[0], 1, &flat, &f));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_take, args[1], f, th_arg_int(0), &r));
  memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
  shape[idx->ndim] = w->shape[1];
  return th_tu_reshape(tr, r, idx->ndim + 1, shape, out);
}

/* ---- attention ---------------------------------------------------------------------------------------- */

/* x [..., H, S, E] with each head repeated r times in place (torch.repeat_interleave(x, r, dim=-3)):
 * [..., H, 1, S, E] broadcast to [..., H, r, S, E] and reshaped to [..., H * r, S, E]. */
static th_status repeat_heads(th_trace *tr, const char *op, const char *name, th_arg x, int64_t r, th_arg *out) {
  const th_value *v = x.u.value;
  if (r == 1) {
    *out = x;
    return TH_OK;
  }
  if (v->ndim + 1 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: enable_gqa with %s of rank %d needs rank %d (at most %d)", op, name,
                    v->ndim, v->ndim + 1, TH_MAX_DIMS);
  int n = v->ndim, h = n - 3;
  int64_t shape[TH_MAX_DIMS], bdims[TH_MAX_DIMS];
  for (int i = 0, j = 0; i <= n; i++) {
    if (i == h + 1) {
      shape[i] = r;
      continue;
    }
    shape[i] = v->shape[j];
    bdims[j] = i;
    j++;
  }
  th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS], e;
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, x, th_tu_ints(si, n + 1, shape), th_tu_ints(bi, n, bdims), &e));
  int64_t rs[TH_MAX_DIMS];
  memcpy(rs, v->shape, sizeof(int64_t) * (size_t)n);
  rs[h] = v->shape[h] * r;
  return th_tu_reshape(tr, e, n, rs, out);
}

/* The first dim (counted from the end, -3 the first batch dim) at which a's and b's batch dims (all
 * but the last two) do not broadcast, skipping dim -3 when skip_heads; 0 when they broadcast. */
static int batch_mismatch(const th_value *a, const th_value *b, bool skip_heads) {
  for (int i = 3; i <= a->ndim && i <= b->ndim; i++) {
    int64_t x = a->shape[a->ndim - i], y = b->shape[b->ndim - i];
    if (x != y && x != 1 && y != 1 && !(skip_heads && i == 3)) return -i;
  }
  return 0;
}

/* out = bshape's nb batch dims followed by (m, n); returns the rank, nb + 2 */
static int batch_shape(const int64_t *bshape, int nb, int64_t m, int64_t n, int64_t *out) {
  memcpy(out, bshape, sizeof(int64_t) * (size_t)nb);
  out[nb] = m;
  out[nb + 1] = n;
  return nb + 2;
}

/* PyTorch's math path of F.scaled_dot_product_attention (torch 2.x: _scaled_dot_product_attention_math,
 * with _safe_softmax), computed as its CPU kernel does for low precision (the logits, softmax and
 * dropout in float32, the probabilities rounded to the input dtype before the product with value):
 *   q, k in the computation dtype; logits = (q @ k^T) * (scale or 1/sqrt(E));
 *   is_causal: tril(logits, fill_value=-inf) (top-left aligned: torch.ones(L, S).tril());
 *   bool attn_mask: where(mask, logits, -inf) (True attends); float attn_mask: logits + mask;
 *   attn = softmax(logits, -1), where a row whose logits are all -inf gives 0 (PyTorch's _safe_softmax:
 *   a fully masked row, or one made -inf by infinite inputs): such rows' logits are replaced by 0 before
 *   the softmax (so its gradient stays finite) and its result by 0 after (one more row pass of the
 *   fused region); dropout(attn, dropout_p) when dropout_p > 0;
 *   out = attn.to(query.dtype) @ value.
 * enable_gqa: key and value heads (dim -3) repeat_interleave'd to query's. When key and value have the
 * same number of heads Hkv, the r = Hq / Hkv query heads sharing one are folded into the rows of one
 * product instead ([..., Hkv, r * L, E] @ [..., Hkv, E, S]), so no repeated copy of key or value is made.
 * The scale is applied to the logits (in float32 for low precision) rather than as sqrt(scale) to q and
 * k before the product as the math path does: the same function, one fused multiply in the softmax's
 * region instead of two passes over q and k. */
th_status ltorch_scaled_dot_product_attention_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args,
                                                     th_arg *out) {
  const char *op = sym->qualname;
  static const char *const names[3] = {"query", "key", "value"};
  for (int i = 0; i < 3; i++) {
    const th_value *t = args[i].u.value;
    if (!th_dtype_is_float(t->dtype) || th_dtype_is_fp8(t->dtype))
      return th_error(TH_ERR_VALUE, "%s: %s.dtype=%s is expected to be a floating type", op, names[i],
                      th_dtype_name(t->dtype));
  }
  const th_value *q = args[0].u.value, *k = args[1].u.value, *v = args[2].u.value;
  if (k->dtype != q->dtype || v->dtype != q->dtype)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected query, key, and value to have the same dtype, but got query.dtype: %s key.dtype: %s "
                    "and value.dtype: %s instead.",
                    op, th_dtype_name(q->dtype), th_dtype_name(k->dtype), th_dtype_name(v->dtype));
  if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected query, key, and value to all be at least 2 dimensional, but got query.dim: %d "
                    "key.dim: %d and value.dim: %d instead.",
                    op, q->ndim, k->ndim, v->ndim);
  const int64_t L = q->shape[q->ndim - 2], E = q->shape[q->ndim - 1], S = k->shape[k->ndim - 2];
  if (k->shape[k->ndim - 1] != E)
    return th_error(TH_ERR_RUNTIME,
                    "%s: key.size(-1) must match query.size(-1) (the embedding dim E=%lld), but got %lld", op,
                    (long long)E, (long long)k->shape[k->ndim - 1]);
  if (v->shape[v->ndim - 2] != S)
    return th_error(TH_ERR_RUNTIME,
                    "%s: value.size(-2) must match key.size(-2) (the source length S=%lld), but got %lld", op,
                    (long long)S, (long long)v->shape[v->ndim - 2]);
  const th_arg *mask = &args[3];
  double p, scale;
  bool causal, gqa;
  TH_TRY(th_tu_float(op, "dropout_p", &args[4], &p));
  TH_TRY(th_tu_bool(op, "is_causal", &args[5], &causal));
  TH_TRY(th_tu_bool(op, "enable_gqa", &args[7], &gqa));
  if (!(p >= 0.0 && p <= 1.0))
    return th_error(TH_ERR_RUNTIME, "%s: dropout_p has to be between 0 and 1, but got %g", op, p);
  if (causal && mask->kind != TH_ARG_NONE)
    return th_error(TH_ERR_VALUE, "%s: Explicit attn_mask should not be set when is_causal=True", op);
  if (mask->kind != TH_ARG_NONE) {
    th_dtype mdt = mask->u.value->dtype;
    if (mdt != TH_BOOL && mdt != TH_F32 && mdt != q->dtype)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                      "attn_mask.dtype: %s and query.dtype: %s instead.",
                      op, th_dtype_name(mdt), th_dtype_name(q->dtype));
  }
  if (args[6].kind != TH_ARG_NONE)
    TH_TRY(th_tu_float(op, "scale", &args[6], &scale));
  else
    scale = 1.0 / sqrt((double)E);

  for (int i = 1; i < 3; i++) {
    int d = batch_mismatch(q, args[i].u.value, gqa);
    if (d) {
      char qs[TH_META_SHAPE_BUF], ks[TH_META_SHAPE_BUF];
      const th_value *t = args[i].u.value;
      return th_error(TH_ERR_RUNTIME,
                      "%s: the batch dims of query %s and %s %s do not broadcast: query.size(%d)=%lld, "
                      "%s.size(%d)=%lld%s",
                      op, th_meta_shape_str(q->shape, q->ndim, qs, sizeof qs), names[i],
                      th_meta_shape_str(t->shape, t->ndim, ks, sizeof ks), d, (long long)q->shape[q->ndim + d],
                      names[i], d, (long long)t->shape[t->ndim + d],
                      d == -3 ? " (for grouped-query attention over fewer key/value heads pass enable_gqa=True)" : "");
    }
  }

  /* the fused flash-attention prim where it covers the case (torch/attention.c) */
  bool fused;
  TH_TRY(th_sdpa_flash_try(tr, args, p, causal, scale, gqa, out, &fused));
  if (fused) return TH_OK;

  /* grouped-query attention: fold (key and value share a head count) or repeat */
  int64_t r = 1;
  th_arg kk = args[1], vv = args[2];
  if (gqa) {
    if (q->ndim < 3 || k->ndim < 3 || v->ndim < 3)
      return th_error(TH_ERR_RUNTIME,
                      "%s: enable_gqa=True needs query, key and value of at least 3 dimensions (heads at dim -3), "
                      "but got query.dim: %d key.dim: %d and value.dim: %d",
                      op, q->ndim, k->ndim, v->ndim);
    int64_t hq = q->shape[q->ndim - 3], hk = k->shape[k->ndim - 3], hv = v->shape[v->ndim - 3];
    if (hk == 0 || hv == 0 || hq % hk != 0 || hq % hv != 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Number of heads in key and value must divide the number of heads in query, but got "
                      "query.size(-3)=%lld, key.size(-3)=%lld and value.size(-3)=%lld",
                      op, (long long)hq, (long long)hk, (long long)hv);
    if (hk == hv && hq > 0)
      r = hq / hk;
    else {
      TH_TRY(repeat_heads(tr, op, "key", kk, hq / hk, &kk));
      TH_TRY(repeat_heads(tr, op, "value", vv, hq / hv, &vv));
    }
  }

  /* logits in the computation dtype */
  th_dtype cd = th_tu_computation_dtype(q->dtype);
  th_arg qc = args[0], kc = kk, kt, logits;
  TH_TRY(th_tu_convert(tr, &qc, cd));
  TH_TRY(th_tu_convert(tr, &kc, cd));
  int64_t shape[TH_MAX_DIMS];
  if (r > 1) { /* [..., Hq, L, E] -> [..., Hkv, r * L, E] */
    memcpy(shape, q->shape, sizeof(int64_t) * (size_t)q->ndim);
    shape[q->ndim - 3] /= r;
    shape[q->ndim - 2] = r * L;
    TH_TRY(th_tu_reshape(tr, qc, q->ndim, shape, &qc));
  }
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_transpose, kc, th_arg_int(-2), th_arg_int(-1), &kt));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_matmul, qc, kt, &logits));
  const th_value *lv = logits.u.value;
  int nb = lv->ndim - 2; /* the broadcast batch dims of q and k (heads included) */
  int64_t bshape[TH_MAX_DIMS];
  memcpy(bshape, lv->shape, sizeof(int64_t) * (size_t)nb);
  if (r > 1) { /* back to [..., Hq, L, S] */
    bshape[nb - 1] *= r;
    int n = batch_shape(bshape, nb, L, S, shape);
    TH_TRY(th_tu_reshape(tr, logits, n, shape, &logits));
    lv = logits.u.value;
  }
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, logits, th_arg_float(scale), &logits));
  if (causal) {
    th_arg targs[2] = {logits, th_arg_int(0)};
    TH_TRY(kw_call1(tr, TH_OP_ltorch_tril, 2, targs, "fill_value", th_arg_float(-INFINITY), &logits));
  }
  if (mask->kind != TH_ARG_NONE) {
    /* the mask broadcasts to the logits' shape without enlarging it (PyTorch adds it in place); leading
     * size-1 dims beyond the logits' rank are dropped */
    const th_value *mv = mask->u.value;
    th_arg m = *mask;
    bool ok = true;
    int lead = mv->ndim - lv->ndim;
    for (int i = 0; ok && i < lead; i++) ok = mv->shape[i] == 1;
    for (int i = lead > 0 ? lead : 0; ok && i < mv->ndim; i++) {
      int64_t want = lv->shape[i - mv->ndim + lv->ndim];
      ok = mv->shape[i] == 1 || mv->shape[i] == want;
    }
    if (!ok) {
      char ms[TH_META_SHAPE_BUF], ls[TH_META_SHAPE_BUF];
      th_meta_shape_str(mv->shape, mv->ndim, ms, sizeof ms);
      th_meta_shape_str(lv->shape, lv->ndim, ls, sizeof ls);
      return th_error(TH_ERR_RUNTIME,
                      "%s: attn_mask of shape %s does not broadcast to the attention weights' shape %s (the batch "
                      "dims, L = query.size(-2), S = key.size(-2))",
                      op, ms, ls);
    }
    if (lead > 0) TH_TRY(th_tu_reshape(tr, m, mv->ndim - lead, mv->shape + lead, &m));
    if (mv->dtype == TH_BOOL)
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, m, logits, th_arg_float(-INFINITY), &logits));
    else
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, logits, m, &logits));
  }
  th_arg attn = logits; /* S == 0: an empty softmax, and attn @ value is zeros */
  if (S > 0) {
    /* _safe_softmax: a row of -inf logits (masked, or from infinite inputs) attends to nothing */
    th_arg mx, rowmasked;
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_amax, logits, th_arg_int(-1), th_arg_bool(true), &mx));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, mx, th_arg_float(-INFINITY), &rowmasked));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, rowmasked, th_arg_float(0.0), logits, &logits));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_softmax, logits, th_arg_int(-1), &attn));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, rowmasked, th_arg_float(0.0), attn, &attn));
    if (p > 0.0) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_dropout, attn, th_arg_float(p), &attn));
  }
  TH_TRY(th_tu_convert(tr, &attn, q->dtype));
  if (r > 1) { /* [..., Hq, L, S] -> [..., Hkv, r * L, S] for the product with value [..., Hkv, S, Ev] */
    bshape[nb - 1] /= r;
    int n = batch_shape(bshape, nb, r * L, S, shape);
    TH_TRY(th_tu_reshape(tr, attn, n, shape, &attn));
    th_arg o;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_matmul, attn, vv, &o));
    const th_value *ov = o.u.value;
    memcpy(bshape, ov->shape, sizeof(int64_t) * (size_t)(ov->ndim - 2));
    bshape[ov->ndim - 3] *= r;
    n = batch_shape(bshape, ov->ndim - 2, L, ov->shape[ov->ndim - 1], shape);
    return th_tu_reshape(tr, o, n, shape, out);
  }
  return th_tu_call2(tr, TH_OP_ltorch_matmul, attn, vv, out);
}

/* ---- losses ------------------------------------------------------------------------------------------- */

enum { RED_NONE, RED_MEAN, RED_SUM };

static th_status read_reduction(const char *op, const th_arg *size_average, const th_arg *reduce, const th_arg *r,
                                int *out) {
  *out = RED_NONE;
  if (size_average->kind != TH_ARG_NONE || reduce->kind != TH_ARG_NONE)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: the deprecated size_average and reduce arguments are not supported; use "
                    "reduction=",
                    op);
  if (!strcmp(r->u.s, "none"))
    *out = RED_NONE;
  else if (!strcmp(r->u.s, "mean"))
    *out = RED_MEAN;
  else if (!strcmp(r->u.s, "sum"))
    *out = RED_SUM;
  else
    return th_error(TH_ERR_VALUE, "%s: %s is not a valid value for reduction", op, r->u.s);
  return TH_OK;
}

static th_status sum_all(th_trace *tr, th_arg x, th_arg *out) {
  const th_value *v = x.u.value;
  int64_t dims[TH_MAX_DIMS];
  th_arg items[TH_MAX_DIMS];
  for (int i = 0; i < v->ndim; i++) dims[i] = i;
  return th_tu_call2(tr, TH_OP_prims_sum, x, th_tu_ints(items, v->ndim, dims), out);
}

static th_status sum_dim(th_trace *tr, th_arg x, int64_t d, th_arg *out) {
  th_arg items[1];
  return th_tu_call2(tr, TH_OP_prims_sum, x, th_tu_ints(items, 1, &d), out);
}

/* A 1-D tensor of length C laid along dim cdim of a tensor of `shape` (rank ndim) and broadcast to it:
 * the class weights (or the class ids) next to an input of that shape. */
static th_status along_class_dim(th_trace *tr, th_arg w, int ndim, int cdim, const int64_t *shape, th_arg *out) {
  *out = w;
  if (ndim == 1) return TH_OK;
  int64_t d = cdim;
  th_arg si[TH_MAX_DIMS], bi[1];
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, w, th_tu_ints(si, ndim, shape), th_tu_ints(bi, 1, &d), out);
}

/* The class-index negative log likelihood of log-probabilities x (computation dtype, class dim cdim):
 * loss_i = -w[t_i] * x[i, t_i], 0 where t_i == ignore_index. Gathers with a one-hot mask (iota == t).
 * The targets first go through prims.take(iota(C), where(valid, t, 0)) (the identity on [0, C)), so a
 * target outside [0, C) that is not ignore_index is an IndexError at run time, as PyTorch's "Target 7
 * is out of bounds." (an ignored target may be any value, -100 included). *valid (bool) and, for
 * reduction='mean', *denom (the sum of the selected weights, or the count of valid targets, as a 0-dim
 * tensor in the computation dtype) are returned for the label-smoothing term. */
static th_status nll_core(th_trace *tr, const char *op, th_arg x, th_arg target, const th_arg *weight,
                          int64_t ignore_index, int reduction, th_arg *valid, th_arg *denom, th_arg *out) {
  const th_value *xv = x.u.value;
  int cdim = xv->ndim >= 2 ? 1 : 0;
  int64_t C = xv->shape[cdim];
  th_dtype comp = xv->dtype;
  th_arg ids, cls, tgt = target, onehot, picked, loss, wsel = th_arg_none();
  TH_TRY(th_tu_binary(tr, op, TH_OP_prims_ne, target, th_arg_int(ignore_index), TH_TU_PROMO_ALWAYS_BOOL, valid));
  TH_TRY(th_tu_iota(tr, C, 0, 1, xv->device, TH_I64, &ids));
  TH_TRY(th_tu_convert(tr, &tgt, TH_I64));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, *valid, tgt, th_arg_int(0), &tgt));
  { /* the bounds check: prims.take wants a 1-D index */
    const th_value *tv = tgt.u.value;
    int64_t n = th_value_numel(tv), tshape[TH_MAX_DIMS];
    int tnd = tv->ndim;
    memcpy(tshape, tv->shape, sizeof(int64_t) * (size_t)tnd);
    if (tnd != 1) TH_TRY(th_tu_reshape(tr, tgt, 1, &n, &tgt));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_take, ids, tgt, th_arg_int(0), &tgt));
    if (tnd != 1) TH_TRY(th_tu_reshape(tr, tgt, tnd, tshape, &tgt));
  }
  TH_TRY(along_class_dim(tr, ids, xv->ndim, cdim, xv->shape, &cls));
  int64_t bdims[TH_MAX_DIMS];
  for (int i = 0, j = 0; i < xv->ndim; i++)
    if (i != cdim) bdims[j++] = i;
  th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, tgt, th_tu_ints(si, xv->ndim, xv->shape),
                     th_tu_ints(bi, xv->ndim - 1, bdims), &tgt));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, cls, tgt, &onehot)); /* (i, c): c == t_i */
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, onehot, x, th_arg_float(0.0), &picked));
  TH_TRY(sum_dim(tr, picked, cdim, &picked)); /* x[i, t_i] */
  TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, picked, &loss));
  if (weight->kind != TH_ARG_NONE) {
    th_arg w = *weight;
    TH_TRY(th_tu_convert(tr, &w, comp));
    TH_TRY(along_class_dim(tr, w, xv->ndim, cdim, xv->shape, &w));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_where, onehot, w, th_arg_float(0.0), &wsel));
    TH_TRY(sum_dim(tr, wsel, cdim, &wsel)); /* w[t_i] */
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, loss, wsel, &loss));
  }
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, *valid, loss, th_arg_float(0.0), &loss));
  *denom = th_arg_none();
  if (reduction == RED_MEAN && weight->kind != TH_ARG_NONE) {
    TH_TRY(th_tu_call3(tr, TH_OP_prims_where, *valid, wsel, th_arg_float(0.0), &wsel));
    TH_TRY(sum_all(tr, wsel, denom));
  } else if (reduction == RED_MEAN) {
    th_arg cnt = *valid;
    TH_TRY(th_tu_convert(tr, &cnt, comp));
    TH_TRY(sum_all(tr, cnt, denom));
  }
  if (reduction == RED_NONE) {
    *out = loss;
    return TH_OK;
  }
  TH_TRY(sum_all(tr, loss, out));
  if (reduction == RED_SUM) return TH_OK;
  th_arg d = *denom;
  if (xv->ndim == 1) { /* PyTorch divides a single sample's loss only by a non-zero total weight */
    th_arg zero;
    TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, d, th_arg_float(0.0), &zero));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_where, zero, th_arg_float(1.0), d, &d));
  }
  return th_tu_call2(tr, TH_OP_prims_div, *out, d, out);
}

/* Input/target/weight checks shared by nll_loss and cross_entropy (class-index targets). */
static th_status check_class_target(const char *op, const th_value *a, const th_value *t, const th_arg *weight) {
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  if (a->ndim < 1)
    return th_error(TH_ERR_RUNTIME, "%s: Expected the input tensor to have at least 1 dimension, but it has 0", op);
  if (!th_dtype_is_integer(t->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Expected target to be a tensor with an integer dtype, but it has dtype %s", op,
                    th_dtype_name(t->dtype));
  int cdim = a->ndim >= 2 ? 1 : 0;
  int64_t expect[TH_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < a->ndim; i++)
    if (i != cdim) expect[n++] = a->shape[i];
  if (t->ndim != n || memcmp(t->shape, expect, sizeof(int64_t) * (size_t)n))
    return th_error(TH_ERR_RUNTIME, "%s: Expected target size %s, got %s", op,
                    th_meta_shape_str(expect, n, b0, sizeof b0), th_meta_shape_str(t->shape, t->ndim, b1, sizeof b1));
  if (weight->kind != TH_ARG_NONE) {
    const th_value *w = weight->u.value;
    if (w->ndim != 1 || w->shape[0] != a->shape[cdim])
      return th_error(TH_ERR_RUNTIME,
                      "%s: weight tensor should be defined either for all %lld classes or no classes but "
                      "got weight tensor of shape: %s",
                      op, (long long)a->shape[cdim], th_meta_shape_str(w->shape, w->ndim, b0, sizeof b0));
  }
  return TH_OK;
}

/* Empty input: none -> zeros of the loss shape (the input's without the class dim), mean -> nan
 * (0 / 0), sum -> 0, as PyTorch. Computed from the input (its sum over the class dim, times 0) so that
 * the loss depends on it and its gradient is the (empty) zeros PyTorch gives. */
static th_status empty_loss(th_trace *tr, th_arg input, int reduction, th_arg *out) {
  const th_value *a = input.u.value;
  th_arg s = input;
  TH_TRY(th_tu_convert(tr, &s, th_tu_computation_dtype(a->dtype)));
  TH_TRY(sum_dim(tr, s, a->ndim >= 2 ? 1 : 0, &s));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, s, th_arg_float(0.0), &s));
  if (reduction != RED_NONE) TH_TRY(sum_all(tr, s, &s));
  if (reduction == RED_MEAN) TH_TRY(th_tu_call2(tr, TH_OP_prims_div, s, th_arg_float(0.0), &s));
  *out = s;
  return th_tu_convert(tr, out, a->dtype);
}

th_status ltorch_nll_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *t = args[1].u.value;
  int reduction = RED_MEAN;
  int64_t ignore_index;
  TH_TRY(read_reduction(op, &args[3], &args[5], &args[6], &reduction));
  TH_TRY(th_meta_int(op, "ignore_index", &args[4], &ignore_index));
  TH_TRY(check_class_target(op, a, t, &args[2]));
  if (th_value_numel(a) == 0) return empty_loss(tr, args[0], reduction, out);
  th_arg x = args[0], valid, denom;
  TH_TRY(th_tu_convert(tr, &x, th_tu_computation_dtype(a->dtype)));
  TH_TRY(nll_core(tr, op, x, args[1], &args[2], ignore_index, reduction, &valid, &denom, out));
  return th_tu_convert(tr, out, a->dtype);
}

/* cross_entropy = log_softmax over the class dim + nll (class-index targets) or -sum(p * logp)
 * (probability targets, target.shape == input.shape), with PyTorch's label smoothing:
 *   class indices: (1 - ls) * nll + ls / C * smooth, smooth = -sum_c(w_c * logp_c) (0 where ignored),
 *                  reduced like nll (mean: divided by the same denominator);
 *   probabilities: targets become t * (1 - ls) + ls / C first; mean divides by numel / C. */
th_status ltorch_cross_entropy_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *t = args[1].u.value;
  const th_arg *weight = &args[2];
  int reduction = RED_MEAN;
  int64_t ignore_index;
  double ls;
  TH_TRY(read_reduction(op, &args[3], &args[5], &args[6], &reduction));
  TH_TRY(th_meta_int(op, "ignore_index", &args[4], &ignore_index));
  TH_TRY(th_tu_float(op, "label_smoothing", &args[7], &ls));
  if (a->ndim == 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Cross entropy expects its input to have one or more dimensions, but it had zero "
                    "dimensions",
                    op);
  if (ls < 0.0 || ls > 1.0)
    return th_error(TH_ERR_RUNTIME, "%s: label_smoothing must be between 0.0 and 1.0. Got: %g", op, ls);
  if (!th_dtype_is_float(a->dtype) || th_dtype_is_fp8(a->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: expected a floating point input, but got %s", op, th_dtype_name(a->dtype));
  int cdim = a->ndim >= 2 ? 1 : 0;
  int64_t C = a->shape[cdim];
  bool prob = t->ndim == a->ndim && !memcmp(t->shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  if (prob) {
    if (!th_dtype_is_float(t->dtype))
      return th_error(TH_ERR_RUNTIME, "%s: expected a floating point target for class probabilities, but got %s", op,
                      th_dtype_name(t->dtype));
    if (weight->kind != TH_ARG_NONE && (weight->u.value->ndim != 1 || weight->u.value->shape[0] != C))
      return th_error(TH_ERR_RUNTIME, "%s: weight tensor should be defined either for all %lld classes or no classes",
                      op, (long long)C);
  } else {
    TH_TRY(check_class_target(op, a, t, weight));
  }
  if (th_value_numel(a) == 0) return empty_loss(tr, args[0], reduction, out);
  th_dtype comp = th_tu_computation_dtype(a->dtype);
  th_arg logp, x;
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_log_softmax, args[0], th_arg_int(cdim), &logp));
  x = logp;
  TH_TRY(th_tu_convert(tr, &x, comp));
  th_arg w = th_arg_none();
  if (weight->kind != TH_ARG_NONE) {
    w = *weight;
    TH_TRY(th_tu_convert(tr, &w, comp));
    TH_TRY(along_class_dim(tr, w, a->ndim, cdim, a->shape, &w));
  }
  if (prob) {
    th_arg tc = args[1], p;
    TH_TRY(th_tu_convert(tr, &tc, comp));
    if (ls > 0.0) {
      TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, tc, th_arg_float(1.0 - ls), &tc));
      TH_TRY(th_tu_call2(tr, TH_OP_prims_add, tc, th_arg_float(ls / (double)C), &tc));
    }
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, tc, &p));
    if (w.kind != TH_ARG_NONE) TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, p, w, &p));
    TH_TRY(sum_dim(tr, p, cdim, &p));
    TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, p, out));
    if (reduction != RED_NONE) TH_TRY(sum_all(tr, *out, out));
    if (reduction == RED_MEAN)
      TH_TRY(th_tu_call2(tr, TH_OP_prims_div, *out, th_arg_float((double)(th_value_numel(a) / C)), out));
    return th_tu_convert(tr, out, a->dtype);
  }
  th_arg valid, denom, nll;
  TH_TRY(nll_core(tr, op, x, args[1], weight, ignore_index, reduction, &valid, &denom, &nll));
  if (ls > 0.0) {
    th_arg smooth = x;
    if (w.kind != TH_ARG_NONE) TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, smooth, w, &smooth));
    TH_TRY(sum_dim(tr, smooth, cdim, &smooth));
    TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, smooth, &smooth));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_where, valid, smooth, th_arg_float(0.0), &smooth));
    if (reduction != RED_NONE) TH_TRY(sum_all(tr, smooth, &smooth));
    if (reduction == RED_MEAN) TH_TRY(th_tu_call2(tr, TH_OP_prims_div, smooth, denom, &smooth));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, nll, th_arg_float(1.0 - ls), &nll));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, smooth, th_arg_float(ls / (double)C), &smooth));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_add, nll, smooth, &nll));
  }
  *out = nll;
  return th_tu_convert(tr, out, a->dtype);
}

/* mse_loss = reduce((a - target)^2), the square as d * d (PyTorch's kernel). With a weight (of
 * input's size, as torch.nn.functional.mse_loss checks), each square is scaled by it and 'mean'
 * divides the sum by the sum of the weights. */
th_status ltorch_mse_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int reduction = RED_MEAN;
  TH_TRY(read_reduction(op, &args[2], &args[3], &args[4], &reduction));
  const th_arg *w = &args[5];
  if (w->kind != TH_ARG_NONE) {
    const th_value *in = args[0].u.value, *wv = w->u.value;
    char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
    if (wv->ndim != in->ndim || memcmp(wv->shape, in->shape, sizeof(int64_t) * (size_t)in->ndim))
      return th_error(TH_ERR_VALUE, "%s: Weights and input must have the same size: weight is %s, input %s", op,
                      th_meta_shape_str(wv->shape, wv->ndim, b0, sizeof b0),
                      th_meta_shape_str(in->shape, in->ndim, b1, sizeof b1));
  }
  th_arg d;
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, args[0], args[1], &d));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, d, d, &d));
  if (w->kind != TH_ARG_NONE) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, d, *w, &d));
  if (reduction == RED_NONE) {
    *out = d;
    return TH_OK;
  }
  if (w->kind != TH_ARG_NONE && reduction == RED_MEAN) {
    th_arg ws;
    TH_TRY(th_tu_call1(tr, TH_OP_ltorch_sum, d, &d));
    TH_TRY(th_tu_call1(tr, TH_OP_ltorch_sum, *w, &ws));
    return th_tu_call2(tr, TH_OP_ltorch_div, d, ws, out);
  }
  return th_tu_call1(tr, reduction == RED_SUM ? TH_OP_ltorch_sum : TH_OP_ltorch_mean, d, out);
}

/* ---- dropout ------------------------------------------------------------------------------------------ */

/* dropout(a, p, training): identity when not training or p == 0; a * 0 when p == 1; else
 * a * (uniform_like(a) < 1 - p) * (1 / (1 - p)). The uniform draw is float32 for low-precision inputs
 * so the keep probability is not quantized to bf16/f16. */
th_status ltorch_dropout_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  double p;
  bool training, inplace;
  TH_TRY(th_tu_float(op, "p", &args[1], &p));
  TH_TRY(th_tu_bool(op, "training", &args[2], &training));
  TH_TRY(th_tu_bool(op, "inplace", &args[3], &inplace));
  if (inplace) /* the in-place op ltorch.dropout_ (see no_inplace) */
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: inplace=True is recorded as %s_(input, p, training) (call that op)",
                    op, op);
  if (p < 0.0 || p > 1.0)
    return th_error(TH_ERR_VALUE, "%s: dropout probability has to be between 0 and 1, but got %g", op, p);
  if (!training || p == 0.0) {
    *out = args[0];
    return TH_OK;
  }
  if (p == 1.0) /* input * 0, as eager: NaN and inf give NaN, and the gradient (zeros) reaches the input */
    return th_tu_call2(tr, TH_OP_ltorch_mul, args[0], th_arg_float(0.0), out);
  const th_value *v = args[0].u.value;
  th_arg r, mask, y;
  th_arg uargs[3] = {args[0], th_arg_float(0.0), th_arg_float(1.0)};
  TH_TRY(
    kw_call1(tr, TH_OP_ltorch_uniform_like, 3, uargs, "dtype", th_arg_dtype(th_tu_computation_dtype(v->dtype)), &r));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_lt, r, th_arg_float(1.0 - p), &mask));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, args[0], mask, &y));
  return th_tu_call2(tr, TH_OP_ltorch_mul, y, th_arg_float(1.0 / (1.0 - p)), out);
}

/* ---- vjp rules (ops/vjp.h) ----------------------------------------------------------------------------
 * Torch-level ops otherwise get their gradient through their decomposition; these have direct rules
 * because the decomposition's would be wasteful or numerically worse:
 *   softmax      gx = y * (g - sum(g * y, dim, keepdim=True))  (PyTorch's _softmax_backward_data; the
 *                decomposition would also differentiate its amax shift, whose gradient is zero only in
 *                exact arithmetic)
 *   log_softmax  gx = g - exp(y) * sum(g, dim, keepdim=True)
 *                both in float32 for a low-precision result, converted to the input's dtype;
 *   embedding    the weight's gradient as g's rows index_added into zeros (n, d) in the computation
 *                dtype, the padding_idx row zeroed and, with scale_grad_by_freq, each row divided by
 *                its index's count (PyTorch's embedding_backward; the decomposition's prims.take rule
 *                would ignore padding_idx);
 *   silu         gx = g * s * (1 + x * (1 - s)), s = sigmoid(x) (PyTorch's silu_backward): the chain rule
 *                through x / (1 + exp(-x)) forms inf / inf where exp(-x) overflows (x < -88 in float32);
 *   gelu         PyTorch's GeluBackward, 'none': gx = g * (cdf + x * pdf), cdf = 0.5 * (1 + erf(x / sqrt(2))),
 *                pdf = exp(-x^2 / 2) / sqrt(2 pi); 'tanh': with inner = kBeta * (x + kKappa * x^3) and
 *                t = tanh(inner), gx = g * (0.5 * (1 + t) + 0.5 * x * (1 - t^2) * kBeta * (1 + 3 kKappa x^2));
 *   logsumexp    gx = g * exp(x - y), g and y with the reduced dims kept (PyTorch's logsumexp_backward;
 *                the decomposition would also differentiate its max shift);
 *   layer_norm   gx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat)), gxhat = g * weight,
 *                gweight = sum(g * xhat), gbias = sum(g) (PyTorch's native_layer_norm_backward);
 *   rms_norm     gx = rrms * (gxhat - xhat * mean(gxhat * xhat)), gweight = sum(g * xhat) (the gradient
 *                of PyTorch's composite): the means over the normalized dims, the sums over the others,
 *                xhat and rstd (rrms) recomputed from the input, which is all the forward saves for them.
 *                Through the decompositions the chain rule subtracted a mean rounded to float32 (an
 *                error rstd scales up at large offsets) and formed sum(g * x), which overflows float32
 *                for values near its maximum.
 * The elementwise rules compute in the computation dtype (float32 for bf16/f16) from the input and
 * convert the gradient to its dtype once, as PyTorch's kernels do; so do the normalizations, their row
 * statistics in float64 for a float32 computation as in the forward. */

static th_status softmax_vjp_common(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads, bool log) {
  const th_arg *x = &b->args[0];
  if (!th_vjp_is_float_tensor(x)) return TH_OK;
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(b->sym->qualname, "dim", &b->args[1], &dim));
  TH_TRY(th_meta_canonical_dim(b->sym->qualname, dim, x->u.value->ndim, &d));
  th_arg y = th_vjp_out(b), g = cts[0], t, s, r;
  th_dtype cd = th_tu_computation_dtype(y.u.value->dtype);
  TH_TRY(th_tu_convert(tr, &y, cd));
  TH_TRY(th_tu_convert(tr, &g, cd));
  if (log) {
    TH_TRY(th_tu_call1(tr, TH_OP_ltorch_exp, y, &t));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_sum, g, th_arg_int(d), th_arg_bool(true), &s));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, t, s, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, g, t, &r));
  } else {
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, y, &t));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_sum, t, th_arg_int(d), th_arg_bool(true), &s));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, g, s, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, y, t, &r));
  }
  TH_TRY(th_tu_convert(tr, &r, x->u.value->dtype));
  grads[0] = r;
  return TH_OK;
}

static th_status softmax_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  return softmax_vjp_common(tr, b, cts, grads, false);
}
static th_status log_softmax_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  return softmax_vjp_common(tr, b, cts, grads, true);
}

static th_status embedding_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *w = &b->args[1];
  if (!th_vjp_is_float_tensor(w)) return TH_OK;
  const char *op = b->sym->qualname;
  const th_value *iv = b->args[0].u.value, *wv = w->u.value;
  int64_t n = wv->shape[0], dd = wv->shape[1], K = th_value_numel(iv);
  if (n == 0 || K == 0) return th_vjp_zeros_like(tr, wv, &grads[1]);
  th_arg idx, g2, gw, si[2], bi[1];
  int64_t s2[2] = {K, dd}, sw[2] = {n, dd}, zero = 0;
  th_dtype cd = th_tu_computation_dtype(wv->dtype);
  TH_TRY(th_tu_reshape(tr, b->args[0], 1, &K, &idx));
  TH_TRY(th_tu_reshape(tr, cts[0], 2, s2, &g2));
  TH_TRY(th_tu_convert(tr, &g2, cd));
  TH_TRY(th_tu_full(tr, 2, sw, th_arg_float(0.0), wv->device, cd, &gw));
  {
    th_arg v[4] = {gw, idx, g2, th_arg_int(0)};
    TH_TRY(th_call(tr, TH_OP_prims_index_add, 4, v, &gw)); /* (n, d): g's rows added into their indices' rows */
  }
  bool freq = false;
  TH_TRY(th_tu_bool(op, "scale_grad_by_freq", &b->args[5], &freq));
  if (freq) {
    th_arg cnt, ones, z;
    TH_TRY(th_tu_full(tr, 1, &n, th_arg_float(0.0), wv->device, cd, &cnt));
    TH_TRY(th_tu_full(tr, 1, &K, th_arg_float(1.0), wv->device, cd, &ones));
    th_arg v[4] = {cnt, idx, ones, th_arg_int(0)};
    TH_TRY(th_call(tr, TH_OP_prims_index_add, 4, v, &cnt)); /* (n,): each index's count */
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, cnt, th_arg_float(0.0), &z));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(1.0), cnt, &cnt));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, cnt, th_tu_ints(si, 2, sw), th_tu_ints(bi, 1, &zero), &cnt));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, gw, cnt, &gw));
  }
  TH_TRY(th_tu_convert(tr, &gw, wv->dtype));
  if (b->args[2].kind != TH_ARG_NONE) {
    int64_t pad;
    th_arg io, keep;
    TH_TRY(th_meta_int(op, "padding_idx", &b->args[2], &pad));
    if (pad < 0) pad += n;
    TH_TRY(th_tu_iota(tr, n, 0, 1, wv->device, TH_I64, &io));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_ne, io, th_arg_int(pad), &keep));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, keep, th_tu_ints(si, 2, sw), th_tu_ints(bi, 1, &zero), &keep));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, keep, gw, th_arg_float(0.0), &gw));
  }
  grads[1] = gw;
  return TH_OK;
}

#define VJ1(op, a, o) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_##op, a, o))
#define VJ2(op, a, c, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, c, o))

/* b's input (args[0], a floating tensor) and the cotangent g in the input's computation dtype. */
static th_status to_computation_dtype(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *x, th_arg *g) {
  th_dtype cd = th_tu_computation_dtype(b->args[0].u.value->dtype);
  *x = b->args[0];
  *g = cts[0];
  TH_TRY(th_tu_convert(tr, x, cd));
  return th_tu_convert(tr, g, cd);
}

static th_status silu_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  th_arg x, g, s, t, r;
  TH_TRY(to_computation_dtype(tr, b, cts, &x, &g));
  VJ1(sigmoid, x, &s); /* 1 / (1 + exp(-x)): 0 where exp(-x) overflows */
  VJ2(sub, th_arg_float(1.0), s, &t);
  VJ2(mul, x, t, &t);
  VJ2(add, th_arg_float(1.0), t, &t); /* 1 + x * (1 - s) */
  VJ2(mul, g, s, &r);
  VJ2(mul, r, t, &r);
  TH_TRY(th_tu_convert(tr, &r, b->args[0].u.value->dtype));
  grads[0] = r;
  return TH_OK;
}

static th_status gelu_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  const double k_pdf = 0.39894228040143267794, k_kappa = 0.044715; /* 1 / sqrt(2 pi); PyTorch's kKappa */
  th_arg x, g, t, u, r;
  TH_TRY(to_computation_dtype(tr, b, cts, &x, &g));
  if (strcmp(b->args[1].u.s, "tanh")) {
    th_arg cdf, pdf;
    VJ2(mul, x, th_arg_float(k_sqrt1_2), &t);
    VJ1(erf, t, &t);
    VJ2(add, th_arg_float(1.0), t, &t);
    VJ2(mul, th_arg_float(0.5), t, &cdf); /* 0.5 * (1 + erf(x / sqrt(2))) */
    VJ2(mul, x, x, &u);
    VJ2(mul, u, th_arg_float(-0.5), &u);
    VJ1(exp, u, &u);
    VJ2(mul, th_arg_float(k_pdf), u, &pdf); /* exp(-x^2 / 2) / sqrt(2 pi) */
    VJ2(mul, x, pdf, &u);
    VJ2(add, cdf, u, &t);
  } else {
    th_arg x_sq, th, left, dleft, dtanh, dinner;
    VJ2(mul, x, x, &x_sq);
    VJ2(mul, x_sq, x, &t);
    VJ2(mul, th_arg_float(k_kappa), t, &t);
    VJ2(add, x, t, &t);
    VJ2(mul, th_arg_float(k_beta), t, &t);
    VJ1(tanh, t, &th); /* tanh(inner) */
    VJ2(mul, th_arg_float(0.5), x, &left);
    VJ2(add, th_arg_float(1.0), th, &t);
    VJ2(mul, th_arg_float(0.5), t, &dleft); /* 0.5 * (1 + tanh(inner)) */
    VJ2(mul, th, th, &t);
    VJ2(sub, th_arg_float(1.0), t, &dtanh); /* 1 - tanh(inner)^2 */
    VJ2(mul, th_arg_float(3.0 * k_kappa), x_sq, &t);
    VJ2(add, th_arg_float(1.0), t, &t);
    VJ2(mul, th_arg_float(k_beta), t, &dinner); /* kBeta * (1 + 3 kKappa x^2) */
    VJ2(mul, left, dtanh, &t);
    VJ2(mul, t, dinner, &t);
    VJ2(add, dleft, t, &t);
  }
  VJ2(mul, g, t, &r);
  TH_TRY(th_tu_convert(tr, &r, b->args[0].u.value->dtype));
  grads[0] = r;
  return TH_OK;
}

static th_status logsumexp_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const char *op = b->sym->qualname;
  const th_value *v = a->u.value;
  if (th_value_numel(v) == 0) return th_vjp_zeros_like(tr, v, &grads[0]);
  int64_t dims[TH_MAX_DIMS];
  int nd;
  bool keepdim;
  TH_TRY(th_tu_reduction_dims(op, &b->args[1], v->ndim, dims, &nd));
  TH_TRY(th_tu_bool(op, "keepdim", &b->args[2], &keepdim));
  th_arg x, g, y = th_vjp_out(b), t, r;
  TH_TRY(to_computation_dtype(tr, b, cts, &x, &g));
  TH_TRY(th_tu_convert(tr, &y, x.u.value->dtype));
  if (!keepdim && v->ndim > 0) {
    TH_TRY(th_tu_keepdim(tr, y, v->ndim, v->shape, nd, dims, &y));
    TH_TRY(th_tu_keepdim(tr, g, v->ndim, v->shape, nd, dims, &g));
  }
  VJ2(sub, x, y, &t);
  VJ1(exp, t, &t);
  VJ2(mul, g, t, &r);
  TH_TRY(th_tu_convert(tr, &r, v->dtype));
  grads[0] = r;
  return TH_OK;
}

/* layer_norm and rms_norm: the normalized dims of b's input (its last n, n = len(normalized_shape),
 * which the forward has checked), the input's computation dtype and the dtype of the row statistics:
 * float64 for a float32 computation, as in the forward decompositions. */
static th_status norm_setup(const th_bsym *b, int64_t dims[TH_MAX_DIMS], int *n, th_dtype *comp, th_dtype *stats) {
  const th_value *v = b->args[0].u.value;
  int64_t nshape[TH_MAX_DIMS];
  TH_TRY(th_meta_int_list(b->sym->qualname, "normalized_shape", &b->args[1], nshape, n));
  for (int i = 0; i < *n; i++) dims[i] = v->ndim - *n + i;
  *comp = th_tu_computation_dtype(v->dtype);
  *stats = *comp == TH_F32 ? TH_F64 : *comp;
  return TH_OK;
}

/* The gradients of a normalization y = xhat * weight (+ bias) from xhat and rstd (rrms for rms_norm),
 * both in the computation dtype, rstd broadcast to x's shape, with gxhat = g * weight (or g):
 *   gx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))   (layer_norm: `centered`)
 *   gx = rstd * (gxhat - xhat * mean(gxhat * xhat))                 (rms_norm)
 * the means over the normalized dims, and gweight = sum(g * xhat), gbias = sum(g) over the others, each
 * converted to its argument's dtype: the gradients of PyTorch's native_layer_norm_backward, in xhat
 * rather than as its kernel's rstd * w * g + b * x + c (whose terms of x's size cancel at a large
 * offset), and of its rms_norm composite. `bias` is NULL for rms_norm. */
static th_status norm_grads(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg xhat, th_arg rstd, int n,
                            const int64_t *dims, bool centered, const th_arg *bias, th_arg *grads) {
  const th_value *v = b->args[0].u.value;
  const th_arg *w = &b->args[2];
  int nb = v->ndim - n;
  int64_t bdims[TH_MAX_DIMS];
  for (int i = 0; i < nb; i++) bdims[i] = i;
  th_arg g = cts[0], gxh, items[TH_MAX_DIMS], m, t, r;
  TH_TRY(th_tu_convert(tr, &g, th_tu_computation_dtype(g.u.value->dtype)));
  gxh = g;
  if (w->kind != TH_ARG_NONE) VJ2(mul, g, *w, &gxh);
  VJ2(mul, gxh, xhat, &t);
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_mean, t, th_tu_ints(items, n, dims), th_arg_bool(true), &m));
  VJ2(mul, xhat, m, &t);
  VJ2(sub, gxh, t, &r);
  if (centered) {
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_mean, gxh, th_tu_ints(items, n, dims), th_arg_bool(true), &m));
    VJ2(sub, r, m, &r);
  }
  VJ2(mul, rstd, r, &r);
  TH_TRY(th_tu_convert(tr, &r, v->dtype));
  grads[0] = r;
  const th_arg *params[2] = {w, bias};
  for (int k = 0; k < 2; k++) {
    if (!params[k] || !th_vjp_is_float_tensor(params[k])) continue;
    if (k == 0)
      VJ2(mul, g, xhat, &t);
    else
      t = g;
    if (nb > 0) TH_TRY(th_tu_call3(tr, TH_OP_ltorch_sum, t, th_tu_ints(items, nb, bdims), th_arg_bool(false), &t));
    TH_TRY(th_tu_convert(tr, &t, params[k]->u.value->dtype));
    grads[k + 2] = t;
  }
  return TH_OK;
}

/* Zeros for every floating tensor argument of an empty normalization (the sums over the other dims of
 * an empty batch are 0; the weight of an empty normalized shape is empty). */
static th_status norm_zeros(th_trace *tr, const th_bsym *b, int nparams, th_arg *grads) {
  const int idx[3] = {0, 2, 3};
  for (int k = 0; k < nparams; k++) {
    const th_arg *a = &b->args[idx[k]];
    if (th_vjp_is_float_tensor(a)) TH_TRY(th_vjp_zeros_like(tr, a->u.value, &grads[idx[k]]));
  }
  return TH_OK;
}

/* layer_norm(x, normalized_shape, weight, bias, eps): xhat = (x - mean) * rstd, rstd = rsqrt(var + eps)
 * (biased var), recomputed from x. The differences x - mean are what the gradient's accuracy rests on:
 * subtracting a mean rounded to x's dtype leaves an error of up to half an ulp of the offset, which rstd
 * scales up where a row's spread is small against its offset (an ulp of 1e4 is 1e-3 in float32). So they
 * are taken in the statistics' dtype: float64 for a float32 computation (as the forward's statistics),
 * far below float32's rounding. Where that is the computation dtype itself (float64), a second var_mean
 * of the differences gives their own mean, subtracted, and the variance (shift-invariant; from the
 * differences, not x, it is free of the rounded mean's error too). */
static th_status layer_norm_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const th_value *v = a->u.value;
  int64_t dims[TH_MAX_DIMS];
  int n;
  th_dtype comp, sd;
  double eps;
  TH_TRY(norm_setup(b, dims, &n, &comp, &sd));
  TH_TRY(th_tu_float(b->sym->qualname, "eps", &b->args[4], &eps));
  if (th_value_numel(v) == 0) return norm_zeros(tr, b, 3, grads);
  th_arg xs = *a, items[TH_MAX_DIMS], vm, var, mean, d;
  TH_TRY(th_tu_convert(tr, &xs, comp));
  TH_TRY(th_tu_convert(tr, &xs, sd));
  th_arg pargs[2] = {xs, th_tu_ints(items, n, dims)};
  TH_TRY(kw_call1(tr, TH_OP_prims_var_mean, 2, pargs, "correction", th_arg_float(0.0), &vm));
  var = vm.u.seq.items[0];
  mean = vm.u.seq.items[1];
  TH_TRY(unreduce(tr, mean, v, n, &mean));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, xs, mean, &d));
  if (sd == comp) {
    pargs[0] = d;
    TH_TRY(kw_call1(tr, TH_OP_prims_var_mean, 2, pargs, "correction", th_arg_float(0.0), &vm));
    var = vm.u.seq.items[0];
    TH_TRY(unreduce(tr, vm.u.seq.items[1], v, n, &mean));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, d, mean, &d));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, var, th_arg_float(eps), &var));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_rsqrt, var, &var)); /* rstd */
  TH_TRY(th_tu_convert(tr, &var, comp));
  TH_TRY(unreduce(tr, var, v, n, &var));
  TH_TRY(th_tu_convert(tr, &d, comp));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, d, var, &d)); /* xhat */
  return norm_grads(tr, b, cts, d, var, n, dims, true, &b->args[3], grads);
}

/* rms_norm(x, normalized_shape, weight, eps): xhat = x * rrms, rrms = rsqrt(mean(x^2) + eps), recomputed
 * from x as the forward computes them (eps: the epsilon of the computation dtype when None, rounded to
 * x's dtype, as ltorch_rms_norm_decomp reads it). */
static th_status rms_norm_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const th_value *v = a->u.value;
  int64_t dims[TH_MAX_DIMS], count;
  int n;
  th_dtype comp, sd;
  TH_TRY(norm_setup(b, dims, &n, &comp, &sd));
  double eps = comp == TH_F64 ? DBL_EPSILON : FLT_EPSILON;
  if (b->args[3].kind != TH_ARG_NONE) TH_TRY(th_tu_float(b->sym->qualname, "eps", &b->args[3], &eps));
  if (v->dtype == TH_F32)
    eps = (float)eps;
  else if (v->dtype == TH_BF16)
    eps = th_bf16_to_f32(th_f32_to_bf16((float)eps));
  else if (v->dtype == TH_F16)
    eps = th_f16_to_f32(th_f32_to_f16((float)eps));
  if (th_value_numel(v) == 0) return norm_zeros(tr, b, 2, grads);
  if (!th_meta_numel(v->shape + v->ndim - n, n, &count)) /* bounded by th_value_new_tensor; a guard */
    return th_error(TH_ERR_RUNTIME, "%s: the number of normalized elements overflows int64", b->sym->qualname);
  th_arg x = *a, xs, items[TH_MAX_DIMS], t, xhat;
  TH_TRY(th_tu_convert(tr, &x, comp));
  xs = x;
  TH_TRY(th_tu_convert(tr, &xs, sd));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, xs, xs, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, t, th_tu_ints(items, n, dims), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, t, th_arg_float((double)count), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, t, th_arg_float(eps), &t));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_rsqrt, t, &t)); /* rrms */
  TH_TRY(th_tu_convert(tr, &t, comp));
  TH_TRY(unreduce(tr, t, v, n, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, t, &xhat));
  return norm_grads(tr, b, cts, xhat, t, n, dims, false, NULL, grads);
}

#undef VJ1
#undef VJ2

const th_vjp_entry th_vjp_table_torch_nn[] = {
  {TH_OP_ltorch_softmax, TH_VJP_RULE, softmax_vjp},
  {TH_OP_ltorch_log_softmax, TH_VJP_RULE, log_softmax_vjp},
  {TH_OP_ltorch_logsumexp, TH_VJP_RULE, logsumexp_vjp},
  {TH_OP_ltorch_embedding, TH_VJP_RULE, embedding_vjp},
  {TH_OP_ltorch_silu, TH_VJP_RULE, silu_vjp},
  {TH_OP_ltorch_gelu, TH_VJP_RULE, gelu_vjp},
  {TH_OP_ltorch_layer_norm, TH_VJP_RULE, layer_norm_vjp},
  {TH_OP_ltorch_rms_norm, TH_VJP_RULE, rms_norm_vjp},
};
const int th_vjp_table_torch_nn_n = (int)(sizeof th_vjp_table_torch_nn / sizeof th_vjp_table_torch_nn[0]);
