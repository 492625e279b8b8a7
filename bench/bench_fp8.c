/* bench_fp8.c — the fp8 linear of the float8 transform against float32 and bfloat16 linears, on the
 * GPT-2 MLP shapes:
 *
 *   fc   x [2048, 768]  @ W [3072, 768]^T  + b [3072]
 *   proj x [2048, 3072] @ W [768, 3072]^T  + b [768]
 *
 * Rows per shape, measured interleaved (one run of each per round, so machine noise hits all alike):
 *   f32 linear      th_program_run of `ltorch.linear(x, w, b)` in float32 (BLAS executor: oneDNN)
 *   bf16 linear     the same in bfloat16 (oneDNN; widened to f32 on CPUs without a bf16 matmul)
 *   fp8 linear      th_transform_float8 of the f32 linear: amax/scale/saturated cast of x and of w,
 *                   then _scaled_mm (the whole transformed linear, executors blas,eager)
 *   fp8 fused       the same with executors fuser,blas,eager (the quantization fused; skipped when
 *                   the fuser cannot compile, e.g. no C compiler)
 *   _scaled_mm      the fp8 GEMM alone (prims.scaled_mm on pre-quantized inputs, f32 out + bias) as
 *                   the default executors run it (BLAS: exact decode to f32, then oneDNN's sgemm)
 *   _scaled_mm eg   the same on the eager executor (its own blocked GEMM: decode fused into packing,
 *                   AVX2/AVX-512/portable micro-kernels)
 * Each row: min / median / max milliseconds, GFLOP/s at the median (2*M*N*K), and the weight bytes
 * the linear keeps (f32 4NK, bf16 2NK, fp8 NK + a 4-byte scale). No speed target: CPUs have no fp8
 * arithmetic, so every fp8 GEMM decodes the codes through a table to float32 first.
 *
 * Usage: bench_fp8 [runs=10]. Threads: OpenMP's default (OMP_NUM_THREADS); THUNDER_FP8_GEMM=portable|
 * avx2|avx512 picks the fp8 micro-kernel. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "executors/eager/eager_internal.h"
#include "thunder/thunder.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void die(const char *what) {
  fprintf(stderr, "bench_fp8: %s: %s\n", what, th_last_error());
  exit(1);
}

static void fill(th_tensor *t, unsigned seed, float scale) {
  int64_t n = th_tensor_numel(t);
  char *d = th_tensor_data(t);
  size_t es = th_dtype_size(th_tensor_dtype(t));
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    float v = ((float)(seed >> 8) / (float)(1u << 24) - 0.5f) * scale;
    switch (th_tensor_dtype(t)) {
      case TH_F32: memcpy(d + (size_t)i * es, &v, 4); break;
      case TH_BF16: ((uint16_t *)(void *)d)[i] = th_f32_to_bf16(v); break;
      case TH_F8E4M3FN: ((uint8_t *)d)[i] = th_f32_to_f8e4m3fn(v * 448.0f, true); break;
      default: break;
    }
  }
}

typedef struct {
  const char *name;
  th_program *p;
  int nin;
  th_tensor *in[5];
  double *ms;
  int64_t weight_bytes;
} row;

/* ltorch.linear(x, w, b) in dtype dt */
static th_trace *linear_trace(th_dtype dt, int64_t M, int64_t K, int64_t N) {
  th_trace *tr = th_trace_new(NULL);
  int64_t sx[2] = {M, K}, sw[2] = {N, K};
  th_value *x = th_trace_add_tensor_input(tr, "x", dt, (th_device){TH_CPU, 0}, 2, sx);
  th_value *w = th_trace_add_tensor_input(tr, "t_fc_weight", dt, (th_device){TH_CPU, 0}, 2, sw);
  th_value *b = th_trace_add_tensor_input(tr, "t_fc_bias", dt, (th_device){TH_CPU, 0}, 1, &N);
  th_arg args[3] = {th_arg_value(x), th_arg_value(w), th_arg_value(b)}, y;
  if (!tr || !x || !w || !b || th_trace_call(tr, "ltorch.linear", 3, args, 0, NULL, NULL, &y) != TH_OK ||
      th_trace_set_return(tr, y) != TH_OK)
    die("linear trace");
  return tr;
}

/* ltorch._scaled_mm(xq, wq.t(), sx, sw, b, out_dtype=float32) on fp8 inputs */
static th_trace *scaled_mm_trace(int64_t M, int64_t K, int64_t N) {
  th_trace *tr = th_trace_new(NULL);
  th_device cpu = {TH_CPU, 0};
  int64_t sx[2] = {M, K}, sw[2] = {N, K};
  th_value *x = th_trace_add_tensor_input(tr, "xq", TH_F8E4M3FN, cpu, 2, sx);
  th_value *w = th_trace_add_tensor_input(tr, "wq", TH_F8E4M3FN, cpu, 2, sw);
  th_value *s1 = th_trace_add_tensor_input(tr, "sx", TH_F32, cpu, 0, NULL);
  th_value *s2 = th_trace_add_tensor_input(tr, "sw", TH_F32, cpu, 0, NULL);
  th_value *b = th_trace_add_tensor_input(tr, "b", TH_F32, cpu, 1, &N);
  th_arg wa = th_arg_value(w), wt, y;
  if (th_trace_call(tr, "ltorch.t", 1, &wa, 0, NULL, NULL, &wt) != TH_OK) die("t");
  th_arg args[5] = {th_arg_value(x), wt, th_arg_value(s1), th_arg_value(s2), th_arg_value(b)};
  static const char *const kwn[1] = {"out_dtype"};
  th_arg kw[1] = {th_arg_dtype(TH_F32)};
  if (th_trace_call(tr, "ltorch._scaled_mm", 5, args, 1, kwn, kw, &y) != TH_OK || th_trace_set_return(tr, y) != TH_OK)
    die("_scaled_mm trace");
  return tr;
}

