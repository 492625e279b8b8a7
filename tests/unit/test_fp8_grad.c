/* test_fp8_grad.c — the backward of the float8 transform: th_transform_float8 followed by
 * th_transform_grad differentiates each converted linear as torchao's Float8Linear does (the
 * cotangent quantized dynamically to float8_e5m2, grad_input and grad_weight as two _scaled_mm with
 * the input and weight quantized as in the forward, the bias gradient a sum; scales constant, casts
 * straight-through), through ltorch.float8_linear_output's vjp rule.
 *
 * References are independent of the code under test: fp8 codes are decoded from their bit fields with
 * ldexp, encoded by a brute-force round-to-nearest-even search over the codes, and the recipe (amax ->
 * scale = M / clamp(amax, 1e-12) -> saturated cast -> decode with 1/scale) is recomputed from the
 * program's own float32 (or bfloat16) values, so the codes and scales match exactly and the tolerance
 * is float32 accumulation (plus the output dtype's rounding). Every layer of the MLP is checked
 * exactly: zero-valued inputs added after each linear (z) and before each linear's input (u) make
 * each linear's cotangent and grad_input observable as their gradients. The gradients are also
 * compared with the unquantized MLP's (float64), within fp8 error. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "core/ir.h"
#include "core/scalar.h"
#include "thunder/thunder.h"
#include "fp8_ref.h"

static const th_device CPU = {TH_CPU, 0};

/* ---- the fp8 reference (fp8_ref.h: decode, and the cast by nearest-code search) ------------------ */

/* The recipe on n float32 values: codes (decoded, as doubles) and the float32 decode scale. */
static void ref_quantize(const float *v, int64_t n, th_dtype f, double *dec, float *inv) {
  float amax = 0;
  for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(v[i]));
  const double maxv = f == E4 ? 448.0 : 57344.0;
  const float scale = (float)(maxv / (double)fmaxf(amax, 1e-12f)); /* one f32 division */
  for (int64_t i = 0; i < n; i++) dec[i] = ref_decode(f, ref_encode(f, (float)((double)v[i] * scale), true));
  *inv = (float)(1.0 / (double)scale);
}

/* c[i, j] = sum_k a[i, k] b[k, j] * s (a [m, kk] and b given by strides), and the bound of float32
 * accumulation plus the output rounding out_eps. */
static void ref_gemm(int64_t m, int64_t n, int64_t kk, const double *a, int64_t as0, int64_t as1, const double *b,
                     int64_t bs0, int64_t bs1, double s, double out_eps, double *c, double *bound) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < kk; k++) {
        double p = a[i * as0 + k * as1] * b[k * bs0 + j * bs1];
        acc += p;
        mag += fabs(p);
      }
      c[i * n + j] = acc * s;
      bound[i * n + j] = (double)(kk + 4) * 0x1p-24 * mag * s + out_eps * fabs(acc * s) + 1e-30;
    }
}

/* ---- helpers -------------------------------------------------------------------------------------------- */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(double lo, double hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * ((double)(rng >> 11) / 9007199254740992.0);
}

static th_arg V(th_value *v) { return th_arg_value(v); }

static th_arg callk(th_trace *tr, const char *op, int n, const th_arg *args, int nkw, const char *const *kwn,
                    const th_arg *kw) {
  th_arg out;
  if (th_trace_call(tr, op, n, args, nkw, kwn, kw, &out) != TH_OK) fail_msg("%s: %s", op, th_last_error());
  return out;
}
static th_arg call2(th_trace *tr, const char *op, th_arg a, th_arg b) {
  th_arg args[2] = {a, b};
  return callk(tr, op, 2, args, 0, NULL, NULL);
}
static th_arg call3(th_trace *tr, const char *op, th_arg a, th_arg b, th_arg c) {
  th_arg args[3] = {a, b, c};
  return callk(tr, op, 3, args, 0, NULL, NULL);
}

static th_tensor *tensor(th_dtype dt, int nd, const int64_t *shape) {
  th_tensor *t = th_tensor_new(dt, nd, shape);
  assert_non_null(t);
  return t;
}

static void fill(th_tensor *t, double lo, double hi) {
  int64_t n = th_tensor_numel(t);
  size_t es = th_dtype_size(th_tensor_dtype(t));
  for (int64_t i = 0; i < n; i++)
    th_store_f64((char *)th_tensor_data(t) + i * (int64_t)es, th_tensor_dtype(t), urand(lo, hi));
}

static double at(const th_tensor *t, int64_t i) { return th_tensor_get_f64(t, i); }

static float *floats(const th_tensor *t) {
  int64_t n = th_tensor_numel(t);
  float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) f[i] = (float)at(t, i);
  return f;
}

