/* test_compile_pipeline.c — th_program_compile's stages (src/compile/pipeline.c): their names and order
 * in the program (th_program_num_traces / th_program_stage_trace), that DCE removes a dead bsym and CSE
 * merges a repeated one (counted by symbol in each stage's printed trace), that the fuser stage runs
 * only when the fuser is listed, skip_stages, and th_compile_prepare. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "thunder/thunder.h"

static const th_device CPU = {TH_CPU, 0};
static const int64_t SHAPE[2] = {3, 4};

static th_value *call(th_trace *tr, const char *op, int n, th_value **vals) {
  th_arg args[2];
  for (int i = 0; i < n; i++) args[i] = th_arg_value(vals[i]);
  th_arg out;
  if (th_trace_call(tr, op, n, args, 0, NULL, NULL, &out) != TH_OK) fail_msg("%s: %s", op, th_last_error());
  assert_int_equal(out.kind, TH_ARG_VALUE);
  return out.u.value;
}

/* f(x, y): dead = sin(x) (never used); a = exp(x + y); b = exp(x + y) (the same expression again);
 * return a * b */
static th_trace *dead_and_duplicate(void) {
  th_trace *tr = th_trace_new("f");
  assert_non_null(tr);
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, CPU, 2, SHAPE);
  th_value *y = th_trace_add_tensor_input(tr, "y", TH_F32, CPU, 2, SHAPE);
  assert_non_null(x);
  assert_non_null(y);
  call(tr, "ltorch.sin", 1, &x);
  th_value *xy[2] = {x, y};
  th_value *s1 = call(tr, "ltorch.add", 2, xy);
  th_value *a = call(tr, "ltorch.exp", 1, &s1);
  th_value *s2 = call(tr, "ltorch.add", 2, xy);
  th_value *b = call(tr, "ltorch.exp", 1, &s2);
  th_value *ab[2] = {a, b};
  th_value *out = call(tr, "ltorch.mul", 2, ab);
  assert_int_equal(th_trace_set_return(tr, th_arg_value(out)), TH_OK);
  return tr;
}

/* Top-level bsyms of symbol `sym` in trace t's printed text: lines "  <outs> = sym(" (or "  sym(")
 * indented by exactly two spaces (deeper lines are subsymbols). */
static int count_top(const th_trace *t, const char *sym) {
  char *s = th_trace_print(t, -1);
  assert_non_null(s);
  size_t n = strlen(sym);
  int k = 0;
  for (char *line = s; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    if (line[0] == ' ' && line[1] == ' ' && line[2] != ' ' && line[2] != '#') {
      const char *eq = strstr(line, " = ");
      const char *rhs = eq ? eq + 3 : line + 2;
      if (!strncmp(rhs, sym, n) && rhs[n] == '(') k++;
    }
    line = nl ? nl + 1 : NULL;
  }
  free(s);
  return k;
}

/* A [3, 4] float32 tensor of value v. */
static th_tensor *full(float v) {
  th_tensor *t = th_tensor_empty(TH_F32, 2, SHAPE);
  assert_non_null(t);
  for (int64_t i = 0; i < th_tensor_numel(t); i++) ((float *)th_tensor_data(t))[i] = v;
  return t;
}

static th_program *compile(const th_trace *tr, const char *const *execs, int nexecs, unsigned skip) {
  th_compile_options o = {0};
  o.executors = execs;
  o.nexecutors = nexecs;
  o.skip_stages = skip;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  return p;
}

/* The program's stage names joined by ",". */
static void stage_names(const th_program *p, char *buf, size_t n) {
  buf[0] = 0;
  for (int i = 0; i < th_program_num_traces(p); i++) {
    const char *name = NULL;
    assert_non_null(th_program_stage_trace(p, i, &name));
    assert_non_null(name);
    size_t k = strlen(buf);
    snprintf(buf + k, n - k, "%s%s", i ? "," : "", name);
  }
}

static const th_trace *stage(const th_program *p, const char *want) {
  for (int i = 0; i < th_program_num_traces(p); i++) {
    const char *name = NULL;
    const th_trace *t = th_program_stage_trace(p, i, &name);
    if (!strcmp(name, want)) return t;
  }
  fail_msg("no stage '%s'", want);
  return NULL;
}

