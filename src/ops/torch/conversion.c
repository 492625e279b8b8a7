/* conversion.c — dtype and device conversions: ltorch.to (PyTorch's Tensor.to with its five calling
 * forms), type_as, the float()/half()/... shorthands, and the saturated fp8 cast other code uses.
 *
 * to() without copy returns its input when nothing changes (recorded as prims.shallow_copy by
 * th_call's identity rule); with copy=True it always produces a new tensor (prims.clone when neither
 * device nor dtype changes). The fp8 casts are plain prims.convert_element_type, which — as
 * PyTorch's cast — does not saturate; th_tu_to_fp8_saturated clamps first. */
#include <string.h>

#include "ops/torch/torch_util.h"

/* Parses to()'s positional forms: (device[, dtype]), (dtype), (None), (tensor). */
static th_status parse_to(const char *op, const th_arg *args, bool *has_dev, th_device *dev, bool *has_dt,
                          th_dtype *dt) {
  const th_arg *first = &args[1], *second = &args[2];
  TH_TRY(th_tu_device_arg(op, "device", &args[3], dev, has_dev));
  TH_TRY(th_tu_dtype_arg(op, "dtype", &args[4], dt, has_dt));
  th_dtype scratch;
  if (first->kind == TH_ARG_DEVICE || (first->kind == TH_ARG_STR && !th_dtype_parse(first->u.s, &scratch))) {
    if (*has_dev) return th_error(TH_ERR_VALUE, "%s: to received both a positional and keyword device argument", op);
    TH_TRY(th_tu_device_arg(op, "device", first, dev, has_dev));
    if (second->kind != TH_ARG_NONE) {
      if (*has_dt) return th_error(TH_ERR_VALUE, "%s: to received both a positional and keyword dtype argument", op);
      TH_TRY(th_tu_dtype_arg(op, "dtype", second, dt, has_dt));
    }
    return TH_OK;
  }
  if (first->kind == TH_ARG_DTYPE || first->kind == TH_ARG_STR) {
    if (*has_dt) return th_error(TH_ERR_VALUE, "%s: to received both a positional and keyword dtype argument", op);
    return th_tu_dtype_arg(op, "dtype", first, dt, has_dt);
  }
  if (first->kind == TH_ARG_NONE) return TH_OK;
  if (th_meta_is_tensor(first)) {
    if (!*has_dev) *dev = first->u.value->device;
    if (!*has_dt) *dt = first->u.value->dtype;
    *has_dev = *has_dt = true;
    return TH_OK;
  }
  return th_error(TH_ERR_TYPE, "%s: to() expected a tensor, dtype or device as its first argument", op);
}

/* to(a, tensor_dtype_or_device=None, optional_positional_dtype=None, /, *, device=None, dtype=None,
 *    copy=False, memory_format=None). memory_format is accepted and ignored (no layouts here). */
th_status ltorch_to_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  const char *op = sym->qualname;
  bool has_dev, has_dt, copy;
  th_device dev;
  th_dtype dt;
  TH_TRY(parse_to(op, args, &has_dev, &dev, &has_dt, &dt));
  TH_TRY(th_tu_bool(op, "copy", &args[5], &copy));
  th_arg a = args[0];
  const th_value *v = a.u.value;
  bool moved = false;
  if (has_dev && !th_device_eq(dev, v->device)) {
    TH_TRY(th_tu_call2(tr, TH_OP_prims_device_put, a, th_tu_device(dev), &a));
    moved = true;
  }
  if (has_dt && dt != a.u.value->dtype) {
    TH_TRY(th_tu_convert(tr, &a, dt));
    moved = true;
  }
  if (copy && !moved) return th_tu_call1(tr, TH_OP_prims_clone, a, out);
  *out = a;
  return TH_OK;
}

/* type_as(a, b) = to(a, b.dtype), recorded as a nested ltorch.to as in Thunder. */
th_status ltorch_type_as_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return th_tu_call2(tr, TH_OP_ltorch_to, args[0], th_arg_dtype(args[1].u.value->dtype), out);
}

static th_status convert_to(th_trace *tr, const th_arg *a, th_dtype dt, th_arg *out) {
  *out = *a;
  return th_tu_convert(tr, out, dt);
}
th_status ltorch_float_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return convert_to(tr, &args[0], TH_F32, out);
}
th_status ltorch_half_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return convert_to(tr, &args[0], TH_F16, out);
}
th_status ltorch_bfloat16_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return convert_to(tr, &args[0], TH_BF16, out);
}
th_status ltorch_double_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return convert_to(tr, &args[0], TH_F64, out);
}
th_status ltorch_long_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return convert_to(tr, &args[0], TH_I64, out);
}
th_status ltorch_int_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return convert_to(tr, &args[0], TH_I32, out);
}
th_status ltorch_bool_decomp(th_trace *tr, const th_symbol *sym, const th_arg *args, th_arg *out) {
  (void)sym;
  return convert_to(tr, &args[0], TH_BOOL, out);
}

/* ---- saturated fp8 cast ---------------------------------------------------------------------------- */

th_status th_tu_to_fp8_saturated(th_trace *tr, th_arg a, th_dtype fp8, th_arg *out) {
  if (!th_meta_is_tensor(&a)) return th_error(TH_ERR_TYPE, "to_fp8_saturated: expected a tensor");
  if (fp8 != TH_F8E4M3FN && fp8 != TH_F8E5M2)
    return th_error(TH_ERR_VALUE, "to_fp8_saturated: expected float8_e4m3fn or float8_e5m2, but got %s",
                    th_dtype_name(fp8));
  if (!th_dtype_is_float(a.u.value->dtype) || th_dtype_is_fp8(a.u.value->dtype))
    return th_error(TH_ERR_TYPE, "to_fp8_saturated: expected a float16/bfloat16/float32/float64 tensor, but got %s",
                    th_dtype_name(a.u.value->dtype));
  double max = fp8 == TH_F8E4M3FN ? 448.0 : 57344.0;
  th_arg clamped;
  TH_TRY(th_tu_call3(tr, TH_OP_ltorch_clamp, a, th_arg_float(-max), th_arg_float(max), &clamped));
  static const char *const kw[1] = {"dtype"};
  th_arg kwargs[1] = {th_arg_dtype(fp8)};
  return th_tu_call_kw(tr, TH_OP_ltorch_to, 1, &clamped, 1, kw, kwargs, out);
}
