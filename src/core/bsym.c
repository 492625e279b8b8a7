/* bsym.c — IR helpers every layer above shares: the walkers over the values a bound symbol and a
 * trace reference, a deep copy of a bound symbol into another trace's arena, whether a bound symbol
 * has an effect (what DCE, CSE and the fuser never drop, merge or move), and the clock of provenance
 * strings. Declared in core/ir.h. */
#include <string.h>
#include <time.h>

#include "core/ir.h"

double th_pass_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- walkers ---------------------------------------------------------------------------------- */

void th_bsym_foreach_value(const th_bsym *b, unsigned what, void (*fn)(th_value *v, void *ctx), void *ctx) {
  if (what & TH_BSYM_ARGS)
    for (int i = 0; i < b->nargs; i++) th_arg_foreach_value(&b->args[i], fn, ctx);
  if (what & TH_BSYM_KWARGS)
    for (int i = 0; i < b->nkwargs; i++) th_arg_foreach_value(&b->kwargs[i], fn, ctx);
  if (what & TH_BSYM_OUT) th_arg_foreach_value(&b->out, fn, ctx);
}

static void id_bound_cb(th_value *v, void *ctx) {
  uint32_t *m = ctx;
  if (v && v->id + 1 > *m) *m = v->id + 1;
}

static void bsym_id_bound(const th_bsym *b, uint32_t *m) {
  th_bsym_foreach_value(b, TH_BSYM_ALL, id_bound_cb, m);
  for (int i = 0; i < b->nsubs; i++) bsym_id_bound(b->subs[i], m);
}

uint32_t th_trace_id_bound(const th_trace *tr) {
  uint32_t m = 0;
  for (int i = 0; i < tr->inputs.n; i++) id_bound_cb(tr->inputs.items[i], &m);
  for (int i = 0; i < tr->bsyms.n; i++) bsym_id_bound(tr->bsyms.items[i], &m);
  return m;
}

/* ---- deep copy of a bsym ---------------------------------------------------------------------- */

static void map_arg(th_arg *a, th_value_map_fn map, void *ctx) {
  if (a->kind == TH_ARG_VALUE) {
    a->u.value = map(a->u.value, ctx);
  } else if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT) {
    for (int i = 0; i < a->u.seq.n; i++) map_arg(&a->u.seq.items[i], map, ctx);
  }
}

static th_status clone_args(th_trace *dst, int n, const th_arg *src, th_value_map_fn map, void *ctx, th_arg **out) {
  *out = NULL;
  if (n == 0) return TH_OK;
  th_arg *a = th_arena_alloc(dst->arena, sizeof(th_arg) * (size_t)n);
  if (!a) return TH_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    TH_TRY(th_arg_copy(dst, &src[i], &a[i]));
    if (map) map_arg(&a[i], map, ctx);
  }
  *out = a;
  return TH_OK;
}

th_status th_bsym_clone(th_trace *dst, const th_bsym *src, th_value_map_fn map, void *ctx, th_bsym **out) {
  th_bsym *b = th_arena_alloc(dst->arena, sizeof *b);
  if (!b) return TH_ERR_NOMEM;
  *b = *src;
  if (src->sym->id == TH_OP_DYNAMIC) { /* dynamic symbols live in their trace's arena */
    th_symbol *s = th_arena_alloc(dst->arena, sizeof *s);
    if (!s) return TH_ERR_NOMEM;
    *s = *src->sym;
    s->name = s->qualname = th_arena_strdup(dst->arena, src->sym->name);
    if (!s->name) return TH_ERR_NOMEM;
    b->sym = s;
  }
  TH_TRY(clone_args(dst, src->nargs, src->args, map, ctx, &b->args));
  TH_TRY(clone_args(dst, src->nkwargs, src->kwargs, map, ctx, &b->kwargs));
  if (src->nkwargs) {
    b->kwnames = th_arena_alloc(dst->arena, sizeof(char *) * (size_t)src->nkwargs);
    if (!b->kwnames) return TH_ERR_NOMEM;
    for (int i = 0; i < src->nkwargs; i++)
      if (!(b->kwnames[i] = th_arena_strdup(dst->arena, src->kwnames[i]))) return TH_ERR_NOMEM;
  }
  TH_TRY(th_arg_copy(dst, &src->out, &b->out));
  if (map) map_arg(&b->out, map, ctx);
  if (src->executor && !(b->executor = th_arena_strdup(dst->arena, src->executor))) return TH_ERR_NOMEM;
  b->subs = NULL;
  if (src->nsubs) {
    b->subs = th_arena_alloc(dst->arena, sizeof(th_bsym *) * (size_t)src->nsubs);
    if (!b->subs) return TH_ERR_NOMEM;
    for (int i = 0; i < src->nsubs; i++) TH_TRY(th_bsym_clone(dst, src->subs[i], map, ctx, &b->subs[i]));
  }
  *out = b;
  return TH_OK;
}

/* ---- effects ----------------------------------------------------------------------------------- */

static bool has_tags_rec(const th_bsym *b, unsigned tags) {
  if (b->sym->tags & tags) return true;
  for (int i = 0; i < b->nsubs; i++)
    if (has_tags_rec(b->subs[i], tags)) return true;
  return false;
}

bool th_bsym_has_effect(const th_bsym *b) { return has_tags_rec(b, TH_TAG_DONT_DCE | TH_TAG_RANDOM | TH_TAG_IN_PLACE); }
