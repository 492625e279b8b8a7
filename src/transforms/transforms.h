/* transforms.h — internal trace -> trace passes, one banner per .c file.
 *
 * Every pass reads a trace and builds a new one in the same compilation (th_trace_derive: same
 * session, so values are shared and never copied); the input trace is left as it was and may be
 * freed independently. Each result records its provenance, "<Pass name> (took N milliseconds)". */
#ifndef TH_TRANSFORMS_H
#define TH_TRANSFORMS_H

#include "core/ir.h"
#include "ops/ops.h"

/* ---- dce.c ---------------------------------------------------------------------------------------
 * Dead Code Elimination (Thunder's dce): a backward walk from the return keeps a top-level bsym when
 * one of its outputs is needed later, or when it (or any subsymbol, recursively) has an effect:
 * TH_TAG_DONT_DCE (return, copy_, uniform), TH_TAG_RANDOM or TH_TAG_IN_PLACE. Comments are kept;
 * a python_del keeps only the values that are still defined (dropped when none is). Subsymbols are
 * not touched. *out: provenance "Dead Code Elimination (took N milliseconds)". */
th_status th_dce(const th_trace *tr, th_trace **out);
/* The same elimination applied in place (no new trace, no provenance), for passes that build a trace
 * and then clean it, is core's th_dce_in_place (core/ir.h). */

/* ---- autocast.c ----------------------------------------------------------------------------------
 * Autocast as a function transform (thunder/transform.h th_transform_autocast): a new trace into which
 * every top-level bsym is recorded again under a CPU and a CUDA autocast region of `dtype` (f16/bf16,
 * else TH_ERR_VALUE); the rules recording applies are the ops layer's (ops/ops.h; th_autocast_rule in
 * core/ir.h finds a symbol's). *out: provenance "Autocast (took N milliseconds)". */
th_status th_autocast(const th_trace *tr, th_dtype dtype, th_trace **out);

/* ---- float8.c ------------------------------------------------------------------------------------
 * The float8 training transform (thunder/transform.h th_transform_float8): eligible linears become
 * amax -> scale -> saturated fp8 casts -> ltorch._scaled_mm, the rest is copied with the linears'
 * outputs substituted. *out: provenance "Float8 (took N milliseconds)". */
struct th_float8_options;
th_status th_float8(const th_trace *tr, const struct th_float8_options *opts, th_trace **out);

/* ---- cse.c ---------------------------------------------------------------------------------------
 * Common Subexpression Elimination (Thunder's cse): a forward walk keys each top-level bsym by
 * (symbol, arguments after rewriting earlier redundant outputs, keyword arguments, executor); a bsym
 * whose key was seen is dropped and its outputs map to the first occurrence's, and every later use
 * (arguments, subsymbols, the return) is rewritten. Only pure bsyms merge: never RANDOM, IN_PLACE,
 * DONT_DCE (recursively through subsymbols), UTILITY, dynamic symbols or
 * ltorch.scaled_dot_product_attention. Constants compare by kind and value (floats bitwise), values
 * by id. A del drops values that were merged away or merged into; then DCE runs in place.
 * *out: provenance "Common Subexpression Elimination (took N milliseconds)". */
th_status th_cse(const th_trace *tr, th_trace **out);

/* ---- fuse_attention.c ------------------------------------------------------------------------------
 * Attention written out by hand (matmul -> [scale] -> [masked_fill -inf] -> softmax -> [dropout 0] ->
 * matmul, every intermediate used once) recorded again as ltorch.scaled_dot_product_attention, so the
 * flash-attention prim runs it (the file comment has the exact rules). *out is NULL when nothing matched
 * or THUNDER_FUSE_ATTENTION=0; else provenance "Fuse Attention (took N milliseconds)". */
th_status th_fuse_attention(const th_trace *tr, th_trace **out);

/* ---- del_last_used.c -----------------------------------------------------------------------------
 * Delete Last Used (Thunder's del_last_used): old dels are dropped; after each top-level bsym before
 * the return (comments excepted), one `del` (python_del, one TUPLE arg) of the values whose last use
 * it is, its outputs then its arguments, in flattened order; values reachable from the return (or
 * used after it) are never deleted; inputs nobody uses get one del each before the first bsym.
 * *out: provenance "Delete Last Used (took N milliseconds)". */
th_status th_del_last_used(const th_trace *tr, th_trace **out);

#endif
