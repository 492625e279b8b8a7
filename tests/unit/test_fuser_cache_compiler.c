/* test_fuser_cache_compiler.c — how the fuser runs the C compiler to fill its kernel cache (compile.c):
 *   - $CC: with arguments (split at blanks; a flag reaches the compiler), missing (TH_ERR_NOT_IMPLEMENTED
 *     naming it and the executors that need no compiler), empty or blank (cc), at most 15 words and 1023
 *     characters (else TH_ERR_VALUE, cached or not);
 *   - parallel compile: a unit's regions are dealt into parts, each compiled with -c by its own process,
 *     then linked into the one cached object; THUNDER_FUSER_JOBS 1..8 and more jobs than regions on
 *     programs of 2, 3, 7 and 20 regions (separated by prims.matmul, which the fuser leaves to eager) give
 *     eager's results bit for bit, one cached object and no temporary file; a one-CPU affinity mask
 *     compiles in one run; THUNDER_FUSER_JOBS spellings ("+2", "08", empty; errors for trailing text,
 *     hex, fractions, out of range), cached or not;
 *   - a $CC wrapper that fails one part, fails the link, exits 0 without writing, writes a file that does
 *     not load, kills itself, floods stderr or sleeps: a clear error naming the compiler (or success),
 *     nothing left in the cache, no child process and no open descriptor;
 *   - 8 processes and 4 threads compiling into one fresh cache at once all succeed and agree; a cache path
 *     with blanks; a cache directory the process may not write (its log and build go to a private
 *     directory under $TMPDIR); SIGCHLD ignored (a job without an exit status counts by its output). */
#define _GNU_SOURCE /* sched_setaffinity */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "fuser_test_util.h"
#include "fuser_trace_util.h"

static char root[512]; /* this run's scratch directory: wrapper, logs, caches */
static char wrap[600], wlog[600];
static const char *const FUSED[] = {"fuser", "eager"}, *const EAGER[] = {"eager"};

/* A trace of nreg fusion regions: exact elementwise chains (add, neg, abs, mul by 1/8) between
 * nreg - 1 matmuls by b. salt changes the constants (another unit). */
static char *gen(int nreg, int salt) {
  size_t cap = 256 + (size_t)nreg * 256;
  char *s = malloc(cap);
  assert_non_null(s);
  size_t n = (size_t)snprintf(s, cap, "def computation(a, b):\n  # a: \"cpu f32[8, 8]\"\n  # b: \"cpu f32[8, 8]\"\n");
  int k = 0;
  char cur[16] = "a";
  for (int i = 0; i < nreg; i++) {
    n += (size_t)snprintf(s + n, cap - n, "  t%d = prims.add(%s, %d.%d)\n", ++k, cur, salt, i + 1);
    snprintf(cur, sizeof cur, "t%d", k);
    for (int j = 0; j < i % 3; j++) {
      n += (size_t)snprintf(s + n, cap - n, "  t%d = prims.%s(%s)\n", ++k, j ? "abs" : "neg", cur);
      snprintf(cur, sizeof cur, "t%d", k);
    }
    n += (size_t)snprintf(s + n, cap - n, "  t%d = prims.mul(%s, 0.125)\n", ++k, cur);
    snprintf(cur, sizeof cur, "t%d", k);
    if (i + 1 < nreg) {
      n += (size_t)snprintf(s + n, cap - n, "  t%d = prims.matmul(%s, b)\n", ++k, cur);
      snprintf(cur, sizeof cur, "t%d", k);
    }
  }
  snprintf(s + n, cap - n, "  return %s\n", cur);
  return s;
}

static th_tensor *input(uint32_t seed) {
  int64_t shape[2] = {8, 8};
  th_tensor *t = th_tensor_new(TH_F32, 2, shape);
  float *p = th_tensor_data(t);
  for (int i = 0; i < 64; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)((int)(seed >> 9) % 4096 - 2048) / 1024.0f; /* exact in f32, in [-2, 2) */
  }
  return t;
}

static int count_files(const char *dir, const char *prefix, const char *suffix) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name), ls = strlen(suffix);
    if (!strncmp(e->d_name, prefix, strlen(prefix)) && l >= ls && !strcmp(e->d_name + l - ls, suffix)) n++;
  }
  closedir(d);
  return n;
}

static int count_fds(void) { return count_files("/proc/self/fd", "", "") - 1; /* minus opendir's own */ }

