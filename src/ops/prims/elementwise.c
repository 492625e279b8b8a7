/* elementwise.c — metas of the elementwise prims (unary, binary, where) and of the conversion and
 * data-movement prims (convert_element_type, device_put).
 *
 * Prims are strict, as Thunder's: tensor operands must already share one dtype, one shape and one
 * device — a CPU 0-dim tensor is exempt from the shape and device checks, as in Thunder — because the
 * torch layer has inserted the converts and broadcasts. A Python number may be combined with a tensor
 * when its type is no wider than the tensor's dtype category (bool < int < float: an int with an f32
 * tensor is fine, a float with an i64 tensor is not). Each family accepts a set of dtypes:
 *
 *   all    every dtype but fp8                    (maximum, minimum, comparisons, isfinite, where)
 *   math   all minus low precision (f16 bf16 fp8) (abs, neg, ..., add, sub, mul, div, pow, ...)
 *   float  f32 and f64 only                       (exp, log, sin, ..., atan2)
 *   exact  bool and integers                      (bitwise ops)
 *
 * fp8 tensors are accepted only by convert_element_type and device_put (and the shape/memory prims).
 * The output is a tensor like the first operand that is not a CPU 0-dim tensor (else the first tensor):
 * its shape and device, the common dtype (bool for comparisons, isfinite, signbit), and requires_grad
 * when any input requires grad and the result is floating. When every operand is a number the result
 * is a number: computed eagerly when all values are known (a constant, or a number proxy with a known
 * value if any input was a proxy), else a number proxy of unknown value — as Thunder folds number x
 * number. Folding follows Python: int results wrap at 64 bits (Python's ints are unbounded), and what
 * Python raises for (ZeroDivisionError, math domain/range errors) is TH_ERR_VALUE. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/binary_scalar.h"
#include "ops/special_scalar.h"
#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

/* ---- shared checks --------------------------------------------------------------------------------- */

typedef enum ew_set { EW_ALL, EW_MATH, EW_FLOAT, EW_EXACT } ew_set;

typedef struct ew_info {
  const th_value *like;  /* output template: first tensor not a CPU 0-dim one (else first tensor); NULL if none */
  bool has_tensor_dtype; /* some dtype operand is a tensor */
  th_dtype dtype;        /* the common tensor dtype, else the widest number type (TH_BOOL/TH_I64/TH_F64) */
  bool requires_grad;    /* some tensor operand requires grad */
} ew_info;

static bool is_cpu_scalar(const th_value *v) { return v->ndim == 0 && v->device.type == TH_CPU; }

static bool dtype_in_set(th_dtype dt, ew_set set) {
  if (th_dtype_is_fp8(dt)) return false;
  switch (set) {
    case EW_ALL: return true;
    case EW_MATH: return !th_dtype_is_low_precision(dt);
    case EW_FLOAT: return dt == TH_F32 || dt == TH_F64;
    case EW_EXACT: return th_meta_dtype_is_exact(dt);
  }
  return false;
}

/* Numbers stand for their Python type: bool/int/float. math/all accept all three, float only float,
 * exact bool and int. */
static bool numbertype_in_set(th_dtype pytype, ew_set set) {
  switch (set) {
    case EW_ALL:
    case EW_MATH: return true;
    case EW_FLOAT: return pytype == TH_F64;
    case EW_EXACT: return pytype != TH_F64;
  }
  return false;
}

/* Checks operands ops[0..n): those whose bit is set in dtype_mask take part in the dtype checks (all
 * tensors take part in the shape and device checks). */
static th_status ew_check(const th_symbol *sym, const th_arg *ops, int n, unsigned dtype_mask, ew_set set,
                          ew_info *info) {
  memset(info, 0, sizeof *info);
  const char *op = sym->qualname;
  const th_value *first_tensor = NULL;
  th_dtype widest_number = TH_BOOL;
  bool has_number = false;

  /* dtypes: tensors agree exactly; numbers fit the tensor's category */
  for (int k = 0; k < n; k++) {
    if (!(dtype_mask & (1u << k))) continue;
    const th_value *t = th_meta_tensor(&ops[k]);
    if (t) {
      if (!info->has_tensor_dtype) {
        info->has_tensor_dtype = true;
        info->dtype = t->dtype;
      } else if (t->dtype != info->dtype) {
        return th_error(TH_ERR_RUNTIME, "%s: Expected dtype %s but found %s!", op, th_meta_dtype_repr(info->dtype),
                        th_meta_dtype_repr(t->dtype));
      }
    } else if (th_meta_is_number(&ops[k])) {
      th_dtype ty = th_meta_number_type(&ops[k]);
      if (!has_number || th_meta_dtype_kind(ty) > th_meta_dtype_kind(widest_number)) widest_number = ty;
      has_number = true;
    } else {
      return th_error(TH_ERR_TYPE, "%s: expected a Tensor or a number for operand %d", op, k);
    }
  }
  if (info->has_tensor_dtype) {
    if (!dtype_in_set(info->dtype, set))
      return th_error(TH_ERR_RUNTIME, "%s: Unsupported input dtype %s", op, th_meta_dtype_repr(info->dtype));
    if (has_number && th_meta_dtype_kind(widest_number) > th_meta_dtype_kind(info->dtype))
      return th_error(TH_ERR_RUNTIME,
                      "%s: Expected a number no wider than the dtype %s (a Python %s or narrower), but found a %s", op,
                      th_meta_dtype_repr(info->dtype), th_meta_numbertype_name(th_meta_dtype_numbertype(info->dtype)),
                      th_meta_numbertype_name(widest_number));
  } else {
    info->dtype = widest_number;
    for (int k = 0; k < n; k++)
      if ((dtype_mask & (1u << k)) && !numbertype_in_set(th_meta_number_type(&ops[k]), set))
        return th_error(TH_ERR_RUNTIME, "%s: Unsupported input dtype %s", op,
                        th_meta_numbertype_name(th_meta_number_type(&ops[k])));
  }

  /* shapes and devices: every tensor that is not a CPU 0-dim one */
  for (int k = 0; k < n; k++) {
    const th_value *t = th_meta_tensor(&ops[k]);
    if (!t) continue;
    info->requires_grad |= t->requires_grad;
    if (!first_tensor) first_tensor = t;
    if (is_cpu_scalar(t)) continue;
    if (!info->like) {
      info->like = t;
      continue;
    }
    if (!th_device_eq(t->device, info->like->device)) {
      char d0[32], d1[32];
      return th_error(TH_ERR_RUNTIME, "%s: Expected device %s but found %s!", op,
                      th_device_str(info->like->device, d0, sizeof d0), th_device_str(t->device, d1, sizeof d1));
    }
    bool same = t->ndim == info->like->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == info->like->shape[d];
    if (!same) {
      char s0[TH_META_SHAPE_BUF], s1[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_RUNTIME, "%s: Expected shape %s but found %s! (prims require operands of one shape)", op,
                      th_meta_shape_str(info->like->shape, info->like->ndim, s0, sizeof s0),
                      th_meta_shape_str(t->shape, t->ndim, s1, sizeof s1));
    }
  }
  if (!info->like) info->like = first_tensor;
  return TH_OK;
}

