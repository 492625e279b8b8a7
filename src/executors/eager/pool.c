/* pool.c — eager kernels of the pooling and resampling prims (ops/prims/pool.c): max_pool,
 * adaptive_max_pool, pool_scatter_add, pool_gather, avg_pool, avg_pool_backward, adaptive_avg_pool,
 * adaptive_avg_pool_backward, resample, resample_backward, im2col, col2im.
 *
 * Every kernel sees its input as P independent planes of up to three spatial dims (D, H, W; a 1-d or
 * 2-d op has D = H = 1 or D = 1, with a kernel, stride and dilation of 1 and no padding there), reads
 * a contiguous input (a strided one is copied first) and writes its contiguous output. The forward
 * kernels compute each output element from its window, in PyTorch's order (window rows outer,
 * elements inner; the first maximum wins, a NaN wins; an average is the float sum divided once), and
 * run output rows (plane, d, h) in parallel. The backward kernels scatter each plane's gradient into
 * its input plane, planes in parallel. float32 computes in float, float64 in double, int64 (the max
 * pools and avg_pool) in int64_t. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "executors/eager/eager_internal.h"
#include "ops/pool.h"
#include "runtime/runtime.h"

/* ---- shared ---------------------------------------------------------------------------------------------- */

typedef struct geo {
  int k;
  int64_t P;                                         /* planes */
  int64_t in[3], out[3], ks[3], st[3], pd[3], dl[3]; /* D, H, W */
} geo;

/* Reads int[] argument i (k entries, or one repeated) right-aligned into v[3]; the missing leading
 * dims get `fill`. */
static th_status ints3(th_rt_env *env, const th_bsym *b, int i, int k, int64_t fill, int64_t *v) {
  int64_t t[TH_MAX_DIMS];
  int n;
  TH_TRY(th_eg_int_list_arg(env, b, i, t, TH_MAX_DIMS, &n));
  if (n != k && n != 1)
    return th_error(TH_ERR_RUNTIME, "%s: expected %d values for argument %d, got %d", th_eg_name(b), k, i, n);
  for (int d = 0; d < 3; d++) v[d] = d < 3 - k ? fill : t[n == 1 ? 0 : d - (3 - k)];
  return TH_OK;
}

static int list_len(th_rt_env *env, const th_bsym *b, int i) {
  int64_t t[TH_MAX_DIMS];
  int n = 0;
  if (th_eg_int_list_arg(env, b, i, t, TH_MAX_DIMS, &n) != TH_OK) return -1;
  return n;
}

/* The planes and extents of tensor shape `shape` (ndim dims, the last k spatial) into in[3] or out[3]. */
static void extents(int ndim, const int64_t *shape, int k, int64_t *P, int64_t *ext) {
  int64_t p = 1;
  for (int d = 0; d < ndim - k; d++) p *= shape[d];
  if (P) *P = p;
  for (int d = 0; d < 3; d++) ext[d] = d < 3 - k ? 1 : shape[ndim - k + d - (3 - k)];
}

/* A contiguous view of t: t itself (*owned NULL) or a copy the caller releases (*owned). */
static th_status contiguous(th_tensor *t, th_tensor **c, th_tensor **owned) {
  *owned = NULL;
  *c = t;
  if (th_tensor_is_contiguous(t)) return TH_OK;
  if (!(*owned = th_tensor_contiguous_copy(t))) return th_last_status();
  *c = *owned;
  return TH_OK;
}

/* element [0, ...] of t as an untyped pointer (the kernels take typed ones) */
static void *dp(const th_tensor *t) { return th_eg_data(t); }

static int64_t plane_in(const geo *g) { return g->in[0] * g->in[1] * g->in[2]; }
static int64_t plane_out(const geo *g) { return g->out[0] * g->out[1] * g->out[2]; }

/* The spatial rank g->k (1 to 3) of a prim: the length of its int[] argument i. */
static th_status spatial_rank(th_rt_env *env, const th_bsym *b, int i, geo *g) {
  g->k = list_len(env, b, i);
  if (g->k < 1 || g->k > 3) return th_error(TH_ERR_RUNTIME, "%s: expected 1 to 3 spatial dims", th_eg_name(b));
  return TH_OK;
}

/* Argument 0 of a prim whose int[] argument 1 gives its spatial rank, and g with that rank. */
static th_status pooled_arg(th_rt_env *env, const th_bsym *b, th_tensor **t, geo *g) {
  *g = (geo){0};
  if (!(*t = th_eg_tensor_arg(env, b, 0))) return th_last_status();
  return spatial_rank(env, b, 1, g);
}

/* max_pool and avg_pool take float32, float64 and int64. */
static th_status check_pool_dtype(const th_bsym *b, th_dtype dt) {
  if (dt == TH_F32 || dt == TH_F64 || dt == TH_I64) return TH_OK;
  return th_error(TH_ERR_TYPE, "%s: unsupported dtype", th_eg_name(b));
}

/* g's planes and extents from the forward op's input `in` and output `out` (a backward kernel's
 * result and incoming gradient). */
static void set_extents(geo *g, const th_tensor *in, const th_tensor *out) {
  extents(in->ndim, in->shape, g->k, &g->P, g->in);
  extents(out->ndim, out->shape, g->k, NULL, g->out);
}

/* ---- max_pool, adaptive_max_pool ---------------------------------------------------------------------------- */

#define GT_NAN(v, m) ((v) > (m) || (v) != (v)) /* PyTorch's (val > maxval) || isnan(val) */
#define GT_INT(v, m) ((v) > (m))

