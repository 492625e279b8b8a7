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

typedef struct th_rt_env th_rt_env;

typedef th_status (*th_kernel_fn)(th_rt_env *env, const th_bsym *b);

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
/* The generator used by random prims (a counter-based Philox-4x32-10 stream seeded per run). Returns
 * 4 uniformly distributed 32-bit words per call, advancing the stream. */
void th_rt_random4(th_rt_env *env, uint32_t out[4]);

/* ---- executors ---------------------------------------------------------------------------------------
 * An operator executor claims bsyms of the symbols it implements; `checker` (optional) may refuse a
 * particular call (dtype, shape). The eager executor implements every prim; the BLAS executor takes
 * prims.matmul / prims.linear in f32/f64/bf16. */
typedef bool (*th_checker_fn)(const th_bsym *b);

typedef struct th_operator_impl {
  th_op_id op;
  th_kernel_fn kernel;
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

#endif
