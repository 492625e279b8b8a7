/* test_tensor.c — runtime tensors: construction and validation, views (shared storage, no copies),
 * refcounts (single- and multi-threaded; ASan reports any leak), contiguity as PyTorch defines it,
 * contiguous copies of transposed / broadcast / offset views in every dtype, element decoding, and
 * fault injection (every allocation failing in turn gives TH_ERR_NOMEM, never a leak or a crash). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/runtime.h"

/* Under ASan, let an impossible allocation return NULL (as malloc does) instead of aborting. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

/* ---- construction --------------------------------------------------------------------------------- */

static void test_new_zeroed_aligned(void **state) {
  (void)state;
  for (int dt = 0; dt < TH_DTYPE_COUNT; dt++) {
    int64_t shape[3] = {3, 5, 7};
    th_tensor *t = th_tensor_new((th_dtype)dt, 3, shape);
    assert_non_null(t);
    assert_int_equal(th_tensor_dtype(t), dt);
    assert_int_equal(th_tensor_device(t).type, TH_CPU);
    assert_int_equal(th_tensor_ndim(t), 3);
    assert_int_equal(th_tensor_numel(t), 105);
    assert_int_equal(th_tensor_strides(t)[0], 35);
    assert_int_equal(th_tensor_strides(t)[1], 7);
    assert_int_equal(th_tensor_strides(t)[2], 1);
    assert_true(th_tensor_is_contiguous(t));
    assert_int_equal((uintptr_t)th_tensor_data(t) % 64, 0);
    const unsigned char *p = th_tensor_data(t);
    for (size_t i = 0; i < 105 * th_dtype_size((th_dtype)dt); i++) assert_int_equal(p[i], 0);
    for (int64_t i = 0; i < 105; i++) assert_true(th_tensor_get_f64(t, i) == 0.0);
    th_tensor_release(t);
  }
}

static void test_new_edge_shapes(void **state) {
  (void)state;
  th_tensor *s = th_tensor_new(TH_F32, 0, NULL); /* 0-d: one element */
  assert_non_null(s);
  assert_int_equal(th_tensor_numel(s), 1);
  assert_true(th_tensor_is_contiguous(s));
  th_tensor_release(s);

  int64_t e[3] = {2, 0, 3}; /* empty, strides as torch.empty(2, 0, 3).stride() == (3, 3, 1) */
  th_tensor *t = th_tensor_empty(TH_I64, 3, e);
  assert_non_null(t);
  assert_int_equal(th_tensor_numel(t), 0);
  assert_int_equal(th_tensor_strides(t)[0], 3);
  assert_int_equal(th_tensor_strides(t)[1], 3);
  assert_int_equal(th_tensor_strides(t)[2], 1);
  assert_true(th_tensor_is_contiguous(t));
  th_tensor_release(t);

  int64_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 2};
  t = th_tensor_new(TH_U8, TH_MAX_DIMS, ones);
  assert_non_null(t);
  assert_int_equal(th_tensor_numel(t), 2);
  th_tensor_release(t);

  int64_t strides[3];
  int64_t sh[3] = {4, 1, 6};
  assert_int_equal(th_rt_contiguous_strides(3, sh, strides), 24);
  assert_int_equal(strides[0], 6);
  assert_int_equal(strides[1], 6);
  assert_int_equal(strides[2], 1);
  assert_int_equal(th_rt_contiguous_strides(0, sh, strides), 1);
}

static void test_new_rejects_bad_shapes(void **state) {
  (void)state;
  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  th_clear_error();
  assert_null(th_tensor_new(TH_F32, 9, nine));
  assert_int_equal(th_last_status(), TH_ERR_NOT_IMPLEMENTED);
  assert_non_null(strstr(th_last_error(), "ndim=9"));

  assert_null(th_tensor_new(TH_F32, -1, nine));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);

  int64_t neg[2] = {3, -2};
  assert_null(th_tensor_new(TH_F32, 2, neg));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "shape[1] >= 0"));

  int64_t huge[2] = {INT64_MAX / 2, 4}; /* numel overflows int64 */
  assert_null(th_tensor_new(TH_F32, 2, huge));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);
  assert_non_null(strstr(th_last_error(), "overflow"));

  int64_t big[1] = {INT64_MAX / 4}; /* numel fits, bytes do not */
  assert_null(th_tensor_new(TH_F64, 1, big));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);

  int64_t zero_huge[3] = {0, INT64_MAX / 2, 4}; /* empty, but its strides would overflow */
  assert_null(th_tensor_new(TH_F32, 3, zero_huge));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);

  int64_t ok[1] = {2};
  assert_null(th_tensor_new((th_dtype)TH_DTYPE_COUNT, 1, ok));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);
  assert_null(th_tensor_new(TH_F32, 1, NULL));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);

  /* Plausible-looking but unallocatable sizes fail cleanly with NOMEM, not a crash. */
  int64_t lots[1] = {(int64_t)1 << 60};
  assert_null(th_tensor_empty(TH_U8, 1, lots));
  assert_int_equal(th_last_status(), TH_ERR_NOMEM);
}

