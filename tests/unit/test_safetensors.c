/* test_safetensors.c — .safetensors reading and writing.
 *
 * Round trips of every dtype (including bf16 and both fp8 formats) with 0-d, empty and strided tensors;
 * the exact bytes of a small written file (layout by itemsize then name, header padded to 8); files
 * whose header lies (length beyond the file, invalid JSON, unknown dtype, bad shapes, offsets out of
 * range, sizes that do not match the shape, overlapping ranges, holes, trailing bytes, duplicate
 * names, bad __metadata__, invalid UTF-8) fail with TH_ERR_IO naming the file, the tensor and the
 * problem; write argument errors; atomic replacement under injected allocation failures; read fault
 * injection. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/runtime.h"

/* ---- helpers --------------------------------------------------------------------------------------- */

#include "tmpfiles.h"

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)len + 1);
  assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

static void clear_dir(void) {
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlink(path_in(e->d_name));
  closedir(d);
}

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/th_test_st_XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  clear_dir();
  return rmdir(tmpdir);
}

/* A .safetensors image: 8-byte LE length of `header` (used as is, no padding), header, ndata bytes
 * of data (0, 1, 2, ...). header_len_override != 0 replaces the stored length. */
static void write_st(const char *path, const char *header, size_t ndata, uint64_t header_len_override) {
  size_t hl = strlen(header);
  unsigned char *b = malloc(8 + hl + ndata + 1);
  uint64_t stored = header_len_override ? header_len_override : hl;
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(stored >> (8 * i));
  memcpy(b + 8, header, hl);
  for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (unsigned char)i;
  write_file(path, b, 8 + hl + ndata);
  free(b);
}

static void expect_read_error(const char *path, const char *what) {
  int n = -1;
  char **names = (char **)(uintptr_t)1;
  th_tensor **ts = (th_tensor **)(uintptr_t)1;
  th_status st = th_safetensors_read(path, &n, &names, &ts);
  if (st != TH_ERR_IO || !strstr(th_last_error(), what) || !strstr(th_last_error(), path))
    fail_msg("reading %s: expected TH_ERR_IO mentioning \"%s\", got %d: %s", path, what, st, th_last_error());
  assert_int_equal(n, 0);
  assert_null(names);
  assert_null(ts);
}

static void fill_pattern(th_tensor *t, unsigned seed) {
  unsigned char *p = th_tensor_data(t);
  size_t n = (size_t)th_tensor_numel(t) * th_dtype_size(th_tensor_dtype(t));
  for (size_t i = 0; i < n; i++) {
    unsigned v = (unsigned)(i * 2654435761u + seed);
    p[i] = th_tensor_dtype(t) == TH_BOOL ? (unsigned char)((v >> 7) & 1) : (unsigned char)(v >> 11);
  }
}

static void assert_same_tensor(const th_tensor *a, const th_tensor *b) {
  assert_int_equal(th_tensor_dtype(a), th_tensor_dtype(b));
  assert_int_equal(th_tensor_ndim(a), th_tensor_ndim(b));
  for (int i = 0; i < th_tensor_ndim(a); i++) assert_int_equal(th_tensor_shape(a)[i], th_tensor_shape(b)[i]);
  th_tensor *ca = th_tensor_contiguous_copy(a), *cb = th_tensor_contiguous_copy(b);
  size_t n = (size_t)th_tensor_numel(a) * th_dtype_size(th_tensor_dtype(a));
  if (n) assert_memory_equal(th_tensor_data(ca), th_tensor_data(cb), n);
  th_tensor_release(ca);
  th_tensor_release(cb);
}

static int find_name(int n, char **names, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return i;
  fail_msg("tensor '%s' not found", name);
  return -1;
}

/* ---- round trips ----------------------------------------------------------------------------------- */

