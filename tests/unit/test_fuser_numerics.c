/* test_fuser_numerics.c — what the fused kernels compute (src/executors/fuser), against independent
 * references:
 *   - reductions (sum, prod, amax, amin, var, var_mean) over row, full and empty reductions, size-0
 *     and size-1 dims, every dtype class, NaN inputs: the eager executor's kernels are the reference
 *     (exact for integers, amax/amin and NaN placement; a relative tolerance for floating sums, which
 *     the fuser adds in another order, in double);
 *   - softmax, log_softmax, layer_norm, rms_norm against float64 loops written here;
 *   - layouts: inputs transposed, expanded (stride 0), sliced and padded at run time; layout ops of
 *     inputs in the trace (slice, reshape, transpose, squeeze, broadcast, a reshape that must copy);
 *     layout ops of computed values (a transposed output, reshaped and keepdim outputs);
 *   - dtypes: f16/bf16/fp8 round trips and float -> integer/bool casts of special values (NaN, inf,
 *     overflow, subnormals, fp8's 448/464 boundaries), 0-d tensors: bit for bit with eager.
 * Every case first checks that the program really has a fusion region. */
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
#include "core/scalar.h"
#define TH_FZ_KEEP_SIGNBIT /* keep <math.h>'s signbit in this file */
#include "executors/fuser/kernel_prelude.h"
#include "runtime/runtime.h"
#include "thunder/thunder.h"

static int setup_cache(void **state) {
  (void)state;
  static char root[256];
  snprintf(root, sizeof root, "%s/fuser-test-cache", TH_BINARY_DIR); /* shared with the other fuser tests */
  mkdir(root, 0700);
  setenv("XDG_CACHE_HOME", root, 1);
  return 0;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}
static double urand(double lo, double hi) { return lo + (hi - lo) * (double)rnd() / 2097152.0 / 1024.0; }

static const char *dname(th_dtype d) {
  switch (d) {
    case TH_F32: return "float32";
    case TH_F64: return "float64";
    case TH_F16: return "float16";
    case TH_BF16: return "bfloat16";
    case TH_I64: return "int64";
    case TH_I32: return "int32";
    case TH_I16: return "int16";
    case TH_I8: return "int8";
    case TH_U8: return "uint8";
    case TH_BOOL: return "bool";
    case TH_F8E4M3FN: return "float8_e4m3fn";
    default: return "float8_e5m2";
  }
}

static const char *dshort(th_dtype d) {
  switch (d) {
    case TH_F32: return "f32";
    case TH_F64: return "f64";
    case TH_F16: return "f16";
    case TH_BF16: return "bf16";
    case TH_I64: return "i64";
    case TH_I32: return "i32";
    case TH_I16: return "i16";
    case TH_I8: return "i8";
    case TH_U8: return "u8";
    case TH_BOOL: return "b8";
    case TH_F8E4M3FN: return "f8_e4m3fn";
    default: return "f8_e5m2";
  }
}

static void shape_str(char *buf, size_t n, int nd, const int64_t *s) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < nd; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)s[d]);
  snprintf(buf + k, n - k, "]");
}

static th_trace *parse(const char *text) {
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<test>", &tr) != TH_OK) fail_msg("parse: %s\n%s", th_last_error(), text);
  return tr;
}

/* Runs tr with executors ex; *nregions (may be NULL) receives its fusion regions. */
static th_tensor **run(const th_trace *tr, const char *const *ex, int nex, th_tensor **in, int nin, int *nout,
                       int *nregions) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  const th_trace *et = th_program_trace(p);
  if (nregions) {
    *nregions = 0;
    for (int i = 0; i < et->bsyms.n; i++) *nregions += ((const th_bsym *)et->bsyms.items[i])->sym->id == TH_OP_DYNAMIC;
  }
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  th_program_free(p);
  return out;
}

static const char *const EAGER[] = {"eager"}, *const FUSED[] = {"fuser", "blas", "eager"};

