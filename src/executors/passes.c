/* passes.c — "Transform for execution": every top-level bsym of the result is claimed by an executor.
 *
 * The pass walks the trace's bsyms in order and copies each into a new trace of the same compilation:
 *   - utility prims (return, del, comment) are kept as they are, unclaimed;
 *   - the first executor in priority order whose impl table has the symbol, and whose checker accepts
 *     the call, claims it: the copy gets ->executor = that executor's name;
 *   - fusion regions and other dynamic symbols are replaced by their subsymbols;
 *   - an unclaimed torch-level bsym is replaced by its subsymbols, which are tried in turn. If it has
 *     none (a parsed trace printed at depth 1), its decomposition is re-run into the new trace and the
 *     decomposition's results are renamed to the bsym's recorded outputs (an input returned as-is
 *     becomes prims.shallow_copy), so later uses still refer to the same values;
 *   - an unclaimed prim is an error (Thunder: "Failed to find an executor for bound symbol").
 *   - a bfloat16 prims.matmul/prims.linear the BLAS executor claims, when this CPU has no bf16 GEMM and
 *     the fuser is listed before BLAS, is spelled out as what BLAS would do inside its kernel: its
 *     bf16 tensor operands converted to float32 (exact), the float32 GEMM, and the result converted
 *     back to bfloat16 (one rounding, as PyTorch) into the bsym's recorded output value. The widening
 *     and rounding then land in the neighbouring fusion regions instead of being separate passes over
 *     memory (a bf16 value feeding two GEMMs is widened once: one float32 value per bf16 value).
 *   - a GEMM the BLAS executor claims and the chain of elementwise ops after it that oneDNN can apply as
 *     post-ops (GEMM epilogues, below) become one bsym BLAS claims, with the GEMM and the ops as its
 *     subsymbols.
 * Dead code is then removed (decompositions may compute outputs nobody uses). Renaming is by value
 * identity: a map from value id to value, filled only for values made by re-run decompositions. */
#include <stdlib.h>
#include <string.h>

#include "executors/fuser/fuser.h"
#include "executors/passes.h"
#include "ops/torch/torch_util.h"

typedef struct {
  th_trace *out;
  const th_executor_desc *const *execs;
  int nexecs;
  th_value **rename; /* indexed by value id; NULL = keep */
  uint32_t nrename;
  bool widen_bf16;    /* spell out bf16 GEMMs as f32 GEMMs (see the file comment) */
  th_value **widened; /* indexed by the id of a bf16 value: its float32 conversion, once recorded */
  uint32_t nwidened;
  int nepilogues; /* GEMM epilogue bsyms made so far (their names' counter) */
} pass_ctx;

static th_value *rename_value(th_value *v, void *p) {
  pass_ctx *c = p;
  return v->id < c->nrename && c->rename[v->id] ? c->rename[v->id] : v;
}

static th_status set_rename(pass_ctx *c, th_value *from, th_value *to) {
  if (from->id >= c->nrename) {
    uint32_t n = c->nrename ? c->nrename : 64;
    while (n <= from->id) n *= 2;
    th_value **r = th_realloc(c->rename, sizeof(th_value *) * n);
    if (!r) return th_error(TH_ERR_NOMEM, "out of memory in the execution transform");
    memset(r + c->nrename, 0, sizeof(th_value *) * (n - c->nrename));
    c->rename = r;
    c->nrename = n;
  }
  c->rename[from->id] = to;
  return TH_OK;
}

static const th_operator_impl *find_impl(const th_executor_desc *e, th_op_id id) {
  for (int i = 0; i < e->nimpls; i++)
    if (e->impls[i].op == id) return &e->impls[i];
  return NULL;
}

/* ---- values of an arg, flattened ------------------------------------------------------------ */

typedef struct {
  th_value *v[256];
  int n;
  bool overflow;
} value_list;

static void collect_cb(th_value *v, void *p) {
  value_list *l = p;
  if (l->n < 256)
    l->v[l->n++] = v;
  else
    l->overflow = true;
}

