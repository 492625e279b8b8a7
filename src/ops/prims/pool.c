/* pool.c — metas and vjp rules of the pooling and resampling prims (windowed reductions over the last
 * k = 1..3 dims of a tensor; the leading dims are independent planes):
 *
 *   max_pool(a, kernel_size, stride, padding, dilation, ceil_mode) -> (values, indices)
 *   adaptive_max_pool(a, output_size) -> (values, indices)
 *       indices are int64 flat positions within each input plane (h * W + w in 2-d), PyTorch's; the
 *       first maximum of a window wins, a NaN wins over numbers (the last NaN of the window).
 *   pool_scatter_add(g, indices, input_size): g added into zero planes of input_size at indices (the
 *       gradient of both max pools); pool_gather(a, indices, k): a's planes (its last k dims) read at
 *       indices. Each is the other's vjp.
 *   avg_pool(a, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override) and
 *   avg_pool_backward(g, input_size, <the same parameters>): its adjoint (each is the other's vjp).
 *   adaptive_avg_pool(a, output_size) and adaptive_avg_pool_backward(g, input_size).
 *   resample(a, output_size, mode, align_corners, scales) and resample_backward(g, input_size, ...):
 *       interpolation with PyTorch's upsample_* index and weight rules; mode "nearest",
 *       "nearest-exact", "linear" (any k: linear, bilinear, trilinear) or "cubic" (bicubic); scales
 *       None or a tuple of k floats (or None items), the scale_factor PyTorch's kernels receive.
 *   im2col(a, kernel_size, dilation, padding, stride) -> (N, C * prod(kernel), L) and its adjoint
 *   col2im(cols, output_size, kernel_size, dilation, padding, stride) -> (N, C, *output_size), 2-d.
 *
 * Dtypes: the prims are strict; the torch layer converts bfloat16 and float16 to float32 (and back),
 * narrow integers to int64. max_pool, adaptive_max_pool and avg_pool take float32, float64 and int64
 * (an int64 average truncates as PyTorch's); the others float32 and float64 (im2col any dtype: it only
 * moves elements). */
#include <inttypes.h>
#include <string.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/pool.h"
#include "ops/vjp.h"

/* ---- geometry ----------------------------------------------------------------------------------------- */

static int64_t div_floor(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t th_pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode) {
  int64_t o = div_floor(in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (o - 1) * stride >= in + pad) o--;
  return o;
}

th_status th_pool_ints(const char *op, const char *what, const th_arg *a, int k, int64_t *out) {
  int64_t v[TH_MAX_DIMS];
  int n;
  TH_TRY(th_meta_int_list(op, what, a, v, &n));
  if (n == 1) {
    for (int i = 0; i < k; i++) out[i] = v[0];
    return TH_OK;
  }
  if (n != k)
    return th_error(TH_ERR_RUNTIME, "%s: %s must either be a single int, or a tuple of %d ints, but got %d values", op,
                    what, k, n);
  memcpy(out, v, (size_t)k * sizeof *out);
  return TH_OK;
}

static const char *join(char *buf, size_t n, const int64_t *v, int k, const char *sep) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < k && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%" PRId64, i ? sep : "", v[i]);
  return buf;
}

th_status th_pool_check(const char *op, int k, int ndim, const int64_t *shape, const int64_t *kernel,
                        const int64_t *stride, const int64_t *pad, const int64_t *dilation, bool ceil_mode,
                        int64_t *out) {
  char b0[64], b1[64];
  for (int i = 0; i < k; i++) {
    if (kernel[i] <= 0)
      return th_error(TH_ERR_RUNTIME, "%s: kernel size should be greater than zero, but got kernel size %s", op,
                      join(b0, sizeof b0, kernel, k, ", "));
    if (stride[i] <= 0)
      return th_error(TH_ERR_RUNTIME, "%s: stride should be greater than zero, but got stride %s", op,
                      join(b0, sizeof b0, stride, k, ", "));
    if (dilation && dilation[i] <= 0)
      return th_error(TH_ERR_RUNTIME, "%s: dilation should be greater than zero, but got dilation %s", op,
                      join(b0, sizeof b0, dilation, k, ", "));
    if (pad[i] < 0)
      return th_error(TH_ERR_RUNTIME, "%s: pad must be non-negative, but got pad %s", op,
                      join(b0, sizeof b0, pad, k, ", "));
    if (pad[i] > kernel[i] / 2)
      return th_error(TH_ERR_RUNTIME,
                      "%s: pad should be at most half of effective kernel size, but got pad=%" PRId64
                      ", kernel_size=%" PRId64 " and dilation=%" PRId64,
                      op, pad[i], kernel[i], dilation ? dilation[i] : 1);
  }
  for (int d = 0; d < ndim - k; d++)
    if (shape[d] == 0 && d > 0)
      return th_error(TH_ERR_RUNTIME, "%s: Expected input's non-batch dimensions to have positive length", op);
  bool small = false;
  for (int i = 0; i < k; i++) {
    int64_t in = shape[ndim - k + i];
    out[i] = th_pool_out_size(in, kernel[i], stride[i], pad[i], dilation ? dilation[i] : 1, ceil_mode);
    small |= out[i] < 1 || in < 1;
  }
  if (small)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Given input size: (%s). Calculated output size: (%s). Output size is too small", op,
                    join(b0, sizeof b0, shape + ndim - k, k, "x"), join(b1, sizeof b1, out, k, "x"));
  return TH_OK;
}

