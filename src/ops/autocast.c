/* autocast.c — the rules (PyTorch AMP's policies) that recording applies inside an autocast region,
 * declared in ops/ops.h.
 *
 * Core's th_call_kw, recording an op at the top level of a trace with an open region, runs the op's
 * rule (th_autocast_rule: its own, else th_autocast_tag_rule, which the table installs for the
 * TH_TAG_AC_* tags) on the bound arguments before recording the op (see th_autocast_fn in core/ir.h).
 * The rules only convert arguments: every convert is a top-level prims.convert_element_type, as
 * Thunder's maybe_downcast_to records. The function transform that replays a trace under a region is
 * the transforms layer's (transforms/autocast.c). */
#include <string.h>

#include "ops/ops.h"

#define F16_BF16 ((1u << TH_F16) | (1u << TH_BF16))
#define F16_BF16_F32 ((1u << TH_F16) | (1u << TH_BF16) | (1u << TH_F32))

/* ---- converting arguments --------------------------------------------------------------------------- */

th_status th_autocast_cast(th_trace *tr, th_arg *a, th_device_type device_type, unsigned from, th_dtype to) {
  if (a->kind == TH_ARG_VALUE) {
    th_value *v = a->u.value;
    if (!v->is_tensor || v->device.type != device_type || v->dtype == to || !(from & (1u << v->dtype))) return TH_OK;
    th_arg cargs[2] = {*a, th_arg_dtype(to)}, res;
    TH_TRY(th_call(tr, TH_OP_prims_convert_element_type, 2, cargs, &res));
    *a = res;
    return TH_OK;
  }
  if (a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST) return TH_OK;
  int n = a->u.seq.n;
  if (n == 0) return TH_OK;
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)n);
  if (!items) return TH_ERR_NOMEM;
  memcpy(items, a->u.seq.items, sizeof(th_arg) * (size_t)n);
  for (int i = 0; i < n; i++) TH_TRY(th_autocast_cast(tr, &items[i], device_type, from, to));
  a->u.seq.items = items;
  return TH_OK;
}

/* ---- the built-in rules ------------------------------------------------------------------------------ */

th_status th_autocast_rule_lower(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                                 th_device_type device_type) {
  for (int i = 0; i < sym->schema.nparams; i++)
    TH_TRY(th_autocast_cast(tr, &args[i], device_type, F16_BF16_F32, dtype));
  return TH_OK;
}

th_status th_autocast_rule_fp32(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                                th_device_type device_type) {
  (void)dtype;
  /* PyTorch: "Ops called with an explicit dtype=... argument are not eligible" */
  for (int i = 0; i < sym->schema.nparams; i++)
    if (!strcmp(sym->schema.params[i].name, "dtype") && args[i].kind != TH_ARG_NONE) return TH_OK;
  for (int i = 0; i < sym->schema.nparams; i++) TH_TRY(th_autocast_cast(tr, &args[i], device_type, F16_BF16, TH_F32));
  return TH_OK;
}

typedef struct {
  th_device_type dev;
  unsigned seen; /* bit set of the eligible dtypes met */
} promote_ctx;

static void note_eligible(th_value *v, void *p) {
  promote_ctx *c = p;
  if (v->is_tensor && v->device.type == c->dev && (F16_BF16_F32 & (1u << v->dtype))) c->seen |= 1u << v->dtype;
}

th_status th_autocast_rule_promote(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                                   th_device_type device_type) {
  (void)dtype;
  promote_ctx c = {device_type, 0};
  for (int i = 0; i < sym->schema.nparams; i++) th_arg_foreach_value(&args[i], note_eligible, &c);
  if (!c.seen) return TH_OK;
  /* the widest: float32 if any operand is float32 (or float16 meets bfloat16), else the one low dtype */
  th_dtype to = (c.seen & (1u << TH_F32)) || c.seen == F16_BF16 ? TH_F32 : c.seen == (1u << TH_F16) ? TH_F16 : TH_BF16;
  for (int i = 0; i < sym->schema.nparams; i++) TH_TRY(th_autocast_cast(tr, &args[i], device_type, F16_BF16_F32, to));
  return TH_OK;
}

th_status th_autocast_tag_rule(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                               th_device_type device_type) {
  unsigned t = sym->tags;
  if (t & TH_TAG_AC_LOWER) return th_autocast_rule_lower(tr, sym, args, dtype, device_type);
  if ((t & TH_TAG_AC_FP32) || ((t & TH_TAG_AC_FP32_CUDA) && device_type == TH_CUDA))
    return th_autocast_rule_fp32(tr, sym, args, dtype, device_type);
  if (t & TH_TAG_AC_PROMOTE) return th_autocast_rule_promote(tr, sym, args, dtype, device_type);
  return TH_OK;
}
