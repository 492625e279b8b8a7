/* meta_util.c — the helpers of meta_util.h: argument kinds, int lists and dims read from arguments,
 * shape formatting for messages, dtype categories. Used by the prim metas and the torch layer. */
#include <inttypes.h>
#include <string.h>

#include "ops/meta_util.h"

/* ---- argument kinds ------------------------------------------------------------------------------- */

bool th_meta_is_tensor(const th_arg *a) { return a->kind == TH_ARG_VALUE && a->u.value->is_tensor; }

bool th_meta_is_number(const th_arg *a) {
  return a->kind == TH_ARG_BOOL || a->kind == TH_ARG_INT || a->kind == TH_ARG_FLOAT ||
         (a->kind == TH_ARG_VALUE && !a->u.value->is_tensor);
}

th_value *th_meta_tensor(const th_arg *a) { return th_meta_is_tensor(a) ? a->u.value : NULL; }

th_dtype th_meta_number_type(const th_arg *a) {
  switch (a->kind) {
    case TH_ARG_BOOL: return TH_BOOL;
    case TH_ARG_INT: return TH_I64;
    case TH_ARG_FLOAT: return TH_F64;
    case TH_ARG_VALUE: return a->u.value->dtype == TH_BOOL ? TH_BOOL : a->u.value->dtype == TH_F64 ? TH_F64 : TH_I64;
    default: return TH_I64;
  }
}

bool th_meta_number_value(const th_arg *a, double *f, int64_t *i) {
  double fv;
  int64_t iv;
  switch (a->kind) {
    case TH_ARG_BOOL:
      iv = a->u.b;
      fv = (double)iv;
      break;
    case TH_ARG_INT:
      iv = a->u.i;
      fv = (double)iv;
      break;
    case TH_ARG_FLOAT:
      fv = a->u.f;
      iv = (fv == fv && fv > -9.2e18 && fv < 9.2e18) ? (int64_t)fv : 0;
      break;
    case TH_ARG_VALUE: {
      const th_value *v = a->u.value;
      if (v->is_tensor || !v->has_value) return false;
      if (v->dtype == TH_F64) {
        fv = v->fvalue;
        iv = (fv == fv && fv > -9.2e18 && fv < 9.2e18) ? (int64_t)fv : 0;
      } else {
        iv = v->ivalue;
        fv = (double)iv;
      }
      break;
    }
    default: return false;
  }
  if (f) *f = fv;
  if (i) *i = iv;
  return true;
}

/* ---- int lists and dims --------------------------------------------------------------------------- */

static const char *pfx(const char *op) { return op ? op : ""; }
static const char *sep(const char *op) { return op ? ": " : ""; }

th_status th_meta_int(const char *op, const char *what, const th_arg *a, int64_t *out) {
  if (a->kind == TH_ARG_INT) {
    *out = a->u.i;
    return TH_OK;
  }
  if (a->kind == TH_ARG_BOOL) {
    *out = a->u.b;
    return TH_OK;
  }
  if (a->kind == TH_ARG_VALUE && !a->u.value->is_tensor && a->u.value->dtype != TH_F64) {
    if (!a->u.value->has_value)
      return th_error(TH_ERR_NOT_IMPLEMENTED, "%s%s%s must be a known int, but got an int proxy of unknown value",
                      pfx(op), sep(op), what);
    *out = a->u.value->ivalue;
    return TH_OK;
  }
  return th_error(TH_ERR_TYPE, "%s%sexpected %s to be an int, but got %s", pfx(op), sep(op), what, th_arg_kind_name(a));
}

th_status th_meta_int_list(const char *op, const char *what, const th_arg *a, int64_t out[TH_MAX_DIMS], int *n) {
  if (a->kind == TH_ARG_INT || a->kind == TH_ARG_VALUE) {
    if (a->kind == TH_ARG_VALUE && (a->u.value->is_tensor || a->u.value->dtype == TH_F64))
      return th_error(TH_ERR_TYPE, "%s%sexpected %s to be an int or a sequence of ints, but got %s", pfx(op), sep(op),
                      what, th_arg_kind_name(a));
    TH_TRY(th_meta_int(op, what, a, &out[0]));
    *n = 1;
    return TH_OK;
  }
  if (a->kind != TH_ARG_TUPLE && a->kind != TH_ARG_LIST)
    return th_error(TH_ERR_TYPE, "%s%sexpected %s to be an int or a sequence of ints, but got %s", pfx(op), sep(op),
                    what, th_arg_kind_name(a));
  if (a->u.seq.n > TH_MAX_DIMS)
    return th_error(TH_ERR_NOT_IMPLEMENTED, "%s%s%s has %d entries; at most %d dimensions are supported", pfx(op),
                    sep(op), what, a->u.seq.n, TH_MAX_DIMS);
  for (int k = 0; k < a->u.seq.n; k++) {
    const th_arg *x = &a->u.seq.items[k];
    bool ok = x->kind == TH_ARG_INT || x->kind == TH_ARG_BOOL ||
              (x->kind == TH_ARG_VALUE && !x->u.value->is_tensor && x->u.value->dtype != TH_F64);
    if (!ok)
      return th_error(TH_ERR_TYPE, "%s%sexpected %s to be a sequence of ints, but element %d is %s", pfx(op), sep(op),
                      what, k, th_arg_kind_name(x));
    TH_TRY(th_meta_int(op, what, x, &out[k]));
  }
  *n = a->u.seq.n;
  return TH_OK;
}