/* lines of path starting with prefix ("1 ": a -c run of the wrapper, "0 ": a -shared run) */
static int count_lines(const char *path, const char *prefix) {
  FILE *f = fopen(path, "r");
  int n = 0;
  char line[16384];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, prefix, strlen(prefix))) n++;
  if (f) fclose(f);
  return n;
}

static void no_children(void) {
  int status = 0;
  errno = 0;
  assert_int_equal(waitpid(-1, &status, WNOHANG), -1); /* no child left, not even a zombie */
  assert_int_equal(errno, ECHILD);
}

static void rm_rf(const char *path) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  assert_int_equal(system(cmd), 0);
}

/* group setup: the scratch directory and a $CC wrapper driven by $THUNDER_B6_MODE that logs each run
 * ("1 args" for a -c part, "0 args" for a -shared run) to $THUNDER_B6_LOG. */
static int setup(void **state) {
  setup_cache(state); /* the build tree's cache, for tests that do not make their own */
  snprintf(root, sizeof root, "%.300s/b6-compile-%ld", TH_BINARY_DIR, (long)getpid());
  rm_rf(root);
  if (mkdir(root, 0700) != 0) return -1;
  snprintf(wrap, sizeof wrap, "%s/cc-wrap.sh", root);
  snprintf(wlog, sizeof wlog, "%s/cc.log", root);
  FILE *f = fopen(wrap, "w");
  if (!f) return -1;
  fputs("#!/bin/sh\n"
        "case \" $* \" in *\" --version \"*) exec cc \"$@\";; esac\n"
        "p=0; case \" $* \" in *\" -c \"*) p=1;; esac\n"
        "echo \"$p $*\" >> \"$THUNDER_B6_LOG\"\n"
        "case \"$THUNDER_B6_MODE\" in\n"
        "  failpart) if [ $p = 1 ]; then for a; do case $a in *.c) if grep -q 'void fusion1(' \"$a\"; then\n"
        "    echo 'b6 part boom' >&2; exit 3; fi;; esac; done; fi;;\n"
        "  faillink) if [ $p = 0 ]; then echo 'b6 link boom' >&2; exit 4; fi;;\n"
        "  zeropart) if [ $p = 1 ]; then exit 0; fi;;\n"
        "  zerolink) if [ $p = 0 ]; then exit 0; fi;;\n"
        "  killpart) if [ $p = 1 ]; then kill -9 $$; fi;;\n"
        "  killlink) if [ $p = 0 ]; then kill -9 $$; fi;;\n"
        "  bigerr) head -c 4000000 /dev/zero | tr '\\0' x >&2; exit 1;;\n"
        "  bigerrok) head -c 4000000 /dev/zero | tr '\\0' y >&2;;\n"
        "  nap) sleep 0.3;;\n"
        "  junklink) if [ $p = 0 ]; then o=; n=; for a; do [ \"$n\" = 1 ] && o=$a; n=; [ \"$a\" = -o ] && n=1; done\n"
        "    echo 'not an ELF object' > \"$o\"; exit 0; fi;;\n"
        "esac\n"
        "exec cc \"$@\"\n",
        f);
  if (fclose(f) != 0 || chmod(wrap, 0700) != 0) return -1;
  setenv("CC", wrap, 1);
  setenv("THUNDER_B6_LOG", wlog, 1);
  unsetenv("THUNDER_B6_MODE");
  unsetenv("THUNDER_FUSER_JOBS");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rm_rf(root);
  return 0;
}

/* a fresh cache directory root/name (XDG_CACHE_HOME); its thunder-c directory in dir */
static void fresh_cache(const char *name, char *dir, size_t n) {
  char xdg[700];
  snprintf(xdg, sizeof xdg, "%s/%s", root, name);
  rm_rf(xdg);
  setenv("XDG_CACHE_HOME", xdg, 1);
  snprintf(dir, n, "%s/thunder-c", xdg);
  remove(wlog);
}

/* eager's output of tr on inputs (a, b) */
static th_tensor *eager_out(const th_trace *tr, th_tensor **in) {
  int n = 0;
  th_tensor **o = run_execs(tr, EAGER, 1, in, 2, &n);
  assert_non_null(o);
  assert_int_equal(n, 1);
  th_tensor *r = o[0];
  free(o);
  return r;
}

/* frees a test's program: its text, trace, two inputs and eager's output */
static void drop(char *text, th_trace *tr, th_tensor **in, th_tensor *want) {
  th_tensor_release(want);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
  free(text);
}

