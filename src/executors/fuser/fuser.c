/* fuser.c — the "fuser" executor: the fusion pass over an execution trace (partition, one translation
 * unit of every region's code, compiled in parallel parts: compile.c) and the run-time kernel of a region
 * (one program step).
 *
 * The launcher binds each slot: an input read takes the tensor bound to its region input and applies the
 * read's view chain to (shape, strides, offset) with the eager executor's rules (a reshape the strides
 * do not allow is materialized as a contiguous copy, as eager's reshape does), then its element strides
 * per domain dim from the read's coordinate map; an output is allocated contiguous and written through
 * its store map (FULL) or at the flat row index (ROW). A region with column nests gets a scratch buffer
 * for their per-thread accumulators (P after the slots; its thread count in S after the domains). Then
 * the compiled function runs.
 *
 * Environment: THUNDER_FUSER_STRATEGY=consecutive|dataflow (default dataflow) picks the partition
 * strategy; THUNDER_DUMP_FUSIONS=dir (or th_compile_options.dump_dir) writes each program's unit. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <omp.h>

#include "executors/eager/eager_internal.h"
#include "executors/fuser/fuser.h"
#include "runtime/runtime.h"

struct th_fuser_set {
  int n;
  th_fuser_region *r;
  void *handle; /* the loaded unit (stays loaded for the process) */
};

/* ---- input views at launch ------------------------------------------------------------------------------ */
typedef struct {
  th_tensor *base;  /* the tensor the view is taken of (borrowed, or `owned`) */
  th_tensor *owned; /* a materialized copy, released after the call */
  int ndim;
  int64_t shape[TH_MAX_DIMS], strides[TH_MAX_DIMS], offset; /* offset relative to base's element [0...] */
} lview;

static th_status apply_view(lview *w, const th_fz_view *op) {
  int64_t shape[TH_MAX_DIMS], strides[TH_MAX_DIMS];
  int n = 0;
  switch (op->op) {
    case TH_OP_prims_broadcast_in_dim:
      n = op->n;
      for (int d = 0; d < n; d++) shape[d] = op->a[d], strides[d] = 0;
      for (int k = 0; k < op->m && k < w->ndim; k++)
        if (w->shape[k] == op->a[op->b[k]]) strides[op->b[k]] = w->strides[k];
      break;
    case TH_OP_prims_transpose:
      n = w->ndim;
      for (int d = 0; d < n; d++) shape[d] = w->shape[op->a[d]], strides[d] = w->strides[op->a[d]];
      break;
    case TH_OP_prims_squeeze: {
      bool drop[TH_MAX_DIMS] = {false};
      for (int k = 0; k < op->n; k++) drop[op->a[k] < 0 ? op->a[k] + w->ndim : op->a[k]] = true;
      for (int d = 0; d < w->ndim; d++)
        if (!drop[d]) shape[n] = w->shape[d], strides[n++] = w->strides[d];
      break;
    }
    case TH_OP_prims_slice_prim:
      n = w->ndim;
      for (int d = 0; d < n; d++) {
        int64_t span = op->b[d] - op->a[d];
        shape[d] = span / op->c[d] + (span % op->c[d] != 0);
        strides[d] = shape[d] > 1 ? w->strides[d] * op->c[d] : w->strides[d];
        if (shape[d] > 0) w->offset += op->a[d] * w->strides[d];
      }
      break;
    case TH_OP_prims_reshape:
      n = op->n;
      memcpy(shape, op->a, sizeof(int64_t) * (size_t)n);
      if (!th_eg_view_strides(w->ndim, w->shape, w->strides, n, shape, strides)) {
        /* not a view: a contiguous copy, as eager's reshape */
        th_tensor *v = th_tensor_view(w->base, w->ndim, w->shape, w->strides, w->offset);
        th_tensor *c = v ? th_tensor_contiguous_copy(v) : NULL;
        th_tensor_release(v);
        if (!c) return th_last_status();
        th_tensor_release(w->owned);
        w->owned = w->base = c;
        w->offset = 0;
        th_rt_contiguous_strides(n, shape, strides);
      }
      break;
    default: return TH_OK; /* stride_order: the same elements */
  }
  w->ndim = n;
  memcpy(w->shape, shape, sizeof(int64_t) * (size_t)n);
  memcpy(w->strides, strides, sizeof(int64_t) * (size_t)n);
  return TH_OK;
}

