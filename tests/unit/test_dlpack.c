/* test_dlpack.c — DLPack export and import.
 *
 * Export: the DLTensor fields (data at element [0,...,0], shape, strides in elements, dtype codes for
 * all twelve dtypes), the managed tensor holding its own reference (the source may be released first),
 * the deleter freeing everything (ASan checks). Import: foreign managed tensors with and without
 * strides and with a byte offset are viewed without copying and their deleter runs exactly once when
 * the last tensor goes; a tensor exported by us comes back sharing its storage; unsupported devices,
 * dtypes, lanes, ranks and negative strides are refused and leave ownership with the caller; fault
 * injection. */
#include <dlpack/dlpack.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/runtime.h"

/* ---- export --------------------------------------------------------------------------------------- */

static void test_export_fields(void **state) {
  (void)state;
  int64_t shape[2] = {3, 4};
  th_tensor *a = th_tensor_new(TH_F32, 2, shape);
  float *ad = th_tensor_data(a);
  for (int i = 0; i < 12; i++) ad[i] = (float)i;
  int64_t tshape[2] = {3, 3}, tstr[2] = {1, 4}; /* a[:, 1:].T-ish view with offset 1 */
  th_tensor *v = th_tensor_view(a, 2, tshape, tstr, 1);

  DLManagedTensor *m = th_tensor_to_dlpack(v);
  assert_non_null(m);
  const DLTensor *d = &m->dl_tensor;
  assert_ptr_equal(d->data, ad + 1);
  assert_int_equal(d->byte_offset, 0);
  assert_int_equal(d->device.device_type, kDLCPU);
  assert_int_equal(d->device.device_id, 0);
  assert_int_equal(d->ndim, 2);
  assert_int_equal(d->dtype.code, kDLFloat);
  assert_int_equal(d->dtype.bits, 32);
  assert_int_equal(d->dtype.lanes, 1);
  assert_int_equal(d->shape[0], 3);
  assert_int_equal(d->shape[1], 3);
  assert_int_equal(d->strides[0], 1);
  assert_int_equal(d->strides[1], 4);

  /* The export holds its own reference. */
  th_tensor_release(v);
  th_tensor_release(a);
  const float *p = d->data;
  assert_true(p[1 * 1 + 2 * 4] == 10.0f); /* a[2][2] */
  m->deleter(m);
}

static void test_dtype_codes(void **state) {
  (void)state;
  static const struct {
    th_dtype dt;
    uint8_t code, bits;
  } want[] = {
    {TH_BOOL, 6, 8},        {TH_U8, kDLUInt, 8},    {TH_I8, kDLInt, 8},     {TH_I16, kDLInt, 16},
    {TH_I32, kDLInt, 32},   {TH_I64, kDLInt, 64},   {TH_F16, kDLFloat, 16}, {TH_BF16, kDLBfloat, 16},
    {TH_F32, kDLFloat, 32}, {TH_F64, kDLFloat, 64}, {TH_F8E4M3FN, 10, 8},   {TH_F8E5M2, 12, 8},
  };
  assert_int_equal(sizeof want / sizeof want[0], TH_DTYPE_COUNT);
  int64_t shape[1] = {5};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    th_tensor *t = th_tensor_new(want[k].dt, 1, shape);
    DLManagedTensor *m = th_tensor_to_dlpack(t);
    assert_int_equal(m->dl_tensor.dtype.code, want[k].code);
    assert_int_equal(m->dl_tensor.dtype.bits, want[k].bits);
    assert_int_equal(m->dl_tensor.dtype.lanes, 1);
    /* And back: the same dtype, the same storage. */
    th_tensor *r = th_tensor_from_dlpack(m);
    assert_non_null(r);
    assert_int_equal(th_tensor_dtype(r), want[k].dt);
    assert_true(th_tensor_shares_storage(r, t));
    assert_ptr_equal(th_tensor_data(r), th_tensor_data(t));
    th_tensor_release(t);
    th_tensor_release(r);
  }
}

