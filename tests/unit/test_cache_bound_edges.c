/* test_cache_bound_edges.c — adversarial checks of the fuser's bounded kernel cache (compile.c:
 * THUNDER_CACHE_MAX_MB, cache_trim, the hit path of th_fuser_compile) and of the float64 Welford rescue
 * of fused row variances (codegen.c emit_welford) where the passes run on several threads. References
 * are exact (programs of integer-valued float64 data with results computed here) or long double
 * (x87: the sums and squares of float64 values near 1.8e308 do not overflow), never the code under test.
 * Cases:
 *   - THUNDER_CACHE_MAX_MB spellings: "+1", "01" are 1 MiB, "" the default (1024), 2^30 the largest;
 *     " 1", "1 ", "-0", "0x10", "1.0", 2^30 + 1, 2^64 are TH_ERR_VALUE, also on a cache hit;
 *   - what the trim must leave alone: symlinks (to a big old file, to a directory, dangling),
 *     directories and fifos named fusion-*.so or tmp-*, and look-alike names; nothing is followed and a
 *     symlink's target is not counted;
 *   - a bound smaller than one kernel: every entry not used in the last minute goes, the fresh ones stay
 *     and the new kernel loads;
 *   - 8 processes compiling different programs into one cache over a 1 MiB bound at once, hitting
 *     old entries the others trim: every run succeeds with exact results, no temporary file is left,
 *     and the bound holds unless every remaining kernel is in its grace minute;
 *   - a hit whose entry a trim removes between access(2) and dlopen (a dlopen hook removes it): rebuilt;
 *   - the same hit must not then remove the entry another process has meanwhile rebuilt and renamed
 *     into place (that process's dlopen would fail);
 *   - a cache owned by another user (run as nobody when root): a read-only one serves hits; one the
 *     user cannot list (mode 0300) still compiles, unscanned; entries it cannot read are left;
 *   - a read-only cache of another user whose cc-*.txt is 0600 as written: a hit loads, and a miss is
 *     built in a private temporary directory;
 *   - fused float64 var_mean near the top of the range and with inf elements: one row of 60000 elements
 *     (parallel passes), 64 rows of 1024 (rows on threads) and transposed rows. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
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

#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "cache_test_prog.h"

#include "fuser_test_util.h"

/* ---- a dlopen/rename hook (this executable's definitions interpose libc's for the library) ---- */
enum { HOOK_OFF, HOOK_VANISH, HOOK_VANISH_AND_REPLACE };
static int hook_mode;
static char hook_path[1200];        /* the cache entry the hook acts on */
static ino_t planted_ino;           /* HOOK_VANISH_AND_REPLACE: the entry "another process" renamed in */
static bool planted_clobbered;      /* that entry was gone when this process renamed its own build over it */
static int hook_renames;

static void *(*real_dlopen_fn(void))(const char *, int) {
  static void *(*real)(const char *, int);
  if (!real) {
    void *f = dlsym(RTLD_NEXT, "dlopen");
    memcpy(&real, &f, sizeof real);
  }
  return real;
}

void *dlopen(const char *file, int mode) {
  if (hook_mode != HOOK_OFF && file && !strcmp(file, hook_path)) {
    int m = hook_mode;
    hook_mode = HOOK_OFF;
    /* another process's trim removes the entry just before this dlopen */
    size_t n = 0;
    char *bytes = NULL;
    FILE *f = fopen(file, "rb");
    if (f) {
      bytes = malloc(8 << 20);
      n = bytes ? fread(bytes, 1, 8 << 20, f) : 0;
      fclose(f);
    }
    unlink(file);
    void *h = real_dlopen_fn()(file, mode);
    if (m == HOOK_VANISH_AND_REPLACE && bytes) {
      /* ... and another process rebuilds it and renames it into place before this one reacts */
      char tmp[1300];
      snprintf(tmp, sizeof tmp, "%s.planted", file);
      FILE *o = fopen(tmp, "wb");
      if (o) {
        fwrite(bytes, 1, n, o);
        fclose(o);
        chmod(tmp, 0755);
        int (*real_rename)(const char *, const char *);
        void *r = dlsym(RTLD_NEXT, "rename");
        memcpy(&real_rename, &r, sizeof real_rename);
        struct stat st;
        if (real_rename(tmp, file) == 0 && stat(file, &st) == 0) planted_ino = st.st_ino;
      }
    }
    free(bytes);
    return h;
  }
  return real_dlopen_fn()(file, mode);
}

