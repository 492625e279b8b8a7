/* reduction.c — reference kernels of the reduction prims: sum, prod, amax, amin, var, var_mean,
 * argmax, argmin.
 *
 * The input's dims split into kept dims (the output's, in order) and reduced dims. Each output element
 * reduces the sub-tensor at its offset: the reduced dims form one strided loop (th_eg_iter, coalesced,
 * walked in row-major order so argmax/argmin can count flat positions) whose rows feed an
 * accumulator. Outputs are independent, so large work runs them on OpenMP threads; when there are
 * fewer outputs than threads (a full reduction) each output's range is cut into chunks reduced in
 * parallel and merged in chunk order (ties in argmax/argmin keep the earlier chunk). When the reduced
 * dims lie outside the innermost kept dim (sum over the batch of [B, C]), up to 64 neighbouring
 * outputs advance together so every reduced position reads adjacent memory.
 *
 * Fast paths of float sum, amax, amin, var and var_mean, tried first: the row path (one contiguous run
 * per output: 32 lanes, no per-output loop setup) and the column path (the kept dims one contiguous
 * block at every reduced position, up to TH_RED_COL_MAX outputs: each thread a contiguous range of
 * reduced positions folded into its own accumulator row, merged in thread order); see their comments.
 *
 * Accumulation: floats (any width) in float64, bool/integers in int64 with wrap-around, so f16/bf16/f32
 * sums are at least as accurate as PyTorch's float cascade. var/var_mean: each row's mean and sum of
 * squared deviations in two passes (Welford where the float64 sum or squares would overflow; the
 * column path: Welford per column), merged across rows, chunks and threads with Chan et al.'s formula; the
 * result divides by max(0, N - correction) (0/0 = NaN, x/0 = inf, as PyTorch). NaN propagates through
 * amax/amin, and argmax/argmin return the first NaN. amax/amin/argmax/argmin of an empty reduction
 * are errors, as in PyTorch; sum of nothing is 0, prod 1, var_mean NaN. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "executors/eager/eager_internal.h"

typedef enum red_kind { RED_SUM, RED_PROD, RED_MAX, RED_MIN, RED_VAR, RED_ARGMAX, RED_ARGMIN } red_kind;

/* What one output element (or a chunk of its reduction) has accumulated. */
typedef struct red_acc {
  double f;    /* float sum / product / extreme; var: mean */
  double m2;   /* var: sum of squared deviations from the mean */
  int64_t i;   /* exact sum / product / extreme */
  int64_t n;   /* elements seen */
  int64_t pos; /* flat index (within the reduction) of the next element */
  int64_t arg; /* argmax/argmin: flat index of the extreme */
  bool nan;    /* a NaN has been seen (extremes) */
} red_acc;

typedef struct red_job {
  red_kind kind;
  th_dtype dt;    /* input dtype */
  bool exact;     /* bool/integer input: sum, prod, extremes in int64 */
  th_eg_iter rit; /* the reduced dims (one operand; base set per output) */
  int64_t nred;   /* elements per reduction */
  int nkept;
  int64_t kshape[TH_MAX_DIMS], kbs[TH_MAX_DIMS]; /* kept dims and their input byte strides */
  char *data;                                    /* input element [0, ..., 0] */
} red_job;

typedef struct red_row_ctx {
  const red_job *job;
  red_acc acc;
} red_row_ctx;

static void acc_init(const red_job *j, red_acc *a, int64_t pos) {
  memset(a, 0, sizeof *a);
  a->pos = pos;
  a->arg = pos;
  if (j->kind == RED_PROD) {
    a->f = 1.0;
    a->i = 1;
  }
}

/* ---- rows ----------------------------------------------------------------------------------------- */

/* Sum of a float row in float64. The contiguous f32/bf16/f64 rows add into TH_RED_LANES lanes (32:
 * eight 4-double vectors, so the adds of neighbouring elements do not wait on each other; with 8 lanes
 * a row sum runs at the latency of two vector adds per 8 elements), folded in a fixed order, then the
 * tail. */
#define TH_RED_LANES 32
/* halving steps, lane l with lane l + w, each with a constant width (a variable one leaves gcc a scalar
 * loop with branches) */
#define TH_RED_FOLD_STEP(W, STMT) _Pragma("omp simd") for (int l = 0; l < (W); l++) STMT
#define TH_RED_FOLD(STMT_OF)                                                                                           \
  do {                                                                                                                 \
    TH_RED_FOLD_STEP(16, STMT_OF(16));                                                                                 \
    TH_RED_FOLD_STEP(8, STMT_OF(8));                                                                                   \
    TH_RED_FOLD_STEP(4, STMT_OF(4));                                                                                   \
    TH_RED_FOLD_STEP(2, STMT_OF(2));                                                                                   \
    TH_RED_FOLD_STEP(1, STMT_OF(1));                                                                                   \
  } while (0)
#define TH_RED_ADD_STEP(w) lane[l] += lane[l + (w)]
_Static_assert(TH_RED_LANES == 32, "TH_RED_FOLD folds 32 lanes");

static double fold_lanes(double *lane) {
  TH_RED_FOLD(TH_RED_ADD_STEP);
  return lane[0];
}

/* The lanes start as the first TH_RED_LANES elements (no zeroing: a memset of the lanes cost 15% of a
 * 256-element row); s starts at +0, so an all -0 row still sums to +0 as a zero-started sum does. */
