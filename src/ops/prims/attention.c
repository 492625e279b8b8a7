/* attention.c — metas and the vjp rule of the fused attention prims (eager kernel:
 * executors/eager/attention.c):
 *   scaled_dot_product_flash_attention(q, k, v, mask, is_causal, scale) -> (out, logsumexp)
 *   scaled_dot_product_flash_attention_backward(g, q, k, v, out, logsumexp, mask, is_causal, scale)
 *     -> (grad_q, grad_k, grad_v)
 * q [..., Hq, L, E], k [..., Hkv, S, E], v [..., Hkv, S, Ev]: one rank (at least 3), identical batch dims,
 * Hq a multiple of Hkv (query head h reads key/value head h / (Hq / Hkv)), one dtype (float32 or
 * bfloat16), one device. mask: None, bool or float (float32 or the inputs' dtype), of rank at most q's,
 * broadcasting to [..., Hq, L, S]. out [..., Hq, L, Ev] has q's dtype, logsumexp [..., Hq, L] is float32.
 *
 * The vjp rule is the backward prim (FlashAttention-2's recomputation from the saved logsumexp); the
 * mask gets no gradient (the torch layer decomposes instead when a float mask requires one), nor does
 * logsumexp's cotangent flow (nothing in the torch layer returns it). */
#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

static th_status check_operand(const char *op, const char *name, const th_value *t, const th_value *q) {
  char s[TH_META_SHAPE_BUF];
  if (t->dtype != TH_F32 && t->dtype != TH_BF16)
    return th_error(TH_ERR_RUNTIME, "%s: Expected %s to be a float32 or bfloat16 tensor, but %s.dtype=%s", op, name,
                    name, th_dtype_name(t->dtype));
  if (t->ndim < 3)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected %s to have at least 3 dims (..., heads, length, embedding), but %s.shape=%s", op,
                    name, name, th_meta_shape_str(t->shape, t->ndim, s, sizeof s));
  if (q && (t->dtype != q->dtype || t->ndim != q->ndim || !th_device_eq(t->device, q->device)))
    return th_error(TH_ERR_RUNTIME, "%s: Expected %s of query's dtype %s, rank %d and device, but got %s of rank %d",
                    op, name, th_dtype_name(q->dtype), q->ndim, th_dtype_name(t->dtype), t->ndim);
  return TH_OK;
}

/* q, k, v (and the mask at args[mi]) as the forward prim takes them. */
static th_status check_qkv(const char *op, const th_arg *args, int mi) {
  const th_value *q = th_meta_tensor(&args[0]), *k = th_meta_tensor(&args[1]), *v = th_meta_tensor(&args[2]);
  if (!q || !k || !v) return th_error(TH_ERR_TYPE, "%s: query, key and value must be tensors", op);
  TH_TRY(check_operand(op, "query", q, NULL));
  TH_TRY(check_operand(op, "key", k, q));
  TH_TRY(check_operand(op, "value", v, q));
  const int n = q->ndim;
  char qs[TH_META_SHAPE_BUF], ks[TH_META_SHAPE_BUF], vs[TH_META_SHAPE_BUF];
  bool ok = k->shape[n - 1] == q->shape[n - 1] && v->shape[n - 2] == k->shape[n - 2] &&
            k->shape[n - 3] == v->shape[n - 3] && k->shape[n - 3] > 0 && q->shape[n - 3] % k->shape[n - 3] == 0;
  for (int d = 0; ok && d < n - 3; d++) ok = q->shape[d] == k->shape[d] && q->shape[d] == v->shape[d];
  if (!ok)
    return th_error(
      TH_ERR_RUNTIME,
      "%s: Expected query [..., Hq, L, E], key [..., Hkv, S, E] and value [..., Hkv, S, Ev] with identical "
      "batch dims and Hq a multiple of Hkv, but got query %s, key %s, value %s",
      op, th_meta_shape_str(q->shape, n, qs, sizeof qs), th_meta_shape_str(k->shape, n, ks, sizeof ks),
      th_meta_shape_str(v->shape, n, vs, sizeof vs));
  if (args[mi].kind != TH_ARG_NONE) {
    const th_value *m = th_meta_tensor(&args[mi]);
    if (!m) return th_error(TH_ERR_TYPE, "%s: attn_mask must be a tensor or None", op);
    if (m->dtype != TH_BOOL && m->dtype != TH_F32 && m->dtype != q->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: Expected attn_mask of dtype bool, float32 or %s, but got %s", op,
                      th_dtype_name(q->dtype), th_dtype_name(m->dtype));
    int64_t want[TH_MAX_DIMS];
    for (int d = 0; d < n - 2; d++) want[d] = q->shape[d];
    want[n - 2] = q->shape[n - 2];
    want[n - 1] = k->shape[n - 2];
    ok = m->ndim <= n;
    for (int d = 0; ok && d < m->ndim; d++) {
      int64_t e = m->shape[m->ndim - 1 - d];
      ok = e == 1 || e == want[n - 1 - d];
    }
    if (!ok)
      return th_error(TH_ERR_RUNTIME, "%s: attn_mask of shape %s does not broadcast to [..., Hq, L, S] = %s", op,
                      th_meta_shape_str(m->shape, m->ndim, ks, sizeof ks), th_meta_shape_str(want, n, qs, sizeof qs));
  }
  return TH_OK;
}

