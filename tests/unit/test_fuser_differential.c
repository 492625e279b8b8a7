/* test_fuser_differential.c — the fusion executor against the eager executor on random small DAGs: 200
 * cases in 20 programs (several cases share one compilation), each over f32, f64, bf16 or int64 inputs of
 * a random shape (0-d, size-0 and size-1 dims included), one input transposed and one broadcast in the
 * trace, a chain of elementwise ops, comparisons with where, convert round trips. Exact ops must agree bit
 * for bit, transcendental ones (tanh, exp) to a tolerance; most ops must be fused. The broader fuzzer with
 * propagated error bounds is test_fuser_fuzz.c. */
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

/* One random case, names prefixed k<id>_: inputs a b c e of dtype dt over `shape` (c transposed in the
 * trace, e broadcast from size-1 dims), a chain of ops, a convert round trip. Appends its inputs' type
 * comments to `head`, its lines to `body`, its two outputs to `rets`; returns whether it has
 * transcendental ops (compared with a tolerance). */
typedef struct {
  th_dtype dt;
  int nd;
  int64_t shape[4], tshape[4], bshape[4];
  bool transc;
} dcase;

#define SB_ADD(buf, ...) snprintf((buf) + strlen(buf), sizeof(buf) - strlen(buf), __VA_ARGS__)

static char d_params[4096], d_head[16384], d_body[131072], d_rets[4096];

static void one_case(int id, dcase *c) {
  static const int64_t shapes[][4] = {{0}, {7}, {3, 5}, {1, 4}, {2, 0, 3}, {2, 3, 4}, {5, 1}, {33, 65}};
  static const int ndims[] = {0, 1, 2, 2, 3, 3, 2, 2};
  static const th_dtype dts[] = {TH_F32, TH_F64, TH_BF16, TH_I64};
  int si = (int)(rnd() % 8);
  th_dtype dt = c->dt = dts[rnd() % 4];
  int nd = c->nd = ndims[si];
  for (int d = 0; d < nd; d++) {
    c->shape[d] = shapes[si][d];
    c->tshape[d] = shapes[si][nd - 1 - d];
    c->bshape[d] = (rnd() % 2) ? 1 : c->shape[d];
  }
  bool isint = dt == TH_I64;
  c->transc = false;
  char s1[64], s2[64], s3[64], perm[64], sh[64], bdims[64], P[16];
  snprintf(P, sizeof P, "k%d_", id);
  shape_str(s1, sizeof s1, nd, c->shape);
  shape_str(s2, sizeof s2, nd, c->tshape);
  shape_str(s3, sizeof s3, nd, c->bshape);
  int64_t pv[4], bd[4];
  for (int d = 0; d < nd; d++) pv[d] = nd - 1 - d, bd[d] = d;
  tuple_str(perm, sizeof perm, nd, pv);
  tuple_str(sh, sizeof sh, nd, c->shape);
  tuple_str(bdims, sizeof bdims, nd, bd);
  SB_ADD(d_params, "%s%sa, %sb, %sc, %se", d_params[0] ? ", " : "", P, P, P, P);
  SB_ADD(d_head, "  # %sa: \"cpu %s%s\"\n  # %sb: \"cpu %s%s\"\n  # %sc: \"cpu %s%s\"\n  # %se: \"cpu %s%s\"\n", P,
         dshort(dt), s1, P, dshort(dt), s1, P, dshort(dt), s2, P, dshort(dt), s3);
  SB_ADD(d_body, "  %sv0 = prims.transpose(%sc, %s)\n  %sv1 = prims.broadcast_in_dim(%se, %s, %s)\n", P, P, perm, P, P,
         sh, bdims);
  char vals[32][40];
  int nv = 4;
  snprintf(vals[0], sizeof vals[0], "%sa", P);
  snprintf(vals[1], sizeof vals[1], "%sb", P);
  snprintf(vals[2], sizeof vals[2], "%sv0", P);
  snprintf(vals[3], sizeof vals[3], "%sv1", P);
  th_dtype cdt = dt;
  if (dt == TH_BF16) { /* math prims take f32 and wider: compute in f32 between converts */
    for (int i = 0; i < 4; i++) {
      SB_ADD(d_body, "  %sf%d = prims.convert_element_type(%s, dtypes.float32)\n", P, i, vals[i]);
      snprintf(vals[i], sizeof vals[i], "%sf%d", P, i);
    }
    cdt = TH_F32;
  }
  int nops = 3 + (int)(rnd() % 6);
  for (int i = 0; i < nops; i++) {
    const char *x = vals[rnd() % (unsigned)nv], *y = vals[rnd() % (unsigned)nv];
    char buf[256];
    switch (rnd() % 9) {
      case 0: snprintf(buf, sizeof buf, "prims.add(%s, %s)", x, y); break;
      case 1: snprintf(buf, sizeof buf, "prims.sub(%s, %s)", x, y); break;
      case 2: snprintf(buf, sizeof buf, "prims.mul(%s, %s)", x, y); break;
      case 3: snprintf(buf, sizeof buf, "prims.neg(%s)", x); break;
      case 4: snprintf(buf, sizeof buf, isint ? "prims.mul(%s, 3)" : "prims.mul(%s, 0.1)", x); break;
      case 5:
        SB_ADD(d_body, "  %sp%d = prims.gt(%s, %s)\n", P, i, x, y);
        snprintf(buf, sizeof buf, "prims.where(%sp%d, %s, %s)", P, i, x, y);
        break;
      case 6:
        if (isint)
          snprintf(buf, sizeof buf, "prims.bitwise_xor(%s, %s)", x, y);
        else
          snprintf(buf, sizeof buf, "prims.tanh(%s)", x), c->transc = true;
        break;
      case 7: {
        th_dtype other = isint ? TH_F64 : cdt == TH_F64 ? TH_F32 : TH_BF16;
        SB_ADD(d_body, "  %sq%d = prims.convert_element_type(%s, dtypes.%s)\n", P, i, x, dname(other));
        snprintf(buf, sizeof buf, "prims.convert_element_type(%sq%d, dtypes.%s)", P, i, dname(cdt));
        break;
      }
      default:
        if (isint)
          snprintf(buf, sizeof buf, "prims.sign(%s)", x);
        else
          snprintf(buf, sizeof buf, "prims.exp(%s)", x), c->transc = true;
        break;
    }
    SB_ADD(d_body, "  %sw%d = %s\n", P, i, buf);
    snprintf(vals[nv++], sizeof vals[0], "%sw%d", P, i);
  }
  if (dt == TH_BF16) {
    SB_ADD(d_body, "  %sr0 = prims.convert_element_type(%s, dtypes.bfloat16)\n", P, vals[nv - 1]);
    snprintf(vals[nv++], sizeof vals[0], "%sr0", P);
  }
  SB_ADD(d_rets, "%s%s, %s", d_rets[0] ? ", " : "", vals[nv - 1], vals[nv > 5 ? nv - 2 : nv - 1]);
}

