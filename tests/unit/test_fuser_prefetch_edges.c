/* test_fuser_prefetch_edges.c — adversarial checks of the row nests' next-row prefetching (codegen.c,
 * row_loop: one pass of a row nest walks a contiguous row in 256-element chunks, each first prefetching
 * the same elements of the next row of every packed FULL slot). The chunking must not change results:
 * int64 row sums and amax stay exact over rows of 1, 63, 64, 65, 130, 255, 256, 257 and 2049 elements
 * (past the 16 KiB prefetch limit), with 1-, 2- and 4-byte integer outputs (4 to 16 prefetched lines per
 * chunk);
 * float64 softmax matches a float64 reference around the chunk edges, past the row buffers' length, over
 * two inner dims of a transposed input, and with more slots than are prefetched (16). And the pass the
 * prefetches are spread over must be one that can hide the chunks' reduction epilogues (the design:
 * the pass computing a row-buffered value that calls a function, else the output pass): a region of
 * reductions only has neither, and chunking its cheap reduction pass made the bf16 sum of squares ~1.5x
 * slower. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "core/ir.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "fuser_test_util.h"

/* the generated C of the trace's first bsym after partitioning (a fusion region) */
static char *region_source(const char *text) {
  th_trace *tr = parse(text), *p = NULL;
  if (th_fuser_partition(tr, TH_FUSER_DATAFLOW, NULL, 0, &p) != TH_OK) fail_msg("partition: %s", th_last_error());
  th_ir_ctx *ir = th_ir_ctx_new();
  assert_non_null(ir);
  th_fuser_region r;
  if (th_fuser_codegen(p->bsyms.items[0], ir, &r) != TH_OK) fail_msg("codegen: %s", th_last_error());
  size_t at = 0;
  char *src = th_fuser_unit_source(ir, &at, NULL);
  assert_non_null(src);
  char *body = strdup(src + at);
  free(src);
  th_fuser_region_clear(&r);
  th_ir_ctx_free(ir);
  th_trace_free(p);
  th_trace_free(tr);
  return body;
}

/* Regions of reductions only (no FULL output, no row buffer): no pass is chunked. Each of these was
 * measured against the parent commit's code (bench: th_program_run median of 60, one thread, [2048,
 * 1024]): bf16 sum of squares 1.31-1.56 ms -> 2.00-2.26 ms, f32 sum of squares 0.69-0.84 -> 0.91-0.95,
 * amax(|x|) 0.38-0.62 -> 0.74-0.84, var_mean(2x) 0.86-1.13 -> 1.27-1.35. */
static void test_reduction_only_regions_unchunked(void **state) {
  (void)state;
  static const char *const bodies[] = {
      "  xf = prims.convert_element_type(x, dtypes.float32)\n  q = prims.mul(xf, xf)\n  s = prims.sum(q, (1,))\n"
      "  return s\n",
      "  a = prims.mul(x, 2.0)\n  v, m = prims.var_mean(a, (1,), correction=0)\n  return (v, m)\n",
      "  a = prims.abs(x)\n  s = prims.amax(a, (1,))\n  return s\n",
  };
  static const char *const dts[] = {"bf16", "f32", "f32"};
  for (int c = 0; c < 3; c++) {
    char text[512];
    snprintf(text, sizeof text, "def computation(x):\n  # x: \"cpu %s[64, 1024]\"\n%s", dts[c], bodies[c]);
    char *src = region_source(text);
    if (strstr(src, "for (int64_t jc = 0;"))
      fail_msg("the reduction pass of a region of reductions only is chunked (case %d: %s)", c, bodies[c]);
    free(src);
  }
}

/* int64 rows of large values (|x| ~ 2^50: a float64 accumulator would round): s = sum(x), m = amax(x),
 * and y = x - s broadcast stored as int64, int32, int16 and bool (y > 0): exact against int64 sums here. */
