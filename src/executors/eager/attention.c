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
#define _DEFAULT_SOURCE /* syscall(2): arch_prctl's tile-data permission request */
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
  /* a bool mask that every batch and head shares (one L x S plane): per query row i, keys [0, full[i])
   * are all attended and none at or after end[i] is; NULL otherwise */
  const int64_t *mask_full, *mask_end;
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

/* The first key of row i that the mask may hide (keys before it are all attended). */
AT_INLINE int64_t mask_from(const attn_args *a, int64_t i) { return a->mask_full ? a->mask_full[i] : 0; }

/* S[r][c] (the bq x bk tile at query rows i0.., keys j0..; rows lds floats apart) scaled and masked. */
AT_INLINE void scale_mask(const attn_args *a, float *S, int64_t lds, int64_t bq, int64_t bk, int64_t i0, int64_t j0,
                          int64_t moff) {
  const float scale = a->scale;
  for (int64_t r = 0; r < bq; r++) {
    float *s = S + r * lds;
#pragma omp simd
    for (int64_t c = 0; c < bk; c++) s[c] *= scale;
    if (a->has_mask) {
      const int64_t base = moff + (i0 + r) * a->mask.st[a->n - 2] + j0 * a->mask.st[a->n - 1],
                    cs = a->mask.st[a->n - 1];
      if (a->mask_bool) {
        const bool *m = (const bool *)a->mask.p + base;
        const int64_t c0 = mask_from(a, i0 + r) - j0;
        for (int64_t c = c0 > 0 ? c0 : 0; c < bk; c++)
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
  int64_t e = a->S;
  if (a->causal) e = i0 + bq < a->S ? i0 + bq : a->S;
  if (a->mask_end) { /* a shared bool mask: no key past the block's last attended one */
    int64_t m = 0;
    for (int64_t r = i0; r < i0 + bq; r++) m = a->mask_end[r] > m ? a->mask_end[r] : m;
    e = m < e ? m : e;
  }
  return e;
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
    scale_mask(a, w->S, BK, bq, bk, i0, j0, mo);
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
    /* l == 0: the row attends to nothing (0); a NaN l (a NaN or infinite score) gives NaN, as softmax */
    const float l = w->l[r], inv = l != 0.0f ? 1.0f / l : 0.0f;
    const float *o = w->O + r * Ev;
    char *dst = (char *)a->o.p;
    const int64_t base = oo + (i0 + r) * a->o.st[n - 2];
    for (int64_t c = 0; c < Ev; c++) st(dst, a->o.dt, base + c * a->o.st[n - 1], l != 0.0f ? o[c] * inv : 0.0f);
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

/* o[off + (r0 + r) rows + c cols] = src[r * nc + c] for r < nr, c < nc, rounded to o's dtype. */
static void store_rows(const attn_args *a, const opnd *o, int64_t off, int64_t r0, int64_t nr, int64_t nc,
                       const float *src) {
  const int64_t rs = o->st[a->n - 2], cs = o->st[a->n - 1];
  for (int64_t r = 0; r < nr; r++)
    for (int64_t c = 0; c < nc; c++) st((char *)o->p, o->dt, off + (r0 + r) * rs + c * cs, src[r * nc + c]);
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
        scale_mask(a, w->S, BK, bq, bk, i0, j0, mo);
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
      store_rows(a, &a->dq, head_off(a, &a->dq, bi, h), i0, bq, E, w->dQ);
    }
  }
  store_rows(a, &a->dk, head_off(a, &a->dk, bi, hk), 0, S, E, w->dK);
  store_rows(a, &a->dv, head_off(a, &a->dv, bi, hk), 0, S, Ev, w->dV);
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

/* ---- AMX bfloat16 forward --------------------------------------------------------------------------------
 * On a CPU with AMX-BF16 (and AVX512_BF16), bf16 q, k and v with head dims E % 32 == 0 and Ev % 16 == 0 (at
 * most 256) take a forward whose two products run on the tile unit: S = Q K^T and O += P V are TDPBF16PS
 * (bf16 pairs multiplied exactly, summed in float32). Every tile is 16 rows x 64 bytes: an A operand is 16
 * rows of 32 bf16, a B operand 16 rows of 16 bf16 pairs (row kp holds elements 2kp and 2kp + 1 of the
 * reduction dim for 16 columns), an accumulator 16 x 16 float32.
 *   Packing (once per call, per key/value head): K becomes B tiles of 16 keys x 32 head-dim values
 *   (tile (kt, ec), row kp, column n: the pair K[16 kt + n][32 ec + 2kp .. + 1]); V becomes B tiles of 32
 *   keys x 16 value dims (tile (kc, et), row kp, column e: V[32 kc + 2kp][16 et + e] and the next key's).
 *   Keys are padded with zeros to a multiple of 32.
 *   Tasks: (batch, query head, block of ABQ = 32 query rows); the block, zero-padded, is copied into a bf16
 *   buffer. For each block of ABK = 64 keys (causal: up to the diagonal) S is computed in 32 x 32 quarters
 *   (four accumulators, two Q and two K tiles), scaled and masked in float32 as the AVX-512 path does, and
 *   the online softmax (float32, the fuser's expf) writes P rounded to bf16 (as PyTorch's CPU flash
 *   attention rounds it for its bf16 product with V); O (float32, in memory) is rescaled by exp(m - m')
 *   and accumulated tile by tile. Columns of P past the block's last key are zero, and so are the rows of
 *   a V chunk past it, so a key outside the causal window contributes nothing whatever its value.
 * The backward (below) runs on the tile unit too when Ev % 32 == 0 as well. */
#if TH_ATTN_X86
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TH_ATTN_AMX 1
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define ABQ 32
#define ABK 256
#define AMX_EMAX 256

typedef struct {
  uint32_t *kp, *vp;          /* packed K and V of every key/value head */
  int64_t spad, kstride, vstride; /* keys padded to 32; u32 per head in kp and vp */
} amx_pack;

typedef struct {
  uint16_t *Q, *P;
  float *S, *O, *m, *l;
  uint32_t *vt; /* a V chunk whose keys past the block's end are zeroed */
} amx_buf;

/* The 64-byte tile configuration: palette 1, tiles 0-7 of 16 rows x 64 bytes. A static object, so that the
 * compiler keeps every byte LDTILECFG reads. */
static const unsigned char amx_cfg[64] __attribute__((aligned(64))) = {
  [0] = 1,
  [16] = 64, [18] = 64, [20] = 64, [22] = 64, [24] = 64, [26] = 64, [28] = 64, [30] = 64,
  [48] = 16, [49] = 16, [50] = 16, [51] = 16, [52] = 16, [53] = 16, [54] = 16, [55] = 16,
};

AMX_TARGET static void amx_config(void) { _tile_loadconfig(amx_cfg); }

AMX_TARGET static void amx_release(void) { _tile_release(); }

AT_INLINE uint16_t ld_u16(const opnd *o, int64_t i) { return ((const uint16_t *)o->p)[i]; }

/* B tiles whose reduction dim is x's inner dim (S = Q K^T: K; dP = dO V^T: V): x is nrows x D bf16 at
 * o + off (row stride rs, column stride cs); tile (rt, ec) of 16 rows x 32 columns, at dst + (rt (D / 32)
 * + ec) 256, holds in its row kq and column n the pair x[16 rt + n][32 ec + 2 kq .. + 1]. Rows from
 * nrows up to npad (a multiple of 32) are zero. */
AMX_TARGET static void pack_b_inner(uint32_t *dst, const opnd *o, int64_t off, int64_t rs, int64_t cs,
                                    int64_t nrows, int64_t npad, int64_t D) {
  const int64_t nec = D / 32;
  for (int64_t rt = 0; rt < npad / 16; rt++)
    for (int64_t ec = 0; ec < nec; ec++) {
      uint32_t *t = dst + (rt * nec + ec) * 256;
      for (int n_ = 0; n_ < 16; n_++) {
        const int64_t row = rt * 16 + n_;
        if (row >= nrows) {
          for (int kq = 0; kq < 16; kq++) t[kq * 16 + n_] = 0;
          continue;
        }
        const int64_t base = off + row * rs + (ec * 32) * cs;
        if (cs == 1) {
          const uint32_t *src = (const uint32_t *)(const void *)((const uint16_t *)o->p + base);
          uint32_t tmp[16];
          memcpy(tmp, src, sizeof tmp); /* the row's 16 pairs, whatever its alignment */
          for (int kq = 0; kq < 16; kq++) t[kq * 16 + n_] = tmp[kq];
        } else
          for (int kq = 0; kq < 16; kq++)
            t[kq * 16 + n_] = (uint32_t)ld_u16(o, base + 2 * kq * cs) | (uint32_t)ld_u16(o, base + (2 * kq + 1) * cs) << 16;
      }
    }
}

/* B tiles whose reduction dim is x's rows (O += P V: V; dV += P^T dO: dO; dQ += dS K: K; dK += dS^T Q:
 * Q): tile (rc, et) of 32 rows x 16 columns, at dst + (rc (D / 16) + et) 256, holds in its row kq and
 * column e the pair x[32 rc + 2 kq][16 et + e], x[32 rc + 2 kq + 1][16 et + e]. Rows from nrows up to
 * npad (a multiple of 32) are zero. */
AMX_TARGET static void pack_b_rows(uint32_t *dst, const opnd *o, int64_t off, int64_t rs, int64_t cs, int64_t nrows,
                                   int64_t npad, int64_t D) {
  const int64_t net = D / 16;
  for (int64_t rc = 0; rc < npad / 32; rc++)
    for (int64_t et = 0; et < net; et++) {
      uint32_t *t = dst + (rc * net + et) * 256;
      for (int kq = 0; kq < 16; kq++) {
        const int64_t k0 = rc * 32 + 2 * kq, k1 = k0 + 1;
        uint32_t *row = t + kq * 16;
        const int64_t b0 = off + k0 * rs + et * 16 * cs, b1 = off + k1 * rs + et * 16 * cs;
        if (k1 < nrows && cs == 1) {
          const uint16_t *r0 = (const uint16_t *)o->p + b0, *r1 = (const uint16_t *)o->p + b1;
#pragma omp simd
          for (int e = 0; e < 16; e++) row[e] = (uint32_t)r0[e] | (uint32_t)r1[e] << 16;
        } else
          for (int e = 0; e < 16; e++)
            row[e] = (k0 < nrows ? (uint32_t)ld_u16(o, b0 + e * cs) : 0) |
                     (k1 < nrows ? (uint32_t)ld_u16(o, b1 + e * cs) << 16 : 0);
      }
    }
}

/* dst (npad rows of nc bf16) = rows r0 .. r0 + nr of the bf16 operand o at off (row stride rs, column
 * stride cs); rows from nr on are zero. */
static void load_rows_bf16(uint16_t *dst, const opnd *o, int64_t off, int64_t rs, int64_t cs, int64_t r0, int64_t nr,
                           int64_t npad, int64_t nc) {
  for (int64_t r = 0; r < npad; r++) {
    uint16_t *d = dst + r * nc;
    if (r >= nr)
      memset(d, 0, sizeof(uint16_t) * (size_t)nc);
    else if (cs == 1)
      memcpy(d, (const uint16_t *)o->p + off + (r0 + r) * rs, sizeof(uint16_t) * (size_t)nc);
    else
      for (int64_t c = 0; c < nc; c++) d[c] = ld_u16(o, off + (r0 + r) * rs + c * cs);
  }
}

/* Packs key/value head g = (bi, hk) of a: K as S = Q K^T's B tiles, V as O += P V's. */
AMX_TARGET static void amx_pack_head(const attn_args *a, const amx_pack *pk, int64_t g) {
  const int64_t n = a->n, bi = g / a->hk, hk = g % a->hk;
  pack_b_inner(pk->kp + g * pk->kstride, &a->k, head_off(a, &a->k, bi, hk), a->k.st[n - 2], a->k.st[n - 1], a->S,
               pk->spad, a->E);
  pack_b_rows(pk->vp + g * pk->vstride, &a->v, head_off(a, &a->v, bi, hk), a->v.st[n - 2], a->v.st[n - 1], a->S,
              pk->spad, a->Ev);
}

/* Splits n float32 values x (n a multiple of 16) into two bf16 values each, hi = bf16(x) and
 * lo = bf16(x - hi) (round to nearest even), so that hi + lo carries x to about 2^-16 relative and a
 * product with it costs two tile products. */
AMX_TARGET static void amx_split_row(uint16_t *hi, uint16_t *lo, const float *src, int64_t n) {
  for (int64_t c = 0; c < n; c += 16) {
    const __m512 x = _mm512_loadu_ps(src + c);
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
    const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    _mm256_storeu_si256((__m256i *)(hi + c), h);
    _mm256_storeu_si256((__m256i *)(lo + c), (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, hf)));
  }
}

/* The online-softmax step of one row of a score block, in whole vectors: s[c] for keys j0 + c, c < ce (the
 * keys the row attends to in the block), is scaled and masked, s[ce .. cv) (cv: ce rounded up to 16) is
 * -inf, and s becomes exp(s - m') with m' the row's new maximum (returned in *mx) and its sum in *sum. */
AMX_TARGET static void amx_softmax_row(const attn_args *a, float *s, int64_t ce, int64_t i, int64_t j0, int64_t moff,
                                       float *mx, float *sum) {
  const int64_t cv = (ce + 15) & ~(int64_t)15;
  const __m512 vscale = _mm512_set1_ps(a->scale), ninf = _mm512_set1_ps(-INFINITY);
  __m512 vmx = _mm512_set1_ps(*mx);
  for (int64_t c = 0; c < cv; c += 16) {
    __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + c), vscale);
    if (c + 16 > ce) /* lanes past the row's keys: -inf after the scale, whatever its sign */
      x = _mm512_mask_mov_ps(ninf, (__mmask16)((1u << (ce - c)) - 1u), x);
    _mm512_storeu_ps(s + c, x);
    if (!a->has_mask) vmx = _mm512_max_ps(vmx, x);
  }
  if (a->has_mask) {
    const int64_t base = moff + i * a->mask.st[a->n - 2] + j0 * a->mask.st[a->n - 1], cs = a->mask.st[a->n - 1];
    if (a->mask_bool) {
      const bool *m = (const bool *)a->mask.p + base;
      const int64_t c0 = mask_from(a, i) - j0;
      for (int64_t c = c0 > 0 ? c0 : 0; c < ce; c++)
        if (!m[c * cs]) s[c] = -INFINITY;
    } else
      for (int64_t c = 0; c < ce; c++) s[c] += ld(a->mask.p, a->mask.dt, base + c * cs);
    for (int64_t c = 0; c < cv; c += 16) vmx = _mm512_max_ps(vmx, _mm512_loadu_ps(s + c));
  }
  const float m = _mm512_reduce_max_ps(vmx), mu = m == -INFINITY ? 0.0f : m; /* nothing attended yet: P = 0 */
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t c = 0; c < cv; c += 16) {
    float *x = s + c;
#pragma omp simd
    for (int k = 0; k < 16; k++) x[k] = th_m_expf(x[k] - mu);
    vsum = _mm512_add_ps(vsum, _mm512_loadu_ps(x));
  }
  *mx = m;
  *sum = _mm512_reduce_add_ps(vsum);
}

