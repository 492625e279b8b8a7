/* prims/index.c — the indexing prims: take_along_axis (gather), scatter, scatter_add, scatter_reduce,
 * index_add, masked_scatter, masked_select_pad, searchsorted and tri_indices; their metas and vjp rules.
 * (prims.take, index_select's prim, lives with the shape prims.)
 *
 * The prims take PyTorch's layout rules without its conveniences: indices are integer tensors holding
 * values in [0, size) (negative indices are wrapped by the torch layer where PyTorch wraps them; the eager
 * kernels raise IndexError for any other), operands have one dtype (the torch layer converts), and dim is
 * wrapped here (IndexError out of range). A 0-dim operand acts as a 1-element 1-D one, as in ATen.
 *
 *   take_along_axis(a, index, dim)   out[..i..] = a[..index[..i..]..] (at dim); out.shape = index.shape;
 *                                    index.size(d) <= a.size(d) for d != dim (torch.gather)
 *   scatter(a, index, src, dim)      a with a[..index[..i..]..] = src[..i..]; src a tensor of index's shape
 *                                    or a number; duplicates: the last write along dim wins
 *   scatter_add(a, index, src, dim)  the same, accumulating (+=)
 *   scatter_reduce(a, index, src, dim, reduce, include_self)
 *                                    reduce 'sum' 'prod' 'mean' 'amax' 'amin'; include_self=False starts every
 *                                    scattered position from the reduction's identity (mean: divides by the
 *                                    number of values reduced; integer means floor, as ATen)
 *   index_add(a, index, src, dim)    a 1-D index: a[.., index[k], ..] += src[.., k, ..]
 *   masked_scatter(a, mask, source)  a and mask of one shape: the true positions of mask, in row-major
 *                                    order, take source's elements in row-major order (RuntimeError when
 *                                    source has fewer elements than mask has true values)
 *   masked_select_pad(a, mask, n)    a 1-D tensor of n elements: a's values at mask's true positions in
 *                                    row-major order, then zeros (PyTorch's masked_scatter_backward)
 *   searchsorted(seq, values, right, dtype)
 *                                    for each value, its insertion point in the sorted innermost rows of
 *                                    seq (1-D, or values' leading dims); dtype int64 or int32
 *   tri_indices(row, col, offset, upper, device, dtype)
 *                                    torch.tril_indices (upper=False) / torch.triu_indices: (2, count)
 *
 * Gradients (PyTorch's derivatives.yaml and FunctionsManual's scatter_reduce_backward): take_along_axis
 * scatters g back with scatter_add; scatter zeroes g where it wrote and gathers g for src; scatter_add and
 * index_add pass g and gather it for src; scatter_reduce distributes per reduction (prod with its
 * zero-aware exclusive products, mean divided by the counts, amax/amin shared evenly among the tied
 * elements); masked_scatter masks g for a and masked_select_pad's it for source. */
#include <string.h>

#include "ops/meta_util.h"
#include "ops/vjp.h"

/* ---- checks ----------------------------------------------------------------------------------------- */

static int rank1(const th_value *v) { return v->ndim ? v->ndim : 1; }
static int64_t size1(const th_value *v, int d) { return v->ndim ? v->shape[d] : 1; }

static th_status check_index_dtype(const char *op, const th_value *index) {
  if (!index->is_tensor || !th_dtype_is_integer(index->dtype) || index->dtype == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: Expected index to have an integer dtype, but found %s", op,
                    th_meta_dtype_repr(index->dtype));
  return TH_OK;
}

static th_status check_device(const char *op, const char *what, const th_value *a, const th_value *t) {
  if (th_device_eq(a->device, t->device) || (t->ndim == 0 && t->device.type == TH_CPU)) return TH_OK;
  char s0[32], s1[32];
  return th_error(TH_ERR_RUNTIME, "%s: Expected %s on device %s but found %s", op, what,
                  th_device_str(a->device, s0, sizeof s0), th_device_str(t->device, s1, sizeof s1));
}

