/* test_dtype.c — dtype names and predicates, devices, and the bit-exact scalar conversions.
 *
 * Decoding (f16, bf16, fp8 -> f32) is checked for every code against a reference that builds the value
 * from the bit fields with ldexp in double. Encoding is checked by round trips over every code and by
 * spot values taken from PyTorch (torch 1.13 on x86-64 for f16/bf16 and the integer casts; the fp8
 * values from c10's Float8_e4m3fn/Float8_e5m2 as quoted in the OCP spec and PyTorch's tests, and
 * e4m3fn's saturation above 448 from torch 2.14, whose cast saturates since 2.12). The
 * exhaustive float32 sweeps live in sweep_dtype.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/scalar.h"
#include "thunder/device.h"
#include "thunder/dtype.h"

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

static uint16_t u16_at(const void *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

/* ---- names, sizes, predicates --------------------------------------------------------------------- */
static const struct {
  th_dtype dt;
  const char *name, *short_name;
  size_t size;
  bool is_float, is_fp8, is_low, is_int;
} expected[] = {
  {TH_BOOL, "bool", "b8", 1, false, false, false, false},
  {TH_U8, "uint8", "u8", 1, false, false, false, true},
  {TH_I8, "int8", "i8", 1, false, false, false, true},
  {TH_I16, "int16", "i16", 2, false, false, false, true},
  {TH_I32, "int32", "i32", 4, false, false, false, true},
  {TH_I64, "int64", "i64", 8, false, false, false, true},
  {TH_F16, "float16", "f16", 2, true, false, true, false},
  {TH_BF16, "bfloat16", "bf16", 2, true, false, true, false},
  {TH_F32, "float32", "f32", 4, true, false, false, false},
  {TH_F64, "float64", "f64", 8, true, false, false, false},
  {TH_F8E4M3FN, "float8_e4m3fn", "f8_e4m3fn", 1, true, true, true, false},
  {TH_F8E5M2, "float8_e5m2", "f8_e5m2", 1, true, true, true, false},
};
#define N_EXPECTED (sizeof expected / sizeof expected[0])

static void test_names_sizes_predicates(void **state) {
  (void)state;
  assert_int_equal(N_EXPECTED, TH_DTYPE_COUNT);
  for (size_t i = 0; i < N_EXPECTED; i++) {
    th_dtype dt = expected[i].dt;
    assert_string_equal(th_dtype_name(dt), expected[i].name);
    assert_string_equal(th_dtype_short(dt), expected[i].short_name);
    assert_int_equal(th_dtype_size(dt), expected[i].size);
    assert_int_equal(th_dtype_is_float(dt), expected[i].is_float);
    assert_int_equal(th_dtype_is_fp8(dt), expected[i].is_fp8);
    assert_int_equal(th_dtype_is_low_precision(dt), expected[i].is_low);
    assert_int_equal(th_dtype_is_integer(dt), expected[i].is_int);
  }
}

static void expect_parse(const char *s, th_dtype want) {
  th_dtype got = TH_DTYPE_COUNT;
  if (!th_dtype_parse(s, &got)) fail_msg("th_dtype_parse(\"%s\") failed", s);
  if (got != want) fail_msg("th_dtype_parse(\"%s\") = %d, want %d", s, (int)got, (int)want);
}

static void test_parse(void **state) {
  (void)state;
  static const char *const prefixes[] = {"", "dtypes.", "thunder.", "thunder.dtypes."};
  char buf[64];
  for (size_t i = 0; i < N_EXPECTED; i++) {
    th_dtype dt = expected[i].dt;
    for (size_t p = 0; p < 4; p++) {
      snprintf(buf, sizeof buf, "%s%s", prefixes[p], th_dtype_name(dt));
      expect_parse(buf, dt);
      snprintf(buf, sizeof buf, "%s%s", prefixes[p], th_dtype_short(dt));
      expect_parse(buf, dt);
    }
    snprintf(buf, sizeof buf, "torch.%s", th_dtype_name(dt));
    expect_parse(buf, dt);
  }
  expect_parse("ui8", TH_U8);
  expect_parse("dtypes.ui8", TH_U8);
  expect_parse("thunder.dtypes.ui8", TH_U8);

  th_dtype dt = TH_F32;
  static const char *const bad[] = {"",
                                    "float",
                                    "f33",
                                    "torch.",
                                    "torch.f32",
                                    "torch.ui8",
                                    "Float32",
                                    "float32 ",
                                    " float32",
                                    "torch.torch.float32",
                                    "dtypes.torch.float32",
                                    "thunder.",
                                    "fp8",
                                    "float8_e4m3",
                                    "f8e4m3fn",
                                    "complex64",
                                    "dtypes.dtypes.f32"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (th_dtype_parse(bad[i], &dt)) fail_msg("th_dtype_parse(\"%s\") accepted", bad[i]);
  }
  assert_false(th_dtype_parse(NULL, &dt));
  assert_int_equal(dt, TH_F32); /* untouched on failure */
}

