/* scan.c — torch-level sort and scan ops: sort, argsort, msort, topk, kthvalue, cumsum, cumprod,
 * logcumsumexp, cummax, cummin, diff, trapezoid/trapz, cumulative_trapezoid and repeat_interleave.
 *
 * They wrap the prims of prims/scan.c with PyTorch's conveniences (negative dims, keepdim, the dtype
 * argument and integer promotion of cumsum/cumprod to int64) or, for diff, the trapezoid rules and
 * repeat_interleave, decompose into them and the elementwise and layout ops, following ATen's
 * formulas step by step (the order of operations and their dtypes decide the rounding). Gradients
 * come from the prims' vjp rules and the decompositions. */
#include <string.h>

#include "ops/torch/torch_util.h"

static const th_value *tensor0(const th_arg *args) { return args[0].u.value; }

static th_status dim_of(const char *op, const th_arg *a, const th_value *v, int *d) {
  int64_t dim;
  TH_TRY(th_meta_int(op, "dim", a, &dim));
  return th_meta_canonical_dim(op, dim, v->ndim, d);
}

static th_status flag(const char *op, const char *what, const th_arg *a, bool *out) {
  *out = false;
  if (a->kind == TH_ARG_NONE) return TH_OK;
  return th_tu_bool(op, what, a, out);
}

static th_status no_fp8(const char *op, const th_value *v) {
  if (th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"%s\" not implemented for '%s'", op, op, th_tu_scalar_type_name(v->dtype));
  return TH_OK;
}

/* ---- sort / argsort / msort / topk / kthvalue ----------------------------------------------------------- */

static th_status sort_impl(th_trace *tr, const char *op, const th_arg *args, th_arg *out) {
  const th_value *v = tensor0(args);
  int d = 0;
  bool desc, stable;
  TH_TRY(no_fp8(op, v));
  TH_TRY(dim_of(op, &args[1], v, &d));
  TH_TRY(flag(op, "descending", &args[2], &desc));
  TH_TRY(flag(op, "stable", &args[3], &stable));
  th_arg a[4] = {args[0], th_arg_int(d), th_arg_bool(desc), th_arg_bool(stable)};
  return th_call(tr, TH_OP_prims_sort, 4, a, out);
}

th_status ltorch_sort_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return sort_impl(tr, sym->qualname, args, out);
}

th_status ltorch_argsort_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_arg r;
  TH_TRY(sort_impl(tr, sym->qualname, args, &r));
  *out = r.u.seq.items[1];
  return TH_OK;
}

th_status ltorch_msort_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_arg a[4] = {args[0], th_arg_int(0), th_arg_bool(false), th_arg_bool(false)}, r;
  TH_TRY(sort_impl(tr, sym->qualname, a, &r));
  *out = r.u.seq.items[0];
  return TH_OK;
}

th_status ltorch_topk_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  if (v->dtype == TH_BOOL) return th_error(TH_ERR_RUNTIME, "%s: \"topk_cpu\" not implemented for 'Bool'", op);
  int64_t k;
  int d = 0;
  bool largest, sorted;
  TH_TRY(no_fp8(op, v));
  TH_TRY(th_meta_int(op, "k", &args[1], &k));
  TH_TRY(dim_of(op, &args[2], v, &d));
  TH_TRY(th_tu_bool(op, "largest", &args[3], &largest));
  TH_TRY(th_tu_bool(op, "sorted", &args[4], &sorted));
  int64_t len = v->ndim ? v->shape[d] : 1;
  if (k < 0 || k > len) return th_error(TH_ERR_RUNTIME, "%s: selected index k out of range", op);
  th_arg a[5] = {args[0], th_arg_int(k), th_arg_int(d), th_arg_bool(largest), th_arg_bool(sorted)};
  return th_call(tr, TH_OP_prims_topk, 5, a, out);
}

