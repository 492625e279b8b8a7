/* test_where_matmul_views.c — coverage of two executor paths, each against an independent reference:
 *   - the fuser's prims.where (a bit select in the generated C): every integer dtype, f16 (quiet NaNs with
 *     payloads, -0.0, infinities), f64 and bool, with a predicate computed in the region, a number
 *     predicate, a constant in either position, a broadcast operand and a transposed one; each element of
 *     the fused result must be the exact bits of the input (or constant) the predicate picks, computed
 *     here from the inputs, and the where members must have been fused;
 *   - the BLAS executor's batched matmul on views whose batch dims do not collapse (split per leading
 *     index): ranks 4, 5 and 8, permuted batch dims, a stride-0 (expanded) batch dim, an overlapping
 *     batch (stride smaller than the matrix), size-1 batch dims; against a float64 loop over the views.
 * f16 signalling NaNs are left out on purpose: the fuser decodes f16 through core/scalar.h, which sets the
 * quiet bit, where eager's where copies the bits. */
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
#include "thunder/thunder.h"

static th_program *compile_text(const char *text, const char *const *ex, int nex) {
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

static th_tensor *run_one(th_program *p, int nin, th_tensor **in) {
  int nout = 0;
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, &nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, 1);
  th_tensor *r = out[0];
  free(out);
  return r;
}

/* prims.where members inside fusion regions of p's execution trace. */
static int fused_wheres(const th_program *p) {
  const th_trace *et = th_program_trace(p);
  int n = 0;
  for (int i = 0; i < et->bsyms.n; i++) {
    const th_bsym *b = et->bsyms.items[i];
    if (b->sym->id != TH_OP_DYNAMIC) continue;
    for (int j = 0; j < b->nsubs; j++) n += b->subs[j]->sym->id == TH_OP_prims_where;
  }
  return n;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint8_t rbyte(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint8_t)(rng >> 56);
}

/* One dtype: out = where(p, where(q, a_bcast, b^T), where(True, c, a_bcast)) with p, q computed from
 * integer inputs and c a constant; R x C domain, a is [R, 1], b is [C, R]. */
typedef struct {
  const char *name;
  th_dtype dt;
  const char *cst;          /* the constant's trace literal */
  unsigned char cbits[8];   /* its bits in dt (little endian) */
} where_dtype;

static void where_case(const where_dtype *w) {
  enum { R = 37, C = 301 };
  char text[1600];
  snprintf(text, sizeof text,
           "def computation(p0, q0, a, b):\n  # p0: \"cpu i32[%d, %d]\"\n  # q0: \"cpu u8[%d, %d]\"\n"
           "  # a: \"cpu %s[%d, 1]\"\n  # b: \"cpu %s[%d, %d]\"\n"
           "  p = prims.gt(p0, 0)\n  q = prims.ne(q0, 0)\n"
           "  ab = prims.broadcast_in_dim(a, (%d, %d), (0, 1))\n  bt = prims.transpose(b, (1, 0))\n"
           "  t0 = prims.where(q, ab, bt)\n  t1 = prims.where(True, %s, ab)\n  t2 = prims.where(p, t0, t1)\n"
           "  return t2\n",
           R, C, R, C, w->name, R, w->name, C, R, R, C, w->cst);
  static const char *const fz[] = {"fuser", "eager"};
  th_program *pf = compile_text(text, fz, 2);
  assert_int_equal(fused_wheres(pf), 3);
  const size_t es = th_dtype_size(w->dt);
  th_tensor *in[4] = {th_tensor_new(TH_I32, 2, (int64_t[]){R, C}), th_tensor_new(TH_U8, 2, (int64_t[]){R, C}),
                      th_tensor_new(w->dt, 2, (int64_t[]){R, 1}), th_tensor_new(w->dt, 2, (int64_t[]){C, R})};
  int32_t *pd = th_tensor_data(in[0]);
  uint8_t *qd = th_tensor_data(in[1]), *ad = th_tensor_data(in[2]), *bd = th_tensor_data(in[3]);
  for (int i = 0; i < R * C; i++) pd[i] = (int32_t)(rbyte() % 3) - 1, qd[i] = rbyte() & 1;
  for (size_t i = 0; i < R * es; i++) ad[i] = rbyte();
  for (size_t i = 0; i < (size_t)C * R * es; i++) bd[i] = rbyte();
  if (w->dt == TH_BOOL) {
    for (int i = 0; i < R; i++) ad[i] &= 1;
    for (int i = 0; i < C * R; i++) bd[i] &= 1;
  }
  if (w->dt == TH_F16) { /* no signalling NaNs (see the file comment): set the quiet bit of every NaN */
    uint16_t *h[2] = {(uint16_t *)ad, (uint16_t *)bd};
    int n[2] = {R, C * R};
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < n[k]; i++)
        if ((h[k][i] & 0x7c00u) == 0x7c00u && (h[k][i] & 0x3ffu)) h[k][i] |= 0x200u;
    h[0][1] = 0x7e55u, h[0][2] = 0xfe01u, h[0][3] = 0x8000u, h[1][5] = 0xfc00u; /* payloads, -0.0, -inf */
  }
  th_tensor *o = run_one(pf, 4, in);
  const uint8_t *od = th_tensor_data(o);
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      const uint8_t *want = pd[r * C + c] > 0 ? (qd[r * C + c] ? ad + r * es : bd + ((size_t)c * R + r) * es) : w->cbits;
      if (memcmp(od + ((size_t)r * C + c) * es, want, es))
        fail_msg("where %s [%d, %d]: fused bits differ from the selected input's", w->name, r, c);
    }
  th_tensor_release(o);
  for (int i = 0; i < 4; i++) th_tensor_release(in[i]);
  th_program_free(pf);
}

