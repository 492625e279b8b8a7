/* c_api_mlp.c — building a trace through the C API: a two-layer MLP y = linear(gelu(linear(x, w1, b1)), w2, b2),
 * printed in Thunder's format, compiled and run on the CPU. Uses only the public headers and the
 * shared library, as a C user would.
 *
 * Shapes: x (4, 8), w1 (16, 8), b1 (16), w2 (8, 16), b2 (8) -> y (4, 8). */
#include <stdio.h>
#include <stdlib.h>

#include "thunder/thunder.h"

static th_tensor *filled(int ndim, const int64_t *shape, float scale) {
  th_tensor *t = th_tensor_empty(TH_F32, ndim, shape);
  if (!t) return NULL;
  float *p = th_tensor_data(t);
  for (int64_t i = 0; i < th_tensor_numel(t); i++) p[i] = scale * (float)((i * 7 % 13) - 6);
  return t;
}

int main(void) {
  const th_device cpu = {TH_CPU, 0};
  const int64_t sx[2] = {4, 8}, sw1[2] = {16, 8}, sb1[1] = {16}, sw2[2] = {8, 16}, sb2[1] = {8};
  th_trace *tr = th_trace_new("mlp");
  if (!tr) return 1;
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, cpu, 2, sx);
  th_value *w1 = th_trace_add_tensor_input(tr, "w1", TH_F32, cpu, 2, sw1);
  th_value *b1 = th_trace_add_tensor_input(tr, "b1", TH_F32, cpu, 1, sb1);
  th_value *w2 = th_trace_add_tensor_input(tr, "w2", TH_F32, cpu, 2, sw2);
  th_value *b2 = th_trace_add_tensor_input(tr, "b2", TH_F32, cpu, 1, sb2);
  th_arg h, g, y;
  th_arg l1[3] = {th_arg_value(x), th_arg_value(w1), th_arg_value(b1)};
  const char *kw[1] = {"approximate"};
  th_status st = th_trace_call(tr, "ltorch.linear", 3, l1, 0, NULL, NULL, &h);
  if (st == TH_OK) {
    th_arg approx = th_arg_str("tanh");
    st = th_trace_call(tr, "ltorch.gelu", 1, &h, 1, kw, &approx, &g);
  }
  if (st == TH_OK) {
    th_arg l2[3] = {g, th_arg_value(w2), th_arg_value(b2)};
    st = th_trace_call(tr, "ltorch.linear", 3, l2, 0, NULL, NULL, &y);
  }
  if (st == TH_OK) st = th_trace_set_return(tr, y);
  if (st != TH_OK) {
    fprintf(stderr, "c_api_mlp: %s\n", th_last_error());
    th_trace_free(tr);
    return 1;
  }
  char *text = th_trace_print(tr, -1);
  if (text) fputs(text, stdout);
  free(text);

  th_program *prog = NULL;
  th_tensor *in[5] = {filled(2, sx, 0.1f), filled(2, sw1, 0.05f), filled(1, sb1, 0.01f), filled(2, sw2, 0.05f),
                      filled(1, sb2, 0.01f)};
  th_tensor **out = NULL;
  int nout = 0;
  st = th_program_compile(tr, NULL, &prog);
  if (st == TH_OK) st = th_program_run(prog, 5, in, &nout, &out);
  if (st == TH_OK) {
    printf("\ny[0, :] =");
    for (int j = 0; j < 8; j++) printf(" %.5f", th_tensor_get_f64(out[0], j));
    printf("\n");
  } else {
    fprintf(stderr, "c_api_mlp: %s\n", th_last_error());
  }
  for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
  free(out);
  for (int i = 0; i < 5; i++) th_tensor_release(in[i]);
  th_program_free(prog);
  th_trace_free(tr);
  return st == TH_OK ? 0 : 1;
}
