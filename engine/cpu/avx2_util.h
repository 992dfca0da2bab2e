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
// ahead of it itself: their bytes spread evenly over the steps of the pass, each cache line once.
// How far ahead is counted in bytes too, not only rows: memory's latency wants about as many bytes in
// flight whatever a row holds. Eight rows ahead left short rows starved: one Zen 5 thread read Q4_0 rows
// of 576 weights (324 bytes) at 42 Gweights/s and of 896 at 39, against 65 for rows of 1536 or more;
// 8 KB ahead they read 64-66 (12 KB: 68-70, but Qwen2.5-0.5B's Q8_0 decode on one thread went 3-4%
// slower with it; 4 KB: 53-55). Groups of rows already 8 KB or longer keep their distance (one group, at
// least eight rows): further left L1 too full (Q6_K at four activation rows ran 25% slower two 10 KB
// groups ahead).
constexpr int64_t kAheadRows = 8;        // at least this many rows on
constexpr size_t kAheadBytes = 8 << 10;  // and as many whole groups as fit in this (one at least)
class AheadLines {
 public:
  // A group of `rows` weight rows of `row_bytes` from `first`, read over `steps` calls of step(): asks
  // for as many rows a whole number of groups on (at least kAheadRows rows, and as many groups as fit in
  // kAheadBytes), nothing from `end` on (the thread's rows end there; before, a group that far from the
  // end asked for nothing at all).
  AheadLines(const uint8_t* first, size_t row_bytes, int64_t rows, int64_t steps, const uint8_t* end) {
    const size_t group = size_t(rows) * row_bytes;
    const size_t far = std::max(std::max<size_t>(1, kAheadBytes / group) * group, (size_t(kAheadRows) * row_bytes + group - 1) / group * group);
    next_ = reinterpret_cast<uintptr_t>(first) + far;  // addresses as numbers: they may lie past the weights
    due_ = next_;
    end_ = std::min(next_ + group, reinterpret_cast<uintptr_t>(end));
    per_step_ = (group + size_t(std::max<int64_t>(steps, 1)) - 1) / size_t(std::max<int64_t>(steps, 1));
  }
  [[gnu::always_inline]] void step() {
    due_ += per_step_;
    for (const uintptr_t stop = std::min(due_, end_); next_ < stop; next_ += 64) _mm_prefetch(reinterpret_cast<const char*>(next_), _MM_HINT_T0);
  }

 private:
  uintptr_t next_;  // the next line to ask for
  uintptr_t due_;   // everything below this is asked for by the end of this step
  uintptr_t end_;   // nothing from here on
  size_t per_step_;
};

// The first kAheadBytes of a matmul call's weight rows [first, end) (a thread's piece of the matrix),
// asked for all at once as it starts: AheadLines asks only for lines that far on, so without this a
// piece's first 8 KB came from memory a line at a time, while the pool hands a thread a few pieces of
// each matrix (of a small model's, 20-60 KB each). SmolLM2-135M's Q4_0 decode on two Zen 5 threads
// went 479 -> 492 tok/s (AVX-512 table) and 474 -> 500 (AVX2), medians of 4 alternated runs;
// Qwen2.5-0.5B's, whose pieces are longer, moved within the noise.
inline void prefetch_first_lines(const uint8_t* first, const uint8_t* end) {
  const uint8_t* stop = first + std::min<size_t>(kAheadBytes, size_t(end - first));  // never a pointer past the rows
  for (const uint8_t* at = first; at < stop; at += 64) _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T0);
}

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

}  // namespace ftllm::cpu
