/* thunder/executor.h — extending thunder-c: new operators, executors that implement them (or built-in
 * ops), and autocast rules for new operators. Lightning Thunder's `thunder.extend` (OperatorExecutor,
 * register_operator, register_implementation) and `register_autocast_rule`, in C.
 *
 * An *operator* is what a trace records: a qualified name ("myex.fused_gelu_linear"), a PyTorch-style
 * schema (parsed by the same parser as the built-in ops), and a meta function that computes its
 * outputs' metadata. A registered operator is a primitive (Thunder: `register_operator(name, meta=...)`):
 * th_trace_call records it by its qualified name, it prints as `t0 = myex.fused_gelu_linear(x, w)`, the
 * parser reads it back, and the verifier re-runs its meta, exactly as for prims.*.
 *
 * An *executor* claims bound symbols at compile time: `th_executor_add_impl` gives it a kernel (and an
 * optional checker) for one operator, registered or built-in (prims.mul, ltorch.gelu, ...). Name it in
 * th_compile_options.executors (with "blas" and "eager"); each top-level bsym goes to the first
 * executor in the list that implements its symbol and whose checker accepts the call. A torch-level op
 * nobody claims is replaced by its decomposition; a registered op has none, so if nobody
 * claims it compilation fails (TH_ERR_NOT_IMPLEMENTED, "Failed to find an executor for bound symbol
 * t0 = myex.f (executors: ...)").
 *
 * Thread safety: registration (operators, executors, implementations) takes one process-wide mutex, so
 * it may happen from any thread; but register an operator before recording, parsing or compiling
 * anything that uses it, and add an executor's implementations before compiling with it (a compilation
 * uses the executor as it is when compilation starts). Registered operators live for the process (as
 * Thunder's symbols); they cannot be removed or redefined. Callbacks must be thread-safe if traces are
 * recorded or programs run on several threads, must not call back into registration, and report
 * failures by returning a status after th_set_error. */
#ifndef THUNDER_EXECUTOR_H
#define THUNDER_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "thunder/device.h"
#include "thunder/dtype.h"
#include "thunder/error.h"
#include "thunder/tensor.h"
#include "thunder/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the thread's last-error message (printf-style; th_last_error) and returns st: how a meta,
 * autocast rule, checker or kernel reports why it fails ("expected x to be 2D, got 3D"). The core
 * puts the op's qualified name in front when the message does not start with it. */
