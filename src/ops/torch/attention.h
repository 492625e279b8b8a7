/* attention.h — the fused path of ltorch.scaled_dot_product_attention (torch/attention.c). */
#ifndef TH_OPS_TORCH_ATTENTION_H
#define TH_OPS_TORCH_ATTENTION_H

#include "ops/torch/torch_util.h"

/* Records F.scaled_dot_product_attention(args...) as prims.scaled_dot_product_flash_attention when the
 * fused prim covers the case (validated arguments, dropout_p = p, the resolved scale); sets *fused to
 * false and records nothing otherwise, leaving the case to the decomposition. */
th_status th_sdpa_flash_try(th_trace *tr, const th_arg *args, double p, bool causal, double scale, bool gqa,
                            th_arg *out, bool *fused);

#endif
