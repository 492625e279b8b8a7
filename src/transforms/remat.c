/* remat.c — rematerialization for the grad transform (remat.h): the backward recomputes cheap forward
 * intermediates from fewer saved bytes instead of reading each one from saved_for_backward.
 *
 * Thunder decides this per pair of producer / consumer fusions with a minimum cut weighted by tensor
 * size (thunder/core/rematerialization.py); here the cut is taken once over the whole forward, before
 * any executor runs, so the recomputed ops land in the backward trace where the fuser groups them with
 * the backward's own elementwise work.
 *
 *   1. recomputable values: tensor outputs of a forward bsym that is cheap — a prim among elementwise
 *      ops (convert_element_type included), broadcast_in_dim, reshape, transpose, squeeze, slice_prim,
 *      stride_order, clone, full, iota, uniform_philox (a pure function of the generator state it is
 *      given, so the backward draws the forward's numbers again); or a torch-level op whose decomposition is only such prims
 *      (recursively) — and that touches no value an in-place op writes (the destination of copy_,
 *      update_aliases or an IN_PLACE op, and every value related to one by a view op): such a value
 *      would read its mutated buffer when recomputed. Never: matmul, linear, reductions (sum, amax,
 *      var_mean, ... : their inputs are large and a reduction's output is small, so saving it is what a
 *      cut picks anyway), random ops, copies across devices, cat / take / flip / pad-like data movement.
 *      Everything else (trace inputs, number proxies, outputs of other ops) can only be saved.
 *   2. the graph: the values reachable backwards from the backward's reads through recomputable
 *      producers. Each value v is an edge v_in -> v_out of capacity bytes(v) (cutting it = saving v);
 *      source -> v_in (unbounded) for a value that cannot be recomputed; u_out -> v_in (unbounded) for each
 *      value u the producer of a recomputable v reads; v_out -> sink (unbounded) for each value the
 *      backward reads. Every source-sink path crosses a saved value exactly when each read value is
 *      saved or recomputable from saved ones, so a minimum cut is a minimum-bytes saved set.
 *   3. maximum flow (Dinic), then the cut nearest the sink (the values that cannot reach the sink in the
 *      residual graph, bordering those that can): among cuts of equal bytes it recomputes least, so a
 *      value the backward reads is saved rather than recomputed from an input of the same size (tanh's
 *      output, not its input).
 *   4. the recomputed bsyms (those producing an unsaved read value, and what those need, transitively)
 *      are copied into the backward in forward order, each right before the first backward bsym that
 *      needs it, with outputs renamed bw_<name>; the backward's reads are rewritten to them. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "transforms/remat.h"
#include "transforms/transforms.h"

#define CAP_INF (INT64_MAX / 4)

int64_t th_grad_value_bytes(const th_value *v) {
  if (v->is_collection) return 0;
  if (!v->is_tensor) return 8;
  int64_t n = 1;
  for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
  return n * (int64_t)th_dtype_size(v->dtype);
}

/* ---- maximum flow (Dinic) ------------------------------------------------------------------------------- */

typedef struct flow {
  int n, ne, cap;
  int *head, *next, *to; /* edges: e and e ^ 1 are a pair */
  int64_t *c;            /* residual capacity */
  int *level, *it, *q, *stack;
  bool oom;
} flow;

static void flow_edge(flow *f, int u, int v, int64_t c) {
  if (f->oom) return;
  if (f->ne + 2 > f->cap) {
    int nc = f->cap ? f->cap * 2 : 256;
    int *nx = th_realloc(f->next, sizeof(int) * (size_t)nc),
        *nt = nx ? th_realloc(f->to, sizeof(int) * (size_t)nc) : NULL;
    if (nx) f->next = nx;
    if (nt) f->to = nt;
    int64_t *ncap = nt ? th_realloc(f->c, sizeof(int64_t) * (size_t)nc) : NULL;
    if (!ncap) {
      f->oom = true;
      return;
    }
    f->c = ncap;
    f->cap = nc;
  }
  int e = f->ne;
  f->to[e] = v, f->c[e] = c, f->next[e] = f->head[u], f->head[u] = e;
  f->to[e + 1] = u, f->c[e + 1] = 0, f->next[e + 1] = f->head[v], f->head[v] = e + 1;
  f->ne += 2;
}

