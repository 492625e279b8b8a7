/* elementwise.c — torch-level elementwise ops (ltorch.add, ltorch.exp, ltorch.where, ...): PyTorch
 * semantics on top of the strict elementwise prims.
 *
 * Nearly every op is promote -> broadcast -> convert -> prim -> convert (th_tu_unary / th_tu_binary in
 * promote.c) with the promotion kind Thunder uses for it. Where a decomposition needs several prims
 * (add with alpha, div with a rounding mode, floor_divide, sigmoid, lerp), all of them run in the
 * computation dtype and the result is converted once at the end, so a bf16 op rounds once, as
 * PyTorch's kernels do (which compute in float and store once). */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"
#include "ops/vjp.h"

static th_dtype arg_dtype(const th_arg *a) { return th_meta_is_tensor(a) ? a->u.value->dtype : th_meta_number_type(a); }

static bool is_unsigned_dtype(th_dtype dt) { return dt == TH_BOOL || dt == TH_U8; }

/* ---- unary math --------------------------------------------------------------------------------- */

/* The one-line decompositions: every row of ops/unary.def whose decomp column is a promotion kind is
 * th_tu_unary into its prim with that kind (promote, convert, prim, convert back). */
#define TU_DECOMP_OWN(name)
#define TU_DECOMP_ONE(name, kind)                                                                                      \
  th_status ltorch_##name##_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {              \
    return th_tu_unary(tr, sym->qualname, TH_OP_prims_##name, args[0], TH_TU_PROMO_##kind, out);                       \
  }
#define TU_DECOMP_INT_TO_FLOAT(name) TU_DECOMP_ONE(name, INT_TO_FLOAT)
#define TU_DECOMP_DEFAULT(name) TU_DECOMP_ONE(name, DEFAULT)
#define TU_DECOMP_PRESERVE(name) TU_DECOMP_ONE(name, PRESERVE)
#define TU_DECOMP_ALWAYS_BOOL(name) TU_DECOMP_ONE(name, ALWAYS_BOOL)
#define TH_UNARY(name, kind, cexpr, f32, f64, i64, fold, flags, decomp, ...) TU_DECOMP_##decomp(name)
#include "ops/unary.def"
#undef TH_UNARY
#undef TU_DECOMP_OWN
#undef TU_DECOMP_ONE
#undef TU_DECOMP_INT_TO_FLOAT
#undef TU_DECOMP_DEFAULT
#undef TU_DECOMP_PRESERVE
#undef TU_DECOMP_ALWAYS_BOOL

/* ---- unary: sign, rounding, predicates ------------------------------------------------------------ */

/* abs is the identity on uint8, as Thunder's clang.abs; PyTorch has no abs kernel for bool tensors. */
th_status ltorch_abs_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (arg_dtype(&args[0]) == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: \"abs_cpu\" not implemented for 'Bool'", sym->qualname);
  if (is_unsigned_dtype(arg_dtype(&args[0]))) {
    *out = args[0];
    return TH_OK;
  }
  return th_tu_unary(tr, sym->qualname, TH_OP_prims_abs, args[0], TH_TU_PROMO_COMPLEX_TO_FLOAT, out);
}

th_status ltorch_neg_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (arg_dtype(&args[0]) == TH_BOOL)
    return th_error(TH_ERR_RUNTIME,
                    "%s: Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a "
                    "mask, use the `~` or `logical_not()` operator instead.",
                    sym->qualname);
  return th_tu_unary(tr, sym->qualname, TH_OP_prims_neg, args[0], TH_TU_PROMO_DEFAULT, out);
}

/* ceil/floor/round/trunc are the identity on integer dtypes; PyTorch has no kernel for bool tensors. */
static th_status rounding(th_trace *tr, const th_symbol *sym, th_op_id prim, const th_arg *a, th_tu_promo kind,
                          th_arg *out) {
  if (th_meta_is_tensor(a) && a->u.value->dtype == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: \"%s_vml_cpu\" not implemented for 'Bool'", sym->qualname, sym->name);
  if (th_meta_dtype_is_exact(arg_dtype(a))) {
    *out = *a;
    return TH_OK;
  }
  return th_tu_unary(tr, sym->qualname, prim, *a, kind, out);
}
th_status ltorch_ceil_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return rounding(tr, sym, TH_OP_prims_ceil, &args[0], TH_TU_PROMO_NUMBER_TO_INT, out);
}
th_status ltorch_floor_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return rounding(tr, sym, TH_OP_prims_floor, &args[0], TH_TU_PROMO_NUMBER_TO_INT, out);
}
/* round(a, decimals=d): for d != 0, PyTorch's round_decimals kernel in the computation dtype:
 * nearbyint(a * 10^d) / 10^d, or nearbyint(a / 10^-d) * 10^-d for d < 0 (floating dtypes only). */
