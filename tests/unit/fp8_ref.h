/* fp8_ref.h — an independent fp8 reference shared by the fp8 tests (test_fp8.c, test_fp8_grad.c):
 * the exact value of every e4m3fn/e5m2 code, computed from the format definition (OCP 8-bit floating
 * point: bias, mantissa bits, NaN/inf codes), and the f32 -> fp8 cast by exhaustive nearest-code search.
 * Nothing here calls the library. Include after <math.h> and thunder/dtype.h. */
#ifndef TH_TEST_FP8_REF_H
#define TH_TEST_FP8_REF_H

#include <math.h>
#include <stdbool.h>

#include "thunder/dtype.h"

#define E4 TH_F8E4M3FN
#define E5 TH_F8E5M2

/* The exact value of code c (0..255) of format f. */
static inline double ref_decode(th_dtype f, unsigned c) {
  int s = (int)(c >> 7) & 1;
  double v;
  if (f == E4) {
    int e = (int)(c >> 3) & 15, m = (int)c & 7;
    if (e == 15 && m == 7) return NAN;
    v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10); /* bias 7, 3 mantissa bits */
  } else {
    int e = (int)(c >> 2) & 31, m = (int)c & 3;
    if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
    v = e == 0 ? ldexp(m, -16) : ldexp(4 + m, e - 17); /* bias 15, 2 mantissa bits */
  }
  return s ? -v : v;
}

static inline bool is_nan_code(th_dtype f, unsigned c) { return isnan(ref_decode(f, c)); }

/* PyTorch's f32 -> fp8 cast (saturate=false) or torchao's clamp-then-cast (saturate=true), by search:
 * the nearest of the non-negative codes and the first code above the largest finite value (e4m3fn:
 * 480, a NaN code; e5m2: 65536, inf), ties to the even code; beyond that inf (e5m2). e4m3fn (torch
 * >= 2.12) saturates: a result above 448 (the 480 code, or beyond it, inf included) is 448, so both
 * modes agree. Returns the code; a NaN result is any NaN code (the caller compares NaN-ness). */
static inline unsigned ref_encode(th_dtype f, float xf, bool saturate) {
  double x = xf;
  const double maxv = f == E4 ? 448.0 : 57344.0, over = f == E4 ? 480.0 : 65536.0;
  const unsigned over_code = f == E4 ? 0x7f : 0x7c;
  unsigned s = signbit(x) ? 0x80u : 0u;
  if (isnan(x)) return 0x7f | s;
  double a = fabs(x);
  if ((saturate || f == E4) && a > maxv) a = maxv;
  if (a > over) return 0x7cu | s;
  unsigned best = 0;
  double bestd = INFINITY;
  for (unsigned c = 0; c <= over_code; c++) {
    double v = c == over_code ? over : ref_decode(f, c);
    double d = fabs(v - a);
    if (d < bestd || (d == bestd && (c & 1) == 0)) {
      bestd = d;
      best = c;
    }
  }
  return best | s;
}

#endif
