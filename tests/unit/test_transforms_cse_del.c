/* test_transforms_cse_del.c — Common Subexpression Elimination and Delete Last Used
 * (thunder/transform.h), and Delete Last Used in the execution pipeline (th_program_trace).
 *
 * References are independent of the code under test: structural expectations derived by hand from
 * Thunder's transforms (CSE: Thunder's docstring example, key = symbol + rewritten args; never
 * random / in-place / copy_; same executor only; Delete Last Used's rules), values computed by hand,
 * and the del lines of Thunder's own seed 000 trace (`t0 = linear(x, w, None)` / `del x, w`). Every
 * result must pass th_trace_verify. A generic checker asserts the del rules on every del trace: RETURN
 * last, no del after it, no returned value deleted, every intermediate and input deleted exactly once,
 * right after the bsym that last uses it and never used afterwards. */
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

static const th_device CPU = {TH_CPU, 0};
static const int64_t S22[2] = {2, 2};

/* ---- helpers ---------------------------------------------------------------------------------------- */

static th_value *input(th_trace *tr, const char *name) {
  th_value *v = th_trace_add_tensor_input(tr, name, TH_F32, CPU, 2, S22);
  assert_non_null(v);
  return v;
}

static th_arg callkw(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *kw,
                     const th_arg *kwargs) {
  th_arg out;
  if (th_trace_call(tr, op, n, args, nkw, kw, kwargs, &out) != TH_OK) fail_msg("%s: %s", op, th_last_error());
  return out;
}

static th_value *call(th_trace *tr, const char *op, int n, const th_arg *args) {
  th_arg out = callkw(tr, op, n, args, 0, NULL, NULL);
  assert_int_equal(out.kind, TH_ARG_VALUE);
  return out.u.value;
}

static th_value *call1(th_trace *tr, const char *op, th_value *a) {
  th_arg args[1] = {th_arg_value(a)};
  return call(tr, op, 1, args);
}

static th_value *call2(th_trace *tr, const char *op, th_value *a, th_value *b) {
  th_arg args[2] = {th_arg_value(a), th_arg_value(b)};
  return call(tr, op, 2, args);
}

static void ret(th_trace *tr, int n, th_value **vals) {
  th_arg items[8];
  for (int i = 0; i < n; i++) items[i] = th_arg_value(vals[i]);
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(n, items)), TH_OK);
}

static void verify(const th_trace *t) {
  if (th_trace_verify(t) != TH_OK) {
    char *s = th_trace_print(t, -1);
    fail_msg("verify: %s\n%s", th_last_error(), s ? s : "");
  }
}

static th_trace *cse(const th_trace *tr) {
  th_trace *o = NULL;
  if (th_transform_cse(tr, &o) != TH_OK) fail_msg("cse: %s", th_last_error());
  verify(o);
  assert_non_null(o->provenance);
  assert_true(strncmp(o->provenance, "Common Subexpression Elimination (took ", 39) == 0);
  return o;
}

static void check_del_trace(const th_trace *t);

static th_trace *dlu(const th_trace *tr) {
  th_trace *o = NULL;
  if (th_transform_del_last_used(tr, &o) != TH_OK) fail_msg("del_last_used: %s", th_last_error());
  verify(o);
  assert_non_null(o->provenance);
  assert_true(strncmp(o->provenance, "Delete Last Used (took ", 23) == 0);
  check_del_trace(o);
  return o;
}

static int count_op(const th_trace *t, th_op_id id) {
  int n = 0;
  for (int i = 0; i < th_trace_num_bsyms(t); i++) n += th_trace_bsym(t, i)->sym->id == id;
  return n;
}

static const th_bsym *find_op(const th_trace *t, th_op_id id, int nth) {
  for (int i = 0; i < th_trace_num_bsyms(t); i++)
    if (th_trace_bsym(t, i)->sym->id == id && nth-- == 0) return th_trace_bsym(t, i);
  fail_msg("op %d not found", (int)id);
  return NULL;
}

/* The producer of v at the top level, NULL if none. */
static const th_bsym *producer(const th_trace *t, const th_value *v) {
  for (int i = 0; i < th_trace_num_bsyms(t); i++) {
    const th_bsym *b = th_trace_bsym(t, i);
    if (b->out.kind == TH_ARG_VALUE && b->out.u.value == v) return b;
  }
  return NULL;
}

static const th_value *ret_item(const th_trace *t, int i) {
  th_arg o = th_trace_output(t);
  assert_int_equal(o.kind, TH_ARG_TUPLE);
  assert_true(i < o.u.seq.n);
  assert_int_equal(o.u.seq.items[i].kind, TH_ARG_VALUE);
  return o.u.seq.items[i].u.value;
}

static const th_value *arg_value(const th_bsym *b, int i) {
  assert_true(i < b->nargs);
  assert_int_equal(b->args[i].kind, TH_ARG_VALUE);
  return b->args[i].u.value;
}

/* ---- the del-rules checker ------------------------------------------------------------------------ */

typedef struct {
  uint32_t id;
  bool found;
} find_ctx;

static void find_cb(th_value *v, void *p) {
  find_ctx *c = p;
  if (v && v->id == c->id) c->found = true;
}

static bool arg_has(const th_arg *a, const th_value *v) {
  find_ctx c = {v->id, false};
  th_arg_foreach_value(a, find_cb, &c);
  return c.found;
}

