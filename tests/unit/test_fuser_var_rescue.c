/* test_fuser_var_rescue.c — the float64 Welford rescue of fused row variances (codegen.c emit_welford):
 * a fused float64 var / var_mean near the top of the range must not overflow where the exact variance is
 * finite (as the eager executor and PyTorch), in each kind of row nest (rows of one or two inner dims,
 * one row reduced whole by parallel passes, transposed rows) and where the passes run on several threads
 * (one row of 60000 elements, 64 rows of 1024, transposed rows). Rows: all 1e306, all 1.7e308, 1e306 with
 * one element an ulp higher (the exact var overflows: inf), an inf first or last, a NaN, ordinary values.
 * References are long double (x87: the sums and squares of float64 values near 1.8e308 do not overflow)
 * or analytic, never the code under test. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "fuser_test_util.h"
#include "fuser_trace_util.h"

/* Long double reference of n doubles x[i * st]: variance (correction corr) and mean. */
static void ref_var_mean(const double *x, int64_t n, int64_t st, double corr, double *var, double *mean) {
  long double s = 0, q = 0;
  for (int64_t i = 0; i < n; i++) s += x[i * st];
  long double u = s / n;
  for (int64_t i = 0; i < n; i++) q += (x[i * st] - u) * (x[i * st] - u);
  *var = (double)(q / (n - corr));
  *mean = (double)u;
}

static void expect_close(double got, double want, const char *what, int c, int row) {
  if (isnan(want) ? isnan(got) : (isinf(want) ? got == want : fabs(got - want) <= 1e-12 * fabs(want))) return;
  fail_msg("case %d, %s of row %d: got %.17g, want %.17g", c, what, row, got, want);
}

/* A row's content: 0 all 1e306 (var 0: the float64 sum rounds), 1 all 1.7e308 (the sum is inf), 2 1e306
 * with one element an ulp higher in the middle (the exact var overflows: inf), 3 an inf first (var and
 * mean NaN: Welford's mean is NaN once a finite element follows an inf), 4 an inf last (var NaN, mean
 * inf), 5 NaN in the middle, 6 ordinary values around 1e3 (the two-pass path). */
static double row_value(int kind, int64_t j, int64_t n) {
  switch (kind) {
    case 0: return 1e306;
    case 1: return 1.7e308;
    case 2: return j == n / 2 ? nextafter(1e306, INFINITY) : 1e306;
    case 3: return j == 0 ? INFINITY : 2.5;
    case 4: return j == n - 1 ? INFINITY : 2.5;
    case 5: return j == n / 2 ? NAN : 2.5;
    default: return 1e3 + 0.001 * (double)((j * 37) % 101);
  }
}

static void test_var_rescue_threads(void **state) {
  (void)state;
  static const struct {
    const char *trace;
    int nrows;
    int64_t rowlen, rowstride, elstride, shape[3];
    int nd;
  } cases[] = {
    /* one row of 60000 (parallel passes) */
    {"def computation(x):\n  # x: \"cpu f64[3, 20000]\"\n  t = prims.mul(x, 1.0)\n"
     "  (v, m) = prims.var_mean(t, (0, 1), correction=1.0)\n  return (v, m)\n",
     1,
     60000,
     60000,
     1,
     {3, 20000},
     2},
    /* 64 rows of 1024 (65536 elements: rows on threads) */
    {"def computation(x):\n  # x: \"cpu f64[64, 1024]\"\n  t = prims.mul(x, 1.0)\n"
     "  (v, m) = prims.var_mean(t, (1,), correction=0.0)\n  return (v, m)\n",
     64,
     1024,
     1024,
     1,
     {64, 1024},
     2},
    /* the same rows transposed (the strided walk on threads) */
    {"def computation(x):\n  # x: \"cpu f64[1024, 64]\"\n  xt = prims.transpose(x, (1, 0))\n"
     "  t = prims.mul(xt, 1.0)\n  (v, m) = prims.var_mean(t, (1,), correction=1.0)\n  return (v, m)\n",
     64,
     1024,
     1,
     64,
     {1024, 64},
     2},
    /* rows of two inner dims, [4, 128, 256] over (1, 2): 32768 elements a row */
    {"def computation(x):\n  # x: \"cpu f64[4, 128, 256]\"\n  t = prims.mul(x, 1.0)\n"
     "  (v, m) = prims.var_mean(t, (1, 2), correction=2.0)\n  return (v, m)\n",
     4,
     32768,
     32768,
     1,
     {4, 128, 256},
     3},
  };
  for (int c = 0; c < (int)(sizeof cases / sizeof *cases); c++) {
    for (int variant = 0; variant < (cases[c].nrows == 1 ? 7 : 1); variant++) {
      th_trace *tr = parse(cases[c].trace);
      th_tensor *x = th_tensor_new(TH_F64, cases[c].nd, cases[c].shape);
      double *xp = th_tensor_data(x);
      for (int r = 0; r < cases[c].nrows; r++) {
        int kind = cases[c].nrows == 1 ? variant : r % 7;
        for (int64_t j = 0; j < cases[c].rowlen; j++)
          xp[r * cases[c].rowstride + j * cases[c].elstride] = row_value(kind, j, cases[c].rowlen);
      }
      th_tensor *in[1] = {x};
      int no = 0;
      th_tensor **out = run_fused(tr, in, 1, &no, true);
      const double *vp = th_tensor_data(out[0]), *mp = th_tensor_data(out[1]);
      double corr = c == 1 ? 0.0 : c == 3 ? 2.0 : 1.0;
      for (int r = 0; r < cases[c].nrows; r++) {
        int kind = cases[c].nrows == 1 ? variant : r % 7;
        double want_v, want_m;
        ref_var_mean(xp + r * cases[c].rowstride, cases[c].rowlen, cases[c].elstride, corr, &want_v, &want_m);
        /* the special rows analytically: constant rows var 0 and the mean exact; one element an ulp
         * (2^964) higher: var ~2^1928 / n, inf, and the mean rounds to 1e306; inf first: NaN both; inf
         * last: var NaN, mean inf (PyTorch's Welford) */
        if (kind == 0 || kind == 1) want_v = 0, want_m = row_value(kind, 0, 1);
        if (kind == 2) want_v = INFINITY, want_m = 1e306;
        if (kind == 3) want_m = NAN, want_v = NAN;
        if (kind == 4) want_m = INFINITY, want_v = NAN;
        expect_close(vp[r], want_v, "var", c, r);
        expect_close(mp[r], want_m, "mean", c, r);
      }
      release_all(out, no);
      th_tensor_release(x);
      th_trace_free(tr);
    }
  }
}

