/* nest.c — which bsyms may be fused, and a region's members as loop nests: the one analysis the
 * partition (may this region grow?) and the codegen (what to emit) share, so the partition never
 * groups what the codegen cannot lower.
 *
 * Fusible (th_fuser_is_fusible): a prim without effects whose outputs are tensors and whose other
 * arguments are constants (no number proxies):
 *   - ELEMENTWISE with a cexpr template, every tensor operand of the output's shape (a region member,
 *     th_fuser_is_fusible_member, may also take 0-d tensor operands; see pointwise below); in the integer
 *     compute class a template that divides ('/', '%') or calls a function stays eager (integer division
 *     by zero is an error there, libm calls would round), and so does '~' on bool (the prelude's exact
 *     th_fz_ helpers, such as prims.where's select, are not calls in this sense);
 *   - convert_element_type of a tensor (every dtype pair, fp8 included: the casts are core/scalar.h's);
 *   - the layout ops broadcast_in_dim, reshape, transpose, slice_prim, squeeze, stride_order, and clone;
 *   - the reductions sum, prod, amax, amin, var, var_mean.
 *
 * The plan (th_fz_plan_build), for members m0..mn-1 in program order:
 *  1. INVIEW: a layout op whose operand is not computed in the region (a region input, or another
 *     INVIEW's output) is part of an input read: the launcher applies it to the bound tensor.
 *  2. Components: computing members connected through the values they pass. Each becomes a nest with
 *     domain D and r reduced dims: D = the input shape of its first reduction, whose reduced dims must
 *     be a suffix (size-1 dims after them may stay; a row nest, r = nd - first reduced dim) or else a
 *     prefix (every dim before the last reduced one reduced or of size 1; a column nest, `col`, r = one
 *     past the last reduced dim: x.sum(0), bias gradients); without a reduction D is the largest output
 *     shape and r = 0. Components of equal (D, r, col) share one nest; different ones are independent
 *     nests of the region (its horizontal merge).
 *  3. Levels, in program order. A FULL value carries its store map smap (the element offset, in a
 *     contiguous tensor of its own shape, of the element at domain index i is sum_d smap[d] * i[d]); a
 *     ROW value has one element per row, its flat index being the row index.
 *       pointwise: member operands share one level and store map, which the output takes; with only
 *         region inputs, the output is FULL with the identity map when its shape is D, ROW when its shape
 *         is the rows' (size-1 dims aside), else the region cannot hold it; a 0-d operand of a larger
 *         output must be a ROW value of a one-row nest (a full reduction's result, or a value computed
 *         from it: seed 003's amax -> scale -> x * scale), which every later pass reads as the row's
 *         variable, so the reduction and its elementwise consumers are two phases of one nest;
 *       reshape, squeeze, stride_order of a member: the same elements (flat order kept): same level/map;
 *       transpose of a FULL member: its coordinate map (the store map decomposed over its shape, which
 *         must be a relabelling without carries) permuted;
 *       broadcast_in_dim of a member: inserting size-1 dims only keeps level and map; a ROW value
 *         broadcast to exactly D, its dims on the row dims in order, is the per-row scalar (ROWBCAST);
 *         any other broadcast of a member (one that repeats computed elements) is refused;
 *       slice_prim of a member: refused (a slice of an intermediate ends the region);
 *       reductions: the input FULL with the identity map (a region input: of shape D) and reducing
 *         exactly the nest's rows (same row count and row length; a column nest's "rows" are its
 *         columns: a ROW value has one element per index of the kept dims D[r:nd]); outputs ROW. amax/amin
 *         of empty rows are refused (eager raises PyTorch's error), var/var_mean need a float input. A
 *         column nest is walked once (codegen_columns.c: var by Welford), so it refuses any
 *         broadcast of a ROW value back over D.
 *  4. Reads: each use of a region input by a computing member is a read slot of its nest: the view chain
 *     (at most TH_FZ_MAX_VIEWS ops) and the coordinate map A from the domain (FULL: the user's store map
 *     decomposed over the read value's shape; ROW: the row index decomposed). Equal reads share a slot. */
#include <string.h>

#include "executors/fuser/fuser.h"

/* ---- fusible ---------------------------------------------------------------------------------------- */

