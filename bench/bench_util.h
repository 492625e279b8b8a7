/* bench_util.h — helpers shared by the benchmark programs (bench_fusion.c, bench_gpt2.c): a monotonic
 * clock, min/median/max of a sample, executor lists from "fuser,blas,eager", deterministic input
 * filling, the fusion regions of a compiled program, the memory-bandwidth floor (an OpenMP copy), and
 * the compile-time probe: re-running this executable as a child with XDG_CACHE_HOME pointed at a
 * given directory, so a "cold" compile starts from an empty kernel cache in a fresh process.
 *
 * Header-only (static functions); benchmarks are programs run by hand, never tests. */
#ifndef TH_BENCH_UTIL_H
#define TH_BENCH_UTIL_H

#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <omp.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "thunder/thunder.h"

extern char **environ;

static inline double bu_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int bu_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct {
  double min, med, max;
} bu_stats;

/* Sorts ms[0..n) in place; the median of an even count is the mean of the middle two. */
static inline bu_stats bu_stats_of(double *ms, int n) {
  bu_stats s = {0, 0, 0};
  if (n <= 0) return s;
  qsort(ms, (size_t)n, sizeof(double), bu_cmp_double);
  s.min = ms[0];
  s.max = ms[n - 1];
  s.med = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  return s;
}

/* An executor list parsed from "fuser,blas,eager" (names point into `text`, which is copied); "default"
 * is the empty list: th_compile_options.executors NULL, the library's default (whatever it is now). */
typedef struct {
  char text[128];
  const char *names[8];
  int n;
} bu_execs;

static inline bool bu_execs_parse(const char *s, bu_execs *e) {
  memset(e, 0, sizeof *e);
  if (strlen(s) >= sizeof e->text) return false;
  strcpy(e->text, s);
  if (!strcmp(s, "default")) return true;
  char *save = NULL;
  for (char *tok = strtok_r(e->text, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (e->n == 8) return false;
    e->names[e->n++] = tok;
  }
  return e->n > 0;
}

/* "fuser,blas,eager" back from a list. */
static inline void bu_execs_label(const bu_execs *e, char *out, size_t n) {
  snprintf(out, n, "%s", e->n == 0 ? "default" : "");
  for (int i = 0; i < e->n; i++) {
    size_t len = strlen(out);
    snprintf(out + len, n - len, "%s%s", i ? "," : "", e->names[i]);
  }
}

static inline bool bu_execs_has(const bu_execs *e, const char *name) {
  for (int i = 0; i < e->n; i++)
    if (!strcmp(e->names[i], name)) return true;
  return false;
}

static inline th_status bu_compile(const th_trace *tr, const bu_execs *e, th_program **p) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = e->n ? e->names : NULL;
  o.nexecutors = e->n;
  return th_program_compile(tr, &o, p);
}

/* Fills t with deterministic values in [lo, hi) (f32 or bf16; other dtypes are left as they are). */
static inline void bu_fill(th_tensor *t, unsigned seed, float lo, float hi) {
  int64_t n = th_tensor_numel(t);
  th_dtype dt = th_tensor_dtype(t);
  void *d = th_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    float v = lo + (hi - lo) * ((float)(seed >> 8) / (float)(1u << 24));
    if (dt == TH_F32)
      ((float *)d)[i] = v;
    else if (dt == TH_BF16)
      ((uint16_t *)d)[i] = th_f32_to_bf16(v);
  }
}

/* Number of fusion regions (bsyms named fusion<N>) in the program's execution trace. */
static inline int bu_regions(const th_program *p) {
  const th_trace *t = th_program_trace(p);
  int n = 0;
  for (int i = 0; t && i < th_trace_num_bsyms(t); i++) {
    const char *q = th_bsym_qualname(th_trace_bsym(t, i));
    if (q && !strncmp(q, "fusion", 6) && q[6] >= '0' && q[6] <= '9') n++;
  }
  return n;
}

