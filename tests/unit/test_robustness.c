/* test_robustness.c — hostile inputs to the public API and to the ops must be clean errors (a status
 * and a one-line message), never undefined behaviour (the sanitizer build aborts on any UBSan report).
 *
 * Covered: shapes whose size overflows int64 (rejected by th_value_new_tensor and everything built on
 * it: inputs, meta outputs, parsed type comments at use and at compile, th_value_numel), integer
 * arguments near INT64 limits in the shape ops (getitem, slice_prim, chunk, split, narrow, reshape, cat)
 * with PyTorch's results or clean errors, empty tensors with huge strides in the eager kernels, the
 * npy / safetensors error path that formatted the last-error buffer into itself, C API misuse (NULL
 * pointers, negative counts, malformed arguments, values of another trace), names and strings that the
 * printer writes as code, nll_loss / cross_entropy targets out of range (an error at run time; ignored
 * targets may be anything), and softmax / log_softmax / logsumexp over an empty dim (PyTorch's results). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/ir.h"
#include "thunder/jit.h"
#include "thunder/tensor.h"

static const th_device CPU = {TH_CPU, 0};

/* ---- helpers ---------------------------------------------------------------------------------------- */

#define EXPECT_ERR(expr, code, needle)                                                                                 \
  do {                                                                                                                 \
    th_status st_ = (expr);                                                                                            \
    if (st_ != (code) || !strstr(th_last_error(), (needle)))                                                           \
      fail_msg("%s: expected status %d with \"%s\", got %d: %s", #expr, (int)(code), (needle), (int)st_,               \
               th_last_error());                                                                                       \
    assert_null(strchr(th_last_error(), '\n'));                                                                        \
  } while (0)

static th_value *input(th_trace *tr, const char *name, th_dtype dt, int nd, const int64_t *shape) {
  th_value *v = th_trace_add_tensor_input(tr, name, dt, CPU, nd, shape);
  if (!v) fail_msg("input %s: %s", name, th_last_error());
  return v;
}

static th_arg ints(th_arg *items, int n, const int64_t *v) {
  for (int i = 0; i < n; i++) items[i] = th_arg_int(v[i]);
  return th_arg_tuple(n, items);
}

static th_arg slice3(int64_t start, int64_t stop, int64_t step) {
  th_arg s = th_arg_none();
  s.kind = TH_ARG_SLICE;
  s.u.slice.has_start = s.u.slice.has_stop = s.u.slice.has_step = true;
  s.u.slice.start = start;
  s.u.slice.stop = stop;
  s.u.slice.step = step;
  return s;
}

static th_status callv(th_trace *tr, const char *op, int n, const th_arg *args, th_arg *out) {
  return th_trace_call(tr, op, n, args, 0, NULL, NULL, out);
}

static th_arg call_ok(th_trace *tr, const char *op, int n, const th_arg *args) {
  th_arg out;
  if (callv(tr, op, n, args, &out) != TH_OK) fail_msg("%s: %s", op, th_last_error());
  return out;
}

static void assert_shape(const th_value *v, int nd, const int64_t *shape) {
  assert_non_null(v);
  assert_int_equal(th_value_ndim(v), nd);
  for (int i = 0; i < nd; i++) assert_int_equal(th_value_shape(v)[i], shape[i]);
}

/* A float32 tensor holding 0, 1, 2, ... */
static th_tensor *iota_f32(int nd, const int64_t *shape) {
  th_tensor *t = th_tensor_empty(TH_F32, nd, shape);
  assert_non_null(t);
  for (int64_t i = 0; i < th_tensor_numel(t); i++) ((float *)th_tensor_data(t))[i] = (float)i;
  return t;
}

/* Compiles tr and runs it on the inputs; returns the run status (outputs in *out / *nout). */
static th_status compile_run_with(const th_trace *tr, const char *exec, int nin, th_tensor **in, int *nout,
                                  th_tensor ***out) {
  th_compile_options o = {0};
  o.executors = &exec;
  o.nexecutors = 1;
  th_program *p = NULL;
  th_status st = th_program_compile(tr, exec ? &o : NULL, &p);
  if (st != TH_OK) fail_msg("compile: %s", th_last_error());
  st = th_program_run(p, nin, in, nout, out);
  th_program_free(p);
  return st;
}

static th_status compile_run(const th_trace *tr, int nin, th_tensor **in, int *nout, th_tensor ***out) {
  return compile_run_with(tr, NULL, nin, in, nout, out);
}

static void free_outputs(int n, th_tensor **out) {
  for (int i = 0; i < n; i++) th_tensor_release(out[i]);
  free(out);
}

/* ---- H4: shapes and integer arguments near the int64 limits ------------------------------------------ */