static th_status ew_tensor_out(th_trace *tr, const ew_info *info, th_dtype dtype, th_arg *out) {
  return th_meta_new_tensor(tr, dtype, info->like->device, info->like->ndim, info->like->shape, info->requires_grad,
                            out);
}

/* ---- number folding -------------------------------------------------------------------------------- */

/* A folded number: its Python type and value. */
typedef struct num {
  th_dtype type; /* TH_BOOL, TH_I64, TH_F64 */
  int64_t i;     /* bool and int */
  double f;      /* float */
} num;

static num num_of(const th_arg *a) {
  num r;
  r.type = th_meta_number_type(a);
  r.i = 0;
  r.f = 0;
  th_meta_number_value(a, &r.f, &r.i);
  return r;
}

static num num_int(int64_t i) {
  num r = {TH_I64, i, (double)i};
  return r;
}
static num num_bool(bool b) {
  num r = {TH_BOOL, b, b};
  return r;
}
static num num_float(double f) {
  num r = {TH_F64, 0, f};
  return r;
}
static double num_f(num a) { return a.type == TH_F64 ? a.f : (double)a.i; }

/* Python's int(x) of a float: NaN and infinities cannot be converted. */
static th_status float_to_int(const char *op, double f, int64_t *out) {
  *out = 0;
  if (isnan(f)) return th_error(TH_ERR_VALUE, "%s: cannot convert float NaN to integer", op);
  if (isinf(f)) return th_error(TH_ERR_VALUE, "%s: cannot convert float infinity to integer", op);
  if (f >= 9223372036854775808.0 || f < -9223372036854775808.0)
    return th_error(TH_ERR_VALUE, "%s: float %g does not fit in a 64-bit integer", op, f);
  *out = (int64_t)f;
  return TH_OK;
}

/* Python's math module: a NaN from inputs that are not NaN is a domain error (sin(inf), log(-inf),
 * fmod(inf, 1)), an infinity from finite inputs a range error (exp(1000)). */
static th_status check_math_result(const char *op, double r, double x, double y) {
  if (isnan(r) && !isnan(x) && !isnan(y)) return th_error(TH_ERR_VALUE, "%s: math domain error", op);
  if (isinf(r) && isfinite(x) && isfinite(y)) return th_error(TH_ERR_VALUE, "%s: math range error", op);
  return TH_OK;
}

/* Sets *out to the folded result: a constant when no operand was a proxy, else a number proxy with
 * the value (known) or without (unknown). */
static th_status number_out(th_trace *tr, const th_arg *ops, int n, bool known, num r, th_arg *out) {
  bool any_proxy = false;
  for (int k = 0; k < n; k++) any_proxy |= ops[k].kind == TH_ARG_VALUE;
  if (known && !any_proxy) {
    *out = r.type == TH_BOOL ? th_arg_bool(r.i != 0) : r.type == TH_I64 ? th_arg_int(r.i) : th_arg_float(r.f);
    return TH_OK;
  }
  double f = r.type == TH_F64 ? r.f : (double)r.i;
  int64_t i = r.type == TH_F64 ? 0 : r.i;
  th_value *v = th_value_new_number(tr, r.type, known, known ? f : 0, known ? i : 0);
  if (!v) return TH_ERR_NOMEM;
  *out = th_arg_value(v);
  return TH_OK;
}

static bool all_known(const th_arg *ops, int n) {
  for (int k = 0; k < n; k++)
    if (!th_meta_number_value(&ops[k], NULL, NULL)) return false;
  return true;
}

/* ---- unary: abs ceil floor neg round sign trunc (math dtypes), the float-only transcendental ops,
 *      bitwise_not (exact dtypes), isfinite and signbit (bool result) ---------------------------------- */

/* Number folding from the rows of ops/unary.def: each row's fold column picks one of the templates
 * below, which read the row's scalar expressions (f64 with x a double, i64 with x an int64_t). UT_<fold>
 * is the Python type of the result for an input of type t; UF_<fold> computes it. */
#define UT_FLOAT(t) TH_F64
#define UT_RECIPROCAL(t) TH_F64
#define UT_LIKE(t) ((t) == TH_F64 ? TH_F64 : TH_I64) /* abs(True) == 1, an int */
#define UT_SIGN(t) UT_LIKE(t)
#define UT_INT(t) TH_I64    /* ~True == -2 */
#define UT_TO_INT(t) TH_I64 /* math.floor(2.5) == 2, an int */
#define UT_PRED(t) TH_BOOL
#define UT_NONE(t) TH_F64

#define UF_FLOAT(f64, i64)                                                                                             \
  {                                                                                                                    \
    double x = a.f;                                                                                                    \
    double v = (f64);                                                                                                  \
    TH_TRY(check_math_result(op, v, a.f, 0));                                                                          \
    *r = num_float(v);                                                                                                 \
    return TH_OK;                                                                                                      \
  }
#define UF_RECIPROCAL(f64, i64)                                                                                        \
  {                                                                                                                    \
    if (a.f == 0) return th_error(TH_ERR_VALUE, "%s: float division by zero", op);                                     \
    UF_FLOAT(f64, i64)                                                                                                 \
  }
#define UF_LIKE(f64, i64)                                                                                              \
  {                                                                                                                    \
    if (a.type == TH_F64) {                                                                                            \
      double x = a.f;                                                                                                  \
      *r = num_float(f64);                                                                                             \
    } else {                                                                                                           \
      int64_t x = a.i;                                                                                                 \
      *r = num_int(i64);                                                                                               \
    }                                                                                                                  \
    return TH_OK;                                                                                                      \
  }
#define UF_SIGN(f64, i64)                                                                                              \
  {                                                                                                                    \
    if (a.type == TH_F64)                                                                                              \
      *r = num_float(isnan(a.f) ? a.f : (double)((a.f > 0) - (a.f < 0)));                                              \
    else                                                                                                               \
      *r = num_int((a.i > 0) - (a.i < 0));                                                                             \
    return TH_OK;                                                                                                      \
  }
