/* linalg_lapack.c — torch.linalg's decompositions, solves and what derives from them, on the prims of
 * prims/linalg_lapack.c (solve, slogdet, cholesky, eigh, svd) and the matrix products:
 *   inv, inv_ex          solve(A, I)
 *   det, slogdet, logdet sign * exp(logabsdet); slogdet; logabsdet, NaN where sign < 0
 *   solve, solve_ex      broadcast batch dims, vector right-hand sides, left=False through A^T
 *   cholesky(_ex)        the lower factor (upper: its transpose)
 *   solve_triangular, triangular_solve   a solve with the triangle of A (tril/triu: the gradient
 *                        reaches only that triangle, as PyTorch's)
 *   eigvalsh, svdvals    the eigenvalues / singular values
 *   matrix_power         PyTorch's binary powering with matmul (n < 0: of the inverse)
 * PyTorch computes these for float32 and float64 only on the CPU; other dtypes get its errors. The
 * *_ex variants return info = 0: thunder_c's kernels raise where LAPACK reports a failure (a singular
 * matrix, one not positive-definite) rather than return a partial result. */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

static const char *torch_type_name(th_dtype dt) {
  switch (dt) {
    case TH_F32: return "Float";
    case TH_F64: return "Double";
    case TH_BF16: return "BFloat16";
    case TH_F16: return "Half";
    case TH_I64: return "Long";
    case TH_I32: return "Int";
    case TH_I16: return "Short";
    case TH_I8: return "Char";
    case TH_U8: return "Byte";
    case TH_BOOL: return "Bool";
    default: return th_dtype_name(dt);
  }
}

/* PyTorch's checks of a linalg input: a float32/float64 tensor with >= 2 dims (square when `square`). */
static th_status check_input(const char *fn, const char *an, const th_arg *a, bool square) {
  if (!th_meta_is_tensor(a)) return th_error(TH_ERR_TYPE, "%s: Expected %s to be a Tensor", fn, an);
  const th_value *v = a->u.value;
  if (!th_dtype_is_float(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: Expected a floating point or complex tensor as input. Got %s", fn,
                    torch_type_name(v->dtype));
  if (v->dtype != TH_F32 && v->dtype != TH_F64)
    return th_error(TH_ERR_RUNTIME, "%s: Low precision dtypes not supported. Got %s", fn, torch_type_name(v->dtype));
  if (v->ndim < 2) return th_error(TH_ERR_RUNTIME, "%s: The input tensor %s must have at least 2 dimensions.", fn, an);
  if (square && v->shape[v->ndim - 1] != v->shape[v->ndim - 2])
    return th_error(TH_ERR_RUNTIME, "%s: %s must be batches of square matrices, but they are %lld by %lld matrices", fn,
                    an, (long long)v->shape[v->ndim - 2], (long long)v->shape[v->ndim - 1]);
  return TH_OK;
}

/* int32 zeros of a's batch shape (the info of the *_ex ops). */
static th_status info_zeros(th_trace *tr, const th_value *a, th_arg *out) {
  return th_tu_full(tr, a->ndim - 2, a->shape, th_arg_int(0), a->device, TH_I32, out);
}

static th_status pair(th_trace *tr, th_arg x, th_arg y, th_arg *out) {
  th_arg items[2] = {x, y};
  return th_tu_tuple_out(tr, 2, items, out);
}

/* A^-1 B for square A (..., n, n) and B (..., n, k) whose batch dims broadcast. */
static th_status solve_left(th_trace *tr, const char *fn, th_arg a, th_arg b, th_arg *out) {
  const th_value *av = a.u.value, *bv = b.u.value;
  int64_t n = av->shape[av->ndim - 1];
  if (bv->shape[bv->ndim - 2] != n)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Incompatible shapes of A and B for the equation AX = B (%lldx%lld and %lldx%lld)", fn,
                    (long long)n, (long long)n, (long long)bv->shape[bv->ndim - 2], (long long)bv->shape[bv->ndim - 1]);
  int na = av->ndim - 2, nb = bv->ndim - 2, nd = na > nb ? na : nb;
  int64_t batch[TH_MAX_DIMS], sa[TH_MAX_DIMS], sb[TH_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    int ia = na - nd + i, ib = nb - nd + i;
    int64_t x = ia >= 0 ? av->shape[ia] : 1, y = ib >= 0 ? bv->shape[ib] : 1;
    if (x != y && x != 1 && y != 1)
      return th_error(TH_ERR_RUNTIME,
                      "%s: The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton "
                      "dimension %d",
                      fn, (long long)x, (long long)y, i);
    batch[i] = x == 1 ? y : x;
  }
  memcpy(sa, batch, sizeof(int64_t) * (size_t)nd);
  memcpy(sb, batch, sizeof(int64_t) * (size_t)nd);
  sa[nd] = sa[nd + 1] = n;
  sb[nd] = n, sb[nd + 1] = bv->shape[bv->ndim - 1];
  TH_TRY(th_tu_expand(tr, fn, &a, nd + 2, sa));
  TH_TRY(th_tu_expand(tr, fn, &b, nd + 2, sb));
  return th_tu_call2(tr, TH_OP_prims_linalg_solve, a, b, out);
}

