/* test_inplace_ops.c — PyTorch's in-place tensor ops in the torch layer (ltorch.add_, ltorch.exp_,
 * ltorch.fill_, ltorch.copy_, ...): what they record, the errors PyTorch raises for them, and what
 * running them does to the tensors passed in.
 *
 * Recording: ltorch.add_(a, b) is the out-of-place ltorch.add followed by prims.copy_(result, a)
 * (Thunder's functionalized form, as tests/golden/seed004_*.py shows a real Thunder trace of `a += 1`),
 * with a prims.convert_element_type to a's dtype in between when the result's dtype differs; the output
 * has a's dtype and shape. Errors (RuntimeError in PyTorch 1.13, TH_ERR_RUNTIME here) carry PyTorch's
 * wording: "output with shape [1] doesn't match the broadcast shape [2]" and "result type Float can't be
 * cast to the desired output type Long". DCE keeps an in-place op whose output nobody reads.
 *
 * Execution: traces built with the C API are compiled and run on th_tensor inputs; the test checks that
 * the input tensor's own memory holds the values computed by hand here (contiguous and strided
 * destinations, bf16 rounding of an f32 result, intermediates, fill_/zero_/copy_). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/ir.h"
#include "thunder/jit.h"
#include "transforms/transforms.h"

static const th_device cpu = {TH_CPU, 0};

/* ---- helpers --------------------------------------------------------------------------------------- */

static th_arg input(th_trace *tr, const char *name, th_dtype dt, int ndim, const int64_t *shape) {
  th_value *v = th_trace_add_tensor_input(tr, name, dt, cpu, ndim, shape);
  assert_non_null(v);
  return th_arg_value(v);
}

static th_status try_call(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *kw,
                          const th_arg *kwargs, th_arg *out) {
  return th_trace_call(tr, op, n, args, nkw, kw, kwargs, out);
}

static th_arg call(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *kw,
                   const th_arg *kwargs) {
  th_arg out;
  if (try_call(tr, op, n, args, nkw, kw, kwargs, &out) != TH_OK) fail_msg("%s failed: %s", op, th_last_error());
  return out;
}

static th_arg call1(th_trace *tr, const char *op, th_arg a) { return call(tr, op, 1, &a, 0, NULL, NULL); }
static th_arg call2(th_trace *tr, const char *op, th_arg a, th_arg b) {
  th_arg args[2] = {a, b};
  return call(tr, op, 2, args, 0, NULL, NULL);
}

static const th_value *val(th_arg a) {
  assert_int_equal(a.kind, TH_ARG_VALUE);
  return a.u.value;
}

static void check_meta(th_arg a, th_dtype dt, int ndim, const int64_t *shape) {
  const th_value *v = val(a);
  assert_true(v->is_tensor);
  if (v->dtype != dt) fail_msg("dtype %s, expected %s", th_dtype_name(v->dtype), th_dtype_name(dt));
  assert_int_equal(v->ndim, ndim);
  for (int i = 0; i < ndim; i++) assert_int_equal(v->shape[i], shape[i]);
}

static const th_bsym *last_bsym(th_trace *tr) { return th_trace_bsym(tr, th_trace_num_bsyms(tr) - 1); }

/* Checks the subsymbol qualnames of b: a NULL-terminated list. */
static void check_subs(const th_bsym *b, ...) {
  va_list ap;
  va_start(ap, b);
  int i = 0;
  for (const char *name; (name = va_arg(ap, const char *)); i++) {
    const th_bsym *s = th_bsym_subsymbol(b, i);
    if (!s) fail_msg("%s: subsymbol %d missing (expected %s)", th_bsym_qualname(b), i, name);
    if (strcmp(th_bsym_qualname(s), name))
      fail_msg("%s: subsymbol %d is %s, expected %s", th_bsym_qualname(b), i, th_bsym_qualname(s), name);
  }
  va_end(ap);
  if (th_bsym_num_subsymbols(b) != i)
    fail_msg("%s: %d subsymbols, expected %d", th_bsym_qualname(b), th_bsym_num_subsymbols(b), i);
}

