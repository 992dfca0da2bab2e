// AVX2 + FMA + F16C kernels. This file alone is compiled with -mavx2 -mfma -mf16c; it is only
// called after cpuid said the processor has them (see kernel_select.cpp).
#include <immintrin.h>

#include <algorithm>
#include <bit>
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

// One weight, widened in this file's own code: the shared inline f16_to_f32 and bf16_to_f32, if GCC
// emitted them out of line here, would be weak symbols with VEX code that any caller may bind to.
template <DType T>
inline float load1(const void* row, int64_t k) {
  if constexpr (T == DType::F32) return static_cast<const float*>(row)[k];
  else if constexpr (T == DType::F16) return _cvtsh_ss(static_cast<const uint16_t*>(row)[k]);
  else return std::bit_cast<float>(uint32_t(static_cast<const uint16_t*>(row)[k]) << 16);
}

// Float weights: a register tile of R activation rows by W weight rows. Every output is summed in the same
// order whatever M is (one 8-lane accumulator over 8-element steps, hsum, the last K % 8 one fma at a
// time), so a sequence decodes to the same bits alone or batched with others. Each weight chunk is
// widened once for all R activation rows. (The AVX-512 table sums in 16-lane steps, its own order: a
// table's bits are its own.)
template <DType T, int R, int W>
inline void tile(const float* x, int64_t K, const char* const* rows, size_t ahead, float* y, int64_t ldy, SpreadPrefetch next = {}) {
  const int64_t K16 = K & ~int64_t(15), K8 = K & ~int64_t(7);
  __m256 a[R][W];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < W; ++i) a[r][i] = _mm256_setzero_ps();
  auto step = [&](int64_t k) {
    __m256 wv[W];
    for (int i = 0; i < W; ++i) wv[i] = load8<T>(rows[i], k);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * K + k);
      for (int i = 0; i < W; ++i) a[r][i] = _mm256_fmadd_ps(xv, wv[i], a[r][i]);
    }
  };
  for (int64_t k = 0; k < K16; k += 16) {  // two steps per prefetch: one line of F32 weights, half of F16's
    if (ahead)  // the rows the next tile reads, at this place, into L2: streamed from memory for the first rows of x
      for (int i = 0; i < W; ++i) _mm_prefetch(rows[i] + ahead + size_t(k) * dtype_size(T), _MM_HINT_T1);
    next.step();
    step(k), step(k + 8);
  }
  if (K8 > K16) step(K16);
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < W; ++i) {
      float s = hsum(a[r][i]);
      for (int64_t k = K8; k < K; ++k) s = std::fma(x[r * K + k], load1<T>(rows[i], k), s);  // spelled out: no contraction choices
      y[r * ldy + i] = s;
    }
}

// Several activation rows through the register tiles, weight rows in tiles that stay in L2. Four
// activation rows by three weight rows: twelve sums and the three widened weight chunks in registers, each
// activation chunk read by its fmas from L1 (loaded into a register first, GCC spilled two sums a step).
// Zen 1 (EPYC 7001), 2 threads, 0.5B F16: 512-token prefill 48 -> 64 tokens/s, 16 sequences' decode 36 ->
// 48 against the two-sums-an-output two-by-three tile this replaced; three by four ran 58 and 42.
constexpr int kRows = 4, kCols = 3;

template <DType T, int R, int W = kCols>
inline void tile_of(int r, int count, const float* xm, int64_t K, const char* const* rows, size_t ahead, float* ym, int64_t ldy,
                    SpreadPrefetch next) {
  if (r < R) {
    if constexpr (R > 1) return tile_of<T, R - 1, W>(r, count, xm, K, rows, ahead, ym, ldy, next);
  } else if (count < W) {
    if constexpr (W > 1) return tile_of<T, R, W - 1>(r, count, xm, K, rows, ahead, ym, ldy, next);
  } else {
    return tile<T, R, W>(xm, K, rows, ahead, ym, ldy, next);
  }
}

template <DType T>
void tiles(const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const size_t bytes = row_bytes(T, K);
  for_each_register_tile<kRows, kCols>(M, n0, n1, w, bytes, [&](int64_t m, int r, int64_t n, int count, size_t ahead, SpreadPrefetch next) {
    const char* rows[kCols];
    for (int i = 0; i < count; ++i) rows[i] = static_cast<const char*>(w) + size_t(n + i) * bytes;
    tile_of<T, kRows>(r, count, x + m * K, K, rows, ahead, y + m * ldy + n, ldy, next);
  });
}