static th_status new_tuple(th_trace *tr, int n, th_arg **items) {
  *items = th_arena_alloc(tr->arena, (size_t)n * sizeof(th_arg));
  return *items ? TH_OK : TH_ERR_NOMEM;
}

th_status prims_sdpa_flash_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(check_qkv(sym->qualname, args, 3));
  const th_value *q = th_meta_tensor(&args[0]), *k = th_meta_tensor(&args[1]), *v = th_meta_tensor(&args[2]);
  const int n = q->ndim;
  int64_t shape[TH_MAX_DIMS];
  for (int d = 0; d < n; d++) shape[d] = q->shape[d];
  shape[n - 1] = v->shape[n - 1];
  bool rg = q->requires_grad || k->requires_grad || v->requires_grad;
  th_arg *items;
  TH_TRY(new_tuple(tr, 2, &items));
  TH_TRY(th_meta_new_tensor(tr, q->dtype, q->device, n, shape, rg, &items[0]));
  TH_TRY(th_meta_new_tensor(tr, TH_F32, q->device, n - 1, shape, false, &items[1]));
  *out = th_arg_tuple(2, items);
  return TH_OK;
}

th_status prims_sdpa_flash_backward_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  TH_TRY(check_qkv(op, args + 1, 5));
  const th_value *g = th_meta_tensor(&args[0]), *q = th_meta_tensor(&args[1]), *k = th_meta_tensor(&args[2]),
                 *v = th_meta_tensor(&args[3]), *o = th_meta_tensor(&args[4]), *lse = th_meta_tensor(&args[5]);
  const int n = q->ndim;
  bool ok = g && o && lse && g->dtype == q->dtype && o->dtype == q->dtype && lse->dtype == TH_F32 && g->ndim == n &&
            o->ndim == n && lse->ndim == n - 1;
  for (int d = 0; ok && d < n; d++) {
    int64_t want = d == n - 1 ? v->shape[n - 1] : q->shape[d];
    ok = g->shape[d] == want && o->shape[d] == want && (d == n - 1 || lse->shape[d] == q->shape[d]);
  }
  if (!ok)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected grad_out and out [..., Hq, L, Ev] of query's dtype and a float32 logsumexp "
                    "[..., Hq, L]",
                    op);
  th_arg *items;
  TH_TRY(new_tuple(tr, 3, &items));
  TH_TRY(th_meta_new_tensor(tr, q->dtype, q->device, n, q->shape, false, &items[0]));
  TH_TRY(th_meta_new_tensor(tr, k->dtype, k->device, n, k->shape, false, &items[1]));
  TH_TRY(th_meta_new_tensor(tr, v->dtype, v->device, n, v->shape, false, &items[2]));
  *out = th_arg_tuple(3, items);
  return TH_OK;
}

static th_status sdpa_flash_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (cts[1].kind != TH_ARG_NONE)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "prims.scaled_dot_product_flash_attention: the gradient through the logsumexp output is not "
                    "supported by thunder_c (only the attention output's)");
  const th_arg *o = b->out.u.seq.items;
  th_arg args[9] = {cts[0], b->args[0], b->args[1], b->args[2], o[0], o[1], b->args[3], b->args[4], b->args[5]};
  th_arg r;
  TH_TRY(th_tu_call_kw(tr, TH_OP_prims_scaled_dot_product_flash_attention_backward, 9, args, 0, NULL, NULL, &r));
  for (int i = 0; i < 3; i++)
    if (th_vjp_is_float_tensor(&b->args[i])) grads[i] = r.u.seq.items[i];
  return TH_OK;
}

/* Second derivatives of attention go through the decomposition (torch.func's double backward of sdpa);
 * the fused backward has none. */
static th_status sdpa_flash_backward_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  (void)tr, (void)b, (void)cts, (void)grads;
  return th_error(TH_ERR_NOT_IMPLEMENTED,
                  "torch.nn.functional.scaled_dot_product_attention: the second derivative of the fused attention "
                  "(prims.scaled_dot_product_flash_attention_backward) is not supported by thunder_c");
}

const th_vjp_entry th_vjp_table_prims_attention[] = {
  {TH_OP_prims_scaled_dot_product_flash_attention, TH_VJP_RULE, sdpa_flash_vjp},
  {TH_OP_prims_scaled_dot_product_flash_attention_backward, TH_VJP_RULE, sdpa_flash_backward_vjp},
};
const int th_vjp_table_prims_attention_n =
  (int)(sizeof th_vjp_table_prims_attention / sizeof th_vjp_table_prims_attention[0]);
