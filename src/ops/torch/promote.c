/* promote.c — the machinery every torch-level decomposition shares (declared in torch_util.h):
 * Thunder's elementwise type promotion lattice, broadcasting, maybe_convert_to_dtype, the
 * elementwise wrappers, and small helpers that record shape prims.
 *
 * Type promotion follows thunder/core/utils.py exactly: the promotion type is a left fold of a
 * pairwise lattice over the arguments' types, starting from Python bool. Each type is a dtype plus a
 * strength: strong (a tensor), weak (a 0-dim tensor) or a Python number (bool/int/float). The exact
 * lattice is  bool < b8_ < b8,  int < i8_ < i16_ < i32_ < i64_ < i8 < i16 < i32 < i64,  u8_ < u8, with
 * unsigned + signed giving i16; the inexact one is  float < bf16_/f16_ < f32_ < f64_ < bf16/f16 < f32
 * < f64 with bf16 + f16 = f32. Exact with inexact gives the inexact type. fp8 has no entry.
 * One deliberate difference from Thunder's table, to match PyTorch: a bool tensor with a Python int
 * gives the Python int's type (int64), not int8 (torch.tensor([True]) + 300 is int64 [301]). */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

/* ---- the lattice --------------------------------------------------------------------------------- */

/* Exact types: 0 bool 1 b8_ 2 b8 3 int 4 u8_ 5 u8 6 i8_ 7 i16_ 8 i32_ 9 i64_ 10 i8 11 i16 12 i32 13 i64 */
static const unsigned char exact_table[14][14] = {
  {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},           /* bool */
  {1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},           /* b8_ */
  {2, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},           /* b8 */
  {3, 3, 3, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13},           /* int */
  {4, 4, 4, 4, 4, 5, 11, 11, 11, 11, 11, 11, 12, 13},       /* u8_ */
  {5, 5, 5, 5, 5, 5, 11, 11, 11, 11, 11, 11, 12, 13},       /* u8 */
  {6, 6, 6, 6, 11, 11, 6, 7, 8, 9, 10, 11, 12, 13},         /* i8_ */
  {7, 7, 7, 7, 11, 11, 7, 7, 8, 9, 10, 11, 12, 13},         /* i16_ */
  {8, 8, 8, 8, 11, 11, 8, 8, 8, 9, 10, 11, 12, 13},         /* i32_ */
  {9, 9, 9, 9, 11, 11, 9, 9, 9, 9, 10, 11, 12, 13},         /* i64_ */
  {10, 10, 10, 10, 11, 11, 10, 10, 10, 10, 10, 11, 12, 13}, /* i8 */
  {11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 12, 13}, /* i16 */
  {12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 13}, /* i32 */
  {13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13}, /* i64 */
};
static const th_tu_type exact_types[14] = {
  {TH_BOOL, TH_TU_NUMBER}, {TH_BOOL, TH_TU_WEAK},  {TH_BOOL, TH_TU_STRONG}, {TH_I64, TH_TU_NUMBER},
  {TH_U8, TH_TU_WEAK},     {TH_U8, TH_TU_STRONG},  {TH_I8, TH_TU_WEAK},     {TH_I16, TH_TU_WEAK},
  {TH_I32, TH_TU_WEAK},    {TH_I64, TH_TU_WEAK},   {TH_I8, TH_TU_STRONG},   {TH_I16, TH_TU_STRONG},
  {TH_I32, TH_TU_STRONG},  {TH_I64, TH_TU_STRONG},
};

