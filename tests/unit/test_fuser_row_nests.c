/* test_fuser_row_nests.c — the fuser's row nests (codegen.c: reductions over the trailing dims and the
 * pointwise work around them), against float64 references and the eager executor:
 *   - row buffers: a value needed by several passes (softmax's exp) is computed once per row into a
 *     per-thread buffer for short contiguous rows and recomputed for rows over the buffer length and
 *     strided rows;
 *   - reads invariant over a row's inner dims (a per-row input broadcast along the row, an expanded
 *     [R, 1], a 0-d scalar) are loaded once per row and keep the contiguous fast path; exact int64 row
 *     sums over rows of 8193;
 *   - next-row prefetching (row_loop): a contiguous row is walked in 256-element chunks, each first
 *     prefetching the same elements of the next row of every packed FULL slot, in the pass that computes
 *     a row-buffered value calling a function, else the output pass; never in a region of reductions
 *     only. The chunking leaves results unchanged: int64 row sums and amax exact over rows of 1 to 2049
 *     elements (past the 16 KiB prefetch limit) with 1-, 2- and 4-byte integer outputs, float64 softmax
 *     around the chunk edges, past the row buffers' length, over two inner dims of a transposed input and
 *     with more slots than are prefetched. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "executors/fuser/fuser.h"
#include "thunder/thunder.h"

#include "fuser_test_util.h"
#include "fuser_trace_util.h"

/* Row buffers: exp(x - max) is needed by the sum's pass and later ones, e / s by the second sum's pass
 * and the outputs; both are computed once per row into per-thread buffers (short contiguous rows),
 * else recomputed (rows over the buffer length, strided rows). Each variant against a float64
 * reference: softmax p = e / sum(e), out = p / sum(p * p), and e itself. */
static const char rowbuf_trace[] =
  "def computation(x):\n  # x: \"cpu f32%s\"\n%s"
  "  t0 = prims.amax(x1, (1,))\n  t1 = prims.broadcast_in_dim(t0, %s, (0,))\n  t2 = prims.sub(x1, t1)\n"
  "  t3 = prims.exp(t2)\n  t4 = prims.sum(t3, (1,))\n  t5 = prims.broadcast_in_dim(t4, %s, (0,))\n"
  "  t6 = prims.div(t3, t5)\n  t7 = prims.mul(t6, t6)\n  t8 = prims.sum(t7, (1,))\n"
  "  t9 = prims.broadcast_in_dim(t8, %s, (0,))\n  t10 = prims.div(t6, t9)\n  return (t10, t3)\n";

static void rowbuf_case(int64_t R, int64_t C, bool transposed) {
  char in_shape[64], dom[64], text[2048];
  int64_t dshape[2] = {R, C}, ishape[2] = {transposed ? C : R, transposed ? R : C};
  shape_str(in_shape, sizeof in_shape, 2, ishape);
  tuple_str(dom, sizeof dom, 2, dshape);
  char x1[128];
  if (transposed)
    snprintf(x1, sizeof x1, "  x1 = prims.transpose(x, (1, 0))\n");
  else
    snprintf(x1, sizeof x1, "  x1 = prims.reshape(x, %s)\n", dom);
  snprintf(text, sizeof text, rowbuf_trace, in_shape, x1, dom, dom, dom);
  th_trace *tr = parse(text);
  th_tensor *x = random_tensor(TH_F32, 2, ishape);
  int nout = 0;
  th_tensor **out = run_with(tr, with_fuser, 3, &x, 1, &nout);
  assert_int_equal(nout, 2);
  double *e = malloc(sizeof(double) * (size_t)C), *pp = malloc(sizeof(double) * (size_t)C);
  for (int64_t r = 0; r < R; r++) {
    double mx = -INFINITY, s = 0, q = 0;
    for (int64_t c = 0; c < C; c++) {
      int64_t ix[2] = {transposed ? c : r, transposed ? r : c};
      e[c] = elem(x, ix);
      if (e[c] > mx) mx = e[c];
    }
    for (int64_t c = 0; c < C; c++) s += (e[c] = exp((double)(float)(e[c] - mx)));
    for (int64_t c = 0; c < C; c++) {
      pp[c] = e[c] / s;
      q += pp[c] * pp[c];
    }
    for (int64_t c = 0; c < C; c++) {
      double got_e = th_tensor_get_f64(out[1], r * C + c), got = th_tensor_get_f64(out[0], r * C + c);
      if (fabs(got_e - e[c]) > 4e-7 * e[c] || fabs(got - pp[c] / q) > 2e-6 * (pp[c] / q))
        fail_msg("[%lld, %lld] of %s: e %.9g (want %.9g), out %.9g (want %.9g)", (long long)r, (long long)c, text,
                 got_e, e[c], got, pp[c] / q);
    }
  }
  free(e);
  free(pp);
  for (int i = 0; i < nout; i++) th_tensor_release(out[i]);
  free(out);
  th_tensor_release(x);
  th_trace_free(tr);
}