static void expect_close_row(double got, double want, const char *what, int row) {
  if (isnan(want) ? isnan(got) : (isinf(want) ? got == want : fabs(got - want) <= 1e-13 * fabs(want))) return;
  fail_msg("%s of row %d: got %.17g, want %.17g", what, row, got, want);
}

/* Fused var_mean of float64 rows near the top of the range, in each kind of row nest: rows of one inner
 * dim, rows of two inner dims, one row reduced whole (parallel passes) and transposed rows (the strided
 * walk). Each row of 100: all 1e306 (the float64 sum's rounded mean is ~1e290 off, and its square is
 * inf: var must be 0 and the mean exact), all 1.7e308 (the sum itself is inf), 1e306 with one element an
 * ulp higher (the exact var overflows: inf), one inf element (var and mean NaN, as torch.var_mean), and
 * an ordinary row (the two-pass path untouched). */
static void test_f64_var_near_max(void **state) {
  (void)state;
  static const struct {
    const char *trace;
    int nrows, rowlen, rowstride, elstride; /* x's layout as the rows see it */
    int64_t shape[3];
    int nd;
  } cases[] = {
    {"def computation(x):\n  # x: \"cpu f64[5, 100]\"\n  t = prims.mul(x, 1.0)\n"
     "  (v, m) = prims.var_mean(t, (1,), correction=1.0)\n  return (v, m)\n",
     5,
     100,
     100,
     1,
     {5, 100},
     2},
    {"def computation(x):\n  # x: \"cpu f64[2, 5, 20]\"\n  t = prims.mul(x, 1.0)\n"
     "  (v, m) = prims.var_mean(t, (1, 2), correction=1.0)\n  return (v, m)\n",
     2,
     100,
     100,
     1,
     {2, 5, 20},
     3},
    {"def computation(x):\n  # x: \"cpu f64[100]\"\n  t = prims.mul(x, 1.0)\n"
     "  (v, m) = prims.var_mean(t, (0,), correction=0.0)\n  return (v, m)\n",
     1,
     100,
     100,
     1,
     {100},
     1},
    {"def computation(x):\n  # x: \"cpu f64[100, 5]\"\n  xt = prims.transpose(x, (1, 0))\n"
     "  t = prims.mul(xt, 1.0)\n  (v, m) = prims.var_mean(t, (1,), correction=1.0)\n  return (v, m)\n",
     5,
     100,
     1,
     5,
     {100, 5},
     2},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    th_trace *tr = parse(cases[c].trace);
    th_tensor *x = th_tensor_new(TH_F64, cases[c].nd, cases[c].shape);
    double *xp = th_tensor_data(x);
    for (int r = 0; r < cases[c].nrows; r++)
      for (int j = 0; j < cases[c].rowlen; j++) {
        double v = r == 0   ? 1e306
                   : r == 1 ? 1.7e308
                   : r == 2 ? (j == 37 ? nextafter(1e306, INFINITY) : 1e306)
                   : r == 3 ? (j == 5 ? INFINITY : 2.5)
                            : 1e3 + 0.001 * ((j * 37) % 101);
        xp[r * cases[c].rowstride + j * cases[c].elstride] = v;
      }
    th_tensor *in[1] = {x};
    int no = 0;
    th_tensor **out = run_fused(tr, in, 1, &no, true);
    const double *vp = th_tensor_data(out[0]), *mp = th_tensor_data(out[1]);
    double corr = c == 2 ? 0.0 : 1.0;
    for (int r = 0; r < cases[c].nrows; r++) {
      double want_v, want_m;
      ref_var_mean(xp + r * cases[c].rowstride, cases[c].rowlen, cases[c].elstride, corr, &want_v, &want_m);
      if (r < 2) assert_true(want_v == 0.0); /* the reference itself: equal elements */
      if (r == 2) assert_true(isinf(want_v));
      if (r == 3) want_m = NAN; /* PyTorch's Welford: inf - inf once a finite element follows the inf */
      expect_close_row(vp[r], want_v, "var", r);
      expect_close_row(mp[r], want_m, "mean", r);
    }
    release_all(out, no);
    th_tensor_release(x);
    th_trace_free(tr);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_f64_var_near_max),
    cmocka_unit_test(test_var_rescue_threads),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
