/* fuser.h — the CPU fusion executor "fuser" (internal): nest analysis, partition, loop IR, codegen,
 * compile-and-cache, and the run-time launcher. The pipeline is the file list:
 *
 *   partition.c  groups fusible top-level bsyms of an execution trace into fusion regions (bsyms of the
 *                dynamic symbols fusion0, fusion1, ... with the members as subsymbols, a LIST of outputs
 *                and claimed by "fuser"), asking nest.c whether each grown region can still be lowered;
 *   nest.c       the one analysis partition and codegen share: a region's members as loop nests
 *                (domain, reduction suffix, the level and store map of every value, the input reads);
 *   loopir.c     a small loop IR (loops, lets, accumulators, stores, ifs) and the emitter printing it
 *                as C (indentation scopes, OpenMP pragmas);
 *   codegen.c    lowers each nest to the loop IR: one C function per region, all regions of a program
 *                in one translation unit after the embedded prelude (kernel_prelude.h); column nests
 *                in codegen_columns.c (the two share codegen.h);
 *   compile.c    builds a translation unit into one shared object ($CC -O2, its regions compiled in
 *                parallel parts and linked), disk cache keyed by SHA-256, dlopen/dlsym;
 *   fuser.c      th_fuser_pass (the three above for a program) and the launcher (one program step per
 *                region: input views, output allocation, the call).
 *
 * Terms (docs/fuser.md): a NEST runs over a domain shape D (nd dims) with a reduction suffix
 * of r dims (r = 0: pointwise; r > 0: rows = D[0:nd-r], inner = D[nd-r:]). A member value is FULL (one
 * element per domain index: shape D or a relabelling of it, stored through its store map) or ROW (one
 * element per row: the reductions' results and what is computed from them). Region inputs are FREE: they
 * are read through a view chain (layout ops applied at launch) and a coordinate map from the domain. */
#ifndef TH_FUSER_H
#define TH_FUSER_H

#include <stdint.h>

#include "core/core.h"
#include "core/ir.h"
#include "executors/kernel.h"

typedef enum { TH_FUSER_DATAFLOW = 0, TH_FUSER_CONSECUTIVE = 1 } th_fuser_strategy;

/* The fuser executor's descriptor (one impl: TH_OP_DYNAMIC, the region kernel). */
bool th_fuser_is_region(const th_bsym *b); /* a dynamic symbol claimed by the fuser */
extern const th_executor_desc th_fuser_executor;

/* ---- nest.c ---------------------------------------------------------------------------------------- */
typedef enum { TH_FZ_FREE = 0, TH_FZ_FULL = 1, TH_FZ_ROW = 2 } th_fz_level;

typedef enum {
  TH_FZ_INVIEW,    /* a layout op of a region input (or of another INVIEW): part of an input read */
  TH_FZ_POINTWISE, /* an elementwise prim with a cexpr, convert_element_type, or clone */
  TH_FZ_ALIAS,     /* reshape/squeeze/stride_order/transpose/size-1 broadcast of a member: same elements */
  TH_FZ_ROWBCAST,  /* broadcast_in_dim of a ROW value to the domain: the row's scalar */
  TH_FZ_REDUCE     /* sum, prod, amax, amin, var, var_mean over the nest's reduction suffix */
} th_fz_kind;

/* A member's output value (var_mean has two). */
typedef struct th_fz_val {
  const th_value *v;
  int member;                /* producer (index into th_fz_plan.mem) */
  th_fz_level lv;            /* FREE for INVIEW outputs */
  int64_t smap[TH_MAX_DIMS]; /* FULL: element offset in a contiguous tensor of v's shape, per domain dim */
} th_fz_val;

#define TH_FZ_MAX_VIEWS 8 /* longest view chain of one input read */

/* A layout op applied to an input at launch (copied from the trace: the plan outlives no trace). */
typedef struct th_fz_view {
  th_op_id op; /* broadcast_in_dim, reshape, transpose, slice_prim, squeeze, stride_order */
  int n, m;    /* lengths of a (shape / perm / start / dims) and b (broadcast dims / end) */
  int64_t a[TH_MAX_DIMS], b[TH_MAX_DIMS], c[TH_MAX_DIMS]; /* slice: start, end, step */
} th_fz_view;

/* One input slot of a nest: region input `root`, its view chain, read at domain index i as element
 * coord[k] = sum_d A[k][d] * i[d] of the viewed tensor (ROW reads: only the row dims have columns). */
