/* codegen.c — lowering a fusion region's nests (nest.c) to the loop IR (loopir.c): one C function per
 * region, `void fusionN(char *const *P, const int64_t *S, const int64_t *T)`, all of one program's
 * regions in one translation unit after <tgmath.h> and the embedded prelude (kernel_prelude.h).
 *
 * Slots: each nest's input reads, then its outputs, nest after nest. P[k] is slot k's element [0, ...];
 * T[8k + d] its element stride along domain dim d (outputs: the store map; the launcher computes the
 * inputs' from their views); S holds the nests' domains one after the other. The source depends on the
 * region's structure only (sizes and strides arrive at run time; the one size it looks at is whether a
 * row nest has a single row), so programs that differ in shapes share their compiled kernels.
 *
 * Values live in the compute class of their dtype, as in the eager kernels: float (f16/bf16/f32/fp8),
 * double (f64), int64 (bool and integers); loads decode f16/bf16/fp8 in registers, and every value is
 * rounded to its dtype right after its op (th_fz_<class>_<dtype> of the prelude: the eager executor's
 * casts), so exact ops match eager bit for bit. An op is its ops.def cexpr with %0 %1 %2 replaced by the
 * operands (cast to the op's compute type; constants cast to the op's dtype first, as eager casts wrapped
 * scalars). The codegen knows no op by name except the structural ones: the CONVERT tag, the layout ops
 * and clone (nest.c resolves them to reads, aliases and row scalars) and the reduction prims.
 *
 * Pointwise nest (r = 0): the domain's outer dims collapse into one index and the last dim is cut into
 * chunks of 4096; `omp parallel for` over (outer, chunk) from 32768 elements; the inner loop has an
 * `omp simd` variant when every slot's last stride is 1 and a strided one.
 *
 * Row nest (r > 0): `omp parallel for` over the rows (one row per iteration, from 32768 elements in
 * all); each row first loads its ROW inputs, then runs one pass over the row per reduction level (the
 * reductions whose inputs need no result of another pass share one; var/var_mean take two: the mean,
 * then the squared deviations), recomputing the FULL values a pass needs from loads (the row stays in
 * cache) except the expensive ones (plan_row_buffers: a division or a call, e.g. softmax's exp) a later
 * pass needs too: when every FULL slot is row-major in the inner dims and the row is short enough for
 * 32 KiB of buffers per thread (uc; 8192 floats for one buffer), the first pass computing one stores it into a
 * stack buffer rb<v> of the row body and later passes load it (softmax: one exp per element, not two),
 * computing each level's ROW values after its pass, then a final pass computing and storing the
 * FULL outputs, and stores its ROW outputs once; one pass walks a contiguous row in chunks that first
 * prefetch the next row's inputs and outputs (row_loop). Inner loops: `omp simd` with reduction clauses when
 * every FULL slot is row-major in the inner dims, else a strided walk. A nest of one row (a full
 * reduction, r = nd, or rows of size-1 dims only) runs each pass as `omp parallel for [simd]
 * reduction(...)` instead.
 *
 * Column nest (col: the first r dims reduced, x.sum(0)): each thread takes a contiguous range of the
 * reduced index and walks it row by row along the kept dims (`omp simd` over the last one when every
 * walked slot is contiguous there), folding each element into its own row of accumulators (one array
 * per accumulator, ncols long, in the launcher's scratch) and storing the FULL outputs; then a loop
 * over the columns merges the threads' rows in thread order, computes the ROW values and stores the
 * ROW outputs (codegen_columns.c). A bf16 column sum thus reads its input once and widens it in
 * registers, with no float32 copy in memory (bench/README.md, bench_reduce.py).
 *
 * Accumulation (document of record for tolerances): sum/prod and var's moments of floating inputs in
 * double (so f32 sums are at least as accurate as eager's float64 lanes, in a different order: results
 * agree to a tolerance, not bit for bit; float32 lanes would save a few of a softmax kernel's
 * instructions and make long rows' error grow with their length), integer ones in int64 with
 * wrap-around; amax/amin exactly, a NaN anywhere gives NaN (as eager; the NaN's payload is not kept);
 * var divides by max(0, N - correction), N = 0 gives NaN. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/scalar.h"
#include "executors/fuser/codegen.h"

/* ---- dtypes -------------------------------------------------------------------------------------------- */
static char cls_letter(th_dtype d) { return "fdi"[dclass(d)]; }

static const char *dt_suffix(th_dtype d) {
  switch (d) {
    case TH_BOOL: return "b8";
    case TH_U8: return "u8";
    case TH_I8: return "i8";
    case TH_I16: return "i16";
    case TH_I32: return "i32";
    case TH_I64: return "i64";
    case TH_F16: return "f16";
    case TH_BF16: return "bf16";
    case TH_F32: return "f32";
    case TH_F64: return "f64";
    case TH_F8E4M3FN: return "f8e4m3fn";
    default: return "f8e5m2";
  }
}

static const char *elem_type(th_dtype d) {
  switch (d) {
    case TH_F32: return "float";
    case TH_F64: return "double";
    case TH_F16:
    case TH_BF16: return "uint16_t";
    case TH_I64: return "int64_t";
    case TH_I32: return "int32_t";
    case TH_I16: return "int16_t";
    case TH_I8: return "int8_t";
    default: return "uint8_t"; /* u8, bool, fp8 */
  }
}

/* Value x of compute class `from` as dtype `to`'s compute-class value (identity casts elided). */
static void put_cast(th_strbuf *sb, char from, th_dtype to, const char *x) {
  bool same = (from == 'f' && to == TH_F32) || (from == 'd' && to == TH_F64) || (from == 'i' && to == TH_I64);
  if (same)
    th_sb_puts(sb, x);
  else
    th_sb_printf(sb, "th_fz_%c_%s(%s)", from, dt_suffix(to), x);
}

void th_cg_put_load(th_strbuf *sb, th_dtype d, int k, const char *idx) {
  switch (d) {
    case TH_F16: th_sb_printf(sb, "th_fz_ld_f16(p%d[%s])", k, idx); break;
    case TH_BF16: th_sb_printf(sb, "th_sc_bf16_to_f32(p%d[%s])", k, idx); break;
    case TH_F8E4M3FN: th_sb_printf(sb, "th_sc_e4m3fn_to_f32(p%d[%s])", k, idx); break;
    case TH_F8E5M2: th_sb_printf(sb, "th_sc_e5m2_to_f32(p%d[%s])", k, idx); break;
    case TH_BOOL: th_sb_printf(sb, "(int64_t)(p%d[%s] != 0)", k, idx); break;
    case TH_F32:
    case TH_F64: th_sb_printf(sb, "p%d[%s]", k, idx); break;
    default: th_sb_printf(sb, "(int64_t)p%d[%s]", k, idx); break;
  }
}

static void put_store(th_strbuf *sb, th_dtype d, int k, const char *idx, const char *v) {
  switch (d) {
    case TH_F16: th_sb_printf(sb, "p%d[%s] = th_fz_cv_f16(%s)", k, idx, v); break;
    case TH_BF16: th_sb_printf(sb, "p%d[%s] = th_fz_st_bf16(%s)", k, idx, v); break; /* v is bf16-exact */
    case TH_F8E4M3FN: th_sb_printf(sb, "p%d[%s] = th_sc_f32_to_e4m3fn(%s, false)", k, idx, v); break;
    case TH_F8E5M2: th_sb_printf(sb, "p%d[%s] = th_sc_f32_to_e5m2(%s, false)", k, idx, v); break;
    case TH_BOOL: th_sb_printf(sb, "p%d[%s] = (uint8_t)(%s != 0)", k, idx, v); break;
    default: th_sb_printf(sb, "p%d[%s] = (%s)%s", k, idx, elem_type(d), v); break;
  }
}

/* A constant cast to dtype d (eager's wrapped-scalar cast), as a literal of d's compute type. */
static void put_const(th_strbuf *sb, const th_arg *a, th_dtype d) {
  unsigned char buf[16] = {0};
  if (a->kind == TH_ARG_FLOAT)
    th_store_f64(buf, d, a->u.f);
  else
    th_store_i64(buf, d, a->kind == TH_ARG_BOOL ? (int64_t)a->u.b : a->u.i);
  int c = dclass(d);
  if (c == 2) {
    th_sb_printf(sb, "((int64_t)0x%llxULL)", (unsigned long long)th_load_i64(buf, d));
    return;
  }
  double x = c == 0 ? (double)th_load_f32(buf, d) : th_load_f64(buf, d);
  const char *t = ctype(d);
  if (isnan(x))
    th_sb_printf(sb, "((%s)NAN)", t);
  else if (isinf(x))
    th_sb_printf(sb, "(%s(%s)INFINITY)", x < 0 ? "-" : "", t);
  else
    th_sb_printf(sb, "((%s)%a)", t, x);
}

/* An integer constant of a member as a kernel argument, S[nt_at + 1 + k]: the region's k-th constant
 * (equal values share one). Integer constants are often sizes a trace baked in (an index normalized by
 * `+ T`), so with them out of the source one kernel serves every value. */
