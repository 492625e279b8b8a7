/* norm.c — normalizations: batch_norm (torch.nn.functional.batch_norm, torch.native_batch_norm,
 * torch._native_batch_norm_legit), instance_norm, group_norm (and torch.native_group_norm),
 * torch.native_layer_norm, local_response_norm and normalize.
 *
 * Numerics follow PyTorch's CPU kernels: the input computes in its computation dtype (float32 for
 * bf16/f16); the per-channel statistics are float64 for a float32 computation (PyTorch accumulates
 * them in double, at::acc_type<float, false>); the output is x * alpha + beta with alpha = invstd *
 * weight and beta = bias - mean * alpha per channel (batch_norm_cpu_collect_linear_and_constant_terms),
 * rounded once to the input's dtype.
 *
 * In training mode with running statistics, batch_norm updates running_mean and running_var IN PLACE,
 * as eager does: prims.copy_ of momentum * batch_mean + (1 - momentum) * running_mean (and of the
 * unbiased batch variance into running_var) into the tensors passed. The Python tracer gives those
 * arguments their new versions (proxy.c: the destinations of an op's prims.copy_ take its outputs),
 * so a jitted nn.BatchNorm module's buffers change as eager's do. num_batches_tracked is the module's
 * own Python update (self.num_batches_tracked.add_(1)); momentum=None (the cumulative average) needs
 * float(num_batches_tracked), a data-dependent value the tracer cannot give (NotImplementedError). */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

/* norm_statistic(a): a new value equal to a (prims.convert_element_type to its own dtype); its vjp entry
 * is TH_VJP_NONDIFF, so a cotangent of the statistic reaches nothing. */
th_status ltorch_norm_statistic_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected a tensor", sym->qualname);
  return th_tu_call2(tr, TH_OP_prims_convert_element_type, args[0], th_arg_dtype(v->dtype), out);
}

static th_status no_grad_stat(th_trace *tr, th_arg *a) { return th_tu_call1(tr, TH_OP_ltorch_norm_statistic, *a, a); }

static bool given(const th_arg *a) { return a && a->kind != TH_ARG_NONE; }

static th_status float_input(const char *op, const char *kernel, const th_value *v) {
  if (!th_dtype_is_float(v->dtype) || th_dtype_is_fp8(v->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"%s\" not implemented for '%s'", op, kernel,
                    th_tu_scalar_type_name(v->dtype));
  return TH_OK;
}

/* A tensor argument that must hold `c` elements (a per-channel parameter or statistic), reshaped to (c,). */
static th_status channel_param(th_trace *tr, const char *op, const char *what, const th_arg *a, int64_t c,
                               th_arg *out) {
  const th_value *p = th_meta_tensor(a);
  if (!p) return th_error(TH_ERR_TYPE, "%s: expected %s to be a tensor", op, what);
  int64_t n;
  th_meta_numel(p->shape, p->ndim, &n);
  if (n != c)
    return th_error(TH_ERR_RUNTIME, "%s: %s should contain %lld elements not %lld", op, what, (long long)c,
                    (long long)n);
  int64_t shape[1] = {c};
  return th_tu_reshape(tr, *a, 1, shape, out);
}

/* A (C,) tensor broadcast along dim `cdim` of `v`'s shape. */
static th_status along_channel(th_trace *tr, th_arg c, const th_value *v, int cdim, th_arg *out) {
  th_arg si[TH_MAX_DIMS], bi[1];
  int64_t bd[1] = {cdim};
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, c, th_tu_ints(si, v->ndim, v->shape), th_tu_ints(bi, 1, bd),
                     out);
}

static th_status var_mean_prim(th_trace *tr, th_arg x, int nd, const int64_t *dims, th_arg *var, th_arg *mean) {
  th_arg items[TH_MAX_DIMS], vm;
  th_arg pargs[2] = {x, th_tu_ints(items, nd, dims)};
  const char *const names[1] = {"correction"};
  th_arg corr = th_arg_float(0.0);
  TH_TRY(th_tu_call_kw(tr, TH_OP_prims_var_mean, 2, pargs, 1, names, &corr, &vm));
  *var = vm.u.seq.items[0];
  *mean = vm.u.seq.items[1];
  return TH_OK;
}

/* new = momentum * stat + (1 - momentum) * running, in the statistics' dtype, then prims.copy_ into
 * running (converted to its dtype). */
