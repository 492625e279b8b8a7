/* shape.c — metas of the shape and layout prims: broadcast_in_dim, reshape, transpose, slice_prim,
 * squeeze, flip, cat, take, and the copies clone / shallow_copy.
 *
 * Prims are strict, as Thunder's: dims and shapes arrive canonical (non-negative, no -1, no
 * broadcasting), because the torch layer has resolved PyTorch's conveniences. The only exceptions
 * are cat and take, whose dim may be negative (wrapped here, IndexError when out of range). Every op
 * here accepts every dtype, fp8 included (layout only). The output is like the input (device,
 * dtype, requires_grad) with the new shape. */
#include <inttypes.h>
#include <string.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

/* "(2, 3)" into buf: how Thunder's messages print shapes and int tuples. */
static const char *tup(const int64_t *v, int n, char *buf, size_t sz) { return th_meta_shape_tuple_str(v, n, buf, sz); }

/* ---- broadcast_in_dim(a, shape, broadcast_dimensions) -----------------------------------------------
 * One broadcast dimension per dimension of a, strictly increasing, each < len(shape); a's length there
 * is 1 or equals shape[idx]. */

th_status prims_broadcast_in_dim_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t shape[TH_MAX_DIMS], bdims[TH_MAX_DIMS];
  int ndim, nb;
  char b0[TH_META_SHAPE_BUF];
  TH_TRY(th_meta_int_list(op, "shape", &args[1], shape, &ndim));
  TH_TRY(th_meta_int_list(op, "broadcast_dimensions", &args[2], bdims, &nb));
  TH_TRY(th_meta_check_shape(op, shape, ndim));
  if (nb != a->ndim)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected one broadcast dimension (got %d) for each dimension of a (which has %d dimensions)",
                    op, nb, a->ndim);
  int64_t prev = -1;
  for (int k = 0; k < nb; k++) {
    int64_t idx = bdims[k];
    if (idx <= prev)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected the dimensions in broadcast_dimensions=%s to be strictly increasing", op,
                      tup(bdims, nb, b0, sizeof b0));
    prev = idx;
    if (idx >= ndim)
      return th_error(TH_ERR_RUNTIME,
                      "%s: One of the broadcast_dimensions=%s was %" PRId64
                      ", which is out-of-bounds for a tensor with %d dimensions",
                      op, tup(bdims, nb, b0, sizeof b0), idx, ndim);
    if (a->shape[k] != 1 && a->shape[k] != shape[idx])
      return th_error(TH_ERR_RUNTIME,
                      "%s: A dimension of length %" PRId64 " cannot be broadcast to a dimension of length %" PRId64, op,
                      a->shape[k], shape[idx]);
  }
  return th_meta_new_tensor_like(tr, a, a->dtype, ndim, shape, out);
}

/* ---- reshape(a, shape) -------------------------------------------------------------------------------
 * Every length known and >= 0 (no -1: the torch layer infers it); same number of elements. */

/* The product of a shape, or -1 if it overflows int64. */
static int64_t numel_of(const int64_t *shape, int ndim) {
  int64_t n;
  th_meta_numel(shape, ndim, &n);
  return n;
}

th_status prims_reshape_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF];
  TH_TRY(th_meta_int_list(op, "shape", &args[1], shape, &ndim));
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return th_error(TH_ERR_RUNTIME, "%s: Expected every length in shape=%s to be non-negative (the prim takes no -1)",
                      op, tup(shape, ndim, s1, sizeof s1));
  int64_t an = numel_of(a->shape, a->ndim), n = numel_of(shape, ndim);
  if (n != an)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Attempting to reshape a.shape=%s to shape=%s, but a.numel=%" PRId64
                    " is different from the number of elements in shape, %" PRId64,
                    op, tup(a->shape, a->ndim, s0, sizeof s0), tup(shape, ndim, s1, sizeof s1), an, n);
  return th_meta_new_tensor_like(tr, a, a->dtype, ndim, shape, out);
}

/* ---- transpose(a, permutation) -----------------------------------------------------------------------
 * A permutation of 0..ndim-1; out.shape[i] = a.shape[permutation[i]]. */

