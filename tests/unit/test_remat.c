/* test_remat.c — rematerialization in the grad transform (th_transform_grad; src/transforms/remat.c).
 *
 * For an MLP with GELU (the example: GELU's intermediates recomputed from the saved linear
 * output), softmax attention (explicit and through sdpa's causal decomposition), layer_norm, an MLP of
 * exact ops only, and the GPT-2 block of examples/gpt2_block.py (parsed from the file, in float64 and
 * as written in float32): the gradients with rematerialization match those without it (the traces
 * th_transform_grad made before; bit for bit where only exact ops are recomputed, else within 1e-12 in
 * float64, 1e-9 for the GPT-2 block, whose two backward programs fuse differently: the recomputed
 * causal mask joins the attention region, the saved one is read as an input, and its float64 gradients
 * differ from the eager executor's by ~2e-10 either way, from reduction order), and the gradients with it match central finite differences of the original trace compiled
 * on its own (an independent path: no rule and no recomputation is involved). Structure: every bsym
 * the backward recomputes (outputs named bw_<name>) is a cheap prim (elementwise, layout, creation),
 * never a matmul, linear, reduction or softmax; what is saved is strictly fewer bytes for the issue's
 * MLP and the GPT-2 block (byte counts computed here from the shapes by hand); the MLP saves
 * only inputs and linear outputs; equal-byte ties save what the backward reads (tanh's output); a
 * value an in-place update writes is never recomputed; recomputed ops land inside the backward
 * program's fusion regions; the rematerialized backward prints, parses back and gives the same
 * gradients. The bench-size GPT-2 block (batch 8, sequence 256, n_embd 768, 12 heads) is the same
 * text with other shapes (checked against the example at its own size) and is only transformed, not
 * run: its saved bytes are printed for the report. */
#define _POSIX_C_SOURCE 200809L /* setenv */
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
#include "thunder/jit.h"
#include "thunder/transform.h"

/* ---- helpers ---------------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double urand(double lo, double hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static th_trace *parse(const char *text) {
  th_trace *tr = NULL;
  if (th_trace_parse(text, "<remat>", &tr) != TH_OK) fail_msg("parse: %s\n%s", th_last_error(), text);
  return tr;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  assert_non_null(s);
  assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
  s[n] = 0;
  fclose(f);
  return s;
}

/* s with every `from` replaced by `to` (malloc'd). */
static char *replace_all(const char *s, const char *from, const char *to) {
  size_t lf = strlen(from), lt = strlen(to), n = 0;
  for (const char *p = strstr(s, from); p; p = strstr(p + lf, from)) n++;
  char *out = malloc(strlen(s) + n * (lt > lf ? lt - lf : 0) + 1), *o = out;
  assert_non_null(out);
  for (const char *p = s;;) {
    const char *q = strstr(p, from);
    if (!q) {
      strcpy(o, p);
      break;
    }
    memcpy(o, p, (size_t)(q - p));
    o += q - p;
    memcpy(o, to, lt);
    o += lt;
    p = q + lf;
  }
  return out;
}

static th_tensor *random_input(const th_value *v, double lo, double hi) {
  th_tensor *t = th_tensor_new(th_value_dtype(v), th_value_ndim(v), th_value_shape(v));
  assert_non_null(t);
  int64_t n = th_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double x = urand(lo, hi);
    if (th_tensor_dtype(t) == TH_F64)
      ((double *)th_tensor_data(t))[i] = x;
    else if (th_tensor_dtype(t) == TH_F32)
      ((float *)th_tensor_data(t))[i] = (float)x;
    else
      fail_msg("random_input: dtype %s", th_dtype_name(th_tensor_dtype(t)));
  }
  return t;
}

static double get(const th_tensor *t, int64_t i) { return th_tensor_get_f64(t, i); }
static void set(th_tensor *t, int64_t i, double x) {
  if (th_tensor_dtype(t) == TH_F64)
    ((double *)th_tensor_data(t))[i] = x;
  else
    ((float *)th_tensor_data(t))[i] = (float)x;
}

static th_program *compile(const th_trace *tr) {
  th_program *p = NULL;
  if (th_program_compile(tr, NULL, &p) != TH_OK) fail_msg("compile %s: %s", tr->fn_name, th_last_error());
  return p;
}

static void run(th_program *p, int n, th_tensor **in, int *nout, th_tensor ***out) {
  if (th_program_run(p, n, in, nout, out) != TH_OK) fail_msg("run: %s", th_last_error());
}

static void release(int n, th_tensor **t) {
  for (int i = 0; i < n; i++) th_tensor_release(t[i]);
  free(t);
}

static void grad(const th_trace *tr, bool remat, th_trace **fwd, th_trace **bwd) {
  if (th_transform_grad_remat(tr, NULL, remat, fwd, bwd) != TH_OK)
    fail_msg("grad (remat %d): %s", remat, th_last_error());
}