static th_status update_running(th_trace *tr, th_arg running, th_arg stat, double momentum, th_dtype sdt) {
  const th_value *r = running.u.value;
  th_arg cur = running, t, u, upd;
  TH_TRY(th_tu_convert(tr, &cur, sdt));
  TH_TRY(th_tu_convert(tr, &stat, sdt));
  int64_t shape[1] = {r->shape[0]};
  if (r->ndim != 1) {
    th_meta_numel(r->shape, r->ndim, &shape[0]);
    TH_TRY(th_tu_reshape(tr, cur, 1, shape, &cur));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, stat, th_arg_float(momentum), &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, cur, th_arg_float(1.0 - momentum), &u));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, t, u, &t));
  if (r->ndim != 1) TH_TRY(th_tu_reshape(tr, t, r->ndim, r->shape, &t));
  TH_TRY(th_tu_convert(tr, &t, r->dtype));
  return th_tu_call2(tr, TH_OP_prims_copy_, t, running, &upd);
}

/* What batch_norm computes, for its three spellings. Statistics are over every dim but 1 (channels).
 * *smean and *sinvstd (when non-NULL) are native_batch_norm's save_mean / save_invstd: the batch's in
 * training, empty (0,) tensors in evaluation mode (PyTorch's CPU kernel). */
static th_status batch_norm_impl(th_trace *tr, const char *op, th_arg input, const th_arg *weight, const th_arg *bias,
                                 const th_arg *rmean, const th_arg *rvar, bool training, double momentum, double eps,
                                 th_arg *y, th_arg *smean, th_arg *sinvstd) {
  const th_value *v = th_meta_tensor(&input);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  TH_TRY(float_input(op, "batch_norm", v));
  if (v->ndim < 2 && v->ndim > 0 && v->shape[0] == 0 && !smean) { /* PyTorch returns an empty tensor */
    *y = input;
    return TH_OK;
  }
  if (v->ndim < 2)
    return th_error(TH_ERR_RUNTIME, "%s: Expected input to have at least 2 dimensions (N, C, ...), got %d", op,
                    v->ndim);
  if (!training && (!given(rmean) || !given(rvar)))
    return th_error(TH_ERR_RUNTIME, "%s: running_mean and running_var must be defined in evaluation mode", op);
  if (given(rmean) != given(rvar))
    return th_error(TH_ERR_RUNTIME, "%s: running_mean and running_var must both be given or both be None", op);
  int64_t c = v->shape[1], dims[TH_MAX_DIMS], count = 1;
  int nd = 0;
  for (int d = 0; d < v->ndim; d++)
    if (d != 1) {
      dims[nd++] = d;
      count *= v->shape[d];
    }
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  th_dtype sdt = comp == TH_F32 ? TH_F64 : comp;
  th_arg x = input, mean, var, invstd, w, b, rm, rv;
  TH_TRY(th_tu_convert(tr, &x, comp));
  if (given(rmean)) {
    TH_TRY(channel_param(tr, op, "running_mean", rmean, c, &rm));
    TH_TRY(channel_param(tr, op, "running_var", rvar, c, &rv));
  }
  if (training) {
    th_arg xs = x;
    TH_TRY(th_tu_convert(tr, &xs, sdt));
    TH_TRY(var_mean_prim(tr, xs, nd, dims, &var, &mean));
    if (given(rmean)) {
      th_arg unbiased;
      TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, var, th_arg_float((double)count / (double)(count - 1)), &unbiased));
      TH_TRY(update_running(tr, *rmean, mean, momentum, sdt));
      TH_TRY(update_running(tr, *rvar, unbiased, momentum, sdt));
    }
  } else {
    mean = rm;
    var = rv;
    TH_TRY(th_tu_convert(tr, &mean, sdt));
    TH_TRY(th_tu_convert(tr, &var, sdt));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, var, th_arg_float(eps), &invstd));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_rsqrt, invstd, &invstd));
  th_arg m = mean, alpha = invstd, beta;
  TH_TRY(th_tu_convert(tr, &m, comp));
  TH_TRY(th_tu_convert(tr, &alpha, comp));
  if (given(weight)) {
    TH_TRY(channel_param(tr, op, "weight", weight, c, &w));
    TH_TRY(th_tu_convert(tr, &w, comp));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, alpha, w, &alpha));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, m, alpha, &beta));
  if (given(bias)) {
    TH_TRY(channel_param(tr, op, "bias", bias, c, &b));
    TH_TRY(th_tu_convert(tr, &b, comp));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, b, beta, &beta));
  } else {
    TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, beta, &beta));
  }
  TH_TRY(along_channel(tr, alpha, v, 1, &alpha));
  TH_TRY(along_channel(tr, beta, v, 1, &beta));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, alpha, y));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, *y, beta, y));
  TH_TRY(th_tu_convert(tr, y, v->dtype));
  if (!smean) return TH_OK;
  /* save_mean / save_invstd: the dtype of the parameters (the input's when there are none) */
  th_dtype pdt = given(weight) ? weight->u.value->dtype : v->dtype;
  if (training) {
    *smean = mean;
    *sinvstd = invstd;
    TH_TRY(th_tu_convert(tr, smean, pdt));
    TH_TRY(th_tu_convert(tr, sinvstd, pdt));
    TH_TRY(no_grad_stat(tr, smean));
    return no_grad_stat(tr, sinvstd);
  }
  int64_t zero[1] = {0};
  TH_TRY(th_tu_full(tr, 1, zero, th_arg_float(0.0), v->device, pdt, smean));
  return th_tu_full(tr, 1, zero, th_arg_float(0.0), v->device, pdt, sinvstd);
}

