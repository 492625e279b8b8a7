/* test_fuser_columns.c — the fuser's column nests (nest.c; codegen.c, lower_cols): reductions over the
 * leading dims (x.sum(0), bias gradients, the convert of a bf16 column sum) fused with what computes
 * their input and what uses their result. Checks:
 *   - the plan: a prefix of reduced dims (size-1 dims aside) is a column nest with r = its length (var
 *     too: Welford per column); a set of dims that is neither a prefix nor a suffix, and a column result
 *     broadcast back over the domain, are refused there (they stay eager, or in another region);
 *   - values against references computed here from the same elements: int64 sums, amax and amin exact;
 *     float sums within the (n - 1) u sum|x| bound of any order (Higham) of a float64 sum; var (and
 *     var_mean's mean) against a two-pass long double reference within 1e-9 relative before the
 *     rounding to the dtype; over f32, bf16,
 *     f16, f64 and int64 inputs, reduced prefixes of one and two dims, kept blocks of one and two dims,
 *     a transposed input, a bias broadcast over the reduced dim in the prologue, a per-column input in
 *     the epilogue, a FULL output stored by the same walk, NaN and infinities, empty reductions (sum 0),
 *     1 to 3 threads (each thread's range of rows and the merge in thread order) and sizes above the
 *     parallel threshold;
 *   - a fused column amax/prod/sum when OpenMP gives the kernel fewer threads than the launcher sized its
 *     scratch for (omp_set_dynamic with a large thread count, as OMP_DYNAMIC=true or OMP_THREAD_LIMIT
 *     do): the merge reads only accumulator rows some thread initialized;
 *   - a fused column sum over an empty reduced dim is 0; amax over it is refused (prims.amax's meta). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "fuser_test_util.h"

/* ---- the plan ------------------------------------------------------------------------------------------ */

/* The partitioned trace's regions: for each top-level bsym i, whether it is a region holding prim id. */
static int regions_with(const th_trace *p, th_op_id id) {
  int n = 0;
  for (int i = 0; i < p->bsyms.n; i++) {
    const th_bsym *b = p->bsyms.items[i];
    if (b->sym->id != TH_OP_DYNAMIC) continue;
    for (int k = 0; k < b->nsubs; k++)
      if (b->subs[k]->sym->id == id) {
        n++;
        break;
      }
  }
  return n;
}

static th_trace *partitioned(const char *text) {
  th_trace *tr = parse(text), *p = NULL;
  if (th_fuser_partition(tr, TH_FUSER_DATAFLOW, NULL, 0, &p) != TH_OK) fail_msg("partition: %s", th_last_error());
  th_trace_free(tr);
  return p;
}

/* The first region's plan: its one nest must be a column nest with r reduced leading dims. */
static void expect_column_nest(const char *text, int nmembers, int r) {
  th_trace *p = partitioned(text);
  const th_bsym *b = p->bsyms.items[0];
  if (b->sym->id != TH_OP_DYNAMIC) fail_msg("not fused:\n%s", text);
  assert_int_equal(b->nsubs, nmembers);
  th_fz_plan plan;
  assert_int_equal(th_fz_plan_build((const th_bsym *const *)b->subs, b->nsubs, &plan), TH_OK);
  assert_int_equal(plan.nnest, 1);
  assert_true(plan.nest[0].col);
  assert_int_equal(plan.nest[0].r, r);
  th_fz_plan_free(&plan);
  th_trace_free(p);
}

