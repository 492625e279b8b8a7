/* test_npy.c — .npy reading and writing.
 *
 * Round trips for every NumPy-representable dtype over 0-d, empty, 1-d, n-d, non-contiguous and large
 * (multi-megabyte, more than one staging chunk) tensors; the written preamble is compared byte for byte
 * with what numpy 1.24's np.save produces; hand-made files cover format versions 2.0 and 3.0 and
 * Fortran order. Every kind of bad input (missing file, truncated preamble/header/data, trailing bytes,
 * wrong magic or version, malformed dicts, unsupported and big-endian descrs) must fail with TH_ERR_IO
 * and a message naming the file. Writes are atomic: a failure (unwritable dtype, missing directory,
 * target is a directory, injected allocation failure mid-write) leaves the old file and no temporary. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime/runtime.h"

/* ---- helpers --------------------------------------------------------------------------------------- */

#include "tmpfiles.h"

/* Reads a whole file into a malloc'd buffer. */
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
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    const char *p = path_in(e->d_name);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
      rmdir(p);
    else
      unlink(p);
  }
  closedir(d);
}

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/th_test_npy_XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  clear_dir();
  return rmdir(tmpdir);
}

/* A .npy file image: preamble for `major` (1, 2 or 3), the dict padded to 64 bytes, then data. */
static unsigned char *make_npy(int major, const char *dict, const void *data, size_t ndata, size_t *len) {
  size_t dl = strlen(dict), pre = major == 1 ? 10 : 12;
  size_t hlen = dl + 1, pad = (64 - (pre + hlen) % 64) % 64;
  hlen += pad;
  unsigned char *b = malloc(pre + hlen + ndata + 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  b[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) b[8 + i] = (unsigned char)(hlen >> (8 * i));
  memcpy(b + pre, dict, dl);
  memset(b + pre + dl, ' ', pad);
  b[pre + hlen - 1] = '\n';
  if (ndata) memcpy(b + pre + hlen, data, ndata);
  *len = pre + hlen + ndata;
  return b;
}

static void write_npy(const char *path, int major, const char *dict, const void *data, size_t ndata) {
  size_t len;
  unsigned char *b = make_npy(major, dict, data, ndata, &len);
  write_file(path, b, len);
  free(b);
}

/* Fills t's bytes with a pattern valid for its dtype (bool: 0/1). */
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

/* Expects th_npy_read(path) to fail with TH_ERR_IO and a message containing path and `what`. */
static void expect_read_error(const char *path, const char *what) {
  th_tensor *t = (th_tensor *)(uintptr_t)1;
  th_status st = th_npy_read(path, &t);
  if (st != TH_ERR_IO || !strstr(th_last_error(), what) || !strstr(th_last_error(), path))
    fail_msg("reading %s: expected TH_ERR_IO mentioning \"%s\", got %d: %s", path, what, st, th_last_error());
  assert_null(t);
}

static const th_dtype npy_dtypes[] = {TH_BOOL, TH_U8, TH_I8, TH_I16, TH_I32, TH_I64, TH_F16, TH_F32, TH_F64};

/* ---- round trips ----------------------------------------------------------------------------------- */

static void test_round_trip_every_dtype(void **state) {
  (void)state;
  static const struct {
    int ndim;
    int64_t shape[4];
  } shapes[] = {
    {0, {0}}, {1, {0}}, {2, {0, 3}}, {1, {1}}, {1, {17}}, {2, {3, 5}}, {4, {2, 1, 3, 4}},
  };
  const char *p = path_in("rt.npy");
  for (size_t d = 0; d < sizeof npy_dtypes / sizeof npy_dtypes[0]; d++) {
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      th_tensor *t = th_tensor_new(npy_dtypes[d], shapes[s].ndim, shapes[s].shape);
      fill_pattern(t, (unsigned)(d * 31 + s));
      assert_int_equal(th_npy_write(p, t), TH_OK);
      th_tensor *r = NULL;
      assert_int_equal(th_npy_read(p, &r), TH_OK);
      assert_same_tensor(t, r);
      assert_int_equal((uintptr_t)th_tensor_data(r) % 64, 0);
      th_tensor_release(r);
      th_tensor_release(t);
    }
  }
  assert_int_equal(count_files(tmpdir), 1);
  clear_dir();
}

