/* conv.c — prims.convolution: its meta (PyTorch's shape rules and messages) and its vjp rule.
 *
 * prims.convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups) is
 * Thunder's prim with transposed convolutions included, ATen's at::convolution without the batching
 * sugar: a (N, C_in, *L) batched, weight (C_out, C_in / groups, *K) (transposed: (C_in, C_out / groups,
 * *K)), bias None or (C_out,), 1 to 3 spatial dims. stride, padding, dilation and output_padding are
 * lists of one value (for every spatial dim) or one per spatial dim; padding is symmetric (the torch
 * layer pads an asymmetric 'same' explicitly). output_padding only matters for transposed convolutions
 * (ATen ignores it otherwise).
 *   out L_o = (L + 2 p - d (K - 1) - 1) / s + 1                          (floor division)
 *   transposed: L_o = (L - 1) s - 2 p + d (K - 1) + op + 1
 * a, weight (and bias) share one dtype and device; bool and fp8 are rejected (PyTorch has no such
 * kernels). Errors are ATen's (check_shape_forward), prefixed with the op's name.
 *
 * The vjp rule writes the gradients as convolutions (PyTorch's convolution_backward decomposed):
 *   grad_a of a convolution     = the transposed convolution of g with weight, output_padding making
 *                                  its output a's size;
 *   grad_a of a transposed one  = the convolution of g with weight (sliced to a's size when
 *                                  output_padding >= stride made it longer);
 *   grad_weight                 = a convolution of the input (channels as batch, batch as channels,
 *                                  per group) with g as its weight, stride and dilation swapped
 *                                  (wgrad below; for a transposed convolution with g and a swapped);
 *   grad_bias                   = g summed over the batch and spatial dims.
 * So the BLAS executor runs the backward with the same oneDNN primitives as the forward. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

/* The prim's parameters, read and expanded to one value per spatial dim. */
typedef struct conv_params {
  int k; /* spatial dims */
  int64_t stride[3], padding[3], dilation[3], output_padding[3];
  bool transposed;
  int64_t groups;
} conv_params;

static char *list_str(const int64_t *v, int n, char *buf, size_t size) { return th_meta_shape_str(v, n, buf, size); }

/* One of the four int lists: one value or k values. */
static th_status read_list(const char *op, const char *what, const th_arg *a, int k, int64_t out[3]) {
  int64_t v[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(op, what, a, v, &n));
  if (n != 1 && n != k) {
    char s[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME,
                    "%s: expected %s to be a single integer value or a list of %d values to match the convolution "
                    "dimensions, but got %s=%s",
                    op, what, k, what, list_str(v, n, s, sizeof s));
  }
  for (int i = 0; i < k; i++) out[i] = v[n == 1 ? 0 : i];
  return TH_OK;
}

static th_status read_params(const char *op, const th_arg *args, int k, conv_params *p) {
  memset(p, 0, sizeof *p);
  p->k = k;
  TH_TRY(read_list(op, "stride", &args[3], k, p->stride));
  TH_TRY(read_list(op, "padding", &args[4], k, p->padding));
  TH_TRY(read_list(op, "dilation", &args[5], k, p->dilation));
  int64_t t;
  TH_TRY(th_meta_int(op, "transposed", &args[6], &t));
  p->transposed = t != 0;
  TH_TRY(read_list(op, "output_padding", &args[7], k, p->output_padding));
  TH_TRY(th_meta_int(op, "groups", &args[8], &p->groups));
  for (int i = 0; i < k; i++) {
    if (p->stride[i] <= 0) return th_error(TH_ERR_RUNTIME, "%s: non-positive stride is not supported", op);
    if (p->padding[i] < 0) return th_error(TH_ERR_RUNTIME, "%s: negative padding is not supported", op);
    if (p->dilation[i] <= 0) return th_error(TH_ERR_RUNTIME, "%s: non-positive dilation is not supported", op);
    if (p->output_padding[i] < 0) return th_error(TH_ERR_RUNTIME, "%s: negative output_padding is not supported", op);
  }
  if (p->groups <= 0) return th_error(TH_ERR_RUNTIME, "%s: non-positive groups is not supported", op);
  if (p->transposed)
    for (int i = 0; i < k; i++)
      if (p->output_padding[i] >= p->stride[i] && p->output_padding[i] >= p->dilation[i]) {
        char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF], s2[TH_META_SHAPE_BUF];
        return th_error(TH_ERR_RUNTIME,
                        "%s: output padding must be smaller than either stride or dilation, but got "
                        "output_padding=%s, stride=%s, dilation=%s",
                        op, list_str(p->output_padding, k, s0, sizeof s0), list_str(p->stride, k, s1, sizeof s1),
                        list_str(p->dilation, k, s2, sizeof s2));
      }
  return TH_OK;
}