static void test_column_plan(void **state) {
  (void)state;
  /* sum over dim 0 with its prologue and epilogue: one region, one column nest */
  expect_column_nest("def computation(x):\n  # x: \"cpu f32[6, 10]\"\n"
                     "  t0 = prims.mul(x, x)\n  t1 = prims.sum(t0, (0,))\n  t2 = prims.sqrt(t1)\n  return t2\n",
                     3, 1);
  /* two leading dims, and a size-1 dim among them */
  expect_column_nest("def computation(x):\n  # x: \"cpu f32[4, 5, 6]\"\n"
                     "  t0 = prims.neg(x)\n  t1 = prims.amax(t0, (0, 1))\n  return t1\n",
                     2, 2);
  expect_column_nest("def computation(x):\n  # x: \"cpu f32[4, 1, 6]\"\n"
                     "  t0 = prims.neg(x)\n  t1 = prims.sum(t0, (0,))\n  return t1\n",
                     2, 1);
  /* the bf16 column sum as ltorch writes it: convert, sum, convert */
  expect_column_nest("def computation(x):\n  # x: \"cpu bf16[64, 32]\"\n"
                     "  t0 = prims.convert_element_type(x, dtypes.float32)\n  t1 = prims.sum(t0, (0,))\n"
                     "  t2 = prims.convert_element_type(t1, dtypes.bfloat16)\n  return t2\n",
                     3, 1);
  /* neither prefix nor suffix: the reduction stays eager */
  th_trace *p = partitioned("def computation(x):\n  # x: \"cpu f32[4, 5, 6]\"\n"
                            "  t0 = prims.neg(x)\n  t1 = prims.sum(t0, (0, 2))\n  t2 = prims.sqrt(t1)\n  return t2\n");
  assert_int_equal(regions_with(p, TH_OP_prims_sum), 0);
  th_trace_free(p);
  /* var over the leading dim: Welford per column, one walk */
  expect_column_nest(
    "def computation(x):\n  # x: \"cpu f32[6, 10]\"\n"
    "  t0 = prims.mul(x, 2.0)\n  t1 = prims.var(t0, (0,), correction=1)\n  t2 = prims.sqrt(t1)\n  return t2\n",
    3, 1);
  /* a column result broadcast back over the domain (x - x.mean(0)) needs a second walk: the subtraction
   * is not in the sum's region */
  p = partitioned("def computation(x):\n  # x: \"cpu f32[6, 10]\"\n"
                  "  t0 = prims.mul(x, 2.0)\n  t1 = prims.sum(t0, (0,))\n"
                  "  t2 = prims.broadcast_in_dim(t1, (6, 10), (1,))\n  t3 = prims.sub(x, t2)\n  return t3\n");
  for (int i = 0; i < p->bsyms.n; i++) {
    const th_bsym *b = p->bsyms.items[i];
    if (b->sym->id != TH_OP_DYNAMIC) continue;
    bool has_sum = false, has_sub = false;
    for (int k = 0; k < b->nsubs; k++) {
      has_sum |= b->subs[k]->sym->id == TH_OP_prims_sum;
      has_sub |= b->subs[k]->sym->id == TH_OP_prims_sub;
    }
    if (has_sum && has_sub) fail_msg("a column sum and a use of it broadcast over its domain share a region");
  }
  th_trace_free(p);
}

/* ---- values ---------------------------------------------------------------------------------------------- */

typedef struct {
  th_dtype dt;      /* x's dtype */
  int nd, r;        /* x's rank; the first r dims are reduced */
  int64_t shape[4]; /* x's logical shape */
  bool transposed;  /* x arrives as its 2-D transpose (prims.transpose in the trace) */
  const char *op;   /* sum, prod, amax, amin */
  bool bias;        /* prologue adds b (the kept shape) broadcast over the reduced dims */
  bool scale;       /* epilogue multiplies by w (the kept shape) */
  bool full_out;    /* the prologue's value is an output too */
  int threads;
} ccase;

static const char *dts(th_dtype d) {
  switch (d) {
    case TH_F32: return "f32";
    case TH_BF16: return "bf16";
    case TH_F16: return "f16";
    case TH_F64: return "f64";
    default: return "i64";
  }
}

static void dims_text(char *buf, size_t n, int nd, const int64_t *s, bool brackets) {
  size_t k = (size_t)snprintf(buf, n, "%s", brackets ? "[" : "(");
  for (int d = 0; d < nd; d++) k += (size_t)snprintf(buf + k, n - k, "%lld%s", (long long)s[d], d + 1 < nd ? ", " : "");
  snprintf(buf + k, n - k, "%s", brackets ? "]" : (nd == 1 ? ",)" : ")"));
}

/* Deterministic element e of an input: small integers for i64, else values in [-4, 4) with NaN and
 * infinities planted (specials) at chosen elements. */
static double value_at(int64_t e, th_dtype dt, bool specials) {
  uint64_t h = (uint64_t)(e + 1) * 0x9e3779b97f4a7c15ull;
  if (dt == TH_I64) return (double)((int64_t)(h >> 40) % 19 - 9);
  if (specials && h % 1009 == 3) return NAN;
  if (specials && h % 997 == 5) return (h & 8) ? INFINITY : -INFINITY;
  return (double)(h >> 11) * 0x1p-53 * 8.0 - 4.0;
}

