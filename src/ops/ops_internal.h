/* ops_internal.h — what the op family files share: declarations of every meta/decomposition named
 * in ops.def (generated from it), and small helpers for writing metas and decompositions. */
#ifndef TH_OPS_INTERNAL_H
#define TH_OPS_INTERNAL_H

#include "core/ir.h"
#include "ops/ops.h"

#define TH_PRIM(name, schema, tags, meta, cexpr)                                                                       \
  th_status meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out);
#define TH_TORCH(name, schema, tags, decomp, aliases)                                                                  \
  th_status decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out);
#include "ops/ops.def"
#undef TH_PRIM
#undef TH_TORCH

#endif
