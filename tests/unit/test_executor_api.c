/* test_executor_api.c — the public extension API (thunder/executor.h): registering operators (schema +
 * meta), recording, printing, parsing and verifying them; autocast for a registered op; user executors
 * with kernels for a registered op and overriding a built-in prim behind a checker; compiling and
 * running with them; the errors of every entry point; and the thread count runs use
 * (th_set_num_threads), whatever the host set for OpenMP.
 *
 * Only the public headers are used, as an extension would. References are independent of the
 * implementation: the trace structure of seed 000 (a lower-precision op in a bfloat16 region records
 * top-level converts of its float32 inputs and then the op in bfloat16; float64 inputs are left alone,
 * as PyTorch AMP), Thunder's printed form `t0 = myex.linear_like(x, w)`, and values computed by hand.
 *
 * The registry is process-wide, so every test uses op and executor names of its own. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include <cmocka.h>
#include <omp.h>

#include "thunder/thunder.h"

static const th_device CPU = {TH_CPU, 0};

/* ---- helpers ------------------------------------------------------------------------------------------ */

static th_value *input(th_trace *tr, const char *name, th_dtype dt, int64_t d0, int64_t d1) {
  int64_t shape[2] = {d0, d1};
  th_value *v = th_trace_add_tensor_input(tr, name, dt, CPU, 2, shape);
  assert_non_null(v);
  return v;
}

static th_arg call(th_trace *tr, const char *op, int n, const th_arg *args) {
  th_arg out;
  th_status st = th_trace_call(tr, op, n, args, 0, NULL, NULL, &out);
  if (st != TH_OK) fail_msg("%s failed: %s", op, th_last_error());
  return out;
}

static th_arg call2(th_trace *tr, const char *op, th_value *a, th_value *b) {
  th_arg args[2] = {th_arg_value(a), th_arg_value(b)};
  return call(tr, op, 2, args);
}

static void expect_contains(const char *text, const char *needle) {
  if (!strstr(text, needle)) fail_msg("expected to find\n  %s\nin\n%s", needle, text);
}

static void expect_error(th_status st, th_status want, const char *needle) {
  if (st != want)
    fail_msg("expected status %s, got %s (%s)", th_status_name(want), th_status_name(st), th_last_error());
  if (!strstr(th_last_error(), needle)) fail_msg("expected '%s' in the message: %s", needle, th_last_error());
}

static th_tensor *tensor2(th_dtype dt, int64_t d0, int64_t d1, const double *vals) {
  int64_t shape[2] = {d0, d1};
  th_tensor *t = th_tensor_new(dt, 2, shape);
  assert_non_null(t);
  for (int64_t i = 0; i < d0 * d1; i++) {
    if (dt == TH_F32)
      ((float *)th_tensor_data(t))[i] = (float)vals[i];
    else if (dt == TH_F64)
      ((double *)th_tensor_data(t))[i] = vals[i];
    else
      fail_msg("tensor2: unsupported dtype");
  }
  return t;
}

/* The top-level bsym of the execution trace that computes value named `out`. */
static const th_bsym *producer(const th_trace *tr, const char *out) {
  for (int i = 0; i < th_trace_num_bsyms(tr); i++) {
    const th_bsym *b = th_trace_bsym(tr, i);
    th_arg o = th_bsym_output(b);
    if (o.kind == TH_ARG_VALUE && !strcmp(th_value_name(o.u.value), out)) return b;
  }
  fail_msg("no bsym produces %s", out);
  return NULL;
}

/* The executor that claimed the (only) bsym of op `qualname` in the execution trace. */
static const char *claimed_by(const th_trace *tr, const char *qualname) {
  const char *ex = NULL;
  int n = 0;
  for (int i = 0; i < th_trace_num_bsyms(tr); i++) {
    const th_bsym *b = th_trace_bsym(tr, i);
    if (!strcmp(th_bsym_qualname(b), qualname)) {
      ex = th_bsym_executor(b);
      n++;
    }
  }
  if (n != 1) fail_msg("expected one %s in the execution trace, found %d", qualname, n);
  return ex;
}

/* ---- the ops of these tests ---------------------------------------------------------------------------- */

/* linear_like(x, w) = x @ w^T: x [m, k], w [n, k] -> [m, n] in x's dtype (as prims.linear without bias). */
static th_status linear_like_meta(const th_arg *args, int nargs, th_tensor_meta *out, int *nout) {
  assert_int_equal(nargs, 2);
  assert_int_equal(*nout, 1);
  const th_value *x = args[0].u.value, *w = args[1].u.value;
  if (th_value_ndim(x) != 2 || th_value_ndim(w) != 2)
    return th_set_error(TH_ERR_RUNTIME, "expected 2D x and w, got %dD and %dD", th_value_ndim(x), th_value_ndim(w));
  if (th_value_shape(x)[1] != th_value_shape(w)[1])
    return th_set_error(TH_ERR_RUNTIME, "x has %lld columns but w has %lld", (long long)th_value_shape(x)[1],
                        (long long)th_value_shape(w)[1]);
  if (th_value_dtype(x) != th_value_dtype(w))
    return th_set_error(TH_ERR_RUNTIME, "Expected x.dtype=%s and w.dtype=%s to be the same",
                        th_dtype_name(th_value_dtype(x)), th_dtype_name(th_value_dtype(w)));
  out[0] = th_tensor_meta_of(x);
  out[0].shape[1] = th_value_shape(w)[0];
  return TH_OK;
}

/* The same as argument 0 (unary ops, and "mixed" below). */
static th_status like_first_meta(const th_arg *args, int nargs, th_tensor_meta *out, int *nout) {
  (void)nargs;
  for (int i = 0; i < *nout; i++) out[i] = th_tensor_meta_of(args[0].u.value);
  return TH_OK;
}

/* split_rows(a, n) -> n tensors, each a row block (a Tensor[] return: the meta sets the count). */
static th_status split_rows_meta(const th_arg *args, int nargs, th_tensor_meta *out, int *nout) {
  assert_int_equal(nargs, 2);
  assert_int_equal(*nout, TH_META_MAX_OUTPUTS);
  int64_t n = args[1].u.i;
  th_tensor_meta m = th_tensor_meta_of(args[0].u.value);
  if (n <= 0 || m.ndim < 1 || m.shape[0] % n)
    return th_set_error(TH_ERR_RUNTIME, "cannot split into %lld", (long long)n);
  m.shape[0] /= n;
  for (int64_t i = 0; i < n; i++) out[i] = m;
  *nout = (int)n;
  return TH_OK;
}