static void column_case(const ccase *c) {
  int nd = c->nd, r = c->r;
  int64_t numel = 1, nred = 1, nk = 1;
  for (int d = 0; d < nd; d++) numel *= c->shape[d];
  for (int d = 0; d < r; d++) nred *= c->shape[d];
  for (int d = r; d < nd; d++) nk *= c->shape[d];
  bool prod = !strcmp(c->op, "prod");
  const char *dt = dts(c->dt);
  char xs[64], ks[64], kt[64], red[32] = "(", ins[64];
  dims_text(xs, sizeof xs, nd, c->shape, true);
  dims_text(ks, sizeof ks, nd - r, c->shape + r, true);
  dims_text(kt, sizeof kt, nd, c->shape, false);
  for (int d = 0; d < r; d++) snprintf(red + strlen(red), sizeof red - strlen(red), "%d, ", d);
  red[strlen(red) - 2] = ')', red[strlen(red) - 1] = 0;
  if (c->transposed) { /* x arrives as xt [s1, s0] */
    int64_t ts[2] = {c->shape[1], c->shape[0]};
    dims_text(ins, sizeof ins, 2, ts, true);
  } else {
    snprintf(ins, sizeof ins, "%s", xs);
  }
  /* the trace */
  char text[2048];
  size_t n = 0;
  n += (size_t)snprintf(text + n, sizeof text - n, "def computation(xi%s%s):\n", c->bias ? ", b" : "",
                        c->scale ? ", w" : "");
  n += (size_t)snprintf(text + n, sizeof text - n, "  # xi: \"cpu %s%s\"\n", dt, ins);
  if (c->bias) n += (size_t)snprintf(text + n, sizeof text - n, "  # b: \"cpu %s%s\"\n", dt, ks);
  if (c->scale) n += (size_t)snprintf(text + n, sizeof text - n, "  # w: \"cpu %s%s\"\n", dt, ks);
  n += (size_t)snprintf(text + n, sizeof text - n, "  x = %s\n",
                        c->transposed ? "prims.transpose(xi, (1, 0))" : "ltorch.neg(xi)");
  const char *cur = "x";
  if (c->bias) {
    char bd[32] = "(";
    for (int d = r; d < nd; d++) snprintf(bd + strlen(bd), sizeof bd - strlen(bd), "%d, ", d);
    bd[strlen(bd) - 2] = ')', bd[strlen(bd) - 1] = 0;
    if (nd - r == 1) snprintf(bd, sizeof bd, "(%d,)", r);
    n += (size_t)snprintf(text + n, sizeof text - n,
                          "  bb = prims.broadcast_in_dim(b, %s, %s)\n  xb = ltorch.add(x, bb, alpha=None)\n", kt, bd);
    cur = "xb";
  }
  /* y = 1.5 x (int64: 3 x); a product multiplies by 1 (its factors stay near 1 in magnitude) */
  n += (size_t)snprintf(text + n, sizeof text - n, "  y = ltorch.mul(%s, %s)\n", cur,
                        prod              ? (c->dt == TH_I64 ? "1" : "1.0")
                        : c->dt == TH_I64 ? "3"
                                          : "1.5");
  bool var = !strcmp(c->op, "var");
  if (var)
    n += (size_t)snprintf(text + n, sizeof text - n, "  s = ltorch.var(y, %s, correction=1)\n", r == 1 ? "(0,)" : red);
  else
    n += (size_t)snprintf(text + n, sizeof text - n, "  s = ltorch.%s(y, %s, False)\n", c->op,
                          prod     ? "0"
                          : r == 1 ? "(0,)"
                                   : red);
  const char *res = "s";
  if (c->scale) {
    n += (size_t)snprintf(text + n, sizeof text - n, "  o = ltorch.mul(s, w)\n");
    res = "o";
  }
  snprintf(text + n, sizeof text - n, "  return (%s%s)\n", res, c->full_out ? ", y" : "");
  th_trace *tr = parse(text);
  /* inputs: x's logical elements value_at(flat logical index) */
  int nin = 1 + c->bias + c->scale;
  th_tensor *in[3];
  int64_t ishape[4];
  memcpy(ishape, c->shape, sizeof ishape);
  if (c->transposed) ishape[0] = c->shape[1], ishape[1] = c->shape[0];
  in[0] = th_tensor_new(c->dt, nd, ishape);
  size_t es = th_dtype_size(c->dt);
  bool specials = !prod;
  for (int64_t e = 0; e < numel; e++) {
    int64_t at = e;
    if (c->transposed) at = (e % c->shape[1]) * c->shape[0] + e / c->shape[1];
    double v = value_at(e, c->dt, specials);
    if (prod && c->dt != TH_I64) v = 1.0 + v / 64.0; /* near 1: no overflow */
    if (prod && c->dt == TH_I64) v = (double)(e % 3 == 0 ? -1 : 1);
    if (c->dt == TH_I64)
      th_store_i64((char *)th_tensor_data(in[0]) + at * (int64_t)es, c->dt, (int64_t)v);
    else
      th_store_f64((char *)th_tensor_data(in[0]) + at * (int64_t)es, c->dt, v);
  }
  for (int k = 1; k < nin; k++) {
    in[k] = th_tensor_new(c->dt, nd - r, c->shape + r);
    for (int64_t j = 0; j < nk; j++) {
      double v = c->dt == TH_I64 ? (double)(j % 5 - 2) : 0.25 * (double)(j % 7) - 0.75;
      if (c->dt == TH_I64)
        th_store_i64((char *)th_tensor_data(in[k]) + j * (int64_t)es, c->dt, (int64_t)v);
      else
        th_store_f64((char *)th_tensor_data(in[k]) + j * (int64_t)es, c->dt, v);
    }
  }
  /* run */
  assert_int_equal(th_set_num_threads(c->threads), TH_OK);
  int nout = 0;
  th_tensor **out = run_fused(tr, in, nin, &nout, true);
  assert_int_equal(th_set_num_threads(0), TH_OK);
  assert_int_equal(nout, 1 + c->full_out);
  /* references, column by column: the elements as the kernel sees them (each op rounded to the dtype) */
  for (int64_t k = 0; k < nk; k++) {
    long double acc = prod ? 1 : 0, sabs = 0;
    double ext = !strcmp(c->op, "amax") ? -INFINITY : INFINITY;
    int64_t iacc = prod ? 1 : 0, iext = !strcmp(c->op, "amax") ? INT64_MIN : INT64_MAX;
    bool nan = false;
    for (int64_t q = 0; q < nred; q++) {
      int64_t e = q * nk + k;
      double x = th_load_f64((const char *)th_tensor_data(in[0]) +
                               (c->transposed ? (e % c->shape[1]) * c->shape[0] + e / c->shape[1] : e) * (int64_t)es,
                             c->dt);
      if (c->dt == TH_I64) {
        int64_t xi = -(int64_t)x;
        if (c->transposed) xi = (int64_t)x;
        if (c->bias) xi += th_load_i64((const char *)th_tensor_data(in[1]) + k * (int64_t)es, c->dt);
        xi *= prod ? 1 : 3;
        if (!strcmp(c->op, "sum")) iacc = (int64_t)((uint64_t)iacc + (uint64_t)xi);
        if (prod) iacc = (int64_t)((uint64_t)iacc * (uint64_t)xi);
        if (!strcmp(c->op, "amax") && xi > iext) iext = xi;
        if (!strcmp(c->op, "amin") && xi < iext) iext = xi;
        continue;
      }
      char buf[8];
      double y = c->transposed ? x : -x;
      if (c->bias) {
        y += th_load_f64((const char *)th_tensor_data(in[1]) + k * (int64_t)es, c->dt);
        th_store_f64(buf, c->dt, y), y = th_load_f64(buf, c->dt);
      }
      y *= prod ? 1.0 : 1.5;
      th_store_f64(buf, c->dt, y), y = th_load_f64(buf, c->dt);
      if (c->full_out) { /* y itself is an output: bit for bit */
        double got = th_load_f64((const char *)th_tensor_data(out[1]) + e * (int64_t)es, c->dt);
        if (!(got == y || (isnan(got) && isnan(y))))
          fail_msg("%s: FULL output y[%lld] = %.17g, want %.17g", text, (long long)e, got, y);
      }
      if (y != y || (var && isinf(y))) nan = true;
      acc = prod ? acc * y : acc + y;
      sabs += fabsl((long double)y);
      if (!strcmp(c->op, "amax") && y > ext) ext = y;
      if (!strcmp(c->op, "amin") && y < ext) ext = y;
    }
    double w = c->scale ? th_load_f64((const char *)th_tensor_data(in[1 + c->bias]) + k * (int64_t)es, c->dt) : 1;
    if (c->dt == TH_I64) {
      int64_t want = !strcmp(c->op, "sum") || !strcmp(c->op, "prod") ? iacc : iext;
      if (c->scale) want = (int64_t)((uint64_t)want * (uint64_t)(int64_t)w); /* int64 wraps, as the kernels */
      int64_t got = th_load_i64((const char *)th_tensor_data(out[0]) + k * 8, TH_I64);
      if (got != want)
        fail_msg("%s\nthreads %d column %lld: got %lld want %lld", text, c->threads, (long long)k, (long long)got,
                 (long long)want);
      continue;
    }
    double got = th_load_f64((const char *)th_tensor_data(out[0]) + k * (int64_t)es, c->dt);
    char buf[8];
    if (var) { /* two passes over the same y values in long double */
      long double mean = acc / (long double)nred, m2 = 0;
      for (int64_t q = 0; q < nred; q++) {
        int64_t e = q * nk + k;
        double x = th_load_f64((const char *)th_tensor_data(in[0]) +
                                 (c->transposed ? (e % c->shape[1]) * c->shape[0] + e / c->shape[1] : e) * (int64_t)es,
                               c->dt);
        double y = c->transposed ? x : -x;
        if (c->bias) {
          y += th_load_f64((const char *)th_tensor_data(in[1]) + k * (int64_t)es, c->dt);
          th_store_f64(buf, c->dt, y), y = th_load_f64(buf, c->dt);
        }
        y *= 1.5;
        th_store_f64(buf, c->dt, y), y = th_load_f64(buf, c->dt);
        m2 += ((long double)y - mean) * ((long double)y - mean);
      }
      double want = nred > 1 ? (double)(m2 / (long double)(nred - 1)) : NAN;
      if (nan || isinf((double)acc) || isnan((double)acc)) want = NAN;
      th_store_f64(buf, c->dt, want);
      double rounded = th_load_f64(buf, c->dt);
      if (c->scale) th_store_f64(buf, c->dt, rounded * w), rounded = th_load_f64(buf, c->dt);
      double k2 = c->dt == TH_BF16 ? 65536 : c->dt == TH_F16 ? 8192 : 1, u = c->dt == TH_F64 ? 0x1p-53 : 0x1p-24;
      double bound =
        (1e-9 * fabs(want) + 2 * u * k2 * fabs(want)) * fmax(1.0, fabs(w)) + 2 * u * k2 * fabs(rounded) + 1e-300;
      bool ok = isnan(rounded) ? isnan(got) : isinf(rounded) ? got == rounded : fabs(got - rounded) <= bound;
      if (!ok)
        fail_msg("%s\nthreads %d column %lld: var got %.17g want %.17g (bound %.3g)", text, c->threads, (long long)k,
                 got, rounded, bound);
      continue;
    }
    if (!strcmp(c->op, "amax") || !strcmp(c->op, "amin")) {
      double want = nan ? NAN : ext;
      if (c->scale) th_store_f64(buf, c->dt, want * w), want = th_load_f64(buf, c->dt);
      if (!(got == want || (isnan(got) && isnan(want))))
        fail_msg("%s\nthreads %d column %lld: got %.17g want %.17g", text, c->threads, (long long)k, got, want);
      continue;
    }
    /* sum / prod: within the bound of any order, then one rounding to the dtype (and the epilogue's) */
    double want = (double)acc;
    th_store_f64(buf, c->dt, want);
    double rounded = th_load_f64(buf, c->dt);
    if (c->scale) th_store_f64(buf, c->dt, rounded * w), rounded = th_load_f64(buf, c->dt);
    if (isnan(want) || isinf(want)) {
      if (!(got == rounded || (isnan(got) && isnan(rounded))))
        fail_msg("%s\nthreads %d column %lld: got %.17g want %.17g", text, c->threads, (long long)k, got, rounded);
      continue;
    }
    double u = c->dt == TH_F64 ? 0x1p-53 : 0x1p-24;                    /* the kernel accumulates in float64 */
    double k2 = c->dt == TH_BF16 ? 65536 : c->dt == TH_F16 ? 8192 : 1; /* 2 u k2 |x|: a rounding to the dtype */
    double order = prod ? (double)nred * 0x1p-52 * fabs(want) : (double)nred * 0x1p-53 * (double)sabs;
    double bound = (order + 2 * u * k2 * fabs(want)) * fmax(1.0, fabs(w)) + 2 * u * k2 * fabs(rounded) + 1e-300;
    if (fabs(got - rounded) > bound)
      fail_msg("%s\nthreads %d column %lld: got %.17g want %.17g (bound %.3g)", text, c->threads, (long long)k, got,
               rounded, bound);
  }
  release_all(out, nout);
  for (int k = 0; k < nin; k++) th_tensor_release(in[k]);
  th_trace_free(tr);
}

