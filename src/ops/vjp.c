/* vjp.c — the registry of vjp rules (see vjp.h): the registration arrays of the family files merged
 * into one table indexed by op id, built once; and the small helpers rules share. */
#include <threads.h>

#include "ops/vjp.h"

static const th_vjp_entry *table[TH_OP_COUNT];
static once_flag table_once = ONCE_FLAG_INIT;

static void add(const th_vjp_entry *e, int n) {
  for (int i = 0; i < n; i++) {
    TH_ASSERT((int)e[i].op >= 0 && e[i].op < TH_OP_COUNT);
    TH_ASSERT(!table[e[i].op]); /* one entry per op */
    TH_ASSERT(e[i].kind != TH_VJP_RULE || e[i].fn);
    table[e[i].op] = &e[i];
  }
}

static void build(void) {
  add(th_vjp_table_prims_elementwise, th_vjp_table_prims_elementwise_n);
  add(th_vjp_table_prims_creation, th_vjp_table_prims_creation_n);
  add(th_vjp_table_prims_shape, th_vjp_table_prims_shape_n);
  add(th_vjp_table_prims_reduction, th_vjp_table_prims_reduction_n);
  add(th_vjp_table_prims_linalg, th_vjp_table_prims_linalg_n);
  add(th_vjp_table_prims_memory, th_vjp_table_prims_memory_n);
  add(th_vjp_table_torch_elementwise, th_vjp_table_torch_elementwise_n);
  add(th_vjp_table_torch_reduction, th_vjp_table_torch_reduction_n);
  add(th_vjp_table_torch_nn, th_vjp_table_torch_nn_n);
  add(th_vjp_table_torch_shape, th_vjp_table_torch_shape_n);
  add(th_vjp_table_torch_scaled_mm, th_vjp_table_torch_scaled_mm_n);
  add(th_vjp_table_torch_float8_linear, th_vjp_table_torch_float8_linear_n);

  /* conv */
  add(th_vjp_table_prims_conv, th_vjp_table_prims_conv_n);

  /* norm */
  add(th_vjp_table_torch_norm, th_vjp_table_torch_norm_n);
  add(th_vjp_table_torch_reduction_more, th_vjp_table_torch_reduction_more_n);

  /* pool */
  add(th_vjp_table_prims_pool, th_vjp_table_prims_pool_n);

  /* index */
  add(th_vjp_table_prims_index, th_vjp_table_prims_index_n);

  /* scan */
  add(th_vjp_table_prims_scan, th_vjp_table_prims_scan_n);

  /* attention */
  add(th_vjp_table_prims_attention, th_vjp_table_prims_attention_n);

  /* random */
  add(th_vjp_table_torch_random, th_vjp_table_torch_random_n);

  /* stat */
  add(th_vjp_table_prims_stat, th_vjp_table_prims_stat_n);
  add(th_vjp_table_torch_stat, th_vjp_table_torch_stat_n);

  add(th_vjp_table_prims_linalg_lapack, th_vjp_table_prims_linalg_lapack_n);
}

const th_vjp_entry *th_vjp_get(th_op_id id) {
  if ((int)id < 0 || id >= TH_OP_COUNT) return NULL;
  call_once(&table_once, build);
  return table[id];
}

/* ---- helpers ---------------------------------------------------------------------------------------- */

bool th_vjp_is_float_tensor(const th_arg *a) {
  return a->kind == TH_ARG_VALUE && a->u.value->is_tensor && th_dtype_is_float(a->u.value->dtype);
}

th_arg th_vjp_out(const th_bsym *b) {
  if (b->out.kind == TH_ARG_VALUE) return b->out;
  if ((b->out.kind == TH_ARG_TUPLE || b->out.kind == TH_ARG_LIST) && b->out.u.seq.n > 0) return b->out.u.seq.items[0];
  return th_arg_none();
}

th_status th_vjp_sum_to(th_trace *tr, th_arg g, const th_arg *like, th_arg *out) {
  *out = th_arg_none();
  if (!th_meta_is_tensor(like)) return TH_OK;
  const th_value *l = like->u.value, *gv = g.u.value;
  bool same = l->ndim == gv->ndim;
  for (int i = 0; same && i < l->ndim; i++) same = l->shape[i] == gv->shape[i];
  if (same) {
    *out = g;
    return TH_OK;
  }
  /* the dims `like` was broadcast along: g's leading extra dims and those where like has extent 1 */
  int lead = gv->ndim - l->ndim;
  TH_ASSERT(lead >= 0);
  int64_t dims[TH_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < gv->ndim; i++)
    if (i < lead || (l->shape[i - lead] == 1 && gv->shape[i] != 1)) dims[nd++] = i;
  th_arg items[TH_MAX_DIMS], r = g;
  if (nd > 0) TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, g, th_tu_ints(items, nd, dims), &r));
  return th_tu_reshape(tr, r, l->ndim, l->shape, out);
}

th_status th_vjp_zeros_like(th_trace *tr, const th_value *v, th_arg *out) {
  return th_tu_call1(tr, TH_OP_ltorch_zeros_like, th_arg_value((th_value *)v), out);
}