th_status ltorch_round_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t decimals;
  TH_TRY(th_meta_int(op, "decimals", &args[1], &decimals));
  if (decimals == 0) return rounding(tr, sym, TH_OP_prims_round, &args[0], TH_TU_PROMO_DEFAULT, out);
  th_dtype dt = arg_dtype(&args[0]);
  if (!th_dtype_is_float(dt) || th_dtype_is_fp8(dt))
    return th_error(TH_ERR_RUNTIME, "%s: \"round_cpu\" not implemented for '%s'", op, th_dtype_name(dt));
  if (decimals > 308 || decimals < -308)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: decimals=%lld is out of the supported range", op, (long long)decimals);
  th_dtype cdt = th_tu_computation_dtype(dt);
  double scale = pow(10.0, (double)(decimals < 0 ? -decimals : decimals));
  if (cdt == TH_F32) scale = (double)(float)scale; /* the kernel's scalar_t constant */
  th_arg x = args[0];
  TH_TRY(th_tu_convert(tr, &x, cdt));
  TH_TRY(th_tu_call2(tr, decimals > 0 ? TH_OP_prims_mul : TH_OP_prims_div, x, th_arg_float(scale), &x));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_round, x, &x));
  TH_TRY(th_tu_call2(tr, decimals > 0 ? TH_OP_prims_div : TH_OP_prims_mul, x, th_arg_float(scale), &x));
  *out = x;
  return th_tu_convert(tr, out, dt);
}
th_status ltorch_trunc_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return rounding(tr, sym, TH_OP_prims_trunc, &args[0], TH_TU_PROMO_DEFAULT, out);
}

/* frac(a) = a - trunc(a) in the computation dtype (exact: the fraction of a float is representable in
 * its dtype); PyTorch has no frac kernel for bool or integer tensors. */
th_status ltorch_frac_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_dtype dt = arg_dtype(&args[0]);
  if (!th_dtype_is_float(dt) || th_dtype_is_fp8(dt))
    return th_error(TH_ERR_RUNTIME, "%s: \"frac_cpu\" not implemented for '%s'", sym->qualname, th_dtype_name(dt));
  th_arg a = args[0], t;
  TH_TRY(th_tu_convert(tr, &a, th_tu_computation_dtype(dt)));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_trunc, a, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, a, t, out));
  return th_tu_convert(tr, out, dt);
}

/* A bool tensor of a's shape and device filled with `value` (isfinite on exact dtypes, ...). */
static th_status full_bool_like(th_trace *tr, const th_arg *a, bool value, th_arg *out) {
  const th_value *v = a->u.value;
  return th_tu_full(tr, v->ndim, v->shape, th_arg_bool(value), v->device, TH_BOOL, out);
}

th_status ltorch_isfinite_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (th_meta_dtype_is_exact(arg_dtype(&args[0]))) return full_bool_like(tr, &args[0], true, out);
  return th_tu_unary(tr, sym->qualname, TH_OP_prims_isfinite, args[0], TH_TU_PROMO_ALWAYS_BOOL, out);
}

/* isnan(a) = a != a (Thunder's clang.isnan), exact for every dtype. */
th_status ltorch_isnan_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call2(tr, TH_OP_prims_ne, args[0], args[0], out);
}

th_status ltorch_signbit_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (is_unsigned_dtype(arg_dtype(&args[0]))) return full_bool_like(tr, &args[0], false, out);
  return th_tu_unary(tr, sym->qualname, TH_OP_prims_signbit, args[0], TH_TU_PROMO_ALWAYS_BOOL, out);
}

/* logical_not: bool -> bitwise_not; otherwise a == 0. */
th_status ltorch_logical_not_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (arg_dtype(&args[0]) == TH_BOOL) return th_tu_call1(tr, TH_OP_prims_bitwise_not, args[0], out);
  return th_tu_binary(tr, sym->qualname, TH_OP_prims_eq, args[0], th_arg_int(0), TH_TU_PROMO_ALWAYS_BOOL, out);
}

/* sigmoid(a) = 1 / (1 + exp(-a)) in the computation dtype (PyTorch's kernel and Thunder's clang). */
th_status ltorch_sigmoid_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  th_tu_type comp, res;
  th_arg a = args[0], t;
  TH_TRY(th_tu_promote(sym->qualname, 1, &a, TH_TU_PROMO_INT_TO_FLOAT, &comp, &res));
  TH_TRY(th_tu_convert_type(tr, &a, comp));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_neg, a, &t));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_exp, t, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, th_arg_float(1.0), t, &t));
  TH_TRY(th_tu_call1(tr, TH_OP_prims_reciprocal, t, out));
  return th_tu_convert_type(tr, out, res);
}

/* ---- binary: the one-line decompositions ----------------------------------------------------------
 * Every row of ops/binary.def whose decomp column is a promotion kind is th_tu_binary into its prim
 * with that kind (promote, broadcast, convert, prim, convert back). */
#define TB_DECOMP_OWN(name)
#define TB_DECOMP_ONE(name, kind)                                                                                      \
  th_status ltorch_##name##_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {              \
    return th_tu_binary(tr, sym->qualname, TH_OP_prims_##name, args[0], args[1], TH_TU_PROMO_##kind, out);             \
  }