static void test_stages_in_order(void **state) {
  (void)state;
  th_trace *tr = dead_and_duplicate();
  assert_int_equal(count_top(tr, "ltorch.sin"), 1);
  assert_int_equal(count_top(tr, "ltorch.exp"), 2);
  char names[256];
  static const char *const unfused[] = {"blas", "eager"};
  th_program *p = compile(tr, unfused, 2, 0);
  stage_names(p, names, sizeof names);
  assert_string_equal(names, "dce,cse,execution,del_last_used");
  assert_ptr_equal(th_program_stage_trace(p, th_program_num_traces(p) - 1, NULL), th_program_trace(p));
  /* DCE removed the dead sin; CSE merged the second add and exp */
  const th_trace *dce = stage(p, "dce"), *cse = stage(p, "cse");
  assert_int_equal(count_top(dce, "ltorch.sin"), 0);
  assert_int_equal(count_top(dce, "ltorch.exp"), 2);
  assert_int_equal(count_top(dce, "ltorch.add"), 2);
  assert_int_equal(count_top(cse, "ltorch.exp"), 1);
  assert_int_equal(count_top(cse, "ltorch.add"), 1);
  assert_int_equal(count_top(stage(p, "execution"), "prims.exp"), 1);
  assert_int_equal(count_top(th_program_trace(p), "prims.exp"), 1);
  assert_int_equal(count_top(th_program_trace(p), "prims.sin"), 0);
  /* runs: exp(x + y)^2 */
  th_tensor *x = full(0.25f), *y = full(0.5f);
  th_tensor *in[2] = {x, y}, **out = NULL;
  int nout = 0;
  assert_int_equal(th_program_run(p, 2, in, &nout, &out), TH_OK);
  assert_int_equal(nout, 1);
  for (int64_t i = 0; i < th_tensor_numel(out[0]); i++)
    assert_true(fabs(th_tensor_get_f64(out[0], i) - exp(1.5)) < 1e-5);
  th_tensor_release(out[0]);
  free(out);
  th_tensor_release(x);
  th_tensor_release(y);
  th_program_free(p);

  /* the default list has the fuser: its stage comes between the execution pass and Delete Last Used */
  p = compile(tr, NULL, 0, 0);
  stage_names(p, names, sizeof names);
  assert_string_equal(names, "dce,cse,execution,fuser,del_last_used");
  /* each stage's provenance line names its pass, as Thunder's traces do */
  static const char *const provenance[] = {"Dead Code Elimination (took ", "Common Subexpression Elimination (took ",
                                           "Transform for execution (took ", "Fusion (took ",
                                           "Delete Last Used (took "};
  for (int i = 0; i < 5; i++) {
    const char *name = NULL;
    const th_trace *st = th_program_stage_trace(p, i, &name);
    assert_non_null(st);
    char *text = th_trace_print(st, 0), want[96];
    snprintf(want, sizeof want, "# Constructed by %s", provenance[i]);
    assert_non_null(text);
    assert_non_null(strstr(text, want));
    free(text);
  }
  th_program_free(p);
  th_trace_free(tr);
}

static void test_skip_stages(void **state) {
  (void)state;
  th_trace *tr = dead_and_duplicate();
  static const char *const eager[] = {"eager"};
  char names[256];
  th_program *p = compile(tr, eager, 1, TH_COMPILE_SKIP_DCE | TH_COMPILE_SKIP_CSE);
  stage_names(p, names, sizeof names);
  assert_string_equal(names, "execution,del_last_used");
  assert_int_equal(count_top(th_program_trace(p), "prims.exp"), 2); /* no CSE: both stay */
  th_program_free(p);
  p = compile(tr, eager, 1, TH_COMPILE_SKIP_CSE);
  stage_names(p, names, sizeof names);
  assert_string_equal(names, "dce,execution,del_last_used");
  th_program_free(p);

  th_compile_options o = {0};
  o.skip_stages = 0x4;
  p = (th_program *)1;
  assert_int_equal(th_program_compile(tr, &o, &p), TH_ERR_VALUE);
  assert_null(p);
  assert_non_null(strstr(th_last_error(), "skip_stages"));
  th_trace_free(tr);
}

static void test_prepare(void **state) {
  (void)state;
  th_trace *tr = dead_and_duplicate();
  th_trace *dce = NULL, *cse = NULL;
  assert_int_equal(th_compile_prepare(tr, NULL, &dce, &cse), TH_OK);
  assert_int_equal(count_top(dce, "ltorch.sin"), 0);
  assert_int_equal(count_top(cse, "ltorch.exp"), 1);
  th_trace_free(dce);
  th_trace_free(cse);
  assert_int_equal(th_compile_prepare(NULL, NULL, &dce, &cse), TH_ERR_VALUE);
  assert_null(dce);
  assert_null(cse);
  assert_int_equal(th_compile_prepare(tr, NULL, NULL, &cse), TH_ERR_VALUE);
  th_trace_free(tr);
}

static void test_stage_accessors_out_of_range(void **state) {
  (void)state;
  const char *name = "x";
  assert_int_equal(th_program_num_traces(NULL), 0);
  assert_null(th_program_stage_trace(NULL, 0, &name));
  assert_null(name);
  th_trace *tr = dead_and_duplicate();
  static const char *const eager[] = {"eager"};
  th_program *p = compile(tr, eager, 1, 0);
  name = "x";
  assert_null(th_program_stage_trace(p, th_program_num_traces(p), &name));
  assert_null(name);
  assert_null(th_program_stage_trace(p, -1, NULL));
  th_program_free(p);
  th_trace_free(tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_stages_in_order),
    cmocka_unit_test(test_skip_stages),
    cmocka_unit_test(test_prepare),
    cmocka_unit_test(test_stage_accessors_out_of_range),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