/* torch.gather / scatter's shape rule: equal ranks, index.size(d) <= a.size(d) for d != dim; a src tensor
 * has index's shape (the torch layer slices a larger src down to it). */
static th_status check_scatter_shapes(const char *op, const th_value *a, const th_value *index, const th_value *src,
                                      int d) {
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  if (rank1(index) != rank1(a) && th_value_numel(index) != 0)
    return th_error(TH_ERR_RUNTIME, "%s: Index tensor must have the same number of dimensions as input tensor", op);
  if (src && rank1(src) != rank1(index) && th_value_numel(index) != 0)
    return th_error(TH_ERR_RUNTIME, "%s: Index tensor must have the same number of dimensions as src tensor", op);
  if (th_value_numel(index) == 0) return TH_OK;
  for (int i = 0; i < rank1(a); i++) {
    if (i != d && size1(index, i) > size1(a, i))
      return th_error(TH_ERR_RUNTIME,
                      "%s: Size does not match at dimension %d expected index %s to be no larger than self %s apart "
                      "from dimension %d",
                      op, i, th_meta_shape_str(index->shape, index->ndim, b0, sizeof b0),
                      th_meta_shape_str(a->shape, a->ndim, b1, sizeof b1), d);
    if (src && size1(index, i) != size1(src, i))
      return th_error(TH_ERR_RUNTIME, "%s: Size does not match at dimension %d: expected src %s of index's shape %s",
                      op, i, th_meta_shape_str(src->shape, src->ndim, b1, sizeof b1),
                      th_meta_shape_str(index->shape, index->ndim, b0, sizeof b0));
  }
  return TH_OK;
}

static th_status same_dtype(const char *op, const char *what, const th_value *a, const th_value *t) {
  if (a->dtype != t->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: Expected %s to have dtype %s (self's), but found %s", op, what,
                    th_meta_dtype_repr(a->dtype), th_meta_dtype_repr(t->dtype));
  return TH_OK;
}

static th_status dim_arg(const char *op, const th_arg *arg, const th_value *a, int *d) {
  int64_t dim;
  TH_TRY(th_meta_int(op, "dim", arg, &dim));
  return th_meta_canonical_dim(op, dim, a->ndim, d);
}

/* ---- metas --------------------------------------------------------------------------------------------- */

th_status prims_take_along_axis_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *index = th_meta_tensor(&args[1]);
  int d;
  TH_TRY(check_index_dtype(op, index));
  TH_TRY(check_device(op, "index", a, index));
  TH_TRY(dim_arg(op, &args[2], a, &d));
  TH_TRY(check_scatter_shapes(op, a, index, NULL, d));
  return th_meta_new_tensor_like(tr, a, a->dtype, index->ndim, index->shape, out);
}

/* scatter, scatter_add, scatter_reduce: (a, index, src, dim, ...) -> like a */
th_status prims_scatter_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *index = th_meta_tensor(&args[1]);
  const th_value *src = th_meta_is_tensor(&args[2]) ? th_meta_tensor(&args[2]) : NULL;
  int d;
  TH_TRY(check_index_dtype(op, index));
  TH_TRY(check_device(op, "index", a, index));
  if (!src && (sym->id != TH_OP_prims_scatter || !th_meta_is_number(&args[2])))
    return th_error(TH_ERR_TYPE, "%s: expected src to be a tensor", op);
  if (src) {
    TH_TRY(same_dtype(op, "src", a, src));
    TH_TRY(check_device(op, "src", a, src));
  }
  TH_TRY(dim_arg(op, &args[3], a, &d));
  TH_TRY(check_scatter_shapes(op, a, index, src, d));
  if (sym->id == TH_OP_prims_scatter_reduce) {
    if (args[4].kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: expected reduce to be a str", op);
    const char *r = args[4].u.s;
    if (strcmp(r, "sum") && strcmp(r, "prod") && strcmp(r, "mean") && strcmp(r, "amax") && strcmp(r, "amin"))
      return th_error(TH_ERR_RUNTIME, "%s: reduce argument must be either sum, prod, mean, amax or amin, got %s", op,
                      r);
  }
  bool rg = a->requires_grad || (src && src->requires_grad);
  return th_meta_new_tensor(tr, a->dtype, a->device, a->ndim, a->shape, rg, out);
}

