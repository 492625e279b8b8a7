/* thunder/tensor.h — runtime tensors: strided views over refcounted storage; DLPack; .npy and
 * .safetensors files.
 *
 * A tensor is (dtype, device, shape, strides in elements, offset in elements, storage). Views share
 * storage and never copy. Tensors are refcounted: th_tensor_retain / th_tensor_release; every
 * function returning a th_tensor* hands the caller one reference. Tensor data never lives in a
 * trace's arena. */
#ifndef THUNDER_TENSOR_H
#define THUNDER_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "thunder/device.h"
#include "thunder/dtype.h"
#include "thunder/error.h"
#include "thunder/trace.h" /* TH_MAX_DIMS */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct th_tensor th_tensor;

/* A new contiguous (row-major) CPU tensor, zero-filled, with 64-byte aligned data. shape has ndim
 * entries (0 <= ndim <= TH_MAX_DIMS, each >= 0; may be NULL when ndim is 0). Strides follow PyTorch
 * (size-0/1 dims do not scale the strides before them: torch.empty(2, 0, 3).stride() == (3, 3, 1)).
 * Returns NULL on a bad shape: TH_ERR_VALUE (negative size, numel or byte size overflowing int64),
 * TH_ERR_NOT_IMPLEMENTED (ndim > TH_MAX_DIMS); or TH_ERR_NOMEM. */
th_tensor *th_tensor_new(th_dtype dtype, int ndim, const int64_t *shape);
/* Like th_tensor_new but the contents are uninitialized. */
th_tensor *th_tensor_empty(th_dtype dtype, int ndim, const int64_t *shape);
/* A CPU tensor viewing caller memory `data` (not copied, not freed): strides in elements (NULL =
 * contiguous; negative strides are TH_ERR_NOT_IMPLEMENTED). data must be aligned to the dtype's size
 * and may be NULL only when numel is 0 (TH_ERR_VALUE otherwise). The storage is taken to span exactly
 * the elements this (shape, strides) reaches, so views of it must stay inside that. `deleter(ctx)`
 * runs once, when the last tensor viewing the memory is released (may be NULL). On failure (NULL) the
 * deleter is not called: the caller still owns data. */
th_tensor *th_tensor_from_data(void *data, th_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides,
                               void (*deleter)(void *ctx), void *ctx);
/* A view sharing t's storage (no copy): new shape and strides (elements; NULL = contiguous) and offset
 * (elements, >= 0, added to t's offset). Every element of the view must lie inside the storage
 * (TH_ERR_INDEX otherwise, like an out-of-bounds as_strided); negative strides are
 * TH_ERR_NOT_IMPLEMENTED. The view holds its own reference to the storage: t may be released first. */
th_tensor *th_tensor_view(th_tensor *t, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset);
/* A contiguous copy of any tensor (any strides, offset, broadcast dims, dtype): a new 64-byte aligned
 * storage holding t's elements in row-major order (always a new storage, even when t is contiguous).
 * NULL with TH_ERR_NOMEM (or TH_ERR_VALUE for t == NULL). */
th_tensor *th_tensor_contiguous_copy(const th_tensor *t);

/* Reference counting (atomic: tensors may be retained and released from any thread; their contents
 * are not synchronized). The storage goes when the last tensor viewing it is released. */
void th_tensor_retain(th_tensor *t);
void th_tensor_release(th_tensor *t); /* NULL is fine */

/* Accessors; t must not be NULL. shape and strides point into t (ndim entries, valid while t is). */
th_dtype th_tensor_dtype(const th_tensor *t);
th_device th_tensor_device(const th_tensor *t);
int th_tensor_ndim(const th_tensor *t);
const int64_t *th_tensor_shape(const th_tensor *t);
const int64_t *th_tensor_strides(const th_tensor *t); /* in elements */
int64_t th_tensor_numel(const th_tensor *t);          /* 1 for 0-d tensors */
/* As PyTorch: strides of size-1 dims are ignored and a tensor with no elements is contiguous. */
bool th_tensor_is_contiguous(const th_tensor *t);
/* Pointer to element [0,...,0] (storage base + offset); NULL only for an empty from_data tensor. */
void *th_tensor_data(const th_tensor *t);
/* Element at a flat row-major index over the logical shape (through the strides), converted to double
 * (fp8/f16/bf16 decoded exactly; bool is 0 or 1). An index outside [0, numel) returns NaN and sets
 * TH_ERR_INDEX. */