static void test_huge_shapes_rejected(void **state) {
  (void)state;
  th_trace *tr = th_trace_new(NULL);
  const int64_t big[2] = {99999999999LL, 99999999999LL};
  assert_null(th_trace_add_tensor_input(tr, "a", TH_F32, CPU, 2, big));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "shape [99999999999, 99999999999] has more elements than fit in int64");
  assert_non_null(strstr(th_last_error(), "input 'a'"));
  const int64_t bytes[2] = {INT64_C(1) << 61, 4}; /* 2^63 elements */
  assert_null(th_trace_add_tensor_input(tr, "b", TH_F32, CPU, 2, bytes));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "more elements than fit in int64");
  const int64_t bytes2[1] = {INT64_C(1) << 62}; /* 2^62 elements fit, 2^64 bytes do not */
  assert_null(th_trace_add_tensor_input(tr, "c", TH_F32, CPU, 1, bytes2));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "has more bytes than fit in int64");
  th_value *c8 = th_trace_add_tensor_input(tr, "c8", TH_I8, CPU, 1, bytes2); /* 2^62 bytes: fine */
  assert_non_null(c8);
  const int64_t zero[2] = {0, INT64_MAX}; /* no elements, but its strides would not fit */
  assert_null(th_trace_add_tensor_input(tr, "d", TH_F32, CPU, 2, zero));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "shape [0, 9223372036854775807] of float32 is too large");
  const int64_t zero_ok[2] = {0, INT64_C(1) << 60};
  th_value *e = th_trace_add_tensor_input(tr, "e", TH_F32, CPU, 2, zero_ok);
  assert_non_null(e);
  assert_int_equal(th_value_numel(e), 0);
  /* meta outputs are bounded the same way, with the op named */
  th_arg si[3],
    fargs[2] = {ints(si, 3, (const int64_t[]){99999999999LL, 99999999999LL, 99999999999LL}), th_arg_float(1.0)};
  th_arg out;
  EXPECT_ERR(callv(tr, "ltorch.full", 2, fargs, &out), TH_ERR_VALUE, "more elements than fit in int64");
  assert_non_null(strstr(th_last_error(), "prims.full"));
  th_value *x = input(tr, "x", TH_F32, 1, (const int64_t[]){2});
  th_arg bi[1], bs[2],
    bargs[3] = {th_arg_value(x), ints(bs, 2, (const int64_t[]){INT64_C(1) << 62, 2}),
                ints(bi, 1, (const int64_t[]){1})};
  EXPECT_ERR(callv(tr, "prims.broadcast_in_dim", 3, bargs, &out), TH_ERR_VALUE, "prims.broadcast_in_dim: shape");
  /* cat: the sizes' sum overflows int64 (two i8[2^62] tensors); 3 x i8[2^61] fits */
  th_arg two[2] = {th_arg_value(c8), th_arg_value(c8)}, cargs[2] = {th_arg_list(2, two), th_arg_int(0)};
  EXPECT_ERR(callv(tr, "ltorch.cat", 2, cargs, &out), TH_ERR_RUNTIME,
             "prims.cat: the concatenated size along dimension 0 overflows int64");
  th_value *h8 = input(tr, "h8", TH_I8, 1, (const int64_t[]){INT64_C(1) << 61});
  th_arg three[3] = {th_arg_value(h8), th_arg_value(h8), th_arg_value(h8)};
  cargs[0] = th_arg_list(3, three);
  assert_shape(call_ok(tr, "ltorch.cat", 2, cargs).u.value, 1, (const int64_t[]){3 * (INT64_C(1) << 61)});
  th_trace_free(tr);
}

static const char huge_use[] = "def computation(x):\n"
                               "  # x: \"cpu f32[99999999999, 99999999999]\"\n"
                               "  t0 = ltorch.neg(x)\n"
                               "  return t0\n";
static const char huge_ret[] = "def computation(x):\n"
                               "  # x: \"cpu f32[99999999999, 99999999999]\"\n"
                               "  return x\n";
static const char zero_ret[] = "def computation(x):\n"
                               "  # x: \"cpu f32[0, 9223372036854775807]\"\n"
                               "  return x\n";