static bool produced_by(th_bsym *const *bs, int n, const th_value *v) {
  for (int i = 0; i < n; i++) {
    value_list l = {{0}, 0, false};
    th_arg_foreach_value(&bs[i]->out, collect_cb, &l);
    for (int j = 0; j < l.n; j++)
      if (l.v[j] == v) return true;
  }
  return false;
}

/* Recording into a private list: bsyms a decomposition or rewrite records in the output trace go to
 * `subs` (processed afterwards) instead of its top level, outside verify mode. */
typedef struct {
  th_vec *scope;
  bool verify_mode;
} recording;

static recording record_into(th_trace *tr, th_vec *subs) {
  recording r = {tr->scope, tr->verify_mode};
  tr->scope = subs;
  tr->verify_mode = false;
  return r;
}

static void record_end(th_trace *tr, recording r) {
  tr->scope = r.scope;
  tr->verify_mode = r.verify_mode;
}

static th_status process(pass_ctx *c, const th_bsym *b);

/* Re-runs the decomposition of torch-level bsym b (already copied into the new trace as `copy`) and
 * processes the subsymbols it records. */
static th_status redecompose(pass_ctx *c, th_bsym *copy) {
  const th_symbol *sym = copy->sym;
  if (!sym->decomp || copy->nargs != sym->schema.nparams)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: no executor claims it and it cannot be decomposed", sym->qualname);
  th_trace *tr = c->out;
  th_vec subs = {0};
  recording rec = record_into(tr, &subs);
  th_arg result = th_arg_none();
  th_status st = sym->decomp(tr, sym, copy->args, &result);
  record_end(tr, rec);
  TH_TRY(st);

  value_list got = {{0}, 0, false}, want = {{0}, 0, false};
  th_arg_foreach_value(&result, collect_cb, &got);
  th_arg_foreach_value(&copy->out, collect_cb, &want);
  if (got.overflow || want.overflow || got.n != want.n)
    return th_error(TH_ERR_VERIFY, "%s: its decomposition gives %d outputs, but the trace records %d", sym->qualname,
                    got.n, want.n);
  th_bsym **bs = (th_bsym **)subs.items;
  for (int i = 0; i < got.n; i++) {
    th_value *r = got.v[i], *o = want.v[i];
    if (r == o) continue;
    if (produced_by(bs, subs.n, r)) {
      if (rename_value(r, c) == r) {
        TH_TRY(set_rename(c, r, o));
        continue;
      }
      r = rename_value(r, c); /* returned twice: the second output is a copy of the first */
    }
    /* the decomposition returned one of its inputs (or a value twice): the recorded output is a copy */
    const th_symbol *sc = th_symbol_get(TH_OP_prims_shallow_copy);
    th_arg *args = th_arena_alloc(tr->arena, sizeof(th_arg));
    if (!args) return TH_ERR_NOMEM;
    if (!r->is_tensor || !o->is_tensor)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: its decomposition returns the number %s unchanged", sym->qualname,
                      r->name ? r->name : "?");
    args[0] = th_arg_value(r);
    th_bsym *nb = th_bsym_new(tr, sc, 1, args, th_arg_value(o));
    if (!nb) return TH_ERR_NOMEM;
    TH_TRY(th_vec_push(tr->arena, &subs, nb));
  }
  for (int i = 0; i < subs.n; i++) TH_TRY(process(c, subs.items[i]));
  return TH_OK;
}

static bool is_bf16_gemm(const th_bsym *b) {
  if ((b->sym->id != TH_OP_prims_matmul && b->sym->id != TH_OP_prims_linear) || b->out.kind != TH_ARG_VALUE ||
      !b->out.u.value->is_tensor || th_value_dtype(b->out.u.value) != TH_BF16)
    return false;
  for (int i = 0; i < b->nargs; i++)
    if (b->args[i].kind == TH_ARG_VALUE && b->args[i].u.value->is_tensor &&
        th_value_dtype(b->args[i].u.value) != TH_BF16)
      return false;
  return true;
}