static th_status same_device(const char *op, const char *an, const th_value *a, const char *bn, const th_value *b) {
  if (th_device_eq(a->device, b->device)) return TH_OK;
  char d0[32], d1[32];
  return th_error(TH_ERR_RUNTIME, "%s: Expected %s.device=%s and %s.device=%s to be the same", op, an,
                  th_device_str(a->device, d0, sizeof d0), bn, th_device_str(b->device, d1, sizeof d1));
}

/* "(2 x 2)": spatial sizes as ATen prints them. */
static char *sizes_x(const int64_t *v, int n, char *buf, size_t size) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, size - o, "(");
  for (int i = 0; i < n && o < size; i++) o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, i ? " x " : "", v[i]);
  if (o < size) snprintf(buf + o, size - o, ")");
  return buf;
}

th_status prims_convolution_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *w = th_meta_tensor(&args[1]), *bias = th_meta_tensor(&args[2]);
  char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF];
  if (!a || !w) return th_error(TH_ERR_TYPE, "%s: expected a and weight to be tensors", op);
  if (args[2].kind != TH_ARG_NONE && !bias)
    return th_error(TH_ERR_TYPE, "%s: expected bias to be a tensor or None, but got %s", op,
                    th_arg_kind_name(&args[2]));
  /* Step 1: ranks, dtypes, devices */
  if (w->ndim < 3) return th_error(TH_ERR_RUNTIME, "%s: weight should have at least three dimensions", op);
  const int k = w->ndim - 2;
  if (k > 3)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: only 1-D, 2-D and 3-D convolutions are supported, but weight.shape=%s",
                    op, th_meta_shape_str(w->shape, w->ndim, s0, sizeof s0));
  if (a->ndim != w->ndim)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected %d-dimensional input for %d-dimensional weight %s, but got %d-dimensional input of "
                    "size %s instead",
                    op, w->ndim, w->ndim, th_meta_shape_str(w->shape, w->ndim, s0, sizeof s0), a->ndim,
                    th_meta_shape_str(a->shape, a->ndim, s1, sizeof s1));
  TH_TRY(same_device(op, "a", a, "weight", w));
  if (a->dtype != w->dtype)
    return th_error(TH_ERR_RUNTIME, "%s: Input type (%s) and weight type (%s) should be the same", op,
                    th_dtype_name(a->dtype), th_dtype_name(w->dtype));
  if (bias) {
    TH_TRY(same_device(op, "a", a, "bias", bias));
    if (bias->dtype != a->dtype)
      return th_error(TH_ERR_RUNTIME, "%s: Input type (%s) and bias type (%s) should be the same", op,
                      th_dtype_name(a->dtype), th_dtype_name(bias->dtype));
  }
  if (a->dtype == TH_BOOL || th_dtype_is_fp8(a->dtype))
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: convolution is not implemented for '%s'", op, th_dtype_name(a->dtype));
  conv_params p;
  TH_TRY(read_params(op, args, k, &p));
  /* Step 2: channels and groups */
  const int64_t G = p.groups, cin = a->shape[1];
  if (w->shape[0] < G)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Given groups=%" PRId64 ", expected weight to be at least %" PRId64
                    " at dimension 0, but got weight of size %s instead",
                    op, G, G, th_meta_shape_str(w->shape, w->ndim, s0, sizeof s0));
  if (w->shape[0] % G)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Given groups=%" PRId64 ", expected weight to be divisible by %" PRId64
                    " at dimension 0, but got weight of size %s instead",
                    op, G, G, th_meta_shape_str(w->shape, w->ndim, s0, sizeof s0));
  const int64_t want_cin = p.transposed ? w->shape[0] : w->shape[1] * G;
  if (cin != want_cin) {
    char s2[TH_META_SHAPE_BUF], given[48];
    if (p.transposed)
      snprintf(given, sizeof given, "transposed=1");
    else
      snprintf(given, sizeof given, "groups=%" PRId64, G);
    return th_error(TH_ERR_RUNTIME,
                    "%s: Given %s, weight of size %s, expected input%s to have %" PRId64 " channels, but got %" PRId64
                    " channels instead",
                    op, given, th_meta_shape_str(w->shape, w->ndim, s0, sizeof s0),
                    th_meta_shape_str(a->shape, a->ndim, s2, sizeof s2), want_cin, cin);
  }
  const int64_t cout = p.transposed ? w->shape[1] * G : w->shape[0];
  if (bias && (bias->ndim != 1 || bias->shape[0] != cout))
    return th_error(TH_ERR_RUNTIME,
                    "%s: Given %sweight of size %s, expected bias to be 1-dimensional with %" PRId64
                    " elements, but got bias of size %s instead",
                    op, p.transposed ? "transposed=1, " : "", th_meta_shape_str(w->shape, w->ndim, s0, sizeof s0), cout,
                    th_meta_shape_str(bias->shape, bias->ndim, s1, sizeof s1));
  for (int i = 0; i < k; i++)
    if (a->shape[2 + i] == 0 && a->shape[0] != 0 && cin != 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: Only zero batch or zero channel inputs are supported, but got input shape: %s", op,
                      th_meta_shape_str(a->shape, a->ndim, s0, sizeof s0));
  for (int i = 0; i < k; i++)
    if (w->shape[2 + i] == 0)
      return th_error(TH_ERR_RUNTIME, "%s: weight.shape[2:]=%s should not contain zero dimensions", op,
                      th_meta_shape_str(w->shape + 2, k, s0, sizeof s0));
  /* Step 3: the output's spatial sizes */
  int64_t shape[TH_MAX_DIMS];
  shape[0] = a->shape[0];
  shape[1] = p.transposed || cin > 0 ? cout : 0;
  int64_t padded[3], dk[3];
  bool too_small = false;
  for (int i = 0; i < k; i++) {
    const int64_t L = a->shape[2 + i], s = p.stride[i], pd = p.padding[i], d = p.dilation[i];
    dk[i] = d * (w->shape[2 + i] - 1) + 1;
    padded[i] = L + 2 * pd;
    if (p.transposed) {
      shape[2 + i] = (L - 1) * s - 2 * pd + dk[i] + p.output_padding[i];
      too_small |= shape[2 + i] <= 0;
    } else {
      too_small |= padded[i] < dk[i];
      shape[2 + i] = padded[i] < dk[i] ? 0 : (padded[i] - dk[i]) / s + 1;
    }
  }
  if (too_small && !p.transposed)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Calculated padded input size per channel: %s. Kernel size: %s. Kernel size can't be greater "
                    "than actual input size",
                    op, sizes_x(padded, k, s0, sizeof s0), sizes_x(dk, k, s1, sizeof s1));
  if (too_small)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Given input size per channel: %s. Calculated output size per channel: %s. Output size is too "
                    "small",
                    op, sizes_x(a->shape + 2, k, s0, sizeof s0), sizes_x(shape + 2, k, s1, sizeof s1));
  bool rg = a->requires_grad || w->requires_grad || (bias && bias->requires_grad);
  return th_meta_new_tensor(tr, a->dtype, a->device, a->ndim, shape, rg, out);
}

