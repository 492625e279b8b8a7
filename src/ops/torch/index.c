/* index.c — PyTorch's indexing ops at the torch level: gather, scatter (src / value, the legacy reduce=),
 * scatter_add, scatter_reduce, index_select, index_add, index_copy, index_fill, index_put, index_reduce,
 * take, take_along_dim, put, masked_scatter, select, select_scatter, slice_scatter, diagonal_scatter,
 * one_hot, embedding_bag, Tensor.new_zeros / new_ones / new_full / new_empty / new_tensor, searchsorted,
 * bucketize, tril_indices / triu_indices, and indexing itself: Tensor.__getitem__ (ltorch.getitem) and
 * the advanced-index assignment Tensor.__setitem__ records (ltorch.setitem_).
 *
 * They decompose into the indexing prims (prims/index.c) and prims.take:
 *   - the dim-wise index ops (index_copy, index_reduce) lay their 1-D index over the source's shape with
 *     broadcast_in_dim (a stride-0 view) and scatter along dim; index_fill is a where over a mask made by
 *     scattering True;
 *   - advanced indexing (tensor indices in any position, several broadcast together, Python lists of ints
 *     or bools, 0-dim integer tensors) wraps negative indices, linearizes the indexed dims into one
 *     (i0 * n1 + i1 ...), moves them first and gathers with prims.take; an out-of-range index becomes
 *     -1 so the kernel raises IndexError. As PyTorch, ints, slices and None apply first (basic
 *     indexing), and the broadcast index dims replace the indexed dims in place when those are adjacent
 *     in the basic-indexed tensor, else go first;
 *   - an assignment through advanced indices (index_put, put, x[idx] = v) gathers the linear index of
 *     every selected element out of an iota of x's positions with the same key, then scatters (or, with
 *     accumulate, index_adds) the broadcast values into x flattened: duplicates accumulate, or the last
 *     one wins;
 *   - a bool mask index gives a result whose length is the number of true values, unknown while
 *     tracing: getitem raises NotImplementedError for it; an assignment through one mask is a where (the
 *     values broadcast over the selected elements) or masked_scatter (one value row per true element).
 * Gradients come from the prims' rules. */
#include <string.h>

#include "ops/torch/torch_util.h"

static int64_t numel_of(const int64_t *shape, int ndim) {
  int64_t n;
  th_meta_numel(shape, ndim, &n);
  return n;
}

static th_status dim_of(const char *op, const th_arg *arg, int ndim, int *d) {
  int64_t dim;
  TH_TRY(th_meta_int(op, "dim", arg, &dim));
  return th_meta_canonical_dim(op, dim, ndim, d);
}

static th_status call4(th_trace *tr, th_op_id op, th_arg a, th_arg b, th_arg c, th_arg d, th_arg *out) {
  th_arg v[4] = {a, b, c, d};
  return th_call(tr, op, 4, v, out);
}

static th_status scatter_reduce_prim(th_trace *tr, th_arg a, th_arg index, th_arg src, int d, const char *reduce,
                                     bool include_self, th_arg *out) {
  th_arg v[6] = {a, index, src, th_arg_int(d), th_arg_str(reduce), th_arg_bool(include_self)};
  return th_call(tr, TH_OP_prims_scatter_reduce, 6, v, out);
}

static bool same_shape(const th_value *a, const th_value *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

/* where(idx < 0, idx + n, idx) in int64 */
static th_status wrap_negative(th_trace *tr, th_arg idx, int64_t n, th_arg *out) {
  th_arg neg, w;
  TH_TRY(th_tu_convert(tr, &idx, TH_I64));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_lt, idx, th_arg_int(0), &neg));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, idx, th_arg_int(n), &w));
  return th_tu_call3(tr, TH_OP_prims_where, neg, w, idx, out);
}

static th_status check_index_tensor(const char *op, const char *fn, const th_value *index) {
  if (index->dtype != TH_I64 && index->dtype != TH_I32)
    return th_error(TH_ERR_RUNTIME, "%s: %s(): Expected dtype int32/int64 for index", op, fn);
  return TH_OK;
}

/* prims.full of zeros (False for bool) */
static th_status zeros(th_trace *tr, int ndim, const int64_t *shape, th_device dev, th_dtype dt, th_arg *out) {
  return th_tu_full(tr, ndim, shape, dt == TH_BOOL ? th_arg_bool(false) : th_arg_int(0), dev, dt, out);
}

/* The value argument of a fill: a number converted to a's dtype's Python type, or a 0-dim tensor
 * converted to a's dtype (PyTorch's fills cast). */
static th_status fill_value(th_trace *tr, const char *op, const th_value *a, th_arg *v) {
  const th_value *t = th_meta_tensor(v);
  if (t && t->ndim != 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).", op,
                    t->ndim);
  return th_tu_convert(tr, v, a->dtype);
}

/* ---- gather / scatter family --------------------------------------------------------------------- */

/* index and src of scatter's rule: index's rank is a's (an empty index aside), src is sliced to index's
 * shape (the elements beyond it are not read). */
static th_status fit_src(th_trace *tr, const char *op, const th_value *index, th_arg *src) {
  const th_value *s = src->u.value;
  if (s->ndim != index->ndim && !(s->ndim <= 1 && index->ndim <= 1))
    return th_error(TH_ERR_RUNTIME, "%s: Index tensor must have the same number of dimensions as src tensor", op);
  for (int d = 0; d < index->ndim; d++) {
    if (index->shape[d] > s->shape[d]) {
      char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_RUNTIME,
                      "%s: Size does not match at dimension %d expected index %s to be no larger than src %s", op, d,
                      th_meta_shape_str(index->shape, index->ndim, b0, sizeof b0),
                      th_meta_shape_str(s->shape, s->ndim, b1, sizeof b1));
    }
    if (index->shape[d] < s->shape[d]) TH_TRY(th_tu_slice_in_dim(tr, *src, 0, index->shape[d], 1, d, src));
  }
  if (s->ndim != index->ndim) TH_TRY(th_tu_reshape(tr, *src, index->ndim, index->shape, src));
  return TH_OK;
}

static th_status scatter_prep(th_trace *tr, const char *op, const char *fn, const th_arg *args, int *d, th_arg *src) {
  const th_value *a = args[0].u.value, *index = th_meta_tensor(&args[2]);
  if (!index) return th_error(TH_ERR_TYPE, "%s: expected index to be a tensor", op);
  TH_TRY(check_index_tensor(op, fn, index));
  TH_TRY(dim_of(op, &args[1], a->ndim, d));
  if (th_meta_is_tensor(src)) {
    if (src->u.value->dtype != a->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: %s(): Expected self.dtype to be equal to src.dtype", op, fn);
    TH_TRY(fit_src(tr, op, index, src));
  }
  return TH_OK;
}

th_status ltorch_gather_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *index = th_meta_tensor(&args[2]);
  if (!index) return th_error(TH_ERR_TYPE, "%s: expected index to be a tensor", op);
  int d;
  TH_TRY(dim_of(op, &args[1], a->ndim, &d));
  if (th_value_numel(index) == 0) /* PyTorch returns an empty tensor of index's shape without checks */
    return zeros(tr, index->ndim, index->shape, a->device, a->dtype, out);
  TH_TRY(check_index_tensor(op, "gather", index));
  return th_tu_call3(tr, TH_OP_prims_take_along_axis, args[0], args[2], th_arg_int(d), out);
}

/* scatter(input, dim, index, src=None, *, value=None, reduce=None) */
th_status ltorch_scatter_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value;
  th_arg src = args[3].kind != TH_ARG_NONE ? args[3] : args[4];
  if (src.kind == TH_ARG_NONE) return th_error(TH_ERR_TYPE, "%s: scatter() missing the src or value argument", op);
  if (args[3].kind != TH_ARG_NONE && args[4].kind != TH_ARG_NONE)
    return th_error(TH_ERR_TYPE, "%s: scatter() got both src and value", op);
  int d;
  TH_TRY(scatter_prep(tr, op, "scatter", args, &d, &src));
  const th_value *index = args[2].u.value;
  if (!th_meta_is_tensor(&src)) TH_TRY(th_tu_convert(tr, &src, a->dtype));
  if (th_value_numel(index) == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
  if (args[5].kind == TH_ARG_NONE) return call4(tr, TH_OP_prims_scatter, args[0], args[2], src, th_arg_int(d), out);
  if (args[5].kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: expected reduce to be a str", op);
  const char *r = args[5].u.s;
  bool add = !strcmp(r, "add");
  if (!add && strcmp(r, "multiply"))
    return th_error(TH_ERR_RUNTIME, "%s: reduce argument must be either add or multiply.", op);
  if (!th_meta_is_tensor(&src)) /* value with reduce: a tensor of index's shape */
    TH_TRY(th_tu_full(tr, index->ndim, index->shape, src, a->device, a->dtype, &src));
  if (add) return call4(tr, TH_OP_prims_scatter_add, args[0], args[2], src, th_arg_int(d), out);
  return scatter_reduce_prim(tr, args[0], args[2], src, d, "prod", true, out);
}

th_status ltorch_scatter_add_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_arg src = args[3];
  if (!th_meta_is_tensor(&src)) return th_error(TH_ERR_TYPE, "%s: expected src to be a tensor", op);
  int d;
  TH_TRY(scatter_prep(tr, op, "scatter_add", args, &d, &src));
  if (th_value_numel(args[2].u.value) == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
  return call4(tr, TH_OP_prims_scatter_add, args[0], args[2], src, th_arg_int(d), out);
}

static th_status reduce_arg(const char *op, const th_arg *a, bool allow_sum, const char **r) {
  if (a->kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: expected reduce to be a str", op);
  *r = a->u.s;
  if ((allow_sum && !strcmp(*r, "sum")) || !strcmp(*r, "prod") || !strcmp(*r, "mean") || !strcmp(*r, "amax") ||
      !strcmp(*r, "amin"))
    return TH_OK;
  return th_error(TH_ERR_RUNTIME, "%s: reduce argument must be either %sprod, mean, amax or amin, got %s", op,
                  allow_sum ? "sum, " : "", *r);
}

/* scatter_reduce(input, dim, index, src, reduce, *, include_self=True) */
th_status ltorch_scatter_reduce_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname, *r;
  th_arg src = args[3];
  if (!th_meta_is_tensor(&src)) return th_error(TH_ERR_TYPE, "%s: expected src to be a tensor", op);
  TH_TRY(reduce_arg(op, &args[4], true, &r));
  bool incl;
  TH_TRY(th_tu_bool(op, "include_self", &args[5], &incl));
  int d;
  TH_TRY(scatter_prep(tr, op, "scatter_reduce", args, &d, &src));
  if (!strcmp(r, "mean") && args[0].u.value->dtype == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: \"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool'", op);
  if (th_value_numel(args[2].u.value) == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
  return scatter_reduce_prim(tr, args[0], args[2], src, d, r, incl, out);
}

/* ---- the dim-wise index ops ----------------------------------------------------------------------- */

/* The checks of index_add / index_copy / index_reduce (ATen's index_func_meta_impl): a 1-D (or 0-dim)
 * int64/int32 index, source of self's dtype and of self's shape with dim of the index's length. */
static th_status index_func_checks(const char *op, const char *fn, const th_value *a, int d, const th_value *index,
                                   const th_value *src) {
  if (index->ndim > 1) return th_error(TH_ERR_INDEX, "%s: %s(): Index is supposed to be a vector", op, fn);
  if (index->dtype != TH_I64 && index->dtype != TH_I32)
    return th_error(TH_ERR_RUNTIME, "%s: %s(): Expected dtype int32/int64 for index", op, fn);
  if (src->dtype != a->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: %s(): self (%s) and source (%s) must have the same scalar type", op, fn,
                    th_tu_scalar_type_name(a->dtype), th_tu_scalar_type_name(src->dtype));
  int64_t n = th_value_numel(index);
  int ra = a->ndim ? a->ndim : 1, rs = src->ndim ? src->ndim : 1;
  bool ok = ra == rs && (src->ndim ? src->shape[d] : 1) == n;
  for (int i = 0; ok && i < a->ndim; i++)
    if (i != d && src->shape[i] != a->shape[i]) ok = false;
  if (!ok)
    return th_error(TH_ERR_RUNTIME,
                    "%s: %s(): Number of indices (%lld) should be equal to source.size(dim) and source should have "
                    "self's shape apart from dim",
                    op, fn, (long long)n);
  return TH_OK;
}

/* The 1-D index laid over src's shape along dim d (a view; a 0-dim src takes a 0-dim index). */
static th_status expand_index(th_trace *tr, th_arg index, const th_value *src, int d, th_arg *out) {
  if (src->ndim == 0) return th_tu_reshape(tr, index, 0, NULL, out);
  const th_value *iv = index.u.value;
  if (iv->ndim == 0) {
    int64_t one = 1;
    TH_TRY(th_tu_reshape(tr, index, 1, &one, &index));
  }
  int64_t bd = d;
  th_arg si[TH_MAX_DIMS], bi[1];
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, index, th_tu_ints(si, src->ndim, src->shape),
                     th_tu_ints(bi, 1, &bd), out);
}

th_status ltorch_index_select_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *index = th_meta_tensor(&args[2]);
  if (!index) return th_error(TH_ERR_TYPE, "%s: expected index to be a tensor", op);
  int d;
  TH_TRY(dim_of(op, &args[1], a->ndim, &d));
  if (index->ndim > 1) return th_error(TH_ERR_INDEX, "%s: index_select(): Index is supposed to be a vector", op);
  if (index->dtype != TH_I64 && index->dtype != TH_I32)
    return th_error(TH_ERR_RUNTIME, "%s: index_select(): Expected dtype int32 or int64 for index", op);
  return th_tu_call3(tr, TH_OP_prims_take, args[0], args[2], th_arg_int(d), out);
}

