/* kernel.h — what a kernel sees at run time: the run-time environment of a program (runtime/execute.c).
 *
 * The runtime executes a program's steps in order, each a kernel and the bound symbol it runs. A kernel
 * receives the run-time environment and the bsym: it reads its tensor operands with
 * th_rt_tensor(env, &b->args[i]) (a borrowed reference; views and strided inputs are normal), its
 * constant arguments directly from b->args (already bound against the schema, defaults filled in), and
 * number operands with th_rt_number. It produces each output value by th_rt_alloc_output (a new
 * contiguous tensor with the output's recorded dtype and shape) or, for views, by building a view with
 * th_tensor_view and handing it to th_rt_set. A number output (a number proxy whose value is only known
 * at run time) is produced as a 0-dim tensor of its Python type (i64, f64 or bool) through the same
 * calls; readers get it back with th_rt_number. Kernels never allocate from the trace arena and never
 * print; on bad input they return th_error(...) with a clear message. */
#ifndef TH_RT_KERNEL_H
#define TH_RT_KERNEL_H

#include "core/ir.h"
#include "runtime/runtime.h"
#include "thunder/executor.h"

typedef struct th_rt_env th_rt_env;

/* A built-in kernel (the public kernel type of user executors, th_kernel_fn, runs through
 * th_rt_user_kernel_adapter, executors/kernel.h). */
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
/* The program's generator: a counter-based Philox-4x32-10 stream. th_rt_random4 returns the 4
 * uniformly distributed 32-bit words of the block at the generator's offset and advances the offset by
 * one block (prims.uniform). th_rt_rng_state returns the state (seed, offset) and advances the offset
 * by `blocks` (get_and_update_rng_state); th_rt_philox_block is the block `block` of the stream keyed
 * by `seed` (uniform_philox reads blocks offset, offset + 1, ...). */
void th_rt_random4(th_rt_env *env, uint32_t out[4]);
void th_rt_rng_state(th_rt_env *env, uint64_t blocks, uint64_t *seed, uint64_t *offset);
void th_rt_philox_block(uint64_t seed, uint64_t block, uint32_t out[4]);

/* The running step's user kernel (a user executor's th_kernel_fn, run by th_rt_user_kernel_adapter),
 * its user pointer (th_executor_add_impl_ex, read by th_kernel_user) and its private data (the fuser's
 * compiled region); NULL when the step has none. */
th_kernel_fn th_rt_user_kernel(th_rt_env *env);
void *th_rt_user_data(th_rt_env *env);
const void *th_rt_step_data(th_rt_env *env);

#endif
