/* meta_util.h — small helpers shared by the prim metas (src/ops/prims/) and the torch-level
 * decompositions (src/ops/torch/): what kind of argument an th_arg is, reading int lists and dims out of
 * arguments with PyTorch-worded errors, formatting shapes for messages, and dtype categories.
 *
 * Conventions: every function that can fail returns a th_status and sets the message with th_error();
 * `op` is the qualified op name used as the message prefix ("prims.sum"); it may be NULL (no prefix).
 * Nothing here allocates. */
#ifndef TH_META_UTIL_H
#define TH_META_UTIL_H

#include "core/ir.h"
#include "ops/ops.h"

/* ---- argument kinds ------------------------------------------------------------------------------- */

/* True for a tensor proxy (TH_ARG_VALUE whose value is a tensor). */
bool th_meta_is_tensor(const th_arg *a);
/* True for a number: a BOOL/INT/FLOAT constant or a number proxy. */
bool th_meta_is_number(const th_arg *a);
/* The tensor proxy of a tensor argument, else NULL. */
th_value *th_meta_tensor(const th_arg *a);
/* Python type of a number argument as a dtype: TH_BOOL (bool), TH_I64 (int), TH_F64 (float).
 * Only meaningful when th_meta_is_number(a). */
th_dtype th_meta_number_type(const th_arg *a);
/* The value of a number argument, if known (constants always; proxies when has_value). Writes both
 * views: *f as a double, *i as an int64 (floats truncated toward zero). Either pointer may be NULL.
 * Returns false for a number proxy of unknown value or a non-number. */
bool th_meta_number_value(const th_arg *a, double *f, int64_t *i);

/* ---- int lists and dims --------------------------------------------------------------------------- */

/* Reads an int list argument — a TUPLE/LIST of INT (or BOOL, or number proxies with known int
 * values), or a single INT (a one-element list) — into out[0..*n). Errors (TH_ERR_TYPE unless said):
 * "<op>: expected <what> to be an int or a sequence of ints, but got ...", an element that is not
 * an int, a proxy of unknown value, more than TH_MAX_DIMS entries (TH_ERR_NOT_IMPLEMENTED). */
th_status th_meta_int_list(const char *op, const char *what, const th_arg *a, int64_t out[TH_MAX_DIMS], int *n);
/* Checks that every extent of a shape read with th_meta_int_list is >= 0; TH_ERR_RUNTIME with
 * PyTorch's wording otherwise: "Trying to create tensor with negative dimension -1: [-1, 2]". */
th_status th_meta_check_shape(const char *op, const int64_t *shape, int ndim);
/* The number of elements of a shape: true and *out = the product (0 if any extent is 0), or false and
 * *out = -1 if an extent is negative or the product overflows int64. Never overflows itself. */
bool th_meta_numel(const int64_t *shape, int ndim, int64_t *out);
/* Reads a single int argument (INT, BOOL, or an int number proxy of known value). */
th_status th_meta_int(const char *op, const char *what, const th_arg *a, int64_t *out);

/* Wraps a possibly negative dim into [0, ndim) as PyTorch's maybe_wrap_dim: a 0-dim tensor accepts
 * -1 and 0 (both give 0). Out of range: TH_ERR_INDEX with PyTorch's wording, e.g.
 * "Dimension out of range (expected to be in range of [-2, 1], but got 2)" (prefixed "<op>: " when
 * op is not NULL). */
th_status th_meta_canonical_dim(const char *op, int64_t dim, int ndim, int *out);

/* Reads a device argument: TH_ARG_DEVICE, or a string "cpu" / "cuda" / "cuda:N" / "meta". Errors:
 * TH_ERR_VALUE for a malformed string, TH_ERR_TYPE for any other kind. */
th_status th_meta_device(const char *op, const th_arg *a, th_device *out);

/* ---- formatting ------------------------------------------------------------------------------------ */

/* Enough for any shape of TH_MAX_DIMS extents. */
#define TH_META_SHAPE_BUF 200

/* Writes a shape as PyTorch prints torch.Size lists, "[2, 3]" ("[]" for 0-dim), into buf (n bytes,
 * NUL-terminated, truncated if too small). Returns buf. */
char *th_meta_shape_str(const int64_t *shape, int ndim, char *buf, size_t n);
/* Writes a shape as a Python tuple, as Thunder prints `a.shape`: "(2, 3)", "(6,)", "()". Returns buf. */
char *th_meta_shape_tuple_str(const int64_t *shape, int ndim, char *buf, size_t n);

/* ---- dtype categories ------------------------------------------------------------------------------ */

/* bool < integer < floating: the category order a Python number must fit (a number of a lower or
 * equal category than a tensor's dtype may be combined with it: int with f32 yes, float with i64 no). */
typedef enum th_meta_kind { TH_META_KIND_BOOL = 0, TH_META_KIND_INT = 1, TH_META_KIND_FLOAT = 2 } th_meta_kind;
th_meta_kind th_meta_dtype_kind(th_dtype dt);
/* bool or an integer dtype (Thunder's "exact" dtypes). */
bool th_meta_dtype_is_exact(th_dtype dt);
/* The Python number type of a dtype's category: TH_BOOL, TH_I64 or TH_F64. */
th_dtype th_meta_dtype_numbertype(th_dtype dt);
/* Python's name of a number type dtype: "bool", "int", "float". */
const char *th_meta_numbertype_name(th_dtype pytype);
/* Thunder's repr of a dtype, as its messages print it: "thunder.dtypes.float32", "thunder.dtypes.bool8"
 * ("Expected dtype thunder.dtypes.float32 but found thunder.dtypes.bfloat16!"). Static string. For
 * PyTorch's plain name ("float32", "bool") use th_dtype_name. */
const char *th_meta_dtype_repr(th_dtype dt);

/* ---- outputs --------------------------------------------------------------------------------------- */

/* A new tensor proxy; sets *out to it. requires_grad is kept only for float dtypes (Thunder's rule).
 * Errors: a negative extent (TH_ERR_RUNTIME, "Trying to create tensor with negative dimension -1"),
 * rank above TH_MAX_DIMS (TH_ERR_NOT_IMPLEMENTED), TH_ERR_NOMEM. */
th_status th_meta_new_tensor(th_trace *tr, th_dtype dtype, th_device device, int ndim, const int64_t *shape,
                             bool requires_grad, th_arg *out);
/* A new tensor proxy like `a` (device, requires_grad) with the given dtype and shape; sets *out to it.
 * TH_ERR_NOMEM / shape errors from th_value_new_tensor. */
th_status th_meta_new_tensor_like(th_trace *tr, const th_value *a, th_dtype dtype, int ndim, const int64_t *shape,
                                  th_arg *out);

#endif
