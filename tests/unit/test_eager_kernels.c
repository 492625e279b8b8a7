/* test_eager_kernels.c — the eager executor's reference kernels against references computed here.
 *
 * Each case records one prim with the C API (th_trace_call), compiles it for the eager executor alone
 * and runs it on input tensors made here in several layouts: contiguous, transposed, strided with an
 * offset, expanded (a stride-0 broadcast view), plus 0-dim and empty tensors. References are plain
 * loops in float64 (floats, compared with a tolerance per dtype; NaN must match NaN) or exact int64
 * arithmetic wrapped to the dtype (integers and bool, compared exactly). A dtype the prim's meta
 * refuses (math prims take no f16/bf16, transcendental ones no integers) is skipped; every op checks
 * that at least its core dtypes ran. Covered: the executor table (every non-utility prim has a kernel),
 * every unary/binary/compare prim in every dtype and layout, Python-number operands (cast to the
 * tensor's dtype as PyTorch does), integer division by zero, where, convert_element_type over all
 * dtype pairs with PyTorch spot values, reductions (dims subsets, strided inputs, large parallel
 * reductions, NaN rules, empty inputs), the shape prims (views share storage, reshape copies when it
 * must), cat, take (out-of-range index), copy_, device_put, full/iota/uniform, matmul in all its 1-D
 * and batched forms and linear (transposed, strided, broadcast batch, blocks crossing the packing
 * size), and allocation failures during a run (an error, never a crash). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "core/ir.h"
#include "core/scalar.h"
#include "executors/kernel.h"
#include "runtime/runtime.h"
#include "thunder/jit.h"

static const th_device CPU = {TH_CPU, 0};

static const th_dtype ALL_DT[] = {TH_BOOL, TH_U8, TH_I8, TH_I16, TH_I32, TH_I64, TH_F16, TH_BF16, TH_F32, TH_F64};
#define N_ALL_DT ((int)(sizeof ALL_DT / sizeof ALL_DT[0]))

/* ---- tensors ------------------------------------------------------------------------------------------ */

enum { L_CONTIG, L_TRANSPOSED, L_STRIDED, L_EXPANDED, L_COUNT };
static const char *const LAYOUT_NAME[] = {"contiguous", "transposed", "strided", "expanded"};

enum { V_GENERAL, V_NONZERO, V_SMALL, V_POSITIVE };

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_u64(void) { /* xorshift64* */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return rng * 2685821657736338717u;
}
static double unif(double lo, double hi) { return lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1p-53; }

/* The value of element j of a fresh tensor (mode picks the set). Floats mix random values with the
 * special ones every float op must get right; integers cover the dtype's whole range. */
static void gen_value(char *p, th_dtype dt, int64_t j, int mode) {
  static const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 0.5, 1.5, 2.5, -2.5, 1.0, -1.0};
  if (th_dtype_is_float(dt)) {
    double v;
    if (mode == V_GENERAL && j % 5 == 3)
      v = special[(j / 5) % 11];
    else if (mode == V_SMALL)
      v = (double)((int64_t)(next_u64() % 7) - 2);
    else if (mode == V_POSITIVE)
      v = unif(0.05, 4.0);
    else
      v = unif(-4.0, 4.0);
    if (mode == V_NONZERO && v == 0) v = 1;
    th_store_f64(p, dt, v);
    return;
  }
  int64_t v;
  uint64_t r = next_u64();
  switch (mode) {
    case V_SMALL: v = (int64_t)(r % 9) - 3; break;
    case V_POSITIVE: v = (int64_t)(r % 7) + 1; break;
    default:
      switch (dt) {
        case TH_BOOL: v = (int64_t)(r & 1); break;
        case TH_I64: v = j % 7 == 0 ? (j % 14 ? INT64_MIN : INT64_MAX) : (int64_t)(r >> 20) - ((int64_t)1 << 43); break;
        default: v = (int64_t)r; break; /* the store keeps the low bits: the whole range */
      }
  }
  if (mode == V_NONZERO && (v == 0 || (dt != TH_I64 && (v & 0xff) == 0))) v = 1;
  th_store_i64(p, dt, v);
  if (mode == V_NONZERO && th_load_i64(p, dt) == 0) th_store_i64(p, dt, 1);
}

/* A tensor of logical shape [nd] with the given layout (2-D only for non-contiguous layouts): the
 * base storage is filled element by element, and the tensor is a view of it. */
static th_tensor *make(th_dtype dt, int nd, const int64_t *shape, int lay, int mode) {
  int64_t bshape[TH_MAX_DIMS], strides[TH_MAX_DIMS], offset = 0;
  int bnd = nd;
  if (nd > 0) memcpy(bshape, shape, sizeof(int64_t) * (size_t)nd);
  if (nd != 2) lay = L_CONTIG;
  switch (lay) {
    case L_TRANSPOSED: bshape[0] = shape[1], bshape[1] = shape[0], strides[0] = 1, strides[1] = shape[0]; break;
    case L_STRIDED: bshape[1] = 2 * shape[1] + 1, strides[0] = bshape[1], strides[1] = 2, offset = 1; break;
    case L_EXPANDED: bshape[0] = 1, strides[0] = 0, strides[1] = 1; break;
    default: th_rt_contiguous_strides(nd, shape, strides); break;
  }
  th_tensor *base = th_tensor_empty(dt, bnd, bshape);
  assert_non_null(base);
  int64_t n = th_tensor_numel(base);
  for (int64_t j = 0; j < n; j++) gen_value((char *)th_tensor_data(base) + j * (int64_t)th_dtype_size(dt), dt, j, mode);
  th_tensor *t = th_tensor_view(base, nd, shape, strides, offset);
  assert_non_null(t);
  th_tensor_release(base);
  return t;
}

/* Pointer to logical element `flat` (row-major) of t. */
static const char *at(const th_tensor *t, int64_t flat) {
  int64_t off = t->offset;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (flat % t->shape[d]) * t->strides[d];
    flat /= t->shape[d];
  }
  return (const char *)t->storage->data + off * (int64_t)th_dtype_size(t->dtype);
}
static double getf(const th_tensor *t, int64_t i) { return th_load_f64(at(t, i), t->dtype); }
static int64_t geti(const th_tensor *t, int64_t i) { return th_load_i64(at(t, i), t->dtype); }

/* v wrapped/rounded to dt and read back: what a correct kernel stores. */
static int64_t wrap_i(th_dtype dt, int64_t v) {
  char buf[8];
  th_store_i64(buf, dt, v);
  return th_load_i64(buf, dt);
}
static double round_f(th_dtype dt, double v) {
  char buf[8];
  th_store_f64(buf, dt, v);
  return th_load_f64(buf, dt);
}

/* Float comparison with a tolerance per dtype; NaN matches NaN, infinities match exactly. */
static bool close_to(double got, double want, th_dtype dt) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (isinf(want) || isinf(got)) return got == want;
  double tol = dt == TH_F64 ? 1e-12 : dt == TH_F32 ? 2e-6 : dt == TH_F16 ? 2e-3 : 1.6e-2;
  return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

/* ---- running one prim ------------------------------------------------------------------------------- */

typedef struct tcase {
  th_trace *tr;
  int nin;
  th_tensor *ins[8];
} tcase;

static void tc_begin(tcase *c) {
  memset(c, 0, sizeof *c);
  c->tr = th_trace_new(NULL);
  assert_non_null(c->tr);
}

static th_value *tc_in(tcase *c, th_tensor *t) {
  th_value *v = th_trace_add_tensor_input(c->tr, NULL, t->dtype, CPU, t->ndim, t->shape);
  assert_non_null(v);
  c->ins[c->nin++] = t;
  return v;
}

static th_arg tc_arg(tcase *c, th_tensor *t) { return th_arg_value(tc_in(c, t)); }

enum { ST_RECORD, ST_COMPILE, ST_RUN, ST_OK };

/* Records op(args, kwargs) and returns its output, compiles for the eager executor only (or with
 * opts) and runs. Returns the stage reached; on ST_OK outs/nout hold the outputs. */
static int tc_eval_kw(tcase *c, const char *op, int n, const th_arg *args, int nkw, const char *const *kwn,
                      const th_arg *kw, const th_compile_options *opts, int *nout, th_tensor ***outs) {
  th_arg out;
  if (th_trace_call(c->tr, op, n, args, nkw, kwn, kw, &out) != TH_OK) return ST_RECORD;
  assert_int_equal(th_trace_set_return(c->tr, out), TH_OK);
  static const char *const eager_only[] = {"eager"};
  th_compile_options o = {0};
  if (opts) o = *opts;
  o.executors = eager_only;
  o.nexecutors = 1;
  th_program *p = NULL;
  if (th_program_compile(c->tr, &o, &p) != TH_OK) return ST_COMPILE;
  th_status st = th_program_run(p, c->nin, c->ins, nout, outs);
  th_program_free(p);
  return st == TH_OK ? ST_OK : ST_RUN;
}

/* One output, or NULL with the stage in *stage. */
static th_tensor *tc_eval(tcase *c, const char *op, int n, const th_arg *args, int *stage) {
  int nout = 0;
  th_tensor **outs = NULL;
  int s = tc_eval_kw(c, op, n, args, 0, NULL, NULL, NULL, &nout, &outs);
  if (stage) *stage = s;
  if (s != ST_OK) return NULL;
  assert_int_equal(nout, 1);
  th_tensor *r = outs[0];
  free(outs);
  return r;
}

/* Releases the trace and the inputs. */
static void tc_end(tcase *c) {
  th_trace_free(c->tr);
  for (int i = 0; i < c->nin; i++) {
    bool dup = false;
    for (int j = 0; j < i; j++) dup |= c->ins[j] == c->ins[i];
    if (!dup) th_tensor_release(c->ins[i]);
  }
  c->nin = 0;
}

/* Like tc_eval but the op must succeed. */
static th_tensor *must_eval(tcase *c, const char *op, int n, const th_arg *args) {
  int stage;
  th_tensor *r = tc_eval(c, op, n, args, &stage);
  if (!r) fail_msg("%s failed at stage %d: %s", op, stage, th_last_error());
  return r;
}

static th_arg int_tuple(th_arg *items, int n, const int64_t *v) {
  for (int i = 0; i < n; i++) items[i] = th_arg_int(v[i]);
  return th_arg_tuple(n, items);
}

static th_arg dev_arg(th_device d) {
  th_arg a = {TH_ARG_DEVICE, {0}};
  a.u.device = d;
  return a;
}

/* ---- the executor table -------------------------------------------------------------------------- */

static void test_table_complete(void **state) {
  (void)state;
  int checked = 0;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (!s || !s->is_prim || (s->tags & TH_TAG_UTILITY)) continue;
    bool found = false;
    for (int i = 0; i < th_eager_executor.nimpls; i++)
      if (th_eager_executor.impls[i].op == (th_op_id)id) {
        assert_non_null(th_eager_executor.impls[i].kernel);
        assert_false(found); /* listed once */
        found = true;
      }
    if (!found) fail_msg("prim %s has no eager kernel", s->qualname);
    checked++;
  }
  for (int i = 0; i < th_eager_executor.nimpls; i++) {
    const th_symbol *s = th_symbol_get(th_eager_executor.impls[i].op);
    assert_non_null(s);
    assert_false(s->tags & TH_TAG_UTILITY);
  }
  assert_string_equal(th_eager_executor.name, "eager");
  print_message("eager table: %d prims, each with one kernel\n", checked);
}

/* ---- unary ------------------------------------------------------------------------------------------------ */

/* The hand-written references of the unary prims: REF(name, expr) sets *want to expr (in x) and returns
 * true when op is name. A prim without one is still run and checked (test_unary: its float32, float16 and
 * bfloat16 results against its own float64 kernel, its integer results by kind, every layout against a
 * contiguous copy); its independent reference is then PyTorch, in tests/python/test_eager_vs_torch.py,
 * which walks every unary prim of the table. */
