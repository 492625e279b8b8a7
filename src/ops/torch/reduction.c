/* reduction.c — torch-level reductions: sum, mean, prod, amax, amin, var, std, var_mean, std_mean,
 * argmax, argmin, max, min.
 *
 * As Thunder's _reduction: the input is converted to its computation dtype (f16/bf16 -> f32), the prim
 * reduces over canonical dims (all dims for dim=None or []), keepdim re-inserts the reduced dims with
 * broadcast_in_dim, and the result is converted to the result dtype. sum/prod of bool or integer
 * tensors accumulate and return int64 (PyTorch); mean divides the float sum by the element count before
 * the single conversion back (PyTorch's CPU path for f16/bf16: float sum -> div -> cast). */
#include <string.h>

#include "ops/torch/torch_util.h"

static th_status reduce_prim(th_trace *tr, th_op_id prim, th_arg x, int nd, const int64_t *dims, th_arg *out) {
  th_arg items[TH_MAX_DIMS];
  return th_tu_call2(tr, prim, x, th_tu_ints(items, nd, dims), out);
}

th_status th_tu_reduce(th_trace *tr, const char *op, th_op_id prim, th_arg a, int nd, const int64_t *dims, bool keepdim,
                       bool has_dtype, th_dtype dtype, th_arg *out) {
  const th_value *v = a.u.value;
  th_dtype in_dt = has_dtype ? dtype : v->dtype;
  if (prim == TH_OP_prims_amax || prim == TH_OP_prims_amin)
    for (int i = 0; i < nd; i++)
      if (v->shape[dims[i]] == 0)
        return th_error(TH_ERR_INDEX, "%s: %s(): Expected reduction dim %lld to have non-zero size.", op,
                        prim == TH_OP_prims_amax ? "amax" : "amin", (long long)dims[i]);
  th_arg x = a;
  TH_TRY(th_tu_convert(tr, &x, th_tu_computation_dtype(in_dt)));
  TH_TRY(reduce_prim(tr, prim, x, nd, dims, out));
  if (keepdim && v->ndim > 0) TH_TRY(th_tu_keepdim(tr, *out, v->ndim, v->shape, nd, dims, out));
  return th_tu_convert(tr, out, in_dt);
}

/* Reads (dim, keepdim) at args[1], args[2] and an optional dtype at args[3]. */
static th_status reduction_args(const char *op, const th_arg *args, bool with_dtype, int64_t dims[TH_MAX_DIMS], int *nd,
                                bool *keepdim, bool *has_dtype, th_dtype *dtype) {
  const th_value *v = args[0].u.value;
  TH_TRY(th_tu_reduction_dims(op, &args[1], v->ndim, dims, nd));
  TH_TRY(th_tu_bool(op, "keepdim", &args[2], keepdim));
  *has_dtype = false;
  if (with_dtype) TH_TRY(th_tu_dtype_arg(op, "dtype", &args[3], dtype, has_dtype));
  return TH_OK;
}

/* sum and prod: exact inputs accumulate in (and return) int64 unless a dtype is given. */
static th_status sum_prod(th_trace *tr, const th_symbol *sym, const th_arg *args, th_op_id prim, th_arg *out) {
  int64_t dims[TH_MAX_DIMS];
  int nd;
  bool keepdim, has_dtype;
  th_dtype dtype;
  TH_TRY(reduction_args(sym->qualname, args, true, dims, &nd, &keepdim, &has_dtype, &dtype));
  if (!has_dtype && th_meta_dtype_is_exact(args[0].u.value->dtype)) {
    has_dtype = true;
    dtype = TH_I64;
  }
  return th_tu_reduce(tr, sym->qualname, prim, args[0], nd, dims, keepdim, has_dtype, dtype, out);
}

th_status ltorch_sum_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return sum_prod(tr, sym, args, TH_OP_prims_sum, out);
}
th_status ltorch_prod_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return sum_prod(tr, sym, args, TH_OP_prims_prod, out);
}

th_status ltorch_mean_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  int64_t dims[TH_MAX_DIMS];
  int nd;
  bool keepdim, has_dtype;
  th_dtype dtype;
  TH_TRY(reduction_args(op, args, true, dims, &nd, &keepdim, &has_dtype, &dtype));
  th_dtype rdt = has_dtype ? dtype : v->dtype;
  if (th_meta_dtype_is_exact(rdt))
    return th_error(TH_ERR_RUNTIME,
                    "%s: mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
                    "dtype. Got: %s",
                    op, th_dtype_name(rdt));
  int64_t ext[TH_MAX_DIMS], nelem;
  for (int i = 0; i < nd; i++) ext[i] = v->shape[dims[i]];
  if (!th_meta_numel(ext, nd, &nelem)) /* values are bounded (th_value_new_tensor); kept as a guard */
    return th_error(TH_ERR_RUNTIME, "%s: the number of reduced elements overflows int64", op);
  th_arg x = args[0];
  TH_TRY(th_tu_convert(tr, &x, th_tu_computation_dtype(rdt)));
  TH_TRY(reduce_prim(tr, TH_OP_prims_sum, x, nd, dims, out));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, *out, th_arg_float((double)nelem), out));
  if (keepdim && v->ndim > 0) TH_TRY(th_tu_keepdim(tr, *out, v->ndim, v->shape, nd, dims, out));
  return th_tu_convert(tr, out, rdt);
}

