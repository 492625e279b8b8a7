/* program.h — internal entry points of the runtime (execute.c): compiling with executor descriptors
 * instead of names, and the pool of warm buffers for large tensors. */
#ifndef TH_PROGRAM_H
#define TH_PROGRAM_H

#include "executors/kernel.h"
#include "thunder/jit.h"

/* th_program_compile with executor descriptors instead of names (th_program_compile resolves the
 * names "blas", "eager" and those of executors made with th_executor_new, copied for the compilation,
 * and calls this). Also for executors that are not registered (tests). opts->executors is ignored. */
th_status th_program_compile_with(const th_trace *tr, const th_compile_options *opts,
                                  const th_executor_desc *const *execs, int nexecs, th_program **out);

/* Like th_tensor_empty (a new contiguous, uninitialized tensor; NULL with an error set), but a
 * tensor of 256 KiB or more takes its memory from a pool of warm blocks, and gives it back when its
 * last reference goes (th_rt_alloc_output uses it; so may kernels for large scratch tensors). */
th_tensor *th_rt_pool_empty(th_dtype dtype, int ndim, const int64_t *shape);

#endif