static bool bsym_mentions(const th_bsym *b, const th_value *v) {
  for (int i = 0; i < b->nargs; i++)
    if (arg_has(&b->args[i], v)) return true;
  for (int i = 0; i < b->nkwargs; i++)
    if (arg_has(&b->kwargs[i], v)) return true;
  return arg_has(&b->out, v);
}

static bool is_del(const th_bsym *b) { return b->sym->id == TH_OP_prims_python_del; }

/* How many times v is deleted in t, and checks on each del of it. */
static int times_deleted(const th_trace *t, const th_value *v) {
  int n = 0, nb = th_trace_num_bsyms(t);
  for (int k = 0; k < nb; k++) {
    const th_bsym *d = th_trace_bsym(t, k);
    if (!is_del(d)) continue;
    assert_int_equal(d->nargs, 1);
    assert_int_equal(d->args[0].kind, TH_ARG_TUPLE); /* the printer's canonical del */
    bool here = false;
    for (int i = 0; i < d->args[0].u.seq.n; i++) {
      assert_int_equal(d->args[0].u.seq.items[i].kind, TH_ARG_VALUE);
      if (d->args[0].u.seq.items[i].u.value->id == v->id) here = true;
    }
    if (!here) continue;
    n++;
    /* never used after its del */
    for (int j = k + 1; j < nb; j++)
      if (!is_del(th_trace_bsym(t, j))) assert_false(bsym_mentions(th_trace_bsym(t, j), v));
    /* right after its last use: the bsym just before the del uses or defines it, or (an input
     * nobody uses) only dels come before it */
    bool used_anywhere = false;
    for (int j = 0; j < nb; j++)
      if (!is_del(th_trace_bsym(t, j)) && bsym_mentions(th_trace_bsym(t, j), v)) used_anywhere = true;
    if (used_anywhere) {
      assert_true(k > 0);
      const th_bsym *prev = th_trace_bsym(t, k - 1);
      assert_false(is_del(prev));
      assert_true(bsym_mentions(prev, v));
    } else {
      for (int j = 0; j < k; j++) assert_true(is_del(th_trace_bsym(t, j)));
    }
  }
  return n;
}

static void check_del_trace(const th_trace *t) {
  int nb = th_trace_num_bsyms(t);
  assert_true(nb > 0);
  assert_int_equal(th_trace_bsym(t, nb - 1)->sym->id, TH_OP_prims_python_return); /* RETURN last */
  th_arg out = th_trace_output(t);
  for (int i = 0; i < th_trace_num_inputs(t); i++) {
    const th_value *v = th_trace_input(t, i);
    assert_int_equal(times_deleted(t, v), arg_has(&out, v) ? 0 : 1);
  }
  for (int i = 0; i < nb; i++) {
    const th_bsym *b = th_trace_bsym(t, i);
    if (b->sym->tags & TH_TAG_UTILITY) continue;
    th_arg o = b->out;
    if (o.kind == TH_ARG_VALUE) {
      assert_int_equal(times_deleted(t, o.u.value), arg_has(&out, o.u.value) ? 0 : 1);
    } else if (o.kind == TH_ARG_TUPLE || o.kind == TH_ARG_LIST) {
      for (int k = 0; k < o.u.seq.n; k++)
        if (o.u.seq.items[k].kind == TH_ARG_VALUE)
          assert_int_equal(times_deleted(t, o.u.seq.items[k].u.value), arg_has(&out, o.u.seq.items[k].u.value) ? 0 : 1);
    }
  }
}

/* ---- running ---------------------------------------------------------------------------------------- */

static th_tensor *tensor22(const float v[4]) {
  th_tensor *t = th_tensor_empty(TH_F32, 2, S22);
  assert_non_null(t);
  memcpy(th_tensor_data(t), v, 4 * sizeof(float));
  return t;
}

