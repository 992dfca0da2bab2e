// The AVX2 and AVX-512 VNNI kernel tables' entries kept in files of their own: the quantized-weight
// matmuls and attention.
#pragma once

#include <cstring>

#include "kernels.h"

namespace ftllm::cpu {

// Two int16 side by side in one int32 (lo in the low half), the operand vpmaddwd / vpdpwssd pair up.
inline int32_t int16_pair(int32_t lo, int32_t hi) { return int32_t(uint32_t(uint16_t(lo)) | uint32_t(uint16_t(hi)) << 16); }
// An activation block's sums of its first and last 16 values as an int16_pair (Q6_K's runs).
inline int32_t half_sums(const Q8Block& x) {
  int32_t low = 0, high = 0;
  for (int j = 0; j < 16; ++j) low += x.q[j], high += x.q[16 + j];
  return int16_pair(low, high);
}

// Block b of W fp8 weight rows `bytes` apart, for the fp8 kernels of both builds: each row's block (a
// float32 scale, then the e4m3 bytes) and its scale times 2^8 (the kernels widen each byte to its value
// times 2^-8) in every lane of a register (broadcast), the block `ahead` bytes on asked for into L2.
template <int W, typename Vec, typename Broadcast>
inline void fp8_blocks(const uint8_t* rows, size_t bytes, int64_t b, size_t ahead, const uint8_t* (&block)[W], Vec (&scale)[W],
                       Broadcast broadcast) {
  constexpr size_t kBlockBytes = dtype_layout(DType::FP8).block_bytes;
  for (int i = 0; i < W; ++i) {
    block[i] = rows + size_t(i) * bytes + size_t(b) * kBlockBytes;
    float s;
    std::memcpy(&s, block[i], 4);
    scale[i] = broadcast(s * 256.0f);
    if (ahead)
      for (size_t line = 0; line < kBlockBytes; line += 64) __builtin_prefetch(block[i] + ahead + line, 0, 2);  // prefetcht1
  }
}

}  // namespace ftllm::cpu

namespace ftllm::cpu::avx2 {

// avx2_quantize.cpp: the weight types with an integer kernel, and the activations they take.
bool uses_q8(DType t);
void quantize_q8(const float* x, int64_t K, Q8Block* out);
void quantize_q8_256(const float* x, int64_t K, Q8Block* out);

// avx2_exact_blocks.cpp (with avx2_k_quants.cpp for the K-quants): weight rows [n0, n1) of a type uses_q8
// names against M quantized activation rows.
void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
               int64_t ldy);

// avx2_attention.cpp: flash attention's step (the AVX2 table's; the AVX-512 tables take its build below).
void attend_block(const AttendBlock& block, const AttendRows& rows);

}  // namespace ftllm::cpu::avx2

// The same matmul built for AVX-512 VNNI (vpdpbusd on 256-bit registers, 32 of them); both tables
// quantize activations with the AVX2 build's functions.
namespace ftllm::cpu::avx512vnni {

void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
               int64_t ldy);

// avx2_attention.cpp built for AVX-512VL: the same step in groups of four rows (the same bits).
void attend_block(const AttendBlock& block, const AttendRows& rows);

// For the AMX GEMM (avx512_amx_gemm.cpp): what it needs of a weight type whose every 32-value block has
// one integer dot (not the K-quants), in the steps the other kernels sum it with:
//     acc = fma(float(x_q . u + start), scale * x.d, acc); acc = fma(min, x.s or x.ds, acc) where has_min
// with u the block's bytes (signed, or unsigned holding value + offset: start = -offset * x.sum), and
// the row's result times its row scale at the end where row_scale.
// Q6_K is `q6k`; Q4_K and Q5_K (`super`) take super-blocks of eight such blocks with 6-bit scales and minimums instead
// (avx2_k_quants.cpp, Weights<Q4_K>): acc = fma(float(sum_j sc_j (x_j . u_j)), d * x.d, acc), then
// acc = fma(-dmin * x.d, float(sum_j mn_j sum(x_j)), acc).
struct AmxType {
  bool supported = false, is_signed = false, has_min = false, min_times_ds = false, row_scale = false, super = false, q6k = false;
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
// A super-block of 16 weight rows: its eight blocks' tiles, each row's scales and minimums per block
// (minimums as pairs of int16, blocks 2k and 2k + 1), d and -dmin.
struct AmxSuperBlock {
  alignas(64) uint8_t b_tile[8][8][64];
  int32_t scale[8][16];
  int32_t min_pairs[4][16];
  float d[16];
  float neg_dmin[16];
};
void amx_pack_super_panel(DType wt, const uint8_t* w, size_t row_bytes, int64_t n, int64_t super_blocks, AmxSuperBlock* out);
// Q6_K's super-block of 16 weight rows: sixteen runs of 16 values (run r: block r / 2, half r % 2) as
// tiles of 4 x 64 bytes, each row's int8 run scales as int32 and as pairs of int16 (runs 2j, 2j + 1), d.
// Its step: acc = fma(float(sum_r sc_r (x_r . q_r) - 32 sum_r sc_r sum(x_r)), d * x.d, acc).
struct AmxQ6Block {
  alignas(64) uint8_t b_tile[16][4][64];
  int32_t scale[16][16];
  int32_t scale_pairs[8][16];
  float d[16];
};
void amx_pack_q6k_panel(const uint8_t* w, size_t row_bytes, int64_t n, int64_t super_blocks, AmxQ6Block* out);

// avx512_float_gemm.cpp: F32, F16 or BF16 weight rows [n0, n1) against M float activation rows, every
// row summed alike (16-lane steps, not the AVX2 table's 8), four by four.
void matmul_float(DType wt, const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                  int64_t ldy);
// fp8 weight rows [n0, n1) against one activation row, with the bits of matmul_float on the widened rows.
void fp8_gemv(const float* x, int64_t K, const void* w, int64_t n0, int64_t n1, float* y);
// The same for a few activation rows (a small decode batch), each row's bits fp8_gemv's.
void fp8_few_rows(const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy);

}  // namespace ftllm::cpu::avx512vnni
