/* grad.c — the grad transform (thunder/transform.h th_transform_grad): reverse-mode autodiff of a
 * trace into an augmented forward trace and a backward trace, as Thunder's grad_transform_on_trace and
 * split_into_forward_and_backward print them.
 *
 * The pipeline:
 *   1. forward walk over tr's top-level bsyms, tracking which values depend differentiably on the
 *      inputs that require grad ("tracked": floating tensors only). A bsym with no tracked argument, or
 *      whose op is non-differentiable (ops/vjp.h TH_VJP_NONDIFF), is copied to the forward as it is. One
 *      with a vjp rule is copied and put on the tape; its floating outputs become tracked. One without a
 *      rule is replaced by its decomposition (its subsymbols, or the decomposition recorded again when a
 *      parsed trace printed none), walked in its place: torch-level ops get their gradients through
 *      prims by default. A prim without a rule on the gradient path is an error.
 *   2. one cotangent value per tensor of tr's return (the backward's `cotangents`), seeding the
 *      cotangent map (by value id).
 *   3. backward walk over the tape in reverse: each rule records, into the backward trace, the ops
 *      computing its inputs' cotangents from its outputs'; cotangents reaching one value are summed with
 *      ltorch.add. The backward returns one gradient per input (None when not requested or not reached)
 *      and is dead-code-eliminated.
 *   4. saved for backward: the forward values the backward reads (choose_saved), after
 *      rematerialization (remat.c, on by default) has made the backward recompute cheap intermediates
 *      (elementwise and layout ops) from a minimum-bytes set of them; split into tensors and numbers, in
 *      forward order. The backward gets its inputs (the collections saved_for_backward and cotangents)
 *      and the unpacking lines; the forward returns Thunder's dict plus the saved values and is
 *      dead-code-eliminated against that return. Both are verified.
 *
 * Values are shared by identity between tr, the forward and the backward (one session): the backward's
 * `t0, x, = C0` defines the very forward values the rules read. */
#include <string.h>

#include "ops/vjp.h"
#include "thunder/transform.h"
#include "transforms/remat.h"
#include "transforms/transforms.h"

typedef struct gctx {
  const th_trace *src;
  th_trace *fwd, *bwd;
  /* by value id (grown on demand) */
  uint32_t cap;
  bool *tracked;
  th_arg *ct;     /* the cotangent accumulated for a value (VALUE) or NONE */
  int32_t *rank;  /* forward definition order + 1 (0: not a forward value) */
  th_vec tape;    /* const th_bsym*: forward bsyms with rules, in order (fwd's copies) */
  const bool *rg; /* per input */
  bool remat;     /* rematerialize (remat.c) before choosing the saved values */
} gctx;

static th_status grow(gctx *c, uint32_t id) {
  if (id < c->cap) return TH_OK;
  uint32_t n = c->cap ? c->cap : 256;
  while (n <= id) n *= 2;
  bool *t = th_realloc(c->tracked, n);
  if (!t) return th_error(TH_ERR_NOMEM, "grad: out of memory");
  c->tracked = t;
  th_arg *ct = th_realloc(c->ct, sizeof(th_arg) * n);
  if (!ct) return th_error(TH_ERR_NOMEM, "grad: out of memory");
  c->ct = ct;
  int32_t *r = th_realloc(c->rank, sizeof(int32_t) * n);
  if (!r) return th_error(TH_ERR_NOMEM, "grad: out of memory");
  c->rank = r;
  for (uint32_t i = c->cap; i < n; i++) {
    c->tracked[i] = false;
    c->ct[i] = th_arg_none();
    c->rank[i] = 0;
  }
  c->cap = n;
  return TH_OK;
}

static bool is_tracked(const gctx *c, const th_value *v) { return v->id < c->cap && c->tracked[v->id]; }

/* ---- value helpers ------------------------------------------------------------------------------------ */

typedef struct vlist {
  th_value **v;
  int n, cap;
  bool oom;
} vlist;

static void vlist_cb(th_value *v, void *p) {
  vlist *l = p;
  if (l->oom) return;
  if (l->n == l->cap) {
    int nc = l->cap ? l->cap * 2 : 8;
    th_value **nv = th_realloc(l->v, sizeof(th_value *) * (size_t)nc);
    if (!nv) {
      l->oom = true;
      return;
    }
    l->v = nv;
    l->cap = nc;
  }
  l->v[l->n++] = v;
}

/* The values of an arg, flattened in th_arg_foreach_value order. */
static th_status values_of(const th_arg *a, vlist *l) {
  th_arg_foreach_value(a, vlist_cb, l);
  return l->oom ? th_error(TH_ERR_NOMEM, "grad: out of memory") : TH_OK;
}

typedef struct any_ctx {
  const gctx *c;
  bool hit;
} any_ctx;

static void any_tracked_cb(th_value *v, void *p) {
  any_ctx *a = p;
  if (is_tracked(a->c, v)) a->hit = true;
}