/* Element i (row-major over the logical shape) as a double. */
static double at(const th_tensor *t, int64_t i) { return th_tensor_get_f64(t, i); }

/* Bits of element i (exact comparison of any dtype, NaN payloads included). */
static uint64_t bits(const th_tensor *t, int64_t i) {
  int64_t off = 0, rem = i;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (rem % t->shape[d]) * t->strides[d];
    rem /= t->shape[d];
  }
  const char *p = (const char *)th_tensor_data(t) + off * (int64_t)th_dtype_size(t->dtype);
  uint64_t b = 0;
  memcpy(&b, p, th_dtype_size(t->dtype));
  return b;
}

/* Compares outputs: bit for bit, or (rtol > 0) within rtol * (1 + |x|) with NaN matching NaN. */
static void compare(th_tensor **a, th_tensor **b, int n, double rtol, const char *what) {
  for (int o = 0; o < n; o++) {
    assert_int_equal(a[o]->dtype, b[o]->dtype);
    assert_int_equal(a[o]->ndim, b[o]->ndim);
    for (int d = 0; d < a[o]->ndim; d++) assert_int_equal(a[o]->shape[d], b[o]->shape[d]);
    for (int64_t i = 0; i < th_tensor_numel(a[o]); i++) {
      double x = at(a[o], i), y = at(b[o], i);
      /* exact: the same bits; a NaN of f32/f64 may differ in payload (amax/amin return a canonical NaN) */
      bool nan32 = isnan(x) && isnan(y) && (a[o]->dtype == TH_F32 || a[o]->dtype == TH_F64);
      bool ok = rtol > 0 ? ((isnan(x) && isnan(y)) || x == y || fabs(x - y) <= rtol * (1 + fabs(x)))
                         : bits(a[o], i) == bits(b[o], i) || nan32;
      if (!ok) fail_msg("%s: output %d element %lld: eager %.17g, fuser %.17g", what, o, (long long)i, x, y);
    }
  }
}

static void release(th_tensor **t, int n) {
  for (int i = 0; i < n; i++) th_tensor_release(t[i]);
  free(t);
}

/* A contiguous tensor with values from gen(i). */
static th_tensor *tensor_of(th_dtype dt, int nd, const int64_t *shape, double (*gen)(int64_t)) {
  th_tensor *t = th_tensor_empty(dt, nd, shape);
  assert_non_null(t);
  for (int64_t i = 0; i < th_tensor_numel(t); i++)
    th_store_f64((char *)th_tensor_data(t) + i * (int64_t)th_dtype_size(dt), dt, gen(i));
  return t;
}

static double gen_small(int64_t i) {
  (void)i;
  return (double)((int)(rnd() % 41) - 20) / 8.0;
}
static double gen_wide(int64_t i) {
  (void)i;
  return urand(-4, 4);
}
static double gen_prod(int64_t i) {
  (void)i;
  return urand(0.5, 1.5);
}
static double gen_nan(int64_t i) { return i % 11 == 3 ? NAN : urand(-3, 3); }

/* fused vs eager for tr on `in`; checks there is a region; rtol as compare(). */
static void fused_vs_eager(const th_trace *tr, th_tensor **in, int nin, double rtol, const char *what) {
  int n1 = 0, n2 = 0, regions = 0;
  th_tensor **a = run(tr, EAGER, 1, in, nin, &n1, NULL);
  th_tensor **b = run(tr, FUSED, 3, in, nin, &n2, &regions);
  if (regions < 1) fail_msg("%s: no fusion region", what);
  assert_int_equal(n1, n2);
  compare(a, b, n1, rtol, what);
  release(a, n1);
  release(b, n2);
}

/* ---- reductions ------------------------------------------------------------------------------------ */

/* One program per shape: for each dtype two inputs (x: wide values, y: near 1 for prod), a prologue
 * (a multiplication, or a round trip through f32 for f16/bf16), every reduction, an epilogue on each
 * result. All of them land in one row nest (same domain, same rows). */
