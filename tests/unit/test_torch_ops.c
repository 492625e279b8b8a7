/* test_torch_ops.c — the torch-level ops (ltorch.*): the traces they record.
 *
 * Each test records calls into a fresh trace and checks the output metadata (dtype, shape) and, where
 * the decomposition is the point, the subsymbols (qualified names and their output dtypes): Thunder's
 * type promotion (bf16 + bf16 = convert, convert, prims.add, convert; bf16 * 2.0 -> bf16;
 * i64 + 2.5 -> f32; f32[4] + f64[] -> f32; bf16 + f16 -> f32), the printed `ltorch.mul(2, x)`, broadcasting, the matmul shape paths, reshape's -1, indexing, reductions, the
 * nn ops of a GPT-2 and a LLaMA block, and the error messages. Every trace that records successfully is
 * also passed through th_trace_verify, which re-runs each bsym's meta/decomposition. Numerical
 * agreement with PyTorch is tested separately, against the eager executor. */
#define _POSIX_C_SOURCE 200809L /* setenv */
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
#include "ops/torch/torch_util.h"

/* ---- helpers --------------------------------------------------------------------------------------- */

static const th_device cpu = {TH_CPU, 0};
static const th_device cuda0 = {TH_CUDA, 0};

static th_trace *new_trace(void) {
  th_trace *tr = th_trace_new(NULL);
  assert_non_null(tr);
  return tr;
}

/* A tensor input; shape given as up to 8 extents terminated by -1. */
static th_value *input_on(th_trace *tr, const char *name, th_dtype dt, th_device dev, int ndim, const int64_t *shape) {
  th_value *v = th_trace_add_tensor_input(tr, name, dt, dev, ndim, shape);
  assert_non_null(v);
  return v;
}

static th_arg tensor(th_trace *tr, const char *name, th_dtype dt, int ndim, ...) {
  int64_t shape[TH_MAX_DIMS];
  va_list ap;
  va_start(ap, ndim);
  for (int i = 0; i < ndim; i++) shape[i] = va_arg(ap, int64_t);
  va_end(ap);
  return th_arg_value(input_on(tr, name, dt, cpu, ndim, shape));
}

static th_status try_call_kw(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *kw,
                             const th_arg *kwargs, th_arg *out) {
  return th_trace_call(tr, op, n, args, nkw, kw, kwargs, out);
}

static th_arg call_kw(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *kw,
                      const th_arg *kwargs) {
  th_arg out;
  th_status st = try_call_kw(tr, op, n, args, nkw, kw, kwargs, &out);
  if (st != TH_OK) fail_msg("%s failed: %s", op, th_last_error());
  return out;
}

static th_arg call(th_trace *tr, const char *op, int n, const th_arg *args) {
  return call_kw(tr, op, n, args, 0, NULL, NULL);
}

static th_arg call1(th_trace *tr, const char *op, th_arg a) { return call(tr, op, 1, &a); }
static th_arg call2(th_trace *tr, const char *op, th_arg a, th_arg b) {
  th_arg args[2] = {a, b};
  return call(tr, op, 2, args);
}
static th_arg call3(th_trace *tr, const char *op, th_arg a, th_arg b, th_arg c) {
  th_arg args[3] = {a, b, c};
  return call(tr, op, 3, args);
}

/* Expects op to fail with `code` and a message containing `needle`. */
static void expect_error(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *kw,
                         const th_arg *kwargs, th_status code, const char *needle) {
  int before = th_trace_num_bsyms(tr);
  th_arg out;
  th_status st = try_call_kw(tr, op, n, args, nkw, kw, kwargs, &out);
  if (st != code) fail_msg("%s: expected status %d, got %d (%s)", op, (int)code, (int)st, th_last_error());
  if (!strstr(th_last_error(), needle)) fail_msg("%s: message '%s' lacks '%s'", op, th_last_error(), needle);
  assert_int_equal(th_trace_num_bsyms(tr), before); /* nothing recorded on error */
}

static const th_value *val(th_arg a) {
  assert_int_equal(a.kind, TH_ARG_VALUE);
  return a.u.value;
}

/* Checks a tensor output: dtype and shape (ndim extents follow). */
static void check_tensor(th_arg a, th_dtype dt, int ndim, ...) {
  const th_value *v = val(a);
  assert_true(v->is_tensor);
  if (v->dtype != dt) fail_msg("dtype %s, expected %s", th_dtype_name(v->dtype), th_dtype_name(dt));
  assert_int_equal(v->ndim, ndim);
  va_list ap;
  va_start(ap, ndim);
  for (int i = 0; i < ndim; i++) {
    int64_t e = va_arg(ap, int64_t);
    if (v->shape[i] != e) fail_msg("shape[%d] = %lld, expected %lld", i, (long long)v->shape[i], (long long)e);
  }
  va_end(ap);
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

/* True if any subsymbol (at any depth) of b is `name`. */
static int count_subs_named(const th_bsym *b, const char *name) {
  int n = 0;
  for (int i = 0; i < th_bsym_num_subsymbols(b); i++) {
    const th_bsym *s = th_bsym_subsymbol(b, i);
    n += !strcmp(th_bsym_qualname(s), name);
    n += count_subs_named(s, name);
  }
  return n;
}

static th_dtype sub_out_dtype(const th_bsym *b, int i) { return val(th_bsym_output(th_bsym_subsymbol(b, i)))->dtype; }

/* Sets the return, verifies the trace (re-running every decomposition) and frees it. */
static void finish(th_trace *tr, th_arg ret) {
  assert_int_equal(th_trace_set_return(tr, ret), TH_OK);
  th_status st = th_trace_verify(tr);
  if (st != TH_OK) fail_msg("verify: %s", th_last_error());
  th_trace_free(tr);
}

static th_arg ints(th_arg *items, int n, ...) {
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) items[i] = th_arg_int(va_arg(ap, int64_t));
  va_end(ap);
  return th_arg_list(n, items);
}

static th_arg slice(bool hs, int64_t s, bool he, int64_t e, bool hst, int64_t st) {
  th_arg a = th_arg_none();
  a.kind = TH_ARG_SLICE;
  a.u.slice.has_start = hs;
  a.u.slice.start = s;
  a.u.slice.has_stop = he;
  a.u.slice.stop = e;
  a.u.slice.has_step = hst;
  a.u.slice.step = st;
  return a;
}

static th_arg ellipsis(void) {
  th_arg a = th_arg_none();
  a.kind = TH_ARG_ELLIPSIS;
  return a;
}

/* ---- type promotion ------------------------------------------------------------------------------ */

/* bf16 + bf16 records convert->f32 x2, prims.add, convert->bf16. */
static void test_promote_bf16_add(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg a = tensor(tr, "a", TH_BF16, 1, (int64_t)4), b = tensor(tr, "b", TH_BF16, 1, (int64_t)4);
  th_arg r = call2(tr, "ltorch.add", a, b);
  check_tensor(r, TH_BF16, 1, (int64_t)4);
  const th_bsym *bs = last_bsym(tr);
  assert_string_equal(th_bsym_qualname(bs), "ltorch.add");
  check_subs(bs, "prims.convert_element_type", "prims.convert_element_type", "prims.add", "prims.convert_element_type",
             NULL);
  assert_int_equal(sub_out_dtype(bs, 0), TH_F32);
  assert_int_equal(sub_out_dtype(bs, 1), TH_F32);
  assert_int_equal(sub_out_dtype(bs, 2), TH_F32);
  assert_int_equal(sub_out_dtype(bs, 3), TH_BF16);
  /* defaults are materialized: alpha=None is bound */
  char *text = th_trace_print(tr, 1);
  assert_non_null(text);
  if (!strstr(text, "ltorch.add(a, b, alpha=None)")) fail_msg("printed:\n%s", text);
  free(text);
  finish(tr, r);
}

static void test_promote_scalars(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_BF16, 2, (int64_t)2, (int64_t)3);
  th_arg i = tensor(tr, "i", TH_I64, 1, (int64_t)3);
  th_arg f = tensor(tr, "f", TH_F32, 1, (int64_t)4);
  th_arg d = tensor(tr, "d", TH_F64, 0);
  th_arg h = tensor(tr, "h", TH_F16, 2, (int64_t)2, (int64_t)3);
  /* bf16 * 2.0 -> bf16 (computed in f32, the number stays a number) */
  th_arg r1 = call2(tr, "ltorch.mul", x, th_arg_float(2.0));
  check_tensor(r1, TH_BF16, 2, (int64_t)2, (int64_t)3);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.mul", "prims.convert_element_type", NULL);
  /* i64 + 2.5 -> f32 */
  th_arg r2 = call2(tr, "ltorch.add", i, th_arg_float(2.5));
  check_tensor(r2, TH_F32, 1, (int64_t)3);
  /* f32[4] + f64[] -> f32: the 0-dim tensor is weak (and, on the CPU, not broadcast) */
  th_arg r3 = call2(tr, "ltorch.add", f, d);
  check_tensor(r3, TH_F32, 1, (int64_t)4);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.add", NULL);
  /* bf16 + f16 -> f32 */
  th_arg r4 = call2(tr, "ltorch.add", x, h);
  check_tensor(r4, TH_F32, 2, (int64_t)2, (int64_t)3);
  /* f16 + 1 -> f16; i64 * True -> i64; bool & bool -> bool */
  check_tensor(call2(tr, "ltorch.add", h, th_arg_int(1)), TH_F16, 2, (int64_t)2, (int64_t)3);
  check_tensor(call2(tr, "ltorch.mul", i, th_arg_bool(true)), TH_I64, 1, (int64_t)3);
  /* true_divide of integers is float32; comparisons are bool and keep bf16 operands as they are */
  check_tensor(call2(tr, "ltorch.true_divide", i, i), TH_F32, 1, (int64_t)3);
  th_arg c = call2(tr, "ltorch.lt", x, th_arg_float(0.5));
  check_tensor(c, TH_BOOL, 2, (int64_t)2, (int64_t)3);
  check_subs(last_bsym(tr), "prims.lt", NULL);
  finish(tr, c);
}