static void assert_same(const th_tensor *got, const th_tensor *want) {
  assert_memory_equal(th_tensor_data(got), th_tensor_data(want), 64 * sizeof(float));
}

/* 2, 7 and 20 regions under several job counts (more than the regions too): eager's bits, the parts the
 * job count asks for, one link, one object, no temporary file. */
static void test_jobs_matrix(void **state) {
  (void)state;
  static const struct {
    int nreg;
    const char *jobs;
  } cases[] = {{2, "1"}, {2, "8"}, {7, "2"}, {7, "3"}, {7, "8"}, {20, "1"}, {20, "4"}, {20, "8"}};
  th_tensor *in[2] = {input(1), input(2)};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    char *text = gen(cases[c].nreg, 0);
    th_trace *tr = parse(text);
    th_tensor *want = eager_out(tr, in);
    char dir[800];
    fresh_cache("matrix", dir, sizeof dir);
    setenv("THUNDER_FUSER_JOBS", cases[c].jobs, 1);
    int nout = 0;
    th_tensor **got = run_fused(tr, in, 2, &nout, true);
    assert_int_equal(nout, 1);
    assert_same(got[0], want);
    int jobs = atoi(cases[c].jobs), parts = jobs > 1 ? (jobs < cases[c].nreg ? jobs : cases[c].nreg) : 0;
    assert_int_equal(count_lines(wlog, "1 "), parts);
    assert_int_equal(count_lines(wlog, "0 "), 1);
    assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
    assert_int_equal(count_files(dir, "tmp-", ""), 0);
    release_all(got, nout);
    th_tensor_release(want);
    th_trace_free(tr);
    free(text);
  }
  unsetenv("THUNDER_FUSER_JOBS");
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
}

/* Each failure of the compiler: the status, the compiler's name and its message in the error, no program,
 * nothing in the cache, no child left, no descriptor left open; the same cache then compiles. */
static void test_wrapper_failures(void **state) {
  (void)state;
  static const struct {
    const char *mode, *msg;
  } cases[] = {
    {"failpart", "failed on a generated kernel (exit 3): b6 part boom"},
    {"faillink", "failed linking the generated kernels (exit 4): b6 link boom"},
    {"zeropart", "failed linking the generated kernels"},
    {"zerolink", "exited 0 but wrote no object file"},
    {"killpart", "failed on a generated kernel (killed by signal 9)"},
    {"killlink", "failed linking the generated kernels (killed by signal 9)"},
    {"junklink", "built an object that does not load"},
    {"bigerr", "failed on a generated kernel (exit 1): xxxx"},
  };
  char *text = gen(5, 3);
  th_trace *tr = parse(text);
  th_tensor *in[2] = {input(3), input(4)};
  th_tensor *want = eager_out(tr, in);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = FUSED;
  o.nexecutors = 2;
  setenv("THUNDER_FUSER_JOBS", "3", 1);
  int fds = count_fds();
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    char dir[800];
    fresh_cache("fail", dir, sizeof dir);
    setenv("THUNDER_B6_MODE", cases[c].mode, 1);
    th_program *p = NULL;
    assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_RUNTIME);
    assert_null(p);
    const char *e = th_last_error();
    if (!strstr(e, wrap) || !strstr(e, cases[c].msg)) fail_msg("%s: %s", cases[c].mode, e);
    assert_true(strlen(e) < 1024);
    assert_int_equal(count_files(dir, "fusion-", ".so"), 0);
    assert_int_equal(count_files(dir, "tmp-", ""), 0);
    no_children();
    assert_int_equal(count_fds(), fds);
  }
  /* a slow compiler and one writing much to stderr but succeeding: compiled, eager's bits */
  const char *ok[] = {"nap", "bigerrok", ""};
  for (size_t c = 0; c < sizeof ok / sizeof *ok; c++) {
    char dir[800];
    fresh_cache("fail", dir, sizeof dir);
    setenv("THUNDER_B6_MODE", ok[c], 1);
    int nout = 0;
    th_tensor **got = run_fused(tr, in, 2, &nout, true);
    assert_same(got[0], want);
    release_all(got, nout);
    assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
    assert_int_equal(count_files(dir, "tmp-", ""), 0);
    assert_int_equal(count_lines(wlog, "1 "), 3);
    no_children();
  }
  unsetenv("THUNDER_B6_MODE");
  /* no such compiler; $CC empty or blank: cc */
  char dir[800];
  fresh_cache("nocc", dir, sizeof dir);
  setenv("CC", "/nonexistent/b6-cc", 1);
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(strstr(th_last_error(), "/nonexistent/b6-cc"));
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  no_children();
  const char *blank[] = {"", "   "};
  for (int k = 0; k < 2; k++) {
    fresh_cache("blankcc", dir, sizeof dir);
    setenv("CC", blank[k], 1);
    int nout = 0;
    th_tensor **got = run_fused(tr, in, 2, &nout, true);
    assert_same(got[0], want);
    release_all(got, nout);
    assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
    assert_int_equal(count_files(dir, "tmp-", ""), 0);
  }
  setenv("CC", wrap, 1);
  no_children();
  assert_int_equal(count_fds(), fds + 0);
  unsetenv("THUNDER_FUSER_JOBS");
  drop(text, tr, in, want);
}

