/* test_eager_reductions.c — the eager executor's reduction fast paths (src/executors/eager/reduction.c:
 * the row and column paths), against references computed here from the input elements (amax, amin, int
 * sums exact; float sums of exactly representable values exact), never from the code under test:
 *   - var of a float64 row whose sum overflows (every element 1e306): 0, as PyTorch (Welford), also on
 *     the column path;
 *   - sums of all -0.0 are +0.0 (PyTorch), row and column layouts, every float dtype, 1 and 3 threads;
 *     the fused sum of neg(+0.0) alike;
 *   - row amax/amin with one NaN, -inf or inf at every lane position of rows of 1..97 elements;
 *   - column amax/sum at 8191/8192/8193 outputs (the column path's limit) over a bf16 input whose data
 *     starts at an odd element (unaligned for 4-byte loads). */
#define _POSIX_C_SOURCE 200809L
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

#include <cmocka.h>

#include "core/scalar.h"
#include "thunder/thunder.h"

#include "fuser_test_util.h"

static const char *const EAGER[] = {"eager"};

static double at(const th_tensor *t, int64_t i) {
  th_dtype d = th_tensor_dtype(t);
  return th_load_f64((const char *)th_tensor_data(t) + i * (int64_t)th_dtype_size(d), d);
}
static void put(th_tensor *t, int64_t i, double v) {
  th_dtype d = th_tensor_dtype(t);
  th_store_f64((char *)th_tensor_data(t) + i * (int64_t)th_dtype_size(d), d, v);
}

/* ---- eager var of a float64 row whose sum overflows ----------------------------------------------------- */

static void test_var_f64_sum_overflow(void **state) {
  (void)state;
  /* [4, 100] of 1e306: every row's (and column's) variance is 0 (PyTorch 1.13: torch.full((4, 100),
   * 1e306, dtype=torch.float64).var(1) == 0, Welford); the row sum 1e308 * ... overflows float64 */
  const char *rows =
    "def computation(x):\n  # x: \"cpu f64[4, 100]\"\n  t0 = prims.var(x, (1,), correction=1)\n  return t0\n";
  const char *cols =
    "def computation(x):\n  # x: \"cpu f64[100, 4]\"\n  t0 = prims.var(x, (0,), correction=1)\n  return t0\n";
  for (int layout = 0; layout < 2; layout++) {
    th_trace *tr = parse(layout ? cols : rows);
    int64_t shape[2] = {layout ? 100 : 4, layout ? 4 : 100};
    th_tensor *x = th_tensor_new(TH_F64, 2, shape);
    for (int64_t i = 0; i < 400; i++) put(x, i, 1e306);
    int nout = 0;
    th_tensor **out = run_execs(tr, EAGER, 1, &x, 1, &nout);
    if (!out) fail_msg("run: %s", th_last_error());
    for (int k = 0; k < 4; k++)
      if (at(out[0], k) != 0.0)
        fail_msg("eager var over the %s of constant 1e306 (float64): output %d is %g, PyTorch gives 0",
                 layout ? "columns" : "rows", k, at(out[0], k));
    release_all(out, nout);
    th_tensor_release(x);
    th_trace_free(tr);
  }
}

/* ---- all -0.0 sums ----------------------------------------------------------------------------------------- */

static const char *dname(th_dtype d) {
  return d == TH_F32 ? "f32" : d == TH_BF16 ? "bf16" : d == TH_F16 ? "f16" : "f64";
}

static void test_negzero_sums(void **state) {
  (void)state;
  static const th_dtype dts[] = {TH_F32, TH_BF16, TH_F16, TH_F64};
  static const int64_t lens[] = {1, 2, 31, 32, 33, 64, 65, 300};
  for (int di = 0; di < 4; di++)
    for (int li = 0; li < 8; li++)
      for (int dim = 0; dim < 2; dim++)
        for (int fused = 0; fused < 2; fused++)
          for (int threads = 1; threads <= 3; threads += 2) {
            int64_t n = lens[li];
            char text[512];
            /* [3, n] summed over dim 1 (rows) or [n, 3] over dim 0 (columns); fused: the sum of neg(+0.0) */
            int64_t shape[2] = {dim ? 3 : n, dim ? n : 3};
            if (fused)
              snprintf(text, sizeof text,
                       "def computation(x):\n  # x: \"cpu %s[%lld, %lld]\"\n  t0 = ltorch.neg(x)\n"
                       "  t1 = ltorch.sum(t0, (%d,), False)\n  return t1\n",
                       dname(dts[di]), (long long)shape[0], (long long)shape[1], dim ? 1 : 0);
            else
              snprintf(text, sizeof text,
                       "def computation(x):\n  # x: \"cpu %s[%lld, %lld]\"\n  t1 = prims.sum(x, (%d,))\n  return t1\n",
                       dname(dts[di]), (long long)shape[0], (long long)shape[1], dim ? 1 : 0);
            th_trace *tr = parse(text);
            th_tensor *x = th_tensor_new(dts[di], 2, shape);
            for (int64_t i = 0; i < 3 * n; i++) put(x, i, fused ? 0.0 : -0.0);
            assert_int_equal(th_set_num_threads(threads), TH_OK);
            int nout = 0;
            th_tensor **out = fused ? run_fused(tr, &x, 1, &nout, true) : run_execs(tr, EAGER, 1, &x, 1, &nout);
            assert_int_equal(th_set_num_threads(0), TH_OK);
            if (!out) fail_msg("run: %s", th_last_error());
            for (int k = 0; k < 3; k++) {
              double g = at(out[0], k);
              if (g != 0.0 || signbit(g))
                fail_msg("%s\n%s, %d threads: output %d is %g (sign %d); PyTorch's sum of -0.0 is +0.0", text,
                         fused ? "fused" : "eager", threads, k, g, signbit(g) != 0);
            }
            release_all(out, nout);
            th_tensor_release(x);
            th_trace_free(tr);
          }
}

