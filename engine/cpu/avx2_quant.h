// The quantized-weight half of the AVX2 and AVX-512 VNNI kernel tables (avx2_quant_kernels.cpp).
#pragma once

#include "kernels.h"

namespace ftllm::cpu::avx2 {

bool uses_q8(DType t);  // the types with an integer kernel
void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
               int64_t ldy);
void quantize_q8(const float* x, int64_t K, Q8Block* out);
void quantize_q8_256(const float* x, int64_t K, Q8Block* out);
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, int8, Q4_K and Q5_K (avx2_exact_blocks.cpp); false for the other types.
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
