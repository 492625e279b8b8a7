/* pool.h — the window geometry of the pooling, resampling and im2col prims (prims/pool.c), shared by
 * their metas, the torch-level decompositions (torch/pool.c) that check arguments first with the
 * torch function's name, and nothing else (the eager kernels read the output extents from their
 * outputs).
 *
 * Every prim of the family works over the last k dims of its input (k = 1, 2 or 3, the spatial dims);
 * the leading dims are independent planes (batch and channels). */
#ifndef TH_OPS_POOL_H
#define TH_OPS_POOL_H

#include "ops/meta_util.h"

#define TH_POOL_MAX_K 3

/* PyTorch's pooling_output_shape: floor (or ceil) of (in + 2 pad - dilation (kernel - 1) - 1) / stride
 * + 1, and with ceil_mode one window fewer when the last one would start in the right padding. */
int64_t th_pool_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode);

/* Checks a max (dilation != NULL) or average pooling over the last k dims of input shape (ndim dims)
 * with PyTorch's messages (pool2d_shape_check / avg_pool2d's checks): positive kernel, stride and
 * dilation, padding at most half the kernel, no empty spatial or plane extent, an output of at least
 * one element per dim; writes the output extents to out[k]. op names the caller in messages. */
th_status th_pool_check(const char *op, int k, int ndim, const int64_t *shape, const int64_t *kernel,
                        const int64_t *stride, const int64_t *pad, const int64_t *dilation, bool ceil_mode,
                        int64_t *out);

/* Reads an int[] argument of exactly k entries (or a single int, repeated k times). */
th_status th_pool_ints(const char *op, const char *what, const th_arg *a, int k, int64_t *out);

/* The adaptive window [start, end) of output index o (in input extent `in`, output extent `out`):
 * floor(o in / out), ceil((o + 1) in / out), as PyTorch's start_index / end_index. */
static inline int64_t th_pool_adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
static inline int64_t th_pool_adaptive_end(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

#endif
