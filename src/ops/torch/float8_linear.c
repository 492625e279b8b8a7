/* float8_linear.c — ltorch.float8_linear_output, the autograd boundary of a float8 linear, and the
 * quantization recipe it shares with the float8 transform (float8_linear.h).
 *
 * The float8 transform (transforms/float8.c) writes each converted linear y = x @ w.T + bias as visible
 * fp8 math — x and w quantized (th_f8_quantize), ltorch._scaled_mm on the codes — and ends it with
 *   y = ltorch.float8_linear_output(mm, x, w, bias, input_dtype=Fx, weight_dtype=Fw,
 *                                   grad_dtype=float8_e5m2)
 * where mm [M, N] is the _scaled_mm result (M = x.numel() / K). In the forward the op is only the
 * reshape of mm to x.shape[:-1] + (N,) (prims.reshape; prims.shallow_copy when x is 2-D), so the
 * executors run exactly the quantized math and nothing else. x, w and bias are its operands for the
 * backward: the op stands where torchao's Float8Linear has its autograd.Function
 * (matmul_with_hp_or_float8_args, which saves the high-precision input and weight), and its direct
 * vjp rule is torchao's backward with tensor-wise scaling, for a cotangent g of y:
 *   g2 = g.reshape(M, N);  g_fp8, g_inv = quantize(g2, grad_dtype)  (amax -> M/amax -> saturated cast)
 *   x_fp8, x_inv = quantize(x.reshape(M, K), Fx);  w_fp8, w_inv = quantize(w, Fw)
 *   grad_x    = _scaled_mm(g_fp8, w_fp8, g_inv, w_inv, out_dtype=x.dtype).reshape(x.shape)
 *   grad_w    = _scaled_mm(g_fp8.t(), x_fp8, g_inv, x_inv, out_dtype=w.dtype)
 *   grad_bias = g2.sum(0), in bias's dtype (torchao adds the bias outside the fp8 GEMM: a plain add's
 *               gradient)
 * x and w are quantized again in the backward, as torchao does, rather than their fp8 codes being
 * saved: tensor-wise scaling of the same values gives the same codes and scales (the ops are exact or
 * correctly rounded, with no FMA contraction in any executor), the weight is a parameter that is kept
 * anyway (saving its codes would add N*K bytes). The scales are constants and the casts
 * straight-through, as in torchao: mm gets no gradient, so no cotangent reaches the forward's
 * amax/scale ops or ltorch._scaled_mm (whose derivative is refused, scaled_mm.c). _scaled_mm refuses
 * two e5m2 operands, so for a GEMM whose other operand is e5m2 (float8 option input_dtype or
 * weight_dtype = float8_e5m2) the cotangent is quantized to float8_e4m3fn instead (torchao would hand
 * that pair to cuBLASLt, which refuses it). Defaults: input_dtype and weight_dtype None mean
 * float8_e4m3fn, grad_dtype None float8_e5m2. */
#include <stdio.h>
#include <string.h>

#include "ops/torch/float8_linear.h"
#include "ops/vjp.h"

/* ---- the recipe ------------------------------------------------------------------------------------ */

/* Gives the (just recorded) value of *a the fresh name "<tag>_<role>_<N>". */
static th_status name(th_trace *tr, th_arg *a, const char *tag, const char *role) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "%s_%s_", tag, role);
  const char *nm = th_name_fresh(tr, prefix);
  if (!nm) return th_error(TH_ERR_NOMEM, "float8: out of memory");
  a->u.value->name = nm;
  return TH_OK;
}

static th_status call(th_trace *tr, th_op_id op, int n, th_arg a0, th_arg a1, th_arg *out) {
  th_arg args[2] = {a0, a1};
  return th_call(tr, op, n, args, out);
}

th_status th_f8_quantize(th_trace *tr, th_arg v, th_dtype fmt, const char *tag, const char *role, th_arg *q,
                         th_arg *inv) {
  char r[48];
  const double max = fmt == TH_F8E4M3FN ? 448.0 : 57344.0;
  th_arg x = v, ab, amax, clamped, scale, scaled;
  if (v.u.value->dtype != TH_F32) TH_TRY(call(tr, TH_OP_ltorch_float, 1, v, th_arg_none(), &x));
  TH_TRY(call(tr, TH_OP_ltorch_abs, 1, x, th_arg_none(), &ab));
  TH_TRY(call(tr, TH_OP_ltorch_amax, 1, ab, th_arg_none(), &amax));
  snprintf(r, sizeof r, "%s_amax", role);
  TH_TRY(name(tr, &amax, tag, r));
  TH_TRY(call(tr, TH_OP_ltorch_clamp, 2, amax, th_arg_float(1e-12), &clamped));
  TH_TRY(call(tr, TH_OP_ltorch_true_divide, 2, th_arg_float(max), clamped, &scale));
  snprintf(r, sizeof r, "%s_scale", role);
  TH_TRY(name(tr, &scale, tag, r));
  TH_TRY(call(tr, TH_OP_ltorch_mul, 2, x, scale, &scaled));
  TH_TRY(th_tu_to_fp8_saturated(tr, scaled, fmt, q));
  snprintf(r, sizeof r, "%s_fp8", role);
  TH_TRY(name(tr, q, tag, r));
  TH_TRY(call(tr, TH_OP_ltorch_reciprocal, 1, scale, th_arg_none(), inv));
  snprintf(r, sizeof r, "%s_inv_scale", role);
  return name(tr, inv, tag, r);
}

