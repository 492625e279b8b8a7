/* bench_linear.c — prims.linear through a compiled program (BLAS executor) against the raw oneDNN
 * matmul primitive on the same shapes, f32 and bf16.
 *
 *   out (M, N) = x (M, K) @ w (N, K)^T        default M = 4096, N = 4096, K = 1024, no bias
 *
 * Rows per dtype, measured interleaved (one of each per round, so machine noise hits all alike):
 *   program     th_program_run of `t0 = prims.linear(x, w, None)`: input checks, the cached primitive,
 *               and a fresh output tensor every run (as a real call must)
 *   raw         the oneDNN primitive executed on buffers allocated once (the floor)
 *   raw+alloc   the same with a fresh output buffer each run (malloc, first touch by the GEMM, free)
 * Each row: min / median / max milliseconds over the runs, GFLOP/s at the median (2*M*N*K flops),
 * and the ratios program / row of the medians and of the minimums (target: <= 1.05; on a shared
 * machine the minimum is the steadier figure). oneDNN 2.6 has no bf16 matmul on CPUs
 * without AVX-512; there the program widens bf16 to f32 (see src/executors/blas.c), the raw bf16
 * primitive does not exist, and the bf16 ratio is taken against the raw f32 primitive instead.
 *
 * Usage: bench_linear [runs=10] [M N K]. Threads: OpenMP's default (set OMP_NUM_THREADS). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "thunder/jit.h"
#include "thunder/tensor.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct {
  const char *name;
  double *ms;
  int n;
  bool valid;
} row;

static double median(row *r) {
  qsort(r->ms, (size_t)r->n, sizeof(double), cmp_double);
  return r->n % 2 ? r->ms[r->n / 2] : (r->ms[r->n / 2 - 1] + r->ms[r->n / 2]) / 2;
}

static void fill(th_tensor *t, unsigned seed) {
  int64_t n = th_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    float v = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    if (th_tensor_dtype(t) == TH_F32)
      ((float *)th_tensor_data(t))[i] = v;
    else
      ((uint16_t *)th_tensor_data(t))[i] = th_f32_to_bf16(v);
  }
}

/* The raw oneDNN primitive: src (M, K) row-major, wei = w^T (K, N) viewed from w (N, K), dst (M, N). */
typedef struct {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t md[3];
} raw_gemm;

static bool raw_init(raw_gemm *g, dnnl_data_type_t dt, int64_t M, int64_t N, int64_t K) {
  memset(g, 0, sizeof *g);
  if (dnnl_engine_create(&g->eng, dnnl_cpu, 0) != dnnl_success) return false;
  if (dnnl_stream_create(&g->stream, g->eng, dnnl_stream_default_flags) != dnnl_success) return false;
  dnnl_dims_t sd = {M, K}, ss = {K, 1}, wd = {K, N}, ws = {1, K}, dd = {M, N}, ds = {N, 1};
  dnnl_memory_desc_init_by_strides(&g->md[0], 2, sd, dt, ss);
  dnnl_memory_desc_init_by_strides(&g->md[1], 2, wd, dt, ws);
  dnnl_memory_desc_init_by_strides(&g->md[2], 2, dd, dt, ds);
  dnnl_matmul_desc_t d;
  dnnl_primitive_desc_t pd;
  if (dnnl_matmul_desc_init(&d, &g->md[0], &g->md[1], NULL, &g->md[2]) != dnnl_success) return false;
  if (dnnl_primitive_desc_create(&pd, &d, NULL, g->eng, NULL) != dnnl_success) return false;
  dnnl_status_t s = dnnl_primitive_create(&g->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  return s == dnnl_success;
}

static void raw_run(raw_gemm *g, void *src, void *wei, void *dst) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, NULL}, {DNNL_ARG_WEIGHTS, NULL}, {DNNL_ARG_DST, NULL}};
  void *data[3] = {src, wei, dst};
  for (int i = 0; i < 3; i++) dnnl_memory_create(&args[i].memory, &g->md[i], g->eng, data[i]);
  dnnl_primitive_execute(g->prim, g->stream, 3, args);
  dnnl_stream_wait(g->stream);
  for (int i = 0; i < 3; i++) dnnl_memory_destroy(args[i].memory);
}

static void raw_free(raw_gemm *g) {
  if (g->prim) dnnl_primitive_destroy(g->prim);
  if (g->stream) dnnl_stream_destroy(g->stream);
  if (g->eng) dnnl_engine_destroy(g->eng);
}

