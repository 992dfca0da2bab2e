// The KV cache's stored types read eight values at a time for the AVX2 attention kernel (include only
// from files built with -mavx2 -mfma -mf16c).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "../kvcache/kv_format.h"
#include "../quant/block_decode.h"

namespace ftllm::cpu {

// Eight cached values from value c of a head's row (c a multiple of 8), as floats: the stored type read
// directly.
struct KvF32 {
  static __m256 load8(const uint8_t* row, int64_t c) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c); }
};
struct KvF16 {
  static __m256 load8(const uint8_t* row, int64_t c) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  }
};
struct KvBF16 {
  static __m256 load8(const uint8_t* row, int64_t c) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
};
struct KvQ8_0 {
  static __m256 load8(const uint8_t* row, int64_t c) {
    const uint8_t* block = row + c / 32 * 34;
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + c % 32))));
    const __m128 scale = _mm_cvtph_ps(_mm_cvtsi32_si128(quant::decode::u16(block)));  // F16C, as half() reads it
    return _mm256_mul_ps(_mm256_broadcastss_ps(scale), q);
  }
};
// An e4m3 byte moved into a half's bit fields (sign to bit 15, exponent and mantissa under it) is its
// value times 2^-8, subnormals included (both formats' subnormals scale by the same power): F16C widens
// eight at once, and the row's scale takes the 2^8 back. (0x7f, e4m3's NaN, reads as 480; the store never
// writes it for a finite value.)
struct KvFP8 {
  static __m256 load8(const uint8_t* row, int64_t c) {
    const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 4 + c)));
    const __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8),
                                   _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7f)), 7));
    return _mm256_mul_ps(_mm256_set1_ps(quant::decode::f32(row) * 256.0f), _mm256_cvtph_ps(h));
  }
};

}  // namespace ftllm::cpu
