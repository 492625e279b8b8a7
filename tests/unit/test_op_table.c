/* test_op_table.c — walks the op table and names every op that lacks a facet it needs.
 *
 * The table is read two ways: by tag (every symbol of ops.def through th_symbol_get) and by row (the
 * rows of ops/unary.def and ops/binary.def, included here with a TH_UNARY / TH_BINARY that keeps each
 * row's columns as strings). Checked:
 *   - every ELEMENTWISE unary prim is a row of unary.def, and every row's prim, torch-level op and
 *     in-place op exist with the row's fuser template, tags and kind;
 *   - every unary prim has a fuser template or the explicit opt-out TH_UF_NO_FUSE, an eager kernel that
 *     runs for float32 and float64 (bool and integers for EXACT) and agrees with itself across them,
 *     a number folding that agrees with the eager float64 kernel (or the explicit fold NONE, which must
 *     be an error, never a silent NaN), and a torch-level counterpart;
 *   - every ELEMENTWISE binary prim is a row of binary.def with a fuser template or TH_BF_NO_FUSE, its
 *     torch-level op and in-place op as the row says; its eager kernels for float32, float64 and int64
 *     (as its kind has them) agree with the independent references below (ref_binary_f / ref_binary_i:
 *     a row without a reference fails by name), and its number folding agrees with them too (or is the
 *     explicit fold NONE, an error); its vjp registration follows its kind;
 *   - every differentiable unary prim's vjp rule has a case for it (the rule runs and gives a gradient
 *     of the input's dtype and shape), and the others are registered as not differentiable;
 *   - every prim but the utility ones has a vjp entry (a rule, or explicitly not differentiable), or is
 *     listed in NO_VJP_ENTRY (a prim only its torch-level op's rule reaches);
 *   - every in-place torch op has an out-of-place counterpart whose parameters it repeats (a leading
 *     prefix of them) with the same tags but the autocast policy, or is one of the three in-place ops
 *     without one (fill_, zero_, copy_). */
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
#include "ops/vjp.h"
#include "runtime/runtime.h"
#include "thunder/jit.h"

static const th_device CPU = {TH_CPU, 0};

/* ---- the rows of unary.def -------------------------------------------------------------------------- */

typedef struct urow {
  const char *name;
  const char *kind; /* MATH FLOAT EXACT PRED; NULL for a composite (TH_UNARY_TORCH) */
  const char *cexpr;
  const char *fold;
  unsigned flags;
  const char *decomp;
  const char *inplace; /* "INPLACE" or "NO_INPLACE" */
} urow;