/* Inexact types: 0 float 1 bf16_ 2 f16_ 3 f32_ 4 f64_ 5 bf16 6 f16 7 f32 8 f64 */
static const unsigned char inexact_table[9][9] = {
  {0, 1, 2, 3, 4, 5, 6, 7, 8}, /* float */
  {1, 1, 3, 3, 4, 5, 6, 7, 8}, /* bf16_ */
  {2, 3, 2, 3, 4, 5, 6, 7, 8}, /* f16_ */
  {3, 3, 3, 3, 4, 5, 6, 7, 8}, /* f32_ */
  {4, 4, 4, 4, 4, 5, 6, 7, 8}, /* f64_ */
  {5, 5, 5, 5, 5, 5, 7, 7, 8}, /* bf16 */
  {6, 6, 6, 6, 6, 7, 6, 7, 8}, /* f16 */
  {7, 7, 7, 7, 7, 7, 7, 7, 8}, /* f32 */
  {8, 8, 8, 8, 8, 8, 8, 8, 8}, /* f64 */
};
static const th_tu_type inexact_types[9] = {
  {TH_F64, TH_TU_NUMBER},  {TH_BF16, TH_TU_WEAK},  {TH_F16, TH_TU_WEAK},   {TH_F32, TH_TU_WEAK},   {TH_F64, TH_TU_WEAK},
  {TH_BF16, TH_TU_STRONG}, {TH_F16, TH_TU_STRONG}, {TH_F32, TH_TU_STRONG}, {TH_F64, TH_TU_STRONG},
};

static bool type_is_exact(th_tu_type t) { return t.dtype == TH_BOOL || th_dtype_is_integer(t.dtype); }
static bool type_is_bool(th_tu_type t) { return t.dtype == TH_BOOL; }
static bool type_eq(th_tu_type a, th_tu_type b) { return a.dtype == b.dtype && a.strength == b.strength; }

static int exact_index(th_tu_type t) {
  for (int i = 0; i < 14; i++)
    if (type_eq(exact_types[i], t)) return i;
  return -1;
}

static int inexact_index(th_tu_type t) {
  for (int i = 0; i < 9; i++)
    if (type_eq(inexact_types[i], t)) return i;
  return -1;
}

th_tu_type th_tu_arg_type(const th_arg *a) {
  th_tu_type t = {TH_BOOL, TH_TU_NUMBER};
  if (th_meta_is_tensor(a)) {
    const th_value *v = a->u.value;
    t.dtype = v->dtype;
    t.strength = v->ndim == 0 ? TH_TU_WEAK : TH_TU_STRONG;
  } else if (th_meta_is_number(a)) {
    t.dtype = th_meta_number_type(a);
  }
  return t;
}

th_dtype th_tu_tensor_dtype(th_tu_type t) {
  if (t.strength == TH_TU_NUMBER && t.dtype == TH_F64) return TH_F32; /* Python float -> default dtype */
  return t.dtype;
}

th_status th_tu_promote_pair(const char *op, th_tu_type a, th_tu_type b, th_tu_type *out) {
  const th_tu_type ab[2] = {a, b};
  for (int i = 0; i < 2; i++)
    if (th_dtype_is_fp8(ab[i].dtype))
      return th_error(TH_ERR_TYPE,
                      "%s: type promotion is not defined for %s tensors; fp8 tensors must be converted explicitly "
                      "(e.g. .to(torch.float32))",
                      op, th_dtype_name(ab[i].dtype));
  bool ea = type_is_exact(a), eb = type_is_exact(b);
  if (!ea && eb) {
    *out = a;
    return TH_OK;
  }
  if (ea && !eb) {
    *out = b;
    return TH_OK;
  }
  if (ea) {
    int i = exact_index(a), j = exact_index(b);
    TH_ASSERT(i >= 0 && j >= 0);
    *out = exact_types[exact_table[i][j]];
    return TH_OK;
  }
  int i = inexact_index(a), j = inexact_index(b);
  TH_ASSERT(i >= 0 && j >= 0);
  *out = inexact_types[inexact_table[i][j]];
  return TH_OK;
}