static int bench(th_dtype dt, int runs, int64_t M, int64_t N, int64_t K) {
  const double gflop = 2.0 * (double)M * (double)N * (double)K / 1e9;
  /* the program */
  th_trace *tr = th_trace_new(NULL);
  th_device cpu = {TH_CPU, 0};
  th_value *x = th_trace_add_tensor_input(tr, "x", dt, cpu, 2, (int64_t[]){M, K});
  th_value *w = th_trace_add_tensor_input(tr, "w", dt, cpu, 2, (int64_t[]){N, K});
  th_arg args[3] = {th_arg_value(x), th_arg_value(w), th_arg_none()}, out;
  th_program *p = NULL;
  if (!x || !w || th_trace_call(tr, "prims.linear", 3, args, 0, NULL, NULL, &out) != TH_OK ||
      th_trace_set_return(tr, out) != TH_OK || th_program_compile(tr, NULL, &p) != TH_OK) {
    fprintf(stderr, "bench_linear: %s\n", th_last_error());
    return 1;
  }
  th_tensor *in[2] = {th_tensor_empty(dt, 2, (int64_t[]){M, K}), th_tensor_empty(dt, 2, (int64_t[]){N, K})};
  if (!in[0] || !in[1]) {
    fprintf(stderr, "bench_linear: %s\n", th_last_error());
    return 1;
  }
  fill(in[0], 1);
  fill(in[1], 2);

  /* the raw primitive in this dtype (may not exist: bf16 without AVX-512) and in f32 */
  raw_gemm g, g32;
  bool have_raw = raw_init(&g, dt == TH_BF16 ? dnnl_bf16 : dnnl_f32, M, N, K);
  bool have_raw32 = dt == TH_BF16 && raw_init(&g32, dnnl_f32, M, N, K);
  size_t es = dt == TH_BF16 ? 2 : 4;
  void *dst = aligned_alloc(64, (size_t)(M * N) * 4);
  float *x32 = NULL, *w32 = NULL;
  if (have_raw32) { /* the widened operands the f32 floor multiplies */
    x32 = aligned_alloc(64, (size_t)(M * K) * 4);
    w32 = aligned_alloc(64, (size_t)(N * K) * 4);
    for (int64_t i = 0; i < M * K; i++) x32[i] = th_bf16_to_f32(((uint16_t *)th_tensor_data(in[0]))[i]);
    for (int64_t i = 0; i < N * K; i++) w32[i] = th_bf16_to_f32(((uint16_t *)th_tensor_data(in[1]))[i]);
  }
  memset(dst, 0, (size_t)(M * N) * 4);

  row rows[4] = {{"program", calloc((size_t)runs, sizeof(double)), runs, true},
                 {"raw", calloc((size_t)runs, sizeof(double)), runs, have_raw},
                 {"raw+alloc", calloc((size_t)runs, sizeof(double)), runs, have_raw},
                 {"raw f32 (widened operands)", calloc((size_t)runs, sizeof(double)), runs, have_raw32}};
  for (int r = -2; r < runs; r++) { /* two warm-up rounds */
    int nout;
    th_tensor **outs;
    double t0 = now_ms();
    if (th_program_run(p, 2, in, &nout, &outs) != TH_OK) {
      fprintf(stderr, "bench_linear: %s\n", th_last_error());
      return 1;
    }
    double t1 = now_ms();
    th_tensor_release(outs[0]);
    free(outs);
    if (r >= 0) rows[0].ms[r] = t1 - t0;
    if (have_raw) {
      t0 = now_ms();
      raw_run(&g, th_tensor_data(in[0]), th_tensor_data(in[1]), dst);
      t1 = now_ms();
      if (r >= 0) rows[1].ms[r] = t1 - t0;
      t0 = now_ms();
      void *fresh = malloc((size_t)(M * N) * es);
      raw_run(&g, th_tensor_data(in[0]), th_tensor_data(in[1]), fresh);
      free(fresh);
      t1 = now_ms();
      if (r >= 0) rows[2].ms[r] = t1 - t0;
    }
    if (have_raw32) {
      t0 = now_ms();
      raw_run(&g32, x32, w32, dst);
      t1 = now_ms();
      if (r >= 0) rows[3].ms[r] = t1 - t0;
    }
  }

  printf("\n%s linear, M=%lld N=%lld K=%lld, %d runs, %d threads%s\n", th_dtype_name(dt), (long long)M, (long long)N,
         (long long)K, runs, omp_get_max_threads(),
         dt == TH_BF16 && !have_raw ? " (no oneDNN bf16 matmul on this CPU: the program widens to f32)" : "");
  printf("| %-26s | %9s | %9s | %9s | %8s | %14s | %11s |\n", "what", "min ms", "median ms", "max ms", "GFLOP/s",
         "program/this", "(of mins)");
  printf("|%s|%s|%s|%s|%s|%s|%s|\n", "----------------------------", "-----------", "-----------", "-----------",
         "----------", "----------------", "-------------");
  double prog_med = median(&rows[0]), prog_min = rows[0].ms[0];
  for (int i = 0; i < 4; i++) {
    if (!rows[i].valid) continue;
    double med = median(&rows[i]);
    printf("| %-26s | %9.2f | %9.2f | %9.2f | %8.1f | %14.3f | %11.3f |\n", rows[i].name, rows[i].ms[0], med,
           rows[i].ms[rows[i].n - 1], gflop / (med / 1e3), prog_med / med, prog_min / rows[i].ms[0]);
  }
  for (int i = 0; i < 4; i++) free(rows[i].ms);
  free(dst);
  free(x32);
  free(w32);
  if (have_raw) raw_free(&g);
  if (have_raw32) raw_free(&g32);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(p);
  th_trace_free(tr);
  return 0;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 10;
  int64_t M = argc > 4 ? atoll(argv[2]) : 4096, N = argc > 4 ? atoll(argv[3]) : 4096,
          K = argc > 4 ? atoll(argv[4]) : 1024;
  if (runs < 1 || M < 1 || N < 1 || K < 1) {
    fprintf(stderr, "usage: bench_linear [runs=10] [M N K]\n");
    return 2;
  }
  if (bench(TH_F32, runs, M, N, K) || bench(TH_BF16, runs, M, N, K)) return 1;
  return 0;
}