th_status prims_transpose_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t perm[TH_MAX_DIMS], shape[TH_MAX_DIMS];
  int n;
  char b0[TH_META_SHAPE_BUF];
  TH_TRY(th_meta_int_list(op, "permutation", &args[1], perm, &n));
  if (n != a->ndim)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected the length (%d) of the permutation=%s to be the number of dimensions (%d) of a", op,
                    n, tup(perm, n, b0, sizeof b0), a->ndim);
  bool seen[TH_MAX_DIMS] = {false};
  for (int k = 0; k < n; k++) {
    if (perm[k] < 0 || perm[k] >= n || seen[perm[k]])
      return th_error(TH_ERR_RUNTIME, "%s: Expected permutation=%s to be a valid permutation of the dimensions of a",
                      op, tup(perm, n, b0, sizeof b0));
    seen[perm[k]] = true;
    shape[k] = a->shape[perm[k]];
  }
  return th_meta_new_tensor_like(tr, a, a->dtype, n, shape, out);
}

/* ---- slice_prim(a, start_indices, end_indices, strides=None) -----------------------------------------
 * One entry per dimension: 0 <= start <= length, start <= end <= length, stride >= 1; the new length
 * is ceil((end - start) / stride). */

th_status prims_slice_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t start[TH_MAX_DIMS], end[TH_MAX_DIMS], strides[TH_MAX_DIMS], shape[TH_MAX_DIMS];
  int ns, ne, nst;
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  TH_TRY(th_meta_int_list(op, "start_indices", &args[1], start, &ns));
  TH_TRY(th_meta_int_list(op, "end_indices", &args[2], end, &ne));
  if (args[3].kind == TH_ARG_NONE) {
    nst = a->ndim;
    for (int d = 0; d < nst; d++) strides[d] = 1;
  } else {
    TH_TRY(th_meta_int_list(op, "strides", &args[3], strides, &nst));
  }
  const char *names[3] = {"start_indices", "end_indices", "strides"};
  int lens[3] = {ns, ne, nst};
  for (int k = 0; k < 3; k++)
    if (lens[k] != a->ndim)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Attempting to slice a tensor with a length-%d %s sequence when the tensor has %d dimensions",
                      op, lens[k], names[k], a->ndim);
  for (int d = 0; d < a->ndim; d++) {
    int64_t l = a->shape[d];
    if (start[d] < 0)
      return th_error(TH_ERR_RUNTIME, "%s: Expected all the indices in start_indices=%s to be weakly positive", op,
                      tup(start, ns, b0, sizeof b0));
    if (start[d] > l)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected all the indices in start_indices=%s to be weakly less than the length of the "
                      "corresponding dimension in a.shape=%s",
                      op, tup(start, ns, b0, sizeof b0), tup(a->shape, a->ndim, b1, sizeof b1));
    if (end[d] < start[d])
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected all the indices in end_indices=%s to be weakly greater than the corresponding "
                      "start index in start_indices=%s",
                      op, tup(end, ne, b0, sizeof b0), tup(start, ns, b1, sizeof b1));
    if (end[d] > l)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected all the indices in end_indices=%s to be weakly less than the length of the "
                      "corresponding dimension in a.shape=%s",
                      op, tup(end, ne, b0, sizeof b0), tup(a->shape, a->ndim, b1, sizeof b1));
    if (strides[d] < 1)
      return th_error(TH_ERR_RUNTIME, "%s: Expected all the strides in strides=%s to be strictly positive", op,
                      tup(strides, nst, b0, sizeof b0));
    int64_t span = end[d] - start[d]; /* 0 <= span <= l: ceil(span / stride) without overflow */
    shape[d] = span / strides[d] + (span % strides[d] != 0);
  }
  return th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, shape, out);
}

/* ---- squeeze(a, dims) --------------------------------------------------------------------------------
 * dims non-negative, unique, in range, each of length one; they are removed. */

