/* fuser_test_util.h — helpers shared by the fuser's cmocka tests (test_fuser_*.c, test_eager_reductions.c):
 * a per-build kernel cache, parsing, running a trace with given executors or with the fuser listed first
 * (the program's execution trace verified) and releasing outputs. Every helper is marked unused, so a test
 * includes the header whole and uses what it needs. Include after <cmocka.h>, <stdbool.h>, <string.h>,
 * <stdlib.h>, <sys/stat.h> and "thunder/thunder.h". */
#ifndef TH_TEST_FUSER_TEST_UTIL_H
#define TH_TEST_FUSER_TEST_UTIL_H

#define TH_TEST_HELPER static __attribute__((unused))

/* the build tree's kernel cache ($XDG_CACHE_HOME of these tests; reruns hit it) */
#define FUSER_TEST_CACHE TH_BINARY_DIR "/fuser-test-cache"

/* cmocka group setup: kernels compiled by these tests go to the build tree's cache, not ~/.cache */
TH_TEST_HELPER int setup_cache(void **state) {
  (void)state;
  mkdir(FUSER_TEST_CACHE, 0700);
  setenv("XDG_CACHE_HOME", FUSER_TEST_CACHE, 1);
  return 0;
}

TH_TEST_HELPER th_trace *parse(const char *text) {
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<test>", &tr) != TH_OK) fail_msg("parse: %s\n%s", th_last_error(), text);
  return tr;
}

/* Compiles tr with the executors ex[0..nex); fails the test unless it compiles and the execution trace
 * verifies (and, when must_fuse, holds a fusion region). */
TH_TEST_HELPER th_program *compile_execs(const th_trace *tr, const char *const *ex, int nex, bool must_fuse) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  if (th_trace_verify(th_program_trace(p)) != TH_OK) fail_msg("execution trace: %s", th_last_error());
  char *et = th_trace_print(th_program_trace(p), 1);
  assert_non_null(et);
  if (must_fuse && !strstr(et, "fusion")) fail_msg("nothing fused:\n%s", et);
  free(et);
  return p;
}

/* Runs tr compiled with ex[0..nex): the outputs (*nout of them, the caller's: release_all), or NULL
 * with the error in th_last_error when the run fails. */
TH_TEST_HELPER th_tensor **run_execs(const th_trace *tr, const char *const *ex, int nex, th_tensor **in, int nin,
                                     int *nout) {
  th_program *p = compile_execs(tr, ex, nex, false);
  th_tensor **out = NULL;
  th_status st = th_program_run(p, nin, in, nout, &out);
  th_program_free(p);
  return st == TH_OK ? out : NULL;
}

/* Runs tr with executors fuser, eager; fails the test unless the execution trace verifies, the run
 * succeeds and, when must_fuse, the program holds a fusion region. The outputs (*nout of them) belong to
 * the caller (release_all). */
TH_TEST_HELPER th_tensor **run_fused(const th_trace *tr, th_tensor **in, int nin, int *nout, bool must_fuse) {
  static const char *const ex[] = {"fuser", "eager"};
  th_program *p = compile_execs(tr, ex, 2, must_fuse);
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  th_program_free(p);
  return out;
}

TH_TEST_HELPER void release_all(th_tensor **t, int n) {
  for (int i = 0; i < n; i++) th_tensor_release(t[i]);
  free(t);
}

#endif