static void test_row_buffers(void **state) {
  (void)state;
  char text[2048];
  snprintf(text, sizeof text, rowbuf_trace, "[6, 1000]", "  x1 = prims.reshape(x, (6, 1000))\n", "(6, 1000)",
           "(6, 1000)", "(6, 1000)");
  th_trace *tr = parse(text);
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  char *src = region_source(p, &r);
  /* two float buffers of 4096 (32 KiB per thread), one store and at least one load of each */
  const char *want[] = {"const int uc = ic && ninner <= 4096;", "if (uc) {", "] = v", " = rb"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(src, want[i])) {
      fprintf(stderr, "%s\n", src);
      fail_msg("missing `%s` in the source above", want[i]);
    }
  int nbuf = 0;
  for (const char *q = src; (q = strstr(q, "_Alignas(32) float rb")); q++) nbuf++;
  assert_int_equal(nbuf, 2);
  free(src);
  th_fuser_region_clear(&r);
  th_trace_free(p);
  th_trace_free(tr);
  rowbuf_case(6, 1000, false);  /* buffered */
  rowbuf_case(3, 20000, false); /* rows over the buffer length: recomputed */
  rowbuf_case(1000, 6, true);   /* strided rows: recomputed */
  rowbuf_case(5, 4096, false);  /* exactly the buffer length */
  rowbuf_case(5, 4097, false);  /* one over: recomputed */
}

/* A read whose inner dims reach only stride-0 dims of its view chain (a per-row input broadcast along the
 * rows, a [R, 1] input expanded) is loaded once per row (per chunk in a pointwise nest) and does not
 * disable the nest's contiguous fast path (its stride 0 must not fail the `T == 1` test, which would run
 * every loop of the nest strided and scalar). Checked in the source (the load `p<s>[b<s>]`, no stride test of
 * that slot), and the results bit for bit against eager (exact ops), also for rows of length 0. */
static void inv_case(const char *text, const char *const *names, int nnames, const int64_t (*shapes)[3],
                     const int *ndims, bool check_source) {
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  th_trace *tr = parse(text);
  th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
  th_fuser_region r;
  char *src = region_source(p, &r);
  for (int i = 0; i < r.nslots && check_source; i++) { /* (a size-0 dim may read as invariant: nothing is read) */
    if (r.slots[i].is_out) continue;
    bool inv = false;
    for (int k = 0; k < nnames; k++) inv |= !strcmp(th_value_name(r.slots[i].v), names[k]);
    const th_fz_nest *N = &r.nests[r.slots[i].nest];
    char load[64], stride[64];
    snprintf(load, sizeof load, "p%d[b%d]", i, i); /* a strided or contiguous load is p<s>[b<s> + ...] */
    snprintf(stride, sizeof stride, "T[%d] ==", i * TH_MAX_DIMS + N->nd - 1);
    if (inv != (strstr(src, load) != NULL) || inv == (strstr(src, stride) != NULL))
      fail_msg("slot %d (%s, %s): expected %s\n%s", i, th_value_name(r.slots[i].v), inv ? "invariant" : "not",
               inv ? "a per-row load and no stride test" : "a strided load", src);
  }
  free(src);
  th_fuser_region_clear(&r);
  th_trace_free(p);
  int nin = th_trace_num_inputs(tr);
  th_tensor *in[8];
  assert_true(nin <= 8);
  for (int i = 0; i < nin; i++) {
    in[i] = th_tensor_new(TH_F32, ndims[i], shapes[i]);
    float *d = th_tensor_data(in[i]);
    for (int64_t e = 0; e < th_tensor_numel(in[i]); e++) d[e] = (float)((e * 7 + i * 13) % 23) * 0.25f - 2.0f;
  }
  int nf = 0, ne = 0;
  th_tensor **of = run_with(tr, fused, 2, in, nin, &nf), **oe = run_with(tr, eager, 1, in, nin, &ne);
  assert_int_equal(nf, ne);
  for (int i = 0; i < nf; i++)
    assert_memory_equal(th_tensor_data(of[i]), th_tensor_data(oe[i]), (size_t)th_tensor_numel(oe[i]) * 4);
  for (int i = 0; i < nf; i++) th_tensor_release(of[i]), th_tensor_release(oe[i]);
  free(of);
  free(oe);
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
}