#define MAX_POOL_KERNEL(NAME, T, LOWEST, GT)                                                                           \
  static void NAME(const geo *g, bool adaptive, const T *x, T *y, int64_t *ind) {                                      \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], ID = g->in[0], IH = g->in[1], IW = g->in[2];         \
    const int64_t rows = g->P * OD * OH, pin = plane_in(g);                                                            \
    _Pragma("omp parallel for schedule(static) if (rows * OW * g->ks[0] * g->ks[1] * g->ks[2] > TH_EG_PAR_MIN)") for ( \
      int64_t r = 0; r < rows; r++) {                                                                                  \
      const int64_t p = r / (OD * OH), od = (r / OH) % OD, oh = r % OH;                                                \
      const T *xp = x + p * pin;                                                                                       \
      T *yr = y + r * OW;                                                                                              \
      int64_t *ir = ind + r * OW;                                                                                      \
      int64_t d0, d1, h0, h1, sd = 1, sh = 1, sw = 1;                                                                  \
      if (adaptive) {                                                                                                  \
        d0 = th_pool_adaptive_start(od, ID, OD), d1 = th_pool_adaptive_end(od, ID, OD);                                \
        h0 = th_pool_adaptive_start(oh, IH, OH), h1 = th_pool_adaptive_end(oh, IH, OH);                                \
      } else {                                                                                                         \
        sd = g->dl[0], sh = g->dl[1], sw = g->dl[2];                                                                   \
        d0 = od * g->st[0] - g->pd[0], h0 = oh * g->st[1] - g->pd[1];                                                  \
        d1 = d0 + (g->ks[0] - 1) * sd + 1, h1 = h0 + (g->ks[1] - 1) * sh + 1;                                          \
        if (d1 > ID) d1 = ID;                                                                                          \
        if (h1 > IH) h1 = IH;                                                                                          \
        while (d0 < 0) d0 += sd;                                                                                       \
        while (h0 < 0) h0 += sh;                                                                                       \
      }                                                                                                                \
      for (int64_t ow = 0; ow < OW; ow++) {                                                                            \
        int64_t w0, w1;                                                                                                \
        if (adaptive) {                                                                                                \
          w0 = th_pool_adaptive_start(ow, IW, OW), w1 = th_pool_adaptive_end(ow, IW, OW);                              \
        } else {                                                                                                       \
          w0 = ow * g->st[2] - g->pd[2];                                                                               \
          w1 = w0 + (g->ks[2] - 1) * sw + 1;                                                                           \
          if (w1 > IW) w1 = IW;                                                                                        \
          while (w0 < 0) w0 += sw;                                                                                     \
        }                                                                                                              \
        int64_t mi = (d0 * IH + h0) * IW + w0;                                                                         \
        T m = LOWEST;                                                                                                  \
        for (int64_t d = d0; d < d1; d += sd)                                                                          \
          for (int64_t h = h0; h < h1; h += sh) {                                                                      \
            const T *row = xp + (d * IH + h) * IW;                                                                     \
            for (int64_t w = w0; w < w1; w += sw) {                                                                    \
              T v = row[w];                                                                                            \
              if (GT(v, m)) m = v, mi = (d * IH + h) * IW + w;                                                         \
            }                                                                                                          \
          }                                                                                                            \
        yr[ow] = m;                                                                                                    \
        ir[ow] = mi;                                                                                                   \
      }                                                                                                                \
    }                                                                                                                  \
  }
MAX_POOL_KERNEL(max_pool_f32, float, -INFINITY, GT_NAN)
MAX_POOL_KERNEL(max_pool_f64, double, -INFINITY, GT_NAN)
MAX_POOL_KERNEL(max_pool_i64, int64_t, INT64_MIN, GT_INT)

static th_status run_max_pool(th_rt_env *env, const th_bsym *b, bool adaptive) {
  th_tensor *t;
  geo g;
  TH_TRY(pooled_arg(env, b, &t, &g));
  if (!adaptive) {
    TH_TRY(ints3(env, b, 1, g.k, 1, g.ks));
    TH_TRY(ints3(env, b, 2, g.k, 1, g.st));
    TH_TRY(ints3(env, b, 3, g.k, 0, g.pd));
    TH_TRY(ints3(env, b, 4, g.k, 1, g.dl));
  } else {
    for (int d = 0; d < 3; d++) g.ks[d] = 1;
  }
  th_tensor *y = th_eg_alloc_out(env, b, 0), *ind = y ? th_eg_alloc_out(env, b, 1) : NULL;
  if (!ind) return th_last_status();
  set_extents(&g, t, y);
  if (th_tensor_numel(y) == 0) return TH_OK;
  TH_TRY(check_pool_dtype(b, t->dtype));
  th_tensor *c, *owned;
  TH_TRY(contiguous(t, &c, &owned));
  int64_t *ip = dp(ind);
  if (t->dtype == TH_F32)
    max_pool_f32(&g, adaptive, (const float *)dp(c), (float *)dp(y), ip);
  else if (t->dtype == TH_F64)
    max_pool_f64(&g, adaptive, (const double *)dp(c), (double *)dp(y), ip);
  else
    max_pool_i64(&g, adaptive, (const int64_t *)dp(c), (int64_t *)dp(y), ip);
  th_tensor_release(owned);
  return TH_OK;
}

th_status th_eg_max_pool_ref(th_rt_env *env, const th_bsym *b) { return run_max_pool(env, b, false); }
th_status th_eg_adaptive_max_pool_ref(th_rt_env *env, const th_bsym *b) { return run_max_pool(env, b, true); }

/* ---- pool_scatter_add, pool_gather ----------------------------------------------------------------------------- */

#define SCATTER_KERNEL(NAME, T)                                                                                        \
  static void NAME(int64_t P, int64_t n, int64_t pin, const T *gp, const int64_t *ip, T *out) {                        \
    _Pragma("omp parallel for schedule(static) if (P * (n + pin) > TH_EG_PAR_MIN)") for (int64_t p = 0; p < P; p++) {  \
      T *o = out + p * pin;                                                                                            \
      for (int64_t j = 0; j < pin; j++) o[j] = 0;                                                                      \
      const T *gr = gp + p * n;                                                                                        \
      const int64_t *ir = ip + p * n;                                                                                  \
      for (int64_t j = 0; j < n; j++)                                                                                  \
        if (ir[j] >= 0 && ir[j] < pin) o[ir[j]] += gr[j];                                                              \
    }                                                                                                                  \
  }
SCATTER_KERNEL(scatter_f32, float)
SCATTER_KERNEL(scatter_f64, double)

#define GATHER_KERNEL(NAME, T)                                                                                         \
  static void NAME(int64_t P, int64_t n, int64_t pin, const T *ap, const int64_t *ip, T *out) {                        \
    _Pragma("omp parallel for schedule(static) if (P * n > TH_EG_PAR_MIN)") for (int64_t p = 0; p < P;                 \
                                                                                 p++) for (int64_t j = 0; j < n;       \
                                                                                           j++) {                      \
      int64_t i = ip[p * n + j];                                                                                       \
      out[p * n + j] = i >= 0 && i < pin ? ap[p * pin + i] : (T)NAN;                                                   \
    }                                                                                                                  \
  }
