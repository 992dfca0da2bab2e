// Element types of tensors and the scalar conversions between them.
// These scalar conversions are the reference every vectorised or CUDA conversion is checked against.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace ftllm {

// Float types, ggml's block formats (read from GGUF) and our own quantized formats (made by --dtype).
// Every type stores a matrix row by row; a row of K values is an optional header followed by K /
// block_values blocks, so rows can be addressed, moved and computed on one at a time.
enum class DType : uint8_t {
  F32, F16, BF16,
  Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,  // ggml's, bit for bit
  I8,      // per output channel: [f32 scale] then K int8
  I4,      // per output channel: [f32 scale, f32 min] then K/2 bytes, value = scale * q + min
  I4G32, I4G64, I4G128, I4G256,  // groups of G: [f16 scale, f16 min, G/2 bytes], value = scale * q + min
  FP8,     // e4m3 in blocks of 128: [f32 scale, 128 bytes], value = e4m3 * scale
  MXFP4,   // OCP microscaling, ggml's layout: [e8m0 exponent, 16 bytes of e2m1 nibbles] per 32 values
};

struct DTypeLayout {
  int64_t block_values;  // a row's length must be a multiple of this
  size_t block_bytes;
  size_t row_header = 0;
};

constexpr DTypeLayout dtype_layout(DType t) {
  switch (t) {
    case DType::F32: return {1, 4};
    case DType::F16: return {1, 2};
    case DType::BF16: return {1, 2};
    case DType::Q8_0: return {32, 34};
    case DType::Q4_0: return {32, 18};
    case DType::Q4_1: return {32, 20};
    case DType::Q5_0: return {32, 22};
    case DType::Q5_1: return {32, 24};
    case DType::Q2_K: return {256, 84};
    case DType::Q3_K: return {256, 110};
    case DType::Q4_K: return {256, 144};
    case DType::Q5_K: return {256, 176};
    case DType::Q6_K: return {256, 210};
    case DType::I8: return {32, 32, 4};
    case DType::I4: return {32, 16, 8};
    case DType::I4G32: return {32, 20};
    case DType::I4G64: return {64, 36};
    case DType::I4G128: return {128, 68};
    case DType::I4G256: return {256, 132};
    case DType::FP8: return {128, 132};
    case DType::MXFP4: return {32, 17};
  }
  return {1, 0};
}

constexpr bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Bytes per element of the float types (0 for the block types: use row_bytes).
constexpr size_t dtype_size(DType t) { return is_float(t) ? dtype_layout(t).block_bytes : 0; }

// Bytes of one row of `k` values; k must be a multiple of the block (see fits_rows).
constexpr size_t row_bytes(DType t, int64_t k) {
  DTypeLayout l = dtype_layout(t);
  return l.row_header + size_t(k / l.block_values) * l.block_bytes;
}
constexpr bool fits_rows(DType t, int64_t k) { return k % dtype_layout(t).block_values == 0; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q2_K: return "q2_k";
    case DType::Q3_K: return "q3_k";
    case DType::Q4_K: return "q4_k";
    case DType::Q5_K: return "q5_k";
    case DType::Q6_K: return "q6_k";
    case DType::I8: return "int8";
    case DType::I4: return "int4";
    case DType::I4G32: return "int4g32";
    case DType::I4G64: return "int4g64";
    case DType::I4G128: return "int4g128";
    case DType::I4G256: return "int4g256";
    case DType::FP8: return "fp8";
    case DType::MXFP4: return "mxfp4";
  }
  return "?";
}

constexpr DType kAllDTypes[] = {DType::F32,  DType::F16,  DType::BF16,  DType::Q8_0,   DType::Q4_0,   DType::Q4_1,  DType::Q5_0,
                                DType::Q5_1, DType::Q2_K, DType::Q3_K,  DType::Q4_K,   DType::Q5_K,   DType::Q6_K,  DType::I8,
                                DType::I4,   DType::I4G32, DType::I4G64, DType::I4G128, DType::I4G256, DType::FP8,
                                DType::MXFP4};

// fastllm's --dtype spellings: float32/float16/bfloat16 (and fp32, fp16, half, bf16), int8, int4,
// int4g (group 128) or int4gN, fp8; also every name dtype_name gives. nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view name);

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
