/* cse.c — Common Subexpression Elimination (Thunder's cse / cse_single_bsym, transform_common.py).
 *
 * One forward walk over the top-level bsyms. Each bsym is first copied with its arguments (and its
 * subsymbols' references) rewritten through the redundancy map, then keyed by its right-hand side:
 * (symbol, rewritten arguments, keyword arguments, executor). When an earlier bsym has the same key,
 * this one is redundant: it is dropped, and each of its outputs maps to the matching output of the
 * earlier one (flattened in order; an output that is the earlier one's own value is left alone), so
 * every later use, the return included, reads the first occurrence. Otherwise it is kept and, when
 * pure, becomes the first occurrence of its key.
 *
 * Key equality: values by identity (id, after rewriting), constants by value and kind (1, 1.0 and
 * True differ; floats compared bitwise, so -0.0 differs from 0.0 and a NaN matches only the same
 * bits), strings, dtypes, devices, slices, object names, and tuples/lists/dicts item by item (a tuple
 * never equals a list). The executor name is part of the key (both NULL counts as the same), so only
 * bsyms claimed by the same executor merge. Thunder instead keeps one bsym per right-hand side and
 * overwrites it when the executors differ; keying by executor merges the same pairs and, for an
 * A, B, A sequence, also the two A's.
 *
 * Never merged (never a first occurrence): bsyms with an effect on them or any subsymbol (DONT_DCE,
 * RANDOM, IN_PLACE: return, copy_, uniform, dropout, in-place ops), utility bsyms (return, del,
 * comment), Thunder's other non-functional op (scaled_dot_product_attention, which may draw dropout),
 * and dynamic symbols (fusion regions and opaque executor ops, whose bodies the key does not see).
 *
 * A `del` keeps only values that neither were made redundant nor became the target of a merge (a
 * merge target takes over its duplicate's later uses, which may follow the del). Finally dead code
 * is eliminated (th_dce_in_place), as Thunder's cse is followed by dce: the result has no dead
 * duplicates and no other dead code. */
#include <string.h>

#include "transforms/transforms.h"

/* ---- keys ------------------------------------------------------------------------------------------ */

static uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

static uint64_t hash_str(uint64_t h, const char *s) {
  if (!s) return mix(h, 0x5a5a);
  for (; *s; s++) h = mix(h, (unsigned char)*s);
  return mix(h, 0xff);
}

static uint64_t hash_arg(uint64_t h, const th_arg *a) {
  h = mix(h, (uint64_t)a->kind + 1);
  switch (a->kind) {
    case TH_ARG_VALUE: return mix(h, a->u.value ? a->u.value->id : 0xffffffffu);
    case TH_ARG_BOOL: return mix(h, a->u.b);
    case TH_ARG_INT: return mix(h, (uint64_t)a->u.i);
    case TH_ARG_FLOAT: {
      uint64_t bits;
      memcpy(&bits, &a->u.f, sizeof bits);
      return mix(h, bits);
    }
    case TH_ARG_STR:
    case TH_ARG_OBJECT: return hash_str(h, a->u.s);
    case TH_ARG_DTYPE: return mix(h, (uint64_t)a->u.dtype);
    case TH_ARG_DEVICE: return mix(mix(h, (uint64_t)a->u.device.type), (uint64_t)a->u.device.index);
    case TH_ARG_TUPLE:
    case TH_ARG_LIST:
    case TH_ARG_DICT:
      h = mix(h, (uint64_t)a->u.seq.n);
      for (int i = 0; i < a->u.seq.n; i++) {
        if (a->kind == TH_ARG_DICT && a->u.seq.keys) h = hash_str(h, a->u.seq.keys[i]);
        h = hash_arg(h, &a->u.seq.items[i]);
      }
      return h;
    case TH_ARG_SLICE:
      h = mix(h,
              (uint64_t)a->u.slice.has_start | (uint64_t)a->u.slice.has_stop << 1 | (uint64_t)a->u.slice.has_step << 2);
      if (a->u.slice.has_start) h = mix(h, (uint64_t)a->u.slice.start);
      if (a->u.slice.has_stop) h = mix(h, (uint64_t)a->u.slice.stop);
      if (a->u.slice.has_step) h = mix(h, (uint64_t)a->u.slice.step);
      return h;
    default: return h; /* NONE, ELLIPSIS */
  }
}