static bool flow_bfs(flow *f, int s, int t) {
  for (int i = 0; i < f->n; i++) f->level[i] = -1;
  int qh = 0, qt = 0;
  f->level[s] = 0;
  f->q[qt++] = s;
  while (qh < qt) {
    int u = f->q[qh++];
    for (int e = f->head[u]; e >= 0; e = f->next[e])
      if (f->c[e] > 0 && f->level[f->to[e]] < 0) {
        f->level[f->to[e]] = f->level[u] + 1;
        f->q[qt++] = f->to[e];
      }
  }
  return f->level[t] >= 0;
}

/* Blocking flows along shortest paths until the sink is unreachable. Iterative: a path is a stack of
 * edges, each node's current arc in it[]. */
static void flow_max(flow *f, int s, int t) {
  while (flow_bfs(f, s, t)) {
    for (int i = 0; i < f->n; i++) f->it[i] = f->head[i];
    int depth = 0, u = s;
    for (;;) {
      if (u == t) {
        int64_t b = CAP_INF;
        for (int k = 0; k < depth; k++)
          if (f->c[f->stack[k]] < b) b = f->c[f->stack[k]];
        for (int k = 0; k < depth; k++) {
          f->c[f->stack[k]] -= b;
          f->c[f->stack[k] ^ 1] += b;
        }
        depth = 0;
        u = s;
        continue;
      }
      int e = f->it[u];
      while (e >= 0 && (f->c[e] <= 0 || f->level[f->to[e]] != f->level[u] + 1)) e = f->next[e];
      f->it[u] = e;
      if (e >= 0) {
        f->stack[depth++] = e;
        u = f->to[e];
        continue;
      }
      if (u == s) break;
      f->level[u] = -1; /* dead end */
      int back = f->stack[--depth];
      u = f->to[back ^ 1];
      f->it[u] = f->next[f->it[u]];
    }
  }
}

static void flow_free(flow *f) {
  th_free(f->head);
  th_free(f->next);
  th_free(f->to);
  th_free(f->c);
  th_free(f->level);
  th_free(f->it);
  th_free(f->q);
  th_free(f->stack);
}

/* ---- the forward's values ------------------------------------------------------------------------------- */

enum {
  F_UNSTABLE = 1, /* written by an in-place op, or a view relative of such a value */
  F_NEEDED = 2,   /* the backward reads it */
  F_RECOMP = 4,   /* recomputed in the backward */
  F_CUR = 8       /* an output of the bsym being copied (remap) */
};

typedef struct rctx {
  const th_trace *fwd;
  th_trace *bwd;
  uint32_t nid;
  uint8_t *fl;    /* by id */
  int32_t *prod;  /* by id: index of the forward bsym defining it, -1 */
  int32_t *node;  /* by id: index in the cut graph, -1 */
  int32_t *first; /* by id: the first backward bsym (or recomputed copy) reading it */
  th_value **bw;  /* by id: the backward's copy of a recomputed bsym's output */
  int8_t *cheap;  /* by forward bsym: -1 unknown, 0, 1 */
  th_value **cl;  /* the cut graph's values (closure) */
  int ncl;
  th_status st;
} rctx;

/* What a bsym reads, its subsymbols' reads included. */
static void bsym_reads(const th_bsym *b, void (*fn)(th_value *, void *), void *ctx) {
  th_bsym_foreach_value(b, TH_BSYM_INPUTS, fn, ctx);
  for (int i = 0; i < b->nsubs; i++) bsym_reads(b->subs[i], fn, ctx);
}

typedef struct flag_ctx {
  rctx *r;
  uint8_t set, test;
  bool hit;
} flag_ctx;

static void set_flag_cb(th_value *v, void *p) {
  flag_ctx *f = p;
  if (v->id >= f->r->nid || (f->r->fl[v->id] & f->set) == f->set) return;
  f->r->fl[v->id] |= f->set;
  f->hit = true; /* something changed */
}

static void test_flag_cb(th_value *v, void *p) {
  flag_ctx *f = p;
  if (v->id < f->r->nid && (f->r->fl[v->id] & f->test)) f->hit = true;
}

static bool any_flag(rctx *r, const th_bsym *b, uint8_t test, bool outs) {
  flag_ctx f = {r, 0, test, false};
  th_bsym_foreach_value(b, outs ? TH_BSYM_ALL : TH_BSYM_INPUTS, test_flag_cb, &f);
  return f.hit;
}