/* result = 2 * x records and prints `ltorch.mul(2, x)`: a number operand stays a number, the result has x's type. */
static void test_mul_number_printed_trace(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_F32, 2, (int64_t)2, (int64_t)2);
  th_arg r = call2(tr, "ltorch.mul", th_arg_int(2), x);
  check_tensor(r, TH_F32, 2, (int64_t)2, (int64_t)2);
  check_subs(last_bsym(tr), "prims.mul", NULL);
  assert_int_equal(th_trace_set_return(tr, r), TH_OK);
  char *text = th_trace_print(tr, 1);
  assert_non_null(text);
  char want[128];
  snprintf(want, sizeof want, "%s = ltorch.mul(2, x)  # %s: \"cpu f32[2, 2]\"", th_value_name(val(r)),
           th_value_name(val(r)));
  if (!strstr(text, want)) fail_msg("printed:\n%s\nwanted: %s", text, want);
  free(text);
  assert_int_equal(th_trace_verify(tr), TH_OK);
  th_trace_free(tr);
}

static th_tu_type ty(th_dtype dt, th_tu_strength s) {
  th_tu_type t = {dt, s};
  return t;
}

/* The lattice itself (Thunder's tables), including its oddities; bool tensor + int follows PyTorch. */
static void test_promote_lattice(void **state) {
  (void)state;
  const struct {
    th_tu_type a, b, want;
  } cases[] = {
    {ty(TH_U8, TH_TU_STRONG), ty(TH_I8, TH_TU_STRONG), ty(TH_I16, TH_TU_STRONG)},
    {ty(TH_U8, TH_TU_WEAK), ty(TH_I64, TH_TU_WEAK), ty(TH_I16, TH_TU_STRONG)}, /* u8_ + i64_ -> i16 */
    {ty(TH_I32, TH_TU_STRONG), ty(TH_I64, TH_TU_WEAK), ty(TH_I32, TH_TU_STRONG)},
    {ty(TH_BOOL, TH_TU_STRONG), ty(TH_I64, TH_TU_NUMBER),
     ty(TH_I64, TH_TU_NUMBER)}, /* PyTorch: int64, not Thunder's i8_ */
    {ty(TH_I64, TH_TU_STRONG), ty(TH_F64, TH_TU_NUMBER), ty(TH_F64, TH_TU_NUMBER)},
    {ty(TH_BF16, TH_TU_STRONG), ty(TH_F16, TH_TU_STRONG), ty(TH_F32, TH_TU_STRONG)},
    {ty(TH_BF16, TH_TU_WEAK), ty(TH_F16, TH_TU_WEAK), ty(TH_F32, TH_TU_WEAK)},
    {ty(TH_F32, TH_TU_WEAK), ty(TH_BF16, TH_TU_STRONG), ty(TH_BF16, TH_TU_STRONG)},
    {ty(TH_F64, TH_TU_WEAK), ty(TH_F16, TH_TU_STRONG), ty(TH_F16, TH_TU_STRONG)},
    {ty(TH_F32, TH_TU_STRONG), ty(TH_F64, TH_TU_STRONG), ty(TH_F64, TH_TU_STRONG)},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    th_tu_type r;
    assert_int_equal(th_tu_promote_pair("test", cases[i].a, cases[i].b, &r), TH_OK);
    if (r.dtype != cases[i].want.dtype || r.strength != cases[i].want.strength)
      fail_msg("case %zu: got %s/%d", i, th_dtype_name(r.dtype), (int)r.strength);
    assert_int_equal(th_tu_promote_pair("test", cases[i].b, cases[i].a, &r), TH_OK); /* symmetric */
    assert_int_equal(r.dtype, cases[i].want.dtype);
  }
  th_tu_type r;
  assert_int_equal(th_tu_promote_pair("ltorch.add", ty(TH_F8E4M3FN, TH_TU_STRONG), ty(TH_F32, TH_TU_STRONG), &r),
                   TH_ERR_TYPE);
  assert_non_null(strstr(th_last_error(), "fp8 tensors must be converted explicitly"));
  /* kinds */
  th_arg args[1] = {th_arg_bool(true)};
  th_tu_type comp, res;
  assert_int_equal(th_tu_promote("t", 1, args, TH_TU_PROMO_BOOL_TO_LONG, &comp, &res), TH_OK);
  assert_int_equal(th_tu_tensor_dtype(res), TH_I64);
  assert_int_equal(th_tu_promote("t", 1, args, TH_TU_PROMO_INT_TO_FLOAT, &comp, &res), TH_OK);
  assert_int_equal(th_tu_tensor_dtype(res), TH_F32);
  th_arg f = th_arg_float(2.5);
  assert_int_equal(th_tu_promote("t", 1, &f, TH_TU_PROMO_NUMBER_TO_INT, &comp, &res), TH_OK);
  assert_int_equal(res.dtype, TH_I64);
}

static void test_promote_errors(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg q = tensor(tr, "q", TH_F8E4M3FN, 1, (int64_t)4), f = tensor(tr, "f", TH_F32, 1, (int64_t)4);
  th_arg g = tensor(tr, "g", TH_F32, 1, (int64_t)3);
  th_arg args[2] = {q, f};
  expect_error(tr, "ltorch.add", 2, args, 0, NULL, NULL, TH_ERR_TYPE, "fp8 tensors must be converted explicitly");
  th_arg bad[2] = {f, g};
  expect_error(tr, "ltorch.add", 2, bad, 0, NULL, NULL, TH_ERR_RUNTIME,
               "Attempting to broadcast a dimension of length 3!");
  /* the message names the argument, both shapes and the dimension */
  expect_error(tr, "ltorch.add", 2, bad, 0, NULL, NULL, TH_ERR_RUNTIME,
               "(argument 1 has shape [3], which does not broadcast with [4], the shape of the arguments before it, "
               "at its dimension 0)");
  /* integer tensors reject a float alpha */
  th_arg i = tensor(tr, "i", TH_I64, 1, (int64_t)4);
  th_arg ii[2] = {i, i};
  const char *kw[1] = {"alpha"};
  th_arg alpha[1] = {th_arg_float(0.5)};
  expect_error(tr, "ltorch.add", 2, ii, 1, kw, alpha, TH_ERR_TYPE, "alpha must not be a floating point number");
  th_trace_free(tr);
}

/* ---- elementwise -------------------------------------------------------------------------------- */

static void test_elementwise_ops(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_BF16, 2, (int64_t)3, (int64_t)4);
  th_arg y = tensor(tr, "y", TH_F32, 1, (int64_t)4);
  th_arg n = tensor(tr, "n", TH_I32, 2, (int64_t)3, (int64_t)4);
  th_arg m = tensor(tr, "m", TH_BOOL, 2, (int64_t)3, (int64_t)4);
  /* every unary op of the table (the rows of ops/unary.def) on a bfloat16 input: a prim of kind MATH or
   * FLOAT computes in float32 and gives bfloat16 back, PRED gives bool, EXACT refuses a float input; a
   * composite gives bfloat16 or bool */
  static const struct {
    const char *name, *kind; /* kind NULL: a composite */
  } unary[] = {
#define TH_UNARY(name, kind, ...) {#name, #kind},
#define TH_UNARY_TORCH(name, ...) {#name, NULL},
#include "ops/unary.def"
#undef TH_UNARY
#undef TH_UNARY_TORCH
  };
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "ltorch.%s", unary[i].name);
    const char *kind = unary[i].kind;
    if (kind && !strcmp(kind, "EXACT")) {
      th_arg out;
      if (th_trace_call(tr, name, 1, &x, 0, NULL, NULL, &out) == TH_OK) fail_msg("%s: accepts a bfloat16 tensor", name);
      continue;
    }
    th_arg r = call1(tr, name, x);
    th_dtype want = kind && !strcmp(kind, "PRED") ? TH_BOOL : TH_BF16;
    if (!kind && val(r)->dtype == TH_BOOL) want = TH_BOOL;
    check_tensor(r, want, 2, (int64_t)3, (int64_t)4);
  }
  /* integer inputs of transcendental ops become float32; floor of an integer is the identity */
  check_tensor(call1(tr, "ltorch.exp", n), TH_F32, 2, (int64_t)3, (int64_t)4);
  check_tensor(call1(tr, "ltorch.floor", n), TH_I32, 2, (int64_t)3, (int64_t)4);
  check_subs(last_bsym(tr), "prims.shallow_copy", NULL);
  check_tensor(call1(tr, "ltorch.isfinite", n), TH_BOOL, 2, (int64_t)3, (int64_t)4);
  check_tensor(call1(tr, "ltorch.isnan", x), TH_BOOL, 2, (int64_t)3, (int64_t)4);
  check_tensor(call1(tr, "ltorch.logical_not", n), TH_BOOL, 2, (int64_t)3, (int64_t)4);
  /* binary with broadcasting: bf16 [3,4] op f32 [4] -> f32 [3,4] */
  static const char *const binary[] = {"add",     "sub",     "mul",       "div",  "true_divide", "pow",
                                       "maximum", "minimum", "remainder", "fmod", "atan2",       "floor_divide"};
  for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "ltorch.%s", binary[i]);
    check_tensor(call2(tr, name, x, y), TH_F32, 2, (int64_t)3, (int64_t)4);
  }
  check_tensor(call2(tr, "ltorch.floor_divide", n, th_arg_int(3)), TH_I32, 2, (int64_t)3, (int64_t)4);
  check_tensor(call2(tr, "ltorch.pow", m, m), TH_I64, 2, (int64_t)3, (int64_t)4); /* BOOL_TO_LONG */
  check_tensor(call2(tr, "ltorch.eq", x, y), TH_BOOL, 2, (int64_t)3, (int64_t)4);
  check_tensor(call2(tr, "ltorch.logical_and", n, m), TH_BOOL, 2, (int64_t)3, (int64_t)4);
  check_tensor(call2(tr, "ltorch.bitwise_xor", n, th_arg_int(1)), TH_I32, 2, (int64_t)3, (int64_t)4);
  /* div rounding modes */
  const char *kw[1] = {"rounding_mode"};
  th_arg ab[2] = {n, th_arg_int(2)};
  th_arg mode[1] = {th_arg_str("trunc")};
  check_tensor(call_kw(tr, "ltorch.div", 2, ab, 1, kw, mode), TH_I32, 2, (int64_t)3, (int64_t)4);
  check_subs(last_bsym(tr), "prims.div", NULL);
  th_arg xb[2] = {x, th_arg_float(2.0)};
  check_tensor(call_kw(tr, "ltorch.div", 2, xb, 1, kw, mode), TH_BF16, 2, (int64_t)3, (int64_t)4);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.div", "prims.trunc", "prims.convert_element_type",
             NULL);
  mode[0] = th_arg_str("floor");
  check_tensor(call_kw(tr, "ltorch.div", 2, xb, 1, kw, mode), TH_BF16, 2, (int64_t)3, (int64_t)4);
  check_subs(last_bsym(tr), "ltorch.floor_divide", NULL);
  mode[0] = th_arg_str("bogus");
  expect_error(tr, "ltorch.div", 2, xb, 1, kw, mode, TH_ERR_VALUE, "rounding_mode");
  /* add with alpha: b * alpha in the computation dtype, one rounding */
  const char *akw[1] = {"alpha"};
  th_arg alpha[1] = {th_arg_int(2)};
  th_arg xx[2] = {x, x};
  th_arg r = call_kw(tr, "ltorch.sub", 2, xx, 1, akw, alpha);
  check_tensor(r, TH_BF16, 2, (int64_t)3, (int64_t)4);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.convert_element_type", "prims.mul", "prims.sub",
             "prims.convert_element_type", NULL);
  /* lerp, masked_fill keeps a's dtype */
  check_tensor(call3(tr, "ltorch.lerp", x, x, th_arg_float(0.25)), TH_BF16, 2, (int64_t)3, (int64_t)4);
  check_tensor(call3(tr, "ltorch.masked_fill", n, m, th_arg_float(2.5)), TH_I32, 2, (int64_t)3, (int64_t)4);
  /* bool negation is an error */
  expect_error(tr, "ltorch.neg", 1, &m, 0, NULL, NULL, TH_ERR_RUNTIME, "Negation");
  finish(tr, r);
}

