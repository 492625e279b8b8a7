/* sweep_dtype.c — every one of the 2^32 float32 bit patterns through each float32 -> narrow conversion.
 *
 * Two kinds of oracle, neither of which shares code with the implementation (core/scalar.h):
 *   - the CPU's own conversion instructions: vcvtps2ph (F16C, imm 0 = round to nearest even) for
 *     float16 and vcvtneps2bf16 (AVX512-BF16) for bfloat16. Each is skipped, with a message, on a CPU
 *     without the extension.
 *   - an exact reference in integer arithmetic on the bit fields (ref_round below: shift the
 *     significand, compare the remainder with the half-way point, ties to even) for float16, bfloat16,
 *     float8_e4m3fn and float8_e5m2, plain and saturating.
 * The public functions from thunder/dtype.h are what is tested. The range is split over the cores with
 * OpenMP, 2^16 blocks of 2^16 inputs. Each test prints its mismatch count, the first few mismatching
 * inputs, and its time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <immintrin.h>

#include "thunder/dtype.h"

/* ---- the sweep driver ----------------------------------------------------------------------------- */
#define N_FIRST 8

/* Mismatches found so far: the count and the smallest few inputs (with got/want). */
typedef struct sweep_log {
  uint32_t in[N_FIRST], got[N_FIRST], want[N_FIRST];
  int n;
} sweep_log;

/* Records a mismatch; keeps the N_FIRST smallest inputs whatever order the threads find them in. */
static void log_mismatch(sweep_log *log, uint32_t in, uint32_t got, uint32_t want) {
#ifdef _OPENMP
#pragma omp critical(sweep_log)
#endif
  {
    int i = -1; /* the slot to fill: a free one, or the largest input's if this one is smaller */
    if (log->n < N_FIRST)
      i = log->n++;
    else if (in < log->in[N_FIRST - 1])
      i = N_FIRST - 1;
    for (; i > 0 && log->in[i - 1] > in; i--) { /* insertion: keep in[] sorted */
      log->in[i] = log->in[i - 1];
      log->got[i] = log->got[i - 1];
      log->want[i] = log->want[i - 1];
    }
    if (i >= 0) {
      log->in[i] = in;
      log->got[i] = got;
      log->want[i] = want;
    }
  }
}

/* Checks the 2^16 inputs hi<<16 .. hi<<16|0xffff. Returns the mismatch count; adds inputs left out of
 * the comparison (documented per sweep) to *excluded. */
typedef uint64_t (*block_fn)(uint32_t hi, sweep_log *log, uint64_t *excluded);

