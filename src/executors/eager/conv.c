/* conv.c — the reference kernel of prims.convolution: direct loops, every dtype the prim takes (float64
 * and the integers included, which oneDNN lacks), 1 to 3 spatial dims, any strides, transposed or not.
 *
 * Each output element out[n, oc, z] is one sum, accumulated in float64 for floating dtypes (float32,
 * bfloat16 and float16 round once at the end, at least as accurate as PyTorch's float32-accumulating
 * kernels) and in wrapping int64 for integers, starting from the bias:
 *   convolution  out[n, oc, z] = bias[oc] + sum over c < Cg, k of a[n, g Cg + c, z s + k d - p] w[oc, c, k]
 *                with g = oc / (C_out / G), input positions outside [0, L) reading zero (the padding);
 *   transposed   out[n, oc, z] = bias[oc] + sum over c < Cg, k with z + p - k d = y s, 0 <= y < L of
 *                a[n, g Cg + c, y] w[g Cg + c, oc % Og, k], Cg = C_in / G, Og = C_out / G
 * (the gather form of the transposed convolution: each output element is written once, so the (n, oc)
 * planes run in parallel without races). Spatial dims are padded to three with extent 1. */
#include <string.h>

#include "executors/eager/eager_internal.h"

typedef struct conv_job {
  const char *a, *w, *bias;
  th_dtype dt;
  int64_t abs_[5], wbs[5], bbs; /* byte strides: a (N, C, D, H, W), w (C0, C1, D, H, W), bias */
  int64_t N, Cout, Cg, Og, L[3], K[3], Lo[3], s[3], p[3], d[3];
  bool transposed;
  char *out;
} conv_job;

/* The input position read by output position z through kernel tap k along one dim, or -1. */
static inline int64_t src_pos(const conv_job *j, int i, int64_t z, int64_t k) {
  if (!j->transposed) {
    const int64_t y = z * j->s[i] + k * j->d[i] - j->p[i];
    return y >= 0 && y < j->L[i] ? y : -1;
  }
  const int64_t t = z + j->p[i] - k * j->d[i];
  if (t < 0 || t % j->s[i]) return -1;
  const int64_t y = t / j->s[i];
  return y < j->L[i] ? y : -1;
}

/* One (n, oc) plane of the output. */
static void conv_plane(const conv_job *j, int64_t n, int64_t oc, bool fp) {
  const size_t es = th_dtype_size(j->dt);
  const int64_t g = oc / j->Og, planesz = j->Lo[0] * j->Lo[1] * j->Lo[2];
  char *o = j->out + (size_t)((n * j->Cout + oc) * planesz) * es;
  const char *bias = j->bias ? j->bias + oc * j->bbs : NULL;
  int64_t e = 0;
  for (int64_t z0 = 0; z0 < j->Lo[0]; z0++)
    for (int64_t z1 = 0; z1 < j->Lo[1]; z1++)
      for (int64_t z2 = 0; z2 < j->Lo[2]; z2++, e++) {
        double accf = bias && fp ? th_load_f64(bias, j->dt) : 0.0;
        uint64_t acci = bias && !fp ? (uint64_t)th_load_i64(bias, j->dt) : 0;
        for (int64_t k0 = 0; k0 < j->K[0]; k0++) {
          const int64_t y0 = src_pos(j, 0, z0, k0);
          if (y0 < 0) continue;
          for (int64_t k1 = 0; k1 < j->K[1]; k1++) {
            const int64_t y1 = src_pos(j, 1, z1, k1);
            if (y1 < 0) continue;
            for (int64_t k2 = 0; k2 < j->K[2]; k2++) {
              const int64_t y2 = src_pos(j, 2, z2, k2);
              if (y2 < 0) continue;
              const char *ap = j->a + n * j->abs_[0] + y0 * j->abs_[2] + y1 * j->abs_[3] + y2 * j->abs_[4];
              const char *wp = j->w + k0 * j->wbs[2] + k1 * j->wbs[3] + k2 * j->wbs[4];
              for (int64_t c = 0; c < j->Cg; c++) {
                const int64_t ic = g * j->Cg + c;
                const char *ae = ap + ic * j->abs_[1];
                const char *we =
                  j->transposed ? wp + ic * j->wbs[0] + (oc % j->Og) * j->wbs[1] : wp + oc * j->wbs[0] + c * j->wbs[1];
                if (fp)
                  accf += th_load_f64(ae, j->dt) * th_load_f64(we, j->dt);
                else
                  acci += (uint64_t)th_load_i64(ae, j->dt) * (uint64_t)th_load_i64(we, j->dt);
              }
            }
          }
        }
        if (fp)
          th_store_f64(o + (size_t)e * es, j->dt, accf);
        else
          th_store_i64(o + (size_t)e * es, j->dt, (int64_t)acci);
      }
}

