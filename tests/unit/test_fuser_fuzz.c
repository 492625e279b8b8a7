/* test_fuser_fuzz.c — differential fuzzer of the CPU fusion executor.
 *
 * Each case is a random DAG recorded through the public API, mostly with torch-level ops so the fusion
 * partition sees what their decompositions produce: elementwise math, comparisons, where / clamp / lerp /
 * masked_fill, reductions (sum, mean, prod, amax, var, std, argmax, logsumexp, softmax, log_softmax,
 * layer_norm), layout ops (permute, transpose, reshape, expand, narrow, getitem, cat, split, squeeze),
 * dtype round trips through float16, bfloat16 and both fp8 formats, a matmul for blas, and a few prims
 * directly (flip, strided slice, broadcast_in_dim, full, iota). Shapes are random (0-d, size-0 and size-1
 * dims, some large enough for the fuser's parallel path), and so are dtypes (all twelve); inputs are
 * transposed or expanded in the trace, and reach the program with random strides (transposed storage,
 * padded rows, stride-0 dims). Several cases share one trace, so one compilation serves many. Each
 * trace runs with executors {fuser, blas, eager} and with {eager}, and every output must agree:
 *   - the reference is the eager run of the trace decomposed to prims with every intermediate
 *     returned, so each prim's eager inputs and output are known;
 *   - a bound on |fused - eager| is propagated prim by prim over that trace, per element. It is 0 for
 *     exactly rounded ops (IEEE + - * /, sqrt, conversions, comparisons, integer and bitwise ops, data
 *     movement) on exact inputs, which demands bit-identical results (only a zero's sign may differ; it
 *     is counted); a few ulps for libm-style functions (exp, tanh, ...); for sums, which may add in
 *     another order, (n - 1) u sum|x| (Higham: any order, each addition rounded to the dtype), and
 *     alike for prod, mean, matmul and var (two-pass or Welford-class algorithms). Inexact
 *     inputs propagate through each op's exact-math sensitivity (interval end points, Lipschitz
 *     constants, comparisons that may flip), so no tolerance is guessed;
 *   - a second run of the fused program must reproduce the first bit for bit (pooled buffers).
 * A self-test corrupts one exact and one bounded element and expects both reported. The run prints how
 * many cases produced at least one fusion region and how many bsyms were fused per case, so a reader
 * sees the fuser is exercised; whatever the fuser does not support stays with eager and must still
 * match. The kernel cache ($XDG_CACHE_HOME/thunder-c) lives in a fresh temporary directory.
 *
 * More cases: test_fuser_fuzz --cases N --seed S [--group G] [--case K] [--verbose], or the environment
 * variables THUNDER_FUZZ_CASES / THUNDER_FUZZ_SEED / THUNDER_FUZZ_GROUP. Case K depends on (seed, K)
 * only, so `--case K` replays it alone. A mismatch prints the case's trace and writes it with its
 * inputs to the working directory (fuser_fuzz_<seed>_<case>.py, ..._inputs.safetensors) for
 * `thunder run X.py --input X_inputs.safetensors --executors fuser,blas,eager`;
 * tests/fuzz/fuser_fuzz_minimize.py shrinks such a file. */
#define _XOPEN_SOURCE 700
#include <float.h>
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "thunder/thunder.h"

/* ---- configuration --------------------------------------------------------------------------------- */

static struct {
  long cases;
  uint64_t seed;
  int group;   /* cases per trace */
  long only;   /* --case K: run case K alone (-1: all) */
  int verbose; /* -v: a line per trace; -v -v: rejected ops, per-output bound statistics; three: the
                    traces; four: every prim's bounds */
} cfg = {240, 20250101, 12, -1, 0};

static char cache_dir[256];

/* ---- random numbers (splitmix64; one stream per case, so a case replays alone) -------------------- */

typedef struct {
  uint64_t s;
} rng_t;

static uint64_t rnext(rng_t *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int rn(rng_t *r, int n) { return n > 0 ? (int)(rnext(r) % (uint64_t)n) : 0; }
static bool chance(rng_t *r, int pct) { return rn(r, 100) < pct; }

/* ---- dtype facts ------------------------------------------------------------------------------------ */

static bool is_float(th_dtype d) { return th_dtype_is_float(d) && !th_dtype_is_fp8(d); }
static bool is_int(th_dtype d) { return th_dtype_is_integer(d); }

/* Relative size of one ulp and the smallest subnormal of each float format; 0 for exact types. */
static double urel(th_dtype d) {
  switch (d) {
    case TH_F64: return 0x1p-52;
    case TH_F32: return 0x1p-23;
    case TH_F16: return 0x1p-10;
    case TH_BF16: return 0x1p-7;
    case TH_F8E4M3FN: return 0x1p-3;
    case TH_F8E5M2: return 0x1p-2;
    default: return 0;
  }
}
static double utiny(th_dtype d) {
  switch (d) {
    case TH_F64: return 0x1p-1074;
    case TH_F32: return 0x1p-149;
    case TH_F16: return 0x1p-24;
    case TH_BF16: return 0x1p-133;
    case TH_F8E4M3FN: return 0x1p-9;
    case TH_F8E5M2: return 0x1p-16;
    default: return 0;
  }
}
static double maxfin(th_dtype d) {
  switch (d) {
    case TH_F64: return DBL_MAX;
    case TH_F32: return FLT_MAX;
    case TH_F16: return 65504.0;
    case TH_BF16: return 3.3895313892515355e38;
    case TH_F8E4M3FN: return 448.0;
    case TH_F8E5M2: return 57344.0;
    case TH_U8: return 255;
    case TH_I8: return 127;
    case TH_I16: return 32767;
    case TH_I32: return 2147483647.0;
    case TH_BOOL: return 1;
    default: return 0x1p62;
  }
}
static double ulp(th_dtype d, double y) { return urel(d) * fabs(y) + utiny(d); }

/* ---- tensors: element access through the public accessors ------------------------------------------- */

static char *elem_ptr(const th_tensor *t, int64_t flat) {
  int nd = th_tensor_ndim(t);
  const int64_t *sh = th_tensor_shape(t), *st = th_tensor_strides(t);
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    off += (flat % sh[d]) * st[d];
    flat /= sh[d];
  }
  return (char *)th_tensor_data(t) + off * (int64_t)th_dtype_size(th_tensor_dtype(t));
}

static void store(th_tensor *t, int64_t flat, double v) {
  char *p = elem_ptr(t, flat);
  switch (th_tensor_dtype(t)) {
    case TH_BOOL: *(uint8_t *)p = v != 0; break;
    case TH_U8: *(uint8_t *)p = (uint8_t)(int)v; break;
    case TH_I8: *(int8_t *)p = (int8_t)v; break;
    case TH_I16: *(int16_t *)p = (int16_t)v; break;
    case TH_I32: *(int32_t *)p = (int32_t)v; break;
    case TH_I64: *(int64_t *)p = (int64_t)v; break;
    case TH_F16: *(uint16_t *)p = th_f32_to_f16((float)v); break;
    case TH_BF16: *(uint16_t *)p = th_f32_to_bf16((float)v); break;
    case TH_F32: *(float *)p = (float)v; break;
    case TH_F64: *(double *)p = v; break;
    case TH_F8E4M3FN: *(uint8_t *)p = th_f32_to_f8e4m3fn((float)v, false); break;
    case TH_F8E5M2: *(uint8_t *)p = th_f32_to_f8e5m2((float)v, false); break;
    default: break;
  }
}

static int64_t numel_of(int nd, const int64_t *s) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= s[d];
  return n;
}

static bool next_index(int nd, const int64_t *shape, int64_t *idx) {
  for (int d = nd - 1; d >= 0; d--) {
    if (++idx[d] < shape[d]) return true;
    idx[d] = 0;
  }
  return false;
}

static void shape_text(char *buf, size_t n, int nd, const int64_t *s) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < nd && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)s[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* ---- the generator ------------------------------------------------------------------------------------ */

#define MAXV 96
#define MAXIN 256
#define NUMEL_MAX (1 << 17)

enum { C_ANY = 0, C_FLOAT = 1, C_INT = 2, C_BOOL = 4, C_NUM = C_FLOAT | C_INT };

/* Runtime layouts of an input tensor. */
enum { L_CONTIG, L_TRANSPOSED, L_PADDED, L_STRIDE0, L_COUNT };

typedef struct {
  th_trace *tr;
  th_value *in[MAXIN];
  int layout[MAXIN], in_case[MAXIN];
  uint64_t in_seed[MAXIN];
  int nin;
  th_arg outs[1024];
  int out_case[1024];
  int nouts;
  long ops_ok, ops_rejected;
} group_t;

typedef struct {
  group_t *G;
  rng_t r;
  long cid;
  th_value *v[MAXV];
  int uses[MAXV];
  bool input[MAXV];
  int nv;
  int nd;
  int64_t base[TH_MAX_DIMS];
  th_dtype dt;
} gen_t;

static th_dtype vdt(const th_value *v) { return th_value_dtype(v); }
static int vnd(const th_value *v) { return th_value_ndim(v); }
static const int64_t *vsh(const th_value *v) { return th_value_shape(v); }

static bool in_class(th_dtype d, int cls) {
  if (th_dtype_is_fp8(d)) return false;
  if (!cls) return true;
  return ((cls & C_FLOAT) && is_float(d)) || ((cls & C_INT) && is_int(d)) || ((cls & C_BOOL) && d == TH_BOOL);
}

static void note_uses(gen_t *g, const th_arg *a) {
  if (a->kind == TH_ARG_VALUE) {
    for (int i = 0; i < g->nv; i++)
      if (g->v[i] == a->u.value) g->uses[i]++;
  } else if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) {
    for (int i = 0; i < a->u.seq.n; i++) note_uses(g, &a->u.seq.items[i]);
  }
}

static void push_value(gen_t *g, th_value *v, bool input) {
  if (!v || !th_value_is_tensor(v) || g->nv >= MAXV) return;
  if (th_value_numel(v) > NUMEL_MAX) return;
  g->v[g->nv] = v;
  g->uses[g->nv] = 0;
  g->input[g->nv] = input;
  g->nv++;
}

static void push_out(gen_t *g, const th_arg *o) {
  if (o->kind == TH_ARG_VALUE)
    push_value(g, o->u.value, false);
  else if (o->kind == TH_ARG_TUPLE || o->kind == TH_ARG_LIST)
    for (int i = 0; i < o->u.seq.n; i++) push_out(g, &o->u.seq.items[i]);
}

/* Records op; on success the outputs join the pool. A rejection (dtype or shape the op refuses) is
 * fine: nothing is recorded and the generator tries something else. */
static bool rec(gen_t *g, const char *op, int n, const th_arg *args, int nkw, const char *const *kwn, const th_arg *kwv,
                th_arg *out) {
  th_arg o;
  if (th_trace_call(g->G->tr, op, n, args, nkw, kwn, kwv, &o) != TH_OK) {
    g->G->ops_rejected++;
    if (cfg.verbose > 1) printf("  rejected %s: %s\n", op, th_last_error());
    return false;
  }
  g->G->ops_ok++;
  for (int i = 0; i < n; i++) note_uses(g, &args[i]);
  for (int i = 0; i < nkw; i++) note_uses(g, &kwv[i]);
  push_out(g, &o);
  if (out) *out = o;
  return true;
}

static int pick(gen_t *g, int cls) {
  int cand[MAXV], n = 0;
  for (int i = 0; i < g->nv; i++)
    if (in_class(vdt(g->v[i]), cls)) cand[n++] = i;
  if (!n) return -1;
  if (n > 3 && chance(&g->r, 55)) return cand[n - 1 - rn(&g->r, 3)];
  return cand[rn(&g->r, n)];
}

static bool broadcastable(const th_value *a, const th_value *b, int64_t *numel) {
  int na = vnd(a), nb = vnd(b), n = na > nb ? na : nb;
  int64_t m = 1;
  for (int k = 0; k < n; k++) {
    int64_t x = k < na ? vsh(a)[na - 1 - k] : 1, y = k < nb ? vsh(b)[nb - 1 - k] : 1;
    if (x != y && x != 1 && y != 1) return false;
    m *= x == 1 ? y : x;
  }
  if (numel) *numel = m;
  return true;
}

/* A partner for a binary op: broadcast-compatible with pool[a], of class cls. */
static int pick_partner(gen_t *g, int a, int cls) {
  int cand[MAXV], same[MAXV], n = 0, ns = 0;
  for (int i = 0; i < g->nv; i++) {
    int64_t m;
    if (!in_class(vdt(g->v[i]), cls) || !broadcastable(g->v[a], g->v[i], &m) || m > NUMEL_MAX) continue;
    cand[n++] = i;
    if (vnd(g->v[i]) == vnd(g->v[a]) && !memcmp(vsh(g->v[i]), vsh(g->v[a]), sizeof(int64_t) * (size_t)vnd(g->v[a])))
      same[ns++] = i;
  }
  if (!n) return -1;
  if (ns && chance(&g->r, 45)) return same[rn(&g->r, ns)];
  return cand[rn(&g->r, n)];
}

static th_arg scalar_for(gen_t *g, th_dtype d) {
  static const double fl[] = {0.5, -1.25, 2.0, 3.0, 1e-3, -0.0, 0.0, 7.0, -2.5, 0.1};
  static const int64_t il[] = {-3, -1, 0, 1, 2, 5, 7};
  int k = rn(&g->r, 10);
  if (k == 0) return th_arg_bool(chance(&g->r, 50));
  if (is_float(d) ? k < 8 : k < 3) return th_arg_float(fl[rn(&g->r, 10)]);
  return th_arg_int(il[rn(&g->r, 7)]);
}

static th_arg V(gen_t *g, int i) { return th_arg_value(g->v[i]); }

/* ---- inputs ------------------------------------------------------------------------------------------- */

static th_dtype random_dtype(rng_t *r) {
  static const th_dtype table[] = {TH_F32,  TH_F32,  TH_F32, TH_F32, TH_F32, TH_F32,  TH_BF16,
                                   TH_BF16, TH_BF16, TH_F16, TH_F16, TH_F64, TH_F64,  TH_I64,
                                   TH_I64,  TH_I32,  TH_I16, TH_I8,  TH_U8,  TH_BOOL, TH_BOOL};
  return table[rn(r, (int)(sizeof table / sizeof *table))];
}

static void random_shape(gen_t *g) {
  static const int64_t dims[] = {1, 1, 2, 3, 4, 5, 7, 8, 16, 33};
  rng_t *r = &g->r;
  if (chance(r, 4)) { /* large enough for the fuser's parallel path and several inner chunks */
    g->nd = 2;
    g->base[0] = 40 + rn(r, 20);
    g->base[1] = 900 + rn(r, 400);
    return;
  }
  int k = rn(r, 100);
  g->nd = k < 10 ? 0 : k < 28 ? 1 : k < 63 ? 2 : k < 88 ? 3 : 4;
  do {
    for (int d = 0; d < g->nd; d++) g->base[d] = chance(r, 3) ? 0 : dims[rn(r, 10)];
  } while (numel_of(g->nd, g->base) > 4096);
}

static th_value *add_input(gen_t *g, th_dtype dt, int nd, const int64_t *shape) {
  group_t *G = g->G;
  if (G->nin >= MAXIN) return NULL;
  char name[32];
  snprintf(name, sizeof name, "k%ld_%d", g->cid, G->nin);
  /* names must be unique per trace: the input index is unique within the group */
  th_value *v = th_trace_add_tensor_input(G->tr, name, dt, (th_device){TH_CPU, 0}, nd, shape);
  if (!v) return NULL;
  G->in[G->nin] = v;
  G->in_case[G->nin] = (int)g->cid;
  G->in_seed[G->nin] = rnext(&g->r);
  int lay = rn(&g->r, 10);
  G->layout[G->nin] = lay < 6 ? L_CONTIG : lay < 8 ? L_TRANSPOSED : lay < 9 ? L_PADDED : L_STRIDE0;
  G->nin++;
  return v;
}