#define TB_DECOMP_DEFAULT(name) TB_DECOMP_ONE(name, DEFAULT)
#define TB_DECOMP_INT_TO_FLOAT(name) TB_DECOMP_ONE(name, INT_TO_FLOAT)
#define TB_DECOMP_ALWAYS_BOOL(name) TB_DECOMP_ONE(name, ALWAYS_BOOL)
#define TH_BINARY(name, kind, cexpr, f32, f64, i64, fold, flags, decomp, ...) TB_DECOMP_##decomp(name)
#include "ops/binary.def"
#undef TH_BINARY
#undef TB_DECOMP_OWN
#undef TB_DECOMP_ONE
#undef TB_DECOMP_DEFAULT
#undef TB_DECOMP_INT_TO_FLOAT
#undef TB_DECOMP_ALWAYS_BOOL

/* ---- binary arithmetic -------------------------------------------------------------------------- */

/* a + alpha * b (sign = +1) or a - alpha * b (sign = -1), computed in the computation dtype so low
 * precision rounds once. alpha must not be a float for exact results (PyTorch's check). */
static th_status add_sub(th_trace *tr, const th_symbol *sym, const th_arg *args, th_op_id prim, th_arg *out) {
  const char *op = sym->qualname;
  th_arg ab[2] = {args[0], args[1]};
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 2, ab, TH_TU_PROMO_DEFAULT, &comp, &res));
  if (prim == TH_OP_prims_sub && arg_dtype(&ab[0]) == TH_BOOL && arg_dtype(&ab[1]) == TH_BOOL &&
      (th_meta_is_tensor(&ab[0]) || th_meta_is_tensor(&ab[1])))
    return th_error(TH_ERR_RUNTIME,
                    "%s: Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                    "`logical_xor()` operator instead.",
                    op);
  const th_arg *alpha = &args[2];
  if (alpha->kind != TH_ARG_NONE) {
    th_dtype rdt = th_tu_tensor_dtype(res);
    if (th_meta_dtype_is_exact(rdt) && th_meta_number_type(alpha) == TH_F64)
      return th_error(TH_ERR_TYPE,
                      "%s: For integral input tensors, argument alpha must not be a floating point number.", op);
    if (rdt == TH_BOOL && th_meta_number_type(alpha) != TH_BOOL)
      return th_error(TH_ERR_TYPE, "%s: Boolean alpha only supported for Boolean results.", op);
  }
  TH_TRY(th_tu_broadcast(tr, op, 2, ab));
  TH_TRY(th_tu_convert_type(tr, &ab[0], comp));
  TH_TRY(th_tu_convert_type(tr, &ab[1], comp));
  if (alpha->kind != TH_ARG_NONE) {
    th_arg al = *alpha;
    TH_TRY(th_tu_convert_type(tr, &al, comp));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, ab[1], al, &ab[1]));
  }
  TH_TRY(th_tu_call2(tr, prim, ab[0], ab[1], out));
  return th_tu_convert_type(tr, out, res);
}

th_status ltorch_add_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return add_sub(tr, sym, args, TH_OP_prims_add, out);
}
th_status ltorch_sub_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return add_sub(tr, sym, args, TH_OP_prims_sub, out);
}

th_status ltorch_true_divide_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return th_tu_binary(tr, sym->qualname, TH_OP_prims_div, args[0], args[1], TH_TU_PROMO_INT_TO_FLOAT, out);
}

/* Promotes (DEFAULT), broadcasts and converts a and b to the computation dtype. */
static th_status prepare_binary(th_trace *tr, const char *op, const th_arg *args, th_arg ab[2], th_tu_type *comp,
                                th_tu_type *res) {
  ab[0] = args[0];
  ab[1] = args[1];
  TH_TRY(th_tu_promote(op, 2, ab, TH_TU_PROMO_DEFAULT, comp, res));
  TH_TRY(th_tu_broadcast(tr, op, 2, ab));
  TH_TRY(th_tu_convert_type(tr, &ab[0], *comp));
  return th_tu_convert_type(tr, &ab[1], *comp);
}

/* Records prim(a, b) for the bool logic of floor_divide, folding what is known at trace time: both
 * operands constant (a number divisor), or a constant bool with a bool tensor (ne: x or ~x; and: x or
 * False). Nothing is recorded for a folded result, which is a BOOL constant or one of the operands. */
static bool const_of(const th_arg *x, double *v) {
  int64_t i;
  if (x->kind != TH_ARG_BOOL && x->kind != TH_ARG_INT && x->kind != TH_ARG_FLOAT) return false;
  th_meta_number_value(x, v, &i);
  if (x->kind != TH_ARG_FLOAT) *v = (double)i;
  return true;
}

