/* test_fuser_edges.c — adversarial checks of three fuser features against independent references:
 * broadcast sinking must not move a read of a tensor past an in-place copy_ into it (the reference is
 * the value before the copy, computed here), the tanh GELU tail rewrite (x * 0.5 * (1 + tanh z)) must
 * stay within a few ulp of float64 x sigmoid(2z) next to the z where float32 tanh(z) first rounds to -1,
 * and reads invariant over a row nest's inner dims (a [R] row vector, an expanded [R, 1], a 0-d scalar)
 * must give exact integer row sums, and a fused float64 var near the top of the range must not overflow
 * where the exact variance is finite (Welford's rescue, as the eager executor and PyTorch). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "thunder/thunder.h"

#include "fuser_test_util.h"

/* t0 = -a is computed before copy_(b, a) overwrites a; the broadcast of t0 after the copy must still see
 * the old a (sinking the broadcast below neg recomputes -a after the copy). */
static void test_sinking_respects_copy(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b, c):\n"
                       "  # a: \"cpu f32[4]\"\n  # b: \"cpu f32[4]\"\n  # c: \"cpu f32[3, 4]\"\n"
                       "  t0 = prims.neg(a)\n  t1 = prims.copy_(b, a)\n"
                       "  t2 = prims.broadcast_in_dim(t0, (3, 4), (1,))\n  t3 = prims.add(t2, c)\n"
                       "  return (t3, t1)\n");
  int64_t s1[1] = {4}, s2[2] = {3, 4};
  th_tensor *a = th_tensor_new(TH_F32, 1, s1), *b = th_tensor_new(TH_F32, 1, s1), *c = th_tensor_new(TH_F32, 2, s2);
  for (int i = 0; i < 4; i++) ((float *)th_tensor_data(a))[i] = (float)i, ((float *)th_tensor_data(b))[i] = 10.0f;
  for (int i = 0; i < 12; i++) ((float *)th_tensor_data(c))[i] = 0.0f;
  th_tensor *in[3] = {a, b, c};
  int n = 0;
  th_tensor **out = run_fused(tr, in, 3, &n, false);
  for (int i = 0; i < 12; i++) assert_true(((float *)th_tensor_data(out[0]))[i] == -(float)(i % 4));
  release_all(out, n);
  th_tensor_release(a);
  th_tensor_release(b);
  th_tensor_release(c);
  th_trace_free(tr);
}

/* every float32 z in [-9.0115, -9.0105]: the fused GELU tail within 4 ulp of float64 1 * sigmoid(2z)
 * (about 1.5e-8 there) where float32 tanh(z) is not -1, and 0 (eager's x * 0) where it is. A cut-off
 * of 18.0218 for -2z, below 26 ln 2 = 18.02183, returned 0 for the 14 z in [-9.010913, -9.0109005],
 * where float32 tanh(z) is -0.99999994, not -1. */
static void test_gelu_tail_near_minus_one(void **state) {
  (void)state;
  float lo = -9.0115f, hi = -9.0105f;
  int64_t n = 0;
  for (float z = lo; z < hi; z = nextafterf(z, 0.0f)) n++;
  char text[512];
  snprintf(text, sizeof text,
           "def computation(x, z):\n  # x: \"cpu f32[%lld]\"\n  # z: \"cpu f32[%lld]\"\n"
           "  t0 = prims.tanh(z)\n  t1 = prims.mul(x, 0.5)\n  t2 = prims.add(t0, 1.0)\n  t3 = prims.mul(t1, t2)\n"
           "  return t3\n", (long long)n, (long long)n);
  th_trace *tr = parse(text);
  th_tensor *x = th_tensor_new(TH_F32, 1, &n), *z = th_tensor_new(TH_F32, 1, &n);
  float *xp = th_tensor_data(x), *zp = th_tensor_data(z);
  int64_t i = 0;
  for (float v = lo; v < hi; v = nextafterf(v, 0.0f), i++) xp[i] = 1.0f, zp[i] = v;
  th_tensor *in[2] = {x, z};
  int no = 0;
  th_tensor **out = run_fused(tr, in, 2, &no, true);
  const float *o = th_tensor_data(out[0]);
  int bad = 0;
  for (i = 0; i < n; i++) {
    double ref = 1.0 / (1.0 + exp(-2.0 * (double)zp[i]));
    double ulp = (double)(nextafterf((float)ref, INFINITY) - (float)ref);
    bool minus_one = (float)tanh((double)zp[i]) == -1.0f; /* float32 tanh rounds to -1: eager's x * 0 */
    if (minus_one ? o[i] != 0.0f : fabs((double)o[i] - ref) > 4.0 * ulp) {
      if (bad++ < 3) print_message("z = %.9g: got %.9g, want %.9g\n", (double)zp[i], (double)o[i], ref);
    }
  }
  assert_int_equal(bad, 0);
  release_all(out, no);
  th_tensor_release(x);
  th_tensor_release(z);
  th_trace_free(tr);
}

/* row sums of x + r[i] * e[i] - s over rows of 8193 (two 4096-chunks and a tail), r broadcast along the
 * row, e [R, 1] expanded, s 0-d; and the full sum of s broadcast to [R, C]: exact in int64 */