/* Runs region b. */
static th_status fuser_kernel(th_rt_env *env, const th_bsym *b) {
  const th_fuser_region *r = th_rt_step_data(env);
  if (!r || !r->fn) return th_error(TH_ERR_RUNTIME, "%s: no compiled kernel", b->sym->qualname);
  int ns = r->nslots;
  char *ptrs_s[33];
  int64_t st_s[32 * TH_MAX_DIMS], dims_s[8 * TH_MAX_DIMS + 1 + 16];
  th_tensor *owned_s[32];
  /* ptrs[ns]: the column nests' scratch; dims after the nests' domains: its threads' worth */
  char **ptrs = ns <= 32 ? ptrs_s : th_malloc(sizeof(char *) * (size_t)(ns + 1));
  int64_t *st = ns <= 32 ? st_s : th_calloc((size_t)ns * TH_MAX_DIMS, sizeof(int64_t));
  th_tensor **owned = ns <= 32 ? owned_s : th_calloc((size_t)ns, sizeof(th_tensor *));
  /* dims: the nests' domains, the thread count, the integer constants */
  int64_t *dims = r->nnest <= 8 && r->nconst <= 16
                    ? dims_s
                    : th_malloc(sizeof(int64_t) * (TH_MAX_DIMS * (size_t)r->nnest + 1 + (size_t)r->nconst));
  void *scratch = NULL;
  th_status s = TH_OK;
  if (!ptrs || !st || !owned || !dims) {
    s = th_error(TH_ERR_NOMEM, "out of memory");
    goto done;
  }
  int off = 0;
  size_t per_thread = 0; /* bytes of accumulators of the largest column nest, per thread */
  for (int n = 0; n < r->nnest; n++) {
    const th_fz_nest *N = &r->nests[n];
    memcpy(dims + off, N->D, sizeof(int64_t) * (size_t)N->nd);
    off += N->nd;
    if (N->col) {
      size_t ncols = 1;
      for (int d = N->r; d < N->nd; d++) ncols *= (size_t)N->D[d];
      if ((size_t)N->nacc * ncols * sizeof(double) > per_thread) per_thread = (size_t)N->nacc * ncols * sizeof(double);
    }
  }
  /* one accumulator row per thread, up to 64 MiB in all (beyond that the column nests run on one thread) */
  int64_t nt = omp_get_max_threads();
  if (nt < 1 || (per_thread && (size_t)nt * per_thread > ((size_t)64 << 20))) nt = 1;
  dims[off] = nt;
  if (r->nconst) memcpy(dims + off + 1, r->kconst, sizeof(int64_t) * (size_t)r->nconst);
  ptrs[ns] = NULL;
  if (per_thread && !(scratch = th_malloc((size_t)nt * per_thread))) {
    s = th_error(TH_ERR_NOMEM, "%s: out of memory (%zu bytes of column accumulators)", b->sym->qualname,
                 (size_t)nt * per_thread);
    goto done;
  }
  ptrs[ns] = scratch;
  for (int k = 0; k < ns; k++) owned[k] = NULL;
  for (int k = 0; k < ns && s == TH_OK; k++) {
    const th_fuser_slot *sl = &r->slots[k];
    const th_fz_nest *N = &r->nests[sl->nest];
    int64_t *t = st + (size_t)k * TH_MAX_DIMS;
    memset(t, 0, sizeof(int64_t) * TH_MAX_DIMS);
    if (sl->is_out) {
      th_tensor *o = th_rt_alloc_output(env, sl->v);
      if (!o) {
        s = th_last_status();
        break;
      }
      ptrs[k] = th_tensor_data(o);
      if (sl->lv == TH_FZ_FULL) memcpy(t, sl->ostr, sizeof(int64_t) * (size_t)N->nd);
      continue;
    }
    th_arg a = th_arg_value((th_value *)sl->v);
    th_tensor *in = th_rt_tensor(env, &a);
    if (!in) {
      s = th_error(TH_ERR_RUNTIME, "input %s is not bound", sl->v->name ? sl->v->name : "?");
      break;
    }
    lview w = {in, NULL, in->ndim, {0}, {0}, 0};
    memcpy(w.shape, in->shape, sizeof w.shape);
    memcpy(w.strides, in->strides, sizeof w.strides);
    for (int v = 0; v < sl->nviews && s == TH_OK; v++) s = apply_view(&w, &sl->views[v]);
    owned[k] = w.owned;
    if (s != TH_OK) break;
    ptrs[k] = (char *)th_tensor_data(w.base) + w.offset * (int64_t)th_dtype_size(sl->v->dtype);
    for (int d = 0; d < N->nd; d++)
      for (int j = 0; j < sl->vdim && j < w.ndim; j++) t[d] += sl->A[j][d] * w.strides[j];
  }
  if (s == TH_OK) r->fn(ptrs, dims, st);
done:
  if (owned)
    for (int k = 0; k < ns; k++) th_tensor_release(owned[k]);
  th_free(scratch);
  if (ptrs != ptrs_s) th_free(ptrs);
  if (st != st_s) th_free(st);
  if (owned != owned_s) th_free(owned);
  if (dims != dims_s) th_free(dims);
  return s;
}