#define TH_RED_ROW(T, LOAD)                                                                                            \
  do {                                                                                                                 \
    const T *x = (const T *)(const void *)p;                                                                           \
    if (n >= TH_RED_LANES) {                                                                                           \
      _Pragma("omp simd") for (int l = 0; l < TH_RED_LANES; l++) lane[l] = (double)LOAD(x[l]);                         \
      for (i = TH_RED_LANES; i + TH_RED_LANES <= n; i += TH_RED_LANES)                                                 \
        _Pragma("omp simd") for (int l = 0; l < TH_RED_LANES; l++) lane[l] += (double)LOAD(x[i + l]);                  \
      s = fold_lanes(lane);                                                                                            \
    }                                                                                                                  \
    for (; i < n; i++) s += (double)LOAD(x[i]);                                                                        \
  } while (0)
#define TH_RED_ID(v) (v)

static double sum_row_f(const char *p, int64_t bs, int64_t n, th_dtype dt) {
  double lane[TH_RED_LANES], s = 0;
  int64_t i = 0;
  if (dt == TH_F32 && bs == 4 && th_eg_aligned(p, 4))
    TH_RED_ROW(float, TH_RED_ID);
  else if (dt == TH_BF16 && bs == 2 && th_eg_aligned(p, 2))
    TH_RED_ROW(uint16_t, th_sc_bf16_to_f32);
  else if (dt == TH_F64 && bs == 8 && th_eg_aligned(p, 8))
    TH_RED_ROW(double, TH_RED_ID);
  else
    for (; i < n; i++) s += th_load_f64(p + i * bs, dt);
  return s + 0.0;
}

/* Sum of squared deviations from `mean` of n elements at p (var's second pass over a row in cache). */
#define TH_RED_M2(T, LOAD)                                                                                             \
  do {                                                                                                                 \
    const T *x = (const T *)(const void *)p;                                                                           \
    for (int l = 0; l < TH_RED_LANES; l++) lane[l] = 0;                                                                \
    for (; i + TH_RED_LANES <= n; i += TH_RED_LANES) _Pragma("omp simd") for (int l = 0; l < TH_RED_LANES; l++) {      \
        double d = (double)LOAD(x[i + l]) - mean;                                                                      \
        lane[l] += d * d;                                                                                              \
      }                                                                                                                \
    s = fold_lanes(lane);                                                                                              \
    for (; i < n; i++) {                                                                                               \
      double d = (double)LOAD(x[i]) - mean;                                                                            \
      s += d * d;                                                                                                      \
    }                                                                                                                  \
  } while (0)

/* var of one run: the mean from the float64 sum and the squared deviations in a second pass; when the
 * sum or the squares overflow (float64 inputs near the top of the range: [1e306] * 100 sums to 1e308,
 * whose rounded mean differs from 1e306 by ~1e290, and that squared is inf, where PyTorch's Welford
 * gives 0), Welford's running mean and sum of squares instead (an infinite or NaN element still gives
 * NaN, as PyTorch). */
static double m2_row_f(const char *p, int64_t bs, int64_t n, th_dtype dt, double mean);
static void var_row_f(const char *p, int64_t bs, int64_t n, th_dtype dt, double *mean, double *m2) {
  *mean = sum_row_f(p, bs, n, dt) / (double)n;
  if (isfinite(*mean)) {
    *m2 = m2_row_f(p, bs, n, dt, *mean);
    if (isfinite(*m2)) return;
  }
  double mu = 0, q = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = th_load_f64(p + i * bs, dt), d = x - mu;
    mu += d / (double)(i + 1);
    q += d * (x - mu);
  }
  *mean = mu, *m2 = q;
}

static double m2_row_f(const char *p, int64_t bs, int64_t n, th_dtype dt, double mean) {
  double lane[TH_RED_LANES], s = 0;
  int64_t i = 0;
  if (dt == TH_F32 && bs == 4 && th_eg_aligned(p, 4))
    TH_RED_M2(float, TH_RED_ID);
  else if (dt == TH_BF16 && bs == 2 && th_eg_aligned(p, 2))
    TH_RED_M2(uint16_t, th_sc_bf16_to_f32);
  else if (dt == TH_F64 && bs == 8 && th_eg_aligned(p, 8))
    TH_RED_M2(double, TH_RED_ID);
  else
    for (; i < n; i++) {
      double d = th_load_f64(p + i * bs, dt) - mean;
      s += d * d;
    }
  return s;
}