th_status th_tu_promote(const char *op, int n, const th_arg *args, th_tu_promo kind, th_tu_type *computation,
                        th_tu_type *result) {
  th_tu_type p = {TH_BOOL, TH_TU_NUMBER};
  bool all_numbers = true;
  for (int i = 0; i < n; i++) {
    if (args[i].kind == TH_ARG_NONE) continue;
    if (!th_meta_is_tensor(&args[i]) && !th_meta_is_number(&args[i]))
      return th_error(TH_ERR_TYPE, "%s: expected a tensor or a number for type promotion", op);
    all_numbers &= !th_meta_is_tensor(&args[i]);
    TH_TRY(th_tu_promote_pair(op, p, th_tu_arg_type(&args[i]), &p));
  }
  const th_tu_type py_bool = {TH_BOOL, TH_TU_NUMBER}, py_int = {TH_I64, TH_TU_NUMBER},
                   py_float = {TH_F64, TH_TU_NUMBER};
  switch (kind) {
    case TH_TU_PROMO_PRESERVE: *computation = *result = p; return TH_OK;
    case TH_TU_PROMO_ALWAYS_BOOL:
      *computation = p;
      *result = py_bool;
      return TH_OK;
    case TH_TU_PROMO_INT_TO_FLOAT:
      if (type_is_exact(p)) {
        *computation = *result = py_float;
        return TH_OK;
      }
      break;
    case TH_TU_PROMO_BOOL_TO_LONG:
      if (type_is_bool(p)) {
        *computation = *result = py_int;
        return TH_OK;
      }
      break;
    case TH_TU_PROMO_NUMBER_TO_INT:
      if (all_numbers && !type_is_exact(p)) {
        *computation = p;
        *result = py_int;
        return TH_OK;
      }
      break;
    case TH_TU_PROMO_DEFAULT:
    case TH_TU_PROMO_COMPLEX_TO_FLOAT: break;
  }
  /* DEFAULT: low-precision promotion types compute in float32 (keeping their strength) */
  *result = p;
  *computation = p;
  if (p.strength != TH_TU_NUMBER && th_dtype_is_low_precision(p.dtype)) computation->dtype = TH_F32;
  return TH_OK;
}

th_dtype th_tu_computation_dtype(th_dtype dt) { return th_dtype_is_low_precision(dt) ? TH_F32 : dt; }

const char *th_tu_scalar_type_name(th_dtype dt) {
  static const char *const names[TH_DTYPE_COUNT] = {
    [TH_BOOL] = "Bool",
    [TH_U8] = "Byte",
    [TH_I8] = "Char",
    [TH_I16] = "Short",
    [TH_I32] = "Int",
    [TH_I64] = "Long",
    [TH_F16] = "Half",
    [TH_BF16] = "BFloat16",
    [TH_F32] = "Float",
    [TH_F64] = "Double",
    [TH_F8E4M3FN] = "Float8_e4m3fn",
    [TH_F8E5M2] = "Float8_e5m2",
  };
  return (unsigned)dt < TH_DTYPE_COUNT ? names[dt] : "Undefined";
}

/* ---- broadcasting -------------------------------------------------------------------------------- */

th_status th_tu_broadcast_shape(const char *op, int n, const th_arg *args, int *ndim, int64_t shape[TH_MAX_DIMS]) {
  *ndim = -1;
  for (int i = 0; i < n; i++) {
    const th_value *v = th_meta_tensor(&args[i]);
    if (!v) continue;
    if (*ndim < 0) {
      *ndim = v->ndim;
      memcpy(shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
      continue;
    }
    for (int k = 1; k <= v->ndim && k <= *ndim; k++) { /* right-aligned: each pair equal, or one of them 1 */
      int64_t c = shape[*ndim - k], s = v->shape[v->ndim - k];
      if (c != 1 && s != 1 && s != c) {
        char bs[160], vs[160];
        return th_error(TH_ERR_RUNTIME,
                        "%s: Attempting to broadcast a dimension of length %lld! (argument %d has shape %s, which "
                        "does not broadcast with %s, the shape of the arguments before it, at its dimension %d)",
                        op, (long long)s, i, th_meta_shape_str(v->shape, v->ndim, vs, sizeof vs),
                        th_meta_shape_str(shape, *ndim, bs, sizeof bs), v->ndim - k);
      }
    }
    if (v->ndim > *ndim) { /* right-align: prepend 1s */
      int d = v->ndim - *ndim;
      memmove(shape + d, shape, sizeof(int64_t) * (size_t)*ndim);
      for (int k = 0; k < d; k++) shape[k] = 1;
      *ndim = v->ndim;
    }
    for (int k = 1; k <= v->ndim; k++)
      if (shape[*ndim - k] == 1) shape[*ndim - k] = v->shape[v->ndim - k];
  }
  return TH_OK;
}

th_status th_tu_expand(th_trace *tr, const char *op, th_arg *x, int ndim, const int64_t *shape) {
  const th_value *v = th_meta_tensor(x);
  if (!v) return TH_OK;
  if (ndim < v->ndim) return th_error(TH_ERR_RUNTIME, "%s: expand: the requested shape has too few dimensions!", op);
  int off = ndim - v->ndim;
  int64_t out_shape[TH_MAX_DIMS], bdims[TH_MAX_DIMS];
  bool same = ndim == v->ndim;
  for (int i = 0; i < ndim; i++) out_shape[i] = shape[i];
  for (int i = 0; i < v->ndim; i++) {
    int64_t req = shape[i + off], have = v->shape[i];
    if (!(req == have || have == 1 || req == -1))
      return th_error(TH_ERR_RUNTIME, "%s: expand: attempting to expand a dimension of length %lld!", op,
                      (long long)have);
    out_shape[i + off] = req == -1 ? have : req;
    bdims[i] = i + off;
    same &= out_shape[i + off] == have;
  }
  for (int i = 0; i < off; i++)
    if (out_shape[i] < 0)
      return th_error(TH_ERR_RUNTIME, "%s: expand: the expanded size %lld is not allowed for a new leading dimension",
                      op, (long long)out_shape[i]);
  if (same) return TH_OK;
  th_arg s_items[TH_MAX_DIMS], b_items[TH_MAX_DIMS];
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, *x, th_tu_ints(s_items, ndim, out_shape),
                     th_tu_ints(b_items, v->ndim, bdims), x);
}