static th_status logic2(th_trace *tr, th_op_id prim, th_arg a, th_arg b, th_arg *out) {
  double x, y;
  bool ca = const_of(&a, &x), cb = const_of(&b, &y);
  if (ca && cb) {
    bool r = prim == TH_OP_prims_lt   ? x < y
             : prim == TH_OP_prims_eq ? x == y
             : prim == TH_OP_prims_ne ? x != y
                                      : (x != 0) && (y != 0); /* bitwise_and of bools */
    *out = th_arg_bool(r);
    return TH_OK;
  }
  th_arg_kind const_kind = ca ? a.kind : cb ? b.kind : TH_ARG_NONE;
  if (const_kind == TH_ARG_BOOL && (prim == TH_OP_prims_ne || prim == TH_OP_prims_bitwise_and)) {
    bool c = (ca ? x : y) != 0;
    th_arg t = ca ? b : a;
    if (prim == TH_OP_prims_bitwise_and) {
      *out = c ? t : th_arg_bool(false);
      return TH_OK;
    }
    if (!c) {
      *out = t;
      return TH_OK;
    }
    return th_tu_call1(tr, TH_OP_prims_bitwise_not, t, out);
  }
  return th_tu_call2(tr, prim, a, b, out);
}

/* prims.where with a constant predicate folded. */
static th_status where3(th_trace *tr, th_arg p, th_arg a, th_arg b, th_arg *out) {
  if (p.kind == TH_ARG_BOOL) {
    *out = p.u.b ? a : b;
    return TH_OK;
  }
  return th_tu_call3(tr, TH_OP_prims_where, p, a, b, out);
}

/* Floor division, PyTorch's div_floor_floating / div_floor_integer, in the computation dtype:
 *   float:   b == 0 ? a / b : { mod = fmod(a, b); div = (a - mod) / b;
 *                               if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
 *                               div != 0 ? floor(div) + (div - floor(div) > 0.5) : copysign(0, a / b) }
 *   integer: a / b (truncating) - (signs differ && a % b != 0).
 * A number operand's tests are folded at trace time. */
static th_status floor_divide(th_trace *tr, const char *op, const th_arg *args, th_arg *out) {
  th_arg ab[2], t1, t2, t3;
  th_tu_type comp, res;
  TH_TRY(prepare_binary(tr, op, args, ab, &comp, &res));
  th_arg a = ab[0], b = ab[1];
  th_dtype cdt = th_tu_tensor_dtype(comp);
  if (cdt == TH_BOOL) return th_error(TH_ERR_RUNTIME, "%s: \"div_floor_cpu\" not implemented for 'Bool'", op);
  if (th_meta_dtype_is_exact(cdt)) {
    th_arg q, mod, sa, sb, differ, nz, off;
    TH_TRY(th_tu_call2(tr, TH_OP_prims_div, a, b, &q));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_fmod, a, b, &mod));
    TH_TRY(logic2(tr, TH_OP_prims_lt, a, th_arg_int(0), &sa));
    TH_TRY(logic2(tr, TH_OP_prims_lt, b, th_arg_int(0), &sb));
    TH_TRY(logic2(tr, TH_OP_prims_ne, sa, sb, &differ));
    TH_TRY(logic2(tr, TH_OP_prims_ne, mod, th_arg_int(0), &nz));
    TH_TRY(logic2(tr, TH_OP_prims_bitwise_and, differ, nz, &off));
    if (off.kind == TH_ARG_BOOL) {
      if (!off.u.b) {
        *out = q;
        return th_tu_convert_type(tr, out, res);
      }
      off = th_arg_int(1);
    }
    TH_TRY(th_tu_convert(tr, &off, cdt));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, q, off, out));
    return th_tu_convert_type(tr, out, res);
  }
  th_arg mod, div, q, fl, zero, mask;
  TH_TRY(th_tu_call2(tr, TH_OP_prims_fmod, a, b, &mod));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, a, mod, &t1));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, t1, b, &div));
  /* if (mod != 0 && (b < 0) != (mod < 0)) div -= 1 */
  TH_TRY(logic2(tr, TH_OP_prims_ne, mod, th_arg_float(0.0), &t1));
  TH_TRY(logic2(tr, TH_OP_prims_lt, b, th_arg_float(0.0), &t2));
  TH_TRY(logic2(tr, TH_OP_prims_lt, mod, th_arg_float(0.0), &t3));
  TH_TRY(logic2(tr, TH_OP_prims_ne, t2, t3, &t2));
  TH_TRY(logic2(tr, TH_OP_prims_bitwise_and, t1, t2, &mask));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, div, th_arg_float(1.0), &t1));
  TH_TRY(where3(tr, mask, t1, div, &div));
  /* floordiv = floor(div), rounded up when div - floor(div) > 0.5 */
  TH_TRY(th_tu_call1(tr, TH_OP_prims_floor, div, &fl));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, div, fl, &t1));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_gt, t1, th_arg_float(0.5), &mask));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, fl, th_arg_float(1.0), &t1));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, mask, t1, fl, &fl));
  /* div == 0: copysign(0, a / b) = (a / b) * 0 (a / b is finite there) */
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, a, b, &q));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, q, th_arg_float(0.0), &zero));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_ne, div, th_arg_float(0.0), &mask));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_where, mask, fl, zero, &fl));
  /* b == 0: true division (inf or nan) */
  TH_TRY(logic2(tr, TH_OP_prims_eq, b, th_arg_float(0.0), &mask));
  TH_TRY(where3(tr, mask, q, fl, out));
  return th_tu_convert_type(tr, out, res);
}