/* Eight processes compile the same 7-region unit into one fresh cache at once, with 2 to 4 jobs each. */
static void test_fork_concurrent(void **state) {
  (void)state;
  char *text = gen(7, 5);
  th_trace *tr = parse(text);
  th_tensor *in[2] = {input(5), input(6)};
  th_tensor *want = eager_out(tr, in);
  char dir[800];
  fresh_cache("fork", dir, sizeof dir);
  enum { NPROC = 8 };
  pid_t pids[NPROC];
  for (int i = 0; i < NPROC; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      char j[4];
      snprintf(j, sizeof j, "%d", 2 + i % 3);
      setenv("THUNDER_FUSER_JOBS", j, 1);
      th_compile_options o;
      memset(&o, 0, sizeof o);
      o.executors = FUSED;
      o.nexecutors = 2;
      th_program *p = NULL;
      if (th_program_compile(tr, &o, &p) != TH_OK) {
        fprintf(stderr, "child %d: %s\n", i, th_last_error());
        _exit(1);
      }
      th_tensor **out = NULL;
      int nout = 0;
      if (th_program_run(p, 2, in, &nout, &out) != TH_OK || nout != 1) _exit(2);
      _exit(memcmp(th_tensor_data(out[0]), th_tensor_data(want), 64 * sizeof(float)) ? 3 : 0);
    }
  }
  for (int i = 0; i < NPROC; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("process %d: status %d", i, status);
  }
  assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  drop(text, tr, in, want);
}

/* Four threads of this process compile at once: two the same unit, two another one. */
typedef struct {
  const th_trace *tr;
  th_tensor **in;
  const th_tensor *want;
  int rc; /* 0 ok, 1 compile, 2 run, 3 wrong result */
  char err[256];
} thread_job;

static void *compile_thread(void *arg) {
  thread_job *j = arg;
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = FUSED;
  o.nexecutors = 2;
  th_program *p = NULL;
  if (th_program_compile(j->tr, &o, &p) != TH_OK) {
    snprintf(j->err, sizeof j->err, "%s", th_last_error());
    j->rc = 1;
    return NULL;
  }
  th_tensor **out = NULL;
  int nout = 0;
  if (th_program_run(p, 2, j->in, &nout, &out) != TH_OK || nout != 1) {
    j->rc = 2;
  } else {
    j->rc = memcmp(th_tensor_data(out[0]), th_tensor_data(j->want), 64 * sizeof(float)) ? 3 : 0;
    release_all(out, nout);
  }
  th_program_free(p);
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  char *ta = gen(6, 7), *tb = gen(4, 8);
  th_trace *tr[2] = {parse(ta), parse(tb)};
  th_tensor *in[2] = {input(7), input(8)};
  th_tensor *want[2] = {eager_out(tr[0], in), eager_out(tr[1], in)};
  char dir[800];
  fresh_cache("threads", dir, sizeof dir);
  setenv("THUNDER_FUSER_JOBS", "3", 1);
  int fds = count_fds();
  enum { NT = 4 };
  pthread_t t[NT];
  thread_job jobs[NT];
  for (int i = 0; i < NT; i++) {
    memset(&jobs[i], 0, sizeof jobs[i]);
    jobs[i].tr = tr[i % 2];
    jobs[i].in = in;
    jobs[i].want = want[i % 2];
    assert_int_equal(pthread_create(&t[i], NULL, compile_thread, &jobs[i]), 0);
  }
  for (int i = 0; i < NT; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < NT; i++)
    if (jobs[i].rc) fail_msg("thread %d: %d %s", i, jobs[i].rc, jobs[i].err);
  assert_int_equal(count_files(dir, "fusion-", ".so"), 2);
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  no_children();
  assert_int_equal(count_fds(), fds);
  unsetenv("THUNDER_FUSER_JOBS");
  for (int k = 0; k < 2; k++) {
    th_tensor_release(want[k]);
    th_tensor_release(in[k]);
    th_trace_free(tr[k]);
  }
  free(ta);
  free(tb);
}