/* torch.nn.functional.batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
 * eps), with F.batch_norm's own check of the batch size in training mode. */
th_status ltorch_batch_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  bool training;
  double momentum, eps;
  TH_TRY(th_tu_bool(op, "training", &args[5], &training));
  TH_TRY(th_tu_float(op, "momentum", &args[6], &momentum));
  TH_TRY(th_tu_float(op, "eps", &args[7], &eps));
  const th_value *v = th_meta_tensor(&args[0]);
  if (training && v && v->ndim >= 2) {
    int64_t per_channel = v->shape[0];
    for (int d = 2; d < v->ndim; d++) per_channel *= v->shape[d];
    if (per_channel == 1) {
      char b[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_VALUE, "%s: Expected more than 1 value per channel when training, got input size %s", op,
                      th_meta_shape_str(v->shape, v->ndim, b, sizeof b));
    }
  }
  return batch_norm_impl(tr, op, args[0], &args[3], &args[4], &args[1], &args[2], training, momentum, eps, out, NULL,
                         NULL);
}

static th_status batch_norm_triple(th_trace *tr, const char *op, th_arg input, const th_arg *w, const th_arg *b,
                                   const th_arg *rm, const th_arg *rv, bool training, double momentum, double eps,
                                   th_arg *out) {
  th_arg items[3];
  TH_TRY(batch_norm_impl(tr, op, input, w, b, rm, rv, training, momentum, eps, &items[0], &items[1], &items[2]));
  return th_tu_tuple_out(tr, 3, items, out);
}

/* torch.native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
 * -> (output, save_mean, save_invstd). */
th_status ltorch_native_batch_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  bool training;
  double momentum, eps;
  TH_TRY(th_tu_bool(op, "training", &args[5], &training));
  TH_TRY(th_tu_float(op, "momentum", &args[6], &momentum));
  TH_TRY(th_tu_float(op, "eps", &args[7], &eps));
  return batch_norm_triple(tr, op, args[0], &args[1], &args[2], &args[3], &args[4], training, momentum, eps, out);
}

/* torch._native_batch_norm_legit: native_batch_norm's arguments, or the overload without running
 * statistics (input, weight, bias, training, momentum, eps), told apart by the argument count. */
th_status ltorch__native_batch_norm_legit_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  bool training;
  double momentum, eps;
  if (args[6].kind == TH_ARG_NONE) { /* (input, weight, bias, training, momentum, eps) */
    TH_TRY(th_tu_bool(op, "training", &args[3], &training));
    TH_TRY(th_tu_float(op, "momentum", &args[4], &momentum));
    TH_TRY(th_tu_float(op, "eps", &args[5], &eps));
    if (!training)
      return th_error(TH_ERR_RUNTIME, "%s: running_mean and running_var must be defined in evaluation mode", op);
    return batch_norm_triple(tr, op, args[0], &args[1], &args[2], NULL, NULL, training, momentum, eps, out);
  }
  if (args[7].kind == TH_ARG_NONE) return th_error(TH_ERR_TYPE, "%s: expected 6 or 8 arguments (eps is missing)", op);
  for (int i = 3; i < 5; i++)
    if (!th_meta_tensor(&args[i]))
      return th_error(TH_ERR_TYPE, "%s: expected running_%s to be a tensor", op, i == 3 ? "mean" : "var");
  TH_TRY(th_tu_bool(op, "training", &args[5], &training));
  TH_TRY(th_tu_float(op, "momentum", &args[6], &momentum));
  TH_TRY(th_tu_float(op, "eps", &args[7], &eps));
  return batch_norm_triple(tr, op, args[0], &args[1], &args[2], &args[3], &args[4], training, momentum, eps, out);
}

/* instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps):
 * statistics per (sample, channel) over the spatial dims. With use_input_stats and running
 * statistics, the running ones are updated with the batch average of the per-instance update (PyTorch
 * runs batch_norm on the (1, N*C, ...) view with the running stats repeated N times, then copies
 * their mean over N back). Without use_input_stats it is batch_norm in evaluation mode. */
th_status ltorch_instance_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  bool use_input;
  double momentum, eps;
  TH_TRY(th_tu_bool(op, "use_input_stats", &args[5], &use_input));
  TH_TRY(th_tu_float(op, "momentum", &args[6], &momentum));
  TH_TRY(th_tu_float(op, "eps", &args[7], &eps));
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  TH_TRY(float_input(op, "instance_norm", v));
  if (v->ndim < 3)
    return th_error(TH_ERR_RUNTIME, "%s: Expected input to have at least 3 dimensions (N, C, L, ...), got %d", op,
                    v->ndim);
  const th_arg *rmean = &args[1], *rvar = &args[2], *weight = &args[3], *bias = &args[4];
  if (!use_input)
    return batch_norm_impl(tr, op, args[0], weight, bias, rmean, rvar, false, momentum, eps, out, NULL, NULL);
  int64_t c = v->shape[1], count = 1, dims[TH_MAX_DIMS];
  int nd = 0;
  for (int d = 2; d < v->ndim; d++) {
    dims[nd++] = d;
    count *= v->shape[d];
  }
  if (count == 1) {
    char b[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_VALUE, "%s: Expected more than 1 spatial element when training, got input size %s", op,
                    th_meta_shape_str(v->shape, v->ndim, b, sizeof b));
  }
  if (given(rmean) != given(rvar))
    return th_error(TH_ERR_RUNTIME, "%s: running_mean and running_var must both be given or both be None", op);
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  th_dtype sdt = comp == TH_F32 ? TH_F64 : comp;
  th_arg x = args[0];
  TH_TRY(th_tu_convert(tr, &x, comp));
  th_arg xs = x, var, mean, invstd, w, b;
  TH_TRY(th_tu_convert(tr, &xs, sdt));
  TH_TRY(var_mean_prim(tr, xs, nd, dims, &var, &mean)); /* (N, C) */
  if (given(rmean)) {
    th_arg rm, rv, mm, vv, d0[1];
    int64_t zero[1] = {0};
    TH_TRY(channel_param(tr, op, "running_mean", rmean, c, &rm));
    TH_TRY(channel_param(tr, op, "running_var", rvar, c, &rv));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, mean, th_tu_ints(d0, 1, zero), &mm));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_div, mm, th_arg_float((double)v->shape[0]), &mm));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, var, th_arg_float((double)count / (double)(count - 1)), &vv));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, vv, th_tu_ints(d0, 1, zero), &vv));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_div, vv, th_arg_float((double)v->shape[0]), &vv));
    TH_TRY(update_running(tr, *rmean, mm, momentum, sdt));
    TH_TRY(update_running(tr, *rvar, vv, momentum, sdt));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, var, th_arg_float(eps), &invstd));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_rsqrt, invstd, &invstd));
  th_arg m = mean, alpha = invstd, beta;
  TH_TRY(th_tu_convert(tr, &m, comp));
  TH_TRY(th_tu_convert(tr, &alpha, comp));
  th_arg si[2], bi[2];
  int64_t nc[2] = {v->shape[0], c}, bd2[2] = {0, 1}, bd1[1] = {1};
  if (given(weight)) {
    TH_TRY(channel_param(tr, op, "weight", weight, c, &w));
    TH_TRY(th_tu_convert(tr, &w, comp));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, w, th_tu_ints(si, 2, nc), th_tu_ints(bi, 1, bd1), &w));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, alpha, w, &alpha));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, m, alpha, &beta));
  if (given(bias)) {
    TH_TRY(channel_param(tr, op, "bias", bias, c, &b));
    TH_TRY(th_tu_convert(tr, &b, comp));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, b, th_tu_ints(si, 2, nc), th_tu_ints(bi, 1, bd1), &b));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, b, beta, &beta));
  } else {
    TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, beta, &beta));
  }
  th_arg sv[TH_MAX_DIMS];
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, alpha, th_tu_ints(sv, v->ndim, v->shape), th_tu_ints(bi, 2, bd2),
                     &alpha));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, beta, th_tu_ints(sv, v->ndim, v->shape), th_tu_ints(bi, 2, bd2),
                     &beta));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, alpha, out));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, *out, beta, out));
  return th_tu_convert(tr, out, v->dtype);
}

