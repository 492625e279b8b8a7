/* test_autocast.c — autocast: regions on a trace (th_trace_autocast_push/pop, the hook in recording) and
 * the function transform (th_transform_autocast).
 *
 * References are independent of the implementation: the trace structure Thunder records (seed 000:
 * `prims.linear(x, w, None)` in a bfloat16 region gives top-level converts and a bfloat16 prims.linear;
 * seed 001: `(a @ b) + c` gives convert a, convert b, a bfloat16 matmul, a convert back to float32
 * inside the add; CPU tensors in a cuda region are untouched), PyTorch AMP's
 * policies for the CPU (lower precision, float32, promote; float64 never cast), and numbers computed by
 * hand in bfloat16 (round to nearest even on 8 significant bits). */
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
#include "ops/ops.h"
#include "thunder/thunder.h"

static const th_device cpu = {TH_CPU, 0};
static const th_device cuda0 = {TH_CUDA, 0};

/* ---- helpers --------------------------------------------------------------------------------------- */

static th_trace *new_trace(void) {
  th_trace *tr = th_trace_new(NULL);
  assert_non_null(tr);
  return tr;
}

static th_arg input(th_trace *tr, const char *name, th_dtype dt, th_device dev, int64_t d0, int64_t d1) {
  int64_t shape[2] = {d0, d1};
  th_value *v = th_trace_add_tensor_input(tr, name, dt, dev, d1 < 0 ? 1 : 2, shape);
  assert_non_null(v);
  return th_arg_value(v);
}

static th_arg call(th_trace *tr, const char *op, int n, const th_arg *args) {
  th_arg out;
  th_status st = th_trace_call(tr, op, n, args, 0, NULL, NULL, &out);
  if (st != TH_OK) fail_msg("%s failed: %s", op, th_last_error());
  return out;
}

static th_arg call2(th_trace *tr, const char *op, th_arg a, th_arg b) {
  th_arg args[2] = {a, b};
  return call(tr, op, 2, args);
}

static th_arg call3(th_trace *tr, const char *op, th_arg a, th_arg b, th_arg c) {
  th_arg args[3] = {a, b, c};
  return call(tr, op, 3, args);
}

static void push(th_trace *tr, th_device_type dev, th_dtype dt, bool enabled) {
  assert_int_equal(th_trace_autocast_push(tr, dev, dt, enabled), TH_OK);
}

static void pop(th_trace *tr) { assert_int_equal(th_trace_autocast_pop(tr), TH_OK); }

static th_dtype dtype_of(th_arg a) {
  assert_int_equal(a.kind, TH_ARG_VALUE);
  return th_value_dtype(a.u.value);
}

static const th_bsym *bsym(const th_trace *tr, int i) {
  const th_bsym *b = th_trace_bsym(tr, i);
  assert_non_null(b);
  return b;
}

/* Top-level bsym i is `qualname` and its (single) output has dtype dt. */
static void expect_bsym(const th_trace *tr, int i, const char *qualname, th_dtype dt) {
  const th_bsym *b = bsym(tr, i);
  if (strcmp(th_bsym_qualname(b), qualname)) fail_msg("bsym %d: expected %s, got %s", i, qualname, th_bsym_qualname(b));
  assert_int_equal(dtype_of(th_bsym_output(b)), dt);
}

/* Top-level bsym i is a convert of `from` to dt. */
static void expect_convert(const th_trace *tr, int i, const th_value *from, th_dtype dt) {
  expect_bsym(tr, i, "prims.convert_element_type", dt);
  const th_bsym *b = bsym(tr, i);
  assert_int_equal(b->args[0].kind, TH_ARG_VALUE);
  assert_ptr_equal(b->args[0].u.value, from);
  assert_int_equal(b->args[1].kind, TH_ARG_DTYPE);
  assert_int_equal(b->args[1].u.dtype, dt);
}

static int count_converts(const th_trace *tr) {
  int n = 0;
  for (int i = 0; i < th_trace_num_bsyms(tr); i++)
    n += !strcmp(th_bsym_qualname(bsym(tr, i)), "prims.convert_element_type");
  return n;
}

static void finish_and_verify(th_trace *tr, th_arg ret) {
  assert_int_equal(th_trace_set_return(tr, ret), TH_OK);
  if (th_trace_verify(tr) != TH_OK) fail_msg("verify: %s", th_last_error());
}

/* ---- region path: seed 000, the policies per op ------------------------------------------------------ */

static void test_seed000_prims_linear_in_region(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = input(tr, "x", TH_F32, cpu, 16, 16), w = input(tr, "w", TH_F32, cpu, 16, 16);
  push(tr, TH_CPU, TH_BF16, true);
  th_arg y = call3(tr, "prims.linear", x, w, th_arg_none());
  pop(tr);
  assert_int_equal(th_trace_num_bsyms(tr), 3);
  expect_convert(tr, 0, x.u.value, TH_BF16);
  expect_convert(tr, 1, w.u.value, TH_BF16);
  expect_bsym(tr, 2, "prims.linear", TH_BF16);
  const th_bsym *lin = bsym(tr, 2);
  assert_ptr_equal(lin->args[0].u.value, th_bsym_output(bsym(tr, 0)).u.value);
  assert_ptr_equal(lin->args[1].u.value, th_bsym_output(bsym(tr, 1)).u.value);
  assert_int_equal(lin->args[2].kind, TH_ARG_NONE);
  assert_int_equal(dtype_of(y), TH_BF16);
  finish_and_verify(tr, y);
  th_trace_free(tr);
}