static th_program *compile_opts(const th_trace *tr, const th_compile_options *o) {
  th_program *p = NULL;
  if (th_program_compile(tr, o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  verify(th_program_trace(p));
  check_del_trace(th_program_trace(p));
  return p;
}

static th_program *compile(const th_trace *tr) { return compile_opts(tr, NULL); }

/* Without the fuser (the default list has it): for tests that count the prims of the execution trace. */
static th_program *compile_unfused(const th_trace *tr) {
  static const char *const ex[] = {"blas", "eager"};
  th_compile_options o = {0};
  o.executors = ex;
  o.nexecutors = 2;
  return compile_opts(tr, &o);
}

static th_tensor **run(th_program *p, int nin, th_tensor **in, int nout_expected) {
  int nout = -1;
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, &nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, nout_expected);
  return out;
}

static void free_outputs(int n, th_tensor **out) {
  for (int i = 0; i < n; i++) th_tensor_release(out[i]);
  free(out);
}

/* ---- CSE ----------------------------------------------------------------------------------------- */

/* A duplicated expression: c = a+b; d = a+b; e = a*a; f = d*b; return c, f. */
static th_trace *duplicate_add_trace(th_value **c_out, th_value **f_out) {
  th_trace *tr = th_trace_new("foo");
  th_value *a = input(tr, "a"), *b = input(tr, "b");
  th_value *c = call2(tr, "ltorch.add", a, b);
  th_value *d = call2(tr, "ltorch.add", a, b);
  (void)call2(tr, "ltorch.mul", a, a);
  th_value *f = call2(tr, "ltorch.mul", d, b);
  th_value *outs[2] = {c, f};
  ret(tr, 2, outs);
  verify(tr);
  if (c_out) *c_out = c;
  if (f_out) *f_out = f;
  return tr;
}

static void check_duplicate_add_values(th_program *p) {
  const float av[4] = {1, 2, 3, 4}, bv[4] = {10, 20, 30, 40};
  /* by hand: c = a + b, f = (a + b) * b */
  const float c_ref[4] = {11, 22, 33, 44}, f_ref[4] = {110, 440, 990, 1760};
  th_tensor *in[2] = {tensor22(av), tensor22(bv)};
  th_tensor **out = run(p, 2, in, 2);
  for (int i = 0; i < 4; i++) {
    assert_true(th_tensor_get_f64(out[0], i) == c_ref[i]);
    assert_true(th_tensor_get_f64(out[1], i) == f_ref[i]);
  }
  free_outputs(2, out);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
}

static void test_cse_duplicate_add(void **state) {
  (void)state;
  th_value *c, *f;
  th_trace *tr = duplicate_add_trace(&c, &f);
  const th_value *a = th_trace_input(tr, 0), *b = th_trace_input(tr, 1);

  /* DCE: no a*a; both adds still there */
  th_trace *d = NULL;
  assert_int_equal(th_transform_dce(tr, &d), TH_OK);
  verify(d);
  assert_int_equal(count_op(d, TH_OP_ltorch_mul), 1);
  assert_int_equal(count_op(d, TH_OP_ltorch_add), 2);
  assert_true(arg_value(find_op(d, TH_OP_ltorch_mul, 0), 0) != a || arg_value(find_op(d, TH_OP_ltorch_mul, 0), 1) != a);

  /* CSE after DCE: one add, computing c; f = c * b; return (c, f) */
  th_trace *e = cse(d);
  assert_int_equal(count_op(e, TH_OP_ltorch_add), 1);
  assert_int_equal(count_op(e, TH_OP_ltorch_mul), 1);
  assert_int_equal(th_trace_num_bsyms(e), 3);
  const th_bsym *add = find_op(e, TH_OP_ltorch_add, 0), *mul = find_op(e, TH_OP_ltorch_mul, 0);
  assert_ptr_equal(add->out.u.value, c);
  assert_ptr_equal(arg_value(add, 0), a);
  assert_ptr_equal(arg_value(add, 1), b);
  assert_ptr_equal(mul->out.u.value, f);
  assert_ptr_equal(arg_value(mul, 0), c); /* d was rewritten to c */
  assert_ptr_equal(arg_value(mul, 1), b);
  /* the decomposition of f reads c too (verify checks it uses only the bsym's arguments) */
  assert_true(mul->nsubs > 0);
  assert_ptr_equal(ret_item(e, 0), c);
  assert_ptr_equal(ret_item(e, 1), f);
  /* the input trace is unchanged */
  assert_int_equal(count_op(d, TH_OP_ltorch_add), 2);

  /* CSE straight on the recorded trace: the dead a*a goes too (CSE is followed by DCE) */
  th_trace *e2 = cse(tr);
  assert_int_equal(count_op(e2, TH_OP_ltorch_add), 1);
  assert_int_equal(count_op(e2, TH_OP_ltorch_mul), 1);
  assert_ptr_equal(arg_value(find_op(e2, TH_OP_ltorch_mul, 0), 0), c);

  /* it prints with one add, and f computed from c */
  char *text = th_trace_print(e, 1);
  assert_non_null(text);
  char line[128];
  snprintf(line, sizeof line, "  %s = ltorch.mul(%s, b)", th_value_name(f), th_value_name(c));
  assert_non_null(strstr(text, line));
  assert_non_null(strstr(text, "# Constructed by Common Subexpression Elimination (took "));
  assert_non_null(strstr(text, "ltorch.add(a, b"));
  assert_null(strstr(strstr(text, "ltorch.add(a, b") + 1, "ltorch.add("));
  free(text);

  /* running: the CSE'd program (one prims.add after decomposition) and the original agree with the
   * hand-computed values */
  th_program *p = compile_unfused(e);
  assert_int_equal(count_op(th_program_trace(p), TH_OP_prims_add), 1);
  check_duplicate_add_values(p);
  th_program_free(p);
  p = compile(tr);
  check_duplicate_add_values(p);
  th_program_free(p);

  th_trace_free(e2);
  th_trace_free(e);
  th_trace_free(d);
  th_trace_free(tr);
}

/* Thunder's docstring: a=x+y; b=y-x; c=x+y; d=y-x; z=a*b; w=c*d; m=w*1 -> return (z, z, z*1). */
static void test_thunder_docstring_example(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x"), *y = input(tr, "y");
  th_value *a = call2(tr, "ltorch.add", x, y);
  th_value *b = call2(tr, "ltorch.sub", y, x);
  th_value *c = call2(tr, "ltorch.add", x, y);
  th_value *d = call2(tr, "ltorch.sub", y, x);
  th_value *z = call2(tr, "ltorch.mul", a, b);
  th_value *w = call2(tr, "ltorch.mul", c, d);
  th_arg margs[2] = {th_arg_value(w), th_arg_int(1)};
  th_value *m = call(tr, "ltorch.mul", 2, margs);
  th_value *outs[3] = {z, w, m};
  ret(tr, 3, outs);
  verify(tr);

  th_trace *e = cse(tr);
  assert_int_equal(count_op(e, TH_OP_ltorch_add), 1);
  assert_int_equal(count_op(e, TH_OP_ltorch_sub), 1);
  assert_int_equal(count_op(e, TH_OP_ltorch_mul), 2);
  assert_int_equal(th_trace_num_bsyms(e), 5);
  assert_ptr_equal(ret_item(e, 0), z);
  assert_ptr_equal(ret_item(e, 1), z);
  assert_ptr_equal(ret_item(e, 2), m);
  const th_bsym *mb = producer(e, m);
  assert_non_null(mb);
  assert_ptr_equal(arg_value(mb, 0), z); /* m = z * 1 */
  assert_int_equal(mb->args[1].kind, TH_ARG_INT);
  assert_int_equal(mb->args[1].u.i, 1);
  const th_bsym *zb = producer(e, z);
  assert_ptr_equal(arg_value(zb, 0), a);
  assert_ptr_equal(arg_value(zb, 1), b);
  th_trace_free(e);
  th_trace_free(tr);
}

/* Constants compare by kind and value: 1, 1.0 and True differ; floats bitwise. Values by identity:
 * two equal-looking inputs never merge. */
static void test_constants_by_value(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x"), *y = input(tr, "y");
  th_arg consts[7] = {th_arg_int(1),     th_arg_float(1.0),  th_arg_bool(true), th_arg_int(1),
                      th_arg_float(0.0), th_arg_float(-0.0), th_arg_float(0.5)};
  th_value *v[9];
  for (int i = 0; i < 7; i++) {
    th_arg args[2] = {th_arg_value(x), consts[i]};
    v[i] = call(tr, "ltorch.mul", 2, args);
  }
  th_arg args[2] = {th_arg_value(x), th_arg_float(0.5)};
  v[7] = call(tr, "ltorch.mul", 2, args); /* same as v[6] */
  v[8] = call1(tr, "ltorch.neg", y);      /* neg(y) is not neg(x) */
  th_value *n2 = call1(tr, "ltorch.neg", x);
  th_arg items[10];
  for (int i = 0; i < 9; i++) items[i] = th_arg_value(v[i]);
  items[9] = th_arg_value(n2);
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(10, items)), TH_OK);
  verify(tr);

  th_trace *e = cse(tr);
  /* merged: v[3] into v[0] (int 1 twice), v[7] into v[6] (0.5 twice); 6 muls and 2 negs stay */
  assert_int_equal(count_op(e, TH_OP_ltorch_mul), 6);
  assert_int_equal(count_op(e, TH_OP_ltorch_neg), 2);
  for (int i = 0; i < 9; i++) {
    const th_value *want = i == 3 ? v[0] : i == 7 ? v[6] : v[i];
    assert_ptr_equal(ret_item(e, i), want);
  }
  assert_ptr_equal(ret_item(e, 9), n2);
  th_trace_free(e);
  th_trace_free(tr);
}

