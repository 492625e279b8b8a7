/* special_scalar.h — the scalar special functions of the unary.def / binary.def rows digamma, erfinv and
 * zeta, in float32 and float64 as PyTorch's CPU kernels compute them (aten/src/ATen/native/Math.h: the
 * Cephes Math Library's psi and Hurwitz zeta, and Pavlis's rational erfinv with two Newton steps), so that
 * results agree with PyTorch's to the last bits. The eager kernels (executors/eager/elementwise.c) and the
 * number folding (prims/elementwise.c) both compute with them. */
#ifndef THUNDER_OPS_SPECIAL_SCALAR_H
#define THUNDER_OPS_SPECIAL_SCALAR_H

#include <math.h>
#include <stdint.h>

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
  static const double asym[7] = {8.33333333333333333333E-2,  -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                                 -4.16666666666666666667E-3, 3.96825396825396825397E-3,  -8.33333333333333333333E-3,
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
  static const float asym[7] = {8.33333333333333333333E-2f,  -2.10927960927960927961E-2f, 7.57575757575757575758E-3f,
                                -4.16666666666666666667E-3f, 3.96825396825396825397E-3f,  -8.33333333333333333333E-3f,
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
#define TH_SF_ERFINV(T, SUF, ERF, EXP, LOG, SQRT, COPYSIGN, FABS)                                                      \
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

/* ---- modified Bessel functions of the first kind (Cephes' Chebyshev expansions) -------------------------
 * exp(-|x|) I0(x) and exp(-|x|) I1(x) / x on [0, 8] in y = x / 2 - 2, and exp(-|x|) sqrt(|x|) I0, I1 on
 * (8, inf) in 32 / |x| - 2. The float32 kernels use the last 17 (I1 on [0, 8]) and 7 (I1 beyond 8)
 * coefficients only, as PyTorch's. */
static const double th_sf_i0_a[30] = {
  -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16, 1.71539128555513303061E-15,
  -1.16853328779934516808E-14, 7.67618549860493561688E-14, -4.85644678311192946090E-13, 2.95505266312963983461E-12,
  -1.72682629144155570723E-11, 9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
  -1.30002500998624804212E-8,  6.04699502254191894932E-8,  -2.67079385394061173391E-7,  1.11738753912010371815E-6,
  -4.41673835845875056359E-6,  1.64484480707288970893E-5,  -5.75419501008210370398E-5,  1.88502885095841655729E-4,
  -5.76375574538582365885E-4,  1.63947561694133579842E-3,  -4.32430999505057594430E-3,  1.05464603945949983183E-2,
  -2.37374148058994688156E-2,  4.93052842396707084878E-2,  -9.49010970480476444210E-2,  1.71620901522208775349E-1,
  -3.04682672343198398683E-1,  6.76795274409476084995E-1};
static const double th_sf_i0_b[25] = {
  -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,  3.46122286769746109310E-17,
  -2.82762398051658348494E-16, -3.42548561967721913462E-16, 1.77256013305652638360E-15,  3.81168066935262242075E-15,
  -9.55484669882830764870E-15, -4.15056934728722208663E-14, 1.54008621752140982691E-14,  3.85277838274214270114E-13,
  7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11, -3.14991652796324136454E-11,
  1.18891471078464383424E-11,  4.94060238822496958910E-10,  3.39623202570838634515E-9,   2.26666899049817806459E-8,
  2.04891858946906374183E-7,   2.89137052083475648297E-6,   6.88975834691682398426E-5,   3.36911647825569408990E-3,
  8.04490411014108831608E-1};
static const double th_sf_i1_a[29] = {
  2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16, -1.10559694773538630805E-15,
  7.60068429473540693410E-15, -5.04218550472791168711E-14, 3.22379336594557470981E-13, -1.98397439776494371520E-12,
  1.17361862988909016308E-11, -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
  9.38153738649577178388E-9,  -4.44505912879632808065E-8,  2.00329475355213526229E-7,  -8.56872026469545474066E-7,
  3.47025130813767847674E-6,  -1.32731636560394358279E-5,  4.78156510755005422638E-5,  -1.61760815825896745588E-4,
  5.12285956168575772895E-4,  -1.51357245063125314899E-3,  4.15642294431288815669E-3,  -1.05640848946261981558E-2,
  2.47264490306265168283E-2,  -5.29459812080949914269E-2,  1.02643658689847095384E-1,  -1.76416518357834055153E-1,
  2.52587186443633654823E-1};
static const double th_sf_i1_b[25] = {
  7.51729631084210481353E-18,  4.41434832307170791151E-18,  -4.65030536848935832153E-17, -3.20952592199342395980E-17,
  2.96262899764595013876E-16,  3.30820231092092828324E-16,  -1.88035477551078244854E-15, -3.81440307243700780478E-15,
  1.04202769841288027642E-14,  4.27244001671195135429E-14,  -2.10154184277266431302E-14, -4.08355111109219731823E-13,
  -7.19855177624590851209E-13, 2.03562854414708950722E-12,  1.41258074366137813316E-11,  3.25260358301548823856E-11,
  -1.89749581235054123450E-11, -5.58974346219658380687E-10, -3.83538038596423702205E-9,  -2.63146884688951950684E-8,
  -2.51223623787020892529E-7,  -3.88256480887769039346E-6,  -1.10588938762623716291E-4,  -9.76109749136146840777E-3,
  7.78576235018280120474E-1};

/* Clenshaw's sum of a Chebyshev series, (b0 - b2) / 2; the float32 version rounds each coefficient to
 * float32 as a float coefficient table would. */
static inline double th_sf_chbevl_f64(double x, const double *c, int n) {
  double b0 = c[0], b1 = 0, b2 = 0;
  for (int i = 1; i < n; i++) {
    b2 = b1;
    b1 = b0;
    b0 = x * b1 - b2 + c[i];
  }
  return 0.5 * (b0 - b2);
}
static inline float th_sf_chbevl_f32(float x, const double *c, int n) {
  float b0 = (float)c[0], b1 = 0, b2 = 0;
  for (int i = 1; i < n; i++) {
    b2 = b1;
    b1 = b0;
    b0 = x * b1 - b2 + (float)c[i];
  }
  return 0.5f * (b0 - b2);
}

/* scaled: exp(-|x|) I_k(x); else I_k(x). k = 1 is odd in x. */
#define TH_SF_BESSEL_I(T, SUF, EXP, SQRT, FABS, NA1, NB1)                                                              \
  static inline T th_sf_i0_##SUF(T x0, int scaled) {                                                                   \
    T x = FABS(x0);                                                                                                    \
    if (x <= (T)8) {                                                                                                   \
      T c = th_sf_chbevl_##SUF(x / (T)2 - (T)2, th_sf_i0_a, 30);                                                       \
      return scaled ? c : EXP(x) * c;                                                                                  \
    }                                                                                                                  \
    T c = th_sf_chbevl_##SUF((T)32 / x - (T)2, th_sf_i0_b, 25);                                                        \
    return scaled ? c / SQRT(x) : EXP(x) * c / SQRT(x);                                                                \
  }                                                                                                                    \
  static inline T th_sf_i1_##SUF(T x0, int scaled) {                                                                   \
    T x = FABS(x0), r;                                                                                                 \
    if (x <= (T)8) {                                                                                                   \
      T c = th_sf_chbevl_##SUF(x / (T)2 - (T)2, th_sf_i1_a + (29 - NA1), NA1);                                         \
      r = scaled ? c * x : EXP(x) * x * c;                                                                             \
    } else {                                                                                                           \
      T c = th_sf_chbevl_##SUF((T)32 / x - (T)2, th_sf_i1_b + (25 - NB1), NB1);                                        \
      r = scaled ? c / SQRT(x) : (EXP(x) * c) / SQRT(x);                                                               \
    }                                                                                                                  \
    return x0 < 0 ? -r : r;                                                                                            \
  }
