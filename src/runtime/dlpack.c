/* dlpack.c — zero-copy exchange of CPU tensors through DLPack's DLManagedTensor (dlpack.h v0.6 ABI).
 *
 * Export: one allocation holds the DLManagedTensor, its shape and strides arrays and one reference to
 * the tensor; the deleter releases the reference and frees the block. data points at element
 * [0,...,0] and byte_offset is 0, as PyTorch exports. Strides are always given (in elements).
 *
 * Import: the DLTensor is wrapped as borrowed storage whose deleter calls the manager's deleter when
 * the last th_tensor viewing it goes. A tensor exported by this library comes back as a view of its
 * own storage (th_tensor_shares_storage holds).
 *
 * Dtype codes. v0.6 has no codes for bool or fp8; DLPack 0.8 added kDLBool = 6 and DLPack 1.1
 * kDLFloat8_e4m3fn = 10 and kDLFloat8_e5m2 = 12 (same struct layout), which is what PyTorch 2.x uses.
 * They are used here in both directions so no dtype is lost; torch 2.x writes and reads the same
 * codes, so bool and fp8 tensors cross to it as themselves. */
#include <dlpack/dlpack.h>
#include <string.h>

#include "runtime/runtime.h"

/* Codes from DLPack >= 0.8 / 1.1 that dlpack.h v0.6 lacks. */
enum { TH_DL_BOOL = 6, TH_DL_FLOAT8_E4M3FN = 10, TH_DL_FLOAT8_E5M2 = 12 };

static DLDataType dl_dtype(th_dtype dt) {
  DLDataType d = {.code = kDLFloat, .bits = (uint8_t)(8 * th_dtype_size(dt)), .lanes = 1};
  switch (dt) {
    case TH_BOOL: d.code = TH_DL_BOOL; break;
    case TH_U8: d.code = kDLUInt; break;
    case TH_I8:
    case TH_I16:
    case TH_I32:
    case TH_I64: d.code = kDLInt; break;
    case TH_BF16: d.code = kDLBfloat; break;
    case TH_F8E4M3FN: d.code = TH_DL_FLOAT8_E4M3FN; break;
    case TH_F8E5M2: d.code = TH_DL_FLOAT8_E5M2; break;
    default: break; /* f16 f32 f64: kDLFloat */
  }
  return d;
}

/* Maps a DLDataType to a dtype; false if there is none. */
static bool from_dl_dtype(DLDataType d, th_dtype *out) {
  if (d.lanes != 1) return false;
  switch (d.code) {
    case kDLInt:
      switch (d.bits) {
        case 8: *out = TH_I8; return true;
        case 16: *out = TH_I16; return true;
        case 32: *out = TH_I32; return true;
        case 64: *out = TH_I64; return true;
      }
      return false;
    case kDLUInt: *out = TH_U8; return d.bits == 8;
    case kDLFloat:
      switch (d.bits) {
        case 16: *out = TH_F16; return true;
        case 32: *out = TH_F32; return true;
        case 64: *out = TH_F64; return true;
      }
      return false;
    case kDLBfloat: *out = TH_BF16; return d.bits == 16;
    case TH_DL_BOOL: *out = TH_BOOL; return d.bits == 8;
    case TH_DL_FLOAT8_E4M3FN: *out = TH_F8E4M3FN; return d.bits == 8;
    case TH_DL_FLOAT8_E5M2: *out = TH_F8E5M2; return d.bits == 8;
  }
  return false;
}

/* ---- export --------------------------------------------------------------------------------------- */

typedef struct dl_export {
  DLManagedTensor managed; /* first member: a DLManagedTensor* is a dl_export* */
  th_tensor *tensor;       /* the reference this export holds */
  int64_t shape[TH_MAX_DIMS], strides[TH_MAX_DIMS];
} dl_export;

static void dl_export_delete(DLManagedTensor *m) {
  dl_export *e = m->manager_ctx;
  th_tensor_release(e->tensor);
  th_free(e);
}

