/* vjp.h — vector-Jacobian product (vjp) rules: the backward facet of an op (Thunder's register_grad /
 * augmented_forward + backward pairs; PyTorch's derivatives.yaml), and the registry the grad transform
 * (src/transforms/grad.c) reads them from.
 *
 * Rules live in the op's family file, next to its meta or decomposition (`<op>_vjp`), and each family
 * file exports one registration array (th_vjp_table_<family>, listed in vjp.c), so ops.def stays one
 * row per op with no gradient column. An op has one of:
 *   TH_VJP_RULE     a rule function (below);
 *   TH_VJP_NONDIFF  no gradient flows through it: its outputs are not floating (comparisons, argmax,
 *                   bitwise ops, isfinite) or it has no tensor inputs (full, iota, uniform);
 *   no entry        a torch-level op gets its gradient through its decomposition into prims (the grad
 *                   transform flattens it); a prim without an entry is an error (TH_ERR_NOT_IMPLEMENTED).
 * Zero-gradient ops whose outputs are floating (floor, ceil, round, trunc, sign) have rules that give
 * zeros, as PyTorch's autograd does.
 *
 * A rule receives the forward bound symbol `b` (its bound arguments, one per schema parameter, and its
 * outputs: values of the forward trace) and `cts`, the cotangent of each output value of b, in the
 * order th_arg_foreach_value visits b->out (TH_ARG_NONE for an output no gradient reached: only
 * multi-output ops see one; a rule is not called when no output has a cotangent). It records into `tr`
 * (the backward trace being built, at its top level) the ops computing the cotangent of each input, and
 * sets grads[i] (b->nargs entries, all TH_ARG_NONE on entry) for argument i: a tensor VALUE with the
 * argument's dtype and shape (PyTorch's conventions: a broadcast operand's gradient summed back to its
 * shape; a convert_element_type's cotangent converted back), a TUPLE with one entry per tensor for a
 * Tensor[] argument (cat), or NONE (no gradient: a number, an integer tensor, an index). Reading a
 * forward value in a rule makes the grad transform save it for the backward. Errors are the recording
 * ops' errors, or TH_ERR_NOT_IMPLEMENTED with a message naming the op. */
#ifndef TH_VJP_H
#define TH_VJP_H

#include "ops/torch/torch_util.h"

typedef th_status (*th_vjp_fn)(th_trace *tr, const th_bsym *b, const th_arg *cts, th_arg *grads);

typedef enum th_vjp_kind { TH_VJP_RULE = 1, TH_VJP_NONDIFF } th_vjp_kind;

typedef struct th_vjp_entry {
  th_op_id op;
  th_vjp_kind kind;
  th_vjp_fn fn; /* TH_VJP_RULE */
} th_vjp_entry;

/* The registration arrays of the family files (and their lengths). */
#define TH_VJP_TABLE(family)                                                                                           \
  extern const th_vjp_entry th_vjp_table_##family[];                                                                   \
  extern const int th_vjp_table_##family##_n;
TH_VJP_TABLE(prims_elementwise)
TH_VJP_TABLE(prims_creation)
TH_VJP_TABLE(prims_shape)
TH_VJP_TABLE(prims_reduction)
TH_VJP_TABLE(prims_linalg)
TH_VJP_TABLE(prims_memory)
TH_VJP_TABLE(torch_elementwise)
TH_VJP_TABLE(torch_reduction)
TH_VJP_TABLE(torch_nn)
TH_VJP_TABLE(torch_shape)
TH_VJP_TABLE(torch_scaled_mm)
TH_VJP_TABLE(torch_float8_linear)

/* conv */
TH_VJP_TABLE(prims_conv)

/* norm */
TH_VJP_TABLE(torch_norm)
TH_VJP_TABLE(torch_reduction_more)

/* pool */
TH_VJP_TABLE(prims_pool)

/* index */
TH_VJP_TABLE(prims_index)

/* scan */
TH_VJP_TABLE(prims_scan)

/* attention */
TH_VJP_TABLE(prims_attention)

/* random */
TH_VJP_TABLE(torch_random)

/* stat */
TH_VJP_TABLE(prims_stat)
TH_VJP_TABLE(torch_stat)

TH_VJP_TABLE(prims_linalg_lapack)

#undef TH_VJP_TABLE

/* The entry of op `id`, or NULL (no entry: decompose, see above). Built once, thread-safe. */
const th_vjp_entry *th_vjp_get(th_op_id id);

/* ---- helpers for rules ------------------------------------------------------------------------------ */

/* g reduced to the shape of `like`, a tensor operand that was broadcast to g's shape: g itself when
 * the shapes agree, else the sum of g over the dims `like` was broadcast along (all of them for a CPU
 * 0-dim tensor operand, which the prims exempt from the shape rule), reshaped to like's shape. *out is
 * NONE when `like` is not a tensor. */
th_status th_vjp_sum_to(th_trace *tr, th_arg g, const th_arg *like, th_arg *out);
/* zeros like tensor v (dtype, shape, device): ltorch.zeros_like. */
th_status th_vjp_zeros_like(th_trace *tr, const th_value *v, th_arg *out);
/* The first output value of b (its only one for most prims). */
th_arg th_vjp_out(const th_bsym *b);
/* The one-hot matrix of a 1-D integer tensor idx (k entries) over ncls classes, in `dtype`: (k, ncls)
 * with oh[i, j] = (idx[i] == j) when idx_dim == 0, its transpose (ncls, k) when idx_dim == 1 (iota,
 * broadcast_in_dim, eq, convert; prims/shape.c). Gradients of gathers are matmuls with it. */
th_status th_vjp_one_hot(th_trace *tr, th_arg idx, int64_t ncls, int idx_dim, th_dtype dtype, th_arg *out);
/* True if argument a is a floating tensor (one a gradient can flow to). */
bool th_vjp_is_float_tensor(const th_arg *a);

#endif