static void test_invariant_row_reads(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x, r, e, s):\n"
                       "  # x: \"cpu i64[3, 8193]\"\n  # r: \"cpu i64[3]\"\n  # e: \"cpu i64[3, 1]\"\n  # s: \"cpu i64[]\"\n"
                       "  rb = prims.broadcast_in_dim(r, (3, 8193), (0,))\n"
                       "  eb = prims.broadcast_in_dim(e, (3, 8193), (0, 1))\n"
                       "  sb = prims.broadcast_in_dim(s, (3, 8193), ())\n"
                       "  t0 = prims.mul(rb, eb)\n  t1 = prims.add(x, t0)\n  t2 = prims.sub(t1, sb)\n"
                       "  t3 = prims.sum(t2, (1,))\n  t4 = prims.sum(sb, (0, 1))\n  return (t3, t4)\n");
  int64_t sx[2] = {3, 8193}, sr[1] = {3}, se[2] = {3, 1};
  th_tensor *x = th_tensor_new(TH_I64, 2, sx), *r = th_tensor_new(TH_I64, 1, sr), *e = th_tensor_new(TH_I64, 2, se),
            *s = th_tensor_new(TH_I64, 0, NULL);
  int64_t *xp = th_tensor_data(x), *rp = th_tensor_data(r), *ep = th_tensor_data(e);
  for (int i = 0; i < 3 * 8193; i++) xp[i] = (i * 7919) % 1000 - 500;
  for (int i = 0; i < 3; i++) rp[i] = 3 + i, ep[i] = 11 - 4 * i;
  *(int64_t *)th_tensor_data(s) = -5;
  th_tensor *in[4] = {x, r, e, s};
  int no = 0;
  th_tensor **out = run_fused(tr, in, 4, &no, true);
  for (int i = 0; i < 3; i++) {
    int64_t want = 0;
    for (int j = 0; j < 8193; j++) want += xp[i * 8193 + j] + rp[i] * ep[i] + 5;
    assert_int_equal(((int64_t *)th_tensor_data(out[0]))[i], want);
  }
  assert_int_equal(*(int64_t *)th_tensor_data(out[1]), -5 * 3 * 8193);
  release_all(out, no);
  th_tensor_release(x);
  th_tensor_release(r);
  th_tensor_release(e);
  th_tensor_release(s);
  th_trace_free(tr);
}

/* The reference variance and mean of n doubles x[i * st], in long double (x87: 64-bit significand,
 * exponent to 1e4932, so neither the sum nor the squares overflow), rounded to double at the end. */
static void ref_var_mean(const double *x, int n, int st, double corr, double *var, double *mean) {
  long double s = 0, q = 0;
  for (int i = 0; i < n; i++) s += x[i * st];
  long double u = s / n;
  for (int i = 0; i < n; i++) q += (x[i * st] - u) * (x[i * st] - u);
  *var = (double)(q / (n - corr));
  *mean = (double)u;
}

static void expect_close(double got, double want, const char *what, int row) {
  if (isnan(want) ? isnan(got) : (isinf(want) ? got == want : fabs(got - want) <= 1e-13 * fabs(want)))
    return;
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
       5, 100, 100, 1, {5, 100}, 2},
      {"def computation(x):\n  # x: \"cpu f64[2, 5, 20]\"\n  t = prims.mul(x, 1.0)\n"
       "  (v, m) = prims.var_mean(t, (1, 2), correction=1.0)\n  return (v, m)\n",
       2, 100, 100, 1, {2, 5, 20}, 3},
      {"def computation(x):\n  # x: \"cpu f64[100]\"\n  t = prims.mul(x, 1.0)\n"
       "  (v, m) = prims.var_mean(t, (0,), correction=0.0)\n  return (v, m)\n",
       1, 100, 100, 1, {100}, 1},
      {"def computation(x):\n  # x: \"cpu f64[100, 5]\"\n  xt = prims.transpose(x, (1, 0))\n"
       "  t = prims.mul(xt, 1.0)\n  (v, m) = prims.var_mean(t, (1,), correction=1.0)\n  return (v, m)\n",
       5, 100, 1, 5, {100, 5}, 2},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    th_trace *tr = parse(cases[c].trace);
    th_tensor *x = th_tensor_new(TH_F64, cases[c].nd, cases[c].shape);
    double *xp = th_tensor_data(x);
    for (int r = 0; r < cases[c].nrows; r++)
      for (int j = 0; j < cases[c].rowlen; j++) {
        double v = r == 0 ? 1e306 : r == 1 ? 1.7e308 : r == 2 ? (j == 37 ? nextafter(1e306, INFINITY) : 1e306)
                 : r == 3 ? (j == 5 ? INFINITY : 2.5) : 1e3 + 0.001 * ((j * 37) % 101);
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
      expect_close(vp[r], want_v, "var", r);
      expect_close(mp[r], want_m, "mean", r);
    }
    release_all(out, no);
    th_tensor_release(x);
    th_trace_free(tr);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sinking_respects_copy),
      cmocka_unit_test(test_gelu_tail_near_minus_one),
      cmocka_unit_test(test_invariant_row_reads),
      cmocka_unit_test(test_f64_var_near_max),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