static const urow ROWS[] = {
#define TH_UNARY(name, kind, cexpr, f32, f64, i64, fold, flags, decomp, params, tags, aliases, inplace, ip_aliases)    \
  {#name, #kind, cexpr, #fold, flags, #decomp, #inplace},
#define TH_UNARY_TORCH(name, params, tags, aliases, inplace, ip_aliases) {#name, NULL, NULL, NULL, 0, "OWN", #inplace},
#include "ops/unary.def"
#undef TH_UNARY
#undef TH_UNARY_TORCH
};
#define NROWS ((int)(sizeof ROWS / sizeof ROWS[0]))

static const urow *row_of(const char *name) {
  for (int i = 0; i < NROWS; i++)
    if (!strcmp(ROWS[i].name, name)) return &ROWS[i];
  return NULL;
}

static const th_symbol *lookup(const char *module, const char *name) {
  char q[96];
  snprintf(q, sizeof q, "%s.%s", module, name);
  const th_symbol *s = th_symbol_lookup(q);
  return s && !strcmp(s->qualname, q) ? s : NULL;
}

static bool has_eager_kernel(th_op_id id) {
  for (int i = 0; i < th_eager_executor.nimpls; i++)
    if (th_eager_executor.impls[i].op == id) return th_eager_executor.impls[i].kernel != NULL;
  return false;
}

/* ---- running one prim eagerly --------------------------------------------------------------------- */

/* prims.<name> on a 1-D tensor of `dt` holding vals[0..n), run by the eager executor alone. Returns the
 * output (caller releases) or NULL with the error in th_last_error(). */
static th_tensor *run_eager(const char *qual, th_dtype dt, int n, const double *vals) {
  th_trace *tr = th_trace_new(NULL);
  assert_non_null(tr);
  int64_t shape[1] = {n};
  th_tensor *x = th_tensor_empty(dt, 1, shape);
  assert_non_null(x);
  for (int i = 0; i < n; i++) th_store_f64((char *)th_tensor_data(x) + i * (int64_t)th_dtype_size(dt), dt, vals[i]);
  th_value *v = th_trace_add_tensor_input(tr, "x", dt, CPU, 1, shape);
  th_arg a = th_arg_value(v), out;
  th_tensor *r = NULL;
  if (th_trace_call(tr, qual, 1, &a, 0, NULL, NULL, &out) == TH_OK && th_trace_set_return(tr, out) == TH_OK) {
    static const char *const eager_only[] = {"eager"};
    th_compile_options o = {0};
    o.executors = eager_only;
    o.nexecutors = 1;
    th_program *p = NULL;
    if (th_program_compile(tr, &o, &p) == TH_OK) {
      int nout = 0;
      th_tensor **outs = NULL;
      if (th_program_run(p, 1, &x, &nout, &outs) == TH_OK) {
        assert_int_equal(nout, 1);
        r = outs[0];
        free(outs);
      }
      th_program_free(p);
    }
  }
  th_tensor_release(x);
  th_trace_free(tr);
  return r;
}

static double elem(const th_tensor *t, int i) {
  return th_load_f64(
    (const char *)t->storage->data + (t->offset + i * t->strides[0]) * (int64_t)th_dtype_size(t->dtype), t->dtype);
}

static bool same_double(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* ---- by tag: every elementwise unary prim is a complete row ---------------------------------------- */

static void test_unary_prims_are_rows(void **state) {
  (void)state;
  int n = 0;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (!s || !s->is_prim || !(s->tags & TH_TAG_ELEMENTWISE) || s->schema.nparams != 1) continue;
    const urow *r = row_of(s->name);
    if (!r || !r->kind) fail_msg("%s: an elementwise unary prim without a row in ops/unary.def", s->qualname);
    if (!s->cexpr && !(r->flags & TH_UF_NO_FUSE))
      fail_msg("%s: no fuser template and no TH_UF_NO_FUSE opt-out", s->qualname);
    if (s->cexpr && (r->flags & TH_UF_NO_FUSE)) fail_msg("%s: a fuser template and TH_UF_NO_FUSE", s->qualname);
    if (!has_eager_kernel(s->id)) fail_msg("%s: no eager kernel", s->qualname);
    const th_symbol *t = lookup("ltorch", s->name);
    if (!t) fail_msg("%s: no torch-level counterpart ltorch.%s", s->qualname, s->name);
    if (!(t->tags & TH_TAG_ELEMENTWISE)) fail_msg("%s: not tagged ELEMENTWISE", t->qualname);
    n++;
  }
  assert_true(n >= 36);
  print_message("%d elementwise unary prims, each a row of unary.def\n", n);
}

/* ---- by row: what each row generates exists ----------------------------------------------------------- */

static void test_rows_generate_their_ops(void **state) {
  (void)state;
  static const char *const folds[] = {"FLOAT", "RECIPROCAL", "LIKE", "INT", "TO_INT", "PRED", "SIGN", "NONE"};
  for (int i = 0; i < NROWS; i++) {
    const urow *r = &ROWS[i];
    const th_symbol *p = lookup("prims", r->name), *t = lookup("ltorch", r->name);
    char ipname[64];
    snprintf(ipname, sizeof ipname, "%s_", r->name);
    const th_symbol *ip = lookup("ltorch", ipname);
    if (!t) fail_msg("row %s: no ltorch.%s", r->name, r->name);
    if (!strcmp(r->inplace, "INPLACE") != !!ip)
      fail_msg("row %s: %s but ltorch.%s_ %s", r->name, r->inplace, r->name, ip ? "exists" : "is missing");
    if (ip && !(ip->tags & TH_TAG_IN_PLACE)) fail_msg("ltorch.%s_: not tagged IN_PLACE", r->name);
    if (!r->kind) { /* a composite */
      if (p) fail_msg("row %s: a composite row, but prims.%s exists", r->name, r->name);
      assert_non_null(t->decomp);
      continue;
    }
    if (!p) fail_msg("row %s: no prims.%s", r->name, r->name);
    assert_true(p->tags & TH_TAG_ELEMENTWISE);
    assert_true((r->cexpr == NULL) == (p->cexpr == NULL));
    if (r->cexpr) assert_string_equal(r->cexpr, p->cexpr);
    bool known_fold = false;
    for (size_t k = 0; k < sizeof folds / sizeof folds[0]; k++) known_fold |= !strcmp(r->fold, folds[k]);
    if (!known_fold) fail_msg("row %s: unknown fold %s", r->name, r->fold);
    /* the vjp registration follows the kind */
    const th_vjp_entry *e = th_vjp_get(p->id);
    if (!e) fail_msg("%s: no vjp entry", p->qualname);
    bool diff = !strcmp(r->kind, "MATH") || !strcmp(r->kind, "FLOAT");
    assert_int_equal(e->kind, diff ? TH_VJP_RULE : TH_VJP_NONDIFF);
  }
}

/* ---- eager kernels and number folding --------------------------------------------------------------- */

static void test_unary_eager_and_folding(void **state) {
  (void)state;
  static const double vals[] = {0.25, 0.5, 1.5, 2.0, -0.75, 0.0};
  static const double ivals[] = {5, -3, 0, 1};
  const int nv = (int)(sizeof vals / sizeof vals[0]), ni = (int)(sizeof ivals / sizeof ivals[0]);
  for (int i = 0; i < NROWS; i++) {
    const urow *r = &ROWS[i];
    if (!r->kind) continue;
    char qual[64];
    snprintf(qual, sizeof qual, "prims.%s", r->name);
    bool exact = !strcmp(r->kind, "EXACT");
    /* the tensor kernels: float32 and float64 (EXACT: int64 and bool) */
    th_dtype dts[2] = {exact ? TH_I64 : TH_F32, exact ? TH_BOOL : TH_F64};
    th_tensor *y[2];
    for (int k = 0; k < 2; k++) {
      y[k] = run_eager(qual, dts[k], exact ? ni : nv, exact ? ivals : vals);
      if (!y[k]) fail_msg("%s: no eager kernel for %s: %s", qual, th_dtype_name(dts[k]), th_last_error());
    }
    if (!exact)
      for (int j = 0; j < nv; j++) { /* float32 agrees with float64 */
        double a = elem(y[0], j), b = elem(y[1], j);
        bool close = same_double(a, b) || fabs(a - b) <= 1e-5 * fabs(b) + 1e-6;
        if (!close) fail_msg("%s(%g): float32 gives %.9g, float64 %.17g", qual, vals[j], a, b);
      }
    /* number folding agrees with the float64 (int64) kernel, or is an explicit error */
    int nn = exact ? ni : nv;
    for (int j = 0; j < nn; j++) {
      th_trace *tr = th_trace_new(NULL);
      th_arg a = exact ? th_arg_int((int64_t)ivals[j]) : th_arg_float(vals[j]), out;
      th_status st = th_trace_call(tr, qual, 1, &a, 0, NULL, NULL, &out);
      double want = elem(exact ? y[0] : y[1], j);
      if (!strcmp(r->fold, "NONE")) {
        if (st != TH_ERR_NOT_IMPLEMENTED) fail_msg("%s: fold NONE, but a number input gives status %d", qual, (int)st);
      } else if (st == TH_ERR_VALUE) {
        /* Python's math-module error: the kernel's value is NaN or infinite there */
        if (isfinite(want))
          fail_msg("%s(%g): folding fails (%s) where the kernel gives %g", qual, vals[j], th_last_error(), want);
      } else {
        if (st != TH_OK) fail_msg("%s: folding a number fails: %s", qual, th_last_error());
        double got = out.kind == TH_ARG_FLOAT  ? out.u.f
                     : out.kind == TH_ARG_INT  ? (double)out.u.i
                     : out.kind == TH_ARG_BOOL ? (double)out.u.b
                                               : NAN;
        if (out.kind != TH_ARG_FLOAT && out.kind != TH_ARG_INT && out.kind != TH_ARG_BOOL)
          fail_msg("%s: folding a number gives no number", qual);
        /* sign keeps NaN for a number (Python) where the kernel gives 0 (PyTorch): no NaN among vals */
        if (!same_double(got, want))
          fail_msg("%s(%g): folding gives %.17g, the kernel %.17g", qual, exact ? ivals[j] : vals[j], got, want);
      }
      th_trace_free(tr);
    }
    th_tensor_release(y[0]);
    th_tensor_release(y[1]);
  }
}

/* ---- the rows of binary.def ------------------------------------------------------------------------- */

typedef struct brow {
  const char *name;
  const char *kind; /* MATH FLOAT ALL EXACT CMP; NULL for a composite (TH_BINARY_TORCH) */
  const char *cexpr;
  const char *fold;
  unsigned flags;
  const char *inplace;
} brow;

static const brow BROWS[] = {
#define TH_BINARY(name, kind, cexpr, f32, f64, i64, fold, flags, decomp, input, params, tags, aliases, inplace,        \
                  ip_aliases)                                                                                          \
  {#name, #kind, cexpr, #fold, flags, #inplace},
#define TH_BINARY_TORCH(name, input, params, tags, aliases, inplace, ip_aliases) {#name, NULL, NULL, NULL, 0, #inplace},
#include "ops/binary.def"
#undef TH_BINARY
#undef TH_BINARY_TORCH
};
#define NBROWS ((int)(sizeof BROWS / sizeof BROWS[0]))

static const brow *brow_of(const char *name) {
  for (int i = 0; i < NBROWS; i++)
    if (!strcmp(BROWS[i].name, name)) return &BROWS[i];
  return NULL;
}

/* Independent references, written from PyTorch's and Python's definitions (not from the rows): the
 * float result of prims.<name>(a, b) in double precision, and the int64 result. false: no reference. */
static bool ref_binary_f(const char *n, double a, double b, double *r) {
  if (!strcmp(n, "add"))
    *r = a + b;
  else if (!strcmp(n, "sub"))
    *r = a - b;
  else if (!strcmp(n, "mul"))
    *r = a * b;
  else if (!strcmp(n, "div"))
    *r = a / b;
  else if (!strcmp(n, "pow"))
    *r = pow(a, b);
  else if (!strcmp(n, "fmod"))
    *r = fmod(a, b);
  else if (!strcmp(n, "remainder"))
    *r = a - floor(a / b) * b; /* Python's %: the divisor's sign */
  else if (!strcmp(n, "atan2"))
    *r = atan2(a, b);
  else if (!strcmp(n, "maximum"))
    *r = isnan(a) || isnan(b) ? NAN : fmax(a, b);
  else if (!strcmp(n, "minimum"))
    *r = isnan(a) || isnan(b) ? NAN : fmin(a, b);
  else if (strstr(n, "_polynomial_")) { /* closed forms of degrees 0..4 (the test's degrees), 0 below 0 */
    double x = a, x2 = a * a, x3 = x2 * a, x4 = x2 * x2;
    int64_t k = (int64_t)b;
    double t[5] = {1, x, 2 * x2 - 1, 4 * x3 - 3 * x, 8 * x4 - 8 * x2 + 1};
    double u[5] = {1, 2 * x, 4 * x2 - 1, 8 * x3 - 4 * x, 16 * x4 - 12 * x2 + 1};
    double v[5] = {1, 2 * x - 1, 4 * x2 - 2 * x - 1, 8 * x3 - 4 * x2 - 4 * x + 1,
                   16 * x4 - 8 * x3 - 12 * x2 + 4 * x + 1};
    double w[5] = {1, 2 * x + 1, 4 * x2 + 2 * x - 1, 8 * x3 + 4 * x2 - 4 * x - 1,
                   16 * x4 + 8 * x3 - 12 * x2 - 4 * x + 1};
    double h[5] = {1, 2 * x, 4 * x2 - 2, 8 * x3 - 12 * x, 16 * x4 - 48 * x2 + 12};
    double he[5] = {1, x, x2 - 1, x3 - 3 * x, x4 - 6 * x2 + 3};
    double l[5] = {1, 1 - x, (x2 - 4 * x + 2) / 2, (-x3 + 9 * x2 - 18 * x + 6) / 6,
                   (x4 - 16 * x3 + 72 * x2 - 96 * x + 24) / 24};
    double p[5] = {1, x, (3 * x2 - 1) / 2, (5 * x3 - 3 * x) / 2, (35 * x4 - 30 * x2 + 3) / 8};
    const double *tab = !strcmp(n, "chebyshev_polynomial_t")   ? t
                        : !strcmp(n, "chebyshev_polynomial_u") ? u
                        : !strcmp(n, "chebyshev_polynomial_v") ? v
                        : !strcmp(n, "chebyshev_polynomial_w") ? w
                        : !strcmp(n, "hermite_polynomial_h")   ? h
                        : !strcmp(n, "hermite_polynomial_he")  ? he
                        : !strcmp(n, "laguerre_polynomial_l")  ? l
                        : !strcmp(n, "legendre_polynomial_p")  ? p
                                                               : NULL;
    if (!tab || k > 4) return false;
    *r = k < 0 ? 0 : tab[k];
  } else if (!strcmp(n, "zeta")) { /* Hurwitz zeta: a direct sum to N, then Euler-Maclaurin, in long double */
    if (a == 1)
      *r = INFINITY;
    else if (a < 1 || (b <= 0 && b != floor(b) && a != floor(a)))
      *r = NAN;
    else if (b <= 0 && b == floor(b))
      *r = INFINITY;
    else {
      long double s = 0, x = a, q = b, qn = q + 40;
      for (int k = 0; k < 40; k++) s += powl(q + k, -x);
      s += powl(qn, 1 - x) / (x - 1) + powl(qn, -x) / 2 + x * powl(qn, -x - 1) / 12 -
           x * (x + 1) * (x + 2) * powl(qn, -x - 3) / 720 +
           x * (x + 1) * (x + 2) * (x + 3) * (x + 4) * powl(qn, -x - 5) / 30240;
      *r = (double)s;
    }
  } else if (!strcmp(n, "nextafter")) { /* one step of the float64 bit pattern toward b */
    if (isnan(a) || isnan(b))
      *r = NAN;
    else if (a == b)
      *r = b;
    else if (a == 0)
      *r = copysign(ldexp(1.0, -1074), b);
    else {
      uint64_t u;
      memcpy(&u, &a, sizeof u);
      u = ((b > a) == (a > 0)) ? u + 1 : u - 1;
      memcpy(r, &u, sizeof u);
    }
  } else if (!strcmp(n, "hypot"))
    *r = sqrt(a * a + b * b);
  else if (!strcmp(n, "fmax"))
    *r = isnan(a) ? b : isnan(b) ? a : a > b ? a : b;
  else if (!strcmp(n, "fmin"))
    *r = isnan(a) ? b : isnan(b) ? a : a < b ? a : b;
  else if (!strcmp(n, "eq"))
    *r = a == b;
  else if (!strcmp(n, "ne"))
    *r = a != b;
  else if (!strcmp(n, "lt"))
    *r = a < b;
  else if (!strcmp(n, "le"))
    *r = a <= b;
  else if (!strcmp(n, "gt"))
    *r = a > b;
  else if (!strcmp(n, "ge"))
    *r = a >= b;
  else
    return false;
  return true;
}

static bool ref_binary_i(const char *n, int64_t a, int64_t b, int64_t *r) {
  if (!strcmp(n, "add"))
    *r = a + b;
  else if (!strcmp(n, "sub"))
    *r = a - b;
  else if (!strcmp(n, "mul"))
    *r = a * b;
  else if (!strcmp(n, "div"))
    *r = a / b; /* C's truncation, as Thunder's prims.div */
  else if (!strcmp(n, "fmod"))
    *r = a % b;
  else if (!strcmp(n, "remainder"))
    *r = ((a % b) + b) % b;
  else if (!strcmp(n, "pow")) {
    int64_t p = 1; /* a negative exponent truncates 1 / a^-b toward zero, as ATen's integer pow */
    for (int64_t k = 0; k < (b < 0 ? -b : b); k++) p *= a;
    *r = b >= 0 ? p : p == 1 ? 1 : p == -1 ? -1 : 0;
  } else if (!strcmp(n, "maximum"))
    *r = a > b ? a : b;
  else if (!strcmp(n, "minimum"))
    *r = a < b ? a : b;
  else if (!strcmp(n, "fmax"))
    *r = a > b ? a : b;
  else if (!strcmp(n, "fmin"))
    *r = a < b ? a : b;
  else if (!strcmp(n, "bitwise_left_shift")) /* a * 2^b for the small b of the test's inputs */
    *r = b < 0 ? 0 : a * ((int64_t)1 << b);
  else if (!strcmp(n, "bitwise_right_shift")) /* floor(a / 2^b) */
    *r = b < 0 ? (a < 0 ? -1 : 0) : (int64_t)floor((double)a / (double)((int64_t)1 << b));
  else if (!strcmp(n, "gcd") || !strcmp(n, "lcm")) {
    int64_t x = a < 0 ? -a : a, y = b < 0 ? -b : b, g = y;
    for (int64_t k = x > y ? x : y; k >= 1; k--)
      if (x % k == 0 && y % k == 0) {
        g = k;
        break;
      }
    if (x == 0) g = y;
    if (y == 0) g = x;
    *r = !strcmp(n, "gcd") ? g : g == 0 ? 0 : x / g * y;
  } else if (!strcmp(n, "bitwise_and"))
    *r = a & b;
  else if (!strcmp(n, "bitwise_or"))
    *r = a | b;
  else if (!strcmp(n, "bitwise_xor"))
    *r = a ^ b;
  else if (!strcmp(n, "eq"))
    *r = a == b;
  else if (!strcmp(n, "ne"))
    *r = a != b;
  else if (!strcmp(n, "lt"))
    *r = a < b;
  else if (!strcmp(n, "le"))
    *r = a <= b;
  else if (!strcmp(n, "gt"))
    *r = a > b;
  else if (!strcmp(n, "ge"))
    *r = a >= b;
  else
    return false;
  return true;
}

/* prims.<name>(x, y) on two 1-D tensors of `dt`, run by the eager executor alone (NULL on error). */
static th_tensor *run_eager2(const char *qual, th_dtype dt, int n, const double *va, const double *vb) {
  th_trace *tr = th_trace_new(NULL);
  assert_non_null(tr);
  int64_t shape[1] = {n};
  th_tensor *in[2] = {th_tensor_empty(dt, 1, shape), th_tensor_empty(dt, 1, shape)};
  for (int i = 0; i < n; i++) {
    th_store_f64((char *)th_tensor_data(in[0]) + i * (int64_t)th_dtype_size(dt), dt, va[i]);
    th_store_f64((char *)th_tensor_data(in[1]) + i * (int64_t)th_dtype_size(dt), dt, vb[i]);
  }
  th_arg a[2] = {th_arg_value(th_trace_add_tensor_input(tr, "x", dt, CPU, 1, shape)),
                 th_arg_value(th_trace_add_tensor_input(tr, "y", dt, CPU, 1, shape))};
  th_arg out;
  th_tensor *r = NULL;
  if (th_trace_call(tr, qual, 2, a, 0, NULL, NULL, &out) == TH_OK && th_trace_set_return(tr, out) == TH_OK) {
    static const char *const eager_only[] = {"eager"};
    th_compile_options o = {0};
    o.executors = eager_only;
    o.nexecutors = 1;
    th_program *p = NULL;
    if (th_program_compile(tr, &o, &p) == TH_OK) {
      int nout = 0;
      th_tensor **outs = NULL;
      if (th_program_run(p, 2, in, &nout, &outs) == TH_OK) {
        r = outs[0];
        free(outs);
      }
      th_program_free(p);
    }
  }
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
  return r;
}

static void test_binary_prims_are_rows(void **state) {
  (void)state;
  int n = 0;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (!s || !s->is_prim || !(s->tags & TH_TAG_ELEMENTWISE) || (s->tags & TH_TAG_CONVERT) || s->schema.nparams != 2)
      continue;
    const brow *r = brow_of(s->name);
    if (!r || !r->kind) fail_msg("%s: an elementwise binary prim without a row in ops/binary.def", s->qualname);
    if (!s->cexpr && !(r->flags & TH_BF_NO_FUSE))
      fail_msg("%s: no fuser template and no TH_BF_NO_FUSE opt-out", s->qualname);
    if (s->cexpr && (r->flags & TH_BF_NO_FUSE)) fail_msg("%s: a fuser template and TH_BF_NO_FUSE", s->qualname);
    if (!has_eager_kernel(s->id)) fail_msg("%s: no eager kernel", s->qualname);
    if (!lookup("ltorch", s->name)) fail_msg("%s: no torch-level counterpart ltorch.%s", s->qualname, s->name);
    n++;
  }
  assert_true(n >= 19);
  print_message("%d elementwise binary prims, each a row of binary.def\n", n);
}

