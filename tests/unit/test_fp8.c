/* test_fp8.c — fp8 end to end: the casts, ltorch._scaled_mm / prims.scaled_mm (meta, errors, the CPU
 * kernel and its micro-kernels), the float8 training transform (th_transform_float8), a worked
 * quantization example (torchao's dynamic per-tensor recipe), and seed 003's extrace run on the CPU.
 *
 * References are independent of the code under test: fp8 codes are decoded here with integer
 * arithmetic and ldexp (sign / exponent / mantissa fields, OCP and PyTorch formats), casts are
 * checked against a brute-force round-to-nearest-even search over every code (with PyTorch's overflow
 * rules: e4m3fn saturates to 448 above 464, e5m2 gives inf from 61440), GEMMs against float64 sums of the exactly
 * decoded operands, and the transform against a float64 recomputation of the quantization recipe
 * (amax, scale, saturated cast, decode), with bounds for float32
 * accumulation. Allocation failures in the transform and in both scaled_mm kernels end in
 * TH_ERR_NOMEM (the sanitizer build checks for leaks). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "core/ir.h"
#include "executors/eager/eager_internal.h"
#include "thunder/thunder.h"
#include "fp8_ref.h"

static const th_device CPU = {TH_CPU, 0};

/* ---- helpers -------------------------------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static double urand(double lo, double hi) { return lo + (hi - lo) * (rnd32() / 4294967296.0); }

/* A random finite code of format f. */
static uint8_t rand_code(th_dtype f) {
  for (;;) {
    uint8_t c = (uint8_t)rnd32();
    if (!isnan(ref_decode(f, c)) && !isinf(ref_decode(f, c))) return c;
  }
}

static th_value *input(th_trace *tr, const char *name, th_dtype dt, int nd, const int64_t *shape) {
  th_value *v = th_trace_add_tensor_input(tr, name, dt, CPU, nd, shape);
  if (!v) fail_msg("input %s: %s", name, th_last_error());
  return v;
}

static th_arg V(th_value *v) { return th_arg_value(v); }

static th_arg callk(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *kwn,
                    const th_arg *kw) {
  th_arg out;
  th_status st = th_trace_call(tr, op, n, args, nkw, kwn, kw, &out);
  if (st != TH_OK) fail_msg("%s: %s", op, th_last_error());
  return out;
}
static th_arg call1(th_trace *tr, const char *op, th_arg a) { return callk(tr, op, 1, &a, 0, NULL, NULL); }
static th_arg call2(th_trace *tr, const char *op, th_arg a, th_arg b) {
  th_arg args[2] = {a, b};
  return callk(tr, op, 2, args, 0, NULL, NULL);
}
static th_arg call3(th_trace *tr, const char *op, th_arg a, th_arg b, th_arg c) {
  th_arg args[3] = {a, b, c};
  return callk(tr, op, 3, args, 0, NULL, NULL);
}
static th_arg to_dtype(th_trace *tr, th_arg a, th_dtype dt) {
  static const char *const kwn[1] = {"dtype"};
  th_arg kw[1] = {th_arg_dtype(dt)};
  return callk(tr, "ltorch.to", 1, &a, 1, kwn, kw);
}

static th_program *compile(const th_trace *tr, const char *const *execs, int nexecs) {
  if (th_trace_verify(tr) != TH_OK) fail_msg("verify: %s", th_last_error());
  th_compile_options o = {0};
  o.executors = execs;
  o.nexecutors = nexecs;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  return p;
}

/* Runs p; returns the malloc'd output array (nout set). */
static th_tensor **run(th_program *p, int nin, th_tensor **in, int *nout) {
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  return out;
}

static void release_all(th_tensor **t, int n) {
  for (int i = 0; i < n; i++) th_tensor_release(t[i]);
  free(t);
}

static th_tensor *tensor(th_dtype dt, int nd, const int64_t *shape) {
  th_tensor *t = th_tensor_new(dt, nd, shape);
  assert_non_null(t);
  return t;
}

static th_tensor *scalar_f32(float v) {
  th_tensor *t = tensor(TH_F32, 0, NULL);
  *(float *)th_tensor_data(t) = v;
  return t;
}

/* The element at (row-major) index i of a contiguous tensor, as a double. */
static double at(const th_tensor *t, int64_t i) { return th_tensor_get_f64(t, i); }

static const char *const EAGER[] = {"eager"};
static const char *const FUSER[] = {"fuser", "blas", "eager"};

static char cache_root[256];
static int setup(void **state) {
  (void)state;
  snprintf(cache_root, sizeof cache_root, "%s/fp8-test-cache", TH_BINARY_DIR);
  mkdir(cache_root, 0700);
  setenv("XDG_CACHE_HOME", cache_root, 1);
  return 0;
}

/* ---- decode tables and the scalar casts -------------------------------------------------------------- */

static void test_decode_tables(void **state) {
  (void)state;
  th_dtype fs[2] = {E4, E5};
  for (int k = 0; k < 2; k++) {
    const float *tab = th_eg_fp8_table(fs[k]);
    assert_non_null(tab);
    for (unsigned c = 0; c < 256; c++) {
      double want = ref_decode(fs[k], c);
      if (isnan(want)) {
        if (!isnan(tab[c])) fail_msg("%s code 0x%02x: expected NaN, got %g", th_dtype_name(fs[k]), c, tab[c]);
        continue;
      }
      if ((double)tab[c] != want || !signbit(tab[c]) != !signbit(want))
        fail_msg("%s code 0x%02x: expected %.9g, got %.9g", th_dtype_name(fs[k]), c, want, tab[c]);
      /* the public scalar decoders agree */
      float pub = fs[k] == E4 ? th_f8e4m3fn_to_f32((uint8_t)c) : th_f8e5m2_to_f32((uint8_t)c);
      assert_true(pub == tab[c] && !signbit(pub) == !signbit(tab[c]));
    }
  }
  assert_null(th_eg_fp8_table(TH_F32));
  /* a few well-known values (OCP spec): max normals, min subnormals, one */
  assert_true(ref_decode(E4, 0x7e) == 448.0 && ref_decode(E5, 0x7b) == 57344.0);
  assert_true(ref_decode(E4, 0x01) == ldexp(1, -9) && ref_decode(E5, 0x01) == ldexp(1, -16));
  assert_true(ref_decode(E4, 0x38) == 1.0 && ref_decode(E5, 0x3c) == 1.0);
}

/* Edge inputs for every cast: overflow, the rounding midpoints at the top, NaN, infinities,
 * subnormals (and the ties between them), negative zero. */
static const float edge_inputs[] = {
  0.0f,      -0.0f,    1.0f,     -1.0f,    4.48f,     -8.96f,   2.24f,       448.0f,    -448.0f,   449.0f,
  463.99f,   464.0f,   464.01f,  479.0f,   480.0f,    500.0f,   -500.0f,     1e6f,      -1e30f,    57344.0f,
  60000.0f,  61439.0f, 61440.0f, 61441.0f, 65536.0f,  70000.0f, -70000.0f,   INFINITY,  -INFINITY, NAN,
  -NAN,      0x1p-9f,  0x1p-10f, 0x3p-10f, 0x1.8p-9f, 0x1p-6f,  0x1.fp-7f,   0x7p-9f,   0xfp-10f,  -0x1p-10f,
  -0x3p-11f, 0x1p-11f, 0x1p-16f, 0x1p-17f, 0x3p-17f,  0x1p-14f, 0x1.ep-15f,  -0x1p-17f, 0x1p-30f,  -0x1p-126f,
  0x1p-149f, 0.1f,     -0.3f,    3.14159f, 1000.0f,   12345.0f, -0.0078125f,
};
#define NEDGE ((int)(sizeof edge_inputs / sizeof edge_inputs[0]))

static void check_code(th_dtype f, bool sat, float x, unsigned got, const char *where) {
  unsigned want = ref_encode(f, x, sat);
  bool wn = is_nan_code(f, want), gn = is_nan_code(f, got);
  if (wn != gn || (!wn && want != got))
    fail_msg("%s: %s%s(%a = %.9g): expected 0x%02x (%g), got 0x%02x (%g)", where, th_dtype_name(f),
             sat ? " saturated" : "", (double)x, (double)x, want, ref_decode(f, want), got, ref_decode(f, got));
}