/* ---- metas ---------------------------------------------------------------------------------------------- */

static th_status check_k(const char *op, int k) {
  if (k < 1 || k > TH_POOL_MAX_K)
    return th_error(TH_ERR_RUNTIME, "%s: expected 1 to %d spatial dims, but got %d", op, TH_POOL_MAX_K, k);
  return TH_OK;
}

static th_status spatial_k(const char *op, const th_arg *a, int *k) {
  int64_t v[TH_MAX_DIMS];
  TH_TRY(th_meta_int_list(op, "kernel_size", a, v, k));
  return check_k(op, *k);
}

static th_status need_tensor(const char *op, const th_value *a, int k, bool ints) {
  if (!a) return th_error(TH_ERR_TYPE, "%s: expected a tensor", op);
  if (a->ndim < k)
    return th_error(TH_ERR_RUNTIME, "%s: expected a tensor of at least %d dims, but got %d", op, k, a->ndim);
  if (a->dtype == TH_F32 || a->dtype == TH_F64 || (ints && a->dtype == TH_I64)) return TH_OK;
  return th_error(TH_ERR_RUNTIME, "%s: expected a float32, float64%s tensor, but got %s", op, ints ? " or int64" : "",
                  th_dtype_name(a->dtype));
}

/* shape = a's leading dims + the k extents sp */
static int with_spatial(const th_value *a, int k, const int64_t *sp, int64_t *shape) {
  int lead = a->ndim - k;
  memcpy(shape, a->shape, (size_t)lead * sizeof *shape);
  memcpy(shape + lead, sp, (size_t)k * sizeof *shape);
  return a->ndim;
}

static th_status values_and_indices(th_trace *tr, const th_value *a, int ndim, const int64_t *shape, th_arg *out) {
  th_arg *items = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  if (!items) return TH_ERR_NOMEM;
  TH_TRY(th_meta_new_tensor_like(tr, a, a->dtype, ndim, shape, &items[0]));
  TH_TRY(th_meta_new_tensor(tr, TH_I64, a->device, ndim, shape, false, &items[1]));
  *out = th_arg_tuple(2, items);
  return TH_OK;
}

th_status prims_max_pool_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int k;
  int64_t ks[TH_POOL_MAX_K], st[TH_POOL_MAX_K], pd[TH_POOL_MAX_K], dl[TH_POOL_MAX_K], os[TH_POOL_MAX_K],
    shape[TH_MAX_DIMS];
  bool ceil_mode;
  TH_TRY(spatial_k(op, &args[1], &k));
  TH_TRY(need_tensor(op, a, k, true));
  TH_TRY(th_pool_ints(op, "kernel_size", &args[1], k, ks));
  TH_TRY(th_pool_ints(op, "stride", &args[2], k, st));
  TH_TRY(th_pool_ints(op, "padding", &args[3], k, pd));
  TH_TRY(th_pool_ints(op, "dilation", &args[4], k, dl));
  TH_TRY(th_tu_bool(op, "ceil_mode", &args[5], &ceil_mode));
  TH_TRY(th_pool_check(op, k, a->ndim, a->shape, ks, st, pd, dl, ceil_mode, os));
  return values_and_indices(tr, a, with_spatial(a, k, os, shape), shape, out);
}

