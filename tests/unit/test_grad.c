/* test_grad.c — the grad transform (th_transform_grad) and the vjp rules of the prims.
 *
 * Rules: every differentiable prim (and the torch-level ops with direct rules) is checked against
 * central finite differences in float64: a trace calling the op on random inputs away from kinks is
 * split into forward and backward, both run, and the backward's J^T v for a random cotangent v is
 * compared with (L(x + h e_k) - L(x - h e_k)) / 2h, L(x) = <f(x), v>, for every input element, f
 * evaluated by the original trace compiled on its own (an independent path: no rule is involved).
 * Structure: the saved values and the printed traces (Thunder's forward return and backward_fn with
 * its collections), None for integer and unrequested inputs, broadcasting summed back, the dtype of
 * every gradient (bf16 inputs, autocast), in-place updates of intermediates (and the refusals), the
 * print -> parse round trip of both traces with the parsed ones giving the same gradients, the layout
 * API, and that every prim of the op table has a rule or is marked non-differentiable. Expected values
 * of the structure tests are computed here by hand (PyTorch's conventions, checked against torch 1.13:
 * maximum ties split in halves, amax ties evenly, prod with zeros). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/ir.h"
#include "ops/vjp.h"
#include "thunder/executor.h"
#include "thunder/jit.h"
#include "thunder/transform.h"

static const th_device CPU = {TH_CPU, 0};

#define assert_near(a, b, tol)                                                                                         \
  do {                                                                                                                 \
    double a_ = (a), b_ = (b);                                                                                         \
    if (!(fabs(a_ - b_) <= (tol))) fail_msg("%s = %.17g, expected %.17g (+- %g)", #a, a_, b_, (double)(tol));          \
  } while (0)

/* ---- helpers ---------------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(double lo, double hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static th_value *input(th_trace *tr, const char *name, th_dtype dt, int nd, const int64_t *shape) {
  th_value *v = th_trace_add_tensor_input(tr, name, dt, CPU, nd, shape);
  if (!v) fail_msg("input %s: %s", name, th_last_error());
  return v;
}

static th_arg callk(th_trace *tr, const char *op, int n, const th_arg *args, int nk, const char *const *kn,
                    const th_arg *kw) {
  th_arg out;
  if (th_trace_call(tr, op, n, args, nk, kn, kw, &out) != TH_OK) fail_msg("%s: %s", op, th_last_error());
  return out;
}
static th_arg call(th_trace *tr, const char *op, int n, const th_arg *args) {
  return callk(tr, op, n, args, 0, NULL, NULL);
}
static th_arg call1(th_trace *tr, const char *op, th_arg a) { return call(tr, op, 1, &a); }
static th_arg call2(th_trace *tr, const char *op, th_arg a, th_arg b) {
  th_arg args[2] = {a, b};
  return call(tr, op, 2, args);
}
static th_arg V(th_value *v) { return th_arg_value(v); }
static th_arg ints(int n, const int64_t *v) {
  static th_arg pool[64][TH_MAX_DIMS];
  static int next = 0;
  th_arg *items = pool[next++ % 64];
  for (int i = 0; i < n; i++) items[i] = th_arg_int(v[i]);
  return th_arg_tuple(n, items);
}

static th_tensor *tensor_of(const th_value *v) {
  th_tensor *t = th_tensor_new(th_value_dtype(v), th_value_ndim(v), th_value_shape(v));
  assert_non_null(t);
  return t;
}

static void fill(th_tensor *t, double lo, double hi) {
  int64_t n = th_tensor_numel(t);
  void *d = th_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    double x = urand(lo, hi);
    switch (th_tensor_dtype(t)) {
      case TH_F64: ((double *)d)[i] = x; break;
      case TH_F32: ((float *)d)[i] = (float)x; break;
      case TH_I64: ((int64_t *)d)[i] = (int64_t)floor(x); break;
      default: fail_msg("fill: dtype %s", th_dtype_name(th_tensor_dtype(t)));
    }
  }
}

static double get(const th_tensor *t, int64_t i) { return th_tensor_get_f64(t, i); }
static void set(th_tensor *t, int64_t i, double x) {
  if (th_tensor_dtype(t) == TH_F64)
    ((double *)th_tensor_data(t))[i] = x;
  else if (th_tensor_dtype(t) == TH_F32)
    ((float *)th_tensor_data(t))[i] = (float)x;
  else
    fail_msg("set: dtype");
}

static th_program *compile(const th_trace *tr) {
  th_program *p = NULL;
  if (th_program_compile(tr, NULL, &p) != TH_OK) fail_msg("compile %s: %s", tr->fn_name, th_last_error());
  return p;
}

static void run(th_program *p, int n, th_tensor **in, int *nout, th_tensor ***out) {
  if (th_program_run(p, n, in, nout, out) != TH_OK) fail_msg("run: %s", th_last_error());
}

static void release(int n, th_tensor **t) {
  for (int i = 0; i < n; i++) th_tensor_release(t[i]);
  free(t);
}

/* The gradients of tr (every floating input requested) for cotangents cots (one per output tensor,
 * in order) at inputs `in`: forward, then backward on (saved, cotangents). *grads: one per input (NULL
 * where None). */
static void grads_of(const th_trace *tr, th_tensor **in, th_tensor **cots, th_tensor ***grads) {
  th_trace *fwd = NULL, *bwd = NULL;
  if (th_transform_grad(tr, NULL, &fwd, &bwd) != TH_OK) fail_msg("grad: %s", th_last_error());
  th_grad_layout L;
  assert_int_equal(th_grad_forward_layout(fwd, &L), TH_OK);
  th_program *pf = compile(fwd), *pb = compile(bwd);
  int nf, nb;
  th_tensor **fo, **go;
  run(pf, th_trace_num_inputs(tr), in, &nf, &fo);
  assert_int_equal(nf, L.noutput + L.nflat_args + L.nflat_output + L.nsaved_tensors + L.nsaved_other);
  int nsaved = L.nsaved_tensors + L.nsaved_other, nbin = nsaved + L.nflat_output;
  assert_int_equal(th_program_num_inputs(pb), nbin);
  th_tensor **bin = calloc((size_t)nbin + 1, sizeof *bin);
  for (int i = 0; i < nsaved; i++) bin[i] = fo[L.noutput + L.nflat_args + L.nflat_output + i];
  for (int i = 0; i < L.nflat_output; i++) bin[nsaved + i] = cots[i];
  run(pb, nbin, bin, &nb, &go);
  assert_int_equal(nb, th_trace_num_inputs(tr));
  *grads = go;
  free(bin);
  release(nf, fo);
  th_program_free(pf);
  th_program_free(pb);
  th_trace_free(fwd);
  th_trace_free(bwd);
}

/* <f(x), v> by the original trace. */
static double loss(th_program *p, int nin, th_tensor **in, th_tensor **v, int nv) {
  int n;
  th_tensor **o;
  run(p, nin, in, &n, &o);
  double s = 0;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (!o[i] || !th_dtype_is_float(th_tensor_dtype(o[i]))) continue;
    assert_true(k < nv);
    for (int64_t e = 0; e < th_tensor_numel(o[i]); e++) s += get(o[i], e) * get(v[k], e);
    k++;
  }
  release(n, o);
  return s;
}