/* a float32 conversion of bf16 value v in the current scope of the output trace, recorded once per v */
static th_status widened_value(pass_ctx *c, th_value *v, th_arg *out) {
  if (v->id < c->nwidened && c->widened[v->id]) {
    *out = th_arg_value(c->widened[v->id]);
    return TH_OK;
  }
  *out = th_arg_value(v);
  TH_TRY(th_tu_convert(c->out, out, TH_F32));
  if (v->id >= c->nwidened) {
    uint32_t n = c->nwidened ? c->nwidened : 64;
    while (n <= v->id) n *= 2;
    th_value **w = th_realloc(c->widened, sizeof *w * n);
    if (!w) return TH_ERR_NOMEM;
    memset(w + c->nwidened, 0, sizeof *w * (n - c->nwidened));
    c->widened = w;
    c->nwidened = n;
  }
  c->widened[v->id] = out->u.value;
  return TH_OK;
}

/* bf16 GEMM `copy` (args already renamed) -> convert operands to f32, the f32 GEMM, convert back into
 * copy's output value; the recorded bsyms are then claimed like any others. */
static th_status widen_gemm(pass_ctx *c, const th_bsym *copy) {
  th_trace *tr = c->out;
  th_vec subs = {0};
  recording rec = record_into(tr, &subs);
  th_arg args[3], r = th_arg_none();
  th_status st = TH_OK;
  for (int i = 0; i < copy->nargs && i < 3 && st == TH_OK; i++) {
    args[i] = copy->args[i];
    if (args[i].kind == TH_ARG_VALUE && args[i].u.value->is_tensor) st = widened_value(c, args[i].u.value, &args[i]);
  }
  if (st == TH_OK)
    st = copy->sym->id == TH_OP_prims_linear ? th_tu_call3(tr, TH_OP_prims_linear, args[0], args[1], args[2], &r)
                                             : th_tu_call2(tr, TH_OP_prims_matmul, args[0], args[1], &r);
  if (st == TH_OK) st = th_tu_convert(tr, &r, TH_BF16);
  record_end(tr, rec);
  TH_TRY(st);
  if (r.kind != TH_ARG_VALUE || !produced_by((th_bsym **)subs.items, subs.n, r.u.value))
    return th_error(TH_ERR_RUNTIME, "%s: widening the bf16 GEMM recorded no output", copy->sym->qualname);
  TH_TRY(set_rename(c, r.u.value, copy->out.u.value));
  for (int i = 0; i < subs.n; i++) TH_TRY(process(c, subs.items[i]));
  return TH_OK;
}

static th_status unclaimed_error(const pass_ctx *c, const th_bsym *b) {
  char names[256] = "";
  size_t k = 0;
  for (int i = 0; i < c->nexecs && k < sizeof names; i++)
    k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", c->execs[i]->name);
  value_list outs = {{0}, 0, false};
  th_arg_foreach_value(&b->out, collect_cb, &outs);
  const char *oname = outs.n && outs.v[0]->name ? outs.v[0]->name : "";
  return th_error(TH_ERR_NOT_IMPLEMENTED, "Failed to find an executor for bound symbol %s%s%s (executors: %s)", oname,
                  oname[0] ? " = " : "", b->sym->qualname, names[0] ? names : "none");
}

static th_status process(pass_ctx *c, const th_bsym *b) {
  th_trace *tr = c->out;
  const th_symbol *sym = b->sym;
  if (sym->id == TH_OP_DYNAMIC) {
    if (b->nsubs == 0)
      return th_error(TH_ERR_NOT_IMPLEMENTED,
                      "%s: no executor claims it and it has no subsymbols to run instead (a trace "
                      "printed without subsymbols cannot run its fusion regions)",
                      sym->qualname);
    for (int i = 0; i < b->nsubs; i++) TH_TRY(process(c, b->subs[i]));
    return TH_OK;
  }
  th_bsym *copy;
  TH_TRY(th_bsym_clone(tr, b, rename_value, c, &copy));
  copy->executor = NULL;
  if (sym->tags & TH_TAG_UTILITY) {
    TH_TRY(th_vec_push(tr->arena, &tr->bsyms, copy));
    if (sym->id == TH_OP_prims_python_return) tr->has_return = true;
    return TH_OK;
  }
  for (int i = 0; i < c->nexecs; i++) {
    const th_operator_impl *impl = find_impl(c->execs[i], sym->id);
    bool claims = false;
    if (impl) TH_TRY(th_registry_check(c->execs[i], impl, copy, &claims));
    if (claims && c->widen_bf16 && c->execs[i] == &th_blas_executor && is_bf16_gemm(copy)) return widen_gemm(c, copy);
    if (claims) {
      /* copied: a user executor's name lives in a per-compilation snapshot */
      if (!(copy->executor = th_arena_strdup(tr->arena, c->execs[i]->name))) return TH_ERR_NOMEM;
      return th_vec_push(tr->arena, &tr->bsyms, copy);
    }
  }
  if (sym->is_prim) return unclaimed_error(c, b);
  if (b->nsubs == 0) return redecompose(c, copy);
  for (int i = 0; i < b->nsubs; i++) TH_TRY(process(c, b->subs[i]));
  return TH_OK;
}