/* dst[c * cs] = bf16(src[c] * inv) for c < n: whole vectors through VCVTNEPS2BF16 where they hold no NaN
 * and no subnormal (where it and th_sc_f32_to_bf16 agree), the rest one by one. */
AMX_TARGET static void amx_store_row(uint16_t *dst, int64_t cs, const float *src, float inv, int64_t n) {
  int64_t c = 0;
  if (cs == 1) {
    const __m512 vinv = _mm512_set1_ps(inv), tiny = _mm512_set1_ps(0x1p-126f);
    for (; c + 16 <= n; c += 16) {
      const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(src + c), vinv), ax = _mm512_abs_ps(x);
      const __mmask16 odd = _mm512_cmp_ps_mask(ax, ax, _CMP_UNORD_Q) |
                            (_mm512_cmp_ps_mask(ax, tiny, _CMP_LT_OQ) & _mm512_cmp_ps_mask(ax, _mm512_setzero_ps(), _CMP_NEQ_OQ));
      if (odd) break;
      _mm256_storeu_si256((__m256i *)(dst + c), (__m256i)_mm512_cvtneps_pbh(x));
    }
  }
  for (; c < n; c++) dst[c * cs] = th_sc_f32_to_bf16(src[c] * inv);
}

/* C (+)= sum over nch 32-key chunks of A_ch B_ch, for one 32-row block: C is 32 x (16 nct) float32 at c
 * (row stride ldc floats), kept in tiles across the chunks; A_ch is 32 rows of 32 bf16 at A + 32 ch (row
 * stride lda elements) as two parts, the high one there and the low one alo elements further; B_ch is
 * nct tiles of 16 key pairs x 16 columns at b + ch bstride (tile et at + 256 et), the last chunk's at
 * blast. */