#define REF(name, expr)                                                                                                \
  do {                                                                                                                 \
    if (!strcmp(op, name)) {                                                                                           \
      *want = (expr);                                                                                                  \
      return true;                                                                                                     \
    }                                                                                                                  \
  } while (0)

/* Float reference (float64). */
static bool ref_unary_f(const char *op, double x, double *want) {
  REF("abs", fabs(x));
  REF("acos", acos(x));
  REF("acosh", acosh(x));
  REF("asin", asin(x));
  REF("asinh", asinh(x));
  REF("atan", atan(x));
  REF("atanh", atanh(x));
  REF("ceil", ceil(x));
  REF("cos", cos(x));
  REF("cosh", cosh(x));
  REF("erf", erf(x));
  REF("erfc", erfc(x));
  REF("exp", exp(x));
  REF("exp2", exp2(x));
  REF("expm1", expm1(x));
  REF("floor", floor(x));
  REF("isfinite", isfinite(x) ? 1 : 0);
  REF("lgamma", lgamma(x));
  REF("log", log(x));
  REF("log10", log10(x));
  REF("log1p", log1p(x));
  REF("log2", log2(x));
  REF("neg", -x);
  REF("reciprocal", 1 / x);
  REF("round", nearbyint(x));
  REF("rsqrt", 1 / sqrt(x));
  REF("sign", (x > 0) - (x < 0));
  REF("signbit", signbit(x) ? 1 : 0);
  REF("sin", sin(x));
  REF("sinc", x == 0 ? 1 : sin(3.141592653589793 * x) / (3.141592653589793 * x));
  REF("sinh", sinh(x));
  REF("sqrt", sqrt(x));
  REF("tan", tan(x));
  REF("tanh", tanh(x));
  REF("trunc", trunc(x));
  return false;
}

/* Exact reference (bool and integers), before wrapping to the dtype. */
static bool ref_unary_i(const char *op, int64_t x, th_dtype dt, int64_t *want) {
  REF("abs", x < 0 ? (int64_t)(0 - (uint64_t)x) : x);
  REF("neg", (int64_t)(0 - (uint64_t)x));
  REF("sign", (x > 0) - (x < 0));
  REF("bitwise_not", dt == TH_BOOL ? !x : ~x);
  REF("isfinite", 1);
  REF("signbit", x < 0);
  REF("ceil", x);
  REF("floor", x);
  REF("round", x);
  REF("trunc", x);
  return false;
}
#undef REF

/* The reference run of a prim without a hand-written reference: qual on a contiguous copy of x stored
 * as dtype `as` (x's values, exact in `as`): its float64 kernel for a float x, or the same kernel on
 * another layout. */
static th_tensor *run_on_copy(const char *qual, const th_tensor *x, th_dtype as) {
  th_tensor *cp = th_tensor_empty(as, x->ndim, x->shape);
  assert_non_null(cp);
  int64_t n = th_tensor_numel(x);
  for (int64_t i = 0; i < n; i++) {
    char *p = (char *)th_tensor_data(cp) + i * (int64_t)th_dtype_size(as);
    if (th_dtype_is_float(x->dtype))
      th_store_f64(p, as, getf(x, i));
    else
      th_store_i64(p, as, geti(x, i));
  }
  tcase c;
  tc_begin(&c);
  th_arg a[1] = {tc_arg(&c, cp)};
  th_tensor *y = must_eval(&c, qual, 1, a);
  tc_end(&c);
  return y;
}

static void test_unary(void **state) {
  (void)state;
  /* every unary prim of the table (the rows of ops/unary.def with a prim) and its kind */
  static const struct {
    const char *name, *kind;
  } ops[] = {
#define TH_UNARY(name, kind, ...) {#name, #kind},
#include "ops/unary.def"
#undef TH_UNARY
  };
  const int64_t shape[2] = {5, 7};
  int runs = 0, skipped = 0, no_ref = 0;
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    char qual[64];
    snprintf(qual, sizeof qual, "prims.%s", ops[o].name);
    bool exact_op = !strcmp(ops[o].kind, "EXACT");
    double f;
    int64_t n;
    bool has_ref_f = ref_unary_f(ops[o].name, 0.5, &f), has_ref_i = ref_unary_i(ops[o].name, 1, TH_I64, &n);
    /* the references a kind uses: floats for all but EXACT, integers for all but FLOAT */
    bool miss_f = !has_ref_f && !exact_op, miss_i = !has_ref_i && strcmp(ops[o].kind, "FLOAT");
    if (miss_f || miss_i) {
      print_message("unary: %s has no C reference for %s (checked by kind against its own float64 kernel and "
                    "across layouts; tests/python/test_eager_vs_torch.py compares it with PyTorch)\n",
                    qual,
                    miss_f && miss_i ? "floats and integers"
                    : miss_f         ? "floats"
                                     : "integers");
      no_ref++;
    }
    int ok_dtypes = 0;
    for (int di = 0; di < N_ALL_DT; di++) {
      th_dtype dt = ALL_DT[di];
      for (int lay = 0; lay < L_COUNT; lay++) {
        tcase c;
        tc_begin(&c);
        th_tensor *x = make(dt, 2, shape, lay, V_GENERAL);
        th_arg a[1] = {tc_arg(&c, x)};
        int stage;
        th_tensor *y = tc_eval(&c, qual, 1, a, &stage);
        if (!y) {
          /* only the meta may refuse a dtype */
          /* only the meta may refuse a dtype (and the kernel refuses neg of bool, as PyTorch) */
          bool neg_bool = !strcmp(ops[o].name, "neg") && dt == TH_BOOL;
          if (stage != ST_RECORD && !(neg_bool && stage == ST_RUN))
            fail_msg("%s %s: stage %d: %s", qual, th_dtype_name(dt), stage, th_last_error());
          skipped++;
          tc_end(&c);
          break;
        }
        bool bool_out = !strcmp(ops[o].kind, "PRED");
        assert_int_equal(y->dtype, bool_out ? TH_BOOL : dt);
        bool math_op = !strcmp(ops[o].kind, "MATH");
        /* without a hand-written reference: the op's float64 kernel on the same values (for a float
         * dtype: the float32 expression against the float64 one; for an integer dtype of a PRED or MATH
         * op: the kernel reads integers as float64, or must give the integer the float64 kernel gives),
         * and the same dtype on a contiguous copy (every layout agrees) */
        bool float_dt = th_dtype_is_float(dt), int_kernel = exact_op || bool_out || math_op;
        th_tensor *r64 = NULL, *rsame = NULL;
        if (float_dt ? !has_ref_f : (int_kernel && !has_ref_i)) {
          if (!exact_op) r64 = run_on_copy(qual, x, TH_F64);
          if (!float_dt) rsame = run_on_copy(qual, x, dt);
        }
        for (int64_t i = 0; i < 35; i++) {
          if (float_dt) {
            double want = 0;
            if (!has_ref_f)
              want = getf(r64, i);
            else
              assert_true(ref_unary_f(ops[o].name, getf(x, i), &want));
            if (bool_out) {
              assert_int_equal(geti(y, i), (int64_t)want);
            } else if (!close_to(getf(y, i), round_f(dt, want), dt)) {
              fail_msg("%s %s %s [%lld]: x=%.9g got %.9g want %.9g%s", qual, th_dtype_name(dt), LAYOUT_NAME[lay],
                       (long long)i, getf(x, i), getf(y, i), want, has_ref_f ? "" : " (its float64 kernel)");
            }
          } else if (int_kernel) {
            /* the kinds with an integer kernel (FLOAT ops compute integers in float64) */
            int64_t got = geti(y, i), want = 0;
            if (has_ref_i) {
              assert_true(ref_unary_i(ops[o].name, geti(x, i), dt, &want));
              if (!bool_out) want = wrap_i(dt, want);
            } else {
              want = geti(rsame, i);
              if (bool_out && got != (int64_t)getf(r64, i))
                fail_msg("%s %s [%lld]: x=%lld got %lld, its float64 kernel %lld", qual, th_dtype_name(dt),
                         (long long)i, (long long)geti(x, i), (long long)got, (long long)getf(r64, i));
              double v = r64 ? getf(r64, i) : NAN;
              if (math_op && fabs((double)geti(x, i)) <= 0x1p53 && v == nearbyint(v) && fabs(v) <= 0x1p53 &&
                  got != wrap_i(dt, (int64_t)v))
                fail_msg("%s %s [%lld]: x=%lld got %lld, its float64 kernel %.17g", qual, th_dtype_name(dt),
                         (long long)i, (long long)geti(x, i), (long long)got, v);
            }
            if (got != want)
              fail_msg("%s %s %s [%lld]: x=%lld got %lld want %lld%s", qual, th_dtype_name(dt), LAYOUT_NAME[lay],
                       (long long)i, (long long)geti(x, i), (long long)got, (long long)want,
                       has_ref_i ? "" : " (a contiguous copy)");
          } /* else: a float-only op the meta let through for an exact dtype; not specified */
        }
        if (r64) th_tensor_release(r64);
        if (rsame) th_tensor_release(rsame);
        if (lay == 0) ok_dtypes++;
        runs++;
        th_tensor_release(y);
        tc_end(&c);
      }
    }
    /* every op runs in float32 and float64 at least, bitwise_not in the exact dtypes */
    if (ok_dtypes < 2) fail_msg("%s ran in only %d dtypes", qual, ok_dtypes);
  }
  print_message("unary: %d (op, dtype, layout) runs checked, %d (op, dtype) refused by metas, %d prims without a C "
                "reference\n",
                runs, skipped, no_ref);
}

/* neg of bool is an error, and a 0-dim and an empty input work. */
static void test_unary_edges(void **state) {
  (void)state;
  /* 0-dim */
  tcase c;
  tc_begin(&c);
  th_tensor *x = make(TH_F32, 0, NULL, L_CONTIG, V_POSITIVE);
  th_arg a[1] = {tc_arg(&c, x)};
  th_tensor *y = must_eval(&c, "prims.sqrt", 1, a);
  assert_int_equal(y->ndim, 0);
  assert_true(close_to(getf(y, 0), sqrt(getf(x, 0)), TH_F32));
  th_tensor_release(y);
  tc_end(&c);
  /* empty */
  tc_begin(&c);
  int64_t es[2] = {0, 3};
  x = make(TH_F64, 2, es, L_CONTIG, V_GENERAL);
  a[0] = tc_arg(&c, x);
  y = must_eval(&c, "prims.exp", 1, a);
  assert_int_equal(th_tensor_numel(y), 0);
  th_tensor_release(y);
  tc_end(&c);
  /* sign(NaN) is 0 and sign(-0.0) is +0, as PyTorch */
  tc_begin(&c);
  int64_t s1[1] = {3};
  x = th_tensor_empty(TH_F32, 1, s1);
  ((float *)th_tensor_data(x))[0] = NAN, ((float *)th_tensor_data(x))[1] = -0.0f, ((float *)th_tensor_data(x))[2] = -3;
  a[0] = tc_arg(&c, x);
  y = must_eval(&c, "prims.sign", 1, a);
  assert_true(getf(y, 0) == 0 && !signbit(getf(y, 0)));
  assert_true(getf(y, 1) == 0 && !signbit(getf(y, 1)));
  assert_true(getf(y, 2) == -1);
  th_tensor_release(y);
  tc_end(&c);
  /* round is half to even */
  tc_begin(&c);
  x = th_tensor_empty(TH_F64, 1, s1);
  ((double *)th_tensor_data(x))[0] = 0.5, ((double *)th_tensor_data(x))[1] = 1.5,
           ((double *)th_tensor_data(x))[2] = -2.5;
  a[0] = tc_arg(&c, x);
  y = must_eval(&c, "prims.round", 1, a);
  assert_true(getf(y, 0) == 0 && getf(y, 1) == 2 && getf(y, 2) == -2);
  th_tensor_release(y);
  tc_end(&c);
}