double th_tensor_get_f64(const th_tensor *t, int64_t flat_index);
/* True when the two tensors' storages are the same allocation (false if either is NULL). */
bool th_tensor_shares_storage(const th_tensor *a, const th_tensor *b);

/* ---- files --------------------------------------------------------------------------------------
 * .npy: versions 1.0-3.0, little-endian ('<', '|'; '>' is refused for multi-byte types), C or Fortran
 * order; dtypes b1 u1 i1 i2 i4 i8 f2 f4 f8. bfloat16 and fp8 have no NumPy dtype and cannot be written
 * (TH_ERR_TYPE; use .safetensors).
 * .safetensors: every dtype here (BOOL U8 I8 I16 I32 I64 F16 BF16 F32 F64 F8_E4M3 F8_E5M2); the JSON
 * header is validated (offsets in range, contiguous, non-overlapping, sizes = numel * itemsize).
 * Writers write to a temporary file in the same directory and rename it, so a failure never leaves a
 * partial file and never damages the file being replaced. Errors: TH_ERR_IO with the path and what was
 * wrong (a missing directory is named as such); TH_ERR_NOMEM. */

/* Reads a .npy file into a new contiguous C-order tensor (*out; NULL on error). Fortran-order files
 * are transposed into C order. The file size must be exactly header + numel * itemsize. */
th_status th_npy_read(const char *path, th_tensor **out);
/* Writes t (any strides; written in C order) as a version 1.0 .npy file, byte-identical to numpy.save
 * of the same array. TH_ERR_TYPE for bf16 and fp8. */
th_status th_npy_write(const char *path, const th_tensor *t);

/* Reads all tensors of a .safetensors file, in header order. *names and *tensors are arrays of *n
 * entries (NULL when *n is 0) allocated with the library's allocator; free them with
 * th_safetensors_free. "__metadata__" must be an object of strings and is otherwise ignored. Data are
 * copied into new 64-byte aligned tensors. On error the outputs are 0/NULL. */
th_status th_safetensors_read(const char *path, int *n, char ***names, th_tensor ***tensors);
/* Releases what th_safetensors_read returned (NULL arrays are fine). */
void th_safetensors_free(int n, char **names, th_tensor **tensors);
/* Writes n named tensors (any strides; written in C order). Names must be unique, valid UTF-8 and not
 * "__metadata__" (TH_ERR_VALUE). Tensors are laid out by decreasing itemsize, then name (bytewise), so
 * each is aligned to its itemsize; the header is compact JSON padded with spaces to a multiple of 8. */
th_status th_safetensors_write(const char *path, int n, const char *const *names, th_tensor *const *tensors);

/* ---- DLPack (dlpack.h v0.6+) ------------------------------------------------------------------
 * Zero-copy exchange. th_tensor_to_dlpack returns a DLManagedTensor* (as void*) that holds one
 * reference to t; its deleter releases it (t itself may be released at once). data points at element
 * [0,...,0], byte_offset is 0 and strides are always set, as PyTorch exports.
 * th_tensor_from_dlpack takes ownership of the managed tensor on success (calls its deleter when the
 * last th_tensor viewing it dies); on failure (NULL) ownership stays with the caller and the deleter
 * is not called. byte_offset is honoured, NULL strides mean contiguous. A tensor exported by
 * th_tensor_to_dlpack comes back as a view of its original storage. Only kDLCPU (else TH_ERR_DEVICE),
 * lanes == 1 and dtypes that map to a th_dtype (else TH_ERR_TYPE), non-negative strides
 * (TH_ERR_NOT_IMPLEMENTED) and data aligned to the element size (TH_ERR_VALUE) are accepted.
 * Dtype codes: kDLInt/kDLUInt/kDLFloat/kDLBfloat as usual; bool is kDLBool (6, 8 bits) and the fp8
 * formats kDLFloat8_e4m3fn (10) / kDLFloat8_e5m2 (12), the codes DLPack 0.8 / 1.1 added (v0.6 lacks
 * them; the struct layout is unchanged) and PyTorch 2.x uses (torch 2.14's to_dlpack / from_dlpack
 * write and read all three). */
void *th_tensor_to_dlpack(th_tensor *t);
th_tensor *th_tensor_from_dlpack(void *managed);

#ifdef __cplusplus
}
#endif
#endif