/* Largest |a - b| over the elements of two tensors of the same numel (NaN on mismatch). */
static inline double bu_max_abs_diff(const th_tensor *a, const th_tensor *b) {
  int64_t n = th_tensor_numel(a);
  if (n != th_tensor_numel(b)) return 0.0 / 0.0;
  double m = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = th_tensor_get_f64(a, i) - th_tensor_get_f64(b, i);
    if (d < 0) d = -d;
    if (d > m || d != d) m = d;
  }
  return m;
}

/* The bandwidth floors' kernels: dst = src over `bytes`, read once and written once, in equal contiguous
 * chunks over the OpenMP team (OMP_NUM_THREADS). Both buffers are allocated and touched once beforehand
 * by the caller (16-byte aligned, as malloc's).
 *   bu_copy         ordinary stores, 16 bytes at a time (what a STREAM copy measures; a kernel's plain
 *                   stores pay the same: each line written is first read into the cache). Not memcpy:
 *                   glibc switches to non-temporal stores above a size threshold, which made this floor
 *                   mean different things for the large and the small workloads.
 *   bu_copy_stream  non-temporal stores (SSE2 movntdq): the written lines bypass the cache, no read
 *                   for ownership, so only the bytes themselves cross the memory bus: the machine's
 *                   physical floor for read-once-write-once. Without SSE2, ordinary stores. */
static inline void bu_copy_kind(void *dst, const void *src, size_t bytes, bool stream) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
    size_t chunk = (bytes / (size_t)nt + 63) & ~(size_t)63;
    size_t lo = chunk * (size_t)id, hi = lo + chunk > bytes ? bytes : lo + chunk;
    char *d = (char *)dst;
    const char *s = (const char *)src;
    size_t i = lo;
#if defined(__SSE2__)
    if (((uintptr_t)(d + lo) & 15) == 0 && ((uintptr_t)(s + lo) & 15) == 0) {
      if (stream)
        for (; i + 16 <= hi; i += 16) _mm_stream_si128((__m128i *)(d + i), _mm_load_si128((const __m128i *)(s + i)));
      else
        for (; i + 16 <= hi; i += 16) _mm_store_si128((__m128i *)(d + i), _mm_load_si128((const __m128i *)(s + i)));
      if (stream) _mm_sfence();
    }
#else
    (void)stream;
#endif
    for (; i < hi; i++) d[i] = s[i];
  }
}
static inline void bu_copy(void *dst, const void *src, size_t bytes) { bu_copy_kind(dst, src, bytes, false); }
static inline void bu_copy_stream(void *dst, const void *src, size_t bytes) { bu_copy_kind(dst, src, bytes, true); }

/* Machine-readable lines ("@row ...", "@compile ...") for bench/run_fusion.sh, kept apart from the
 * markdown tables: bu_emit appends one, bu_emit_flush prints them all at the end. */
static char *bu_lines;
static size_t bu_lines_len, bu_lines_cap;

static void bu_emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bu_emit(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) n = (int)sizeof line - 1;
  if (bu_lines_len + (size_t)n + 2 > bu_lines_cap) {
    size_t cap = bu_lines_cap ? bu_lines_cap * 2 : 4096;
    while (cap < bu_lines_len + (size_t)n + 2) cap *= 2;
    char *grown = realloc(bu_lines, cap);
    if (!grown) return;
    bu_lines = grown;
    bu_lines_cap = cap;
  }
  memcpy(bu_lines + bu_lines_len, line, (size_t)n);
  bu_lines_len += (size_t)n;
  bu_lines[bu_lines_len++] = '\n';
  bu_lines[bu_lines_len] = 0;
}

static inline void bu_emit_flush(void) {
  if (bu_lines_len) printf("\nFigures for bench/run_fusion.sh:\n\n%s", bu_lines);
  free(bu_lines);
  bu_lines = NULL;
  bu_lines_len = bu_lines_cap = 0;
}

/* ---- compile-time probe -------------------------------------------------------------------------- */