static void test_column_values(void **state) {
  (void)state;
  static const th_dtype dtv[] = {TH_F32, TH_BF16, TH_F16, TH_F64, TH_I64};
  static const char *const ops[] = {"sum", "amax", "amin", "prod", "var"};
  int runs = 0;
  for (int di = 0; di < 5; di++)
    for (int oi = 0; oi < 5; oi++)
      for (int threads = 1; threads <= 3; threads++) {
        if (oi == 4 && dtv[di] == TH_I64) continue; /* var takes floats */
        /* [R, C] above the parallel threshold, with every variant in turn */
        ccase c = {dtv[di], 2, 1, {2051, 37, 0, 0}, false, ops[oi], false, false, false, threads};
        column_case(&c), runs++;
        c.bias = true, c.scale = true;
        column_case(&c), runs++;
        c.bias = false, c.scale = false, c.full_out = true;
        column_case(&c), runs++;
        c.full_out = false;
        if (dtv[di] != TH_I64) {
          ccase t = {dtv[di], 2, 1, {517, 130, 0, 0}, true, ops[oi], false, false, false, threads};
          column_case(&t), runs++;
        }
        /* two reduced dims, one kept; one reduced dim, two kept */
        ccase a = {dtv[di], 3, 2, {13, 29, 41, 0}, false, ops[oi], false, true, false, threads};
        if (oi != 3) column_case(&a), runs++; /* prod takes one dim */
        ccase b = {dtv[di], 3, 1, {301, 7, 19, 0}, false, ops[oi], true, false, false, threads};
        column_case(&b), runs++;
      }
  /* fewer rows than threads, one row, and an empty reduction (sum 0, prod 1) */
  ccase f = {TH_F32, 2, 1, {2, 40000, 0, 0}, false, "sum", true, false, false, 3};
  column_case(&f), runs++;
  ccase g = {TH_F32, 2, 1, {1, 50, 0, 0}, false, "amax", false, false, true, 2};
  column_case(&g), runs++;
  ccase e = {TH_F32, 2, 1, {0, 9, 0, 0}, false, "sum", false, true, false, 2};
  column_case(&e), runs++;
  ccase e2 = {TH_F64, 2, 1, {0, 9, 0, 0}, false, "prod", false, false, false, 1};
  column_case(&e2), runs++;
  ccase e3 = {TH_F32, 2, 1, {1, 9, 0, 0}, false, "var", false, false, true, 1}; /* one row: 0 / 0 = NaN */
  column_case(&e3), runs++;
  print_message("column nests: %d cases checked against references\n", runs);
}

