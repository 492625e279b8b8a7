/* dce.c — Dead Code Elimination as a pass: a copy of the trace in a new one of the same compilation,
 * then the elimination in place (core/dce.c, th_dce_in_place, which describes what is kept). */
#include <stdio.h>

#include "transforms/transforms.h"

th_status th_dce(const th_trace *tr, th_trace **out) {
  double t0 = th_pass_clock_ms();
  th_trace *nt = th_trace_derive(tr, tr->fn_name);
  if (!nt) return TH_ERR_NOMEM;
  th_status st = TH_OK;
  for (int i = 0; i < tr->inputs.n && st == TH_OK; i++) st = th_vec_push(nt->arena, &nt->inputs, tr->inputs.items[i]);
  for (int i = 0; i < tr->bsyms.n && st == TH_OK; i++) {
    th_bsym *b;
    st = th_bsym_clone(nt, tr->bsyms.items[i], NULL, NULL, &b);
    if (st == TH_OK) st = th_vec_push(nt->arena, &nt->bsyms, b);
  }
  nt->has_return = tr->has_return;
  nt->nfusions = tr->nfusions;
  if (st == TH_OK) st = th_dce_in_place(nt);
  if (st == TH_OK) {
    char pss[96];
    snprintf(pss, sizeof pss, "Dead Code Elimination (took %ld milliseconds)", (long)(th_pass_clock_ms() - t0));
    st = th_trace_set_provenance(nt, pss);
  }
  if (st != TH_OK) {
    if (st == TH_ERR_NOMEM && th_last_status() != TH_ERR_NOMEM)
      th_error(TH_ERR_NOMEM, "out of memory in dead code elimination");
    th_trace_free(nt);
    return st;
  }
  *out = nt;
  return TH_OK;
}
