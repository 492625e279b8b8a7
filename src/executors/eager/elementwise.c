/* elementwise.c — reference kernels of the elementwise prims: unary, binary, comparisons, where and
 * convert_element_type, for every dtype PyTorch supports for each.
 *
 * Each op is a row in a table with its scalar functions per compute class (eager_internal.h): float32
 * for f16/bf16/f32 (so low-precision results are rounded once, as PyTorch computes them in float),
 * float64 for f64, int64 for bool and integers (stores keep the low bits, PyTorch's wrap-around). The
 * general row loop loads each operand with its own dtype through core/scalar.h; when every operand is
 * f32 (or f64) a typed row with the scalar function inlined runs instead, specialised for the
 * contiguous, tensor-with-scalar and scalar-with-tensor cases so the compiler vectorizes them.
 *
 * Semantics that are not plain C: integer div truncates (prims.div) and remainder takes the divisor's
 * sign (Python); an integer division by zero is an error, found by a scan of the divisor before any
 * output is written; integer pow is exact by squaring (negative exponents as ATen: 1, -1 or 0); round
 * is half-to-even; maximum/minimum propagate NaN; sign(NaN) is 0 as in PyTorch. A Python number joining
 * a tensor op is cast to the op's dtype first, as TensorIterator casts a wrapped scalar (so
 * i8 < 260 compares with 4, and f32 == 0.1 compares with 0.1f). */
#include <math.h>
#include <string.h>

#include "executors/eager/eager_internal.h"

/* ---- scalar functions --------------------------------------------------------------------------------- */

static inline float neg_f32(float x) { return -x; }
static inline double neg_f64(double x) { return -x; }
static inline float reciprocal_f32(float x) { return 1.0f / x; }
static inline double reciprocal_f64(double x) { return 1.0 / x; }
static inline float rsqrt_f32(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt_f64(double x) { return 1.0 / sqrt(x); }
static inline float sign_f32(float x) { return (float)((x > 0) - (x < 0)); }
static inline double sign_f64(double x) { return (double)((x > 0) - (x < 0)); }

static int64_t id_i64(int64_t x) { return x; }
static int64_t abs_i64(int64_t x) { return x < 0 ? (int64_t)(0 - (uint64_t)x) : x; }
static int64_t neg_i64(int64_t x) { return (int64_t)(0 - (uint64_t)x); }
static int64_t sign_i64(int64_t x) { return (x > 0) - (x < 0); }
static int64_t bitwise_not_i64(int64_t x) { return ~x; }
static int64_t logical_not_i64(int64_t x) { return x == 0; }

static inline float add_f32(float a, float b) { return a + b; }
static inline double add_f64(double a, double b) { return a + b; }
static inline float sub_f32(float a, float b) { return a - b; }
static inline double sub_f64(double a, double b) { return a - b; }
static inline float mul_f32(float a, float b) { return a * b; }
static inline double mul_f64(double a, double b) { return a * b; }
static inline float div_f32(float a, float b) { return a / b; }
static inline double div_f64(double a, double b) { return a / b; }
static inline float remainder_f32(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
static inline double remainder_f64(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
/* NaN wins; between equal values the second operand is returned (PyTorch's CPU kernel). */
static inline float maximum_f32(float a, float b) { return a != a ? a : (a > b ? a : b); }
static inline double maximum_f64(double a, double b) { return a != a ? a : (a > b ? a : b); }
static inline float minimum_f32(float a, float b) { return a != a ? a : (a < b ? a : b); }
static inline double minimum_f64(double a, double b) { return a != a ? a : (a < b ? a : b); }

static int64_t add_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t sub_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t mul_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
/* b != 0 is checked before the loop; INT64_MIN / -1 wraps. */
static int64_t div_i64(int64_t a, int64_t b) { return b == -1 ? neg_i64(a) : a / b; }
static int64_t fmod_i64(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }
static int64_t remainder_i64(int64_t a, int64_t b) {
  int64_t m = fmod_i64(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
static int64_t pow_i64(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  for (; b; b >>= 1) {
    if (b & 1) r *= x;
    x *= x;
  }
  return (int64_t)r;
}
static int64_t maximum_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t minimum_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t bitwise_and_i64(int64_t a, int64_t b) { return a & b; }
static int64_t bitwise_or_i64(int64_t a, int64_t b) { return a | b; }
static int64_t bitwise_xor_i64(int64_t a, int64_t b) { return a ^ b; }

/* libm's float functions by name, for the tables (some are macros or builtins). */
static float fabs_f(float x) { return fabsf(x); }
static float ceil_f(float x) { return ceilf(x); }
static float floor_f(float x) { return floorf(x); }
static float trunc_f(float x) { return truncf(x); }
static float round_f(float x) { return nearbyintf(x); }
static float sqrt_f(float x) { return sqrtf(x); }
static double sqrt_d(double x) { return sqrt(x); }
static double fabs_d(double x) { return fabs(x); }
static double ceil_d(double x) { return ceil(x); }
static double floor_d(double x) { return floor(x); }
static double trunc_d(double x) { return trunc(x); }
static double round_d(double x) { return nearbyint(x); }
static float pow_f(float a, float b) { return powf(a, b); }
static double pow_d(double a, double b) { return pow(a, b); }
static float fmod_f(float a, float b) { return fmodf(a, b); }
static double fmod_d(double a, double b) { return fmod(a, b); }
static float atan2_f(float a, float b) { return atan2f(a, b); }
static double atan2_d(double a, double b) { return atan2(a, b); }

/* ---- typed rows (all operands of one native dtype) --------------------------------------------------
 * p[0] is the output, p[1] (and p[2]) the inputs. The contiguous cases run on restrict pointers so the
 * loop vectorizes; anything else goes element by element through memcpy loads. */
#define EG_UNARY_ROW(name, T, fn, ld, st)                                                              \
  static void name(void *ctx, char *const *p, const int64_t *bs, int64_t n) {                         \
    (void)ctx;                                                                                         \
    const int64_t sz = (int64_t)sizeof(T);                                                             \
    if (bs[0] == sz && bs[1] == sz && th_eg_aligned(p[0], sizeof(T)) &&                                \
        th_eg_aligned(p[1], sizeof(T))) {                                                              \
      T *restrict o = (T *)(void *)p[0];                                                               \
      const T *restrict a = (const T *)(const void *)p[1];                                             \
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = fn(a[i]);                             \
      return;                                                                                          \
    }                                                                                                  \
    for (int64_t i = 0; i < n; i++) st(p[0] + i * bs[0], fn(ld(p[1] + i * bs[1])));                    \
  }

#define EG_BINARY_ROW(name, T, R, fn, ld)                                                          \
  static void name(void *ctx, char *const *p, const int64_t *bs, int64_t n) {                         \
    (void)ctx;                                                                                         \
    const int64_t sz = (int64_t)sizeof(T);                                                             \
    if (bs[0] == (int64_t)sizeof(R) && th_eg_aligned(p[0], sizeof(R)) &&                               \
        th_eg_aligned(p[1], sizeof(T)) && th_eg_aligned(p[2], sizeof(T))) {                            \
      R *restrict o = (R *)(void *)p[0];                                                               \
      const T *restrict a = (const T *)(const void *)p[1];                                             \
      const T *restrict b = (const T *)(const void *)p[2];                                             \
      if (bs[1] == sz && bs[2] == sz) {                                                                \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = (R)fn(a[i], b[i]);                                      \
        return;                                                                                        \
      }                                                                                                \
      if (bs[1] == sz && bs[2] == 0) {                                                                 \
        const T y = b[0];                                                                              \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = (R)fn(a[i], y);                                         \
        return;                                                                                        \
      }                                                                                                \
      if (bs[1] == 0 && bs[2] == sz) {                                                                 \
        const T x = a[0];                                                                              \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = (R)fn(x, b[i]);                                         \
        return;                                                                                        \
      }                                                                                                \
    }                                                                                                  \
    for (int64_t i = 0; i < n; i++) {                                                                  \
      R r = (R)fn(ld(p[1] + i * bs[1]), ld(p[2] + i * bs[2]));                                         \
      memcpy(p[0] + i * bs[0], &r, sizeof r);                                                          \
    }                                                                                                  \
  }

/* unary rows, f32 and f64 */
#define EG_UNARY_ROWS(op, f32fn, f64fn)                                                                \
  EG_UNARY_ROW(op##_row_f32, float, f32fn, th_sc_ld_f32, th_sc_st_f32)                                 \
  EG_UNARY_ROW(op##_row_f64, double, f64fn, th_sc_ld_f64, th_sc_st_f64)

EG_UNARY_ROWS(abs, fabsf, fabs)
EG_UNARY_ROWS(neg, neg_f32, neg_f64)
EG_UNARY_ROWS(ceil, ceilf, ceil)
EG_UNARY_ROWS(floor, floorf, floor)
EG_UNARY_ROWS(trunc, truncf, trunc)
EG_UNARY_ROWS(round, nearbyintf, nearbyint)
EG_UNARY_ROWS(sign, sign_f32, sign_f64)
EG_UNARY_ROWS(sqrt, sqrtf, sqrt)
EG_UNARY_ROWS(rsqrt, rsqrt_f32, rsqrt_f64)
EG_UNARY_ROWS(reciprocal, reciprocal_f32, reciprocal_f64)
EG_UNARY_ROWS(exp, expf, exp)
EG_UNARY_ROWS(log, logf, log)
EG_UNARY_ROWS(tanh, tanhf, tanh)
EG_UNARY_ROWS(sin, sinf, sin)
EG_UNARY_ROWS(cos, cosf, cos)
EG_UNARY_ROWS(erf, erff, erf)

/* binary rows, f32 and f64 */
#define EG_BINARY_ROWS(op, f32fn, f64fn)                                                               \
  EG_BINARY_ROW(op##_row_f32, float, float, f32fn, th_sc_ld_f32)                         \
  EG_BINARY_ROW(op##_row_f64, double, double, f64fn, th_sc_ld_f64)

EG_BINARY_ROWS(add, add_f32, add_f64)
EG_BINARY_ROWS(sub, sub_f32, sub_f64)
EG_BINARY_ROWS(mul, mul_f32, mul_f64)
EG_BINARY_ROWS(div, div_f32, div_f64)
EG_BINARY_ROWS(maximum, maximum_f32, maximum_f64)
EG_BINARY_ROWS(minimum, minimum_f32, minimum_f64)
EG_BINARY_ROWS(pow, powf, pow)

/* ---- unary ---------------------------------------------------------------------------------------------- */

typedef struct unary_def {
  th_op_id op;
  float (*f32)(float);
  double (*f64)(double);
  int64_t (*i64)(int64_t);  /* bool and integers; NULL: computed in float64 (float-only ops) */
  bool (*pred)(double);     /* isfinite, signbit: the bool result (all dtypes, read as float64) */
  th_eg_row_fn row_f32, row_f64;
  bool serial;              /* the libm function is not thread-safe (lgamma sets signgam) */
} unary_def;

static bool isfinite_pred(double x) { return isfinite(x); }
static bool signbit_pred(double x) { return signbit(x) != 0; }

static const unary_def unary_defs[] = {
    {TH_OP_prims_abs, fabs_f, fabs_d, abs_i64, NULL, abs_row_f32, abs_row_f64, false},
    {TH_OP_prims_acos, acosf, acos, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_acosh, acoshf, acosh, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_asin, asinf, asin, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_asinh, asinhf, asinh, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_atan, atanf, atan, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_atanh, atanhf, atanh, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_bitwise_not, NULL, NULL, bitwise_not_i64, NULL, NULL, NULL, false},
    {TH_OP_prims_ceil, ceil_f, ceil_d, id_i64, NULL, ceil_row_f32, ceil_row_f64, false},
    {TH_OP_prims_cos, cosf, cos, NULL, NULL, cos_row_f32, cos_row_f64, false},
    {TH_OP_prims_cosh, coshf, cosh, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_erf, erff, erf, NULL, NULL, erf_row_f32, erf_row_f64, false},
    {TH_OP_prims_erfc, erfcf, erfc, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_exp, expf, exp, NULL, NULL, exp_row_f32, exp_row_f64, false},
    {TH_OP_prims_exp2, exp2f, exp2, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_expm1, expm1f, expm1, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_floor, floor_f, floor_d, id_i64, NULL, floor_row_f32, floor_row_f64, false},
    {TH_OP_prims_isfinite, NULL, NULL, NULL, isfinite_pred, NULL, NULL, false},
    {TH_OP_prims_lgamma, lgammaf, lgamma, NULL, NULL, NULL, NULL, true},
    {TH_OP_prims_log, logf, log, NULL, NULL, log_row_f32, log_row_f64, false},
    {TH_OP_prims_log10, log10f, log10, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_log1p, log1pf, log1p, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_log2, log2f, log2, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_neg, neg_f32, neg_f64, neg_i64, NULL, neg_row_f32, neg_row_f64, false},
    {TH_OP_prims_reciprocal, reciprocal_f32, reciprocal_f64, NULL, NULL, reciprocal_row_f32,
     reciprocal_row_f64, false},
    {TH_OP_prims_round, round_f, round_d, id_i64, NULL, round_row_f32, round_row_f64, false},
    {TH_OP_prims_rsqrt, rsqrt_f32, rsqrt_f64, NULL, NULL, rsqrt_row_f32, rsqrt_row_f64, false},
    {TH_OP_prims_sign, sign_f32, sign_f64, sign_i64, NULL, sign_row_f32, sign_row_f64, false},
    {TH_OP_prims_signbit, NULL, NULL, NULL, signbit_pred, NULL, NULL, false},
    {TH_OP_prims_sin, sinf, sin, NULL, NULL, sin_row_f32, sin_row_f64, false},
    {TH_OP_prims_sinh, sinhf, sinh, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_sqrt, sqrt_f, sqrt_d, NULL, NULL, sqrt_row_f32, sqrt_row_f64, false},
    {TH_OP_prims_tan, tanf, tan, NULL, NULL, NULL, NULL, false},
    {TH_OP_prims_tanh, tanhf, tanh, NULL, NULL, tanh_row_f32, tanh_row_f64, false},
    {TH_OP_prims_trunc, trunc_f, trunc_d, id_i64, NULL, trunc_row_f32, trunc_row_f64, false},
};

typedef struct unary_ctx {
  const unary_def *d;
  int64_t (*i64)(int64_t); /* the integer function in use (logical not for bool bitwise_not) */
  th_eg_class cls;         /* of the input */
  th_dtype out, in;
} unary_ctx;

/* The general unary row: any input and output dtype. */
static void unary_row(void *vctx, char *const *p, const int64_t *bs, int64_t n) {
  const unary_ctx *c = vctx;
  const unary_def *d = c->d;
  char *o = p[0];
  const char *a = p[1];
  if (d->pred) {
    /* bool result, exact for every input dtype via float64 */
    for (int64_t i = 0; i < n; i++) th_sc_st_u8(o + i * bs[0], d->pred(th_load_f64(a + i * bs[1], c->in)));
    return;
  }
  switch (c->cls) {
  case TH_EG_CF32:
    for (int64_t i = 0; i < n; i++) th_store_f32(o + i * bs[0], c->out, d->f32(th_load_f32(a + i * bs[1], c->in)));
    break;
  case TH_EG_CF64:
    for (int64_t i = 0; i < n; i++) th_store_f64(o + i * bs[0], c->out, d->f64(th_load_f64(a + i * bs[1], c->in)));
    break;
  case TH_EG_CI64:
    if (c->i64)
      for (int64_t i = 0; i < n; i++) th_store_i64(o + i * bs[0], c->out, c->i64(th_load_i64(a + i * bs[1], c->in)));
    else
      for (int64_t i = 0; i < n; i++) th_store_f64(o + i * bs[0], c->out, d->f64(th_load_f64(a + i * bs[1], c->in)));
    break;
  }
}

/* Runs a loop of out (contiguous, freshly allocated) and nin bound inputs. */
static void run_loop(th_tensor *out, th_eg_operand *in, int nin, th_eg_row_fn row, void *ctx, bool parallel) {
  int64_t bstr[TH_EG_MAX_OPS][TH_MAX_DIMS];
  char *base[TH_EG_MAX_OPS];
  th_eg_tensor_bstrides(out, bstr[0]);
  base[0] = th_eg_data(out);
  for (int k = 0; k < nin; k++) {
    memcpy(bstr[k + 1], in[k].bs, sizeof in[k].bs);
    base[k + 1] = in[k].base;
  }
  th_eg_iter it;
  th_eg_iter_init(&it, nin + 1, out->ndim, out->shape, base, (const int64_t(*)[TH_MAX_DIMS])bstr);
  th_eg_iter_run(&it, row, ctx, parallel);
}

th_status th_eg_unary_ref(th_rt_env *env, const th_bsym *b) {
  const unary_def *d = NULL;
  for (size_t k = 0; k < sizeof unary_defs / sizeof unary_defs[0]; k++)
    if (unary_defs[k].op == b->sym->id) d = &unary_defs[k];
  if (!d) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: not a unary prim", th_eg_name(b));
  /* Step 1: the output (like the input, bool for isfinite/signbit) and the input over its shape. */
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_eg_operand a;
  TH_TRY(th_eg_bind(env, b, 0, out->ndim, out->shape, TH_DTYPE_COUNT, &a));
  /* Step 2: the compute class of the input and the per-dtype rules PyTorch enforces. */
  unary_ctx c = {d, d->i64, th_eg_class_of(a.dtype), out->dtype, a.dtype};
  if (b->sym->id == TH_OP_prims_neg && a.dtype == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: Negation, the `-` operator, on a bool tensor is not supported. "
                    "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.",
                    th_eg_name(b));
  if (b->sym->id == TH_OP_prims_bitwise_not && a.dtype == TH_BOOL) c.i64 = logical_not_i64;
  if (!d->pred && c.cls != TH_EG_CI64 && !d->f32)
    return th_error(TH_ERR_RUNTIME, "%s: not implemented for '%s'", th_eg_name(b), th_dtype_name(a.dtype));
  /* Step 3: the typed row when input and output are both f32 (or f64), else the general one. */
  th_eg_row_fn row = unary_row;
  if (a.dtype == TH_F32 && out->dtype == TH_F32 && d->row_f32) row = d->row_f32;
  if (a.dtype == TH_F64 && out->dtype == TH_F64 && d->row_f64) row = d->row_f64;
  run_loop(out, &a, 1, row, &c, !d->serial);
  return TH_OK;
}

/* ---- binary ---------------------------------------------------------------------------------------------- */

typedef struct binary_def {
  th_op_id op;
  float (*f32)(float, float);     /* NULL: not defined for floats (bitwise ops) */
  double (*f64)(double, double);
  int64_t (*i64)(int64_t, int64_t); /* NULL: computed in float64 (atan2) */
  th_eg_row_fn row_f32, row_f64;
  bool int_div;                   /* an integer zero divisor is an error */
} binary_def;

static const binary_def binary_defs[] = {
    {TH_OP_prims_add, add_f32, add_f64, add_i64, add_row_f32, add_row_f64, false},
    {TH_OP_prims_sub, sub_f32, sub_f64, sub_i64, sub_row_f32, sub_row_f64, false},
    {TH_OP_prims_mul, mul_f32, mul_f64, mul_i64, mul_row_f32, mul_row_f64, false},
    {TH_OP_prims_div, div_f32, div_f64, div_i64, div_row_f32, div_row_f64, true},
    {TH_OP_prims_pow, pow_f, pow_d, pow_i64, pow_row_f32, pow_row_f64, false},
    {TH_OP_prims_fmod, fmod_f, fmod_d, fmod_i64, NULL, NULL, true},
    {TH_OP_prims_remainder, remainder_f32, remainder_f64, remainder_i64, NULL, NULL, true},
    {TH_OP_prims_atan2, atan2_f, atan2_d, NULL, NULL, NULL, false},
    {TH_OP_prims_maximum, maximum_f32, maximum_f64, maximum_i64, maximum_row_f32, maximum_row_f64, false},
    {TH_OP_prims_minimum, minimum_f32, minimum_f64, minimum_i64, minimum_row_f32, minimum_row_f64, false},
    {TH_OP_prims_bitwise_and, NULL, NULL, bitwise_and_i64, NULL, NULL, false},
    {TH_OP_prims_bitwise_or, NULL, NULL, bitwise_or_i64, NULL, NULL, false},
    {TH_OP_prims_bitwise_xor, NULL, NULL, bitwise_xor_i64, NULL, NULL, false},
};

typedef struct binary_ctx {
  const binary_def *d;
  th_eg_class cls; /* of the output */
  th_dtype out, a, b;
} binary_ctx;

/* The general binary row: operands of any dtype, computed in the output's class. */
static void binary_row(void *vctx, char *const *p, const int64_t *bs, int64_t n) {
  const binary_ctx *c = vctx;
  const binary_def *d = c->d;
  char *o = p[0];
  const char *a = p[1], *b = p[2];
  switch (c->cls) {
  case TH_EG_CF32:
    for (int64_t i = 0; i < n; i++)
      th_store_f32(o + i * bs[0], c->out, d->f32(th_load_f32(a + i * bs[1], c->a), th_load_f32(b + i * bs[2], c->b)));
    break;
  case TH_EG_CF64:
    for (int64_t i = 0; i < n; i++)
      th_store_f64(o + i * bs[0], c->out, d->f64(th_load_f64(a + i * bs[1], c->a), th_load_f64(b + i * bs[2], c->b)));
    break;
  case TH_EG_CI64:
    if (d->i64)
      for (int64_t i = 0; i < n; i++)
        th_store_i64(o + i * bs[0], c->out, d->i64(th_load_i64(a + i * bs[1], c->a), th_load_i64(b + i * bs[2], c->b)));
    else
      for (int64_t i = 0; i < n; i++)
        th_store_f64(o + i * bs[0], c->out, d->f64(th_load_f64(a + i * bs[1], c->a), th_load_f64(b + i * bs[2], c->b)));
    break;
  }
}

typedef struct zero_ctx {
  th_dtype dt;
  bool found;
} zero_ctx;

static void zero_row(void *vctx, char *const *p, const int64_t *bs, int64_t n) {
  zero_ctx *c = vctx;
  for (int64_t i = 0; i < n && !c->found; i++)
    if (th_load_i64(p[0] + i * bs[0], c->dt) == 0) c->found = true;
}

/* True if any element of operand o (over the loop shape) is zero. */
static bool any_zero(const th_eg_operand *o, int ndim, const int64_t *shape) {
  th_eg_iter it;
  char *base[1] = {o->base};
  th_eg_iter_init(&it, 1, ndim, shape, base, (const int64_t(*)[TH_MAX_DIMS])o->bs);
  zero_ctx c = {o->dtype, false};
  th_eg_iter_run(&it, zero_row, &c, false);
  return c.found;
}

th_status th_eg_binary_ref(th_rt_env *env, const th_bsym *b) {
  const binary_def *d = NULL;
  for (size_t k = 0; k < sizeof binary_defs / sizeof binary_defs[0]; k++)
    if (binary_defs[k].op == b->sym->id) d = &binary_defs[k];
  if (!d) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: not a binary prim", th_eg_name(b));
  /* Step 1: the output; numbers are cast to its dtype (TensorIterator's wrapped-scalar cast). */
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_dtype dt = out->dtype;
  th_eg_operand ops[2];
  TH_TRY(th_eg_bind(env, b, 0, out->ndim, out->shape, dt, &ops[0]));
  TH_TRY(th_eg_bind(env, b, 1, out->ndim, out->shape, dt, &ops[1]));
  /* Step 2: what PyTorch refuses for this dtype. */
  binary_ctx c = {d, th_eg_class_of(dt), dt, ops[0].dtype, ops[1].dtype};
  if (c.cls != TH_EG_CI64 && !d->f32)
    return th_error(TH_ERR_RUNTIME, "%s: not implemented for '%s'", th_eg_name(b), th_dtype_name(dt));
  if (b->sym->id == TH_OP_prims_sub && dt == TH_BOOL)
    return th_error(TH_ERR_RUNTIME, "%s: Subtraction, the `-` operator, with two bool tensors is not "
                    "supported. Use the `^` or `logical_xor()` operator instead.", th_eg_name(b));
  /* Step 3: an integer division by zero fails before anything is computed. */
  if (d->int_div && c.cls == TH_EG_CI64 && any_zero(&ops[1], out->ndim, out->shape))
    return th_error(TH_ERR_RUNTIME, "%s: ZeroDivisionError: integer division by zero", th_eg_name(b));
  /* Step 4: the typed row when everything is f32 (or f64), else the general one. */
  th_eg_row_fn row = binary_row;
  if (dt == TH_F32 && c.a == TH_F32 && c.b == TH_F32 && d->row_f32) row = d->row_f32;
  if (dt == TH_F64 && c.a == TH_F64 && c.b == TH_F64 && d->row_f64) row = d->row_f64;
  run_loop(out, ops, 2, row, &c, true);
  return TH_OK;
}

/* ---- comparisons ------------------------------------------------------------------------------------- */

typedef enum cmp_kind { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE } cmp_kind;

static inline bool eq_f32(float a, float b) { return a == b; }
static inline bool ne_f32(float a, float b) { return a != b; }
static inline bool lt_f32(float a, float b) { return a < b; }
static inline bool le_f32(float a, float b) { return a <= b; }
static inline bool gt_f32(float a, float b) { return a > b; }
static inline bool ge_f32(float a, float b) { return a >= b; }

EG_BINARY_ROW(eq_row_f32, float, uint8_t, eq_f32, th_sc_ld_f32)
EG_BINARY_ROW(ne_row_f32, float, uint8_t, ne_f32, th_sc_ld_f32)
EG_BINARY_ROW(lt_row_f32, float, uint8_t, lt_f32, th_sc_ld_f32)
EG_BINARY_ROW(le_row_f32, float, uint8_t, le_f32, th_sc_ld_f32)
EG_BINARY_ROW(gt_row_f32, float, uint8_t, gt_f32, th_sc_ld_f32)
EG_BINARY_ROW(ge_row_f32, float, uint8_t, ge_f32, th_sc_ld_f32)

static bool cmp_f64(cmp_kind k, double a, double b) {
  switch (k) {
  case CMP_EQ: return a == b;
  case CMP_NE: return a != b;
  case CMP_LT: return a < b;
  case CMP_LE: return a <= b;
  case CMP_GT: return a > b;
  default: return a >= b;
  }
}

static bool cmp_i64(cmp_kind k, int64_t a, int64_t b) {
  switch (k) {
  case CMP_EQ: return a == b;
  case CMP_NE: return a != b;
  case CMP_LT: return a < b;
  case CMP_LE: return a <= b;
  case CMP_GT: return a > b;
  default: return a >= b;
  }
}

typedef struct cmp_ctx {
  cmp_kind k;
  bool exact; /* both operands bool/integer: compare as int64, else as float64 (exact for all floats) */
  th_dtype a, b;
} cmp_ctx;

static void cmp_row(void *vctx, char *const *p, const int64_t *bs, int64_t n) {
  const cmp_ctx *c = vctx;
  if (c->exact)
    for (int64_t i = 0; i < n; i++)
      th_sc_st_u8(p[0] + i * bs[0], cmp_i64(c->k, th_load_i64(p[1] + i * bs[1], c->a), th_load_i64(p[2] + i * bs[2], c->b)));
  else
    for (int64_t i = 0; i < n; i++)
      th_sc_st_u8(p[0] + i * bs[0], cmp_f64(c->k, th_load_f64(p[1] + i * bs[1], c->a), th_load_f64(p[2] + i * bs[2], c->b)));
}

th_status th_eg_compare_ref(th_rt_env *env, const th_bsym *b) {
  static const struct {
    th_op_id op;
    cmp_kind k;
    th_eg_row_fn row_f32;
  } defs[] = {{TH_OP_prims_eq, CMP_EQ, eq_row_f32}, {TH_OP_prims_ne, CMP_NE, ne_row_f32},
              {TH_OP_prims_lt, CMP_LT, lt_row_f32}, {TH_OP_prims_le, CMP_LE, le_row_f32},
              {TH_OP_prims_gt, CMP_GT, gt_row_f32}, {TH_OP_prims_ge, CMP_GE, ge_row_f32}};
  int di = -1;
  for (int k = 0; k < 6; k++)
    if (defs[k].op == b->sym->id) di = k;
  if (di < 0) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: not a comparison prim", th_eg_name(b));
  /* Step 1: the bool output; a number is cast to the tensor operand's dtype (PyTorch: i8 < 260 is
   * i8 < 4), or kept as a Python number when both operands are numbers. */
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_dtype num_dt = TH_DTYPE_COUNT;
  for (int k = 0; k < 2 && k < b->nargs; k++) {
    th_tensor *t = th_rt_tensor(env, &b->args[k]);
    if (t && num_dt == TH_DTYPE_COUNT) num_dt = t->dtype;
  }
  th_eg_operand ops[2];
  TH_TRY(th_eg_bind(env, b, 0, out->ndim, out->shape, num_dt, &ops[0]));
  TH_TRY(th_eg_bind(env, b, 1, out->ndim, out->shape, num_dt, &ops[1]));
  /* Step 2: compare exactly: int64 for exact dtypes, float64 otherwise. */
  cmp_ctx c = {defs[di].k, !th_dtype_is_float(ops[0].dtype) && !th_dtype_is_float(ops[1].dtype),
               ops[0].dtype, ops[1].dtype};
  th_eg_row_fn row = cmp_row;
  if (out->dtype == TH_BOOL && c.a == TH_F32 && c.b == TH_F32) row = defs[di].row_f32;
  run_loop(out, ops, 2, row, &c, true);
  return TH_OK;
}

/* ---- where ---------------------------------------------------------------------------------------------- */

typedef struct where_ctx {
  size_t size;     /* output element size; a and b are in the output dtype */
  th_dtype pred;
} where_ctx;

/* p[0] out, p[1] pred, p[2] a, p[3] b. */
static void where_row(void *vctx, char *const *p, const int64_t *bs, int64_t n) {
  const where_ctx *c = vctx;
  for (int64_t i = 0; i < n; i++) {
    const char *pp = p[1] + i * bs[1];
    bool t = c->pred == TH_BOOL ? th_sc_ld_u8(pp) != 0 : th_load_f64(pp, c->pred) != 0;
    const char *src = t ? p[2] + i * bs[2] : p[3] + i * bs[3];
    switch (c->size) {
    case 1: memcpy(p[0] + i * bs[0], src, 1); break;
    case 2: memcpy(p[0] + i * bs[0], src, 2); break;
    case 4: memcpy(p[0] + i * bs[0], src, 4); break;
    default: memcpy(p[0] + i * bs[0], src, 8); break;
    }
  }
}

th_status th_eg_where_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the output; pred as bool, a and b in the output dtype (numbers cast to it). */
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_eg_operand ops[3];
  TH_TRY(th_eg_bind(env, b, 0, out->ndim, out->shape, TH_BOOL, &ops[0]));
  TH_TRY(th_eg_bind(env, b, 1, out->ndim, out->shape, out->dtype, &ops[1]));
  TH_TRY(th_eg_bind(env, b, 2, out->ndim, out->shape, out->dtype, &ops[2]));
  /* Step 2: a tensor branch of another dtype is converted up front (prims forbid it, but cheap). */
  th_tensor *tmp[2] = {NULL, NULL};
  for (int k = 1; k <= 2; k++) {
    if (ops[k].dtype == out->dtype) continue;
    th_tensor *src = th_rt_tensor(env, &b->args[k]);
    tmp[k - 1] = th_tensor_empty(out->dtype, src->ndim, src->shape);
    if (!tmp[k - 1]) {
      th_tensor_release(tmp[0]);
      return th_last_status();
    }
    th_eg_copy_tensor(tmp[k - 1], src);
    th_status s = th_eg_bind_tensor(tmp[k - 1], out->ndim, out->shape, th_eg_name(b), &ops[k]);
    if (s != TH_OK) {
      th_tensor_release(tmp[0]);
      th_tensor_release(tmp[1]);
      return s;
    }
  }
  /* Step 3: select element by element. */
  where_ctx c = {th_dtype_size(out->dtype), ops[0].dtype};
  run_loop(out, ops, 3, where_row, &c, true);
  th_tensor_release(tmp[0]);
  th_tensor_release(tmp[1]);
  return TH_OK;
}

/* ---- convert_element_type ------------------------------------------------------------------------------- */

th_status th_eg_convert_element_type_ref(th_rt_env *env, const th_bsym *b) {
  /* Step 1: the output in the target dtype, the input (tensor or number) over its shape. */
  th_tensor *out = th_eg_alloc_out(env, b, 0);
  if (!out) return th_last_status();
  th_eg_operand a;
  TH_TRY(th_eg_bind(env, b, 0, out->ndim, out->shape, TH_DTYPE_COUNT, &a));
  /* Step 2: the converting copy (PyTorch's casts, see core/scalar.h). */
  int64_t obs[TH_MAX_DIMS];
  th_eg_tensor_bstrides(out, obs);
  th_eg_copy(th_eg_data(out), out->dtype, obs, a.base, a.dtype, a.bs, out->ndim, out->shape);
  return TH_OK;
}
