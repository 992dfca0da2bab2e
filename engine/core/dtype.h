// Element types of tensors and the scalar conversions between them.
// These scalar conversions are the reference every vectorised or CUDA conversion is checked against.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace ftllm {

enum class DType : uint8_t { F32, F16, BF16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
  }
  return "?";
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bfloat16 is the top half of an IEEE float32.
inline float bf16_to_f32(uint16_t h) { return bits_float(uint32_t(h) << 16); }

// Round to nearest even; NaN stays NaN (quiet bit forced so truncation cannot make it Inf).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE half precision, subnormals included.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // Subnormal: value = mant * 2^-24.
    float v = float(mant) * (1.0f / 16777216.0f);
    return (sign ? -v : v);
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even, overflow to Inf, underflow through subnormals to signed zero.
inline uint16_t f32_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {                                  // below the smallest normal half
    // Scale so that the half subnormal step (2^-24) becomes 1, then round to nearest even.
    float scaled = bits_float(abs) * 16777216.0f;
    uint32_t q = uint32_t(scaled);
    float rest = scaled - float(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t mant_round = abs + 0xfffu + ((abs >> 13) & 1u);
  return uint16_t(sign | ((mant_round - (112u << 23)) >> 13));
}

}  // namespace ftllm