static th_status minmax(th_trace *tr, const th_symbol *sym, const th_arg *args, th_op_id prim, th_arg *out) {
  int64_t dims[TH_MAX_DIMS];
  int nd;
  bool keepdim, has_dtype;
  th_dtype dtype;
  TH_TRY(reduction_args(sym->qualname, args, false, dims, &nd, &keepdim, &has_dtype, &dtype));
  return th_tu_reduce(tr, sym->qualname, prim, args[0], nd, dims, keepdim, false, TH_BOOL, out);
}
th_status ltorch_amax_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return minmax(tr, sym, args, TH_OP_prims_amax, out);
}
th_status ltorch_amin_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return minmax(tr, sym, args, TH_OP_prims_amin, out);
}

/* ---- var / std ------------------------------------------------------------------------------------ */

enum { VAR, STD, VAR_MEAN, STD_MEAN };

/* var/std/var_mean/std_mean(a, dim=None, unbiased=None, keepdim=False, *, correction=None): the
 * correction defaults to 1; unbiased=True/False means 1/0; giving both is an error. A bool in dim's
 * place is PyTorch's other overload, var(input, unbiased): all dims, that unbiased, nothing else. */
static th_status var_family(th_trace *tr, const th_symbol *sym, const th_arg *args, int kind, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  int64_t dims[TH_MAX_DIMS];
  int nd;
  bool keepdim;
  const th_arg *dim_arg = &args[1], *unbiased_arg = &args[2];
  th_arg none = th_arg_none();
  if (args[1].kind == TH_ARG_BOOL) {
    if (args[2].kind != TH_ARG_NONE || args[4].kind != TH_ARG_NONE)
      return th_error(TH_ERR_TYPE, "%s: unbiased given twice (as dim and as unbiased or correction)", op);
    dim_arg = &none;
    unbiased_arg = &args[1];
  }
  TH_TRY(th_tu_reduction_dims(op, dim_arg, v->ndim, dims, &nd));
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], &keepdim));
  double correction = 1.0;
  if (unbiased_arg->kind != TH_ARG_NONE && args[4].kind != TH_ARG_NONE)
    return th_error(TH_ERR_RUNTIME, "%s: cannot specify both unbiased and correction", op);
  if (unbiased_arg->kind != TH_ARG_NONE) {
    bool unbiased;
    TH_TRY(th_tu_bool(op, "unbiased", unbiased_arg, &unbiased));
    correction = unbiased ? 1.0 : 0.0;
  } else if (args[4].kind != TH_ARG_NONE) {
    TH_TRY(th_tu_float(op, "correction", &args[4], &correction));
  }
  if (th_meta_dtype_is_exact(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: std and var only support floating point and complex dtypes", op);
  th_arg x = args[0], items[TH_MAX_DIMS], res[2];
  TH_TRY(th_tu_convert(tr, &x, th_tu_computation_dtype(v->dtype)));
  th_arg pargs[2] = {x, th_tu_ints(items, nd, dims)};
  static const char *const kw[1] = {"correction"};
  th_arg kwargs[1] = {th_arg_float(correction)};
  int nres = 1;
  if (kind == VAR || kind == STD) {
    TH_TRY(th_tu_call_kw(tr, TH_OP_prims_var, 2, pargs, 1, kw, kwargs, &res[0]));
  } else {
    th_arg vm;
    TH_TRY(th_tu_call_kw(tr, TH_OP_prims_var_mean, 2, pargs, 1, kw, kwargs, &vm));
    res[0] = vm.u.seq.items[0];
    res[1] = vm.u.seq.items[1];
    nres = 2;
  }
  if (kind == STD || kind == STD_MEAN) TH_TRY(th_tu_call1(tr, TH_OP_prims_sqrt, res[0], &res[0]));
  for (int i = 0; i < nres; i++) {
    if (keepdim && v->ndim > 0) TH_TRY(th_tu_keepdim(tr, res[i], v->ndim, v->shape, nd, dims, &res[i]));
    TH_TRY(th_tu_convert(tr, &res[i], v->dtype));
  }
  if (nres == 1) {
    *out = res[0];
    return TH_OK;
  }
  return th_tu_tuple_out(tr, 2, res, out);
}

th_status ltorch_var_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return var_family(tr, sym, args, VAR, out);
}
th_status ltorch_std_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return var_family(tr, sym, args, STD, out);
}
th_status ltorch_var_mean_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return var_family(tr, sym, args, VAR_MEAN, out);
}
th_status ltorch_std_mean_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return var_family(tr, sym, args, STD_MEAN, out);
}