static void test_invariant_reads(void **state) {
  (void)state;
  static const char *const rows_names[] = {"r", "e", "q"};
  char text[2048];
  for (int c = 0; c < 2; c++) {
    int64_t n = c ? 0 : 50; /* rows of length 0 read nothing */
    snprintf(
      text, sizeof text,
      "def computation(x, r, e, w, q):\n  # x: \"cpu f32[37, %lld]\"\n  # r: \"cpu f32[37]\"\n"
      "  # e: \"cpu f32[37, 1]\"\n  # w: \"cpu f32[%lld]\"\n  # q: \"cpu f32[37]\"\n"
      "  rb = prims.broadcast_in_dim(r, (37, %lld), (0,))\n  eb = prims.broadcast_in_dim(e, (37, %lld), (0, 1))\n"
      "  wb = prims.broadcast_in_dim(w, (37, %lld), (1,))\n  q1 = prims.reshape(q, (37, 1))\n"
      "  qb = prims.broadcast_in_dim(q1, (37, %lld), (0, 1))\n  t0 = prims.sub(x, rb)\n  t1 = prims.mul(t0, eb)\n"
      "  t2 = prims.add(t1, wb)\n  t3 = prims.mul(t2, qb)\n  s = prims.sum(t3, (1,))\n"
      "  sb = prims.broadcast_in_dim(s, (37, %lld), (0,))\n  y = prims.sub(t3, sb)\n  return (y, s)\n",
      (long long)n, (long long)n, (long long)n, (long long)n, (long long)n, (long long)n, (long long)n);
    const int64_t shapes[5][3] = {{37, n}, {37}, {37, 1}, {n}, {37}};
    const int ndims[5] = {2, 1, 2, 1, 1};
    inv_case(text, rows_names, 3, shapes, ndims, n > 0);
  }
  /* pointwise: a per-row input along the last dim of a 3-D domain, through a transpose */
  static const char *const pw_names[] = {"r"};
  const int64_t shapes[2][3] = {{4, 9, 33}, {9, 4}};
  const int ndims[2] = {3, 2};
  inv_case("def computation(x, r):\n  # x: \"cpu f32[4, 9, 33]\"\n  # r: \"cpu f32[9, 4]\"\n"
           "  rt = prims.transpose(r, (1, 0))\n  rb = prims.broadcast_in_dim(rt, (4, 9, 33), (0, 1))\n"
           "  t0 = prims.mul(x, rb)\n  y = prims.add(t0, 1.0)\n  return y\n",
           pw_names, 1, shapes, ndims, true);
}

/* The next row's prefetches (codegen.c, row_loop): spread in chunks over the pass that computes a
 * row-buffered value that calls a function (softmax's exp, pass 2: reads with rw = 0, the output with
 * rw = 1), else over the output pass (a buffered division included); no other pass prefetches. Results against the eager executor over row lengths around
 * the 256-element chunk, past the 16 KiB limit (no prefetch) and transposed (the strided path). */