/* THUNDER_FUSER_JOBS spellings: "+2" and "08" are numbers, empty is unset; trailing text, hex, a
 * fraction and a number past long are errors (cached or not). With no THUNDER_FUSER_JOBS a process
 * allowed one CPU compiles in one run. The cache under a path with blanks works (no shell). */
static void test_jobs_env(void **state) {
  (void)state;
  char *text = gen(5, 9);
  th_trace *tr = parse(text);
  th_tensor *in[2] = {input(9), input(10)};
  th_tensor *want = eager_out(tr, in);
  static const struct {
    const char *v;
    int parts;
  } good[] = {{"+2", 2}, {"08", 5}, {"", -1}};
  for (size_t c = 0; c < sizeof good / sizeof *good; c++) {
    char dir[800];
    fresh_cache("env", dir, sizeof dir);
    setenv("THUNDER_FUSER_JOBS", good[c].v, 1);
    int nout = 0;
    th_tensor **got = run_fused(tr, in, 2, &nout, true);
    assert_same(got[0], want);
    release_all(got, nout);
    if (good[c].parts >= 0) assert_int_equal(count_lines(wlog, "1 "), good[c].parts);
    assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
  }
  const char *bad[] = {"2 ", " 2", "2x", "0x2", "3.0", "99999999999999999999", "-0", "9", "+"};
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = FUSED;
  o.nexecutors = 2;
  for (size_t c = 0; c < sizeof bad / sizeof *bad; c++) {
    setenv("THUNDER_FUSER_JOBS", bad[c], 1); /* the "env" cache holds the unit */
    th_program *p = NULL;
    assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_VALUE);
    assert_null(p);
    assert_non_null(strstr(th_last_error(), "THUNDER_FUSER_JOBS"));
  }
  unsetenv("THUNDER_FUSER_JOBS");
  /* one CPU in the affinity mask: one -shared run, no parts */
  char dir[800];
  fresh_cache("one-cpu", dir, sizeof dir);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) _exit(10);
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &set)) first++;
    CPU_ZERO(&set);
    CPU_SET(first, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(11);
    th_program *p = NULL;
    if (th_program_compile(tr, &o, &p) != TH_OK) _exit(12);
    th_program_free(p);
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_int_equal(count_lines(wlog, "1 "), 0);
  assert_int_equal(count_lines(wlog, "0 "), 1);
  assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
  /* a cache path with blanks */
  fresh_cache("with  blanks dir", dir, sizeof dir);
  setenv("THUNDER_FUSER_JOBS", "4", 1);
  int nout = 0;
  th_tensor **got = run_fused(tr, in, 2, &nout, true);
  assert_same(got[0], want);
  release_all(got, nout);
  assert_int_equal(count_lines(wlog, "1 "), 4);
  assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  unsetenv("THUNDER_FUSER_JOBS");
  drop(text, tr, in, want);
}

/* $CC of more words or characters than the compiler's argument vector holds: TH_ERR_VALUE, cached or
 * not, and 15 words reach the compiler whole; a cache directory that cannot be written (a read-only one)
 * is not reported as a missing compiler: the build goes to a private directory; with SIGCHLD ignored (a
 * host's choice, inherited) waitpid answers ECHILD: a job without an exit status counts by its output, the
 * object must load, and a failing part still fails. */