th_status ltorch_kthvalue_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  if (v->dtype == TH_BOOL) return th_error(TH_ERR_RUNTIME, "%s: \"kthvalue_cpu\" not implemented for 'Bool'", op);
  int64_t k;
  int d = 0;
  bool keepdim;
  TH_TRY(no_fp8(op, v));
  TH_TRY(th_meta_int(op, "k", &args[1], &k));
  TH_TRY(dim_of(op, &args[2], v, &d));
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], &keepdim));
  int64_t len = v->ndim ? v->shape[d] : 1;
  if (k < 1 || k > len)
    return th_error(TH_ERR_RUNTIME, "%s: kthvalue(): selected number k out of range for dimension %d", op, d);
  th_arg a[3] = {args[0], th_arg_int(k), th_arg_int(d)}, r;
  TH_TRY(th_call(tr, TH_OP_prims_kthvalue, 3, a, &r));
  if (!keepdim || v->ndim == 0) {
    *out = r;
    return TH_OK;
  }
  th_arg items[2];
  for (int i = 0; i < 2; i++) TH_TRY(th_tu_unsqueeze(tr, r.u.seq.items[i], d, &items[i]));
  return th_tu_tuple_out(tr, 2, items, out);
}

/* ---- scans ------------------------------------------------------------------------------------------------ */

/* cumsum / cumprod: the dtype argument converts first; else bool and integers accumulate in int64. */
static th_status cum_impl(th_trace *tr, const char *op, th_op_id prim, const th_arg *args, th_arg *out) {
  const th_value *v = tensor0(args);
  int d = 0;
  TH_TRY(no_fp8(op, v));
  TH_TRY(dim_of(op, &args[1], v, &d));
  th_dtype dt;
  bool has;
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[2], &dt, &has));
  if (!has) dt = th_meta_dtype_is_exact(v->dtype) ? TH_I64 : v->dtype;
  th_arg a = args[0];
  TH_TRY(th_tu_convert(tr, &a, dt));
  return th_tu_call2(tr, prim, a, th_arg_int(d), out);
}

th_status ltorch_cumsum_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return cum_impl(tr, sym->qualname, TH_OP_prims_cumsum, args, out);
}

th_status ltorch_cumprod_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return cum_impl(tr, sym->qualname, TH_OP_prims_cumprod, args, out);
}

th_status ltorch_logcumsumexp_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int d = 0;
  TH_TRY(dim_of(op, &args[1], v, &d));
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"logcumsumexp_out_cpu\" not implemented for '%s'", op,
                    th_tu_scalar_type_name(v->dtype));
  return th_tu_call2(tr, TH_OP_prims_logcumsumexp, args[0], th_arg_int(d), out);
}

static th_status cumext(th_trace *tr, const th_symbol *sym, th_op_id prim, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int d = 0;
  TH_TRY(no_fp8(op, v));
  TH_TRY(dim_of(op, &args[1], v, &d));
  return th_tu_call2(tr, prim, args[0], th_arg_int(d), out);
}

th_status ltorch_cummax_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return cumext(tr, sym, TH_OP_prims_cummax, args, out);
}

th_status ltorch_cummin_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return cumext(tr, sym, TH_OP_prims_cummin, args, out);
}

/* ---- diff ---------------------------------------------------------------------------------------------------- */

/* ATen's diff: prepend and append concatenated along dim, then n times x[1:] - x[:-1] (logical_xor for
 * bool); n is capped at the length, and n == 0 is a copy of the input alone. */