static void test_where_clamp(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_F32, 2, (int64_t)16, (int64_t)32);
  th_arg p = tensor(tr, "p", TH_BOOL, 1, (int64_t)32);
  th_arg i = tensor(tr, "i", TH_I64, 2, (int64_t)16, (int64_t)32);
  th_arg w = call3(tr, "ltorch.where", p, x, th_arg_float(-448.0));
  check_tensor(w, TH_F32, 2, (int64_t)16, (int64_t)32);
  check_subs(last_bsym(tr), "prims.broadcast_in_dim", "prims.where", NULL);
  check_tensor(call3(tr, "ltorch.where", p, i, th_arg_float(0.5)), TH_F32, 2, (int64_t)16, (int64_t)32);
  expect_error(tr, "ltorch.where", 3, (th_arg[]){x, x, x}, 0, NULL, NULL, TH_ERR_RUNTIME, "boolean");
  /* clamp as seed 003's where-chains: NaN-preserving min then max */
  th_arg c = call3(tr, "ltorch.clamp", x, th_arg_float(-448.0), th_arg_float(448.0));
  check_tensor(c, TH_F32, 2, (int64_t)16, (int64_t)32);
  check_subs(last_bsym(tr), "ltorch.ne", "ltorch.gt", "ltorch.where", "ltorch.where", "ltorch.ne", "ltorch.lt",
             "ltorch.where", "ltorch.where", NULL);
  expect_error(tr, "ltorch.clamp", 1, &x, 0, NULL, NULL, TH_ERR_VALUE, "At least one of 'min' or 'max'");
  finish(tr, c);
}

/* ---- conversion ------------------------------------------------------------------------------------- */

static void test_to(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_F32, 1, (int64_t)3);
  /* x.to(torch.float16): a dtype as the positional argument */
  th_arg h = call2(tr, "ltorch.to", x, th_arg_dtype(TH_F16));
  check_tensor(h, TH_F16, 1, (int64_t)3);
  check_subs(last_bsym(tr), "prims.convert_element_type", NULL);
  /* keyword dtype, fp8 */
  const char *kw[1] = {"dtype"};
  th_arg dt[1] = {th_arg_dtype(TH_F8E4M3FN)};
  th_arg q = call_kw(tr, "Tensor.to", 1, &x, 1, kw, dt);
  check_tensor(q, TH_F8E4M3FN, 1, (int64_t)3);
  /* identity -> shallow_copy; copy=True -> clone */
  check_tensor(call2(tr, "ltorch.to", x, th_arg_dtype(TH_F32)), TH_F32, 1, (int64_t)3);
  check_subs(last_bsym(tr), "prims.shallow_copy", NULL);
  const char *ckw[1] = {"copy"};
  th_arg cp[1] = {th_arg_bool(true)};
  call_kw(tr, "ltorch.to", 1, &x, 1, ckw, cp);
  check_subs(last_bsym(tr), "prims.clone", NULL);
  /* device string */
  th_arg d = call2(tr, "ltorch.to", x, th_arg_str("cuda:0"));
  assert_int_equal(val(d)->device.type, TH_CUDA);
  check_subs(last_bsym(tr), "prims.device_put", NULL);
  /* type_as, float() */
  th_arg i = tensor(tr, "i", TH_I64, 1, (int64_t)3);
  check_tensor(call2(tr, "ltorch.type_as", x, i), TH_I64, 1, (int64_t)3);
  check_tensor(call1(tr, "Tensor.float", i), TH_F32, 1, (int64_t)3);
  check_tensor(call1(tr, "Tensor.bfloat16", x), TH_BF16, 1, (int64_t)3);
  /* both positional and keyword dtype */
  th_arg two[2] = {x, th_arg_dtype(TH_F16)};
  expect_error(tr, "ltorch.to", 2, two, 1, kw, dt, TH_ERR_VALUE, "both a positional and keyword dtype");
  finish(tr, q);
}

static void test_fp8_saturated(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_BF16, 2, (int64_t)16, (int64_t)32), q;
  /* record inside a bsym-less scope: the helper records ltorch.clamp and ltorch.to at top level */
  assert_int_equal(th_tu_to_fp8_saturated(tr, x, TH_F8E4M3FN, &q), TH_OK);
  check_tensor(q, TH_F8E4M3FN, 2, (int64_t)16, (int64_t)32);
  assert_int_equal(th_trace_num_bsyms(tr), 2);
  assert_string_equal(th_bsym_qualname(th_trace_bsym(tr, 0)), "ltorch.clamp");
  assert_string_equal(th_bsym_qualname(th_trace_bsym(tr, 1)), "ltorch.to");
  th_arg q2;
  assert_int_equal(th_tu_to_fp8_saturated(tr, x, TH_F8E5M2, &q2), TH_OK);
  check_tensor(q2, TH_F8E5M2, 2, (int64_t)16, (int64_t)32);
  assert_int_equal(th_tu_to_fp8_saturated(tr, q, TH_F8E5M2, &q2), TH_ERR_TYPE);
  finish(tr, q);
}

/* ---- creation ----------------------------------------------------------------------------------------- */

static void test_creation(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg items[4];
  th_arg f = call2(tr, "ltorch.full", ints(items, 2, (int64_t)2, (int64_t)3), th_arg_float(1.5));
  check_tensor(f, TH_F32, 2, (int64_t)2, (int64_t)3);
  check_tensor(call2(tr, "ltorch.full", ints(items, 1, (int64_t)4), th_arg_int(7)), TH_I64, 1, (int64_t)4);
  const char *kw[2] = {"dtype", "device"};
  th_arg kv[2] = {th_arg_dtype(TH_BF16), th_arg_str("cuda:0")};
  th_arg shape = ints(items, 2, (int64_t)2, (int64_t)2);
  th_arg z = call_kw(tr, "ltorch.zeros", 1, &shape, 2, kw, kv);
  check_tensor(z, TH_BF16, 2, (int64_t)2, (int64_t)2);
  assert_int_equal(val(z)->device.type, TH_CUDA);
  check_tensor(call1(tr, "ltorch.ones", ints(items, 1, (int64_t)3)), TH_F32, 1, (int64_t)3);
  check_tensor(call1(tr, "ltorch.ones_like", z), TH_BF16, 2, (int64_t)2, (int64_t)2);
  /* arange: int64 for ints, float32 otherwise; the length is ceil((end - start) / step) */
  check_tensor(call1(tr, "ltorch.arange", th_arg_int(5)), TH_I64, 1, (int64_t)5);
  check_subs(last_bsym(tr), "prims.iota", NULL);
  check_tensor(call3(tr, "ltorch.arange", th_arg_int(1), th_arg_float(2.0), th_arg_float(0.25)), TH_F32, 1, (int64_t)4);
  check_tensor(call3(tr, "ltorch.arange", th_arg_int(10), th_arg_int(0), th_arg_int(-3)), TH_I64, 1, (int64_t)4);
  check_tensor(call2(tr, "ltorch.arange", th_arg_int(3), th_arg_int(3)), TH_I64, 1, (int64_t)0);
  th_arg bad[3] = {th_arg_int(0), th_arg_int(5), th_arg_int(-1)};
  expect_error(tr, "ltorch.arange", 3, bad, 0, NULL, NULL, TH_ERR_RUNTIME, "inconsistent with step sign");
  /* tril / triu */
  th_arg x = tensor(tr, "x", TH_F32, 3, (int64_t)2, (int64_t)4, (int64_t)5);
  th_arg l = call1(tr, "ltorch.tril", x);
  check_tensor(l, TH_F32, 3, (int64_t)2, (int64_t)4, (int64_t)5);
  assert_int_equal(count_subs_named(last_bsym(tr), "prims.iota"), 2);
  check_tensor(call2(tr, "ltorch.triu", x, th_arg_int(1)), TH_F32, 3, (int64_t)2, (int64_t)4, (int64_t)5);
  th_arg u = call1(tr, "ltorch.uniform_like", x);
  check_tensor(u, TH_F32, 3, (int64_t)2, (int64_t)4, (int64_t)5);
  finish(tr, l);
}

/* ---- shape ops ------------------------------------------------------------------------------------- */

