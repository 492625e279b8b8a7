/* elementwise.c — reference kernels of the elementwise prims: unary, binary, comparisons, where and
 * convert_element_type, for every dtype PyTorch supports for each.
 *
 * Each op is a row in a table with its scalar functions per compute class (eager_internal.h): float32
 * for f16/bf16/f32 (so low-precision results are rounded once, as PyTorch computes them in float),
 * float64 for f64, int64 for bool and integers (stores keep the low bits, PyTorch's wrap-around); the
 * tables and scalar functions are generated from the rows of ops/unary.def and ops/binary.def. The
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
#include "ops/binary_scalar.h"
#include "ops/special_scalar.h"

/* ---- scalar functions --------------------------------------------------------------------------------- */

/* The scalar functions are the rows of ops/unary.def and ops/binary.def (below). */
static int64_t logical_not_i64(int64_t x) { return x == 0; } /* bitwise_not of a bool tensor */

/* ---- typed rows (all operands of one native dtype) --------------------------------------------------
 * p[0] is the output, p[1] (and p[2]) the inputs. The contiguous cases run on restrict pointers so the
 * loop vectorizes; anything else goes element by element through memcpy loads. */
#define EG_UNARY_ROW(name, T, fn, ld, st)                                                                              \
  static void name(void *ctx, char *const *p, const int64_t *bs, int64_t n) {                                          \
    (void)ctx;                                                                                                         \
    const int64_t sz = (int64_t)sizeof(T);                                                                             \
    if (bs[0] == sz && bs[1] == sz && th_eg_aligned(p[0], sizeof(T)) && th_eg_aligned(p[1], sizeof(T))) {              \
      T *restrict o = (T *)(void *)p[0];                                                                               \
      const T *restrict a = (const T *)(const void *)p[1];                                                             \
      _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = fn(a[i]);                                             \
      return;                                                                                                          \
    }                                                                                                                  \
    for (int64_t i = 0; i < n; i++) st(p[0] + i * bs[0], fn(ld(p[1] + i * bs[1])));                                    \
  }

#define EG_BINARY_ROW(name, T, R, fn, ld)                                                                              \
  static void name(void *ctx, char *const *p, const int64_t *bs, int64_t n) {                                          \
    (void)ctx;                                                                                                         \
    const int64_t sz = (int64_t)sizeof(T);                                                                             \
    if (bs[0] == (int64_t)sizeof(R) && th_eg_aligned(p[0], sizeof(R)) && th_eg_aligned(p[1], sizeof(T)) &&             \
        th_eg_aligned(p[2], sizeof(T))) {                                                                              \
      R *restrict o = (R *)(void *)p[0];                                                                               \
      const T *restrict a = (const T *)(const void *)p[1];                                                             \
      const T *restrict b = (const T *)(const void *)p[2];                                                             \
      if (bs[1] == sz && bs[2] == sz) {                                                                                \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = (R)fn(a[i], b[i]);                                  \
        return;                                                                                                        \
      }                                                                                                                \
      if (bs[1] == sz && bs[2] == 0) {                                                                                 \
        const T y = b[0];                                                                                              \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = (R)fn(a[i], y);                                     \
        return;                                                                                                        \
      }                                                                                                                \
      if (bs[1] == 0 && bs[2] == sz) {                                                                                 \
        const T x = a[0];                                                                                              \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = (R)fn(x, b[i]);                                     \
        return;                                                                                                        \
      }                                                                                                                \
    }                                                                                                                  \
    for (int64_t i = 0; i < n; i++) {                                                                                  \
      R r = (R)fn(ld(p[1] + i * bs[1]), ld(p[2] + i * bs[2]));                                                         \
      memcpy(p[0] + i * bs[0], &r, sizeof r);                                                                          \
    }                                                                                                                  \
  }