th_status th_tu_broadcast(th_trace *tr, const char *op, int n, th_arg *args) {
  int ndim;
  int64_t shape[TH_MAX_DIMS];
  TH_TRY(th_tu_broadcast_shape(op, n, args, &ndim, shape));
  if (ndim < 0) return TH_OK;
  for (int i = 0; i < n; i++) {
    const th_value *v = th_meta_tensor(&args[i]);
    if (v && v->ndim == 0 && v->device.type == TH_CPU) continue; /* CPU scalars act as numbers */
    TH_TRY(th_tu_expand(tr, op, &args[i], ndim, shape));
  }
  return TH_OK;
}

/* ---- conversion ---------------------------------------------------------------------------------- */

th_status th_tu_convert(th_trace *tr, th_arg *x, th_dtype dtype) {
  if (th_meta_is_tensor(x)) {
    if (x->u.value->dtype == dtype) return TH_OK;
    return th_tu_call2(tr, TH_OP_prims_convert_element_type, *x, th_arg_dtype(dtype), x);
  }
  if (!th_meta_is_number(x)) return TH_OK;
  th_dtype want = th_meta_dtype_numbertype(dtype); /* TH_BOOL / TH_I64 / TH_F64 */
  if (th_meta_number_type(x) == want) return TH_OK;
  if (x->kind == TH_ARG_VALUE) /* a number proxy: the conversion is a recorded computation */
    return th_tu_call2(tr, TH_OP_prims_convert_element_type, *x, th_arg_dtype(want), x);
  double f;
  int64_t i;
  th_meta_number_value(x, &f, &i);
  if (want == TH_F64)
    *x = th_arg_float(x->kind == TH_ARG_FLOAT ? f : (double)i);
  else if (want == TH_I64)
    *x = th_arg_int(i);
  else
    *x = th_arg_bool(x->kind == TH_ARG_FLOAT ? f != 0.0 : i != 0);
  return TH_OK;
}

th_status th_tu_convert_type(th_trace *tr, th_arg *x, th_tu_type t) {
  return th_tu_convert(tr, x, th_tu_tensor_dtype(t));
}

/* ---- elementwise wrappers ------------------------------------------------------------------------ */

th_status th_tu_unary(th_trace *tr, const char *op, th_op_id prim, th_arg a, th_tu_promo kind, th_arg *out) {
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 1, &a, kind, &comp, &res));
  TH_TRY(th_tu_convert_type(tr, &a, comp));
  TH_TRY(th_tu_call1(tr, prim, a, out));
  return th_tu_convert_type(tr, out, res);
}

