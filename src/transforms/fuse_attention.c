/* fuse_attention.c — attention written out by hand becomes one scaled_dot_product_attention.
 *
 * nanoGPT's and minGPT's attention without the flash path,
 *
 *   att = (q @ k.transpose(-2, -1)) * scale        # or / c, or no scale
 *   att = att.masked_fill(mask, float("-inf"))     # optional; mask: bool, True where a key is hidden
 *   att = F.softmax(att, dim=-1)
 *   att = dropout(att, p=0.0)                      # optional, p 0 only
 *   y = att @ v
 *
 * is, at the torch level, the chain ltorch.matmul -> [mul | div | true_divide by a number] ->
 * [masked_fill(., bool mask, -inf)] -> softmax(., last dim) -> [dropout(., 0.0)] -> matmul. Where every
 * intermediate has this chain as its only user (nothing else reads the scores or probabilities, and none
 * is returned), q, k^T and v are f32 or bf16 of one dtype with the same batch dims (rank 2 to 5), no op
 * between the two matmuls writes memory (an in-place op's prims.copy_ into q, say: the fused call reads
 * its operands at the second matmul), and there are at least FUSE_MIN_KEYS keys, the chain is recorded
 * again, at the second matmul, as
 *
 *   y = ltorch.scaled_dot_product_attention(q, k, v, logical_not(mask), 0.0, False, scale=scale)
 *
 * which records the fused flash-attention prim (ops/torch/attention.c), so the L x S scores are never
 * materialized, forward or backward. k is the transpose's input when k^T is ltorch.transpose of the last
 * two dims (else k^T transposed back, a view); an operand that an earlier chain produced is read as what
 * that chain became. Eager's softmax of a row whose every key is masked is NaN where sdpa gives 0, so
 * with a mask the result is where(any(not mask, -1), y, nan); a NaN or infinite score gives a NaN row in
 * both. What differs: a row with no mask whose every score is -inf (from infinite inputs) is 0 here and NaN
 * in the chain, and under autograd a fully masked row's NaN does not reach v's gradient (the where's
 * gradient is 0 there; eager's P^T dO spreads it into every row of dV). The scores are no longer rounded
 * to the inputs' dtype between the ops (bf16: each of the chain's ops rounds), so the result is closer to
 * the float32 computation than the chain's.
 *
 * THUNDER_FUSE_ATTENTION=0 in the environment leaves every chain as it is (tests of the unfused result).
 * *out is NULL when no chain matched (the trace is kept). Provenance "Fuse Attention (took N
 * milliseconds)". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transforms/transforms.h"

/* Fewer keys than this and the chain stays: a head's scores are then at most 64 KiB, which the unfused
 * GEMMs and the fused softmax region run through in cache at least as fast as the flash kernel's tiles
 * (bench/README.md, bench_peers' train_step at T = 64). */
#define FUSE_MIN_KEYS 128

/* ---- use counts --------------------------------------------------------------------------------------- */

typedef struct {
  uint32_t *uses; /* by value id */
  uint32_t n;
} use_ctx;

static void count_use(th_value *v, void *p) {
  use_ctx *c = p;
  if (v && v->id < c->n) c->uses[v->id]++;
}

/* ---- the match ------------------------------------------------------------------------------------------ */

typedef struct {
  int mm1, scale, mask, softmax, dropout, mm2; /* bsym indices; -1 where the chain has none */
  th_value *q, *kt, *v, *m;
  double scale_by; /* the chain's scale; 1 when it has none (sdpa's default 1 / sqrt(E) does not apply) */
} attn_chain;

static th_value *tensor_arg(const th_arg *a) {
  return a->kind == TH_ARG_VALUE && a->u.value && a->u.value->is_tensor ? a->u.value : NULL;
}

/* A constant number argument (a literal or a number proxy whose value is known). */
static bool number_arg(const th_arg *a, double *x) {
  if (a->kind == TH_ARG_FLOAT) {
    *x = a->u.f;
    return true;
  }
  if (a->kind == TH_ARG_INT) {
    *x = (double)a->u.i;
    return true;
  }
  if (a->kind == TH_ARG_VALUE && a->u.value && !a->u.value->is_tensor && !a->u.value->is_collection &&
      a->u.value->has_value) {
    *x = a->u.value->dtype == TH_I64 || a->u.value->dtype == TH_BOOL ? (double)a->u.value->ivalue
                                                                      : a->u.value->fvalue;
    return true;
  }
  return false;
}

static th_value *out_value(const th_bsym *b) { return b->out.kind == TH_ARG_VALUE ? b->out.u.value : NULL; }