/* Rewriting cascades: t1 = neg(a) is t0, so exp(t1) is exp(t0). */
static void test_rewritten_args_merge(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a");
  th_value *t0 = call1(tr, "prims.neg", a), *t1 = call1(tr, "prims.neg", a);
  th_value *t2 = call1(tr, "prims.exp", t0), *t3 = call1(tr, "prims.exp", t1);
  th_value *t4 = call2(tr, "prims.add", t2, t3);
  th_value *outs[2] = {t3, t4};
  ret(tr, 2, outs);
  th_trace *e = cse(tr);
  assert_int_equal(th_trace_num_bsyms(e), 4); /* neg, exp, add, return */
  assert_ptr_equal(ret_item(e, 0), t2);
  const th_bsym *add = producer(e, t4);
  assert_ptr_equal(arg_value(add, 0), t2);
  assert_ptr_equal(arg_value(add, 1), t2);
  /* runs: out0 = exp(-a), out1 = 2 exp(-a) */
  th_program *p = compile(e);
  const float av[4] = {0, 0, 0, 0};
  th_tensor *in = tensor22(av);
  th_tensor **out = run(p, 1, &in, 2);
  for (int i = 0; i < 4; i++) {
    assert_true(th_tensor_get_f64(out[0], i) == 1.0);
    assert_true(th_tensor_get_f64(out[1], i) == 2.0);
  }
  free_outputs(2, out);
  th_tensor_release(in);
  th_program_free(p);
  th_trace_free(e);
  th_trace_free(tr);
}

