/* test_fuser_cache_private.c — the fuser's kernel cache when the process may not write it: private builds
 * of misses and hits from a read-only cache (compile.c: th_fuser_compile's hit path, build_private,
 * compiler_version's capture through a pipe), and the cache key's host CPU. A cache root made, filled by
 * root and made 0755 is used by `nobody` (root only; skipped
 * otherwise). Every compile runs in a forked child (this process never compiles, so each child captures
 * or reads the compiler's version itself, as a new process would). References are exact: the program of
 * constant k computes t1 = (a + k) * a and t2 = sum(t1) over a = 0..7, all exact in float64 with
 * k = n + 0.5 (t2 = 140 + 28 k). Cases:
 *   - a hit and 11 misses in a row (one of them repeated: a private build is not kept), as nobody: exact
 *     results, every miss compiled, no descriptor left open, $TMPDIR left empty, the cache untouched;
 *   - $TMPDIR unset or relative (ignored: /tmp), nonexistent, unwritable, a regular file: a miss either
 *     works or fails with TH_ERR_RUNTIME naming the cache and $TMPDIR with the reason; a hit (the
 *     compiler's version readable in the cache) works whatever $TMPDIR is; near PATH_MAX: a 3960-char
 *     $TMPDIR works, a 4085-char one fails cleanly; nothing is left behind;
 *   - cc-*.txt unreadable to nobody: the version is captured again (through a pipe: $TMPDIR left empty,
 *     even one that does not exist), cc-*.txt is not replaced; a cache root builds writes cc-*.txt 0644 under umask 077 and leaves no tmp- file;
 *   - a damaged (truncated) entry in the read-only cache: nobody's run builds privately, exact, and the
 *     entry is left as it was;
 *   - 8 nobody processes at once, half first hitting, half first missing (some the same program), then
 *     the other way round; and 2 threads of one process missing the same program at once: all exact,
 *     $TMPDIR empty, the cache untouched;
 *   - XDG_CACHE_HOME naming a regular file, or its thunder-c being one: TH_ERR_RUNTIME naming it (also as
 *     nobody: root);
 *   - a process whose effective uid is nobody but real uid root: the cache is judged by the effective
 *     one (a private build);
 *   - a compiler that leaves files beside its output (-save-temps=obj): the private directory still goes;
 *   - a hit this process cannot load for want of descriptors (EMFILE): an error, and the sound entry kept;
 *   - another CPU (a /proc/cpuinfo with other flags, read through an fopen hook): another key, so a
 *     kernel built for one CPU is never loaded on another. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <threads.h>
#include <unistd.h>

#include <cmocka.h>

#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "cache_test_prog.h"

/* fopen hook: with fake_cpuinfo set, /proc/cpuinfo reads as that text (the library's cpu_init) */
static const char *fake_cpuinfo;
FILE *fopen(const char *path, const char *mode) {
  FILE *(*real)(const char *, const char *);
  void *r = dlsym(RTLD_NEXT, "fopen");
  memcpy(&real, &r, sizeof real);
  if (fake_cpuinfo && path && !strcmp(path, "/proc/cpuinfo"))
    return fmemopen((void *)fake_cpuinfo, strlen(fake_cpuinfo), "r");
  return real(path, mode);
}

static char scratch[64]; /* /tmp/th-privbuild-XXXXXX, 0755: nobody may traverse it */

/* ---- children ---- */
#define CHECK(cond, code, ...)                                                                                         \
  do {                                                                                                                 \
    if (!(cond)) {                                                                                                     \
      fprintf(stderr, "child %ld: ", (long)getpid());                                                                  \
      fprintf(stderr, __VA_ARGS__);                                                                                    \
      fprintf(stderr, "\n");                                                                                           \
      _exit(code);                                                                                                     \
    }                                                                                                                  \
  } while (0)

static void become_nobody(void) {
  CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0, 90, "cannot become nobody");
}

/* Runs fn(arg) in a forked child (as nobody when asked) with XDG_CACHE_HOME xdg and TMPDIR tmpdir (NULL:
 * unset); fn returns the exit code (0: passed). Fails the test unless the child exits 0. */
