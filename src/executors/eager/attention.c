/* attention.c — eager kernels of the flash attention prims (ops/prims/attention.c):
 *   scaled_dot_product_flash_attention          -> (out, logsumexp)
 *   scaled_dot_product_flash_attention_backward -> (grad_query, grad_key, grad_value)
 *
 * Forward (FlashAttention-2 on CPU): one task per (batch, query head, block of BQ query rows), run by
 * OpenMP threads (dynamic schedule: causal blocks differ in work). A task keeps its query block, the
 * running row max m and row sum l and the unnormalized output O in float32 buffers and walks the key
 * blocks of BK keys (under is_causal only those at or left of the diagonal): S = (Q K^T) * scale, the
 * mask (causal: key j > query i is -inf; bool mask: False is -inf; float mask: added), then the online
 * softmax m' = max(m, rowmax S), P = exp(S - m'), l = l exp(m - m') + rowsum P, O = O exp(m - m') + P V.
 * At the end out = O / l and logsumexp = m + log l. The L x S scores are never materialized: a task holds
 * BQ x BK of them. A row with no attended key (all -inf) gives out 0 and logsumexp -inf (PyTorch's
 * _safe_softmax result).
 *
 * Backward (FlashAttention-2's recomputation): one task per (batch, key/value head), so the gradients of
 * a key/value head shared by a group of query heads (grouped-query attention) are summed without races.
 * It holds float32 dK and dV for the whole head; for each query head of the group and each query block:
 * D = rowsum(dO * O), and for each key block it recomputes P = exp(S - logsumexp), then
 * dV += P^T dO, dP = dO V^T, dS = P (dP - D), dQ += scale dS K, dK += scale dS^T Q.
 *
 * dtypes: float32 and bfloat16 operands, float32 arithmetic throughout; bf16 tiles are widened when
 * loaded and results rounded once to bf16 when stored. The mask is bool, float32 or bfloat16. Operands
 * may have any strides (mask broadcasts have stride 0); outputs are the contiguous tensors the runtime
 * allocates.
 *
 * The tile products go through register micro-kernels of 4 rows (AVX-512: 4 x 64 columns in sixteen zmm
 * accumulators; AVX2+FMA: 4 x 16 in eight ymm; a portable C one off x86), the edges through plain
 * `omp simd` loops, and the exponentials through the fuser's branch-free expf (fuser/mathlib.h), which
 * vectorizes. The task functions are compiled twice, for AVX-512 and for the build's baseline AVX2, and
 * picked at run time with __builtin_cpu_supports; $THUNDER_ATTN_ISA=avx2 forces the AVX2 code on an
 * AVX-512 machine (tests of the fallback). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "executors/eager/eager_internal.h"

#define TH_M_NO_ROUTING
#include "executors/fuser/mathlib.h"

#define BQ 64 /* query rows per block */
#define BK 64 /* keys per block */
#define JC_MAX 64

#if defined(__GNUC__)
#define AT_INLINE static inline __attribute__((always_inline))
#else
#define AT_INLINE static inline
#endif

/* ---- operands -------------------------------------------------------------------------------------- */

/* A tensor operand viewed over rank n: element strides per dim (0 for a broadcast dim). */
typedef struct {
  const char *p;
  th_dtype dt;
  int64_t st[TH_MAX_DIMS];
} opnd;

typedef struct {
  int n;                       /* rank of query */
  int64_t bshape[TH_MAX_DIMS]; /* the n - 3 batch dims */
  int64_t nbatch, hq, hk, L, S, E, Ev;
  bool causal, has_mask, mask_bool;
  float scale;
  opnd q, k, v, mask;
  /* forward outputs / backward inputs */
  opnd o, lse, g;
  /* backward outputs */
  opnd dq, dk, dv;
} attn_args;