th_status th_tu_binary(th_trace *tr, const char *op, th_op_id prim, th_arg a, th_arg b, th_tu_promo kind, th_arg *out) {
  th_arg ab[2] = {a, b};
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 2, ab, kind, &comp, &res));
  TH_TRY(th_tu_broadcast(tr, op, 2, ab));
  TH_TRY(th_tu_convert_type(tr, &ab[0], comp));
  TH_TRY(th_tu_convert_type(tr, &ab[1], comp));
  TH_TRY(th_tu_call2(tr, prim, ab[0], ab[1], out));
  return th_tu_convert_type(tr, out, res);
}

/* ---- recording helpers ---------------------------------------------------------------------------- */

th_status th_tu_call1(th_trace *tr, th_op_id op, th_arg a, th_arg *out) { return th_call(tr, op, 1, &a, out); }

th_status th_tu_call2(th_trace *tr, th_op_id op, th_arg a, th_arg b, th_arg *out) {
  th_arg args[2] = {a, b};
  return th_call(tr, op, 2, args, out);
}

th_status th_tu_call3(th_trace *tr, th_op_id op, th_arg a, th_arg b, th_arg c, th_arg *out) {
  th_arg args[3] = {a, b, c};
  return th_call(tr, op, 3, args, out);
}

th_status th_tu_call_kw(th_trace *tr, th_op_id op, int nargs, const th_arg *args, int nkw, const char *const *kwnames,
                        const th_arg *kwargs, th_arg *out) {
  const th_symbol *sym = th_symbol_get(op);
  if (!sym) return th_error(TH_ERR_VALUE, "unknown op id %d", (int)op);
  return th_call_kw(tr, sym, nargs, args, nkw, kwnames, kwargs, out);
}

th_arg th_tu_ints(th_arg *items, int n, const int64_t *v) {
  for (int i = 0; i < n; i++) items[i] = th_arg_int(v[i]);
  return th_arg_tuple(n, items);
}

th_arg th_tu_device(th_device d) {
  th_arg a = th_arg_none();
  a.kind = TH_ARG_DEVICE;
  a.u.device = d;
  return a;
}

th_status th_tu_tuple_out(th_trace *tr, int n, const th_arg *items, th_arg *out) {
  th_arg *arr = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
  if (!arr) return th_error(TH_ERR_NOMEM, "out of memory");
  if (n) memcpy(arr, items, sizeof(th_arg) * (size_t)n);
  *out = th_arg_tuple(n, arr);
  return TH_OK;
}

/* ---- argument readers ---------------------------------------------------------------------------- */

th_status th_tu_dtype_arg(const char *op, const char *what, const th_arg *a, th_dtype *out, bool *has) {
  *has = false;
  if (a->kind == TH_ARG_NONE) return TH_OK;
  if (a->kind == TH_ARG_DTYPE) {
    *out = a->u.dtype;
    *has = true;
    return TH_OK;
  }
  if (a->kind == TH_ARG_STR && th_dtype_parse(a->u.s, out)) {
    *has = true;
    return TH_OK;
  }
  return th_error(TH_ERR_TYPE, "%s: expected %s to be a dtype or None", op, what);
}

th_status th_tu_device_arg(const char *op, const char *what, const th_arg *a, th_device *out, bool *has) {
  *has = false;
  if (a->kind == TH_ARG_NONE) return TH_OK;
  if (a->kind == TH_ARG_DEVICE) {
    *out = a->u.device;
    *has = true;
    return TH_OK;
  }
  if (a->kind == TH_ARG_STR) {
    if (!th_device_parse(a->u.s, out))
      return th_error(TH_ERR_VALUE, "%s: invalid device string '%s' for %s", op, a->u.s, what);
    *has = true;
    return TH_OK;
  }
  return th_error(TH_ERR_TYPE, "%s: expected %s to be a device or None", op, what);
}

th_status th_tu_float(const char *op, const char *what, const th_arg *a, double *out) {
  int64_t i;
  if (!th_meta_is_number(a) || !th_meta_number_value(a, out, &i))
    return th_error(TH_ERR_TYPE, "%s: expected %s to be a number of known value", op, what);
  if (a->kind != TH_ARG_FLOAT && !(a->kind == TH_ARG_VALUE && a->u.value->dtype == TH_F64)) *out = (double)i;
  return TH_OK;
}

