/* kernel_prelude.h — the scalar helpers of the fuser's generated kernels.
 *
 * Every generated translation unit starts with <tgmath.h> and then the prelude the library embeds at
 * build time (cmake/embed_prelude.cmake): thunder/dtype.h, core/scalar.h (the eager executor's f16/bf16/
 * fp8 codecs and casts), mathlib.h when it exists, and this file, with their project #include lines
 * dropped (each is embedded whole, in that order). The codecs are therefore the eager executor's, bit
 * for bit.
 *
 * A kernel holds every value in the compute class of its dtype, as the eager kernels do: float for
 * f16/bf16/f32/fp8, double for f64, int64 for bool and the integers. th_fz_<from>_<to>(x) turns a value
 * of class <from> (f: float, d: double, i: int64) into the compute-class value of dtype <to>, exactly as
 * the eager executor's store-then-load would: th_store_f64 for floats (float -> integer truncates with
 * x86 semantics, f64 -> f16 goes through float32 first), th_store_i64 for integers (narrower integers
 * keep the low bits, bool is x != 0). The same helpers round an op's result to its own dtype
 * (th_fz_f_f16(x): the nearest float16). Nothing here allocates or has side effects. */
#ifndef TH_FUSER_KERNEL_PRELUDE_H
#define TH_FUSER_KERNEL_PRELUDE_H

#include <stdint.h>
#include <omp.h> /* column nests: omp_get_thread_num */

#include "core/scalar.h"

/* ---- bfloat16 in registers, without branches ------------------------------------------------------
 * th_fz_f_bf16(x) is th_sc_bf16_to_f32(th_sc_f32_to_bf16(x)) written with a mask: the same bits for
 * every input (NaN -> 0x7fc00000, else round to nearest even at bit 16; test_fuser_numerics checks
 * every rounding class against core/scalar.h), but a loop holding several of them still if-converts
 * and vectorizes, which the codec's early return prevents in gcc 12 once two are chained. The NaN test
 * is the float compare v != v (one vcmpps under AVX2) rather than an integer compare of the magnitude
 * bits, which costs an and, a bias subtraction and a signed compare (AVX2 has no unsigned one). A value
 * already rounded to bf16 is stored as its top half (th_fz_st_bf16: exact; a NaN keeps its payload, as
 * eager's same-dtype copies do). */
static inline float th_fz_f_bf16(float v) {
  uint32_t w = th_sc_f32_bits(v);
  uint32_t r = w + 0x7fffu + ((w >> 16) & 1u);
  uint32_t nan = 0u - (uint32_t)(v != v); /* all ones for NaN (a mask: gcc turns a ?: into a branch) */
  /* the low half cleared after the select: a store's >> 16 then makes the mask redundant (gcc folds it;
   * 3 fewer instructions per vector than masking r first) */
  return th_sc_f32_from_bits(((nan & 0x7fc00000u) | (~nan & r)) & 0xffff0000u);
}
static inline uint16_t th_fz_st_bf16(float v) { return (uint16_t)(th_sc_f32_bits(v) >> 16); }

/* ---- float16 in registers, without branches -------------------------------------------------------
 * core/scalar.h's f16 codec branches on the input class (NaN, overflow, normal, subnormal), which keeps
 * gcc 12 from vectorizing any loop that loads or stores f16; _Float16 conversions (F16C) do not
 * vectorize either without AVX-512 FP16. These compute every class and select with masks: the same
 * bits as th_sc_f32_to_f16 / th_sc_f16_to_f32 for every input (test_fuser_numerics checks all 2^32
 * floats and all 2^16 halves). The magnitude a < 2^31, so signed compares order it.
 *   th_fz_cv_f16(x): float -> f16 bits, round to nearest even; NaN quieted with its top payload bits.
 *   th_fz_ld_f16(h): f16 bits -> float, exact: (h & 0x7fff) << 13 read as a float and scaled by 2^112
 *     is the value for normals and subnormals alike; inf and NaN (quiet bit forced) by select. */