static void test_reshape(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_F32, 3, (int64_t)2, (int64_t)3, (int64_t)4);
  th_arg items[4];
  th_arg r = call2(tr, "ltorch.reshape", x, ints(items, 2, (int64_t)-1, (int64_t)4));
  check_tensor(r, TH_F32, 2, (int64_t)6, (int64_t)4);
  check_subs(last_bsym(tr), "prims.reshape", NULL);
  check_tensor(call2(tr, "ltorch.reshape", x, th_arg_int(-1)), TH_F32, 1, (int64_t)24);
  /* view records a nested ltorch.reshape (seed 003) */
  check_tensor(call2(tr, "Tensor.view", x, ints(items, 3, (int64_t)4, (int64_t)-1, (int64_t)2)), TH_F32, 3, (int64_t)4,
               (int64_t)3, (int64_t)2);
  check_subs(last_bsym(tr), "ltorch.reshape", NULL);
  /* same shape: shallow copy */
  call2(tr, "ltorch.reshape", x, ints(items, 3, (int64_t)2, (int64_t)3, (int64_t)4));
  check_subs(last_bsym(tr), "prims.shallow_copy", NULL);
  th_arg two[2] = {x, ints(items, 2, (int64_t)-1, (int64_t)-1)};
  expect_error(tr, "ltorch.reshape", 2, two, 0, NULL, NULL, TH_ERR_RUNTIME, "only one dimension can be inferred");
  th_arg bad[2] = {x, ints(items, 2, (int64_t)5, (int64_t)-1)};
  expect_error(tr, "ltorch.reshape", 2, bad, 0, NULL, NULL, TH_ERR_RUNTIME,
               "shape '[5, -1]' is invalid for input of size 24");
  th_arg bad2[2] = {x, ints(items, 2, (int64_t)5, (int64_t)5)};
  expect_error(tr, "ltorch.reshape", 2, bad2, 0, NULL, NULL, TH_ERR_RUNTIME, "invalid for input of size 24");
  finish(tr, r);
}

static void test_layout_ops(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_F32, 3, (int64_t)2, (int64_t)3, (int64_t)4);
  th_arg items[4];
  th_arg t = call3(tr, "ltorch.transpose", x, th_arg_int(0), th_arg_int(-1));
  check_tensor(t, TH_F32, 3, (int64_t)4, (int64_t)3, (int64_t)2);
  check_subs(last_bsym(tr), "prims.transpose", NULL);
  check_tensor(call2(tr, "ltorch.permute", x, ints(items, 3, (int64_t)1, (int64_t)2, (int64_t)0)), TH_F32, 3,
               (int64_t)3, (int64_t)4, (int64_t)2);
  check_tensor(call2(tr, "ltorch.unsqueeze", x, th_arg_int(-1)), TH_F32, 4, (int64_t)2, (int64_t)3, (int64_t)4,
               (int64_t)1);
  th_arg one = tensor(tr, "one", TH_F32, 4, (int64_t)1, (int64_t)3, (int64_t)1, (int64_t)4);
  check_tensor(call1(tr, "ltorch.squeeze", one), TH_F32, 2, (int64_t)3, (int64_t)4);
  check_tensor(call2(tr, "ltorch.squeeze", one, th_arg_int(2)), TH_F32, 3, (int64_t)1, (int64_t)3, (int64_t)4);
  check_tensor(call2(tr, "ltorch.squeeze", one, th_arg_int(1)), TH_F32, 4, (int64_t)1, (int64_t)3, (int64_t)1,
               (int64_t)4); /* not length 1: no-op */
  check_tensor(call2(tr, "ltorch.expand", one, ints(items, 4, (int64_t)5, (int64_t)-1, (int64_t)2, (int64_t)4)), TH_F32,
               4, (int64_t)5, (int64_t)3, (int64_t)2, (int64_t)4);
  check_tensor(call3(tr, "ltorch.flatten", x, th_arg_int(1), th_arg_int(2)), TH_F32, 2, (int64_t)2, (int64_t)12);
  check_tensor(call1(tr, "ltorch.flatten", x), TH_F32, 1, (int64_t)24);
  th_arg m = tensor(tr, "m", TH_F32, 2, (int64_t)5, (int64_t)6);
  check_tensor(call1(tr, "ltorch.t", m), TH_F32, 2, (int64_t)6, (int64_t)5);
  expect_error(tr, "ltorch.t", 1, &x, 0, NULL, NULL, TH_ERR_RUNTIME, "t() expects a tensor with <= 2 dimensions");
  th_arg bad[3] = {x, th_arg_int(3), th_arg_int(0)};
  expect_error(tr, "ltorch.transpose", 3, bad, 0, NULL, NULL, TH_ERR_INDEX, "Dimension out of range");
  check_tensor(call1(tr, "ltorch.contiguous", x), TH_F32, 3, (int64_t)2, (int64_t)3, (int64_t)4);
  check_subs(last_bsym(tr), "prims.stride_order", NULL); /* a itself when contiguous, else a copy (run time) */
  check_tensor(call1(tr, "torch.clone", x), TH_F32, 3, (int64_t)2, (int64_t)3, (int64_t)4);
  check_subs(last_bsym(tr), "prims.clone", NULL);
  finish(tr, t);
}

static void test_getitem(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_F32, 2, (int64_t)3, (int64_t)4);
  th_arg key[4];
  /* x[0] */
  check_tensor(call2(tr, "Tensor.__getitem__", x, th_arg_int(0)), TH_F32, 1, (int64_t)4);
  check_subs(last_bsym(tr), "prims.slice_prim", "prims.squeeze", NULL);
  /* x[:, 1:3] */
  key[0] = slice(false, 0, false, 0, false, 0);
  key[1] = slice(true, 1, true, 3, false, 0);
  check_tensor(call2(tr, "ltorch.getitem", x, th_arg_tuple(2, key)), TH_F32, 2, (int64_t)3, (int64_t)2);
  /* x[-1, ::2] */
  key[0] = th_arg_int(-1);
  key[1] = slice(false, 0, false, 0, true, 2);
  check_tensor(call2(tr, "ltorch.getitem", x, th_arg_tuple(2, key)), TH_F32, 1, (int64_t)2);
  /* x[..., None] */
  key[0] = ellipsis();
  key[1] = th_arg_none();
  check_tensor(call2(tr, "ltorch.getitem", x, th_arg_tuple(2, key)), TH_F32, 3, (int64_t)3, (int64_t)4, (int64_t)1);
  check_subs(last_bsym(tr), "prims.broadcast_in_dim", NULL);
  /* x[None, 1] */
  key[0] = th_arg_none();
  key[1] = th_arg_int(1);
  check_tensor(call2(tr, "ltorch.getitem", x, th_arg_tuple(2, key)), TH_F32, 2, (int64_t)1, (int64_t)4);
  /* x[1:, ...,  -2:] and clamped out-of-range slice bounds */
  key[0] = slice(true, 1, false, 0, false, 0);
  key[1] = ellipsis();
  key[2] = slice(true, -2, false, 0, false, 0);
  check_tensor(call2(tr, "ltorch.getitem", x, th_arg_tuple(3, key)), TH_F32, 2, (int64_t)2, (int64_t)2);
  key[0] = slice(true, -10, true, 100, false, 0);
  check_tensor(call2(tr, "ltorch.getitem", x, th_arg_tuple(1, key)), TH_F32, 2, (int64_t)3, (int64_t)4);
  key[0] = slice(true, 3, true, 1, false, 0);
  check_tensor(call2(tr, "ltorch.getitem", x, th_arg_tuple(1, key)), TH_F32, 2, (int64_t)0, (int64_t)4);
  /* x[:] is a shallow copy */
  key[0] = slice(false, 0, false, 0, false, 0);
  check_tensor(call2(tr, "ltorch.getitem", x, key[0]), TH_F32, 2, (int64_t)3, (int64_t)4);
  check_subs(last_bsym(tr), "prims.shallow_copy", NULL);
  /* advanced: x[idx] with a 2-D index, x[:, idx1] */
  th_arg idx = tensor(tr, "idx", TH_I64, 2, (int64_t)2, (int64_t)5);
  th_arg idx1 = tensor(tr, "idx1", TH_I64, 1, (int64_t)6);
  check_tensor(call2(tr, "ltorch.getitem", x, idx), TH_F32, 3, (int64_t)2, (int64_t)5, (int64_t)4);
  key[0] = slice(false, 0, false, 0, false, 0);
  key[1] = idx1;
  th_arg r = call2(tr, "ltorch.getitem", x, th_arg_tuple(2, key));
  check_tensor(r, TH_F32, 2, (int64_t)3, (int64_t)6);
  /* errors */
  th_arg e1[2] = {x, th_arg_int(3)};
  expect_error(tr, "ltorch.getitem", 2, e1, 0, NULL, NULL, TH_ERR_INDEX,
               "index 3 is out of bounds for dimension 0 with size 3");
  key[0] = th_arg_int(0);
  key[1] = th_arg_int(0);
  key[2] = th_arg_int(0);
  th_arg e2[2] = {x, th_arg_tuple(3, key)};
  expect_error(tr, "ltorch.getitem", 2, e2, 0, NULL, NULL, TH_ERR_INDEX, "too many indices for tensor of dimension 2");
  key[0] = ellipsis();
  key[1] = ellipsis();
  th_arg e3[2] = {x, th_arg_tuple(2, key)};
  expect_error(tr, "ltorch.getitem", 2, e3, 0, NULL, NULL, TH_ERR_INDEX, "single ellipsis");
  key[0] = slice(false, 0, false, 0, true, -1);
  th_arg e4[2] = {x, key[0]};
  expect_error(tr, "ltorch.getitem", 2, e4, 0, NULL, NULL, TH_ERR_VALUE, "step must be greater than zero");
  finish(tr, r);
}