/* ---- devices -------------------------------------------------------------------------------------- */
static void test_device(void **state) {
  (void)state;
  char buf[32];
  th_device d;
  assert_string_equal(th_device_str((th_device){TH_CPU, 0}, buf, sizeof buf), "cpu");
  assert_string_equal(th_device_str((th_device){TH_META, 0}, buf, sizeof buf), "meta");
  assert_string_equal(th_device_str((th_device){TH_CUDA, 0}, buf, sizeof buf), "cuda:0");
  assert_string_equal(th_device_str((th_device){TH_CUDA, 13}, buf, sizeof buf), "cuda:13");
  assert_string_equal(th_device_str((th_device){TH_CUDA, 13}, buf, 5), "cuda"); /* truncated, terminated */

  assert_true(th_device_parse("cpu", &d));
  assert_true(d.type == TH_CPU && d.index == 0);
  assert_true(th_device_parse("meta", &d));
  assert_true(d.type == TH_META && d.index == 0);
  assert_true(th_device_parse("cuda", &d));
  assert_true(d.type == TH_CUDA && d.index == 0);
  assert_true(th_device_parse("cuda:0", &d));
  assert_true(d.type == TH_CUDA && d.index == 0);
  assert_true(th_device_parse("cuda:7", &d));
  assert_true(d.type == TH_CUDA && d.index == 7);
  assert_true(th_device_parse("cuda:2147483647", &d));
  assert_int_equal(d.index, 2147483647);
  static const char *const bad[] = {
    "",        "gpu",     "CPU",   "cuda:",           "cuda:-1", "cuda:+1", "cuda:01",
    "cuda:1x", "cuda: 1", "cpu:0", "cuda:2147483648", "cuda0",   "meta:0",  "cuda:99999999999999999999"};
  d = (th_device){TH_META, 0};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    if (th_device_parse(bad[i], &d)) fail_msg("th_device_parse(\"%s\") accepted", bad[i]);
  }
  assert_false(th_device_parse(NULL, &d));
  assert_int_equal(d.type, TH_META);

  for (int i = 0; i < 3; i++) { /* print -> parse round trip */
    th_device in = {(th_device_type)i, i == TH_CUDA ? 3 : 0}, out;
    assert_true(th_device_parse(th_device_str(in, buf, sizeof buf), &out));
    assert_true(th_device_eq(in, out));
  }
  assert_true(th_device_eq((th_device){TH_CUDA, 1}, (th_device){TH_CUDA, 1}));
  assert_false(th_device_eq((th_device){TH_CUDA, 1}, (th_device){TH_CUDA, 2}));
  assert_false(th_device_eq((th_device){TH_CPU, 0}, (th_device){TH_CUDA, 0}));
  assert_false(th_device_eq((th_device){TH_CPU, 0}, (th_device){TH_META, 0}));
}

/* ---- decoding every code against an ldexp reference ----------------------------------------------- */
/* A float format with ebits exponent and mbits mantissa bits. ieee: the top exponent holds inf
 * (mantissa 0) and NaN; otherwise ("fn") only the all-ones code is NaN and the rest are finite. */
typedef struct fmt {
  const char *name;
  int ebits, mbits, bias;
  bool ieee;
} fmt;

static const fmt FMT_F16 = {"float16", 5, 10, 15, true};
static const fmt FMT_BF16 = {"bfloat16", 8, 7, 127, true};
static const fmt FMT_E4M3FN = {"float8_e4m3fn", 4, 3, 7, false};
static const fmt FMT_E5M2 = {"float8_e5m2", 5, 2, 15, true};