AMX_TARGET static void amx_acc_split(float *c, int64_t ldc, const uint16_t *A, int64_t lda, int64_t alo,
                                     const uint32_t *b, int64_t bstride, const uint32_t *blast, int64_t nch,
                                     int64_t nct) {
  for (int64_t et = 0; et < nct; et += 2) {
    const bool two = et + 1 < nct;
    float *c0 = c + et * 16, *c1 = c + 16 * ldc + et * 16;
    _tile_loadd(0, c0, ldc * 4);
    _tile_loadd(2, c1, ldc * 4);
    if (two) {
      _tile_loadd(1, c0 + 16, ldc * 4);
      _tile_loadd(3, c1 + 16, ldc * 4);
    }
    for (int64_t ch = 0; ch < nch; ch++) {
      const uint32_t *bc = ch == nch - 1 ? blast : b + ch * bstride;
      _tile_loadd(6, bc + et * 256, 64);
      if (two) _tile_loadd(7, bc + (et + 1) * 256, 64);
      for (int part = 0; part < 2; part++) { /* the high parts, then the low parts */
        const uint16_t *ap = A + part * alo + ch * 32;
        _tile_loadd(4, ap, lda * 2);
        _tile_loadd(5, ap + 16 * lda, lda * 2);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(2, 5, 6);
        if (two) {
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
    }
    _tile_stored(0, c0, ldc * 4);
    _tile_stored(2, c1, ldc * 4);
    if (two) {
      _tile_stored(1, c0 + 16, ldc * 4);
      _tile_stored(3, c1 + 16, ldc * 4);
    }
  }
}

/* out (32 x 32 float32, row stride ldo floats) = A B: A 32 rows of bf16 at a (row stride lda elements)
 * over nec chunks of 32, B the tile pair (kt, kt + 1) of a pack_b_inner layout with nec chunks. */
AMX_TARGET static void amx_scores(float *out, int64_t ldo, const uint16_t *a, int64_t lda, const uint32_t *b,
                                  int64_t kt, int64_t nec) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t ec = 0; ec < nec; ec++) {
    _tile_loadd(4, a + ec * 32, lda * 2);
    _tile_loadd(5, a + 16 * lda + ec * 32, lda * 2);
    _tile_loadd(6, b + (kt * nec + ec) * 256, 64);
    _tile_loadd(7, b + ((kt + 1) * nec + ec) * 256, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, ldo * 4);
  _tile_stored(1, out + 16, ldo * 4);
  _tile_stored(2, out + 16 * ldo, ldo * 4);
  _tile_stored(3, out + 16 * ldo + 16, ldo * 4);
}

AMX_TARGET static void amx_fwd_task(const attn_args *a, const amx_pack *pk, amx_buf *w, int64_t t) {
  const int64_t nqb = (a->L + ABQ - 1) / ABQ, E = a->E, Ev = a->Ev, n = a->n, nec = E / 32, net = Ev / 16;
  const int64_t qb = t % nqb, bh = t / nqb, h = bh % a->hq, bi = bh / a->hq, hk = h / (a->hq / a->hk);
  const int64_t i0 = qb * ABQ, bq = a->L - i0 < ABQ ? a->L - i0 : ABQ;
  const int64_t qo = head_off(a, &a->q, bi, h), mo = a->has_mask ? head_off(a, &a->mask, bi, h) : 0;
  const int64_t qrs = a->q.st[n - 2], qcs = a->q.st[n - 1];
  const uint32_t *kp = pk->kp + (bi * a->hk + hk) * pk->kstride, *vp = pk->vp + (bi * a->hk + hk) * pk->vstride;
  load_rows_bf16(w->Q, &a->q, qo, qrs, qcs, i0, bq, ABQ, E);
  for (int64_t r = 0; r < ABQ; r++) {
    w->m[r] = -INFINITY;
    w->l[r] = 0.0f;
  }
  memset(w->O, 0, sizeof(float) * (size_t)(ABQ * Ev));
  memset(w->P, 0, sizeof(uint16_t) * 2 * ABQ * ABK);
  /* Scores of masked keys are -inf and their exponentials would pass through subnormals (slow on x86):
   * they are flushed while the block is in flight. P is bf16, which the tile unit reads with subnormals as
   * zero, so no value that matters changes; the stores at the end run with the caller's MXCSR. */
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040); /* FTZ | DAZ */
  const int64_t kend = key_end(a, i0, bq);
  for (int64_t j0 = 0; j0 < kend; j0 += ABK) {
    const int64_t bk = kend - j0 < ABK ? kend - j0 : ABK, nch = (bk + 31) / 32;
    /* S = Q K^T, 32 keys (two K tiles) at a time */
    for (int64_t ch = 0; ch < nch; ch++) amx_scores(w->S + ch * 32, ABK, w->Q, E, kp, (j0 + ch * 32) / 16, nec);
    /* the online softmax, row by row over the keys each row attends to */
    bool rescale = false;
    for (int64_t r = 0; r < bq; r++) {
      int64_t ce = bk;
      if (a->causal) {
        ce = i0 + r - j0 + 1;
        ce = ce < 0 ? 0 : ce > bk ? bk : ce;
      }
      float *s = w->S + r * ABK, mx = w->m[r], sum;
      const float alpha_from = w->m[r];
      amx_softmax_row(a, s, ce, i0 + r, j0, mo, &mx, &sum);
      const float alpha = th_m_expf(alpha_from - (mx == -INFINITY ? 0.0f : mx));
      uint16_t *p = w->P + r * ABK, *plo = p + ABQ * ABK;
      const int64_t cv = (ce + 15) & ~(int64_t)15;
      amx_split_row(p, plo, s, cv);
      for (int64_t c = cv; c < nch * 32; c++) p[c] = plo[c] = 0;
      w->l[r] = w->l[r] * alpha + sum;
      w->m[r] = mx;
      s[0] = alpha; /* the row's rescale factor, read below (its scores are in P now) */
      rescale |= alpha != 1.0f;
    }
    if (rescale)
      for (int64_t r = 0; r < bq; r++) {
        const float alpha = w->S[r * ABK];
        float *o = w->O + r * Ev;
#pragma omp simd
        for (int64_t c = 0; c < Ev; c++) o[c] *= alpha;
      }
    /* O += P V: two 16-column tiles of O (four accumulators) at a time, over the block's 32-key chunks */
    const uint32_t *vb = vp + (j0 / 32) * net * 256, *vlast = vb + (nch - 1) * net * 256;
    const int64_t valid = bk - (nch - 1) * 32;
    if (valid < 32) { /* the last chunk's keys past the block's end: zero rows, whatever V holds there */
      memcpy(w->vt, vlast, sizeof(uint32_t) * 256 * (size_t)net);
      for (int64_t x = 0; x < 256 * net; x++) {
        const int kq = (int)(x % 256) / 16;
        if (2 * kq >= valid)
          w->vt[x] = 0;
        else if (2 * kq + 1 >= valid)
          w->vt[x] &= 0xffffu;
      }
      vlast = w->vt;
    }
    amx_acc_split(w->O, Ev, w->P, ABK, ABQ * ABK, vb, net * 256, vlast, nch, net);
  }
  _mm_setcsr(csr);
  const int64_t oo = head_off(a, &a->o, bi, h), lo = head_off(a, &a->lse, bi, h);
  for (int64_t r = 0; r < bq; r++) {
    const float l = w->l[r], inv = l != 0.0f ? 1.0f / l : 0.0f; /* a NaN l gives NaN, as softmax */
    const float *o = w->O + r * Ev;
    uint16_t *dst = (uint16_t *)a->o.p + oo + (i0 + r) * a->o.st[n - 2];
    if (l != 0.0f)
      amx_store_row(dst, a->o.st[n - 1], o, inv, Ev);
    else /* a row that attends to nothing: 0, whatever the products of its zero weights gave */
      for (int64_t c = 0; c < Ev; c++) dst[c * a->o.st[n - 1]] = 0;
    ((float *)a->lse.p)[lo + (i0 + r) * a->lse.st[n - 2]] = l > 0.0f ? w->m[r] + logf(l) : (l == 0.0f ? -INFINITY : l);
  }
}