TH_SF_BESSEL_I(double, f64, exp, sqrt, fabs, 29, 25)
TH_SF_BESSEL_I(float, f32, expf, sqrtf, fabsf, 17, 7)
#undef TH_SF_BESSEL_I

/* ---- ndtri: the inverse of the standard normal CDF (Cephes' rational approximations) -------------------- */
static inline double th_sf_ndtri_f64(double y0) {
  static const double p0[5] = {-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
                               1.39312609387279679503E1, -1.23916583867381258016E0};
  static const double q0[9] = {1.0,
                               1.95448858338141759834E0,
                               4.67627912898881538453E0,
                               8.63602421390890590575E1,
                               -2.25462687854119370527E2,
                               2.00260212380060660359E2,
                               -8.20372256168333339912E1,
                               1.59056225126211695515E1,
                               -1.18331621121330003142E0};
  static const double p1[9] = {4.05544892305962419923E0,   3.15251094599893866154E1,   5.71628192246421288162E1,
                               4.40805073893200834700E1,   1.46849561928858024014E1,   2.18663306850790267539E0,
                               -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4};
  static const double q1[9] = {1.0,
                               1.57799883256466749731E1,
                               4.53907635128879210584E1,
                               4.13172038254672030440E1,
                               1.50425385692907503408E1,
                               2.50464946208309415979E0,
                               -1.42182922854787788574E-1,
                               -3.80806407691578277194E-2,
                               -9.33259480895457427372E-4};
  static const double p2[9] = {3.23774891776946035970E0,  6.91522889068984211695E0,  3.93881025292474443415E0,
                               1.33303460815807542389E0,  2.01485389549179081538E-1, 1.23716634817820021358E-2,
                               3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9};
  static const double q2[9] = {1.0,
                               6.02427039364742014255E0,
                               3.67983563856160859403E0,
                               1.37702099489081330271E0,
                               2.16236993594496635890E-1,
                               1.34204006088543189037E-2,
                               3.28014464682127739104E-4,
                               2.89247864745380683936E-6,
                               6.79019408009981274425E-9};
  const double e2 = 0.13533528323661269189; /* exp(-2) */
  if (y0 == 0) return -INFINITY;
  if (y0 == 1) return INFINITY;
  if (y0 < 0 || y0 > 1) return NAN;
  int negate = 1;
  double y = y0;
  if (y > 1 - e2) {
    y = 1 - y;
    negate = 0;
  }
  if (y > e2) {
    y -= 0.5;
    double y2 = y * y;
    return (y + y * (y2 * th_sf_poly_f64(y2, p0, 4) / th_sf_poly_f64(y2, q0, 8))) * 2.50662827463100050242;
  }
  double x = sqrt(-2.0 * log(y)), x0 = x - log(x) / x, z = 1 / x;
  double x1 = x < 8 ? z * th_sf_poly_f64(z, p1, 8) / th_sf_poly_f64(z, q1, 8)
                    : z * th_sf_poly_f64(z, p2, 8) / th_sf_poly_f64(z, q2, 8);
  x = x0 - x1;
  return negate ? -x : x;
}