static void test_mixed_dtypes_on_prims(void **state) {
  (void)state;
  /* x bf16, w f32: without autocast prims.linear rejects the mix; in a region only w is converted */
  th_trace *tr = new_trace();
  th_arg x = input(tr, "x", TH_BF16, cpu, 16, 16), w = input(tr, "w", TH_F32, cpu, 16, 16);
  th_arg args[3] = {x, w, th_arg_none()}, out;
  assert_int_equal(th_trace_call(tr, "prims.linear", 3, args, 0, NULL, NULL, &out), TH_ERR_RUNTIME);
  assert_non_null(strstr(th_last_error(), "to be the same"));
  assert_int_equal(th_trace_num_bsyms(tr), 0);
  push(tr, TH_CPU, TH_BF16, true);
  th_arg y = call(tr, "prims.linear", 3, args);
  pop(tr);
  assert_int_equal(th_trace_num_bsyms(tr), 2);
  expect_convert(tr, 0, w.u.value, TH_BF16);
  expect_bsym(tr, 1, "prims.linear", TH_BF16);
  assert_ptr_equal(bsym(tr, 1)->args[0].u.value, x.u.value);
  finish_and_verify(tr, y);
  th_trace_free(tr);
}

static void test_ltorch_linear_bias_and_no_cast_inside_decomposition(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = input(tr, "x", TH_F32, cpu, 8, 16), w = input(tr, "w", TH_F32, cpu, 4, 16);
  th_arg b = input(tr, "b", TH_F32, cpu, 4, -1);
  push(tr, TH_CPU, TH_BF16, true);
  th_arg y = call3(tr, "ltorch.linear", x, w, b);
  th_arg z = call3(tr, "ltorch.linear", x, w, th_arg_none()); /* bias converted only when present */
  pop(tr);
  assert_int_equal(th_trace_num_bsyms(tr), 7);
  expect_convert(tr, 0, x.u.value, TH_BF16);
  expect_convert(tr, 1, w.u.value, TH_BF16);
  expect_convert(tr, 2, b.u.value, TH_BF16);
  expect_bsym(tr, 3, "ltorch.linear", TH_BF16);
  expect_convert(tr, 4, x.u.value, TH_BF16);
  expect_convert(tr, 5, w.u.value, TH_BF16);
  expect_bsym(tr, 6, "ltorch.linear", TH_BF16);
  assert_int_equal(bsym(tr, 6)->args[2].kind, TH_ARG_NONE);
  /* the decomposition is not cast again: no convert among the linear's subsymbols */
  const th_bsym *lin = bsym(tr, 3);
  assert_true(th_bsym_num_subsymbols(lin) > 0);
  for (int i = 0; i < th_bsym_num_subsymbols(lin); i++)
    assert_string_not_equal(th_bsym_qualname(th_bsym_subsymbol(lin, i)), "prims.convert_element_type");
  assert_string_equal(th_bsym_qualname(th_bsym_subsymbol(lin, th_bsym_num_subsymbols(lin) - 1)), "prims.linear");
  int64_t want[2] = {8, 4};
  assert_int_equal(th_value_ndim(y.u.value), 2);
  assert_memory_equal(th_value_shape(y.u.value), want, sizeof want);
  th_arg outs[2] = {y, z};
  finish_and_verify(tr, th_arg_tuple(2, outs));
  th_trace_free(tr);
}

static void test_two_linears_convert_each_time(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = input(tr, "x", TH_F32, cpu, 8, 16), w = input(tr, "w", TH_F32, cpu, 4, 16);
  push(tr, TH_CPU, TH_F16, true);
  th_arg y = call3(tr, "ltorch.linear", x, w, th_arg_none());
  th_arg z = call3(tr, "ltorch.linear", x, w, th_arg_none());
  pop(tr);
  assert_int_equal(th_trace_num_bsyms(tr), 6);
  expect_convert(tr, 0, x.u.value, TH_F16);
  expect_convert(tr, 1, w.u.value, TH_F16);
  expect_bsym(tr, 2, "ltorch.linear", TH_F16);
  expect_convert(tr, 3, x.u.value, TH_F16);
  expect_convert(tr, 4, w.u.value, TH_F16);
  expect_bsym(tr, 5, "ltorch.linear", TH_F16);
  th_arg outs[2] = {y, z};
  finish_and_verify(tr, th_arg_tuple(2, outs));
  th_trace_free(tr);
}

/* ---- region path: devices (a cuda region leaves CPU tensors alone), nesting, disabled regions ------- */

static void test_cpu_tensors_in_cuda_region(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg a = input(tr, "a", TH_F32, cpu, 4, 4), b = input(tr, "b", TH_F32, cpu, 4, 4);
  push(tr, TH_CUDA, TH_BF16, true);
  th_arg y = call2(tr, "ltorch.matmul", a, b);
  pop(tr);
  assert_int_equal(th_trace_num_bsyms(tr), 1);
  expect_bsym(tr, 0, "ltorch.matmul", TH_F32);
  finish_and_verify(tr, y);
  th_trace_free(tr);

  /* CUDA tensors: a cuda region converts them, a cpu region does not */
  tr = new_trace();
  a = input(tr, "a", TH_F32, cuda0, 4, 4);
  b = input(tr, "b", TH_F32, cuda0, 4, 4);
  push(tr, TH_CPU, TH_BF16, true);
  y = call2(tr, "ltorch.matmul", a, b);
  assert_int_equal(dtype_of(y), TH_F32);
  push(tr, TH_CUDA, TH_F16, true);
  th_arg z = call2(tr, "ltorch.matmul", a, b);
  pop(tr);
  pop(tr);
  assert_int_equal(dtype_of(z), TH_F16);
  assert_int_equal(th_trace_num_bsyms(tr), 4);
  expect_bsym(tr, 0, "ltorch.matmul", TH_F32);
  expect_convert(tr, 1, a.u.value, TH_F16);
  expect_convert(tr, 2, b.u.value, TH_F16);
  expect_bsym(tr, 3, "ltorch.matmul", TH_F16);
  th_arg outs[2] = {y, z};
  finish_and_verify(tr, th_arg_tuple(2, outs));
  th_trace_free(tr);
}