static int bu_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* Removes a directory tree made by bu_tmpdir. */
static inline void bu_rmtree(const char *dir) { nftw(dir, bu_rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A fresh empty directory under $TMPDIR (else /tmp); false if it cannot be made. */
static inline bool bu_tmpdir(char *out, size_t n) {
  const char *base = getenv("TMPDIR");
  snprintf(out, n, "%s/thunder-c-bench-XXXXXX", base && base[0] ? base : "/tmp");
  return mkdtemp(out) != NULL;
}

/* Number of shared objects (*.so) directly in dir/thunder-c: the kernels the fuser compiled there. */
static inline int bu_count_so(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/thunder-c", dir);
  DIR *d = opendir(path);
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len > 3 && !strcmp(e->d_name + len - 3, ".so")) n++;
  }
  closedir(d);
  return n;
}

/* Runs this executable (/proc/self/exe) with argv `args` (args[0] is the program name, NULL-terminated)
 * and XDG_CACHE_HOME=cache_dir in its environment; the child's stdout is read into out (NUL-terminated,
 * truncated to n - 1). Returns the child's exit status, or -1 if it could not be started. */
static inline int bu_run_child(char *const *args, const char *cache_dir, char *out, size_t n) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  /* environment: ours without XDG_CACHE_HOME, plus the probe's */
  int ne = 0;
  while (environ[ne]) ne++;
  char **env = calloc((size_t)ne + 2, sizeof(char *));
  char xdg[4200];
  snprintf(xdg, sizeof xdg, "XDG_CACHE_HOME=%s", cache_dir);
  int k = 0;
  for (int i = 0; i < ne; i++)
    if (strncmp(environ[i], "XDG_CACHE_HOME=", 15)) env[k++] = environ[i];
  env[k++] = xdg;
  env[k] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, env);
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return -1;
  }
  size_t len = 0;
  for (;;) {
    char buf[512];
    ssize_t r = read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t take = (size_t)r < n - 1 - len ? (size_t)r : n - 1 - len;
    memcpy(out + len, buf, take);
    len += take;
  }
  out[len] = 0;
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* What a compile probe child prints: "probe <compile ms> <first run ms> <fusion regions>". */
typedef struct {
  double compile_ms, first_run_ms;
  int regions;
} bu_probe;

static inline bool bu_probe_parse(const char *text, bu_probe *p) {
  const char *s = strstr(text, "probe ");
  return s && sscanf(s, "probe %lf %lf %d", &p->compile_ms, &p->first_run_ms, &p->regions) == 3;
}

/* The child's side: compiles tr with e (timed), runs it once on the given inputs (timed), prints the
 * probe line and returns the exit status for main (0 = ok). */
static inline int bu_probe_child(const th_trace *tr, const bu_execs *e, int nin, th_tensor *const *in) {
  th_program *p = NULL;
  double t0 = bu_now_ms();
  if (bu_compile(tr, e, &p) != TH_OK) {
    fprintf(stderr, "probe: compile: %s\n", th_last_error());
    return 1;
  }
  double t1 = bu_now_ms();
  int nout = 0;
  th_tensor **outs = NULL;
  if (th_program_run(p, nin, in, &nout, &outs) != TH_OK) {
    fprintf(stderr, "probe: run: %s\n", th_last_error());
    th_program_free(p);
    return 1;
  }
  double t2 = bu_now_ms();
  for (int i = 0; i < nout; i++) th_tensor_release(outs[i]);
  free(outs);
  printf("probe %.3f %.3f %d\n", t1 - t0, t2 - t1, bu_regions(p));
  th_program_free(p);
  return 0;
}

/* Compile-time rows: `reps` fresh cache directories; in each, a child compiles cold (empty cache, new
 * process), a second child compiles warm (populated cache, new process), then this process compiles
 * the same trace with XDG_CACHE_HOME pointed there (populated cache, same process: the program freed
 * and made again). args: the child's argv (NULL-terminated) for the probe. Prints one markdown row per
 * kind (label as given) and an @compile line each (bu_emit) for the driver. */
