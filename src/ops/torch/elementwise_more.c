/* elementwise_more.c — torch-level elementwise ops that are composites of other ops: the reflected
 * operators (Tensor.__rsub__, __rpow__, ...), rsub, copysign, heaviside, ldexp, float_power, logaddexp,
 * logaddexp2, xlogy, special.xlog1py, logit, nan_to_num, clamp_max, addcdiv, addcmul, isclose, x.where,
 * and the unary composites of unary.def deg2rad, rad2deg, angle, isinf, isposinf, isneginf, isreal,
 * positive and square.
 *
 * Numerics follow PyTorch: an op with a CPU kernel of its own (logaddexp, xlogy, logit, addcdiv, ...)
 * computes every step in the computation dtype (float32 for bfloat16 and float16) and rounds once; an op
 * that PyTorch composes from other ops (ldexp, isclose, square, float_power) records the same ops, each
 * rounding to its dtype. The gradient is the decomposition's. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

#define L1(op, a, o) TH_TRY(th_tu_call1(tr, TH_OP_ltorch_##op, a, o))
#define L2(op, a, b, o) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_##op, a, b, o))
#define L3(op, a, b, c, o) TH_TRY(th_tu_call3(tr, TH_OP_ltorch_##op, a, b, c, o))

static th_dtype dtype_of(const th_arg *a) {
  const th_value *v = th_meta_tensor(a);
  if (v) return v->dtype;
  return th_tu_tensor_dtype(th_tu_arg_type(a));
}

/* The operands promoted by `kind`, broadcast and converted to the computation dtype; *res is the
 * result type. */
static th_status prepare(th_trace *tr, const char *op, int n, th_arg *x, th_tu_promo kind, th_tu_type *res) {
  th_tu_type comp;
  TH_TRY(th_tu_promote(op, n, x, kind, &comp, res));
  TH_TRY(th_tu_broadcast(tr, op, n, x));
  for (int i = 0; i < n; i++) TH_TRY(th_tu_convert_type(tr, &x[i], comp));
  return TH_OK;
}

/* A Scalar as the kernel sees it after Scalar::to<scalar_t>() for a floating dtype. */
static double as_element(th_dtype dt, double v) {
  switch (dt) {
    case TH_F32: return (double)(float)v;
    case TH_BF16: return (double)th_bf16_to_f32(th_f32_to_bf16((float)v));
    case TH_F16: return (double)th_f16_to_f32(th_f32_to_f16((float)v));
    default: return v;
  }
}

/* ---- reflected operators ------------------------------------------------------------------------------
 * Tensor.__rpow__(x, y) is y ** x: each is its op with the operands swapped. The Python frontend
 * dispatches a reflected operator to the swapped op itself (csrc/dispatch.c); these rows name the
 * spellings for traces and for the OpInfos of torch.Tensor.__radd__ & co. */
static th_status swapped(th_trace *tr, th_op_id op, const th_arg *args, th_arg *out) {
  return th_tu_call2(tr, op, args[1], args[0], out);
}
#define REFLECTED(name, target)                                                                                        \
  th_status ltorch_##name##_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {              \
    (void)sym;                                                                                                         \
    return swapped(tr, TH_OP_ltorch_##target, args, out);                                                              \
  }
REFLECTED(radd, add)
REFLECTED(rmul, mul)
REFLECTED(rtrue_divide, true_divide)
REFLECTED(rfloor_divide, floor_divide)
REFLECTED(rremainder, remainder)
REFLECTED(rpow, pow)
REFLECTED(rmatmul, matmul)
REFLECTED(rbitwise_and, bitwise_and)
REFLECTED(rbitwise_or, bitwise_or)
REFLECTED(rbitwise_xor, bitwise_xor)
#undef REFLECTED

/* rsub(input, other, alpha) = other - alpha * input (torch.rsub). */
th_status ltorch_rsub_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  const th_arg pos[2] = {args[1], args[0]};
  const char *const names[1] = {"alpha"};
  return th_tu_call_kw(tr, TH_OP_ltorch_sub, 2, pos, 1, names, &args[2], out);
}

/* x.where(condition, y) = torch.where(condition, x, y). */
th_status ltorch_tensor_where_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call3(tr, TH_OP_ltorch_where, args[1], args[0], args[2], out);
}

/* ---- binary --------------------------------------------------------------------------------------------- */