/* Binds tensor t (rank t->ndim <= n) right-aligned over rank n; size-1 dims get stride 0. */
static void bind(opnd *o, const th_tensor *t, int n) {
  o->p = th_eg_data(t);
  o->dt = t->dtype;
  int lead = n - t->ndim;
  for (int d = 0; d < n; d++) o->st[d] = 0;
  for (int d = 0; d < t->ndim; d++) o->st[lead + d] = t->shape[d] == 1 ? 0 : t->strides[d];
}

/* Element offset of (batch index bi, head h) in o. */
static int64_t head_off(const attn_args *a, const opnd *o, int64_t bi, int64_t h) {
  int64_t off = h * o->st[a->n - 3];
  for (int d = a->n - 4; d >= 0; d--) {
    off += (bi % a->bshape[d]) * o->st[d];
    bi /= a->bshape[d];
  }
  return off;
}

AT_INLINE float ld(const char *p, th_dtype dt, int64_t i) {
  if (dt == TH_F32) return ((const float *)p)[i];
  if (dt == TH_BF16) return th_sc_bf16_to_f32(((const uint16_t *)p)[i]);
  return ((const bool *)p)[i] ? 1.0f : 0.0f;
}

AT_INLINE void st(char *p, th_dtype dt, int64_t i, float x) {
  if (dt == TH_F32)
    ((float *)p)[i] = x;
  else
    ((uint16_t *)p)[i] = th_sc_f32_to_bf16(x);
}

/* dst[r * ldd + c] = o[off + (r0 + r) * rs + c * cs] for r < nr, c < nc (ldd >= nc); with `trans`,
 * dst[c * ldd + r] instead. Columns beyond nc up to `pad` (rows, transposed) are zeroed. */
AT_INLINE void load_tile(float *dst, int64_t ldd, const opnd *o, int64_t off, int64_t rs, int64_t cs, int64_t r0,
                         int64_t nr, int64_t nc, bool trans) {
  const char *p = o->p;
  const th_dtype dt = o->dt;
  for (int64_t r = 0; r < nr; r++) {
    const int64_t base = off + (r0 + r) * rs;
    if (!trans) {
      float *d = dst + r * ldd;
      if (dt == TH_F32 && cs == 1)
        memcpy(d, (const float *)p + base, sizeof(float) * (size_t)nc);
      else if (dt == TH_BF16 && cs == 1) {
        const uint16_t *s = (const uint16_t *)p + base;
#pragma omp simd
        for (int64_t c = 0; c < nc; c++) d[c] = th_sc_bf16_to_f32(s[c]);
      } else
        for (int64_t c = 0; c < nc; c++) d[c] = ld(p, dt, base + c * cs);
    } else
      for (int64_t c = 0; c < nc; c++) dst[c * ldd + r] = ld(p, dt, base + c * cs);
  }
}

/* ---- tile products -----------------------------------------------------------------------------------
 * C[M x N] (+)= A[M x K] B[K x N], row-major with leading dims; acc = false overwrites C. Full 4 x JC
 * tiles go to a register micro-kernel (AVX-512: 4 x 64, sixteen zmm accumulators; AVX2: 4 x 16, eight
 * ymm), the edges to plain loops. */
typedef void (*ukernel_fn)(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                           bool acc);

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TH_ATTN_X86 1
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))

/* One row of accumulators: NV vectors of row r. */
#define UK_FMA_ROW(FMA, BC, cr, ar)                                                                                    \
  do {                                                                                                                 \
    const VT x_ = BC(ar[k]);                                                                                           \
    for (int v_ = 0; v_ < NV; v_++) cr[v_] = FMA(x_, b_[v_], cr[v_]);                                                  \
  } while (0)

