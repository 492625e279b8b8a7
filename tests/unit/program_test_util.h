/* program_test_util.h — compiling a trace's text with a given executor list and running a program of
 * one output, for the cmocka tests that check results of whole programs. Every helper is marked unused,
 * so a test includes the header whole. Include after <cmocka.h>, <string.h>, <stdlib.h> and
 * "thunder/thunder.h". */
#ifndef TH_TEST_PROGRAM_TEST_UTIL_H
#define TH_TEST_PROGRAM_TEST_UTIL_H

/* the trace of `text` compiled with executors ex[0..nex) (NULL: the default list) */
static __attribute__((unused)) th_program *compile_text(const char *text, const char *const *ex, int nex) {
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<test>", &tr) != TH_OK) fail_msg("parse: %s", th_last_error());
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile: %s", th_last_error());
  th_trace_free(tr);
  return p;
}

/* runs p on in[0..nin) and returns its one output */
static __attribute__((unused)) th_tensor *run_one(th_program *p, int nin, th_tensor **in) {
  int nout = 0;
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, &nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, 1);
  th_tensor *r = out[0];
  free(out);
  return r;
}

#endif