static void case_inputs(gen_t *g) {
  random_shape(g);
  g->dt = random_dtype(&g->r);
  int n = 1 + rn(&g->r, 3);
  for (int i = 0; i < n; i++) {
    th_dtype dt = chance(&g->r, 22) ? random_dtype(&g->r) : g->dt;
    int kind = rn(&g->r, 10), nd = g->nd;
    int64_t shape[TH_MAX_DIMS];
    memcpy(shape, g->base, sizeof shape);
    if (kind >= 5 && kind < 7 && nd >= 2) { /* declared permuted, permuted back in the trace */
      int perm[TH_MAX_DIMS], inv[TH_MAX_DIMS];
      for (int d = 0; d < nd; d++) perm[d] = d;
      for (int d = nd - 1; d > 0; d--) {
        int j = rn(&g->r, d + 1), t = perm[d];
        perm[d] = perm[j];
        perm[j] = t;
      }
      for (int d = 0; d < nd; d++) shape[d] = g->base[perm[d]], inv[perm[d]] = d;
      th_value *x = add_input(g, dt, nd, shape);
      if (!x) continue;
      push_value(g, x, true);
      th_arg pv[TH_MAX_DIMS];
      for (int d = 0; d < nd; d++) pv[d] = th_arg_int(inv[d]);
      th_arg args[2] = {th_arg_value(x), th_arg_list(nd, pv)};
      if (nd == 2 && chance(&g->r, 50)) {
        th_arg t[3] = {th_arg_value(x), th_arg_int(0), th_arg_int(1)};
        if (inv[0] == 1)
          rec(g, "ltorch.transpose", 3, t, 0, NULL, NULL, NULL);
        else
          rec(g, "ltorch.permute", 2, args, 0, NULL, NULL, NULL);
      } else {
        rec(g, "ltorch.permute", 2, args, 0, NULL, NULL, NULL);
      }
    } else if (kind >= 7 && nd >= 1) { /* size-1 dims (or fewer dims), expanded in the trace */
      int lead = kind == 9 ? rn(&g->r, nd + 1) : 0;
      for (int d = 0; d < nd; d++)
        if (chance(&g->r, 50)) shape[d] = 1;
      th_value *x = add_input(g, dt, nd - lead, shape + lead);
      if (!x) continue;
      push_value(g, x, true);
      th_arg sz[TH_MAX_DIMS];
      for (int d = 0; d < nd; d++) sz[d] = th_arg_int(d >= lead && chance(&g->r, 30) ? -1 : g->base[d]);
      th_arg args[2] = {th_arg_value(x), th_arg_list(nd, sz)};
      rec(g, "ltorch.expand", 2, args, 0, NULL, NULL, NULL);
    } else {
      th_value *x = add_input(g, dt, nd, shape);
      if (x) push_value(g, x, true);
    }
  }
}

/* Fills input i of the group with values from its seed, in the layout it drew. */
static th_tensor *make_input(const group_t *G, int i) {
  const th_value *v = G->in[i];
  th_dtype dt = vdt(v);
  int nd = vnd(v);
  int64_t shape[TH_MAX_DIMS], n = th_value_numel(v);
  memcpy(shape, vsh(v), sizeof(int64_t) * (size_t)nd);
  int lay = n == 0 ? L_CONTIG : G->layout[i];
  if (lay == L_TRANSPOSED && nd < 2) lay = L_PADDED;
  if (lay == L_PADDED && nd < 1) lay = L_CONTIG;
  th_tensor *t = NULL;
  if (lay == L_TRANSPOSED) { /* storage holds the reversed shape; the view reads it transposed */
    int64_t rs[TH_MAX_DIMS], st[TH_MAX_DIMS];
    for (int d = 0; d < nd; d++) rs[d] = shape[nd - 1 - d];
    th_tensor *base = th_tensor_new(dt, nd, rs);
    const int64_t *bst = th_tensor_strides(base);
    for (int d = 0; d < nd; d++) st[d] = bst[nd - 1 - d];
    t = th_tensor_view(base, nd, shape, st, 0);
    th_tensor_release(base);
  } else if (lay == L_PADDED) { /* rows padded by 3 elements, one element of offset */
    int64_t ps[TH_MAX_DIMS], st[TH_MAX_DIMS];
    memcpy(ps, shape, sizeof ps);
    ps[nd - 1] += 3;
    th_tensor *base = th_tensor_new(dt, nd, ps);
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) st[d] = s, s *= ps[d];
    t = th_tensor_view(base, nd, shape, st, numel_of(nd, ps) > numel_of(nd, shape) ? 1 : 0);
    th_tensor_release(base);
  } else if (lay == L_STRIDE0) { /* the largest dim reads one stored row (stride 0) */
    int big = -1;
    for (int d = 0; d < nd; d++)
      if (shape[d] > 1 && (big < 0 || shape[d] > shape[big])) big = d;
    if (big < 0) {
      t = th_tensor_new(dt, nd, shape);
    } else {
      int64_t ps[TH_MAX_DIMS], st[TH_MAX_DIMS];
      memcpy(ps, shape, sizeof ps);
      ps[big] = 1;
      th_tensor *base = th_tensor_new(dt, nd, ps);
      memcpy(st, th_tensor_strides(base), sizeof(int64_t) * (size_t)nd);
      st[big] = 0;
      t = th_tensor_view(base, nd, shape, st, 0);
      th_tensor_release(base);
    }
  } else {
    t = th_tensor_new(dt, nd, shape);
  }
  if (!t) return NULL;
  rng_t r = {G->in_seed[i]};
  int mode = rn(&r, 100);
  bool specials = is_float(dt) && mode < 8, wide = is_float(dt) && mode >= 8 && mode < 16;
  static const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30, -1e-30, 65504.0, 448.0};
  for (int64_t k = 0; k < n; k++) {
    double x;
    switch (dt) {
      case TH_BOOL: x = rn(&r, 2); break;
      case TH_U8: x = rn(&r, 201); break;
      case TH_I8: x = rn(&r, 201) - 100; break;
      case TH_I16:
      case TH_I32:
      case TH_I64: x = rn(&r, 101) - 50; break;
      default:
        x = (rn(&r, 4001) - 2000) / 1000.0;
        if (wide) x *= 100;
        if (specials && chance(&r, 4)) x = sp[rn(&r, 9)];
        break;
    }
    store(t, k, x);
  }
  return t;
}

/* ---- ops ------------------------------------------------------------------------------------------------ */

static bool op_unary(gen_t *g) {
  /* every unary op of the table (the rows of ops/unary.def), then the unary activations of torch/nn.c */
  static const char *const ops[] = {
#define TH_UNARY(name, ...) #name,
#define TH_UNARY_TORCH(name, ...) #name,
#include "ops/unary.def"
#undef TH_UNARY
#undef TH_UNARY_TORCH
    "relu", "gelu", "silu"};
  int a = pick(g, C_ANY);
  if (a < 0) return false;
  const char *op = ops[rn(&g->r, (int)(sizeof ops / sizeof *ops))];
  char q[64];
  snprintf(q, sizeof q, "ltorch.%s", op);
  th_arg x = V(g, a);
  if (!strcmp(op, "gelu") && chance(&g->r, 50)) {
    const char *kn[] = {"approximate"};
    th_arg kv[] = {th_arg_str("tanh")};
    return rec(g, q, 1, &x, 1, kn, kv, NULL);
  }
  if (!strcmp(op, "round") && chance(&g->r, 25)) {
    const char *kn[] = {"decimals"};
    th_arg kv[] = {th_arg_int(1 + rn(&g->r, 2))};
    return rec(g, q, 1, &x, 1, kn, kv, NULL);
  }
  return rec(g, q, 1, &x, 0, NULL, NULL, NULL);
}

static bool divides(const char *op) {
  return !strcmp(op, "floor_divide") || !strcmp(op, "remainder") || !strcmp(op, "fmod");
}

