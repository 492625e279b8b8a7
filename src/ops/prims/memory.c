/* memory.c — meta of the memory prim copy_(copy_from, copy_to, *, grad_enabled).
 *
 * Note the argument order, as Thunder's: the source first. The two tensors must share device, shape
 * and dtype (the torch layer's copy_ converts and broadcasts the source first); every dtype is
 * accepted, fp8 included. The output is a new proxy like copy_to: it stands for the destination after
 * the write, so later readers depend on the copy (functionalized in-place ops, as Thunder does). */
#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

/* ---- copy_(copy_from, copy_to, *, grad_enabled) ------------------------------------------------------ */

th_status prims_copy_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *src = th_meta_tensor(&args[0]), *dst = th_meta_tensor(&args[1]);
  if (!th_device_eq(src->device, dst->device)) {
    char d0[32], d1[32];
    return th_error(TH_ERR_RUNTIME, "%s: Expected device %s but found %s!", op,
                    th_device_str(dst->device, d0, sizeof d0), th_device_str(src->device, d1, sizeof d1));
  }
  bool same = src->ndim == dst->ndim;
  for (int d = 0; same && d < src->ndim; d++) same = src->shape[d] == dst->shape[d];
  if (!same) {
    char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME, "%s: Expected copy_from.shape=%s to equal copy_to.shape=%s", op,
                    th_meta_shape_str(src->shape, src->ndim, s0, sizeof s0),
                    th_meta_shape_str(dst->shape, dst->ndim, s1, sizeof s1));
  }
  if (src->dtype != dst->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: Expected dtype %s but found %s!", op, th_meta_dtype_repr(dst->dtype),
                    th_meta_dtype_repr(src->dtype));
  return th_meta_new_tensor_like(tr, dst, dst->dtype, dst->ndim, dst->shape, out);
}

/* ---- vjp (ops/vjp.h) -----------------------------------------------------------------------------------
 * copy_(src, dst): the output is dst's new version, equal to src, so src gets the output's cotangent
 * and dst's old version none (it was overwritten). A copy_ onto a trace input that requires grad is
 * refused by the grad transform (PyTorch: "a leaf Variable that requires grad is being used in an
 * in-place operation."). */
static th_status copy_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  (void)tr;
  if (th_vjp_is_float_tensor(&b->args[0])) grads[0] = cts[0];
  return TH_OK;
}

const th_vjp_entry th_vjp_table_prims_memory[] = {
  {TH_OP_prims_copy_, TH_VJP_RULE, copy_vjp},
};
const int th_vjp_table_prims_memory_n = (int)(sizeof th_vjp_table_prims_memory / sizeof th_vjp_table_prims_memory[0]);