static void put_kconst(lower *L, th_strbuf *sb, const th_arg *a, th_dtype d) {
  unsigned char buf[16] = {0};
  th_store_i64(buf, d, a->u.i);
  int64_t v = th_load_i64(buf, d);
  th_fuser_region *r = L->region;
  int k = 0;
  while (k < r->nconst && r->kconst[k] != v) k++;
  if (k == r->nconst) {
    int64_t *q = th_realloc(r->kconst, sizeof(int64_t) * (size_t)(k + 1));
    if (!q) {
      L->st = TH_ERR_NOMEM;
      th_sb_puts(sb, "0");
      return;
    }
    r->kconst = q;
    r->kconst[r->nconst++] = v;
  }
  th_sb_printf(sb, "((int64_t)S[%d])", L->nt_at + 1 + k);
}

/* ---- the lowering context (codegen.h) ------------------------------------------------------------------ */
/* elements per prefetching chunk of a row loop: each chunk ends with its omp simd reductions' epilogue
 * (some 56 instructions in softmax's exp pass), so shorter chunks spend more instructions on it and
 * longer ones re-form the burst of prefetches the chunks spread out; 256 is the fastest of 128, 256 and
 * 512 for softmax (bench/README.md, "Notes behind the code") */
#define TH_FZ_PF_CHUNK 256

/* "D[a] * D[a+1] * ... * D[b-1]" ("1" when empty). */
const char *th_cg_dims_product(lower *L, int a, int b) {
  th_strbuf sb;
  th_sb_init(&sb);
  for (int d = a; d < b; d++) th_sb_printf(&sb, "%sD[%d]", d > a ? " * " : "", d);
  if (a >= b) th_sb_puts(&sb, "1");
  return take(L, &sb);
}

/* Slot s's offset for the index vars <var>a .. <var>b-1: "o0 * T[k] + ..." ("0" when empty). */
const char *th_cg_offset_expr(lower *L, int slot, const char *var, int a, int b) {
  th_strbuf sb;
  th_sb_init(&sb);
  for (int d = a; d < b; d++) th_sb_printf(&sb, "%s%s%d * T[%d]", d > a ? " + " : "", var, d, slot * TH_MAX_DIMS + d);
  if (a >= b) th_sb_puts(&sb, "0");
  return take(L, &sb);
}

/* The C operand for argument a of member m. */
const char *th_cg_operand(lower *L, const th_fz_mem *m, int a) {
  int r = m->ref[a];
  if (r >= 0) return L->vname[r];
  return S(L, "a%d", L->read_slot[-2 - r]);
}

/* ---- algebraic rewrites ------------------------------------------------------------------------------
 * One product of prims is emitted as a single mathlib function instead of its members' templates:
 *   x * 0.5 * (1 + tanh(z))  ->  th_m_x_sigmoid2f(x, z) = x / (1 + e^(-2z))   (float32 compute)
 * the tail of the tanh GELU (ltorch.gelu's decomposition; any operand order of the commutative mul and
 * add). It is the same function (x sigmoid(2z)), one exp and one division instead of a tanh, a
 * multiply and an add: fewer instructions per element, and without the cancellation of 1 + tanh(z)
 * near tanh(z) = -1, where the product form loses every digit. Where float32 tanh(z) rounds to -1 or
 * +1 it returns the product form's exact x * 0 or x. The intermediate values are still computed where
 * anything else in the region uses them (th_cg_mark() follows the operands of the rewritten form). */

/* A second rewrite: prims.pow(x, n) of a float32 or float64 x and a constant exponent that is an integer
 * of at most 15 in magnitude (after the cast to x's dtype) is th_m_pownf / th_m_pownd(x, n), mathlib's
 * inlined powers: PyTorch's own float forms for 2, 3, -1 and -2 (x * x, x * x * x, 1 / x, 1 / (x * x),
 * the same bits as torch.pow), repeated squaring in double for the others (float32). Every other pow
 * goes through mathlib's routed pow (th_m_powf for float32), which vectorizes too. */
static bool match_pown(const th_fz_mem *m, int *n) {
  const th_bsym *b = m->b;
  if (m->kind != TH_FZ_POINTWISE || b->sym->id != TH_OP_prims_pow || b->nargs != 2) return false;
  th_dtype d = b->out.u.value->dtype;
  if ((d != TH_F32 && d != TH_F64) || b->args[0].kind != TH_ARG_VALUE || b->args[1].kind == TH_ARG_VALUE) return false;
  const th_arg *e = &b->args[1];
  double c = e->kind == TH_ARG_FLOAT  ? e->u.f
             : e->kind == TH_ARG_INT  ? (double)e->u.i
             : e->kind == TH_ARG_BOOL ? e->u.b
                                      : NAN;
  if (d == TH_F32) c = (double)(float)c; /* the constant as eager casts it */
  if (!(fabs(c) <= 15) || c != floor(c)) return false;
  *n = (int)c;
  return true;
}

/* A use of operand a of member m (what th_cg_operand() and m->ref name). */
typedef struct {
  const th_fz_mem *m;
  int a;
} use;

static bool const_eq(const th_arg *a, double c) {
  return (a->kind == TH_ARG_FLOAT && a->u.f == c) || (a->kind == TH_ARG_INT && (double)a->u.i == c);
}

/* The f32 POINTWISE member of this nest producing operand a of m, if it is prims.<id>. */
static const th_fz_mem *producer(const lower *L, const th_fz_mem *m, int a, th_op_id id) {
  int r = m->ref[a];
  if (r < 0 || val(L, r)->lv != TH_FZ_FULL) return NULL;
  const th_fz_mem *p = mem_of(L, r);
  if (p->kind != TH_FZ_POINTWISE || p->nest != m->nest || p->b->sym->id != id || p->b->out.u.value->dtype != TH_F32)
    return NULL;
  return p;
}

/* m is a binary member with one constant argument equal to c: the index of the other one, else -1. */
static int other_than_const(const th_fz_mem *m, double c) {
  if (m->b->nargs != 2) return -1;
  for (int k = 0; k < 2; k++)
    if (const_eq(&m->b->args[k], c) && m->ref[1 - k] != TH_FZ_REF_NONE) return 1 - k;
  return -1;
}

/* m = (x * 0.5) * (1 + tanh(z)) in float32: *x, *z the uses of x and z. */
static bool match_x_sigmoid2(const lower *L, const th_fz_mem *m, use *x, use *z) {
  const th_bsym *b = m->b;
  if (m->kind != TH_FZ_POINTWISE || b->sym->id != TH_OP_prims_mul || b->nargs != 2 || b->out.u.value->dtype != TH_F32)
    return false;
  for (int k = 0; k < 2; k++) {
    const th_fz_mem *half = producer(L, m, k, TH_OP_prims_mul), *one = producer(L, m, 1 - k, TH_OP_prims_add);
    if (!half || !one) continue;
    int xa = other_than_const(half, 0.5), ta = other_than_const(one, 1.0);
    if (xa < 0 || ta < 0) continue;
    const th_fz_mem *t = producer(L, one, ta, TH_OP_prims_tanh);
    if (!t || t->ref[0] == TH_FZ_REF_NONE) continue;
    *x = (use){half, xa};
    *z = (use){t, 0};
    return true;
  }
  return false;
}