static void test_nested_and_disabled_regions(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg a = input(tr, "a", TH_F32, cpu, 2, 2), b = input(tr, "b", TH_F32, cpu, 2, 2);
  th_dtype got[6];
  push(tr, TH_CPU, TH_BF16, true);
  got[0] = dtype_of(call2(tr, "ltorch.matmul", a, b)); /* bf16 */
  push(tr, TH_CPU, TH_BF16, false);                    /* an inner enabled=False region */
  got[1] = dtype_of(call2(tr, "ltorch.matmul", a, b)); /* f32 */
  push(tr, TH_CPU, TH_F16, true);
  got[2] = dtype_of(call2(tr, "ltorch.matmul", a, b)); /* f16 */
  pop(tr);
  got[3] = dtype_of(call2(tr, "ltorch.matmul", a, b)); /* f32 again */
  push(tr, TH_CUDA, TH_F16, false);                    /* another device's region changes nothing */
  pop(tr);
  pop(tr);
  got[4] = dtype_of(call2(tr, "ltorch.matmul", a, b)); /* bf16 again */
  push(tr, TH_CUDA, TH_F16, false);
  got[5] = dtype_of(call2(tr, "ltorch.matmul", a, b)); /* bf16: the cuda region is not this call's */
  pop(tr);
  pop(tr);
  th_arg c = call2(tr, "ltorch.matmul", a, b); /* no region: f32, no converts */
  th_dtype want[6] = {TH_BF16, TH_F32, TH_F16, TH_F32, TH_BF16, TH_BF16};
  for (int i = 0; i < 6; i++) assert_int_equal(got[i], want[i]);
  assert_int_equal(dtype_of(c), TH_F32);
  /* converts: 2 (bf16) + 2 (f16) + 2 (bf16) + 2 (bf16) */
  assert_int_equal(count_converts(tr), 8);
  expect_bsym(tr, th_trace_num_bsyms(tr) - 1, "ltorch.matmul", TH_F32);
  assert_int_equal(th_trace_autocast_pop(tr), TH_ERR_VALUE); /* all popped */
  finish_and_verify(tr, c);
  th_trace_free(tr);
}

static void test_f64_integer_and_bool_left_alone(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg d = input(tr, "d", TH_F64, cpu, 2, 2), e = input(tr, "e", TH_F64, cpu, 2, 2);
  th_arg f = input(tr, "f", TH_F32, cpu, 2, 2);
  th_arg i = input(tr, "i", TH_I64, cpu, 2, 2);
  push(tr, TH_CPU, TH_BF16, true);
  th_arg y = call2(tr, "ltorch.matmul", d, e);
  assert_int_equal(dtype_of(y), TH_F64);
  assert_int_equal(count_converts(tr), 0);
  /* f64 @ f32: the f32 operand is converted, the f64 is not, and the matmul rejects the mix; nothing
   * of the failed call stays in the trace */
  int n = th_trace_num_bsyms(tr);
  th_arg args[2] = {d, f}, out;
  assert_int_not_equal(th_trace_call(tr, "ltorch.matmul", 2, args, 0, NULL, NULL, &out), TH_OK);
  assert_int_equal(th_trace_num_bsyms(tr), n);
  /* integer tensors are not cast by the promote rule */
  th_arg list[2] = {i, f};
  th_arg cat_args[1] = {th_arg_list(2, list)};
  th_arg c = call(tr, "ltorch.cat", 1, cat_args);
  assert_int_equal(dtype_of(c), TH_F32);
  assert_int_equal(count_converts(tr), 0);
  pop(tr);
  th_arg outs[2] = {y, c};
  finish_and_verify(tr, th_arg_tuple(2, outs));
  th_trace_free(tr);
}

/* ---- the float32 and promote policies ------------------------------------------------------------- */

static void test_fp32_policy_cpu_and_cuda(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = input(tr, "x", TH_BF16, cpu, 4, 4), g = input(tr, "g", TH_BF16, cuda0, 4, 4);
  th_arg h = input(tr, "h", TH_F16, cpu, 4, 4);
  push(tr, TH_CPU, TH_BF16, true);
  push(tr, TH_CUDA, TH_BF16, true);
  /* prod is on PyTorch's CPU float32 list: bf16 -> f32 (and f16 -> f32) */
  th_arg p = call(tr, "ltorch.prod", 1, &x);
  assert_int_equal(dtype_of(p), TH_F32);
  expect_convert(tr, 0, x.u.value, TH_F32);
  expect_bsym(tr, 1, "ltorch.prod", TH_F32);
  th_arg ph = call(tr, "ltorch.prod", 1, &h);
  assert_int_equal(dtype_of(ph), TH_F32);
  /* exp is on CUDA's list only: a CPU tensor stays bf16, a CUDA one runs in f32 */
  int n = th_trace_num_bsyms(tr);
  th_arg ex = call(tr, "ltorch.exp", 1, &x);
  assert_int_equal(dtype_of(ex), TH_BF16);
  assert_int_equal(th_trace_num_bsyms(tr), n + 1);
  th_arg eg = call(tr, "ltorch.exp", 1, &g);
  assert_int_equal(dtype_of(eg), TH_F32);
  expect_convert(tr, n + 1, g.u.value, TH_F32);
  /* an explicit dtype= is not eligible (sum on CUDA, float32 list) */
  n = th_trace_num_bsyms(tr);
  const char *kw[1] = {"dtype"};
  th_arg kwv[1] = {th_arg_dtype(TH_BF16)}, s1;
  assert_int_equal(th_trace_call(tr, "ltorch.sum", 1, &g, 1, kw, kwv, &s1), TH_OK);
  assert_int_equal(dtype_of(s1), TH_BF16);
  assert_int_equal(th_trace_num_bsyms(tr), n + 1);
  th_arg s2 = call(tr, "ltorch.sum", 1, &g);
  assert_int_equal(dtype_of(s2), TH_F32);
  /* a loss: nll_loss on bf16 log-probabilities runs in f32 (CPU list) */
  int64_t tshape[1] = {4};
  th_value *t = th_trace_add_tensor_input(tr, "t", TH_I64, cpu, 1, tshape);
  assert_non_null(t);
  th_arg nl = call2(tr, "ltorch.nll_loss", x, th_arg_value(t));
  assert_int_equal(dtype_of(nl), TH_F32);
  pop(tr);
  pop(tr);
  th_arg outs[7] = {p, ph, ex, eg, s1, s2, nl};
  finish_and_verify(tr, th_arg_tuple(7, outs));
  th_trace_free(tr);
}