static void test_cat_split(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg a = tensor(tr, "a", TH_BF16, 2, (int64_t)2, (int64_t)3);
  th_arg b = tensor(tr, "b", TH_F32, 2, (int64_t)4, (int64_t)3);
  th_arg q = tensor(tr, "q", TH_F8E4M3FN, 2, (int64_t)2, (int64_t)3);
  th_arg l[2] = {a, b};
  th_arg c = call1(tr, "torch.cat", th_arg_list(2, l));
  check_tensor(c, TH_F32, 2, (int64_t)6, (int64_t)3);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.cat", NULL);
  th_arg qq[2] = {q, q};
  check_tensor(call2(tr, "ltorch.cat", th_arg_list(2, qq), th_arg_int(-1)), TH_F8E4M3FN, 2, (int64_t)2, (int64_t)6);
  th_arg aa[3] = {a, a, a};
  check_tensor(call2(tr, "ltorch.stack", th_arg_list(3, aa), th_arg_int(1)), TH_BF16, 3, (int64_t)2, (int64_t)3,
               (int64_t)3);
  th_arg ab[2] = {a, b};
  expect_error(tr, "ltorch.stack", 1, (th_arg[]){th_arg_list(2, ab)}, 0, NULL, NULL, TH_ERR_RUNTIME,
               "stack expects each tensor to be equal size");
  /* split by size and by sections (GPT-2's qkv split), chunk, narrow */
  th_arg qkv = tensor(tr, "qkv", TH_F32, 3, (int64_t)2, (int64_t)5, (int64_t)12);
  th_arg s = call3(tr, "ltorch.split", qkv, th_arg_int(4), th_arg_int(2));
  assert_int_equal(s.kind, TH_ARG_TUPLE);
  assert_int_equal(s.u.seq.n, 3);
  for (int i = 0; i < 3; i++) check_tensor(s.u.seq.items[i], TH_F32, 3, (int64_t)2, (int64_t)5, (int64_t)4);
  th_arg items[3];
  s = call3(tr, "ltorch.split", qkv, ints(items, 3, (int64_t)2, (int64_t)3, (int64_t)7), th_arg_int(-1));
  assert_int_equal(s.u.seq.n, 3);
  check_tensor(s.u.seq.items[2], TH_F32, 3, (int64_t)2, (int64_t)5, (int64_t)7);
  s = call3(tr, "ltorch.split", qkv, th_arg_int(5), th_arg_int(2));
  assert_int_equal(s.u.seq.n, 3);
  check_tensor(s.u.seq.items[2], TH_F32, 3, (int64_t)2, (int64_t)5, (int64_t)2);
  s = call3(tr, "ltorch.chunk", qkv, th_arg_int(5), th_arg_int(1));
  assert_int_equal(s.u.seq.n, 5);
  s = call3(tr, "ltorch.chunk", qkv, th_arg_int(5), th_arg_int(2)); /* 12 in chunks of 3 -> 4 pieces */
  assert_int_equal(s.u.seq.n, 4);
  th_arg bad[3] = {qkv, ints(items, 2, (int64_t)2, (int64_t)3), th_arg_int(2)};
  expect_error(tr, "ltorch.split", 3, bad, 0, NULL, NULL, TH_ERR_RUNTIME,
               "split_with_sizes expects split_sizes to sum");
  th_arg n = call(tr, "ltorch.narrow", 4, (th_arg[]){qkv, th_arg_int(2), th_arg_int(-4), th_arg_int(3)});
  check_tensor(n, TH_F32, 3, (int64_t)2, (int64_t)5, (int64_t)3);
  finish(tr, n);
}

/* unbind: one piece per index with the dim removed (negative dims, size 1 and 0), PyTorch's errors */
static void test_unbind(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_BF16, 3, (int64_t)2, (int64_t)3, (int64_t)4);
  th_arg s = call2(tr, "ltorch.unbind", x, th_arg_int(-1));
  assert_int_equal(s.kind, TH_ARG_TUPLE);
  assert_int_equal(s.u.seq.n, 4);
  for (int i = 0; i < 4; i++) check_tensor(s.u.seq.items[i], TH_BF16, 2, (int64_t)2, (int64_t)3);
  s = call1(tr, "torch.unbind", x); /* dim=0 by default */
  assert_int_equal(s.u.seq.n, 2);
  check_tensor(s.u.seq.items[1], TH_BF16, 2, (int64_t)3, (int64_t)4);
  th_arg one = tensor(tr, "one", TH_F32, 2, (int64_t)1, (int64_t)5);
  s = call2(tr, "ltorch.unbind", one, th_arg_int(0));
  assert_int_equal(s.u.seq.n, 1);
  check_tensor(s.u.seq.items[0], TH_F32, 1, (int64_t)5);
  th_arg empty = tensor(tr, "empty", TH_F32, 2, (int64_t)0, (int64_t)5);
  s = call2(tr, "ltorch.unbind", empty, th_arg_int(0));
  assert_int_equal(s.kind, TH_ARG_TUPLE);
  assert_int_equal(s.u.seq.n, 0);
  th_arg m = tensor(tr, "m", TH_F32, 2, (int64_t)2, (int64_t)3);
  expect_error(tr, "ltorch.unbind", 2, (th_arg[]){m, th_arg_int(2)}, 0, NULL, NULL, TH_ERR_INDEX,
               "Dimension out of range (expected to be in range of [-2, 1], but got 2)");
  th_arg z = tensor(tr, "z", TH_F32, 0);
  expect_error(tr, "ltorch.unbind", 2, (th_arg[]){z, th_arg_int(0)}, 0, NULL, NULL, TH_ERR_INDEX,
               "Dimension specified as 0 but tensor has no dimensions");
  s = call2(tr, "ltorch.unbind", m, th_arg_int(-2));
  assert_int_equal(s.u.seq.n, 2);
  finish(tr, s.u.seq.items[0]);
}

/* ---- reductions ------------------------------------------------------------------------------------ */

static void test_reductions(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_BF16, 3, (int64_t)2, (int64_t)3, (int64_t)4);
  th_arg i = tensor(tr, "i", TH_I32, 2, (int64_t)2, (int64_t)3);
  th_arg items[3];
  /* sum of bf16: f32 accumulate, bf16 result; keepdim re-inserts the dim */
  th_arg s = call3(tr, "ltorch.sum", x, th_arg_int(-1), th_arg_bool(true));
  check_tensor(s, TH_BF16, 3, (int64_t)2, (int64_t)3, (int64_t)1);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.sum", "prims.broadcast_in_dim",
             "prims.convert_element_type", NULL);
  check_tensor(call1(tr, "ltorch.sum", x), TH_BF16, 0);
  check_tensor(call1(tr, "ltorch.sum", i), TH_I64, 0); /* integers accumulate in int64 */
  check_tensor(call2(tr, "ltorch.sum", x, ints(items, 2, (int64_t)0, (int64_t)2)), TH_BF16, 1, (int64_t)3);
  const char *kw[1] = {"dtype"};
  th_arg dt[1] = {th_arg_dtype(TH_F32)};
  th_arg xd[2] = {x, th_arg_int(1)};
  check_tensor(call_kw(tr, "ltorch.sum", 2, xd, 1, kw, dt), TH_F32, 2, (int64_t)2, (int64_t)4);
  check_tensor(call2(tr, "ltorch.mean", x, th_arg_int(1)), TH_BF16, 2, (int64_t)2, (int64_t)4);
  expect_error(tr, "ltorch.mean", 1, &i, 0, NULL, NULL, TH_ERR_RUNTIME, "mean(): could not infer output dtype");
  check_tensor(call2(tr, "ltorch.amax", x, th_arg_int(0)), TH_BF16, 2, (int64_t)3, (int64_t)4);
  check_tensor(call2(tr, "ltorch.prod", i, th_arg_int(0)), TH_I64, 1, (int64_t)3);
  /* var / var_mean with correction */
  const char *ckw[1] = {"correction"};
  th_arg corr[1] = {th_arg_int(0)};
  check_tensor(call_kw(tr, "ltorch.var", 2, xd, 1, ckw, corr), TH_BF16, 2, (int64_t)2, (int64_t)4);
  th_arg vm = call2(tr, "torch.var_mean", x, th_arg_int(2));
  assert_int_equal(vm.kind, TH_ARG_TUPLE);
  check_tensor(vm.u.seq.items[0], TH_BF16, 2, (int64_t)2, (int64_t)3);
  check_tensor(vm.u.seq.items[1], TH_BF16, 2, (int64_t)2, (int64_t)3);
  check_tensor(call2(tr, "ltorch.std", x, th_arg_int(2)), TH_BF16, 2, (int64_t)2, (int64_t)3);
  th_arg both[3] = {x, th_arg_int(2), th_arg_bool(true)};
  expect_error(tr, "ltorch.var", 3, both, 1, ckw, corr, TH_ERR_RUNTIME, "cannot specify both unbiased and correction");
  /* argmax / max */
  th_arg am = call3(tr, "ltorch.argmax", x, th_arg_int(1), th_arg_bool(true));
  check_tensor(am, TH_I64, 3, (int64_t)2, (int64_t)1, (int64_t)4);
  check_tensor(call1(tr, "ltorch.argmax", x), TH_I64, 0);
  th_arg mx = call3(tr, "torch.max", x, th_arg_int(-1), th_arg_bool(false));
  assert_int_equal(mx.kind, TH_ARG_TUPLE);
  check_tensor(mx.u.seq.items[0], TH_BF16, 2, (int64_t)2, (int64_t)3);
  check_tensor(mx.u.seq.items[1], TH_I64, 2, (int64_t)2, (int64_t)3);
  check_tensor(call1(tr, "torch.max", x), TH_BF16, 0);
  check_tensor(call2(tr, "ltorch.min", x, x), TH_BF16, 3, (int64_t)2, (int64_t)3, (int64_t)4);
  th_arg dup[2] = {x, ints(items, 2, (int64_t)1, (int64_t)-2)};
  expect_error(tr, "ltorch.sum", 2, dup, 0, NULL, NULL, TH_ERR_RUNTIME, "Duplicate value");
  finish(tr, s);
}

/* ---- linalg ------------------------------------------------------------------------------------------ */

