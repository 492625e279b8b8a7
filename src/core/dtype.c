/* dtype.c — dtype names, sizes, predicates, and the public scalar conversions (see thunder/dtype.h).
 *
 * Names come from one table indexed by th_dtype; th_dtype_parse strips a known module prefix and then
 * looks the rest up in that table. The conversions are thin wrappers over the static inline codecs in
 * core/scalar.h, which the eager kernels also use, so there is one implementation of each. */
#include <string.h>

#include "core/scalar.h"
#include "thunder/dtype.h"

typedef struct dtype_info {
  const char *name;       /* PyTorch: "float32" */
  const char *short_name; /* Thunder: "f32" */
  size_t size;
} dtype_info;

static const dtype_info dtype_table[TH_DTYPE_COUNT] = {
  [TH_BOOL] = {"bool", "b8", 1},
  [TH_U8] = {"uint8", "u8", 1},
  [TH_I8] = {"int8", "i8", 1},
  [TH_I16] = {"int16", "i16", 2},
  [TH_I32] = {"int32", "i32", 4},
  [TH_I64] = {"int64", "i64", 8},
  [TH_F16] = {"float16", "f16", 2},
  [TH_BF16] = {"bfloat16", "bf16", 2},
  [TH_F32] = {"float32", "f32", 4},
  [TH_F64] = {"float64", "f64", 8},
  [TH_F8E4M3FN] = {"float8_e4m3fn", "f8_e4m3fn", 1},
  [TH_F8E5M2] = {"float8_e5m2", "f8_e5m2", 1},
};

static bool dtype_valid(th_dtype dt) { return (unsigned)dt < (unsigned)TH_DTYPE_COUNT; }

const char *th_dtype_name(th_dtype dt) { return dtype_valid(dt) ? dtype_table[dt].name : "?"; }

const char *th_dtype_short(th_dtype dt) { return dtype_valid(dt) ? dtype_table[dt].short_name : "?"; }

size_t th_dtype_size(th_dtype dt) { return dtype_valid(dt) ? dtype_table[dt].size : 0; }

/* If s starts with prefix, returns the rest, else NULL. */
static const char *strip_prefix(const char *s, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(s, prefix, n) == 0 ? s + n : NULL;
}

/* Looks up a bare name; short names only when allow_short (PyTorch has no "f32"). */
static bool lookup(const char *s, bool allow_short, th_dtype *out) {
  for (int i = 0; i < TH_DTYPE_COUNT; i++) {
    if (strcmp(s, dtype_table[i].name) == 0 || (allow_short && strcmp(s, dtype_table[i].short_name) == 0)) {
      *out = (th_dtype)i;
      return true;
    }
  }
  if (allow_short && strcmp(s, "ui8") == 0) {
    *out = TH_U8;
    return true;
  }
  if (allow_short && strcmp(s, "bool8") == 0) { /* Thunder's full name of bool: dtypes.bool8 */
    *out = TH_BOOL;
    return true;
  }
  return false;
}

/* "torch." takes PyTorch names only; Thunder's prefixes take both spellings; no prefix takes both. */
bool th_dtype_parse(const char *s, th_dtype *out) {
  static const char *const thunder_prefixes[] = {"thunder.dtypes.", "thunder.", "dtypes."};
  th_dtype dt;
  const char *rest;
  if (!s || !out) return false;
  if ((rest = strip_prefix(s, "torch.")) != NULL) {
    if (!lookup(rest, false, &dt)) return false;
  } else {
    rest = s;
    for (size_t i = 0; i < sizeof thunder_prefixes / sizeof thunder_prefixes[0]; i++) {
      const char *r = strip_prefix(s, thunder_prefixes[i]);
      if (r) {
        rest = r;
        break;
      }
    }
    if (!lookup(rest, true, &dt)) return false;
  }
  *out = dt;
  return true;
}

bool th_dtype_is_float(th_dtype dt) {
  switch (dt) {
    case TH_F16:
    case TH_BF16:
    case TH_F32:
    case TH_F64:
    case TH_F8E4M3FN:
    case TH_F8E5M2: return true;
    default: return false;
  }
}

bool th_dtype_is_fp8(th_dtype dt) { return dt == TH_F8E4M3FN || dt == TH_F8E5M2; }

bool th_dtype_is_low_precision(th_dtype dt) { return dt == TH_F16 || dt == TH_BF16 || th_dtype_is_fp8(dt); }

bool th_dtype_is_integer(th_dtype dt) {
  switch (dt) {
    case TH_U8:
    case TH_I8:
    case TH_I16:
    case TH_I32:
    case TH_I64: return true;
    default: return false;
  }
}

/* ---- scalar conversions: wrappers over core/scalar.h ----------------------------------------------- */
uint16_t th_f32_to_f16(float x) { return th_sc_f32_to_f16(x); }
float th_f16_to_f32(uint16_t h) { return th_sc_f16_to_f32(h); }
uint16_t th_f32_to_bf16(float x) { return th_sc_f32_to_bf16(x); }
float th_bf16_to_f32(uint16_t h) { return th_sc_bf16_to_f32(h); }
uint8_t th_f32_to_f8e4m3fn(float x, bool saturate) { return th_sc_f32_to_e4m3fn(x, saturate); }
float th_f8e4m3fn_to_f32(uint8_t v) { return th_sc_e4m3fn_to_f32(v); }
uint8_t th_f32_to_f8e5m2(float x, bool saturate) { return th_sc_f32_to_e5m2(x, saturate); }
float th_f8e5m2_to_f32(uint8_t v) { return th_sc_e5m2_to_f32(v); }