static bool str_eq(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static bool arg_eq(const th_arg *a, const th_arg *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case TH_ARG_VALUE:
      return a->u.value == b->u.value || (a->u.value && b->u.value && a->u.value->id == b->u.value->id);
    case TH_ARG_BOOL: return a->u.b == b->u.b;
    case TH_ARG_INT: return a->u.i == b->u.i;
    case TH_ARG_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof a->u.f) == 0;
    case TH_ARG_STR:
    case TH_ARG_OBJECT: return str_eq(a->u.s, b->u.s);
    case TH_ARG_DTYPE: return a->u.dtype == b->u.dtype;
    case TH_ARG_DEVICE: return a->u.device.type == b->u.device.type && a->u.device.index == b->u.device.index;
    case TH_ARG_TUPLE:
    case TH_ARG_LIST:
    case TH_ARG_DICT:
      if (a->u.seq.n != b->u.seq.n) return false;
      for (int i = 0; i < a->u.seq.n; i++) {
        if (a->kind == TH_ARG_DICT &&
            !str_eq(a->u.seq.keys ? a->u.seq.keys[i] : NULL, b->u.seq.keys ? b->u.seq.keys[i] : NULL))
          return false;
        if (!arg_eq(&a->u.seq.items[i], &b->u.seq.items[i])) return false;
      }
      return true;
    case TH_ARG_SLICE:
      return a->u.slice.has_start == b->u.slice.has_start && a->u.slice.has_stop == b->u.slice.has_stop &&
             a->u.slice.has_step == b->u.slice.has_step &&
             (!a->u.slice.has_start || a->u.slice.start == b->u.slice.start) &&
             (!a->u.slice.has_stop || a->u.slice.stop == b->u.slice.stop) &&
             (!a->u.slice.has_step || a->u.slice.step == b->u.slice.step);
    default: return true; /* NONE, ELLIPSIS */
  }
}

static uint64_t hash_bsym(const th_bsym *b) {
  uint64_t h = mix(0xcbf29ce484222325ull, (uint64_t)b->sym->id);
  h = hash_str(h, b->executor);
  h = mix(h, (uint64_t)b->nargs);
  for (int i = 0; i < b->nargs; i++) h = hash_arg(h, &b->args[i]);
  h = mix(h, (uint64_t)b->nkwargs);
  for (int i = 0; i < b->nkwargs; i++) h = hash_arg(hash_str(h, b->kwnames[i]), &b->kwargs[i]);
  return h;
}

static bool bsym_key_eq(const th_bsym *a, const th_bsym *b) {
  if (a->sym->id != b->sym->id || !str_eq(a->executor, b->executor) || a->nargs != b->nargs || a->nkwargs != b->nkwargs)
    return false;
  for (int i = 0; i < a->nargs; i++)
    if (!arg_eq(&a->args[i], &b->args[i])) return false;
  for (int i = 0; i < a->nkwargs; i++)
    if (!str_eq(a->kwnames[i], b->kwnames[i]) || !arg_eq(&a->kwargs[i], &b->kwargs[i])) return false;
  return true;
}

/* Whether b may be merged with an earlier bsym of the same key (Thunder: not NON_FUNCTIONAL_OPS). */
static bool mergeable(const th_bsym *b) {
  const th_symbol *s = b->sym;
  if (s->id == TH_OP_DYNAMIC || (s->tags & TH_TAG_UTILITY)) return false;
  if (s->id == TH_OP_ltorch_scaled_dot_product_attention) return false;
  return !th_bsym_has_effect(b);
}

/* Whether b writes a tensor in place (an in-place op, or prims.copy_ at any depth). A value read
 * after the write names the same buffer with new contents, so no computation recorded before it
 * may stand for one after it. */