static void test_round_trip_every_dtype(void **state) {
  (void)state;
  enum { N = TH_DTYPE_COUNT * 3 + 1 };
  th_tensor *ts[N];
  char namebuf[N][32];
  const char *names[N];
  int k = 0;
  for (int dt = 0; dt < TH_DTYPE_COUNT; dt++) {
    int64_t s3[3] = {2, 3, 5}, e2[2] = {4, 0};
    ts[k] = th_tensor_new((th_dtype)dt, 3, s3);
    fill_pattern(ts[k], (unsigned)dt);
    snprintf(namebuf[k], 32, "model.layer%d.weight", dt);
    k++;
    ts[k] = th_tensor_new((th_dtype)dt, 0, NULL);
    fill_pattern(ts[k], (unsigned)dt + 100);
    snprintf(namebuf[k], 32, "scalar_%s", th_dtype_name((th_dtype)dt));
    k++;
    ts[k] = th_tensor_new((th_dtype)dt, 2, e2);
    snprintf(namebuf[k], 32, "empty/%d", dt);
    k++;
  }
  /* A transposed view, written in C order. */
  int64_t shape[2] = {3, 4}, tshape[2] = {4, 3}, tstr[2] = {1, 4};
  th_tensor *base = th_tensor_new(TH_F32, 2, shape);
  fill_pattern(base, 7);
  ts[k] = th_tensor_view(base, 2, tshape, tstr, 0);
  snprintf(namebuf[k], 32, "weird \"name\"\\\n\xc3\xa9");
  k++;
  for (int i = 0; i < N; i++) names[i] = namebuf[i];

  const char *p = path_in("all.safetensors");
  assert_int_equal(th_safetensors_write(p, N, names, ts), TH_OK);
  int n = 0;
  char **rn = NULL;
  th_tensor **rt = NULL;
  assert_int_equal(th_safetensors_read(p, &n, &rn, &rt), TH_OK);
  assert_int_equal(n, N);
  for (int i = 0; i < N; i++) {
    int j = find_name(n, rn, names[i]);
    assert_same_tensor(ts[i], rt[j]);
    assert_int_equal((uintptr_t)th_tensor_data(rt[j]) % 64, 0);
  }
  /* The header is 8-byte aligned and every tensor is aligned to its itemsize in the file. */
  size_t len;
  unsigned char *b = slurp(p, &len);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
  assert_int_equal(hl % 8, 0);
  free(b);

  th_safetensors_free(n, rn, rt);
  for (int i = 0; i < N; i++) th_tensor_release(ts[i]);
  th_tensor_release(base);
  clear_dir();
}

static void test_exact_bytes_and_empty_file(void **state) {
  (void)state;
  int64_t s2[1] = {2}, s1[1] = {1};
  th_tensor *b = th_tensor_new(TH_F32, 1, s2), *a = th_tensor_new(TH_F64, 1, s1), *c = th_tensor_new(TH_U8, 1, s1);
  ((float *)th_tensor_data(b))[0] = 1.0f;
  ((float *)th_tensor_data(b))[1] = -2.0f;
  ((double *)th_tensor_data(a))[0] = 0.5;
  ((uint8_t *)th_tensor_data(c))[0] = 0xab;
  const char *names[3] = {"b", "c", "a"};
  th_tensor *ts[3] = {b, c, a};
  const char *p = path_in("x.safetensors");
  assert_int_equal(th_safetensors_write(p, 3, names, ts), TH_OK);
  const char *hdr = "{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                    "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[16,17]}}";
  size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8, len;
  unsigned char *bytes = slurp(p, &len);
  assert_int_equal(len, 8 + padded + 17);
  assert_int_equal(bytes[0], padded);
  for (int i = 1; i < 8; i++) assert_int_equal(bytes[i], 0);
  assert_memory_equal(bytes + 8, hdr, hl);
  for (size_t i = hl; i < padded; i++) assert_int_equal(bytes[8 + i], ' ');
  assert_memory_equal(bytes + 8 + padded, th_tensor_data(a), 8);
  assert_memory_equal(bytes + 8 + padded + 8, th_tensor_data(b), 8);
  assert_int_equal(bytes[8 + padded + 16], 0xab);
  free(bytes);
  th_tensor_release(a);
  th_tensor_release(b);
  th_tensor_release(c);

  /* No tensors: "{}" padded to 8. */
  assert_int_equal(th_safetensors_write(p, 0, NULL, NULL), TH_OK);
  bytes = slurp(p, &len);
  assert_int_equal(len, 16);
  assert_memory_equal(bytes, "\x08\0\0\0\0\0\0\0{}      ", 16);
  free(bytes);
  int n = -1;
  char **rn;
  th_tensor **rt;
  assert_int_equal(th_safetensors_read(p, &n, &rn, &rt), TH_OK);
  assert_int_equal(n, 0);
  th_safetensors_free(n, rn, rt);
  clear_dir();
}

