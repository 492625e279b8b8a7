/* scaled_mm.c — the CPU kernel of prims.scaled_mm (torch._scaled_mm with tensor-wise scales):
 *   out[M, N] = (decode(a) @ decode(b)) * (scale_a * scale_b) (+ bias[N]),  a [M, K], b [K, N] fp8.
 *
 * Decoding is exact: one 256-entry float32 table per fp8 format (built once from core/scalar.h's
 * codecs, so every code, NaNs, subnormals and -0 included, decodes as PyTorch decodes it). The product
 * accumulates in float32; the epilogue multiplies by the f32 product scale_a * scale_b, adds the bias
 * (read as f32) and rounds once to the output dtype.
 *
 * The GEMM is the GotoBLAS/BLIS scheme with decoding fused into packing (no f32 copy of a whole
 * operand is ever made): for each depth block of KC, the [KC, N] slab of b is decoded into NR-wide
 * column panels (zero-padded); then each task (a block of MC rows x a chunk of NCH columns, run in
 * parallel by OpenMP) decodes its [MC, KC] block of a into MR-tall row panels and runs the register
 * micro-kernel over every (MR x NR) tile, accumulating into the float32 result across depth blocks.
 * The packing loops read a and b in whichever order their strides make sequential, so a transposed
 * weight (b = w.t(), column-major, PyTorch's required layout) and a row-major b cost the same; any
 * strides work (broadcasts and slices included). Sizes: an A block (MC x KC floats, 120 KB) stays in
 * L2, a B panel (KC x NR, 16-32 KB) in L1, the B slab in L3.
 *
 * Micro-kernels (selected at run time with __builtin_cpu_supports): AVX-512F 6 x 32 and AVX2+FMA 6 x 16
 * (12 vector accumulators each; one template, two instantiations), and a portable C 4 x 8 one for
 * other CPUs. $THUNDER_FP8_GEMM=portable|avx2|avx512 forces one (when the CPU has it) for tests and
 * benchmarks.
 *
 * The BLAS executor (executors/blas.c) claims prims.scaled_mm before eager in the default executor
 * list: it decodes both operands to full float32 copies (4x the fp8 bytes) and calls oneDNN's sgemm,
 * which is faster on CPUs without fp8 arithmetic (bench/bench_fp8.c measures both). This kernel is the self-contained path (executors=["eager"]): no float32 copy of an operand
 * is ever made, and it runs wherever oneDNN does not. */
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TH_FP8_X86 1
#else
#define TH_FP8_X86 0
#endif

#include "executors/eager/eager_internal.h"

#ifndef KC
#define KC 256 /* depth of a block */
#endif
#ifndef MC
#define MC 120 /* rows of an A block (a multiple of every MR) */
#endif
#ifndef NCH
#define NCH 512 /* columns of one task (a multiple of every NR) */
#endif

/* ---- decode tables ---------------------------------------------------------------------------------- */

static float tab_e4m3fn[256], tab_e5m2[256];
static once_flag tab_once = ONCE_FLAG_INIT;

static void build_tables(void) {
  for (int i = 0; i < 256; i++) {
    tab_e4m3fn[i] = th_sc_e4m3fn_to_f32((uint8_t)i);
    tab_e5m2[i] = th_sc_e5m2_to_f32((uint8_t)i);
  }
}

const float *th_eg_fp8_table(th_dtype dt) {
  call_once(&tab_once, build_tables);
  return dt == TH_F8E4M3FN ? tab_e4m3fn : dt == TH_F8E5M2 ? tab_e5m2 : NULL;
}

/* ---- micro-kernels ----------------------------------------------------------------------------------
 * c[i * ldc + j] (+)= sum_k ap[k * MR + i] * bp[k * NR + j] for the MR x NR tile; acc = false
 * overwrites c. */
typedef void (*ukernel_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, bool acc);

static void uk_portable(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, bool acc) {
  float t[4][8] = {{0}};
  for (int64_t k = 0; k < kc; k++, ap += 4, bp += 8)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 8; j++) t[i][j] += ap[i] * bp[j];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 8; j++) c[i * ldc + j] = acc ? c[i * ldc + j] + t[i][j] : t[i][j];
}