/* The saved values of a forward trace of the grad transform: its return's second item, flattened. */
static int saved_values(const th_trace *fwd, th_value **out, int max) {
  th_arg r = th_trace_output(fwd);
  assert_true(r.kind == TH_ARG_TUPLE && r.u.seq.n == 2);
  const th_arg *s = &r.u.seq.items[1];
  int n = 0;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < s->u.seq.items[k].u.seq.n; i++) {
      assert_true(n < max);
      out[n++] = s->u.seq.items[k].u.seq.items[i].u.value;
    }
  return n;
}

/* The bytes of the saved values, counted here (numel x element size; numbers 8), and checked against
 * th_grad_forward_layout's count. */
static int64_t saved_bytes(const th_trace *fwd) {
  th_value *v[256];
  int n = saved_values(fwd, v, 256);
  int64_t b = 0;
  for (int i = 0; i < n; i++) {
    if (!th_value_is_tensor(v[i])) {
      b += 8;
      continue;
    }
    int64_t e = 1;
    for (int d = 0; d < th_value_ndim(v[i]); d++) e *= th_value_shape(v[i])[d];
    b += e * (th_value_dtype(v[i]) == TH_F64    ? 8
              : th_value_dtype(v[i]) == TH_F32  ? 4
              : th_value_dtype(v[i]) == TH_BOOL ? 1
                                                : 0);
    assert_true(th_value_dtype(v[i]) == TH_F64 || th_value_dtype(v[i]) == TH_F32 || th_value_dtype(v[i]) == TH_BOOL);
  }
  th_grad_layout L;
  assert_int_equal(th_grad_forward_layout(fwd, &L), TH_OK);
  assert_true(L.saved_bytes == b);
  return b;
}

static bool has_prefix(const char *s, const char *p) { return s && !strncmp(s, p, strlen(p)); }

/* A cheap prim, or a torch-level op whose subsymbols are all cheap (ltorch.gelu, which has a vjp rule
 * and so stays one bsym in the forward). */
static bool cheap_op(const th_bsym *b) {
  static const char *const layout[] = {
    "prims.broadcast_in_dim", "prims.reshape", "prims.transpose", "prims.squeeze", "prims.slice_prim",
    "prims.stride_order",     "prims.clone",   "prims.full",      "prims.iota"};
  if (!b->sym->is_prim) {
    if (b->nsubs == 0 || (b->sym->tags & (TH_TAG_RANDOM | TH_TAG_IN_PLACE | TH_TAG_DONT_DCE))) return false;
    for (int i = 0; i < b->nsubs; i++)
      if (!cheap_op(b->subs[i])) return false;
    return true;
  }
  if (b->sym->tags & (TH_TAG_MATMUL | TH_TAG_REDUCTION | TH_TAG_RANDOM | TH_TAG_IN_PLACE | TH_TAG_DONT_DCE))
    return false;
  if (b->sym->tags & TH_TAG_ELEMENTWISE) return true;
  for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++)
    if (!strcmp(b->sym->qualname, layout[i])) return true;
  return false;
}

/* Every bsym of bwd defining a bw_ value is a cheap prim whose outputs are all bw_ values, and no other
 * bsym defines one. Returns how many there are. */
static int check_recomputed(const th_trace *bwd) {
  int n = 0;
  for (int i = 0; i < th_trace_num_bsyms(bwd); i++) {
    const th_bsym *b = th_trace_bsym(bwd, i);
    th_arg o = b->out;
    bool bw = o.kind == TH_ARG_VALUE && has_prefix(th_value_name(o.u.value), "bw_");
    if (o.kind == TH_ARG_TUPLE || o.kind == TH_ARG_LIST)
      for (int k = 0; k < o.u.seq.n; k++)
        if (o.u.seq.items[k].kind == TH_ARG_VALUE && has_prefix(th_value_name(o.u.seq.items[k].u.value), "bw_"))
          fail_msg("a bw_ value from a multi-output %s", b->sym->qualname);
    if (!bw) continue;
    if (!cheap_op(b))
      fail_msg("the backward recomputes %s = %s, which is not a cheap op", th_value_name(o.u.value), b->sym->qualname);
    n++;
  }
  return n;
}

/* <f(x), v> by a program of the original trace. */
static double loss(th_program *p, int nin, th_tensor **in, th_tensor **v) {
  int n;
  th_tensor **o;
  run(p, nin, in, &n, &o);
  double s = 0;
  for (int i = 0; i < n; i++)
    for (int64_t e = 0; e < th_tensor_numel(o[i]); e++) s += get(o[i], e) * get(v[i], e);
  release(n, o);
  return s;
}

typedef struct result {
  th_tensor **g; /* one per input */
  int64_t bytes;
  int nrecomputed;
} result;