/* ---- binary -------------------------------------------------------------------------------------------- */

static double ref_binary_f(const char *op, double a, double b) {
  if (!strcmp(op, "add")) return a + b;
  if (!strcmp(op, "sub")) return a - b;
  if (!strcmp(op, "mul")) return a * b;
  if (!strcmp(op, "div")) return a / b;
  if (!strcmp(op, "pow")) return pow(a, b);
  if (!strcmp(op, "fmod")) return fmod(a, b);
  if (!strcmp(op, "remainder")) {
    double m = fmod(a, b);
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
  }
  if (!strcmp(op, "atan2")) return atan2(a, b);
  if (!strcmp(op, "maximum")) return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
  if (!strcmp(op, "minimum")) return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
  if (!strcmp(op, "eq")) return a == b;
  if (!strcmp(op, "ne")) return a != b;
  if (!strcmp(op, "lt")) return a < b;
  if (!strcmp(op, "le")) return a <= b;
  if (!strcmp(op, "gt")) return a > b;
  if (!strcmp(op, "ge")) return a >= b;
  fail_msg("no float reference for %s", op);
  return 0;
}

static int64_t ref_binary_i(const char *op, int64_t a, int64_t b) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  if (!strcmp(op, "add")) return (int64_t)(ua + ub);
  if (!strcmp(op, "sub")) return (int64_t)(ua - ub);
  if (!strcmp(op, "mul")) return (int64_t)(ua * ub);
  if (!strcmp(op, "div")) return b == -1 ? (int64_t)(0 - ua) : a / b;
  if (!strcmp(op, "fmod")) return b == -1 ? 0 : a % b;
  if (!strcmp(op, "remainder")) {
    int64_t m = b == -1 ? 0 : a % b;
    return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
  }
  if (!strcmp(op, "pow")) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
    uint64_t r = 1;
    for (int64_t k = 0; k < b; k++) r *= ua;
    return (int64_t)r;
  }
  if (!strcmp(op, "maximum")) return a > b ? a : b;
  if (!strcmp(op, "minimum")) return a < b ? a : b;
  if (!strcmp(op, "bitwise_and")) return a & b;
  if (!strcmp(op, "bitwise_or")) return a | b;
  if (!strcmp(op, "bitwise_xor")) return a ^ b;
  if (!strcmp(op, "eq")) return a == b;
  if (!strcmp(op, "ne")) return a != b;
  if (!strcmp(op, "lt")) return a < b;
  if (!strcmp(op, "le")) return a <= b;
  if (!strcmp(op, "gt")) return a > b;
  if (!strcmp(op, "ge")) return a >= b;
  fail_msg("no exact reference for %s", op);
  return 0;
}

static bool is_compare(const char *op) {
  return !strcmp(op, "eq") || !strcmp(op, "ne") || !strcmp(op, "lt") || !strcmp(op, "le") || !strcmp(op, "gt") ||
         !strcmp(op, "ge");
}

/* Checks y = op(x0, x1) elementwise (x0/x1 may be NULL: the numbers na/nb instead). */
static void check_binary(const char *op, const th_tensor *y, const th_tensor *x0, const th_tensor *x1, double na,
                         double nb, th_dtype dt, const char *what) {
  int64_t n = th_tensor_numel(y);
  bool cmp = is_compare(op);
  for (int64_t i = 0; i < n; i++) {
    if (th_dtype_is_float(dt)) {
      double a = x0 ? getf(x0, i) : round_f(dt, na), b = x1 ? getf(x1, i) : round_f(dt, nb);
      double want = ref_binary_f(op, a, b);
      if (cmp ? getf(y, i) != want : !close_to(getf(y, i), round_f(dt, want), dt))
        fail_msg("%s %s %s [%lld]: %.9g, %.9g: got %.9g want %.9g", op, th_dtype_name(dt), what, (long long)i, a, b,
                 getf(y, i), want);
    } else {
      int64_t a = x0 ? geti(x0, i) : wrap_i(dt, (int64_t)na), b = x1 ? geti(x1, i) : wrap_i(dt, (int64_t)nb);
      int64_t want = ref_binary_i(op, a, b);
      if (!cmp) want = wrap_i(dt, want);
      if (geti(y, i) != want)
        fail_msg("%s %s %s [%lld]: %lld, %lld: got %lld want %lld", op, th_dtype_name(dt), what, (long long)i,
                 (long long)a, (long long)b, (long long)geti(y, i), (long long)want);
    }
  }
}

static void test_binary(void **state) {
  (void)state;
  static const char *const ops[] = {
    "add",         "sub",        "mul",         "div", "pow", "fmod", "remainder", "atan2", "maximum", "minimum",
    "bitwise_and", "bitwise_or", "bitwise_xor", "eq",  "ne",  "lt",   "le",        "gt",    "ge"};
  const int64_t shape[2] = {6, 9};
  int runs = 0, skipped = 0;
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    char qual[64];
    snprintf(qual, sizeof qual, "prims.%s", ops[o]);
    bool divides = !strcmp(ops[o], "div") || !strcmp(ops[o], "fmod") || !strcmp(ops[o], "remainder");
    int ok_dtypes = 0;
    for (int di = 0; di < N_ALL_DT; di++) {
      th_dtype dt = ALL_DT[di];
      bool refused = false;
      for (int la = 0; la < L_COUNT && !refused; la++) {
        int lb = (la + 1 + di) % L_COUNT; /* mix the layouts of the two operands */
        tcase c;
        tc_begin(&c);
        th_tensor *x0 = make(dt, 2, shape, la, V_GENERAL);
        th_tensor *x1 = make(dt, 2, shape, lb, !strcmp(ops[o], "pow") ? V_SMALL : divides ? V_NONZERO : V_GENERAL);
        th_arg a[2] = {tc_arg(&c, x0), tc_arg(&c, x1)};
        int stage;
        th_tensor *y = tc_eval(&c, qual, 2, a, &stage);
        if (!y) {
          bool bool_sub = !strcmp(ops[o], "sub") && dt == TH_BOOL;
          if (stage != ST_RECORD && !(bool_sub && stage == ST_RUN))
            fail_msg("%s %s: stage %d: %s", qual, th_dtype_name(dt), stage, th_last_error());
          skipped++;
          refused = true;
          tc_end(&c);
          break;
        }
        char what[64];
        snprintf(what, sizeof what, "%s/%s", LAYOUT_NAME[la], LAYOUT_NAME[lb]);
        assert_int_equal(y->dtype, is_compare(ops[o]) ? TH_BOOL : dt);
        check_binary(ops[o], y, x0, x1, 0, 0, dt, what);
        if (la == 0) ok_dtypes++;
        runs++;
        th_tensor_release(y);
        tc_end(&c);
      }
    }
    if (ok_dtypes < 2) fail_msg("%s ran in only %d dtypes", qual, ok_dtypes);
  }
  print_message("binary/compare: %d (op, dtype, layouts) runs checked, %d (op, dtype) refused by metas\n", runs,
                skipped);
}

/* Python numbers join a tensor op cast to the tensor's dtype (PyTorch's wrapped scalars), 0-dim
 * tensors act as scalars, empty tensors work, large loops run in parallel chunks correctly. */
static void test_binary_scalars(void **state) {
  (void)state;
  const int64_t shape[2] = {4, 5};
  /* f32 tensor * 0.1 and 0.1 - tensor: the number is rounded to float first */
  for (int side = 0; side < 2; side++) {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_F32, 2, shape, L_TRANSPOSED, V_GENERAL);
    th_arg a[2];
    a[side] = tc_arg(&c, x);
    a[1 - side] = th_arg_float(0.1);
    th_tensor *y = must_eval(&c, side ? "prims.sub" : "prims.mul", 2, a);
    check_binary(side ? "sub" : "mul", y, side ? NULL : x, side ? x : NULL, 0.1, 0.1, TH_F32, "number");
    th_tensor_release(y);
    tc_end(&c);
  }
  /* i8 tensor + 300 wraps as int8 (300 -> 44); i8 < 260 compares with 4; u8 > -1 compares with 255 */
  {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_I8, 2, shape, L_STRIDED, V_GENERAL);
    th_arg a[2] = {tc_arg(&c, x), th_arg_int(300)};
    th_tensor *y = must_eval(&c, "prims.add", 2, a);
    check_binary("add", y, x, NULL, 0, 300, TH_I8, "number");
    th_tensor_release(y);
    tc_end(&c);
    tc_begin(&c);
    int64_t s2[1] = {2};
    x = th_tensor_empty(TH_I8, 1, s2);
    ((int8_t *)th_tensor_data(x))[0] = 1, ((int8_t *)th_tensor_data(x))[1] = 5;
    a[0] = tc_arg(&c, x), a[1] = th_arg_int(260);
    y = must_eval(&c, "prims.lt", 2, a);
    assert_int_equal(geti(y, 0), 1);
    assert_int_equal(geti(y, 1), 0);
    th_tensor_release(y);
    tc_end(&c);
  }
  /* f32 == 0.1 is true for 0.1f (compared in float, as PyTorch) */
  {
    tcase c;
    tc_begin(&c);
    int64_t s1[1] = {1};
    th_tensor *x = th_tensor_empty(TH_F32, 1, s1);
    ((float *)th_tensor_data(x))[0] = 0.1f;
    th_arg a[2] = {tc_arg(&c, x), th_arg_float(0.1)};
    th_tensor *y = must_eval(&c, "prims.eq", 2, a);
    assert_int_equal(geti(y, 0), 1);
    th_tensor_release(y);
    tc_end(&c);
  }
  /* a CPU 0-dim tensor acts as a scalar */
  {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_F64, 2, shape, L_EXPANDED, V_GENERAL);
    th_tensor *s = make(TH_F64, 0, NULL, L_CONTIG, V_POSITIVE);
    th_arg a[2] = {tc_arg(&c, x), tc_arg(&c, s)};
    th_tensor *y = must_eval(&c, "prims.div", 2, a);
    check_binary("div", y, x, NULL, 0, getf(s, 0), TH_F64, "0-dim");
    th_tensor_release(y);
    tc_end(&c);
  }
  /* empty */
  {
    tcase c;
    tc_begin(&c);
    int64_t es[2] = {3, 0};
    th_tensor *x = make(TH_I32, 2, es, L_CONTIG, V_GENERAL), *z = make(TH_I32, 2, es, L_CONTIG, V_GENERAL);
    th_arg a[2] = {tc_arg(&c, x), tc_arg(&c, z)};
    th_tensor *y = must_eval(&c, "prims.mul", 2, a);
    assert_int_equal(th_tensor_numel(y), 0);
    th_tensor_release(y);
    tc_end(&c);
  }
  /* large loops: parallel chunks over transposed/expanded operands, f32 fast path and f16 */
  th_dtype big_dt[2] = {TH_F32, TH_F16};
  for (int k = 0; k < 2; k++) {
    tcase c;
    tc_begin(&c);
    int64_t big[2] = {517, 263};
    th_tensor *x = make(big_dt[k], 2, big, L_TRANSPOSED, V_GENERAL),
              *z = make(big_dt[k], 2, big, L_EXPANDED, V_GENERAL);
    th_arg a[2] = {tc_arg(&c, x), tc_arg(&c, z)};
    int stage;
    th_tensor *y = tc_eval(&c, "prims.maximum", 2, a, &stage);
    if (!y) fail_msg("maximum %s: %s", th_dtype_name(big_dt[k]), th_last_error());
    check_binary("maximum", y, x, z, 0, 0, big_dt[k], "large");
    th_tensor_release(y);
    tc_end(&c);
  }
}