#if TH_FP8_X86
/* One 6 x (2 * W) micro-kernel per vector ISA: two W-lane vectors of b per k, six broadcasts of a. */
#define TH_FP8_UKERNEL(name, TGT, VT, W, ZERO, LOAD, STORE, BCAST, FMA, ADD)                                           \
  __attribute__((target(TGT))) static void name(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,   \
                                                bool acc) {                                                            \
    VT c0a = ZERO(), c0b = ZERO(), c1a = ZERO(), c1b = ZERO(), c2a = ZERO(), c2b = ZERO();                             \
    VT c3a = ZERO(), c3b = ZERO(), c4a = ZERO(), c4b = ZERO(), c5a = ZERO(), c5b = ZERO();                             \
    for (int64_t k = 0; k < kc; k++, ap += 6, bp += 2 * (W)) {                                                         \
      VT b0 = LOAD(bp), b1 = LOAD(bp + (W)), a;                                                                        \
      a = BCAST(ap + 0);                                                                                               \
      c0a = FMA(a, b0, c0a);                                                                                           \
      c0b = FMA(a, b1, c0b);                                                                                           \
      a = BCAST(ap + 1);                                                                                               \
      c1a = FMA(a, b0, c1a);                                                                                           \
      c1b = FMA(a, b1, c1b);                                                                                           \
      a = BCAST(ap + 2);                                                                                               \
      c2a = FMA(a, b0, c2a);                                                                                           \
      c2b = FMA(a, b1, c2b);                                                                                           \
      a = BCAST(ap + 3);                                                                                               \
      c3a = FMA(a, b0, c3a);                                                                                           \
      c3b = FMA(a, b1, c3b);                                                                                           \
      a = BCAST(ap + 4);                                                                                               \
      c4a = FMA(a, b0, c4a);                                                                                           \
      c4b = FMA(a, b1, c4b);                                                                                           \
      a = BCAST(ap + 5);                                                                                               \
      c5a = FMA(a, b0, c5a);                                                                                           \
      c5b = FMA(a, b1, c5b);                                                                                           \
    }                                                                                                                  \
    VT *rows[6][2] = {{&c0a, &c0b}, {&c1a, &c1b}, {&c2a, &c2b}, {&c3a, &c3b}, {&c4a, &c4b}, {&c5a, &c5b}};             \
    for (int i = 0; i < 6; i++) {                                                                                      \
      float *r = c + i * ldc;                                                                                          \
      VT x = *rows[i][0], y = *rows[i][1];                                                                             \
      if (acc) {                                                                                                       \
        x = ADD(x, LOAD(r));                                                                                           \
        y = ADD(y, LOAD(r + (W)));                                                                                     \
      }                                                                                                                \
      STORE(r, x);                                                                                                     \
      STORE(r + (W), y);                                                                                               \
    }                                                                                                                  \
  }

#define AVX2_BCAST(p) _mm256_broadcast_ss(p)
TH_FP8_UKERNEL(uk_avx2, "avx2,fma", __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps, AVX2_BCAST,
               _mm256_fmadd_ps, _mm256_add_ps)
#define AVX512_BCAST(p) _mm512_set1_ps(*(p))
TH_FP8_UKERNEL(uk_avx512, "avx512f", __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps, AVX512_BCAST,
               _mm512_fmadd_ps, _mm512_add_ps)
#endif

/* ---- ISA selection ---------------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  int mr, nr;
  ukernel_fn fn;
} isa_desc;

static const isa_desc isas[3] = {
  [TH_EG_ISA_PORTABLE] = {"portable", 4, 8, uk_portable},
#if TH_FP8_X86
  [TH_EG_ISA_AVX2] = {"avx2", 6, 16, uk_avx2},
  [TH_EG_ISA_AVX512] = {"avx512", 6, 32, uk_avx512},
#else
  [TH_EG_ISA_AVX2] = {"avx2", 4, 8, uk_portable},
  [TH_EG_ISA_AVX512] = {"avx512", 4, 8, uk_portable},
#endif
};

bool th_eg_isa_supported(th_eg_isa isa) {
  switch (isa) {
    case TH_EG_ISA_PORTABLE: return true;
#if TH_FP8_X86
    case TH_EG_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case TH_EG_ISA_AVX512: return __builtin_cpu_supports("avx512f");
#endif
    default: return false;
  }
}

const char *th_eg_isa_name(th_eg_isa isa) { return (unsigned)isa < 3 ? isas[isa].name : "?"; }

th_eg_isa th_eg_fp8_gemm_isa(void) {
  const char *want = getenv("THUNDER_FP8_GEMM");
  if (want)
    for (int i = 0; i < 3; i++)
      if (!strcmp(want, isas[i].name) && th_eg_isa_supported((th_eg_isa)i)) return (th_eg_isa)i;
  if (th_eg_isa_supported(TH_EG_ISA_AVX512)) return TH_EG_ISA_AVX512;
  if (th_eg_isa_supported(TH_EG_ISA_AVX2)) return TH_EG_ISA_AVX2;
  return TH_EG_ISA_PORTABLE;
}

/* ---- packing (decode fused) ------------------------------------------------------------------------- */

