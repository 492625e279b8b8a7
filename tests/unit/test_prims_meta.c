/* test_prims_meta.c — the metas of every prim: output metadata (shape, dtype, device, requires_grad)
 * for valid calls and the exact error (status and message fragment) for invalid ones, family by family
 * (elementwise with number folding, conversion, creation, shape, reduction, linalg, memory), plus the
 * helpers of ops/meta_util.h and a walk over the whole op table: every prim has a meta and a parsed
 * schema, and no prim meta is still the weak "meta not implemented yet" stub.
 *
 * Calls go through th_trace_call (binding + meta + recording), as a user of the trace API would. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/ir.h"
#include "ops/meta_util.h"

/* ---- helpers ------------------------------------------------------------------------------------------ */

static const th_device CPU = {TH_CPU, 0};
static const th_device CUDA0 = {TH_CUDA, 0};

static th_value *input(th_trace *tr, th_dtype dt, th_device dev, int ndim, const int64_t *shape) {
  th_value *v = th_trace_add_tensor_input(tr, NULL, dt, dev, ndim, shape);
  assert_non_null(v);
  return v;
}
#define IN(tr, dt, ...)                                                                                                \
  input(tr, dt, CPU, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
#define IN0(tr, dt) input(tr, dt, CPU, 0, NULL)

static th_arg V(th_value *v) { return th_arg_value(v); }
static th_arg DEV(th_device d) {
  th_arg a = {TH_ARG_DEVICE, {0}};
  a.u.device = d;
  return a;
}
/* An int tuple in static-enough storage: callers use it before the next call of TUP in one
 * expression list, so keep a small rotating pool. */
static th_arg TUPv(int n, const int64_t *v) {
  static th_arg pool[16][TH_MAX_DIMS + 1];
  static int next;
  th_arg *items = pool[next++ % 16];
  for (int i = 0; i < n; i++) items[i] = th_arg_int(v[i]);
  return th_arg_tuple(n, items);
}
#define TUP(...) TUPv((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
#define TUP0() TUPv(0, NULL)

static th_status call(th_trace *tr, const char *op, int n, const th_arg *args, th_arg *out) {
  return th_trace_call(tr, op, n, args, 0, NULL, NULL, out);
}
#define CALL(tr, op, out, ...)                                                                                         \
  call(tr, op, (int)(sizeof((th_arg[]){__VA_ARGS__}) / sizeof(th_arg)), (th_arg[]){__VA_ARGS__}, out)

static void expect_err(th_status st, th_status code, const char *frag) {
  if (st != code || !strstr(th_last_error(), frag)) {
    print_error("expected status %d with \"%s\", got status %d: \"%s\"\n", (int)code, frag, (int)st, th_last_error());
    fail();
  }
}

static void expect_ok(th_status st) {
  if (st != TH_OK) {
    print_error("unexpected error %d: %s\n", (int)st, th_last_error());
    fail();
  }
}

/* The output is a tensor of dtype dt, on dev, with the given shape. */
static th_value *expect_tensor(th_arg out, th_dtype dt, th_device dev, int ndim, const int64_t *shape) {
  assert_int_equal(out.kind, TH_ARG_VALUE);
  th_value *v = out.u.value;
  assert_true(v->is_tensor);
  if (v->dtype != dt) print_error("dtype %s, expected %s\n", th_dtype_name(v->dtype), th_dtype_name(dt));
  assert_int_equal(v->dtype, dt);
  assert_true(th_device_eq(v->device, dev));
  assert_int_equal(v->ndim, ndim);
  for (int i = 0; i < ndim; i++) assert_int_equal(v->shape[i], shape[i]);
  assert_non_null(v->name); /* recorded outputs are named */
  return v;
}
#define EXPECT_T(out, dt, ...)                                                                                         \
  expect_tensor(out, dt, CPU, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})
#define EXPECT_T0(out, dt) expect_tensor(out, dt, CPU, 0, NULL)

static int setup(void **state) {
  th_trace *tr = th_trace_new(NULL);
  assert_non_null(tr);
  *state = tr;
  return 0;
}

static int teardown(void **state) {
  th_trace_free(*state);
  return 0;
}

/* ---- the op table -------------------------------------------------------------------------------------- */

/* Every op has a descriptor; every prim a meta and a schema that parsed into the params its text names. */
static void test_table_complete(void **state) {
  (void)state;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    assert_non_null(s);
    assert_int_equal(s->id, id);
    assert_non_null(s->schema_text);
    if (!s->is_prim) {
      assert_non_null(s->decomp);
      continue;
    }
    assert_non_null(s->meta);
    assert_string_equal(s->module, "prims");
    /* the number of parameters equals the number of names in the schema text: count commas at depth 1
     * minus the "/" and "*" markers */
    const char *p = strchr(s->schema_text, '(');
    assert_non_null(p);
    int depth = 0, fields = 0, markers = 0;
    bool empty = p[1] == ')';
    for (const char *q = p; *q; q++) {
      if (*q == '(' || *q == '[') depth++;
      if (*q == ')' || *q == ']') {
        if (--depth == 0) break;
      }
      if (depth == 1 && *q == ',') fields++;
      if (depth == 1 && (*q == '/' || *q == '*') && (q[-1] == ' ' || q[-1] == '(') && (q[1] == ',' || q[1] == ')'))
        markers++;
    }
    int nparams = empty ? 0 : fields + 1 - markers;
    if (s->schema.nparams != nparams)
      print_error("%s: %d params parsed, %d in text\n", s->qualname, s->schema.nparams, nparams);
    assert_int_equal(s->schema.nparams, nparams);
    if (!(s->tags & TH_TAG_UTILITY)) assert_true(s->schema.ret == TH_RT_TENSOR || s->schema.ret == TH_RT_TUPLE);
  }
}

/* A plausible bound argument for a parameter (a f32 [2, 3] tensor for tensors, and so on). */
static th_arg plausible(th_trace *tr, const th_symbol *s, const th_param *p, th_value *t, th_value *ti, th_value *tb,
                        th_arg *list_items) {
  switch (p->type) {
    case TH_PT_TENSOR:
      if (!strcmp(p->name, "index")) return V(ti);
      return p->optional ? th_arg_none() : V(t);
    case TH_PT_TENSOR_OR_SCALAR:
      if (!strcmp(p->name, "pred")) return V(tb);
      if (s->id == TH_OP_prims_bitwise_and || s->id == TH_OP_prims_bitwise_or || s->id == TH_OP_prims_bitwise_xor ||
          s->id == TH_OP_prims_bitwise_not || s->id == TH_OP_prims_bitwise_left_shift ||
          s->id == TH_OP_prims_bitwise_right_shift || s->id == TH_OP_prims_gcd || s->id == TH_OP_prims_lcm)
        return V(ti);
      return V(t);
    case TH_PT_TENSOR_LIST:
      list_items[0] = V(t);
      list_items[1] = V(t);
      return th_arg_list(2, list_items);
    case TH_PT_INT_LIST: return p->optional ? th_arg_none() : TUP(0);
    case TH_PT_INT: return th_arg_int(p->optional ? 0 : 1);
    case TH_PT_FLOAT:
    case TH_PT_SCALAR: return th_arg_float(1.0);
    case TH_PT_BOOL: return th_arg_bool(false);
    case TH_PT_STR: return th_arg_str("x");
    case TH_PT_DTYPE: return th_arg_dtype(TH_F32);
    case TH_PT_DEVICE: return DEV(CPU);
    case TH_PT_ANY: return th_arg_none();
  }
  (void)tr;
  return th_arg_none();
}

