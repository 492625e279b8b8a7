/* reduction_more.c — the norms and other reductions: torch.linalg.vector_norm, torch.norm
 * (vector and Frobenius cases), torch.linalg.norm (vectors; matrices for 'fro' and +-1 / +-inf), renorm,
 * dist, trace, all, any, count_nonzero, nansum, nanmean and aminmax.
 *
 * Each is a composite of the reduction prims in the computation dtype (float32 for bf16/f16), rounded
 * once to the result dtype, as PyTorch's CPU norm kernels accumulate in float and store once. */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

/* The p-norm of a (already in its computation dtype) over dims: ord 0 counts the nonzeros, +-inf is the
 * largest / smallest magnitude, 1 the sum of magnitudes, 2 sqrt of the sum of squares, else
 * (sum |a|^ord)^(1/ord). */
static th_status pnorm(th_trace *tr, th_arg a, double ord, int nd, const int64_t *dims, th_dtype comp, th_arg *out) {
  th_arg items[TH_MAX_DIMS], t;
  th_arg d = th_tu_ints(items, nd, dims);
  if (ord == 0.0) {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_ne, a, th_arg_float(0.0), &t));
    TH_TRY(th_tu_convert(tr, &t, comp));
    return th_tu_call2(tr, TH_OP_prims_sum, t, d, out);
  }
  if (isinf(ord)) {
    TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, a, &t));
    return th_tu_call2(tr, ord > 0 ? TH_OP_prims_amax : TH_OP_prims_amin, t, d, out);
  }
  if (ord == 1.0) {
    TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, a, &t));
    return th_tu_call2(tr, TH_OP_prims_sum, t, d, out);
  }
  if (ord == 2.0) {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, a, a, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, t, d, &t));
    return th_tu_call1(tr, TH_OP_prims_sqrt, t, out);
  }
  TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, a, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_pow, t, th_arg_float(ord), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, t, d, &t));
  return th_tu_call2(tr, TH_OP_prims_pow, t, th_arg_float(1.0 / ord), out);
}

static th_status float_or_error(const char *op, const th_value *v) {
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: expected a floating-point input, got %s", op,
                    th_tu_scalar_type_name(v->dtype));
  return TH_OK;
}

/* PyTorch's checks of vector_norm(x, ord, dim, dtype) (`what` names the function); *dims, *nd: the
 * reduced dims. */
static th_status vector_norm_check(const char *op, const char *what, const th_value *v, double ord, const th_arg *dim,
                                   bool has_dtype, th_dtype dtype, int64_t dims[TH_MAX_DIMS], int *nd) {
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: %s: Expected a floating point or complex tensor as input. Got %s", op, what,
                    th_tu_scalar_type_name(v->dtype));
  if (has_dtype && (!th_dtype_is_float(dtype) || th_dtype_is_fp8(dtype)))
    return th_error(TH_ERR_RUNTIME, "%s: %s: dtype should be floating point or complex. Got %s", op, what,
                    th_tu_scalar_type_name(dtype));
  if (isnan(ord)) return th_error(TH_ERR_RUNTIME, "%s: %s: ord must not be NaN", op, what);
  TH_TRY(th_tu_reduction_dims(op, dim, v->ndim, dims, nd));
  if (ord < 0 || isinf(ord)) {
    bool empty = false;
    for (int i = 0; i < *nd; i++) empty |= v->shape[dims[i]] == 0;
    if (empty)
      return th_error(TH_ERR_INDEX,
                      "%s: %s cannot compute the %g norm on an empty tensor because the operation does not have an "
                      "identity",
                      op, what, ord);
  }
  return TH_OK;
}