static th_status bad_count_meta(const th_arg *args, int nargs, th_tensor_meta *out, int *nout) {
  like_first_meta(args, nargs, out, nout);
  *nout = 2;
  return TH_OK;
}

static th_status silent_fail_meta(const th_arg *args, int nargs, th_tensor_meta *out, int *nout) {
  (void)args, (void)nargs, (void)out, (void)nout;
  return TH_ERR_RUNTIME;
}

static int linear_like_calls, mul_calls;

static th_status linear_like_kernel(th_kernel_ctx *k) {
  linear_like_calls++;
  th_tensor *x = th_kernel_tensor(k, 0), *w = th_kernel_tensor(k, 1);
  if (!x || !w || th_tensor_dtype(x) != TH_F32)
    return th_set_error(TH_ERR_RUNTIME, "the myex kernel takes float32 tensors");
  th_tensor *y = th_kernel_output(k, 0);
  if (!y) return th_last_status();
  const int64_t m = th_tensor_shape(x)[0], kk = th_tensor_shape(x)[1], n = th_tensor_shape(w)[0];
  const int64_t *xs = th_tensor_strides(x), *ws = th_tensor_strides(w);
  const float *xd = th_tensor_data(x), *wd = th_tensor_data(w);
  float *yd = th_tensor_data(y);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t p = 0; p < kk; p++) acc += (double)xd[i * xs[0] + p * xs[1]] * wd[j * ws[0] + p * ws[1]];
      yd[i * n + j] = (float)acc;
    }
  return TH_OK;
}

/* prims.mul, float32 same-shape tensors only (the checker guarantees it). */
static bool mul_f32_checker(const th_bsym *b) {
  for (int i = 0; i < 2; i++) {
    th_arg a = th_bsym_arg(b, i);
    if (a.kind != TH_ARG_VALUE || !th_value_is_tensor(a.u.value) || th_value_dtype(a.u.value) != TH_F32) return false;
  }
  return true;
}

static th_status mul_f32_kernel(th_kernel_ctx *k) {
  mul_calls++;
  th_tensor *a = th_kernel_tensor(k, 0), *b = th_kernel_tensor(k, 1);
  assert_int_equal(th_kernel_num_outputs(k), 1);
  assert_true(th_value_is_tensor(th_kernel_output_value(k, 0)));
  /* a fresh contiguous tensor of its own, handed over with th_kernel_set_output */
  th_tensor *y = th_tensor_empty(TH_F32, th_tensor_ndim(a), th_tensor_shape(a));
  if (!y) return th_last_status();
  int64_t n = th_tensor_numel(a);
  for (int64_t i = 0; i < n; i++)
    ((float *)th_tensor_data(y))[i] = (float)(th_tensor_get_f64(a, i) * th_tensor_get_f64(b, i));
  return th_kernel_set_output(k, 0, y);
}

/* scale(a, *, alpha): a * alpha, reading the number argument at run time. */
static th_status scale_kernel(th_kernel_ctx *k) {
  th_tensor *a = th_kernel_tensor(k, 0);
  double alpha;
  bool is_float;
  assert_int_equal(th_kernel_num_args(k), 2);
  assert_null(th_kernel_tensor(k, 1));
  assert_int_equal(th_kernel_arg(k, 1).kind, TH_ARG_FLOAT);
  if (!th_kernel_number(k, 1, &alpha, NULL, &is_float) || !is_float)
    return th_set_error(TH_ERR_RUNTIME, "alpha is not a float");
  th_tensor *y = th_kernel_output(k, 0);
  if (!y) return th_last_status();
  for (int64_t i = 0; i < th_tensor_numel(a); i++)
    ((float *)th_tensor_data(y))[i] = (float)(th_tensor_get_f64(a, i) * alpha);
  return TH_OK;
}

static th_status failing_kernel(th_kernel_ctx *k) {
  (void)k;
  return th_set_error(TH_ERR_RUNTIME, "boom at run time");
}

static th_status lazy_kernel(th_kernel_ctx *k) { /* produces nothing */
  (void)k;
  return TH_OK;
}

/* Registers the ops once for the whole file (the registry is process-wide). */
static int setup_ops(void **state) {
  (void)state;
  assert_int_equal(th_op_register("myex.linear_like", "linear_like(Tensor x, Tensor w) -> Tensor", linear_like_meta,
                                  NULL, TH_OPF_AUTOCAST_LOWER),
                   TH_OK);
  assert_int_equal(
    th_op_register("myex.scale", "scale(Tensor a, /, *, float alpha=2.0) -> Tensor", like_first_meta, NULL, 0), TH_OK);
  assert_int_equal(th_op_register("myex.pair", "pair(Tensor a) -> (Tensor, Tensor)", like_first_meta, NULL, 0), TH_OK);
  assert_int_equal(
    th_op_register("myex.nested.split_rows", "split_rows(Tensor a, int n) -> Tensor[]", split_rows_meta, NULL, 0),
    TH_OK);
  return 0;
}

/* ---- registering and recording ------------------------------------------------------------------------ */

