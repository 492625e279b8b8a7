/* reduction_more.c — the norms and other reductions of issue 22: torch.linalg.vector_norm, torch.norm
 * (vector and Frobenius cases).
 *
 * Each is a composite of the reduction prims in the computation dtype (float32 for bf16/f16), rounded
 * once to the result dtype, as PyTorch's CPU norm kernels accumulate in float and store once. */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

/* The p-norm of a (already in its computation dtype) over dims: ord 0 counts the nonzeros, +-inf is the
 * largest / smallest magnitude, 1 the sum of magnitudes, 2 sqrt of the sum of squares, else
 * (sum |a|^ord)^(1/ord). */
static th_status pnorm(th_trace *tr, th_arg a, double ord, int nd, const int64_t *dims, th_dtype comp, th_arg *out) {
  th_arg items[TH_MAX_DIMS], t;
  th_arg d = th_tu_ints(items, nd, dims);
  if (ord == 0.0) {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_ne, a, th_arg_float(0.0), &t));
    TH_TRY(th_tu_convert(tr, &t, comp));
    return th_tu_call2(tr, TH_OP_prims_sum, t, d, out);
  }
  if (isinf(ord)) {
    TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, a, &t));
    return th_tu_call2(tr, ord > 0 ? TH_OP_prims_amax : TH_OP_prims_amin, t, d, out);
  }
  if (ord == 1.0) {
    TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, a, &t));
    return th_tu_call2(tr, TH_OP_prims_sum, t, d, out);
  }
  if (ord == 2.0) {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, a, a, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, t, d, &t));
    return th_tu_call1(tr, TH_OP_prims_sqrt, t, out);
  }
  TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, a, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_pow, t, th_arg_float(ord), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, t, d, &t));
  return th_tu_call2(tr, TH_OP_prims_pow, t, th_arg_float(1.0 / ord), out);
}

/* vector_norm(x, ord, dims, keepdim, dtype) with PyTorch's checks; `what` names the function. */
static th_status vector_norm(th_trace *tr, const char *op, const char *what, th_arg x, double ord, const th_arg *dim,
                             bool keepdim, bool has_dtype, th_dtype dtype, th_arg *out) {
  const th_value *v = th_meta_tensor(&x);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: %s: Expected a floating point or complex tensor as input. Got %s", op, what,
                    th_tu_scalar_type_name(v->dtype));
  if (has_dtype && (!th_dtype_is_float(dtype) || th_dtype_is_fp8(dtype)))
    return th_error(TH_ERR_RUNTIME, "%s: %s: dtype should be floating point or complex. Got %s", op, what,
                    th_tu_scalar_type_name(dtype));
  if (isnan(ord)) return th_error(TH_ERR_RUNTIME, "%s: %s: ord must not be NaN", op, what);
  int64_t dims[TH_MAX_DIMS];
  int nd;
  TH_TRY(th_tu_reduction_dims(op, dim, v->ndim, dims, &nd));
  if (ord < 0 || isinf(ord)) {
    bool empty = false;
    for (int i = 0; i < nd; i++) empty |= v->shape[dims[i]] == 0;
    if (empty)
      return th_error(TH_ERR_INDEX,
                      "%s: %s cannot compute the %g norm on an empty tensor because the operation does not have an "
                      "identity",
                      op, what, ord);
  }
  th_dtype rdt = has_dtype ? dtype : v->dtype;
  th_dtype comp = th_tu_computation_dtype(rdt);
  th_arg a = x;
  TH_TRY(th_tu_convert(tr, &a, comp));
  TH_TRY(pnorm(tr, a, ord, nd, dims, comp, out));
  if (keepdim && v->ndim > 0) TH_TRY(th_tu_keepdim(tr, *out, v->ndim, v->shape, nd, dims, out));
  return th_tu_convert(tr, out, rdt);
}

/* torch.linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None) */
th_status ltorch_linalg_vector_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  double ord;
  bool keepdim, has_dtype;
  th_dtype dtype = TH_F32;
  TH_TRY(th_tu_float(op, "ord", &args[1], &ord));
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], &keepdim));
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[4], &dtype, &has_dtype));
  return vector_norm(tr, op, "linalg.vector_norm", args[0], ord, &args[2], keepdim, has_dtype, dtype, out);
}

/* torch.norm(input, p='fro', dim=None, keepdim=False, out=None, dtype=None): a number p is the vector
 * p-norm over dim (all dims for None); 'fro' (and None) the 2-norm over dim; 'nuc' (the nuclear norm, a
 * singular value decomposition) is not supported. */
th_status ltorch_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  bool keepdim, has_dtype;
  th_dtype dtype = TH_F32;
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], &keepdim));
  if (args[4].kind != TH_ARG_NONE) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: torch.norm: out= is not supported", op);
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[5], &dtype, &has_dtype));
  double ord = 2.0;
  if (args[1].kind == TH_ARG_STR) {
    const char *p = args[1].u.s;
    if (!strcmp(p, "nuc"))
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: torch.norm(p='nuc') (the nuclear norm) is not supported", op);
    if (strcmp(p, "fro"))
      return th_error(TH_ERR_RUNTIME, "%s: only valid string values are 'fro' and 'nuc', found %s", op, p);
    if (has_dtype) return th_error(TH_ERR_VALUE, "%s: dtype argument is not supported in frobenius norm", op);
  } else if (args[1].kind != TH_ARG_NONE) {
    TH_TRY(th_tu_float(op, "p", &args[1], &ord));
  }
  return vector_norm(tr, op, "linalg.vector_norm", args[0], ord, &args[2], keepdim, has_dtype, dtype, out);
}