/* vector_norm(x, ord, dims, keepdim, dtype): the decomposition of ltorch.linalg_vector_norm. */
static th_status vector_norm_impl(th_trace *tr, const char *op, th_arg x, double ord, const th_arg *dim, bool keepdim,
                                  bool has_dtype, th_dtype dtype, th_arg *out) {
  const th_value *v = th_meta_tensor(&x);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  int64_t dims[TH_MAX_DIMS];
  int nd;
  TH_TRY(vector_norm_check(op, "linalg.vector_norm", v, ord, dim, has_dtype, dtype, dims, &nd));
  th_dtype rdt = has_dtype ? dtype : v->dtype;
  th_dtype comp = th_tu_computation_dtype(rdt);
  th_arg a = x;
  TH_TRY(th_tu_convert(tr, &a, comp));
  TH_TRY(pnorm(tr, a, ord, nd, dims, comp, out));
  if (keepdim && v->ndim > 0) TH_TRY(th_tu_keepdim(tr, *out, v->ndim, v->shape, nd, dims, out));
  return th_tu_convert(tr, out, rdt);
}

/* The other norms record ltorch.linalg_vector_norm (whose vjp is PyTorch's norm_backward, with its
 * subgradients at zero), after its checks under their own names. */
static th_status vector_norm(th_trace *tr, const char *op, const char *what, th_arg x, double ord, const th_arg *dim,
                             bool keepdim, bool has_dtype, th_dtype dtype, th_arg *out) {
  const th_value *v = th_meta_tensor(&x);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  int64_t dims[TH_MAX_DIMS];
  int nd;
  TH_TRY(vector_norm_check(op, what, v, ord, dim, has_dtype, dtype, dims, &nd));
  th_arg items[TH_MAX_DIMS];
  th_arg args[4] = {x, th_arg_float(ord), th_tu_ints(items, nd, dims), th_arg_bool(keepdim)};
  const char *const kn[1] = {"dtype"};
  th_arg dt = has_dtype ? th_arg_dtype(dtype) : th_arg_none();
  return th_tu_call_kw(tr, TH_OP_ltorch_linalg_vector_norm, 4, args, 1, kn, &dt, out);
}

/* torch.linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None) */
th_status ltorch_linalg_vector_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  double ord;
  bool keepdim, has_dtype;
  th_dtype dtype = TH_F32;
  TH_TRY(th_tu_float(op, "ord", &args[1], &ord));
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], &keepdim));
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[4], &dtype, &has_dtype));
  return vector_norm_impl(tr, op, args[0], ord, &args[2], keepdim, has_dtype, dtype, out);
}

/* torch.norm(input, p='fro', dim=None, keepdim=False, out=None, dtype=None): a number p is the vector
 * p-norm over dim (all dims for None); 'fro' (and None) the 2-norm over dim; 'nuc' (the nuclear norm, a
 * singular value decomposition) is not supported. */
th_status ltorch_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  bool keepdim, has_dtype;
  th_dtype dtype = TH_F32;
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], &keepdim));
  if (args[4].kind != TH_ARG_NONE) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: torch.norm: out= is not supported", op);
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[5], &dtype, &has_dtype));
  double ord = 2.0;
  if (args[1].kind == TH_ARG_STR) {
    const char *p = args[1].u.s;
    if (!strcmp(p, "nuc"))
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: torch.norm(p='nuc') (the nuclear norm) is not supported", op);
    if (strcmp(p, "fro"))
      return th_error(TH_ERR_RUNTIME, "%s: only valid string values are 'fro' and 'nuc', found %s", op, p);
    if (has_dtype) return th_error(TH_ERR_VALUE, "%s: dtype argument is not supported in frobenius norm", op);
  } else if (args[1].kind != TH_ARG_NONE) {
    TH_TRY(th_tu_float(op, "p", &args[1], &ord));
  }
  return vector_norm(tr, op, "linalg.vector_norm", args[0], ord, &args[2], keepdim, has_dtype, dtype, out);
}

/* ---- all, any, count_nonzero ------------------------------------------------------------------------ */