static th_program *compile(const th_trace *tr, const char *const *execs, int nexecs) {
  th_compile_options o = {0};
  o.executors = execs;
  o.nexecutors = nexecs;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) fail_msg("compile %s: %s", tr->fn_name, th_last_error());
  return p;
}

static th_tensor **run(th_program *p, int nin, th_tensor **in, int *nout) {
  th_tensor **out = NULL;
  if (th_program_run(p, nin, in, nout, &out) != TH_OK) fail_msg("run: %s", th_last_error());
  return out;
}

static void release_all(th_tensor **t, int n) {
  for (int i = 0; i < n; i++) th_tensor_release(t[i]);
  free(t);
}

static int count_ops(const th_trace *tr, const char *qualname) {
  int n = 0;
  for (int i = 0; i < th_trace_num_bsyms(tr); i++) n += !strcmp(th_bsym_qualname(th_trace_bsym(tr, i)), qualname);
  return n;
}

/* Occurrences of sub in the code lines of a printed trace (not in comment lines). */
static int count_code(const char *s, const char *sub) {
  int n = 0;
  while (*s) {
    const char *nl = strchr(s, '\n'), *end = nl ? nl : s + strlen(s);
    const char *c = s + strspn(s, " ");
    if (*c != '#')
      for (const char *p = strstr(c, sub); p && p < end; p = strstr(p + 1, sub)) n++;
    s = nl ? nl + 1 : end;
  }
  return n;
}

static th_trace *float8(const th_trace *tr, const th_float8_options *o) {
  th_trace *out = NULL;
  if (th_transform_float8(tr, o, &out) != TH_OK) fail_msg("float8: %s", th_last_error());
  return out;
}

static const char *const EAGER[] = {"eager"};

static char cache_root[256];
static int setup(void **state) {
  (void)state;
  snprintf(cache_root, sizeof cache_root, "%s/fp8-grad-test-cache", TH_BINARY_DIR);
  mkdir(cache_root, 0700);
  setenv("XDG_CACHE_HOME", cache_root, 1);
  return 0;
}

/* ---- the MLP ---------------------------------------------------------------------------------------------
 * x [.., 64] -> fc1 (64 -> 96, bias) -> +z1 -> gelu -> +u1 -> fc2 (96 -> 64, bias) -> +z2 -> gelu -> +u2 ->
 * fc3 (64 -> 32, no bias) -> +z3; returns (s3, a1, a2) where a1, a2 are the inputs of fc2 and fc3. With
 * z, u = 0 and zero cotangents for a1, a2, grad z_l is linear l's cotangent and grad u_l its grad_input. */
enum { IX, IW1, IB1, IW2, IB2, IW3, IZ1, IZ2, IZ3, IU1, IU2, NIN };
static const int64_t DIMS[4] = {64, 96, 64, 32};

typedef struct {
  th_trace *tr;
  int xnd;
  int64_t rows, xs[3];
} mlp;

static mlp build_mlp(th_dtype dt, int xnd, const char *w1name) {
  mlp m;
  m.tr = th_trace_new(NULL);
  m.xnd = xnd;
  m.rows = 10;
  if (xnd == 3) {
    m.xs[0] = 2, m.xs[1] = 5, m.xs[2] = 64;
  } else {
    m.xs[0] = 10, m.xs[1] = 64;
  }
  th_value *in[NIN];
  int64_t sw[3][2] = {{96, 64}, {64, 96}, {32, 64}}, nb[2] = {96, 64};
  const char *names[NIN] = {"x",  w1name, "t_fc1_bias", "t_fc2_weight", "t_fc2_bias", "t_fc3_weight",
                            "z1", "z2",   "z3",         "u1",           "u2"};
  for (int i = 0; i < NIN; i++) {
    int64_t s[3];
    int nd;
    if (i == IX) {
      nd = xnd;
      memcpy(s, m.xs, sizeof s);
    } else if (i == IW1 || i == IW2 || i == IW3) {
      nd = 2;
      memcpy(s, sw[(i - IW1) / 2], sizeof(int64_t) * 2);
    } else if (i == IB1 || i == IB2) {
      nd = 1;
      s[0] = nb[(i - IB1) / 2];
    } else { /* z1 z2 z3 u1 u2: like the layer outputs */
      static const int width[5] = {96, 64, 32, 96, 64};
      nd = xnd;
      memcpy(s, m.xs, sizeof s);
      s[xnd - 1] = width[i - IZ1];
    }
    in[i] = th_trace_add_tensor_input(m.tr, names[i], dt, CPU, nd, s);
    assert_non_null(in[i]);
  }
  th_arg y1 = call3(m.tr, "ltorch.linear", V(in[IX]), V(in[IW1]), V(in[IB1]));
  th_arg s1 = call2(m.tr, "ltorch.add", y1, V(in[IZ1]));
  th_arg a1 = call2(m.tr, "ltorch.add", callk(m.tr, "ltorch.gelu", 1, &s1, 0, NULL, NULL), V(in[IU1]));
  th_arg y2 = call3(m.tr, "ltorch.linear", a1, V(in[IW2]), V(in[IB2]));
  th_arg s2 = call2(m.tr, "ltorch.add", y2, V(in[IZ2]));
  th_arg a2 = call2(m.tr, "ltorch.add", callk(m.tr, "ltorch.gelu", 1, &s2, 0, NULL, NULL), V(in[IU2]));
  th_arg y3 = call3(m.tr, "ltorch.linear", a2, V(in[IW3]), th_arg_none());
  th_arg s3 = call2(m.tr, "ltorch.add", y3, V(in[IZ3]));
  th_arg outs[3] = {s3, a1, a2};
  assert_int_equal(th_trace_set_return(m.tr, th_arg_tuple(3, outs)), TH_OK);
  return m;
}