/* The value of code in format f, in double; *is_nan set for NaN codes. */
static double ref_decode(const fmt *f, uint32_t code, bool *is_nan) {
  uint32_t top_exp = (1u << f->ebits) - 1, top_man = (1u << f->mbits) - 1;
  int negative = (code >> (f->ebits + f->mbits)) & 1;
  uint32_t biased = (code >> f->mbits) & top_exp;
  uint32_t frac = code & top_man;
  double magnitude;
  *is_nan = false;
  if (f->ieee && biased == top_exp) {
    *is_nan = frac != 0;
    magnitude = INFINITY;
  } else if (!f->ieee && biased == top_exp && frac == top_man) {
    *is_nan = true;
    magnitude = 0;
  } else if (biased == 0) {
    magnitude = ldexp((double)frac, 1 - f->bias - f->mbits);
  } else {
    magnitude = ldexp((double)(frac + (1u << f->mbits)), (int)biased - f->bias - f->mbits);
  }
  return negative ? -magnitude : magnitude;
}

typedef float (*decode_fn)(uint32_t code);
static float dec_f16(uint32_t c) { return th_f16_to_f32((uint16_t)c); }
static float dec_bf16(uint32_t c) { return th_bf16_to_f32((uint16_t)c); }
static float dec_e4m3fn(uint32_t c) { return th_f8e4m3fn_to_f32((uint8_t)c); }
static float dec_e5m2(uint32_t c) { return th_f8e5m2_to_f32((uint8_t)c); }

static void check_decode_all(const fmt *f, decode_fn dec) {
  uint32_t ncodes = 1u << (1 + f->ebits + f->mbits), bad = 0, nans = 0;
  for (uint32_t c = 0; c < ncodes; c++) {
    bool is_nan;
    double want = ref_decode(f, c, &is_nan);
    float got = dec(c);
    bool ok = is_nan ? isnan(got) : ((double)got == want && !!signbit(got) == !!signbit(want));
    nans += is_nan;
    if (!ok && bad++ < 5)
      print_error("%s code 0x%x: got %a (0x%08x), want %a%s\n", f->name, c, (double)got, bits_of(got), want,
                  is_nan ? " (NaN)" : "");
  }
  print_message("%s -> float32: %u codes (%u NaN), %u mismatches\n", f->name, ncodes, nans, bad);
  assert_int_equal(bad, 0);
}

static void test_decode_all_codes(void **state) {
  (void)state;
  check_decode_all(&FMT_F16, dec_f16);
  check_decode_all(&FMT_BF16, dec_bf16);
  check_decode_all(&FMT_E4M3FN, dec_e4m3fn);
  check_decode_all(&FMT_E5M2, dec_e5m2);
}

/* The NaN bit patterns PyTorch produces when decoding (c10 and vcvtph2ps quiet f16 NaNs; bf16 is a shift). */
static void test_decode_nan_bits(void **state) {
  (void)state;
  assert_int_equal(bits_of(th_f16_to_f32(0x7e00)), 0x7fc00000u);
  assert_int_equal(bits_of(th_f16_to_f32(0x7d00)), 0x7fe00000u); /* torch 1.13: signaling -> quiet */
  assert_int_equal(bits_of(th_f16_to_f32(0x7c01)), 0x7fc02000u);
  assert_int_equal(bits_of(th_f16_to_f32(0xfe00)), 0xffc00000u);
  assert_int_equal(bits_of(th_f16_to_f32(0x7fff)), 0x7fffe000u);
  assert_int_equal(bits_of(th_bf16_to_f32(0x7f81)), 0x7f810000u); /* torch 1.13: kept as is */
  assert_int_equal(bits_of(th_bf16_to_f32(0xffc1)), 0xffc10000u);
  assert_int_equal(bits_of(th_f8e4m3fn_to_f32(0x7f)), 0x7ff00000u); /* c10 fp8e4m3fn_to_fp32_value */
  assert_int_equal(bits_of(th_f8e4m3fn_to_f32(0xff)), 0xfff00000u);
  assert_int_equal(bits_of(th_f8e5m2_to_f32(0x7d)), 0x7fe00000u); /* via float16 0x7d00 */
  assert_int_equal(bits_of(th_f8e5m2_to_f32(0xfe)), 0xffc00000u);
  assert_true(isinf(th_f8e5m2_to_f32(0x7c)) && th_f8e5m2_to_f32(0xfc) < 0);
  assert_true(th_f8e4m3fn_to_f32(0x7e) == 448.0f && th_f8e4m3fn_to_f32(0xfe) == -448.0f);
  assert_true(th_f8e5m2_to_f32(0x7b) == 57344.0f);
  assert_true(th_f8e4m3fn_to_f32(0x01) == 0x1p-9f && th_f8e5m2_to_f32(0x01) == 0x1p-16f);
  assert_true(signbit(th_f8e4m3fn_to_f32(0x80)) && th_f8e4m3fn_to_f32(0x80) == 0.0f);
  assert_true(signbit(th_f8e5m2_to_f32(0x80)) && signbit(th_f16_to_f32(0x8000)) && signbit(th_bf16_to_f32(0x8000)));
}

