/* reduction.c — torch-level reductions: sum, mean, prod, amax, amin, var, std, var_mean, std_mean,
 * argmax, argmin, max, min.
 *
 * As Thunder's _reduction: the input is converted to its computation dtype (f16/bf16 -> f32), the prim
 * reduces over canonical dims (all dims for dim=None or []), keepdim re-inserts the reduced dims with
 * broadcast_in_dim, and the result is converted to the result dtype. sum/prod of bool or integer
 * tensors accumulate and return int64 (PyTorch); mean divides the float sum by the element count before
 * the single conversion back (PyTorch's CPU path for f16/bf16: float sum -> div -> cast). */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

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

/* The arguments of var/std/var_mean/std_mean(a, dim=None, unbiased=None, keepdim=False, *,
 * correction=None): the reduced dims, keepdim, the correction (default 1; unbiased=True/False means
 * 1/0; giving both is an error) and whether dim is None. A bool in dim's place is PyTorch's other
 * overload, var(input, unbiased): all dims (dim None), that unbiased, nothing else. */
static th_status var_args(const char *op, const th_arg *args, int64_t dims[TH_MAX_DIMS], int *nd, bool *keepdim,
                          double *correction, bool *dim_none) {
  const th_value *v = args[0].u.value;
  const th_arg *dim_arg = &args[1], *unbiased_arg = &args[2];
  th_arg none = th_arg_none();
  if (args[1].kind == TH_ARG_BOOL) {
    if (args[2].kind != TH_ARG_NONE || args[4].kind != TH_ARG_NONE)
      return th_error(TH_ERR_TYPE, "%s: unbiased given twice (as dim and as unbiased or correction)", op);
    dim_arg = &none;
    unbiased_arg = &args[1];
  }
  *dim_none = dim_arg->kind == TH_ARG_NONE;
  TH_TRY(th_tu_reduction_dims(op, dim_arg, v->ndim, dims, nd));
  TH_TRY(th_tu_bool(op, "keepdim", &args[3], keepdim));
  *correction = 1.0;
  if (unbiased_arg->kind != TH_ARG_NONE && args[4].kind != TH_ARG_NONE)
    return th_error(TH_ERR_RUNTIME, "%s: cannot specify both unbiased and correction", op);
  if (unbiased_arg->kind != TH_ARG_NONE) {
    bool unbiased;
    TH_TRY(th_tu_bool(op, "unbiased", unbiased_arg, &unbiased));
    *correction = unbiased ? 1.0 : 0.0;
  } else if (args[4].kind != TH_ARG_NONE) {
    TH_TRY(th_tu_float(op, "correction", &args[4], correction));
  }
  return TH_OK;
}

