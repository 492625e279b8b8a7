/* reduction.c — metas of the reduction prims: sum, prod, amax, amin; var, var_mean; argmax, argmin.
 *
 * Strict as every prim (as Thunder's): dims arrive canonical — non-negative, unique, in range, and
 * non-empty unless the input is 0-dim (a 0-dim tensor also accepts dims (0,), which PyTorch's dim
 * wrapping produces for it). The reduced dims are dropped (keepdim is the torch layer's
 * broadcast_in_dim) and the dtype is unchanged (accumulation dtypes are chosen by the torch layer).
 * fp8 inputs are rejected (convert first). amax/amin/argmax/argmin also reject reducing an empty
 * extent, which has no identity (PyTorch: "Expected reduction dim 0 to have non-zero size."). */
#include <inttypes.h>
#include <math.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

/* ---- shared: dims checking and the reduced shape --------------------------------------------------- */

/* Reads and checks `dims` of a (see the file comment); writes the output shape. */
static th_status reduced_shape(const th_symbol *sym, const th_value *a, const th_arg *dims_arg, int64_t *shape,
                               int *ndim) {
  const char *op = sym->qualname;
  int64_t dims[TH_MAX_DIMS];
  int n;
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  TH_TRY(th_meta_int_list(op, "dims", dims_arg, dims, &n));
  if (th_dtype_is_fp8(a->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Unsupported input dtype %s", op, th_meta_dtype_repr(a->dtype));
  if (n == 0 && a->ndim > 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected dims=() to be a non-empty sequence when the tensor's shape %s is non-empty", op,
                    th_meta_shape_tuple_str(a->shape, a->ndim, b1, sizeof b1));
  int rank = a->ndim > 0 ? a->ndim : 1;
  bool drop[TH_MAX_DIMS] = {false};
  for (int k = 0; k < n; k++) {
    if (dims[k] < 0 || dims[k] >= rank)
      return th_error(
        TH_ERR_INDEX,
        "%s: Expected dims=%s to contain only valid (non-negative, in range) dimensions of a tensor of shape %s", op,
        th_meta_shape_tuple_str(dims, n, b0, sizeof b0), th_meta_shape_tuple_str(a->shape, a->ndim, b1, sizeof b1));
    if (drop[dims[k]])
      return th_error(TH_ERR_RUNTIME, "%s: Expected dims=%s to be unique", op,
                      th_meta_shape_tuple_str(dims, n, b0, sizeof b0));
    drop[dims[k]] = true;
  }
  bool no_identity = sym->id == TH_OP_prims_amax || sym->id == TH_OP_prims_amin;
  *ndim = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (!drop[d])
      shape[(*ndim)++] = a->shape[d];
    else if (no_identity && a->shape[d] == 0)
      return th_error(TH_ERR_RUNTIME, "%s: Expected reduction dim %d to have non-zero size.", op, d);
  }
  return TH_OK;
}

/* ---- sum, prod, amax, amin (a, dims) ---------------------------------------------------------------- */

th_status prims_reduction_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  TH_TRY(reduced_shape(sym, a, &args[1], shape, &ndim));
  return th_meta_new_tensor_like(tr, a, a->dtype, ndim, shape, out);
}

/* ---- var(a, dims, *, correction), var_mean(a, dims, *, correction) -> (var, mean) ------------------
 * Floating inputs only (PyTorch: var supports only floating point and complex dtypes); both outputs
 * have a's dtype (there are no complex dtypes here, so var's real dtype is a's). */

static th_status var_check(const th_symbol *sym, const th_value *a, int64_t *shape, int *ndim, const th_arg *args) {
  if (!th_dtype_is_float(a->dtype) || th_dtype_is_fp8(a->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Unsupported input dtype %s (var needs a floating dtype)", sym->qualname,
                    th_meta_dtype_repr(a->dtype));
  return reduced_shape(sym, a, &args[1], shape, ndim);
}

th_status prims_var_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  TH_TRY(var_check(sym, a, shape, &ndim, args));
  return th_meta_new_tensor_like(tr, a, a->dtype, ndim, shape, out);
}

th_status prims_var_mean_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  TH_TRY(var_check(sym, a, shape, &ndim, args));
  th_arg *items = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  if (!items) return TH_ERR_NOMEM;
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, ndim, shape, &items[0]));
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, ndim, shape, &items[1]));
  *out = th_arg_tuple(2, items);
  return TH_OK;
}

/* ---- argmax, argmin (a, dim) -------------------------------------------------------------------------
 * int64 indices, never requiring grad. dim None reduces every dimension (shape ()); else dim is
 * canonical (0 <= dim < ndim; 0 for a 0-dim tensor) and dropped. Reducing an empty extent is an error
 * ("argmax(): Expected reduction dim to be specified for input.numel() == 0."). */