static double now_s(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_sweep(const char *name, block_fn fn, const char *excluded_what) {
  sweep_log log = {{0}, {0}, {0}, 0};
  uint64_t bad = 0, excluded = 0;
  double t0 = now_s();
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : bad, excluded)
#endif
  for (int hi = 0; hi < 0x10000; hi++) bad += fn((uint32_t)hi, &log, &excluded);
  double dt = now_s() - t0;
  print_message("%s: 2^32 inputs, %llu mismatches", name, (unsigned long long)bad);
  if (excluded_what) print_message(", %llu not compared (%s)", (unsigned long long)excluded, excluded_what);
  print_message(", %.1f s\n", dt);
  for (int i = 0; i < log.n; i++)
    print_message("  input 0x%08x: got 0x%x, want 0x%x\n", log.in[i], log.got[i], log.want[i]);
  assert_int_equal(bad, 0);
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* ---- the integer reference ---------------------------------------------------------------------------- */
/* Rounds the finite non-negative float32 with bits a to a format with mbits mantissa bits and exponent
 * bias `bias`, to nearest with ties to even, with an unbounded top exponent. Returns the magnitude code
 * ((biased exponent << mbits) | mantissa); a code past the format's largest finite one means overflow.
 *
 * The float32 value is sig * 2^(exp2 - 23) with sig the 24-bit significand. The result is a multiple of
 * the quantum 2^(max(exp2, emin) - mbits): sig shifted right by the difference of the two exponents,
 * rounded by the bits shifted out. Codes are then quotient-plus-offset: within a binade the quotient q
 * lies in [2^mbits, 2^(mbits+1)], and ((e - 1) << mbits) + q is the code (q == 2^(mbits+1) carries into
 * the next binade); below emin, e - 1 == 0 and q is the subnormal code directly. */
static uint32_t ref_round(uint32_t a, int mbits, int bias) {
  uint32_t field = a >> 23;
  uint32_t sig = a & 0x7fffffu;
  int exp2;
  if (field == 0) {
    exp2 = -126; /* float32 subnormal: no hidden bit */
  } else {
    exp2 = (int)field - 127;
    sig |= 0x800000u;
  }
  int emin = 1 - bias;
  int eq = exp2 > emin ? exp2 : emin;
  int shift = (eq - mbits) - (exp2 - 23); /* >= 23 - mbits > 0 */
  uint32_t q;
  if (shift >= 25) {
    q = 0; /* sig < 2^24 <= half a quantum: rounds to zero */
  } else {
    uint32_t one = 1u << shift;
    uint32_t rem = sig & (one - 1), halfway = one >> 1;
    q = sig >> shift;
    if (rem > halfway || (rem == halfway && (q & 1))) q += 1;
  }
  return ((uint32_t)(eq + bias - 1) << mbits) + q;
}

static int is_nan_bits(uint32_t a) { return (a & 0x7fffffffu) > 0x7f800000u; }
static int is_inf_bits(uint32_t a) { return (a & 0x7fffffffu) == 0x7f800000u; }

/* float16: IEEE overflow to inf; NaN as vcvtps2ph makes it: sign, quiet bit, top 9 payload bits. */
static uint32_t ref_f16(uint32_t x) {
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (is_nan_bits(x)) return sign | 0x7c00u | 0x200u | ((a & 0x7fffffu) >> 13);
  if (is_inf_bits(x)) return sign | 0x7c00u;
  uint32_t c = ref_round(a, 10, 15);
  return sign | (c >= 0x7c00u ? 0x7c00u : c);
}

/* bfloat16: IEEE overflow to inf; every NaN is 0x7fc0 (c10::BFloat16). */
static uint32_t ref_bf16(uint32_t x) {
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (is_nan_bits(x)) return 0x7fc0u;
  if (is_inf_bits(x)) return sign | 0x7f80u;
  uint32_t c = ref_round(a, 7, 127);
  return sign | (c >= 0x7f80u ? 0x7f80u : c);
}

/* float8_e4m3fn: largest finite code 0x7e (448), NaN 0x7f. PyTorch's cast (torch >= 2.12) saturates,
 * so plain and saturating agree: NaN stays NaN, anything that rounds past 448 (above 464 = 0x43e80000,
 * a tie that goes to the even code 448; inf included) gives 448. */
static uint32_t ref_e4m3fn(uint32_t x, int saturate) {
  (void)saturate;
  uint32_t sign = (x >> 24) & 0x80u, a = x & 0x7fffffffu;
  if (is_nan_bits(x)) return sign | 0x7fu;
  if (is_inf_bits(x)) return sign | 0x7eu;
  uint32_t c = ref_round(a, 3, 7);
  return sign | (c > 0x7eu ? 0x7eu : c);
}

/* float8_e5m2: IEEE-like, largest finite code 0x7b (57344), inf 0x7c, NaN 0x7f|sign (c10).
 * Saturating: anything that rounds past 57344 (inf included) gives 57344. */
static uint32_t ref_e5m2(uint32_t x, int saturate) {
  uint32_t sign = (x >> 24) & 0x80u, a = x & 0x7fffffffu;
  if (is_nan_bits(x)) return sign | 0x7fu;
  if (is_inf_bits(x)) return sign | (saturate ? 0x7bu : 0x7cu);
  uint32_t c = ref_round(a, 2, 15);
  if (c > 0x7bu) c = saturate ? 0x7bu : 0x7cu;
  return sign | c;
}

/* ---- sweeps against the integer reference --------------------------------------------------------- */
static uint64_t block_f16_ref(uint32_t hi, sweep_log *log, uint64_t *excluded) {
  uint64_t bad = 0;
  (void)excluded;
  for (uint32_t lo = 0; lo < 0x10000u; lo++) {
    uint32_t x = hi << 16 | lo;
    uint32_t got = th_f32_to_f16(float_of(x)), want = ref_f16(x);
    if (got != want) bad++, log_mismatch(log, x, got, want);
  }
  return bad;
}

static uint64_t block_bf16_ref(uint32_t hi, sweep_log *log, uint64_t *excluded) {
  uint64_t bad = 0;
  (void)excluded;
  for (uint32_t lo = 0; lo < 0x10000u; lo++) {
    uint32_t x = hi << 16 | lo;
    uint32_t got = th_f32_to_bf16(float_of(x)), want = ref_bf16(x);
    if (got != want) bad++, log_mismatch(log, x, got, want);
  }
  return bad;
}

/* In the fp8 logs the saturating results are reported with 0x100 added. */
static uint64_t block_e4m3fn(uint32_t hi, sweep_log *log, uint64_t *excluded) {
  uint64_t bad = 0;
  (void)excluded;
  for (uint32_t lo = 0; lo < 0x10000u; lo++) {
    uint32_t x = hi << 16 | lo;
    float f = float_of(x);
    uint32_t got = th_f32_to_f8e4m3fn(f, false), want = ref_e4m3fn(x, 0);
    if (got != want) bad++, log_mismatch(log, x, got, want);
    got = th_f32_to_f8e4m3fn(f, true), want = ref_e4m3fn(x, 1);
    if (got != want) bad++, log_mismatch(log, x, 0x100u | got, 0x100u | want);
  }
  return bad;
}

static uint64_t block_e5m2(uint32_t hi, sweep_log *log, uint64_t *excluded) {
  uint64_t bad = 0;
  (void)excluded;
  for (uint32_t lo = 0; lo < 0x10000u; lo++) {
    uint32_t x = hi << 16 | lo;
    float f = float_of(x);
    uint32_t got = th_f32_to_f8e5m2(f, false), want = ref_e5m2(x, 0);
    if (got != want) bad++, log_mismatch(log, x, got, want);
    got = th_f32_to_f8e5m2(f, true), want = ref_e5m2(x, 1);
    if (got != want) bad++, log_mismatch(log, x, 0x100u | got, 0x100u | want);
  }
  return bad;
}

static void sweep_f16_reference(void **state) {
  (void)state;
  run_sweep("float32 -> float16 vs integer reference", block_f16_ref, NULL);
}

static void sweep_bf16_reference(void **state) {
  (void)state;
  run_sweep("float32 -> bfloat16 vs integer reference", block_bf16_ref, NULL);
}

static void sweep_e4m3fn_reference(void **state) {
  (void)state;
  run_sweep("float32 -> float8_e4m3fn (plain + saturating) vs integer reference", block_e4m3fn, NULL);
}

static void sweep_e5m2_reference(void **state) {
  (void)state;
  run_sweep("float32 -> float8_e5m2 (plain + saturating) vs integer reference", block_e5m2, NULL);
}

/* ---- sweeps against the hardware ------------------------------------------------------------------- */
/* vcvtps2ph, 4 lanes, imm 0: round to nearest even (MXCSR not consulted); NaN keeps sign and top
 * payload bits and is quieted. Exactly the behaviour we claim, NaN bits included. */
__attribute__((target("f16c"))) static uint64_t block_f16_hw(uint32_t hi, sweep_log *log, uint64_t *excluded) {
  uint64_t bad = 0;
  (void)excluded;
  for (uint32_t lo = 0; lo < 0x10000u; lo += 4) {
    uint32_t in[4];
    uint16_t hw[4];
    for (int k = 0; k < 4; k++) in[k] = hi << 16 | (lo + (uint32_t)k);
    __m128i h = _mm_cvtps_ph(_mm_loadu_ps((const float *)(const void *)in), 0);
    _mm_storel_epi64((__m128i *)(void *)hw, h);
    for (int k = 0; k < 4; k++) {
      uint32_t got = th_f32_to_f16(float_of(in[k]));
      if (got != hw[k]) bad++, log_mismatch(log, in[k], got, hw[k]);
    }
  }
  return bad;
}

static void sweep_f16_f16c(void **state) {
  (void)state;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) {
    print_message("float32 -> float16 vs vcvtps2ph: skipped: CPU lacks F16C\n");
    skip();
  }
  run_sweep("float32 -> float16 vs vcvtps2ph (F16C)", block_f16_hw, NULL);
}