/* ---- group_norm ------------------------------------------------------------------------------------- */

/* The output and the (N, G) statistics of group_norm: the input viewed as (N, G, C/G * HxW), mean and
 * rstd per row, then per (N, C) alpha = rstd * weight[c], beta = bias[c] - mean * alpha (PyTorch's
 * GroupNorm CPU kernel). *mean and *rstd are in the computation dtype's statistics type. */
static th_status group_norm_impl(th_trace *tr, const char *op, th_arg input, int64_t groups, const th_arg *weight,
                                 const th_arg *bias, double eps, th_arg *y, th_arg *mean_out, th_arg *rstd_out) {
  const th_value *v = th_meta_tensor(&input);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  TH_TRY(float_input(op, "group_norm", v));
  if (v->ndim < 2)
    return th_error(TH_ERR_RUNTIME, "%s: Expected at least 2 dimensions for input tensor but received %d", op, v->ndim);
  int64_t n = v->shape[0], c = v->shape[1], hw = 1;
  for (int d = 2; d < v->ndim; d++) hw *= v->shape[d];
  if (groups <= 0 || c % groups != 0) {
    char b[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected number of channels in input to be divisible by num_groups, but got input of shape "
                    "%s and num_groups=%lld",
                    op, th_meta_shape_str(v->shape, v->ndim, b, sizeof b), (long long)groups);
  }
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  th_dtype sdt = comp == TH_F32 ? TH_F64 : comp;
  th_arg x = input, xs, var, mean, rstd, alpha, beta, w, b;
  TH_TRY(th_tu_convert(tr, &x, comp));
  int64_t gshape[3] = {n, groups, (c / groups) * hw}, last[1] = {2};
  TH_TRY(th_tu_reshape(tr, x, 3, gshape, &xs));
  TH_TRY(th_tu_convert(tr, &xs, sdt));
  TH_TRY(var_mean_prim(tr, xs, 1, last, &var, &mean)); /* (N, G) */
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, var, th_arg_float(eps), &rstd));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_rsqrt, rstd, &rstd));
  *mean_out = mean;
  *rstd_out = rstd;
  /* (N, G) -> (N, G, C/G) -> (N, C) */
  th_arg si[3], bi[2];
  int64_t ngk[3] = {n, groups, c / groups}, bd[2] = {0, 1}, nc[2] = {n, c};
  th_arg m = mean;
  alpha = rstd;
  TH_TRY(th_tu_convert(tr, &m, comp));
  TH_TRY(th_tu_convert(tr, &alpha, comp));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, m, th_tu_ints(si, 3, ngk), th_tu_ints(bi, 2, bd), &m));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, alpha, th_tu_ints(si, 3, ngk), th_tu_ints(bi, 2, bd), &alpha));
  TH_TRY(th_tu_reshape(tr, m, 2, nc, &m));
  TH_TRY(th_tu_reshape(tr, alpha, 2, nc, &alpha));
  int64_t cd[1] = {1};
  if (given(weight)) {
    TH_TRY(channel_param(tr, op, "weight", weight, c, &w));
    TH_TRY(th_tu_convert(tr, &w, comp));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, w, th_tu_ints(si, 2, nc), th_tu_ints(bi, 1, cd), &w));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, alpha, w, &alpha));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, m, alpha, &beta));
  if (given(bias)) {
    TH_TRY(channel_param(tr, op, "bias", bias, c, &b));
    TH_TRY(th_tu_convert(tr, &b, comp));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, b, th_tu_ints(si, 2, nc), th_tu_ints(bi, 1, cd), &b));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, b, beta, &beta));
  } else {
    TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, beta, &beta));
  }
  th_arg sv[TH_MAX_DIMS];
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, alpha, th_tu_ints(sv, v->ndim, v->shape), th_tu_ints(bi, 2, bd),
                     &alpha));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, beta, th_tu_ints(sv, v->ndim, v->shape), th_tu_ints(bi, 2, bd),
                     &beta));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, x, alpha, y));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, *y, beta, y));
  return th_tu_convert(tr, y, v->dtype);
}

