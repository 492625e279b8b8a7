/* linalg.c — torch-level matrix products: matmul, bmm, mm, linear, addmm, baddbmm, outer.
 *
 * prims.matmul is strict (same dtype, identical batch dims); ltorch.matmul adds PyTorch's rules:
 *   - a 1-D operand goes straight to the prim (it handles vector-matrix and matrix-vector);
 *   - ND @ 2-D (N >= 3) folds a's batch dims into its rows: reshape a to (prod(batch) * M, K),
 *     one 2-D prims.matmul, reshape back to batch + (M, N) (Thunder's path for linear-like matmuls);
 *   - otherwise the batch dims broadcast (right-aligned) and both operands are expanded with
 *     prims.broadcast_in_dim before prims.matmul.
 * No dtype promotion: mixed dtypes are the prim's error, as PyTorch refuses them too. */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

static th_status shape_mismatch(const char *op, const th_value *a, const th_value *b) {
  return th_error(TH_ERR_RUNTIME, "%s: mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)", op,
                  (long long)(a->ndim >= 2 ? a->shape[a->ndim - 2] : 1), (long long)a->shape[a->ndim - 1],
                  (long long)b->shape[b->ndim - 2], (long long)b->shape[b->ndim - 1]);
}

/* Right-aligned broadcast of two batch shapes. */
static th_status broadcast_batch(const char *op, const int64_t *a, int na, const int64_t *b, int nb, int64_t *out,
                                 int *n) {
  *n = na > nb ? na : nb;
  for (int i = 0; i < *n; i++) {
    int ia = na - *n + i, ib = nb - *n + i;
    int64_t x = ia >= 0 ? a[ia] : 1, y = ib >= 0 ? b[ib] : 1;
    if (x != y && x != 1 && y != 1)
      return th_error(TH_ERR_RUNTIME, "%s: Attempting to broadcast a dimension of length %lld!", op,
                      (long long)(x == 1 ? x : y));
    out[i] = x == 1 ? y : x;
  }
  return TH_OK;
}

/* PyTorch's matrix products take one dtype (no promotion: "expected m1 and m2 to have the same dtype");
 * the message names the op, the argument and both dtypes. */
static th_status same_dtype(const char *op, const th_value *a, const th_value *b, const char *bname) {
  if (a->dtype == b->dtype) return TH_OK;
  return th_error(TH_ERR_RUNTIME,
                  "%s: expected %s to have the dtype of input, %s, but got %s (no type promotion in "
                  "matrix products)",
                  op, bname, th_dtype_name(a->dtype), th_dtype_name(b->dtype));
}

static th_status matmul(th_trace *tr, const char *op, th_arg a, th_arg b, th_arg *out) {
  const th_value *va = a.u.value, *vb = b.u.value;
  TH_TRY(same_dtype(op, va, vb, "other"));
  if (va->ndim == 0 || vb->ndim == 0)
    return th_error(TH_ERR_RUNTIME, "%s: both arguments to matmul need to be at least 1D, but they are %dD and %dD", op,
                    va->ndim, vb->ndim);
  if (va->ndim == 1 || vb->ndim == 1) return th_tu_call2(tr, TH_OP_prims_matmul, a, b, out);
  int64_t k_a = va->shape[va->ndim - 1], k_b = vb->shape[vb->ndim - 2];
  if (k_a != k_b) return shape_mismatch(op, va, vb);
  if (va->ndim >= 3 && vb->ndim == 2) {
    int64_t rows, shape2[2], out_shape[TH_MAX_DIMS];
    th_meta_numel(va->shape, va->ndim - 1, &rows); /* bounded by th_value_new_tensor; -1 fails the reshape */
    shape2[0] = rows;
    shape2[1] = k_a;
    th_arg a2, r;
    TH_TRY(th_tu_reshape(tr, a, 2, shape2, &a2));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, a2, b, &r));
    memcpy(out_shape, va->shape, sizeof(int64_t) * (size_t)(va->ndim - 1));
    out_shape[va->ndim - 1] = vb->shape[1];
    return th_tu_reshape(tr, r, va->ndim, out_shape, out);
  }
  int64_t batch[TH_MAX_DIMS], full[TH_MAX_DIMS];
  int nbatch;
  TH_TRY(broadcast_batch(op, va->shape, va->ndim - 2, vb->shape, vb->ndim - 2, batch, &nbatch));
  memcpy(full, batch, sizeof(int64_t) * (size_t)nbatch);
  full[nbatch] = va->shape[va->ndim - 2];
  full[nbatch + 1] = k_a;
  TH_TRY(th_tu_expand(tr, op, &a, nbatch + 2, full));
  full[nbatch] = k_b;
  full[nbatch + 1] = vb->shape[vb->ndim - 1];
  TH_TRY(th_tu_expand(tr, op, &b, nbatch + 2, full));
  return th_tu_call2(tr, TH_OP_prims_matmul, a, b, out);
}

th_status ltorch_matmul_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return matmul(tr, sym->qualname, args[0], args[1], out);
}

