/* linalg.c — reference kernels of prims.matmul and prims.linear: the always-correct fallback behind
 * the BLAS executor, for every dtype and layout.
 *
 * Both reduce to batched GEMMs C[M, N] (+)= A[M, K] @ B[K, N] over operands with arbitrary byte
 * strides (a transposed weight, a broadcast batch, a 1-D vector as a 1-row or 1-column matrix) into
 * the contiguous output. The loop is the i-k-j form, blocked: for each block of NB output columns and
 * KB of depth, the B block is packed once into a contiguous buffer of the accumulation type, then
 * every row of A (in parallel over rows) adds a_ik * B[k, :] to its C row — an axpy over contiguous
 * memory that the compiler vectorizes. Accumulation: float32 for f32/f16/bf16 (and fp8), float64 for
 * f64, int64 (wrapping) for integers; the accumulator is the output itself when it has that type,
 * else a temporary converted once at the end (so f16/bf16 round once). linear starts each C row from
 * the bias and reads w transposed ([N, K] as B[K, N]); its leading dims fold into M when their strides
 * allow, else it runs as a batch.
 *
 * prims.matmul shapes: 1-D @ 1-D -> (); 1-D @ (..., K, N) -> (..., N); (..., M, K) @ 1-D -> (..., M);
 * (..., M, K) @ (..., K, N) -> (..., M, N) with identical batch dims (no broadcasting at prim level). */
#include <string.h>

#include "executors/eager/eager_internal.h"

#define GEMM_KB 128 /* depth of a packed B block */
#define GEMM_NB 512 /* columns of a packed B block */

/* One GEMM: C[M, N] = bias + A @ B, byte strides for A and B, C contiguous. */
typedef struct gemm_desc {
  int64_t M, N, K;
  const char *a;
  th_dtype adt;
  int64_t a_m, a_k;
  const char *b;
  th_dtype bdt;
  int64_t b_k, b_n;
  const char *bias; /* NULL: none; else N values, bias_n bytes apart */
  th_dtype biasdt;
  int64_t bias_n;
  char *c;
  th_dtype cdt;
} gemm_desc;

/* int64 accumulation runs on uint64 (wrap-around is defined); these are its element codecs. */
static inline uint64_t ld_u64(const void *p, th_dtype dt) { return (uint64_t)th_load_i64(p, dt); }
static inline void st_u64(void *p, th_dtype dt, uint64_t v) { th_store_i64(p, dt, (int64_t)v); }

/* The blocked GEMM for accumulation type T (loaded/stored with LOAD/STORE). bp: GEMM_KB * GEMM_NB
 * scratch; acc: M * N scratch, or NULL to accumulate in the output (which then has type T). */