/* copysign(a, b) = signbit(b) ? -|a| : |a| in the computation dtype (integers become float32). */
th_status ltorch_copysign_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_arg x[2] = {args[0], args[1]}, m, pos, neg;
  th_tu_type res;
  TH_TRY(prepare(tr, sym->qualname, 2, x, TH_TU_PROMO_INT_TO_FLOAT, &res));
  L1(abs, x[0], &pos);
  L1(neg, pos, &neg);
  if (th_meta_is_tensor(&x[1])) {
    L1(signbit, x[1], &m);
    L3(where, m, neg, pos, out);
  } else {
    double v = 0;
    if (!th_meta_number_value(&x[1], &v, NULL))
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: a number `other` known only at run time is not supported",
                      sym->qualname);
    *out = signbit(v) ? neg : pos;
  }
  return th_tu_convert_type(tr, out, res);
}

/* heaviside(a, values) = a == 0 ? values : (a > 0), in the operands' common dtype (PyTorch requires one). */
th_status ltorch_heaviside_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_dtype da = dtype_of(&args[0]), db = dtype_of(&args[1]);
  if (da != db)
    return th_error(TH_ERR_RUNTIME, "%s: heaviside is not yet implemented for tensors with different dtypes", op);
  th_arg x[2] = {args[0], args[1]}, m, p, t;
  th_tu_type res;
  TH_TRY(prepare(tr, op, 2, x, TH_TU_PROMO_DEFAULT, &res));
  L2(gt, x[0], th_arg_int(0), &p);
  L2(eq, x[0], th_arg_int(0), &m);
  t = p;
  TH_TRY(th_tu_convert(tr, &t, dtype_of(&x[1])));
  L3(where, m, x[1], t, out);
  return th_tu_convert_type(tr, out, res);
}

/* ldexp(a, e) = a * 2.0 ** e (torch.ldexp's composition), in the operands' promoted dtype (bfloat16 with
 * an integer exponent stays bfloat16, as PyTorch's result). */
th_status ltorch_ldexp_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(sym->qualname, 2, args, TH_TU_PROMO_INT_TO_FLOAT, &comp, &res));
  th_arg t;
  L2(pow, th_arg_float(2.0), args[1], &t);
  L2(mul, args[0], t, out);
  return th_tu_convert_type(tr, out, res);
}

/* float_power(a, e) = pow(a in float64, e in float64). */
th_status ltorch_float_power_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  th_arg a = args[0], e = args[1];
  TH_TRY(th_tu_convert(tr, &a, TH_F64));
  TH_TRY(th_tu_convert(tr, &e, TH_F64));
  L2(pow, a, e, out);
  return TH_OK;
}

/* logaddexp(a, b) = a where a and b are the same infinity, else max(a, b) + log1p(exp(-|a - b|))
 * (PyTorch's kernel); logaddexp2 the same in base 2: max + log1p(exp2(-|a - b|)) / ln 2. */
static th_status logaddexp(th_trace *tr, const th_symbol *sym, const th_arg *args, bool base2, th_arg *out) {
  const char *op = sym->qualname;
  th_arg x[2] = {args[0], args[1]}, mx, t, inf, same;
  th_tu_type res;
  for (int i = 0; i < 2; i++)
    if (!th_dtype_is_float(dtype_of(&args[i])))
      return th_error(TH_ERR_RUNTIME, "%s: \"%s_cpu\" not implemented for '%s'", op, base2 ? "logaddexp2" : "logaddexp",
                      th_tu_scalar_type_name(dtype_of(&args[i])));
  TH_TRY(prepare(tr, op, 2, x, TH_TU_PROMO_INT_TO_FLOAT, &res));
  L2(maximum, x[0], x[1], &mx);
  L2(sub, x[0], x[1], &t);
  L1(abs, t, &t);
  L1(neg, t, &t);
  if (base2) {
    L1(exp2, t, &t);
    L1(log1p, t, &t);
    L2(mul, t, th_arg_float(1.4426950408889634073599246810018921 /* 1 / ln 2 */), &t);
  } else {
    L1(exp, t, &t);
    L1(log1p, t, &t);
  }
  L2(add, mx, t, &t);
  L1(abs, x[0], &inf);
  L2(eq, inf, th_arg_float(INFINITY), &inf);
  L2(eq, x[0], x[1], &same);
  L2(logical_and, inf, same, &same);
  L3(where, same, x[0], t, out);
  return th_tu_convert_type(tr, out, res);
}