static const char *const FUSED[] = {"fuser", "eager"};

static double at(const th_tensor *t, int64_t i) {
  th_dtype d = th_tensor_dtype(t);
  return th_load_f64((const char *)th_tensor_data(t) + i * (int64_t)th_dtype_size(d), d);
}
static void put(th_tensor *t, int64_t i, double v) {
  th_dtype d = th_tensor_dtype(t);
  th_store_f64((char *)th_tensor_data(t) + i * (int64_t)th_dtype_size(d), d, v);
}

static void test_fused_columns_fewer_threads(void **state) {
  (void)state;
  /* 4096 rows of 64 columns, every element in [-2, -1.5]: column amax < -1, prod of 4096 factors
   * near 1 is far from 0, sum exact (multiples of 2^-6 with small sums) */
  enum { R = 4096, K = 64 };
  th_trace *tr = parse("def computation(x):\n  # x: \"cpu f32[4096, 64]\"\n"
                       "  t0 = prims.mul(x, 1.0)\n  t1 = prims.amax(t0, (0,))\n"
                       "  t2 = prims.sum(t0, (0,))\n  return (t1, t2)\n");
  th_trace *tp = parse("def computation(x):\n  # x: \"cpu f64[4096, 64]\"\n"
                       "  t0 = prims.add(x, 0.0)\n  t1 = prims.prod(t0, (0,))\n  return t1\n");
  int64_t shape[2] = {R, K};
  th_tensor *x = th_tensor_new(TH_F32, 2, shape), *xp = th_tensor_new(TH_F64, 2, shape);
  double want_max[K], want_sum[K], want_prod[K];
  for (int k = 0; k < K; k++) want_max[k] = -INFINITY, want_sum[k] = 0, want_prod[k] = 1;
  for (int64_t r = 0; r < R; r++)
    for (int k = 0; k < K; k++) {
      double v = -2.0 + (double)((r * 7 + k * 13) % 33) / 64.0; /* [-2, -1.5] */
      put(x, r * K + k, v);
      double f = 1.0 + (v + 1.75) / 4096.0; /* near 1 */
      put(xp, r * K + k, f);
      if (v > want_max[k]) want_max[k] = v;
      want_sum[k] += v;
      want_prod[k] *= f;
    }
  /* the launcher sizes the scratch for omp_get_max_threads() threads; with dynamic adjustment the
   * kernel's team is at most the processors' count */
  int procs = omp_get_num_procs();
  int dyn = omp_get_dynamic();
  omp_set_dynamic(1);
  assert_int_equal(th_set_num_threads(procs * 4 + 4), TH_OK);
  int nout = 0, noutp = 0;
  th_tensor **out = run_execs(tr, FUSED, 2, &x, 1, &nout);
  th_tensor **outp = run_execs(tp, FUSED, 2, &xp, 1, &noutp);
  assert_int_equal(th_set_num_threads(0), TH_OK);
  omp_set_dynamic(dyn);
  if (!out || !outp) fail_msg("run: %s", th_last_error());
  for (int k = 0; k < K; k++) {
    if (at(out[0], k) != want_max[k])
      fail_msg("fused column amax with fewer threads than requested: column %d got %.9g want %.9g", k, at(out[0], k),
               want_max[k]);
    if (at(out[1], k) != want_sum[k])
      fail_msg("fused column sum with fewer threads than requested: column %d got %.9g want %.9g", k, at(out[1], k),
               want_sum[k]);
    if (!(fabs(at(outp[0], k) - want_prod[k]) <= 1e-12 * fabs(want_prod[k])))
      fail_msg("fused column prod with fewer threads than requested: column %d got %.17g want %.17g", k, at(outp[0], k),
               want_prod[k]);
  }
  release_all(out, nout);
  release_all(outp, noutp);
  th_tensor_release(x);
  th_tensor_release(xp);
  th_trace_free(tr);
  th_trace_free(tp);
}

