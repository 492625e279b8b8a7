/* loss.c — the losses, distances and similarities of torch.nn.functional: l1_loss, smooth_l1_loss,
 * huber_loss, binary_cross_entropy(_with_logits), kl_div, poisson_nll_loss, gaussian_nll_loss,
 * hinge_embedding_loss, margin_ranking_loss, soft_margin_loss, multilabel_soft_margin_loss,
 * cosine_embedding_loss, triplet_margin_loss, cosine_similarity, pairwise_distance and softmin.
 *
 * Each follows PyTorch's formula step by step as nested ltorch ops, so a bf16 input rounds where eager
 * rounds: where PyTorch has one ATen kernel for the elementwise loss (smooth_l1_loss, huber_loss,
 * binary_cross_entropy, binary_cross_entropy_with_logits' log_sigmoid), that part computes in the
 * computation dtype (float32 for bf16/f16) and rounds once; where PyTorch composes ops (l1_loss is
 * abs(input - target), cosine_embedding_loss, the Python composites), each op rounds. The reduction is
 * ltorch.mean / ltorch.sum of the elementwise loss; the deprecated size_average / reduce arguments map
 * to a reduction as torch.nn._reduction.legacy_get_string does. */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

enum { RED_NONE, RED_MEAN, RED_SUM, RED_BATCHMEAN };

#define C1(op, a, o) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_##op, a, o))
#define C2(op, a, b, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, b, o))
#define C3(op, a, b, c, o) TH_TRY(th_tu_call3(tr, TH_OP_ltorch_##op, a, b, c, o))

static bool given(const th_arg *a) { return a && a->kind != TH_ARG_NONE; }

/* clamp(x, min=bound) (lower) or clamp(x, max=bound): NaN stays NaN, as clamp_min / clamp_max. */
static th_status clamp_bound(th_trace *tr, th_arg x, double bound, bool lower, th_arg *out) {
  th_arg args[2] = {x, th_arg_float(bound)};
  const char *const kn[1] = {lower ? "min" : "max"};
  return th_tu_call_kw(tr, TH_OP_ltorch_clamp, 1, args, 1, kn, &args[1], out);
}