static void test_register_record_print_verify(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 2, 3), *w = input(tr, "w", TH_F32, 4, 3);
  th_arg y = call2(tr, "myex.linear_like", x, w);
  assert_int_equal(y.kind, TH_ARG_VALUE);
  assert_int_equal(th_value_dtype(y.u.value), TH_F32);
  assert_int_equal(th_value_ndim(y.u.value), 2);
  assert_int_equal(th_value_shape(y.u.value)[0], 2);
  assert_int_equal(th_value_shape(y.u.value)[1], 4);
  /* keyword-only parameter with a default, materialized and printed by name as Thunder's bind does */
  th_arg a1[1] = {y};
  th_arg s = call(tr, "myex.scale", 1, a1);
  /* a tuple return and a Tensor[] return */
  th_arg p = call(tr, "myex.pair", 1, a1);
  assert_int_equal(p.kind, TH_ARG_TUPLE);
  assert_int_equal(p.u.seq.n, 2);
  th_arg a2[2] = {th_arg_value(x), th_arg_int(2)};
  th_arg parts = call(tr, "myex.nested.split_rows", 2, a2);
  assert_int_equal(parts.kind, TH_ARG_LIST);
  assert_int_equal(parts.u.seq.n, 2);
  assert_int_equal(th_value_shape(parts.u.seq.items[1].u.value)[0], 1);
  assert_int_equal(th_trace_set_return(tr, s), TH_OK);
  assert_int_equal(th_trace_verify(tr), TH_OK);

  char *text = th_trace_print(tr, -1);
  assert_non_null(text);
  expect_contains(text, "  t0 = myex.linear_like(x, w)  # t0: \"cpu f32[2, 4]\"\n");
  expect_contains(text, "  t1 = myex.scale(t0, alpha=2.0)  # t1: \"cpu f32[2, 4]\"\n");
  expect_contains(text, "  (t2, t3) = myex.pair(t0)\n");
  expect_contains(text, "  [t4, t5] = myex.nested.split_rows(x, 2)\n");
  expect_contains(text, "  return t1\n");

  /* the parser reads registered ops back (their metas type the outputs), and the result verifies and
   * prints the same */
  th_trace *back = NULL;
  if (th_trace_parse(text, "<printed>", &back) != TH_OK) fail_msg("parse: %s", th_last_error());
  assert_int_equal(th_trace_verify(back), TH_OK);
  char *text2 = th_trace_print(back, -1);
  assert_string_equal(text, text2);
  assert_string_equal(th_bsym_qualname(th_trace_bsym(back, 0)), "myex.linear_like");
  free(text2);
  th_trace_free(back);
  free(text);

  /* an op nobody registered, printed without a decomposition, does not parse */
  back = NULL;
  expect_error(th_trace_parse("def computation(x):\n  # x: \"cpu f32[2]\"\n  t0 = nothere.f(x)\n  return t0\n",
                              "<unknown>", &back),
               TH_ERR_VALUE, "unknown op 'nothere.f'");
  assert_null(back);

  /* a printed trace whose registered op disagrees with its meta fails verification */
  const char *bad = "def computation(x, w):\n"
                    "  # x: \"cpu f32[2, 3]\"\n"
                    "  # w: \"cpu f32[4, 3]\"\n"
                    "  t0 = myex.linear_like(x, w)  # t0: \"cpu f32[2, 5]\"\n"
                    "  return t0\n";
  back = NULL;
  th_status st = th_trace_parse(bad, "<bad>", &back);
  if (st == TH_OK) st = th_trace_verify(back);
  assert_int_not_equal(st, TH_OK);
  expect_contains(th_last_error(), "t0");
  th_trace_free(back);
  th_trace_free(tr);
}

static void test_meta_errors(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 2, 3), *w = input(tr, "w", TH_F32, 4, 5), *h = input(tr, "h", TH_F64, 4, 3);
  th_arg out;
  th_arg args[2] = {th_arg_value(x), th_arg_value(w)};
  /* the meta's error, named by the op; nothing recorded */
  expect_error(th_trace_call(tr, "myex.linear_like", 2, args, 0, NULL, NULL, &out), TH_ERR_RUNTIME,
               "myex.linear_like: x has 3 columns but w has 5");
  args[1] = th_arg_value(h);
  expect_error(th_trace_call(tr, "myex.linear_like", 2, args, 0, NULL, NULL, &out), TH_ERR_RUNTIME,
               "Expected x.dtype=float32 and w.dtype=float64 to be the same");
  /* binding against the schema, as for built-in ops */
  expect_error(th_trace_call(tr, "myex.linear_like", 1, args, 0, NULL, NULL, &out), TH_ERR_TYPE, "myex.linear_like");
  const char *kw[1] = {"beta"};
  th_arg kv[1] = {th_arg_float(1.0)};
  expect_error(th_trace_call(tr, "myex.scale", 1, args, 1, kw, kv, &out), TH_ERR_TYPE, "beta");
  /* an unknown op */
  expect_error(th_trace_call(tr, "myex.nope", 1, args, 0, NULL, NULL, &out), TH_ERR_VALUE, "unknown op 'myex.nope'");
  assert_int_equal(th_trace_num_bsyms(tr), 0);

  /* metas that break their contract */
  assert_int_equal(th_op_register("metaerr.two", "two(Tensor a) -> Tensor", bad_count_meta, NULL, 0), TH_OK);
  assert_int_equal(th_op_register("metaerr.silent", "silent(Tensor a) -> Tensor", silent_fail_meta, NULL, 0), TH_OK);
  expect_error(th_trace_call(tr, "metaerr.two", 1, args, 0, NULL, NULL, &out), TH_ERR_RUNTIME,
               "metaerr.two: its meta produced 2 outputs, but its schema returns 1");
  expect_error(th_trace_call(tr, "metaerr.silent", 1, args, 0, NULL, NULL, &out), TH_ERR_RUNTIME,
               "metaerr.silent: its meta failed (RuntimeError)");
  assert_int_equal(th_trace_num_bsyms(tr), 0);
  th_trace_free(tr);
}