static void test_matmul(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg a2 = tensor(tr, "a2", TH_F32, 2, (int64_t)2, (int64_t)3);
  th_arg b2 = tensor(tr, "b2", TH_F32, 2, (int64_t)3, (int64_t)4);
  th_arg a3 = tensor(tr, "a3", TH_F32, 3, (int64_t)5, (int64_t)2, (int64_t)3);
  th_arg v3 = tensor(tr, "v3", TH_F32, 1, (int64_t)3);
  th_arg a4 = tensor(tr, "a4", TH_F32, 4, (int64_t)2, (int64_t)1, (int64_t)2, (int64_t)3);
  th_arg b3 = tensor(tr, "b3", TH_F32, 3, (int64_t)5, (int64_t)3, (int64_t)4);
  check_tensor(call2(tr, "ltorch.matmul", a2, b2), TH_F32, 2, (int64_t)2, (int64_t)4);
  check_subs(last_bsym(tr), "prims.matmul", NULL);
  /* ND @ 2-D: fold the batch into the rows */
  check_tensor(call2(tr, "torch.matmul", a3, b2), TH_F32, 3, (int64_t)5, (int64_t)2, (int64_t)4);
  check_subs(last_bsym(tr), "prims.reshape", "prims.matmul", "prims.reshape", NULL);
  /* vectors */
  check_tensor(call2(tr, "ltorch.matmul", v3, b2), TH_F32, 1, (int64_t)4);
  check_tensor(call2(tr, "ltorch.matmul", a3, v3), TH_F32, 2, (int64_t)5, (int64_t)2);
  check_tensor(call2(tr, "ltorch.matmul", v3, v3), TH_F32, 0);
  /* batch broadcasting: [2,1,2,3] @ [5,3,4] -> [2,5,2,4] */
  check_tensor(call2(tr, "ltorch.matmul", a4, b3), TH_F32, 4, (int64_t)2, (int64_t)5, (int64_t)2, (int64_t)4);
  check_subs(last_bsym(tr), "prims.broadcast_in_dim", "prims.broadcast_in_dim", "prims.matmul", NULL);
  /* 2-D @ 3-D expands a */
  check_tensor(call2(tr, "ltorch.matmul", a2, b3), TH_F32, 3, (int64_t)5, (int64_t)2, (int64_t)4);
  th_arg bad[2] = {a2, a2};
  expect_error(tr, "ltorch.matmul", 2, bad, 0, NULL, NULL, TH_ERR_RUNTIME,
               "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)");
  /* bmm / mm / linear / addmm / outer */
  th_arg x3 = tensor(tr, "x3", TH_F32, 3, (int64_t)5, (int64_t)3, (int64_t)2);
  check_tensor(call2(tr, "ltorch.bmm", a3, x3), TH_F32, 3, (int64_t)5, (int64_t)2, (int64_t)2);
  expect_error(tr, "ltorch.bmm", 2, (th_arg[]){a3, b2}, 0, NULL, NULL, TH_ERR_RUNTIME, "batch2 must be a 3D tensor");
  check_tensor(call2(tr, "ltorch.mm", a2, b2), TH_F32, 2, (int64_t)2, (int64_t)4);
  th_arg w = tensor(tr, "w", TH_F32, 2, (int64_t)7, (int64_t)3);
  th_arg bias = tensor(tr, "bias", TH_F32, 1, (int64_t)7);
  th_arg lin = call3(tr, "torch.nn.functional.linear", a3, w, bias);
  check_tensor(lin, TH_F32, 3, (int64_t)5, (int64_t)2, (int64_t)7);
  check_subs(last_bsym(tr), "prims.linear", NULL);
  check_tensor(call2(tr, "ltorch.linear", a3, w), TH_F32, 3, (int64_t)5, (int64_t)2, (int64_t)7);
  th_arg bias4 = tensor(tr, "bias4", TH_F32, 1, (int64_t)4);
  check_tensor(call3(tr, "ltorch.addmm", bias4, a2, b2), TH_F32, 2, (int64_t)2, (int64_t)4);
  th_arg v4 = tensor(tr, "v4", TH_F32, 1, (int64_t)4);
  check_tensor(call2(tr, "ltorch.outer", v3, v4), TH_F32, 2, (int64_t)3, (int64_t)4);
  finish(tr, lin);
}

/* ---- nn ------------------------------------------------------------------------------------------------- */

static void test_activations(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_BF16, 2, (int64_t)4, (int64_t)8);
  th_arg g = call1(tr, "torch.nn.functional.gelu", x);
  check_tensor(g, TH_BF16, 2, (int64_t)4, (int64_t)8);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.mul", "prims.erf", "prims.add", "prims.mul",
             "prims.mul", "prims.convert_element_type", NULL);
  const char *kw[1] = {"approximate"};
  th_arg tanh_[1] = {th_arg_str("tanh")};
  check_tensor(call_kw(tr, "ltorch.gelu", 1, &x, 1, kw, tanh_), TH_BF16, 2, (int64_t)4, (int64_t)8);
  assert_int_equal(count_subs_named(last_bsym(tr), "prims.tanh"), 1);
  th_arg bogus[1] = {th_arg_str("bogus")};
  expect_error(tr, "ltorch.gelu", 1, &x, 1, kw, bogus, TH_ERR_VALUE, "approximate=bogus");
  check_tensor(call1(tr, "ltorch.silu", x), TH_BF16, 2, (int64_t)4, (int64_t)8);
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.neg", "prims.exp", "prims.add", "prims.div",
             "prims.convert_element_type", NULL);
  th_arg r = call1(tr, "torch.relu", x);
  check_tensor(r, TH_BF16, 2, (int64_t)4, (int64_t)8);
  check_subs(last_bsym(tr), "ltorch.le", "ltorch.where", NULL);
  check_tensor(call1(tr, "ltorch.sigmoid", x), TH_BF16, 2, (int64_t)4, (int64_t)8);
  finish(tr, r);
}

static void test_softmax_norms(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_BF16, 3, (int64_t)2, (int64_t)5, (int64_t)8);
  th_arg w = tensor(tr, "w", TH_BF16, 1, (int64_t)8);
  th_arg b = tensor(tr, "b", TH_BF16, 1, (int64_t)8);
  th_arg items[2];
  th_arg s = call2(tr, "torch.softmax", x, th_arg_int(-1));
  check_tensor(s, TH_BF16, 3, (int64_t)2, (int64_t)5, (int64_t)8);
  check_subs(last_bsym(tr), "prims.convert_element_type", "ltorch.amax", "ltorch.sub", "ltorch.exp", "ltorch.sum",
             "ltorch.true_divide", "prims.convert_element_type", NULL);
  const char *kw[1] = {"dtype"};
  th_arg dt[1] = {th_arg_dtype(TH_F32)};
  th_arg xd[2] = {x, th_arg_int(1)};
  check_tensor(call_kw(tr, "ltorch.softmax", 2, xd, 1, kw, dt), TH_F32, 3, (int64_t)2, (int64_t)5, (int64_t)8);
  check_tensor(call2(tr, "ltorch.log_softmax", x, th_arg_int(1)), TH_BF16, 3, (int64_t)2, (int64_t)5, (int64_t)8);
  check_tensor(call2(tr, "ltorch.logsumexp", x, th_arg_int(2)), TH_BF16, 2, (int64_t)2, (int64_t)5);
  /* layer_norm: var_mean in f32, one conversion back */
  th_arg ln = call(tr, "torch.nn.functional.layer_norm", 4, (th_arg[]){x, ints(items, 1, (int64_t)8), w, b});
  check_tensor(ln, TH_BF16, 3, (int64_t)2, (int64_t)5, (int64_t)8);
  const th_bsym *lb = last_bsym(tr);
  assert_int_equal(count_subs_named(lb, "prims.var_mean"), 1);
  assert_int_equal(count_subs_named(lb, "prims.rsqrt"), 1);
  assert_string_equal(th_bsym_qualname(th_bsym_subsymbol(lb, th_bsym_num_subsymbols(lb) - 1)),
                      "prims.convert_element_type");
  th_arg bad[2] = {x, ints(items, 1, (int64_t)5)};
  expect_error(tr, "ltorch.layer_norm", 2, bad, 0, NULL, NULL, TH_ERR_RUNTIME, "expected input with shape [*, 5]");
  th_arg badw[3] = {x, ints(items, 1, (int64_t)8), tensor(tr, "w5", TH_BF16, 1, (int64_t)5)};
  expect_error(tr, "ltorch.layer_norm", 3, badw, 0, NULL, NULL, TH_ERR_RUNTIME, "Expected weight to be of same shape");
  /* rms_norm (LLaMA) */
  th_arg rn = call3(tr, "ltorch.rms_norm", x, ints(items, 1, (int64_t)8), w);
  check_tensor(rn, TH_BF16, 3, (int64_t)2, (int64_t)5, (int64_t)8);
  assert_int_equal(count_subs_named(last_bsym(tr), "prims.rsqrt"), 1);
  finish(tr, ln);
}

static void test_embedding(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg w = tensor(tr, "w", TH_F32, 2, (int64_t)10, (int64_t)8);
  th_arg i1 = tensor(tr, "ind1", TH_I64, 1, (int64_t)6);
  th_arg i2 = tensor(tr, "ind2", TH_I64, 2, (int64_t)2, (int64_t)3);
  check_tensor(call2(tr, "ltorch.embedding", i1, w), TH_F32, 2, (int64_t)6, (int64_t)8);
  check_subs(last_bsym(tr), "prims.take", NULL);
  th_arg e = call2(tr, "torch.nn.functional.embedding", i2, w);
  check_tensor(e, TH_F32, 3, (int64_t)2, (int64_t)3, (int64_t)8);
  check_subs(last_bsym(tr), "prims.reshape", "prims.take", "prims.reshape", NULL);
  th_arg f = tensor(tr, "f", TH_F32, 1, (int64_t)3);
  expect_error(tr, "ltorch.embedding", 2, (th_arg[]){f, w}, 0, NULL, NULL, TH_ERR_RUNTIME, "'indices'");
  finish(tr, e);
}