/* The reduction named by the string `r`; 'batchmean' only where batchmean_ok (kl_div). */
static th_status reduction_named(const char *op, const th_arg *r, bool batchmean_ok, int *out) {
  if (r->kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: expected reduction to be a string", op);
  if (!strcmp(r->u.s, "none"))
    *out = RED_NONE;
  else if (!strcmp(r->u.s, "mean"))
    *out = RED_MEAN;
  else if (!strcmp(r->u.s, "sum"))
    *out = RED_SUM;
  else if (batchmean_ok && !strcmp(r->u.s, "batchmean"))
    *out = RED_BATCHMEAN;
  else
    return th_error(TH_ERR_VALUE, "%s: %s is not a valid value for reduction", op, r->u.s);
  return TH_OK;
}

/* The reduction of a loss: `reduction`, unless a deprecated size_average / reduce is given (None
 * counts as True): reduce=False is 'none', else size_average picks 'mean' or 'sum'. */
static th_status reduction_of(const char *op, const th_arg *size_average, const th_arg *reduce, const th_arg *r,
                              bool batchmean_ok, int *out) {
  if (given(size_average) || given(reduce)) {
    bool sa = true, rd = true;
    if (given(size_average)) TH_TRY(th_tu_bool(op, "size_average", size_average, &sa));
    if (given(reduce)) TH_TRY(th_tu_bool(op, "reduce", reduce, &rd));
    *out = !rd ? RED_NONE : sa ? RED_MEAN : RED_SUM;
    return TH_OK;
  }
  return reduction_named(op, r, batchmean_ok, out);
}

static th_status reduce_loss(th_trace *tr, th_arg loss, int red, th_arg *out) {
  th_arg a[1] = {loss};
  switch (red) {
    case RED_MEAN: return th_tu_call_kw(tr, TH_OP_ltorch_mean, 1, a, 0, NULL, NULL, out);
    case RED_SUM: return th_tu_call_kw(tr, TH_OP_ltorch_sum, 1, a, 0, NULL, NULL, out);
    default: *out = loss; return TH_OK;
  }
}

static const char *const input12_target[3] = {"input1", "input2", "target"};

/* The input (args[0]) and target (args[1]) tensors of a loss. */
static th_status input_target(const char *op, const th_arg *args, const th_value **vi, const th_value **vt) {
  TH_TRY(th_tu_tensor_arg(op, "input", &args[0], vi));
  return th_tu_tensor_arg(op, "target", &args[1], vt);
}

/* input_target, and the reduction of the loss from its trailing size_average, reduce, reduction
 * arguments at args[at], args[at + 1], args[at + 2]. */
static th_status loss_operands(const char *op, const th_arg *args, int at, const th_value **vi, const th_value **vt,
                               int *red) {
  TH_TRY(input_target(op, args, vi, vt));
  return reduction_of(op, &args[at], &args[at + 1], &args[at + 2], false, red);
}

/* input and target broadcast to one shape (torch.broadcast_tensors in F's losses). */
static th_status broadcast2(th_trace *tr, const char *op, th_arg *a, th_arg *b) {
  th_arg both[2] = {*a, *b};
  TH_TRY(th_tu_broadcast(tr, op, 2, both));
  *a = both[0];
  *b = both[1];
  return TH_OK;
}

static bool same_shape(const th_value *a, const th_value *b) {
  return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* loss [* weight] for an optional elementwise weight of input's shape (l1_loss, huber_loss). */
static th_status weighted(th_trace *tr, const char *op, th_arg loss, const th_arg *weight, const th_value *vi,
                          th_arg *out) {
  *out = loss;
  if (!given(weight)) return TH_OK;
  if (!same_shape(weight->u.value, vi))
    return th_error(TH_ERR_VALUE, "%s: Weights and input must have the same size.", op);
  return th_tu_call2(tr, TH_OP_ltorch_mul, loss, *weight, out);
}

/* binary_cross_entropy(_with_logits) take a target of input's shape only; each words the error its own way. */
static th_status check_target_size(const char *op, const th_value *vi, const th_value *vt, bool logits) {
  if (same_shape(vi, vt)) return TH_OK;
  char ts[TH_META_SHAPE_BUF], is[TH_META_SHAPE_BUF];
  th_meta_shape_str(vt->shape, vt->ndim, ts, sizeof ts);
  th_meta_shape_str(vi->shape, vi->ndim, is, sizeof is);
  if (logits)
    return th_error(TH_ERR_VALUE, "%s: Target size (torch.Size(%s)) must be the same as input size (torch.Size(%s))",
                    op, ts, is);
  return th_error(TH_ERR_VALUE,
                  "%s: Using a target size (torch.Size(%s)) that is different to the input size (torch.Size(%s)) is "
                  "deprecated. Please ensure they have the same size.",
                  op, ts, is);
}

/* ---- l1, smooth l1, huber ------------------------------------------------------------------------ */

/* l1_loss(input, target, size_average, reduce, reduction, weight) = reduce(|input - target| [* weight]) */
th_status ltorch_l1_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  TH_TRY(loss_operands(op, args, 2, &vi, &vt, &red));
  th_arg x = args[0], t = args[1], d;
  TH_TRY(broadcast2(tr, op, &x, &t));
  C2(sub, x, t, &d);
  C1(abs, d, &d);
  TH_TRY(weighted(tr, op, d, &args[5], vi, &d));
  return reduce_loss(tr, d, red, out);
}

/* The elementwise smooth L1 (huber=false: z < beta ? 0.5 z^2 / beta : z - 0.5 beta) or Huber
 * (z < delta ? 0.5 z^2 : delta (z - 0.5 delta)) loss of z = |input - target|, in the computation dtype
 * and rounded once (PyTorch's kernels). */
static th_status smooth_elementwise(th_trace *tr, const char *op, th_arg x, th_arg t, double beta, bool huber,
                                    th_arg *out) {
  const th_value *v = x.u.value;
  th_dtype rdt;
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 2, (th_arg[2]){x, t}, TH_TU_PROMO_DEFAULT, &comp, &res));
  rdt = th_tu_tensor_dtype(res);
  TH_TRY(broadcast2(tr, op, &x, &t));
  TH_TRY(th_tu_convert_type(tr, &x, comp));
  TH_TRY(th_tu_convert_type(tr, &t, comp));
  th_arg z, small, q, l;
  C2(sub, x, t, &z);
  C1(abs, z, &z);
  if (!huber && beta == 0.0) {
    l = z;
  } else {
    C2(lt, z, th_arg_float(beta), &small);
    C2(mul, z, z, &q);
    C2(mul, q, th_arg_float(0.5), &q);
    if (!huber) C2(true_divide, q, th_arg_float(beta), &q);
    C2(sub, z, th_arg_float(0.5 * beta), &l);
    if (huber) C2(mul, l, th_arg_float(beta), &l);
    C3(where, small, q, l, &l);
  }
  (void)v;
  *out = l;
  return th_tu_convert(tr, out, rdt);
}