th_status ltorch_logaddexp_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return logaddexp(tr, sym, args, false, out);
}

th_status ltorch_logaddexp2_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return logaddexp(tr, sym, args, true, out);
}

/* xlogy(x, y) = NaN where y is NaN, 0 where x is 0, else x * log(y) (PyTorch's kernel); xlog1py with
 * log1p(y). Integers become float32. */
static th_status xlogy(th_trace *tr, const th_symbol *sym, const th_arg *args, bool log1p_form, th_arg *out) {
  th_arg x[2] = {args[0], args[1]}, t, m;
  th_tu_type res;
  TH_TRY(prepare(tr, sym->qualname, 2, x, TH_TU_PROMO_INT_TO_FLOAT, &res));
  if (log1p_form)
    L1(log1p, x[1], &t);
  else
    L1(log, x[1], &t);
  L2(mul, x[0], t, &t);
  L2(eq, x[0], th_arg_float(0.0), &m);
  L3(where, m, th_arg_float(0.0), t, &t);
  L2(ne, x[1], x[1], &m);
  L3(where, m, x[1], t, out);
  return th_tu_convert_type(tr, out, res);
}

th_status ltorch_xlogy_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return xlogy(tr, sym, args, false, out);
}

th_status ltorch_xlog1py_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return xlogy(tr, sym, args, true, out);
}

/* clamp_max(a, max) = clamp(a, max=max). */
th_status ltorch_clamp_max_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call3(tr, TH_OP_ltorch_clamp, args[0], th_arg_none(), args[1], out);
}

/* addcmul(a, t1, t2, value) = a + value * t1 * t2; addcdiv(a, t1, t2, value) = a + value * t1 / t2, in
 * the computation dtype of the three (PyTorch's kernels, in this order). addcdiv refuses integer
 * tensors, as PyTorch. */
static th_status addc(th_trace *tr, const th_symbol *sym, const th_arg *args, bool div, th_arg *out) {
  const char *op = sym->qualname;
  if (div && !th_dtype_is_float(dtype_of(&args[1])) && !th_dtype_is_float(dtype_of(&args[2])))
    return th_error(TH_ERR_RUNTIME,
                    "%s: Integer division with addcdiv is no longer supported, and in a future release addcdiv will "
                    "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented "
                    "as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
                    "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the "
                    "latter implementation: (input + value * tensor1 / tensor2), for all dtypes.",
                    op);
  th_arg x[3] = {args[0], args[1], args[2]}, t;
  th_tu_type res;
  TH_TRY(prepare(tr, op, 3, x, TH_TU_PROMO_DEFAULT, &res));
  double v = 1;
  int64_t iv = 1;
  if (!th_meta_number_value(&args[3], &v, &iv))
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: a value known only at run time is not supported", op);
  th_arg value =
    th_dtype_is_float(dtype_of(&x[0])) ? th_arg_float(args[3].kind == TH_ARG_FLOAT ? v : (double)iv) : th_arg_int(iv);
  if (args[3].kind == TH_ARG_FLOAT && !th_dtype_is_float(dtype_of(&x[0])))
    return th_error(TH_ERR_RUNTIME, "%s: value cannot be converted to type %s without overflow", op,
                    th_tu_scalar_type_name(dtype_of(&x[0])));
  L2(mul, value, x[1], &t);
  if (div)
    L2(true_divide, t, x[2], &t);
  else
    L2(mul, t, x[2], &t);
  L2(add, x[0], t, out);
  return th_tu_convert_type(tr, out, res);
}

th_status ltorch_addcmul_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return addc(tr, sym, args, false, out);
}

th_status ltorch_addcdiv_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return addc(tr, sym, args, true, out);
}

/* isclose(a, b, rtol, atol, equal_nan), PyTorch's composition: a == b, or (equal_nan) both NaN, or
 * |a - b| finite and <= atol + |rtol * b| (bool tensors in the default float dtype there). */