/* `const T vK = expr;` for a POINTWISE member (its out val K). */
static void emit_pointwise(lower *L, th_ir *blk, const th_fz_mem *m) {
  const th_bsym *b = m->b;
  const th_value *o = b->out.u.value;
  th_strbuf sb;
  th_sb_init(&sb);
  use x, z;
  if (match_x_sigmoid2(L, m, &x, &z)) {
    th_ir_let(L->ir, blk, ctype(o->dtype), L->vname[m->out[0]],
              S(L, "th_m_x_sigmoid2f(%s, %s)", th_cg_operand(L, x.m, x.a), th_cg_operand(L, z.m, z.a)));
    return;
  }
  int n;
  if (match_pown(m, &n)) {
    bool f32 = o->dtype == TH_F32;
    th_ir_let(L->ir, blk, ctype(o->dtype), L->vname[m->out[0]],
              S(L, "th_m_pown%c((%s)%s, %d)", f32 ? 'f' : 'd', f32 ? "float" : "double", th_cg_operand(L, m, 0), n));
    return;
  }
  if (b->sym->tags & TH_TAG_CONVERT) {
    put_cast(&sb, cls_letter(b->args[0].u.value->dtype), o->dtype, th_cg_operand(L, m, 0));
  } else if (b->sym->id == TH_OP_prims_clone) {
    th_sb_puts(&sb, th_cg_operand(L, m, 0));
  } else {
    th_dtype d = o->dtype; /* the compute dtype: comparisons compute in their operands' */
    if (o->dtype == TH_BOOL)
      for (int i = 0; i < b->nargs; i++)
        if (b->args[i].kind == TH_ARG_VALUE) d = b->args[i].u.value->dtype;
    th_strbuf ex;
    th_sb_init(&ex);
    for (const char *q = b->sym->cexpr; *q; q++) {
      if (*q == '%' && q[1] >= '0' && q[1] <= '9') {
        int i = *++q - '0';
        if (i >= b->nargs) continue;
        if (b->args[i].kind == TH_ARG_VALUE && b->args[i].u.value->dtype == TH_BOOL && d != TH_BOOL)
          th_sb_printf(&ex, "(%s)", th_cg_operand(L, m, i)); /* a predicate (where's): its int64_t 0 or 1 */
        else if (b->args[i].kind == TH_ARG_VALUE)
          th_sb_printf(&ex, "((%s)%s)", ctype(d), th_cg_operand(L, m, i));
        else if (b->args[i].kind == TH_ARG_INT && dclass(d) == 2)
          put_kconst(L, &ex, &b->args[i], d);
        else
          put_const(&ex, &b->args[i], d);
      } else {
        th_sb_putc(&ex, *q);
      }
    }
    char *e = th_sb_take(&ex);
    if (!e) L->st = TH_ERR_NOMEM;
    if (o->dtype == TH_BOOL) {
      th_sb_printf(&sb, "(int64_t)((%s) != 0)", e ? e : "0");
    } else if (b->sym->tags & TH_TAG_SELECT) {
      /* already a value of its dtype: no rounding (a NaN keeps its payload, as eager's copy does) */
      th_sb_printf(&sb, "(%s)(%s)", ctype(o->dtype), e ? e : "0");
    } else {
      th_strbuf c2;
      th_sb_init(&c2);
      th_sb_printf(&c2, "(%s)(%s)", ctype(o->dtype), e ? e : "0");
      char *cs = th_sb_take(&c2);
      if (!cs) L->st = TH_ERR_NOMEM;
      put_cast(&sb, cls_letter(o->dtype), o->dtype, cs ? cs : "0");
      th_free(cs);
    }
    th_free(e);
  }
  th_ir_let(L->ir, blk, ctype(o->dtype), L->vname[m->out[0]], take(L, &sb));
}

/* ---- FULL scopes: one element of the domain ---------------------------------------------------------- */
static void mark_ref(lower *L, int r) {
  if (r >= 0)
    th_cg_mark(L, r);
  else if (r <= -2)
    L->need_r[-2 - r] = true;
}

void th_cg_mark(lower *L, int v) {
  if (L->need_v[v] || val(L, v)->lv != TH_FZ_FULL) return;
  L->need_v[v] = true;
  if (L->cmode && L->cache_pass[v] >= 0 && L->cache_pass[v] < L->cur_pass) return; /* loaded from rb<v> */
  const th_fz_mem *m = mem_of(L, v);
  if (m->kind == TH_FZ_ROWBCAST) return; /* the row's variable */
  use u[2];
  if (match_x_sigmoid2(L, m, &u[0], &u[1])) { /* computed from x and z alone */
    for (int k = 0; k < 2; k++) mark_ref(L, u[k].m->ref[u[k].a]);
    return;
  }
  for (int a = 0; a < 4; a++) mark_ref(L, m->ref[a]);
}

static void clear_marks(lower *L) {
  memset(L->need_v, 0, sizeof(bool) * (size_t)(L->p->nval ? L->p->nval : 1));
  memset(L->need_r, 0, sizeof(bool) * (size_t)(L->p->nread ? L->p->nread : 1));
}

static const char *idx(lower *L, const index_mode *im, int slot) {
  if (im->contig) return S(L, "%s%d + %s", im->base, slot, im->var);
  return S(L, "%s%d + %s * T[%d]", im->base, slot, im->var, slot * TH_MAX_DIMS + im->last);
}

/* Loads of the marked FULL reads and lets of the marked FULL values, in program order. In the row-buffer
 * variant (cmode) a cached value is loaded from its buffer after the pass that computes it, and stored
 * into it by that pass. */
void th_cg_emit_full_values(lower *L, th_ir *blk, const index_mode *im) {
  for (int k = 0; k < L->p->nread; k++) {
    if (!L->need_r[k] || L->p->read[k].lv != TH_FZ_FULL || L->inv_read[k]) continue;
    int s = L->read_slot[k];
    th_strbuf sb;
    th_sb_init(&sb);
    th_cg_put_load(&sb, L->p->read[k].v->dtype, s, idx(L, im, s));
    th_ir_let(L->ir, blk, ctype(L->p->read[k].v->dtype), S(L, "a%d", s), take(L, &sb));
  }
  for (int i = 0; i < L->p->nmem; i++) {
    const th_fz_mem *m = &L->p->mem[i];
    if (m->nest != L->nest || m->kind != TH_FZ_POINTWISE || !L->need_v[m->out[0]]) continue;
    int v = m->out[0], cp = L->cmode ? L->cache_pass[v] : -1;
    if (cp >= 0 && cp < L->cur_pass) {
      th_ir_let(L->ir, blk, ctype(val(L, v)->v->dtype), L->vname[v], S(L, "rb%d[%s]", v, im->var));
      continue;
    }
    emit_pointwise(L, blk, m);
    if (cp == L->cur_pass) th_ir_set(L->ir, blk, S(L, "rb%d[%s]", v, im->var), "=", L->vname[v]);
  }
}

/* Stores of the nest's FULL outputs. */
void th_cg_emit_full_stores(lower *L, th_ir *blk, const index_mode *im) {
  for (int v = 0; v < L->p->nval; v++) {
    int s = L->val_slot[v];
    if (s < 0 || val(L, v)->lv != TH_FZ_FULL || mem_of(L, v)->nest != L->nest) continue;
    th_strbuf sb;
    th_sb_init(&sb);
    put_store(&sb, val(L, v)->v->dtype, s, idx(L, im, s), L->vname[v]);
    th_ir_stmt(L->ir, blk, take(L, &sb));
  }
}

/* ---- reductions ----------------------------------------------------------------------------------------- */
/* The accumulators of reduction member i in pass `second` (var's squared deviations) or its first. */
int th_cg_accs(lower *L, int i, bool second, acc_decl *out) {
  const th_bsym *b = L->p->mem[i].b;
  th_dtype dt = b->args[0].u.value->dtype;
  bool fl = dclass(dt) != 2;
  switch (b->sym->id) {
    case TH_OP_prims_sum:
      out[0] = (acc_decl){fl ? "double" : "int64_t", S(L, "s%d", i), "0", S(L, "reduction(+:s%d)", i)};
      return 1;
    case TH_OP_prims_prod:
      out[0] = (acc_decl){fl ? "double" : "int64_t", S(L, "s%d", i), "1", S(L, "reduction(*:s%d)", i)};
      return 1;
    case TH_OP_prims_amax:
    case TH_OP_prims_amin: {
      bool mx = b->sym->id == TH_OP_prims_amax;
      const char *init = fl ? (mx ? "-INFINITY" : "INFINITY") : (mx ? "INT64_MIN" : "INT64_MAX");
      out[0] = (acc_decl){ctype(dt), S(L, "m%d", i), init, S(L, "reduction(%s:m%d)", mx ? "max" : "min", i)};
      if (!fl) return 1;
      out[1] = (acc_decl){"int", S(L, "n%d", i), "0", S(L, "reduction(|:n%d)", i)};
      return 2;
    }
    default: /* var, var_mean */
      if (!second)
        out[0] = (acc_decl){"double", S(L, "s%d", i), "0", S(L, "reduction(+:s%d)", i)};
      else
        out[0] = (acc_decl){"double", S(L, "q%d", i), "0", S(L, "reduction(+:q%d)", i)};
      return 1;
  }
}

static void emit_update(lower *L, th_ir *blk, int i, bool second) {
  const th_fz_mem *m = &L->p->mem[i];
  const th_bsym *b = m->b;
  const char *x = th_cg_operand(L, m, 0);
  bool fl = dclass(b->args[0].u.value->dtype) != 2;
  switch (b->sym->id) {
    case TH_OP_prims_sum: th_ir_set(L->ir, blk, S(L, "s%d", i), "+=", fl ? S(L, "(double)%s", x) : x); break;
    case TH_OP_prims_prod: th_ir_set(L->ir, blk, S(L, "s%d", i), "*=", fl ? S(L, "(double)%s", x) : x); break;
    case TH_OP_prims_amax:
    case TH_OP_prims_amin: {
      const char *cmp = b->sym->id == TH_OP_prims_amax ? ">" : "<";
      th_ir_set(L->ir, blk, S(L, "m%d", i), "=", S(L, "%s %s m%d ? %s : m%d", x, cmp, i, x, i));
      if (fl) th_ir_set(L->ir, blk, S(L, "n%d", i), "|=", S(L, "%s != %s", x, x));
      break;
    }
    default:
      if (!second)
        th_ir_set(L->ir, blk, S(L, "s%d", i), "+=", S(L, "(double)%s", x));
      else
        th_ir_set(L->ir, blk, S(L, "q%d", i), "+=", S(L, "((double)%s - u%d) * ((double)%s - u%d)", x, i, x, i));
      break;
  }
}