static int dclass(th_dtype d) { return d == TH_F64 ? 1 : th_dtype_is_float(d) ? 0 : 2; }

static bool tensor_arg(const th_arg *a) { return a->kind == TH_ARG_VALUE && a->u.value->is_tensor; }

static bool is_layout(th_op_id id) {
  return id == TH_OP_prims_broadcast_in_dim || id == TH_OP_prims_reshape || id == TH_OP_prims_transpose ||
         id == TH_OP_prims_slice_prim || id == TH_OP_prims_squeeze || id == TH_OP_prims_stride_order;
}

static bool is_reduction(th_op_id id) {
  return id == TH_OP_prims_sum || id == TH_OP_prims_prod || id == TH_OP_prims_amax || id == TH_OP_prims_amin ||
         id == TH_OP_prims_var || id == TH_OP_prims_var_mean;
}

/* An int list argument (TUPLE or LIST of ints): its length, or -1. */
static int int_list(const th_arg *a, int64_t *out, int max) {
  if (a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST) return -1;
  if (a->u.seq.n > max) return -1;
  for (int i = 0; i < a->u.seq.n; i++) {
    if (a->u.seq.items[i].kind != TH_ARG_INT) return -1;
    out[i] = a->u.seq.items[i].u.i;
  }
  return a->u.seq.n;
}

static bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool th_fuser_template_calls(const char *t) {
  for (const char *p = t; *p; p++) {
    if (*p != '(' || p == t || !ident_char(p[-1])) continue;
    const char *id = p;
    while (id > t && ident_char(id[-1])) id--;
    if (id > t && id[-1] == '%') continue;                 /* "%0(": an operand hole, not a name */
    if (p - id > 6 && !strncmp(id, "th_fz_", 6)) continue; /* the prelude's exact helpers */
    return true;
  }
  return false;
}

bool th_fuser_template_expensive(const char *t) { return strchr(t, '/') || th_fuser_template_calls(t); }

/* The template computes in the integer class: no division, remainder, call, or '~' on bool. */
static bool int_template_ok(const char *t, th_dtype d) {
  for (const char *p = t; *p; p++) {
    if (*p == '/') return false;
    if (*p == '%' && (p[1] < '0' || p[1] > '9')) return false; /* "%0" is an operand hole, "a % b" is not */
    if (*p == '~' && d == TH_BOOL) return false;
  }
  return !th_fuser_template_calls(t);
}

/* scalars: an elementwise prim's tensor operand may also be a 0-d tensor under a larger output (a full
 * reduction's result scaling its own input, seed 003's amax -> scale -> multiply chain) */
static bool fusible(const th_bsym *b, bool scalars) {
  const th_symbol *s = b->sym;
  if (!s->is_prim || s->id >= TH_OP_COUNT || b->nsubs || b->nkwargs || b->nargs < 1) return false;
  if (s->tags & (TH_TAG_RANDOM | TH_TAG_DONT_DCE | TH_TAG_IN_PLACE | TH_TAG_UTILITY)) return false;
  th_op_id id = s->id;
  if (id == TH_OP_prims_var_mean) {
    if (b->out.kind != TH_ARG_TUPLE || b->out.u.seq.n != 2) return false;
    for (int i = 0; i < 2; i++)
      if (!tensor_arg(&b->out.u.seq.items[i])) return false;
  } else if (b->out.kind != TH_ARG_VALUE || !b->out.u.value->is_tensor) {
    return false;
  }
  if (is_layout(id) || id == TH_OP_prims_clone || is_reduction(id)) {
    if (!tensor_arg(&b->args[0])) return false;
    for (int i = 1; i < b->nargs; i++)
      if (b->args[i].kind == TH_ARG_VALUE) return false; /* number proxies as sizes/dims */
    if ((id == TH_OP_prims_var || id == TH_OP_prims_var_mean) && !th_dtype_is_float(b->args[0].u.value->dtype))
      return false;
    return true;
  }
  if (s->tags & TH_TAG_CONVERT) return tensor_arg(&b->args[0]) && b->nargs == 2 && b->args[1].kind == TH_ARG_DTYPE;
  if (!(s->tags & TH_TAG_ELEMENTWISE) || !s->cexpr) return false;
  const th_value *o = b->out.u.value;
  th_dtype d = o->dtype;
  int ntensors = 0;
  for (int i = 0; i < b->nargs; i++) {
    const th_arg *a = &b->args[i];
    if (a->kind == TH_ARG_VALUE) {
      if (!a->u.value->is_tensor) return false;
      if (scalars && a->u.value->ndim == 0 && o->ndim > 0) {
        if (o->dtype == TH_BOOL) d = a->u.value->dtype;
        continue;
      }
      if (a->u.value->ndim != o->ndim) return false;
      for (int k = 0; k < o->ndim; k++)
        if (a->u.value->shape[k] != o->shape[k]) return false;
      ntensors++;
      if (o->dtype == TH_BOOL) d = a->u.value->dtype;
    } else if (a->kind != TH_ARG_BOOL && a->kind != TH_ARG_INT && a->kind != TH_ARG_FLOAT) {
      return false;
    }
  }
  if (!ntensors || b->nargs > 4) return false;
  return dclass(d) != 2 || int_template_ok(s->cexpr, d);
}

