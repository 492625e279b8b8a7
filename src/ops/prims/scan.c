/* scan.c — metas and vjp rules of the sort and scan prims: sort, topk, kthvalue (values and int64
 * indices along one dim) and the scans cumsum, cumprod, logcumsumexp, cummax, cummin.
 *
 * Strict, as every prim: dim arrives canonical (0 <= dim < max(ndim, 1); a 0-dim tensor is one
 * element along dim 0), k in range, the dtype already what PyTorch computes in (the torch layer in
 * torch/scan.c promotes integer sums and products to int64). The outputs keep the input's dtype and
 * shape (topk: k along dim; kthvalue: the dim removed); indices are int64 and never require grad.
 *
 * Gradients (PyTorch's derivatives.yaml):
 *   sort, topk, kthvalue, cummax, cummin: the values' cotangent goes to the input positions the indices
 *     name, summed where several outputs name one position (cummax repeats indices): a comparison of the
 *     indices with an iota over the input's dim, kept with where and summed (O(n * m) per row);
 *   cumsum: the reversed cumsum of the cotangent (flip, cumsum, flip);
 *   cumprod: reversed_cumsum(g * out) / a before the first zero of a row; at the first zero the reversed
 *     cumsum of g times the cumprod of a with that zero replaced by 1; 0 after it (PyTorch's
 *     cumprod_backward, without division by zero);
 *   logcumsumexp: PyTorch's logcumsumexp_backward, the positive and negative parts of the cotangent
 *     through reversed logcumsumexps in log space. */
#include <float.h>
#include <string.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

/* ---- metas ---------------------------------------------------------------------------------------- */

static th_status check_dim(const char *op, const th_value *a, const th_arg *darg, int *d) {
  int64_t dim;
  TH_TRY(th_meta_int(op, "dim", darg, &dim));
  int rank = a->ndim > 0 ? a->ndim : 1;
  if (dim < 0 || dim >= rank)
    return th_error(TH_ERR_INDEX,
                    "%s: Expected dim=%lld to be a valid (non-negative, in range) dimension of a tensor with %d "
                    "dimensions",
                    op, (long long)dim, a->ndim);
  if (th_dtype_is_fp8(a->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Unsupported input dtype %s", op, th_meta_dtype_repr(a->dtype));
  *d = (int)dim;
  return TH_OK;
}

static th_status values_indices(th_trace *tr, const th_value *a, int ndim, const int64_t *shape, th_arg *out) {
  th_arg *items = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  if (!items) return TH_ERR_NOMEM;
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, ndim, shape, &items[0]));
  TH_TRY(th_meta_new_tensor(tr, TH_I64, a->device, ndim, shape, false, &items[1]));
  *out = th_arg_tuple(2, items);
  return TH_OK;
}

/* sort(a, dim, descending, stable) -> (values, indices) */
th_status prims_sort_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  int d = 0;
  TH_TRY(check_dim(sym->qualname, a, &args[1], &d));
  return values_indices(tr, a, a->ndim, a->shape, out);
}

/* topk(a, k, dim, largest, sorted) -> (values, indices), k along dim */
th_status prims_topk_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int d = 0;
  int64_t k;
  TH_TRY(check_dim(op, a, &args[2], &d));
  TH_TRY(th_meta_int(op, "k", &args[1], &k));
  int64_t len = a->ndim ? a->shape[d] : 1;
  if (k < 0 || k > len) return th_error(TH_ERR_RUNTIME, "%s: selected index k out of range", op);
  int64_t shape[TH_MAX_DIMS];
  memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  if (a->ndim) shape[d] = k;
  return values_indices(tr, a, a->ndim, shape, out);
}

/* kthvalue(a, k, dim) -> (values, indices), dim removed; 1 <= k <= len */
th_status prims_kthvalue_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int d = 0;
  int64_t k;
  TH_TRY(check_dim(op, a, &args[2], &d));
  TH_TRY(th_meta_int(op, "k", &args[1], &k));
  int64_t len = a->ndim ? a->shape[d] : 1;
  if (k < 1 || k > len)
    return th_error(TH_ERR_RUNTIME, "%s: kthvalue(): selected number k out of range for dimension %d", op, d);
  int64_t shape[TH_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < a->ndim; i++)
    if (i != d) shape[n++] = a->shape[i];
  return values_indices(tr, a, n, shape, out);
}

/* cumsum / cumprod / logcumsumexp(a, dim): like a */
th_status prims_scan_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int d = 0;
  TH_TRY(check_dim(op, a, &args[1], &d));
  if (sym->id == TH_OP_prims_logcumsumexp && !th_dtype_is_float(a->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Expected a floating tensor, but got %s", op, th_meta_dtype_repr(a->dtype));
  if (sym->id != TH_OP_prims_logcumsumexp && a->dtype == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: Expected a numeric tensor, but got %s", op, th_meta_dtype_repr(a->dtype));
  return th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, a->shape, out);
}

/* cummax / cummin(a, dim) -> (values, indices) */
th_status prims_cumext_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  int d = 0;
  TH_TRY(check_dim(sym->qualname, a, &args[1], &d));
  return values_indices(tr, a, a->ndim, a->shape, out);
}