static void test_sdpa(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg q = tensor(tr, "q", TH_BF16, 4, (int64_t)2, (int64_t)4, (int64_t)6, (int64_t)8);
  th_arg k = tensor(tr, "k", TH_BF16, 4, (int64_t)2, (int64_t)4, (int64_t)7, (int64_t)8);
  th_arg v = tensor(tr, "v", TH_BF16, 4, (int64_t)2, (int64_t)4, (int64_t)7, (int64_t)16);
  th_arg mask = tensor(tr, "mask", TH_BOOL, 2, (int64_t)6, (int64_t)7);
  th_arg fmask = tensor(tr, "fmask", TH_BF16, 4, (int64_t)2, (int64_t)1, (int64_t)6, (int64_t)7);
  const char *kw[1] = {"is_causal"};
  th_arg causal[1] = {th_arg_bool(true)};
  th_arg qkv[3] = {q, k, v};
  th_arg o = call_kw(tr, "torch.nn.functional.scaled_dot_product_attention", 3, qkv, 1, kw, causal);
  check_tensor(o, TH_BF16, 4, (int64_t)2, (int64_t)4, (int64_t)6, (int64_t)16);
  /* float32/bfloat16 without dropout or a float mask: the fused flash-attention prim (torch/attention.c) */
  check_subs(last_bsym(tr), "prims.scaled_dot_product_flash_attention", NULL);
  th_arg qkvm[4] = {q, k, v, mask};
  call(tr, "ltorch.scaled_dot_product_attention", 4, qkvm);
  check_subs(last_bsym(tr), "prims.scaled_dot_product_flash_attention", NULL);
  /* the decomposition (THUNDER_SDPA_FLASH=0 turns the fused path off) */
  assert_int_equal(setenv("THUNDER_SDPA_FLASH", "0", 1), 0);
  o = call_kw(tr, "torch.nn.functional.scaled_dot_product_attention", 3, qkv, 1, kw, causal);
  /* bf16: the logits, the scaling and the softmax in float32 (rows of -inf logits give 0: amax, eq and
   * the two wheres), the probabilities rounded back for @ v */
  check_subs(last_bsym(tr), "prims.convert_element_type", "prims.convert_element_type", "ltorch.transpose",
             "ltorch.matmul", "ltorch.mul", "ltorch.tril", "ltorch.amax", "ltorch.eq", "ltorch.where", "ltorch.softmax",
             "ltorch.where", "prims.convert_element_type", "ltorch.matmul", NULL);
  check_tensor(call(tr, "ltorch.scaled_dot_product_attention", 4, qkvm), TH_BF16, 4, (int64_t)2, (int64_t)4, (int64_t)6,
               (int64_t)16);
  /* the mask's where, then _safe_softmax's two (fully masked rows: logits 0 before, attn 0 after) */
  assert_int_equal(count_subs_named(last_bsym(tr), "ltorch.where"), 3);
  assert_int_equal(unsetenv("THUNDER_SDPA_FLASH"), 0);
  th_arg qkvf[5] = {q, k, v, fmask, th_arg_float(0.1)};
  check_tensor(call(tr, "ltorch.scaled_dot_product_attention", 5, qkvf), TH_BF16, 4, (int64_t)2, (int64_t)4, (int64_t)6,
               (int64_t)16);
  assert_int_equal(count_subs_named(last_bsym(tr), "ltorch.dropout"), 1);
  expect_error(tr, "ltorch.scaled_dot_product_attention", 4, qkvm, 1, kw, causal, TH_ERR_VALUE,
               "Explicit attn_mask should not be set when is_causal=True");
  /* enable_gqa: 4 query heads over 2 key/value heads, folded into the rows of one product per kv head */
  th_arg k2 = tensor(tr, "k2", TH_BF16, 4, (int64_t)2, (int64_t)2, (int64_t)7, (int64_t)8);
  th_arg v2 = tensor(tr, "v2", TH_BF16, 4, (int64_t)2, (int64_t)2, (int64_t)7, (int64_t)16);
  th_arg k3 = tensor(tr, "k3", TH_BF16, 4, (int64_t)2, (int64_t)3, (int64_t)7, (int64_t)8);
  const char *gkw[1] = {"enable_gqa"};
  th_arg gon[1] = {th_arg_bool(true)};
  th_arg qkv2[3] = {q, k2, v2}, qkv3[3] = {q, k3, k3};
  check_tensor(call_kw(tr, "ltorch.scaled_dot_product_attention", 3, qkv2, 1, gkw, gon), TH_BF16, 4, (int64_t)2,
               (int64_t)4, (int64_t)6, (int64_t)16);
  expect_error(tr, "ltorch.scaled_dot_product_attention", 3, qkv3, 1, gkw, gon, TH_ERR_RUNTIME,
               "Number of heads in key and value must divide the number of heads in query, but got query.size(-3)=4, "
               "key.size(-3)=3 and value.size(-3)=3");
  finish(tr, o);
}

static void test_losses_dropout(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  th_arg logits = tensor(tr, "logits", TH_BF16, 2, (int64_t)4, (int64_t)10);
  th_arg target = tensor(tr, "target", TH_I64, 1, (int64_t)4);
  th_arg probs = tensor(tr, "probs", TH_F32, 2, (int64_t)4, (int64_t)10);
  th_arg cw = tensor(tr, "cw", TH_F32, 1, (int64_t)10);
  th_arg ce = call2(tr, "torch.nn.functional.cross_entropy", logits, target);
  check_tensor(ce, TH_BF16, 0);
  assert_int_equal(count_subs_named(last_bsym(tr), "ltorch.log_softmax"), 1);
  /* reduction='none', weights, ignore_index, label smoothing */
  const char *kw[4] = {"weight", "ignore_index", "reduction", "label_smoothing"};
  th_arg kv[4] = {cw, th_arg_int(3), th_arg_str("none"), th_arg_float(0.1)};
  th_arg lt[2] = {logits, target};
  check_tensor(call_kw(tr, "ltorch.cross_entropy", 2, lt, 4, kw, kv), TH_BF16, 1, (int64_t)4);
  kv[2] = th_arg_str("mean");
  check_tensor(call_kw(tr, "ltorch.cross_entropy", 2, lt, 4, kw, kv), TH_BF16, 0);
  kv[2] = th_arg_str("sum");
  check_tensor(call_kw(tr, "ltorch.cross_entropy", 2, lt, 4, kw, kv), TH_BF16, 0);
  /* probability targets; 3-D (N, C, d) input with (N, d) targets */
  check_tensor(call2(tr, "ltorch.cross_entropy", probs, probs), TH_F32, 0);
  th_arg l3 = tensor(tr, "l3", TH_F32, 3, (int64_t)2, (int64_t)5, (int64_t)7);
  th_arg t3 = tensor(tr, "tgt3", TH_I64, 2, (int64_t)2, (int64_t)7);
  check_tensor(call2(tr, "ltorch.cross_entropy", l3, t3), TH_F32, 0);
  th_arg nl = call2(tr, "torch.nn.functional.nll_loss", probs, target);
  check_tensor(nl, TH_F32, 0);
  th_arg badt = tensor(tr, "badt", TH_I64, 1, (int64_t)5);
  expect_error(tr, "ltorch.cross_entropy", 2, (th_arg[]){logits, badt}, 0, NULL, NULL, TH_ERR_RUNTIME,
               "Expected target size [4], got [5]");
  const char *rkw[1] = {"reduction"};
  th_arg rv[1] = {th_arg_str("avg")};
  expect_error(tr, "ltorch.cross_entropy", 2, lt, 1, rkw, rv, TH_ERR_VALUE, "avg is not a valid value for reduction");
  check_tensor(call2(tr, "ltorch.mse_loss", probs, probs), TH_F32, 0);
  /* dropout */
  th_arg d = call1(tr, "torch.nn.functional.dropout", logits);
  check_tensor(d, TH_BF16, 2, (int64_t)4, (int64_t)10);
  /* the draw: the generator's state, then a uniform read from it */
  assert_int_equal(count_subs_named(last_bsym(tr), "prims.get_and_update_rng_state"), 1);
  assert_int_equal(count_subs_named(last_bsym(tr), "prims.uniform_philox"), 1);
  assert_int_equal(count_subs_named(last_bsym(tr), "prims.uniform"), 0);
  check_tensor(call2(tr, "ltorch.dropout", logits, th_arg_float(0.0)), TH_BF16, 2, (int64_t)4, (int64_t)10);
  check_subs(last_bsym(tr), "prims.shallow_copy", NULL);
  call3(tr, "ltorch.dropout", logits, th_arg_float(0.5), th_arg_bool(false));
  check_subs(last_bsym(tr), "prims.shallow_copy", NULL);
  call2(tr, "ltorch.dropout", logits, th_arg_float(1.0));
  check_subs(last_bsym(tr), "ltorch.mul", NULL);
  expect_error(tr, "ltorch.dropout", 2, (th_arg[]){logits, th_arg_float(1.5)}, 0, NULL, NULL, TH_ERR_VALUE,
               "between 0 and 1");
  finish(tr, ce);
}

/* ---- whole blocks -------------------------------------------------------------------------------------- */

/* A GPT-2 block as nanoGPT writes it: ln -> qkv linear -> split -> heads -> causal sdpa -> proj ->
 * residual -> ln -> mlp (gelu tanh) -> residual. */
static void test_gpt2_block(void **state) {
  (void)state;
  const int64_t B = 2, T = 5, C = 16, H = 4;
  th_trace *tr = new_trace();
  th_arg x = tensor(tr, "x", TH_F32, 3, B, T, C);
  th_arg ln_w = tensor(tr, "ln_w", TH_F32, 1, C), ln_b = tensor(tr, "ln_b", TH_F32, 1, C);
  th_arg w_attn = tensor(tr, "w_attn", TH_F32, 2, 3 * C, C), b_attn = tensor(tr, "b_attn", TH_F32, 1, 3 * C);
  th_arg w_proj = tensor(tr, "w_proj", TH_F32, 2, C, C), b_proj = tensor(tr, "b_proj", TH_F32, 1, C);
  th_arg w_fc = tensor(tr, "w_fc", TH_F32, 2, 4 * C, C), b_fc = tensor(tr, "b_fc", TH_F32, 1, 4 * C);
  th_arg w_fc2 = tensor(tr, "w_fc2", TH_F32, 2, C, 4 * C), b_fc2 = tensor(tr, "b_fc2", TH_F32, 1, C);
  th_arg items[4];
  th_arg h = call(tr, "ltorch.layer_norm", 4, (th_arg[]){x, ints(items, 1, C), ln_w, ln_b});
  th_arg qkv = call3(tr, "ltorch.linear", h, w_attn, b_attn);
  th_arg parts = call3(tr, "ltorch.split", qkv, th_arg_int(C), th_arg_int(2));
  th_arg heads[3];
  for (int i = 0; i < 3; i++) {
    th_arg v = call2(tr, "Tensor.view", parts.u.seq.items[i], ints(items, 4, B, T, H, C / H));
    heads[i] = call3(tr, "ltorch.transpose", v, th_arg_int(1), th_arg_int(2));
  }
  const char *kw[1] = {"is_causal"};
  th_arg causal[1] = {th_arg_bool(true)};
  th_arg y = call_kw(tr, "ltorch.scaled_dot_product_attention", 3, heads, 1, kw, causal);
  y = call3(tr, "ltorch.transpose", y, th_arg_int(1), th_arg_int(2));
  y = call1(tr, "ltorch.contiguous", y);
  y = call2(tr, "ltorch.view", y, ints(items, 3, B, T, C));
  y = call3(tr, "ltorch.linear", y, w_proj, b_proj);
  th_arg x1 = call2(tr, "ltorch.add", x, y);
  th_arg h2 = call(tr, "ltorch.layer_norm", 4, (th_arg[]){x1, ints(items, 1, C), ln_w, ln_b});
  th_arg f = call3(tr, "ltorch.linear", h2, w_fc, b_fc);
  const char *gkw[1] = {"approximate"};
  th_arg tanh_[1] = {th_arg_str("tanh")};
  f = call_kw(tr, "ltorch.gelu", 1, &f, 1, gkw, tanh_);
  f = call3(tr, "ltorch.linear", f, w_fc2, b_fc2);
  th_arg out = call2(tr, "ltorch.add", x1, f);
  check_tensor(out, TH_F32, 3, B, T, C);
  finish(tr, out);
}