/* ---- encoding: round trips over every code --------------------------------------------------------- */
static void test_round_trip_all_codes(void **state) {
  (void)state;
  bool is_nan;
  for (uint32_t c = 0; c < 0x10000u; c++) {
    ref_decode(&FMT_F16, c, &is_nan);
    uint16_t back = th_f32_to_f16(th_f16_to_f32((uint16_t)c));
    if (is_nan) {
      assert_true((back & 0x7c00u) == 0x7c00u && (back & 0x3ffu) != 0 && (back & 0x8000u) == (c & 0x8000u));
      assert_int_equal(back, c | 0x200u); /* quiet bit set, payload kept (vcvtph2ps + vcvtps2ph) */
    } else {
      assert_int_equal(back, c);
    }
    ref_decode(&FMT_BF16, c, &is_nan);
    back = th_f32_to_bf16(th_bf16_to_f32((uint16_t)c));
    assert_int_equal(back, is_nan ? 0x7fc0u : c);
  }
  for (uint32_t c = 0; c < 0x100u; c++) {
    for (int sat = 0; sat < 2; sat++) {
      ref_decode(&FMT_E4M3FN, c, &is_nan);
      uint8_t back = th_f32_to_f8e4m3fn(th_f8e4m3fn_to_f32((uint8_t)c), sat);
      assert_int_equal(back, c); /* NaN too: 0x7f/0xff decode to NaN of the same sign */
      ref_decode(&FMT_E5M2, c, &is_nan);
      back = th_f32_to_f8e5m2(th_f8e5m2_to_f32((uint8_t)c), sat);
      if (is_nan)
        assert_int_equal(back, 0x7fu | (c & 0x80u));
      else if (sat && (c & 0x7fu) == 0x7cu) /* inf saturates to max */
        assert_int_equal(back, 0x7bu | (c & 0x80u));
      else
        assert_int_equal(back, c);
    }
  }
}