/* index_add(input, dim, index, source, *, alpha=1) */
th_status ltorch_index_add_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *index = args[2].u.value, *src = args[3].u.value;
  int d;
  TH_TRY(dim_of(op, &args[1], a->ndim, &d));
  TH_TRY(index_func_checks(op, "index_add_", a, d, index, src));
  th_arg s = args[3];
  if (args[4].kind != TH_ARG_NONE) {
    double alpha;
    TH_TRY(th_tu_float(op, "alpha", &args[4], &alpha));
    if (th_meta_number_type(&args[4]) == TH_F64 && !th_dtype_is_float(a->dtype))
      return th_error(TH_ERR_RUNTIME,
                      "%s: For integral input tensors, argument alpha must not be a floating point number.", op);
    if (alpha != 1.0) {
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, s, args[4], &s));
      TH_TRY(th_tu_convert(tr, &s, a->dtype));
    }
  }
  if (th_value_numel(index) == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
  return call4(tr, TH_OP_prims_index_add, args[0], args[2], s, th_arg_int(d), out);
}

th_status ltorch_index_copy_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *index = args[2].u.value, *src = args[3].u.value;
  int d;
  TH_TRY(dim_of(op, &args[1], a->ndim, &d));
  TH_TRY(index_func_checks(op, "index_copy_", a, d, index, src));
  if (th_value_numel(index) == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
  th_arg ie;
  TH_TRY(expand_index(tr, args[2], src, d, &ie));
  return call4(tr, TH_OP_prims_scatter, args[0], ie, args[3], th_arg_int(d), out);
}

/* index_reduce(input, dim, index, source, reduce, *, include_self=True) */
th_status ltorch_index_reduce_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname, *r;
  const th_value *a = args[0].u.value, *index = args[2].u.value, *src = args[3].u.value;
  int d;
  TH_TRY(dim_of(op, &args[1], a->ndim, &d));
  TH_TRY(reduce_arg(op, &args[4], false, &r));
  bool incl;
  TH_TRY(th_tu_bool(op, "include_self", &args[5], &incl));
  TH_TRY(index_func_checks(op, "index_reduce_", a, d, index, src));
  if (th_value_numel(index) == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
  th_arg ie;
  TH_TRY(expand_index(tr, args[2], src, d, &ie));
  return scatter_reduce_prim(tr, args[0], ie, args[3], d, r, incl, out);
}

/* The bool mask of a's positions along dim d named by the 1-D index (negative indices wrapped), laid
 * over a's shape. */
static th_status dim_mask(th_trace *tr, const th_value *a, int d, th_arg index, th_arg *out) {
  int64_t n = a->ndim ? a->shape[d] : 1;
  th_arg idx, z, m;
  TH_TRY(wrap_negative(tr, index, n, &idx));
  if (idx.u.value->ndim == 0) {
    int64_t one = 1;
    TH_TRY(th_tu_reshape(tr, idx, 1, &one, &idx));
  }
  TH_TRY(th_tu_full(tr, 1, &n, th_arg_bool(false), a->device, TH_BOOL, &z));
  TH_TRY(call4(tr, TH_OP_prims_scatter, z, idx, th_arg_bool(true), th_arg_int(0), &m));
  if (a->ndim == 0) return th_tu_reshape(tr, m, 0, NULL, out);
  int64_t bd = d;
  th_arg si[TH_MAX_DIMS], bi[1];
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, m, th_tu_ints(si, a->ndim, a->shape), th_tu_ints(bi, 1, &bd),
                     out);
}

/* index_fill(input, dim, index, value) */
th_status ltorch_index_fill_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *index = th_meta_tensor(&args[2]);
  int d;
  TH_TRY(dim_of(op, &args[1], a->ndim, &d));
  if (!index || index->ndim > 1)
    return th_error(TH_ERR_INDEX, "%s: index_fill_(): Index is supposed to be a vector", op);
  if (index->dtype != TH_I64) return th_error(TH_ERR_RUNTIME, "%s: index_fill_(): Expected dtype int64 for index.", op);
  th_arg v = args[3], m;
  TH_TRY(fill_value(tr, op, a, &v));
  if (th_value_numel(index) == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
  TH_TRY(dim_mask(tr, a, d, args[2], &m));
  if (th_meta_is_tensor(&v)) TH_TRY(th_tu_expand(tr, op, &v, a->ndim, a->shape));
  return th_tu_call3(tr, TH_OP_ltorch_where, m, v, args[0], out);
}

/* ---- advanced indexing ------------------------------------------------------------------------------ */

#define TH_MAX_KEY (2 * TH_MAX_DIMS + 2)

/* A constant index tensor from a (nested, rectangular) Python list of ints: runs of equal steps become
 * prims.iota, single values prims.full, joined with prims.cat, reshaped to the nesting's shape. */
static th_status seq_dims(const char *op, const th_arg *s, int *nd, int64_t *shape, int depth) {
  bool seq = s->kind == TH_ARG_LIST || s->kind == TH_ARG_TUPLE;
  if (!seq) {
    if (depth > *nd) *nd = depth;
    return TH_OK;
  }
  if (depth >= TH_MAX_DIMS) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: index lists nested too deeply", op);
  if (*nd > depth && shape[depth] != s->u.seq.n)
    return th_error(TH_ERR_VALUE, "%s: an index list must be rectangular", op);
  shape[depth] = s->u.seq.n;
  if (*nd < depth + 1) *nd = depth + 1;
  for (int i = 0; i < s->u.seq.n; i++) TH_TRY(seq_dims(op, &s->u.seq.items[i], nd, shape, depth + 1));
  return TH_OK;
}

static th_status seq_flatten(const char *op, const th_arg *s, int64_t *vals, int64_t *n, int64_t cap, bool *all_bool) {
  if (s->kind == TH_ARG_LIST || s->kind == TH_ARG_TUPLE) {
    for (int i = 0; i < s->u.seq.n; i++) TH_TRY(seq_flatten(op, &s->u.seq.items[i], vals, n, cap, all_bool));
    return TH_OK;
  }
  int64_t v;
  if (s->kind == TH_ARG_BOOL) {
    v = s->u.b;
  } else {
    *all_bool = false;
    if (s->kind == TH_ARG_VALUE && th_value_is_tensor(s->u.value))
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: a list of tensors as an index is not supported; use torch.stack",
                      op);
    if (s->kind != TH_ARG_INT && !(s->kind == TH_ARG_VALUE && th_meta_number_value(s, NULL, &v)))
      return th_error(TH_ERR_INDEX,
                      "%s: only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
                      "indices (got %s)",
                      op, th_arg_kind_name(s));
    if (s->kind == TH_ARG_INT) v = s->u.i;
  }
  if (*n >= cap)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: index lists of more than %lld entries", op, (long long)cap);
  vals[(*n)++] = v;
  return TH_OK;
}

static th_status const_index(th_trace *tr, const char *op, int n, const int64_t *vals, int nd, const int64_t *shape,
                             th_device dev, th_arg *out) {
  if (n == 0) {
    int64_t z = 0;
    TH_TRY(zeros(tr, 1, &z, dev, TH_I64, out));
  } else {
    th_arg *pieces = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)n);
    if (!pieces) return th_error(TH_ERR_NOMEM, "out of memory");
    int np = 0;
    for (int i = 0; i < n;) {
      int j = i + 1;
      if (j < n) {
        int64_t step = vals[j] - vals[i];
        while (j + 1 < n && vals[j + 1] - vals[j] == step) j++;
        j++;
      }
      int64_t len = j - i, one = 1;
      if (len == 1)
        TH_TRY(th_tu_full(tr, 1, &one, th_arg_int(vals[i]), dev, TH_I64, &pieces[np++]));
      else
        TH_TRY(th_tu_iota(tr, len, vals[i], vals[i + 1] - vals[i], dev, TH_I64, &pieces[np++]));
      i = j;
    }
    if (np == 1)
      *out = pieces[0];
    else
      TH_TRY(th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(np, pieces), th_arg_int(0), out));
  }
  (void)op;
  return th_tu_reshape(tr, *out, nd, shape, out);
}

/* A Python sequence index as a constant int64 tensor: a list of bools selects the true positions. */
static th_status seq_index(th_trace *tr, const char *op, const th_arg *s, th_device dev, th_arg *out) {
  int nd = 0;
  int64_t shape[TH_MAX_DIMS];
  TH_TRY(seq_dims(op, s, &nd, shape, 0));
  int64_t cap = numel_of(shape, nd);
  if (cap > (1 << 20)) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: index lists of more than 2^20 entries", op);
  int64_t *vals = th_arena_alloc(tr->arena, sizeof(int64_t) * (size_t)(cap ? cap : 1));
  if (!vals) return th_error(TH_ERR_NOMEM, "out of memory");
  int64_t n = 0;
  bool all_bool = cap > 0;
  TH_TRY(seq_flatten(op, s, vals, &n, cap ? cap : 1, &all_bool));
  if (all_bool) {
    if (nd != 1) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: a nested list of bools as an index is not supported", op);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
      if (vals[i]) vals[k++] = i;
    n = k;
    shape[0] = k;
  }
  return const_index(tr, op, (int)n, vals, nd, shape, dev, out);
}