static void reductions_case(int nd, const int64_t *shape, const char *dims, double (*gen)(int64_t), const char *only) {
  static const th_dtype dts[] = {TH_F32, TH_F64, TH_F16, TH_BF16, TH_I32, TH_I64};
  static const char *const ops[] = {"sum", "prod", "amax", "amin", "var", "var_mean"};
  char s1[64], params[256] = "", head[1024] = "", body[8192] = "", rets[2048] = "";
  shape_str(s1, sizeof s1, nd, shape);
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) numel *= shape[d];
  th_tensor *in[16];
  int nin = 0;
  for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
    th_dtype dt = dts[t];
    bool low = dt == TH_F16 || dt == TH_BF16, isf = th_dtype_is_float(dt);
    if (numel > 1000 && low) continue;
    const char *D = dshort(dt);
#define ADD(buf, ...) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), __VA_ARGS__)
    ADD(params, "%sx_%s, y_%s", params[0] ? ", " : "", D, D);
    ADD(head, "  # x_%s: \"cpu %s%s\"\n  # y_%s: \"cpu %s%s\"\n", D, D, s1, D, D, s1);
    for (int k = 0; k < 2; k++) {
      const char *v = k ? "y" : "x";
      if (low)
        ADD(body,
            "  f%s_%s = prims.convert_element_type(%s_%s, dtypes.float32)\n"
            "  u%s_%s = prims.convert_element_type(f%s_%s, dtypes.%s)\n",
            v, D, v, D, v, D, v, D, dname(dt));
      else
        ADD(body, "  u%s_%s = prims.mul(%s_%s, %s)\n", v, D, v, D, isf ? "1.5" : "3");
    }
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
      const char *op = ops[k];
      if (only && strcmp(only, op)) continue;
      if (k >= 4 && !isf) continue;
      if (numel == 0 && (k == 2 || k == 3)) continue; /* amax/amin of nothing: an error in eager */
      if (numel > 1000 && k == 1) continue;
      const char *src = k == 1 ? "uy" : "ux";
      if (k == 5)
        ADD(body, "  (r%zu_%s, m%zu_%s) = prims.var_mean(%s_%s, %s, correction=1.0)\n", k, D, k, D, src, D, dims);
      else if (k == 4)
        ADD(body, "  r%zu_%s = prims.var(%s_%s, %s, correction=0.0)\n", k, D, src, D, dims);
      else
        ADD(body, "  r%zu_%s = prims.%s(%s_%s, %s)\n", k, D, op, src, D, dims);
      ADD(body, "  e%zu_%s = prims.convert_element_type(r%zu_%s, dtypes.float64)\n", k, D, k, D);
      ADD(rets, "%sr%zu_%s, e%zu_%s", rets[0] ? ", " : "", k, D, k, D);
      if (k == 5) ADD(rets, ", m%zu_%s", k, D);
    }
    in[nin++] = tensor_of(dt, nd, shape, gen ? gen : isf ? gen_wide : gen_small);
    in[nin++] = tensor_of(dt, nd, shape, gen ? gen : isf ? gen_prod : gen_small);
  }
  size_t n = strlen(params) + strlen(head) + strlen(body) + strlen(rets) + 64;
  char *text = malloc(n);
  snprintf(text, n, "def computation(%s):\n%s%s  return (%s)\n", params, head, body, rets);
  th_trace *tr = parse(text);
  int n1 = 0, n2 = 0, regions = 0;
  th_tensor **a = run(tr, EAGER, 1, in, nin, &n1, NULL);
  th_tensor **b = run(tr, FUSED, 3, in, nin, &n2, &regions);
  assert_int_equal(regions, 1);
  assert_int_equal(n1, n2);
  /* outputs in `rets` order; tolerance by the reduction's kind and dtype */
  int o = 0;
  for (size_t t = 0; t < sizeof dts / sizeof *dts; t++) {
    th_dtype dt = dts[t];
    bool low = dt == TH_F16 || dt == TH_BF16, isf = th_dtype_is_float(dt);
    if (numel > 1000 && low) continue;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
      if (only && strcmp(only, ops[k])) continue;
      if ((k >= 4 && !isf) || (numel == 0 && (k == 2 || k == 3)) || (numel > 1000 && k == 1)) continue;
      bool exact = !isf || k == 2 || k == 3;
      double rtol = exact ? 0 : dt == TH_F64 ? 1e-12 : low ? 1e-2 : 1e-5;
      int cnt = k == 5 ? 3 : 2;
      char what[256];
      snprintf(what, sizeof what, "%s of %s%s over %s", ops[k], dshort(dt), s1, dims);
      compare(a + o, b + o, cnt, rtol, what);
      o += cnt;
    }
  }
  assert_int_equal(o, n1);
  release(a, n1);
  release(b, n2);
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
  free(text);
}