/* The finite-difference check of tr at inputs `in` (tolerance rtol on |fd| + atol). */
static void check_fd_h(const char *label, const th_trace *tr, th_tensor **in, double tol, double h) {
  int nin = th_trace_num_inputs(tr);
  th_program *p = compile(tr);
  /* cotangents: one per tensor output, random */
  int n;
  th_tensor **o;
  run(p, nin, in, &n, &o);
  th_tensor *v[16];
  int nv = 0;
  for (int i = 0; i < n; i++) {
    if (!o[i]) continue;
    th_tensor *c = th_tensor_new(th_tensor_dtype(o[i]), th_tensor_ndim(o[i]), th_tensor_shape(o[i]));
    if (th_dtype_is_float(th_tensor_dtype(c))) fill(c, -1, 1);
    v[nv++] = c;
  }
  release(n, o);
  th_tensor **g;
  grads_of(tr, in, v, &g);
  for (int i = 0; i < nin; i++) {
    if (!th_dtype_is_float(th_tensor_dtype(in[i]))) {
      assert_null(g[i]);
      continue;
    }
    if (!g[i]) fail_msg("%s: no gradient for input %d", label, i);
    assert_int_equal(th_tensor_dtype(g[i]), th_tensor_dtype(in[i]));
    assert_int_equal(th_tensor_numel(g[i]), th_tensor_numel(in[i]));
    for (int64_t e = 0; e < th_tensor_numel(in[i]); e++) {
      double x0 = get(in[i], e);
      set(in[i], e, x0 + h);
      double lp = loss(p, nin, in, v, nv);
      set(in[i], e, x0 - h);
      double lm = loss(p, nin, in, v, nv);
      set(in[i], e, x0);
      double fd = (lp - lm) / (2 * h), an = get(g[i], e);
      if (!(fabs(fd - an) <= tol * (1 + fabs(fd))))
        fail_msg("%s: input %d element %lld: vjp %.10g, finite difference %.10g", label, i, (long long)e, an, fd);
    }
  }
  release(nin, g);
  for (int i = 0; i < nv; i++) th_tensor_release(v[i]);
  th_program_free(p);
}
static void check_fd(const char *label, const th_trace *tr, th_tensor **in) { check_fd_h(label, tr, in, 1e-6, 1e-6); }

static void ret(th_trace *tr, th_arg a) { assert_int_equal(th_trace_set_return(tr, a), TH_OK); }

static const int64_t S23[2] = {2, 3};

/* ---- unary and binary prims -------------------------------------------------------------------------- */

static void unary_case(const char *op, double lo, double hi) {
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F64, 2, S23);
  ret(tr, call1(tr, op, V(x)));
  th_tensor *in[1] = {tensor_of(x)};
  fill(in[0], lo, hi);
  check_fd(op, tr, in);
  th_tensor_release(in[0]);
  th_trace_free(tr);
}

static void test_unary(void **state) {
  (void)state;
  static const struct {
    const char *op;
    double lo, hi;
  } cases[] = {
    {"prims.abs", 0.2, 2},      {"prims.neg", -2, 2},    {"prims.exp", -2, 2},     {"prims.exp2", -2, 2},
    {"prims.expm1", -2, 2},     {"prims.log", 0.3, 3},   {"prims.log1p", -0.5, 2}, {"prims.log2", 0.3, 3},
    {"prims.log10", 0.3, 3},    {"prims.sin", -3, 3},    {"prims.cos", -3, 3},     {"prims.tan", -1.2, 1.2},
    {"prims.sinh", -2, 2},      {"prims.cosh", -2, 2},   {"prims.tanh", -2, 2},    {"prims.asin", -0.8, 0.8},
    {"prims.acos", -0.8, 0.8},  {"prims.atan", -3, 3},   {"prims.asinh", -3, 3},   {"prims.acosh", 1.3, 3},
    {"prims.atanh", -0.8, 0.8}, {"prims.erf", -2, 2},    {"prims.erfc", -2, 2},    {"prims.reciprocal", 0.5, 2},
    {"prims.sqrt", 0.3, 3},     {"prims.rsqrt", 0.3, 3}, {"prims.lgamma", 0.1, 9}, {"prims.lgamma", -2.9, -2.1},
    {"prims.lgamma", 0.4, 0.6},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) unary_case(cases[i].op, cases[i].lo, cases[i].hi);
  unary_case("prims.abs", -2, -0.2);
}

/* floor, ceil, round, trunc, sign: zero gradients (values away from the jumps) */
static void test_zero_grad(void **state) {
  (void)state;
  const char *ops[] = {"prims.floor", "prims.ceil", "prims.round", "prims.trunc", "prims.sign"};
  for (size_t i = 0; i < 5; i++) {
    th_trace *tr = th_trace_new(NULL);
    th_value *x = input(tr, "x", TH_F64, 2, S23);
    ret(tr, call1(tr, ops[i], V(x)));
    th_tensor *in[1] = {tensor_of(x)};
    for (int e = 0; e < 6; e++) set(in[0], e, (e - 3) + urand(0.2, 0.4));
    check_fd(ops[i], tr, in);
    th_tensor_release(in[0]);
    th_trace_free(tr);
  }
}

/* a (2, 3) op b, b of shape bshape (0-dim: a CPU scalar the prim broadcasts itself) */
static void binary_case(const char *op, double alo, double ahi, double blo, double bhi, int bnd) {
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a", TH_F64, 2, S23), *b = input(tr, "b", TH_F64, bnd, S23);
  ret(tr, call2(tr, op, V(a), V(b)));
  th_tensor *in[2] = {tensor_of(a), tensor_of(b)};
  fill(in[0], alo, ahi);
  fill(in[1], blo, bhi);
  check_fd(op, tr, in);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
}

