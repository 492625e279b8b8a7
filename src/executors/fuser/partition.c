/* partition.c — grouping fusible top-level bsyms of an execution trace into fusion regions.
 *
 * A bsym joins the open region when it is fusible (nest.c), claimed by an executor listed after the
 * fuser, and the region with it still forms loop nests the codegen can lower (th_fz_plan_build); else
 * the open region closes and the bsym opens the next one. Strategies:
 *   - consecutive: a region is a run of adjacent fusible bsyms; any other bsym closes it;
 *   - dataflow (default): the region stays open across bsyms that do not use its values (it is placed
 *     at its last member, so those run before it). The first non-member consuming one of its computed
 *     values seals it: the region must then run before that bsym (its limit), and a later bsym joins
 *     only if everything it reads was made before the limit or by the region (a recomputed GELU in a
 *     backward and its gradient, with the weight-gradient GEMM between them, become one region); the
 *     region is then emitted right before its limit. A fusible bsym no region can hold (a sum over
 *     dims that are neither a prefix nor a suffix) is a non-member, not the end of the open region.
 *     The region closes when a bsym starts a region of its own, at a bsym reading what was made after
 *     its limit, and at every effect (copy_, update_aliases, random, DONT_DCE, in-place) and the
 *     return, which nothing moves across.
 * Independent chains (different shapes, different reductions) join one region as separate nests: this
 * is the horizontal merge of adjacent independent regions, done while the region grows.
 *
 * Layout ops of region inputs (INVIEW members) are only worth fusing when the region alone reads them:
 * one whose value a non-member uses (or no member reads) is evicted, with the INVIEW ops it reads from,
 * and stays where it was as the eager view it is (a non-member consuming only such values does not
 * close a region). A region left with fewer than two computing members is dissolved: its bsyms stay as
 * they are, in place. Region inputs are the tensors its members use and do not produce (in order of
 * first use); its outputs the values it produces that anything outside uses (the return included), in
 * program order, as a LIST. Moving a region to its last member (or before its limit) never crosses a bsym
 * it depends on, one that depends on it, or an effect; the return stays last. A sealed region whose
 * later members would read an evicted INVIEW value made after the limit is dissolved. */
#include <string.h>

#include "executors/fuser/fuser.h"
#include "core/ir.h"

typedef struct {
  int *m; /* member indices, program order */
  int n, cap;
  int limit; /* dataflow: the first non-member using a computed value of the group (the region runs
                before it), -1 while none has */
} group;

typedef struct {
  const th_trace *et;
  int n;      /* bsyms */
  int *grp;   /* per bsym: its group, -1 */
  int *owner; /* value id -> group producing it, -1 */
  int *prod;  /* value id -> the bsym index producing it, -1 for trace inputs */
  uint32_t nids;
  group *g;
  int ng;
  const th_bsym **buf; /* scratch: a group's bsyms */
} part_ctx;

static const th_bsym *bsym(const part_ctx *c, int i) { return c->et->bsyms.items[i]; }

bool th_fuser_is_effect(const th_bsym *b) {
  return th_bsym_has_effect(b) || b->sym->id == TH_OP_prims_update_aliases || b->sym->id == TH_OP_prims_copy_ ||
         b->sym->id == TH_OP_prims_python_return;
}

static bool claimed_by(const th_bsym *b, const char *const *after, int nafter) {
  if (!after) return true;
  if (!b->executor) return false;
  for (int i = 0; i < nafter; i++)
    if (after[i] && !strcmp(after[i], b->executor)) return true;
  return false;
}

typedef struct {
  part_ctx *c;
  const th_value *v[TH_MAX_DIMS * 8];
  int n;
  bool overflow;
} vals_ctx;

static void out_cb(th_value *v, void *p) {
  vals_ctx *x = p;
  if (x->n < (int)(sizeof x->v / sizeof *x->v))
    x->v[x->n++] = v;
  else
    x->overflow = true;
}