static char *section(const char *src, const char *from, const char *to) {
  const char *a = strstr(src, from), *b = to ? strstr(src, to) : src + strlen(src);
  if (!a || !b || b < a) fail_msg("no section %s .. %s in\n%s", from, to ? to : "(end)", src);
  return strndup(a, (size_t)(b - a));
}

static void pf_case(const char *body, const char *pf_from, const char *pf_to, bool bitwise) {
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  static const int64_t shapes[][2] = {{7, 1},   {7, 63},   {7, 64},   {5, 65},  {3, 255}, {3, 256},
                                      {4, 257}, {3, 1000}, {2, 5000}, {1, 100}, {9, 130}};
  for (int c = 0; c < (int)(sizeof shapes / sizeof *shapes) + 1; c++) {
    bool tr_in = c == (int)(sizeof shapes / sizeof *shapes); /* last: x transposed (strided rows) */
    int64_t R = tr_in ? 6 : shapes[c][0], C = tr_in ? 70 : shapes[c][1];
    char text[1024];
    if (tr_in)
      snprintf(text, sizeof text,
               "def computation(xt):\n  # xt: \"cpu f32[%lld, %lld]\"\n"
               "  x = prims.transpose(xt, (1, 0))\n%s",
               (long long)C, (long long)R, body);
    else
      snprintf(text, sizeof text, "def computation(x):\n  # x: \"cpu f32[%lld, %lld]\"\n%s", (long long)R, (long long)C,
               body);
    for (int k = 0; k < 2; k++) { /* the shape placeholders RR and CC */
      char *at;
      while ((at = strstr(text, k ? "CC" : "RR"))) {
        char num[24];
        int n = snprintf(num, sizeof num, "%lld", (long long)(k ? C : R));
        memmove(at + n, at + 2, strlen(at + 2) + 1);
        memcpy(at, num, (size_t)n);
      }
    }
    th_trace *tr = parse(text);
    if (C == 64) { /* the structure (a [7, 1] trace folds differently) */
      th_trace *p = partition(tr, TH_FUSER_DATAFLOW);
      th_fuser_region r;
      char *src = region_source(p, &r);
      char *in = section(src, pf_from, pf_to), *before = section(src, "/* pass 1 */", pf_from);
      /* a chunk of 256 floats: 16 lines of 64 bytes each, for reading (x) and for writing (y) */
      assert_non_null(strstr(in, "__builtin_prefetch(pf0 + jb * 4 + 0, 0, 3)"));
      assert_non_null(strstr(in, "__builtin_prefetch(pf0 + jb * 4 + 960, 0, 3)"));
      assert_null(strstr(in, "__builtin_prefetch(pf0 + jb * 4 + 1024, 0, 3)"));
      assert_non_null(strstr(in, "__builtin_prefetch(pf1 + jb * 4 + 0, 1, 3)"));
      assert_non_null(strstr(in, "__builtin_prefetch(pf1 + jb * 4 + 960, 1, 3)"));
      assert_null(strstr(before, "__builtin_prefetch"));
      /* rows shorter than one chunk share pages: no next-row prefetch for them */
      assert_non_null(strstr(src, "T[0] == ninner && ninner >= 256 && "));
      if (pf_to) {
        char *after = section(src, pf_to, NULL);
        assert_null(strstr(after, "__builtin_prefetch"));
        free(after);
      }
      free(in), free(before), free(src);
      th_fuser_region_clear(&r);
      th_trace_free(p);
    }
    int64_t shp[2] = {tr_in ? C : R, tr_in ? R : C};
    th_tensor *x = th_tensor_new(TH_F32, 2, shp);
    float *d = th_tensor_data(x);
    for (int64_t e = 0; e < R * C; e++) d[e] = (float)((e * 7 + 3) % 23) * 0.25f - 2.0f;
    int nf = 0, ne = 0;
    th_tensor **of = run_with(tr, fused, 2, &x, 1, &nf), **oe = run_with(tr, eager, 1, &x, 1, &ne);
    assert_int_equal(nf, 1);
    assert_int_equal(ne, 1);
    const float *f = th_tensor_data(of[0]), *g = th_tensor_data(oe[0]);
    for (int64_t e = 0; e < R * C; e++)
      if (bitwise ? memcmp(f + e, g + e, 4) != 0 : fabsf(f[e] - g[e]) > 2e-6f * fabsf(g[e]))
        fail_msg("[%lld, %lld]%s element %lld: fused %a, eager %a", (long long)R, (long long)C,
                 tr_in ? " (transposed)" : "", (long long)e, f[e], g[e]);
    th_tensor_release(of[0]), th_tensor_release(oe[0]), th_tensor_release(x);
    free(of), free(oe);
    th_trace_free(tr);
  }
}