/* Random ops are never merged: dropout(training=True), uniform_like, prims.uniform, twice each. */
static void test_random_not_merged(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t s64[1] = {64};
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, CPU, 1, s64);
  assert_non_null(x);
  const char *kw[2] = {"p", "training"};
  th_arg kwargs[2] = {th_arg_float(0.5), th_arg_bool(true)};
  th_arg xa = th_arg_value(x);
  th_arg d0 = callkw(tr, "ltorch.dropout", 1, &xa, 2, kw, kwargs);
  th_arg d1 = callkw(tr, "ltorch.dropout", 1, &xa, 2, kw, kwargs);
  th_value *u0 = call1(tr, "ltorch.uniform_like", x), *u1 = call1(tr, "ltorch.uniform_like", x);
  th_arg shp[1] = {th_arg_int(64)};
  const char *ukw[2] = {"device", "dtype"};
  th_arg ukwargs[2] = {th_arg_device(CPU), th_arg_dtype(TH_F32)};
  th_arg uargs[3] = {th_arg_tuple(1, shp), th_arg_float(0.0), th_arg_float(1.0)};
  th_arg p0 = callkw(tr, "prims.uniform", 3, uargs, 2, ukw, ukwargs);
  th_arg p1 = callkw(tr, "prims.uniform", 3, uargs, 2, ukw, ukwargs);
  th_value *outs[6] = {d0.u.value, d1.u.value, u0, u1, p0.u.value, p1.u.value};
  ret(tr, 6, outs);
  verify(tr);

  th_trace *e = cse(tr);
  assert_int_equal(count_op(e, TH_OP_ltorch_dropout), 2);
  assert_int_equal(count_op(e, TH_OP_ltorch_uniform_like), 2);
  assert_int_equal(count_op(e, TH_OP_prims_uniform), 2);
  for (int i = 0; i < 6; i++) assert_ptr_equal(ret_item(e, i), outs[i]);

  /* and the two draws of each pair differ when run */
  th_program *p = compile(e);
  th_tensor *in = th_tensor_empty(TH_F32, 1, s64);
  for (int i = 0; i < 64; i++) ((float *)th_tensor_data(in))[i] = 1.0f;
  th_tensor **out = run(p, 1, &in, 6);
  for (int k = 0; k < 6; k += 2) {
    int differ = 0;
    for (int i = 0; i < 64; i++) differ += th_tensor_get_f64(out[k], i) != th_tensor_get_f64(out[k + 1], i);
    assert_true(differ > 0);
  }
  free_outputs(6, out);
  th_tensor_release(in);
  th_program_free(p);
  th_trace_free(e);
  th_trace_free(tr);
}

/* copy_ (prims and ltorch) and in-place ops are never merged. */
static void test_copy_and_inplace_not_merged(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x"), *y = input(tr, "y");
  th_value *c0 = call2(tr, "prims.copy_", y, x), *c1 = call2(tr, "prims.copy_", y, x);
  th_value *l0 = call2(tr, "ltorch.copy_", x, y), *l1 = call2(tr, "ltorch.copy_", x, y);
  th_value *a0 = call2(tr, "ltorch.add_", x, y), *a1 = call2(tr, "ltorch.add_", x, y);
  th_value *outs[6] = {c0, c1, l0, l1, a0, a1};
  ret(tr, 6, outs);
  verify(tr);
  th_trace *e = cse(tr);
  assert_int_equal(count_op(e, TH_OP_prims_copy_), 2);
  assert_int_equal(count_op(e, TH_OP_ltorch_copy_), 2);
  assert_int_equal(count_op(e, TH_OP_ltorch_add_), 2);
  for (int i = 0; i < 6; i++) assert_ptr_equal(ret_item(e, i), outs[i]);
  th_trace_free(e);

  /* copy_ with an unused output stays too (it is an effect) */
  th_trace *tr2 = th_trace_new(NULL);
  x = input(tr2, "x");
  y = input(tr2, "y");
  (void)call2(tr2, "prims.copy_", y, x);
  (void)call2(tr2, "prims.copy_", y, x);
  assert_int_equal(th_trace_set_return(tr2, th_arg_none()), TH_OK);
  e = cse(tr2);
  assert_int_equal(count_op(e, TH_OP_prims_copy_), 2);
  th_trace_free(e);
  th_trace_free(tr2);
  th_trace_free(tr);
}

/* Only bsyms claimed by the same executor merge (both unclaimed counts as the same). */
static void test_executor_mismatch(void **state) {
  (void)state;
  /* executors of four adds of (a, b), and which of them survive */
  static const struct {
    const char *ex[4];
    int nadds;
  } cases[] = {
    {{NULL, NULL, NULL, NULL}, 1},
    {{"eager", "blas", "eager", "blas"}, 2}, /* eager with eager, blas with blas */
    {{"eager", NULL, "probe", "blas"}, 4},   /* all different */
    {{"eager", "eager", NULL, NULL}, 2},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    th_trace *tr = th_trace_new(NULL);
    th_value *a = input(tr, "a"), *b = input(tr, "b");
    th_value *v[4];
    for (int i = 0; i < 4; i++) {
      v[i] = call2(tr, "prims.add", a, b);
      ((th_bsym *)th_trace_bsym(tr, i))->executor = cases[k].ex[i];
    }
    ret(tr, 4, v);
    th_trace *e = cse(tr);
    assert_int_equal(count_op(e, TH_OP_prims_add), cases[k].nadds);
    for (int i = 0; i < 4; i++) {
      /* each output reads the first add with the same executor */
      int first = i;
      for (int j = 0; j < i; j++) {
        const char *p = cases[k].ex[j], *q = cases[k].ex[i];
        if ((!p && !q) || (p && q && !strcmp(p, q))) {
          first = j;
          break;
        }
      }
      assert_ptr_equal(ret_item(e, i), v[first]);
    }
    th_trace_free(e);
    th_trace_free(tr);
  }
}