static void test_register_errors(void **state) {
  (void)state;
  const char *sch = "f(Tensor a) -> Tensor";
  expect_error(
    th_op_register("myex.linear_like", "linear_like(Tensor x, Tensor w) -> Tensor", linear_like_meta, NULL, 0),
    TH_ERR_VALUE, "op 'myex.linear_like' is already registered");
  expect_error(th_op_register("prims.f", sch, like_first_meta, NULL, 0), TH_ERR_VALUE, "reserved");
  expect_error(th_op_register("torch.f", sch, like_first_meta, NULL, 0), TH_ERR_VALUE, "reserved");
  expect_error(th_op_register("dtypes.f", sch, like_first_meta, NULL, 0), TH_ERR_VALUE, "reserved");
  /* an executor may not take a module name printed traces use (its Python ops print as <name>.<op>) */
  static const char *const modules[] = {"ltorch", "prims", "torch", "thunder", "dtypes", "devices"};
  for (size_t i = 0; i < sizeof modules / sizeof *modules; i++) {
    assert_null(th_executor_new(modules[i]));
    assert_non_null(strstr(th_last_error(), "reserved"));
  }
  expect_error(th_op_register("f", sch, like_first_meta, NULL, 0), TH_ERR_VALUE, "expected 'module.name'");
  expect_error(th_op_register("my-ex.f", sch, like_first_meta, NULL, 0), TH_ERR_VALUE, "invalid op name");
  expect_error(th_op_register("bad.f", sch, NULL, NULL, 0), TH_ERR_VALUE, "meta is NULL");
  expect_error(th_op_register("bad.f", NULL, like_first_meta, NULL, 0), TH_ERR_VALUE, "schema is NULL");
  expect_error(th_op_register(NULL, sch, like_first_meta, NULL, 0), TH_ERR_VALUE, "qualname is NULL");
  /* malformed schemas, each rejected with what is wrong */
  static const struct {
    const char *schema, *why;
  } bad[] = {
    {"f(Tensr a) -> Tensor", "unknown type 'Tensr'"},
    {"f(Tensor a -> Tensor", "missing ')'"},
    {"f(Tensor a)", "expected '->'"},
    {"f(Tensor a) -> Any", "the return type must be"},
    {"f(Tensor a) -> (Tensor, int)", "a returned tuple holds Tensors only"},
    {"f(Tensor a, Tensor a) -> Tensor", "duplicate parameter 'a'"},
    {"f(Tensor a, int n=1, int m) -> Tensor", "without a default follows one with a default"},
    {"f(Tensor a, int n=None) -> Tensor", "not optional"},
    {"f(Tensor a, int n=abc) -> Tensor", "cannot read the default of 'n'"},
    {"f(Tensor) -> Tensor", "needs a type and a name"},
    {"f(Tensor 1a) -> Tensor", "not a Python identifier"},
    {"g(Tensor a) -> Tensor", "names the op 'g'; expected 'f(...)'"},
    {"f Tensor a -> Tensor", "expected 'name(parameters) -> returns'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    th_status st = th_op_register("bad.f", bad[i].schema, like_first_meta, NULL, 0);
    if (st != TH_ERR_VALUE || !strstr(th_last_error(), bad[i].why))
      fail_msg("schema '%s': expected TH_ERR_VALUE with '%s', got %s: %s", bad[i].schema, bad[i].why,
               th_status_name(st), th_last_error());
  }
  /* tags */
  expect_error(th_op_register("bad.f", sch, like_first_meta, NULL, TH_OPF_IN_PLACE), TH_ERR_VALUE, "unsupported tags");
  expect_error(th_op_register("bad.f", sch, like_first_meta, NULL, TH_OPF_AUTOCAST_LOWER | TH_OPF_AUTOCAST_FP32),
               TH_ERR_VALUE, "more than one");
  /* nothing of the rejected registrations exists */
  th_trace *tr = th_trace_new(NULL);
  th_arg a = th_arg_value(input(tr, "x", TH_F32, 2, 2)), out;
  expect_error(th_trace_call(tr, "bad.f", 1, &a, 0, NULL, NULL, &out), TH_ERR_VALUE, "unknown op 'bad.f'");
  th_trace_free(tr);
  /* and a later good registration of the name works */
  assert_int_equal(th_op_register("bad.f", sch, like_first_meta, NULL, 0), TH_OK);
}

/* ---- autocast ---------------------------------------------------------------------------------------------- */

/* Seed 000 with a user op: `myex.linear_like(x, w)` (a LOWER policy) in a bfloat16 region records
 * convert(x), convert(w) at the top level and then the op in bfloat16. */
static void test_autocast_lower_seed000(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 16, 16), *w = input(tr, "w", TH_F32, 16, 16);
  assert_int_equal(th_trace_autocast_push(tr, TH_CPU, TH_BF16, true), TH_OK);
  th_arg y = call2(tr, "myex.linear_like", x, w);
  assert_int_equal(th_trace_autocast_pop(tr), TH_OK);
  assert_int_equal(th_value_dtype(y.u.value), TH_BF16);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  assert_int_equal(th_trace_num_bsyms(tr), 4);
  const th_bsym *c0 = th_trace_bsym(tr, 0), *c1 = th_trace_bsym(tr, 1), *op = th_trace_bsym(tr, 2);
  assert_string_equal(th_bsym_qualname(c0), "prims.convert_element_type");
  assert_string_equal(th_bsym_qualname(c1), "prims.convert_element_type");
  assert_true(th_bsym_arg(c0, 0).u.value == x);
  assert_true(th_bsym_arg(c1, 0).u.value == w);
  assert_int_equal(th_bsym_arg(c0, 1).u.dtype, TH_BF16);
  assert_string_equal(th_bsym_qualname(op), "myex.linear_like");
  assert_true(th_bsym_arg(op, 0).u.value == th_bsym_output(c0).u.value);
  assert_true(th_bsym_arg(op, 1).u.value == th_bsym_output(c1).u.value);
  assert_int_equal(th_trace_verify(tr), TH_OK);
  char *text = th_trace_print(tr, -1);
  expect_contains(text, "  t0 = prims.convert_element_type(x, dtypes.bfloat16)  # t0: \"cpu bf16[16, 16]\"\n"
                        "  t1 = prims.convert_element_type(w, dtypes.bfloat16)  # t1: \"cpu bf16[16, 16]\"\n"
                        "  t2 = myex.linear_like(t0, t1)  # t2: \"cpu bf16[16, 16]\"\n");
  free(text);
  th_trace_free(tr);

  /* float64 inputs are never converted (AMP); nor outside a region */
  tr = th_trace_new(NULL);
  x = input(tr, "x", TH_F64, 4, 4);
  w = input(tr, "w", TH_F64, 4, 4);
  assert_int_equal(th_trace_autocast_push(tr, TH_CPU, TH_BF16, true), TH_OK);
  y = call2(tr, "myex.linear_like", x, w);
  assert_int_equal(th_trace_autocast_pop(tr), TH_OK);
  assert_int_equal(th_value_dtype(y.u.value), TH_F64);
  assert_int_equal(th_trace_num_bsyms(tr), 1);
  th_value *x2 = input(tr, "x2", TH_F32, 4, 4);
  y = call2(tr, "myex.linear_like", x2, x2);
  assert_int_equal(th_value_dtype(y.u.value), TH_F32);
  assert_int_equal(th_trace_num_bsyms(tr), 2);
  th_trace_free(tr);
}

/* A rule function: argument 0 to the region's dtype, argument 1 to float32. */
static th_status mixed_rule(const th_arg *args, int nargs, th_dtype dtype, th_device_type dev, th_dtype *cast_to) {
  assert_int_equal(nargs, 2);
  assert_int_equal(dev, TH_CPU);
  assert_int_equal(cast_to[0], TH_DTYPE_COUNT);
  assert_int_equal(args[0].kind, TH_ARG_VALUE);
  cast_to[0] = dtype;
  cast_to[1] = TH_F32;
  return TH_OK;
}