/* ---- vjp ------------------------------------------------------------------------------------------------ */

static th_arg ints(th_arg *items, int n, const int64_t *v) { return th_tu_ints(items, n, v); }

/* prims.convolution(x, w, None, stride, padding, dilation, transposed, output_padding, groups). */
static th_status conv_call(th_trace *tr, th_arg x, th_arg w, int k, const int64_t *stride, const int64_t *padding,
                           const int64_t *dilation, bool transposed, const int64_t *opad, int64_t groups, th_arg *out) {
  th_arg s_items[3], p_items[3], d_items[3], o_items[3];
  th_arg args[9] = {x,
                    w,
                    th_arg_none(),
                    ints(s_items, k, stride),
                    ints(p_items, k, padding),
                    ints(d_items, k, dilation),
                    th_arg_bool(transposed),
                    ints(o_items, k, opad),
                    th_arg_int(groups)};
  return th_tu_call_kw(tr, TH_OP_prims_convolution, 9, args, 0, NULL, NULL, out);
}

/* x sliced to the first want[i] entries of each spatial dim (no-op where it has that many). */
static th_status crop(th_trace *tr, th_arg x, int k, const int64_t *want, th_arg *out) {
  *out = x;
  for (int i = 0; i < k; i++)
    if (out->u.value->shape[2 + i] > want[i]) TH_TRY(th_tu_slice_in_dim(tr, *out, 0, want[i], 1, 2 + i, out));
  return TH_OK;
}

/* The weight gradient gw[g Og + o, c, *k] = sum over n and y of x[n, g Cg + c, y s + k d - p] gy[n, g Og + o, y]
 * (shape (G Og, Cg, *K)) as one grouped convolution: x as (Cg, G N, *L) (its channels per group become the
 * batch), gy as the weight (G Og, N, *Ly), stride and dilation swapped; the result (Cg, G Og, *K') is cropped
 * to K (K' > K where the forward left input entries unused) and its first two dims swapped. */
