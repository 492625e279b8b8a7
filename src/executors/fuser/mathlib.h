/* mathlib.h — branch-free float32 exp, exp2, expm1, log, log2, log1p, tanh and erf for the fuser's
 * generated kernels. glibc's expf/tanhf/erff are scalar calls: inside a fused loop they block gcc's
 * auto-vectorizer and dominate the kernel's time. These versions are straight-line code (range
 * reduction, a polynomial, integer exponent tricks, selects instead of branches), so a loop calling
 * them under `#pragma omp simd` vectorizes (AVX2: 8 lanes) at the fuser's -O2 and at -O3
 * (-ffp-contract=off, no -ffast-math). Self-contained: C11, standard headers only, all `static inline`.
 *
 * Accuracy: within 2 ulp of the exact value for every float32 input (tests/unit/test_fuser_mathlib.c
 * checks it against double libm), with C99 Annex F / glibc special values: NaN -> NaN, the infinities
 * and overflow/underflow limits, -0.0 kept where libm keeps it, subnormal inputs and results handled.
 * With a hardware FMA (__FP_FAST_FMAF, e.g. -march=native on x86-64-v3) the polynomials use fmaf;
 * without one, a*b+c. Measured over all 2^32 inputs (max |error| in ulp, fmaf path / a*b+c path):
 *   expf 1.01 / 0.99   exp2f 0.87 / 1.06   expm1f 0.94 / 1.08   logf  0.88 / 0.89
 *   log2f 1.14 / 1.22  log1pf 0.94 / 0.94  tanhf 0.60 / 0.60    erff  1.14 / 1.31
 * so every result is the correctly rounded one or a neighbour of it (tanhf, a rational function
 * evaluated in double, is within 0.6 ulp). sin and cos stay libm calls:
 * 2 ulp over their full range needs a Payne-Hanek reduction, which straight-line and without table
 * gathers (that gcc does not vectorize on AVX2 targets like Zen) is not written here.
 *
 * Polynomials: weighted minimax fits (discrete Remez exchange in float64 against mpmath values, the
 * coefficients rounded to float32 one at a time, lowest degree first, refitting the rest), each over
 * its reduced interval with the weight of the error it causes in the final result; tanhf's rational
 * function the same way through the linearized (Loeb) iteration (scripts/mathlib/).
 *
 * Routing: after <tgmath.h>, the block at the end (unless TH_M_NO_ROUTING is defined) makes the
 * type-generic names exp, exp2, expm1, log, log2, log1p, tanh and erf call these functions for float
 * arguments and libm's double functions for everything else (integers convert to double, as with
 * tgmath; long double would lose its extra precision: the fuser never passes one). Include this header
 * after all standard headers (the macros would otherwise rewrite their declarations). */
#ifndef TH_FUSER_MATHLIB_H
#define TH_FUSER_MATHLIB_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define TH_M_INLINE static inline __attribute__((always_inline))
#else
#define TH_M_INLINE static inline
#endif

/* ---- helpers ------------------------------------------------------------------------------------ */

TH_M_INLINE uint32_t th_m_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

