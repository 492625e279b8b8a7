/* rt_io.h — file helpers shared by the tensor file formats (npy.c, safetensors.c), implemented in
 * rt_io.c: opening a regular file for reading with its size, exact reads, streaming a strided tensor's
 * elements in row-major order, and atomic writes (temporary file in the target's directory + rename).
 * Every failure sets a TH_ERR_IO message of the form "<who>: '<path>': <what went wrong>". */
#ifndef TH_RT_IO_H
#define TH_RT_IO_H

#include <stdio.h>

#include "runtime/runtime.h"

/* Opens path for binary reading; it must be a regular file. *size is its size in bytes. */
th_status th_rt_open_read(const char *who, const char *path, FILE **f, uint64_t *size);

/* Reads exactly n bytes; a short read is a TH_ERR_IO error naming `what` (e.g. "the header"). */
th_status th_rt_read_exact(const char *who, const char *path, FILE *f, void *buf, size_t n, const char *what);

/* Writes t's elements in row-major (C) order as raw native (little-endian) bytes, whatever its
 * strides. A non-contiguous tensor is gathered through a bounded staging buffer (TH_ERR_NOMEM if it
 * cannot be allocated). */
th_status th_rt_write_tensor_data(const char *who, const char *path, FILE *f, const th_tensor *t);

/* The body of an atomic write: fills f (a fresh temporary file) and returns TH_OK or an error. */
typedef th_status (*th_rt_write_fn)(FILE *f, void *ctx);

/* Creates a temporary file in path's directory, runs write_fn on it, flushes, fsyncs, closes and
 * renames it over path. On any failure the temporary file is removed and path is left as it was. The
 * new file gets the mode of the file it replaces, or 0644. A directory that does not exist is a
 * TH_ERR_IO error saying so. */
th_status th_rt_write_atomic(const char *who, const char *path, th_rt_write_fn write_fn, void *ctx);

#endif