static void test_promote_policy(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg a = input(tr, "a", TH_BF16, cpu, 8, -1), b = input(tr, "b", TH_F32, cpu, 8, -1);
  th_arg c = input(tr, "c", TH_BF16, cpu, 8, -1), d = input(tr, "d", TH_F64, cpu, 8, -1);
  push(tr, TH_CPU, TH_BF16, true);
  th_arg l1[2] = {a, b};
  th_arg args1[1] = {th_arg_list(2, l1)};
  th_arg y = call(tr, "ltorch.cat", 1, args1);
  assert_int_equal(dtype_of(y), TH_F32);
  assert_int_equal(th_trace_num_bsyms(tr), 2);
  expect_convert(tr, 0, a.u.value, TH_F32); /* at the top level, before the cat */
  expect_bsym(tr, 1, "ltorch.cat", TH_F32);
  /* the caller's list is not modified */
  assert_ptr_equal(l1[0].u.value, a.u.value);
  th_arg l2[2] = {a, c};
  th_arg args2[1] = {th_arg_list(2, l2)};
  th_arg z = call(tr, "ltorch.stack", 1, args2);
  assert_int_equal(dtype_of(z), TH_BF16);
  assert_int_equal(th_trace_num_bsyms(tr), 3);
  /* float64 is ignored by the promote policy (it wins by type promotion inside the op) */
  th_arg l3[3] = {a, b, d};
  th_arg args3[1] = {th_arg_list(3, l3)};
  th_arg w = call(tr, "ltorch.cat", 1, args3);
  assert_int_equal(dtype_of(w), TH_F64);
  expect_convert(tr, 3, a.u.value, TH_F32);
  expect_bsym(tr, 4, "ltorch.cat", TH_F64);
  pop(tr);
  th_arg outs[3] = {y, z, w};
  finish_and_verify(tr, th_arg_tuple(3, outs));
  th_trace_free(tr);
}

static void test_lower_policy_other_ops(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  int64_t s3[3] = {2, 3, 3};
  th_value *p = th_trace_add_tensor_input(tr, "p", TH_F32, cpu, 3, s3);
  th_value *q = th_trace_add_tensor_input(tr, "q", TH_F16, cpu, 3, s3);
  th_value *r = th_trace_add_tensor_input(tr, "r", TH_F32, cpu, 3, s3);
  push(tr, TH_CPU, TH_BF16, true);
  /* f16 tensors go to the autocast dtype too */
  th_arg y = call2(tr, "ltorch.bmm", th_arg_value(p), th_arg_value(q));
  assert_int_equal(dtype_of(y), TH_BF16);
  expect_convert(tr, 0, p, TH_BF16);
  expect_convert(tr, 1, q, TH_BF16);
  th_arg z = call3(tr, "ltorch.baddbmm", th_arg_value(r), th_arg_value(p), th_arg_value(q));
  assert_int_equal(dtype_of(z), TH_BF16);
  assert_int_equal(count_converts(tr), 5);
  th_arg u = call3(tr, "ltorch.scaled_dot_product_attention", th_arg_value(p), th_arg_value(q), th_arg_value(r));
  assert_int_equal(dtype_of(u), TH_BF16);
  pop(tr);
  th_arg outs[3] = {y, z, u};
  finish_and_verify(tr, th_arg_tuple(3, outs));
  th_trace_free(tr);
}

/* ---- a symbol with its own rule (what a user-defined executor's op would carry) -------------------- */

static int custom_calls;

static th_status custom_rule(th_trace *tr, const th_symbol *sym, th_arg *args, th_dtype dtype,
                             th_device_type device_type) {
  (void)sym;
  custom_calls++;
  /* cast only the first argument, from any float dtype, to the region's dtype */
  return th_autocast_cast(tr, &args[0], device_type, ~0u, dtype);
}

static void test_symbol_with_its_own_rule(void **state) {
  (void)state;
  static th_symbol my_neg, my_add;
  my_neg = *th_symbol_lookup("ltorch.neg"); /* no policy of its own */
  my_neg.autocast = custom_rule;
  my_add = *th_symbol_lookup("ltorch.add");
  my_add.autocast = custom_rule;
  assert_null(th_autocast_rule(th_symbol_lookup("ltorch.neg")));
  assert_ptr_equal(th_autocast_rule(&my_neg), custom_rule);
  th_trace *tr = new_trace();
  th_arg x = input(tr, "x", TH_F64, cpu, 2, 2), y = input(tr, "y", TH_F32, cpu, 2, 2);
  th_arg out;
  custom_calls = 0;
  assert_int_equal(th_call_kw(tr, &my_neg, 1, &x, 0, NULL, NULL, &out), TH_OK); /* no region: plain */
  assert_int_equal(custom_calls, 0);
  assert_int_equal(dtype_of(out), TH_F64);
  push(tr, TH_CPU, TH_F16, true);
  assert_int_equal(th_call_kw(tr, &my_neg, 1, &x, 0, NULL, NULL, &out), TH_OK);
  assert_int_equal(custom_calls, 1);
  assert_int_equal(dtype_of(out), TH_F16); /* this rule casts even float64 */
  expect_convert(tr, 1, x.u.value, TH_F16);
  th_arg args[2] = {y, x}, o2;
  assert_int_equal(th_call_kw(tr, &my_add, 2, args, 0, NULL, NULL, &o2), TH_OK);
  assert_int_equal(custom_calls, 2);
  assert_int_equal(dtype_of(o2), TH_F64); /* f16 + f64 -> f64 by promotion */
  pop(tr);
  th_arg outs[2] = {out, o2};
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(2, outs)), TH_OK);
  th_trace_free(tr);
}

