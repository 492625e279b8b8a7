/* static_core_api.c — links against the static library (libthunder.a) and calls only core's part of
 * the public API: builds a trace (th_trace_new, th_trace_add_tensor_input, th_trace_call of ltorch.neg,
 * th_trace_set_return), prints it, parses the text back and verifies it. No function of the ops layer
 * is named, so the linker pulls ops.o (whose load-time constructor installs the op table) only because
 * the static library's link options name th_ops_install (-Wl,--undefined=th_ops_install: CMake's
 * INTERFACE_LINK_OPTIONS of thunder_static, Libs.private of thunder.pc). Without them recording fails
 * with "unknown op 'ltorch.neg'". Exits 0 on success. The CTest is static_core_api (tests/extra.cmake). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "thunder/thunder.h"

static int fail(const char *what, th_status st) {
  fprintf(stderr, "static_core_api: %s failed: %s: %s\n", what, th_status_name(st), th_last_error());
  return 1;
}

int main(void) {
  th_trace *tr = th_trace_new("f");
  if (!tr) return fail("th_trace_new", TH_ERR_NOMEM);
  const int64_t shape[2] = {2, 3};
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, (th_device){TH_CPU, 0}, 2, shape);
  if (!x) return fail("th_trace_add_tensor_input", TH_ERR_VALUE);
  th_arg a = th_arg_value(x), out;
  th_status st = th_trace_call(tr, "ltorch.neg", 1, &a, 0, NULL, NULL, &out);
  if (st != TH_OK) return fail("th_trace_call(ltorch.neg)", st);
  if ((st = th_trace_set_return(tr, out)) != TH_OK) return fail("th_trace_set_return", st);
  if ((st = th_trace_verify(tr)) != TH_OK) return fail("th_trace_verify", st);

  char *text = th_trace_print(tr, -1);
  if (!text) return fail("th_trace_print", TH_ERR_NOMEM);
  if (!strstr(text, "ltorch.neg(x)") || !strstr(text, "prims.neg(x)")) {
    fprintf(stderr, "static_core_api: unexpected trace text:\n%s", text);
    return 1;
  }
  th_trace *back = NULL;
  if ((st = th_trace_parse(text, "<static_core_api>", &back)) != TH_OK) return fail("th_trace_parse", st);
  if ((st = th_trace_verify(back)) != TH_OK) return fail("th_trace_verify (parsed)", st);
  char *again = th_trace_print(back, -1);
  if (!again || strcmp(text, again) != 0) {
    fprintf(stderr, "static_core_api: the parsed trace prints differently:\n%s---\n%s", text, again ? again : "");
    return 1;
  }
  free(again);
  free(text);
  th_trace_free(back);
  th_trace_free(tr);
  puts("static_core_api: ok");
  return 0;
}