static th_status int_rule(const th_arg *args, int nargs, th_dtype dtype, th_device_type dev, th_dtype *cast_to) {
  (void)args, (void)nargs, (void)dtype, (void)dev;
  cast_to[0] = TH_I64;
  return TH_OK;
}

static th_status failing_rule(const th_arg *args, int nargs, th_dtype dtype, th_device_type dev, th_dtype *cast_to) {
  (void)args, (void)nargs, (void)dtype, (void)dev;
  cast_to[0] = TH_BF16;
  return th_set_error(TH_ERR_VALUE, "no rule for this call");
}

static void test_autocast_rule_function(void **state) {
  (void)state;
  assert_int_equal(th_op_register("acx.mixed", "mixed(Tensor a, Tensor b) -> Tensor", like_first_meta, mixed_rule, 0),
                   TH_OK);
  assert_int_equal(th_op_register("acx.to_int", "to_int(Tensor a) -> Tensor", like_first_meta, int_rule, 0), TH_OK);
  assert_int_equal(th_op_register("acx.fails", "fails(Tensor a) -> Tensor", like_first_meta, failing_rule, 0), TH_OK);
  assert_int_equal(th_op_register("acx.fp32", "fp32(Tensor a, *, ScalarType? dtype=None) -> Tensor", like_first_meta,
                                  NULL, TH_OPF_AUTOCAST_FP32),
                   TH_OK);
  expect_error(
    th_op_register("acx.both", "both(Tensor a) -> Tensor", like_first_meta, mixed_rule, TH_OPF_AUTOCAST_LOWER),
    TH_ERR_VALUE, "not both");

  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a", TH_F32, 2, 2), *b = input(tr, "b", TH_BF16, 2, 2);
  assert_int_equal(th_trace_autocast_push(tr, TH_CPU, TH_F16, true), TH_OK);
  th_arg y = call2(tr, "acx.mixed", a, b);
  assert_int_equal(th_value_dtype(y.u.value), TH_F16);
  assert_int_equal(th_trace_num_bsyms(tr), 3);
  assert_int_equal(th_value_dtype(th_bsym_output(th_trace_bsym(tr, 0)).u.value), TH_F16); /* a -> f16 */
  assert_int_equal(th_value_dtype(th_bsym_output(th_trace_bsym(tr, 1)).u.value), TH_F32); /* b -> f32 */
  assert_string_equal(th_bsym_qualname(th_trace_bsym(tr, 2)), "acx.mixed");

  /* a rule asking for a non-float dtype, or failing: an error and nothing recorded (its converts too) */
  th_arg args[1] = {th_arg_value(a)}, out;
  expect_error(th_trace_call(tr, "acx.to_int", 1, args, 0, NULL, NULL, &out), TH_ERR_VALUE,
               "acx.to_int: its autocast rule casts argument 'a' to int64");
  expect_error(th_trace_call(tr, "acx.fails", 1, args, 0, NULL, NULL, &out), TH_ERR_VALUE,
               "acx.fails: no rule for this call");
  assert_int_equal(th_trace_num_bsyms(tr), 3);

  /* the FP32 policy: bfloat16 -> float32 unless dtype= is given */
  args[0] = th_arg_value(b);
  y = call(tr, "acx.fp32", 1, args);
  assert_int_equal(th_value_dtype(y.u.value), TH_F32);
  assert_int_equal(th_trace_num_bsyms(tr), 5);
  const char *kw[1] = {"dtype"};
  th_arg kv[1] = {th_arg_dtype(TH_BF16)};
  assert_int_equal(th_trace_call(tr, "acx.fp32", 1, args, 1, kw, kv, &out), TH_OK);
  assert_int_equal(th_value_dtype(out.u.value), TH_BF16);
  assert_int_equal(th_trace_num_bsyms(tr), 6);
  assert_int_equal(th_trace_autocast_pop(tr), TH_OK);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  assert_int_equal(th_trace_verify(tr), TH_OK);
  th_trace_free(tr);
}

/* ---- executors ------------------------------------------------------------------------------------------- */

static th_program *compile(const th_trace *tr, const char *const *execs, int n) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = execs;
  o.nexecutors = n;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  return p;
}

static th_tensor *run1(th_program *p, int nin, th_tensor **in) {
  int nout = 0;
  th_tensor **outs = NULL;
  if (th_program_run(p, nin, in, &nout, &outs) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, 1);
  th_tensor *t = outs[0];
  free(outs);
  return t;
}

/* y = myex.linear_like(x, w); z = ltorch.mul(y, y) (decomposed to prims.mul); return z. */
static void test_user_executor_runs(void **state) {
  (void)state;
  th_executor *ex = th_executor_new("myex");
  assert_non_null(ex);
  assert_string_equal(th_executor_name(ex), "myex");
  assert_int_equal(th_executor_add_impl(ex, "myex.linear_like", linear_like_kernel, NULL), TH_OK);
  assert_int_equal(th_executor_add_impl(ex, "prims.mul", mul_f32_kernel, mul_f32_checker), TH_OK);
  assert_int_equal(th_executor_add_impl(ex, "myex.scale", scale_kernel, NULL), TH_OK);

  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 2, 3), *w = input(tr, "w", TH_F32, 2, 3);
  th_arg y = call2(tr, "myex.linear_like", x, w);
  th_arg z = call2(tr, "ltorch.mul", y.u.value, y.u.value);
  const char *kw[1] = {"alpha"};
  th_arg kv[1] = {th_arg_float(0.5)}, s;
  assert_int_equal(th_trace_call(tr, "myex.scale", 1, &z, 1, kw, kv, &s), TH_OK);
  assert_int_equal(th_trace_set_return(tr, s), TH_OK);

  const char *execs[2] = {"myex", "eager"};
  th_program *p = compile(tr, execs, 2);
  const th_trace *et = th_program_trace(p);
  assert_string_equal(claimed_by(et, "myex.linear_like"), "myex");
  assert_string_equal(claimed_by(et, "prims.mul"), "myex"); /* ltorch.mul unclaimed: decomposed, prims.mul claimed */
  assert_string_equal(claimed_by(et, "myex.scale"), "myex");
  assert_string_equal(th_bsym_executor(producer(et, th_value_name(y.u.value))), "myex");
  char *text = th_trace_print(et, -1);
  expect_contains(text, "= myex.linear_like(x, w)");
  expect_contains(text, "= myex.scale(");
  free(text);

  /* x = [[1, 2, 3], [4, 5, 6]], w = [[1, 0, -1], [2, 1, 0]]: y = x @ w^T = [[-2, 4], [-2, 13]];
   * z = y * y = [[4, 16], [4, 169]]; s = z * 0.5 = [[2, 8], [2, 84.5]] */
  const double xv[6] = {1, 2, 3, 4, 5, 6}, wv[6] = {1, 0, -1, 2, 1, 0}, want[4] = {2, 8, 2, 84.5};
  th_tensor *in[2] = {tensor2(TH_F32, 2, 3, xv), tensor2(TH_F32, 2, 3, wv)};
  linear_like_calls = mul_calls = 0;
  th_tensor *out = run1(p, 2, in);
  assert_int_equal(linear_like_calls, 1);
  assert_int_equal(mul_calls, 1);
  assert_int_equal(th_tensor_dtype(out), TH_F32);
  for (int i = 0; i < 4; i++) assert_true(th_tensor_get_f64(out, i) == want[i]);
  th_tensor_release(out);

  /* the program keeps its kernels: it runs after the executor is gone, and the name is free again */
  th_executor_free(ex);
  out = run1(p, 2, in);
  assert_int_equal(linear_like_calls, 2);
  for (int i = 0; i < 4; i++) assert_true(th_tensor_get_f64(out, i) == want[i]);
  th_tensor_release(out);
  th_program_free(p);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = execs;
  o.nexecutors = 2;
  expect_error(th_program_compile(tr, &o, &p), TH_ERR_VALUE, "but got 'myex'");
  ex = th_executor_new("myex");
  assert_non_null(ex);
  th_executor_free(ex);
  for (int i = 0; i < 2; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
}