static void test_cc_limits_readonly_cache_sigchld(void **state) {
  (void)state;
  char *text = gen(4, 11);
  th_trace *tr = parse(text);
  th_tensor *in[2] = {input(11), input(12)};
  th_tensor *want = eager_out(tr, in);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = FUSED;
  o.nexecutors = 2;
  char dir[800];
  /* $CC too long: 16 words, or 1024 characters */
  fresh_cache("longcc", dir, sizeof dir);
  char cc[1200];
  snprintf(cc, sizeof cc, "%s", wrap);
  for (int i = 0; i < 15; i++) snprintf(cc + strlen(cc), sizeof cc - strlen(cc), " -DW%d", i);
  setenv("CC", cc, 1);
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "$CC: expected at most 15 words and 1023 characters, got 16 words"));
  char longcc[1700];
  snprintf(longcc, sizeof longcc, "%s -D", wrap);
  memset(longcc + strlen(longcc), 'X', 1100);
  longcc[sizeof longcc - 1] = 0;
  longcc[strlen(wrap) + 3 + 1100] = 0;
  setenv("CC", longcc, 1);
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "got 2 words and"));
  snprintf(cc, sizeof cc, "%s", wrap);
  for (int i = 0; i < 14; i++) snprintf(cc + strlen(cc), sizeof cc - strlen(cc), " -DW%d", i);
  setenv("CC", cc, 1); /* 15 words: fine */
  int nout = 0;
  th_tensor **got = run_fused(tr, in, 2, &nout, true);
  assert_same(got[0], want);
  release_all(got, nout);
  FILE *lf = fopen(wlog, "r"); /* every run of the compiler got the last word */
  assert_non_null(lf);
  char line[16384];
  int runs = 0;
  while (fgets(line, sizeof line, lf)) runs++, assert_non_null(strstr(line, " -DW13 "));
  fclose(lf);
  assert_true(runs >= 1);
  setenv("CC", wrap, 1);
  /* a cache directory this process may not write (0555; in a child that drops root to nobody, for whom
   * the mode holds): the compiler's log and the build go to a private directory under $TMPDIR, the
   * program compiles, and nothing is written into the cache */
  char ro[64] = "/tmp/thc-b6-ro-XXXXXX", rodir[128];
  assert_non_null(mkdtemp(ro));
  assert_int_equal(chmod(ro, 0755), 0);
  snprintf(rodir, sizeof rodir, "%s/thunder-c", ro);
  assert_int_equal(mkdir(rodir, 0555), 0);
  assert_int_equal(chmod(rodir, 0555), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(10);
    setenv("XDG_CACHE_HOME", ro, 1);
    setenv("CC", "cc", 1);
    th_program *q = NULL;
    th_status st = th_program_compile(tr, &o, &q);
    if (st != TH_OK) {
      fprintf(stderr, "status %d: %s\n", st, th_last_error());
      _exit(11);
    }
    th_program_free(q);
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("read-only cache child: status %d", status);
  assert_int_equal(rmdir(rodir), 0); /* empty: nothing was written */
  assert_int_equal(rmdir(ro), 0);
  /* SIGCHLD ignored: compiles in parts and runs; a failing part still fails (in a child) */
  fresh_cache("sigign", dir, sizeof dir);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGCHLD, SIG_IGN);
    setenv("THUNDER_FUSER_JOBS", "2", 1);
    th_program *q = NULL;
    if (th_program_compile(tr, &o, &q) != TH_OK) {
      fprintf(stderr, "%s\n", th_last_error());
      _exit(20);
    }
    th_tensor **out = NULL;
    int n = 0;
    if (th_program_run(q, 2, in, &n, &out) != TH_OK || n != 1) _exit(21);
    if (memcmp(th_tensor_data(out[0]), th_tensor_data(want), 64 * sizeof(float))) _exit(22);
    char xdg[700];
    snprintf(xdg, sizeof xdg, "%s/sigign-fail", root);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("THUNDER_B6_MODE", "failpart", 1);
    th_program *r = NULL;
    th_status st = th_program_compile(tr, &o, &r);
    if (st != TH_ERR_RUNTIME || !strstr(th_last_error(), "no exit status")) {
      fprintf(stderr, "status %d: %s\n", st, th_last_error());
      _exit(23);
    }
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("SIGCHLD child: status %d", status);
  assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  no_children();
  drop(text, tr, in, want);
}

/* $CC with arguments (make's convention: split at blanks) compiles; the flag reaches the compiler
 * (an -include of a missing file makes the compile fail, naming the whole $CC). */
static void test_cc_with_arguments(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[3]\"\n"
                       "  t0 = prims.add(a, 2.25)\n  t1 = prims.mul(t0, a)\n  return t1\n");
  static const char *const fused[] = {"fuser", "eager"};
  char *old = getenv("CC") ? strdup(getenv("CC")) : NULL;
  setenv("CC", "cc  -DTHUNDER_UNUSED_FLAG=1", 1);
  assert_int_equal(count_fused(tr, fused, 2), 2);
  setenv("CC", "cc -include /nonexistent/thunder-test.h", 1); /* the compiler runs and fails */
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = fused;
  o.nexecutors = 2;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_RUNTIME);
  assert_non_null(strstr(th_last_error(), "cc -include /nonexistent/thunder-test.h failed"));
  if (old)
    setenv("CC", old, 1);
  else
    unsetenv("CC");
  free(old);
  th_trace_free(tr);
}

