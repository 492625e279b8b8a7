/* verify.c — th_trace_verify: checks that a trace is a well-formed program whose recorded metadata
 * is what its ops' metas compute (Thunder's check_trace recomputes no metadata).
 *
 * Two passes over the top-level bound symbols and, recursively, their subsymbols:
 *   1. structure: RETURN present and last (top level); every value argument defined before use
 *      (inputs and earlier outputs); no value used after `del`; each value defined once. Subsymbols
 *      form their own scope: they see only their parent's argument values (positional and keyword)
 *      plus the outputs of earlier subsymbols of the same parent, so a decomposition or a fusion
 *      region is a function of its arguments ("line 6: fusion nvFusion0 uses x, which is not one of
 *      its arguments"); they may not redefine a value of an enclosing scope. The outputs of a known
 *      (non-dynamic) op that has subsymbols must be outputs of those subsymbols ("line 4: the
 *      decomposition of `t0 = ltorch.neg(x)` does not produce t0"). Whether the decomposition
 *      computes the same function as its op is not checked (only its metadata, by pass 2, and only
 *      where its values come from, here); nor are the outputs of dynamic symbols, whose meaning is
 *      their body. Every scope is one hash set: the pass is linear in the trace (times the nesting depth).
 *   2. metas: every bsym of a known op (not a dynamic symbol such as a fusion region, not a utility)
 *      is re-bound against its schema and its meta (or decomposition) re-run in verify mode in a
 *      scratch trace of the same compilation; the shape, dtype and device of each output must equal
 *      the recorded ones.
 * Failures are TH_ERR_VERIFY with one message naming the statement (and its line when parsed) and the
 * value: "line 14: `tree = prims.convert_element_type(a, dtypes.bfloat16)` records tree as
 * cuda:0 f32[2, 2], but its meta gives cuda:0 bf16[2, 2]". */
#include <string.h>

#include "core/ir.h"
#include "core/printer.h"

#define MAX_DEPTH 256

/* ---- a set of values (one per scope) ------------------------------------------------------------------ */

enum { UNDEF = 0, DEFINED = 1, DELETED = 2 };

typedef struct slot {
  const th_value *v;
  int state;
} slot;

typedef struct vset {
  slot *slots;
  size_t cap, n;
  bool oom;
} vset;

