// AVX2 + FMA + F16C kernels. This file alone is compiled with -mavx2 -mfma -mf16c; it is only
// called after cpuid said the processor has them (see kernel_select.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../quant/block_decode.h"
#include "../quant/quant.h"
#include "avx2_quant.h"
#include "avx2_util.h"
#include "kernels.h"
#include "tiling.h"

namespace ftllm::cpu {

const Kernels& avx2_kernel_table();
const Kernels& avx512vnni_kernel_table();

namespace {

// Eight weights at index k of a row, widened to float.
template <DType T>
inline __m256 load8(const void* row, int64_t k) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + k);
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k)));
  } else {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <DType T>
inline float load1(const void* row, int64_t k) {
  if constexpr (T == DType::F32) return static_cast<const float*>(row)[k];
  else if constexpr (T == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(row)[k]);
  else return bf16_to_f32(static_cast<const uint16_t*>(row)[k]);
}

// Every output is summed in the same order whatever M is (two 8-lane accumulators over 16-element
// steps, then the tail), so a sequence decodes to the same bits alone or batched with others. Rows of
// x come four at a time against one weight row, so the weight chunk is widened once and used four times;
// a single row of x goes against W weight rows at once, their sums independent chains in flight
// together, each 16-element step also prefetching the same place `ahead` bytes on (rows to come).
template <DType T, int R, int W>
inline void dot_rows(const float* x, int64_t K, const char* const* rows, size_t ahead, float* out) {
  const int64_t K16 = K & ~int64_t(15), K8 = K & ~int64_t(7);
  __m256 a[W][R][2];
  for (int w = 0; w < W; ++w)
    for (int r = 0; r < R; ++r) a[w][r][0] = a[w][r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K16; k += 16)
    for (int w = 0; w < W; ++w) {
      if (ahead) _mm_prefetch(rows[w] + ahead + size_t(k) * dtype_size(T), _MM_HINT_T0);
      __m256 w0 = load8<T>(rows[w], k), w1 = load8<T>(rows[w], k + 8);
      for (int r = 0; r < R; ++r) {
        a[w][r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * K + k), w0, a[w][r][0]);
        a[w][r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * K + k + 8), w1, a[w][r][1]);
      }
    }
  for (int w = 0; w < W; ++w) {
    if (K8 > K16) {
      __m256 w0 = load8<T>(rows[w], K16);
      for (int r = 0; r < R; ++r) a[w][r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * K + K16), w0, a[w][r][0]);
    }
    for (int r = 0; r < R; ++r) {
      float s = hsum(_mm256_add_ps(a[w][r][0], a[w][r][1]));
      for (int64_t k = K8; k < K; ++k) s = std::fma(x[r * K + k], load1<T>(rows[w], k), s);  // spelled out: no contraction choices
      out[w * R + r] = s;
    }
  }
}

template <DType T>
void matmul_t(const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const size_t bytes = row_bytes(T, K);
  // R rows of x from m against W weight rows from n.
  auto dots = [&]<int R, int W>(int64_t m, int64_t n) {
    const char* ws[W];
    for (int i = 0; i < W; ++i) ws[i] = static_cast<const char*>(w) + size_t(n + i) * bytes;
    const size_t ahead = n + 2 * W + 2 <= n1 ? (W + 2) * bytes : 0;  // only rows this thread will read
    float out[R * W];
    dot_rows<T, R, W>(x + m * K, K, ws, ahead, out);
    for (int i = 0; i < W; ++i)
      for (int r = 0; r < R; ++r) y[(m + r) * ldy + n + i] = out[i * R + r];
  };
  for_each_tile(
      M, n0, n1, size_t(K) * sizeof(float), bytes, [&](int64_t m, int64_t n) { dots.template operator()<4, 1>(m, n); },
      [&](int64_t m, int64_t n) { dots.template operator()<1, 4>(m, n); },
      [&](int64_t m, int64_t n) { dots.template operator()<1, 1>(m, n); });
}