static void test_binary(void **state) {
  (void)state;
  static const struct {
    const char *op;
    double alo, ahi, blo, bhi;
  } cases[] = {
    {"prims.add", -2, 2, -2, 2},    {"prims.sub", -2, 2, -2, 2},         {"prims.mul", -2, 2, -2, 2},
    {"prims.div", -2, 2, 0.5, 2},   {"prims.pow", 0.5, 2, -2, 2},        {"prims.atan2", -2, 2, 0.3, 2},
    {"prims.fmod", 0.2, 1.8, 2, 3}, {"prims.remainder", 0.2, 1.8, 2, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int bnd = 0; bnd <= 2; bnd += 2)
      binary_case(cases[i].op, cases[i].alo, cases[i].ahi, cases[i].blo, cases[i].bhi, bnd);
  /* fmod / remainder with negative operands (a / b in (-1, 0)) */
  binary_case("prims.fmod", -1.8, -0.2, 2, 3, 2);
  binary_case("prims.remainder", -1.8, -0.2, 2, 3, 2);
  /* a number operand gets no gradient: pow(a, 2.5), mul(3.0, a) */
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a", TH_F64, 2, S23);
  th_arg p = call2(tr, "prims.pow", V(a), th_arg_float(2.5));
  ret(tr, call2(tr, "prims.mul", th_arg_float(3.0), p));
  th_tensor *in[1] = {tensor_of(a)};
  fill(in[0], 0.5, 2);
  check_fd("pow/mul with numbers", tr, in);
  th_tensor_release(in[0]);
  th_trace_free(tr);
}

/* maximum/minimum away from ties, and with ties split in halves (PyTorch) */
static void test_maximum_minimum(void **state) {
  (void)state;
  for (int k = 0; k < 2; k++) {
    const char *op = k ? "prims.minimum" : "prims.maximum";
    th_trace *tr = th_trace_new(NULL);
    th_value *a = input(tr, "a", TH_F64, 2, S23), *b = input(tr, "b", TH_F64, 2, S23);
    ret(tr, call2(tr, op, V(a), V(b)));
    th_tensor *in[2] = {tensor_of(a), tensor_of(b)};
    fill(in[0], -2, 2);
    for (int e = 0; e < 6; e++) set(in[1], e, get(in[0], e) + (e % 2 ? 0.5 : -0.5));
    check_fd(op, tr, in);
    /* ties: a == b everywhere but element 0 (a > b) */
    for (int e = 0; e < 6; e++) set(in[1], e, get(in[0], e));
    set(in[1], 0, get(in[0], 0) - 1);
    th_tensor *v = th_tensor_new(TH_F64, 2, S23), **g;
    for (int e = 0; e < 6; e++) set(v, e, e + 1);
    grads_of(tr, in, &v, &g);
    for (int e = 0; e < 6; e++) {
      double ga = e == 0 ? (k ? 0 : 1) : 0.5, gb = e == 0 ? (k ? 1 : 0) : 0.5;
      assert_near(get(g[0], e), ga * (e + 1), 0);
      assert_near(get(g[1], e), gb * (e + 1), 0);
    }
    release(2, g);
    th_tensor_release(v);
    th_tensor_release(in[0]);
    th_tensor_release(in[1]);
    th_trace_free(tr);
  }
}

static void test_where_convert_device(void **state) {
  (void)state;
  /* where(a > 0, a * 2, b) with b a CPU 0-dim tensor */
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a", TH_F64, 2, S23), *b = input(tr, "b", TH_F64, 0, NULL);
  th_arg p = call2(tr, "prims.gt", V(a), th_arg_float(0.0));
  th_arg t = call2(tr, "prims.mul", V(a), th_arg_float(2.0));
  th_arg args[3] = {p, t, V(b)};
  ret(tr, call(tr, "prims.where", 3, args));
  th_tensor *in[2] = {tensor_of(a), tensor_of(b)};
  for (int e = 0; e < 6; e++) set(in[0], e, e % 2 ? urand(0.2, 1) : -urand(0.2, 1));
  fill(in[1], -1, 1);
  check_fd("where", tr, in);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
  /* convert f64 -> f32 -> f64 (the f32 rounding limits the accuracy), device_put to the CPU */
  tr = th_trace_new(NULL);
  a = input(tr, "a", TH_F64, 2, S23);
  th_arg c = call2(tr, "prims.convert_element_type", V(a), th_arg_dtype(TH_F32));
  c = call1(tr, "prims.exp", c);
  c = call2(tr, "prims.convert_element_type", c, th_arg_dtype(TH_F64));
  c = call2(tr, "prims.device_put", c, th_arg_device(CPU));
  ret(tr, c);
  in[0] = tensor_of(a);
  fill(in[0], -1, 1);
  check_fd_h("convert_element_type", tr, in, 2e-3, 1e-3); /* a step far above float32's resolution */
  th_tensor_release(in[0]);
  th_trace_free(tr);
}

/* ---- reductions --------------------------------------------------------------------------------------- */

static void reduce_case(const char *op, int nd, const int64_t *dims, double lo, double hi, int ncorr) {
  th_trace *tr = th_trace_new(NULL);
  static const int64_t S[3] = {2, 3, 4};
  th_value *x = input(tr, "x", TH_F64, 3, S);
  th_arg args[2] = {V(x), ints(nd, dims)};
  const char *kn[1] = {"correction"};
  th_arg kw[1] = {th_arg_float((double)ncorr)};
  th_arg out = callk(tr, op, 2, args, ncorr >= 0 ? 1 : 0, kn, kw);
  ret(tr, out);
  th_tensor *in[1] = {tensor_of(x)};
  fill(in[0], lo, hi);
  check_fd(op, tr, in);
  th_tensor_release(in[0]);
  th_trace_free(tr);
}

static void test_reductions(void **state) {
  (void)state;
  const int64_t d1[1] = {1}, d02[2] = {0, 2}, dall[3] = {0, 1, 2};
  reduce_case("prims.sum", 1, d1, -2, 2, -1);
  reduce_case("prims.sum", 3, dall, -2, 2, -1);
  reduce_case("prims.prod", 1, d1, 0.5, 1.5, -1);
  reduce_case("prims.prod", 2, d02, -1.5, 1.5, -1);
  reduce_case("prims.amax", 1, d1, -2, 2, -1);
  reduce_case("prims.amin", 2, d02, -2, 2, -1);
  reduce_case("prims.var", 1, d1, -2, 2, 1);
  reduce_case("prims.var", 2, d02, -2, 2, 0);
  reduce_case("prims.var_mean", 1, d1, -2, 2, 1);
  reduce_case("prims.var_mean", 3, dall, -2, 2, 0);

  /* prod with zeros (PyTorch's prod_backward): one zero gets the product of the others, two zeros
   * give all zeros. Rows: [0, 2, 3] -> [6, 0, 0]; [0, 0, 4] -> [0, 0, 0]; [1, 2, 3] -> [6, 3, 2]. */
  th_trace *tr = th_trace_new(NULL);
  const int64_t S33[2] = {3, 3}, one[1] = {1};
  th_value *x = input(tr, "x", TH_F64, 2, S33);
  th_arg args[2] = {V(x), ints(1, one)};
  ret(tr, call(tr, "prims.prod", 2, args));
  th_tensor *in = tensor_of(x), *v = th_tensor_new(TH_F64, 1, (int64_t[]){3}), **g;
  const double xs[9] = {0, 2, 3, 0, 0, 4, 1, 2, 3}, want[9] = {6, 0, 0, 0, 0, 0, 6, 3, 2};
  for (int e = 0; e < 9; e++) set(in, e, xs[e]);
  for (int e = 0; e < 3; e++) set(v, e, 1);
  grads_of(tr, &in, &v, &g);
  for (int e = 0; e < 9; e++) assert_near(get(g[0], e), want[e], 0);
  release(1, g);
  th_trace_free(tr);
  th_tensor_release(v);
  th_tensor_release(in);
  /* amax ties split evenly (PyTorch): [[1, 3, 3], [2, 2, 0]] -> [[0, .5, .5], [.5, .5, 0]] */
  tr = th_trace_new(NULL);
  x = input(tr, "x", TH_F64, 2, S23);
  th_arg a2[2] = {V(x), ints(1, one)};
  ret(tr, call(tr, "prims.amax", 2, a2));
  in = tensor_of(x);
  v = th_tensor_new(TH_F64, 1, (int64_t[]){2});
  const double ys[6] = {1, 3, 3, 2, 2, 0}, w2[6] = {0, .5, .5, .5, .5, 0};
  for (int e = 0; e < 6; e++) set(in, e, ys[e]);
  set(v, 0, 1);
  set(v, 1, 1);
  grads_of(tr, &in, &v, &g);
  for (int e = 0; e < 6; e++) assert_near(get(g[0], e), w2[e], 0);
  release(1, g);
  th_trace_free(tr);
  th_tensor_release(v);
  th_tensor_release(in);
}

/* ---- shape prims ------------------------------------------------------------------------------------ */

static void test_shape(void **state) {
  (void)state;
  /* broadcast_in_dim (3, 1) -> (2, 3, 4) */
  {
    th_trace *tr = th_trace_new(NULL);
    const int64_t s31[2] = {3, 1}, out[3] = {2, 3, 4}, bd[2] = {1, 2};
    th_value *x = input(tr, "x", TH_F64, 2, s31);
    th_arg args[3] = {V(x), ints(3, out), ints(2, bd)};
    ret(tr, call(tr, "prims.broadcast_in_dim", 3, args));
    th_tensor *in = tensor_of(x);
    fill(in, -1, 1);
    check_fd("broadcast_in_dim", tr, &in);
    th_tensor_release(in);
    th_trace_free(tr);
  }
  /* a chain: reshape, transpose, squeeze, flip, slice with strides, clone, shallow_copy, stride_order */
  {
    th_trace *tr = th_trace_new(NULL);
    const int64_t s[3] = {2, 6, 7}, r[4] = {2, 1, 6, 7}, sq[1] = {1}, perm[3] = {2, 0, 1}, fl[2] = {0, 2},
                  st[3] = {1, 0, 1}, en[3] = {7, 2, 5}, sd[3] = {2, 1, 3}, order[3] = {2, 1, 0};
    th_value *x = input(tr, "x", TH_F64, 3, s);
    th_arg t = call2(tr, "prims.reshape", V(x), ints(4, r));
    t = call2(tr, "prims.squeeze", t, ints(1, sq));
    t = call2(tr, "prims.transpose", t, ints(3, perm)); /* (7, 2, 6) */
    t = call2(tr, "prims.flip", t, ints(2, fl));
    th_arg sa[4] = {t, ints(3, st), ints(3, en), ints(3, sd)};
    t = call(tr, "prims.slice_prim", 4, sa); /* (3, 2, 2) */
    t = call1(tr, "prims.clone", t);
    t = call1(tr, "prims.shallow_copy", t);
    const char *kn[1] = {"order"};
    th_arg kw[1] = {ints(3, order)};
    t = callk(tr, "prims.stride_order", 1, &t, 1, kn, kw);
    ret(tr, t);
    th_tensor *in = tensor_of(x);
    fill(in, -1, 1);
    check_fd("layout chain", tr, &in);
    th_tensor_release(in);
    th_trace_free(tr);
  }
  /* cat of three along dim 1, one of them used twice */
  {
    th_trace *tr = th_trace_new(NULL);
    const int64_t s1[2] = {2, 1}, s4[2] = {2, 4};
    th_value *a = input(tr, "a", TH_F64, 2, S23), *b = input(tr, "b", TH_F64, 2, s1),
             *c = input(tr, "c", TH_F64, 2, s4);
    th_arg items[4] = {V(a), V(b), V(c), V(a)};
    ret(tr, call2(tr, "prims.cat", th_arg_list(4, items), th_arg_int(-1)));
    th_tensor *in[3] = {tensor_of(a), tensor_of(b), tensor_of(c)};
    for (int i = 0; i < 3; i++) fill(in[i], -1, 1);
    check_fd("cat", tr, in);
    for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
    th_trace_free(tr);
  }
  /* take with repeated indices, along dim 0 and dim 1, and a 0-dim index */
  for (int dim = 0; dim < 3; dim++) {
    th_trace *tr = th_trace_new(NULL);
    const int64_t s[2] = {4, 5}, ni[1] = {6};
    th_value *x = input(tr, "x", TH_F64, 2, s);
    th_value *idx = input(tr, "idx", TH_I64, dim == 2 ? 0 : 1, ni);
    th_arg args[3] = {V(x), V(idx), th_arg_int(dim == 2 ? 1 : dim)};
    ret(tr, call(tr, "prims.take", 3, args));
    th_tensor *in[2] = {tensor_of(x), tensor_of(idx)};
    fill(in[0], -1, 1);
    const int64_t ix[6] = {3, 0, 3, 1, 3, 2};
    for (int e = 0; e < (dim == 2 ? 1 : 6); e++) ((int64_t *)th_tensor_data(in[1]))[e] = ix[e];
    check_fd("take", tr, in);
    th_tensor_release(in[0]);
    th_tensor_release(in[1]);
    th_trace_free(tr);
  }
}

/* ---- linear algebra ------------------------------------------------------------------------------------ */

static void mm_case(int an, const int64_t *as, int bn, const int64_t *bs) {
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a", TH_F64, an, as), *b = input(tr, "b", TH_F64, bn, bs);
  ret(tr, call2(tr, "prims.matmul", V(a), V(b)));
  th_tensor *in[2] = {tensor_of(a), tensor_of(b)};
  fill(in[0], -1, 1);
  fill(in[1], -1, 1);
  check_fd("matmul", tr, in);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
}

static void test_linalg(void **state) {
  (void)state;
  const int64_t k3[1] = {3}, m23[2] = {2, 3}, m34[2] = {3, 4}, b234[3] = {2, 3, 4}, b243[3] = {2, 4, 3},
                b2434[4] = {2, 1, 3, 4};
  mm_case(1, k3, 1, k3);
  mm_case(2, m23, 2, m34);
  mm_case(3, b243, 3, b234);
  mm_case(3, b234, 1, (int64_t[]){4});
  mm_case(1, k3, 4, b2434);
  mm_case(1, k3, 2, m34);
  mm_case(2, m23, 1, k3);
  /* linear: batched input with bias, 1-D input without */
  for (int k = 0; k < 2; k++) {
    th_trace *tr = th_trace_new(NULL);
    const int64_t xs[3] = {2, 2, 3}, ws[2] = {4, 3}, bs[1] = {4};
    th_value *x = input(tr, "x", TH_F64, k ? 1 : 3, k ? k3 : xs), *w = input(tr, "w", TH_F64, 2, ws);
    th_value *b = k ? NULL : input(tr, "b", TH_F64, 1, bs);
    th_arg args[3] = {V(x), V(w), b ? V(b) : th_arg_none()};
    ret(tr, call(tr, "prims.linear", 3, args));
    th_tensor *in[3] = {tensor_of(x), tensor_of(w), b ? tensor_of(b) : NULL};
    for (int i = 0; i < (b ? 3 : 2); i++) fill(in[i], -1, 1);
    check_fd("linear", tr, in);
    for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
    th_trace_free(tr);
  }
}

/* ---- torch-level ops: direct rules and decompositions ------------------------------------------------ */

static void test_torch_ops(void **state) {
  (void)state;
  static const int64_t s[3] = {2, 3, 5};
  /* softmax / log_softmax (direct rules), and through the decompositions: layer_norm, gelu, mse_loss */
  const char *ops[] = {"ltorch.softmax", "ltorch.log_softmax"};
  for (int k = 0; k < 2; k++) {
    th_trace *tr = th_trace_new(NULL);
    th_value *x = input(tr, "x", TH_F64, 3, s);
    ret(tr, call2(tr, ops[k], V(x), th_arg_int(1)));
    th_tensor *in = tensor_of(x);
    fill(in, -2, 2);
    check_fd(ops[k], tr, &in);
    th_tensor_release(in);
    th_trace_free(tr);
  }
  {
    th_trace *tr = th_trace_new(NULL);
    const int64_t ns[1] = {5};
    th_value *x = input(tr, "x", TH_F64, 3, s), *w = input(tr, "w", TH_F64, 1, ns), *b = input(tr, "b", TH_F64, 1, ns);
    th_arg args[4] = {V(x), ints(1, ns), V(w), V(b)};
    th_arg y = call(tr, "ltorch.layer_norm", 4, args);
    y = call1(tr, "ltorch.gelu", y);
    ret(tr, y);
    th_tensor *in[3] = {tensor_of(x), tensor_of(w), tensor_of(b)};
    for (int i = 0; i < 3; i++) fill(in[i], -1, 1);
    check_fd("layer_norm + gelu", tr, in);
    for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
    th_trace_free(tr);
  }
  /* split (sections) and chunk (direct rules: one cat of the pieces' cotangents); the middle piece of the
   * split is unused, so its cotangent is zeros, and chunk's second piece is scaled */
  {
    th_trace *tr = th_trace_new(NULL);
    th_value *x = input(tr, "x", TH_F64, 3, s);
    const int64_t secs[3] = {1, 3, 1};
    th_arg sargs[3] = {V(x), ints(3, secs), th_arg_int(-1)};
    th_arg pieces = call(tr, "ltorch.split", 3, sargs);
    th_arg cargs[3] = {V(x), th_arg_int(2), th_arg_int(1)};
    th_arg chunks = call(tr, "ltorch.chunk", 3, cargs);
    th_arg sq = call2(tr, "ltorch.mul", chunks.u.seq.items[1], chunks.u.seq.items[1]);
    th_arg items[3] = {pieces.u.seq.items[0], pieces.u.seq.items[2], sq};
    ret(tr, th_arg_tuple(3, items));
    th_tensor *in = tensor_of(x);
    fill(in, -2, 2);
    check_fd("split + chunk", tr, &in);
    th_tensor_release(in);
    th_trace_free(tr);
  }
  /* cross_entropy with class indices, and embedding with padding_idx and scale_grad_by_freq */
  {
    th_trace *tr = th_trace_new(NULL);
    const int64_t ls[2] = {4, 5}, ts[1] = {4};
    th_value *x = input(tr, "x", TH_F64, 2, ls), *t = input(tr, "t", TH_I64, 1, ts);
    ret(tr, call2(tr, "ltorch.cross_entropy", V(x), V(t)));
    th_tensor *in[2] = {tensor_of(x), tensor_of(t)};
    fill(in[0], -2, 2);
    fill(in[1], 0, 5);
    check_fd("cross_entropy", tr, in);
    th_tensor_release(in[0]);
    th_tensor_release(in[1]);
    th_trace_free(tr);
  }
  for (int k = 0; k < 2; k++) {
    th_trace *tr = th_trace_new(NULL);
    const int64_t is[2] = {2, 4}, ws[2] = {6, 3};
    th_value *idx = input(tr, "idx", TH_I64, 2, is), *w = input(tr, "w", TH_F64, 2, ws);
    const char *kn[2] = {"padding_idx", "scale_grad_by_freq"};
    th_arg kw[2] = {th_arg_int(-3), th_arg_bool(k == 1)};
    th_arg args[2] = {V(idx), V(w)};
    ret(tr, callk(tr, "ltorch.embedding", 2, args, 2, kn, kw));
    th_tensor *in[2] = {tensor_of(idx), tensor_of(w)};
    const int64_t ix[8] = {0, 3, 1, 3, 5, 3, 0, 2};
    memcpy(th_tensor_data(in[0]), ix, sizeof ix);
    fill(in[1], -1, 1);
    /* the padding row (3) gets no gradient, whatever the finite differences say: check it, then zero
     * the row's finite differences by comparing with a trace that masks it */
    th_tensor *v = th_tensor_new(TH_F64, 3, (int64_t[]){2, 4, 3}), **g;
    fill(v, -1, 1);
    grads_of(tr, in, &v, &g);
    assert_null(g[0]);
    for (int e = 0; e < 18; e++) {
      int64_t row = e / 3, col = e % 3;
      double want = 0;
      int cnt = 0;
      for (int i = 0; i < 8; i++) cnt += ix[i] == row;
      for (int i = 0; i < 8; i++)
        if (ix[i] == row && row != 3) want += get(v, i * 3 + col) / (k == 1 ? cnt : 1);
      assert_near(get(g[1], e), want, 1e-12);
    }
    release(2, g);
    th_tensor_release(v);
    th_tensor_release(in[0]);
    th_tensor_release(in[1]);
    th_trace_free(tr);
  }
}

/* ---- structure ------------------------------------------------------------------------------------------- */

static char *print(const th_trace *tr) {
  char *s = th_trace_print(tr, 1);
  assert_non_null(s);
  return s;
}

static void assert_contains(const char *text, const char *what) {
  if (!strstr(text, what)) fail_msg("expected to find\n  %s\nin\n%s", what, text);
}

/* y = sin(x) * w: the backward reads x (for cos), w and sin(x); both traces as Thunder prints them.
 * Without rematerialization (which would recompute sin(x) from the saved x: test_remat.c). */
static void test_saved_and_printed(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 2, S23), *w = input(tr, "w", TH_F32, 2, S23);
  th_arg s = call1(tr, "ltorch.sin", V(x));
  th_arg y = call2(tr, "ltorch.mul", s, V(w));
  ret(tr, y);
  th_trace *fwd, *bwd;
  assert_int_equal(th_transform_grad_remat(tr, NULL, false, &fwd, &bwd), TH_OK);
  char *f = print(fwd), *b = print(bwd);
  char want[512];
  const char *sn = th_value_name(s.u.value), *yn = th_value_name(y.u.value);
  snprintf(want, sizeof want, "return ({'output': %s, 'flat_args': [x, w], 'flat_output': (%s,)}, ((x, w, %s), ()))",
           yn, yn, sn);
  assert_contains(f, want);
  assert_contains(f, "# Constructed by Grad transform pass (took ");
  assert_contains(f, "def computation(x, w):");
  assert_contains(b, "def backward_fn(saved_for_backward, cotangents):");
  assert_contains(b, "  # saved_for_backward: \"Collection\"\n  # cotangents: \"Collection\"\n");
  assert_contains(b, "  C0, C1, = saved_for_backward\n  # C0: \"Collection\"\n  # C1: \"Collection\"\n");
  snprintf(want, sizeof want, "  x, w, %s, = C0\n  # x: \"cpu f32[2, 3]\"\n  # w: \"cpu f32[2, 3]\"\n", sn);
  assert_contains(b, want);
  assert_contains(b, " = cotangents\n");
  assert_true(strstr(b, "C1 (empty") == NULL); /* no unpacking of an empty collection */
  th_grad_layout L;
  assert_int_equal(th_grad_forward_layout(fwd, &L), TH_OK);
  assert_int_equal(L.noutput, 1);
  assert_int_equal(L.nflat_args, 2);
  assert_int_equal(L.nflat_output, 1);
  assert_int_equal(L.nsaved_tensors, 3);
  assert_int_equal(L.nsaved_other, 0);
  assert_int_equal(th_grad_forward_layout(tr, &L), TH_ERR_VALUE);
  /* the collections, through the public API */
  const th_value *sfb = th_trace_input(bwd, 0);
  assert_true(th_value_is_collection(sfb));
  assert_int_equal(th_value_num_items(sfb), 2);
  assert_int_equal(th_value_num_items(th_value_item(sfb, 0)), 3);
  assert_ptr_equal(th_value_item(th_value_item(sfb, 0), 0), x);
  assert_int_equal(th_value_dtype(sfb), TH_DTYPE_COUNT);
  free(f);
  free(b);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* print -> parse -> print is stable for both traces; the parsed traces compile and give the same
 * gradients as the originals. */
static void test_roundtrip(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t ws[2] = {4, 3}, bs[1] = {4};
  th_value *x = input(tr, "x", TH_F64, 2, S23), *w = input(tr, "w", TH_F64, 2, ws), *b = input(tr, "b", TH_F64, 1, bs);
  th_arg args[3] = {V(x), V(w), V(b)};
  th_arg y = call(tr, "ltorch.linear", 3, args);
  y = call1(tr, "ltorch.tanh", y);
  th_arg s = call1(tr, "ltorch.sum", y);
  th_arg items[2] = {s, y};
  ret(tr, th_arg_tuple(2, items));
  th_trace *fwd, *bwd;
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_OK);
  th_trace *t2[2] = {fwd, bwd}, *p2[2];
  for (int k = 0; k < 2; k++) {
    char *a = th_trace_print(t2[k], -1);
    if (th_trace_parse(a, "<grad>", &p2[k]) != TH_OK) fail_msg("parse: %s\n%s", th_last_error(), a);
    assert_int_equal(th_trace_verify(p2[k]), TH_OK);
    char *c = th_trace_print(p2[k], -1);
    assert_string_equal(a, c);
    free(a);
    free(c);
  }
  /* run both pairs */
  th_tensor *in[3] = {tensor_of(x), tensor_of(w), tensor_of(b)};
  for (int i = 0; i < 3; i++) fill(in[i], -1, 1);
  th_tensor *ct[2] = {th_tensor_new(TH_F64, 0, NULL), th_tensor_new(TH_F64, 2, (int64_t[]){2, 4})};
  fill(ct[0], -1, 1);
  fill(ct[1], -1, 1);
  th_tensor **res[2];
  for (int k = 0; k < 2; k++) {
    th_trace *F = k ? p2[0] : fwd, *B = k ? p2[1] : bwd;
    th_program *pf = compile(F), *pb = compile(B);
    int nf, nb;
    th_tensor **fo;
    run(pf, 3, in, &nf, &fo);
    th_grad_layout L;
    assert_int_equal(th_grad_forward_layout(F, &L), TH_OK);
    int ns = L.nsaved_tensors + L.nsaved_other;
    th_tensor *bin[16];
    for (int i = 0; i < ns; i++) bin[i] = fo[L.noutput + L.nflat_args + L.nflat_output + i];
    bin[ns] = ct[0];
    bin[ns + 1] = ct[1];
    run(pb, ns + 2, bin, &nb, &res[k]);
    assert_int_equal(nb, 3);
    release(nf, fo);
    th_program_free(pf);
    th_program_free(pb);
  }
  for (int i = 0; i < 3; i++)
    for (int64_t e = 0; e < th_tensor_numel(res[0][i]); e++) assert_near(get(res[0][i], e), get(res[1][i], e), 0);
  release(3, res[0]);
  release(3, res[1]);
  for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
  th_tensor_release(ct[0]);
  th_tensor_release(ct[1]);
  for (int k = 0; k < 2; k++) th_trace_free(p2[k]);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* None for integer inputs, unrequested inputs and inputs the output does not depend on */
static void test_none_grads(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t is[1] = {4}, ws[2] = {5, 3};
  th_value *idx = input(tr, "idx", TH_I64, 1, is), *w = input(tr, "w", TH_F32, 2, ws);
  th_value *m = input(tr, "masked", TH_F32, 2, ws);
  (void)input(tr, "unused", TH_F32, 1, is);
  th_arg e = call2(tr, "ltorch.embedding", V(idx), V(w));
  th_arg items[2] = {e, call2(tr, "ltorch.mul", V(m), th_arg_float(2.0))};
  ret(tr, th_arg_tuple(2, items));
  bool rg[4] = {false, true, false, true}; /* idx, w, masked, unused */
  th_grad_options o = {rg, 4};
  th_trace *fwd, *bwd;
  assert_int_equal(th_transform_grad(tr, &o, &fwd, &bwd), TH_OK);
  char *b = print(bwd);
  const char *r = strstr(b, "return (");
  assert_non_null(r);
  assert_true(!strncmp(r, "return (None, t", 15));
  assert_contains(r, ", None, None)");
  free(b);
  th_trace_free(fwd);
  th_trace_free(bwd);
  /* requesting an integer input is an error, as is a wrong-length mask */
  bool bad[4] = {true, true, false, false};
  o.requires_grad = bad;
  assert_int_equal(th_transform_grad(tr, &o, &fwd, &bwd), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "only Tensors of floating point dtype can require gradients"));
  o.ninputs = 3;
  assert_int_equal(th_transform_grad(tr, &o, &fwd, &bwd), TH_ERR_VALUE);
  assert_int_equal(th_transform_grad(NULL, NULL, &fwd, &bwd), TH_ERR_VALUE);
  /* a backward trace (collection inputs) is not differentiated again */
  o.requires_grad = NULL;
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_OK);
  th_trace *f2, *b2;
  assert_int_equal(th_transform_grad(bwd, NULL, &f2, &b2), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(strstr(th_last_error(), "double backward is not supported"));
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* ltorch.add of (2, 3) and (3,): the (3,) input's gradient sums over the broadcast dim; a bf16
 * input's gradient is bf16; autocast's casts differentiate to float32 gradients of float32 inputs. */
static void test_broadcast_and_dtypes(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s3[1] = {3};
  th_value *x = input(tr, "x", TH_F64, 2, S23), *b = input(tr, "b", TH_F64, 1, s3);
  ret(tr, call2(tr, "ltorch.add", V(x), V(b)));
  th_tensor *in[2] = {tensor_of(x), tensor_of(b)}, *v = th_tensor_new(TH_F64, 2, S23), **g;
  fill(v, -1, 1);
  grads_of(tr, in, &v, &g);
  assert_int_equal(th_tensor_ndim(g[1]), 1);
  for (int j = 0; j < 3; j++) assert_near(get(g[1], j), get(v, j) + get(v, 3 + j), 1e-15);
  release(2, g);
  th_tensor_release(v);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);

  /* bf16: exp computes in f32 and rounds; the gradient is bf16 */
  tr = th_trace_new(NULL);
  x = input(tr, "x", TH_BF16, 2, S23);
  ret(tr, call1(tr, "ltorch.exp", V(x)));
  th_trace *fwd, *bwd;
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_OK);
  th_arg r = th_trace_output(bwd);
  assert_int_equal(th_value_dtype(r.u.seq.items[0].u.value), TH_BF16);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);

  /* autocast: linear on f32 x, w recorded in bf16; gradients f32, the casts differentiated */
  tr = th_trace_new(NULL);
  const int64_t ws[2] = {4, 3};
  x = input(tr, "x", TH_F32, 2, S23);
  th_value *w = input(tr, "w", TH_F32, 2, ws);
  assert_int_equal(th_trace_autocast_push(tr, TH_CPU, TH_BF16, true), TH_OK);
  th_arg y = call2(tr, "ltorch.linear", V(x), V(w));
  assert_int_equal(th_trace_autocast_pop(tr), TH_OK);
  assert_int_equal(th_value_dtype(y.u.value), TH_BF16);
  ret(tr, y);
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_OK);
  r = th_trace_output(bwd);
  assert_int_equal(th_value_dtype(r.u.seq.items[0].u.value), TH_F32);
  assert_int_equal(th_value_dtype(r.u.seq.items[1].u.value), TH_F32);
  char *bs = print(bwd);
  assert_contains(bs, "prims.convert_element_type(");
  assert_contains(bs, "dtypes.float32)");
  free(bs);
  /* and the values: the f32 gradient of x is (g @ w) computed in bf16 */
  th_tensor *xi = tensor_of(x), *wi = tensor_of(w), *gy = th_tensor_new(TH_BF16, 2, (int64_t[]){2, 4});
  fill(xi, -1, 1);
  fill(wi, -1, 1);
  for (int e = 0; e < 8; e++) ((uint16_t *)th_tensor_data(gy))[e] = 0x3f80; /* bf16 1.0 */
  th_tensor *ins[2] = {xi, wi};
  grads_of(tr, ins, &gy, &g);
  assert_int_equal(th_tensor_dtype(g[0]), TH_F32);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      double want = 0;
      for (int k = 0; k < 4; k++) want += get(wi, k * 3 + j);
      assert_near(get(g[0], i * 3 + j), want, 0.05);
    }
  release(2, g);
  th_tensor_release(xi);
  th_tensor_release(wi);
  th_tensor_release(gy);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* y = x * 2; y.add_(sin(x)); return y * x — the in-place update of an intermediate differentiates; an
 * update of an input that requires grad and one seen through an alias are refused. */