/* The state of an advanced index over tensor a: m index tensors at dims[0..m) (ascending), broadcast
 * to B; lin: the int64 linear index into the indexed dims (-1 where out of range), flattened to
 * (numel(B),); af: a with the indexed dims first and merged (N, rest...). */
typedef struct adv_index {
  int m, nb;
  int dims[TH_MAX_DIMS];
  int64_t bshape[TH_MAX_DIMS];
  bool adjacent;
  int64_t perm[TH_MAX_DIMS];
  int64_t pshape[TH_MAX_DIMS]; /* a's shape permuted */
  th_arg lin, af;
} adv_index;

static th_status adv_prepare(th_trace *tr, const char *op, th_arg a, int m, const int *dims, th_arg *idx,
                             adv_index *st) {
  const th_value *v = a.u.value;
  st->m = m;
  for (int j = 0; j < m; j++) {
    const th_value *iv = idx[j].u.value;
    if (iv->dtype == TH_BOOL || iv->dtype == TH_U8)
      return th_error(TH_ERR_NOT_IMPLEMENTED,
                      "%s: indexing with a bool (or uint8) mask tensor is not supported: the result's shape "
                      "depends on the number of true values. Use torch.where(mask, x, y) or multiply by the mask "
                      "instead",
                      op);
    if (!th_dtype_is_integer(iv->dtype))
      return th_error(TH_ERR_INDEX, "%s: tensors used as indices must be long, int, byte or bool tensors", op);
    st->dims[j] = dims[j];
  }
  /* the broadcast shape of the indices */
  int nb;
  TH_TRY(th_tu_broadcast_shape(op, m, idx, &nb, st->bshape));
  st->nb = nb;
  st->adjacent = true;
  for (int j = 1; j < m; j++) st->adjacent &= dims[j] == dims[j - 1] + 1;
  int64_t nidx = numel_of(st->bshape, nb), one = 1;
  th_arg lin = th_arg_none(), valid = th_arg_none();
  int64_t N = 1;
  for (int j = 0; j < m; j++) {
    int64_t n = v->shape[dims[j]];
    th_arg w, ok, ok2;
    TH_TRY(wrap_negative(tr, idx[j], n, &w));
    TH_TRY(th_tu_expand(tr, op, &w, nb, st->bshape));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_ge, w, th_arg_int(0), &ok));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_lt, w, th_arg_int(n), &ok2));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_bitwise_and, ok, ok2, &ok));
    if (j == 0) {
      lin = w;
      valid = ok;
    } else {
      TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, lin, th_arg_int(n), &lin));
      TH_TRY(th_tu_call2(tr, TH_OP_prims_add, lin, w, &lin));
      TH_TRY(th_tu_call2(tr, TH_OP_prims_bitwise_and, valid, ok, &valid));
    }
    N *= n;
  }
  if (m > 1) TH_TRY(th_tu_call3(tr, TH_OP_prims_where, valid, lin, th_arg_int(-1), &lin));
  TH_TRY(th_tu_reshape(tr, lin, 1, nidx >= 0 ? &nidx : &one, &st->lin));
  /* a with the indexed dims first, merged */
  int k = 0;
  bool indexed[TH_MAX_DIMS] = {false};
  for (int j = 0; j < m; j++) {
    st->perm[k++] = dims[j];
    indexed[dims[j]] = true;
  }
  for (int d = 0; d < v->ndim; d++)
    if (!indexed[d]) st->perm[k++] = d;
  for (int d = 0; d < v->ndim; d++) st->pshape[d] = v->shape[st->perm[d]];
  th_arg ap;
  TH_TRY(th_tu_transpose(tr, a, st->perm, &ap));
  int64_t fshape[TH_MAX_DIMS];
  fshape[0] = N;
  for (int d = m; d < v->ndim; d++) fshape[d - m + 1] = st->pshape[d];
  return th_tu_reshape(tr, ap, v->ndim - m + 1, fshape, &st->af);
}

/* The permutation taking (B..., rest...) to the result's order (identity unless adjacent with leading
 * dims before the index). */
static void adv_result_perm(const adv_index *st, int rank, int64_t *perm) {
  int lead = st->adjacent ? st->dims[0] : 0, n = 0;
  /* result dim r comes from (B, rest) dim: leading rest dims, then B, then the other rest dims */
  for (int r = 0; r < lead; r++) perm[n++] = st->nb + r;
  for (int i = 0; i < st->nb; i++) perm[n++] = i;
  for (int r = st->nb + lead; r < rank; r++) perm[n++] = r;
}

static th_status adv_gather(th_trace *tr, const char *op, th_arg a, int m, const int *dims, th_arg *idx, th_arg *out) {
  const th_value *v = a.u.value;
  adv_index st;
  TH_TRY(adv_prepare(tr, op, a, m, dims, idx, &st));
  if (st.nb + v->ndim - m > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: the indexing result has more than %d dimensions", op, TH_MAX_DIMS);
  th_arg r;
  TH_TRY(th_tu_call3(tr, TH_OP_prims_take, st.af, st.lin, th_arg_int(0), &r));
  int64_t bshape[TH_MAX_DIMS], perm[TH_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < st.nb; i++) bshape[n++] = st.bshape[i];
  for (int d = m; d < v->ndim; d++) bshape[n++] = st.pshape[d];
  TH_TRY(th_tu_reshape(tr, r, n, bshape, &r));
  adv_result_perm(&st, n, perm);
  return th_tu_transpose(tr, r, perm, out);
}

static bool is_full_slice(const th_arg *k) {
  return k->kind == TH_ARG_SLICE && !k->u.slice.has_start && !k->u.slice.has_stop &&
         (!k->u.slice.has_step || k->u.slice.step == 1);
}

static th_arg full_slice(void) {
  th_arg s = th_arg_none();
  s.kind = TH_ARG_SLICE;
  return s;
}

static bool is_index_number(const th_arg *k) {
  return k->kind == TH_ARG_INT || (k->kind == TH_ARG_VALUE && !k->u.value->is_tensor && k->u.value->dtype == TH_I64);
}

/* Basic indexing of a with key entries that are ints, slices or None (n entries). */
static th_status basic_indexing(th_trace *tr, const char *op, th_arg a, int n, const th_arg *key, th_arg *out) {
  const th_value *v = a.u.value;
  int nnone = 0;
  for (int i = 0; i < n; i++) nnone += key[i].kind == TH_ARG_NONE;
  if (nnone) { /* None entries: unsqueeze at their positions (each key entry is one dim of the result) */
    int rank = v->ndim + nnone;
    if (rank > TH_MAX_DIMS)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: tensors of rank %d are not supported (at most %d dimensions)", op,
                      rank, TH_MAX_DIMS);
    int64_t shape[TH_MAX_DIMS], bdims[TH_MAX_DIMS];
    int src = 0;
    for (int i = 0; i < rank; i++) {
      if (i < n && key[i].kind == TH_ARG_NONE) {
        shape[i] = 1;
      } else {
        shape[i] = v->shape[src];
        bdims[src++] = i;
      }
    }
    th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, a, th_tu_ints(si, rank, shape), th_tu_ints(bi, v->ndim, bdims),
                       &a));
    v = a.u.value;
  }
  int64_t lo[TH_MAX_DIMS], hi[TH_MAX_DIMS], st[TH_MAX_DIMS], sq[TH_MAX_DIMS];
  int nsq = 0;
  for (int d = 0; d < v->ndim; d++) {
    int64_t len = v->shape[d];
    lo[d] = 0;
    hi[d] = len;
    st[d] = 1;
    if (d >= n || key[d].kind == TH_ARG_NONE) continue;
    const th_arg *k = &key[d];
    if (k->kind == TH_ARG_SLICE) {
      int64_t step = k->u.slice.has_step ? k->u.slice.step : 1;
      if (step <= 0) return th_error(TH_ERR_VALUE, "%s: step must be greater than zero", op);
      int64_t s = k->u.slice.has_start ? k->u.slice.start : 0, e = k->u.slice.has_stop ? k->u.slice.stop : len;
      if (s < 0) s += len;
      if (s < 0) s = 0;
      if (s > len) s = len;
      if (e < 0) e += len;
      if (e < 0) e = 0;
      if (e > len) e = len;
      if (e < s) e = s;
      lo[d] = s;
      hi[d] = e;
      st[d] = step;
    } else {
      int64_t idx;
      TH_TRY(th_meta_int(op, "index", k, &idx));
      if (idx < -len || idx >= len)
        return th_error(TH_ERR_INDEX, "%s: index %lld is out of bounds for dimension %d with size %lld", op,
                        (long long)idx, d, (long long)len);
      if (idx < 0) idx += len;
      lo[d] = idx;
      hi[d] = idx + 1;
      sq[nsq++] = d;
    }
  }
  bool needs_slice = false;
  for (int d = 0; d < v->ndim; d++) needs_slice |= lo[d] != 0 || hi[d] != v->shape[d] || st[d] != 1;
  if (needs_slice) {
    th_arg li[TH_MAX_DIMS], hi_i[TH_MAX_DIMS], si[TH_MAX_DIMS];
    th_arg sargs[4] = {a, th_tu_ints(li, v->ndim, lo), th_tu_ints(hi_i, v->ndim, hi), th_tu_ints(si, v->ndim, st)};
    TH_TRY(th_call(tr, TH_OP_prims_slice_prim, 4, sargs, &a));
  }
  return th_tu_squeeze(tr, a, nsq, sq, out);
}

/* PyTorch's treatSequenceAsTuple: a list key holding a sequence, slice, Ellipsis or None is a tuple of
 * indices; any other list (and a tensor, an int) is one index. */
static bool list_is_tuple(const th_arg *key) {
  for (int i = 0; i < key->u.seq.n; i++) {
    th_arg_kind k = key->u.seq.items[i].kind;
    if (k == TH_ARG_LIST || k == TH_ARG_TUPLE || k == TH_ARG_SLICE || k == TH_ARG_ELLIPSIS || k == TH_ARG_NONE ||
        (k == TH_ARG_VALUE && th_value_is_tensor(key->u.seq.items[i].u.value)))
      return true;
  }
  return false;
}