static bool args_tracked(const gctx *c, const th_bsym *b) {
  any_ctx a = {c, false};
  th_bsym_foreach_value(b, TH_BSYM_INPUTS, any_tracked_cb, &a);
  return a.hit;
}

typedef struct mark_ctx {
  gctx *c;
  th_status st;
} mark_ctx;

static void mark_cb(th_value *v, void *p) {
  mark_ctx *m = p;
  if (m->st != TH_OK) return;
  if ((m->st = grow(m->c, v->id)) != TH_OK) return;
  if (v->is_tensor && th_dtype_is_float(v->dtype) && !th_dtype_is_fp8(v->dtype)) m->c->tracked[v->id] = true;
}

/* ---- 1. the forward walk -------------------------------------------------------------------------------- */

static th_status fwd_bsym(gctx *c, const th_bsym *b, int depth);

/* Appends a copy of b to the forward; *copy (may be NULL) receives it. */
static th_status fwd_copy(gctx *c, const th_bsym *b, th_bsym **copy) {
  th_bsym *nb;
  TH_TRY(th_bsym_clone(c->fwd, b, NULL, NULL, &nb));
  TH_TRY(th_vec_push(c->fwd->arena, &c->fwd->bsyms, nb));
  if (copy) *copy = nb;
  return TH_OK;
}

typedef struct remap {
  vlist from;
  th_value **to;
} remap;

static th_value *remap_fn(th_value *v, void *p) {
  remap *r = p;
  for (int i = 0; i < r->from.n; i++)
    if (r->from.v[i] == v) return r->to[i];
  return v;
}

/* b has no subsymbols (a trace parsed at print depth 1): its decomposition is recorded again on its own
 * arguments, its results renamed to b's outputs, and walked in b's place; or, with `whole` (an op with a
 * vjp rule), b recorded again with its decomposition as subsymbols, returned in *whole for the caller to
 * append, so the forward shows what it is made of (rematerialization recomputes a torch-level op whose
 * subsymbols are all cheap prims). */
static th_status redecompose(gctx *c, const th_bsym *b, int depth, th_bsym **whole) {
  const th_symbol *sym = b->sym;
  int np = sym->schema.nparams, npos = 0, nkw = 0;
  if (b->nargs != np || np > 64)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "grad: cannot decompose %s (its arguments do not match its schema)",
                    sym->qualname);
  th_arg pos[64], kw[64];
  const char *kwn[64];
  for (int i = 0; i < np; i++) {
    if (sym->schema.params[i].kwonly) {
      kwn[nkw] = sym->schema.params[i].name;
      kw[nkw++] = b->args[i];
    } else {
      pos[npos++] = b->args[i];
    }
  }
  th_trace *scratch = th_trace_derive(c->fwd, NULL);
  if (!scratch) return th_error(TH_ERR_NOMEM, "grad: out of memory");
  th_arg out;
  remap r = {{0}, NULL};
  vlist to = {0};
  th_status st = th_call_kw(scratch, sym, npos, pos, nkw, kwn, kw, &out);
  if (st == TH_OK && scratch->bsyms.n != 1)
    st = th_error(TH_ERR_RUNTIME, "grad: decomposing %s recorded %d bsyms", sym->qualname, scratch->bsyms.n);
  const th_bsym *nb = st == TH_OK ? scratch->bsyms.items[0] : NULL;
  if (st == TH_OK) st = values_of(&nb->out, &r.from);
  if (st == TH_OK) st = values_of(&b->out, &to);
  if (st == TH_OK && r.from.n != to.n)
    st = th_error(TH_ERR_RUNTIME, "grad: decomposing %s again gave %d outputs, not %d", sym->qualname, r.from.n, to.n);
  r.to = to.v;
  if (whole && st == TH_OK) st = th_bsym_clone(c->fwd, nb, remap_fn, &r, whole);
  for (int i = 0; !whole && st == TH_OK && i < nb->nsubs; i++) {
    th_bsym *sub;
    st = th_bsym_clone(c->fwd, nb->subs[i], remap_fn, &r, &sub);
    if (st == TH_OK) st = fwd_bsym(c, sub, depth + 1);
  }
  th_free(r.from.v);
  th_free(to.v);
  th_trace_free(scratch);
  return st;
}

static bool is_input(const gctx *c, const th_value *v, bool *rg) {
  for (int i = 0; i < c->src->inputs.n; i++)
    if (c->src->inputs.items[i] == v) {
      *rg = c->rg[i];
      return true;
    }
  return false;
}