th_status ltorch_isclose_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_dtype da = dtype_of(&args[0]), db = dtype_of(&args[1]);
  if (da != db)
    return th_error(TH_ERR_RUNTIME, "%s: %s did not match %s", op, th_tu_scalar_type_name(da),
                    th_tu_scalar_type_name(db));
  double rtol, atol;
  bool equal_nan;
  TH_TRY(th_tu_float(op, "rtol", &args[2], &rtol));
  TH_TRY(th_tu_float(op, "atol", &args[3], &atol));
  TH_TRY(th_tu_bool(op, "equal_nan", &args[4], &equal_nan));
  if (!(rtol >= 0))
    return th_error(TH_ERR_RUNTIME, "%s: rtol must be greater than or equal to zero, but got %g", op, rtol);
  if (!(atol >= 0))
    return th_error(TH_ERR_RUNTIME, "%s: atol must be greater than or equal to zero, but got %g", op, atol);
  th_arg a = args[0], b = args[1], close, t, u;
  L2(eq, a, b, &close);
  if (equal_nan && th_dtype_is_float(da)) {
    L2(ne, a, a, &t);
    L2(ne, b, b, &u);
    L2(logical_and, t, u, &t);
    L2(logical_or, close, t, &close);
  }
  if (rtol == 0 && atol == 0) {
    *out = close;
    return TH_OK;
  }
  if (da == TH_BOOL) {
    TH_TRY(th_tu_convert(tr, &a, TH_F32));
    TH_TRY(th_tu_convert(tr, &b, TH_F32));
  }
  th_arg allowed, actual;
  L2(mul, th_arg_float(rtol), b, &allowed);
  L1(abs, allowed, &allowed);
  L2(add, th_arg_float(atol), allowed, &allowed);
  L2(sub, a, b, &actual);
  L1(abs, actual, &actual);
  L1(isfinite, actual, &t);
  L2(le, actual, allowed, &u);
  L2(logical_and, t, u, &t);
  L2(logical_or, close, t, out);
  return TH_OK;
}

/* ---- unary with parameters ------------------------------------------------------------------------------ */

/* logit(x, eps) = log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps >= 0 is given (PyTorch's
 * kernel), in the computation dtype; integers become float32. */
th_status ltorch_logit_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_arg x = args[0], t, m;
  th_tu_type res;
  TH_TRY(prepare(tr, op, 1, &x, TH_TU_PROMO_INT_TO_FLOAT, &res));
  if (args[1].kind != TH_ARG_NONE) {
    double eps;
    TH_TRY(th_tu_float(op, "eps", &args[1], &eps));
    if (eps >= 0) {
      bool f64 = dtype_of(&x) == TH_F64; /* the kernel's bounds: eps and 1 - eps in its float type */
      double lo = f64 ? eps : (double)(float)eps, hi = f64 ? 1.0 - eps : (double)(1.0f - (float)eps);
      th_arg below; /* x < lo ? lo : (x > hi ? hi : x), both tests on x (lo > hi picks lo below it) */
      L2(lt, x, th_arg_float(lo), &below);
      L2(gt, x, th_arg_float(hi), &m);
      L3(where, m, th_arg_float(hi), x, &t);
      L3(where, below, th_arg_float(lo), t, &x);
    }
  }
  L2(rsub, x, th_arg_float(1.0), &t);
  L2(true_divide, x, t, &t);
  L1(log, t, out);
  return th_tu_convert_type(tr, out, res);
}

/* nan_to_num(x, nan, posinf, neginf): NaN, +inf and -inf replaced by nan (default 0), posinf and neginf
 * (default the dtype's largest and lowest finite values), each rounded to the dtype; other dtypes are
 * returned unchanged (a copy). */
th_status ltorch_nan_to_num_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_dtype dt = dtype_of(&args[0]);
  if (!th_dtype_is_float(dt)) return th_tu_call1(tr, TH_OP_ltorch_clone, args[0], out);
  double big = dt == TH_F64 ? DBL_MAX : dt == TH_F32 ? FLT_MAX : dt == TH_BF16 ? 3.38953138925153547590e38 : 65504.0;
  double rep[3] = {0.0, big, -big};
  for (int i = 0; i < 3; i++)
    if (args[1 + i].kind != TH_ARG_NONE) {
      TH_TRY(th_tu_float(op, i == 0 ? "nan" : i == 1 ? "posinf" : "neginf", &args[1 + i], &rep[i]));
      rep[i] = as_element(dt, rep[i]);
    }
  th_arg x = args[0], m;
  TH_TRY(th_tu_convert(tr, &x, th_tu_computation_dtype(dt)));
  L2(eq, x, th_arg_float(INFINITY), &m);
  L3(where, m, th_arg_float(rep[1]), x, &x);
  L2(eq, x, th_arg_float(-INFINITY), &m);
  L3(where, m, th_arg_float(rep[2]), x, &x);
  L2(ne, x, x, &m);
  L3(where, m, th_arg_float(rep[0]), x, out);
  return th_tu_convert(tr, out, dt);
}