/* Gradients of tr at `in` for cotangents `cots` (one per output tensor), with or without
 * rematerialization; the backward is also printed, parsed back and run: the same gradients, bit for bit. */
static result grads(const th_trace *tr, bool remat, th_tensor **in, th_tensor **cots, int ncots) {
  th_trace *fwd, *bwd;
  grad(tr, remat, &fwd, &bwd);
  result r = {NULL, saved_bytes(fwd), check_recomputed(bwd)};
  if (!remat) assert_int_equal(r.nrecomputed, 0);
  th_grad_layout L;
  assert_int_equal(th_grad_forward_layout(fwd, &L), TH_OK);
  assert_int_equal(L.nflat_output, ncots);
  char *text = th_trace_print(bwd, -1);
  th_trace *pb2 = parse(text);
  free(text);
  th_program *pf = compile(fwd), *pb = compile(bwd), *pp = compile(pb2);
  int nin = th_trace_num_inputs(tr), nf, nb, nb2;
  th_tensor **fo, **go, **go2;
  run(pf, nin, in, &nf, &fo);
  int ns = L.nsaved_tensors + L.nsaved_other;
  th_tensor **bin = calloc((size_t)(ns + ncots + 1), sizeof *bin);
  for (int i = 0; i < ns; i++) bin[i] = fo[L.noutput + L.nflat_args + L.nflat_output + i];
  for (int i = 0; i < ncots; i++) bin[ns + i] = cots[i];
  run(pb, ns + ncots, bin, &nb, &go);
  run(pp, ns + ncots, bin, &nb2, &go2);
  assert_int_equal(nb, nin);
  for (int i = 0; i < nin; i++) {
    assert_non_null(go[i]);
    assert_memory_equal(th_tensor_data(go[i]), th_tensor_data(go2[i]),
                        (size_t)th_tensor_numel(go[i]) * th_dtype_size(th_tensor_dtype(go[i])));
  }
  r.g = go;
  release(nb2, go2);
  free(bin);
  release(nf, fo);
  th_program_free(pf);
  th_program_free(pb);
  th_program_free(pp);
  th_trace_free(pb2);
  th_trace_free(fwd);
  th_trace_free(bwd);
  return r;
}

/* The whole check of one program: gradients with and without rematerialization (bit for bit when
 * `exact`, else within rtol), the rematerialized ones against finite differences on `nfd` elements per
 * input (all when nfd <= 0; float64 traces only). *on / *off: saved bytes. */
static void check_case(const char *label, const th_trace *tr, bool exact, double rtol, int nfd, int64_t *on,
                       int64_t *off, int *nrec) {
  int nin = th_trace_num_inputs(tr);
  th_tensor *in[32];
  for (int i = 0; i < nin; i++) in[i] = random_input(th_trace_input(tr, i), -1, 1);
  th_program *p = compile(tr);
  int nout;
  th_tensor **o;
  run(p, nin, in, &nout, &o);
  th_tensor *v[8];
  assert_true(nout <= 8);
  for (int i = 0; i < nout; i++) {
    th_tensor *c = th_tensor_new(th_tensor_dtype(o[i]), th_tensor_ndim(o[i]), th_tensor_shape(o[i]));
    for (int64_t e = 0; e < th_tensor_numel(c); e++) set(c, e, urand(-1, 1));
    v[i] = c;
  }
  release(nout, o);
  result a = grads(tr, true, in, v, nout), b = grads(tr, false, in, v, nout);
  for (int i = 0; i < nin; i++) {
    const th_tensor *x = a.g[i], *y = b.g[i];
    assert_int_equal(th_tensor_numel(x), th_tensor_numel(y));
    for (int64_t e = 0; e < th_tensor_numel(x); e++) {
      double gx = get(x, e), gy = get(y, e);
      if (exact ? memcmp(&gx, &gy, sizeof gx) != 0 : !(fabs(gx - gy) <= rtol * (1e-3 + fabs(gy))))
        fail_msg("%s: input %d element %lld: %.17g with rematerialization, %.17g without", label, i, (long long)e, gx,
                 gy);
    }
  }
  if (th_tensor_dtype(in[0]) == TH_F64) {
    /* h: the GPT-2 block's truncation error is ~3e-5 at h = 1e-4 and its rounding noise ~1e-5 at 1e-6 */
    const double h = 1e-5;
    for (int i = 0; i < nin; i++) {
      int64_t n = th_tensor_numel(in[i]);
      int k = nfd <= 0 || nfd > n ? (int)n : nfd;
      for (int s = 0; s < k; s++) {
        int64_t e = k == n ? s : (int64_t)urand(0, (double)n);
        double x0 = get(in[i], e);
        set(in[i], e, x0 + h);
        double lp = loss(p, nin, in, v);
        set(in[i], e, x0 - h);
        double lm = loss(p, nin, in, v);
        set(in[i], e, x0);
        double fd = (lp - lm) / (2 * h), an = get(a.g[i], e);
        if (!(fabs(fd - an) <= 1e-5 * (1 + fabs(fd))))
          fail_msg("%s: input %d element %lld: gradient %.12g, finite difference %.12g", label, i, (long long)e, an,
                   fd);
      }
    }
  }
  *on = a.bytes;
  *off = b.bytes;
  if (nrec) *nrec = a.nrecomputed;
  release(nin, a.g);
  release(nin, b.g);
  for (int i = 0; i < nin; i++) th_tensor_release(in[i]);
  for (int i = 0; i < nout; i++) th_tensor_release(v[i]);
  th_program_free(p);
}

