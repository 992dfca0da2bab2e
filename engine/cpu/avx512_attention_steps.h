// The AVX-512 tables' steps of the attention kernel (avx2_attention.cpp, built with FTLLM_VNNI; include
// only from there): the same arithmetic as its AVX2 steps on 16 lanes, where that keeps every value's bits.
// Two keys' eight lanes side by side in one register for the scores (each half sums as the AVX2 kernel's
// one key does), sixteen keys at a time for the softmax step (the sum still adds each eight in key order),
// sixteen values of a row for the weighing (each lane its own value). So a row's bits stay those of the
// AVX2 table, which the tests pin, while on a Xeon (two 512-bit FMA units a core) one layer's attention
// at 8k keys took 13-30% less time (decode to prefill slices).
#pragma once
// GCC 12's AVX-512 headers pass _mm512_undefined_*() as the unused merge source of unmasked conversions,
// which its flow analysis reports as uninitialized (as in avx512_float_gemm.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "avx2_kv.h"
#include "avx2_util.h"

namespace ftllm::cpu::avx512 {

// a in the low half, b in the high one (AVX-512F alone: the tables do not ask for DQ).
inline __m512 join(__m256 a, __m256 b) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_zextps256_ps512(a)), _mm256_castps_pd(b), 1));
}

// Values c..c+7 of rows a and b: a's in the low half.
template <typename L>
inline __m512 load8x2(const uint8_t* a, const uint8_t* b, int64_t c) {
  if constexpr (std::is_same_v<L, KvF16>) {
    const __m128i ha = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2 * c));
    const __m128i hb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * c));
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(ha), hb, 1));
  } else {
    return join(L::load8(a, c), L::load8(b, c));
  }
}

// Values c..c+15 of a row.
template <typename L>
inline __m512 load16(const uint8_t* row, int64_t c) {
  if constexpr (std::is_same_v<L, KvF16>)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
  else if constexpr (std::is_same_v<L, KvF32>)
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
  else
    return join(L::load8(row, c), L::load8(row, c + 8));
}

// _mm256_hadd_ps on each half: per 128-bit lane [x0+x1, x2+x3, y0+y1, y2+y3].
inline __m512 hadd_halves(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
}

// A query row as scores4 reads it: each chunk of eight values twice, [q0..q7, q0..q7, q8..q15, q8..q15, ...],
// written once per block so that the score loop loads each chunk whole. Broadcast from memory in the
// loop itself (vbroadcastf64x4) it cost a vector uop per row and chunk: on Zen 5 a probe of the loop ran
// 6.6 G FMAs/s so and 8.4 G/s with whole loads.
inline void twice(const float* q, int64_t width, float* out) {
  for (int64_t c = 0; c < width; c += 8) {
    const __m256 v = _mm256_loadu_ps(q + c);
    _mm512_storeu_ps(out + 2 * c, _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(v))));
  }
}