TH_M_INLINE float th_m_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* a*b + c: one rounding where the hardware has an FMA, two otherwise (all error bounds allow both) */
TH_M_INLINE float th_m_fma(float a, float b, float c) {
#ifdef __FP_FAST_FMAF
  return fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

/* c ? a : b as bit masks. A plain ?: becomes a branch that gcc may thread (specializing the code
 * after a clamp to a constant) and then cannot if-convert, since without -ffast-math it will not
 * speculate floating-point operations; the masks keep the loop body straight-line. NaN compares
 * false, so th_m_sel(x > hi, hi, x) keeps a NaN x. */
TH_M_INLINE float th_m_sel(int c, float a, float b) {
  uint32_t m = 0u - (uint32_t)(c != 0);
  return th_m_float((th_m_bits(a) & m) | (th_m_bits(b) & ~m));
}

/* 2^k for an integer k in [-126, 127], built in the exponent field */
TH_M_INLINE float th_m_pow2i(int32_t k) { return th_m_float(((uint32_t)k + 127u) << 23); }

/* ln 2 = TH_M_LN2_HI + TH_M_LN2_LO; the high part has 15 significant bits, so k * TH_M_LN2_HI is
 * exact for |k| <= 255 and x - k * TH_M_LN2_HI is exact near x = k ln 2 (Cody-Waite reduction). */
#define TH_M_LN2_HI 0x1.62e4p-1f
#define TH_M_LN2_LO 0x1.7f7d1cp-20f
#define TH_M_LOG2E 0x1.715476p+0f
/* adding 1.5 * 2^23 rounds a float of magnitude < 2^22 to an integer, left in the low mantissa bits */
#define TH_M_SHIFT 0x1.8p23f
#define TH_M_SHIFT_BITS 0x4b400000u

/* e^r on |r| <= 0.3484 as 1 + (r + r^2 Q(r)); Q minimax with weight r^2 / e^r: 2^-28.2 */
TH_M_INLINE float th_m_exp_poly(float r) {
  float q = 0x1.6af48cp-10f;
  q = th_m_fma(q, r, 0x1.124244p-7f);
  q = th_m_fma(q, r, 0x1.555838p-5f);
  q = th_m_fma(q, r, 0x1.555486p-3f);
  q = th_m_fma(q, r, 0x1.fffffcp-2f);
  return 1.0f + th_m_fma(r * r, q, r);
}

/* x = k ln 2 + r with |r| <= 0.3484 (k in the low bits of the returned float, as in TH_M_SHIFT) */
TH_M_INLINE float th_m_exp_reduce(float x, int32_t *k) {
  float kf = th_m_fma(x, TH_M_LOG2E, TH_M_SHIFT);
  *k = (int32_t)(th_m_bits(kf) - TH_M_SHIFT_BITS);
  kf -= TH_M_SHIFT;
  float r = th_m_fma(-kf, TH_M_LN2_HI, x); /* exact */
  return th_m_fma(-kf, TH_M_LN2_LO, r);
}

/* e^x for x in [-104, 89] or NaN: e^x = 2^k e^r, with 2^k applied in two factors so that subnormal
 * results are rounded once and k = 128 overflows to +inf. */
TH_M_INLINE float th_m_exp_core(float x) {
  int32_t k;
  float r = th_m_exp_reduce(x, &k);
  int32_t k1 = k >> 1, k2 = k - k1; /* floor(k / 2): one shift (gcc shifts signed ints arithmetically) */
  return th_m_exp_poly(r) * th_m_pow2i(k1) * th_m_pow2i(k2);
}

/* e^x for x in [-87, 88] or NaN (normal results): one scaling */
TH_M_INLINE float th_m_exp_normal(float x) {
  int32_t k;
  float r = th_m_exp_reduce(x, &k);
  return th_m_exp_poly(r) * th_m_pow2i(k);
}

/* e^x - 1 for x in [-18, 88.8] or NaN, |x| >= 2^-25. x = k ln 2 + r with r = rhi + rlo (rhi exact),
 * e^r - 1 = rhi + tail, tail = rlo + r^2 Q(r) (Q minimax with weight r^2 / |e^r - 1|: 2^-28.0), and
 * e^x - 1 = 2 ((s - 1/2) + s rhi + s tail) with s = 2^(k-1): the first two terms are summed with the
 * rounding errors of s - 1/2 and of the sum kept (Fast2Sum); k = 128 overflows at the last doubling. */
TH_M_INLINE float th_m_expm1_core(float x) {
  float kf = th_m_fma(x, TH_M_LOG2E, TH_M_SHIFT);
  int32_t k = (int32_t)(th_m_bits(kf) - TH_M_SHIFT_BITS);
  kf -= TH_M_SHIFT;
  float rhi = th_m_fma(-kf, TH_M_LN2_HI, x); /* exact */
  float rlo = -kf * TH_M_LN2_LO;
  float r = rhi + rlo;
  float q = 0x1.3ae7c6p-13f;
  q = th_m_fma(q, r, 0x1.6d2e4ap-10f);
  q = th_m_fma(q, r, 0x1.1155a8p-7f);
  q = th_m_fma(q, r, 0x1.555502p-5f);
  q = th_m_fma(q, r, 0x1.55552cp-3f);
  q = th_m_fma(q, r, 0x1p-1f);
  float tail = th_m_fma(r * r, q, rlo); /* e^r - 1 = rhi + tail */
  float sc = th_m_pow2i(k - 1);
  float a = sc - 0.5f, b = sc * rhi; /* |a| >= |b|; b exact, a exact for k <= 24 */
  float aerr = (sc - a) - 0.5f;      /* exact: (sc - 1/2) - a, nonzero for k > 24 */
  float hi = a + b;
  float lo = th_m_fma(sc, tail, ((a - hi) + b) + aerr); /* (a - hi) + b: the rounding error of hi */
  return (hi + lo) * 2.0f;
}

/* The reduction shared by log, log2 and log1p: a positive normal x = 2^e m with m in
 * [sqrt(1/2), sqrt(2)); returns m - 1 (exact) and sets *e. Garbage (but no UB) for other inputs. */
TH_M_INLINE float th_m_log_reduce(float x, int32_t *e) {
  uint32_t t = th_m_bits(x) - 0x3f3504f3u; /* the bits of sqrt(1/2) */
  int32_t ex = (int32_t)((t + 0x40000000u) >> 23) - 128;
  *e = ex;
  return th_m_float(th_m_bits(x) - ((uint32_t)ex << 23)) - 1.0f;
}

/* log(1 + f) - f = f^2 P(f) on f in [sqrt(1/2) - 1, sqrt(2) - 1]; P minimax with weight
 * f^2 / |log(1 + f)|: 2^-27.8 */
TH_M_INLINE float th_m_log1p_tail(float f) {
  float p = -0x1.320772p-4f;
  p = th_m_fma(p, f, 0x1.071cbep-3f);
  p = th_m_fma(p, f, -0x1.0fd34p-3f);
  p = th_m_fma(p, f, 0x1.22a7d4p-3f);
  p = th_m_fma(p, f, -0x1.541ce8p-3f);
  p = th_m_fma(p, f, 0x1.99a1p-3f);
  p = th_m_fma(p, f, -0x1.000448p-2f);
  p = th_m_fma(p, f, 0x1.555556p-2f);
  p = th_m_fma(p, f, -0x1.fffff8p-2f);
  return (f * f) * p;
}

/* log at special inputs: +inf -> +inf, NaN -> NaN, +-0 -> -inf, x < 0 -> NaN */
TH_M_INLINE float th_m_log_special(float x) {
  return x + th_m_sel(x == 0.0f, -INFINITY, th_m_sel(x < 0.0f, NAN, 0.0f));
}

/* ---- the functions ------------------------------------------------------------------------------ */

/* e^x. x > 88.72284 -> +inf, x < -103.97208 -> +0, subnormal results rounded once. */
TH_M_INLINE float th_m_expf(float x) {
  float xc = th_m_sel(x > 89.0f, 89.0f, x);
  xc = th_m_sel(xc < -104.0f, -104.0f, xc);
  return th_m_exp_core(xc);
}

/* 2^x. x >= 128 -> +inf, x <= -150 -> +0. x = k + r, |r| <= 1/2, 2^r = 1 + r Q(r) (Q minimax with
 * weight |r| / 2^r: 2^-32.5). */
TH_M_INLINE float th_m_exp2f(float x) {
  float xc = th_m_sel(x > 129.0f, 129.0f, x);
  xc = th_m_sel(xc < -151.0f, -151.0f, xc);
  float kf = xc + TH_M_SHIFT;
  int32_t k = (int32_t)(th_m_bits(kf) - TH_M_SHIFT_BITS);
  kf -= TH_M_SHIFT;
  float r = xc - kf; /* exact */
  float q = 0x1.e08cbp-17f;
  q = th_m_fma(q, r, 0x1.440bb2p-13f);
  q = th_m_fma(q, r, 0x1.5da598p-10f);
  q = th_m_fma(q, r, 0x1.3b2a5ep-7f);
  q = th_m_fma(q, r, 0x1.c6b06ep-5f);
  q = th_m_fma(q, r, 0x1.ebfbep-3f);
  q = th_m_fma(q, r, 0x1.62e43p-1f);
  int32_t k1 = k >> 1, k2 = k - k1; /* floor(k / 2): one shift (gcc shifts signed ints arithmetically) */
  return th_m_fma(r, q, 1.0f) * th_m_pow2i(k1) * th_m_pow2i(k2);
}

/* e^x - 1. x > 88.72284 -> +inf, x < -17.3287 -> -1, |x| < 2^-25 -> x (so -0 -> -0). */
TH_M_INLINE float th_m_expm1f(float x) {
  float xc = th_m_sel(x > 88.8f, 88.8f, x);
  xc = th_m_sel(xc < -18.0f, -18.0f, xc);
  float y = th_m_expm1_core(xc);
  return th_m_sel(fabsf(x) < 0x1p-25f, x, y);
}

/* Natural logarithm. Subnormals are scaled by 2^23 first; log x = e ln 2 + log(1 + f) with the
 * leading sum e*LN2_HI + f formed exactly (Fast2Sum). log(+-0) = -inf, log(x < 0) = NaN. */
TH_M_INLINE float th_m_logf(float x) {
  int sub = x < 0x1p-126f;
  float xs = x * th_m_sel(sub, 0x1p23f, 1.0f);
  int32_t e;
  float f = th_m_log_reduce(xs, &e);
  float ef = (float)e - th_m_sel(sub, 23.0f, 0.0f);
  float a = ef * TH_M_LN2_HI; /* exact */
  float s = a + f;
  float err = (a - s) + f; /* |a| >= |f| or a == 0: the exact rounding error of s */
  float lo = th_m_fma(ef, TH_M_LN2_LO, th_m_log1p_tail(f)) + err;
  float y = s + lo;
  return th_m_sel((x > 0.0f) & (x < INFINITY), y, th_m_log_special(x));
}

/* Base-2 logarithm: e + log2(1 + f), the leading product f * log2(e) split into an exact 12x12-bit
 * product plus small terms. Exact for powers of two. */
TH_M_INLINE float th_m_log2f(float x) {
  int sub = x < 0x1p-126f;
  float xs = x * th_m_sel(sub, 0x1p23f, 1.0f);
  int32_t e;
  float f = th_m_log_reduce(xs, &e);
  float ef = (float)e - th_m_sel(sub, 23.0f, 0.0f);
  float fhi = th_m_float(th_m_bits(f) & 0xfffff000u), flo = f - fhi;
  const float l_hi = 0x1.714p+0f, l_lo = 0x1.47652cp-12f; /* log2(e) = l_hi + l_lo, l_hi 12 bits */
  float hi = fhi * l_hi;                                  /* exact */
  float lo = th_m_fma(flo, TH_M_LOG2E, fhi * l_lo);
  lo = th_m_fma(th_m_log1p_tail(f), TH_M_LOG2E, lo);
  float y = ef + (hi + lo);
  return th_m_sel((x > 0.0f) & (x < INFINITY), y, th_m_log_special(x));
}

/* log(1 + x). u = 1 + x rounded, c = x - (u - 1) its exact rounding error; log(1 + x) =
 * log u + c/u, except where u is in [sqrt(1/2), sqrt(2)) and the polynomial takes x itself.
 * x = -1 -> -inf, x < -1 -> NaN, +-0 -> +-0. */
TH_M_INLINE float th_m_log1pf(float x) {
  float u = 1.0f + x;
  int32_t e;
  float fu = th_m_log_reduce(u, &e);
  float c = x - (u - 1.0f);
  int e0 = e == 0;
  float f = th_m_sel(e0, x, fu);
  float cu = th_m_sel(e0, 0.0f, c) / u;
  float ef = (float)e;
  float a = ef * TH_M_LN2_HI;
  float s = a + f;
  float err = (a - s) + f;
  float lo = th_m_fma(ef, TH_M_LN2_LO, th_m_log1p_tail(f)) + cu + err;
  float y = s + lo;
  y = th_m_sel(x == 0.0f, x, y);
  float sp = x + th_m_sel(x == -1.0f, -INFINITY, th_m_sel(x < -1.0f, NAN, 0.0f));
  return th_m_sel((x > -1.0f) & (x < INFINITY), y, sp);
}

/* a*b + c in double, fused where the hardware has an FMA (used by th_m_tanhf) */
TH_M_INLINE double th_m_fmad(double a, double b, double c) {
#ifdef __FP_FAST_FMA
  return fma(a, b, c);
#else
  return a * b + c;
#endif
}

/* Hyperbolic tangent: one rational approximation, no exp and no second path, so the dependency
 * chain is short (convert, square, 5 FMAs, multiply, divide, convert). x is clamped to [-9.1, 9.1]
 * (tanh rounds to +-1 in float32 for |x| > 9.0109; NaN passes the clamp) and tanh(x) = x P(x^2) /
 * Q(x^2), P of degree 4 and Q of degree 5 with P(0) = Q(0) = 1: a minimax fit of the relative error
 * on [0, 9.15] (linearized rational Remez, the Loeb iteration, in float64 against mpmath;
 * coefficients rounded to float32 one at a time, refitting the rest: 2^-27.4;
 * scripts/mathlib/fit_tanh_rational.py). It is evaluated in double: x^2 of a float is exact there,
 * and the float32 evaluation would lose up to 5 ulp in the Horner steps and in P and Q themselves,
 * which near tanh = 1 count fully (the single rounding to float at the end leaves at most 0.6 ulp).
 * Odd exactly (P and Q are even, x's sign carries through), -0 -> -0, and for tiny x P = Q = 1
 * exactly, so tanh(x) = x. */
TH_M_INLINE float th_m_tanhf(float x) {
  float xc = th_m_sel(x > 9.1f, 9.1f, x);
  xc = th_m_sel(xc < -9.1f, -9.1f, xc);
  double xd = (double)xc;
  double s = xd * xd; /* exact */
  double p = th_m_fmad(0x1.ae183ep-25, s, 0x1.07b166p-15);
  p = th_m_fmad(p, s, 0x1.064c9ep-8);
  p = th_m_fmad(p, s, 0x1.1a3accp-3);
  p = th_m_fmad(p, s, 1.0);
  double q = th_m_fmad(0x1.8ca5dp-31, s, 0x1.ae96aap-20);
  q = th_m_fmad(q, s, 0x1.b7f218p-12);
  q = th_m_fmad(q, s, 0x1.c61946p-6);
  q = th_m_fmad(q, s, 0x1.e272bap-2);
  q = th_m_fmad(q, s, 1.0);
  return (float)(xd * p / q);
}

/* x (1 + tanh(z)) / 2 = x sigmoid(2z), as x / (1 + e^(-2z)): the tail of the tanh GELU, which the
 * codegen emits for that product of prims (codegen.c, "algebraic rewrites"). One exp and one division,
 * no tanh; and no cancellation where tanh(z) nears -1, where 1 + tanh(z) in float32 keeps no correct
 * digit. Within 3 ulp of x sigmoid(2z) (the exp, the sum, the quotient) wherever the result is normal.
 * Where float32 tanh(z) rounds to -1 (z <= -0x1.205968p+3, about -9.010915: 1 - |tanh z| <= 2^-25,
 * 2|z| >= 26 ln 2) the exponent is raised to 88.8, where e^w overflows, so the result is x / inf: the
 * product form's x * 0 (-0 for x < 0, NaN for infinite x); for z > 8.4, e^(-2z) < 2^-24 and the result
 * is x exactly (tanh(z) rounds to +1 from 9.0109 on; the product form's x * 0.5 * 2 is x too, except a
 * subnormal x whose halving rounds). NaN in x or z gives NaN. */
TH_M_INLINE float th_m_x_sigmoid2f(float x, float z) {
  float w = -2.0f * z; /* exact */
  w = th_m_sel(w < -87.0f, -87.0f, w);
  w = th_m_sel(w > 0x1.205966p+4f, 88.8f, w); /* 18.021826: from the next float up, tanh(-w/2) rounds to -1 */
  return x / (1.0f + th_m_exp_normal(w));
}

/* Error function. |x| < 1: x + x E(x^2) (E minimax, relative weight: 2^-29.4); 1 <= |x| <= 4:
 * 1 - e^(-x^2) G(1/|x|) with G(t) ~ erfc(1/t) e^(1/t^2) (minimax with the absolute weight e^(-x^2):
 * 2^-31.2); |x| > 4 rounds to +-1. Odd, sign copied from x. */
TH_M_INLINE float th_m_erff(float x) {
  float a = fabsf(x);
  float a2 = a * a;
  float p = 0x1.4771fep-14f;
  p = th_m_fma(p, a2, -0x1.a3515ep-11f);
  p = th_m_fma(p, a2, 0x1.53f224p-8f);
  p = th_m_fma(p, a2, -0x1.b7f71ap-6f);
  p = th_m_fma(p, a2, 0x1.ce2ce6p-4f);
  p = th_m_fma(p, a2, -0x1.81273ep-2f);
  p = th_m_fma(p, a2, 0x1.06eba8p-3f);
  float small = th_m_fma(a, p, a);
  float ac = th_m_sel(a > 4.0f, 4.0f, a);
  ac = th_m_sel(ac < 1.0f, 1.0f, ac);
  float t = 1.0f / ac;
  float g = -0x1.27b4c2p-6f;
  g = th_m_fma(g, t, 0x1.ec1112p-4f);
  g = th_m_fma(g, t, -0x1.65ff36p-2f);
  g = th_m_fma(g, t, 0x1.21efaep-1f);
  g = th_m_fma(g, t, -0x1.fc68cep-2f);
  g = th_m_fma(g, t, 0x1.78ff42p-5f);
  g = th_m_fma(g, t, 0x1.1e41c4p-1f);
  g = th_m_fma(g, t, 0x1.a5bb58p-13f);
  float big = 1.0f - th_m_exp_normal(-(ac * ac)) * g;
  return copysignf(th_m_sel(a < 1.0f, small, big), x);
}

/* ---- powers ------------------------------------------------------------------------------------
 * pow(x, y) for float x and y, and x^n for a constant integer n (the codegen's form of prims.pow with
 * a constant exponent: codegen.c, "algebraic rewrites"). Both are straight-line and vectorize; the
 * general one works in double, where float32 needs no extended-precision tricks. */

/* c ? a : b for doubles as bit masks (th_m_sel's double form) */
TH_M_INLINE double th_m_seld(int c, double a, double b) {
  uint64_t m = 0u - (uint64_t)(c != 0), ua, ub;
  memcpy(&ua, &a, 8);
  memcpy(&ub, &b, 8);
  ua = (ua & m) | (ub & ~m);
  memcpy(&a, &ua, 8);
  return a;
}

/* log2(x) in double for a positive finite float x (subnormals included; garbage, but no UB, for
 * other inputs). x = 2^e m, m in [sqrt(1/2), sqrt(2)) (th_m_log_reduce: f = m - 1 exact), and
 * ln m = 2 atanh(s) with s = f / (f + 2), |s| <= 0.1716: the odd series to s^15 leaves a relative
 * error below 2^-45 (the next term, s^17 / 17, is below s 2^-45.5). */
TH_M_INLINE double th_m_log2_wide(float x) {
  int sub = x < 0x1p-126f;
  float xs = x * th_m_sel(sub, 0x1p23f, 1.0f);
  int32_t e;
  double f = (double)th_m_log_reduce(xs, &e);
  double s = f / (f + 2.0);
  double z = s * s;
  double p = 0x1.1111111111111p-4; /* 1/15 */
  p = th_m_fmad(p, z, 0x1.3b13b13b13b14p-4);
  p = th_m_fmad(p, z, 0x1.745d1745d1746p-4);
  p = th_m_fmad(p, z, 0x1.c71c71c71c71cp-4);
  p = th_m_fmad(p, z, 0x1.2492492492492p-3);
  p = th_m_fmad(p, z, 0x1.999999999999ap-3);
  p = th_m_fmad(p, z, 0x1.5555555555555p-2);
  p = th_m_fmad(p, z, 1.0);
  double ln_m = 2.0 * s * p;
  return ((double)e - th_m_seld(sub, 23.0, 0.0)) + ln_m * 0x1.71547652b82fep+0;
}

/* 2^t in double for t in [-1000, 1000] or NaN: t = k + r, |r| <= 1/2, 2^r by its Taylor series in
 * r ln 2 to degree 11 (relative error below 2^-47), 2^k built in the exponent field. */
TH_M_INLINE double th_m_exp2_wide(double t) {
  double kd = t + 0x1.8p52; /* rounds t to an integer, left in the low mantissa bits */
  uint64_t kb;
  memcpy(&kb, &kd, 8);
  kd -= 0x1.8p52;
  double r = t - kd; /* exact */
  double q = 0x1.e8cac7351bb25p-32;
  q = th_m_fmad(q, r, 0x1.e4cf5158b8ecap-28);
  q = th_m_fmad(q, r, 0x1.b5253d395e7c4p-24);
  q = th_m_fmad(q, r, 0x1.62c0223a5c824p-20);
  q = th_m_fmad(q, r, 0x1.ffcbfc588b0c7p-17);
  q = th_m_fmad(q, r, 0x1.430912f86c787p-13);
  q = th_m_fmad(q, r, 0x1.5d87fe78a6731p-10);
  q = th_m_fmad(q, r, 0x1.3b2ab6fba4e77p-7);
  q = th_m_fmad(q, r, 0x1.c6b08d704a0c0p-5);
  q = th_m_fmad(q, r, 0x1.ebfbdff82c58fp-3);
  q = th_m_fmad(q, r, 0x1.62e42fefa39efp-1);
  q = th_m_fmad(q, r, 1.0);
  uint64_t sb = (kb - 0x4338000000000000u + 1023u) << 52;
  double sc;
  memcpy(&sc, &sb, 8);
  return q * sc;
}

/* x^y for float x and y with C99 Annex F's special cases (pow(x, +-0) = 1 and pow(1, y) = 1 even for
 * NaN, pow(-1, +-inf) = 1, a negative finite x to a non-integer finite y is NaN, odd integer y keeps
 * x's sign, zeros and infinities by the sign of y). Elsewhere 2^(y log2|x|) in double: the product's
 * absolute error is below 2^-37 wherever the result is finite and nonzero in float32, so the one
 * rounding to float is correct but for results within 2^-37 relative of a midpoint, and never more
 * than one ulp away (overflow to inf and underflow through the subnormals as the rounding gives). */
TH_M_INLINE float th_m_powf(float x, float y) {
  float ax = fabsf(x);
  double t = (double)y * th_m_log2_wide(ax);
  t = th_m_seld(t > 1000.0, 1000.0, t); /* +-inf from infinite y; NaN passes */
  t = th_m_seld(t < -1000.0, -1000.0, t);
  float r = (float)th_m_exp2_wide(t);
  /* nearbyintf, not floorf: gcc vectorizes it (a rounding that may not signal inexact); the
   * infinities count as even integers, as in C */
  int yint = nearbyintf(y) == y;
  float hy = y * 0.5f; /* exact for an integer y */
  int yodd = yint & (nearbyintf(hy) != hy);
  int zero = ax == 0.0f, inf = ax == INFINITY;
  r = th_m_sel(zero | inf, th_m_sel(zero == (y < 0.0f), INFINITY, 0.0f), r);
  r = th_m_float(th_m_bits(r) | (th_m_bits(x) & 0x80000000u & (0u - (uint32_t)yodd)));
  r = th_m_sel((x < 0.0f) & (x > -INFINITY) & !yint, NAN, r);
  r = th_m_sel((x != x) | (y != y), x + y, r);
  r = th_m_sel((x == 1.0f) | (y == 0.0f) | ((x == -1.0f) & (fabsf(y) == INFINITY)), 1.0f, r);
  return r;
}

/* x^n for a float x and a constant integer n, |n| <= 15 (always inlined, so the tests on n fold).
 * PyTorch's pow kernel (ATen's pow_tensor_scalar_optimized_kernel, with reciprocal_kernel for -1)
 * computes 2, 3, -1 and -2 in float itself, as x * x, x * x * x, 1 / x and 1 / (x * x), and these
 * round the same way; 0 gives 1 (NaN included) and 1 gives x. Other n: repeated squaring in double
 * (a float's powers to the 15th neither overflow nor lose precision to underflow there) and one
 * rounding, the correctly rounded result but for midpoint cases within about 2^-50. */
TH_M_INLINE float th_m_pownf(float x, int n) {
  switch (n) {
    case 0: return 1.0f;
    case 1: return x;
    case 2: return x * x;
    case 3: return x * x * x;
    case -1: return 1.0f / x;
    case -2: return 1.0f / (x * x);
    default: break;
  }
  unsigned k = n < 0 ? 0u - (unsigned)n : (unsigned)n;
  double d = x, d2 = d * d, d4 = d2 * d2, d8 = d4 * d4;
  double p = (k & 1u) ? d : 1.0;
  if (k & 2u) p = p * d2;
  if (k & 4u) p = p * d4;
  if (k & 8u) p = p * d8;
  return (float)(n < 0 ? 1.0 / p : p);
}

/* x^n for a double x and a constant integer n: PyTorch's float forms for 0, 1, 2, 3, -1 and -2; other
 * n libm's pow (repeated squaring in double would lose up to a few ulp). */
TH_M_INLINE double th_m_pownd(double x, int n) {
  switch (n) {
    case 0: return 1.0;
    case 1: return x;
    case 2: return x * x;
    case 3: return x * x * x;
    case -1: return 1.0 / x;
    case -2: return 1.0 / (x * x);
    default: return pow(x, (double)n);
  }
}

/* ---- routing for generated kernels -------------------------------------------------------------- */

#ifndef TH_M_NO_ROUTING
/* float arguments go to the functions above, everything else to libm's double function (inside its
 * own macro the name is not expanded again, so `default: exp` names the libm function) */
#undef exp
#undef exp2
#undef expm1
#undef log
#undef log2
#undef log1p
#undef tanh
#undef erf
#undef pow
#define exp(x) _Generic((x), float : th_m_expf, default : exp)(x)
#define exp2(x) _Generic((x), float : th_m_exp2f, default : exp2)(x)
#define expm1(x) _Generic((x), float : th_m_expm1f, default : expm1)(x)
#define log(x) _Generic((x), float : th_m_logf, default : log)(x)
#define log2(x) _Generic((x), float : th_m_log2f, default : log2)(x)
#define log1p(x) _Generic((x), float : th_m_log1pf, default : log1p)(x)
#define tanh(x) _Generic((x), float : th_m_tanhf, default : tanh)(x)
#define erf(x) _Generic((x), float : th_m_erff, default : erf)(x)
#define pow(x, y) _Generic((x) + (y), float : th_m_powf, default : pow)(x, y)
#endif

#endif /* TH_FUSER_MATHLIB_H */