/* `ncases` random cases in one program (one compilation), fused vs eager. Returns the bsyms fused. */
static int differential_batch(int first, int ncases) {
  dcase cs[16];
  d_params[0] = d_head[0] = d_body[0] = d_rets[0] = 0;
  for (int i = 0; i < ncases; i++) one_case(first + i, &cs[i]);
  size_t n = strlen(d_params) + strlen(d_head) + strlen(d_body) + strlen(d_rets) + 64;
  char *text = malloc(n);
  snprintf(text, n, "def computation(%s):\n%s%s  return (%s)\n", d_params, d_head, d_body, d_rets);
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<cases>", &tr) != TH_OK) fail_msg("cases %d.. parse: %s\n%s", first, th_last_error(), text);
  th_tensor *in[64];
  for (int i = 0; i < ncases; i++) {
    in[4 * i] = random_tensor(cs[i].dt, cs[i].nd, cs[i].shape);
    in[4 * i + 1] = random_tensor(cs[i].dt, cs[i].nd, cs[i].shape);
    in[4 * i + 2] = random_tensor(cs[i].dt, cs[i].nd, cs[i].tshape);
    in[4 * i + 3] = random_tensor(cs[i].dt, cs[i].nd, cs[i].bshape);
  }
  static const char *const eager[] = {"eager"}, *const fused[] = {"fuser", "eager"};
  int n1 = 0, n2 = 0;
  th_tensor **r1 = run_with(tr, eager, 1, in, 4 * ncases, &n1);
  th_tensor **r2 = run_with(tr, fused, 2, in, 4 * ncases, &n2);
  int fused_bsyms = count_fused(tr, fused, 2);
  assert_int_equal(n1, n2);
  assert_int_equal(n1, 2 * ncases);
  for (int o = 0; o < n1; o++) {
    const dcase *c = &cs[o / 2];
    assert_int_equal(r1[o]->dtype, r2[o]->dtype);
    assert_int_equal(r1[o]->ndim, r2[o]->ndim);
    int64_t numel = th_tensor_numel(r1[o]), idx[8] = {0};
    for (int64_t q = 0; q < numel; q++) {
      int64_t rem = q;
      for (int d = r1[o]->ndim - 1; d >= 0; d--) {
        idx[d] = rem % r1[o]->shape[d];
        rem /= r1[o]->shape[d];
      }
      double x = elem(r1[o], idx), y = elem(r2[o], idx);
      bool same = (isnan(x) && isnan(y)) || x == y;
      double tol = c->dt == TH_BF16 ? 1e-2 : 1e-5;
      if (!same && (!c->transc || !(fabs(x - y) <= tol * (1 + fabs(x)))))
        fail_msg("case %d output %d element %lld: eager %.17g, fuser %.17g\n%s", first + o / 2, o % 2, (long long)q, x,
                 y, text);
    }
    th_tensor_release(r1[o]);
    th_tensor_release(r2[o]);
  }
  free(r1);
  free(r2);
  for (int i = 0; i < 4 * ncases; i++) th_tensor_release(in[i]);
  th_trace_free(tr);
  free(text);
  return fused_bsyms;
}

/* 200 random cases in 20 programs: exact ops bit for bit, transcendental ones to a tolerance. */
static void test_differential(void **state) {
  (void)state;
  int fused = 0;
  for (int i = 0; i < 20; i++) fused += differential_batch(10 * i, 10);
  assert_true(fused > 200 * 4); /* most of the ~6 ops per case are fused */
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_differential),
  };
  return cmocka_run_group_tests(tests, setup_cache, NULL);
}