static th_status adaptive_sizes(const char *op, const th_arg *arg, int *k, int64_t *os) {
  int64_t v[TH_MAX_DIMS];
  TH_TRY(th_meta_int_list(op, "output_size", arg, v, k));
  TH_TRY(check_k(op, *k));
  for (int i = 0; i < *k; i++) {
    if (v[i] < 0) return th_error(TH_ERR_RUNTIME, "%s: output_size must be non-negative, but got %" PRId64, op, v[i]);
    os[i] = v[i];
  }
  return TH_OK;
}

/* The shape of adaptive_max_pool's and adaptive_avg_pool's output (a, output_size): a's leading dims
 * and output_size (ints: int64 inputs allowed). */
static th_status adaptive_out_shape(const char *op, const th_arg *args, bool ints, const th_value **a, int *ndim,
                                    int64_t *shape) {
  int k;
  int64_t os[TH_POOL_MAX_K];
  *a = th_meta_tensor(&args[0]);
  TH_TRY(adaptive_sizes(op, &args[1], &k, os));
  TH_TRY(need_tensor(op, *a, k, ints));
  for (int i = 0; i < k; i++)
    if ((*a)->shape[(*a)->ndim - k + i] == 0 && os[i] > 0)
      return th_error(TH_ERR_RUNTIME, "%s: input spatial extents must be positive", op);
  *ndim = with_spatial(*a, k, os, shape);
  return TH_OK;
}

th_status prims_adaptive_max_pool_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a;
  int nd = 0;
  int64_t shape[TH_MAX_DIMS];
  TH_TRY(adaptive_out_shape(sym->qualname, args, true, &a, &nd, shape));
  return values_and_indices(tr, a, nd, shape, out);
}

th_status prims_adaptive_avg_pool_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_value *a;
  int nd = 0;
  int64_t shape[TH_MAX_DIMS];
  TH_TRY(adaptive_out_shape(sym->qualname, args, false, &a, &nd, shape));
  return th_meta_new_tensor_like(tr, a, a->dtype, nd, shape, out);
}

/* g's leading dims + input_size (the backward prims and pool_scatter_add) */
static th_status backward_out(th_trace *tr, const char *op, const th_value *g, const th_arg *size_arg, bool ints,
                              th_arg *out) {
  int k;
  int64_t is[TH_MAX_DIMS], shape[TH_MAX_DIMS];
  TH_TRY(th_meta_int_list(op, "input_size", size_arg, is, &k));
  TH_TRY(check_k(op, k));
  TH_TRY(need_tensor(op, g, k, ints));
  for (int i = 0; i < k; i++)
    if (is[i] < 0) return th_error(TH_ERR_RUNTIME, "%s: input_size must be non-negative", op);
  return th_meta_new_tensor_like(tr, g, g->dtype, with_spatial(g, k, is, shape), shape, out);
}

th_status prims_adaptive_avg_pool_backward_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return backward_out(tr, sym->qualname, th_meta_tensor(&args[0]), &args[1], false, out);
}

th_status prims_avg_pool_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int k;
  int64_t ks[TH_POOL_MAX_K], st[TH_POOL_MAX_K], pd[TH_POOL_MAX_K], os[TH_POOL_MAX_K], shape[TH_MAX_DIMS];
  bool ceil_mode, cip;
  TH_TRY(spatial_k(op, &args[1], &k));
  TH_TRY(need_tensor(op, a, k, true));
  TH_TRY(th_pool_ints(op, "kernel_size", &args[1], k, ks));
  TH_TRY(th_pool_ints(op, "stride", &args[2], k, st));
  TH_TRY(th_pool_ints(op, "padding", &args[3], k, pd));
  TH_TRY(th_tu_bool(op, "ceil_mode", &args[4], &ceil_mode));
  TH_TRY(th_tu_bool(op, "count_include_pad", &args[5], &cip));
  if (args[6].kind != TH_ARG_NONE) {
    int64_t dv;
    TH_TRY(th_meta_int(op, "divisor_override", &args[6], &dv));
    if (dv == 0) return th_error(TH_ERR_RUNTIME, "%s: divisor must be not zero", op);
  }
  TH_TRY(th_pool_check(op, k, a->ndim, a->shape, ks, st, pd, NULL, ceil_mode, os));
  return th_meta_new_tensor_like(tr, a, a->dtype, with_spatial(a, k, os, shape), shape, out);
}

th_status prims_avg_pool_backward_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return backward_out(tr, sym->qualname, th_meta_tensor(&args[0]), &args[1], false, out);
}