static void test_where_all_dtypes(void **state) {
  (void)state;
  static const where_dtype cases[] = {
      {"u8", TH_U8, "255", {0xff}},
      {"i8", TH_I8, "-128", {0x80}},
      {"i16", TH_I16, "-32768", {0x00, 0x80}},
      {"i32", TH_I32, "2147483647", {0xff, 0xff, 0xff, 0x7f}},
      {"i64", TH_I64, "-9223372036854775807", {0x01, 0, 0, 0, 0, 0, 0, 0x80}},
      {"f16", TH_F16, "-0.0", {0x00, 0x80}},
      {"f64", TH_F64, "-float('inf')", {0, 0, 0, 0, 0, 0, 0xf0, 0xff}},
      {"b8", TH_BOOL, "True", {0x01}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) where_case(&cases[k]);
}

/* ---- BLAS batched matmul on views ------------------------------------------------------------------- */

static double at(const th_tensor *t, const int64_t *idx) {
  const int64_t *st = th_tensor_strides(t);
  int64_t off = 0;
  for (int d = 0; d < th_tensor_ndim(t); d++) off += idx[d] * st[d];
  return ((const float *)th_tensor_data(t))[off];
}

/* x, y: views (shape, strides) over fresh f32 buffers of xspan / yspan elements; same batch shape. */
static void mm_case(int nd, const int64_t *xs, const int64_t *xst, int64_t xspan, const int64_t *ys,
                    const int64_t *yst, int64_t yspan) {
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
  mm_case(4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){0, 30, 6, 1}, 90, (int64_t[]){2, 3, 6, 4},
          (int64_t[]){24, 48, 4, 1}, 144);
  /* overlapping batch: x's batch strides (1, 2) are below its matrix span */
  mm_case(4, (int64_t[]){2, 3, 5, 6}, (int64_t[]){1, 2, 6, 1}, 36, (int64_t[]){2, 3, 6, 4},
          (int64_t[]){72, 24, 4, 1}, 144);
  /* 8-D with size-1 batch dims, both sides permuted */
  mm_case(8, (int64_t[]){2, 1, 2, 2, 1, 2, 3, 2}, (int64_t[]){6, 6, 12, 48, 6, 24, 2, 1}, 96,
          (int64_t[]){2, 1, 2, 2, 1, 2, 2, 3}, (int64_t[]){6, 1, 48, 12, 1, 24, 1, 2}, 96);
  /* inner matrix stepped in both dims (neither row- nor column-major), batch collapses */
  mm_case(4, (int64_t[]){3, 2, 4, 3}, (int64_t[]){128, 64, 16, 2}, 384, (int64_t[]){3, 2, 3, 5},
          (int64_t[]){30, 15, 5, 1}, 90);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_where_all_dtypes),
      cmocka_unit_test(test_matmul_batched_views),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
