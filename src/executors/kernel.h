/* kernel.h — what an operator executor's implementation (a kernel) sees at run time.
 *
 * The runtime executes a trace's claimed bound symbols in order. A kernel receives the run-time
 * environment and the bsym: it reads its tensor operands with th_rt_tensor(env, &b->args[i]) (a
 * borrowed reference; views and strided inputs are normal), its constant arguments directly from
 * b->args (already bound against the schema, defaults filled in), and number operands with
 * th_rt_number. It produces each output value by th_rt_alloc_output (a new contiguous tensor with the
 * output's recorded dtype and shape) or, for views, by building a view with th_tensor_view and
 * handing it to th_rt_set. A number output (a number proxy whose value is only known at run time) is
 * produced as a 0-dim tensor of its Python type (i64, f64 or bool) through the same calls; readers get
 * it back with th_rt_number. Kernels never allocate from the trace arena and never print; on bad input
 * they return th_error(...) with a clear message. */
#ifndef TH_KERNEL_H
#define TH_KERNEL_H

#include "core/ir.h"
#include "runtime/runtime.h"
#include "thunder/executor.h"

typedef struct th_rt_env th_rt_env;

/* A built-in kernel (the public kernel type of user executors, th_kernel_fn, runs through
 * th_rt_user_kernel_adapter). */
typedef th_status (*th_rt_kernel_fn)(th_rt_env *env, const th_bsym *b);

/* The tensor bound to a tensor argument (borrowed), or NULL if the arg is not a tensor value. */
th_tensor *th_rt_tensor(th_rt_env *env, const th_arg *a);
/* A number argument: a constant (bool/int/float) or a number proxy's run-time value. Sets *f (and
 * *i for exact types) and returns true; false if the arg is not a number. */
bool th_rt_number(th_rt_env *env, const th_arg *a, double *f, int64_t *i, bool *is_float);
/* Binds output value v to tensor t (the env takes over the caller's reference). */
th_status th_rt_set(th_rt_env *env, const th_value *v, th_tensor *t);
/* Allocates a contiguous tensor matching v's dtype and shape, binds it to v, and returns it
 * (borrowed). NULL on allocation failure (message set). */
th_tensor *th_rt_alloc_output(th_rt_env *env, const th_value *v);
/* The device tensors actually live on when the program was compiled with a device override (a trace
 * recorded for cuda:0 run with --device cpu): sets *dev and returns true; false without an override.
 * Kernels that name a device (device_put) treat the recorded device as this one. */
bool th_rt_device_override(th_rt_env *env, th_device *dev);
/* The program's generator (runtime/execute.c): a counter-based Philox-4x32-10 stream. th_rt_random4
 * returns the 4 uniformly distributed 32-bit words of the block at the generator's offset and advances
 * the offset by one block (prims.uniform). th_rt_rng_state returns the state (seed, offset) and
 * advances the offset by `blocks` (get_and_update_rng_state); th_rt_philox_block is the block `block`
 * of the stream keyed by `seed` (uniform_philox reads blocks offset, offset + 1, ...). */
void th_rt_random4(th_rt_env *env, uint32_t out[4]);
void th_rt_rng_state(th_rt_env *env, uint64_t blocks, uint64_t *seed, uint64_t *offset);
void th_rt_philox_block(uint64_t seed, uint64_t block, uint32_t out[4]);

/* ---- executors ---------------------------------------------------------------------------------------
 * An operator executor claims bsyms of the symbols it implements; `checker` (optional, the public
 * th_checker_fn of thunder/executor.h) may refuse a particular call (dtype, shape). The eager executor
 * implements every prim; the BLAS executor takes prims.matmul / prims.linear in f32/f64/bf16. Executors
 * users make with th_executor_new (executors/registry.c) are descriptors of the same type, whose impls
 * run th_rt_user_kernel_adapter. */
typedef struct th_operator_impl {
  th_op_id op;
  th_rt_kernel_fn kernel;
  th_checker_fn checker; /* NULL: accepts every call */
} th_operator_impl;

typedef struct th_executor_desc {
  const char *name; /* "eager", "blas" */
  int nimpls;
  const th_operator_impl *impls;
} th_executor_desc;

/* Built-in executors, defined in src/executors/eager/ and src/executors/blas.c. */
extern const th_executor_desc th_eager_executor;
extern const th_executor_desc th_blas_executor;

/* True when oneDNN has a bf16 matmul on this CPU (AVX-512 BF16 / AMX); without one the BLAS executor
 * computes bf16 GEMMs in float32 on widened operands, and the execution transform spells that out in
 * the trace when the fuser runs (passes.c), so the conversions fuse with their neighbours. */
bool th_blas_has_native_bf16(void);

/* ---- user executors (executors/registry.c) ------------------------------------------------------------
 * th_registry_snapshot: *out = a private copy of the registered executor `name` (its name, impls and
 * kernels as they are now), for one compilation, or NULL if there is none (TH_OK either way;
 * TH_ERR_NOMEM on allocation failure). Free with th_registry_snapshot_free (NULL is fine). th_registry_user_kernel: the public kernel behind impl of
 * descriptor d (a snapshot), or NULL for built-in kernels. th_registry_executor_names: "a, b" of the
 * registered executors, for messages. The runtime hands a step's user kernel to the adapter through
 * th_rt_user_kernel. */
th_status th_registry_snapshot(const char *name, th_executor_desc **out);
void th_registry_snapshot_free(th_executor_desc *d);
th_kernel_fn th_registry_user_kernel(const th_executor_desc *d, const th_operator_impl *impl);
/* The user pointer behind impl of descriptor d (th_executor_add_impl_ex), else NULL; the runtime keeps
 * it per step and hands it to the adapter (th_rt_user_data, read by th_kernel_user). */
void *th_registry_user_data(const th_executor_desc *d, const th_operator_impl *impl);
void *th_rt_user_data(th_rt_env *env);
/* Whether impl of executor d claims b: its th_checker_ex_fn (user executors' th_executor_add_impl_ex;
 * an error fails the compilation, with the op's name in front), else its plain checker (NULL: yes). */
th_status th_registry_check(const th_executor_desc *d, const th_operator_impl *impl, const th_bsym *b, bool *claims);
void th_registry_executor_names(char *buf, size_t n);
th_status th_rt_user_kernel_adapter(th_rt_env *env, const th_bsym *b);
th_kernel_fn th_rt_user_kernel(th_rt_env *env);
/* The running step's private data (the fuser's compiled region), or NULL. */
const void *th_rt_step_data(th_rt_env *env);

#endif