/* After reduction i's last pass: its output values (ROW lets). n: the row length expression. */
void th_cg_emit_finish(lower *L, th_ir *blk, int i, const char *n) {
  const th_fz_mem *m = &L->p->mem[i];
  const th_bsym *b = m->b;
  th_dtype dt = b->args[0].u.value->dtype;
  bool fl = dclass(dt) != 2;
  th_strbuf sb;
  th_sb_init(&sb);
  const th_value *o0 = val(L, m->out[0])->v;
  switch (b->sym->id) {
    case TH_OP_prims_sum:
    case TH_OP_prims_prod: put_cast(&sb, fl ? 'd' : 'i', o0->dtype, S(L, "s%d", i)); break;
    case TH_OP_prims_amax:
    case TH_OP_prims_amin:
      put_cast(&sb, cls_letter(dt), o0->dtype, fl ? S(L, "(n%d ? (%s)NAN : m%d)", i, ctype(dt), i) : S(L, "m%d", i));
      break;
    default: {
      double corr = b->args[2].kind == TH_ARG_FLOAT ? b->args[2].u.f
                    : b->args[2].kind == TH_ARG_INT ? (double)b->args[2].u.i
                                                    : 0;
      th_ir_let(L->ir, blk, "double", S(L, "dof%d", i), S(L, "(double)(%s) - %a", n, corr));
      put_cast(&sb, 'd', o0->dtype, S(L, "(%s) == 0 ? (double)NAN : q%d / (dof%d > 0 ? dof%d : 0.0)", n, i, i, i));
      if (m->out[1] >= 0) {
        th_strbuf s2;
        th_sb_init(&s2);
        put_cast(&s2, 'd', val(L, m->out[1])->v->dtype, S(L, "(%s) == 0 ? (double)NAN : u%d", n, i));
        th_ir_let(L->ir, blk, ctype(val(L, m->out[1])->v->dtype), L->vname[m->out[1]], take(L, &s2));
      }
      break;
    }
  }
  th_ir_let(L->ir, blk, ctype(o0->dtype), L->vname[m->out[0]], take(L, &sb));
}

/* The ROW values of level `level` (program order): lets of ROW pointwise members. */
void th_cg_emit_row_values(lower *L, th_ir *blk, int level) {
  for (int i = 0; i < L->p->nmem; i++) {
    const th_fz_mem *m = &L->p->mem[i];
    if (m->nest != L->nest || m->kind != TH_FZ_POINTWISE || val(L, m->out[0])->lv != TH_FZ_ROW) continue;
    if (L->lvl[m->out[0]] == level) emit_pointwise(L, blk, m);
  }
}

/* ---- nests ----------------------------------------------------------------------------------------------- */
/* The row-major multi-index of flat index `flat` over domain dims [lo, hi): `<prefix>d` for each d (the
 * outermost takes what is left, so it needs no modulo). */
void th_cg_emit_unflatten(lower *L, th_ir *blk, const char *flat, const char *prefix, int lo, int hi) {
  bool many = hi - lo > 1;
  if (many) th_ir_var(L->ir, blk, "int64_t", "rem", flat);
  for (int d = hi - 1; d >= lo; d--) {
    th_ir_let(L->ir, blk, "int64_t", S(L, "%s%d", prefix, d), d > lo ? S(L, "rem %% D[%d]", d) : (many ? "rem" : flat));
    if (d > lo) th_ir_set(L->ir, blk, "rem", "/=", S(L, "D[%d]", d));
  }
}

/* Stores of the nest's ROW outputs at the flat row index `row`. */
void th_cg_emit_row_stores(lower *L, th_ir *blk) {
  for (int v = 0; v < L->p->nval; v++) {
    int s = L->val_slot[v];
    if (s < 0 || val(L, v)->lv != TH_FZ_ROW || mem_of(L, v)->nest != L->nest) continue;
    th_strbuf sb;
    th_sb_init(&sb);
    put_store(&sb, val(L, v)->v->dtype, s, "row", L->vname[v]);
    th_ir_stmt(L->ir, blk, take(L, &sb));
  }
}

static void declare_slots(lower *L, th_ir *blk, int first, int nslots, const th_fuser_slot *slots) {
  for (int s = first; s < first + nslots; s++) {
    th_dtype d = slots[s].v->dtype;
    if (!slots[s].is_out) /* a read (views keep the dtype) */
      th_ir_let(L->ir, blk, S(L, "%s *restrict", elem_type(d)), S(L, "p%d", s),
                S(L, "(const %s *)P[%d]", elem_type(d), s));
    else
      th_ir_var(L->ir, blk, S(L, "%s *restrict", elem_type(d)), S(L, "p%d", s), S(L, "(%s *)P[%d]", elem_type(d), s));
  }
}

/* Read r is invariant over the domain dims [d0, nd): through its view chain (broadcast_in_dim,
 * transpose, and reshapes that only insert or remove size-1 dims; anything else: not known) those dims
 * reach only dims of stride 0 (made by a broadcast, or size-1 dims it expanded), so its element is the
 * same for every index of them: a per-row value broadcast along the row, such as a saved mean in a
 * layer norm's backward or the row index of sdpa's causal mask (`iota` broadcast twice). It is loaded
 * once outside the inner loop, and it does not make the nest's inner loops strided: its stride there is
 * 0, not 1, and the `ic`/`contiguous` fast paths require 1 of every other slot. */
static bool read_invariant(const th_fz_read *r, int d0, int nd) {
  if (r->lv != TH_FZ_FULL || r->nviews < 1 || d0 < 0 || nd <= d0) return false;
  int n = r->root->ndim;
  bool zero[TH_MAX_DIMS] = {false}, nz[TH_MAX_DIMS];
  int64_t shape[TH_MAX_DIMS], ns[TH_MAX_DIMS];
  memcpy(shape, th_value_shape(r->root), sizeof(int64_t) * (size_t)n);
  for (int k = 0; k < r->nviews; k++) {
    const th_fz_view *v = &r->views[k];
    if (v->op == TH_OP_prims_broadcast_in_dim) {
      if (v->m != n) return false;
      for (int j = 0; j < v->n; j++) nz[j] = true, ns[j] = v->a[j];
      for (int i = 0; i < n; i++) nz[v->b[i]] = zero[i] || shape[i] != v->a[v->b[i]];
    } else if (v->op == TH_OP_prims_transpose) {
      if (v->n != n) return false;
      for (int j = 0; j < n; j++) nz[j] = zero[v->a[j]], ns[j] = shape[v->a[j]];
    } else if (v->op == TH_OP_prims_reshape) { /* only inserting or removing size-1 dims ([R] -> [R, 1]) */
      int o = 0;                               /* the next dim of the old shape */
      for (int j = 0; j < v->n; j++) {
        ns[j] = v->a[j];
        nz[j] = false; /* a size-1 dim: indexed at 0 only, until a broadcast expands it (stride 0 then) */
        if (v->a[j] == 1) continue;
        while (o < n && shape[o] == 1) o++;
        if (o == n || shape[o] != v->a[j]) return false;
        nz[j] = zero[o++];
      }
      while (o < n && shape[o] == 1) o++;
      if (o != n) return false;
    } else {
      return false;
    }
    n = v->op == TH_OP_prims_broadcast_in_dim || v->op == TH_OP_prims_reshape ? v->n : n;
    memcpy(zero, nz, sizeof(bool) * (size_t)n);
    memcpy(shape, ns, sizeof(int64_t) * (size_t)n);
  }
  for (int d = d0; d < nd; d++)
    for (int j = 0; j < n; j++)
      if (r->A[j][d] && !zero[j]) return false;
  return true;
}

/* `const T a<s> = p<s>[b<s>];` for the invariant FULL reads of the nest (needed ones only when `marked`);
 * `guard`: a condition under which the element exists (else 0: rows of length 0 read nothing) */
static void emit_invariant_loads(lower *L, th_ir *blk, bool marked, const char *guard) {
  for (int k = 0; k < L->p->nread; k++) {
    if (!L->inv_read[k] || L->p->read[k].nest != L->nest || (marked && !L->need_r[k])) continue;
    int s = L->read_slot[k];
    th_strbuf sb;
    th_sb_init(&sb);
    if (guard) th_sb_printf(&sb, "%s ? ", guard);
    th_cg_put_load(&sb, L->p->read[k].v->dtype, s, S(L, "b%d", s));
    if (guard) th_sb_puts(&sb, " : 0");
    th_ir_let(L->ir, blk, ctype(L->p->read[k].v->dtype), S(L, "a%d", s), take(L, &sb));
  }
}