static void test_parsed_huge_shapes(void **state) {
  (void)state;
  th_trace *tr = NULL;
  /* a parsed type comment is written into the value directly: used as an argument, it is rejected */
  th_status st = th_trace_parse(huge_use, "huge.py", &tr);
  if (st == TH_OK || !strstr(th_last_error(), "more elements than fit in int64"))
    fail_msg("expected an int64 overflow error, got %d: %s", st, th_last_error());
  assert_null(tr);
  /* only returned: numel is -1 (overflow), compiling is an error */
  const char *texts[2] = {huge_ret, zero_ret};
  const char *msgs[2] = {"value x: shape [99999999999, 99999999999] has more elements than fit in int64",
                         "value x: shape [0, 9223372036854775807] of float32 is too large"};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(th_trace_parse(texts[k], "ret.py", &tr), TH_OK);
    assert_int_equal(th_value_numel(th_trace_input(tr, 0)), k == 0 ? -1 : 0);
    th_program *p = (th_program *)(uintptr_t)1;
    EXPECT_ERR(th_program_compile(tr, NULL, &p), TH_ERR_VALUE, msgs[k]);
    assert_null(p);
    th_trace_free(tr);
  }
}

static void test_extreme_int_args(void **state) {
  (void)state;
  const int64_t M = INT64_MAX;
  const int64_t s234[3] = {2, 3, 4};
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 3, s234);
  th_arg ax = th_arg_value(x), out;

  /* x[-M:M:M] = x[0:1] (Python slice clamping; ceil without overflow) */
  th_arg g1[2] = {ax, slice3(-M, M, M)};
  th_value *r1 = call_ok(tr, "ltorch.getitem", 2, g1).u.value;
  assert_shape(r1, 3, (const int64_t[]){1, 3, 4});
  /* prims.slice_prim with a stride of M */
  th_arg a0[3], a1[3], a2[3];
  th_arg sp[4] = {ax, ints(a0, 3, (const int64_t[]){0, 0, 0}), ints(a1, 3, s234),
                  ints(a2, 3, (const int64_t[]){M, 1, 1})};
  th_value *r2 = call_ok(tr, "prims.slice_prim", 4, sp).u.value;
  assert_shape(r2, 3, (const int64_t[]){1, 3, 4});
  /* chunk(x, M, 2): ceil(4 / M) = 1 per piece -> 4 pieces (PyTorch) */
  th_arg ch[3] = {ax, th_arg_int(M), th_arg_int(2)};
  th_arg r3 = call_ok(tr, "ltorch.chunk", 3, ch);
  assert_int_equal(r3.u.seq.n, 4);
  for (int i = 0; i < 4; i++) assert_shape(r3.u.seq.items[i].u.value, 3, (const int64_t[]){2, 3, 1});
  /* split(x, M, 2): one piece, the whole dim */
  th_arg sp1[3] = {ax, th_arg_int(M), th_arg_int(2)};
  th_arg r4 = call_ok(tr, "ltorch.split", 3, sp1);
  assert_int_equal(r4.u.seq.n, 1);
  assert_shape(r4.u.seq.items[0].u.value, 3, s234);
  /* split with sizes whose sum overflows, narrow past the end, reshape with an overflowing product */
  th_arg li[3], sp2[3] = {ax, th_arg_list(3, ints(li, 3, (const int64_t[]){M, M, 2}).u.seq.items), th_arg_int(2)};
  EXPECT_ERR(callv(tr, "ltorch.split", 3, sp2, &out), TH_ERR_RUNTIME, "split_with_sizes expects split_sizes to sum");
  th_arg nw[4] = {ax, th_arg_int(2), th_arg_int(3), th_arg_int(M)};
  EXPECT_ERR(callv(tr, "ltorch.narrow", 4, nw, &out), TH_ERR_RUNTIME,
             "start (3) + length (9223372036854775807) exceeds dimension size (4).");
  th_arg ri[3], rs[2] = {ax, ints(ri, 3, (const int64_t[]){M, M, -1})};
  EXPECT_ERR(callv(tr, "ltorch.reshape", 2, rs, &out), TH_ERR_RUNTIME, "is invalid for input of size 24");
  th_arg ri2[2], rs2[2] = {ax, ints(ri2, 2, (const int64_t[]){M, M})};
  EXPECT_ERR(callv(tr, "ltorch.reshape", 2, rs2, &out), TH_ERR_RUNTIME, "is invalid for input of size 24");
  /* chunk of an empty dim makes `chunks` pieces: M of them is a clean error, not a huge allocation */
  th_value *e = input(tr, "e", TH_F32, 2, (const int64_t[]){2, 0});
  th_arg ce[3] = {th_arg_value(e), th_arg_int(M), th_arg_int(1)};
  EXPECT_ERR(callv(tr, "ltorch.chunk", 3, ce, &out), TH_ERR_NOT_IMPLEMENTED, "at most");
  th_arg ce2[3] = {th_arg_value(e), th_arg_int(3), th_arg_int(1)};
  assert_int_equal(call_ok(tr, "ltorch.chunk", 3, ce2).u.seq.n, 3);

  /* run them: values as PyTorch's */
  th_value *outs[3] = {r1, r3.u.seq.items[3].u.value, r4.u.seq.items[0].u.value};
  th_arg items[3] = {th_arg_value(outs[0]), th_arg_value(outs[1]), th_arg_value(outs[2])};
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(3, items)), TH_OK);
  th_tensor *in[2] = {iota_f32(3, s234), th_tensor_empty(TH_F32, 2, (const int64_t[]){2, 0})};
  int nout = 0;
  th_tensor **res = NULL;
  if (compile_run(tr, 2, in, &nout, &res) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, 3);
  for (int i = 0; i < 12; i++) assert_true(th_tensor_get_f64(res[0], i) == (double)i);          /* x[0] */
  for (int i = 0; i < 6; i++) assert_true(th_tensor_get_f64(res[1], i) == (double)(4 * i + 3)); /* x[..., 3:4] */
  for (int i = 0; i < 24; i++) assert_true(th_tensor_get_f64(res[2], i) == (double)i);
  free_outputs(nout, res);
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
}

