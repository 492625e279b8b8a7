/* tensor.c — runtime tensors: refcounted storage, strided views, contiguous copies and element reads.
 *
 * A storage the library allocates is one th_malloc block: the th_storage header, then padding up to a
 * 64-byte boundary, then the data (deleter == NULL marks this layout, so freeing the header frees the
 * data too). Borrowed memory (th_tensor_from_data, DLPack) gets a header of its own and its deleter
 * runs when the last tensor viewing it is released. Refcounts are C11 atomics, so tensors may be
 * retained and released from several threads; the contents themselves are not synchronized.
 *
 * Shapes are validated here once (rank, negative sizes, int64 overflow of numel and of the byte size),
 * so every other file may multiply shapes and strides without overflow checks. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/runtime.h"

#define TH_DATA_ALIGN 64

/* ---- shape validation ---------------------------------------------------------------------------- */

/* Checks rank and sizes; on success *numel is the element count. `who` names the calling function in
 * the error message. The product of max(size, 1) (which bounds every contiguous stride) and the byte
 * size numel * itemsize must both fit in int64. */
static th_status check_shape(const char *who, th_dtype dtype, int ndim, const int64_t *shape, int64_t *numel) {
  if ((unsigned)dtype >= TH_DTYPE_COUNT) return th_error(TH_ERR_VALUE, "%s: invalid dtype code %d", who, (int)dtype);
  if (ndim < 0 || ndim > TH_MAX_DIMS)
    return th_error(ndim < 0 ? TH_ERR_VALUE : TH_ERR_NOT_IMPLEMENTED, "%s: expected 0 <= ndim <= %d, but got ndim=%d",
                    who, TH_MAX_DIMS, ndim);
  if (ndim > 0 && !shape) return th_error(TH_ERR_VALUE, "%s: shape is NULL with ndim=%d", who, ndim);
  int64_t n = 1, span = 1;
  for (int i = 0; i < ndim; i++) {
    int64_t d = shape[i];
    if (d < 0) return th_error(TH_ERR_VALUE, "%s: expected shape[%d] >= 0, but got %lld", who, i, (long long)d);
    int64_t d1 = d > 0 ? d : 1;
    if (span > INT64_MAX / d1)
      return th_error(TH_ERR_VALUE, "%s: shape overflows int64 (dimension %d of size %lld)", who, i, (long long)d);
    span *= d1;
    n = d == 0 ? 0 : n * d; /* n <= span, cannot overflow */
  }
  int64_t itemsize = (int64_t)th_dtype_size(dtype);
  if (n > INT64_MAX / itemsize || (uint64_t)(n * itemsize) > (uint64_t)(SIZE_MAX / 2))
    return th_error(TH_ERR_VALUE, "%s: %lld elements of %s overflow the addressable size", who, (long long)n,
                    th_dtype_name(dtype));
  *numel = n;
  return TH_OK;
}

int64_t th_rt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t numel = 1, s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i] > 1 ? shape[i] : 1; /* as PyTorch: size-0/1 dims do not scale the strides before them */
    numel *= shape[i];
  }
  return numel;
}

/* Number of bytes a (shape, strides, offset) view touches, counted from the storage base: 0 when
 * numel is 0, otherwise (offset + sum((size-1)*stride) + 1) * itemsize. False on int64 overflow. */
static bool view_extent(int ndim, const int64_t *shape, const int64_t *strides, int64_t offset, size_t itemsize,
                        uint64_t *bytes) {
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) {
      *bytes = 0;
      return true;
    }
  uint64_t last = (uint64_t)offset; /* index of the last element touched */
  for (int i = 0; i < ndim; i++) {
    uint64_t step = (uint64_t)strides[i], cnt = (uint64_t)(shape[i] - 1);
    if (cnt && step > (uint64_t)INT64_MAX / cnt) return false;
    if (last + step * cnt > (uint64_t)INT64_MAX) return false;
    last += step * cnt;
  }
  if (last + 1 > (uint64_t)INT64_MAX / itemsize) return false;
  *bytes = (last + 1) * itemsize;
  return true;
}

/* ---- storage ----------------------------------------------------------------------------------------- */

