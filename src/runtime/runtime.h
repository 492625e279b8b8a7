/* runtime.h — internal layout of runtime tensors and storage (see thunder/tensor.h for the API).
 *
 * Storage is a refcounted allocation (or borrowed memory with a deleter). A tensor is a strided view:
 * element (i0, ..., ik) lives at data + (offset + sum(i_j * strides[j])) * itemsize. Strides and
 * offset are in elements, may be 0 (broadcast) but never negative. */
#ifndef TH_RUNTIME_H
#define TH_RUNTIME_H

#include <stdatomic.h>

#include "core/core.h"
#include "thunder/tensor.h"

typedef struct th_storage {
  atomic_int refcnt;
  void *data;
  size_t nbytes;
  void (*deleter)(void *ctx); /* NULL: data was allocated by the library and is freed by it */
  void *deleter_ctx;
} th_storage;

struct th_tensor {
  atomic_int refcnt;
  th_dtype dtype;
  th_device device;
  int ndim;
  int64_t shape[TH_MAX_DIMS];
  int64_t strides[TH_MAX_DIMS]; /* elements */
  int64_t offset;               /* elements */
  th_storage *storage;
};

/* Row-major contiguous strides for shape; returns numel. */
int64_t th_rt_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

#endif
