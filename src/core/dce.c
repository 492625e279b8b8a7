/* dce.c — Dead Code Elimination in place (th_dce_in_place, declared in core/ir.h): the elimination
 * the execution transform and the passes share; the pass that makes a new trace (th_dce) is the
 * transforms layer's.
 *
 * DCE follows Thunder's dce_bsyms: walk the top-level bsyms backwards with the set of needed values,
 * seeded by the return. A bsym is kept when one of its outputs is needed or when it has an effect
 * (DONT_DCE, RANDOM or IN_PLACE on it or on any subsymbol: the return, copy_, uniform); a kept bsym
 * makes its arguments needed. Comments are kept. A python_del is kept with only the values that are
 * still defined afterwards (an input or an output of a kept bsym), and dropped when none is. Values
 * are tracked by id in flat arrays (ids are dense within a compilation). */
#include <string.h>

#include "core/ir.h"

/* ---- the elimination --------------------------------------------------------------------------- */

typedef struct {
  bool *flags; /* indexed by value id */
  uint32_t n;
} id_set;

static void set_cb(th_value *v, void *ctx) {
  id_set *s = ctx;
  if (v->id < s->n) s->flags[v->id] = true;
}

typedef struct {
  const id_set *s;
  bool found;
} any_ctx;

static void any_cb(th_value *v, void *ctx) {
  any_ctx *c = ctx;
  if (v->id < c->s->n && c->s->flags[v->id]) c->found = true;
}

/* True if any value in a is in s. */
static bool arg_any_in(const th_arg *a, const id_set *s) {
  any_ctx c = {s, false};
  th_arg_foreach_value(a, any_cb, &c);
  return c.found;
}

/* Keeps only the values of a python_del argument that are in `defined`; *n counts them. */
static th_status filter_del_arg(th_trace *tr, const th_arg *a, const id_set *defined, th_arg *out, int *n) {
  if (a->kind == TH_ARG_VALUE) {
    bool ok = a->u.value->id < defined->n && defined->flags[a->u.value->id];
    *out = ok ? *a : th_arg_none();
    *n += ok;
    return TH_OK;
  }
  if (a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST) {
    *out = *a;
    return TH_OK;
  }
  th_arg *items = th_arena_alloc(tr->arena, sizeof(th_arg) * (size_t)(a->u.seq.n ? a->u.seq.n : 1));
  if (!items) return TH_ERR_NOMEM;
  int k = 0;
  for (int i = 0; i < a->u.seq.n; i++) {
    int before = *n;
    th_arg x;
    TH_TRY(filter_del_arg(tr, &a->u.seq.items[i], defined, &x, n));
    if (*n > before) items[k++] = x;
  }
  *out = *a;
  out->u.seq.items = items;
  out->u.seq.n = k;
  return TH_OK;
}

/* Runs DCE over tr's top-level bsyms (which live in tr's arena) and replaces the list. */
th_status th_dce_in_place(th_trace *tr) {
  int n = tr->bsyms.n;
  th_bsym **bs = (th_bsym **)tr->bsyms.items;
  uint32_t nids = th_trace_id_bound(tr);

  th_status st = TH_ERR_NOMEM;
  id_set needed = {th_calloc(nids ? nids : 1, 1), nids};
  id_set defined = {th_calloc(nids ? nids : 1, 1), nids};
  bool *keep = th_calloc(n ? (size_t)n : 1, 1);
  if (!needed.flags || !defined.flags || !keep) {
    th_error(TH_ERR_NOMEM, "out of memory in dead code elimination");
    goto done;
  }
  for (int i = n - 1; i >= 0; i--) {
    const th_bsym *b = bs[i];
    if (th_bsym_has_role(b, TH_SYM_DEL) || th_bsym_has_role(b, TH_SYM_COMMENT)) {
      keep[i] = true; /* dels do not make their values needed */
      continue;
    }
    bool k = th_bsym_has_effect(b) || arg_any_in(&b->out, &needed);
    if (k) {
      keep[i] = true;
      th_bsym_foreach_value(b, TH_BSYM_INPUTS, set_cb, &needed);
    }
  }
  for (int i = 0; i < tr->inputs.n; i++) set_cb(tr->inputs.items[i], &defined);
  th_vec kept = {0};
  for (int i = 0; i < n; i++) {
    if (!keep[i]) continue;
    th_bsym *b = bs[i];
    if (th_bsym_has_role(b, TH_SYM_DEL) && b->nargs == 1) {
      th_arg a;
      int nvals = 0;
      if ((st = filter_del_arg(tr, &b->args[0], &defined, &a, &nvals)) != TH_OK) goto done;
      if (nvals == 0) continue;
      th_bsym *nb = th_arena_alloc(tr->arena, sizeof *nb);
      th_arg *args = th_arena_alloc(tr->arena, sizeof(th_arg));
      if (!nb || !args) {
        st = TH_ERR_NOMEM;
        goto done;
      }
      *nb = *b;
      args[0] = a;
      nb->args = args;
      b = nb;
    }
    th_arg_foreach_value(&b->out, set_cb, &defined);
    if ((st = th_vec_push(tr->arena, &kept, b)) != TH_OK) goto done;
  }
  tr->bsyms = kept;
  st = TH_OK;
done:
  th_free(needed.flags);
  th_free(defined.flags);
  th_free(keep);
  return st;
}