th_status prims_index_add_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *index = th_meta_tensor(&args[1]), *src = th_meta_tensor(&args[2]);
  int d;
  TH_TRY(check_index_dtype(op, index));
  if (index->ndim > 1) return th_error(TH_ERR_INDEX, "%s: index_add_(): Index is supposed to be a vector", op);
  TH_TRY(check_device(op, "index", a, index));
  TH_TRY(same_dtype(op, "source", a, src));
  TH_TRY(check_device(op, "source", a, src));
  TH_TRY(dim_arg(op, &args[3], a, &d));
  int64_t n = th_value_numel(index);
  bool ok = rank1(src) == rank1(a) && size1(src, d) == n;
  for (int i = 0; ok && i < rank1(a); i++)
    if (i != d && size1(src, i) != size1(a, i)) ok = false;
  if (!ok) {
    char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME,
                    "%s: source %s must have self's shape %s with dimension %d of the index's length %lld", op,
                    th_meta_shape_str(src->shape, src->ndim, b0, sizeof b0),
                    th_meta_shape_str(a->shape, a->ndim, b1, sizeof b1), d, (long long)n);
  }
  return th_meta_new_tensor(tr, a->dtype, a->device, a->ndim, a->shape, a->requires_grad || src->requires_grad, out);
}

static bool same_shape(const th_value *a, const th_value *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

th_status prims_masked_scatter_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *mask = th_meta_tensor(&args[1]), *src = th_meta_tensor(&args[2]);
  if (mask->dtype != TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: masked_scatter_ only supports boolean masks, but got mask with dtype %s", op,
                    th_meta_dtype_repr(mask->dtype));
  if (!same_shape(a, mask)) return th_error(TH_ERR_RUNTIME, "%s: expected mask to have self's shape", op);
  TH_TRY(same_dtype(op, "source", a, src));
  TH_TRY(check_device(op, "mask", a, mask));
  TH_TRY(check_device(op, "source", a, src));
  return th_meta_new_tensor(tr, a->dtype, a->device, a->ndim, a->shape, a->requires_grad || src->requires_grad, out);
}

th_status prims_masked_select_pad_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *mask = th_meta_tensor(&args[1]);
  int64_t n;
  if (mask->dtype != TH_BOOL || !same_shape(a, mask))
    return th_error(TH_ERR_RUNTIME, "%s: expected a bool mask of a's shape", op);
  TH_TRY(th_meta_int(op, "length", &args[2], &n));
  if (n < 0) return th_error(TH_ERR_RUNTIME, "%s: expected a non-negative length, got %lld", op, (long long)n);
  return th_meta_new_tensor_like(tr, a, a->dtype, 1, &n, out);
}

th_status prims_searchsorted_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *seq = th_meta_tensor(&args[0]), *v = th_meta_tensor(&args[1]);
  th_dtype dt = args[3].kind == TH_ARG_DTYPE ? args[3].u.dtype : TH_DTYPE_COUNT;
  if (dt != TH_I64 && dt != TH_I32) return th_error(TH_ERR_RUNTIME, "%s: expected dtype int64 or int32", op);
  if (seq->ndim == 0) return th_error(TH_ERR_RUNTIME, "%s: input value can not be a scalar", op);
  if (seq->dtype != v->dtype) return th_error(TH_ERR_RUNTIME, "%s: expected values of the boundaries' dtype", op);
  bool ok = seq->ndim == 1 || (seq->ndim == v->ndim);
  for (int i = 0; ok && seq->ndim > 1 && i < seq->ndim - 1; i++) ok = seq->shape[i] == v->shape[i];
  if (!ok)
    return th_error(TH_ERR_RUNTIME,
                    "%s: boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and "
                    "input value tensor must match",
                    op);
  return th_meta_new_tensor(tr, dt, v->device, v->ndim, v->shape, false, out);
}