/* ---- errors --------------------------------------------------------------------------------------- */

static void test_region_errors(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  assert_int_equal(th_trace_autocast_push(tr, TH_CPU, TH_F32, true), TH_ERR_VALUE);
  assert_string_equal(th_last_error(), "autocast: `dtype` is expected to be either float16 or bfloat16, but float32");
  assert_int_equal(th_trace_autocast_push(tr, TH_CPU, TH_F64, true), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "but float64"));
  assert_int_equal(th_trace_autocast_push(tr, TH_CUDA, TH_F8E4M3FN, true), TH_ERR_VALUE);
  assert_int_equal(th_trace_autocast_push(tr, TH_CPU, TH_DTYPE_COUNT, true), TH_ERR_VALUE);
  assert_int_equal(th_trace_autocast_push(tr, TH_META, TH_BF16, true), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "device_type"));
  assert_int_equal(th_trace_autocast_push(tr, (th_device_type)42, TH_BF16, true), TH_ERR_VALUE);
  assert_int_equal(th_trace_autocast_push(NULL, TH_CPU, TH_BF16, true), TH_ERR_VALUE);
  assert_int_equal(th_trace_autocast_pop(tr), TH_ERR_VALUE); /* nothing was pushed */
  assert_int_equal(th_trace_autocast_pop(NULL), TH_ERR_VALUE);
  /* a disabled region ignores its dtype (PyTorch's default dtypes come with enabled=False) */
  push(tr, TH_CPU, TH_F32, false);
  pop(tr);
  assert_int_equal(th_trace_autocast_pop(tr), TH_ERR_VALUE);
  /* many pushes and pops: entries are reused */
  for (int i = 0; i < 1000; i++) {
    push(tr, TH_CPU, TH_BF16, true);
    push(tr, TH_CUDA, TH_F16, i & 1);
    pop(tr);
    pop(tr);
  }
  th_trace_free(tr);
}

static void test_region_push_oom(void **state) {
  (void)state;
  for (long n = 1; n < 200; n++) {
    th_trace *tr = new_trace();
    th_arg x = input(tr, "x", TH_F32, cpu, 4, 4), w = input(tr, "w", TH_F32, cpu, 4, 4);
    th_alloc_fail_after(n);
    th_status st = th_trace_autocast_push(tr, TH_CPU, TH_BF16, true);
    th_arg args[3] = {x, w, th_arg_none()}, out;
    if (st == TH_OK) st = th_trace_call(tr, "prims.linear", 3, args, 0, NULL, NULL, &out);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      assert_int_equal(th_trace_num_bsyms(tr), 3);
      th_trace_free(tr);
      return;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    assert_int_equal(th_trace_num_bsyms(tr), 0); /* the converts of a failed call are dropped */
    th_trace_free(tr);
  }
  fail_msg("never succeeded");
}

/* ---- the function path (seed 001) -------------------------------------------------------------------- */

/* h(a, b, c) = (a @ b) + c on f32 [2, 2], recorded without autocast. */
static th_trace *seed001_trace(void) {
  th_trace *tr = th_trace_new("computation");
  assert_non_null(tr);
  th_arg a = input(tr, "a", TH_F32, cpu, 2, 2), b = input(tr, "b", TH_F32, cpu, 2, 2);
  th_arg c = input(tr, "c", TH_F32, cpu, 2, 2);
  th_arg m = call2(tr, "ltorch.matmul", a, b);
  th_arg s = call2(tr, "ltorch.add", m, c);
  finish_and_verify(tr, s);
  return tr;
}

static void expect_seed001_structure(const th_trace *ac) {
  th_value *a = th_trace_input(ac, 0), *b = th_trace_input(ac, 1), *c = th_trace_input(ac, 2);
  assert_int_equal(th_trace_num_bsyms(ac), 5);
  expect_convert(ac, 0, a, TH_BF16);
  expect_convert(ac, 1, b, TH_BF16);
  expect_bsym(ac, 2, "ltorch.matmul", TH_BF16);
  expect_bsym(ac, 3, "ltorch.add", TH_F32);
  const th_bsym *add = bsym(ac, 3);
  assert_ptr_equal(add->args[0].u.value, th_bsym_output(bsym(ac, 2)).u.value);
  assert_ptr_equal(add->args[1].u.value, c);
  /* the add's type promotion: convert the bf16 product back to f32, then prims.add */
  assert_int_equal(th_bsym_num_subsymbols(add), 2);
  const th_bsym *s0 = th_bsym_subsymbol(add, 0), *s1 = th_bsym_subsymbol(add, 1);
  assert_string_equal(th_bsym_qualname(s0), "prims.convert_element_type");
  assert_int_equal(dtype_of(th_bsym_output(s0)), TH_F32);
  assert_string_equal(th_bsym_qualname(s1), "prims.add");
  assert_string_equal(th_bsym_qualname(bsym(ac, 4)), "prims.python_return");
  th_arg ret = th_trace_output(ac);
  assert_int_equal(dtype_of(ret), TH_F32);
  assert_ptr_equal(ret.u.value, th_bsym_output(add).u.value);
}

