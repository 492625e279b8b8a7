/* shape.c — reference kernels of the shape, layout and memory prims.
 *
 * Views share the input's storage and only compute a new (shape, strides, offset): broadcast_in_dim
 * (stride 0 on new and size-1 dims), transpose (permuted strides), slice_prim (offset + scaled
 * strides), squeeze (dims dropped), shallow_copy (same layout), and reshape whenever the strides allow
 * it (ATen's computeStride: the new shape must split/merge only runs of dims that are contiguous with
 * each other), else reshape copies into a contiguous tensor first. Runtime tensors never have negative
 * strides, so flip copies (reading through negative byte strides in the loop). cat, take and clone
 * copy; copy_ writes into its destination and returns it; device_put is the identity on the CPU (the
 * only device of this build).
 *
 * Every copy goes through th_eg_copy (eager.c), which converts dtypes and picks byte-copy rows when
 * the dtypes agree. */
#include <string.h>

#include "executors/eager/eager_internal.h"

/* Binds view `t` (one reference) to output 0 of b. */
static th_status set_view(th_rt_env *env, const th_bsym *b, th_tensor *t) {
  if (!t) return th_last_status();
  const th_value *v = th_eg_out_value(b, 0);
  if (!v) {
    th_tensor_release(t);
    return th_error(TH_ERR_RUNTIME, "%s: the output is not a value", th_eg_name(b));
  }
  return th_rt_set(env, v, t);
}

/* ---- views --------------------------------------------------------------------------------------------- */

th_status th_eg_broadcast_in_dim_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the input, the target shape and where each input dim goes. */
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t shape[TH_MAX_DIMS], bdims[TH_MAX_DIMS];
  int n = 0, nb = 0;
  TH_TRY(th_eg_int_list_arg(env, b, 1, shape, TH_MAX_DIMS, &n));
  TH_TRY(th_eg_int_list_arg(env, b, 2, bdims, TH_MAX_DIMS, &nb));
  if (nb != t->ndim)
    return th_error(TH_ERR_RUNTIME, "%s: expected %d broadcast dimensions for a %d-dim tensor, got %d", th_eg_name(b),
                    t->ndim, t->ndim, nb);
  /* Step 2: strides: the input's where its dim has the target size, 0 everywhere else. */
  int64_t strides[TH_MAX_DIMS] = {0};
  for (int k = 0; k < nb; k++) {
    int64_t d = bdims[k];
    if (d < 0 || d >= n || (t->shape[k] != shape[d] && t->shape[k] != 1))
      return th_error(TH_ERR_RUNTIME, "%s: cannot broadcast dim %d (size %lld) to dim %lld of the target",
                      th_eg_name(b), k, (long long)t->shape[k], (long long)d);
    strides[d] = t->shape[k] == shape[d] ? t->strides[k] : 0;
  }
  return set_view(env, b, th_tensor_view(t, n, shape, strides, 0));
}