typedef struct th_fz_read {
  const th_value *root;
  const th_value *v; /* the value read: root, or the last view's output */
  int nest;
  th_fz_level lv;
  int nviews;
  th_fz_view views[TH_FZ_MAX_VIEWS];
  int64_t A[TH_MAX_DIMS][TH_MAX_DIMS];
} th_fz_read;

#define TH_FZ_REF_NONE (-1)          /* not a tensor argument */
#define TH_FZ_REF_READ(k) (-2 - (k)) /* read slot k */

typedef struct th_fz_mem {
  const th_bsym *b;
  th_fz_kind kind;
  int nest;   /* -1 for INVIEW */
  int out[2]; /* vals produced (-1: none) */
  int ref[4]; /* per argument (the first 4): a val index >= 0, TH_FZ_REF_READ(k) or TH_FZ_REF_NONE */
} th_fz_mem;

/* A loop nest over domain D (nd dims). r = 0: pointwise. Row nest (col false): the last r dims are
 * reduced, one row per index of D[0:nd-r]. Column nest (col true): the first r dims are reduced, one
 * "row" (a column) per index of the kept dims D[r:nd]; its ROW values are indexed by the flat kept
 * index, and the kernel keeps nacc float64-sized accumulators per column and thread in the launcher's
 * scratch (codegen fills nacc). */
typedef struct th_fz_nest {
  int nd, r;
  bool col;
  int nacc;
  int64_t D[TH_MAX_DIMS];
} th_fz_nest;

typedef struct th_fz_plan {
  int nmem, nval, nread, nnest;
  th_fz_mem *mem;
  th_fz_val *val;
  th_fz_read *read;
  th_fz_nest *nest;
} th_fz_plan;

/* True if b may be a region member at all (partition.c's file comment): a prim without effects from the
 * fusible set, tensor operands, constants as the other arguments. */
bool th_fuser_is_fusible(const th_bsym *b);
/* th_fuser_is_fusible, or an elementwise prim whose tensor operands may also be 0-d under a larger output
 * (what a region's plan may hold; the broadcast sinking of passes.c asks the stricter question) */
bool th_fuser_is_fusible_member(const th_bsym *b);

/* Whether an op's C template (ops.def cexpr) calls a function other than the prelude's exact th_fz_
 * helpers: a libm or mathlib call (tens of instructions, rounding of its own). */
bool th_fuser_template_calls(const char *cexpr);
/* A template that divides or calls a function (softmax's exp): worth keeping in a row buffer rather than
 * recomputing, and not worth recomputing per element of a broadcast (passes.c's sinking). */
bool th_fuser_template_expensive(const char *cexpr);

/* Effects nothing is moved across (copy_, update_aliases, in-place, random, DONT_DCE, the return). */
bool th_fuser_is_effect(const th_bsym *b);
/* Whether b reads v (arguments and keyword arguments, collections included). */
bool th_fuser_bsym_reads(const th_bsym *b, const th_value *v);

/* Classifies the members of one region (bsyms in program order; what they use and do not produce is a
 * region input) into nests. TH_OK: *plan filled (plan may be NULL to only check); TH_ERR_VALUE (no
 * message set): they cannot form one region the codegen can lower; TH_ERR_NOMEM. Free with
 * th_fz_plan_free. */
th_status th_fz_plan_build(const th_bsym *const *members, int n, th_fz_plan *plan);
void th_fz_plan_free(th_fz_plan *p);

/* ---- partition.c ----------------------------------------------------------------------------------- */
/* Partitions et (an execution trace) into a new trace: fusible bsyms claimed by one of the executors
 * `after` (nafter names; NULL = any) are grouped by `strat`; regions with at least two computing members
 * become fusion bsyms claimed by "fuser". Everything else is copied as it is. */
th_status th_fuser_partition(const th_trace *et, th_fuser_strategy strat, const char *const *after, int nafter,
                             th_trace **out);

/* ---- loopir.c -------------------------------------------------------------------------------------- */
typedef struct th_ir th_ir;         /* a node */
typedef struct th_ir_ctx th_ir_ctx; /* owns every node and string of one translation unit */

typedef enum { TH_IR_SERIAL, TH_IR_SIMD, TH_IR_PARALLEL, TH_IR_PARALLEL_SIMD } th_ir_loop_kind;