template <DType T>
void gemm(const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  // Decode: every weight read once, from memory; two rows side by side, so that two chains of fma are in
  // flight (Zen 1, 2 threads, 0.5B F16: one row at a time 15.3 tokens/s, two 20.3, four 19-20).
  if (M == 1) {
    const size_t bytes = row_bytes(T, K);
    return for_each_weight_rows<2>(n0, n1, bytes, kAheadRows, [&]<int W>(int64_t n, size_t ahead) {
      const char* rows[W];
      for (int i = 0; i < W; ++i) rows[i] = static_cast<const char*>(w) + size_t(n + i) * bytes;
      tile<T, 1, W>(x, K, rows, ahead, y + n, ldy);
    });
  }
  // Activation rows in blocks (tiling.h). Zen 3, one thread, F16, 512 rows: K 4864 (10 MB) 28 Gweights/s
  // in one block, 35 in blocks; K 18944 17.3 -> 30.
  for_each_activation_block(M, K * int64_t(sizeof(float)), kRows, [&](int64_t m, int64_t rows) {
    tiles<T>(x + m * K, rows, K, w, n0, n1, y + m * ldy, ldy);
  });
}

// Float weights, all summed alike. With AVX-512 every batch size goes to avx512_float_gemm.cpp.
template <DType T, bool Vnni>
void matmul_float(const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if constexpr (Vnni) return avx512vnni::matmul_float(T, x, M, K, w, n0, n1, y, ldy);
  gemm<T>(x, M, K, w, n0, n1, y, ldy);
}

// fp8 rows: per 128 values a float32 scale, then 128 e4m3 bytes. Each byte moved into a float16's fields
// is its value times 2^-8 (KvFP8 in avx2_kv.h), and the scale times 2^8 takes that back, so every value is
// e4m3 * scale rounded once, dequantize_row's bits (its scalar table ran 4.5 Gweights/s a thread at one
// row). The NaN codes, which the quantizer never writes, read as 480 * scale.
constexpr int64_t kFp8Block = dtype_layout(DType::FP8).block_values;
constexpr size_t kFp8BlockBytes = dtype_layout(DType::FP8).block_bytes;
inline __m256 fp8_scale(const uint8_t* block) { return _mm256_set1_ps(quant::decode::f32(block) * 256.0f); }
// Sixteen e4m3 bytes as float16 bits, then float32: the values times 2^-8, w0 the first eight. A byte b
// interleaved above a zero byte is b << 8; shifted right by one, arithmetically, its sign stays at bit 15
// (and copies into 14, cleared after) while the rest lands at bits 7-13, f16's exponent and mantissa.
inline void fp8_times_2_to_minus_8(const uint8_t* bytes, __m256& w0, __m256& w1) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)), keep = _mm_set1_epi16(int16_t(0xBFFF));
  const __m128i lo = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(_mm_setzero_si128(), v), 1), keep);
  const __m128i hi = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(_mm_setzero_si128(), v), 1), keep);
  w0 = _mm256_cvtph_ps(lo), w1 = _mm256_cvtph_ps(hi);
}

void widen_fp8_row(const uint8_t* row, float* out, int64_t k) {
  for (int64_t b = 0; b < k / kFp8Block; ++b, row += kFp8BlockBytes, out += kFp8Block) {
    const __m256 scale = fp8_scale(row);
    for (int c = 0; c < kFp8Block; c += 16) {
      __m256 w0, w1;
      fp8_times_2_to_minus_8(row + 4 + c, w0, w1);
      _mm256_storeu_ps(out + c, _mm256_mul_ps(w0, scale)), _mm256_storeu_ps(out + c + 8, _mm256_mul_ps(w1, scale));
    }
  }
}

