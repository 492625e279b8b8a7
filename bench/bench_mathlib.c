/* bench_mathlib.c — throughput of src/executors/fuser/mathlib.h (the branch-free float32 functions the
 * fuser's kernels call) against glibc's scalar expf, exp2f, expm1f, logf, log2f, log1pf, tanhf and
 * erff over 16M floats, on one thread and on all of OpenMP's threads; then the tanh-form gelu body the
 * fuser emits, and a plain copy y = x, the memory-bandwidth floor (read + write, 8 bytes per element).
 * Built like the fuser's kernels (-O3 -march=native -ffp-contract=off, see bench/CMakeLists.txt), so
 * the th_m_ loops vectorize and glibc's stay scalar calls, as they would in a kernel. Rows are
 * interleaved (one of each per round); prints min / median / max ms, GB/s and ns per element of the
 * minimum, and glibc's minimum over ours.
 * Usage: bench_mathlib [rounds] [n] */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#define TH_M_NO_ROUTING
#include "executors/fuser/mathlib.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

typedef void (*loop_fn)(const float *restrict x, float *restrict y, long n);

/* one element's body as an expression of v; _1 runs on one thread, _n on all of OpenMP's */
#define TH_LOOPS(name, expr)                                                                                           \
  static void name##_1(const float *restrict x, float *restrict y, long n) {                                           \
    _Pragma("omp simd") for (long i = 0; i < n; i++) {                                                                 \
      const float v = x[i];                                                                                            \
      y[i] = (expr);                                                                                                   \
    }                                                                                                                  \
  }                                                                                                                    \
  static void name##_n(const float *restrict x, float *restrict y, long n) {                                           \
    _Pragma("omp parallel for simd schedule(static)") for (long i = 0; i < n; i++) {                                   \
      const float v = x[i];                                                                                            \
      y[i] = (expr);                                                                                                   \
    }                                                                                                                  \
  }

TH_LOOPS(m_exp, th_m_expf(v))
TH_LOOPS(g_exp, expf(v))
TH_LOOPS(m_exp2, th_m_exp2f(v))
TH_LOOPS(g_exp2, exp2f(v))
TH_LOOPS(m_expm1, th_m_expm1f(v))
TH_LOOPS(g_expm1, expm1f(v))
TH_LOOPS(m_log, th_m_logf(v))
TH_LOOPS(g_log, logf(v))
TH_LOOPS(m_log2, th_m_log2f(v))
TH_LOOPS(g_log2, log2f(v))
TH_LOOPS(m_log1p, th_m_log1pf(v))
TH_LOOPS(g_log1p, log1pf(v))
TH_LOOPS(m_tanh, th_m_tanhf(v))
TH_LOOPS(g_tanh, tanhf(v))
TH_LOOPS(m_erf, th_m_erff(v))
TH_LOOPS(g_erf, erff(v))
/* gelu, tanh form: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) */
TH_LOOPS(m_gelu, 0.5f * v * (1.0f + th_m_tanhf(0.7978845608f * (v + 0.044715f * v * v * v))))
TH_LOOPS(g_gelu, 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))))
TH_LOOPS(copy, v)

typedef struct {
  const char *name;
  loop_fn f1, fn;
  float lo, hi; /* inputs spread over [lo, hi] */
  int group;    /* rows of one group share an input and are compared with each other */
} row;

#define TH_ROWS(fn, lo, hi, g)                                                                                         \
  {"th_m_" #fn "f", m_##fn##_1, m_##fn##_n, lo, hi, g}, { "glibc " #fn "f", g_##fn##_1, g_##fn##_n, lo, hi, g }

static const row ROWS[] = {
  TH_ROWS(exp, -80.0f, 80.0f, 0),   TH_ROWS(exp2, -120.0f, 120.0f, 1),
  TH_ROWS(expm1, -20.0f, 20.0f, 2), TH_ROWS(log, 1e-30f, 1e30f, 3),
  TH_ROWS(log2, 1e-30f, 1e30f, 4),  TH_ROWS(log1p, -0.99f, 1e6f, 5),
  TH_ROWS(tanh, -10.0f, 10.0f, 6),  TH_ROWS(erf, -5.0f, 5.0f, 7),
  TH_ROWS(gelu, -6.0f, 6.0f, 8),    {"copy y = x", copy_1, copy_n, -1.0f, 1.0f, 8},
};
enum { NROWS = sizeof ROWS / sizeof ROWS[0] };

static void fill(float *x, long n, float lo, float hi) {
  for (long i = 0; i < n; i++) {
    double u = (double)((uint32_t)(i * 2654435761u)) / 4294967296.0; /* scattered over [0, 1) */
    x[i] = (float)(lo + (hi - lo) * u);
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 7;
  if (rounds < 1 || rounds > 1000) rounds = 7;
  long n = argc > 2 ? atol(argv[2]) : 16777216;
  if (n < 1024 || n > (1L << 30)) n = 16777216;
  float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
  double *t = malloc(sizeof(double) * (size_t)rounds * NROWS * 2);
  if (!x || !y || !t) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  memset(y, 0, sizeof(float) * (size_t)n); /* fault the pages in before timing */
  int threads = omp_get_max_threads();
  printf("n = %ld floats, %d rounds, 1 thread and %d threads\n\n", n, rounds, threads);
  double checksum = 0;
  for (int g = 0; g <= ROWS[NROWS - 1].group; g++) {
    int first = -1, last = -1;
    for (int r = 0; r < NROWS; r++)
      if (ROWS[r].group == g) {
        if (first < 0) first = r;
        last = r;
      }
    fill(x, n, ROWS[first].lo, ROWS[first].hi);
    for (int k = -1; k < rounds; k++) /* round -1 warms up */
      for (int r = first; r <= last; r++)
        for (int th = 0; th < 2; th++) {
          double t0 = now_ms();
          (th ? ROWS[r].fn : ROWS[r].f1)(x, y, n);
          double dt = now_ms() - t0;
          checksum += y[(size_t)(k + 1) * 7919 % (size_t)n];
          if (k >= 0) t[((size_t)r * 2 + th) * rounds + k] = dt;
        }
  }
  for (int i = 0; i < NROWS * 2; i++) qsort(&t[(size_t)i * rounds], (size_t)rounds, sizeof(double), cmp_double);
  printf("| what                 | threads |    min ms | median ms |    max ms |  GB/s | ns/elem | glibc/this |\n");
  printf("|----------------------|---------|-----------|-----------|-----------|-------|---------|------------|\n");
  for (int r = 0; r < NROWS; r++)
    for (int th = 0; th < 2; th++) {
      const double *s = &t[((size_t)r * 2 + th) * rounds];
      double mn = s[0], md = s[rounds / 2], mx = s[rounds - 1];
      char ratio[32] = "";
      if (!strncmp(ROWS[r].name, "th_m_", 5)) /* the glibc row follows; ratio of the minimums */
        snprintf(ratio, sizeof ratio, "%.1f", t[((size_t)(r + 1) * 2 + th) * rounds] / mn);
      printf("| %-20s | %7d | %9.2f | %9.2f | %9.2f | %5.1f | %7.3f | %10s |\n", ROWS[r].name, th ? threads : 1, mn, md,
             mx, 8.0 * (double)n / (mn * 1e6), mn * 1e6 / (double)n, ratio);
    }
  printf("\n(checksum %g)\n", checksum);
  free(x);
  free(y);
  free(t);
  return 0;
}