/* An empty input whose strides are as large as th_tensor_view allows (anything, when it has no
 * elements): the eager kernels must not multiply them out. */
static void test_empty_views_with_huge_strides(void **state) {
  (void)state;
  const int64_t s04[2] = {0, 4}, s30[2] = {3, 0}, s43[2] = {4, 3};
  th_trace *tr = th_trace_new(NULL);
  th_value *x = input(tr, "x", TH_F32, 2, s04), *y = input(tr, "y", TH_F32, 2, s43);
  th_value *z = input(tr, "z", TH_F32, 2, s30);
  th_arg ax = th_arg_value(x), ay = th_arg_value(y);
  th_value *n = call_ok(tr, "ltorch.neg", 1, &ax).u.value;
  th_arg mm[2] = {ax, ay};
  th_value *m = call_ok(tr, "ltorch.matmul", 2, mm).u.value;
  th_arg sl = th_arg_none();
  sl.kind = TH_ARG_SLICE;
  sl.u.slice.has_step = true;
  sl.u.slice.step = 2;
  th_arg gz[2] = {th_arg_value(z), sl};
  th_value *g = call_ok(tr, "ltorch.getitem", 2, gz).u.value;
  th_arg items[3] = {th_arg_value(n), th_arg_value(m), th_arg_value(g)};
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(3, items)), TH_OK);

  th_tensor *base = th_tensor_empty(TH_F32, 1, (const int64_t[]){16});
  assert_non_null(base);
  th_tensor *xv = th_tensor_view(base, 2, s04, (const int64_t[]){INT64_MAX, INT64_MAX / 2}, 0);
  th_tensor *zv = th_tensor_view(base, 2, s30, (const int64_t[]){INT64_MAX, INT64_MAX}, 0);
  assert_non_null(xv);
  assert_non_null(zv);
  th_tensor *yt = iota_f32(2, s43);
  th_tensor *in[3] = {xv, yt, zv};
  int nout = 0;
  th_tensor **res = NULL;
  if (compile_run_with(tr, "eager", 3, in, &nout, &res) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, 3);
  assert_int_equal(th_tensor_numel(res[0]), 0);
  assert_int_equal(th_tensor_numel(res[1]), 0);
  assert_int_equal(th_tensor_shape(res[2])[0], 2);
  assert_int_equal(th_tensor_numel(res[2]), 0);
  free_outputs(nout, res);
  th_tensor_release(xv);
  th_tensor_release(zv);
  th_tensor_release(yt);
  th_tensor_release(base);
  th_trace_free(tr);
}

/* ---- H5: readers must not format the last-error buffer into itself ---------------------------------- */

#include "tmpfiles.h"

/* The message appears once, after the reader's own prefix (not garbled by an overlapping copy). */
static void expect_invalid_shape(th_status st, const char *prefix, const char *path) {
  const char *msg = th_last_error();
  if (st != TH_ERR_IO || strncmp(msg, prefix, strlen(prefix)) || !strstr(msg, path) ||
      !strstr(msg, "th_tensor_empty: shape overflows int64"))
    fail_msg("expected TH_ERR_IO \"%s '%s': ... th_tensor_empty: shape overflows int64\", got %d: %s", prefix, path, st,
             msg);
  const char *first = strstr(msg, prefix);
  assert_null(strstr(first + 1, prefix)); /* the prefix once */
}