/* ---- import --------------------------------------------------------------------------------------- */

typedef struct foreign {
  DLManagedTensor m;
  int64_t shape[3], strides[3];
  double data[32];
  int *deleted;
} foreign;

static void foreign_delete(DLManagedTensor *m) {
  foreign *f = m->manager_ctx;
  (*f->deleted)++;
}

static void make_foreign(foreign *f, int *deleted) {
  memset(f, 0, sizeof *f);
  for (int i = 0; i < 32; i++) f->data[i] = i;
  f->deleted = deleted;
  f->m.dl_tensor.data = f->data;
  f->m.dl_tensor.device = (DLDevice){kDLCPU, 0};
  f->m.dl_tensor.ndim = 2;
  f->m.dl_tensor.dtype = (DLDataType){kDLFloat, 64, 1};
  f->m.dl_tensor.shape = f->shape;
  f->m.manager_ctx = f;
  f->m.deleter = foreign_delete;
  f->shape[0] = 3;
  f->shape[1] = 4;
}

static void test_import_foreign(void **state) {
  (void)state;
  int deleted = 0;
  foreign f;
  make_foreign(&f, &deleted);

  /* strides NULL: contiguous; byte_offset skips two doubles. */
  f.m.dl_tensor.byte_offset = 2 * sizeof(double);
  th_tensor *t = th_tensor_from_dlpack(&f.m);
  assert_non_null(t);
  assert_ptr_equal(th_tensor_data(t), f.data + 2); /* zero copy */
  assert_true(th_tensor_is_contiguous(t));
  assert_int_equal(th_tensor_strides(t)[0], 4);
  assert_true(th_tensor_get_f64(t, 5) == 7.0);
  int64_t one[1] = {1};
  th_tensor *v = th_tensor_view(t, 1, one, NULL, 11);
  th_tensor_release(t);
  assert_int_equal(deleted, 0);
  assert_true(th_tensor_get_f64(v, 0) == 13.0);
  th_tensor_release(v);
  assert_int_equal(deleted, 1);

  /* Explicit strides: a transposed view. */
  make_foreign(&f, &deleted);
  f.shape[0] = 4;
  f.shape[1] = 3;
  f.strides[0] = 1;
  f.strides[1] = 4;
  f.m.dl_tensor.strides = f.strides;
  t = th_tensor_from_dlpack(&f.m);
  assert_non_null(t);
  assert_false(th_tensor_is_contiguous(t));
  assert_true(th_tensor_get_f64(t, 1) == 4.0);
  th_tensor *c = th_tensor_contiguous_copy(t);
  const double *cd = th_tensor_data(c);
  assert_true(cd[3] == 1.0);
  th_tensor_release(c);
  th_tensor_release(t);
  assert_int_equal(deleted, 2);

  /* 0-d and empty tensors; NULL data is fine when empty. */
  make_foreign(&f, &deleted);
  f.m.dl_tensor.ndim = 0;
  t = th_tensor_from_dlpack(&f.m);
  assert_int_equal(th_tensor_numel(t), 1);
  assert_true(th_tensor_get_f64(t, 0) == 0.0);
  th_tensor_release(t);
  make_foreign(&f, &deleted);
  f.shape[0] = 0;
  f.m.dl_tensor.data = NULL;
  t = th_tensor_from_dlpack(&f.m);
  assert_non_null(t);
  assert_int_equal(th_tensor_numel(t), 0);
  th_tensor_release(t);
  assert_int_equal(deleted, 4);

  /* A NULL deleter is allowed. */
  make_foreign(&f, &deleted);
  f.m.deleter = NULL;
  t = th_tensor_from_dlpack(&f.m);
  th_tensor_release(t);
  assert_int_equal(deleted, 4);
}

