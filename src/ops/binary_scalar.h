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

#endif
