/* test_blas_matmul_views.c — the BLAS executor's batched matmul (oneDNN) on views whose batch dims do not
 * collapse (split per leading index): ranks 4, 5 and 8, permuted batch dims, a stride-0 (expanded) batch
 * dim, an overlapping batch (stride smaller than the matrix), size-1 batch dims; against a float64 loop
 * over the views. */
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

#include "program_test_util.h"

/* ---- BLAS batched matmul on views ------------------------------------------------------------------- */

static double at(const th_tensor *t, const int64_t *idx) {
  const int64_t *st = th_tensor_strides(t);
  int64_t off = 0;
  for (int d = 0; d < th_tensor_ndim(t); d++) off += idx[d] * st[d];
  return ((const float *)th_tensor_data(t))[off];
}

/* x, y: views (shape, strides) over fresh f32 buffers of xspan / yspan elements; same batch shape. */
static void mm_case(int nd, const int64_t *xs, const int64_t *xst, int64_t xspan, const int64_t *ys, const int64_t *yst,
                    int64_t yspan) {
  char text[800], sx[160] = "", sy[160] = "";
  for (int d = 0; d < nd; d++) {
    snprintf(sx + strlen(sx), sizeof sx - strlen(sx), "%s%lld", d ? ", " : "", (long long)xs[d]);
    snprintf(sy + strlen(sy), sizeof sy - strlen(sy), "%s%lld", d ? ", " : "", (long long)ys[d]);
  }
  snprintf(text, sizeof text,
           "def computation(x, y):\n  # x: \"cpu f32[%s]\"\n  # y: \"cpu f32[%s]\"\n  t0 = prims.matmul(x, y)\n"
           "  return t0\n",
           sx, sy);
  static const char *const bl[] = {"blas", "eager"};
  th_program *p = compile_text(text, bl, 2);
  const th_trace *et = th_program_trace(p);
  bool claimed = false;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = et->bsyms.items[i];
    if (b->sym->id == TH_OP_prims_matmul) claimed = b->executor && !strcmp(b->executor, "blas");
  }
  assert_true(claimed);
  th_tensor *bx = th_tensor_new(TH_F32, 1, &xspan), *by = th_tensor_new(TH_F32, 1, &yspan);
  for (int64_t i = 0; i < xspan; i++) ((float *)th_tensor_data(bx))[i] = (float)((i * 7919) % 13) - 6.0f;
  for (int64_t i = 0; i < yspan; i++) ((float *)th_tensor_data(by))[i] = (float)((i * 104729) % 11) - 5.0f;
  th_tensor *in[2] = {th_tensor_view(bx, nd, xs, xst, 0), th_tensor_view(by, nd, ys, yst, 0)};
  assert_non_null(in[0]);
  assert_non_null(in[1]);
  th_tensor *o = run_one(p, 2, in);
  const int64_t *os = th_tensor_shape(o), n = th_tensor_numel(o), K = xs[nd - 1];
  for (int64_t f = 0; f < n; f++) {
    int64_t idx[TH_MAX_DIMS], ix[TH_MAX_DIMS], iy[TH_MAX_DIMS], q = f;
    for (int d = nd - 1; d >= 0; d--) idx[d] = q % os[d], q /= os[d];
    double acc = 0;
    for (int64_t k = 0; k < K; k++) {
      for (int d = 0; d < nd - 2; d++) ix[d] = iy[d] = idx[d];
      ix[nd - 2] = idx[nd - 2], ix[nd - 1] = k, iy[nd - 2] = k, iy[nd - 1] = idx[nd - 1];
      acc += at(in[0], ix) * at(in[1], iy);
    }
    /* small integers: every product and partial sum is exact in float32 */
    if (((const float *)th_tensor_data(o))[f] != acc)
      fail_msg("matmul [%s] @ [%s]: element %lld is %g, expected %g", sx, sy, (long long)f,
               ((const float *)th_tensor_data(o))[f], acc);
  }
  th_tensor_release(o);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_tensor_release(bx);
  th_tensor_release(by);
  th_program_free(p);
}

static void test_matmul_batched_views(void **state) {
  (void)state;
  /* [2, 3, 5, 6] permuted from [3, 2, 5, 6]: strides (30, 60, 6, 1), batch does not collapse */
  mm_case(4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){30, 60, 6, 1}, 180, (int64_t[]){2, 3, 6, 4},
          (int64_t[]){72, 24, 4, 1}, 144);
  /* 5-D, x split twice; y expanded along dim 1 (stride 0) with a transposed matrix */
  mm_case(5, (int64_t[]){2, 3, 2, 5, 6}, (int64_t[]){30, 120, 60, 6, 1}, 360, (int64_t[]){2, 3, 2, 6, 4},
          (int64_t[]){48, 0, 24, 1, 6}, 96);
  /* x broadcast along the leading dim (stride 0) */
  mm_case(4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){0, 30, 6, 1}, 90, (int64_t[]){2, 3, 6, 4}, (int64_t[]){24, 48, 4, 1},
          144);
  /* overlapping batch: x's batch strides (1, 2) are below its matrix span */
  mm_case(4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){1, 2, 6, 1}, 36, (int64_t[]){2, 3, 6, 4}, (int64_t[]){72, 24, 4, 1},
          144);
  /* 8-D with size-1 batch dims, both sides permuted */
  mm_case(8, (int64_t[]){2, 1, 2, 2, 1, 2, 3, 2}, (int64_t[]){6, 6, 12, 48, 6, 24, 2, 1}, 96,
          (int64_t[]){2, 1, 2, 2, 1, 2, 2, 3}, (int64_t[]){6, 1, 48, 12, 1, 24, 1, 2}, 96);
  /* inner matrix stepped in both dims (neither row- nor column-major), batch collapses */
  mm_case(4, (int64_t[]){3, 2, 4, 3}, (int64_t[]){128, 64, 16, 2}, 384, (int64_t[]){3, 2, 3, 5},
          (int64_t[]){30, 15, 5, 1}, 90);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_matmul_batched_views),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
