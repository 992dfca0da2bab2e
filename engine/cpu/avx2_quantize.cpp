// Activations quantized to int8 blocks (Q8Block) for the integer matmuls (avx2_exact_blocks.cpp,
// avx2_k_quants.cpp), and
// which weight types take them. Built with -mavx2 -mfma -mf16c; the AVX-512 VNNI table uses these too
// (the bytes are the scalar reference's either way).
#include <immintrin.h>

#include "avx2_quant.h"

namespace ftllm::cpu::avx2 {

bool uses_q8(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q4_K:
    case DType::Q5_K: case DType::Q6_K: case DType::Q2_K: case DType::Q3_K: case DType::I8: case DType::I4: case DType::I4G32: case DType::I4G64:
    case DType::I4G128: case DType::I4G256: case DType::MXFP4:
      return true;
    default:
      return false;
  }
}

namespace {

inline float max_abs(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mx = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

// One block of 32 at scale d (the same float operations as the scalar reference, so the same bytes).
inline void quantize_block(const float* x, float d, bool half_d, Q8Block& out) {
  const float id = d > 0 ? 1.0f / d : 0.0f;
  __m256i q[4];
  for (int i = 0; i < 4; ++i)
    q[i] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), _mm256_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  const int32_t sum = _mm_cvtsi128_si32(s4);
  // Narrow 4 x 8 int32 to 32 int8; the packs interleave 128-bit lanes, the permute restores order.
  __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  packed = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q), packed);
  out.d = half_d ? _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT)) : d;
  out.sum = sum;
  out.ds = out.d * float(sum);
  out.s = _cvtsh_ss(_cvtss_sh(d * float(sum), _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace

void quantize_q8(const float* x, int64_t K, Q8Block* out) {
  for (int64_t b = 0; b < K / 32; ++b, x += 32) quantize_block(x, max_abs(x, 32) / 127.0f, true, out[b]);
}

void quantize_q8_256(const float* x, int64_t K, Q8Block* out) {
  for (int64_t sb = 0; sb < K / 256; ++sb, x += 256) {
    const float d = max_abs(x, 256) / 127.0f;
    for (int b = 0; b < 8; ++b) quantize_block(x + 32 * b, d, false, out[sb * 8 + b]);
  }
}

}  // namespace ftllm::cpu::avx2