/* getitem of tensor a with `key` (any Python index). */
static th_status getitem(th_trace *tr, const char *op, th_arg a0, const th_arg *keyarg, th_arg *out) {
  const th_value *v = a0.u.value;
  const th_arg *raw = keyarg;
  int nraw = 1;
  if (keyarg->kind == TH_ARG_TUPLE || (keyarg->kind == TH_ARG_LIST && list_is_tuple(keyarg))) {
    raw = keyarg->u.seq.items;
    nraw = keyarg->u.seq.n;
  }
  if (nraw > TH_MAX_KEY) return th_error(TH_ERR_INDEX, "%s: too many indices for tensor of dimension %d", op, v->ndim);
  /* the entries as ints, slices, None, Ellipsis or tensors (lists become constant index tensors) */
  th_arg keys[TH_MAX_KEY];
  int indexing = 0, nell = 0;
  for (int i = 0; i < nraw; i++) {
    th_arg k = raw[i];
    if (k.kind == TH_ARG_LIST || k.kind == TH_ARG_TUPLE) TH_TRY(seq_index(tr, op, &k, v->device, &k));
    if (k.kind == TH_ARG_ELLIPSIS) {
      if (++nell > 1) return th_error(TH_ERR_INDEX, "%s: an index can only have a single ellipsis ('...')", op);
    } else if (k.kind == TH_ARG_NONE || k.kind == TH_ARG_BOOL) {
    } else if (th_meta_is_tensor(&k)) {
      const th_value *kv = k.u.value;
      indexing += (kv->dtype == TH_BOOL || kv->dtype == TH_U8) ? (kv->ndim ? kv->ndim : 0) : 1;
      if ((kv->dtype == TH_BOOL || kv->dtype == TH_U8) && kv->ndim == 0)
        return th_error(TH_ERR_NOT_IMPLEMENTED,
                        "%s: indexing with a 0-dim bool tensor is not supported: the result's shape depends on its "
                        "value; index with the Python bool instead",
                        op);
    } else if (k.kind == TH_ARG_SLICE || is_index_number(&k)) {
      indexing++;
    } else {
      return th_error(TH_ERR_INDEX,
                      "%s: only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
                      "indices (got %s)",
                      op, th_arg_kind_name(&k));
    }
    keys[i] = k;
  }
  if (indexing > v->ndim) return th_error(TH_ERR_INDEX, "%s: too many indices for tensor of dimension %d", op, v->ndim);
  /* expand the Ellipsis into full slices; tensors become full slices of the basic part, remembered with
   * the dim they index in the basic-indexed tensor (na counts its dims) */
  th_arg basic[TH_MAX_KEY + TH_MAX_DIMS], advs[TH_MAX_DIMS];
  int nb = 0, na = 0, nadv = 0, adv_dims[TH_MAX_DIMS], empty_dims[TH_MAX_KEY], nempty = 0;
  for (int i = 0; i < nraw; i++) {
    const th_arg *k = &keys[i];
    if (k->kind == TH_ARG_ELLIPSIS) {
      for (int j = 0; j < v->ndim - indexing; j++) {
        basic[nb++] = full_slice();
        na++;
      }
    } else if (is_index_number(k)) {
      basic[nb++] = *k;                  /* removes a dim */
    } else if (k->kind == TH_ARG_BOOL) { /* a new dim of length 1 (True) or 0 (False) */
      if (!k->u.b) empty_dims[nempty++] = na;
      basic[nb++] = th_arg_none();
      na++;
    } else if (th_meta_is_tensor(k)) {
      basic[nb++] = full_slice();
      adv_dims[nadv] = na;
      advs[nadv++] = *k;
      na++;
    } else { /* slice or None */
      basic[nb++] = *k;
      na++;
    }
  }
  bool have_basic = false;
  for (int i = 0; i < nb; i++) have_basic |= !is_full_slice(&basic[i]);
  th_arg a = a0;
  if (have_basic) TH_TRY(basic_indexing(tr, op, a, nb, basic, &a));
  for (int i = 0; i < nempty; i++) TH_TRY(th_tu_slice_in_dim(tr, a, 0, 0, 1, empty_dims[i], &a));
  if (nadv) TH_TRY(adv_gather(tr, op, a, nadv, adv_dims, advs, &a));
  if (a.kind == TH_ARG_VALUE && a.u.value == a0.u.value) return th_tu_call1(tr, TH_OP_prims_shallow_copy, a0, out);
  *out = a;
  return TH_OK;
}

th_status ltorch_getitem_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return getitem(tr, sym->qualname, args[0], &args[1], out);
}

/* ---- assignment through an index (index_put, put, x[key] = v) ------------------------------------------- */

static bool is_mask(const th_arg *k) {
  return th_meta_is_tensor(k) && (k->u.value->dtype == TH_BOOL || k->u.value->dtype == TH_U8);
}

/* The bool mask of a key made of one bool tensor with full slices and an Ellipsis around it, and the dim
 * it starts at; *found false when the key has no bool tensor. */
static th_status find_mask(const char *op, const th_value *v, int n, const th_arg *keys, th_arg *mask, int *at,
                           bool *found) {
  int nmask = 0, nfull = 0;
  *found = false;
  for (int i = 0; i < n; i++) {
    if (is_mask(&keys[i])) {
      nmask++;
      *mask = keys[i];
    } else if (is_full_slice(&keys[i])) {
      nfull++;
    }
  }
  if (!nmask) return TH_OK;
  for (int i = 0; i < n; i++)
    if (!is_mask(&keys[i]) && !is_full_slice(&keys[i]) && keys[i].kind != TH_ARG_ELLIPSIS)
      return th_error(TH_ERR_NOT_IMPLEMENTED,
                      "%s: assigning through a bool mask index combined with other indices (other than full slices "
                      "and ...) is not supported",
                      op);
  if (nmask > 1)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: assigning through more than one bool mask index is not supported", op);
  const th_value *mv = mask->u.value;
  int used = nfull + mv->ndim, pos = 0;
  if (used > v->ndim) return th_error(TH_ERR_INDEX, "%s: too many indices for tensor of dimension %d", op, v->ndim);
  for (int i = 0; i < n && !is_mask(&keys[i]); i++) pos += keys[i].kind == TH_ARG_ELLIPSIS ? v->ndim - used : 1;
  for (int j = 0; j < mv->ndim; j++)
    if (mv->shape[j] != v->shape[pos + j])
      return th_error(TH_ERR_INDEX,
                      "%s: The shape of the mask [%lld] at index %d does not match the shape of the indexed tensor "
                      "[%lld] at index %d",
                      op, (long long)mv->shape[j], j, (long long)v->shape[pos + j], pos + j);
  *at = pos;
  *found = true;
  return TH_OK;
}

/* a with the elements selected by a bool mask (at dims [at, at + mask.ndim)) set to (or, accumulate,
 * increased by) values. */
static th_status mask_put(th_trace *tr, const char *op, th_arg a, th_arg mask, int at, th_arg values, bool accumulate,
                          th_arg *out) {
  const th_value *v = a.u.value, *mv = mask.u.value;
  int k = mv->ndim, npost = v->ndim - at - k;
  th_arg mb;
  if (mv->dtype != TH_BOOL) TH_TRY(th_tu_convert(tr, &mask, TH_BOOL));
  {
    int64_t bd[TH_MAX_DIMS];
    for (int j = 0; j < k; j++) bd[j] = at + j;
    th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, mask, th_tu_ints(si, v->ndim, v->shape), th_tu_ints(bi, k, bd),
                       &mb));
  }
  const th_value *vv = values.u.value;
  /* the values' dim at the selected-elements position (right-aligned over (pre..., nnz, post...)) */
  int vpos = vv->ndim - npost - 1;
  if (vpos < 0 || vv->shape[vpos] == 1) {
    /* one value per position of the post dims (and pre dims): broadcast over the mask */
    th_arg x = values;
    if (vpos >= 0) {
      int64_t sq = vpos;
      TH_TRY(th_tu_squeeze(tr, x, 1, &sq, &x));
    }
    const th_value *xv = x.u.value;
    /* x's dims map to a's dims: the last npost to the post dims, the others right-aligned to the pre dims */
    int64_t bd[TH_MAX_DIMS];
    int npre_x = xv->ndim - (vpos >= 0 ? npost : xv->ndim);
    if (npre_x > at) return th_error(TH_ERR_RUNTIME, "%s: shape mismatch: value tensor cannot be broadcast", op);
    for (int j = 0; j < xv->ndim; j++) bd[j] = j < npre_x ? at - npre_x + j : v->ndim - (xv->ndim - j);
    for (int j = 0; j < xv->ndim; j++)
      if (xv->shape[j] != 1 && xv->shape[j] != v->shape[bd[j]])
        return th_error(TH_ERR_RUNTIME, "%s: shape mismatch: value tensor of shape %s cannot be broadcast", op, "");
    /* size-1 dims broadcast: broadcast_in_dim needs equal or 1 */
    th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, x, th_tu_ints(si, v->ndim, v->shape),
                       th_tu_ints(bi, xv->ndim, bd), &x));
    if (accumulate) {
      th_arg z;
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, mb, x, th_arg_int(0), &z));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, a, z, out));
      return th_tu_convert(tr, out, v->dtype);
    }
    return th_tu_call3(tr, TH_OP_ltorch_where, mb, x, a, out);
  }
  /* one value row per selected element: masked_scatter in row-major order (the mask must lead) */
  if (at != 0)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: assigning one value per selected element through a bool mask that does not index the "
                    "leading dims is not supported",
                    op);
  int64_t shape[TH_MAX_DIMS];
  shape[0] = vv->shape[vpos];
  for (int j = 0; j < npost; j++) shape[1 + j] = v->shape[k + j];
  th_arg x = values;
  TH_TRY(th_tu_expand(tr, op, &x, 1 + npost, shape));
  if (!accumulate) return th_tu_call3(tr, TH_OP_prims_masked_scatter, a, mb, x, out);
  th_arg z, s;
  TH_TRY(zeros(tr, v->ndim, v->shape, v->device, v->dtype, &z));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_masked_scatter, z, mb, x, &s));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, a, s, out));
  return th_tu_convert(tr, out, v->dtype);
}

/* values broadcast to the shape of the selection they are written to (PyTorch's "shape mismatch" when
 * they do not; leading 1s may go). */
static th_status broadcast_values(th_trace *tr, const char *op, th_arg *x, int nd, const int64_t *shape) {
  /* values broadcast to the selection's shape (PyTorch's "shape mismatch" when they do not) */
  const th_value *xv = x->u.value;
  if (xv->ndim > nd) { /* leading 1s may go */
    int lead = xv->ndim - nd;
    for (int j = 0; j < lead; j++)
      if (xv->shape[j] != 1) {
        char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
        return th_error(TH_ERR_RUNTIME,
                        "%s: shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of "
                        "shape %s",
                        op, th_meta_shape_str(xv->shape, xv->ndim, b0, sizeof b0),
                        th_meta_shape_str(shape, nd, b1, sizeof b1));
      }
    TH_TRY(th_tu_reshape(tr, *x, nd, xv->shape + lead, x));
    xv = x->u.value;
  }
  for (int j = 0; j < xv->ndim; j++) {
    int64_t e = xv->shape[xv->ndim - 1 - j], s = shape[nd - 1 - j];
    if (e != 1 && e != s) {
      char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_RUNTIME,
                      "%s: shape mismatch: value tensor of shape %s cannot be broadcast to indexing result of "
                      "shape %s",
                      op, th_meta_shape_str(xv->shape, xv->ndim, b0, sizeof b0),
                      th_meta_shape_str(shape, nd, b1, sizeof b1));
    }
  }
  return th_tu_expand(tr, op, x, nd, shape);
}

/* a[idx] = values (accumulate: +=) for a key of m integer index tensors at dims[] and full slices: the
 * values laid out as (B..., rest...) and scattered (index_added) into a with the indexed dims merged first. */