static void test_row_prefetch(void **state) {
  (void)state;
  /* softmax: max (pass 1), exp kept in a row buffer and summed (pass 2), the division (outputs) */
  pf_case("  m = prims.amax(x, (1,))\n  mb = prims.broadcast_in_dim(m, (RR, CC), (0,))\n  t = prims.sub(x, mb)\n"
          "  e = prims.exp(t)\n  s = prims.sum(e, (1,))\n  sb = prims.broadcast_in_dim(s, (RR, CC), (0,))\n"
          "  y = prims.div(e, sb)\n  return y\n",
          "/* pass 2 */", "/* the outputs */", false);
  /* a row-buffered division is not enough work to hide the chunks' reduction epilogues: the output pass */
  pf_case("  d = prims.div(x, 4.0)\n  s = prims.sum(d, (1,))\n  sb = prims.broadcast_in_dim(s, (RR, CC), (0,))\n"
          "  y = prims.sub(d, sb)\n  return y\n",
          "/* the outputs */", NULL, true);
  /* no row buffer: centring by the row mean prefetches in the output pass (sums of quarters are exact) */
  pf_case("  s = prims.sum(x, (1,))\n  m = prims.div(s, 4.0)\n  mb = prims.broadcast_in_dim(m, (RR, CC), (0,))\n"
          "  y = prims.sub(x, mb)\n  return y\n",
          "/* the outputs */", NULL, true);
}

/* row sums of x + r[i] * e[i] - s over rows of 8193 (two 4096-chunks and a tail), r broadcast along the
 * row, e [R, 1] expanded, s 0-d; and the full sum of s broadcast to [R, C]: exact in int64 */
static void test_invariant_row_reads(void **state) {
  (void)state;
  th_trace *tr =
    parse("def computation(x, r, e, s):\n"
          "  # x: \"cpu i64[3, 8193]\"\n  # r: \"cpu i64[3]\"\n  # e: \"cpu i64[3, 1]\"\n  # s: \"cpu i64[]\"\n"
          "  rb = prims.broadcast_in_dim(r, (3, 8193), (0,))\n"
          "  eb = prims.broadcast_in_dim(e, (3, 8193), (0, 1))\n"
          "  sb = prims.broadcast_in_dim(s, (3, 8193), ())\n"
          "  t0 = prims.mul(rb, eb)\n  t1 = prims.add(x, t0)\n  t2 = prims.sub(t1, sb)\n"
          "  t3 = prims.sum(t2, (1,))\n  t4 = prims.sum(sb, (0, 1))\n  return (t3, t4)\n");
  int64_t sx[2] = {3, 8193}, sr[1] = {3}, se[2] = {3, 1};
  th_tensor *x = th_tensor_new(TH_I64, 2, sx), *r = th_tensor_new(TH_I64, 1, sr), *e = th_tensor_new(TH_I64, 2, se),
            *s = th_tensor_new(TH_I64, 0, NULL);
  int64_t *xp = th_tensor_data(x), *rp = th_tensor_data(r), *ep = th_tensor_data(e);
  for (int i = 0; i < 3 * 8193; i++) xp[i] = (i * 7919) % 1000 - 500;
  for (int i = 0; i < 3; i++) rp[i] = 3 + i, ep[i] = 11 - 4 * i;
  *(int64_t *)th_tensor_data(s) = -5;
  th_tensor *in[4] = {x, r, e, s};
  int no = 0;
  th_tensor **out = run_fused(tr, in, 4, &no, true);
  for (int i = 0; i < 3; i++) {
    int64_t want = 0;
    for (int j = 0; j < 8193; j++) want += xp[i * 8193 + j] + rp[i] * ep[i] + 5;
    assert_int_equal(((int64_t *)th_tensor_data(out[0]))[i], want);
  }
  assert_int_equal(*(int64_t *)th_tensor_data(out[1]), -5 * 3 * 8193);
  release_all(out, no);
  th_tensor_release(x);
  th_tensor_release(r);
  th_tensor_release(e);
  th_tensor_release(s);
  th_trace_free(tr);
}

