/* fuser.c — the "fuser" executor: the fusion pass over an execution trace (partition, codegen,
 * compile) and the run-time kernel of a region (one program step).
 *
 * Environment: THUNDER_FUSER_STRATEGY=consecutive|dataflow (default dataflow) picks the partition
 * strategy; THUNDER_DUMP_FUSIONS=dir writes each region's C source to dir/<fusionN>.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executors/fuser/fuser.h"

struct th_fuser_set {
  int n;
  th_fuser_region *r;
};

/* Runs region b: binds each input slot's base and strides (broadcast slots through their map), allocates
 * the outputs, calls the compiled function. */
static th_status fuser_kernel(th_rt_env *env, const th_bsym *b) {
  const th_fuser_region *r = th_rt_step_data(env);
  if (!r || !r->fn) return th_error(TH_ERR_RUNTIME, "%s: no compiled kernel", b->sym->qualname);
  int ns = r->nin + r->nout, nd = r->ndim;
  char *ptrs_s[16];
  int64_t st_s[16 * TH_MAX_DIMS];
  char **ptrs = ns <= 16 ? ptrs_s : th_malloc(sizeof(char *) * (size_t)ns);
  int64_t *st = ns <= 16 ? st_s : th_malloc(sizeof(int64_t) * (size_t)(ns * (nd ? nd : 1)));
  if (!ptrs || !st) {
    if (ptrs != ptrs_s) th_free(ptrs);
    if (st != st_s) th_free(st);
    return th_error(TH_ERR_NOMEM, "out of memory");
  }
  th_status s = TH_OK;
  int64_t shape[TH_MAX_DIMS];
  for (int k = 0; k < ns && s == TH_OK; k++) {
    const th_fuser_slot *sl = &r->slots[k];
    th_tensor *t;
    if (k < r->nin) {
      th_arg a = th_arg_value((th_value *)sl->v);
      t = th_rt_tensor(env, &a);
      if (!t) s = th_error(TH_ERR_RUNTIME, "input %s is not bound", sl->v->name ? sl->v->name : "?");
    } else {
      t = th_rt_alloc_output(env, sl->v);
      if (!t) s = th_last_status();
      else memcpy(shape, sl->v->shape, sizeof(int64_t) * (size_t)nd);
    }
    if (s != TH_OK) break;
    ptrs[k] = th_tensor_data(t);
    for (int d = 0; d < nd; d++)
      st[k * nd + d] = !sl->bcast ? t->strides[d] : sl->map[d] >= 0 ? t->strides[sl->map[d]] : 0;
  }
  if (s == TH_OK) {
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) numel *= shape[d];
    if (numel > 0) r->fn(ptrs, shape, st);
  }
  if (ptrs != ptrs_s) th_free(ptrs);
  if (st != st_s) th_free(st);
  return s;
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

static void dump(const th_fuser_region *r) {
  const char *dir = getenv("THUNDER_DUMP_FUSIONS");
  if (!dir || !dir[0]) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.c", dir, r->name);
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fputs(r->source, f);
  fclose(f);
}

th_status th_fuser_pass(const th_trace *et, const th_executor_desc *const *execs, int nexecs, int fuser_at,
                        th_trace **out, th_fuser_set **set) {
  *out = NULL;
  *set = NULL;
  const char *after[16];
  int nafter = 0;
  for (int i = fuser_at + 1; i < nexecs && nafter < 16; i++) after[nafter++] = execs[i]->name;
  const char *sv = getenv("THUNDER_FUSER_STRATEGY");
  th_fuser_strategy strat = sv && !strcmp(sv, "consecutive") ? TH_FUSER_CONSECUTIVE : TH_FUSER_DATAFLOW;
  th_trace *nt = NULL;
  TH_TRY(th_fuser_partition(et, strat, after, nafter, &nt));
  int nreg = 0;
  for (int i = 0; i < nt->bsyms.n; i++)
    if (((th_bsym *)nt->bsyms.items[i])->sym->id == TH_OP_DYNAMIC) nreg++;
  th_fuser_set *s = th_calloc(1, sizeof *s);
  if (s) s->r = th_calloc((size_t)(nreg ? nreg : 1), sizeof(th_fuser_region));
  if (!s || !s->r) {
    th_fuser_set_free(s);
    th_trace_free(nt);
    return th_error(TH_ERR_NOMEM, "out of memory in the fusion pass");
  }
  th_status st = TH_OK;
  for (int i = 0; i < nt->bsyms.n && st == TH_OK; i++) {
    const th_bsym *b = nt->bsyms.items[i];
    if (b->sym->id != TH_OP_DYNAMIC) continue;
    th_fuser_region *r = &s->r[s->n];
    st = th_fuser_codegen(b, r);
    if (st != TH_OK) break;
    s->n++;
    dump(r);
    void *fn = NULL;
    st = th_fuser_compile(r->source, &fn);
    memcpy(&r->fn, &fn, sizeof fn); /* dlsym's object pointer to the function */
  }
  if (st != TH_OK) {
    th_fuser_set_free(s);
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  *set = s;
  return TH_OK;
}