th_status prims_pool_scatter_add_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *g = th_meta_tensor(&args[0]), *idx = th_meta_tensor(&args[1]);
  if (!idx || idx->dtype != TH_I64) return th_error(TH_ERR_RUNTIME, "%s: expected int64 indices", op);
  if (g && (idx->ndim != g->ndim || memcmp(idx->shape, g->shape, (size_t)g->ndim * sizeof *g->shape)))
    return th_error(TH_ERR_RUNTIME, "%s: expected indices of g's shape", op);
  return backward_out(tr, op, g, &args[2], false, out);
}

th_status prims_pool_gather_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]), *idx = th_meta_tensor(&args[1]);
  int64_t k;
  TH_TRY(th_meta_int(op, "k", &args[2], &k));
  if (k < 1 || k > TH_POOL_MAX_K) return th_error(TH_ERR_RUNTIME, "%s: expected 1 to 3 spatial dims", op);
  TH_TRY(need_tensor(op, a, (int)k, false));
  if (!idx || idx->dtype != TH_I64 || idx->ndim != a->ndim ||
      memcmp(idx->shape, a->shape, (size_t)(a->ndim - k) * sizeof *a->shape))
    return th_error(TH_ERR_RUNTIME, "%s: expected int64 indices with a's leading dims", op);
  return th_meta_new_tensor_like(tr, a, a->dtype, idx->ndim, idx->shape, out);
}

static th_status resample_mode(const char *op, const th_arg *a) {
  if (a->kind == TH_ARG_STR && (!strcmp(a->u.s, "nearest") || !strcmp(a->u.s, "nearest-exact") ||
                                !strcmp(a->u.s, "linear") || !strcmp(a->u.s, "cubic")))
    return TH_OK;
  return th_error(TH_ERR_VALUE, "%s: mode must be 'nearest', 'nearest-exact', 'linear' or 'cubic'", op);
}

static th_status resample_scales(const char *op, const th_arg *a, int k) {
  if (a->kind == TH_ARG_NONE) return TH_OK;
  if ((a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) && a->u.seq.n == k) {
    for (int i = 0; i < k; i++)
      if (a->u.seq.items[i].kind != TH_ARG_NONE && !th_meta_is_number(&a->u.seq.items[i])) goto bad;
    return TH_OK;
  }
bad:
  return th_error(TH_ERR_TYPE, "%s: scales must be None or a tuple of %d floats (or None)", op, k);
}

th_status prims_resample_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int k;
  int64_t os[TH_POOL_MAX_K], shape[TH_MAX_DIMS];
  TH_TRY(adaptive_sizes(op, &args[1], &k, os));
  TH_TRY(need_tensor(op, a, k, false));
  TH_TRY(resample_mode(op, &args[2]));
  TH_TRY(resample_scales(op, &args[4], k));
  for (int i = 0; i < k; i++)
    if (os[i] <= 0 || a->shape[a->ndim - k + i] <= 0)
      return th_error(TH_ERR_RUNTIME, "%s: input and output sizes should be greater than 0", op);
  return th_meta_new_tensor_like(tr, a, a->dtype, with_spatial(a, k, os, shape), shape, out);
}

th_status prims_resample_backward_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  TH_TRY(resample_mode(op, &args[2]));
  int64_t v[TH_MAX_DIMS];
  int k;
  TH_TRY(th_meta_int_list(op, "input_size", &args[1], v, &k));
  TH_TRY(resample_scales(op, &args[4], k));
  return backward_out(tr, op, th_meta_tensor(&args[0]), &args[1], false, out);
}

/* im2col over a (N, C, H, W) (or (C, H, W)) input: (N, C * kh * kw, L), L the number of windows. */
th_status prims_im2col_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t ks[2], dl[2], pd[2], st[2];
  if (!a || (a->ndim != 3 && a->ndim != 4)) return th_error(TH_ERR_RUNTIME, "%s: expected a 3-d or 4-d tensor", op);
  TH_TRY(th_pool_ints(op, "kernel_size", &args[1], 2, ks));
  TH_TRY(th_pool_ints(op, "dilation", &args[2], 2, dl));
  TH_TRY(th_pool_ints(op, "padding", &args[3], 2, pd));
  TH_TRY(th_pool_ints(op, "stride", &args[4], 2, st));
  int64_t L = 1;
  for (int i = 0; i < 2; i++) {
    if (ks[i] <= 0 || dl[i] <= 0 || st[i] <= 0 || pd[i] < 0)
      return th_error(TH_ERR_RUNTIME, "%s: kernel_size, dilation and stride must be positive, padding non-negative",
                      op);
    int64_t o = (a->shape[a->ndim - 2 + i] + 2 * pd[i] - (dl[i] * (ks[i] - 1) + 1)) / st[i] + 1;
    if (a->shape[a->ndim - 2 + i] + 2 * pd[i] - (dl[i] * (ks[i] - 1) + 1) < 0 || o < 1)
      return th_error(TH_ERR_RUNTIME, "%s: the sliding blocks do not fit the padded input", op);
    L *= o;
  }
  int64_t shape[3];
  int nd = 0;
  if (a->ndim == 4) shape[nd++] = a->shape[0];
  shape[nd++] = a->shape[a->ndim - 3] * ks[0] * ks[1];
  shape[nd++] = L;
  return th_meta_new_tensor_like(tr, a, a->dtype, nd, shape, out);
}