static void test_binary_rows_generate_their_ops(void **state) {
  (void)state;
  static const char *const folds[] = {"ARITH", "DIV", "MOD", "FLOAT", "POW", "MAX", "MIN", "BITWISE", "CMP", "NONE"};
  for (int i = 0; i < NBROWS; i++) {
    const brow *r = &BROWS[i];
    const th_symbol *p = lookup("prims", r->name), *t = lookup("ltorch", r->name);
    char ipname[64];
    snprintf(ipname, sizeof ipname, "%s_", r->name);
    const th_symbol *ip = lookup("ltorch", ipname);
    if (!t) fail_msg("row %s: no ltorch.%s", r->name, r->name);
    if (!(t->tags & TH_TAG_ELEMENTWISE)) fail_msg("%s: not tagged ELEMENTWISE", t->qualname);
    assert_non_null(t->decomp);
    if (!strcmp(r->inplace, "INPLACE") != !!ip)
      fail_msg("row %s: %s but ltorch.%s_ %s", r->name, r->inplace, r->name, ip ? "exists" : "is missing");
    if (ip && !(ip->tags & TH_TAG_IN_PLACE)) fail_msg("ltorch.%s_: not tagged IN_PLACE", r->name);
    if (!r->kind) {
      if (p) fail_msg("row %s: a composite row, but prims.%s exists", r->name, r->name);
      continue;
    }
    if (!p) fail_msg("row %s: no prims.%s", r->name, r->name);
    assert_true(p->tags & TH_TAG_ELEMENTWISE);
    assert_true((r->cexpr == NULL) == (p->cexpr == NULL));
    if (r->cexpr) assert_string_equal(r->cexpr, p->cexpr);
    bool known_fold = false;
    for (size_t k = 0; k < sizeof folds / sizeof folds[0]; k++) known_fold |= !strcmp(r->fold, folds[k]);
    if (!known_fold) fail_msg("row %s: unknown fold %s", r->name, r->fold);
    const th_vjp_entry *e = th_vjp_get(p->id);
    if (!e) fail_msg("%s: no vjp entry", p->qualname);
    bool diff = !strcmp(r->kind, "MATH") || !strcmp(r->kind, "FLOAT") || !strcmp(r->kind, "ALL");
    assert_int_equal(e->kind, diff ? TH_VJP_RULE : TH_VJP_NONDIFF);
  }
}