/* ATen's computeStride: strides viewing (oshape, ostride) as nshape, or false if no view exists. */
static bool view_strides(int ond, const int64_t *oshape, const int64_t *ostride, int nnd, const int64_t *nshape,
                         int64_t *nstride) {
  int64_t numel = 1;
  for (int d = 0; d < ond; d++) numel *= oshape[d];
  if (numel == 0 || ond == 0) {
    th_rt_contiguous_strides(nnd, nshape, nstride);
    return true;
  }
  /* Walk the old dims from the inside, in chunks of dims contiguous with each other; each chunk must
   * be produced exactly by a run of new dims. */
  int view_d = nnd - 1;
  int64_t chunk_base_stride = ostride[ond - 1], tensor_numel = 1, view_numel = 1;
  for (int tensor_d = ond - 1; tensor_d >= 0; tensor_d--) {
    tensor_numel *= oshape[tensor_d];
    if (tensor_d == 0 || (oshape[tensor_d - 1] != 1 && ostride[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || nshape[view_d] == 1)) {
        nstride[view_d] = view_numel * chunk_base_stride;
        view_numel *= nshape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = ostride[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

bool th_eg_view_strides(int ond, const int64_t *oshape, const int64_t *ostride, int nnd, const int64_t *nshape,
                        int64_t *nstride) {
  return view_strides(ond, oshape, ostride, nnd, nshape, nstride);
}

th_status th_eg_reshape_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the input and the new shape (same element count). */
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t shape[TH_MAX_DIMS], strides[TH_MAX_DIMS];
  int n = 0;
  TH_TRY(th_eg_int_list_arg(env, b, 1, shape, TH_MAX_DIMS, &n));
  int64_t numel = 1;
  for (int d = 0; d < n; d++) numel *= shape[d];
  if (numel != th_tensor_numel(t))
    return th_error(TH_ERR_RUNTIME, "%s: cannot reshape a tensor of %lld elements to %lld elements", th_eg_name(b),
                    (long long)th_tensor_numel(t), (long long)numel);
  /* Step 2: a view when the strides allow it. */
  if (view_strides(t->ndim, t->shape, t->strides, n, shape, strides))
    return set_view(env, b, th_tensor_view(t, n, shape, strides, 0));
  /* Step 3: else a contiguous copy, viewed with the new shape. */
  th_tensor *c = th_tensor_empty(t->dtype, t->ndim, t->shape);
  if (!c) return th_last_status();
  th_eg_copy_tensor(c, t);
  th_tensor *v = th_tensor_view(c, n, shape, NULL, 0);
  th_tensor_release(c);
  return set_view(env, b, v);
}

th_status th_eg_transpose_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t perm[TH_MAX_DIMS], shape[TH_MAX_DIMS], strides[TH_MAX_DIMS];
  int n = 0;
  TH_TRY(th_eg_int_list_arg(env, b, 1, perm, TH_MAX_DIMS, &n));
  /* out dim i is input dim perm[i] */
  bool seen[TH_MAX_DIMS] = {false};
  if (n != t->ndim)
    return th_error(TH_ERR_RUNTIME, "%s: permutation of length %d for a %d-dim tensor", th_eg_name(b), n, t->ndim);
  for (int i = 0; i < n; i++) {
    if (perm[i] < 0 || perm[i] >= n || seen[perm[i]])
      return th_error(TH_ERR_RUNTIME, "%s: the permutation is not a permutation of 0..%d", th_eg_name(b), n - 1);
    seen[perm[i]] = true;
    shape[i] = t->shape[perm[i]];
    strides[i] = t->strides[perm[i]];
  }
  return set_view(env, b, th_tensor_view(t, n, shape, strides, 0));
}

th_status th_eg_slice_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the input, start and end indices, and the steps (None: 1). */
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t start[TH_MAX_DIMS], end[TH_MAX_DIMS], step[TH_MAX_DIMS];
  int ns = 0, ne = 0, nst = t->ndim;
  TH_TRY(th_eg_int_list_arg(env, b, 1, start, TH_MAX_DIMS, &ns));
  TH_TRY(th_eg_int_list_arg(env, b, 2, end, TH_MAX_DIMS, &ne));
  if (b->nargs > 3 && b->args[3].kind != TH_ARG_NONE)
    TH_TRY(th_eg_int_list_arg(env, b, 3, step, TH_MAX_DIMS, &nst));
  else
    for (int d = 0; d < t->ndim; d++) step[d] = 1;
  if (ns != t->ndim || ne != t->ndim || nst != t->ndim)
    return th_error(TH_ERR_RUNTIME, "%s: expected %d start, end and stride indices", th_eg_name(b), t->ndim);
  /* Step 2: offset to the first element; length ceil((end - start) / step); strides scaled. */
  int64_t shape[TH_MAX_DIMS], strides[TH_MAX_DIMS], offset = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (start[d] < 0 || start[d] > end[d] || end[d] > t->shape[d] || step[d] < 1)
      return th_error(TH_ERR_INDEX, "%s: invalid slice [%lld:%lld:%lld] of dim %d with size %lld", th_eg_name(b),
                      (long long)start[d], (long long)end[d], (long long)step[d], d, (long long)t->shape[d]);
    int64_t span = end[d] - start[d]; /* 0 <= span <= size: ceil(span / step) without overflow */
    shape[d] = span / step[d] + (span % step[d] != 0);
    /* a dim of length <= 1 never steps, and a huge step (up to INT64_MAX) must not be multiplied out */
    strides[d] = t->strides[d];
    if (shape[d] > 1 && __builtin_mul_overflow(t->strides[d], step[d], &strides[d]))
      strides[d] = t->strides[d]; /* only an empty view gets here (th_tensor_view bounds a non-empty one) */
    if (shape[d] > 0) offset += start[d] * t->strides[d];
  }
  return set_view(env, b, th_tensor_view(t, t->ndim, shape, strides, offset));
}

th_status th_eg_squeeze_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t dims[TH_MAX_DIMS], shape[TH_MAX_DIMS], strides[TH_MAX_DIMS];
  int nd = 0, n = 0;
  TH_TRY(th_eg_int_list_arg(env, b, 1, dims, TH_MAX_DIMS, &nd));
  /* keep every dim not listed; listed dims must have size 1 */
  bool drop[TH_MAX_DIMS] = {false};
  for (int k = 0; k < nd; k++) {
    int64_t d = dims[k] < 0 ? dims[k] + t->ndim : dims[k];
    if (d < 0 || d >= t->ndim || t->shape[d] != 1)
      return th_error(TH_ERR_RUNTIME, "%s: cannot squeeze dim %lld of a tensor of %d dims", th_eg_name(b),
                      (long long)dims[k], t->ndim);
    drop[d] = true;
  }
  for (int d = 0; d < t->ndim; d++)
    if (!drop[d]) {
      shape[n] = t->shape[d];
      strides[n++] = t->strides[d];
    }
  return set_view(env, b, th_tensor_view(t, n, shape, strides, 0));
}