/* True if a flag was newly set. */
static bool set_flags(rctx *r, const th_bsym *b, uint8_t set, bool outs) {
  flag_ctx f = {r, set, 0, false};
  th_bsym_foreach_value(b, outs ? TH_BSYM_ALL : TH_BSYM_INPUTS, set_flag_cb, &f);
  return f.hit;
}

static bool writes_in_place(const th_bsym *b) {
  th_op_id id = b->sym->id;
  if (id == TH_OP_prims_copy_ || id == TH_OP_prims_update_aliases || (b->sym->tags & TH_TAG_IN_PLACE)) return true;
  for (int i = 0; i < b->nsubs; i++)
    if (writes_in_place(b->subs[i])) return true;
  return false;
}

/* ---- cheap ops ------------------------------------------------------------------------------------------ */

static bool cheap_prim(const th_bsym *b) {
  const th_symbol *s = b->sym;
  if (!s->is_prim || (int)s->id >= TH_OP_COUNT) return false;
  if (s->tags & (TH_TAG_RANDOM | TH_TAG_DONT_DCE | TH_TAG_IN_PLACE | TH_TAG_UTILITY | TH_TAG_MATMUL | TH_TAG_REDUCTION))
    return false;
  switch (s->id) {
    case TH_OP_prims_broadcast_in_dim:
    case TH_OP_prims_reshape:
    case TH_OP_prims_transpose:
    case TH_OP_prims_squeeze:
    case TH_OP_prims_slice_prim:
    case TH_OP_prims_stride_order:
    case TH_OP_prims_clone:
    case TH_OP_prims_full:
    case TH_OP_prims_iota:
    case TH_OP_prims_uniform_philox: return true;
    default: return (s->tags & TH_TAG_ELEMENTWISE) != 0;
  }
}

static bool cheap_rec(const th_bsym *b, int depth) {
  if (b->sym->is_prim) return cheap_prim(b);
  if ((int)b->sym->id >= TH_OP_COUNT || b->nsubs == 0 || depth > 64) return false;
  if (b->sym->tags & (TH_TAG_RANDOM | TH_TAG_DONT_DCE | TH_TAG_IN_PLACE | TH_TAG_UTILITY)) return false;
  for (int i = 0; i < b->nsubs; i++)
    if (!cheap_rec(b->subs[i], depth + 1)) return false;
  return true;
}

typedef struct tensors_ctx {
  int n;
  bool other;
} tensors_ctx;

static void tensors_cb(th_value *v, void *p) {
  tensors_ctx *t = p;
  if (v->is_tensor)
    t->n++;
  else
    t->other = true;
}

/* Forward bsym k may be copied into the backward. */
static bool cheap_bsym(rctx *r, int k) {
  if (r->cheap[k] >= 0) return r->cheap[k];
  const th_bsym *b = r->fwd->bsyms.items[k];
  tensors_ctx t = {0, false};
  th_arg_foreach_value(&b->out, tensors_cb, &t);
  bool ok = t.n > 0 && !t.other && cheap_rec(b, 0) && !any_flag(r, b, F_UNSTABLE, true);
  r->cheap[k] = ok;
  return ok;
}

static bool recomputable(rctx *r, const th_value *v) {
  return v->id < r->nid && v->is_tensor && r->prod[v->id] >= 0 && cheap_bsym(r, r->prod[v->id]);
}

/* ---- 2. the closure and the graph ----------------------------------------------------------------------- */

static void closure_add_cb(th_value *v, void *p) {
  rctx *r = p;
  if (r->st != TH_OK || v->is_collection || v->id >= r->nid || r->node[v->id] >= 0) return;
  r->node[v->id] = r->ncl;
  r->cl[r->ncl++] = v;
}

typedef struct edge_ctx {
  rctx *r;
  flow *f;
  int to;
} edge_ctx;

static void edge_cb(th_value *u, void *p) {
  edge_ctx *e = p;
  if (u->is_collection || u->id >= e->r->nid || e->r->node[u->id] < 0) return;
  flow_edge(e->f, 2 * e->r->node[u->id] + 1, e->to, CAP_INF);
}

/* ---- 4. copying into the backward ----------------------------------------------------------------------- */

static th_value *remap_cb(th_value *v, void *p) {
  rctx *r = p;
  if (v->id < r->nid && (r->fl[v->id] & (F_RECOMP | F_CUR)) && r->bw[v->id]) return r->bw[v->id];
  return v;
}

typedef struct first_ctx {
  rctx *r;
  int32_t at;
} first_ctx;