static void test_reductions(void **state) {
  (void)state;
  struct {
    int nd;
    int64_t shape[3];
    const char *dims;
  } cases[] = {
    {2, {5, 7}, "(1,)"}, {3, {3, 4, 5}, "(1, 2)"}, {1, {300}, "(0,)"},    {2, {2, 3}, "(0, 1)"},
    {2, {4, 1}, "(1,)"}, {3, {2, 5, 1}, "(1,)"},   {2, {1, 1}, "(0, 1)"}, {2, {4, 0}, "(1,)"},
    {2, {0, 3}, "(1,)"}, {2, {2, 50000}, "(1,)"},  {1, {70000}, "(0,)"},  {2, {1, 70000}, "(1,)"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
    reductions_case(cases[c].nd, cases[c].shape, cases[c].dims, NULL, NULL);
  /* NaN anywhere: amax, amin, sum and var give NaN where eager does */
  int64_t s[2] = {6, 11};
  reductions_case(2, s, "(1,)", gen_nan, "amax");
  reductions_case(2, s, "(0, 1)", gen_nan, "amin");
  reductions_case(2, s, "(1,)", gen_nan, "var_mean");
}

/* ---- norms against float64 ------------------------------------------------------------------------------ */

static void check_close(const th_tensor *got, const double *want, int64_t n, double tol, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double g = at(got, i);
    if (!(fabs(g - want[i]) <= tol * (1 + fabs(want[i]))))
      fail_msg("%s element %lld: fused %.9g, float64 reference %.9g", what, (long long)i, g, want[i]);
  }
}

static void test_norms_vs_float64(void **state) {
  (void)state;
  enum { R = 37, C = 129 };
  int64_t shape[2] = {R, C}, wshape[1] = {C};
  th_tensor *x = tensor_of(TH_F32, 2, shape, gen_wide), *w = tensor_of(TH_F32, 1, wshape, gen_wide),
            *b = tensor_of(TH_F32, 1, wshape, gen_wide);
  double *ref = malloc(sizeof(double) * R * C);
  const char *progs[] = {
    "def computation(x):\n  # x: \"cpu f32[37, 129]\"\n  t0 = ltorch.softmax(x, 1)  # t0: \"cpu f32[37, 129]\"\n"
    "  return t0\n",
    "def computation(x):\n  # x: \"cpu f32[37, 129]\"\n  t0 = ltorch.log_softmax(x, -1)  # t0: \"cpu f32[37, 129]\"\n"
    "  return t0\n",
    "def computation(x, w, b):\n  # x: \"cpu f32[37, 129]\"\n  # w: \"cpu f32[129]\"\n  # b: \"cpu f32[129]\"\n"
    "  t0 = ltorch.layer_norm(x, [129], w, b, 1e-05)  # t0: \"cpu f32[37, 129]\"\n  return t0\n",
    "def computation(x, w):\n  # x: \"cpu f32[37, 129]\"\n  # w: \"cpu f32[129]\"\n"
    "  t0 = ltorch.rms_norm(x, [129], w, 1e-06)  # t0: \"cpu f32[37, 129]\"\n  return t0\n",
  };
  static const char *const names[] = {"softmax", "log_softmax", "layer_norm", "rms_norm"};
  for (int k = 0; k < 4; k++) {
    for (int r = 0; r < R; r++) {
      double mx = -INFINITY, sum = 0, mean = 0, sq = 0;
      const double *row = NULL;
      (void)row;
      for (int c = 0; c < C; c++) mx = fmax(mx, at(x, r * C + c));
      for (int c = 0; c < C; c++) sum += exp(at(x, r * C + c) - mx);
      for (int c = 0; c < C; c++) mean += at(x, r * C + c) / C;
      for (int c = 0; c < C; c++) sq += (at(x, r * C + c) - mean) * (at(x, r * C + c) - mean) / C;
      double ms = 0;
      for (int c = 0; c < C; c++) ms += at(x, r * C + c) * at(x, r * C + c) / C;
      for (int c = 0; c < C; c++) {
        double v = at(x, r * C + c);
        ref[r * C + c] = k == 0   ? exp(v - mx) / sum
                         : k == 1 ? v - mx - log(sum)
                         : k == 2 ? (v - mean) / sqrt(sq + 1e-5) * at(w, c) + at(b, c)
                                  : v / sqrt(ms + 1e-6) * at(w, c);
      }
    }
    th_trace *tr = parse(progs[k]);
    th_tensor *in[3] = {x, w, b};
    int nout = 0, regions = 0;
    th_tensor **out = run(tr, FUSED, 3, in, k == 2 ? 3 : k == 3 ? 2 : 1, &nout, &regions);
    assert_int_equal(regions, 1);
    check_close(out[0], ref, R * C, 2e-6, names[k]);
    release(out, nout);
    th_trace_free(tr);
  }
  free(ref);
  th_tensor_release(x);
  th_tensor_release(w);
  th_tensor_release(b);
}

/* ---- layouts --------------------------------------------------------------------------------------------- */

/* Inputs that are views at run time: transposed, expanded (stride 0), sliced with padded rows. */
static void test_runtime_views(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b, c):\n  # a: \"cpu f32[6, 9]\"\n  # b: \"cpu f32[6, 9]\"\n"
                       "  # c: \"cpu f32[6, 9]\"\n"
                       "  t0 = prims.mul(a, b)\n  t1 = prims.add(t0, c)\n  t2 = prims.sum(t1, (1,))\n"
                       "  t3 = prims.neg(t1)\n  return (t3, t2)\n");
  int64_t sbig[2] = {9, 6}, srow[1] = {9}, spad[2] = {8, 13};
  th_tensor *base_a = tensor_of(TH_F32, 2, sbig, gen_wide), *base_b = tensor_of(TH_F32, 1, srow, gen_wide),
            *base_c = tensor_of(TH_F32, 2, spad, gen_wide);
  int64_t shape[2] = {6, 9}, st_a[2] = {1, 6}, st_b[2] = {0, 1}, st_c[2] = {13, 1};
  th_tensor *in[3] = {th_tensor_view(base_a, 2, shape, st_a, 0), th_tensor_view(base_b, 2, shape, st_b, 0),
                      th_tensor_view(base_c, 2, shape, st_c, 2 * 13 + 3)};
  for (int i = 0; i < 3; i++) assert_non_null(in[i]);
  fused_vs_eager(tr, in, 3, 0, "transposed/expanded/sliced inputs");
  /* the same with the row reduction's domain read through them: sum is not bit-exact */
  for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
  th_tensor_release(base_a);
  th_tensor_release(base_b);
  th_tensor_release(base_c);
  th_trace_free(tr);
}

