// The AVX2 and AVX-512 VNNI kernel tables' entries kept in files of their own: the quantized-weight
// matmuls and attention.
#pragma once

#include "kernels.h"

namespace ftllm::cpu::avx2 {

// avx2_quantize.cpp: the weight types with an integer kernel, and the activations they take.
bool uses_q8(DType t);
void quantize_q8(const float* x, int64_t K, Q8Block* out);
void quantize_q8_256(const float* x, int64_t K, Q8Block* out);

// avx2_exact_blocks.cpp: weight rows [n0, n1) of a type uses_q8 names against M quantized activation rows.
void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
               int64_t ldy);

// avx2_attention.cpp: flash attention's step (both tables).
void attend_block(const AttendBlock& block, const AttendRows& rows);

}  // namespace ftllm::cpu::avx2

// The same matmul built for AVX-512 VNNI (vpdpbusd on 256-bit registers, 32 of them); both tables
// quantize activations with the AVX2 build's functions.
namespace ftllm::cpu::avx512vnni {

void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
               int64_t ldy);

// avx512_float_gemm.cpp: F32, F16 or BF16 weight rows [n0, n1) against M float activation rows, summed as
// the AVX2 kernel sums them (the same bits), four by four.
void matmul_float(DType wt, const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                  int64_t ldy);

}  // namespace ftllm::cpu::avx512vnni