static void test_inplace(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F64, 2, S23);
  th_arg y = call2(tr, "ltorch.mul", V(x), th_arg_float(2.0));
  th_arg y2 = call2(tr, "ltorch.add_", y, call1(tr, "ltorch.sin", V(x)));
  ret(tr, call2(tr, "ltorch.mul", y2, V(x)));
  th_tensor *in = tensor_of(x);
  fill(in, -1, 1);
  check_fd("add_ of an intermediate", tr, &in);
  th_trace *fwd, *bwd;
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_OK);
  char *f = print(fwd);
  assert_contains(f, "prims.copy_(");
  free(f);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_tensor_release(in);
  th_trace_free(tr);

  tr = th_trace_new(NULL);
  x = input(tr, "x", TH_F64, 2, S23);
  y2 = call2(tr, "ltorch.mul_", V(x), th_arg_float(2.0));
  ret(tr, y2);
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_ERR_RUNTIME);
  assert_non_null(strstr(th_last_error(), "a leaf Variable that requires grad is being used in an in-place operation"));
  /* not requested: fine (no gradient for x) */
  bool rg[1] = {false};
  th_grad_options o = {rg, 1};
  assert_int_equal(th_transform_grad(tr, &o, &fwd, &bwd), TH_OK);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);

  /* v = y's alias; y updated; v read after: update_aliases on the gradient path */
  tr = th_trace_new(NULL);
  x = input(tr, "x", TH_F64, 2, S23);
  y = call2(tr, "ltorch.mul", V(x), th_arg_float(2.0));
  th_arg v = call1(tr, "prims.shallow_copy", y);
  y2 = call2(tr, "ltorch.add_", y, th_arg_float(1.0));
  th_arg v2 = call2(tr, "prims.update_aliases", v, y2);
  ret(tr, v2);
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(
    strstr(th_last_error(), "prims.update_aliases: cannot differentiate an in-place update seen through an alias"));
  th_trace_free(tr);
}

