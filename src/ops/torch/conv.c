/* conv.c — the torch-level convolutions: conv1d/2d/3d, conv_transpose1d/2d/3d and torch.convolution,
 * each one prims.convolution (prims/conv.c) after PyTorch's argument handling:
 *   - unbatched inputs ((C, *L), one dim fewer than the weight) run with a batch of one, which is
 *     squeezed off the result ("Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of
 *     size: [4, 5]" for other ranks);
 *   - stride, padding, dilation and output_padding are an int or a sequence of one or k ints, expanded
 *     to k (the prim checks lengths and values with ATen's messages);
 *   - conv padding may be 'valid' (0) or 'same' (no strides; total padding d (K - 1) per dim, split
 *     left = total / 2, right = total - left as ATen's _convolution_mode: when the split is uneven the
 *     input gets the extra zero on the right first, with prims.cat, and the convolution pads `left` on
 *     both sides).
 * dtypes are the prim's (input, weight and bias alike; no promotion, as PyTorch). Autocast: lower
 * precision (TH_TAG_AC_LOWER), as PyTorch's autocast lists conv1d/2d/3d and conv_transpose*. */
#include <inttypes.h>
#include <string.h>

#include "ops/torch/torch_util.h"

/* An int or a sequence of 1 or k ints -> k ints (a wrong length is passed on for the prim to report). */
static th_status expand_list(const char *op, const char *what, const th_arg *a, int k, int64_t out[TH_MAX_DIMS],
                             int *n) {
  TH_TRY(th_meta_int_list(op, what, a, out, n));
  if (*n == 1)
    for (int i = 1; i < k; i++) out[i] = out[0];
  if (*n == 1) *n = k;
  return TH_OK;
}

/* Checks the input's rank (k + 1 unbatched, k + 2 batched); *x is the batched input. */
static th_status batchify(th_trace *tr, const char *name, int k, th_arg in, th_arg *x, bool *unbatched) {
  const th_value *v = th_meta_tensor(&in);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor, but got %s", name, th_arg_kind_name(&in));
  if (v->ndim != k + 1 && v->ndim != k + 2) {
    char s[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME, "Expected %dD (unbatched) or %dD (batched) input to %s, but got input of size: %s",
                    k + 1, k + 2, name, th_meta_shape_str(v->shape, v->ndim, s, sizeof s));
  }
  *unbatched = v->ndim == k + 1;
  *x = in;
  if (*unbatched) TH_TRY(th_tu_unsqueeze(tr, in, 0, x));
  return TH_OK;
}

static th_status unbatch(th_trace *tr, bool unbatched, th_arg r, th_arg *out) {
  if (!unbatched) {
    *out = r;
    return TH_OK;
  }
  const int64_t zero = 0;
  return th_tu_squeeze(tr, r, 1, &zero, out);
}

static th_status call_prim(th_trace *tr, th_arg x, th_arg w, th_arg bias, int n, const int64_t *stride, int np,
                           const int64_t *padding, int nd, const int64_t *dilation, bool transposed, int no,
                           const int64_t *opad, th_arg groups, th_arg *out) {
  th_arg si[TH_MAX_DIMS], pi[TH_MAX_DIMS], di[TH_MAX_DIMS], oi[TH_MAX_DIMS];
  th_arg args[9] = {x,
                    w,
                    bias,
                    th_tu_ints(si, n, stride),
                    th_tu_ints(pi, np, padding),
                    th_tu_ints(di, nd, dilation),
                    th_arg_bool(transposed),
                    th_tu_ints(oi, no, opad),
                    groups};
  return th_tu_call_kw(tr, TH_OP_prims_convolution, 9, args, 0, NULL, NULL, out);
}