static void in_child(const char *what, bool nobody, const char *xdg, const char *tmpdir, int (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (nobody) become_nobody();
    setenv("XDG_CACHE_HOME", xdg, 1);
    if (tmpdir)
      setenv("TMPDIR", tmpdir, 1);
    else
      unsetenv("TMPDIR");
    _exit(fn(arg));
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("%s: child status 0x%x", what, status);
}

static int build_k(void *arg) {
  double k = *(const double *)arg;
  th_status st = run_prog(k);
  CHECK(st == TH_OK, 1, "k = %g: %s", k, th_last_error());
  return 0;
}

/* Open descriptors of this process (fcntl: /proc/self is root's once a process has become nobody). */
static int count_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++)
    if (fcntl(fd, F_GETFD) != -1) n++;
  return n;
}

/* Entries of dir (not . and ..); -1 when it cannot be listed. */
static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* A "fingerprint" of a directory: the names, inodes, sizes and mtimes of its entries, summed (enough to
 * see a file added, removed, replaced, rewritten or touched). */
static unsigned long long dir_print(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  unsigned long long h = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    unsigned long long x = 1469598103934665603ULL;
    for (const char *p = de->d_name; *p; p++) x = (x ^ (unsigned char)*p) * 1099511628211ULL;
    x ^= (unsigned long long)st.st_ino * 31 + (unsigned long long)st.st_size * 7 +
         (unsigned long long)st.st_mtim.tv_sec * 1000003ULL + (unsigned long long)st.st_mtim.tv_nsec;
    h += x * 0x9E3779B97F4A7C15ULL;
  }
  closedir(d);
  return h;
}

/* dir/<the last fusion-*.so listed> into so (n bytes); fails the test when there is none. */
static void find_kernel(const char *dir, char *so, size_t n) {
  so[0] = 0;
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *de;
  while ((de = readdir(d)))
    if (!strncmp(de->d_name, "fusion-", 7)) snprintf(so, n, "%s/%s", dir, de->d_name);
  closedir(d);
  assert_true(so[0] != 0);
}