/* prims.mul behind a float32-only checker: float64 falls back to eager; with no fallback it fails. */
static void test_checker_falls_back(void **state) {
  (void)state;
  th_executor *ex = th_executor_new("mulex");
  assert_non_null(ex);
  assert_int_equal(th_executor_add_impl(ex, "prims.mul", mul_f32_kernel, mul_f32_checker), TH_OK);
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a", TH_F64, 2, 2), *b = input(tr, "b", TH_F64, 2, 2);
  th_arg m = call2(tr, "prims.mul", a, b);
  th_value *c = input(tr, "c", TH_F32, 2, 2);
  th_arg n = call2(tr, "prims.mul", c, c);
  th_arg items[2] = {m, n};
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(2, items)), TH_OK);

  const char *execs[2] = {"mulex", "eager"};
  th_program *p = compile(tr, execs, 2);
  const th_trace *et = th_program_trace(p);
  assert_string_equal(th_bsym_executor(producer(et, th_value_name(m.u.value))), "eager");
  assert_string_equal(th_bsym_executor(producer(et, th_value_name(n.u.value))), "mulex");
  const double av[4] = {1.5, -2, 3, 0.25}, bv[4] = {2, 2, -1, 8}, cv[4] = {3, -1, 0.5, 10};
  th_tensor *in[3] = {tensor2(TH_F64, 2, 2, av), tensor2(TH_F64, 2, 2, bv), tensor2(TH_F32, 2, 2, cv)};
  int nout = 0;
  th_tensor **outs = NULL;
  mul_calls = 0;
  assert_int_equal(th_program_run(p, 3, in, &nout, &outs), TH_OK);
  assert_int_equal(nout, 2);
  assert_int_equal(mul_calls, 1);
  const double mw[4] = {3, -4, -3, 2}, nw[4] = {9, 1, 0.25, 100};
  for (int i = 0; i < 4; i++) {
    assert_true(th_tensor_get_f64(outs[0], i) == mw[i]);
    assert_true(th_tensor_get_f64(outs[1], i) == nw[i]);
  }
  th_tensor_release(outs[0]);
  th_tensor_release(outs[1]);
  free(outs);
  th_program_free(p);

  /* only mulex: the float64 mul has no executor */
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = execs;
  o.nexecutors = 1;
  expect_error(th_program_compile(tr, &o, &p), TH_ERR_NOT_IMPLEMENTED, "Failed to find an executor for bound symbol");
  expect_contains(th_last_error(), "prims.mul (executors: mulex)");
  assert_null(p);
  for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
  th_executor_free(ex);
}