/* A fusion region: a dynamic symbol the fuser claims (other executors claim dynamic symbols too: BLAS's
 * GEMM epilogues). */
bool th_fuser_is_region(const th_bsym *b) {
  return b->sym->id == TH_OP_DYNAMIC && b->executor && !strcmp(b->executor, th_fuser_executor.name);
}

static const th_operator_impl fuser_impls[] = {{TH_OP_DYNAMIC, fuser_kernel, NULL}};
const th_executor_desc th_fuser_executor = {"fuser", 1, fuser_impls};

const th_fuser_region *th_fuser_set_find(const th_fuser_set *s, const char *name) {
  for (int i = 0; s && i < s->n; i++)
    if (!strcmp(s->r[i].name, name)) return &s->r[i];
  return NULL;
}

void th_fuser_set_free(th_fuser_set *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) th_fuser_region_clear(&s->r[i]);
  th_free(s->r);
  th_free(s);
}

/* The dump's header: each region's slots with the trace's names, dtypes and shapes (a comment; the compiled
 * unit has no names, so that programs whose regions differ only in names share it). NULL on OOM. */
static char *slot_table(const th_fuser_set *s) {
  th_strbuf sb;
  th_sb_init(&sb);
  th_sb_puts(&sb, "/* The regions' slots: in fusionN(P, S, T), P[k] is the first element of slot k, S the sizes of\n"
                  " * the region's nests one after the other, T + 8 * k slot k's element strides in its nest (inputs\n"
                  " * are read through the views the region applies to them).\n");
  for (int i = 0; i < s->n; i++) {
    const th_fuser_region *r = &s->r[i];
    th_sb_printf(&sb, " * %s:", r->name);
    bool col = false;
    for (int k = 0; k < r->nslots; k++) {
      const th_fuser_slot *sl = &r->slots[k];
      const th_value *v = sl->v;
      th_sb_printf(&sb, "\n *   P[%d] %-3s %s %s[", k, sl->is_out ? "out" : "in", th_value_name(v),
                   th_dtype_short(v->dtype));
      for (int d = 0; d < v->ndim; d++) th_sb_printf(&sb, d ? ", %lld" : "%lld", (long long)v->shape[d]);
      th_sb_puts(&sb, "]");
    }
    for (int n = 0; n < r->nnest; n++) col |= r->nests[n].col;
    if (col) th_sb_printf(&sb, "\n *   P[%d] the column nests' per-thread accumulators", r->nslots);
    th_sb_puts(&sb, "\n");
  }
  th_sb_puts(&sb, " */\n");
  return th_sb_take(&sb);
}

/* Writes the unit to dir/<fn_name>-<12 hex digits of its SHA-256>.c after slot_table's comment (temp file +
 * rename, so a reader never sees half a file). An explicit dump_dir that cannot be written is an error (TH_ERR_IO naming the path);
 * for $THUNDER_DUMP_FUSIONS, one warning on stderr per process and the compile goes on. */
static th_status dump(const char *opt_dir, const char *fn_name, const th_fuser_set *set, const char *source) {
  const char *dir = opt_dir ? opt_dir : getenv("THUNDER_DUMP_FUSIONS");
  if (!dir || !dir[0]) return TH_OK;
  uint8_t h[32];
  th_fuser_sha256(source, strlen(source), h);
  char path[4200], tmp[4300];
  static atomic_uint seq; /* distinct temporary names for threads of one process */
  int k = snprintf(path, sizeof path, "%s/%s-", dir, fn_name && fn_name[0] ? fn_name : "program");
  int err = 0;
  if (k < 0 || (size_t)k + 15 > sizeof path) {
    err = ENAMETOOLONG;
    snprintf(path, sizeof path, "%.64s...", dir);
  } else {
    for (int i = 0; i < 6; i++, k += 2) snprintf(path + k, 3, "%02x", h[i]);
    snprintf(path + k, sizeof path - (size_t)k, ".c");
    snprintf(tmp, sizeof tmp, "%s.tmp%ld.%u", path, (long)getpid(), atomic_fetch_add(&seq, 1u));
  }
  FILE *f = err ? NULL : fopen(tmp, "wb");
  if (!err && !f) err = errno;
  char *table = f ? slot_table(set) : NULL;
  if (f) {
    bool ok = (!table || fputs(table, f) >= 0) && fputs(source, f) >= 0;
    free(table);
    if (!ok) err = errno ? errno : EIO;
    if (fclose(f) != 0 && ok) err = errno ? errno : EIO;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) remove(tmp);
  }
  if (!err) return TH_OK;
  if (opt_dir) return th_error(TH_ERR_IO, "fuser: dump_dir: cannot write '%s': %s", path, strerror(err));
  static atomic_bool warned;
  if (!atomic_exchange(&warned, true))
    fprintf(stderr, "thunder-c: warning: THUNDER_DUMP_FUSIONS: cannot write '%s': %s (not dumping)\n", path,
            strerror(err));
  return TH_OK;
}