/* Program inputs (z, u zero) and cotangents (random for s3, zero for a1 and a2). */
static void mlp_inputs(const mlp *m, th_dtype dt, th_tensor **in, th_tensor **cots) {
  for (int i = 0; i < NIN; i++) {
    const th_value *v = th_trace_input(m->tr, i);
    in[i] = tensor(dt, th_value_ndim(v), th_value_shape(v));
    if (i == IX)
      fill(in[i], -2, 2);
    else if (i == IW1 || i == IW2 || i == IW3)
      fill(in[i], -0.25, 0.25);
    else if (i == IB1 || i == IB2)
      fill(in[i], -0.1, 0.1);
  }
  int64_t s[3];
  memcpy(s, m->xs, sizeof s);
  static const int width[3] = {32, 96, 64};
  for (int k = 0; k < 3; k++) {
    s[m->xnd - 1] = width[k];
    cots[k] = tensor(dt, m->xnd, s);
    if (k == 0) fill(cots[k], -1, 1);
  }
}

typedef struct {
  th_tensor **fwd_out; /* the forward program's outputs */
  int nfwd;
  th_tensor **grads; /* one per input (NULL: None) */
  int ngrads;
  th_grad_layout L;
  char *fwd_text, *bwd_text;
  int saved_fp8; /* saved tensors of an fp8 dtype */
} grad_run;

/* float8 (options o) then grad (requires_grad rg, NULL = every floating input), run on in/cots. */
static grad_run run_grad(const th_trace *f8, const bool *rg, th_tensor **in, th_tensor **cots, const char *const *execs,
                         int nexecs) {
  grad_run r;
  th_trace *fwd = NULL, *bwd = NULL;
  th_grad_options go = {rg, NIN};
  if (th_transform_grad(f8, rg ? &go : NULL, &fwd, &bwd) != TH_OK) fail_msg("grad: %s", th_last_error());
  assert_int_equal(th_grad_forward_layout(fwd, &r.L), TH_OK);
  r.fwd_text = th_trace_print(fwd, 1);
  r.bwd_text = th_trace_print(bwd, 1);
  /* both print at full depth, parse back and verify */
  for (int t = 0; t < 2; t++) {
    char *txt = th_trace_print(t ? bwd : fwd, -1);
    th_trace *back = NULL;
    if (th_trace_parse(txt, "<fp8 grad>", &back) != TH_OK) fail_msg("parse: %s\n%s", th_last_error(), txt);
    if (th_trace_verify(back) != TH_OK) fail_msg("verify: %s", th_last_error());
    th_trace_free(back);
    free(txt);
  }
  r.saved_fp8 = 0;
  const th_value *c0 = th_value_item(th_trace_input(bwd, 0), 0);
  for (int i = 0; c0 && i < th_value_num_items(c0); i++)
    if (th_value_item(c0, i) && th_dtype_is_fp8(th_value_dtype(th_value_item(c0, i)))) r.saved_fp8++;
  th_program *pf = compile(fwd, execs, nexecs), *pb = compile(bwd, execs, nexecs);
  r.fwd_out = run(pf, NIN, in, &r.nfwd);
  const th_grad_layout *L = &r.L;
  assert_int_equal(r.nfwd, L->noutput + L->nflat_args + L->nflat_output + L->nsaved_tensors + L->nsaved_other);
  int nsaved = L->nsaved_tensors + L->nsaved_other, nbin = nsaved + L->nflat_output;
  th_tensor **bin = calloc((size_t)nbin + 1, sizeof *bin);
  for (int i = 0; i < nsaved; i++) bin[i] = r.fwd_out[L->noutput + L->nflat_args + L->nflat_output + i];
  for (int i = 0; i < L->nflat_output; i++) bin[nsaved + i] = cots[i];
  r.grads = run(pb, nbin, bin, &r.ngrads);
  assert_int_equal(r.ngrads, NIN);
  free(bin);
  th_program_free(pf);
  th_program_free(pb);
  th_trace_free(fwd);
  th_trace_free(bwd);
  return r;
}