/* smooth_l1_loss(input, target, size_average, reduce, reduction, beta) */
th_status ltorch_smooth_l1_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  double beta;
  TH_TRY(loss_operands(op, args, 2, &vi, &vt, &red));
  TH_TRY(th_tu_float(op, "beta", &args[5], &beta));
  if (beta < 0) return th_error(TH_ERR_RUNTIME, "%s: smooth_l1_loss does not support negative values for beta.", op);
  th_arg l;
  TH_TRY(smooth_elementwise(tr, op, args[0], args[1], beta, false, &l));
  return reduce_loss(tr, l, red, out);
}

/* huber_loss(input, target, reduction, delta, weight) */
th_status ltorch_huber_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  double delta;
  TH_TRY(input_target(op, args, &vi, &vt));
  TH_TRY(reduction_named(op, &args[2], false, &red));
  TH_TRY(th_tu_float(op, "delta", &args[3], &delta));
  if (!(delta > 0))
    return th_error(TH_ERR_RUNTIME, "%s: huber_loss does not support non-positive values for delta.", op);
  th_arg l;
  TH_TRY(smooth_elementwise(tr, op, args[0], args[1], delta, true, &l));
  TH_TRY(weighted(tr, op, l, &args[4], vi, &l));
  return reduce_loss(tr, l, red, out);
}

/* ---- binary cross entropy --------------------------------------------------------------------------- */

/* binary_cross_entropy(input, target, weight, size_average, reduce, reduction):
 * (target - 1) * max(log1p(-input), -100) - target * max(log(input), -100), [* weight], in the
 * computation dtype and rounded once (PyTorch's kernel). The input must lie in [0, 1]: PyTorch checks
 * that at run time; here values outside give NaN. */
th_status ltorch_binary_cross_entropy_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  TH_TRY(loss_operands(op, args, 3, &vi, &vt, &red));
  TH_TRY(check_target_size(op, vi, vt, false));
  if (!th_dtype_is_float(vi->dtype))
    return th_error(TH_ERR_RUNTIME, "%s: \"binary_cross_entropy\" not implemented for '%s'", op,
                    th_tu_scalar_type_name(vi->dtype));
  th_dtype comp = th_tu_computation_dtype(vi->dtype);
  th_arg x = args[0], t = args[1], l1, l2, a, b;
  TH_TRY(th_tu_convert(tr, &x, comp));
  TH_TRY(th_tu_convert(tr, &t, comp));
  C1(neg, x, &l1);
  C1(log1p, l1, &l1);
  TH_TRY(clamp_bound(tr, l1, -100.0, true, &l1));
  C1(log, x, &l2);
  TH_TRY(clamp_bound(tr, l2, -100.0, true, &l2));
  C2(sub, t, th_arg_int(1), &a);
  C2(mul, a, l1, &a);
  C2(mul, t, l2, &b);
  C2(sub, a, b, &a);
  if (given(&args[2])) {
    th_arg w = args[2];
    TH_TRY(th_tu_convert(tr, &w, comp));
    C2(mul, a, w, &a);
  }
  TH_TRY(th_tu_convert(tr, &a, vi->dtype));
  return reduce_loss(tr, a, red, out);
}