/* The number of elements of a that are nonzero (want_zero: that are zero) over dims, as int64. */
static th_status count_where(th_trace *tr, th_arg a, bool want_zero, int nd, const int64_t *dims, th_arg *out) {
  th_arg t, items[TH_MAX_DIMS];
  const th_value *v = a.u.value;
  th_arg zero = v->dtype == TH_BOOL           ? th_arg_bool(false)
                : th_dtype_is_float(v->dtype) ? th_arg_float(0.0)
                                              : th_arg_int(0);
  if (th_dtype_is_float(v->dtype) && th_tu_computation_dtype(v->dtype) != v->dtype)
    TH_TRY(th_tu_convert(tr, &a, th_tu_computation_dtype(v->dtype)));
  TH_TRY(th_tu_call2(tr, want_zero ? TH_OP_prims_eq : TH_OP_prims_ne, a, zero, &t));
  TH_TRY(th_tu_convert(tr, &t, TH_I64));
  return th_tu_call2(tr, TH_OP_prims_sum, t, th_tu_ints(items, nd, dims), out);
}

/* all / any (input, dim=None, keepdim=False): a bool result (uint8 for a uint8 input, as PyTorch's):
 * all is "no element is zero", any "some element is nonzero" (NaN counts as nonzero). */
static th_status all_any(th_trace *tr, const th_symbol *sym, const th_arg *args, bool all, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  int64_t dims[TH_MAX_DIMS];
  int nd;
  bool keepdim;
  TH_TRY(th_tu_reduction_dims(op, &args[1], v->ndim, dims, &nd));
  TH_TRY(th_tu_bool(op, "keepdim", &args[2], &keepdim));
  th_arg n;
  TH_TRY(count_where(tr, args[0], all, nd, dims, &n));
  TH_TRY(th_tu_call2(tr, all ? TH_OP_prims_eq : TH_OP_prims_gt, n, th_arg_int(0), out));
  if (keepdim && v->ndim > 0) TH_TRY(th_tu_keepdim(tr, *out, v->ndim, v->shape, nd, dims, out));
  if (v->dtype == TH_U8) TH_TRY(th_tu_convert(tr, out, TH_U8));
  return TH_OK;
}
th_status ltorch_all_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return all_any(tr, sym, args, true, out);
}
th_status ltorch_any_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return all_any(tr, sym, args, false, out);
}

/* count_nonzero(input, dim=None) -> int64 */
th_status ltorch_count_nonzero_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  int64_t dims[TH_MAX_DIMS];
  int nd;
  TH_TRY(th_tu_reduction_dims(op, &args[1], v->ndim, dims, &nd));
  return count_where(tr, args[0], false, nd, dims, out);
}

/* ---- nansum, nanmean, aminmax ------------------------------------------------------------------------ */

/* input with its NaNs replaced by 0 (floating inputs; others as they are). */
static th_status zero_nans(th_trace *tr, th_arg a, th_arg *out) {
  const th_value *v = a.u.value;
  if (!th_dtype_is_float(v->dtype)) {
    *out = a;
    return TH_OK;
  }
  th_arg nan;
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_isnan, a, &nan));
  return th_tu_call3(tr, TH_OP_ltorch_where, nan, th_arg_float(0.0), a, out);
}

/* nansum(input, dim=None, keepdim=False, *, dtype=None): ltorch.sum of the input with NaNs as 0. */
th_status ltorch_nansum_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (!th_meta_tensor(&args[0])) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", sym->qualname);
  th_arg x;
  TH_TRY(zero_nans(tr, args[0], &x));
  th_arg sargs[3] = {x, args[1], args[2]};
  const char *const kn[1] = {"dtype"};
  return th_tu_call_kw(tr, TH_OP_ltorch_sum, 3, sargs, 1, kn, &args[3], out);
}

/* nanmean(input, dim=None, keepdim=False, *, dtype=None): nansum / the number of non-NaN elements, as
 * PyTorch's composite (floating inputs only). */