static void grad_run_free(grad_run *r) {
  release_all(r->fwd_out, r->nfwd);
  release_all(r->grads, r->ngrads);
  free(r->fwd_text);
  free(r->bwd_text);
}

/* got (a tensor) equals want within bound, elementwise */
static void check_close(const char *what, const th_tensor *got, const double *want, const double *bound, int64_t n) {
  assert_non_null(got);
  assert_int_equal(th_tensor_numel(got), n);
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(at(got, i) - want[i]) <= bound[i]))
      fail_msg("%s[%lld] = %.9g, the recipe in float64 gives %.9g (bound %.3g)", what, (long long)i, at(got, i),
               want[i], bound[i]);
}

/* Checks one linear's gradients against torchao's recipe recomputed from the program's values: X the
 * layer's input [rows, K], W [N, K], G the cotangent of its output [rows, N]; gx/gw/gb the program's
 * gradients (gx, gb may be NULL: not checked). fx, fw: the forward formats; the cotangent is e5m2
 * except against an e5m2 partner. */
static void check_layer(const char *name, const th_tensor *X, const th_tensor *W, const th_tensor *G, int64_t rows,
                        int64_t K, int64_t N, th_dtype fx, th_dtype fw, double out_eps, const th_tensor *gx,
                        const th_tensor *gw, const th_tensor *gb) {
  float *x = floats(X), *w = floats(W), *g = floats(G), ix, iw, igx, igw;
  double *qx = malloc(sizeof(double) * (size_t)(rows * K)), *qw = malloc(sizeof(double) * (size_t)(N * K));
  double *qgx = malloc(sizeof(double) * (size_t)(rows * N)), *qgw = malloc(sizeof(double) * (size_t)(rows * N));
  ref_quantize(x, rows * K, fx, qx, &ix);
  ref_quantize(w, N * K, fw, qw, &iw);
  ref_quantize(g, rows * N, fw == E5 ? E4 : E5, qgx, &igx); /* grad_input: g x w */
  ref_quantize(g, rows * N, fx == E5 ? E4 : E5, qgw, &igw); /* grad_weight: g.T x x */
  size_t big = (size_t)(rows > N ? rows : N) * (size_t)(K > N ? K : N);
  double *want = malloc(sizeof(double) * big), *bound = malloc(sizeof(double) * big);
  char what[64];
  if (gx) { /* [rows, N] x [N, K] */
    ref_gemm(rows, K, N, qgx, N, 1, qw, K, 1, (double)igx * iw, out_eps, want, bound);
    snprintf(what, sizeof what, "%s grad_input", name);
    check_close(what, gx, want, bound, rows * K);
  }
  /* [N, rows] x [rows, K] */
  ref_gemm(N, K, rows, qgw, 1, N, qx, K, 1, (double)igw * ix, out_eps, want, bound);
  snprintf(what, sizeof what, "%s grad_weight", name);
  check_close(what, gw, want, bound, N * K);
  if (gb) {
    for (int64_t j = 0; j < N; j++) {
      double s = 0, mag = 0;
      for (int64_t i = 0; i < rows; i++) s += g[i * N + j], mag += fabs(g[i * N + j]);
      want[j] = s;
      bound[j] = (double)(rows + 2) * 0x1p-24 * mag + out_eps * fabs(s) + 1e-30;
    }
    snprintf(what, sizeof what, "%s grad_bias", name);
    check_close(what, gb, want, bound, N);
  }
  free(x), free(w), free(g), free(qx), free(qw), free(qgx), free(qgw), free(want), free(bound);
}

/* The forward: each layer's output against the recipe on the program's own layer input. */
static void check_forward_layer(const char *name, const th_tensor *X, const th_tensor *W, const th_tensor *B,
                                const double *pre, int64_t rows, int64_t K, int64_t N, th_dtype fx, th_dtype fw,
                                double out_eps) {
  float *x = floats(X), *w = floats(W), ix, iw;
  double *qx = malloc(sizeof(double) * (size_t)(rows * K)), *qw = malloc(sizeof(double) * (size_t)(N * K));
  double *want = malloc(sizeof(double) * (size_t)(rows * N)), *bound = malloc(sizeof(double) * (size_t)(rows * N));
  ref_quantize(x, rows * K, fx, qx, &ix);
  ref_quantize(w, N * K, fw, qw, &iw);
  ref_gemm(rows, N, K, qx, K, 1, qw, 1, K, (double)ix * iw, out_eps, want, bound);
  for (int64_t i = 0; i < rows * N; i++) {
    double b = B ? at(B, i % N) : 0;
    want[i] += b;
    bound[i] += out_eps * fabs(b) + 0x1p-24 * fabs(b);
    if (!(fabs(pre[i] - want[i]) <= bound[i]))
      fail_msg("%s forward [%lld]: %.9g, the recipe gives %.9g (bound %.3g)", name, (long long)i, pre[i], want[i],
               bound[i]);
  }
  free(x), free(w), free(qx), free(qw), free(want), free(bound);
}