/* torch.nn.functional.group_norm(input, num_groups, weight, bias, eps), with F.group_norm's check of the
 * batch size (ValueError for one value per group). */
th_status ltorch_group_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t groups;
  double eps, g;
  TH_TRY(th_tu_float(op, "num_groups", &args[1], &g));
  groups = (int64_t)g;
  TH_TRY(th_tu_float(op, "eps", &args[4], &eps));
  const th_value *v = th_meta_tensor(&args[0]);
  if (v && v->ndim >= 2 && groups > 0) {
    int64_t per = v->shape[0] * v->shape[1] / groups;
    for (int d = 2; d < v->ndim; d++) per *= v->shape[d];
    if (per == 1) return th_error(TH_ERR_VALUE, "%s: Expected more than 1 value per channel when training", op);
  }
  th_arg mean, rstd;
  return group_norm_impl(tr, op, args[0], groups, &args[2], &args[3], eps, out, &mean, &rstd);
}

/* torch.native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (output, mean, rstd); mean and
 * rstd are (N, group) in the input's dtype, differentiable as PyTorch's (unlike native_batch_norm's and
 * native_layer_norm's statistics). */
th_status ltorch_native_group_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  double eps, gn, nn, cc, hw;
  TH_TRY(th_tu_float(op, "N", &args[3], &nn));
  TH_TRY(th_tu_float(op, "C", &args[4], &cc));
  TH_TRY(th_tu_float(op, "HxW", &args[5], &hw));
  TH_TRY(th_tu_float(op, "group", &args[6], &gn));
  TH_TRY(th_tu_float(op, "eps", &args[7], &eps));
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  int64_t numel;
  th_meta_numel(v->shape, v->ndim, &numel);
  if (v->ndim < 2 || v->shape[0] != (int64_t)nn || v->shape[1] != (int64_t)cc ||
      numel != (int64_t)nn * (int64_t)cc * (int64_t)hw)
    return th_error(TH_ERR_RUNTIME, "%s: Expected input of shape (N, C, *) with N * C * HxW = %lld elements", op,
                    (long long)((int64_t)nn * (int64_t)cc * (int64_t)hw));
  th_arg items[3];
  TH_TRY(group_norm_impl(tr, op, args[0], (int64_t)gn, &args[1], &args[2], eps, &items[0], &items[1], &items[2]));
  TH_TRY(th_tu_convert(tr, &items[1], v->dtype));
  TH_TRY(th_tu_convert(tr, &items[2], v->dtype));
  return th_tu_tuple_out(tr, 3, items, out);
}

/* torch.native_layer_norm(input, normalized_shape, weight, bias, eps) -> (output, mean, rstd): the output
 * is ltorch.layer_norm's; mean and rstd have the input's leading dims and 1s for the normalized ones,
 * in the input's dtype. */
th_status ltorch_native_layer_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  th_arg items[3];
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_layer_norm, 5, args, 0, NULL, NULL, &items[0]));
  int64_t nshape[TH_MAX_DIMS], dims[TH_MAX_DIMS];
  int n;
  double eps;
  TH_TRY(th_meta_int_list(op, "normalized_shape", &args[1], nshape, &n));
  TH_TRY(th_tu_float(op, "eps", &args[4], &eps));
  for (int i = 0; i < n; i++) dims[i] = v->ndim - n + i;
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  th_arg xs = args[0], var, mean;
  TH_TRY(th_tu_convert(tr, &xs, comp == TH_F32 ? TH_F64 : comp));
  TH_TRY(var_mean_prim(tr, xs, n, dims, &var, &mean));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, var, th_arg_float(eps), &var));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_rsqrt, var, &var));
  TH_TRY(th_tu_convert(tr, &mean, v->dtype));
  TH_TRY(th_tu_convert(tr, &var, v->dtype));
  TH_TRY(th_tu_keepdim(tr, mean, v->ndim, v->shape, n, dims, &items[1]));
  TH_TRY(th_tu_keepdim(tr, var, v->ndim, v->shape, n, dims, &items[2]));
  TH_TRY(no_grad_stat(tr, &items[1]));
  TH_TRY(no_grad_stat(tr, &items[2]));
  return th_tu_tuple_out(tr, 3, items, out);
}