#define TH_ATTN_UKERNEL(name, TGT, VT_, W, NV_, ZERO, LOAD, STORE, BC, FMA, ADD)                                       \
  TGT static void name(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,     \
                       bool acc) {                                                                                     \
    typedef VT_ VT;                                                                                                    \
    enum { NV = NV_ };                                                                                                 \
    VT c0[NV], c1[NV], c2[NV], c3[NV], b_[NV];                                                                         \
    for (int v_ = 0; v_ < NV; v_++) c0[v_] = c1[v_] = c2[v_] = c3[v_] = ZERO();                                        \
    const float *a0 = A, *a1 = A + lda, *a2 = a1 + lda, *a3 = a2 + lda;                                                \
    for (int64_t k = 0; k < K; k++) {                                                                                  \
      const float *b = B + k * ldb;                                                                                    \
      for (int v_ = 0; v_ < NV; v_++) b_[v_] = LOAD(b + v_ * (W));                                                     \
      UK_FMA_ROW(FMA, BC, c0, a0);                                                                                     \
      UK_FMA_ROW(FMA, BC, c1, a1);                                                                                     \
      UK_FMA_ROW(FMA, BC, c2, a2);                                                                                     \
      UK_FMA_ROW(FMA, BC, c3, a3);                                                                                     \
    }                                                                                                                  \
    VT *rows[4] = {c0, c1, c2, c3};                                                                                    \
    for (int r = 0; r < 4; r++)                                                                                        \
      for (int v_ = 0; v_ < NV; v_++) {                                                                                \
        float *d = C + r * ldc + v_ * (W);                                                                             \
        STORE(d, acc ? ADD(rows[r][v_], LOAD(d)) : rows[r][v_]);                                                       \
      }                                                                                                                \
  }

TH_ATTN_UKERNEL(uk_avx512, AVX512_TARGET, __m512, 16, 4, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_storeu_ps,
                _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps)
TH_ATTN_UKERNEL(uk_avx2, AVX2_TARGET, __m256, 8, 2, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_storeu_ps,
                _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps)
#else
#define TH_ATTN_X86 0
#endif

#if !TH_ATTN_X86
/* The portable 4 x 16 micro-kernel (CPUs other than x86-64). */
static void uk_portable(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                        bool acc) {
  float t[4][16] = {{0}};
  for (int64_t k = 0; k < K; k++)
    for (int r = 0; r < 4; r++)
#pragma omp simd
      for (int j = 0; j < 16; j++) t[r][j] = fmaf(A[r * lda + k], B[k * ldb + j], t[r][j]);
  for (int r = 0; r < 4; r++)
    for (int j = 0; j < 16; j++) C[r * ldc + j] = acc ? C[r * ldc + j] + t[r][j] : t[r][j];
}
#endif

AT_INLINE void gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                    int64_t ldc, bool acc, const int JC, ukernel_fn uk) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) {
    int64_t j0 = 0;
    for (; j0 + JC <= N; j0 += JC) uk(K, A + i * lda, lda, B + j0, ldb, C + i * ldc + j0, ldc, acc);
    if (j0 < N) {
      const int64_t w = N - j0;
      for (int r = 0; r < 4; r++) {
        const float *ar = A + (i + r) * lda;
        float *cr = C + (i + r) * ldc + j0;
        if (!acc)
          for (int64_t j = 0; j < w; j++) cr[j] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
          const float *b = B + k * ldb + j0;
          const float x = ar[k];
#pragma omp simd
          for (int64_t j = 0; j < w; j++) cr[j] = fmaf(x, b[j], cr[j]);
        }
      }
    }
  }
  for (; i < M; i++) {
    const float *ar = A + i * lda;
    float *cr = C + i * ldc;
    if (!acc)
      for (int64_t j = 0; j < N; j++) cr[j] = 0.0f;
    for (int64_t k = 0; k < K; k++) {
      const float *b = B + k * ldb;
      const float x = ar[k];
#pragma omp simd
      for (int64_t j = 0; j < N; j++) cr[j] = fmaf(x, b[j], cr[j]);
    }
  }
}