// Block types without an integer kernel: each weight row is widened to float32 once (in cache) and
// dotted with every activation row; the model is never widened as a whole.
void matmul_widened(DType wt, const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                    int64_t ldy) {
  thread_local std::vector<float> row;
  row.resize(size_t(K));
  const size_t bytes = row_bytes(wt, K);
  for (int64_t n = n0; n < n1; ++n) {
    quant::dequantize_row(wt, static_cast<const char*>(w) + size_t(n) * bytes, row.data(), K);
    matmul_t<DType::F32>(x, M, K, row.data(), 0, 1, y + n, ldy);
  }
}

template <bool Vnni>
void matmul(DType wt, const float* x, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1,
            float* y, int64_t ldy) {
  switch (wt) {
    case DType::F32: return matmul_t<DType::F32>(x, M, K, w, n0, n1, y, ldy);
    case DType::F16: return matmul_t<DType::F16>(x, M, K, w, n0, n1, y, ldy);
    case DType::BF16: return matmul_t<DType::BF16>(x, M, K, w, n0, n1, y, ldy);
    default:
      if (!avx2::uses_q8(wt)) return matmul_widened(wt, x, M, K, w, n0, n1, y, ldy);
      if constexpr (Vnni) return avx512vnni::matmul_q8(wt, xq, M, K, w, n0, n1, y, ldy);
      else return avx2::matmul_q8(wt, xq, M, K, w, n0, n1, y, ldy);
  }
}

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  float ss = hsum(acc);
  for (; i < n; ++i) ss += x[i] * x[i];
  float scale = 1.0f / std::sqrt(ss / float(n) + eps);
  __m256 sv = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv), _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) out[i] = x[i] * scale * w[i];
}

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

// f over n floats eight at a time; the last few go through the same eight-lane f (padded), so an
// element's value does not depend on where a call's tail falls.
template <typename F>
inline void map8(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) f(i, 8);
  if (i < n) f(i, int(n - i));
}

inline __m256 load_part(const float* p, int count) {
  if (count == 8) return _mm256_loadu_ps(p);
  alignas(32) float v[8] = {};
  std::copy(p, p + count, v);
  return _mm256_load_ps(v);
}

// v in the first count lanes, fill in the rest.
inline __m256 first_lanes(__m256 v, int count, __m256 fill) {
  const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_blendv_ps(fill, v, _mm256_castsi256_ps(below));
}

inline void store_part(float* p, __m256 v, int count) {
  if (count == 8) return _mm256_storeu_ps(p, v);
  alignas(32) float out[8];
  _mm256_store_ps(out, v);
  std::copy(out, out + count, p);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  map8(n, [&](int64_t i, int count) {
    const __m256 g = load_part(gate + i, count);
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    store_part(out + i, _mm256_mul_ps(silu, load_part(up + i, count)), count);
  });
}

void softmax(float* x, int64_t n) {
  __m256 mx = _mm256_set1_ps(-INFINITY);
  map8(n, [&](int64_t i, int count) {
    mx = _mm256_max_ps(mx, first_lanes(load_part(x + i, count), count, _mm256_set1_ps(-INFINITY)));
  });
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const __m256 top = _mm256_set1_ps(_mm_cvtss_f32(m4));
  __m256 sum = _mm256_setzero_ps();
  map8(n, [&](int64_t i, int count) {
    __m256 e = exp8(_mm256_sub_ps(load_part(x + i, count), top));
    if (count < 8) e = first_lanes(e, count, _mm256_setzero_ps());
    sum = _mm256_add_ps(sum, e);
    store_part(x + i, e, count);
  });
  const __m256 inv = _mm256_set1_ps(1.0f / hsum(sum));
  map8(n, [&](int64_t i, int count) { store_part(x + i, _mm256_mul_ps(load_part(x + i, count), inv), count); });
}

template <DType T>
void to_f32_t(const void* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8<T>(src, i));
  for (; i < n; ++i) dst[i] = load1<T>(src, i);
}