/* A LLaMA block's pieces: embedding, rms_norm, rotary embedding by slicing and cat, SwiGLU. */
static void test_llama_block(void **state) {
  (void)state;
  const int64_t B = 2, T = 6, C = 16, H = 2, D = 8, V = 32;
  th_trace *tr = new_trace();
  th_arg idx = tensor(tr, "idx", TH_I64, 2, B, T);
  th_arg wte = tensor(tr, "wte", TH_BF16, 2, V, C);
  th_arg norm_w = tensor(tr, "norm_w", TH_BF16, 1, C);
  th_arg wq = tensor(tr, "wq", TH_BF16, 2, C, C);
  th_arg cos_ = tensor(tr, "cos", TH_BF16, 2, T, D), sin_ = tensor(tr, "sin", TH_BF16, 2, T, D);
  th_arg w1 = tensor(tr, "w1", TH_BF16, 2, 3 * C, C), w3 = tensor(tr, "w3", TH_BF16, 2, 3 * C, C);
  th_arg w2 = tensor(tr, "w2", TH_BF16, 2, C, 3 * C);
  th_arg items[4], key[4];
  th_arg x = call2(tr, "ltorch.embedding", idx, wte);
  th_arg h = call3(tr, "ltorch.rms_norm", x, ints(items, 1, C), norm_w);
  th_arg q = call2(tr, "ltorch.linear", h, wq);
  q = call2(tr, "ltorch.reshape", q, ints(items, 4, B, T, H, D));
  q = call3(tr, "ltorch.transpose", q, th_arg_int(1), th_arg_int(2)); /* B H T D */
  /* rotate_half: cat(-x[..., D/2:], x[..., :D/2]) */
  key[0] = ellipsis();
  key[1] = slice(true, D / 2, false, 0, false, 0);
  th_arg x2 = call2(tr, "ltorch.getitem", q, th_arg_tuple(2, key));
  key[1] = slice(false, 0, true, D / 2, false, 0);
  th_arg x1 = call2(tr, "ltorch.getitem", q, th_arg_tuple(2, key));
  th_arg l[2] = {call1(tr, "ltorch.neg", x2), x1};
  th_arg rot = call2(tr, "ltorch.cat", th_arg_list(2, l), th_arg_int(-1));
  th_arg qr = call2(tr, "ltorch.add", call2(tr, "ltorch.mul", q, cos_), call2(tr, "ltorch.mul", rot, sin_));
  check_tensor(qr, TH_BF16, 4, B, H, T, D);
  /* SwiGLU MLP */
  th_arg a = call1(tr, "ltorch.silu", call2(tr, "ltorch.linear", h, w1));
  th_arg g = call2(tr, "ltorch.mul", a, call2(tr, "ltorch.linear", h, w3));
  th_arg out = call2(tr, "ltorch.add", x, call2(tr, "ltorch.linear", g, w2));
  check_tensor(out, TH_BF16, 3, B, T, C);
  th_arg ret[2] = {qr, out};
  finish(tr, th_arg_tuple(2, ret));
}

/* Ops recorded on CUDA values: devices follow the inputs; a CPU scalar tensor mixes with them. */
static void test_devices(void **state) {
  (void)state;
  th_trace *tr = new_trace();
  int64_t s[2] = {2, 2};
  th_arg a = th_arg_value(input_on(tr, "a", TH_F32, cuda0, 2, s));
  th_arg c = th_arg_value(input_on(tr, "c", TH_F32, cpu, 0, s));
  th_arg r = call2(tr, "ltorch.add", a, c);
  check_tensor(r, TH_F32, 2, (int64_t)2, (int64_t)2);
  assert_int_equal(val(r)->device.type, TH_CUDA);
  check_subs(last_bsym(tr), "prims.add", NULL);
  finish(tr, r);
}

/* Recording under allocation failure: every outcome is TH_OK or an error status, never a crash or a
 * leak (run under ASan in the sanitizer build). */
static th_status record_block(th_trace *tr) {
  int64_t s3[3] = {2, 4, 8}, s1[1] = {8}, s2[2] = {8, 8};
  th_value *x = th_trace_add_tensor_input(tr, NULL, TH_BF16, cpu, 3, s3);
  th_value *w = th_trace_add_tensor_input(tr, NULL, TH_BF16, cpu, 1, s1);
  th_value *m = th_trace_add_tensor_input(tr, NULL, TH_BF16, cpu, 2, s2);
  if (!x || !w || !m) return th_last_status();
  th_arg items[1] = {th_arg_int(8)}, out, t;
  th_arg ln[3] = {th_arg_value(x), th_arg_list(1, items), th_arg_value(w)};
  TH_TRY(th_trace_call(tr, "ltorch.layer_norm", 3, ln, 0, NULL, NULL, &t));
  th_arg lin[2] = {t, th_arg_value(m)};
  TH_TRY(th_trace_call(tr, "ltorch.linear", 2, lin, 0, NULL, NULL, &t));
  th_arg sm[2] = {t, th_arg_int(-1)};
  TH_TRY(th_trace_call(tr, "ltorch.softmax", 2, sm, 0, NULL, NULL, &t));
  th_arg sp[3] = {t, th_arg_int(3), th_arg_int(-1)};
  TH_TRY(th_trace_call(tr, "ltorch.split", 3, sp, 0, NULL, NULL, &out));
  th_arg ce[2] = {th_arg_value(m), th_arg_int(0)};
  TH_TRY(th_trace_call(tr, "ltorch.getitem", 2, ce, 0, NULL, NULL, &t));
  return th_trace_set_return(tr, out);
}

static void test_alloc_failures(void **state) {
  (void)state;
  int ok = 0;
  for (long n = 1; n < 400 && !ok; n++) {
    th_alloc_fail_after(n);
    th_trace *tr = th_trace_new(NULL);
    th_status st = tr ? record_block(tr) : TH_ERR_NOMEM;
    th_alloc_fail_after(0);
    if (st == TH_OK)
      ok = 1;
    else
      assert_int_equal(st, TH_ERR_NOMEM);
    th_trace_free(tr);
  }
  assert_true(ok); /* eventually enough allocations succeed */
}

/* Every ltorch op has a schema that parsed, a decomposition and a qualified name. */
static void test_table(void **state) {
  (void)state;
  int n = 0;
  for (int id = 0; id < TH_OP_COUNT; id++) {
    const th_symbol *s = th_symbol_get((th_op_id)id);
    if (s->is_prim) continue;
    n++;
    assert_non_null(s->decomp);
    assert_non_null(s->aliases);
    assert_string_equal(s->module, "ltorch");
  }
  assert_true(n > 100);
  assert_ptr_equal(th_symbol_lookup("torch.nn.functional.linear"), th_symbol_get(TH_OP_ltorch_linear));
  assert_ptr_equal(th_symbol_lookup("Tensor.to"), th_symbol_get(TH_OP_ltorch_to));
  assert_ptr_equal(th_symbol_lookup("torch.transpose"), th_symbol_get(TH_OP_ltorch_transpose));
  assert_ptr_equal(th_symbol_lookup("add"), th_symbol_get(TH_OP_ltorch_add));
  assert_true(th_symbol_get(TH_OP_ltorch_matmul)->tags & TH_TAG_AC_LOWER);
  /* softmax runs in float32 under CUDA autocast only (PyTorch's CPU list does not have it); prod under both */
  assert_true(th_symbol_get(TH_OP_ltorch_softmax)->tags & TH_TAG_AC_FP32_CUDA);
  assert_true(th_symbol_get(TH_OP_ltorch_prod)->tags & TH_TAG_AC_FP32);
  assert_true(th_symbol_get(TH_OP_ltorch_cat)->tags & TH_TAG_AC_PROMOTE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_promote_bf16_add),
    cmocka_unit_test(test_promote_scalars),
    cmocka_unit_test(test_mul_number_printed_trace),
    cmocka_unit_test(test_promote_lattice),
    cmocka_unit_test(test_promote_errors),
    cmocka_unit_test(test_elementwise_ops),
    cmocka_unit_test(test_where_clamp),
    cmocka_unit_test(test_to),
    cmocka_unit_test(test_fp8_saturated),
    cmocka_unit_test(test_creation),
    cmocka_unit_test(test_reshape),
    cmocka_unit_test(test_layout_ops),
    cmocka_unit_test(test_getitem),
    cmocka_unit_test(test_cat_split),
    cmocka_unit_test(test_unbind),
    cmocka_unit_test(test_reductions),
    cmocka_unit_test(test_matmul),
    cmocka_unit_test(test_activations),
    cmocka_unit_test(test_softmax_norms),
    cmocka_unit_test(test_embedding),
    cmocka_unit_test(test_sdpa),
    cmocka_unit_test(test_losses_dropout),
    cmocka_unit_test(test_gpt2_block),
    cmocka_unit_test(test_llama_block),
    cmocka_unit_test(test_devices),
    cmocka_unit_test(test_alloc_failures),
    cmocka_unit_test(test_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