static void set_owner(part_ctx *c, const th_bsym *b, int g) {
  vals_ctx x = {c, {0}, 0, false};
  th_arg_foreach_value(&b->out, out_cb, &x);
  for (int k = 0; k < x.n; k++)
    if (x.v[k]->id < c->nids) c->owner[x.v[k]->id] = g;
}

static th_status push(group *g, int i) {
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 8;
    int *m = th_realloc(g->m, sizeof(int) * (size_t)cap);
    if (!m) return TH_ERR_NOMEM;
    g->m = m;
    g->cap = cap;
  }
  g->m[g->n++] = i;
  return TH_OK;
}

/* The plan of group g's members, plus bsym `extra` when >= 0. */
static th_status plan_of(part_ctx *c, int g, int extra, th_fz_plan *plan) {
  int n = 0;
  for (int k = 0; k < c->g[g].n; k++) c->buf[n++] = bsym(c, c->g[g].m[k]);
  if (extra >= 0) c->buf[n++] = bsym(c, extra);
  return th_fz_plan_build(c->buf, n, plan);
}

/* ---- uses of a group's values ------------------------------------------------------------------------ */
/* cb(v, p) for every value b reads (arguments and keyword arguments, collections included) */
static void foreach_read(const th_bsym *b, void (*cb)(th_value *, void *), void *p) {
  th_bsym_foreach_value(b, TH_BSYM_INPUTS, cb, p);
}

typedef struct {
  const th_value *v;
  bool hit;
} reads_ctx;

static void reads_cb(th_value *v, void *p) {
  reads_ctx *r = p;
  if (v == r->v) r->hit = true;
}

bool th_fuser_bsym_reads(const th_bsym *b, const th_value *v) {
  reads_ctx r = {v, false};
  foreach_read(b, reads_cb, &r);
  return r.hit;
}

typedef struct {
  const part_ctx *c;
  int g;
  bool hit;
} use_ctx;

static void uses_cb(th_value *v, void *p) {
  use_ctx *u = p;
  if (v->id < u->c->nids && u->c->owner[v->id] == u->g) u->hit = true;
}

static bool uses_group(const part_ctx *c, const th_bsym *b, int g) {
  use_ctx u = {c, g, false};
  foreach_read(b, uses_cb, &u);
  return u.hit;
}

/* b may join sealed group g: each value it reads is a trace input, made before g's limit, or g's own. */
typedef struct {
  const part_ctx *c;
  int g;
  bool ok;
} deps_ctx;

static void deps_cb(th_value *v, void *p) {
  deps_ctx *d = p;
  if (v->id >= d->c->nids) return;
  int pi = d->c->prod[v->id];
  if (pi >= 0 && pi >= d->c->g[d->g].limit && d->c->grp[pi] != d->g) d->ok = false;
}

static bool reads_before_limit(const part_ctx *c, const th_bsym *b, int g) {
  deps_ctx d = {c, g, true};
  foreach_read(b, deps_cb, &d);
  return d.ok;
}

/* Member k of g (a bsym index) produces v. */
static int producer_in(const part_ctx *c, int g, const th_value *v) {
  for (int k = 0; k < c->g[g].n; k++) {
    const th_bsym *b = bsym(c, c->g[g].m[k]);
    vals_ctx x = {NULL, {0}, 0, false};
    th_arg_foreach_value(&b->out, out_cb, &x);
    for (int j = 0; j < x.n; j++)
      if (x.v[j] == v) return k;
  }
  return -1;
}

static bool is_layout_op(const th_bsym *b) {
  th_op_id id = b->sym->id;
  return id == TH_OP_prims_broadcast_in_dim || id == TH_OP_prims_reshape || id == TH_OP_prims_transpose ||
         id == TH_OP_prims_slice_prim || id == TH_OP_prims_squeeze || id == TH_OP_prims_stride_order;
}

/* An INVIEW member of g: a layout op whose operand no computing member of g produces. */
static bool inview(const part_ctx *c, int g, int k) {
  const th_bsym *b = bsym(c, c->g[g].m[k]);
  if (!is_layout_op(b)) return false;
  int p = producer_in(c, g, b->args[0].u.value);
  return p < 0 || inview(c, g, p);
}