/* log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)), in x's computation dtype, rounded once. */
static th_status log_sigmoid(th_trace *tr, th_arg x, th_arg *out) {
  const th_value *v = x.u.value;
  th_arg a = x, m, e;
  TH_TRY(th_tu_convert(tr, &a, th_tu_computation_dtype(v->dtype)));
  TH_TRY(clamp_bound(tr, a, 0.0, false, &m));
  C1(abs, a, &e);
  C1(neg, e, &e);
  C1(exp, e, &e);
  C1(log1p, e, &e);
  C2(sub, m, e, out);
  return th_tu_convert(tr, out, v->dtype);
}

/* binary_cross_entropy_with_logits(input, target, weight, size_average, reduce, reduction, pos_weight):
 * PyTorch's formula: ls = log_sigmoid(input) [* ((pos_weight - 1) * target + 1)];
 * loss = (1 - target) * input - ls [* weight]. */
th_status ltorch_binary_cross_entropy_with_logits_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args,
                                                         th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  TH_TRY(loss_operands(op, args, 3, &vi, &vt, &red));
  TH_TRY(check_target_size(op, vi, vt, true));
  th_arg ls, l, w;
  TH_TRY(log_sigmoid(tr, args[0], &ls));
  if (given(&args[6])) {
    C2(sub, args[6], th_arg_int(1), &w);
    C2(mul, w, args[1], &w);
    C2(add, w, th_arg_int(1), &w);
    C2(mul, ls, w, &ls);
  }
  C2(sub, th_arg_int(1), args[1], &l);
  C2(mul, l, args[0], &l);
  C2(sub, l, ls, &l);
  if (given(&args[2])) C2(mul, l, args[2], &l);
  return reduce_loss(tr, l, red, out);
}

/* ---- kl_div, poisson_nll_loss, gaussian_nll_loss ------------------------------------------------------ */

/* kl_div(input, target, size_average, reduce, reduction, log_target): target * (log(target) - input)
 * (xlogy(target, target) - target * input, 0 where target is 0), or exp(target) * (target - input) for
 * log targets; 'batchmean' is the sum divided by input.size(0). */
th_status ltorch_kl_div_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  bool log_target;
  TH_TRY(input_target(op, args, &vi, &vt));
  TH_TRY(reduction_of(op, &args[2], &args[3], &args[4], true, &red));
  TH_TRY(th_tu_bool(op, "log_target", &args[5], &log_target));
  th_arg l, a, z;
  if (log_target) {
    C1(exp, args[1], &a);
    C2(sub, args[1], args[0], &l);
    C2(mul, a, l, &l);
  } else {
    C1(log, args[1], &a);
    C2(mul, args[1], a, &a);
    C2(eq, args[1], th_arg_int(0), &z);
    C3(where, z, th_arg_float(0.0), a, &a);
    C2(mul, args[1], args[0], &l);
    C2(sub, a, l, &l);
  }
  if (red == RED_BATCHMEAN) {
    TH_TRY(reduce_loss(tr, l, RED_SUM, &l));
    if (vi->ndim == 0) {
      *out = l;
      return TH_OK;
    }
    return th_tu_call2(tr, TH_OP_ltorch_true_divide, l, th_arg_int(vi->shape[0]), out);
  }
  return reduce_loss(tr, l, red, out);
}

/* poisson_nll_loss(input, target, log_input, full, size_average, eps, reduce, reduction):
 * exp(input) - target * input (log_input) or input - target * log(input + eps); full adds Stirling's
 * term target * log(target) - target + 0.5 * log(2 pi target) where target > 1. */
th_status ltorch_poisson_nll_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  bool log_input, full;
  double eps;
  TH_TRY(input_target(op, args, &vi, &vt));
  TH_TRY(th_tu_bool(op, "log_input", &args[2], &log_input));
  TH_TRY(th_tu_bool(op, "full", &args[3], &full));
  TH_TRY(th_tu_float(op, "eps", &args[5], &eps));
  TH_TRY(reduction_of(op, &args[4], &args[6], &args[7], false, &red));
  th_arg l, a;
  if (log_input) {
    C1(exp, args[0], &l);
    C2(mul, args[1], args[0], &a);
  } else {
    C2(add, args[0], th_arg_float(eps), &a);
    C1(log, a, &a);
    C2(mul, args[1], a, &a);
    l = args[0];
  }
  C2(sub, l, a, &l);
  if (full) {
    th_arg s, u, m;
    const double two_pi = 6.283185307179586;
    C1(log, args[1], &s);
    C2(mul, args[1], s, &s);
    C2(sub, s, args[1], &s);
    C2(mul, args[1], th_arg_float(two_pi), &u);
    C1(log, u, &u);
    C2(mul, u, th_arg_float(0.5), &u);
    C2(add, s, u, &s);
    C2(gt, args[1], th_arg_int(1), &m);
    C3(where, m, s, th_arg_float(0.0), &s);
    C2(add, l, s, &l);
  }
  return reduce_loss(tr, l, red, out);
}