/* Layout ops of inputs in the trace (views at launch), one reshape that must copy at run time. */
static void test_input_layout_ops(void **state) {
  (void)state;
  th_trace *tr = parse(
    "def computation(q, v, r):\n  # q: \"cpu f32[2, 5, 12]\"\n  # v: \"cpu f32[4]\"\n  # r: \"cpu f32[6, 4]\"\n"
    "  s = prims.slice_prim(q, (0, 1, 4), (2, 5, 12), (1, 1, 1))\n"                    /* [2, 4, 8] */
    "  s4 = prims.reshape(s, (2, 4, 2, 4))\n  h = prims.transpose(s4, (0, 2, 1, 3))\n" /* [2, 2, 4, 4] */
    "  vb = prims.broadcast_in_dim(v, (2, 2, 4, 4), (3,))\n"
    "  rt = prims.transpose(r, (1, 0))\n  rr = prims.reshape(rt, (2, 2, 6))\n" /* not a view: copies */
    "  rs = prims.slice_prim(rr, (0, 0, 0), (2, 2, 4), (1, 1, 1))\n  r4 = prims.broadcast_in_dim(rs, (2, 2, 4, 4), (0, 1, 2))\n"
    "  sq = prims.squeeze(r4, ())\n"
    "  t0 = prims.mul(h, vb)\n  t1 = prims.add(t0, sq)\n  t2 = prims.exp(t1)\n  t3 = prims.sub(t2, h)\n"
    "  return t3\n");
  int64_t sq_[3] = {2, 5, 12}, sv[1] = {4}, sr[2] = {6, 4};
  th_tensor *in[3] = {tensor_of(TH_F32, 3, sq_, gen_wide), tensor_of(TH_F32, 1, sv, gen_wide),
                      tensor_of(TH_F32, 2, sr, gen_wide)};
  fused_vs_eager(tr, in, 3, 1e-6, "layout ops of inputs");
  for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
}