/* The number of (r, c) with 0 <= r < row, 0 <= c < col and c - r <= offset (lower) or >= offset (upper). */
static int64_t tri_count(int64_t row, int64_t col, int64_t offset, bool upper) {
  int64_t n = 0;
  for (int64_t r = 0; r < row; r++) {
    int64_t c;
    if (!upper) {
      c = r + offset + 1; /* columns [0, r + offset] */
      n += c < 0 ? 0 : (c > col ? col : c);
    } else {
      c = r + offset; /* columns [r + offset, col) */
      if (c < 0) c = 0;
      n += c >= col ? 0 : col - c;
    }
  }
  return n;
}

th_status prims_tri_indices_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t row, col, offset;
  bool upper = args[3].kind == TH_ARG_BOOL && args[3].u.b;
  TH_TRY(th_meta_int(op, "row", &args[0], &row));
  TH_TRY(th_meta_int(op, "col", &args[1], &col));
  TH_TRY(th_meta_int(op, "offset", &args[2], &offset));
  if (row < 0) return th_error(TH_ERR_RUNTIME, "%s: row must be non-negative, got%lld", op, (long long)row);
  if (col < 0) return th_error(TH_ERR_RUNTIME, "%s: col must be non-negative, got%lld", op, (long long)col);
  th_device dev;
  TH_TRY(th_meta_device(op, &args[4], &dev));
  if (args[5].kind != TH_ARG_DTYPE || !th_dtype_is_integer(args[5].u.dtype) || args[5].u.dtype == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: expected an integer dtype", op);
  int64_t shape[2] = {2, tri_count(row, col, offset, upper)};
  return th_meta_new_tensor(tr, args[5].u.dtype, dev, 2, shape, false, out);
}

/* ---- vjp rules ------------------------------------------------------------------------------------------
 * The elementwise steps are torch-level ops (ltorch.mul, ...), so a bfloat16 gradient computes in float32
 * and rounds as PyTorch's; the indexing steps are the prims themselves. */

static th_status call4(th_trace *tr, th_op_id op, th_arg a, th_arg b, th_arg c, th_arg d, th_arg *out) {
  th_arg v[4] = {a, b, c, d};
  return th_call(tr, op, 4, v, out);
}

static th_status call6(th_trace *tr, th_op_id op, const th_arg *v, th_arg *out) { return th_call(tr, op, 6, v, out); }

/* The float tensor x in `dtype`. */
static th_status as_dtype(th_trace *tr, th_arg x, th_dtype dt, th_arg *out) {
  if (x.u.value->dtype == dt) {
    *out = x;
    return TH_OK;
  }
  return th_tu_call2(tr, TH_OP_prims_convert_element_type, x, th_arg_dtype(dt), out);
}

/* take_along_axis: g scattered (added) back into zeros of a's shape */
static th_status take_along_axis_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  th_arg z;
  TH_TRY(th_vjp_zeros_like(tr, b->args[0].u.value, &z));
  return call4(tr, TH_OP_prims_scatter_add, z, b->args[1], cts[0], b->args[2], &grads[0]);
}

/* gather of g at the scattered positions: src's gradient (src has index's shape) */
static th_status gather_for_src(th_trace *tr, th_arg g, const th_bsym *b, th_arg *out) {
  return th_tu_call3(tr, TH_OP_prims_take_along_axis, g, b->args[1], b->args[3], out);
}

/* g with zeros where index scattered into (the positions src overwrote or, include_self=False, reset) */
static th_status zero_scattered(th_trace *tr, th_arg g, const th_bsym *b, th_arg *out) {
  return call4(tr, TH_OP_prims_scatter, g, b->args[1], th_arg_float(0.0), b->args[3], out);
}