static void test_round_trip_non_contiguous_and_large(void **state) {
  (void)state;
  const char *p = path_in("big.npy");
  int64_t shape[2] = {700, 1001}; /* 2.8 MB of f32: the strided writer flushes several chunks */
  th_tensor *a = th_tensor_empty(TH_F32, 2, shape);
  float *ad = th_tensor_data(a);
  for (int64_t i = 0; i < 700 * 1001; i++) ad[i] = (float)i * 0.5f;
  int64_t tshape[2] = {1001, 700}, tstr[2] = {1, 1001};
  th_tensor *t = th_tensor_view(a, 2, tshape, tstr, 0);
  assert_int_equal(th_npy_write(p, t), TH_OK);
  th_tensor *r = NULL;
  assert_int_equal(th_npy_read(p, &r), TH_OK);
  assert_true(th_tensor_is_contiguous(r));
  assert_same_tensor(t, r);
  th_tensor_release(r);

  /* A broadcast view (stride 0) is written expanded. */
  int64_t bshape[2] = {3, 4}, bstr[2] = {0, 1};
  th_tensor *b = th_tensor_view(a, 2, bshape, bstr, 2);
  assert_int_equal(th_npy_write(p, b), TH_OK);
  assert_int_equal(th_npy_read(p, &r), TH_OK);
  for (int i = 0; i < 12; i++) assert_true(th_tensor_get_f64(r, i) == (double)(2 + i % 4) * 0.5);
  th_tensor_release(r);
  th_tensor_release(b);
  th_tensor_release(t);
  th_tensor_release(a);
  clear_dir();
}

/* The preamble must match numpy.save byte for byte (values printed by numpy 1.24). */
static void test_header_matches_numpy(void **state) {
  (void)state;
  static const struct {
    th_dtype dt;
    int ndim;
    int64_t shape[2];
    const char *dict;
  } cases[] = {
    {TH_F32, 2, {2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
    {TH_BOOL, 0, {0}, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }"},
    {TH_I16, 1, {5}, "{'descr': '<i2', 'fortran_order': False, 'shape': (5,), }"},
    {TH_U8, 2, {0, 3}, "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 3), }"},
  };
  const char *p = path_in("h.npy");
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    th_tensor *t = th_tensor_new(cases[k].dt, cases[k].ndim, cases[k].shape);
    assert_int_equal(th_npy_write(p, t), TH_OK);
    size_t n;
    unsigned char *b = slurp(p, &n);
    assert_int_equal(n, 128 + (size_t)th_tensor_numel(t) * th_dtype_size(cases[k].dt));
    assert_memory_equal(b, "\x93NUMPY\x01\x00v\x00", 10);
    size_t dl = strlen(cases[k].dict);
    assert_memory_equal(b + 10, cases[k].dict, dl);
    for (size_t i = 10 + dl; i < 127; i++) assert_int_equal(b[i], ' ');
    assert_int_equal(b[127], '\n');
    free(b);
    th_tensor_release(t);
  }
  clear_dir();
}

static void test_versions_2_and_3(void **state) {
  (void)state;
  int32_t data[3] = {7, -8, 9};
  for (int major = 1; major <= 3; major++) {
    const char *p = path_in("v.npy");
    write_npy(p, major, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<i4\"}", data, sizeof data);
    th_tensor *r = NULL;
    assert_int_equal(th_npy_read(p, &r), TH_OK);
    assert_int_equal(th_tensor_dtype(r), TH_I32);
    assert_memory_equal(th_tensor_data(r), data, sizeof data);
    th_tensor_release(r);
  }
  clear_dir();
}

static void test_fortran_order(void **state) {
  (void)state;
  const char *p = path_in("f.npy");
  /* a[i][j] = 10 i + j, shape (2, 3), stored column-major. */
  int32_t colmajor[6] = {0, 10, 1, 11, 2, 12};
  write_npy(p, 1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", colmajor, sizeof colmajor);
  th_tensor *r = NULL;
  assert_int_equal(th_npy_read(p, &r), TH_OK);
  assert_int_equal(th_tensor_shape(r)[0], 2);
  assert_int_equal(th_tensor_shape(r)[1], 3);
  assert_true(th_tensor_is_contiguous(r));
  int32_t want[6] = {0, 1, 2, 10, 11, 12};
  assert_memory_equal(th_tensor_data(r), want, sizeof want);
  th_tensor_release(r);

  /* 3-d: a[i][j][k] = 100 i + 10 j + k with shape (2, 3, 4); Fortran index = i + 2 j + 6 k. */
  double f3[24], c3[24];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) {
        f3[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
        c3[(i * 3 + j) * 4 + k] = 100 * i + 10 * j + k;
      }
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4), }", f3, sizeof f3);
  assert_int_equal(th_npy_read(p, &r), TH_OK);
  assert_memory_equal(th_tensor_data(r), c3, sizeof c3);
  th_tensor_release(r);

  /* 1-d and 0-d Fortran arrays are the same as C order. */
  write_npy(p, 1, "{'descr': '<i4', 'fortran_order': True, 'shape': (3,), }", want, 12);
  assert_int_equal(th_npy_read(p, &r), TH_OK);
  assert_memory_equal(th_tensor_data(r), want, 12);
  th_tensor_release(r);
  clear_dir();
}

