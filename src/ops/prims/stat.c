/* stat.c — the meta and vjp rule of prims.mode: mode(a, dim) -> (values, indices) with dim removed
 * (a 0-dim tensor is one row of one element); values like a, indices int64. Its gradient is PyTorch's
 * value_selecting_reduction_backward: the values' cotangent at the selected indices, zeros elsewhere. */
#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

th_status prims_mode_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  if (!a) return th_error(TH_ERR_TYPE, "%s: expected a tensor", op);
  int64_t dim;
  TH_TRY(th_meta_int(op, "dim", &args[1], &dim));
  int rank = a->ndim > 0 ? a->ndim : 1;
  if (dim < 0 || dim >= rank)
    return th_error(TH_ERR_INDEX,
                    "%s: Expected dim=%lld to be a valid (non-negative, in range) dimension of a tensor "
                    "with %d dimensions",
                    op, (long long)dim, a->ndim);
  if (th_dtype_is_fp8(a->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Unsupported input dtype %s", op, th_meta_dtype_repr(a->dtype));
  if (a->ndim && a->shape[dim] == 0)
    return th_error(TH_ERR_INDEX, "%s: mode(): Expected reduction dim %lld to have non-zero size.", op, (long long)dim);
  int64_t shape[TH_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < a->ndim; i++)
    if (i != dim) shape[n++] = a->shape[i];
  th_arg *items = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  if (!items) return TH_ERR_NOMEM;
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, n, shape, &items[0]));
  TH_TRY(th_meta_new_tensor(tr, TH_I64, a->device, n, shape, false, &items[1]));
  *out = th_arg_tuple(2, items);
  return TH_OK;
}

static th_status mode_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a) || cts[0].kind == TH_ARG_NONE) return TH_OK;
  const th_value *av = a->u.value;
  if (av->ndim == 0) {
    grads[0] = cts[0];
    return TH_OK;
  }
  int64_t dim;
  TH_TRY(th_meta_int(b->sym->qualname, "dim", &b->args[1], &dim));
  th_arg g, idx, z;
  TH_TRY(th_tu_unsqueeze(tr, cts[0], (int)dim, &g));
  TH_TRY(th_tu_unsqueeze(tr, b->out.u.seq.items[1], (int)dim, &idx));
  TH_TRY(th_vjp_zeros_like(tr, av, &z));
  th_arg sa[4] = {z, th_arg_int(dim), idx, g};
  return th_call(tr, TH_OP_ltorch_scatter, 4, sa, &grads[0]);
}

const th_vjp_entry th_vjp_table_prims_stat[] = {
  {TH_OP_prims_mode, TH_VJP_RULE, mode_vjp},
};
const int th_vjp_table_prims_stat_n = (int)(sizeof th_vjp_table_prims_stat / sizeof th_vjp_table_prims_stat[0]);