void to_f32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: return to_f32_t<DType::F32>(src, dst, n);
    case DType::F16: return to_f32_t<DType::F16>(src, dst, n);
    case DType::BF16: return to_f32_t<DType::BF16>(src, dst, n);
    default: return quant::dequantize_row(t, src, dst, n);
  }
}

}  // namespace

// Eight cached values from value c of a head's row (c a multiple of 8), as floats: the stored type read
// directly. `at` reads one (the rows' tails).
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

// Q queries (1 or 2) against keys j..j+3, into s[Q][4]: each chunk of a query is loaded once for the
// four keys, and a pair shares each key chunk it loads. Each key's eight lanes are summed in hsum's order
// (halves, then lanes i and i + 2, then the pair) - the same bits whatever its neighbours; a short last
// group repeats its last key and the caller drops the extra results.
template <int Q, typename L>
inline void scores_block(const float* q, const uint8_t* const* keys, kvcache::KvDtype t, int64_t j, int64_t n, int64_t d,
                         float (*s)[4]) {
  const int64_t d8 = d & ~int64_t(7);
  const uint8_t* k[4];
  for (int64_t i = 0; i < 4; ++i) k[i] = keys[std::min(j + i, n - 1)];
  __m256 a[Q][4];
  for (int r = 0; r < Q; ++r)
    for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < d8; c += 8) {
    const __m256 k0 = L::load8(k[0], c), k1 = L::load8(k[1], c), k2 = L::load8(k[2], c), k3 = L::load8(k[3], c);
    for (int r = 0; r < Q; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * d + c);
      a[r][0] = _mm256_fmadd_ps(qv, k0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(qv, k1, a[r][1]);
      a[r][2] = _mm256_fmadd_ps(qv, k2, a[r][2]);
      a[r][3] = _mm256_fmadd_ps(qv, k3, a[r][3]);
    }
  }
  auto fold = [](__m256 v) { return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); };
  for (int r = 0; r < Q; ++r) {
    __m128 v0 = fold(a[r][0]), v1 = fold(a[r][1]), v2 = fold(a[r][2]), v3 = fold(a[r][3]);
    _MM_TRANSPOSE4_PS(v0, v1, v2, v3);
    _mm_storeu_ps(s[r], _mm_add_ps(_mm_add_ps(v0, v2), _mm_add_ps(v1, v3)));
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t x = d8; x < d; ++x) s[r][i] = std::fma(q[r * d + x], kvcache::kv_value(t, k[i], x), s[r][i]);
  }
}

template <typename L>
void scores_of(const float* q, int64_t nq, const uint8_t* const* keys, kvcache::KvDtype t, int64_t n, int64_t d, float scale,
               float* out) {
  for (int64_t r = 0; r < nq; r += 2) {
    const bool pair = r + 1 < nq;
    for (int64_t j = 0; j < n; j += 4) {
      float s[2][4];
      if (pair) scores_block<2, L>(q + r * d, keys, t, j, n, d, s);
      else scores_block<1, L>(q + r * d, keys, t, j, n, d, s);
      for (int p = 0; p <= int(pair); ++p)
        for (int64_t i = 0; i < 4 && j + i < n; ++i) out[(r + p) * n + j + i] = s[p][i] * scale;
    }
  }
}

// Q queries' outputs over `chunks` 8-float chunks from column c: every element summed over j in order,
// so a query's result does not depend on the tile or on its partner. A pair shares each value chunk.
template <int Q, int kChunks, typename L>
inline void weighted_block(const float* w, const uint8_t* const* values, int64_t n, int64_t d, int64_t c, int64_t chunks,
                           float* out) {
  __m256 acc[Q][kChunks];
  for (int r = 0; r < Q; ++r)
    for (int u = 0; u < kChunks; ++u) acc[r][u] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m256 wj[Q];
    for (int r = 0; r < Q; ++r) wj[r] = _mm256_set1_ps(w[r * n + j]);
    for (int64_t u = 0; u < chunks; ++u) {
      const __m256 vu = L::load8(values[j], c + 8 * u);
      for (int r = 0; r < Q; ++r) acc[r][u] = _mm256_fmadd_ps(wj[r], vu, acc[r][u]);
    }
  }
  for (int r = 0; r < Q; ++r)
    for (int64_t u = 0; u < chunks; ++u) _mm256_storeu_ps(out + r * d + c + 8 * u, acc[r][u]);
}