/* ---- broadcast sinking (the fuser listed) ----------------------------------------------------------
 * `t = E(a, ...)` then `u = broadcast_in_dim(t, shape, dims)`, E a cheap elementwise prim (a template
 * with no call and no division, or a convert), becomes `a' = broadcast_in_dim(a, shape, dims), ...,
 * u = E(a', ...)`, through chains of such prims up to the first operand that is not made by one:
 * elementwise ops commute with broadcasting, so every element of u is the same, computed per element
 * of the larger shape. The fuser reads a broadcast region input in place, but refuses a broadcast of a
 * value its region computes (it would repeat computed elements), so without this the small computation
 * ends a region: causal attention's mask (`bias[:, :, :T, :T] == 0` on [1, 1, T, T], broadcast to
 * [B, H, T, T] for masked_fill) split the attention region in two and wrote the scaled scores to memory
 * and read them back. Only where the broadcast enlarges, its result has a fusible consumer (so a region
 * will hold the recomputation), the trace has no `del` yet and no effect (copy_, in-place) lies between a
 * recomputed prim and the broadcast (it could write what the prim reads). An operand used twice is sunk
 * once per broadcast (no blow-up on `t = add(t, t)` chains). E stays where it was for its other uses;
 * DCE drops it when none is left. */
static bool cheap_elementwise(const th_bsym *e) {
  if (!e->sym->is_prim || e->nkwargs || e->nargs > 8 || e->out.kind != TH_ARG_VALUE || !e->out.u.value->is_tensor ||
      !th_fuser_is_fusible(e))
    return false;
  if (e->sym->id == TH_OP_prims_convert_element_type) return true;
  return (e->sym->tags & TH_TAG_ELEMENTWISE) && e->sym->cexpr && !th_fuser_template_expensive(e->sym->cexpr);
}

typedef struct {
  const th_value *v;
  th_arg sunk;
} sink_memo;

typedef struct {
  pass_ctx *c;
  th_bsym **old; /* the trace's bsyms before the pass */
  int n;
  int *prod; /* value id -> index in old of its producer, -1 */
  uint32_t nprod;
  int *neff;          /* neff[i]: effects (copy_, in-place, update_aliases, ...) among old[0..i) */
  bool *elig;         /* elig[i]: old[i] is a broadcast to sink */
  int at;             /* the broadcast being sunk */
  sink_memo memo[64]; /* values already sunk for this broadcast (an operand used twice is sunk once) */
  int nmemo;
} sink_ctx;

/* Whether the producer of v may be recomputed at the broadcast: a cheap elementwise prim with no effect
 * between it and the broadcast (a copy_ into one of its operands there would change what it reads). */
static const th_bsym *sinkable(const sink_ctx *s, const th_value *v) {
  int j = v->id < s->nprod ? s->prod[v->id] : -1;
  if (j < 0 || !cheap_elementwise(s->old[j]) || s->neff[s->at] != s->neff[j + 1]) return NULL;
  return s->old[j];
}

