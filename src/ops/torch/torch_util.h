/* torch_util.h — what the torch-level decompositions (the files in src/ops/torch/) share, implemented in
 * promote.c: Thunder's elementwise type promotion, broadcasting, dtype conversion, and thin wrappers
 * that record the prims (and ltorch ops) a decomposition is made of.
 *
 * The pattern every elementwise op follows (Thunder's clang._elementwise_binary_wrapper):
 *   promote (computation dtype, result dtype) -> broadcast tensors to the common shape ->
 *   convert each operand to the computation dtype -> the prim -> convert to the result dtype,
 * so bf16 + bf16 records convert(a, f32), convert(b, f32), prims.add, convert(out, bf16).
 *
 * Conventions: `op` is the qualified name of the op being decomposed ("ltorch.add"), used as the
 * prefix of error messages. Arguments are passed by value (th_arg is small); th_call copies bound
 * arguments into the trace, so int tuples built on the stack are fine as call arguments. Outputs a
 * decomposition returns as a tuple must live in the trace's arena (th_tu_tuple_out). Every function
 * returns a th_status with the message set by th_error. */
#ifndef TH_TORCH_UTIL_H
#define TH_TORCH_UTIL_H

#include "ops/meta_util.h"
#include "ops/ops_internal.h"

/* ---- type promotion (Thunder's utils.elementwise_type_promotion) --------------------------------- */

typedef enum th_tu_promo {
  TH_TU_PROMO_DEFAULT,          /* low precision computes in f32; result = promotion dtype (add) */
  TH_TU_PROMO_PRESERVE,         /* computation = result = promotion dtype (where, cat) */
  TH_TU_PROMO_INT_TO_FLOAT,     /* bool/integer promotion dtypes become float32 (sin, exp, true_divide) */
  TH_TU_PROMO_COMPLEX_TO_FLOAT, /* result is the real counterpart (abs); no complex here: = DEFAULT */
  TH_TU_PROMO_BOOL_TO_LONG,     /* bool promotion dtype becomes int64 (pow) */
  TH_TU_PROMO_ALWAYS_BOOL,      /* computation = promotion dtype, result bool (eq, lt) */
  TH_TU_PROMO_NUMBER_TO_INT     /* like DEFAULT, but number-only float inputs give int (floor, ceil) */
} th_tu_promo;

/* How strongly a type takes part in promotion: a tensor's dtype (strong), a 0-dim tensor's dtype
 * (weak), or a Python number's type (weakest; dtype is TH_BOOL, TH_I64 or TH_F64 for bool/int/float). */
typedef enum th_tu_strength { TH_TU_STRONG = 0, TH_TU_WEAK, TH_TU_NUMBER } th_tu_strength;

typedef struct th_tu_type {
  th_dtype dtype;
  th_tu_strength strength;
} th_tu_type;

/* The promotion type of an argument: a tensor (weak when 0-dim) or a number (constant or proxy). */
th_tu_type th_tu_arg_type(const th_arg *a);
/* The tensor dtype of a promotion type: its strong dtype; Python bool/int/float give bool, int64 and
 * float32 (Thunder's numbertype_to_dtype; float32 is the default dtype). */
th_dtype th_tu_tensor_dtype(th_tu_type t);
/* Thunder's pairwise lattice (exact x inexact -> the inexact one; bf16 + f16 -> f32; u8 with a signed
 * int -> i16; weak types yield to strong ones). fp8 is absent from the lattice: TH_ERR_TYPE
 * "<op>: type promotion is not defined for float8_e4m3fn tensors; fp8 tensors must be converted
 * explicitly (e.g. .to(torch.float32))". */
th_status th_tu_promote_pair(const char *op, th_tu_type a, th_tu_type b, th_tu_type *out);
/* Folds the lattice over the n arguments (NONE arguments are skipped) starting from Python bool, then
 * applies `kind` to give the computation and result types. */
th_status th_tu_promote(const char *op, int n, const th_arg *args, th_tu_promo kind, th_tu_type *computation,
                        th_tu_type *result);

/* ---- broadcasting -------------------------------------------------------------------------------- */

/* Right-aligned common shape of the tensor arguments (numbers and NONE are skipped); *ndim = -1 when
 * there is no tensor. Error (TH_ERR_RUNTIME): "<op>: Attempting to broadcast a dimension of length N!" */