static th_status fwd_bsym(gctx *c, const th_bsym *b, int depth) {
  const th_symbol *sym = b->sym;
  if (sym->id == TH_OP_prims_python_del) return TH_OK;
  if (sym->id == TH_OP_prims_comment) return depth == 0 ? fwd_copy(c, b, NULL) : TH_OK;
  if (sym->id == TH_OP_prims_unpack_sequence)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "grad: cannot differentiate a trace with collection inputs (a backward "
                                            "trace: double backward is not supported)");
  if (sym->id == TH_OP_prims_python_return || (sym->tags & TH_TAG_UTILITY))
    return th_error(TH_ERR_VALUE, "grad: unexpected %s in the trace body", sym->qualname);
  if (!args_tracked(c, b)) return fwd_copy(c, b, NULL);
  if (sym->id == TH_OP_prims_copy_ && b->nargs >= 2 && b->args[1].kind == TH_ARG_VALUE) {
    bool rg = false;
    if (is_input(c, b->args[1].u.value, &rg) && rg)
      return th_error(TH_ERR_RUNTIME,
                      "grad: a leaf Variable that requires grad is being used in an in-place operation. (input "
                      "'%s' is updated in place)",
                      b->args[1].u.value->name ? b->args[1].u.value->name : "?");
  }
  const th_vjp_entry *e = (int)sym->id < TH_OP_COUNT ? th_vjp_get(sym->id) : NULL;
  if (e && e->kind == TH_VJP_NONDIFF) return fwd_copy(c, b, NULL);
  if (e && e->kind == TH_VJP_RULE) {
    th_bsym *copy;
    if (b->nsubs == 0 && !sym->is_prim) {
      TH_TRY(redecompose(c, b, depth, &copy));
      TH_TRY(th_vec_push(c->fwd->arena, &c->fwd->bsyms, copy));
    } else {
      TH_TRY(fwd_copy(c, b, &copy));
    }
    TH_TRY(th_vec_push(c->fwd->arena, &c->tape, copy));
    mark_ctx m = {c, TH_OK};
    th_arg_foreach_value(&b->out, mark_cb, &m);
    return m.st;
  }
  if (depth > 64) return th_error(TH_ERR_VALUE, "grad: decompositions nested too deeply at %s", sym->qualname);
  if (b->nsubs > 0) {
    for (int i = 0; i < b->nsubs; i++) TH_TRY(fwd_bsym(c, b->subs[i], depth + 1));
    return TH_OK;
  }
  if (!sym->is_prim && (int)sym->id < TH_OP_COUNT) return redecompose(c, b, depth, NULL);
  return th_error(TH_ERR_NOT_IMPLEMENTED, "grad: no vjp rule for %s (differentiating `%s`)", sym->qualname,
                  sym->qualname);
}

/* ---- 3. the backward walk ------------------------------------------------------------------------------- */