// fp8 weight rows [n0, n1) against one activation row, widened in registers and summed as tile<F32>
// sums the widened rows (one accumulator over eights of values, hsum; a row is whole blocks, so no
// tail): the same bits as widening them first. W rows at a time, so that W chains of fma are in flight,
// each block's scale read once a row.
template <int W>
void fp8_rows_times_one(const float* x, int64_t K, const uint8_t* rows, size_t bytes, float* y, size_t ahead) {
  __m256 a[W];
  for (int i = 0; i < W; ++i) a[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < K / kFp8Block; ++b) {
    const uint8_t* block[W];
    __m256 scale[W];
    fp8_blocks<W>(rows, bytes, b, ahead, block, scale, [](float v) { return _mm256_set1_ps(v); });
    for (int c = 0; c < kFp8Block; c += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + b * kFp8Block + c), x1 = _mm256_loadu_ps(x + b * kFp8Block + c + 8);
      for (int i = 0; i < W; ++i) {
        __m256 w0, w1;
        fp8_times_2_to_minus_8(block[i] + 4 + c, w0, w1);
        a[i] = _mm256_fmadd_ps(x0, _mm256_mul_ps(w0, scale[i]), a[i]);
        a[i] = _mm256_fmadd_ps(x1, _mm256_mul_ps(w1, scale[i]), a[i]);
      }
    }
  }
  for (int i = 0; i < W; ++i) y[i] = hsum(a[i]);
}