/* p[0]: the row of the input. */
static void red_row(void *vctx, char *const *pp, const int64_t *bsp, int64_t n) {
  red_row_ctx *c = vctx;
  const red_job *j = c->job;
  red_acc *a = &c->acc;
  const char *p = pp[0];
  int64_t bs = bsp[0];
  th_dtype dt = j->dt;
  switch (j->kind) {
    case RED_SUM:
      if (j->exact) {
        uint64_t s = (uint64_t)a->i;
        for (int64_t i = 0; i < n; i++) s += (uint64_t)th_load_i64(p + i * bs, dt);
        a->i = (int64_t)s;
      } else {
        a->f += sum_row_f(p, bs, n, dt);
      }
      break;
    case RED_PROD:
      if (j->exact) {
        uint64_t s = (uint64_t)a->i;
        for (int64_t i = 0; i < n; i++) s *= (uint64_t)th_load_i64(p + i * bs, dt);
        a->i = (int64_t)s;
      } else {
        for (int64_t i = 0; i < n; i++) a->f *= th_load_f64(p + i * bs, dt);
      }
      break;
    case RED_MAX:
    case RED_MIN: {
      bool mx = j->kind == RED_MAX;
      if (j->exact) {
        for (int64_t i = 0; i < n; i++) {
          int64_t x = th_load_i64(p + i * bs, dt);
          if (a->n == 0 && i == 0)
            a->i = x;
          else if (mx ? x > a->i : x < a->i)
            a->i = x;
        }
      } else if (!a->nan) {
        for (int64_t i = 0; i < n; i++) {
          double x = th_load_f64(p + i * bs, dt);
          if (x != x) { /* NaN propagates */
            a->f = x;
            a->nan = true;
            break;
          }
          if (a->n == 0 && i == 0)
            a->f = x;
          else if (mx ? x > a->f : x < a->f)
            a->f = x;
        }
      }
      a->n += n;
      break;
    }
    case RED_ARGMAX:
    case RED_ARGMIN: {
      bool mx = j->kind == RED_ARGMAX;
      for (int64_t i = 0; i < n && !a->nan; i++) {
        bool first = a->n == 0 && i == 0;
        if (j->exact) {
          int64_t x = th_load_i64(p + i * bs, dt);
          if (first || (mx ? x > a->i : x < a->i)) {
            a->i = x;
            a->arg = a->pos + i;
          }
        } else {
          double x = th_load_f64(p + i * bs, dt);
          if (x != x) { /* the first NaN is the answer */
            a->f = x;
            a->nan = true;
            a->arg = a->pos + i;
          } else if (first || (mx ? x > a->f : x < a->f)) {
            a->f = x;
            a->arg = a->pos + i;
          }
        }
      }
      a->n += n;
      break;
    }
    case RED_VAR: {
      /* this row's mean and squared deviations (two passes), merged into the running ones */
      double mean, m2;
      var_row_f(p, bs, n, dt, &mean, &m2);
      if (a->n == 0) {
        a->f = mean;
        a->m2 = m2;
      } else {
        double na = (double)a->n, nb = (double)n, nt = na + nb, delta = mean - a->f;
        a->f += delta * nb / nt;
        a->m2 += m2 + delta * delta * na * nb / nt;
      }
      a->n += n;
      break;
    }
  }
  a->pos += n;
}

/* Merges chunk b (which follows chunk a) into a. */
static void acc_merge(const red_job *j, red_acc *a, const red_acc *b) {
  if (b->n == 0 && j->kind != RED_SUM && j->kind != RED_PROD) return;
  switch (j->kind) {
    case RED_SUM:
      a->f += b->f;
      a->i = (int64_t)((uint64_t)a->i + (uint64_t)b->i);
      break;
    case RED_PROD:
      a->f *= b->f;
      a->i = (int64_t)((uint64_t)a->i * (uint64_t)b->i);
      break;
    case RED_MAX:
    case RED_MIN: {
      bool mx = j->kind == RED_MAX;
      if (a->n == 0 || b->nan) {
        a->f = b->f, a->i = b->i, a->nan = b->nan;
      } else if (!a->nan) {
        if (j->exact ? (mx ? b->i > a->i : b->i < a->i) : (mx ? b->f > a->f : b->f < a->f)) a->f = b->f, a->i = b->i;
      }
      break;
    }
    case RED_ARGMAX:
    case RED_ARGMIN: {
      bool mx = j->kind == RED_ARGMAX;
      bool better;
      if (a->n == 0)
        better = true;
      else if (a->nan)
        better = false;
      else if (b->nan)
        better = true;
      else
        better = j->exact ? (mx ? b->i > a->i : b->i < a->i) : (mx ? b->f > a->f : b->f < a->f);
      if (better) a->f = b->f, a->i = b->i, a->nan = b->nan, a->arg = b->arg;
      break;
    }
    case RED_VAR:
      if (a->n == 0) {
        a->f = b->f, a->m2 = b->m2;
      } else {
        double na = (double)a->n, nb = (double)b->n, nt = na + nb, delta = b->f - a->f;
        a->f += delta * nb / nt;
        a->m2 += b->m2 + delta * delta * na * nb / nt;
      }
      break;
  }
  a->n += b->n;
}

/* Writes the result of one output element: out0 (and out1, the mean of var_mean). */
static void acc_finish(const red_job *j, const red_acc *a, th_tensor *out0, th_tensor *out1, int64_t o,
                       double correction) {
  char *p0 = th_eg_data(out0) + o * (int64_t)th_dtype_size(out0->dtype);
  switch (j->kind) {
    case RED_SUM:
    case RED_PROD:
    case RED_MAX:
    case RED_MIN:
      if (j->exact)
        th_store_i64(p0, out0->dtype, a->i);
      else
        th_store_f64(p0, out0->dtype, a->f);
      break;
    case RED_ARGMAX:
    case RED_ARGMIN: th_store_i64(p0, out0->dtype, a->arg); break;
    case RED_VAR: {
      double dof = (double)a->n - correction;
      double var = a->n == 0 ? NAN : a->m2 / (dof > 0 ? dof : 0.0);
      th_store_f64(p0, out0->dtype, var);
      if (out1)
        th_store_f64(th_eg_data(out1) + o * (int64_t)th_dtype_size(out1->dtype), out1->dtype, a->n == 0 ? NAN : a->f);
      break;
    }
  }
}

/* The input address where output o's reduction starts: o's multi-index over the kept dims. */
static char *kept_base(const red_job *j, int64_t o) {
  char *base = j->data;
  int64_t rest = o;
  for (int d = j->nkept - 1; d >= 0; d--) {
    base += (rest % j->kshape[d]) * j->kbs[d];
    rest /= j->kshape[d];
  }
  return base;
}

/* Reduces elements [begin, end) of output o's reduction into a. */
static void reduce_part(const red_job *j, int64_t o, int64_t begin, int64_t end, red_acc *a) {
  char *base = kept_base(j, o);
  red_row_ctx c;
  c.job = j;
  acc_init(j, &c.acc, begin);
  th_eg_iter_range_from(&j->rit, &base, begin, end, red_row, &c);
  *a = c.acc;
}

