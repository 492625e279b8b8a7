/* linalg.c — metas of the linear-algebra prims: matmul and linear.
 *
 * Strict as Thunder's prims: one dtype (messages print PyTorch's dtype names, "Expected
 * a.dtype=float32 and b.dtype=bfloat16 to be the same"), one device, no broadcasting of batch
 * dimensions (the torch layer's matmul expands or reshapes first). fp8 operands are rejected: fp8
 * matmuls go through the scaled-mm path, not these prims. Shape mismatches name both shapes. The
 * output is like a (device, dtype) and requires grad if any operand does. */
#include <inttypes.h>
#include <string.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

static th_status same_device(const char *op, const char *an, const th_value *a, const char *bn, const th_value *b) {
  if (th_device_eq(a->device, b->device)) return TH_OK;
  char d0[32], d1[32];
  return th_error(TH_ERR_RUNTIME, "%s: Expected %s.device=%s and %s.device=%s to be the same", op, an,
                  th_device_str(a->device, d0, sizeof d0), bn, th_device_str(b->device, d1, sizeof d1));
}

static th_status no_fp8(const char *op, const th_value *a) {
  if (!th_dtype_is_fp8(a->dtype)) return TH_OK;
  return th_error(TH_ERR_RUNTIME, "%s: Unsupported input dtype %s (fp8 matmuls need explicit scales)", op,
                  th_meta_dtype_repr(a->dtype));
}

/* "Expected a.shape[-1]=3 to equal b.shape[-2]=4 (a.shape=[2, 3], b.shape=[4, 5])" */
static th_status extent_mismatch(const char *op, const char *an, const char *ai, const th_value *a, int64_t av,
                                 const char *bn, const char *bi, const th_value *b, int64_t bv) {
  char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF];
  return th_error(TH_ERR_RUNTIME,
                  "%s: Expected %s.shape[%s]=%" PRId64 " to equal %s.shape[%s]=%" PRId64 " (%s.shape=%s, %s.shape=%s)",
                  op, an, ai, av, bn, bi, bv, an, th_meta_shape_str(a->shape, a->ndim, s0, sizeof s0), bn,
                  th_meta_shape_str(b->shape, b->ndim, s1, sizeof s1));
}

/* ---- matmul(a, b) ------------------------------------------------------------------------------------
 * Both of rank >= 1 (NotImplementedError otherwise).
 *   1-D . 1-D : a[0] == b[0]            -> ()
 *   1-D @ N-D : a[0] == b[-2]           -> b[:-2] + (b[-1],)
 *   N-D @ 1-D : a[-1] == b[0]           -> a[:-1]
 *   N-D @ N-D : identical batch dims, a[-1] == b[-2] -> a[:-1] + (b[-1],) */

th_status prims_matmul_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *b = th_meta_tensor(&args[1]);
  if (a->ndim < 1 || b->ndim < 1)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: Expected a and b to have at least one dimension, but a.ndim=%d and b.ndim=%d", op, a->ndim,
                    b->ndim);
  TH_TRY(same_device(op, "a", a, "b", b));
  if (a->dtype != b->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: Expected a.dtype=%s and b.dtype=%s to be the same", op,
                    th_dtype_name(a->dtype), th_dtype_name(b->dtype));
  TH_TRY(no_fp8(op, a));
  int64_t shape[TH_MAX_DIMS];
  int ndim = 0;
  if (a->ndim == 1 && b->ndim == 1) {
    if (a->shape[0] != b->shape[0]) return extent_mismatch(op, "a", "0", a, a->shape[0], "b", "0", b, b->shape[0]);
  } else if (a->ndim == 1) {
    if (a->shape[0] != b->shape[b->ndim - 2])
      return extent_mismatch(op, "a", "0", a, a->shape[0], "b", "-2", b, b->shape[b->ndim - 2]);
    for (int d = 0; d < b->ndim - 2; d++) shape[ndim++] = b->shape[d];
    shape[ndim++] = b->shape[b->ndim - 1];
  } else if (b->ndim == 1) {
    if (a->shape[a->ndim - 1] != b->shape[0])
      return extent_mismatch(op, "a", "-1", a, a->shape[a->ndim - 1], "b", "0", b, b->shape[0]);
    for (int d = 0; d < a->ndim - 1; d++) shape[ndim++] = a->shape[d];
  } else {
    bool same_batch = a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)(a->ndim - 2));
    if (!same_batch) {
      char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF], s2[TH_META_SHAPE_BUF], s3[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected the batch dimensions of a (%s) and the batch dimensions of b (%s) to be the same "
                      "(a.shape=%s, b.shape=%s)",
                      op, th_meta_shape_str(a->shape, a->ndim - 2, s0, sizeof s0),
                      th_meta_shape_str(b->shape, b->ndim - 2, s1, sizeof s1),
                      th_meta_shape_str(a->shape, a->ndim, s2, sizeof s2),
                      th_meta_shape_str(b->shape, b->ndim, s3, sizeof s3));
    }
    if (a->shape[a->ndim - 1] != b->shape[b->ndim - 2])
      return extent_mismatch(op, "a", "-1", a, a->shape[a->ndim - 1], "b", "-2", b, b->shape[b->ndim - 2]);
    for (int d = 0; d < a->ndim - 1; d++) shape[ndim++] = a->shape[d];
    shape[ndim++] = b->shape[b->ndim - 1];
  }
  return th_meta_new_tensor(tr, a->dtype, a->device, ndim, shape, a->requires_grad || b->requires_grad, out);
}

