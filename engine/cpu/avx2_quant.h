// The quantized-weight half of the AVX2 and AVX-512 VNNI kernel tables (avx2_quant_kernels.cpp).
#pragma once

#include <cstring>

#include "kernels.h"

namespace ftllm::cpu {

// Q4_K / Q5_K: a super-block's twelve packed bytes as its eight 6-bit scales and eight 6-bit minimums.
// As words A, B, C: scales 0-3 are A's low six bits, mins 0-3 B's; scales 4-7 are C's low nibbles with
// A's top two bits above them, mins 4-7 C's high nibbles with B's top two bits (scale_min_k4 per byte).
inline void k_scale_bytes(const uint8_t* packed, uint8_t* sc, uint8_t* mn) {
  uint32_t a, b, c;
  std::memcpy(&a, packed, 4);
  std::memcpy(&b, packed + 4, 4);
  std::memcpy(&c, packed + 8, 4);
  const uint32_t low6 = 0x3f3f3f3f, nibble = 0x0f0f0f0f, two = 0x03030303;
  const uint32_t s[2] = {a & low6, (c & nibble) | (((a >> 6) & two) << 4)};
  const uint32_t m[2] = {b & low6, ((c >> 4) & nibble) | (((b >> 6) & two) << 4)};
  std::memcpy(sc, s, 8);
  std::memcpy(mn, m, 8);
}

}  // namespace ftllm::cpu

namespace ftllm::cpu::avx2 {

bool uses_q8(DType t);  // the types with an integer kernel
void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
               int64_t ldy);
void quantize_q8(const float* x, int64_t K, Q8Block* out);
void quantize_q8_256(const float* x, int64_t K, Q8Block* out);
// Q4_0, Q8_0, int8 and Q4_K (avx2_exact_blocks.cpp); false for the other types.
bool matmul_exact_blocks(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                         int64_t ldy);

}  // namespace ftllm::cpu::avx2

// The same source built for AVX-512 VNNI (vpdpbusd on 256-bit registers). Only its matmul differs; both
// tables quantize activations with the AVX2 build's functions, which give the same bytes.
namespace ftllm::cpu::avx512vnni {

void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
               int64_t ldy);
bool matmul_exact_blocks(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                         int64_t ldy);

}  // namespace ftllm::cpu::avx512vnni