/* An op without a rule or decomposition on the gradient path (a registered op) is an error; off the
 * path it is fine. */
static th_status like_meta(const th_arg *args, int nargs, th_tensor_meta *outs, int *nouts) {
  (void)nargs;
  outs[0] = th_tensor_meta_of(args[0].u.value);
  *nouts = 1;
  return TH_OK;
}

static void test_no_rule(void **state) {
  (void)state;
  static bool registered = false;
  if (!registered)
    assert_int_equal(th_op_register("gradtest.opaque", "opaque(Tensor a) -> Tensor", like_meta, NULL, 0), TH_OK);
  registered = true;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F64, 2, S23), *z = input(tr, "z", TH_F64, 2, S23);
  th_arg items[2] = {call1(tr, "gradtest.opaque", V(x)), call1(tr, "prims.exp", V(z))};
  ret(tr, th_arg_tuple(2, items));
  th_trace *fwd, *bwd;
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(strstr(th_last_error(), "grad: no vjp rule for gradtest.opaque"));
  bool rg[2] = {false, true};
  th_grad_options o = {rg, 2};
  assert_int_equal(th_transform_grad(tr, &o, &fwd, &bwd), TH_OK);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* Every prim of the op table has a vjp entry (a rule or non-differentiable), except utility prims and
 * the ones listed here, which have none yet. */
