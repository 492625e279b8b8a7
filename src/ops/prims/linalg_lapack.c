/* linalg_lapack.c — metas and vjp rules of the matrix decomposition and solve prims, whose eager
 * kernels call LAPACK (executors/eager/linalg_lapack.c):
 *   linalg_solve(a, b)   -> x             a (..., n, n), b (..., n, k), identical batch dims: a @ x = b
 *   linalg_slogdet(a)    -> (sign, logabsdet)     a (..., n, n) -> two tensors of shape (...)
 *   linalg_cholesky(a)   -> l             the lower factor of a (..., n, n) = l @ l^T (a's lower triangle)
 *   linalg_eigh(a)       -> (w, v)        a's lower triangle: w (..., n) ascending, v (..., n, n)
 *   linalg_svd(a)        -> (u, s, vh)    reduced: a (..., m, n), k = min(m, n): u (..., m, k), s (..., k),
 *                                         vh (..., k, n)
 * Strict: one dtype, float32 or float64 (PyTorch has no CPU linalg kernels for bfloat16/float16 or
 * integers; the torch layer gives its errors), no broadcasting of batch dims. Real matrices only.
 *
 * The rules are PyTorch's (derivatives.yaml, FunctionsManual.cpp) written with the prims:
 *   solve:     gb = solve(a^T, g), ga = -gb @ x^T
 *   slogdet:   ga = g_logabsdet * a^-T (sign has no gradient for real a)
 *   cholesky:  phi = tril(l^T gl); p = (phi + tril(phi, -1)^T) / 2; ga = l^-T p l^-1
 *   eigh:      ga = v diag(gw) v^T (eigenvalues' cotangent; the eigenvectors' is NotImplementedError)
 *   svd:       ga = u diag(gs) vh (singular values' cotangent; the singular vectors' is NotImplementedError) */
#include <inttypes.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

/* a is a float32/float64 tensor with at least two dims (square when `square`). */
static th_status check_matrix(const char *op, const char *an, const th_value *a, bool square) {
  char s[TH_META_SHAPE_BUF];
  if (a->dtype != TH_F32 && a->dtype != TH_F64)
    return th_error(TH_ERR_RUNTIME, "%s: Expected %s to be a float32 or float64 tensor, but %s.dtype=%s", op, an, an,
                    th_dtype_name(a->dtype));
  if (a->ndim < 2)
    return th_error(TH_ERR_RUNTIME, "%s: Expected %s to have at least two dimensions, but %s.shape=%s", op, an, an,
                    th_meta_shape_str(a->shape, a->ndim, s, sizeof s));
  if (square && a->shape[a->ndim - 1] != a->shape[a->ndim - 2])
    return th_error(TH_ERR_RUNTIME, "%s: Expected %s to be a batch of square matrices, but %s.shape=%s", op, an, an,
                    th_meta_shape_str(a->shape, a->ndim, s, sizeof s));
  return TH_OK;
}

static th_status new_tuple(th_trace *tr, int n, th_arg **items) {
  *items = th_arena_alloc(tr->arena, (size_t)n * sizeof(th_arg));
  return *items ? TH_OK : TH_ERR_NOMEM;
}

th_status prims_linalg_solve_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *b = th_meta_tensor(&args[1]);
  TH_TRY(check_matrix(op, "a", a, true));
  TH_TRY(check_matrix(op, "b", b, false));
  char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF];
  bool ok = a->dtype == b->dtype && a->ndim == b->ndim && th_device_eq(a->device, b->device) &&
            b->shape[b->ndim - 2] == a->shape[a->ndim - 1];
  for (int d = 0; ok && d < a->ndim - 2; d++) ok = a->shape[d] == b->shape[d];
  if (!ok)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected a (..., n, n) and b (..., n, k) of one dtype and device with identical batch dims, "
                    "but a.shape=%s (%s), b.shape=%s (%s)",
                    op, th_meta_shape_str(a->shape, a->ndim, s0, sizeof s0), th_dtype_name(a->dtype),
                    th_meta_shape_str(b->shape, b->ndim, s1, sizeof s1), th_dtype_name(b->dtype));
  return th_meta_new_tensor(tr, a->dtype, a->device, b->ndim, b->shape, a->requires_grad || b->requires_grad, out);
}

th_status prims_linalg_slogdet_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  TH_TRY(check_matrix(sym->qualname, "a", a, true));
  th_arg *items;
  TH_TRY(new_tuple(tr, 2, &items));
  TH_TRY(th_meta_new_tensor(tr, a->dtype, a->device, a->ndim - 2, a->shape, false, &items[0]));
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, a->ndim - 2, a->shape, &items[1]));
  *out = th_arg_tuple(2, items);
  return TH_OK;
}

th_status prims_linalg_cholesky_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  TH_TRY(check_matrix(sym->qualname, "a", a, true));
  return th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, a->shape, out);
}

th_status prims_linalg_eigh_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  TH_TRY(check_matrix(sym->qualname, "a", a, true));
  th_arg *items;
  TH_TRY(new_tuple(tr, 2, &items));
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, a->ndim - 1, a->shape, &items[0]));
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, a->ndim, a->shape, &items[1]));
  *out = th_arg_tuple(2, items);
  return TH_OK;
}