/* ---- AMX bfloat16 backward ------------------------------------------------------------------------------
 * The recomputation of the AVX-512 backward with every product on the tile unit, for bf16 q, k, v, o and
 * dO with E and Ev multiples of 32. One task per (batch, key/value head) packs K (as S's B tiles and as
 * dQ's), V (as dP's) and holds float32 dK and dV for the head; for each query head of its group and each
 * block of 32 query rows it packs Q and dO (as dK's and dV's B tiles) and walks the 32-key chunks up to
 * the block's last attended key: S = Q K^T (the forward's tile products in the forward's order, so the
 * same bits), P = exp(S scale - logsumexp), dV += P^T dO, dP = dO V^T, dS = P (dP - D) scale,
 * dQ += dS K, dK += dS^T Q. P, P^T, dS and dS^T enter the products as bf16 high and low parts. */
typedef struct {
  uint32_t *kp, *kr, *vi;   /* K as S's B tiles, K as dQ's, V as dP's */
  uint32_t *qr, *gr, *oi;   /* the query block's Q as dK's B tiles, dO as dV's, O as dO O^T's */
  uint16_t *Q, *G;          /* the query block's Q and dO rows (A operands) */
  uint16_t *Pt, *dS, *dSt;  /* bf16 high parts, then low parts (2 x 32 x 32 each) */
  float *S, *dP, *dQ, *dK, *dV, *D, *lse;
} amx_bbuf;