/* ---- eager row extremes with a special at every lane position -------------------------------------------- */

static void test_row_extremes_specials(void **state) {
  (void)state;
  static const th_dtype dts[] = {TH_F32, TH_BF16, TH_F16, TH_F64};
  static const int64_t lens[] = {1, 2, 31, 32, 33, 64, 97};
  for (int di = 0; di < 4; di++)
    for (int li = 0; li < 7; li++) {
      int64_t n = lens[li];
      char text[512];
      snprintf(
        text, sizeof text,
        "def computation(x):\n  # x: \"cpu %s[3, %lld]\"\n  t0 = prims.amax(x, (1,))\n  t1 = prims.amin(x, (1,))\n"
        "  return (t0, t1)\n",
        dname(dts[di]), (long long)n);
      th_trace *tr = parse(text);
      int64_t shape[2] = {3, n};
      for (int sp = 0; sp < 3; sp++)
        for (int64_t pos = 0; pos < n; pos++) {
          th_tensor *x = th_tensor_new(dts[di], 2, shape);
          double special = sp == 0 ? NAN : sp == 1 ? -INFINITY : INFINITY;
          double mx[3], mn[3];
          for (int r = 0; r < 3; r++) {
            mx[r] = -INFINITY, mn[r] = INFINITY;
            bool nan = false;
            for (int64_t i = 0; i < n; i++) {
              double v = (double)((r * 5 + i * 11) % 23 - 11) * 0.25; /* exact in every dtype */
              if (r == 1 && i == pos) v = special;
              put(x, r * n + i, v);
              if (v != v) nan = true;
              if (v > mx[r]) mx[r] = v;
              if (v < mn[r]) mn[r] = v;
            }
            if (nan) mx[r] = mn[r] = NAN;
          }
          int nout = 0;
          th_tensor **out = run_execs(tr, EAGER, 1, &x, 1, &nout);
          if (!out) fail_msg("run: %s", th_last_error());
          for (int r = 0; r < 3; r++) {
            double gx = at(out[0], r), gn = at(out[1], r);
            bool okx = gx == mx[r] || (isnan(gx) && isnan(mx[r])), okn = gn == mn[r] || (isnan(gn) && isnan(mn[r]));
            if (!okx || !okn)
              fail_msg("%s\nspecial %g at %lld: row %d amax %g (want %g) amin %g (want %g)", text, special,
                       (long long)pos, r, gx, mx[r], gn, mn[r]);
          }
          release_all(out, nout);
          th_tensor_release(x);
        }
      th_trace_free(tr);
    }
}

/* ---- eager column path at its output limit, unaligned bf16 ---------------------------------------------------- */

static void test_columns_limit_unaligned(void **state) {
  (void)state;
  static const int64_t widths[] = {8191, 8192, 8193};
  for (int wi = 0; wi < 3; wi++)
    for (int threads = 1; threads <= 3; threads++) {
      int64_t K = widths[wi], R = 9;
      /* x: bf16 [R * K + 1] flat; the trace slices off element 0 and reshapes to [R, K] (eager's views:
       * the data starts at an odd bf16 element) */
      char text[768];
      snprintf(text, sizeof text,
               "def computation(x):\n  # x: \"cpu bf16[%lld]\"\n  t0 = prims.slice_prim(x, [1], [%lld], [1])\n"
               "  t1 = prims.reshape(t0, (%lld, %lld))\n  t2 = prims.amax(t1, (0,))\n  t3 = prims.sum(t1, (0,))\n"
               "  return (t2, t3)\n",
               (long long)(R * K + 1), (long long)(R * K + 1), (long long)R, (long long)K);
      th_trace *tr = parse(text);
      int64_t n = R * K + 1;
      th_tensor *x = th_tensor_new(TH_BF16, 1, &n);
      for (int64_t i = 0; i < n; i++) put(x, i, (double)((i * 37) % 41 - 20) * 0.125);
      assert_int_equal(th_set_num_threads(threads), TH_OK);
      int nout = 0;
      th_tensor **out = run_execs(tr, EAGER, 1, &x, 1, &nout);
      assert_int_equal(th_set_num_threads(0), TH_OK);
      if (!out) fail_msg("run: %s", th_last_error());
      for (int64_t k = 0; k < K; k++) {
        double mx = -INFINITY, s = 0;
        for (int64_t r = 0; r < R; r++) {
          double v = at(x, 1 + r * K + k);
          if (v > mx) mx = v;
          s += v; /* multiples of 1/8 below 32: exact, and exact in bf16 after rounding? checked below */
        }
        char buf[2];
        th_store_f64(buf, TH_BF16, s);
        double sr = th_load_f64(buf, TH_BF16);
        if (at(out[0], k) != mx || at(out[1], k) != sr)
          fail_msg("%s\n%d threads, column %lld: amax %g (want %g), sum %g (want %g)", text, threads, (long long)k,
                   at(out[0], k), mx, at(out[1], k), sr);
      }
      release_all(out, nout);
      th_tensor_release(x);
      th_trace_free(tr);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_var_f64_sum_overflow),
    cmocka_unit_test(test_negzero_sums),
    cmocka_unit_test(test_row_extremes_specials),
    cmocka_unit_test(test_columns_limit_unaligned),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