/* ---- bad input ----------------------------------------------------------------------------------- */

static void test_missing_and_not_regular(void **state) {
  (void)state;
  expect_read_error(path_in("nope.npy"), "No such file");
  expect_read_error(tmpdir, "not a regular file");
  write_file(path_in("empty.npy"), "", 0);
  expect_read_error(path_in("empty.npy"), "empty");
  th_tensor *t;
  assert_int_equal(th_npy_read(NULL, &t), TH_ERR_IO);
  assert_int_equal(th_npy_read(path_in("x"), NULL), TH_ERR_VALUE);
  clear_dir();
}

static void test_truncated_and_bad_preamble(void **state) {
  (void)state;
  float data[2] = {1, 2};
  size_t len;
  unsigned char *good = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, 8, &len);
  const char *p = path_in("t.npy");

  write_file(p, good, 7); /* inside the preamble */
  expect_read_error(p, "truncated");
  write_file(p, good, 9); /* half of the header length */
  expect_read_error(p, "truncated");
  write_file(p, good, 40); /* inside the header */
  expect_read_error(p, "truncated");
  write_file(p, good, len - 1); /* one byte of data missing */
  expect_read_error(p, "truncated");
  write_file(p, good, len - 8); /* no data at all */
  expect_read_error(p, "the data needs 8 bytes, only 0");

  unsigned char *extra = malloc(len + 1);
  memcpy(extra, good, len);
  extra[len] = 0;
  write_file(p, extra, len + 1);
  expect_read_error(p, "1 unexpected bytes");
  free(extra);

  unsigned char bad[256];
  assert_true(len <= sizeof bad);
  memcpy(bad, good, len < sizeof bad ? len : sizeof bad); /* (bounded for GCC -O3's stringop check) */
  bad[1] = 'M';
  write_file(p, bad, len);
  expect_read_error(p, "bad magic");
  write_file(p, "PK\x03\x04", 4);
  expect_read_error(p, "bad magic");

  memcpy(bad, good, len);
  bad[6] = 4;
  write_file(p, bad, len);
  expect_read_error(p, "version 4.0");
  bad[6] = 1;
  bad[7] = 1;
  write_file(p, bad, len);
  expect_read_error(p, "version 1.1");

  memcpy(bad, good, len);
  bad[8] = 0xff; /* header length 255: past the end of the file */
  write_file(p, bad, len);
  expect_read_error(p, "truncated");

  unsigned char v2[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0x7f}; /* 2 GiB header */
  write_file(p, v2, sizeof v2);
  expect_read_error(p, "implausibly large");

  memcpy(bad, good, len);
  bad[30] = 0; /* NUL inside the dict */
  write_file(p, bad, len);
  expect_read_error(p, "NUL");
  free(good);
  clear_dir();
}

