/* creation.c — tensors made from nothing (full, zeros, ones, empty, arange, uniform_like and their
 * *_like forms) and the triangular masks tril/triu.
 *
 * Defaults follow PyTorch: device cpu; zeros/ones/empty are float32; full infers its dtype from the
 * fill value (bool -> bool, int -> int64, float -> float32); arange is int64 when start, end and step
 * are all integers, else float32. empty is full of zeros (no uninitialized memory in traces). A fill
 * value is converted to the dtype's Python type first (1.5 into an int64 tensor fills 1, as torch.full).
 * requires_grad=True (PyTorch's leaf tensors for autograd) is NotImplementedError. */
#include <math.h>
#include <string.h>

#include "ops/torch/torch_util.h"

static const th_device cpu_device = {TH_CPU, 0};

/* requires_grad=True (a leaf that autograd would track) has no meaning in a thunder-c trace yet. */
static th_status no_grad(const char *op, const th_arg *a) {
  bool rg;
  TH_TRY(th_tu_bool(op, "requires_grad", a, &rg));
  if (rg) return th_error(TH_ERR_NOT_IMPLEMENTED, "%s: requires_grad=True is not supported", op);
  return TH_OK;
}

/* device/dtype keyword arguments with defaults. */
static th_status dev_dtype(const char *op, const th_arg *dev_arg, const th_arg *dt_arg, th_device dflt_dev,
                           th_dtype dflt_dt, th_device *dev, th_dtype *dt) {
  bool has;
  TH_TRY(th_tu_device_arg(op, "device", dev_arg, dev, &has));
  if (!has) *dev = dflt_dev;
  TH_TRY(th_tu_dtype_arg(op, "dtype", dt_arg, dt, &has));
  if (!has) *dt = dflt_dt;
  return TH_OK;
}

static th_status read_shape(const char *op, const th_arg *a, int64_t shape[TH_MAX_DIMS], int *ndim) {
  TH_TRY(th_meta_int_list(op, "shape", a, shape, ndim));
  for (int i = 0; i < *ndim; i++)
    if (shape[i] < 0)
      return th_error(TH_ERR_RUNTIME, "%s: Trying to create tensor with negative dimension %lld: [%lld]", op,
                      (long long)shape[i], (long long)shape[i]);
  return TH_OK;
}

/* prims.full with the fill converted to the dtype's Python type. */
static th_status fill(th_trace *tr, int ndim, const int64_t *shape, th_arg value, th_device dev, th_dtype dt,
                      th_arg *out) {
  TH_TRY(th_tu_convert(tr, &value, dt));
  return th_tu_full(tr, ndim, shape, value, dev, dt, out);
}

static th_dtype fill_default_dtype(const th_arg *value) {
  th_dtype t = th_meta_number_type(value);
  return t == TH_F64 ? TH_F32 : t;
}

/* ---- full / zeros / ones / empty ---------------------------------------------------------------- */

th_status ltorch_full_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  th_device dev;
  th_dtype dt;
  TH_TRY(read_shape(sym->qualname, &args[0], shape, &ndim));
  TH_TRY(no_grad(sym->qualname, &args[4]));
  TH_TRY(dev_dtype(sym->qualname, &args[2], &args[3], cpu_device, fill_default_dtype(&args[1]), &dev, &dt));
  return fill(tr, ndim, shape, args[1], dev, dt, out);
}

static th_status constant_new(th_trace *tr, const th_symbol *sym, const th_arg *args, int64_t value, th_arg *out) {
  int64_t shape[TH_MAX_DIMS];
  int ndim;
  th_device dev;
  th_dtype dt;
  TH_TRY(read_shape(sym->qualname, &args[0], shape, &ndim));
  TH_TRY(no_grad(sym->qualname, &args[3]));
  TH_TRY(dev_dtype(sym->qualname, &args[1], &args[2], cpu_device, TH_F32, &dev, &dt));
  return fill(tr, ndim, shape, th_arg_int(value), dev, dt, out);
}
th_status ltorch_zeros_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return constant_new(tr, sym, args, 0, out);
}
th_status ltorch_ones_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return constant_new(tr, sym, args, 1, out);
}
th_status ltorch_empty_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return constant_new(tr, sym, args, 0, out);
}

/* The *_like forms: shape of a; device and dtype default to a's; requires_grad (the argument after
 * dtype) must be False. */