th_status th_tu_bool(const char *op, const char *what, const th_arg *a, bool *out) {
  double f;
  int64_t i;
  if (a->kind == TH_ARG_BOOL) {
    *out = a->u.b;
    return TH_OK;
  }
  if (!th_meta_is_number(a) || !th_meta_number_value(a, &f, &i))
    return th_error(TH_ERR_TYPE, "%s: expected %s to be a bool", op, what);
  *out = f != 0.0;
  return TH_OK;
}

th_status th_tu_tensor_arg(const char *op, const char *what, const th_arg *a, const th_value **v) {
  *v = th_meta_tensor(a);
  if (!*v) return th_error(TH_ERR_TYPE, "%s: expected %s to be a tensor", op, what);
  return TH_OK;
}

th_status th_tu_tensor_args(const char *op, const th_arg *args, int n, const char *const *names, const th_value **v) {
  for (int i = 0; i < n; i++) TH_TRY(th_tu_tensor_arg(op, names[i], &args[i], &v[i]));
  return TH_OK;
}

th_status th_tu_reduction_dims(const char *op, const th_arg *a, int ndim, int64_t dims[TH_MAX_DIMS], int *n) {
  int64_t raw[TH_MAX_DIMS];
  int nraw = 0;
  if (a->kind != TH_ARG_NONE) TH_TRY(th_meta_int_list(op, "dim", a, raw, &nraw));
  if (nraw == 0) {
    for (int i = 0; i < ndim; i++) dims[i] = i;
    *n = ndim;
    return TH_OK;
  }
  for (int i = 0; i < nraw; i++) {
    int d;
    TH_TRY(th_meta_canonical_dim(op, raw[i], ndim, &d));
    for (int j = 0; j < i; j++)
      if (dims[j] == d) return th_error(TH_ERR_RUNTIME, "%s: Duplicate value in list of dimensions", op);
    dims[i] = d;
  }
  *n = ndim == 0 ? 0 : nraw; /* a 0-dim tensor accepts dim 0/-1 and reduces over () */
  return TH_OK;
}

/* ---- shape helpers -------------------------------------------------------------------------------- */

th_status th_tu_reshape(th_trace *tr, th_arg a, int ndim, const int64_t *shape, th_arg *out) {
  const th_value *v = th_meta_tensor(&a);
  TH_ASSERT(v);
  if (v->ndim == ndim && !memcmp(v->shape, shape, sizeof(int64_t) * (size_t)ndim)) {
    *out = a;
    return TH_OK;
  }
  th_arg items[TH_MAX_DIMS];
  return th_tu_call2(tr, TH_OP_prims_reshape, a, th_tu_ints(items, ndim, shape), out);
}

th_status th_tu_transpose(th_trace *tr, th_arg a, const int64_t *perm, th_arg *out) {
  const th_value *v = th_meta_tensor(&a);
  TH_ASSERT(v);
  bool identity = true;
  for (int i = 0; i < v->ndim; i++) identity &= perm[i] == i;
  if (identity) {
    *out = a;
    return TH_OK;
  }
  th_arg items[TH_MAX_DIMS];
  return th_tu_call2(tr, TH_OP_prims_transpose, a, th_tu_ints(items, v->ndim, perm), out);
}

th_status th_tu_unsqueeze(th_trace *tr, th_arg a, int dim, th_arg *out) {
  const th_value *v = th_meta_tensor(&a);
  TH_ASSERT(v);
  if (v->ndim + 1 > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "tensors of rank %d are not supported (at most %d dimensions)", v->ndim + 1,
                    TH_MAX_DIMS);
  int64_t shape[TH_MAX_DIMS], bdims[TH_MAX_DIMS];
  for (int i = 0, j = 0; i < v->ndim + 1; i++) {
    if (i == dim) {
      shape[i] = 1;
      continue;
    }
    shape[i] = v->shape[j];
    bdims[j++] = i;
  }
  th_arg s_items[TH_MAX_DIMS], b_items[TH_MAX_DIMS];
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, a, th_tu_ints(s_items, v->ndim + 1, shape),
                     th_tu_ints(b_items, v->ndim, bdims), out);
}

th_status th_tu_matrix_transpose(th_trace *tr, th_arg x, th_arg *out) {
  int nd = x.u.value->ndim;
  int64_t perm[TH_MAX_DIMS];
  for (int i = 0; i < nd; i++) perm[i] = i;
  perm[nd - 2] = nd - 1;
  perm[nd - 1] = nd - 2;
  return th_tu_transpose(tr, x, perm, out);
}