/* A pointwise nest over D (nd dims). */
static void lower_pointwise(lower *L, th_ir *blk, const th_fz_nest *N, int first, int nslots) {
  int nd = N->nd;
  clear_marks(L);
  for (int v = 0; v < L->p->nval; v++)
    if (L->val_slot[v] >= 0 && mem_of(L, v)->nest == L->nest) th_cg_mark(L, v);
  if (nd == 0) {
    th_ir *b = th_ir_block(L->ir, blk, true);
    for (int s = first; s < first + nslots; s++) th_ir_let(L->ir, b, "int64_t", S(L, "b%d", s), "0");
    index_mode im = {"b", "0", true, 0};
    th_cg_emit_full_values(L, b, &im);
    th_cg_emit_full_stores(L, b, &im);
    return;
  }
  th_ir_let(L->ir, blk, "int64_t", "inner", S(L, "D[%d]", nd - 1));
  th_ir_let(L->ir, blk, "int64_t", "nouter", th_cg_dims_product(L, 0, nd - 1));
  th_ir *run = th_ir_if(L->ir, blk, "nouter > 0 && inner > 0", NULL);
  th_ir_let(L->ir, run, "int64_t", "nch", "(inner + 4095) / 4096");
  th_strbuf sb;
  th_sb_init(&sb);
  int nc = 0;
  for (int s = first; s < first + nslots; s++)
    if (!L->inv_slot[s]) th_sb_printf(&sb, "%sT[%d] == 1", nc++ ? " && " : "", s * TH_MAX_DIMS + nd - 1);
  if (!nc) th_sb_puts(&sb, "1");
  th_ir_let(L->ir, run, "int", "contiguous", take(L, &sb));
  th_ir *q = th_ir_loop(L->ir, run, TH_IR_PARALLEL, "q", "0", "nouter * nch", NULL, "nouter * inner >= 32768");
  th_ir_let(L->ir, q, "int64_t", "i0", "(q % nch) * 4096");
  th_ir_let(L->ir, q, "int64_t", "i1", "inner - i0 < 4096 ? inner : i0 + 4096");
  if (nd > 1) th_ir_var(L->ir, q, "int64_t", "rem", "q / nch");
  for (int d = nd - 2; d >= 0; d--) {
    th_ir_let(L->ir, q, "int64_t", S(L, "o%d", d), d > 0 ? S(L, "rem %% D[%d]", d) : "rem");
    if (d > 0) th_ir_set(L->ir, q, "rem", "/=", S(L, "D[%d]", d));
  }
  for (int s = first; s < first + nslots; s++)
    th_ir_let(L->ir, q, "int64_t", S(L, "b%d", s), th_cg_offset_expr(L, s, "o", 0, nd - 1));
  emit_invariant_loads(L, q, true, NULL); /* the chunk is not empty */
  th_ir *els = NULL;
  th_ir *con = th_ir_if(L->ir, q, "contiguous", &els);
  th_ir *lc = th_ir_loop(L->ir, con, TH_IR_SIMD, "i", "i0", "i1", NULL, NULL);
  index_mode ic = {"b", "i", true, nd - 1};
  th_cg_emit_full_values(L, lc, &ic);
  th_cg_emit_full_stores(L, lc, &ic);
  th_ir *ls = th_ir_loop(L->ir, els, TH_IR_SERIAL, "i", "i0", "i1", NULL, NULL);
  index_mode is = {"b", "i", false, nd - 1};
  th_cg_emit_full_values(L, ls, &is);
  th_cg_emit_full_stores(L, ls, &is);
}

/* Slot s is walked along the nest's inner dims: a FULL read that is not invariant over them, or a FULL
 * output (*is_out; *dt its dtype; either may be NULL). */
bool th_cg_slot_walked(const lower *L, int s, bool *is_out, th_dtype *dt) {
  for (int k = 0; k < L->p->nread; k++)
    if (L->read_slot[k] == s) {
      if (is_out) *is_out = false;
      if (dt) *dt = L->p->read[k].v->dtype;
      return L->p->read[k].lv == TH_FZ_FULL && !L->inv_read[k];
    }
  for (int v = 0; v < L->p->nval; v++)
    if (L->val_slot[v] == s) {
      if (is_out) *is_out = true;
      if (dt) *dt = val(L, v)->v->dtype;
      return val(L, v)->lv == TH_FZ_FULL;
    }
  return false;
}

/* Slot s is read in the marked scope, or (outputs) stored by it. */
static bool slot_used(const lower *L, int s, bool stores) {
  for (int k = 0; k < L->p->nread; k++)
    if (L->read_slot[k] == s) return L->need_r[k] && L->p->read[k].lv == TH_FZ_FULL;
  for (int v = 0; v < L->p->nval; v++)
    if (L->val_slot[v] == s) return stores && L->p->val[v].lv == TH_FZ_FULL;
  return false;
}

/* One pass over a row (or, full: over everything): the reductions `red` (pass `level`), or the FULL
 * outputs when nred < 0. */
/* Marks what pass L->cur_pass needs: the reductions' operands, or (nred < 0) the FULL outputs; cmode:
 * stopping at values its row buffers hold. */
void th_cg_mark_pass(lower *L, const int *red, int nred, bool cmode) {
  L->cmode = cmode;
  clear_marks(L);
  for (int k = 0; k < nred; k++) {
    const th_fz_mem *m = &L->p->mem[red[k]];
    if (m->ref[0] >= 0)
      th_cg_mark(L, m->ref[0]);
    else
      L->need_r[-2 - m->ref[0]] = true;
  }
  if (nred < 0)
    for (int v = 0; v < L->p->nval; v++)
      if (L->val_slot[v] >= 0 && mem_of(L, v)->nest == L->nest && val(L, v)->lv == TH_FZ_FULL) th_cg_mark(L, v);
}

/* The contiguous loop `j` over a row (full: the one row, in parallel). In the prefetching pass
 * (L->pf_pass) the row is walked in chunks of TH_FZ_PF_CHUNK (256) elements, and each chunk first prefetches
 * the same elements of the next row of every slot in L->pf_slot (pf<s>, set per row by lower_rows; NULL
 * when that row is not there or not packed): the next row's reads, and its output lines for writing, so
 * the memory traffic of row r + 1 overlaps the compute of row r instead of stalling its first and last
 * passes. Returns the loop body. */
static th_ir *row_loop(lower *L, th_ir *blk, const char *clauses, bool full) {
  if (full || L->cur_pass != L->pf_pass || !L->npf)
    return th_ir_loop(L->ir, blk, full ? TH_IR_PARALLEL_SIMD : TH_IR_SIMD, "j", "0", "ninner", clauses,
                      full ? "ninner >= 32768" : NULL);
  th_ir *ch = th_ir_loop(L->ir, blk, TH_IR_SERIAL, "jc", "0",
                         S(L, "(ninner + %d) / %d", TH_FZ_PF_CHUNK - 1, TH_FZ_PF_CHUNK), NULL, NULL);
  th_ir_let(L->ir, ch, "int64_t", "jb", S(L, "%d * jc", TH_FZ_PF_CHUNK));
  th_ir_let(L->ir, ch, "int64_t", "je", S(L, "jb + %d < ninner ? jb + %d : ninner", TH_FZ_PF_CHUNK, TH_FZ_PF_CHUNK));
  for (int k = 0; k < L->npf; k++) {
    int s = L->pf_slot[k], es = L->pf_size[k];
    th_ir *on = th_ir_if(L->ir, ch, S(L, "pf%d", s), NULL);
    /* a chunk is TH_FZ_PF_CHUNK * es bytes: one prefetch per 64-byte line, written out (as a loop, its
     * control cost 4% of softmax's instructions) */
    for (int q = 0; q < TH_FZ_PF_CHUNK * es / 64; q++)
      th_ir_stmt(L->ir, on,
                 S(L, "__builtin_prefetch(pf%d + jb * %d + %d, %d, 3)", s, es, 64 * q, L->pf_write[k] ? 1 : 0));
  }
  return th_ir_loop(L->ir, ch, TH_IR_SIMD, "j", "jb", "je", clauses, NULL);
}

static th_ir *strided_walk(lower *L, th_ir *blk, const th_fz_nest *N, int first, int nslots, const char *clauses,
                           bool full, bool stores, index_mode *is);
static void emit_pass(lower *L, th_ir *blk, const th_fz_nest *N, int first, int nslots, const int *red,
                      const bool *second, int nred, bool full) {
  int nd = N->nd;
  acc_decl ad[64];
  int nad = 0;
  for (int k = 0; k < nred; k++) nad += th_cg_accs(L, red[k], second[k], ad + nad);
  for (int a = 0; a < nad; a++) th_ir_var(L->ir, blk, ad[a].type, ad[a].name, ad[a].init);
  th_strbuf cl;
  th_sb_init(&cl);
  for (int a = 0; a < nad; a++) th_sb_printf(&cl, "%s%s", a ? " " : "", ad[a].clause);
  const char *clauses = take(L, &cl);
  index_mode ic = {"b", "j", true, nd - 1};
  th_ir *outer = blk;
  bool buffered = false; /* the pass stores or loads a row buffer */
  if (L->ncache && !full) {
    th_cg_mark_pass(L, red, nred, true);
    for (int v = 0; v < L->p->nval; v++)
      if (L->need_v[v] && L->cache_pass[v] >= 0 && L->cache_pass[v] <= L->cur_pass) buffered = true;
  }
  if (buffered) { /* uc: contiguous rows that fit the row buffers */
    th_ir *cu = th_ir_if(L->ir, blk, "uc", &outer);
    th_ir *lu = row_loop(L, cu, clauses, full);
    th_cg_emit_full_values(L, lu, &ic);
    for (int k = 0; k < nred; k++) emit_update(L, lu, red[k], second[k]);
    if (nred < 0) th_cg_emit_full_stores(L, lu, &ic);
  }
  th_cg_mark_pass(L, red, nred, false);
  th_ir *els = NULL;
  th_ir *con = th_ir_if(L->ir, outer, "ic", &els);
  /* contiguous: one flat loop over the row */
  th_ir *lc = row_loop(L, con, clauses, full);
  th_cg_emit_full_values(L, lc, &ic);
  for (int k = 0; k < nred; k++) emit_update(L, lc, red[k], second[k]);
  if (nred < 0) th_cg_emit_full_stores(L, lc, &ic);
  index_mode is;
  th_ir *lj = strided_walk(L, els, N, first, nslots, clauses, full, nred < 0, &is);
  th_cg_emit_full_values(L, lj, &is);
  for (int k = 0; k < nred; k++) emit_update(L, lj, red[k], second[k]);
  if (nred < 0) th_cg_emit_full_stores(L, lj, &is);
}