static th_status var_family(th_trace *tr, const th_symbol *sym, const th_arg *args, int kind, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  int64_t dims[TH_MAX_DIMS];
  int nd;
  bool keepdim, dim_none;
  double correction;
  TH_TRY(var_args(op, args, dims, &nd, &keepdim, &correction, &dim_none));
  if (th_meta_dtype_is_exact(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: std and var only support floating point and complex dtypes", op);
  /* std's variance is float64 for narrower inputs, as PyTorch's kernel takes the root of its float64
   * accumulation: the variance of float32 values beyond ~1.8e19 apart overflows float32, their
   * standard deviation does not. */
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  if ((kind == STD || kind == STD_MEAN) && comp == TH_F32) comp = TH_F64;
  th_arg x = args[0], items[TH_MAX_DIMS], res[2];
  TH_TRY(th_tu_convert(tr, &x, comp));
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

/* ---- vjp rules (ops/vjp.h) ----------------------------------------------------------------------------
 * var, std, var_mean, std_mean: PyTorch's var_backward, std_backward and their _mean variants, in the
 * computation dtype with one conversion of the gradient to the input's dtype. With N the number of
 * elements reduced and g the variance's cotangent (reduced dims kept):
 *   gx = (2 / (N - correction)) * g * (x - mean(x, dims))
 * except with dim=None (or a 0-dim input) and N - correction <= 0, where the forward divides by 0 (its
 * divisor is clamped at 0): gx = g * where(x == mean(x), nan, inf). std's cotangent reaches the
 * variance as g / (2 * std), 0 where std == 0 (through prims.sqrt it would be inf there, and inf * 0
 * in the variance's rule). The mean's cotangent of var_mean/std_mean adds g_mean / N.
 * max and min, PyTorch's backward of each overload (through prims.amax / amin a tie would split g and
 * a NaN result would make every gradient NaN):
 *   max(a, dim, keepdim) -> (values, indices): g goes to the index returned
 *                           (value_selecting_reduction_backward);
 *   max(a):                 g split evenly among the elements equal to the result, or among the NaNs
 *                           when it is NaN (evenly_distribute_backward);
 *   max(a, other):          maximum's rule (below). */

static th_status var_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  const char *op = b->sym->qualname;
  const th_value *v = a->u.value;
  th_op_id id = b->sym->id;
  bool is_std = id == TH_OP_ltorch_std || id == TH_OP_ltorch_std_mean;
  bool with_mean = id == TH_OP_ltorch_var_mean || id == TH_OP_ltorch_std_mean;
  if (th_value_numel(v) == 0) return th_vjp_zeros_like(tr, v, &grads[0]);
  int64_t dims[TH_MAX_DIMS];
  int nd = 0;
  bool keepdim = false, dim_none = false;
  double correction = 1.0;
  TH_TRY(var_args(op, b->args, dims, &nd, &keepdim, &correction, &dim_none));
  double n = 1.0;
  for (int i = 0; i < nd; i++) n *= (double)v->shape[dims[i]];
  th_dtype cd = th_tu_computation_dtype(v->dtype);
  th_arg x = *a, gv = cts[0], gm = with_mean ? cts[1] : th_arg_none(), acc = th_arg_none(), t, u, items[TH_MAX_DIMS];
  bool unreduce = !keepdim && v->ndim > 0; /* the cotangents get the reduced dims back as size 1 */
  TH_TRY(th_tu_convert(tr, &x, cd));
  if (gv.kind == TH_ARG_VALUE) {
    TH_TRY(th_tu_convert(tr, &gv, cd));
    if (is_std) { /* g / (2 * std), 0 where std == 0 */
      th_arg y = th_vjp_out(b), z;
      TH_TRY(th_tu_convert(tr, &y, cd));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, y, th_arg_float(2.0), &t));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, gv, t, &t));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, y, th_arg_float(0.0), &z));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), t, &gv));
    }
    if (unreduce) TH_TRY(th_tu_keepdim(tr, gv, v->ndim, v->shape, nd, dims, &gv));
    th_arg mean;
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_mean, x, th_tu_ints(items, nd, dims), th_arg_bool(true), &mean));
    double dof = n - correction;
    if ((dim_none || v->ndim == 0) && dof <= 0) { /* where(x == mean, nan, g * inf) */
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, x, mean, &u));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, gv, th_arg_float(INFINITY), &t));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, u, th_arg_float(NAN), t, &acc));
    } else {
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, x, mean, &u));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, gv, th_arg_float(dof == 0 ? INFINITY : 2.0 / dof), &t));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, t, u, &acc));
    }
  }
  if (gm.kind == TH_ARG_VALUE) {
    TH_TRY(th_tu_convert(tr, &gm, cd));
    if (unreduce) TH_TRY(th_tu_keepdim(tr, gm, v->ndim, v->shape, nd, dims, &gm));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, gm, th_arg_float(n), &t));
    if (acc.kind == TH_ARG_VALUE) {
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, acc, t, &acc));
    } else {
      TH_TRY(th_tu_expand(tr, op, &t, v->ndim, v->shape));
      acc = t;
    }
  }
  TH_TRY(th_tu_convert(tr, &acc, v->dtype));
  grads[0] = acc;
  return TH_OK;
}

/* max(a, other) / min(a, other): maximum's rule, a: where(a == other, g / 2, g), 0 where a < other
 * (min: a > other); other likewise with the comparison reversed; each summed back to its shape. */