static void first_cb(th_value *v, void *p) {
  first_ctx *f = p;
  if (v->id < f->r->nid && (f->r->fl[v->id] & F_RECOMP) && f->at < f->r->first[v->id]) f->r->first[v->id] = f->at;
}

typedef struct pos_ctx {
  rctx *r;
  int32_t pos;
} pos_ctx;

static void pos_cb(th_value *v, void *p) {
  pos_ctx *c = p;
  if (v->id < c->r->nid && c->r->first[v->id] < c->pos) c->pos = c->r->first[v->id];
}

static void make_bw_cb(th_value *v, void *p) {
  rctx *r = p;
  if (r->st != TH_OK || v->id >= r->nid || r->bw[v->id]) return;
  th_value *n = th_value_new_tensor(r->bwd, v->dtype, v->device, v->ndim, v->shape, false);
  if (!n) {
    r->st = th_last_status() ? th_last_status() : TH_ERR_NOMEM;
    return;
  }
  char buf[160];
  snprintf(buf, sizeof buf, "bw_%s", v->name ? v->name : "t");
  size_t len = strlen(buf);
  for (int k = 0; th_name_used(r->bwd, buf); k++) snprintf(buf + len, sizeof buf - len, "_%d", k);
  r->st = th_value_set_name(r->bwd, n, buf);
  r->bw[v->id] = n;
}

static void clear_cur_cb(th_value *v, void *p) {
  rctx *r = p;
  if (v->id < r->nid) r->fl[v->id] &= (uint8_t)~F_CUR;
}

typedef struct rec_item {
  int32_t pos, k;
} rec_item;

static int rec_cmp(const void *a, const void *b) {
  const rec_item *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  return x->k < y->k ? -1 : x->k > y->k;
}

/* Copies the forward bsyms marked in rec into the backward (step 4 of the file comment). */
static th_status emit(rctx *r, const bool *rec, int *nrecomputed) {
  const th_trace *fwd = r->fwd;
  th_trace *bwd = r->bwd;
  int nf = fwd->bsyms.n, nb = bwd->bsyms.n, nrec = 0;
  /* every output of a recomputed bsym gets its backward copy, bw_<name> */
  for (int k = 0; k < nf && r->st == TH_OK; k++)
    if (rec[k]) {
      nrec++;
      th_arg_foreach_value(&((const th_bsym *)fwd->bsyms.items[k])->out, make_bw_cb, r);
    }
  TH_TRY(r->st);
  /* positions: a copy goes right before the first backward bsym that reads one of its outputs, or
   * before the copy of a recomputed consumer (consumers come later in the forward: reverse order) */
  for (uint32_t i = 0; i < r->nid; i++) r->first[i] = INT32_MAX;
  for (int i = 0; i < nb; i++) {
    first_ctx fc = {r, i};
    bsym_reads(bwd->bsyms.items[i], first_cb, &fc);
  }
  rec_item *items = th_malloc(sizeof(rec_item) * (size_t)(nrec ? nrec : 1));
  if (!items) return th_error(TH_ERR_NOMEM, "grad: out of memory");
  int ni = 0;
  for (int k = nf - 1; k >= 0; k--) {
    if (!rec[k]) continue;
    const th_bsym *b = fwd->bsyms.items[k];
    pos_ctx pc = {r, INT32_MAX};
    th_arg_foreach_value(&b->out, pos_cb, &pc);
    if (pc.pos == INT32_MAX) {
      th_free(items);
      return th_error(TH_ERR_RUNTIME, "grad: rematerialization: the recomputed %s has no use in the backward",
                      b->sym->qualname);
    }
    first_ctx fc = {r, pc.pos};
    bsym_reads(b, first_cb, &fc);
    items[ni].pos = pc.pos;
    items[ni].k = k;
    ni++;
  }
  qsort(items, (size_t)ni, sizeof *items, rec_cmp);
  /* the new body */
  th_vec body = bwd->bsyms;
  memset(&bwd->bsyms, 0, sizeof bwd->bsyms);
  th_status st = TH_OK;
  int next = 0;
  for (int i = 0; i < nb && st == TH_OK; i++) {
    for (; st == TH_OK && next < ni && items[next].pos == i; next++) {
      const th_bsym *fb = fwd->bsyms.items[items[next].k];
      flag_ctx f = {r, F_CUR, 0, false};
      th_arg_foreach_value(&fb->out, set_flag_cb, &f);
      th_bsym *copy;
      st = th_bsym_clone(bwd, fb, remap_cb, r, &copy);
      th_arg_foreach_value(&fb->out, clear_cur_cb, r);
      if (st == TH_OK) st = th_vec_push(bwd->arena, &bwd->bsyms, copy);
    }
    th_bsym *b = body.items[i];
    flag_ctx t = {r, 0, F_RECOMP, false};
    bsym_reads(b, test_flag_cb, &t);
    if (st == TH_OK && t.hit) st = th_bsym_clone(bwd, b, remap_cb, r, &b);
    if (st == TH_OK) st = th_vec_push(bwd->arena, &bwd->bsyms, b);
  }
  th_free(items);
  if (st == TH_OK && next != ni)
    st = th_error(TH_ERR_RUNTIME, "grad: rematerialization: a recomputed bsym was not placed");
  if (st == TH_OK && nrecomputed) *nrecomputed = ni;
  return st;
}