/* A library-owned storage of nbytes bytes (64-byte aligned data), or NULL with TH_ERR_NOMEM set. */
static th_storage *storage_alloc(size_t nbytes) {
  size_t head = sizeof(th_storage) + TH_DATA_ALIGN - 1;
  if (nbytes > SIZE_MAX - head) {
    th_error(TH_ERR_NOMEM, "out of memory: cannot allocate %zu bytes of tensor data", nbytes);
    return NULL;
  }
  char *block = th_malloc(head + nbytes);
  if (!block) {
    th_error(TH_ERR_NOMEM, "out of memory: cannot allocate %zu bytes of tensor data", nbytes);
    return NULL;
  }
  th_storage *s = (th_storage *)(void *)block;
  uintptr_t p = (uintptr_t)(block + sizeof(th_storage));
  p = (p + TH_DATA_ALIGN - 1) & ~(uintptr_t)(TH_DATA_ALIGN - 1);
  atomic_init(&s->refcnt, 1);
  s->data = (void *)p;
  s->nbytes = nbytes;
  s->deleter = NULL;
  s->deleter_ctx = NULL;
  return s;
}

static void storage_release(th_storage *s) {
  if (atomic_fetch_sub_explicit(&s->refcnt, 1, memory_order_acq_rel) != 1) return;
  if (s->deleter) s->deleter(s->deleter_ctx);
  th_free(s); /* library-owned data lives inside this block */
}

/* A tensor header over storage s (takes over the caller's reference to s). Strides NULL = contiguous.
 * NULL with TH_ERR_NOMEM set; the caller still holds its storage reference then. */
static th_tensor *tensor_wrap(th_storage *s, th_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides,
                              int64_t offset) {
  th_tensor *t = th_malloc(sizeof *t);
  if (!t) {
    th_error(TH_ERR_NOMEM, "out of memory: cannot allocate a tensor");
    return NULL;
  }
  atomic_init(&t->refcnt, 1);
  t->dtype = dtype;
  t->device = (th_device){.type = TH_CPU, .index = 0};
  t->ndim = ndim;
  memset(t->shape, 0, sizeof t->shape);
  memset(t->strides, 0, sizeof t->strides);
  if (ndim > 0) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
  if (strides) {
    if (ndim > 0) memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
  } else {
    th_rt_contiguous_strides(ndim, t->shape, t->strides);
  }
  t->offset = offset;
  t->storage = s;
  return t;
}

/* ---- constructors ------------------------------------------------------------------------------------- */

th_tensor *th_tensor_empty(th_dtype dtype, int ndim, const int64_t *shape) {
  int64_t numel;
  if (check_shape("th_tensor_empty", dtype, ndim, shape, &numel) != TH_OK) return NULL;
  th_storage *s = storage_alloc((size_t)numel * th_dtype_size(dtype));
  if (!s) return NULL;
  th_tensor *t = tensor_wrap(s, dtype, ndim, shape, NULL, 0);
  if (!t) storage_release(s);
  return t;
}

th_tensor *th_tensor_new(th_dtype dtype, int ndim, const int64_t *shape) {
  th_tensor *t = th_tensor_empty(dtype, ndim, shape);
  if (t) memset(t->storage->data, 0, t->storage->nbytes);
  return t;
}

/* Checks that strides (when given) are non-negative; the runtime has no negative strides. */
static th_status check_strides(const char *who, int ndim, const int64_t *strides) {
  if (!strides) return TH_OK;
  for (int i = 0; i < ndim; i++)
    if (strides[i] < 0)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: expected strides[%d] >= 0, but got %lld", who, i,
                      (long long)strides[i]);
  return TH_OK;
}