/* Removes member k of g and, when it is INVIEW, the INVIEW members it reads from. */
static void evict(part_ctx *c, int g, int k) {
  int i = c->g[g].m[k];
  const th_bsym *b = bsym(c, i);
  int p = producer_in(c, g, b->args[0].u.value);
  memmove(c->g[g].m + k, c->g[g].m + k + 1, sizeof(int) * (size_t)(c->g[g].n - k - 1));
  c->g[g].n--;
  c->grp[i] = -1;
  set_owner(c, b, -1);
  if (p >= 0) evict(c, g, p); /* p < k: still at its index */
}

/* b (a non-member) uses g's values: if they are all INVIEW outputs, evict those and return true. */
static bool evict_for(part_ctx *c, int g, const th_bsym *b) {
  vals_ctx x = {c, {0}, 0, false};
  foreach_read(b, out_cb, &x);
  if (x.overflow) return false;
  for (int j = 0; j < x.n; j++) {
    if (x.v[j]->id >= c->nids || c->owner[x.v[j]->id] != g) continue;
    int k = producer_in(c, g, x.v[j]);
    if (k < 0 || !inview(c, g, k)) return false;
  }
  for (int j = 0; j < x.n; j++) {
    if (x.v[j]->id >= c->nids || c->owner[x.v[j]->id] != g) continue;
    evict(c, g, producer_in(c, g, x.v[j]));
  }
  return true;
}

/* ---- closing a region: evictions, dissolving ---------------------------------------------------------- */
typedef struct {
  const part_ctx *c;
  bool *used;
} mark_ctx;

static void mark_cb(th_value *v, void *p) {
  mark_ctx *m = p;
  if (v->id < m->c->nids) m->used[v->id] = true;
}

/* used[id]: v is used by a bsym outside group g (or returned). */
static void mark_outside_uses(const part_ctx *c, int g, bool *used) {
  memset(used, 0, sizeof(bool) * c->nids);
  mark_ctx m = {c, used};
  for (int i = 0; i < c->n; i++) {
    if (c->grp[i] == g) continue;
    foreach_read(bsym(c, i), mark_cb, &m);
  }
}

/* Some member of g reads v. */
static bool read_inside(const part_ctx *c, int g, const th_value *v) {
  for (int k = 0; k < c->g[g].n; k++)
    if (th_fuser_bsym_reads(bsym(c, c->g[g].m[k]), v)) return true;
  return false;
}

static th_status close_group(part_ctx *c, int g, bool *used) {
  for (bool again = true; again;) {
    again = false;
    mark_outside_uses(c, g, used);
    for (int k = c->g[g].n - 1; k >= 0 && !again; k--) {
      if (!inview(c, g, k)) continue;
      const th_bsym *b = bsym(c, c->g[g].m[k]);
      const th_value *v = b->out.u.value;
      if ((v->id < c->nids && used[v->id]) || !read_inside(c, g, v)) {
        evict(c, g, k);
        again = true;
      }
    }
  }
  /* a sealed group whose later members now read a value made from its limit on (an INVIEW member
   * after the limit evicted above) cannot run before the limit: dissolve it */
  bool late_read = false;
  for (int k = 0; k < c->g[g].n && c->g[g].limit >= 0 && !late_read; k++)
    if (c->g[g].m[k] > c->g[g].limit && !reads_before_limit(c, bsym(c, c->g[g].m[k]), g)) late_read = true;
  int computing = 0;
  for (int k = 0; k < c->g[g].n && !late_read; k++) computing += !inview(c, g, k);
  th_status st = TH_OK;
  if (computing >= 2) {
    st = plan_of(c, g, -1, NULL);
    if (st == TH_ERR_NOMEM) return st;
  }
  if (computing < 2 || st != TH_OK) { /* dissolve */
    for (int k = 0; k < c->g[g].n; k++) {
      c->grp[c->g[g].m[k]] = -1;
      set_owner(c, bsym(c, c->g[g].m[k]), -1);
    }
    c->g[g].n = 0;
  }
  return TH_OK;
}