static void test_scalar_casts(void **state) {
  (void)state;
  th_dtype fs[2] = {E4, E5};
  for (int k = 0; k < 2; k++)
    for (int sat = 0; sat < 2; sat++) {
      for (int i = 0; i < NEDGE; i++) {
        float x = edge_inputs[i];
        unsigned got = fs[k] == E4 ? th_f32_to_f8e4m3fn(x, sat) : th_f32_to_f8e5m2(x, sat);
        check_code(fs[k], sat, x, got, "scalar");
      }
      /* a sweep over float32 bit patterns (both signs, every exponent) */
      for (uint64_t u = 0; u < (1ull << 32); u += 0x3fffu) {
        uint32_t b = (uint32_t)u;
        float x;
        memcpy(&x, &b, 4);
        if (isnan(x)) continue;
        unsigned got = fs[k] == E4 ? th_f32_to_f8e4m3fn(x, sat) : th_f32_to_f8e5m2(x, sat);
        check_code(fs[k], sat, x, got, "scalar sweep");
      }
    }
  /* known e4m3fn codes: ties to even, saturation past 448, -inf to -448 */
  assert_int_equal(ref_encode(E4, 464.0f, false), 0x7e);  /* tie to even: 448 */
  assert_int_equal(ref_encode(E4, 464.01f, false), 0x7e); /* saturates (torch >= 2.12) */
  assert_int_equal(ref_encode(E4, -INFINITY, false), 0xfe);
  assert_int_equal(ref_encode(E4, 1000.0f, false), 0x7e);
  assert_true(is_nan_code(E4, ref_encode(E4, NAN, false)));
  assert_int_equal(ref_encode(E5, 61439.0f, false), 0x7b);
  assert_int_equal(ref_encode(E5, 61440.0f, false), 0x7c); /* tie to even: inf */
  assert_int_equal(ref_encode(E4, INFINITY, true), 0x7e);
  assert_int_equal(ref_encode(E4, -0.0f, false), 0x80);
}

/* Every cast in a program: plain prims.convert_element_type (ltorch.to) and the saturated cast
 * (clamp, then to), on the eager executor and through the fuser. */
static void test_program_casts(void **state) {
  (void)state;
  th_dtype fs[2] = {E4, E5};
  const char *const *execs[2] = {EAGER, FUSER};
  int nexecs[2] = {1, 3};
  for (int k = 0; k < 2; k++) {
    double maxv = fs[k] == E4 ? 448.0 : 57344.0;
    th_trace *tr = th_trace_new(NULL);
    int64_t n = NEDGE;
    th_value *x = input(tr, "x", TH_F32, 1, &n);
    th_arg plain = to_dtype(tr, V(x), fs[k]);
    th_arg clamped = call3(tr, "ltorch.clamp", V(x), th_arg_float(-maxv), th_arg_float(maxv));
    th_arg sat = to_dtype(tr, clamped, fs[k]);
    th_arg outs[2] = {plain, sat};
    assert_int_equal(th_trace_set_return(tr, th_arg_tuple(2, outs)), TH_OK);
    for (int e = 0; e < 2; e++) {
      th_program *p = compile(tr, execs[e], nexecs[e]);
      th_tensor *in = tensor(TH_F32, 1, &n);
      memcpy(th_tensor_data(in), edge_inputs, sizeof edge_inputs);
      int nout;
      th_tensor **o = run(p, 1, &in, &nout);
      assert_int_equal(nout, 2);
      for (int s = 0; s < 2; s++) {
        assert_int_equal(th_tensor_dtype(o[s]), fs[k]);
        const uint8_t *codes = th_tensor_data(o[s]);
        for (int i = 0; i < NEDGE; i++) check_code(fs[k], s == 1, edge_inputs[i], codes[i], execs[e][0]);
      }
      release_all(o, nout);
      th_tensor_release(in);
      th_program_free(p);
    }
    th_trace_free(tr);
  }
}

/* ---- a worked quantization example: amax, scale, saturated cast, decode ------------------------------ */

static void test_worked_example(void **state) {
  (void)state;
  const char *const *execs[2] = {EAGER, FUSER};
  int nexecs[2] = {1, 3};
  th_trace *tr = th_trace_new(NULL);
  int64_t n = 4;
  th_value *x = input(tr, "x", TH_F32, 1, &n);
  th_arg amax = call1(tr, "ltorch.amax", call1(tr, "ltorch.abs", V(x)));
  th_arg s = call2(tr, "ltorch.true_divide", th_arg_float(448.0), call2(tr, "ltorch.clamp", amax, th_arg_float(1e-12)));
  th_arg q = to_dtype(
    tr, call3(tr, "ltorch.clamp", call2(tr, "ltorch.mul", V(x), s), th_arg_float(-448.0), th_arg_float(448.0)), E4);
  th_arg y = call2(tr, "ltorch.true_divide", call1(tr, "ltorch.float", q), s);
  th_arg outs[2] = {q, y};
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(2, outs)), TH_OK);
  static const float xs[4] = {1.0f, -2.0f, 0.5f, 100.0f};
  static const double qs[4] = {4.5, -9.0, 2.25, 448.0}, ys[4] = {1.00446, -2.00893, 0.50223, 100.0};
  for (int e = 0; e < 2; e++) {
    th_program *p = compile(tr, execs[e], nexecs[e]);
    th_tensor *in = tensor(TH_F32, 1, &n);
    memcpy(th_tensor_data(in), xs, sizeof xs);
    int nout;
    th_tensor **o = run(p, 1, &in, &nout);
    const uint8_t *codes = th_tensor_data(o[0]);
    for (int i = 0; i < 4; i++) {
      if (ref_decode(E4, codes[i]) != qs[i])
        fail_msg("%s: q[%d] = %g, expected %g", execs[e][0], i, ref_decode(E4, codes[i]), qs[i]);
      if (fabs(at(o[1], i) - ys[i]) > 1e-4)
        fail_msg("%s: y[%d] = %.6f, expected %.5f", execs[e][0], i, at(o[1], i), ys[i]);
      /* the round trip is lossy: y is not x (no cast elimination turned q.float() back into x*s) */
      if (i < 3) assert_true(at(o[1], i) != xs[i]);
    }
    release_all(o, nout);
    th_tensor_release(in);
    th_program_free(p);
  }
  th_trace_free(tr);
}

/* ---- _scaled_mm: the GEMM against float64 -------------------------------------------------------------- */

/* reference C = decode(a) @ decode(b) in float64, and S = sum |a_ik b_kj| for the error bound */
static void ref_gemm(th_dtype fa, th_dtype fb, int64_t M, int64_t N, int64_t K, const uint8_t *a, int64_t am,
                     int64_t ak, const uint8_t *b, int64_t bk, int64_t bn, double *c, double *s) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = ref_decode(fa, a[i * am + k * ak]) * ref_decode(fb, b[k * bk + j * bn]);
        acc += p;
        mag += fabs(p);
      }
      c[i * N + j] = acc;
      s[i * N + j] = mag;
    }
}