static th_status same_dtype(const char *fn, const th_arg *a, const th_arg *b) {
  th_dtype x = a->u.value->dtype, y = b->u.value->dtype;
  if (x == y) return TH_OK;
  return th_error(TH_ERR_RUNTIME,
                  "%s: Expected A and B to have the same dtype, but found A of type %s and B of type %s instead", fn,
                  torch_type_name(x), torch_type_name(y));
}

/* ---- inv, det, slogdet, logdet -------------------------------------------------------------------- */

static th_status inv(th_trace *tr, const char *fn, th_arg a, th_arg *out) {
  TH_TRY(check_input(fn, "A", &a, true));
  th_arg eye;
  TH_TRY(th_tu_eye_like(tr, a.u.value, &eye));
  return th_tu_call2(tr, TH_OP_prims_linalg_solve, a, eye, out);
}

th_status ltorch_linalg_inv_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return inv(tr, "linalg.inv", args[0], out);
}

th_status ltorch_linalg_inv_ex_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  th_arg x, info;
  TH_TRY(inv(tr, "linalg.inv_ex", args[0], &x));
  TH_TRY(info_zeros(tr, args[0].u.value, &info));
  return pair(tr, x, info, out);
}

th_status ltorch_linalg_slogdet_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  TH_TRY(check_input("linalg.slogdet", "A", &args[0], true));
  return th_tu_call1(tr, TH_OP_prims_linalg_slogdet, args[0], out);
}

th_status ltorch_linalg_det_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  TH_TRY(check_input("linalg.det", "A", &args[0], true));
  th_arg r, e;
  TH_TRY(th_tu_call1(tr, TH_OP_prims_linalg_slogdet, args[0], &r));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_exp, r.u.seq.items[1], &e));
  return th_tu_call2(tr, TH_OP_ltorch_mul, r.u.seq.items[0], e, out);
}

/* logdet: log|det| where det > 0, -inf where det == 0 (logabsdet is -inf there), NaN where det < 0. */
th_status ltorch_logdet_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  TH_TRY(check_input("logdet", "A", &args[0], true));
  th_arg r, neg;
  TH_TRY(th_tu_call1(tr, TH_OP_prims_linalg_slogdet, args[0], &r));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_lt, r.u.seq.items[0], th_arg_float(0.0), &neg));
  return th_tu_call3(tr, TH_OP_ltorch_where, neg, th_arg_float(NAN), r.u.seq.items[1], out);
}

/* ---- solve ------------------------------------------------------------------------------------------- */

static th_status solve(th_trace *tr, const char *fn, th_arg a, th_arg b, bool left, th_arg *out) {
  TH_TRY(check_input(fn, "A", &a, true));
  if (!th_meta_is_tensor(&b)) return th_error(TH_ERR_TYPE, "%s: Expected B to be a Tensor", fn);
  TH_TRY(same_dtype(fn, &a, &b));
  const th_value *av = a.u.value, *bv = b.u.value;
  /* PyTorch's linalg_solve_is_vector_rhs: B is a vector (or a batch of them) */
  bool vec = bv->ndim == 1;
  if (!vec && bv->ndim == av->ndim - 1) {
    vec = true;
    for (int d = 0; d < bv->ndim; d++) vec = vec && bv->shape[d] == av->shape[d];
  }
  if (!left) TH_TRY(th_tu_matrix_transpose(tr, a, &a));
  if (vec) {
    th_arg b2;
    TH_TRY(th_tu_unsqueeze(tr, b, bv->ndim, &b2));
    TH_TRY(solve_left(tr, fn, a, b2, out));
    int64_t last = out->u.value->ndim - 1;
    return th_tu_squeeze(tr, *out, 1, &last, out);
  }
  if (bv->ndim < 2) return th_error(TH_ERR_RUNTIME, "%s: The input tensor B must have at least 2 dimensions.", fn);
  if (!left) {
    TH_TRY(th_tu_matrix_transpose(tr, b, &b));
    TH_TRY(solve_left(tr, fn, a, b, out));
    return th_tu_matrix_transpose(tr, *out, out);
  }
  return solve_left(tr, fn, a, b, out);
}