/* ---- the region bsym ---------------------------------------------------------------------------------- */
static void push_unique(th_vec *v, th_value *x, th_arena *a, th_status *st) {
  for (int i = 0; i < v->n; i++)
    if (v->items[i] == x) return;
  if (*st == TH_OK) *st = th_vec_push(a, v, x);
}

static th_status make_region(part_ctx *c, th_trace *nt, int g, bool *used, int *counter, th_bsym **out) {
  th_status st = TH_OK;
  th_vec ins = {0}, subs = {0}, outs = {0};
  mark_outside_uses(c, g, used);
  for (int k = 0; k < c->g[g].n && st == TH_OK; k++) {
    const th_bsym *b = bsym(c, c->g[g].m[k]);
    for (int i = 0; i < b->nargs; i++)
      if (b->args[i].kind == TH_ARG_VALUE &&
          (b->args[i].u.value->id >= c->nids || c->owner[b->args[i].u.value->id] != g))
        push_unique(&ins, b->args[i].u.value, nt->arena, &st);
    vals_ctx x = {c, {0}, 0, false};
    th_arg_foreach_value(&b->out, out_cb, &x);
    for (int j = 0; j < x.n; j++)
      if (x.v[j]->id < c->nids && used[x.v[j]->id]) push_unique(&outs, (th_value *)x.v[j], nt->arena, &st);
    th_bsym *cl;
    if (st == TH_OK) st = th_bsym_clone(nt, b, NULL, NULL, &cl);
    if (st == TH_OK) {
      cl->executor = NULL;
      st = th_vec_push(nt->arena, &subs, cl);
    }
  }
  if (st != TH_OK) return st;
  th_arg *args = th_arena_alloc(nt->arena, sizeof(th_arg) * (size_t)(ins.n ? ins.n : 1));
  th_arg *oitems = th_arena_alloc(nt->arena, sizeof(th_arg) * (size_t)(outs.n ? outs.n : 1));
  char name[32];
  snprintf(name, sizeof name, "fusion%d", (*counter)++);
  th_symbol *sym = th_symbol_new_dynamic(nt, name);
  if (!args || !oitems || !sym) return TH_ERR_NOMEM;
  for (int i = 0; i < ins.n; i++) args[i] = th_arg_value(ins.items[i]);
  for (int i = 0; i < outs.n; i++) oitems[i] = th_arg_value(outs.items[i]);
  th_bsym *r = th_bsym_new(nt, sym, ins.n, args, th_arg_list(outs.n, oitems));
  if (!r) return TH_ERR_NOMEM;
  r->nsubs = subs.n;
  r->subs = (th_bsym **)subs.items;
  if (!(r->executor = th_arena_strdup(nt->arena, "fuser"))) return TH_ERR_NOMEM;
  *out = r;
  return TH_OK;
}

/* Sinking: a convert_element_type of a GEMM's result (its rounding to bf16) is moved to just before its
 * first consumer (or the first effect, the return included). The bf16 GEMMs spelled out for the fuser
 * (passes.c) put such a convert right after every GEMM; in a backward, the one of a weight gradient
 * would otherwise sit between a recomputed GELU's region and the GELU gradient that could join it, and
 * end that region. A pure op moved later, still before anything that reads it, changes no result.
 * Fills order[] (et's bsym indices in the new order); flags: 2 * n scratch booleans. */