/* ---- groups of neighbouring outputs -------------------------------------------------------------------
 * When the reduced dims are outer to the innermost kept dim (sum over the batch of [B, C]), one
 * output's elements are far apart; instead RED_G neighbouring outputs advance together, each reduced
 * position reading RED_G adjacent elements. Each output still sees its elements in row-major order, so
 * the results are those of the per-output loop. */
#define RED_G 64

typedef struct red_group_ctx {
  const red_job *j;
  int64_t g;         /* outputs in this group */
  int64_t ks;        /* byte stride between neighbouring outputs' elements */
  red_row_ctx *accs; /* g accumulators */
  double *fsum;      /* float sums (sum of a float dtype), else NULL */
} red_group_ctx;

static void red_group_row(void *vctx, char *const *pp, const int64_t *bsp, int64_t n) {
  red_group_ctx *c = vctx;
  static const int64_t one[1] = {0};
  for (int64_t e = 0; e < n; e++) {
    char *p = pp[0] + e * bsp[0];
    if (c->fsum && c->j->dt == TH_F32 && c->ks == 4 && th_eg_aligned(p, 4)) {
      /* the common case, vectorized: float32 elements side by side */
      const float *x = (const float *)(const void *)p;
      double *restrict f = c->fsum;
      _Pragma("omp simd") for (int64_t g = 0; g < c->g; g++) f[g] += (double)x[g];
    } else if (c->fsum && c->j->dt == TH_BF16 && c->ks == 2 && th_eg_aligned(p, 2)) {
      /* bfloat16 side by side (bias gradients under autocast): widened by a shift, vectorized */
      const uint16_t *x = (const uint16_t *)(const void *)p;
      double *restrict f = c->fsum;
      _Pragma("omp simd") for (int64_t g = 0; g < c->g; g++) f[g] += (double)th_sc_bf16_to_f32(x[g]);
    } else if (c->fsum) {
      for (int64_t g = 0; g < c->g; g++) c->fsum[g] += th_load_f64(p + g * c->ks, c->j->dt);
    } else {
      for (int64_t g = 0; g < c->g; g++) {
        char *q = p + g * c->ks;
        red_row(&c->accs[g], &q, one, 1);
      }
    }
  }
}

/* Reduces outputs [o, o + g) (neighbours along the innermost kept dim) and writes them. g <= RED_G, or
 * any g for a float sum given wide_fsum (g zeroed doubles of the caller's). */
static void reduce_group(const red_job *j, int64_t o, int64_t g, th_tensor *out0, th_tensor *out1, double correction,
                         double *wide_fsum) {
  red_row_ctx accs[RED_G];
  double fsum[RED_G];
  red_group_ctx c = {j, g, j->kbs[j->nkept - 1], accs, NULL};
  if (wide_fsum) {
    c.fsum = wide_fsum;
  } else if (j->kind == RED_SUM && !j->exact) {
    c.fsum = fsum;
    for (int64_t k = 0; k < g; k++) fsum[k] = 0;
  }
  if (!wide_fsum)
    for (int64_t k = 0; k < g; k++) {
      accs[k].job = j;
      acc_init(j, &accs[k].acc, 0);
    }
  char *base = kept_base(j, o);
  th_eg_iter_range_from(&j->rit, &base, 0, j->nred, red_group_row, &c);
  for (int64_t k = 0; k < g; k++) {
    red_acc a;
    if (wide_fsum)
      acc_init(j, &a, 0);
    else
      a = accs[k].acc;
    if (c.fsum) a.f = c.fsum[k];
    acc_finish(j, &a, out0, out1, o + k, correction);
  }
}

/* ---- row extremes ------------------------------------------------------------------------------------
 * amax/amin of one contiguous float run: TH_RED_LANES lanes, each keeping its extreme, a NaN taking the
 * lane over (x > m || x != x); folded in a fixed order. Extremes are exact, so only which of two equal
 * zeros wins can depend on the order (PyTorch's vectorized kernels do not fix it either). */
#define TH_RED_EXT_FOLD(W, OP)                                                                                         \
  _Pragma("omp simd") for (int l = 0; l < (W); l++) m[l] =                                                             \
    m[l + (W)] OP m[l] || m[l + (W)] != m[l + (W)] ? m[l + (W)] : m[l]
#define TH_RED_EXT(T, LOAD, CT, OP)                                                                                    \
  do {                                                                                                                 \
    const T *x = (const T *)(const void *)p;                                                                           \
    CT m[TH_RED_LANES];                                                                                                \
    for (int l = 0; l < TH_RED_LANES; l++) m[l] = (CT)(0 OP 1 ? INFINITY : -INFINITY);                                 \
    for (; i + TH_RED_LANES <= n; i += TH_RED_LANES) _Pragma("omp simd") for (int l = 0; l < TH_RED_LANES; l++) {      \
        CT v = (CT)LOAD(x[i + l]);                                                                                     \
        m[l] = v OP m[l] || v != v ? v : m[l];                                                                         \
      }                                                                                                                \
    for (; i < n; i++) {                                                                                               \
      CT v = (CT)LOAD(x[i]);                                                                                           \
      m[0] = v OP m[0] || v != v ? v : m[0];                                                                           \
    }                                                                                                                  \
    TH_RED_EXT_FOLD(16, OP);                                                                                           \
    TH_RED_EXT_FOLD(8, OP);                                                                                            \
    TH_RED_EXT_FOLD(4, OP);                                                                                            \
    TH_RED_EXT_FOLD(2, OP);                                                                                            \
    TH_RED_EXT_FOLD(1, OP);                                                                                            \
    r = m[0];                                                                                                          \
  } while (0)

