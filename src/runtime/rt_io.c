/* rt_io.c — file helpers for the tensor file formats (see rt_io.h): checked opens and reads, streaming
 * a strided tensor to a file in row-major order, and atomic writes.
 *
 * An atomic write creates "<dir>/.th_tmp_XXXXXX" with mkstemp (same directory, so rename(2) is atomic
 * on POSIX file systems), writes it completely, fsyncs it and renames it over the target. A reader
 * therefore sees the old file or the whole new one, never a partial file, and a failure (full disk,
 * bad tensor, out of memory) leaves the old file untouched and no temporary behind. */
#include "runtime/rt_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Staging buffer size for gathering non-contiguous tensors. */
#define TH_IO_CHUNK ((size_t)1 << 20)

static const char *errstr(int err, char *buf, size_t n) {
  if (strerror_r(err, buf, n) != 0) snprintf(buf, n, "error %d", err);
  return buf;
}

th_status th_rt_open_read(const char *who, const char *path, FILE **f, uint64_t *size) {
  char eb[128];
  *f = NULL;
  if (!path) return th_error(TH_ERR_IO, "%s: the path is NULL", who);
  /* stat before opening: fopen of a FIFO without a writer would block forever */
  struct stat pre;
  if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode))
    return th_error(TH_ERR_IO, "%s: '%s' is not a regular file", who, path);
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    int e = errno;
    return th_error(TH_ERR_IO, "%s: cannot open '%s': %s", who, path, errstr(e, eb, sizeof eb));
  }
  struct stat st;
  if (fstat(fileno(fp), &st) != 0) {
    int e = errno;
    fclose(fp);
    return th_error(TH_ERR_IO, "%s: cannot stat '%s': %s", who, path, errstr(e, eb, sizeof eb));
  }
  if (!S_ISREG(st.st_mode)) {
    fclose(fp);
    return th_error(TH_ERR_IO, "%s: '%s' is not a regular file", who, path);
  }
  *f = fp;
  *size = (uint64_t)st.st_size;
  return TH_OK;
}

th_status th_rt_read_exact(const char *who, const char *path, FILE *f, void *buf, size_t n, const char *what) {
  size_t got = n ? fread(buf, 1, n, f) : 0;
  if (got == n) return TH_OK;
  if (ferror(f)) {
    char eb[128];
    return th_error(TH_ERR_IO, "%s: '%s': read error in %s: %s", who, path, what, errstr(errno, eb, sizeof eb));
  }
  return th_error(TH_ERR_IO, "%s: '%s': file is truncated: %s needs %zu bytes, only %zu are left", who, path, what, n,
                  got);
}

static th_status write_bytes(const char *who, const char *path, FILE *f, const void *p, size_t n) {
  if (n == 0 || fwrite(p, 1, n, f) == n) return TH_OK;
  char eb[128];
  return th_error(TH_ERR_IO, "%s: cannot write '%s': %s", who, path, errstr(errno, eb, sizeof eb));
}

th_status th_rt_write_tensor_data(const char *who, const char *path, FILE *f, const th_tensor *t) {
  int64_t numel = th_tensor_numel(t);
  size_t isz = th_dtype_size(t->dtype);
  if (numel == 0) return TH_OK;
  if (th_tensor_is_contiguous(t)) return write_bytes(who, path, f, th_tensor_data(t), (size_t)numel * isz);

  /* Walk the elements in row-major order, gathering them into the staging buffer. */
  size_t cap = TH_IO_CHUNK / isz, used = 0;
  char *buf = th_malloc(cap * isz);
  if (!buf) return th_error(TH_ERR_NOMEM, "%s: out of memory writing '%s'", who, path);
  const char *base = (const char *)t->storage->data + (size_t)t->offset * isz;
  int64_t idx[TH_MAX_DIMS] = {0};
  th_status st = TH_OK;
  for (int64_t k = 0; k < numel && st == TH_OK; k++) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
    memcpy(buf + used * isz, base + (size_t)off * isz, isz);
    if (++used == cap) {
      st = write_bytes(who, path, f, buf, used * isz);
      used = 0;
    }
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
  if (st == TH_OK) st = write_bytes(who, path, f, buf, used * isz);
  th_free(buf);
  return st;
}

th_status th_rt_write_atomic(const char *who, const char *path, th_rt_write_fn write_fn, void *ctx) {
  char eb[128];
  if (!path || !*path) return th_error(TH_ERR_IO, "%s: the path is empty", who);
  size_t len = strlen(path);
  if (path[len - 1] == '/') return th_error(TH_ERR_IO, "%s: cannot write '%s': it names a directory", who, path);

  /* "<dir>/.th_tmp_XXXXXX", dir = everything up to the last '/' ("." if none). */
  const char *slash = strrchr(path, '/');
  size_t dirlen = slash ? (size_t)(slash - path) : 0;
  static const char suffix[] = ".th_tmp_XXXXXX";
  char *tmp = th_malloc(dirlen + 2 + sizeof suffix + 2);
  if (!tmp) return th_error(TH_ERR_NOMEM, "%s: out of memory writing '%s'", who, path);
  if (!slash) {
    memcpy(tmp, suffix, sizeof suffix);
  } else {
    memcpy(tmp, path, dirlen + 1); /* keeps the '/' ("/x" -> "/") */
    memcpy(tmp + dirlen + 1, suffix, sizeof suffix);
  }

  int fd = mkstemp(tmp);
  if (fd < 0) {
    int e = errno;
    th_status st;
    if (e == ENOENT || e == ENOTDIR)
      st = th_error(TH_ERR_IO, "%s: cannot write '%s': the directory '%.*s' does not exist", who, path,
                    (int)(slash ? (dirlen ? dirlen : 1) : 1), slash ? path : ".");
    else
      st =
        th_error(TH_ERR_IO, "%s: cannot create a temporary file next to '%s': %s", who, path, errstr(e, eb, sizeof eb));
    th_free(tmp);
    return st;
  }
  struct stat old;
  fchmod(fd, stat(path, &old) == 0 && S_ISREG(old.st_mode) ? (old.st_mode & 07777) : 0644);

  th_status st = TH_OK;
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    int e = errno;
    close(fd);
    st = th_error(TH_ERR_IO, "%s: cannot write '%s': %s", who, path, errstr(e, eb, sizeof eb));
  } else {
    st = write_fn(f, ctx);
    if (st == TH_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0)) {
      int e = errno;
      st = th_error(TH_ERR_IO, "%s: cannot write '%s': %s", who, path, errstr(e, eb, sizeof eb));
    }
    if (fclose(f) != 0 && st == TH_OK) {
      int e = errno;
      st = th_error(TH_ERR_IO, "%s: cannot write '%s': %s", who, path, errstr(e, eb, sizeof eb));
    }
  }
  if (st == TH_OK && rename(tmp, path) != 0) {
    int e = errno;
    st = th_error(TH_ERR_IO, "%s: cannot replace '%s': %s", who, path, errstr(e, eb, sizeof eb));
  }
  if (st != TH_OK) unlink(tmp);
  th_free(tmp);
  return st;
}