/* hi/lo bf16 parts of a 32 x 32 float32 block x (row stride 32), transposed when `trans`. */
AMX_TARGET static void amx_split_block(uint16_t *dst, const float *x, bool trans) {
  float t[32 * 32];
  const float *src = x;
  if (trans) {
    for (int r = 0; r < 32; r++)
      for (int c = 0; c < 32; c++) t[c * 32 + r] = x[r * 32 + c];
    src = t;
  }
  amx_split_row(dst, dst + 32 * 32, src, 32 * 32);
}

AMX_TARGET static void amx_bwd_task(const attn_args *a, amx_bbuf *w, int64_t t, int64_t spad) {
  const int64_t E = a->E, Ev = a->Ev, n = a->n, S = a->S, grp = a->hq / a->hk, nec = E / 32, necv = Ev / 32;
  const int64_t hk = t % a->hk, bi = t / a->hk;
  const int64_t ko = head_off(a, &a->k, bi, hk), vo = head_off(a, &a->v, bi, hk);
  pack_b_inner(w->kp, &a->k, ko, a->k.st[n - 2], a->k.st[n - 1], S, spad, E);
  pack_b_rows(w->kr, &a->k, ko, a->k.st[n - 2], a->k.st[n - 1], S, spad, E);
  pack_b_inner(w->vi, &a->v, vo, a->v.st[n - 2], a->v.st[n - 1], S, spad, Ev);
  memset(w->dK, 0, sizeof(float) * (size_t)(spad * E));
  memset(w->dV, 0, sizeof(float) * (size_t)(spad * Ev));
  const opnd qbuf = {(const char *)w->Q, TH_BF16, {0}}, gbuf = {(const char *)w->G, TH_BF16, {0}};
  for (int64_t h = hk * grp; h < (hk + 1) * grp; h++) {
    const int64_t qo = head_off(a, &a->q, bi, h), go = head_off(a, &a->g, bi, h), oo = head_off(a, &a->o, bi, h);
    const int64_t lo = head_off(a, &a->lse, bi, h), mo = a->has_mask ? head_off(a, &a->mask, bi, h) : 0;
    for (int64_t i0 = 0; i0 < a->L; i0 += 32) {
      const int64_t bq = a->L - i0 < 32 ? a->L - i0 : 32;
      load_rows_bf16(w->Q, &a->q, qo, a->q.st[n - 2], a->q.st[n - 1], i0, bq, 32, E);
      load_rows_bf16(w->G, &a->g, go, a->g.st[n - 2], a->g.st[n - 1], i0, bq, 32, Ev);
      for (int64_t r = 0; r < 32; r++) {
        const float l = r < bq ? ((const float *)a->lse.p)[lo + (i0 + r) * a->lse.st[n - 2]] : -INFINITY;
        w->lse[r] = l == -INFINITY ? INFINITY : l; /* a row that attends to nothing (or padding): P = 0 */
      }
      /* D = rowsum(dO * O), as the diagonal of dO O^T: the tile unit's sums, so that where O is V's row
       * (one attended key) D and dP agree to the bit and dS is 0 */
      pack_b_inner(w->oi, &a->o, oo + i0 * a->o.st[n - 2], a->o.st[n - 2], a->o.st[n - 1], bq, 32, Ev);
      amx_scores(w->dP, 32, w->G, Ev, w->oi, 0, necv);
      for (int64_t r = 0; r < 32; r++) w->D[r] = r < bq ? w->dP[r * 32 + r] : 0.0f;
      pack_b_rows(w->qr, &qbuf, 0, E, 1, 32, 32, E);
      pack_b_rows(w->gr, &gbuf, 0, Ev, 1, 32, 32, Ev);
      memset(w->dQ, 0, sizeof(float) * (size_t)(32 * E));
      const int64_t kend = key_end(a, i0, bq);
      for (int64_t j0 = 0; j0 < kend; j0 += 32) {
        const int64_t bk = kend - j0 < 32 ? kend - j0 : 32;
        amx_scores(w->S, 32, w->Q, E, w->kp, j0 / 16, nec);
        amx_scores(w->dP, 32, w->G, Ev, w->vi, j0 / 16, necv);
        scale_mask(a, w->S, 32, bq, bk, i0, j0, mo);
        for (int64_t r = 0; r < 32; r++) {
          float *s = w->S + r * 32, *dp = w->dP + r * 32;
          const float l = w->lse[r], d = w->D[r], scale = a->scale;
          const int64_t ce = r < bq ? bk : 0;
#pragma omp simd
          for (int64_t c = 0; c < 32; c++) {
            const float p = th_m_expf(s[c] - l);
            s[c] = p;
            dp[c] = p * (dp[c] - d) * scale; /* dS */
          }
          for (int64_t c = ce; c < 32; c++) s[c] = dp[c] = 0.0f; /* keys past the block's end, padding rows */
        }
        amx_split_block(w->Pt, w->S, true);
        amx_split_block(w->dS, w->dP, false);
        amx_split_block(w->dSt, w->dP, true);
        amx_acc_split(w->dV + j0 * Ev, Ev, w->Pt, 32, 32 * 32, w->gr, 0, w->gr, 1, Ev / 16);
        const uint32_t *kc = w->kr + (j0 / 32) * (E / 16) * 256; /* K's chunk as dQ's B tiles */
        amx_acc_split(w->dQ, E, w->dS, 32, 32 * 32, kc, 0, kc, 1, E / 16);
        amx_acc_split(w->dK + j0 * E, E, w->dSt, 32, 32 * 32, w->qr, 0, w->qr, 1, E / 16);
      }
      store_rows(a, &a->dq, head_off(a, &a->dq, bi, h), i0, bq, E, w->dQ);
    }
  }
  store_rows(a, &a->dk, head_off(a, &a->dk, bi, hk), 0, S, E, w->dK);
  store_rows(a, &a->dv, head_off(a, &a->dv, bi, hk), 0, S, Ev, w->dV);
}