static void test_table(void **state) {
  (void)state;
  /* scaled_mm: its operands are fp8, which the grad transform never differentiates (the float8
   * transform's backward is the direct rule of ltorch.float8_linear_output, not this prim's) */
  static const char *const missing[] = {"prims.scaled_mm"};
  int nrule = 0, nnon = 0;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (!s->is_prim || (s->tags & TH_TAG_UTILITY)) continue;
    const th_vjp_entry *e = th_vjp_get((th_op_id)id);
    bool listed = false;
    for (size_t k = 0; k < sizeof missing / sizeof missing[0]; k++) listed |= !strcmp(missing[k], s->qualname);
    if (listed) {
      assert_null(e);
      continue;
    }
    if (!e) fail_msg("%s has no vjp entry", s->qualname);
    nrule += e->kind == TH_VJP_RULE;
    nnon += e->kind == TH_VJP_NONDIFF;
  }
  assert_true(nrule >= 60);
  assert_true(nnon >= 15);
  assert_non_null(th_vjp_get(TH_OP_ltorch_softmax));
  assert_null(th_vjp_get(TH_OP_ltorch_add)); /* through its decomposition */
}

/* A trace parsed at print depth 1 (no decompositions printed) is decomposed again. */
static void test_parsed_depth1(void **state) {
  (void)state;
  const char *text = "def computation(x, w):\n"
                     "  # x: \"cpu f64[2, 3]\"\n"
                     "  # w: \"cpu f64[4, 3]\"\n"
                     "  t0 = ltorch.linear(x, w, None)  # t0: \"cpu f64[2, 4]\"\n"
                     "  t1 = ltorch.gelu(t0, approximate='tanh')  # t1: \"cpu f64[2, 4]\"\n"
                     "  return t1\n";
  th_trace *tr;
  if (th_trace_parse(text, "<depth1>", &tr) != TH_OK) fail_msg("%s", th_last_error());
  th_tensor *in[2] = {tensor_of(th_trace_input(tr, 0)), tensor_of(th_trace_input(tr, 1))};
  fill(in[0], -1, 1);
  fill(in[1], -1, 1);
  check_fd("parsed at depth 1", tr, in);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
}

