/* remat.h — rematerialization for the grad transform (internal; src/transforms/remat.c): which
 * forward values the backward recomputes instead of reading them from saved_for_backward.
 *
 * The model is Thunder's rematerialization (thunder/core/rematerialization.py): among the forward
 * values the backward reads, those computable by cheap, fusible ops
 * (elementwise, convert_element_type, broadcast_in_dim / reshape / transpose / squeeze / slice /
 * stride_order, clone, full, iota — never matmul, linear, reductions, random, in-place or data-moving
 * ops) from other forward values are recomputed in the backward, and the set that is saved is a
 * minimum cut, by bytes, between the values that cannot be recomputed and the backward's reads. */
#ifndef TH_REMAT_H
#define TH_REMAT_H

#include "core/ir.h"

/* Rewrites bwd (a backward body: top-level bsyms ending with its return, no inputs yet) so that it
 * reads a minimum-bytes set of the forward values: needed[0..nneeded) are the forward values bwd reads
 * now (each once; tensors and number proxies, every one defined by fwd or an input of fwd); fwd is the
 * forward trace (its inputs and top-level bsyms, before its return is set). Each forward bsym that is
 * recomputed is copied into bwd right before the first bsym that needs it, its outputs replaced by new
 * values named bw_<name> (Thunder's name for a value recomputed in the backward), and every use in bwd
 * is rewritten. fwd is not changed. Afterwards the forward values bwd reads are the chosen set (the
 * caller collects them again). *nrecomputed (may be NULL) receives the number of bsyms copied.
 * Errors: TH_ERR_NOMEM; TH_ERR_RUNTIME for an inconsistent cut (a bug). */
th_status th_grad_remat(const th_trace *fwd, th_trace *bwd, int nneeded, th_value *const *needed, int *nrecomputed);

/* The bytes a saved value costs: numel x element size for a tensor, 8 for a number proxy. */
int64_t th_grad_value_bytes(const th_value *v);

#endif