/* ---- orthogonal polynomials P_n(x) (PyTorch's recurrences and special cases) -----------------------------
 * n arrives in the operands' floating type and is truncated to an integer as static_cast<int64_t> does on
 * x86-64 (NaN and values out of range give INT64_MIN, a negative degree: 0). Chebyshev T, U, V, W use the
 * trigonometric forms for |x| < 1 above a small degree, as PyTorch. The float32 step of He,
 * x q - k p, is one fused multiply-add, as PyTorch's compiled float kernel evaluates it (the cancellation
 * there makes the two roundings visible). */
static inline int64_t th_sf_degree(double n) {
  return (n != n || n >= 9223372036854775808.0 || n < -9223372036854775808.0) ? INT64_MIN : (int64_t)n;
}
#define TH_SF_MULSUB(a, b, c) ((a) * (b) + (c))
#define TH_SF_POLYS(T, SUF, FABS, COS, SIN, ACOS, FMA)                                                                 \
  static inline T th_sf_cheb_t_##SUF(T x, T nf) {                                                                      \
    int64_t n = th_sf_degree((double)nf);                                                                              \
    if (n < 0) return 0;                                                                                               \
    if (FABS(x) == 1) return (x > 0 || n % 2 == 0) ? (T)1 : (T)-1;                                                     \
    if (n > 6 && FABS(x) < 1) return COS((T)n * ACOS(x));                                                              \
    if (n == 0) return 1;                                                                                              \
    if (n == 1) return x;                                                                                              \
    T p = 1, q = x, r = 0;                                                                                             \
    for (int64_t k = 2; k <= n; k++) r = (x + x) * q - p, p = q, q = r;                                                \
    return r;                                                                                                          \
  }                                                                                                                    \
  static inline T th_sf_cheb_u_##SUF(T x, T nf) {                                                                      \
    int64_t n = th_sf_degree((double)nf);                                                                              \
    if (n < 0) return 0;                                                                                               \
    if (FABS(x) == 1) return (x > 0 || n % 2 == 0) ? (T)(n + 1) : -(T)(n + 1);                                         \
    if (n > 8 && FABS(x) < 1) {                                                                                        \
      if (SIN(ACOS(x)) != 0) return SIN((T)(n + 1) * ACOS(x)) / SIN(ACOS(x));                                          \
      return (T)(n + 1) * COS((T)(n + 1) * ACOS(x)) / x;                                                               \
    }                                                                                                                  \
    if (n == 0) return 1;                                                                                              \
    if (n == 1) return x + x;                                                                                          \
    T p = 1, q = x + x, r = 0;                                                                                         \
    for (int64_t k = 2; k <= n; k++) r = (x + x) * q - p, p = q, q = r;                                                \
    return r;                                                                                                          \
  }                                                                                                                    \
  static inline T th_sf_cheb_v_##SUF(T x, T nf) {                                                                      \
    int64_t n = th_sf_degree((double)nf);                                                                              \
    if (n < 0) return 0;                                                                                               \
    if (FABS(x) == 1) {                                                                                                \
      if (x > 0) return 1;                                                                                             \
      return n % 2 == 0 ? (T)(n + n + 1) : -(T)(n + n + 1);                                                            \
    }                                                                                                                  \
    if (n > 8 && FABS(x) < 1) {                                                                                        \
      if (SIN(ACOS(x) / 2) != 1) return COS(((T)n + (T)0.5) * ACOS(x)) / COS(ACOS(x) / 2);                             \
      return n % 2 == 0 ? (T)(n + n + 1) : -(T)(n + n + 1);                                                            \
    }                                                                                                                  \
    if (n == 0) return 1;                                                                                              \
    if (n == 1) return x + x - 1;                                                                                      \
    T p = 1, q = x + x - 1, r = 0;                                                                                     \
    for (int64_t k = 2; k <= n; k++) r = (x + x) * q - p, p = q, q = r;                                                \
    return r;                                                                                                          \
  }                                                                                                                    \
  static inline T th_sf_cheb_w_##SUF(T x, T nf) {                                                                      \
    int64_t n = th_sf_degree((double)nf);                                                                              \
    if (n < 0) return 0;                                                                                               \
    if (FABS(x) == 1) {                                                                                                \
      if (x > 0) return (T)(n + n + 1);                                                                                \
      return n % 2 == 0 ? (T)1 : (T)-1;                                                                                \
    }                                                                                                                  \
    if (n > 8 && FABS(x) < 1) {                                                                                        \
      if (COS(ACOS(x) / 2) != 1) return SIN(((T)n + (T)0.5) * ACOS(x)) / SIN(ACOS(x) / 2);                             \
      if (x > 0) return (T)(n + n + 1);                                                                                \
      return n % 2 == 0 ? (T)1 : (T)-1;                                                                                \
    }                                                                                                                  \
    if (n == 0) return 1;                                                                                              \
    if (n == 1) return x + x + 1;                                                                                      \
    T p = 1, q = x + x + 1, r = 0;                                                                                     \
    for (int64_t k = 2; k <= n; k++) r = (x + x) * q - p, p = q, q = r;                                                \
    return r;                                                                                                          \
  }                                                                                                                    \
  static inline T th_sf_hermite_h_##SUF(T x, T nf) {                                                                   \
    int64_t n = th_sf_degree((double)nf);                                                                              \
    if (n < 0) return 0;                                                                                               \
    if (n == 0) return 1;                                                                                              \
    if (n == 1) return x + x;                                                                                          \
    T p = 1, q = x + x, r = 0;                                                                                         \
    for (int64_t k = 2; k < n + n; k += 2) r = (x + x) * q - (T)k * p, p = q, q = r;                                   \
    return r;                                                                                                          \
  }                                                                                                                    \
  static inline T th_sf_hermite_he_##SUF(T x, T nf) {                                                                  \
    int64_t n = th_sf_degree((double)nf);                                                                              \
    if (n < 0) return 0;                                                                                               \
    if (n == 0) return 1;                                                                                              \
    if (n == 1) return x;                                                                                              \
    T p = 1, q = x, r = 0;                                                                                             \
    for (int64_t k = 1; k < n; k++) r = FMA(x, q, -((T)k * p)), p = q, q = r;                                          \
    return r;                                                                                                          \
  }                                                                                                                    \
  static inline T th_sf_laguerre_l_##SUF(T x, T nf) {                                                                  \
    int64_t n = th_sf_degree((double)nf);                                                                              \
    if (n < 0) return 0;                                                                                               \
    if (FABS(x) == 0) return 1;                                                                                        \
    if (n == 0) return 1;                                                                                              \
    if (n == 1) return 1 - x;                                                                                          \
    T p = 1, q = 1 - x, r = 0;                                                                                         \
    for (int64_t k = 1; k < n; k++) r = (((T)(k + k) + (1 - x)) * q - (T)k * p) / (T)(k + 1), p = q, q = r;            \
    return r;                                                                                                          \
  }                                                                                                                    \
  static inline T th_sf_legendre_p_##SUF(T x, T nf) {                                                                  \
    int64_t n = th_sf_degree((double)nf);                                                                              \
    if (n < 0) return 0;                                                                                               \
    if (FABS(x) == 1) return (x > 0 || n % 2 == 0) ? (T)1 : (T)-1;                                                     \
    if (n == 0) return 1;                                                                                              \
    if (n == 1) return x;                                                                                              \
    T p = 1, q = x, r = 0;                                                                                             \
    for (int64_t k = 1; k < n; k++) r = ((T)(k + k + 1) * x * q - (T)k * p) / (T)(k + 1), p = q, q = r;                \
    return r;                                                                                                          \
  }