/* ---- the pass ------------------------------------------------------------------------------------------- */

typedef struct walk_ctx {
  rctx *r;
  const uint8_t *saved; /* by closure node */
  th_value **stack;
  int n;
  bool bad;
} walk_ctx;

static void walk_cb(th_value *u, void *p) {
  walk_ctx *w = p;
  rctx *r = w->r;
  if (u->is_collection || u->id >= r->nid || r->node[u->id] < 0) return;
  if (w->saved[r->node[u->id]] || (r->fl[u->id] & F_RECOMP)) return;
  if (!recomputable(r, u)) {
    w->bad = true;
    return;
  }
  r->fl[u->id] |= F_RECOMP;
  w->stack[w->n++] = u;
}

typedef struct prod_ctx {
  rctx *r;
  int32_t k;
} prod_ctx;

static void prod_cb(th_value *v, void *p) {
  prod_ctx *c = p;
  if (v->id < c->r->nid && c->r->prod[v->id] < 0) c->r->prod[v->id] = c->k;
}

static const th_bsym *producer(const rctx *r, const th_value *v) { return r->fwd->bsyms.items[r->prod[v->id]]; }

static th_status remat(rctx *r, int nneeded, th_value *const *needed, int *nrecomputed) {
  const th_trace *fwd = r->fwd;
  int nf = fwd->bsyms.n;
  /* 1. which forward bsym defines each value, and the values an in-place update reaches (a forward
   * input has no producer: it can only be saved) */
  for (int k = 0; k < nf; k++) {
    const th_bsym *b = fwd->bsyms.items[k];
    prod_ctx pc = {r, k};
    th_arg_foreach_value(&b->out, prod_cb, &pc);
    if (writes_in_place(b)) set_flags(r, b, F_UNSTABLE, true);
  }
  for (bool changed = true; changed;) { /* through views, both ways, to a fixed point */
    changed = false;
    for (int k = 0; k < nf; k++) {
      const th_bsym *b = fwd->bsyms.items[k];
      if ((b->sym->tags & TH_TAG_VIEW) && any_flag(r, b, F_UNSTABLE, true))
        changed |= set_flags(r, b, F_UNSTABLE, true);
    }
  }
  for (int i = 0; i < nneeded; i++)
    if (needed[i]->id < r->nid) r->fl[needed[i]->id] |= F_NEEDED;
  /* 2. the closure: the read values, and what their recomputable producers read, transitively */
  r->cl = th_malloc(sizeof(th_value *) * (r->nid ? r->nid : 1));
  if (!r->cl) return th_error(TH_ERR_NOMEM, "grad: out of memory");
  for (int i = 0; i < nneeded; i++) closure_add_cb(needed[i], r);
  for (int i = 0; i < r->ncl; i++)
    if (recomputable(r, r->cl[i])) th_bsym_foreach_value(producer(r, r->cl[i]), TH_BSYM_INPUTS, closure_add_cb, r);
  int m = r->ncl, S = 2 * m, T = 2 * m + 1;
  flow f = {0};
  f.n = 2 * m + 2;
  f.head = th_malloc(sizeof(int) * (size_t)f.n);
  f.level = th_malloc(sizeof(int) * (size_t)f.n);
  f.it = th_malloc(sizeof(int) * (size_t)f.n);
  f.q = th_malloc(sizeof(int) * (size_t)f.n);
  f.stack = th_malloc(sizeof(int) * (size_t)f.n);
  uint8_t *tside = th_calloc((size_t)f.n, 1), *saved = th_calloc((size_t)m + 1, 1);
  bool *rec = th_calloc((size_t)nf + 1, sizeof(bool));
  th_value **stack = th_malloc(sizeof(th_value *) * (size_t)(m + 1));
  th_status st = TH_OK;
  if (!f.head || !f.level || !f.it || !f.q || !f.stack || !tside || !saved || !rec || !stack)
    st = th_error(TH_ERR_NOMEM, "grad: out of memory");
  if (st == TH_OK) {
    for (int i = 0; i < f.n; i++) f.head[i] = -1;
    for (int k = 0; k < m; k++) {
      th_value *v = r->cl[k];
      flow_edge(&f, 2 * k, 2 * k + 1, th_grad_value_bytes(v));
      if (recomputable(r, v)) {
        edge_ctx e = {r, &f, 2 * k};
        th_bsym_foreach_value(producer(r, v), TH_BSYM_INPUTS, edge_cb, &e);
      } else {
        flow_edge(&f, S, 2 * k, CAP_INF);
      }
      if (r->fl[v->id] & F_NEEDED) flow_edge(&f, 2 * k + 1, T, CAP_INF);
    }
    if (f.oom) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
  }
  /* 3. the cut nearest the sink: nodes that reach the sink in the residual graph */
  if (st == TH_OK) {
    flow_max(&f, S, T);
    int qh = 0, qt = 0;
    tside[T] = 1;
    f.q[qt++] = T;
    while (qh < qt) {
      int v = f.q[qh++];
      for (int e = f.head[v]; e >= 0; e = f.next[e]) {
        int u = f.to[e];
        if (!tside[u] && f.c[e ^ 1] > 0) {
          tside[u] = 1;
          f.q[qt++] = u;
        }
      }
    }
    for (int k = 0; k < m; k++) saved[k] = !tside[2 * k] && tside[2 * k + 1];
  }
  /* 4. what is recomputed: unsaved reads, and the unsaved values their producers read */
  if (st == TH_OK) {
    walk_ctx w = {r, saved, stack, 0, false};
    for (int i = 0; i < nneeded; i++) walk_cb(needed[i], &w);
    while (w.n > 0 && !w.bad) {
      th_value *v = w.stack[--w.n];
      rec[r->prod[v->id]] = true;
      th_bsym_foreach_value(producer(r, v), TH_BSYM_INPUTS, walk_cb, &w);
    }
    if (w.bad)
      st = th_error(TH_ERR_RUNTIME, "grad: rematerialization: the cut leaves a value neither saved nor recomputable");
  }
  if (st == TH_OK) st = emit(r, rec, nrecomputed);
  flow_free(&f);
  th_free(tside);
  th_free(saved);
  th_free(rec);
  th_free(stack);
  return st;
}