/* ---- vjp helpers ------------------------------------------------------------------------------------ */

static th_status call_dim(th_trace *tr, th_op_id op, th_arg x, int d, th_arg *out) {
  return th_tu_call2(tr, op, x, th_arg_int(d), out);
}

static th_status flip1(th_trace *tr, th_arg x, int d, th_arg *out) {
  if (x.u.value->ndim == 0) {
    *out = x;
    return TH_OK;
  }
  const int64_t dims[1] = {d};
  th_arg items[1];
  return th_tu_call2(tr, TH_OP_prims_flip, x, th_tu_ints(items, 1, dims), out);
}

/* reversed scan along d: flip(op(flip(x))) */
static th_status reversed(th_trace *tr, th_op_id op, th_arg x, int d, th_arg *out) {
  th_arg t;
  TH_TRY(flip1(tr, x, d, &t));
  TH_TRY(call_dim(tr, op, t, d, &t));
  return flip1(tr, t, d, out);
}

static th_arg zero_like_dtype(th_dtype dt) { return th_dtype_is_float(dt) ? th_arg_float(0.0) : th_arg_int(0); }

/* The input-shaped (dim d of length n) sum of ct over the positions idx names: ct and idx share a shape
 * with m along d; the result has n there. */
static th_status scatter_along(th_trace *tr, th_arg ct, th_arg idx, int d, int64_t n, th_arg *out) {
  const th_value *c = ct.u.value;
  int r = c->ndim;
  if (r + 1 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "the gradient of a sort or scan of a tensor of rank %d is not supported (at most %d dimensions)", r,
                    TH_MAX_DIMS - 1);
  int64_t shape[TH_MAX_DIMS], bd[TH_MAX_DIMS];
  for (int i = 0, k = 0; i < r; i++) {
    shape[k] = c->shape[i];
    bd[i] = k++;
    if (i == d) shape[k++] = n;
  }
  th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS], cb, ib, io, mask, kept;
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, ct, th_tu_ints(si, r + 1, shape), th_tu_ints(bi, r, bd), &cb));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, idx, th_tu_ints(si, r + 1, shape), th_tu_ints(bi, r, bd), &ib));
  const int64_t one[1] = {d + 1};
  TH_TRY(th_tu_iota(tr, n, 0, 1, c->device, TH_I64, &io));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, io, th_tu_ints(si, r + 1, shape), th_tu_ints(bi, 1, one), &io));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, ib, io, &mask));
  th_arg z;
  TH_TRY(th_tu_full(tr, r + 1, shape, zero_like_dtype(c->dtype), c->device, c->dtype, &z));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, mask, cb, z, &kept));
  const int64_t sd[1] = {d};
  return th_tu_call2(tr, TH_OP_prims_sum, kept, th_tu_ints(si, 1, sd), out);
}

static th_status out_item(const th_bsym *b, int i, th_arg *o) {
  if ((b->out.kind != TH_ARG_TUPLE && b->out.kind != TH_ARG_LIST) || b->out.u.seq.n <= i)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: expected its outputs as a tuple", b->sym->qualname);
  *o = b->out.u.seq.items[i];
  return TH_OK;
}

/* ---- vjp rules ---------------------------------------------------------------------------------------- */

/* sort, cummax, cummin: (values, indices) like a; topk: k along dim */
static th_status values_indices_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a) || cts[0].kind == TH_ARG_NONE) return TH_OK;
  const th_value *av = a->u.value;
  int64_t dim;
  TH_TRY(th_meta_int(b->sym->qualname, "dim", &b->args[b->sym->id == TH_OP_prims_topk ? 2 : 1], &dim));
  if (av->ndim == 0) {
    if (b->sym->id == TH_OP_prims_topk && b->out.u.seq.items[0].u.value->ndim == 0) {
      int64_t k;
      TH_TRY(th_meta_int(b->sym->qualname, "k", &b->args[1], &k));
      if (k == 0) return th_vjp_zeros_like(tr, av, &grads[0]);
    }
    grads[0] = cts[0];
    return TH_OK;
  }
  th_arg idx;
  TH_TRY(out_item(b, 1, &idx));
  return scatter_along(tr, cts[0], idx, (int)dim, av->shape[dim], &grads[0]);
}

static th_status kthvalue_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a) || cts[0].kind == TH_ARG_NONE) return TH_OK;
  const th_value *av = a->u.value;
  if (av->ndim == 0) {
    grads[0] = cts[0];
    return TH_OK;
  }
  int64_t dim;
  TH_TRY(th_meta_int(b->sym->qualname, "dim", &b->args[2], &dim));
  th_arg idx, c, i;
  TH_TRY(out_item(b, 1, &idx));
  TH_TRY(th_tu_unsqueeze(tr, cts[0], (int)dim, &c));
  TH_TRY(th_tu_unsqueeze(tr, idx, (int)dim, &i));
  return scatter_along(tr, c, i, (int)dim, av->shape[dim], &grads[0]);
}