th_status ltorch_diff_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = tensor0(args);
  int64_t n;
  TH_TRY(th_meta_int(op, "n", &args[1], &n));
  if (v->ndim == 0) return th_error(TH_ERR_RUNTIME, "%s: diff expects input to be at least one-dimensional", op);
  if (n < 0) return th_error(TH_ERR_RUNTIME, "%s: order must be non-negative but got %lld", op, (long long)n);
  int d = 0;
  TH_TRY(dim_of(op, &args[2], v, &d));
  const th_arg *pre = &args[3], *app = &args[4];
  for (int i = 0; i < 2; i++) {
    const th_arg *e = i ? app : pre;
    if (e->kind != TH_ARG_NONE && e->u.value->ndim != v->ndim)
      return th_error(TH_ERR_RUNTIME, "%s: diff expects %s to be the same dimension as input", op,
                      i ? "append" : "prepend");
  }
  if (n == 0 || (v->shape[d] == 0 && pre->kind == TH_ARG_NONE && app->kind == TH_ARG_NONE))
    return th_tu_call1(tr, TH_OP_prims_clone, args[0], out); /* n == 0 ignores prepend and append */
  th_arg x = args[0];
  if (pre->kind != TH_ARG_NONE || app->kind != TH_ARG_NONE) {
    th_arg items[3];
    int k = 0;
    if (pre->kind != TH_ARG_NONE) items[k++] = *pre;
    items[k++] = args[0];
    if (app->kind != TH_ARG_NONE) items[k++] = *app;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_cat, th_arg_list(k, items), th_arg_int(d), &x));
  }
  int64_t len = x.u.value->shape[d];
  if (n > len) n = len;
  bool is_bool = x.u.value->dtype == TH_BOOL;
  for (int64_t out_len = len - 1; n > 0; n--, out_len--) {
    th_arg hi, lo;
    TH_TRY(th_tu_slice_in_dim(tr, x, 1, 1 + out_len, 1, d, &hi));
    TH_TRY(th_tu_slice_in_dim(tr, x, 0, out_len, 1, d, &lo));
    TH_TRY(th_tu_call2(tr, is_bool ? TH_OP_ltorch_logical_xor : TH_OP_ltorch_sub, hi, lo, &x));
  }
  *out = x;
  return TH_OK;
}

/* ---- trapezoid / cumulative_trapezoid ---------------------------------------------------------------------------- */

static th_status slice_ends(th_trace *tr, th_arg y, int d, th_arg *left, th_arg *right) {
  int64_t n = y.u.value->shape[d];
  TH_TRY(th_tu_slice_in_dim(tr, y, 0, n > 0 ? n - 1 : 0, 1, d, left));
  return th_tu_slice_in_dim(tr, y, n > 0 ? 1 : 0, n, 1, d, right);
}

/* dx = x[1:] - x[:-1] along dim, with a 1-D x viewed along dim and a lower-rank x left-padded with 1s. */
static th_status spacing(th_trace *tr, const char *op, const char *name, th_arg y, th_arg x, int d, th_arg *dx) {
  const th_value *yv = y.u.value, *xv = x.u.value;
  int64_t shape[TH_MAX_DIMS];
  th_arg xx = x;
  if (xv->ndim == 1) {
    if (xv->shape[0] != yv->shape[d])
      return th_error(TH_ERR_RUNTIME, "%s: %s: There must be one `x` value for each sample point", op, name);
    for (int i = 0; i < yv->ndim; i++) shape[i] = i == d ? xv->shape[0] : 1;
    TH_TRY(th_tu_reshape(tr, x, yv->ndim, shape, &xx));
  } else if (xv->ndim < yv->ndim) {
    int lead = yv->ndim - xv->ndim;
    for (int i = 0; i < yv->ndim; i++) shape[i] = i < lead ? 1 : xv->shape[i - lead];
    TH_TRY(th_tu_reshape(tr, x, yv->ndim, shape, &xx));
  }
  int dd;
  TH_TRY(th_meta_canonical_dim(op, d, xx.u.value->ndim, &dd));
  th_arg l, r;
  TH_TRY(slice_ends(tr, xx, dd, &l, &r));
  return th_tu_call2(tr, TH_OP_ltorch_sub, r, l, dx);
}