th_status prims_squeeze_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t dims[TH_MAX_DIMS], shape[TH_MAX_DIMS];
  int n, nd = 0;
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  TH_TRY(th_meta_int_list(op, "dims", &args[1], dims, &n));
  bool drop[TH_MAX_DIMS] = {false};
  for (int k = 0; k < n; k++) {
    if (dims[k] < 0 || dims[k] >= a->ndim)
      return th_error(TH_ERR_INDEX, "%s: Expected dims=%s to only contain valid dimensions for a tensor of shape %s",
                      op, tup(dims, n, b0, sizeof b0), tup(a->shape, a->ndim, b1, sizeof b1));
    if (drop[dims[k]])
      return th_error(TH_ERR_RUNTIME, "%s: Expected dims=%s to be unique", op, tup(dims, n, b0, sizeof b0));
    if (a->shape[dims[k]] != 1)
      return th_error(TH_ERR_RUNTIME, "%s: Expected dims=%s to specify only dimensions of length one, but a.shape=%s",
                      op, tup(dims, n, b0, sizeof b0), tup(a->shape, a->ndim, b1, sizeof b1));
    drop[dims[k]] = true;
  }
  for (int d = 0; d < a->ndim; d++)
    if (!drop[d]) shape[nd++] = a->shape[d];
  return th_meta_new_tensor_like(tr, a, a->dtype, nd, shape, out);
}

/* ---- flip(a, dims) -----------------------------------------------------------------------------------
 * dims non-negative, unique, in range (a 0-dim tensor accepts dim 0, as PyTorch wraps it); shape
 * unchanged. */

th_status prims_flip_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t dims[TH_MAX_DIMS];
  int n;
  char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
  TH_TRY(th_meta_int_list(op, "dims", &args[1], dims, &n));
  int rank = a->ndim > 0 ? a->ndim : 1;
  bool seen[TH_MAX_DIMS] = {false};
  for (int k = 0; k < n; k++) {
    if (dims[k] < 0 || dims[k] >= rank)
      return th_error(TH_ERR_INDEX, "%s: Expected dims=%s to only contain valid dimensions for a tensor of shape %s",
                      op, tup(dims, n, b0, sizeof b0), tup(a->shape, a->ndim, b1, sizeof b1));
    if (seen[dims[k]])
      return th_error(TH_ERR_RUNTIME, "%s: Expected dims=%s to be unique", op, tup(dims, n, b0, sizeof b0));
    seen[dims[k]] = true;
  }
  return th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, a->shape, out);
}

/* ---- cat(tensors, dim) -------------------------------------------------------------------------------
 * Non-empty; one device, one dtype, one rank (>= 1); dim in [-ndim, ndim - 1] (IndexError otherwise);
 * every other dim equal; the output's length along dim is the sum. requires_grad if any input's. */

th_status prims_cat_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_arg *list = &args[0];
  int n = list->u.seq.n;
  int64_t dim;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  if (n == 0) return th_error(TH_ERR_RUNTIME, "%s: Cat expects a non-empty list of tensors", op);
  const th_value *t0 = th_meta_tensor(&list->u.seq.items[0]);
  if (t0->ndim == 0)
    return th_error(TH_ERR_INDEX, "%s: zero-dimensional tensor (at position 0) cannot be concatenated", op);
  int64_t shape[TH_MAX_DIMS];
  memcpy(shape, t0->shape, sizeof(int64_t) * (size_t)t0->ndim);
  bool rg = t0->requires_grad;
  int d;
  TH_TRY(th_meta_canonical_dim(op, dim, t0->ndim, &d));
  for (int k = 1; k < n; k++) {
    const th_value *t = th_meta_tensor(&list->u.seq.items[k]);
    char s0[32], s1[32];
    if (!th_device_eq(t->device, t0->device))
      return th_error(TH_ERR_RUNTIME, "%s: Expected device %s but found %s!", op,
                      th_device_str(t0->device, s0, sizeof s0), th_device_str(t->device, s1, sizeof s1));
    if (t->dtype != t0->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: Expected dtype %s but found %s!", op, th_meta_dtype_repr(t0->dtype),
                      th_meta_dtype_repr(t->dtype));
    if (t->ndim != t0->ndim)
      return th_error(TH_ERR_RUNTIME, "%s: Expected every tensor to have %d dimensions, but tensor %d has %d", op,
                      t0->ndim, k, t->ndim);
    for (int j = 0; j < t->ndim; j++) {
      if (j == d) {
        if (__builtin_add_overflow(shape[j], t->shape[j], &shape[j]))
          return th_error(TH_ERR_RUNTIME,
                          "%s: the concatenated size along dimension %d overflows int64 (adding size %" PRId64
                          " of tensor number %d)",
                          op, d, t->shape[j], k);
      } else if (t->shape[j] != t0->shape[j]) {
        char b0[TH_META_SHAPE_BUF], b1[TH_META_SHAPE_BUF];
        return th_error(TH_ERR_RUNTIME,
                        "%s: Sizes of tensors must match except in dimension %d. Expected size %" PRId64
                        " but got size %" PRId64 " for tensor number %d in the list (shapes %s and %s)",
                        op, d, t0->shape[j], t->shape[j], k, th_meta_shape_str(t0->shape, t0->ndim, b0, sizeof b0),
                        th_meta_shape_str(t->shape, t->ndim, b1, sizeof b1));
      }
    }
    rg |= t->requires_grad;
  }
  return th_meta_new_tensor(tr, t0->dtype, t0->device, t0->ndim, shape, rg, out);
}