static bool writes_in_place(const th_bsym *b) {
  if ((b->sym->tags & TH_TAG_IN_PLACE) || b->sym->id == TH_OP_prims_copy_) return true;
  for (int i = 0; i < b->nsubs; i++)
    if (writes_in_place(b->subs[i])) return true;
  return false;
}

/* ---- the pass ------------------------------------------------------------------------------------ */

typedef struct {
  th_value **redundant; /* indexed by value id: the first occurrence it maps to, NULL = itself */
  bool *target;         /* indexed by value id: some redundant value maps to it */
  uint32_t nids;
  const th_bsym **table; /* open addressing, power-of-two capacity: first occurrences */
  uint64_t *hashes;
  size_t cap, used;
} cse_ctx;

static th_value *map_value(th_value *v, void *p) {
  cse_ctx *c = p;
  return v && v->id < c->nids && c->redundant[v->id] ? c->redundant[v->id] : v;
}

/* Flattened values of an output, for pairing the outputs of two bsyms of one key. */
typedef struct {
  th_value **v;
  int n, cap;
  bool oom;
} vlist;

static void collect_cb(th_value *v, void *p) {
  vlist *l = p;
  if (l->oom) return;
  if (l->n == l->cap) {
    int ncap = l->cap ? l->cap * 2 : 8;
    th_value **nv = th_realloc(l->v, sizeof(th_value *) * (size_t)ncap);
    if (!nv) {
      l->oom = true;
      return;
    }
    l->v = nv;
    l->cap = ncap;
  }
  l->v[l->n++] = v;
}

static th_status table_grow(cse_ctx *c) {
  size_t ncap = c->cap ? c->cap * 2 : 256;
  const th_bsym **nt = th_calloc(ncap, sizeof *nt);
  uint64_t *nh = th_calloc(ncap, sizeof *nh);
  if (!nt || !nh) {
    th_free(nt);
    th_free(nh);
    return th_error(TH_ERR_NOMEM, "out of memory in common subexpression elimination");
  }
  for (size_t i = 0; i < c->cap; i++) {
    if (!c->table[i]) continue;
    size_t j = (size_t)c->hashes[i] & (ncap - 1);
    while (nt[j]) j = (j + 1) & (ncap - 1);
    nt[j] = c->table[i];
    nh[j] = c->hashes[i];
  }
  th_free(c->table);
  th_free(c->hashes);
  c->table = nt;
  c->hashes = nh;
  c->cap = ncap;
  return TH_OK;
}

/* The first occurrence of b's key, or NULL after inserting b as the first occurrence. */
static th_status lookup_or_insert(cse_ctx *c, const th_bsym *b, const th_bsym **prior) {
  *prior = NULL;
  if ((c->used + 1) * 2 > c->cap) TH_TRY(table_grow(c));
  uint64_t h = hash_bsym(b);
  size_t j = (size_t)h & (c->cap - 1);
  for (; c->table[j]; j = (j + 1) & (c->cap - 1)) {
    if (c->hashes[j] == h && bsym_key_eq(c->table[j], b)) {
      *prior = c->table[j];
      return TH_OK;
    }
  }
  c->table[j] = b;
  c->hashes[j] = h;
  c->used++;
  return TH_OK;
}

/* b is redundant with prior: map b's outputs to prior's, pairwise in flattened order. */
static th_status map_outputs(cse_ctx *c, const th_bsym *b, const th_bsym *prior) {
  vlist lb = {0}, lp = {0};
  th_arg_foreach_value(&b->out, collect_cb, &lb);
  th_arg_foreach_value(&prior->out, collect_cb, &lp);
  th_status st = TH_OK;
  if (lb.oom || lp.oom) {
    st = th_error(TH_ERR_NOMEM, "out of memory in common subexpression elimination");
  } else {
    for (int i = 0; i < lb.n && i < lp.n; i++) {
      th_value *src = lb.v[i], *dst = lp.v[i];
      if (!src || !dst || src->id == dst->id) continue; /* aliasing: nothing to rewrite */
      if (src->id < c->nids) c->redundant[src->id] = dst;
      if (dst->id < c->nids) c->target[dst->id] = true;
    }
  }
  th_free(lb.v);
  th_free(lp.v);
  return st;
}