th_status ltorch_nanmean_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: nanmean(): expected input to have floating point dtype but got %s", op,
                    th_tu_scalar_type_name(v->dtype));
  th_arg s, nan, keep, cnt;
  const char *const kn[1] = {"dtype"};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_nansum, 3, args, 1, kn, &args[3], &s));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_isnan, args[0], &nan));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_logical_not, nan, &keep));
  th_arg sargs[3] = {keep, args[1], args[2]};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 3, sargs, 0, NULL, NULL, &cnt));
  return th_tu_call2(tr, TH_OP_ltorch_true_divide, s, cnt, out);
}

/* aminmax(input, *, dim=None, keepdim=False) -> (min, max) */
th_status ltorch_aminmax_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (args[1].kind != TH_ARG_NONE && args[1].kind != TH_ARG_INT)
    return th_error(TH_ERR_TYPE, "%s: aminmax(): argument 'dim' must be an int", op);
  int64_t numel;
  th_meta_numel(v->shape, v->ndim, &numel);
  if (args[1].kind == TH_ARG_NONE && numel == 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity",
                    op);
  th_arg items[2];
  th_arg rargs[3] = {args[0], args[1], args[2]};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_amin, 3, rargs, 0, NULL, NULL, &items[0]));
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_amax, 3, rargs, 0, NULL, NULL, &items[1]));
  return th_tu_tuple_out(tr, 2, items, out);
}

/* ---- linalg.norm, renorm, dist, trace ---------------------------------------------------------------- */

/* The matrix norm of ord 'fro' (str) or +-1 / +-inf over the two dims d0, d1 (canonical). */
static th_status matrix_norm(th_trace *tr, const char *op, th_arg x, const th_arg *ord, int64_t d0, int64_t d1,
                             bool keepdim, bool has_dtype, th_dtype dtype, th_arg *out) {
  const th_value *v = x.u.value;
  int64_t dd[2] = {d0, d1};
  th_arg items[2];
  if (ord->kind == TH_ARG_STR || ord->kind == TH_ARG_NONE) {
    const char *p = ord->kind == TH_ARG_STR ? ord->u.s : "fro";
    if (!strcmp(p, "nuc"))
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: torch.linalg.norm: the nuclear norm ('nuc') is not supported", op);
    if (strcmp(p, "fro")) return th_error(TH_ERR_RUNTIME, "%s: linalg.matrix_norm: Order %s not supported.", op, p);
    th_arg dim = th_tu_ints(items, 2, dd);
    return vector_norm(tr, op, "linalg.matrix_norm", x, 2.0, &dim, keepdim, has_dtype, dtype, out);
  }
  double o;
  TH_TRY(th_tu_float(op, "ord", ord, &o));
  if (o == 2.0 || o == -2.0)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.linalg.norm: the spectral norm (ord=%g, singular values) is not supported", op, o);
  if (!(fabs(o) == 1.0 || isinf(o)))
    return th_error(TH_ERR_RUNTIME, "%s: linalg.matrix_norm: Order %g not supported.", op, o);
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME,
                    "%s: linalg.matrix_norm: Expected a floating point or complex tensor as input. Got %s", op,
                    th_tu_scalar_type_name(v->dtype));
  /* ord +-1: max/min over columns (d1) of the column sums over d0; ord +-inf: over rows (d0) of row sums */
  int64_t sum_dim = isinf(o) ? d1 : d0, red_dim = isinf(o) ? d0 : d1;
  th_dtype rdt = has_dtype ? dtype : v->dtype, comp = th_tu_computation_dtype(rdt);
  if (v->shape[red_dim] == 0) { /* PyTorch: the max over no sums is 0, the min an error */
    if (o < 0)
      return th_error(TH_ERR_INDEX, "%s: amin(): Expected reduction dim %lld to have non-zero size.", op,
                      (long long)red_dim);
    int64_t shape[TH_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < v->ndim; i++)
      if (keepdim || (i != d0 && i != d1)) shape[n++] = (i == d0 || i == d1) ? 1 : v->shape[i];
    return th_tu_full(tr, n, shape, th_arg_float(0.0), v->device, rdt, out);
  }
  th_arg a = x, t;
  TH_TRY(th_tu_convert(tr, &a, comp));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, a, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, t, th_tu_ints(items, 1, &sum_dim), &t));
  int64_t rd = red_dim > sum_dim ? red_dim - 1 : red_dim;
  TH_TRY(th_tu_call2(tr, o > 0 ? TH_OP_prims_amax : TH_OP_prims_amin, t, th_tu_ints(items, 1, &rd), out));
  if (keepdim) TH_TRY(th_tu_keepdim(tr, *out, v->ndim, v->shape, 2, dd, out));
  return th_tu_convert(tr, out, rdt);
}