static bool same_meta(const th_value *a, const th_value *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

/* ct[v] += g */
static th_status accumulate(gctx *c, const th_bsym *b, th_value *v, th_arg g) {
  if (g.kind != TH_ARG_VALUE || !is_tracked(c, v)) return TH_OK;
  if (!g.u.value->is_tensor || !same_meta(g.u.value, v)) {
    char a[96], w[96];
    th_value_type_string(g.u.value, a, sizeof a);
    th_value_type_string(v, w, sizeof w);
    return th_error(TH_ERR_RUNTIME, "grad: the vjp rule of %s gave a gradient of %s for %s, which is %s",
                    b->sym->qualname, a, v->name ? v->name : "?", w);
  }
  TH_TRY(grow(c, v->id));
  th_arg *cur = &c->ct[v->id];
  if (cur->kind == TH_ARG_VALUE) return th_tu_call2(c->bwd, TH_OP_ltorch_add, *cur, g, cur);
  *cur = g;
  return TH_OK;
}

static th_status bwd_bsym(gctx *c, const th_bsym *b) {
  vlist outs = {0};
  TH_TRY(values_of(&b->out, &outs));
  th_status st = TH_OK;
  th_arg *cts = th_arena_alloc(c->bwd->arena, sizeof(th_arg) * (size_t)(outs.n ? outs.n : 1));
  th_arg *grads = th_arena_alloc(c->bwd->arena, sizeof(th_arg) * (size_t)(b->nargs ? b->nargs : 1));
  bool any = false;
  if (!cts || !grads) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
  for (int i = 0; st == TH_OK && i < outs.n; i++) {
    const th_value *o = outs.v[i];
    cts[i] = o->id < c->cap ? c->ct[o->id] : th_arg_none();
    any |= cts[i].kind == TH_ARG_VALUE;
  }
  th_free(outs.v);
  if (st != TH_OK || !any) return st;
  for (int i = 0; i < b->nargs; i++) grads[i] = th_arg_none();
  const th_vjp_entry *e = th_vjp_get(b->sym->id);
  TH_TRY(e->fn(c->bwd, b, cts, grads));
  for (int i = 0; i < b->nargs; i++) {
    const th_arg *a = &b->args[i], *g = &grads[i];
    if (a->kind == TH_ARG_VALUE) {
      TH_TRY(accumulate(c, b, a->u.value, *g));
    } else if ((a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST) && g->kind == TH_ARG_TUPLE) {
      for (int k = 0; k < a->u.seq.n && k < g->u.seq.n; k++)
        if (a->u.seq.items[k].kind == TH_ARG_VALUE)
          TH_TRY(accumulate(c, b, a->u.seq.items[k].u.value, g->u.seq.items[k]));
    }
  }
  return TH_OK;
}

/* ---- 4. saved values and the two traces --------------------------------------------------------------- */

typedef struct saved_ctx {
  gctx *c;
  bool *defined; /* by id: defined in the backward (or a cotangent) */
  uint32_t ndef;
  bool *seen;
  vlist list;
} saved_ctx;

static void saved_cb(th_value *v, void *p) {
  saved_ctx *s = p;
  if (v->id < s->ndef && (s->defined[v->id] || s->seen[v->id])) return;
  if (v->id < s->ndef) s->seen[v->id] = true;
  vlist_cb(v, &s->list);
}

static void def_cb(th_value *v, void *p) {
  saved_ctx *s = p;
  if (v->id < s->ndef) s->defined[v->id] = true;
}

/* The forward values the backward reads (its arguments and return values it does not define), in
 * forward order. finish() calls it twice when rematerializing: the first set is what the rules read,
 * th_grad_remat (remat.c) then copies cheap producers into the backward, and the second set is the
 * minimum cut it chose. */
static th_status choose_saved(gctx *c, const vlist *cots, vlist *saved) {
  uint32_t n = th_trace_id_bound(c->bwd);
  if (n < c->cap) n = c->cap;
  for (int i = 0; i < cots->n; i++)
    if (cots->v[i]->id + 1 > n) n = cots->v[i]->id + 1;
  saved_ctx s = {c, th_calloc(n ? n : 1, 1), n, th_calloc(n ? n : 1, 1), {0}};
  th_status st = TH_OK;
  if (!s.defined || !s.seen) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
  for (int i = 0; st == TH_OK && i < cots->n; i++) def_cb(cots->v[i], &s);
  for (int i = 0; st == TH_OK && i < c->bwd->bsyms.n; i++) {
    const th_bsym *b = c->bwd->bsyms.items[i];
    th_bsym_foreach_value(b, TH_BSYM_INPUTS, saved_cb, &s);
    th_bsym_foreach_value(b, TH_BSYM_OUT, def_cb, &s);
  }
  if (s.list.oom) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
  for (int i = 0; st == TH_OK && i < s.list.n; i++)
    if (s.list.v[i]->id >= c->cap || !c->rank[s.list.v[i]->id])
      st = th_error(TH_ERR_RUNTIME, "grad: the backward reads %s, which the forward does not define",
                    s.list.v[i]->name ? s.list.v[i]->name : "?");
  /* forward order: insertion sort by rank (the list is short) */
  for (int i = 1; st == TH_OK && i < s.list.n; i++) {
    th_value *v = s.list.v[i];
    int j = i - 1;
    while (j >= 0 && c->rank[s.list.v[j]->id] > c->rank[v->id]) {
      s.list.v[j + 1] = s.list.v[j];
      j--;
    }
    s.list.v[j + 1] = v;
  }
  th_free(s.defined);
  th_free(s.seen);
  if (st != TH_OK) {
    th_free(s.list.v);
    return st;
  }
  *saved = s.list;
  return TH_OK;
}

typedef struct rank_ctx {
  gctx *c;
  int32_t next;
  th_status st;
} rank_ctx;

static void rank_cb(th_value *v, void *p) {
  rank_ctx *r = p;
  if (r->st != TH_OK || (r->st = grow(r->c, v->id)) != TH_OK) return;
  if (!r->c->rank[v->id]) r->c->rank[v->id] = ++r->next;
}

/* A name for a backward collection: `want` if free in the compilation, else want_0, want_1, ... */
static th_status name_collection(th_trace *tr, th_value *v, const char *want) {
  char buf[96];
  snprintf(buf, sizeof buf, "%s", want);
  for (int k = 0; th_name_used(tr, buf); k++) snprintf(buf, sizeof buf, "%s_%d", want, k);
  return th_value_set_name(tr, v, buf);
}

/* "C0", "C1": the first C<k> free in the compilation. */
static th_status name_c(th_trace *tr, th_value *v, int *k) {
  char buf[32];
  for (;; ++*k) {
    snprintf(buf, sizeof buf, "C%d", *k);
    if (!th_name_used(tr, buf)) break;
  }
  ++*k;
  return name_collection(tr, v, buf);
}

static th_arg tuple_of(th_trace *tr, int n, th_value *const *v, bool *oom) {
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(n ? n : 1));
  if (!items) {
    *oom = true;
    return th_arg_none();
  }
  for (int i = 0; i < n; i++) items[i] = th_arg_value(v[i]);
  return th_arg_tuple(n, items);
}