/* The extreme of n >= 1 elements of a float dtype at p, bs bytes apart (NaN if any is NaN). */
static double extreme_row_f(const char *p, int64_t bs, int64_t n, th_dtype dt, bool mx) {
  double r;
  int64_t i = 0;
  if (dt == TH_F32 && bs == 4 && th_eg_aligned(p, 4)) {
    if (mx)
      TH_RED_EXT(float, TH_RED_ID, float, >);
    else
      TH_RED_EXT(float, TH_RED_ID, float, <);
  } else if (dt == TH_BF16 && bs == 2 && th_eg_aligned(p, 2)) {
    if (mx)
      TH_RED_EXT(uint16_t, th_sc_bf16_to_f32, float, >);
    else
      TH_RED_EXT(uint16_t, th_sc_bf16_to_f32, float, <);
  } else if (dt == TH_F64 && bs == 8 && th_eg_aligned(p, 8)) {
    if (mx)
      TH_RED_EXT(double, TH_RED_ID, double, >);
    else
      TH_RED_EXT(double, TH_RED_ID, double, <);
  } else {
    r = mx ? -INFINITY : INFINITY;
    for (; i < n; i++) {
      double v = th_load_f64(p + i * bs, dt);
      if (v != v) return v;
      if (mx ? v > r : v < r) r = v;
    }
  }
  return r;
}

/* ---- column reductions ----------------------------------------------------------------------------------
 * A float sum, amax, amin or var whose kept dims form one contiguous block at each reduced position
 * (x.sum(0) of [R, C]: row r's C elements; bias gradients): the reduced positions are split into one
 * contiguous range per thread, and each thread folds whole blocks into its own accumulator rows
 * (TH_RED_COL_MAX outputs at most), so every thread streams through its own contiguous part of the
 * input. (The grouped path below reads C/threads elements of every row: 512-byte pieces for C = 256,
 * which the hardware prefetcher does not follow.) The threads' rows are merged in thread order.
 *   sum:  float64 accumulators; four blocks are added together before they meet the accumulator (a
 *         quarter of the accumulators' loads and stores);
 *   amax/amin: the extreme in the element type's compute class (float for f32/bf16, double for f64),
 *         a NaN taking the column over;
 *   var:  Welford per column in float64 (mean += d / k, m2 += d (x - mean)), merged across threads with
 *         Chan et al.'s formula, as the other paths merge chunks. */
#define TH_RED_COL_MAX 8192 /* outputs: 64 KiB of float64 accumulators per thread and row */

static bool kept_contiguous(const red_job *j, int64_t es) {
  int64_t want = es;
  for (int d = j->nkept - 1; d >= 0; d--) {
    if (j->kshape[d] == 1) continue;
    if (j->kbs[d] != want) return false;
    want *= j->kshape[d];
  }
  return true;
}

typedef struct colred_ctx {
  red_kind kind;
  th_dtype dt;
  int64_t nout;
  double *a, *m2; /* nout each: sum / extreme / mean, and var's squared deviations */
  float *af;      /* amax/amin of f32/bf16: the extremes in float (a and m2 unused) */
  int64_t seen;   /* var: blocks folded so far */
} colred_ctx;

/* One block of m elements at q into the accumulators; LDK(k) loads element k as a double. */
#define TH_COL_BLOCK(LDK)                                                                                              \
  do {                                                                                                                 \
    if (c->kind == RED_SUM) {                                                                                          \
      _Pragma("omp simd") for (int64_t k = 0; k < m; k++) a[k] += LDK(k);                                              \
    } else if (c->kind == RED_VAR) {                                                                                   \
      double rk = 1.0 / (double)(c->seen + 1);                                                                         \
      _Pragma("omp simd") for (int64_t k = 0; k < m; k++) {                                                            \
        double v = LDK(k), d = v - a[k];                                                                               \
        a[k] += d * rk;                                                                                                \
        m2[k] += d * (v - a[k]);                                                                                       \
      }                                                                                                                \
      c->seen++;                                                                                                       \
    } else if (c->kind == RED_MAX) {                                                                                   \
      _Pragma("omp simd") for (int64_t k = 0; k < m; k++) {                                                            \
        double v = LDK(k);                                                                                             \
        a[k] = v > a[k] || v != v ? v : a[k];                                                                          \
      }                                                                                                                \
    } else {                                                                                                           \
      _Pragma("omp simd") for (int64_t k = 0; k < m; k++) {                                                            \
        double v = LDK(k);                                                                                             \
        a[k] = v < a[k] || v != v ? v : a[k];                                                                          \
      }                                                                                                                \
    }                                                                                                                  \
  } while (0)
#define TH_LD_F32(k) ((double)((const float *)(const void *)q)[k])
#define TH_LD_BF16(k) ((double)th_sc_bf16_to_f32(((const uint16_t *)(const void *)q)[k]))
#define TH_LD_F64(k) (((const double *)(const void *)q)[k])
#define TH_LD_ANY(k) th_load_f64(q + (k) * (int64_t)es, c->dt)

/* Four blocks summed together first (f32 and bf16 sums, the common gradient case). */
#define TH_COL_SUM4(T, LOAD)                                                                                           \
  do {                                                                                                                 \
    const T *x0 = (const T *)(const void *)q, *x1 = (const T *)(const void *)(q + st),                                 \
            *x2 = (const T *)(const void *)(q + 2 * st), *x3 = (const T *)(const void *)(q + 3 * st);                  \
    _Pragma("omp simd") for (int64_t k = 0; k < m; k++) a[k] +=                                                        \
      ((double)LOAD(x0[k]) + (double)LOAD(x1[k])) + ((double)LOAD(x2[k]) + (double)LOAD(x3[k]));                       \
  } while (0)