static void test_reader_errors_not_garbled(void **state) {
  (void)state;
  /* .npy: shape (0, 2^52, 2^52) has no data bytes but strides th_tensor_empty rejects */
  char hdr[128];
  const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4503599627370496, 4503599627370496), }";
  size_t dl = strlen(dict), total = 10 + dl + 1;
  size_t pad = (64 - total % 64) % 64;
  unsigned char npy[256];
  memcpy(npy, "\x93NUMPY\x01\x00", 8);
  uint16_t hl = (uint16_t)(dl + pad + 1);
  npy[8] = (unsigned char)(hl & 0xff);
  npy[9] = (unsigned char)(hl >> 8);
  memcpy(npy + 10, dict, dl);
  memset(npy + 10 + dl, ' ', pad);
  npy[10 + dl + pad] = '\n';
  write_file(path_in("shape.npy"), npy, 10 + dl + pad + 1);
  th_tensor *t = NULL;
  expect_invalid_shape(th_npy_read(path_in("shape.npy"), &t), "reading .npy: '", path_in("shape.npy"));
  assert_null(t);
  /* .safetensors: the same shape, an empty data buffer */
  snprintf(
    hdr, sizeof hdr,
    "{\"x\": {\"dtype\": \"F32\", \"shape\": [0, 4503599627370496, 4503599627370496], \"data_offsets\": [0, 0]}}");
  size_t n = strlen(hdr);
  unsigned char st[256];
  for (int i = 0; i < 8; i++) st[i] = (unsigned char)((uint64_t)n >> (8 * i));
  memcpy(st + 8, hdr, n);
  write_file(path_in("shape.safetensors"), st, 8 + n);
  int cnt = 0;
  char **names = NULL;
  th_tensor **ts = NULL;
  expect_invalid_shape(th_safetensors_read(path_in("shape.safetensors"), &cnt, &names, &ts), "reading .safetensors: '",
                       path_in("shape.safetensors"));
  unlink(path_in("shape.npy"));
  unlink(path_in("shape.safetensors"));
}

/* ---- M1: C API misuse -------------------------------------------------------------------------------- */