/* ---- argmax / argmin / max / min -------------------------------------------------------------------- */

/* prims.argmax/argmin over one dim (or the flattened tensor for dim=None); keepdim keeps the reduced
 * dim (all dims as 1 for dim=None) as Thunder's _argmaxmin_helper. */
static th_status arg_reduce(th_trace *tr, const char *op, th_op_id prim, th_arg a, const th_arg *dim_arg, bool keepdim,
                            th_arg *out) {
  const th_value *v = a.u.value;
  th_arg dim = th_arg_none();
  int d = -1;
  if (dim_arg->kind != TH_ARG_NONE) {
    int64_t raw;
    TH_TRY(th_meta_int(op, "dim", dim_arg, &raw));
    TH_TRY(th_meta_canonical_dim(op, raw, v->ndim, &d));
    dim = th_arg_int(d);
    if (v->ndim > 0 && v->shape[d] == 0)
      return th_error(TH_ERR_INDEX, "%s: Expected reduction dim %d to have non-zero size.", op, d);
  } else if (th_value_numel(v) == 0) {
    return th_error(TH_ERR_RUNTIME, "%s: Expected reduction dim to be specified for input.numel() == 0.", op);
  }
  TH_TRY(th_tu_call2(tr, prim, a, dim, out));
  if (!keepdim || v->ndim == 0) return TH_OK;
  if (d >= 0) return th_tu_unsqueeze(tr, *out, d, out);
  int64_t ones[TH_MAX_DIMS], all[TH_MAX_DIMS];
  for (int i = 0; i < v->ndim; i++) {
    ones[i] = 1;
    all[i] = i;
  }
  return th_tu_keepdim(tr, *out, v->ndim, ones, v->ndim, all, out);
}

th_status ltorch_argmax_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  bool keepdim;
  TH_TRY(th_tu_bool(sym->qualname, "keepdim", &args[2], &keepdim));
  return arg_reduce(tr, sym->qualname, TH_OP_prims_argmax, args[0], &args[1], keepdim, out);
}
th_status ltorch_argmin_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  bool keepdim;
  TH_TRY(th_tu_bool(sym->qualname, "keepdim", &args[2], &keepdim));
  return arg_reduce(tr, sym->qualname, TH_OP_prims_argmin, args[0], &args[1], keepdim, out);
}

/* max(a) -> amax over everything; max(a, other_tensor) -> maximum; max(a, dim, keepdim) ->
 * (values, indices). min likewise. */
static th_status max_min(th_trace *tr, const th_symbol *sym, const th_arg *args, bool is_max, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  const th_arg *dim = &args[1];
  th_op_id red = is_max ? TH_OP_prims_amax : TH_OP_prims_amin;
  if (th_meta_is_tensor(dim))
    return th_tu_call2(tr, is_max ? TH_OP_ltorch_maximum : TH_OP_ltorch_minimum, args[0], *dim, out);
  if (dim->kind == TH_ARG_NONE) {
    int64_t all[TH_MAX_DIMS];
    for (int i = 0; i < v->ndim; i++) all[i] = i;
    if (th_value_numel(v) == 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: %s(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction "
                      "dim with the 'dim' argument.",
                      op, is_max ? "max" : "min");
    return th_tu_reduce(tr, op, red, args[0], v->ndim, all, false, false, TH_BOOL, out);
  }
  bool keepdim;
  int64_t raw, d1[1];
  int d;
  TH_TRY(th_tu_bool(op, "keepdim", &args[2], &keepdim));
  TH_TRY(th_meta_int(op, "dim", dim, &raw));
  TH_TRY(th_meta_canonical_dim(op, raw, v->ndim, &d));
  d1[0] = d;
  th_arg res[2];
  TH_TRY(th_tu_reduce(tr, op, red, args[0], v->ndim > 0 ? 1 : 0, d1, keepdim, false, TH_BOOL, &res[0]));
  th_arg dim_arg = th_arg_int(d);
  TH_TRY(arg_reduce(tr, op, is_max ? TH_OP_prims_argmax : TH_OP_prims_argmin, args[0], &dim_arg, keepdim, &res[1]));
  return th_tu_tuple_out(tr, 2, res, out);
}

th_status ltorch_max_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return max_min(tr, sym, args, true, out);
}
th_status ltorch_min_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return max_min(tr, sym, args, false, out);
}