static void test_function_path_seed001(void **state) {
  (void)state;
  th_trace *tr = seed001_trace();
  char *before = th_trace_print(tr, -1);
  th_trace *ac = NULL;
  assert_int_equal(th_transform_autocast(tr, TH_BF16, &ac), TH_OK);
  assert_non_null(ac);
  if (th_trace_verify(ac) != TH_OK) fail_msg("verify: %s", th_last_error());
  expect_seed001_structure(ac);
  char *text = th_trace_print(ac, -1);
  assert_non_null(strstr(text, "# Constructed by Autocast (took "));
  assert_non_null(strstr(text, " milliseconds)\n"));
  /* the input trace is left as it was */
  char *after = th_trace_print(tr, -1);
  assert_string_equal(before, after);
  assert_int_equal(th_trace_verify(tr), TH_OK);
  /* the printed result parses back and verifies (every proxy's dtype right) */
  th_trace *parsed = NULL;
  assert_int_equal(th_trace_parse(text, "ac.py", &parsed), TH_OK);
  assert_int_equal(th_trace_verify(parsed), TH_OK);
  /* the traces are independent: free the original first */
  th_trace_free(tr);
  assert_int_equal(th_trace_verify(ac), TH_OK);
  /* DCE over the result keeps everything */
  th_trace *d = NULL;
  assert_int_equal(th_transform_dce(ac, &d), TH_OK);
  assert_int_equal(th_trace_num_bsyms(d), 5);
  free(before);
  free(after);
  free(text);
  th_trace_free(parsed);
  th_trace_free(d);
  th_trace_free(ac);
}

static void test_function_path_equals_region_path(void **state) {
  (void)state;
  /* the region path on the same program */
  th_trace *rt = th_trace_new("computation");
  th_arg a = input(rt, "a", TH_F32, cpu, 2, 2), b = input(rt, "b", TH_F32, cpu, 2, 2);
  th_arg c = input(rt, "c", TH_F32, cpu, 2, 2);
  push(rt, TH_CPU, TH_BF16, true);
  th_arg s = call2(rt, "ltorch.add", call2(rt, "ltorch.matmul", a, b), c);
  pop(rt);
  finish_and_verify(rt, s);
  expect_seed001_structure(rt);
  th_trace_free(rt);
}

static void test_function_path_f_and_g(void **state) {
  (void)state;
  /* f = a @ (b + c) -> bf16; g = a + b - c -> f32 with no converts */
  th_trace *f = new_trace();
  th_arg a = input(f, "a", TH_F32, cpu, 2, 2), b = input(f, "b", TH_F32, cpu, 2, 2);
  th_arg c = input(f, "c", TH_F32, cpu, 2, 2);
  finish_and_verify(f, call2(f, "ltorch.matmul", a, call2(f, "ltorch.add", b, c)));
  th_trace *g = new_trace();
  a = input(g, "a", TH_F32, cpu, 2, 2);
  b = input(g, "b", TH_F32, cpu, 2, 2);
  c = input(g, "c", TH_F32, cpu, 2, 2);
  finish_and_verify(g, call2(g, "ltorch.sub", call2(g, "ltorch.add", a, b), c));
  th_trace *fa = NULL, *ga = NULL;
  assert_int_equal(th_transform_autocast(f, TH_BF16, &fa), TH_OK);
  assert_int_equal(th_transform_autocast(g, TH_BF16, &ga), TH_OK);
  assert_int_equal(th_trace_verify(fa), TH_OK);
  assert_int_equal(th_trace_verify(ga), TH_OK);
  assert_int_equal(dtype_of(th_trace_output(fa)), TH_BF16);
  assert_int_equal(count_converts(fa), 2);
  assert_int_equal(dtype_of(th_trace_output(ga)), TH_F32);
  assert_int_equal(count_converts(ga), 0);
  assert_int_equal(th_trace_num_bsyms(ga), th_trace_num_bsyms(g));
  th_trace_free(f);
  th_trace_free(g);
  th_trace_free(fa);
  th_trace_free(ga);
}

static void test_function_path_errors(void **state) {
  (void)state;
  th_trace *tr = seed001_trace();
  th_trace *ac = (th_trace *)0x1;
  assert_int_equal(th_transform_autocast(tr, TH_F32, &ac), TH_ERR_VALUE);
  assert_string_equal(th_last_error(), "autocast: `dtype` is expected to be either float16 or bfloat16, but float32");
  assert_ptr_equal(ac, (th_trace *)0x1); /* *out untouched on error */
  assert_int_equal(th_transform_autocast(tr, TH_F64, &ac), TH_ERR_VALUE);
  assert_int_equal(th_transform_autocast(tr, TH_DTYPE_COUNT, &ac), TH_ERR_VALUE);
  assert_int_equal(th_transform_autocast(NULL, TH_BF16, &ac), TH_ERR_VALUE);
  assert_int_equal(th_transform_autocast(tr, TH_BF16, NULL), TH_ERR_VALUE);
  th_trace_free(tr);

  /* float64 operands stay float64 */
  tr = new_trace();
  th_arg d = input(tr, "d", TH_F64, cpu, 2, 2);
  finish_and_verify(tr, call2(tr, "ltorch.matmul", d, d));
  assert_int_equal(th_transform_autocast(tr, TH_F16, &ac), TH_OK);
  assert_int_equal(count_converts(ac), 0);
  assert_int_equal(dtype_of(th_trace_output(ac)), TH_F64);
  th_trace_free(ac);
  th_trace_free(tr);
}