static void sh(const char *fmt, ...) {
  char cmd[2000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  if (system(cmd) != 0) fail_msg("command failed: %s", cmd);
}

/* A read-only cache scratch/name (root's, 0755) holding the kernels of ks[0..n) built by root:
 * its root in xdg, the thunder-c directory in dir. */
static void ro_cache(const char *name, const double *ks, int n, char *xdg, size_t nx, char *dir, size_t nd) {
  snprintf(xdg, nx, "%s/%s", scratch, name);
  snprintf(dir, nd, "%s/thunder-c", xdg);
  assert_int_equal(mkdir(xdg, 0755), 0);
  for (int i = 0; i < n; i++) in_child("root build", false, xdg, NULL, build_k, (void *)&ks[i]);
  assert_int_equal(chmod(dir, 0755), 0); /* made 0700 by compile.c */
}

/* scratch/name: a directory of nobody's (0700) for its $TMPDIR. */
static void nobody_dir(const char *name, char *path, size_t n) {
  snprintf(path, n, "%s/%s", scratch, name);
  assert_int_equal(mkdir(path, 0700), 0);
  assert_int_equal(chown(path, 65534, 65534), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(scratch, sizeof scratch, "/tmp/th-privbuild-XXXXXX");
  if (!mkdtemp(scratch)) return -1;
  return chmod(scratch, 0755);
}

static int teardown(void **state) {
  (void)state;
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
  return system(cmd) == 0 ? 0 : -1;
}

/* ---- a hit and many misses in a row ---- */
typedef struct {
  const char *tmpdir, *dir;
} paths;

static int misses_in_a_row(void *arg) {
  const paths *p = arg;
  int fds0 = count_fds();
  long c0 = th_fuser_stat_compiles(), h0 = th_fuser_stat_cache_hits();
  CHECK(run_prog(1.5) == TH_OK, 1, "hit: %s", th_last_error());
  CHECK(th_fuser_stat_cache_hits() == h0 + 1 && th_fuser_stat_compiles() == c0, 2, "the hit compiled");
  for (int i = 0; i < 10; i++) CHECK(run_prog(10.5 + i) == TH_OK, 3, "miss %d: %s", i, th_last_error());
  CHECK(run_prog(10.5) == TH_OK, 4, "repeated miss: %s", th_last_error());
  CHECK(th_fuser_stat_compiles() == c0 + 11, 5, "compiles %ld, expected 11 (nothing kept)",
        th_fuser_stat_compiles() - c0);
  int fds1 = count_fds();
  CHECK(fds1 == fds0, 6, "%d descriptors open before, %d after", fds0, fds1);
  CHECK(count_entries(p->tmpdir) == 0, 7, "%d entries left in $TMPDIR", count_entries(p->tmpdir));
  return 0;
}

static void test_misses_in_a_row(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[200], dir[240], tmp[200];
  double ks[] = {1.5};
  ro_cache("row", ks, 1, xdg, sizeof xdg, dir, sizeof dir);
  nobody_dir("row-tmp", tmp, sizeof tmp);
  unsigned long long before = dir_print(dir);
  int n0 = count_entries(dir);
  paths p = {tmp, dir};
  in_child("misses in a row", true, xdg, tmp, misses_in_a_row, &p);
  assert_int_equal(count_entries(dir), n0);
  assert_true(dir_print(dir) == before); /* nothing added, removed or touched (a hit's utimensat fails) */
}

/* ---- $TMPDIR variants ---- */
typedef struct {
  double k;
  th_status want;        /* TH_OK or TH_ERR_RUNTIME */
  const char *in_msg[3]; /* substrings the error must hold */
} expect_run;

static int run_expect(void *arg) {
  const expect_run *e = arg;
  th_status st = run_prog(e->k);
  CHECK(st == e->want, 1, "k = %g: status %d, expected %d: %s", e->k, st, e->want, st ? th_last_error() : "");
  for (int i = 0; i < 3 && e->in_msg[i]; i++)
    CHECK(strstr(th_last_error(), e->in_msg[i]), 2, "error lacks '%s': %s", e->in_msg[i], th_last_error());
  return 0;
}

/* a relative $TMPDIR, from a working directory where it names a directory of nobody's: not used */
static int relative_tmpdir(void *arg) {
  const char *cwd = arg;
  CHECK(chdir(cwd) == 0, 1, "chdir %s", cwd);
  CHECK(run_prog(21.5) == TH_OK, 2, "relative $TMPDIR, miss: %s", th_last_error());
  CHECK(count_entries("rel") == 0, 3, "the relative $TMPDIR was used");
  return 0;
}

/* scratch/name: a directory of nobody's whose path is `len` characters (components of 200). */
static void long_dir(const char *name, size_t len, char *path, size_t n) {
  snprintf(path, n, "%s/%s", scratch, name);
  assert_int_equal(mkdir(path, 0755), 0);
  while (strlen(path) < len) {
    size_t l = strlen(path), part = len - l - 1 > 200 ? 200 : len - l - 1;
    if (len - l - 1 - part > 0 && len - l - 1 - part < 2) part -= 2; /* no component shorter than 1 */
    path[l] = '/';
    memset(path + l + 1, 'd', part);
    path[l + 1 + part] = 0;
    assert_int_equal(mkdir(path, 0755), 0);
  }
  assert_int_equal(strlen(path), len);
  sh("chown -R 65534:65534 '%s/%s'", scratch, name);
}

static void test_tmpdir_variants(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[200], dir[240], path[300], cwd[200], file[200];
  double ks[] = {2.5};
  ro_cache("var", ks, 1, xdg, sizeof xdg, dir, sizeof dir);
  unsigned long long before = dir_print(dir);

  /* unset: /tmp */
  expect_run ok_miss = {20.5, TH_OK, {NULL}}, ok_hit = {2.5, TH_OK, {NULL}};
  in_child("TMPDIR unset, miss", true, xdg, NULL, run_expect, &ok_miss);
  /* relative: ignored, /tmp */
  nobody_dir("var-cwd", cwd, sizeof cwd);
  snprintf(path, sizeof path, "%s/rel", cwd);
  assert_int_equal(mkdir(path, 0700), 0);
  assert_int_equal(chown(path, 65534, 65534), 0);
  in_child("TMPDIR relative", true, xdg, "rel", relative_tmpdir, cwd);
  /* nonexistent, unwritable, a file: a miss fails naming both directories and why; a hit works */
  snprintf(path, sizeof path, "%s/no-such-dir", scratch);
  expect_run nx = {22.5, TH_ERR_RUNTIME, {dir, path, "No such file"}};
  in_child("TMPDIR nonexistent, miss", true, xdg, path, run_expect, &nx);
  in_child("TMPDIR nonexistent, hit", true, xdg, path, run_expect, &ok_hit);
  snprintf(path, sizeof path, "%s/roots", scratch);
  assert_int_equal(mkdir(path, 0755), 0);
  expect_run ro = {22.5, TH_ERR_RUNTIME, {dir, path, "Permission denied"}};
  in_child("TMPDIR unwritable, miss", true, xdg, path, run_expect, &ro);
  in_child("TMPDIR unwritable, hit", true, xdg, path, run_expect, &ok_hit);
  assert_int_equal(count_entries(path), 0);
  snprintf(file, sizeof file, "%s/afile", scratch);
  sh("echo x > '%s' && chmod 666 '%s'", file, file);
  expect_run nd = {22.5, TH_ERR_RUNTIME, {dir, file, "Not a directory"}};
  in_child("TMPDIR a file, miss", true, xdg, file, run_expect, &nd);
  in_child("TMPDIR a file, hit", true, xdg, file, run_expect, &ok_hit);

  /* near PATH_MAX: 3960 characters leave room for the private directory and its files; 4085 do not */
  char lng[4200];
  long_dir("long1", 3960, lng, sizeof lng);
  expect_run ok23 = {23.5, TH_OK, {NULL}};
  in_child("TMPDIR of 3960 characters", true, xdg, lng, run_expect, &ok23);
  assert_int_equal(count_entries(lng), 0);
  long_dir("long2", 4085, lng, sizeof lng);
  expect_run too_long = {23.5, TH_ERR_RUNTIME, {dir}};
  in_child("TMPDIR of 4085 characters", true, xdg, lng, run_expect, &too_long);
  assert_int_equal(count_entries(lng), 0);
  assert_true(dir_print(dir) == before);
}

/* ---- the compiler's version file ---- */
static int umask_build(void *arg) {
  umask(077);
  return build_k(arg);
}

static void test_version_file(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[200], dir[240], tmp[200], cc[600] = "";
  /* written by root under umask 077: 0644 (readable by the cache's other users), no tmp- left */
  snprintf(xdg, sizeof xdg, "%s/ver", scratch);
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  assert_int_equal(mkdir(xdg, 0755), 0);
  double k = 3.5;
  in_child("root build, umask 077", false, xdg, NULL, umask_build, &k);
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *de;
  int ncc = 0, ntmp = 0;
  while ((de = readdir(d))) {
    if (!strncmp(de->d_name, "cc-", 3)) ncc++, snprintf(cc, sizeof cc, "%s/%s", dir, de->d_name);
    if (!strncmp(de->d_name, "tmp-", 4)) ntmp++;
  }
  closedir(d);
  assert_int_equal(ncc, 1);
  assert_int_equal(ntmp, 0);
  struct stat st;
  assert_int_equal(stat(cc, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0644);
  assert_true(st.st_size > 0);
  /* made unreadable to nobody (as an older build left it): the version is captured in $TMPDIR, which is
   * left empty, and the file is not replaced */
  assert_int_equal(chmod(cc, 0600), 0);
  assert_int_equal(chmod(dir, 0755), 0);
  unsigned long long before = dir_print(dir);
  nobody_dir("ver-tmp", tmp, sizeof tmp);
  expect_run hit = {3.5, TH_OK, {NULL}}, miss = {24.5, TH_OK, {NULL}};
  in_child("cc-*.txt unreadable, hit", true, xdg, tmp, run_expect, &hit);
  in_child("cc-*.txt unreadable, miss", true, xdg, tmp, run_expect, &miss);
  assert_int_equal(count_entries(tmp), 0);
  assert_true(dir_print(dir) == before);
}

/* ---- a damaged entry in the read-only cache ---- */
static int damaged(void *arg) {
  (void)arg;
  long c0 = th_fuser_stat_compiles(), h0 = th_fuser_stat_cache_hits();
  CHECK(run_prog(4.5) == TH_OK, 1, "damaged entry: %s", th_last_error());
  CHECK(th_fuser_stat_compiles() == c0 + 1 && th_fuser_stat_cache_hits() == h0, 2, "not built privately");
  return 0;
}

static void test_damaged_entry(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[200], dir[240], tmp[200], so[600] = "";
  double ks[] = {4.5};
  ro_cache("dmg", ks, 1, xdg, sizeof xdg, dir, sizeof dir);
  find_kernel(dir, so, sizeof so);
  assert_true(so[0] != 0);
  assert_int_equal(truncate(so, 100), 0);
  struct stat s0, s1;
  assert_int_equal(stat(so, &s0), 0);
  nobody_dir("dmg-tmp", tmp, sizeof tmp);
  in_child("damaged entry", true, xdg, tmp, damaged, NULL);
  assert_int_equal(stat(so, &s1), 0);
  assert_true(s1.st_ino == s0.st_ino && s1.st_size == 100);
  assert_int_equal(count_entries(tmp), 0);
}

/* ---- 8 processes and 2 threads ---- */
static int hit_then_miss(void *arg) {
  int i = *(const int *)arg;
  double hit = 40.5 + i % 2, miss = 50.5 + i % 3;
  if (i % 2) {
    double t = hit;
    hit = miss, miss = t;
  }
  CHECK(run_prog(hit) == TH_OK, 1, "process %d, k = %g: %s", i, hit, th_last_error());
  CHECK(run_prog(miss) == TH_OK, 2, "process %d, k = %g: %s", i, miss, th_last_error());
  return 0;
}

static void test_concurrent(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[200], dir[240], tmp[200];
  double ks[] = {40.5, 41.5};
  ro_cache("conc", ks, 2, xdg, sizeof xdg, dir, sizeof dir);
  nobody_dir("conc-tmp", tmp, sizeof tmp);
  unsigned long long before = dir_print(dir);
  enum { NPROC = 8 };
  pid_t pids[NPROC];
  int idx[NPROC];
  fflush(NULL);
  for (int i = 0; i < NPROC; i++) {
    idx[i] = i;
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      become_nobody();
      setenv("XDG_CACHE_HOME", xdg, 1);
      setenv("TMPDIR", tmp, 1);
      _exit(hit_then_miss(&idx[i]));
    }
  }
  for (int i = 0; i < NPROC; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("process %d: status 0x%x", i, status);
  }
  assert_int_equal(count_entries(tmp), 0);
  assert_true(dir_print(dir) == before);
}

static int thread_body(void *arg) {
  double k = *(const double *)arg;
  for (int r = 0; r < 2; r++)
    if (run_prog(k) != TH_OK || run_prog(40.5) != TH_OK) {
      fprintf(stderr, "thread k = %g: %s\n", k, th_last_error());
      return 1;
    }
  return 0;
}

static int two_threads(void *arg) {
  const char *tmp = arg;
  int fds0 = count_fds();
  double k[2] = {60.5, 60.5}; /* the same miss in both at once */
  thrd_t t[2];
  for (int i = 0; i < 2; i++) CHECK(thrd_create(&t[i], thread_body, &k[i]) == thrd_success, 1, "thrd_create");
  int rc[2] = {1, 1};
  for (int i = 0; i < 2; i++) thrd_join(t[i], &rc[i]);
  CHECK(rc[0] == 0 && rc[1] == 0, 2, "a thread failed");
  CHECK(count_fds() == fds0, 3, "descriptors: %d before, %d after", fds0, count_fds());
  CHECK(count_entries(tmp) == 0, 4, "%d entries left in $TMPDIR", count_entries(tmp));
  return 0;
}

static void test_two_threads(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[200], dir[240], tmp[200];
  double ks[] = {40.5};
  ro_cache("thr", ks, 1, xdg, sizeof xdg, dir, sizeof dir);
  nobody_dir("thr-tmp", tmp, sizeof tmp);
  unsigned long long before = dir_print(dir);
  in_child("two threads", true, xdg, tmp, two_threads, tmp);
  assert_true(dir_print(dir) == before);
}

/* ---- XDG_CACHE_HOME naming a regular file ---- */
static void test_xdg_is_file(void **state) {
  (void)state;
  char file[200], want[240];
  snprintf(file, sizeof file, "%s/xdg-file", scratch);
  sh("echo x > '%s' && chmod 644 '%s'", file, file);
  snprintf(want, sizeof want, "%s/thunder-c", file);
  expect_run e = {70.5, TH_ERR_RUNTIME, {"cannot create the cache directory", want, "Not a directory"}};
  in_child("XDG_CACHE_HOME a file", false, file, NULL, run_expect, &e);
  if (geteuid() == 0) in_child("XDG_CACHE_HOME a file (nobody)", true, file, NULL, run_expect, &e);
}

/* ---- the cache path a regular file ---- */
static void test_cache_path_is_file(void **state) {
  (void)state;
  char root[200], file[260];
  snprintf(root, sizeof root, "%s/thc-file", scratch);
  assert_int_equal(mkdir(root, 0755), 0);
  snprintf(file, sizeof file, "%s/thunder-c", root);
  sh("echo x > '%s' && chmod 644 '%s'", file, file);
  expect_run e = {71.5, TH_ERR_RUNTIME, {"the kernel cache", file, "is not a directory"}};
  in_child("thunder-c a file", false, root, NULL, run_expect, &e);
  if (geteuid() == 0) in_child("thunder-c a file (nobody)", true, root, NULL, run_expect, &e);
}

/* ---- effective uid nobody, real uid root ---- */
static int as_euid_nobody(void *arg) {
  (void)arg;
  CHECK(setegid(65534) == 0 && seteuid(65534) == 0, 90, "cannot take nobody's effective ids");
  long c0 = th_fuser_stat_compiles();
  th_status st = run_prog(72.5);
  CHECK(st == TH_OK, 1, "miss: %s", th_last_error());
  CHECK(th_fuser_stat_compiles() == c0 + 1, 2, "not built");
  return 0;
}

static void test_effective_uid(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[200], dir[240], tmp[200];
  double ks[] = {3.5};
  ro_cache("euid", ks, 1, xdg, sizeof xdg, dir, sizeof dir);
  unsigned long long before = dir_print(dir);
  nobody_dir("euid-tmp", tmp, sizeof tmp);
  in_child("euid nobody", false, xdg, tmp, as_euid_nobody, NULL);
  assert_true(dir_print(dir) == before);
  assert_int_equal(count_entries(tmp), 0);
}

/* ---- a hit with the version file unreadable and $TMPDIR missing; a compiler that leaves files ---- */
static int hit_k(void *arg) {
  double k = *(const double *)arg;
  long h0 = th_fuser_stat_cache_hits();
  CHECK(run_prog(k) == TH_OK, 1, "k = %g: %s", k, th_last_error());
  CHECK(th_fuser_stat_cache_hits() == h0 + 1, 2, "not a hit");
  return 0;
}

static void test_version_capture_and_leftovers(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[200], dir[240], tmp[200], missing[240];
  double ks[] = {5.5}, miss = 73.5;
  ro_cache("capture", ks, 1, xdg, sizeof xdg, dir, sizeof dir);
  sh("chmod 600 '%s'/cc-*.txt", dir);
  snprintf(missing, sizeof missing, "%s/no-such-tmp", scratch);
  in_child("hit, no version file, no TMPDIR", true, xdg, missing, hit_k, &ks[0]);
  nobody_dir("capture-tmp", tmp, sizeof tmp);
  setenv("CC", "cc -save-temps=obj", 1);
  in_child("miss, -save-temps", true, xdg, tmp, build_k, &miss);
  unsetenv("CC");
  assert_int_equal(count_entries(tmp), 0);
}

/* ---- a hit that fails for want of descriptors ---- */
static int emfile_hit(void *arg) {
  double k = *(const double *)arg;
  CHECK(run_prog(k + 1) == TH_OK, 1, "warm-up: %s", th_last_error()); /* libgomp and friends loaded */
  struct rlimit rl = {64, 64};
  CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, 2, "setrlimit");
  int fds[64], n = 0;
  while (n < 64 && (fds[n] = open("/dev/null", O_RDONLY)) >= 0) n++;
  th_status st = run_prog(k);
  CHECK(st == TH_ERR_RUNTIME && strstr(th_last_error(), "cannot load"), 3, "status %d: %s", st, th_last_error());
  while (n > 0) close(fds[--n]);
  return 0;
}

static void test_emfile_keeps_entry(void **state) {
  (void)state;
  char xdg[200], dir[240], so[600] = "";
  snprintf(xdg, sizeof xdg, "%s/emfile", scratch);
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  assert_int_equal(mkdir(xdg, 0755), 0);
  double k = 74.5;
  in_child("build", false, xdg, NULL, build_k, &k);
  find_kernel(dir, so, sizeof so);
  struct stat s0, s1;
  assert_int_equal(stat(so, &s0), 0);
  in_child("EMFILE hit", false, xdg, NULL, emfile_hit, &k);
  assert_int_equal(stat(so, &s1), 0); /* kept: the entry is sound */
  assert_true(s1.st_ino == s0.st_ino);
  in_child("hit after", false, xdg, NULL, hit_k, &k);
}

/* ---- another CPU, another key ---- */
static int other_cpu(void *arg) {
  double k = *(const double *)arg;
  fake_cpuinfo = "processor\t: 0\nvendor_id\t: OtherVendor\ncpu family\t: 6\nmodel\t\t: 143\n"
                 "flags\t\t: fpu sse sse2 avx avx2 avx512f avx512bw\n\nprocessor\t: 1\n";
  long c0 = th_fuser_stat_compiles();
  CHECK(run_prog(k) == TH_OK, 1, "k = %g: %s", k, th_last_error());
  CHECK(th_fuser_stat_compiles() == c0 + 1, 2, "the entry built for this machine's CPU was used");
  return 0;
}

static void test_cpu_in_key(void **state) {
  (void)state;
  char xdg[200], dir[240];
  snprintf(xdg, sizeof xdg, "%s/cpu", scratch);
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  assert_int_equal(mkdir(xdg, 0755), 0);
  double k = 75.5;
  in_child("build", false, xdg, NULL, build_k, &k);
  assert_int_equal(count_entries(dir) >= 1, 1);
  int n0 = count_entries(dir);
  in_child("another CPU", false, xdg, NULL, other_cpu, &k);
  assert_int_equal(count_entries(dir), n0 + 1); /* its own entry */
  in_child("this CPU again", false, xdg, NULL, hit_k, &k);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_misses_in_a_row),    cmocka_unit_test(test_tmpdir_variants),
    cmocka_unit_test(test_version_file),       cmocka_unit_test(test_damaged_entry),
    cmocka_unit_test(test_concurrent),         cmocka_unit_test(test_two_threads),
    cmocka_unit_test(test_xdg_is_file),        cmocka_unit_test(test_cache_path_is_file),
    cmocka_unit_test(test_effective_uid),      cmocka_unit_test(test_version_capture_and_leftovers),
    cmocka_unit_test(test_emfile_keeps_entry), cmocka_unit_test(test_cpu_in_key),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
