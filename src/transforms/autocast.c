/* autocast.c — the function transform that replays a trace under an autocast region (Thunder's
 * `autocast(fn, dtype)`).
 *
 * The rules recording applies inside a region are the ops layer's (ops/autocast.c): th_trace_autocast_push
 * opens a region on a trace, and th_call_kw, recording an op at the top level, runs the op's rule on its
 * bound arguments first (see th_autocast_fn in core/ir.h).
 *
 * The transform (th_autocast): a new trace of the same compilation, with a CPU and a CUDA region of
 * the dtype open, into which every top-level bsym of the old trace is recorded again (th_call_kw on its
 * bound arguments, with each value replaced by what it became). Re-recording, not patching, is what
 * keeps every proxy's dtype right (the add after an autocast matmul sees a bfloat16 operand and
 * converts it back to float32). */
#include <string.h>

#include "transforms/transforms.h"

/* ---- the function transform ------------------------------------------------------------------------- */

/* old value -> new value, open addressing on the pointer */
typedef struct {
  th_value **keys, **vals;
  size_t cap, n;
} value_map;

static size_t ptr_hash(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

static th_status map_put(value_map *m, th_value *k, th_value *v) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    th_value **keys = th_calloc(cap, sizeof *keys), **vals = th_calloc(cap, sizeof *vals);
    if (!keys || !vals) {
      th_free(keys);
      th_free(vals);
      return th_error(TH_ERR_NOMEM, "autocast: out of memory");
    }
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->keys[i]) continue;
      size_t j = ptr_hash(m->keys[i], cap);
      while (keys[j]) j = (j + 1) & (cap - 1);
      keys[j] = m->keys[i];
      vals[j] = m->vals[i];
    }
    th_free(m->keys);
    th_free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
  }
  size_t i = ptr_hash(k, m->cap);
  while (m->keys[i] && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
  if (!m->keys[i]) m->n++;
  m->keys[i] = k;
  m->vals[i] = v;
  return TH_OK;
}

static th_value *map_get(th_value *k, void *ctx) {
  const value_map *m = ctx;
  if (!m->cap) return k;
  for (size_t i = ptr_hash(k, m->cap); m->keys[i]; i = (i + 1) & (m->cap - 1))
    if (m->keys[i] == k) return m->vals[i];
  return k;
}

/* Substitutes the map in an argument already copied into the new trace's arena. */
static void subst(th_arg *a, const value_map *m) {
  if (a->kind == TH_ARG_VALUE) {
    a->u.value = map_get(a->u.value, (void *)m);
  } else if (a->kind == TH_ARG_TUPLE || a->kind == TH_ARG_LIST || a->kind == TH_ARG_DICT) {
    for (int i = 0; i < a->u.seq.n; i++) subst(&a->u.seq.items[i], m);
  }
}

typedef struct {
  const value_map *m;
  bool hit;
} mapped_ctx;

/* Notes a value that was replaced. */
static void mapped_cb(th_value *v, void *p) {
  mapped_ctx *c = p;
  if (map_get(v, (void *)c->m) != v) c->hit = true;
}

/* Records in m what each output value of the old bsym became. */
static th_status map_outputs(value_map *m, const th_arg *old, const th_arg *neu, const char *op) {
  if (old->kind == TH_ARG_VALUE) {
    if (neu->kind != TH_ARG_VALUE)
      return th_error(TH_ERR_RUNTIME, "autocast: replaying %s gave a %s where the trace has a value", op,
                      th_arg_kind_name(neu));
    return old->u.value == neu->u.value ? TH_OK : map_put(m, old->u.value, neu->u.value);
  }
  if (old->kind == TH_ARG_TUPLE || old->kind == TH_ARG_LIST) {
    if ((neu->kind != TH_ARG_TUPLE && neu->kind != TH_ARG_LIST) || neu->u.seq.n != old->u.seq.n)
      return th_error(TH_ERR_RUNTIME, "autocast: replaying %s changed the structure of its outputs", op);
    for (int i = 0; i < old->u.seq.n; i++) TH_TRY(map_outputs(m, &old->u.seq.items[i], &neu->u.seq.items[i], op));
  }
  return TH_OK;
}

