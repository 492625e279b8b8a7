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

/* ---- float8 (torchao's Float8 training recipe: dynamic per-tensor scaling) ----------------------------- */

/* Decides whether one linear is converted: `linear` is a top-level ltorch.linear or prims.linear bound
 * symbol of the input trace (arguments: input [..., K], weight [N, K], bias [N] or None; read names and
 * shapes with th_bsym_arg, th_value_name, th_value_shape), `index` its 0-based position among the
 * eligible linears in trace order. Set *convert (true on entry) and return TH_OK; any other status
 * (with th_set_error's message) aborts the transform with that error. */
typedef th_status (*th_float8_filter_fn)(const th_bsym *linear, int index, void *ctx, bool *convert);

typedef struct th_float8_options {
  th_dtype input_dtype;       /* the activation's format: TH_F8E4M3FN (default) or TH_F8E5M2 */
  th_dtype weight_dtype;      /* the weight's format: TH_F8E4M3FN (default) or TH_F8E5M2 */
  th_float8_filter_fn filter; /* NULL: every eligible linear */
  void *filter_ctx;           /* passed to filter */
} th_float8_options;

/* The defaults: e4m3fn for both operands, every linear. Start from these (a zeroed struct is not
 * valid: its dtypes are bool). */
th_float8_options th_float8_options_default(void);

/* The float8 training transform (torchao's convert_to_float8_training with dynamic per-tensor
 * scaling, as the trace of seed 003 shows it): every eligible top-level linear — ltorch.linear or
 * prims.linear whose input and weight are float32, bfloat16 or float16 (so also the bfloat16
 * prims.linear autocast records) and not empty — that the filter accepts is replaced by fp8 math
 * visible in the trace, with M = 448 (float8_e4m3fn) or 57344 (float8_e5m2) per operand:
 *   amax = amax(abs(x.float()))  ->  scale = M / clamp(amax, min=1e-12)  ->
 *   x_fp8 = to(clamp(x.float() * scale, -M, M), fp8)  (saturated)  ->  inv_scale = reciprocal(scale),
 * the same for the weight, then
 *   y = reshape(ltorch._scaled_mm(reshape(x_fp8, (-1, K)), weight_fp8.t(), inv_scale_x, inv_scale_w,
 *               bias, out_dtype=<the linear's dtype>), x.shape[:-1] + (N,))
 * (this last reshape recorded as ltorch.float8_linear_output(mm, x, w, bias, input_dtype=, weight_dtype=,
 * grad_dtype=float8_e5m2), the linear's autograd boundary), preceded by a comment naming the linear it replaces; the amax, scale, fp8 and inverse-scale values
 * are named after the weight ("fc1_weight_scale_12" for the module parameter t_fc1_weight). Every other
 * bsym is copied (fusion regions and unknown ops too) with the linear's output replaced by y, which has
 * the same dtype and shape. float64 linears and linears inside decompositions are left alone.
 * th_transform_grad differentiates the result as torchao's Float8Linear: the cotangent quantized to
 * float8_e5m2 (e4m3fn against an e5m2 operand), grad_input and grad_weight by _scaled_mm, scales
 * constant, casts straight-through (docs/fp8.md). opts NULL = th_float8_options_default(). Provenance "Float8 (took N
 * milliseconds)". The caller owns *out (th_trace_free) and tr, which is unchanged. Errors: tr or out
 * NULL (TH_ERR_VALUE); a dtype that is not fp8, or both e5m2 (TH_ERR_VALUE: "float8: input_dtype and
 * weight_dtype cannot both be float8_e5m2 ..."); the filter's error; TH_ERR_NOMEM. *out is set only
 * on success. */
th_status th_transform_float8(const th_trace *tr, const th_float8_options *opts, th_trace **out);

/* ---- grad (reverse-mode autodiff: Thunder's grad transform and forward/backward split) ------------- */

typedef struct th_grad_options {
  /* Which trace inputs to differentiate: requires_grad[i] for input i (ninputs entries, equal to the
   * trace's number of inputs). NULL: every floating tensor input (float16, bfloat16, float32, float64).
   * A requested input that is not a floating tensor is TH_ERR_VALUE ("only Tensors of floating point
   * dtype can require gradients", PyTorch's words). */
  const bool *requires_grad;
  int ninputs;
} th_grad_options;