/* The buffer a value names: the destination's buffer for the output of a prims.copy_ (at any depth),
 * else the value itself. root is indexed by value id, NULL = the value itself. */
static th_value *buffer_of(th_value **root, uint32_t nroot, th_value *v) {
  while (v && v->id < nroot && root[v->id]) v = root[v->id];
  return v;
}

static void note_copies(const th_bsym *b, th_value **root, uint32_t nroot) {
  for (int i = 0; i < b->nsubs; i++) note_copies(b->subs[i], root, nroot);
  if (b->sym->id != TH_OP_prims_copy_ || b->nargs < 2 || b->args[1].kind != TH_ARG_VALUE ||
      b->out.kind != TH_ARG_VALUE || b->out.u.value->id >= nroot)
    return;
  root[b->out.u.value->id] = buffer_of(root, nroot, b->args[1].u.value);
}

static bool copies_into(const th_bsym *b, th_value **root, uint32_t nroot, const th_value *buf) {
  if (b->sym->id == TH_OP_prims_copy_ && b->nargs >= 2 && b->args[1].kind == TH_ARG_VALUE &&
      buffer_of(root, nroot, b->args[1].u.value) == buf)
    return true;
  for (int i = 0; i < b->nsubs; i++)
    if (copies_into(b->subs[i], root, nroot, buf)) return true;
  return false;
}

typedef struct {
  int *def_at; /* indexed by value id: 1 + the top-level index of the bsym defining it, 0 = an input */
  uint32_t n;
  int at;
} def_ctx;

static void def_at_cb(th_value *v, void *p) {
  def_ctx *d = p;
  if (v->id < d->n) d->def_at[v->id] = d->at + 1;
}

/* A saved tensor whose buffer a later prims.copy_ of the forward overwrites (an in-place op on an
 * intermediate or an input, y.sin_()) would reach the backward with the new contents: the forward
 * saves a prims.clone of it, made just before the first such write, in its place. The backward still
 * reads the value by position, so only the forward's saved tuple changes. */
static th_status protect_saved(th_trace *fwd, int nt, th_value **tens, th_value **out) {
  memcpy(out, tens, sizeof(th_value *) * (size_t)nt);
  uint32_t n = th_trace_id_bound(fwd);
  th_value **root = th_calloc(n ? n : 1, sizeof *root);
  int *def_at = th_calloc(n ? n : 1, sizeof *def_at);
  if (!root || !def_at) {
    th_free(root);
    th_free(def_at);
    return th_error(TH_ERR_NOMEM, "grad: out of memory");
  }
  def_ctx d = {def_at, n, 0};
  for (d.at = 0; d.at < fwd->bsyms.n; d.at++) {
    note_copies(fwd->bsyms.items[d.at], root, n);
    th_bsym_foreach_value(fwd->bsyms.items[d.at], TH_BSYM_OUT, def_at_cb, &d);
  }
  /* the first write into each saved value's buffer after the value exists (def_at[id] reused for it) */
  for (int i = 0; i < nt; i++) {
    th_value *buf = buffer_of(root, n, tens[i]);
    int j = tens[i]->id < n ? def_at[tens[i]->id] : 0;
    while (j < fwd->bsyms.n && !copies_into(fwd->bsyms.items[j], root, n, buf)) j++;
    if (tens[i]->id < n) def_at[tens[i]->id] = j < fwd->bsyms.n ? j : -1; /* -1: never written */
  }
  th_status st = TH_OK;
  for (int i = 0; i < nt && st == TH_OK; i++) {
    int j = tens[i]->id < n ? def_at[tens[i]->id] : -1;
    if (j < 0) continue;
    th_arg a = th_arg_value(tens[i]), r;
    if ((st = th_call(fwd, TH_OP_prims_clone, 1, &a, &r)) != TH_OK) break;
    /* th_call appended the clone: move it in front of the write; later positions shift by one */
    void *cl = fwd->bsyms.items[fwd->bsyms.n - 1];
    memmove(&fwd->bsyms.items[j + 1], &fwd->bsyms.items[j], sizeof(void *) * (size_t)(fwd->bsyms.n - 1 - j));
    fwd->bsyms.items[j] = cl;
    out[i] = r.u.value;
    for (int k = i + 1; k < nt; k++)
      if (tens[k]->id < n && def_at[tens[k]->id] >= j) def_at[tens[k]->id]++;
  }
  th_free(root);
  th_free(def_at);
  return st;
}