th_status ltorch_floor_divide_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return floor_divide(tr, sym->qualname, args, out);
}

/* div(a, b, rounding_mode): None = true division (ltorch.true_divide), 'trunc' = trunc(a / b) in the
 * computation dtype (C division for integers), 'floor' = ltorch.floor_divide. */
th_status ltorch_div_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const th_arg *mode = &args[2];
  if (mode->kind == TH_ARG_NONE) return th_tu_call2(tr, TH_OP_ltorch_true_divide, args[0], args[1], out);
  if (!strcmp(mode->u.s, "floor")) return th_tu_call2(tr, TH_OP_ltorch_floor_divide, args[0], args[1], out);
  if (strcmp(mode->u.s, "trunc"))
    return th_error(TH_ERR_VALUE,
                    "%s: div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'",
                    sym->qualname, mode->u.s);
  th_arg ab[2];
  th_tu_type comp, res;
  TH_TRY(prepare_binary(tr, sym->qualname, args, ab, &comp, &res));
  if (th_tu_tensor_dtype(comp) == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: \"div_trunc_cpu\" not implemented for 'Bool'", sym->qualname);
  TH_TRY(th_tu_call2(tr, TH_OP_prims_div, ab[0], ab[1], out));
  if (!th_meta_dtype_is_exact(th_tu_tensor_dtype(comp))) TH_TRY(th_tu_call1(tr, TH_OP_prims_trunc, *out, out));
  return th_tu_convert_type(tr, out, res);
}

/* pow(a, b). A tensor to the constant power 0.5 or -0.5 is ltorch.sqrt or ltorch.rsqrt, as PyTorch's
 * pow_tensor_scalar computes it: C's pow differs at -inf (pow(-inf, 0.5) = inf where sqrt gives NaN)
 * and at -0.0 (pow(-0.0, -0.5) = inf where rsqrt gives -inf). */
th_status ltorch_pow_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  if (th_meta_is_tensor(&args[0]) && args[1].kind == TH_ARG_FLOAT && (args[1].u.f == 0.5 || args[1].u.f == -0.5))
    return th_tu_call1(tr, args[1].u.f > 0 ? TH_OP_ltorch_sqrt : TH_OP_ltorch_rsqrt, args[0], out);
  return th_tu_binary(tr, sym->qualname, TH_OP_prims_pow, args[0], args[1], TH_TU_PROMO_BOOL_TO_LONG, out);
}

/* ---- logical ops ---------------------------------------------------------------------------------- */

/* A logical operand as bool: bool tensors as they are, other tensors x != 0, numbers as Python bools. */
static th_status to_logical(th_trace *tr, const char *op, th_arg *x) {
  if (th_meta_is_tensor(x)) {
    if (x->u.value->dtype == TH_BOOL) return TH_OK;
    return th_tu_binary(tr, op, TH_OP_prims_ne, *x, th_arg_int(0), TH_TU_PROMO_ALWAYS_BOOL, x);
  }
  return th_tu_convert(tr, x, TH_BOOL);
}

static th_status logical(th_trace *tr, const th_symbol *sym, const th_arg *args, th_op_id prim, th_arg *out) {
  th_arg a = args[0], b = args[1];
  TH_TRY(to_logical(tr, sym->qualname, &a));
  TH_TRY(to_logical(tr, sym->qualname, &b));
  return th_tu_binary(tr, sym->qualname, prim, a, b, TH_TU_PROMO_DEFAULT, out);
}
th_status ltorch_logical_and_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return logical(tr, sym, args, TH_OP_prims_bitwise_and, out);
}
th_status ltorch_logical_or_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return logical(tr, sym, args, TH_OP_prims_bitwise_or, out);
}
th_status ltorch_logical_xor_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return logical(tr, sym, args, TH_OP_prims_bitwise_xor, out);
}

/* ---- conditional ops ------------------------------------------------------------------------------ */

/* where(pred, a, b): a and b promoted with PRESERVE, then all three broadcast (Thunder's clang.where). */
th_status ltorch_where_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  if (args[0].u.value->dtype != TH_BOOL)
    return th_error(TH_ERR_RUNTIME,
                    "%s: where expected condition to be a boolean tensor, but got a tensor with dtype %s", op,
                    th_dtype_name(args[0].u.value->dtype));
  th_arg x[3] = {args[0], args[1], args[2]};
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 2, x + 1, TH_TU_PROMO_PRESERVE, &comp, &res));
  TH_TRY(th_tu_convert_type(tr, &x[1], comp));
  TH_TRY(th_tu_convert_type(tr, &x[2], comp));
  TH_TRY(th_tu_broadcast(tr, op, 3, x));
  return th_tu_call3(tr, TH_OP_prims_where, x[0], x[1], x[2], out);
}

