/* partition.c — grouping fusible top-level bsyms of an execution trace into fusion regions.
 *
 * Fusible (th_fuser_is_fusible): a prim without effects whose one output is a non-fp8 tensor and that is
 *   - ELEMENTWISE with a cexpr template, operands tensors or constants (no number proxies); in the
 *     integer compute class a template that divides ('/', '%') or calls a function is left to eager
 *     (integer division by zero is an error there, libm calls would round), and so is '~' on bool;
 *   - CONVERT (prims.convert_element_type) of a tensor, except float -> integer (eager's saturating
 *     cast semantics are not reproduced);
 *   - prims.broadcast_in_dim of a tensor that is not computed inside the region (index math).
 * Every member of a region has the region's output shape. Strategies:
 *   - consecutive: a region is a run of adjacent fusible bsyms; nothing moves;
 *   - dataflow: a region stays open across bsyms that are independent of it: the region is placed at
 *     its last member, so it closes (at its last member so far) when a non-member consumes one of its
 *     values (that bsym would then run before its input exists) and at every effect (copy_,
 *     update_aliases, random, DONT_DCE, in-place) or the return, which nothing moves across.
 * A region of one bsym is left as it is. Region inputs are the tensors its members use and do not
 * produce (in order of first use); its outputs the values it produces that anything outside uses
 * (the return included), in program order, as a LIST. */
#include <string.h>

#include "executors/fuser/fuser.h"
#include "transforms/transforms.h"

static bool fp8(th_dtype d) { return d == TH_F8E4M3FN || d == TH_F8E5M2; }
static int dclass(th_dtype d) { return d == TH_F64 ? 1 : (d == TH_F16 || d == TH_BF16 || d == TH_F32) ? 0 : 2; }

static const th_value *single_out(const th_bsym *b) {
  if (b->out.kind != TH_ARG_VALUE || !b->out.u.value->is_tensor) return NULL;
  return fp8(b->out.u.value->dtype) ? NULL : b->out.u.value;
}

static bool tensor_arg(const th_arg *a) {
  return a->kind == TH_ARG_VALUE && a->u.value->is_tensor && !fp8(a->u.value->dtype);
}

bool th_fuser_is_fusible(const th_bsym *b) {
  const th_symbol *s = b->sym;
  if (!s->is_prim || s->id >= TH_OP_COUNT || b->nsubs || b->nkwargs) return false;
  if (s->tags & (TH_TAG_RANDOM | TH_TAG_DONT_DCE | TH_TAG_IN_PLACE | TH_TAG_UTILITY)) return false;
  const th_value *o = single_out(b);
  if (!o || b->nargs < 1) return false;
  if (s->id == TH_OP_prims_broadcast_in_dim) return tensor_arg(&b->args[0]);
  if (s->tags & TH_TAG_CONVERT) {
    if (!tensor_arg(&b->args[0])) return false;
    return !(dclass(b->args[0].u.value->dtype) < 2 && dclass(o->dtype) == 2 && o->dtype != TH_BOOL);
  }
  if (!(s->tags & TH_TAG_ELEMENTWISE) || !s->cexpr) return false;
  int ntensors = 0;
  th_dtype d = o->dtype;
  for (int i = 0; i < b->nargs; i++) {
    const th_arg *a = &b->args[i];
    if (a->kind == TH_ARG_VALUE) {
      if (!tensor_arg(a)) return false;
      for (int k = 0; k < o->ndim || k < a->u.value->ndim; k++)
        if (a->u.value->ndim != o->ndim || a->u.value->shape[k] != o->shape[k]) return false;
      ntensors++;
      if (o->dtype == TH_BOOL) d = a->u.value->dtype;
    } else if (a->kind != TH_ARG_BOOL && a->kind != TH_ARG_INT && a->kind != TH_ARG_FLOAT) {
      return false;
    }
  }
  if (!ntensors) return false;
  if (dclass(d) == 2) {
    for (const char *p = s->cexpr; *p; p++) {
      if (*p == '/') return false;
      if (*p == '%' && (p[1] < '0' || p[1] > '9')) return false; /* "%0" is an operand hole, "a % b" is not */
      if (*p == '(' && p > s->cexpr) { /* a call: an identifier right before '(' (not an operand hole) */
        char c = p[-1];
        bool ident = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                     (c >= '0' && c <= '9' && !(p - s->cexpr >= 2 && p[-2] == '%'));
        if (ident) return false;
      }
      if (*p == '~' && d == TH_BOOL) return false;
    }
  }
  return true;
}