static void test_missing_compiler(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f32[3]\"\n"
                       "  t0 = prims.add(a, 7.5)\n  t1 = prims.mul(t0, t0)\n  return t1\n");
  th_trace *lone = parse("def computation(a):\n  # a: \"cpu f32[3]\"\n  t0 = prims.add(a, 7.5)\n  return t0\n");
  static const char *const fused[] = {"fuser", "eager"}, *const unfused[] = {"blas", "eager"};
  char *old = getenv("CC") ? strdup(getenv("CC")) : NULL;
  setenv("CC", "/nonexistent/thunder-cc", 1);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = fused;
  o.nexecutors = 2;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(strstr(th_last_error(), "/nonexistent/thunder-cc"));
  assert_non_null(strstr(th_last_error(), "[\"blas\", \"eager\"]"));
  assert_int_equal(th_program_compile(tr, NULL, &p), TH_ERR_NOT_IMPLEMENTED); /* the default list fuses */
  /* a program without regions needs no compiler; blas,eager runs everything */
  assert_int_equal(th_program_compile(lone, &o, &p), TH_OK);
  th_program_free(p);
  o.executors = unfused;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_OK);
  int64_t shape[1] = {3};
  th_tensor *a = th_tensor_empty(TH_F32, 1, shape), **out = NULL;
  for (int i = 0; i < 3; i++) ((float *)th_tensor_data(a))[i] = (float)i;
  int nout = 0;
  assert_int_equal(th_program_run(p, 1, &a, &nout, &out), TH_OK);
  assert_true(th_tensor_get_f64(out[0], 2) == 9.5 * 9.5);
  th_tensor_release(out[0]);
  free(out);
  th_tensor_release(a);
  th_program_free(p);
  if (old)
    setenv("CC", old, 1);
  else
    unsetenv("CC");
  free(old);
  th_trace_free(lone);
  th_trace_free(tr);
}

/* A unit of three regions compiled in parts: with THUNDER_FUSER_JOBS=3 each region is compiled with -c by
 * its own compiler process and the objects are linked into the one cached object; with 1 the unit is one
 * -shared run. A $CC wrapper logs every run and fails a part holding a given function; both builds give
 * eager's results bit for bit, a failing part fails the compile naming the compiler's message and leaves
 * no temporary file, and an out-of-range THUNDER_FUSER_JOBS is a clear error. */
static int count_lines_with(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  int n = 0;
  char line[8192];
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, needle)) n++;
  if (f) fclose(f);
  return n;
}