static void sink_converts(const th_trace *et, const char *const *after, int nafter, const int *prod, uint32_t nids,
                          int *order, bool *flags) {
  int n = et->bsyms.n, k = 0;
  bool *moved = flags, *emitted = flags + n;
  for (int i = 0; i < n; i++) {
    const th_bsym *b = et->bsyms.items[i];
    moved[i] = emitted[i] = false;
    if (b->sym->id != TH_OP_prims_convert_element_type || b->out.kind != TH_ARG_VALUE || b->nargs < 1 ||
        b->args[0].kind != TH_ARG_VALUE || b->args[0].u.value->id >= nids || !claimed_by(b, after, nafter))
      continue;
    int pi = prod[b->args[0].u.value->id];
    const th_bsym *pb = pi >= 0 ? et->bsyms.items[pi] : NULL;
    moved[i] = pb && (pb->sym->id == TH_OP_prims_matmul || pb->sym->id == TH_OP_prims_linear);
  }
  for (int i = 0; i < n; i++) {
    const th_bsym *b = et->bsyms.items[i];
    for (int j = 0; j < i; j++)
      if (moved[j] && !emitted[j] &&
          (th_fuser_is_effect(b) || th_fuser_bsym_reads(b, ((const th_bsym *)et->bsyms.items[j])->out.u.value))) {
        order[k++] = j;
        emitted[j] = true;
      }
    if (!moved[i]) order[k++] = i;
  }
  for (int j = 0; j < n; j++) /* read by nothing, and no return after them: last */
    if (moved[j] && !emitted[j]) order[k++] = j;
}