th_status ltorch_linalg_solve_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  bool left;
  TH_TRY(th_tu_bool(sym->qualname, "left", &args[2], &left));
  return solve(tr, "linalg.solve", args[0], args[1], left, out);
}

th_status ltorch_linalg_solve_ex_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  bool left;
  TH_TRY(th_tu_bool(sym->qualname, "left", &args[2], &left));
  th_arg x, info;
  TH_TRY(solve(tr, "linalg.solve_ex", args[0], args[1], left, &x));
  /* info has the result's batch shape (a vector result has one dim of its own, a matrix two) */
  const th_value *xv = x.u.value, *bv = args[1].u.value;
  bool vec = bv->ndim == 1 || bv->ndim == args[0].u.value->ndim - 1;
  if (vec && bv->ndim > 1)
    for (int d = 0; d < bv->ndim; d++) vec = vec && bv->shape[d] == args[0].u.value->shape[d];
  TH_TRY(th_tu_full(tr, xv->ndim - (vec ? 1 : 2), xv->shape, th_arg_int(0), xv->device, TH_I32, &info));
  return pair(tr, x, info, out);
}

/* ---- triangular solves -------------------------------------------------------------------------------- */

/* The triangle of a that a triangular solve reads (unitriangular: with a unit diagonal). */
static th_status triangle(th_trace *tr, th_arg a, bool upper, bool unit, th_arg *out) {
  TH_TRY(
    th_tu_call2(tr, upper ? TH_OP_ltorch_triu : TH_OP_ltorch_tril, a, th_arg_int(unit ? (upper ? 1 : -1) : 0), out));
  if (!unit) return TH_OK;
  th_arg eye;
  TH_TRY(th_tu_eye_like(tr, a.u.value, &eye));
  return th_tu_call2(tr, TH_OP_ltorch_add, *out, eye, out);
}

th_status ltorch_linalg_solve_triangular_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *fn = "linalg.solve_triangular";
  bool upper, left, unit;
  TH_TRY(th_tu_bool(sym->qualname, "upper", &args[2], &upper));
  TH_TRY(th_tu_bool(sym->qualname, "left", &args[3], &left));
  TH_TRY(th_tu_bool(sym->qualname, "unitriangular", &args[4], &unit));
  TH_TRY(check_input(fn, "A", &args[0], true));
  TH_TRY(check_input(fn, "B", &args[1], false));
  TH_TRY(same_dtype(fn, &args[0], &args[1]));
  th_arg a, b = args[1];
  TH_TRY(triangle(tr, args[0], upper, unit, &a));
  if (left) return solve_left(tr, fn, a, b, out);
  TH_TRY(th_tu_matrix_transpose(tr, a, &a));
  TH_TRY(th_tu_matrix_transpose(tr, b, &b));
  TH_TRY(solve_left(tr, fn, a, b, out));
  return th_tu_matrix_transpose(tr, *out, out);
}

/* triangular_solve(b, A, upper=True, transpose=False, unitriangular=False) -> (solution, cloned_coefficient) */
th_status ltorch_triangular_solve_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *fn = "triangular_solve";
  bool upper, trans, unit;
  TH_TRY(th_tu_bool(sym->qualname, "upper", &args[2], &upper));
  TH_TRY(th_tu_bool(sym->qualname, "transpose", &args[3], &trans));
  TH_TRY(th_tu_bool(sym->qualname, "unitriangular", &args[4], &unit));
  TH_TRY(check_input(fn, "A", &args[1], true));
  TH_TRY(check_input(fn, "b", &args[0], false));
  TH_TRY(same_dtype(fn, &args[1], &args[0]));
  th_arg a, x, clone;
  TH_TRY(triangle(tr, args[1], upper, unit, &a));
  if (trans) TH_TRY(th_tu_matrix_transpose(tr, a, &a));
  TH_TRY(solve_left(tr, fn, a, args[0], &x));
  /* PyTorch's cloned_coefficient: A broadcast to the solution's batch dims */
  const th_value *xv = x.u.value, *av = args[1].u.value;
  int64_t shape[TH_MAX_DIMS];
  memcpy(shape, xv->shape, sizeof(int64_t) * (size_t)xv->ndim);
  shape[xv->ndim - 1] = shape[xv->ndim - 2] = av->shape[av->ndim - 1];
  clone = args[1];
  TH_TRY(th_tu_expand(tr, fn, &clone, xv->ndim, shape));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_clone, clone, &clone));
  return pair(tr, x, clone, out);
}