/* v broadcast like b, with the cheap elementwise prims that make v applied after the broadcast */
static th_status sink_value(sink_ctx *s, const th_bsym *b, th_value *v, int depth, th_arg *out) {
  for (int k = 0; k < s->nmemo; k++)
    if (s->memo[k].v == v) {
      *out = s->memo[k].sunk;
      return TH_OK;
    }
  const th_bsym *e = sinkable(s, v);
  if (!e || depth >= 8 || s->nmemo >= (int)(sizeof s->memo / sizeof s->memo[0]) - 1) {
    TH_TRY(th_tu_call3(s->c->out, TH_OP_prims_broadcast_in_dim, th_arg_value(v), b->args[1], b->args[2], out));
  } else {
    th_arg args[8];
    for (int k = 0; k < e->nargs; k++) {
      args[k] = e->args[k];
      if (args[k].kind == TH_ARG_VALUE && args[k].u.value->is_tensor)
        TH_TRY(sink_value(s, b, args[k].u.value, depth + 1, &args[k]));
    }
    TH_TRY(th_call(s->c->out, e->sym->id, e->nargs, args, out));
  }
  if (s->nmemo < (int)(sizeof s->memo / sizeof s->memo[0])) s->memo[s->nmemo++] = (sink_memo){v, *out};
  return TH_OK;
}

static bool sink_eligible(sink_ctx *s, int i) {
  const th_bsym *b = s->old[i];
  if (b->sym->id != TH_OP_prims_broadcast_in_dim || b->nargs < 3 || b->args[0].kind != TH_ARG_VALUE ||
      b->out.kind != TH_ARG_VALUE || !b->args[0].u.value->is_tensor || !b->out.u.value->is_tensor)
    return false;
  const th_value *v = b->args[0].u.value;
  int64_t nv = th_value_numel(v), nu = th_value_numel(b->out.u.value);
  s->at = i;
  if (nv < 0 || nu <= nv || !sinkable(s, v)) return false;
  for (int k = i + 1; k < s->n; k++)
    if (th_fuser_bsym_reads(s->old[k], b->out.u.value) && th_fuser_is_fusible(s->old[k])) return true;
  return false;
}

static th_status sink_broadcasts(pass_ctx *c) {
  th_trace *tr = c->out;
  sink_ctx s;
  memset(&s, 0, sizeof s);
  s.c = c;
  s.old = (th_bsym **)tr->bsyms.items;
  s.n = tr->bsyms.n;
  for (int i = 0; i < s.n; i++) {
    if (s.old[i]->sym->id == TH_OP_prims_python_del) return TH_OK;
    value_list l = {{0}, 0, false};
    th_arg_foreach_value(&s.old[i]->out, collect_cb, &l);
    for (int k = 0; k < l.n; k++)
      if (l.v[k]->id + 1 > s.nprod) s.nprod = l.v[k]->id + 1;
  }
  bool any = false;
  s.prod = th_malloc(sizeof(int) * (s.nprod ? s.nprod : 1));
  s.neff = th_malloc(sizeof(int) * (size_t)(s.n + 1));
  s.elig = th_malloc(sizeof(bool) * (size_t)(s.n + 1));
  if (!s.prod || !s.neff || !s.elig) {
    th_free(s.prod);
    th_free(s.neff);
    th_free(s.elig);
    return TH_ERR_NOMEM;
  }
  s.neff[0] = 0;
  for (int i = 0; i < s.n; i++) s.neff[i + 1] = s.neff[i] + th_fuser_is_effect(s.old[i]);
  for (uint32_t k = 0; k < s.nprod; k++) s.prod[k] = -1;
  for (int i = 0; i < s.n; i++) {
    value_list l = {{0}, 0, false};
    th_arg_foreach_value(&s.old[i]->out, collect_cb, &l);
    for (int k = 0; k < l.n; k++) s.prod[l.v[k]->id] = i;
  }
  for (int i = 0; i < s.n; i++) any |= s.elig[i] = sink_eligible(&s, i);
  th_status st = TH_OK;
  if (any) {
    tr->bsyms = (th_vec){0}; /* rebuilt: tr->scope still points at it */
    for (int i = 0; i < s.n && st == TH_OK; i++) {
      const th_bsym *b = s.old[i];
      if (!s.elig[i]) {
        st = th_vec_push(tr->arena, &tr->bsyms, (void *)b);
        continue;
      }
      th_vec subs = {0};
      recording rec = record_into(tr, &subs);
      th_arg r = th_arg_none();
      s.at = i;
      s.nmemo = 0;
      st = sink_value(&s, b, b->args[0].u.value, 0, &r);
      record_end(tr, rec);
      if (st == TH_OK && (r.kind != TH_ARG_VALUE || !produced_by((th_bsym **)subs.items, subs.n, r.u.value)))
        st = th_error(TH_ERR_RUNTIME, "%s: sinking the broadcast recorded no output", b->sym->qualname);
      if (st == TH_OK) st = set_rename(c, r.u.value, b->out.u.value);
      for (int k = 0; k < subs.n && st == TH_OK; k++) st = process(c, subs.items[k]);
    }
  }
  th_free(s.prod);
  th_free(s.neff);
  th_free(s.elig);
  return st;
}

