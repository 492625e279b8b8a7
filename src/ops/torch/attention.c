/* attention.c — the fused path of ltorch.scaled_dot_product_attention: the flash attention prim
 * (prims/attention.c) in place of the matmul / softmax / matmul decomposition (torch/nn.c) when it
 * computes the same function:
 *   query, key and value float32 or bfloat16 of one rank, at least 2 (a 2-D [L, E] problem gets a head
 *   dim of 1 and loses it after), identical batch dims; key and value with query's head count, or with
 *   enable_gqa one head count dividing query's;
 *   dropout_p = 0;
 *   attn_mask None or bool, of rank at most query's, broadcasting to [..., Hq, L, S].
 * Everything else (float64 and float16, broadcast batch dims, dropout, a float mask) decomposes. A float
 * (additive) mask decomposes because whether it needs a gradient is decided after tracing and the fused
 * backward gives none (the prim's kernel takes one; its gradient would need the L x S scores). THUNDER_SDPA_FLASH=0 in the environment makes every case decompose (benchmarks and tests
 * of the unfused result). bfloat16 runs in float32 inside the kernel and rounds once, so it is at least as
 * close to the float32 result as the decomposition's bfloat16 product of the rounded probabilities. */
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"
#include "ops/torch/attention.h"

static bool flash_disabled(void) {
  const char *e = getenv("THUNDER_SDPA_FLASH");
  return e && !strcmp(e, "0");
}

th_status th_sdpa_flash_try(th_trace *tr, const th_arg *args, double p, bool causal, double scale, bool gqa,
                            th_arg *out, bool *fused) {
  *fused = false;
  const th_value *q = args[0].u.value, *k = args[1].u.value, *v = args[2].u.value;
  const th_arg *mask = &args[3];
  const int n = q->ndim;
  if (flash_disabled() || p != 0.0 || (q->dtype != TH_F32 && q->dtype != TH_BF16)) return TH_OK;
  if (k->ndim != n || v->ndim != n || (n == 2 && gqa))
    return TH_OK; /* 2-D with enable_gqa: the decomposition's error */
  if (n >= 3) {
    for (int d = 0; d < n - 3; d++)
      if (k->shape[d] != q->shape[d] || v->shape[d] != q->shape[d]) return TH_OK;
    int64_t hq = q->shape[n - 3], hk = k->shape[n - 3], hv = v->shape[n - 3];
    if (hk != hv || (hk != hq && !(gqa && hk > 0 && hq % hk == 0))) return TH_OK;
  }
  if (mask->kind != TH_ARG_NONE) {
    const th_value *m = mask->u.value;
    if (m->ndim > n || m->dtype != TH_BOOL) return TH_OK;
    for (int d = 1; d <= m->ndim; d++) { /* broadcasts to [..., Hq, L, S] (else the decomposition's error) */
      int64_t e = m->shape[m->ndim - d], want = d == 1 ? k->shape[n - 2] : q->shape[n - d];
      if (e != 1 && e != want) return TH_OK;
    }
  }
  th_arg qq = args[0], kk = args[1], vv = args[2];
  if (n == 2) {
    TH_TRY(th_tu_unsqueeze(tr, qq, 0, &qq));
    TH_TRY(th_tu_unsqueeze(tr, kk, 0, &kk));
    TH_TRY(th_tu_unsqueeze(tr, vv, 0, &vv));
  }
  th_arg fargs[6] = {qq, kk, vv, *mask, th_arg_bool(causal), th_arg_float(scale)}, r;
  TH_TRY(th_tu_call_kw(tr, TH_OP_prims_scaled_dot_product_flash_attention, 6, fargs, 0, NULL, NULL, &r));
  th_arg o = r.u.seq.items[0];
  if (n == 2) TH_TRY(th_tu_squeeze(tr, o, 1, (const int64_t[]){0}, &o));
  *out = o;
  *fused = true;
  return TH_OK;
}