/* ---- the partition ---------------------------------------------------------------------------------- */

typedef struct {
  int ndim;
  int64_t shape[TH_MAX_DIMS];
  int n; /* members */
} group;

typedef struct {
  const th_bsym *b;
  int grp; /* -1: not in a region (or a region of one) */
} item;

static void max_id_cb(th_value *v, void *p) {
  uint32_t *m = p;
  if (v->id + 1 > *m) *m = v->id + 1;
}

typedef struct {
  int *owner; /* value id -> group producing it, -1 */
  int g;
  bool hit;
} use_ctx;

static void uses_group_cb(th_value *v, void *p) {
  use_ctx *c = p;
  if (c->owner[v->id] == c->g) c->hit = true;
}

static bool uses_group(const th_bsym *b, int *owner, int g) {
  use_ctx c = {owner, g, false};
  for (int i = 0; i < b->nargs; i++) th_arg_foreach_value(&b->args[i], uses_group_cb, &c);
  for (int i = 0; i < b->nkwargs; i++) th_arg_foreach_value(&b->kwargs[i], uses_group_cb, &c);
  return c.hit;
}

static bool is_effect(const th_bsym *b) {
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

static void push_unique(th_vec *v, th_value *x, th_arena *a, th_status *st) {
  for (int i = 0; i < v->n; i++)
    if (v->items[i] == x) return;
  if (*st == TH_OK) *st = th_vec_push(a, v, x);
}

typedef struct {
  const int *owner;
  int g;
  bool *needed;
} need_ctx;

static void need_cb(th_value *v, void *p) {
  need_ctx *c = p;
  if (c->owner[v->id] == c->g) c->needed[v->id] = true;
}

/* The region bsym of group g: members cloned as subsymbols, inputs and outputs as described above. */
static th_status make_region(th_trace *nt, const item *items, int nitems, int g, const int *owner, bool *needed,
                             uint32_t nids, int *counter, th_bsym **out) {
  th_status st = TH_OK;
  th_vec ins = {0}, subs = {0};
  memset(needed, 0, sizeof(bool) * nids);
  need_ctx nc = {owner, g, needed};
  for (int k = 0; k < nitems; k++) {
    if (items[k].grp == g) continue;
    const th_bsym *x = items[k].b;
    for (int i = 0; i < x->nargs; i++) th_arg_foreach_value(&x->args[i], need_cb, &nc);
    for (int i = 0; i < x->nkwargs; i++) th_arg_foreach_value(&x->kwargs[i], need_cb, &nc);
  }
  int nout = 0;
  for (int k = 0; k < nitems && st == TH_OK; k++) {
    if (items[k].grp != g) continue;
    const th_bsym *b = items[k].b;
    for (int i = 0; i < b->nargs; i++)
      if (b->args[i].kind == TH_ARG_VALUE && owner[b->args[i].u.value->id] != g)
        push_unique(&ins, b->args[i].u.value, nt->arena, &st);
    nout += needed[b->out.u.value->id];
    th_bsym *c;
    if (st == TH_OK) st = th_bsym_clone(nt, b, NULL, NULL, &c);
    if (st == TH_OK) {
      c->executor = NULL;
      st = th_vec_push(nt->arena, &subs, c);
    }
  }
  if (st != TH_OK) return st;
  th_arg *args = th_arena_alloc(nt->arena, sizeof(th_arg) * (size_t)(ins.n ? ins.n : 1));
  th_arg *oitems = th_arena_alloc(nt->arena, sizeof(th_arg) * (size_t)(nout ? nout : 1));
  char name[32];
  snprintf(name, sizeof name, "fusion%d", (*counter)++);
  th_symbol *sym = th_symbol_new_dynamic(nt, name);
  if (!args || !oitems || !sym) return TH_ERR_NOMEM;
  for (int i = 0; i < ins.n; i++) args[i] = th_arg_value(ins.items[i]);
  int k = 0;
  for (int j = 0; j < subs.n; j++) {
    th_bsym *c = subs.items[j];
    if (needed[c->out.u.value->id]) oitems[k++] = th_arg_value(c->out.u.value);
  }
  th_bsym *r = th_bsym_new(nt, sym, ins.n, args, th_arg_list(nout, oitems));
  if (!r) return TH_ERR_NOMEM;
  r->nsubs = subs.n;
  r->subs = (th_bsym **)subs.items;
  if (!(r->executor = th_arena_strdup(nt->arena, "fuser"))) return TH_ERR_NOMEM;
  *out = r;
  return TH_OK;
}

static bool same_shape(const group *g, const th_value *v) {
  if (g->ndim != v->ndim) return false;
  for (int i = 0; i < v->ndim; i++)
    if (g->shape[i] != v->shape[i]) return false;
  return true;
}

th_status th_fuser_partition(const th_trace *et, th_fuser_strategy strat, const char *const *after, int nafter,
                             th_trace **out) {
  *out = NULL;
  int n = et->bsyms.n;
  uint32_t nids = 1;
  for (int i = 0; i < et->inputs.n; i++) max_id_cb(et->inputs.items[i], &nids);
  for (int i = 0; i < n; i++) {
    const th_bsym *b = et->bsyms.items[i];
    for (int j = 0; j < b->nargs; j++) th_arg_foreach_value(&b->args[j], max_id_cb, &nids);
    for (int j = 0; j < b->nkwargs; j++) th_arg_foreach_value(&b->kwargs[j], max_id_cb, &nids);
    th_arg_foreach_value(&b->out, max_id_cb, &nids);
  }
  item *items = th_malloc(sizeof(item) * (size_t)(n ? n : 1));
  group *groups = th_malloc(sizeof(group) * (size_t)(n ? n : 1));
  int *owner = th_malloc(sizeof(int) * nids);
  bool *needed = th_malloc(sizeof(bool) * nids);
  th_trace *nt = th_trace_derive(et, et->fn_name);
  th_status st = TH_OK;
  if (!items || !groups || !owner || !needed || !nt) {
    st = th_error(TH_ERR_NOMEM, "out of memory in the fusion pass");
    goto done;
  }
  for (uint32_t i = 0; i < nids; i++) owner[i] = -1;
  int ngroups = 0, open = -1;
  for (int i = 0; i < n; i++) {
    const th_bsym *b = et->bsyms.items[i];
    items[i].b = b;
    items[i].grp = -1;
    bool fus = claimed_by(b, after, nafter) && th_fuser_is_fusible(b);
    if (fus) {
      const th_value *o = b->out.u.value;
      bool ok = open >= 0 && same_shape(&groups[open], o);
      if (ok && b->sym->id == TH_OP_prims_broadcast_in_dim && owner[b->args[0].u.value->id] == open) ok = false;
      if (!ok) {
        open = ngroups++;
        groups[open].ndim = o->ndim;
        memcpy(groups[open].shape, o->shape, sizeof(int64_t) * (size_t)o->ndim);
        groups[open].n = 0;
      }
      items[i].grp = open;
      groups[open].n++;
      owner[o->id] = open;
      continue;
    }
    if (open < 0) continue;
    if (strat == TH_FUSER_CONSECUTIVE || is_effect(b) || uses_group(b, owner, open)) open = -1;
  }
  int counter = 0;
  int *last = th_malloc(sizeof(int) * (size_t)(ngroups ? ngroups : 1));
  if (!last) {
    st = th_error(TH_ERR_NOMEM, "out of memory in the fusion pass");
    goto done;
  }
  for (int i = 0; i < n; i++)
    if (items[i].grp >= 0) last[items[i].grp] = i;
  for (int i = 0; i < n && st == TH_OK; i++) {
    int g = items[i].grp;
    if (g >= 0 && groups[g].n < 2) g = items[i].grp = -1; /* leave single bsyms alone, in place */
    th_bsym *c = NULL;
    if (g < 0) {
      st = th_bsym_clone(nt, items[i].b, NULL, NULL, &c);
    } else if (i == last[g]) {
      st = make_region(nt, items, n, g, owner, needed, nids, &counter, &c);
    } else {
      continue;
    }
    if (st == TH_OK) st = th_vec_push(nt->arena, &nt->bsyms, c);
    if (st == TH_OK && c->sym->id == TH_OP_prims_python_return) nt->has_return = true;
  }
  th_free(last);
  for (int i = 0; i < et->inputs.n && st == TH_OK; i++) st = th_vec_push(nt->arena, &nt->inputs, et->inputs.items[i]);
  if (st == TH_OK && et->provenance) st = th_trace_set_provenance(nt, et->provenance);
done:
  th_free(items);
  th_free(groups);
  th_free(owner);
  th_free(needed);
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM) th_error(TH_ERR_NOMEM, "out of memory in the fusion pass");
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  return TH_OK;
}