TH_SF_POLYS(double, f64, fabs, cos, sin, acos, TH_SF_MULSUB)
TH_SF_POLYS(float, f32, fabsf, cosf, sinf, acosf, fmaf)
#undef TH_SF_POLYS
#undef TH_SF_MULSUB

/* spherical Bessel j0(x) = sin(x) / x: 0 at +-inf, its Taylor series below |x| = 0.5 (PyTorch's kernel). */
#define TH_SF_SPH_J0(T, SUF, SIN, FABS)                                                                                \
  static inline T th_sf_sph_j0_##SUF(T x) {                                                                            \
    if (isinf(x)) return 0;                                                                                            \
    if (FABS(x) < (T)0.5) {                                                                                            \
      T z = x * x;                                                                                                     \
      T s = (T)-1 / (T)39916800 + z * ((T)1 / (T)6227020800);                                                          \
      s = (T)1 / (T)362880 + z * s;                                                                                    \
      return (T)1 + z * ((T)-1 / (T)6 + z * ((T)1 / (T)120 + z * ((T)-1 / (T)5040 + z * s)));                          \
    }                                                                                                                  \
    return SIN(x) / x;                                                                                                 \
  }
TH_SF_SPH_J0(double, f64, sin, fabs)
TH_SF_SPH_J0(float, f32, sinf, fabsf)
#undef TH_SF_SPH_J0

#endif
