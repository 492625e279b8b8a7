/* shape.c — metas of the shape and layout prims: broadcast_in_dim, reshape, transpose, slice_prim,
 * squeeze, flip, cat, take, and the copies clone / shallow_copy.
 *
 * Prims are strict (Thunder §3.3): dims and shapes arrive canonical (non-negative, no -1, no
 * broadcasting), because the torch layer has resolved PyTorch's conveniences. The only exceptions
 * are cat and take, whose dim may be negative (wrapped here, IndexError when out of range). Every op
 * here accepts every dtype, fp8 included (layout only). The output is like the input (device,
 * dtype, requires_grad) with the new shape. */
#include <inttypes.h>
#include <string.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"

/* "(2, 3)" into buf: how Thunder's messages print shapes and int tuples. */
static const char *tup(const int64_t *v, int n, char *buf, size_t sz) {
  return th_meta_shape_tuple_str(v, n, buf, sz);
}

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
    return th_error(
        TH_ERR_RUNTIME,
        "%s: Expected one broadcast dimension (got %d) for each dimension of a (which has %d dimensions)", op, nb,
        a->ndim);
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
                      "%s: A dimension of length %" PRId64 " cannot be broadcast to a dimension of length %" PRId64,
                      op, a->shape[k], shape[idx]);
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
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected every length in shape=%s to be non-negative (the prim takes no -1)", op,
                      tup(shape, ndim, s1, sizeof s1));
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
                    "%s: Expected the length (%d) of the permutation=%s to be the number of dimensions (%d) of a",
                    op, n, tup(perm, n, b0, sizeof b0), a->ndim);
  bool seen[TH_MAX_DIMS] = {false};
  for (int k = 0; k < n; k++) {
    if (perm[k] < 0 || perm[k] >= n || seen[perm[k]])
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected permutation=%s to be a valid permutation of the dimensions of a", op,
                      tup(perm, n, b0, sizeof b0));
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
      return th_error(
          TH_ERR_RUNTIME,
          "%s: Attempting to slice a tensor with a length-%d %s sequence when the tensor has %d dimensions", op,
          lens[k], names[k], a->ndim);
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
      return th_error(TH_ERR_INDEX,
                      "%s: Expected dims=%s to only contain valid dimensions for a tensor of shape %s", op,
                      tup(dims, n, b0, sizeof b0), tup(a->shape, a->ndim, b1, sizeof b1));
    if (drop[dims[k]])
      return th_error(TH_ERR_RUNTIME, "%s: Expected dims=%s to be unique", op, tup(dims, n, b0, sizeof b0));
    if (a->shape[dims[k]] != 1)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected dims=%s to specify only dimensions of length one, but a.shape=%s", op,
                      tup(dims, n, b0, sizeof b0), tup(a->shape, a->ndim, b1, sizeof b1));
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
      return th_error(TH_ERR_INDEX,
                      "%s: Expected dims=%s to only contain valid dimensions for a tensor of shape %s", op,
                      tup(dims, n, b0, sizeof b0), tup(a->shape, a->ndim, b1, sizeof b1));
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
    return th_error(TH_ERR_RUNTIME, "%s: Expected index to have at most one dimension, but it has %d", op,
                    index->ndim);
  if (!th_device_eq(index->device, a->device) && !(index->ndim == 0 && index->device.type == TH_CPU)) {
    char s0[32], s1[32];
    return th_error(TH_ERR_RUNTIME, "%s: Expected device %s but found %s!", op,
                    th_device_str(a->device, s0, sizeof s0), th_device_str(index->device, s1, sizeof s1));
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