/* A number proxy the backward reads is saved in C1 and bound as a 0-dim tensor of its Python type. */
static void test_saved_number(void **state) {
  (void)state;
  const char *text = "def computation(x, f):\n"
                     "  # x: \"cpu f64[2, 3]\"\n"
                     "  # f: \"float ?\"\n"
                     "  t0 = prims.mul(x, f)  # t0: \"cpu f64[2, 3]\"\n"
                     "  return t0\n";
  th_trace *tr;
  if (th_trace_parse(text, "<num>", &tr) != TH_OK) fail_msg("%s", th_last_error());
  th_trace *fwd, *bwd;
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_OK);
  char *b = print(bwd);
  assert_contains(b, "  f, = C1\n  # f: \"float ?\"\n");
  assert_true(strstr(b, "= C0") == NULL); /* no tensor saved */
  th_grad_layout L;
  assert_int_equal(th_grad_forward_layout(fwd, &L), TH_OK);
  assert_int_equal(L.nsaved_tensors, 0);
  assert_int_equal(L.nsaved_other, 1);
  th_trace *pb;
  if (th_trace_parse(b, "<bwd>", &pb) != TH_OK) fail_msg("%s\n%s", th_last_error(), b);
  th_tensor *x = th_tensor_new(TH_F64, 2, S23), *f = th_tensor_new(TH_F64, 0, NULL), *v = th_tensor_new(TH_F64, 2, S23);
  fill(x, -1, 1);
  fill(v, -1, 1);
  set(f, 0, 2.5);
  th_tensor *in[2] = {x, f}, **g;
  grads_of(tr, in, &v, &g);
  assert_null(g[1]);
  for (int e = 0; e < 6; e++) assert_near(get(g[0], e), 2.5 * get(v, e), 0);
  release(2, g);
  /* the parsed backward runs the same: leaves {f, cotangent} */
  th_program *p = compile(pb);
  assert_int_equal(th_program_num_inputs(p), 2);
  th_tensor *bin[2] = {f, v}, **o;
  int n;
  run(p, 2, bin, &n, &o);
  for (int e = 0; e < 6; e++) assert_near(get(o[0], e), 2.5 * get(v, e), 0);
  release(n, o);
  th_program_free(p);
  th_tensor_release(x);
  th_tensor_release(f);
  th_tensor_release(v);
  free(b);
  th_trace_free(pb);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* A backward run checks its leaves: the count and each tensor's metadata. */
