// Small AVX2 helpers shared by the files built with -mavx2 -mfma -mf16c (include only from those).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ftllm::cpu {

// e^x, eight at once: x = k ln2 + r with |r| <= ln2 / 2, e^r by Cephes expf's degree-6 polynomial
// (within 2 ulp of expf), 2^k put into the exponent. Inputs are clamped to where e^x is a normal float.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 in two parts, so k * ln2 is taken off without rounding away r.
  const __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 er = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i two_k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(er, _mm256_castsi256_ps(two_k));
}

// Decode reads a few weight rows side by side, a piece of each at a time, and the rows after them lie
// next in memory. Rows of a few cache lines each are too short a stream for the hardware prefetchers (a
// thread pulled ~10 GB/s from memory on Zen 4 without this, ~17 with it), so a kernel asks for the rows
// kAheadRows on itself: their bytes spread evenly over the steps of the pass, each cache line once.
constexpr int64_t kAheadRows = 8;
class AheadLines {
 public:
  // `bytes` from `rows` over `steps` calls of step(); none where `any` is false (the thread's rows end first).
  AheadLines(const void* rows, size_t bytes, int64_t steps, bool any)
      : next_(any ? static_cast<const char*>(rows) : nullptr),
        due_(next_),
        per_step_((bytes + size_t(std::max<int64_t>(steps, 1)) - 1) / size_t(std::max<int64_t>(steps, 1))) {}
  [[gnu::always_inline]] void step() {
    if (!next_) return;
    due_ += per_step_;
    for (; next_ < due_; next_ += 64) _mm_prefetch(next_, _MM_HINT_T0);
  }

 private:
  const char* next_;  // the next line to ask for
  const char* due_;   // everything below this is asked for by the end of this step
  size_t per_step_;
};

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

}  // namespace ftllm::cpu
