/* scalar.h — one element at a time: the float16/bfloat16/fp8 codecs and typed load/store.
 *
 * The eager kernels read and write every element through th_load_* / th_store_*, so everything here
 * is static inline and switches on the dtype. The codecs are the implementation behind the public
 * th_f32_to_f16 & co. in thunder/dtype.h (dtype.c only wraps them) and follow PyTorch bit for bit:
 *
 *   float32 -> float16   round to nearest even; NaN keeps its sign and the top 9 payload bits with the
 *                        quiet bit set, exactly as the F16C instruction vcvtps2ph (imm 0) does.
 *   float32 -> bfloat16  round to nearest even; every NaN becomes 0x7fc0 (c10::BFloat16).
 *   float32 -> fp8       c10::Float8_e4m3fn / Float8_e5m2 of PyTorch >= 2.12: e4m3fn rounds to nearest
 *                        even and saturates: a finite |x| that rounds above 448 (|x| > 464; the tie at
 *                        464 goes to the even code 448) and +-inf give +-448 (0x7e|sign), NaN gives
 *                        0x7f|sign, so its saturating variant is the same function. e5m2 rounds to
 *                        nearest even with overflow to +-inf (|x| >= 61440), NaN gives 0x7f|sign; its
 *                        saturating variant first clamps |x| (inf included) to 57344, NaN stays NaN.
 *   float16/fp8 -> f32   exact; a NaN comes back quiet (c10 and vcvtph2ps both set the quiet bit).
 *   bfloat16 -> f32      exact: the 16 bits shifted up, NaN payload and all (c10 does the same).
 *
 * Casts between the numeric kinds follow PyTorch's CPU casts on x86-64 (c10 static_cast_with_inter_type
 * compiled to cvttsd2si/cvttss2si), but with every case defined in C:
 *   to bool              v != 0 (so NaN is true);
 *   to int64             truncation toward zero; NaN and values whose truncation is outside int64 give
 *                        INT64_MIN (the x86 "integer indefinite" value);
 *   to int32/int16/int8  truncation to int32 as above (NaN/out of range give INT32_MIN), then the low
 *                        16/8 bits: 40000.0 -> int16 -25536, 300.0 -> int8 44, 1e10 -> int8 0;
 *   to uint8             truncation to int64 as above, then the low 8 bits: -1.0 -> 255, 300.7 -> 44;
 *   int -> narrower int  the low bits (two's complement wrap);
 *   to f16/bf16/fp8      through float32 (double -> float -> format, as c10 does; int64 -> float first);
 *                        the fp8 stores are the plain casts (PyTorch's: e4m3fn saturates, e5m2 does not).
 * These match torch 1.13 on x86-64 (tests/unit/test_dtype.c holds the spot values).
 * The subnormal branches of the encoders round with one float addition, as c10 does: they assume the
 * default rounding mode (nearest); FTZ/DAZ cannot change a result (every float32 subnormal rounds to 0). */
#ifndef TH_SCALAR_H
#define TH_SCALAR_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "thunder/dtype.h"

/* ---- bit casts ------------------------------------------------------------------------------------ */
static inline uint32_t th_sc_f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float th_sc_f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* ---- float16 ------------------------------------------------------------------------------------- */
/* float32 -> float16 bits, round to nearest even (see file comment for NaN). */
static inline uint16_t th_sc_f32_to_f16(float x) {
  uint32_t w = th_sc_f32_bits(x);
  uint16_t sign = (uint16_t)((w >> 16) & 0x8000u);
  uint32_t a = w & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) /* >= 65520 (half way from 65504 to 2^16) rounds to inf; inf stays inf */
    return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) { /* >= 2^-14: normal; round at bit 13 with ties to even, then rebias */
    uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
  }
  /* Below 2^-14: a subnormal multiple of 2^-24. 0.5f has an ulp of 2^-24, so the float add does the
   * round-to-nearest-even for us and the low bits of the sum are the result. */
  float s = th_sc_f32_from_bits(a) + 0.5f;
  return (uint16_t)(sign | (th_sc_f32_bits(s) - 0x3f000000u));
}