static bool op_binary(gen_t *g) {
  static const char *const ops[] = {
    "add",         "sub",        "mul",         "div",     "true_divide", "floor_divide", "remainder",
    "fmod",        "pow",        "atan2",       "maximum", "minimum",     "eq",           "ne",
    "lt",          "le",         "gt",          "ge",      "logical_and", "logical_or",   "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "add",     "mul",         "sub"};
  int a = pick(g, C_ANY);
  if (a < 0) return false;
  const char *op = ops[rn(&g->r, (int)(sizeof ops / sizeof *ops))];
  char q[64];
  snprintf(q, sizeof q, "ltorch.%s", op);
  th_dtype da = vdt(g->v[a]);
  bool scalar = chance(&g->r, 28) && strcmp(op, "maximum") && strcmp(op, "minimum");
  int b = scalar ? -1 : pick_partner(g, a, C_ANY);
  if (b < 0) scalar = true;
  bool rounding = !strcmp(op, "div") && chance(&g->r, 30);
  /* integer division by a tensor may divide by zero (an error in eager and in PyTorch): integer
   * quotients only by a nonzero scalar */
  bool intdiv = divides(op) || rounding;
  th_arg args[2] = {V(g, a), scalar ? scalar_for(g, da) : V(g, b)};
  if (intdiv) {
    bool int_a = !is_float(da), int_b = scalar ? args[1].kind != TH_ARG_FLOAT : !is_float(vdt(g->v[b]));
    if (int_a && int_b) args[1] = th_arg_int((1 + rn(&g->r, 4)) * (chance(&g->r, 50) ? 1 : -1));
  }
  if (!strcmp(op, "pow") && !is_float(da) && (scalar || !is_float(vdt(g->v[b])))) args[1] = th_arg_int(rn(&g->r, 4));
  if (scalar && chance(&g->r, 15) && strcmp(op, "pow") && !intdiv) { /* number first */
    th_arg t = args[0];
    args[0] = args[1];
    args[1] = t;
  }
  if (rounding) {
    const char *kn[] = {"rounding_mode"};
    th_arg kv[] = {th_arg_str(chance(&g->r, 50) ? "trunc" : "floor")};
    return rec(g, q, 2, args, 1, kn, kv, NULL);
  }
  if ((!strcmp(op, "add") || !strcmp(op, "sub")) && chance(&g->r, 15)) {
    const char *kn[] = {"alpha"};
    th_arg kv[] = {is_float(da) ? th_arg_float(0.5) : th_arg_int(2)};
    return rec(g, q, 2, args, 1, kn, kv, NULL);
  }
  return rec(g, q, 2, args, 0, NULL, NULL, NULL);
}

static bool op_ternary(gen_t *g) {
  int k = rn(&g->r, 4);
  int a = pick(g, k == 2 ? C_FLOAT : C_ANY);
  if (a < 0) return false;
  th_dtype da = vdt(g->v[a]);
  if (k == 0 || k == 3) { /* where / masked_fill: a bool condition, made if none */
    int c = pick_partner(g, a, C_BOOL);
    if (c < 0) {
      th_arg ca[2] = {V(g, a), th_arg_float(0.25)};
      th_arg co;
      if (!rec(g, "ltorch.gt", 2, ca, 0, NULL, NULL, &co)) return false;
      c = g->nv - 1;
    }
    if (k == 3) {
      th_arg args[3] = {V(g, a), V(g, c), scalar_for(g, da)};
      return rec(g, "ltorch.masked_fill", 3, args, 0, NULL, NULL, NULL);
    }
    int b = chance(&g->r, 70) ? pick_partner(g, a, C_ANY) : -1;
    th_arg args[3] = {V(g, c), V(g, a), b >= 0 ? V(g, b) : scalar_for(g, da)};
    if (chance(&g->r, 20)) {
      th_arg t = args[1];
      args[1] = args[2];
      args[2] = t;
    }
    return rec(g, "ltorch.where", 3, args, 0, NULL, NULL, NULL);
  }
  if (k == 1) { /* clamp */
    th_arg lo = th_arg_none(), hi = th_arg_none();
    int m = rn(&g->r, 4);
    if (m != 1) lo = is_float(da) ? th_arg_float(-0.5) : th_arg_int(-3);
    if (m != 2) hi = is_float(da) ? th_arg_float(0.75) : th_arg_int(4);
    if (m == 3) {
      int b = pick_partner(g, a, C_NUM);
      if (b >= 0) hi = V(g, b);
    }
    th_arg args[3] = {V(g, a), lo, hi};
    return rec(g, "ltorch.clamp", 3, args, 0, NULL, NULL, NULL);
  }
  int b = pick_partner(g, a, C_FLOAT);
  if (b < 0) return false;
  int w = chance(&g->r, 40) ? pick_partner(g, a, C_FLOAT) : -1;
  th_arg args[3] = {V(g, a), V(g, b), w >= 0 ? V(g, w) : th_arg_float(0.3)};
  return rec(g, "ltorch.lerp", 3, args, 0, NULL, NULL, NULL);
}

/* A dim argument: None, one int (maybe negative) or a list of distinct dims; *zero set if a reduced dim
 * has no elements. */
static th_arg dims_arg(gen_t *g, const th_value *v, th_arg *items, bool allow_none, bool *zero) {
  int nd = vnd(v);
  *zero = false;
  int mode = rn(&g->r, 10);
  if ((allow_none && mode < 2) || (nd == 0 && mode < 5 && allow_none)) {
    *zero = th_value_numel(v) == 0;
    return th_arg_none();
  }
  int span = nd ? nd : 1;
  if (mode < 6 || nd <= 1) {
    int d = rn(&g->r, span);
    *zero = nd && vsh(v)[d] == 0;
    return th_arg_int(chance(&g->r, 30) ? d - span : d);
  }
  int n = 0;
  for (int d = 0; d < nd; d++)
    if (chance(&g->r, 50)) {
      items[n++] = th_arg_int(chance(&g->r, 20) ? d - nd : d);
      if (vsh(v)[d] == 0) *zero = true;
    }
  if (!n) {
    items[n++] = th_arg_int(nd - 1);
    *zero = vsh(v)[nd - 1] == 0;
  }
  return th_arg_list(n, items);
}

static bool op_reduction(gen_t *g) {
  int a = pick(g, C_ANY);
  if (a < 0) return false;
  th_value *x = g->v[a];
  th_dtype dx = vdt(x);
  th_arg items[TH_MAX_DIMS];
  bool zero;
  int k = rn(&g->r, 15);
  const char *kn[1];
  th_arg kv[1];
  switch (k) {
    case 0:
    case 1:
    case 2: { /* sum / mean / prod */
      static const char *const ops[] = {"ltorch.sum", "ltorch.mean", "ltorch.prod"};
      th_arg args[3] = {V(g, a), dims_arg(g, x, items, true, &zero), th_arg_bool(chance(&g->r, 50))};
      if (k == 2 && args[1].kind == TH_ARG_LIST) args[1] = th_arg_int(0); /* prod takes one dim */
      if (chance(&g->r, 15)) {
        kn[0] = "dtype";
        kv[0] = th_arg_dtype(chance(&g->r, 50) ? TH_F64 : TH_F32);
        return rec(g, ops[k], 3, args, 1, kn, kv, NULL);
      }
      return rec(g, ops[k], 3, args, 0, NULL, NULL, NULL);
    }
    case 3:
    case 4: { /* amax / amin: no empty reductions (an error, as in PyTorch) */
      th_arg args[3] = {V(g, a), dims_arg(g, x, items, true, &zero), th_arg_bool(chance(&g->r, 50))};
      if (zero) return false;
      return rec(g, k == 3 ? "ltorch.amax" : "ltorch.amin", 3, args, 0, NULL, NULL, NULL);
    }
    case 5:
    case 6: { /* var / std / var_mean / std_mean */
      static const char *const ops[] = {"ltorch.var", "ltorch.std", "ltorch.var_mean", "ltorch.std_mean"};
      th_arg args[4] = {V(g, a), dims_arg(g, x, items, true, &zero), th_arg_none(), th_arg_bool(chance(&g->r, 50))};
      const char *op = ops[rn(&g->r, 4)];
      if (chance(&g->r, 50)) {
        kn[0] = "correction";
        kv[0] = th_arg_int(rn(&g->r, 3));
        return rec(g, op, 4, args, 1, kn, kv, NULL);
      }
      if (chance(&g->r, 50)) args[2] = th_arg_bool(chance(&g->r, 50));
      return rec(g, op, 4, args, 0, NULL, NULL, NULL);
    }
    case 7: { /* argmax / argmin / max / min */
      static const char *const ops[] = {"ltorch.argmax", "ltorch.argmin", "ltorch.max", "ltorch.min"};
      int o = rn(&g->r, 4);
      bool none = chance(&g->r, 25) || vnd(x) == 0;
      int d = vnd(x) ? rn(&g->r, vnd(x)) : 0;
      if (none ? th_value_numel(x) == 0 : (vnd(x) && vsh(x)[d] == 0)) return false;
      if (o >= 2 && none) {
        th_arg args[1] = {V(g, a)};
        return rec(g, ops[o], 1, args, 0, NULL, NULL, NULL);
      }
      th_arg args[3] = {V(g, a), none ? th_arg_none() : th_arg_int(d), th_arg_bool(chance(&g->r, 50))};
      return rec(g, ops[o], 3, args, 0, NULL, NULL, NULL);
    }
    case 8:
    case 9:
    case 10: { /* softmax / log_softmax */
      int nd = vnd(x), span = nd ? nd : 1, d = rn(&g->r, span);
      th_arg args[2] = {V(g, a), th_arg_int(chance(&g->r, 30) ? d - span : d)};
      const char *op = chance(&g->r, 60) ? "ltorch.softmax" : "ltorch.log_softmax";
      if (chance(&g->r, 20)) {
        kn[0] = "dtype";
        kv[0] = th_arg_dtype(chance(&g->r, 50) ? TH_F64 : TH_F32);
        return rec(g, op, 2, args, 1, kn, kv, NULL);
      }
      return rec(g, op, 2, args, 0, NULL, NULL, NULL);
    }
    case 11: { /* logsumexp */
      th_arg args[3] = {V(g, a), dims_arg(g, x, items, false, &zero), th_arg_bool(chance(&g->r, 50))};
      return rec(g, "ltorch.logsumexp", 3, args, 0, NULL, NULL, NULL);
    }
    default: { /* layer_norm over the last 1..2 dims, with or without weight and bias */
      int nd = vnd(x);
      if (nd == 0 || !is_float(dx)) return false;
      int kk = nd >= 2 && chance(&g->r, 35) ? 2 : 1;
      th_arg ns[2];
      for (int i = 0; i < kk; i++) ns[i] = th_arg_int(vsh(x)[nd - kk + i]);
      th_arg args[5] = {V(g, a), th_arg_list(kk, ns), th_arg_none(), th_arg_none(), th_arg_float(1e-5)};
      if (chance(&g->r, 60)) {
        th_value *w = add_input(g, dx, kk, vsh(x) + nd - kk);
        if (w) args[2] = th_arg_value(w);
        if (w && chance(&g->r, 70)) {
          th_value *b = add_input(g, dx, kk, vsh(x) + nd - kk);
          if (b) args[3] = th_arg_value(b);
        }
      }
      return rec(g, "ltorch.layer_norm", 5, args, 0, NULL, NULL, NULL);
    }
  }
}

static bool op_layout(gen_t *g) {
  int a = pick(g, C_ANY);
  if (a < 0) return false;
  th_value *x = g->v[a];
  int nd = vnd(x), span = nd ? nd : 1;
  const int64_t *s = vsh(x);
  th_arg it[TH_MAX_DIMS + 2];
  int k = rn(&g->r, 15);
  switch (k) {
    case 0: { /* transpose */
      th_arg args[3] = {V(g, a), th_arg_int(rn(&g->r, span)),
                        th_arg_int(rn(&g->r, span) - (chance(&g->r, 30) ? span : 0))};
      return rec(g, "ltorch.transpose", 3, args, 0, NULL, NULL, NULL);
    }
    case 1: { /* permute */
      int perm[TH_MAX_DIMS];
      for (int d = 0; d < nd; d++) perm[d] = d;
      for (int d = nd - 1; d > 0; d--) {
        int j = rn(&g->r, d + 1), t = perm[d];
        perm[d] = perm[j];
        perm[j] = t;
      }
      for (int d = 0; d < nd; d++) it[d] = th_arg_int(perm[d]);
      th_arg args[2] = {V(g, a), th_arg_list(nd, it)};
      return rec(g, "ltorch.permute", 2, args, 0, NULL, NULL, NULL);
    }
    case 2:
    case 3: { /* reshape / view: merge two dims, split one, flatten, or add a 1 */
      int64_t ns[TH_MAX_DIMS + 1];
      int nn = 0, m = rn(&g->r, 4);
      if (m == 0 || nd == 0) {
        ns[nn++] = th_value_numel(x);
      } else if (m == 1 && nd >= 2) {
        int d = rn(&g->r, nd - 1);
        for (int i = 0; i < nd; i++) {
          if (i == d)
            ns[nn++] = s[i] * s[i + 1], i++;
          else
            ns[nn++] = s[i];
        }
      } else if (m == 2 && nd < TH_MAX_DIMS) {
        int d = rn(&g->r, nd);
        int64_t f = s[d] % 2 == 0 && s[d] > 0 ? 2 : 1;
        for (int i = 0; i < nd; i++) {
          if (i == d)
            ns[nn++] = f, ns[nn++] = s[i] / f;
          else
            ns[nn++] = s[i];
        }
      } else {
        int d = rn(&g->r, nd + 1);
        for (int i = 0; i <= nd; i++) {
          if (i == d) ns[nn++] = 1;
          if (i < nd) ns[nn++] = s[i];
        }
      }
      if (nn > TH_MAX_DIMS) return false;
      bool infer = th_value_numel(x) > 0 && chance(&g->r, 30);
      int at = rn(&g->r, nn);
      for (int i = 0; i < nn; i++) it[i] = th_arg_int(infer && i == at ? -1 : ns[i]);
      th_arg args[2] = {V(g, a), th_arg_list(nn, it)};
      return rec(g, k == 2 ? "ltorch.reshape" : "ltorch.view", 2, args, 0, NULL, NULL, NULL);
    }
    case 4: { /* unsqueeze */
      th_arg args[2] = {V(g, a), th_arg_int(rn(&g->r, nd + 1) - (chance(&g->r, 30) ? nd + 1 : 0))};
      return rec(g, "ltorch.unsqueeze", 2, args, 0, NULL, NULL, NULL);
    }
    case 5: { /* squeeze: all size-1 dims or a list */
      if (chance(&g->r, 50)) {
        th_arg args[1] = {V(g, a)};
        return rec(g, "ltorch.squeeze", 1, args, 0, NULL, NULL, NULL);
      }
      int n = 0;
      for (int d = 0; d < nd; d++)
        if (s[d] == 1 || chance(&g->r, 10)) it[n++] = th_arg_int(d);
      th_arg args[2] = {V(g, a), th_arg_list(n, it)};
      return rec(g, "ltorch.squeeze", 2, args, 0, NULL, NULL, NULL);
    }
    case 6: { /* expand size-1 dims (and maybe one new leading dim) */
      int lead = nd < TH_MAX_DIMS && chance(&g->r, 30) ? 1 : 0;
      int64_t m = th_value_numel(x);
      if (lead) it[0] = th_arg_int(1 + rn(&g->r, 3)), m *= it[0].u.i;
      for (int d = 0; d < nd; d++) {
        int64_t z = s[d];
        if (z == 1 && chance(&g->r, 70)) z = 1 + rn(&g->r, 5);
        it[lead + d] = th_arg_int(z == s[d] && chance(&g->r, 30) ? -1 : z);
        m = z == s[d] ? m : m * z;
      }
      if (m > NUMEL_MAX) return false;
      th_arg args[2] = {V(g, a), th_arg_list(nd + lead, it)};
      return rec(g, "ltorch.expand", 2, args, 0, NULL, NULL, NULL);
    }
    case 7: { /* narrow */
      if (nd == 0) return false;
      int d = rn(&g->r, nd);
      int64_t st = rn(&g->r, (int)s[d] + 1), len = rn(&g->r, (int)(s[d] - st) + 1);
      th_arg args[4] = {V(g, a), th_arg_int(d), th_arg_int(st), th_arg_int(len)};
      return rec(g, "ltorch.narrow", 4, args, 0, NULL, NULL, NULL);
    }
    case 8: { /* getitem with a slice (maybe stepped) on dim 0, maybe an int on dim 1 */
      if (nd == 0) return false;
      th_arg sl = {TH_ARG_SLICE, {0}};
      sl.u.slice.has_start = chance(&g->r, 70);
      sl.u.slice.start = rn(&g->r, (int)s[0] + 1);
      sl.u.slice.has_stop = chance(&g->r, 50);
      sl.u.slice.stop = sl.u.slice.start + rn(&g->r, (int)s[0] + 1);
      sl.u.slice.has_step = chance(&g->r, 50);
      sl.u.slice.step = 1 + rn(&g->r, 3);
      int n = 1;
      it[0] = sl;
      if (nd >= 2 && s[1] > 0 && chance(&g->r, 40)) it[n++] = th_arg_int(rn(&g->r, (int)s[1]));
      th_arg args[2] = {V(g, a), n == 1 && chance(&g->r, 50) ? sl : th_arg_tuple(n, it)};
      return rec(g, "ltorch.getitem", 2, args, 0, NULL, NULL, NULL);
    }
    case 9: { /* cat / stack with a same-shaped partner or itself */
      int b = a;
      for (int i = 0; i < g->nv; i++)
        if (i != a && vnd(g->v[i]) == nd && !memcmp(vsh(g->v[i]), s, sizeof(int64_t) * (size_t)nd) && chance(&g->r, 50))
          b = i;
      if (2 * th_value_numel(x) > NUMEL_MAX) return false;
      th_arg ts[2] = {V(g, a), V(g, b)};
      if (chance(&g->r, 60) && nd > 0) {
        th_arg args[2] = {th_arg_list(2, ts), th_arg_int(rn(&g->r, nd))};
        return rec(g, "ltorch.cat", 2, args, 0, NULL, NULL, NULL);
      }
      th_arg args[2] = {th_arg_list(2, ts), th_arg_int(rn(&g->r, nd + 1))};
      return rec(g, "ltorch.stack", 2, args, 0, NULL, NULL, NULL);
    }
    case 10: { /* split / chunk */
      if (nd == 0) return false;
      int d = rn(&g->r, nd);
      th_arg args[3] = {V(g, a), th_arg_int(1 + rn(&g->r, 3)), th_arg_int(d)};
      return rec(g, chance(&g->r, 50) ? "ltorch.split" : "ltorch.chunk", 3, args, 0, NULL, NULL, NULL);
    }
    case 11: { /* flatten */
      th_arg args[3] = {V(g, a), th_arg_int(rn(&g->r, span)), th_arg_int(-1)};
      return rec(g, "ltorch.flatten", 3, args, 0, NULL, NULL, NULL);
    }
    case 12: { /* t() on <= 2-D */
      th_arg args[1] = {V(g, a)};
      return rec(g, nd <= 2 ? "ltorch.t" : "ltorch.contiguous", 1, args, 0, NULL, NULL, NULL);
    }
    default: {
      th_arg args[1] = {V(g, a)};
      return rec(g, chance(&g->r, 50) ? "ltorch.contiguous" : "ltorch.clone", 1, args, 0, NULL, NULL, NULL);
    }
  }
}

static bool op_convert(gen_t *g) {
  int a = pick(g, C_ANY);
  if (a < 0) return false;
  th_dtype dx = vdt(g->v[a]);
  int k = rn(&g->r, 10);
  if (k < 5) { /* round trip through a narrower float: to(low) then back to(orig) */
    static const th_dtype low[] = {TH_F16, TH_BF16, TH_F8E4M3FN, TH_F8E5M2, TH_F32};
    th_arg o;
    th_arg args[2] = {V(g, a), th_arg_dtype(low[rn(&g->r, 5)])};
    if (!rec(g, "ltorch.to", 2, args, 0, NULL, NULL, &o)) return false;
    if (chance(&g->r, 20)) return true; /* leave the narrow value as an output */
    th_arg back[2] = {o, th_arg_dtype(th_dtype_is_fp8(dx) ? TH_F32 : dx)};
    return rec(g, "ltorch.to", 2, back, 0, NULL, NULL, NULL);
  }
  if (k < 8) {
    th_arg args[2] = {V(g, a), th_arg_dtype((th_dtype)rn(&g->r, TH_DTYPE_COUNT))};
    return rec(g, "ltorch.to", 2, args, 0, NULL, NULL, NULL);
  }
  if (k == 8) {
    int b = pick(g, C_ANY);
    th_arg args[2] = {V(g, a), V(g, b)};
    return rec(g, "ltorch.type_as", 2, args, 0, NULL, NULL, NULL);
  }
  static const char *const m[] = {"ltorch.float", "ltorch.half", "ltorch.bfloat16", "ltorch.double",
                                  "ltorch.long",  "ltorch.int",  "ltorch.bool"};
  th_arg args[1] = {V(g, a)};
  return rec(g, m[rn(&g->r, 7)], 1, args, 0, NULL, NULL, NULL);
}

/* Prims recorded directly: layout prims no torch-level op here reaches (flip, strided slice_prim,
 * explicit broadcast_in_dim), creation (full, iota) and a strict elementwise prim with a constant. */
static bool op_prims(gen_t *g) {
  int a = pick(g, C_ANY);
  if (a < 0) return false;
  th_value *x = g->v[a];
  int nd = vnd(x);
  const int64_t *s = vsh(x);
  th_arg it[TH_MAX_DIMS], jt[TH_MAX_DIMS], kt[TH_MAX_DIMS];
  int k = rn(&g->r, 6);
  if (k == 0) { /* flip some dims */
    int n = 0;
    for (int d = 0; d < nd; d++)
      if (chance(&g->r, 50)) it[n++] = th_arg_int(d);
    th_arg args[2] = {V(g, a), th_arg_tuple(n, it)};
    return rec(g, "prims.flip", 2, args, 0, NULL, NULL, NULL);
  }
  if (k == 1) { /* slice_prim with steps */
    for (int d = 0; d < nd; d++) {
      int64_t st = rn(&g->r, (int)s[d] + 1), en = st + rn(&g->r, (int)(s[d] - st) + 1);
      it[d] = th_arg_int(st);
      jt[d] = th_arg_int(en);
      kt[d] = th_arg_int(1 + rn(&g->r, 3));
    }
    th_arg args[4] = {V(g, a), th_arg_tuple(nd, it), th_arg_tuple(nd, jt), th_arg_tuple(nd, kt)};
    return rec(g, "prims.slice_prim", chance(&g->r, 70) ? 4 : 3, args, 0, NULL, NULL, NULL);
  }
  if (k == 2) { /* broadcast_in_dim: one new leading dim, size-1 dims expanded */
    if (nd >= TH_MAX_DIMS) return false;
    int64_t lead = 1 + rn(&g->r, 3), m = lead;
    it[0] = th_arg_int(lead);
    for (int d = 0; d < nd; d++) {
      int64_t z = s[d] == 1 && chance(&g->r, 50) ? 1 + rn(&g->r, 4) : s[d];
      it[d + 1] = th_arg_int(z);
      jt[d] = th_arg_int(d + 1);
      m *= z;
    }
    if (m > NUMEL_MAX) return false;
    th_arg args[3] = {V(g, a), th_arg_tuple(nd + 1, it), th_arg_tuple(nd, jt)};
    return rec(g, "prims.broadcast_in_dim", 3, args, 0, NULL, NULL, NULL);
  }
  if (k == 3) { /* a constant tensor of x's shape and dtype, then x + it (torch-level, so dtypes agree) */
    for (int d = 0; d < nd; d++) it[d] = th_arg_int(s[d]);
    th_dtype dx = vdt(x);
    const char *kn[2] = {"device", "dtype"};
    th_arg kv[2] = {th_arg_device((th_device){TH_CPU, 0}), th_arg_dtype(dx)};
    th_arg args[2] = {th_arg_tuple(nd, it), is_float(dx)    ? th_arg_float(0.375)
                                            : dx == TH_BOOL ? th_arg_bool(true)
                                                            : th_arg_int(3)};
    th_arg c;
    if (!rec(g, "prims.full", 2, args, 2, kn, kv, &c)) return false;
    th_arg add[2] = {V(g, a), c};
    return rec(g, dx == TH_BOOL ? "ltorch.logical_xor" : "ltorch.sub", 2, add, 0, NULL, NULL, NULL);
  }
  if (k == 4) { /* iota along the last dim, broadcast to x's shape, combined with x */
    if (nd == 0) return false;
    const char *kn[4] = {"start", "step", "device", "dtype"};
    th_arg kv[4] = {th_arg_int(rn(&g->r, 5) - 2), th_arg_int(1 + rn(&g->r, 2)), th_arg_device((th_device){TH_CPU, 0}),
                    th_arg_dtype(TH_I64)};
    th_arg args[1] = {th_arg_int(s[nd - 1])};
    th_arg io;
    if (!rec(g, "prims.iota", 1, args, 4, kn, kv, &io)) return false;
    th_arg mul[2] = {V(g, a), io};
    return rec(g, "ltorch.mul", 2, mul, 0, NULL, NULL, NULL);
  }
  /* a strict elementwise prim with a constant of x's category */
  static const char *const ops[] = {"prims.add", "prims.mul", "prims.sub", "prims.maximum", "prims.lt"};
  th_dtype dx = vdt(x);
  if (dx == TH_BOOL || dx == TH_F16 || dx == TH_BF16) return false;
  th_arg args[2] = {V(g, a), is_float(dx) ? th_arg_float(-0.75) : th_arg_int(2)};
  return rec(g, ops[rn(&g->r, 5)], 2, args, 0, NULL, NULL, NULL);
}

/* x @ x^T (or x^T @ x) for 2-D floats: blas claims it in the fused run, the region boundaries around it. */
static bool op_matmul(gen_t *g) {
  int a = pick(g, C_FLOAT);
  if (a < 0 || vnd(g->v[a]) != 2) return false;
  th_arg t;
  th_arg ta[1] = {V(g, a)};
  if (!rec(g, "ltorch.t", 1, ta, 0, NULL, NULL, &t)) return false;
  th_arg args[2] = {V(g, a), t};
  if (chance(&g->r, 50)) args[0] = t, args[1] = V(g, a);
  return rec(g, "ltorch.matmul", 2, args, 0, NULL, NULL, NULL);
}

/* Records case cid (its inputs and ops) into the group's trace and adds its outputs to the return. */
static void gen_case(group_t *G, long cid) {
  gen_t *g = calloc(1, sizeof *g);
  assert_non_null(g);
  g->G = G;
  g->cid = cid;
  /* independent streams: the state is a hash of (seed, case) (splitmix64 states that differ by a
   * multiple of its increment would give shifted copies of one sequence) */
  rng_t h = {cfg.seed};
  g->r.s = rnext(&h) ^ (uint64_t)cid;
  g->r.s = rnext(&g->r);
  case_inputs(g);
  int nops = 2 + rn(&g->r, 7), done = 0;
  for (int tries = 0; done < nops && tries < 6 * nops; tries++) {
    int k = rn(&g->r, 100);
    bool ok = k < 26   ? op_unary(g)
              : k < 52 ? op_binary(g)
              : k < 59 ? op_ternary(g)
              : k < 72 ? op_reduction(g)
              : k < 84 ? op_layout(g)
              : k < 92 ? op_convert(g)
              : k < 98 ? op_prims(g)
                       : op_matmul(g);
    done += ok;
  }
  for (int i = 0; i < g->nv && G->nouts < 1024; i++) {
    if (g->input[i] || (g->uses[i] && !chance(&g->r, 15))) continue;
    G->outs[G->nouts] = th_arg_value(g->v[i]);
    G->out_case[G->nouts++] = (int)cid;
  }
  free(g);
}

/* ---- the reference: eager values of every prim and a bound on |fused - eager| ------------------------ */

typedef struct {
  const char *name; /* owned by the eager program's trace */
  th_dtype dt;
  int nd;
  int64_t shape[TH_MAX_DIMS];
  int64_t n;
  double *x;     /* eager values, row-major */
  double *e;     /* bound per element: 0 = bit-exact, INFINITY = unchecked */
  int64_t *orig; /* per element, the value element it is a copy of (data movement; NULL: itself) */
  th_tensor *t;
} ventry;

typedef struct {
  ventry *v;
  int n, cap;
  int *slot; /* open addressing over v */
  int nslot;
} vtable;

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

static ventry *vt_find(vtable *vt, const char *name) {
  if (!name || !vt->nslot) return NULL;
  for (uint32_t h = hash_name(name) & (uint32_t)(vt->nslot - 1);; h = (h + 1) & (uint32_t)(vt->nslot - 1)) {
    if (vt->slot[h] < 0) return NULL;
    if (!strcmp(vt->v[vt->slot[h]].name, name)) return &vt->v[vt->slot[h]];
  }
}

static void vt_add(vtable *vt, const char *name, th_tensor *t) {
  if (vt_find(vt, name)) return;
  if (vt->n == vt->cap) {
    vt->cap = vt->cap ? 2 * vt->cap : 256;
    vt->v = realloc(vt->v, sizeof(ventry) * (size_t)vt->cap);
    assert_non_null(vt->v);
  }
  if (2 * (vt->n + 1) > vt->nslot) {
    int ns = vt->nslot ? 2 * vt->nslot : 1024;
    free(vt->slot);
    vt->slot = malloc(sizeof(int) * (size_t)ns);
    assert_non_null(vt->slot);
    for (int i = 0; i < ns; i++) vt->slot[i] = -1;
    vt->nslot = ns;
    for (int i = 0; i < vt->n; i++) {
      uint32_t h = hash_name(vt->v[i].name) & (uint32_t)(ns - 1);
      while (vt->slot[h] >= 0) h = (h + 1) & (uint32_t)(ns - 1);
      vt->slot[h] = i;
    }
  }
  ventry *e = &vt->v[vt->n];
  memset(e, 0, sizeof *e);
  e->name = name;
  e->t = t;
  th_tensor_retain(t);
  e->dt = th_tensor_dtype(t);
  e->nd = th_tensor_ndim(t);
  memcpy(e->shape, th_tensor_shape(t), sizeof(int64_t) * (size_t)e->nd);
  e->n = th_tensor_numel(t);
  e->x = malloc(sizeof(double) * (size_t)(e->n ? e->n : 1));
  e->e = calloc((size_t)(e->n ? e->n : 1), sizeof(double));
  assert_true(e->x && e->e);
  for (int64_t i = 0; i < e->n; i++) e->x[i] = th_tensor_get_f64(t, i);
  uint32_t h = hash_name(name) & (uint32_t)(vt->nslot - 1);
  while (vt->slot[h] >= 0) h = (h + 1) & (uint32_t)(vt->nslot - 1);
  vt->slot[h] = vt->n++;
}

/* Copies carry their source's fused value: elements with one origin are equal in the fused run too,
 * which the bounds use (x - x is 0, x == x is true, however inexact x is). */
static int64_t origin(const vtable *vt, const ventry *v, int64_t j) {
  return v->orig ? v->orig[j] : ((int64_t)(v - vt->v) << 40) | j;
}

static void set_origin(ventry *o, int64_t k, int64_t org) {
  if (!o->orig) {
    o->orig = malloc(sizeof(int64_t) * (size_t)(o->n ? o->n : 1));
    assert_non_null(o->orig);
    for (int64_t i = 0; i < o->n; i++) o->orig[i] = -1 - i; /* unique, never an origin() */
  }
  o->orig[k] = org;
}

static void vt_free(vtable *vt) {
  for (int i = 0; i < vt->n; i++) {
    free(vt->v[i].orig);
    free(vt->v[i].x);
    free(vt->v[i].e);
    th_tensor_release(vt->v[i].t);
  }
  free(vt->v);
  free(vt->slot);
  memset(vt, 0, sizeof *vt);
}

static int flatten_values(th_arg a, th_value **out, int max) {
  if (a.kind == TH_ARG_VALUE) {
    if (max > 0) out[0] = a.u.value;
    return 1;
  }
  int n = 0;
  if (a.kind == TH_ARG_TUPLE || a.kind == TH_ARG_LIST)
    for (int i = 0; i < a.u.seq.n; i++) n += flatten_values(a.u.seq.items[i], out + n, max - n);
  return n;
}

static int arg_ints(th_arg a, int64_t *out, int max) {
  if (a.kind == TH_ARG_INT) {
    out[0] = a.u.i;
    return 1;
  }
  if (a.kind != TH_ARG_TUPLE && a.kind != TH_ARG_LIST) return -1;
  int n = 0;
  for (int i = 0; i < a.u.seq.n && n < max; i++) {
    if (a.u.seq.items[i].kind != TH_ARG_INT) return -1;
    out[n++] = a.u.seq.items[i].u.i;
  }
  return n;
}

static double arg_number(th_arg a, bool *ok) {
  *ok = true;
  if (a.kind == TH_ARG_INT) return (double)a.u.i;
  if (a.kind == TH_ARG_FLOAT) return a.u.f;
  if (a.kind == TH_ARG_BOOL) return a.u.b;
  *ok = false;
  return 0;
}

typedef struct {
  long unknown_ops;
  char unknown_names[256];
} prop_stats;

static void set_all(ventry *o, double e) {
  for (int64_t i = 0; i < o->n; i++) o->e[i] = e;
}

/* Elementwise rules (see the file comment). */
enum {
  R_LIP1, /* neg abs: |f(x') - f(x)| <= |x' - x|, exact */
  R_STEP, /* monotone step functions: floor ceil round trunc sign signbit */
  R_ISF,  /* isfinite */
  R_NOTB, /* bitwise_not */
  R_CRU,  /* correctly rounded unary: sqrt reciprocal */
  R_TRU,  /* libm unary: a few ulps */
  R_CRB,  /* correctly rounded binary: add sub mul div */
  R_TRB,  /* libm binary: pow atan2 */
  R_FMOD, /* fmod (exact), remainder (one rounding) */
  R_REM,
  R_MINMAX, /* maximum minimum */
  R_CMP,    /* comparisons */
  R_LOGIC,  /* bitwise and/or/xor */
  R_WHERE,
};

enum {
  F_EXP,
  F_EXP2,
  F_EXPM1,
  F_LOG,
  F_LOG2,
  F_LOG10,
  F_LOG1P,
  F_SIN,
  F_COS,
  F_TAN,
  F_TANH,
  F_SINH,
  F_COSH,
  F_ASIN,
  F_ACOS,
  F_ATAN,
  F_ASINH,
  F_ACOSH,
  F_ATANH,
  F_ERF,
  F_ERFC,
  F_RSQRT,
  F_LGAMMA,
  F_SQRT,
  F_RECIP,
  F_FLOOR,
  F_CEIL,
  F_ROUND,
  F_TRUNC,
  F_SIGN,
  F_SIGNBIT,
  F_NONE,
  F_ADD,
  F_SUB,
  F_MUL,
  F_DIV,
  F_POW,
  F_ATAN2,
  F_CMP_EQ,
  F_CMP_NE,
  F_CMP_LT,
  F_CMP_LE,
  F_CMP_GT,
  F_CMP_GE
};

static const struct {
  const char *name;
  int rule, fn;
} ERULES[] = {
  {"neg", R_LIP1, F_NONE},         {"abs", R_LIP1, F_NONE},
  {"floor", R_STEP, F_FLOOR},      {"ceil", R_STEP, F_CEIL},
  {"round", R_STEP, F_ROUND},      {"trunc", R_STEP, F_TRUNC},
  {"sign", R_STEP, F_SIGN},        {"signbit", R_STEP, F_SIGNBIT},
  {"isfinite", R_ISF, F_NONE},     {"bitwise_not", R_NOTB, F_NONE},
  {"sqrt", R_CRU, F_SQRT},         {"reciprocal", R_CRU, F_RECIP},
  {"exp", R_TRU, F_EXP},           {"exp2", R_TRU, F_EXP2},
  {"expm1", R_TRU, F_EXPM1},       {"log", R_TRU, F_LOG},
  {"log2", R_TRU, F_LOG2},         {"log10", R_TRU, F_LOG10},
  {"log1p", R_TRU, F_LOG1P},       {"sin", R_TRU, F_SIN},
  {"cos", R_TRU, F_COS},           {"tan", R_TRU, F_TAN},
  {"tanh", R_TRU, F_TANH},         {"sinh", R_TRU, F_SINH},
  {"cosh", R_TRU, F_COSH},         {"asin", R_TRU, F_ASIN},
  {"acos", R_TRU, F_ACOS},         {"atan", R_TRU, F_ATAN},
  {"asinh", R_TRU, F_ASINH},       {"acosh", R_TRU, F_ACOSH},
  {"atanh", R_TRU, F_ATANH},       {"erf", R_TRU, F_ERF},
  {"erfc", R_TRU, F_ERFC},         {"rsqrt", R_TRU, F_RSQRT},
  {"lgamma", R_TRU, F_LGAMMA},     {"add", R_CRB, F_ADD},
  {"sub", R_CRB, F_SUB},           {"mul", R_CRB, F_MUL},
  {"div", R_CRB, F_DIV},           {"pow", R_TRB, F_POW},
  {"atan2", R_TRB, F_ATAN2},       {"fmod", R_FMOD, F_NONE},
  {"remainder", R_REM, F_NONE},    {"maximum", R_MINMAX, F_NONE},
  {"minimum", R_MINMAX, F_NONE},   {"eq", R_CMP, F_CMP_EQ},
  {"ne", R_CMP, F_CMP_NE},         {"lt", R_CMP, F_CMP_LT},
  {"le", R_CMP, F_CMP_LE},         {"gt", R_CMP, F_CMP_GT},
  {"ge", R_CMP, F_CMP_GE},         {"bitwise_and", R_LOGIC, F_NONE},
  {"bitwise_or", R_LOGIC, F_NONE}, {"bitwise_xor", R_LOGIC, F_NONE},
  {"where", R_WHERE, F_NONE},
};

static long double fu(int fn, long double x) {
  switch (fn) {
    case F_EXP: return expl(x);
    case F_EXP2: return exp2l(x);
    case F_EXPM1: return expm1l(x);
    case F_LOG: return logl(x);
    case F_LOG2: return log2l(x);
    case F_LOG10: return log10l(x);
    case F_LOG1P: return log1pl(x);
    case F_SIN: return sinl(x);
    case F_COS: return cosl(x);
    case F_TAN: return tanl(x);
    case F_TANH: return tanhl(x);
    case F_SINH: return sinhl(x);
    case F_COSH: return coshl(x);
    case F_ASIN: return asinl(x);
    case F_ACOS: return acosl(x);
    case F_ATAN: return atanl(x);
    case F_ASINH: return asinhl(x);
    case F_ACOSH: return acoshl(x);
    case F_ATANH: return atanhl(x);
    case F_ERF: return erfl(x);
    case F_ERFC: return erfcl(x);
    case F_RSQRT: return 1.0L / sqrtl(x);
    case F_SQRT: return sqrtl(x);
    case F_RECIP: return 1.0L / x;
    case F_FLOOR: return floorl(x);
    case F_CEIL: return ceill(x);
    case F_ROUND: return nearbyintl(x);
    case F_TRUNC: return truncl(x);
    case F_SIGN: return (x > 0) - (x < 0);
    case F_SIGNBIT: return signbit(x) ? 1 : 0;
    default: return NAN;
  }
}

static long double fb(int fn, long double a, long double b, bool intdiv) {
  switch (fn) {
    case F_ADD: return a + b;
    case F_SUB: return a - b;
    case F_MUL: return a * b;
    case F_DIV: return intdiv ? truncl(a / b) : a / b;
    case F_POW: return powl(a, b);
    default: return NAN;
  }
}

/* max |f(y) - f(x)| over y in [x - e, x + e] for f monotone there (end points), NaN-safe. */
static double mono_bound(int fn, double x, double e) {
  long double f0 = fu(fn, x), f1 = fu(fn, (long double)x - e), f2 = fu(fn, (long double)x + e);
  if (isnan(f0) || isnan(f1) || isnan(f2) || isinf(f1) || isinf(f2)) return INFINITY;
  long double d = fabsl(f1 - f0) > fabsl(f2 - f0) ? fabsl(f1 - f0) : fabsl(f2 - f0);
  return (double)(d * (1 + 1e-9L));
}

typedef struct {
  const ventry *v; /* a tensor of the output's shape, or a 0-d tensor (read at element 0) */
  double c;        /* else a constant */
} opnd;

static inline double OX(const opnd *p, int64_t i) { return p->v ? p->v->x[p->v->nd ? i : 0] : p->c; }
static inline double OE(const opnd *p, int64_t i) { return p->v ? p->v->e[p->v->nd ? i : 0] : 0; }

static double elementwise_bound(int rule, int fn, th_dtype odt, const opnd *o, int nop, double r, int64_t i,
                                bool same) {
  bool obool = odt == TH_BOOL, oint = !obool && !th_dtype_is_float(odt);
  double ex[3], x[3], esum = 0;
  for (int k = 0; k < nop; k++) {
    x[k] = OX(&o[k], i);
    ex[k] = OE(&o[k], i);
    esum += ex[k];
    if (ex[k] > 0 && (!isfinite(x[k]) || !isfinite(ex[k]))) return obool ? 1 : INFINITY;
  }
  /* both operands (where: both values) are one fused value: finite stays finite, equal stays equal */
  if (same && esum > 0) {
    int a = rule == R_WHERE ? 1 : 0;
    if (rule == R_CMP || (rule == R_CRB && (fn == F_SUB || (fn == F_DIV && fabs(x[a]) > ex[a])))) return 0;
    if (rule == R_MINMAX || rule == R_WHERE) return ex[a];
    if (rule == R_LOGIC) return r == x[a] ? ex[a] : 0; /* and, or: x; xor: 0 */
  }
  double E;
  switch (rule) {
    case R_LIP1: E = ex[0]; break;
    case R_STEP:
      /* a NaN's sign is unspecified (IEEE 754: operations need not keep it), so signbit(NaN) may differ */
      if (fn == F_SIGNBIT && isnan(x[0]))
        E = 1;
      else
        E = ex[0] == 0 ? 0 : mono_bound(fn, x[0], ex[0]);
      break;
    case R_ISF: E = ex[0] == 0 ? 0 : (fabs(x[0]) + ex[0] < maxfin(o[0].v ? o[0].v->dt : TH_F64) ? 0 : 1); break;
    case R_NOTB: E = ex[0] == 0 ? 0 : obool ? 1 : INFINITY; break;
    case R_CRU:
      if (ex[0] == 0)
        E = 0;
      else if (fn == F_RECIP && x[0] - ex[0] <= 0 && x[0] + ex[0] >= 0)
        E = INFINITY;
      else {
        double D = mono_bound(fn, x[0], ex[0]);
        E = D + ulp(odt, fabs(r) + D);
      }
      break;
    case R_TRU: {
      if (isnan(r)) return ex[0] == 0 ? 0 : INFINITY; /* domain errors are deterministic */
      if (!isfinite(r)) { /* certain for an infinite argument or far beyond the largest finite value */
        long double fx = fu(fn, x[0]);
        return ex[0] == 0 && (isinf(x[0]) || fabsl(fx) > 2.0L * maxfin(odt)) ? 0 : INFINITY;
      }
      double D = 0;
      if (ex[0] > 0) {
        if (fn == F_SIN || fn == F_COS)
          D = ex[0] < 2 ? ex[0] : 2;
        else if (fn == F_TAN)
          D = fabs(x[0]) + ex[0] < 1.5 ? mono_bound(fn, x[0], ex[0]) : INFINITY;
        else if (fn == F_COSH) {
          D = mono_bound(fn, x[0], ex[0]);
          if (x[0] - ex[0] < 0 && x[0] + ex[0] > 0) D = fmax(D, fabs((double)(coshl(x[0]) - 1)));
        } else if (fn == F_LGAMMA)
          D = INFINITY;
        else if (fn == F_RSQRT && x[0] - ex[0] <= 0)
          D = INFINITY;
        else
          D = mono_bound(fn, x[0], ex[0]);
      }
      /* each side within 2-3 ulps of the true value (glibc; the fuser's own float math library); lgamma
       * loses relative accuracy near its zeros */
      E = D + 6 * ulp(odt, fabs(r) + D) + (fn == F_LGAMMA ? 8 * ulp(odt, 1) : 0);
      break;
    }
    case R_CRB:
    case R_TRB: {
      bool intdiv = fn == F_DIV && (oint || obool);
      if (rule == R_CRB && !oint && !obool && (isnan(x[0]) || isnan(x[1]))) return 0; /* NaN in, NaN out */
      if (esum == 0) {
        if (rule == R_CRB || oint || obool) return 0;
        if (isnan(r)) return 0;
        if (!isfinite(r)) return INFINITY;
        return 6 * ulp(odt, r);
      }
      double D;
      if (fn == F_ATAN2) {
        double h = hypot(x[0], x[1]), s = ex[0] + ex[1];
        D = h > 2 * s ? s / (h - s) : 2 * M_PI;
      } else if (fn == F_DIV && x[1] - ex[1] <= 0 && x[1] + ex[1] >= 0) {
        return obool ? 1 : INFINITY;
      } else if (fn == F_POW && (x[0] - ex[0] <= 0 || oint)) {
        return INFINITY;
      } else {
        long double g0 = fb(fn, x[0], x[1], intdiv);
        D = 0;
        for (int c = 0; c < 4; c++) {
          long double a = (long double)x[0] + ((c & 1) ? ex[0] : -ex[0]);
          long double b = (long double)x[1] + ((c & 2) ? ex[1] : -ex[1]);
          long double g = fb(fn, a, b, intdiv);
          double d = (double)fabsl(g - g0);
          if (isnan(d)) return INFINITY;
          if (d > D) D = d;
        }
        D *= 1 + 1e-9;
      }
      E = D + (rule == R_TRB ? 6 : 1) * ulp(odt, fabs(r) + D);
      if (oint && fabs(r) + E >= maxfin(odt)) E = INFINITY; /* may wrap */
      break;
    }
    case R_FMOD:
    case R_REM: /* x - q b with q = trunc (fmod) or floor (remainder) of x / b: continuous while q stays */
      if (esum == 0)
        E = rule == R_REM && isfinite(r) ? ulp(odt, r) : 0;
      else if (ex[1] > 0 || x[1] == 0 || oint || obool)
        E = INFINITY;
      else {
        long double q1 = ((long double)x[0] - ex[0]) / x[1], q2 = ((long double)x[0] + ex[0]) / x[1];
        bool same_q = rule == R_FMOD ? truncl(q1) == truncl(q2) : floorl(q1) == floorl(q2);
        E = same_q ? ex[0] + (rule == R_REM ? 2 * ulp(odt, fabs(r) + ex[0]) : 0) : INFINITY;
      }
      break;
    case R_MINMAX: E = esum == 0 ? 0 : (isnan(x[0]) || isnan(x[1])) ? INFINITY : fmax(ex[0], ex[1]); break;
    case R_CMP: E = esum == 0 ? 0 : (isnan(x[0]) || isnan(x[1]) || fabs(x[0] - x[1]) <= esum) ? 1 : 0; break;
    case R_LOGIC: E = esum == 0 ? 0 : obool ? 1 : INFINITY; break;
    case R_WHERE:
      if (ex[0] == 0)
        E = x[0] != 0 ? ex[1] : ex[2];
      else
        E = fmax(ex[1], ex[2]) + fabs(x[1] - x[2]);
      break;
    default: E = INFINITY; break;
  }
  if (isnan(E)) E = INFINITY;
  if (E > 0 && !obool && !oint && fabs(r) + E > maxfin(odt)) E = INFINITY; /* may overflow */
  return E;
}

/* Flat index of the input element behind each output element of a data-movement prim; -1 = none. */
typedef int64_t (*gather_fn)(const int64_t *oidx, const void *ctx);

static void gather(const vtable *vt, ventry *o, const ventry *in, gather_fn f, const void *ctx) {
  if (o->n == 0) return;
  int64_t idx[TH_MAX_DIMS] = {0}, k = 0;
  do {
    int64_t j = f(idx, ctx);
    bool in_range = j >= 0 && j < in->n;
    o->e[k] = in_range ? in->e[j] : INFINITY;
    if (in_range) set_origin(o, k, origin(vt, in, j));
    k++;
  } while (next_index(o->nd, o->shape, idx));
}

typedef struct {
  const ventry *in;
  int64_t p[TH_MAX_DIMS], q[TH_MAX_DIMS], r[TH_MAX_DIMS];
  int np;
} gctx;

static int64_t in_flat(const ventry *in, const int64_t *iidx) {
  int64_t f = 0;
  for (int d = 0; d < in->nd; d++) f = f * in->shape[d] + iidx[d];
  return f;
}

static int64_t g_bcast(const int64_t *oidx, const void *c) { /* p = broadcast_dimensions */
  const gctx *g = c;
  int64_t ii[TH_MAX_DIMS];
  for (int d = 0; d < g->in->nd; d++) ii[d] = g->in->shape[d] == 1 ? 0 : oidx[g->p[d]];
  return in_flat(g->in, ii);
}
static int64_t g_transpose(const int64_t *oidx, const void *c) { /* p = permutation */
  const gctx *g = c;
  int64_t ii[TH_MAX_DIMS];
  for (int d = 0; d < g->in->nd; d++) ii[g->p[d]] = oidx[d];
  return in_flat(g->in, ii);
}
static int64_t g_slice(const int64_t *oidx, const void *c) { /* p = start, r = strides */
  const gctx *g = c;
  int64_t ii[TH_MAX_DIMS];
  for (int d = 0; d < g->in->nd; d++) ii[d] = g->p[d] + oidx[d] * g->r[d];
  return in_flat(g->in, ii);
}
static int64_t g_flip(const int64_t *oidx, const void *c) { /* q[d] = 1 if flipped */
  const gctx *g = c;
  int64_t ii[TH_MAX_DIMS];
  for (int d = 0; d < g->in->nd; d++) ii[d] = g->q[d] ? g->in->shape[d] - 1 - oidx[d] : oidx[d];
  return in_flat(g->in, ii);
}

/* Reductions over dims `red` of `in` (the prims reduce without keepdim). */
static void reduction_bound(const vtable *vt, const char *op, ventry **outs, int nouts, const ventry *in,
                            const bool *red, double correction) {
  int64_t nout = outs[0]->n;
  int64_t *map = malloc(sizeof(int64_t) * (size_t)(in->n ? in->n : 1));
  long double *s1 = calloc((size_t)(nout ? nout : 1), sizeof(long double)); /* sum x, or prod |x| */
  long double *sa = calloc((size_t)(nout ? nout : 1), sizeof(long double)); /* sum |x|, prod (|x| + e) */
  long double *se = calloc((size_t)(nout ? nout : 1), sizeof(long double)); /* sum e */
  long double *sq = calloc((size_t)(nout ? nout : 1), sizeof(long double)); /* var: sum (x - m)^2 */
  long double *sd = calloc((size_t)(nout ? nout : 1), sizeof(long double)); /* var: sum |x - m| */
  long double *md = calloc((size_t)(nout ? nout : 1), sizeof(long double)); /* var: max |x - m| */
  long double *sv = calloc((size_t)(nout ? nout : 1), sizeof(long double)); /* var propagation */
  double *me = calloc((size_t)(nout ? nout : 1), sizeof(double));           /* max e */
  bool *bad = calloc((size_t)(nout ? nout : 1), sizeof(bool));
  bool *nonfin = calloc((size_t)(nout ? nout : 1), sizeof(bool)); /* an exact NaN or infinity *in* */
  int64_t *cnt = calloc((size_t)(nout ? nout : 1), sizeof(int64_t));
  assert_true(map && s1 && sa && se && sq && sd && md && sv && me && bad && nonfin && cnt);
  bool prod = !strcmp(op, "prod");
  if (prod)
    for (int64_t j = 0; j < nout; j++) s1[j] = sa[j] = 1;
  if (in->n) {
    int64_t idx[TH_MAX_DIMS] = {0}, k = 0;
    do {
      int64_t f = 0;
      for (int d = 0; d < in->nd; d++)
        if (!red[d]) f = f * in->shape[d] + idx[d];
      map[k++] = f;
    } while (next_index(in->nd, in->shape, idx));
  }
  for (int64_t k = 0; k < in->n; k++) {
    int64_t j = map[k];
    double x = in->x[k], e = in->e[k];
    cnt[j]++;
    if (e > 0 && (!isfinite(x) || !isfinite(e))) bad[j] = true;
    if (!isfinite(x)) nonfin[j] = true;
    if (prod) {
      s1[j] *= fabsl((long double)x);
      sa[j] *= fabsl((long double)x) + e;
    } else {
      s1[j] += x;
      sa[j] += fabsl((long double)x);
    }
    se[j] += e;
    if (e > me[j]) me[j] = e;
  }
  bool var = !strcmp(op, "var") || !strcmp(op, "var_mean");
  if (var)
    for (int64_t k = 0; k < in->n; k++) {
      int64_t j = map[k];
      long double m = cnt[j] ? s1[j] / cnt[j] : 0, eb = cnt[j] ? se[j] / cnt[j] : 0, w = in->e[k] + eb;
      long double dev = fabsl(in->x[k] - m);
      sv[j] += 2 * dev * w + w * w;
      sq[j] += dev * dev;
      sd[j] += dev;
      if (dev > md[j]) md[j] = dev;
    }
  /* argmax/argmin of inexact values: still exact when every other element stays strictly below (above)
   * the extreme, whatever the errors (first the extreme, then the gaps) */
  bool *sep = calloc((size_t)(nout ? nout : 1), sizeof(bool));
  assert_non_null(sep);
  bool amx = !strcmp(op, "argmax"), amn = !strcmp(op, "argmin");
  if (amx || amn) {
    double *best = malloc(sizeof(double) * (size_t)(nout ? nout : 1));
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(nout ? nout : 1));
    assert_true(best && at);
    for (int64_t j = 0; j < nout; j++) at[j] = -1, sep[j] = true;
    for (int64_t k = 0; k < in->n; k++) {
      int64_t j = map[k];
      double x = amx ? in->x[k] : -in->x[k];
      if (isnan(x) || !isfinite(in->e[k]))
        sep[j] = false;
      else if (at[j] < 0 || x > best[j])
        best[j] = x, at[j] = k;
    }
    for (int64_t k = 0; k < in->n; k++) {
      int64_t j = map[k];
      if (k == at[j] || !sep[j]) continue;
      double x = amx ? in->x[k] : -in->x[k];
      if (!(x + in->e[k] < best[j] - in->e[at[j]])) sep[j] = false;
    }
    free(best);
    free(at);
  }
  th_dtype dt = in->dt;
  bool exact_type = !th_dtype_is_float(dt);
  bool copies = !strcmp(op, "sum") || !strcmp(op, "prod") || !strcmp(op, "amax") || !strcmp(op, "amin");
  if (copies) /* the reduction of one element is that element (for sum up to a zero's sign) */
    for (int64_t k = 0; k < in->n; k++)
      if (cnt[map[k]] == 1) set_origin(outs[0], map[k], origin(vt, in, k));
  for (int64_t j = 0; j < nout; j++) {
    /* Higham: a sum of n terms in any order, each addition rounded to dt (unit roundoff urel/2), is
     * within (n - 1) u sum|x| (first order) of the exact sum; eager adds in float64 and rounds once */
    long double n = (long double)cnt[j], gam = 1.01L * (n > 1 ? n - 1 : 0) * urel(dt) / 2;
    double E;
    if (bad[j])
      E = INFINITY;
    else if (nonfin[j] && strcmp(op, "argmax") && strcmp(op, "argmin")) {
      E = 0; /* exact NaNs and infinities give the same NaN or infinity in any order */
      if (nouts > 1) outs[1]->e[j] = 0;
      outs[0]->e[j] = 0;
      continue;
    } else if (!strcmp(op, "sum")) {
      E = (double)se[j];
      if (!exact_type && n > 2) E += (double)(gam * sa[j]) + utiny(dt) * (double)n;
      if (!exact_type && (n > 2 || E > 0)) E += ulp(dt, fabs(outs[0]->x[j]) + E);
    } else if (prod) {
      if (exact_type)
        E = se[j] == 0 ? 0 : INFINITY;
      else {
        E = se[j] == 0 ? 0 : (double)(sa[j] - s1[j]);
        if (n > 2 || se[j] > 0) E += (double)(gam * sa[j]) + utiny(dt) * (double)n;
      }
    } else if (!strcmp(op, "amax") || !strcmp(op, "amin")) {
      E = me[j];
    } else if (!strcmp(op, "argmax") || !strcmp(op, "argmin")) {
      E = se[j] == 0 || sep[j] ? 0 : INFINITY;
    } else if (var) {
      long double N = n - correction;
      if (N <= 0)
        E = se[j] == 0 ? 0 : INFINITY;
      else {
        /* a two-pass (or Welford-class) var with every operation rounded to dt (unit roundoff u): the
         * mean is off by d <= (n + 1) u sum|x| / n; the deviations by d + u (|x - m| + d), whose first
         * order part cancels in the sum since sum (x - m) = 0, leaving 2 u (S + d sum|x - m|) and
         * n (d + u (max|x - m| + d))^2; the sum of squares adds (n + 1) u S (S = sum (x - m)^2) */
        long double u = urel(dt) / 2, dm = (n + 1) * u * sa[j] / n, eta = dm + u * (md[j] + dm);
        long double R = 1.01L * ((n + 3) * u * sq[j] + 2 * u * dm * sd[j] + n * eta * eta);
        E = (double)((sv[j] + R) / N) + ulp(dt, fabs(outs[0]->x[j]));
      }
      if (n == 1 && se[j] == 0) E = 0; /* one element: var is 0/N in any order */
    } else {
      E = INFINITY;
    }
    if (isnan(E)) E = INFINITY;
    outs[0]->e[j] = E;
    if (nouts > 1 && var) { /* var_mean: the mean */
      double M = (double)(se[j] / (n ? n : 1));
      if (!exact_type && (n > 2 || M > 0)) M += (double)(gam * sa[j] / (n ? n : 1)) + 2 * ulp(dt, outs[1]->x[j]);
      if (n <= 2 && se[j] == 0) M = 0; /* a sum of <= 2 terms is exactly rounded, then one division */
      outs[1]->e[j] = isnan(M) ? INFINITY : M + (M > 0 ? ulp(dt, outs[1]->x[j] + M) : 0);
    }
  }
  free(map);
  free(s1);
  free(sa);
  free(se);
  free(sq);
  free(sd);
  free(md);
  free(sv);
  free(me);
  free(bad);
  free(sep);
  free(nonfin);
  free(cnt);
}