th_status th_eg_shallow_copy_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  return set_view(env, b, th_tensor_view(t, t->ndim, t->shape, t->strides, 0));
}

/* update_aliases(a, after): a itself (a view of its memory, which an in-place update may have changed). */
th_status th_eg_update_aliases_ref(th_rt_env *env, const th_bsym *b) { return th_eg_shallow_copy_ref(env, b); }

/* stride_order(a, (n-1, ..., 0)): a itself (a view) when it is row-major contiguous, else a copy. */
th_status th_eg_stride_order_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  if (th_tensor_is_contiguous(t)) return set_view(env, b, th_tensor_view(t, t->ndim, t->shape, t->strides, 0));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_eg_copy_tensor(out, t);
  return TH_OK;
}

/* ---- copies ---------------------------------------------------------------------------------------------- */

th_status th_eg_flip_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t dims[TH_MAX_DIMS];
  int nd = 0;
  TH_TRY(th_eg_int_list_arg(env, b, 1, dims, TH_MAX_DIMS, &nd));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  /* Step 1: read the input backwards along each flipped dim: start at its last element there and
   * step by the negated stride. */
  int64_t sbs[TH_MAX_DIMS], obs[TH_MAX_DIMS];
  th_eg_tensor_bstrides(t, sbs);
  th_eg_tensor_bstrides(out, obs);
  char *src = th_eg_data(t);
  bool flipped[TH_MAX_DIMS] = {false};
  for (int k = 0; k < nd; k++) {
    int64_t d = dims[k] < 0 ? dims[k] + t->ndim : dims[k];
    if (d < 0 || d >= (t->ndim ? t->ndim : 1))
      return th_error(TH_ERR_INDEX, "%s: dim %lld out of range for a %d-dim tensor", th_eg_name(b), (long long)dims[k],
                      t->ndim);
    if (t->ndim == 0 || flipped[d]) continue;
    flipped[d] = true;
    if (t->shape[d] > 0) src += (t->shape[d] - 1) * sbs[d];
    sbs[d] = -sbs[d];
  }
  if (th_tensor_numel(t) == 0) return TH_OK;
  /* Step 2: copy into the contiguous output. */
  th_eg_copy(th_eg_data(out), out->dtype, obs, src, t->dtype, sbs, t->ndim, t->shape);
  return TH_OK;
}