/* th_eg_fp8_gemm on every ISA this CPU has, with row-major, transposed and strided operands. */
static void test_gemm_isas(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{1, 1, 1},     {1, 5, 1},      {3, 1, 4},      {6, 16, 16},  {7, 33, 5},
                                      {13, 300, 37}, {121, 20, 530}, {130, 517, 70}, {1, 700, 65}, {64, 1, 1}};
  int ran[3] = {0};
  for (int isa = 0; isa < 3; isa++) {
    if (!th_eg_isa_supported((th_eg_isa)isa)) {
      print_message("fp8 GEMM: %s micro-kernel not available on this CPU (not tested)\n",
                    th_eg_isa_name((th_eg_isa)isa));
      continue;
    }
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
      const int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
      for (int layout = 0; layout < 3; layout++) {
        th_dtype fa = layout == 2 ? E5 : E4, fb = layout == 1 ? E5 : E4;
        /* layout 0: a row-major, b row-major; 1: b = w.t() (column-major); 2: a column-major, strided b */
        int64_t am = layout == 2 ? 1 : K, ak = layout == 2 ? M : 1;
        int64_t bk = layout == 0 ? N : layout == 1 ? 1 : 2 * N, bn = layout == 0 ? 1 : layout == 1 ? K : 2;
        uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(2 * K * N * 2));
        for (int64_t i = 0; i < M * K; i++) a[i] = rand_code(fa);
        for (int64_t i = 0; i < 4 * K * N; i++) b[i] = rand_code(fb);
        double *c = malloc(sizeof(double) * (size_t)(M * N)), *s = malloc(sizeof(double) * (size_t)(M * N));
        ref_gemm(fa, fb, M, N, K, a, am, ak, b, bk, bn, c, s);
        int64_t ldc = N + 1; /* a padded output row */
        float *guard = calloc((size_t)(M * ldc + 1), sizeof(float));
        th_eg_fp8_gemm_args g = {M, N, K, a, th_eg_fp8_table(fa), am, ak, b, th_eg_fp8_table(fb), bk, bn, guard, ldc};
        assert_int_equal(th_eg_fp8_gemm((th_eg_isa)isa, &g), TH_OK);
        for (int64_t i = 0; i < M; i++)
          for (int64_t j = 0; j < N; j++) {
            double want = c[i * N + j], tol = (double)(K + 1) * 0x1p-24 * s[i * N + j];
            double v = guard[i * ldc + j];
            if (fabs(v - want) > tol)
              fail_msg("%s %lldx%lldx%lld layout %d: C[%lld,%lld] = %.9g, expected %.9g (tol %g)",
                       th_eg_isa_name((th_eg_isa)isa), (long long)M, (long long)K, (long long)N, layout, (long long)i,
                       (long long)j, v, want, tol);
          }
        for (int64_t i = 0; i < M; i++) assert_true(guard[i * ldc + N] == 0.0f); /* padding untouched */
        free(guard);
        free(a);
        free(b);
        free(c);
        free(s);
      }
    }
    ran[isa] = 1;
  }
  assert_true(ran[TH_EG_ISA_PORTABLE]);
  print_message("fp8 GEMM micro-kernels tested: portable%s%s; prims.scaled_mm uses %s\n", ran[1] ? ", avx2" : "",
                ran[2] ? ", avx512" : "", th_eg_isa_name(th_eg_fp8_gemm_isa()));
}

/* One _scaled_mm program: a [M, K] fp8, b [K, N] given as an input [K, N] (row-major) or as the
 * transpose of an input [N, K] (column-major, PyTorch's layout); scales; optional bias; out dtype. */
static void scaled_mm_case(int64_t M, int64_t K, int64_t N, th_dtype fa, th_dtype fb, bool b_colmajor, bool bias,
                           bool has_out_dtype, th_dtype out_dtype, th_dtype bias_dtype) {
  th_trace *tr = th_trace_new(NULL);
  int64_t sa_[2] = {M, K}, sb_[2] = {b_colmajor ? N : K, b_colmajor ? K : N}, sn = N;
  th_value *a = input(tr, "a", fa, 2, sa_), *bb = input(tr, "b", fb, 2, sb_);
  th_value *xs = input(tr, "scale_a", TH_F32, 0, NULL);
  int64_t one = 1;
  th_value *ws = input(tr, "scale_b", TH_F32, 1, &one); /* a 1-element (not 0-d) scale */
  th_value *bv = bias ? input(tr, "bias", bias_dtype, 1, &sn) : NULL;
  th_arg b = b_colmajor ? call1(tr, "ltorch.t", V(bb)) : V(bb);
  th_arg args[5] = {V(a), b, V(xs), V(ws), bias ? V(bv) : th_arg_none()};
  static const char *const kwn[1] = {"out_dtype"};
  th_arg kw[1] = {th_arg_dtype(out_dtype)};
  th_arg y = callk(tr, "ltorch._scaled_mm", 5, args, has_out_dtype ? 1 : 0, kwn, kw);
  th_dtype want_dt = has_out_dtype ? out_dtype : fa; /* PyTorch's default: a's dtype */
  assert_int_equal(th_value_dtype(y.u.value), want_dt);
  assert_int_equal(th_value_ndim(y.u.value), 2);
  assert_true(th_value_shape(y.u.value)[0] == M && th_value_shape(y.u.value)[1] == N);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  /* the ltorch op records the prim */
  const th_bsym *smm = th_trace_bsym(tr, th_trace_num_bsyms(tr) - 2);
  assert_string_equal(th_bsym_qualname(smm), "ltorch._scaled_mm");
  assert_string_equal(th_bsym_qualname(th_bsym_subsymbol(smm, 0)), "prims.scaled_mm");

  th_tensor *ta = tensor(fa, 2, sa_), *tb = tensor(fb, 2, sb_);
  uint8_t *pa = th_tensor_data(ta), *pb = th_tensor_data(tb);
  for (int64_t i = 0; i < M * K; i++) pa[i] = rand_code(fa);
  for (int64_t i = 0; i < K * N; i++) pb[i] = rand_code(fb);
  float s1 = (float)urand(0.001, 0.1), s2 = (float)urand(0.5, 3.0);
  th_tensor *tsa = scalar_f32(s1), *tsb = tensor(TH_F32, 1, &one);
  *(float *)th_tensor_data(tsb) = s2;
  th_tensor *tbias = bias ? tensor(bias_dtype, 1, &sn) : NULL;
  double *bref = calloc((size_t)N + 1, sizeof(double));
  for (int64_t j = 0; bias && j < N; j++) {
    th_store_f64((char *)th_tensor_data(tbias) + j * (int64_t)th_dtype_size(bias_dtype), bias_dtype, urand(-5, 5));
    bref[j] = at(tbias, j);
  }
  double *c = malloc(sizeof(double) * (size_t)(M * N)), *s = malloc(sizeof(double) * (size_t)(M * N));
  ref_gemm(fa, fb, M, N, K, pa, K, 1, pb, b_colmajor ? 1 : N, b_colmajor ? K : 1, c, s);
  const double scale = (double)s1 * (double)s2;
  const double out_eps = want_dt == TH_BF16 ? 0x1p-8 : want_dt == TH_F16 ? 0x1p-11 : 0x1p-24;
  th_tensor *ins[5] = {ta, tb, tsa, tsb, tbias};
  for (int e = 0; e < 2; e++) { /* default executors, then eager alone */
    th_program *p = compile(tr, e ? EAGER : NULL, e ? 1 : 0);
    int nout;
    th_tensor **o = run(p, bias ? 5 : 4, ins, &nout);
    assert_int_equal(th_tensor_dtype(o[0]), want_dt);
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double want = c[i * N + j] * scale + bref[j];
        double tol = (double)(K + 3) * 0x1p-24 * (s[i * N + j] * scale + fabs(bref[j])) + out_eps * fabs(want) +
                     (want_dt == TH_F16 ? 0x1p-24 : 0);
        double got = at(o[0], i * N + j);
        if (th_dtype_is_fp8(want_dt)) { /* the float32 result lies in [want - tol, want + tol]: its cast too */
          double lo = ref_decode(want_dt, ref_encode(want_dt, (float)(want - tol), false));
          double hi = ref_decode(want_dt, ref_encode(want_dt, (float)(want + tol), false));
          if (lo <= got && got <= hi) continue;
          fail_msg("_scaled_mm %lldx%lldx%lld -> %s: [%lld,%lld] = %.9g, expected the cast of %.9g +- %g: [%g, %g]",
                   (long long)M, (long long)K, (long long)N, th_dtype_name(want_dt), (long long)i, (long long)j, got,
                   want, tol, lo, hi);
        }
        if (!(fabs(got - want) <= tol))
          fail_msg("_scaled_mm %lldx%lldx%lld %s x %s%s%s -> %s: [%lld,%lld] = %.9g, expected %.9g (tol %g)",
                   (long long)M, (long long)K, (long long)N, th_dtype_name(fa), th_dtype_name(fb),
                   b_colmajor ? " (b column-major)" : "", bias ? " + bias" : "", th_dtype_name(want_dt), (long long)i,
                   (long long)j, got, want, tol);
      }
    release_all(o, nout);
    th_program_free(p);
  }
  for (int i = 0; i < 5; i++) th_tensor_release(ins[i]);
  free(bref);
  free(c);
  free(s);
  th_trace_free(tr);
}