/* ---- the example: an MLP with GELU ------------------------------------------------------------ */

static const char *MLP_GELU = "def computation(x, w1, b1, w2, b2):\n"
                              "  # x: \"cpu f64[4, 8]\"\n"
                              "  # w1: \"cpu f64[16, 8]\"\n"
                              "  # b1: \"cpu f64[16]\"\n"
                              "  # w2: \"cpu f64[8, 16]\"\n"
                              "  # b2: \"cpu f64[8]\"\n"
                              "  u = ltorch.linear(x, w1, b1)  # u: \"cpu f64[4, 16]\"\n"
                              "  g = ltorch.gelu(u, approximate='none')  # g: \"cpu f64[4, 16]\"\n"
                              "  y = ltorch.linear(g, w2, b2)  # y: \"cpu f64[4, 8]\"\n"
                              "  return y\n";

/* GELU's input u is saved (the first linear's output) and GELU is recomputed from it: its output g is
 * not saved; everything saved is an input or a linear's output. GELU's vjp rule reads u only. */
static void test_mlp_gelu(void **state) {
  (void)state;
  th_trace *tr = parse(MLP_GELU);
  int64_t on, off;
  int nrec;
  check_case("mlp gelu", tr, false, 1e-12, 0, &on, &off, &nrec);
  /* without: x, w1, w2, u and g (the second linear's input); with: x, w1, w2, u */
  const int64_t x = 4 * 8 * 8, w1 = 16 * 8 * 8, w2 = 8 * 16 * 8, u = 4 * 16 * 8;
  assert_true(on == x + w1 + w2 + u);
  assert_true(off == on + u); /* g */
  assert_true(nrec == 1);     /* ltorch.gelu, with its decomposition */
  th_trace_free(tr);
  tr = parse(MLP_GELU); /* a new compilation: names are per compilation (bw_g is taken in the old one) */
  th_trace *fwd, *bwd;
  grad(tr, true, &fwd, &bwd);
  th_value *sv[64];
  int ns = saved_values(fwd, sv, 64);
  assert_int_equal(ns, 4);
  const char *want[4] = {"x", "w1", "w2", "u"};
  for (int i = 0; i < ns; i++) assert_string_equal(th_value_name(sv[i]), want[i]);
  char *b = th_trace_print(bwd, 1);
  assert_non_null(strstr(b, "bw_g = ltorch.gelu(")); /* GELU's output recomputed for the second linear */
  assert_non_null(strstr(b, "ltorch.erf("));         /* GELU's cdf, in its vjp rule */
  assert_null(strstr(b, "bw_u"));                    /* the linear is never recomputed */
  free(b);
  /* the recomputed ops run inside the backward's fusion regions, not as ops of their own */
  th_program *pb = compile(bwd);
  const th_trace *et = th_program_trace(pb);
  int regions = 0;
  for (int i = 0; i < th_trace_num_bsyms(et); i++) {
    const th_bsym *bs = th_trace_bsym(et, i);
    bool fusion = bs->executor && !strcmp(bs->executor, "fuser");
    regions += fusion;
    if (!fusion && bs->out.kind == TH_ARG_VALUE && has_prefix(th_value_name(bs->out.u.value), "bw_") &&
        bs->sym->id != TH_OP_prims_reshape && bs->sym->id != TH_OP_prims_transpose)
      fail_msg("%s = %s runs outside a fusion region", th_value_name(bs->out.u.value), bs->sym->qualname);
  }
  assert_true(regions >= 1);
  th_program_free(pb);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* Only exact ops recomputed (mul, add): the gradients agree bit for bit. */
static void test_exact_ops(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x, w1, w2):\n"
                       "  # x: \"cpu f64[5, 6]\"\n"
                       "  # w1: \"cpu f64[7, 6]\"\n"
                       "  # w2: \"cpu f64[3, 7]\"\n"
                       "  u = ltorch.linear(x, w1, None)  # u: \"cpu f64[5, 7]\"\n"
                       "  a = ltorch.mul(u, u)  # a: \"cpu f64[5, 7]\"\n"
                       "  b = ltorch.mul(a, 0.5)  # b: \"cpu f64[5, 7]\"\n"
                       "  c = ltorch.add(b, u, alpha=None)  # c: \"cpu f64[5, 7]\"\n"
                       "  y = ltorch.linear(c, w2, None)  # y: \"cpu f64[5, 3]\"\n"
                       "  return y\n");
  int64_t on, off;
  int nrec;
  check_case("exact ops", tr, true, 0, 0, &on, &off, &nrec);
  /* without: x, w1, u, c, w2; with: c recomputed from u */
  assert_true(off == (5 * 6 + 7 * 6 + 5 * 7 + 5 * 7 + 3 * 7) * 8);
  assert_true(on == off - 5 * 7 * 8);
  assert_int_equal(nrec, 3);
  th_trace_free(tr);
}