/* b[k0 .. k0+kc, 0 .. N) -> NR-wide panels: panel s holds bp[s * kc * nr + k * nr + j]. Panels are
 * independent, so they are packed in parallel. */
static void pack_b(const th_eg_fp8_gemm_args *g, int64_t k0, int64_t kc, int nr, float *bp) {
  const int64_t npanels = (g->N + nr - 1) / nr;
  const float *tab = g->btab;
#pragma omp parallel for schedule(static) if (kc * g->N > TH_EG_PAR_MIN)
  for (int64_t s = 0; s < npanels; s++) {
    float *dst = bp + s * kc * nr;
    const int64_t j0 = s * nr, w = g->N - j0 < nr ? g->N - j0 : nr;
    const uint8_t *src = g->b + k0 * g->b_k + j0 * g->b_n;
    if (w < nr) memset(dst, 0, sizeof(float) * (size_t)(kc * nr));
    if (g->b_n <= g->b_k) { /* rows of b sequential: j inner */
      for (int64_t k = 0; k < kc; k++)
        for (int64_t j = 0; j < w; j++) dst[k * nr + j] = tab[src[k * g->b_k + j * g->b_n]];
    } else { /* columns sequential (b = w.t()): k inner */
      for (int64_t j = 0; j < w; j++)
        for (int64_t k = 0; k < kc; k++) dst[k * nr + j] = tab[src[k * g->b_k + j * g->b_n]];
    }
  }
}

/* a[i0 .. i0+mc, k0 .. k0+kc) -> MR-tall panels: panel r holds ap[r * kc * mr + k * mr + i]. */
static void pack_a(const th_eg_fp8_gemm_args *g, int64_t i0, int64_t mc, int64_t k0, int64_t kc, int mr, float *ap) {
  const float *tab = g->atab;
  for (int64_t r = 0; r * mr < mc; r++) {
    float *dst = ap + r * kc * mr;
    const int64_t h = mc - r * mr < mr ? mc - r * mr : mr;
    const uint8_t *src = g->a + (i0 + r * mr) * g->a_m + k0 * g->a_k;
    if (h < mr) memset(dst, 0, sizeof(float) * (size_t)(kc * mr));
    if (g->a_k <= g->a_m) { /* rows of a sequential: k inner */
      for (int64_t i = 0; i < h; i++)
        for (int64_t k = 0; k < kc; k++) dst[k * mr + i] = tab[src[i * g->a_m + k * g->a_k]];
    } else {
      for (int64_t k = 0; k < kc; k++)
        for (int64_t i = 0; i < h; i++) dst[k * mr + i] = tab[src[i * g->a_m + k * g->a_k]];
    }
  }
}

/* ---- the GEMM ------------------------------------------------------------------------------------------ */

static float *align64(void *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

th_status th_eg_fp8_gemm(th_eg_isa isa, const th_eg_fp8_gemm_args *g) {
  const int64_t M = g->M, N = g->N, K = g->K;
  if (M == 0 || N == 0) return TH_OK;
  if (K == 0) {
    for (int64_t i = 0; i < M; i++) memset(g->c + i * g->ldc, 0, sizeof(float) * (size_t)N);
    return TH_OK;
  }
  if ((unsigned)isa > TH_EG_ISA_AVX512 || !th_eg_isa_supported(isa))
    return th_error(TH_ERR_RUNTIME, "fp8 GEMM: this CPU cannot run the %s micro-kernel", th_eg_isa_name(isa));
  const isa_desc *d = &isas[isa];
  const int mr = d->mr, nr = d->nr;
  const int64_t npanels = (N + nr - 1) / nr, kcmax = K < KC ? K : KC;
  const int64_t nmb = (M + MC - 1) / MC, nnb = (N + NCH - 1) / NCH, ntasks = nmb * nnb;
  const int nthreads = ntasks > 1 && M * N * K > (int64_t)TH_EG_PAR_MIN * 64 ? omp_get_max_threads() : 1;
  const size_t bsz = (size_t)(npanels * nr * kcmax), asz = (size_t)(((MC + mr - 1) / mr) * mr * kcmax);
  void *braw = th_malloc(sizeof(float) * bsz + 64);
  void *araw = th_malloc((sizeof(float) * asz + 64) * (size_t)nthreads);
  if (!braw || !araw) {
    th_free(braw);
    th_free(araw);
    return th_error(TH_ERR_NOMEM, "fp8 GEMM: out of memory for the packing buffers");
  }
  float *bp = align64(braw);
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = K - k0 < KC ? K - k0 : KC;
    const bool acc = k0 > 0;
    pack_b(g, k0, kc, nr, bp);
#pragma omp parallel num_threads(nthreads)
    {
      float *ap = align64((char *)araw + (sizeof(float) * asz + 64) * (size_t)omp_get_thread_num());
      float edge[6 * 32];
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < ntasks; t++) {
        const int64_t i0 = (t / nnb) * MC, mc = M - i0 < MC ? M - i0 : MC;
        const int64_t j0 = (t % nnb) * NCH, jend = N - j0 < NCH ? N : j0 + NCH;
        pack_a(g, i0, mc, k0, kc, mr, ap);
        for (int64_t j = j0; j < jend; j += nr) {
          const float *bpanel = bp + (j / nr) * kc * nr;
          const int64_t w = N - j < nr ? N - j : nr;
          for (int64_t i = 0; i < mc; i += mr) {
            const float *apanel = ap + (i / mr) * kc * mr;
            const int64_t h = mc - i < mr ? mc - i : mr;
            float *ct = g->c + (i0 + i) * g->ldc + j;
            if (h == mr && w == nr) {
              d->fn(kc, apanel, bpanel, ct, g->ldc, acc);
            } else { /* an edge tile: through a full-size scratch tile */
              d->fn(kc, apanel, bpanel, edge, nr, false);
              for (int64_t ii = 0; ii < h; ii++)
                for (int64_t jj = 0; jj < w; jj++)
                  ct[ii * g->ldc + jj] = acc ? ct[ii * g->ldc + jj] + edge[ii * nr + jj] : edge[ii * nr + jj];
            }
          }
        }
      }
    }
  }
  th_free(braw);
  th_free(araw);
  return TH_OK;
}