/* ---- views ---------------------------------------------------------------------------------------- */

static void fill_iota(th_tensor *t) { /* contiguous f32 t: element i = i */
  float *p = th_tensor_data(t);
  for (int64_t i = 0; i < th_tensor_numel(t); i++) p[i] = (float)i;
}

static void test_view_shares_storage(void **state) {
  (void)state;
  int64_t shape[2] = {3, 4};
  th_tensor *a = th_tensor_new(TH_F32, 2, shape);
  fill_iota(a);

  int64_t tshape[2] = {4, 3}, tstrides[2] = {1, 4}; /* a.T */
  th_tensor *at = th_tensor_view(a, 2, tshape, tstrides, 0);
  assert_non_null(at);
  assert_true(th_tensor_shares_storage(a, at));
  assert_ptr_equal(th_tensor_data(a), th_tensor_data(at)); /* no copy */
  assert_false(th_tensor_is_contiguous(at));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) assert_true(th_tensor_get_f64(at, i * 3 + j) == (double)(j * 4 + i));

  /* a[1, 1:3] : offset 5, shape (2,), stride 1 */
  int64_t rshape[1] = {2}, rstr[1] = {1};
  th_tensor *row = th_tensor_view(a, 1, rshape, rstr, 5);
  assert_non_null(row);
  assert_ptr_equal(th_tensor_data(row), (float *)th_tensor_data(a) + 5);
  ((float *)th_tensor_data(a))[6] = 42.0f; /* writes through the base are visible in the view */
  assert_true(th_tensor_get_f64(row, 1) == 42.0);

  /* A view of a view adds offsets. */
  int64_t one[1] = {1};
  th_tensor *vv = th_tensor_view(row, 1, one, NULL, 1);
  assert_non_null(vv);
  assert_ptr_equal(th_tensor_data(vv), (float *)th_tensor_data(a) + 6);
  assert_true(th_tensor_shares_storage(vv, a));

  th_tensor *other = th_tensor_new(TH_F32, 2, shape);
  assert_false(th_tensor_shares_storage(a, other));
  assert_false(th_tensor_shares_storage(a, NULL));

  /* Release the base first: the views keep the storage alive (ASan would flag a use after free). */
  th_tensor_release(a);
  assert_true(th_tensor_get_f64(vv, 0) == 42.0);
  assert_true(th_tensor_get_f64(at, 11) == 11.0);
  th_tensor_release(at);
  th_tensor_release(row);
  th_tensor_release(vv);
  th_tensor_release(other);
  th_tensor_release(NULL);
}

static void test_view_rejects_out_of_bounds(void **state) {
  (void)state;
  int64_t shape[1] = {10};
  th_tensor *a = th_tensor_new(TH_F64, 1, shape);
  int64_t s5[1] = {5}, st2[1] = {2}, neg[1] = {-1};
  th_tensor *v = th_tensor_view(a, 1, s5, st2, 1); /* last element 1 + 4*2 = 9: fits */
  assert_non_null(v);
  th_tensor_release(v);
  assert_null(th_tensor_view(a, 1, s5, st2, 2)); /* 2 + 8 = 10: one past the end */
  assert_int_equal(th_last_status(), TH_ERR_INDEX);
  assert_null(th_tensor_view(a, 1, s5, neg, 9));
  assert_int_equal(th_last_status(), TH_ERR_NOT_IMPLEMENTED);
  assert_null(th_tensor_view(a, 1, s5, NULL, -1));
  assert_int_equal(th_last_status(), TH_ERR_INDEX);
  int64_t huge[1] = {INT64_MAX / 2};
  assert_null(th_tensor_view(a, 1, s5, huge, 0)); /* extent overflows */
  assert_int_equal(th_last_status(), TH_ERR_INDEX);
  assert_null(th_tensor_view(NULL, 1, s5, NULL, 0));
  int64_t zero[1] = {0};
  v = th_tensor_view(a, 1, zero, NULL, 10); /* an empty view at the end is fine */
  assert_non_null(v);
  th_tensor_release(v);
  v = th_tensor_view(a, 1, zero, NULL, 11); /* ... and past it too (PyTorch: x[:, 2:] of a [0, 4] tensor) */
  assert_non_null(v);
  assert_int_equal(th_tensor_numel(v), 0);
  th_tensor_release(v);
  th_tensor_release(a);
}

