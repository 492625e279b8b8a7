/* test_fuser_cache.c — the fuser's on-disk kernel cache (src/executors/fuser/compile.c,
 * $XDG_CACHE_HOME/thunder-c): the key's SHA-256, a second compile of a unit hitting the cache, the cache
 * directory made with its parents (mode 0700), a damaged (emptied) entry rebuilt, eight processes
 * compiling the same new unit into a fresh cache at once (one object, no temporary file), and
 * th_compile_options.dump_dir (the unit's source written with its slots under the trace's names; a
 * cached unit loads without running the compiler). The cache's bound: test_fuser_cache_bound.c; builds
 * when the cache is not writable: test_fuser_cache_private.c; the compiler's invocation:
 * test_fuser_cache_compiler.c. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "fuser_test_util.h"
#include "fuser_trace_util.h"

static int count_files(const char *dir, const char *prefix, const char *suffix) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -c '^%s.*%s$'", dir, prefix, suffix);
  FILE *f = popen(cmd, "r");
  int n = -1;
  if (f) {
    if (fscanf(f, "%d", &n) != 1) n = -1;
    pclose(f);
  }
  return n;
}

static void test_sha256(void **state) {
  (void)state;
  uint8_t h[32];
  th_fuser_sha256("abc", 3, h);
  static const uint8_t want[4] = {0xba, 0x78, 0x16, 0xbf};
  assert_memory_equal(h, want, 4);
  assert_int_equal(h[31], 0xad);
}

static void test_cache_reused(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f64[3]\"\n"
                       "  t0 = prims.add(a, 0.123456789)\n  t1 = prims.mul(t0, t0)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  long c0 = th_fuser_stat_compiles(), h0 = th_fuser_stat_cache_hits();
  assert_int_equal(count_fused(tr, fused, 2), 2);
  long c1 = th_fuser_stat_compiles(), h1 = th_fuser_stat_cache_hits();
  assert_int_equal(count_fused(tr, fused, 2), 2);
  long c2 = th_fuser_stat_compiles(), h2 = th_fuser_stat_cache_hits();
  assert_true(c1 - c0 + h1 - h0 == 1);
  assert_int_equal(c2, c1); /* the second compile hits the disk cache */
  assert_int_equal(h2, h1 + 1);
  th_trace_free(tr);
}

/* A $XDG_CACHE_HOME whose parents do not exist yet: the cache directory is made with its parents
 * (mkdir -p), mode 0700, and the kernel compiles into it. */
static void test_cache_dir_created(void **state) {
  (void)state;
  char root[512], xdg[600], dir[700];
  snprintf(root, sizeof root, "%s/fuser-nested-%ld", TH_BINARY_DIR, (long)getpid());
  snprintf(xdg, sizeof xdg, "%s/a/b", root);
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  struct stat sb;
  assert_int_not_equal(stat(root, &sb), 0); /* fresh */
  setenv("XDG_CACHE_HOME", xdg, 1);
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f64[5]\"\n"
                       "  t0 = prims.add(a, 0.375)\n  t1 = prims.mul(t0, t0)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  assert_int_equal(count_fused(tr, fused, 2), 2);
  th_trace_free(tr);
  setenv("XDG_CACHE_HOME", FUSER_TEST_CACHE, 1);
  assert_int_equal(stat(dir, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(sb.st_mode & 0777, 0700);
  char cmd[800];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
}

/* A damaged cache entry (an emptied .so, as a full disk or a killed copy leaves it) is rebuilt, not
 * reported forever: a child process fills a fresh cache, the entry is truncated, this process (which
 * never loaded it) compiles the same unit again. */
static void test_damaged_cache_entry(void **state) {
  (void)state;
  char xdg[400], dir[440];
  snprintf(xdg, sizeof xdg, "%.300s/fuser-damaged-%ld", TH_BINARY_DIR, (long)getpid());
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  setenv("XDG_CACHE_HOME", xdg, 1);
  const char *text = "def computation(a):\n  # a: \"cpu f64[4]\"\n"
                     "  t0 = prims.add(a, 0.8125)\n  t1 = prims.mul(t0, t0)\n  return t1\n";
  static const char *const fused[] = {"fuser", "eager"};
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    th_trace *t = NULL;
    th_compile_options o;
    memset(&o, 0, sizeof o);
    o.executors = fused;
    o.nexecutors = 2;
    th_program *p = NULL;
    int ok = th_trace_parse(text, "<child>", &t) == TH_OK && th_program_compile(t, &o, &p) == TH_OK;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "for f in '%s'/fusion-*.so; do : > \"$f\"; done", dir);
  assert_int_equal(system(cmd), 0);
  th_trace *tr = parse(text);
  long c0 = th_fuser_stat_compiles();
  int64_t n = 4;
  th_tensor *a = th_tensor_new(TH_F64, 1, &n);
  for (int i = 0; i < 4; i++) ((double *)th_tensor_data(a))[i] = i;
  int nout = 0;
  th_tensor **out = run_with(tr, fused, 2, &a, 1, &nout);
  assert_int_equal(th_fuser_stat_compiles(), c0 + 1); /* rebuilt */
  assert_true(th_tensor_get_f64(out[0], 3) == 3.8125 * 3.8125);
  th_tensor_release(out[0]);
  free(out);
  th_tensor_release(a);
  th_trace_free(tr);
  setenv("XDG_CACHE_HOME", FUSER_TEST_CACHE, 1);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", xdg);
  assert_int_equal(system(cmd), 0);
}

/* Eight processes compile the same new unit into a fresh cache at once: all succeed, run and agree;
 * one object is left, no temporary file. */
static void test_concurrent_processes(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[8]\"\n"
                       "  t0 = prims.sub(a, 4.25)\n  t1 = prims.mul(t0, a)\n  t2 = prims.sum(t1, (0,))\n"
                       "  return (t1, t2)\n");
  static const char *const fused[] = {"fuser", "eager"};
  char dir[300];
  snprintf(dir, sizeof dir, "%s/fuser-concurrent-XXXXXX", TH_BINARY_DIR);
  assert_non_null(mkdtemp(dir));
  enum { NPROC = 8 };
  pid_t pids[NPROC];
  for (int i = 0; i < NPROC; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      setenv("XDG_CACHE_HOME", dir, 1);
      th_compile_options o;
      memset(&o, 0, sizeof o);
      o.executors = fused;
      o.nexecutors = 2;
      th_program *p = NULL;
      if (th_program_compile(tr, &o, &p) != TH_OK) _exit(1);
      int64_t shape[1] = {8};
      th_tensor *a = th_tensor_empty(TH_F32, 1, shape), **out = NULL;
      for (int k = 0; k < 8; k++) ((float *)th_tensor_data(a))[k] = (float)k;
      int nout = 0;
      if (th_program_run(p, 1, &a, &nout, &out) != TH_OK || nout != 2) _exit(2);
      double want = 0;
      for (int k = 0; k < 8; k++) want += ((float)k - 4.25f) * (float)k;
      _exit(th_tensor_get_f64(out[1], 0) == (double)(float)want ? 0 : 3);
    }
  }
  for (int i = 0; i < NPROC; i++) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("process %d: status %d", i, status);
  }
  char sub[400];
  snprintf(sub, sizeof sub, "%s/thunder-c", dir);
  assert_int_equal(count_files(sub, "fusion-", ".so"), 1);
  assert_int_equal(count_files(sub, "tmp-", ""), 0);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
  th_trace_free(tr);
}