/* clamp(a, min, max) = where(a != a, a, where(a > min, a, min)), then the same with max and <: NaN
 * in a propagates, NaN in min/max propagates, and min > max gives max, as torch.clamp. Bool tensors
 * clamp only against tensor bounds (PyTorch's clamp.Tensor); a number bound is PyTorch's error. */
th_status ltorch_clamp_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_arg *lo = &args[1], *hi = &args[2];
  if (lo->kind == TH_ARG_NONE && hi->kind == TH_ARG_NONE)
    return th_error(TH_ERR_VALUE, "%s: clamp: At least one of 'min' or 'max' must not be None", op);
  bool all_bool = arg_dtype(&args[0]) == TH_BOOL, number_bound = false;
  if (lo->kind != TH_ARG_NONE) all_bool &= arg_dtype(lo) == TH_BOOL, number_bound |= !th_meta_is_tensor(lo);
  if (hi->kind != TH_ARG_NONE) all_bool &= arg_dtype(hi) == TH_BOOL, number_bound |= !th_meta_is_tensor(hi);
  if (all_bool && number_bound) return th_error(TH_ERR_RUNTIME, "%s: clamp is not supported for boolean type", op);
  th_arg a = args[0];
  const struct {
    const th_arg *bound;
    th_op_id cmp;
  } steps[2] = {{lo, TH_OP_ltorch_gt}, {hi, TH_OP_ltorch_lt}};
  for (int i = 0; i < 2; i++) {
    if (steps[i].bound->kind == TH_ARG_NONE) continue;
    th_arg isnan, keep, inner;
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_ne, a, a, &isnan));
    TH_TRY(th_tu_call2(tr, steps[i].cmp, a, *steps[i].bound, &keep));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, keep, a, *steps[i].bound, &inner));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, isnan, a, inner, &a));
  }
  *out = a;
  return TH_OK;
}

/* masked_fill(a, mask, value): where(mask, value, a) with value converted to a's dtype first, so the
 * result keeps a's dtype as in PyTorch (value must be a number or a 0-dim tensor). */
th_status ltorch_masked_fill_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *a = args[0].u.value, *mask = args[1].u.value;
  if (mask->dtype != TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: masked_fill_ only supports boolean masks, but got mask with dtype %s", op,
                    th_dtype_name(mask->dtype));
  th_arg value = args[2];
  if (th_meta_is_tensor(&value) && value.u.value->ndim != 0)
    return th_error(TH_ERR_RUNTIME,
                    "%s: masked_fill_ only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).",
                    op, value.u.value->ndim);
  TH_TRY(th_tu_convert(tr, &value, a->dtype)); /* a float fill for an integer tensor truncates, as PyTorch */
  return th_tu_call3(tr, TH_OP_ltorch_where, args[1], value, args[0], out);
}

/* lerp(start, end, w) = |w| < 0.5 ? start + w * (end - start) : end - (end - start) * (1 - w),
 * PyTorch's formula, in the computation dtype. A number weight picks the branch at trace time. */
th_status ltorch_lerp_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  th_arg x[3] = {args[0], args[1], args[2]};
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 3, x, TH_TU_PROMO_DEFAULT, &comp, &res));
  TH_TRY(th_tu_broadcast(tr, op, 3, x));
  for (int i = 0; i < 3; i++) TH_TRY(th_tu_convert_type(tr, &x[i], comp));
  th_arg s = x[0], e = x[1], w = x[2], diff, lo, hi, t;
  TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, e, s, &diff));
  bool number_weight = !th_meta_is_tensor(&w);
  double wv = 0.0;
  if (number_weight) TH_TRY(th_tu_float(op, "weight", &w, &wv));
  if (!number_weight || fabs(wv) < 0.5) {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, w, diff, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_add, s, t, &lo));
  }
  if (!number_weight || !(fabs(wv) < 0.5)) {
    if (number_weight)
      t = th_arg_float(1.0 - wv);
    else
      TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, th_arg_float(1.0), w, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, diff, t, &t));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_sub, e, t, &hi));
  }
  if (number_weight) {
    *out = fabs(wv) < 0.5 ? lo : hi;
  } else {
    th_arg aw, mask;
    TH_TRY(th_tu_call1(tr, TH_OP_prims_abs, w, &aw));
    TH_TRY(th_tu_call2(tr, TH_OP_prims_lt, aw, th_arg_float(0.5), &mask));
    TH_TRY(th_tu_call3(tr, TH_OP_prims_where, mask, lo, hi, out));
  }
  return th_tu_convert_type(tr, out, res);
}

