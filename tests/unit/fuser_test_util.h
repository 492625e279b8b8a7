/* fuser_test_util.h — helpers shared by the fuser's adversarial cmocka tests (test_fuser_edges.c,
 * test_fuser_prefetch_edges.c): a per-build kernel cache, parsing, running a trace with the fuser
 * listed first (the program's execution trace verified) and releasing outputs. Include after
 * <cmocka.h>, <stdbool.h>, <string.h>, <stdlib.h>, <sys/stat.h> and "thunder/thunder.h". */
#ifndef TH_TEST_FUSER_TEST_UTIL_H
#define TH_TEST_FUSER_TEST_UTIL_H

/* cmocka group setup: kernels compiled by these tests go to the build tree's cache, not ~/.cache */
static int setup_cache(void **state) {
  (void)state;
  static char root[256];
  snprintf(root, sizeof root, "%s/fuser-test-cache", TH_BINARY_DIR);
  mkdir(root, 0700);
  setenv("XDG_CACHE_HOME", root, 1);
  return 0;
}

static th_trace *parse(const char *text) {
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<test>", &tr) != TH_OK) fail_msg("parse: %s\n%s", th_last_error(), text);
  return tr;
}

/* Runs tr with executors fuser, eager; fails the test unless the execution trace verifies and, when
 * must_fuse, holds a fusion region. The outputs (*nout of them) belong to the caller (release_all). */
static th_tensor **run_fused(const th_trace *tr, th_tensor **in, int nin, int *nout, bool must_fuse) {
  static const char *const ex[] = {"fuser", "eager"};
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = 2;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  if (th_trace_verify(th_program_trace(p)) != TH_OK) fail_msg("execution trace: %s", th_last_error());
  char *et = th_trace_print(th_program_trace(p), 1);
  assert_non_null(et);
  if (must_fuse && !strstr(et, "fusion")) fail_msg("nothing fused:\n%s", et);
  free(et);
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  th_program_free(p);
  return out;
}

static void release_all(th_tensor **t, int n) {
  for (int i = 0; i < n; i++) th_tensor_release(t[i]);
  free(t);
}

#endif