/* Folds prims.<qual>(a, b) of two numbers; sets *got. Returns the status. */
static th_status fold2(const char *qual, th_arg a, th_arg b, double *got) {
  th_trace *tr = th_trace_new(NULL);
  th_arg args[2] = {a, b}, out;
  th_status st = th_trace_call(tr, qual, 2, args, 0, NULL, NULL, &out);
  if (st == TH_OK) {
    if (out.kind != TH_ARG_FLOAT && out.kind != TH_ARG_INT && out.kind != TH_ARG_BOOL)
      fail_msg("%s: folding two numbers gives no number", qual);
    *got = out.kind == TH_ARG_FLOAT ? out.u.f : out.kind == TH_ARG_INT ? (double)out.u.i : (double)out.u.b;
  }
  th_trace_free(tr);
  return st;
}

static void test_binary_eager_and_folding(void **state) {
  (void)state;
  static const double fa[] = {0.25, 1.5, -2.0, 3.0, -0.75, 7.0, 0.5, 2.0};
  static const double fb[] = {2.0, -0.5, 3.0, 1.5, 0.25, -2.0, 4.0, 2.0};
  static const double ia[] = {7, -7, 5, 0, 9, -9, 2, 3};
  static const double ib[] = {2, 3, -3, 4, 1, -2, 5, 3};
  const int n = 8;
  for (int i = 0; i < NBROWS; i++) {
    const brow *r = &BROWS[i];
    if (!r->kind) continue;
    char qual[64];
    snprintf(qual, sizeof qual, "prims.%s", r->name);
    bool floats = strcmp(r->kind, "EXACT") != 0, ints = strcmp(r->kind, "FLOAT") != 0;
    double want;
    int64_t iwant;
    if (floats && !ref_binary_f(r->name, 1, 1, &want)) fail_msg("%s: no float reference in ref_binary_f", qual);
    if (ints && !ref_binary_i(r->name, 1, 1, &iwant)) fail_msg("%s: no integer reference in ref_binary_i", qual);
    if (floats) {
      static const th_dtype fdts[2] = {TH_F32, TH_F64};
      for (int k = 0; k < 2; k++) {
        th_tensor *y = run_eager2(qual, fdts[k], n, fa, fb);
        if (!y) fail_msg("%s: no eager kernel for %s: %s", qual, th_dtype_name(fdts[k]), th_last_error());
        for (int j = 0; j < n; j++) {
          ref_binary_f(r->name, fa[j], fb[j], &want);
          double got = elem(y, j), tol = k == 0 ? 1e-6 * fabs(want) + 1e-7 : 1e-15 * fabs(want);
          if (!(same_double(got, want) || fabs(got - want) <= tol))
            fail_msg("%s(%g, %g) in %s: the kernel gives %.17g, the reference %.17g", qual, fa[j], fb[j],
                     th_dtype_name(fdts[k]), got, want);
        }
        th_tensor_release(y);
      }
    }
    if (ints) {
      th_tensor *y = run_eager2(qual, TH_I64, n, ia, ib);
      if (!y) fail_msg("%s: no eager kernel for int64: %s", qual, th_last_error());
      for (int j = 0; j < n; j++) {
        ref_binary_i(r->name, (int64_t)ia[j], (int64_t)ib[j], &iwant);
        if (elem(y, j) != (double)iwant)
          fail_msg("%s(%g, %g) in int64: the kernel gives %g, the reference %lld", qual, ia[j], ib[j], elem(y, j),
                   (long long)iwant);
      }
      th_tensor_release(y);
    }
    /* number folding agrees with the references, or is the explicit error of fold NONE */
    for (int j = 0; j < n; j++) {
      double got = 0;
      th_status st = fold2(qual, floats ? th_arg_float(fa[j]) : th_arg_int((int64_t)ia[j]),
                           floats ? th_arg_float(fb[j]) : th_arg_int((int64_t)ib[j]), &got);
      if (!strcmp(r->fold, "NONE")) {
        if (st != TH_ERR_NOT_IMPLEMENTED) fail_msg("%s: fold NONE, but two numbers give status %d", qual, (int)st);
        continue;
      }
      if (floats)
        ref_binary_f(r->name, fa[j], fb[j], &want);
      else {
        ref_binary_i(r->name, (int64_t)ia[j], (int64_t)ib[j], &iwant);
        want = (double)iwant;
      }
      if (st == TH_ERR_VALUE && !isfinite(want)) continue; /* Python raises where the kernel gives NaN or inf */
      if (st != TH_OK) fail_msg("%s: folding two numbers fails: %s", qual, th_last_error());
      if (!(same_double(got, want) || fabs(got - want) <= 1e-15 * fabs(want)))
        fail_msg("%s: folding gives %.17g, the reference %.17g", qual, got, want);
      if (ints && floats) { /* two ints fold as ints */
        st = fold2(qual, th_arg_int((int64_t)ia[j]), th_arg_int((int64_t)ib[j]), &got);
        ref_binary_i(r->name, (int64_t)ia[j], (int64_t)ib[j], &iwant);
        want = (double)iwant;
        if (!strcmp(r->name, "pow") && ib[j] < 0) want = pow(ia[j], ib[j]); /* Python: int ** -n is a float */
        if (st != TH_OK || !(got == want || fabs(got - want) <= 1e-15 * fabs(want)))
          fail_msg("%s(%g, %g): folding two ints gives %g (status %d), the reference %.17g", qual, ia[j], ib[j], got,
                   (int)st, want);
      }
    }
  }
}

