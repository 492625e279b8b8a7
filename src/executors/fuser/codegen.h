/* codegen.h — the lowering context and helpers shared by the fuser's codegen: codegen.c (regions,
 * pointwise and row nests) and codegen_columns.c (column nests). Internal to those two files; the
 * fuser's interface is fuser.h. Functions named th_cg_* are defined in codegen.c unless noted. */
#ifndef TH_FUSER_CODEGEN_H
#define TH_FUSER_CODEGEN_H

#include <stdarg.h>
#include <stdio.h>

#include "executors/fuser/fuser.h"

/* ---- the lowering context ----------------------------------------------------------------------------- */
#define TH_FZ_MAX_SLOTS_PF 16 /* prefetched slots per row nest */

/* One nest being lowered: the plan, the slots and names of its values, the marks of what the scope
 * being emitted needs, and the row-buffer and prefetch plans of a row nest. */
typedef struct {
  th_ir_ctx *ir;
  const th_fz_plan *p;
  int nest;           /* the nest being lowered */
  int *read_slot;     /* read -> slot */
  int *val_slot;      /* val -> output slot, -1 */
  const char **vname; /* val -> the C name holding it */
  int *lvl;           /* ROW val -> the pass level after which it exists (0: before the first) */
  int *red_pass;      /* REDUCE member -> its first pass */
  bool *need_v, *need_r;
  bool *inv_read;  /* read -> invariant over the nest's inner dims: loaded once outside them */
  bool *inv_slot;  /* slot -> read by an invariant read */
  int *memo2;      /* per val scratch of plan_row_buffers */
  int *cache_pass; /* FULL val -> the pass that computes it into its row buffer rb<v> (-1: recomputed) */
  int ncache;      /* cached vals of the nest being lowered */
  int cur_pass;    /* the pass being marked or emitted (1..; the output pass is the last) */
  bool cmode;      /* marking/emitting the row-buffer variant of a pass */
  int pf_pass;     /* the pass whose contiguous loops prefetch the next row (0: none) */
  int npf;         /* prefetched slots: pf_slot[k], written (prefetchw) when pf_write[k] */
  int pf_slot[TH_FZ_MAX_SLOTS_PF];
  int pf_size[TH_FZ_MAX_SLOTS_PF]; /* bytes per element of the prefetched slot */
  bool pf_write[TH_FZ_MAX_SLOTS_PF];
  int scratch_slot; /* P[scratch_slot]: the column nests' accumulators (the launcher's scratch) */
  int nt_at;        /* S[nt_at]: how many threads' accumulators the scratch holds */
  th_fuser_region *region; /* the region being lowered: its integer constants (S[nt_at + 1 + k]) */
  th_status st;
} lower;

static inline const th_fz_val *val(const lower *L, int v) { return &L->p->val[v]; }
static inline const th_fz_mem *mem_of(const lower *L, int v) { return &L->p->mem[L->p->val[v].member]; }

/* The printf-formatted string, in the IR context. */
static inline const char *S(lower *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline const char *S(lower *L, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  const char *r = th_ir_str(L->ir, "%s", buf);
  if (!r) L->st = TH_ERR_NOMEM; /* the IR context failed: emit nothing real, report at the end */
  return r ? r : "0";
}

/* sb's text, moved into the IR context (sb is left empty). */
static inline const char *take(lower *L, th_strbuf *sb) {
  char *s = th_sb_take(sb);
  if (!s) {
    L->st = TH_ERR_NOMEM;
    return "0";
  }
  const char *r = th_ir_str(L->ir, "%s", s);
  th_free(s);
  return r ? r : "0";
}

/* var and var_mean take two passes (the mean, then the squared deviations). */
static inline bool two_pass(th_op_id id) { return id == TH_OP_prims_var || id == TH_OP_prims_var_mean; }

/* The compute class of dtype d: 0 float, 1 double, 2 int64_t; ctype names it. */
static inline int dclass(th_dtype d) { return d == TH_F64 ? 1 : th_dtype_is_float(d) ? 0 : 2; }
static inline const char *ctype(th_dtype d) {
  static const char *const names[] = {"float", "double", "int64_t"};
  return names[dclass(d)];
}

/* ---- emitting ------------------------------------------------------------------------------------------ */
/* How a FULL scope indexes slot k: base<k> + var (contiguous) or base<k> + var * T[8k + last]. */
typedef struct {
  const char *base; /* "b" / "c": per-slot base offsets */
  const char *var;  /* the loop variable */
  bool contig;      /* index = base + var, else base + var * T[8k + last] */
  int last;         /* the domain's last dim */
} index_mode;

/* A reduction accumulator: its C type, name, initial value and omp reduction clause. */
typedef struct {
  const char *type, *name, *init, *clause;
} acc_decl;

/* "D[a] * D[a+1] * ... * D[b-1]" ("1" when empty). */
const char *th_cg_dims_product(lower *L, int a, int b);
/* Slot s's offset for the index vars <var>a .. <var>b-1: "o0 * T[k] + ..." ("0" when empty). */
const char *th_cg_offset_expr(lower *L, int slot, const char *var, int a, int b);
/* The C operand for argument a of member m. */
const char *th_cg_operand(lower *L, const th_fz_mem *m, int a);
/* Appends the load of slot k's element idx of dtype d, as its compute-class value. */
void th_cg_put_load(th_strbuf *sb, th_dtype d, int k, const char *idx);

/* Marks FULL value v and what it is computed from as needed by the scope being emitted. */
void th_cg_mark(lower *L, int v);
/* Marks what pass L->cur_pass needs: the reductions' operands, or (nred < 0) the FULL outputs; cmode:
 * stopping at values its row buffers hold. */
void th_cg_mark_pass(lower *L, const int *red, int nred, bool cmode);
/* Slot s is walked along the nest's inner dims: a FULL read that is not invariant over them, or a FULL
 * output (*is_out; *dt its dtype; either may be NULL). */
bool th_cg_slot_walked(const lower *L, int s, bool *is_out, th_dtype *dt);

/* Loads of the marked FULL reads and lets of the marked FULL values, in program order. */
void th_cg_emit_full_values(lower *L, th_ir *blk, const index_mode *im);
/* Stores of the nest's FULL outputs. */
void th_cg_emit_full_stores(lower *L, th_ir *blk, const index_mode *im);
/* The accumulators of reduction member i in pass `second` (var's squared deviations) or its first;
 * returns how many (out holds up to 2). */
int th_cg_accs(lower *L, int i, bool second, acc_decl *out);
/* After reduction i's last pass: its output values (ROW lets). n: the row length expression. */
void th_cg_emit_finish(lower *L, th_ir *blk, int i, const char *n);
/* The ROW values of level `level` (program order): lets of ROW pointwise members. */
void th_cg_emit_row_values(lower *L, th_ir *blk, int level);
/* The row-major multi-index of flat index `flat` over domain dims [lo, hi): `<prefix>d` for each d. */
void th_cg_emit_unflatten(lower *L, th_ir *blk, const char *flat, const char *prefix, int lo, int hi);
/* Stores of the nest's ROW outputs at the flat row index `row`. */
void th_cg_emit_row_stores(lower *L, th_ir *blk);

/* ---- codegen_columns.c ----------------------------------------------------------------------------- */
/* Lowers column nest N (the region's copy: its nacc is set here, for the launcher's scratch) over slots
 * [first, first + nslots) into blk. */
void th_cg_lower_cols(lower *L, th_ir *blk, th_fz_nest *N, int first, int nslots);

#endif