/* ---- encoding: spot values -------------------------------------------------------------------------- */
static void test_f16_bf16_spot(void **state) {
  (void)state;
  /* float16 (torch 1.13 on x86-64) */
  assert_int_equal(th_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(th_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(th_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(th_f32_to_f16(65519.0f), 0x7bff);
  assert_int_equal(th_f32_to_f16(65520.0f), 0x7c00);
  assert_int_equal(th_f32_to_f16(INFINITY), 0x7c00);
  assert_int_equal(th_f32_to_f16(-INFINITY), 0xfc00);
  assert_int_equal(th_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     /* tie to even */
  assert_int_equal(th_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie to even, up */
  assert_int_equal(th_f32_to_f16(0x1p-24f), 0x0001);            /* smallest subnormal */
  assert_int_equal(th_f32_to_f16(0x1p-25f), 0x0000);            /* tie to 0 */
  assert_int_equal(th_f32_to_f16(1.5f * 0x1p-25f), 0x0001);
  assert_int_equal(th_f32_to_f16(3 * 0x1p-25f), 0x0002);
  assert_int_equal(th_f32_to_f16(5 * 0x1p-25f), 0x0002);
  assert_int_equal(th_f32_to_f16(0x1p-14f - 0x1p-26f), 0x0400); /* rounds up to the smallest normal */
  assert_int_equal(th_f32_to_f16(-0.0f), 0x8000);
  assert_int_equal(th_f32_to_f16(float_of(0x00000001u)), 0x0000);
  /* NaN: vcvtps2ph keeps sign and top payload bits and sets the quiet bit (torch 1.13's scalar
   * c10 path would give 0x7e00|sign; see sweep_dtype.c). */
  assert_int_equal(th_f32_to_f16(float_of(0x7fc00000u)), 0x7e00);
  assert_int_equal(th_f32_to_f16(float_of(0xffc00000u)), 0xfe00);
  assert_int_equal(th_f32_to_f16(float_of(0x7f800001u)), 0x7e00);
  assert_int_equal(th_f32_to_f16(float_of(0x7fa12345u)), 0x7f09);
  /* bfloat16 (torch 1.13, and c10's round_to_nearest_even) */
  assert_int_equal(th_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(th_f32_to_bf16(float_of(0x3f808000u)), 0x3f80); /* tie to even */
  assert_int_equal(th_f32_to_bf16(float_of(0x3f818000u)), 0x3f82);
  assert_int_equal(th_f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
  assert_int_equal(th_f32_to_bf16(float_of(0xff7f8000u)), 0xff80);
  assert_int_equal(th_f32_to_bf16(float_of(0x00000001u)), 0x0000); /* float32 subnormals round as bits */
  assert_int_equal(th_f32_to_bf16(float_of(0x00008000u)), 0x0000);
  assert_int_equal(th_f32_to_bf16(float_of(0x00018000u)), 0x0002);
  assert_int_equal(th_f32_to_bf16(float_of(0x007fffffu)), 0x0080);
  assert_int_equal(th_f32_to_bf16(float_of(0x80008001u)), 0x8001);
  assert_int_equal(th_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(th_f32_to_bf16(NAN), 0x7fc0);
  assert_int_equal(th_f32_to_bf16(-NAN), 0x7fc0);
  assert_int_equal(th_f32_to_bf16(float_of(0xff800001u)), 0x7fc0);
}

static void test_fp8_spot(void **state) {
  (void)state;
  /* e4m3fn, plain */
  assert_int_equal(th_f32_to_f8e4m3fn(4.48f, false), 0x49); /* 4.5 */
  assert_true(th_f8e4m3fn_to_f32(th_f32_to_f8e4m3fn(4.48f, false)) == 4.5f);
  assert_true(th_f8e4m3fn_to_f32(th_f32_to_f8e4m3fn(-8.96f, false)) == -9.0f);
  assert_true(th_f8e4m3fn_to_f32(th_f32_to_f8e4m3fn(2.24f, false)) == 2.25f);
  assert_int_equal(th_f32_to_f8e4m3fn(448.0f, false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(450.0f, false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(float_of(0x43e7ffffu), false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(464.0f, false), 0x7e); /* the tie goes to even (c10's mant_odd) */
  /* above: PyTorch >= 2.12 saturates (torch 2.14: 1000, inf, -1e30 -> 0x7e, 0x7e, 0xfe) */
  assert_int_equal(th_f32_to_f8e4m3fn(float_of(0x43e80001u), false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(479.99f, false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(480.0f, false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(500.0f, false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(-500.0f, false), 0xfe);
  assert_int_equal(th_f32_to_f8e4m3fn(1000.0f, false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(-1e30f, false), 0xfe);
  assert_int_equal(th_f32_to_f8e4m3fn(float_of(0x7f7fffffu), false), 0x7e); /* FLT_MAX */
  assert_int_equal(th_f32_to_f8e4m3fn(INFINITY, false), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(-INFINITY, false), 0xfe);
  assert_int_equal(th_f32_to_f8e4m3fn(NAN, false), 0x7f);
  assert_int_equal(th_f32_to_f8e4m3fn(-NAN, false), 0xff);
  assert_int_equal(th_f32_to_f8e4m3fn(float_of(0x7f800001u), false), 0x7f); /* a signaling NaN */
  assert_int_equal(th_f32_to_f8e4m3fn(-0.0f, false), 0x80);
  assert_int_equal(th_f32_to_f8e4m3fn(0.0f, false), 0x00);
  assert_int_equal(th_f32_to_f8e4m3fn(0x1p-9f, false), 0x01);  /* smallest subnormal */
  assert_int_equal(th_f32_to_f8e4m3fn(0x1p-10f, false), 0x00); /* tie to 0 */
  assert_int_equal(th_f32_to_f8e4m3fn(0x1.000002p-10f, false), 0x01);
  assert_int_equal(th_f32_to_f8e4m3fn(3 * 0x1p-10f, false), 0x02); /* 1.5 quanta: tie to even 2 */
  assert_int_equal(th_f32_to_f8e4m3fn(-0x1p-9f, false), 0x81);
  assert_int_equal(th_f32_to_f8e4m3fn(7 * 0x1p-9f, false), 0x07);   /* largest subnormal */
  assert_int_equal(th_f32_to_f8e4m3fn(0x1p-6f, false), 0x08);       /* smallest normal */
  assert_int_equal(th_f32_to_f8e4m3fn(15 * 0x1p-10f, false), 0x08); /* 7.5 quanta: tie to even 8 */
  /* e4m3fn, saturating */
  assert_int_equal(th_f32_to_f8e4m3fn(500.0f, true), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(464.0f, true), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(INFINITY, true), 0x7e);
  assert_int_equal(th_f32_to_f8e4m3fn(-INFINITY, true), 0xfe);
  assert_int_equal(th_f32_to_f8e4m3fn(-1e30f, true), 0xfe);
  assert_int_equal(th_f32_to_f8e4m3fn(NAN, true), 0x7f);
  assert_int_equal(th_f32_to_f8e4m3fn(-NAN, true), 0xff);
  assert_int_equal(th_f32_to_f8e4m3fn(4.48f, true), 0x49);
  assert_true(isnan(th_f8e4m3fn_to_f32(th_f32_to_f8e4m3fn(NAN, true))));
  /* e5m2, plain */
  assert_true(th_f8e5m2_to_f32(th_f32_to_f8e5m2(60000.0f, false)) == 57344.0f);
  assert_int_equal(th_f32_to_f8e5m2(57344.0f, false), 0x7b);
  assert_int_equal(th_f32_to_f8e5m2(61439.0f, false), 0x7b);
  assert_int_equal(th_f32_to_f8e5m2(61440.0f, false), 0x7c);
  assert_int_equal(th_f32_to_f8e5m2(70000.0f, false), 0x7c);
  assert_int_equal(th_f32_to_f8e5m2(-70000.0f, false), 0xfc);
  assert_int_equal(th_f32_to_f8e5m2(INFINITY, false), 0x7c);
  assert_int_equal(th_f32_to_f8e5m2(NAN, false), 0x7f);
  assert_int_equal(th_f32_to_f8e5m2(-NAN, false), 0xff);
  assert_int_equal(th_f32_to_f8e5m2(-0.0f, false), 0x80);
  assert_int_equal(th_f32_to_f8e5m2(0x1p-16f, false), 0x01); /* smallest subnormal */
  assert_int_equal(th_f32_to_f8e5m2(0x1p-17f, false), 0x00); /* tie to 0 */
  assert_int_equal(th_f32_to_f8e5m2(3 * 0x1p-17f, false), 0x02);
  assert_int_equal(th_f32_to_f8e5m2(0x1p-14f, false), 0x04); /* smallest normal */
  assert_int_equal(th_f32_to_f8e5m2(1.0f, false), 0x3c);
  assert_int_equal(th_f32_to_f8e5m2(1.125f, false), 0x3c); /* tie to even */
  assert_int_equal(th_f32_to_f8e5m2(1.375f, false), 0x3e); /* tie to even, up */
  /* e5m2, saturating */
  assert_int_equal(th_f32_to_f8e5m2(70000.0f, true), 0x7b);
  assert_int_equal(th_f32_to_f8e5m2(61440.0f, true), 0x7b);
  assert_int_equal(th_f32_to_f8e5m2(INFINITY, true), 0x7b);
  assert_int_equal(th_f32_to_f8e5m2(-INFINITY, true), 0xfb);
  assert_int_equal(th_f32_to_f8e5m2(NAN, true), 0x7f);
  assert_true(isnan(th_f8e5m2_to_f32(th_f32_to_f8e5m2(NAN, true))));
}

/* ---- typed load/store (values from torch 1.13 on x86-64: tensor.to(dtype)) ---------------------------- */
static const double cast_inputs[] = {NAN, INFINITY, -INFINITY, 1e20,   -1e20,       300.7,  -1.5,   -129.7,
                                     3e9, -3e9,     131077.0,  0x1p31, -0x1p31 - 1, 0x1p63, 40000.5};
#define N_CAST (sizeof cast_inputs / sizeof cast_inputs[0])
static const int64_t cast_u8[N_CAST] = {0, 0, 0, 0, 0, 44, 255, 127, 0, 0, 5, 0, 255, 0, 64};
static const int64_t cast_i8[N_CAST] = {0, 0, 0, 0, 0, 44, -1, 127, 0, 0, 5, 0, 0, 0, 64};
static const int64_t cast_i16[N_CAST] = {0, 0, 0, 0, 0, 300, -1, -129, 0, 0, 5, 0, 0, 0, -25536};
static const int64_t cast_i32[N_CAST] = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, 300,       -1,   -129,
                                         INT32_MIN, INT32_MIN, 131077,    INT32_MIN, INT32_MIN, INT32_MIN, 40000};
static const int64_t cast_i64[N_CAST] = {INT64_MIN, INT64_MIN,  INT64_MIN,   INT64_MIN,  INT64_MIN,
                                         300,       -1,         -129,        3000000000, -3000000000,
                                         131077,    2147483648, -2147483649, INT64_MIN,  40000};

static void check_casts(th_dtype dt, const int64_t *want) {
  for (size_t i = 0; i < N_CAST; i++) {
    unsigned char buf[8];
    memset(buf, 0xab, sizeof buf);
    th_store_f64(buf, dt, cast_inputs[i]);
    int64_t got = th_load_i64(buf, dt);
    if (got != want[i])
      fail_msg("store_f64(%s, %g) read back %lld, want %lld", th_dtype_name(dt), cast_inputs[i], (long long)got,
               (long long)want[i]);
    /* float32 inputs: same unless the float rounding changes the value (-2^31-1 -> -2^31) */
    float f = (float)cast_inputs[i];
    th_store_f64(buf, dt, (double)f);
    int64_t a = th_load_i64(buf, dt);
    th_store_f32(buf, dt, f);
    assert_int_equal(th_load_i64(buf, dt), a);
  }
}

static void test_store_integer_casts(void **state) {
  (void)state;
  check_casts(TH_U8, cast_u8);
  check_casts(TH_I8, cast_i8);
  check_casts(TH_I16, cast_i16);
  check_casts(TH_I32, cast_i32);
  check_casts(TH_I64, cast_i64);
  /* float32 source: torch gives uint8 0 and int64 -2^31 for -2^31-1 (it is -2^31 in float32) */
  unsigned char buf[8];
  th_store_f32(buf, TH_U8, (float)(-0x1p31 - 1));
  assert_int_equal(th_load_i64(buf, TH_U8), 0);
  th_store_f32(buf, TH_I64, (float)(-0x1p31 - 1));
  assert_int_equal(th_load_i64(buf, TH_I64), -2147483648LL);
  /* float -> int64 loads: truncation, NaN -> INT64_MIN */
  float fv = -2.75f;
  assert_int_equal(th_load_i64(&fv, TH_F32), -2);
  fv = NAN;
  assert_int_equal(th_load_i64(&fv, TH_F32), INT64_MIN);
  uint16_t h = 0x7c00; /* f16 inf */
  assert_int_equal(th_load_i64(&h, TH_F16), INT64_MIN);
  uint8_t q = 0x49; /* e4m3fn 4.5 */
  assert_int_equal(th_load_i64(&q, TH_F8E4M3FN), 4);
}

static void test_store_bool_and_int64(void **state) {
  (void)state;
  unsigned char buf[8];
  th_store_f64(buf, TH_BOOL, NAN);
  assert_int_equal(buf[0], 1);
  th_store_f64(buf, TH_BOOL, -0.0);
  assert_int_equal(buf[0], 0);
  th_store_f32(buf, TH_BOOL, 0x1p-149f);
  assert_int_equal(buf[0], 1);
  th_store_i64(buf, TH_BOOL, -5);
  assert_int_equal(buf[0], 1);
  buf[0] = 7; /* a non-canonical bool byte still reads as true */
  assert_true(th_load_f64(buf, TH_BOOL) == 1.0 && th_load_f32(buf, TH_BOOL) == 1.0f && th_load_i64(buf, TH_BOOL) == 1);

  /* int64 -> narrower integers keep the low bits (torch 1.13: 300->u8 44, 40000->i16 -25536, ...) */
  static const int64_t in[] = {300, -1, 40000, (1LL << 40) + 7, -(1LL << 40) - 129};
  static const int64_t u8[] = {44, 255, 64, 7, 127}, i8[] = {44, -1, 64, 7, 127}, i16[] = {300, -1, -25536, 7, -129},
                       i32[] = {300, -1, 40000, 7, -129};
  for (size_t i = 0; i < 5; i++) {
    th_store_i64(buf, TH_U8, in[i]);
    assert_int_equal(th_load_i64(buf, TH_U8), u8[i]);
    th_store_i64(buf, TH_I8, in[i]);
    assert_int_equal(th_load_i64(buf, TH_I8), i8[i]);
    th_store_i64(buf, TH_I16, in[i]);
    assert_int_equal(th_load_i64(buf, TH_I16), i16[i]);
    th_store_i64(buf, TH_I32, in[i]);
    assert_int_equal(th_load_i64(buf, TH_I32), i32[i]);
  }
  /* int64 -> float32 rounds once (torch: 2^62+2^38+1 -> 2^62+2^39; through double it would be 2^62) */
  int64_t big = (1LL << 62) + (1LL << 38) + 1;
  th_store_i64(buf, TH_F32, big);
  assert_true(th_load_f64(buf, TH_F32) == 0x1p62 + 0x1p39);
  assert_true(th_load_f32(&big, TH_I64) == 0x1p62f + 0x1p39f);
  th_store_i64(buf, TH_F64, big);
  assert_true(th_load_f64(buf, TH_F64) == 0x1p62 + 0x1p38);
  th_store_i64(buf, TH_F16, 300);
  assert_int_equal(th_load_i64(buf, TH_F16), 300);
  th_store_i64(buf, TH_F16, 1LL << 40);
  assert_int_equal(u16_at(buf), 0x7c00); /* torch 1.13: 0x7c00 */
  th_store_i64(buf, TH_BF16, 40000);
  assert_int_equal(u16_at(buf), 0x471c); /* torch 1.13: 0x471c */
  int32_t i32v = 16777217;
  assert_true(th_load_f32(&i32v, TH_I32) == 16777216.0f);
  assert_true(th_load_f64(&i32v, TH_I32) == 16777217.0);
}

static void test_store_float_formats(void **state) {
  (void)state;
  unsigned char buf[8];
  /* double -> f16 goes through float32, like c10 (torch 1.13: 1 + 2^-11 + 2^-40 -> 0x3c00) */
  th_store_f64(buf, TH_F16, 1.0 + 0x1p-11 + 0x1p-40);
  assert_int_equal(u16_at(buf), 0x3c00);
  th_store_f64(buf, TH_BF16, 1.0 + 0x1p-8 + 0x1p-40); /* torch 1.13: 0x3f80 (directly: 0x3f81) */
  assert_int_equal(u16_at(buf), 0x3f80);
  th_store_f64(buf, TH_F32, 1e300);
  assert_true(isinf(th_load_f64(buf, TH_F32)));
  th_store_f64(buf, TH_F8E4M3FN, 500.0); /* PyTorch's cast saturates */
  assert_int_equal(buf[0], 0x7e);
  th_store_f64(buf, TH_F8E4M3FN, -1e300); /* through float32: -inf, then -448 */
  assert_int_equal(buf[0], 0xfe);
  th_store_f64(buf, TH_F8E5M2, 1e10);
  assert_int_equal(buf[0], 0x7c);
  th_store_f32(buf, TH_F8E4M3FN, -8.96f);
  assert_true(th_load_f64(buf, TH_F8E4M3FN) == -9.0);
  th_store_f64(buf, TH_F64, 0.1);
  assert_true(th_load_f64(buf, TH_F64) == 0.1 && th_load_f32(buf, TH_F64) == 0.1f);
  /* every dtype: store then load a small integer value */
  for (int dt = 0; dt < TH_DTYPE_COUNT; dt++) {
    th_store_f64(buf, (th_dtype)dt, dt == TH_BOOL ? 1.0 : 3.0);
    assert_true(th_load_f64(buf, (th_dtype)dt) == (dt == TH_BOOL ? 1.0 : 3.0));
    th_store_f32(buf, (th_dtype)dt, -0.0f);
    assert_true(th_load_f32(buf, (th_dtype)dt) == 0.0f);
    if (th_dtype_is_float((th_dtype)dt)) assert_true(signbit(th_load_f64(buf, (th_dtype)dt)));
    th_store_i64(buf, (th_dtype)dt, 2);
    assert_int_equal(th_load_i64(buf, (th_dtype)dt), dt == TH_BOOL ? 1 : 2);
  }
  /* unaligned access is fine */
  th_store_f64(buf + 1, TH_I32, -7.9);
  assert_int_equal(th_load_i64(buf + 1, TH_I32), -7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_names_sizes_predicates),
    cmocka_unit_test(test_parse),
    cmocka_unit_test(test_device),
    cmocka_unit_test(test_decode_all_codes),
    cmocka_unit_test(test_decode_nan_bits),
    cmocka_unit_test(test_round_trip_all_codes),
    cmocka_unit_test(test_f16_bf16_spot),
    cmocka_unit_test(test_fp8_spot),
    cmocka_unit_test(test_store_integer_casts),
    cmocka_unit_test(test_store_bool_and_int64),
    cmocka_unit_test(test_store_float_formats),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