th_status prims_argminmax_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t shape[TH_MAX_DIMS];
  int ndim = 0;
  if (th_dtype_is_fp8(a->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Unsupported input dtype %s", op, th_meta_dtype_repr(a->dtype));
  if (args[1].kind == TH_ARG_NONE) {
    bool empty = false;
    for (int d = 0; d < a->ndim; d++) empty |= a->shape[d] == 0;
    if (empty)
      return th_error(TH_ERR_RUNTIME, "%s: Expected reduction dim to be specified for input.numel() == 0.", op);
  } else {
    int64_t dim;
    TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
    int rank = a->ndim > 0 ? a->ndim : 1;
    if (dim < 0 || dim >= rank)
      return th_error(TH_ERR_INDEX,
                      "%s: Expected dim=%" PRId64
                      " to be a valid (non-negative, in range) dimension of a tensor with %d dimensions",
                      op, dim, a->ndim);
    for (int d = 0; d < a->ndim; d++) {
      if (d != dim)
        shape[ndim++] = a->shape[d];
      else if (a->shape[d] == 0)
        return th_error(TH_ERR_RUNTIME, "%s: Expected reduction dim %d to have non-zero size.", op, d);
    }
  }
  return th_meta_new_tensor(tr, TH_I64, a->device, ndim, shape, false, out);
}

/* ---- vjp rules (ops/vjp.h) ----------------------------------------------------------------------------
 * PyTorch's: sum broadcasts g back; prod gives g times the product of the other elements (below);
 * amax/amin split g evenly among the elements equal to the result; var gives g * 2 (a - mean) /
 * max(N - correction, 0), the divisor clamped at 0 as the forward's (inf or nan where N <= correction);
 * var_mean adds the mean's g / N. argmax/argmin have integer results. */

/* The reduced dims of b (args[1]) as a mask over a's dims, and N = the number of elements reduced. */
static th_status reduced_dims(const th_bsym *b, const th_value *a, bool *mask, int64_t *count) {
  int64_t dims[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(b->sym->qualname, "dims", &b->args[1], dims, &n));
  for (int d = 0; d < TH_MAX_DIMS; d++) mask[d] = false;
  *count = 1;
  for (int k = 0; k < n; k++)
    if (dims[k] < a->ndim) {
      mask[dims[k]] = true;
      *count *= a->shape[dims[k]];
    }
  return TH_OK;
}

/* x of the reduced shape broadcast back to a's shape. */
static th_status restore(th_trace *tr, th_arg x, const th_value *a, const bool *mask, th_arg *out) {
  int64_t bd[TH_MAX_DIMS];
  int nb = 0;
  for (int d = 0; d < a->ndim; d++)
    if (!mask[d]) bd[nb++] = d;
  if (nb == a->ndim) {
    *out = x;
    return TH_OK;
  }
  th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, x, th_tu_ints(si, a->ndim, a->shape), th_tu_ints(bi, nb, bd),
                     out);
}

#define VJ2(op, a, b, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, b, o))

static th_status sum_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  bool mask[TH_MAX_DIMS];
  int64_t n;
  TH_TRY(reduced_dims(b, a->u.value, mask, &n));
  return restore(tr, cts[0], a->u.value, mask, &grads[0]);
}

/* prod: g times the product of the other elements, as IEEE arithmetic gives it (PyTorch's exclusive
 * cumulative products): NaN if a NaN is among the others, or a zero and an infinity; +-0 if a zero;
 * +-inf (with the infinities' signs) if an infinity; else the product of the finite nonzero elements
 * divided by the element itself (itself excluded when it is 0, inf or NaN). Counting the zeros,
 * infinities and NaNs keeps the division from forming 0 / 0 or inf / inf; the finite product is taken
 * in float64 for a float32 input, so that it overflows only where the product of the others does. */