/* amax/amin of f32/bf16 blocks into float extremes: LDF(k) loads element k as a float. */
#define TH_COL_EXTF(LDF, OP)                                                                                           \
  _Pragma("omp simd") for (int64_t k = 0; k < m; k++) {                                                                \
    float v = LDF(k);                                                                                                  \
    af[k] = v OP af[k] || v != v ? v : af[k];                                                                          \
  }
#define TH_LDF_F32(k) (((const float *)(const void *)q)[k])
#define TH_LDF_BF16(k) th_sc_bf16_to_f32(((const uint16_t *)(const void *)q)[k])

static void colred_row(void *vctx, char *const *pp, const int64_t *bsp, int64_t n) {
  colred_ctx *c = vctx;
  double *restrict a = c->a, *restrict m2 = c->m2;
  float *restrict af = c->af;
  int64_t m = c->nout, st = bsp[0];
  size_t es = th_dtype_size(c->dt);
  int64_t e = 0;
  if (af) {
    for (; e < n; e++) {
      const char *q = pp[0] + e * st;
      if (!th_eg_aligned(q, es)) break;
      if (c->dt == TH_F32) {
        if (c->kind == RED_MAX) TH_COL_EXTF(TH_LDF_F32, >) else TH_COL_EXTF(TH_LDF_F32, <)
      } else {
        if (c->kind == RED_MAX) TH_COL_EXTF(TH_LDF_BF16, >) else TH_COL_EXTF(TH_LDF_BF16, <)
      }
    }
    for (; e < n; e++) /* unaligned blocks: element by element */
      for (int64_t k = 0; k < m; k++) {
        float v = (float)th_load_f64(pp[0] + e * st + k * (int64_t)es, c->dt);
        af[k] = (c->kind == RED_MAX ? v > af[k] : v < af[k]) || v != v ? v : af[k];
      }
    return;
  }
  if (c->kind == RED_SUM && th_eg_aligned(pp[0], es) && st % (int64_t)es == 0) {
    for (; e + 4 <= n; e += 4) {
      const char *q = pp[0] + e * st;
      if (c->dt == TH_F32)
        TH_COL_SUM4(float, TH_RED_ID);
      else if (c->dt == TH_BF16)
        TH_COL_SUM4(uint16_t, th_sc_bf16_to_f32);
      else
        break;
    }
  }
  for (; e < n; e++) {
    const char *q = pp[0] + e * st;
    bool al = th_eg_aligned(q, es);
    if (c->dt == TH_F32 && al)
      TH_COL_BLOCK(TH_LD_F32);
    else if (c->dt == TH_BF16 && al)
      TH_COL_BLOCK(TH_LD_BF16);
    else if (c->dt == TH_F64 && al)
      TH_COL_BLOCK(TH_LD_F64);
    else
      TH_COL_BLOCK(TH_LD_ANY);
  }
}

static th_status column_reduce(const th_bsym *b, const red_job *j, int64_t nout, bool par, double correction,
                               th_tensor *out0, th_tensor *out1) {
  int nt = par ? omp_get_max_threads() : 1;
  if (nt > j->nred) nt = (int)j->nred;
  bool var = j->kind == RED_VAR;
  double init = j->kind == RED_MAX ? -INFINITY : j->kind == RED_MIN ? INFINITY : 0.0;
  size_t per = (size_t)nout * (var ? 2 : 1);
  double *buf = th_malloc((size_t)nt * per * sizeof *buf);
  int64_t *seen = th_calloc((size_t)nt, sizeof *seen);
  if (!buf || !seen) {
    th_free(buf);
    th_free(seen);
    return th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  }
  /* f32/bf16 extremes in float (half the work of converting every element); buf is reused for them */
  bool fext = (j->kind == RED_MAX || j->kind == RED_MIN) && (j->dt == TH_F32 || j->dt == TH_BF16);
  float *fbuf = fext ? (float *)(void *)buf : NULL;
  for (size_t k = 0; k < (size_t)nt * per; k++) {
    if (fext)
      fbuf[k] = (float)init;
    else
      buf[k] = var && k % per >= (size_t)nout ? 0.0 : init;
  }
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    int t = omp_get_thread_num(), tn = omp_get_num_threads();
    int64_t begin = j->nred * t / tn, end = j->nred * (t + 1) / tn;
    colred_ctx c = {j->kind,
                    j->dt,
                    nout,
                    buf + (size_t)t * per,
                    var ? buf + (size_t)t * per + nout : NULL,
                    fext ? fbuf + (size_t)t * per : NULL,
                    0};
    char *base = j->data;
    if (end > begin) th_eg_iter_range_from(&j->rit, &base, begin, end, colred_row, &c);
    seen[t] = c.seen;
  }
  if (fext) /* widen in place, back to front (a float row t*per.. lies at or below its double row) */
    for (size_t k = (size_t)nt * per; k-- > 0;) buf[k] = (double)fbuf[k];
  /* each output: the threads' rows merged in thread order, stored through acc_finish */
  for (int64_t k = 0; k < nout; k++) {
    red_acc a;
    acc_init(j, &a, 0);
    for (int t = 0; t < nt; t++) {
      const double *row = buf + (size_t)t * per;
      red_acc part;
      acc_init(j, &part, 0);
      part.f = row[k];
      part.n = var ? seen[t] : j->nred; /* n only weighs var's merge; extremes and sums ignore it */
      if (var) part.m2 = row[nout + k];
      if (j->kind == RED_MAX || j->kind == RED_MIN) part.nan = row[k] != row[k];
      if (t == 0)
        a = part;
      else
        acc_merge(j, &a, &part);
    }
    acc_finish(j, &a, out0, out1, k, correction);
  }
  th_free(buf);
  th_free(seen);
  return TH_OK;
}

