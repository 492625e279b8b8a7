/* thunder/transform.h — trace -> trace transforms.
 *
 * Every transform is a pure function: it reads one trace and returns a new trace of the same
 * compilation (the same values, printed with the same names), with a provenance line saying what
 * made it ("# Constructed by Dead Code Elimination (took 0 milliseconds)"). The input trace is left
 * as it was; the caller owns both and frees each with th_trace_free, in any order. */
#ifndef THUNDER_TRANSFORM_H
#define THUNDER_TRANSFORM_H

#include "thunder/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dead Code Elimination, as Thunder's dce: a backward walk from the return keeps a top-level bound
 * symbol when one of its outputs is needed later or when it has an effect (return, copy_ and other
 * in-place ops, random ops); a `del` keeps only values still defined. Subsymbols are not touched.
 * Errors: tr or out NULL (TH_ERR_VALUE), TH_ERR_NOMEM. *out is set only on success. */
th_status th_transform_dce(const th_trace *tr, th_trace **out);

#ifdef __cplusplus
}
#endif
#endif