/* Reverse-mode autodiff of `tr` (Thunder's grad transform followed by split_into_forward_and_backward).
 * *fwd is the augmented forward trace: tr's computation (ops with a differentiable input and no direct
 * vjp rule replaced by their decompositions into prims), returning
 *   ({'output': <tr's return>, 'flat_args': [<inputs>], 'flat_output': (<tensors of tr's return>,)},
 *    ((<saved tensors>), (<saved numbers>)))
 * (Thunder prints `return {...}, ((...), ())`; one tuple here, the same Python value), where the saved
 * values are the forward values the backward reads, in forward order. Rematerialization (Thunder's
 * rematerialize, done once here over the whole trace): a value the backward needs that cheap ops
 * (elementwise, convert_element_type, broadcast_in_dim / reshape / transpose / squeeze / slice /
 * stride_order, clone, full, iota; never matmul, linear, reductions, random or in-place ops) compute
 * from other forward values is recomputed in the backward instead of saved, and what is saved is a
 * minimum cut by bytes between the values that cannot be recomputed (inputs, outputs of other ops)
 * and the backward's reads; among equal cuts the one recomputing least (so tanh's output is saved, not
 * its input; a GELU's intermediates are recomputed from the saved linear output). Recomputed bsyms are
 * copied into the backward right before their first use, their outputs named bw_<name>. *bwd is
 *   def backward_fn(saved_for_backward, cotangents):
 *     C0, C1, = saved_for_backward        (collections; th_value_is_collection)
 *     t9, = cotangents                    (one cotangent per flat_output entry, its dtype and shape)
 *     t0, x, = C0                         (the saved tensors; C1 the saved numbers, when any)
 *     ...
 *     return (<grad of input 0>, None, ...)   (one per input: None when not requested or not reached)
 * Gradients follow PyTorch's autograd: each has its input's dtype and shape (broadcasts summed back,
 * converts converted back, so autocast's casts differentiate as eager AMP does); ties of maximum and
 * amax split evenly; abs'(0) = 0. Both traces are dead-code-eliminated, verify, print and parse back,
 * and compile with th_program_compile: the forward runs on tr's inputs; the backward on the leaves of
 * its two collections, {saved tensors, saved numbers (0-dim tensors), cotangents} in that order
 * (th_program_num_inputs). In-place updates (prims.copy_) of intermediates differentiate; a copy_ into
 * an input that requires grad is TH_ERR_RUNTIME ("a leaf Variable that requires grad is being used in an
 * in-place operation."), and an update seen through an alias (prims.update_aliases) on the gradient path
 * is TH_ERR_NOT_IMPLEMENTED. Provenance of both: "Grad transform pass (took N milliseconds)". opts may be
 * NULL. The caller owns *fwd and *bwd (th_trace_free; they share tr's values, so any order). Errors:
 * tr, fwd or bwd NULL, opts->ninputs not tr's input count (TH_ERR_VALUE); an op on the gradient path
 * without a vjp rule or decomposition (TH_ERR_NOT_IMPLEMENTED "grad: no vjp rule for myex.f": an op
 * registered with th_op_register);
 * the errors of the ops the rules record; TH_ERR_NOMEM. Nothing is set on error. */
th_status th_transform_grad(const th_trace *tr, const th_grad_options *opts, th_trace **fwd, th_trace **bwd);

/* th_transform_grad with rematerialization chosen: rematerialize true is th_transform_grad; false saves
 * every forward value the backward reads and recomputes nothing (the traces without
 * rematerialization: for measuring what it saves, th_grad_layout.saved_bytes, and for tests). A flag
 * in th_grad_options would make the positional initializers `{rg, n}` of existing callers trip
 * -Wmissing-field-initializers, hence a separate entry point. Errors: those of th_transform_grad. */
th_status th_transform_grad_remat(const th_trace *tr, const th_grad_options *opts, bool rematerialize, th_trace **fwd,
                                  th_trace **bwd);

/* How the flattened values of a forward trace of th_transform_grad line up (what th_program_run
 * returns for it, in order): noutput values of 'output' (tr's return flattened: tuples, lists and dict
 * values in order, None and constants included), nflat_args inputs, nflat_output output tensors,
 * nsaved_tensors + nsaved_other saved values (the backward's first inputs; the cotangents, one per
 * flat_output entry, follow them). saved_bytes: what the saved values cost, numel x element size per
 * tensor and 8 per number (each saved value once: inputs and outputs the backward reads count too).
 * Errors: TH_ERR_VALUE when fwd's return does not have that shape. */
typedef struct th_grad_layout {
  int noutput, nflat_args, nflat_output, nsaved_tensors, nsaved_other;
  int64_t saved_bytes;
} th_grad_layout;
th_status th_grad_forward_layout(const th_trace *fwd, th_grad_layout *out);

#ifdef __cplusplus
}
#endif
#endif
