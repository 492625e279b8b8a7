/* elementwise.c — metas of the elementwise prims (unary, binary, where) and of the conversion and
 * data-movement prims (convert_element_type, device_put).
 *
 * Prims are strict (Thunder §3.2): tensor operands must already share one dtype, one shape and one
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

#include "ops/meta_util.h"
#include "ops/ops_internal.h"

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
                      "%s: Expected a number no wider than the dtype %s (a Python %s or narrower), but found a %s",
                      op, th_meta_dtype_repr(info->dtype),
                      th_meta_numbertype_name(th_meta_dtype_numbertype(info->dtype)),
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
      return th_error(TH_ERR_RUNTIME, "%s: Expected shape %s but found %s! (prims require operands of one shape)",
                      op, th_meta_shape_str(info->like->shape, info->like->ndim, s0, sizeof s0),
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

/* Wrapping int64 arithmetic (no signed overflow UB). */
static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

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

/* A float result of math on finite inputs must be finite, as Python's math module raises otherwise. */
static th_status check_math_result(const char *op, double r, double x, double y) {
  if (isfinite(x) && isfinite(y)) {
    if (isnan(r)) return th_error(TH_ERR_VALUE, "%s: math domain error", op);
    if (isinf(r)) return th_error(TH_ERR_VALUE, "%s: math range error", op);
  }
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

/* The Python type of a unary op's number result for an input of type `t`. */
static th_dtype unary_number_type(th_op_id id, th_dtype t) {
  switch (id) {
    case TH_OP_prims_isfinite:
    case TH_OP_prims_signbit: return TH_BOOL;
    case TH_OP_prims_abs:
    case TH_OP_prims_neg:
    case TH_OP_prims_sign: return t == TH_F64 ? TH_F64 : TH_I64; /* abs(True) == 1, an int */
    case TH_OP_prims_ceil:
    case TH_OP_prims_floor:
    case TH_OP_prims_round:
    case TH_OP_prims_trunc:                      /* math.floor(2.5) == 2, an int */
    case TH_OP_prims_bitwise_not: return TH_I64; /* ~True == -2 */
    default: return TH_F64;                      /* float-only math */
  }
}

static double unary_float_fn(th_op_id id, double x) {
  switch (id) {
    case TH_OP_prims_acos: return acos(x);
    case TH_OP_prims_acosh: return acosh(x);
    case TH_OP_prims_asin: return asin(x);
    case TH_OP_prims_asinh: return asinh(x);
    case TH_OP_prims_atan: return atan(x);
    case TH_OP_prims_atanh: return atanh(x);
    case TH_OP_prims_cos: return cos(x);
    case TH_OP_prims_cosh: return cosh(x);
    case TH_OP_prims_erf: return erf(x);
    case TH_OP_prims_erfc: return erfc(x);
    case TH_OP_prims_exp: return exp(x);
    case TH_OP_prims_exp2: return exp2(x);
    case TH_OP_prims_expm1: return expm1(x);
    case TH_OP_prims_lgamma: return lgamma(x);
    case TH_OP_prims_log: return log(x);
    case TH_OP_prims_log10: return log10(x);
    case TH_OP_prims_log1p: return log1p(x);
    case TH_OP_prims_log2: return log2(x);
    case TH_OP_prims_reciprocal: return 1.0 / x;
    case TH_OP_prims_rsqrt: return 1.0 / sqrt(x);
    case TH_OP_prims_sin: return sin(x);
    case TH_OP_prims_sinh: return sinh(x);
    case TH_OP_prims_sqrt: return sqrt(x);
    case TH_OP_prims_tan: return tan(x);
    case TH_OP_prims_tanh: return tanh(x);
    default: return NAN;
  }
}

static th_status unary_fold(const th_symbol *sym, num a, num *r) {
  const char *op = sym->qualname;
  th_op_id id = sym->id;
  bool fl = a.type == TH_F64;
  switch (id) {
    case TH_OP_prims_isfinite: *r = num_bool(!fl || isfinite(a.f)); return TH_OK;
    case TH_OP_prims_signbit: *r = num_bool(fl ? signbit(a.f) != 0 : a.i < 0); return TH_OK;
    case TH_OP_prims_abs: *r = fl ? num_float(fabs(a.f)) : num_int(a.i < 0 ? wrap_sub(0, a.i) : a.i); return TH_OK;
    case TH_OP_prims_neg: *r = fl ? num_float(-a.f) : num_int(wrap_sub(0, a.i)); return TH_OK;
    case TH_OP_prims_bitwise_not: *r = num_int(~a.i); return TH_OK; /* Python: ~True == -2 */
    case TH_OP_prims_sign:
      if (fl)
        *r = num_float(isnan(a.f) ? a.f : (double)((a.f > 0) - (a.f < 0)));
      else
        *r = num_int((a.i > 0) - (a.i < 0));
      return TH_OK;
    case TH_OP_prims_ceil:
    case TH_OP_prims_floor:
    case TH_OP_prims_round:
    case TH_OP_prims_trunc: {
      if (!fl) {
        *r = num_int(a.i);
        return TH_OK;
      }
      /* round: Python's round() ties to even, as nearbyint in the default rounding mode */
      double v = id == TH_OP_prims_ceil    ? ceil(a.f)
                 : id == TH_OP_prims_floor ? floor(a.f)
                 : id == TH_OP_prims_round ? nearbyint(a.f)
                                           : trunc(a.f);
      int64_t i = 0; /* set by float_to_int on success (GCC -O3 cannot tell) */
      TH_TRY(float_to_int(op, v, &i));
      *r = num_int(i);
      return TH_OK;
    }
    default: {
      double v = unary_float_fn(id, a.f);
      if (id == TH_OP_prims_reciprocal && a.f == 0) return th_error(TH_ERR_VALUE, "%s: float division by zero", op);
      TH_TRY(check_math_result(op, v, a.f, 0));
      *r = num_float(v);
      return TH_OK;
    }
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

/* ---- binary: add sub mul div pow fmod remainder (math dtypes), atan2 (float), maximum minimum (all),
 *      bitwise_and/or/xor (exact), eq ne lt le gt ge (all, bool result) -------------------------------- */

/* The Python type of a binary op's number result. */
static th_dtype binary_number_type(th_op_id id, th_dtype ta, th_dtype tb, num b, bool known) {
  bool fl = ta == TH_F64 || tb == TH_F64;
  bool both_bool = ta == TH_BOOL && tb == TH_BOOL;
  switch (id) {
    case TH_OP_prims_eq:
    case TH_OP_prims_ne:
    case TH_OP_prims_lt:
    case TH_OP_prims_le:
    case TH_OP_prims_gt:
    case TH_OP_prims_ge: return TH_BOOL;
    case TH_OP_prims_fmod:
    case TH_OP_prims_atan2: return TH_F64;                                   /* math.fmod, math.atan2 */
    case TH_OP_prims_pow: return fl || (known && b.i < 0) ? TH_F64 : TH_I64; /* int ** -1 is a float */
    case TH_OP_prims_maximum:
    case TH_OP_prims_minimum:
    case TH_OP_prims_bitwise_and:
    case TH_OP_prims_bitwise_or:
    case TH_OP_prims_bitwise_xor: return both_bool ? TH_BOOL : fl ? TH_F64 : TH_I64;
    default: return fl ? TH_F64 : TH_I64; /* add sub mul div remainder: bool + bool is an int */
  }
}

static int64_t ipow(int64_t base, int64_t e) {
  int64_t r = 1;
  while (e > 0) {
    if (e & 1) r = wrap_mul(r, base);
    base = wrap_mul(base, base);
    e >>= 1;
  }
  return r;
}

static th_status binary_fold(const th_symbol *sym, num a, num b, th_dtype rtype, num *r) {
  const char *op = sym->qualname;
  th_op_id id = sym->id;
  bool fl = a.type == TH_F64 || b.type == TH_F64;
  double x = num_f(a), y = num_f(b);
  switch (id) {
    case TH_OP_prims_eq: *r = num_bool(fl ? x == y : a.i == b.i); return TH_OK;
    case TH_OP_prims_ne: *r = num_bool(fl ? x != y : a.i != b.i); return TH_OK;
    case TH_OP_prims_lt: *r = num_bool(fl ? x < y : a.i < b.i); return TH_OK;
    case TH_OP_prims_le: *r = num_bool(fl ? x <= y : a.i <= b.i); return TH_OK;
    case TH_OP_prims_gt: *r = num_bool(fl ? x > y : a.i > b.i); return TH_OK;
    case TH_OP_prims_ge: *r = num_bool(fl ? x >= y : a.i >= b.i); return TH_OK;
    case TH_OP_prims_add: *r = fl ? num_float(x + y) : num_int(wrap_add(a.i, b.i)); return TH_OK;
    case TH_OP_prims_sub: *r = fl ? num_float(x - y) : num_int(wrap_sub(a.i, b.i)); return TH_OK;
    case TH_OP_prims_mul: *r = fl ? num_float(x * y) : num_int(wrap_mul(a.i, b.i)); return TH_OK;
    case TH_OP_prims_div:
      /* Thunder's prims.div on numbers: exact / exact truncates toward zero; otherwise true division */
      if (fl) {
        if (y == 0) return th_error(TH_ERR_VALUE, "%s: float division by zero", op);
        *r = num_float(x / y);
      } else {
        if (b.i == 0) return th_error(TH_ERR_VALUE, "%s: integer division or modulo by zero", op);
        *r = num_int(b.i == -1 ? wrap_sub(0, a.i) : a.i / b.i);
      }
      return TH_OK;
    case TH_OP_prims_remainder:
      /* Python's %: the result takes the sign of the divisor */
      if (fl) {
        if (y == 0) return th_error(TH_ERR_VALUE, "%s: float modulo", op);
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        *r = num_float(m);
      } else {
        if (b.i == 0) return th_error(TH_ERR_VALUE, "%s: integer division or modulo by zero", op);
        int64_t m = b.i == -1 ? 0 : a.i % b.i;
        if (m != 0 && ((m < 0) != (b.i < 0))) m += b.i;
        *r = num_int(m);
      }
      return TH_OK;
    case TH_OP_prims_fmod: {
      double v = fmod(x, y);
      TH_TRY(check_math_result(op, v, x, y));
      *r = num_float(v);
      return TH_OK;
    }
    case TH_OP_prims_atan2: *r = num_float(atan2(x, y)); return TH_OK;
    case TH_OP_prims_pow:
      if (rtype == TH_I64) {
        *r = num_int(ipow(a.i, b.i));
      } else {
        if (x == 0 && y < 0) return th_error(TH_ERR_VALUE, "%s: 0.0 cannot be raised to a negative power", op);
        double v = pow(x, y);
        TH_TRY(check_math_result(op, v, x, y));
        *r = num_float(v);
      }
      return TH_OK;
    case TH_OP_prims_maximum:
    case TH_OP_prims_minimum: {
      bool take_a = id == TH_OP_prims_maximum ? (fl ? (x >= y || isnan(x)) : a.i >= b.i)
                                              : (fl ? (x <= y || isnan(x)) : a.i <= b.i);
      num c = take_a ? a : b;
      if (rtype == TH_F64)
        *r = num_float(num_f(c));
      else
        *r = rtype == TH_BOOL ? num_bool(c.i != 0) : num_int(c.i);
      return TH_OK;
    }
    case TH_OP_prims_bitwise_and:
    case TH_OP_prims_bitwise_or:
    case TH_OP_prims_bitwise_xor: {
      int64_t v = id == TH_OP_prims_bitwise_and  ? (a.i & b.i)
                  : id == TH_OP_prims_bitwise_or ? (a.i | b.i)
                                                 : (a.i ^ b.i);
      *r = rtype == TH_BOOL ? num_bool(v != 0) : num_int(v);
      return TH_OK;
    }
    default: return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no number folding for this op", op);
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