/* ---- attention, layer_norm ---------------------------------------------------------------------------- */

static void test_softmax_attention(void **state) {
  (void)state;
  th_trace *tr = parse(
    "def computation(q, k, v):\n"
    "  # q: \"cpu f64[1, 2, 6, 4]\"\n"
    "  # k: \"cpu f64[1, 2, 6, 4]\"\n"
    "  # v: \"cpu f64[1, 2, 6, 4]\"\n"
    "  kt = ltorch.transpose(k, 2, 3)  # kt: \"cpu f64[1, 2, 4, 6]\"\n"
    "  s = ltorch.matmul(q, kt)  # s: \"cpu f64[1, 2, 6, 6]\"\n"
    "  s2 = ltorch.mul(s, 0.5)  # s2: \"cpu f64[1, 2, 6, 6]\"\n"
    "  p = ltorch.softmax(s2, -1, dtype=None)  # p: \"cpu f64[1, 2, 6, 6]\"\n"
    "  o = ltorch.matmul(p, v)  # o: \"cpu f64[1, 2, 6, 4]\"\n"
    "  y = ltorch.scaled_dot_product_attention(q, k, v, None, 0.0, True, scale=None)  # y: \"cpu f64[1, 2, 6, 4]\"\n"
    "  return (o, y)\n");
  int64_t on, off;
  int nrec;
  check_case("softmax attention", tr, false, 1e-12, 0, &on, &off, &nrec);
  /* sdpa's causal mask (bool [1, 2, 6, 6] from iota) is recomputed, not saved */
  assert_true(on <= off - 1 * 2 * 6 * 6);
  assert_true(nrec >= 6);
  th_trace_free(tr);
}

static void test_layer_norm(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x, w, b):\n"
                       "  # x: \"cpu f64[3, 4, 8]\"\n"
                       "  # w: \"cpu f64[8]\"\n"
                       "  # b: \"cpu f64[8]\"\n"
                       "  h = ltorch.layer_norm(x, (8,), w, b, 1e-05)  # h: \"cpu f64[3, 4, 8]\"\n"
                       "  t = ltorch.tanh(h)  # t: \"cpu f64[3, 4, 8]\"\n"
                       "  return t\n");
  int64_t on, off;
  int nrec;
  check_case("layer_norm", tr, false, 1e-12, 0, &on, &off, &nrec);
  /* layer_norm's vjp rule recomputes the row statistics and the normalized x from x: x and w are saved
   * for it (b is not: its gradient is a sum of the cotangent) and tanh's output t for tanh's rule, with
   * or without rematerialization; nothing is left to recompute */
  const int64_t xt = 3 * 4 * 8 * 8, w = 8 * 8;
  assert_true(on == xt + w + xt);
  assert_true(off == on);
  assert_int_equal(nrec, 0);
  th_trace_free(tr);
}

/* ---- ties, in-place updates, the API -------------------------------------------------------------------- */

/* Equal bytes: tanh's output (what the backward reads) is saved, not its input; sin(x) is recomputed
 * from x, which is saved anyway, under the name bw_s. */