/* gaussian_nll_loss(input, target, var, full, eps, reduction): 0.5 * (log(var) + (input - target)^2 /
 * var) [+ 0.5 log(2 pi)], var clamped below at eps, reshaped as F.gaussian_nll_loss does (a var
 * missing input's last dim gets it as 1). PyTorch clamps var under no_grad, so its gradient passes
 * the clamp; here the clamp's own gradient applies (0 where var < eps). The check that var is
 * non-negative needs its values (data-dependent) and is not made. */
th_status ltorch_gaussian_nll_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  bool full;
  double eps;
  TH_TRY(input_target(op, args, &vi, &vt));
  TH_TRY(th_tu_bool(op, "full", &args[3], &full));
  TH_TRY(th_tu_float(op, "eps", &args[4], &eps));
  TH_TRY(reduction_named(op, &args[5], false, &red));
  th_arg var = args[2];
  const th_value *vv = th_meta_tensor(&var);
  if (vv && !same_shape(vv, vi)) {
    if (vi->ndim >= 1 && vv->ndim == vi->ndim - 1 &&
        !memcmp(vv->shape, vi->shape, sizeof(int64_t) * (size_t)vv->ndim)) {
      TH_TRY(th_tu_unsqueeze(tr, var, vv->ndim, &var));
    } else if (!(vv->ndim == vi->ndim && vv->ndim >= 1 && vv->shape[vv->ndim - 1] == 1 &&
                 !memcmp(vv->shape, vi->shape, sizeof(int64_t) * (size_t)(vv->ndim - 1)))) {
      return th_error(TH_ERR_VALUE, "%s: var is of incorrect size", op);
    }
  }
  if (!vv) {
    double d;
    TH_TRY(th_tu_float(op, "var", &var, &d));
    if (d < 0) return th_error(TH_ERR_VALUE, "%s: var has negative entry/entries", op);
    d = d < eps ? eps : d;
    var = th_arg_float(d);
  } else {
    TH_TRY(clamp_bound(tr, var, eps, true, &var));
  }
  th_arg l, d;
  bool var_scalar = var.kind == TH_ARG_FLOAT;
  if (!var_scalar) C1(log, var, &l);
  C2(sub, args[0], args[1], &d);
  C2(pow, d, th_arg_int(2), &d);
  C2(true_divide, d, var, &d);
  if (var_scalar)
    C2(add, d, th_arg_float(log(var.u.f)), &l);
  else
    C2(add, l, d, &l);
  C2(mul, l, th_arg_float(0.5), &l);
  if (full) C2(add, l, th_arg_float(0.5 * log(6.283185307179586)), &l);
  return reduce_loss(tr, l, red, out);
}

/* ---- margin losses ------------------------------------------------------------------------------------ */

/* hinge_embedding_loss(input, target, margin, ...): where(target != 1, max(margin - input, 0), 0) +
 * where(target != -1, input, 0) (PyTorch's composite). */
th_status ltorch_hinge_embedding_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  TH_TRY(loss_operands(op, args, 3, &vi, &vt, &red));
  th_arg m, c, a, b, zeros;
  C1(zeros_like, args[0], &zeros);
  C2(sub, args[2], args[0], &m);
  TH_TRY(clamp_bound(tr, m, 0.0, true, &m));
  C2(ne, args[1], th_arg_int(1), &c);
  C3(where, c, m, zeros, &a);
  C2(ne, args[1], th_arg_int(-1), &c);
  C3(where, c, args[0], zeros, &b);
  C2(add, a, b, &a);
  return reduce_loss(tr, a, red, out);
}