/* ---- GEMM epilogues (BLAS listed; THUNDER_GEMM_EPILOGUE=0 turns them off) --------------------------------
 * A top-level GEMM the BLAS executor would claim (th_blas_epilogue_gemm) and the ops after it, each the
 * only user of the previous one's result and an op oneDNN applies to the accumulator as a post-op
 * (th_blas_epilogue_op: GELU tanh/erf, SiLU, ReLU, + a residual tensor of the output's shape, * a
 * constant, a conversion between f32 and bf16), become one bsym of a dynamic symbol (`linear_gelu0`)
 * claimed by BLAS, emitted where the chain's last op was, with the GEMM and the ops (as recorded) as
 * its subsymbols and the GEMM's operands and the residuals as its arguments. An intermediate used
 * anywhere else (a second consumer, the return: a grad transform's forward that saves the
 * pre-activation for the backward) ends the chain there, so every value the rest of the trace reads
 * is still computed. The chain also ends at an effect (copy_, in-place ops, update_aliases) between
 * the GEMM and the next op, at an op an executor listed before BLAS implements (it would claim it), and
 * at four ops; it is cut back until oneDNN makes the primitive (probed at compile time). Values only
 * move later (the GEMM to its chain's last op), and nothing else reads them, so results are those of
 * the unfused ops up to the rounding: oneDNN rounds once, to the output dtype, where the unfused bf16
 * path rounds the GEMM's result and each op's (kernel: blas.c, "GEMM epilogues"). */
static bool epilogue_enabled(void) {
  const char *e = getenv("THUNDER_GEMM_EPILOGUE");
  return !e || strcmp(e, "0") != 0;
}

/* an executor listed before BLAS implements op (and would be asked first) */
static bool implemented_before_blas(const pass_ctx *c, th_op_id op) {
  for (int i = 0; i < c->nexecs && c->execs[i] != &th_blas_executor; i++)
    if (find_impl(c->execs[i], op)) return true;
  return false;
}

static bool gemm_claimed_by_blas(const pass_ctx *c, const th_bsym *g) {
  const th_op_id prim =
    g->sym->id == TH_OP_ltorch_linear || g->sym->id == TH_OP_prims_linear ? TH_OP_prims_linear : TH_OP_prims_matmul;
  return !implemented_before_blas(c, g->sym->id) && !implemented_before_blas(c, prim);
}

typedef struct {
  int *uses, *user; /* per value id: top-level uses as an argument, and the last bsym using it */
  uint32_t n;
} use_ctx;

static void count_use(th_value *v, void *p) {
  use_ctx *u = p;
  if (v->id >= u->n) return;
  u->uses[v->id]++;
  u->user[v->id] = u->user[u->n]; /* the bsym being walked, parked past the end */
}

static void max_id(th_value *v, void *p) {
  uint32_t *m = p;
  if (v->id + 1 > *m) *m = v->id + 1;
}

/* *emit_out[i], for tr's top-level bsyms: -1 (processed as usual), or the index of the last op of the
 * epilogue chain bsym i belongs to (where the fused bsym goes). NULL when no chain was found. */