static bool is_op(const th_bsym *b, th_op_id id) { return b->sym == th_symbol_get(id) && b->nargs == b->sym->schema.nparams; }

typedef struct {
  const th_trace *tr;
  const uint32_t *uses;
  uint32_t nids;
  int *producer; /* by value id: the index of the top-level bsym that outputs it, -1 if none */
  int *consumer; /* by value id: the index of its only top-level user, -1 if none or several */
} graph;

/* The only user of b's output, when it has exactly one and it comes later. */
static int next_of(const graph *g, int i) {
  const th_value *o = out_value(g->tr->bsyms.items[i]);
  if (!o || !o->is_tensor || o->id >= g->nids || g->uses[o->id] != 1) return -1;
  return g->consumer[o->id] > i ? g->consumer[o->id] : -1;
}

static bool same_batch(const th_value *a, const th_value *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim - 2; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

/* Whether the chain starting at the matmul at index i matches; fills *c. */
static bool match_chain(const graph *g, int i, attn_chain *c) {
  const th_vec *bs = &g->tr->bsyms;
  const th_bsym *mm1 = bs->items[i];
  if (!is_op(mm1, TH_OP_ltorch_matmul)) return false;
  th_value *q = tensor_arg(&mm1->args[0]), *kt = tensor_arg(&mm1->args[1]), *s = out_value(mm1);
  if (!q || !kt || !s) return false;
  if (q->dtype != kt->dtype || (q->dtype != TH_F32 && q->dtype != TH_BF16)) return false;
  if (q->ndim < 2 || q->ndim > 5 || !same_batch(q, kt) || q->shape[q->ndim - 1] != kt->shape[kt->ndim - 2])
    return false;
  if (kt->shape[kt->ndim - 1] < FUSE_MIN_KEYS) return false;
  memset(c, 0, sizeof *c);
  c->mm1 = i;
  c->scale = c->mask = c->dropout = -1;
  c->scale_by = 1.0;
  c->q = q;
  c->kt = kt;
  int j = next_of(g, i);
  th_value *cur = s;
  if (j < 0) return false;
  const th_bsym *b = bs->items[j];
  double x;
  if (is_op(b, TH_OP_ltorch_mul) || is_op(b, TH_OP_ltorch_div) || is_op(b, TH_OP_ltorch_true_divide)) {
    const bool mul = is_op(b, TH_OP_ltorch_mul);
    int ti = tensor_arg(&b->args[0]) == cur ? 0 : (mul && tensor_arg(&b->args[1]) == cur ? 1 : -1);
    if (ti < 0 || !number_arg(&b->args[1 - ti], &x) || !isfinite(x) || x == 0.0) return false;
    if (is_op(b, TH_OP_ltorch_div) && b->args[2].kind != TH_ARG_NONE) return false; /* rounding_mode */
    c->scale = j;
    c->scale_by = mul ? x : 1.0 / x;
    cur = out_value(b);
    if (!cur || (j = next_of(g, j)) < 0) return false;
    b = bs->items[j];
  }
  if (is_op(b, TH_OP_ltorch_masked_fill)) {
    th_value *m = tensor_arg(&b->args[1]);
    if (tensor_arg(&b->args[0]) != cur || !m || m->dtype != TH_BOOL || !number_arg(&b->args[2], &x) ||
        !(isinf(x) && x < 0) || m->ndim > cur->ndim)
      return false;
    th_value *filled = out_value(b);
    if (!filled || filled->ndim != cur->ndim) return false; /* a mask that widens the scores: not sdpa's */
    for (int d = 0; d < cur->ndim; d++)
      if (filled->shape[d] != cur->shape[d]) return false;
    c->mask = j;
    c->m = m;
    cur = filled;
    if ((j = next_of(g, j)) < 0) return false;
    b = bs->items[j];
  }
  int64_t dim;
  if (!is_op(b, TH_OP_ltorch_softmax) || tensor_arg(&b->args[0]) != cur || b->args[1].kind != TH_ARG_INT ||
      b->args[2].kind != TH_ARG_NONE)
    return false;
  dim = b->args[1].u.i;
  if (dim != -1 && dim != cur->ndim - 1) return false;
  c->softmax = j;
  cur = out_value(b);
  if (!cur || (j = next_of(g, j)) < 0) return false;
  b = bs->items[j];
  if (is_op(b, TH_OP_ltorch_dropout)) {
    if (tensor_arg(&b->args[0]) != cur || !number_arg(&b->args[1], &x) || x != 0.0 || b->args[3].kind != TH_ARG_BOOL ||
        b->args[3].u.b)
      return false;
    c->dropout = j;
    cur = out_value(b);
    if (!cur || (j = next_of(g, j)) < 0) return false;
    b = bs->items[j];
  }
  if (!is_op(b, TH_OP_ltorch_matmul) || tensor_arg(&b->args[0]) != cur) return false;
  th_value *v = tensor_arg(&b->args[1]), *y = out_value(b);
  if (!v || !y || v->dtype != q->dtype || !same_batch(v, q) || v->shape[v->ndim - 2] != kt->shape[kt->ndim - 1])
    return false;
  c->mm2 = j;
  c->v = v;
  /* q, k, v and the mask are read at the last matmul: nothing in between may write to memory (an
   * in-place op's prims.copy_ into q, say) */
  for (int t = i + 1; t < j; t++) {
    if (t != c->scale && t != c->mask && t != c->softmax && t != c->dropout && th_bsym_has_effect(bs->items[t]))
      return false;
  }
  return true;
}

/* ---- recording ------------------------------------------------------------------------------------------- */

typedef struct {
  th_value **from, **to;
  int n;
} subst_map;

static th_value *map_value(th_value *v, void *p) {
  const subst_map *m = p;
  for (int i = 0; i < m->n; i++)
    if (m->from[i] == v) return m->to[i];
  return v;
}

/* k from k^T: the transpose's input when k^T is ltorch.transpose of the last two dims, else a new
 * transpose of k^T. */
static th_status key_of(th_trace *nt, const graph *g, th_value *kt, void *m, th_arg *k) {
  const int n = kt->ndim;
  int pi = kt->id < g->nids ? g->producer[kt->id] : -1;
  if (pi >= 0) {
    const th_bsym *t = g->tr->bsyms.items[pi];
    if (is_op(t, TH_OP_ltorch_transpose) && t->args[1].kind == TH_ARG_INT && t->args[2].kind == TH_ARG_INT) {
      int64_t d0 = t->args[1].u.i, d1 = t->args[2].u.i;
      d0 = d0 < 0 ? d0 + n : d0;
      d1 = d1 < 0 ? d1 + n : d1;
      th_value *src = tensor_arg(&t->args[0]);
      if (src && ((d0 == n - 2 && d1 == n - 1) || (d0 == n - 1 && d1 == n - 2))) {
        *k = th_arg_value(map_value(src, m));
        return TH_OK;
      }
    }
  }
  th_arg targs[3] = {th_arg_value(map_value(kt, m)), th_arg_int(-2), th_arg_int(-1)};
  return th_call(nt, TH_OP_ltorch_transpose, 3, targs, k);
}

/* Records the chain's sdpa into nt; its operands are read through m (an earlier chain's output may be
 * one of them). */
static th_status record_chain(th_trace *nt, const graph *g, const attn_chain *c, void *m, th_value **y) {
  th_arg k, mask = th_arg_none(), out;
  TH_TRY(key_of(nt, g, c->kt, m, &k));
  if (c->m) {
    th_arg ma = th_arg_value(map_value(c->m, m));
    TH_TRY(th_call(nt, TH_OP_ltorch_logical_not, 1, &ma, &mask));
  }
  th_arg args[6] = {th_arg_value(map_value(c->q, m)), k, th_arg_value(map_value(c->v, m)), mask, th_arg_float(0.0),
                    th_arg_bool(false)};
  const char *kwn[1] = {"scale"};
  th_arg kw[1] = {th_arg_float(c->scale_by)};
  TH_TRY(th_call_kw(nt, th_symbol_get(TH_OP_ltorch_scaled_dot_product_attention), 6, args, 1, kwn, kw, &out));
  if (c->m) { /* rows with no key left: NaN, as the chain's softmax gives them */
    th_arg any_args[3] = {mask, th_arg_int(-1), th_arg_bool(true)}, keep;
    TH_TRY(th_call(nt, TH_OP_ltorch_any, 3, any_args, &keep));
    th_arg wargs[3] = {keep, out, th_arg_float(NAN)};
    TH_TRY(th_call(nt, TH_OP_ltorch_where, 3, wargs, &out));
  }
  if (out.kind != TH_ARG_VALUE) return th_error(TH_ERR_RUNTIME, "fuse attention: sdpa gave no tensor");
  *y = out.u.value;
  return TH_OK;
}

static bool disabled(void) {
  const char *e = getenv("THUNDER_FUSE_ATTENTION");
  return e && !strcmp(e, "0");
}

th_status th_fuse_attention(const th_trace *tr, th_trace **out) {
  *out = NULL;
  if (disabled()) return TH_OK;
  double t0 = th_pass_clock_ms();
  const int nb = tr->bsyms.n;
  graph g = {tr, NULL, th_trace_id_bound(tr), NULL, NULL};
  uint32_t *uses = th_calloc(g.nids ? g.nids : 1, sizeof *uses);
  int *producer = th_malloc(sizeof(int) * (g.nids ? g.nids : 1)), *consumer = th_malloc(sizeof(int) * (g.nids ? g.nids : 1));
  attn_chain *chains = th_malloc(sizeof(attn_chain) * (size_t)(nb ? nb : 1));
  signed char *role = th_calloc((size_t)(nb ? nb : 1), 1); /* 1: dropped, 2: a chain's last matmul */
  int *chain_at = th_malloc(sizeof(int) * (size_t)(nb ? nb : 1));
  th_status st = TH_OK;
  if (!uses || !producer || !consumer || !chains || !role || !chain_at) {
    st = th_error(TH_ERR_NOMEM, "fuse attention: out of memory");
    goto done;
  }
  g.uses = uses;
  g.producer = producer;
  g.consumer = consumer;
  for (uint32_t i = 0; i < g.nids; i++) producer[i] = consumer[i] = -1;
  /* uses: every read (arguments, keyword arguments, inside TUPLE/LIST ones, the return); consumer: the
   * last bsym reading the value as a direct argument, its only user where uses == 1 (a value read only
   * inside a sequence or by the return has no consumer, so a chain through it stops) */
  use_ctx uc = {uses, g.nids};
  for (int i = 0; i < nb; i++) {
    const th_bsym *b = tr->bsyms.items[i];
    th_bsym_foreach_value(b, TH_BSYM_INPUTS, count_use, &uc);
    for (int a = 0; a < b->nargs; a++) {
      th_value *v = tensor_arg(&b->args[a]);
      if (v && v->id < g.nids) consumer[v->id] = i;
    }
    th_value *o = out_value(b);
    if (o && o->id < g.nids && producer[o->id] < 0) producer[o->id] = i;
  }
  int nchains = 0;
  for (int i = 0; i < nb; i++) {
    if (role[i]) continue;
    attn_chain c;
    if (!match_chain(&g, i, &c)) continue;
    const int idx[5] = {c.mm1, c.scale, c.mask, c.softmax, c.dropout};
    for (int t = 0; t < 5; t++)
      if (idx[t] >= 0) role[idx[t]] = 1;
    role[c.mm2] = 2;
    chain_at[c.mm2] = nchains;
    chains[nchains++] = c;
  }
  if (!nchains) goto done;

  th_trace *nt = th_trace_derive(tr, tr->fn_name);
  if (!nt) {
    st = TH_ERR_NOMEM;
    goto done;
  }
  subst_map m = {th_malloc(sizeof(th_value *) * (size_t)nchains), th_malloc(sizeof(th_value *) * (size_t)nchains), 0};
  if (!m.from || !m.to) st = th_error(TH_ERR_NOMEM, "fuse attention: out of memory");
  for (int i = 0; st == TH_OK && i < tr->inputs.n; i++) st = th_vec_push(nt->arena, &nt->inputs, tr->inputs.items[i]);
  nt->scope = &nt->bsyms;
  nt->nfusions = tr->nfusions;
  for (int i = 0; st == TH_OK && i < nb; i++) {
    if (role[i] == 1) continue;
    if (role[i] == 2) {
      th_value *y = NULL;
      st = record_chain(nt, &g, &chains[chain_at[i]], &m, &y);
      if (st == TH_OK) {
        m.from[m.n] = out_value(tr->bsyms.items[i]);
        m.to[m.n++] = y;
      }
      continue;
    }
    th_bsym *b;
    st = th_bsym_clone(nt, tr->bsyms.items[i], map_value, &m, &b);
    if (st == TH_OK) st = th_vec_push(nt->arena, &nt->bsyms, b);
  }
  nt->has_return = tr->has_return;
  th_free(m.from);
  th_free(m.to);
  if (st == TH_OK) {
    char prov[96];
    snprintf(prov, sizeof prov, "Fuse Attention (took %ld milliseconds)", (long)(th_pass_clock_ms() - t0));
    st = th_trace_set_provenance(nt, prov);
  }
  if (st != TH_OK)
    th_trace_free(nt);
  else
    *out = nt;
done:
  th_free(uses);
  th_free(producer);
  th_free(consumer);
  th_free(chains);
  th_free(role);
  th_free(chain_at);
  return st;
}