/* the generated C of the trace's first bsym after partitioning (a fusion region) */
static char *first_region_source(const char *text) {
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

/* Regions of reductions only (no FULL output, no row buffer): no pass is chunked (chunking a cheap
 * reduction pass only adds the chunks' epilogues: a bf16 or f32 sum of squares, amax(|x|), var_mean). */
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
    char *src = first_region_source(text);
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
      if (!ok)
        fail_msg("[%lld, %lld] element (%lld, %lld): y = %lld wrong in some output", (long long)R, (long long)C,
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
    if (d < nd - r)
      snprintf(keep + strlen(keep), sizeof keep - strlen(keep), "%d, ", d);
    else
      snprintf(red + strlen(red), sizeof red - strlen(red), "%d, ", d), ninner *= shape[d];
    numel *= shape[d];
  }
  strcat(keep, ")"), strcat(red, ")");
  char ishape[96] = "[";
  for (int d = 0; d < nd; d++)
    snprintf(ishape + strlen(ishape), sizeof ishape - strlen(ishape), "%lld%s",
             (long long)shape[tr_in ? nd - 1 - d : d], d + 1 < nd ? ", " : "]");
  len += (size_t)snprintf(text + len, sizeof text - len, "def computation(xi");
  for (int k = 0; k < nadd; k++) len += (size_t)snprintf(text + len, sizeof text - len, ", w%d", k);
  len += (size_t)snprintf(text + len, sizeof text - len, "):\n  # xi: \"cpu f64%s\"\n", ishape);
  for (int k = 0; k < nadd; k++)
    len += (size_t)snprintf(text + len, sizeof text - len, "  # w%d: \"cpu f64%s\"\n", k, ishape);
  if (tr_in)
    len += (size_t)snprintf(text + len, sizeof text - len, "  x0 = prims.transpose(xi, %s)\n", perm);
  else
    len += (size_t)snprintf(text + len, sizeof text - len, "  x0 = prims.mul(xi, 1.0)\n");
  for (int k = 0; k < nadd; k++)
    len += (size_t)snprintf(text + len, sizeof text - len, "  x%d = prims.add(x%d, w%d)\n", k + 1, k, k);
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
  static const int64_t cs[] = {1,   63,  64,   65,  255,
                               256, 257, 2049, 4097}; /* 2049: past 16 KiB; 4097: past the row buffers */
  for (int k = 0; k < (int)(sizeof cs / sizeof *cs); k++) softmax_case(2, (int64_t[]){4, cs[k]}, 1, false, 0);
  softmax_case(2, (int64_t[]){1, 300}, 1, false, 0);      /* one row */
  softmax_case(4, (int64_t[]){2, 3, 4, 40}, 2, false, 0); /* two inner dims: ninner 160 */
  softmax_case(4, (int64_t[]){2, 3, 4, 40}, 2, true, 0);  /* transposed: the strided walks */
  softmax_case(3, (int64_t[]){3, 1, 1}, 1, false, 0);     /* rows of one element */
  softmax_case(2, (int64_t[]){3, 70}, 1, false, 17);      /* 18 inputs + 2 outputs: over 16 slots */
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_row_buffers),
    cmocka_unit_test(test_invariant_reads),
    cmocka_unit_test(test_row_prefetch),
    cmocka_unit_test(test_invariant_row_reads),
    cmocka_unit_test(test_reduction_only_regions_unchunked),
    cmocka_unit_test(test_int_rows_exact_over_chunks),
    cmocka_unit_test(test_f64_softmax_layouts),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
