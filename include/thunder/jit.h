/* thunder/jit.h — compiling a trace into an executable program and running it.
 *
 * th_program_compile runs the compile pipeline on a trace, one stage after the other:
 *   verify -> Dead Code Elimination -> Common Subexpression Elimination -> Transform for execution
 *   -> fuser (when listed) -> Delete Last Used
 * Verification checks the trace; DCE and CSE clean it (th_transform_dce, th_transform_cse); the
 * execution pass has each bound symbol claimed by the first executor in the list that implements it
 * (BLAS for matmul/linear, then the eager executor, which implements every prim), a torch-level op no
 * executor claims replaced by its decomposition and tried again (Thunder's "Transform for execution");
 * the fuser groups fusible claimed bsyms into compiled fusion regions; Delete Last Used adds the `del`
 * lines. The result is a flat program plus every stage's trace, which print like any trace. The
 * Python frontend (thunder_c.jit) and the CLI (`thunder run`) compile through the same pipeline, so
 * their stage traces are the same. Running a program binds input tensors to the trace's inputs in
 * order, executes the steps and returns the outputs of the trace's return value (flattened, in
 * order). */
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
   * (thunder/executor.h); NULL = the default list {"fuser", "blas", "eager"}. A list is used as given
   * (eager is not appended). An unknown name is TH_ERR_VALUE ("Expected an Executor or the name of a
   * registered Executor, but got 'x' (known: blas, eager, fuser, ...)").
   * "fuser" is the CPU fusion executor: after claiming, it groups the bsyms claimed by the executors
   * listed after it — elementwise ops, conversions (fp8 included), the reductions sum/prod/amax/amin/
   * var/var_mean, layout ops (reshape, transpose, slice, squeeze, broadcast_in_dim, stride_order, clone)
   * — into fusion regions (`[t0, t1] = fusion0(a, b)` in th_program_trace): loop nests whose
   * intermediates never touch memory (softmax, layer_norm, rms_norm are one region each). All regions of
   * a program are one C translation unit, compiled with $CC (else cc) -O2 into one shared object and
   * cached on disk in $XDG_CACHE_HOME/thunder-c (else ~/.cache/thunder-c); a cached program loads
   * without running the compiler. On a cache miss the regions are compiled in parallel parts, one
   * compiler process per CPU this process may use (THUNDER_FUSER_JOBS=1..8 overrides; another value
   * fails the compile with TH_ERR_VALUE), then linked. The cache is bounded to THUNDER_CACHE_MAX_MB
   * MiB (default 1024, 0: no bound; least recently used kernels go first; another value is
   * TH_ERR_VALUE). Exact ops match the eager executor bit for bit; reductions and transcendental
   * functions agree to a tolerance (docs/design.md, "Fuser"). Without a compiler, compiling a program
   * that has a region fails with TH_ERR_NOT_IMPLEMENTED naming $CC (use {"blas", "eager"}, which runs
   * everything). THUNDER_FUSER_STRATEGY=consecutive disables reordering. */
  const char *const *executors;
  int nexecutors;
  /* Run on this device instead of the trace's (traces recorded for cuda:0 run on the CPU with
   * {TH_CPU, 0}); has_device_override false = use the trace's devices, which must exist. */
  bool has_device_override;
  th_device device_override;
  /* The seed the program's generator starts with (dropout in training mode, uniform); its offset
   * starts at 0. th_program_set_rng_state replaces both. */
  uint64_t seed;
  /* When not NULL or empty, the fuser writes each program's generated C source (all its fusion regions,
   * after a comment listing each region's slots P[k] with the trace's names, dtypes and shapes) to
   * dump_dir/<trace name>-<12 hex digits of its SHA-256>.c; NULL = $THUNDER_DUMP_FUSIONS (same
   * meaning), empty = nowhere. The directory must exist. A dump_dir that cannot be written fails the
   * compile with TH_ERR_IO ("fuser: dump_dir: cannot write 'd/f-0123456789ab.c': No such file or
   * directory"); for $THUNDER_DUMP_FUSIONS the compile goes on after one warning on stderr. */
  const char *dump_dir;
  /* Stages of the pipeline to leave out: TH_COMPILE_SKIP_DCE and/or TH_COMPILE_SKIP_CSE (another bit is
   * TH_ERR_VALUE); 0 = every stage. For traces already cleaned by th_compile_prepare and transformed
   * since (the grad transform's forward and backward). */
  unsigned skip_stages;
} th_compile_options;

#define TH_COMPILE_SKIP_DCE 0x1u
#define TH_COMPILE_SKIP_CSE 0x2u

/* Runs the pipeline on `tr` (verify, DCE, CSE, execution pass, fuser, Delete Last Used; DCE and CSE
 * unless opts->skip_stages leaves them out), then builds the program. The trace is not modified and may
 * be freed afterwards. opts may be NULL (defaults). Errors: tr or out NULL (TH_ERR_VALUE); a value whose shape is not
 * bounded as th_trace_add_tensor_input requires (TH_ERR_VALUE: a parsed type comment such as
 * "cpu f32[99999999999, 99999999999]"); verifier errors (TH_ERR_VERIFY), a device that does not exist
 * (TH_ERR_DEVICE: "trace recorded for cuda:0, but this machine has no CUDA device; run with --device
 * cpu"), an op no executor can run (TH_ERR_NOT_IMPLEMENTED). */
th_status th_program_compile(const th_trace *tr, const th_compile_options *opts, th_program **out);