static th_status adv_put(th_trace *tr, const char *op, th_arg a, int m, const int *dims, th_arg *idx, th_arg values,
                         bool accumulate, th_arg *out) {
  const th_value *v = a.u.value;
  adv_index st;
  TH_TRY(adv_prepare(tr, op, a, m, dims, idx, &st));
  int64_t bshape[TH_MAX_DIMS], perm[TH_MAX_DIMS], inv[TH_MAX_DIMS], rshape[TH_MAX_DIMS];
  int n = 0;
  if (st.nb + v->ndim - m > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: the indexing result has more than %d dimensions", op, TH_MAX_DIMS);
  for (int i = 0; i < st.nb; i++) bshape[n++] = st.bshape[i];
  for (int d = m; d < v->ndim; d++) bshape[n++] = st.pshape[d];
  adv_result_perm(&st, n, perm);
  for (int r = 0; r < n; r++) rshape[r] = bshape[perm[r]], inv[perm[r]] = r;
  th_arg x = values, r;
  TH_TRY(broadcast_values(tr, op, &x, n, rshape));
  int64_t k = numel_of(st.bshape, st.nb);
  if (k == 0 || th_value_numel(v) == 0) return th_tu_call1(tr, TH_OP_prims_clone, a, out);
  TH_TRY(th_tu_transpose(tr, x, inv, &x));
  int64_t vshape[TH_MAX_DIMS];
  vshape[0] = k;
  for (int d = m; d < v->ndim; d++) vshape[d - m + 1] = st.pshape[d];
  int vn = v->ndim - m + 1;
  TH_TRY(th_tu_reshape(tr, x, vn, vshape, &x));
  if (accumulate) {
    TH_TRY(call4(tr, TH_OP_prims_index_add, st.af, st.lin, x, th_arg_int(0), &r));
  } else {
    th_arg ie;
    TH_TRY(expand_index(tr, st.lin, x.u.value, 0, &ie));
    TH_TRY(call4(tr, TH_OP_prims_scatter, st.af, ie, x, th_arg_int(0), &r));
  }
  int64_t pinv[TH_MAX_DIMS];
  for (int d = 0; d < v->ndim; d++) pinv[st.perm[d]] = d;
  TH_TRY(th_tu_reshape(tr, r, v->ndim, st.pshape, &r));
  return th_tu_transpose(tr, r, pinv, out);
}

/* a with a[key] = values (accumulate: +=), values already a's dtype; key as getitem takes it. */
static th_status index_put(th_trace *tr, const char *op, th_arg a, const th_arg *keyarg, th_arg values, bool accumulate,
                           th_arg *out) {
  const th_value *v = a.u.value;
  const th_arg *raw = keyarg;
  int nraw = 1;
  if (keyarg->kind == TH_ARG_TUPLE || (keyarg->kind == TH_ARG_LIST && list_is_tuple(keyarg))) {
    raw = keyarg->u.seq.items;
    nraw = keyarg->u.seq.n;
  }
  th_arg mask;
  int at;
  bool found;
  TH_TRY(find_mask(op, v, nraw, raw, &mask, &at, &found));
  if (found) return mask_put(tr, op, a, mask, at, values, accumulate, out);
  { /* integer index tensors among full slices (and one Ellipsis): no basic indexing to apply first */
    int m = 0, pos = 0, nonell = 0, dims[TH_MAX_DIMS];
    th_arg idx[TH_MAX_DIMS];
    bool simple = nraw <= v->ndim + 1;
    for (int i = 0; simple && i < nraw; i++) {
      const th_arg *k = &raw[i];
      if (k->kind != TH_ARG_ELLIPSIS) nonell++;
      simple = k->kind == TH_ARG_ELLIPSIS || is_full_slice(k) || (th_meta_is_tensor(k) && !is_mask(k));
    }
    simple &= nonell <= v->ndim;
    for (int i = 0; simple && i < nraw; i++) {
      const th_arg *k = &raw[i];
      if (k->kind == TH_ARG_ELLIPSIS) {
        pos += v->ndim - nonell;
      } else {
        if (th_meta_is_tensor(k)) dims[m] = pos, idx[m++] = *k;
        pos++;
      }
    }
    if (simple && m > 0) return adv_put(tr, op, a, m, dims, idx, values, accumulate, out);
  }
  /* the linear position of every selected element: the same key applied to an iota of a's positions */
  int64_t n = th_value_numel(v), one = 1;
  th_arg pos, sel;
  if (n == 0) return th_tu_call1(tr, TH_OP_prims_clone, a, out);
  TH_TRY(th_tu_iota(tr, n, 0, 1, v->device, TH_I64, &pos));
  TH_TRY(th_tu_reshape(tr, pos, v->ndim, v->shape, &pos));
  TH_TRY(getitem(tr, op, pos, keyarg, &sel));
  const th_value *sv = sel.u.value;
  int64_t k = th_value_numel(sv);
  th_arg x = values;
  TH_TRY(broadcast_values(tr, op, &x, sv->ndim, sv->shape));
  if (k == 0) return th_tu_call1(tr, TH_OP_prims_clone, a, out);
  th_arg flat, lin, xf, r;
  TH_TRY(th_tu_reshape(tr, a, 1, &n, &flat));
  TH_TRY(th_tu_reshape(tr, sel, 1, &k, &lin));
  TH_TRY(th_tu_reshape(tr, x, 1, &k, &xf));
  if (accumulate)
    TH_TRY(call4(tr, TH_OP_prims_index_add, flat, lin, xf, th_arg_int(0), &r));
  else
    TH_TRY(call4(tr, TH_OP_prims_scatter, flat, lin, xf, th_arg_int(0), &r));
  (void)one;
  return th_tu_reshape(tr, r, v->ndim, v->shape, out);
}

/* index_put(input, indices, values, accumulate=False): indices a tuple/list of tensors (None: a full
 * slice of that dim). */
th_status ltorch_index_put_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *vals = th_meta_tensor(&args[2]);
  const th_arg *ind = &args[1];
  if (ind->kind != TH_ARG_TUPLE && ind->kind != TH_ARG_LIST)
    return th_error(TH_ERR_TYPE, "%s: index_put(): argument 'indices' must be tuple of Tensors", op);
  if (!vals) return th_error(TH_ERR_TYPE, "%s: index_put(): argument 'values' must be a Tensor", op);
  if (vals->dtype != a->dtype)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Index put requires the source and destination dtypes match, got %s for the destination and "
                    "%s for the source.",
                    op, th_tu_scalar_type_name(a->dtype), th_tu_scalar_type_name(vals->dtype));
  int n = ind->u.seq.n;
  if (n > a->ndim && a->ndim > 0)
    return th_error(TH_ERR_INDEX, "%s: too many indices for tensor of dimension %d (got %d)", op, a->ndim, n);
  th_arg *keys = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
  if (!keys) return th_error(TH_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    const th_arg *k = &ind->u.seq.items[i];
    if (k->kind == TH_ARG_NONE)
      keys[i] = full_slice();
    else if (th_meta_is_tensor(k))
      keys[i] = *k;
    else
      return th_error(TH_ERR_TYPE, "%s: index_put(): expected a tuple of Tensors (or None)", op);
  }
  bool acc;
  TH_TRY(th_tu_bool(op, "accumulate", &args[3], &acc));
  th_arg key = th_arg_tuple(n, keys);
  return index_put(tr, op, args[0], &key, args[2], acc, out);
}

/* setitem(a, key, value): a with a[key] = value, for the advanced keys Tensor.__setitem__ records as
 * ltorch.setitem_ (the basic ones are a copy_ into the view); value a tensor or a number, converted to
 * a's dtype as PyTorch's copy. */
th_status ltorch_setitem_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value;
  th_arg v = args[2];
  if (th_meta_is_tensor(&v)) {
    if (!th_device_eq(v.u.value->device, a->device))
      TH_TRY(th_tu_call2(tr, TH_OP_prims_device_put, v, th_tu_device(a->device), &v));
    TH_TRY(th_tu_convert(tr, &v, a->dtype));
  } else {
    TH_TRY(th_tu_convert(tr, &v, a->dtype));
    TH_TRY(th_tu_full(tr, 0, NULL, v, a->device, a->dtype, &v));
  }
  return index_put(tr, op, args[0], &args[1], v, false, out);
}

/* ---- take / put / take_along_dim ---------------------------------------------------------------------- */

th_status ltorch_take_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *index = th_meta_tensor(&args[1]);
  if (!index || index->dtype != TH_I64)
    return th_error(TH_ERR_RUNTIME, "%s: take(): Expected a long tensor for index, but got %s", op,
                    index ? th_tu_scalar_type_name(index->dtype) : "a non-tensor");
  int64_t n = th_value_numel(a), k = th_value_numel(index);
  if (k == 0) return zeros(tr, index->ndim, index->shape, a->device, a->dtype, out);
  if (n == 0) return th_error(TH_ERR_INDEX, "%s: take(): tried to take from an empty tensor", op);
  th_arg flat, idx, ok, ok2, r;
  TH_TRY(th_tu_reshape(tr, args[0], 1, &n, &flat));
  TH_TRY(th_tu_reshape(tr, args[1], 1, &k, &idx));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_ge, idx, th_arg_int(-n), &ok));
  TH_TRY(wrap_negative(tr, idx, n, &idx));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, ok, idx, th_arg_int(-1), &idx)); /* below -n: out of range */
  (void)ok2;
  TH_TRY(th_tu_call3(tr, TH_OP_prims_take, flat, idx, th_arg_int(0), &r));
  return th_tu_reshape(tr, r, index->ndim, index->shape, out);
}

/* put(input, index, source, accumulate=False): input flattened, index wrapped like take's */
th_status ltorch_put_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *index = th_meta_tensor(&args[1]), *src = th_meta_tensor(&args[2]);
  if (!index || index->dtype != TH_I64)
    return th_error(TH_ERR_RUNTIME, "%s: put_(): Expected a long tensor for index, but got %s", op,
                    index ? th_tu_scalar_type_name(index->dtype) : "a non-tensor");
  if (!src || src->dtype != a->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: put_(): self and source expected to have the same dtype", op);
  int64_t n = th_value_numel(a), k = th_value_numel(index);
  if (th_value_numel(src) != k)
    return th_error(TH_ERR_RUNTIME, "%s: put_(): Expected source and index to have the same number of elements", op);
  bool acc;
  TH_TRY(th_tu_bool(op, "accumulate", &args[3], &acc));
  if (k == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[0], out);
  if (n == 0) return th_error(TH_ERR_INDEX, "%s: put_(): Tried to put elements into an empty tensor", op);
  th_arg flat, idx, ok, s, r;
  TH_TRY(th_tu_reshape(tr, args[0], 1, &n, &flat));
  TH_TRY(th_tu_reshape(tr, args[1], 1, &k, &idx));
  TH_TRY(th_tu_reshape(tr, args[2], 1, &k, &s));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_ge, idx, th_arg_int(-n), &ok));
  TH_TRY(wrap_negative(tr, idx, n, &idx));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, ok, idx, th_arg_int(-1), &idx));
  if (acc)
    TH_TRY(call4(tr, TH_OP_prims_index_add, flat, idx, s, th_arg_int(0), &r));
  else
    TH_TRY(call4(tr, TH_OP_prims_scatter, flat, idx, s, th_arg_int(0), &r));
  return th_tu_reshape(tr, r, a->ndim, a->shape, out);
}