/* The walk of a row through the slots' strides, in `blk`: the inner dims but the last (when there are
 * any: c<s> the slots' bases there), then the last; parallel when `full` and clauses given. Returns the
 * innermost body and sets *is to its index mode. stores: output slots get bases too. */
static th_ir *strided_walk(lower *L, th_ir *blk, const th_fz_nest *N, int first, int nslots, const char *clauses,
                           bool full, bool stores, index_mode *is) {
  int nd = N->nd, no = nd - N->r;
  bool par = full && clauses;
  th_ir *lq = blk;
  const char *base = "b";
  if (nd - 1 > no) {
    lq = th_ir_loop(L->ir, blk, par ? TH_IR_PARALLEL : TH_IR_SERIAL, "q", "0", "nq", clauses,
                    par ? "ninner >= 32768" : NULL);
    th_cg_emit_unflatten(L, lq, "q", "k", no, nd - 1);
    for (int s = first; s < first + nslots; s++) {
      if (!slot_used(L, s, stores)) continue;
      th_ir_let(L->ir, lq, "int64_t", S(L, "c%d", s), S(L, "b%d + %s", s, th_cg_offset_expr(L, s, "k", no, nd - 1)));
    }
    base = "c";
  }
  *is = (index_mode){base, "j", false, nd - 1};
  return th_ir_loop(L->ir, lq, par && nd - 1 == no ? TH_IR_PARALLEL : TH_IR_SERIAL, "j", "0", S(L, "D[%d]", nd - 1),
                    nd - 1 == no ? clauses : NULL, par && nd - 1 == no ? "ninner >= 32768" : NULL);
}

/* A float64 var's Welford fallback, after its squared-deviation pass (the eager executor's var_row_f):
 * when the sum or the squares overflowed (inputs near the top of float64's range: [1e306] * 100 sums to
 * 1e308, whose rounded mean is ~1e290 off, and that squared is inf, where PyTorch's Welford gives 0),
 * the row again, serially, with Welford's running mean u and sum of squares q. Narrower inputs cannot
 * overflow in float64, but a row holding an inf or NaN takes the fallback too, so that var_mean's mean
 * is what eager and PyTorch's Welford give there (NaN once a finite element follows an inf, where the
 * two-pass mean is inf). A finite row never enters it: it runs the two-pass path alone. */
static void emit_welford(lower *L, th_ir *body, const th_fz_nest *N, int first, int nslots, int i) {
  const th_fz_mem *m = &L->p->mem[i];
  th_ir *fb = th_ir_if(L->ir, body, S(L, "!isfinite(q%d)", i), NULL);
  th_ir_var(L->ir, fb, "double", S(L, "wk%d", i), "0");
  th_ir_set(L->ir, fb, S(L, "u%d", i), "=", "0");
  th_ir_set(L->ir, fb, S(L, "q%d", i), "=", "0");
  th_cg_mark_pass(L, &i, 1, false);
  index_mode is;
  th_ir *lj = strided_walk(L, fb, N, first, nslots, NULL, false, false, &is);
  th_cg_emit_full_values(L, lj, &is);
  const char *x = th_cg_operand(L, m, 0);
  th_ir_let(L->ir, lj, "double", S(L, "wd%d", i), S(L, "(double)%s - u%d", x, i));
  th_ir_set(L->ir, lj, S(L, "wk%d", i), "+=", "1");
  th_ir_set(L->ir, lj, S(L, "u%d", i), "+=", S(L, "wd%d / wk%d", i, i));
  th_ir_set(L->ir, lj, S(L, "q%d", i), "+=", S(L, "wd%d * ((double)%s - u%d)", i, x, i));
}

/* The reductions of pass `level` (red, second: var's squared-deviation pass); their count. */
static int pass_reds(lower *L, int level, int *red, bool *second) {
  int nred = 0;
  for (int i = 0; i < L->p->nmem && nred < 32; i++) {
    const th_fz_mem *m = &L->p->mem[i];
    if (m->nest != L->nest || m->kind != TH_FZ_REDUCE) continue;
    if (L->red_pass[i] == level)
      red[nred] = i, second[nred++] = false;
    else if (two_pass(m->b->sym->id) && L->red_pass[i] + 1 == level)
      red[nred] = i, second[nred++] = true;
  }
  return nred;
}

/* A FULL pointwise value worth keeping in a row buffer rather than computing again: its op's template
 * divides or calls a function (exp, tanh, ... through the prelude: tens of instructions per element,
 * where a buffer costs one load). */
static bool expensive(const lower *L, int v) {
  const th_fz_mem *m = mem_of(L, v);
  const th_bsym *b = m->b;
  if (m->kind != TH_FZ_POINTWISE || (b->sym->tags & TH_TAG_CONVERT) || b->sym->id == TH_OP_prims_clone ||
      !b->sym->cexpr)
    return false;
  return th_fuser_template_expensive(b->sym->cexpr);
}

/* the row buffers of one nest, per thread, on its stack: 32 KiB, within L1 and far below the smallest
 * thread stacks in use (musl's default is 128 KiB; OMP_STACKSIZE may set less) */
#define TH_FZ_ROWBUF_BYTES 32768
#define TH_FZ_ROWBUF_MAX 4 /* cached values per nest */

/* Row buffers (passes 1..npass, the last being the output pass when `outs`): an expensive FULL value
 * needed by a pass after the first one computing it is stored by that one into rb<v> (cache_pass[v])
 * and loaded by the later ones, when the row is contiguous and short enough (`uc`, lower_rows). Values
 * reached in later passes only through other cached ones are not kept. Returns the row length limit
 * (0: nothing cached). */
static int64_t plan_row_buffers(lower *L, int maxl, bool outs) {
  int nv = L->p->nval, npass = maxl + (outs ? 1 : 0);
  int *firstp = L->memo2, red[32];
  bool second[32];
  L->ncache = 0;
  for (int v = 0; v < nv; v++) L->cache_pass[v] = -1, firstp[v] = 0;
  for (int p = 1; p <= npass; p++) {
    int nred = p <= maxl ? pass_reds(L, p, red, second) : -1;
    L->cur_pass = p;
    th_cg_mark_pass(L, red, nred, false);
    for (int v = 0; v < nv; v++) {
      if (!L->need_v[v] || !expensive(L, v)) continue;
      if (!firstp[v])
        firstp[v] = p;
      else if (firstp[v] < p && L->cache_pass[v] < 0 && L->ncache < TH_FZ_ROWBUF_MAX)
        L->cache_pass[v] = firstp[v], L->ncache++;
    }
  }
  if (!L->ncache) return 0;
  /* keep those some later pass loads */
  for (int v = 0; v < nv; v++) firstp[v] = 0; /* now: loaded */
  for (int p = 1; p <= npass; p++) {
    int nred = p <= maxl ? pass_reds(L, p, red, second) : -1;
    L->cur_pass = p;
    th_cg_mark_pass(L, red, nred, true);
    for (int v = 0; v < nv; v++)
      if (L->need_v[v] && L->cache_pass[v] >= 0 && L->cache_pass[v] < p) firstp[v] = 1;
  }
  int64_t bytes = 0;
  L->ncache = 0;
  for (int v = 0; v < nv; v++) {
    if (L->cache_pass[v] < 0) continue;
    if (!firstp[v]) {
      L->cache_pass[v] = -1;
      continue;
    }
    L->ncache++;
    bytes += dclass(val(L, v)->v->dtype) == 0 ? 4 : 8;
  }
  L->cmode = false;
  if (!L->ncache) return 0;
  int64_t lim = TH_FZ_ROWBUF_BYTES / bytes;
  return lim;
}