static void test_parallel_parts(void **state) {
  (void)state;
  static const char text[] = "def computation(a, b):\n  # a: \"cpu f32[4, 4]\"\n  # b: \"cpu f32[4, 4]\"\n"
                             "  t0 = prims.add(a, 1.5)\n  t1 = prims.mul(t0, t0)\n  t2 = prims.matmul(t1, b)\n"
                             "  t3 = prims.sub(t2, 0.25)\n  t4 = prims.mul(t3, a)\n  t5 = prims.matmul(t4, b)\n"
                             "  t6 = prims.neg(t5)\n  t7 = prims.mul(t6, 3.0)\n  return t7\n";
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  char proot[400], pwrap[500], log[500], cmd[1400];
  snprintf(proot, sizeof proot, "%.300s/fuser-parts-%ld", TH_BINARY_DIR, (long)getpid());
  snprintf(pwrap, sizeof pwrap, "%s/cc-wrap.sh", proot);
  snprintf(log, sizeof log, "%s/cc.log", proot);
  assert_int_equal(mkdir(proot, 0700), 0);
  FILE *f = fopen(pwrap, "w");
  assert_non_null(f);
  fputs("#!/bin/sh\necho \"$*\" >> \"$THUNDER_TEST_CC_LOG\"\nfor a in \"$@\"; do case \"$a\" in *.c)\n"
        "  if [ -n \"$THUNDER_TEST_CC_FAIL\" ] && grep -q \"$THUNDER_TEST_CC_FAIL\" \"$a\"; then\n"
        "    echo \"injected failure\" >&2; exit 1; fi;; esac; done\nexec cc \"$@\"\n",
        f);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(pwrap, 0700), 0);
  char *old_cc = getenv("CC") ? strdup(getenv("CC")) : NULL;
  setenv("CC", pwrap, 1);
  setenv("THUNDER_TEST_CC_LOG", log, 1);
  th_trace *tr = parse(text);
  int64_t shape[2] = {4, 4};
  th_tensor *in[2] = {random_tensor(TH_F32, 2, shape), random_tensor(TH_F32, 2, shape)};
  int ne = 0;
  th_tensor **want = run_with(tr, eager, 1, in, 2, &ne);
  const char *jobs[2] = {"3", "1"};
  for (int k = 0; k < 2; k++) {
    char xdg[500], dir[540];
    snprintf(xdg, sizeof xdg, "%s/cache%d", proot, k);
    snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
    setenv("XDG_CACHE_HOME", xdg, 1);
    setenv("THUNDER_FUSER_JOBS", jobs[k], 1);
    remove(log);
    assert_int_equal(count_fused(tr, fused, 2), 6);
    if (k == 0) { /* one -c run per region, then one link of the three objects */
      assert_int_equal(count_lines_with(log, " -c "), 3);
      assert_int_equal(count_lines_with(log, "-shared"), 1);
      assert_int_equal(count_lines_with(log, ".o -lm"), 1);
    } else {
      assert_int_equal(count_lines_with(log, " -c "), 0);
      assert_int_equal(count_lines_with(log, "-shared"), 1);
    }
    int n = 0;
    th_tensor **got = run_with(tr, fused, 2, in, 2, &n); /* loads the cached object */
    assert_int_equal(n, 1);
    assert_memory_equal(th_tensor_data(got[0]), th_tensor_data(want[0]), 16 * sizeof(float));
    th_tensor_release(got[0]);
    free(got);
    assert_int_equal(count_files(dir, "fusion-", ".so"), 1);
    assert_int_equal(count_files(dir, "tmp-", ""), 0);
  }
  /* a failing part: the compile fails with the compiler's message, nothing is left behind */
  char xdg[500], dir[540];
  snprintf(xdg, sizeof xdg, "%s/cache-fail", proot);
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  setenv("XDG_CACHE_HOME", xdg, 1);
  setenv("THUNDER_FUSER_JOBS", "3", 1);
  setenv("THUNDER_TEST_CC_FAIL", "void fusion1(", 1);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = fused;
  o.nexecutors = 2;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_RUNTIME);
  assert_null(p);
  assert_non_null(strstr(th_last_error(), "injected failure"));
  assert_non_null(strstr(th_last_error(), "on a generated kernel (exit 1)"));
  assert_int_equal(count_files(dir, "fusion-", ".so"), 0);
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  unsetenv("THUNDER_TEST_CC_FAIL");
  /* THUNDER_FUSER_JOBS out of range or not a number: an error even where the unit is cached (cache0) */
  snprintf(xdg, sizeof xdg, "%s/cache0", proot);
  setenv("XDG_CACHE_HOME", xdg, 1);
  const char *bad[] = {"0", "9", "two", "2x", "-1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("THUNDER_FUSER_JOBS", bad[i], 1);
    assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_VALUE);
    char want_msg[128];
    snprintf(want_msg, sizeof want_msg, "THUNDER_FUSER_JOBS: expected an integer from 1 to 8, got '%s'", bad[i]);
    assert_non_null(strstr(th_last_error(), want_msg));
  }
  assert_int_equal(count_files(dir, "tmp-", ""), 0);
  unsetenv("THUNDER_FUSER_JOBS");
  unsetenv("THUNDER_TEST_CC_LOG");
  if (old_cc)
    setenv("CC", old_cc, 1);
  else
    unsetenv("CC");
  free(old_cc);
  setenv("XDG_CACHE_HOME", FUSER_TEST_CACHE, 1);
  th_tensor_release(want[0]);
  free(want);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", proot);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_jobs_matrix),       cmocka_unit_test(test_wrapper_failures),
    cmocka_unit_test(test_fork_concurrent),   cmocka_unit_test(test_threads),
    cmocka_unit_test(test_jobs_env),          cmocka_unit_test(test_cc_limits_readonly_cache_sigchld),
    cmocka_unit_test(test_cc_with_arguments), cmocka_unit_test(test_missing_compiler),
    cmocka_unit_test(test_parallel_parts),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