/* take_along_dim(input, indices, dim=None): input and indices broadcast except along dim (dim None: both
 * flattened), then gather. */
th_status ltorch_take_along_dim_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *index = th_meta_tensor(&args[1]);
  if (!index || (index->dtype != TH_I64 && index->dtype != TH_I32 && index->dtype != TH_I16 && index->dtype != TH_I8 &&
                 index->dtype != TH_U8))
    return th_error(TH_ERR_RUNTIME, "%s: torch.take_along_dim(): dtype of indices should be Long but got %s", op,
                    index ? th_tu_scalar_type_name(index->dtype) : "a non-tensor");
  if (index->dtype != TH_I64)
    return th_error(TH_ERR_RUNTIME, "%s: torch.take_along_dim(): dtype of indices should be Long but got %s", op,
                    th_tu_scalar_type_name(index->dtype));
  th_arg x = args[0], idx = args[1];
  int d;
  if (args[2].kind == TH_ARG_NONE) {
    int64_t n = th_value_numel(a), k = th_value_numel(index);
    TH_TRY(th_tu_reshape(tr, x, 1, &n, &x));
    TH_TRY(th_tu_reshape(tr, idx, 1, &k, &idx));
    d = 0;
  } else {
    TH_TRY(dim_of(op, &args[2], a->ndim, &d));
    if (a->ndim != index->ndim)
      return th_error(TH_ERR_RUNTIME,
                      "%s: torch.take_along_dim(): input and indices should have the same number of dimensions, but "
                      "got %d dimensions for input, and %d dimensions for indices",
                      op, a->ndim, index->ndim);
    int64_t sa[TH_MAX_DIMS], si[TH_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) {
      int64_t ea = a->shape[i], ei = index->shape[i];
      if (i == d) {
        sa[i] = ea;
        si[i] = ei;
        continue;
      }
      if (ea != ei && ea != 1 && ei != 1)
        return th_error(TH_ERR_RUNTIME,
                        "%s: The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton "
                        "dimension %d",
                        op, (long long)ea, (long long)ei, i);
      sa[i] = si[i] = ea == 1 ? ei : ea;
    }
    TH_TRY(th_tu_expand(tr, op, &x, a->ndim, sa));
    TH_TRY(th_tu_expand(tr, op, &idx, a->ndim, si));
  }
  if (th_value_numel(idx.u.value) == 0)
    return zeros(tr, idx.u.value->ndim, idx.u.value->shape, a->device, a->dtype, out);
  /* negative indices wrap (take_along_dim is numpy's) */
  int64_t n = x.u.value->ndim ? x.u.value->shape[d] : 1;
  TH_TRY(wrap_negative(tr, idx, n, &idx));
  return th_tu_call3(tr, TH_OP_prims_take_along_axis, x, idx, th_arg_int(d), out);
}

/* masked_scatter(input, mask, source): input and mask broadcast together */
th_status ltorch_masked_scatter_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *m = th_meta_tensor(&args[1]), *s = th_meta_tensor(&args[2]);
  if (!m || m->dtype != TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: masked_scatter_ only supports boolean masks, but got mask with dtype %s", op,
                    m ? th_tu_scalar_type_name(m->dtype) : "a non-tensor");
  if (!s || s->dtype != a->dtype)
    return th_error(TH_ERR_RUNTIME,
                    "%s: masked_scatter_: expected self and source to have same dtypes but got %s and %s", op,
                    th_tu_scalar_type_name(a->dtype), s ? th_tu_scalar_type_name(s->dtype) : "a non-tensor");
  th_arg xs[2] = {args[0], args[1]};
  int nd;
  int64_t shape[TH_MAX_DIMS];
  TH_TRY(th_tu_broadcast_shape(op, 2, xs, &nd, shape));
  TH_TRY(th_tu_expand(tr, op, &xs[0], nd, shape));
  TH_TRY(th_tu_expand(tr, op, &xs[1], nd, shape));
  return th_tu_call3(tr, TH_OP_prims_masked_scatter, xs[0], xs[1], args[2], out);
}

/* ---- select and the *_scatter ops ---------------------------------------------------------------------- */

static th_status index_in_dim(const char *op, int64_t index, int64_t len, int d, int64_t *out) {
  if (index < -len || index >= len)
    return th_error(TH_ERR_INDEX, "%s: index %lld out of range for tensor of size [%lld] at dimension %d", op,
                    (long long)index, (long long)len, d);
  *out = index < 0 ? index + len : index;
  return TH_OK;
}

/* select(input, dim, index) */
th_status ltorch_select_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value;
  if (a->ndim == 0) return th_error(TH_ERR_INDEX, "%s: select() cannot be applied to a 0-dim tensor.", op);
  int d;
  int64_t i = 0, idx;
  TH_TRY(dim_of(op, &args[1], a->ndim, &d));
  TH_TRY(th_meta_int(op, "index", &args[2], &idx));
  TH_TRY(index_in_dim(op, idx, a->shape[d], d, &i));
  th_arg r;
  int64_t sq = d;
  TH_TRY(th_tu_slice_in_dim(tr, args[0], i, i + 1, 1, d, &r));
  return th_tu_squeeze(tr, r, 1, &sq, out);
}

/* src placed along dim d at start, start + step, ... of a (index_copy with an iota index). */
static th_status place_strided(th_trace *tr, th_arg a, th_arg src, int d, int64_t start, int64_t step, th_arg *out) {
  const th_value *a_v = a.u.value, *s = src.u.value;
  int64_t len = s->ndim ? s->shape[d] : 1;
  if (len == 0) return th_tu_call1(tr, TH_OP_prims_clone, a, out);
  th_arg idx, ie;
  if (len == 1) {
    int64_t one = 1;
    TH_TRY(th_tu_full(tr, 1, &one, th_arg_int(start), a_v->device, TH_I64, &idx));
  } else {
    TH_TRY(th_tu_iota(tr, len, start, step, a_v->device, TH_I64, &idx));
  }
  TH_TRY(expand_index(tr, idx, s, d, &ie));
  return call4(tr, TH_OP_prims_scatter, a, ie, src, th_arg_int(d), out);
}

static th_status check_embed(const char *op, const char *fn, const th_value *a, const th_value *s, int ndim,
                             const int64_t *shape) {
  if (s->dtype != a->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: %s: expected src to have the dtype of input (%s), but got %s", op, fn,
                    th_tu_scalar_type_name(a->dtype), th_tu_scalar_type_name(s->dtype));
  bool ok = s->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++) ok = s->shape[i] == shape[i];
  if (!ok) {
    char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME,
                    "%s: expected src to have a size equal to the slice of self. src size = %s, slice size = %s", op,
                    th_meta_shape_str(s->shape, s->ndim, b0, sizeof b0), th_meta_shape_str(shape, ndim, b1, sizeof b1));
  }
  (void)fn;
  return TH_OK;
}

/* select_scatter(input, src, dim, index) */
th_status ltorch_select_scatter_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *s = args[1].u.value;
  if (a->ndim == 0) return th_error(TH_ERR_INDEX, "%s: select() cannot be applied to a 0-dim tensor.", op);
  int d;
  int64_t i = 0, idx, shape[TH_MAX_DIMS];
  TH_TRY(dim_of(op, &args[2], a->ndim, &d));
  TH_TRY(th_meta_int(op, "index", &args[3], &idx));
  TH_TRY(index_in_dim(op, idx, a->shape[d], d, &i));
  int n = 0;
  for (int j = 0; j < a->ndim; j++)
    if (j != d) shape[n++] = a->shape[j];
  TH_TRY(check_embed(op, "select_scatter", a, s, n, shape));
  th_arg u;
  TH_TRY(th_tu_unsqueeze(tr, args[1], d, &u));
  return place_strided(tr, args[0], u, d, i, 1, out);
}

/* slice_scatter(input, src, dim=0, start=None, end=None, step=1) */
th_status ltorch_slice_scatter_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *s = args[1].u.value;
  int d = 0;
  if (a->ndim) TH_TRY(dim_of(op, &args[2], a->ndim, &d));
  int64_t len = a->ndim ? a->shape[d] : 1, start = 0, end = len, step = 1;
  if (args[3].kind != TH_ARG_NONE) TH_TRY(th_meta_int(op, "start", &args[3], &start));
  if (args[4].kind != TH_ARG_NONE) TH_TRY(th_meta_int(op, "end", &args[4], &end));
  TH_TRY(th_meta_int(op, "step", &args[5], &step));
  if (step <= 0) return th_error(TH_ERR_RUNTIME, "%s: slice step must be positive", op);
  if (start < 0) start += len;
  if (end < 0) end += len;
  if (start < 0) start = 0;
  if (start > len) start = len;
  if (end < start) end = start;
  if (end > len) end = len;
  int64_t shape[TH_MAX_DIMS];
  for (int j = 0; j < a->ndim; j++) shape[j] = a->shape[j];
  if (a->ndim) shape[d] = (end - start + step - 1) / step;
  TH_TRY(check_embed(op, "slice_scatter", a, s, a->ndim, shape));
  if (a->ndim == 0) return th_tu_call1(tr, TH_OP_prims_clone, args[1], out);
  return place_strided(tr, args[0], args[1], d, start, step, out);
}

/* diagonal_scatter(input, src, offset=0, dim1=0, dim2=1): dims d1, d2 moved last and merged; the
 * diagonal is the slice start, start + (n2 + 1), ... of the merged dim */
th_status ltorch_diagonal_scatter_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *s = args[1].u.value;
  if (a->ndim < 2) return th_error(TH_ERR_RUNTIME, "%s: diagonal dimensions requires ndim larger than 1", op);
  int64_t offset;
  int d1, d2;
  TH_TRY(th_meta_int(op, "offset", &args[2], &offset));
  TH_TRY(dim_of(op, &args[3], a->ndim, &d1));
  TH_TRY(dim_of(op, &args[4], a->ndim, &d2));
  if (d1 == d2) return th_error(TH_ERR_RUNTIME, "%s: diagonal dimensions cannot be identical %d, %d", op, d1, d2);
  int64_t n1 = a->shape[d1], n2 = a->shape[d2];
  int64_t L = offset >= 0 ? (n1 < n2 - offset ? n1 : n2 - offset) : (n1 + offset < n2 ? n1 + offset : n2);
  if (L < 0) L = 0;
  int64_t perm[TH_MAX_DIMS], inv[TH_MAX_DIMS], shape[TH_MAX_DIMS], ps[TH_MAX_DIMS];
  int n = 0;
  for (int j = 0; j < a->ndim; j++)
    if (j != d1 && j != d2) shape[n] = a->shape[j], perm[n++] = j;
  perm[n] = d1;
  perm[n + 1] = d2;
  shape[n] = L;
  TH_TRY(check_embed(op, "diagonal_scatter", a, s, n + 1, shape));
  for (int j = 0; j < a->ndim; j++) inv[perm[j]] = j, ps[j] = a->shape[perm[j]];
  th_arg x, r;
  TH_TRY(th_tu_transpose(tr, args[0], perm, &x));
  int64_t fs[TH_MAX_DIMS];
  for (int j = 0; j < n; j++) fs[j] = ps[j];
  fs[n] = n1 * n2;
  TH_TRY(th_tu_reshape(tr, x, n + 1, fs, &x));
  int64_t start = offset >= 0 ? offset : -offset * n2;
  TH_TRY(place_strided(tr, x, args[1], n, start, n2 + 1, &r));
  TH_TRY(th_tu_reshape(tr, r, a->ndim, ps, &r));
  return th_tu_transpose(tr, r, inv, out);
}

