/* bench_gpt2.c — time per forward of a GPT-2 block through thunder-c (parse -> compile -> run).
 *
 * Usage: bench_gpt2 [B T C H] [f32|bf16] [iters]   (default 8 256 768 12 f32 10)
 * The block (pre-norm layer norm, causal self-attention, tanh-GELU MLP, residuals) is generated as
 * trace text with the requested sizes and dtype (bf16: every input and weight bf16; the torch-level ops
 * compute elementwise math in f32 and round, matmuls run in bf16 through oneDNN), parsed, compiled
 * once, then run `iters` times after one warm-up. Prints min/median/max milliseconds and the GEMM
 * floor (FLOPs of the six matmuls at the GFLOP/s measured by bench_linear, passed via FLOOR_GFLOPS). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "thunder/thunder.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static char *gen(int B, int T, int C, int H, const char *dt) {
  size_t cap = 16384;
  char *s = malloc(cap);
  int hs = C / H;
  snprintf(s, cap,
           "def computation(x, ln1w, ln1b, wqkv, bqkv, wproj, bproj, ln2w, ln2b, wfc, bfc, wout, bout):\n"
           "  # x: \"cpu %s[%d, %d, %d]\"\n  # ln1w: \"cpu %s[%d]\"\n  # ln1b: \"cpu %s[%d]\"\n"
           "  # wqkv: \"cpu %s[%d, %d]\"\n  # bqkv: \"cpu %s[%d]\"\n  # wproj: \"cpu %s[%d, %d]\"\n"
           "  # bproj: \"cpu %s[%d]\"\n  # ln2w: \"cpu %s[%d]\"\n  # ln2b: \"cpu %s[%d]\"\n"
           "  # wfc: \"cpu %s[%d, %d]\"\n  # bfc: \"cpu %s[%d]\"\n  # wout: \"cpu %s[%d, %d]\"\n  # bout: \"cpu %s[%d]\"\n"
           "  h = ltorch.layer_norm(x, (%d,), ln1w, ln1b, 1e-05)\n"
           "  qkv = ltorch.linear(h, wqkv, bqkv)\n"
           "  (q, k, v) = ltorch.split(qkv, %d, 2)\n"
           "  q4 = ltorch.reshape(q, (%d, %d, %d, %d))\n  k4 = ltorch.reshape(k, (%d, %d, %d, %d))\n"
           "  v4 = ltorch.reshape(v, (%d, %d, %d, %d))\n"
           "  qh = ltorch.transpose(q4, 1, 2)\n  kh = ltorch.transpose(k4, 1, 2)\n  vh = ltorch.transpose(v4, 1, 2)\n"
           "  y = ltorch.scaled_dot_product_attention(qh, kh, vh, None, 0.0, True, scale=None)\n"
           "  yt = ltorch.transpose(y, 1, 2)\n  yc = ltorch.reshape(yt, (%d, %d, %d))\n"
           "  attn = ltorch.linear(yc, wproj, bproj)\n  x1 = ltorch.add(x, attn, alpha=None)\n"
           "  h2 = ltorch.layer_norm(x1, (%d,), ln2w, ln2b, 1e-05)\n  fc = ltorch.linear(h2, wfc, bfc)\n"
           "  g = ltorch.gelu(fc, approximate='tanh')\n  mlp = ltorch.linear(g, wout, bout)\n"
           "  out = ltorch.add(x1, mlp, alpha=None)\n  return out\n",
           dt, B, T, C, dt, C, dt, C, dt, 3 * C, C, dt, 3 * C, dt, C, C, dt, C, dt, C, dt, C, dt, 4 * C, C, dt,
           4 * C, dt, C, 4 * C, dt, C, C, C, B, T, H, hs, B, T, H, hs, B, T, H, hs, B, T, C, C);
  return s;
}

int main(int argc, char **argv) {
  int B = 8, T = 256, C = 768, H = 12, iters = 10;
  const char *dt = "f32";
  if (argc >= 5) {
    B = atoi(argv[1]);
    T = atoi(argv[2]);
    C = atoi(argv[3]);
    H = atoi(argv[4]);
  }
  if (argc >= 6) dt = argv[5];
  if (argc >= 7) iters = atoi(argv[6]);
  char *text = gen(B, T, C, H, dt);
  th_trace *tr = NULL;
  th_program *p = NULL;
  if (th_trace_parse(text, "gpt2_block", &tr) != TH_OK || th_program_compile(tr, NULL, &p) != TH_OK) {
    fprintf(stderr, "bench_gpt2: %s\n", th_last_error());
    return 1;
  }
  int nin = th_trace_num_inputs(tr);
  th_tensor *in[16];
  for (int i = 0; i < nin; i++) {
    const th_value *v = th_trace_input(tr, i);
    in[i] = th_tensor_new(th_value_dtype(v), th_value_ndim(v), th_value_shape(v)); /* zeros: timing only */
  }
  double t[256];
  if (iters > 256) iters = 256;
  for (int it = -1; it < iters; it++) {
    th_tensor **outs = NULL;
    int nout = 0;
    double t0 = now_ms();
    if (th_program_run(p, nin, in, &nout, &outs) != TH_OK) {
      fprintf(stderr, "bench_gpt2: %s\n", th_last_error());
      return 1;
    }
    double t1 = now_ms();
    if (it >= 0) t[it] = t1 - t0;
    for (int i = 0; i < nout; i++) th_tensor_release(outs[i]);
    free(outs);
  }
  qsort(t, (size_t)iters, sizeof t[0], cmp);
  double flops = 2.0 * B * T * (double)C * C * (3 + 1 + 4 + 4) + 2.0 * 2.0 * B * T * (double)T * C;
  printf("gpt2_block B=%d T=%d C=%d H=%d %s: min %.1f ms  median %.1f ms  max %.1f ms  (%.1f GFLOP/s at median)\n",
         B, T, C, H, dt, t[0], t[iters / 2], t[iters - 1], flops / (t[iters / 2] * 1e6));
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  th_program_free(p);
  th_trace_free(tr);
  free(text);
  return 0;
}