/* unary rows, f32 and f64 */
#define EG_UNARY_ROWS(op, f32fn, f64fn)                                                                                \
  EG_UNARY_ROW(op##_row_f32, float, f32fn, th_sc_ld_f32, th_sc_st_f32)                                                 \
  EG_UNARY_ROW(op##_row_f64, double, f64fn, th_sc_ld_f64, th_sc_st_f64)

/* The scalar functions of each unary op of ops/unary.def, <name>_f32 / _f64 / _i64 (or <name>_pred),
 * from the row's C expressions in x for the kind's dtype classes, with the typed f32 and f64 rows. */
#define EG_UNARY_FNS_MATH(op, f32, f64, i64)                                                                           \
  static inline float op##_f32(float x) { return f32; }                                                                \
  static inline double op##_f64(double x) { return f64; }                                                              \
  static inline int64_t op##_i64(int64_t x) { return i64; }                                                            \
  EG_UNARY_ROWS(op, op##_f32, op##_f64)
#define EG_UNARY_FNS_FLOAT(op, f32, f64, i64)                                                                          \
  static inline float op##_f32(float x) { return f32; }                                                                \
  static inline double op##_f64(double x) { return f64; }                                                              \
  EG_UNARY_ROWS(op, op##_f32, op##_f64)
#define EG_UNARY_FNS_EXACT(op, f32, f64, i64)                                                                          \
  static inline int64_t op##_i64(int64_t x) { return i64; }
#define EG_UNARY_FNS_PRED(op, f32, f64, i64)                                                                           \
  static inline bool op##_pred(double x) { return f64; }
#define TH_UNARY(name, kind, cexpr, f32, f64, i64, ...) EG_UNARY_FNS_##kind(name, f32, f64, i64)
#include "ops/unary.def"
#undef TH_UNARY

/* The scalar functions of each binary op of ops/binary.def, <name>_f32 / _f64 / _i64, from the row's C
 * expressions in a and b for the kind's dtype classes (bool results for CMP), with the typed rows: f32
 * and f64 (a float32 one with a bool output for CMP); binary_defs leaves them out for TH_BF_GENERAL_LOOP. */
#define EG_BINARY_ROWS(op)                                                                                             \
  EG_BINARY_ROW(op##_row_f32, float, float, op##_f32, th_sc_ld_f32)                                                    \
  EG_BINARY_ROW(op##_row_f64, double, double, op##_f64, th_sc_ld_f64)
#define EG_BINARY_FNS_MATH(op, f32, f64, i64)                                                                          \
  static inline float op##_f32(float a, float b) { return f32; }                                                       \
  static inline double op##_f64(double a, double b) { return f64; }                                                    \
  static int64_t op##_i64(int64_t a, int64_t b) { return i64; }                                                        \
  EG_BINARY_ROWS(op)
#define EG_BINARY_FNS_ALL(op, f32, f64, i64) EG_BINARY_FNS_MATH(op, f32, f64, i64)
#define EG_BINARY_FNS_FLOAT(op, f32, f64, i64)                                                                         \
  static inline float op##_f32(float a, float b) { return f32; }                                                       \
  static inline double op##_f64(double a, double b) { return f64; }                                                    \
  EG_BINARY_ROWS(op)
#define EG_BINARY_FNS_EXACT(op, f32, f64, i64)                                                                         \
  static int64_t op##_i64(int64_t a, int64_t b) { return i64; }
#define EG_BINARY_FNS_CMP(op, f32, f64, i64)                                                                           \
  static inline bool op##_f32(float a, float b) { return f32; }                                                        \
  static inline bool op##_f64(double a, double b) { return f64; }                                                      \
  static inline bool op##_i64(int64_t a, int64_t b) { return i64; }                                                    \
  EG_BINARY_ROW(op##_row_f32, float, uint8_t, op##_f32, th_sc_ld_f32)
#define TH_BINARY(name, kind, cexpr, f32, f64, i64, fold, flags, ...) EG_BINARY_FNS_##kind(name, f32, f64, i64)
#include "ops/binary.def"
#undef TH_BINARY

/* ---- unary ---------------------------------------------------------------------------------------------- */

typedef struct unary_def {
  th_op_id op;
  float (*f32)(float);
  double (*f64)(double);
  int64_t (*i64)(int64_t); /* bool and integers; NULL: computed in float64 (float-only ops) */
  bool (*pred)(double);    /* isfinite, signbit: the bool result (all dtypes, read as float64) */
  th_eg_row_fn row_f32, row_f64;
  bool serial; /* the libm function is not thread-safe (lgamma sets signgam) */
} unary_def;

/* unary_defs: one entry per row of ops/unary.def; the kind says which scalar functions exist. */
#define EG_UNARY_DEF_MATH(op) op##_f32, op##_f64, op##_i64, NULL, op##_row_f32, op##_row_f64
#define EG_UNARY_DEF_FLOAT(op) op##_f32, op##_f64, NULL, NULL, op##_row_f32, op##_row_f64
#define EG_UNARY_DEF_EXACT(op) NULL, NULL, op##_i64, NULL, NULL, NULL
#define EG_UNARY_DEF_PRED(op) NULL, NULL, NULL, op##_pred, NULL, NULL
static const unary_def unary_defs[] = {
#define TH_UNARY(name, kind, cexpr, f32, f64, i64, fold, flags, ...)                                                   \
  {TH_OP_prims_##name, EG_UNARY_DEF_##kind(name), ((flags)&TH_UF_SERIAL) != 0},
#include "ops/unary.def"
#undef TH_UNARY
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
    return th_error(TH_ERR_RUNTIME,
                    "%s: Negation, the `-` operator, on a bool tensor is not supported. "
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
  float (*f32)(float, float); /* NULL: not defined for floats (bitwise ops) */
  double (*f64)(double, double);
  int64_t (*i64)(int64_t, int64_t); /* NULL: computed in float64 (atan2) */
  th_eg_row_fn row_f32, row_f64;
  bool int_div; /* an integer zero divisor is an error */
} binary_def;

/* binary_defs: one entry per prim row of ops/binary.def but the comparisons (compare_defs); the kind
 * says which scalar functions exist. */
#define EG_BINARY_TYPED(op, flags, row) (((flags)&TH_BF_GENERAL_LOOP) ? NULL : op##_##row)
#define EG_BINARY_DEF_MATH(op, flags)                                                                                  \
  {TH_OP_prims_##op,                                                                                                   \
   op##_f32,                                                                                                           \
   op##_f64,                                                                                                           \
   op##_i64,                                                                                                           \
   EG_BINARY_TYPED(op, flags, row_f32),                                                                                \
   EG_BINARY_TYPED(op, flags, row_f64),                                                                                \
   ((flags)&TH_BF_INT_DIV) != 0},
#define EG_BINARY_DEF_ALL(op, flags) EG_BINARY_DEF_MATH(op, flags)
#define EG_BINARY_DEF_FLOAT(op, flags)                                                                                 \
  {TH_OP_prims_##op,                                                                                                   \
   op##_f32,                                                                                                           \
   op##_f64,                                                                                                           \
   NULL,                                                                                                               \
   EG_BINARY_TYPED(op, flags, row_f32),                                                                                \
   EG_BINARY_TYPED(op, flags, row_f64),                                                                                \
   ((flags)&TH_BF_INT_DIV) != 0},
#define EG_BINARY_DEF_EXACT(op, flags)                                                                                 \
  {TH_OP_prims_##op, NULL, NULL, op##_i64, NULL, NULL, ((flags)&TH_BF_INT_DIV) != 0},
#define EG_BINARY_DEF_CMP(op, flags)
static const binary_def binary_defs[] = {
#define TH_BINARY(name, kind, cexpr, f32, f64, i64, fold, flags, ...) EG_BINARY_DEF_##kind(name, flags)
#include "ops/binary.def"
#undef TH_BINARY
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
          th_store_i64(o + i * bs[0], c->out,
                       d->i64(th_load_i64(a + i * bs[1], c->a), th_load_i64(b + i * bs[2], c->b)));
      else
        for (int64_t i = 0; i < n; i++)
          th_store_f64(o + i * bs[0], c->out,
                       d->f64(th_load_f64(a + i * bs[1], c->a), th_load_f64(b + i * bs[2], c->b)));
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
    return th_error(TH_ERR_RUNTIME,
                    "%s: Subtraction, the `-` operator, with two bool tensors is not "
                    "supported. Use the `^` or `logical_xor()` operator instead.",
                    th_eg_name(b));
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

/* compare_defs: one entry per CMP row of ops/binary.def. */
typedef struct compare_def {
  th_op_id op;
  bool (*f64)(double, double);   /* floats (exact for every float dtype) */
  bool (*i64)(int64_t, int64_t); /* two bool/integer operands */
  th_eg_row_fn row_f32;          /* two float32 operands, bool output */
} compare_def;

#define EG_COMPARE_DEF_CMP(op) {TH_OP_prims_##op, op##_f64, op##_i64, op##_row_f32},
#define EG_COMPARE_DEF_MATH(op)
#define EG_COMPARE_DEF_ALL(op)
#define EG_COMPARE_DEF_FLOAT(op)
#define EG_COMPARE_DEF_EXACT(op)
static const compare_def compare_defs[] = {
#define TH_BINARY(name, kind, ...) EG_COMPARE_DEF_##kind(name)
#include "ops/binary.def"
#undef TH_BINARY
};

typedef struct cmp_ctx {
  const compare_def *d;
  bool exact; /* both operands bool/integer: compare as int64, else as float64 (exact for all floats) */
  th_dtype a, b;
} cmp_ctx;

static void cmp_row(void *vctx, char *const *p, const int64_t *bs, int64_t n) {
  const cmp_ctx *c = vctx;
  if (c->exact)
    for (int64_t i = 0; i < n; i++)
      th_sc_st_u8(p[0] + i * bs[0],
                  c->d->i64(th_load_i64(p[1] + i * bs[1], c->a), th_load_i64(p[2] + i * bs[2], c->b)));
  else
    for (int64_t i = 0; i < n; i++)
      th_sc_st_u8(p[0] + i * bs[0],
                  c->d->f64(th_load_f64(p[1] + i * bs[1], c->a), th_load_f64(p[2] + i * bs[2], c->b)));
}

th_status th_eg_compare_ref(th_rt_env *env, const th_bsym *b) {
  const compare_def *d = NULL;
  for (size_t k = 0; k < sizeof compare_defs / sizeof compare_defs[0]; k++)
    if (compare_defs[k].op == b->sym->id) d = &compare_defs[k];
  if (!d) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: not a comparison prim", th_eg_name(b));
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
  cmp_ctx c = {d, !th_dtype_is_float(ops[0].dtype) && !th_dtype_is_float(ops[1].dtype), ops[0].dtype, ops[1].dtype};
  th_eg_row_fn row = cmp_row;
  if (out->dtype == TH_BOOL && c.a == TH_F32 && c.b == TH_F32) row = d->row_f32;
  run_loop(out, ops, 2, row, &c, true);
  return TH_OK;
}

/* ---- where ---------------------------------------------------------------------------------------------- */

typedef struct where_ctx {
  size_t size; /* output element size; a and b are in the output dtype */
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