/* ---- the unary composites of unary.def ----------------------------------------------------------------- */

/* x * c after integers and bool become float32, c a Python float (PyTorch multiplies by a wrapped number). */
static th_status scale(th_trace *tr, const th_arg *args, double c, th_arg *out) {
  th_arg x = args[0];
  if (!th_dtype_is_float(dtype_of(&x))) TH_TRY(th_tu_convert(tr, &x, TH_F32));
  L2(mul, x, th_arg_float(c), out);
  return TH_OK;
}

th_status ltorch_deg2rad_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return scale(tr, args, 0.017453292519943295769236907684886127134428718885417, out);
}

th_status ltorch_rad2deg_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return scale(tr, args, 57.295779513082320876798154814105170332405472466564, out);
}

/* angle of a real x: pi for x < 0, 0 otherwise, NaN for NaN; integers and bool give float32. */
th_status ltorch_angle_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_arg x = args[0], m, t;
  th_tu_type res;
  TH_TRY(prepare(tr, sym->qualname, 1, &x, TH_TU_PROMO_INT_TO_FLOAT, &res));
  L2(lt, x, th_arg_float(0.0), &m);
  L3(where, m, th_arg_float(3.14159265358979323846), th_arg_float(0.0), &t);
  L2(ne, x, x, &m);
  L3(where, m, x, t, out);
  return th_tu_convert_type(tr, out, res);
}

/* isinf(x) = |x| == inf for floating x; never for integers and bool (x != x is all false there). */
th_status ltorch_isinf_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  th_arg t;
  if (!th_dtype_is_float(dtype_of(&args[0]))) return th_tu_call2(tr, TH_OP_ltorch_ne, args[0], args[0], out);
  L1(abs, args[0], &t);
  return th_tu_call2(tr, TH_OP_ltorch_eq, t, th_arg_float(INFINITY), out);
}

static th_status is_inf_of_sign(th_trace *tr, const th_arg *args, double inf, th_arg *out) {
  if (!th_dtype_is_float(dtype_of(&args[0]))) return th_tu_call2(tr, TH_OP_ltorch_ne, args[0], args[0], out);
  return th_tu_call2(tr, TH_OP_ltorch_eq, args[0], th_arg_float(inf), out);
}

th_status ltorch_isposinf_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return is_inf_of_sign(tr, args, INFINITY, out);
}

th_status ltorch_isneginf_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return is_inf_of_sign(tr, args, -INFINITY, out);
}

/* isreal of a real tensor: true everywhere (x == x or x != x). */
th_status ltorch_isreal_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  th_arg a, b;
  L2(eq, args[0], args[0], &a);
  L2(ne, args[0], args[0], &b);
  return th_tu_call2(tr, TH_OP_ltorch_logical_or, a, b, out);
}

/* positive(x) is x itself; PyTorch refuses bool tensors. */
th_status ltorch_positive_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)tr;
  if (dtype_of(&args[0]) == TH_BOOL)
    return th_error(TH_ERR_RUNTIME,
                    "%s: The `+` operator, on a bool tensor is not supported. If you are trying to invert a mask, use "
                    "the `~` or `logical_not()` operator instead.",
                    sym->qualname);
  *out = args[0];
  return TH_OK;
}

/* square(x) = pow(x, 2) (torch.square; a bool tensor gives int64). */
th_status ltorch_square_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call2(tr, TH_OP_ltorch_pow, args[0], th_arg_int(2), out);
}

/* ---- special functions -------------------------------------------------------------------------------- */

/* trigamma, PyTorch's formula (its polygamma(1, x) kernel) op by op in x's dtype (float32 or float64):
 * below 0.5 the reflection -pi^2 / sin(pi x)^2 and x -> 1 - x (with the sign -1), then six terms
 * 1 / x^2 of the recurrence and the asymptotic series at x + 6. Its float64 result is accurate to about
 * 1e-10 (the series is short); zeta(2, x) would be more accurate, but it is PyTorch's value that is
 * matched, digamma's gradient included. */