/* Whether the CPU has AMX-BF16 with AVX512_BF16 and the kernel lets this process use the tile data. */
static bool amx_available(void) {
  static int state; /* 0 unknown, 1 yes, -1 no */
  int s;
#pragma omp atomic read
  s = state;
  if (s) return s > 0;
  unsigned a, b, c, d, a1, b1, c1, d1;
  bool ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22)) && (d & (1u << 24)) &&
            __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5)) && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512dq");
  /* ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA: Linux hands out the tile state on request */
  if (ok) ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  s = ok ? 1 : -1;
#pragma omp atomic write
  state = s;
  return ok;
}
#else
#define TH_ATTN_AMX 0
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

/* For a bool mask shared by every batch and head, the per-row ranges of a->mask_full / mask_end, in
 * *buf (2 L values, freed by the caller); nothing when the mask is another kind. */
static th_status mask_ranges(const th_bsym *b, attn_args *a, int64_t **buf) {
  *buf = NULL;
  if (!a->has_mask || !a->mask_bool) return TH_OK;
  for (int d = 0; d < a->n - 2; d++)
    if (a->mask.st[d]) return TH_OK;
  int64_t *r = th_malloc(sizeof(int64_t) * 2 * (size_t)(a->L > 0 ? a->L : 1));
  if (!r) return th_error(TH_ERR_NOMEM, "%s: out of memory for the mask's row ranges", th_eg_name(b));
  const bool *m = (const bool *)a->mask.p;
  const int64_t rs = a->mask.st[a->n - 2], cs = a->mask.st[a->n - 1];
  for (int64_t i = 0; i < a->L; i++) {
    const bool *row = m + i * rs;
    int64_t full = 0, end = 0;
    while (full < a->S && row[full * cs]) full++;
    for (int64_t c = a->S; c > full; c--)
      if (row[(c - 1) * cs]) {
        end = c;
        break;
      }
    r[i] = full;
    r[a->L + i] = end > full ? end : full;
  }
  a->mask_full = r;
  a->mask_end = r + a->L;
  *buf = r;
  return TH_OK;
}