/* vcvtneps2bf16, 4 lanes (Intel SDM): round to nearest even; float32 subnormal inputs are treated as
 * zero (result: signed zero) and MXCSR is not consulted; NaN becomes (x >> 16) | 0x40, keeping sign and
 * payload. PyTorch differs in both: c10 rounds subnormal inputs by their bits like any other value, and
 * gives 0x7fc0 for every NaN. So subnormal inputs are left out (counted) and NaN inputs are compared for
 * NaN-ness only; everything else must match exactly. */
__attribute__((target("avx512bf16,avx512vl"))) static uint64_t block_bf16_hw(uint32_t hi, sweep_log *log,
                                                                             uint64_t *excluded) {
  uint64_t bad = 0, skipped = 0;
  for (uint32_t lo = 0; lo < 0x10000u; lo += 4) {
    uint32_t in[4];
    uint16_t hw[8];
    for (int k = 0; k < 4; k++) in[k] = hi << 16 | (lo + (uint32_t)k);
    __m128bh h = _mm_cvtneps_pbh(_mm_loadu_ps((const float *)(const void *)in));
    memcpy(hw, &h, sizeof hw);
    for (int k = 0; k < 4; k++) {
      uint32_t x = in[k], got = th_f32_to_bf16(float_of(x)), want = hw[k];
      if ((x & 0x7f800000u) == 0 && (x & 0x7fffffu) != 0) {
        skipped++;
        continue;
      }
      int ok = is_nan_bits(x) ? ((got & 0x7fffu) > 0x7f80u && (want & 0x7fffu) > 0x7f80u) : got == want;
      if (!ok) bad++, log_mismatch(log, x, got, want);
    }
  }
  *excluded += skipped;
  return bad;
}

static void sweep_bf16_avx512bf16(void **state) {
  (void)state;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512vl")) {
    print_message("float32 -> bfloat16 vs vcvtneps2bf16: skipped: CPU lacks AVX512-BF16 "
                  "(the integer-reference sweep covers bfloat16)\n");
    skip();
  }
  run_sweep("float32 -> bfloat16 vs vcvtneps2bf16 (AVX512-BF16)", block_bf16_hw,
            "float32 subnormal inputs, which the instruction flushes to zero");
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(sweep_f16_f16c),         cmocka_unit_test(sweep_f16_reference),
    cmocka_unit_test(sweep_bf16_avx512bf16),  cmocka_unit_test(sweep_bf16_reference),
    cmocka_unit_test(sweep_e4m3fn_reference), cmocka_unit_test(sweep_e5m2_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