static th_status trigamma(th_trace *tr, th_arg x0, th_arg *out) {
  const double pi = 3.14159265358979323846;
  bool f32 = dtype_of(&x0) != TH_F64;
#define K(v) th_arg_float(f32 ? (double)(float)(v) : (v))
  th_arg lo, x, t, r, sgn;
  L2(lt, x0, th_arg_float(0.5), &lo);
  L2(mul, x0, th_arg_float(pi), &t);
  L1(sin, t, &t);
  L2(mul, t, t, &t);
  L2(true_divide, th_arg_float(f32 ? (double)((float)pi * (float)pi) : pi * pi), t, &t);
  L1(neg, t, &t);
  L3(where, lo, t, th_arg_float(0.0), &r);
  L2(rsub, x0, th_arg_float(1.0), &t);
  L3(where, lo, t, x0, &x);
  for (int i = 0; i < 6; i++) {
    L2(mul, x, x, &t);
    L2(true_divide, th_arg_float(1.0), t, &t);
    L2(add, r, t, &r);
    L2(add, x, th_arg_float(1.0), &x);
  }
  th_arg ixx, s;
  L2(mul, x, x, &t);
  L2(true_divide, th_arg_float(1.0), t, &ixx);
  L2(mul, ixx, K(1. / 42), &s);
  L2(rsub, s, K(1. / 30), &s);
  L2(mul, ixx, s, &s);
  L2(rsub, s, K(1. / 6), &s);
  L2(mul, ixx, s, &s);
  L2(mul, x, th_arg_float(2.0), &t);
  L2(true_divide, th_arg_float(1.0), t, &t);
  L2(add, th_arg_float(1.0), t, &t);
  L2(add, t, s, &t);
  L2(true_divide, t, x, &t);
  L2(add, r, t, &r);
  L3(where, lo, th_arg_float(-1.0), th_arg_float(1.0), &sgn);
  L2(mul, sgn, r, out);
#undef K
  return TH_OK;
}

/* polygamma(n, x): digamma for n = 0, trigamma for n = 1, else (-1)^(n+1) n! zeta(n + 1, x) (PyTorch's
 * calc_polygamma), in the computation dtype; integers and bool become float32. */
static th_status polygamma(th_trace *tr, const char *op, const th_arg *n_arg, th_arg a, th_arg *out) {
  int64_t n;
  TH_TRY(th_meta_int(op, "n", n_arg, &n));
  if (n < 0) return th_error(TH_ERR_RUNTIME, "%s: polygamma(n, x) does not support negative n.", op);
  if (n == 0) return th_tu_call1(tr, TH_OP_ltorch_digamma, a, out);
  th_arg x = a, t;
  th_tu_type res;
  TH_TRY(prepare(tr, op, 1, &x, TH_TU_PROMO_INT_TO_FLOAT, &res));
  if (n == 1) {
    TH_TRY(trigamma(tr, x, out));
    return th_tu_convert_type(tr, out, res);
  }
  double fact = 1;
  for (int64_t k = 2; k <= n; k++) fact *= (double)k;
  L2(zeta, th_arg_float((double)(n + 1)), x, &t);
  L2(mul, t, th_arg_float(n % 2 ? fact : -fact), out);
  return th_tu_convert_type(tr, out, res);
}

th_status ltorch_polygamma_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return polygamma(tr, sym->qualname, &args[0], args[1], out);
}

/* x.polygamma(n) = torch.polygamma(n, x). */
th_status ltorch_tensor_polygamma_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return polygamma(tr, sym->qualname, &args[1], args[0], out);
}

/* mvlgamma(x, p) = sum_{j < p} lgamma(x - j / 2) + p (p - 1) / 4 log(pi), the terms added from the
 * smallest argument up as PyTorch's sum over arange(-(p - 1) / 2, 0.5, 0.5) + x, in the computation dtype.
 * PyTorch also checks that every element exceeds (p - 1) / 2, a check on the data this trace does not
 * make (lgamma gives inf or a finite value there). */
th_status ltorch_mvlgamma_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t p;
  TH_TRY(th_meta_int(op, "p", &args[1], &p));
  if (p < 1) return th_error(TH_ERR_RUNTIME, "%s: p has to be greater than or equal to 1", op);
  th_arg x = args[0], t, s = th_arg_none();
  th_tu_type res;
  TH_TRY(prepare(tr, op, 1, &x, TH_TU_PROMO_INT_TO_FLOAT, &res));
  for (int64_t j = p - 1; j >= 0; j--) {
    t = x;
    if (j) L2(sub, x, th_arg_float(0.5 * (double)j), &t);
    L1(lgamma, t, &t);
    if (s.kind == TH_ARG_NONE)
      s = t;
    else
      L2(add, s, t, &s);
  }
  L2(add, s, th_arg_float((double)p * (double)(p - 1) / 4 * 1.14472988584940017414), out); /* log(pi) */
  return th_tu_convert_type(tr, out, res);
}

