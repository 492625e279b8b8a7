/* linalg_lapack.c — eager kernels of the decomposition and solve prims (ops/prims/linalg_lapack.c)
 * through LAPACKE: solve (gesv), slogdet (getrf), cholesky (potrf), eigh (syevd), svd (gesdd).
 *
 * Each operand is copied once into a contiguous row-major float64 buffer (any strides, float32 or
 * float64), every matrix of the batch goes to LAPACKE's row-major interface in float64, and the
 * results are stored into the contiguous outputs, rounded once to their dtype. Failures LAPACK
 * reports (a singular matrix, one that is not positive-definite) are TH_ERR_RUNTIME with PyTorch's
 * message; an empty batch or empty matrices compute nothing. */
#include <math.h>
#include <string.h>

#include <lapacke.h>

#include "executors/eager/eager_internal.h"

/* A contiguous float64 copy of t (NULL with an error set). */
static double *load_f64(const th_bsym *b, const th_tensor *t) {
  int64_t n = th_tensor_numel(t);
  double *buf = th_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
  if (!buf) {
    th_error(TH_ERR_NOMEM, "%s: out of memory for a float64 copy of an operand", th_eg_name(b));
    return NULL;
  }
  if (n == 0) return buf;
  int64_t sbs[TH_MAX_DIMS], dbs[TH_MAX_DIMS], size = (int64_t)th_dtype_size(t->dtype), acc = 8;
  for (int d = t->ndim - 1; d >= 0; d--) {
    sbs[d] = t->strides[d] * size;
    dbs[d] = acc;
    acc *= t->shape[d];
  }
  th_eg_copy((char *)buf, TH_F64, dbs, th_eg_data(t), t->dtype, sbs, t->ndim, t->shape);
  return buf;
}

/* Stores the contiguous float64 buffer into the contiguous output out. */
static void store_f64(th_tensor *out, const double *buf) {
  int64_t n = th_tensor_numel(out), size = (int64_t)th_dtype_size(out->dtype);
  char *o = th_eg_data(out);
  for (int64_t i = 0; i < n; i++) th_store_f64(o + i * size, out->dtype, buf[i]);
}

static int64_t batch_of(const th_tensor *t, int keep) {
  int64_t nb = 1;
  for (int d = 0; d < t->ndim - keep; d++) nb *= t->shape[d];
  return nb;
}

/* Allocates outputs 0..nout-1 of b into outs. */
static th_status alloc_outs(th_rt_env *env, const th_bsym *b, int nout, th_tensor **outs) {
  for (int k = 0; k < nout; k++) {
    outs[k] = th_eg_alloc_out(env, b, k);
    if (!outs[k]) return th_last_status();
  }
  return TH_OK;
}

static th_status solve_kernel(th_rt_env *env, const th_bsym *b) {
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *x = a ? th_eg_tensor_arg(env, b, 1) : NULL, *out;
  if (!x) return th_last_status();
  TH_TRY(alloc_outs(env, b, 1, &out));
  int64_t n = a->shape[a->ndim - 1], k = x->shape[x->ndim - 1], nb = batch_of(a, 2);
  double *A = load_f64(b, a), *B = A ? load_f64(b, x) : NULL;
  lapack_int *piv = th_malloc((size_t)(n > 0 ? n : 1) * sizeof(lapack_int));
  th_status st = TH_OK;
  if (!A || !B || !piv) st = th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  for (int64_t i = 0; st == TH_OK && n > 0 && i < nb; i++) {
    lapack_int info = LAPACKE_dgesv(LAPACK_ROW_MAJOR, (lapack_int)n, (lapack_int)k, A + i * n * n, (lapack_int)n, piv,
                                    B + i * n * k, (lapack_int)(k > 0 ? k : 1));
    if (info > 0)
      st = th_error(TH_ERR_RUNTIME, "torch.linalg.solve: The solver failed because the input matrix is singular.");
    else if (info < 0)
      st = th_error(TH_ERR_RUNTIME, "%s: LAPACK gesv rejected argument %d", th_eg_name(b), (int)-info);
  }
  if (st == TH_OK) store_f64(out, B);
  th_free(A);
  th_free(B);
  th_free(piv);
  return st;
}

static th_status slogdet_kernel(th_rt_env *env, const th_bsym *b) {
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *outs[2];
  if (!a) return th_last_status();
  TH_TRY(alloc_outs(env, b, 2, outs));
  int64_t n = a->shape[a->ndim - 1], nb = batch_of(a, 2);
  double *A = load_f64(b, a), *res = th_malloc((size_t)(2 * nb + 1) * sizeof(double));
  lapack_int *piv = th_malloc((size_t)(n > 0 ? n : 1) * sizeof(lapack_int));
  th_status st = TH_OK;
  if (!A || !res || !piv) st = th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  for (int64_t i = 0; st == TH_OK && i < nb; i++) {
    double sign = 1, logabs = 0, *M = A + i * n * n;
    if (n > 0) {
      lapack_int info = LAPACKE_dgetrf(LAPACK_ROW_MAJOR, (lapack_int)n, (lapack_int)n, M, (lapack_int)n, piv);
      if (info < 0) st = th_error(TH_ERR_RUNTIME, "%s: LAPACK getrf rejected argument %d", th_eg_name(b), (int)-info);
      for (int64_t j = 0; j < n; j++) {
        double d = M[j * n + j];
        if (piv[j] != j + 1) sign = -sign;
        if (d < 0) sign = -sign;
        logabs += log(fabs(d));
      }
      if (info > 0) sign = 0, logabs = -INFINITY;
    }
    res[i] = sign;
    res[nb + i] = logabs;
  }
  if (st == TH_OK) {
    store_f64(outs[0], res);
    store_f64(outs[1], res + nb);
  }
  th_free(A);
  th_free(res);
  th_free(piv);
  return st;
}