static void test_executor_errors(void **state) {
  (void)state;
  th_executor *ex = th_executor_new("errex");
  assert_non_null(ex);
  /* names */
  assert_null(th_executor_new("errex"));
  expect_error(th_last_status(), TH_ERR_VALUE, "an executor named 'errex' is already registered");
  assert_null(th_executor_new("eager"));
  expect_error(th_last_status(), TH_ERR_VALUE, "an executor named 'eager' is already registered");
  assert_null(th_executor_new("fuser")); /* the built-in fusion executor's name is taken too */
  expect_error(th_last_status(), TH_ERR_VALUE, "an executor named 'fuser' is already registered");
  assert_null(th_executor_new("my-ex"));
  expect_error(th_last_status(), TH_ERR_VALUE, "invalid executor name");
  assert_null(th_executor_new(NULL));
  expect_error(th_last_status(), TH_ERR_VALUE, "the name is NULL");
  /* implementations */
  expect_error(th_executor_add_impl(ex, "myex.nope", linear_like_kernel, NULL), TH_ERR_VALUE, "unknown op 'myex.nope'");
  expect_error(th_executor_add_impl(ex, "mul", mul_f32_kernel, NULL), TH_ERR_VALUE, "'mul' names ltorch.mul");
  expect_error(th_executor_add_impl(ex, "myex.linear_like", NULL, NULL), TH_ERR_VALUE, "the kernel is NULL");
  expect_error(th_executor_add_impl(NULL, "myex.linear_like", linear_like_kernel, NULL), TH_ERR_VALUE,
               "executor is NULL");
  expect_error(th_executor_add_impl(ex, "prims.python_return", linear_like_kernel, NULL), TH_ERR_VALUE,
               "computes nothing");
  assert_int_equal(th_executor_add_impl(ex, "myex.pair", linear_like_kernel, NULL), TH_OK);
  expect_error(th_executor_add_impl(ex, "myex.pair", linear_like_kernel, NULL), TH_ERR_VALUE,
               "executor 'errex' already implements myex.pair");

  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 2, 3), *w = input(tr, "w", TH_F32, 2, 3);
  th_arg y = call2(tr, "myex.linear_like", x, w);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  th_compile_options o;
  memset(&o, 0, sizeof o);
  th_program *p = NULL;
  /* an unknown executor name lists the known ones */
  const char *unknown[2] = {"nosuchex", "eager"};
  o.executors = unknown;
  o.nexecutors = 2;
  expect_error(th_program_compile(tr, &o, &p), TH_ERR_VALUE, "but got 'nosuchex' (known: blas, eager");
  expect_contains(th_last_error(), "errex");
  /* a registered op no executor claims (and it has no decomposition) */
  const char *plain[2] = {"errex", "eager"};
  o.executors = plain;
  expect_error(th_program_compile(tr, &o, &p), TH_ERR_NOT_IMPLEMENTED,
               "Failed to find an executor for bound symbol t0 = myex.linear_like (executors: errex, eager)");
  expect_error(th_program_compile(tr, NULL, &p), TH_ERR_NOT_IMPLEMENTED, "myex.linear_like");
  assert_null(p);
  th_trace_free(tr);

  /* kernels that fail at run time */
  assert_int_equal(th_op_register("errex.fails", "fails(Tensor a) -> Tensor", like_first_meta, NULL, 0), TH_OK);
  assert_int_equal(th_op_register("errex.lazy", "lazy(Tensor a) -> Tensor", like_first_meta, NULL, 0), TH_OK);
  assert_int_equal(th_executor_add_impl(ex, "errex.fails", failing_kernel, NULL), TH_OK);
  assert_int_equal(th_executor_add_impl(ex, "errex.lazy", lazy_kernel, NULL), TH_OK);
  static const struct {
    const char *op, *msg;
  } cases[] = {{"errex.fails", "errex.fails: boom at run time"},
               {"errex.lazy", "errex.lazy: the kernel did not produce t0"}};
  for (int i = 0; i < 2; i++) {
    tr = th_trace_new(NULL);
    th_arg a = th_arg_value(input(tr, "a", TH_F32, 2, 2));
    th_arg r = call(tr, cases[i].op, 1, &a);
    assert_int_equal(th_trace_set_return(tr, r), TH_OK);
    p = compile(tr, plain, 2);
    th_tensor *t = th_tensor_new(TH_F32, 2, (int64_t[]){2, 2});
    int nout = 0;
    th_tensor **outs = NULL;
    expect_error(th_program_run(p, 1, &t, &nout, &outs), TH_ERR_RUNTIME, cases[i].msg);
    assert_int_equal(nout, 0);
    th_tensor_release(t);
    th_program_free(p);
    th_trace_free(tr);
  }
  th_executor_free(ex);
  th_executor_free(NULL);
  assert_null(th_executor_name(NULL));
  assert_null(th_bsym_executor(NULL));
}

/* ---- fault injection ------------------------------------------------------------------------------------
 * Every allocation failing in turn, around registration, compiling with a user executor and running its
 * kernel: TH_ERR_NOMEM and nothing half-registered, never a crash or a leak (the sanitizer build). */

void th_alloc_fail_after(long n); /* the library's test hook (core/alloc.c) */

static th_status copy_kernel(th_kernel_ctx *k) {
  th_tensor *a = th_kernel_tensor(k, 0);
  th_tensor *y = th_kernel_output(k, 0);
  if (!y) return th_last_status();
  memcpy(th_tensor_data(y), th_tensor_data(a), sizeof(float) * (size_t)th_tensor_numel(a));
  return TH_OK;
}

static void test_fault_injection(void **state) {
  (void)state;
  th_status st = TH_ERR_NOMEM;
  for (long n = 1; n < 10000; n++) {
    th_alloc_fail_after(n);
    st = th_op_register("fi.copy", "copy(Tensor a, int[] dims=(0, 1), *, float eps=1e-5) -> Tensor", like_first_meta,
                        NULL, 0);
    th_alloc_fail_after(0);
    if (st == TH_OK) break;
    assert_int_equal(st, TH_ERR_NOMEM);
  }
  assert_int_equal(st, TH_OK);
  th_executor *ex = NULL;
  for (long n = 1; n < 10000; n++) {
    th_alloc_fail_after(n);
    ex = th_executor_new("fiex");
    st = ex ? th_executor_add_impl(ex, "fi.copy", copy_kernel, NULL) : th_last_status();
    th_alloc_fail_after(0);
    if (st == TH_OK) break;
    assert_int_equal(st, TH_ERR_NOMEM);
    th_executor_free(ex);
    ex = NULL;
  }
  assert_non_null(ex);

  th_trace *tr = th_trace_new(NULL);
  th_arg a = th_arg_value(input(tr, "a", TH_F32, 256, 512)); /* 512 KiB: the pooled allocation path */
  th_arg r = call(tr, "fi.copy", 1, &a);
  assert_int_equal(th_trace_set_return(tr, r), TH_OK);
  const char *execs[2] = {"fiex", "eager"};
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = execs;
  o.nexecutors = 2;
  th_program *p = NULL;
  for (long n = 1; n < 100000; n++) {
    th_alloc_fail_after(n);
    st = th_program_compile(tr, &o, &p);
    th_alloc_fail_after(0);
    if (st == TH_OK) break;
    assert_int_equal(st, TH_ERR_NOMEM);
    assert_null(p);
  }
  assert_non_null(p);
  th_tensor *in = th_tensor_new(TH_F32, 2, (int64_t[]){256, 512});
  ((float *)th_tensor_data(in))[7] = 3.5f;
  for (long n = 1; n < 10000; n++) {
    int nout = 0;
    th_tensor **outs = NULL;
    th_alloc_fail_after(n);
    st = th_program_run(p, 1, &in, &nout, &outs);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      assert_true(th_tensor_get_f64(outs[0], 7) == 3.5);
      th_tensor_release(outs[0]);
      free(outs);
      break;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    assert_null(outs);
  }
  assert_int_equal(st, TH_OK);
  th_tensor_release(in);
  th_program_free(p);
  th_trace_free(tr);
  th_executor_free(ex);
}

/* ---- registration from several threads ------------------------------------------------------------------ */