/* Layout ops of computed values: a transposed output, reshaped and keepdim outputs, a clone. */
static void test_intermediate_layouts(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a):\n  # a: \"cpu f64[3, 4, 5]\"\n"
                       "  t0 = prims.mul(a, 2.0)\n  t1 = prims.transpose(t0, (2, 0, 1))\n" /* [5, 3, 4] */
                       "  t2 = prims.reshape(t0, (12, 5))\n  t3 = prims.sum(t0, (2,))\n"
                       "  t4 = prims.broadcast_in_dim(t3, (3, 4, 1), (0, 1))\n  t5 = prims.clone(t1)\n"
                       "  t6 = prims.add(t5, 1.0)\n  t7 = prims.squeeze(t4, (2,))\n"
                       "  return (t1, t2, t4, t6, t7)\n");
  int64_t s[3] = {3, 4, 5};
  th_tensor *in = tensor_of(TH_F64, 3, s, gen_wide);
  fused_vs_eager(tr, &in, 1, 1e-14, "layouts of computed values");
  th_tensor_release(in);
  th_trace_free(tr);
}

/* ---- dtypes ---------------------------------------------------------------------------------------------- */

static const double specials[] = {0.0,       -0.0,    1.0,          -1.5,   NAN,    -NAN,    INFINITY,
                                  -INFINITY, 448.0,   -464.0,       470.0,  500.0,  57344.0, 61440.0,
                                  65504.0,   65520.0, 1e-8,         -3e-10, 1e30,   -1e30,   0.0625,
                                  3.0e9,     -2.5e9,  2147483647.5, 255.7,  -129.2, 300.0,   0.1};
static double gen_special(int64_t i) { return specials[i % (int64_t)(sizeof specials / sizeof *specials)]; }