th_status th_eg_cat_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the list of tensors and the dim. */
  if (b->nargs < 2 || (b->args[0].kind != TH_ARG_LIST && b->args[0].kind != TH_ARG_TUPLE))
    return th_error(TH_ERR_TYPE, "%s: expected a list of tensors", th_eg_name(b));
  const th_arg *list = &b->args[0];
  int64_t dim;
  TH_TRY(th_eg_int_arg(env, b, 1, &dim));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  if (dim < 0) dim += out->ndim;
  if (dim < 0 || dim >= out->ndim)
    return th_error(TH_ERR_INDEX, "%s: Dimension out of range (got %lld for %d dims)", th_eg_name(b), (long long)dim,
                    out->ndim);
  int64_t obs[TH_MAX_DIMS];
  th_eg_tensor_bstrides(out, obs);
  int64_t step = out->strides[dim] * (int64_t)th_dtype_size(out->dtype);
  /* Step 2: each input lands at its running offset along dim. */
  int64_t at = 0;
  for (int k = 0; k < list->u.seq.n; k++) {
    th_tensor *t = th_rt_tensor(env, &list->u.seq.items[k]);
    if (!t) return th_error(TH_ERR_TYPE, "%s: element %d of the list is not a tensor", th_eg_name(b), k);
    bool ok = t->ndim == out->ndim && at + t->shape[dim] <= out->shape[dim];
    for (int d = 0; ok && d < out->ndim; d++)
      if (d != dim && t->shape[d] != out->shape[d]) ok = false;
    if (!ok)
      return th_error(TH_ERR_RUNTIME, "%s: tensor %d does not fit the output along dim %lld", th_eg_name(b), k,
                      (long long)dim);
    if (th_tensor_numel(t) > 0) {
      int64_t sbs[TH_MAX_DIMS];
      th_eg_tensor_bstrides(t, sbs);
      th_eg_copy(th_eg_data(out) + at * step, out->dtype, obs, th_eg_data(t), t->dtype, sbs, t->ndim, t->shape);
    }
    at += t->shape[dim];
  }
  if (at != out->shape[dim])
    return th_error(TH_ERR_RUNTIME, "%s: the inputs fill %lld of the %lld entries along dim %lld", th_eg_name(b),
                    (long long)at, (long long)out->shape[dim], (long long)dim);
  return TH_OK;
}

th_status th_eg_take_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the input, the index (0-dim or 1-dim integers) and the dim. */
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  th_tensor *index = th_eg_tensor_arg(env, b, 1);
  if (!index) return th_last_status();
  int64_t dim;
  TH_TRY(th_eg_int_arg(env, b, 2, &dim));
  if (index->ndim > 1 || th_dtype_is_float(index->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: the index must be a 0-dim or 1-dim integer tensor", th_eg_name(b));
  int nd = t->ndim ? t->ndim : 1;
  if (dim < 0) dim += nd;
  if (dim < 0 || dim >= nd)
    return th_error(TH_ERR_INDEX, "%s: Dimension out of range (got %lld for %d dims)", th_eg_name(b), (long long)dim,
                    t->ndim);
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  /* Step 2: the input as (shape, byte strides) with a 0-dim input seen as [1]; the output has the same
   * layout with dim replaced by the index length, contiguous. */
  int64_t shape[TH_MAX_DIMS], sbs[TH_MAX_DIMS], obs[TH_MAX_DIMS];
  if (t->ndim == 0) {
    shape[0] = 1;
    sbs[0] = 0;
  } else {
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    th_eg_tensor_bstrides(t, sbs);
  }
  int64_t nidx = th_tensor_numel(index), dsize = shape[dim];
  int64_t oshape[TH_MAX_DIMS];
  memcpy(oshape, shape, sizeof oshape);
  oshape[dim] = nidx;
  int64_t onumel = 1;
  for (int d = 0; d < nd; d++) onumel *= oshape[d];
  if (onumel != th_tensor_numel(out))
    return th_error(TH_ERR_RUNTIME, "%s: the output has %lld elements, expected %lld", th_eg_name(b),
                    (long long)th_tensor_numel(out), (long long)onumel);
  int64_t osize = (int64_t)th_dtype_size(out->dtype);
  int64_t run = 1;
  for (int d = nd - 1; d >= 0; d--) {
    obs[d] = run * osize;
    run *= oshape[d] > 0 ? oshape[d] : 1;
  }
  /* Step 3: check every index first (nothing is written on error), then copy slice by slice. */
  const char *ip = th_eg_data(index);
  int64_t ibs = index->ndim ? index->strides[0] * (int64_t)th_dtype_size(index->dtype) : 0;
  for (int64_t k = 0; k < nidx; k++) {
    int64_t i = th_load_i64(ip + k * ibs, index->dtype);
    if (i < 0 || i >= dsize)
      return th_error(TH_ERR_INDEX, "%s: index %lld is out of bounds for dimension %lld with size %lld", th_eg_name(b),
                      (long long)i, (long long)dim, (long long)dsize);
  }
  int64_t slice[TH_MAX_DIMS];
  memcpy(slice, shape, sizeof slice);
  slice[dim] = 1;
  for (int64_t k = 0; k < nidx; k++) {
    int64_t i = th_load_i64(ip + k * ibs, index->dtype);
    th_eg_copy(th_eg_data(out) + k * obs[dim], out->dtype, obs, th_eg_data(t) + i * sbs[dim], t->dtype, sbs, nd, slice);
  }
  return TH_OK;
}

th_status th_eg_clone_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_eg_copy_tensor(out, t);
  return TH_OK;
}