/* torch.linalg.norm(A, ord=None, dim=None, keepdim=False, *, dtype=None): a vector norm over one dim (or
 * all of a 1-D input, or every element when ord is None), a matrix norm over two dims. */
th_status ltorch_linalg_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  bool keepdim, has_dtype;
  th_dtype dtype = TH_F32;
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], &keepdim));
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[4], &dtype, &has_dtype));
  const th_arg *ord = &args[1], *dim = &args[2];
  int64_t dims[TH_MAX_DIMS];
  int nd = -1;
  if (dim->kind != TH_ARG_NONE) TH_TRY(th_tu_reduction_dims(op, dim, v->ndim, dims, &nd));
  if (dim->kind == TH_ARG_NONE && ord->kind != TH_ARG_NONE) {
    if (v->ndim != 1 && v->ndim != 2)
      return th_error(TH_ERR_RUNTIME,
                      "%s: linalg.norm: If dim is not specified but ord is, the input must be 1D or "
                      "2D. Got %dD.",
                      op, v->ndim);
    nd = v->ndim;
    for (int i = 0; i < nd; i++) dims[i] = i;
  }
  if (nd == 2) return matrix_norm(tr, op, args[0], ord, dims[0], dims[1], keepdim, has_dtype, dtype, out);
  if (ord->kind == TH_ARG_STR)
    return th_error(TH_ERR_RUNTIME, "%s: linalg.norm: a string ord ('%s') needs a matrix (two dims)", op, ord->u.s);
  double o = 2.0;
  if (ord->kind != TH_ARG_NONE) TH_TRY(th_tu_float(op, "ord", ord, &o));
  th_arg items[TH_MAX_DIMS], d = nd < 0 ? th_arg_none() : th_tu_ints(items, nd, dims);
  return vector_norm(tr, op, "linalg.vector_norm", args[0], o, &d, keepdim, has_dtype, dtype, out);
}

/* renorm(input, p, dim, maxnorm): each slice along dim whose p-norm exceeds maxnorm is scaled by
 * maxnorm / (norm + 1e-7) (PyTorch's renorm; the norm in the computation dtype). */
