/* transforms.h — internal trace -> trace passes, one banner per .c file.
 *
 * Every pass reads a trace and builds a new one in the same compilation (th_trace_derive: same
 * session, so values are shared and never copied); the input trace is left as it was and may be
 * freed independently. Each result records its provenance, "<Pass name> (took N milliseconds)". */
#ifndef TH_TRANSFORMS_H
#define TH_TRANSFORMS_H

#include "core/ir.h"
#include "executors/kernel.h"
#include "thunder/jit.h"

/* ---- dce.c ---------------------------------------------------------------------------------------
 * Dead Code Elimination (Thunder's dce): a backward walk from the return keeps a top-level bsym when
 * one of its outputs is needed later, or when it (or any subsymbol, recursively) has an effect:
 * TH_TAG_DONT_DCE (return, copy_, uniform), TH_TAG_RANDOM or TH_TAG_IN_PLACE. Comments are kept;
 * a python_del keeps only the values that are still defined (dropped when none is). Subsymbols are
 * not touched. *out: provenance "Dead Code Elimination (took N milliseconds)". */
th_status th_dce(const th_trace *tr, th_trace **out);

/* The same elimination applied in place to tr's top-level bsym list (no new trace, no provenance);
 * used by passes that build a trace and then clean it. */
th_status th_dce_in_place(th_trace *tr);

/* True if bsym b must survive DCE whatever its outputs (see above). */
bool th_bsym_has_effect(const th_bsym *b);

/* Deep-copies bsym src (arguments, outputs, subsymbols, a dynamic symbol, the executor name) into
 * dst's arena; values are shared, not copied, except that `map` (may be NULL) substitutes each value
 * met on the way (map returns its argument to keep it). */
typedef th_value *(*th_value_map_fn)(th_value *v, void *ctx);
th_status th_bsym_clone(th_trace *dst, const th_bsym *src, th_value_map_fn map, void *ctx,
                        th_bsym **out);

/* ---- executors/passes.c ------------------------------------------------------------------------
 * Transform for execution (Thunder's _transform_for_operator_executor_execution + dce): walks tr's
 * top-level bsyms in order; the first executor of `execs` (priority order) whose impl table has the
 * bsym's symbol and whose checker accepts the call claims it (a copy with ->executor set to the
 * executor's name). Utility prims (return, del, comment) are kept unclaimed. An unclaimed torch-level
 * bsym is replaced by its subsymbols, tried in turn; one without subsymbols (a parsed trace printed at
 * depth 1) has its decomposition re-run first, its results bound to the bsym's original output
 * values. Fusion regions and other dynamic symbols are replaced by their subsymbols. Then dead code
 * is eliminated. Errors: a prim nobody claims, or a dynamic symbol without subsymbols
 * (TH_ERR_NOT_IMPLEMENTED). *out: provenance "Transform for execution (took N milliseconds)"; every
 * argument is copied into its arena, so tr may be freed first. */
th_status th_transform_for_execution(const th_trace *tr, const th_executor_desc *const *execs,
                                     int nexecs, th_trace **out);

/* ---- runtime/execute.c ---------------------------------------------------------------------------
 * th_program_compile with executor descriptors instead of names (th_program_compile resolves the
 * names "blas" and "eager" and calls this). For executors that are not built in (tests, and later the
 * public executor registry). opts->executors is ignored. */
th_status th_program_compile_with(const th_trace *tr, const th_compile_options *opts,
                                  const th_executor_desc *const *execs, int nexecs, th_program **out);

/* Like th_tensor_empty (a new contiguous, uninitialized tensor; NULL with an error set), but a
 * tensor of 256 KiB or more takes its memory from a pool of warm blocks, and gives it back when its
 * last reference goes (th_rt_alloc_output uses it; so may kernels for large scratch tensors). */
th_tensor *th_rt_pool_empty(th_dtype dtype, int ndim, const int64_t *shape);

/* A monotonic clock in milliseconds (dce.c), for the "(took N milliseconds)" of provenance strings:
 * N = (long)(th_pass_clock_ms() - start), floored as Thunder does. */
double th_pass_clock_ms(void);

#endif