static th_status scatter_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (th_vjp_is_float_tensor(&b->args[0])) TH_TRY(zero_scattered(tr, cts[0], b, &grads[0]));
  if (th_vjp_is_float_tensor(&b->args[2])) TH_TRY(gather_for_src(tr, cts[0], b, &grads[2]));
  return TH_OK;
}

static th_status scatter_add_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (th_vjp_is_float_tensor(&b->args[0])) grads[0] = cts[0];
  if (th_vjp_is_float_tensor(&b->args[2])) TH_TRY(gather_for_src(tr, cts[0], b, &grads[2]));
  return TH_OK;
}

static th_status index_add_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (th_vjp_is_float_tensor(&b->args[0])) grads[0] = cts[0];
  if (th_vjp_is_float_tensor(&b->args[2])) {
    th_arg r;
    TH_TRY(th_tu_call3(tr, TH_OP_prims_take, cts[0], b->args[1], b->args[3], &r));
    TH_TRY(th_tu_reshape(tr, r, b->args[2].u.value->ndim, b->args[2].u.value->shape, &grads[2]));
  }
  return TH_OK;
}

/* PyTorch's scatter_reduce_backward (FunctionsManual.cpp) for one reduction. */
static th_status scatter_reduce_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg self = b->args[0], index = b->args[1], src = b->args[2], dim = b->args[3];
  const char *reduce = b->args[4].u.s;
  bool include_self = b->args[5].kind == TH_ARG_BOOL && b->args[5].u.b;
  bool want_self = th_vjp_is_float_tensor(&self), want_src = th_vjp_is_float_tensor(&src);
  if (!want_self && !want_src) return TH_OK;
  th_arg g = cts[0], result = th_vjp_out(b), gs = th_arg_none(), gsrc = th_arg_none();
  th_dtype dt = self.u.value->dtype;
  if (!strcmp(reduce, "sum")) {
    gs = g;
    if (want_src) TH_TRY(th_tu_call3(tr, TH_OP_prims_take_along_axis, g, index, dim, &gsrc));
  } else if (!strcmp(reduce, "prod")) {
    /* masked_self = where(self == 0, 1, self); grad_self = g * scatter_reduce(masked_self) / masked_self */
    th_arg z, ms, msr, t;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, self, th_arg_float(0.0), &z));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(1.0), self, &ms));
    th_arg v[6] = {ms, index, src, dim, b->args[4], b->args[5]};
    TH_TRY(call6(tr, TH_OP_prims_scatter_reduce, v, &msr));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, msr, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, t, ms, &gs));
    if (want_src) {
      /* the number of zeros reduced into each position, gathered back to src */
      th_arg sz, szf, zs, nz, nzg, single, msrc, msrcr, a1, a2, one_nz, den;
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, src, th_arg_float(0.0), &sz));
      TH_TRY(as_dtype(tr, sz, dt, &szf));
      TH_TRY(th_vjp_zeros_like(tr, self.u.value, &zs));
      TH_TRY(call4(tr, TH_OP_prims_scatter_add, zs, index, szf, dim, &nz));
      TH_TRY(th_tu_call3(tr, TH_OP_prims_take_along_axis, nz, index, dim, &nzg));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, nzg, th_arg_float(1.0), &one_nz));
      /* only the part of src index covers counts; src's shape equals index's here (ltorch pads) */
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_bitwise_and, sz, one_nz, &single));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, single, th_arg_float(1.0), src, &msrc));
      th_arg v2[6] = {self, index, msrc, dim, b->args[4], b->args[5]};
      TH_TRY(call6(tr, TH_OP_prims_scatter_reduce, v2, &msrcr));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, msrcr, &a1));
      TH_TRY(th_tu_call3(tr, TH_OP_prims_take_along_axis, a1, index, dim, &a1));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, result, &a2));
      TH_TRY(th_tu_call3(tr, TH_OP_prims_take_along_axis, a2, index, dim, &a2));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, sz, th_arg_float(1.0), src, &den));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, a2, den, &a2));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, single, a1, a2, &gsrc));
    }
  } else if (!strcmp(reduce, "mean")) {
    th_arg n, ones, nz, gn;
    TH_TRY(th_tu_full(tr, self.u.value->ndim, self.u.value->shape, th_arg_float(include_self ? 1.0 : 0.0),
                      self.u.value->device, dt, &n));
    TH_TRY(th_tu_full(tr, src.u.value->ndim, src.u.value->shape, th_arg_float(1.0), src.u.value->device, dt, &ones));
    TH_TRY(call4(tr, TH_OP_prims_scatter_add, n, index, ones, dim, &n));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, n, th_arg_float(0.0), &nz));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, nz, th_arg_float(1.0), n, &n));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, g, n, &gn));
    gs = gn;
    if (want_src) TH_TRY(th_tu_call3(tr, TH_OP_prims_take_along_axis, gn, index, dim, &gsrc));
  } else { /* amax, amin: g shared evenly among the elements equal to the result */
    th_arg value, self_is, src_is, self_isf, src_isf, n, gd;
    TH_TRY(th_tu_call3(tr, TH_OP_prims_take_along_axis, result, index, dim, &value));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, self, result, &self_is));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, src, value, &src_is));
    TH_TRY(as_dtype(tr, self_is, dt, &self_isf));
    TH_TRY(as_dtype(tr, src_is, dt, &src_isf));
    TH_TRY(call4(tr, TH_OP_prims_scatter_add, self_isf, index, src_isf, dim, &n));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, g, n, &gd));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, self_isf, gd, &gs));
    if (want_src) {
      TH_TRY(th_tu_call3(tr, TH_OP_prims_take_along_axis, gd, index, dim, &gsrc));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, src_isf, gsrc, &gsrc));
    }
  }
  if (want_self) {
    if (!include_self) TH_TRY(zero_scattered(tr, gs, b, &gs));
    grads[0] = gs;
  }
  if (want_src) grads[2] = gsrc;
  return TH_OK;
}