/* Round trips through f16, bf16 and both fp8 formats, and float -> integer/bool casts: bit for bit. */
static void test_dtype_casts(void **state) {
  (void)state;
  th_trace *tr =
    parse("def computation(x):\n  # x: \"cpu f32[7, 8]\"\n"
          "  a = prims.convert_element_type(x, dtypes.float8_e4m3fn)\n"
          "  b = prims.convert_element_type(a, dtypes.float32)\n  c = prims.mul(b, 2.0)\n"
          "  d = prims.convert_element_type(c, dtypes.float8_e5m2)\n"
          "  e = prims.convert_element_type(d, dtypes.float16)\n"
          "  f = prims.convert_element_type(x, dtypes.bfloat16)\n"
          "  g = prims.convert_element_type(f, dtypes.float16)\n"
          "  h = prims.convert_element_type(x, dtypes.float64)\n  i = prims.mul(h, 3.0)\n"
          "  j = prims.convert_element_type(i, dtypes.float16)\n"
          "  k8 = prims.convert_element_type(x, dtypes.int8)\n  k32 = prims.convert_element_type(i, dtypes.int32)\n"
          "  k64 = prims.convert_element_type(x, dtypes.int64)\n  ku = prims.convert_element_type(x, dtypes.uint8)\n"
          "  kb = prims.convert_element_type(x, dtypes.bool)\n  l = prims.convert_element_type(k8, dtypes.float16)\n"
          "  m = prims.convert_element_type(k64, dtypes.float8_e4m3fn)\n"
          "  return (a, d, e, g, j, k8, k32, k64, ku, kb, l, m)\n");
  int64_t s[2] = {7, 8};
  th_tensor *x = tensor_of(TH_F32, 2, s, gen_special);
  fused_vs_eager(tr, &x, 1, 0, "casts of special values");
  th_tensor_release(x);
  th_trace_free(tr);
  /* saturating casts as ltorch emits them (where/clamp chains), e5m2 and e4m3fn */
  tr = parse("def computation(x):\n  # x: \"cpu bf16[5, 6]\"\n  y = prims.convert_element_type(x, dtypes.float32)\n"
             "  n = prims.ne(y, y)\n  g = prims.gt(y, -57344.0)\n  w = prims.where(g, y, -57344.0)\n"
             "  v = prims.where(n, y, w)\n  l = prims.lt(v, 57344.0)\n  u = prims.where(l, v, 57344.0)\n"
             "  z = prims.convert_element_type(u, dtypes.float8_e5m2)\n  return z\n");
  int64_t s2[2] = {5, 6};
  x = tensor_of(TH_BF16, 2, s2, gen_special);
  fused_vs_eager(tr, &x, 1, 0, "saturating e5m2 cast");
  th_tensor_release(x);
  th_trace_free(tr);
}

/* 0-d tensors, size-1 and size-0 dims, in pointwise and row nests. */
static void test_edge_shapes(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(a, b):\n  # a: \"cpu f32[]\"\n  # b: \"cpu f64[]\"\n"
                       "  t0 = prims.mul(a, 3.0)\n  t1 = prims.convert_element_type(t0, dtypes.float64)\n"
                       "  t2 = prims.add(t1, b)\n  t3 = prims.sqrt(t2)\n  return (t0, t3)\n");
  th_tensor *in[2] = {tensor_of(TH_F32, 0, NULL, gen_prod), tensor_of(TH_F64, 0, NULL, gen_prod)};
  fused_vs_eager(tr, in, 2, 0, "0-d");
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
  static const int64_t shapes[][3] = {{1, 1, 1}, {0, 4, 5}, {3, 0, 5}, {3, 4, 0}, {1, 7, 1}};
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
    char s1[64], text[1024];
    shape_str(s1, sizeof s1, 3, shapes[k]);
    snprintf(text, sizeof text,
             "def computation(a):\n  # a: \"cpu f32%s\"\n  t0 = prims.exp(a)\n  t1 = prims.sum(t0, (2,))\n"
             "  t2 = prims.broadcast_in_dim(t1, (%lld, %lld, %lld), (0, 1))\n  t3 = prims.div(t0, t2)\n"
             "  t4 = prims.mul(a, a)\n  return (t3, t1, t4)\n",
             s1, (long long)shapes[k][0], (long long)shapes[k][1], (long long)shapes[k][2]);
    tr = parse(text);
    th_tensor *a = tensor_of(TH_F32, 3, shapes[k], gen_wide);
    fused_vs_eager(tr, &a, 1, 1e-6, s1);
    th_tensor_release(a);
    th_trace_free(tr);
  }
}

