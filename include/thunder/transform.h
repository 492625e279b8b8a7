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

/* Common Subexpression Elimination, as Thunder's cse: a top-level bound symbol whose right-hand side
 * (symbol, arguments with earlier redundant outputs already replaced, keyword arguments) equals an
 * earlier one's, claimed by the same executor (or both unclaimed), is removed, and every later use of
 * its outputs (the return and subsymbols included) reads the earlier one's outputs instead. Values
 * compare by identity, constants by kind and value (1, 1.0 and True differ; floats bitwise). Only
 * pure bound symbols merge: never random ops (uniform, dropout), in-place ops, copy_, return, del,
 * comments (nothing tagged RANDOM, IN_PLACE, DONT_DCE or UTILITY, here or in a subsymbol), fusion
 * regions or scaled_dot_product_attention (Thunder's non-functional ops). As Thunder's cse is followed
 * by dce, the result is also dead-code-eliminated (th_transform_dce); a `del` of a merged value is
 * dropped. Provenance "Common Subexpression Elimination (took N milliseconds)". The caller owns *out
 * (th_trace_free) and tr, which is unchanged. Errors: tr or out NULL (TH_ERR_VALUE), TH_ERR_NOMEM.
 * *out is set only on success. */
th_status th_transform_cse(const th_trace *tr, th_trace **out);

/* Delete Last Used, as Thunder's del_last_used (the pass that makes the execution trace): existing
 * dels are dropped, then right after each top-level bound symbol comes one `del a, b` of every value
 * whose last use it is, its outputs first, then its arguments, in order (an unused output is deleted
 * right after its producer; trace inputs are deleted after their last use, as Thunder's `del x, w`).
 * Values reachable from the return are never deleted, comments get no del, and the return stays last
 * with no del after it; an input nobody uses is deleted (one del each) before the first bound symbol.
 * Each value is deleted at most once. Provenance "Delete Last Used (took N milliseconds)". The caller
 * owns *out (th_trace_free) and tr, which is unchanged. Errors: tr or out NULL (TH_ERR_VALUE),
 * TH_ERR_NOMEM. *out is set only on success. */
th_status th_transform_del_last_used(const th_trace *tr, th_trace **out);

/* Autocast as a function transform (Thunder's `autocast(fn, dtype)`): replays the trace's top-level
 * bound symbols through th_trace_call under a CPU and a CUDA autocast region of `dtype` (see
 * th_trace_autocast_push), so the result is the trace the region path records for the same program:
 * e.g. `(a @ b) + c` on float32 inputs becomes convert(a), convert(b), a bfloat16 ltorch.matmul and an
 * ltorch.add whose type promotion converts the product back to float32. Every op is re-recorded
 * (outputs are new values with fresh names; inputs are shared); comments are kept, `del` lines dropped.
 * A fusion region or other op this build does not know is copied as it is, and is an error
 * (TH_ERR_NOT_IMPLEMENTED) if one of its inputs was converted. Provenance "Autocast (took N
 * milliseconds)". Errors: tr or out NULL (TH_ERR_VALUE); dtype not float16 / bfloat16 (TH_ERR_VALUE,
 * "autocast: `dtype` is expected to be either float16 or bfloat16, but float32"); an op that fails on
 * its converted arguments (e.g. a float64 operand of a matmul whose other operand was converted), with
 * that op's error; TH_ERR_NOMEM. *out is set only on success. */
th_status th_transform_autocast(const th_trace *tr, th_dtype dtype, th_trace **out);

#ifdef __cplusplus
}
#endif
#endif
