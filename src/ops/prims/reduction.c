/* reduction.c — metas of the reduction prims: sum, prod, amax, amin; var, var_mean; argmax, argmin.
 *
 * Strict as every prim (Thunder §3.3): dims arrive canonical — non-negative, unique, in range, and
 * non-empty unless the input is 0-dim (a 0-dim tensor also accepts dims (0,), which PyTorch's dim
 * wrapping produces for it). The reduced dims are dropped (keepdim is the torch layer's
 * broadcast_in_dim) and the dtype is unchanged (accumulation dtypes are chosen by the torch layer).
 * fp8 inputs are rejected (convert first). amax/amin/argmax/argmin also reject reducing an empty
 * extent, which has no identity (PyTorch: "Expected reduction dim 0 to have non-zero size."). */
#include <inttypes.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"

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
          "%s: Expected dims=%s to contain only valid (non-negative, in range) dimensions of a tensor of shape %s",
          op, th_meta_shape_tuple_str(dims, n, b0, sizeof b0),
          th_meta_shape_tuple_str(a->shape, a->ndim, b1, sizeof b1));
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