/* ---- take(a, index, dim) -----------------------------------------------------------------------------
 * index: an integer tensor of rank <= 1 on a's device; dim wrapped (IndexError out of range). The
 * output replaces a.shape[dim] by the index length (1 for a 0-dim index); a 0-dim a stays 0-dim. */

th_status prims_take_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  const th_value *index = th_meta_tensor(&args[1]);
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(op, "dim", &args[2], &dim));
  if (!th_dtype_is_integer(index->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Expected index to have an integer dtype, but found %s", op,
                    th_meta_dtype_repr(index->dtype));
  if (index->ndim > 1)
    return th_error(TH_ERR_RUNTIME, "%s: Expected index to have at most one dimension, but it has %d", op, index->ndim);
  if (!th_device_eq(index->device, a->device) && !(index->ndim == 0 && index->device.type == TH_CPU)) {
    char s0[32], s1[32];
    return th_error(TH_ERR_RUNTIME, "%s: Expected device %s but found %s!", op, th_device_str(a->device, s0, sizeof s0),
                    th_device_str(index->device, s1, sizeof s1));
  }
  TH_TRY(th_meta_canonical_dim(op, dim, a->ndim, &d));
  int64_t shape[TH_MAX_DIMS];
  if (a->ndim) memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  if (a->ndim) shape[d] = index->ndim ? index->shape[0] : 1;
  return th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, shape, out);
}

/* ---- clone(a), shallow_copy(a) -----------------------------------------------------------------------
 * Like a. */

th_status prims_like_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  const th_value *a = th_meta_tensor(&args[0]);
  return th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, a->shape, out);
}

/* ---- stride_order(a, order) ---------------------------------------------------------------------------
 * Thunder's stride_order: a tensor with a's values laid out so that dimension order[0] has the largest
 * stride ... order[n-1] the smallest; at run time `a` itself when it already is (a view), else a copy.
 * Only the row-major order (n-1, ..., 0), which ltorch.contiguous uses, is supported. */
th_status prims_stride_order_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t order[TH_MAX_DIMS];
  int n = 0;
  TH_TRY(th_meta_int_list(sym->qualname, "order", &args[1], order, &n));
  if (n != a->ndim)
    return th_error(TH_ERR_RUNTIME, "%s: expected an order of length %d (the rank of a), but got %d", sym->qualname,
                    a->ndim, n);
  for (int i = 0; i < n; i++)
    if (order[i] != n - 1 - i)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: only the row-major order (%d, ..., 0) is supported", sym->qualname,
                      n - 1);
  return th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, a->shape, out);
}

/* ---- update_aliases(a, after) ----------------------------------------------------------------------------
 * Functionalization of in-place updates: `a` is a tensor that may share memory with one that an
 * in-place op just updated, `after` that op's output (the updated tensor's new version). The result is
 * a's new version: like a, and at run time a itself (its memory, which the update may have changed).
 * Depending on `after` orders it after the update, so every later use of a reads the new version. */
th_status prims_update_aliases_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  const th_value *a = th_meta_tensor(&args[0]);
  return th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, a->shape, out);
}

/* ---- vjp rules (ops/vjp.h) ----------------------------------------------------------------------------
 * The cotangent g moved back through the layout change: broadcast sums over the broadcast dims, reshape
 * and squeeze reshape back, transpose applies the inverse permutation, flip flips again, slice scatters
 * into zeros (interleave for strides, then pad with cat), cat slices, take adds g into the taken rows
 * (prims.index_add). clone, shallow_copy and stride_order pass g on. */