/* Files as the Python library writes them: metadata, unpadded or padded headers, any key order. */
static void test_reads_hand_written_files(void **state) {
  (void)state;
  const char *p = path_in("h.safetensors");
  write_st(p,
           "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"shape\":[2,2],\"dtype\":\"BF16\",\"data_offsets\":"
           "[0,8]},"
           "\"s\":{\"data_offsets\":[8,9],\"dtype\":\"F8_E5M2\",\"shape\":[]},"
           "\"z\":{\"dtype\":\"I64\",\"shape\":[0, 5],\"data_offsets\":[9,9]}}   ",
           9, 0);
  int n;
  char **names;
  th_tensor **ts;
  assert_int_equal(th_safetensors_read(p, &n, &names, &ts), TH_OK);
  assert_int_equal(n, 3);
  assert_string_equal(names[0], "w"); /* header order */
  assert_string_equal(names[1], "s");
  assert_string_equal(names[2], "z");
  assert_int_equal(th_tensor_dtype(ts[0]), TH_BF16);
  assert_int_equal(th_tensor_shape(ts[0])[1], 2);
  const uint8_t w[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  assert_memory_equal(th_tensor_data(ts[0]), w, 8);
  assert_int_equal(th_tensor_ndim(ts[1]), 0);
  assert_int_equal(*(uint8_t *)th_tensor_data(ts[1]), 8);
  assert_int_equal(th_tensor_numel(ts[2]), 0);
  th_safetensors_free(n, names, ts);
  clear_dir();
}

/* ---- lies ---------------------------------------------------------------------------------------- */

static void test_header_lies(void **state) {
  (void)state;
  static const struct {
    const char *header;
    size_t ndata;
    uint64_t len;
    const char *what;
  } cases[] = {
    {"{}", 0, 1000, "exceeds"},
    {"{}", 0, UINT64_MAX, "exceeds"},
    {"{\"a\":", 0, 0, "not valid JSON"},
    {"{\"a\":{}} trailing", 0, 0, "not valid JSON"},
    {"[1, 2]", 0, 0, "not a JSON object"},
    {"", 0, 0, "not valid JSON"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, NULL}, /* control: valid */
    {"{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, "unsupported dtype \"F31\""},
    {"{\"a\":{\"dtype\":\"U16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2, 0, "unsupported dtype \"U16\""},
    {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, "\"dtype\" must be a string"},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, "missing \"dtype\""},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, 0, "missing \"shape\""},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, 0, "missing \"data_offsets\""},
    {"{\"a\":[1]}", 0, 0, "expected a JSON object"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0, "shape[0] must be"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, 0, "shape[0] must be"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, 0, "shape[0] must be"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", 4, 0, "\"shape\" must be an array"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0, "9 dimensions"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, 0, "two non-negative integers"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, 0, "two non-negative integers"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, 0, "two non-negative integers"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, 0, "end before they begin"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, 0, "reach past the 4-byte data buffer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, 0, "needs 8"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, 0, "needs"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
     6, 0, "tensor 'b' (bytes [2, 6)) overlaps tensor 'a'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     4, 0, "overlaps"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     12, 0, "hole of 4 bytes"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0,
     "hole of 4 bytes in the data buffer before tensor 'a'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 7, 0, "3 bytes at the end"},
    {"{}", 5, 0, "5 bytes of data but no tensors"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, 0, "'a' appears twice"},
    {"{\"__metadata__\":{\"k\":1}}", 0, 0, "\"__metadata__\" value \"k\" must be a string"},
    {"{\"__metadata__\":[]}", 0, 0, "\"__metadata__\" must be an object"},
    {"{\"\xff\":{}}", 0, 0, "not valid UTF-8"},
    {"{\"\xc0\x80\":{}}", 0, 0, "not valid UTF-8"},
  };
  const char *p = path_in("lie.safetensors");
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    write_st(p, cases[k].header, cases[k].ndata, cases[k].len);
    if (cases[k].what) {
      expect_read_error(p, cases[k].what);
      continue;
    }
    int n;
    char **names;
    th_tensor **ts;
    assert_int_equal(th_safetensors_read(p, &n, &names, &ts), TH_OK);
    th_safetensors_free(n, names, ts);
  }
  /* Files shorter than the length field, a NUL inside the header, missing files. */
  write_file(p, "\x02\0\0", 3);
  expect_read_error(p, "less than the 8-byte header length");
  write_file(p, "\x04\0\0\0\0\0\0\0{}\0 ", 12);
  expect_read_error(p, "NUL");
  expect_read_error(path_in("missing.safetensors"), "No such file");
  expect_read_error(tmpdir, "not a regular file");
  /* The data itself truncated (header claims a buffer the file does not hold) is a range lie. */
  write_st(p, "{\"a\":{\"dtype\":\"F64\",\"shape\":[4],\"data_offsets\":[0,32]}}", 31, 0);
  expect_read_error(p, "reach past the 31-byte data buffer");
  clear_dir();
}

/* ---- writing --------------------------------------------------------------------------------------- */