/* ---- the kernel ---------------------------------------------------------------------------------------- */

th_status th_eg_scaled_mm_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *m2 = th_eg_tensor_arg(env, b, 1);
  th_tensor *sa = th_eg_tensor_arg(env, b, 2), *sb = th_eg_tensor_arg(env, b, 3);
  if (!a || !m2 || !sa || !sb) return th_last_status();
  th_tensor *bias = b->args[4].kind == TH_ARG_NONE ? NULL : th_eg_tensor_arg(env, b, 4);
  if (b->args[4].kind != TH_ARG_NONE && !bias) return th_last_status();
  const float *atab = th_eg_fp8_table(a->dtype), *btab = th_eg_fp8_table(m2->dtype);
  if (!atab || !btab || a->ndim != 2 || m2->ndim != 2 || sa->dtype != TH_F32 || sb->dtype != TH_F32 ||
      th_tensor_numel(sa) != 1 || th_tensor_numel(sb) != 1)
    return th_error(TH_ERR_RUNTIME, "%s: expected 2-D fp8 operands and one-element float32 scales", th_eg_name(b));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  const int64_t M = out->shape[0], N = out->shape[1];
  const float scale = th_sc_ld_f32(th_eg_data(sa)) * th_sc_ld_f32(th_eg_data(sb));
  /* Step 1: the float32 product, straight into a float32 output, else into a scratch buffer. */
  float *c = out->dtype == TH_F32 ? th_tensor_data(out) : th_malloc(sizeof(float) * (size_t)(M * N > 0 ? M * N : 1));
  if (!c) return th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  th_eg_fp8_gemm_args g = {M,
                           N,
                           a->shape[1],
                           (const uint8_t *)th_eg_data(a),
                           atab,
                           a->strides[0],
                           a->strides[1],
                           (const uint8_t *)th_eg_data(m2),
                           btab,
                           m2->strides[0],
                           m2->strides[1],
                           c,
                           N};
  th_status st = th_eg_fp8_gemm(th_eg_fp8_gemm_isa(), &g);
  /* Step 2: scale, bias, round once into the output dtype. */
  if (st == TH_OK) {
    const char *bd = bias ? th_eg_data(bias) : NULL;
    const int64_t bstride = bias ? bias->strides[0] * (int64_t)th_dtype_size(bias->dtype) : 0;
    const th_dtype odt = out->dtype, bdt = bias ? bias->dtype : TH_F32;
    const size_t osz = th_dtype_size(odt);
    char *o = th_tensor_data(out);
#pragma omp parallel for schedule(static) if (M * N > TH_EG_PAR_MIN)
    for (int64_t i = 0; i < M; i++) {
      for (int64_t j = 0; j < N; j++) {
        float v = c[i * N + j] * scale;
        if (bd) v += th_load_f32(bd + j * bstride, bdt);
        if (odt == TH_F32)
          c[i * N + j] = v;
        else
          th_store_f32(o + (size_t)(i * N + j) * osz, odt, v);
      }
    }
  }
  if (c != th_tensor_data(out)) th_free(c);
  return st;
}