/* The common driver: reduces t over the dims in `mask` into out0 (and out1). */
static th_status run_reduction(const th_bsym *b, red_kind kind, th_tensor *t, const bool *mask, double correction,
                               th_tensor *out0, th_tensor *out1) {
  /* Step 1: split the input's dims into kept (outer, the output's order) and reduced ones. */
  red_job j;
  memset(&j, 0, sizeof j);
  j.kind = kind;
  j.dt = t->dtype;
  j.exact = !th_dtype_is_float(t->dtype);
  j.data = th_eg_data(t);
  int64_t bs[TH_MAX_DIMS], rshape[TH_MAX_DIMS], rbs[1][TH_MAX_DIMS];
  th_eg_tensor_bstrides(t, bs);
  int nred_dims = 0;
  int64_t nout = 1;
  j.nred = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (mask[d]) {
      rshape[nred_dims] = t->shape[d];
      rbs[0][nred_dims++] = bs[d];
      j.nred *= t->shape[d];
    } else {
      j.kshape[j.nkept] = t->shape[d];
      j.kbs[j.nkept++] = bs[d];
      nout *= t->shape[d];
    }
  }
  if (nout != th_tensor_numel(out0))
    return th_error(TH_ERR_RUNTIME, "%s: the output has %lld elements, but the reduction gives %lld", th_eg_name(b),
                    (long long)th_tensor_numel(out0), (long long)nout);
  if (nout == 0) return TH_OK;
  /* Step 2: extremes of nothing are errors, as in PyTorch. */
  if (j.nred == 0 && kind != RED_SUM && kind != RED_PROD && kind != RED_VAR)
    return th_error(TH_ERR_INDEX,
                    "%s: Expected reduction dim to have non-zero size (cannot reduce an "
                    "empty tensor to its %s)",
                    th_eg_name(b), kind == RED_MAX || kind == RED_ARGMAX ? "maximum" : "minimum");
  char *base0 = j.data;
  th_eg_iter_init(&j.rit, 1, nred_dims, rshape, &base0, (const int64_t(*)[TH_MAX_DIMS])rbs);
  /* Step 3: how to split: one task per output, or chunks of each reduction when outputs are fewer
   * than the threads and each reduction is large. */
  int nthreads = omp_get_max_threads();
  int64_t nchunks = 1;
  if (nout < nthreads && j.nred > TH_EG_PAR_MIN) {
    nchunks = (int64_t)nthreads * 4 / nout;
    if (nchunks > j.nred / (TH_EG_PAR_MIN / 4)) nchunks = j.nred / (TH_EG_PAR_MIN / 4);
    if (nchunks < 1) nchunks = 1;
  }
  bool par = nout * j.nred > TH_EG_PAR_MIN && nthreads > 1;
  bool fast_kind = kind == RED_SUM || kind == RED_MAX || kind == RED_MIN || kind == RED_VAR;
  if (fast_kind && !j.exact && nchunks == 1 && j.nred > 1) {
    int64_t es = (int64_t)th_dtype_size(j.dt);
    /* Step 4-row: one contiguous run per output (x.sum(-1)): each run reduced directly, without the
     * strided loop's per-output setup (which dominates short rows);
     * var in two passes over the run (mean, then squared deviations). */
    if (j.rit.ndim == 1 && j.rit.bs[0][0] == es) {
      int64_t n = j.nred, kbs0 = j.nkept == 1 ? j.kbs[0] : 0;
#pragma omp parallel for schedule(static) if (par)
      for (int64_t o = 0; o < nout; o++) {
        red_acc a;
        acc_init(&j, &a, 0);
        const char *p = j.nkept == 1 ? j.data + o * kbs0 : kept_base(&j, o);
        if (kind == RED_SUM) {
          a.f = sum_row_f(p, es, n, j.dt);
        } else if (kind == RED_VAR) {
          var_row_f(p, es, n, j.dt, &a.f, &a.m2);
          a.n = n;
        } else {
          a.f = extreme_row_f(p, es, n, j.dt, kind == RED_MAX);
        }
        acc_finish(&j, &a, out0, out1, o, correction);
      }
      return TH_OK;
    }
    /* Step 4-col: the kept dims one contiguous block at every reduced position (a column reduction,
     * x.sum(0), bias gradients). */
    if (nout <= TH_RED_COL_MAX && kept_contiguous(&j, es))
      return column_reduce(b, &j, nout, par, correction, out0, out1);
  }
  /* Step 4a: reduced dims outside the innermost kept one: groups of neighbouring outputs. */
  int64_t min_rbs = INT64_MAX;
  for (int d = 0; d < nred_dims; d++)
    if (rshape[d] > 1 && llabs(rbs[0][d]) < min_rbs) min_rbs = llabs(rbs[0][d]);
  if (nchunks == 1 && j.nkept > 0 && j.nred > 1 && j.kshape[j.nkept - 1] > 1 && j.kbs[j.nkept - 1] < min_rbs) {
    int64_t inner = j.kshape[j.nkept - 1], width = RED_G;
    double *wide = NULL;
    if (kind == RED_SUM && !j.exact && inner > RED_G) {
      /* float sums: groups as wide as the threads allow (up to 4096 outputs), so that each reduced
       * position reads one long contiguous run (bias gradients: a column sum of [2048, 3072] reads
       * 6 KiB per row and thread instead of 256-byte pieces 12 KiB apart, which the hardware prefetcher
       * does not follow across pages); one double per output, allocated here */
      int64_t w = (inner + nthreads - 1) / nthreads;
      w = (w + RED_G - 1) / RED_G * RED_G;
      width = w > 4096 ? 4096 : w;
      if (!(wide = th_calloc((size_t)nout, sizeof *wide)))
        return th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
    }
    int64_t per = (inner + width - 1) / width, ntasks = nout / inner * per;
#pragma omp parallel for schedule(static) if (par)
    for (int64_t task = 0; task < ntasks; task++) {
      int64_t g0 = (task % per) * width, o = task / per * inner + g0;
      reduce_group(&j, o, inner - g0 < width ? inner - g0 : width, out0, out1, correction, wide ? wide + o : NULL);
    }
    th_free(wide);
    return TH_OK;
  }
  if (nchunks == 1) {
    /* Step 4b: outputs in parallel, each reduced whole. */
#pragma omp parallel for schedule(static) if (par)
    for (int64_t o = 0; o < nout; o++) {
      red_acc a;
      reduce_part(&j, o, 0, j.nred, &a);
      acc_finish(&j, &a, out0, out1, o, correction);
    }
    return TH_OK;
  }
  /* Step 4c: chunks in parallel, merged in order. */
  red_acc *parts = th_malloc(sizeof *parts * (size_t)(nout * nchunks));
  if (!parts) return th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  int64_t q = j.nred / nchunks, r = j.nred % nchunks;