static th_status trapz_common(th_trace *tr, const char *op, const char *name, const th_arg *args, bool cumulative,
                              th_arg *out) {
  const th_value *y = tensor0(args);
  int d = 0;
  TH_TRY(dim_of(op, &args[3], y, &d));
  const th_arg *x = &args[1], *dxa = &args[2];
  if (x->kind != TH_ARG_NONE && dxa->kind != TH_ARG_NONE)
    return th_error(TH_ERR_TYPE, "%s: %s() received both `x` and `dx`; pass only one", op, name);
  if (y->dtype == TH_BOOL || (th_meta_is_tensor(x) && x->u.value->dtype == TH_BOOL))
    return th_error(TH_ERR_RUNTIME, "%s: %s: received a bool input for `%s`, but bool is not supported", op, name,
                    y->dtype == TH_BOOL ? "y" : "x");
  th_arg yy = args[0], l, r, s, t;
  if (!cumulative && y->shape[d] == 0) { /* the integral over no samples is 0 (NumPy's behaviour) */
    int64_t shape[TH_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < y->ndim; i++)
      if (i != d) shape[k++] = y->shape[i];
    return th_tu_full(tr, k, shape, th_arg_int(0), y->device, y->dtype, out);
  }
  const int64_t sd[1] = {d};
  th_arg di[1];
  if (th_meta_is_tensor(x)) {
    th_arg dx;
    TH_TRY(spacing(tr, op, name, yy, *x, d, &dx));
    TH_TRY(slice_ends(tr, yy, d, &l, &r));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, l, r, &s));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, s, dx, &s));
    if (cumulative)
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_cumsum, s, th_arg_int(d), &s));
    else
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sum, s, th_tu_ints(di, 1, sd), &s));
    return th_tu_call2(tr, TH_OP_ltorch_true_divide, s, th_arg_float(2.0), out);
  }
  if (x->kind != TH_ARG_NONE) return th_error(TH_ERR_TYPE, "%s: expected x to be a Tensor", op);
  double dx = 1.0;
  if (dxa->kind != TH_ARG_NONE) {
    if (dxa->kind == TH_ARG_BOOL)
      return th_error(TH_ERR_RUNTIME, "%s: %s: Currently, we only support dx as a real number.", op, name);
    TH_TRY(th_tu_float(op, "dx", dxa, &dx));
  }
  if (cumulative) { /* (dx / 2 * (left + right)).cumsum(dim) */
    TH_TRY(slice_ends(tr, yy, d, &l, &r));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, l, r, &s));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, th_arg_float(dx / 2.0), s, &s));
    return th_tu_call2(tr, TH_OP_ltorch_cumsum, s, th_arg_int(d), out);
  }
  /* (y.sum(dim) - (y[0] + y[-1]) * 0.5) * dx */
  int64_t n = y->shape[d];
  const int64_t sq[1] = {d};
  th_arg f, e;
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sum, yy, th_tu_ints(di, 1, sd), &s));
  TH_TRY(th_tu_slice_in_dim(tr, yy, 0, 1, 1, d, &f));
  TH_TRY(th_tu_squeeze(tr, f, 1, sq, &f));
  TH_TRY(th_tu_slice_in_dim(tr, yy, n - 1, n, 1, d, &e));
  TH_TRY(th_tu_squeeze(tr, e, 1, sq, &e));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, f, e, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, t, th_arg_float(0.5), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, s, t, &s));
  return th_tu_call2(tr, TH_OP_ltorch_mul, s, th_arg_float(dx), out);
}

th_status ltorch_trapezoid_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return trapz_common(tr, sym->qualname, "trapezoid", args, false, out);
}

th_status ltorch_cumulative_trapezoid_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return trapz_common(tr, sym->qualname, "cumulative_trapezoid", args, true, out);
}

/* ---- repeat_interleave ------------------------------------------------------------------------------------------- */

/* The source index of each of the output_size outputs of a 1-D integer repeats tensor:
 * idx[j] = #{i : cumsum(repeats)[i] <= j}. */
static th_status interleave_index(th_trace *tr, th_arg reps, int64_t n, int64_t out_size, th_arg *out) {
  const th_value *rv = reps.u.value;
  th_arg cs = reps, io, cb, ib, mask;
  TH_TRY(th_tu_convert(tr, &cs, TH_I64));
  if (rv->ndim == 0 || (rv->shape[0] == 1 && n != 1)) { /* one count for every element */
    const int64_t shape[1] = {n};
    TH_TRY(th_tu_reshape(tr, cs, 0, shape, &cs));
    TH_TRY(th_tu_expand(tr, "ltorch.repeat_interleave", &cs, 1, shape));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_cumsum, cs, th_arg_int(0), &cs));
  const int64_t ms[2] = {out_size, n}, b0[1] = {0}, b1[1] = {1};
  th_arg t0[2], t1[1];
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, cs, th_tu_ints(t0, 2, ms), th_tu_ints(t1, 1, b1), &cb));
  TH_TRY(th_tu_iota(tr, out_size, 0, 1, rv->device, TH_I64, &io));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, io, th_tu_ints(t0, 2, ms), th_tu_ints(t1, 1, b0), &ib));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_le, cb, ib, &mask));
  TH_TRY(th_tu_convert(tr, &mask, TH_I64));
  const int64_t sd[1] = {1};
  return th_tu_call2(tr, TH_OP_prims_sum, mask, th_tu_ints(t1, 1, sd), out);
}