/* Re-records one top-level bsym of the old trace into nt. */
static th_status replay(th_trace *nt, const th_bsym *b, value_map *m) {
  const th_symbol *sym = b->sym;
  if (th_symbol_has_role(sym, TH_SYM_DEL)) return TH_OK;
  if (th_symbol_has_role(sym, TH_SYM_COMMENT)) return th_trace_add_comment(nt, b->args[0].u.s);
  if (th_symbol_has_role(sym, TH_SYM_RETURN)) {
    th_arg ret, upd = th_arg_tuple(0, NULL);
    TH_TRY(th_arg_copy(nt, &b->args[0], &ret));
    subst(&ret, m);
    if (b->nargs > 1) {
      TH_TRY(th_arg_copy(nt, &b->args[1], &upd));
      subst(&upd, m);
    }
    int cap = upd.kind == TH_ARG_TUPLE ? upd.u.seq.n : 0, n = 0;
    th_value **vals = th_malloc(sizeof(th_value *) * (size_t)(cap ? cap : 1));
    if (!vals) return th_error(TH_ERR_NOMEM, "autocast: out of memory");
    for (int i = 0; i < cap; i++)
      if (upd.u.seq.items[i].kind == TH_ARG_VALUE) vals[n++] = upd.u.seq.items[i].u.value;
    th_status st = th_trace_set_return_updated(nt, ret, n, vals);
    th_free(vals);
    return st;
  }
  if (sym->id == TH_OP_DYNAMIC || b->nargs != sym->schema.nparams) {
    /* a fusion region or an executor op of a parsed trace: nothing to re-record; copied as it is */
    mapped_ctx mc = {m, false};
    th_bsym_foreach_value(b, TH_BSYM_INPUTS, mapped_cb, &mc);
    if (mc.hit)
      return th_error(TH_ERR_NOT_IMPLEMENTED,
                      "autocast: cannot replay %s: it is not an op of this build, and an input of it was converted",
                      sym->qualname);
    th_bsym *c;
    TH_TRY(th_bsym_clone(nt, b, NULL, NULL, &c));
    return th_trace_append(nt, c);
  }
  /* schema symbols: bound arguments back into positional and keyword-only ones */
  int np = sym->schema.nparams, npos = 0, nkw = 0;
  th_arg *pos = th_arena_alloc(nt->arena, sizeof(th_arg) * (size_t)(np ? np : 1));
  th_arg *kw = th_arena_alloc(nt->arena, sizeof(th_arg) * (size_t)(np ? np : 1));
  const char **kwnames = th_arena_alloc(nt->arena, sizeof(char *) * (size_t)(np ? np : 1));
  if (!pos || !kw || !kwnames) return TH_ERR_NOMEM;
  for (int i = 0; i < np; i++) {
    th_arg a;
    TH_TRY(th_arg_copy(nt, &b->args[i], &a));
    subst(&a, m);
    if (sym->schema.params[i].kwonly) {
      kwnames[nkw] = sym->schema.params[i].name;
      kw[nkw++] = a;
    } else {
      pos[npos++] = a;
    }
  }
  th_arg res;
  TH_TRY(th_call_kw(nt, sym, npos, pos, nkw, kwnames, kw, &res));
  return map_outputs(m, &b->out, &res, sym->qualname);
}

th_status th_autocast(const th_trace *tr, th_dtype dtype, th_trace **out) {
  if (dtype != TH_F16 && dtype != TH_BF16)
    return th_error(TH_ERR_VALUE, "autocast: `dtype` is expected to be either float16 or bfloat16, but %s",
                    (unsigned)dtype < TH_DTYPE_COUNT ? th_dtype_name(dtype) : "an invalid dtype");
  double start = th_pass_clock_ms();
  th_trace *nt = th_trace_derive(tr, NULL);
  if (!nt) return TH_ERR_NOMEM;
  value_map m = {0};
  th_status st = TH_OK;
  for (int i = 0; st == TH_OK && i < tr->inputs.n; i++) st = th_vec_push(nt->arena, &nt->inputs, tr->inputs.items[i]);
  if (st == TH_OK) st = th_trace_autocast_push(nt, TH_CPU, dtype, true);
  if (st == TH_OK) st = th_trace_autocast_push(nt, TH_CUDA, dtype, true);
  nt->scope = &nt->bsyms;
  nt->nfusions = tr->nfusions; /* regions copied as they are keep their names */
  for (int i = 0; st == TH_OK && i < tr->bsyms.n; i++) st = replay(nt, tr->bsyms.items[i], &m);
  nt->autocast.n = 0; /* the regions were the transform's, not the program's */
  th_free(m.keys);
  th_free(m.vals);
  if (st == TH_OK) {
    char prov[96];
    snprintf(prov, sizeof prov, "Autocast (took %ld milliseconds)", (long)(th_pass_clock_ms() - start));
    st = th_trace_set_provenance(nt, prov);
  }
  if (st != TH_OK) {
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  return TH_OK;
}