static void test_import_rejects(void **state) {
  (void)state;
  int deleted = 0;
  foreign f;

  make_foreign(&f, &deleted);
  f.m.dl_tensor.device.device_type = kDLCUDA;
  assert_null(th_tensor_from_dlpack(&f.m));
  assert_int_equal(th_last_status(), TH_ERR_DEVICE);
  assert_non_null(strstr(th_last_error(), "kDLCPU"));

  make_foreign(&f, &deleted);
  f.m.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4};
  assert_null(th_tensor_from_dlpack(&f.m));
  assert_int_equal(th_last_status(), TH_ERR_TYPE);
  assert_non_null(strstr(th_last_error(), "lanes=4"));

  static const DLDataType bad[] = {{kDLUInt, 16, 1},   {kDLUInt, 32, 1},    {kDLInt, 4, 1},           {kDLFloat, 8, 1},
                                   {kDLBfloat, 32, 1}, {kDLComplex, 64, 1}, {kDLOpaqueHandle, 64, 1}, {6, 16, 1},
                                   {11, 8, 1},         {200, 8, 1}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    make_foreign(&f, &deleted);
    f.m.dl_tensor.dtype = bad[k];
    assert_null(th_tensor_from_dlpack(&f.m));
    assert_int_equal(th_last_status(), TH_ERR_TYPE);
  }

  make_foreign(&f, &deleted);
  f.strides[0] = -4;
  f.strides[1] = 1;
  f.m.dl_tensor.strides = f.strides;
  assert_null(th_tensor_from_dlpack(&f.m));
  assert_int_equal(th_last_status(), TH_ERR_NOT_IMPLEMENTED);

  make_foreign(&f, &deleted);
  f.m.dl_tensor.ndim = 9;
  assert_null(th_tensor_from_dlpack(&f.m));
  assert_int_equal(th_last_status(), TH_ERR_NOT_IMPLEMENTED);
  f.m.dl_tensor.ndim = -1;
  assert_null(th_tensor_from_dlpack(&f.m));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);

  make_foreign(&f, &deleted);
  f.shape[1] = -4;
  assert_null(th_tensor_from_dlpack(&f.m));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);

  make_foreign(&f, &deleted);
  f.m.dl_tensor.byte_offset = 3; /* misaligned doubles */
  assert_null(th_tensor_from_dlpack(&f.m));
  assert_int_equal(th_last_status(), TH_ERR_VALUE);

  make_foreign(&f, &deleted);
  f.m.dl_tensor.data = NULL;
  assert_null(th_tensor_from_dlpack(&f.m));

  assert_null(th_tensor_from_dlpack(NULL));
  assert_null(th_tensor_to_dlpack(NULL));
  assert_int_equal(deleted, 0); /* refusals never call the deleter: the caller still owns it */
}

static void test_fault_injection(void **state) {
  (void)state;
  int64_t shape[2] = {2, 3};
  th_tensor *t = th_tensor_new(TH_I32, 2, shape);
  int ok = 0;
  for (long n = 1; n <= 4; n++) {
    th_alloc_fail_after(n);
    DLManagedTensor *m = th_tensor_to_dlpack(t);
    th_tensor *r = m ? th_tensor_from_dlpack(m) : NULL;
    th_status st = th_last_status();
    th_alloc_fail_after(0);
    if (r) {
      ok++;
      th_tensor_release(r);
    } else {
      assert_int_equal(st, TH_ERR_NOMEM);
      if (m) m->deleter(m); /* import failed: we still own the export */
    }
  }
  assert_true(ok > 0);

  int deleted = 0;
  foreign f;
  for (long n = 1; n <= 4; n++) {
    make_foreign(&f, &deleted);
    th_alloc_fail_after(n);
    th_tensor *r = th_tensor_from_dlpack(&f.m);
    th_alloc_fail_after(0);
    if (r)
      th_tensor_release(r);
    else
      f.m.deleter(&f.m);
  }
  assert_int_equal(deleted, 4);
  th_tensor_release(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_export_fields),   cmocka_unit_test(test_dtype_codes),
    cmocka_unit_test(test_import_foreign),  cmocka_unit_test(test_import_rejects),
    cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