/* S[r][c] (the BQ x BK tile at query rows i0.., keys j0..) scaled and masked. */
AT_INLINE void scale_mask(const attn_args *a, float *S, int64_t bq, int64_t bk, int64_t i0, int64_t j0, int64_t moff) {
  const float scale = a->scale;
  for (int64_t r = 0; r < bq; r++) {
    float *s = S + r * BK;
#pragma omp simd
    for (int64_t c = 0; c < bk; c++) s[c] *= scale;
    if (a->has_mask) {
      const int64_t base = moff + (i0 + r) * a->mask.st[a->n - 2] + j0 * a->mask.st[a->n - 1],
                    cs = a->mask.st[a->n - 1];
      if (a->mask_bool) {
        const bool *m = (const bool *)a->mask.p + base;
        for (int64_t c = 0; c < bk; c++)
          if (!m[c * cs]) s[c] = -INFINITY;
      } else
        for (int64_t c = 0; c < bk; c++) s[c] += ld(a->mask.p, a->mask.dt, base + c * cs);
    }
    if (a->causal)
      for (int64_t c = (i0 + r) - j0 + 1 > 0 ? (i0 + r) - j0 + 1 : 0; c < bk; c++) s[c] = -INFINITY;
  }
}

/* The number of keys a query block [i0, i0 + bq) looks at. */
AT_INLINE int64_t key_end(const attn_args *a, int64_t i0, int64_t bq) {
  if (!a->causal) return a->S;
  return i0 + bq < a->S ? i0 + bq : a->S;
}

/* ---- forward ------------------------------------------------------------------------------------------ */

typedef struct {
  float *Q, *Kt, *V, *S, *O, *m, *l;
} fwd_buf;

AT_INLINE void fwd_task_body(const attn_args *a, fwd_buf *w, int64_t t, const int JC, ukernel_fn uk) {
  const int64_t nqb = (a->L + BQ - 1) / BQ, E = a->E, Ev = a->Ev, n = a->n;
  const int64_t qb = t % nqb, bh = t / nqb, h = bh % a->hq, bi = bh / a->hq, hk = h / (a->hq / a->hk);
  const int64_t i0 = qb * BQ, bq = a->L - i0 < BQ ? a->L - i0 : BQ;
  const int64_t qo = head_off(a, &a->q, bi, h), ko = head_off(a, &a->k, bi, hk), vo = head_off(a, &a->v, bi, hk);
  const int64_t mo = a->has_mask ? head_off(a, &a->mask, bi, h) : 0;
  load_tile(w->Q, E, &a->q, qo, a->q.st[n - 2], a->q.st[n - 1], i0, bq, E, false);
  for (int64_t r = 0; r < bq; r++) {
    w->m[r] = -INFINITY;
    w->l[r] = 0.0f;
  }
  memset(w->O, 0, sizeof(float) * (size_t)(bq * Ev));
  const int64_t kend = key_end(a, i0, bq);
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {
    const int64_t bk = kend - j0 < BK ? kend - j0 : BK;
    load_tile(w->Kt, BK, &a->k, ko, a->k.st[n - 2], a->k.st[n - 1], j0, bk, E, true);
    load_tile(w->V, Ev, &a->v, vo, a->v.st[n - 2], a->v.st[n - 1], j0, bk, Ev, false);
    gemm(bq, bk, E, w->Q, E, w->Kt, BK, w->S, BK, false, JC, uk);
    scale_mask(a, w->S, bq, bk, i0, j0, mo);
    for (int64_t r = 0; r < bq; r++) {
      float *s = w->S + r * BK, mx = w->m[r];
#pragma omp simd reduction(max : mx)
      for (int64_t c = 0; c < bk; c++) mx = s[c] > mx ? s[c] : mx;
      const float mu = mx == -INFINITY ? 0.0f : mx; /* a row with nothing attended so far keeps P = 0 */
      const float alpha = th_m_expf(w->m[r] - mu);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < bk; c++) {
        s[c] = th_m_expf(s[c] - mu);
        sum += s[c];
      }
      w->l[r] = w->l[r] * alpha + sum;
      w->m[r] = mx;
      if (alpha != 1.0f) {
        float *o = w->O + r * Ev;
#pragma omp simd
        for (int64_t c = 0; c < Ev; c++) o[c] *= alpha;
      }
    }
    gemm(bq, Ev, bk, w->S, BK, w->V, Ev, w->O, Ev, true, JC, uk);
  }
  const int64_t oo = head_off(a, &a->o, bi, h), lo = head_off(a, &a->lse, bi, h);
  for (int64_t r = 0; r < bq; r++) {
    const float l = w->l[r], inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float *o = w->O + r * Ev;
    char *dst = (char *)a->o.p;
    const int64_t base = oo + (i0 + r) * a->o.st[n - 2];
    for (int64_t c = 0; c < Ev; c++) st(dst, a->o.dt, base + c * a->o.st[n - 1], l > 0.0f ? o[c] * inv : 0.0f);
    ((float *)a->lse.p)[lo + (i0 + r) * a->lse.st[n - 2]] = l > 0.0f ? w->m[r] + logf(l) : (l == 0.0f ? -INFINITY : l);
  }
}