/* ---- vjp rules (ops/vjp.h) ----------------------------------------------------------------------------
 * Ops here otherwise get their gradient through their decomposition. These have direct rules, computed
 * in the computation dtype with one conversion of each gradient to its argument's dtype:
 *   sigmoid  gx = g * (1 - y) * y from the output y (PyTorch's sigmoid_backward): through
 *            1 / (1 + exp(-x)) the chain rule forms inf * 0 where exp(-x) overflows (x < -88 in float32);
 *   pow      PyTorch's pow_backward / pow_backward_self / pow_backward_exponent:
 *              a: g * (c * a^(c - 1)), 0 where c == 0, with a^(c - 1) for a number c - 1 of +-0.5 as
 *                 sqrt or rsqrt, as PyTorch's pow kernel computes it (sqrt(-0) = -0, rsqrt(-0) = -inf,
 *                 both NaN at -inf, where C's pow gives +0, +inf, +inf and 0);
 *              c: g * (y * log(a)), 0 where a == 0 and c >= 0;
 *            each summed back over the dims its argument was broadcast along. The decomposition records
 *            pow(a, +-0.5) as sqrt / rsqrt, whose rules differ from pow's at -0 and -inf (rsqrt's
 *            -0.5 * g * y^3 is +inf at -0, where pow's -0.5 * a^-1.5 is -inf);
 *   clamp    as PyTorch 2.14's autograd gives it. Number bounds: x gets g where min < x < max, strictly
 *            (0 at a NaN, where the decomposition's where chain passes g on, and 0 at the bounds).
 *            Tensor bounds: x gets g halved at each bound it equals, 0 below min or above max (g at a
 *            NaN); min gets g where x < min and g / 2 where x == min, with a max only where min < max;
 *            max gets g where x > max and g / 2 where x == max, with a min all of g where max < min;
 *            a bound alone follows maximum's / minimum's rule (g to both sides of a NaN). */

static th_status sigmoid_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *a = &b->args[0];
  if (!th_vjp_is_float_tensor(a)) return TH_OK;
  th_arg y = th_vjp_out(b), g = cts[0], t, r;
  th_dtype cd = th_tu_computation_dtype(y.u.value->dtype);
  TH_TRY(th_tu_convert(tr, &y, cd));
  TH_TRY(th_tu_convert(tr, &g, cd));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, th_arg_float(1.0), y, &t));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, t, &r));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, r, y, &r));
  TH_TRY(th_tu_convert(tr, &r, a->u.value->dtype));
  grads[0] = r;
  return TH_OK;
}

static th_status pow_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const char *op = b->sym->qualname;
  const th_arg *a0 = &b->args[0], *c0 = &b->args[1];
  bool da = th_vjp_is_float_tensor(a0), dc = th_vjp_is_float_tensor(c0);
  if (!da && !dc) return TH_OK;
  th_tu_type comp, res;
  TH_TRY(th_tu_promote(op, 2, b->args, TH_TU_PROMO_BOOL_TO_LONG, &comp, &res));
  th_dtype cd = th_tu_computation_dtype(th_tu_tensor_dtype(comp));
  th_arg a = *a0, c = *c0, y = th_vjp_out(b), g = cts[0], t, u, z;
  bool a_num = !th_meta_is_tensor(&a), c_num = !th_meta_is_tensor(&c);
  if (!a_num) TH_TRY(th_tu_convert(tr, &a, cd));
  if (!c_num) TH_TRY(th_tu_convert(tr, &c, cd));
  TH_TRY(th_tu_convert(tr, &y, cd));
  TH_TRY(th_tu_convert(tr, &g, cd));
  if (da) {
    double cv = 0;
    bool c_known = c_num && th_meta_number_value(&c, &cv, NULL); /* not a number proxy */
    if (c_known && cv == 0) {
      TH_TRY(th_vjp_zeros_like(tr, a0->u.value, &grads[0]));
    } else {
      if (c_known && (cv == 1.5 || cv == 0.5)) { /* a^0.5, a^-0.5 */
        TH_TRY(th_tu_call1(tr, cv == 1.5 ? TH_OP_ltorch_sqrt : TH_OP_ltorch_rsqrt, a, &t));
      } else if (c_known) {
        TH_TRY(th_tu_call2(tr, TH_OP_ltorch_pow, a, th_arg_float(cv - 1.0), &t));
      } else {
        TH_TRY(th_tu_call2(tr, TH_OP_ltorch_sub, c, th_arg_float(1.0), &t));
        TH_TRY(th_tu_call2(tr, TH_OP_ltorch_pow, a, t, &t));
      }
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, c, t, &t));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, t, &t));
      if (!c_num) {
        TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, c, th_arg_float(0.0), &z));
        TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), t, &t));
      }
      TH_TRY(th_vjp_sum_to(tr, t, a0, &t));
      TH_TRY(th_tu_convert(tr, &t, a0->u.value->dtype));
      grads[0] = t;
    }
  }
  if (dc) {
    double av = 1;
    if (a_num) {
      if (!th_meta_number_value(&a, &av, NULL))
        return th_error(TH_ERR_NOT_IMPLEMENTED,
                        "%s: the gradient of the exponent with a number base known only at run "
                        "time is not supported",
                        op);
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, y, th_arg_float(log(av)), &t));
    } else {
      TH_TRY(th_tu_call1(tr, TH_OP_ltorch_log, a, &t));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, y, t, &t));
    }
    if (!a_num || av == 0) { /* where(a == 0 & c >= 0, 0, y * log(a)) */
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_ge, c, th_arg_float(0.0), &z));
      if (!a_num) {
        TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, a, th_arg_float(0.0), &u));
        TH_TRY(th_tu_call2(tr, TH_OP_ltorch_logical_and, u, z, &z));
      }
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, z, th_arg_float(0.0), t, &t));
    }
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, t, &t));
    TH_TRY(th_vjp_sum_to(tr, t, c0, &t));
    TH_TRY(th_tu_convert(tr, &t, c0->u.value->dtype));
    grads[1] = t;
  }
  return TH_OK;
}