static void test_backward_inputs(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 2, S23);
  ret(tr, call1(tr, "ltorch.exp", V(x)));
  th_trace *fwd, *bwd;
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_OK);
  th_program *pb = compile(bwd);
  assert_int_equal(th_program_num_inputs(pb), 2); /* exp's output, the cotangent */
  th_tensor *a = th_tensor_new(TH_F32, 2, S23), *c = th_tensor_new(TH_F64, 2, S23), *in[2] = {a, c}, **o;
  int n;
  assert_int_equal(th_program_run(pb, 1, in, &n, &o), TH_ERR_VALUE);
  assert_int_equal(th_program_run(pb, 2, in, &n, &o), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "expected cpu f32[2, 3], got f64[2, 3]"));
  th_tensor_release(a);
  th_tensor_release(c);
  th_program_free(pb);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* Every allocation failing in turn, around the transform and around parsing the printed backward: an
 * out-of-memory error each time (never a crash or a leak; the sanitizer build checks leaks), then
 * success. */
static void test_fault_injection(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t ws[2] = {4, 3};
  th_value *x = input(tr, "x", TH_F32, 2, S23), *w = input(tr, "w", TH_F32, 2, ws);
  th_arg y = call2(tr, "ltorch.linear", V(x), V(w));
  y = call1(tr, "ltorch.gelu", y);
  ret(tr, call1(tr, "ltorch.sum", y));
  int ok_at = 0;
  char *text = NULL;
  for (long n = 1; n < 1000000; n++) {
    th_trace *fwd = NULL, *bwd = NULL;
    th_alloc_fail_after(n);
    th_status st = th_transform_grad(tr, NULL, &fwd, &bwd);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      ok_at = (int)n;
      text = th_trace_print(bwd, -1);
      th_trace_free(fwd);
      th_trace_free(bwd);
      break;
    }
    if (st != TH_ERR_NOMEM) fail_msg("allocation %ld: %s: %s", n, th_status_name(st), th_last_error());
    assert_null(fwd);
    assert_null(bwd);
  }
  assert_true(ok_at > 1);
  assert_non_null(text);
  ok_at = 0;
  for (long n = 1; n < 1000000; n++) {
    th_trace *p = NULL;
    th_alloc_fail_after(n);
    th_status st = th_trace_parse(text, "<bwd>", &p);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      ok_at = (int)n;
      th_trace_free(p);
      break;
    }
    if (st != TH_ERR_NOMEM) fail_msg("allocation %ld: %s: %s", n, th_status_name(st), th_last_error());
    assert_null(p);
  }
  assert_true(ok_at > 1);
  free(text);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_unary),
    cmocka_unit_test(test_zero_grad),
    cmocka_unit_test(test_binary),
    cmocka_unit_test(test_maximum_minimum),
    cmocka_unit_test(test_where_convert_device),
    cmocka_unit_test(test_reductions),
    cmocka_unit_test(test_shape),
    cmocka_unit_test(test_linalg),
    cmocka_unit_test(test_torch_ops),
    cmocka_unit_test(test_saved_and_printed),
    cmocka_unit_test(test_roundtrip),
    cmocka_unit_test(test_none_grads),
    cmocka_unit_test(test_broadcast_and_dtypes),
    cmocka_unit_test(test_inplace),
    cmocka_unit_test(test_no_rule),
    cmocka_unit_test(test_table),
    cmocka_unit_test(test_parsed_depth1),
    cmocka_unit_test(test_saved_number),
    cmocka_unit_test(test_backward_inputs),
    cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