/* No prim meta is the weak stub of pending_stubs.c; every elementwise prim accepts plausible input. */
static void test_no_stub_metas(void **state) {
  th_trace *tr = *state;
  th_value *t = IN(tr, TH_F32, 2, 3), *ti = IN(tr, TH_I64, 2, 3), *tb = IN(tr, TH_BOOL, 2, 3);
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (!s->is_prim || (s->tags & TH_TAG_UTILITY)) continue;
    th_arg bound[32], list_items[2], out = th_arg_none();
    assert_true(s->schema.nparams <= 32);
    for (int i = 0; i < s->schema.nparams; i++)
      bound[i] = plausible(tr, s, &s->schema.params[i], t, ti, tb, list_items);
    th_clear_error();
    th_status st = th_symbol_infer(tr, s, bound, &out);
    if (strstr(th_last_error(), "not implemented yet")) {
      print_error("%s still uses the stub meta\n", s->qualname);
      fail();
    }
    if ((s->tags & TH_TAG_ELEMENTWISE) || s->id == TH_OP_prims_clone || s->id == TH_OP_prims_sum) {
      if (st != TH_OK) print_error("%s: %s\n", s->qualname, th_last_error());
      assert_int_equal(st, TH_OK);
      assert_int_equal(out.kind, TH_ARG_VALUE);
      assert_true(out.u.value->is_tensor);
    }
  }
  assert_int_equal(th_trace_num_bsyms(tr), 0); /* infer records nothing */
}

/* ---- meta_util ---------------------------------------------------------------------------------------- */