/* eq(iota[:, None], iota[None, :]) converted to a's dtype, expanded over a's batch dims. */
th_status th_tu_eye_like(th_trace *tr, const th_value *a, th_arg *out) {
  int nd = a->ndim;
  th_arg i, r, c;
  TH_TRY(th_tu_iota(tr, a->shape[nd - 1], 0, 1, a->device, TH_I64, &i));
  TH_TRY(th_tu_unsqueeze(tr, i, 1, &r));
  TH_TRY(th_tu_unsqueeze(tr, i, 0, &c));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, r, c, out));
  TH_TRY(th_tu_convert(tr, out, a->dtype));
  if (nd > 2) TH_TRY(th_tu_expand(tr, "eye", out, nd, a->shape));
  return TH_OK;
}

th_status th_tu_squeeze(th_trace *tr, th_arg a, int n, const int64_t *dims, th_arg *out) {
  if (n == 0) {
    *out = a;
    return TH_OK;
  }
  th_arg items[TH_MAX_DIMS];
  return th_tu_call2(tr, TH_OP_prims_squeeze, a, th_tu_ints(items, n, dims), out);
}

th_status th_tu_slice_in_dim(th_trace *tr, th_arg a, int64_t start, int64_t stop, int64_t step, int dim, th_arg *out) {
  const th_value *v = th_meta_tensor(&a);
  TH_ASSERT(v);
  int64_t lo[TH_MAX_DIMS], hi[TH_MAX_DIMS], st[TH_MAX_DIMS];
  for (int i = 0; i < v->ndim; i++) {
    lo[i] = 0;
    hi[i] = v->shape[i];
    st[i] = 1;
  }
  lo[dim] = start;
  hi[dim] = stop;
  st[dim] = step;
  th_arg li[TH_MAX_DIMS], hi_items[TH_MAX_DIMS], si[TH_MAX_DIMS];
  th_arg args[4] = {a, th_tu_ints(li, v->ndim, lo), th_tu_ints(hi_items, v->ndim, hi), th_tu_ints(si, v->ndim, st)};
  return th_call(tr, TH_OP_prims_slice_prim, 4, args, out);
}

th_status th_tu_keepdim(th_trace *tr, th_arg r, int ndim, const int64_t *in_shape, int nd, const int64_t *dims,
                        th_arg *out) {
  int64_t shape[TH_MAX_DIMS], bdims[TH_MAX_DIMS];
  int nb = 0;
  for (int i = 0; i < ndim; i++) {
    bool reduced = false;
    for (int j = 0; j < nd; j++) reduced |= dims[j] == i;
    shape[i] = reduced ? 1 : in_shape[i];
    if (!reduced) bdims[nb++] = i;
  }
  th_arg s_items[TH_MAX_DIMS], b_items[TH_MAX_DIMS];
  return th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, r, th_tu_ints(s_items, ndim, shape),
                     th_tu_ints(b_items, nb, bdims), out);
}

th_status th_tu_full(th_trace *tr, int ndim, const int64_t *shape, th_arg fill, th_device device, th_dtype dtype,
                     th_arg *out) {
  th_arg items[TH_MAX_DIMS];
  th_arg args[2] = {th_tu_ints(items, ndim, shape), fill};
  static const char *const kw[2] = {"device", "dtype"};
  th_arg kwargs[2] = {th_tu_device(device), th_arg_dtype(dtype)};
  return th_tu_call_kw(tr, TH_OP_prims_full, 2, args, 2, kw, kwargs, out);
}

th_status th_tu_iota(th_trace *tr, int64_t length, int64_t start, int64_t step, th_device device, th_dtype dtype,
                     th_arg *out) {
  th_arg args[1] = {th_arg_int(length)};
  static const char *const kw[4] = {"start", "step", "device", "dtype"};
  th_arg kwargs[4] = {th_arg_int(start), th_arg_int(step), th_tu_device(device), th_arg_dtype(dtype)};
  return th_tu_call_kw(tr, TH_OP_prims_iota, 1, args, 4, kw, kwargs, out);
}