bool th_fuser_is_fusible(const th_bsym *b) { return fusible(b, false); }
bool th_fuser_is_fusible_member(const th_bsym *b) { return fusible(b, true); }

/* ---- shapes ------------------------------------------------------------------------------------------ */

static int64_t numel(const int64_t *s, int n) {
  int64_t k = 1;
  for (int i = 0; i < n; i++) k *= s[i];
  return k;
}

/* Row-major strides by products of the later sizes (0 after a zero size). */
static void cstrides(const int64_t *s, int n, int64_t *st) {
  int64_t k = 1;
  for (int i = n - 1; i >= 0; i--) {
    st[i] = k;
    k *= s[i];
  }
}

static bool same_shape(const int64_t *a, int na, const int64_t *b, int nb) {
  if (na != nb) return false;
  for (int i = 0; i < na; i++)
    if (a[i] != b[i]) return false;
  return true;
}

/* The non-1 sizes of a and b agree in order. */
static bool same_non1(const int64_t *a, int na, const int64_t *b, int nb) {
  int i = 0, j = 0;
  for (;;) {
    while (i < na && a[i] == 1) i++;
    while (j < nb && b[j] == 1) j++;
    if (i == na || j == nb) return i == na && j == nb;
    if (a[i++] != b[j++]) return false;
  }
}

/* broadcast_in_dim(u, o, bdims) only inserts size-1 dims: u's non-1 dims land in order on o's dims of
 * the same size and cover every non-1 dim of o (so the flat order is kept). */
static bool unsqueeze_only(const int64_t *u, int nu, const int64_t *o, int no, const int64_t *bd) {
  bool covered[TH_MAX_DIMS] = {false};
  int64_t prev = -1;
  for (int k = 0; k < nu; k++) {
    if (u[k] == 1) continue;
    int64_t t = bd[k];
    if (t <= prev || t >= no || o[t] != u[k]) return false;
    covered[t] = true;
    prev = t;
  }
  for (int d = 0; d < no; d++)
    if (o[d] != 1 && !covered[d]) return false;
  return true;
}

/* Decomposes a store map over shape w: A[k][d] = how far coordinate k moves per step of domain dim d,
 * so that sum_k cs[k] * A[k][d] = smap[d] and no coordinate can overflow its size (a relabelling of the
 * domain without carries). N: the index space's sizes (dims of size <= 1 get no column). */
static bool decompose(const int64_t *smap, const int64_t *N, int nd, const int64_t *w, int nw,
                      int64_t A[TH_MAX_DIMS][TH_MAX_DIMS]) {
  memset(A, 0, sizeof(int64_t) * TH_MAX_DIMS * TH_MAX_DIMS);
  if (numel(N, nd) == 0) return true; /* nothing is ever read */
  int64_t cs[TH_MAX_DIMS];
  cstrides(w, nw, cs);
  for (int d = 0; d < nd; d++) {
    if (N[d] <= 1 || smap[d] == 0) continue;
    int k = 0;
    while (k < nw && !(w[k] > 1 && cs[k] > 0 && cs[k] <= smap[d] && smap[d] % cs[k] == 0 && smap[d] / cs[k] < w[k]))
      k++;
    if (k == nw) return false;
    A[k][d] = smap[d] / cs[k];
  }
  for (int k = 0; k < nw; k++) {
    int64_t span = 0;
    for (int d = 0; d < nd; d++)
      if (N[d] > 1) span += A[k][d] * (N[d] - 1);
    if (span > w[k] - 1) return false;
  }
  return true;
}