/* ---- the pass ------------------------------------------------------------------------------------------ */
th_status th_fuser_partition(const th_trace *et, th_fuser_strategy strat, const char *const *after, int nafter,
                             th_trace **out) {
  *out = NULL;
  part_ctx c;
  memset(&c, 0, sizeof c);
  c.et = et;
  c.n = et->bsyms.n;
  c.nids = th_trace_id_bound(et);
  if (c.nids < 1) c.nids = 1;
  size_t nb = (size_t)(c.n ? c.n : 1);
  c.grp = th_malloc(sizeof(int) * nb);
  c.owner = th_malloc(sizeof(int) * c.nids);
  c.prod = th_malloc(sizeof(int) * c.nids);
  c.g = th_calloc(nb, sizeof(group));
  c.buf = th_malloc(sizeof(th_bsym *) * (nb + 1));
  bool *used = th_malloc(sizeof(bool) * (c.nids > 2 * nb ? c.nids : 2 * nb)); /* also sink_converts' flags */
  int *last = th_malloc(sizeof(int) * nb);                                    /* also sink_converts' order */
  void **sorted = th_malloc(sizeof(void *) * nb);
  th_trace shallow;
  th_trace *nt = th_trace_derive(et, et->fn_name);
  th_status st = TH_OK;
  if (!c.grp || !c.owner || !c.prod || !c.g || !c.buf || !used || !last || !sorted || !nt) {
    st = TH_ERR_NOMEM;
    goto done;
  }
  for (uint32_t i = 0; i < c.nids; i++) c.owner[i] = c.prod[i] = -1;
  for (int i = 0; i < c.n; i++) {
    vals_ctx x = {&c, {0}, 0, false};
    th_arg_foreach_value(&bsym(&c, i)->out, out_cb, &x);
    for (int k = 0; k < x.n; k++)
      if (x.v[k]->id < c.nids) c.prod[x.v[k]->id] = i;
  }
  if (strat == TH_FUSER_DATAFLOW) { /* the walk below runs over the sunk order */
    sink_converts(et, after, nafter, c.prod, c.nids, last, used);
    for (int i = 0; i < c.n; i++) sorted[i] = et->bsyms.items[last[i]];
    shallow = *et;
    shallow.bsyms.items = (void **)sorted;
    c.et = &shallow;
    for (int i = 0; i < c.n; i++) { /* producers in the new order */
      vals_ctx x = {&c, {0}, 0, false};
      th_arg_foreach_value(&bsym(&c, i)->out, out_cb, &x);
      for (int k = 0; k < x.n; k++)
        if (x.v[k]->id < c.nids) c.prod[x.v[k]->id] = i;
    }
  }
  for (int i = 0; i < c.n; i++) c.grp[i] = -1; /* read ahead by the closing checks */
  int open = -1;
  for (int i = 0; i < c.n && st == TH_OK; i++) {
    const th_bsym *b = bsym(&c, i);
    if (claimed_by(b, after, nafter) && th_fuser_is_fusible_member(b)) {
      if (open >= 0 && c.g[open].limit >= 0 && !reads_before_limit(&c, b, open)) {
        /* it reads something made at or after the limit: it cannot run before the region */
        st = close_group(&c, open, used);
        open = -1;
        if (st != TH_OK) break;
      }
      if (open >= 0) {
        st = plan_of(&c, open, i, NULL);
        if (st == TH_ERR_NOMEM) break;
        if (st == TH_OK) {
          st = push(&c.g[open], i);
          c.grp[i] = open;
          set_owner(&c, b, open);
          continue;
        }
      }
      const th_bsym *one[1] = {b};
      st = th_fz_plan_build(one, 1, NULL);
      if (st == TH_ERR_NOMEM) break;
      if (st == TH_OK && open >= 0) { /* b starts a region of its own: the open one ends */
        st = close_group(&c, open, used);
        open = -1;
        if (st != TH_OK) break;
      }
      if (st == TH_OK) {
        open = c.ng++;
        c.g[open].limit = -1;
        st = push(&c.g[open], i);
        c.grp[i] = open;
        set_owner(&c, b, open);
        continue;
      }
      st =
        TH_OK; /* no region can hold it (reduced dims neither a prefix nor a suffix): a non-member, the region stays */
    }
    if (open < 0) continue;
    bool close = strat == TH_FUSER_CONSECUTIVE || th_fuser_is_effect(b);
    if (!close && uses_group(&c, b, open) && !evict_for(&c, open, b) && c.g[open].limit < 0)
      c.g[open].limit = i; /* dataflow: sealed — later members must run before b too */
    if (close) {
      st = close_group(&c, open, used);
      open = -1;
    }
  }
  if (st == TH_OK && open >= 0) st = close_group(&c, open, used);
  if (st != TH_OK) goto done;
  /* emit: every non-member in place, each region at its last member, or right before its limit when
   * members joined after it (they read nothing made from the limit on: reads_before_limit) */
  for (int g = 0; g < c.ng; g++) last[g] = -1;
  for (int i = 0; i < c.n; i++)
    if (c.grp[i] >= 0) last[c.grp[i]] = i;
  for (int g = 0; g < c.ng; g++)
    if (c.g[g].n > 0 && c.g[g].limit >= 0 && last[g] > c.g[g].limit) last[g] = -2 - c.g[g].limit;
  int counter = 0;
  for (int i = 0; i < c.n && st == TH_OK; i++) {
    int g = c.grp[i];
    th_bsym *cl = NULL;
    for (int h = 0; h < c.ng && st == TH_OK; h++) /* regions that must run before bsym i */
      if (last[h] == -2 - i) {
        st = make_region(&c, nt, h, used, &counter, &cl);
        if (st == TH_OK) st = th_vec_push(nt->arena, &nt->bsyms, cl);
      }
    if (st != TH_OK) break;
    if (g < 0)
      st = th_bsym_clone(nt, bsym(&c, i), NULL, NULL, &cl);
    else if (i == last[g])
      st = make_region(&c, nt, g, used, &counter, &cl);
    else
      continue;
    if (st == TH_OK) st = th_vec_push(nt->arena, &nt->bsyms, cl);
    if (st == TH_OK && cl->sym->id == TH_OP_prims_python_return) nt->has_return = true;
  }
  for (int i = 0; i < et->inputs.n && st == TH_OK; i++) st = th_vec_push(nt->arena, &nt->inputs, et->inputs.items[i]);
done:
  if (c.g)
    for (int g = 0; g < c.ng; g++) th_free(c.g[g].m);
  th_free(c.g);
  th_free(c.grp);
  th_free(c.owner);
  th_free(c.prod);
  th_free(c.buf);
  th_free(used);
  th_free(last);
  th_free(sorted);
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM)
      th_error(TH_ERR_NOMEM, "out of memory in the fusion pass");
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  return TH_OK;
}