static void test_integer_division_by_zero(void **state) {
  (void)state;
  static const char *const ops[] = {"prims.div", "prims.fmod", "prims.remainder"};
  for (int o = 0; o < 3; o++) {
    tcase c;
    tc_begin(&c);
    int64_t s[1] = {4};
    th_tensor *x = make(TH_I32, 1, s, L_CONTIG, V_GENERAL), *z = make(TH_I32, 1, s, L_CONTIG, V_NONZERO);
    ((int32_t *)th_tensor_data(z))[2] = 0;
    th_arg a[2] = {tc_arg(&c, x), tc_arg(&c, z)};
    int stage;
    th_tensor *y = tc_eval(&c, ops[o], 2, a, &stage);
    assert_null(y);
    assert_int_equal(stage, ST_RUN);
    assert_int_equal(th_last_status(), TH_ERR_RUNTIME);
    assert_non_null(strstr(th_last_error(), "ZeroDivisionError"));
    tc_end(&c);
  }
  /* floats divide by zero to inf/nan */
  tcase c;
  tc_begin(&c);
  int64_t s[1] = {2};
  th_tensor *x = th_tensor_empty(TH_F32, 1, s), *z = th_tensor_new(TH_F32, 1, s);
  ((float *)th_tensor_data(x))[0] = 1, ((float *)th_tensor_data(x))[1] = 0;
  th_arg a[2] = {tc_arg(&c, x), tc_arg(&c, z)};
  th_tensor *y = must_eval(&c, "prims.div", 2, a);
  assert_true(isinf(getf(y, 0)) && isnan(getf(y, 1)));
  th_tensor_release(y);
  tc_end(&c);
}

/* ---- where ------------------------------------------------------------------------------------------------ */

static void test_where(void **state) {
  (void)state;
  const int64_t shape[2] = {5, 6};
  int runs = 0;
  for (int di = 0; di < N_ALL_DT; di++) {
    th_dtype dt = ALL_DT[di];
    for (int lay = 0; lay < L_COUNT; lay++) {
      tcase c;
      tc_begin(&c);
      th_tensor *p = make(TH_BOOL, 2, shape, (lay + 2) % L_COUNT, V_GENERAL);
      th_tensor *x = make(dt, 2, shape, lay, V_GENERAL), *z = make(dt, 2, shape, (lay + 1) % L_COUNT, V_GENERAL);
      th_arg a[3] = {tc_arg(&c, p), tc_arg(&c, x), tc_arg(&c, z)};
      th_tensor *y = must_eval(&c, "prims.where", 3, a);
      for (int64_t i = 0; i < 30; i++) {
        const th_tensor *src = geti(p, i) ? x : z;
        assert_memory_equal(at(y, i), at(src, i), th_dtype_size(dt));
      }
      runs++;
      th_tensor_release(y);
      tc_end(&c);
    }
  }
  /* numbers: where(pred, x, 0.5) and where(True, 1, x) */
  tcase c;
  tc_begin(&c);
  th_tensor *p = make(TH_BOOL, 2, shape, L_CONTIG, V_GENERAL), *x = make(TH_F32, 2, shape, L_STRIDED, V_GENERAL);
  th_arg a[3] = {tc_arg(&c, p), tc_arg(&c, x), th_arg_float(0.5)};
  th_tensor *y = must_eval(&c, "prims.where", 3, a);
  for (int64_t i = 0; i < 30; i++) {
    double want = geti(p, i) ? getf(x, i) : 0.5;
    assert_true(close_to(getf(y, i), want, TH_F32));
  }
  th_tensor_release(y);
  tc_end(&c);
  tc_begin(&c);
  x = make(TH_I64, 2, shape, L_CONTIG, V_GENERAL);
  a[0] = th_arg_bool(true), a[1] = th_arg_int(7), a[2] = tc_arg(&c, x);
  y = must_eval(&c, "prims.where", 3, a);
  for (int64_t i = 0; i < 30; i++) assert_int_equal(geti(y, i), 7);
  th_tensor_release(y);
  tc_end(&c);
  print_message("where: %d (dtype, layout) runs checked, plus number branches\n", runs);
}

/* ---- convert_element_type ------------------------------------------------------------------------------- */

static void test_convert(void **state) {
  (void)state;
  const th_dtype dts[] = {TH_BOOL, TH_U8,   TH_I8,  TH_I16, TH_I32,      TH_I64,
                          TH_F16,  TH_BF16, TH_F32, TH_F64, TH_F8E4M3FN, TH_F8E5M2};
  const int64_t shape[2] = {4, 6};
  int runs = 0;
  for (int s = 0; s < 12; s++)
    for (int d = 0; d < 12; d++) {
      tcase c;
      tc_begin(&c);
      th_tensor *x = make(dts[s], 2, shape, (s + d) % L_COUNT, V_GENERAL);
      th_arg a[2] = {tc_arg(&c, x), th_arg_dtype(dts[d])};
      th_tensor *y = must_eval(&c, "prims.convert_element_type", 2, a);
      assert_int_equal(y->dtype, dts[d]);
      for (int64_t i = 0; i < 24; i++) {
        char want[8];
        if (th_dtype_is_float(dts[s]))
          th_store_f64(want, dts[d], getf(x, i));
        else
          th_store_i64(want, dts[d], geti(x, i));
        bool both_nan = th_dtype_is_float(dts[d]) && isnan(th_load_f64(want, dts[d])) && isnan(getf(y, i));
        if (!both_nan && memcmp(want, at(y, i), th_dtype_size(dts[d])))
          fail_msg("convert %s -> %s [%lld]: %.9g", th_dtype_name(dts[s]), th_dtype_name(dts[d]), (long long)i,
                   getf(x, i));
      }
      runs++;
      th_tensor_release(y);
      tc_end(&c);
    }
  /* PyTorch spot values: f32 -> int8/uint8 wrap through int32/int64, -> bf16 ties to even */
  static const float src[] = {300.7f, -1.0f, 1.00390625f, 40000.0f, -0.0f};
  int64_t s5[1] = {5};
  tcase c;
  tc_begin(&c);
  th_tensor *x = th_tensor_empty(TH_F32, 1, s5);
  memcpy(th_tensor_data(x), src, sizeof src);
  th_arg xa = tc_arg(&c, x);
  th_arg a[2] = {xa, th_arg_dtype(TH_I8)};
  th_tensor *y = must_eval(&c, "prims.convert_element_type", 2, a);
  assert_int_equal(geti(y, 0), 44);
  assert_int_equal(geti(y, 1), -1);
  th_tensor_release(y);
  tc_end(&c);
  tc_begin(&c);
  x = th_tensor_empty(TH_F32, 1, s5);
  memcpy(th_tensor_data(x), src, sizeof src);
  a[0] = tc_arg(&c, x), a[1] = th_arg_dtype(TH_U8);
  y = must_eval(&c, "prims.convert_element_type", 2, a);
  assert_int_equal(geti(y, 1), 255);
  th_tensor_release(y);
  tc_end(&c);
  tc_begin(&c);
  x = th_tensor_empty(TH_F32, 1, s5);
  memcpy(th_tensor_data(x), src, sizeof src);
  a[0] = tc_arg(&c, x), a[1] = th_arg_dtype(TH_BF16);
  y = must_eval(&c, "prims.convert_element_type", 2, a);
  assert_true(getf(y, 2) == 1.0); /* 1 + 2^-8 is a tie: to even */
  th_tensor_release(y);
  tc_end(&c);
  tc_begin(&c);
  x = th_tensor_empty(TH_F32, 1, s5);
  memcpy(th_tensor_data(x), src, sizeof src);
  a[0] = tc_arg(&c, x), a[1] = th_arg_dtype(TH_I16);
  y = must_eval(&c, "prims.convert_element_type", 2, a);
  assert_int_equal(geti(y, 3), -25536);
  th_tensor_release(y);
  tc_end(&c);
  print_message("convert_element_type: %d dtype pairs checked, plus PyTorch spot values\n", runs);
}

/* ---- reductions ---------------------------------------------------------------------------------------- */

/* Reference of one reduction over dims mask of x (2-D or 3-D), output element o (row-major over the
 * kept dims). Returns the float64 value; *idx the argmax/argmin flat index. */
static double ref_reduce(const char *op, const th_tensor *x, const bool *mask, int64_t o, double corr, double *mean_out,
                         int64_t *iacc) {
  int nd = x->ndim;
  int64_t kept_idx[TH_MAX_DIMS] = {0}, rest = o;
  for (int d = nd - 1; d >= 0; d--)
    if (!mask[d]) {
      kept_idx[d] = rest % x->shape[d];
      rest /= x->shape[d];
    }
  /* walk all elements, keep those at this output */
  double s = 0, p = 1, mx = -INFINITY, mn = INFINITY, best = 0;
  bool nan = false, first = true;
  int64_t n = 0, arg = 0, is = 0, ip = 1, imx = INT64_MIN, imn = INT64_MAX, ibest = 0;
  double vals_sum = 0;
  int64_t total = th_tensor_numel(x);
  bool exact = !th_dtype_is_float(x->dtype);
  for (int64_t f = 0; f < total; f++) {
    int64_t idx[TH_MAX_DIMS], r = f, red_flat = 0;
    for (int d = nd - 1; d >= 0; d--) {
      idx[d] = r % x->shape[d];
      r /= x->shape[d];
    }
    bool mine = true;
    for (int d = 0; d < nd; d++)
      if (!mask[d] && idx[d] != kept_idx[d]) mine = false;
    if (!mine) continue;
    for (int d = 0; d < nd; d++)
      if (mask[d]) red_flat = red_flat * x->shape[d] + idx[d];
    double v = getf(x, f);
    int64_t iv = geti(x, f);
    s += v, p *= v, vals_sum += v;
    is = (int64_t)((uint64_t)is + (uint64_t)iv), ip = (int64_t)((uint64_t)ip * (uint64_t)iv);
    if (isnan(v)) nan = true;
    if (v > mx) mx = v;
    if (v < mn) mn = v;
    if (iv > imx) imx = iv;
    if (iv < imn) imn = iv;
    bool is_max = !strcmp(op, "argmax");
    if (exact) {
      if (first || (is_max ? iv > ibest : iv < ibest)) ibest = iv, arg = red_flat;
    } else if (!(isnan(best) && !first)) {
      if (first || isnan(v) || (is_max ? v > best : v < best)) best = v, arg = red_flat;
    }
    first = false;
    n++;
  }
  double mean = vals_sum / (double)n, m2 = 0;
  if (!strcmp(op, "var") || !strcmp(op, "var_mean"))
    for (int64_t f = 0; f < total; f++) {
      int64_t idx[TH_MAX_DIMS], r = f;
      for (int d = nd - 1; d >= 0; d--) {
        idx[d] = r % x->shape[d];
        r /= x->shape[d];
      }
      bool mine = true;
      for (int d = 0; d < nd; d++)
        if (!mask[d] && idx[d] != kept_idx[d]) mine = false;
      if (mine) m2 += (getf(x, f) - mean) * (getf(x, f) - mean);
    }
  if (mean_out) *mean_out = mean;
  if (!strcmp(op, "sum")) return *iacc = is, s;
  if (!strcmp(op, "prod")) return *iacc = ip, p;
  if (!strcmp(op, "amax")) return *iacc = imx, nan ? NAN : mx;
  if (!strcmp(op, "amin")) return *iacc = imn, nan ? NAN : mn;
  if (!strcmp(op, "argmax") || !strcmp(op, "argmin")) return *iacc = arg, (double)arg;
  double dof = (double)n - corr;
  return m2 / (dof > 0 ? dof : 0);
}