/* ---- one_hot ------------------------------------------------------------------------------------------------ */

th_status ltorch_one_hot_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value;
  if (a->dtype != TH_I64)
    return th_error(TH_ERR_RUNTIME, "%s: one_hot is only applicable to index tensor of type LongTensor.", op);
  int64_t nc;
  TH_TRY(th_meta_int(op, "num_classes", &args[1], &nc));
  if (nc == -1)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.nn.functional.one_hot without num_classes is not supported: the number of classes is "
                    "input.max() + 1, known only at run time; pass num_classes explicitly",
                    op);
  if (nc < 1 && !(nc == 0 && th_value_numel(a) == 0))
    return th_error(TH_ERR_RUNTIME, "%s: num_classes should be positive", op);
  if (a->ndim + 1 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: the result would have more than %d dimensions", op, TH_MAX_DIMS);
  int64_t shape[TH_MAX_DIMS], bd[TH_MAX_DIMS], last = a->ndim;
  for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[i], bd[i] = i;
  shape[a->ndim] = nc;
  if (nc == 0 || th_value_numel(a) == 0) return zeros(tr, a->ndim + 1, shape, a->device, TH_I64, out);
  /* values outside [0, num_classes) are an error in PyTorch: prims.take of an iota checks them */
  th_arg io, chk, ib, cb, eq, flat;
  int64_t n = th_value_numel(a);
  TH_TRY(th_tu_iota(tr, nc, 0, 1, a->device, TH_I64, &io));
  TH_TRY(th_tu_reshape(tr, args[0], 1, &n, &flat));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_take, io, flat, th_arg_int(0), &chk));
  TH_TRY(th_tu_reshape(tr, chk, a->ndim, a->shape, &chk));
  th_arg si[TH_MAX_DIMS], bi[TH_MAX_DIMS];
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, chk, th_tu_ints(si, a->ndim + 1, shape),
                     th_tu_ints(bi, a->ndim, bd), &ib));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, io, th_tu_ints(si, a->ndim + 1, shape), th_tu_ints(bi, 1, &last),
                     &cb));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, ib, cb, &eq));
  return th_tu_call2(tr, TH_OP_prims_convert_element_type, eq, th_arg_dtype(TH_I64), out);
}

/* ---- new_* ----------------------------------------------------------------------------------------------- */

static th_status new_common(th_trace *tr, const th_symbol *sym, const th_arg *args, const th_arg *size, th_arg fill,
                            const th_arg *dt_arg, const th_arg *dev_arg, const th_arg *rg_arg, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value;
  int64_t shape[TH_MAX_DIMS];
  int nd = 0;
  if (size->kind == TH_ARG_INT || th_meta_is_number(size)) {
    TH_TRY(th_meta_int(op, "size", size, &shape[0]));
    nd = 1;
  } else {
    TH_TRY(th_meta_int_list(op, "size", size, shape, &nd));
  }
  for (int i = 0; i < nd; i++)
    if (shape[i] < 0)
      return th_error(TH_ERR_RUNTIME, "%s: Trying to create tensor with negative dimension %lld", op,
                      (long long)shape[i]);
  th_dtype dt = a->dtype;
  th_device dev = a->device;
  bool has, rg = false;
  TH_TRY(th_tu_dtype_arg(op, "dtype", dt_arg, &dt, &has));
  if (!has) dt = a->dtype;
  TH_TRY(th_tu_device_arg(op, "device", dev_arg, &dev, &has));
  if (!has) dev = a->device;
  if (rg_arg) TH_TRY(th_tu_bool(op, "requires_grad", rg_arg, &rg));
  if (rg) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: requires_grad=True is not supported", op);
  TH_TRY(th_tu_convert(tr, &fill, dt));
  return th_tu_full(tr, nd, shape, fill, dev, dt, out);
}

/* new_zeros(input, size, *, dtype=None, device=None, requires_grad=False, ...) */
th_status ltorch_new_zeros_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return new_common(tr, sym, args, &args[1], th_arg_int(0), &args[2], &args[3], &args[4], out);
}
th_status ltorch_new_ones_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return new_common(tr, sym, args, &args[1], th_arg_int(1), &args[2], &args[3], &args[4], out);
}
th_status ltorch_new_empty_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return new_common(tr, sym, args, &args[1], th_arg_int(0), &args[2], &args[3], &args[4], out);
}
/* new_full(input, size, fill_value, *, dtype=None, device=None, requires_grad=False, ...) */
th_status ltorch_new_full_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (th_meta_is_tensor(&args[2]))
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: a tensor fill_value is not supported", sym->qualname);
  return new_common(tr, sym, args, &args[1], args[2], &args[3], &args[4], &args[5], out);
}

/* new_tensor(input, data, *, dtype=None, device=None, requires_grad=False): a Python number or a
 * (nested) list of numbers, a constant; dtype defaults to input's. */
th_status ltorch_new_tensor_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value;
  th_dtype dt = a->dtype;
  th_device dev = a->device;
  bool has, rg;
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[2], &dt, &has));
  if (!has) dt = a->dtype;
  TH_TRY(th_tu_device_arg(op, "device", &args[3], &dev, &has));
  if (!has) dev = a->device;
  TH_TRY(th_tu_bool(op, "requires_grad", &args[4], &rg));
  if (rg) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: requires_grad=True is not supported", op);
  const th_arg *data = &args[1];
  if (th_meta_is_tensor(data)) { /* PyTorch copies (and warns) */
    th_arg r;
    TH_TRY(th_tu_call1(tr, TH_OP_prims_clone, *data, &r));
    if (!th_device_eq(data->u.value->device, dev))
      TH_TRY(th_tu_call2(tr, TH_OP_prims_device_put, r, th_tu_device(dev), &r));
    *out = r;
    return th_tu_convert(tr, out, dt);
  }
  if (data->kind != TH_ARG_LIST && data->kind != TH_ARG_TUPLE) {
    th_arg v = *data;
    TH_TRY(th_tu_convert(tr, &v, dt));
    return th_tu_full(tr, 0, NULL, v, dev, dt, out);
  }
  /* a nested list: one prims.full per element, cat, reshape (constants: the data is small) */
  int nd = 0;
  int64_t shape[TH_MAX_DIMS];
  TH_TRY(seq_dims(op, data, &nd, shape, 0));
  int64_t n = numel_of(shape, nd);
  if (n > 4096) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: new_tensor of more than 4096 elements", op);
  th_arg *pieces = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
  if (!pieces) return th_error(TH_ERR_NOMEM, "out of memory");
  /* the leaves in order */
  const th_arg *stack[TH_MAX_DIMS + 1];
  int at[TH_MAX_DIMS + 1], sp = 0, k = 0;
  stack[0] = data;
  at[0] = 0;
  while (sp >= 0) {
    const th_arg *s = stack[sp];
    if (at[sp] >= s->u.seq.n) {
      sp--;
      if (sp >= 0) at[sp]++;
      continue;
    }
    const th_arg *e = &s->u.seq.items[at[sp]];
    if (e->kind == TH_ARG_LIST || e->kind == TH_ARG_TUPLE) {
      stack[++sp] = e;
      at[sp] = 0;
      continue;
    }
    if (k >= n) return th_error(TH_ERR_VALUE, "%s: new_tensor(): the data must be rectangular", op);
    th_arg v = *e;
    int64_t one = 1;
    TH_TRY(th_tu_convert(tr, &v, dt));
    TH_TRY(th_tu_full(tr, 1, &one, v, dev, dt, &pieces[k++]));
    at[sp]++;
  }
  th_arg r;
  if (k == 0) {
    int64_t z = 0;
    TH_TRY(zeros(tr, 1, &z, dev, dt, &r));
  } else if (k == 1) {
    r = pieces[0];
  } else {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(k, pieces), th_arg_int(0), &r));
  }
  return th_tu_reshape(tr, r, nd, shape, out);
}

/* ---- searchsorted / bucketize / tril_indices / triu_indices ------------------------------------------ */

static th_status searchsorted_common(th_trace *tr, const char *op, th_arg seq, th_arg values, bool out_int32,
                                     bool right, const th_arg *sorter, th_arg *out) {
  const th_value *s = seq.u.value;
  if (!th_meta_is_tensor(&values)) { /* a scalar value: a 0-dim tensor of the boundaries' dtype */
    if (s->ndim != 1)
      return th_error(TH_ERR_RUNTIME,
                      "%s: torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension is "
                      "1, but we got boundaries tensor dim(%d) and input value's dim(0) numel(1)",
                      op, s->ndim);
    th_tu_type comp, res;
    th_arg both[2] = {seq, values};
    TH_TRY(th_tu_promote(op, 2, both, TH_TU_PROMO_PRESERVE, &comp, &res));
    th_dtype dt = th_tu_tensor_dtype(res);
    TH_TRY(th_tu_convert(tr, &values, dt));
    TH_TRY(th_tu_full(tr, 0, NULL, values, s->device, dt, &values));
  }
  const th_value *v = values.u.value;
  if (s->ndim == 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 dimension",
                    op);
  if (s->ndim > 1) {
    bool ok = s->ndim == v->ndim;
    for (int i = 0; ok && i < s->ndim - 1; i++) ok = s->shape[i] == v->shape[i];
    if (!ok)
      return th_error(TH_ERR_RUNTIME,
                      "%s: torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions "
                      "of boundaries tensor and input value tensor must match",
                      op);
  }
  if (sorter && sorter->kind != TH_ARG_NONE) {
    const th_value *so = th_meta_tensor(sorter);
    if (!so || so->dtype != TH_I64)
      return th_error(TH_ERR_RUNTIME, "%s: torch.searchsorted(): sorter must be a tensor of long dtype", op);
    if (!same_shape(so, s))
      return th_error(TH_ERR_RUNTIME, "%s: torch.searchsorted(): boundary and sorter must have the same size", op);
    if (th_value_numel(so) > 0)
      TH_TRY(th_tu_call3(tr, TH_OP_prims_take_along_axis, seq, *sorter, th_arg_int(s->ndim - 1), &seq));
  }
  if (seq.u.value->dtype != v->dtype) { /* PyTorch compares in the promoted dtype */
    th_tu_type comp, res;
    th_arg both[2] = {seq, values};
    TH_TRY(th_tu_promote(op, 2, both, TH_TU_PROMO_PRESERVE, &comp, &res));
    TH_TRY(th_tu_convert_type(tr, &seq, res));
    TH_TRY(th_tu_convert_type(tr, &values, res));
  }
  return call4(tr, TH_OP_prims_searchsorted, seq, values, th_arg_bool(right), th_arg_dtype(out_int32 ? TH_I32 : TH_I64),
               out);
}

/* searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None) */
th_status ltorch_searchsorted_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  bool i32, right;
  TH_TRY(th_tu_bool(op, "out_int32", &args[2], &i32));
  TH_TRY(th_tu_bool(op, "right", &args[3], &right));
  if (args[4].kind == TH_ARG_STR) {
    const char *side = args[4].u.s;
    if (strcmp(side, "left") && strcmp(side, "right"))
      return th_error(TH_ERR_RUNTIME, "%s: torch.searchsorted(): side can only be 'left' or 'right' but got %s", op,
                      side);
    bool r = !strcmp(side, "right");
    if (right && !r)
      return th_error(TH_ERR_RUNTIME,
                      "%s: torch.searchsorted(): side and right can't be set to opposites, got side of left while "
                      "right was True",
                      op);
    right = r;
  }
  return searchsorted_common(tr, op, args[0], args[1], i32, right, &args[5], out);
}

/* bucketize(input, boundaries, *, out_int32=False, right=False) */
th_status ltorch_bucketize_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *b = th_meta_tensor(&args[1]);
  if (!b || b->ndim != 1)
    return th_error(TH_ERR_RUNTIME, "%s: boundaries tensor must be 1 dimension, but got dim(%d)", op, b ? b->ndim : 0);
  bool i32, right;
  TH_TRY(th_tu_bool(op, "out_int32", &args[2], &i32));
  TH_TRY(th_tu_bool(op, "right", &args[3], &right));
  return searchsorted_common(tr, op, args[1], args[0], i32, right, NULL, out);
}

static th_status tri_indices(th_trace *tr, const th_symbol *sym, const th_arg *args, bool upper, th_arg *out) {
  const char *op = sym->qualname;
  th_dtype dt = TH_I64;
  th_device dev = {TH_CPU, 0};
  bool has, rg;
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[3], &dt, &has));
  if (!has) dt = TH_I64;
  TH_TRY(th_tu_device_arg(op, "device", &args[4], &dev, &has));
  if (!has) dev = (th_device){TH_CPU, 0};
  TH_TRY(th_tu_bool(op, "requires_grad", &args[5], &rg));
  if (dt != TH_I64 && dt != TH_I32)
    return th_error(TH_ERR_RUNTIME, "%s: \"%s_indices\" not implemented for '%s'", op, upper ? "triu" : "tril",
                    th_tu_scalar_type_name(dt));
  th_arg pos[4] = {args[0], args[1], args[2], th_arg_bool(upper)};
  static const char *const kw[2] = {"device", "dtype"};
  th_arg kwargs[2] = {th_tu_device(dev), th_arg_dtype(dt)};
  return th_tu_call_kw(tr, TH_OP_prims_tri_indices, 4, pos, 2, kw, kwargs, out);
}

/* tril_indices(row, col, offset=0, *, dtype=torch.long, device=None, requires_grad=False, ...) */
th_status ltorch_tril_indices_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return tri_indices(tr, sym, args, false, out);
}
th_status ltorch_triu_indices_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return tri_indices(tr, sym, args, true, out);
}

/* ---- embedding_bag -------------------------------------------------------------------------------------- */

/* embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
 * mode='mean', sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
 * the rows of weight gathered with prims.take, each tagged with its bag (a 2-D input's rows are the bags;
 * a 1-D input's bag is searchsorted(offsets, position, right=True) - 1), then reduced per bag with
 * index_add (sum, mean: divided by the bag's count) or scatter_reduce amax (max). Entries equal to
 * padding_idx, and those past the last bag with include_last_offset, go to an extra bag that is dropped;
 * an empty bag is zeros. Low-precision weights compute in float32 and round once. max_norm (which
 * renormalizes weight in place) and scale_grad_by_freq (a gradient scaled by the batch's index counts)
 * are NotImplementedError; sparse only changes the gradient's layout in PyTorch, so it is ignored. */
th_status ltorch_embedding_bag_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *in = th_meta_tensor(&args[0]), *w = th_meta_tensor(&args[1]);
  if (!in || !w) return th_error(TH_ERR_TYPE, "%s: expected input and weight to be tensors", op);
  if (args[3].kind != TH_ARG_NONE)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.nn.functional.embedding_bag with max_norm is not supported (it renormalizes weight in "
                    "place)",
                    op);
  bool sgf, ilo;
  TH_TRY(th_tu_bool(op, "scale_grad_by_freq", &args[5], &sgf));
  if (sgf)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.nn.functional.embedding_bag with scale_grad_by_freq=True is not supported", op);
  TH_TRY(th_tu_bool(op, "include_last_offset", &args[9], &ilo));
  if (args[6].kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: expected mode to be a str", op);
  const char *mode = args[6].u.s;
  int m = !strcmp(mode, "sum") ? 0 : !strcmp(mode, "mean") ? 1 : !strcmp(mode, "max") ? 2 : -1;
  if (m < 0) return th_error(TH_ERR_VALUE, "%s: mode has to be one of sum, mean or max", op);
  if (in->dtype != TH_I64 && in->dtype != TH_I32)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, "
                    "Int; but got %s instead",
                    op, th_tu_scalar_type_name(in->dtype));
  if (w->ndim != 2)
    return th_error(TH_ERR_RUNTIME, "%s: weight has to be a 2D Tensor, but got Tensor of dimension %d", op, w->ndim);
  const th_value *psw = th_meta_tensor(&args[8]);
  if (psw && m != 0)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for "
                    "mode='sum' (got mode='%s'). Please open a feature request on GitHub.",
                    op, mode);
  if (psw && (!same_shape(psw, in)))
    return th_error(TH_ERR_VALUE,
                    "%s: embedding_bag: If per_sample_weights is not None, then it must have the same shape as the "
                    "input",
                    op);
  if (psw && psw->dtype != w->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: Expected per_sample_weights to have the weight's dtype", op);
  int64_t nemb = w->shape[0], D = w->shape[1], pad = -1;
  bool has_pad = args[10].kind != TH_ARG_NONE;
  if (has_pad) {
    TH_TRY(th_meta_int(op, "padding_idx", &args[10], &pad));
    if (pad < -nemb || pad >= nemb)
      return th_error(TH_ERR_RUNTIME, "%s: padding_idx must be within the number of embeddings", op);
    if (pad < 0) pad += nemb;
  }
  th_device dev = in->device;
  int64_t N = th_value_numel(in), nbags;
  th_arg idx, ids;
  if (in->ndim == 2) {
    if (args[2].kind != TH_ARG_NONE)
      return th_error(TH_ERR_VALUE,
                      "%s: if input is 2D, then offsets has to be None, as input is treated is a mini-batch of fixed "
                      "length sequences.",
                      op);
    nbags = in->shape[0];
    int64_t L = in->shape[1];
    th_arg b, si[2], bi[1];
    int64_t zero = 0;
    if (nbags == 0 || L == 0) {
      int64_t shape[2] = {nbags, D};
      return zeros(tr, 2, shape, w->device, w->dtype, out);
    }
    TH_TRY(nbags == 1 ? th_tu_full(tr, 1, &nbags, th_arg_int(0), dev, TH_I64, &b)
                      : th_tu_iota(tr, nbags, 0, 1, dev, TH_I64, &b));
    TH_TRY(
      th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, b, th_tu_ints(si, 2, in->shape), th_tu_ints(bi, 1, &zero), &ids));
    TH_TRY(th_tu_reshape(tr, ids, 1, &N, &ids));
  } else if (in->ndim == 1) {
    const th_value *ov = th_meta_tensor(&args[2]);
    if (!ov) return th_error(TH_ERR_VALUE, "%s: offsets has to be a 1D Tensor but got None", op);
    if (ov->ndim != 1) return th_error(TH_ERR_VALUE, "%s: offsets has to be a 1D Tensor", op);
    if (ov->dtype != in->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: expected input and offsets to be the same dtype", op);
    nbags = ov->shape[0] - (ilo ? 1 : 0);
    if (nbags < 0) nbags = 0;
    if (nbags == 0 || N == 0) {
      int64_t shape[2] = {nbags, D};
      return zeros(tr, 2, shape, w->device, w->dtype, out);
    }
    th_arg pos;
    TH_TRY(N == 1 ? th_tu_full(tr, 1, &N, th_arg_int(0), dev, in->dtype, &pos)
                  : th_tu_iota(tr, N, 0, 1, dev, in->dtype, &pos));
    TH_TRY(call4(tr, TH_OP_prims_searchsorted, args[2], pos, th_arg_bool(true), th_arg_dtype(TH_I64), &ids));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, ids, th_arg_int(1), &ids));
  } else {
    return th_error(TH_ERR_VALUE, "%s: input has to be 1D or 2D Tensor, but got Tensor of dimension %d", op, in->ndim);
  }
  TH_TRY(th_tu_reshape(tr, args[0], 1, &N, &idx));
  /* the entries that count: in a bag, not padding; the others go to bag nbags (dropped) */
  th_arg valid, t;
  TH_TRY(th_tu_call2(tr, TH_OP_prims_ge, ids, th_arg_int(0), &valid));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_lt, ids, th_arg_int(nbags), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_bitwise_and, valid, t, &valid));
  if (has_pad) {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_ne, idx, th_arg_int(pad), &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_bitwise_and, valid, t, &valid));
  }
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, valid, ids, th_arg_int(nbags), &ids));
  th_dtype cdt = th_tu_computation_dtype(w->dtype);
  th_arg emb, r;
  TH_TRY(th_tu_call3(tr, TH_OP_prims_take, args[1], idx, th_arg_int(0), &emb)); /* (N, D) */
  TH_TRY(th_tu_convert(tr, &emb, cdt));
  int64_t oshape[2] = {nbags + 1, D}, two[2] = {N, D}, one_d = 0;
  th_arg si[2], bi[1];
  if (psw) {
    th_arg p;
    TH_TRY(th_tu_reshape(tr, args[8], 1, &N, &p));
    TH_TRY(th_tu_convert(tr, &p, cdt));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, p, th_tu_ints(si, 2, two), th_tu_ints(bi, 1, &one_d), &p));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, emb, p, &emb));
  }
  TH_TRY(zeros(tr, 2, oshape, w->device, cdt, &r));
  if (m == 2) {
    th_arg ie;
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, ids, th_tu_ints(si, 2, two), th_tu_ints(bi, 1, &one_d), &ie));
    TH_TRY(scatter_reduce_prim(tr, r, ie, emb, 0, "amax", false, &r));
  } else {
    TH_TRY(call4(tr, TH_OP_prims_index_add, r, ids, emb, th_arg_int(0), &r));
  }
  TH_TRY(th_tu_slice_in_dim(tr, r, 0, nbags, 1, 0, &r));
  if (m == 1) {
    th_arg c, ones, z;
    int64_t nb1 = nbags + 1;
    TH_TRY(zeros(tr, 1, &nb1, w->device, cdt, &c));
    TH_TRY(th_tu_full(tr, 1, &N, th_arg_float(1.0), w->device, cdt, &ones));
    TH_TRY(call4(tr, TH_OP_prims_index_add, c, ids, ones, th_arg_int(0), &c));
    TH_TRY(th_tu_slice_in_dim(tr, c, 0, nbags, 1, 0, &c));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, c, th_arg_float(0.0), &z));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_where, z, th_arg_float(1.0), c, &c));
    int64_t ob[2] = {nbags, D};
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, c, th_tu_ints(si, 2, ob), th_tu_ints(bi, 1, &one_d), &c));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_div, r, c, &r));
  }
  *out = r;
  return th_tu_convert(tr, out, w->dtype);
}