/* The stages of th_program_compile before the execution pass, for a frontend that transforms the
 * cleaned trace before compiling it (the grad transform splits it into forward and backward, each then
 * compiled with skip_stages = TH_COMPILE_SKIP_DCE | TH_COMPILE_SKIP_CSE): verifies tr as
 * th_program_compile does (opts may be NULL: its device override is read), then *dce is its Dead Code
 * Elimination trace and *cse that trace's Common Subexpression Elimination (or, where attention written
 * out by hand was found in it, the Fuse Attention trace made from that; see th_program_compile's
 * pipeline in docs/design.md), both owned by the caller
 * (th_trace_free); tr is unchanged. Errors: tr, dce or cse NULL (TH_ERR_VALUE), those of
 * th_program_compile's verification, TH_ERR_NOMEM; *dce and *cse are NULL on error. */
th_status th_compile_prepare(const th_trace *tr, const th_compile_options *opts, th_trace **dce, th_trace **cse);

/* The execution trace: the "Transform for execution" trace (claimed bsyms) after Delete Last Used
 * (th_transform_del_last_used: `del` lines after last uses; provenance "Delete Last Used"), as
 * Thunder's final trace. Owned by the program (NULL for a NULL program). */
const th_trace *th_program_trace(const th_program *p);

/* The trace each stage of the pipeline made, in order: th_program_num_traces counts them (0 for NULL);
 * th_program_stage_trace(p, i, &name) is the i-th (owned by the program; NULL, with *name NULL, when i
 * is out of range) and sets *name (when stage_name is not NULL) to its stage's name: "dce", "cse",
 * "execution", "fuser", "del_last_used", those of the stages that ran (no "fuser" without the fuser,
 * no "dce"/"cse" when skip_stages leaves them out). The last is th_program_trace. */
int th_program_num_traces(const th_program *p);
const th_trace *th_program_stage_trace(const th_program *p, int i, const char **stage_name);

/* The number of tensors th_program_run takes: one per trace input, except that a collection input (a
 * backward trace's saved_for_backward and cotangents, th_transform_grad) takes one per leaf: its items
 * depth first, so `backward_fn(saved_for_backward, cotangents)` with saved_for_backward = ((t0, t1),
 * (i2,)) and cotangents = (t5,) runs on {t0, t1, i2, t5} (a number leaf as a 0-dim tensor of its
 * Python type: float64, int64, bool; an unused item printed `_` accepts any tensor or NULL). 0 for NULL. */
int th_program_num_inputs(const th_program *p);

/* Runs the program. inputs: one tensor per trace input (th_program_num_inputs: collections by their
 * leaves), checked against the recorded dtype and shape (TH_ERR_VALUE naming the input on mismatch).
 * p, noutputs or outputs NULL, and inputs NULL with ninputs > 0, are TH_ERR_VALUE. On success
 * *outputs is a malloc'd array of *noutputs
 * tensors (each one reference owned by the caller; free the array with free()). Not thread-safe for
 * one program; distinct programs may run concurrently. */
th_status th_program_run(th_program *p, int ninputs, th_tensor *const *inputs, int *noutputs, th_tensor ***outputs);

void th_program_free(th_program *p); /* NULL is fine */

/* The program's random-number generator: a Philox-4x32-10 stream whose state is (seed, offset), the
 * offset counting 128-bit blocks. Random ops draw at the offset and advance it, so successive runs draw
 * fresh numbers and a run is reproduced by setting the state it started from. In a trace the state is
 * explicit: `(seed, offset) = prims.get_and_update_rng_state(blocks, device=...)` reads it and advances
 * the offset, and prims.uniform_philox(..., seed=seed, offset=offset) samples from it (what
 * ltorch.uniform_like and ltorch.dropout record), so two random ops never share numbers and CSE never
 * merges them. get/set: p, seed or offset NULL are TH_ERR_VALUE; setting it while the program runs is
 * TH_ERR_RUNTIME. th_program_num_random_ops counts the program's steps tagged random (0: nothing it
 * runs reads the generator; 0 for NULL). */
th_status th_program_get_rng_state(const th_program *p, uint64_t *seed, uint64_t *offset);
th_status th_program_set_rng_state(th_program *p, uint64_t seed, uint64_t offset);
int th_program_num_random_ops(const th_program *p);

/* Threads. th_program_compile and th_program_run run their kernels (fused kernels, the eager
 * executor's, oneDNN's GEMMs) on OpenMP teams of th_get_num_threads() threads: the count is set on the
 * calling thread for the duration of the call and restored afterwards, so a host that changed its own
 * OpenMP setting (PyTorch's torch.set_num_threads, which shares libgomp with thunder-c, and which PyTorch
 * may default to 1) neither governs thunder-c's runs nor is changed by them.
 * Kernels (a user executor's included) see that count as omp_get_max_threads() and so does PyTorch code
 * they call; a change a kernel makes to the calling thread's OpenMP setting ends with the run.
 * Default: THUNDER_NUM_THREADS if the environment sets it to a positive integer (values above 4096
 * read as 4096), else the first value of OMP_NUM_THREADS if set, else omp_get_num_procs() (the CPUs
 * this process may run on). While other processes are runnable, a run's team under the default is
 * capped by the CPUs they leave free (the system's runnable tasks, from /proc/loadavg, less this
 * process's running threads; sampled at most every 10 ms): on a machine other work keeps busy, a team
 * larger than the free CPUs waits at every barrier for a preempted member. THUNDER_ADAPTIVE_THREADS=0
 * turns the cap off.
 * th_set_num_threads(n): n >= 1 sets the count for later calls from any thread, used as given (no
 * cap); n == 0 returns to the default; n < 0 or n > 4096 is TH_ERR_VALUE ("th_set_num_threads: n:
 * expected 0 (the default) or a count in [1, 4096], but got -1") and changes nothing. Like
 * torch.set_num_threads, it is process-wide. */
th_status th_set_num_threads(int n);
int th_get_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif
