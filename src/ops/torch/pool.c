/* pool.c — the torch-level pooling and resampling ops (torch.nn.functional's max_pool*, avg_pool*,
 * adaptive_*_pool*, interpolate / upsample*, pixel_shuffle, pixel_unshuffle, channel_shuffle, unfold,
 * fold, lp_pool*): PyTorch's argument rules and checks, then the prims of prims/pool.c.
 *
 * F.max_pool2d and F.adaptive_max_pool2d are torch's boolean_dispatch wrappers: traced, the wrapper
 * itself (return_indices=False) or F.max_pool2d_with_indices (return_indices=True, always a tuple)
 * reaches the tracer; each has its own row (the _with_indices rows return (values, indices) whatever
 * return_indices says, as PyTorch's).
 *
 * Dtypes follow PyTorch's CPU kernels: bfloat16 and float16 compute in float32 and round once (the
 * max pools exactly: a maximum is one of the inputs); the max pools take every integer dtype (computed
 * in int64, exactly) and avg_pool int64 (integer sum, truncating division); interpolate's nearest
 * modes take uint8 (exact through float32); the other ops take floats only. pixel_shuffle,
 * pixel_unshuffle, channel_shuffle and unfold only move elements (any dtype). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "ops/pool.h"
#include "ops/torch/torch_util.h"

/* "max_pool2d" from "ltorch.max_pool2d", for PyTorch's wording */
static const char *base(const th_symbol *sym) {
  const char *d = strchr(sym->qualname, '.');
  return d ? d + 1 : sym->qualname;
}

static th_status input_rank(const char *op, const th_arg *a, int k, const th_value **v) {
  *v = th_meta_tensor(a);
  if (!*v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if ((*v)->ndim != k + 1 && (*v)->ndim != k + 2) {
    char buf[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME, "%s: Expected %dD or %dD (batch mode) tensor for input, but got %s", op, k + 1,
                    k + 2, th_meta_shape_str((*v)->shape, (*v)->ndim, buf, sizeof buf));
  }
  return TH_OK;
}

/* "max_pool2d" not implemented for 'Bool' */
static th_status no_kernel(const th_symbol *sym, th_dtype dt) {
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: \"%s\" not implemented for '%s'", sym->qualname, base(sym),
                  th_tu_scalar_type_name(dt));
}

/* The prim's dtype for an input: float32 for bfloat16/float16, int64 for narrower integers (ints),
 * the input's own for float32/float64/int64; false where the op has no kernel. */
static bool compute_dtype(th_dtype dt, bool ints, bool int64, th_dtype *cd) {
  if (dt == TH_F32 || dt == TH_F64) return *cd = dt, true;
  if (dt == TH_BF16 || dt == TH_F16) return *cd = TH_F32, true;
  if (dt == TH_I64 && (ints || int64)) return *cd = TH_I64, true;
  if (ints && !th_dtype_is_float(dt) && dt != TH_BOOL) return *cd = TH_I64, true;
  return false;
}

static th_arg ints_arg(th_arg *items, int k, const int64_t *v) { return th_tu_ints(items, k, v); }

/* ---- max pooling ----------------------------------------------------------------------------------------- */

static th_status max_pool(th_trace *tr, const th_symbol *sym, const th_arg *args, int k, int want, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v;
  TH_TRY(input_rank(op, &args[0], k, &v));
  int64_t ks[3], st[3], pd[3], dl[3], os[3];
  TH_TRY(th_pool_ints(op, "kernel_size", &args[1], k, ks));
  int64_t tmp[TH_MAX_DIMS];
  int n = 0;
  if (args[2].kind != TH_ARG_NONE) TH_TRY(th_meta_int_list(op, "stride", &args[2], tmp, &n));
  if (n == 0)
    memcpy(st, ks, sizeof st);
  else
    TH_TRY(th_pool_ints(op, "stride", &args[2], k, st));
  TH_TRY(th_pool_ints(op, "padding", &args[3], k, pd));
  TH_TRY(th_pool_ints(op, "dilation", &args[4], k, dl));
  bool ceil_mode, ret;
  TH_TRY(th_tu_bool(op, "ceil_mode", &args[5], &ceil_mode));
  TH_TRY(th_tu_bool(op, "return_indices", &args[6], &ret));
  if (want >= 0) ret = want;
  for (int d = 0; d < v->ndim - k; d++)
    if (v->shape[d] == 0 && (d > 0 || v->ndim == k + 1))
      return th_error(TH_ERR_RUNTIME, "%s: non-empty %dD or %dD (batch mode) tensor expected for input", op, k + 1,
                      k + 2);
  TH_TRY(th_pool_check(op, k, v->ndim, v->shape, ks, st, pd, dl, ceil_mode, os));
  th_dtype cd;
  if (!compute_dtype(v->dtype, true, true, &cd)) return no_kernel(sym, v->dtype);
  th_arg x = args[0], items[4][3], call[6], r;
  TH_TRY(th_tu_convert(tr, &x, cd));
  call[0] = x;
  call[1] = ints_arg(items[0], k, ks);
  call[2] = ints_arg(items[1], k, st);
  call[3] = ints_arg(items[2], k, pd);
  call[4] = ints_arg(items[3], k, dl);
  call[5] = th_arg_bool(ceil_mode);
  TH_TRY(th_call(tr, TH_OP_prims_max_pool, 6, call, &r));
  th_arg vals = r.u.seq.items[0], idx = r.u.seq.items[1];
  TH_TRY(th_tu_convert(tr, &vals, v->dtype));
  if (!ret) return *out = vals, TH_OK;
  th_arg pair[2] = {vals, idx};
  return th_tu_tuple_out(tr, 2, pair, out);
}

#define MAX_POOL(n)                                                                                                    \
  th_status ltorch_max_pool##n##d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {        \
    return max_pool(tr, sym, args, n, -1, out);                                                                        \
  }                                                                                                                    \
  th_status ltorch_max_pool##n##d_with_indices_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args,          \
                                                      th_arg *out) {                                                   \
    return max_pool(tr, sym, args, n, 1, out);                                                                         \
  }
MAX_POOL(1)
MAX_POOL(2)
MAX_POOL(3)
#undef MAX_POOL

/* ---- adaptive pooling ---------------------------------------------------------------------------------- */

/* output_size: an int (every dim) or k ints, None entries keeping the input's extent. */
static th_status adaptive_size(const char *op, const th_arg *a, const th_value *v, int k, int64_t *os) {
  const int64_t *sp = v->shape + v->ndim - k;
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) {
    if (a->u.seq.n != k && !(a->u.seq.n == 1 && k == 1))
      return th_error(TH_ERR_RUNTIME, "%s: output_size must be %d ints, but got %d values", op, k, a->u.seq.n);
    for (int i = 0; i < k; i++) {
      const th_arg *e = &a->u.seq.items[i];
      if (e->kind == TH_ARG_NONE)
        os[i] = sp[i];
      else
        TH_TRY(th_meta_int(op, "output_size", e, &os[i]));
    }
  } else {
    int64_t s;
    TH_TRY(th_meta_int(op, "output_size", a, &s));
    for (int i = 0; i < k; i++) os[i] = s;
  }
  for (int i = 0; i < k; i++)
    if (os[i] < 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: elements of output_size must be greater than or equal to 0 but received %" PRId64, op,
                      os[i]);
  return TH_OK;
}

static th_status adaptive_input(const th_symbol *sym, const th_arg *a, int k, const th_value **v) {
  const char *op = sym->qualname;
  *v = th_meta_tensor(a);
  if (!*v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  char buf[TH_META_SHAPE_BUF];
  if ((*v)->ndim != k + 1 && (*v)->ndim != k + 2)
    return th_error(TH_ERR_RUNTIME, "%s: %s(): Expected %dD or %dD tensor, but got %s", op, base(sym), k + 1, k + 2,
                    th_meta_shape_str((*v)->shape, (*v)->ndim, buf, sizeof buf));
  for (int d = (*v)->ndim == k + 2 ? 1 : 0; d < (*v)->ndim; d++)
    if ((*v)->shape[d] == 0)
      return th_error(TH_ERR_RUNTIME,
                      "%s: %s(): Expected input to have non-zero size for non-batch dimensions, but input has sizes %s "
                      "with dimension %d being empty",
                      op, base(sym), th_meta_shape_str((*v)->shape, (*v)->ndim, buf, sizeof buf), d);
  return TH_OK;
}

/* adaptive average pooling of a float tensor over its last k dims to os (shared with interpolate's
 * 'area' mode). An output of one element per plane is the mean over the window (the global pooling
 * of classification heads): the reduction kernels, and mean's gradient. */
static th_status adaptive_avg(th_trace *tr, const th_symbol *sym, th_arg x, const th_value *v, int k, const int64_t *os,
                              th_arg *out) {
  th_dtype cd;
  if (!compute_dtype(v->dtype, false, false, &cd)) return no_kernel(sym, v->dtype);
  bool global = true;
  for (int i = 0; i < k; i++) global &= os[i] == 1;
  if (global) {
    int64_t dims[3];
    th_arg items[3];
    for (int i = 0; i < k; i++) dims[i] = v->ndim - k + i;
    th_arg call[3] = {x, th_tu_ints(items, k, dims), th_arg_bool(true)};
    return th_call(tr, TH_OP_ltorch_mean, 3, call, out);
  }
  th_arg items[3];
  TH_TRY(th_tu_convert(tr, &x, cd));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_adaptive_avg_pool, x, th_tu_ints(items, k, os), out));
  return th_tu_convert(tr, out, v->dtype);
}

#define ADAPTIVE(n)                                                                                                    \
  th_status ltorch_adaptive_avg_pool##n##d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args,              \
                                                  th_arg *out) {                                                       \
    const th_value *v;                                                                                                 \
    int64_t os[3];                                                                                                     \
    TH_TRY(adaptive_input(sym, &args[0], n, &v));                                                                      \
    TH_TRY(adaptive_size(sym->qualname, &args[1], v, n, os));                                                          \
    return adaptive_avg(tr, sym, args[0], v, n, os, out);                                                              \
  }                                                                                                                    \
  th_status ltorch_adaptive_max_pool##n##d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args,              \
                                                  th_arg *out) {                                                       \
    return adaptive_max(tr, sym, args, n, -1, out);                                                                    \
  }                                                                                                                    \
  th_status ltorch_adaptive_max_pool##n##d_with_indices_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, \
                                                               th_arg *out) {                                          \
    return adaptive_max(tr, sym, args, n, 1, out);                                                                     \
  }

static th_status adaptive_max(th_trace *tr, const th_symbol *sym, const th_arg *args, int k, int want, th_arg *out) {
  const th_value *v;
  int64_t os[3];
  bool ret;
  TH_TRY(adaptive_input(sym, &args[0], k, &v));
  TH_TRY(adaptive_size(sym->qualname, &args[1], v, k, os));
  TH_TRY(th_tu_bool(sym->qualname, "return_indices", &args[2], &ret));
  if (want >= 0) ret = want;
  th_dtype cd;
  if (!compute_dtype(v->dtype, false, false, &cd)) return no_kernel(sym, v->dtype);
  th_arg x = args[0], items[3], r;
  TH_TRY(th_tu_convert(tr, &x, cd));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_adaptive_max_pool, x, th_tu_ints(items, k, os), &r));
  th_arg vals = r.u.seq.items[0], idx = r.u.seq.items[1];
  TH_TRY(th_tu_convert(tr, &vals, v->dtype));
  if (!ret) return *out = vals, TH_OK;
  th_arg pair[2] = {vals, idx};
  return th_tu_tuple_out(tr, 2, pair, out);
}

ADAPTIVE(1)
ADAPTIVE(2)
ADAPTIVE(3)
#undef ADAPTIVE

/* ---- average pooling ------------------------------------------------------------------------------------ */

static th_status avg_pool(th_trace *tr, const th_symbol *sym, const th_arg *args, int k, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v;
  TH_TRY(input_rank(op, &args[0], k, &v));
  int64_t ks[3], st[3], pd[3], os[3], tmp[TH_MAX_DIMS];
  int n = 0;
  TH_TRY(th_pool_ints(op, "kernel_size", &args[1], k, ks));
  if (args[2].kind != TH_ARG_NONE) TH_TRY(th_meta_int_list(op, "stride", &args[2], tmp, &n));
  if (n == 0)
    memcpy(st, ks, sizeof st);
  else
    TH_TRY(th_pool_ints(op, "stride", &args[2], k, st));
  TH_TRY(th_pool_ints(op, "padding", &args[3], k, pd));
  bool ceil_mode, cip;
  TH_TRY(th_tu_bool(op, "ceil_mode", &args[4], &ceil_mode));
  TH_TRY(th_tu_bool(op, "count_include_pad", &args[5], &cip));
  th_arg div = k == 1 ? th_arg_none() : args[6];
  if (div.kind != TH_ARG_NONE) {
    int64_t dv;
    TH_TRY(th_meta_int(op, "divisor_override", &div, &dv));
    if (dv == 0) return th_error(TH_ERR_RUNTIME, "%s: divisor must be not zero", op);
    div = th_arg_int(dv);
  }
  for (int d = 0; d < v->ndim - k; d++)
    if (v->shape[d] == 0 && (d > 0 || v->ndim == k + 1))
      return th_error(TH_ERR_RUNTIME, "%s: non-empty %dD or %dD (batch mode) tensor expected for input", op, k + 1,
                      k + 2);
  TH_TRY(th_pool_check(op, k, v->ndim, v->shape, ks, st, pd, NULL, ceil_mode, os));
  th_dtype cd;
  if (!compute_dtype(v->dtype, false, true, &cd)) return no_kernel(sym, v->dtype);
  th_arg x = args[0], items[3][3], call[7];
  TH_TRY(th_tu_convert(tr, &x, cd));
  call[0] = x;
  call[1] = ints_arg(items[0], k, ks);
  call[2] = ints_arg(items[1], k, st);
  call[3] = ints_arg(items[2], k, pd);
  call[4] = th_arg_bool(ceil_mode);
  call[5] = th_arg_bool(cip);
  call[6] = div;
  TH_TRY(th_call(tr, TH_OP_prims_avg_pool, 7, call, out));
  return th_tu_convert(tr, out, v->dtype);
}

th_status ltorch_avg_pool1d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return avg_pool(tr, sym, args, 1, out);
}
th_status ltorch_avg_pool2d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return avg_pool(tr, sym, args, 2, out);
}
th_status ltorch_avg_pool3d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return avg_pool(tr, sym, args, 3, out);
}

/* ---- interpolate / upsample ------------------------------------------------------------------------------------ *
 * F.interpolate's Python logic (size or scale_factor, recompute_scale_factor, the mode for the input's
 * rank), then ATen's upsample_* kernels: output extents floor(in * scale_factor) when only a scale is
 * given, the scale itself handed to the prim (1 / scale_factor replaces in / out in the source-index
 * formulas) unless recomputed. 'area' is adaptive_avg_pool. antialias is not supported. */

static th_status interpolate(th_trace *tr, const th_symbol *sym, th_arg x, const th_arg *size, const th_arg *scale,
                             const char *mode, const th_arg *align_arg, const th_arg *recompute_arg, bool antialias,
                             th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&x);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  static const char *const modes[] = {"nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact"};
  int m = -1;
  for (int i = 0; i < 7; i++)
    if (!strcmp(mode, modes[i])) m = i;
  if (!strcmp(mode, "lanczos"))
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.nn.functional.interpolate with mode='lanczos' is not supported by thunder_c", op);
  bool interp = m == 1 || m == 2 || m == 3 || m == 4;
  bool align = false;
  if (!interp && align_arg->kind != TH_ARG_NONE)
    return th_error(TH_ERR_VALUE,
                    "%s: align_corners option can only be set with the interpolating modes: linear | bilinear | "
                    "bicubic | trilinear",
                    op);
  if (align_arg->kind != TH_ARG_NONE) TH_TRY(th_tu_bool(op, "align_corners", align_arg, &align));
  int k = v->ndim - 2;
  int64_t os[TH_MAX_DIMS];
  double sf[TH_MAX_DIMS];
  bool has_size = size->kind != TH_ARG_NONE, has_scale = scale->kind != TH_ARG_NONE;
  char buf[TH_META_SHAPE_BUF];
  if (has_size && has_scale)
    return th_error(TH_ERR_VALUE, "%s: only one of size or scale_factor should be defined", op);
  if (k < 1 || k > 3) {
    if (m < 0) goto bad_mode;
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: Input Error: Only 3D, 4D and 5D input Tensors supported (got %dD) for the modes: nearest | "
                    "linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact (got %s)",
                    op, v->ndim, mode);
  }
  if (has_size) {
    if (size->kind == TH_ARG_TUPLE || size->kind == TH_ARG_LIST) {
      if (size->u.seq.n != k)
        return th_error(TH_ERR_VALUE,
                        "%s: Input and output must have the same number of spatial dimensions, but got input with "
                        "spatial dimensions of %s and output size of %d values",
                        op, th_meta_shape_str(v->shape + 2, k, buf, sizeof buf), size->u.seq.n);
      for (int i = 0; i < k; i++) {
        const th_arg *e = &size->u.seq.items[i];
        if (!(e->kind == TH_ARG_INT || (th_meta_is_number(e) && th_meta_number_type(e) == TH_I64)))
          return th_error(TH_ERR_TYPE,
                          "%s: expected size to be one of int or Tuple[int] or Tuple[int, int] or Tuple[int, int, int]",
                          op);
        TH_TRY(th_meta_int(op, "size", e, &os[i]));
      }
    } else {
      int64_t s;
      TH_TRY(th_meta_int(op, "size", size, &s));
      for (int i = 0; i < k; i++) os[i] = s;
    }
  } else if (has_scale) {
    if (scale->kind == TH_ARG_TUPLE || scale->kind == TH_ARG_LIST) {
      if (scale->u.seq.n != k)
        return th_error(TH_ERR_VALUE,
                        "%s: Input and scale_factor must have the same number of spatial dimensions, but got input "
                        "with spatial dimensions of %s and scale_factor of %d values",
                        op, th_meta_shape_str(v->shape + 2, k, buf, sizeof buf), scale->u.seq.n);
      for (int i = 0; i < k; i++) TH_TRY(th_tu_float(op, "scale_factor", &scale->u.seq.items[i], &sf[i]));
    } else {
      double s;
      TH_TRY(th_tu_float(op, "scale_factor", scale, &s));
      for (int i = 0; i < k; i++) sf[i] = s;
    }
  } else {
    return th_error(TH_ERR_VALUE, "%s: either size or scale_factor should be defined", op);
  }
  bool recompute = false;
  if (recompute_arg->kind != TH_ARG_NONE) TH_TRY(th_tu_bool(op, "recompute_scale_factor", recompute_arg, &recompute));
  if (recompute && has_size)
    return th_error(TH_ERR_VALUE, "%s: recompute_scale_factor is not meaningful with an explicit size.", op);
  if (m == 5 && !has_size) recompute = true;
  bool pass_scales = has_scale && !recompute;
  if (!has_size)
    for (int i = 0; i < k; i++) os[i] = (int64_t)((double)v->shape[2 + i] * sf[i]);
  if (antialias) {
    if (!((m == 2 || m == 3) && v->ndim == 4))
      return th_error(TH_ERR_VALUE,
                      "%s: Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D "
                      "tensor as input",
                      op);
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.nn.functional.interpolate with antialias=True is not supported by thunder_c", op);
  }
  static const int need_k[] = {0, 1, 2, 2, 3, 0, 0};
  if (m < 0) {
  bad_mode:
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: Input Error: Only 3D, 4D and 5D input Tensors supported (got %dD) for the modes: nearest | "
                    "linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact (got %s)",
                    op, v->ndim, mode);
  }
  if (need_k[m] && need_k[m] != k)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: Got %dD input, but %s mode needs %dD input", op, v->ndim, mode,
                    need_k[m] + 2);
  if (m == 5) { /* area */
    for (int d = 1; d < v->ndim; d++)
      if (v->shape[d] == 0)
        return th_error(TH_ERR_RUNTIME,
                        "%s: adaptive_avg_pool: Expected input to have non-zero size for non-batch "
                        "dimensions",
                        op);
    return adaptive_avg(tr, sym, x, v, k, os, out);
  }
  bool bad = false;
  for (int i = 0; i < k; i++) bad |= os[i] <= 0 || v->shape[2 + i] <= 0;
  if (bad) {
    char b1[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_RUNTIME, "%s: Input and output sizes should be greater than 0, but got input %s output %s",
                    op, th_meta_shape_str(v->shape + 2, k, buf, sizeof buf), th_meta_shape_str(os, k, b1, sizeof b1));
  }
  /* uint8 images: the nearest modes copy elements, exactly through float32 (PyTorch's uint8 bilinear and
   * bicubic kernels round in their own fixed-point way: not supported) */
  th_dtype cd;
  bool u8_nearest = v->dtype == TH_U8 && (m == 0 || m == 6);
  if (u8_nearest)
    cd = TH_F32;
  else if (v->dtype == TH_U8)
    return th_error(TH_ERR_NOT_IMPLEMENTED,
                    "%s: torch.nn.functional.interpolate of a uint8 tensor with mode='%s' is not supported by "
                    "thunder_c (convert it to a float dtype first)",
                    op, mode);
  else if (!compute_dtype(v->dtype, false, false, &cd))
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: \"upsample_%s\" not implemented for '%s'", op, mode,
                    th_tu_scalar_type_name(v->dtype));
  const char *pm = m == 0 ? "nearest" : m == 6 ? "nearest-exact" : m == 3 ? "cubic" : "linear";
  th_arg items[3], sitems[3], call[5];
  for (int i = 0; i < k; i++) sitems[i] = th_arg_float(sf[i]);
  TH_TRY(th_tu_convert(tr, &x, cd));
  call[0] = x;
  call[1] = th_tu_ints(items, k, os);
  call[2] = th_arg_str(pm);
  call[3] = th_arg_bool(interp && align);
  call[4] = pass_scales ? th_arg_tuple(k, sitems) : th_arg_none();
  TH_TRY(th_call(tr, TH_OP_prims_resample, 5, call, out));
  return th_tu_convert(tr, out, v->dtype);
}

static th_status str_arg(const char *op, const char *what, const th_arg *a, const char **s) {
  if (a->kind != TH_ARG_STR) return th_error(TH_ERR_TYPE, "%s: expected %s to be a str", op, what);
  *s = a->u.s;
  return TH_OK;
}

th_status ltorch_interpolate_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *mode = NULL;
  bool aa;
  TH_TRY(str_arg(sym->qualname, "mode", &args[3], &mode));
  TH_TRY(th_tu_bool(sym->qualname, "antialias", &args[6], &aa));
  return interpolate(tr, sym, args[0], &args[1], &args[2], mode, &args[4], &args[5], aa, out);
}

th_status ltorch_upsample_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *mode = NULL;
  th_arg none = th_arg_none();
  TH_TRY(str_arg(sym->qualname, "mode", &args[3], &mode));
  return interpolate(tr, sym, args[0], &args[1], &args[2], mode, &args[4], &none, false, out);
}

th_status ltorch_upsample_nearest_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_arg none = th_arg_none();
  return interpolate(tr, sym, args[0], &args[1], &args[2], "nearest", &none, &none, false, out);
}

/* F.upsample_bilinear: interpolate(mode='bilinear', align_corners=True) */
th_status ltorch_upsample_bilinear_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_arg none = th_arg_none(), yes = th_arg_bool(true);
  return interpolate(tr, sym, args[0], &args[1], &args[2], "bilinear", &yes, &none, false, out);
}

/* ---- pixel_shuffle, pixel_unshuffle, channel_shuffle: reshape, permute, reshape ------------------------------- */

static th_status shuffle(th_trace *tr, th_arg x, int nd1, const int64_t *s1, const int64_t *perm, int nd2,
                         const int64_t *s2, th_arg *out) {
  th_arg t;
  TH_TRY(th_tu_reshape(tr, x, nd1, s1, &t));
  TH_TRY(th_tu_transpose(tr, t, perm, &t));
  return th_tu_reshape(tr, t, nd2, s2, out);
}

static th_status shuffle_factor(const char *op, const th_arg *xa, const th_arg *fa, const char *what,
                                const th_value **v, int64_t *r) {
  *v = th_meta_tensor(xa);
  if (!*v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  TH_TRY(th_meta_int(op, what, fa, r));
  if ((*v)->ndim + 3 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: input of %d dims is not supported", op, (*v)->ndim);
  return TH_OK;
}

th_status ltorch_pixel_shuffle_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v;
  int64_t r;
  TH_TRY(shuffle_factor(op, &args[0], &args[1], "upscale_factor", &v, &r));
  if (v->ndim < 3)
    return th_error(TH_ERR_RUNTIME,
                    "%s: pixel_shuffle expects input to have at least 3 dimensions, but got input with %d dimension(s)",
                    op, v->ndim);
  if (r <= 0)
    return th_error(TH_ERR_RUNTIME, "%s: pixel_shuffle expects a positive upscale_factor, but got %" PRId64, op, r);
  int L = v->ndim - 3;
  int64_t C = v->shape[L], H = v->shape[L + 1], W = v->shape[L + 2];
  if (C % (r * r) != 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                    "upscale_factor, but input.size(-3)=%" PRId64 " is not divisible by %" PRId64,
                    op, C, r * r);
  int64_t s1[TH_MAX_DIMS], perm[TH_MAX_DIMS], s2[TH_MAX_DIMS];
  for (int i = 0; i < L; i++) s1[i] = s2[i] = v->shape[i], perm[i] = i;
  int64_t a1[5] = {C / (r * r), r, r, H, W}, p1[5] = {0, 3, 1, 4, 2}, a2[3] = {C / (r * r), H * r, W * r};
  for (int i = 0; i < 5; i++) s1[L + i] = a1[i], perm[L + i] = L + p1[i];
  for (int i = 0; i < 3; i++) s2[L + i] = a2[i];
  return shuffle(tr, args[0], L + 5, s1, perm, L + 3, s2, out);
}

th_status ltorch_pixel_unshuffle_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v;
  int64_t r;
  TH_TRY(shuffle_factor(op, &args[0], &args[1], "downscale_factor", &v, &r));
  if (v->ndim < 3)
    return th_error(TH_ERR_RUNTIME,
                    "%s: pixel_unshuffle expects input to have at least 3 dimensions, but got input with %d "
                    "dimension(s)",
                    op, v->ndim);
  if (r <= 0)
    return th_error(TH_ERR_RUNTIME, "%s: pixel_unshuffle expects a positive downscale_factor, but got %" PRId64, op, r);
  int L = v->ndim - 3;
  int64_t C = v->shape[L], H = v->shape[L + 1], W = v->shape[L + 2];
  if (H % r != 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: pixel_unshuffle expects height to be divisible by downscale_factor, but "
                    "input.size(-2)=%" PRId64 " is not divisible by %" PRId64,
                    op, H, r);
  if (W % r != 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: pixel_unshuffle expects width to be divisible by downscale_factor, but "
                    "input.size(-1)=%" PRId64 " is not divisible by %" PRId64,
                    op, W, r);
  int64_t s1[TH_MAX_DIMS], perm[TH_MAX_DIMS], s2[TH_MAX_DIMS];
  for (int i = 0; i < L; i++) s1[i] = s2[i] = v->shape[i], perm[i] = i;
  int64_t a1[5] = {C, H / r, r, W / r, r}, p1[5] = {0, 2, 4, 1, 3}, a2[3] = {C * r * r, H / r, W / r};
  for (int i = 0; i < 5; i++) s1[L + i] = a1[i], perm[L + i] = L + p1[i];
  for (int i = 0; i < 3; i++) s2[L + i] = a2[i];
  return shuffle(tr, args[0], L + 5, s1, perm, L + 3, s2, out);
}

th_status ltorch_channel_shuffle_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v;
  int64_t g;
  TH_TRY(shuffle_factor(op, &args[0], &args[1], "groups", &v, &g));
  char buf[TH_META_SHAPE_BUF];
  if (v->ndim <= 2)
    return th_error(TH_ERR_RUNTIME, "%s: channel_shuffle expects input with > 2 dims, but got input with sizes %s", op,
                    th_meta_shape_str(v->shape, v->ndim, buf, sizeof buf));
  if (g <= 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Number of groups to divide channels in must be positive. Value of groups:%" PRId64, op, g);
  int64_t C = v->shape[1];
  if (C % g != 0)
    return th_error(
      TH_ERR_RUNTIME,
      "%s: Number of channels must be divisible by groups. Got %" PRId64 " channels and %" PRId64 " groups.", op, C, g);
  int64_t s1[TH_MAX_DIMS], perm[TH_MAX_DIMS];
  s1[0] = v->shape[0], s1[1] = g, s1[2] = C / g;
  perm[0] = 0, perm[1] = 2, perm[2] = 1;
  for (int i = 2; i < v->ndim; i++) s1[i + 1] = v->shape[i], perm[i + 1] = i + 1;
  return shuffle(tr, args[0], v->ndim + 1, s1, perm, v->ndim, v->shape, out);
}

/* ---- unfold (im2col) and fold (col2im) ------------------------------------------------------------------------- */

th_status ltorch_nn_unfold_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (v->ndim != 3 && v->ndim != 4)
    return th_error(TH_ERR_RUNTIME, "%s: Input Error: Only 3D or 4D input Tensors are supported (got %dD)", op,
                    v->ndim);
  if (th_dtype_is_fp8(v->dtype)) return no_kernel(sym, v->dtype);
  int64_t p[4][2];
  th_arg items[4][2], call[5];
  static const char *const what[] = {"kernel_size", "dilation", "padding", "stride"};
  for (int i = 0; i < 4; i++) TH_TRY(th_pool_ints(op, what[i], &args[1 + i], 2, p[i]));
  th_arg x = args[0];
  if (v->dtype == TH_BF16 || v->dtype == TH_F16) TH_TRY(th_tu_convert(tr, &x, TH_F32));
  call[0] = x;
  for (int i = 0; i < 4; i++) call[1 + i] = th_tu_ints(items[i], 2, p[i]);
  TH_TRY(th_call(tr, TH_OP_prims_im2col, 5, call, out));
  return th_tu_convert(tr, out, v->dtype);
}

th_status ltorch_fold_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = th_meta_tensor(&args[0]);
  if (!v) return th_error(TH_ERR_TYPE, "%s: expected input to be a tensor", op);
  if (v->ndim != 2 && v->ndim != 3)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported "
                    "(got %dD)",
                    op, v->ndim);
  th_dtype cd;
  if (!compute_dtype(v->dtype, false, false, &cd)) return no_kernel(sym, v->dtype);
  int64_t p[5][2];
  th_arg items[5][2], call[6];
  static const char *const what[] = {"output_size", "kernel_size", "dilation", "padding", "stride"};
  for (int i = 0; i < 5; i++) TH_TRY(th_pool_ints(op, what[i], &args[1 + i], 2, p[i]));
  th_arg x = args[0];
  TH_TRY(th_tu_convert(tr, &x, cd));
  call[0] = x;
  for (int i = 0; i < 5; i++) call[1 + i] = th_tu_ints(items[i], 2, p[i]);
  TH_TRY(th_call(tr, TH_OP_prims_col2im, 6, call, out));
  return th_tu_convert(tr, out, v->dtype);
}

/* ---- lp_pool1d/2d/3d ----------------------------------------------------------------------------------------- *
 * F.lp_poolNd's composition: (sign(s) * relu(|s|) * prod(kernel)) ** (1 / p) with s the average pooling
 * of input ** p (no padding); p = +-inf is the max pooling of |input| (of -|input|, negated). */

static th_status lp_pool(th_trace *tr, const th_symbol *sym, const th_arg *args, int k, th_arg *out) {
  const char *op = sym->qualname;
  double p;
  TH_TRY(th_tu_float(op, "norm_type", &args[1], &p));
  if (p == 0) return th_error(TH_ERR_VALUE, "%s: norm_type must be a non-zero value, but got %g", op, p);
  int64_t ks[3];
  TH_TRY(th_pool_ints(op, "kernel_size", &args[2], k, ks));
  th_arg x = args[0], t, u;
  if (isinf(p)) {
    TH_TRY(th_tu_call1(tr, TH_OP_ltorch_abs, x, &t));
    if (p < 0) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_neg, t, &t));
    th_arg call[7] = {t, args[2], args[3], th_arg_int(0), th_arg_int(1), args[4], th_arg_bool(false)};
    TH_TRY(max_pool(tr, sym, call, k, -1, out));
    if (p < 0) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_neg, *out, out));
    return TH_OK;
  }
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_pow, x, args[1], &t));
  th_arg call[7] = {t, args[2], args[3], th_arg_int(0), args[4], th_arg_bool(true), th_arg_none()};
  TH_TRY(avg_pool(tr, sym, call, k, &t));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_abs, t, &u));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_relu, u, &u));
  TH_TRY(th_tu_call1(tr, TH_OP_ltorch_sign, t, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, t, u, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, t, th_arg_int(ks[0] * (k > 1 ? ks[1] : 1) * (k > 2 ? ks[2] : 1)), &t));
  return th_tu_call2(tr, TH_OP_ltorch_pow, t, th_arg_float(1.0 / p), out);
}

th_status ltorch_lp_pool1d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return lp_pool(tr, sym, args, 1, out);
}
th_status ltorch_lp_pool2d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return lp_pool(tr, sym, args, 2, out);
}
th_status ltorch_lp_pool3d_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return lp_pool(tr, sym, args, 3, out);
}