static inline uint16_t th_fz_cv_f16(float x) {
  uint32_t w = th_sc_f32_bits(x);
  uint32_t sign = (w >> 16) & 0x8000u, a = w & 0x7fffffffu;
  int32_t as = (int32_t)a;
  uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  uint32_t norm = (a + 0x0fffu + ((a >> 13) & 1u) - 0x38000000u) >> 13; /* wraps below 2^-14: not selected */
  uint32_t sub = th_sc_f32_bits(th_sc_f32_from_bits(a) + 0.5f) - 0x3f000000u;
  uint32_t m_nan = 0u - (uint32_t)(as > 0x7f800000), m_inf = 0u - (uint32_t)(as >= 0x477ff000);
  uint32_t m_norm = 0u - (uint32_t)(as >= 0x38800000);
  uint32_t r = (m_norm & norm) | (~m_norm & sub);
  r = (m_inf & 0x7c00u) | (~m_inf & r);
  r = (m_nan & nan) | (~m_nan & r);
  return (uint16_t)(sign | r);
}
static inline float th_fz_ld_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, m = h & 0x3ffu;
  uint32_t v = th_sc_f32_bits(th_sc_f32_from_bits(em << 13) * 0x1p112f);
  uint32_t sp = 0x7f800000u | (m << 13) | ((0u - (uint32_t)(m != 0)) & 0x00400000u);
  uint32_t m_sp = 0u - (uint32_t)(em >= 0x7c00u);
  return th_sc_f32_from_bits(sign | (m_sp & sp) | (~m_sp & v));
}

/* ---- from double (th_store_f64 semantics) --------------------------------------------------------- */
static inline int64_t th_fz_d_b8(double v) { return v != 0; }
static inline int64_t th_fz_d_u8(double v) { return (uint8_t)(uint64_t)th_sc_f64_to_i64(v); }
static inline int64_t th_fz_d_i8(double v) { return (int8_t)(uint8_t)(uint32_t)th_sc_f64_to_i32(v); }
static inline int64_t th_fz_d_i16(double v) { return (int16_t)(uint16_t)(uint32_t)th_sc_f64_to_i32(v); }
static inline int64_t th_fz_d_i32(double v) { return th_sc_f64_to_i32(v); }
static inline int64_t th_fz_d_i64(double v) { return th_sc_f64_to_i64(v); }
static inline float th_fz_d_f16(double v) { return th_fz_ld_f16(th_fz_cv_f16((float)v)); }
static inline float th_fz_d_bf16(double v) { return th_fz_f_bf16((float)v); }
static inline float th_fz_d_f32(double v) { return (float)v; }
static inline double th_fz_d_f64(double v) { return v; }
static inline float th_fz_d_f8e4m3fn(double v) { return th_sc_e4m3fn_to_f32(th_sc_f32_to_e4m3fn((float)v, false)); }
static inline float th_fz_d_f8e5m2(double v) { return th_sc_e5m2_to_f32(th_sc_f32_to_e5m2((float)v, false)); }

/* ---- from float: exactly widened to double first (th_store_f64((double)x)) ------------------------ */
static inline int64_t th_fz_f_b8(float v) { return v != 0; }
static inline int64_t th_fz_f_u8(float v) { return th_fz_d_u8(v); }
static inline int64_t th_fz_f_i8(float v) { return th_fz_d_i8(v); }
static inline int64_t th_fz_f_i16(float v) { return th_fz_d_i16(v); }
static inline int64_t th_fz_f_i32(float v) { return th_fz_d_i32(v); }
static inline int64_t th_fz_f_i64(float v) { return th_fz_d_i64(v); }
static inline float th_fz_f_f16(float v) { return th_fz_ld_f16(th_fz_cv_f16(v)); }
static inline float th_fz_f_f32(float v) { return v; }
static inline double th_fz_f_f64(float v) { return v; }
static inline float th_fz_f_f8e4m3fn(float v) { return th_sc_e4m3fn_to_f32(th_sc_f32_to_e4m3fn(v, false)); }
static inline float th_fz_f_f8e5m2(float v) { return th_sc_e5m2_to_f32(th_sc_f32_to_e5m2(v, false)); }