/* ---- backward ----------------------------------------------------------------------------------------- */

typedef struct {
  float *Q, *dO, *Kt, *K, *Vt, *S, *P_t, *dS, *dS_t, *dQ, *dK, *dV, *D, *lse;
} bwd_buf;

AT_INLINE void transpose_tile(const float *src, int64_t lds, float *dst, int64_t ldd, int64_t nr, int64_t nc) {
  for (int64_t r = 0; r < nr; r++)
    for (int64_t c = 0; c < nc; c++) dst[c * ldd + r] = src[r * lds + c];
}

AT_INLINE void bwd_task_body(const attn_args *a, bwd_buf *w, int64_t t, const int JC, ukernel_fn uk) {
  const int64_t E = a->E, Ev = a->Ev, n = a->n, S = a->S, grp = a->hq / a->hk;
  const int64_t hk = t % a->hk, bi = t / a->hk;
  const int64_t ko = head_off(a, &a->k, bi, hk), vo = head_off(a, &a->v, bi, hk);
  memset(w->dK, 0, sizeof(float) * (size_t)(S * E));
  memset(w->dV, 0, sizeof(float) * (size_t)(S * Ev));
  for (int64_t h = hk * grp; h < (hk + 1) * grp; h++) {
    const int64_t qo = head_off(a, &a->q, bi, h), go = head_off(a, &a->g, bi, h), oo = head_off(a, &a->o, bi, h);
    const int64_t lo = head_off(a, &a->lse, bi, h), mo = a->has_mask ? head_off(a, &a->mask, bi, h) : 0;
    for (int64_t i0 = 0; i0 < a->L; i0 += BQ) {
      const int64_t bq = a->L - i0 < BQ ? a->L - i0 : BQ;
      load_tile(w->Q, E, &a->q, qo, a->q.st[n - 2], a->q.st[n - 1], i0, bq, E, false);
      load_tile(w->dO, Ev, &a->g, go, a->g.st[n - 2], a->g.st[n - 1], i0, bq, Ev, false);
      for (int64_t r = 0; r < bq; r++) {
        const int64_t ob = oo + (i0 + r) * a->o.st[n - 2];
        const float *g = w->dO + r * Ev;
        float d = 0.0f;
        for (int64_t c = 0; c < Ev; c++) d += g[c] * ld(a->o.p, a->o.dt, ob + c * a->o.st[n - 1]);
        w->D[r] = d;
        const float l = ((const float *)a->lse.p)[lo + (i0 + r) * a->lse.st[n - 2]];
        w->lse[r] = l == -INFINITY ? INFINITY : l; /* a row that attends to nothing: P = 0 */
      }
      memset(w->dQ, 0, sizeof(float) * (size_t)(bq * E));
      const int64_t kend = key_end(a, i0, bq);
      for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        const int64_t bk = kend - j0 < BK ? kend - j0 : BK;
        load_tile(w->Kt, BK, &a->k, ko, a->k.st[n - 2], a->k.st[n - 1], j0, bk, E, true);
        load_tile(w->K, E, &a->k, ko, a->k.st[n - 2], a->k.st[n - 1], j0, bk, E, false);
        load_tile(w->Vt, BK, &a->v, vo, a->v.st[n - 2], a->v.st[n - 1], j0, bk, Ev, true);
        gemm(bq, bk, E, w->Q, E, w->Kt, BK, w->S, BK, false, JC, uk);
        scale_mask(a, w->S, bq, bk, i0, j0, mo);
        for (int64_t r = 0; r < bq; r++) {
          float *s = w->S + r * BK;
          const float l = w->lse[r];
#pragma omp simd
          for (int64_t c = 0; c < bk; c++) s[c] = th_m_expf(s[c] - l); /* P */
        }
        /* dV[j0..] += P^T dO */
        transpose_tile(w->S, BK, w->P_t, BQ, bq, bk);
        gemm(bk, Ev, bq, w->P_t, BQ, w->dO, Ev, w->dV + j0 * Ev, Ev, true, JC, uk);
        /* dP = dO V^T; dS = P (dP - D) scale */
        gemm(bq, bk, Ev, w->dO, Ev, w->Vt, BK, w->dS, BK, false, JC, uk);
        for (int64_t r = 0; r < bq; r++) {
          float *ds = w->dS + r * BK;
          const float *p = w->S + r * BK, d = w->D[r], scale = a->scale;
#pragma omp simd
          for (int64_t c = 0; c < bk; c++) ds[c] = p[c] * (ds[c] - d) * scale;
        }
        gemm(bq, E, bk, w->dS, BK, w->K, E, w->dQ, E, true, JC, uk);
        transpose_tile(w->dS, BK, w->dS_t, BQ, bq, bk);
        gemm(bk, E, bq, w->dS_t, BQ, w->Q, E, w->dK + j0 * E, E, true, JC, uk);
      }
      const int64_t dqo = head_off(a, &a->dq, bi, h);
      for (int64_t r = 0; r < bq; r++)
        for (int64_t c = 0; c < E; c++)
          st((char *)a->dq.p, a->dq.dt, dqo + (i0 + r) * a->dq.st[n - 2] + c * a->dq.st[n - 1], w->dQ[r * E + c]);
    }
  }
  const int64_t dko = head_off(a, &a->dk, bi, hk), dvo = head_off(a, &a->dv, bi, hk);
  for (int64_t r = 0; r < S; r++) {
    for (int64_t c = 0; c < E; c++)
      st((char *)a->dk.p, a->dk.dt, dko + r * a->dk.st[n - 2] + c * a->dk.st[n - 1], w->dK[r * E + c]);
    for (int64_t c = 0; c < Ev; c++)
      st((char *)a->dv.p, a->dv.dt, dvo + r * a->dv.st[n - 2] + c * a->dv.st[n - 1], w->dV[r * Ev + c]);
  }
}