// fp8_rows_times_one's sums for R activation rows (ldx apart, R >= 2) against W weight rows: each pair of
// rows summed as that kernel sums one, so the same bits, and each chunk of a weight row widened once for
// the R activation rows. (With R = 1 this same loop ran one activation row 7% slower than the kernel
// above, on Zen 5; hence two.)
template <int R, int W>
void fp8_rows_times_few(const float* x, int64_t ldx, int64_t K, const uint8_t* rows, size_t bytes, float* y, int64_t ldy, size_t ahead) {
  __m256 a[R][W];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < W; ++i) a[r][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < K / kFp8Block; ++b) {
    const uint8_t* block[W];
    __m256 scale[W];
    fp8_blocks<W>(rows, bytes, b, ahead, block, scale, [](float v) { return _mm256_set1_ps(v); });
    for (int c = 0; c < kFp8Block; c += 16) {
      for (int i = 0; i < W; ++i) {
        __m256 w0, w1;
        fp8_times_2_to_minus_8(block[i] + 4 + c, w0, w1);
        w0 = _mm256_mul_ps(w0, scale[i]);
        for (int r = 0; r < R; ++r) a[r][i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + b * kFp8Block + c), w0, a[r][i]);
        w1 = _mm256_mul_ps(w1, scale[i]);
        for (int r = 0; r < R; ++r) a[r][i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + b * kFp8Block + c + 8), w1, a[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < W; ++i) y[r * ldy + i] = hsum(a[r][i]);
}

void fp8_gemv(const float* x, int64_t K, const void* w, int64_t n0, int64_t n1, float* y) {
  const size_t bytes = row_bytes(DType::FP8, K);
  for_each_weight_rows<4>(n0, n1, bytes, kAheadRows, [&]<int W>(int64_t n, size_t ahead) {
    fp8_rows_times_one<W>(x, K, static_cast<const uint8_t*>(w) + size_t(n) * bytes, bytes, y + n, ahead);
  });
}

// A small batch of activation rows (2 to kFp8FewRows) against fp8 weight rows: two weight rows at a time
// for two activation rows, else one weight row at a time, widened once for each four activation rows
// (its bytes in L1 for the next four).
void fp8_few_rows(const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const size_t bytes = row_bytes(DType::FP8, K);
  auto weight_rows = [&]<int W>(int64_t n, size_t ahead) {
    const uint8_t* rows = static_cast<const uint8_t*>(w) + size_t(n) * bytes;
    for_each_row_group<4>(M, [&]<int R>(int64_t m) {
      if constexpr (R == 1) fp8_rows_times_one<W>(x + m * K, K, rows, bytes, y + m * ldy + n, m ? 0 : ahead);
      else fp8_rows_times_few<R, W>(x + m * K, K, K, rows, bytes, y + m * ldy + n, ldy, m ? 0 : ahead);
    });
  };
  if (M == 2) return for_each_weight_rows<2>(n0, n1, bytes, kAheadRows, weight_rows);
  for_each_weight_rows<1>(n0, n1, bytes, kAheadRows, weight_rows);
}

// Block types without an integer kernel: weight rows are widened to float32 a few at a time (in cache)
// and go through the float kernels; the model is never widened as a whole. fp8 rows meeting one activation
// row are widened in registers instead (fp8_gemv, and its AVX-512 build: the same bits).
template <bool Vnni>
void matmul_widened(DType wt, const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                    int64_t ldy) {
  if (wt == DType::FP8 && M == 1) {
    if constexpr (Vnni) return avx512vnni::fp8_gemv(x, K, w, n0, n1, y);
    else return fp8_gemv(x, K, w, n0, n1, y);
  }
  // Up to this many activation rows the fp8 rows are widened in registers, each chunk once for four rows
  // (fp8_few_rows); more go through the float GEMM on rows widened into a buffer, which then measured
  // faster (one thread, K = 2048, Zen 5).
  constexpr int64_t kFp8FewRows = Vnni ? 8 : 16;
  if (wt == DType::FP8 && M <= kFp8FewRows) {
    if constexpr (Vnni) return avx512vnni::fp8_few_rows(x, M, K, w, n0, n1, y, ldy);
    else return fp8_few_rows(x, M, K, w, n0, n1, y, ldy);
  }
  const size_t bytes = row_bytes(wt, K);
  const int64_t group = M > 1 ? std::max<int64_t>(4, (64 << 10) / (K * int64_t(sizeof(float)))) : 1;
  thread_local std::vector<float> rows;
  rows.resize(size_t(group * K));
  for (int64_t n = n0; n < n1; n += group) {
    const int64_t count = std::min(group, n1 - n);
    for (int64_t i = 0; i < count; ++i) {
      const auto* row = static_cast<const uint8_t*>(w) + size_t(n + i) * bytes;
      if (wt == DType::FP8) widen_fp8_row(row, rows.data() + i * K, K);
      else quant::dequantize_row(wt, row, rows.data() + i * K, K);
    }
    matmul_float<DType::F32, Vnni>(x, M, K, rows.data(), 0, count, y + n, ldy);
  }
}

template <bool Vnni>
void matmul(DType wt, const float* x, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1,
            float* y, int64_t ldy) {
  switch (wt) {
    case DType::F32: return matmul_float<DType::F32, Vnni>(x, M, K, w, n0, n1, y, ldy);
    case DType::F16: return matmul_float<DType::F16, Vnni>(x, M, K, w, n0, n1, y, ldy);
    case DType::BF16: return matmul_float<DType::BF16, Vnni>(x, M, K, w, n0, n1, y, ldy);
    default:
      if (!avx2::uses_q8(wt)) return matmul_widened<Vnni>(wt, x, M, K, w, n0, n1, y, ldy);
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

void rescale_add(float* acc, float x, const float* b, float y, int64_t n) {
  const __m256 xv = _mm256_set1_ps(x), yv = _mm256_set1_ps(y);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(b + i), yv, _mm256_mul_ps(_mm256_loadu_ps(acc + i), xv)));
  for (; i < n; ++i) acc[i] = std::fma(b[i], y, acc[i] * x);
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

// 0.5 x (1 + tanh(y)) computed as x / (1 + exp(-2y)), the same function without 1 + tanh(y)'s
// cancellation for negative x.
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  map8(n, [&](int64_t i, int count) {
    const __m256 g = load_part(gate + i, count);
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    const __m256 y = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), cube, g));
    const __m256 gelu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(y)));
    store_part(out + i, _mm256_mul_ps(gelu, load_part(up + i, count)), count);
  });
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

// The AVX-512 VNNI table differs in the matmuls of several rows (integer dots on VNNI, float tiles on
// AVX-512 registers) and attention (the AVX2 code in wider row groups, the same bits); everything else, the
// one-row matmul included, is the AVX2 code.
const Kernels& avx512vnni_kernel_table() {
  static const Kernels k{"avx512vnni", matmul<true>, avx2::uses_q8, avx2::quantize_q8, avx2::quantize_q8_256, dot, axpy, rmsnorm, silu_mul, gelu_tanh_mul, to_f32, avx512vnni::attend_block, rescale_add};
  return k;
}

const Kernels& avx2_kernel_table() {
  static const Kernels k{"avx2", matmul<false>, avx2::uses_q8, avx2::quantize_q8, avx2::quantize_q8_256, dot, axpy, rmsnorm, silu_mul, gelu_tanh_mul, to_f32, avx2::attend_block, rescale_add};
  return k;
}

}  // namespace ftllm::cpu