th_status th_tu_broadcast_shape(const char *op, int n, const th_arg *args, int *ndim, int64_t shape[TH_MAX_DIMS]);
/* Expands a tensor to `shape` with prims.broadcast_in_dim (Thunder's clang.expand; -1 keeps a length).
 * No-op for numbers and for tensors already of that shape. Errors: fewer dims than the tensor, or a
 * dimension that is neither equal nor 1: "<op>: expand: attempting to expand a dimension of length N!" */
th_status th_tu_expand(th_trace *tr, const char *op, th_arg *x, int ndim, const int64_t *shape);
/* Broadcasts every tensor argument to the common shape (in place). CPU 0-dim tensors are left as they
 * are (Thunder's maybe_broadcast treats them as numbers; the prims exempt them from shape checks). */
th_status th_tu_broadcast(th_trace *tr, const char *op, int n, th_arg *args);

/* ---- conversion ---------------------------------------------------------------------------------- */

/* Thunder's maybe_convert_to_dtype: a tensor whose dtype differs from `dtype` gets
 * prims.convert_element_type; a constant number becomes the Python type of dtype's category (2 -> 2.0
 * for a float dtype) without recording anything; a number proxy of another Python type is converted
 * with prims.convert_element_type. Equal dtypes record nothing. */
th_status th_tu_convert(th_trace *tr, th_arg *x, th_dtype dtype);
/* The same for a promotion type (tensors get th_tu_tensor_dtype(t)). */
th_status th_tu_convert_type(th_trace *tr, th_arg *x, th_tu_type t);
/* The computation dtype of a dtype: f16/bf16 (and fp8) compute in float32; others in themselves. */
th_dtype th_tu_computation_dtype(th_dtype dt);
/* c10's ScalarType name of dt as PyTorch's messages print it ("Long", "Float", "BFloat16"); "Undefined"
 * outside the enum. Static storage. */
const char *th_tu_scalar_type_name(th_dtype dt);

/* ---- elementwise wrappers ------------------------------------------------------------------------ */

/* promote -> convert -> prim -> convert (Thunder's _elementwise_unary_wrapper). */
th_status th_tu_unary(th_trace *tr, const char *op, th_op_id prim, th_arg a, th_tu_promo kind, th_arg *out);
/* promote -> broadcast -> convert both -> prim -> convert (Thunder's _elementwise_binary_wrapper). */
th_status th_tu_binary(th_trace *tr, const char *op, th_op_id prim, th_arg a, th_arg b, th_tu_promo kind, th_arg *out);

/* ---- recording helpers ---------------------------------------------------------------------------- */

/* th_call with 1, 2 or 3 positional arguments passed by value. */
th_status th_tu_call1(th_trace *tr, th_op_id op, th_arg a, th_arg *out);
th_status th_tu_call2(th_trace *tr, th_op_id op, th_arg a, th_arg b, th_arg *out);
th_status th_tu_call3(th_trace *tr, th_op_id op, th_arg a, th_arg b, th_arg c, th_arg *out);
/* th_call_kw by op id. */
th_status th_tu_call_kw(th_trace *tr, th_op_id op, int nargs, const th_arg *args, int nkw, const char *const *kwnames,
                        const th_arg *kwargs, th_arg *out);

/* A TUPLE argument of ints whose items are written to `items` (caller storage of n entries). */
th_arg th_tu_ints(th_arg *items, int n, const int64_t *v);
/* A DEVICE argument. */
th_arg th_tu_device(th_device d);
/* A TUPLE of n values allocated in the trace's arena (for decompositions returning several tensors). */
th_status th_tu_tuple_out(th_trace *tr, int n, const th_arg *items, th_arg *out);

/* ---- argument readers ---------------------------------------------------------------------------- */

