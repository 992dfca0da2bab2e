// Float weights (F32, F16, BF16) with AVX-512 registers. Several activation rows: a tile of six
// activation rows by four weight rows keeps 24 sums in flight, so each weight chunk is widened once for
// six rows and each activation chunk loaded once for four weight rows. One row (decode): one weight row
// after another.
//
// Every output is summed alike: one 16-lane accumulator over 16-element steps, then 8 more elements into
// its low half when K leaves them, the halves added, hsum's tree, the last K % 8 elements one fma at a
// time. So a row's bits never depend on how many rows share its call. (The AVX2 table sums in 8-lane
// steps, so the two tables' bits differ in the last places.)
// GCC 12's AVX-512 headers pass _mm512_undefined_*() as the unused merge source of unmasked conversions,
// which its own flow analysis then reports as uninitialized (a known false positive of those headers).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "avx2_quant.h"
#include "avx2_util.h"
#include "tiling.h"

namespace ftllm::cpu::avx512vnni {

namespace {

template <DType T>
inline __m512 load16(const void* row, int64_t k) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + k);
  } else if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k)));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Eight weights into the low half (the upper half, zero, is never used: the fma that takes it is masked).
template <DType T>
inline __m512 load8_low(const void* row, int64_t k) {
  if constexpr (T == DType::F32) return _mm512_maskz_loadu_ps(0x00ff, static_cast<const float*>(row) + k);
  const __m256i h = _mm256_maskz_loadu_epi16(0x00ff, static_cast<const uint16_t*>(row) + k);
  if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
  else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <DType T>
inline float load1(const void* row, int64_t k) {
  if constexpr (T == DType::F32) return static_cast<const float*>(row)[k];
  else if constexpr (T == DType::F16) return _cvtsh_ss(static_cast<const uint16_t*>(row)[k]);
  else return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(int(static_cast<const uint16_t*>(row)[k]) << 16)));
}

// The horizontal sums of s[0..15] as hsum() adds them (the 512-bit halves, then 128-bit quarters, then
// lanes two apart, then neighbours), four rows of y: y[r * ldy + i] = sum of s[4 * i + r]. Each step adds
// two registers holding one tree level of several sums, so the bits are hsum's; 15 shuffle pairs and adds
// instead of sixteen scalar hsums, which at K = 896 (56 steps of 16) weighed on every tile.
inline void reduce16(const __m512* s, float* y, int64_t ldy) {
  __m512 a[8], b[4], c[2];
  for (int k = 0; k < 8; ++k)  // a(s)[j] = s[j] + s[j + 8]: two sums' eight lanes each
    a[k] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int k = 0; k < 4; ++k)  // b[j] = a[j] + a[j + 4]: quarter q holds sum 4k + q's four lanes
    b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int k = 0; k < 2; ++k) {  // c0 = b0 + b2, c1 = b1 + b3: quarter q holds sums 8k + q and 8k + 4 + q
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(b[2 * k]), _mm512_castps_pd(b[2 * k + 1]));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(b[2 * k]), _mm512_castps_pd(b[2 * k + 1]));
    c[k] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  }
  // d = c0 + c1: quarter q holds sums q, 4 + q, 8 + q, 12 + q.
  const __m512 d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
  _mm_storeu_ps(y, _mm512_castps512_ps128(d));
  _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(d, 1));
  _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(d, 2));
  _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(d, 3));
}