#define UF_INT(f64, i64)                                                                                               \
  {                                                                                                                    \
    int64_t x = a.i;                                                                                                   \
    *r = num_int(i64);                                                                                                 \
    return TH_OK;                                                                                                      \
  }
#define UF_TO_INT(f64, i64)                                                                                            \
  {                                                                                                                    \
    if (a.type != TH_F64) {                                                                                            \
      int64_t x = a.i;                                                                                                 \
      *r = num_int(i64);                                                                                               \
      return TH_OK;                                                                                                    \
    }                                                                                                                  \
    double x = a.f;                                                                                                    \
    int64_t i = 0; /* set by float_to_int on success (GCC -O3 cannot tell) */                                          \
    TH_TRY(float_to_int(op, (f64), &i));                                                                               \
    *r = num_int(i);                                                                                                   \
    return TH_OK;                                                                                                      \
  }
#define UF_PRED(f64, i64)                                                                                              \
  {                                                                                                                    \
    double x = num_f(a);                                                                                               \
    *r = num_bool(f64);                                                                                                \
    return TH_OK;                                                                                                      \
  }
#define UF_NONE(f64, i64)                                                                                              \
  {                                                                                                                    \
    (void)a;                                                                                                           \
    (void)r;                                                                                                           \
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no number folding for this op", op);                                  \
  }

/* One folding function per unary prim: unary_fold_<name>. */
#define TH_UNARY(name, kind, cexpr, f32, f64, i64, fold, ...)                                                          \
  static th_status unary_fold_##name(const char *op, num a, num *r) {                                                  \
    (void)op;                                                                                                          \
    UF_##fold(f64, i64)                                                                                                \
  }
#include "ops/unary.def"
#undef TH_UNARY

/* The Python type of a unary op's number result for an input of type `t`. */
static th_dtype unary_number_type(th_op_id id, th_dtype t) {
  (void)t;
  switch (id) {
#define TH_UNARY(name, kind, cexpr, f32, f64, i64, fold, ...)                                                          \
  case TH_OP_prims_##name:                                                                                             \
    return UT_##fold(t);
#include "ops/unary.def"
#undef TH_UNARY
    default: return TH_F64;
  }
}

static th_status unary_fold(const th_symbol *sym, num a, num *r) {
  switch (sym->id) {
#define TH_UNARY(name, ...)                                                                                            \
  case TH_OP_prims_##name:                                                                                             \
    return unary_fold_##name(sym->qualname, a, r);
#include "ops/unary.def"
#undef TH_UNARY
    default: return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no number folding for this op", sym->qualname);
  }
}

static th_status unary_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out, ew_set set,
                            bool bool_out) {
  ew_info info;
  TH_TRY(ew_check(sym, args, 1, 1u, set, &info));
  if (info.like) return ew_tensor_out(tr, &info, bool_out ? TH_BOOL : info.dtype, out);
  num a = num_of(&args[0]);
  num r = {unary_number_type(sym->id, a.type), 0, 0};
  bool known = all_known(args, 1);
  if (known) TH_TRY(unary_fold(sym, a, &r));
  return number_out(tr, args, 1, known, r, out);
}

th_status prims_unary_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return unary_meta(tr, sym, args, out, EW_MATH, false);
}

th_status prims_unary_float_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return unary_meta(tr, sym, args, out, EW_FLOAT, false);
}

th_status prims_unary_exact_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return unary_meta(tr, sym, args, out, EW_EXACT, false);
}

th_status prims_unary_bool_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return unary_meta(tr, sym, args, out, EW_ALL, true);
}

/* ---- binary: the rows of ops/binary.def -------------------------------------------------------------
 *      add sub mul div pow fmod remainder (math dtypes), atan2 (float), maximum minimum (all),
 *      bitwise_and/or/xor (exact), eq ne lt le gt ge (all, bool result) */

/* Number folding from the rows of ops/binary.def: each row's fold column picks one of the templates
 * below, which read the row's scalar expressions (f64 with a, b doubles, i64 with a, b int64_t).
 * BT_<fold> is the Python type of the result for operands of types ta, tb (b the second operand, known
 * says whether its value is); BF_<fold> computes it. `fl`: either operand is a float. */
#define BT_ARITH(ta, tb, b, known) ((ta) == TH_F64 || (tb) == TH_F64 ? TH_F64 : TH_I64) /* bool + bool is an int */
#define BT_DIV(ta, tb, b, known) BT_ARITH(ta, tb, b, known)
#define BT_MOD(ta, tb, b, known) BT_ARITH(ta, tb, b, known)
#define BT_FLOAT(ta, tb, b, known) TH_F64 /* math.fmod, math.atan2 */
#define BT_POW(ta, tb, b, known)                                                                                       \
  (BT_ARITH(ta, tb, b, known) == TH_F64 || ((known) && (b).i < 0) ? TH_F64 : TH_I64) /* int ** -1 is a float */
#define BT_BITWISE(ta, tb, b, known) ((ta) == TH_BOOL && (tb) == TH_BOOL ? TH_BOOL : BT_ARITH(ta, tb, b, known))
#define BT_MAX(ta, tb, b, known) BT_BITWISE(ta, tb, b, known)
#define BT_MIN(ta, tb, b, known) BT_BITWISE(ta, tb, b, known)
#define BT_CMP(ta, tb, b, known) TH_BOOL
#define BT_NONE(ta, tb, b, known) BT_ARITH(ta, tb, b, known)

/* f64 on float operands (a, b as doubles) or i64 on exact ones, the result made by ff or fi */
#define BF_EACH(ff, fi, f64, i64)                                                                                      \
  if (fl) {                                                                                                            \
    double a = num_f(na), b = num_f(nb);                                                                               \
    *r = ff(f64);                                                                                                      \
  } else {                                                                                                             \
    int64_t a = na.i, b = nb.i;                                                                                        \
    *r = fi(i64);                                                                                                      \
  }                                                                                                                    \
  return TH_OK;
#define BF_ARITH_ONLY(f64, i64) BF_EACH(num_float, num_int, f64, i64)
#define BF_ARITH(f64, i64)                                                                                             \
  (void)rtype;                                                                                                         \
  BF_ARITH_ONLY(f64, i64)
#define BF_ZERO_DIVISOR(float_msg)                                                                                     \
  (void)rtype;                                                                                                         \
  if (fl && num_f(nb) == 0) return th_error(TH_ERR_VALUE, "%s: " float_msg, op);                                       \
  if (!fl && nb.i == 0) return th_error(TH_ERR_VALUE, "%s: integer division or modulo by zero", op);