GATHER_KERNEL(gather_f32, float)
GATHER_KERNEL(gather_f64, double)

/* pool_scatter_add(g, indices, input_size) adds each plane's gradient into its input plane
 * at the indices; pool_gather(a, indices, k) takes each plane's elements at the indices. */
static th_status run_indexed(th_rt_env *env, const th_bsym *b, bool gather) {
  th_tensor *s = th_eg_tensor_arg(env, b, 0), *idx = s ? th_eg_tensor_arg(env, b, 1) : NULL;
  if (!idx) return th_last_status();
  geo g = {0};
  if (gather) {
    int64_t k;
    TH_TRY(th_eg_int_arg(env, b, 2, &k));
    g.k = (int)k;
  } else {
    g.k = list_len(env, b, 2);
  }
  th_tensor *y = th_eg_alloc_out(env, b, 0);
  if (!y) return th_last_status();
  if (th_tensor_numel(y) == 0) return TH_OK;
  set_extents(&g, gather ? s : y, gather ? idx : s);
  int64_t n = plane_out(&g), pin = plane_in(&g);
  th_tensor *sc, *so, *ic, *io;
  TH_TRY(contiguous(s, &sc, &so));
  th_status st = contiguous(idx, &ic, &io);
  if (st == TH_OK) {
    bool f32 = s->dtype == TH_F32;
    if (gather && f32)
      gather_f32(g.P, n, pin, dp(sc), dp(ic), dp(y));
    else if (gather)
      gather_f64(g.P, n, pin, dp(sc), dp(ic), dp(y));
    else if (f32)
      scatter_f32(g.P, n, pin, dp(sc), dp(ic), dp(y));
    else
      scatter_f64(g.P, n, pin, dp(sc), dp(ic), dp(y));
  }
  th_tensor_release(so);
  th_tensor_release(io);
  return st;
}

th_status th_eg_pool_scatter_add_ref(th_rt_env *env, const th_bsym *b) { return run_indexed(env, b, false); }
th_status th_eg_pool_gather_ref(th_rt_env *env, const th_bsym *b) { return run_indexed(env, b, true); }

/* ---- avg_pool, avg_pool_backward ------------------------------------------------------------------------------- */

/* PyTorch's window of output o along one dim: [lo, hi) clipped to the input, and the extent of the
 * window clipped to the padded input (the count_include_pad divisor). */
static inline void avg_window(int64_t o, int64_t st, int64_t pd, int64_t ks, int64_t in, int64_t *lo, int64_t *hi,
                              int64_t *padded) {
  int64_t a = o * st - pd, e = a + ks;
  if (e > in + pd) e = in + pd;
  *padded = e - a;
  *lo = a < 0 ? 0 : a;
  *hi = e > in ? in : e;
}

typedef struct avg_params {
  bool count_include_pad, has_div;
  int64_t div;
} avg_params;

/* The divisor of a window: divisor_override, else its extent in the padded input (count_include_pad)
 * or in the input. */
static inline int64_t avg_divisor(const avg_params *ap, int64_t padded, int64_t clipped) {
  return ap->has_div ? ap->div : ap->count_include_pad ? padded : clipped;
}

/* The loops of the average kernels over the window [d0, d1) x [h0, h1) x [w0, w1) of the plane xp
 * (IH rows of IW elements), with the kernel's own names: its sum added to s (WINDOW_SUM), or v added
 * to each of its elements (WINDOW_ADD). */
#define WINDOW_SUM(T, s)                                                                                               \
  for (int64_t d = d0; d < d1; d++)                                                                                    \
    for (int64_t h = h0; h < h1; h++) {                                                                                \
      const T *row = xp + (d * IH + h) * IW;                                                                           \
      for (int64_t w = w0; w < w1; w++) s += row[w];                                                                   \
    }
#define WINDOW_ADD(T, v)                                                                                               \
  for (int64_t d = d0; d < d1; d++)                                                                                    \
    for (int64_t h = h0; h < h1; h++) {                                                                                \
      T *row = xp + (d * IH + h) * IW;                                                                                 \
      for (int64_t w = w0; w < w1; w++) row[w] += v;                                                                   \
    }

#define AVG_POOL_KERNEL(NAME, T, ACC)                                                                                  \
  static void NAME(const geo *g, const avg_params *ap, const T *x, T *y) {                                             \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], IH = g->in[1], IW = g->in[2];                        \
    const int64_t rows = g->P * OD * OH, pin = plane_in(g);                                                            \
    _Pragma("omp parallel for schedule(static) if (rows * OW * g->ks[0] * g->ks[1] * g->ks[2] > TH_EG_PAR_MIN)") for ( \
      int64_t r = 0; r < rows; r++) {                                                                                  \
      const int64_t p = r / (OD * OH), od = (r / OH) % OD, oh = r % OH;                                                \
      const T *xp = x + p * pin;                                                                                       \
      int64_t d0, d1, pdd, h0, h1, phh;                                                                                \
      avg_window(od, g->st[0], g->pd[0], g->ks[0], g->in[0], &d0, &d1, &pdd);                                          \
      avg_window(oh, g->st[1], g->pd[1], g->ks[1], IH, &h0, &h1, &phh);                                                \
      for (int64_t ow = 0; ow < OW; ow++) {                                                                            \
        int64_t w0, w1, pww;                                                                                           \
        avg_window(ow, g->st[2], g->pd[2], g->ks[2], IW, &w0, &w1, &pww);                                              \
        if (d0 >= d1 || h0 >= h1 || w0 >= w1) {                                                                        \
          y[r * OW + ow] = 0;                                                                                          \
          continue;                                                                                                    \
        }                                                                                                              \
        int64_t div = avg_divisor(ap, pdd * phh * pww, (d1 - d0) * (h1 - h0) * (w1 - w0));                             \
        ACC s = 0;                                                                                                     \
        WINDOW_SUM(T, s);                                                                                              \
        y[r * OW + ow] = (T)(s / (ACC)div);                                                                            \
      }                                                                                                                \
    }                                                                                                                  \
  }