th_tensor *th_tensor_from_data(void *data, th_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides,
                               void (*deleter)(void *ctx), void *ctx) {
  static const char who[] = "th_tensor_from_data";
  int64_t numel;
  if (check_shape(who, dtype, ndim, shape, &numel) != TH_OK) return NULL;
  if (check_strides(who, ndim, strides) != TH_OK) return NULL;
  int64_t cstrides[TH_MAX_DIMS];
  th_rt_contiguous_strides(ndim, shape, cstrides);
  uint64_t extent;
  if (!view_extent(ndim, shape, strides ? strides : cstrides, 0, th_dtype_size(dtype), &extent)) {
    th_error(TH_ERR_VALUE, "%s: the strided extent of the tensor overflows int64", who);
    return NULL;
  }
  if (!data && numel > 0) {
    th_error(TH_ERR_VALUE, "%s: data is NULL for a tensor of %lld elements", who, (long long)numel);
    return NULL;
  }
  if (data && (uintptr_t)data % th_dtype_size(dtype) != 0) {
    th_error(TH_ERR_VALUE, "%s: data %p is not aligned to the %zu-byte size of %s", who, data, th_dtype_size(dtype),
             th_dtype_name(dtype));
    return NULL;
  }
  th_storage *s = th_malloc(sizeof *s);
  if (!s) {
    th_error(TH_ERR_NOMEM, "out of memory: cannot allocate a tensor storage");
    return NULL;
  }
  atomic_init(&s->refcnt, 1);
  s->data = data;
  s->nbytes = (size_t)extent;
  s->deleter = deleter;
  s->deleter_ctx = ctx;
  th_tensor *t = tensor_wrap(s, dtype, ndim, shape, strides, 0);
  if (!t) th_free(s); /* on failure the caller keeps ownership of data: the deleter does not run */
  return t;
}

th_tensor *th_tensor_view(th_tensor *t, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset) {
  static const char who[] = "th_tensor_view";
  if (!t) {
    th_error(TH_ERR_VALUE, "%s: the tensor is NULL", who);
    return NULL;
  }
  int64_t numel;
  if (check_shape(who, t->dtype, ndim, shape, &numel) != TH_OK) return NULL;
  if (check_strides(who, ndim, strides) != TH_OK) return NULL;
  if (offset < 0 || offset > INT64_MAX - t->offset) {
    th_error(TH_ERR_INDEX, "%s: offset %lld is out of range", who, (long long)offset);
    return NULL;
  }
  int64_t cstrides[TH_MAX_DIMS];
  th_rt_contiguous_strides(ndim, shape, cstrides);
  const int64_t *st = strides ? strides : cstrides;
  uint64_t extent;
  size_t isz = th_dtype_size(t->dtype);
  bool ok = view_extent(ndim, shape, st, t->offset + offset, isz, &extent) && extent <= t->storage->nbytes;
  /* An empty view touches no element, wherever it starts: PyTorch allows x[:, 2:] of a [0, 4] tensor
   * (offset 2 in an empty storage). It is placed at the storage's start, so no pointer is ever formed
   * past its end. */
  if (numel == 0) {
    ok = true;
    offset = -t->offset;
  }
  if (!ok) {
    th_error(TH_ERR_INDEX, "%s: the view (numel=%lld, offset=%lld) reaches past the end of its storage of %zu bytes",
             who, (long long)numel, (long long)offset, t->storage->nbytes);
    return NULL;
  }
  atomic_fetch_add_explicit(&t->storage->refcnt, 1, memory_order_relaxed);
  th_tensor *v = tensor_wrap(t->storage, t->dtype, ndim, shape, st, t->offset + offset);
  if (!v) storage_release(t->storage);
  return v;
}

/* ---- copies ----------------------------------------------------------------------------------------- */

/* Copies the elements of t in row-major order into dst (numel * itemsize bytes). The innermost
 * dimension is copied with memcpy when its stride is 1, element by element otherwise. */