/* th_compile_options.dump_dir: the program's unit is written there; a cached unit loads fast. */
static void test_dump_and_cached_load(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[5, 6]\"\n"
                       "  t0 = prims.exp(a)\n  t1 = prims.sum(t0, (1,))\n  return t1\n");
  char dir[300];
  snprintf(dir, sizeof dir, "%s/fuser-dump-XXXXXX", TH_BINARY_DIR);
  assert_non_null(mkdtemp(dir));
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = with_fuser;
  o.nexecutors = 3;
  o.dump_dir = dir;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_OK);
  th_program_free(p);
  assert_int_equal(count_files(dir, "computation-", ".c"), 1);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "grep -c '^void fusion0(char' %s/computation-*.c", dir);
  FILE *f = popen(cmd, "r");
  int n = 0;
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%d", &n), 1);
  pclose(f);
  assert_int_equal(n, 1);
  /* the dump opens with the regions' slots under the trace's names: the input a and the output t1 */
  snprintf(cmd, sizeof cmd, "cat %s/computation-*.c", dir);
  f = popen(cmd, "r");
  assert_non_null(f);
  char head[4096];
  size_t got = fread(head, 1, sizeof head - 1, f);
  head[got] = 0;
  pclose(f);
  const char *slots = " * fusion0:\n *   P[0] in  a f32[5, 6]\n *   P[1] out t1 f32[5]\n */\n";
  if (!strstr(head, slots)) fail_msg("the dump does not open with\n%s\nbut with\n%.600s", slots, head);
  assert_true(strstr(head, slots) < strstr(head, "#include <tgmath.h>"));
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
  /* the unit is in the cache now: compiling again loads it without running the compiler (how fast is
   * bench_fusion's "warm" rows: a benchmark, not a timed test) */
  th_trace *pt = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  th_ir_ctx *ir = th_ir_ctx_new();
  assert_int_equal(th_fuser_codegen(bsym_at(pt, 0), ir, &r), TH_OK);
  char *src = th_fuser_unit_source(ir, NULL, NULL);
  void *h = NULL;
  assert_int_equal(th_fuser_compile(src, 0, NULL, &h), TH_OK); /* may compile (another unit text than the program's) */
  long c0 = th_fuser_stat_compiles(), h0 = th_fuser_stat_cache_hits();
  assert_int_equal(th_fuser_compile(src, 0, NULL, &h), TH_OK);
  assert_int_equal(th_fuser_stat_compiles(), c0);
  assert_int_equal(th_fuser_stat_cache_hits(), h0 + 1);
  assert_non_null(th_fuser_symbol(h, "fusion0"));
  free(src);
  th_fuser_region_clear(&r);
  th_ir_ctx_free(ir);
  th_trace_free(pt);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_sha256),
    cmocka_unit_test(test_cache_reused),
    cmocka_unit_test(test_cache_dir_created),
    cmocka_unit_test(test_damaged_cache_entry),
    cmocka_unit_test(test_concurrent_processes),
    cmocka_unit_test(test_dump_and_cached_load),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