/* ---- the plan -------------------------------------------------------------------------------------- */

typedef struct {
  const th_bsym *const *ms;
  int n;
  th_fz_plan p;
  int cap_read;
  uint32_t *key; /* value id + 1 (0: empty) -> val index */
  int *slot;
  uint32_t cap;
  int *comp; /* union-find parent per member */
} plan_ctx;

static void put(plan_ctx *c, const th_value *v, int val) {
  uint32_t h = (v->id * 2654435761u) & (c->cap - 1);
  while (c->key[h] && c->key[h] != v->id + 1) h = (h + 1) & (c->cap - 1);
  c->key[h] = v->id + 1;
  c->slot[h] = val;
}

/* The val index of v when a member produces it, else -1. */
static int lookup(const plan_ctx *c, const th_value *v) {
  uint32_t h = (v->id * 2654435761u) & (c->cap - 1);
  while (c->key[h]) {
    if (c->key[h] == v->id + 1) return c->slot[h];
    h = (h + 1) & (c->cap - 1);
  }
  return -1;
}

/* A val computed by a non-INVIEW member, else -1 (region input or INVIEW output: FREE). */
static int member_val(const plan_ctx *c, const th_value *v) {
  int k = lookup(c, v);
  if (k < 0) return -1;
  return c->p.mem[c->p.val[k].member].kind == TH_FZ_INVIEW ? -1 : k;
}