static void check_reduction(const char *op, th_tensor *x, const bool *mask, th_tensor *y, th_tensor *mean, double corr,
                            const char *what) {
  int64_t nout = th_tensor_numel(y);
  bool exact = !th_dtype_is_float(x->dtype);
  bool arg = !strcmp(op, "argmax") || !strcmp(op, "argmin");
  /* sums of many elements: allow for the accumulation order */
  int64_t nred = th_tensor_numel(x) / (nout ? nout : 1);
  for (int64_t o = 0; o < nout; o++) {
    double m;
    int64_t iw = 0;
    double want = ref_reduce(op, x, mask, o, corr, &m, &iw);
    if (arg || (exact && strcmp(op, "var") && strcmp(op, "var_mean"))) {
      if (geti(y, o) != (arg ? iw : wrap_i(y->dtype, iw)))
        fail_msg("%s %s %s [%lld]: got %lld want %lld", op, th_dtype_name(x->dtype), what, (long long)o,
                 (long long)geti(y, o), (long long)(arg ? iw : wrap_i(y->dtype, iw)));
      continue;
    }
    double got = getf(y, o), w = round_f(y->dtype, want);
    bool ok = close_to(got, w, y->dtype);
    if (!ok && !isnan(w) && !isinf(w)) ok = fabs(got - w) <= 1e-13 * (double)nred * fmax(1, fabs(w)) * 1e3;
    if (!ok) fail_msg("%s %s %s [%lld]: got %.12g want %.12g", op, th_dtype_name(x->dtype), what, (long long)o, got, w);
    /* an infinite mean may come out NaN: Welford's running mean is order-dependent there (PyTorch
     * gives var_mean([1, inf]) mean inf but var_mean([inf, 1]) mean NaN) */
    bool inf_mean_ok = mean && isinf(m) && (isnan(getf(mean, o)) || getf(mean, o) == m);
    if (mean && !inf_mean_ok && !close_to(getf(mean, o), round_f(mean->dtype, m), mean->dtype))
      fail_msg("%s mean %s [%lld]: got %.12g want %.12g", op, what, (long long)o, getf(mean, o), m);
  }
}

static void test_reductions(void **state) {
  (void)state;
  static const char *const ops[] = {"sum", "prod", "amax", "amin", "var", "var_mean", "argmax", "argmin"};
  static const bool masks2[][2] = {{true, false}, {false, true}, {true, true}};
  const int64_t shape[2] = {5, 7};
  int runs = 0;
  for (int o = 0; o < 8; o++) {
    char qual[64];
    snprintf(qual, sizeof qual, "prims.%s", ops[o]);
    bool arg = o >= 6, var = o == 4 || o == 5;
    int ok_dtypes = 0;
    for (int di = 0; di < N_ALL_DT; di++) {
      th_dtype dt = ALL_DT[di];
      bool refused = false;
      for (int mi = 0; mi < 3 && !refused; mi++) {
        if (arg && mi == 2) continue; /* argmax takes one dim, or None (below) */
        for (int lay = 0; lay < L_COUNT; lay++) {
          tcase c;
          tc_begin(&c);
          /* prod of many large values overflows: use small values */
          th_tensor *x = make(dt, 2, shape, lay, o == 1 ? V_SMALL : V_GENERAL);
          th_arg items[2], a[2];
          a[0] = tc_arg(&c, x);
          int64_t dims[2];
          int nd = 0;
          for (int d = 0; d < 2; d++)
            if (masks2[mi][d]) dims[nd++] = d;
          a[1] = arg ? th_arg_int(dims[0]) : int_tuple(items, nd, dims);
          int nout = 0;
          th_tensor **outs = NULL;
          const char *kwn[1] = {"correction"};
          th_arg kw[1] = {th_arg_float(1.0)};
          int stage = tc_eval_kw(&c, qual, 2, a, var ? 1 : 0, kwn, kw, NULL, &nout, &outs);
          if (stage != ST_OK) {
            if (stage != ST_RECORD) fail_msg("%s %s: stage %d: %s", qual, th_dtype_name(dt), stage, th_last_error());
            refused = true;
            tc_end(&c);
            break;
          }
          char what[64];
          snprintf(what, sizeof what, "dims %d %s", mi, LAYOUT_NAME[lay]);
          check_reduction(ops[o], x, masks2[mi], outs[0], o == 5 ? outs[1] : NULL, 1.0, what);
          if (mi == 0 && lay == 0) ok_dtypes++;
          runs++;
          for (int k = 0; k < nout; k++) th_tensor_release(outs[k]);
          free(outs);
          tc_end(&c);
        }
      }
    }
    if (ok_dtypes < 2) fail_msg("%s ran in only %d dtypes", qual, ok_dtypes);
  }
  print_message("reductions: %d (op, dtype, dims, layout) runs checked\n", runs);
}

/* 3-D with non-adjacent dims, argmax over everything, large (parallel) reductions, NaN, empty. */
static void test_reduction_edges(void **state) {
  (void)state;
  /* sum over dims (0, 2) of a [3, 4, 5] f64 and var with correction 0 */
  {
    int64_t s3[3] = {3, 4, 5};
    bool mask[3] = {true, false, true};
    for (int k = 0; k < 2; k++) {
      tcase c;
      tc_begin(&c);
      th_tensor *x = make(TH_F64, 3, s3, L_CONTIG, V_GENERAL);
      /* no NaN/inf here: overwrite the specials */
      for (int64_t i = 0; i < 60; i++) ((double *)th_tensor_data(x))[i] = unif(-2, 2);
      th_arg items[2], a[2] = {tc_arg(&c, x), int_tuple(items, 2, (int64_t[]){0, 2})};
      const char *kwn[1] = {"correction"};
      th_arg kw[1] = {th_arg_float(0.0)};
      int nout = 0;
      th_tensor **outs = NULL;
      int st = tc_eval_kw(&c, k ? "prims.var" : "prims.sum", 2, a, k, kwn, kw, NULL, &nout, &outs);
      if (st != ST_OK) fail_msg("3-D reduction: %s", th_last_error());
      check_reduction(k ? "var" : "sum", x, mask, outs[0], NULL, 0.0, "3-D");
      th_tensor_release(outs[0]);
      free(outs);
      tc_end(&c);
    }
  }
  /* reducing the outer dim of [40, 150]: neighbouring outputs advance together in groups (two full,
   * one partial), same results as one output at a time */
  {
    static const char *const ops[] = {"sum", "prod", "amax", "var_mean", "argmin"};
    const th_dtype dts[] = {TH_F32, TH_F64, TH_BF16, TH_F64, TH_I32};
    int64_t s2[2] = {40, 150};
    bool mask[2] = {true, false};
    for (int k = 0; k < 5; k++) {
      tcase c;
      tc_begin(&c);
      th_tensor *x = make(dts[k], 2, s2, L_CONTIG, k == 1 ? V_SMALL : V_GENERAL);
      if (k == 1) /* a product of 40 small values: keep it exact */
        for (int64_t i = 0; i < 6000; i++) th_store_f64((char *)at(x, i), dts[k], i % 7 == 0 ? -1.0 : 1.0);
      char qual[32];
      snprintf(qual, sizeof qual, "prims.%s", ops[k]);
      th_arg items[1], a[2] = {tc_arg(&c, x), int_tuple(items, 1, (int64_t[]){0})};
      if (k == 4) a[1] = th_arg_int(0);
      const char *kwn[1] = {"correction"};
      th_arg kw[1] = {th_arg_float(1.0)};
      int nout = 0;
      th_tensor **outs = NULL;
      if (tc_eval_kw(&c, qual, 2, a, k == 3, kwn, kw, NULL, &nout, &outs) != ST_OK)
        fail_msg("%s: %s", qual, th_last_error());
      check_reduction(ops[k], x, mask, outs[0], k == 3 ? outs[1] : NULL, 1.0, "groups");
      for (int j = 0; j < nout; j++) th_tensor_release(outs[j]);
      free(outs);
      tc_end(&c);
    }
  }
  /* argmax(dim=None) of a transposed tensor: the flat row-major index of the logical tensor */
  {
    tcase c;
    tc_begin(&c);
    int64_t s2[2] = {6, 5};
    th_tensor *x = make(TH_I32, 2, s2, L_TRANSPOSED, V_GENERAL);
    th_arg a[2] = {tc_arg(&c, x), th_arg_none()};
    th_tensor *y = must_eval(&c, "prims.argmax", 2, a);
    bool mask[2] = {true, true};
    assert_int_equal(y->ndim, 0);
    check_reduction("argmax", x, mask, y, NULL, 0, "dim=None");
    th_tensor_release(y);
    tc_end(&c);
  }
  /* NaN: amax propagates, argmax/argmin pick the first NaN; ties pick the first occurrence */
  {
    tcase c;
    tc_begin(&c);
    int64_t s1[1] = {5};
    th_tensor *x = th_tensor_empty(TH_F32, 1, s1);
    float v[5] = {1, 3, NAN, 3, NAN};
    memcpy(th_tensor_data(x), v, sizeof v);
    th_arg a[2] = {tc_arg(&c, x), th_arg_int(0)};
    th_tensor *y = must_eval(&c, "prims.argmin", 2, a);
    assert_int_equal(geti(y, 0), 2);
    th_tensor_release(y);
    tc_end(&c);
    tc_begin(&c);
    x = th_tensor_empty(TH_F32, 1, s1);
    float w[5] = {1, 3, 0, 3, 2};
    memcpy(th_tensor_data(x), w, sizeof w);
    a[0] = tc_arg(&c, x);
    y = must_eval(&c, "prims.argmax", 2, a);
    assert_int_equal(geti(y, 0), 1);
    th_tensor_release(y);
    tc_end(&c);
  }
  /* large: f32 sum of 3M elements (chunked, merged) vs a float64 reference; bf16 amax; var */
  {
    int64_t big[1] = {3 * 1024 * 1024 + 17};
    static const char *const ops[] = {"prims.sum", "prims.amax", "prims.var_mean", "prims.argmin"};
    th_dtype dts[] = {TH_F32, TH_BF16, TH_F32, TH_F64};
    for (int k = 0; k < 4; k++) {
      tcase c;
      tc_begin(&c);
      th_tensor *x = th_tensor_empty(dts[k], 1, big);
      for (int64_t i = 0; i < big[0]; i++)
        th_store_f64((char *)th_tensor_data(x) + i * (int64_t)th_dtype_size(dts[k]), dts[k], unif(-1, 3));
      th_arg items[1], a[2] = {tc_arg(&c, x), int_tuple(items, 1, (int64_t[]){0})};
      if (k == 3) a[1] = th_arg_int(0);
      const char *kwn[1] = {"correction"};
      th_arg kw[1] = {th_arg_float(1.0)};
      int nout = 0;
      th_tensor **outs = NULL;
      if (tc_eval_kw(&c, ops[k], 2, a, k == 2, kwn, kw, NULL, &nout, &outs) != ST_OK)
        fail_msg("%s: %s", ops[k], th_last_error());
      /* float64 references */
      double s = 0, mx = -INFINITY, mn = INFINITY, m2 = 0;
      int64_t amin = 0;
      for (int64_t i = 0; i < big[0]; i++) {
        double v = getf(x, i);
        s += v;
        if (v > mx) mx = v;
        if (v < mn) mn = v, amin = i;
      }
      double mean = s / (double)big[0];
      for (int64_t i = 0; i < big[0]; i++) m2 += (getf(x, i) - mean) * (getf(x, i) - mean);
      switch (k) {
        case 0: assert_true(fabs(getf(outs[0], 0) - s) <= 1e-6 * fabs(s)); break;
        case 1: assert_true(getf(outs[0], 0) == mx); break;
        case 2:
          assert_true(close_to(getf(outs[0], 0), m2 / (double)(big[0] - 1), TH_F32));
          assert_true(close_to(getf(outs[1], 0), mean, TH_F32));
          break;
        default: assert_int_equal(geti(outs[0], 0), amin); break;
      }
      for (int j = 0; j < nout; j++) th_tensor_release(outs[j]);
      free(outs);
      tc_end(&c);
    }
  }
  /* empty reductions: sum 0, prod 1, amax an error (the meta or the kernel refuses it) */
  {
    int64_t es[2] = {0, 3};
    static const char *const ops[] = {"prims.sum", "prims.prod", "prims.amax"};
    for (int k = 0; k < 3; k++) {
      tcase c;
      tc_begin(&c);
      th_tensor *x = make(TH_F32, 2, es, L_CONTIG, V_GENERAL);
      th_arg items[1], a[2] = {tc_arg(&c, x), int_tuple(items, 1, (int64_t[]){0})};
      int stage;
      th_tensor *y = tc_eval(&c, ops[k], 2, a, &stage);
      if (k < 2) {
        assert_non_null(y);
        for (int i = 0; i < 3; i++) assert_true(getf(y, i) == (k ? 1.0 : 0.0));
        th_tensor_release(y);
      } else {
        assert_null(y);
      }
      tc_end(&c);
    }
  }
}