static void test_is_contiguous_like_pytorch(void **state) {
  (void)state;
  int64_t shape[3] = {2, 1, 3};
  th_tensor *a = th_tensor_new(TH_I32, 3, shape);
  int64_t odd[3] = {3, 99, 1}; /* a size-1 dim's stride does not matter */
  th_tensor *v = th_tensor_view(a, 3, shape, odd, 0);
  assert_true(th_tensor_is_contiguous(v));
  th_tensor_release(v);
  int64_t bshape[2] = {4, 3}, bstr[2] = {0, 1}; /* broadcast rows */
  v = th_tensor_view(a, 2, bshape, bstr, 0);
  assert_false(th_tensor_is_contiguous(v));
  th_tensor_release(v);
  int64_t eshape[2] = {0, 3}, estr[2] = {7, 5}; /* empty: always contiguous */
  v = th_tensor_view(a, 2, eshape, estr, 0);
  assert_true(th_tensor_is_contiguous(v));
  th_tensor_release(v);
  th_tensor_release(a);
}

/* ---- from_data and refcounts ---------------------------------------------------------------------- */

static int deleter_calls;
static void count_deleter(void *ctx) {
  deleter_calls++;
  assert_ptr_equal(ctx, &deleter_calls);
}

static void test_from_data_deleter(void **state) {
  (void)state;
  double buf[6] = {0, 1, 2, 3, 4, 5};
  int64_t shape[2] = {2, 3}, strides[2] = {1, 2}; /* column-major view of buf */
  deleter_calls = 0;
  th_tensor *t = th_tensor_from_data(buf, TH_F64, 2, shape, strides, count_deleter, &deleter_calls);
  assert_non_null(t);
  assert_ptr_equal(th_tensor_data(t), buf);
  assert_true(th_tensor_get_f64(t, 1) == 2.0); /* [0][1] -> buf[2] */
  assert_true(th_tensor_get_f64(t, 3) == 1.0); /* [1][0] -> buf[1] */
  th_tensor *c = th_tensor_contiguous_copy(t);
  th_tensor_retain(t);
  th_tensor_release(t);
  assert_int_equal(deleter_calls, 0);
  int64_t one[1] = {1};
  th_tensor *v = th_tensor_view(t, 1, one, NULL, 5);
  th_tensor_release(t);
  assert_int_equal(deleter_calls, 0); /* the view still holds the storage */
  assert_true(th_tensor_get_f64(v, 0) == 5.0);
  th_tensor_release(v);
  assert_int_equal(deleter_calls, 1);
  const double *cp = th_tensor_data(c);
  double want[6] = {0, 2, 4, 1, 3, 5};
  for (int i = 0; i < 6; i++) assert_true(cp[i] == want[i]);
  th_tensor_release(c);

  /* Failure leaves ownership with the caller: the deleter never runs. */
  int64_t bad[1] = {-1};
  assert_null(th_tensor_from_data(buf, TH_F64, 1, bad, NULL, count_deleter, &deleter_calls));
  assert_null(th_tensor_from_data(NULL, TH_F64, 1, one, NULL, count_deleter, &deleter_calls));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);
  assert_null(th_tensor_from_data((char *)buf + 1, TH_F64, 1, one, NULL, count_deleter, &deleter_calls));
  assert_non_null(strstr(th_last_error(), "aligned"));
  int64_t negs[1] = {-1};
  assert_null(th_tensor_from_data(buf, TH_F64, 1, one, negs, count_deleter, &deleter_calls));
  for (long n = 1; n <= 3; n++) {
    th_alloc_fail_after(n);
    th_tensor *x = th_tensor_from_data(buf, TH_F64, 1, one, NULL, count_deleter, &deleter_calls);
    th_alloc_fail_after(0);
    if (x)
      th_tensor_release(x); /* counts one call */
    else
      assert_int_equal(th_last_status(), TH_ERR_NOMEM);
  }
  assert_int_equal(deleter_calls, 2); /* 1 above + the one successful fault-injection round */

  th_tensor *e = th_tensor_from_data(NULL, TH_F32, 1, (int64_t[]){0}, NULL, NULL, NULL); /* empty: NULL ok */
  assert_non_null(e);
  assert_null(th_tensor_data(e));
  th_tensor_release(e);
}