/* x with one zero appended at the end of spatial dim i (2 + i), for 'same' padding split unevenly. */
static th_status pad_right(th_trace *tr, th_arg x, int dim, th_arg *out) {
  const th_value *v = x.u.value;
  int64_t shape[TH_MAX_DIMS];
  memcpy(shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
  shape[dim] = 1;
  th_arg z, items[2];
  TH_TRY(th_tu_full(tr, v->ndim, shape, th_arg_int(0), v->device, v->dtype, &z));
  items[0] = x;
  items[1] = z;
  return th_tu_call2(tr, TH_OP_prims_cat, th_arg_list(2, items), th_arg_int(dim), out);
}

/* conv{k}d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) */
static th_status conv_nd(th_trace *tr, const th_symbol *sym, const th_arg *args, int k, const char *name, th_arg *out) {
  const char *op = sym->qualname;
  th_arg x, r;
  bool unbatched = false;
  TH_TRY(batchify(tr, name, k, args[0], &x, &unbatched));
  int64_t stride[TH_MAX_DIMS], padding[TH_MAX_DIMS] = {0}, dilation[TH_MAX_DIMS], zeros[TH_MAX_DIMS] = {0};
  int ns, np = k, nd;
  TH_TRY(expand_list(op, "stride", &args[3], k, stride, &ns));
  TH_TRY(expand_list(op, "dilation", &args[5], k, dilation, &nd));
  if (args[4].kind == TH_ARG_STR) {
    const char *mode = args[4].u.s;
    if (!strcmp(mode, "same")) {
      for (int i = 0; i < ns; i++)
        if (stride[i] != 1)
          return th_error(TH_ERR_RUNTIME, "%s: padding='same' is not supported for strided convolutions", op);
      const th_value *w = th_meta_tensor(&args[1]);
      if (w && w->ndim == k + 2 && nd == k)
        for (int i = 0; i < k; i++) {
          const int64_t total = dilation[i] * (w->shape[2 + i] - 1), left = total / 2;
          padding[i] = left;
          if (total - left > left) TH_TRY(pad_right(tr, x, 2 + i, &x));
        }
    } else if (strcmp(mode, "valid")) {
      return th_error(TH_ERR_RUNTIME, "%s: Invalid padding string: '%s'", op, mode);
    }
  } else {
    TH_TRY(expand_list(op, "padding", &args[4], k, padding, &np));
  }
  TH_TRY(call_prim(tr, x, args[1], args[2], ns, stride, np, padding, nd, dilation, false, k, zeros, args[6], &r));
  return unbatch(tr, unbatched, r, out);
}

/* conv_transpose{k}d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1) */
static th_status conv_transpose_nd(th_trace *tr, const th_symbol *sym, const th_arg *args, int k, const char *name,
                                   th_arg *out) {
  const char *op = sym->qualname;
  th_arg x, r;
  bool unbatched = false;
  TH_TRY(batchify(tr, name, k, args[0], &x, &unbatched));
  int64_t stride[TH_MAX_DIMS], padding[TH_MAX_DIMS], opad[TH_MAX_DIMS], dilation[TH_MAX_DIMS];
  int ns, np, no, nd;
  TH_TRY(expand_list(op, "stride", &args[3], k, stride, &ns));
  TH_TRY(expand_list(op, "padding", &args[4], k, padding, &np));
  TH_TRY(expand_list(op, "output_padding", &args[5], k, opad, &no));
  TH_TRY(expand_list(op, "dilation", &args[7], k, dilation, &nd));
  TH_TRY(call_prim(tr, x, args[1], args[2], ns, stride, np, padding, nd, dilation, true, no, opad, args[6], &r));
  return unbatch(tr, unbatched, r, out);
}

th_status ltorch_conv1d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return conv_nd(tr, sym, args, 1, "conv1d", out);
}
th_status ltorch_conv2d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return conv_nd(tr, sym, args, 2, "conv2d", out);
}
th_status ltorch_conv3d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return conv_nd(tr, sym, args, 3, "conv3d", out);
}
th_status ltorch_conv_transpose1d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return conv_transpose_nd(tr, sym, args, 1, "conv_transpose1d", out);
}
th_status ltorch_conv_transpose2d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return conv_transpose_nd(tr, sym, args, 2, "conv_transpose2d", out);
}
th_status ltorch_conv_transpose3d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return conv_transpose_nd(tr, sym, args, 3, "conv_transpose3d", out);
}

/* torch.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
 * ATen's at::convolution, batched only; the prim itself. */
th_status ltorch_convolution_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call_kw(tr, TH_OP_prims_convolution, 9, args, 0, NULL, NULL, out);
}