/* ---- linear(a, w, bias) ------------------------------------------------------------------------------
 * a (..., in), w (out, in) 2-D, bias None or (out,); one device; a, w (and bias) one dtype
 * ("Expected a.dtype=bfloat16 and w.dtype=float32 to be the same!"). Output a[:-1] + (out,). */

th_status prims_linear_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *w = th_meta_tensor(&args[1]), *bias = th_meta_tensor(&args[2]);
  char s0[TH_META_SHAPE_BUF];
  if (a->ndim < 1)
    return th_error(TH_ERR_RUNTIME, "%s: Expected a to have one or more dimensions, but it has a.ndim=0", op);
  if (w->ndim != 2)
    return th_error(TH_ERR_RUNTIME, "%s: Expected w to have two dimensions, but w.shape=%s", op,
                    th_meta_shape_str(w->shape, w->ndim, s0, sizeof s0));
  TH_TRY(same_device(op, "a", a, "w", w));
  if (a->dtype != w->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: Expected a.dtype=%s and w.dtype=%s to be the same!", op,
                    th_dtype_name(a->dtype), th_dtype_name(w->dtype));
  TH_TRY(no_fp8(op, a));
  if (w->shape[1] != a->shape[a->ndim - 1])
    return extent_mismatch(op, "a", "-1", a, a->shape[a->ndim - 1], "w", "1", w, w->shape[1]);
  bool rg = a->requires_grad || w->requires_grad;
  if (bias) {
    TH_TRY(same_device(op, "a", a, "bias", bias));
    if (bias->dtype != a->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: Expected a.dtype=%s and bias.dtype=%s to be the same!", op,
                      th_dtype_name(a->dtype), th_dtype_name(bias->dtype));
    if (bias->ndim != 1 || bias->shape[0] != w->shape[0]) {
      char s1[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected bias to have shape [%" PRId64 "] (w.shape[0]), but bias.shape=%s (w.shape=%s)", op,
                      w->shape[0], th_meta_shape_str(bias->shape, bias->ndim, s0, sizeof s0),
                      th_meta_shape_str(w->shape, w->ndim, s1, sizeof s1));
    }
    rg |= bias->requires_grad;
  }
  int64_t shape[TH_MAX_DIMS];
  int ndim = 0;
  for (int d = 0; d < a->ndim - 1; d++) shape[ndim++] = a->shape[d];
  shape[ndim++] = w->shape[0];
  return th_meta_new_tensor(tr, a->dtype, a->device, ndim, shape, rg, out);
}

/* ---- vjp rules (ops/vjp.h) ----------------------------------------------------------------------------
 * matmul (PyTorch's matmul backward by cases): N-D @ N-D: ga = g @ b^T, gb = a^T @ g (same batch);
 * N-D @ 1-D: ga = g[..., None] * b, gb = a2^T @ g1 over the flattened batch; 1-D @ N-D: ga = b' @ g1
 * with b's batch folded into the contraction, gb = a[:, None] * g[..., None, :]; 1-D . 1-D: g * b, g * a.
 * linear: ga = g @ w, gw = g2^T @ a2 (batch flattened), gbias = sum of g over the batch. */