static void test_function_path_oom(void **state) {
  (void)state;
  th_trace *tr = seed001_trace();
  for (long n = 1; n < 500; n++) {
    th_trace *ac = NULL;
    th_alloc_fail_after(n);
    th_status st = th_transform_autocast(tr, TH_BF16, &ac);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      expect_seed001_structure(ac);
      th_trace_free(ac);
      th_trace_free(tr);
      return;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    assert_null(ac);
  }
  fail_msg("never succeeded");
}

static void test_function_path_keeps_comments_and_parsed_ops(void **state) {
  (void)state;
  const char *text = "def computation(x, w, b):\n"
                     "  # x: \"cpu f32[8, 16]\"\n"
                     "  # w: \"cpu f32[4, 16]\"\n"
                     "  # b: \"cpu f32[4]\"\n"
                     "  t0 = torch.nn.functional.linear(x, w, b)  # t0: \"cpu f32[8, 4]\"\n"
                     "  t1 = ltorch.softmax(t0, -1, dtype=None)  # t1: \"cpu f32[8, 4]\"\n"
                     "  t2 = ltorch.mse_loss(t1, t0)  # t2: \"cpu f32[]\"\n"
                     "  return (t1, t2)\n";
  th_trace *tr = NULL;
  assert_int_equal(th_trace_parse(text, "p.py", &tr), TH_OK);
  th_trace *ac = NULL;
  if (th_transform_autocast(tr, TH_BF16, &ac) != TH_OK) fail_msg("%s", th_last_error());
  assert_int_equal(th_trace_verify(ac), TH_OK);
  /* the alias torch.nn.functional.linear parsed as ltorch.linear, which has the lower-precision policy */
  expect_convert(ac, 0, th_trace_input(ac, 0), TH_BF16);
  expect_convert(ac, 1, th_trace_input(ac, 1), TH_BF16);
  expect_convert(ac, 2, th_trace_input(ac, 2), TH_BF16);
  expect_bsym(ac, 3, "ltorch.linear", TH_BF16);
  expect_bsym(ac, 4, "ltorch.softmax", TH_BF16); /* not on the CPU float32 list */
  /* mse_loss is: both bf16 operands to f32 */
  expect_convert(ac, 5, th_bsym_output(bsym(ac, 4)).u.value, TH_F32);
  expect_convert(ac, 6, th_bsym_output(bsym(ac, 3)).u.value, TH_F32);
  expect_bsym(ac, 7, "ltorch.mse_loss", TH_F32);
  th_arg ret = th_trace_output(ac);
  assert_int_equal(ret.kind, TH_ARG_TUPLE);
  assert_int_equal(dtype_of(ret.u.seq.items[0]), TH_BF16);
  assert_int_equal(dtype_of(ret.u.seq.items[1]), TH_F32);
  th_trace_free(tr);
  th_trace_free(ac);

  /* comments (source lines) are kept in place */
  tr = new_trace();
  th_arg a = input(tr, "a", TH_F32, cpu, 2, 2);
  assert_int_equal(th_trace_add_comment(tr, "/tmp/model.py:3: \ty = a @ a"), TH_OK);
  finish_and_verify(tr, call2(tr, "ltorch.matmul", a, a));
  assert_int_equal(th_transform_autocast(tr, TH_BF16, &ac), TH_OK);
  assert_int_equal(th_trace_num_bsyms(ac), 5);
  assert_string_equal(th_bsym_qualname(bsym(ac, 0)), "prims.comment");
  assert_string_equal(bsym(ac, 0)->args[0].u.s, "/tmp/model.py:3: \ty = a @ a");
  expect_convert(ac, 1, a.u.value, TH_BF16);
  expect_convert(ac, 2, a.u.value, TH_BF16);
  expect_bsym(ac, 3, "ltorch.matmul", TH_BF16);
  th_trace_free(tr);
  th_trace_free(ac);
}