static void test_malformed_header_dicts(void **state) {
  (void)state;
  static const struct {
    const char *dict, *what;
  } cases[] = {
    {"", "expected '{'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,) ", "expected ',' or '}'"},
    {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }", "expected ',' or '}'"},
    {"{'descr': '<f4', 'fortran_order': Flase, 'shape': (2,), }", "True or False"},
    {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,), }", "True or False"},
    {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", "True or False"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", "must be a tuple"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", "must be a tuple"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': 2, }", "must be a tuple"},
    {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
    {"{'fortran_order': False, 'shape': (2,)}", "missing key 'descr'"},
    {"{'descr': '<f4', 'shape': (2,)}", "missing key 'fortran_order'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "unexpected key 'extra'"},
    {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "duplicate key 'descr'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk", "unexpected text after the dict"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }}", "unexpected text after the dict"},
    {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", "expected ',' or '}'"},
    {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }", "expected ':'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ", "expected a quoted string"},
    {"{'descr': 'a\\x00', 'fortran_order': False, 'shape': (2,), }", "unsupported character"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", "negative dimension"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "overflows int64"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,), }", "expected an integer"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (0x2,), }", "expected an integer"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (,), }", "expected an integer"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,,), }", "expected an integer"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", "expected ',' or ')'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 2), }", "more than 8"},
    {"{descr: '<f4', 'fortran_order': False, 'shape': (2,), }", "expected a quoted string"},
    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", "structured"},
    {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype descr '<c8'"},
    {"{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype descr '<u2'"},
    {"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype descr '|O'"},
    {"{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype descr"},
    {"{'descr': '<f', 'fortran_order': False, 'shape': (2,), }", "unsupported dtype descr"},
    {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", "big-endian"},
    {"{'descr': '>i8', 'fortran_order': False, 'shape': (2,), }", "big-endian"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "truncated"},
  };
  const char *p = path_in("m.npy");
  float data[2] = {1, 2};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    write_npy(p, 1, cases[k].dict, data, sizeof data);
    expect_read_error(p, cases[k].what);
  }
  /* Equivalent spellings numpy would also accept. */
  static const char *const ok[] = {
    "{'descr':'<f4','fortran_order':False,'shape':(2,)}",
    "{ 'shape' : ( 2 , ) , 'descr' : \"f4\" , 'fortran_order' : False }",
    "{'descr': '|f4', 'fortran_order': False, 'shape': (2L,), }",
    "{'descr': '=f4', 'fortran_order': False, 'shape': (2,), }\t\r",
  };
  for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
    write_npy(p, 1, ok[k], data, sizeof data);
    th_tensor *r = NULL;
    if (th_npy_read(p, &r) != TH_OK) fail_msg("%s: %s", ok[k], th_last_error());
    assert_memory_equal(th_tensor_data(r), data, sizeof data);
    th_tensor_release(r);
  }
  /* One-byte types have no byte order: '>u1' is fine. */
  write_npy(p, 1, "{'descr': '>u1', 'fortran_order': False, 'shape': (8,), }", data, sizeof data);
  th_tensor *r = NULL;
  assert_int_equal(th_npy_read(p, &r), TH_OK);
  assert_int_equal(th_tensor_dtype(r), TH_U8);
  th_tensor_release(r);
  clear_dir();
}

/* ---- writing errors and atomicity ------------------------------------------------------------------- */

