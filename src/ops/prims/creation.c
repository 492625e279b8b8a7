/* creation.c — metas of the prims that make a tensor from nothing: full, iota, uniform, and the random
 * stream's state (get_and_update_rng_state) with the uniform that reads it (uniform_philox).
 *
 * Each takes its shape (or length), device and dtype explicitly (keyword-only in the schema); the
 * output never requires grad. Thunder's rules: full's fill value must be safely castable to the
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
 * (PyTorch's uniform_ check). uniform_philox checks the same and takes its stream's seed and offset as
 * arguments: each an int or a 0-dim integer tensor (get_and_update_rng_state's outputs). */

static th_status uniform_common(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
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
    return th_error(TH_ERR_RUNTIME, "%s: uniform expects to return a [from, to) range, but found from=%g > to=%g", op,
                    lo, hi);
  return th_meta_new_tensor(tr, dt, dev, ndim, shape, false, out);
}

th_status prims_uniform_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return uniform_common(tr, sym, args, out);
}

static th_status rng_word_arg(const char *op, const char *name, const th_arg *a) {
  if (a->kind == TH_ARG_INT) return TH_OK;
  if (a->kind == TH_ARG_VALUE && !a->u.value->is_tensor && a->u.value->dtype == TH_I64) return TH_OK;
  const th_value *v = th_meta_tensor(a);
  if (v && v->ndim == 0 && th_meta_dtype_is_exact(v->dtype) && v->dtype != TH_BOOL) return TH_OK;
  if (v) {
    char b[TH_META_SHAPE_BUF];
    return th_error(TH_ERR_TYPE, "%s: %s: expected an int or a 0-dim integer tensor, but got a %s tensor of shape %s",
                    op, name, th_dtype_name(v->dtype), th_meta_shape_str(v->shape, v->ndim, b, sizeof b));
  }
  return th_error(TH_ERR_TYPE, "%s: %s: expected an int or a 0-dim integer tensor, but got %s", op, name,
                  th_arg_kind_name(a));
}

th_status prims_uniform_philox_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  TH_TRY(rng_word_arg(sym->qualname, "seed", &args[5]));
  TH_TRY(rng_word_arg(sym->qualname, "offset", &args[6]));
  return uniform_common(tr, sym, args, out);
}

/* ---- get_and_update_rng_state(blocks, *, device) -> (seed, offset) -------------------------------------
 * blocks >= 0; the outputs are 0-dim int64 tensors on the CPU (the generator's words live on the host
 * whatever device the samples go to). */

th_status prims_get_and_update_rng_state_meta(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  int64_t blocks;
  th_device dev;
  TH_TRY(th_meta_int(op, "blocks", &args[0], &blocks));
  if (blocks < 0)
    return th_error(TH_ERR_VALUE, "%s: blocks: expected a count >= 0, but got %lld", op, (long long)blocks);
  TH_TRY(th_meta_device(op, &args[1], &dev));
  th_arg *items = th_arena_alloc(tr->arena, 2 * sizeof(th_arg));
  if (!items) return TH_ERR_NOMEM;
  const th_device cpu = {TH_CPU, 0};
  TH_TRY(th_meta_new_tensor(tr, TH_I64, cpu, 0, NULL, false, &items[0]));
  TH_TRY(th_meta_new_tensor(tr, TH_I64, cpu, 0, NULL, false, &items[1]));
  *out = th_arg_tuple(2, items);
  return TH_OK;
}

/* ---- vjp (ops/vjp.h): no tensor inputs, no gradient ------------------------------------------------- */
const th_vjp_entry th_vjp_table_prims_creation[] = {
  {TH_OP_prims_full, TH_VJP_NONDIFF, NULL},
  {TH_OP_prims_iota, TH_VJP_NONDIFF, NULL},
  {TH_OP_prims_uniform, TH_VJP_NONDIFF, NULL},
  {TH_OP_prims_uniform_philox, TH_VJP_NONDIFF, NULL},
  {TH_OP_prims_get_and_update_rng_state, TH_VJP_NONDIFF, NULL},
};
const int th_vjp_table_prims_creation_n =
  (int)(sizeof th_vjp_table_prims_creation / sizeof th_vjp_table_prims_creation[0]);