static void test_function_path_fusion_region(void **state) {
  (void)state;
  /* an unknown executor op with its decomposition printed underneath becomes a region: copied when
   * none of its inputs changed, refused when one did */
  const char *ok_text = "def computation(x, y):\n"
                        "  # x: \"cpu f32[2, 2]\"\n"
                        "  # y: \"cpu f32[2, 2]\"\n"
                        "  [t0] = nvFusion0(x, y)\n"
                        "    # t0 = prims.add(x, y)  # t0: \"cpu f32[2, 2]\"\n"
                        "  t1 = ltorch.matmul(t0, y)  # t1: \"cpu f32[2, 2]\"\n"
                        "  return t1\n";
  th_trace *tr = NULL, *ac = NULL;
  assert_int_equal(th_trace_parse(ok_text, "ok.py", &tr), TH_OK);
  if (th_transform_autocast(tr, TH_BF16, &ac) != TH_OK) fail_msg("%s", th_last_error());
  assert_int_equal(th_trace_verify(ac), TH_OK);
  assert_string_equal(th_bsym_qualname(bsym(ac, 0)), "nvFusion0");
  assert_int_equal(dtype_of(th_trace_output(ac)), TH_BF16);
  th_trace_free(ac);
  th_trace_free(tr);
  const char *bad_text = "def computation(x, y):\n"
                         "  # x: \"cpu f32[2, 2]\"\n"
                         "  # y: \"cpu f32[2, 2]\"\n"
                         "  t0 = ltorch.matmul(x, y)  # t0: \"cpu f32[2, 2]\"\n"
                         "  [t1] = nvFusion0(t0, y)\n"
                         "    # t1 = prims.add(t0, y)  # t1: \"cpu f32[2, 2]\"\n"
                         "  return t1\n";
  assert_int_equal(th_trace_parse(bad_text, "bad.py", &tr), TH_OK);
  ac = NULL;
  assert_int_equal(th_transform_autocast(tr, TH_BF16, &ac), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(strstr(th_last_error(), "nvFusion0"));
  assert_null(ac);
  th_trace_free(tr);
}

/* ---- execution: hand-computed bfloat16 values -------------------------------------------------------- */

static th_tensor *tensor2x2(const float v[4]) {
  int64_t shape[2] = {2, 2};
  th_tensor *t = th_tensor_new(TH_F32, 2, shape);
  assert_non_null(t);
  memcpy(th_tensor_data(t), v, sizeof(float) * 4);
  return t;
}

static void run_seed001(const th_trace *tr, const float expect[4]) {
  th_program *p = NULL;
  if (th_program_compile(tr, NULL, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  /* a = [[1 + 3/256, 1], [2, 3]]: bf16(1 + 3/256) = 1.015625 (a tie, to even)
   * b = [[1, 0], [1/256, 1]] (exact in bf16), c = [[0.5, 0.25], [0, 0]]
   * bf16(a) @ b in f32 = [[1.015625 + 1/256, 1], [2 + 3/256, 3]] = [[1.01953125, 1], [2.01171875, 3]]
   * rounded to bf16: 1.01953125 = 1 + 5/256 is a tie between 1 + 4/256 (even) and 1 + 6/256 -> 1.015625;
   * 2.01171875 lies 3/4 of the way from 2 to 2.015625 (spacing 1/64) -> 2.015625.
   * + c in f32: [[1.515625, 1.25], [2.015625, 3]] (without autocast [1][0] would be 2.01171875). */
  const float av[4] = {1.01171875f, 1.0f, 2.0f, 3.0f}, bv[4] = {1.0f, 0.0f, 0.00390625f, 1.0f};
  const float cv[4] = {0.5f, 0.25f, 0.0f, 0.0f};
  th_tensor *in[3] = {tensor2x2(av), tensor2x2(bv), tensor2x2(cv)};
  int nout = 0;
  th_tensor **out = NULL;
  if (th_program_run(p, 3, in, &nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, 1);
  assert_int_equal(th_tensor_dtype(out[0]), TH_F32);
  for (int i = 0; i < 4; i++)
    if (th_tensor_get_f64(out[0], i) != (double)expect[i])
      fail_msg("element %d: expected %.9g, got %.9g", i, (double)expect[i], th_tensor_get_f64(out[0], i));
  for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
  th_tensor_release(out[0]);
  free(out);
  th_program_free(p);
}

static void test_execution_hand_computed_bf16(void **state) {
  (void)state;
  th_trace *tr = seed001_trace();
  const float plain[4] = {1.515625f, 1.25f, 2.01171875f, 3.0f};
  const float bf16[4] = {1.515625f, 1.25f, 2.015625f, 3.0f};
  run_seed001(tr, plain);
  th_trace *ac = NULL;
  assert_int_equal(th_transform_autocast(tr, TH_BF16, &ac), TH_OK);
  run_seed001(ac, bf16);
  /* the region path runs the same */
  th_trace *rt = th_trace_new("computation");
  th_arg a = input(rt, "a", TH_F32, cpu, 2, 2), b = input(rt, "b", TH_F32, cpu, 2, 2);
  th_arg c = input(rt, "c", TH_F32, cpu, 2, 2);
  push(rt, TH_CPU, TH_BF16, true);
  th_arg s = call2(rt, "ltorch.add", call2(rt, "ltorch.matmul", a, b), c);
  pop(rt);
  finish_and_verify(rt, s);
  run_seed001(rt, bf16);
  /* only the eager executor (its own bf16 matmul kernel) */
  th_compile_options o = {0};
  const char *eager[1] = {"eager"};
  o.executors = eager;
  o.nexecutors = 1;
  th_program *p = NULL;
  assert_int_equal(th_program_compile(ac, &o, &p), TH_OK);
  const float av[4] = {1.01171875f, 1.0f, 2.0f, 3.0f}, bv[4] = {1.0f, 0.0f, 0.00390625f, 1.0f};
  const float cv[4] = {0.5f, 0.25f, 0.0f, 0.0f};
  th_tensor *in[3] = {tensor2x2(av), tensor2x2(bv), tensor2x2(cv)};
  int nout = 0;
  th_tensor **out = NULL;
  assert_int_equal(th_program_run(p, 3, in, &nout, &out), TH_OK);
  for (int i = 0; i < 4; i++) assert_true(th_tensor_get_f64(out[0], i) == (double)bf16[i]);
  for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
  th_tensor_release(out[0]);
  free(out);
  th_program_free(p);
  th_trace_free(rt);
  th_trace_free(ac);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_seed000_prims_linear_in_region),
    cmocka_unit_test(test_mixed_dtypes_on_prims),
    cmocka_unit_test(test_ltorch_linear_bias_and_no_cast_inside_decomposition),
    cmocka_unit_test(test_two_linears_convert_each_time),
    cmocka_unit_test(test_cpu_tensors_in_cuda_region),
    cmocka_unit_test(test_nested_and_disabled_regions),
    cmocka_unit_test(test_f64_integer_and_bool_left_alone),
    cmocka_unit_test(test_fp32_policy_cpu_and_cuda),
    cmocka_unit_test(test_promote_policy),
    cmocka_unit_test(test_lower_policy_other_ops),
    cmocka_unit_test(test_symbol_with_its_own_rule),
    cmocka_unit_test(test_region_errors),
    cmocka_unit_test(test_region_push_oom),
    cmocka_unit_test(test_function_path_seed001),
    cmocka_unit_test(test_function_path_equals_region_path),
    cmocka_unit_test(test_function_path_f_and_g),
    cmocka_unit_test(test_function_path_errors),
    cmocka_unit_test(test_function_path_oom),
    cmocka_unit_test(test_function_path_keeps_comments_and_parsed_ops),
    cmocka_unit_test(test_function_path_fusion_region),
    cmocka_unit_test(test_execution_hand_computed_bf16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