/* The row and column fast paths of sum, amax, amin and var_mean (reduction.c): contiguous runs of
 * 1..1000 elements (the 32-lane loops, their tails), column blocks of 1..8192 outputs split over 1, 2 and
 * 3 threads (the per-thread accumulator rows, the four-row sums, the merge), 3-D inputs with a kept
 * block, and the layouts that must fall back (a transposed input, more outputs than one accumulator
 * row); f32, bf16, f64 and f16 (the generic loads). NaN and infinities are planted at chosen lanes; a
 * column and a row of -0.0 must sum to +0.0, as PyTorch's sums do. References: float64 sums in order,
 * exact extremes, two-pass variances. */
static void check_fast_case(th_dtype dt, int nd, const int64_t *shape, int ndims, const int64_t *dims, int lay,
                            int threads, int op) {
  static const char *const ops[] = {"prims.sum", "prims.amax", "prims.amin", "prims.var_mean"};
  tcase c;
  tc_begin(&c);
  th_tensor *x = make(dt, nd, shape, lay, V_NONZERO);
  int64_t total = th_tensor_numel(x);
  /* plant specials: NaN in a few outputs' reductions, +-inf in others, zeros of both signs */
  for (int64_t f = 0; f < total; f++) {
    uint64_t h = (uint64_t)f * 0x9e3779b97f4a7c15ull;
    double v = getf(x, f);
    if (h % 977 == 5)
      v = NAN;
    else if (h % 1013 == 7)
      v = (h & 1) ? INFINITY : -INFINITY;
    else if (h % 31 == 3)
      v = (h & 2) ? 0.0 : -0.0;
    th_store_f64((char *)at(x, f), dt, v);
  }
  bool mask[TH_MAX_DIMS] = {false};
  for (int k = 0; k < ndims; k++) mask[dims[k]] = true;
  /* one kept output (the last) and one reduced line (the first) of -0.0: their sums must be +0.0 */
  int64_t last_kept[TH_MAX_DIMS], idx[TH_MAX_DIMS];
  for (int d = 0; d < nd; d++) last_kept[d] = mask[d] ? -1 : shape[d] - 1;
  for (int64_t f = 0; f < total; f++) {
    int64_t r = f;
    for (int d = nd - 1; d >= 0; d--) idx[d] = r % shape[d], r /= shape[d];
    bool in = true;
    for (int d = 0; d < nd; d++)
      if (!mask[d] && idx[d] != last_kept[d]) in = false;
    if (in) th_store_f64((char *)at(x, f), dt, -0.0);
  }
  th_arg items[TH_MAX_DIMS], a[2] = {tc_arg(&c, x), int_tuple(items, ndims, dims)};
  const char *kwn[1] = {"correction"};
  th_arg kw[1] = {th_arg_float(1.0)};
  int nout = 0;
  th_tensor **outs = NULL;
  assert_int_equal(th_set_num_threads(threads), TH_OK);
  int st = tc_eval_kw(&c, ops[op], 2, a, op == 3, kwn, kw, NULL, &nout, &outs);
  assert_int_equal(th_set_num_threads(0), TH_OK);
  if (st != ST_OK) fail_msg("%s %s: stage %d: %s", ops[op], th_dtype_name(dt), st, th_last_error());
  /* references, output by output */
  int64_t no = th_tensor_numel(outs[0]);
  double *sum = calloc((size_t)no, sizeof *sum), *sabs = calloc((size_t)no, sizeof *sabs);
  double *mx = malloc(sizeof *mx * (size_t)no), *mn = malloc(sizeof *mn * (size_t)no),
         *m2 = calloc((size_t)no, sizeof *m2);
  int64_t *cnt = calloc((size_t)no, sizeof *cnt);
  bool *nan = calloc((size_t)no, sizeof *nan);
  for (int64_t o = 0; o < no; o++) mx[o] = -INFINITY, mn[o] = INFINITY;
  for (int pass = 0; pass < 2; pass++)
    for (int64_t f = 0; f < total; f++) {
      int64_t r = f, o = 0;
      for (int d = nd - 1; d >= 0; d--) idx[d] = r % shape[d], r /= shape[d];
      for (int d = 0; d < nd; d++)
        if (!mask[d]) o = o * shape[d] + idx[d];
      double v = getf(x, f);
      if (pass == 0) {
        sum[o] += v, sabs[o] += fabs(v), cnt[o]++;
        if (v != v) nan[o] = true;
        if (v > mx[o]) mx[o] = v;
        if (v < mn[o]) mn[o] = v;
      } else {
        double d = v - sum[o] / (double)cnt[o];
        m2[o] += d * d;
      }
    }
  for (int64_t o = 0; o < no; o++) {
    double got = getf(outs[0], o), want;
    bool ok;
    if (op == 0) {
      want = round_f(dt, sum[o]);
      double slack = 2.3e-16 * (double)cnt[o] * sabs[o] + fabs(want - round_f(dt, nextafter(sum[o], INFINITY))) +
                     fabs(want - round_f(dt, nextafter(sum[o], -INFINITY)));
      ok = (isnan(want) || isinf(want)) ? close_to(got, want, dt) : fabs(got - want) <= slack + fabs(want) * 0x1p-52;
      if (ok && want == 0 && sabs[o] == 0 && signbit(got)) ok = false; /* all zeros sum to +0.0 */
    } else if (op == 1 || op == 2) {
      want = nan[o] ? NAN : op == 1 ? mx[o] : mn[o];
      ok = isnan(want) ? isnan(got) : got == want;
    } else {
      double mean = sum[o] / (double)cnt[o];
      want = round_f(dt, m2[o] / (double)(cnt[o] - 1));
      ok = close_to(got, want, dt) || (!isfinite(mean) && isnan(got));
      double gm = getf(outs[1], o), wm = round_f(dt, mean);
      if (!(close_to(gm, wm, dt) || (isinf(wm) && isnan(gm)))) ok = false, got = gm, want = wm;
    }
    if (!ok)
      fail_msg("%s %s nd %d shape [%lld, %lld%s] dims %lld%s layout %s threads %d: output %lld got %.17g want %.17g",
               ops[op], th_dtype_name(dt), nd, (long long)shape[0], (long long)shape[1], nd > 2 ? ", ..." : "",
               (long long)dims[0], ndims > 1 ? "+" : "", LAYOUT_NAME[lay], threads, (long long)o, got, want);
  }
  free(sum), free(sabs), free(mx), free(mn), free(m2), free(cnt), free(nan);
  for (int k = 0; k < nout; k++) th_tensor_release(outs[k]);
  free(outs);
  tc_end(&c);
}

static void test_reduction_fast_paths(void **state) {
  (void)state;
  static const th_dtype dts[] = {TH_F32, TH_BF16, TH_F64, TH_F16};
  static const int64_t lens[] = {2, 31, 32, 33, 100, 1000};
  int runs = 0;
  for (int di = 0; di < 4; di++)
    for (int op = 0; op < 4; op++)
      for (int li = 0; li < 6; li++)
        for (int threads = 1; threads <= 3; threads++) {
          int64_t len = lens[li], other = 40000 / len + 3; /* above the parallel threshold */
          /* rows: reduce the contiguous last dim */
          int64_t s_row[2] = {other, len}, d1[1] = {1}, d0[1] = {0};
          check_fast_case(dts[di], 2, s_row, 1, d1, L_CONTIG, threads, op);
          /* columns: reduce the first dim; the kept block is one row */
          int64_t s_col[2] = {other, len};
          check_fast_case(dts[di], 2, s_col, 1, d0, L_CONTIG, threads, op);
          runs += 2;
          if (li == 4) {
            /* a transposed input (no contiguous block: the general paths), and 3-D with a kept block */
            check_fast_case(dts[di], 2, s_col, 1, d0, L_TRANSPOSED, threads, op);
            check_fast_case(dts[di], 2, s_row, 1, d1, L_STRIDED, threads, op);
            int64_t s3[3] = {37, 9, 11}, d01[2] = {0, 1};
            check_fast_case(dts[di], 3, s3, 1, d0, L_CONTIG, threads, op);
            check_fast_case(dts[di], 3, s3, 2, d01, L_CONTIG, threads, op);
            runs += 4;
          }
        }
  /* more outputs than one accumulator row (8192): the grouped path */
  int64_t wide[2] = {6, 9000}, d0[1] = {0};
  for (int op = 0; op < 4; op++) check_fast_case(TH_F32, 2, wide, 1, d0, L_CONTIG, 2, op), runs++;
  print_message("reduction fast paths: %d cases checked\n", runs);
}

/* ---- shape prims ------------------------------------------------------------------------------------------ */

static void test_views(void **state) {
  (void)state;
  /* broadcast_in_dim [3] -> [2, 4, 3] (dims (2,)) is a view with stride 0 */
  {
    tcase c;
    tc_begin(&c);
    int64_t s1[1] = {3};
    th_tensor *x = make(TH_F32, 1, s1, L_CONTIG, V_GENERAL);
    th_arg i1[3], i2[1];
    th_arg a[3] = {tc_arg(&c, x), int_tuple(i1, 3, (int64_t[]){2, 4, 3}), int_tuple(i2, 1, (int64_t[]){2})};
    th_tensor *y = must_eval(&c, "prims.broadcast_in_dim", 3, a);
    assert_true(th_tensor_shares_storage(x, y));
    for (int64_t i = 0; i < 24; i++) assert_memory_equal(at(y, i), at(x, i % 3), 4);
    th_tensor_release(y);
    tc_end(&c);
  }
  /* transpose of a strided tensor; slice with steps; squeeze; shallow_copy */
  {
    tcase c;
    tc_begin(&c);
    int64_t s2[2] = {4, 6};
    th_tensor *x = make(TH_I16, 2, s2, L_STRIDED, V_GENERAL);
    th_arg ip[2];
    th_arg a[2] = {tc_arg(&c, x), int_tuple(ip, 2, (int64_t[]){1, 0})};
    th_tensor *y = must_eval(&c, "prims.transpose", 2, a);
    assert_true(th_tensor_shares_storage(x, y));
    for (int64_t r = 0; r < 6; r++)
      for (int64_t q = 0; q < 4; q++) assert_int_equal(geti(y, r * 4 + q), geti(x, q * 6 + r));
    th_tensor_release(y);
    tc_end(&c);

    tc_begin(&c);
    x = make(TH_F64, 2, s2, L_TRANSPOSED, V_GENERAL);
    th_arg i1[2], i2[2], i3[2];
    th_arg b[4] = {tc_arg(&c, x), int_tuple(i1, 2, (int64_t[]){1, 1}), int_tuple(i2, 2, (int64_t[]){4, 6}),
                   int_tuple(i3, 2, (int64_t[]){2, 3})};
    y = must_eval(&c, "prims.slice_prim", 4, b);
    assert_int_equal(y->shape[0], 2);
    assert_int_equal(y->shape[1], 2);
    for (int64_t r = 0; r < 2; r++)
      for (int64_t q = 0; q < 2; q++) assert_memory_equal(at(y, r * 2 + q), at(x, (1 + 2 * r) * 6 + 1 + 3 * q), 8);
    th_tensor_release(y);
    tc_end(&c);

    tc_begin(&c);
    int64_t s3[3] = {4, 1, 6};
    x = make(TH_U8, 3, s3, L_CONTIG, V_GENERAL);
    th_arg id[1];
    th_arg d[2] = {tc_arg(&c, x), int_tuple(id, 1, (int64_t[]){1})};
    y = must_eval(&c, "prims.squeeze", 2, d);
    assert_int_equal(y->ndim, 2);
    for (int64_t i = 0; i < 24; i++) assert_int_equal(geti(y, i), geti(x, i));
    th_tensor_release(y);
    tc_end(&c);

    tc_begin(&c);
    x = make(TH_BF16, 2, s2, L_EXPANDED, V_GENERAL);
    th_arg e[1] = {tc_arg(&c, x)};
    y = must_eval(&c, "prims.shallow_copy", 1, e);
    assert_true(th_tensor_shares_storage(x, y));
    for (int64_t i = 0; i < 24; i++) assert_memory_equal(at(y, i), at(x, i), 2);
    th_tensor_release(y);
    tc_end(&c);
  }
}