/* Expects op to fail with TH_ERR_RUNTIME and exactly `msg`, recording nothing. */
static void expect_runtime_error(th_trace *tr, const char *op, int n, const th_arg *args, const char *msg) {
  int before = th_trace_num_bsyms(tr);
  th_arg out;
  th_status st = try_call(tr, op, n, args, 0, NULL, NULL, &out);
  if (st != TH_ERR_RUNTIME) fail_msg("%s: expected TH_ERR_RUNTIME, got %d (%s)", op, (int)st, th_last_error());
  if (strcmp(th_last_error(), msg)) fail_msg("%s: message\n  '%s'\nexpected\n  '%s'", op, th_last_error(), msg);
  assert_int_equal(th_trace_num_bsyms(tr), before);
}

static void finish(th_trace *tr, th_arg ret) {
  assert_int_equal(th_trace_set_return(tr, ret), TH_OK);
  if (th_trace_verify(tr) != TH_OK) fail_msg("verify: %s", th_last_error());
  th_trace_free(tr);
}

/* Compiles tr (return set by the caller), runs it on `in`, and returns its single output. */
static th_tensor *run1(th_trace *tr, int nin, th_tensor *const *in) {
  th_program *p = NULL;
  if (th_program_compile(tr, NULL, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  int nout = 0;
  th_tensor **outs = NULL;
  if (th_program_run(p, nin, in, &nout, &outs) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, 1);
  th_tensor *o = outs[0];
  free(outs);
  th_program_free(p);
  return o;
}

static th_tensor *f32_tensor(int ndim, const int64_t *shape, const float *vals) {
  th_tensor *t = th_tensor_empty(TH_F32, ndim, shape);
  assert_non_null(t);
  memcpy(th_tensor_data(t), vals, sizeof(float) * (size_t)th_tensor_numel(t));
  return t;
}

/* ---- recording ---------------------------------------------------------------------------------------- */

/* add_(a, b): ltorch.add(a, b, alpha=None) then prims.copy_(t0, a); output like a. */
static void test_add_records_copy(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s23[2] = {2, 3}, s3[1] = {3};
  th_arg a = input(tr, "a", TH_F32, 2, s23), b = input(tr, "b", TH_F32, 1, s3);
  th_arg r = call2(tr, "ltorch.add_", a, b);
  check_meta(r, TH_F32, 2, s23);
  assert_true(val(r) != val(a)); /* a new version of a, not a itself */
  const th_bsym *bs = last_bsym(tr);
  assert_string_equal(th_bsym_qualname(bs), "ltorch.add_");
  check_subs(bs, "ltorch.add", "prims.copy_", NULL);
  const th_bsym *add = th_bsym_subsymbol(bs, 0), *cp = th_bsym_subsymbol(bs, 1);
  /* add's arguments are a and b; copy_'s are (add's result, a) and its output is add_'s */
  assert_ptr_equal(val(add->args[0]), val(a));
  assert_ptr_equal(val(add->args[1]), val(b));
  assert_int_equal(add->args[2].kind, TH_ARG_NONE); /* alpha=None */
  check_meta(th_bsym_output(add), TH_F32, 2, s23);
  assert_ptr_equal(val(cp->args[0]), val(th_bsym_output(add)));
  assert_ptr_equal(val(cp->args[1]), val(a));
  assert_ptr_equal(val(th_bsym_output(cp)), val(r));
  assert_true(bs->sym->tags & TH_TAG_IN_PLACE);
  assert_true(bs->sym->tags & TH_TAG_ELEMENTWISE);
  char *text = th_trace_print(tr, 2);
  assert_non_null(text);
  char want[160];
  snprintf(want, sizeof want, "%s = ltorch.add_(a, b, alpha=None)", th_value_name(val(r)));
  if (!strstr(text, want)) fail_msg("printed:\n%s\nwanted: %s", text, want);
  snprintf(want, sizeof want, "# %s = prims.copy_(%s, a", th_value_name(val(r)),
           th_value_name(val(th_bsym_output(add))));
  if (!strstr(text, want)) fail_msg("printed:\n%s\nwanted: %s", text, want);
  free(text);

  /* keyword arguments are forwarded: sub_ with alpha, div_ with rounding_mode */
  const char *kw_alpha[1] = {"alpha"}, *kw_mode[1] = {"rounding_mode"};
  th_arg two = th_arg_int(2), floor_mode = th_arg_str("floor"), ab[2] = {a, b};
  th_arg r2 = call(tr, "ltorch.sub_", 2, ab, 1, kw_alpha, &two);
  check_subs(last_bsym(tr), "ltorch.sub", "prims.copy_", NULL);
  assert_int_equal(th_bsym_subsymbol(last_bsym(tr), 0)->args[2].kind, TH_ARG_INT);
  assert_int_equal(th_bsym_subsymbol(last_bsym(tr), 0)->args[2].u.i, 2);
  ab[0] = r2;
  th_arg r3 = call(tr, "ltorch.div_", 2, ab, 1, kw_mode, &floor_mode);
  check_subs(last_bsym(tr), "ltorch.div", "prims.copy_", NULL);
  assert_string_equal(th_bsym_subsymbol(last_bsym(tr), 0)->args[2].u.s, "floor");
  check_meta(r3, TH_F32, 2, s23);
  finish(tr, r3);
}

/* bf16 a, f32 b: the sum is f32 (PyTorch's promotion), converted to bf16 before the copy. */
static void test_dtype_conversion(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s4[1] = {4};
  th_arg a = input(tr, "a", TH_BF16, 1, s4), b = input(tr, "b", TH_F32, 1, s4);
  th_arg r = call2(tr, "ltorch.add_", a, b);
  check_meta(r, TH_BF16, 1, s4);
  const th_bsym *bs = last_bsym(tr);
  check_subs(bs, "ltorch.add", "prims.convert_element_type", "prims.copy_", NULL);
  check_meta(th_bsym_output(th_bsym_subsymbol(bs, 0)), TH_F32, 1, s4);
  check_meta(th_bsym_output(th_bsym_subsymbol(bs, 1)), TH_BF16, 1, s4);
  /* an int64 tensor times a bool tensor stays int64: no conversion */
  th_arg i = input(tr, "i", TH_I64, 1, s4), m = input(tr, "m", TH_BOOL, 1, s4);
  th_arg ri = call2(tr, "ltorch.mul_", i, m);
  check_meta(ri, TH_I64, 1, s4);
  check_subs(last_bsym(tr), "ltorch.mul", "prims.copy_", NULL);
  /* comparisons give bool, which casts to anything: a float tensor's eq_ stores 0/1 as float */
  th_arg rf = call2(tr, "ltorch.eq_", b, th_arg_float(0.5));
  check_meta(rf, TH_F32, 1, s4);
  check_subs(last_bsym(tr), "ltorch.eq", "prims.convert_element_type", "prims.copy_", NULL);
  /* an int32 tensor plus an int64 one: int64 result cast down to int32 */
  th_arg i32 = input(tr, "i32", TH_I32, 1, s4);
  check_meta(call2(tr, "ltorch.add_", i32, i), TH_I32, 1, s4);
  th_arg ret[4] = {r, ri, rf, i32};
  finish(tr, th_arg_tuple(4, ret));
}

/* PyTorch's errors (RuntimeError), checked against torch 1.13 (message after the arrow):
 *   torch.zeros(1).add_(torch.ones(2))          -> output with shape [1] doesn't match the broadcast shape [2]
 *   torch.zeros(2, 3).add_(torch.ones(1, 2, 3)) -> output with shape [2, 3] doesn't match ... [1, 2, 3]
 *   torch.tensor(1.).add_(torch.ones(2))        -> output with shape [] doesn't match ... [2]
 *   torch.ones(2, dtype=torch.long).add_(1.5)   -> result type Float can't be cast to the desired output type Long
 *   torch.ones(2, dtype=torch.bool).add_(torch.ones(2, dtype=torch.long))
 *                                               -> result type Long can't be cast to the desired output type Bool
 *   torch.ones(2, dtype=torch.long).exp_()      -> result type Float can't be cast ... Long (also div_(2))
 *   torch.zeros(1, dtype=torch.long).add_(torch.ones(2)) -> the shape error comes first
 *   torch.ones(2).fill_(torch.tensor([1., 2.])) -> fill_ only supports 0-dimension value tensor but got tensor
 *                                                  with 1 dimensions.
 *   torch.zeros(2).copy_(torch.ones(3))         -> The size of tensor a (2) must match the size of tensor b (3) at
 *                                                  non-singleton dimension 0
 *   torch.zeros(2).copy_(torch.ones(1, 2))      -> output with shape [2] doesn't match the broadcast shape [1, 2] */
static void test_errors(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s1[1] = {1}, s2[1] = {2}, s3[1] = {3}, s23[2] = {2, 3}, s123[3] = {1, 2, 3}, s12[2] = {1, 2};
  th_arg z1 = input(tr, "z1", TH_F32, 1, s1), o2 = input(tr, "o2", TH_F32, 1, s2);
  th_arg z23 = input(tr, "z23", TH_F32, 2, s23), o123 = input(tr, "o123", TH_F32, 3, s123);
  th_arg z0 = input(tr, "z0", TH_F32, 0, NULL), l2 = input(tr, "l2", TH_I64, 1, s2);
  th_arg l1 = input(tr, "l1", TH_I64, 1, s1), b2 = input(tr, "b2", TH_BOOL, 1, s2);
  th_arg o3 = input(tr, "o3", TH_F32, 1, s3), o12 = input(tr, "o12", TH_F32, 2, s12);
  th_arg x[2];
  x[0] = z1, x[1] = o2;
  expect_runtime_error(tr, "ltorch.add_", 2, x,
                       "ltorch.add_: output with shape [1] doesn't match the broadcast shape [2]");
  x[0] = z23, x[1] = o123;
  expect_runtime_error(tr, "ltorch.add_", 2, x,
                       "ltorch.add_: output with shape [2, 3] doesn't match the broadcast shape [1, 2, 3]");
  x[0] = z0, x[1] = o2;
  expect_runtime_error(tr, "ltorch.add_", 2, x,
                       "ltorch.add_: output with shape [] doesn't match the broadcast shape [2]");
  x[0] = l2, x[1] = th_arg_float(1.5);
  expect_runtime_error(tr, "ltorch.add_", 2, x,
                       "ltorch.add_: result type Float can't be cast to the desired output type Long");
  x[0] = b2, x[1] = l2;
  expect_runtime_error(tr, "ltorch.add_", 2, x,
                       "ltorch.add_: result type Long can't be cast to the desired output type Bool");
  expect_runtime_error(tr, "ltorch.exp_", 1, &l2,
                       "ltorch.exp_: result type Float can't be cast to the desired output type Long");
  x[0] = l2, x[1] = th_arg_int(2);
  expect_runtime_error(tr, "ltorch.div_", 2, x,
                       "ltorch.div_: result type Float can't be cast to the desired output type Long");
  x[0] = l1, x[1] = o2;
  expect_runtime_error(tr, "ltorch.add_", 2, x,
                       "ltorch.add_: output with shape [1] doesn't match the broadcast shape [2]");
  x[0] = o2, x[1] = o2;
  expect_runtime_error(tr, "ltorch.fill_", 2, x,
                       "ltorch.fill_: fill_ only supports 0-dimension value tensor but got tensor with 1 dimensions.");
  x[0] = o2, x[1] = o3;
  expect_runtime_error(tr, "ltorch.copy_", 2, x,
                       "ltorch.copy_: The size of tensor a (2) must match the size of tensor b (3) at non-singleton "
                       "dimension 0");
  x[0] = o2, x[1] = o12;
  expect_runtime_error(tr, "ltorch.copy_", 2, x,
                       "ltorch.copy_: output with shape [2] doesn't match the broadcast shape [1, 2]");
  /* the out-of-place op's own errors come through, named by it */
  expect_runtime_error(tr, "ltorch.neg_", 1, &b2,
                       "ltorch.neg: Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
                       "to invert a mask, use the `~` or `logical_not()` operator instead.");
  /* a number is not a tensor to modify */
  th_arg out;
  x[0] = th_arg_int(1), x[1] = o2;
  assert_int_equal(try_call(tr, "ltorch.add_", 2, x, 0, NULL, NULL, &out), TH_ERR_TYPE);
  assert_int_equal(th_trace_num_bsyms(tr), 0);
  th_trace_free(tr);
}

/* fill_, zero_ and copy_ record their sources and a copy_ with a's dtype and shape. */
static void test_fill_zero_copy(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s23[2] = {2, 3}, s3[1] = {3};
  th_arg a = input(tr, "a", TH_I64, 2, s23), src = input(tr, "src", TH_F32, 1, s3);
  th_arg s = input(tr, "s", TH_F64, 0, NULL);
  th_arg r = call2(tr, "ltorch.fill_", a, th_arg_float(1.5));
  check_meta(r, TH_I64, 2, s23);
  check_subs(last_bsym(tr), "ltorch.full_like", "prims.copy_", NULL);
  r = call2(tr, "ltorch.fill_", r, s); /* a 0-dim tensor value: converted and expanded */
  check_meta(r, TH_I64, 2, s23);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.broadcast_in_dim", "prims.copy_", NULL);
  r = call1(tr, "ltorch.zero_", r);
  check_meta(r, TH_I64, 2, s23);
  check_subs(last_bsym(tr), "ltorch.zeros_like", "prims.copy_", NULL);
  r = call2(tr, "ltorch.copy_", r, src); /* float into int64: any cast is allowed for copy_ */
  check_meta(r, TH_I64, 2, s23);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.broadcast_in_dim", "prims.copy_", NULL);
  assert_false(last_bsym(tr)->args[2].u.b); /* non_blocking=False bound */
  finish(tr, r);
}

/* The names PyTorch programs use resolve to the in-place ops. */
static void test_aliases(void **state) {
  (void)state;
  static const struct {
    const char *alias, *qualname;
  } cases[] = {
    {"Tensor.add_", "ltorch.add_"},
    {"torch.Tensor.add_", "ltorch.add_"},
    {"Tensor.__iadd__", "ltorch.add_"},
    {"Tensor.__isub__", "ltorch.sub_"},
    {"Tensor.__imul__", "ltorch.mul_"},
    {"Tensor.__itruediv__", "ltorch.true_divide_"},
    {"Tensor.__ifloordiv__", "ltorch.floor_divide_"},
    {"Tensor.__imod__", "ltorch.remainder_"},
    {"Tensor.__ipow__", "ltorch.pow_"},
    {"Tensor.__iand__", "ltorch.bitwise_and_"},
    {"Tensor.__ior__", "ltorch.bitwise_or_"},
    {"Tensor.__ixor__", "ltorch.bitwise_xor_"},
    {"torch.relu_", "ltorch.relu_"},
    {"torch.nn.functional.relu_", "ltorch.relu_"},
    {"Tensor.relu_", "ltorch.relu_"},
    {"Tensor.zero_", "ltorch.zero_"},
    {"torch.Tensor.fill_", "ltorch.fill_"},
    {"Tensor.copy_", "ltorch.copy_"},
    {"torch.exp_", "ltorch.exp_"},
    {"Tensor.clip_", "ltorch.clamp_"},
    {"Tensor.masked_fill_", "ltorch.masked_fill_"},
    {"Tensor.div_", "ltorch.div_"},
    {"ltorch.copy_", "ltorch.copy_"},
    {"prims.copy_", "prims.copy_"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const th_symbol *s = th_symbol_lookup(cases[i].alias);
    if (!s || strcmp(s->qualname, cases[i].qualname))
      fail_msg("%s resolves to %s, expected %s", cases[i].alias, s ? s->qualname : "nothing", cases[i].qualname);
  }
  /* every in-place torch op is tagged, has a decomposition and writes through prims.copy_ */
  int n = 0;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (s->is_prim || !(s->tags & TH_TAG_IN_PLACE)) continue;
    n++;
    assert_non_null(s->decomp);
    assert_int_equal(s->name[strlen(s->name) - 1], '_');
    assert_false(s->tags & (TH_TAG_AC_FP32 | TH_TAG_AC_LOWER | TH_TAG_AC_PROMOTE));
  }
  assert_true(n >= 40);
}

/* DCE keeps an in-place op although nothing reads its output. */
static void test_dce_keeps_inplace(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s4[1] = {4};
  th_arg a = input(tr, "a", TH_F32, 1, s4), b = input(tr, "b", TH_F32, 1, s4);
  (void)call2(tr, "ltorch.mul_", a, b);
  (void)call2(tr, "ltorch.sub", a, b); /* dead */
  th_arg r = call1(tr, "ltorch.neg", b);
  assert_int_equal(th_trace_set_return(tr, r), TH_OK);
  th_trace *d = NULL;
  assert_int_equal(th_dce(tr, &d), TH_OK);
  assert_int_equal(th_trace_num_bsyms(d), 3); /* mul_, neg, return */
  assert_string_equal(th_bsym_qualname(th_trace_bsym(d, 0)), "ltorch.mul_");
  assert_string_equal(th_bsym_qualname(th_trace_bsym(d, 1)), "ltorch.neg");
  th_trace_free(d);
  th_trace_free(tr);
}

/* ---- execution ------------------------------------------------------------------------------------ */

/* a += 2 * b with a broadcast b: the input tensor's own memory is updated and is the output. */
static void test_run_mutates_input(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s23[2] = {2, 3}, s3[1] = {3};
  th_arg a = input(tr, "a", TH_F32, 2, s23), b = input(tr, "b", TH_F32, 1, s3);
  const char *kw[1] = {"alpha"};
  th_arg alpha = th_arg_int(2), ab[2] = {a, b};
  th_arg r = call(tr, "ltorch.add_", 2, ab, 1, kw, &alpha);
  assert_int_equal(th_trace_set_return(tr, r), TH_OK);
  const float av[6] = {1, 2, 3, 4, 5, 6}, bv[3] = {0.5f, -1, 10};
  th_tensor *in[2] = {f32_tensor(2, s23, av), f32_tensor(1, s3, bv)};
  float *adata = th_tensor_data(in[0]);
  th_tensor *o = run1(tr, 2, in);
  const float want[6] = {2, 0, 23, 5, 3, 26}; /* a[i][j] + 2 * b[j] */
  for (int i = 0; i < 6; i++) assert_true(adata[i] == want[i]);
  assert_true(th_tensor_data(o) == (void *)adata);                                       /* the output is a itself */
  for (int i = 0; i < 3; i++) assert_true(((float *)th_tensor_data(in[1]))[i] == bv[i]); /* b untouched */
  /* running again adds again */
  th_tensor_release(o);
  o = run1(tr, 2, in);
  const float want2[6] = {3, -2, 43, 6, 1, 46};
  for (int i = 0; i < 6; i++) assert_true(adata[i] == want2[i]);
  th_tensor_release(o);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
}

/* A transposed (non-contiguous) destination: the writes land at its strided places in the base buffer. */
static void test_run_strided_destination(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, strides[2] = {1, 2};
  th_arg a = input(tr, "a", TH_F32, 2, s23);
  th_arg r = call2(tr, "ltorch.mul_", a, th_arg_float(10.0));
  assert_int_equal(th_trace_set_return(tr, r), TH_OK);
  const float base_v[6] = {0, 1, 2, 3, 4, 5}; /* base (3, 2); a = base.T: a[i][j] = base[j][i] */
  th_tensor *base = f32_tensor(2, s32, base_v);
  th_tensor *at = th_tensor_view(base, 2, s23, strides, 0);
  assert_non_null(at);
  th_tensor *o = run1(tr, 1, &at);
  const float *bd = th_tensor_data(base);
  for (int i = 0; i < 6; i++) assert_true(bd[i] == 10.0f * base_v[i]);
  assert_true(th_tensor_shares_storage(o, base));
  /* the output reads as a (a[0] = [0, 20, 40], a[1] = [10, 30, 50]) */
  const double want[6] = {0, 20, 40, 10, 30, 50};
  for (int i = 0; i < 6; i++) assert_true(th_tensor_get_f64(o, i) == want[i]);
  th_tensor_release(o);
  th_tensor_release(at);
  th_tensor_release(base);
  th_trace_free(tr);
}

/* bf16 a += f32 b: the f32 sum rounds once to bf16 (1 + 3 * 2^-9 is 0.75 of a bf16 ulp above 1: rounds up
 * to 1 + 2^-7; 1 + 2^-9 is a quarter ulp: rounds down to 1). */
static void test_run_bf16_rounding(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s3[1] = {3};
  th_arg a = input(tr, "a", TH_BF16, 1, s3), b = input(tr, "b", TH_F32, 1, s3);
  th_arg r = call2(tr, "ltorch.add_", a, b);
  assert_int_equal(th_trace_set_return(tr, r), TH_OK);
  th_tensor *ta = th_tensor_empty(TH_BF16, 1, s3);
  assert_non_null(ta);
  uint16_t *ad = th_tensor_data(ta);
  ad[0] = ad[1] = 0x3F80; /* 1.0 */
  ad[2] = 0x4000;         /* 2.0 */
  const float bv[3] = {3.0f / 512.0f, 1.0f / 512.0f, -0.5f};
  th_tensor *in[2] = {ta, f32_tensor(1, s3, bv)};
  th_tensor *o = run1(tr, 2, in);
  assert_int_equal(ad[0], 0x3F81); /* 1.0078125 */
  assert_int_equal(ad[1], 0x3F80); /* 1.0 */
  assert_int_equal(ad[2], 0x3FC0); /* 1.5 */
  assert_int_equal(th_tensor_dtype(o), TH_BF16);
  th_tensor_release(o);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
}

/* An intermediate modified in place: t = x * 2; t.sub_(1); t.clamp_(min=0) — on int64. */
static void test_run_intermediate(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s4[1] = {4};
  th_arg x = input(tr, "x", TH_I64, 1, s4);
  th_arg t = call2(tr, "ltorch.mul", x, th_arg_int(2));
  t = call2(tr, "ltorch.sub_", t, th_arg_int(1));
  const char *kw[1] = {"min"};
  th_arg zero = th_arg_int(0);
  t = call(tr, "ltorch.clamp_", 1, &t, 1, kw, &zero);
  check_meta(t, TH_I64, 1, s4);
  assert_int_equal(th_trace_set_return(tr, t), TH_OK);
  th_tensor *tx = th_tensor_empty(TH_I64, 1, s4);
  assert_non_null(tx);
  int64_t *xd = th_tensor_data(tx);
  xd[0] = -3, xd[1] = 0, xd[2] = 1, xd[3] = 7;
  th_tensor *o = run1(tr, 1, &tx);
  const int64_t want[4] = {0, 0, 1, 13}; /* max(2x - 1, 0) */
  for (int i = 0; i < 4; i++) assert_true(((int64_t *)th_tensor_data(o))[i] == want[i]);
  assert_true(xd[0] == -3 && xd[3] == 7); /* x itself is not modified */
  th_tensor_release(o);
  th_tensor_release(tx);
  th_trace_free(tr);
}

/* fill_, zero_ and copy_ write into their input tensors. */
static void test_run_fill_zero_copy(void **state) {
  (void)state;
  const int64_t s23[2] = {2, 3}, s3[1] = {3};
  /* int64 a.fill_(2.9) -> 2 everywhere */
  th_trace *tr = th_trace_new(NULL);
  th_arg a = input(tr, "a", TH_I64, 2, s23);
  assert_int_equal(th_trace_set_return(tr, call2(tr, "ltorch.fill_", a, th_arg_float(2.9))), TH_OK);
  th_tensor *ta = th_tensor_new(TH_I64, 2, s23);
  assert_non_null(ta);
  th_tensor *o = run1(tr, 1, &ta);
  for (int i = 0; i < 6; i++) assert_true(((int64_t *)th_tensor_data(ta))[i] == 2);
  th_tensor_release(o);
  th_trace_free(tr);

  /* a.zero_() */
  tr = th_trace_new(NULL);
  a = input(tr, "a", TH_I64, 2, s23);
  assert_int_equal(th_trace_set_return(tr, call1(tr, "ltorch.zero_", a)), TH_OK);
  o = run1(tr, 1, &ta);
  for (int i = 0; i < 6; i++) assert_true(((int64_t *)th_tensor_data(ta))[i] == 0);
  th_tensor_release(o);
  th_trace_free(tr);

  /* int64 a.copy_(f32 src[3]): broadcast over rows, truncated toward zero */
  tr = th_trace_new(NULL);
  a = input(tr, "a", TH_I64, 2, s23);
  th_arg src = input(tr, "src", TH_F32, 1, s3);
  assert_int_equal(th_trace_set_return(tr, call2(tr, "ltorch.copy_", a, src)), TH_OK);
  const float sv[3] = {1.7f, -2.5f, 40.0f};
  th_tensor *in[2] = {ta, f32_tensor(1, s3, sv)};
  o = run1(tr, 2, in);
  const int64_t want[6] = {1, -2, 40, 1, -2, 40};
  for (int i = 0; i < 6; i++) assert_true(((int64_t *)th_tensor_data(ta))[i] == want[i]);
  th_tensor_release(o);
  th_tensor_release(in[1]);
  th_tensor_release(ta);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_add_records_copy),
    cmocka_unit_test(test_dtype_conversion),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_fill_zero_copy),
    cmocka_unit_test(test_aliases),
    cmocka_unit_test(test_dce_keeps_inplace),
    cmocka_unit_test(test_run_mutates_input),
    cmocka_unit_test(test_run_strided_destination),
    cmocka_unit_test(test_run_bf16_rounding),
    cmocka_unit_test(test_run_intermediate),
    cmocka_unit_test(test_run_fill_zero_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