th_status th_meta_check_shape(const char *op, const int64_t *shape, int ndim) {
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0) {
      char buf[TH_META_SHAPE_BUF];
      return th_error(TH_ERR_RUNTIME, "%s%sTrying to create tensor with negative dimension %" PRId64 ": %s", pfx(op),
                      sep(op), shape[d], th_meta_shape_str(shape, ndim, buf, sizeof buf));
    }
  return TH_OK;
}

bool th_meta_numel(const int64_t *shape, int ndim, int64_t *out) {
  for (int d = 0; d < ndim; d++)
    if (shape[d] == 0) return (*out = 0), true;
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0 || __builtin_mul_overflow(n, shape[d], &n)) return (*out = -1), false;
  *out = n;
  return true;
}

th_status th_meta_canonical_dim(const char *op, int64_t dim, int ndim, int *out) {
  int64_t rank = ndim > 0 ? ndim : 1; /* a 0-dim tensor wraps like a 1-dim one (PyTorch, Thunder) */
  if (dim < -rank || dim >= rank)
    return th_error(TH_ERR_INDEX,
                    "%s%sDimension out of range (expected to be in range of [%" PRId64 ", %" PRId64
                    "], but got %" PRId64 ")",
                    pfx(op), sep(op), -rank, rank - 1, dim);
  if (dim < 0) dim += rank;
  *out = ndim > 0 ? (int)dim : 0;
  return TH_OK;
}

th_status th_meta_device(const char *op, const th_arg *a, th_device *out) {
  if (a->kind == TH_ARG_DEVICE) {
    *out = a->u.device;
    return TH_OK;
  }
  if (a->kind == TH_ARG_STR) {
    if (!th_device_parse(a->u.s, out))
      return th_error(TH_ERR_VALUE, "%s%sExpected a device string like 'cpu' or 'cuda:0', but got '%s'", pfx(op),
                      sep(op), a->u.s);
    return TH_OK;
  }
  return th_error(TH_ERR_TYPE, "%s%sexpected a device, but got %s", pfx(op), sep(op), th_arg_kind_name(a));
}

/* ---- formatting ------------------------------------------------------------------------------------ */

static char *shape_fmt(const int64_t *shape, int ndim, bool tuple, char *buf, size_t n) {
  if (!n) return buf;
  size_t k = 0;
  buf[0] = 0;
  k += (size_t)snprintf(buf, n, "%c", tuple ? '(' : '[');
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ", %" PRId64 : "%" PRId64, shape[i]);
  if (k < n) snprintf(buf + k, n - k, "%s", tuple ? (ndim == 1 ? ",)" : ")") : "]");
  return buf;
}

char *th_meta_shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
  return shape_fmt(shape, ndim, false, buf, n);
}

char *th_meta_shape_tuple_str(const int64_t *shape, int ndim, char *buf, size_t n) {
  return shape_fmt(shape, ndim, true, buf, n);
}

/* ---- dtype categories ------------------------------------------------------------------------------ */

th_meta_kind th_meta_dtype_kind(th_dtype dt) {
  if (dt == TH_BOOL) return TH_META_KIND_BOOL;
  return th_dtype_is_float(dt) ? TH_META_KIND_FLOAT : TH_META_KIND_INT;
}

bool th_meta_dtype_is_exact(th_dtype dt) { return !th_dtype_is_float(dt); }

th_dtype th_meta_dtype_numbertype(th_dtype dt) {
  switch (th_meta_dtype_kind(dt)) {
    case TH_META_KIND_BOOL: return TH_BOOL;
    case TH_META_KIND_INT: return TH_I64;
    case TH_META_KIND_FLOAT: return TH_F64;
  }
  return TH_I64;
}

const char *th_meta_numbertype_name(th_dtype pytype) {
  return pytype == TH_BOOL ? "bool" : pytype == TH_F64 ? "float" : "int";
}

const char *th_meta_dtype_repr(th_dtype dt) {
  static const char *const reprs[TH_DTYPE_COUNT] = {
    [TH_BOOL] = "thunder.dtypes.bool8",
    [TH_U8] = "thunder.dtypes.uint8",
    [TH_I8] = "thunder.dtypes.int8",
    [TH_I16] = "thunder.dtypes.int16",
    [TH_I32] = "thunder.dtypes.int32",
    [TH_I64] = "thunder.dtypes.int64",
    [TH_F16] = "thunder.dtypes.float16",
    [TH_BF16] = "thunder.dtypes.bfloat16",
    [TH_F32] = "thunder.dtypes.float32",
    [TH_F64] = "thunder.dtypes.float64",
    [TH_F8E4M3FN] = "thunder.dtypes.float8_e4m3fn",
    [TH_F8E5M2] = "thunder.dtypes.float8_e5m2",
  };
  return (unsigned)dt < TH_DTYPE_COUNT ? reprs[dt] : "thunder.dtypes.<invalid>";
}

/* ---- outputs --------------------------------------------------------------------------------------- */

th_status th_meta_new_tensor(th_trace *tr, th_dtype dtype, th_device device, int ndim, const int64_t *shape,
                             bool requires_grad, th_arg *out) {
  th_clear_error();
  th_value *v = th_value_new_tensor(tr, dtype, device, ndim, shape, requires_grad);
  if (!v) {
    th_status st = th_last_status();
    return st != TH_OK ? st : th_error(TH_ERR_NOMEM, "out of memory creating a tensor proxy");
  }
  *out = th_arg_value(v);
  return TH_OK;
}

th_status th_meta_new_tensor_like(th_trace *tr, const th_value *a, th_dtype dtype, int ndim, const int64_t *shape,
                                  th_arg *out) {
  return th_meta_new_tensor(tr, dtype, a->device, ndim, shape, a->requires_grad, out);
}