static th_status cumsum_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  int64_t dim;
  TH_TRY(th_meta_int(b->sym->qualname, "dim", &b->args[1], &dim));
  return reversed(tr, TH_OP_prims_cumsum, cts[0], (int)dim, &grads[0]);
}

static th_status cumprod_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *aa = &b->args[0];
  if (!th_vjp_is_float_tensor(aa)) return TH_OK;
  const th_value *av = aa->u.value;
  th_dtype dt = av->dtype;
  int64_t dim;
  TH_TRY(th_meta_int(b->sym->qualname, "dim", &b->args[1], &dim));
  int d = (int)dim;
  th_arg a = *aa, g = cts[0], out = th_vjp_out(b);
  th_arg is_zero, cz, before, first, one, safe, t1, a1, out1, t2, z, r;
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, a, th_arg_float(0.0), &is_zero));
  cz = is_zero;
  TH_TRY(th_tu_convert(tr, &cz, TH_I64));
  TH_TRY(call_dim(tr, TH_OP_prims_cumsum, cz, d, &cz));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, cz, th_arg_int(0), &before));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, cz, th_arg_int(1), &first));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_bitwise_and, first, is_zero, &first));
  TH_TRY(th_tu_full(tr, av->ndim, av->shape, th_arg_float(1.0), av->device, dt, &one));
  TH_TRY(th_tu_full(tr, av->ndim, av->shape, th_arg_float(0.0), av->device, dt, &z));
  /* before the first zero: reversed_cumsum(g * out) / a */
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, before, a, one, &safe));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, g, out, &t1));
  TH_TRY(reversed(tr, TH_OP_prims_cumsum, t1, d, &t1));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, t1, safe, &t1));
  /* at the first zero: reversed_cumsum(g * cumprod(a with that zero as 1)) */
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, first, one, a, &a1));
  TH_TRY(call_dim(tr, TH_OP_prims_cumprod, a1, d, &out1));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, g, out1, &t2));
  TH_TRY(reversed(tr, TH_OP_prims_cumsum, t2, d, &t2));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, first, t2, z, &r));
  return th_tu_call3(tr, TH_OP_prims_where, before, t1, r, &grads[0]);
}

static th_status logcumsumexp_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *aa = &b->args[0];
  if (!th_vjp_is_float_tensor(aa)) return TH_OK;
  const th_value *av = aa->u.value;
  int64_t dim;
  TH_TRY(th_meta_int(b->sym->qualname, "dim", &b->args[1], &dim));
  int d = (int)dim;
  double lowest = av->dtype == TH_F64 ? -DBL_MAX : -FLT_MAX;
  th_arg g = cts[0], out = th_vjp_out(b), lo, labs, pos, neg, gp, gn, mp, mn;
  TH_TRY(th_tu_full(tr, av->ndim, av->shape, th_arg_float(lowest), av->device, av->dtype, &lo));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, g, &labs));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_log, labs, &labs));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_gt, g, th_arg_float(0.0), &mp));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_lt, g, th_arg_float(0.0), &mn));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, mp, labs, lo, &gp));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, mn, labs, lo, &gn));
  th_arg parts[2] = {gp, gn};
  for (int i = 0; i < 2; i++) {
    th_arg t;
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, parts[i], out, &t));
    TH_TRY(reversed(tr, TH_OP_prims_logcumsumexp, t, d, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_add, t, *aa, &t));
    TH_TRY(th_tu_call1(tr, TH_OP_prims_exp, t, &parts[i]));
  }
  pos = parts[0];
  neg = parts[1];
  return th_tu_call2(tr, TH_OP_prims_sub, pos, neg, &grads[0]);
}

const th_vjp_entry th_vjp_table_prims_scan[] = {
  {TH_OP_prims_sort, TH_VJP_RULE, values_indices_vjp},   {TH_OP_prims_topk, TH_VJP_RULE, values_indices_vjp},
  {TH_OP_prims_cummax, TH_VJP_RULE, values_indices_vjp}, {TH_OP_prims_cummin, TH_VJP_RULE, values_indices_vjp},
  {TH_OP_prims_kthvalue, TH_VJP_RULE, kthvalue_vjp},     {TH_OP_prims_cumsum, TH_VJP_RULE, cumsum_vjp},
  {TH_OP_prims_cumprod, TH_VJP_RULE, cumprod_vjp},       {TH_OP_prims_logcumsumexp, TH_VJP_RULE, logcumsumexp_vjp},
};
const int th_vjp_table_prims_scan_n = (int)(sizeof th_vjp_table_prims_scan / sizeof th_vjp_table_prims_scan[0]);
