/* creation.c — metas of the prims that make a tensor from nothing: full, iota and uniform.
 *
 * Each takes its shape (or length), device and dtype explicitly (keyword-only in the schema); the
 * output never requires grad. Thunder's rules (§3.3): full's fill value must be safely castable to the
 * dtype; iota needs an exact non-bool dtype and length >= 0; uniform a floating dtype. */
#include <math.h>

#include "ops/meta_util.h"
#include "ops/ops_internal.h"
#include "ops/vjp.h"

/* ---- full(shape, fill_value, *, device, dtype) -------------------------------------------------------
 * A number may fill a dtype of its category or a wider one (bool < int < float, the same order as
 * PyTorch's can_cast for numbers): a float fill for an integer or bool dtype, or an int fill for a bool
 * dtype, is an error. Any dtype may be filled, fp8 included (creation computes nothing). */

th_status prims_full_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  th_device dev;
  TH_TRY(th_meta_int_list(op, "shape", &args[0], shape, &ndim));
  TH_TRY(th_meta_check_shape(op, shape, ndim));
  TH_TRY(th_meta_device(op, &args[2], &dev));
  th_dtype dt = args[3].u.dtype;
  th_dtype fill = th_meta_number_type(&args[1]);
  if (th_meta_dtype_kind(fill) > th_meta_dtype_kind(dt))
    return th_error(TH_ERR_RUNTIME, "%s: Can't safely cast fill_value of numbertype <class '%s'> to dtype %s", op,
                    th_meta_numbertype_name(fill), th_meta_dtype_repr(dt));
  return th_meta_new_tensor(tr, dt, dev, ndim, shape, false, out);
}

/* ---- iota(length, *, start, step, device, dtype) -----------------------------------------------------
 * The sequence start, start + step, ... of `length` elements. Thunder's meta gives shape () when
 * length == 0 (a quirk: a 0-dim tensor has one element); we give (0,), the shape of the empty
 * sequence that torch.arange returns. */

th_status prims_iota_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t length;
  th_device dev;
  TH_TRY(th_meta_int(op, "length", &args[0], &length)); /* start and step may be proxies of unknown value */
  TH_TRY(th_meta_device(op, &args[3], &dev));
  th_dtype dt = args[4].u.dtype;
  if (length < 0)
    return th_error(TH_ERR_RUNTIME, "%s: Expected length=%lld to be greater than or equal to zero", op,
                    (long long)length);
  if (!th_dtype_is_integer(dt))
    return th_error(TH_ERR_RUNTIME, "%s: Expected dtype=%s to be an exact (integer) dtype other than bool", op,
                    th_meta_dtype_repr(dt));
  int64_t shape[1] = {length};
  return th_meta_new_tensor(tr, dt, dev, 1, shape, false, out);
}

/* ---- uniform(shape, minval, maxval, *, device, dtype) ------------------------------------------------
 * Samples from [minval, maxval): the dtype must be floating (f16, bf16, f32, f64; fp8 cannot be
 * sampled directly — sample in f32 and convert); known bounds must be finite with minval <= maxval
 * (PyTorch's uniform_ check). */

th_status prims_uniform_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  th_device dev;
  TH_TRY(th_meta_int_list(op, "shape", &args[0], shape, &ndim));
  TH_TRY(th_meta_check_shape(op, shape, ndim));
  TH_TRY(th_meta_device(op, &args[3], &dev));
  th_dtype dt = args[4].u.dtype;
  if (!th_dtype_is_float(dt) || th_dtype_is_fp8(dt))
    return th_error(TH_ERR_RUNTIME,
                    "%s: Expected dtype=%s to be a floating dtype (float16, bfloat16, float32 or "
                    "float64)",
                    op, th_meta_dtype_repr(dt));
  double lo, hi;
  bool klo = th_meta_number_value(&args[1], &lo, NULL), khi = th_meta_number_value(&args[2], &hi, NULL);
  if ((klo && !isfinite(lo)) || (khi && !isfinite(hi)))
    return th_error(TH_ERR_RUNTIME, "%s: Expected minval and maxval to be finite numbers", op);
  if (klo && khi && lo > hi)
    return th_error(TH_ERR_RUNTIME, "%s: uniform expects to return a [from, to) range, but found from=%g > to=%g",
                    op, lo, hi);
  return th_meta_new_tensor(tr, dt, dev, ndim, shape, false, out);
}

/* ---- vjp (ops/vjp.h): no tensor inputs, no gradient ------------------------------------------------- */
const th_vjp_entry th_vjp_table_prims_creation[] = {
    {TH_OP_prims_full, TH_VJP_NONDIFF, NULL},
    {TH_OP_prims_iota, TH_VJP_NONDIFF, NULL},
    {TH_OP_prims_uniform, TH_VJP_NONDIFF, NULL},
};
const int th_vjp_table_prims_creation_n = (int)(sizeof th_vjp_table_prims_creation / sizeof th_vjp_table_prims_creation[0]);