static int64_t numel_upto(const th_value *v, int n) {
  int64_t m = 1;
  for (int i = 0; i < n; i++) m *= v->shape[i];
  return m;
}

static th_status matmul_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  th_arg a = b->args[0], c = b->args[1], g = cts[0], t, u;
  const th_value *av = a.u.value, *cv = c.u.value, *gv = g.u.value;
  bool da = th_vjp_is_float_tensor(&a), dc = th_vjp_is_float_tensor(&c);
  if (av->ndim == 1 && cv->ndim == 1) {
    if (da) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, c, &grads[0]));
    if (dc) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, a, &grads[1]));
  } else if (av->ndim >= 2 && cv->ndim >= 2) {
    if (da) {
      TH_TRY(th_tu_matrix_transpose(tr, c, &t));
      TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, g, t, &grads[0]));
    }
    if (dc) {
      TH_TRY(th_tu_matrix_transpose(tr, a, &t));
      TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, t, g, &grads[1]));
    }
  } else if (cv->ndim == 1) { /* a (..., m, k) @ c (k) -> (..., m) */
    int64_t k = cv->shape[0], M = numel_upto(av, av->ndim - 1), s2[2] = {M, k};
    if (da) {
      TH_TRY(th_tu_unsqueeze(tr, g, gv->ndim, &t));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, t, c, &grads[0]));
    }
    if (dc) {
      TH_TRY(th_tu_reshape(tr, a, 2, s2, &t));
      TH_TRY(th_tu_matrix_transpose(tr, t, &t));
      TH_TRY(th_tu_reshape(tr, g, 1, &M, &u));
      TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, t, u, &grads[1]));
    }
  } else { /* a (k) @ c (..., k, n) -> (..., n) */
    int64_t k = av->shape[0], n = cv->shape[cv->ndim - 1], B = numel_upto(cv, cv->ndim - 2);
    if (da) { /* ga[k] = sum over batch and n of c[..., k, n] * g[..., n] */
      int64_t perm[TH_MAX_DIMS], s2[2] = {k, B * n}, bn = B * n;
      int j = 0;
      perm[j++] = cv->ndim - 2;
      for (int i = 0; i < cv->ndim; i++)
        if (i != cv->ndim - 2) perm[j++] = i;
      TH_TRY(th_tu_transpose(tr, c, perm, &t));
      TH_TRY(th_tu_reshape(tr, t, 2, s2, &t));
      TH_TRY(th_tu_reshape(tr, g, 1, &bn, &u));
      TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, t, u, &grads[0]));
    }
    if (dc) {
      int64_t s2[2] = {k, 1};
      TH_TRY(th_tu_reshape(tr, a, 2, s2, &t));
      TH_TRY(th_tu_unsqueeze(tr, g, gv->ndim - 1, &u));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, t, u, &grads[1]));
    }
  }
  return TH_OK;
}

static th_status linear_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  th_arg a = b->args[0], w = b->args[1], bias = b->args[2], g = cts[0], t, u, g2;
  const th_value *av = a.u.value, *wv = w.u.value;
  int64_t in = wv->shape[1], outf = wv->shape[0], M = numel_upto(av, av->ndim - 1);
  int64_t sg[2] = {M, outf}, sa[2] = {M, in};
  if (th_vjp_is_float_tensor(&a)) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_matmul, g, w, &grads[0]));
  if (th_vjp_is_float_tensor(&w) || th_vjp_is_float_tensor(&bias)) TH_TRY(th_tu_reshape(tr, g, 2, sg, &g2));
  if (th_vjp_is_float_tensor(&w)) {
    TH_TRY(th_tu_matrix_transpose(tr, g2, &t));
    TH_TRY(th_tu_reshape(tr, a, 2, sa, &u));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_matmul, t, u, &grads[1]));
  }
  if (th_vjp_is_float_tensor(&bias)) {
    th_arg di[1];
    int64_t zero = 0;
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, g2, th_tu_ints(di, 1, &zero), &grads[2]));
  }
  return TH_OK;
}

const th_vjp_entry th_vjp_table_prims_linalg[] = {
  {TH_OP_prims_matmul, TH_VJP_RULE, matmul_vjp},
  {TH_OP_prims_linear, TH_VJP_RULE, linear_vjp},
};
const int th_vjp_table_prims_linalg_n = (int)(sizeof th_vjp_table_prims_linalg / sizeof th_vjp_table_prims_linalg[0]);
