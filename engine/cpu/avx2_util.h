// Small AVX2 helpers shared by the files built with -mavx2 -mfma -mf16c (include only from those).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ftllm::cpu {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

}  // namespace ftllm::cpu
