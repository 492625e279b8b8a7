/* special_scalar.h — the scalar special functions of the unary.def / binary.def rows digamma, erfinv and
 * zeta, in float32 and float64 as PyTorch's CPU kernels compute them (aten/src/ATen/native/Math.h: the
 * Cephes Math Library's psi and Hurwitz zeta, and Pavlis's rational erfinv with two Newton steps), so that
 * results agree with PyTorch's to the last bits. The eager kernels (executors/eager/elementwise.c) and the
 * number folding (prims/elementwise.c) both compute with them. */
#ifndef THUNDER_OPS_SPECIAL_SCALAR_H
#define THUNDER_OPS_SPECIAL_SCALAR_H

#include <math.h>

/* sum c[i] z^(n-i), highest power first (Horner). */
static inline double th_sf_poly_f64(double z, const double *c, int n) {
  double r = 0;
  for (int i = 0; i <= n; i++) r = r * z + c[i];
  return r;
}
static inline float th_sf_poly_f32(float z, const float *c, int n) {
  float r = 0;
  for (int i = 0; i <= n; i++) r = r * z + c[i];
  return r;
}

/* digamma: +-inf at +-0 (the sign of -x), NaN at negative integers, the reflection
 * psi(x) = psi(1 - x) - pi / tan(pi frac(x)) below 0, then the recurrence psi(x) = psi(x + 1) - 1 / x up
 * to 10 and the asymptotic series in 1 / x^2 (Cephes' coefficients). */
static inline double th_sf_digamma_f64(double x) {
  static const double asym[7] = {8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                                 -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
                                 8.33333333333333333333E-2};
  if (x == 0) return copysign(INFINITY, -x);
  if (x < 0) {
    if (x == trunc(x)) return NAN;
    double ip, fr = modf(x, &ip);
    return th_sf_digamma_f64(1 - x) - 3.14159265358979323846 / tan(3.14159265358979323846 * fr);
  }
  double acc = 0;
  while (x < 10) {
    acc -= 1 / x;
    x += 1;
  }
  if (x == 10) return acc + 2.25175258906672110764; /* psi(10) */
  double y = 0;
  if (x < 1.0e17) {
    double z = 1.0 / (x * x);
    y = z * th_sf_poly_f64(z, asym, 6);
  }
  return acc + log(x) - 0.5 / x - y;
}
static inline float th_sf_digamma_f32(float x) {
  static const float asym[7] = {8.33333333333333333333E-2f, -2.10927960927960927961E-2f, 7.57575757575757575758E-3f,
                                -4.16666666666666666667E-3f, 3.96825396825396825397E-3f, -8.33333333333333333333E-3f,
                                8.33333333333333333333E-2f};
  if (x == 0) return copysignf(INFINITY, -x);
  if (x < 0) {
    if (x == truncf(x)) return NAN;
    double ip, fr = modf((double)x, &ip); /* the reflection term in double, rounded once (PyTorch) */
    float refl = (float)(3.14159265358979323846 / tan(3.14159265358979323846 * fr));
    return th_sf_digamma_f32(1 - x) - refl;
  }
  float acc = 0;
  while (x < 10) {
    acc -= 1 / x;
    x += 1;
  }
  if (x == 10) return acc + 2.25175258906672110764f;
  float y = 0;
  if (x < 1.0e17f) {
    float z = 1 / (x * x);
    y = z * th_sf_poly_f32(z, asym, 6);
  }
  return acc + logf(x) - 0.5f / x - y;
}

/* erfinv: NaN outside [-1, 1], +-inf at +-1; a rational first guess (central range |y| <= 0.7, a tail
 * formula in sqrt(-log((1 - |y|) / 2)) beyond), then two Newton steps on erf(x) - y. */
#define TH_SF_ERFINV(T, SUF, ERF, EXP, LOG, SQRT, COPYSIGN, FABS)                                                     \
  static inline T th_sf_erfinv_##SUF(T y) {                                                                            \
    static const T a[4] = {(T)0.886226899, (T)-1.645349621, (T)0.914624893, (T)-0.140543331};                          \
    static const T b[4] = {(T)-2.118377725, (T)1.442710462, (T)-0.329097515, (T)0.012229801};                          \
    static const T c[4] = {(T)-1.970840454, (T)-1.624906493, (T)3.429567803, (T)1.641345311};                          \
    static const T d[2] = {(T)3.543889200, (T)1.637067800};                                                            \
    const T two_over_sqrt_pi = (T)2 * (T)0.564189583547756286948079451560772586;                                       \
    T ay = FABS(y), x, z, num, den;                                                                                    \
    if (ay > 1) return (T)NAN;                                                                                         \
    if (ay == 1) return COPYSIGN((T)INFINITY, y);                                                                      \
    if (ay <= (T)0.7) {                                                                                                \
      z = y * y;                                                                                                       \
      num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];                                                                 \
      den = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + (T)1;                                                    \
      x = y * num / den;                                                                                               \
    } else {                                                                                                           \
      z = SQRT(-LOG(((T)1 - ay) / (T)2));                                                                              \
      num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];                                                                 \
      den = (d[1] * z + d[0]) * z + (T)1;                                                                              \
      x = COPYSIGN(num, y) / den;                                                                                      \
    }                                                                                                                  \
    x = x - (ERF(x) - y) / (two_over_sqrt_pi * EXP(-x * x));                                                           \
    x = x - (ERF(x) - y) / (two_over_sqrt_pi * EXP(-x * x));                                                           \
    return x;                                                                                                          \
  }
TH_SF_ERFINV(double, f64, erf, exp, log, sqrt, copysign, fabs)
TH_SF_ERFINV(float, f32, erff, expf, logf, sqrtf, copysignf, fabsf)
#undef TH_SF_ERFINV

/* Hurwitz zeta(x, q) = sum_k (q + k)^-x (Cephes' zeta): inf at x == 1, NaN for x < 1; at q <= 0 inf for an
 * integer q and NaN for a non-integer x; otherwise the direct sum until the terms are negligible or past
 * q + 9, then the Euler-Maclaurin tail with the Bernoulli coefficients (2k)! / B_2k. float32 computes
 * in double, as PyTorch's CPU kernel (its accumulation type). */
static inline double th_sf_zeta(double x, double q) {
  static const double bern[12] = {12.0,
                                  -720.0,
                                  30240.0,
                                  -1209600.0,
                                  47900160.0,
                                  -1.8924375803183791606e9,
                                  7.47242496e10,
                                  -2.950130727918164224e12,
                                  1.1646782814350067249e14,
                                  -4.5979787224074726105e15,
                                  1.8152105401943546773e17,
                                  -7.1661652561756670113e18};
  const double machep = 1.11022302462515654042E-16;
  if (x == 1) return INFINITY;
  if (x < 1) return NAN;
  if (q <= 0) {
    if (q == floor(q)) return INFINITY;
    if (x != floor(x)) return NAN;
  }
  double s = pow(q, -x), a = q, b = 0;
  int i = 0;
  while (i < 9 || a <= 9.0) {
    i++;
    a += 1;
    b = pow(a, -x);
    s += b;
    if (-machep * s < b && b < machep * s) return s;
  }
  double w = a, k = 0, t;
  s += b * w / (x - 1);
  s -= 0.5 * b;
  a = 1;
  for (i = 0; i < 12; i++) {
    a *= x + k;
    b /= w;
    t = a * b / bern[i];
    s = s + t;
    if (fabs(t / s) < machep) return s;
    k += 1;
    a *= x + k;
    b /= w;
    k += 1;
  }
  return s;
}

#endif