/* A dtype argument: NONE gives *has = false; TH_ARG_DTYPE (or a dtype name string) gives the dtype. */
th_status th_tu_dtype_arg(const char *op, const char *what, const th_arg *a, th_dtype *out, bool *has);
/* A device argument: NONE gives *has = false; a DEVICE or a string ("cuda:0") gives the device. */
th_status th_tu_device_arg(const char *op, const char *what, const th_arg *a, th_device *out, bool *has);
/* A float argument (INT/FLOAT/BOOL constant or a number proxy of known value). */
th_status th_tu_float(const char *op, const char *what, const th_arg *a, double *out);
/* A bool argument (BOOL, INT, or a number proxy of known value). */
th_status th_tu_bool(const char *op, const char *what, const th_arg *a, bool *out);
/* A tensor argument's value; else TH_ERR_TYPE "<op>: expected <what> to be a tensor". */
th_status th_tu_tensor_arg(const char *op, const char *what, const th_arg *a, const th_value **v);
/* th_tu_tensor_arg of each of args[0 .. n - 1], named names[i], into v[i]. */
th_status th_tu_tensor_args(const char *op, const th_arg *args, int n, const char *const *names, const th_value **v);
/* Reduction dims: NONE or an empty list mean all dims; an int or a list of ints, canonicalized,
 * duplicates rejected ("Duplicate value in list of dimensions"). A 0-dim tensor reduces over (). */
th_status th_tu_reduction_dims(const char *op, const th_arg *a, int ndim, int64_t dims[TH_MAX_DIMS], int *n);

/* ---- shape helpers (Thunder's clang layer: they record prims, no symbol of their own) ------------- */

/* prims.reshape to `shape` (no -1 here); no-op when the shape is unchanged. */
th_status th_tu_reshape(th_trace *tr, th_arg a, int ndim, const int64_t *shape, th_arg *out);
/* prims.transpose with `perm`; no-op for the identity permutation. */
th_status th_tu_transpose(th_trace *tr, th_arg a, const int64_t *perm, th_arg *out);
/* Inserts a length-1 dim at `dim` (already canonical for rank ndim+1) with prims.broadcast_in_dim. */
th_status th_tu_unsqueeze(th_trace *tr, th_arg a, int dim, th_arg *out);
/* x (at least 2 dims) with its last two dims swapped: Tensor.mT. */
th_status th_tu_matrix_transpose(th_trace *tr, th_arg x, th_arg *out);
/* The identity matrices of a's shape (..., n, n), in a's dtype. */
th_status th_tu_eye_like(th_trace *tr, const th_value *a, th_arg *out);
/* prims.squeeze over the (canonical, length-1) dims; no-op when n == 0. */
th_status th_tu_squeeze(th_trace *tr, th_arg a, int n, const int64_t *dims, th_arg *out);
/* prims.slice_prim along one dim [start, stop) with step (Thunder's clang.slice_in_dim). */
th_status th_tu_slice_in_dim(th_trace *tr, th_arg a, int64_t start, int64_t stop, int64_t step, int dim, th_arg *out);
/* keepdim for a reduction: broadcast_in_dim the reduced tensor back to rank ndim with 1s at dims. */
th_status th_tu_keepdim(th_trace *tr, th_arg r, int ndim, const int64_t *in_shape, int nd, const int64_t *dims,
                        th_arg *out);
/* prims.full(shape, fill, device=, dtype=). */
th_status th_tu_full(th_trace *tr, int ndim, const int64_t *shape, th_arg fill, th_device device, th_dtype dtype,
                     th_arg *out);
/* prims.iota(length, start=, step=, device=, dtype=). */
th_status th_tu_iota(th_trace *tr, int64_t length, int64_t start, int64_t step, th_device device, th_dtype dtype,
                     th_arg *out);

/* ---- shared decompositions other families call ---------------------------------------------------- */

/* Saturated fp8 cast: clamps a float tensor to +-max of `fp8` (448 for e4m3fn, 57344 for e5m2) with
 * ltorch.clamp (NaN preserved: where(a != a, a, where(a > lo, a, lo)) and the same for hi, as seed
 * 003's where-chains), then ltorch.to(dtype=fp8). Inf saturates to +-max. (conversion.c) */
th_status th_tu_to_fp8_saturated(th_trace *tr, th_arg a, th_dtype fp8, th_arg *out);
/* Reductions in the computation dtype with keepdim and result conversion, as Thunder's _reduction.
 * `prim` is prims.sum/prod/amax/amin. (reduction.c) */
th_status th_tu_reduce(th_trace *tr, const char *op, th_op_id prim, th_arg a, int nd, const int64_t *dims, bool keepdim,
                       bool has_dtype, th_dtype dtype, th_arg *out);
/* softmax / log_softmax over one dim with an optional result dtype (nn.c). */
th_status th_tu_softmax(th_trace *tr, const char *op, th_arg a, int64_t dim, bool has_dtype, th_dtype dtype, bool log,
                        th_arg *out);

#endif