static void test_ties_and_names(void **state) {
  (void)state;
  th_trace *tr = parse("def computation(x, w):\n"
                       "  # x: \"cpu f64[2, 3]\"\n"
                       "  # w: \"cpu f64[4, 3]\"\n"
                       "  u = ltorch.linear(x, w, None)  # u: \"cpu f64[2, 4]\"\n"
                       "  t = ltorch.tanh(u)  # t: \"cpu f64[2, 4]\"\n"
                       "  return t\n");
  th_trace *fwd, *bwd;
  grad(tr, true, &fwd, &bwd);
  th_value *sv[16];
  int ns = saved_values(fwd, sv, 16);
  assert_int_equal(ns, 3);
  assert_string_equal(th_value_name(sv[2]), "t");
  assert_int_equal(check_recomputed(bwd), 0);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);

  tr = parse("def computation(x, w):\n"
             "  # x: \"cpu f64[2, 3]\"\n"
             "  # w: \"cpu f64[2, 3]\"\n"
             "  s = ltorch.sin(x)  # s: \"cpu f64[2, 3]\"\n"
             "  y = ltorch.mul(s, w)  # y: \"cpu f64[2, 3]\"\n"
             "  return y\n");
  grad(tr, true, &fwd, &bwd);
  char *f = th_trace_print(fwd, 1), *b = th_trace_print(bwd, 1);
  assert_non_null(strstr(f, "'flat_output': (y,)}, ((x, w), ()))"));
  assert_non_null(strstr(b, "  x, w, = C0\n"));
  assert_non_null(strstr(b, "  bw_s = prims.sin(x)  # bw_s: \"cpu f64[2, 3]\"\n"));
  free(f);
  free(b);
  th_trace_free(fwd);
  th_trace_free(bwd);
  grad(tr, false, &fwd, &bwd);
  f = th_trace_print(fwd, 1);
  assert_non_null(strstr(f, "'flat_output': (y,)}, ((x, w, s), ()))"));
  free(f);
  th_trace_free(fwd);
  th_trace_free(bwd);
  th_trace_free(tr);
}

/* The value a saved prims.clone copies, else v itself. */
static const th_value *clone_source(const th_trace *fwd, const th_value *v) {
  for (int i = 0; i < fwd->bsyms.n; i++) {
    const th_bsym *b = fwd->bsyms.items[i];
    if (b->sym->id == TH_OP_prims_clone && b->out.kind == TH_ARG_VALUE && b->out.u.value == v)
      return b->args[0].u.value;
  }
  return v;
}

/* A value an in-place update writes (and its views) is never recomputed: y = x * 2 is read by sin's
 * rule and then updated in place; the saved values are those without rematerialization. */
static void test_inplace_not_recomputed(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t s23[2] = {2, 3};
  th_value *x = th_trace_add_tensor_input(tr, "x", TH_F64, (th_device){TH_CPU, 0}, 2, s23);
  th_arg out, a[2];
  a[0] = th_arg_value(x), a[1] = th_arg_float(2.0);
  assert_int_equal(th_trace_call(tr, "ltorch.mul", 2, a, 0, NULL, NULL, &out), TH_OK);
  th_arg y = out, z, r;
  assert_int_equal(th_trace_call(tr, "ltorch.sin", 1, &y, 0, NULL, NULL, &z), TH_OK);
  a[0] = y, a[1] = th_arg_float(1.0);
  assert_int_equal(th_trace_call(tr, "ltorch.add_", 2, a, 0, NULL, NULL, &out), TH_OK);
  a[0] = z, a[1] = out;
  assert_int_equal(th_trace_call(tr, "ltorch.mul", 2, a, 0, NULL, NULL, &r), TH_OK);
  assert_int_equal(th_trace_set_return(tr, r), TH_OK);
  th_trace *f1, *b1, *f0, *b0;
  grad(tr, true, &f1, &b1);
  grad(tr, false, &f0, &b0);
  th_value *s1[16], *s0[16];
  int n1 = saved_values(f1, s1, 16), n0 = saved_values(f0, s0, 16);
  assert_int_equal(n1, n0);
  /* y is saved as a clone taken before add_ writes it (each forward makes its own clone) */
  for (int i = 0; i < n0; i++) assert_ptr_equal(clone_source(f1, s1[i]), clone_source(f0, s0[i]));
  char *f = th_trace_print(f1, 1);
  assert_non_null(strstr(f, "= prims.clone(t"));
  free(f);
  char *b = th_trace_print(b1, 1);
  assert_null(strstr(b, "bw_")); /* y is written by copy_: nothing built on it is recomputed */
  free(b);
  th_trace_free(f1);
  th_trace_free(b1);
  th_trace_free(f0);
  th_trace_free(b0);
  th_trace_free(tr);
}

static void test_api(void **state) {
  (void)state;
  th_trace *tr = parse(MLP_GELU), *f = NULL, *b = NULL;
  assert_int_equal(th_transform_grad_remat(NULL, NULL, true, &f, &b), TH_ERR_VALUE);
  assert_int_equal(th_transform_grad_remat(tr, NULL, false, NULL, &b), TH_ERR_VALUE);
  assert_null(b);
  /* only w1 requested: grad_w1 = (GELU'(u) * (ct @ w2))^T @ x: x, w2 and u saved, GELU' computed from u
   * by GELU's vjp rule (nothing to recompute) */
  bool rg[5] = {false, true, false, false, false};
  th_grad_options o = {rg, 5};
  assert_int_equal(th_transform_grad_remat(tr, &o, true, &f, &b), TH_OK);
  th_value *sv[16];
  int ns = saved_values(f, sv, 16);
  assert_int_equal(ns, 3);
  const char *want[3] = {"x", "w2", "u"};
  for (int i = 0; i < 3; i++) assert_string_equal(th_value_name(sv[i]), want[i]);
  assert_true(check_recomputed(b) == 0);
  th_trace_free(f);
  th_trace_free(b);
  th_trace_free(tr);
}