th_status ltorch_renorm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  double p, maxnorm, dd;
  TH_TRY(th_tu_float(op, "p", &args[1], &p));
  TH_TRY(th_tu_float(op, "dim", &args[2], &dd));
  TH_TRY(th_tu_float(op, "maxnorm", &args[3], &maxnorm));
  if (!(p > 0)) return th_error(TH_ERR_RUNTIME, "%s: renorm: non-positive-norm not supported", op);
  if (maxnorm < 0) return th_error(TH_ERR_RUNTIME, "%s: renorm: expected maxnorm to be >= 0 but got %g", op, maxnorm);
  if (v->ndim <= 1)
    return th_error(TH_ERR_RUNTIME, "%s: renorm: input needs at least 2 dimensions, got %d dimensions", op, v->ndim);
  int64_t d = (int64_t)dd;
  if (d < -v->ndim || d >= v->ndim)
    return th_error(TH_ERR_INDEX, "%s: Dimension out of range (expected to be in range of [%d, %d], but got %lld)", op,
                    -v->ndim, v->ndim - 1, (long long)d);
  if (d < 0) d += v->ndim;
  int64_t dims[TH_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < v->ndim; i++)
    if (i != d) dims[nd++] = i;
  TH_TRY(float_or_error(op, v));
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  th_arg x = args[0], norm, big, factor;
  TH_TRY(th_tu_convert(tr, &x, comp));
  TH_TRY(pnorm(tr, x, p, nd, dims, comp, &norm));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_gt, norm, th_arg_float(maxnorm), &big));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, norm, th_arg_float(1e-7), &factor));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, th_arg_float(maxnorm), factor, &factor));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, big, factor, th_arg_float(1.0), &factor));
  TH_TRY(th_tu_keepdim(tr, factor, v->ndim, v->shape, nd, dims, &factor));
  TH_TRY(th_tu_expand(tr, op, &factor, v->ndim, v->shape));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, factor, out));
  return th_tu_convert(tr, out, v->dtype);
}

/* dist(input, other, p=2): the p-norm of input - other (broadcast), over every element. */
th_status ltorch_dist_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  double p;
  TH_TRY(th_tu_float(op, "p", &args[2], &p));
  th_arg d;
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, args[0], args[1], &d));
  th_arg none = th_arg_none();
  return vector_norm(tr, op, "dist", d, p, &none, false, false, TH_F32, out);
}

/* trace(input): the sum of a 2-D input's diagonal (elements k * (cols + 1) of its flattening), with
 * sum's dtype rules (integers give int64). */
th_status ltorch_trace_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (v->ndim != 2)
    return th_error(TH_ERR_RUNTIME, "%s: trace: expected a matrix, but got tensor with dim %d", op, v->ndim);
  int64_t r = v->shape[0], c = v->shape[1], k = r < c ? r : c, flat[1] = {r * c};
  th_arg f, diag;
  TH_TRY(th_tu_reshape(tr, args[0], 1, flat, &f));
  TH_TRY(th_tu_slice_in_dim(tr, f, 0, k ? (k - 1) * (c + 1) + 1 : 0, c + 1, 0, &diag));
  th_arg sargs[1] = {diag};
  return th_tu_call_kw(tr, TH_OP_ltorch_sum, 1, sargs, 0, NULL, NULL, out);
}

/* ---- vjp rules ------------------------------------------------------------------------------------------ */

#define VJ1(op, a, o) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_##op, a, o))
#define VJ2(op, a, c, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, c, o))

/* where(cond, 0, t) */
static th_status zero_where(th_trace *tr, th_arg cond, th_arg t, th_arg *out) {
  return th_tu_call3(tr, TH_OP_ltorch_where, cond, th_arg_float(0.0), t, out);
}

/* PyTorch's norm_backward for linalg_vector_norm(x, ord, dim, keepdim, dtype) with n = the norm:
 *   ord 0: 0;  ord 1: sgn(x) g;  ord 2: x * (g / n, 0 where n == 0);
 *   +-inf: sgn(x) * g / (the number of maximal |x|) at the maximal |x| (NaN counting as maximal);
 *   ord < 1: sgn(x) |x|^(ord-1) (0 where x == 0) * g * n^(1-ord);
 *   ord < 2: sgn(x) |x|^(ord-1) * (g / n^(ord-1), 0 where n == 0);
 *   else: x |x|^(ord-2) * (g / n^(ord-1), 0 where n == 0). */