#if TH_ATTN_AMX
/* The AMX forward for bf16 q, k, v of head dims it tiles, unless $THUNDER_ATTN_ISA names "avx512" or "avx2". */
static bool use_amx(const attn_args *a) {
  const char *want = getenv("THUNDER_ATTN_ISA");
  if (want && (!strcmp(want, "avx2") || !strcmp(want, "avx512"))) return false;
  return a->q.dt == TH_BF16 && a->k.dt == TH_BF16 && a->v.dt == TH_BF16 && a->E % 32 == 0 && a->Ev % 16 == 0 &&
         a->E <= AMX_EMAX && a->Ev <= AMX_EMAX && a->S > 0 && amx_available();
}

static th_status amx_forward(const th_bsym *b, const attn_args *a) {
  amx_pack pk;
  pk.spad = (a->S + 31) / 32 * 32;
  pk.kstride = pk.spad * a->E / 2;
  pk.vstride = pk.spad * a->Ev / 2;
  const int64_t nkv = a->nbatch * a->hk, ntasks = a->nbatch * a->hq * ((a->L + ABQ - 1) / ABQ);
  pk.kp = th_malloc(sizeof(uint32_t) * (size_t)(nkv * (pk.kstride + pk.vstride)));
  if (!pk.kp) return th_error(TH_ERR_NOMEM, "%s: out of memory for the packed keys and values", th_eg_name(b));
  pk.vp = pk.kp + nkv * pk.kstride;
  const int nth = ntasks > 1 ? omp_get_max_threads() : 1;
  bool oom = false;
#pragma omp parallel num_threads(nth)
  {
#pragma omp for schedule(static)
    for (int64_t g = 0; g < nkv; g++) amx_pack_head(a, &pk, g);
    amx_buf w = {th_malloc(sizeof(uint16_t) * ABQ * (size_t)a->E),
                 th_malloc(sizeof(uint16_t) * 2 * ABQ * ABK),
                 alloc_floats(ABQ * ABK),
                 alloc_floats(ABQ * a->Ev),
                 alloc_floats(ABQ),
                 alloc_floats(ABQ),
                 th_malloc(sizeof(uint32_t) * 256 * (size_t)(a->Ev / 16))};
    bool ok = w.Q && w.P && w.S && w.O && w.m && w.l && w.vt;
    if (!ok) {
#pragma omp atomic write
      oom = true;
    }
    if (ok) amx_config();
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < ntasks; t++)
      if (ok) amx_fwd_task(a, &pk, &w, t);
    if (ok) amx_release();
    th_free(w.Q), th_free(w.P), th_free(w.S), th_free(w.O), th_free(w.m), th_free(w.l), th_free(w.vt);
  }
  th_free(pk.kp);
  if (oom) return th_error(TH_ERR_NOMEM, "%s: out of memory for the attention tiles", th_eg_name(b));
  return TH_OK;
}
#endif