/* ---- the GPT-2 block ----------------------------------------------------------------------------------- */

/* examples/gpt2_block.py's program at batch B, sequence T, n_embd C, H heads (print depth 1). */
static char *gpt2_text(int B, int T, int C, int H) {
  const int D = C / H;
  size_t cap = 1 << 14;
  char *s = malloc(cap);
  assert_non_null(s);
  snprintf(
    s, cap,
    "def computation(x, ln_1_weight, ln_1_bias, attn_c_attn_weight, attn_c_attn_bias, attn_c_proj_weight, "
    "attn_c_proj_bias, ln_2_weight, ln_2_bias, mlp_c_fc_weight, mlp_c_fc_bias, mlp_c_proj_weight, mlp_c_proj_bias):\n"
    "  # x: \"cpu f32[%d, %d, %d]\"\n"
    "  # ln_1_weight: \"cpu f32[%d]\"\n"
    "  # ln_1_bias: \"cpu f32[%d]\"\n"
    "  # attn_c_attn_weight: \"cpu f32[%d, %d]\"\n"
    "  # attn_c_attn_bias: \"cpu f32[%d]\"\n"
    "  # attn_c_proj_weight: \"cpu f32[%d, %d]\"\n"
    "  # attn_c_proj_bias: \"cpu f32[%d]\"\n"
    "  # ln_2_weight: \"cpu f32[%d]\"\n"
    "  # ln_2_bias: \"cpu f32[%d]\"\n"
    "  # mlp_c_fc_weight: \"cpu f32[%d, %d]\"\n"
    "  # mlp_c_fc_bias: \"cpu f32[%d]\"\n"
    "  # mlp_c_proj_weight: \"cpu f32[%d, %d]\"\n"
    "  # mlp_c_proj_bias: \"cpu f32[%d]\"\n"
    "  h = ltorch.layer_norm(x, (%d,), ln_1_weight, ln_1_bias, 1e-05)  # h: \"cpu f32[%d, %d, %d]\"\n"
    "  qkv = ltorch.linear(h, attn_c_attn_weight, attn_c_attn_bias)  # qkv: \"cpu f32[%d, %d, %d]\"\n"
    "  (q, k, v) = ltorch.split(qkv, %d, 2)\n"
    "  q4 = ltorch.reshape(q, (%d, %d, %d, %d))  # q4: \"cpu f32[%d, %d, %d, %d]\"\n"
    "  k4 = ltorch.reshape(k, (%d, %d, %d, %d))  # k4: \"cpu f32[%d, %d, %d, %d]\"\n"
    "  v4 = ltorch.reshape(v, (%d, %d, %d, %d))  # v4: \"cpu f32[%d, %d, %d, %d]\"\n"
    "  qh = ltorch.transpose(q4, 1, 2)  # qh: \"cpu f32[%d, %d, %d, %d]\"\n"
    "  kh = ltorch.transpose(k4, 1, 2)  # kh: \"cpu f32[%d, %d, %d, %d]\"\n"
    "  vh = ltorch.transpose(v4, 1, 2)  # vh: \"cpu f32[%d, %d, %d, %d]\"\n"
    "  y = ltorch.scaled_dot_product_attention(qh, kh, vh, None, 0.0, True, scale=None)  # y: \"cpu f32[%d, %d, %d, %d]\"\n"
    "  yt = ltorch.transpose(y, 1, 2)  # yt: \"cpu f32[%d, %d, %d, %d]\"\n"
    "  yc = ltorch.reshape(yt, (%d, %d, %d))  # yc: \"cpu f32[%d, %d, %d]\"\n"
    "  attn = ltorch.linear(yc, attn_c_proj_weight, attn_c_proj_bias)  # attn: \"cpu f32[%d, %d, %d]\"\n"
    "  x1 = ltorch.add(x, attn, alpha=None)  # x1: \"cpu f32[%d, %d, %d]\"\n"
    "  h2 = ltorch.layer_norm(x1, (%d,), ln_2_weight, ln_2_bias, 1e-05)  # h2: \"cpu f32[%d, %d, %d]\"\n"
    "  fc = ltorch.linear(h2, mlp_c_fc_weight, mlp_c_fc_bias)  # fc: \"cpu f32[%d, %d, %d]\"\n"
    "  g = ltorch.gelu(fc, approximate='tanh')  # g: \"cpu f32[%d, %d, %d]\"\n"
    "  mlp = ltorch.linear(g, mlp_c_proj_weight, mlp_c_proj_bias)  # mlp: \"cpu f32[%d, %d, %d]\"\n"
    "  out = ltorch.add(x1, mlp, alpha=None)  # out: \"cpu f32[%d, %d, %d]\"\n"
    "  return out\n",
    B, T, C, C, C, 3 * C, C, 3 * C, C, C, C, C, C, 4 * C, C, 4 * C, C, 4 * C, C, /* inputs */
    C, B, T, C, B, T, 3 * C, C,                                                  /* h, qkv, split */
    B, T, H, D, B, T, H, D, B, T, H, D, B, T, H, D, B, T, H, D, B, T, H, D,      /* q4 k4 v4 */
    B, H, T, D, B, H, T, D, B, H, T, D, B, H, T, D,                              /* qh kh vh y */
    B, T, H, D, B, T, C, B, T, C, B, T, C, B, T, C,                              /* yt yc attn x1 */
    C, B, T, C, B, T, 4 * C, B, T, 4 * C, B, T, C, B, T, C);                     /* h2 fc g mlp out */
  return s;
}