static void test_write_errors(void **state) {
  (void)state;
  int64_t s[1] = {3};
  th_tensor *t = th_tensor_new(TH_F32, 1, s);
  const char *p = path_in("w.safetensors");
  const char *dup[2] = {"x", "x"};
  th_tensor *two[2] = {t, t};
  assert_int_equal(th_safetensors_write(p, 2, dup, two), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "'x' is given twice"));
  const char *meta[1] = {"__metadata__"};
  assert_int_equal(th_safetensors_write(p, 1, meta, two), TH_ERR_VALUE);
  const char *bad_utf8[1] = {"\xff"};
  assert_int_equal(th_safetensors_write(p, 1, bad_utf8, two), TH_ERR_VALUE);
  const char *nul_name[1] = {NULL};
  assert_int_equal(th_safetensors_write(p, 1, nul_name, two), TH_ERR_VALUE);
  th_tensor *none[1] = {NULL};
  assert_int_equal(th_safetensors_write(p, 1, dup, none), TH_ERR_VALUE);
  assert_int_equal(th_safetensors_write(p, -1, dup, two), TH_ERR_VALUE);
  assert_int_equal(th_safetensors_write(p, 1, NULL, two), TH_ERR_VALUE);
  assert_int_equal(count_files(tmpdir), 0);
  const char *missing = path_in("nope/w.safetensors");
  assert_int_equal(th_safetensors_write(missing, 1, dup, two), TH_ERR_IO);
  assert_non_null(strstr(th_last_error(), "does not exist"));
  assert_int_equal(access(missing, F_OK), -1);
  assert_int_equal(count_files(tmpdir), 0);
  int n;
  char **names;
  th_tensor **ts;
  assert_int_equal(th_safetensors_read(p, NULL, &names, &ts), TH_ERR_VALUE);
  (void)n;
  th_tensor_release(t);
}

static void test_write_fault_injection_is_atomic(void **state) {
  (void)state;
  const char *p = path_in("a.safetensors");
  int64_t s[2] = {40, 30}, ts_[2] = {30, 40}, tstr[2] = {1, 30};
  th_tensor *old = th_tensor_new(TH_I8, 1, s);
  const char *oname[1] = {"old"};
  assert_int_equal(th_safetensors_write(p, 1, oname, &old), TH_OK);
  size_t old_len, len;
  unsigned char *old_bytes = slurp(p, &old_len);

  th_tensor *a = th_tensor_new(TH_BF16, 2, s);
  fill_pattern(a, 3);
  th_tensor *t = th_tensor_view(a, 2, ts_, tstr, 0);
  const char *names[3] = {"t", "a", "s"};
  th_tensor *scalar = th_tensor_new(TH_F8E4M3FN, 0, NULL);
  th_tensor *ts[3] = {t, a, scalar};
  int failures = 0;
  for (long k = 1; k <= 12; k++) {
    th_alloc_fail_after(k);
    th_status st = th_safetensors_write(p, 3, names, ts);
    th_alloc_fail_after(0);
    assert_int_equal(count_files(tmpdir), 1);
    unsigned char *now = slurp(p, &len);
    if (st == TH_OK) {
      free(now);
      break;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    failures++;
    assert_int_equal(len, old_len);
    assert_memory_equal(now, old_bytes, len);
    free(now);
  }
  assert_true(failures >= 3);
  free(old_bytes);

  /* Read it back under fault injection too. */
  int ok = 0;
  for (long k = 1; k <= 40; k++) {
    int n = -1;
    char **rn = NULL;
    th_tensor **rt = NULL;
    th_alloc_fail_after(k);
    th_status st = th_safetensors_read(p, &n, &rn, &rt);
    th_alloc_fail_after(0);
    if (st != TH_OK) {
      assert_int_equal(st, TH_ERR_NOMEM);
      assert_int_equal(n, 0);
      continue;
    }
    ok++;
    assert_int_equal(n, 3);
    assert_same_tensor(t, rt[find_name(n, rn, "t")]);
    assert_same_tensor(a, rt[find_name(n, rn, "a")]);
    th_safetensors_free(n, rn, rt);
  }
  assert_true(ok > 0);
  th_tensor_release(scalar);
  th_tensor_release(t);
  th_tensor_release(a);
  th_tensor_release(old);
  clear_dir();
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_round_trip_every_dtype),
    cmocka_unit_test(test_exact_bytes_and_empty_file),
    cmocka_unit_test(test_reads_hand_written_files),
    cmocka_unit_test(test_header_lies),
    cmocka_unit_test(test_write_errors),
    cmocka_unit_test(test_write_fault_injection_is_atomic),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