static void test_scaled_mm_shapes(void **state) {
  (void)state;
  static const int64_t shapes[][3] = {{1, 1, 1},    {1, 7, 1},    {5, 1, 3},     {1, 64, 300},
                                      {300, 64, 1}, {16, 32, 64}, {33, 260, 17}, {70, 40, 600}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t M = shapes[i][0], K = shapes[i][1], N = shapes[i][2];
    scaled_mm_case(M, K, N, E4, E4, true, false, false, TH_BF16, TH_BF16); /* PyTorch's layout, default: e4m3fn out */
    scaled_mm_case(M, K, N, E4, E4, true, false, true, TH_BF16, TH_BF16);  /* bf16 out */
    scaled_mm_case(M, K, N, E4, E5, false, true, true, TH_F32, TH_F32);    /* row-major b, f32 + f32 bias */
    scaled_mm_case(M, K, N, E5, E4, true, true, true, TH_BF16, TH_BF16);   /* e5m2 activation */
    scaled_mm_case(M, K, N, E4, E4, true, true, true, TH_F16, TH_F16);     /* f16 out */
  }
  scaled_mm_case(9, 19, 11, E4, E4, true, true, true, TH_F32, TH_BF16); /* bf16 bias, f32 out (PyTorch's pairing) */
  scaled_mm_case(9, 19, 11, E4, E4, false, false, true, TH_F64, TH_F64);
  scaled_mm_case(9, 19, 11, E5, E4, true, true, false, TH_BF16,
                 TH_BF16);                                         /* default e5m2 out (inf on overflow), bf16 bias */
  scaled_mm_case(9, 19, 11, E4, E5, true, true, true, E4, TH_F32); /* e4m3fn out (saturating), f32 bias */
  scaled_mm_case(40, 300, 7, E4, E4, true, false, true, E5, TH_BF16);
  /* the portable micro-kernel through the program too */
  setenv("THUNDER_FP8_GEMM", "portable", 1);
  assert_int_equal(th_eg_fp8_gemm_isa(), TH_EG_ISA_PORTABLE);
  scaled_mm_case(33, 260, 17, E4, E4, true, true, true, TH_F32, TH_F32);
  unsetenv("THUNDER_FP8_GEMM");
}

/* NaN and inf codes propagate like PyTorch's float arithmetic; K == 0 gives the bias. */
static void test_scaled_mm_special(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t s2[2] = {2, 3}, s3[2] = {3, 2};
  th_value *a = input(tr, "a", E5, 2, s2), *b = input(tr, "b", E4, 2, s3);
  th_value *sa = input(tr, "sa", TH_F32, 0, NULL), *sb = input(tr, "sb", TH_F32, 0, NULL);
  th_arg args[4] = {V(a), V(b), V(sa), V(sb)};
  static const char *const kwn[1] = {"out_dtype"};
  th_arg kw[1] = {th_arg_dtype(TH_F32)};
  th_arg y = callk(tr, "ltorch._scaled_mm", 4, args, 1, kwn, kw);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  th_program *p = compile(tr, NULL, 0);
  th_tensor *ta = tensor(E5, 2, s2), *tb = tensor(E4, 2, s3), *tsa = scalar_f32(1.0f), *tsb = scalar_f32(2.0f);
  uint8_t *pa = th_tensor_data(ta), *pb = th_tensor_data(tb);
  /* a = [[inf, 1, 0], [NaN, -0, 1]]; b = [[1, 2], [1, 0], [-1, 1]] */
  const uint8_t acodes[6] = {0x7c, 0x3c, 0x00, 0x7f, 0x80, 0x3c}, bcodes[6] = {0x38, 0x40, 0x38, 0x00, 0xb8, 0x38};
  memcpy(pa, acodes, 6);
  memcpy(pb, bcodes, 6);
  th_tensor *ins[4] = {ta, tb, tsa, tsb};
  int nout;
  th_tensor **o = run(p, 4, ins, &nout);
  assert_true(isinf(at(o[0], 0)) && at(o[0], 0) > 0); /* inf*1 + 1*1 + 0*(-1) */
  assert_true(isinf(at(o[0], 1)));                    /* inf*2 */
  assert_true(isnan(at(o[0], 2)) && isnan(at(o[0], 3)));
  release_all(o, nout);
  th_program_free(p);
  for (int i = 0; i < 4; i++) th_tensor_release(ins[i]);
  th_trace_free(tr);
  /* K == 0 */
  tr = th_trace_new(NULL);
  int64_t z2[2] = {2, 0}, z3[2] = {0, 3}, n3 = 3;
  a = input(tr, "a", E4, 2, z2);
  b = input(tr, "b", E4, 2, z3);
  sa = input(tr, "sa", TH_F32, 0, NULL);
  sb = input(tr, "sb", TH_F32, 0, NULL);
  th_value *bias = input(tr, "bias", TH_F32, 1, &n3);
  th_arg args5[5] = {V(a), V(b), V(sa), V(sb), V(bias)};
  y = callk(tr, "ltorch._scaled_mm", 5, args5, 1, kwn, kw);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  p = compile(tr, NULL, 0);
  th_tensor *ins5[5] = {tensor(E4, 2, z2), tensor(E4, 2, z3), scalar_f32(1.0f), scalar_f32(1.0f),
                        tensor(TH_F32, 1, &n3)};
  float *bd = th_tensor_data(ins5[4]);
  bd[0] = 1.5f, bd[1] = -2.0f, bd[2] = 0.25f;
  o = run(p, 5, ins5, &nout);
  for (int i = 0; i < 6; i++) assert_true(at(o[0], i) == bd[i % 3]);
  release_all(o, nout);
  th_program_free(p);
  for (int i = 0; i < 5; i++) th_tensor_release(ins5[i]);
  th_trace_free(tr);
}