static th_status constant_like(th_trace *tr, const th_symbol *sym, const th_arg *a, th_arg value, const th_arg *dev_arg,
                               const th_arg *dt_arg, th_arg *out) {
  const th_value *v = a->u.value;
  th_device dev;
  th_dtype dt;
  TH_TRY(no_grad(sym->qualname, dt_arg + 1));
  TH_TRY(dev_dtype(sym->qualname, dev_arg, dt_arg, v->device, v->dtype, &dev, &dt));
  return fill(tr, v->ndim, v->shape, value, dev, dt, out);
}
th_status ltorch_full_like_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return constant_like(tr, sym, &args[0], args[1], &args[2], &args[3], out);
}
th_status ltorch_zeros_like_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return constant_like(tr, sym, &args[0], th_arg_int(0), &args[1], &args[2], out);
}
th_status ltorch_ones_like_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return constant_like(tr, sym, &args[0], th_arg_int(1), &args[1], &args[2], out);
}
th_status ltorch_empty_like_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return constant_like(tr, sym, &args[0], th_arg_int(0), &args[1], &args[2], out);
}

/* ---- arange ------------------------------------------------------------------------------------- */

/* arange(start, end=None, step=1) as PyTorch's CPU kernel: the length is ceil((end - start) / step)
 * in double of the given bounds, whatever the dtype. For an integer dtype the values are one
 * prims.iota of start and step truncated to int64 (arange(-0.9, 2.1, 2.0, dtype=torch.int64) is
 * [0, 2]; arange(0, 64, 0.5, dtype=torch.int64) is 128 zeros). Float dtypes compute start + i * step
 * in float64 from an int64 iota and convert once. */
th_status ltorch_arange_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_arg *sa = &args[0], *ea = &args[1], *pa = &args[2];
  if (ea->kind == TH_ARG_NONE) { /* arange(end) */
    ea = &args[0];
    sa = NULL;
  }
  double start = 0.0, end, step;
  if (sa) TH_TRY(th_tu_float(op, "start", sa, &start));
  TH_TRY(th_tu_float(op, "end", ea, &end));
  TH_TRY(th_tu_float(op, "step", pa, &step));
  TH_TRY(no_grad(op, &args[5]));
  bool all_int = th_meta_number_type(ea) != TH_F64 && th_meta_number_type(pa) != TH_F64 &&
                 (!sa || th_meta_number_type(sa) != TH_F64);
  if (!isfinite(start) || !isfinite(end))
    return th_error(TH_ERR_RUNTIME, "%s: unsupported range: %g -> %g", op, start, end);
  th_device dev;
  th_dtype dt;
  TH_TRY(dev_dtype(op, &args[3], &args[4], cpu_device, all_int ? TH_I64 : TH_F32, &dev, &dt));
  if (dt == TH_BOOL) return th_error(TH_ERR_RUNTIME, "%s: \"arange_cpu\" not implemented for 'Bool'", op);
  bool int_dt = th_dtype_is_integer(dt);
  double len_d;
  if (int_dt) {
    if (fabs(start) >= 9.2e18 || fabs(end) >= 9.2e18 || fabs(step) >= 9.2e18)
      return th_error(TH_ERR_RUNTIME, "%s: unsupported range: %g -> %g", op, start, end);
    if (step == 0.0) return th_error(TH_ERR_RUNTIME, "%s: step must be nonzero", op);
    if (!((step > 0 && end >= start) || (step < 0 && end <= start)))
      return th_error(TH_ERR_RUNTIME, "%s: upper bound and larger bound inconsistent with step sign", op);
    len_d = ceil((end - start) / step);
    start = trunc(start);
    step = trunc(step);
  } else {
    if (step == 0.0) return th_error(TH_ERR_RUNTIME, "%s: step must be nonzero", op);
    if (!((step > 0 && end >= start) || (step < 0 && end <= start)))
      return th_error(TH_ERR_RUNTIME, "%s: upper bound and larger bound inconsistent with step sign", op);
    len_d = ceil((end - start) / step);
  }
  if (len_d > 9.0e15) return th_error(TH_ERR_RUNTIME, "%s: arange of %g elements is too large", op, len_d);
  int64_t length = len_d > 0 ? (int64_t)len_d : 0;
  if (length == 0) { /* prims.iota(0) has shape (); build the empty (0,) tensor directly */
    int64_t zero = 0;
    return fill(tr, 1, &zero, th_arg_int(0), dev, dt, out);
  }
  if (int_dt) return th_tu_iota(tr, length, (int64_t)start, (int64_t)step, dev, dt, out);
  th_arg idx;
  TH_TRY(th_tu_iota(tr, length, 0, 1, dev, TH_I64, &idx));
  TH_TRY(th_tu_convert(tr, &idx, TH_F64));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_mul, idx, th_arg_float(step), &idx));
  TH_TRY(th_tu_call2(tr, TH_OP_prims_add, idx, th_arg_float(start), &idx));
  *out = idx;
  return th_tu_convert(tr, out, dt);
}