static int register_many(void *arg) {
  int id = *(int *)arg;
  for (int i = 0; i < 25; i++) {
    char q[64], s[96];
    snprintf(q, sizeof q, "thr%d.op%d", id, i);
    snprintf(s, sizeof s, "op%d(Tensor a) -> Tensor", i);
    if (th_op_register(q, s, like_first_meta, NULL, 0) != TH_OK) return 1;
    char en[32];
    snprintf(en, sizeof en, "threx%d_%d", id, i);
    th_executor *ex = th_executor_new(en);
    if (!ex || th_executor_add_impl(ex, q, lazy_kernel, NULL) != TH_OK) return 1;
    th_executor_free(ex);
  }
  return 0;
}

static void test_threads(void **state) {
  (void)state;
  thrd_t t[4];
  int ids[4] = {0, 1, 2, 3};
  for (int i = 0; i < 4; i++) assert_int_equal(thrd_create(&t[i], register_many, &ids[i]), thrd_success);
  for (int i = 0; i < 4; i++) {
    int rc = -1;
    thrd_join(t[i], &rc);
    assert_int_equal(rc, 0);
  }
  th_trace *tr = th_trace_new(NULL);
  th_arg a = th_arg_value(input(tr, "a", TH_F32, 2, 2));
  for (int id = 0; id < 4; id++)
    for (int i = 0; i < 25; i += 8) {
      char q[64];
      snprintf(q, sizeof q, "thr%d.op%d", id, i);
      th_arg r = call(tr, q, 1, &a);
      assert_int_equal(th_value_dtype(r.u.value), TH_F32);
    }
  th_trace_free(tr);
}

/* ---- the thread count (th_set_num_threads) ------------------------------------------------------------ */

static int seen_threads;

static th_status threads_kernel(th_kernel_ctx *k) { /* records the team size a kernel would get */
  seen_threads = omp_get_max_threads();
  th_tensor *a = th_kernel_tensor(k, 0);
  th_tensor *y = th_tensor_empty(TH_F32, th_tensor_ndim(a), th_tensor_shape(a));
  if (!y) return th_last_status();
  for (int64_t i = 0; i < th_tensor_numel(a); i++) ((float *)th_tensor_data(y))[i] = (float)th_tensor_get_f64(a, i);
  return th_kernel_set_output(k, 0, y);
}

static void test_num_threads(void **state) {
  (void)state;
  th_executor *ex = th_executor_new("threx");
  assert_non_null(ex);
  assert_int_equal(th_executor_add_impl(ex, "myex.scale", threads_kernel, NULL), TH_OK);
  th_trace *tr = th_trace_new(NULL);
  th_arg x = th_arg_value(input(tr, "x", TH_F32, 2, 2)), y;
  assert_int_equal(th_trace_call(tr, "myex.scale", 1, &x, 0, NULL, NULL, &y), TH_OK);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  const char *execs[2] = {"threx", "eager"};
  th_program *p = compile(tr, execs, 2);
  const double v[4] = {1, 2, 3, 4};
  th_tensor *in[1] = {tensor2(TH_F32, 2, 2, v)};

  /* the host (PyTorch does this through libgomp) asked for 1 thread on this thread: runs still get
   * thunder-c's count, and the host's setting is back afterwards */
  omp_set_num_threads(1);
  assert_int_equal(th_set_num_threads(3), TH_OK);
  assert_int_equal(th_get_num_threads(), 3);
  th_tensor *out = run1(p, 1, in);
  assert_int_equal(seen_threads, 3);
  assert_int_equal(omp_get_max_threads(), 1);
  th_tensor_release(out);
  assert_int_equal(th_set_num_threads(1), TH_OK);
  out = run1(p, 1, in);
  assert_int_equal(seen_threads, 1);
  th_tensor_release(out);

  /* errors change nothing */
  expect_error(th_set_num_threads(-1), TH_ERR_VALUE,
               "th_set_num_threads: n: expected 0 (the default) or a count in "
               "[1, 4096], but got -1");
  expect_error(th_set_num_threads(5000), TH_ERR_VALUE, "but got 5000");
  assert_int_equal(th_get_num_threads(), 1);

  /* the default: THUNDER_NUM_THREADS, else OMP_NUM_THREADS's first value, else the CPUs we may use */
  assert_int_equal(th_set_num_threads(0), TH_OK);
  setenv("THUNDER_NUM_THREADS", "5", 1);
  setenv("OMP_NUM_THREADS", "4,2", 1);
  assert_int_equal(th_get_num_threads(), 5);
  setenv("THUNDER_ADAPTIVE_THREADS", "0", 1); /* the team as the default says, whatever else runs */
  out = run1(p, 1, in);
  assert_int_equal(seen_threads, 5);
  th_tensor_release(out);
  unsetenv("THUNDER_ADAPTIVE_THREADS");
  out = run1(p, 1, in); /* capped by the CPUs other processes leave free: 1..5 */
  assert_true(seen_threads >= 1 && seen_threads <= 5);
  th_tensor_release(out);
  setenv("THUNDER_NUM_THREADS", " 6 ", 1); /* blanks around the number, as libgomp allows */
  assert_int_equal(th_get_num_threads(), 6);
  setenv("THUNDER_NUM_THREADS", "99999", 1); /* capped */
  assert_int_equal(th_get_num_threads(), 4096);
  setenv("THUNDER_NUM_THREADS", "3abc", 1); /* not a number: ignored */
  assert_int_equal(th_get_num_threads(), 4);
  setenv("THUNDER_NUM_THREADS", "0", 1); /* not a positive count: ignored */
  assert_int_equal(th_get_num_threads(), 4);
  unsetenv("THUNDER_NUM_THREADS");
  setenv("OMP_NUM_THREADS", "many", 1);
  assert_int_equal(th_get_num_threads(), omp_get_num_procs());
  unsetenv("OMP_NUM_THREADS");
  assert_int_equal(th_get_num_threads(), omp_get_num_procs());
  assert_int_equal(omp_get_max_threads(), 1);

  th_tensor_release(in[0]);
  th_program_free(p);
  th_trace_free(tr);
  th_executor_free(ex);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_register_record_print_verify),
    cmocka_unit_test(test_meta_errors),
    cmocka_unit_test(test_register_errors),
    cmocka_unit_test(test_autocast_lower_seed000),
    cmocka_unit_test(test_autocast_rule_function),
    cmocka_unit_test(test_user_executor_runs),
    cmocka_unit_test(test_checker_falls_back),
    cmocka_unit_test(test_executor_errors),
    cmocka_unit_test(test_fault_injection),
    cmocka_unit_test(test_threads),
    cmocka_unit_test(test_num_threads),
  };
  return cmocka_run_group_tests(tests, setup_ops, NULL);
}