static th_status wgrad(th_trace *tr, th_arg x, th_arg gy, const int64_t *K, const conv_params *p, th_arg *out) {
  const th_value *xv = x.u.value, *gv = gy.u.value;
  const int k = p->k, nd = k + 2;
  const int64_t N = xv->shape[0], G = p->groups, Cg = xv->shape[1] / G, Og = gv->shape[1] / G;
  int64_t s5[TH_MAX_DIMS], perm[TH_MAX_DIMS], s3[TH_MAX_DIMS];
  th_arg xt, gt, r;
  /* x (N, G Cg, *L) -> (N, G, Cg, *L) -> (Cg, G, N, *L) -> (Cg, G N, *L) */
  s5[0] = N, s5[1] = G, s5[2] = Cg;
  for (int i = 0; i < k; i++) s5[3 + i] = xv->shape[2 + i];
  perm[0] = 2, perm[1] = 1, perm[2] = 0;
  for (int i = 0; i < k; i++) perm[3 + i] = 3 + i;
  TH_TRY(th_tu_reshape(tr, x, nd + 1, s5, &xt));
  TH_TRY(th_tu_transpose(tr, xt, perm, &xt));
  s3[0] = Cg, s3[1] = G * N;
  for (int i = 0; i < k; i++) s3[2 + i] = xv->shape[2 + i];
  TH_TRY(th_tu_reshape(tr, xt, nd, s3, &xt));
  /* gy (N, G Og, *Ly) -> (N, G, Og, *Ly) -> (G, Og, N, *Ly) -> (G Og, N, *Ly) */
  s5[0] = N, s5[1] = G, s5[2] = Og;
  for (int i = 0; i < k; i++) s5[3 + i] = gv->shape[2 + i];
  perm[0] = 1, perm[1] = 2, perm[2] = 0;
  TH_TRY(th_tu_reshape(tr, gy, nd + 1, s5, &gt));
  TH_TRY(th_tu_transpose(tr, gt, perm, &gt));
  s3[0] = G * Og, s3[1] = N;
  for (int i = 0; i < k; i++) s3[2 + i] = gv->shape[2 + i];
  TH_TRY(th_tu_reshape(tr, gt, nd, s3, &gt));
  const int64_t zeros[3] = {0, 0, 0};
  TH_TRY(conv_call(tr, xt, gt, k, p->dilation, p->padding, p->stride, false, zeros, G, &r));
  TH_TRY(crop(tr, r, k, K, &r));
  perm[0] = 1, perm[1] = 0;
  for (int i = 0; i < k; i++) perm[2 + i] = 2 + i;
  return th_tu_transpose(tr, r, perm, out);
}

static int64_t numel_of(const th_value *v) {
  int64_t n;
  return th_meta_numel(v->shape, v->ndim, &n) ? n : 0;
}

static th_status convolution_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const char *op = "prims.convolution";
  th_arg a = b->args[0], w = b->args[1], bias = b->args[2], g = cts[0];
  const th_value *av = a.u.value, *wv = w.u.value, *gv = g.u.value;
  conv_params p;
  TH_TRY(read_params(op, b->args, wv->ndim - 2, &p));
  const int k = p.k;
  const bool empty = numel_of(av) == 0 || numel_of(wv) == 0 || numel_of(gv) == 0;
  if (th_vjp_is_float_tensor(&a)) {
    if (empty) {
      TH_TRY(th_vjp_zeros_like(tr, av, &grads[0]));
    } else if (!p.transposed) {
      int64_t opad[3];
      for (int i = 0; i < k; i++) {
        const int64_t dk = p.dilation[i] * (wv->shape[2 + i] - 1) + 1;
        opad[i] = av->shape[2 + i] + 2 * p.padding[i] - dk - (gv->shape[2 + i] - 1) * p.stride[i];
      }
      TH_TRY(conv_call(tr, g, w, k, p.stride, p.padding, p.dilation, true, opad, p.groups, &grads[0]));
    } else {
      const int64_t zeros[3] = {0, 0, 0};
      th_arg r;
      TH_TRY(conv_call(tr, g, w, k, p.stride, p.padding, p.dilation, false, zeros, p.groups, &r));
      TH_TRY(crop(tr, r, k, av->shape + 2, &grads[0]));
    }
  }
  if (th_vjp_is_float_tensor(&w)) {
    if (empty)
      TH_TRY(th_vjp_zeros_like(tr, wv, &grads[1]));
    else if (!p.transposed)
      TH_TRY(wgrad(tr, a, g, wv->shape + 2, &p, &grads[1]));
    else
      TH_TRY(wgrad(tr, g, a, wv->shape + 2, &p, &grads[1]));
  }
  if (th_vjp_is_float_tensor(&bias)) {
    int64_t dims[TH_MAX_DIMS];
    int n = 0;
    dims[n++] = 0;
    for (int i = 0; i < k; i++) dims[n++] = 2 + i;
    th_arg di[TH_MAX_DIMS];
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sum, g, th_tu_ints(di, n, dims), &grads[2]));
  }
  return TH_OK;
}

const th_vjp_entry th_vjp_table_prims_conv[] = {
  {TH_OP_prims_convolution, TH_VJP_RULE, convolution_vjp},
};
const int th_vjp_table_prims_conv_n = (int)(sizeof th_vjp_table_prims_conv / sizeof th_vjp_table_prims_conv[0]);