th_ir_ctx *th_ir_ctx_new(void);
void th_ir_ctx_free(th_ir_ctx *c);
/* printf into the context (strings of the nodes); NULL only after an allocation failure. */
const char *th_ir_str(th_ir_ctx *c, const char *fmt, ...);
/* A scope `{ ... }` (braces = false: statements appended to the enclosing block as they are). */
th_ir *th_ir_block(th_ir_ctx *c, th_ir *parent, bool braces);
/* A scope run by an OpenMP team: `#pragma omp parallel clauses` then `{ ... }` (clauses may be NULL). */
th_ir *th_ir_parallel(th_ir_ctx *c, th_ir *parent, const char *clauses);
/* `for (int64_t var = lo; var < hi; var++)` with its pragma: SIMD `omp simd`, PARALLEL `omp parallel
 * for schedule(static)`, PARALLEL_SIMD both; `clauses` (reduction(...), may be NULL) and `par_if` (the
 * OpenMP if clause of the parallel kinds, may be NULL) follow. Returns the loop (append to its body). */
th_ir *th_ir_loop(th_ir_ctx *c, th_ir *parent, th_ir_loop_kind kind, const char *var, const char *lo, const char *hi,
                  const char *clauses, const char *par_if);
/* `if (cond) { then } else { els }`: *els (when not NULL) receives the else block. */
th_ir *th_ir_if(th_ir_ctx *c, th_ir *parent, const char *cond, th_ir **els);
/* `const type name = expr;` / `type name = expr;` / `name op expr;` / one statement `text;` / a comment. */
void th_ir_let(th_ir_ctx *c, th_ir *parent, const char *type, const char *name, const char *expr);
void th_ir_var(th_ir_ctx *c, th_ir *parent, const char *type, const char *name, const char *expr);
void th_ir_set(th_ir_ctx *c, th_ir *parent, const char *name, const char *op, const char *expr);
void th_ir_stmt(th_ir_ctx *c, th_ir *parent, const char *text);
void th_ir_comment(th_ir_ctx *c, th_ir *parent, const char *text);
/* A function `void name(params) { body }`: returns the body block. */
th_ir *th_ir_func(th_ir_ctx *c, const char *name, const char *params);
/* The number of functions in the context. */
int th_ir_nfuncs(const th_ir_ctx *c);
/* Prints every function of the context, in order, into sb (two-space indentation), one blank line
 * between two. fn_at (NULL, or th_ir_nfuncs(c) entries): the offset in sb where each function starts. */
void th_ir_emit(const th_ir_ctx *c, th_strbuf *sb, size_t *fn_at);
bool th_ir_failed(const th_ir_ctx *c); /* an allocation failed somewhere */

/* ---- codegen.c ------------------------------------------------------------------------------------- */
/* One slot of a region at run time: an input read (the region input bound to `v`, viewed through
 * `views`, strides per domain dim from A) or an output (allocated contiguous; FULL outputs are written
 * with the per-domain-dim element strides `ostr`, ROW outputs at the flat row index). */
typedef struct th_fuser_slot {
  const th_value *v; /* input: the region input (view chain root); output: the output value */
  bool is_out;
  int nest;
  th_fz_level lv;
  int nviews;
  th_fz_view views[TH_FZ_MAX_VIEWS];
  int vdim;                            /* rank of the viewed input */
  int64_t A[TH_MAX_DIMS][TH_MAX_DIMS]; /* input: [view dim][domain dim] */
  int64_t ostr[TH_MAX_DIMS];           /* FULL output: element strides per domain dim */
} th_fuser_slot;

typedef void (*th_fuser_fn)(char *const *ptrs, const int64_t *dims, const int64_t *strides);

typedef struct th_fuser_region {
  char name[32]; /* fusion0 (a copy: the partition trace is freed before the program runs) */
  int nnest;
  th_fz_nest *nests;
  int nslots; /* every nest's reads, then its outputs, nest by nest */
  th_fuser_slot *slots;
  int nconst;      /* the integer constants of the members, passed after the thread count in S: */
  int64_t *kconst; /* a kernel's source does not depend on them (a size a trace baked in, as T) */
  th_fuser_fn fn;
} th_fuser_region;

/* Lowers region bsym b (made by th_fuser_partition) into a C function named after it, appended to the
 * context (nothing is appended on error); *r receives the slot and nest tables the launcher needs (free
 * with th_fuser_region_clear). The function is `void fusionN(char *const *P, const int64_t *S, const
 * int64_t *T)`: P[k] the element [0, ...] of slot k, S the domains of the nests one after the other,
 * then the thread count, then r->kconst; T the element strides of slot k at T + k * TH_MAX_DIMS (one
 * per domain dim of its nest). */