/* A del of a value that a merge makes live again is dropped (parsed trace with dels). */
static void test_cse_dels(void **state) {
  (void)state;
  const char *text = "import thunder\n"
                     "import thunder.core.prims as prims\n"
                     "import torch\n"
                     "\n"
                     "def computation(x):\n"
                     "  # x: \"cpu f32[4]\"\n"
                     "  t0 = prims.neg(x)  # t0: \"cpu f32[4]\"\n"
                     "  t1 = prims.exp(t0)  # t1: \"cpu f32[4]\"\n"
                     "  del t0\n"
                     "  t2 = prims.neg(x)  # t2: \"cpu f32[4]\"\n"
                     "  del x\n"
                     "  t3 = prims.sin(t2)  # t3: \"cpu f32[4]\"\n"
                     "  del t2\n"
                     "  return (t1, t3)\n";
  th_trace *tr = NULL;
  if (th_trace_parse(text, "cse_dels.py", &tr) != TH_OK) fail_msg("%s", th_last_error());
  verify(tr);
  th_trace *e = cse(tr); /* verify: no use of t0 after a del */
  char *out = th_trace_print(e, 1);
  assert_non_null(out);
  assert_non_null(strstr(out, "  t3 = prims.sin(t0)"));
  assert_null(strstr(out, "t2"));
  assert_null(strstr(out, "del t0"));
  assert_non_null(strstr(out, "  del x\n"));
  free(out);
  th_trace_free(e);
  th_trace_free(tr);
}

/* A computation read after an in-place write of its input is a new computation: the second
 * ltorch.add(x, y) reads x after x += y, so it must not merge with the first. */
static void test_cse_not_across_inplace_writes(void **state) {
  (void)state;
  const char *text = "import thunder\n"
                     "import thunder.torch as ltorch\n"
                     "import torch\n"
                     "\n"
                     "def computation(x, y):\n"
                     "  # x: \"cpu f32[3]\"\n"
                     "  # y: \"cpu f32[3]\"\n"
                     "  t0 = ltorch.add(x, y)  # t0: \"cpu f32[3]\"\n"
                     "  t1 = ltorch.add_(x, y)  # t1: \"cpu f32[3]\"\n"
                     "  t2 = ltorch.add(x, y)  # t2: \"cpu f32[3]\"\n"
                     "  t3 = ltorch.add(x, y)  # t3: \"cpu f32[3]\"\n"
                     "  return (t0, t1, t2, t3)\n";
  th_trace *tr = NULL;
  if (th_trace_parse(text, "cse_inplace.py", &tr) != TH_OK) fail_msg("%s", th_last_error());
  verify(tr);
  th_trace *e = cse(tr);
  char *out = th_trace_print(e, 0);
  assert_non_null(out);
  assert_non_null(strstr(out, "  t2 = ltorch.add(x, y")); /* after the write: kept */
  assert_null(strstr(out, "  t3 = ltorch.add(x, y"));     /* the same read after the same write: merged */
  assert_non_null(strstr(out, "return (t0, t1, t2, t2)"));
  free(out);
  th_trace_free(e);

  /* and the compiled program computes x + y, then x + 2y for the reads after the write */
  th_program *p = NULL;
  if (th_program_compile(tr, NULL, &p) != TH_OK) fail_msg("%s", th_last_error());
  th_tensor *x = th_tensor_empty(TH_F32, 1, (int64_t[]){3});
  th_tensor *y = th_tensor_empty(TH_F32, 1, (int64_t[]){3});
  for (int i = 0; i < 3; i++) {
    ((float *)th_tensor_data(x))[i] = 1.0f;
    ((float *)th_tensor_data(y))[i] = 1.0f;
  }
  th_tensor *in[2] = {x, y}, **outs = NULL;
  int nout = 0;
  if (th_program_run(p, 2, in, &nout, &outs) != TH_OK) fail_msg("%s", th_last_error());
  assert_int_equal(nout, 4);
  assert_true(th_tensor_get_f64(outs[0], 0) == 2.0);
  assert_true(th_tensor_get_f64(outs[2], 0) == 3.0);
  assert_true(th_tensor_get_f64(outs[3], 0) == 3.0);
  for (int i = 0; i < nout; i++) th_tensor_release(outs[i]);
  free(outs);
  th_tensor_release(x);
  th_tensor_release(y);
  th_program_free(p);
  th_trace_free(tr);
}

/* ---- Delete Last Used ---------------------------------------------------------------------------- */

/* The del rules by hand: inputs a, b, u (unused); t0 = a+b; t1 = t0*b; t2 = neg(t1) (unused);
 * t3 = exp(t0); a comment; return (t0, t3). */
static void test_del_last_used_by_hand(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a"), *b = input(tr, "b");
  (void)input(tr, "u");
  th_value *t0 = call2(tr, "prims.add", a, b);
  th_value *t1 = call2(tr, "prims.mul", t0, b);
  th_value *t2 = call1(tr, "prims.neg", t1);
  th_value *t3 = call1(tr, "prims.exp", t0);
  assert_int_equal(th_trace_add_comment(tr, "done"), TH_OK);
  th_value *outs[2] = {t0, t3};
  ret(tr, 2, outs);
  verify(tr);

  th_trace *d = dlu(tr);
  char want[2048];
  const char *n0 = th_value_name(t0), *n1 = th_value_name(t1), *n2 = th_value_name(t2), *n3 = th_value_name(t3);
  snprintf(want, sizeof want,
           "def computation(a, b, u):\n"
           "  # a: \"cpu f32[2, 2]\"\n"
           "  # b: \"cpu f32[2, 2]\"\n"
           "  # u: \"cpu f32[2, 2]\"\n"
           "  del u\n"
           "  %s = prims.add(a, b)  # %s: \"cpu f32[2, 2]\"\n"
           "  del a\n"
           "  %s = prims.mul(%s, b)  # %s: \"cpu f32[2, 2]\"\n"
           "  del b\n"
           "  %s = prims.neg(%s)  # %s: \"cpu f32[2, 2]\"\n"
           "  del %s, %s\n"
           "  %s = prims.exp(%s)  # %s: \"cpu f32[2, 2]\"\n"
           "  # done\n"
           "  return (%s, %s)\n",
           n0, n0, n1, n0, n1, n2, n1, n2, n2, n1, n3, n0, n3, n0, n3);
  char *text = th_trace_print(d, 1);
  assert_non_null(text);
  const char *body = strstr(text, "def computation");
  assert_non_null(body);
  assert_string_equal(body, want);
  assert_true(strncmp(text, "# Constructed by Delete Last Used (took ", 40) == 0);
  free(text);

  /* old dels are dropped: running it again gives the same trace */
  th_trace *d2 = dlu(d);
  char *t1s = th_trace_print(d, -1), *t2s = th_trace_print(d2, -1);
  assert_non_null(strstr(t2s, "def computation"));
  assert_string_equal(strstr(t1s, "def computation"), strstr(t2s, "def computation"));
  free(t1s);
  free(t2s);
  /* the input trace is unchanged */
  assert_int_equal(count_op(tr, TH_OP_prims_python_del), 0);
  assert_int_equal(th_trace_num_bsyms(tr), 6);
  th_trace_free(d2);
  th_trace_free(d);
  th_trace_free(tr);
}

