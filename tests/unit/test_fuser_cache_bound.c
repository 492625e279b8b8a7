/* test_fuser_cache_bound.c — the fuser's bounded kernel cache (compile.c: THUNDER_CACHE_MAX_MB,
 * cache_trim, the hit path of th_fuser_compile). After a build over the bound the least recently used
 * kernels go (oldest mtime first, down to 80% of the bound), never one used within the last minute nor a
 * file that is not a kernel; day-old temporary files go too; the running estimate (trim.txt) spares
 * builds under the bound a scan and an hour-old one is rescanned; a hit marks its entry used; 0 means no
 * bound. References are exact (programs of integer-valued float64 data, results computed here). Cases:
 *   - THUNDER_CACHE_MAX_MB spellings: "+1", "01" are 1 MiB, "" the default (1024), 2^30 the largest;
 *     " 1", "1 ", "-0", "0x10", "1.0", "abc", "5MB", 2^30 + 1, 2^64 are TH_ERR_VALUE, also on a cache hit;
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
 *     built in a private temporary directory. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dirent.h>
#include <dlfcn.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "core/ir.h"
#include "core/scalar.h"

#include "cache_test_prog.h"

#include "fuser_test_util.h"
#include "fuser_trace_util.h"

/* ---- a dlopen/rename hook (this executable's definitions interpose libc's for the library) ---- */
enum { HOOK_OFF, HOOK_VANISH, HOOK_VANISH_AND_REPLACE };
static int hook_mode;
static char hook_path[1200];   /* the cache entry the hook acts on */
static ino_t planted_ino;      /* HOOK_VANISH_AND_REPLACE: the entry "another process" renamed in */
static bool planted_clobbered; /* that entry was gone when this process renamed its own build over it */
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
  static const char *const bad[] = {
    " 1",  "1 ", "-0", "0x10", "1.0", "+", "+-1", "1073741825", "18446744073709551616", "-9223372036854775808",
    "\t1", "1\n"};
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
  } good[] = {{"+1", true},  {"01", true},          {"0000000001", true}, {"", false},
              {NULL, false}, {"1073741824", false}, {"0", false}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    make_file(dir, "fusion-old.so", 2 << 20, 3 * 86400);
    make_file(dir, "tmp-old.c", 10, 3 * 86400);
    if (good[i].v)
      setenv("THUNDER_CACHE_MAX_MB", good[i].v, 1);
    else
      unsetenv("THUNDER_CACHE_MAX_MB");
    expect_ok(1.5 + (double)i); /* a build */
    bool gone = kind_of(dir, "fusion-old.so") == 0;
    if (gone != good[i].trims)
      fail_msg("THUNDER_CACHE_MAX_MB='%s': old kernel %s", good[i].v ? good[i].v : "(unset)",
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
  static const char *const links[][2] = {{"fusion-link.so", "big"},
                                         {"fusion-dirlink.so", "sub"},
                                         {"fusion-dangling.so", "nothing-here"},
                                         {"tmp-link", "big"},
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
  static const char *const alike[] = {"fusion-a.so.bak", "xfusion-a.so", "FUSION-A.so", "fusion-a.SO",
                                      "tmpx-a.c",        "fusion-a.so~", "Tmp-a.c"};
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
  assert_int_equal(hook_mode, HOOK_OFF);              /* the hook ran */
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
  snprintf(cmd, sizeof cmd, "chmod 755 '%s' && chmod 644 '%s'/cc-*.txt && touch -d '3 days ago' '%s'/fusion-*.so", dir,
           dir, dir);
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

/* ---- the cache's bound ---- */
static void make_kernel_file(const char *dir, const char *name, size_t bytes, time_t age_s) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  for (size_t i = 0; i < bytes; i++) fputc((int)(i * 131 % 251) + 1, f); /* written: blocks allocated */
  fclose(f);
  struct timespec t[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static bool file_there(const char *dir, const char *name, struct stat *st) {
  char path[700];
  struct stat tmp;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return stat(path, st ? st : &tmp) == 0;
}

static th_status compile_text(const char *text) {
  th_trace *tr = parse(text);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = with_fuser;
  o.nexecutors = 3;
  th_program *p = NULL;
  th_status st = th_program_compile(tr, &o, &p);
  th_program_free(p);
  th_trace_free(tr);
  return st;
}

/* THUNDER_CACHE_MAX_MB bounds the kernel cache: after a build over the bound, the least recently used
 * kernels go (oldest mtime first, stopping as soon as the kernels fill at most 80% of the bound), never
 * one used within the last minute nor a file that is not a kernel; temporary files a day old go too. The
 * running estimate (trim.txt) spares builds under the bound a scan, and an hour-old one is rescanned. A
 * hit marks its entry used; 0 means no bound; a value that is not a whole number of MiB is TH_ERR_VALUE. */
static void test_cache_bound(void **state) {
  (void)state;
  char xdg[400], dir[440];
  snprintf(xdg, sizeof xdg, "%.300s/fuser-bound-%ld", TH_BINARY_DIR, (long)getpid());
  snprintf(dir, sizeof dir, "%s/thunder-c", xdg);
  char cmd[1000];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", xdg, dir);
  assert_int_equal(system(cmd), 0);
  setenv("XDG_CACHE_HOME", xdg, 1);
  /* six stale kernels of 256 KiB, fake0 the least recently used, one used 10 s ago, and bystanders */
  enum { NFAKE = 6 };
  char fake[NFAKE][32];
  for (int k = 0; k < NFAKE; k++) {
    snprintf(fake[k], sizeof fake[k], "fusion-fake%d.so", k);
    make_kernel_file(dir, fake[k], 256 << 10, 10 * 86400 - 3600 * k);
  }
  make_kernel_file(dir, "fusion-fresh.so", 256 << 10, 10);
  make_kernel_file(dir, "tmp-crashed.c", 100, 2 * 86400);
  make_kernel_file(dir, "tmp-busy.c", 100, 30);
  make_kernel_file(dir, "cc-0123.txt", 100, 30 * 86400);
  make_kernel_file(dir, "notes.txt", 300 << 10, 30 * 86400);
  struct stat st;
  long long fake_bytes[NFAKE];
  for (int k = 0; k < NFAKE; k++) {
    assert_true(file_there(dir, fake[k], &st));
    fake_bytes[k] = (long long)st.st_blocks * 512;
  }
  assert_true(file_there(dir, "fusion-fresh.so", &st));
  long long fresh_bytes = (long long)st.st_blocks * 512;

  const char *prog = "def computation(a):\n  # a: \"cpu f32[7]\"\n  t0 = prims.add(a, 0.625)\n"
                     "  t1 = prims.mul(t0, t0)\n  return t1\n";
  /* a bad bound is refused before anything is looked up or built */
  static const char *const bad[] = {"abc", " 5", "-1", "5MB", "1e3", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("THUNDER_CACHE_MAX_MB", bad[i], 1);
    assert_int_equal(compile_text(prog), TH_ERR_VALUE);
    char want[200];
    snprintf(want, sizeof want,
             "THUNDER_CACHE_MAX_MB: expected the kernel cache's bound in MiB, an integer from 0 "
             "(no bound) to 1073741824, got '%s'",
             bad[i]);
    if (!strstr(th_last_error(), want)) fail_msg("'%s': %s", bad[i], th_last_error());
  }
  assert_int_equal(count_files(dir, "fusion-", ".so"), NFAKE + 1);

  /* no bound: a build removes nothing */
  setenv("THUNDER_CACHE_MAX_MB", "0", 1);
  long c0 = th_fuser_stat_compiles();
  assert_int_equal(compile_text(prog), TH_OK);
  assert_int_equal(th_fuser_stat_compiles(), c0 + 1);
  assert_int_equal(count_files(dir, "fusion-", ".so"), NFAKE + 2);
  assert_true(file_there(dir, "tmp-crashed.c", NULL)); /* without a bound the cache is not even scanned */

  /* 1 MiB: another build trims the least recently used */
  setenv("THUNDER_CACHE_MAX_MB", "1", 1);
  assert_int_equal(compile_text("def computation(a):\n  # a: \"cpu f32[7]\"\n  t0 = prims.add(a, 0.75)\n"
                                "  t1 = prims.mul(t0, t0)\n  return t1\n"),
                   TH_OK);
  assert_int_equal(th_fuser_stat_compiles(), c0 + 2);
  /* the two real kernels, the fresh one and the bystanders stay; the stale ones go oldest first */
  assert_true(file_there(dir, "fusion-fresh.so", NULL));
  assert_true(file_there(dir, "tmp-busy.c", NULL));
  assert_true(file_there(dir, "cc-0123.txt", NULL));
  assert_true(file_there(dir, "notes.txt", NULL));
  assert_false(file_there(dir, "tmp-crashed.c", NULL));
  long long real_bytes = 0;
  FILE *ls = NULL;
  snprintf(cmd, sizeof cmd, "ls '%s' | grep '^fusion-[0-9a-f]*\\.so$'", dir);
  ls = popen(cmd, "r");
  assert_non_null(ls);
  char name[256];
  int nreal = 0;
  while (fgets(name, sizeof name, ls)) {
    name[strcspn(name, "\n")] = 0;
    assert_true(file_there(dir, name, &st));
    real_bytes += (long long)st.st_blocks * 512, nreal++;
  }
  pclose(ls);
  assert_int_equal(nreal, 2);
  long long total = real_bytes + fresh_bytes, target = (1LL << 20) / 5 * 4;
  int first_kept = NFAKE;
  for (int k = 0; k < NFAKE; k++)
    if (file_there(dir, fake[k], NULL)) {
      if (first_kept == NFAKE) first_kept = k;
      total += fake_bytes[k];
    } else {
      assert_true(first_kept == NFAKE); /* removed ones are a prefix of the use order */
    }
  assert_true(total <= target);                                               /* removed enough */
  assert_true(first_kept > 0 && total + fake_bytes[first_kept - 1] > target); /* and no more */

  /* the running estimate: trim.txt holds the kernels' total as the scan left it and when it ran; a build
   * under the bound adds its kernel to it without listing the cache (the time stays); an hour-old
   * estimate makes the next build scan again, which finds a kernel planted by hand */
  long long est = 0, when = 0, est2 = 0, when2 = 0;
  char tpath[700];
  snprintf(tpath, sizeof tpath, "%s/trim.txt", dir);
  FILE *tf = fopen(tpath, "r");
  assert_non_null(tf);
  assert_int_equal(fscanf(tf, "%lld %lld", &est, &when), 2);
  fclose(tf);
  assert_true(est == total);
  assert_true(when >= time(NULL) - 60 && when <= time(NULL));
  when -= 600; /* ten minutes old: a scan would set it to now */
  tf = fopen(tpath, "w");
  assert_non_null(tf);
  fprintf(tf, "%lld %lld\n", est, when);
  fclose(tf);
  assert_int_equal(compile_text("def computation(a):\n  # a: \"cpu f32[7]\"\n  t0 = prims.add(a, 0.875)\n"
                                "  t1 = prims.mul(t0, t0)\n  return t1\n"),
                   TH_OK);
  tf = fopen(tpath, "r");
  assert_non_null(tf);
  assert_int_equal(fscanf(tf, "%lld %lld", &est2, &when2), 2);
  fclose(tf);
  long long now_bytes = fresh_bytes;
  snprintf(cmd, sizeof cmd, "ls '%s' | grep '^fusion-.*\\.so$'", dir);
  ls = popen(cmd, "r");
  assert_non_null(ls);
  while (fgets(name, sizeof name, ls)) {
    name[strcspn(name, "\n")] = 0;
    if (!strcmp(name, "fusion-fresh.so")) continue;
    assert_true(file_there(dir, name, &st));
    now_bytes += (long long)st.st_blocks * 512;
  }
  pclose(ls);
  assert_true(when2 == when);     /* no scan */
  assert_true(est2 == now_bytes); /* the new kernel added: the estimate is still exact */
  make_kernel_file(dir, "fusion-planted.so", 2 << 20, 30 * 86400);
  tf = fopen(tpath, "w");
  assert_non_null(tf);
  fprintf(tf, "%lld %lld\n", est2, (long long)time(NULL) - 3700);
  fclose(tf);
  assert_int_equal(compile_text("def computation(a):\n  # a: \"cpu f32[7]\"\n  t0 = prims.add(a, 0.9375)\n"
                                "  t1 = prims.mul(t0, t0)\n  return t1\n"),
                   TH_OK);
  assert_false(file_there(dir, "fusion-planted.so", NULL)); /* rescanned: the oldest went */
  tf = fopen(tpath, "r");
  assert_non_null(tf);
  assert_int_equal(fscanf(tf, "%lld %lld", &est2, &when2), 2);
  fclose(tf);
  assert_true(when2 >= time(NULL) - 60);

  /* a hit marks its entry used: the first real kernel made a week old is touched by compiling it again */
  assert_int_equal(setenv("THUNDER_CACHE_MAX_MB", "0", 1), 0);
  snprintf(cmd, sizeof cmd, "touch -d '7 days ago' '%s'/fusion-[0-9a-f]*.so", dir);
  assert_int_equal(system(cmd), 0);
  time_t before = time(NULL);
  long h0 = th_fuser_stat_cache_hits();
  assert_int_equal(compile_text(prog), TH_OK);
  assert_int_equal(th_fuser_stat_cache_hits(), h0 + 1);
  snprintf(cmd, sizeof cmd, "ls '%s' | grep '^fusion-[0-9a-f]*\\.so$'", dir);
  ls = popen(cmd, "r");
  assert_non_null(ls);
  int touched = 0;
  while (fgets(name, sizeof name, ls)) {
    name[strcspn(name, "\n")] = 0;
    assert_true(file_there(dir, name, &st));
    touched += st.st_mtime >= before;
  }
  pclose(ls);
  assert_int_equal(touched, 1);

  unsetenv("THUNDER_CACHE_MAX_MB");
  setenv("XDG_CACHE_HOME", FUSER_TEST_CACHE, 1);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", xdg);
  assert_int_equal(system(cmd), 0);
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
    cmocka_unit_test(test_cache_bound),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