/* A row nest (r > 0); full: r == nd (one row, parallel passes). */
static void lower_rows(lower *L, th_ir *blk, const th_fz_nest *N, int first, int nslots) {
  int nd = N->nd, no = nd - N->r;
  /* one row (a full reduction, or rows of size-1 dims only: the sizes are the trace's): the passes
   * themselves run in parallel */
  int64_t nrows_static = 1;
  for (int d = 0; d < no; d++) nrows_static *= N->D[d];
  bool full = nrows_static == 1;
  th_strbuf sb;
  int maxl = 0;
  for (int i = 0; i < L->p->nmem; i++) {
    const th_fz_mem *m = &L->p->mem[i];
    if (m->nest == L->nest && m->kind == TH_FZ_REDUCE) {
      int done = L->red_pass[i] + two_pass(m->b->sym->id);
      if (done > maxl) maxl = done;
    }
  }
  bool any_full = false;
  for (int v = 0; v < L->p->nval; v++)
    if (L->val_slot[v] >= 0 && mem_of(L, v)->nest == L->nest && val(L, v)->lv == TH_FZ_FULL) any_full = true;
  L->ncache = 0;
  int64_t rowbuf = full ? 0 : plan_row_buffers(L, maxl, any_full);
  /* sizes: rows, row length, inner rows (all but the last inner dim) */
  th_ir_let(L->ir, blk, "int64_t", "nrows", th_cg_dims_product(L, 0, no));
  th_ir_let(L->ir, blk, "int64_t", "ninner", th_cg_dims_product(L, no, nd));
  if (nd - 1 > no) th_ir_let(L->ir, blk, "int64_t", "nq", S(L, "D[%d] > 0 ? ninner / D[%d] : 0", nd - 1, nd - 1));
  /* ic: every FULL slot is row-major in the inner dims (w<d>: the row-major strides of the inner dims) */
  th_ir_let(L->ir, blk, "int64_t", S(L, "w%d", nd - 1), "1");
  for (int d = nd - 2; d >= no; d--)
    th_ir_let(L->ir, blk, "int64_t", S(L, "w%d", d), S(L, "w%d * D[%d]", d + 1, d + 1));
  th_ir *run = th_ir_if(L->ir, blk, "nrows > 0", NULL);
  th_ir_var(L->ir, run, "int", "ic", "1");
  for (int s = first; s < first + nslots; s++) {
    if (!th_cg_slot_walked(L, s, NULL, NULL)) continue;
    for (int d = no; d < nd; d++)
      th_ir_set(L->ir, run, "ic", "&=", S(L, "D[%d] <= 1 || T[%d] == w%d", d, s * TH_MAX_DIMS + d, d));
  }
  if (rowbuf) th_ir_let(L->ir, run, "int", "uc", S(L, "ic && ninner <= %lld", (long long)rowbuf));
  th_ir *body = run;
  if (!full) {
    body = th_ir_loop(L->ir, run, TH_IR_PARALLEL, "row", "0", "nrows", NULL, "nrows * ninner >= 32768");
    th_cg_emit_unflatten(L, body, "row", "o", 0, no);
  } else {
    th_ir_let(L->ir, run, "int64_t", "row", "0");
  }
  for (int s = first; s < first + nslots; s++)
    th_ir_let(L->ir, body, "int64_t", S(L, "b%d", s), full ? "0" : th_cg_offset_expr(L, s, "o", 0, no));
  for (int v = 0; v < L->p->nval && rowbuf; v++)
    if (L->cache_pass[v] >= 0)
      th_ir_stmt(L->ir, body, S(L, "_Alignas(32) %s rb%d[%lld]", ctype(val(L, v)->v->dtype), v, (long long)rowbuf));
  /* Contiguous rows: the next row of each packed FULL slot (the last row dim's stride is the row length;
   * a broadcast weight's is 0), inputs and outputs, is prefetched while this one is computed (row_loop):
   * a row of 1024 floats is one 4 KiB page and the hardware prefetchers stop at page boundaries, so each
   * row would start with a stall on its reads and end with one on its stores' reads for ownership. The
   * prefetches are spread over one pass (one burst at the row's start hides less of the latency):
   * the first one computing a row-buffered value that calls a function (softmax's exp: enough work per
   * element to hide the chunks' reduction epilogues; a buffered division is not), else the output pass,
   * which has no reductions; a nest without FULL outputs does not prefetch (chunking a cheap reduction
   * pass repeats its epilogue every chunk, which costs more than the prefetches gain); rows of one chunk
   * to 16 KiB per slot (shorter rows share pages, which the hardware prefetchers follow, and a chunk's
   * prefetches would run rows ahead, which slows short-row softmax down). */
  L->npf = 0;
  L->pf_pass = 0;
  if (!full) {
    if (any_full) L->pf_pass = maxl + 1;
    for (int v = 0; v < L->p->nval && rowbuf; v++)
      if (L->cache_pass[v] > 0 && (!L->pf_pass || L->cache_pass[v] < L->pf_pass) &&
          th_fuser_template_calls(mem_of(L, v)->b->sym->cexpr))
        L->pf_pass = L->cache_pass[v];
  }
  for (int s = first; s < first + nslots && L->pf_pass && L->npf < TH_FZ_MAX_SLOTS_PF; s++) {
    bool is_out;
    th_dtype dt;
    if (!th_cg_slot_walked(L, s, &is_out, &dt)) continue;
    th_ir_let(L->ir, body, "char *", S(L, "pf%d", s),
              S(L,
                "ic && row + 1 < nrows && T[%d] == ninner && ninner >= %d && ninner * (int64_t)sizeof *p%d <= 16384 ? "
                "(const char *)(p%d + b%d + ninner) : NULL",
                s * TH_MAX_DIMS + no - 1, TH_FZ_PF_CHUNK, s, s, s));
    L->pf_write[L->npf] = is_out;
    L->pf_size[L->npf] = (int)th_dtype_size(dt);
    L->pf_slot[L->npf++] = s;
  }
  emit_invariant_loads(L, body, false, "ninner > 0"); /* per row; unused ones are dead code */
  /* ROW reads and level-0 ROW values */
  for (int k = 0; k < L->p->nread; k++) {
    if (L->p->read[k].nest != L->nest || L->p->read[k].lv != TH_FZ_ROW) continue;
    int s = L->read_slot[k];
    th_sb_init(&sb);
    th_cg_put_load(&sb, L->p->read[k].v->dtype, s, S(L, "b%d", s));
    th_ir_let(L->ir, body, ctype(L->p->read[k].v->dtype), S(L, "a%d", s), take(L, &sb));
  }
  th_cg_emit_row_values(L, body, 0);
  /* the passes */
  for (int level = 1; level <= maxl; level++) {
    int red[32];
    bool second[32];
    int nred = pass_reds(L, level, red, second);
    L->cur_pass = level;
    th_ir_comment(L->ir, body, S(L, "pass %d", level));
    th_ir *pb = th_ir_block(L->ir, body, false);
    emit_pass(L, pb, N, first, nslots, red, second, nred, full);
    for (int k = 0; k < nred; k++) {
      const th_fz_mem *m = &L->p->mem[red[k]];
      bool fallback = two_pass(m->b->sym->id) && dclass(m->b->args[0].u.value->dtype) != 2;
      if (two_pass(m->b->sym->id) && !second[k]) {
        const char *u = S(L, "u%d", red[k]), *e = S(L, "s%d / (double)ninner", red[k]);
        if (fallback)
          th_ir_var(L->ir, body, "double", u, e);
        else
          th_ir_let(L->ir, body, "double", u, e);
      } else {
        if (fallback) emit_welford(L, body, N, first, nslots, red[k]);
        th_cg_emit_finish(L, body, red[k], "ninner");
      }
    }
    th_cg_emit_row_values(L, body, level);
  }
  /* the final pass: FULL outputs */
  if (any_full) {
    L->cur_pass = maxl + 1;
    th_ir_comment(L->ir, body, "the outputs");
    emit_pass(L, th_ir_block(L->ir, body, false), N, first, nslots, NULL, NULL, -1, full);
  }
  th_cg_emit_row_stores(L, body);
}

/* Levels: lvl of ROW vals, red_pass of reductions (see the file comment). maxrow: the highest level of
 * a ROW value the FULL value v depends on. */
static int maxrow(lower *L, int v, int *memo) {
  if (val(L, v)->lv == TH_FZ_ROW) return L->lvl[v];
  if (memo[v] >= 0) return memo[v];
  const th_fz_mem *m = mem_of(L, v);
  int best = 0;
  for (int a = 0; a < 4; a++)
    if (m->ref[a] >= 0) {
      int x = maxrow(L, m->ref[a], memo);
      if (x > best) best = x;
    }
  return memo[v] = best;
}

static void levels(lower *L, int *memo) {
  for (int v = 0; v < L->p->nval; v++) L->lvl[v] = 0, memo[v] = -1;
  for (int i = 0; i < L->p->nmem; i++) {
    const th_fz_mem *m = &L->p->mem[i];
    L->red_pass[i] = 0;
    if (m->kind == TH_FZ_INVIEW) continue;
    if (m->kind == TH_FZ_REDUCE) {
      int in = m->ref[0] >= 0 ? maxrow(L, m->ref[0], memo) : 0;
      L->red_pass[i] = in + 1;
      for (int k = 0; k < 2; k++)
        if (m->out[k] >= 0) L->lvl[m->out[k]] = in + 1 + two_pass(m->b->sym->id);
      continue;
    }
    int v = m->out[0];
    if (val(L, v)->lv != TH_FZ_ROW) continue;
    int best = 0;
    for (int a = 0; a < 4; a++)
      if (m->ref[a] >= 0 && val(L, m->ref[a])->lv == TH_FZ_ROW && L->lvl[m->ref[a]] > best) best = L->lvl[m->ref[a]];
    L->lvl[v] = best;
  }
}