static th_status plan_epilogues(const pass_ctx *c, const th_trace *tr, int **emit_out) {
  *emit_out = NULL;
  bool blas = false;
  for (int i = 0; i < c->nexecs; i++) blas |= c->execs[i] == &th_blas_executor;
  const int n = tr->bsyms.n;
  if (!blas || !n || !epilogue_enabled()) return TH_OK;
  uint32_t nid = 0;
  for (int i = 0; i < n; i++) th_bsym_foreach_value(tr->bsyms.items[i], TH_BSYM_ALL, max_id, &nid);
  use_ctx u = {th_calloc((size_t)nid + 1, sizeof(int)), th_calloc((size_t)nid + 1, sizeof(int)), nid};
  int *emit = th_malloc(sizeof(int) * (size_t)n), *neff = th_malloc(sizeof(int) * (size_t)(n + 1));
  if (!u.uses || !u.user || !emit || !neff) {
    th_free(u.uses);
    th_free(u.user);
    th_free(emit);
    th_free(neff);
    return th_error(TH_ERR_NOMEM, "out of memory in the execution transform");
  }
  neff[0] = 0;
  for (int i = 0; i < n; i++) {
    const th_bsym *b = tr->bsyms.items[i];
    u.user[nid] = i;
    th_bsym_foreach_value(b, TH_BSYM_INPUTS, count_use, &u);
    neff[i + 1] = neff[i] + th_fuser_is_effect(b);
    emit[i] = -1;
  }
  bool any = false;
  for (int i = 0; i < n; i++) {
    const th_bsym *g = tr->bsyms.items[i];
    if (emit[i] >= 0 || !th_blas_epilogue_gemm(g) || !gemm_claimed_by_blas(c, g)) continue;
    th_blas_epi ops[TH_BLAS_EPI_MAX];
    int members[TH_BLAS_EPI_MAX + 1] = {i}, nops = 0;
    const th_value *v = g->out.u.value;
    while (nops < TH_BLAS_EPI_MAX && v->id < nid && u.uses[v->id] == 1) {
      const int j = u.user[v->id];
      const th_bsym *e = tr->bsyms.items[j];
      if (j <= i || emit[j] >= 0 || neff[j] != neff[i + 1] || implemented_before_blas(c, e->sym->id) ||
          !th_blas_epilogue_op(e, v, &ops[nops]))
        break;
      members[++nops] = j;
      v = e->out.u.value;
    }
    while (nops > 0 && !th_blas_epilogue_supported(g, ops, nops)) nops--;
    for (int k = 0; nops > 0 && k <= nops; k++) emit[members[k]] = members[nops];
    any |= nops > 0;
  }
  th_free(u.uses);
  th_free(u.user);
  th_free(neff);
  if (any)
    *emit_out = emit;
  else
    th_free(emit);
  return TH_OK;
}

static const char *epilogue_name(th_blas_epi_kind k) {
  switch (k) {
    case TH_BLAS_EPI_GELU_TANH:
    case TH_BLAS_EPI_GELU_ERF: return "gelu";
    case TH_BLAS_EPI_SILU: return "silu";
    case TH_BLAS_EPI_RELU: return "relu";
    case TH_BLAS_EPI_ADD: return "add";
    case TH_BLAS_EPI_SCALE: return "mul";
    case TH_BLAS_EPI_CONVERT: return "convert";
  }
  return "op";
}