/* The kernels' branch-free bf16 rounding is core/scalar.h's encode-then-decode for every rounding class:
 * all 2^16 upper halves (sign, exponent, the 7 kept mantissa bits: NaNs, infinities, subnormals, zeros)
 * with every kind of discarded low half (zero, sticky bits only, exactly half, half and sticky, all). */
static void test_bf16_rounding_helper(void **state) {
  (void)state;
  static const uint32_t lows[] = {0, 1, 0x2345, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
  for (uint32_t hi = 0; hi < 0x10000u; hi++)
    for (size_t k = 0; k < sizeof lows / sizeof *lows; k++) {
      uint32_t w = hi << 16 | lows[k];
      float x = th_sc_f32_from_bits(w);
      uint32_t want = th_sc_f32_bits(th_sc_bf16_to_f32(th_sc_f32_to_bf16(x)));
      uint32_t got = th_sc_f32_bits(th_fz_f_bf16(x));
      if (want != got) fail_msg("bf16 rounding of 0x%08x: scalar.h 0x%08x, kernel helper 0x%08x", w, want, got);
      /* a rounded value is stored as its top half, as th_sc_f32_to_bf16 stores it (NaN: canonical) */
      assert_int_equal(th_fz_st_bf16(th_fz_f_bf16(x)), th_sc_f32_to_bf16(x));
    }
}

/* The kernels' branch-free f16 codec is core/scalar.h's (itself checked in test_dtype against an
 * independent decoder and PyTorch's values): every f16 code decodes to the same float bits; floats encode to the same
 * code for all 2^19 values of the bits an f16 can keep (sign, exponent, top 10 mantissa bits: every
 * normal, subnormal, overflowing, infinite and NaN class) with every kind of discarded low part (zero,
 * sticky only, exactly half, half and sticky, all ones). Run once over all 2^32 floats as well. */
static void test_f16_codec_helpers(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x10000u; h++) {
    uint32_t want = th_sc_f32_bits(th_sc_f16_to_f32((uint16_t)h)), got = th_sc_f32_bits(th_fz_ld_f16((uint16_t)h));
    if (want != got) fail_msg("f16 0x%04x decodes to 0x%08x in scalar.h, 0x%08x in the kernel helper", h, want, got);
  }
  static const uint32_t lows[] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff};
  for (uint32_t hi = 0; hi < (1u << 19); hi++)
    for (size_t k = 0; k < sizeof lows / sizeof *lows; k++) {
      uint32_t w = hi << 13 | lows[k];
      float x = th_sc_f32_from_bits(w);
      uint16_t want = th_sc_f32_to_f16(x), got = th_fz_cv_f16(x);
      if (want != got) fail_msg("f16 encoding of 0x%08x: scalar.h 0x%04x, kernel helper 0x%04x", w, want, got);
      uint32_t rw = th_sc_f32_bits(th_sc_f16_to_f32(want)), rg = th_sc_f32_bits(th_fz_f_f16(x));
      if (rw != rg) fail_msg("f16 rounding of 0x%08x: scalar.h 0x%08x, kernel helper 0x%08x", w, rw, rg);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_f16_codec_helpers),    cmocka_unit_test(test_reductions),
    cmocka_unit_test(test_norms_vs_float64),     cmocka_unit_test(test_runtime_views),
    cmocka_unit_test(test_input_layout_ops),     cmocka_unit_test(test_intermediate_layouts),
    cmocka_unit_test(test_dtype_casts),          cmocka_unit_test(test_edge_shapes),
    cmocka_unit_test(test_bf16_rounding_helper),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