/* exact / exact truncates toward zero (Thunder's prims.div on numbers); otherwise true division */
#define BF_DIV(f64, i64)                                                                                               \
  BF_ZERO_DIVISOR("float division by zero")                                                                            \
  BF_ARITH_ONLY(f64, i64)
/* Python's %: the result takes the sign of the divisor */
#define BF_MOD(f64, i64)                                                                                               \
  BF_ZERO_DIVISOR("float modulo")                                                                                      \
  BF_ARITH_ONLY(f64, i64)
#define BF_FLOAT(f64, i64)                                                                                             \
  {                                                                                                                    \
    (void)rtype;                                                                                                       \
    double a = num_f(na), b = num_f(nb);                                                                               \
    double v = (f64);                                                                                                  \
    TH_TRY(check_math_result(op, v, a, b));                                                                            \
    *r = num_float(v);                                                                                                 \
    return TH_OK;                                                                                                      \
  }
#define BF_POW(f64, i64)                                                                                               \
  if (rtype == TH_I64) {                                                                                               \
    int64_t a = na.i, b = nb.i;                                                                                        \
    *r = num_int(i64);                                                                                                 \
    return TH_OK;                                                                                                      \
  }                                                                                                                    \
  if (num_f(na) == 0 && num_f(nb) < 0)                                                                                 \
    return th_error(TH_ERR_VALUE, "%s: 0.0 cannot be raised to a negative power", op);                                 \
  BF_FLOAT(f64, i64)
/* the operand itself: NaN wins, else the first of equal values (Python's max and min) */
#define BF_PICK(cmp)                                                                                                   \
  {                                                                                                                    \
    double x = num_f(na), y = num_f(nb);                                                                               \
    num c = (fl ? (x cmp y || isnan(x)) : na.i cmp nb.i) ? na : nb;                                                    \
    if (rtype == TH_F64)                                                                                               \
      *r = num_float(num_f(c));                                                                                        \
    else                                                                                                               \
      *r = rtype == TH_BOOL ? num_bool(c.i != 0) : num_int(c.i);                                                       \
    return TH_OK;                                                                                                      \
  }
#define BF_MAX(f64, i64) BF_PICK(>=)
#define BF_MIN(f64, i64) BF_PICK(<=)
#define BF_BITWISE(f64, i64)                                                                                           \
  {                                                                                                                    \
    int64_t a = na.i, b = nb.i;                                                                                        \
    int64_t v = (i64);                                                                                                 \
    *r = rtype == TH_BOOL ? num_bool(v != 0) : num_int(v);                                                             \
    return TH_OK;                                                                                                      \
  }
#define BF_CMP(f64, i64)                                                                                               \
  (void)rtype;                                                                                                         \
  BF_EACH(num_bool, num_bool, f64, i64)
#define BF_NONE(f64, i64)                                                                                              \
  (void)na;                                                                                                            \
  (void)nb;                                                                                                            \
  (void)rtype;                                                                                                         \
  (void)r;                                                                                                             \
  (void)fl;                                                                                                            \
  return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no number folding for this op", op);

/* One folding function per binary prim: binary_fold_<name>. */
#define TH_BINARY(name, kind, cexpr, f32, f64, i64, fold, ...)                                                         \
  static th_status binary_fold_##name(const char *op, num na, num nb, th_dtype rtype, num *r) {                        \
    (void)op;                                                                                                          \
    bool fl = na.type == TH_F64 || nb.type == TH_F64;                                                                  \
    (void)fl;                                                                                                          \
    BF_##fold(f64, i64)                                                                                                \
  }
#include "ops/binary.def"
#undef TH_BINARY

/* The Python type of a binary op's number result. */
static th_dtype binary_number_type(th_op_id id, th_dtype ta, th_dtype tb, num b, bool known) {
  (void)b;
  (void)known;
  switch (id) {
#define TH_BINARY(name, kind, cexpr, f32, f64, i64, fold, ...)                                                         \
  case TH_OP_prims_##name:                                                                                             \
    return BT_##fold(ta, tb, b, known);
#include "ops/binary.def"
#undef TH_BINARY
    default: return BT_NONE(ta, tb, b, known);
  }
}

static th_status binary_fold(const th_symbol *sym, num a, num b, th_dtype rtype, num *r) {
  switch (sym->id) {
#define TH_BINARY(name, ...)                                                                                           \
  case TH_OP_prims_##name:                                                                                             \
    return binary_fold_##name(sym->qualname, a, b, rtype, r);
#include "ops/binary.def"
#undef TH_BINARY
    default: return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no number folding for this op", sym->qualname);
  }
}

static th_status binary_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out, ew_set set,
                             bool bool_out) {
  ew_info info;
  TH_TRY(ew_check(sym, args, 2, 3u, set, &info));
  if (info.like) return ew_tensor_out(tr, &info, bool_out ? TH_BOOL : info.dtype, out);
  num a = num_of(&args[0]), b = num_of(&args[1]);
  bool known = all_known(args, 2);
  num r = {binary_number_type(sym->id, a.type, b.type, b, known), 0, 0};
  if (known) TH_TRY(binary_fold(sym, a, b, r.type, &r));
  return number_out(tr, args, 2, known, r, out);
}

th_status prims_binary_math_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return binary_meta(tr, sym, args, out, EW_MATH, false);
}

th_status prims_binary_float_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return binary_meta(tr, sym, args, out, EW_FLOAT, false);
}

th_status prims_binary_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return binary_meta(tr, sym, args, out, EW_ALL, false);
}

th_status prims_binary_exact_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return binary_meta(tr, sym, args, out, EW_EXACT, false);
}

th_status prims_compare_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return binary_meta(tr, sym, args, out, EW_ALL, true);
}

/* ---- where(pred, a, b) -------------------------------------------------------------------------------
 * pred is a bool tensor or a Python bool; a and b share one dtype (numbers fit it); all tensors share
 * one shape and device (CPU 0-dim exempt). With a tensor pred and number a, b the result dtype is the
 * numbers' default dtype (bool8, int64, float32 — Python numbers as Thunder's weak dtypes). */