int rename(const char *from, const char *to) {
  int (*real)(const char *, const char *);
  void *r = dlsym(RTLD_NEXT, "rename");
  memcpy(&real, &r, sizeof real);
  if (planted_ino && to && !strcmp(to, hook_path)) {
    struct stat st;
    if (stat(to, &st) != 0 || st.st_ino != planted_ino) planted_clobbered = true;
    hook_renames++;
  }
  return real(from, to);
}

/* ---- helpers ---- */
/* A fresh cache root under TH_BINARY_DIR (xdg), its thunder-c directory (dir), made; XDG_CACHE_HOME set. */
static void fresh_cache(char *xdg, size_t nx, char *dir, size_t nd, const char *tag) {
  snprintf(xdg, nx, "%.300s/cachebound-%s-%ld", TH_BINARY_DIR, tag, (long)getpid());
  snprintf(dir, nd, "%s/thunder-c", xdg);
  char cmd[1000];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", xdg, dir);
  assert_int_equal(system(cmd), 0);
  setenv("XDG_CACHE_HOME", xdg, 1);
}

static void remove_tree(const char *path) {
  char cmd[1000];
  snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", path, path);
  assert_int_equal(system(cmd), 0);
}

/* dir/name: `bytes` bytes written (blocks allocated), mtime age_s seconds ago. A kernel planted by hand
 * is one the cache's running estimate (trim.txt) does not count until its hourly rescan, so planting one
 * also drops the estimate: the next build scans, as these cases expect. */