// R activation rows from x (rows K apart) against W weight rows: y[r * ldy + i] for r < R, i < W.
template <DType T, int R, int W>
inline void tile(const float* x, int64_t K, const char* const* rows, size_t ahead, float* y, int64_t ldy, SpreadPrefetch next = {}) {
  const int64_t K16 = K & ~int64_t(15), K8 = K & ~int64_t(7);
  __m512 acc[R][W];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < W; ++i) acc[r][i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K16; k += 16) {
    // The rows `ahead` bytes on, at this place: streamed from memory for the first rows of x. Into L2: asked
    // into L1 they displaced what the tile was about to read (Zen 4, one thread, weights from L3, M = 2 to
    // 8 rows: 16-42 Gweights/s with _MM_HINT_T0, 27-49 with T1).
    if (ahead)
      for (int i = 0; i < W; ++i) _mm_prefetch(rows[i] + ahead + size_t(k) * dtype_size(T), _MM_HINT_T1);
    next.step();
    __m512 wv[W];
    for (int i = 0; i < W; ++i) wv[i] = load16<T>(rows[i], k);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * K + k);
      for (int i = 0; i < W; ++i) acc[r][i] = _mm512_fmadd_ps(xv, wv[i], acc[r][i]);
    }
  }
  if (K8 > K16) {
    __m512 wv[W];
    for (int i = 0; i < W; ++i) wv[i] = load8_low<T>(rows[i], K16);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_maskz_loadu_ps(0x00ff, x + r * K + K16);
      for (int i = 0; i < W; ++i) acc[r][i] = _mm512_mask3_fmadd_ps(xv, wv[i], acc[r][i], __mmask16(0x00ff));
    }
  }
  // The last K % 8 values of output (r, i) onto its sum, one fma at a time (spelled out: no contraction choices).
  auto tail = [&](int r, int i, float s) {
    for (int64_t k = K8; k < K; ++k) s = std::fma(x[r * K + k], load1<T>(rows[i], k), s);
    return s;
  };
  int r0 = 0;  // rows whose sums are written
  if constexpr (R >= 4 && W == 4) {
    // Sixteen sums at once: every step is one level of hsum's tree for four of them side by side.
    __m512 s[16];
    for (int r = 0; r < 4; ++r)
      for (int i = 0; i < 4; ++i) s[4 * i + r] = acc[r][i];
    reduce16(s, y, ldy);
    if (K8 < K)
      for (int r = 0; r < 4; ++r)
        for (int i = 0; i < 4; ++i) y[r * ldy + i] = tail(r, i, y[r * ldy + i]);
    r0 = 4;
  }
  for (int r = r0; r < R; ++r)
    for (int i = 0; i < W; ++i) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, acc[r][i]);
      y[r * ldy + i] = tail(r, i, hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8))));
    }
}

template <DType T, int R>
inline void tile_rows(const float* x, int64_t K, const char* const* rows, int w, size_t ahead, float* y, int64_t ldy, SpreadPrefetch next) {
  switch (w) {
    case 4: return tile<T, R, 4>(x, K, rows, ahead, y, ldy, next);
    case 3: return tile<T, R, 3>(x, K, rows, ahead, y, ldy, next);
    case 2: return tile<T, R, 2>(x, K, rows, ahead, y, ldy, next);
    default: return tile<T, R, 1>(x, K, rows, ahead, y, ldy, next);
  }
}

// Six activation rows by four weight rows: 24 sums, the four weight chunks and an activation chunk fill 29
// of the 32 registers, and each weight chunk's conversion (two uops on the FMA ports for F16 and BF16)
// serves six rows' FMAs rather than four.
constexpr int kTileRows = 6;

template <DType T>
void gemm(const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const size_t bytes = row_bytes(T, K);
  if (M == 1) {  // decode: every weight read once, from memory (the one dependent chain per row, 4 cycles
                 // per 16 values, still outruns one core's share of the memory)
    return for_each_weight_row(n0, n1, bytes, kAheadRows, [&](int64_t n, size_t ahead) {
      const char* row = static_cast<const char*>(w) + size_t(n) * bytes;
      tile<T, 1, 1>(x, K, &row, ahead, y + n, ldy);
    });
  }
  for_each_register_tile<kTileRows, 4>(M, n0, n1, w, bytes, [&](int64_t m, int r, int64_t n, int count, size_t ahead, SpreadPrefetch next) {
    const char* rows[4];
    for (int i = 0; i < count; ++i) rows[i] = static_cast<const char*>(w) + size_t(n + i) * bytes;
    const float* xm = x + m * K;
    float* ym = y + m * ldy + n;
    switch (r) {
      case 6: return tile_rows<T, 6>(xm, K, rows, count, ahead, ym, ldy, next);
      case 5: return tile_rows<T, 5>(xm, K, rows, count, ahead, ym, ldy, next);
      case 4: return tile_rows<T, 4>(xm, K, rows, count, ahead, ym, ldy, next);
      case 3: return tile_rows<T, 3>(xm, K, rows, count, ahead, ym, ldy, next);
      case 2: return tile_rows<T, 2>(xm, K, rows, count, ahead, ym, ldy, next);
      default: return tile_rows<T, 1>(xm, K, rows, count, ahead, ym, ldy, next);
    }
  });
}

// Sixteen e4m3 bytes as floats, each its value times 2^-8: byte b as b << 8, shifted right by one
// arithmetically, keeps its sign at bit 15 (its copy in bit 14 cleared) and lands the rest in float16's
// exponent and mantissa.
inline __m512 fp8_times_2_to_minus_8(const uint8_t* bytes) {
  const __m256i v = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes))), 8);
  return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(v, 1), _mm256_set1_epi16(int16_t(0xBFFF))));
}