/* ---- local_response_norm and normalize (PyTorch's Python composites, each step an ltorch op) ------- */

/* local_response_norm(input, size, alpha, beta, k): input / (k + alpha * avg(input^2 over a window of
 * `size` channels, zero-padded size // 2 before and (size - 1) // 2 after))^beta. The window average is
 * F.local_response_norm's avg_pool: a sum in the computation dtype divided by size (integer division
 * for integer inputs), rounded once to the input's dtype. */
th_status ltorch_local_response_norm_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (v->ndim < 3)
    return th_error(TH_ERR_VALUE, "%s: Expected 3D or higher dimensionality input (got %d dimensions)", op, v->ndim);
  double sz;
  TH_TRY(th_tu_float(op, "size", &args[1], &sz));
  int64_t size = (int64_t)sz, numel;
  if (size <= 0) return th_error(TH_ERR_RUNTIME, "%s: size must be positive, got %lld", op, (long long)size);
  th_meta_numel(v->shape, v->ndim, &numel);
  if (numel == 0) {
    *out = args[0];
    return TH_OK;
  }
  if (v->dtype == TH_BOOL) return th_error(TH_ERR_RUNTIME, "%s: \"avg_pool2d\" not implemented for 'Bool'", op);
  th_arg sq, acc, t;
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, args[0], args[0], &sq));
  th_dtype comp = th_tu_computation_dtype(v->dtype);
  TH_TRY(th_tu_convert(tr, &sq, comp));
  int64_t c = v->shape[1], before = size / 2, after = (size - 1) / 2;
  th_arg parts[3];
  int np = 0;
  int64_t pshape[TH_MAX_DIMS];
  memcpy(pshape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
  if (before) {
    pshape[1] = before;
    TH_TRY(th_tu_full(tr, v->ndim, pshape, th_arg_int(0), v->device, comp, &parts[np++]));
  }
  parts[np++] = sq;
  if (after) {
    pshape[1] = after;
    TH_TRY(th_tu_full(tr, v->ndim, pshape, th_arg_int(0), v->device, comp, &parts[np++]));
  }
  th_arg padded = sq;
  if (np > 1) {
    th_arg list = th_arg_list(np, parts);
    TH_TRY(th_tu_call2(tr, TH_OP_prims_cat, list, th_arg_int(1), &padded));
  }
  for (int64_t j = 0; j < size; j++) {
    TH_TRY(th_tu_slice_in_dim(tr, padded, j, j + c, 1, 1, &t));
    if (j == 0)
      acc = t;
    else
      TH_TRY(th_tu_call2(tr, TH_OP_prims_add, acc, t, &acc));
  }
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, acc, th_dtype_is_float(comp) ? th_arg_float((double)size) : th_arg_int(size),
                     &acc));
  TH_TRY(th_tu_convert(tr, &acc, v->dtype));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, acc, args[2], &acc));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_add, acc, args[4], &acc));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_pow, acc, args[3], &acc));
  return th_tu_call2(tr, TH_OP_ltorch_true_divide, args[0], acc, out);
}

/* normalize(input, p, dim, eps): input / clamp_min(vector_norm(input, p, dim, keepdim=True), eps),
 * expanded to input's shape (F.normalize). */
th_status ltorch_normalize_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (args[4].kind != TH_ARG_NONE) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: out= is not supported", op);
  th_arg nargs[4] = {args[0], args[1], args[2], th_arg_bool(true)}, norm;
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_linalg_vector_norm, 4, nargs, 0, NULL, NULL, &norm));
  th_arg cargs[2] = {norm, args[3]};
  const char *const kn[1] = {"min"};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_clamp, 1, cargs, 1, kn, &cargs[1], &norm));
  TH_TRY(th_tu_expand(tr, op, &norm, v->ndim, v->shape));
  return th_tu_call2(tr, TH_OP_ltorch_true_divide, args[0], norm, out);
}

const th_vjp_entry th_vjp_table_torch_norm[] = {
  {TH_OP_ltorch_norm_statistic, TH_VJP_NONDIFF, NULL},
};
const int th_vjp_table_torch_norm_n = (int)(sizeof th_vjp_table_torch_norm / sizeof th_vjp_table_torch_norm[0]);