static void test_api_null_and_malformed(void **state) {
  (void)state;
  const int64_t s23[2] = {2, 3};
  th_arg out;
  assert_null(th_trace_add_tensor_input(NULL, "x", TH_F32, CPU, 2, s23));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "the trace is NULL");
  th_trace *tr = th_trace_new(NULL), *other = th_trace_new("other");
  assert_null(th_trace_add_tensor_input(tr, "x", TH_F32, CPU, 2, NULL));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "shape is NULL with ndim=2");
  assert_null(th_trace_add_tensor_input(tr, "x", TH_F32, CPU, -1, s23));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "expected ndim >= 0");
  assert_null(th_trace_add_tensor_input(tr, "x", TH_F32, (th_device){(th_device_type)77, 0}, 2, s23));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "invalid device");
  assert_null(th_trace_add_tensor_input(tr, "x", TH_F32, (th_device){TH_CUDA, -1}, 2, s23));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "invalid device");
  assert_null(th_trace_add_tensor_input(tr, "x", (th_dtype)999, CPU, 2, s23));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "invalid dtype 999");
  th_value *x = input(tr, "x", TH_F32, 2, s23);
  th_value *y = input(other, "y", TH_F32, 2, s23);
  th_arg ax = th_arg_value(x);

  EXPECT_ERR(th_trace_call(NULL, "ltorch.neg", 1, &ax, 0, NULL, NULL, &out), TH_ERR_VALUE, "the trace is NULL");
  EXPECT_ERR(th_trace_call(tr, NULL, 1, &ax, 0, NULL, NULL, &out), TH_ERR_VALUE, "qualname is NULL");
  EXPECT_ERR(th_trace_call(tr, "ltorch.neg", 1, &ax, 0, NULL, NULL, NULL), TH_ERR_VALUE, "out is NULL");
  EXPECT_ERR(th_trace_call(tr, "ltorch.neg", 1, NULL, 0, NULL, NULL, &out), TH_ERR_VALUE, "args is NULL with nargs=1");
  EXPECT_ERR(th_trace_call(tr, "ltorch.neg", -3, NULL, 0, NULL, NULL, &out), TH_ERR_VALUE, "nargs=-3");
  th_arg a2[2] = {ax, ax}, one = th_arg_int(1);
  EXPECT_ERR(th_trace_call(tr, "ltorch.add", 2, a2, 1, NULL, &one, &out), TH_ERR_VALUE, "kwnames and kwargs");
  const char *nullname[1] = {NULL};
  EXPECT_ERR(th_trace_call(tr, "ltorch.add", 2, a2, 1, nullname, &one, &out), TH_ERR_VALUE, "keyword name 0 is NULL");
  th_arg nv = th_arg_value(NULL);
  EXPECT_ERR(th_trace_call(tr, "ltorch.neg", 1, &nv, 0, NULL, NULL, &out), TH_ERR_VALUE,
             "ltorch.neg: argument 'input': expected a value, but got a NULL th_value");
  const char *approx[1] = {"approximate"};
  th_arg ns = th_arg_str(NULL);
  EXPECT_ERR(th_trace_call(tr, "ltorch.gelu", 1, &ax, 1, approx, &ns, &out), TH_ERR_VALUE, "NULL pointer");
  th_arg r1[2] = {ax, th_arg_tuple(2, NULL)};
  EXPECT_ERR(callv(tr, "ltorch.reshape", 2, r1, &out), TH_ERR_VALUE, "a tuple of length 2 has NULL items");
  th_arg six = th_arg_int(6), r2[2] = {ax, th_arg_tuple(-1, &six)};
  EXPECT_ERR(callv(tr, "ltorch.reshape", 2, r2, &out), TH_ERR_VALUE, "length -1");
  th_arg bad = th_arg_int(1);
  bad.kind = (th_arg_kind)99;
  th_arg r3[2] = {ax, bad};
  EXPECT_ERR(callv(tr, "ltorch.add", 2, r3, &out), TH_ERR_VALUE, "invalid argument kind 99");
  th_arg dict = th_arg_none();
  dict.kind = TH_ARG_DICT;
  dict.u.seq.n = 1;
  dict.u.seq.items = &ax;
  EXPECT_ERR(th_trace_set_return(tr, dict), TH_ERR_VALUE, "NULL keys");
  /* a value of another compilation: rejected when called and when returned, nothing recorded */
  th_arg ay = th_arg_value(y);
  EXPECT_ERR(callv(tr, "ltorch.neg", 1, &ay, &out), TH_ERR_VALUE, "value y belongs to another trace");
  th_arg mixed[2] = {ax, ay};
  EXPECT_ERR(callv(tr, "ltorch.add", 2, mixed, &out), TH_ERR_VALUE,
             "ltorch.add: argument 'other': value y belongs to another trace");
  EXPECT_ERR(th_trace_set_return(tr, th_arg_tuple(2, mixed)), TH_ERR_VALUE, "value y belongs to another trace");
  assert_int_equal(th_trace_num_bsyms(tr), 0);
  EXPECT_ERR(th_trace_set_return(NULL, ax), TH_ERR_VALUE, "the trace is NULL");
  EXPECT_ERR(th_trace_set_return(tr, nv), TH_ERR_VALUE, "NULL th_value");
  EXPECT_ERR(th_trace_set_provenance(NULL, "x"), TH_ERR_VALUE, "the trace is NULL");

  /* accessors read NULL as empty */
  assert_int_equal(th_trace_num_inputs(NULL), 0);
  assert_null(th_trace_input(NULL, 0));
  assert_int_equal(th_trace_output(NULL).kind, TH_ARG_NONE);
  assert_int_equal(th_trace_num_bsyms(NULL), 0);
  assert_null(th_trace_bsym(NULL, 0));
  assert_null(th_value_name(NULL));
  assert_int_equal(th_value_ndim(NULL), 0);
  assert_null(th_value_shape(NULL));
  assert_int_equal(th_value_numel(NULL), 0);
  assert_false(th_value_is_tensor(NULL));
  assert_null(th_bsym_qualname(NULL));
  assert_int_equal(th_bsym_num_subsymbols(NULL), 0);

  /* programs */
  th_arg nx = call_ok(tr, "ltorch.neg", 1, &ax);
  assert_int_equal(th_trace_set_return(tr, nx), TH_OK);
  th_program *p = NULL;
  EXPECT_ERR(th_program_compile(tr, NULL, NULL), TH_ERR_VALUE, "out is NULL");
  EXPECT_ERR(th_program_compile(NULL, NULL, &p), TH_ERR_VALUE, "the trace is NULL");
  assert_null(p);
  assert_int_equal(th_program_compile(tr, NULL, &p), TH_OK);
  th_tensor *in = iota_f32(2, s23);
  int nout = -1;
  th_tensor **outs = NULL;
  EXPECT_ERR(th_program_run(NULL, 1, &in, &nout, &outs), TH_ERR_VALUE, "the program is NULL");
  EXPECT_ERR(th_program_run(p, 1, &in, NULL, &outs), TH_ERR_VALUE, "noutputs is NULL");
  EXPECT_ERR(th_program_run(p, 1, &in, &nout, NULL), TH_ERR_VALUE, "outputs is NULL");
  EXPECT_ERR(th_program_run(p, 1, NULL, &nout, &outs), TH_ERR_VALUE, "inputs is NULL with ninputs=1");
  assert_null(th_program_trace(NULL));
  assert_int_equal(th_program_run(p, 1, &in, &nout, &outs), TH_OK);
  assert_true(th_tensor_get_f64(outs[0], 5) == -5.0);
  free_outputs(nout, outs);
  th_tensor_release(in);
  th_program_free(p);
  th_trace_free(other);
  th_trace_free(tr);
}