static void int_case(int64_t R, int64_t C) {
  char text[1200];
  snprintf(text, sizeof text,
           "def computation(x):\n  # x: \"cpu i64[%lld, %lld]\"\n"
           "  s = prims.sum(x, (1,))\n  m = prims.amax(x, (1,))\n"
           "  sb = prims.broadcast_in_dim(s, (%lld, %lld), (0,))\n  y = prims.sub(x, sb)\n"
           "  y32 = prims.convert_element_type(y, dtypes.int32)\n  y16 = prims.convert_element_type(y, dtypes.int16)\n"
           "  yp = prims.gt(y, 0)\n  return (s, m, y, y32, y16, yp)\n",
           (long long)R, (long long)C, (long long)R, (long long)C);
  th_trace *tr = parse(text);
  int64_t shp[2] = {R, C};
  th_tensor *x = th_tensor_new(TH_I64, 2, shp);
  int64_t *xp = th_tensor_data(x);
  for (int64_t e = 0; e < R * C; e++) xp[e] = ((e % 2) ? -1 : 1) * ((INT64_C(1) << 50) + (e * 7919) % 100003);
  int n = 0;
  th_tensor **o = run_fused(tr, &x, 1, &n, true);
  assert_int_equal(n, 6);
  for (int64_t r = 0; r < R; r++) {
    int64_t s = 0, m = INT64_MIN;
    for (int64_t j = 0; j < C; j++) s += xp[r * C + j], m = xp[r * C + j] > m ? xp[r * C + j] : m;
    if (((int64_t *)th_tensor_data(o[0]))[r] != s || ((int64_t *)th_tensor_data(o[1]))[r] != m)
      fail_msg("[%lld, %lld] row %lld: sum %lld (want %lld), amax %lld (want %lld)", (long long)R, (long long)C,
               (long long)r, (long long)((int64_t *)th_tensor_data(o[0]))[r], (long long)s,
               (long long)((int64_t *)th_tensor_data(o[1]))[r], (long long)m);
    for (int64_t j = 0; j < C; j++) {
      int64_t y = xp[r * C + j] - s, e = r * C + j;
      bool ok = ((int64_t *)th_tensor_data(o[2]))[e] == y && ((int32_t *)th_tensor_data(o[3]))[e] == (int32_t)y &&
                ((int16_t *)th_tensor_data(o[4]))[e] == (int16_t)y && ((bool *)th_tensor_data(o[5]))[e] == (y > 0);
      if (!ok) fail_msg("[%lld, %lld] element (%lld, %lld): y = %lld wrong in some output", (long long)R, (long long)C,
                        (long long)r, (long long)j, (long long)y);
    }
  }
  release_all(o, n);
  th_tensor_release(x);
  th_trace_free(tr);
}

static void test_int_rows_exact_over_chunks(void **state) {
  (void)state;
  static const int64_t cs[] = {1, 63, 64, 65, 130, 255, 256, 257, 2049};
  for (int k = 0; k < (int)(sizeof cs / sizeof *cs); k++) int_case(5, cs[k]);
  int_case(1, 200); /* one row: the parallel passes */
}

/* float64 softmax over the last `r` dims of x (given as its transpose when `tr_in`): against float64
 * references within 1e-13 relative. `nadd` further inputs are added to x first (more slots). */
