/* program.h — internal entry points of the runtime (execute.c): building a program from an execution
 * trace whose steps are already claimed, the calling thread's OpenMP team size for a call, and the pool
 * of warm buffers for large tensors. */
#ifndef TH_PROGRAM_H
#define TH_PROGRAM_H

#include "runtime/kernel.h"
#include "thunder/jit.h"

/* What runs one step: the kernel of the executor that claimed the bsym, and what the step hands it. */
typedef struct th_rt_claim {
  th_rt_kernel_fn kernel;
  th_kernel_fn user; /* a user executor's kernel (kernel is then the adapter), else NULL */
  void *user_data;   /* its th_executor_add_impl_ex pointer, else NULL */
  const void *data;  /* the step's private data (th_rt_step_data: the fuser's compiled region), else NULL */
} th_rt_claim;

/* Everything a program is built from. The program runs the last of `traces` (the execution trace);
 * all of them are the compile stages' traces in order, kept for th_program_stage_trace under the names
 * in `names` (static strings). */
typedef struct th_rt_program_spec {
  int ntraces;
  th_trace **traces; /* taken, also on failure */
  const char *const *names;
  const th_rt_claim *claims; /* one per step (top-level bsym not tagged UTILITY) of the last trace, in order */
  int nclaims;
  void *resources; /* taken, also on failure: what claims' data point into (the fuser's regions) */
  void (*resources_free)(void *resources);
  bool has_device_override; /* th_compile_options' */
  th_device device_override;
  uint64_t seed;
} th_rt_program_spec;

/* Lays the execution trace out flat (a slot per value, a step per claim, release lists, the output
 * plan) into a new program that owns spec's traces and resources. Errors: a step count that does not
 * match nclaims (TH_ERR_VALUE), a collection input nested too deeply (TH_ERR_VALUE), TH_ERR_NOMEM. */
th_status th_program_build(const th_rt_program_spec *spec, th_program **out);

/* Sets the calling thread's OpenMP team size to th_get_num_threads() for one call — the default count
 * capped by the CPUs other processes leave free (unless THUNDER_ADAPTIVE_THREADS=0), a count set by
 * th_set_num_threads as it is; returns what th_rt_threads_restore needs to put the caller's back. */
int th_rt_threads_enter(void);
void th_rt_threads_restore(int had);

/* Like th_tensor_empty (a new contiguous, uninitialized tensor; NULL with an error set), but a
 * tensor of 256 KiB or more takes its memory from a pool of warm blocks, and gives it back when its
 * last reference goes (th_rt_alloc_output uses it; so may kernels for large scratch tensors). */
th_tensor *th_rt_pool_empty(th_dtype dtype, int ndim, const int64_t *shape);

#endif