/* ---- M2: names and strings printed as code ------------------------------------------------------------ */

static void test_printed_names_validated(void **state) {
  (void)state;
  const int64_t s2[1] = {2};
  assert_null(th_trace_new("def"));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "invalid function name 'def': not a Python identifier");
  assert_null(th_trace_new("f(x):\n  import os"));
  EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "not a Python identifier");
  th_trace *tr = th_trace_new("my_fn2");
  assert_non_null(tr);
  const char *bad[] = {"def", "", "1x", "a b", "x\n", "z):\n  import os\ndef g(z", "None", "lambda", "x-y", "\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_null(th_trace_add_tensor_input(tr, bad[i], TH_F32, CPU, 1, s2));
    EXPECT_ERR(th_last_status(), TH_ERR_VALUE, "not a Python identifier");
  }
  assert_null(th_trace_add_tensor_input(tr, "def", TH_F32, CPU, 1, s2));
  assert_string_equal(th_last_error(), "th_trace_add_tensor_input: invalid input name 'def': not a Python identifier");
  th_value *x = input(tr, "_x0", TH_F32, 1, s2);
  input(tr, "match", TH_F32, 1, s2); /* a soft keyword is a valid name */
  EXPECT_ERR(th_trace_set_provenance(tr, "a\nimport os"), TH_ERR_VALUE, "contains a newline at offset 1");
  EXPECT_ERR(th_trace_set_provenance(tr, "a\rb"), TH_ERR_VALUE, "carriage return");
  assert_int_equal(th_trace_set_provenance(tr, "a test (took 0 milliseconds)"), TH_OK);
  /* objects passed through th_trace_call print bare: identifiers only */
  th_arg ax = th_arg_value(x), obj = th_arg_none(), out;
  obj.kind = TH_ARG_OBJECT;
  obj.u.s = "evil)\nimport os\n(";
  const char *mf[1] = {"memory_format"};
  EXPECT_ERR(th_trace_call(tr, "ltorch.contiguous", 1, &ax, 1, mf, &obj, &out), TH_ERR_VALUE,
             "invalid object name 'evil)\\x0aimport os\\x0a(': not a Python identifier");
  obj.u.s = "torch.contiguous_format";
  EXPECT_ERR(th_trace_call(tr, "ltorch.contiguous", 1, &ax, 1, mf, &obj, &out), TH_ERR_VALUE,
             "not a Python identifier");
  obj.u.s = "_torch_memory_format_0";
  assert_int_equal(th_trace_call(tr, "ltorch.contiguous", 1, &ax, 1, mf, &obj, &out), TH_OK);
  assert_int_equal(th_trace_set_return(tr, out), TH_OK);
  /* what prints parses back */
  char *text = th_trace_print(tr, -1);
  assert_non_null(text);
  assert_non_null(strstr(text, "def my_fn2(_x0, match):"));
  th_trace *back = NULL;
  if (th_trace_parse(text, "printed.py", &back) != TH_OK) fail_msg("%s\n%s", th_last_error(), text);
  th_trace_free(back);
  free(text);
  th_trace_free(tr);
}

/* ---- M5: class targets out of range -------------------------------------------------------------------- */

static th_status run_loss(const char *op, const int64_t *target_vals, float *out4, const char *reduction) {
  const int64_t s45[2] = {4, 5}, s4[1] = {4};
  th_trace *tr = th_trace_new(NULL);
  th_value *a = input(tr, "a", TH_F32, 2, s45), *t = input(tr, "t", TH_I64, 1, s4);
  th_arg args[2] = {th_arg_value(a), th_arg_value(t)}, kw[1] = {th_arg_str(reduction)}, out;
  const char *kwn[1] = {"reduction"};
  if (th_trace_call(tr, op, 2, args, 1, kwn, kw, &out) != TH_OK) fail_msg("%s: %s", op, th_last_error());
  assert_int_equal(th_trace_set_return(tr, out), TH_OK);
  th_tensor *in[2] = {iota_f32(2, s45), th_tensor_empty(TH_I64, 1, s4)};
  for (int i = 0; i < 5 * 4; i++) ((float *)th_tensor_data(in[0]))[i] = -0.1f * (float)i;
  for (int i = 0; i < 4; i++) ((int64_t *)th_tensor_data(in[1]))[i] = target_vals[i];
  int nout = 0;
  th_tensor **res = NULL;
  th_status st = compile_run(tr, 2, in, &nout, &res);
  if (st == TH_OK) {
    for (int64_t i = 0; i < th_tensor_numel(res[0]); i++) out4[i] = (float)th_tensor_get_f64(res[0], i);
    free_outputs(nout, res);
  }
  th_tensor_release(in[0]);
  th_tensor_release(in[1]);
  th_trace_free(tr);
  return st;
}