void th_fuser_region_clear(th_fuser_region *r) {
  th_free(r->slots);
  th_free(r->nests);
  th_free(r->kconst);
  memset(r, 0, sizeof *r);
}

th_status th_fuser_codegen(const th_bsym *rb, th_ir_ctx *ir, th_fuser_region *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", rb->sym->name);
  if (rb->nsubs < 1 || rb->out.kind != TH_ARG_LIST)
    return th_error(TH_ERR_VALUE, "%s: not a fusion region", rb->sym->qualname);
  th_fz_plan plan;
  th_status st = th_fz_plan_build((const th_bsym *const *)rb->subs, rb->nsubs, &plan);
  if (st == TH_ERR_NOMEM) return th_error(TH_ERR_NOMEM, "out of memory generating %s", rb->sym->qualname);
  if (st != TH_OK) return th_error(TH_ERR_VALUE, "%s: its members do not form loop nests", rb->sym->qualname);
  int nv = plan.nval ? plan.nval : 1, nr = plan.nread ? plan.nread : 1, nm = plan.nmem ? plan.nmem : 1;
  int nouts = rb->out.u.seq.n;
  lower L;
  memset(&L, 0, sizeof L);
  L.ir = ir;
  L.p = &plan;
  L.region = r;
  L.read_slot = th_malloc(sizeof(int) * (size_t)nr);
  L.val_slot = th_malloc(sizeof(int) * (size_t)nv);
  L.vname = th_calloc((size_t)nv, sizeof(char *));
  L.lvl = th_malloc(sizeof(int) * (size_t)nv);
  L.red_pass = th_malloc(sizeof(int) * (size_t)nm);
  L.need_v = th_malloc(sizeof(bool) * (size_t)nv);
  L.need_r = th_malloc(sizeof(bool) * (size_t)nr);
  int *memo = th_malloc(sizeof(int) * (size_t)nv);
  L.cache_pass = th_malloc(sizeof(int) * (size_t)nv);
  if (L.cache_pass)
    for (int v = 0; v < nv; v++) L.cache_pass[v] = -1;
  L.memo2 = th_malloc(sizeof(int) * (size_t)nv);
  L.inv_read = th_calloc((size_t)nr, sizeof(bool));
  L.inv_slot = th_calloc((size_t)(plan.nread + nouts + 1), sizeof(bool));
  r->slots = th_calloc((size_t)(plan.nread + nouts + 1), sizeof(th_fuser_slot));
  r->nests = th_calloc((size_t)(plan.nnest ? plan.nnest : 1), sizeof(th_fz_nest));
  if (!L.read_slot || !L.val_slot || !L.vname || !L.lvl || !L.red_pass || !L.need_v || !L.need_r || !memo ||
      !L.cache_pass || !L.memo2 || !L.inv_read || !L.inv_slot || !r->slots || !r->nests) {
    st = th_error(TH_ERR_NOMEM, "out of memory generating %s", rb->sym->qualname);
    goto done;
  }
  /* slots: nest by nest, its reads then its outputs */
  for (int v = 0; v < plan.nval; v++) L.val_slot[v] = -1;
  int ns = 0;
  r->nnest = plan.nnest;
  memcpy(r->nests, plan.nest, sizeof(th_fz_nest) * (size_t)plan.nnest);
  for (int n = 0; n < plan.nnest; n++) {
    for (int k = 0; k < plan.nread; k++) {
      const th_fz_read *rd = &plan.read[k];
      if (rd->nest != n) continue;
      th_fuser_slot *s = &r->slots[ns];
      s->v = rd->root;
      s->nest = n;
      s->lv = rd->lv;
      s->nviews = rd->nviews;
      memcpy(s->views, rd->views, sizeof s->views);
      s->vdim = rd->v->ndim;
      memcpy(s->A, rd->A, sizeof s->A);
      const th_fz_nest *N = &plan.nest[n];
      L.inv_read[k] = N->nd > 0 && !N->col && read_invariant(rd, N->r ? N->nd - N->r : N->nd - 1, N->nd);
      L.inv_slot[ns] = L.inv_read[k];
      L.read_slot[k] = ns++;
    }
    for (int j = 0; j < nouts; j++) {
      const th_value *ov = rb->out.u.seq.items[j].u.value;
      int v = 0;
      while (v < plan.nval && plan.val[v].v != ov) v++;
      if (v == plan.nval) {
        st = th_error(TH_ERR_VALUE, "%s: output %s is not computed by the region", rb->sym->qualname,
                      ov->name ? ov->name : "?");
        goto done;
      }
      if (plan.mem[plan.val[v].member].kind == TH_FZ_INVIEW) { /* the partition evicts these */
        st =
          th_error(TH_ERR_VALUE, "%s: output %s is a view of an input", rb->sym->qualname, ov->name ? ov->name : "?");
        goto done;
      }
      if (plan.mem[plan.val[v].member].nest != n) continue;
      th_fuser_slot *s = &r->slots[ns];
      s->v = ov;
      s->is_out = true;
      s->nest = n;
      s->lv = plan.val[v].lv;
      memcpy(s->ostr, plan.val[v].smap, sizeof s->ostr);
      L.val_slot[v] = ns++;
    }
  }
  r->nslots = ns;
  /* names: values, aliases share their source's */
  for (int i = 0; i < plan.nmem; i++) {
    const th_fz_mem *m = &plan.mem[i];
    if (m->kind == TH_FZ_INVIEW) continue;
    for (int k = 0; k < 2; k++) {
      if (m->out[k] < 0) continue;
      if (m->kind == TH_FZ_ALIAS || m->kind == TH_FZ_ROWBCAST)
        L.vname[m->out[k]] = L.vname[m->ref[0]];
      else
        L.vname[m->out[k]] = th_ir_str(ir, "v%d", m->out[k]);
      if (!L.vname[m->out[k]]) L.vname[m->out[k]] = "0";
    }
  }
  levels(&L, memo);
  L.scratch_slot = ns;
  L.nt_at = 0;
  for (int n = 0; n < plan.nnest; n++) L.nt_at += plan.nest[n].nd;
  th_ir *fb = th_ir_func(ir, r->name, "char *const *restrict P, const int64_t *restrict S, const int64_t *restrict T");
  int off = 0, first = 0;
  for (int n = 0; n < plan.nnest; n++) {
    const th_fz_nest *N = &plan.nest[n];
    int cnt = 0;
    while (first + cnt < ns && r->slots[first + cnt].nest == n) cnt++;
    L.nest = n;
    th_ir *blk = th_ir_block(ir, fb, true);
    th_strbuf sb;
    th_sb_init(&sb);
    th_sb_printf(&sb, "nest %d: %s over %d dims", n,
                 N->r ? (N->col          ? "columns"
                         : N->r == N->nd ? "full reduction"
                                         : "rows")
                      : "pointwise",
                 N->nd);
    if (N->r && N->r < N->nd) th_sb_printf(&sb, ", the %s %d reduced", N->col ? "first" : "last", N->r);
    th_ir_comment(ir, blk, take(&L, &sb));
    th_ir_let(ir, blk, "int64_t", "*D", S(&L, "S + %d", off));
    declare_slots(&L, blk, first, cnt, r->slots);
    if (N->r == 0)
      lower_pointwise(&L, blk, N, first, cnt);
    else if (N->col)
      th_cg_lower_cols(&L, blk, &r->nests[n], first, cnt);
    else
      lower_rows(&L, blk, N, first, cnt);
    off += N->nd;
    first += cnt;
  }
  if (L.st != TH_OK || th_ir_failed(ir)) st = th_error(TH_ERR_NOMEM, "out of memory generating %s", rb->sym->qualname);
done:
  th_free(L.read_slot);
  th_free(L.val_slot);
  th_free(L.vname);
  th_free(L.lvl);
  th_free(L.red_pass);
  th_free(L.need_v);
  th_free(L.need_r);
  th_free(memo);
  th_free(L.cache_pass);
  th_free(L.memo2);
  th_free(L.inv_read);
  th_free(L.inv_slot);
  th_fz_plan_free(&plan);
  if (st != TH_OK) th_fuser_region_clear(r);
  return st;
}

char *th_fuser_unit_source(const th_ir_ctx *ctx, size_t *body_at, size_t *fn_at) {
  th_strbuf sb;
  th_sb_init(&sb);
  th_sb_puts(&sb, "/* generated by thunder-c's fuser (src/executors/fuser/codegen.c) */\n#include <tgmath.h>\n");
  th_sb_puts(&sb, (const char *)th_fuser_prelude); /* NUL-terminated (cmake/embed_prelude.cmake) */
  th_sb_puts(&sb, "\n/* ==== the fusion regions ==== */\n");
  size_t at = sb.len;
  th_ir_emit(ctx, &sb, fn_at);
  if (body_at) *body_at = at;
  return th_sb_take(&sb);
}