/* Errors: PyTorch's checks and wording, and what this build does not support. */
static void test_scaled_mm_errors(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t s23[2] = {2, 3}, s32[2] = {3, 4}, s42[2] = {4, 2}, s3 = 3, s2 = 2, s4 = 4, s5 = 5;
  int64_t s234[3] = {2, 3, 4};
  th_value *a = input(tr, "a", E4, 2, s23), *b = input(tr, "b", E4, 2, s32), *b5 = input(tr, "b5", E5, 2, s32);
  th_value *a5 = input(tr, "a5", E5, 2, s23), *af = input(tr, "af", TH_F32, 2, s23),
           *bf = input(tr, "bf", TH_BF16, 2, s32);
  th_value *a3 = input(tr, "a3", E4, 3, s234), *bk = input(tr, "bk", E4, 2, s42), *a1 = input(tr, "a1", E4, 1, &s3);
  th_value *sa = input(tr, "sa", TH_F32, 0, NULL), *sd = input(tr, "sd", TH_F64, 0, NULL);
  th_value *sv = input(tr, "sv", TH_F32, 1, &s2), *sbf = input(tr, "sbf", TH_BF16, 0, NULL);
  th_value *bias4 = input(tr, "bias4", TH_BF16, 1, &s4), *bias5 = input(tr, "bias5", TH_BF16, 1, &s5);
  th_value *bias4f = input(tr, "bias4f", TH_F32, 1, &s4), *bias4h = input(tr, "bias4h", TH_F16, 1, &s4);
  th_value *bias2d = input(tr, "bias2d", TH_BF16, 2, s42);
  static const struct {
    int a, b, sa, sb, bias, sr;
    int has_dt;
    th_dtype dt;
    th_status st;
    const char *msg;
  } cases[] = {
    {5, 1, 0, 0, -1, -1, 0, 0, TH_ERR_RUNTIME, "ltorch._scaled_mm: Expected mat1 to be Float8 matrix got Float"},
    {0, 6, 0, 0, -1, -1, 0, 0, TH_ERR_RUNTIME, "ltorch._scaled_mm: Expected mat2 to be Float8 matrix got BFloat16"},
    {7, 1, 0, 0, -1, -1, 0, 0, TH_ERR_RUNTIME, "ltorch._scaled_mm: mat1 must be a matrix, but it has 3 dimensions"},
    {9, 1, 0, 0, -1, -1, 0, 0, TH_ERR_RUNTIME, "ltorch._scaled_mm: mat1 must be a matrix, but it has 1 dimensions"},
    {0, 8, 0, 0, -1, -1, 0, 0, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)"},
    {4, 2, 0, 0, -1, -1, 0, 0, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Multiplication of two Float8_e5m2 matrices is not supported"},
    {0, 1, 10, 0, -1, -1, 0, 0, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Both scale_a and scale_b must be float (fp32) tensors, but scale_a is Double"},
    {0, 1, 0, 12, -1, -1, 0, 0, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Both scale_a and scale_b must be float (fp32) tensors, but scale_b is BFloat16"},
    {0, 1, 11, 0, -1, -1, 0, 0, TH_ERR_NOT_IMPLEMENTED,
     "ltorch._scaled_mm: only tensor-wise scaling is supported: scale_a must have one element"},
    {0, 1, 0, 0, 14, -1, 0, 0, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Bias must be a vector of size 4 (mat2.shape[1]), but got shape [5]"},
    {0, 1, 0, 0, 17, -1, 0, 0, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Bias must be a vector of size 4 (mat2.shape[1]), but got shape [4, 2]"},
    {0, 1, 0, 0, 15, -1, 1, TH_BF16, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Bias must be BFloat16 to compute BFloat16 output, but got Float"},
    {0, 1, 0, 0, 16, -1, 1, TH_F32, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Bias must be Float or BFloat16 to compute Float output, but got Half"},
    {0, 1, 0, 0, 16, -1, 0, 0, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Bias must be BFloat16 or Float to compute Float8_e4m3fn output, but got Half"},
    {0, 1, 0, 0, 16, -1, 1, E5, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: Bias must be BFloat16 or Float to compute Float8_e5m2 output, but got Half"},
    {0, 1, 0, 0, -1, -1, 1, TH_I32, TH_ERR_RUNTIME, "ltorch._scaled_mm: out_dtype must be a floating point dtype"},
    {0, 1, 0, 0, -1, 0, 0, 0, TH_ERR_NOT_IMPLEMENTED,
     "ltorch._scaled_mm: scale_result with an fp8 output (out_dtype=float8_e4m3fn) is not supported"},
    {0, 1, 0, 0, -1, 0, 1, E5, TH_ERR_NOT_IMPLEMENTED,
     "ltorch._scaled_mm: scale_result with an fp8 output (out_dtype=float8_e5m2) is not supported"},
    {0, 1, 0, 0, -1, 10, 1, TH_BF16, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: scale_result must be a float32 tensor with one element, but got float64 with 1 elements"},
    {0, 1, 0, 0, -1, 11, 1, TH_BF16, TH_ERR_RUNTIME,
     "ltorch._scaled_mm: scale_result must be a float32 tensor with one element, but got float32 with 2 elements"},
  };
  th_value *vals[] = {a, b, b5, NULL, a5, af, bf, a3, bk, a1, sd, sv, sbf, bias4, bias5, bias4f, bias4h, bias2d};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    th_value *sav = cases[i].sa ? vals[cases[i].sa] : sa, *sbv = cases[i].sb ? vals[cases[i].sb] : sa;
    th_arg args[6] = {V(vals[cases[i].a]),
                      V(vals[cases[i].b]),
                      V(sav),
                      V(sbv),
                      cases[i].bias >= 0 ? V(vals[cases[i].bias]) : th_arg_none(),
                      cases[i].sr >= 0 ? V(cases[i].sr ? vals[cases[i].sr] : sa) : th_arg_none()};
    static const char *const kwn[1] = {"out_dtype"};
    th_arg kw[1] = {th_arg_dtype(cases[i].dt)}, out;
    int before = th_trace_num_bsyms(tr);
    th_status st = th_trace_call(tr, "ltorch._scaled_mm", 6, args, cases[i].has_dt, kwn, kw, &out);
    if (st != cases[i].st || strncmp(th_last_error(), cases[i].msg, strlen(cases[i].msg)))
      fail_msg("case %zu: expected %s \"%s...\", got %s \"%s\"", i, th_status_name(cases[i].st), cases[i].msg,
               th_status_name(st), th_last_error());
    assert_int_equal(th_trace_num_bsyms(tr), before); /* nothing recorded */
  }
  /* the prim is strict too, and requires an out_dtype */
  th_arg pargs[6] = {V(af), V(b), V(sa), V(sa), th_arg_none(), th_arg_dtype(TH_F32)}, out;
  assert_int_equal(th_trace_call(tr, "prims.scaled_mm", 6, pargs, 0, NULL, NULL, &out), TH_ERR_RUNTIME);
  assert_string_equal(th_last_error(), "prims.scaled_mm: Expected mat1 to be Float8 matrix got Float");
  pargs[0] = V(a);
  pargs[5] = th_arg_dtype(E4); /* the prim has no fp8 outputs (ltorch._scaled_mm records a cast after it) */
  assert_int_equal(th_trace_call(tr, "prims.scaled_mm", 6, pargs, 0, NULL, NULL, &out), TH_ERR_VALUE);
  assert_string_equal(
    th_last_error(),
    "prims.scaled_mm: out_dtype must be float16, bfloat16, float32 or float64 "
    "(ltorch._scaled_mm records an fp8 output as a float32 product and a cast), but got float8_e4m3fn");
  pargs[5] = th_arg_none();
  assert_int_equal(th_trace_call(tr, "prims.scaled_mm", 6, pargs, 0, NULL, NULL, &out), TH_ERR_TYPE);
  /* fp8 tensors stay out of plain matmuls */
  th_arg mm[2] = {V(a), V(b)};
  assert_int_equal(th_trace_call(tr, "ltorch.matmul", 2, mm, 0, NULL, NULL, &out), TH_ERR_RUNTIME);
  th_trace_free(tr);
}

/* use_fast_accum and scale_result are accepted (PyTorch 2.x's positional order; scale_result is ignored
 * for a bf16 output), the output never requires grad, and the default out_dtype is a's: an fp8 output
 * is the float32 product cast to it. */
static void test_scaled_mm_signature(void **state) {
  (void)state;
  const th_symbol *s = th_symbol_lookup("torch._scaled_mm");
  assert_non_null(s);
  assert_string_equal(s->qualname, "ltorch._scaled_mm");
  th_trace *tr = th_trace_new(NULL);
  int64_t s1[2] = {16, 32}, s2[2] = {32, 64};
  th_value *a = input(tr, "a", E4, 2, s1), *b = input(tr, "b", E4, 2, s2), *sa = input(tr, "sa", TH_F32, 0, NULL);
  th_arg args[8] = {V(a), V(b), V(sa), V(sa), th_arg_none(), th_arg_none(), th_arg_dtype(TH_BF16), th_arg_bool(true)};
  th_arg y = callk(tr, "ltorch._scaled_mm", 8, args, 0, NULL, NULL);
  assert_int_equal(th_value_dtype(y.u.value), TH_BF16);
  assert_false(y.u.value->requires_grad);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  char *txt = th_trace_print(tr, -1);
  assert_non_null(strstr(txt, "ltorch._scaled_mm(a, b, sa, sa, None, None, dtypes.bfloat16, True)"));
  assert_non_null(strstr(txt, "prims.scaled_mm(a, b, sa, sa, None, dtypes.bfloat16)"));
  /* it parses back */
  th_trace *back = NULL;
  if (th_trace_parse(txt, "<printed>", &back) != TH_OK) fail_msg("parse: %s\n%s", th_last_error(), txt);
  assert_int_equal(th_trace_verify(back), TH_OK);
  th_trace_free(back);
  free(txt);
  th_trace_free(tr);

  tr = th_trace_new(NULL);
  a = input(tr, "a", E4, 2, s1);
  b = input(tr, "b", E5, 2, s2);
  sa = input(tr, "sa", TH_F32, 0, NULL);
  th_arg sr_args[6] = {V(a), V(b), V(sa), V(sa), th_arg_none(), V(sa)};
  static const char *const kwn[1] = {"out_dtype"};
  th_arg kw[1] = {th_arg_dtype(TH_BF16)};
  th_arg z = callk(tr, "ltorch._scaled_mm", 6, sr_args, 1, kwn, kw);    /* scale_result, bf16 out: ignored */
  th_arg q = callk(tr, "ltorch._scaled_mm", 4, sr_args, 0, NULL, NULL); /* default: float8_e4m3fn out */
  assert_int_equal(th_value_dtype(z.u.value), TH_BF16);
  assert_int_equal(th_value_dtype(q.u.value), E4);
  th_arg both[2] = {z, q};
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(2, both)), TH_OK);
  txt = th_trace_print(tr, -1);
  assert_non_null(strstr(txt, "ltorch._scaled_mm(a, b, sa, sa, None, sa, dtypes.bfloat16, False)"));
  assert_non_null(strstr(txt, "prims.scaled_mm(a, b, sa, sa, None, dtypes.bfloat16)"));
  assert_non_null(strstr(txt, "ltorch._scaled_mm(a, b, sa, sa, None, None, None, False)"));
  assert_non_null(strstr(txt, "prims.scaled_mm(a, b, sa, sa, None, dtypes.float32)"));
  assert_non_null(strstr(txt, "dtypes.float8_e4m3fn)  # "));
  if (th_trace_parse(txt, "<printed>", &back) != TH_OK) fail_msg("parse: %s\n%s", th_last_error(), txt);
  assert_int_equal(th_trace_verify(back), TH_OK);
  th_trace_free(back);
  free(txt);
  th_trace_free(tr);
}

/* ---- the float8 transform ----------------------------------------------------------------------------- */

/* y = x @ w.T + bias through the recipe, in float64 from the same float32 (or bf16) values: the encode
 * scale, the saturated codes, the decode scales as float32 (so the same codes as the program), then
 * exact products summed in float64. bound gets the float32-accumulation error bound. */
static void ref_fp8_linear(const float *x, int64_t rows, int64_t K, const float *w, int64_t N, const float *bias,
                           th_dtype fx, th_dtype fw, double out_eps, double *y, double *bound) {
  const float *srcs[2] = {x, w};
  int64_t cnt[2] = {rows * K, N * K};
  th_dtype fmt[2] = {fx, fw};
  uint8_t *q[2];
  float inv[2];
  for (int t = 0; t < 2; t++) {
    float amax = 0;
    for (int64_t i = 0; i < cnt[t]; i++) amax = fmaxf(amax, fabsf(srcs[t][i]));
    double maxv = fmt[t] == E4 ? 448.0 : 57344.0;
    float scale = (float)(maxv / (double)fmaxf(amax, 1e-12f)); /* one rounding, as f32 division */
    q[t] = malloc((size_t)cnt[t]);
    for (int64_t i = 0; i < cnt[t]; i++)
      q[t][i] = (uint8_t)ref_encode(fmt[t], (float)((double)srcs[t][i] * scale), true);
    inv[t] = (float)(1.0 / (double)scale);
  }
  double s = (double)inv[0] * (double)inv[1];
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = ref_decode(fx, q[0][i * K + k]) * ref_decode(fw, q[1][j * K + k]);
        acc += p;
        mag += fabs(p);
      }
      double b = bias ? bias[j] : 0;
      y[i * N + j] = acc * s + b;
      bound[i * N + j] = (double)(K + 4) * 0x1p-24 * (mag * s + fabs(b)) + out_eps * fabs(y[i * N + j]) + 1e-30;
    }
  free(q[0]);
  free(q[1]);
}

static void fill(th_tensor *t, double lo, double hi) {
  int64_t n = th_tensor_numel(t);
  size_t es = th_dtype_size(th_tensor_dtype(t));
  for (int64_t i = 0; i < n; i++)
    th_store_f64((char *)th_tensor_data(t) + i * (int64_t)es, th_tensor_dtype(t), urand(lo, hi));
}

/* float copies of a tensor's values (exact for f32/bf16) */
static float *floats(const th_tensor *t) {
  int64_t n = th_tensor_numel(t);
  float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) f[i] = (float)at(t, i);
  return f;
}

static int count_ops(const th_trace *tr, const char *qualname) {
  int n = 0;
  for (int i = 0; i < th_trace_num_bsyms(tr); i++) n += !strcmp(th_bsym_qualname(th_trace_bsym(tr, i)), qualname);
  return n;
}

/* The MLP x [2, 5, 64] -> fc1 (64 -> 96, bias) -> gelu -> fc2 (96 -> 64, bias) -> gelu -> fc3 (64 -> 32, no
 * bias), returning every layer's output so each layer is checked on the program's own input. */
typedef struct {
  th_trace *tr;
  th_value *in[6];
} mlp;

static mlp build_mlp(th_dtype dt, bool prims_linear) {
  mlp m;
  m.tr = th_trace_new(NULL);
  int64_t sx[3] = {2, 5, 64}, s1[2] = {96, 64}, s2[2] = {64, 96}, s3[2] = {32, 64}, n1 = 96, n2 = 64;
  m.in[0] = input(m.tr, "x", dt, 3, sx);
  m.in[1] = input(m.tr, "t_fc1_weight", dt, 2, s1);
  m.in[2] = input(m.tr, "t_fc1_bias", dt, 1, &n1);
  m.in[3] = input(m.tr, "t_fc2_weight", dt, 2, s2);
  m.in[4] = input(m.tr, "t_fc2_bias", dt, 1, &n2);
  m.in[5] = input(m.tr, "t_fc3_weight", dt, 2, s3);
  const char *lin = prims_linear ? "prims.linear" : "ltorch.linear";
  th_arg y1 = call3(m.tr, lin, V(m.in[0]), V(m.in[1]), V(m.in[2]));
  th_arg h1 = call1(m.tr, "ltorch.gelu", y1);
  th_arg y2 = call3(m.tr, lin, h1, V(m.in[3]), V(m.in[4]));
  th_arg h2 = call1(m.tr, "ltorch.gelu", y2);
  th_arg y3 = call3(m.tr, lin, h2, V(m.in[5]), th_arg_none());
  th_arg outs[5] = {y1, h1, y2, h2, y3};
  assert_int_equal(th_trace_set_return(m.tr, th_arg_tuple(5, outs)), TH_OK);
  return m;
}

/* Runs the float8 MLP `f8` and checks each layer against ref_fp8_linear on the layer's actual input,
 * and the final output against the unquantized float64 MLP within fp8 error. */
static void check_mlp(const th_trace *f8, th_dtype dt, th_dtype fx, th_dtype fw, const char *const *execs, int nexecs,
                      int nconverted) {
  static const int64_t rows = 10, dims[4] = {64, 96, 64, 32};
  int64_t sx[3] = {2, 5, 64}, sw[3][2] = {{96, 64}, {64, 96}, {32, 64}}, nb[2] = {96, 64};
  th_tensor *in[6];
  in[0] = tensor(dt, 3, sx);
  fill(in[0], -2, 2);
  for (int l = 0; l < 3; l++) {
    in[1 + 2 * l] = tensor(dt, 2, sw[l]);
    fill(in[1 + 2 * l], -0.25, 0.25);
    if (l < 2) {
      in[2 + 2 * l] = tensor(dt, 1, &nb[l]);
      fill(in[2 + 2 * l], -0.1, 0.1);
    }
  }
  th_program *p = compile(f8, execs, nexecs);
  int nout;
  th_tensor **o = run(p, 6, in, &nout);
  assert_int_equal(nout, 5);
  const double out_eps = dt == TH_BF16 ? 0x1p-8 : dt == TH_F16 ? 0x1p-11 : 0x1p-24;
  /* layer by layer (converted layers: the recipe; others: plain float64) */
  const th_tensor *layer_in[3] = {in[0], o[1], o[3]}, *layer_out[3] = {o[0], o[2], o[4]};
  const th_tensor *layer_w[3] = {in[1], in[3], in[5]}, *layer_b[3] = {in[2], in[4], NULL};
  for (int l = 0; l < 3; l++) {
    const int64_t K = dims[l], N = dims[l + 1];
    float *x = floats(layer_in[l]), *w = floats(layer_w[l]), *b = layer_b[l] ? floats(layer_b[l]) : NULL;
    double *y = malloc(sizeof(double) * (size_t)(rows * N)), *bd = malloc(sizeof(double) * (size_t)(rows * N));
    ref_fp8_linear(x, rows, K, w, N, b, fx, fw, out_eps, y, bd);
    bool quantized = (nconverted >> l) & 1;
    for (int64_t i = 0; i < rows * N; i++) {
      double got = at(layer_out[l], i);
      if (quantized) {
        if (!(fabs(got - y[i]) <= bd[i]))
          fail_msg("fp8 layer %d [%lld]: %.9g, the recipe in float64 gives %.9g (bound %g)", l + 1, (long long)i, got,
                   y[i], bd[i]);
      } else { /* an unconverted linear: plain float math, far from the fp8 result */
        double acc = b ? b[i % N] : 0;
        for (int64_t k = 0; k < K; k++) acc += (double)x[(i / N) * K + k] * w[(i % N) * K + k];
        assert_true(fabs(got - acc) <= 1e-3 * (1 + fabs(acc)) + (dt == TH_F32 ? 0 : 0.05 * fabs(acc)));
      }
    }
    free(x);
    free(w);
    free(b);
    free(y);
    free(bd);
  }
  /* against the unquantized MLP in float64: fp8 (3 mantissa bits) error, a few percent */
  double *h = malloc(sizeof(double) * 10 * 96), *h2 = malloc(sizeof(double) * 10 * 96);
  for (int64_t i = 0; i < rows * 64; i++) h[i] = at(in[0], i);
  for (int l = 0; l < 3; l++) {
    const int64_t K = dims[l], N = dims[l + 1];
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = layer_b[l] ? at(layer_b[l], j) : 0;
        for (int64_t k = 0; k < K; k++) acc += h[i * K + k] * at(layer_w[l], j * K + k);
        h2[i * N + j] = l < 2 ? 0.5 * acc * (1 + erf(acc / sqrt(2.0))) : acc;
      }
    memcpy(h, h2, sizeof(double) * (size_t)(rows * N));
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < rows * 32; i++) {
    double d = at(o[4], i) - h[i];
    num += d * d;
    den += h[i] * h[i];
  }
  double rel = sqrt(num / den);
  if (nconverted) {
    /* rms error of a few quantization steps: 2^-4 relative per e4m3 value, 2^-3 per e5m2 value */
    double limit = fx == E5 || fw == E5 ? 0.2 : 0.1;
    if (!(rel < limit)) fail_msg("fp8 MLP vs float64 MLP: relative error %g", rel);
    print_message("fp8 MLP (%s x %s, layers 0x%x) vs float64 MLP: relative rms error %.4f\n", th_dtype_name(fx),
                  th_dtype_name(fw), nconverted, rel);
    assert_true(rel > 1e-4); /* the quantization error is there */
  }
  free(h);
  free(h2);
  release_all(o, nout);
  th_program_free(p);
  for (int i = 0; i < 6; i++) th_tensor_release(in[i]);
}

static th_trace *float8(const th_trace *tr, const th_float8_options *o) {
  th_trace *out = NULL;
  if (th_transform_float8(tr, o, &out) != TH_OK) fail_msg("float8: %s", th_last_error());
  if (th_trace_verify(out) != TH_OK) fail_msg("verify: %s", th_last_error());
  return out;
}

static void test_float8_mlp(void **state) {
  (void)state;
  for (int variant = 0; variant < 2; variant++) {
    mlp m = build_mlp(TH_F32, variant == 1);
    th_trace *f8 = float8(m.tr, NULL);
    assert_int_equal(count_ops(f8, "ltorch._scaled_mm"), 3);
    assert_int_equal(count_ops(f8, "ltorch.linear") + count_ops(f8, "prims.linear"), 0);
    assert_int_equal(count_ops(m.tr, variant ? "prims.linear" : "ltorch.linear"), 3); /* input unchanged */
    char *txt = th_trace_print(f8, 1);
    assert_non_null(strstr(txt, "# Constructed by Float8 (took "));
    assert_non_null(strstr(txt, "# float8: "));
    assert_non_null(strstr(txt, "(x, t_fc1_weight, t_fc1_bias) as dynamic per-tensor scaled float8_e4m3fn (input) x "
                                "float8_e4m3fn (weight) with _scaled_mm"));
    assert_non_null(strstr(txt, "fc1_weight_scale_"));
    assert_non_null(strstr(txt, "fc2_input_fp8_"));
    assert_non_null(strstr(txt, "fc3_weight_inv_scale_"));
    assert_non_null(strstr(txt, "None, dtypes.float32, False)  #"));
    free(txt);
    /* the printed trace parses back and verifies */
    txt = th_trace_print(f8, -1);
    th_trace *back = NULL;
    if (th_trace_parse(txt, "<float8>", &back) != TH_OK) fail_msg("parse: %s", th_last_error());
    assert_int_equal(th_trace_verify(back), TH_OK);
    th_trace_free(back);
    free(txt);
    check_mlp(f8, TH_F32, E4, E4, NULL, 0, 7);
    if (variant == 0) check_mlp(f8, TH_F32, E4, E4, FUSER, 3, 7);
    th_trace_free(f8);
    th_trace_free(m.tr);
  }
}

/* bf16 linears, and the linears autocast records (prims.linear in bfloat16 after converts) */
static void test_float8_bf16_and_autocast(void **state) {
  (void)state;
  mlp m = build_mlp(TH_BF16, false);
  th_trace *f8 = float8(m.tr, NULL);
  assert_int_equal(count_ops(f8, "ltorch._scaled_mm"), 3);
  char *txt = th_trace_print(f8, 1);
  assert_non_null(strstr(txt, "None, dtypes.bfloat16, False)  #"));
  assert_non_null(strstr(txt, "ltorch.float("));
  free(txt);
  check_mlp(f8, TH_BF16, E4, E4, NULL, 0, 7);
  th_trace_free(f8);
  th_trace_free(m.tr);

  m = build_mlp(TH_F32, false);
  th_trace *ac = NULL;
  assert_int_equal(th_transform_autocast(m.tr, TH_BF16, &ac), TH_OK);
  assert_int_equal(count_ops(ac, "ltorch.linear"), 3);
  f8 = float8(ac, NULL);
  assert_int_equal(count_ops(f8, "ltorch._scaled_mm"), 3);
  assert_int_equal(count_ops(f8, "ltorch.linear"), 0);
  txt = th_trace_print(f8, 1);
  assert_non_null(strstr(txt, "None, dtypes.bfloat16, False)  #"));
  free(txt);
  th_program *p = compile(f8, NULL, 0);
  th_program_free(p);
  th_trace_free(f8);
  th_trace_free(ac);
  th_trace_free(m.tr);
}

static th_status only_index_1(const th_bsym *b, int index, void *ctx, bool *convert) {
  int *calls = ctx;
  (*calls)++;
  assert_string_equal(th_bsym_qualname(b), "ltorch.linear");
  th_arg w = th_bsym_arg(b, 1);
  assert_int_equal(w.kind, TH_ARG_VALUE);
  if (index == 1) assert_string_equal(th_value_name(w.u.value), "t_fc2_weight");
  *convert = index == 1;
  return TH_OK;
}

static th_status failing_filter(const th_bsym *b, int index, void *ctx, bool *convert) {
  (void)b, (void)ctx, (void)convert;
  if (index == 2) return th_set_error(TH_ERR_VALUE, "no fc3 please");
  return TH_OK;
}

static void test_float8_options(void **state) {
  (void)state;
  mlp m = build_mlp(TH_F32, false);
  /* the filter: only the second linear */
  th_float8_options o = th_float8_options_default();
  assert_int_equal(o.input_dtype, E4);
  assert_int_equal(o.weight_dtype, E4);
  int calls = 0;
  o.filter = only_index_1;
  o.filter_ctx = &calls;
  th_trace *f8 = float8(m.tr, &o);
  assert_int_equal(calls, 3);
  assert_int_equal(count_ops(f8, "ltorch._scaled_mm"), 1);
  assert_int_equal(count_ops(f8, "ltorch.linear"), 2);
  check_mlp(f8, TH_F32, E4, E4, NULL, 0, 2);
  th_trace_free(f8);
  /* e5m2 weights */
  o = th_float8_options_default();
  o.weight_dtype = E5;
  f8 = float8(m.tr, &o);
  char *txt = th_trace_print(f8, -1);
  assert_non_null(strstr(txt, "f8_e5m2[96, 64]"));
  assert_non_null(strstr(txt, "57344.0"));
  free(txt);
  check_mlp(f8, TH_F32, E4, E5, NULL, 0, 7);
  th_trace_free(f8);
  /* errors */
  th_trace *out = NULL;
  o.input_dtype = E5;
  assert_int_equal(th_transform_float8(m.tr, &o, &out), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "cannot both be float8_e5m2"));
  o.input_dtype = TH_BF16;
  assert_int_equal(th_transform_float8(m.tr, &o, &out), TH_ERR_VALUE);
  assert_string_equal(th_last_error(), "float8: input_dtype must be float8_e4m3fn or float8_e5m2, but got bfloat16");
  o = th_float8_options_default();
  o.filter = failing_filter;
  assert_int_equal(th_transform_float8(m.tr, &o, &out), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "no fc3 please"));
  assert_null(out);
  assert_int_equal(th_transform_float8(NULL, NULL, &out), TH_ERR_VALUE);
  assert_int_equal(th_transform_float8(m.tr, NULL, NULL), TH_ERR_VALUE);
  th_trace_free(m.tr);
  /* float64 linears and traces without linears are copied as they are */
  th_trace *tr = th_trace_new(NULL);
  int64_t s[2] = {3, 4};
  th_value *x = input(tr, "x", TH_F64, 2, s), *w = input(tr, "w", TH_F64, 2, s);
  th_arg y = call3(tr, "ltorch.linear", V(x), V(w), th_arg_none());
  assert_int_equal(th_trace_set_return(tr, call1(tr, "ltorch.neg", y)), TH_OK);
  f8 = float8(tr, NULL);
  assert_int_equal(count_ops(f8, "ltorch.linear"), 1);
  assert_int_equal(count_ops(f8, "ltorch._scaled_mm"), 0);
  th_trace_free(f8);
  th_trace_free(tr);
}

/* ---- seed 003: the extrace of torchao's fp8 linear, run on the CPU ----------------------------------- */

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = 0;
  fclose(f);
  return s;
}