static void gather(const th_tensor *t, char *dst) {
  size_t isz = th_dtype_size(t->dtype);
  int64_t numel = th_tensor_numel(t);
  if (numel == 0) return;
  const char *base = (const char *)t->storage->data + (size_t)t->offset * isz;
  if (th_tensor_is_contiguous(t)) {
    memcpy(dst, base, (size_t)numel * isz);
    return;
  }
  int nd = t->ndim; /* >= 1 here: a 0-d tensor is always contiguous */
  int64_t inner = t->shape[nd - 1], istride = t->strides[nd - 1];
  int64_t idx[TH_MAX_DIMS] = {0};
  for (int64_t done = 0; done < numel; done += inner) {
    int64_t off = 0;
    for (int d = 0; d < nd - 1; d++) off += idx[d] * t->strides[d];
    const char *src = base + (size_t)off * isz;
    if (istride == 1) {
      memcpy(dst, src, (size_t)inner * isz);
      dst += (size_t)inner * isz;
    } else {
      for (int64_t i = 0; i < inner; i++, dst += isz) memcpy(dst, src + (size_t)(i * istride) * isz, isz);
    }
    for (int d = nd - 2; d >= 0; d--) { /* advance the outer multi-index */
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
}

th_tensor *th_tensor_contiguous_copy(const th_tensor *t) {
  if (!t) {
    th_error(TH_ERR_VALUE, "th_tensor_contiguous_copy: the tensor is NULL");
    return NULL;
  }
  th_tensor *out = th_tensor_empty(t->dtype, t->ndim, t->shape);
  if (out) gather(t, out->storage->data);
  return out;
}

/* ---- refcounts -------------------------------------------------------------------------------------- */

void th_tensor_retain(th_tensor *t) {
  if (t) atomic_fetch_add_explicit(&t->refcnt, 1, memory_order_relaxed);
}

void th_tensor_release(th_tensor *t) {
  if (!t) return;
  if (atomic_fetch_sub_explicit(&t->refcnt, 1, memory_order_acq_rel) != 1) return;
  storage_release(t->storage);
  th_free(t);
}

/* ---- accessors -------------------------------------------------------------------------------------- */

th_dtype th_tensor_dtype(const th_tensor *t) { return t->dtype; }
th_device th_tensor_device(const th_tensor *t) { return t->device; }
int th_tensor_ndim(const th_tensor *t) { return t->ndim; }
const int64_t *th_tensor_shape(const th_tensor *t) { return t->shape; }
const int64_t *th_tensor_strides(const th_tensor *t) { return t->strides; }

int64_t th_tensor_numel(const th_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

bool th_tensor_is_contiguous(const th_tensor *t) {
  if (th_tensor_numel(t) == 0) return true; /* PyTorch: empty tensors are contiguous */
  int64_t expected = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] == 1) continue; /* a size-1 dim's stride is never used */
    if (t->strides[i] != expected) return false;
    expected *= t->shape[i];
  }
  return true;
}

void *th_tensor_data(const th_tensor *t) {
  if (!t->storage->data) return NULL;
  return (char *)t->storage->data + (size_t)t->offset * th_dtype_size(t->dtype);
}

bool th_tensor_shares_storage(const th_tensor *a, const th_tensor *b) { return a && b && a->storage == b->storage; }

/* Decodes one element at p (any alignment) as double. */
static double decode(th_dtype dt, const void *p) {
  union {
    uint8_t u8;
    int8_t i8;
    int16_t i16;
    int32_t i32;
    int64_t i64;
    uint16_t u16;
    float f32;
    double f64;
  } v;
  memcpy(&v, p, th_dtype_size(dt));
  switch (dt) {
    case TH_BOOL: return v.u8 != 0;
    case TH_U8: return v.u8;
    case TH_I8: return v.i8;
    case TH_I16: return v.i16;
    case TH_I32: return v.i32;
    case TH_I64: return (double)v.i64;
    case TH_F16: return th_f16_to_f32(v.u16);
    case TH_BF16: return th_bf16_to_f32(v.u16);
    case TH_F32: return v.f32;
    case TH_F64: return v.f64;
    case TH_F8E4M3FN: return th_f8e4m3fn_to_f32(v.u8);
    case TH_F8E5M2: return th_f8e5m2_to_f32(v.u8);
    case TH_DTYPE_COUNT: break;
  }
  return NAN;
}

double th_tensor_get_f64(const th_tensor *t, int64_t flat_index) {
  int64_t numel = th_tensor_numel(t);
  if (flat_index < 0 || flat_index >= numel) {
    th_error(TH_ERR_INDEX, "th_tensor_get_f64: index %lld is out of bounds for a tensor of %lld elements",
             (long long)flat_index, (long long)numel);
    return NAN;
  }
  int64_t off = t->offset, rem = flat_index;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (rem % t->shape[d]) * t->strides[d];
    rem /= t->shape[d];
  }
  return decode(t->dtype, (const char *)t->storage->data + (size_t)off * th_dtype_size(t->dtype));
}