// fp8 rows (per 128 values a float32 scale, then 128 e4m3 bytes) against one activation row, widened in
// registers as avx2_kernels.cpp's fp8_gemv widens them (each byte into a float16's fields, times the
// scale and 2^8: dequantize_row's values) and summed as matmul_float sums the widened row, sixteen
// values a step, four weight rows at a time, each block's scale once a row.
template <int W>
void fp8_rows_times_one(const float* x, int64_t K, const uint8_t* rows, size_t bytes, float* y, size_t ahead) {
  constexpr int64_t kBlock = dtype_layout(DType::FP8).block_values;
  __m512 acc[W];
  for (int i = 0; i < W; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const uint8_t* block[W];
    __m512 scale[W];
    fp8_blocks<W>(rows, bytes, b, ahead, block, scale, [](float v) { return _mm512_set1_ps(v); });
    for (int64_t c = 0; c < kBlock; c += 16) {
      const __m512 xv = _mm512_loadu_ps(x + b * kBlock + c);
      for (int i = 0; i < W; ++i) acc[i] = _mm512_fmadd_ps(xv, _mm512_mul_ps(fp8_times_2_to_minus_8(block[i] + 4 + c), scale[i]), acc[i]);
    }
  }
  for (int i = 0; i < W; ++i) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[i]);
    y[i] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
  }
}

// fp8_rows_times_one's sums for R activation rows (ldx apart, R >= 2) against W weight rows: each pair of
// rows summed as that kernel sums one, so the same bits, and each chunk of a weight row widened once for
// the R activation rows. (With R = 1 this loop ran one activation row 5% slower than the kernel above.)
template <int R, int W>
void fp8_rows_times_few(const float* x, int64_t ldx, int64_t K, const uint8_t* rows, size_t bytes, float* y, int64_t ldy, size_t ahead) {
  constexpr int64_t kBlock = dtype_layout(DType::FP8).block_values;
  __m512 acc[R][W];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < W; ++i) acc[r][i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const uint8_t* block[W];
    __m512 scale[W];
    fp8_blocks<W>(rows, bytes, b, ahead, block, scale, [](float v) { return _mm512_set1_ps(v); });
    for (int64_t c = 0; c < kBlock; c += 16) {
      __m512 xv[R];
      for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x + r * ldx + b * kBlock + c);
      for (int i = 0; i < W; ++i) {
        const __m512 wv = _mm512_mul_ps(fp8_times_2_to_minus_8(block[i] + 4 + c), scale[i]);
        for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(xv[r], wv, acc[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < W; ++i) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, acc[r][i]);
      y[r * ldy + i] = hsum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
    }
}

}  // namespace

void fp8_gemv(const float* x, int64_t K, const void* w, int64_t n0, int64_t n1, float* y) {
  const size_t bytes = row_bytes(DType::FP8, K);
  for_each_weight_rows<4>(n0, n1, bytes, kAheadRows, [&]<int W>(int64_t n, size_t ahead) {
    fp8_rows_times_one<W>(x, K, static_cast<const uint8_t*>(w) + size_t(n) * bytes, bytes, y + n, ahead);
  });
}

void fp8_few_rows(const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const size_t bytes = row_bytes(DType::FP8, K);
  // Four activation rows against two weight rows a step (eight accumulators), the two rows in L1 for
  // the next four activation rows.
  for_each_weight_rows<2>(n0, n1, bytes, kAheadRows, [&]<int W>(int64_t n, size_t ahead) {
    const uint8_t* rows = static_cast<const uint8_t*>(w) + size_t(n) * bytes;
    for_each_row_group<4>(M, [&]<int R>(int64_t m) {
      if constexpr (R == 1) fp8_rows_times_one<W>(x + m * K, K, rows, bytes, y + m * ldy + n, m ? 0 : ahead);
      else fp8_rows_times_few<R, W>(x + m * K, K, K, rows, bytes, y + m * ldy + n, ldy, m ? 0 : ahead);
    });
  });
}

void matmul_float(DType wt, const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                  int64_t ldy) {
  switch (wt) {
    case DType::F32: return gemm<DType::F32>(x, M, K, w, n0, n1, y, ldy);
    case DType::F16: return gemm<DType::F16>(x, M, K, w, n0, n1, y, ldy);
    default: return gemm<DType::BF16>(x, M, K, w, n0, n1, y, ldy);
  }
}

}  // namespace ftllm::cpu::avx512vnni