static void *hammer(void *arg) {
  th_tensor *t = arg;
  for (int i = 0; i < 100000; i++) {
    th_tensor_retain(t);
    th_tensor_release(t);
  }
  int64_t one[1] = {1};
  for (int i = 0; i < 2000; i++) th_tensor_release(th_tensor_view(t, 1, one, NULL, 0));
  return NULL;
}

static void test_refcount_threads(void **state) {
  (void)state;
  int64_t shape[1] = {4};
  th_tensor *t = th_tensor_new(TH_F32, 1, shape);
  pthread_t th[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, hammer, t), 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  assert_int_equal(atomic_load(&t->refcnt), 1);
  assert_int_equal(atomic_load(&t->storage->refcnt), 1);
  th_tensor_release(t);
}

/* ---- contiguous copies ------------------------------------------------------------------------------ */

static void test_contiguous_copy_views(void **state) {
  (void)state;
  int64_t shape[3] = {2, 3, 4};
  th_tensor *a = th_tensor_new(TH_F32, 3, shape);
  fill_iota(a);

  /* permute(2, 0, 1): shape (4, 2, 3), strides (1, 12, 4) */
  int64_t pshape[3] = {4, 2, 3}, pstr[3] = {1, 12, 4};
  th_tensor *p = th_tensor_view(a, 3, pshape, pstr, 0);
  th_tensor *c = th_tensor_contiguous_copy(p);
  assert_non_null(c);
  assert_true(th_tensor_is_contiguous(c));
  assert_false(th_tensor_shares_storage(c, a));
  const float *cd = th_tensor_data(c);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) assert_true(cd[(i * 2 + j) * 3 + k] == (float)(j * 12 + k * 4 + i));
  th_tensor_release(c);
  th_tensor_release(p);

  /* broadcast a[1, 2, :] to (5, 4): strides (0, 1), offset 20 */
  int64_t bshape[2] = {5, 4}, bstr[2] = {0, 1};
  th_tensor *b = th_tensor_view(a, 2, bshape, bstr, 20);
  c = th_tensor_contiguous_copy(b);
  cd = th_tensor_data(c);
  for (int i = 0; i < 5; i++)
    for (int k = 0; k < 4; k++) assert_true(cd[i * 4 + k] == (float)(20 + k));
  th_tensor_release(c);
  th_tensor_release(b);

  /* a[:, ::2, 1:3] : shape (2, 2, 2), strides (12, 8, 1), offset 1 */
  int64_t sshape[3] = {2, 2, 2}, sstr[3] = {12, 8, 1};
  th_tensor *s = th_tensor_view(a, 3, sshape, sstr, 1);
  c = th_tensor_contiguous_copy(s);
  float want[8] = {1, 2, 9, 10, 13, 14, 21, 22};
  assert_memory_equal(th_tensor_data(c), want, sizeof want);
  th_tensor_release(c);
  th_tensor_release(s);

  /* A contiguous tensor copies to a new storage with equal bytes. */
  c = th_tensor_contiguous_copy(a);
  assert_false(th_tensor_shares_storage(c, a));
  assert_memory_equal(th_tensor_data(c), th_tensor_data(a), 24 * sizeof(float));
  th_tensor_release(c);
  th_tensor_release(a);

  assert_null(th_tensor_contiguous_copy(NULL));
}

/* Copies a transposed view in every dtype and checks the raw element bytes. */
static void test_contiguous_copy_every_dtype(void **state) {
  (void)state;
  for (int dt = 0; dt < TH_DTYPE_COUNT; dt++) {
    size_t isz = th_dtype_size((th_dtype)dt);
    int64_t shape[2] = {5, 7};
    th_tensor *a = th_tensor_empty((th_dtype)dt, 2, shape);
    unsigned char *ad = th_tensor_data(a);
    for (size_t i = 0; i < 35 * isz; i++) ad[i] = (unsigned char)(i * 37 + 11);
    int64_t tshape[2] = {7, 5}, tstr[2] = {1, 7};
    th_tensor *t = th_tensor_view(a, 2, tshape, tstr, 0);
    th_tensor *c = th_tensor_contiguous_copy(t);
    const unsigned char *cd = th_tensor_data(c);
    for (int i = 0; i < 7; i++)
      for (int j = 0; j < 5; j++)
        assert_memory_equal(cd + (size_t)(i * 5 + j) * isz, ad + (size_t)(j * 7 + i) * isz, isz);
    th_tensor_release(c);
    th_tensor_release(t);
    th_tensor_release(a);
  }
}

