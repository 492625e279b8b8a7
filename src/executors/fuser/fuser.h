/* fuser.h — the CPU fusion executor "fuser" (internal): partition, codegen, compile-and-cache.
 *
 * After the execution transform has claimed every bsym, th_fuser_pass groups fusible top-level bsyms
 * (pointwise prims with a cexpr template, prims.convert_element_type, prims.broadcast_in_dim of a
 * region input, all with the region's one output shape) into fusion regions: bsyms of the dynamic
 * symbols fusion0, fusion1, ... with the fused bsyms as subsymbols and a LIST of outputs (core/printer.h),
 * claimed by "fuser". Each region becomes one C function (codegen.c), compiled with $CC into a shared
 * object kept in a disk cache (compile.c), and runs as one program step. */
#ifndef TH_FUSER_H
#define TH_FUSER_H

#include <stdint.h>

#include "core/ir.h"
#include "core/core.h"
#include "executors/kernel.h"

typedef enum { TH_FUSER_DATAFLOW = 0, TH_FUSER_CONSECUTIVE = 1 } th_fuser_strategy;

/* The fuser executor's descriptor (one impl: TH_OP_DYNAMIC, the region kernel). */
extern const th_executor_desc th_fuser_executor;

/* True if b may join a region (partition.c's file comment): a pointwise prim without effects, no fp8,
 * no number proxies. Which executor claimed it is checked by th_fuser_partition. */
bool th_fuser_is_fusible(const th_bsym *b);

/* Partitions et (an execution trace) into a new trace: fusible bsyms claimed by one of the executors
 * `after` (nafter names; NULL = any) are grouped by `strat`; regions of at least two bsyms become
 * fusion bsyms claimed by "fuser". Everything else is copied as it is. */
th_status th_fuser_partition(const th_trace *et, th_fuser_strategy strat, const char *const *after, int nafter,
                             th_trace **out);

/* ---- codegen ------------------------------------------------------------------------------------- */
/* One kernel argument: a region input (possibly read through broadcast_in_dim index math: map[d] is
 * the input dim behind output dim d, -1 for a broadcast dim), or a region output. */
typedef struct th_fuser_slot {
  const th_value *v;
  bool bcast;
  int map[TH_MAX_DIMS];
} th_fuser_slot;

typedef struct th_fuser_region {
  char name[32]; /* fusion0 (a copy: the partition trace is freed before the program runs) */
  int ndim;
  int nin, nout;
  th_fuser_slot *slots; /* nin inputs, then nout outputs */
  char *source;         /* th_malloc'd C source */
  void (*fn)(char **ptrs, const int64_t *shape, const int64_t *strides);
} th_fuser_region;

/* Generates the C source of region bsym b (a fusion region made by th_fuser_partition) into *r
 * (slots allocated with th_malloc; free with th_fuser_region_clear). The function is named
 * fusion_kernel(char **ptrs, const int64_t *shape, const int64_t *strides): ptrs[k] the base of slot
 * k (already offset), strides[k * ndim + d] its element stride for dim d. */
th_status th_fuser_codegen(const th_bsym *b, th_fuser_region *r);
void th_fuser_region_clear(th_fuser_region *r);

/* ---- compile.c ----------------------------------------------------------------------------------- */
/* Compiles source (or finds it in the disk cache) and returns its fusion_kernel. */
th_status th_fuser_compile(const char *source, void **fn);
/* Counters for tests: compiler runs and disk-cache hits in this process. */
long th_fuser_stat_compiles(void);
long th_fuser_stat_cache_hits(void);
/* SHA-256 of data (exposed for a known-answer test). */
void th_fuser_sha256(const void *data, size_t n, uint8_t out[32]);

/* ---- the set of a program's regions (fuser.c) ---------------------------------------------------- */
typedef struct th_fuser_set th_fuser_set;
/* Partitions (strategy from THUNDER_FUSER_STRATEGY=consecutive|dataflow, default dataflow), generates
 * and compiles every region of et; *out the new trace, *set its regions (NULL when none). execs[fuser_at]
 * is the fuser; bsyms claimed by executors after it may be fused. */
th_status th_fuser_pass(const th_trace *et, const th_executor_desc *const *execs, int nexecs, int fuser_at,
                        th_trace **out, th_fuser_set **set);
const th_fuser_region *th_fuser_set_find(const th_fuser_set *s, const char *name);
void th_fuser_set_free(th_fuser_set *s);

#endif