static void softmax_case(int nd, const int64_t *shape, int r, bool tr_in, int nadd) {
  char text[4096], dom[96] = "(", keep[48] = "(", red[48] = "(", perm[48] = "(";
  size_t len = 0;
  int64_t numel = 1, ninner = 1;
  for (int d = 0; d < nd; d++) {
    snprintf(dom + strlen(dom), sizeof dom - strlen(dom), "%lld%s", (long long)shape[d], d + 1 < nd ? ", " : ")");
    snprintf(perm + strlen(perm), sizeof perm - strlen(perm), "%d%s", nd - 1 - d, d + 1 < nd ? ", " : ")");
    if (d < nd - r) snprintf(keep + strlen(keep), sizeof keep - strlen(keep), "%d, ", d);
    else snprintf(red + strlen(red), sizeof red - strlen(red), "%d, ", d), ninner *= shape[d];
    numel *= shape[d];
  }
  strcat(keep, ")"), strcat(red, ")");
  char ishape[96] = "[";
  for (int d = 0; d < nd; d++)
    snprintf(ishape + strlen(ishape), sizeof ishape - strlen(ishape), "%lld%s", (long long)shape[tr_in ? nd - 1 - d : d],
             d + 1 < nd ? ", " : "]");
  len += (size_t)snprintf(text + len, sizeof text - len, "def computation(xi");
  for (int k = 0; k < nadd; k++) len += (size_t)snprintf(text + len, sizeof text - len, ", w%d", k);
  len += (size_t)snprintf(text + len, sizeof text - len, "):\n  # xi: \"cpu f64%s\"\n", ishape);
  for (int k = 0; k < nadd; k++) len += (size_t)snprintf(text + len, sizeof text - len, "  # w%d: \"cpu f64%s\"\n", k, ishape);
  if (tr_in) len += (size_t)snprintf(text + len, sizeof text - len, "  x0 = prims.transpose(xi, %s)\n", perm);
  else len += (size_t)snprintf(text + len, sizeof text - len, "  x0 = prims.mul(xi, 1.0)\n");
  for (int k = 0; k < nadd; k++) len += (size_t)snprintf(text + len, sizeof text - len, "  x%d = prims.add(x%d, w%d)\n", k + 1, k, k);
  snprintf(text + len, sizeof text - len,
           "  m = prims.amax(x%d, %s)\n  mb = prims.broadcast_in_dim(m, %s, %s)\n  t = prims.sub(x%d, mb)\n"
           "  e = prims.exp(t)\n  s = prims.sum(e, %s)\n  sb = prims.broadcast_in_dim(s, %s, %s)\n"
           "  y = prims.div(e, sb)\n  return (y, e)\n",
           nadd, red, dom, keep, nadd, red, dom, keep);
  th_trace *tr = parse(text);
  th_tensor *in[24];
  int64_t is[8];
  for (int d = 0; d < nd; d++) is[d] = shape[tr_in ? nd - 1 - d : d];
  for (int k = 0; k <= nadd; k++) {
    in[k] = th_tensor_new(TH_F64, nd, is);
    double *p = th_tensor_data(in[k]);
    for (int64_t e = 0; e < numel; e++) p[e] = (double)((e * 37 + 11 * k + 5) % 101) / 16.0 - 3.0;
  }
  int n = 0;
  th_tensor **o = run_fused(tr, in, nadd + 1, &n, true);
  const double *y = th_tensor_data(o[0]), *eo = th_tensor_data(o[1]);
  double *v = malloc((size_t)ninner * sizeof *v);
  for (int64_t row = 0; row < numel / ninner; row++) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < ninner; j++) { /* element (row, j) of the domain, read through the layout */
      int64_t e = row * ninner + j, src = e;
      if (tr_in) { /* the input is the transpose: domain dim d has the input stride prod(shape[0 .. d-1]) */
        int64_t rem = e, id[8], st = 1;
        for (int d = nd - 1; d >= 0; d--) id[d] = rem % shape[d], rem /= shape[d];
        src = 0;
        for (int d = 0; d < nd; d++) src += id[d] * st, st *= shape[d];
      }
      v[j] = 0;
      for (int k = 0; k <= nadd; k++) v[j] += ((const double *)th_tensor_data(in[k]))[src];
      mx = v[j] > mx ? v[j] : mx;
    }
    for (int64_t j = 0; j < ninner; j++) v[j] = exp(v[j] - mx), s += v[j];
    for (int64_t j = 0; j < ninner; j++) {
      int64_t e = row * ninner + j;
      if (fabs(y[e] - v[j] / s) > 1e-13 * (v[j] / s) || fabs(eo[e] - v[j]) > 1e-14 * v[j])
        fail_msg("%s\nelement %lld: y %.17g (want %.17g), e %.17g (want %.17g)", text, (long long)e, y[e], v[j] / s,
                 eo[e], v[j]);
    }
  }
  free(v);
  release_all(o, n);
  for (int k = 0; k <= nadd; k++) th_tensor_release(in[k]);
  th_trace_free(tr);
}

static void test_f64_softmax_layouts(void **state) {
  (void)state;
  static const int64_t cs[] = {1, 63, 64, 65, 255, 256, 257, 2049, 4097}; /* 2049: past 16 KiB; 4097: past the row buffers */
  for (int k = 0; k < (int)(sizeof cs / sizeof *cs); k++) softmax_case(2, (int64_t[]){4, cs[k]}, 1, false, 0);
  softmax_case(2, (int64_t[]){1, 300}, 1, false, 0);              /* one row */
  softmax_case(4, (int64_t[]){2, 3, 4, 40}, 2, false, 0);         /* two inner dims: ninner 160 */
  softmax_case(4, (int64_t[]){2, 3, 4, 40}, 2, true, 0);          /* transposed: the strided walks */
  softmax_case(3, (int64_t[]){3, 1, 1}, 1, false, 0);             /* rows of one element */
  softmax_case(2, (int64_t[]){3, 70}, 1, false, 17);              /* 18 inputs + 2 outputs: over 16 slots */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduction_only_regions_unchunked),
      cmocka_unit_test(test_int_rows_exact_over_chunks),
      cmocka_unit_test(test_f64_softmax_layouts),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