AVG_POOL_KERNEL(avg_pool_f32, float, float)
AVG_POOL_KERNEL(avg_pool_f64, double, double)
AVG_POOL_KERNEL(avg_pool_i64, int64_t, int64_t)

#define AVG_POOL_BACKWARD_KERNEL(NAME, T)                                                                              \
  static void NAME(const geo *g, const avg_params *ap, const T *gy, T *gx) {                                           \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], IH = g->in[1], IW = g->in[2];                        \
    const int64_t pin = plane_in(g), pout = plane_out(g);                                                              \
    const int64_t work = g->P * (pin + pout * g->ks[0] * g->ks[1] * g->ks[2]);                                         \
    _Pragma("omp parallel for schedule(static) if (work > TH_EG_PAR_MIN)") for (int64_t p = 0; p < g->P; p++) {        \
      T *xp = gx + p * pin;                                                                                            \
      const T *yp = gy + p * pout;                                                                                     \
      for (int64_t j = 0; j < pin; j++) xp[j] = 0;                                                                     \
      for (int64_t od = 0; od < OD; od++) {                                                                            \
        int64_t d0, d1, pdd;                                                                                           \
        avg_window(od, g->st[0], g->pd[0], g->ks[0], g->in[0], &d0, &d1, &pdd);                                        \
        for (int64_t oh = 0; oh < OH; oh++) {                                                                          \
          int64_t h0, h1, phh;                                                                                         \
          avg_window(oh, g->st[1], g->pd[1], g->ks[1], IH, &h0, &h1, &phh);                                            \
          for (int64_t ow = 0; ow < OW; ow++) {                                                                        \
            int64_t w0, w1, pww;                                                                                       \
            avg_window(ow, g->st[2], g->pd[2], g->ks[2], IW, &w0, &w1, &pww);                                          \
            if (d0 >= d1 || h0 >= h1 || w0 >= w1) continue;                                                            \
            int64_t div = avg_divisor(ap, pdd * phh * pww, (d1 - d0) * (h1 - h0) * (w1 - w0));                         \
            T v = yp[(od * OH + oh) * OW + ow] / (T)div;                                                               \
            WINDOW_ADD(T, v);                                                                                          \
          }                                                                                                            \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }
AVG_POOL_BACKWARD_KERNEL(avg_pool_backward_f32, float)
AVG_POOL_BACKWARD_KERNEL(avg_pool_backward_f64, double)

/* the avg_pool parameters from argument `first` on: kernel_size, stride, padding, ceil_mode (unused
 * here: the output extents say it), count_include_pad, divisor_override */
static th_status avg_args(th_rt_env *env, const th_bsym *b, int first, geo *g, avg_params *ap) {
  TH_TRY(spatial_rank(env, b, first, g));
  TH_TRY(ints3(env, b, first, g->k, 1, g->ks));
  TH_TRY(ints3(env, b, first + 1, g->k, 1, g->st));
  TH_TRY(ints3(env, b, first + 2, g->k, 0, g->pd));
  ap->count_include_pad = b->args[first + 4].kind == TH_ARG_BOOL && b->args[first + 4].u.b;
  ap->has_div = b->args[first + 5].kind != TH_ARG_NONE;
  ap->div = 1;
  if (ap->has_div) TH_TRY(th_eg_int_arg(env, b, first + 5, &ap->div));
  if (ap->has_div && ap->div == 0) return th_error(TH_ERR_RUNTIME, "%s: divisor must be not zero", th_eg_name(b));
  return TH_OK;
}

/* avg_pool(a, kernel_size, ...) and avg_pool_backward(g, input_size, kernel_size, ...). */
static th_status run_avg_pool(th_rt_env *env, const th_bsym *b, bool backward) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  geo g = {0};
  avg_params ap;
  TH_TRY(avg_args(env, b, backward ? 2 : 1, &g, &ap));
  th_tensor *y = th_eg_alloc_out(env, b, 0);
  if (!y) return th_last_status();
  set_extents(&g, backward ? y : t, backward ? t : y);
  if (th_tensor_numel(y) == 0) return TH_OK;
  if (!backward) TH_TRY(check_pool_dtype(b, t->dtype));
  th_tensor *c, *owned;
  TH_TRY(contiguous(t, &c, &owned));
  if (backward && t->dtype == TH_F32)
    avg_pool_backward_f32(&g, &ap, dp(c), dp(y));
  else if (backward)
    avg_pool_backward_f64(&g, &ap, dp(c), dp(y));
  else if (t->dtype == TH_F32)
    avg_pool_f32(&g, &ap, dp(c), dp(y));
  else if (t->dtype == TH_F64)
    avg_pool_f64(&g, &ap, dp(c), dp(y));
  else
    avg_pool_i64(&g, &ap, dp(c), dp(y));
  th_tensor_release(owned);
  return TH_OK;
}

th_status th_eg_avg_pool_ref(th_rt_env *env, const th_bsym *b) { return run_avg_pool(env, b, false); }
th_status th_eg_avg_pool_backward_ref(th_rt_env *env, const th_bsym *b) { return run_avg_pool(env, b, true); }

/* ---- adaptive_avg_pool, adaptive_avg_pool_backward ------------------------------------------------------------ */

#define ADAPTIVE_AVG_KERNEL(NAME, T)                                                                                   \
  static void NAME(const geo *g, const T *x, T *y) {                                                                   \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], ID = g->in[0], IH = g->in[1], IW = g->in[2];         \
    const int64_t rows = g->P * OD * OH, pin = plane_in(g);                                                            \
    _Pragma(                                                                                                           \
      "omp parallel for schedule(static) if (rows * OW * (pin / (OD * OH * OW) + 1) > TH_EG_PAR_MIN)") for (int64_t    \
                                                                                                              r = 0;   \
                                                                                                            r < rows;  \
                                                                                                            r++) {     \
      const int64_t p = r / (OD * OH), od = (r / OH) % OD, oh = r % OH;                                                \
      const T *xp = x + p * pin;                                                                                       \
      int64_t d0 = th_pool_adaptive_start(od, ID, OD), d1 = th_pool_adaptive_end(od, ID, OD);                          \
      int64_t h0 = th_pool_adaptive_start(oh, IH, OH), h1 = th_pool_adaptive_end(oh, IH, OH);                          \
      for (int64_t ow = 0; ow < OW; ow++) {                                                                            \
        int64_t w0 = th_pool_adaptive_start(ow, IW, OW), w1 = th_pool_adaptive_end(ow, IW, OW);                        \
        T s = 0;                                                                                                       \
        WINDOW_SUM(T, s);                                                                                              \
        if (g->k == 3) s /= (T)(d1 - d0);                                                                              \
        y[r * OW + ow] = s / (T)(h1 - h0) / (T)(w1 - w0);                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }
ADAPTIVE_AVG_KERNEL(adaptive_avg_f32, float)
ADAPTIVE_AVG_KERNEL(adaptive_avg_f64, double)

#define ADAPTIVE_AVG_BACKWARD_KERNEL(NAME, T)                                                                          \
  static void NAME(const geo *g, const T *gy, T *gx) {                                                                 \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], ID = g->in[0], IH = g->in[1], IW = g->in[2];         \
    const int64_t pin = plane_in(g), pout = plane_out(g);                                                              \
    _Pragma("omp parallel for schedule(static) if (g->P * (pin + pout) > TH_EG_PAR_MIN)") for (int64_t p = 0;          \
                                                                                               p < g->P; p++) {        \
      T *xp = gx + p * pin;                                                                                            \
      const T *yp = gy + p * pout;                                                                                     \
      for (int64_t j = 0; j < pin; j++) xp[j] = 0;                                                                     \
      for (int64_t od = 0; od < OD; od++) {                                                                            \
        int64_t d0 = th_pool_adaptive_start(od, ID, OD), d1 = th_pool_adaptive_end(od, ID, OD);                        \
        for (int64_t oh = 0; oh < OH; oh++) {                                                                          \
          int64_t h0 = th_pool_adaptive_start(oh, IH, OH), h1 = th_pool_adaptive_end(oh, IH, OH);                      \
          for (int64_t ow = 0; ow < OW; ow++) {                                                                        \
            int64_t w0 = th_pool_adaptive_start(ow, IW, OW), w1 = th_pool_adaptive_end(ow, IW, OW);                    \
            T v = yp[(od * OH + oh) * OW + ow];                                                                        \
            if (g->k == 3) v /= (T)(d1 - d0);                                                                          \
            v = v / (T)(h1 - h0) / (T)(w1 - w0);                                                                       \
            WINDOW_ADD(T, v);                                                                                          \
          }                                                                                                            \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }
ADAPTIVE_AVG_BACKWARD_KERNEL(adaptive_avg_backward_f32, float)
ADAPTIVE_AVG_BACKWARD_KERNEL(adaptive_avg_backward_f64, double)

static th_status run_adaptive_avg(th_rt_env *env, const th_bsym *b, bool backward) {
  th_tensor *t;
  geo g;
  TH_TRY(pooled_arg(env, b, &t, &g));
  th_tensor *y = th_eg_alloc_out(env, b, 0);
  if (!y) return th_last_status();
  set_extents(&g, backward ? y : t, backward ? t : y);
  if (th_tensor_numel(y) == 0) return TH_OK;
  if (!backward && plane_out(&g) == 0) return TH_OK;
  th_tensor *c, *owned;
  TH_TRY(contiguous(t, &c, &owned));
  if (plane_out(&g) == 0) {
    memset(dp(y), 0, (size_t)th_tensor_numel(y) * th_dtype_size(y->dtype));
  } else if (t->dtype == TH_F32) {
    if (backward)
      adaptive_avg_backward_f32(&g, dp(c), dp(y));
    else
      adaptive_avg_f32(&g, dp(c), dp(y));
  } else {
    if (backward)
      adaptive_avg_backward_f64(&g, dp(c), dp(y));
    else
      adaptive_avg_f64(&g, dp(c), dp(y));
  }
  th_tensor_release(owned);
  return TH_OK;
}

th_status th_eg_adaptive_avg_pool_ref(th_rt_env *env, const th_bsym *b) { return run_adaptive_avg(env, b, false); }
th_status th_eg_adaptive_avg_pool_backward_ref(th_rt_env *env, const th_bsym *b) {
  return run_adaptive_avg(env, b, true);
}

/* ---- resample, resample_backward -------------------------------------------------------------------------------- *
 * Per spatial dim, each output index has taps (input indices and weights) computed as PyTorch's
 * upsample kernels compute them (UpSample.h): nearest floor(o * scale) (o itself when the sizes agree,
 * o / 2 when the output is twice the input), nearest-exact floor((o + 0.5) scale), both clamped to
 * in - 1, with scale = 1 / scale_factor when given, else in / out, in float; linear two taps at the
 * source index (o + 0.5) scale - 0.5 clamped at 0 (align_corners: o (in - 1) / (out - 1)); cubic four
 * taps at clamped indices with Keys' coefficients (A = -0.75). The weights are in the compute type
 * (float for float32); an output is sum_d w_d sum_h w_h sum_w w_w x, innermost dim first. */

enum { RS_NEAREST, RS_NEAREST_EXACT, RS_LINEAR, RS_CUBIC };

typedef struct taps {
  int n;        /* taps per output index: 1, 2 or 4 */
  int64_t *idx; /* [out][n] */
  double *w;    /* [out][n], already rounded to the compute type */
} taps;

static double cubic1(double x, double A) { return ((A + 2) * x - (A + 3)) * x * x + 1; }
static double cubic2(double x, double A) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }

/* The taps of one dim, in float arithmetic (f32) or double (f64). */
static th_status make_taps(int mode, bool align, bool has_scale, double scale_factor, int64_t in, int64_t out, bool f32,
                           taps *t) {
  t->n = mode == RS_CUBIC ? 4 : mode == RS_LINEAR ? 2 : 1;
  t->idx = malloc((size_t)(out * t->n) * sizeof *t->idx);
  t->w = malloc((size_t)(out * t->n) * sizeof *t->w);
  if (!t->idx || !t->w) return th_error(TH_ERR_NOMEM, "resample: out of memory");
  bool sc = has_scale && scale_factor > 0;
  if (mode == RS_NEAREST || mode == RS_NEAREST_EXACT) {
    float s = sc ? (float)(1.0 / scale_factor) : (float)in / (float)out;
    for (int64_t o = 0; o < out; o++) {
      int64_t i;
      if (mode == RS_NEAREST && out == in)
        i = o;
      else if (mode == RS_NEAREST && out == 2 * in)
        i = o >> 1;
      else if (mode == RS_NEAREST)
        i = (int64_t)floorf((float)o * s);
      else
        i = (int64_t)floorf((float)(((double)o + 0.5) * (double)s));
      t->idx[o] = i < in - 1 ? i : in - 1;
      t->w[o] = 1.0;
    }
    return TH_OK;
  }
  /* area_pixel_compute_scale in the compute type */
  double scale;
  if (align)
    scale = out > 1 ? (f32 ? (double)((float)(in - 1) / (float)(out - 1)) : (double)(in - 1) / (double)(out - 1)) : 0;
  else if (sc)
    scale = f32 ? (double)(float)(1.0 / scale_factor) : 1.0 / scale_factor;
  else
    scale = f32 ? (double)((float)in / (float)out) : (double)in / (double)out;
  for (int64_t o = 0; o < out; o++) {
    int64_t *ix = t->idx + o * t->n;
    double *w = t->w + o * t->n;
    if (mode == RS_LINEAR && out == in) {
      ix[0] = ix[1] = o;
      w[0] = 1, w[1] = 0;
      continue;
    }
    double real;
    if (f32) {
      float s = (float)scale, r = align ? s * (float)o : s * ((float)o + 0.5f) - 0.5f;
      if (mode == RS_LINEAR && !align && r < 0) r = 0;
      real = r;
    } else {
      real = align ? scale * (double)o : scale * ((double)o + 0.5) - 0.5;
      if (mode == RS_LINEAR && !align && real < 0) real = 0;
    }
    /* guard_index_and_lambda */
    int64_t i0 = (int64_t)floorf((float)real);
    if (i0 > in - 1) i0 = in - 1;
    double lam = f32 ? (double)((float)real - (float)i0) : real - (double)i0;
    lam = lam < 0 ? 0 : lam > 1 ? 1 : lam;
    if (mode == RS_LINEAR) {
      ix[0] = i0;
      ix[1] = i0 + (i0 < in - 1 ? 1 : 0);
      w[1] = lam;
      w[0] = f32 ? (double)(1.0f - (float)lam) : 1.0 - lam;
    } else {
      const double A = -0.75;
      double c[4];
      if (f32) {
        float x1 = (float)lam, x2 = 1.0f - x1, a = (float)A;
        c[0] = ((a * (x1 + 1) - 5 * a) * (x1 + 1) + 8 * a) * (x1 + 1) - 4 * a;
        c[1] = ((a + 2) * x1 - (a + 3)) * x1 * x1 + 1;
        c[2] = ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1;
        c[3] = ((a * (x2 + 1) - 5 * a) * (x2 + 1) + 8 * a) * (x2 + 1) - 4 * a;
      } else {
        c[0] = cubic2(lam + 1.0, A);
        c[1] = cubic1(lam, A);
        c[2] = cubic1(1.0 - lam, A);
        c[3] = cubic2(2.0 - lam, A);
      }
      for (int j = 0; j < 4; j++) {
        int64_t i = i0 - 1 + j;
        ix[j] = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
        w[j] = c[j];
      }
    }
  }
  return TH_OK;
}

/* One output row (plane, d, h) at a time: the W taps of each source row into tmp, summed over the H
 * taps into sd, over the D taps into the output row (each pass a loop over the row the compiler
 * vectorizes); the nearest modes copy. buf holds 2 OW elements per thread. */
#define RESAMPLE_KERNEL(NAME, T)                                                                                       \
  static void NAME(const geo *g, const taps *tp, const T *const *wt, bool nearest, T *buf, const T *x, T *y) {         \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], IH = g->in[1], IW = g->in[2];                        \
    const int64_t rows = g->P * OD * OH, pin = plane_in(g);                                                            \
    const int nd = tp[0].n, nh = tp[1].n, nw = tp[2].n;                                                                \
    const int64_t *iw = tp[2].idx;                                                                                     \
    const T *ww = wt[2];                                                                                               \
    _Pragma("omp parallel for schedule(static) if (rows * OW * nd * nh * nw > TH_EG_PAR_MIN)") for (int64_t r = 0;     \
                                                                                                    r < rows; r++) {   \
      const int64_t p = r / (OD * OH), od = (r / OH) % OD, oh = r % OH;                                                \
      const T *xp = x + p * pin;                                                                                       \
      T *acc = y + r * OW;                                                                                             \
      if (nearest) {                                                                                                   \
        const T *row = xp + (tp[0].idx[od] * IH + tp[1].idx[oh]) * IW;                                                 \
        for (int64_t ow = 0; ow < OW; ow++) acc[ow] = row[iw[ow]];                                                     \
        continue;                                                                                                      \
      }                                                                                                                \
      T *sd = buf + (int64_t)omp_get_thread_num() * 2 * OW, *tmp = sd + OW;                                            \
      for (int64_t ow = 0; ow < OW; ow++) acc[ow] = 0;                                                                 \
      for (int a = 0; a < nd; a++) {                                                                                   \
        for (int64_t ow = 0; ow < OW; ow++) sd[ow] = 0;                                                                \
        for (int bb = 0; bb < nh; bb++) {                                                                              \
          const T *row = xp + (tp[0].idx[od * nd + a] * IH + tp[1].idx[oh * nh + bb]) * IW;                            \
          if (nw == 2) {                                                                                               \
            for (int64_t ow = 0; ow < OW; ow++)                                                                        \
              tmp[ow] = row[iw[2 * ow]] * ww[2 * ow] + row[iw[2 * ow + 1]] * ww[2 * ow + 1];                           \
          } else {                                                                                                     \
            for (int64_t ow = 0; ow < OW; ow++) {                                                                      \
              T t = 0;                                                                                                 \
              for (int c = 0; c < nw; c++) t += row[iw[ow * nw + c]] * ww[ow * nw + c];                                \
              tmp[ow] = t;                                                                                             \
            }                                                                                                          \
          }                                                                                                            \
          const T wh = wt[1][oh * nh + bb];                                                                            \
          for (int64_t ow = 0; ow < OW; ow++) sd[ow] += tmp[ow] * wh;                                                  \
        }                                                                                                              \
        const T wd = wt[0][od * nd + a];                                                                               \
        for (int64_t ow = 0; ow < OW; ow++) acc[ow] += sd[ow] * wd;                                                    \
      }                                                                                                                \
    }                                                                                                                  \
  }
RESAMPLE_KERNEL(resample_f32, float)
RESAMPLE_KERNEL(resample_f64, double)

#define RESAMPLE_BACKWARD_KERNEL(NAME, T)                                                                              \
  static void NAME(const geo *g, const taps *tp, const T *const *wt, const T *gy, T *gx) {                             \
    const int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], IH = g->in[1], IW = g->in[2];                        \
    const int64_t pin = plane_in(g), pout = plane_out(g);                                                              \
    const int nd = tp[0].n, nh = tp[1].n, nw = tp[2].n;                                                                \
    _Pragma(                                                                                                           \
      "omp parallel for schedule(static) if (g->P * (pin + pout * nd * nh * nw) > TH_EG_PAR_MIN)") for (int64_t p = 0; \
                                                                                                        p < g->P;      \
                                                                                                        p++) {         \
      T *xp = gx + p * pin;                                                                                            \
      const T *yp = gy + p * pout;                                                                                     \
      for (int64_t j = 0; j < pin; j++) xp[j] = 0;                                                                     \
      for (int64_t od = 0; od < OD; od++)                                                                              \
        for (int64_t oh = 0; oh < OH; oh++)                                                                            \
          for (int64_t ow = 0; ow < OW; ow++) {                                                                        \
            T v = yp[(od * OH + oh) * OW + ow];                                                                        \
            for (int a = 0; a < nd; a++) {                                                                             \
              T vd = v * wt[0][od * nd + a];                                                                           \
              for (int bb = 0; bb < nh; bb++) {                                                                        \
                T vh = vd * wt[1][oh * nh + bb];                                                                       \
                T *row = xp + (tp[0].idx[od * nd + a] * IH + tp[1].idx[oh * nh + bb]) * IW;                            \
                for (int c = 0; c < nw; c++) row[tp[2].idx[ow * nw + c]] += vh * wt[2][ow * nw + c];                   \
              }                                                                                                        \
            }                                                                                                          \
          }                                                                                                            \
    }                                                                                                                  \
  }
RESAMPLE_BACKWARD_KERNEL(resample_backward_f32, float)
RESAMPLE_BACKWARD_KERNEL(resample_backward_f64, double)

static th_status run_resample(th_rt_env *env, const th_bsym *b, bool backward) {
  th_tensor *t;
  geo g;
  TH_TRY(pooled_arg(env, b, &t, &g));
  const th_arg *ma = &b->args[2], *sa = &b->args[4];
  if (ma->kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: mode must be a str", th_eg_name(b));
  int mode = !strcmp(ma->u.s, "nearest")         ? RS_NEAREST
             : !strcmp(ma->u.s, "nearest-exact") ? RS_NEAREST_EXACT
             : !strcmp(ma->u.s, "linear")        ? RS_LINEAR
                                                 : RS_CUBIC;
  bool align = b->args[3].kind == TH_ARG_BOOL && b->args[3].u.b;
  th_tensor *y = th_eg_alloc_out(env, b, 0);
  if (!y) return th_last_status();
  set_extents(&g, backward ? y : t, backward ? t : y);
  if (th_tensor_numel(y) == 0) return TH_OK;
  bool f32 = t->dtype == TH_F32;
  taps tp[3] = {{0}};
  th_status st = TH_OK;
  for (int d = 0; d < 3 && st == TH_OK; d++) {
    int sd = d - (3 - g.k); /* the spatial dim of the prim, or < 0 for a padded one */
    bool has = false;
    double s = 0;
    if (sd >= 0 && (sa->kind == TH_ARG_TUPLE || sa->kind == TH_ARG_LIST) && sa->u.seq.n == g.k &&
        sa->u.seq.items[sd].kind != TH_ARG_NONE) {
      int64_t iv;
      bool isf;
      has = th_rt_number(env, &sa->u.seq.items[sd], &s, &iv, &isf);
    }
    st = sd < 0 ? make_taps(RS_NEAREST, false, false, 0, 1, 1, f32, &tp[d])
                : make_taps(mode, align, has, s, g.in[d], g.out[d], f32, &tp[d]);
  }
  /* the weights in the compute type, and the forward's row buffers (2 OW per thread) */
  size_t esz = f32 ? sizeof(float) : sizeof(double);
  void *wt[3] = {NULL, NULL, NULL}, *buf = NULL;
  for (int d = 0; d < 3 && st == TH_OK; d++) {
    int64_t n = g.out[d] * tp[d].n;
    if (!(wt[d] = malloc((size_t)n * esz))) st = th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
    for (int64_t i = 0; st == TH_OK && i < n; i++) {
      if (f32)
        ((float *)wt[d])[i] = (float)tp[d].w[i];
      else
        ((double *)wt[d])[i] = tp[d].w[i];
    }
  }
  if (st == TH_OK && !backward && !(buf = malloc((size_t)(2 * g.out[2] * omp_get_max_threads()) * esz)))
    st = th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  bool nearest = mode == RS_NEAREST || mode == RS_NEAREST_EXACT;
  th_tensor *c = NULL, *owned = NULL;
  if (st == TH_OK) st = contiguous(t, &c, &owned);
  if (st == TH_OK) {
    if (f32) {
      const float *const w3[3] = {wt[0], wt[1], wt[2]};
      if (backward)
        resample_backward_f32(&g, tp, w3, dp(c), dp(y));
      else
        resample_f32(&g, tp, w3, nearest, buf, dp(c), dp(y));
    } else {
      const double *const w3[3] = {wt[0], wt[1], wt[2]};
      if (backward)
        resample_backward_f64(&g, tp, w3, dp(c), dp(y));
      else
        resample_f64(&g, tp, w3, nearest, buf, dp(c), dp(y));
    }
  }
  th_tensor_release(owned);
  free(buf);
  for (int d = 0; d < 3; d++) free(tp[d].idx), free(tp[d].w), free(wt[d]);
  return st;
}

th_status th_eg_resample_ref(th_rt_env *env, const th_bsym *b) { return run_resample(env, b, false); }
th_status th_eg_resample_backward_ref(th_rt_env *env, const th_bsym *b) { return run_resample(env, b, true); }

/* ---- im2col, col2im --------------------------------------------------------------------------------------------- *
 * cols[n][(c kh + i) kw + j][oh OW + ow] = x[n][c][oh sh - ph + i dh][ow sw - pw + j dw] (0 outside);
 * col2im adds each column entry back into its pixel. im2col moves elements of any dtype by size. */

typedef struct i2c {
  int64_t N, C, H, W, kh, kw, dh, dw, ph, pw, sh, sw, OH, OW;
} i2c;

/* q from the image (N, C, H, W) or (C, H, W) `img` and the kernel_size, dilation, padding, stride
 * arguments from `first` on. */
static th_status i2c_args(th_rt_env *env, const th_bsym *b, const th_tensor *img, int first, i2c *q) {
  int nd = img->ndim;
  q->N = nd == 4 ? img->shape[0] : 1, q->C = img->shape[nd - 3], q->H = img->shape[nd - 2], q->W = img->shape[nd - 1];
  int64_t v[3] = {0, 0, 0};
  TH_TRY(ints3(env, b, first, 2, 1, v));
  q->kh = v[1], q->kw = v[2];
  TH_TRY(ints3(env, b, first + 1, 2, 1, v));
  q->dh = v[1], q->dw = v[2];
  TH_TRY(ints3(env, b, first + 2, 2, 0, v));
  q->ph = v[1], q->pw = v[2];
  TH_TRY(ints3(env, b, first + 3, 2, 1, v));
  q->sh = v[1], q->sw = v[2];
  q->OH = (q->H + 2 * q->ph - (q->dh * (q->kh - 1) + 1)) / q->sh + 1;
  q->OW = (q->W + 2 * q->pw - (q->dw * (q->kw - 1) + 1)) / q->sw + 1;
  return TH_OK;
}

#define IM2COL_KERNEL(NAME, T)                                                                                         \
  static void NAME(const i2c *q, const T *x, T *y) {                                                                   \
    const int64_t rows = q->N * q->C * q->kh * q->kw, L = q->OH * q->OW;                                               \
    _Pragma("omp parallel for schedule(static) if (rows * L > TH_EG_PAR_MIN)") for (int64_t r = 0; r < rows; r++) {    \
      const int64_t j = r % q->kw, i = (r / q->kw) % q->kh, nc = r / (q->kw * q->kh);                                  \
      const T *xp = x + nc * q->H * q->W;                                                                              \
      T *yr = y + r * L;                                                                                               \
      for (int64_t oh = 0; oh < q->OH; oh++) {                                                                         \
        int64_t h = oh * q->sh - q->ph + i * q->dh;                                                                    \
        for (int64_t ow = 0; ow < q->OW; ow++) {                                                                       \
          int64_t w = ow * q->sw - q->pw + j * q->dw;                                                                  \
          yr[oh * q->OW + ow] = h >= 0 && h < q->H && w >= 0 && w < q->W ? xp[h * q->W + w] : (T)0;                    \
        }                                                                                                              \
      }                                                                                                                \
    }                                                                                                                  \
  }
IM2COL_KERNEL(im2col_1, uint8_t)
IM2COL_KERNEL(im2col_2, uint16_t)
IM2COL_KERNEL(im2col_4, uint32_t)
IM2COL_KERNEL(im2col_8, uint64_t)

#define COL2IM_KERNEL(NAME, T)                                                                                         \
  static void NAME(const i2c *q, const T *cols, T *x) {                                                                \
    const int64_t L = q->OH * q->OW, NC = q->N * q->C;                                                                 \
    _Pragma("omp parallel for schedule(static) if (NC * q->kh * q->kw * L > TH_EG_PAR_MIN)") for (int64_t nc = 0;      \
                                                                                                  nc < NC; nc++) {     \
      T *xp = x + nc * q->H * q->W;                                                                                    \
      for (int64_t j = 0; j < q->H * q->W; j++) xp[j] = 0;                                                             \
      for (int64_t i = 0; i < q->kh; i++)                                                                              \
        for (int64_t j = 0; j < q->kw; j++) {                                                                          \
          const T *cr = cols + ((nc * q->kh + i) * q->kw + j) * L;                                                     \
          for (int64_t oh = 0; oh < q->OH; oh++) {                                                                     \
            int64_t h = oh * q->sh - q->ph + i * q->dh;                                                                \
            if (h < 0 || h >= q->H) continue;                                                                          \
            for (int64_t ow = 0; ow < q->OW; ow++) {                                                                   \
              int64_t w = ow * q->sw - q->pw + j * q->dw;                                                              \
              if (w >= 0 && w < q->W) xp[h * q->W + w] += cr[oh * q->OW + ow];                                         \
            }                                                                                                          \
          }                                                                                                            \
        }                                                                                                              \
    }                                                                                                                  \
  }
COL2IM_KERNEL(col2im_f32, float)
COL2IM_KERNEL(col2im_f64, double)

th_status th_eg_im2col_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  i2c q;
  TH_TRY(i2c_args(env, b, t, 1, &q));
  th_tensor *y = th_eg_alloc_out(env, b, 0);
  if (!y) return th_last_status();
  if (th_tensor_numel(y) == 0) return TH_OK;
  th_tensor *c, *owned;
  TH_TRY(contiguous(t, &c, &owned));
  switch (th_dtype_size(t->dtype)) {
    case 1: im2col_1(&q, dp(c), dp(y)); break;
    case 2: im2col_2(&q, dp(c), dp(y)); break;
    case 4: im2col_4(&q, dp(c), dp(y)); break;
    default: im2col_8(&q, dp(c), dp(y)); break;
  }
  th_tensor_release(owned);
  return TH_OK;
}

th_status th_eg_col2im_ref(th_rt_env *env, const th_bsym *b) {
  th_tensor *t = th_eg_tensor_arg(env, b, 0);
  if (!t) return th_last_status();
  th_tensor *y = th_eg_alloc_out(env, b, 0);
  if (!y) return th_last_status();
  i2c q;
  TH_TRY(i2c_args(env, b, y, 2, &q));
  if (th_tensor_numel(y) == 0) return TH_OK;
  th_tensor *c, *owned;
  TH_TRY(contiguous(t, &c, &owned));
  if (t->dtype == TH_F32)
    col2im_f32(&q, dp(c), dp(y));
  else
    col2im_f64(&q, dp(c), dp(y));
  th_tensor_release(owned);
  return TH_OK;
}