/* ---- random ------------------------------------------------------------------------------------- */

/* uniform_like(a) = uniform_philox over a's shape from the generator state that
 * get_and_update_rng_state hands out, advanced by the Philox blocks the samples take (four elements a
 * block, two for float64): each call of a program draws fresh numbers, and a recomputation of the same
 * uniform_philox (rematerialization in the backward) gives the same ones. */
th_status ltorch_uniform_like_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  th_device dev;
  th_dtype dt;
  double lo, hi;
  TH_TRY(dev_dtype(op, &args[3], &args[4], v->device, v->dtype, &dev, &dt));
  TH_TRY(th_tu_float(op, "minval", &args[1], &lo));
  TH_TRY(th_tu_float(op, "maxval", &args[2], &hi));
  int64_t per = dt == TH_F64 ? 2 : 4, blocks = (th_value_numel(v) + per - 1) / per;
  th_arg state;
  static const char *const dkw[1] = {"device"};
  th_arg dkwargs[1] = {th_tu_device(dev)}, bargs[1] = {th_arg_int(blocks)};
  TH_TRY(th_tu_call_kw(tr, TH_OP_prims_get_and_update_rng_state, 1, bargs, 1, dkw, dkwargs, &state));
  th_arg items[TH_MAX_DIMS];
  th_arg pargs[3] = {th_tu_ints(items, v->ndim, v->shape), th_arg_float(lo), th_arg_float(hi)};
  static const char *const kw[4] = {"device", "dtype", "seed", "offset"};
  th_arg kwargs[4] = {th_tu_device(dev), th_arg_dtype(dt), state.u.seq.items[0], state.u.seq.items[1]};
  return th_tu_call_kw(tr, TH_OP_prims_uniform_philox, 3, pargs, 4, kw, kwargs, out);
}

/* ---- tril / triu ---------------------------------------------------------------------------------- */

/* The (rows, cols) bool mask row + diagonal >= col (lower) or row + diagonal <= col (upper), built from
 * two iotas, then where(mask, a, fill) (a & mask for bool tensors) over a's last two dims. */
static th_status triangle(th_trace *tr, const th_symbol *sym, const th_arg *args, bool lower, th_arg *out) {
  const char *op = sym->qualname;
  const th_value *v = args[0].u.value;
  if (v->ndim < 2)
    return th_error(TH_ERR_RUNTIME, "%s: %s: input tensor must have at least 2 dimensions", op,
                    lower ? "tril" : "triu");
  int64_t diag;
  TH_TRY(th_meta_int(op, "diagonal", &args[1], &diag));
  int64_t nrows = v->shape[v->ndim - 2], ncols = v->shape[v->ndim - 1];
  if (nrows == 0 || ncols == 0) { /* nothing to mask */
    *out = args[0];
    return TH_OK;
  }
  th_arg rows, cols, mask;
  TH_TRY(th_tu_iota(tr, nrows, diag, 1, v->device, TH_I64, &rows)); /* row + diagonal */
  TH_TRY(th_tu_iota(tr, ncols, 0, 1, v->device, TH_I64, &cols));
  int64_t shape[2] = {nrows, ncols}, d0 = 0, d1 = 1;
  th_arg s_items[2], b_items[1];
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, rows, th_tu_ints(s_items, 2, shape), th_tu_ints(b_items, 1, &d0),
                     &rows));
  TH_TRY(th_tu_call3(tr, TH_OP_prims_broadcast_in_dim, cols, th_tu_ints(s_items, 2, shape), th_tu_ints(b_items, 1, &d1),
                     &cols));
  TH_TRY(th_tu_call2(tr, lower ? TH_OP_prims_ge : TH_OP_prims_le, rows, cols, &mask));
  if (v->dtype == TH_BOOL && args[2].kind == TH_ARG_NONE)
    return th_tu_call2(tr, TH_OP_ltorch_bitwise_and, args[0], mask, out);
  th_arg fillv = args[2].kind == TH_ARG_NONE ? th_arg_int(0) : args[2];
  return th_tu_call3(tr, TH_OP_ltorch_where, mask, args[0], fillv, out);
}

th_status ltorch_tril_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return triangle(tr, sym, args, true, out);
}
th_status ltorch_triu_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  return triangle(tr, sym, args, false, out);
}