static th_status prod_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const th_value *av = a->u.value;
  bool mask[TH_MAX_DIMS];
  int64_t n;
  TH_TRY(reduced_dims(b, av, mask, &n));
  th_dtype cd = av->dtype == TH_F32 ? TH_F64 : av->dtype;
  th_arg x = *a, z, inf, nan, special, rest, sgn, p, s, cnt[3], own[3], g, t, r;
  TH_TRY(th_tu_convert(tr, &x, cd));
  VJ2(eq, x, th_arg_float(0.0), &z);
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_abs, x, &t));
  VJ2(eq, t, th_arg_float(INFINITY), &inf);
  VJ2(ne, x, x, &nan);
  VJ2(logical_or, z, inf, &special);
  VJ2(logical_or, special, nan, &special);
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, special, th_arg_float(1.0), x, &rest)); /* 1 at 0, inf, NaN */
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_sign, x, &t));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, inf, t, th_arg_float(1.0), &sgn)); /* the infinities' signs */
  TH_TRY(th_tu_call2(tr, TH_OP_prims_prod, rest, b->args[1], &p));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_prod, sgn, b->args[1], &s));
  TH_TRY(restore(tr, p, av, mask, &p));
  TH_TRY(restore(tr, s, av, mask, &s));
  const th_arg flags[3] = {z, inf, nan};
  for (int k = 0; k < 3; k++) { /* the zeros, infinities and NaNs among the others */
    TH_TRY(th_tu_call2(tr, TH_OP_prims_convert_element_type, flags[k], th_arg_dtype(cd), &own[k]));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, own[k], b->args[1], &cnt[k]));
    TH_TRY(restore(tr, cnt[k], av, mask, &cnt[k]));
    VJ2(sub, cnt[k], own[k], &cnt[k]);
    VJ2(gt, cnt[k], th_arg_float(0.0), &cnt[k]);
  }
  VJ2(true_divide, p, rest, &r); /* the finite nonzero others */
  VJ2(true_divide, s, sgn, &s);
  VJ2(mul, r, s, &t);
  VJ2(mul, t, th_arg_float(INFINITY), &t);
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, cnt[1], t, r, &r));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, cnt[1], th_arg_float(NAN), th_arg_float(0.0), &t));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, cnt[0], t, r, &r));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, cnt[2], th_arg_float(NAN), r, &r));
  TH_TRY(restore(tr, cts[0], av, mask, &g));
  TH_TRY(th_tu_convert(tr, &g, cd));
  VJ2(mul, g, r, &r);
  TH_TRY(th_tu_convert(tr, &r, av->dtype));
  grads[0] = r;
  return TH_OK;
}

static th_status amax_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const th_value *av = a->u.value;
  bool mask[TH_MAX_DIMS];
  int64_t n;
  TH_TRY(reduced_dims(b, av, mask, &n));
  th_arg y, m, cnt, g;
  TH_TRY(restore(tr, th_vjp_out(b), av, mask, &y));
  VJ2(eq, *a, y, &m);
  TH_TRY(th_tu_call2(tr, TH_OP_prims_convert_element_type, m, th_arg_dtype(av->dtype), &m));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, m, b->args[1], &cnt));
  VJ2(true_divide, cts[0], cnt, &g); /* (g / count) * mask, as PyTorch's scale_grad_by_count */
  TH_TRY(restore(tr, g, av, mask, &g));
  VJ2(mul, g, m, &grads[0]);
  return TH_OK;
}

/* var and var_mean: cts[0] the variance's cotangent (NONE for var_mean when only the mean is used),
 * cts[1] the mean's (var_mean only). */
static th_status var_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const th_value *av = a->u.value;
  bool mask[TH_MAX_DIMS];
  int64_t n;
  TH_TRY(reduced_dims(b, av, mask, &n));
  bool is_vm = b->sym->id == TH_OP_prims_var_mean;
  th_arg gv = cts[0], gm = is_vm ? cts[1] : th_arg_none(), acc = th_arg_none(), t, mean;
  if (gv.kind == TH_ARG_VALUE) {
    double corr = 0;
    th_meta_number_value(&b->args[2], &corr, NULL);
    if (is_vm) {
      mean = b->out.u.seq.items[1];
    } else {
      TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, *a, b->args[1], &mean));
      VJ2(true_divide, mean, th_arg_float((double)n), &mean);
    }
    TH_TRY(restore(tr, mean, av, mask, &mean));
    VJ2(sub, *a, mean, &t);
    TH_TRY(restore(tr, gv, av, mask, &gv));
    VJ2(mul, gv, t, &t);
    double dof = (double)n - corr; /* clamped at 0 as the forward's divisor */
    VJ2(mul, t, th_arg_float(dof > 0 ? 2.0 / dof : INFINITY), &acc);
  }
  if (gm.kind == TH_ARG_VALUE) {
    VJ2(true_divide, gm, th_arg_float((double)n), &t);
    TH_TRY(restore(tr, t, av, mask, &t));
    if (acc.kind == TH_ARG_VALUE)
      VJ2(add, acc, t, &acc);
    else
      acc = t;
  }
  grads[0] = acc;
  return TH_OK;
}
#undef VJ2

#define RULE(name, fn)                                                                                                 \
  { TH_OP_prims_##name, TH_VJP_RULE, fn }
const th_vjp_entry th_vjp_table_prims_reduction[] = {
  RULE(sum, sum_vjp),
  RULE(prod, prod_vjp),
  RULE(amax, amax_vjp),
  RULE(amin, amax_vjp),
  RULE(var, var_vjp),
  RULE(var_mean, var_vjp),
  {TH_OP_prims_argmax, TH_VJP_NONDIFF, NULL},
  {TH_OP_prims_argmin, TH_VJP_NONDIFF, NULL},
};
const int th_vjp_table_prims_reduction_n =
  (int)(sizeof th_vjp_table_prims_reduction / sizeof th_vjp_table_prims_reduction[0]);
#undef RULE
