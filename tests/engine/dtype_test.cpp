// The scalar dtype conversions against independent double-precision oracles.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.h"

using namespace ftllm;

namespace {

// The value of a half-precision bit pattern, computed from the IEEE definition in double.
double half_value(uint16_t h) {
  int sign = (h & 0x8000) ? -1 : 1;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  if (exp == 0x1f) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// Nearest half to x by search over all finite positive halves (ordered by bit pattern), ties to even.
uint16_t nearest_half(float x) {
  double v = std::fabs(double(x));
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (v >= 65520.0) return sign | 0x7c00;  // halfway between max half (65504) and 65536 rounds up
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {  // largest pattern with value <= v
    uint16_t mid = uint16_t((lo + hi + 1) / 2);
    if (half_value(mid) <= v) lo = mid; else hi = uint16_t(mid - 1);
  }
  if (lo == 0x7bff) return sign | lo;
  double below = v - half_value(lo), above = half_value(uint16_t(lo + 1)) - v;
  uint16_t pick = below < above ? lo : above < below ? uint16_t(lo + 1) : ((lo & 1) ? uint16_t(lo + 1) : lo);
  return sign | pick;
}

// Nearest bfloat16 (top 16 bits of a float) to x, ties to even, by comparing the two candidates in double.
uint16_t nearest_bf16(float x) {
  uint32_t u = float_bits(x);
  uint16_t lo = uint16_t(u >> 16);
  if ((u & 0xffff) == 0) return lo;
  double v = x, a = bf16_to_f32(lo), b = bf16_to_f32(uint16_t(lo + 1));
  double da = std::fabs(v - a), db = std::fabs(b - v);
  if (std::isinf(b)) db = std::fabs(std::copysign(std::ldexp(1.0, 128), v) - v);  // rounding past max: Inf
  return da < db ? lo : db < da ? uint16_t(lo + 1) : ((lo & 1) ? uint16_t(lo + 1) : lo);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dtype)

BOOST_AUTO_TEST_CASE(every_half_decodes_to_its_ieee_value_and_back) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    double want = half_value(uint16_t(h));
    float got = f16_to_f32(uint16_t(h));
    if (std::isnan(want)) {
      BOOST_REQUIRE(std::isnan(got));
      BOOST_REQUIRE(std::isnan(f16_to_f32(f32_to_f16(got))));
      continue;
    }
    BOOST_REQUIRE_MESSAGE(double(got) == want, "half 0x" << std::hex << h);
    BOOST_REQUIRE_MESSAGE(f32_to_f16(got) == h, "round trip of half 0x" << std::hex << h);
  }
}

BOOST_AUTO_TEST_CASE(float_to_half_rounds_to_nearest_even) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> log_mag(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::exp2(log_mag(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
    BOOST_REQUIRE_MESSAGE(f32_to_f16(x) == nearest_half(x), "x = " << x);
  }
  // Exact ties: halfway between 1 and the next half (1 + 2^-11) rounds to even (1); the next tie rounds up.
  BOOST_TEST(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  BOOST_TEST(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  BOOST_TEST(f32_to_f16(65519.0f) == 0x7bff);
  BOOST_TEST(f32_to_f16(65520.0f) == 0x7c00);
  BOOST_TEST(f32_to_f16(-1e10f) == 0xfc00);
  BOOST_TEST(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);                   // tie at the smallest subnormal
  BOOST_TEST(f32_to_f16(std::ldexp(1.0f, -25) * 1.0001f) == 0x0001);
  BOOST_TEST(f32_to_f16(-0.0f) == 0x8000);
}

BOOST_AUTO_TEST_CASE(float_to_bfloat16_rounds_to_nearest_even) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    float x = bits_float(uint32_t(rng()));
    if (std::isnan(x) || std::isinf(x)) continue;
    BOOST_REQUIRE_MESSAGE(f32_to_bf16(x) == nearest_bf16(x), "bits 0x" << std::hex << float_bits(x));
  }
  BOOST_TEST(f32_to_bf16(1.0f) == 0x3f80);
  BOOST_TEST(bf16_to_f32(0x3f80) == 1.0f);
  BOOST_TEST(bf16_to_f32(0xc040) == -3.0f);
  BOOST_TEST(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  BOOST_TEST(std::isnan(bf16_to_f32(f32_to_bf16(bits_float(0x7f800001u)))));  // NaN never becomes Inf
  BOOST_TEST(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
}

BOOST_AUTO_TEST_CASE(sizes_and_names) {
  BOOST_TEST(dtype_size(DType::F32) == 4u);
  BOOST_TEST(dtype_size(DType::BF16) == 2u);
  BOOST_TEST(dtype_name(DType::F16) == "float16");
}

BOOST_AUTO_TEST_SUITE_END()