static th_status broadcast_in_dim_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const th_value *av = a->u.value, *gv = cts[0].u.value;
  int64_t bd[TH_MAX_DIMS], red[TH_MAX_DIMS];
  int nb = 0, nr = 0;
  TH_TRY(th_meta_int_list(b->sym->qualname, "broadcast_dimensions", &b->args[2], bd, &nb));
  int src[TH_MAX_DIMS]; /* output dim -> source dim, -1 for a new one */
  for (int d = 0; d < gv->ndim; d++) src[d] = -1;
  for (int i = 0; i < nb; i++) src[bd[i]] = i;
  for (int d = 0; d < gv->ndim; d++)
    if (src[d] < 0 || (av->shape[src[d]] == 1 && gv->shape[d] != 1)) red[nr++] = d;
  th_arg g = cts[0];
  if (nr) {
    th_arg items[TH_MAX_DIMS];
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, g, th_tu_ints(items, nr, red), &g));
  }
  return th_tu_reshape(tr, g, av->ndim, av->shape, &grads[0]);
}

/* reshape, squeeze: back to a's shape */
static th_status reshape_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  return th_tu_reshape(tr, cts[0], a->u.value->ndim, a->u.value->shape, &grads[0]);
}

static th_status transpose_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  int64_t perm[TH_MAX_DIMS], inv[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(b->sym->qualname, "permutation", &b->args[1], perm, &n));
  for (int i = 0; i < n; i++) inv[perm[i]] = i;
  return th_tu_transpose(tr, cts[0], inv, &grads[0]);
}

static th_status flip_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  return th_tu_call2(tr, TH_OP_prims_flip, cts[0], b->args[1], &grads[0]);
}

/* clone, shallow_copy, stride_order: the same values */
static th_status identity_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  (void)tr;
  if (th_vjp_is_float_tensor(&b->args[0])) grads[0] = cts[0];
  return TH_OK;
}

static th_status zeros(th_trace *tr, const th_value *like, int d, int64_t len, th_arg *out) {
  int64_t shape[TH_MAX_DIMS];
  for (int i = 0; i < like->ndim; i++) shape[i] = like->shape[i];
  shape[d] = len;
  return th_tu_full(tr, like->ndim, shape, th_arg_float(0.0), like->device, like->dtype, out);
}

/* x (length L along d) placed at start, start + step, ... of a zero tensor of length n along d. */
static th_status unslice_dim(th_trace *tr, th_arg x, int d, int64_t start, int64_t step, int64_t n, th_arg *out) {
  const th_value *v = x.u.value;
  int64_t len = v->shape[d];
  if (len == n) {
    *out = x;
    return TH_OK;
  }
  if (len == 0) return zeros(tr, v, d, n, out);
  th_arg cur = x;
  if (step > 1) { /* interleave: [.., L, ..] -> [.., L, 1, ..] ++ zeros [.., L, step - 1, ..] -> [.., L * step, ..] */
    th_arg u, z, items[2];
    TH_TRY(th_tu_unsqueeze(tr, cur, d + 1, &u));
    TH_TRY(zeros(tr, u.u.value, d + 1, step - 1, &z));
    items[0] = u;
    items[1] = z;
    TH_TRY(th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(2, items), th_arg_int(d + 1), &cur));
    int64_t shape[TH_MAX_DIMS];
    for (int i = 0; i < v->ndim; i++) shape[i] = v->shape[i];
    shape[d] = len * step;
    TH_TRY(th_tu_reshape(tr, cur, v->ndim, shape, &cur));
    len *= step;
    if (len > n - start) {
      TH_TRY(th_tu_slice_in_dim(tr, cur, 0, n - start, 1, d, &cur));
      len = n - start;
    }
  }
  th_arg items[3];
  int k = 0;
  if (start > 0) TH_TRY(zeros(tr, cur.u.value, d, start, &items[k++]));
  items[k++] = cur;
  if (n - start - len > 0) TH_TRY(zeros(tr, cur.u.value, d, n - start - len, &items[k++]));
  if (k == 1) {
    *out = cur;
    return TH_OK;
  }
  return th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(k, items), th_arg_int(d), out);
}

static th_status slice_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const char *op = b->sym->qualname;
  const th_value *av = a->u.value;
  int64_t start[TH_MAX_DIMS], strides[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(op, "start_indices", &b->args[1], start, &n));
  if (b->args[3].kind == TH_ARG_NONE)
    for (int d = 0; d < av->ndim; d++) strides[d] = 1;
  else
    TH_TRY(th_meta_int_list(op, "strides", &b->args[3], strides, &n));
  th_arg g = cts[0];
  for (int d = 0; d < av->ndim; d++) TH_TRY(unslice_dim(tr, g, d, start[d], strides[d], av->shape[d], &g));
  grads[0] = g;
  return TH_OK;
}