/* margin_ranking_loss(input1, input2, target, margin, ...): max(-target * (input1 - input2) + margin, 0) */
th_status ltorch_margin_ranking_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v[3];
  int red = RED_MEAN;
  TH_TRY(th_tu_tensor_args(op, args, 3, input12_target, v));
  TH_TRY(reduction_of(op, &args[4], &args[5], &args[6], false, &red));
  const th_value *v1 = v[0], *v2 = v[1], *vt = v[2];
  if (v1->ndim != v2->ndim || v1->ndim != vt->ndim)
    return th_error(TH_ERR_RUNTIME,
                    "%s: margin_ranking_loss : All input tensors should have same dimension but got sizes: input1: "
                    "%d, input2: %d, target: %d ",
                    op, v1->ndim, v2->ndim, vt->ndim);
  th_arg d, l;
  C2(sub, args[0], args[1], &d);
  C1(neg, args[2], &l);
  C2(mul, l, d, &l);
  C2(add, l, args[3], &l);
  TH_TRY(clamp_bound(tr, l, 0.0, true, &l));
  return reduce_loss(tr, l, red, out);
}

/* soft_margin_loss(input, target, ...): log1p(exp(-input * target)) */
th_status ltorch_soft_margin_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  TH_TRY(loss_operands(op, args, 2, &vi, &vt, &red));
  th_arg l;
  C1(neg, args[0], &l);
  C2(mul, l, args[1], &l);
  C1(exp, l, &l);
  C1(log1p, l, &l);
  return reduce_loss(tr, l, red, out);
}

/* multilabel_soft_margin_loss(input, target, weight, ...): the mean over the class (last) dim of
 * -(target * log_sigmoid(input) + (1 - target) * log_sigmoid(-input)) [* weight] (F's composite). */
th_status ltorch_multilabel_soft_margin_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args,
                                                    th_arg *out) {
  const char *op = sym->qualname;
  const th_value *vi, *vt;
  int red = RED_MEAN;
  TH_TRY(loss_operands(op, args, 3, &vi, &vt, &red));
  th_arg a, b, n, u;
  TH_TRY(log_sigmoid(tr, args[0], &a));
  C2(mul, args[1], a, &a);
  C1(neg, args[0], &n);
  TH_TRY(log_sigmoid(tr, n, &b));
  C2(sub, th_arg_int(1), args[1], &u);
  C2(mul, u, b, &b);
  C2(add, a, b, &a);
  C1(neg, a, &a);
  if (given(&args[2])) C2(mul, a, args[2], &a);
  int64_t cdim = vi->ndim - 1, items_d[1] = {cdim};
  if (vi->ndim == 0) return th_error(TH_ERR_INDEX, "%s: expected input with a class dimension", op);
  th_arg items[1];
  th_arg sargs[2] = {a, th_tu_ints(items, 1, items_d)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 2, sargs, 0, NULL, NULL, &a));
  C2(true_divide, a, th_arg_int(vi->shape[cdim]), &a);
  return reduce_loss(tr, a, red, out);
}

/* cosine_embedding_loss(input1, input2, target, margin, ...): cos = sum(x1 x2) / sqrt((sum(x1^2) +
 * 1e-12)(sum(x2^2) + 1e-12)) over the last dim; 1 - cos where target == 1, max(cos - margin, 0) where
 * target == -1 (PyTorch's composite). */
th_status ltorch_cosine_embedding_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v[3];
  int red = RED_MEAN;
  TH_TRY(th_tu_tensor_args(op, args, 3, input12_target, v));
  TH_TRY(reduction_of(op, &args[4], &args[5], &args[6], false, &red));
  const th_value *v1 = v[0], *v2 = v[1], *vt = v[2];
  if (v1->ndim != v2->ndim || !same_shape(v1, v2))
    return th_error(TH_ERR_RUNTIME, "%s: cosine_embedding_loss : input1 and input2 must have the same size", op);
  if (v1->ndim != vt->ndim + 1)
    return th_error(TH_ERR_RUNTIME,
                    "%s: cosine_embedding_loss : 1D target tensor expects 2D input tensors, but found inputs with "
                    "sizes and target with size",
                    op);
  int64_t d[1] = {v1->ndim - 1};
  th_arg items[1], dim = th_tu_ints(items, 1, d);
  th_arg p, m1, m2, t;