static void test_loss_target_out_of_range(void **state) {
  (void)state;
  float r[4];
  /* in range and ignored (-100) targets: -a[i, t_i], 0 where ignored */
  const int64_t ok[4] = {1, -100, 0, 4};
  assert_int_equal(run_loss("ltorch.nll_loss", ok, r, "none"), TH_OK);
  const float want[4] = {0.1f, 0.0f, 1.0f, 1.9f};
  for (int i = 0; i < 4; i++) assert_true(fabsf(r[i] - want[i]) < 1e-6f);
  assert_int_equal(run_loss("ltorch.nll_loss", ok, r, "mean"), TH_OK);
  assert_true(fabsf(r[0] - (0.1f + 1.0f + 1.9f) / 3.0f) < 1e-6f);
  /* out of range (above C, negative other than ignore_index): an IndexError when run */
  const int64_t bad[3][4] = {{1, 7, 0, 2}, {1, -1, 0, 2}, {5, 0, 0, 0}};
  const char *ops[2] = {"ltorch.nll_loss", "ltorch.cross_entropy"};
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < 3; j++) {
      th_status st = run_loss(ops[k], bad[j], r, j == 2 ? "sum" : "none");
      if (st != TH_ERR_INDEX || !strstr(th_last_error(), "out of bounds"))
        fail_msg("%s with target %lld: expected an IndexError, got %d: %s", ops[k], (long long)bad[j][j == 2 ? 0 : 1],
                 st, th_last_error());
    }
  assert_int_equal(run_loss("ltorch.cross_entropy", ok, r, "sum"), TH_OK);
}

/* ---- L6: softmax family over an empty dim --------------------------------------------------------------- */

static void test_softmax_empty_dim(void **state) {
  (void)state;
  const int64_t s30[2] = {3, 0};
  th_trace *tr = th_trace_new(NULL);
  th_value *y = input(tr, "y", TH_F32, 2, s30);
  th_arg a1[2] = {th_arg_value(y), th_arg_int(1)}, a0[2] = {th_arg_value(y), th_arg_int(0)};
  th_arg d1[1], d0[1], l1[2] = {th_arg_value(y), ints(d1, 1, (const int64_t[]){1})},
                       l0[2] = {th_arg_value(y), ints(d0, 1, (const int64_t[]){0})};
  th_value *r[5] = {call_ok(tr, "ltorch.log_softmax", 2, a1).u.value, call_ok(tr, "ltorch.softmax", 2, a1).u.value,
                    call_ok(tr, "ltorch.logsumexp", 2, l1).u.value, call_ok(tr, "ltorch.log_softmax", 2, a0).u.value,
                    call_ok(tr, "ltorch.logsumexp", 2, l0).u.value};
  assert_shape(r[0], 2, s30);
  assert_shape(r[1], 2, s30);
  assert_shape(r[2], 1, (const int64_t[]){3});
  assert_shape(r[3], 2, s30);
  assert_shape(r[4], 1, (const int64_t[]){0});
  th_arg items[5];
  for (int i = 0; i < 5; i++) items[i] = th_arg_value(r[i]);
  assert_int_equal(th_trace_set_return(tr, th_arg_tuple(5, items)), TH_OK);
  th_tensor *in = th_tensor_empty(TH_F32, 2, s30);
  int nout = 0;
  th_tensor **res = NULL;
  if (compile_run(tr, 1, &in, &nout, &res) != TH_OK) fail_msg("run: %s", th_last_error());
  assert_int_equal(nout, 5);
  for (int i = 0; i < 3; i++) { /* logsumexp over an empty dim: -inf (PyTorch) */
    double v = th_tensor_get_f64(res[2], i);
    assert_true(isinf(v) && v < 0);
  }
  free_outputs(nout, res);
  th_tensor_release(in);
  th_trace_free(tr);
}

int main(int argc, char **argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]); /* one test by name (pattern), for debugging */
  snprintf(tmpdir, sizeof tmpdir, "%s", "/tmp/th_robust_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_huge_shapes_rejected),      cmocka_unit_test(test_parsed_huge_shapes),
    cmocka_unit_test(test_extreme_int_args),          cmocka_unit_test(test_empty_views_with_huge_strides),
    cmocka_unit_test(test_reader_errors_not_garbled), cmocka_unit_test(test_api_null_and_malformed),
    cmocka_unit_test(test_printed_names_validated),   cmocka_unit_test(test_loss_target_out_of_range),
    cmocka_unit_test(test_softmax_empty_dim),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rmdir(tmpdir);
  return rc;
}