static th_status masked_scatter_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (th_vjp_is_float_tensor(&b->args[0]))
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, b->args[1], th_arg_float(0.0), cts[0], &grads[0]));
  if (th_vjp_is_float_tensor(&b->args[2])) {
    const th_value *s = b->args[2].u.value;
    th_arg r;
    TH_TRY(th_tu_call3(tr, TH_OP_prims_masked_select_pad, cts[0], b->args[1], th_arg_int(th_value_numel(s)), &r));
    TH_TRY(th_tu_reshape(tr, r, s->ndim, s->shape, &grads[2]));
  }
  return TH_OK;
}

/* masked_select_pad: its transpose, g scattered into the true positions of zeros */
static th_status masked_select_pad_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  th_arg z;
  TH_TRY(th_vjp_zeros_like(tr, b->args[0].u.value, &z));
  return th_tu_call3(tr, TH_OP_prims_masked_scatter, z, b->args[1], cts[0], &grads[0]);
}

#define RULE(name, fn)                                                                                                 \
  { TH_OP_prims_##name, TH_VJP_RULE, fn }
const th_vjp_entry th_vjp_table_prims_index[] = {
  RULE(take_along_axis, take_along_axis_vjp),
  RULE(scatter, scatter_vjp),
  RULE(scatter_add, scatter_add_vjp),
  RULE(scatter_reduce, scatter_reduce_vjp),
  RULE(index_add, index_add_vjp),
  RULE(masked_scatter, masked_scatter_vjp),
  RULE(masked_select_pad, masked_select_pad_vjp),
  {TH_OP_prims_searchsorted, TH_VJP_NONDIFF, NULL},
  {TH_OP_prims_tri_indices, TH_VJP_NONDIFF, NULL},
};
const int th_vjp_table_prims_index_n = (int)(sizeof th_vjp_table_prims_index / sizeof th_vjp_table_prims_index[0]);
#undef RULE