static void test_seed003_runs(void **state) {
  (void)state;
  char *text = read_file(TH_SOURCE_DIR "/tests/golden/seed003_extrace_casts_in_fusion.py");
  /* the Float8Tensor wrapper (a torchao subclass) stands in as a plain convert; torch._scaled_mm stays */
  char *cut = malloc(strlen(text) + 200);
  cut[0] = 0;
  for (char *ln = text; *ln;) {
    char *nl = strchr(ln, '\n');
    size_t n = nl ? (size_t)(nl - ln + 1) : strlen(ln);
    char *hit = strstr(ln, "Float8Tensor(");
    if (hit && hit < ln + n && !strstr(ln, "import"))
      strcat(cut,
             "  input_fp8 = prims.convert_element_type(t197, dtypes.bfloat16)  # input_fp8: \"cuda:0 bf16[16, 32]\"\n");
    else
      strncat(cut, ln, n);
    ln += n;
  }
  th_trace *tr = NULL;
  if (th_trace_parse(cut, "seed003.py", &tr) != TH_OK) fail_msg("parse: %s", th_last_error());
  assert_int_equal(th_trace_verify(tr), TH_OK);
  int found = 0;
  for (int i = 0; i < th_trace_num_bsyms(tr); i++)
    found += !strcmp(th_bsym_qualname(th_trace_bsym(tr, i)), "ltorch._scaled_mm");
  assert_int_equal(found, 1);
  th_compile_options o = {0};
  o.has_device_override = true;
  o.device_override = CPU;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  int64_t sx[2] = {16, 32}, sw[2] = {64, 32};
  th_tensor *in[2] = {tensor(TH_BF16, 2, sx), tensor(TH_BF16, 2, sw)};
  fill(in[0], -3, 3);
  fill(in[1], -0.5, 0.5);
  int nout;
  th_tensor **out = run(p, 2, in, &nout);
  assert_int_equal(nout, 5); /* the return's leaves: t122, input, weight, t122, input_fp8 */
  assert_int_equal(th_tensor_dtype(out[0]), TH_BF16);
  float *x = floats(in[0]), *w = floats(in[1]);
  double y[16 * 64], bd[16 * 64];
  ref_fp8_linear(x, 16, 32, w, 64, NULL, E4, E4, 0x1p-8, y, bd);
  for (int i = 0; i < 16 * 64; i++)
    if (!(fabs(at(out[0], i) - y[i]) <= bd[i])) fail_msg("seed003 [%d]: %.6g, expected %.6g", i, at(out[0], i), y[i]);
  free(x);
  free(w);
  release_all(out, nout);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_program_free(p);
  th_trace_free(tr);
  free(cut);
  free(text);
}