static double gelu(double s) { return 0.5 * s * (1 + erf(s / sqrt(2.0))); }
static double dgelu(double s) {
  return 0.5 * (1 + erf(s / sqrt(2.0))) + s * exp(-0.5 * s * s) / sqrt(2 * 3.14159265358979323846);
}

/* The unquantized MLP's gradients in float64 (grad[i] for input i, malloc'd; NULL for z, u). */
static void unquantized_grads(const mlp *m, th_tensor **in, const th_tensor *ct, double **grad) {
  const int64_t R = m->rows;
  double *act[3], *pre[3], *G[3];
  act[0] = malloc(sizeof(double) * (size_t)(R * 64));
  for (int64_t i = 0; i < R * 64; i++) act[0][i] = at(in[IX], i);
  const th_tensor *W[3] = {in[IW1], in[IW2], in[IW3]}, *B[3] = {in[IB1], in[IB2], NULL};
  for (int l = 0; l < 3; l++) {
    const int64_t K = DIMS[l], N = DIMS[l + 1];
    pre[l] = malloc(sizeof(double) * (size_t)(R * N));
    for (int64_t i = 0; i < R; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = B[l] ? at(B[l], j) : 0;
        for (int64_t k = 0; k < K; k++) acc += act[l][i * K + k] * at(W[l], j * K + k);
        pre[l][i * N + j] = acc;
      }
    if (l < 2) {
      act[l + 1] = malloc(sizeof(double) * (size_t)(R * N));
      for (int64_t i = 0; i < R * N; i++) act[l + 1][i] = gelu(pre[l][i]);
    }
  }
  for (int i = 0; i < NIN; i++) grad[i] = NULL;
  double *gin = malloc(sizeof(double) * (size_t)(R * 32));
  for (int64_t i = 0; i < R * 32; i++) gin[i] = at(ct, i);
  for (int l = 2; l >= 0; l--) {
    const int64_t K = DIMS[l], N = DIMS[l + 1];
    G[l] = gin; /* cotangent of pre[l] */
    double *gw = calloc((size_t)(N * K), sizeof(double)), *gx = calloc((size_t)(R * K), sizeof(double));
    for (int64_t i = 0; i < R; i++)
      for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++) {
          gw[j * K + k] += G[l][i * N + j] * act[l][i * K + k];
          gx[i * K + k] += G[l][i * N + j] * at(W[l], j * K + k);
        }
    grad[IW1 + 2 * l] = gw;
    if (B[l]) {
      double *gb = calloc(96, sizeof(double)); /* N <= 96 (a fixed size: gcc -O2 cannot bound N) */
      for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < N; j++) gb[j] += G[l][i * N + j];
      grad[IB1 + 2 * l] = gb;
    }
    if (l == 0) {
      grad[IX] = gx;
    } else {
      for (int64_t i = 0; i < R * K; i++) gx[i] *= dgelu(pre[l - 1][i]);
      gin = gx;
    }
  }
  for (int l = 0; l < 3; l++) {
    free(act[l]);
    free(pre[l]);
    free(G[l]);
  }
}

static double rel_rms(const th_tensor *got, const double *want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = at(got, i) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return sqrt(num / den);
}