static int find(int *parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

static th_fz_view view_of(const th_bsym *b) {
  th_fz_view w;
  memset(&w, 0, sizeof w);
  w.op = b->sym->id;
  switch (w.op) {
    case TH_OP_prims_broadcast_in_dim:
      w.n = int_list(&b->args[1], w.a, TH_MAX_DIMS);
      w.m = int_list(&b->args[2], w.b, TH_MAX_DIMS);
      break;
    case TH_OP_prims_reshape:
    case TH_OP_prims_transpose:
    case TH_OP_prims_squeeze: w.n = int_list(&b->args[1], w.a, TH_MAX_DIMS); break;
    case TH_OP_prims_slice_prim: {
      const th_value *x = b->args[0].u.value;
      w.n = int_list(&b->args[1], w.a, TH_MAX_DIMS);
      w.m = int_list(&b->args[2], w.b, TH_MAX_DIMS);
      int k = b->nargs > 3 && b->args[3].kind != TH_ARG_NONE ? int_list(&b->args[3], w.c, TH_MAX_DIMS) : -2;
      if (k == -2)
        for (int d = 0; d < x->ndim; d++) w.c[d] = 1;
      else if (k != x->ndim)
        w.n = -1;
      break;
    }
    default: break; /* stride_order: the same elements */
  }
  return w;
}

/* The read of free value x by a member of nest `ni` at level lv (FULL: with store map smap). Returns the
 * read slot, -1 when the plan cannot hold it, -2 on allocation failure. */
static int add_read(plan_ctx *c, const th_value *x, int ni, th_fz_level lv, const int64_t *smap) {
  th_fz_read r;
  memset(&r, 0, sizeof r);
  r.v = x;
  r.nest = ni;
  r.lv = lv;
  /* the view chain, walked back to the region input */
  const th_value *root = x;
  const th_bsym *chain[TH_FZ_MAX_VIEWS];
  int nchain = 0;
  for (int k = lookup(c, root); k >= 0; k = lookup(c, root)) {
    if (nchain == TH_FZ_MAX_VIEWS) return -1;
    const th_bsym *vb = c->p.mem[c->p.val[k].member].b;
    chain[nchain++] = vb;
    root = vb->args[0].u.value;
  }
  r.root = root;
  r.nviews = nchain;
  for (int i = 0; i < nchain; i++) {
    r.views[i] = view_of(chain[nchain - 1 - i]);
    if (r.views[i].n < 0 || r.views[i].m < 0) return -1;
  }
  const th_fz_nest *N = &c->p.nest[ni];
  int64_t sizes[TH_MAX_DIMS], rmap[TH_MAX_DIMS];
  memcpy(sizes, N->D, sizeof sizes);
  if (lv == TH_FZ_ROW) { /* the row index over the row dims; reduced dims have no column */
    int r0 = N->col ? N->r : 0, r1 = N->col ? N->nd : N->nd - N->r; /* the row (kept) dims [r0, r1) */
    cstrides(N->D + r0, r1 - r0, rmap + r0);
    for (int d = 0; d < N->nd; d++)
      if (d < r0 || d >= r1) sizes[d] = 1, rmap[d] = 0;
    smap = rmap;
  }
  if (!decompose(smap, sizes, N->nd, x->shape, x->ndim, r.A)) return -1;
  for (int k = 0; k < c->p.nread; k++) {
    const th_fz_read *o = &c->p.read[k];
    if (o->root == r.root && o->v == r.v && o->nest == ni && o->lv == lv && o->nviews == r.nviews &&
        !memcmp(o->A, r.A, sizeof r.A))
      return k;
  }
  if (c->p.nread == c->cap_read) {
    int cap = c->cap_read ? 2 * c->cap_read : 8;
    th_fz_read *nr = th_realloc(c->p.read, sizeof *nr * (size_t)cap);
    if (!nr) return -2;
    c->p.read = nr;
    c->cap_read = cap;
  }
  c->p.read[c->p.nread] = r;
  return c->p.nread++;
}

static bool smap_equal(const th_fz_nest *N, const int64_t *a, const int64_t *b) {
  if (numel(N->D, N->nd) == 0) return true;
  for (int d = 0; d < N->nd; d++)
    if (N->D[d] > 1 && a[d] != b[d]) return false;
  return true;
}

/* The nest's rows: shape D[0:nd-r] (a column nest: D[r:nd]), size-1 dims aside. */
static bool row_shaped(const th_fz_nest *N, const th_value *v) {
  if (N->r == 0) return false;
  return N->col ? same_non1(v->shape, v->ndim, N->D + N->r, N->nd - N->r)
                : same_non1(v->shape, v->ndim, N->D, N->nd - N->r);
}

/* Reduced dims of a reduction over value u. A suffix (size-1 dims after them aside): *col false,
 * *first the first reduced dim. Else a prefix (every dim before the last reduced one is reduced or of
 * size 1, and some dim after it is not of size 1): *col true, *first the first kept dim (one past the
 * last reduced one). false: neither, or no dims. */
static bool reduced_dims(const th_bsym *b, const th_value *u, int *first, bool *col) {
  int64_t dims[TH_MAX_DIMS];
  int nd = int_list(&b->args[1], dims, TH_MAX_DIMS);
  if (nd <= 0) return false;
  bool red[TH_MAX_DIMS] = {false};
  int f = u->ndim, l = -1;
  for (int i = 0; i < nd; i++) {
    int64_t d = dims[i] < 0 ? dims[i] + u->ndim : dims[i];
    if (d < 0 || d >= u->ndim) return false;
    red[d] = true;
    if (d < f) f = (int)d;
    if (d > l) l = (int)d;
  }
  bool suffix = true;
  for (int d = f; d < u->ndim; d++)
    if (!red[d] && u->shape[d] != 1) suffix = false;
  if (suffix) {
    *first = f, *col = false;
    return true;
  }
  for (int d = 0; d < l; d++)
    if (!red[d] && u->shape[d] != 1) return false;
  *first = l + 1, *col = true;
  return true;
}

#define REFUSE TH_ERR_VALUE

/* Levels of member i (step 3 of the file comment). */
static th_status classify(plan_ctx *c, int i) {
  th_fz_mem *m = &c->p.mem[i];
  const th_bsym *b = m->b;
  const th_fz_nest *N = &c->p.nest[m->nest];
  th_op_id id = b->sym->id;
  th_fz_val *o = &c->p.val[m->out[0]];
  const th_value *ov = o->v;
  int64_t ident[TH_MAX_DIMS];
  cstrides(N->D, N->nd, ident);
  if (m->kind == TH_FZ_REDUCE) {
    const th_value *u = b->args[0].u.value;
    int w = member_val(c, u), f = 0;
    if (w >= 0) {
      if (c->p.val[w].lv != TH_FZ_FULL || !smap_equal(N, c->p.val[w].smap, ident)) return REFUSE;
      m->ref[0] = w;
    } else {
      if (!same_shape(u->shape, u->ndim, N->D, N->nd)) return REFUSE;
      int k = add_read(c, u, m->nest, TH_FZ_FULL, ident);
      if (k < 0) return k == -2 ? TH_ERR_NOMEM : REFUSE;
      m->ref[0] = TH_FZ_REF_READ(k);
    }
    bool col = false;
    if (!reduced_dims(b, u, &f, &col) || col != N->col) return REFUSE;
    int no = N->nd - N->r;
    int64_t rows = N->col ? numel(N->D + N->r, no) : numel(N->D, no),
            len = N->col ? numel(N->D, N->r) : numel(N->D + no, N->r);
    if (!col && (numel(u->shape, f) != rows || numel(u->shape + f, u->ndim - f) != len)) return REFUSE;
    if (col && (numel(u->shape, f) != len || numel(u->shape + f, u->ndim - f) != rows)) return REFUSE;
    if ((id == TH_OP_prims_amax || id == TH_OP_prims_amin) && len == 0 && rows > 0) return REFUSE;
    for (int k = 0; k < 2; k++)
      if (m->out[k] >= 0) c->p.val[m->out[k]].lv = TH_FZ_ROW;
    return TH_OK;
  }
  if (m->kind == TH_FZ_POINTWISE) {
    th_fz_level lv = TH_FZ_FREE;
    const int64_t *smap = NULL;
    for (int a = 0; a < b->nargs && a < 4; a++) {
      if (!tensor_arg(&b->args[a])) continue;
      const th_value *av = b->args[a].u.value;
      int w = member_val(c, av);
      bool scalar = av->ndim == 0 && ov->ndim > 0; /* a 0-d operand of a larger output */
      if (scalar && (w < 0 || c->p.val[w].lv != TH_FZ_ROW || N->col || numel(N->D, N->nd - N->r) != 1))
        return REFUSE; /* only the one-row nest's own result: the row's variable, read in every pass after */
      if (w < 0) continue;
      const th_fz_val *x = &c->p.val[w];
      if (scalar) {
        m->ref[a] = w;
        continue;
      }
      if (lv == TH_FZ_FREE) {
        lv = x->lv;
        smap = x->smap;
      } else if (lv != x->lv || (lv == TH_FZ_FULL && !smap_equal(N, smap, x->smap))) {
        return REFUSE;
      }
      m->ref[a] = w;
    }
    if (lv == TH_FZ_FREE) {
      if (same_shape(ov->shape, ov->ndim, N->D, N->nd))
        lv = TH_FZ_FULL, smap = ident;
      else if (row_shaped(N, ov))
        lv = TH_FZ_ROW, smap = ident;
      else
        return REFUSE;
    }
    o->lv = lv;
    memcpy(o->smap, smap, sizeof o->smap);
    for (int a = 0; a < b->nargs && a < 4; a++) {
      if (!tensor_arg(&b->args[a]) || m->ref[a] >= 0) continue;
      int k = add_read(c, b->args[a].u.value, m->nest, lv, o->smap);
      if (k < 0) return k == -2 ? TH_ERR_NOMEM : REFUSE;
      m->ref[a] = TH_FZ_REF_READ(k);
    }
    return TH_OK;
  }
  /* layout ops of a member (ALIAS / ROWBCAST) */
  const th_value *u = b->args[0].u.value;
  int w = member_val(c, u);
  if (w < 0) return REFUSE;
  const th_fz_val *x = &c->p.val[w];
  m->ref[0] = w;
  o->lv = x->lv;
  memcpy(o->smap, x->smap, sizeof o->smap);
  switch (id) {
    case TH_OP_prims_reshape:
    case TH_OP_prims_squeeze:
    case TH_OP_prims_stride_order: return TH_OK;
    case TH_OP_prims_transpose: {
      int64_t perm[TH_MAX_DIMS], A[TH_MAX_DIMS][TH_MAX_DIMS], cs[TH_MAX_DIMS];
      if (x->lv != TH_FZ_FULL || int_list(&b->args[1], perm, TH_MAX_DIMS) != u->ndim) return REFUSE;
      if (!decompose(x->smap, N->D, N->nd, u->shape, u->ndim, A)) return REFUSE;
      cstrides(ov->shape, ov->ndim, cs);
      for (int d = 0; d < N->nd; d++) {
        int64_t s = 0;
        for (int k = 0; k < ov->ndim; k++) {
          if (perm[k] < 0 || perm[k] >= u->ndim) return REFUSE;
          s += cs[k] * A[perm[k]][d];
        }
        o->smap[d] = N->D[d] > 1 ? s : 0;
      }
      return TH_OK;
    }
    case TH_OP_prims_broadcast_in_dim: {
      int64_t bd[TH_MAX_DIMS];
      if (int_list(&b->args[2], bd, TH_MAX_DIMS) != u->ndim) return REFUSE;
      if (unsqueeze_only(u->shape, u->ndim, ov->shape, ov->ndim, bd)) return TH_OK;
      /* a column nest has one pass: nothing may use its columns' results per element */
      if (N->col || x->lv != TH_FZ_ROW || !same_shape(ov->shape, ov->ndim, N->D, N->nd)) return REFUSE;
      /* the per-row scalar: u's non-1 dims on the row dims, in order, covering every non-1 row dim */
      int no = N->nd - N->r;
      bool covered[TH_MAX_DIMS] = {false};
      int64_t prev = -1;
      for (int k = 0; k < u->ndim; k++) {
        if (u->shape[k] == 1) continue;
        if (bd[k] <= prev || bd[k] >= no || N->D[bd[k]] != u->shape[k]) return REFUSE;
        covered[bd[k]] = true;
        prev = bd[k];
      }
      for (int d = 0; d < no; d++)
        if (N->D[d] != 1 && !covered[d]) return REFUSE;
      m->kind = TH_FZ_ROWBCAST;
      o->lv = TH_FZ_FULL;
      memcpy(o->smap, ident, sizeof o->smap);
      return TH_OK;
    }
    default: return REFUSE; /* slice_prim of a member */
  }
}

void th_fz_plan_free(th_fz_plan *p) {
  if (!p) return;
  th_free(p->mem);
  th_free(p->val);
  th_free(p->read);
  th_free(p->nest);
  memset(p, 0, sizeof *p);
}

th_status th_fz_plan_build(const th_bsym *const *ms, int n, th_fz_plan *out) {
  plan_ctx c;
  memset(&c, 0, sizeof c);
  c.ms = ms;
  c.n = n;
  c.cap = 16;
  while (c.cap < 4u * (uint32_t)n + 8) c.cap *= 2;
  c.p.mem = th_calloc((size_t)(n ? n : 1), sizeof *c.p.mem);
  c.p.val = th_calloc((size_t)(2 * n + 1), sizeof *c.p.val);
  c.p.nest = th_calloc((size_t)(n ? n : 1), sizeof *c.p.nest);
  c.key = th_calloc(c.cap, sizeof *c.key);
  c.slot = th_calloc(c.cap, sizeof *c.slot);
  c.comp = th_calloc((size_t)(n ? n : 1), sizeof *c.comp);
  int *comp_nest = th_calloc((size_t)(n ? n : 1), sizeof *comp_nest);
  th_status st = TH_OK;
  if (!c.p.mem || !c.p.val || !c.p.nest || !c.key || !c.slot || !c.comp || !comp_nest) {
    st = TH_ERR_NOMEM;
    goto done;
  }
  /* step 1: members, their outputs, INVIEW */
  c.p.nmem = n;
  for (int i = 0; i < n && st == TH_OK; i++) {
    const th_bsym *b = ms[i];
    th_fz_mem *m = &c.p.mem[i];
    m->b = b;
    m->out[0] = m->out[1] = -1;
    for (int a = 0; a < 4; a++) m->ref[a] = TH_FZ_REF_NONE;
    if (!th_fuser_is_fusible_member(b)) {
      st = REFUSE;
      break;
    }
    th_op_id id = b->sym->id;
    int nouts = id == TH_OP_prims_var_mean ? 2 : 1;
    for (int k = 0; k < nouts; k++) {
      th_fz_val *v = &c.p.val[c.p.nval];
      v->v = nouts == 2 ? b->out.u.seq.items[k].u.value : b->out.u.value;
      v->member = i;
      m->out[k] = c.p.nval;
      put(&c, v->v, c.p.nval++);
    }
    if (is_reduction(id))
      m->kind = TH_FZ_REDUCE;
    else if (is_layout(id) && member_val(&c, b->args[0].u.value) < 0)
      m->kind = TH_FZ_INVIEW;
    else if (is_layout(id))
      m->kind = TH_FZ_ALIAS;
    else
      m->kind = TH_FZ_POINTWISE;
  }
  if (st != TH_OK) goto done;
  /* step 2: components and their nests */
  for (int i = 0; i < n; i++) c.comp[i] = i;
  for (int i = 0; i < n; i++) {
    const th_bsym *b = ms[i];
    if (c.p.mem[i].kind == TH_FZ_INVIEW) continue;
    for (int a = 0; a < b->nargs; a++) {
      if (!tensor_arg(&b->args[a])) continue;
      int w = member_val(&c, b->args[a].u.value);
      if (w >= 0) c.comp[find(c.comp, i)] = find(c.comp, c.p.val[w].member);
    }
  }
  for (int i = 0; i < n; i++) comp_nest[i] = -1;
  for (int i = 0; i < n && st == TH_OK; i++) {
    if (c.p.mem[i].kind == TH_FZ_INVIEW) continue;
    int root = find(c.comp, i);
    if (comp_nest[root] >= 0) {
      c.p.mem[i].nest = comp_nest[root];
      continue;
    }
    /* the component's domain: its first reduction's input, else its largest output */
    th_fz_nest nn;
    memset(&nn, 0, sizeof nn);
    int red = -1, big = -1;
    for (int j = i; j < n; j++) {
      if (c.p.mem[j].kind == TH_FZ_INVIEW || find(c.comp, j) != root) continue;
      if (c.p.mem[j].kind == TH_FZ_REDUCE) {
        red = j;
        break;
      }
      const th_value *v = c.p.val[c.p.mem[j].out[0]].v;
      if (big < 0 ||
          numel(v->shape, v->ndim) > numel(c.p.val[c.p.mem[big].out[0]].v->shape, c.p.val[c.p.mem[big].out[0]].v->ndim))
        big = j;
    }
    if (red >= 0) {
      const th_value *u = ms[red]->args[0].u.value;
      int f = 0;
      bool col = false;
      if (!reduced_dims(ms[red], u, &f, &col)) {
        st = REFUSE;
        break;
      }
      nn.nd = u->ndim;
      memcpy(nn.D, u->shape, sizeof(int64_t) * (size_t)u->ndim);
      nn.r = col ? f : u->ndim - f;
      nn.col = col;
    } else {
      const th_value *v = c.p.val[c.p.mem[big].out[0]].v;
      nn.nd = v->ndim;
      memcpy(nn.D, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    }
    int k = 0;
    while (k < c.p.nnest && !(c.p.nest[k].nd == nn.nd && c.p.nest[k].r == nn.r && c.p.nest[k].col == nn.col &&
                              same_shape(c.p.nest[k].D, c.p.nest[k].nd, nn.D, nn.nd)))
      k++;
    if (k == c.p.nnest) c.p.nest[c.p.nnest++] = nn;
    comp_nest[root] = k;
    c.p.mem[i].nest = k;
  }
  /* steps 3 and 4: levels and reads, in program order */
  for (int i = 0; i < n && st == TH_OK; i++) {
    if (c.p.mem[i].kind == TH_FZ_INVIEW) {
      c.p.mem[i].nest = -1;
      continue;
    }
    st = classify(&c, i);
  }
done:
  th_free(c.key);
  th_free(c.slot);
  th_free(c.comp);
  th_free(comp_nest);
  if (st != TH_OK || !out) {
    th_fz_plan_free(&c.p);
    return st;
  }
  *out = c.p;
  return TH_OK;
}