/* ---- vjp rules ------------------------------------------------------------------------------------------ */

static void test_unary_vjp_cases(void **state) {
  (void)state;
  for (int i = 0; i < NROWS; i++) {
    const urow *r = &ROWS[i];
    if (!r->kind || !(strcmp(r->kind, "MATH") == 0 || strcmp(r->kind, "FLOAT") == 0)) continue;
    const th_symbol *p = lookup("prims", r->name);
    const th_vjp_entry *e = th_vjp_get(p->id);
    assert_non_null(e);
    assert_int_equal(e->kind, TH_VJP_RULE);
    th_trace *tr = th_trace_new(NULL);
    int64_t shape[2] = {2, 3};
    th_arg x = th_arg_value(th_trace_add_tensor_input(tr, "x", TH_F64, CPU, 2, shape));
    th_arg g = th_arg_value(th_trace_add_tensor_input(tr, "g", TH_F64, CPU, 2, shape)), out;
    assert_int_equal(th_trace_call(tr, p->qualname, 1, &x, 0, NULL, NULL, &out), TH_OK);
    const th_bsym *b = tr->bsyms.items[tr->bsyms.n - 1];
    assert_ptr_equal(b->sym, p);
    th_arg grads[1] = {th_arg_none()};
    if (e->fn(tr, b, &g, grads) != TH_OK) fail_msg("%s: the vjp rule fails: %s", p->qualname, th_last_error());
    if (grads[0].kind != TH_ARG_VALUE) fail_msg("%s: the vjp rule gives no gradient", p->qualname);
    assert_int_equal(grads[0].u.value->dtype, TH_F64);
    assert_int_equal(grads[0].u.value->ndim, 2);
    th_trace_free(tr);
  }
}