static void test_fused_columns_empty(void **state) {
  (void)state;
  int64_t shape[2] = {0, 9};
  th_tensor *x = th_tensor_new(TH_F32, 2, shape);
  th_trace *ts =
    parse("def computation(x):\n  # x: \"cpu f32[0, 9]\"\n  t0 = prims.mul(x, 2.0)\n  t1 = prims.sum(t0, (0,))\n"
          "  t2 = prims.add(t1, 1.0)\n  return t2\n");
  int nout = 0;
  th_tensor **out = run_fused(ts, &x, 1, &nout, true); /* must fuse */
  for (int k = 0; k < 9; k++) assert_true(at(out[0], k) == 1.0);
  release_all(out, nout);
  th_trace_free(ts);
  /* amax over the empty dim: refused already by prims.amax's meta, with PyTorch's message */
  th_trace *ta = NULL;
  assert_int_not_equal(th_trace_parse("def computation(x):\n  # x: \"cpu f32[0, 9]\"\n  t0 = prims.mul(x, 2.0)\n"
                                      "  t1 = prims.amax(t0, (0,))\n  return t1\n",
                                      "<test>", &ta),
                       TH_OK);
  if (!strstr(th_last_error(), "non-zero size"))
    fail_msg("amax over an empty dim: unexpected error: %s", th_last_error());
  th_tensor_release(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_column_plan),
    cmocka_unit_test(test_column_values),
    cmocka_unit_test(test_fused_columns_fewer_threads),
    cmocka_unit_test(test_fused_columns_empty),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