template <typename L>
void weighted_sum_of(const float* w, int64_t nq, const uint8_t* const* values, kvcache::KvDtype t, int64_t n, int64_t d,
                     float* out) {
  const int64_t d8 = d & ~int64_t(7);
  for (int64_t r = 0; r < nq; r += 2) {
    const bool pair = r + 1 < nq;
    // A pair holds 2 x 4 accumulators, a single query 8 (16 registers either way with the loads).
    for (int64_t c = 0; c < d8; c += pair ? 32 : 64) {
      const int64_t chunks = std::min<int64_t>(pair ? 4 : 8, (d8 - c) / 8);
      if (pair) weighted_block<2, 4, L>(w + r * n, values, n, d, c, chunks, out + r * d);
      else weighted_block<1, 8, L>(w + r * n, values, n, d, c, chunks, out + r * d);
    }
    for (int64_t p = r; p < std::min(nq, r + 2); ++p)
      for (int64_t x = d8; x < d; ++x) {
        float s = 0;
        for (int64_t j = 0; j < n; ++j) s = std::fma(w[p * n + j], kvcache::kv_value(t, values[j], x), s);
        out[p * d + x] = s;
      }
  }
}

void scores(const float* q, int64_t nq, const uint8_t* const* keys, kvcache::KvDtype t, int64_t n, int64_t d, float scale, float* out) {
  switch (t) {
    case kvcache::KvDtype::F32: return scores_of<KvF32>(q, nq, keys, t, n, d, scale, out);
    case kvcache::KvDtype::F16: return scores_of<KvF16>(q, nq, keys, t, n, d, scale, out);
    case kvcache::KvDtype::BF16: return scores_of<KvBF16>(q, nq, keys, t, n, d, scale, out);
    case kvcache::KvDtype::Q8_0: return scores_of<KvQ8_0>(q, nq, keys, t, n, d, scale, out);
    case kvcache::KvDtype::FP8: return scores_of<KvFP8>(q, nq, keys, t, n, d, scale, out);
  }
}

void weighted_sum(const float* w, int64_t nq, const uint8_t* const* values, kvcache::KvDtype t, int64_t n, int64_t d, float* out) {
  switch (t) {
    case kvcache::KvDtype::F32: return weighted_sum_of<KvF32>(w, nq, values, t, n, d, out);
    case kvcache::KvDtype::F16: return weighted_sum_of<KvF16>(w, nq, values, t, n, d, out);
    case kvcache::KvDtype::BF16: return weighted_sum_of<KvBF16>(w, nq, values, t, n, d, out);
    case kvcache::KvDtype::Q8_0: return weighted_sum_of<KvQ8_0>(w, nq, values, t, n, d, out);
    case kvcache::KvDtype::FP8: return weighted_sum_of<KvFP8>(w, nq, values, t, n, d, out);
  }
}

// The AVX-512 VNNI table differs only in the integer dot products; the float kernels stay AVX2.
const Kernels& avx512vnni_kernel_table() {
  static const Kernels k{"avx512vnni", matmul<true>, avx2::uses_q8, avx2::quantize_q8, avx2::quantize_q8_256, dot, axpy, rmsnorm, silu_mul, softmax, to_f32, scores, weighted_sum};
  return k;
}

const Kernels& avx2_kernel_table() {
  static const Kernels k{"avx2", matmul<false>, avx2::uses_q8, avx2::quantize_q8, avx2::quantize_q8_256, dot, axpy, rmsnorm, silu_mul, softmax, to_f32, scores, weighted_sum};
  return k;
}

}  // namespace ftllm::cpu