/* The whole check of one configuration. */
static void check_mlp_grads(th_dtype dt, int xnd, th_dtype fx, th_dtype fw, const char *const *execs, int nexecs) {
  mlp m = build_mlp(dt, xnd, "t_fc1_weight");
  th_float8_options o = th_float8_options_default();
  o.input_dtype = fx;
  o.weight_dtype = fw;
  th_trace *f8 = float8(m.tr, &o);
  assert_int_equal(count_ops(f8, "ltorch.float8_linear_output"), 3);
  th_tensor *in[NIN], *cots[3];
  mlp_inputs(&m, dt, in, cots);
  /* the float8 trace alone (what runs without grad) */
  th_program *p8 = compile(f8, execs, nexecs);
  int n8;
  th_tensor **o8 = run(p8, NIN, in, &n8);
  grad_run r = run_grad(f8, NULL, in, cots, execs, nexecs);
  const double out_eps = dt == TH_BF16 ? 0x1p-8 : 0.0;
  const int64_t R = m.rows;
  /* the structure: the forward keeps the recipe; the backward quantizes each cotangent to e5m2 (or
   * e4m3fn against an e5m2 operand) and has two _scaled_mm per linear; no fp8 tensor is saved */
  assert_int_equal(count_code(r.fwd_text, "ltorch.float8_linear_output("), 3);
  assert_int_equal(count_code(r.fwd_text, "ltorch._scaled_mm("), 3);
  assert_int_equal(count_code(r.fwd_text, "ltorch.linear("), 0);
  assert_int_equal(count_code(r.bwd_text, "ltorch._scaled_mm("), 6);
  const char *gfmt = fx == E5 || fw == E5 ? "dtype=dtypes.float8_e4m3fn" : "dtype=dtypes.float8_e5m2";
  assert_non_null(strstr(r.bwd_text, gfmt));
  int e5_casts = count_code(r.bwd_text, "dtype=dtypes.float8_e5m2");
  assert_int_equal(e5_casts, (fw == E5 ? 3 : 0) + (fx == E5 ? 3 : 0) + 3);
  assert_non_null(strstr(r.bwd_text, "fc1_grad_output_fp8_"));
  if (fx == E5 || fw == E5)
    assert_non_null(strstr(r.bwd_text, "fc1_grad_output_e4m3_fp8_"));
  else
    assert_null(strstr(r.bwd_text, "_e4m3_"));
  assert_non_null(strstr(r.bwd_text, "fc3_grad_output_inv_scale_"));
  assert_null(strstr(r.bwd_text, "prims.linear("));
  assert_int_equal(r.saved_fp8, 0);
  /* the forward: outputs bit-identical to the float8 trace's, and each layer the recipe */
  assert_int_equal(r.L.noutput, 3);
  for (int k = 0; k < 3; k++) {
    const th_tensor *a = r.fwd_out[k], *b = o8[k];
    assert_int_equal(th_tensor_numel(a), th_tensor_numel(b));
    for (int64_t i = 0; i < th_tensor_numel(a); i++)
      if (at(a, i) != at(b, i))
        fail_msg("output %d [%lld]: %.9g with grad, %.9g without", k, (long long)i, at(a, i), at(b, i));
  }
  /* the layer inputs (x, a1, a2); fc3's output is s3 (z3 = 0): the recipe on the program's a2 */
  const th_tensor *X[3] = {in[IX], r.fwd_out[1], r.fwd_out[2]};
  const th_tensor *W[3] = {in[IW1], in[IW2], in[IW3]}, *B[3] = {in[IB1], in[IB2], NULL};
  {
    double *s3 = malloc(sizeof(double) * (size_t)(R * 32));
    for (int64_t i = 0; i < R * 32; i++) s3[i] = at(r.fwd_out[0], i);
    check_forward_layer("fc3", X[2], W[2], NULL, s3, R, 64, 32, fx, fw, out_eps);
    free(s3);
  }
  /* the gradients, layer by layer, from the program's own cotangents (grad z_l) and layer inputs */
  const int zi[3] = {IZ1, IZ2, IZ3};
  const th_tensor *gx[3] = {r.grads[IX], r.grads[IU1], r.grads[IU2]};
  static const char *const names[3] = {"fc1", "fc2", "fc3"};
  for (int l = 0; l < 3; l++) {
    const th_tensor *G = r.grads[zi[l]];
    assert_non_null(G);
    assert_int_equal(th_tensor_dtype(r.grads[IW1 + 2 * l]), dt);
    check_layer(names[l], X[l], W[l], G, R, DIMS[l], DIMS[l + 1], fx, fw, out_eps, gx[l], r.grads[IW1 + 2 * l],
                B[l] ? r.grads[IB1 + 2 * l] : NULL);
  }
  assert_int_equal(th_tensor_dtype(r.grads[IX]), dt);
  assert_int_equal(th_tensor_ndim(r.grads[IX]), xnd);
  /* against the unquantized MLP in float64: the fp8 error (e5m2 cotangents: 2 mantissa bits) */
  double *ug[NIN];
  unquantized_grads(&m, in, cots[0], ug);
  static const int checked[6] = {IX, IW1, IB1, IW2, IB2, IW3};
  for (int c = 0; c < 6; c++) {
    int i = checked[c];
    double rel = rel_rms(r.grads[i], ug[i], th_tensor_numel(r.grads[i]));
    if (!(rel < 0.2 && rel > 1e-4))
      fail_msg("gradient of input %d vs the unquantized MLP: relative rms error %g", i, rel);
    if (c == 1 || c == 0)
      print_message("%s %s x %s (x %dd): grad of %s vs unquantized float64: relative rms %.4f\n", th_dtype_name(dt),
                    th_dtype_name(fx), th_dtype_name(fw), xnd, c ? "fc1.weight" : "x", rel);
  }
  for (int i = 0; i < NIN; i++) free(ug[i]);
  grad_run_free(&r);
  release_all(o8, n8);
  th_program_free(p8);
  for (int i = 0; i < NIN; i++) th_tensor_release(in[i]);
  for (int k = 0; k < 3; k++) th_tensor_release(cots[k]);
  th_trace_free(f8);
  th_trace_free(m.tr);
}