/* ---- element reads ---------------------------------------------------------------------------------- */

static void test_get_f64_decodes_every_dtype(void **state) {
  (void)state;
  int64_t shape[1] = {2};
  struct {
    th_dtype dt;
    uint64_t bits; /* little-endian element bytes of element 1 */
    double want;
  } cases[] = {
    {TH_BOOL, 0x02, 1.0},        {TH_U8, 0xff, 255.0},       {TH_I8, 0xff, -1.0},
    {TH_I16, 0x8000, -32768.0},  {TH_I32, 0xfffffffe, -2.0}, {TH_I64, 0xffffffffffffffffull, -1.0},
    {TH_F16, 0x3c00, 1.0},       {TH_F16, 0xc200, -3.0},     {TH_BF16, 0x3f80, 1.0},
    {TH_BF16, 0x4049, 3.140625}, {TH_F32, 0x3fc00000, 1.5},  {TH_F64, 0x4004000000000000ull, 2.5},
    {TH_F8E4M3FN, 0x38, 1.0},    {TH_F8E4M3FN, 0x7e, 448.0}, {TH_F8E4M3FN, 0x01, 0.001953125},
    {TH_F8E5M2, 0x3c, 1.0},      {TH_F8E5M2, 0x7b, 57344.0}, {TH_F8E5M2, 0x7c, INFINITY},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    th_tensor *t = th_tensor_new(cases[k].dt, 1, shape);
    size_t isz = th_dtype_size(cases[k].dt);
    memcpy((char *)th_tensor_data(t) + isz, &cases[k].bits, isz);
    assert_true(th_tensor_get_f64(t, 0) == 0.0);
    assert_true(th_tensor_get_f64(t, 1) == cases[k].want);
    th_tensor_release(t);
  }
  th_tensor *t = th_tensor_new(TH_F8E4M3FN, 1, shape);
  ((uint8_t *)th_tensor_data(t))[0] = 0x7f;
  assert_true(isnan(th_tensor_get_f64(t, 0)));
  th_clear_error();
  assert_true(isnan(th_tensor_get_f64(t, 2)));
  assert_int_equal(th_last_status(), TH_ERR_INDEX);
  assert_true(isnan(th_tensor_get_f64(t, -1)));
  th_tensor_release(t);
}

/* ---- fault injection --------------------------------------------------------------------------------- */

static void test_fault_injection(void **state) {
  (void)state;
  int64_t shape[2] = {3, 4}, tshape[2] = {4, 3}, tstr[2] = {1, 4};
  int ok = 0, nomem = 0;
  for (long n = 1; n <= 8; n++) {
    th_alloc_fail_after(n);
    th_tensor *a = th_tensor_new(TH_F32, 2, shape);
    th_tensor *v = a ? th_tensor_view(a, 2, tshape, tstr, 0) : NULL;
    th_tensor *c = v ? th_tensor_contiguous_copy(v) : NULL;
    th_status st = th_last_status();
    th_alloc_fail_after(0);
    if (c)
      ok++;
    else {
      assert_int_equal(st, TH_ERR_NOMEM);
      nomem++;
    }
    th_tensor_release(c);
    th_tensor_release(v);
    th_tensor_release(a);
  }
  assert_true(nomem > 0 && ok > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_new_zeroed_aligned),          cmocka_unit_test(test_new_edge_shapes),
    cmocka_unit_test(test_new_rejects_bad_shapes),      cmocka_unit_test(test_view_shares_storage),
    cmocka_unit_test(test_view_rejects_out_of_bounds),  cmocka_unit_test(test_is_contiguous_like_pytorch),
    cmocka_unit_test(test_from_data_deleter),           cmocka_unit_test(test_refcount_threads),
    cmocka_unit_test(test_contiguous_copy_views),       cmocka_unit_test(test_contiguous_copy_every_dtype),
    cmocka_unit_test(test_get_f64_decodes_every_dtype), cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