#define SUMD(x, o)                                                                                                     \
  do {                                                                                                                 \
    th_arg sa_[2] = {x, dim};                                                                                          \
    TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_sum, 2, sa_, 0, NULL, NULL, o));                                             \
  } while (0)
  C2(mul, args[0], args[1], &t);
  SUMD(t, &p);
  C2(mul, args[0], args[0], &t);
  SUMD(t, &m1);
  C2(add, m1, th_arg_float(1e-12), &m1);
  C2(mul, args[1], args[1], &t);
  SUMD(t, &m2);
  C2(add, m2, th_arg_float(1e-12), &m2);
#undef SUMD
  C2(mul, m1, m2, &t);
  C1(sqrt, t, &t);
  th_arg cos, zeros, pos, neg, c;
  C2(true_divide, p, t, &cos);
  C1(zeros_like, cos, &zeros);
  C2(sub, th_arg_int(1), cos, &pos);
  C2(sub, cos, args[3], &neg);
  TH_TRY(clamp_bound(tr, neg, 0.0, true, &neg));
  C2(eq, args[2], th_arg_int(1), &c);
  C3(where, c, pos, zeros, &pos);
  C2(eq, args[2], th_arg_int(-1), &c);
  C3(where, c, neg, zeros, &neg);
  C2(add, pos, neg, &pos);
  return reduce_loss(tr, pos, red, out);
}

/* ---- distances and similarity -------------------------------------------------------------------------- */

/* pairwise_distance(x1, x2, p, eps, keepdim): the p-norm of x1 - x2 + eps over the last dim of the
 * broadcast (PyTorch's composite; 0-dim operands reduce over nothing). */
static th_status pairwise(th_trace *tr, const char *op, th_arg x1, th_arg x2, th_arg p, th_arg eps, bool keepdim,
                          th_arg *out) {
  const th_value *v1, *v2;
  TH_TRY(th_tu_tensor_arg(op, "x1", &x1, &v1));
  TH_TRY(th_tu_tensor_arg(op, "x2", &x2, &v2));
  int nd = v1->ndim > v2->ndim ? v1->ndim : v2->ndim;
  th_arg d;
  C2(sub, x1, x2, &d);
  C2(add, d, eps, &d);
  int64_t last[1] = {nd - 1};
  th_arg items[1];
  th_arg nargs[4] = {d, p, nd == 0 ? th_tu_ints(items, 0, last) : th_tu_ints(items, 1, last), th_arg_bool(keepdim)};
  return th_tu_call_kw(tr, TH_OP_ltorch_linalg_vector_norm, 4, nargs, 0, NULL, NULL, out);
}

th_status ltorch_pairwise_distance_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  bool keepdim;
  TH_TRY(th_tu_bool(sym->qualname, "keepdim", &args[4], &keepdim));
  return pairwise(tr, sym->qualname, args[0], args[1], args[2], args[3], keepdim, out);
}

/* triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, ...):
 * max(margin + d(a, p) - d(a, n), 0) with d the pairwise distance; swap takes min(d(a, n), d(p, n)). */
th_status ltorch_triplet_margin_loss_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v[3];
  int red = RED_MEAN;
  bool swap;
  TH_TRY(th_tu_tensor_args(op, args, 3, (const char *const[3]){"anchor", "positive", "negative"}, v));
  const th_value *va = v[0], *vp = v[1], *vn = v[2];
  TH_TRY(th_tu_bool(op, "swap", &args[6], &swap));
  TH_TRY(reduction_of(op, &args[7], &args[8], &args[9], false, &red));
  if (va->ndim != vp->ndim || va->ndim != vn->ndim)
    return th_error(TH_ERR_RUNTIME,
                    "%s: The anchor, positive, and negative tensors are expected to have the same number of "
                    "dimensions, but got: anchor %dD, positive %dD, and negative %dD inputs",
                    op, va->ndim, vp->ndim, vn->ndim);
  th_arg dp, dn, ds, l;
  TH_TRY(pairwise(tr, op, args[0], args[1], args[4], args[5], false, &dp));
  TH_TRY(pairwise(tr, op, args[0], args[2], args[4], args[5], false, &dn));
  if (swap) {
    TH_TRY(pairwise(tr, op, args[1], args[2], args[4], args[5], false, &ds));
    C2(minimum, dn, ds, &dn);
  }
  C2(add, dp, args[3], &l);
  C2(sub, l, dn, &l);
  TH_TRY(clamp_bound(tr, l, 0.0, true, &l));
  return reduce_loss(tr, l, red, out);
}