static inline void bu_compile_rows(const char *label, const char *dtype, const char *execs_label, char *const *args,
                                   const th_trace *tr, const bu_execs *e, int reps) {
  double *cold = calloc((size_t)reps, sizeof(double)), *warm = calloc((size_t)reps, sizeof(double));
  double *same = calloc((size_t)reps, sizeof(double)), *fr_cold = calloc((size_t)reps, sizeof(double));
  int ok = 0, nso = 0, regions = 0;
  const char *old = getenv("XDG_CACHE_HOME");
  char *saved = old ? strdup(old) : NULL;
  for (int r = 0; r < reps; r++) {
    char dir[4096], out[4096];
    if (!bu_tmpdir(dir, sizeof dir)) {
      fprintf(stderr, "compile probe: cannot make a temporary directory: %s\n", strerror(errno));
      break;
    }
    bu_probe pc, pw;
    int rc1 = bu_run_child(args, dir, out, sizeof out);
    bool ok1 = rc1 == 0 && bu_probe_parse(out, &pc);
    nso = bu_count_so(dir);
    int rc2 = bu_run_child(args, dir, out, sizeof out);
    bool ok2 = rc2 == 0 && bu_probe_parse(out, &pw);
    setenv("XDG_CACHE_HOME", dir, 1);
    th_program *p = NULL;
    double t0 = bu_now_ms();
    th_status st = bu_compile(tr, e, &p);
    double t1 = bu_now_ms();
    th_program_free(p);
    bu_rmtree(dir);
    if (!ok1 || !ok2 || st != TH_OK) {
      fprintf(stderr, "compile probe (%s %s %s): child exit %d / %d, in-process %s\n", label, dtype, execs_label, rc1,
              rc2, st == TH_OK ? "ok" : th_last_error());
      break;
    }
    cold[ok] = pc.compile_ms;
    fr_cold[ok] = pc.first_run_ms;
    warm[ok] = pw.compile_ms;
    same[ok] = t1 - t0;
    regions = pc.regions;
    ok++;
  }
  if (saved)
    setenv("XDG_CACHE_HOME", saved, 1);
  else
    unsetenv("XDG_CACHE_HOME");
  free(saved);
  if (ok > 0) {
    bu_stats c = bu_stats_of(cold, ok), w = bu_stats_of(warm, ok), s = bu_stats_of(same, ok),
             f = bu_stats_of(fr_cold, ok);
    printf("| %s | %s | %s | cold (new process, empty cache) | %d | %d | %d | %.1f / %.1f / %.1f | %.1f |\n", label,
           dtype, execs_label, ok, regions, nso, c.min, c.med, c.max, f.med);
    printf("| %s | %s | %s | warm (new process, cache populated) | %d | %d | | %.1f / %.1f / %.1f | |\n", label, dtype,
           execs_label, ok, regions, w.min, w.med, w.max);
    printf("| %s | %s | %s | warm (same process, program freed and made again) | %d | %d | | %.1f / %.1f / %.1f | |\n",
           label, dtype, execs_label, ok, regions, s.min, s.med, s.max);
    bu_emit("@compile %s %s %s cold %.3f %.3f %.3f %d %d", label, dtype, execs_label, c.min, c.med, c.max, regions,
            nso);
    bu_emit("@compile %s %s %s warm_process %.3f %.3f %.3f %d %d", label, dtype, execs_label, w.min, w.med, w.max,
            regions, nso);
    bu_emit("@compile %s %s %s warm_same %.3f %.3f %.3f %d %d", label, dtype, execs_label, s.min, s.med, s.max, regions,
            nso);
  }
  free(cold);
  free(warm);
  free(same);
  free(fr_cold);
}

static inline void bu_compile_header(void) {
  printf("| program | dtype | executors | cache | reps | fusion regions | kernels (.so) compiled | compile min / "
         "median / max ms | first run ms (cold, median) |\n|---|---|---|---|---|---|---|---|---|\n");
}

#endif