/* bmm: both 3-D with equal batch sizes (no broadcasting), then prims.matmul. */
static th_status check_bmm(const char *op, const th_value *a, const th_value *b) {
  if (a->ndim != 3) return th_error(TH_ERR_RUNTIME, "%s: batch1 must be a 3D tensor", op);
  if (b->ndim != 3) return th_error(TH_ERR_RUNTIME, "%s: batch2 must be a 3D tensor", op);
  TH_TRY(same_dtype(op, a, b, "mat2"));
  if (b->shape[0] != a->shape[0] || b->shape[1] != a->shape[2])
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected size for first two dimensions of batch2 tensor to be: [%lld, %lld] but got: [%lld, "
                    "%lld].",
                    op, (long long)a->shape[0], (long long)a->shape[2], (long long)b->shape[0], (long long)b->shape[1]);
  return TH_OK;
}

static th_status check_mm(const char *op, const th_value *a, const th_value *b) {
  if (a->ndim != 2) return th_error(TH_ERR_RUNTIME, "%s: self must be a matrix", op);
  if (b->ndim != 2) return th_error(TH_ERR_RUNTIME, "%s: mat2 must be a matrix", op);
  TH_TRY(same_dtype(op, a, b, "mat2"));
  if (a->shape[1] != b->shape[0]) return shape_mismatch(op, a, b);
  return TH_OK;
}

th_status ltorch_bmm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(check_bmm(sym->qualname, args[0].u.value, args[1].u.value));
  return th_tu_call2(tr, TH_OP_prims_matmul, args[0], args[1], out);
}

th_status ltorch_mm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(check_mm(sym->qualname, args[0].u.value, args[1].u.value));
  return th_tu_call2(tr, TH_OP_prims_matmul, args[0], args[1], out);
}

/* linear(a, w, bias) is prims.linear itself: executors (BLAS, autocast rules) claim the prim. */
th_status ltorch_linear_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call3(tr, TH_OP_prims_linear, args[0], args[1], args[2], out);
}

/* beta * bias + alpha * (a @ b); beta == 0 ignores bias (NaN included), as PyTorch. For integer
 * tensors PyTorch truncates alpha and beta to integers (addmm(i, i, i, alpha=1.6, beta=0.2) is
 * 1 * (a @ b) + 0 * bias: an int64 result), so the multipliers are the truncated ints there. */
static th_status add_product(th_trace *tr, const char *op, const th_arg *args, th_arg prod, th_arg *out) {
  double alpha, beta;
  TH_TRY(th_tu_float(op, "alpha", &args[4], &alpha));
  TH_TRY(th_tu_float(op, "beta", &args[3], &beta));
  th_arg alpha_arg = args[4], beta_arg = args[3];
  if (th_dtype_is_integer(prod.u.value->dtype)) {
    alpha = trunc(alpha);
    beta = trunc(beta);
    alpha_arg = th_arg_int((int64_t)alpha);
    beta_arg = th_arg_int((int64_t)beta);
  }
  if (alpha != 1.0) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, prod, alpha_arg, &prod));
  if (beta == 0.0) {
    *out = prod;
    return TH_OK;
  }
  th_arg bias = args[0];
  if (beta != 1.0) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, bias, beta_arg, &bias));
  return th_tu_call2(tr, TH_OP_ltorch_add, bias, prod, out);
}

/* bias, a, b of addmm/baddbmm: bfloat16 and float16 operands computed in float32 and the result
 * rounded once, as PyTorch's CPU kernels do (a GEMM accumulating in float32 with beta * bias +
 * alpha * product applied before the one rounding). */
static th_status matmul_add(th_trace *tr, const char *op, const th_arg *args, th_arg *out) {
  th_dtype dt = args[1].u.value->dtype;
  bool widen = (dt == TH_BF16 || dt == TH_F16) && args[0].kind == TH_ARG_VALUE && args[0].u.value->dtype == dt &&
               args[2].u.value->dtype == dt;
  th_arg w[5];
  memcpy(w, args, sizeof w);
  if (widen)
    for (int i = 0; i < 3; i++) TH_TRY(th_tu_convert(tr, &w[i], TH_F32));
  th_arg prod;
  TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, w[1], w[2], &prod));
  TH_TRY(add_product(tr, op, w, prod, out));
  return widen ? th_tu_convert(tr, out, dt) : TH_OK;
}

th_status ltorch_addmm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(check_mm(sym->qualname, args[1].u.value, args[2].u.value));
  return matmul_add(tr, sym->qualname, args, out);
}

th_status ltorch_baddbmm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(check_bmm(sym->qualname, args[1].u.value, args[2].u.value));
  return matmul_add(tr, sym->qualname, args, out);
}

/* outer(a, b) = a[:, None] * b[None, :] */
th_status ltorch_outer_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = args[0].u.value, *b = args[1].u.value;
  if (a->ndim != 1 || b->ndim != 1)
    return th_error(TH_ERR_RUNTIME, "%s: outer: expected both inputs to be 1-D vectors, but got %dD and %dD",
                    sym->qualname, a->ndim, b->ndim);
  th_arg ac, br;
  TH_TRY(th_tu_unsqueeze(tr, args[0], 1, &ac));
  TH_TRY(th_tu_unsqueeze(tr, args[1], 0, &br));
  return th_tu_call2(tr, TH_OP_ltorch_mul, ac, br, out);
}