/* Sets the bound of every output of prim bsym b from its arguments' bounds. */
static void propagate(vtable *vt, const th_bsym *b, prop_stats *ps) {
  const char *q = th_bsym_qualname(b);
  th_value *ov[16];
  int no = flatten_values(th_bsym_output(b), ov, 16);
  ventry *o[16];
  int nvalid = 0;
  for (int k = 0; k < no && k < 16; k++) {
    o[k] = th_value_is_tensor(ov[k]) ? vt_find(vt, th_value_name(ov[k])) : NULL;
    nvalid += o[k] != NULL;
  }
  if (!nvalid) return;
  const char *op = strncmp(q, "prims.", 6) ? "" : q + 6;
  int na = th_bsym_num_args(b);
  th_arg a0 = na > 0 ? th_bsym_arg(b, 0) : th_arg_none();
  const ventry *in0 = a0.kind == TH_ARG_VALUE ? vt_find(vt, th_value_name(a0.u.value)) : NULL;
  /* data movement and conversions */
  if (!strcmp(op, "reshape") || !strcmp(op, "squeeze") || !strcmp(op, "clone") || !strcmp(op, "shallow_copy") ||
      !strcmp(op, "stride_order") || !strcmp(op, "device_put")) {
    if (in0 && o[0] && in0->n == o[0]->n) {
      memcpy(o[0]->e, in0->e, sizeof(double) * (size_t)in0->n);
      for (int64_t i = 0; i < in0->n; i++) set_origin(o[0], i, origin(vt, in0, i));
      return;
    }
  } else if (!strcmp(op, "convert_element_type")) {
    if (in0 && o[0] && in0->n == o[0]->n) {
      th_dtype d = o[0]->dt;
      for (int64_t i = 0; i < in0->n; i++) {
        double x = in0->x[i], e = in0->e[i], E;
        if (e == 0)
          E = 0;
        else if (!isfinite(x) || !isfinite(e))
          E = d == TH_BOOL ? 1 : INFINITY;
        else if (d == TH_BOOL)
          E = fabs(x) <= e ? 1 : 0;
        else if (!th_dtype_is_float(d))
          E = fabs(x) + e + 1 >= maxfin(d) ? INFINITY : e + 1;
        else
          E = fabs(x) + e >= maxfin(d) ? INFINITY : e + ulp(d, fabs(x) + e);
        o[0]->e[i] = E;
      }
      return;
    }
  } else if (!strcmp(op, "broadcast_in_dim") || !strcmp(op, "transpose") || !strcmp(op, "slice_prim") ||
             !strcmp(op, "flip")) {
    if (in0 && o[0]) {
      gctx c;
      memset(&c, 0, sizeof c);
      c.in = in0;
      int64_t tmp[TH_MAX_DIMS];
      bool ok = true;
      if (!strcmp(op, "broadcast_in_dim")) {
        ok = arg_ints(th_bsym_arg(b, 2), c.p, TH_MAX_DIMS) == in0->nd;
        if (ok) gather(vt, o[0], in0, g_bcast, &c);
      } else if (!strcmp(op, "transpose")) {
        ok = arg_ints(th_bsym_arg(b, 1), c.p, TH_MAX_DIMS) == in0->nd;
        if (ok) gather(vt, o[0], in0, g_transpose, &c);
      } else if (!strcmp(op, "slice_prim")) {
        ok = arg_ints(th_bsym_arg(b, 1), c.p, TH_MAX_DIMS) == in0->nd;
        for (int d = 0; d < in0->nd; d++) c.r[d] = 1;
        if (ok && na > 3 && th_bsym_arg(b, 3).kind != TH_ARG_NONE)
          ok = arg_ints(th_bsym_arg(b, 3), c.r, TH_MAX_DIMS) == in0->nd;
        if (ok) gather(vt, o[0], in0, g_slice, &c);
      } else {
        int n = arg_ints(th_bsym_arg(b, 1), tmp, TH_MAX_DIMS);
        ok = n >= 0;
        for (int k = 0; k < n; k++) c.q[tmp[k] < 0 ? tmp[k] + in0->nd : tmp[k]] = 1;
        if (ok) gather(vt, o[0], in0, g_flip, &c);
      }
      if (ok) return;
    }
  } else if (!strcmp(op, "cat")) {
    th_value *parts[64];
    int np = flatten_values(a0, parts, 64);
    int64_t dim = 0;
    if (o[0] && np <= 64 && arg_ints(th_bsym_arg(b, 1), &dim, 1) == 1) {
      if (dim < 0) dim += o[0]->nd;
      bool ok = true;
      int64_t outer = 1, inner_o = 1;
      for (int d = 0; d < dim; d++) outer *= o[0]->shape[d];
      for (int d = (int)dim; d < o[0]->nd; d++) inner_o *= o[0]->shape[d];
      int64_t off = 0;
      for (int k = 0; k < np && ok; k++) {
        const ventry *p = vt_find(vt, th_value_name(parts[k]));
        if (!p) {
          ok = false;
          break;
        }
        int64_t inner_p = outer ? p->n / outer : 0;
        for (int64_t r = 0; r < outer; r++)
          for (int64_t c = 0; c < inner_p; c++) {
            o[0]->e[r * inner_o + off + c] = p->e[r * inner_p + c];
            set_origin(o[0], r * inner_o + off + c, origin(vt, p, r * inner_p + c));
          }
        off += inner_p;
      }
      if (ok) return;
    }
  } else if (!strcmp(op, "full") || !strcmp(op, "iota")) {
    set_all(o[0], 0);
    return;
  } else if (!strcmp(op, "sum") || !strcmp(op, "prod") || !strcmp(op, "amax") || !strcmp(op, "amin") ||
             !strcmp(op, "var") || !strcmp(op, "var_mean") || !strcmp(op, "argmax") || !strcmp(op, "argmin")) {
    if (in0 && o[0]) {
      bool red[TH_MAX_DIMS] = {false};
      int64_t dims[TH_MAX_DIMS];
      th_arg da = th_bsym_arg(b, 1);
      int n = da.kind == TH_ARG_NONE ? -2 : arg_ints(da, dims, TH_MAX_DIMS);
      if (n == -2)
        for (int d = 0; d < in0->nd; d++) red[d] = true;
      for (int k = 0; k < n; k++) red[dims[k] < 0 ? dims[k] + in0->nd : dims[k]] = true;
      double corr = 0;
      if (!strcmp(op, "var") || !strcmp(op, "var_mean")) {
        bool okc;
        corr = arg_number(th_bsym_arg(b, 2), &okc);
        if (!okc) n = -1;
      }
      if (n != -1) {
        reduction_bound(vt, op, o, no, in0, red, corr);
        return;
      }
    }
  } else if (!strcmp(op, "matmul")) {
    /* [B,] M x K @ [B,] K x N: another executor (blas) may sum the K products in any order, in float32
     * (float64 for f64): Higham's bound on top of what the inputs carry */
    th_arg a1 = na > 1 ? th_bsym_arg(b, 1) : th_arg_none();
    const ventry *in1 = a1.kind == TH_ARG_VALUE ? vt_find(vt, th_value_name(a1.u.value)) : NULL;
    int nd = in0 ? in0->nd : 0;
    if (in1 && o[0] && (nd == 2 || nd == 3) && in1->nd == nd && o[0]->nd == nd &&
        in0->shape[nd - 1] == in1->shape[nd - 2] && (nd == 2 || in0->shape[0] == in1->shape[0])) {
      int64_t B = nd == 3 ? in0->shape[0] : 1, M = in0->shape[nd - 2], K = in0->shape[nd - 1], N = in1->shape[nd - 1];
      double gam = 1.01 * (double)(K + 1) * (o[0]->dt == TH_F64 ? 0x1p-53 : 0x1p-24);
      for (int64_t bt = 0; bt < B; bt++)
        for (int64_t i = 0; i < M; i++)
          for (int64_t j = 0; j < N; j++) {
            double S = 0, P = 0;
            bool bad = false;
            for (int64_t kk = 0; kk < K; kk++) {
              int64_t ia = (bt * M + i) * K + kk, ib = (bt * K + kk) * N + j;
              double x = in0->x[ia], y = in1->x[ib], ex = in0->e[ia], ey = in1->e[ib];
              if (!isfinite(x) || !isfinite(y)) bad = true;
              S += fabs(x * y);
              P += fabs(x) * ey + ex * fabs(y) + ex * ey;
            }
            int64_t io = (bt * M + i) * N + j;
            double E = P + gam * S;
            E += ulp(o[0]->dt, fabs(o[0]->x[io]) + E);
            o[0]->e[io] = bad || isnan(E) ? INFINITY : E;
          }
      return;
    }
  } else {
    /* elementwise prims */
    for (size_t r = 0; r < sizeof ERULES / sizeof *ERULES; r++) {
      if (strcmp(op, ERULES[r].name)) continue;
      if (!o[0] || na > 3) break;
      opnd ops[3];
      bool ok = true;
      for (int k = 0; k < na && ok; k++) {
        th_arg a = th_bsym_arg(b, k);
        ops[k].v = NULL;
        ops[k].c = 0;
        if (a.kind == TH_ARG_VALUE) {
          ops[k].v = th_value_is_tensor(a.u.value) ? vt_find(vt, th_value_name(a.u.value)) : NULL;
          ok = ops[k].v && (ops[k].v->n == o[0]->n || ops[k].v->nd == 0);
        } else {
          ops[k].c = arg_number(a, &ok);
        }
      }
      if (!ok) break;
      int s0 = ERULES[r].rule == R_WHERE ? 1 : 0; /* the two operands that may be one value */
      bool maybe_same = na >= s0 + 2 && ops[s0].v && ops[s0 + 1].v && ops[s0].v->n == ops[s0 + 1].v->n;
      for (int64_t i = 0; i < o[0]->n; i++) {
        bool same = maybe_same && origin(vt, ops[s0].v, ops[s0].v->nd ? i : 0) ==
                                    origin(vt, ops[s0 + 1].v, ops[s0 + 1].v->nd ? i : 0);
        o[0]->e[i] = elementwise_bound(ERULES[r].rule, ERULES[r].fn, o[0]->dt, ops, na, o[0]->x[i], i, same);
        if (same && (ERULES[r].rule == R_MINMAX || ERULES[r].rule == R_WHERE)) /* the value itself */
          set_origin(o[0], i, origin(vt, ops[s0].v, ops[s0].v->nd ? i : 0));
        else if (ERULES[r].rule == R_WHERE && OE(&ops[0], i) == 0) { /* an exact choice: a copy */
          const opnd *pick_op = &ops[OX(&ops[0], i) != 0 ? 1 : 2];
          if (pick_op->v && pick_op->v->dt == o[0]->dt)
            set_origin(o[0], i, origin(vt, pick_op->v, pick_op->v->nd ? i : 0));
        }
      }
      return;
    }
  }
  /* anything else: not checked (and named in the statistics) */
  if (cfg.verbose > 1) {
    printf("  no bound rule for %s (%d args:", q, na);
    for (int k = 0; k < na; k++) {
      th_arg a = th_bsym_arg(b, k);
      const ventry *e = a.kind == TH_ARG_VALUE ? vt_find(vt, th_value_name(a.u.value)) : NULL;
      printf(" %s %s/%lld", th_arg_kind_name(&a), a.kind == TH_ARG_VALUE ? th_value_name(a.u.value) : "",
             e ? (long long)e->n : -1LL);
    }
    printf(") -> %lld\n", o[0] ? (long long)o[0]->n : -1LL);
  }
  ps->unknown_ops++;
  if (!strstr(ps->unknown_names, q) && strlen(ps->unknown_names) + strlen(q) + 2 < sizeof ps->unknown_names) {
    strcat(ps->unknown_names, " ");
    strcat(ps->unknown_names, q);
  }
  for (int k = 0; k < no; k++)
    if (o[k]) set_all(o[k], INFINITY);
}

