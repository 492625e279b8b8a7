/* thunder/jit.h — compiling a trace into an executable program and running it.
 *
 * th_program_compile runs the execution passes on a trace: each bound symbol is claimed by the first
 * executor in the list that implements it (BLAS for matmul/linear, then the eager executor, which
 * implements every prim); a torch-level op no executor claims is replaced by its decomposition and
 * tried again (Thunder's "Transform for execution"). The result is a flat program plus the execution
 * trace it came from, which prints like any trace. Running a program binds input tensors to the
 * trace's inputs in order, executes the steps and returns the outputs of the trace's return value
 * (flattened, in order). */
#ifndef THUNDER_JIT_H
#define THUNDER_JIT_H

#include "thunder/tensor.h"
#include "thunder/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct th_program th_program;

typedef struct th_compile_options {
  /* Executors in priority order by name: "fuser", "blas", "eager", or one made with th_executor_new
   * (thunder/executor.h); NULL = the default list {"blas", "eager"}. A list is used as given (eager is
   * not appended). An unknown name is TH_ERR_VALUE ("Expected an Executor or the name of a registered
   * Executor, but got 'x' (known: blas, eager, fuser, ...)").
   * "fuser" (opt-in, e.g. {"fuser", "blas", "eager"}) is the CPU fusion executor: after claiming, runs
   * of pointwise prims claimed by the executors listed after it become fusion regions
   * (`[t0, t1] = fusion0(a, b)` in th_program_trace), each compiled to one C function with $CC (else
   * cc) and cached on disk in $XDG_CACHE_HOME/thunder-c (else ~/.cache/thunder-c). Without a compiler,
   * compilation fails with TH_ERR_NOT_IMPLEMENTED (use {"blas", "eager"}). THUNDER_DUMP_FUSIONS=dir
   * writes each region's source; THUNDER_FUSER_STRATEGY=consecutive disables reordering. */
  const char *const *executors;
  int nexecutors;
  /* Run on this device instead of the trace's (traces recorded for cuda:0 run on the CPU with
   * {TH_CPU, 0}); has_device_override false = use the trace's devices, which must exist. */
  bool has_device_override;
  th_device device_override;
  /* Seed of the random stream (dropout in training mode, uniform). */
  uint64_t seed;
} th_compile_options;

/* Verifies `tr`, then builds the program. The trace is not modified and may be freed afterwards.
 * opts may be NULL (defaults). Errors: tr or out NULL (TH_ERR_VALUE); a value whose shape is not
 * bounded as th_trace_add_tensor_input requires (TH_ERR_VALUE: a parsed type comment such as
 * "cpu f32[99999999999, 99999999999]"); verifier errors (TH_ERR_VERIFY), a device that does not exist
 * (TH_ERR_DEVICE: "trace recorded for cuda:0, but this machine has no CUDA device; run with --device
 * cpu"), an op no executor can run (TH_ERR_NOT_IMPLEMENTED). */
th_status th_program_compile(const th_trace *tr, const th_compile_options *opts, th_program **out);

/* The execution trace: the "Transform for execution" trace (claimed bsyms) after Delete Last Used
 * (th_transform_del_last_used: `del` lines after last uses; provenance "Delete Last Used"), as
 * Thunder's final trace. Owned by the program (NULL for a NULL program). */
const th_trace *th_program_trace(const th_program *p);

/* Runs the program. inputs: one tensor per trace input, checked against the recorded dtype and shape
 * (TH_ERR_VALUE naming the input on mismatch). p, noutputs or outputs NULL, and inputs NULL with
 * ninputs > 0, are TH_ERR_VALUE. On success *outputs is a malloc'd array of *noutputs
 * tensors (each one reference owned by the caller; free the array with free()). Not thread-safe for
 * one program; distinct programs may run concurrently. */
th_status th_program_run(th_program *p, int ninputs, th_tensor *const *inputs, int *noutputs,
                         th_tensor ***outputs);

void th_program_free(th_program *p); /* NULL is fine */

#ifdef __cplusplus
}
#endif
#endif