#pragma omp parallel for schedule(static) if (par)
  for (int64_t task = 0; task < nout * nchunks; task++) {
    int64_t o = task / nchunks, c = task % nchunks;
    int64_t begin = c * q + (c < r ? c : r), end = begin + q + (c < r ? 1 : 0);
    reduce_part(&j, o, begin, end, &parts[task]);
  }
  for (int64_t o = 0; o < nout; o++) {
    red_acc *a = &parts[o * nchunks];
    for (int64_t c = 1; c < nchunks; c++) acc_merge(&j, a, &parts[o * nchunks + c]);
    acc_finish(&j, a, out0, out1, o, correction);
  }
  th_free(parts);
  return TH_OK;
}

/* Marks the dims in list dims[n] (negative ones wrap) in mask; errors name the op. */
static th_status mark_dims(const th_bsym *b, int ndim, const int64_t *dims, int n, bool *mask) {
  for (int d = 0; d < TH_MAX_DIMS; d++) mask[d] = false;
  for (int k = 0; k < n; k++) {
    int64_t d = dims[k];
    int64_t lim = ndim > 0 ? ndim : 1;
    if (d < -lim || d >= lim)
      return th_error(TH_ERR_INDEX,
                      "%s: Dimension out of range (expected to be in range of [%lld, %lld], "
                      "but got %lld)",
                      th_eg_name(b), (long long)-lim, (long long)(lim - 1), (long long)d);
    if (d < 0) d += lim;
    if (ndim > 0) mask[d] = true;
  }
  return TH_OK;
}

th_status th_eg_reduce_ref(th_rt_env *env, const th_bsym *b) {
  red_kind kind;
  switch (b->sym->id) {
    case TH_OP_prims_sum: kind = RED_SUM; break;
    case TH_OP_prims_prod: kind = RED_PROD; break;
    case TH_OP_prims_amax: kind = RED_MAX; break;
    case TH_OP_prims_amin: kind = RED_MIN; break;
    case TH_OP_prims_var:
    case TH_OP_prims_var_mean: kind = RED_VAR; break;
    default: return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: not a reduction prim", th_eg_name(b));
  }
  /* Step 1: the input, the reduced dims and (var) the correction. */
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  int64_t dims[TH_MAX_DIMS];
  int ndims = 0;
  TH_TRY(th_eg_int_list_arg(env, b, 1, dims, TH_MAX_DIMS, &ndims));
  bool mask[TH_MAX_DIMS];
  TH_TRY(mark_dims(b, t->ndim, dims, ndims, mask));
  double correction = 0;
  if (kind == RED_VAR) TH_TRY(th_eg_float_arg(env, b, 2, &correction));
  /* Step 2: the outputs (var_mean: var, then mean) and the reduction. */
  th_tensor *out0 = th_eg_alloc_out(env, b, 0);
  if (!out0) return th_last_status();
  th_tensor *out1 = NULL;
  if (b->sym->id == TH_OP_prims_var_mean && !(out1 = th_eg_alloc_out(env, b, 1))) return th_last_status();
  return run_reduction(b, kind, t, mask, correction, out0, out1);
}

th_status th_eg_argminmax_ref(th_rt_env *env, const th_bsym *b) {
  red_kind kind = b->sym->id == TH_OP_prims_argmax ? RED_ARGMAX : RED_ARGMIN;
  /* Step 1: the input and the dim (None: the flattened tensor). */
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  bool mask[TH_MAX_DIMS];
  if (b->nargs < 2 || b->args[1].kind == TH_ARG_NONE) {
    for (int d = 0; d < TH_MAX_DIMS; d++) mask[d] = d < t->ndim;
  } else {
    int64_t dim;
    TH_TRY(th_eg_int_arg(env, b, 1, &dim));
    TH_TRY(mark_dims(b, t->ndim, &dim, 1, mask));
  }
  /* Step 2: the int64 output of flat indices. */
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  return run_reduction(b, kind, t, mask, 0.0, out, NULL);
}