static size_t hash_ptr(const th_value *v) {
  uint64_t x = (uint64_t)(uintptr_t)v;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static bool vset_grow(vset *s) {
  size_t cap = s->cap ? s->cap * 2 : 16;
  slot *sl = th_calloc(cap, sizeof *sl);
  if (!sl) return false;
  for (size_t i = 0; i < s->cap; i++) {
    if (!s->slots[i].v) continue;
    size_t j = hash_ptr(s->slots[i].v) & (cap - 1);
    while (sl[j].v) j = (j + 1) & (cap - 1);
    sl[j] = s->slots[i];
  }
  th_free(s->slots);
  s->slots = sl;
  s->cap = cap;
  return true;
}

static int vset_get(const vset *s, const th_value *v) {
  if (!s->cap) return UNDEF;
  for (size_t i = hash_ptr(v) & (s->cap - 1); s->slots[i].v; i = (i + 1) & (s->cap - 1))
    if (s->slots[i].v == v) return s->slots[i].state;
  return UNDEF;
}

static void vset_set(vset *s, const th_value *v, int state) {
  if ((s->n + 1) * 2 > s->cap && !vset_grow(s)) {
    s->oom = true;
    return;
  }
  size_t i = hash_ptr(v) & (s->cap - 1);
  while (s->slots[i].v && s->slots[i].v != v) i = (i + 1) & (s->cap - 1);
  if (!s->slots[i].v) {
    s->slots[i].v = v;
    s->n++;
  }
  s->slots[i].state = state;
}

static void vset_free(vset *s) { th_free(s->slots); }

/* ---- messages ---------------------------------------------------------------------------------------------- */

/* "line 14: `tree = prims.convert_element_type(a, dtypes.bfloat16)` " + the formatted rest. */
static th_status fail(const th_bsym *b, const char *fmt, ...) {
  char rest[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rest, sizeof rest, fmt, ap);
  va_end(ap);
  th_strbuf sb;
  th_sb_init(&sb);
  if (b && b->line > 0) th_sb_printf(&sb, "line %d: ", b->line);
  if (b) {
    th_sb_putc(&sb, '`');
    th_print_bsym_line(&sb, b, false);
    th_sb_puts(&sb, "` ");
  }
  th_sb_puts(&sb, rest);
  char *s = th_sb_take(&sb);
  if (!s) return th_error(TH_ERR_NOMEM, "out of memory reporting a verification error");
  /* keep the statement readable but the message within the error buffer */
  if (strlen(s) > 900) {
    memcpy(s + 890, " [...]", 7);
  }
  th_error(TH_ERR_VERIFY, "%s", s);
  free(s);
  return TH_ERR_VERIFY;
}

static const char *vname(const th_value *v) { return v && v->name ? v->name : "<unnamed>"; }

/* ---- pass 1: structure --------------------------------------------------------------------------------------- */

/* A scope: the top level (owner NULL), or the subsymbols of `owner`, which see only the owner's
 * argument values and what earlier subsymbols define (a decomposition or a fusion region is a function
 * of its arguments). `up` is the enclosing scope, consulted for better messages and for values defined
 * twice. */
typedef struct scope {
  vset defs;
  const struct scope *up;
  const th_bsym *owner;
} scope;

typedef struct sctx {
  scope *sc;
  const th_bsym *b;
  th_status st;
} sctx;

static bool is_dynamic(const th_symbol *sym) { return sym->id == TH_OP_DYNAMIC || !sym->module; }

/* "fusion nvFusion0" / "region TorchCompile0": how a message names a dynamic symbol's region. */
static const char *region_word(const th_symbol *sym) {
  const char *n = sym->name ? sym->name : "";
  for (const char *p = n; *p; p++)
    if ((p[0] == 'f' || p[0] == 'F') && !strncmp(p + 1, "usion", 5)) return "fusion";
  return "region";
}

/* A use inside a region of a value that its owner does not pass in. */
static th_status fail_not_argument(const th_bsym *owner, const th_bsym *sub, const th_value *v) {
  int line = sub->line > 0 ? sub->line : owner->line;
  th_strbuf sb;
  th_sb_init(&sb);
  if (line > 0) th_sb_printf(&sb, "line %d: ", line);
  if (is_dynamic(owner->sym)) {
    th_sb_printf(&sb, "%s %s uses %s, which is not one of its arguments", region_word(owner->sym),
                 owner->sym->name ? owner->sym->name : "?", vname(v));
  } else {
    th_sb_puts(&sb, "the decomposition of `");
    th_print_bsym_line(&sb, owner, false);
    th_sb_printf(&sb, "` uses %s, which is not one of its arguments", vname(v));
  }
  if (line <= 0) {
    th_sb_puts(&sb, " (in `");
    th_print_bsym_line(&sb, sub, false);
    th_sb_puts(&sb, "`)");
  }
  char *s = th_sb_take(&sb);
  if (!s) return th_error(TH_ERR_NOMEM, "out of memory reporting a verification error");
  if (strlen(s) > 900) memcpy(s + 890, " [...]", 7);
  th_error(TH_ERR_VERIFY, "%s", s);
  free(s);
  return TH_ERR_VERIFY;
}

/* The state of v in the scopes enclosing c->sc (DEFINED if defined in any of them). */
static int outer_state(const scope *sc, const th_value *v) {
  int st = UNDEF;
  for (const scope *u = sc->up; u; u = u->up) {
    int s = vset_get(&u->defs, v);
    if (s == DEFINED) return DEFINED;
    if (s == DELETED) st = DELETED;
  }
  return st;
}

static void check_use(th_value *v, void *p) {
  sctx *c = p;
  if (c->st != TH_OK) return;
  if (!v) {
    c->st = fail(c->b, "has a null value argument");
    return;
  }
  int s = vset_get(&c->sc->defs, v);
  if (s == DELETED)
    c->st = fail(c->b, "uses %s after it was deleted (del)", vname(v));
  else if (s != DEFINED && c->sc->owner && outer_state(c->sc, v) != UNDEF)
    c->st = fail_not_argument(c->sc->owner, c->b, v);
  else if (s != DEFINED)
    c->st = fail(c->b, "uses %s, which is not defined before it", vname(v));
}

static void mark_deleted(th_value *v, void *p) {
  sctx *c = p;
  if (v) vset_set(&c->sc->defs, v, DELETED);
}

static void define(th_value *v, void *p) {
  sctx *c = p;
  if (c->st != TH_OK) return;
  if (!v) {
    c->st = fail(c->b, "has a null output");
    return;
  }
  if (vset_get(&c->sc->defs, v) != UNDEF || outer_state(c->sc, v) != UNDEF) {
    c->st = fail(c->b, "defines %s, which is already defined", vname(v));
    return;
  }
  vset_set(&c->sc->defs, v, DEFINED);
}

static void define_arg(th_value *v, void *p) {
  scope *sc = p;
  if (v) vset_set(&sc->defs, v, DEFINED);
}

typedef struct produced_ctx {
  const scope *sub; /* the decomposition's scope, after its subsymbols */
  const th_bsym *b;
  th_status st;
} produced_ctx;

/* An output of a known op must be defined by its decomposition (one of its subsymbols' outputs). */
static void check_produced(th_value *v, void *p) {
  produced_ctx *c = p;
  if (c->st != TH_OK || !v) return;
  if (vset_get(&c->sub->defs, v) == UNDEF) {
    th_strbuf sb;
    th_sb_init(&sb);
    if (c->b->line > 0) th_sb_printf(&sb, "line %d: ", c->b->line);
    th_sb_puts(&sb, "the decomposition of `");
    th_print_bsym_line(&sb, c->b, false);
    th_sb_printf(&sb, "` does not produce %s", vname(v));
    char *s = th_sb_take(&sb);
    if (!s) {
      c->st = th_error(TH_ERR_NOMEM, "out of memory reporting a verification error");
      return;
    }
    if (strlen(s) > 900) memcpy(s + 890, " [...]", 7);
    th_error(TH_ERR_VERIFY, "%s", s);
    free(s);
    c->st = TH_ERR_VERIFY;
  }
}

static th_status check_scope(sctx *c, th_bsym *const *bsyms, int n, int depth);

/* `C0, C1, = coll`: unpacks a collection into exactly its items (th_value.coll_items). */
static th_status check_unpack(const th_bsym *b) {
  const th_value *c = b->nargs >= 1 && b->args[0].kind == TH_ARG_VALUE ? b->args[0].u.value : NULL;
  if (!c || !c->is_collection) return fail(b, "unpacks something that is not a Collection");
  if (b->out.kind != TH_ARG_TUPLE || b->out.u.seq.n != c->coll_n)
    return fail(b, "unpacks %d values, but %s holds %d", b->out.kind == TH_ARG_TUPLE ? b->out.u.seq.n : 1, vname(c),
                c->coll_n);
  for (int i = 0; i < c->coll_n; i++) {
    const th_arg *o = &b->out.u.seq.items[i];
    const th_value *want = c->coll_items[i];
    if (o->kind == TH_ARG_NONE && !want) continue;
    if (o->kind != TH_ARG_VALUE || o->u.value != want)
      return fail(b, "unpacks item %d of %s as %s, but the collection holds %s", i, vname(c),
                  o->kind == TH_ARG_VALUE ? vname(o->u.value) : "_", want ? vname(want) : "_");
  }
  return TH_OK;
}

/* The subsymbols of b in their own scope (b's argument values), then b's outputs: defined in the
 * current scope and, for a known op, produced by the subsymbols. */
static th_status check_subs_and_outputs(sctx *c, const th_bsym *b, int depth) {
  scope sub;
  memset(&sub, 0, sizeof sub);
  sub.up = c->sc;
  sub.owner = b;
  th_bsym_foreach_value(b, TH_BSYM_INPUTS, define_arg, &sub);
  scope *saved = c->sc;
  c->sc = &sub;
  th_status st = sub.defs.oom ? th_error(TH_ERR_NOMEM, "out of memory verifying a trace")
                              : check_scope(c, b->subs, b->nsubs, depth + 1);
  c->sc = saved;
  c->b = b;
  if (st == TH_OK) {
    th_arg_foreach_value(&b->out, define, c);
    st = c->st;
  }
  if (st == TH_OK && !is_dynamic(b->sym) && !(b->sym->tags & TH_TAG_UTILITY)) {
    produced_ctx pc = {&sub, b, TH_OK};
    th_arg_foreach_value(&b->out, check_produced, &pc);
    st = pc.st;
  }
  vset_free(&sub.defs);
  return st;
}

static th_status check_scope(sctx *c, th_bsym *const *bsyms, int n, int depth) {
  if (depth > MAX_DEPTH) return fail(NULL, "subsymbols nested more than %d levels deep", MAX_DEPTH);
  for (int i = 0; i < n; i++) {
    const th_bsym *b = bsyms[i];
    if (!b || !b->sym) return fail(NULL, "a bound symbol without a symbol (at position %d)", i);
    c->b = b;
    th_bsym_foreach_value(b, TH_BSYM_INPUTS, check_use, c);
    TH_TRY(c->st);
    if (th_bsym_has_role(b, TH_SYM_DEL)) {
      th_bsym_foreach_value(b, TH_BSYM_ARGS, mark_deleted, c);
      continue;
    }
    if (th_bsym_has_role(b, TH_SYM_UNPACK_SEQUENCE)) TH_TRY(check_unpack(b));
    if (b->nsubs) {
      if (!b->subs) return fail(b, "has %d subsymbols but no subsymbol list", b->nsubs);
      TH_TRY(check_subs_and_outputs(c, b, depth));
    } else {
      th_arg_foreach_value(&b->out, define, c);
      TH_TRY(c->st);
    }
    if (c->sc->defs.oom) return th_error(TH_ERR_NOMEM, "out of memory verifying a trace");
  }
  return TH_OK;
}

static th_status check_structure(const th_trace *tr) {
  int n = tr->bsyms.n;
  th_bsym *const *bs = (th_bsym *const *)tr->bsyms.items;
  int ret = -1;
  for (int i = 0; i < n; i++)
    if (bs[i] && th_bsym_has_role(bs[i], TH_SYM_RETURN)) {
      ret = i;
      break;
    }
  if (ret < 0) return fail(NULL, "the trace has no return statement");
  if (ret != n - 1) {
    th_strbuf sb;
    th_sb_init(&sb);
    if (bs[ret + 1] && bs[ret + 1]->sym) th_print_bsym_line(&sb, bs[ret + 1], false);
    char *next = th_sb_take(&sb);
    if (!next) return TH_ERR_NOMEM;
    th_status st =
      fail(bs[ret], "is not the last statement: `%.300s`%s follows it", next, n - ret > 2 ? " (and more)" : "");
    free(next);
    return st;
  }
  scope top;
  memset(&top, 0, sizeof top);
  sctx c;
  memset(&c, 0, sizeof c);
  c.sc = &top;
  for (int i = 0; i < tr->inputs.n; i++) {
    const th_value *v = tr->inputs.items[i];
    if (vset_get(&top.defs, v) != UNDEF) {
      vset_free(&top.defs);
      return fail(NULL, "input %s appears twice in the signature", vname(v));
    }
    vset_set(&top.defs, v, DEFINED);
  }
  th_status st = top.defs.oom ? th_error(TH_ERR_NOMEM, "out of memory verifying a trace") : check_scope(&c, bs, n, 0);
  vset_free(&top.defs);
  return st;
}

/* ---- pass 2: metas -------------------------------------------------------------------------------------------- */

static bool same_meta(const th_value *a, const th_value *b) {
  if (a->is_tensor != b->is_tensor) return false;
  if (!a->is_tensor) return a->dtype == b->dtype;
  if (a->dtype != b->dtype || !th_device_eq(a->device, b->device) || a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

static const char *kind_words(const th_arg *a) {
  switch (a->kind) {
    case TH_ARG_NONE: return "no output";
    case TH_ARG_VALUE: return "one value";
    case TH_ARG_TUPLE: return "a tuple";
    case TH_ARG_LIST: return "a list";
    default: return "a constant";
  }
}

/* Compares a recorded output with the inferred one. */
static th_status compare_out(const th_bsym *b, const th_arg *rec, const th_arg *inf) {
  if (rec->kind == TH_ARG_NONE) return TH_OK; /* result discarded (no LHS, or `_`) */
  if (rec->kind == TH_ARG_VALUE) {
    if (inf->kind != TH_ARG_VALUE || !inf->u.value)
      return fail(b, "records %s, but its meta gives %s", vname(rec->u.value), kind_words(inf));
    if (!same_meta(rec->u.value, inf->u.value)) {
      char r[160], m[160];
      th_print_value_type(rec->u.value, r, sizeof r);
      th_print_value_type(inf->u.value, m, sizeof m);
      return fail(b, "records %s as %s, but its meta gives %s", vname(rec->u.value), r, m);
    }
    return TH_OK;
  }
  if (rec->kind == TH_ARG_TUPLE || rec->kind == TH_ARG_LIST) {
    if ((inf->kind != TH_ARG_TUPLE && inf->kind != TH_ARG_LIST) || inf->u.seq.n != rec->u.seq.n) {
      if (inf->kind == TH_ARG_TUPLE || inf->kind == TH_ARG_LIST)
        return fail(b, "records %d outputs, but its meta gives %d", rec->u.seq.n, inf->u.seq.n);
      return fail(b, "records %d outputs, but its meta gives %s", rec->u.seq.n, kind_words(inf));
    }
    for (int i = 0; i < rec->u.seq.n; i++) TH_TRY(compare_out(b, &rec->u.seq.items[i], &inf->u.seq.items[i]));
    return TH_OK;
  }
  return TH_OK; /* a constant output: nothing to compare */
}

static th_status check_meta(th_trace *scratch, const th_bsym *b) {
  const th_symbol *sym = b->sym;
  const th_schema *sc = &sym->schema;
  if (b->nargs != sc->nparams)
    return fail(b, "has %d arguments, but %s takes %d", b->nargs, sym->qualname, sc->nparams);
  if (b->nkwargs) return fail(b, "has keyword arguments outside %s's schema", sym->qualname);
  if (sc->nparams > 64) return fail(b, "%s has too many parameters", sym->qualname);
  /* re-bind: positional-or-keyword parameters positionally, keyword-only ones by name */
  th_arg pos[64], kw[64];
  const char *kwn[64];
  int np = 0, nk = 0;
  for (int i = 0; i < sc->nparams; i++) {
    if (sc->params[i].kwonly) {
      kwn[nk] = sc->params[i].name;
      kw[nk++] = b->args[i];
    } else {
      if (nk) return fail(b, "%s's schema has a positional parameter after a keyword-only one", sym->qualname);
      pos[np++] = b->args[i];
    }
  }
  th_arg *bound;
  th_status st = th_schema_bind(scratch, sym, np, pos, nk, kwn, kw, &bound);
  if (st == TH_ERR_NOMEM) return st;
  if (st != TH_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", th_last_error());
    return fail(b, "does not bind to the schema of %s: %s", sym->qualname, msg);
  }
  th_arg inf = th_arg_none();
  st = th_symbol_infer(scratch, sym, bound, &inf);
  if (st == TH_ERR_NOMEM) return st;
  if (st != TH_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", th_last_error());
    return fail(b, "fails its meta: %s", msg);
  }
  return compare_out(b, &b->out, &inf);
}

static th_status check_metas(th_trace *scratch, th_bsym *const *bsyms, int n, int depth) {
  if (depth > MAX_DEPTH) return fail(NULL, "subsymbols nested more than %d levels deep", MAX_DEPTH);
  for (int i = 0; i < n; i++) {
    const th_bsym *b = bsyms[i];
    if (b->sym->id != TH_OP_DYNAMIC && b->sym->module && !(b->sym->tags & TH_TAG_UTILITY))
      TH_TRY(check_meta(scratch, b));
    TH_TRY(check_metas(scratch, b->subs, b->nsubs, depth + 1));
  }
  return TH_OK;
}

th_status th_trace_verify(const th_trace *tr) {
  if (!tr) return th_error(TH_ERR_VALUE, "th_trace_verify: trace is NULL");
  TH_TRY(check_structure(tr));
  th_trace *scratch = th_trace_derive(tr, NULL);
  if (!scratch) return TH_ERR_NOMEM;
  th_status st = check_metas(scratch, (th_bsym *const *)tr->bsyms.items, tr->bsyms.n, 0);
  th_trace_free(scratch);
  return st;
}