/* ---- memory and devices ----------------------------------------------------------------------------- */

/* The byte range [lo, hi) a tensor's elements span in its storage (empty tensors span nothing). */
static void span(const th_tensor *t, int64_t *lo, int64_t *hi) {
  int64_t size = (int64_t)th_dtype_size(t->dtype), last = t->offset;
  *lo = *hi = t->offset * size;
  if (th_tensor_numel(t) == 0) return;
  for (int d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * t->strides[d];
  *hi = (last + 1) * size;
}

th_status th_eg_copy__ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: source first, then the destination (Thunder's argument order). */
  th_tensor *src = th_eg_tensor_arg(env, b, 0);
  if (!src) return th_last_status();
  th_tensor *dst = th_eg_tensor_arg(env, b, 1);
  if (!dst) return th_last_status();
  const th_value *v = th_eg_out_value(b, 0);
  if (!v) return th_error(TH_ERR_RUNTIME, "%s: the output is not a value", th_eg_name(b));
  /* Step 2: PyTorch refuses to write one memory location twice. */
  for (int d = 0; d < dst->ndim; d++)
    if (dst->strides[d] == 0 && dst->shape[d] > 1)
      return th_error(TH_ERR_RUNTIME,
                      "%s: unsupported operation: more than one element of the written-to "
                      "tensor refers to a single memory location. Please clone() the tensor before "
                      "performing the operation.",
                      th_eg_name(b));
  th_eg_operand s;
  TH_TRY(th_eg_bind_tensor(src, dst->ndim, dst->shape, th_eg_name(b), &s));
  /* Step 3: a source overlapping the destination is read from a copy first (unless it is the very
   * same view, a no-op). */
  th_tensor *tmp = NULL;
  if (th_tensor_shares_storage(src, dst)) {
    int64_t slo, shi, dlo, dhi;
    span(src, &slo, &shi);
    span(dst, &dlo, &dhi);
    bool same = src->dtype == dst->dtype && src->offset == dst->offset && src->ndim == dst->ndim &&
                !memcmp(src->shape, dst->shape, sizeof(int64_t) * (size_t)dst->ndim) &&
                !memcmp(src->strides, dst->strides, sizeof(int64_t) * (size_t)dst->ndim);
    if (!same && slo < dhi && dlo < shi) {
      if (!(tmp = th_tensor_empty(src->dtype, src->ndim, src->shape))) return th_last_status();
      th_eg_copy_tensor(tmp, src);
      TH_TRY(th_eg_bind_tensor(tmp, dst->ndim, dst->shape, th_eg_name(b), &s));
    } else if (same) {
      s.base = NULL; /* nothing to copy */
    }
  }
  /* Step 4: write (converting dtype), and hand the destination itself out as the result. */
  if (s.base && th_tensor_numel(dst) > 0) {
    int64_t dbs[TH_MAX_DIMS];
    th_eg_tensor_bstrides(dst, dbs);
    th_eg_copy(th_eg_data(dst), dst->dtype, dbs, s.base, s.dtype, s.bs, dst->ndim, dst->shape);
  }
  th_tensor_release(tmp);
  th_tensor_retain(dst);
  return th_rt_set(env, v, dst);
}

th_status th_eg_device_put_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  if (b->nargs < 2 || b->args[1].kind != TH_ARG_DEVICE)
    return th_error(TH_ERR_TYPE, "%s: expected a device argument", th_eg_name(b));
  th_device dev = b->args[1].u.device;
  th_rt_device_override(env, &dev); /* --device cpu: a put to the recorded device stays on the CPU */
  if (dev.type != TH_CPU) {
    char buf[32];
    th_device_str(dev, buf, sizeof buf);
    return th_error(TH_ERR_DEVICE, "%s: device %s is not available; this build runs on the CPU only", th_eg_name(b),
                    buf);
  }
  /* the tensor is already on the CPU: the result is the tensor itself */
  th_tensor_retain(t);
  return set_view(env, b, t);
}