/* ---- one differential run --------------------------------------------------------------------------- */

typedef struct {
  long cases, cases_fused, fused_bsyms, regions, groups;
  long exact, tolerant, unchecked, zero_sign, loose;
  long mismatching_cases;
  long unknown_ops;
  char unknown_names[256];
  double seconds_fused_compile;
} fuzz_stats;

typedef struct {
  int out; /* index into the return */
  int64_t elem;
  double eager, fused, bound;
  const char *why;
} mismatch;

static const char *const EX_EAGER[] = {"eager"};
static const char *const EX_FUSED[] = {"fuser", "blas", "eager"};

static th_program *compile_with(const th_trace *tr, const char *const *ex, int nex, const char *what, char *err,
                                size_t errn) {
  th_compile_options o;
  memset(&o, 0, sizeof o);
  o.executors = ex;
  o.nexecutors = nex;
  th_program *p = NULL;
  if (th_program_compile(tr, &o, &p) != TH_OK) {
    snprintf(err, errn, "%s: compile failed: %s", what, th_last_error());
    return NULL;
  }
  return p;
}

static bool bits_equal(const th_tensor *a, int64_t i, const th_tensor *b, int64_t j) {
  size_t s = th_dtype_size(th_tensor_dtype(a));
  return !memcmp(elem_ptr(a, i), elem_ptr(b, j), s);
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* name -> case slot, for the values a case's bsyms (and their subsymbols, at any depth) produce */
typedef struct {
  const char **name;
  int *val;
  int n; /* slots, a power of two */
} namemap;

static int nm_get(const namemap *m, const char *name) {
  if (!name || !m->n) return -1;
  for (uint32_t h = hash_name(name) & (uint32_t)(m->n - 1);; h = (h + 1) & (uint32_t)(m->n - 1)) {
    if (!m->name[h]) return -1;
    if (!strcmp(m->name[h], name)) return m->val[h];
  }
}

static void nm_put(namemap *m, const char *name, int v) {
  uint32_t h = hash_name(name) & (uint32_t)(m->n - 1);
  while (m->name[h] && strcmp(m->name[h], name)) h = (h + 1) & (uint32_t)(m->n - 1);
  if (!m->name[h]) m->name[h] = name, m->val[h] = v;
}

static void map_case_names(namemap *m, const th_bsym *b, int cid) {
  th_value *ov[64];
  int no = flatten_values(th_bsym_output(b), ov, 64);
  for (int k = 0; k < no && k < 64; k++)
    if (th_value_name(ov[k])) nm_put(m, th_value_name(ov[k]), cid);
  for (int i = 0; i < th_bsym_num_subsymbols(b); i++) map_case_names(m, th_bsym_subsymbol(b, i), cid);
}

typedef struct {
  /* inputs */
  th_trace *tr;
  th_tensor **inputs;
  int ninputs;
  const int *bs_case; /* case of each top-level bsym of tr */
  int ncases;
  const long *case_ids;
  const int *out_case;
  /* results */
  char err[1024];
  mismatch mm[8];
  int nmm;
  bool inject;     /* the self-test: corrupt one exact and one bounded fused element (inject_errors) */
  int injected;    /* how many it corrupted */
  bool *case_bad;  /* per case slot */
  int *case_fused; /* fused bsyms per case slot */
  bool *case_region;
} diff_run;

/* A bound wider than 2 ulps of the value and 0.1% of 1 + |value| (reported, to show how sharp the
 * comparison is). */
static bool loose_bound(th_dtype dt, double x, double E) { return E > fmax(1e-3 * (1 + fabs(x)), 2 * ulp(dt, x)); }

/* The checker's self-test: changes the fused result (both runs alike) at the first element whose bound
 * is 0 (its lowest bit: one ulp, or a flipped bool) and at the first float32/float64 element with a
 * finite nonzero bound (by three times the bound); the comparison must then report both. */
static void inject_errors(diff_run *d, vtable *vt, th_value **rv, int nr, th_tensor **f1, th_tensor **f2) {
  bool exact_done = false, bound_done = false;
  for (int o = 0; o < nr && !(exact_done && bound_done); o++) {
    const ventry *e = vt_find(vt, th_value_name(rv[o]));
    if (!e || th_tensor_dtype(f1[o]) != e->dt || th_tensor_numel(f1[o]) != e->n) continue;
    /* only a result in memory of its own (not a view of an input, of eager's value or of the other run) */
    bool own = !th_tensor_shares_storage(f1[o], f2[o]) && !th_tensor_shares_storage(f1[o], e->t);
    for (int k = 0; k < d->ninputs; k++) own = own && !th_tensor_shares_storage(f1[o], d->inputs[k]);
    for (int64_t i = 0; own && i < e->n; i++) {
      double x = e->x[i], E = e->e[i];
      if (!exact_done && E == 0 && isfinite(x)) {
        for (int r = 0; r < 2; r++) {
          uint8_t *p = (uint8_t *)elem_ptr(r ? f2[o] : f1[o], i);
          p[0] ^= 1; /* little-endian: the lowest bit of the element */
        }
        exact_done = true;
        d->injected++;
        break;
      }
      if (!bound_done && E > 0 && E < 0.1 * fabs(x) && (e->dt == TH_F32 || e->dt == TH_F64)) {
        store(f1[o], i, x + 3 * E);
        store(f2[o], i, x + 3 * E);
        bound_done = true;
        d->injected++;
        break;
      }
    }
  }
}

/* Runs tr fused and eager and compares; returns false on an internal error (message in d->err). */
static bool differential(diff_run *d, fuzz_stats *st) {
  bool ok = false;
  th_program *pe = NULL, *pa = NULL, *pf = NULL;
  th_trace *ta = NULL;
  char *text = NULL, *ntext = NULL;
  th_tensor **ea = NULL, **f1 = NULL, **f2 = NULL;
  int nea = 0, nf1 = 0, nf2 = 0;
  vtable vt = {0};
  namemap names = {0};
  const char **order = NULL;
  int norder = 0;

  /* 1. the prim-level trace the eager executor runs, with every intermediate returned */
  pe = compile_with(d->tr, EX_EAGER, 1, "eager", d->err, sizeof d->err);
  if (!pe) goto done;
  const th_trace *te = th_program_trace(pe);
  int nb = th_trace_num_bsyms(te);
  order = malloc(sizeof(char *) * (size_t)(4 * nb + 1));
  assert_non_null(order);
  for (int i = 0; i < nb; i++) {
    const th_bsym *b = th_trace_bsym(te, i);
    const char *q = th_bsym_qualname(b);
    if (!strcmp(q, "prims.python_return") || !strcmp(q, "prims.python_del") || !strcmp(q, "prims.comment")) continue;
    th_value *ov[16];
    int no = flatten_values(th_bsym_output(b), ov, 16);
    for (int k = 0; k < no && k < 16; k++)
      if (th_value_is_tensor(ov[k]) && norder < 4 * nb) order[norder++] = th_value_name(ov[k]);
  }
  text = th_trace_print(te, 1);
  assert_non_null(text);
  size_t cap = strlen(text) + 64 + (size_t)norder * 24;
  ntext = malloc(cap);
  assert_non_null(ntext);
  size_t k = 0;
  for (char *line = text; *line;) {
    char *eol = strchr(line, '\n');
    size_t len = eol ? (size_t)(eol - line) + 1 : strlen(line);
    const char *t = line;
    while (*t == ' ') t++;
    if (!strncmp(t, "del ", 4)) {
      /* dropped: every value stays alive to be returned */
    } else if (!strncmp(t, "return", 6) && (t[6] == ' ' || t[6] == '\n' || !t[6])) {
      k += (size_t)snprintf(ntext + k, cap - k, "  return (");
      for (int i = 0; i < norder; i++) k += (size_t)snprintf(ntext + k, cap - k, "%s, ", order[i]);
      k += (size_t)snprintf(ntext + k, cap - k, ")\n");
    } else {
      memcpy(ntext + k, line, len);
      k += len;
    }
    line += len;
  }
  ntext[k] = 0;
  if (th_trace_parse(ntext, "<all-values>", &ta) != TH_OK) {
    snprintf(d->err, sizeof d->err, "internal: the all-values trace does not parse: %s", th_last_error());
    goto done;
  }
  pa = compile_with(ta, EX_EAGER, 1, "eager (all values)", d->err, sizeof d->err);
  if (!pa) goto done;
  if (th_program_run(pa, d->ninputs, d->inputs, &nea, &ea) != TH_OK) {
    snprintf(d->err, sizeof d->err, "eager run failed: %s", th_last_error());
    goto done;
  }
  if (nea != norder) {
    snprintf(d->err, sizeof d->err, "internal: %d eager values for %d names", nea, norder);
    goto done;
  }
  for (int i = 0; i < th_trace_num_inputs(te) && i < d->ninputs; i++)
    vt_add(&vt, th_value_name(th_trace_input(te, i)), d->inputs[i]);
  for (int i = 0; i < norder; i++) vt_add(&vt, order[i], ea[i]);

  /* 2. the bounds, prim by prim */
  prop_stats ps;
  memset(&ps, 0, sizeof ps);
  for (int i = 0; i < nb; i++) {
    const th_bsym *b = th_trace_bsym(te, i);
    const char *q = th_bsym_qualname(b);
    if (!strcmp(q, "prims.python_return") || !strcmp(q, "prims.python_del") || !strcmp(q, "prims.comment")) continue;
    propagate(&vt, b, &ps);
    if (cfg.verbose > 3) { /* each prim's bounds: how many unchecked, the widest finite one */
      th_value *ov[16];
      int no = flatten_values(th_bsym_output(b), ov, 16);
      for (int k2 = 0; k2 < no && k2 < 16; k2++) {
        const ventry *e = vt_find(&vt, th_value_name(ov[k2]));
        long ninf = 0, nz = 0;
        double w = 0;
        for (int64_t j = 0; e && j < e->n; j++) {
          ninf += !(e->e[j] < INFINITY);
          nz += e->e[j] == 0;
          if (e->e[j] < INFINITY && e->e[j] > w) w = e->e[j];
        }
        if (e)
          printf("    %s %s: n=%lld exact=%ld unchecked=%ld widest=%.3g\n", q, e->name, (long long)e->n, nz, ninf, w);
      }
    }
  }
  st->unknown_ops += ps.unknown_ops;
  if (ps.unknown_names[0] && !strstr(st->unknown_names, ps.unknown_names) &&
      strlen(st->unknown_names) + strlen(ps.unknown_names) < sizeof st->unknown_names)
    strcat(st->unknown_names, ps.unknown_names);

  /* 3. the fused program */
  double t0 = seconds();
  pf = compile_with(d->tr, EX_FUSED, 3, "fuser", d->err, sizeof d->err);
  st->seconds_fused_compile += seconds() - t0;
  if (!pf) goto done;
  const th_trace *tf = th_program_trace(pf);
  if (th_trace_verify(tf) != TH_OK) {
    snprintf(d->err, sizeof d->err, "the fused execution trace does not verify: %s", th_last_error());
    goto done;
  }
  /* which case each fused bsym belongs to */
  names.n = 1 << 16;
  names.name = calloc((size_t)names.n, sizeof(char *));
  names.val = calloc((size_t)names.n, sizeof(int));
  assert_true(names.name && names.val);
  for (int i = 0; i < th_trace_num_bsyms(d->tr); i++) map_case_names(&names, th_trace_bsym(d->tr, i), d->bs_case[i]);
  for (int i = 0; i < th_trace_num_bsyms(tf); i++) {
    const th_bsym *b = th_trace_bsym(tf, i);
    const char *ex = th_bsym_executor(b);
    if (!ex || strcmp(ex, "fuser")) continue;
    st->regions++;
    for (int s = 0; s < th_bsym_num_subsymbols(b); s++) {
      th_value *ov[4];
      int no = flatten_values(th_bsym_output(th_bsym_subsymbol(b, s)), ov, 4);
      int c = no >= 1 ? nm_get(&names, th_value_name(ov[0])) : -1;
      if (c >= 0 && c < d->ncases) {
        d->case_fused[c]++;
        d->case_region[c] = true;
      }
    }
  }
  if (th_program_run(pf, d->ninputs, d->inputs, &nf1, &f1) != TH_OK) {
    snprintf(d->err, sizeof d->err, "fused run failed: %s", th_last_error());
    goto done;
  }
  if (th_program_run(pf, d->ninputs, d->inputs, &nf2, &f2) != TH_OK) {
    snprintf(d->err, sizeof d->err, "second fused run failed: %s", th_last_error());
    goto done;
  }

  /* 4. compare every output */
  th_value *rv[1024];
  int nr = flatten_values(th_trace_output(d->tr), rv, 1024);
  if (nr != nf1 || nr != nf2) {
    snprintf(d->err, sizeof d->err, "the fused program returned %d outputs, the trace has %d", nf1, nr);
    goto done;
  }
  if (d->inject) inject_errors(d, &vt, rv, nr, f1, f2);
  /* the eager program's outputs, slot by slot: CSE may have replaced an output by an equal value */
  th_value *erv[1024];
  int ner = flatten_values(th_trace_output(te), erv, 1024);
  for (int o = 0; o < nr; o++) {
    const ventry *e = vt_find(&vt, th_value_name(rv[o]));
    if (!e && ner == nr) e = vt_find(&vt, th_value_name(erv[o]));
    int cslot = d->out_case[o];
    if (!e) {
      snprintf(d->err, sizeof d->err, "internal: output %s has no eager value", th_value_name(rv[o]));
      goto done;
    }
    const th_tensor *f = f1[o];
    const char *why = NULL;
    int64_t bad = -1;
    double fv = 0, bound = 0;
    if (th_tensor_dtype(f) != e->dt || th_tensor_ndim(f) != e->nd ||
        memcmp(th_tensor_shape(f), e->shape, sizeof(int64_t) * (size_t)e->nd))
      why = "dtype or shape differs", bad = 0;
    for (int64_t i = 0; !why && i < e->n; i++) {
      double x = e->x[i], y = th_tensor_get_f64(f, i), E = e->e[i];
      if (!bits_equal(f, i, f2[o], i) && !(isnan(y) && isnan(th_tensor_get_f64(f2[o], i)))) {
        why = "the second fused run differs from the first", bad = i, fv = y, bound = E;
        break;
      }
      if (E == 0) {
        st->exact++;
        if (bits_equal(f, i, e->t, i) || (isnan(x) && isnan(y))) continue;
        if (x == 0 && y == 0) { /* +0 vs -0 */
          st->zero_sign++;
          continue;
        }
        why = "not bit-identical", bad = i, fv = y, bound = E;
      } else if (!(E < INFINITY)) {
        st->unchecked++;
      } else {
        st->tolerant++;
        st->loose += loose_bound(e->dt, x, E);
        if (isnan(x) ? isnan(y) : isinf(x) ? y == x : fabs(y - x) <= E) continue;
        why = "outside the bound", bad = i, fv = y, bound = E;
      }
    }
    if (cfg.verbose > 1) {
      long nl = 0, ne = 0, nu = 0;
      double worst = 0;
      for (int64_t i = 0; i < e->n; i++) {
        double E = e->e[i], rel = E / (1 + fabs(e->x[i]));
        ne += E == 0;
        nu += !(E < INFINITY);
        if (E > 0 && E < INFINITY) {
          nl += loose_bound(e->dt, e->x[i], E);
          if (rel > worst) worst = rel;
        }
      }
      printf("  out %d %s (case %ld) %s n=%lld exact=%ld unchecked=%ld loose=%ld worst E/(1+|x|)=%.3g\n", o, e->name,
             cslot >= 0 && cslot < d->ncases ? d->case_ids[cslot] : -1L, th_dtype_short(e->dt), (long long)e->n, ne, nu,
             nl, worst);
    }
    if (why) {
      if (cslot >= 0 && cslot < d->ncases) d->case_bad[cslot] = true;
      if (d->nmm < 8) {
        mismatch *m = &d->mm[d->nmm++];
        m->out = o;
        m->elem = bad;
        m->eager = bad >= 0 && bad < e->n ? e->x[bad] : 0;
        m->fused = fv;
        m->bound = bound;
        m->why = why;
      }
    }
  }
  ok = true;
done:
  if (ea)
    for (int i = 0; i < nea; i++) th_tensor_release(ea[i]);
  if (f1)
    for (int i = 0; i < nf1; i++) th_tensor_release(f1[i]);
  if (f2)
    for (int i = 0; i < nf2; i++) th_tensor_release(f2[i]);
  free(ea);
  free(f1);
  free(f2);
  vt_free(&vt);
  free(names.name);
  free(names.val);
  free(order);
  free(text);
  free(ntext);
  th_trace_free(ta);
  th_program_free(pa);
  th_program_free(pe);
  th_program_free(pf);
  return ok;
}

/* ---- groups of cases ---------------------------------------------------------------------------------- */

typedef struct {
  group_t G;
  th_tensor *inputs[MAXIN];
  int bs_case[4096];
  long case_ids[64];
  int ncases;
} built_group;

/* Builds one trace holding cases first .. first + n - 1 (case slots 0 .. n-1). */
static void build_group(built_group *bg, long first, int n) {
  memset(bg, 0, sizeof *bg);
  bg->G.tr = th_trace_new("computation");
  assert_non_null(bg->G.tr);
  for (int c = 0; c < n; c++) {
    int before = th_trace_num_bsyms(bg->G.tr), nout_before = bg->G.nouts;
    gen_case(&bg->G, first + c);
    for (int i = before; i < th_trace_num_bsyms(bg->G.tr) && i < 4096; i++) bg->bs_case[i] = c;
    for (int i = nout_before; i < bg->G.nouts; i++) bg->G.out_case[i] = c;
    bg->case_ids[c] = first + c;
  }
  bg->ncases = n;
  if (th_trace_set_return(bg->G.tr, th_arg_tuple(bg->G.nouts, bg->G.outs)) != TH_OK)
    fail_msg("set_return: %s", th_last_error());
  for (int i = 0; i < bg->G.nin; i++) {
    bg->inputs[i] = make_input(&bg->G, i);
    if (!bg->inputs[i]) fail_msg("input %d: %s", i, th_last_error());
  }
}

static void free_group(built_group *bg) {
  for (int i = 0; i < bg->G.nin; i++) th_tensor_release(bg->inputs[i]);
  th_trace_free(bg->G.tr);
}

static bool run_built(built_group *bg, diff_run *d, fuzz_stats *st, bool inject) {
  memset(d, 0, sizeof *d);
  d->inject = inject;
  d->tr = bg->G.tr;
  d->inputs = bg->inputs;
  d->ninputs = bg->G.nin;
  d->bs_case = bg->bs_case;
  d->ncases = bg->ncases;
  d->case_ids = bg->case_ids;
  d->out_case = bg->G.out_case;
  d->case_bad = calloc(64, sizeof(bool));
  d->case_fused = calloc(64, sizeof(int));
  d->case_region = calloc(64, sizeof(bool));
  assert_true(d->case_bad && d->case_fused && d->case_region);
  return differential(d, st);
}

static void free_run(diff_run *d) {
  free(d->case_bad);
  free(d->case_fused);
  free(d->case_region);
}

/* Both partition strategies: the traces whose first case lies in every third block of `group` cases
 * keep program order (THUNDER_FUSER_STRATEGY=consecutive), unless the variable was set by the user.
 * first < 0: back to the default. */
static bool user_strategy;
static void set_strategy(long first) {
  if (user_strategy) return;
  if (first >= 0 && (first / cfg.group) % 3 == 2)
    setenv("THUNDER_FUSER_STRATEGY", "consecutive", 1);
  else
    unsetenv("THUNDER_FUSER_STRATEGY");
}

/* Runs case cid alone (or the ncases cases from cid together, as in their group) and prints it: the
 * mismatches, the trace text for `thunder run`, and (for the first three reports) the trace and inputs
 * written to the working directory. reported < 0: only says whether it passes, prints nothing. */
static bool report_case(long cid, int ncases, int reported) {
  built_group *bg = malloc(sizeof *bg);
  assert_non_null(bg);
  build_group(bg, cid, ncases > 0 ? ncases : 1);
  fuzz_stats scratch;
  memset(&scratch, 0, sizeof scratch);
  diff_run d;
  set_strategy(cid);
  bool ok = run_built(bg, &d, &scratch, false), pass = ok && !d.nmm;
  set_strategy(-1);
  char *text = reported >= 0 ? th_trace_print(bg->G.tr, 1) : NULL;
  if (reported >= 0) {
    if (ncases > 0)
      printf("\n==== fuser fuzz: cases %ld..%ld together (seed %llu, group %d) ====\n", cid, cid + ncases - 1,
             (unsigned long long)cfg.seed, cfg.group);
    else
      printf("\n==== fuser fuzz: case %ld (seed %llu) ====\n", cid, (unsigned long long)cfg.seed);
    if (!ok)
      printf("error: %s\n", d.err);
    else if (!d.nmm)
      printf("(the case alone matches: the mismatch needs the other cases of its group)\n");
    th_value *rv[1024];
    int nr = flatten_values(th_trace_output(bg->G.tr), rv, 1024);
    for (int i = 0; i < d.nmm; i++) {
      const mismatch *m = &d.mm[i];
      printf("output %d (%s) element %lld: eager %.17g, fused %.17g, bound %.3g: %s\n", m->out,
             m->out < nr ? th_value_name(rv[m->out]) : "?", (long long)m->elem, m->eager, m->fused, m->bound, m->why);
    }
    printf("input layouts at run time (strides):");
    for (int i = 0; i < bg->G.nin; i++) {
      static const char *const names[] = {"contiguous", "transposed", "padded", "stride-0"};
      char sb[128];
      shape_text(sb, sizeof sb, th_tensor_ndim(bg->inputs[i]), th_tensor_strides(bg->inputs[i]));
      printf(" %s=%s%s", th_value_name(bg->G.in[i]), names[bg->G.layout[i]], sb);
    }
    printf("\n%s", text ? text : "(no text)\n");
  }
  if (reported >= 0 && reported < 3) {
    char py[128], st[128];
    snprintf(py, sizeof py, "fuser_fuzz_%llu_%ld%s.py", (unsigned long long)cfg.seed, cid, ncases > 0 ? "_group" : "");
    snprintf(st, sizeof st, "fuser_fuzz_%llu_%ld%s_inputs.safetensors", (unsigned long long)cfg.seed, cid,
             ncases > 0 ? "_group" : "");
    FILE *f = fopen(py, "w");
    if (f) {
      fputs(text ? text : "", f);
      fclose(f);
    }
    const char *nm[MAXIN];
    for (int i = 0; i < bg->G.nin; i++) nm[i] = th_value_name(bg->G.in[i]);
    if (f && th_safetensors_write(st, bg->G.nin, nm, bg->inputs) == TH_OK) {
      char cwd[512];
      if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, ".");
      printf("replay (in %s; the inputs are stored contiguous):\n"
             "  thunder run %s --input %s --executors fuser,blas,eager --output fused.safetensors\n"
             "  thunder run %s --input %s --executors eager --output eager.safetensors\n",
             cwd, py, st, py, st);
    }
  }
  free(text);
  free_run(&d);
  free_group(bg);
  free(bg);
  return pass;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int setup(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(cache_dir, sizeof cache_dir, "%s/thunder-fuser-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(cache_dir)) return -1;
  setenv("XDG_CACHE_HOME", cache_dir, 1);
  return 0;
}

static long nfiles;
static int count_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)ftw;
  nfiles += flag == FTW_F && strstr(path, ".so") != NULL;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (cfg.verbose && cache_dir[0] && !nftw(cache_dir, count_cb, 16, FTW_PHYS))
    printf("kernels compiled (cache entries): %ld\n", nfiles);
  if (cache_dir[0]) nftw(cache_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static void test_fuzz(void **state) {
  (void)state;
  fuzz_stats st;
  memset(&st, 0, sizeof st);
  double t0 = seconds();
  long first = cfg.only >= 0 ? cfg.only : 0, n = cfg.only >= 0 ? 1 : cfg.cases, errors = 0;
  long bad_cases[64];
  int nbad = 0;
  long ops_ok = 0, ops_rej = 0;
  for (long c = first; c < first + n; c += cfg.group) {
    int g = (int)(first + n - c < cfg.group ? first + n - c : cfg.group);
    built_group *bg = malloc(sizeof *bg);
    assert_non_null(bg);
    build_group(bg, c, g);
    ops_ok += bg->G.ops_ok;
    ops_rej += bg->G.ops_rejected;
    set_strategy(c);
    if (cfg.verbose > 2) {
      char *txt = th_trace_print(bg->G.tr, 1);
      printf("%s", txt ? txt : "");
      free(txt);
    }
    diff_run d;
    bool ok = run_built(bg, &d, &st, false);
    set_strategy(-1);
    st.groups++;
    if (!ok) {
      errors++;
      printf("cases %ld..%ld: %s\n", c, c + g - 1, d.err);
      if (nbad < 64) bad_cases[nbad++] = -1 - c; /* the group: reported below */
    }
    for (int i = 0; i < g; i++) {
      st.cases++;
      st.cases_fused += d.case_region[i];
      st.fused_bsyms += d.case_fused[i];
      if (d.case_bad[i]) {
        st.mismatching_cases++;
        if (nbad < 64) bad_cases[nbad++] = c + i;
      }
    }
    if (cfg.verbose) {
      int fused = 0;
      for (int i = 0; i < g; i++) fused += d.case_region[i];
      printf("cases %ld..%ld: %d inputs, %d outputs, %d of %d cases fused%s\n", c, c + g - 1, bg->G.nin, bg->G.nouts,
             fused, g, d.nmm ? ", MISMATCH" : "");
    }
    free_run(&d);
    free_group(bg);
    free(bg);
  }
  double dt = seconds() - t0;
  printf("fuser fuzz: seed %llu, %ld cases in %ld traces, %.1f s (fused compiles %.1f s)\n",
         (unsigned long long)cfg.seed, st.cases, st.groups, dt, st.seconds_fused_compile);
  printf("  ops recorded %ld (rejected by their metas: %ld)\n", ops_ok, ops_rej);
  printf("  cases with at least one fusion region: %ld of %ld (%.0f%%); fused bsyms per case: %.2f; regions: %ld\n",
         st.cases_fused, st.cases, st.cases ? 100.0 * (double)st.cases_fused / (double)st.cases : 0.0,
         st.cases ? (double)st.fused_bsyms / (double)st.cases : 0.0, st.regions);
  printf(
    "  elements compared: %ld bit-exact, %ld within a propagated bound (%ld of them wider than 2 ulps and 0.1%% of 1 + |x|), "
    "%ld unchecked (non-finite bound)%s%s\n",
    st.exact, st.tolerant, st.loose, st.unchecked, st.unknown_ops ? "; prims without a bound rule:" : "",
    st.unknown_names);
  if (st.zero_sign) printf("  note: %ld exact elements differ only in the sign of zero\n", st.zero_sign);
  int reported = 0;
  for (int i = 0; i < nbad && reported < 5; i++) {
    bool seen = false;
    for (int j = 0; j < i; j++) seen |= bad_cases[j] == bad_cases[i];
    if (seen) continue;
    if (bad_cases[i] >= 0) {
      report_case(bad_cases[i], -1, reported++);
      continue;
    }
    /* a failed run: the cases of the group that fail alone, else the whole group */
    long c0 = -1 - bad_cases[i];
    int g = (int)(first + n - c0 < cfg.group ? first + n - c0 : cfg.group), found = 0;
    for (int k = 0; k < g && reported < 5; k++)
      if (!report_case(c0 + k, -1, -1)) found++, report_case(c0 + k, -1, reported++);
    if (!found && reported < 5) report_case(c0, g, reported++);
  }
  fflush(stdout);
  if (errors || st.mismatching_cases)
    fail_msg("fuser fuzz: %ld mismatching cases, %ld failed runs (seed %llu; details above)", st.mismatching_cases,
             errors, (unsigned long long)cfg.seed);
  /* the fuzzer must exercise the fuser: most traces have fusible elementwise chains */
  if (cfg.only < 0 && st.cases >= 60) assert_true(st.cases_fused * 3 >= st.cases);
}

/* The checker itself: an error of one ulp where the bound is 0, and one of three times the bound
 * elsewhere, are both reported (so a passing run means something). */
static void test_checker_detects_errors(void **state) {
  (void)state;
  uint64_t seed = cfg.seed;
  cfg.seed = 7;
  built_group *bg = malloc(sizeof *bg);
  assert_non_null(bg);
  build_group(bg, 0, 8);
  cfg.seed = seed;
  fuzz_stats st;
  memset(&st, 0, sizeof st);
  diff_run d;
  if (!run_built(bg, &d, &st, true)) fail_msg("%s", d.err);
  assert_int_equal(d.injected, 2);
  bool exact = false, bound = false;
  for (int i = 0; i < d.nmm; i++) {
    exact |= !strcmp(d.mm[i].why, "not bit-identical");
    bound |= !strcmp(d.mm[i].why, "outside the bound");
  }
  if (!exact || !bound || d.nmm != 2) {
    for (int i = 0; i < d.nmm; i++)
      printf("output %d element %lld: eager %.17g, fused %.17g, bound %.3g: %s\n", d.mm[i].out, (long long)d.mm[i].elem,
             d.mm[i].eager, d.mm[i].fused, d.mm[i].bound, d.mm[i].why);
    fail_msg("the checker found %d differences; expected exactly the two it injected (seed 7, cases 0..7; see "
             "`--seed 7 --case K` for a real mismatch)",
             d.nmm);
  }
  free_run(&d);
  free_group(bg);
  free(bg);
}

static long parse_long(const char *s, const char *what) {
  char *end;
  long v = strtol(s, &end, 0);
  if (!*s || *end || v < 0) {
    fprintf(stderr, "test_fuser_fuzz: %s: expected a non-negative integer, got '%s'\n", what, s);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  const char *e;
  if ((e = getenv("THUNDER_FUZZ_CASES")) && *e) cfg.cases = parse_long(e, "THUNDER_FUZZ_CASES");
  if ((e = getenv("THUNDER_FUZZ_SEED")) && *e) cfg.seed = (uint64_t)parse_long(e, "THUNDER_FUZZ_SEED");
  if ((e = getenv("THUNDER_FUZZ_GROUP")) && *e) cfg.group = (int)parse_long(e, "THUNDER_FUZZ_GROUP");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--verbose") || !strcmp(a, "-v"))
      cfg.verbose++;
    else if (i + 1 < argc && !strcmp(a, "--cases"))
      cfg.cases = parse_long(argv[++i], a);
    else if (i + 1 < argc && !strcmp(a, "--seed"))
      cfg.seed = (uint64_t)parse_long(argv[++i], a);
    else if (i + 1 < argc && !strcmp(a, "--group"))
      cfg.group = (int)parse_long(argv[++i], a);
    else if (i + 1 < argc && !strcmp(a, "--case"))
      cfg.only = parse_long(argv[++i], a);
    else {
      fprintf(stderr, "usage: %s [--cases N] [--seed S] [--group G] [--case K] [--verbose]\n", argv[0]);
      return 2;
    }
  }
  user_strategy = getenv("THUNDER_FUSER_STRATEGY") != NULL;
  if (cfg.group < 1) cfg.group = 1;
  if (cfg.group > 64) cfg.group = 64;
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_checker_detects_errors), cmocka_unit_test(test_fuzz)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