/* Seed 000 (Thunder's trace): t0 = linear(x, w, None); del x, w; return t0 — the del lists the
 * arguments in order, and a returned value is never deleted. */
static void test_del_seed000(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s[2] = {16, 16};
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, CPU, 2, s);
  th_value *w = th_trace_add_tensor_input(tr, "w", TH_F32, CPU, 2, s);
  th_arg args[3] = {th_arg_value(x), th_arg_value(w), th_arg_none()};
  th_value *t0 = call(tr, "prims.linear", 3, args);
  assert_int_equal(th_trace_set_return(tr, th_arg_value(t0)), TH_OK);
  th_trace *d = dlu(tr);
  char *text = th_trace_print(d, 1);
  char want[256];
  snprintf(want, sizeof want, "  %s = prims.linear(x, w, None)  # %s: \"cpu f32[16, 16]\"\n  del x, w\n  return %s\n",
           th_value_name(t0), th_value_name(t0), th_value_name(t0));
  assert_non_null(strstr(text, want));
  free(text);
  th_trace_free(d);

  /* through the pipeline: the execution trace is the Delete Last Used trace */
  th_program *p = compile(tr);
  const th_trace *et = th_program_trace(p);
  assert_true(strncmp(et->provenance, "Delete Last Used (took ", 23) == 0);
  text = th_trace_print(et, 1);
  assert_non_null(strstr(text, "# Constructed by Delete Last Used (took "));
  assert_non_null(strstr(text, "  del x, w\n"));
  free(text);
  th_program_free(p);
  th_trace_free(tr);
}

/* A returned input is never deleted; an output returned inside a dict neither; a fusion region's
 * list outputs are deleted like any value (outputs before arguments). */
static void test_del_outputs_and_structures(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a"), *b = input(tr, "b");
  /* fusion0(a, b) -> [t0, t1], body: t0 = neg(a); t1 = add(t0, b) */
  th_vec subs = {0};
  tr->scope = &subs;
  th_arg aa = th_arg_value(a), o0, o1;
  assert_int_equal(th_call(tr, TH_OP_prims_neg, 1, &aa, &o0), TH_OK);
  th_arg ab[2] = {o0, th_arg_value(b)};
  assert_int_equal(th_call(tr, TH_OP_prims_add, 2, ab, &o1), TH_OK);
  tr->scope = &tr->bsyms;
  th_symbol *fs = th_symbol_new_dynamic(tr, "fusion0");
  th_arg *fargs = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  fargs[0] = aa;
  fargs[1] = th_arg_value(b);
  th_arg *fouts = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  fouts[0] = o0;
  fouts[1] = o1;
  th_bsym *fb = th_bsym_new(tr, fs, 2, fargs, th_arg_list(2, fouts));
  fb->nsubs = subs.n;
  fb->subs = (th_bsym **)subs.items;
  assert_int_equal(th_trace_append(tr, fb), TH_OK);
  th_value *t2 = call1(tr, "prims.exp", o1.u.value);
  /* return {'out': t2, 'args': [a]} */
  th_arg items[2] = {th_arg_value(t2), th_arg_list(1, &aa)};
  const char *keys[2] = {"out", "args"};
  th_arg dict;
  dict.kind = TH_ARG_DICT;
  dict.u.seq.n = 2;
  dict.u.seq.items = items;
  dict.u.seq.keys = keys;
  assert_int_equal(th_trace_set_return(tr, dict), TH_OK);
  verify(tr);

  th_trace *d = dlu(tr);
  char *text = th_trace_print(d, 1);
  char want[512];
  /* t0 is unused after the region: deleted with it, before the argument b; a is returned */
  snprintf(want, sizeof want, "  [%s, %s] = fusion0(a, b)\n  del %s, b\n  %s = prims.exp(%s)",
           th_value_name(o0.u.value), th_value_name(o1.u.value), th_value_name(o0.u.value), th_value_name(t2),
           th_value_name(o1.u.value));
  assert_non_null(strstr(text, want));
  snprintf(want, sizeof want, "  del %s\n  return {'out': %s, 'args': [a]}\n", th_value_name(o1.u.value),
           th_value_name(t2));
  assert_non_null(strstr(text, want));
  assert_null(strstr(text, "del a"));
  free(text);
  th_trace_free(d);
  th_trace_free(tr);
}