/* The fusion trace's provenance, as Thunder's fusion passes name theirs. */
static th_status set_provenance(th_trace *nt, double t0) {
  char pss[64];
  snprintf(pss, sizeof pss, "Fusion (took %ld milliseconds)", (long)(th_pass_clock_ms() - t0));
  return th_trace_set_provenance(nt, pss);
}

th_status th_fuser_pass(const th_trace *et, const th_executor_desc *const *execs, int nexecs, int fuser_at,
                        const char *dump_dir, th_trace **out, th_fuser_set **set) {
  *out = NULL;
  *set = NULL;
  const double t0 = th_pass_clock_ms();
  const char *after[16];
  int nafter = 0;
  for (int i = fuser_at + 1; i < nexecs && nafter < 16; i++) after[nafter++] = execs[i]->name;
  const char *sv = getenv("THUNDER_FUSER_STRATEGY");
  th_fuser_strategy strat = sv && !strcmp(sv, "consecutive") ? TH_FUSER_CONSECUTIVE : TH_FUSER_DATAFLOW;
  th_trace *nt = NULL;
  TH_TRY(th_fuser_partition(et, strat, after, nafter, &nt));
  th_status st = set_provenance(nt, t0);
  if (st != TH_OK) {
    th_trace_free(nt);
    return st;
  }
  int nreg = 0;
  for (int i = 0; i < nt->bsyms.n; i++)
    if (th_fuser_is_region(nt->bsyms.items[i])) nreg++;
  if (nreg == 0) { /* nothing to compile: no compiler needed */
    *out = nt;
    return TH_OK;
  }
  th_fuser_set *s = th_calloc(1, sizeof *s);
  if (s) s->r = th_calloc((size_t)nreg, sizeof(th_fuser_region));
  th_ir_ctx *ir = th_ir_ctx_new();
  char *source = NULL;
  size_t *fn_at = NULL;
  if (!s || !s->r || !ir) {
    st = th_error(TH_ERR_NOMEM, "out of memory in the fusion pass");
    goto done;
  }
  for (int i = 0; i < nt->bsyms.n && st == TH_OK; i++) {
    const th_bsym *b = nt->bsyms.items[i];
    if (!th_fuser_is_region(b)) continue;
    st = th_fuser_codegen(b, ir, &s->r[s->n]);
    if (st == TH_OK) s->n++;
  }
  int nfn = st == TH_OK ? th_ir_nfuncs(ir) : 0;
  if (st == TH_OK && !(fn_at = th_calloc((size_t)nfn + 1, sizeof *fn_at)))
    st = th_error(TH_ERR_NOMEM, "out of memory in the fusion pass");
  if (st == TH_OK && !(source = th_fuser_unit_source(ir, NULL, fn_at)))
    st = th_error(TH_ERR_NOMEM, "out of memory in the fusion pass");
  if (st == TH_OK) {
    st = dump(dump_dir, et->fn_name, s, source);
    if (st == TH_OK) st = th_fuser_compile(source, nfn, fn_at, &s->handle);
  }
  for (int i = 0; i < s->n && st == TH_OK; i++)
    if (!(s->r[i].fn = th_fuser_symbol(s->handle, s->r[i].name)))
      st = th_error(TH_ERR_RUNTIME, "fuser: the compiled unit has no function %s", s->r[i].name);
done:
  th_free(source);
  th_free(fn_at);
  th_ir_ctx_free(ir);
  if (st != TH_OK) {
    th_fuser_set_free(s);
    th_trace_free(nt);
    return st;
  }
  if ((st = set_provenance(nt, t0)) != TH_OK) { /* the time includes generating and compiling the code */
    th_fuser_set_free(s);
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  *set = s;
  return TH_OK;
}