static void test_reshape(void **state) {
  (void)state;
  /* contiguous [4, 6] -> [2, 3, 4]: a view; transposed [4, 6] -> [24]: a copy; [4, 6] strided -> [4, 3, 2]:
   * a view (the last dim splits); expanded -> [24]: a copy */
  struct {
    int lay;
    int nd;
    int64_t shape[3];
    bool view;
  } cases[] = {{L_CONTIG, 3, {2, 3, 4}, true},
               {L_TRANSPOSED, 1, {24}, false},
               {L_STRIDED, 3, {4, 3, 2}, true},
               {L_EXPANDED, 1, {24}, false},
               {L_TRANSPOSED, 3, {4, 1, 6}, true}};
  int64_t s2[2] = {4, 6};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_F32, 2, s2, cases[k].lay, V_GENERAL);
    th_arg items[3], a[2] = {tc_arg(&c, x), int_tuple(items, cases[k].nd, cases[k].shape)};
    th_tensor *y = must_eval(&c, "prims.reshape", 2, a);
    assert_int_equal(th_tensor_shares_storage(x, y), cases[k].view);
    for (int64_t i = 0; i < 24; i++) assert_memory_equal(at(y, i), at(x, i), 4);
    th_tensor_release(y);
    tc_end(&c);
  }
}

static void test_flip_cat_take_clone(void **state) {
  (void)state;
  int64_t s2[2] = {4, 5};
  /* flip dims (0, 1) and (1,) */
  for (int k = 0; k < 2; k++) {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_I64, 2, s2, k ? L_TRANSPOSED : L_STRIDED, V_GENERAL);
    th_arg items[2],
      a[2] = {tc_arg(&c, x), k ? int_tuple(items, 1, (int64_t[]){1}) : int_tuple(items, 2, (int64_t[]){0, 1})};
    th_tensor *y = must_eval(&c, "prims.flip", 2, a);
    for (int64_t r = 0; r < 4; r++)
      for (int64_t q = 0; q < 5; q++) assert_int_equal(geti(y, r * 5 + q), geti(x, (k ? r : 3 - r) * 5 + 4 - q));
    th_tensor_release(y);
    tc_end(&c);
  }
  /* cat along dim 1 (and -2) of three layouts, one of them empty */
  for (int k = 0; k < 2; k++) {
    tcase c;
    tc_begin(&c);
    int64_t sa[2] = {4, 5}, sb[2] = {4, 0}, sc[2] = {4, 3}, sd[2] = {5, 4}, se[2] = {2, 4};
    th_tensor *x0 = make(TH_F16, 2, k ? sd : sa, L_TRANSPOSED, V_GENERAL);
    th_tensor *x1 = make(TH_F16, 2, k ? se : sb, L_CONTIG, V_GENERAL);
    th_tensor *x2 = make(TH_F16, 2, k ? se : sc, L_EXPANDED, V_GENERAL);
    th_arg list[3] = {tc_arg(&c, x0), tc_arg(&c, x1), tc_arg(&c, x2)};
    th_arg a[2] = {th_arg_list(3, list), th_arg_int(k ? -2 : 1)};
    th_tensor *y = must_eval(&c, "prims.cat", 2, a);
    if (!k) {
      assert_int_equal(y->shape[1], 8);
      for (int64_t r = 0; r < 4; r++)
        for (int64_t q = 0; q < 8; q++)
          assert_memory_equal(at(y, r * 8 + q), q < 5 ? at(x0, r * 5 + q) : at(x2, r * 3 + q - 5), 2);
    } else {
      assert_int_equal(y->shape[0], 9);
      for (int64_t i = 0; i < 36; i++)
        assert_memory_equal(at(y, i), i < 20 ? at(x0, i) : i < 28 ? at(x1, i - 20) : at(x2, i - 28), 2);
    }
    th_tensor_release(y);
    tc_end(&c);
  }
  /* take along dim 1 and dim 0 (repeated indices), then an out-of-range index */
  for (int k = 0; k < 3; k++) {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_F32, 2, s2, L_TRANSPOSED, V_GENERAL);
    int64_t s3[1] = {3};
    th_tensor *idx = th_tensor_empty(TH_I32, 1, s3);
    int32_t iv[3] = {2, 0, 2};
    if (k == 2) iv[1] = 5;
    memcpy(th_tensor_data(idx), iv, sizeof iv);
    int dim = k == 1 ? 0 : 1;
    th_arg a[3] = {tc_arg(&c, x), tc_arg(&c, idx), th_arg_int(dim)};
    int stage;
    th_tensor *y = tc_eval(&c, "prims.take", 3, a, &stage);
    if (k == 2) {
      assert_null(y);
      assert_int_equal(stage, ST_RUN);
      assert_int_equal(th_last_status(), TH_ERR_INDEX);
      assert_non_null(strstr(th_last_error(), "out of bounds"));
    } else {
      if (!y) fail_msg("take: %s", th_last_error());
      int64_t rows = dim ? 4 : 3, cols = dim ? 3 : 5;
      for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++) {
          int64_t src = dim ? r * 5 + iv[q] : iv[r] * 5 + q;
          assert_memory_equal(at(y, r * cols + q), at(x, src), 4);
        }
      th_tensor_release(y);
    }
    tc_end(&c);
  }
  /* clone of an expanded view is a contiguous copy */
  {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_BOOL, 2, s2, L_EXPANDED, V_GENERAL);
    th_arg a[1] = {tc_arg(&c, x)};
    th_tensor *y = must_eval(&c, "prims.clone", 1, a);
    assert_false(th_tensor_shares_storage(x, y));
    assert_true(th_tensor_is_contiguous(y));
    for (int64_t i = 0; i < 20; i++) assert_int_equal(geti(y, i), geti(x, i));
    th_tensor_release(y);
    tc_end(&c);
  }
}

static void test_copy_and_device_put(void **state) {
  (void)state;
  int64_t s2[2] = {3, 4};
  /* copy_(src, dst): dst (a strided view) is written and is the result */
  {
    tcase c;
    tc_begin(&c);
    th_tensor *src = make(TH_F32, 2, s2, L_TRANSPOSED, V_GENERAL), *dst = make(TH_F32, 2, s2, L_STRIDED, V_GENERAL);
    th_tensor_retain(dst);
    th_arg a[2] = {tc_arg(&c, src), tc_arg(&c, dst)};
    th_tensor *y = must_eval(&c, "prims.copy_", 2, a);
    assert_ptr_equal(y, dst);
    for (int64_t i = 0; i < 12; i++) assert_memory_equal(at(dst, i), at(src, i), 4);
    th_tensor_release(y);
    tc_end(&c);
    th_tensor_release(dst);
  }
  /* overlapping source and destination (a transposed view of the same square storage) */
  {
    tcase c;
    tc_begin(&c);
    int64_t sq[2] = {3, 3};
    th_tensor *dst = make(TH_I32, 2, sq, L_CONTIG, V_GENERAL);
    th_tensor *src = th_tensor_view(dst, 2, sq, (int64_t[]){1, 3}, 0);
    int32_t before[9];
    memcpy(before, th_tensor_data(dst), sizeof before);
    th_tensor_retain(dst);
    th_arg a[2] = {tc_arg(&c, src), tc_arg(&c, dst)};
    th_tensor *y = must_eval(&c, "prims.copy_", 2, a);
    for (int r = 0; r < 3; r++)
      for (int q = 0; q < 3; q++) assert_int_equal(((int32_t *)th_tensor_data(dst))[r * 3 + q], before[q * 3 + r]);
    th_tensor_release(y);
    tc_end(&c);
    th_tensor_release(dst);
  }
  /* device_put to the CPU is the identity */
  {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_F8E4M3FN, 2, s2, L_CONTIG, V_GENERAL);
    th_arg a[2] = {tc_arg(&c, x), dev_arg(CPU)};
    th_tensor *y = must_eval(&c, "prims.device_put", 2, a);
    assert_true(th_tensor_shares_storage(x, y));
    th_tensor_release(y);
    tc_end(&c);
  }
  /* device_put to the recorded CUDA device under a CPU device override (--device cpu) stays on the CPU */
  {
    tcase c;
    tc_begin(&c);
    th_tensor *x = make(TH_F32, 2, s2, L_CONTIG, V_GENERAL);
    th_arg a[2] = {tc_arg(&c, x), dev_arg((th_device){TH_CUDA, 0})};
    th_compile_options o = {0};
    o.has_device_override = true;
    o.device_override = CPU;
    int nout;
    th_tensor **outs;
    int stage = tc_eval_kw(&c, "prims.device_put", 2, a, 0, NULL, NULL, &o, &nout, &outs);
    assert_int_equal(stage, ST_OK);
    assert_int_equal(nout, 1);
    assert_true(th_tensor_shares_storage(x, outs[0]));
    for (int i = 0; i < nout; i++) th_tensor_release(outs[i]);
    free(outs);
    tc_end(&c);
  }
}

/* ---- creation ---------------------------------------------------------------------------------------------- */