/* The pipeline on the duplicated expression and on a torch-level MLP: del lines everywhere, same results. */
static void test_pipeline_runs_identically(void **state) {
  (void)state;
  th_trace *tr = duplicate_add_trace(NULL, NULL);
  th_program *p = compile(tr);
  assert_true(count_op(th_program_trace(p), TH_OP_prims_python_del) > 0);
  check_duplicate_add_values(p);
  check_duplicate_add_values(p); /* a program runs any number of times */
  th_program_free(p);
  th_trace_free(tr);

  /* y = linear(relu(linear(x, w1, b1)), w2, b2) with hand-chosen values (below) */
  tr = th_trace_new("mlp");
  const int64_t sx[2] = {2, 3}, sw1[2] = {4, 3}, sb1[1] = {4}, sw2[2] = {2, 4}, sb2[1] = {2};
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, CPU, 2, sx);
  th_value *w1 = th_trace_add_tensor_input(tr, "w1", TH_F32, CPU, 2, sw1);
  th_value *b1 = th_trace_add_tensor_input(tr, "b1", TH_F32, CPU, 1, sb1);
  th_value *w2 = th_trace_add_tensor_input(tr, "w2", TH_F32, CPU, 2, sw2);
  th_value *b2 = th_trace_add_tensor_input(tr, "b2", TH_F32, CPU, 1, sb2);
  th_arg l1[3] = {th_arg_value(x), th_arg_value(w1), th_arg_value(b1)};
  th_value *h = call(tr, "ltorch.linear", 3, l1);
  th_value *g = call1(tr, "ltorch.relu", h);
  th_arg l2[3] = {th_arg_value(g), th_arg_value(w2), th_arg_value(b2)};
  th_value *y = call(tr, "ltorch.linear", 3, l2);
  ret(tr, 1, &y);
  p = compile(tr);
  th_tensor *in[5] = {th_tensor_new(TH_F32, 2, sx), th_tensor_new(TH_F32, 2, sw1), th_tensor_new(TH_F32, 1, sb1),
                      th_tensor_new(TH_F32, 2, sw2), th_tensor_new(TH_F32, 1, sb2)};
  for (int i = 0; i < 6; i++) ((float *)th_tensor_data(in[0]))[i] = 1.0f;
  for (int i = 0; i < 4; i++) ((float *)th_tensor_data(in[2]))[i] = 1.0f;
  for (int i = 0; i < 8; i++) ((float *)th_tensor_data(in[3]))[i] = 0.5f;
  for (int i = 0; i < 2; i++) ((float *)th_tensor_data(in[4]))[i] = 2.0f;
  /* h = 0*x + 1 = 1; relu(1) = 1; y = 4 * 0.5 * 1 + 2 = 4 */
  for (int rep = 0; rep < 2; rep++) {
    th_tensor **out = run(p, 5, in, 1);
    for (int i = 0; i < 4; i++) assert_true(th_tensor_get_f64(out[0], i) == 4.0);
    free_outputs(1, out);
  }
  for (int i = 0; i < 5; i++) th_tensor_release(in[i]);
  th_program_free(p);
  th_trace_free(tr);
}

/* ---- errors and allocation failures ------------------------------------------------------------------ */

static void test_errors(void **state) {
  (void)state;
  th_trace *out = (th_trace *)0x1;
  assert_int_equal(th_transform_cse(NULL, &out), TH_ERR_VALUE);
  assert_int_equal(th_transform_del_last_used(NULL, &out), TH_ERR_VALUE);
  assert_ptr_equal(out, (th_trace *)0x1); /* not set on error */
  th_trace *tr = duplicate_add_trace(NULL, NULL);
  assert_int_equal(th_transform_cse(tr, NULL), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "th_transform_cse"));
  assert_int_equal(th_transform_del_last_used(tr, NULL), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "th_transform_del_last_used"));
  th_trace_free(tr);
}

static void test_fault_injection(void **state) {
  (void)state;
  th_trace *tr = duplicate_add_trace(NULL, NULL);
  for (int pass = 0; pass < 2; pass++) {
    int ok_at = 0;
    for (long n = 1; n < 100000; n++) {
      th_trace *o = NULL;
      th_alloc_fail_after(n);
      th_status st = pass == 0 ? th_transform_cse(tr, &o) : th_transform_del_last_used(tr, &o);
      th_alloc_fail_after(0);
      if (st == TH_OK) {
        ok_at = (int)n;
        verify(o);
        th_trace_free(o);
        break;
      }
      assert_int_equal(st, TH_ERR_NOMEM);
      assert_null(o);
    }
    assert_true(ok_at > 1);
  }
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_cse_duplicate_add),
    cmocka_unit_test(test_thunder_docstring_example),
    cmocka_unit_test(test_constants_by_value),
    cmocka_unit_test(test_rewritten_args_merge),
    cmocka_unit_test(test_random_not_merged),
    cmocka_unit_test(test_copy_and_inplace_not_merged),
    cmocka_unit_test(test_executor_mismatch),
    cmocka_unit_test(test_cse_dels),
    cmocka_unit_test(test_cse_not_across_inplace_writes),
    cmocka_unit_test(test_del_last_used_by_hand),
    cmocka_unit_test(test_del_seed000),
    cmocka_unit_test(test_del_outputs_and_structures),
    cmocka_unit_test(test_pipeline_runs_identically),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