/* The fused bsym of the chain whose last op is tr's bsym `last`, appended to the output trace. */
static th_status emit_epilogue(pass_ctx *c, const th_trace *tr, const int *emit, int last) {
  th_trace *nt = c->out;
  int m = 0;
  for (int i = 0; i <= last; i++) m += emit[i] == last;
  th_bsym **subs = th_arena_alloc(nt->arena, sizeof *subs * (size_t)m);
  th_arg *args = th_arena_alloc(nt->arena, sizeof *args * (size_t)(m + 3));
  if (!subs || !args) return TH_ERR_NOMEM;
  for (int i = 0, k = 0; i <= last; i++) {
    if (emit[i] != last) continue;
    TH_TRY(th_bsym_clone(nt, tr->bsyms.items[i], rename_value, c, &subs[k]));
    subs[k++]->executor = NULL;
  }
  const th_bsym *g = subs[0];
  int na = 0;
  for (int a = 0; a < g->nargs; a++)
    if (g->args[a].kind == TH_ARG_VALUE) args[na++] = g->args[a];
  char name[96];
  int len = snprintf(name, sizeof name, "%s",
                     g->sym->id == TH_OP_ltorch_linear || g->sym->id == TH_OP_prims_linear ? "linear" : "matmul");
  const th_value *v = g->out.u.value;
  for (int k = 1; k < m; k++) {
    th_blas_epi op;
    if (!th_blas_epilogue_op(subs[k], v, &op))
      return th_error(TH_ERR_RUNTIME, "%s: not a GEMM epilogue op", subs[k]->sym->qualname);
    if (op.kind == TH_BLAS_EPI_ADD) args[na++] = *op.operand;
    len += snprintf(name + len, sizeof name - (size_t)len, "_%s", epilogue_name(op.kind));
    v = subs[k]->out.u.value;
  }
  snprintf(name + len, sizeof name - (size_t)len, "%d", c->nepilogues++);
  th_symbol *sym = th_symbol_new_dynamic(nt, name);
  if (!sym) return TH_ERR_NOMEM;
  th_bsym *b = th_bsym_new(nt, sym, na, args, subs[m - 1]->out);
  if (!b || !(b->executor = th_arena_strdup(nt->arena, th_blas_executor.name))) return TH_ERR_NOMEM;
  b->nsubs = m;
  b->subs = subs;
  b->line = subs[m - 1]->line;
  return th_vec_push(nt->arena, &nt->bsyms, b);
}

th_status th_transform_for_execution(const th_trace *tr, const th_executor_desc *const *execs, int nexecs,
                                     th_trace **out) {
  double t0 = th_pass_clock_ms();
  th_trace *nt = th_trace_derive(tr, tr->fn_name);
  if (!nt) return TH_ERR_NOMEM;
  pass_ctx c = {nt, execs, nexecs, NULL, 0, false, NULL, 0, 0};
  for (int i = 0; i < nexecs; i++) { /* the fuser listed before BLAS, on a CPU without a bf16 GEMM */
    if (execs[i] == &th_blas_executor) break;
    if (execs[i] == &th_fuser_executor) c.widen_bf16 = !th_blas_has_native_bf16();
  }
  int *emit = NULL;
  th_status st = plan_epilogues(&c, tr, &emit);
  for (int i = 0; i < tr->inputs.n && st == TH_OK; i++) st = th_vec_push(nt->arena, &nt->inputs, tr->inputs.items[i]);
  for (int i = 0; i < tr->bsyms.n && st == TH_OK; i++) {
    const th_bsym *top = tr->bsyms.items[i];
    if (emit && emit[i] >= 0) {
      if (emit[i] == i) st = emit_epilogue(&c, tr, emit, i);
      continue;
    }
    st = process(&c, top);
    if (st != TH_OK && st != TH_ERR_NOMEM && !top->sym->is_prim) {
      /* the failing bsym came from a decomposition: say which statement of the user's trace it was */
      char msg[768];
      snprintf(msg, sizeof msg, "%s", th_last_error());
      if (top->line > 0)
        th_error(st, "line %d: in the decomposition of %s: %s", top->line, top->sym->qualname, msg);
      else
        th_error(st, "in the decomposition of %s: %s", top->sym->qualname, msg);
    }
  }
  bool fuser_listed = false;
  for (int i = 0; i < nexecs; i++) fuser_listed |= execs[i] == &th_fuser_executor;
  if (st == TH_OK && fuser_listed) st = sink_broadcasts(&c);
  if (st == TH_OK) st = th_dce_in_place(nt);
  if (st == TH_OK) {
    char pss[96];
    snprintf(pss, sizeof pss, "Transform for execution (took %ld milliseconds)", (long)(th_pass_clock_ms() - t0));
    st = th_trace_set_provenance(nt, pss);
  }
  th_free(c.rename);
  th_free(c.widened);
  th_free(emit);
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM)
      th_error(TH_ERR_NOMEM, "out of memory in the execution transform");
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  return TH_OK;
}