/* ndtr(x) = (1 + erf(x * sqrt(1/2))) * 0.5, PyTorch's composition (each op rounds to the dtype). */
th_status ltorch_ndtr_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  th_arg t;
  L2(mul, args[0], th_arg_float(0.70710678118654752440), &t);
  L1(erf, t, &t);
  L2(add, th_arg_int(1), t, &t);
  L2(mul, t, th_arg_float(0.5), out);
  return TH_OK;
}

/* entr(x) = -x log(x) for x > 0, 0 at 0, -inf below, NaN for NaN (PyTorch's kernel), in the computation
 * dtype. The gradient is -(1 + log(x)) as PyTorch's (NaN below 0), but 0 at 0: the logarithm's argument
 * is 1 there. */
th_status ltorch_entr_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_arg x = args[0], pos, t, u, m, z;
  th_tu_type res;
  TH_TRY(prepare(tr, sym->qualname, 1, &x, TH_TU_PROMO_INT_TO_FLOAT, &res));
  L2(gt, x, th_arg_float(0.0), &pos);
  L2(eq, x, th_arg_float(0.0), &z);
  L3(where, z, th_arg_float(1.0), x, &t);
  L1(log, t, &t);
  L2(mul, x, t, &t);
  L1(neg, t, &t);
  L2(eq, x, th_arg_float(0.0), &m);
  L3(where, m, th_arg_float(0.0), th_arg_float(-INFINITY), &u);
  L3(where, pos, t, u, &t);
  L2(ne, x, x, &m);
  L3(where, m, x, t, out);
  return th_tu_convert_type(tr, out, res);
}

/* The orthogonal polynomials: th_tu_binary into their prims (integers and bool become float32), after
 * PyTorch's refusal of the reduced floating types (its CPU kernels have float32 and float64 only). */
static th_status polynomial(th_trace *tr, const th_symbol *sym, th_op_id prim, const th_arg *args, th_arg *out) {
  for (int i = 0; i < 2; i++) {
    th_dtype dt = dtype_of(&args[i]);
    if (th_meta_is_tensor(&args[i]) && (dt == TH_BF16 || dt == TH_F16 || th_dtype_is_fp8(dt)))
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: \"%s_cpu\" not implemented for '%s'", sym->qualname, sym->name,
                      th_tu_scalar_type_name(dt));
  }
  return th_tu_binary(tr, sym->qualname, prim, args[0], args[1], TH_TU_PROMO_INT_TO_FLOAT, out);
}
#define POLY(name)                                                                                                     \
  th_status ltorch_##name##_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {              \
    return polynomial(tr, sym, TH_OP_prims_##name, args, out);                                                         \
  }
POLY(chebyshev_polynomial_t)
POLY(chebyshev_polynomial_u)
POLY(chebyshev_polynomial_v)
POLY(chebyshev_polynomial_w)
POLY(hermite_polynomial_h)
POLY(hermite_polynomial_he)
POLY(laguerre_polynomial_l)
POLY(legendre_polynomial_p)
#undef POLY

/* nextafter(a, b) for float32 and float64 (one dtype, as PyTorch's kernel); the reduced floating types'
 * neighbours are not those of float32, so they are refused as unsupported. */
th_status ltorch_nextafter_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_dtype da = dtype_of(&args[0]), db = dtype_of(&args[1]);
  for (int i = 0; i < 2; i++) {
    th_dtype dt = i ? db : da;
    if (dt == TH_BF16 || dt == TH_F16)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: torch.nextafter of %s tensors is not supported", op,
                      th_tu_scalar_type_name(dt));
    if (!th_dtype_is_float(dt) || th_dtype_is_fp8(dt))
      return th_error(TH_ERR_RUNTIME, "%s: \"nextafter_cpu\" not implemented for '%s'", op, th_tu_scalar_type_name(dt));
  }
  return th_tu_binary(tr, op, TH_OP_prims_nextafter, args[0], args[1], TH_TU_PROMO_DEFAULT, out);
}