static th_status cholesky_kernel(th_rt_env *env, const th_bsym *b) {
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *out;
  if (!a) return th_last_status();
  TH_TRY(alloc_outs(env, b, 1, &out));
  int64_t n = a->shape[a->ndim - 1], nb = batch_of(a, 2);
  double *A = load_f64(b, a);
  if (!A) return th_last_status();
  th_status st = TH_OK;
  for (int64_t i = 0; st == TH_OK && n > 0 && i < nb; i++) {
    double *M = A + i * n * n;
    lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)n, M, (lapack_int)n);
    if (info > 0)
      st = th_error(TH_ERR_RUNTIME,
                    "torch.linalg.cholesky: The factorization could not be completed because the input is not "
                    "positive-definite (the leading minor of order %d is not positive-definite).",
                    (int)info);
    else if (info < 0)
      st = th_error(TH_ERR_RUNTIME, "%s: LAPACK potrf rejected argument %d", th_eg_name(b), (int)-info);
    for (int64_t r = 0; r < n; r++)
      for (int64_t c = r + 1; c < n; c++) M[r * n + c] = 0;
  }
  if (st == TH_OK) store_f64(out, A);
  th_free(A);
  return st;
}

static th_status eigh_kernel(th_rt_env *env, const th_bsym *b) {
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *outs[2];
  if (!a) return th_last_status();
  TH_TRY(alloc_outs(env, b, 2, outs));
  int64_t n = a->shape[a->ndim - 1], nb = batch_of(a, 2);
  double *A = load_f64(b, a), *W = th_malloc((size_t)(nb * n + 1) * sizeof(double));
  th_status st = TH_OK;
  if (!A || !W) st = th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  for (int64_t i = 0; st == TH_OK && n > 0 && i < nb; i++) {
    lapack_int info =
      LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', (lapack_int)n, A + i * n * n, (lapack_int)n, W + i * n);
    if (info > 0)
      st = th_error(TH_ERR_RUNTIME,
                    "torch.linalg.eigh: The algorithm failed to converge because the input matrix is ill-conditioned "
                    "or has too many repeated eigenvalues (error code: %d).",
                    (int)info);
    else if (info < 0)
      st = th_error(TH_ERR_RUNTIME, "%s: LAPACK syevd rejected argument %d", th_eg_name(b), (int)-info);
  }
  if (st == TH_OK) {
    store_f64(outs[0], W);
    store_f64(outs[1], A);
  }
  th_free(A);
  th_free(W);
  return st;
}

static th_status svd_kernel(th_rt_env *env, const th_bsym *b) {
  th_tensor *a = th_eg_tensor_arg(env, b, 0), *outs[3];
  if (!a) return th_last_status();
  TH_TRY(alloc_outs(env, b, 3, outs));
  int64_t m = a->shape[a->ndim - 2], n = a->shape[a->ndim - 1], k = m < n ? m : n, nb = batch_of(a, 2);
  double *A = load_f64(b, a), *U = th_malloc((size_t)(nb * m * k + 1) * sizeof(double)),
         *S = th_malloc((size_t)(nb * k + 1) * sizeof(double)),
         *V = th_malloc((size_t)(nb * k * n + 1) * sizeof(double));
  th_status st = TH_OK;
  if (!A || !U || !S || !V) st = th_error(TH_ERR_NOMEM, "%s: out of memory", th_eg_name(b));
  for (int64_t i = 0; st == TH_OK && k > 0 && i < nb; i++) {
    lapack_int info = LAPACKE_dgesdd(LAPACK_ROW_MAJOR, 'S', (lapack_int)m, (lapack_int)n, A + i * m * n, (lapack_int)n,
                                     S + i * k, U + i * m * k, (lapack_int)k, V + i * k * n, (lapack_int)n);
    if (info > 0)
      st = th_error(TH_ERR_RUNTIME,
                    "torch.linalg.svd: The algorithm failed to converge because the input matrix is ill-conditioned "
                    "or has too many repeated singular values (error code: %d).",
                    (int)info);
    else if (info < 0)
      st = th_error(TH_ERR_RUNTIME, "%s: LAPACK gesdd rejected argument %d", th_eg_name(b), (int)-info);
  }
  if (st == TH_OK) {
    store_f64(outs[0], U);
    store_f64(outs[1], S);
    store_f64(outs[2], V);
  }
  th_free(A);
  th_free(U);
  th_free(S);
  th_free(V);
  return st;
}

th_status th_eg_linalg_lapack_ref(th_rt_env *env, const th_bsym *b) {
  switch (b->sym->id) {
    case TH_OP_prims_linalg_solve: return solve_kernel(env, b);
    case TH_OP_prims_linalg_slogdet: return slogdet_kernel(env, b);
    case TH_OP_prims_linalg_cholesky: return cholesky_kernel(env, b);
    case TH_OP_prims_linalg_eigh: return eigh_kernel(env, b);
    case TH_OP_prims_linalg_svd: return svd_kernel(env, b);
    default: return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no LAPACK kernel", th_eg_name(b));
  }
}