/* Drops from a del the values that were made redundant or became merge targets (a del left empty is
 * dropped by the DCE that follows). */
static void filter_del(const cse_ctx *c, th_bsym *d) {
  for (int k = 0; k < d->nargs; k++) {
    th_arg *a = &d->args[k];
    if (a->kind == TH_ARG_VALUE) {
      const th_value *v = a->u.value;
      if (v && v->id < c->nids && (c->redundant[v->id] || c->target[v->id])) *a = th_arg_tuple(0, NULL);
      continue;
    }
    if (a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST) continue;
    int m = 0;
    for (int i = 0; i < a->u.seq.n; i++) {
      const th_arg *x = &a->u.seq.items[i];
      const th_value *v = x->kind == TH_ARG_VALUE ? x->u.value : NULL;
      if (v && v->id < c->nids && (c->redundant[v->id] || c->target[v->id])) continue;
      a->u.seq.items[m++] = *x;
    }
    a->u.seq.n = m;
  }
}

th_status th_cse(const th_trace *tr, th_trace **out) {
  double t0 = th_pass_clock_ms();
  th_trace *nt = th_trace_derive(tr, tr->fn_name);
  if (!nt) return TH_ERR_NOMEM;
  cse_ctx c = {0};
  th_status st = TH_OK;

  uint32_t nids = th_trace_id_bound(tr);
  c.nids = nids;
  c.redundant = th_calloc(nids ? nids : 1, sizeof *c.redundant);
  c.target = th_calloc(nids ? nids : 1, sizeof *c.target);
  if (!c.redundant || !c.target) st = th_error(TH_ERR_NOMEM, "out of memory in common subexpression elimination");

  for (int i = 0; i < tr->inputs.n && st == TH_OK; i++) st = th_vec_push(nt->arena, &nt->inputs, tr->inputs.items[i]);
  th_vec dels = {0}; /* the copied dels, filtered once every merge is known */
  for (int i = 0; i < tr->bsyms.n && st == TH_OK; i++) {
    const th_bsym *src = tr->bsyms.items[i];
    bool is_del = th_bsym_has_role(src, TH_SYM_DEL);
    th_bsym *b;
    /* a del is copied as it is: its values are filtered at the end */
    if ((st = th_bsym_clone(nt, src, is_del ? NULL : map_value, &c, &b)) != TH_OK) break;
    if (is_del) {
      if ((st = th_vec_push(nt->arena, &dels, b)) != TH_OK) break;
    } else if (mergeable(b)) {
      const th_bsym *prior;
      if ((st = lookup_or_insert(&c, b, &prior)) != TH_OK) break;
      if (prior) { /* redundant: dropped, its outputs read the first occurrence */
        st = map_outputs(&c, b, prior);
        continue;
      }
    } else if (writes_in_place(b) && c.cap) { /* what came before is forgotten */
      memset(c.table, 0, c.cap * sizeof *c.table);
      memset(c.hashes, 0, c.cap * sizeof *c.hashes);
      c.used = 0;
    }
    st = th_vec_push(nt->arena, &nt->bsyms, b);
  }
  for (int i = 0; i < dels.n && st == TH_OK; i++) filter_del(&c, dels.items[i]);
  nt->has_return = tr->has_return;
  nt->nfusions = tr->nfusions;
  /* dels left empty by the filter are dropped by DCE, which keeps only still-defined values */
  if (st == TH_OK) st = th_dce_in_place(nt);
  if (st == TH_OK) {
    char pss[112];
    snprintf(pss, sizeof pss, "Common Subexpression Elimination (took %ld milliseconds)",
             (long)(th_pass_clock_ms() - t0));
    st = th_trace_set_provenance(nt, pss);
  }
  th_free(c.redundant);
  th_free(c.target);
  th_free(c.table);
  th_free(c.hashes);
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM)
      th_error(TH_ERR_NOMEM, "out of memory in common subexpression elimination");
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  return TH_OK;
}