th_status prims_linalg_svd_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a = th_meta_tensor(&args[0]);
  TH_TRY(check_matrix(sym->qualname, "a", a, false));
  int nd = a->ndim;
  int64_t m = a->shape[nd - 2], n = a->shape[nd - 1], k = m < n ? m : n, shape[TH_MAX_DIMS];
  for (int d = 0; d < nd - 2; d++) shape[d] = a->shape[d];
  th_arg *items;
  TH_TRY(new_tuple(tr, 3, &items));
  shape[nd - 2] = m, shape[nd - 1] = k;
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, nd, shape, &items[0]));
  shape[nd - 2] = k;
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, nd - 1, shape, &items[1]));
  shape[nd - 2] = k, shape[nd - 1] = n;
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, nd, shape, &items[2]));
  *out = th_arg_tuple(3, items);
  return TH_OK;
}

/* ---- vjp rules ---------------------------------------------------------------------------------------- */

static th_status solve_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  th_arg a = b->args[0], x = th_vjp_out(b), at, gb, xt, t;
  TH_TRY(th_tu_matrix_transpose(tr, a, &at));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_linalg_solve, at, cts[0], &gb));
  if (th_vjp_is_float_tensor(&b->args[1])) grads[1] = gb;
  if (th_vjp_is_float_tensor(&a)) {
    TH_TRY(th_tu_matrix_transpose(tr, x, &xt));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, gb, xt, &t));
    TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, t, &grads[0]));
  }
  return TH_OK;
}

/* g (batch) -> g[..., None, None] */
static th_status unsq2(th_trace *tr, th_arg g, th_arg *out) {
  int nd = g.u.value->ndim;
  TH_TRY(th_tu_unsqueeze(tr, g, nd, out));
  return th_tu_unsqueeze(tr, *out, nd + 1, out);
}

static th_status slogdet_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (cts[1].kind == TH_ARG_NONE) return th_vjp_zeros_like(tr, b->args[0].u.value, &grads[0]);
  th_arg a = b->args[0], at, eye, inv_t, g;
  TH_TRY(th_tu_matrix_transpose(tr, a, &at));
  TH_TRY(th_tu_eye_like(tr, a.u.value, &eye));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_linalg_solve, at, eye, &inv_t));
  TH_TRY(unsq2(tr, cts[1], &g));
  return th_tu_call2(tr, TH_OP_ltorch_mul, g, inv_t, &grads[0]);
}

/* x @ l^-1 = solve(l^T, x^T)^T */
static th_status solve_right(th_trace *tr, th_arg x, th_arg l, th_arg *out) {
  th_arg lt, xt;
  TH_TRY(th_tu_matrix_transpose(tr, l, &lt));
  TH_TRY(th_tu_matrix_transpose(tr, x, &xt));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_linalg_solve, lt, xt, out));
  return th_tu_matrix_transpose(tr, *out, out);
}

static th_status cholesky_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  th_arg l = th_vjp_out(b), lt, phi, low, p;
  TH_TRY(th_tu_matrix_transpose(tr, l, &lt));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, lt, cts[0], &phi));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_tril, phi, &phi));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_tril, phi, th_arg_int(-1), &low));
  TH_TRY(th_tu_matrix_transpose(tr, low, &low));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, phi, low, &p));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, p, th_arg_float(0.5), &p));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_linalg_solve, lt, p, &p)); /* l^-T p */
  return solve_right(tr, p, l, &grads[0]);                      /* (l^-T p) l^-1 */
}

/* v diag(gw) w^T, diag(gw) as gw[..., None, :] scaling v's columns. */
static th_status scaled_outer(th_trace *tr, th_arg v, th_arg gw, th_arg wt, th_arg *out) {
  th_arg g, t;
  TH_TRY(th_tu_unsqueeze(tr, gw, gw.u.value->ndim - 1, &g));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, v, g, &t));
  return th_tu_call2(tr, TH_OP_prims_matmul, t, wt, out);
}

static th_status eigh_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (cts[1].kind != TH_ARG_NONE)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "torch.linalg.eigh: the gradient through the eigenvectors is not supported by thunder_c (only "
                    "the eigenvalues')");
  th_arg v = b->out.u.seq.items[1], vt;
  TH_TRY(th_tu_matrix_transpose(tr, v, &vt));
  return scaled_outer(tr, v, cts[0], vt, &grads[0]);
}

static th_status svd_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (cts[0].kind != TH_ARG_NONE || cts[2].kind != TH_ARG_NONE)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "torch.linalg.svd: the gradient through the singular vectors is not supported by thunder_c (only "
                    "the singular values')");
  return scaled_outer(tr, b->out.u.seq.items[0], cts[1], b->out.u.seq.items[2], &grads[0]);
}

const th_vjp_entry th_vjp_table_prims_linalg_lapack[] = {
  {TH_OP_prims_linalg_solve, TH_VJP_RULE, solve_vjp},       {TH_OP_prims_linalg_slogdet, TH_VJP_RULE, slogdet_vjp},
  {TH_OP_prims_linalg_cholesky, TH_VJP_RULE, cholesky_vjp}, {TH_OP_prims_linalg_eigh, TH_VJP_RULE, eigh_vjp},
  {TH_OP_prims_linalg_svd, TH_VJP_RULE, svd_vjp},
};
const int th_vjp_table_prims_linalg_lapack_n =
  (int)(sizeof th_vjp_table_prims_linalg_lapack / sizeof th_vjp_table_prims_linalg_lapack[0]);