void th_f8_linear_tag(const th_value *w, int index, char *buf, size_t n) {
  const char *nm = w && w->name ? w->name : "";
  if (!strncmp(nm, "t_", 2) && nm[2] && !(nm[2] >= '0' && nm[2] <= '9')) nm += 2; /* t_0_weight keeps it */
  size_t len = strlen(nm);
  if (len > 7 && !strcmp(nm + len - 7, "_weight")) len -= 7;
  if (len > 28) len = 28;
  if (len == 0 || (nm[0] == 't' && strspn(nm + 1, "0123456789") >= len - 1)) { /* an unnamed intermediate (t12) */
    if (index >= 0)
      snprintf(buf, n, "linear%d", index);
    else
      snprintf(buf, n, "linear");
  } else {
    snprintf(buf, n, "%.*s", (int)len, nm);
  }
}

/* ---- ltorch.float8_linear_output ------------------------------------------------------------------- */

static bool is_hp_float(const th_value *v) { return th_dtype_is_float(v->dtype) && !th_dtype_is_fp8(v->dtype); }

/* An fp8 format argument: None gives `dflt`. */
static th_status fp8_arg(const char *op, const char *what, const th_arg *a, th_dtype dflt, th_dtype *out) {
  bool has;
  TH_TRY(th_tu_dtype_arg(op, what, a, out, &has));
  if (!has) *out = dflt;
  if (!th_dtype_is_fp8(*out))
    return th_error(TH_ERR_VALUE, "%s: %s must be float8_e4m3fn or float8_e5m2, but got %s", op, what,
                    th_dtype_name(*out));
  return TH_OK;
}

/* The three formats of a bound float8_linear_output (input, weight, grad). */
static th_status formats(const char *op, const th_arg *args, th_dtype *fx, th_dtype *fw, th_dtype *fg) {
  TH_TRY(fp8_arg(op, "input_dtype", &args[4], TH_F8E4M3FN, fx));
  TH_TRY(fp8_arg(op, "weight_dtype", &args[5], TH_F8E4M3FN, fw));
  TH_TRY(fp8_arg(op, "grad_dtype", &args[6], TH_F8E5M2, fg));
  if (*fx == TH_F8E5M2 && *fw == TH_F8E5M2)
    return th_error(TH_ERR_VALUE,
                    "%s: input_dtype and weight_dtype cannot both be float8_e5m2 (_scaled_mm refuses "
                    "two e5m2 operands)",
                    op);
  return TH_OK;
}

/* float8_linear_output(Tensor mm, Tensor input, Tensor weight, Tensor? bias, *, ScalarType? input_dtype=None,
 *                      ScalarType? weight_dtype=None, ScalarType? grad_dtype=None) */
th_status ltorch_float8_linear_output_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *mm = th_meta_tensor(&args[0]), *x = th_meta_tensor(&args[1]), *w = th_meta_tensor(&args[2]);
  const th_value *bias = th_meta_tensor(&args[3]);
  if (!mm || !x || !w) return th_error(TH_ERR_TYPE, "%s: expected mm, input and weight to be tensors", op);
  if (args[3].kind != TH_ARG_NONE && !bias)
    return th_error(TH_ERR_TYPE, "%s: expected bias to be a tensor or None", op);
  char buf[96];
  if (!is_hp_float(x) || !is_hp_float(w) || (bias && !is_hp_float(bias))) {
    const th_value *bad = !is_hp_float(x) ? x : !is_hp_float(w) ? w : bias;
    th_value_type_string(bad, buf, sizeof buf);
    return th_error(TH_ERR_TYPE, "%s: %s: expected a float16, bfloat16, float32 or float64 tensor, but got %s", op,
                    bad == x   ? "input"
                    : bad == w ? "weight"
                               : "bias",
                    buf);
  }
  if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1]) {
    char a[TH_META_SHAPE_BUF], b[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_VALUE,
                    "%s: input %s and weight %s are not the operands of a linear (input [..., K], "
                    "weight [N, K])",
                    op, th_meta_shape_str(x->shape, x->ndim, a, sizeof a),
                    th_meta_shape_str(w->shape, w->ndim, b, sizeof b));
  }
  const int64_t N = w->shape[0], K = w->shape[1], M = K ? th_value_numel(x) / K : 0;
  if (mm->ndim != 2 || mm->shape[0] != M || mm->shape[1] != N || mm->dtype != x->dtype) {
    th_value_type_string(mm, buf, sizeof buf);
    return th_error(TH_ERR_VALUE,
                    "%s: mm: expected the %s[%lld, %lld] product of the flattened input and the "
                    "weight, but got %s",
                    op, th_dtype_name(x->dtype), (long long)M, (long long)N, buf);
  }
  if (bias && (bias->ndim != 1 || bias->shape[0] != N)) {
    th_value_type_string(bias, buf, sizeof buf);
    return th_error(TH_ERR_VALUE, "%s: bias: expected a vector of size %lld, but got %s", op, (long long)N, buf);
  }
  th_dtype fx, fw, fg;
  TH_TRY(formats(op, args, &fx, &fw, &fg));
  int64_t shape[TH_MAX_DIMS];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  shape[x->ndim - 1] = N;
  return th_tu_reshape(tr, args[0], x->ndim, shape, out);
}