static th_status finish(gctx *c, const vlist *cots, double t0) {
  th_trace *fwd = c->fwd, *bwd = c->bwd;
  vlist saved = {0};
  TH_TRY(choose_saved(c, cots, &saved));
  th_status st = TH_OK;
  if (c->remat) { /* recompute cheap values in the backward; then what it reads is the cut */
    st = th_grad_remat(fwd, bwd, saved.n, saved.v, NULL);
    th_free(saved.v);
    memset(&saved, 0, sizeof saved);
    TH_TRY(st);
    TH_TRY(choose_saved(c, cots, &saved));
  }
  int nt = 0, no = 0;
  th_value **tens = th_malloc(sizeof(th_value *) * (size_t)(saved.n + 1));
  th_value **nums = th_malloc(sizeof(th_value *) * (size_t)(saved.n + 1));
  if (!tens || !nums) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
  for (int i = 0; st == TH_OK && i < saved.n; i++) {
    if (saved.v[i]->is_tensor)
      tens[nt++] = saved.v[i];
    else
      nums[no++] = saved.v[i];
  }
  th_value **saved_out = st == TH_OK ? th_malloc(sizeof(th_value *) * (size_t)(nt + 1)) : NULL;
  if (st == TH_OK && !saved_out) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
  if (st == TH_OK) st = protect_saved(fwd, nt, tens, saved_out);
  bool oom = false;
  /* the forward's return */
  if (st == TH_OK) {
    const th_bsym *ret = NULL;
    for (int i = c->src->bsyms.n - 1; i >= 0 && !ret; i--)
      if (((const th_bsym *)c->src->bsyms.items[i])->sym->id == TH_OP_prims_python_return) ret = c->src->bsyms.items[i];
    vlist flat = {0}, upd = {0};
    st = values_of(&ret->args[0], &flat);
    if (st == TH_OK && ret->nargs > 1) st = values_of(&ret->args[1], &upd);
    int nflat = 0;
    for (int i = 0; st == TH_OK && i < flat.n; i++)
      if (flat.v[i]->is_tensor) flat.v[nflat++] = flat.v[i];
    th_arg *d = th_arena_alloc(fwd->arena, 3 * sizeof(th_arg)), *pair = th_arena_alloc(fwd->arena, 2 * sizeof(th_arg));
    const char **keys = th_arena_alloc(fwd->arena, 3 * sizeof(char *));
    th_arg *top = th_arena_alloc(fwd->arena, 2 * sizeof(th_arg));
    if (st == TH_OK && (!d || !pair || !keys || !top)) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
    if (st == TH_OK) {
      keys[0] = "output";
      keys[1] = "flat_args";
      keys[2] = "flat_output";
      d[0] = ret->args[0];
      d[1] = tuple_of(fwd, c->src->inputs.n, (th_value *const *)c->src->inputs.items, &oom);
      d[1].kind = TH_ARG_LIST;
      d[2] = tuple_of(fwd, nflat, flat.v, &oom);
      th_arg dict = {TH_ARG_DICT, {0}};
      dict.u.seq.n = 3;
      dict.u.seq.items = d;
      dict.u.seq.keys = keys;
      pair[0] = tuple_of(fwd, nt, saved_out, &oom);
      pair[1] = tuple_of(fwd, no, nums, &oom);
      top[0] = dict;
      top[1] = th_arg_tuple(2, pair);
      if (oom) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
      if (st == TH_OK) st = th_trace_set_return_updated(fwd, th_arg_tuple(2, top), upd.n, upd.v);
    }
    th_free(flat.v);
    th_free(upd.v);
  }
  if (st == TH_OK) st = th_dce_in_place(fwd);
  /* the backward's inputs and unpacking lines, in front of its body */
  if (st == TH_OK) {
    th_value *sfb = th_value_new_collection(bwd), *cot = th_value_new_collection(bwd);
    th_value *c0 = th_value_new_collection(bwd), *c1 = th_value_new_collection(bwd);
    int k = 0;
    if (!sfb || !cot || !c0 || !c1) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
    if (st == TH_OK) st = name_collection(bwd, sfb, "saved_for_backward");
    if (st == TH_OK) st = name_collection(bwd, cot, "cotangents");
    if (st == TH_OK) st = name_c(bwd, c0, &k);
    if (st == TH_OK) st = name_c(bwd, c1, &k);
    th_value *pair[2] = {c0, c1};
    if (st == TH_OK) st = th_collection_set_items(bwd, sfb, 2, pair);
    if (st == TH_OK) st = th_collection_set_items(bwd, cot, cots->n, cots->v);
    if (st == TH_OK) st = th_collection_set_items(bwd, c0, nt, tens);
    if (st == TH_OK) st = th_collection_set_items(bwd, c1, no, nums);
    if (st == TH_OK) st = th_vec_push(bwd->arena, &bwd->inputs, sfb);
    if (st == TH_OK) st = th_vec_push(bwd->arena, &bwd->inputs, cot);
    th_vec body = bwd->bsyms;
    memset(&bwd->bsyms, 0, sizeof bwd->bsyms);
    th_value *unpack[4] = {sfb, cot, c0, c1};
    for (int i = 0; st == TH_OK && i < 4; i++) {
      if (i >= 2 && unpack[i]->coll_n == 0) continue; /* nothing saved of this kind */
      th_bsym *u = th_unpack_sequence_new(bwd, unpack[i]);
      st = u ? th_vec_push(bwd->arena, &bwd->bsyms, u) : th_error(TH_ERR_NOMEM, "grad: out of memory");
    }
    for (int i = 0; st == TH_OK && i < body.n; i++) st = th_vec_push(bwd->arena, &bwd->bsyms, body.items[i]);
  }
  th_free(saved.v);
  th_free(tens);
  th_free(saved_out);
  th_free(nums);
  if (st == TH_OK) {
    char pss[96];
    snprintf(pss, sizeof pss, "Grad transform pass (took %ld milliseconds)", (long)(th_pass_clock_ms() - t0));
    st = th_trace_set_provenance(fwd, pss);
    if (st == TH_OK) st = th_trace_set_provenance(bwd, pss);
  }
  if (st == TH_OK && (st = th_trace_verify(fwd)) != TH_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", th_last_error());
    st = th_error(st, "grad: the forward trace does not verify: %s", msg);
  }
  if (st == TH_OK && (st = th_trace_verify(bwd)) != TH_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", th_last_error());
    st = th_error(st, "grad: the backward trace does not verify: %s", msg);
  }
  return st;
}