// The AVX2 kernel's scores4 with keys (k0, k1) and (k2, k3) paired: the accumulators hold the AVX2 kernel's, and
// the sums take its hadd tree, ((x0+x1)+(x2+x3)) + ((x4+x5)+(x6+x7)), two rows at a time. q: the rows as
// twice() writes them.
template <int Q, typename L>
inline void scores4(const float* const* q, const uint8_t* const* k, int64_t width, float scale, float* const* s, int64_t j) {
  __m512 a[Q][2];
  for (int r = 0; r < Q; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
  for (int64_t c = 0; c < width; c += 8) {
    const __m512 k01 = load8x2<L>(k[0], k[1], c), k23 = load8x2<L>(k[2], k[3], c);
    for (int r = 0; r < Q; ++r) {
      __m512 qv = _mm512_loadu_ps(q[r] + 2 * c);
      asm("" : "+v"(qv));  // a load of its own: folded into the FMAs (GCC does), the loop ran 0.8x (Zen 5)
      a[r][0] = _mm512_fmadd_ps(qv, k01, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(qv, k23, a[r][1]);
    }
  }
  // Per row, hadd_halves(k01, k23) holds in its four 128-bit lanes the pair sums of keys 0 and 2 (values
  // 0-3, then 4-7), then of keys 1 and 3; two rows' of those, added pairwise again, give each key's
  // sums of values 0-3 and 4-7, which the last add joins.
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  for (int r = 0; r < Q; r += 2) {
    const int t = std::min(r + 1, Q - 1);
    const __m512 h = hadd_halves(hadd_halves(a[r][0], a[r][1]), hadd_halves(a[t][0], a[t][1]));
    const __m512 sum = _mm512_add_ps(h, _mm512_shuffle_f32x4(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    // sum's lanes 0-3: row r's keys 0, 2, row t's keys 0, 2; lanes 8-11 the same of keys 1, 3.
    const __m256 both = _mm256_mul_ps(_mm512_castps512_ps256(_mm512_permutexvar_ps(order, sum)), _mm256_set1_ps(scale));
    _mm_storeu_ps(s[r] + j, _mm256_castps256_ps128(both));
    if (t != r) _mm_storeu_ps(s[t] + j, _mm256_extractf128_ps(both, 1));
  }
}
// exp8 (avx2_util.h) on sixteen lanes, each lane's steps the same.
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 er = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i two_k = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(er, _mm512_castsi512_ps(two_k));
}

// Lanes j..j+15 that lie in [lo, hi). All of them, the common case, without the clamps: one layer's
// 8k-key decode on one Zen 5 thread went 0.225 -> 0.209 ms.
inline __mmask16 lanes_in(int64_t j, int64_t lo, int64_t hi) {
  if (j >= lo && j + 16 <= hi) [[likely]] return 0xFFFF;
  const int64_t a = std::clamp<int64_t>(lo - j, 0, 16), b = std::clamp<int64_t>(hi - j, 0, 16);
  return __mmask16(((1u << b) - 1) & ~((1u << a) - 1));
}

// The AVX2 kernel's softmax step sixteen keys at a time: the max is the same whatever the
// order, and the sum adds each half of eight to the same eight-lane sum in key order, so every bit is
// the AVX2 kernel's.
__attribute__((noinline)) inline float softmax_step(const float* s, int64_t g0, int64_t end, int32_t lo, int32_t hi, float m_old, float* p,
                                             float* m_new) {
  __m512 top = _mm512_set1_ps(-INFINITY);
  for (int64_t j = g0; j < hi; j += 16) {
    const __mmask16 in = lanes_in(j, lo, hi);
    top = _mm512_mask_max_ps(top, in, top, _mm512_maskz_loadu_ps(in, s + j));
  }
  const float m = std::max(m_old, _mm512_reduce_max_ps(top));
  const __m512 mv = _mm512_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  const int64_t stored = (end + 7) / 8 * 8;  // p's lanes up to here are written, zeros where not seen
  for (int64_t j = g0; j < end; j += 16) {
    const __mmask16 in = lanes_in(j, lo, hi);
    const __m512 e = _mm512_maskz_mov_ps(in, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(in, s + j), mv)));
    sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
    sum = _mm256_add_ps(sum, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
    _mm512_mask_storeu_ps(p + j, lanes_in(j, j, stored), e);
  }
  *m_new = m;
  return hsum(sum);
}

// The AVX2 kernel's weigh on chunks of 16 values: each lane's arithmetic is the same.
template <int Q, int kChunks, typename L>
inline void weigh16(const float* const* p, const float* alpha, const uint8_t* const* v, int64_t j0, int64_t j1, int64_t c,
                    float* const* acc) {
  __m512 a[Q][kChunks];
  for (int r = 0; r < Q; ++r)
    for (int u = 0; u < kChunks; ++u) a[r][u] = _mm512_mul_ps(_mm512_loadu_ps(acc[r] + c + 16 * u), _mm512_set1_ps(alpha[r]));
  for (int64_t j = j0; j < j1; ++j) {
    __m512 pj[Q];
    for (int r = 0; r < Q; ++r) pj[r] = _mm512_set1_ps(p[r][j]);
    for (int u = 0; u < kChunks; ++u) {
      const __m512 vu = load16<L>(v[j], c + 16 * u);
      for (int r = 0; r < Q; ++r) a[r][u] = _mm512_fmadd_ps(pj[r], vu, a[r][u]);
    }
  }
  for (int r = 0; r < Q; ++r)
    for (int u = 0; u < kChunks; ++u) _mm512_storeu_ps(acc[r] + c + 16 * u, a[r][u]);
}

}  // namespace ftllm::cpu::avx512