/* t summed back to the shape of `like` (an operand broadcast to t's shape), in like's dtype. */
static th_status grad_of(th_trace *tr, th_arg t, const th_arg *like, th_arg *out) {
  TH_TRY(th_vjp_sum_to(tr, t, like, out));
  return th_tu_convert(tr, out, like->u.value->dtype);
}

static th_status clamp_vjp(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads) {
  const th_arg *x = &b->args[0], *lo = &b->args[1], *hi = &b->args[2];
  bool has_lo = lo->kind != TH_ARG_NONE, has_hi = hi->kind != TH_ARG_NONE;
  bool tensor_bounds = (has_lo && th_meta_is_tensor(lo)) || (has_hi && th_meta_is_tensor(hi));
  th_arg g = cts[0], half, p, q, t;
  TH_TRY(th_tu_convert(tr, &g, th_tu_computation_dtype(g.u.value->dtype)));
  if (!tensor_bounds) { /* g where min < x < max, strictly */
    if (!th_vjp_is_float_tensor(x)) return TH_OK;
    if (has_lo) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_gt, *x, *lo, &p));
    if (has_hi) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_lt, *x, *hi, &q));
    if (has_lo && has_hi) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_logical_and, p, q, &p));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, has_lo ? p : q, g, th_arg_float(0.0), &t));
    return grad_of(tr, t, x, &grads[0]);
  }
  th_arg eq_lo, eq_hi, below, above, nan_x; /* x == min, x == max, x < min, x > max, x is NaN */
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, g, th_arg_float(0.5), &half));
  TH_TRY(th_tu_call2(tr, TH_OP_ltorch_ne, *x, *x, &nan_x));
  if (has_lo) {
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, *x, *lo, &eq_lo));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_lt, *x, *lo, &below));
  }
  if (has_hi) {
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_eq, *x, *hi, &eq_hi));
    TH_TRY(th_tu_call2(tr, TH_OP_ltorch_gt, *x, *hi, &above));
  }
  if (th_vjp_is_float_tensor(x)) { /* g, halved at each bound x ties, 0 below min or above max */
    t = g;
    if (has_lo) TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, eq_lo, half, t, &t));
    if (has_hi) {
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_mul, t, th_arg_float(0.5), &p));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, eq_hi, p, t, &t));
    }
    p = has_lo ? below : above;
    if (has_lo && has_hi) TH_TRY(th_tu_call2(tr, TH_OP_ltorch_logical_or, below, above, &p));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, p, th_arg_float(0.0), t, &t));
    TH_TRY(grad_of(tr, t, x, &grads[0]));
  }
  for (int k = 1; k <= 2; k++) { /* min (k = 1), max (k = 2) */
    const th_arg *bound = k == 1 ? lo : hi;
    if (!th_vjp_is_float_tensor(bound)) continue;
    bool other = k == 1 ? has_hi : has_lo;
    /* g / 2 at a tie, g where x is beyond the bound */
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, k == 1 ? below : above, g, th_arg_float(0.0), &t));
    TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, k == 1 ? eq_lo : eq_hi, half, t, &t));
    if (other && k == 1) { /* with a max: only where min < max */
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_lt, *lo, *hi, &p));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, p, t, th_arg_float(0.0), &t));
    } else if (other) { /* with a min: all of g where max < min */
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_lt, *hi, *lo, &p));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, p, g, t, &t));
    } else { /* alone, maximum's / minimum's rule: a NaN passes g on */
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_ne, *bound, *bound, &p));
      TH_TRY(th_tu_call2(tr, TH_OP_ltorch_logical_or, nan_x, p, &p));
      TH_TRY(th_tu_call3(tr, TH_OP_ltorch_where, p, g, t, &t));
    }
    TH_TRY(grad_of(tr, t, bound, &grads[k]));
  }
  return TH_OK;
}

const th_vjp_entry th_vjp_table_torch_elementwise[] = {
  {TH_OP_ltorch_sigmoid, TH_VJP_RULE, sigmoid_vjp},
  {TH_OP_ltorch_pow, TH_VJP_RULE, pow_vjp},
  {TH_OP_ltorch_clamp, TH_VJP_RULE, clamp_vjp},
};
const int th_vjp_table_torch_elementwise_n =
  (int)(sizeof th_vjp_table_torch_elementwise / sizeof th_vjp_table_torch_elementwise[0]);