/* float16 bits -> float32, exact (NaN quieted). */
static inline float th_sc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) /* inf, or NaN with the quiet bit forced */
    return th_sc_f32_from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u));
  if (e != 0) return th_sc_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  float v = (float)m * 0x1p-24f; /* subnormal or zero: exact in float32 */
  return sign ? -v : v;
}

/* ---- bfloat16 ------------------------------------------------------------------------------------ */
/* float32 -> bfloat16 bits, round to nearest even; NaN -> 0x7fc0. */
static inline uint16_t th_sc_f32_to_bf16(float x) {
  uint32_t w = th_sc_f32_bits(x);
  if ((w & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return (uint16_t)((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);
}

/* bfloat16 bits -> float32, exact. */
static inline float th_sc_bf16_to_f32(uint16_t h) { return th_sc_f32_from_bits((uint32_t)h << 16); }

/* ---- float8 e4m3fn (bias 7, no inf, NaN 0x7f/0xff, max 448) -----------------------------------------
 * PyTorch's cast saturates, so `saturate` changes nothing here (it exists for e5m2's sake). */
static inline uint8_t th_sc_f32_to_e4m3fn(float x, bool saturate) {
  (void)saturate;
  uint32_t w = th_sc_f32_bits(x);
  uint32_t sign = w & 0x80000000u;
  uint32_t a = w ^ sign;
  uint8_t r;
  if (a > 0x43e80000u) { /* > 464 (rounds past 448), inf: 448; NaN stays NaN */
    r = a > 0x7f800000u ? 0x7f : 0x7e;
  } else if (a < 0x3c800000u) { /* below 2^-6: subnormal, a multiple of 2^-9 = the ulp of 2^14 */
    float s = th_sc_f32_from_bits(a) + 0x1p14f;
    r = (uint8_t)(th_sc_f32_bits(s) - 0x46800000u);
  } else { /* normal: rebias 127 -> 7 and round at bit 20, ties to even */
    a += 0x7ffffu + ((a >> 20) & 1u);
    r = (uint8_t)((a - (120u << 23)) >> 20);
  }
  return (uint8_t)(r | (sign >> 24));
}

static inline float th_sc_e4m3fn_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t e = (v >> 3) & 0xfu, m = v & 0x7u;
  if ((v & 0x7fu) == 0x7fu) return th_sc_f32_from_bits(sign | 0x7ff00000u); /* NaN, as c10 decodes it */
  if (e != 0) return th_sc_f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
  float f = (float)m * 0x1p-9f; /* subnormal or zero */
  return sign ? -f : f;
}

/* ---- float8 e5m2 (bias 15, inf 0x7c, NaN 0x7d-0x7f, max 57344) --------------------------------------- */
static inline uint8_t th_sc_f32_to_e5m2(float x, bool saturate) {
  uint32_t w = th_sc_f32_bits(x);
  uint32_t sign = w & 0x80000000u;
  uint32_t a = w ^ sign;
  uint8_t r;
  if (saturate && a > 0x47600000u && a <= 0x7f800000u) a = 0x47600000u; /* clamp to 57344, inf too */
  if (a >= 0x47800000u) {                                               /* >= 2^16, inf, NaN */
    r = a > 0x7f800000u ? 0x7f : 0x7c;
  } else if (a < 0x38800000u) { /* below 2^-14: subnormal, a multiple of 2^-16 = the ulp of 2^7 */
    float s = th_sc_f32_from_bits(a) + 0x1p7f;
    r = (uint8_t)(th_sc_f32_bits(s) - 0x43000000u);
  } else { /* normal: rebias 127 -> 15 and round at bit 21, ties to even (61440 and up carry to inf) */
    a += 0xfffffu + ((a >> 21) & 1u);
    r = (uint8_t)((a - (112u << 23)) >> 21);
  }
  return (uint8_t)(r | (sign >> 24));
}

/* e5m2 is the top byte of a float16, so decode it as one (as c10 does). */
static inline float th_sc_e5m2_to_f32(uint8_t v) { return th_sc_f16_to_f32((uint16_t)(v << 8)); }

/* ---- float -> integer casts with x86 semantics, no UB (see file comment) ------------------------------ */
static inline int64_t th_sc_f64_to_i64(double v) {
  if (v >= -0x1p63 && v < 0x1p63) return (int64_t)v;
  return INT64_MIN;
}

static inline int32_t th_sc_f64_to_i32(double v) {
  if (v > -2147483649.0 && v < 2147483648.0) return (int32_t)v;
  return INT32_MIN;
}

/* ---- raw element access (memcpy: no alignment or aliasing assumptions; compiles to one move) -------- */
static inline uint8_t th_sc_ld_u8(const void *p) {
  uint8_t v;
  memcpy(&v, p, 1);
  return v;
}
static inline int8_t th_sc_ld_i8(const void *p) {
  int8_t v;
  memcpy(&v, p, 1);
  return v;
}
static inline uint16_t th_sc_ld_u16(const void *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}
static inline int16_t th_sc_ld_i16(const void *p) {
  int16_t v;
  memcpy(&v, p, 2);
  return v;
}
static inline int32_t th_sc_ld_i32(const void *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}
static inline int64_t th_sc_ld_i64(const void *p) {
  int64_t v;
  memcpy(&v, p, 8);
  return v;
}
static inline float th_sc_ld_f32(const void *p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}
static inline double th_sc_ld_f64(const void *p) {
  double v;
  memcpy(&v, p, 8);
  return v;
}

static inline void th_sc_st_u8(void *p, uint8_t v) { memcpy(p, &v, 1); }
static inline void th_sc_st_u16(void *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void th_sc_st_u32(void *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void th_sc_st_i64(void *p, int64_t v) { memcpy(p, &v, 8); }
static inline void th_sc_st_f32(void *p, float v) { memcpy(p, &v, 4); }
static inline void th_sc_st_f64(void *p, double v) { memcpy(p, &v, 8); }

/* ---- typed load/store ---------------------------------------------------------------------------- */
/* Reads the element of dtype dt at p as a double (exact for every dtype but int64 beyond 2^53, which
 * rounds to nearest like static_cast<double>). bool reads as 0/1. */
static inline double th_load_f64(const void *p, th_dtype dt) {
  switch (dt) {
    case TH_BOOL: return th_sc_ld_u8(p) != 0;
    case TH_U8: return th_sc_ld_u8(p);
    case TH_I8: return th_sc_ld_i8(p);
    case TH_I16: return th_sc_ld_i16(p);
    case TH_I32: return th_sc_ld_i32(p);
    case TH_I64: return (double)th_sc_ld_i64(p);
    case TH_F16: return th_sc_f16_to_f32(th_sc_ld_u16(p));
    case TH_BF16: return th_sc_bf16_to_f32(th_sc_ld_u16(p));
    case TH_F32: return th_sc_ld_f32(p);
    case TH_F64: return th_sc_ld_f64(p);
    case TH_F8E4M3FN: return th_sc_e4m3fn_to_f32(th_sc_ld_u8(p));
    case TH_F8E5M2: return th_sc_e5m2_to_f32(th_sc_ld_u8(p));
    default: return 0.0;
  }
}

/* Reads the element at p as a float32 (one rounding from int32/int64/float64, as static_cast<float>). */
static inline float th_load_f32(const void *p, th_dtype dt) {
  switch (dt) {
    case TH_BOOL: return th_sc_ld_u8(p) != 0;
    case TH_U8: return th_sc_ld_u8(p);
    case TH_I8: return th_sc_ld_i8(p);
    case TH_I16: return th_sc_ld_i16(p);
    case TH_I32: return (float)th_sc_ld_i32(p);
    case TH_I64: return (float)th_sc_ld_i64(p);
    case TH_F16: return th_sc_f16_to_f32(th_sc_ld_u16(p));
    case TH_BF16: return th_sc_bf16_to_f32(th_sc_ld_u16(p));
    case TH_F32: return th_sc_ld_f32(p);
    case TH_F64: return (float)th_sc_ld_f64(p);
    case TH_F8E4M3FN: return th_sc_e4m3fn_to_f32(th_sc_ld_u8(p));
    case TH_F8E5M2: return th_sc_e5m2_to_f32(th_sc_ld_u8(p));
    default: return 0.0f;
  }
}

/* Reads the element at p as an int64: integers exactly, bool as 0/1, floats truncated toward zero
 * (NaN and out of range give INT64_MIN, see file comment). */
static inline int64_t th_load_i64(const void *p, th_dtype dt) {
  switch (dt) {
    case TH_BOOL: return th_sc_ld_u8(p) != 0;
    case TH_U8: return th_sc_ld_u8(p);
    case TH_I8: return th_sc_ld_i8(p);
    case TH_I16: return th_sc_ld_i16(p);
    case TH_I32: return th_sc_ld_i32(p);
    case TH_I64: return th_sc_ld_i64(p);
    case TH_F64: return th_sc_f64_to_i64(th_sc_ld_f64(p));
    default: return th_sc_f64_to_i64((double)th_load_f32(p, dt)); /* the float32-or-narrower formats */
  }
}

/* Writes v to the element of dtype dt at p with PyTorch's cast semantics (see file comment). */
static inline void th_store_f64(void *p, th_dtype dt, double v) {
  switch (dt) {
    case TH_BOOL: th_sc_st_u8(p, v != 0); break;
    case TH_U8: th_sc_st_u8(p, (uint8_t)(uint64_t)th_sc_f64_to_i64(v)); break;
    case TH_I8: th_sc_st_u8(p, (uint8_t)(uint32_t)th_sc_f64_to_i32(v)); break;
    case TH_I16: th_sc_st_u16(p, (uint16_t)(uint32_t)th_sc_f64_to_i32(v)); break;
    case TH_I32: th_sc_st_u32(p, (uint32_t)th_sc_f64_to_i32(v)); break;
    case TH_I64: th_sc_st_i64(p, th_sc_f64_to_i64(v)); break;
    case TH_F16: th_sc_st_u16(p, th_sc_f32_to_f16((float)v)); break;
    case TH_BF16: th_sc_st_u16(p, th_sc_f32_to_bf16((float)v)); break;
    case TH_F32: th_sc_st_f32(p, (float)v); break;
    case TH_F64: th_sc_st_f64(p, v); break;
    case TH_F8E4M3FN: th_sc_st_u8(p, th_sc_f32_to_e4m3fn((float)v, false)); break;
    case TH_F8E5M2: th_sc_st_u8(p, th_sc_f32_to_e5m2((float)v, false)); break;
    default: break;
  }
}

/* Writes a float32 to the element at p; same results as th_store_f64(p, dt, (double)v). */
static inline void th_store_f32(void *p, th_dtype dt, float v) {
  switch (dt) {
    case TH_F16: th_sc_st_u16(p, th_sc_f32_to_f16(v)); break;
    case TH_BF16: th_sc_st_u16(p, th_sc_f32_to_bf16(v)); break;
    case TH_F32: th_sc_st_f32(p, v); break;
    case TH_F8E4M3FN: th_sc_st_u8(p, th_sc_f32_to_e4m3fn(v, false)); break;
    case TH_F8E5M2: th_sc_st_u8(p, th_sc_f32_to_e5m2(v, false)); break;
    default: th_store_f64(p, dt, (double)v); break; /* bool, integers, float64: exact widening first */
  }
}

/* Writes an int64 to the element at p: integers keep the low bits, bool is v != 0, floats round once
 * to float64 or float32 (f16/bf16/fp8 then from that float32, as c10 does). */
static inline void th_store_i64(void *p, th_dtype dt, int64_t v) {
  switch (dt) {
    case TH_BOOL: th_sc_st_u8(p, v != 0); break;
    case TH_U8:
    case TH_I8: th_sc_st_u8(p, (uint8_t)(uint64_t)v); break;
    case TH_I16: th_sc_st_u16(p, (uint16_t)(uint64_t)v); break;
    case TH_I32: th_sc_st_u32(p, (uint32_t)(uint64_t)v); break;
    case TH_I64: th_sc_st_i64(p, v); break;
    case TH_F64: th_sc_st_f64(p, (double)v); break;
    default: th_store_f32(p, dt, (float)v); break; /* float32 and narrower */
  }
}

#endif
