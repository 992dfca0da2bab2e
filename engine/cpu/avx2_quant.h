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

// For the AMX GEMM (avx512_amx_gemm.cpp): what it needs of a weight type whose every 32-value block has
// one integer dot (not the K-quants), in the steps the other kernels sum it with:
//     acc = fma(float(x_q . u + start), scale * x.d, acc); acc = fma(min, x.s or x.ds, acc) where has_min
// with u the block's bytes (signed, or unsigned holding value + offset: start = -offset * x.sum), and
// the row's result times its row scale at the end where row_scale.
struct AmxType {
  bool supported = false, is_signed = false, has_min = false, min_times_ds = false, row_scale = false;
  int offset = 0;
};
AmxType amx_type(DType wt);
// Block b of 16 weight rows as the tile instructions take them: b_tile[k][4n + i] is byte 4k + i of
// row n's 32 (a 16 x 32 byte matrix with its 4-byte words transposed), then their scales and minimums.
struct AmxPanelBlock {
  alignas(64) uint8_t b_tile[8][64];
  float scale[16];
  float min[16];
};
// Weight rows n..n+15 of w (row_bytes each, nb blocks) into out[0..nb), their row scales into row_scale
// (1 where the type has none).
void amx_pack_panel(DType wt, const uint8_t* w, size_t row_bytes, int64_t n, int64_t nb, AmxPanelBlock* out, float* row_scale);

// avx512_float_gemm.cpp: F32, F16 or BF16 weight rows [n0, n1) against M float activation rows, summed as
// the AVX2 kernel sums them (the same bits), four by four.
void matmul_float(DType wt, const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                  int64_t ldy);

}  // namespace ftllm::cpu::avx512vnni