/* The example's program, from its `def` line on (its header comments and decorators dropped). */
static char *gpt2_example(void) {
  char *file = read_file(TH_SOURCE_DIR "/examples/gpt2_block.py");
  char *def = strstr(file, "def computation(");
  assert_non_null(def);
  char *s = malloc(strlen(def) + 1);
  assert_non_null(s);
  strcpy(s, def);
  free(file);
  return s;
}

/* The saved bytes with and without rematerialization of one text (transform only). */
static void bytes_of(const char *text, int64_t *on, int64_t *off) {
  th_trace *tr = parse(text), *f, *b;
  grad(tr, true, &f, &b);
  *on = saved_bytes(f);
  check_recomputed(b);
  th_trace_free(f);
  th_trace_free(b);
  grad(tr, false, &f, &b);
  *off = saved_bytes(f);
  th_trace_free(f);
  th_trace_free(b);
  th_trace_free(tr);
}

static void test_gpt2_block(void **state) {
  (void)state;
  /* the byte counts below are those of sdpa's decomposition (the fused prim saves no T x T values) */
  assert_int_equal(setenv("THUNDER_SDPA_FLASH", "0", 1), 0);
  char *ex = gpt2_example();
  /* the template is the example */
  char *small = gpt2_text(2, 64, 128, 4);
  assert_string_equal(small, ex);
  /* float64: gradients against finite differences (a few elements per input) and without remat */
  char *ex64 = replace_all(ex, "f32[", "f64[");
  th_trace *tr = parse(ex64);
  int64_t on64, off64;
  /* bool values do not double from f32 to f64: without rematerialization the causal mask and the two
   * broadcasts of sdpa's all-(-inf)-row predicate ([B, H, T, T] each) are saved, with it only that
   * predicate ([B, H, T, 1]: a reduction's result, not recomputed) */
  const int64_t mask = 2 * 4 * 64 * 64, rows = 2 * 4 * 64;
  int nrec;
  check_case("gpt2 block f64", tr, false, 1e-9, 3, &on64, &off64, &nrec);
  assert_true(on64 < off64);
  th_trace_free(tr);
  /* as written (float32): the same gradients with and without */
  tr = parse(ex);
  int64_t on, off;
  check_case("gpt2 block f32", tr, false, 1e-5, 0, &on, &off, NULL);
  assert_true(on < off);
  /* the float32 block saves no float64 values: its layer norms' vjp rule recomputes their float64
   * statistics from their inputs in the backward */
  if (!(on64 == 2 * on - rows && off64 == 2 * off - 3 * mask))
    fail_msg("f64 %lld / %lld bytes, f32 %lld / %lld", (long long)on64, (long long)off64, (long long)on,
             (long long)off);
  th_trace_free(tr);
  int64_t bon, boff;
  char *bench = gpt2_text(8, 256, 768, 12);
  bytes_of(bench, &bon, &boff);
  assert_true(bon < boff);
  print_message("saved for backward, GPT-2 block (examples/gpt2_block.py, B=2 T=64 C=128, f32): %lld bytes with "
                "rematerialization, %lld without (%d bsyms recomputed)\n",
                (long long)on, (long long)off, nrec);
  print_message("saved for backward, GPT-2 block at bench size (B=8 T=256 C=768 H=12, f32): %lld bytes with "
                "rematerialization, %lld without\n",
                (long long)bon, (long long)boff);
  free(bench);
  free(small);
  free(ex64);
  free(ex);
  assert_int_equal(unsetenv("THUNDER_SDPA_FLASH"), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_mlp_gelu),
    cmocka_unit_test(test_exact_ops),
    cmocka_unit_test(test_softmax_attention),
    cmocka_unit_test(test_layer_norm),
    cmocka_unit_test(test_ties_and_names),
    cmocka_unit_test(test_inplace_not_recomputed),
    cmocka_unit_test(test_api),
    cmocka_unit_test(test_gpt2_block),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
