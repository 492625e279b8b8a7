/* passes.h — the execution pass: claiming bound symbols for executors (Thunder's "Transform for
 * execution"). Fusion runs after it, as its own pass (th_fuser_pass, executors/fuser/fuser.h). */
#ifndef TH_PASSES_H
#define TH_PASSES_H

#include "core/ir.h"
#include "executors/kernel.h"
#include "ops/ops.h"

/* Transform for execution (Thunder's _transform_for_operator_executor_execution + dce): walks tr's
 * top-level bsyms in order; the first executor of `execs` (priority order) whose impl table has the
 * bsym's symbol and whose checker accepts the call claims it (a copy with ->executor set to the
 * executor's name). Utility prims (return, del, comment) are kept unclaimed. An unclaimed torch-level
 * bsym is replaced by its subsymbols, tried in turn; one without subsymbols (a parsed trace printed at
 * depth 1) has its decomposition re-run first, its results bound to the bsym's original output
 * values. Fusion regions and other dynamic symbols are replaced by their subsymbols. Then dead code
 * is eliminated. Errors: a prim nobody claims, or a dynamic symbol without subsymbols
 * (TH_ERR_NOT_IMPLEMENTED). *out: provenance "Transform for execution (took N milliseconds)"; every
 * argument is copied into its arena, so tr may be freed first. */
th_status th_transform_for_execution(const th_trace *tr, const th_executor_desc *const *execs, int nexecs,
                                     th_trace **out);

#endif
