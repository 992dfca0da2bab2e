// Random weights of every stored type for kernel tests: random bits with sane float16 scales for
// ggml's block types, quantized random floats for ours and the float types.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/quant.h"

namespace ftllm::test {

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct GgmlLayout {
  DType type;
  std::vector<size_t> scales, mins;  // byte offsets of float16 fields: positive scales, signed minimums
  std::vector<size_t> exponents = {};  // byte offsets of e8m0 exponents (MXFP4)
};
inline const GgmlLayout kGgml[] = {
    {DType::Q8_0, {0}, {}},      {DType::Q4_0, {0}, {}},     {DType::Q4_1, {0}, {2}},    {DType::Q5_0, {0}, {}},
    {DType::Q5_1, {0}, {2}},     {DType::Q2_K, {80, 82}, {}}, {DType::Q3_K, {108}, {}},   {DType::Q4_K, {0, 2}, {}},
    {DType::Q5_K, {0, 2}, {}},   {DType::Q6_K, {208}, {}},   {DType::MXFP4, {}, {}, {0}},
};
constexpr DType kOurs[] = {DType::I8, DType::I4, DType::I4G32, DType::I4G64, DType::I4G128, DType::I4G256, DType::FP8};

// `rows` rows of k values in type t: random bits with sane scales for ggml's types, quantized random
// floats for ours and the float types.
inline std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t k, std::mt19937& rng) {
  std::vector<uint8_t> out(size_t(rows) * row_bytes(t, k));
  for (const GgmlLayout& g : kGgml)
    if (g.type == t) {
      for (uint8_t& b : out) b = uint8_t(rng());
      const size_t block = dtype_layout(t).block_bytes;
      std::uniform_real_distribution<float> scale(1e-3f, 0.05f), min(-0.05f, 0.05f);
      std::uniform_int_distribution<int> exponent(118, 124);  // half scales 2^-10 .. 2^-4
      for (size_t at = 0; at < out.size(); at += block) {
        for (size_t off : g.scales) {
          uint16_t h = f32_to_f16(scale(rng));
          std::memcpy(&out[at + off], &h, 2);
        }
        for (size_t off : g.mins) {
          uint16_t h = f32_to_f16(min(rng));
          std::memcpy(&out[at + off], &h, 2);
        }
        for (size_t off : g.exponents) out[at + off] = uint8_t(exponent(rng));
      }
      return out;
    }
  auto x = random_floats(size_t(rows * k), rng, 0.1f);
  for (int64_t r = 0; r < rows; ++r) quant::quantize_row(t, x.data() + r * k, k, out.data() + size_t(r) * row_bytes(t, k));
  return out;
}

}  // namespace ftllm::test
