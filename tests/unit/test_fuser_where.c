/* test_fuser_where.c — prims.where in fused kernels, a bit select in the generated C (the prelude's
 * th_fz_where): every element of the fused result is the exact bits of the input (or constant) the
 * predicate picks, computed here from the inputs, with NaN payloads, -0.0 and infinities. Covered: each
 * compute class (float for f32/bf16, double, int64, bool) with a computed predicate and a constant
 * operand; every integer dtype, f16, f64 and bool with a predicate computed in the region, a number
 * predicate, a constant in either position, a broadcast operand and a transposed one (the where members
 * must be fused). f16 signalling NaNs are left out: the fuser decodes f16 through core/scalar.h, which
 * sets the quiet bit, where eager's where copies the bits. */
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
#include "program_test_util.h"

/* prims.where in a fused loop is a bit select (the prelude's th_fz_where: a `?:` there kept gcc from
 * vectorizing the loop): every element is the exact bits of a or of b, NaN payloads and -0.0 included,
 * in each compute class (float for f32/bf16, double, int64, bool), with a computed predicate and a
 * constant operand, as eager computes them. */
static void test_where_select(void **state) {
  (void)state;
  static const char *const dts[] = {"f32", "bf16", "f64", "i64", "b8"};
  static const th_dtype tds[] = {TH_F32, TH_BF16, TH_F64, TH_I64, TH_BOOL};
  static const char *const fused[] = {"fuser", "eager"}, *const eager[] = {"eager"};
  for (int k = 0; k < 5; k++) {
    char text[800];
    snprintf(text, sizeof text,
             "def computation(p, a, b):\n  # p: \"cpu i32[4099]\"\n  # a: \"cpu %s[4099]\"\n  # b: \"cpu %s[4099]\"\n"
             "  t0 = prims.gt(p, 0)\n  t1 = prims.where(t0, a, b)\n  t2 = prims.lt(p, -1)\n"
             "  t3 = prims.where(t2, %s, t1)\n  return t3\n",
             dts[k], dts[k],
             tds[k] == TH_BOOL  ? "True"
             : tds[k] == TH_I64 ? "7"
                                : "-0.0");
    th_trace *tr = parse(text);
    assert_int_equal(count_fused(tr, fused, 2), 4);
    int64_t n = 4099;
    th_tensor *in[3] = {th_tensor_new(TH_I32, 1, &n), th_tensor_new(tds[k], 1, &n), th_tensor_new(tds[k], 1, &n)};
    int32_t *pd = th_tensor_data(in[0]);
    size_t es = th_dtype_size(tds[k]);
    unsigned char *ad = th_tensor_data(in[1]), *bd = th_tensor_data(in[2]);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) {
      pd[i] = (int32_t)(i % 5) - 2; /* -2 -1 0 1 2: b, b, b, a, a; -2 also takes the constant */
      for (size_t j = 0; j < es; j++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        ad[i * es + j] = (unsigned char)(r >> 56);
        bd[i * es + j] = (unsigned char)(r >> 48);
      }
      if (tds[k] == TH_BOOL) ad[i] &= 1, bd[i] &= 1;
      if (tds[k] == TH_F32 && i % 7 == 0)
        memcpy(ad + i * es, &(uint32_t){0x7fa00001u + (uint32_t)i}, 4);                      /* NaN payloads */
      if (tds[k] == TH_F32 && i % 11 == 0) memcpy(bd + i * es, &(uint32_t){0x80000000u}, 4); /* -0.0 */
    }
    int nout = 0, nref = 0;
    th_tensor **out = run_with(tr, fused, 2, in, 3, &nout), **ref = run_with(tr, eager, 1, in, 3, &nref);
    assert_int_equal(nout, 1);
    const unsigned char *o = th_tensor_data(out[0]), *e = th_tensor_data(ref[0]);
    for (int64_t i = 0; i < n; i++) {
      /* the expected bits straight from the inputs, except the constant: eager's value for it */
      const unsigned char *want = pd[i] < -1 ? e + i * es : pd[i] > 0 ? ad + i * es : bd + i * es;
      if (tds[k] == TH_BF16 && (want[1] & 0x7f) == 0x7f && (want[0] & 0x80) && (want[0] & 0x7f))
        want = e + i * es; /* a bf16 NaN is stored as c10's canonical NaN (eager and fused alike) */
      if (memcmp(o + i * es, want, es) || memcmp(e + i * es, want, es))
        fail_msg("where %s, element %lld (p = %d): fused %02x%02x, eager %02x%02x, a %02x%02x, b %02x%02x", dts[k],
                 (long long)i, pd[i], o[i * es + es - 1], o[i * es], e[i * es + es - 1], e[i * es], ad[i * es + es - 1],
                 ad[i * es], bd[i * es + es - 1], bd[i * es]);
      if (pd[i] < -1 && tds[k] != TH_BOOL && tds[k] != TH_I64) { /* -0.0: only the sign bit set */
        bool neg0 = true;
        for (size_t j = 0; j < es; j++) neg0 &= o[i * es + j] == (j + 1 == es ? 0x80 : 0);
        assert_true(neg0);
      }
    }
    th_tensor_release(out[0]);
    th_tensor_release(ref[0]);
    free(out);
    free(ref);
    for (int i = 0; i < 3; i++) th_tensor_release(in[i]);
    th_trace_free(tr);
  }
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

static uint64_t where_rng = 0x2545f4914f6cdd1dull;
static uint8_t rbyte(void) {
  where_rng = where_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint8_t)(where_rng >> 56);
}

/* One dtype: out = where(p, where(q, a_bcast, b^T), where(True, c, a_bcast)) with p, q computed from
 * integer inputs and c a constant; R x C domain, a is [R, 1], b is [C, R]. */
typedef struct {
  const char *name;
  th_dtype dt;
  const char *cst;        /* the constant's trace literal */
  unsigned char cbits[8]; /* its bits in dt (little endian) */
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
      const uint8_t *want =
        pd[r * C + c] > 0 ? (qd[r * C + c] ? ad + r * es : bd + ((size_t)c * R + r) * es) : w->cbits;
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

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_where_select),
    cmocka_unit_test(test_where_all_dtypes),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