/* ---- tests ------------------------------------------------------------------------------------------------ */

static void test_mlp_f32(void **state) {
  (void)state;
  check_mlp_grads(TH_F32, 3, E4, E4, NULL, 0);
  check_mlp_grads(TH_F32, 2, E4, E4, EAGER, 1);
}

static void test_mlp_bf16(void **state) {
  (void)state;
  check_mlp_grads(TH_BF16, 3, E4, E4, NULL, 0);
}

/* e5m2 operands: the GEMM that pairs the cotangent with an e5m2 operand quantizes it to e4m3fn */
static void test_e5m2_operands(void **state) {
  (void)state;
  check_mlp_grads(TH_F32, 3, E5, E4, EAGER, 1);
  check_mlp_grads(TH_F32, 2, E4, E5, EAGER, 1);
}

/* Only the weights require grad: no grad_input GEMM for fc1, and x's gradient is None. */
static void test_weights_only(void **state) {
  (void)state;
  mlp m = build_mlp(TH_F32, 3, "t_fc1_weight");
  th_trace *f8 = float8(m.tr, NULL);
  bool rg[NIN] = {false, true, true, true, true, true, true, true, true, true, true};
  th_tensor *in[NIN], *cots[3];
  mlp_inputs(&m, TH_F32, in, cots);
  grad_run r = run_grad(f8, rg, in, cots, EAGER, 1);
  assert_null(r.grads[IX]);
  assert_int_equal(count_code(r.bwd_text, "ltorch._scaled_mm("), 5);
  assert_null(strstr(r.bwd_text, "fc1_weight_fp8_")); /* fc1's weight is only quantized for grad_input */
  check_layer("fc1", in[IX], in[IW1], r.grads[IZ1], m.rows, 64, 96, E4, E4, 0, NULL, r.grads[IW1], r.grads[IB1]);
  grad_run_free(&r);
  for (int i = 0; i < NIN; i++) th_tensor_release(in[i]);
  for (int k = 0; k < 3; k++) th_tensor_release(cots[k]);
  th_trace_free(f8);
  th_trace_free(m.tr);
}

/* A Sequential's parameter t_0_weight names values t_0_input_fp8_N (an identifier: the printed trace
 * parses back; "0_input_fp8_N" would not). */
static void test_digit_names(void **state) {
  (void)state;
  mlp m = build_mlp(TH_F32, 2, "t_0_weight");
  th_trace *f8 = float8(m.tr, NULL);
  char *txt = th_trace_print(f8, -1);
  assert_non_null(strstr(txt, " t_0_input_fp8_"));
  th_trace *back = NULL;
  if (th_trace_parse(txt, "<digits>", &back) != TH_OK) fail_msg("parse: %s", th_last_error());
  th_trace_free(back);
  free(txt);
  th_tensor *in[NIN], *cots[3];
  mlp_inputs(&m, TH_F32, in, cots);
  grad_run r = run_grad(f8, NULL, in, cots, EAGER, 1);
  assert_non_null(strstr(r.bwd_text, " t_0_grad_output_fp8_"));
  grad_run_free(&r);
  for (int i = 0; i < NIN; i++) th_tensor_release(in[i]);
  for (int k = 0; k < 3; k++) th_tensor_release(cots[k]);
  th_trace_free(f8);
  th_trace_free(m.tr);
}

