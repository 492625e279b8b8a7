/* binary_scalar.h — the scalar functions the rows of ops/binary.def name in their C expressions where
 * one expression does not suffice: Python's remainder (the result takes the divisor's sign) and exact
 * integer pow. The eager kernels (executors/eager/elementwise.c) and the number folding
 * (prims/elementwise.c) both compute with them, so a folded number and a kernel's element agree. */
#ifndef THUNDER_OPS_BINARY_SCALAR_H
#define THUNDER_OPS_BINARY_SCALAR_H

#include <math.h>
#include <stdint.h>

/* a % b with the divisor's sign: fmod, then b added when the signs differ. */
static inline float th_bs_remainder_f32(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
static inline double th_bs_remainder_f64(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
/* C's truncating % (b != 0); INT64_MIN % -1 is 0 rather than undefined. */
static inline int64_t th_bs_fmod_i64(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }
static inline int64_t th_bs_remainder_i64(int64_t a, int64_t b) {
  int64_t m = th_bs_fmod_i64(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
/* C's truncating / (b != 0); INT64_MIN / -1 wraps. */
static inline int64_t th_bs_div_i64(int64_t a, int64_t b) { return b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b; }

/* a ** b exactly by squaring, wrapping at 64 bits; a negative exponent gives 1, -1 or 0 (ATen's
 * integer pow: 1 ** -n == 1, (-1) ** -n == +-1, anything else truncates to 0). */
static inline int64_t th_bs_pow_i64(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  for (; b; b >>= 1) {
    if (b & 1) r *= x;
    x *= x;
  }
  return (int64_t)r;
}

/* gcd of |a| and |b| by Euclid's algorithm (ATen's calc_gcd), in unsigned arithmetic so that
 * |INT64_MIN| is representable; gcd(0, 0) == 0. */
static inline int64_t th_bs_gcd_i64(int64_t a, int64_t b) {
  uint64_t x = a < 0 ? 0 - (uint64_t)a : (uint64_t)a, y = b < 0 ? 0 - (uint64_t)b : (uint64_t)b;
  while (x != 0) {
    uint64_t c = x;
    x = y % x;
    y = c;
  }
  return (int64_t)y;
}
/* |a / gcd(a, b) * b|, 0 when both are 0 (ATen's lcm), wrapping at 64 bits. */
static inline int64_t th_bs_lcm_i64(int64_t a, int64_t b) {
  int64_t g = th_bs_gcd_i64(a, b);
  if (g == 0) return 0;
  uint64_t q = (uint64_t)th_bs_div_i64(a, g) * (uint64_t)b;
  return (int64_t)q < 0 ? (int64_t)(0 - q) : (int64_t)q;
}
/* Shifts as ATen's CPU kernels: a shift count below 0 or at least the type's width gives 0 (left) or
 * the sign fill (right). Computed in 64 bits, the low bits stored into a narrower integer are the
 * narrower type's own shift (a count past its width leaves only zeros or the sign fill there too). */
static inline int64_t th_bs_lshift_i64(int64_t a, int64_t b) {
  return (b < 0 || b >= 64) ? 0 : (int64_t)((uint64_t)a << b);
}
static inline int64_t th_bs_rshift_i64(int64_t a, int64_t b) {
  return (b < 0 || b >= 64) ? (a < 0 ? -1 : 0) : (a < 0 ? ~(~a >> b) : a >> b);
}

#endif
