/* bench_fuser.c — gelu(x * 2 + 1) (erf form) on 16M f32: the fuser's one fused loop vs the eager
 * executor's seven kernels. Interleaved rounds; prints min / median / max in ms.
 * Usage: bench_fuser [rounds] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "thunder/jit.h"
#include "thunder/tensor.h"
#include "thunder/trace.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static const char *TEXT = "def computation(x):\n  # x: \"cpu f32[16777216]\"\n"
                          "  t0 = prims.mul(x, 2.0)\n  t1 = prims.add(t0, 1.0)\n"
                          "  t2 = prims.mul(t1, 0.7071067811865476)\n  t3 = prims.erf(t2)\n"
                          "  t4 = prims.add(t3, 1.0)\n  t5 = prims.mul(t1, 0.5)\n  t6 = prims.mul(t5, t4)\n"
                          "  return t6\n";

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 10;
  if (rounds < 1 || rounds > 1000) rounds = 10;
  th_trace *tr = NULL;
  if (th_trace_parse(TEXT, "<bench>", &tr) != TH_OK) {
    fprintf(stderr, "%s\n", th_last_error());
    return 1;
  }
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  const char *const *lists[2] = {fused, eager};
  const int counts[2] = {2, 1};
  const char *names[2] = {"fuser", "eager"};
  th_program *p[2];
  for (int k = 0; k < 2; k++) {
    th_compile_options o;
    memset(&o, 0, sizeof o);
    o.executors = lists[k];
    o.nexecutors = counts[k];
    if (th_program_compile(tr, &o, &p[k]) != TH_OK) {
      fprintf(stderr, "compile (%s): %s\n", names[k], th_last_error());
      return 1;
    }
  }
  int64_t n = 16777216;
  th_tensor *x = th_tensor_empty(TH_F32, 1, &n);
  float *xd = th_tensor_data(x);
  for (int64_t i = 0; i < n; i++) xd[i] = (float)((i % 2001) - 1000) / 500.0f;
  double *t[2];
  for (int k = 0; k < 2; k++) t[k] = malloc(sizeof(double) * (size_t)rounds);
  for (int r = -1; r < rounds; r++) /* round -1 warms up */
    for (int k = 0; k < 2; k++) {
      int nout = 0;
      th_tensor **out = NULL;
      double t0 = now_ms();
      if (th_program_run(p[k], 1, &x, &nout, &out) != TH_OK) {
        fprintf(stderr, "run: %s\n", th_last_error());
        return 1;
      }
      double dt = now_ms() - t0;
      if (r >= 0) t[k][r] = dt;
      for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
      free(out);
    }
  printf("| executor | min ms | median ms | max ms |\n|---|---|---|---|\n");
  double med[2];
  for (int k = 0; k < 2; k++) {
    qsort(t[k], (size_t)rounds, sizeof(double), cmp_double);
    med[k] = t[k][rounds / 2];
    printf("| %s | %.2f | %.2f | %.2f |\n", names[k], t[k][0], med[k], t[k][rounds - 1]);
    free(t[k]);
  }
  printf("\neager/fuser (medians): %.2fx\n", med[1] / med[0]);
  th_tensor_release(x);
  th_program_free(p[0]);
  th_program_free(p[1]);
  th_trace_free(tr);
  return 0;
}