/* A gradient that has to flow through ltorch._scaled_mm is refused; one that does not is fine. */
static void test_scaled_mm_refused(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t sa[2] = {4, 8}, sb[2] = {8, 3}, n = 3;
  th_value *a = th_trace_add_tensor_input(tr, "a", E4, CPU, 2, sa);
  th_value *b = th_trace_add_tensor_input(tr, "b", E4, CPU, 2, sb);
  th_value *s = th_trace_add_tensor_input(tr, "s", TH_F32, CPU, 0, NULL);
  th_value *bias = th_trace_add_tensor_input(tr, "bias", TH_F32, CPU, 1, &n);
  static const char *const kwn[1] = {"out_dtype"};
  th_arg args[5] = {V(a), V(b), V(s), V(s), V(bias)}, kw[1] = {th_arg_dtype(TH_F32)};
  th_arg y = callk(tr, "ltorch._scaled_mm", 5, args, 1, kwn, kw);
  assert_int_equal(th_trace_set_return(tr, y), TH_OK);
  th_trace *fwd = NULL, *bwd = NULL;
  assert_int_equal(th_transform_grad(tr, NULL, &fwd, &bwd), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(strstr(th_last_error(), "the derivative of ltorch._scaled_mm is not implemented"));
  assert_null(fwd);
  /* nothing requires grad: the trace differentiates (no gradient at all) */
  bool rg[4] = {false, false, false, false};
  th_grad_options go = {rg, 4};
  assert_int_equal(th_transform_grad(tr, &go, &fwd, &bwd), TH_OK);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* ltorch.float8_linear_output checks its operands. */
static void test_output_op_errors(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  int64_t sx[3] = {2, 3, 8}, sw[2] = {5, 8}, smm[2] = {6, 5}, bad[2] = {5, 6}, n = 5;
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F32, CPU, 3, sx);
  th_value *w = th_trace_add_tensor_input(tr, "w", TH_F32, CPU, 2, sw);
  th_value *mm = th_trace_add_tensor_input(tr, "mm", TH_F32, CPU, 2, smm);
  th_value *mm2 = th_trace_add_tensor_input(tr, "mm2", TH_F32, CPU, 2, bad);
  th_value *b = th_trace_add_tensor_input(tr, "b", TH_F32, CPU, 1, &n);
  th_value *q = th_trace_add_tensor_input(tr, "q", E4, CPU, 2, sw);
  th_arg out;
  th_arg ok[4] = {V(mm), V(x), V(w), V(b)};
  assert_int_equal(th_trace_call(tr, "ltorch.float8_linear_output", 4, ok, 0, NULL, NULL, &out), TH_OK);
  assert_int_equal(th_value_ndim(out.u.value), 3);
  assert_int_equal(th_value_shape(out.u.value)[2], 5);
  th_arg a1[4] = {V(mm2), V(x), V(w), V(b)};
  assert_int_equal(th_trace_call(tr, "ltorch.float8_linear_output", 4, a1, 0, NULL, NULL, &out), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "mm: expected the float32[6, 5] product"));
  th_arg a2[4] = {V(mm), V(x), V(q), V(b)};
  assert_int_equal(th_trace_call(tr, "ltorch.float8_linear_output", 4, a2, 0, NULL, NULL, &out), TH_ERR_TYPE);
  assert_non_null(strstr(th_last_error(), "weight: expected a float16, bfloat16, float32 or float64 tensor"));
  static const char *const kwn[2] = {"input_dtype", "weight_dtype"};
  th_arg kw[2] = {th_arg_dtype(E5), th_arg_dtype(E5)};
  assert_int_equal(th_trace_call(tr, "ltorch.float8_linear_output", 4, ok, 2, kwn, kw, &out), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "cannot both be float8_e5m2"));
  static const char *const gk[1] = {"grad_dtype"};
  th_arg gv[1] = {th_arg_dtype(TH_BF16)};
  assert_int_equal(th_trace_call(tr, "ltorch.float8_linear_output", 4, ok, 1, gk, gv, &out), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "grad_dtype must be float8_e4m3fn or float8_e5m2, but got bfloat16"));
  th_trace_free(tr);
}

/* Allocation failures in the grad transform of a float8 trace (the vjp rule's recording included) end in
 * TH_ERR_NOMEM with nothing set, never a crash or a leak (the sanitizer build checks). The failing
 * allocation is sampled (every one up to 64, then spaced out) to keep the test short. */
void th_alloc_fail_after(long n);

static void test_fault_injection(void **state) {
  (void)state;
  mlp m = build_mlp(TH_F32, 3, "t_fc1_weight");
  th_trace *f8 = float8(m.tr, NULL);
  int ok = 0, tried = 0;
  for (long n = 1; n < 10000000 && !ok; n += n < 64 ? 1 : n / 24) {
    th_trace *fwd = NULL, *bwd = NULL;
    th_alloc_fail_after(n);
    th_status st = th_transform_grad(f8, NULL, &fwd, &bwd);
    th_alloc_fail_after(0);
    tried++;
    if (st == TH_OK) {
      ok = 1;
      th_trace_free(fwd);
      th_trace_free(bwd);
      break;
    }
    if (st != TH_ERR_NOMEM) fail_msg("allocation %ld: %s", n, th_last_error());
    assert_null(fwd);
    assert_null(bwd);
  }
  assert_true(ok);
  assert_true(tried > 64);
  print_message("grad of the float8 MLP: %d failing allocations tried before it succeeded\n", tried);
  th_trace_free(f8);
  th_trace_free(m.tr);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mlp_f32),          cmocka_unit_test(test_mlp_bf16),
    cmocka_unit_test(test_e5m2_operands),    cmocka_unit_test(test_weights_only),
    cmocka_unit_test(test_digit_names),      cmocka_unit_test(test_scaled_mm_refused),
    cmocka_unit_test(test_output_op_errors), cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