/* _scaled_mm(a, b, scale_a, scale_b, out_dtype=dt) into tr */
static th_status scaled_mm(th_trace *tr, th_arg a, th_arg b, th_arg sa, th_arg sb, th_dtype dt, th_arg *out) {
  static const char *const kwn[1] = {"out_dtype"};
  th_arg args[5] = {a, b, sa, sb, th_arg_none()}, kw[1] = {th_arg_dtype(dt)};
  return th_call_kw(tr, th_symbol_get(TH_OP_ltorch__scaled_mm), 5, args, 1, kwn, kw, out);
}

static th_status float8_linear_output_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_value *mm = b->args[0].u.value, *x = b->args[1].u.value, *w = b->args[2].u.value;
  const bool want_x = th_vjp_is_float_tensor(&b->args[1]), want_w = th_vjp_is_float_tensor(&b->args[2]);
  const bool want_b = th_vjp_is_float_tensor(&b->args[3]);
  th_dtype fx, fw, fg;
  TH_TRY(formats(b->sym->qualname, b->args, &fx, &fw, &fg));
  const int64_t M = mm->shape[0], N = mm->shape[1], K = w->shape[1];
  char tag[32];
  th_f8_linear_tag(w, -1, tag, sizeof tag);
  th_arg g2;
  int64_t s2[2] = {M, N}, sx[2] = {M, K};
  TH_TRY(th_tu_reshape(tr, cts[0], 2, s2, &g2));
  /* the cotangent's format per GEMM: grad_dtype, unless the other operand is e5m2 too */
  const th_dtype gx_fmt = fg == TH_F8E5M2 && fw == TH_F8E5M2 ? TH_F8E4M3FN : fg; /* grad_input: with w */
  const th_dtype gw_fmt = fg == TH_F8E5M2 && fx == TH_F8E5M2 ? TH_F8E4M3FN : fg; /* grad_weight: with x */
  th_arg gq[2], ginv[2];
  if (want_x)
    TH_TRY(th_f8_quantize(tr, g2, gx_fmt, tag, gx_fmt == fg ? "grad_output" : "grad_output_e4m3", &gq[0], &ginv[0]));
  if (want_w) {
    if (want_x && gw_fmt == gx_fmt) {
      gq[1] = gq[0];
      ginv[1] = ginv[0];
    } else {
      TH_TRY(th_f8_quantize(tr, g2, gw_fmt, tag, gw_fmt == fg ? "grad_output" : "grad_output_e4m3", &gq[1], &ginv[1]));
    }
  }
  if (want_x) { /* [M, N] x [N, K] -> [M, K] -> x's shape */
    th_arg wq, winv, gx;
    TH_TRY(th_f8_quantize(tr, b->args[2], fw, tag, "weight", &wq, &winv));
    TH_TRY(scaled_mm(tr, gq[0], wq, ginv[0], winv, x->dtype, &gx));
    TH_TRY(th_tu_reshape(tr, gx, x->ndim, x->shape, &grads[1]));
  }
  if (want_w) { /* [N, M] x [M, K] -> [N, K] */
    th_arg x2, xq, xinv, gt;
    TH_TRY(th_tu_reshape(tr, b->args[1], 2, sx, &x2));
    TH_TRY(th_f8_quantize(tr, x2, fx, tag, "input", &xq, &xinv));
    TH_TRY(th_tu_call1(tr, TH_OP_ltorch_t, gq[1], &gt));
    TH_TRY(scaled_mm(tr, gt, xq, ginv[1], xinv, w->dtype, &grads[2]));
  }
  if (want_b) {
    th_arg gb;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sum, g2, th_arg_int(0), &gb));
    TH_TRY(th_tu_convert(tr, &gb, b->args[3].u.value->dtype));
    grads[3] = gb;
  }
  return TH_OK;
}

const th_vjp_entry th_vjp_table_torch_float8_linear[] = {
  {TH_OP_ltorch_float8_linear_output, TH_VJP_RULE, float8_linear_output_vjp},
};
const int th_vjp_table_torch_float8_linear_n =
  (int)(sizeof th_vjp_table_torch_float8_linear / sizeof th_vjp_table_torch_float8_linear[0]);