#define EG_GEMM(name, T, LOAD, STORE)                                                                                  \
  static void name(const gemm_desc *g, T *bp, T *acc) {                                                                \
    const int64_t M = g->M, N = g->N, K = g->K;                                                                        \
    T *C = acc ? acc : (T *)(void *)g->c;                                                                              \
    /* Step 1: every C row starts from the bias (or zero). */                                                          \
    for (int64_t i = 0; i < M; i++)                                                                                    \
      for (int64_t j = 0; j < N; j++) C[i * N + j] = g->bias ? LOAD(g->bias + j * g->bias_n, g->biasdt) : (T)0;        \
    /* Step 2: blocks of B: pack [kb, nb], then each row of A adds its part (rows in parallel). */                     \
    for (int64_t n0 = 0; n0 < N; n0 += GEMM_NB) {                                                                      \
      const int64_t nb = N - n0 < GEMM_NB ? N - n0 : GEMM_NB;                                                          \
      for (int64_t k0 = 0; k0 < K; k0 += GEMM_KB) {                                                                    \
        const int64_t kb = K - k0 < GEMM_KB ? K - k0 : GEMM_KB;                                                        \
        for (int64_t k = 0; k < kb; k++)                                                                               \
          for (int64_t j = 0; j < nb; j++)                                                                             \
            bp[k * nb + j] = LOAD(g->b + (k0 + k) * g->b_k + (n0 + j) * g->b_n, g->bdt);                               \
        _Pragma("omp parallel for schedule(static) if (M * kb * nb > TH_EG_PAR_MIN)") for (int64_t i = 0; i < M;       \
                                                                                           i++) {                      \
          T arow[GEMM_KB];                                                                                             \
          for (int64_t k = 0; k < kb; k++) arow[k] = LOAD(g->a + i * g->a_m + (k0 + k) * g->a_k, g->adt);              \
          T *restrict crow = C + i * N + n0;                                                                           \
          for (int64_t k = 0; k < kb; k++) {                                                                           \
            const T aik = arow[k];                                                                                     \
            const T *restrict brow = bp + k * nb;                                                                      \
            _Pragma("omp simd") for (int64_t j = 0; j < nb; j++) crow[j] += aik * brow[j];                             \
          }                                                                                                            \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
    /* Step 3: a separate accumulator is rounded once into the output dtype. */                                        \
    if (acc) {                                                                                                         \
      const int64_t size = (int64_t)th_dtype_size(g->cdt);                                                             \
      for (int64_t e = 0; e < M * N; e++) STORE(g->c + e * size, g->cdt, acc[e]);                                      \
    }                                                                                                                  \
  }

EG_GEMM(gemm_f32, float, th_load_f32, th_store_f32)
EG_GEMM(gemm_f64, double, th_load_f64, th_store_f64)
EG_GEMM(gemm_u64, uint64_t, ld_u64, st_u64)

/* A batch of GEMMs sharing M, N, K: batch dims bshape[nb] with per-batch byte strides of A and B;
 * outputs follow each other contiguously in c. */
static th_status gemm_batched(const th_bsym *b, gemm_desc g, int nbd, const int64_t *bshape, const int64_t *a_bs,
                              const int64_t *b_bs) {
  /* Step 1: the accumulation type and the scratch buffers. */
  th_eg_class cls = th_eg_class_of(g.cdt);
  size_t tsize = cls == TH_EG_CF32 ? sizeof(float) : 8;
  bool direct = (cls == TH_EG_CF32 && g.cdt == TH_F32) || (cls == TH_EG_CF64 && g.cdt == TH_F64) ||
                (cls == TH_EG_CI64 && g.cdt == TH_I64);
  void *bp = th_malloc((size_t)GEMM_KB * GEMM_NB * tsize);
  void *acc = direct || g.M * g.N == 0 ? NULL : th_malloc((size_t)(g.M * g.N) * tsize);
  if (!bp || (!direct && g.M * g.N > 0 && !acc)) {
    th_free(bp);
    th_free(acc);
    return th_error(TH_ERR_NOMEM, "%s: out of memory for the GEMM scratch buffers", th_eg_name(b));
  }
  /* Step 2: every batch index (odometer over the batch dims), one GEMM each. */
  int64_t nbatch = 1;
  for (int d = 0; d < nbd; d++) nbatch *= bshape[d];
  int64_t csize = (int64_t)th_dtype_size(g.cdt);
  const char *a0 = g.a, *b0 = g.b;
  char *c0 = g.c;
  for (int64_t bi = 0; bi < nbatch; bi++) {
    int64_t rest = bi, aoff = 0, boff = 0;
    for (int d = nbd - 1; d >= 0; d--) {
      int64_t ix = rest % bshape[d];
      rest /= bshape[d];
      aoff += ix * a_bs[d];
      boff += ix * b_bs[d];
    }
    g.a = a0 + aoff;
    g.b = b0 + boff;
    g.c = c0 + bi * g.M * g.N * csize;
    switch (cls) {
      case TH_EG_CF32: gemm_f32(&g, bp, acc); break;
      case TH_EG_CF64: gemm_f64(&g, bp, acc); break;
      case TH_EG_CI64: gemm_u64(&g, bp, acc); break;
    }
  }
  th_free(bp);
  th_free(acc);
  return TH_OK;
}

static th_status shape_error(const th_bsym *b, const th_tensor *x, const th_tensor *y) {
  return th_error(TH_ERR_RUNTIME, "%s: shapes of %d-dim and %d-dim operands do not multiply", th_eg_name(b), x->ndim,
                  y->ndim);
}

/* A byte stride, 0 for an empty operand: nothing of it is read, and its strides may be anything its
 * sizes allow (a size-0 dim next to one of extent 2^62), so they are not multiplied out. */
static int64_t bst(const th_tensor *t, int d, int64_t size) {
  return th_tensor_numel(t) == 0 ? 0 : t->strides[d] * size;
}

th_status th_eg_matmul_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the operands (at least 1-D) and the output. */
  th_tensor *x = th_eg_tensor_arg(env, b, 0);
  if (!x) return th_last_status();
  th_tensor *y = th_eg_tensor_arg(env, b, 1);
  if (!y) return th_last_status();
  if (x->ndim == 0 || y->ndim == 0)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: both arguments must be at least 1-D", th_eg_name(b));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  int64_t xs = (int64_t)th_dtype_size(x->dtype), ys = (int64_t)th_dtype_size(y->dtype);
  int xn = x->ndim, yn = y->ndim;
  /* Step 2: M, N, K and strides for each case; a 1-D operand is a 1-row (left) or 1-column (right)
   * matrix whose missing stride is 0; the batch dims come from the operand that has them. */
  gemm_desc g;
  memset(&g, 0, sizeof g);
  g.a = th_eg_data(x), g.adt = x->dtype, g.b = th_eg_data(y), g.bdt = y->dtype;
  g.c = th_eg_data(out), g.cdt = out->dtype;
  int64_t bshape[TH_MAX_DIMS], a_bs[TH_MAX_DIMS], b_bs[TH_MAX_DIMS];
  int nbd = 0;
  if (xn == 1) {
    g.M = 1, g.K = x->shape[0], g.a_m = 0, g.a_k = bst(x, 0, xs);
  } else {
    g.M = x->shape[xn - 2], g.K = x->shape[xn - 1];
    g.a_m = bst(x, xn - 2, xs), g.a_k = bst(x, xn - 1, xs);
  }
  int64_t kb;
  if (yn == 1) {
    kb = y->shape[0], g.N = 1, g.b_k = bst(y, 0, ys), g.b_n = 0;
  } else {
    kb = y->shape[yn - 2], g.N = y->shape[yn - 1];
    g.b_k = bst(y, yn - 2, ys), g.b_n = bst(y, yn - 1, ys);
  }
  if (kb != g.K) return shape_error(b, x, y);
  if (xn > 2 && yn > 2 && xn != yn) return shape_error(b, x, y);
  const th_tensor *bt = xn > 2 ? x : yn > 2 ? y : NULL; /* the operand that has batch dims */
  if (bt) {
    nbd = bt->ndim - 2;
    for (int d = 0; d < nbd; d++) {
      bshape[d] = bt->shape[d];
      a_bs[d] = xn > 2 ? bst(x, d, xs) : 0;
      b_bs[d] = yn > 2 ? bst(y, d, ys) : 0;
      if (xn > 2 && yn > 2 && x->shape[d] != y->shape[d]) return shape_error(b, x, y);
    }
  }
  int64_t want;
  bool ovf = __builtin_mul_overflow(g.M, g.N, &want);
  for (int d = 0; d < nbd; d++) ovf |= __builtin_mul_overflow(want, bshape[d], &want);
  if (ovf || want != th_tensor_numel(out)) return shape_error(b, x, y);
  /* Step 3: the GEMMs. */
  return gemm_batched(b, g, nbd, bshape, a_bs, b_bs);
}

th_status th_eg_linear_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: a (..., K), w (N, K), optional bias (N). */
  th_tensor *a = th_eg_tensor_arg(env, b, 0);
  if (!a) return th_last_status();
  th_tensor *w = th_eg_tensor_arg(env, b, 1);
  if (!w) return th_last_status();
  th_tensor *bias = b->nargs > 2 ? th_rt_tensor(env, &b->args[2]) : NULL;
  if (a->ndim == 0 || w->ndim != 2 || w->shape[1] != a->shape[a->ndim - 1] ||
      (bias && th_tensor_numel(bias) != w->shape[0] && !(bias->ndim == 0)))
    return th_error(TH_ERR_RUNTIME, "%s: expected a (..., K), w (N, K) and bias (N)", th_eg_name(b));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  int64_t as = (int64_t)th_dtype_size(a->dtype), ws = (int64_t)th_dtype_size(w->dtype);
  int an = a->ndim;
  /* Step 2: B[k, n] = w[n, k]; the bias (a 0-dim bias broadcasts). */
  gemm_desc g;
  memset(&g, 0, sizeof g);
  g.a = th_eg_data(a), g.adt = a->dtype, g.b = th_eg_data(w), g.bdt = w->dtype;
  g.c = th_eg_data(out), g.cdt = out->dtype;
  g.K = a->shape[an - 1], g.N = w->shape[0];
  g.a_k = bst(a, an - 1, as);
  g.b_k = bst(w, 1, ws), g.b_n = bst(w, 0, ws);
  if (bias) {
    g.bias = th_eg_data(bias), g.biasdt = bias->dtype;
    g.bias_n = bias->ndim ? bst(bias, bias->ndim - 1, (int64_t)th_dtype_size(bias->dtype)) : 0;
  }
  /* Step 3: the leading dims of a fold into M when each steps over the next (ignoring size-1 dims);
   * else a's dims before the last two are a batch. */
  int64_t M = 1, a_m = 0, prev_stride = -1;
  bool fold = true;
  for (int d = an - 2; d >= 0; d--) {
    if (a->shape[d] == 1) continue;
    if (prev_stride < 0)
      a_m = bst(a, d, as);
    else if (bst(a, d, as) != prev_stride)
      fold = false;
    if (__builtin_mul_overflow(bst(a, d, as), a->shape[d], &prev_stride)) fold = false;
    M *= a->shape[d];
  }
  for (int d = 0; d < an - 1; d++)
    if (a->shape[d] == 0) M = 0;
  if (fold) {
    g.M = M, g.a_m = a_m;
    return gemm_batched(b, g, 0, NULL, NULL, NULL);
  }
  int64_t bshape[TH_MAX_DIMS], a_bs[TH_MAX_DIMS], w_bs[TH_MAX_DIMS];
  int nbd = an - 2;
  g.M = a->shape[an - 2], g.a_m = bst(a, an - 2, as);
  for (int d = 0; d < nbd; d++) {
    bshape[d] = a->shape[d];
    a_bs[d] = bst(a, d, as);
    w_bs[d] = 0;
  }
  return gemm_batched(b, g, nbd, bshape, a_bs, w_bs);
}