th_status prims_where_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *pt = th_meta_tensor(&args[0]);
  if (pt ? pt->dtype != TH_BOOL : th_meta_number_type(&args[0]) != TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: Expected pred to be a boolean tensor or a Python bool, but found %s", op,
                    pt ? th_meta_dtype_repr(pt->dtype) : th_meta_numbertype_name(th_meta_number_type(&args[0])));
  ew_info info;
  TH_TRY(ew_check(sym, args, 3, 6u, EW_ALL, &info));
  if (info.like) {
    th_dtype dt = info.dtype;
    if (!info.has_tensor_dtype) dt = info.dtype == TH_F64 ? TH_F32 : info.dtype; /* bool8 / int64 / float32 */
    return ew_tensor_out(tr, &info, dt, out);
  }
  num a = num_of(&args[1]), b = num_of(&args[2]);
  num r = {info.dtype, 0, 0};
  bool known = all_known(args, 3);
  if (known) {
    int64_t p = 0;
    th_meta_number_value(&args[0], NULL, &p);
    num c = p ? a : b;
    r = info.dtype == TH_F64 ? num_float(num_f(c)) : info.dtype == TH_BOOL ? num_bool(c.i != 0) : num_int(c.i);
  }
  return number_out(tr, args, 3, known, r, out);
}

/* ---- convert_element_type(a, dtype) ------------------------------------------------------------------
 * Tensor: like a with the new dtype, any dtype including fp8 (no compute-dtype check, as Thunder);
 * requires_grad is dropped for non-float dtypes. Number: Python's bool()/int()/float() of it for the
 * dtype's category (int(2.7) == 2; int(nan) is an error). */

th_status prims_convert_element_type_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_dtype dt = args[1].u.dtype;
  if ((unsigned)dt >= TH_DTYPE_COUNT) return th_error(TH_ERR_VALUE, "%s: invalid dtype %d", op, (int)dt);
  const th_value *a = th_meta_tensor(&args[0]);
  if (a) return th_meta_new_tensor_like(tr, a, dt, a->ndim, a->shape, out);
  num x = num_of(&args[0]);
  num r = {th_meta_dtype_numbertype(dt), 0, 0};
  bool known = all_known(args, 1);
  if (known) {
    if (r.type == TH_BOOL) {
      r = num_bool(x.type == TH_F64 ? x.f != 0 : x.i != 0);
    } else if (r.type == TH_I64) {
      int64_t i = x.i;
      if (x.type == TH_F64) TH_TRY(float_to_int(op, x.f, &i));
      r = num_int(i);
    } else {
      r = num_float(num_f(x));
    }
  }
  return number_out(tr, args, 1, known, r, out);
}

/* ---- device_put(a, device) ----------------------------------------------------------------------------
 * Like a on `device` (a Device, or a string "cpu" / "cuda:0" / "meta"). */

th_status prims_device_put_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = th_meta_tensor(&args[0]);
  th_device dev;
  TH_TRY(th_meta_device(op, &args[1], &dev));
  return th_meta_new_tensor(tr, a->dtype, dev, a->ndim, a->shape, a->requires_grad, out);
}

/* ---- vjp rules (ops/vjp.h) ----------------------------------------------------------------------------
 * Formulas as PyTorch's derivatives.yaml (1.13), written with torch-level ops on the operands' own dtype
 * (the prims run in float32/float64: the torch layer computes low precision in float32). g is the
 * output's cotangent, y the output. Binary ops: a CPU 0-dim operand's gradient is summed
 * (th_vjp_sum_to); number operands get none. */

#define VJ_LN2 0.6931471805599453      /* log(2) */
#define VJ_LN10 2.302585092994046      /* log(10) */
#define VJ_2_SQRTPI 1.1283791670955126 /* 2 / sqrt(pi) */
#define VJ1(op, a, o) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_##op, a, o))
#define VJ2(op, a, b, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, b, o))

/* digamma(x), lgamma's derivative, from ops (there is no digamma prim), as PyTorch's calc_digamma: the
 * reflection psi(x) = psi(1 - x) - pi / tan(pi r) below 1/2, with r = x - trunc(x) moved into
 * [-1/2, 1/2) (tan has period pi, and pi r keeps the precision that pi x loses: in float32 pi x carries
 * an absolute error of ~|x| 1e-7, large next to tan's argument near a pole) or r = x itself at an
 * integer (psi(+-0) = -+inf); NaN at the negative integers (the poles); the
 * recurrence psi(z) = psi(z + 6) - sum_k<6 1/(z + k), and the asymptotic series of psi(w),
 * w = z + 6 >= 6.5, to the w^-10 term (truncation error < 4e-12). */
static th_status digamma_ops(th_trace *tr, th_arg x, th_arg *out) {
  const double pi = 3.141592653589793;
  th_arg refl, z, s, t, w, inv, inv2, p, psi, frac, shifted, isint, pole;
  VJ2(lt, x, th_arg_float(0.5), &refl);
  VJ2(sub, th_arg_float(1.0), x, &t);
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, refl, t, x, &z));
  VJ1(reciprocal, z, &s);
  for (int k = 1; k < 6; k++) {
    VJ2(add, z, th_arg_float((double)k), &t);
    VJ1(reciprocal, t, &t);
    VJ2(add, s, t, &s);
  }
  VJ2(add, z, th_arg_float(6.0), &w);
  VJ1(reciprocal, w, &inv);
  VJ2(mul, inv, inv, &inv2);
  static const double c[5] = {1.0 / 132, 1.0 / 240, 1.0 / 252, 1.0 / 120, 1.0 / 12}; /* Horner, innermost first */
  VJ2(mul, inv2, th_arg_float(c[0]), &p);
  for (int k = 1; k < 5; k++) {
    VJ2(sub, th_arg_float(c[k]), p, &p);
    VJ2(mul, inv2, p, &p);
  }
  VJ1(log, w, &psi);
  VJ2(mul, inv, th_arg_float(0.5), &t);
  VJ2(sub, psi, t, &psi);
  VJ2(sub, psi, p, &psi);
  VJ2(sub, psi, s, &psi); /* psi(z) */
  VJ1(trunc, x, &t);
  VJ2(sub, x, t, &frac);
  VJ2(eq, frac, th_arg_float(0.0), &isint);
  VJ2(lt, frac, th_arg_float(-0.5), &t); /* into [-1/2, 1/2): pi r stays exact near the poles */
  VJ2(add, frac, th_arg_float(1.0), &shifted);
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, t, shifted, frac, &frac));
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, isint, x, frac, &t));
  VJ2(mul, t, th_arg_float(pi), &t);
  VJ1(tan, t, &t);
  VJ2(true_divide, th_arg_float(pi), t, &t);
  VJ2(sub, psi, t, &t); /* the reflected value, used where x < 1/2 */
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, refl, t, psi, &psi));
  VJ2(lt, x, th_arg_float(0.0), &pole);
  VJ2(logical_and, pole, isint, &pole);
  return th_tu_call3(tr, TH_OP_ltorch_where, pole, th_arg_float(NAN), psi, out);
}