/* Prims a gradient never reaches: their torch-level op's rule stands in front of them. */
static const char *const NO_VJP_ENTRY[] = {
  "scaled_mm", /* only through ltorch._scaled_mm, whose rule refuses (fp8 GEMMs are not differentiable) */
};

static void test_every_prim_has_a_vjp_entry(void **state) {
  (void)state;
  int missing = 0;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (!s || !s->is_prim || (s->tags & TH_TAG_UTILITY)) continue;
    bool listed = false;
    for (size_t k = 0; k < sizeof NO_VJP_ENTRY / sizeof NO_VJP_ENTRY[0]; k++)
      listed |= !strcmp(NO_VJP_ENTRY[k], s->name);
    if (listed) {
      if (th_vjp_get(s->id)) fail_msg("%s: listed in NO_VJP_ENTRY but has an entry", s->qualname);
      continue;
    }
    if (!th_vjp_get(s->id)) {
      print_error("%s: no vjp rule and not registered as non-differentiable\n", s->qualname);
      missing++;
    }
  }
  assert_int_equal(missing, 0);
}

/* ---- in-place ops ------------------------------------------------------------------------------------------ */

static void test_inplace_ops_have_counterparts(void **state) {
  (void)state;
  static const char *const own[] = {"fill_", "zero_", "copy_"}; /* no out-of-place op of their own */
  /* The in-place samplers (torch/random.c) overwrite their tensor with fresh samples: PyTorch has no
   * out-of-place form of most, and torch.normal / torch.bernoulli take other parameters than
   * Tensor.normal_ / Tensor.bernoulli_ (bernoulli_'s p defaults to 0.5, normal_'s mean and std are floats). */
  static const char *const samplers[] = {"uniform_", "normal_",     "bernoulli_", "exponential_",
                                         "cauchy_",  "log_normal_", "geometric_", "random_"};
  const unsigned ac = TH_TAG_AC_LOWER | TH_TAG_AC_FP32 | TH_TAG_AC_PROMOTE | TH_TAG_AC_FP32_CUDA;
  int n = 0;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (!s || s->is_prim || !(s->tags & TH_TAG_IN_PLACE)) continue;
    n++;
    size_t len = strlen(s->name);
    if (len < 2 || s->name[len - 1] != '_') fail_msg("%s: an in-place op's name ends in '_'", s->qualname);
    char base[64];
    snprintf(base, sizeof base, "%.*s", (int)(len - 1), s->name);
    const th_symbol *o = lookup("ltorch", base);
    bool is_own = false;
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) is_own |= !strcmp(own[k], s->name);
    if (is_own) {
      if (o) fail_msg("%s: listed as having no out-of-place op, but %s exists", s->qualname, o->qualname);
      continue;
    }
    bool is_sampler = false;
    for (size_t k = 0; k < sizeof samplers / sizeof samplers[0]; k++) is_sampler |= !strcmp(samplers[k], s->name);
    if (is_sampler) {
      if (!(s->tags & TH_TAG_RANDOM)) fail_msg("%s: an in-place sampler not tagged RANDOM", s->qualname);
      continue;
    }
    if (!o) fail_msg("%s: no out-of-place counterpart ltorch.%s", s->qualname, base);
    if ((o->tags & ~ac) != (s->tags & ~TH_TAG_IN_PLACE))
      fail_msg("%s: tags %#x, its out-of-place op's %#x (the same but the autocast policy)", s->qualname, s->tags,
               o->tags);
    if (s->schema.nparams > o->schema.nparams) fail_msg("%s: more parameters than %s", s->qualname, o->qualname);
    for (int i = 0; i < s->schema.nparams; i++) {
      const th_param *a = &s->schema.params[i], *b = &o->schema.params[i];
      if (strcmp(a->name, b->name) || a->kwonly != b->kwonly || (i > 0 && a->type != b->type))
        fail_msg("%s: parameter %d (%s) is not %s's", s->qualname, i, a->name, o->qualname);
    }
  }
  assert_true(n >= 60);
  print_message("%d in-place ops\n", n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_unary_prims_are_rows),          cmocka_unit_test(test_rows_generate_their_ops),
    cmocka_unit_test(test_unary_eager_and_folding),       cmocka_unit_test(test_unary_vjp_cases),
    cmocka_unit_test(test_binary_prims_are_rows),         cmocka_unit_test(test_binary_rows_generate_their_ops),
    cmocka_unit_test(test_binary_eager_and_folding),      cmocka_unit_test(test_every_prim_has_a_vjp_entry),
    cmocka_unit_test(test_inplace_ops_have_counterparts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