static th_status cat_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *list = &b->args[0];
  int n = list->u.seq.n;
  const th_value *t0 = list->u.seq.items[0].u.value;
  int64_t dim;
  int d;
  TH_TRY(th_meta_int(b->sym->qualname, "dim", &b->args[1], &dim));
  TH_TRY(th_meta_canonical_dim(b->sym->qualname, dim, t0->ndim, &d));
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)n);
  if (!items) return TH_ERR_NOMEM;
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    const th_arg *x = &list->u.seq.items[i];
    int64_t len = x->u.value->shape[d];
    items[i] = th_arg_none();
    if (th_vjp_is_float_tensor(x)) TH_TRY(th_tu_slice_in_dim(tr, cts[0], off, off + len, 1, d, &items[i]));
    off += len;
  }
  grads[0] = th_arg_tuple(n, items);
  return TH_OK;
}

th_status th_vjp_one_hot(th_trace *tr, th_arg idx, int64_t ncls, int idx_dim, th_dtype dtype, th_arg *out) {
  const th_value *iv = idx.u.value;
  int64_t k = iv->shape[0], shape[2];
  th_arg io, ib, cb, oh, si[2], bi[1];
  TH_TRY(th_tu_iota(tr, ncls, 0, 1, iv->device, iv->dtype, &io));
  shape[idx_dim] = k;
  shape[1 - idx_dim] = ncls;
  int64_t di = idx_dim, dc = 1 - idx_dim;
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, idx, th_tu_ints(si, 2, shape), th_tu_ints(bi, 1, &di), &ib));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, io, th_tu_ints(si, 2, shape), th_tu_ints(bi, 1, &dc), &cb));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_eq, ib, cb, &oh));
  return th_tu_call2(tr, TH_OP_prims_convert_element_type, oh, th_arg_dtype(dtype), out);
}

/* take(a, index, dim): g's slices added into the rows they came from (prims.index_add into zeros; repeated
 * indices accumulate). */
static th_status take_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const th_value *av = a->u.value, *iv = b->args[1].u.value;
  if (av->ndim == 0) {
    grads[0] = cts[0];
    return TH_OK;
  }
  int64_t k = iv->ndim ? iv->shape[0] : 1;
  th_arg z, idx = b->args[1];
  TH_TRY(th_vjp_zeros_like(tr, av, &z));
  if (k == 0) {
    grads[0] = z;
    return TH_OK;
  }
  if (iv->ndim == 0) TH_TRY(th_tu_reshape(tr, idx, 1, &k, &idx));
  th_arg v[4] = {z, idx, cts[0], b->args[2]};
  return th_call(tr, TH_OP_prims_index_add, 4, v, &grads[0]);
}

static th_status update_aliases_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  (void)tr;
  (void)cts;
  (void)grads;
  return th_error(TH_ERR_NOT_IMPLEMENTED,
                  "%s: cannot differentiate an in-place update seen through an alias (a view of a tensor that was "
                  "updated in place, e.g. `v = y[0]; y.add_(1)`); compute the view after the update, or clone it",
                  b->sym->qualname);
}

#define RULE(name, fn)                                                                                                 \
  { TH_OP_prims_##name, TH_VJP_RULE, fn }
const th_vjp_entry th_vjp_table_prims_shape[] = {
  RULE(broadcast_in_dim, broadcast_in_dim_vjp),
  RULE(reshape, reshape_vjp),
  RULE(squeeze, reshape_vjp),
  RULE(transpose, transpose_vjp),
  RULE(slice_prim, slice_vjp),
  RULE(flip, flip_vjp),
  RULE(cat, cat_vjp),
  RULE(take, take_vjp),
  RULE(clone, identity_vjp),
  RULE(shallow_copy, identity_vjp),
  RULE(stride_order, identity_vjp),
  RULE(update_aliases, update_aliases_vjp),
};
const int th_vjp_table_prims_shape_n = (int)(sizeof th_vjp_table_prims_shape / sizeof th_vjp_table_prims_shape[0]);
#undef RULE