/* cosine_similarity(x1, x2, dim, eps): sum((x1 / max(|x1|, eps)) * (x2 / max(|x2|, eps)), dim) with
 * |.| the 2-norm over dim of the broadcast operands (PyTorch's kernel; integer operands become
 * float32). PyTorch clamps the norms under no_grad; here the clamp's gradient applies, which differs
 * only where a norm is below eps. */
th_status ltorch_cosine_similarity_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v1, *v2;
  TH_TRY(th_tu_tensor_arg(op, "x1", &args[0], &v1));
  TH_TRY(th_tu_tensor_arg(op, "x2", &args[1], &v2));
  th_arg x1 = args[0], x2 = args[1];
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 2, args, TH_TU_PROMO_INT_TO_FLOAT, &comp, &res));
  TH_TRY(th_tu_convert_type(tr, &x1, res));
  TH_TRY(th_tu_convert_type(tr, &x2, res));
  TH_TRY(broadcast2(tr, op, &x1, &x2));
  const th_value *v = x1.u.value;
  double dd;
  TH_TRY(th_tu_float(op, "dim", &args[2], &dd));
  int64_t d = (int64_t)dd;
  int nd = v->ndim ? v->ndim : 1;
  if (d < -nd || d >= nd)
    return th_error(TH_ERR_INDEX, "%s: Dimension out of range (expected to be in range of [%d, %d], but got %lld)", op,
                    -nd, nd - 1, (long long)d);
  if (d < 0) d += nd;
  th_arg items[1];
  th_arg dim = v->ndim ? th_tu_ints(items, 1, &d) : th_tu_ints(items, 0, &d);
  th_arg n1, n2, a, b;
  const char *const kn[1] = {"min"};
  th_arg na[4] = {x1, th_arg_float(2.0), dim, th_arg_bool(true)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_linalg_vector_norm, 4, na, 0, NULL, NULL, &n1));
  na[0] = x2;
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_linalg_vector_norm, 4, na, 0, NULL, NULL, &n2));
  th_arg ca[2] = {n1, args[3]};
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_clamp, 1, ca, 1, kn, &ca[1], &n1));
  ca[0] = n2;
  TH_TRY(th_tu_call_kw(tr, TH_OP_ltorch_clamp, 1, ca, 1, kn, &ca[1], &n2));
  C2(true_divide, x1, n1, &a);
  C2(true_divide, x2, n2, &b);
  C2(mul, a, b, &a);
  th_arg sa[2] = {a, dim};
  return th_tu_call_kw(tr, TH_OP_ltorch_sum, 2, sa, 0, NULL, NULL, out);
}

/* softmin(input, dim, _stacklevel, dtype) = softmax(-input, dim, dtype); dim=None picks F's legacy
 * default (0 for 0-, 1- and 3-dim inputs, else 1). */
th_status ltorch_softmin_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v;
  TH_TRY(th_tu_tensor_arg(op, "input", &args[0], &v));
  th_arg dim = args[1];
  if (dim.kind == TH_ARG_NONE) dim = th_arg_int(v->ndim == 0 || v->ndim == 1 || v->ndim == 3 ? 0 : 1);
  bool has;
  th_dtype dt;
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[3], &dt, &has));
  th_arg x = args[0];
  if (has) TH_TRY(th_tu_convert(tr, &x, dt));
  th_arg n;
  C1(neg, x, &n);
  th_arg sa[2] = {n, dim};
  return th_tu_call_kw(tr, TH_OP_ltorch_softmax, 2, sa, 0, NULL, NULL, out);
}
