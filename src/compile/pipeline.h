/* pipeline.h — the compile pipeline (pipeline.c): one named function per stage, in the order
 * th_program_compile runs them:
 *
 *   verify -> DCE -> CSE -> execution pass -> fuser -> delete last used -> th_program_build
 *
 * Every stage but verify makes a new trace of the same compilation (th_trace_derive's session) and
 * leaves its input unchanged; the fuser stage runs only when the fuser is listed. The
 * program keeps each stage's trace under its stage name (th_program_stage_trace). Frontends that
 * transform the cleaned trace before compiling it (the grad transform) run verify, DCE and CSE with
 * th_compile_prepare and compile each result with TH_COMPILE_SKIP_DCE | TH_COMPILE_SKIP_CSE. */
#ifndef TH_COMPILE_PIPELINE_H
#define TH_COMPILE_PIPELINE_H

#include "executors/kernel.h"
#include "thunder/jit.h"

/* The stage names the program records (th_program_stage_trace). */
#define TH_STAGE_NAME_DCE "dce"
#define TH_STAGE_NAME_CSE "cse"
#define TH_STAGE_NAME_ATTENTION "attention" /* only when a chain matched */
#define TH_STAGE_NAME_EXECUTION "execution"
#define TH_STAGE_NAME_FUSER "fuser"
#define TH_STAGE_NAME_DEL "del_last_used"

/* Verify: every value's shape is bounded (a parsed type comment is written into its value unchecked),
 * the trace verifies (th_trace_verify) and its devices exist (only the CPU in this build, unless
 * opts->device_override moves it there). */
th_status th_compile_stage_verify(const th_trace *tr, const th_compile_options *opts);
/* Dead Code Elimination (th_transform_dce). */
th_status th_compile_stage_dce(const th_trace *tr, th_trace **out);
/* Common Subexpression Elimination, followed by DCE (th_transform_cse). */
th_status th_compile_stage_cse(const th_trace *tr, th_trace **out);
/* Transform for execution: every top-level bsym claimed by the first executor of execs that
 * implements it (th_transform_for_execution). */
th_status th_compile_stage_execution(const th_trace *tr, const th_executor_desc *const *execs, int nexecs,
                                     th_trace **out);
/* The fuser's regions (th_fuser_pass), when execs lists the fuser; otherwise nothing is done and *out
 * is NULL. *out the trace with fusion regions, *fusions their compiled code (NULL when there is none;
 * free with th_compile_fusions_free). */
th_status th_compile_stage_fuser(const th_trace *tr, const th_executor_desc *const *execs, int nexecs,
                                 const char *dump_dir, th_trace **out, void **fusions);
void th_compile_fusions_free(void *fusions);
/* Delete Last Used: the `del` lines of the trace the program runs (th_del_last_used). */
th_status th_compile_stage_del(const th_trace *tr, th_trace **out);

/* th_program_compile with executor descriptors instead of names (th_program_compile resolves the
 * names "blas", "eager", "fuser" and those of executors made with th_executor_new, copied for the
 * compilation, and calls this). Also for executors that are not registered (tests). opts->executors
 * is ignored. */
th_status th_program_compile_with(const th_trace *tr, const th_compile_options *opts,
                                  const th_executor_desc *const *execs, int nexecs, th_program **out);

#endif