static void test_creation(void **state) {
  (void)state;
  const char *const kwn[2] = {"device", "dtype"};
  /* full: every dtype, int and float fill values, cast as PyTorch */
  for (int di = 0; di < N_ALL_DT; di++) {
    for (int k = 0; k < 2; k++) {
      th_dtype dt = ALL_DT[di];
      tcase c;
      tc_begin(&c);
      th_arg items[2], a[2] = {int_tuple(items, 2, (int64_t[]){3, 5}), k ? th_arg_float(2.75) : th_arg_int(-3)};
      th_arg kw[2] = {dev_arg(CPU), th_arg_dtype(dt)};
      int nout;
      th_tensor **outs;
      int stage = tc_eval_kw(&c, "prims.full", 2, a, 2, kwn, kw, NULL, &nout, &outs);
      if (stage == ST_RECORD) { /* the meta refuses e.g. a float fill for an integer dtype */
        tc_end(&c);
        continue;
      }
      assert_int_equal(stage, ST_OK);
      char want[8];
      if (k)
        th_store_f64(want, dt, 2.75);
      else
        th_store_i64(want, dt, -3);
      for (int64_t i = 0; i < 15; i++) assert_memory_equal(at(outs[0], i), want, th_dtype_size(dt));
      th_tensor_release(outs[0]);
      free(outs);
      tc_end(&c);
    }
  }
  /* iota(7, start=-5, step=3) in i64, i32 and u8 (wraps) */
  th_dtype idts[3] = {TH_I64, TH_I32, TH_U8};
  for (int k = 0; k < 3; k++) {
    tcase c;
    tc_begin(&c);
    th_arg a[1] = {th_arg_int(7)};
    const char *kn[4] = {"start", "step", "device", "dtype"};
    th_arg kw[4] = {th_arg_int(-5), th_arg_int(3), dev_arg(CPU), th_arg_dtype(idts[k])};
    int nout;
    th_tensor **outs;
    if (tc_eval_kw(&c, "prims.iota", 1, a, 4, kn, kw, NULL, &nout, &outs) != ST_OK)
      fail_msg("iota: %s", th_last_error());
    for (int64_t i = 0; i < 7; i++) assert_int_equal(geti(outs[0], i), wrap_i(idts[k], -5 + 3 * i));
    th_tensor_release(outs[0]);
    free(outs);
    tc_end(&c);
  }
  /* uniform in [lo, hi): every value in range, a plausible mean, the same stream for the same seed */
  th_dtype udts[3] = {TH_F32, TH_F64, TH_BF16};
  for (int k = 0; k < 3; k++) {
    double first[2] = {0, 0};
    for (int rep = 0; rep < 2; rep++) {
      tcase c;
      tc_begin(&c);
      th_arg items[1], a[3] = {int_tuple(items, 1, (int64_t[]){10001}), th_arg_float(-2.0), th_arg_float(3.0)};
      th_arg kw[2] = {dev_arg(CPU), th_arg_dtype(udts[k])};
      th_compile_options o = {0};
      o.seed = 1234;
      int nout;
      th_tensor **outs;
      if (tc_eval_kw(&c, "prims.uniform", 3, a, 2, kwn, kw, &o, &nout, &outs) != ST_OK)
        fail_msg("uniform: %s", th_last_error());
      double s = 0;
      for (int64_t i = 0; i < 10001; i++) {
        double v = getf(outs[0], i);
        assert_true(v >= -2.0 && (v < 3.0 || (udts[k] == TH_BF16 && v <= 3.0)));
        s += v;
      }
      assert_true(fabs(s / 10001 - 0.5) < 0.1);
      first[rep] = getf(outs[0], 0) + getf(outs[0], 10000);
      th_tensor_release(outs[0]);
      free(outs);
      tc_end(&c);
    }
    assert_true(first[0] == first[1]);
  }
}

/* ---- linalg ------------------------------------------------------------------------------------------------- */

/* y (contiguous) vs the float64 reference of matmul(x, w) with prims.matmul's shape rules. */
static void check_matmul(const th_tensor *x, const th_tensor *w, const th_tensor *y, const char *what) {
  int xn = x->ndim, wn = w->ndim;
  int64_t M = xn == 1 ? 1 : x->shape[xn - 2], K = x->shape[xn - 1], N = wn == 1 ? 1 : w->shape[wn - 1];
  int64_t nbatch = th_tensor_numel(y) / (M * N != 0 ? M * N : 1);
  bool exact = !th_dtype_is_float(y->dtype);
  for (int64_t b = 0; b < nbatch; b++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0, mag = 0;
        int64_t is = 0;
        for (int64_t k = 0; k < K; k++) {
          int64_t xi = (xn > 2 ? b * M * K : 0) + i * K + k; /* logical flat indices */
          int64_t wi = (wn > 2 ? b * K * N : 0) + k * N + j;
          s += getf(x, xi) * getf(w, wi);
          mag += fabs(getf(x, xi) * getf(w, wi));
          is = (int64_t)((uint64_t)is + (uint64_t)geti(x, xi) * (uint64_t)geti(w, wi));
        }
        int64_t o = (b * M + i) * N + j;
        if (exact) {
          if (geti(y, o) != wrap_i(y->dtype, is)) fail_msg("matmul %s [%lld]", what, (long long)o);
          continue;
        }
        double tol = y->dtype == TH_F64 ? 1e-12 : y->dtype == TH_F32 ? 1e-5 : y->dtype == TH_F16 ? 2e-3 : 1.6e-2;
        if (fabs(getf(y, o) - s) > tol * fmax(1.0, mag))
          fail_msg("matmul %s %s [%lld]: got %.9g want %.9g", what, th_dtype_name(y->dtype), (long long)o, getf(y, o),
                   s);
      }
}

static void test_matmul(void **state) {
  (void)state;
  struct {
    int xn, wn;
    int64_t xs[3], ws[3];
    int xl, wl;
  } cases[] = {
    {1, 1, {7}, {7}, L_CONTIG, L_CONTIG},
    {1, 2, {6}, {6, 5}, L_CONTIG, L_TRANSPOSED},
    {2, 1, {4, 6}, {6}, L_STRIDED, L_CONTIG},
    {2, 2, {5, 7}, {7, 3}, L_TRANSPOSED, L_STRIDED},
    {2, 2, {3, 0}, {0, 4}, L_CONTIG, L_CONTIG}, /* K = 0: zeros */
    {3, 3, {2, 3, 4}, {2, 4, 5}, L_CONTIG, L_CONTIG},
    {1, 3, {4}, {2, 4, 3}, L_CONTIG, L_CONTIG},
    {3, 1, {2, 3, 4}, {4}, L_CONTIG, L_CONTIG},
    {2, 2, {33, 300}, {300, 530}, L_CONTIG, L_TRANSPOSED}, /* crosses the 128 x 512 packing blocks */
  };
  const th_dtype dts[] = {TH_F32, TH_F64, TH_BF16, TH_F16, TH_I64, TH_I32};
  int runs = 0, skipped = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
      if (k == 8 && dts[d] != TH_F32 && dts[d] != TH_F64 && dts[d] != TH_BF16) continue;
      tcase c;
      tc_begin(&c);
      th_tensor *x = make(dts[d], cases[k].xn, cases[k].xs, cases[k].xl, V_SMALL);
      th_tensor *w = make(dts[d], cases[k].wn, cases[k].ws, cases[k].wl, V_GENERAL);
      /* finite values only */
      th_arg a[2] = {tc_arg(&c, x), tc_arg(&c, w)};
      for (int64_t i = 0; i < th_tensor_numel(w); i++)
        if (th_dtype_is_float(dts[d]) && !isfinite(getf(w, i))) th_store_f64((char *)at(w, i), dts[d], 0.25);
      int stage;
      th_tensor *y = tc_eval(&c, "prims.matmul", 2, a, &stage);
      if (!y) {
        if (stage != ST_RECORD) fail_msg("matmul %s: stage %d: %s", th_dtype_name(dts[d]), stage, th_last_error());
        skipped++;
        tc_end(&c);
        continue;
      }
      char what[32];
      snprintf(what, sizeof what, "case %zu", k);
      check_matmul(x, w, y, what);
      runs++;
      th_tensor_release(y);
      tc_end(&c);
    }
  assert_true(runs >= 18);
  print_message("matmul: %d (shape case, dtype) runs checked, %d refused by the meta\n", runs, skipped);
}

static void test_linear(void **state) {
  (void)state;
  /* a [2, 3, 5] (contiguous, or permuted so the leading dims do not fold), w [4, 5], bias [4] */
  const th_dtype dts[] = {TH_F32, TH_F64, TH_BF16};
  for (size_t d = 0; d < 3; d++)
    for (int k = 0; k < 3; k++) {
      tcase c;
      tc_begin(&c);
      int64_t as[3] = {2, 3, 5}, ws[2] = {4, 5}, bs[1] = {4};
      th_tensor *a = make(dts[d], 3, as, L_CONTIG, V_SMALL);
      if (k == 2) { /* a permuted view: logical [2, 3, 5] over storage [3, 2, 5] */
        th_tensor *base = make(dts[d], 3, (int64_t[]){3, 2, 5}, L_CONTIG, V_SMALL);
        th_tensor_release(a);
        a = th_tensor_view(base, 3, as, (int64_t[]){5, 10, 1}, 0);
        th_tensor_release(base);
      }
      th_tensor *w = make(dts[d], 2, ws, L_STRIDED, V_SMALL);
      th_tensor *bias = k ? make(dts[d], 1, bs, L_CONTIG, V_SMALL) : NULL;
      th_arg args[3] = {tc_arg(&c, a), tc_arg(&c, w), bias ? tc_arg(&c, bias) : th_arg_none()};
      th_tensor *y = must_eval(&c, "prims.linear", 3, args);
      for (int64_t r = 0; r < 6; r++)
        for (int64_t n = 0; n < 4; n++) {
          double s = bias ? getf(bias, n) : 0;
          for (int64_t q = 0; q < 5; q++) s += getf(a, r * 5 + q) * getf(w, n * 5 + q);
          assert_true(close_to(getf(y, r * 4 + n), round_f(dts[d], s), dts[d]));
        }
      th_tensor_release(y);
      tc_end(&c);
    }
}

/* ---- allocation failures --------------------------------------------------------------------------- */

/* Every allocation failing in turn while a bf16 matmul (accumulator scratch) and a reshape copy run:
 * an error or success, never a crash (the sanitizer build checks for leaks). */
static void test_alloc_failures(void **state) {
  (void)state;
  int64_t s2[2] = {6, 8};
  for (long n = 1; n < 40; n++) {
    tcase c;
    tc_begin(&c);
    int64_t ws[2] = {8, 3};
    th_tensor *x = make(TH_BF16, 2, s2, L_TRANSPOSED, V_SMALL), *w = make(TH_BF16, 2, ws, L_CONTIG, V_SMALL);
    th_arg xa = tc_arg(&c, x), wa = tc_arg(&c, w);
    th_arg items[1], a[2] = {xa, int_tuple(items, 1, (int64_t[]){48})};
    th_arg out;
    assert_int_equal(th_trace_call(c.tr, "prims.reshape", 2, a, 0, NULL, NULL, &out), TH_OK);
    th_arg m[2] = {xa, wa};
    th_arg out2;
    assert_int_equal(th_trace_call(c.tr, "prims.matmul", 2, m, 0, NULL, NULL, &out2), TH_OK);
    th_arg r[2] = {out, out2};
    assert_int_equal(th_trace_set_return(c.tr, th_arg_tuple(2, r)), TH_OK);
    static const char *const eager_only[] = {"eager"};
    th_compile_options o = {0};
    o.executors = eager_only;
    o.nexecutors = 1;
    th_program *p = NULL;
    assert_int_equal(th_program_compile(c.tr, &o, &p), TH_OK);
    th_alloc_fail_after(n);
    int nout = 0;
    th_tensor **outs = NULL;
    th_status st = th_program_run(p, c.nin, c.ins, &nout, &outs);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      for (int k = 0; k < nout; k++) th_tensor_release(outs[k]);
      free(outs);
    } else {
      assert_true(strlen(th_last_error()) > 0);
    }
    th_program_free(p);
    tc_end(&c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_table_complete),
    cmocka_unit_test(test_unary),
    cmocka_unit_test(test_unary_edges),
    cmocka_unit_test(test_binary),
    cmocka_unit_test(test_binary_scalars),
    cmocka_unit_test(test_integer_division_by_zero),
    cmocka_unit_test(test_where),
    cmocka_unit_test(test_convert),
    cmocka_unit_test(test_reductions),
    cmocka_unit_test(test_reduction_edges),
    cmocka_unit_test(test_reduction_fast_paths),
    cmocka_unit_test(test_views),
    cmocka_unit_test(test_reshape),
    cmocka_unit_test(test_flip_cat_take_clone),
    cmocka_unit_test(test_copy_and_device_put),
    cmocka_unit_test(test_creation),
    cmocka_unit_test(test_matmul),
    cmocka_unit_test(test_linear),
    cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