static th_status run(gctx *c, double t0) {
  const th_trace *tr = c->src;
  /* 1. forward */
  for (int i = 0; i < tr->inputs.n; i++) {
    th_value *v = tr->inputs.items[i];
    TH_TRY(grow(c, v->id));
    c->tracked[v->id] = c->rg[i];
    TH_TRY(th_vec_push(c->fwd->arena, &c->fwd->inputs, v));
  }
  const th_bsym *ret = NULL;
  for (int i = 0; i < tr->bsyms.n; i++) {
    const th_bsym *b = tr->bsyms.items[i];
    if (b->sym->id == TH_OP_prims_python_return) {
      ret = b;
      break;
    }
    TH_TRY(fwd_bsym(c, b, 0));
  }
  if (!ret) return th_error(TH_ERR_VALUE, "grad: the trace has no return statement");
  c->fwd->nfusions = tr->nfusions;
  /* forward order, for the saved values */
  rank_ctx rk = {c, 0, TH_OK};
  for (int i = 0; i < tr->inputs.n; i++) rank_cb(tr->inputs.items[i], &rk);
  for (int i = 0; i < c->fwd->bsyms.n; i++)
    th_arg_foreach_value(&((const th_bsym *)c->fwd->bsyms.items[i])->out, rank_cb, &rk);
  TH_TRY(rk.st);

  /* 2. cotangents: one per tensor of the return, like it */
  vlist flat = {0}, cots = {0};
  th_status st = values_of(&ret->args[0], &flat);
  for (int i = 0; st == TH_OK && i < flat.n; i++) {
    const th_value *o = flat.v[i];
    if (!o->is_tensor) continue;
    th_value *g = th_value_new_tensor(c->bwd, o->dtype, o->device, o->ndim, o->shape, false);
    if (!g) st = th_last_status() ? th_last_status() : TH_ERR_NOMEM;
    if (st == TH_OK) st = th_value_name_if_needed(c->bwd, g);
    if (st == TH_OK) vlist_cb(g, &cots);
    if (st == TH_OK && cots.oom) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
    if (st == TH_OK && is_tracked(c, o)) {
      th_arg *cur = &c->ct[o->id];
      if (cur->kind == TH_ARG_VALUE)
        st = th_tu_call2(c->bwd, TH_OP_ltorch_add, *cur, th_arg_value(g), cur);
      else
        *cur = th_arg_value(g);
    }
  }
  th_free(flat.v);

  /* 3. backward */
  for (int i = c->tape.n - 1; st == TH_OK && i >= 0; i--) st = bwd_bsym(c, c->tape.items[i]);
  if (st == TH_OK) {
    th_arg *g = th_arena_alloc(c->bwd->arena, sizeof(th_arg) * (size_t)(tr->inputs.n ? tr->inputs.n : 1));
    if (!g) st = th_error(TH_ERR_NOMEM, "grad: out of memory");
    for (int i = 0; st == TH_OK && i < tr->inputs.n; i++) {
      const th_value *v = tr->inputs.items[i];
      g[i] = c->rg[i] ? c->ct[v->id] : th_arg_none();
    }
    if (st == TH_OK) st = th_trace_set_return(c->bwd, th_arg_tuple(tr->inputs.n, g));
    if (st == TH_OK) st = th_dce_in_place(c->bwd);
  }
  /* 4. saved values, both traces' inputs and returns */
  if (st == TH_OK) st = finish(c, &cots, t0);
  th_free(cots.v);
  return st;
}

