/* fuzz_io.c — libFuzzer target for the tensor file readers (.npy and .safetensors).
 *
 * The first input byte picks the parser and the mode (low two bits): 0 = raw .npy file, 1 = raw
 * .safetensors file, 2 = .npy header dict + data, 3 = .safetensors JSON header + data. In modes 2 and
 * 3 the rest of the input is "<header>\n<data>" and the target adds the binary prefix (magic, version
 * and header length / the 8-byte length) itself, so the fuzzer spends its time on the dict and JSON
 * validators instead of on keeping length fields consistent. The file is written to a temporary file
 * that the parser reads. Any crash, sanitizer report or leak is a bug:
 * malformed input must give TH_ERR_IO (or TH_ERR_NOMEM), never more. When a file parses, it is written
 * back with the matching writer, read again, and the two results must be identical (dtype, shape,
 * names and bytes), which exercises the writers and checks that reading is a faithful inverse.
 *
 * Build and run (from the repository root; not part of the CMake build):
 *   clang -g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L \
 *       -Iinclude -Isrc tests/fuzz/fuzz_io.c src/core/alloc.c src/core/error.c src/core/strbuf.c \
 *       src/core/dtype.c src/runtime/tensor.c src/runtime/rt_io.c src/runtime/npy.c \
 *       src/runtime/safetensors.c -lcjson -lm -o fuzz_io
 *   mkdir -p corpus && ./fuzz_io -max_total_time=60 -max_len=4096 corpus
 * Seed the corpus with a few valid files prefixed by the mode byte (e.g. "\x00" + np.save output,
 * "\x02{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n" + 8 data bytes). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/runtime.h"

static char in_path[64], out_path[64];

static void make_paths(void) {
  if (in_path[0]) return;
  const char *dir = getenv("TMPDIR");
  if (!dir) dir = "/tmp";
  snprintf(in_path, sizeof in_path, "%s/fuzz_io_in_%ld", dir, (long)getpid());
  snprintf(out_path, sizeof out_path, "%s/fuzz_io_out_%ld", dir, (long)getpid());
}

static void same_tensor(const th_tensor *a, const th_tensor *b) {
  if (th_tensor_dtype(a) != th_tensor_dtype(b) || th_tensor_ndim(a) != th_tensor_ndim(b)) abort();
  for (int i = 0; i < th_tensor_ndim(a); i++)
    if (th_tensor_shape(a)[i] != th_tensor_shape(b)[i]) abort();
  size_t n = (size_t)th_tensor_numel(a) * th_dtype_size(th_tensor_dtype(a));
  if (n && memcmp(th_tensor_data(a), th_tensor_data(b), n) != 0) abort();
}

static void fuzz_npy(void) {
  th_tensor *t = NULL;
  if (th_npy_read(in_path, &t) != TH_OK) {
    if (t) abort();
    return;
  }
  if (th_npy_write(out_path, t) != TH_OK) abort();
  th_tensor *u = NULL;
  if (th_npy_read(out_path, &u) != TH_OK) abort();
  same_tensor(t, u);
  th_tensor_release(u);
  th_tensor_release(t);
}

static void fuzz_safetensors(void) {
  int n = 0, m = 0;
  char **names = NULL, **names2 = NULL;
  th_tensor **ts = NULL, **ts2 = NULL;
  if (th_safetensors_read(in_path, &n, &names, &ts) != TH_OK) {
    if (n || names || ts) abort();
    return;
  }
  if (th_safetensors_write(out_path, n, (const char *const *)names, ts) != TH_OK) abort();
  if (th_safetensors_read(out_path, &m, &names2, &ts2) != TH_OK || m != n) abort();
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (j < m && strcmp(names[i], names2[j]) != 0) j++;
    if (j == m) abort();
    same_tensor(ts[i], ts2[j]);
  }
  th_safetensors_free(m, names2, ts2);
  th_safetensors_free(n, names, ts);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  make_paths();
  FILE *f = fopen(in_path, "wb");
  if (!f) return 0;
  int mode = data[0] & 3;
  const uint8_t *rest = data + 1;
  size_t n = size - 1;
  if (mode >= 2) { /* "<header>\n<data>": write the binary prefix for the header */
    const uint8_t *nl = memchr(rest, '\n', n);
    size_t hlen = nl ? (size_t)(nl - rest) + (mode == 2) : n; /* npy keeps its '\n' in the header */
    unsigned char pre[10];
    if (mode == 2) {
      memcpy(pre, "\x93NUMPY\x01\x00", 8);
      pre[8] = (unsigned char)(hlen & 0xff);
      pre[9] = (unsigned char)((hlen >> 8) & 0xff);
      fwrite(pre, 1, 10, f);
    } else {
      for (int i = 0; i < 8; i++) pre[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
      fwrite(pre, 1, 8, f);
    }
    fwrite(rest, 1, hlen, f);
    size_t skip = nl && mode == 3 ? hlen + 1 : hlen;
    if (skip < n) fwrite(rest + skip, 1, n - skip, f);
  } else if (n) {
    fwrite(rest, 1, n, f);
  }
  fclose(f);
  if (mode & 1)
    fuzz_safetensors();
  else
    fuzz_npy();
  unlink(in_path);
  unlink(out_path);
  return 0;
}