static void make_file(const char *dir, const char *name, size_t bytes, time_t age_s) {
  char path[2600];
  if (!strncmp(name, "fusion-", 7)) {
    snprintf(path, sizeof path, "%s/trim.txt", dir);
    unlink(path);
  }
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) fail_msg("cannot create %s: %s", path, strerror(errno));
  for (size_t i = 0; i < bytes; i++) fputc((int)(i * 131 % 251) + 1, f);
  fclose(f);
  struct timespec t[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static void set_age(const char *dir, const char *name, time_t age_s) {
  char path[2600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct timespec t[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

/* lstat of dir/name: 0 when absent, else its S_IFMT type. */
static mode_t kind_of(const char *dir, const char *name) {
  char path[2600];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return lstat(path, &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

static bool real_kernel_name(const char *s) {
  size_t n = strlen(s);
  if (n != 7 + 64 + 3 || strncmp(s, "fusion-", 7) || strcmp(s + n - 3, ".so")) return false;
  for (size_t i = 7; i < 7 + 64; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  return true;
}

/* The kernels (regular fusion-*.so files) of dir: count, total bytes (blocks), and whether all are fresh
 * (mtime within grace_s of now). */
static int kernels(const char *dir, long long *bytes, bool *all_fresh, int grace_s) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  long long total = 0;
  bool fresh = true;
  struct dirent *de;
  time_t now = time(NULL);
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l < 10 || strncmp(de->d_name, "fusion-", 7) || strcmp(de->d_name + l - 3, ".so")) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    n++;
    total += (long long)st.st_blocks * 512;
    if (st.st_mtime < now - grace_s) fresh = false;
  }
  closedir(d);
  if (bytes) *bytes = total;
  if (all_fresh) *all_fresh = fresh;
  return n;
}

static int count_prefix(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (!strncmp(de->d_name, prefix, strlen(prefix))) n++;
  closedir(d);
  return n;
}

static void expect_ok(double k) {
  if (run_prog(k) != TH_OK) fail_msg("program k=%g: %s", k, th_last_error());
}

/* Builds the program of constant k in a child process (this process never loads its kernel). */
static void build_in_child(double k) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(run_prog(k) == TH_OK ? 0 : 1);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The most recently modified real kernel (fusion-<sha256>.so) of dir, in name. */
static void newest_kernel(const char *dir, char *name, size_t n) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *de;
  struct timespec best = {0, 0};
  name[0] = 0;
  while ((de = readdir(d))) {
    if (!real_kernel_name(de->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, 0) != 0) continue;
    if (st.st_mtim.tv_sec > best.tv_sec || (st.st_mtim.tv_sec == best.tv_sec && st.st_mtim.tv_nsec > best.tv_nsec)) {
      best = st.st_mtim;
      snprintf(name, n, "%s", de->d_name);
    }
  }
  closedir(d);
  assert_true(name[0] != 0);
}

/* ---- THUNDER_CACHE_MAX_MB spellings ---- */
static void test_bound_spellings(void **state) {
  (void)state;
  char xdg[400], dir[440];
  fresh_cache(xdg, sizeof xdg, dir, sizeof dir, "spell");
  setenv("THUNDER_CACHE_MAX_MB", "0", 1);
  expect_ok(0.5); /* the entry the refused spellings would hit */
  static const char *const bad[] = {" 1", "1 ", "-0", "0x10", "1.0", "+", "+-1", "1073741825",
                                    "18446744073709551616", "-9223372036854775808", "\t1", "1\n"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("THUNDER_CACHE_MAX_MB", bad[i], 1);
    long h0 = th_fuser_stat_cache_hits(), c0 = th_fuser_stat_compiles();
    th_status st = run_prog(0.5);
    if (st != TH_ERR_VALUE) fail_msg("THUNDER_CACHE_MAX_MB='%s': status %d (%s)", bad[i], st, th_last_error());
    assert_non_null(strstr(th_last_error(), "THUNDER_CACHE_MAX_MB"));
    assert_int_equal(th_fuser_stat_cache_hits(), h0); /* refused before the lookup */
    assert_int_equal(th_fuser_stat_compiles(), c0);
  }
  /* accepted spellings: "+1", "01", "0000000001" are one MiB (an old 2 MiB kernel goes at the next build);
   * "", unset and 2^30 keep it (1024 MiB, the largest bound) */
  static const struct {
    const char *v; /* NULL: unset */
    bool trims;
  } good[] = {{"+1", true}, {"01", true}, {"0000000001", true}, {"", false}, {NULL, false},
              {"1073741824", false}, {"0", false}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    make_file(dir, "fusion-old.so", 2 << 20, 3 * 86400);
    make_file(dir, "tmp-old.c", 10, 3 * 86400);
    if (good[i].v) setenv("THUNDER_CACHE_MAX_MB", good[i].v, 1);
    else unsetenv("THUNDER_CACHE_MAX_MB");
    expect_ok(1.5 + (double)i); /* a build */
    bool gone = kind_of(dir, "fusion-old.so") == 0;
    if (gone != good[i].trims) fail_msg("THUNDER_CACHE_MAX_MB='%s': old kernel %s", good[i].v ? good[i].v : "(unset)",
                                        gone ? "removed" : "kept");
    /* a bound scans (the day-old tmp file goes); no bound ("0") scans nothing */
    bool tmp_gone = kind_of(dir, "tmp-old.c") == 0;
    assert_true(tmp_gone == (!good[i].v || strcmp(good[i].v, "0") != 0));
    expect_ok(0.5); /* and a hit */
  }
  unsetenv("THUNDER_CACHE_MAX_MB");
  remove_tree(xdg);
}

/* ---- what the trim leaves alone ---- */
static void test_trim_skips_non_kernels(void **state) {
  (void)state;
  char xdg[400], dir[440], out[500], path[1200], target[1200];
  fresh_cache(xdg, sizeof xdg, dir, sizeof dir, "skip");
  snprintf(out, sizeof out, "%s/outside", xdg);
  assert_int_equal(mkdir(out, 0700), 0);
  make_file(out, "big", 4 << 20, 10 * 86400);
  snprintf(path, sizeof path, "%s/sub", out);
  assert_int_equal(mkdir(path, 0700), 0);
  make_file(path, "keep", 100, 10 * 86400);
  /* symlinks named as kernels and as temporaries, all old themselves */
  static const char *const links[][2] = {{"fusion-link.so", "big"}, {"fusion-dirlink.so", "sub"},
                                         {"fusion-dangling.so", "nothing-here"}, {"tmp-link", "big"},
                                         {"tmp-dirlink", "sub"}};
  for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
    snprintf(target, sizeof target, "%s/%s", out, links[i][1]);
    snprintf(path, sizeof path, "%s/%s", dir, links[i][0]);
    assert_int_equal(symlink(target, path), 0);
    set_age(dir, links[i][0], 10 * 86400);
  }
  /* directories and a fifo */
  static const char *const dirs[] = {"fusion-dir.so", "tmp-olddir"};
  for (size_t i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, dirs[i]);
    assert_int_equal(mkdir(path, 0700), 0);
    make_file(path, "inside", 1 << 20, 10 * 86400);
    set_age(dir, dirs[i], 10 * 86400);
  }
  snprintf(path, sizeof path, "%s/fusion-fifo.so", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  set_age(dir, "fusion-fifo.so", 10 * 86400);
  /* look-alike names, regular and old */
  static const char *const alike[] = {"fusion-a.so.bak", "xfusion-a.so", "FUSION-A.so", "fusion-a.SO", "tmpx-a.c",
                                      "fusion-a.so~", "Tmp-a.c"};
  for (size_t i = 0; i < sizeof alike / sizeof *alike; i++) make_file(dir, alike[i], 512 << 10, 10 * 86400);
  /* three old kernels of 256 KiB: with the real one, under 1 MiB unless something above is counted */
  for (int k = 0; k < 3; k++) {
    char name[40];
    snprintf(name, sizeof name, "fusion-fake%d.so", k);
    make_file(dir, name, 256 << 10, 5 * 86400 - 3600 * k);
  }
  setenv("THUNDER_CACHE_MAX_MB", "1", 1);
  expect_ok(2.5);
  for (int k = 0; k < 3; k++) {
    char name[40];
    snprintf(name, sizeof name, "fusion-fake%d.so", k);
    if (kind_of(dir, name) != S_IFREG) fail_msg("%s removed: something not a kernel was counted", name);
  }
  /* two more old kernels: now over the bound; the oldest kernels go, nothing else */
  make_file(dir, "fusion-fake3.so", 256 << 10, 6 * 86400);
  make_file(dir, "fusion-fake4.so", 256 << 10, 7 * 86400);
  expect_ok(3.5);
  assert_int_equal(kind_of(dir, "fusion-fake4.so"), 0); /* the least recently used */
  assert_int_equal(kind_of(dir, "fusion-fake3.so"), 0);
  long long bytes = 0;
  kernels(dir, &bytes, NULL, 60);
  assert_true(bytes <= (1LL << 20) / 5 * 4);
  for (size_t i = 0; i < sizeof links / sizeof *links; i++)
    if (kind_of(dir, links[i][0]) != S_IFLNK) fail_msg("symlink %s removed", links[i][0]);
  for (size_t i = 0; i < 2; i++) {
    if (kind_of(dir, dirs[i]) != S_IFDIR) fail_msg("directory %s removed", dirs[i]);
    snprintf(path, sizeof path, "%s/%s", dir, dirs[i]);
    assert_int_equal(kind_of(path, "inside"), S_IFREG);
  }
  assert_int_equal(kind_of(dir, "fusion-fifo.so"), S_IFIFO);
  for (size_t i = 0; i < sizeof alike / sizeof *alike; i++)
    if (kind_of(dir, alike[i]) != S_IFREG) fail_msg("%s removed", alike[i]);
  assert_int_equal(kind_of(out, "big"), S_IFREG); /* nothing followed */
  snprintf(path, sizeof path, "%s/sub", out);
  assert_int_equal(kind_of(path, "keep"), S_IFREG);
  unsetenv("THUNDER_CACHE_MAX_MB");
  remove_tree(xdg);
}

/* ---- a bound smaller than one kernel ---- */
static void test_bound_below_one_kernel(void **state) {
  (void)state;
  char xdg[400], dir[440];
  fresh_cache(xdg, sizeof xdg, dir, sizeof dir, "small");
  unsetenv("THUNDER_CACHE_MAX_MB");
  build_in_child(4.5); /* a real kernel, made old below */
  char old_real[200];
  newest_kernel(dir, old_real, sizeof old_real);
  set_age(dir, old_real, 3 * 86400);
  make_file(dir, "fusion-huge.so", 3 << 20, 5); /* fresh, over the bound by itself */
  for (int k = 0; k < 4; k++) {
    char name[40];
    snprintf(name, sizeof name, "fusion-old%d.so", k);
    make_file(dir, name, 64 << 10, (2 + k) * 86400);
  }
  setenv("THUNDER_CACHE_MAX_MB", "1", 1);
  expect_ok(5.5);
  /* every entry older than the grace minute went; the fresh ones stayed */
  assert_int_equal(kind_of(dir, old_real), 0);
  for (int k = 0; k < 4; k++) {
    char name[40];
    snprintf(name, sizeof name, "fusion-old%d.so", k);
    assert_int_equal(kind_of(dir, name), 0);
  }
  assert_int_equal(kind_of(dir, "fusion-huge.so"), S_IFREG);
  bool fresh = false;
  assert_int_equal(kernels(dir, NULL, &fresh, 60), 2); /* huge and the new kernel */
  assert_true(fresh);
  /* the removed kernel is rebuilt, the new one hit */
  long c0 = th_fuser_stat_compiles(), h0 = th_fuser_stat_cache_hits();
  expect_ok(4.5);
  assert_int_equal(th_fuser_stat_compiles(), c0 + 1);
  expect_ok(5.5);
  assert_true(th_fuser_stat_cache_hits() >= h0 + 1);
  unsetenv("THUNDER_CACHE_MAX_MB");
  remove_tree(xdg);
}

/* ---- 8 processes over a 1 MiB bound ---- */
static void test_concurrent_bounded(void **state) {
  (void)state;
  char xdg[400], dir[440];
  fresh_cache(xdg, sizeof xdg, dir, sizeof dir, "conc");
  unsetenv("THUNDER_CACHE_MAX_MB");
  enum { NPROC = 8, NSHARED = 4, NNEW = 3 };
  for (int s = 0; s < NSHARED; s++) build_in_child(100.5 + s);
  char cmd[1000];
  snprintf(cmd, sizeof cmd, "touch -d '3 days ago' '%s'/fusion-*.so", dir);
  assert_int_equal(system(cmd), 0);
  for (int k = 0; k < 6; k++) {
    char name[40];
    snprintf(name, sizeof name, "fusion-fake%d.so", k);
    make_file(dir, name, 256 << 10, 10 * 86400);
  }
  pid_t pids[NPROC];
  for (int i = 0; i < NPROC; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      setenv("THUNDER_CACHE_MAX_MB", "1", 1);
      int rc = 0;
      /* an old shared entry (others trim it), new programs (each build trims), another shared one */
      if (run_prog(100.5 + i % NSHARED) != TH_OK) rc = 1;
      for (int j = 0; j < NNEW && !rc; j++)
        if (run_prog(200.5 + NNEW * i + j) != TH_OK) rc = 2;
      if (!rc && run_prog(100.5 + (i + 1) % NSHARED) != TH_OK) rc = 3;
      if (rc) fprintf(stderr, "process %d: %s\n", i, th_last_error());
      _exit(rc);
    }
  }
  for (int i = 0; i < NPROC; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("process %d: status 0x%x", i, status);
  }
  assert_int_equal(count_prefix(dir, "tmp-"), 0);
  long long bytes = 0;
  bool fresh = false;
  int n = kernels(dir, &bytes, &fresh, 60);
  assert_true(n >= NPROC * NNEW); /* every new kernel is in its grace minute */
  if (bytes > (1LL << 20) && !fresh) fail_msg("%d kernels, %lld bytes over the bound with old entries left", n, bytes);
  assert_true(count_prefix(dir, "fusion-fake") < 6); /* trimmed, the least recently used first */
  remove_tree(xdg);
}

/* ---- a hit whose entry a trim removes between access(2) and dlopen ---- */
static void test_hit_loses_entry_to_trim(void **state) {
  (void)state;
  char xdg[400], dir[440];
  fresh_cache(xdg, sizeof xdg, dir, sizeof dir, "vanish");
  setenv("THUNDER_CACHE_MAX_MB", "1", 1);
  build_in_child(6.5);
  char name[200];
  newest_kernel(dir, name, sizeof name);
  snprintf(hook_path, sizeof hook_path, "%s/%s", dir, name);
  hook_mode = HOOK_VANISH;
  long c0 = th_fuser_stat_compiles();
  expect_ok(6.5);
  assert_int_equal(hook_mode, HOOK_OFF); /* the hook ran */
  assert_int_equal(th_fuser_stat_compiles(), c0 + 1); /* rebuilt */
  assert_int_equal(kind_of(dir, name), S_IFREG);
  hook_path[0] = 0;
  unsetenv("THUNDER_CACHE_MAX_MB");
  remove_tree(xdg);
}

/* The same, but before this process reacts to its failed dlopen another process rebuilds the entry and
 * renames it into place (as its build does just before its own cache_trim and dlopen): this process must
 * not remove that entry, or the other one's dlopen fails ("fuser: cannot load ..."). */
static void test_hit_race_spares_rebuilt_entry(void **state) {
  (void)state;
  char xdg[400], dir[440];
  fresh_cache(xdg, sizeof xdg, dir, sizeof dir, "replace");
  setenv("THUNDER_CACHE_MAX_MB", "1", 1);
  build_in_child(7.5);
  char name[200];
  newest_kernel(dir, name, sizeof name);
  snprintf(hook_path, sizeof hook_path, "%s/%s", dir, name);
  planted_ino = 0;
  planted_clobbered = false;
  hook_renames = 0;
  hook_mode = HOOK_VANISH_AND_REPLACE;
  expect_ok(7.5);
  assert_int_equal(hook_mode, HOOK_OFF);
  assert_true(planted_ino != 0);
  if (!hook_renames) { /* no rebuild: the other process's entry must still be there */
    struct stat st;
    assert_int_equal(stat(hook_path, &st), 0);
    planted_clobbered = st.st_ino != planted_ino;
  }
  bool clobbered = planted_clobbered;
  planted_ino = 0;
  hook_path[0] = 0;
  unsetenv("THUNDER_CACHE_MAX_MB");
  remove_tree(xdg);
  if (clobbered) fail_msg("the entry another process renamed in was removed before this one replaced it");
}

/* ---- caches of another user (root only: runs as nobody) ---- */
/* /tmp/th-cachebound-XXXXXX (mode 0755) with its thunder-c; XDG_CACHE_HOME set. */
static void tmp_cache(char *xdg, size_t nx, char *dir, size_t nd) {
  snprintf(xdg, nx, "/tmp/th-cachebound-XXXXXX");
  assert_non_null(mkdtemp(xdg));
  assert_int_equal(chmod(xdg, 0755), 0);
  snprintf(dir, nd, "%s/thunder-c", xdg);
  assert_int_equal(mkdir(dir, 0700), 0);
  setenv("XDG_CACHE_HOME", xdg, 1);
}

/* Runs `thunder run` on the program of constant k (written to xdg/prog-<k>.py) in a fresh process, as
 * nobody when `nobody`, with THUNDER_CACHE_MAX_MB=1; its exit status (0: compiled, loaded and ran). A
 * fresh process: the compiler's version is not yet cached in memory, as for another user's program. */
static int cli_run(const char *xdg, double k, bool nobody) {
  char text[400], file[600];
  prog_text(text, sizeof text, k);
  snprintf(file, sizeof file, "%s/prog-%g.py", xdg, k);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(file, 0644), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (nobody && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) _exit(90);
    setenv("THUNDER_CACHE_MAX_MB", "1", 1);
    execl(TH_BINARY_DIR "/thunder", "thunder", "run", file, "--random-inputs", "1", "--quiet", (char *)NULL);
    _exit(91);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void test_foreign_caches(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[400], dir[440], cmd[4000];
  /* root's cache, made readable to all (an administrator's shared cache, cc-*.txt made readable too):
   * a hit works, and nothing is removed even over the bound */
  tmp_cache(xdg, sizeof xdg, dir, sizeof dir);
  assert_int_equal(cli_run(xdg, 8.5, false), 0);
  make_file(dir, "fusion-old.so", 2 << 20, 5 * 86400);
  snprintf(cmd, sizeof cmd, "chmod 755 '%s' && chmod 644 '%s'/cc-*.txt && touch -d '3 days ago' '%s'/fusion-*.so",
           dir, dir, dir);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(cli_run(xdg, 8.5, true), 0);
  assert_int_equal(kind_of(dir, "fusion-old.so"), S_IFREG);
  remove_tree(xdg);

  /* nobody's own cache holding entries it cannot read (root's, mode 0600 / a 0700 directory): a build
   * over the bound removes the old regular kernel (the directory is nobody's) and leaves the directory */
  tmp_cache(xdg, sizeof xdg, dir, sizeof dir);
  make_file(dir, "fusion-rootonly.so", 2 << 20, 5 * 86400);
  snprintf(cmd, sizeof cmd,
           "chmod 600 '%s'/fusion-rootonly.so && mkdir '%s'/fusion-lockeddir.so && chmod 700 '%s'/fusion-lockeddir.so "
           "&& touch -d '5 days ago' '%s'/fusion-lockeddir.so && chown -R 65534:65534 '%s' && chown 0:0 '%s'/fusion-*",
           dir, dir, dir, dir, xdg, dir);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(cli_run(xdg, 9.5, true), 0);
  assert_int_equal(kind_of(dir, "fusion-rootonly.so"), 0);
  assert_int_equal(kind_of(dir, "fusion-lockeddir.so"), S_IFDIR);
  remove_tree(xdg);

  /* nobody's cache it may write but not list (mode 0300): no scan is possible; the build still works and
   * loads, and the old kernel stays */
  tmp_cache(xdg, sizeof xdg, dir, sizeof dir);
  make_file(dir, "fusion-old.so", 2 << 20, 5 * 86400);
  snprintf(cmd, sizeof cmd, "chown -R 65534:65534 '%s' && chmod 300 '%s'", xdg, dir);
  assert_int_equal(system(cmd), 0);
  assert_int_equal(cli_run(xdg, 9.5, true), 0);
  assert_int_equal(kind_of(dir, "fusion-old.so"), S_IFREG);
  remove_tree(xdg);
  setenv("XDG_CACHE_HOME", TH_BINARY_DIR "/fuser-test-cache", 1);
}

/* A read-only cache of another user as compile.c leaves it but for the directory's mode (made 0755;
 * cc-*.txt as written): a hit loads it (the compiler's --version captured in $TMPDIR), and a miss is
 * built in a private temporary directory and loaded. */
static void test_readonly_foreign_cache_compiles(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  char xdg[400], dir[440], cmd[4000];
  tmp_cache(xdg, sizeof xdg, dir, sizeof dir);
  assert_int_equal(cli_run(xdg, 8.5, false), 0);
  snprintf(cmd, sizeof cmd, "chmod 755 '%s'", dir);
  assert_int_equal(system(cmd), 0);
  int hit = cli_run(xdg, 8.5, true), miss = cli_run(xdg, 9.5, true);
  remove_tree(xdg);
  setenv("XDG_CACHE_HOME", TH_BINARY_DIR "/fuser-test-cache", 1);
  if (hit || miss) fail_msg("read-only foreign cache: hit %s, miss %s", hit ? "failed" : "ok", miss ? "failed" : "ok");
}

/* ---- the Welford rescue on several threads ---- */
/* Long double reference of n doubles x[i * st]: variance (correction corr) and mean. */
static void ref_var_mean(const double *x, int64_t n, int64_t st, double corr, double *var, double *mean) {
  long double s = 0, q = 0;
  for (int64_t i = 0; i < n; i++) s += x[i * st];
  long double u = s / n;
  for (int64_t i = 0; i < n; i++) q += (x[i * st] - u) * (x[i * st] - u);
  *var = (double)(q / (n - corr));
  *mean = (double)u;
}

static void expect_close(double got, double want, const char *what, int c, int row) {
  if (isnan(want) ? isnan(got) : (isinf(want) ? got == want : fabs(got - want) <= 1e-12 * fabs(want))) return;
  fail_msg("case %d, %s of row %d: got %.17g, want %.17g", c, what, row, got, want);
}

/* A row's content: 0 all 1e306 (var 0: the float64 sum rounds), 1 all 1.7e308 (the sum is inf), 2 1e306
 * with one element an ulp higher in the middle (the exact var overflows: inf), 3 an inf first (var and
 * mean NaN: Welford's mean is NaN once a finite element follows an inf), 4 an inf last (var NaN, mean
 * inf), 5 NaN in the middle, 6 ordinary values around 1e3 (the two-pass path). */
static double row_value(int kind, int64_t j, int64_t n) {
  switch (kind) {
  case 0: return 1e306;
  case 1: return 1.7e308;
  case 2: return j == n / 2 ? nextafter(1e306, INFINITY) : 1e306;
  case 3: return j == 0 ? INFINITY : 2.5;
  case 4: return j == n - 1 ? INFINITY : 2.5;
  case 5: return j == n / 2 ? NAN : 2.5;
  default: return 1e3 + 0.001 * (double)((j * 37) % 101);
  }
}

static void test_var_rescue_threads(void **state) {
  (void)state;
  static const struct {
    const char *trace;
    int nrows;
    int64_t rowlen, rowstride, elstride, shape[3];
    int nd;
  } cases[] = {
      /* one row of 60000 (parallel passes) */
      {"def computation(x):\n  # x: \"cpu f64[3, 20000]\"\n  t = prims.mul(x, 1.0)\n"
       "  (v, m) = prims.var_mean(t, (0, 1), correction=1.0)\n  return (v, m)\n",
       1, 60000, 60000, 1, {3, 20000}, 2},
      /* 64 rows of 1024 (65536 elements: rows on threads) */
      {"def computation(x):\n  # x: \"cpu f64[64, 1024]\"\n  t = prims.mul(x, 1.0)\n"
       "  (v, m) = prims.var_mean(t, (1,), correction=0.0)\n  return (v, m)\n",
       64, 1024, 1024, 1, {64, 1024}, 2},
      /* the same rows transposed (the strided walk on threads) */
      {"def computation(x):\n  # x: \"cpu f64[1024, 64]\"\n  xt = prims.transpose(x, (1, 0))\n"
       "  t = prims.mul(xt, 1.0)\n  (v, m) = prims.var_mean(t, (1,), correction=1.0)\n  return (v, m)\n",
       64, 1024, 1, 64, {1024, 64}, 2},
      /* rows of two inner dims, [4, 128, 256] over (1, 2): 32768 elements a row */
      {"def computation(x):\n  # x: \"cpu f64[4, 128, 256]\"\n  t = prims.mul(x, 1.0)\n"
       "  (v, m) = prims.var_mean(t, (1, 2), correction=2.0)\n  return (v, m)\n",
       4, 32768, 32768, 1, {4, 128, 256}, 3},
  };
  for (int c = 0; c < (int)(sizeof cases / sizeof *cases); c++) {
    for (int variant = 0; variant < (cases[c].nrows == 1 ? 7 : 1); variant++) {
      th_trace *tr = parse(cases[c].trace);
      th_tensor *x = th_tensor_new(TH_F64, cases[c].nd, cases[c].shape);
      double *xp = th_tensor_data(x);
      for (int r = 0; r < cases[c].nrows; r++) {
        int kind = cases[c].nrows == 1 ? variant : r % 7;
        for (int64_t j = 0; j < cases[c].rowlen; j++)
          xp[r * cases[c].rowstride + j * cases[c].elstride] = row_value(kind, j, cases[c].rowlen);
      }
      th_tensor *in[1] = {x};
      int no = 0;
      th_tensor **out = run_fused(tr, in, 1, &no, true);
      const double *vp = th_tensor_data(out[0]), *mp = th_tensor_data(out[1]);
      double corr = c == 1 ? 0.0 : c == 3 ? 2.0 : 1.0;
      for (int r = 0; r < cases[c].nrows; r++) {
        int kind = cases[c].nrows == 1 ? variant : r % 7;
        double want_v, want_m;
        ref_var_mean(xp + r * cases[c].rowstride, cases[c].rowlen, cases[c].elstride, corr, &want_v, &want_m);
        /* the special rows analytically: constant rows var 0 and the mean exact; one element an ulp
         * (2^964) higher: var ~2^1928 / n, inf, and the mean rounds to 1e306; inf first: NaN both; inf
         * last: var NaN, mean inf (PyTorch's Welford) */
        if (kind == 0 || kind == 1) want_v = 0, want_m = row_value(kind, 0, 1);
        if (kind == 2) want_v = INFINITY, want_m = 1e306;
        if (kind == 3) want_m = NAN, want_v = NAN;
        if (kind == 4) want_m = INFINITY, want_v = NAN;
        expect_close(vp[r], want_v, "var", c, r);
        expect_close(mp[r], want_m, "mean", c, r);
      }
      release_all(out, no);
      th_tensor_release(x);
      th_trace_free(tr);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bound_spellings),
      cmocka_unit_test(test_trim_skips_non_kernels),
      cmocka_unit_test(test_bound_below_one_kernel),
      cmocka_unit_test(test_concurrent_bounded),
      cmocka_unit_test(test_hit_loses_entry_to_trim),
      cmocka_unit_test(test_hit_race_spares_rebuilt_entry),
      cmocka_unit_test(test_foreign_caches),
      cmocka_unit_test(test_readonly_foreign_cache_compiles),
      cmocka_unit_test(test_var_rescue_threads),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