/* ---- allocation failures: every allocation failing in turn gives TH_ERR_NOMEM, never a crash or leak -- */

void th_alloc_fail_after(long n);

static void test_fault_injection(void **state) {
  (void)state;
  mlp m = build_mlp(TH_F32, false);
  int ok_at = 0;
  for (long n = 1; n < 100000 && !ok_at; n++) {
    th_trace *out = NULL;
    th_alloc_fail_after(n);
    th_status st = th_transform_float8(m.tr, NULL, &out);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      ok_at = (int)n;
      th_trace_free(out);
      break;
    }
    if (st != TH_ERR_NOMEM) fail_msg("allocation %ld: %s", n, th_last_error());
    assert_null(out);
  }
  assert_true(ok_at > 1);
  th_trace_free(m.tr);
  /* the two kernels of prims.scaled_mm at run time */
  th_trace *tr = th_trace_new(NULL);
  int64_t sa_[2] = {40, 300}, sb_[2] = {20, 300}, n = 20;
  th_value *a = input(tr, "a", E4, 2, sa_), *b = input(tr, "b", E4, 2, sb_), *s = input(tr, "s", TH_F32, 0, NULL);
  th_value *bias = input(tr, "bias", TH_BF16, 1, &n);
  th_arg args[5] = {V(a), call1(tr, "ltorch.t", V(b)), V(s), V(s), V(bias)};
  assert_int_equal(th_trace_set_return(tr, callk(tr, "ltorch._scaled_mm", 5, args, 0, NULL, NULL)), TH_OK);
  th_tensor *in[4] = {tensor(E4, 2, sa_), tensor(E4, 2, sb_), scalar_f32(0.5f), tensor(TH_BF16, 1, &n)};
  for (int e = 0; e < 2; e++) {
    th_program *p = compile(tr, e ? EAGER : NULL, e ? 1 : 0);
    int run_ok = 0;
    for (long k = 1; k < 100000 && !run_ok; k++) {
      int nout = -1;
      th_tensor **o = NULL;
      th_alloc_fail_after(k);
      th_status st = th_program_run(p, 4, in, &nout, &o);
      th_alloc_fail_after(0);
      if (st == TH_OK) {
        run_ok = 1;
        release_all(o, nout);
        break;
      }
      if (st != TH_ERR_NOMEM) fail_msg("run, allocation %ld: %s", k, th_last_error());
      assert_null(o);
    }
    assert_true(run_ok);
    th_program_free(p);
  }
  for (int i = 0; i < 4; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_decode_tables),
    cmocka_unit_test(test_scalar_casts),
    cmocka_unit_test(test_program_casts),
    cmocka_unit_test(test_worked_example),
    cmocka_unit_test(test_gemm_isas),
    cmocka_unit_test(test_scaled_mm_shapes),
    cmocka_unit_test(test_scaled_mm_special),
    cmocka_unit_test(test_scaled_mm_errors),
    cmocka_unit_test(test_scaled_mm_signature),
    cmocka_unit_test(test_float8_mlp),
    cmocka_unit_test(test_float8_bf16_and_autocast),
    cmocka_unit_test(test_float8_options),
    cmocka_unit_test(test_seed003_runs),
    cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