/* ---- cholesky ------------------------------------------------------------------------------------------ */

static th_status cholesky(th_trace *tr, const char *fn, th_arg a, bool upper, th_arg *out) {
  TH_TRY(check_input(fn, "A", &a, true));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_linalg_cholesky, a, out));
  return upper ? th_tu_matrix_transpose(tr, *out, out) : TH_OK;
}

th_status ltorch_linalg_cholesky_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  bool upper;
  TH_TRY(th_tu_bool(sym->qualname, "upper", &args[1], &upper));
  return cholesky(tr, "linalg.cholesky", args[0], upper, out);
}

th_status ltorch_cholesky_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  bool upper;
  TH_TRY(th_tu_bool(sym->qualname, "upper", &args[1], &upper));
  return cholesky(tr, "cholesky", args[0], upper, out);
}

th_status ltorch_linalg_cholesky_ex_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  bool upper;
  TH_TRY(th_tu_bool(sym->qualname, "upper", &args[1], &upper));
  th_arg l, info;
  TH_TRY(cholesky(tr, "linalg.cholesky_ex", args[0], upper, &l));
  TH_TRY(info_zeros(tr, args[0].u.value, &info));
  return pair(tr, l, info, out);
}

/* ---- eigvalsh, svdvals ---------------------------------------------------------------------------------- */

th_status ltorch_linalg_eigvalsh_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  const char *fn = "linalg.eigvalsh";
  TH_TRY(check_input(fn, "A", &args[0], true));
  const char *uplo = args[1].kind == TH_ARG_STR ? args[1].u.s : "L";
  if (strcmp(uplo, "L") && strcmp(uplo, "U") && strcmp(uplo, "l") && strcmp(uplo, "u"))
    return th_error(TH_ERR_RUNTIME, "%s: Expected UPLO argument to be 'L' or 'U', but got %s", fn, uplo);
  th_arg a = args[0], r;
  if (uplo[0] == 'U' || uplo[0] == 'u')
    TH_TRY(th_tu_matrix_transpose(tr, a, &a)); /* the lower triangle of A^T is A's upper */
  TH_TRY(th_tu_call1(tr, TH_OP_prims_linalg_eigh, a, &r));
  *out = r.u.seq.items[0];
  return TH_OK;
}

th_status ltorch_linalg_svdvals_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  TH_TRY(check_input("linalg.svdvals", "A", &args[0], false));
  if (args[1].kind != TH_ARG_NONE)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "torch.linalg.svdvals: the driver argument (CUDA only) is not supported");
  th_arg r;
  TH_TRY(th_tu_call1(tr, TH_OP_prims_linalg_svd, args[0], &r));
  *out = r.u.seq.items[1];
  return TH_OK;
}

/* ---- matrix_power ---------------------------------------------------------------------------------------- */

th_status ltorch_linalg_matrix_power_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  const char *fn = "linalg.matrix_power";
  if (!th_meta_is_tensor(&args[0])) return th_error(TH_ERR_TYPE, "%s: Expected A to be a Tensor", fn);
  const th_value *av = args[0].u.value;
  if (av->ndim < 2 || av->shape[av->ndim - 1] != av->shape[av->ndim - 2])
    return th_error(TH_ERR_RUNTIME, "%s: A must be batches of square matrices, but they are %lld by %lld matrices", fn,
                    (long long)(av->ndim >= 2 ? av->shape[av->ndim - 2] : 0),
                    (long long)(av->ndim >= 1 ? av->shape[av->ndim - 1] : 0));
  if (args[1].kind != TH_ARG_INT) return th_error(TH_ERR_TYPE, "%s: Expected n to be an int", fn);
  int64_t n = args[1].u.i;
  th_arg a = args[0];
  if (n == 0) return th_tu_eye_like(tr, av, out);
  if (n < 0) {
    TH_TRY(inv(tr, fn, a, &a));
    n = -n;
  }
  if (n == 1) return th_tu_call1(tr, TH_OP_ltorch_clone, a, out);
  th_arg z = th_arg_none(), res = th_arg_none();
  while (n > 0) {
    bool bit = n % 2;
    n /= 2;
    if (z.kind == TH_ARG_NONE)
      z = a;
    else
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_matmul, z, z, &z));
    if (bit) {
      if (res.kind == TH_ARG_NONE)
        res = z;
      else
        TH_TRY(th_tu_call2(tr, TH_OP_ltorch_matmul, res, z, &res));
    }
  }
  *out = res;
  return TH_OK;
}