void *th_tensor_to_dlpack(th_tensor *t) {
  if (!t) {
    th_error(TH_ERR_VALUE, "th_tensor_to_dlpack: the tensor is NULL");
    return NULL;
  }
  if (t->device.type != TH_CPU) {
    th_error(TH_ERR_DEVICE, "th_tensor_to_dlpack: only CPU tensors can be exported");
    return NULL;
  }
  dl_export *e = th_malloc(sizeof *e);
  if (!e) {
    th_error(TH_ERR_NOMEM, "th_tensor_to_dlpack: out of memory");
    return NULL;
  }
  memcpy(e->shape, t->shape, sizeof e->shape);
  memcpy(e->strides, t->strides, sizeof e->strides);
  th_tensor_retain(t);
  e->tensor = t;
  e->managed = (DLManagedTensor){
    .dl_tensor = {.data = th_tensor_data(t),
                  .device = {.device_type = kDLCPU, .device_id = 0},
                  .ndim = t->ndim,
                  .dtype = dl_dtype(t->dtype),
                  .shape = e->shape,
                  .strides = e->strides,
                  .byte_offset = 0},
    .manager_ctx = e,
    .deleter = dl_export_delete,
  };
  return &e->managed;
}

/* ---- import --------------------------------------------------------------------------------------- */

static void dl_import_delete(void *ctx) {
  DLManagedTensor *m = ctx;
  if (m->deleter) m->deleter(m);
}

/* True when m is one of our exports still describing its tensor exactly. */
static bool is_own_export(const DLManagedTensor *m, th_dtype dt) {
  if (m->deleter != dl_export_delete) return false;
  const dl_export *e = m->manager_ctx;
  const DLTensor *d = &m->dl_tensor;
  const th_tensor *t = e->tensor;
  if (dt != t->dtype || d->ndim != t->ndim || d->byte_offset != 0 || d->data != th_tensor_data(t) ||
      d->shape != e->shape || d->strides != e->strides)
    return false;
  return memcmp(e->shape, t->shape, sizeof e->shape) == 0 && memcmp(e->strides, t->strides, sizeof e->strides) == 0;
}

th_tensor *th_tensor_from_dlpack(void *managed) {
  static const char who[] = "th_tensor_from_dlpack";
  DLManagedTensor *m = managed;
  if (!m) {
    th_error(TH_ERR_VALUE, "%s: the managed tensor is NULL", who);
    return NULL;
  }
  const DLTensor *d = &m->dl_tensor;
  if (d->device.device_type != kDLCPU) {
    th_error(TH_ERR_DEVICE, "%s: only kDLCPU tensors are supported, but got device type %d", who,
             (int)d->device.device_type);
    return NULL;
  }
  th_dtype dt;
  if (!from_dl_dtype(d->dtype, &dt)) {
    th_error(TH_ERR_TYPE, "%s: unsupported DLPack dtype (code=%u, bits=%u, lanes=%u)", who, (unsigned)d->dtype.code,
             (unsigned)d->dtype.bits, (unsigned)d->dtype.lanes);
    return NULL;
  }
  if (is_own_export(m, dt)) { /* our own tensor coming back: a view of the same storage */
    dl_export *e = m->manager_ctx;
    th_tensor *v = th_tensor_view(e->tensor, e->tensor->ndim, e->tensor->shape, e->tensor->strides, 0);
    if (v) m->deleter(m);
    return v;
  }
  if (d->ndim < 0 || d->ndim > TH_MAX_DIMS) {
    th_error(d->ndim < 0 ? TH_ERR_VALUE : TH_ERR_NOT_IMPLEMENTED, "%s: expected 0 <= ndim <= %d, but got %d", who,
             TH_MAX_DIMS, d->ndim);
    return NULL;
  }
  char *data = d->data ? (char *)d->data + d->byte_offset : NULL;
  return th_tensor_from_data(data, dt, d->ndim, d->shape, d->strides, dl_import_delete, m);
}