th_status ltorch_repeat_interleave_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_arg *reps = &args[1];
  bool has_size = args[3].kind != TH_ARG_NONE;
  int64_t out_size = -1;
  if (has_size) TH_TRY(th_meta_int(op, "output_size", &args[3], &out_size));
  if (reps->kind == TH_ARG_NONE) { /* repeat_interleave(repeats): the indices themselves */
    const th_value *rv = tensor0(args);
    if (rv->ndim != 1 || th_dtype_is_float(rv->dtype) || rv->dtype == TH_BOOL)
      return th_error(TH_ERR_RUNTIME, "%s: repeat_interleave only accept 1D vector as repeat", op);
    if (!has_size)
      return th_error(TH_ERR_NOT_IMPLEMENTED,
                      "%s: torch.repeat_interleave with a tensor `repeats` and no `output_size` is not supported (the "
                      "result's length depends on the tensor's values); pass output_size",
                      op);
    return interleave_index(tr, args[0], rv->shape[0], out_size, out);
  }
  th_arg x = args[0];
  const th_value *v = tensor0(args);
  int d = 0;
  if (args[2].kind == TH_ARG_NONE) {
    int64_t numel;
    th_meta_numel(v->shape, v->ndim, &numel);
    TH_TRY(th_tu_reshape(tr, x, 1, &numel, &x));
  } else {
    TH_TRY(dim_of(op, &args[2], v, &d));
    if (v->ndim == 0) {
      const int64_t one[1] = {1};
      TH_TRY(th_tu_reshape(tr, x, 1, one, &x));
    }
  }
  const th_value *xv = x.u.value;
  int64_t n = xv->shape[d];
  if (th_meta_is_tensor(reps)) {
    const th_value *rv = reps->u.value;
    if (th_dtype_is_float(rv->dtype) || rv->dtype == TH_BOOL)
      return th_error(TH_ERR_RUNTIME, "%s: repeats has to be Long or Int tensor", op);
    if (rv->ndim > 1) return th_error(TH_ERR_RUNTIME, "%s: repeats must be 0-dim or 1-dim tensor", op);
    if (rv->ndim == 1 && rv->shape[0] != 1 && rv->shape[0] != n)
      return th_error(TH_ERR_RUNTIME,
                      "%s: repeats must have the same size as input along dim, but got repeats.size(0) = %lld and "
                      "input.size(%d) = %lld",
                      op, (long long)rv->shape[0], d, (long long)n);
    if (!has_size)
      return th_error(TH_ERR_NOT_IMPLEMENTED,
                      "%s: torch.repeat_interleave with a tensor `repeats` and no `output_size` is not supported (the "
                      "result's length depends on the tensor's values); pass output_size",
                      op);
    th_arg idx;
    TH_TRY(interleave_index(tr, *reps, n, out_size, &idx));
    return th_tu_call3(tr, TH_OP_prims_take, x, idx, th_arg_int(d), out);
  }
  int64_t r;
  TH_TRY(th_meta_int(op, "repeats", reps, &r));
  if (r < 0) return th_error(TH_ERR_RUNTIME, "%s: repeats can not be negative", op);
  if (has_size && out_size != n * r)
    return th_error(TH_ERR_RUNTIME, "%s: allocated size does not match required size", op);
  if (xv->ndim + 1 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: tensors of rank %d are not supported (at most %d dimensions)", op,
                    xv->ndim + 1, TH_MAX_DIMS);
  int64_t big[TH_MAX_DIMS], bd[TH_MAX_DIMS], fin[TH_MAX_DIMS];
  for (int i = 0, k = 0; i < xv->ndim; i++) {
    bd[i] = k;
    big[k++] = xv->shape[i];
    if (i == d) big[k++] = r;
    fin[i] = i == d ? xv->shape[i] * r : xv->shape[i];
  }
  th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, x, th_tu_ints(si, xv->ndim + 1, big),
                     th_tu_ints(bi, xv->ndim, bd), &x));
  return th_tu_reshape(tr, x, xv->ndim, fin, out);
}