static void test_meta_util(void **state) {
  (void)state;
  int64_t v[TH_MAX_DIMS];
  int n;
  th_arg t = TUP(2, 3);
  expect_ok(th_meta_int_list("op", "shape", &t, v, &n));
  assert_int_equal(n, 2);
  assert_int_equal(v[1], 3);
  th_arg one = th_arg_int(7);
  expect_ok(th_meta_int_list("op", "shape", &one, v, &n));
  assert_int_equal(n, 1);
  assert_int_equal(v[0], 7);
  th_arg bad_items[2] = {th_arg_int(1), th_arg_float(2.0)};
  th_arg bad = th_arg_list(2, bad_items);
  expect_err(th_meta_int_list("op", "shape", &bad, v, &n), TH_ERR_TYPE, "op: expected shape to be a sequence of ints");
  th_arg s = th_arg_str("x");
  expect_err(th_meta_int_list(NULL, "dims", &s, v, &n), TH_ERR_TYPE, "expected dims to be an int or a sequence");
  th_arg many_items[TH_MAX_DIMS + 1];
  for (int i = 0; i <= TH_MAX_DIMS; i++) many_items[i] = th_arg_int(1);
  th_arg many = th_arg_tuple(TH_MAX_DIMS + 1, many_items);
  expect_err(th_meta_int_list("op", "shape", &many, v, &n), TH_ERR_NOT_IMPLEMENTED, "at most 8");

  int d;
  expect_ok(th_meta_canonical_dim(NULL, -1, 2, &d));
  assert_int_equal(d, 1);
  expect_ok(th_meta_canonical_dim(NULL, -1, 0, &d));
  assert_int_equal(d, 0);
  th_status st = th_meta_canonical_dim(NULL, 2, 2, &d);
  assert_int_equal(st, TH_ERR_INDEX);
  assert_string_equal(th_last_error(), "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  expect_err(th_meta_canonical_dim("ltorch.sum", -3, 2, &d), TH_ERR_INDEX, "ltorch.sum: Dimension out of range");

  char buf[TH_META_SHAPE_BUF];
  int64_t sh[3] = {2, 3, 4};
  assert_string_equal(th_meta_shape_str(sh, 2, buf, sizeof buf), "[2, 3]");
  assert_string_equal(th_meta_shape_str(sh, 0, buf, sizeof buf), "[]");
  assert_string_equal(th_meta_shape_tuple_str(sh, 1, buf, sizeof buf), "(2,)");
  assert_string_equal(th_meta_shape_tuple_str(sh, 3, buf, sizeof buf), "(2, 3, 4)");
  assert_string_equal(th_meta_shape_str(sh, 3, buf, 5), "[2, ");

  assert_int_equal(th_meta_dtype_kind(TH_BOOL), TH_META_KIND_BOOL);
  assert_int_equal(th_meta_dtype_kind(TH_U8), TH_META_KIND_INT);
  assert_int_equal(th_meta_dtype_kind(TH_F8E5M2), TH_META_KIND_FLOAT);
  assert_true(th_meta_dtype_is_exact(TH_BOOL));
  assert_false(th_meta_dtype_is_exact(TH_BF16));
  assert_string_equal(th_meta_dtype_repr(TH_BOOL), "thunder.dtypes.bool8");
  assert_string_equal(th_meta_dtype_repr(TH_BF16), "thunder.dtypes.bfloat16");
  assert_int_equal(th_meta_dtype_numbertype(TH_I32), TH_I64);

  th_arg f = th_arg_float(2.5);
  double fv;
  int64_t iv;
  assert_true(th_meta_is_number(&f));
  assert_false(th_meta_is_tensor(&f));
  assert_int_equal(th_meta_number_type(&f), TH_F64);
  assert_true(th_meta_number_value(&f, &fv, &iv));
  assert_true(fv == 2.5 && iv == 2);

  th_device dev;
  th_arg ds = th_arg_str("cuda:1");
  expect_ok(th_meta_device("op", &ds, &dev));
  assert_true(dev.type == TH_CUDA && dev.index == 1);
  th_arg dbad = th_arg_str("gpu");
  expect_err(th_meta_device("op", &dbad, &dev), TH_ERR_VALUE, "'gpu'");
}

/* ---- elementwise ------------------------------------------------------------------------------------- */

static void test_elementwise_tensors(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *a = IN(tr, TH_F32, 2, 3), *b = IN(tr, TH_F32, 2, 3);
  expect_ok(CALL(tr, "prims.add", &out, V(a), V(b)));
  EXPECT_T(out, TH_F32, 2, 3);
  assert_false(out.u.value->requires_grad);
  /* int and bool numbers fit a float tensor; a float number fits */
  expect_ok(CALL(tr, "prims.mul", &out, V(a), th_arg_int(2)));
  EXPECT_T(out, TH_F32, 2, 3);
  expect_ok(CALL(tr, "prims.sub", &out, th_arg_float(2.5), V(a)));
  EXPECT_T(out, TH_F32, 2, 3);
  expect_ok(CALL(tr, "prims.add", &out, V(a), th_arg_bool(true)));
  EXPECT_T(out, TH_F32, 2, 3);
  /* a float number with an integer tensor is not */
  th_value *i = IN(tr, TH_I64, 4);
  expect_err(CALL(tr, "prims.add", &out, V(i), th_arg_float(2.5)), TH_ERR_RUNTIME, "prims.add: Expected a number");
  expect_ok(CALL(tr, "prims.add", &out, V(i), th_arg_int(1)));
  EXPECT_T(out, TH_I64, 4);
  th_value *bo = IN(tr, TH_BOOL, 4);
  expect_err(CALL(tr, "prims.add", &out, V(bo), th_arg_int(1)), TH_ERR_RUNTIME, "Expected a number");
  /* dtype mismatch */
  th_value *h = IN(tr, TH_BF16, 2, 3);
  expect_err(CALL(tr, "prims.add", &out, V(a), V(h)), TH_ERR_RUNTIME,
             "Expected dtype thunder.dtypes.float32 but found thunder.dtypes.bfloat16!");
  /* low precision rejected by math ops */
  expect_err(CALL(tr, "prims.add", &out, V(h), V(h)), TH_ERR_RUNTIME,
             "prims.add: Unsupported input dtype thunder.dtypes.bfloat16");
  th_value *f16 = IN(tr, TH_F16, 3);
  expect_err(CALL(tr, "prims.mul", &out, V(f16), V(f16)), TH_ERR_RUNTIME,
             "Unsupported input dtype thunder.dtypes.float16");
  expect_err(CALL(tr, "prims.neg", &out, V(f16)), TH_ERR_RUNTIME, "Unsupported input dtype");
  /* shape mismatch */
  th_value *c = IN(tr, TH_F32, 3, 2);
  expect_err(CALL(tr, "prims.add", &out, V(a), V(c)), TH_ERR_RUNTIME, "Expected shape [2, 3] but found [3, 2]");
  /* a CPU 0-dim tensor is exempt from shape and device checks */
  th_value *s = IN0(tr, TH_F32);
  expect_ok(CALL(tr, "prims.add", &out, V(s), V(a)));
  EXPECT_T(out, TH_F32, 2, 3);
  th_value *g = input(tr, TH_F32, CUDA0, 2, (int64_t[]){2, 3});
  expect_ok(CALL(tr, "prims.add", &out, V(s), V(g)));
  expect_tensor(out, TH_F32, CUDA0, 2, (int64_t[]){2, 3});
  expect_err(CALL(tr, "prims.add", &out, V(a), V(g)), TH_ERR_RUNTIME, "Expected device cpu but found cuda:0!");
  /* two 0-dim tensors: 0-dim result */
  expect_ok(CALL(tr, "prims.add", &out, V(s), V(s)));
  EXPECT_T0(out, TH_F32);
  /* requires_grad propagates to float results only */
  th_value *r = IN(tr, TH_F32, 2, 3);
  r->requires_grad = true;
  expect_ok(CALL(tr, "prims.add", &out, V(a), V(r)));
  assert_true(out.u.value->requires_grad);
  expect_ok(CALL(tr, "prims.lt", &out, V(r), V(a)));
  EXPECT_T(out, TH_BOOL, 2, 3);
  assert_false(out.u.value->requires_grad);
  /* recorded: one bsym per successful call, none for failures */
  const th_bsym *last = th_trace_bsym(tr, th_trace_num_bsyms(tr) - 1);
  assert_string_equal(th_bsym_qualname(last), "prims.lt");
}

static void test_elementwise_dtype_sets(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *f = IN(tr, TH_F32, 3), *d = IN(tr, TH_F64, 3), *i = IN(tr, TH_I32, 3), *b = IN(tr, TH_BOOL, 3);
  th_value *h = IN(tr, TH_BF16, 3), *e4 = IN(tr, TH_F8E4M3FN, 3), *e5 = IN(tr, TH_F8E5M2, 3);
  /* float-only: f32/f64 */
  expect_ok(CALL(tr, "prims.exp", &out, V(f)));
  EXPECT_T(out, TH_F32, 3);
  expect_ok(CALL(tr, "prims.tanh", &out, V(d)));
  EXPECT_T(out, TH_F64, 3);
  expect_err(CALL(tr, "prims.exp", &out, V(i)), TH_ERR_RUNTIME,
             "prims.exp: Unsupported input dtype thunder.dtypes.int32");
  expect_err(CALL(tr, "prims.sqrt", &out, V(b)), TH_ERR_RUNTIME, "Unsupported input dtype thunder.dtypes.bool8");
  expect_err(CALL(tr, "prims.exp", &out, V(h)), TH_ERR_RUNTIME, "Unsupported input dtype thunder.dtypes.bfloat16");
  expect_err(CALL(tr, "prims.atan2", &out, V(i), V(i)), TH_ERR_RUNTIME, "Unsupported input dtype");
  expect_ok(CALL(tr, "prims.atan2", &out, V(f), V(f)));
  /* exact: bitwise */
  expect_ok(CALL(tr, "prims.bitwise_and", &out, V(i), V(i)));
  EXPECT_T(out, TH_I32, 3);
  expect_ok(CALL(tr, "prims.bitwise_xor", &out, V(b), th_arg_bool(true)));
  EXPECT_T(out, TH_BOOL, 3);
  expect_ok(CALL(tr, "prims.bitwise_not", &out, V(i)));
  expect_err(CALL(tr, "prims.bitwise_or", &out, V(f), V(f)), TH_ERR_RUNTIME,
             "Unsupported input dtype thunder.dtypes.float32");
  expect_err(CALL(tr, "prims.bitwise_not", &out, V(f)), TH_ERR_RUNTIME, "Unsupported input dtype");
  /* math ops accept integers and bool */
  expect_ok(CALL(tr, "prims.add", &out, V(b), V(b)));
  EXPECT_T(out, TH_BOOL, 3);
  expect_ok(CALL(tr, "prims.abs", &out, V(i)));
  EXPECT_T(out, TH_I32, 3);
  /* comparisons, maximum/minimum, isfinite accept low precision (but not fp8) */
  expect_ok(CALL(tr, "prims.maximum", &out, V(h), V(h)));
  EXPECT_T(out, TH_BF16, 3);
  expect_ok(CALL(tr, "prims.eq", &out, V(h), th_arg_float(1.0)));
  EXPECT_T(out, TH_BOOL, 3);
  expect_ok(CALL(tr, "prims.isfinite", &out, V(h)));
  EXPECT_T(out, TH_BOOL, 3);
  expect_ok(CALL(tr, "prims.signbit", &out, V(i)));
  EXPECT_T(out, TH_BOOL, 3);
  /* fp8 is rejected by every elementwise prim but convert_element_type */
  expect_err(CALL(tr, "prims.add", &out, V(e4), V(e4)), TH_ERR_RUNTIME,
             "Unsupported input dtype thunder.dtypes.float8_e4m3fn");
  expect_err(CALL(tr, "prims.eq", &out, V(e5), V(e5)), TH_ERR_RUNTIME,
             "Unsupported input dtype thunder.dtypes.float8_e5m2");
  expect_err(CALL(tr, "prims.abs", &out, V(e4)), TH_ERR_RUNTIME, "Unsupported input dtype");
  expect_err(CALL(tr, "prims.isfinite", &out, V(e4)), TH_ERR_RUNTIME, "Unsupported input dtype");
  th_value *pb = IN(tr, TH_BOOL, 3);
  expect_err(CALL(tr, "prims.where", &out, V(pb), V(e4), V(e4)), TH_ERR_RUNTIME, "Unsupported input dtype");
  expect_ok(CALL(tr, "prims.convert_element_type", &out, V(e4), th_arg_dtype(TH_F32)));
  EXPECT_T(out, TH_F32, 3);
}

static void test_where(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *p = IN(tr, TH_BOOL, 2, 3), *a = IN(tr, TH_F32, 2, 3), *b = IN(tr, TH_F32, 2, 3), *i = IN(tr, TH_I64, 2, 3);
  expect_ok(CALL(tr, "prims.where", &out, V(p), V(a), V(b)));
  EXPECT_T(out, TH_F32, 2, 3);
  expect_ok(CALL(tr, "prims.where", &out, V(p), V(a), th_arg_int(0)));
  EXPECT_T(out, TH_F32, 2, 3);
  expect_ok(CALL(tr, "prims.where", &out, th_arg_bool(true), V(a), V(b)));
  EXPECT_T(out, TH_F32, 2, 3);
  /* numbers under a tensor pred take their default dtype */
  expect_ok(CALL(tr, "prims.where", &out, V(p), th_arg_float(1.0), th_arg_float(0.0)));
  EXPECT_T(out, TH_F32, 2, 3);
  expect_ok(CALL(tr, "prims.where", &out, V(p), th_arg_int(1), th_arg_int(0)));
  EXPECT_T(out, TH_I64, 2, 3);
  expect_err(CALL(tr, "prims.where", &out, V(a), V(a), V(b)), TH_ERR_RUNTIME, "Expected pred to be a boolean tensor");
  expect_err(CALL(tr, "prims.where", &out, th_arg_int(1), V(a), V(b)), TH_ERR_RUNTIME, "Expected pred");
  expect_err(CALL(tr, "prims.where", &out, V(p), V(a), V(i)), TH_ERR_RUNTIME,
             "Expected dtype thunder.dtypes.float32 but found thunder.dtypes.int64!");
  th_value *p2 = IN(tr, TH_BOOL, 3, 2);
  expect_err(CALL(tr, "prims.where", &out, V(p2), V(a), V(b)), TH_ERR_RUNTIME, "Expected shape");
  /* all numbers fold */
  expect_ok(CALL(tr, "prims.where", &out, th_arg_bool(false), th_arg_int(1), th_arg_int(2)));
  assert_int_equal(out.kind, TH_ARG_INT);
  assert_int_equal(out.u.i, 2);
}

/* number x number: folded eagerly with Python's semantics */
static void test_number_folding(void **state) {
  th_trace *tr = *state;
  th_arg out;
  int nb = th_trace_num_bsyms(tr);
#define FOLD_INT(op, expected, ...)                                                                                    \
  do {                                                                                                                 \
    expect_ok(CALL(tr, op, &out, __VA_ARGS__));                                                                        \
    assert_int_equal(out.kind, TH_ARG_INT);                                                                            \
    assert_int_equal(out.u.i, expected);                                                                               \
  } while (0)
#define FOLD_FLOAT(op, expected, ...)                                                                                  \
  do {                                                                                                                 \
    expect_ok(CALL(tr, op, &out, __VA_ARGS__));                                                                        \
    assert_int_equal(out.kind, TH_ARG_FLOAT);                                                                          \
    assert_true(fabs(out.u.f - (expected)) < 1e-12);                                                                   \
  } while (0)
#define FOLD_BOOL(op, expected, ...)                                                                                   \
  do {                                                                                                                 \
    expect_ok(CALL(tr, op, &out, __VA_ARGS__));                                                                        \
    assert_int_equal(out.kind, TH_ARG_BOOL);                                                                           \
    assert_int_equal(out.u.b, expected);                                                                               \
  } while (0)
  FOLD_INT("prims.add", 5, th_arg_int(2), th_arg_int(3));
  FOLD_FLOAT("prims.add", 5.5, th_arg_int(2), th_arg_float(3.5));
  FOLD_INT("prims.add", 2, th_arg_bool(true), th_arg_bool(true)); /* True + True == 2 */
  FOLD_INT("prims.div", -3, th_arg_int(7), th_arg_int(-2));       /* truncates toward zero */
  FOLD_FLOAT("prims.div", 3.5, th_arg_float(7), th_arg_int(2));
  FOLD_INT("prims.remainder", 1, th_arg_int(-7), th_arg_int(2)); /* Python %: sign of the divisor */
  FOLD_FLOAT("prims.remainder", -1.5, th_arg_float(2.5), th_arg_float(-2.0));
  FOLD_FLOAT("prims.fmod", -1.0, th_arg_int(-7), th_arg_int(2));
  FOLD_INT("prims.pow", 1024, th_arg_int(2), th_arg_int(10));
  FOLD_FLOAT("prims.pow", 0.5, th_arg_int(2), th_arg_int(-1));
  FOLD_INT("prims.maximum", 3, th_arg_int(3), th_arg_int(-1));
  FOLD_FLOAT("prims.minimum", -1.0, th_arg_float(3), th_arg_int(-1));
  FOLD_BOOL("prims.eq", true, th_arg_int(1), th_arg_float(1.0));
  FOLD_BOOL("prims.lt", false, th_arg_int(2), th_arg_int(1));
  FOLD_BOOL("prims.bitwise_xor", true, th_arg_bool(true), th_arg_bool(false));
  FOLD_INT("prims.bitwise_and", 4, th_arg_int(6), th_arg_int(12));
  FOLD_INT("prims.floor", -3, th_arg_float(-2.5));
  FOLD_INT("prims.round", 2, th_arg_float(2.5)); /* ties to even */
  FOLD_INT("prims.ceil", 3, th_arg_int(3));
  FOLD_FLOAT("prims.abs", 2.5, th_arg_float(-2.5));
  FOLD_INT("prims.neg", -1, th_arg_bool(true));
  FOLD_INT("prims.bitwise_not", -2, th_arg_bool(true));
  FOLD_FLOAT("prims.exp", 1.0, th_arg_float(0.0));
  FOLD_FLOAT("prims.sqrt", 1.5, th_arg_float(2.25));
  FOLD_BOOL("prims.isfinite", false, th_arg_float(INFINITY));
  FOLD_BOOL("prims.signbit", true, th_arg_float(-0.0));
  FOLD_INT("prims.add", INT64_MIN, th_arg_int(INT64_MAX), th_arg_int(1)); /* wraps */
  FOLD_INT("prims.div", INT64_MIN, th_arg_int(INT64_MIN), th_arg_int(-1));
  /* what Python raises */
  expect_err(CALL(tr, "prims.div", &out, th_arg_int(1), th_arg_int(0)), TH_ERR_VALUE, "division or modulo by zero");
  expect_err(CALL(tr, "prims.div", &out, th_arg_float(1), th_arg_float(0)), TH_ERR_VALUE, "float division by zero");
  expect_err(CALL(tr, "prims.sqrt", &out, th_arg_float(-1.0)), TH_ERR_VALUE, "math domain error");
  expect_err(CALL(tr, "prims.exp", &out, th_arg_float(1000.0)), TH_ERR_VALUE, "math range error");
  expect_err(CALL(tr, "prims.sin", &out, th_arg_float(INFINITY)), TH_ERR_VALUE, "math domain error");
  expect_err(CALL(tr, "prims.log", &out, th_arg_float(-INFINITY)), TH_ERR_VALUE, "math domain error");
  expect_err(CALL(tr, "prims.acos", &out, th_arg_float(-INFINITY)), TH_ERR_VALUE, "math domain error");
  expect_err(CALL(tr, "prims.fmod", &out, th_arg_float(INFINITY), th_arg_float(1.0)), TH_ERR_VALUE,
             "math domain error");
  expect_ok(CALL(tr, "prims.exp", &out, th_arg_float(INFINITY))); /* math.exp(inf) is inf */
  assert_true(out.kind == TH_ARG_FLOAT && isinf(out.u.f) && out.u.f > 0);
  FOLD_FLOAT("prims.atan", 1.5707963267948966, th_arg_float(INFINITY));
  assert_true(CALL(tr, "prims.sin", &out, th_arg_float(NAN)) == TH_OK && isnan(out.u.f)); /* nan in, nan out */
  expect_err(CALL(tr, "prims.floor", &out, th_arg_float(NAN)), TH_ERR_VALUE, "cannot convert float NaN to integer");
  /* dtype sets apply to Python types too */
  expect_err(CALL(tr, "prims.exp", &out, th_arg_int(1)), TH_ERR_RUNTIME, "Unsupported input dtype int");
  expect_err(CALL(tr, "prims.bitwise_and", &out, th_arg_float(1), th_arg_int(1)), TH_ERR_RUNTIME,
             "Unsupported input dtype float");
  /* constants fold eagerly, as Thunder's number x number: nothing is recorded */
  assert_int_equal(th_trace_num_bsyms(tr), nb);
  /* number proxies: unknown value -> a proxy of the result type; known -> a proxy with the value */
  th_value *n = th_value_new_number(tr, TH_I64, false, 0, 0);
  expect_ok(CALL(tr, "prims.add", &out, V(n), th_arg_int(1)));
  assert_int_equal(out.kind, TH_ARG_VALUE);
  assert_false(out.u.value->is_tensor);
  assert_int_equal(out.u.value->dtype, TH_I64);
  assert_false(out.u.value->has_value);
  expect_ok(CALL(tr, "prims.mul", &out, V(n), th_arg_float(0.5)));
  assert_int_equal(out.u.value->dtype, TH_F64);
  expect_ok(CALL(tr, "prims.lt", &out, V(n), th_arg_float(0.5)));
  assert_int_equal(out.u.value->dtype, TH_BOOL);
  th_value *k = th_value_new_number(tr, TH_I64, true, 4, 4);
  expect_ok(CALL(tr, "prims.mul", &out, V(k), th_arg_int(3)));
  assert_int_equal(out.kind, TH_ARG_VALUE);
  assert_true(out.u.value->has_value);
  assert_int_equal(out.u.value->ivalue, 12);
  assert_non_null(out.u.value->name);
  /* a number proxy with a tensor gives a tensor */
  th_value *t = IN(tr, TH_F32, 2);
  expect_ok(CALL(tr, "prims.add", &out, V(t), V(n)));
  EXPECT_T(out, TH_F32, 2);
#undef FOLD_INT
#undef FOLD_FLOAT
#undef FOLD_BOOL
}

static void test_convert_and_device_put(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *a = IN(tr, TH_F32, 2, 3);
  a->requires_grad = true;
  expect_ok(CALL(tr, "prims.convert_element_type", &out, V(a), th_arg_dtype(TH_BF16)));
  EXPECT_T(out, TH_BF16, 2, 3);
  assert_true(out.u.value->requires_grad);
  expect_ok(CALL(tr, "prims.convert_element_type", &out, V(a), th_arg_dtype(TH_F8E4M3FN)));
  EXPECT_T(out, TH_F8E4M3FN, 2, 3);
  expect_ok(CALL(tr, "prims.convert_element_type", &out, V(a), th_arg_dtype(TH_I32)));
  EXPECT_T(out, TH_I32, 2, 3);
  assert_false(out.u.value->requires_grad); /* dropped for exact dtypes */
  /* numbers become Python numbers of the dtype's category */
  expect_ok(CALL(tr, "prims.convert_element_type", &out, th_arg_float(2.7), th_arg_dtype(TH_I64)));
  assert_int_equal(out.kind, TH_ARG_INT);
  assert_int_equal(out.u.i, 2);
  expect_ok(CALL(tr, "prims.convert_element_type", &out, th_arg_int(1), th_arg_dtype(TH_BF16)));
  assert_int_equal(out.kind, TH_ARG_FLOAT);
  assert_true(out.u.f == 1.0);
  expect_ok(CALL(tr, "prims.convert_element_type", &out, th_arg_float(0.5), th_arg_dtype(TH_BOOL)));
  assert_int_equal(out.kind, TH_ARG_BOOL);
  assert_true(out.u.b);
  expect_err(CALL(tr, "prims.convert_element_type", &out, th_arg_float(INFINITY), th_arg_dtype(TH_I32)), TH_ERR_VALUE,
             "cannot convert float infinity to integer");

  expect_ok(CALL(tr, "prims.device_put", &out, V(a), th_arg_str("cuda:0")));
  expect_tensor(out, TH_F32, CUDA0, 2, (int64_t[]){2, 3});
  assert_true(out.u.value->requires_grad);
  expect_ok(CALL(tr, "prims.device_put", &out, V(a), DEV(CPU)));
  EXPECT_T(out, TH_F32, 2, 3);
  expect_err(CALL(tr, "prims.device_put", &out, V(a), th_arg_str("tpu")), TH_ERR_VALUE, "prims.device_put");
  th_value *e = IN(tr, TH_F8E5M2, 4);
  expect_ok(CALL(tr, "prims.device_put", &out, V(e), DEV(CUDA0)));
  expect_tensor(out, TH_F8E5M2, CUDA0, 1, (int64_t[]){4});
}

/* ---- creation --------------------------------------------------------------------------------------- */

static th_status call_kw(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *names,
                         const th_arg *kw, th_arg *out) {
  return th_trace_call(tr, op, n, args, nkw, names, kw, out);
}

static th_status full(th_trace *tr, th_arg shape, th_arg fill, th_dtype dt, th_arg *out) {
  const char *names[] = {"device", "dtype"};
  th_arg args[] = {shape, fill}, kw[] = {DEV(CPU), th_arg_dtype(dt)};
  return call_kw(tr, "prims.full", 2, args, 2, names, kw, out);
}

static th_status iota(th_trace *tr, int64_t length, th_dtype dt, th_arg *out) {
  const char *names[] = {"start", "step", "device", "dtype"};
  th_arg args[] = {th_arg_int(length)}, kw[] = {th_arg_int(0), th_arg_int(1), DEV(CPU), th_arg_dtype(dt)};
  return call_kw(tr, "prims.iota", 1, args, 4, names, kw, out);
}

static th_status uniform(th_trace *tr, th_arg shape, double lo, double hi, th_dtype dt, th_arg *out) {
  const char *names[] = {"device", "dtype"};
  th_arg args[] = {shape, th_arg_float(lo), th_arg_float(hi)}, kw[] = {th_arg_str("cpu"), th_arg_dtype(dt)};
  return call_kw(tr, "prims.uniform", 3, args, 2, names, kw, out);
}

static void test_creation(void **state) {
  th_trace *tr = *state;
  th_arg out;
  expect_ok(full(tr, TUP(2, 3), th_arg_float(1.5), TH_F32, &out));
  EXPECT_T(out, TH_F32, 2, 3);
  assert_false(out.u.value->requires_grad);
  expect_ok(full(tr, TUP0(), th_arg_int(1), TH_F64, &out));
  EXPECT_T0(out, TH_F64);
  expect_ok(full(tr, TUP(4), th_arg_bool(true), TH_I64, &out));
  EXPECT_T(out, TH_I64, 4);
  expect_ok(full(tr, TUP(4), th_arg_float(0.0), TH_F8E4M3FN, &out));
  expect_err(full(tr, TUP(2), th_arg_float(1.5), TH_I64, &out), TH_ERR_RUNTIME,
             "Can't safely cast fill_value of numbertype <class 'float'> to dtype thunder.dtypes.int64");
  expect_err(full(tr, TUP(2), th_arg_int(1), TH_BOOL, &out), TH_ERR_RUNTIME, "Can't safely cast");
  expect_err(full(tr, TUP(-1, 2), th_arg_int(1), TH_F32, &out), TH_ERR_RUNTIME,
             "Trying to create tensor with negative dimension -1: [-1, 2]");

  expect_ok(iota(tr, 5, TH_I64, &out));
  EXPECT_T(out, TH_I64, 5);
  expect_ok(iota(tr, 0, TH_I32, &out)); /* (0,), not Thunder's () */
  EXPECT_T(out, TH_I32, 0);
  expect_err(iota(tr, -1, TH_I64, &out), TH_ERR_RUNTIME, "length=-1");
  expect_err(iota(tr, 3, TH_F32, &out), TH_ERR_RUNTIME, "exact");
  expect_err(iota(tr, 3, TH_BOOL, &out), TH_ERR_RUNTIME, "exact");

  expect_ok(uniform(tr, TUP(2, 2), 0.0, 1.0, TH_BF16, &out));
  EXPECT_T(out, TH_BF16, 2, 2);
  expect_err(uniform(tr, TUP(2), 0.0, 1.0, TH_I64, &out), TH_ERR_RUNTIME, "floating dtype");
  expect_err(uniform(tr, TUP(2), 0.0, 1.0, TH_F8E4M3FN, &out), TH_ERR_RUNTIME, "floating dtype");
  expect_err(uniform(tr, TUP(2), 1.0, 0.0, TH_F32, &out), TH_ERR_RUNTIME, "from=1 > to=0");
}

/* ---- shape --------------------------------------------------------------------------------------------- */

static void test_broadcast_reshape_transpose(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *a = IN(tr, TH_F32, 3), *m = IN(tr, TH_F32, 2, 3), *e = IN(tr, TH_F8E4M3FN, 2, 3);
  m->requires_grad = true;
  expect_ok(CALL(tr, "prims.broadcast_in_dim", &out, V(a), TUP(2, 3), TUP(1)));
  EXPECT_T(out, TH_F32, 2, 3);
  expect_ok(CALL(tr, "prims.broadcast_in_dim", &out, V(m), TUP(4, 2, 3), TUP(1, 2)));
  EXPECT_T(out, TH_F32, 4, 2, 3);
  assert_true(out.u.value->requires_grad);
  th_value *one = IN(tr, TH_F32, 1, 3);
  expect_ok(CALL(tr, "prims.broadcast_in_dim", &out, V(one), TUP(5, 3), TUP(0, 1)));
  EXPECT_T(out, TH_F32, 5, 3);
  expect_err(CALL(tr, "prims.broadcast_in_dim", &out, V(a), TUP(2, 4), TUP(1)), TH_ERR_RUNTIME,
             "A dimension of length 3 cannot be broadcast to a dimension of length 4");
  expect_err(CALL(tr, "prims.broadcast_in_dim", &out, V(a), TUP(2, 3), TUP0()), TH_ERR_RUNTIME,
             "Expected one broadcast dimension (got 0) for each dimension of a (which has 1 dimensions)");
  expect_err(CALL(tr, "prims.broadcast_in_dim", &out, V(m), TUP(3, 2, 3), TUP(1, 0)), TH_ERR_RUNTIME,
             "strictly increasing");
  expect_err(CALL(tr, "prims.broadcast_in_dim", &out, V(a), TUP(3), TUP(1)), TH_ERR_RUNTIME, "out-of-bounds");
  expect_ok(CALL(tr, "prims.broadcast_in_dim", &out, V(e), TUP(2, 2, 3), TUP(1, 2)));
  EXPECT_T(out, TH_F8E4M3FN, 2, 2, 3);

  expect_ok(CALL(tr, "prims.reshape", &out, V(m), TUP(3, 2)));
  EXPECT_T(out, TH_F32, 3, 2);
  expect_ok(CALL(tr, "prims.reshape", &out, V(m), TUP(6)));
  EXPECT_T(out, TH_F32, 6);
  expect_ok(CALL(tr, "prims.reshape", &out, V(e), TUP(6, 1)));
  EXPECT_T(out, TH_F8E4M3FN, 6, 1);
  expect_err(CALL(tr, "prims.reshape", &out, V(m), TUP(4, 2)), TH_ERR_RUNTIME,
             "Attempting to reshape a.shape=(2, 3) to shape=(4, 2), but a.numel=6 is different from the number of "
             "elements in shape, 8");
  expect_err(CALL(tr, "prims.reshape", &out, V(m), TUP(-1)), TH_ERR_RUNTIME, "non-negative");
  th_value *z = IN(tr, TH_F32, 0, 3);
  expect_ok(CALL(tr, "prims.reshape", &out, V(z), TUP(3, 0, 7)));
  EXPECT_T(out, TH_F32, 3, 0, 7);

  th_value *c = IN(tr, TH_F32, 2, 3, 4);
  expect_ok(CALL(tr, "prims.transpose", &out, V(c), TUP(2, 0, 1)));
  EXPECT_T(out, TH_F32, 4, 2, 3);
  expect_ok(CALL(tr, "prims.transpose", &out, V(e), TUP(1, 0)));
  EXPECT_T(out, TH_F8E4M3FN, 3, 2);
  expect_err(CALL(tr, "prims.transpose", &out, V(c), TUP(0, 0, 1)), TH_ERR_RUNTIME, "to be a valid permutation");
  expect_err(CALL(tr, "prims.transpose", &out, V(c), TUP(1, 0)), TH_ERR_RUNTIME,
             "Expected the length (2) of the permutation");
  expect_err(CALL(tr, "prims.transpose", &out, V(c), TUP(-1, 0, 1)), TH_ERR_RUNTIME, "valid permutation");
}

static void test_slice_squeeze_flip(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *a = IN(tr, TH_F32, 5, 6);
  expect_ok(CALL(tr, "prims.slice_prim", &out, V(a), TUP(1, 0), TUP(5, 6), TUP(2, 4)));
  EXPECT_T(out, TH_F32, 2, 2);
  expect_ok(CALL(tr, "prims.slice_prim", &out, V(a), TUP(1, 2), TUP(1, 6))); /* strides default to None */
  EXPECT_T(out, TH_F32, 0, 4);
  expect_err(CALL(tr, "prims.slice_prim", &out, V(a), TUP(0, 0), TUP(6, 6)), TH_ERR_RUNTIME, "end_indices=(6, 6)");
  expect_err(CALL(tr, "prims.slice_prim", &out, V(a), TUP(3, 0), TUP(2, 6)), TH_ERR_RUNTIME, "weakly greater");
  expect_err(CALL(tr, "prims.slice_prim", &out, V(a), TUP(-1, 0), TUP(2, 6)), TH_ERR_RUNTIME, "weakly positive");
  expect_err(CALL(tr, "prims.slice_prim", &out, V(a), TUP(0, 0), TUP(2, 6), TUP(0, 1)), TH_ERR_RUNTIME,
             "strictly positive");
  expect_err(CALL(tr, "prims.slice_prim", &out, V(a), TUP(0), TUP(2, 6)), TH_ERR_RUNTIME, "length-1 start_indices");

  th_value *s = IN(tr, TH_F32, 1, 3, 1);
  expect_ok(CALL(tr, "prims.squeeze", &out, V(s), TUP(0, 2)));
  EXPECT_T(out, TH_F32, 3);
  expect_ok(CALL(tr, "prims.squeeze", &out, V(s), TUP0()));
  EXPECT_T(out, TH_F32, 1, 3, 1);
  expect_err(CALL(tr, "prims.squeeze", &out, V(s), TUP(1)), TH_ERR_RUNTIME, "dimensions of length one");
  expect_err(CALL(tr, "prims.squeeze", &out, V(s), TUP(3)), TH_ERR_INDEX, "valid dimensions");
  expect_err(CALL(tr, "prims.squeeze", &out, V(s), TUP(0, 0)), TH_ERR_RUNTIME, "unique");

  expect_ok(CALL(tr, "prims.flip", &out, V(a), TUP(1)));
  EXPECT_T(out, TH_F32, 5, 6);
  expect_err(CALL(tr, "prims.flip", &out, V(a), TUP(2)), TH_ERR_INDEX, "valid dimensions");
  expect_err(CALL(tr, "prims.flip", &out, V(a), TUP(0, 0)), TH_ERR_RUNTIME, "unique");

  expect_ok(CALL(tr, "prims.clone", &out, V(a)));
  th_value *c = EXPECT_T(out, TH_F32, 5, 6);
  assert_ptr_not_equal(c, a);
  expect_ok(CALL(tr, "prims.shallow_copy", &out, V(a)));
  EXPECT_T(out, TH_F32, 5, 6);
}

static void test_cat_take(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *a = IN(tr, TH_F32, 2, 3), *b = IN(tr, TH_F32, 4, 3), *c = IN(tr, TH_F32, 2, 5), *h = IN(tr, TH_BF16, 2, 3);
  th_arg l1[] = {V(a), V(b)};
  expect_ok(CALL(tr, "prims.cat", &out, th_arg_list(2, l1), th_arg_int(0)));
  EXPECT_T(out, TH_F32, 6, 3);
  th_arg l2[] = {V(a), V(c), V(a)};
  expect_ok(CALL(tr, "prims.cat", &out, th_arg_tuple(3, l2), th_arg_int(-1)));
  EXPECT_T(out, TH_F32, 2, 11);
  expect_err(CALL(tr, "prims.cat", &out, th_arg_list(2, l1), th_arg_int(2)), TH_ERR_INDEX,
             "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  expect_err(CALL(tr, "prims.cat", &out, th_arg_list(2, l1), th_arg_int(-3)), TH_ERR_INDEX, "Dimension out of range");
  expect_err(CALL(tr, "prims.cat", &out, th_arg_list(2, l1), th_arg_int(1)), TH_ERR_RUNTIME,
             "Sizes of tensors must match except in dimension 1");
  th_arg l3[] = {V(a), V(h)};
  expect_err(CALL(tr, "prims.cat", &out, th_arg_list(2, l3), th_arg_int(0)), TH_ERR_RUNTIME,
             "Expected dtype thunder.dtypes.float32 but found thunder.dtypes.bfloat16!");
  expect_err(CALL(tr, "prims.cat", &out, th_arg_list(0, l1), th_arg_int(0)), TH_ERR_RUNTIME, "non-empty");
  th_value *s = IN0(tr, TH_F32);
  th_arg l4[] = {V(s)};
  expect_err(CALL(tr, "prims.cat", &out, th_arg_list(1, l4), th_arg_int(0)), TH_ERR_INDEX, "zero-dimensional");
  th_value *e = IN(tr, TH_F8E4M3FN, 2);
  th_arg l5[] = {V(e), V(e)};
  expect_ok(CALL(tr, "prims.cat", &out, th_arg_list(2, l5), th_arg_int(0)));
  EXPECT_T(out, TH_F8E4M3FN, 4);

  th_value *m = IN(tr, TH_F32, 4, 5), *idx = IN(tr, TH_I64, 3), *idx0 = IN0(tr, TH_I32), *fidx = IN(tr, TH_F32, 3);
  expect_ok(CALL(tr, "prims.take", &out, V(m), V(idx), th_arg_int(1)));
  EXPECT_T(out, TH_F32, 4, 3);
  expect_ok(CALL(tr, "prims.take", &out, V(m), V(idx0), th_arg_int(0)));
  EXPECT_T(out, TH_F32, 1, 5);
  expect_err(CALL(tr, "prims.take", &out, V(m), V(fidx), th_arg_int(0)), TH_ERR_RUNTIME, "integer dtype");
  expect_err(CALL(tr, "prims.take", &out, V(m), V(idx), th_arg_int(2)), TH_ERR_INDEX, "Dimension out of range");
  expect_err(CALL(tr, "prims.take", &out, V(m), V(m), th_arg_int(0)), TH_ERR_RUNTIME, "integer dtype");
}

/* ---- reductions ------------------------------------------------------------------------------------------ */

static void test_reductions(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *a = IN(tr, TH_F32, 2, 3, 4), *i = IN(tr, TH_I32, 2, 3), *h = IN(tr, TH_BF16, 5), *s = IN0(tr, TH_F32);
  a->requires_grad = true;
  expect_ok(CALL(tr, "prims.sum", &out, V(a), TUP(1)));
  EXPECT_T(out, TH_F32, 2, 4);
  assert_true(out.u.value->requires_grad);
  expect_ok(CALL(tr, "prims.prod", &out, V(a), TUP(0, 2)));
  EXPECT_T(out, TH_F32, 3);
  expect_ok(CALL(tr, "prims.amax", &out, V(a), TUP(0, 1, 2)));
  EXPECT_T0(out, TH_F32);
  expect_ok(CALL(tr, "prims.sum", &out, V(i), TUP(0)));
  EXPECT_T(out, TH_I32, 3); /* dtype unchanged */
  expect_ok(CALL(tr, "prims.amin", &out, V(h), TUP(0)));
  EXPECT_T0(out, TH_BF16);
  expect_ok(CALL(tr, "prims.sum", &out, V(s), TUP0()));
  EXPECT_T0(out, TH_F32);
  expect_ok(CALL(tr, "prims.sum", &out, V(s), TUP(0)));
  EXPECT_T0(out, TH_F32);
  expect_err(CALL(tr, "prims.sum", &out, V(a), TUP0()), TH_ERR_RUNTIME, "non-empty");
  expect_err(CALL(tr, "prims.sum", &out, V(a), TUP(3)), TH_ERR_INDEX, "valid");
  expect_err(CALL(tr, "prims.sum", &out, V(a), TUP(-1)), TH_ERR_INDEX, "valid");
  expect_err(CALL(tr, "prims.sum", &out, V(a), TUP(1, 1)), TH_ERR_RUNTIME, "unique");
  th_value *z = IN(tr, TH_F32, 0, 3), *e = IN(tr, TH_F8E4M3FN, 3);
  expect_ok(CALL(tr, "prims.sum", &out, V(z), TUP(0)));
  EXPECT_T(out, TH_F32, 3);
  expect_err(CALL(tr, "prims.amax", &out, V(z), TUP(0)), TH_ERR_RUNTIME,
             "Expected reduction dim 0 to have non-zero size.");
  expect_err(CALL(tr, "prims.sum", &out, V(e), TUP(0)), TH_ERR_RUNTIME, "Unsupported input dtype");

  const char *kw[] = {"correction"};
  th_arg corr[] = {th_arg_float(1.0)};
  th_arg vargs[] = {V(a), TUP(2)};
  expect_ok(th_trace_call(tr, "prims.var", 2, vargs, 1, kw, corr, &out));
  EXPECT_T(out, TH_F32, 2, 3);
  expect_ok(th_trace_call(tr, "prims.var_mean", 2, vargs, 1, kw, corr, &out));
  assert_int_equal(out.kind, TH_ARG_TUPLE);
  assert_int_equal(out.u.seq.n, 2);
  EXPECT_T(out.u.seq.items[0], TH_F32, 2, 3);
  EXPECT_T(out.u.seq.items[1], TH_F32, 2, 3);
  assert_ptr_not_equal(out.u.seq.items[0].u.value, out.u.seq.items[1].u.value);
  th_arg iargs[] = {V(i), TUP(0)};
  expect_err(th_trace_call(tr, "prims.var", 2, iargs, 1, kw, corr, &out), TH_ERR_RUNTIME,
             "Unsupported input dtype thunder.dtypes.int32");

  expect_ok(CALL(tr, "prims.argmax", &out, V(a), th_arg_int(1)));
  EXPECT_T(out, TH_I64, 2, 4);
  assert_false(out.u.value->requires_grad);
  expect_ok(CALL(tr, "prims.argmin", &out, V(a), th_arg_none()));
  EXPECT_T0(out, TH_I64);
  expect_err(CALL(tr, "prims.argmax", &out, V(a), th_arg_int(3)), TH_ERR_INDEX, "dim=3");
  expect_err(CALL(tr, "prims.argmax", &out, V(z), th_arg_none()), TH_ERR_RUNTIME, "numel() == 0");
  expect_ok(CALL(tr, "prims.argmax", &out, V(z), th_arg_int(1)));
  EXPECT_T(out, TH_I64, 0);
}

/* ---- linalg ---------------------------------------------------------------------------------------------- */

static void test_matmul(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *a = IN(tr, TH_F32, 2, 3), *b = IN(tr, TH_F32, 3, 4), *c = IN(tr, TH_F32, 4, 5), *h = IN(tr, TH_BF16, 3, 4);
  expect_ok(CALL(tr, "prims.matmul", &out, V(a), V(b)));
  EXPECT_T(out, TH_F32, 2, 4);
  expect_err(CALL(tr, "prims.matmul", &out, V(a), V(c)), TH_ERR_RUNTIME,
             "prims.matmul: Expected a.shape[-1]=3 to equal b.shape[-2]=4 (a.shape=[2, 3], b.shape=[4, 5])");
  expect_err(CALL(tr, "prims.matmul", &out, V(a), V(h)), TH_ERR_RUNTIME,
             "Expected a.dtype=float32 and b.dtype=bfloat16 to be the same");
  th_value *v3 = IN(tr, TH_F32, 3), *v4 = IN(tr, TH_F32, 4);
  expect_ok(CALL(tr, "prims.matmul", &out, V(v3), V(v3)));
  EXPECT_T0(out, TH_F32);
  expect_err(CALL(tr, "prims.matmul", &out, V(v3), V(v4)), TH_ERR_RUNTIME,
             "Expected a.shape[0]=3 to equal b.shape[0]=4");
  expect_ok(CALL(tr, "prims.matmul", &out, V(v3), V(b)));
  EXPECT_T(out, TH_F32, 4);
  expect_ok(CALL(tr, "prims.matmul", &out, V(a), V(v3)));
  EXPECT_T(out, TH_F32, 2);
  th_value *ba = IN(tr, TH_F32, 5, 2, 3), *bb = IN(tr, TH_F32, 5, 3, 4), *bc = IN(tr, TH_F32, 4, 3, 4);
  bb->requires_grad = true;
  expect_ok(CALL(tr, "prims.matmul", &out, V(ba), V(bb)));
  EXPECT_T(out, TH_F32, 5, 2, 4);
  assert_true(out.u.value->requires_grad);
  expect_err(CALL(tr, "prims.matmul", &out, V(ba), V(bc)), TH_ERR_RUNTIME, "batch dimensions of a ([5])");
  expect_err(CALL(tr, "prims.matmul", &out, V(ba), V(b)), TH_ERR_RUNTIME, "batch dimensions"); /* no broadcasting */
  th_value *s = IN0(tr, TH_F32);
  expect_err(CALL(tr, "prims.matmul", &out, V(s), V(b)), TH_ERR_NOT_IMPLEMENTED, "at least one dimension");
  th_value *e = IN(tr, TH_F8E4M3FN, 2, 3), *e2 = IN(tr, TH_F8E4M3FN, 3, 2);
  expect_err(CALL(tr, "prims.matmul", &out, V(e), V(e2)), TH_ERR_RUNTIME, "Unsupported input dtype");
  th_value *g = input(tr, TH_F32, CUDA0, 2, (int64_t[]){3, 4});
  expect_err(CALL(tr, "prims.matmul", &out, V(a), V(g)), TH_ERR_RUNTIME, "device");
}

static void test_linear(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *x = IN(tr, TH_F32, 8, 16), *w = IN(tr, TH_F32, 4, 16), *bias = IN(tr, TH_F32, 4);
  expect_ok(CALL(tr, "prims.linear", &out, V(x), V(w), V(bias)));
  EXPECT_T(out, TH_F32, 8, 4);
  expect_ok(CALL(tr, "prims.linear", &out, V(x), V(w), th_arg_none()));
  EXPECT_T(out, TH_F32, 8, 4);
  th_value *x3 = IN(tr, TH_F32, 2, 8, 16), *x1 = IN(tr, TH_F32, 16);
  w->requires_grad = true;
  expect_ok(CALL(tr, "prims.linear", &out, V(x3), V(w), V(bias)));
  EXPECT_T(out, TH_F32, 2, 8, 4);
  assert_true(out.u.value->requires_grad);
  expect_ok(CALL(tr, "prims.linear", &out, V(x1), V(w), th_arg_none()));
  EXPECT_T(out, TH_F32, 4);
  th_value *xb = IN(tr, TH_BF16, 8, 16);
  expect_err(CALL(tr, "prims.linear", &out, V(xb), V(w), th_arg_none()), TH_ERR_RUNTIME,
             "Expected a.dtype=bfloat16 and w.dtype=float32 to be the same!");
  th_value *w2 = IN(tr, TH_F32, 4, 15), *b5 = IN(tr, TH_F32, 5), *bh = IN(tr, TH_BF16, 4), *w1 = IN(tr, TH_F32, 16);
  expect_err(CALL(tr, "prims.linear", &out, V(x), V(w2), th_arg_none()), TH_ERR_RUNTIME,
             "Expected a.shape[-1]=16 to equal w.shape[1]=15");
  expect_err(CALL(tr, "prims.linear", &out, V(x), V(w), V(b5)), TH_ERR_RUNTIME, "bias");
  expect_err(CALL(tr, "prims.linear", &out, V(x), V(w), V(bh)), TH_ERR_RUNTIME, "bias.dtype=bfloat16");
  expect_err(CALL(tr, "prims.linear", &out, V(x), V(w1), th_arg_none()), TH_ERR_RUNTIME, "two dimensions");
}

/* ---- memory ------------------------------------------------------------------------------------------------ */

static void test_copy(void **state) {
  th_trace *tr = *state;
  th_arg out;
  th_value *src = IN(tr, TH_F32, 2, 3), *dst = IN(tr, TH_F32, 2, 3), *h = IN(tr, TH_BF16, 2, 3),
           *o = IN(tr, TH_F32, 3, 2);
  dst->requires_grad = true;
  expect_ok(CALL(tr, "prims.copy_", &out, V(src), V(dst)));
  th_value *r = EXPECT_T(out, TH_F32, 2, 3);
  assert_ptr_not_equal(r, dst);
  assert_true(r->requires_grad);
  expect_err(CALL(tr, "prims.copy_", &out, V(h), V(dst)), TH_ERR_RUNTIME,
             "Expected dtype thunder.dtypes.float32 but found thunder.dtypes.bfloat16!");
  expect_err(CALL(tr, "prims.copy_", &out, V(o), V(dst)), TH_ERR_RUNTIME,
             "Expected copy_from.shape=[3, 2] to equal copy_to.shape=[2, 3]");
  th_value *g = input(tr, TH_F32, CUDA0, 2, (int64_t[]){2, 3});
  expect_err(CALL(tr, "prims.copy_", &out, V(g), V(dst)), TH_ERR_RUNTIME, "Expected device cpu but found cuda:0!");
  th_value *e1 = IN(tr, TH_F8E5M2, 4), *e2 = IN(tr, TH_F8E5M2, 4);
  expect_ok(CALL(tr, "prims.copy_", &out, V(e1), V(e2)));
  EXPECT_T(out, TH_F8E5M2, 4);
}

/* Failures inside metas under fault injection: an error, never a crash (ASan builds check leaks). */
static void test_alloc_failures(void **state) {
  (void)state;
  for (long n = 1; n < 60; n++) {
    th_trace *tr = th_trace_new(NULL);
    if (!tr) continue;
    th_value *a = th_trace_add_tensor_input(tr, NULL, TH_F32, CPU, 2, (int64_t[]){2, 3});
    th_value *b = th_trace_add_tensor_input(tr, NULL, TH_F32, CPU, 2, (int64_t[]){3, 4});
    if (a && b) {
      th_alloc_fail_after(n);
      th_arg out, args[] = {V(a), V(b)};
      th_status st = call(tr, "prims.matmul", 2, args, &out);
      th_arg vargs[] = {V(a), TUP(1)};
      const char *kw[] = {"correction"};
      th_arg corr[] = {th_arg_int(0)};
      th_status st2 = th_trace_call(tr, "prims.var_mean", 2, vargs, 1, kw, corr, &out);
      th_alloc_fail_after(0);
      assert_true(st == TH_OK || st == TH_ERR_NOMEM);
      assert_true(st2 == TH_OK || st2 == TH_ERR_NOMEM);
    }
    th_alloc_fail_after(0);
    th_trace_free(tr);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_table_complete),
    cmocka_unit_test_setup_teardown(test_no_stub_metas, setup, teardown),
    cmocka_unit_test(test_meta_util),
    cmocka_unit_test_setup_teardown(test_elementwise_tensors, setup, teardown),
    cmocka_unit_test_setup_teardown(test_elementwise_dtype_sets, setup, teardown),
    cmocka_unit_test_setup_teardown(test_where, setup, teardown),
    cmocka_unit_test_setup_teardown(test_number_folding, setup, teardown),
    cmocka_unit_test_setup_teardown(test_convert_and_device_put, setup, teardown),
    cmocka_unit_test_setup_teardown(test_creation, setup, teardown),
    cmocka_unit_test_setup_teardown(test_broadcast_reshape_transpose, setup, teardown),
    cmocka_unit_test_setup_teardown(test_slice_squeeze_flip, setup, teardown),
    cmocka_unit_test_setup_teardown(test_cat_take, setup, teardown),
    cmocka_unit_test_setup_teardown(test_reductions, setup, teardown),
    cmocka_unit_test_setup_teardown(test_matmul, setup, teardown),
    cmocka_unit_test_setup_teardown(test_linear, setup, teardown),
    cmocka_unit_test_setup_teardown(test_copy, setup, teardown),
    cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
