/* thunder/dtype.h — element types and bit-exact scalar conversions.
 *
 * The twelve dtypes PyTorch and Thunder share for tensors, with PyTorch's names ("float32") and
 * Thunder's short forms ("f32"). Conversions between float32 and the 16- and 8-bit float formats are
 * bit-exact with PyTorch: round to nearest, ties to even; NaN stays a quiet NaN; float8_e4m3fn has no
 * infinity (its only NaN codes are 0x7f/0xff). */
#ifndef THUNDER_DTYPE_H
#define THUNDER_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum th_dtype {
  TH_BOOL = 0, /* bool,          b8   */
  TH_U8,       /* uint8,         u8   */
  TH_I8,       /* int8,          i8   */
  TH_I16,      /* int16,         i16  */
  TH_I32,      /* int32,         i32  */
  TH_I64,      /* int64,         i64  */
  TH_F16,      /* float16,       f16  */
  TH_BF16,     /* bfloat16,      bf16 */
  TH_F32,      /* float32,       f32  */
  TH_F64,      /* float64,       f64  */
  TH_F8E4M3FN, /* float8_e4m3fn, f8_e4m3fn */
  TH_F8E5M2,   /* float8_e5m2,   f8_e5m2   */
  TH_DTYPE_COUNT
} th_dtype;

/* PyTorch's name without prefix: "float32", "bfloat16", "float8_e4m3fn", "bool". */
const char *th_dtype_name(th_dtype dt);
/* Thunder's short name: "f32", "bf16", "f8_e4m3fn", "b8", "u8". */
const char *th_dtype_short(th_dtype dt);
/* Size of one element in bytes (bool is 1). */
size_t th_dtype_size(th_dtype dt);
/* Parses any of: "float32", "f32", "torch.float32", "dtypes.float32", "thunder.float32",
 * "thunder.dtypes.float32", "ui8" (Thunder's uint8 short form). Returns false if unknown. */
bool th_dtype_parse(const char *s, th_dtype *out);

bool th_dtype_is_float(th_dtype dt); /* f16 bf16 f32 f64 and both fp8 formats */
bool th_dtype_is_fp8(th_dtype dt);
bool th_dtype_is_low_precision(th_dtype dt); /* f16, bf16, fp8: computed in f32 by the torch layer */
bool th_dtype_is_integer(th_dtype dt);       /* u8 i8 i16 i32 i64 (not bool) */

/* ---- scalar conversions (bit-exact, see file comment) ---------------------------------------- */
uint16_t th_f32_to_f16(float x);
float th_f16_to_f32(uint16_t h);
uint16_t th_f32_to_bf16(float x);
float th_bf16_to_f32(uint16_t h);
/* float32 -> fp8. Plain (saturate=false) is PyTorch's cast (torch >= 2.12): e4m3fn saturates, so
 * everything that rounds past 448, +-inf included, gives +-448; e5m2 gives +-inf from 61440 up.
 * saturate=true first clamps to +-448 (e4m3fn: the same result) / +-57344 (e5m2), so +-inf also
 * become +-max (torchao's clamp-then-cast); NaN stays NaN in both modes. fp8 -> float32 is exact for
 * every code. */
uint8_t th_f32_to_f8e4m3fn(float x, bool saturate);
float th_f8e4m3fn_to_f32(uint8_t v);
uint8_t th_f32_to_f8e5m2(float x, bool saturate);
float th_f8e5m2_to_f32(uint8_t v);

#ifdef __cplusplus
}
#endif
#endif