static th_program *compile(const th_trace *tr, const char *const *ex, int nex, bool quiet) {
  th_compile_options o = {0};
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) {
    if (quiet) return NULL;
    die("compile");
  }
  return p;
}

static void inputs_like(row *r, const th_trace *tr) {
  r->nin = th_trace_num_inputs(tr);
  for (int i = 0; i < r->nin; i++) {
    const th_value *v = th_trace_input(tr, i);
    r->in[i] = th_tensor_new(th_value_dtype(v), th_value_ndim(v), th_value_shape(v));
    if (!r->in[i]) die("input");
    fill(r->in[i], 17u + (unsigned)i, i == 1 ? 0.1f : 2.0f);
    if (th_value_ndim(v) == 0 && th_value_dtype(v) == TH_F32) *(float *)th_tensor_data(r->in[i]) = 0.01f;
  }
}

static double run_once(row *r) {
  int nout;
  th_tensor **out;
  double t0 = now_ms();
  if (th_program_run(r->p, r->nin, r->in, &nout, &out) != TH_OK) die(r->name);
  double t = now_ms() - t0;
  for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
  free(out);
  return t;
}

static void bench_shape(const char *label, int64_t M, int64_t K, int64_t N, int runs) {
  static const char *const blas_eager[] = {"blas", "eager"};
  static const char *const fused[] = {"fuser", "blas", "eager"};
  static const char *const eager[] = {"eager"};
  th_trace *t32 = linear_trace(TH_F32, M, K, N), *t16 = linear_trace(TH_BF16, M, K, N), *t8 = NULL;
  if (th_transform_float8(t32, NULL, &t8) != TH_OK) die("float8");
  th_trace *tmm = scaled_mm_trace(M, K, N);
  row rows[6] = {
    {"f32 linear", compile(t32, blas_eager, 2, false), 0, {0}, NULL, 4 * N * K},
    {"bf16 linear", compile(t16, blas_eager, 2, false), 0, {0}, NULL, 2 * N * K},
    {"fp8 linear", compile(t8, blas_eager, 2, false), 0, {0}, NULL, N * K + 4},
    {"fp8 fused", compile(t8, fused, 3, true), 0, {0}, NULL, N * K + 4},
    {"_scaled_mm", compile(tmm, blas_eager, 2, false), 0, {0}, NULL, N * K + 4},
    {"_scaled_mm eg", compile(tmm, eager, 1, false), 0, {0}, NULL, N * K + 4},
  };
  const th_trace *traces[6] = {t32, t16, t8, t8, tmm, tmm};
  int nrows = 6;
  for (int i = 0; i < nrows; i++) {
    rows[i].ms = calloc((size_t)runs, sizeof(double));
    if (rows[i].p)
      inputs_like(&rows[i], traces[i]);
    else
      fprintf(stderr, "bench_fp8: %s skipped: %s\n", rows[i].name, th_last_error());
  }
  for (int i = 0; i < nrows; i++)
    if (rows[i].p) run_once(&rows[i]); /* warm-up: caches, primitives, page faults */
  for (int k = 0; k < runs; k++)
    for (int i = 0; i < nrows; i++)
      if (rows[i].p) rows[i].ms[k] = run_once(&rows[i]);
  printf("\n%s: x [%lld, %lld] @ W [%lld, %lld]^T + b  (%d runs, %d threads, fp8 micro-kernel %s)\n", label,
         (long long)M, (long long)K, (long long)N, (long long)K, runs, omp_get_max_threads(),
         th_eg_isa_name(th_eg_fp8_gemm_isa()));
  printf("  %-13s %10s %10s %10s %9s %14s\n", "", "min ms", "median ms", "max ms", "GFLOP/s", "weight bytes");
  double flops = 2.0 * (double)M * (double)N * (double)K;
  for (int i = 0; i < nrows; i++) {
    row *r = &rows[i];
    if (!r->p) continue;
    qsort(r->ms, (size_t)runs, sizeof(double), cmp_double);
    double med = runs % 2 ? r->ms[runs / 2] : (r->ms[runs / 2 - 1] + r->ms[runs / 2]) / 2;
    printf("  %-13s %10.2f %10.2f %10.2f %9.1f %14lld\n", r->name, r->ms[0], med, r->ms[runs - 1], flops / med / 1e6,
           (long long)r->weight_bytes);
    for (int j = 0; j < r->nin; j++) th_tensor_release(r->in[j]);
    th_program_free(r->p);
    free(r->ms);
  }
  th_trace_free(t32);
  th_trace_free(t16);
  th_trace_free(t8);
  th_trace_free(tmm);
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 10;
  if (runs < 1) runs = 1;
  bench_shape("GPT-2 MLP fc", 2048, 768, 3072, runs);
  bench_shape("GPT-2 MLP proj", 2048, 3072, 768, runs);
  return 0;
}