/* ---- ISA instantiations ------------------------------------------------------------------------------- */

typedef void (*fwd_fn)(const attn_args *a, fwd_buf *w, int64_t t);
typedef void (*bwd_fn)(const attn_args *a, bwd_buf *w, int64_t t);

#if TH_ATTN_X86
static void fwd_task_base(const attn_args *a, fwd_buf *w, int64_t t) { fwd_task_body(a, w, t, 16, uk_avx2); }
static void bwd_task_base(const attn_args *a, bwd_buf *w, int64_t t) { bwd_task_body(a, w, t, 16, uk_avx2); }
#define TH_ATTN_AVX512 1
AVX512_TARGET static void fwd_task_avx512(const attn_args *a, fwd_buf *w, int64_t t) {
  fwd_task_body(a, w, t, 64, uk_avx512);
}
AVX512_TARGET static void bwd_task_avx512(const attn_args *a, bwd_buf *w, int64_t t) {
  bwd_task_body(a, w, t, 64, uk_avx512);
}
#else
static void fwd_task_base(const attn_args *a, fwd_buf *w, int64_t t) { fwd_task_body(a, w, t, 16, uk_portable); }
static void bwd_task_base(const attn_args *a, bwd_buf *w, int64_t t) { bwd_task_body(a, w, t, 16, uk_portable); }
#define TH_ATTN_AVX512 0
#define fwd_task_avx512 fwd_task_base
#define bwd_task_avx512 bwd_task_base
#endif