th_status th_fuser_codegen(const th_bsym *b, th_ir_ctx *ctx, th_fuser_region *r);
void th_fuser_region_clear(th_fuser_region *r);
/* The translation unit of a context: <tgmath.h>, the embedded prelude, the emitted functions. *body_at
 * (may be NULL) receives the offset where the functions start (golden tests compare from there);
 * fn_at (NULL, or th_ir_nfuncs(ctx) entries) the offset where each function starts, for
 * th_fuser_compile. The caller frees the result with th_free. NULL on allocation failure. */
char *th_fuser_unit_source(const th_ir_ctx *ctx, size_t *body_at, size_t *fn_at);

/* The embedded prelude (generated/fuser_prelude.c, cmake/embed_prelude.cmake). */
extern const unsigned char th_fuser_prelude[];
extern const size_t th_fuser_prelude_len;

/* ---- compile.c ------------------------------------------------------------------------------------- */
/* Compiles a translation unit (or finds it in the disk cache) and loads it: *handle for th_fuser_symbol.
 * fn_at[0..nfn) (ascending offsets into source; nfn 0: none) are where its functions start, as
 * th_fuser_unit_source gives them: on a cache miss with more than one function and more than one job
 * (THUNDER_FUSER_JOBS, else the CPUs this process may run on; at most TH_FUSER_MAX_JOBS), the functions
 * are split into that many parts of about equal source size, each part (the text before fn_at[0], then
 * its functions) is compiled to an object by its own compiler process, all at once, and the objects are
 * linked into the one shared object the cache keeps. The cache key is the whole source's (with the
 * compiler, its flags and the host CPU), however it was built; a cache directory this process may not
 * write serves hits, and a miss there is built privately and not kept. A hit marks the entry used (its
 * mtime); a build then bounds the cache to $THUNDER_CACHE_MAX_MB MiB (default TH_FUSER_CACHE_MB, 0: no
 * bound) by removing the least recently used kernels, sparing those used in the last
 * TH_FUSER_CACHE_GRACE_S seconds. Errors: THUNDER_FUSER_JOBS or THUNDER_CACHE_MAX_MB not
 * an integer in range (TH_ERR_VALUE, on every call), no compiler (TH_ERR_NOT_IMPLEMENTED naming $CC and
 * the executors to use instead), a failing compile, link or load (TH_ERR_RUNTIME with the compiler's first
 * lines). */
#define TH_FUSER_MAX_JOBS 8
#define TH_FUSER_CACHE_MB 1024
#define TH_FUSER_CACHE_GRACE_S 60
#define TH_FUSER_CACHE_RESCAN_S 3600
th_status th_fuser_compile(const char *source, int nfn, const size_t *fn_at, void **handle);
/* The function `name` of a loaded unit, or NULL. */
th_fuser_fn th_fuser_symbol(void *handle, const char *name);
/* Counters for tests: compiler runs and disk-cache hits in this process. */
long th_fuser_stat_compiles(void);
long th_fuser_stat_cache_hits(void);
/* SHA-256 of data (exposed for a known-answer test). */
void th_fuser_sha256(const void *data, size_t n, uint8_t out[32]);

/* ---- fuser.c --------------------------------------------------------------------------------------- */
typedef struct th_fuser_set th_fuser_set;
/* Partitions (strategy from THUNDER_FUSER_STRATEGY=consecutive|dataflow, default dataflow), generates one
 * translation unit for every region of et and compiles it; *out the new trace, *set its regions (NULL
 * when none; then no compiler is needed). execs[fuser_at] is the fuser; bsyms claimed by executors after
 * it may be fused. dump_dir (or $THUNDER_DUMP_FUSIONS when NULL): where the unit's source is written as
 * <fn_name>-<first 12 hex digits of its SHA-256>.c (NULL/empty: nowhere). */
th_status th_fuser_pass(const th_trace *et, const th_executor_desc *const *execs, int nexecs, int fuser_at,
                        const char *dump_dir, th_trace **out, th_fuser_set **set);
const th_fuser_region *th_fuser_set_find(const th_fuser_set *s, const char *name);
void th_fuser_set_free(th_fuser_set *s);

#endif