th_status prims_col2im_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  int64_t os[2], ks[2], dl[2], pd[2], st[2];
  if (!a || (a->ndim != 2 && a->ndim != 3)) return th_error(TH_ERR_RUNTIME, "%s: expected a 2-d or 3-d tensor", op);
  TH_TRY(need_tensor(op, a, 2, false));
  TH_TRY(th_pool_ints(op, "output_size", &args[1], 2, os));
  TH_TRY(th_pool_ints(op, "kernel_size", &args[2], 2, ks));
  TH_TRY(th_pool_ints(op, "dilation", &args[3], 2, dl));
  TH_TRY(th_pool_ints(op, "padding", &args[4], 2, pd));
  TH_TRY(th_pool_ints(op, "stride", &args[5], 2, st));
  int64_t kk = ks[0] * ks[1], L = 1;
  for (int i = 0; i < 2; i++) {
    if (ks[i] <= 0 || dl[i] <= 0 || st[i] <= 0 || pd[i] < 0 || os[i] <= 0)
      return th_error(TH_ERR_RUNTIME, "%s: sizes must be positive, padding non-negative", op);
    int64_t n = os[i] + 2 * pd[i] - (dl[i] * (ks[i] - 1) + 1);
    if (n < 0) return th_error(TH_ERR_RUNTIME, "%s: the sliding blocks do not fit output_size", op);
    L *= n / st[i] + 1;
  }
  int64_t c = a->shape[a->ndim - 2];
  if (c % kk != 0 || a->shape[a->ndim - 1] != L)
    return th_error(TH_ERR_RUNTIME,
                    "%s: expected size(-2)=%" PRId64 " divisible by the kernel's %" PRId64
                    " elements and size(-1)=%" PRId64 " equal to the %" PRId64 " blocks",
                    op, c, kk, a->shape[a->ndim - 1], L);
  int64_t shape[4];
  int nd = 0;
  if (a->ndim == 3) shape[nd++] = a->shape[0];
  shape[nd++] = c / kk;
  shape[nd++] = os[0];
  shape[nd++] = os[1];
  return th_meta_new_tensor_like(tr, a, a->dtype, nd, shape, out);
}

/* ---- vjp rules (ops/vjp.h) ----------------------------------------------------------------------------
 * PyTorch's: the max pools send g to the argmax of each window (indices from the forward, so ties and
 * NaNs follow the forward's choice); avg_pool, adaptive_avg_pool, resample and im2col are linear and
 * their backward prims are their adjoints, and the adjoint of the adjoint is the forward prim, so
 * every rule records the partner prim with the forward's parameters. */

static int spatial_of(const th_value *v, int k, int64_t *sp) {
  memcpy(sp, v->shape + v->ndim - k, (size_t)k * sizeof *sp);
  return k;
}

static th_status pool_k(const th_bsym *b, int argi, int *k) {
  int64_t v[TH_MAX_DIMS];
  return th_meta_int_list(b->sym->qualname, "sizes", &b->args[argi], v, k);
}

/* grads[0] = pool_scatter_add(g, idx, <the extents of the last k dims of this op's input>). */
static th_status scatter_to_input(th_trace *tr, const th_bsym *b, th_arg g, th_arg idx, int k, th_arg *grads) {
  int64_t sp[TH_POOL_MAX_K];
  th_arg items[TH_POOL_MAX_K];
  spatial_of(b->args[0].u.value, k, sp);
  return th_tu_call3(tr, TH_OP_prims_pool_scatter_add, g, idx, th_tu_ints(items, k, sp), &grads[0]);
}

/* grads[0] = partner(g, <the extents of the last k dims of this op's input>, args[from] .. args[from +
 * nrest - 1]): the adjoint of a forward linear op, whose backward partner takes the input's size. */
static th_status partner_with_size(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads, th_op_id partner,
                                   int k, int from, int nrest) {
  int64_t sp[TH_POOL_MAX_K];
  th_arg items[TH_POOL_MAX_K], args[8];
  spatial_of(b->args[0].u.value, k, sp);
  args[0] = cts[0];
  args[1] = th_tu_ints(items, k, sp);
  for (int i = 0; i < nrest; i++) args[2 + i] = b->args[from + i];
  return th_call(tr, partner, 2 + nrest, args, &grads[0]);
}

/* grads[0] = partner(g, args[2] .. args[nargs - 1]): the adjoint of a backward op, whose forward partner
 * takes this op's arguments less its size argument (args[1]). */
static th_status partner_without_size(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads,
                                      th_op_id partner) {
  th_arg args[8];
  args[0] = cts[0];
  for (int i = 2; i < b->nargs; i++) args[i - 1] = b->args[i];
  return th_call(tr, partner, b->nargs - 1, args, &grads[0]);
}

static th_status max_pool_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0]) || cts[0].kind == TH_ARG_NONE) return TH_OK;
  int k;
  TH_TRY(pool_k(b, 1, &k));
  return scatter_to_input(tr, b, cts[0], b->out.u.seq.items[1], k, grads);
}

static th_status pool_scatter_add_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  int k;
  TH_TRY(pool_k(b, 2, &k));
  return th_tu_call3(tr, TH_OP_prims_pool_gather, cts[0], b->args[1], th_arg_int(k), &grads[0]);
}

static th_status pool_gather_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  int64_t k;
  TH_TRY(th_meta_int(b->sym->qualname, "k", &b->args[2], &k));
  return scatter_to_input(tr, b, cts[0], b->args[1], (int)k, grads);
}

static th_status avg_pool_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  int k;
  TH_TRY(pool_k(b, 1, &k));
  return partner_with_size(tr, b, cts, grads, TH_OP_prims_avg_pool_backward, k, 1, 6);
}

static th_status avg_pool_backward_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  return partner_without_size(tr, b, cts, grads, TH_OP_prims_avg_pool);
}

/* adaptive_avg_pool <-> adaptive_avg_pool_backward, resample <-> resample_backward: the partner gets
 * the extents of this op's input in place of its size argument (args[1]); other arguments unchanged. */
static th_status partner_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads, th_op_id partner) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  int k;
  TH_TRY(pool_k(b, 1, &k));
  return partner_with_size(tr, b, cts, grads, partner, k, 2, b->nargs - 2);
}
static th_status adaptive_avg_pool_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  return partner_vjp(tr, b, cts, grads, TH_OP_prims_adaptive_avg_pool_backward);
}
static th_status adaptive_avg_pool_backward_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  return partner_vjp(tr, b, cts, grads, TH_OP_prims_adaptive_avg_pool);
}
static th_status resample_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  return partner_vjp(tr, b, cts, grads, TH_OP_prims_resample_backward);
}
static th_status resample_backward_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  return partner_vjp(tr, b, cts, grads, TH_OP_prims_resample);
}

static th_status im2col_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  return partner_with_size(tr, b, cts, grads, TH_OP_prims_col2im, 2, 1, 4);
}

static th_status col2im_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  if (!th_vjp_is_float_tensor(&b->args[0])) return TH_OK;
  return partner_without_size(tr, b, cts, grads, TH_OP_prims_im2col);
}

#define RULE(name, fn)                                                                                                 \
  { TH_OP_prims_##name, TH_VJP_RULE, fn }
const th_vjp_entry th_vjp_table_prims_pool[] = {
  RULE(max_pool, max_pool_vjp),
  RULE(adaptive_max_pool, max_pool_vjp),
  RULE(pool_scatter_add, pool_scatter_add_vjp),
  RULE(pool_gather, pool_gather_vjp),
  RULE(avg_pool, avg_pool_vjp),
  RULE(avg_pool_backward, avg_pool_backward_vjp),
  RULE(adaptive_avg_pool, adaptive_avg_pool_vjp),
  RULE(adaptive_avg_pool_backward, adaptive_avg_pool_backward_vjp),
  RULE(resample, resample_vjp),
  RULE(resample_backward, resample_backward_vjp),
  RULE(im2col, im2col_vjp),
  RULE(col2im, col2im_vjp),
};
const int th_vjp_table_prims_pool_n = (int)(sizeof th_vjp_table_prims_pool / sizeof th_vjp_table_prims_pool[0]);
#undef RULE