/* d/da of the unary ops, times g. */
static th_status unary_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  th_arg a = b->args[0], y = th_vjp_out(b), g = cts[0], t, u;
  if (!th_vjp_is_float_tensor(&a)) return TH_OK;
  th_arg *r = &grads[0];
  switch (b->sym->id) {
    case TH_OP_prims_abs:
      VJ1(sign, a, &t);
      VJ2(mul, g, t, r);
      break; /* abs'(0) = sign(0) = 0 */
    case TH_OP_prims_neg: VJ1(neg, g, r); break;
    case TH_OP_prims_exp: VJ2(mul, g, y, r); break;
    case TH_OP_prims_exp2:
      VJ2(mul, g, y, &t);
      VJ2(mul, t, th_arg_float(VJ_LN2), r);
      break;
    case TH_OP_prims_expm1:
      VJ2(add, y, th_arg_float(1.0), &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_log: VJ2(true_divide, g, a, r); break;
    case TH_OP_prims_log1p:
      VJ2(add, a, th_arg_float(1.0), &t);
      VJ2(true_divide, g, t, r);
      break;
    case TH_OP_prims_log2:
      VJ2(mul, a, th_arg_float(VJ_LN2), &t);
      VJ2(true_divide, g, t, r);
      break;
    case TH_OP_prims_log10:
      VJ2(mul, a, th_arg_float(VJ_LN10), &t);
      VJ2(true_divide, g, t, r);
      break;
    case TH_OP_prims_sin:
      VJ1(cos, a, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_cos:
      VJ1(sin, a, &t);
      VJ1(neg, t, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_tan:
      VJ2(mul, y, y, &t);
      VJ2(add, t, th_arg_float(1.0), &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_sinh:
      VJ1(cosh, a, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_cosh:
      VJ1(sinh, a, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_tanh:
      VJ2(mul, y, y, &t);
      VJ2(sub, th_arg_float(1.0), t, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_asin: /* g * rsqrt(1 - a^2) */
      VJ2(mul, a, a, &t);
      VJ2(sub, th_arg_float(1.0), t, &t);
      VJ1(rsqrt, t, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_acos: /* -g * rsqrt(1 - a^2) */
      VJ2(mul, a, a, &t);
      VJ2(sub, th_arg_float(1.0), t, &t);
      VJ1(rsqrt, t, &t);
      VJ1(neg, t, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_atan:
      VJ2(mul, a, a, &t);
      VJ2(add, t, th_arg_float(1.0), &t);
      VJ2(true_divide, g, t, r);
      break;
    case TH_OP_prims_asinh: /* g * rsqrt(a^2 + 1) */
      VJ2(mul, a, a, &t);
      VJ2(add, t, th_arg_float(1.0), &t);
      VJ1(rsqrt, t, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_acosh: /* g * rsqrt(a^2 - 1) */
      VJ2(mul, a, a, &t);
      VJ2(sub, t, th_arg_float(1.0), &t);
      VJ1(rsqrt, t, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_atanh: /* g / (1 - a^2) */
      VJ2(mul, a, a, &t);
      VJ2(sub, th_arg_float(1.0), t, &t);
      VJ2(true_divide, g, t, r);
      break;
    case TH_OP_prims_erf:
    case TH_OP_prims_erfc: { /* +-g * 2/sqrt(pi) * exp(-a^2) */
      double k = VJ_2_SQRTPI;
      VJ2(mul, a, a, &t);
      VJ1(neg, t, &t);
      VJ1(exp, t, &t);
      VJ2(mul, t, th_arg_float(b->sym->id == TH_OP_prims_erf ? k : -k), &t);
      VJ2(mul, g, t, r);
      break;
    }
    case TH_OP_prims_reciprocal:
      VJ2(mul, y, y, &t);
      VJ1(neg, t, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_lgamma:
      TH_TRY(digamma_ops(tr, a, &t));
      VJ2(mul, g, t, r);
      break; /* g * digamma(a) */
    case TH_OP_prims_sqrt:
      VJ2(mul, y, th_arg_float(2.0), &t);
      VJ2(true_divide, g, t, r);
      break;                 /* g / (2y): inf at 0 */
    case TH_OP_prims_sinc: { /* g (pi a cos(pi a) - sin(pi a)) / (pi a^2), 0 where pi a^2 is 0 (PyTorch's sinc_backward) */
      const double pi = 3.141592653589793;
      th_arg p, q, z;
      VJ2(mul, a, th_arg_float(pi), &p);
      VJ1(cos, p, &t);
      VJ2(mul, p, t, &t);
      VJ1(sin, p, &u);
      VJ2(sub, t, u, &t);
      VJ2(mul, g, t, &t);
      VJ2(mul, a, a, &q);
      VJ2(mul, q, th_arg_float(pi), &q);
      VJ2(true_divide, t, q, &t);
      VJ2(eq, q, th_arg_float(0.0), &z);
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), t, r));
      break;
    }
    case TH_OP_prims_rsqrt: /* -0.5 * g * y^3 */
      VJ2(mul, y, y, &t);
      VJ2(mul, t, y, &t);
      VJ2(mul, t, th_arg_float(-0.5), &u);
      VJ2(mul, g, u, r);
      break;
    case TH_OP_prims_digamma: /* g * polygamma(1, a) (PyTorch's trigamma formula, torch/elementwise_more.c) */
      VJ2(polygamma, th_arg_int(1), a, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_i0: /* g * i1(a) */
      VJ1(i1, a, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_i0e: /* g * (i1e(a) - sign(a) * y) */
      VJ1(i1e, a, &t);
      VJ1(sign, a, &u);
      VJ2(mul, u, y, &u);
      VJ2(sub, t, u, &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_i1:    /* g * (i0(a) - y / a), 0.5 g at 0 (PyTorch's i1_backward) */
    case TH_OP_prims_i1e: { /* g * (i0e(a) - y * (sign(a) + 1 / a)), 0.5 g at 0 */
      th_arg z;
      bool e = b->sym->id == TH_OP_prims_i1e;
      if (e)
        VJ1(i0e, a, &t);
      else
        VJ1(i0, a, &t);
      VJ2(true_divide, y, a, &u);
      if (e) {
        th_arg s;
        VJ1(sign, a, &s);
        VJ2(mul, s, y, &s);
        VJ2(add, u, s, &u);
      }
      VJ2(sub, t, u, &t);
      VJ2(eq, a, th_arg_float(0.0), &z);
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.5), t, &t));
      VJ2(mul, g, t, r);
      break;
    }
    case TH_OP_prims_ndtri: /* g * sqrt(2 pi) * exp(y^2 / 2) */
      VJ2(mul, y, y, &t);
      VJ2(mul, t, th_arg_float(0.5), &t);
      VJ1(exp, t, &t);
      VJ2(mul, t, th_arg_float(2.50662827463100050242), &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_spherical_bessel_j0: { /* g (cos(a) - y) / a, 0 at 0 (PyTorch defines none; this is the
                                             * derivative of sin(a) / a) */
      th_arg z;
      VJ1(cos, a, &t);
      VJ2(sub, t, y, &t);
      VJ2(true_divide, t, a, &t);
      VJ2(eq, a, th_arg_float(0.0), &z);
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), t, &t));
      VJ2(mul, g, t, r);
      break;
    }
    case TH_OP_prims_erfinv: /* g * sqrt(pi) / 2 * exp(y^2) */
      VJ2(mul, y, y, &t);
      VJ1(exp, t, &t);
      VJ2(mul, t, th_arg_float(0.88622692545275801364), &t);
      VJ2(mul, g, t, r);
      break;
    case TH_OP_prims_ceil:
    case TH_OP_prims_floor:
    case TH_OP_prims_round:
    case TH_OP_prims_trunc:
    case TH_OP_prims_sign: /* piecewise constant: zero gradient (PyTorch gives zeros too) */
      return th_vjp_zeros_like(tr, a.u.value, r);
    default: return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no vjp rule", b->sym->qualname);
  }
  return TH_OK;
}

/* add sub mul div pow fmod remainder atan2 hypot maximum minimum fmax fmin */
static th_status binary_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  th_arg a = b->args[0], c = b->args[1], y = th_vjp_out(b), g = cts[0];
  th_arg ga = th_arg_none(), gc = th_arg_none(), t, u, z;
  bool da = th_vjp_is_float_tensor(&a), dc = th_vjp_is_float_tensor(&c);
  switch (b->sym->id) {
    case TH_OP_prims_add:
      ga = g;
      gc = g;
      break;
    case TH_OP_prims_sub:
      ga = g;
      if (dc) VJ1(neg, g, &gc);
      break;
    case TH_OP_prims_mul:
      if (da) VJ2(mul, g, c, &ga);
      if (dc) VJ2(mul, g, a, &gc);
      break;
    case TH_OP_prims_div: /* a: g / c; c: -g * ((a / c) / c) */
      if (da) VJ2(true_divide, g, c, &ga);
      if (dc) {
        VJ2(true_divide, a, c, &t);
        VJ2(true_divide, t, c, &t);
        VJ1(neg, t, &t);
        VJ2(mul, g, t, &gc);
      }
      break;
    case TH_OP_prims_pow:
      if (da) { /* where(c == 0, 0, g * c * a^(c - 1)); a^(c - 1) for a number c - 1 = 0.5 or -0.5 as
                 * PyTorch's pow kernel computes it, sqrt or rsqrt (sqrt(-0) = -0, rsqrt(-0) = -inf, both
                 * nan at -inf, where pow gives +0, +inf, +inf and 0) */
        double cv = 0;
        bool cnum = !th_meta_is_tensor(&c) && th_meta_number_value(&c, &cv, NULL);
        if (cnum && cv == 1.5)
          VJ1(sqrt, a, &t);
        else if (cnum && cv == 0.5)
          VJ1(rsqrt, a, &t);
        else {
          VJ2(sub, c, th_arg_float(1.0), &t);
          VJ2(pow, a, t, &t);
        }
        VJ2(mul, c, t, &t);
        VJ2(mul, g, t, &t);
        if (th_meta_is_tensor(&c)) {
          VJ2(eq, c, th_arg_float(0.0), &z);
          TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), t, &ga));
        } else if (cnum && cv == 0) {
          TH_TRY(th_vjp_zeros_like(tr, a.u.value, &ga));
        } else {
          ga = t;
        }
      }
      if (dc) { /* g * where(a == 0 & c >= 0, 0, y * log(a)) */
        if (th_meta_is_tensor(&a)) {
          VJ1(log, a, &t);
          VJ2(mul, y, t, &t);
          VJ2(eq, a, th_arg_float(0.0), &z);
          VJ2(ge, c, th_arg_float(0.0), &u);
          VJ2(logical_and, z, u, &z);
          TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), t, &t));
        } else { /* a number base: its log is a constant */
          double av = 1;
          if (!th_meta_number_value(&a, &av, NULL))
            return th_error(TH_ERR_NOT_IMPLEMENTED,
                            "%s: the gradient of the exponent with a number base known only "
                            "at run time is not supported",
                            b->sym->qualname);
          VJ2(mul, y, th_arg_float(log(av)), &t);
          if (av == 0) {
            VJ2(ge, c, th_arg_float(0.0), &u);
            TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, u, th_arg_float(0.0), t, &t));
          }
        }
        VJ2(mul, g, t, &gc);
      }
      break;
    case TH_OP_prims_fmod:
    case TH_OP_prims_remainder: /* a: g; c: -g * trunc(a / c) (fmod) or floor(a / c) (remainder) */
      ga = g;
      if (dc) {
        VJ2(true_divide, a, c, &t);
        if (b->sym->id == TH_OP_prims_fmod)
          VJ1(trunc, t, &t);
        else
          VJ1(floor, t, &t);
        VJ1(neg, t, &t);
        VJ2(mul, g, t, &gc);
      }
      break;
    case TH_OP_prims_atan2: /* a: g * c / (a^2 + c^2); c: g * -a / (a^2 + c^2); both 0 where a^2 + c^2 is 0
                             * (at the origin, or underflowed), as PyTorch's atan2_backward */
      VJ2(mul, a, a, &t);
      VJ2(mul, c, c, &u);
      VJ2(add, t, u, &t);
      VJ2(eq, t, th_arg_float(0.0), &z);
      VJ1(reciprocal, t, &t);
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), t, &t));
      if (da) {
        VJ2(mul, g, c, &u);
        VJ2(mul, u, t, &ga);
      }
      if (dc) {
        VJ1(neg, a, &u);
        VJ2(mul, g, u, &u);
        VJ2(mul, u, t, &gc);
      }
      break;
    case TH_OP_prims_maximum:
    case TH_OP_prims_minimum: { /* ties split the gradient in halves; the other side gets 0 (PyTorch) */
      bool mx = b->sym->id == TH_OP_prims_maximum;
      VJ2(eq, a, c, &z);
      VJ2(mul, g, th_arg_float(0.5), &t);
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, t, g, &t)); /* where(a == c, g / 2, g) */
      if (da) {                                                 /* maximum: a < c loses; minimum: a > c */
        if (mx)
          VJ2(lt, a, c, &u);
        else
          VJ2(gt, a, c, &u);
        TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, u, th_arg_float(0.0), t, &ga));
      }
      if (dc) {
        if (mx)
          VJ2(gt, a, c, &u);
        else
          VJ2(lt, a, c, &u);
        TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, u, th_arg_float(0.0), t, &gc));
      }
      break;
    }
    case TH_OP_prims_chebyshev_polynomial_t:
    case TH_OP_prims_chebyshev_polynomial_u:
    case TH_OP_prims_chebyshev_polynomial_v:
    case TH_OP_prims_chebyshev_polynomial_w:
    case TH_OP_prims_hermite_polynomial_h:
    case TH_OP_prims_hermite_polynomial_he:
    case TH_OP_prims_laguerre_polynomial_l:
    case TH_OP_prims_legendre_polynomial_p:
    case TH_OP_prims_nextafter: /* PyTorch defines no derivative for these */
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: the derivative is not implemented", b->sym->qualname);
    case TH_OP_prims_zeta: /* q: -g * x * zeta(x + 1, q); x: no derivative (PyTorch's neither) */
      if (da)
        return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: the derivative of zeta with respect to x is not implemented",
                        b->sym->qualname);
      if (dc) {
        VJ2(add, a, th_arg_float(1.0), &t);
        VJ2(zeta, t, c, &t);
        VJ2(mul, t, a, &t);
        VJ2(mul, g, t, &t);
        VJ1(neg, t, &gc);
      }
      break;
    case TH_OP_prims_hypot: /* a: g * a / y; c: g * c / y (PyTorch's hypot backward) */
      if (da) {
        VJ2(mul, g, a, &t);
        VJ2(true_divide, t, y, &ga);
      }
      if (dc) {
        VJ2(mul, g, c, &t);
        VJ2(true_divide, t, y, &gc);
      }
      break;
    case TH_OP_prims_fmax:
    case TH_OP_prims_fmin: { /* a gets g where it is picked (a >= c for fmax, a <= c for fmin) or c is NaN,
                              * c gets g elsewhere: no tie split (PyTorch's fmax/fmin backward) */
      if (b->sym->id == TH_OP_prims_fmax)
        VJ2(ge, a, c, &z);
      else
        VJ2(le, a, c, &z);
      VJ2(ne, c, c, &u);
      VJ2(logical_or, z, u, &z);
      if (da) TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, g, th_arg_float(0.0), &ga));
      if (dc) TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), g, &gc));
      break;
    }
    default: return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no vjp rule", b->sym->qualname);
  }
  if (da && ga.kind == TH_ARG_VALUE) TH_TRY(th_vjp_sum_to(tr, ga, &a, &grads[0]));
  if (dc && gc.kind == TH_ARG_VALUE) TH_TRY(th_vjp_sum_to(tr, gc, &c, &grads[1]));
  return TH_OK;
}