th_status th_set_error(th_status st, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;

/* ---- operators ---------------------------------------------------------------------------------- */

/* The metadata of one tensor output, as a meta function computes it. */
typedef struct th_tensor_meta {
  th_dtype dtype;
  th_device device;
  int ndim;                   /* 0 .. TH_MAX_DIMS */
  int64_t shape[TH_MAX_DIMS]; /* ndim entries, each >= 0 */
} th_tensor_meta;

#define TH_META_MAX_OUTPUTS 16

/* The dtype, device and shape of tensor proxy v (for a meta that returns "the same as x"). A value
 * that is not a tensor gives TH_DTYPE_COUNT and ndim 0. */
th_tensor_meta th_tensor_meta_of(const th_value *v);

/* A meta function (Thunder's `meta=`): computes the outputs of one call from its bound arguments.
 * args: one per schema parameter, in schema order, defaults filled in (as Thunder's bind does): a
 * tensor is a proxy (TH_ARG_VALUE; read it with th_value_dtype / th_value_shape / th_value_device), a
 * number is a constant (TH_ARG_INT, ...) or a number proxy, None is TH_ARG_NONE, a Tensor[] is a
 * TH_ARG_LIST of proxies. Borrowed for the call only.
 * outputs: TH_META_MAX_OUTPUTS zeroed entries to fill. *noutputs holds the number the schema's return
 * fixes (Tensor: 1, (Tensor, Tensor): 2, None: 0); for a Tensor[] return it holds
 * TH_META_MAX_OUTPUTS and the meta sets it to the number of tensors it produces.
 * Return TH_OK, or a status with a message (th_set_error): the core reports it as the op's error
 * ("myex.linear_like: expected ..."), exactly like a built-in meta's shape or dtype error. The meta also
 * runs when a trace is verified or parsed, so it must depend on its arguments only. */
typedef th_status (*th_meta_fn)(const th_arg *args, int nargs, th_tensor_meta *outputs, int *noutputs);

/* An autocast rule for a registered operator (Thunder's register_autocast_rule; PyTorch AMP). While an
 * autocast region is active (th_trace_autocast_push) and the op is recorded at the trace's top level,
 * the core calls the rule with the bound arguments (as for a meta), the region's dtype (float16 or
 * bfloat16) and device type. cast_to has nargs entries, all TH_DTYPE_COUNT ("leave alone"); setting
 * cast_to[i] = d converts argument i before the op: every float16 / bfloat16 / float32 tensor in it (a
 * tensor, or each tensor of a Tensor[]) on the region's device type becomes a top-level
 * prims.convert_element_type(t, d) (d: float16, bfloat16, float32 or float64), and the op is recorded
 * on the converted values. float64, integer, bool and fp8 tensors are never converted (AMP). The
 * rule's own converts are not cast again, and nothing inside decompositions is. An error drops
 * whatever the rule recorded. */
typedef th_status (*th_autocast_rule_fn)(const th_arg *args, int nargs, th_dtype dtype, th_device_type device_type,
                                         th_dtype *cast_to);

/* Tags of a registered operator (th_op_register's `tags`): the TH_OPF_* flags of thunder/trace.h that
 * make sense for a new op, plus PyTorch AMP's policies as ready-made autocast rules (the very rules of
 * the built-in ops, thunder/trace.h "autocast regions"):
 *   TH_OPF_PRIM              accepted (every registered op is a primitive);
 *   TH_OPF_RANDOM            consumes randomness / has an effect: never merged by CSE, never removed by
 *                            DCE, never reordered;
 *   TH_OPF_VIEW              its output may share memory with an input at run time;
 *   TH_OPF_AUTOCAST_LOWER    float16 / bfloat16 / float32 tensors -> the region's dtype (matmul, linear);
 *   TH_OPF_AUTOCAST_FP32     float16 / bfloat16 tensors -> float32, unless a `dtype` argument is given;
 *   TH_OPF_AUTOCAST_PROMOTE  float16 / bfloat16 / float32 tensors -> the widest of their dtypes (cat).
 * At most one AUTOCAST policy, and none when an autocast rule function is given. */
enum {
  TH_OPF_AUTOCAST_LOWER = 1u << 8,
  TH_OPF_AUTOCAST_FP32 = 1u << 9,
  TH_OPF_AUTOCAST_PROMOTE = 1u << 10,
};

/* Registers a new operator (Thunder: OperatorExecutor.register_operator(name, meta=meta), a prim).
 * qualname: "module.name" (dotted Python identifiers, at least one dot; the modules prims, ltorch,
 * torch and Tensor are reserved); it is how the op is looked up (th_trace_call, the parser) and
 * printed. schema: PyTorch style, its name equal to the last part of qualname:
 *   "linear_like(Tensor x, Tensor w, Tensor? bias=None, /, *, float alpha=1.0) -> Tensor"
 * (types Tensor Tensor? Tensor[] TensorOrScalar Scalar Scalar? int int? int[] int[]? float float? bool
 * bool? str str? ScalarType ScalarType? Device Device? Any; "/" ends the positional-only parameters,
 * "*" starts the keyword-only ones; returns Tensor, Tensor[], (Tensor, ...) or None). meta: required.
 * autocast: the op's autocast rule, or NULL (then the tags' policy, if any). tags: see above.
 * The strings are copied. Errors (TH_ERR_VALUE, nothing registered): NULL qualname, schema or meta; a
 * malformed qualname; a name that is already an op ("op 'myex.f' is already registered", also for
 * built-in names and aliases); a malformed schema ("invalid schema '...': <what>"); a schema named
 * differently from qualname; unknown or conflicting tags. */
th_status th_op_register(const char *qualname, const char *schema, th_meta_fn meta, th_autocast_rule_fn autocast,
                         unsigned tags);

/* ---- operators with a user pointer ---------------------------------------------------------------- *
 * The callbacks above are plain function pointers; a binding that registers many operators through one
 * callback (the Python frontend: every op's meta is a Python callable) tells them apart by a user
 * pointer. th_op_register_ex is th_op_register with callbacks that receive `user` as their last
 * argument; everything else (names, schema, tags, errors, when the callbacks run) is the same. The
 * registry keeps `user` for the process (registered operators cannot be removed): it must stay valid
 * as long as the op may be recorded, parsed, verified or autocast. */
typedef th_status (*th_meta_ex_fn)(const th_arg *args, int nargs, th_tensor_meta *outputs, int *noutputs, void *user);
typedef th_status (*th_autocast_rule_ex_fn)(const th_arg *args, int nargs, th_dtype dtype, th_device_type device_type,
                                            th_dtype *cast_to, void *user);
th_status th_op_register_ex(const char *qualname, const char *schema, th_meta_ex_fn meta,
                            th_autocast_rule_ex_fn autocast, unsigned tags, void *user);

/* ---- executors ----------------------------------------------------------------------------------- */

typedef struct th_executor th_executor;

/* A new operator executor named `name` (Thunder's OperatorExecutor(name) + register_executor), found
 * by that name in th_compile_options.executors. The name is copied; it must be a Python identifier not
 * already used by another executor ("blas" and "eager" included). NULL on error: TH_ERR_VALUE ("an
 * executor named 'x' is already registered", a bad name), TH_ERR_NOMEM. Free with th_executor_free. */
th_executor *th_executor_new(const char *name);

/* Unregisters and frees the executor (its name becomes free again). Programs compiled with it keep
 * working (they hold their own copies of its kernels). Do not free it while another thread compiles
 * with it or adds implementations to it. NULL is fine. */
void th_executor_free(th_executor *ex);

/* The executor's name (owned by the executor); NULL for NULL. */
const char *th_executor_name(const th_executor *ex);

/* A checker (Thunder's `checker=`): called at compile time with a bound symbol of the op (read it with
 * th_bsym_arg / th_bsym_output and the th_value_* accessors of thunder/trace.h); true claims the call,
 * false leaves it to the next executor in the list. Must not keep the pointer. */
typedef bool (*th_checker_fn)(const th_bsym *b);

/* What a kernel sees at run time (valid during the call only). */
typedef struct th_kernel_ctx th_kernel_ctx;

/* A kernel: computes one bound symbol. Read the arguments with the th_kernel_* accessors below
 * (tensors are borrowed; strided views are normal inputs; never write to an input), produce every
 * output with th_kernel_output (a new contiguous tensor of the recorded dtype and shape, to fill) or
 * th_kernel_set_output (a tensor the kernel made, e.g. a view: th_tensor_view). Return TH_OK, or a
 * status with a message (th_set_error); the program run fails with "<op>: <message>". An output the
 * kernel did not produce is an error too ("myex.f: the kernel did not produce t0"). */
typedef th_status (*th_kernel_fn)(th_kernel_ctx *k);

/* Argument count (one per schema parameter, defaults filled in) and the bound argument i as recorded
 * (constants as they are; tensors and number proxies as TH_ARG_VALUE). Out of range: 0 / TH_ARG_NONE. */
int th_kernel_num_args(const th_kernel_ctx *k);
th_arg th_kernel_arg(const th_kernel_ctx *k, int i);
/* The run-time tensor of tensor argument i (borrowed), or NULL if argument i is not a tensor (None, a
 * number, out of range). th_kernel_tensor_item: item j of a Tensor[] argument i. */
th_tensor *th_kernel_tensor(th_kernel_ctx *k, int i);
th_tensor *th_kernel_tensor_item(th_kernel_ctx *k, int i, int j);
/* The value of number argument i: a constant (bool / int / float) or a number proxy's run-time value.
 * Sets *f (and *iv for bool / int; *is_float says which) and returns true; false if argument i is not
 * a number. Any pointer may be NULL. */
bool th_kernel_number(th_kernel_ctx *k, int i, double *f, int64_t *iv, bool *is_float);
/* The number of outputs (the bsym's output values, flattened) and output j's recorded proxy. */
int th_kernel_num_outputs(const th_kernel_ctx *k);
const th_value *th_kernel_output_value(const th_kernel_ctx *k, int j);
/* Allocates output j: a new contiguous tensor with its recorded dtype and shape (uninitialized), bound
 * as the output. Returns it borrowed (the program owns it); NULL on error (j out of range, out of
 * memory), with the message set. */
th_tensor *th_kernel_output(th_kernel_ctx *k, int j);
/* Binds output j to t, taking over the caller's reference (also on error). t must have the recorded
 * dtype and shape (TH_ERR_RUNTIME "kernel produced f32[2] for t0, but the trace records f32[2, 2]"). */
th_status th_kernel_set_output(th_kernel_ctx *k, int j, th_tensor *t);

/* Gives executor ex a kernel for operator `qualname` (Thunder: register_implementation(sym, op,
 * checker=checker)): a registered op or a built-in one ("prims.mul", "ltorch.gelu"; its exact qualified
 * name). checker may be NULL (every call). Errors (TH_ERR_VALUE, nothing changed): ex, qualname or fn
 * NULL ("th_executor_add_impl: the kernel is NULL"); an unknown op ("unknown op 'myex.nope'"); a name
 * that is not the op's qualified name ("'mul' names ltorch.mul; give its qualified name"); return / del /
 * comment (not computations); ex already implements the op. TH_ERR_NOMEM on allocation failure. */
th_status th_executor_add_impl(th_executor *ex, const char *qualname, th_kernel_fn fn, th_checker_fn checker);

/* A checker with a user pointer and a way to fail (th_executor_add_impl_ex): called like th_checker_fn
 * at compile time with a bound symbol of the op; sets *claims (true: this executor runs the call; false:
 * the next executor in the list is asked) and returns TH_OK, or returns an error status with a message
 * (th_set_error), which fails the compilation with "<op>: <message>" (*claims is then ignored). */
typedef th_status (*th_checker_ex_fn)(const th_bsym *b, void *user, bool *claims);

/* th_executor_add_impl with a user pointer: the kernel reads it with th_kernel_user, the checker (may be
 * NULL: every call) receives it. Same errors as th_executor_add_impl. The registry does not own `user`:
 * it must stay valid while ex exists and while any program compiled with ex exists (a program keeps
 * the pointer with its copy of the kernel, as it does the kernel). */
th_status th_executor_add_impl_ex(th_executor *ex, const char *qualname, th_kernel_fn fn, th_checker_ex_fn checker,
                                  void *user);

/* The user pointer given to th_executor_add_impl_ex for the running kernel (NULL for an implementation
 * added by th_executor_add_impl, and for NULL). */
void *th_kernel_user(const th_kernel_ctx *k);

/* The name of the executor that claimed b ("eager", "blas", "myex") in an execution trace
 * (th_program_trace); NULL for a bsym nobody claimed (return, del, comments; any bsym of a trace that
 * was not compiled) and for NULL. Owned by b's trace. */
const char *th_bsym_executor(const th_bsym *b);

#ifdef __cplusplus
}
#endif
#endif