static th_status linalg_vector_norm_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a) || cts[0].kind == TH_ARG_NONE) return TH_OK;
  const char *op = b->sym->qualname;
  const th_value *v = a->u.value;
  double ord;
  bool keepdim;
  int64_t dims[TH_MAX_DIMS];
  int nd;
  TH_TRY(th_tu_float(op, "ord", &b->args[1], &ord));
  TH_TRY(th_tu_bool(op, "keepdim", &b->args[3], &keepdim));
  TH_TRY(th_tu_reduction_dims(op, &b->args[2], v->ndim, dims, &nd));
  if (ord == 0.0 || th_value_numel(v) == 0) return th_vjp_zeros_like(tr, v, &grads[0]);
  th_arg n = th_vjp_out(b), g = cts[0], x = *a;
  th_dtype cd = th_tu_computation_dtype(n.u.value->dtype);
  TH_TRY(th_tu_convert(tr, &x, cd));
  TH_TRY(th_tu_convert(tr, &n, cd));
  TH_TRY(th_tu_convert(tr, &g, cd));
  if (!keepdim && v->ndim > 0) {
    TH_TRY(th_tu_keepdim(tr, n, v->ndim, v->shape, nd, dims, &n));
    TH_TRY(th_tu_keepdim(tr, g, v->ndim, v->shape, nd, dims, &g));
  }
  th_arg r, s, t, u, nz;
  if (ord == 1.0) {
    VJ1(sign, x, &s);
    VJ2(mul, s, g, &r);
  } else if (ord == 2.0) {
    VJ2(true_divide, g, n, &t);
    VJ2(eq, n, th_arg_float(0.0), &nz);
    TH_TRY(zero_where(tr, nz, t, &t));
    VJ2(mul, x, t, &r);
  } else if (isinf(ord)) {
    th_arg ax, mask, nan, cnt, items[TH_MAX_DIMS];
    VJ1(abs, x, &ax);
    VJ2(eq, ax, n, &mask);
    VJ1(isnan, ax, &nan);
    VJ2(logical_or, mask, nan, &mask);
    th_arg sargs[3] = {mask, th_tu_ints(items, nd, dims), th_arg_bool(true)};
    TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 3, sargs, 0, NULL, NULL, &cnt));
    VJ2(true_divide, g, cnt, &t);
    VJ2(mul, t, mask, &t);
    VJ1(sign, x, &s);
    VJ2(mul, s, t, &r);
  } else {
    VJ1(abs, x, &u);
    VJ2(eq, n, th_arg_float(0.0), &nz);
    if (ord < 2.0) {
      VJ2(pow, u, th_arg_float(ord - 1.0), &t);
      VJ1(sign, x, &s);
      if (ord < 1.0) {
        th_arg xz;
        VJ2(eq, x, th_arg_float(0.0), &xz);
        TH_TRY(zero_where(tr, xz, t, &t));
        VJ2(mul, s, t, &s);
        VJ2(pow, n, th_arg_float(1.0 - ord), &u);
        VJ2(mul, g, u, &u);
        VJ2(mul, s, u, &r);
        TH_TRY(th_tu_convert(tr, &r, v->dtype));
        grads[0] = r;
        return TH_OK;
      }
      VJ2(mul, s, t, &s);
    } else {
      VJ2(pow, u, th_arg_float(ord - 2.0), &t);
      VJ2(mul, x, t, &s);
    }
    VJ2(pow, n, th_arg_float(ord - 1.0), &u);
    VJ2(true_divide, g, u, &u);
    TH_TRY(zero_where(tr, nz, u, &u));
    VJ2(mul, s, u, &r);
  }
  TH_TRY(th_tu_convert(tr, &r, v->dtype));
  grads[0] = r;
  return TH_OK;
}

const th_vjp_entry th_vjp_table_torch_reduction_more[] = {
  {TH_OP_ltorch_linalg_vector_norm, TH_VJP_RULE, linalg_vector_norm_vjp},
};
const int th_vjp_table_torch_reduction_more_n =
  (int)(sizeof th_vjp_table_torch_reduction_more / sizeof th_vjp_table_torch_reduction_more[0]);