th_status th_eg_convolution_ref(th_rt_env *env, const th_bsym *b) {
  const char *op = th_eg_name(b);
  /* Step 1: operands and parameters (the meta has checked them) */
  th_tensor *a = th_eg_tensor_arg(env, b, 0);
  if (!a) return th_last_status();
  th_tensor *w = th_eg_tensor_arg(env, b, 1);
  if (!w) return th_last_status();
  th_tensor *bias = th_rt_tensor(env, &b->args[2]);
  const int k = w->ndim - 2;
  if (k < 1 || k > 3 || a->ndim != w->ndim || a->dtype != w->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: expected a and weight of one dtype with 1 to 3 spatial dims", op);
  int64_t lists[4][TH_MAX_DIMS];
  int n[4];
  for (int i = 0; i < 4; i++) {
    TH_TRY(th_eg_int_list_arg(env, b, i < 3 ? 3 + i : 7, lists[i], TH_MAX_DIMS, &n[i]));
    if (n[i] != 1 && n[i] != k) return th_error(TH_ERR_RUNTIME, "%s: expected 1 or %d values per list", op, k);
  }
  int64_t groups, transposed;
  TH_TRY(th_eg_int_arg(env, b, 8, &groups));
  TH_TRY(th_eg_int_arg(env, b, 6, &transposed));
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  if (th_tensor_numel(out) == 0) return TH_OK;
  /* Step 2: the job, spatial dims padded to three */
  conv_job j;
  memset(&j, 0, sizeof j);
  j.a = th_eg_data(a), j.w = th_eg_data(w), j.dt = a->dtype, j.out = th_eg_data(out);
  j.transposed = transposed != 0;
  const int64_t as = (int64_t)th_dtype_size(a->dtype);
  j.N = a->shape[0], j.Cout = out->shape[1];
  j.Cg = j.transposed ? a->shape[1] / groups : w->shape[1];
  j.Og = j.Cout / groups;
  for (int i = 0; i < 5; i++) j.abs_[i] = j.wbs[i] = 0;
  j.abs_[0] = a->strides[0] * as, j.abs_[1] = a->strides[1] * as;
  j.wbs[0] = w->strides[0] * as, j.wbs[1] = w->strides[1] * as;
  for (int i = 0; i < 3; i++) {
    const int src = i - (3 - k); /* the spatial dim i stands for, or < 0 (a padding dim) */
    if (src < 0) {
      j.L[i] = j.K[i] = j.Lo[i] = j.s[i] = j.d[i] = 1;
      j.p[i] = 0;
      continue;
    }
    j.L[i] = a->shape[2 + src], j.K[i] = w->shape[2 + src], j.Lo[i] = out->shape[2 + src];
    j.abs_[2 + i] = a->strides[2 + src] * as, j.wbs[2 + i] = w->strides[2 + src] * as;
    j.s[i] = lists[0][n[0] == 1 ? 0 : src];
    j.p[i] = lists[1][n[1] == 1 ? 0 : src];
    j.d[i] = lists[2][n[2] == 1 ? 0 : src];
  }
  if (bias) j.bias = th_eg_data(bias), j.bbs = bias->ndim ? bias->strides[0] * as : 0;
  /* Step 3: the planes, in parallel */
  const bool fp = th_dtype_is_float(a->dtype);
  const int64_t planes = j.N * j.Cout, work = th_tensor_numel(out) * j.Cg * j.K[0] * j.K[1] * j.K[2];
#pragma omp parallel for schedule(dynamic, 1) if (work > TH_EG_PAR_MIN && planes > 1)
  for (int64_t q = 0; q < planes; q++) conv_plane(&j, q / j.Cout, q % j.Cout, fp);
  return TH_OK;
}