/* AVX-512 when the CPU has it and $THUNDER_ATTN_ISA does not ask for the baseline ("avx2"). */
static bool use_avx512(void) {
#if TH_ATTN_AVX512
  const char *want = getenv("THUNDER_ATTN_ISA");
  if (want && !strcmp(want, "avx2")) return false;
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

/* ---- argument binding --------------------------------------------------------------------------------- */

static th_status bool_arg(th_rt_env *env, const th_bsym *b, int i, bool *v) {
  if (b->args[i].kind == TH_ARG_BOOL) {
    *v = b->args[i].u.b;
    return TH_OK;
  }
  int64_t x;
  TH_TRY(th_eg_int_arg(env, b, i, &x));
  *v = x != 0;
  return TH_OK;
}

/* Binds q, k, v (args q0..q0+2), the mask (arg mi), is_causal and scale (mi + 1, mi + 2). */
static th_status bind_common(th_rt_env *env, const th_bsym *b, int q0, int mi, attn_args *a) {
  memset(a, 0, sizeof *a);
  th_tensor *q = th_eg_tensor_arg(env, b, q0), *k = q ? th_eg_tensor_arg(env, b, q0 + 1) : NULL,
            *v = k ? th_eg_tensor_arg(env, b, q0 + 2) : NULL;
  if (!v) return th_last_status();
  const int n = q->ndim;
  a->n = n;
  a->nbatch = 1;
  for (int d = 0; d < n - 3; d++) {
    a->bshape[d] = q->shape[d];
    a->nbatch *= q->shape[d];
  }
  a->hq = q->shape[n - 3];
  a->hk = k->shape[n - 3];
  a->L = q->shape[n - 2];
  a->E = q->shape[n - 1];
  a->S = k->shape[n - 2];
  a->Ev = v->shape[n - 1];
  bind(&a->q, q, n);
  bind(&a->k, k, n);
  bind(&a->v, v, n);
  if (b->args[mi].kind != TH_ARG_NONE) {
    th_tensor *m = th_eg_tensor_arg(env, b, mi);
    if (!m) return th_last_status();
    bind(&a->mask, m, n);
    a->has_mask = true;
    a->mask_bool = m->dtype == TH_BOOL;
  }
  TH_TRY(bool_arg(env, b, mi + 1, &a->causal));
  double scale;
  TH_TRY(th_eg_float_arg(env, b, mi + 2, &scale));
  a->scale = (float)scale;
  return TH_OK;
}

/* Binds a tensor of rank n - 1 (logsumexp: [..., H, L]) over rank n with a last dim of stride 0. */
static void bind_lse(opnd *o, const th_tensor *t, int n) {
  o->p = th_eg_data(t);
  o->dt = t->dtype;
  for (int d = 0; d < n - 1; d++) o->st[d] = t->strides[d];
  o->st[n - 1] = 0;
}

static void *alloc_floats(int64_t n) { return th_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

th_status th_eg_sdpa_flash_ref(th_rt_env *env, const th_bsym *b) {
  attn_args a;
  TH_TRY(bind_common(env, b, 0, 3, &a));
  th_tensor *out = th_eg_alloc_out(env, b, 0), *lse = out ? th_eg_alloc_out(env, b, 1) : NULL;
  if (!lse) return th_last_status();
  bind(&a.o, out, a.n);
  bind_lse(&a.lse, lse, a.n);
  if (a.L == 0) return TH_OK;
  const int64_t ntasks = a.nbatch * a.hq * ((a.L + BQ - 1) / BQ);
  const fwd_fn fn = use_avx512() ? fwd_task_avx512 : fwd_task_base;
  const int nth = ntasks > 1 ? omp_get_max_threads() : 1;
  bool oom = false;
#pragma omp parallel num_threads(nth)
  {
    fwd_buf w = {alloc_floats(BQ * a.E),  alloc_floats(a.E * BK), alloc_floats(BK * a.Ev), alloc_floats(BQ * BK),
                 alloc_floats(BQ * a.Ev), alloc_floats(BQ),       alloc_floats(BQ)};
    bool ok = w.Q && w.Kt && w.V && w.S && w.O && w.m && w.l;
    if (!ok) {
#pragma omp atomic write
      oom = true;
    }
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < ntasks; t++)
      if (ok) fn(&a, &w, t);
    th_free(w.Q), th_free(w.Kt), th_free(w.V), th_free(w.S), th_free(w.O), th_free(w.m), th_free(w.l);
  }
  if (oom) return th_error(TH_ERR_NOMEM, "%s: out of memory for the attention tiles", th_eg_name(b));
  return TH_OK;
}

th_status th_eg_sdpa_flash_backward_ref(th_rt_env *env, const th_bsym *b) {
  attn_args a;
  TH_TRY(bind_common(env, b, 1, 6, &a));
  th_tensor *g = th_eg_tensor_arg(env, b, 0), *o = g ? th_eg_tensor_arg(env, b, 4) : NULL,
            *lse = o ? th_eg_tensor_arg(env, b, 5) : NULL;
  if (!lse) return th_last_status();
  bind(&a.g, g, a.n);
  bind(&a.o, o, a.n);
  bind_lse(&a.lse, lse, a.n);
  th_tensor *dq = th_eg_alloc_out(env, b, 0), *dk = dq ? th_eg_alloc_out(env, b, 1) : NULL,
            *dv = dk ? th_eg_alloc_out(env, b, 2) : NULL;
  if (!dv) return th_last_status();
  bind(&a.dq, dq, a.n);
  bind(&a.dk, dk, a.n);
  bind(&a.dv, dv, a.n);
  /* the outputs are contiguous: strides of their own (bind zeroes size-1 dims' strides, harmless) */
  const int64_t ntasks = a.nbatch * a.hk;
  const bwd_fn fn = use_avx512() ? bwd_task_avx512 : bwd_task_base;
  const int nth = ntasks > 1 ? omp_get_max_threads() : 1;
  const int64_t E = a.E, Ev = a.Ev;
  bool oom = false;
#pragma omp parallel num_threads(nth)
  {
    bwd_buf w = {alloc_floats(BQ * E),  alloc_floats(BQ * Ev), alloc_floats(E * BK),      alloc_floats(BK * E),
                 alloc_floats(Ev * BK), alloc_floats(BQ * BK), alloc_floats(BK * BQ),     alloc_floats(BQ * BK),
                 alloc_floats(BK * BQ), alloc_floats(BQ * E),  alloc_floats(a.S * E + 1), alloc_floats(a.S * Ev + 1),
                 alloc_floats(BQ),      alloc_floats(BQ)};
    bool ok =
      w.Q && w.dO && w.Kt && w.K && w.Vt && w.S && w.P_t && w.dS && w.dS_t && w.dQ && w.dK && w.dV && w.D && w.lse;
    if (!ok) {
#pragma omp atomic write
      oom = true;
    }
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < ntasks; t++)
      if (ok) fn(&a, &w, t);
    float *all[] = {w.Q, w.dO, w.Kt, w.K, w.Vt, w.S, w.P_t, w.dS, w.dS_t, w.dQ, w.dK, w.dV, w.D, w.lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) th_free(all[i]);
  }
  if (oom) return th_error(TH_ERR_NOMEM, "%s: out of memory for the attention tiles", th_eg_name(b));
  return TH_OK;
}