/* where(pred, a, b): a gets g where pred holds, b elsewhere. */
static th_status where_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  th_arg p = b->args[0], g = cts[0], t;
  for (int k = 1; k <= 2; k++) {
    if (!th_vjp_is_float_tensor(&b->args[k])) continue;
    if (th_meta_is_tensor(&p)) {
      TH_TRY(
        th_tu_call3(tr, TH_OP_ltorch_where, p, k == 1 ? g : th_arg_float(0.0), k == 1 ? th_arg_float(0.0) : g, &t));
    } else {
      int64_t pv = 0;
      th_meta_number_value(&p, NULL, &pv);
      if ((pv != 0) != (k == 1))
        TH_TRY(th_vjp_zeros_like(tr, g.u.value, &t));
      else
        t = g;
    }
    TH_TRY(th_vjp_sum_to(tr, t, &b->args[k], &grads[k]));
  }
  return TH_OK;
}

/* convert_element_type: the cotangent converted back to the input's dtype (autocast's casts too). */
static th_status convert_element_type_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  if (cts[0].u.value->dtype == a->u.value->dtype) {
    grads[0] = cts[0];
    return TH_OK;
  }
  return th_tu_call2(tr, TH_OP_prims_convert_element_type, cts[0], th_arg_dtype(a->u.value->dtype), &grads[0]);
}