static th_status extreme_pair_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads, bool is_max) {
  const char *op = b->sym->qualname;
  const th_arg *a0 = &b->args[0], *c0 = &b->args[1];
  bool da = th_vjp_is_float_tensor(a0), dc = th_vjp_is_float_tensor(c0);
  if (!da && !dc) return TH_OK;
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 2, b->args, TH_TU_PROMO_DEFAULT, &comp, &res));
  th_dtype cd = th_tu_computation_dtype(th_tu_tensor_dtype(comp));
  th_arg a = *a0, c = *c0, g = cts[0], t, eq, lose, r;
  TH_TRY(th_tu_convert(tr, &a, cd));
  TH_TRY(th_tu_convert(tr, &c, cd));
  TH_TRY(th_tu_convert(tr, &g, cd));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, a, c, &eq));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, th_arg_float(0.5), &t));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, eq, t, g, &t));
  for (int k = 0; k < 2; k++) {
    if (!(k == 0 ? da : dc)) continue;
    TH_TRY(th_tu_call2(tr, (k == 0) == is_max ? TH_OP_ltorch_lt : TH_OP_ltorch_gt, a, c, &lose));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, lose, th_arg_float(0.0), t, &r));
    TH_TRY(th_vjp_sum_to(tr, r, &b->args[k], &r));
    TH_TRY(th_tu_convert(tr, &r, b->args[k].u.value->dtype));
    grads[k] = r;
  }
  return TH_OK;
}

static th_status max_min_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const char *op = b->sym->qualname;
  bool is_max = b->sym->id == TH_OP_ltorch_max;
  const th_arg *a = &b->args[0], *dim = &b->args[1];
  if (th_meta_is_tensor(dim)) return extreme_pair_vjp(tr, b, cts, grads, is_max);
  if (!th_vjp_is_float_tensor(a) || cts[0].kind != TH_ARG_VALUE) return TH_OK;
  const th_value *v = a->u.value;
  th_dtype cd = th_tu_computation_dtype(v->dtype);
  th_arg x = *a, g = cts[0], r, m, t;
  TH_TRY(th_tu_convert(tr, &x, cd));
  TH_TRY(th_tu_convert(tr, &g, cd));
  if (dim->kind == TH_ARG_NONE) { /* evenly among the elements equal to y, or among the NaNs */
    th_arg y = th_vjp_out(b), ynan, xnan, cnt, items[TH_MAX_DIMS];
    int64_t all[TH_MAX_DIMS];
    for (int i = 0; i < v->ndim; i++) all[i] = i;
    TH_TRY(th_tu_convert(tr, &y, cd));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_ne, y, y, &ynan));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_ne, x, x, &xnan));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, x, y, &m));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, ynan, xnan, m, &m));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_convert_element_type, m, th_arg_dtype(cd), &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, t, th_tu_ints(items, v->ndim, all), &cnt));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_true_divide, g, cnt, &t));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, m, t, th_arg_float(0.0), &r));
  } else if (v->ndim == 0) {
    r = g;
  } else { /* to the index returned */
    int64_t raw;
    int d;
    bool keepdim;
    TH_TRY(th_meta_int(op, "dim", dim, &raw));
    TH_TRY(th_meta_canonical_dim(op, raw, v->ndim, &d));
    TH_TRY(th_tu_bool(op, "keepdim", &b->args[2], &keepdim));
    th_arg idx = b->out.u.seq.items[1], io, si[TH_MAX_DIMS], bi[1];
    if (!keepdim) {
      TH_TRY(th_tu_unsqueeze(tr, idx, d, &idx));
      TH_TRY(th_tu_unsqueeze(tr, g, d, &g));
    }
    int64_t dd = d;
    TH_TRY(th_tu_iota(tr, v->shape[d], 0, 1, v->device, TH_I64, &io));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, io, th_tu_ints(si, v->ndim, v->shape), th_tu_ints(bi, 1, &dd),
                       &io));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, io, idx, &m));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, m, g, th_arg_float(0.0), &r));
  }
  TH_TRY(th_tu_convert(tr, &r, v->dtype));
  grads[0] = r;
  return TH_OK;
}

const th_vjp_entry th_vjp_table_torch_reduction[] = {
  {TH_OP_ltorch_max, TH_VJP_RULE, max_min_vjp},  {TH_OP_ltorch_min, TH_VJP_RULE, max_min_vjp},
  {TH_OP_ltorch_var, TH_VJP_RULE, var_vjp},      {TH_OP_ltorch_std, TH_VJP_RULE, var_vjp},
  {TH_OP_ltorch_var_mean, TH_VJP_RULE, var_vjp}, {TH_OP_ltorch_std_mean, TH_VJP_RULE, var_vjp},
};
const int th_vjp_table_torch_reduction_n =
  (int)(sizeof th_vjp_table_torch_reduction / sizeof th_vjp_table_torch_reduction[0]);