static void test_write_errors(void **state) {
  (void)state;
  int64_t shape[1] = {4};
  const char *p = path_in("w.npy");
  th_tensor *bad[3] = {th_tensor_new(TH_BF16, 1, shape), th_tensor_new(TH_F8E4M3FN, 1, shape),
                       th_tensor_new(TH_F8E5M2, 1, shape)};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(th_npy_write(p, bad[i]), TH_ERR_TYPE);
    assert_non_null(strstr(th_last_error(), "safetensors"));
    assert_non_null(strstr(th_last_error(), th_dtype_name(th_tensor_dtype(bad[i]))));
    th_tensor_release(bad[i]);
  }
  assert_int_equal(count_files(tmpdir), 0);

  th_tensor *t = th_tensor_new(TH_F32, 1, shape);
  const char *missing = path_in("no/such/dir/w.npy");
  assert_int_equal(th_npy_write(missing, t), TH_ERR_IO);
  assert_non_null(strstr(th_last_error(), "does not exist"));
  assert_int_equal(access(missing, F_OK), -1);
  assert_int_equal(th_npy_write(NULL, t), TH_ERR_IO);
  assert_int_equal(th_npy_write("", t), TH_ERR_IO);
  assert_int_equal(th_npy_write(path_in("dir/"), t), TH_ERR_IO);
  assert_int_equal(th_npy_write(p, NULL), TH_ERR_VALUE);

  /* The target is a directory: rename fails, the temporary file is removed. */
  assert_int_equal(mkdir(path_in("sub"), 0755), 0);
  assert_int_equal(th_npy_write(path_in("sub"), t), TH_ERR_IO);
  assert_int_equal(count_files(tmpdir), 1);
  th_tensor_release(t);
  clear_dir();
}

static void test_write_replaces_atomically(void **state) {
  (void)state;
  const char *p = path_in("a.npy");
  int64_t shape[2] = {64, 33};
  th_tensor *old = th_tensor_new(TH_I16, 1, shape);
  assert_int_equal(th_npy_write(p, old), TH_OK);
  size_t old_len;
  unsigned char *old_bytes = slurp(p, &old_len);

  th_tensor *a = th_tensor_empty(TH_F64, 2, shape);
  fill_pattern(a, 5);
  int64_t tshape[2] = {33, 64}, tstr[2] = {1, 33};
  th_tensor *t = th_tensor_view(a, 2, tshape, tstr, 0); /* strided: the writer allocates mid-write */
  int failures = 0;
  for (long n = 1; n <= 6; n++) {
    th_alloc_fail_after(n);
    th_status st = th_npy_write(p, t);
    th_alloc_fail_after(0);
    assert_int_equal(count_files(tmpdir), 1); /* never a temporary left behind */
    size_t len;
    unsigned char *now = slurp(p, &len);
    if (st == TH_OK) {
      th_tensor *r = NULL;
      assert_int_equal(th_npy_read(p, &r), TH_OK);
      assert_same_tensor(t, r);
      th_tensor_release(r);
      free(now);
      break;
    }
    assert_int_equal(st, TH_ERR_NOMEM);
    failures++;
    assert_int_equal(len, old_len); /* the old file is intact */
    assert_memory_equal(now, old_bytes, len);
    free(now);
  }
  assert_true(failures >= 2);
  free(old_bytes);
  th_tensor_release(t);
  th_tensor_release(a);
  th_tensor_release(old);
  clear_dir();
}

static void test_read_fault_injection(void **state) {
  (void)state;
  const char *p = path_in("fi.npy");
  double f3[24];
  for (int i = 0; i < 24; i++) f3[i] = i;
  write_npy(p, 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4), }", f3, sizeof f3);
  int ok = 0;
  for (long n = 1; n <= 12; n++) {
    th_tensor *r = NULL;
    th_alloc_fail_after(n);
    th_status st = th_npy_read(p, &r);
    th_alloc_fail_after(0);
    if (st == TH_OK) {
      ok++;
      assert_non_null(r);
      assert_true(th_tensor_get_f64(r, 1) == 6.0); /* [0][0][1] is Fortran index 6 */
      th_tensor_release(r);
    } else {
      assert_int_equal(st, TH_ERR_NOMEM);
      assert_null(r);
    }
  }
  assert_true(ok > 0);
  clear_dir();
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_round_trip_every_dtype),
    cmocka_unit_test(test_round_trip_non_contiguous_and_large),
    cmocka_unit_test(test_header_matches_numpy),
    cmocka_unit_test(test_versions_2_and_3),
    cmocka_unit_test(test_fortran_order),
    cmocka_unit_test(test_missing_and_not_regular),
    cmocka_unit_test(test_truncated_and_bad_preamble),
    cmocka_unit_test(test_malformed_header_dicts),
    cmocka_unit_test(test_write_errors),
    cmocka_unit_test(test_write_replaces_atomically),
    cmocka_unit_test(test_read_fault_injection),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