#if TH_ATTN_AMX
static th_status amx_backward(const th_bsym *b, const attn_args *a) {
  const int64_t ntasks = a->nbatch * a->hk, spad = (a->S + 31) / 32 * 32, E = a->E, Ev = a->Ev;
  const int nth = ntasks > 1 ? omp_get_max_threads() : 1;
  bool oom = false;
#pragma omp parallel num_threads(nth)
  {
    amx_bbuf w = {th_malloc(sizeof(uint32_t) * (size_t)(spad * E / 2)),
                  th_malloc(sizeof(uint32_t) * (size_t)(spad * E / 2)),
                  th_malloc(sizeof(uint32_t) * (size_t)(spad * Ev / 2)),
                  th_malloc(sizeof(uint32_t) * (size_t)(16 * E)),
                  th_malloc(sizeof(uint32_t) * (size_t)(16 * Ev)),
                  th_malloc(sizeof(uint32_t) * (size_t)(16 * Ev)),
                  th_malloc(sizeof(uint16_t) * (size_t)(32 * E)),
                  th_malloc(sizeof(uint16_t) * (size_t)(32 * Ev)),
                  th_malloc(sizeof(uint16_t) * 2 * 32 * 32),
                  th_malloc(sizeof(uint16_t) * 2 * 32 * 32),
                  th_malloc(sizeof(uint16_t) * 2 * 32 * 32),
                  alloc_floats(32 * 32),
                  alloc_floats(32 * 32),
                  alloc_floats(32 * E),
                  alloc_floats(spad * E),
                  alloc_floats(spad * Ev),
                  alloc_floats(32),
                  alloc_floats(32)};
    void *all[] = {w.kp, w.kr, w.vi, w.qr, w.gr, w.oi, w.Q, w.G, w.Pt, w.dS, w.dSt, w.S, w.dP, w.dQ, w.dK, w.dV, w.D, w.lse};
    bool ok = true;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ok = ok && all[i];
    if (!ok) {
#pragma omp atomic write
      oom = true;
    }
    const unsigned csr = _mm_getcsr();
    if (ok) {
      amx_config();
      _mm_setcsr(csr | 0x8040); /* FTZ | DAZ: P of masked keys; every product is bf16's anyway */
    }
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < ntasks; t++)
      if (ok) amx_bwd_task(a, &w, t, spad);
    if (ok) {
      _mm_setcsr(csr);
      amx_release();
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) th_free(all[i]);
  }
  if (oom) return th_error(TH_ERR_NOMEM, "%s: out of memory for the attention tiles", th_eg_name(b));
  return TH_OK;
}
#endif

th_status th_eg_sdpa_flash_ref(th_rt_env *env, const th_bsym *b) {
  attn_args a;
  TH_TRY(bind_common(env, b, 0, 3, &a));
  th_tensor *out = th_eg_alloc_out(env, b, 0), *lse = out ? th_eg_alloc_out(env, b, 1) : NULL;
  if (!lse) return th_last_status();
  bind(&a.o, out, a.n);
  bind_lse(&a.lse, lse, a.n);
  if (a.L == 0) return TH_OK;
  int64_t *ranges;
  TH_TRY(mask_ranges(b, &a, &ranges));
#if TH_ATTN_AMX
  if (use_amx(&a)) {
    th_status ast = amx_forward(b, &a);
    th_free(ranges);
    return ast;
  }
#endif
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
  th_free(ranges);
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
  int64_t *ranges;
  TH_TRY(mask_ranges(b, &a, &ranges));
  const int64_t ntasks = a.nbatch * a.hk;
#if TH_ATTN_AMX
  if (use_amx(&a) && a.Ev % 32 == 0 && a.g.dt == TH_BF16 && a.o.dt == TH_BF16) {
    th_status ast = amx_backward(b, &a);
    th_free(ranges);
    return ast;
  }
#endif
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
  th_free(ranges);
  if (oom) return th_error(TH_ERR_NOMEM, "%s: out of memory for the attention tiles", th_eg_name(b));
  return TH_OK;
}