/* device_put: the cotangent moved back to the input's device. */
static th_status device_put_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  if (th_device_eq(cts[0].u.value->device, a->u.value->device)) {
    grads[0] = cts[0];
    return TH_OK;
  }
  return th_tu_call2(tr, TH_OP_prims_device_put, cts[0], th_tu_device(a->u.value->device), &grads[0]);
}

#undef VJ1
#undef VJ2
#undef VJ_LN2
#undef VJ_LN10
#undef VJ_2_SQRTPI

#define RULE(name, fn)                                                                                                 \
  { TH_OP_prims_##name, TH_VJP_RULE, fn }
#define NONDIFF(name)                                                                                                  \
  { TH_OP_prims_##name, TH_VJP_NONDIFF, NULL }
const th_vjp_entry th_vjp_table_prims_elementwise[] = {
/* the unary prims: unary_vjp for kinds MATH and FLOAT, not differentiable for EXACT and PRED */
#define UV_MATH(name) RULE(name, unary_vjp),
#define UV_FLOAT(name) RULE(name, unary_vjp),
#define UV_EXACT(name) NONDIFF(name),
#define UV_PRED(name) NONDIFF(name),
#define TH_UNARY(name, kind, ...) UV_##kind(name)
#include "ops/unary.def"
#undef TH_UNARY
#undef UV_MATH
#undef UV_FLOAT
#undef UV_EXACT
#undef UV_PRED
/* the binary prims: binary_vjp for kinds MATH, FLOAT and ALL, not differentiable for EXACT and CMP
     * (integer or bool results) */
#define BV_MATH(name) RULE(name, binary_vjp),
#define BV_FLOAT(name) RULE(name, binary_vjp),
#define BV_ALL(name) RULE(name, binary_vjp),
#define BV_EXACT(name) NONDIFF(name),
#define BV_CMP(name) NONDIFF(name),
#define TH_BINARY(name, kind, ...) BV_##kind(name)
#include "ops/binary.def"
#undef TH_BINARY
#undef BV_MATH
#undef BV_FLOAT
#undef BV_ALL
#undef BV_EXACT
#undef BV_CMP
  RULE(where, where_vjp),
  RULE(convert_element_type, convert_element_type_vjp),
  RULE(device_put, device_put_vjp),
};
const int th_vjp_table_prims_elementwise_n =
  (int)(sizeof th_vjp_table_prims_elementwise / sizeof th_vjp_table_prims_elementwise[0]);
#undef RULE
#undef NONDIFF