th_status th_grad_remat(const th_trace *fwd, th_trace *bwd, int nneeded, th_value *const *needed, int *nrecomputed) {
  if (nrecomputed) *nrecomputed = 0;
  if (nneeded == 0) return TH_OK;
  uint32_t nid = th_trace_id_bound(fwd), nb = th_trace_id_bound(bwd);
  if (nb > nid) nid = nb;
  for (int i = 0; i < nneeded; i++)
    if (needed[i]->id + 1 > nid) nid = needed[i]->id + 1;
  rctx r;
  memset(&r, 0, sizeof r);
  r.fwd = fwd;
  r.bwd = bwd;
  r.nid = nid;
  r.fl = th_calloc(nid, 1);
  r.prod = th_malloc(sizeof(int32_t) * nid);
  r.node = th_malloc(sizeof(int32_t) * nid);
  r.first = th_malloc(sizeof(int32_t) * nid);
  r.bw = th_calloc(nid, sizeof(th_value *));
  r.cheap = th_malloc((size_t)(fwd->bsyms.n ? fwd->bsyms.n : 1));
  th_status st = TH_OK;
  if (!r.fl || !r.prod || !r.node || !r.first || !r.bw || !r.cheap) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
  if (st == TH_OK) {
    for (uint32_t i = 0; i < nid; i++) r.prod[i] = r.node[i] = -1;
    for (int i = 0; i < fwd->bsyms.n; i++) r.cheap[i] = -1;
    st = remat(&r, nneeded, needed, nrecomputed);
  }
  th_free(r.fl);
  th_free(r.prod);
  th_free(r.node);
  th_free(r.first);
  th_free(r.bw);
  th_free(r.cheap);
  th_free(r.cl);
  return st;
}