th_status th_transform_grad_remat(const th_trace *tr, const th_grad_options *opts, bool rematerialize, th_trace **fwd,
                                  th_trace **bwd) {
  if (!tr || !fwd || !bwd)
    return th_error(TH_ERR_VALUE, "th_transform_grad: %s is NULL", !tr ? "the trace" : !fwd ? "fwd" : "bwd");
  double t0 = th_pass_clock_ms();
  TH_TRY(th_trace_verify(tr)); /* a malformed trace fails here, with the verifier's message */
  int n = tr->inputs.n;
  if (opts && opts->requires_grad && opts->ninputs != n)
    return th_error(TH_ERR_VALUE, "grad: requires_grad has %d entries, but the trace has %d inputs", opts->ninputs, n);
  bool *rg = th_calloc((size_t)(n ? n : 1), 1);
  if (!rg) return th_error(TH_ERR_NOMEM, "grad: out of memory");
  for (int i = 0; i < n; i++) {
    const th_value *v = tr->inputs.items[i];
    bool fl = v->is_tensor && th_dtype_is_float(v->dtype) && !th_dtype_is_fp8(v->dtype);
    rg[i] = opts && opts->requires_grad ? opts->requires_grad[i] : fl;
    if (rg[i] && !fl) {
      th_free(rg);
      return th_error(TH_ERR_VALUE,
                      "grad: input '%s' (%s) cannot require grad: only Tensors of floating point dtype "
                      "can require gradients",
                      v->name ? v->name : "?", v->is_tensor ? th_dtype_name(v->dtype) : "not a tensor");
    }
  }
  gctx c;
  memset(&c, 0, sizeof c);
  c.src = tr;
  c.rg = rg;
  c.remat = rematerialize;
  c.fwd = th_trace_derive(tr, tr->fn_name);
  c.bwd = th_trace_derive(tr, "backward_fn");
  th_status st = c.fwd && c.bwd ? run(&c, t0) : th_error(TH_ERR_NOMEM, "grad: out of memory");
  th_free(c.tracked);
  th_free(c.ct);
  th_free(c.rank);
  th_free(rg);
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM) th_error(TH_ERR_NOMEM, "grad: out of memory");
    th_trace_free(c.fwd);
    th_trace_free(c.bwd);
    return st;
  }
  *fwd = c.fwd;
  *bwd = c.bwd;
  return TH_OK;
}

th_status th_transform_grad(const th_trace *tr, const th_grad_options *opts, th_trace **fwd, th_trace **bwd) {
  return th_transform_grad_remat(tr, opts, true, fwd, bwd);
}

/* ---- the forward's layout ------------------------------------------------------------------------------ */

static int count_leaves(const th_arg *a) {
  if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT) {
    int n = 0;
    for (int i = 0; i < a->u.seq.n; i++) n += count_leaves(&a->u.seq.items[i]);
    return n;
  }
  return 1;
}

th_status th_grad_forward_layout(const th_trace *fwd, th_grad_layout *out) {
  if (!fwd || !out) return th_error(TH_ERR_VALUE, "th_grad_forward_layout: %s is NULL", !fwd ? "the trace" : "out");
  th_arg r = th_trace_output(fwd);
  const th_arg *d = r.kind == TH_ARG_TUPLE && r.u.seq.n == 2 ? &r.u.seq.items[0] : NULL;
  const th_arg *s = d ? &r.u.seq.items[1] : NULL;
  bool ok = d && d->kind == TH_ARG_DICT && d->u.seq.n == 3 && !strcmp(d->u.seq.keys[0], "output") &&
            !strcmp(d->u.seq.keys[1], "flat_args") && !strcmp(d->u.seq.keys[2], "flat_output") &&
            d->u.seq.items[1].kind == TH_ARG_LIST && d->u.seq.items[2].kind == TH_ARG_TUPLE &&
            s->kind == TH_ARG_TUPLE && s->u.seq.n == 2 && s->u.seq.items[0].kind == TH_ARG_TUPLE &&
            s->u.seq.items[1].kind == TH_ARG_TUPLE;
  if (!ok)
    return th_error(TH_ERR_VALUE, "th_grad_forward_layout: expected a forward trace of th_transform_grad, returning "
                                  "({'output': ..., 'flat_args': [...], 'flat_output': (...)}, ((...), (...)))");
  out->noutput = count_leaves(&d->u.seq.items[0]);
  out->nflat_args = d->u.seq.items[1].u.seq.n;
  out->nflat_output = d->u.seq.items[2].u.seq.n;
  out->nsaved_tensors = s->u.seq.items[0].u.seq.n;
  out->nsaved_other = s->u.seq.items[1].u.seq.n;
  out->saved_bytes = 0;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < s->u.seq.items[k].u.seq.n; i++) {
      const th_arg *a = &s->u.seq.items[k].u.seq.items[i];
      if (a->kind == TH_ARG_VALUE) out->saved_bytes += th_grad_value_bytes(a->u.value);
    }
  return TH_OK;
}
