/* del_last_used.c — Delete Last Used (Thunder's del_last_used, thunder/executors/passes.py).
 *
 * Walk the top-level bsyms backwards with the set of values already handled, seeded with every value
 * reachable from the return (those are never deleted). Existing dels are dropped first; comments and
 * the return are kept without a del; for every other bsym, the values among its outputs then its
 * arguments (each flattened in order, keyword arguments after positional ones) that are not handled
 * yet are the ones whose last use it is: they are marked handled and deleted right after it with one
 * `del a, b` (prims.python_del with one TUPLE argument, the printer's canonical form). An output
 * nobody uses is therefore deleted right after its producer, and a trace input right after its last
 * use (Thunder's seed 000 ends `t0 = linear(x, w, None)`, `del x, w`, `return t0`). Thunder's inputs
 * are unpack_trivial bsyms, so an input nobody uses gets its `del` right after its unpacking: here,
 * where inputs are no bsyms, each unused input gets its own `del` before the first bsym, in input
 * order. Only values defined in the trace (inputs and top-level outputs) are deleted; nothing is
 * deleted at or after the return, which stays last. */
#include <string.h>

#include "transforms/transforms.h"

typedef struct {
  bool *handled; /* indexed by value id */
  bool *defined;
  uint32_t nids;
  th_arg *items; /* the del being built */
  int n, cap;
  bool oom;
} dlu_ctx;

static void handle_cb(th_value *v, void *p) {
  dlu_ctx *c = p;
  if (v && v->id < c->nids) c->handled[v->id] = true;
}

static void define_cb(th_value *v, void *p) {
  dlu_ctx *c = p;
  if (v && v->id < c->nids) c->defined[v->id] = true;
}

/* A value met walking backwards: deleted here if this is its last use. */
static void last_use_cb(th_value *v, void *p) {
  dlu_ctx *c = p;
  if (c->oom || !v || v->id >= c->nids || c->handled[v->id] || !c->defined[v->id]) return;
  c->handled[v->id] = true;
  if (c->n == c->cap) {
    int ncap = c->cap ? c->cap * 2 : 8;
    th_arg *ni = th_realloc(c->items, sizeof(th_arg) * (size_t)ncap);
    if (!ni) {
      c->oom = true;
      return;
    }
    c->items = ni;
    c->cap = ncap;
  }
  c->items[c->n++] = th_arg_value(v);
}

/* A del of c->items (copied into tr's arena); c->items is emptied. */
static th_bsym *make_del(th_trace *tr, dlu_ctx *c) {
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)c->n);
  th_arg *args = th_arena_alloc(tr->arena, sizeof(th_arg));
  if (!items || !args) return NULL;
  memcpy(items, c->items, sizeof(th_arg) * (size_t)c->n);
  args[0] = th_arg_tuple(c->n, items);
  c->n = 0;
  return th_bsym_new(tr, th_symbol_by_role(TH_SYM_DEL), 1, args, th_arg_none());
}

/* Appends the del of the values collected in c (if any) to rev. */
static th_status flush_del(th_trace *nt, dlu_ctx *c, th_bsym **rev, int *nrev) {
  if (c->oom) return th_error(TH_ERR_NOMEM, "out of memory in delete last used");
  if (c->n == 0) return TH_OK;
  th_bsym *d = make_del(nt, c);
  if (!d) return TH_ERR_NOMEM;
  rev[(*nrev)++] = d;
  return TH_OK;
}

th_status th_del_last_used(const th_trace *tr, th_trace **out) {
  double t0 = th_pass_clock_ms();
  th_trace *nt = th_trace_derive(tr, tr->fn_name);
  if (!nt) return TH_ERR_NOMEM;
  int n = tr->bsyms.n;
  th_bsym *const *bs = (th_bsym *const *)tr->bsyms.items;
  dlu_ctx c = {0};
  th_status st = TH_OK;
  /* the new list, built backwards: rev[k] is the k-th bsym from the end */
  th_bsym **rev = NULL;
  int nrev = 0;

  uint32_t nids = th_trace_id_bound(tr);
  c.nids = nids;
  c.handled = th_calloc(nids ? nids : 1, 1);
  c.defined = th_calloc(nids ? nids : 1, 1);
  /* at most one del per bsym and per input */
  rev = th_malloc(sizeof *rev * (size_t)(2 * n + tr->inputs.n + 1));
  if (!c.handled || !c.defined || !rev) {
    st = th_error(TH_ERR_NOMEM, "out of memory in delete last used");
    goto done;
  }
  for (int i = 0; i < tr->inputs.n; i++) define_cb(tr->inputs.items[i], &c);
  int ret = n; /* the first return: nothing at or after it gets a del */
  for (int i = 0; i < n; i++) {
    if (th_bsym_has_role(bs[i], TH_SYM_RETURN) && ret == n) ret = i;
    if (i >= ret) /* the return's values, and anything after it, are never deleted */
      th_bsym_foreach_value(bs[i], TH_BSYM_ALL, handle_cb, &c);
    if (!th_bsym_has_role(bs[i], TH_SYM_DEL)) th_bsym_foreach_value(bs[i], TH_BSYM_OUT, define_cb, &c);
  }

  for (int i = n - 1; i >= 0; i--) {
    const th_bsym *b = bs[i];
    if (th_bsym_has_role(b, TH_SYM_DEL)) continue; /* old dels are dropped */
    th_bsym *copy;
    if ((st = th_bsym_clone(nt, b, NULL, NULL, &copy)) != TH_OK) goto done;
    if (i < ret && !th_bsym_has_role(b, TH_SYM_COMMENT) && !th_bsym_has_role(b, TH_SYM_RETURN)) {
      th_bsym_foreach_value(b, TH_BSYM_OUT, last_use_cb, &c);
      th_bsym_foreach_value(b, TH_BSYM_INPUTS, last_use_cb, &c);
      if ((st = flush_del(nt, &c, rev, &nrev)) != TH_OK) goto done;
    }
    rev[nrev++] = copy;
  }
  /* inputs nobody uses: deleted first, one del each, in input order */
  for (int i = tr->inputs.n - 1; i >= 0; i--) {
    last_use_cb(tr->inputs.items[i], &c);
    if ((st = flush_del(nt, &c, rev, &nrev)) != TH_OK) goto done;
  }

  for (int i = 0; i < tr->inputs.n && st == TH_OK; i++) st = th_vec_push(nt->arena, &nt->inputs, tr->inputs.items[i]);
  for (int k = nrev - 1; k >= 0 && st == TH_OK; k--) st = th_vec_push(nt->arena, &nt->bsyms, rev[k]);
  nt->has_return = tr->has_return;
  nt->nfusions = tr->nfusions;
  if (st == TH_OK) {
    char pss[96];
    snprintf(pss, sizeof pss, "Delete Last Used (took %ld milliseconds)", (long)(th_pass_clock_ms() - t0));
    st = th_trace_set_provenance(nt, pss);
  }
done:
  th_free(c.handled);
  th_free(c.defined);
  th_free(c.items);
  th_free(rev);
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM)
      th_error(TH_ERR_NOMEM, "out of memory in delete last used");
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  return TH_OK;
}