/* ---- from int64 (th_store_i64 semantics) ---------------------------------------------------------- */
static inline int64_t th_fz_i_b8(int64_t v) { return v != 0; }
static inline int64_t th_fz_i_u8(int64_t v) { return (uint8_t)(uint64_t)v; }
static inline int64_t th_fz_i_i8(int64_t v) { return (int8_t)(uint8_t)(uint64_t)v; }
static inline int64_t th_fz_i_i16(int64_t v) { return (int16_t)(uint16_t)(uint64_t)v; }
static inline int64_t th_fz_i_i32(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }
static inline int64_t th_fz_i_i64(int64_t v) { return v; }
static inline float th_fz_i_f16(int64_t v) { return th_fz_f_f16((float)v); }
static inline float th_fz_i_bf16(int64_t v) { return th_fz_f_bf16((float)v); }
static inline float th_fz_i_f32(int64_t v) { return (float)v; }
static inline double th_fz_i_f64(int64_t v) { return (double)v; }
static inline float th_fz_i_f8e4m3fn(int64_t v) { return th_fz_f_f8e4m3fn((float)v); }
static inline float th_fz_i_f8e5m2(int64_t v) { return th_fz_f_f8e5m2((float)v); }

/* ---- where ----------------------------------------------------------------------------------------
 * prims.where's template: pred ? a : b as bit masks. gcc 12 at the fuser's -O1 does not if-convert a
 * `?:` inside an `omp simd` loop ("control flow in loop"), which left every loop holding a where (masked
 * softmax and its gradient, clamp, fp8's saturating casts) scalar. The select is exact: the bits of a or
 * of b (NaN payloads and -0.0 kept). The predicate is the bool operand as the kernel holds it (an int64_t
 * 0 or 1); the type a ?: would have (that of a + b) picks the width. */
static inline float th_fz_where_f(int64_t c, float a, float b) {
  uint32_t m = 0u - (uint32_t)(c != 0);
  return th_sc_f32_from_bits((th_sc_f32_bits(a) & m) | (th_sc_f32_bits(b) & ~m));
}
static inline double th_fz_where_d(int64_t c, double a, double b) {
  uint64_t m = 0u - (uint64_t)(c != 0), ua, ub;
  memcpy(&ua, &a, 8);
  memcpy(&ub, &b, 8);
  ua = (ua & m) | (ub & ~m);
  memcpy(&a, &ua, 8);
  return a;
}
static inline int64_t th_fz_where_i(int64_t c, int64_t a, int64_t b) {
  uint64_t m = 0u - (uint64_t)(c != 0);
  return (int64_t)(((uint64_t)a & m) | ((uint64_t)b & ~m));
}
#define th_fz_where(c, a, b)                                                                                           \
  _Generic((a) + (b), float : th_fz_where_f, double : th_fz_where_d, default : th_fz_where_i)(c, a, b)

/* ---- signbit --------------------------------------------------------------------------------------
 * The sign bit read from the integer representation. gcc 12.2 stops with an internal compiler error
 * ("unrecognizable insn", a V8SI shift of a V8SF subreg) when it vectorizes its own signbit builtin
 * under `omp simd` in some loops (bf16 neg -> signbit; found by test_fuser_fuzz); the memcpy form
 * vectorizes to the same shift without it. Generated code only: the library's own sources that
 * include this header (tests) define TH_FZ_KEEP_SIGNBIT. */
static inline int th_fz_signbitf(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (int)(u >> 31);
}
static inline int th_fz_signbitd(double x) {
  uint64_t u;
  memcpy(&u, &x, 8);
  return (int)(u >> 63);
}
#ifndef TH_FZ_KEEP_SIGNBIT
#undef signbit
#define signbit(x) _Generic((x), float : th_fz_signbitf, default : th_fz_signbitd)(x)
#endif

#endif
