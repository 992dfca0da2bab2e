// Q4_0, Q8_0, int8 and Q4_K weights against int8 activations, with every output summed one way whatever
// the batch: each block's integer dot exactly (a Q4_K super-block's, its sub-blocks times their scales),
// then one float step per block,
//     acc = fma(float(dot_b), weight_scale_b * activation_scale_b, acc)
// in block order (Q4_K adds its minimums' step after each; int8 multiplies by its row scale at the end).
// The integers are exact, so how a kernel finds them is free; that lets each batch size take its own shape:
// - up to five activation rows (decode, small batches): four weight rows' block dots side by side,
//   reduced to four lanes, each weight block unpacked once for all the rows;
// - more (prefill, batched decode): a GEMM whose vector lanes are eight activation rows. The
//   activations are transposed once per call so that 4-byte chunk c of eight rows' blocks sits in one
//   register; a weight block is unpacked once per tile and each of its eight 4-byte chunks is broadcast
//   against every group of activation rows (llama.cpp's repacked kernels get the same effect by
//   interleaving the weights at load; here the weights stay as the file holds them).
// Compiled twice like avx2_quant_kernels.cpp: AVX2 (vpmaddubsw + vpmaddwd) and AVX-512 VNNI (vpdpbusd,
// and 32 vector registers for a bigger tile).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../quant/ggml_blocks.h"
#include "avx2_quant.h"

#ifdef FTLLM_VNNI
#define FTLLM_QUANT_NS avx512vnni
#else
#define FTLLM_QUANT_NS avx2
#endif

namespace ftllm::cpu::FTLLM_QUANT_NS {

namespace {

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i broadcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// acc + sum of unsigned bytes u times signed bytes s, per int32 lane (four byte pairs each). Without
// VNNI the pairs go through int16: exact while 2 * max(u) * max|s| <= 32767.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#ifdef FTLLM_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
// Signed by signed (|a| <= 128, |b| <= 127): a's sign moved onto b, |a| as the unsigned operand.
inline __m256i dot_s8s8(__m256i acc, __m256i a, __m256i b) {
  return dot_u8s8(acc, _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// What the kernels need of a weight type: a block's float scale and its 32 values as bytes.
// Q4_0 holds q + 8 in nibbles, so its bytes are unsigned and the dot takes 8 * sum(x) off.
template <DType T>
struct Weights;

template <>
struct Weights<DType::Q4_0> {
  static constexpr int kOffset = 8;
  static constexpr size_t kHeader = 0;
  static const quant::BlockQ4_0& block(const uint8_t* row, int64_t b) { return reinterpret_cast<const quant::BlockQ4_0*>(row)[b]; }
  static float scale(const uint8_t* row, int64_t b) { return h2f(block(row, b).d); }
  // Values 0-15 then 16-31 as unsigned bytes (low nibbles, then high ones).
  static __m256i bytes(const uint8_t* row, int64_t b) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block(row, b).qs));
    const __m128i low = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low), _mm_and_si128(v, low));
  }
};

template <>
struct Weights<DType::Q8_0> {
  static constexpr int kOffset = 0;  // signed bytes
  static constexpr size_t kHeader = 0;
  static const quant::BlockQ8_0& block(const uint8_t* row, int64_t b) { return reinterpret_cast<const quant::BlockQ8_0*>(row)[b]; }
  static float scale(const uint8_t* row, int64_t b) { return h2f(block(row, b).d); }
  static __m256i bytes(const uint8_t* row, int64_t b) { return load32(chunks(row, b)); }
  static const uint8_t* chunks(const uint8_t* row, int64_t b) { return reinterpret_cast<const uint8_t*>(block(row, b).qs); }
};

template <>
struct Weights<DType::I8> {  // [float32 row scale] then K signed bytes: the block scale is 1
  static constexpr int kOffset = 0;
  static constexpr size_t kHeader = 4;
  static float scale(const uint8_t*, int64_t) { return 1.0f; }
  static __m256i bytes(const uint8_t* row, int64_t b) { return load32(chunks(row, b)); }
  static const uint8_t* chunks(const uint8_t* row, int64_t b) { return row + kHeader + 32 * b; }
};

// Q4_K's super-block: 256 values in eight sub-blocks of 32, each with a 6-bit scale and minimum; the
// activations come with one scale per 256 (quantize_q8_256). Its step per super-block is
//     acc = fma(float(sum_j sc_j * (u_j . x_j)), d * xd, acc); acc = fma(-dmin * xd, float(sum_j mn_j * sum(x_j)), acc)
template <>
struct Weights<DType::Q4_K> {
  static constexpr int kOffset = 0;
  static const quant::BlockQ4_K& block(const uint8_t* row, int64_t sb) { return reinterpret_cast<const quant::BlockQ4_K*>(row)[sb]; }
  // Sub-blocks 2p and 2p + 1 are the low and high nibbles of bytes 32p..32p+31.
  static void unpack(const quant::BlockQ4_K& blk, uint8_t (*out)[32]) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      const __m256i v = load32(blk.qs + 32 * p);
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[2 * p]), _mm256_and_si256(v, low));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[2 * p + 1]), _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
    }
  }
};

template <DType T>
inline __m256i block_dot(__m256i acc, __m256i w, __m256i x) {
  if constexpr (Weights<T>::kOffset != 0) return dot_u8s8(acc, w, x);
  else return dot_s8s8(acc, w, x);
}

// A super-block type: its unit is eight blocks.
template <DType T>
constexpr bool kSuper = T == DType::Q4_K;

template <DType T>
inline float finish(const uint8_t* row, float acc) {
  if constexpr (T == DType::I8) {
    float row_scale;
    std::memcpy(&row_scale, row, 4);
    return row_scale * acc;
  } else {
    return acc;
  }
}

// -offset * (the activation lane sums) per block: starting each block's dot there makes the lanes sum
// to (q - offset) . x exactly.
template <DType T>
__m256i offset_lanes(const Q8Block& x) {
  return _mm256_sub_epi32(_mm256_setzero_si256(),
                          dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(Weights<T>::kOffset), load32(x.q)));
}

// ---- One activation row --------------------------------------------------------------------------

inline __m128i sum_lanes4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
  const __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
  const __m256i abcd = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
  return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));  // a, b, c, d
}

inline int32_t sum_lanes(__m256i a) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Weight rows [n0, n1) against R activation rows x (nb blocks each, rows R apart), into y (rows ldy apart):
// each weight block is unpacked once for the R rows. For the few rows of a small decode batch, where
// the GEMM below would leave most of its eight lanes empty.
template <DType T, int R>
void rows_times_weights_few(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y,
                            int64_t ldy) {
  struct alignas(32) Lanes {  // an __m256i a std::vector can hold
    int32_t v[8];
  };
  thread_local std::vector<Lanes> offsets;
  if constexpr (Weights<T>::kOffset != 0) {
    offsets.resize(size_t(R * nb));
    for (int64_t i = 0; i < R * nb; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(offsets[size_t(i)].v), offset_lanes<T>(x[i]));
  }
  auto start = [&](int r, int64_t b) {
    if constexpr (Weights<T>::kOffset != 0) return _mm256_load_si256(reinterpret_cast<const __m256i*>(offsets[size_t(r * nb + b)].v));
    else return _mm256_setzero_si256();
  };
  constexpr size_t kBlockBytes = dtype_layout(T).block_bytes;
  constexpr int64_t kAhead = 8;  // rows: measured best of 4, 6, 8, 12, 16 streaming from memory (Zen 4)
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const uint8_t* r[4] = {w + size_t(n) * row_bytes, w + size_t(n + 1) * row_bytes, w + size_t(n + 2) * row_bytes,
                           w + size_t(n + 3) * row_bytes};
    // The rows kAhead on are this thread's too: ask for them while these are summed.
    const bool ahead = n + 4 + kAhead <= n1;
    __m128 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      if (ahead)
        for (int i = 0; i < 4; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(r[i] + size_t(kAhead) * row_bytes + Weights<T>::kHeader + kBlockBytes * b),
                       _MM_HINT_T0);
      const __m256i u[4] = {Weights<T>::bytes(r[0], b), Weights<T>::bytes(r[1], b), Weights<T>::bytes(r[2], b),
                            Weights<T>::bytes(r[3], b)};
      __m128 wscales = _mm_set1_ps(1.0f);
      if constexpr (T != DType::I8) {  // int8's block scale is 1
        // The four float16 scales packed in a general register, widened together.
        const uint64_t h = uint64_t(Weights<T>::block(r[0], b).d) | uint64_t(Weights<T>::block(r[1], b).d) << 16 |
                           uint64_t(Weights<T>::block(r[2], b).d) << 32 | uint64_t(Weights<T>::block(r[3], b).d) << 48;
        wscales = _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(h)));
      }
      for (int i = 0; i < R; ++i) {
        const __m256i xb = load32(x[i * nb + b].q), o = start(i, b);
        const __m128i dots = sum_lanes4(block_dot<T>(o, u[0], xb), block_dot<T>(o, u[1], xb), block_dot<T>(o, u[2], xb),
                                        block_dot<T>(o, u[3], xb));
        const __m128 xd = _mm_set1_ps(x[i * nb + b].d);
        acc[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(dots), T == DType::I8 ? xd : _mm_mul_ps(wscales, xd), acc[i]);
      }
    }
    for (int i = 0; i < R; ++i) {
      float out[4];
      _mm_storeu_ps(out, acc[i]);
      for (int j = 0; j < 4; ++j) y[i * ldy + n + j] = finish<T>(r[j], out[j]);
    }
  }
  for (; n < n1; ++n) {
    const uint8_t* r = w + size_t(n) * row_bytes;
    for (int i = 0; i < R; ++i) {
      float acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const int32_t dot = sum_lanes(block_dot<T>(start(i, b), Weights<T>::bytes(r, b), load32(x[i * nb + b].q)));
        acc = std::fma(float(dot), Weights<T>::scale(r, b) * x[i * nb + b].d, acc);
      }
      y[i * ldy + n] = finish<T>(r, acc);
    }
  }
}

// Q4_K: weight rows [n0, n1) against one activation row, four rows' super-blocks side by side.
void row_times_q4k(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y) {
  using Q4K = Weights<DType::Q4_K>;
  const __m256i low = _mm256_set1_epi8(0x0F);
  // One row's integer sum of sub-block dots times their scales over super-block sb (lanes to be added),
  // and its minimums' sum_j mn_j * sum(x_j).
  auto super_dot = [&](const uint8_t* row, int64_t sb, int32_t& msum) {
    const quant::BlockQ4_K& blk = Q4K::block(row, sb);
    alignas(8) uint8_t sc[8], mn[8];
    k_scale_bytes(blk.scales, sc, mn);
    __m256i isum = _mm256_setzero_si256();
    for (int p = 0; p < 4; ++p) {
      const __m256i v = load32(blk.qs + 32 * p);
      const int64_t b = sb * 8 + 2 * p;
      // u <= 15 and |x| <= 127: the byte-pair sums fit int16, then times the 6-bit scale in int32.
      const __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(v, low), load32(x[b].q));
      const __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), load32(x[b + 1].q));
      isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(p0, _mm256_set1_epi16(sc[2 * p])),
                                                     _mm256_madd_epi16(p1, _mm256_set1_epi16(sc[2 * p + 1]))));
    }
    msum = 0;
    for (int j = 0; j < 8; ++j) msum += int32_t(mn[j]) * x[sb * 8 + j].sum;
    return isum;
  };
  const int64_t supers = nb / 8;
  constexpr int64_t kAhead = 8;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const uint8_t* r[4] = {w + size_t(n) * row_bytes, w + size_t(n + 1) * row_bytes, w + size_t(n + 2) * row_bytes,
                           w + size_t(n + 3) * row_bytes};
    const bool ahead = n + 4 + kAhead <= n1;  // as in rows_times_weights_few
    __m128 acc = _mm_setzero_ps();
    for (int64_t sb = 0; sb < supers; ++sb) {
      if (ahead)
        for (int i = 0; i < 4; ++i)
          for (size_t line = 0; line < sizeof(quant::BlockQ4_K); line += 64)
            _mm_prefetch(reinterpret_cast<const char*>(r[i] + size_t(kAhead) * row_bytes + sizeof(quant::BlockQ4_K) * size_t(sb) + line),
                         _MM_HINT_T0);
      int32_t ms[4];
      const __m256i i0 = super_dot(r[0], sb, ms[0]), i1 = super_dot(r[1], sb, ms[1]), i2 = super_dot(r[2], sb, ms[2]),
                    i3 = super_dot(r[3], sb, ms[3]);
      const __m128 xd = _mm_set1_ps(x[sb * 8].d);
      const __m128 d = _mm_setr_ps(h2f(Q4K::block(r[0], sb).d), h2f(Q4K::block(r[1], sb).d), h2f(Q4K::block(r[2], sb).d),
                                   h2f(Q4K::block(r[3], sb).d));
      const __m128 neg_dmin = _mm_setr_ps(-h2f(Q4K::block(r[0], sb).dmin), -h2f(Q4K::block(r[1], sb).dmin),
                                          -h2f(Q4K::block(r[2], sb).dmin), -h2f(Q4K::block(r[3], sb).dmin));
      acc = _mm_fmadd_ps(_mm_cvtepi32_ps(sum_lanes4(i0, i1, i2, i3)), _mm_mul_ps(d, xd), acc);
      acc = _mm_fmadd_ps(_mm_mul_ps(neg_dmin, xd), _mm_cvtepi32_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ms))), acc);
    }
    _mm_storeu_ps(y + n, acc);
  }
  for (; n < n1; ++n) {
    const uint8_t* r = w + size_t(n) * row_bytes;
    float acc = 0;
    for (int64_t sb = 0; sb < supers; ++sb) {
      int32_t ms;
      const int32_t isum = sum_lanes(super_dot(r, sb, ms));
      const float xd = x[sb * 8].d;
      acc = std::fma(float(isum), h2f(Q4K::block(r, sb).d) * xd, acc);
      acc = std::fma(-h2f(Q4K::block(r, sb).dmin) * xd, float(ms), acc);
    }
    y[n] = acc;
  }
}

// ---- Many activation rows ------------------------------------------------------------------------

// Eight activation rows' block b, transposed: chunk[c] holds bytes 4c..4c+3 of each row (row i in lane
// i), d their scales and start their offset lanes (-offset * sum(q)); for even b, sum_pairs has each
// row's sum(q) of blocks b and b + 1 as two int16 (for K-quant minimums). Rows past M are zeros.
struct alignas(32) Octet {
  int8_t chunk[8][32];
  float d[8];
  int32_t start[8];
  int32_t sum_pairs[8];
};

// W weight rows against G groups of eight activation rows, over all nb blocks: out[w][g] (eight lanes).
template <DType T, int W, int G>
[[gnu::always_inline]] inline void tile(const Octet* const* x, int64_t nb, const uint8_t* const* rows, __m256* out) {
  __m256 acc[W][G];
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) acc[w][g] = _mm256_setzero_ps();
  alignas(32) uint8_t unpacked[W][32];
  for (int64_t b = 0; b < nb; ++b) {
    __m256i dots[W][G];
    for (int g = 0; g < G; ++g) {
      const __m256i start = _mm256_load_si256(reinterpret_cast<const __m256i*>(x[g][b].start));
      for (int w = 0; w < W; ++w) dots[w][g] = start;
    }
#ifndef FTLLM_VNNI
    __m256i pairs[W][G];
    for (int w = 0; w < W; ++w)
      for (int g = 0; g < G; ++g) pairs[w][g] = _mm256_setzero_si256();
#endif
    const uint8_t* chunks[W];
    for (int w = 0; w < W; ++w) {
      if constexpr (T == DType::Q4_0) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked[w]), Weights<T>::bytes(rows[w], b));
        chunks[w] = unpacked[w];
      } else {
        chunks[w] = Weights<T>::chunks(rows[w], b);
      }
    }
    for (int c = 0; c < 8; ++c)
      for (int w = 0; w < W; ++w) {
        __m256i wc = broadcast4(chunks[w] + 4 * c);
#ifdef FTLLM_VNNI
        // Signed weights as unsigned bytes w + 128; the transposed rows' start took 128 * sum(q) off.
        if constexpr (Weights<T>::kOffset == 0) wc = _mm256_xor_si256(wc, _mm256_set1_epi8(char(0x80)));
        for (int g = 0; g < G; ++g) dots[w][g] = _mm256_dpbusd_epi32(dots[w][g], wc, load32(x[g][b].chunk[c]));
#else
        if constexpr (Weights<T>::kOffset == 0) {
          const __m256i magnitude = _mm256_sign_epi8(wc, wc);
          for (int g = 0; g < G; ++g)
            dots[w][g] = dot_u8s8(dots[w][g], magnitude, _mm256_sign_epi8(load32(x[g][b].chunk[c]), wc));
        } else {
          // Nibbles times int8 pair up to 2 * 15 * 127 per int16 lane: eight chunks' pairs still fit, so
          // they add as int16 and widen once per block.
          for (int g = 0; g < G; ++g) pairs[w][g] = _mm256_add_epi16(pairs[w][g], _mm256_maddubs_epi16(wc, load32(x[g][b].chunk[c])));
        }
#endif
      }
#ifndef FTLLM_VNNI
    if constexpr (Weights<T>::kOffset != 0)
      for (int w = 0; w < W; ++w)
        for (int g = 0; g < G; ++g) dots[w][g] = _mm256_add_epi32(dots[w][g], _mm256_madd_epi16(pairs[w][g], _mm256_set1_epi16(1)));
#endif
    for (int w = 0; w < W; ++w) {
      const __m256 ws = _mm256_set1_ps(Weights<T>::scale(rows[w], b));
      for (int g = 0; g < G; ++g)
        acc[w][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[w][g]), _mm256_mul_ps(ws, _mm256_load_ps(x[g][b].d)), acc[w][g]);
    }
  }
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) out[w * G + g] = acc[w][g];
}

// Q4_K: W weight rows against G groups of eight activation rows, a super-block at a time.
template <int W, int G>
[[gnu::always_inline]] inline void tile_q4k(const Octet* const* x, int64_t nb, const uint8_t* const* rows, __m256* out) {
  using Q4K = Weights<DType::Q4_K>;
  __m256 acc[W][G];
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) acc[w][g] = _mm256_setzero_ps();
  alignas(32) uint8_t nibbles[W][8][32];
  alignas(8) uint8_t sc[W][8], mn[W][8];
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    for (int w = 0; w < W; ++w) {
      Q4K::unpack(Q4K::block(rows[w], sb), nibbles[w]);
      k_scale_bytes(Q4K::block(rows[w], sb).scales, sc[w], mn[w]);
    }
    __m256i isum[W][G];
    for (int w = 0; w < W; ++w)
      for (int g = 0; g < G; ++g) isum[w][g] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const int64_t b = sb * 8 + j;
      __m256i part[W][G];
      for (int w = 0; w < W; ++w)
        for (int g = 0; g < G; ++g) part[w][g] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c)
        for (int w = 0; w < W; ++w) {
          const __m256i wc = broadcast4(nibbles[w][j] + 4 * c);
          for (int g = 0; g < G; ++g)
#ifdef FTLLM_VNNI
            part[w][g] = _mm256_dpbusd_epi32(part[w][g], wc, load32(x[g][b].chunk[c]));
#else
            part[w][g] = _mm256_add_epi16(part[w][g], _mm256_maddubs_epi16(wc, load32(x[g][b].chunk[c])));  // fits: see tile
#endif
        }
      for (int w = 0; w < W; ++w)
        for (int g = 0; g < G; ++g)
#ifdef FTLLM_VNNI
          isum[w][g] = _mm256_add_epi32(isum[w][g], _mm256_mullo_epi32(part[w][g], _mm256_set1_epi32(sc[w][j])));
#else
          isum[w][g] = _mm256_add_epi32(isum[w][g], _mm256_madd_epi16(part[w][g], _mm256_set1_epi16(sc[w][j])));
#endif
    }
    for (int w = 0; w < W; ++w) {
      const quant::BlockQ4_K& blk = Q4K::block(rows[w], sb);
      const __m256 d = _mm256_set1_ps(h2f(blk.d)), neg_dmin = _mm256_set1_ps(-h2f(blk.dmin));
      for (int g = 0; g < G; ++g) {
        __m256i msum = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k)
          msum = _mm256_add_epi32(msum, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(x[g][sb * 8 + 2 * k].sum_pairs)),
                                                          _mm256_set1_epi32(int32_t(mn[w][2 * k] | uint32_t(mn[w][2 * k + 1]) << 16))));
        const __m256 xd = _mm256_load_ps(x[g][sb * 8].d);
        acc[w][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[w][g]), _mm256_mul_ps(d, xd), acc[w][g]);
        acc[w][g] = _mm256_fmadd_ps(_mm256_mul_ps(neg_dmin, xd), _mm256_cvtepi32_ps(msum), acc[w][g]);
      }
    }
  }
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) out[w * G + g] = acc[w][g];
}

// The signed types' transposed rows start from -128 * sum(q) under VNNI (weights offset to unsigned
// there), from 0 with AVX2's sign trick.
template <DType T>
constexpr int kTransposeOffset =
#ifdef FTLLM_VNNI
    Weights<T>::kOffset == 0 ? 128 : Weights<T>::kOffset;
#else
    Weights<T>::kOffset;
#endif

template <DType T>
[[gnu::noinline]] void transpose_rows(const Q8Block* xq, int64_t M, int64_t nb, std::vector<Octet>& out) {
  const int64_t groups = (M + 7) / 8;
  out.assign(size_t(groups * nb), Octet{});
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < 8 && g * 8 + i < M; ++i) {
      const Q8Block* row = xq + (g * 8 + i) * nb;
      for (int64_t b = 0; b < nb; ++b) {
        Octet& o = out[size_t(g * nb + b)];
        for (int c = 0; c < 8; ++c) std::memcpy(&o.chunk[c][4 * i], row[b].q + 4 * c, 4);
        o.d[i] = row[b].d;
        o.start[i] = -kTransposeOffset<T> * row[b].sum;
        if (b % 2 == 0 && b + 1 < nb) o.sum_pairs[i] = int32_t(uint32_t(uint16_t(row[b].sum)) | uint32_t(row[b + 1].sum) << 16);
      }
    }
}

#ifdef FTLLM_VNNI
constexpr int kTileRows = 4;  // 32 vector registers: 4 weight rows x 2 groups of 8 activation rows
#else
constexpr int kTileRows = 2;  // 16 registers: 2 x 2
#endif

template <DType T>
void rows_times_weights(const Q8Block* xq, int64_t M, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1,
                        float* y, int64_t ldy) {
  thread_local std::vector<Octet> octets;
  transpose_rows<T>(xq, M, nb, octets);
  const int64_t groups = (M + 7) / 8;
  // Cache blocking: a tile of weight rows stays in L2 while the activation groups stream past it, in
  // tiles of about 256 KB.
  const int64_t group_bytes = nb * int64_t(sizeof(Octet));
  const int64_t g_tile = std::max<int64_t>(2, (256 << 10) / std::max<int64_t>(group_bytes, 1) / 2 * 2);
  const int64_t n_tile = std::max<int64_t>(kTileRows, int64_t((256 << 10) / row_bytes) / kTileRows * kTileRows);
  for (int64_t nt = n0; nt < n1; nt += n_tile) {
    const int64_t nt_end = std::min(n1, nt + n_tile);
    for (int64_t gt = 0; gt < groups; gt += g_tile) {
      const int64_t gt_end = std::min(groups, gt + g_tile);
      auto run = [&]<int W, int G>(int64_t n, int64_t g) {
        const Octet* xs[G];
        for (int j = 0; j < G; ++j) xs[j] = octets.data() + (g + j) * nb;
        const uint8_t* rows[W];
        for (int i = 0; i < W; ++i) rows[i] = w + size_t(n + i) * row_bytes;
        __m256 out[W * G];
        if constexpr (T == DType::Q4_K) tile_q4k<W, G>(xs, nb, rows, out);
        else tile<T, W, G>(xs, nb, rows, out);
        for (int i = 0; i < W; ++i)
          for (int j = 0; j < G; ++j) {
            alignas(32) float lanes[8];
            _mm256_store_ps(lanes, out[i * G + j]);
            for (int l = 0; l < 8 && (g + j) * 8 + l < M; ++l) y[((g + j) * 8 + l) * ldy + n + i] = finish<T>(rows[i], lanes[l]);
          }
      };
      int64_t n = nt;
      for (; n + kTileRows <= nt_end; n += kTileRows) {
        int64_t g = gt;
        for (; g + 2 <= gt_end; g += 2) run.template operator()<kTileRows, 2>(n, g);
        if (g < gt_end) run.template operator()<kTileRows, 1>(n, g);
      }
      for (; n < nt_end; ++n) {
        int64_t g = gt;
        for (; g + 2 <= gt_end; g += 2) run.template operator()<1, 2>(n, g);
        if (g < gt_end) run.template operator()<1, 1>(n, g);
      }
    }
  }
}

constexpr int64_t kFewRows = 6;

template <DType T>
void matmul_t(const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t nb = K / 32;
  const size_t bytes = row_bytes(T, K);
  const auto* weights = static_cast<const uint8_t*>(w);
  // A handful of rows (a small decode batch) share each weight block's unpacking on the one-row path;
  // from about six the GEMM's eight lanes pay (measured, 2 threads, Q4_0 0.5B shape on Zen 4).
  if (M >= kFewRows) return rows_times_weights<T>(xq, M, nb, weights, bytes, n0, n1, y, ldy);
  if constexpr (T == DType::Q4_K) {
    for (int64_t m = 0; m < M; ++m) row_times_q4k(xq + m * nb, nb, weights, bytes, n0, n1, y + m * ldy);
  } else {
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) rows_times_weights_few<T, 4>(xq + m * nb, nb, weights, bytes, n0, n1, y + m * ldy, ldy);
    if (M - m == 3) rows_times_weights_few<T, 3>(xq + m * nb, nb, weights, bytes, n0, n1, y + m * ldy, ldy);
    if (M - m == 2) rows_times_weights_few<T, 2>(xq + m * nb, nb, weights, bytes, n0, n1, y + m * ldy, ldy);
    if (M - m == 1) rows_times_weights_few<T, 1>(xq + m * nb, nb, weights, bytes, n0, n1, y + m * ldy, ldy);
  }
}

}  // namespace

bool matmul_exact_blocks(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                         int64_t ldy) {
  switch (wt) {
    case DType::Q4_0: return matmul_t<DType::Q4_0>(xq, M, K, w, n0, n1, y, ldy), true;
    case DType::Q8_0: return matmul_t<DType::Q8_0>(xq, M, K, w, n0, n1, y, ldy), true;
    case DType::I8: return matmul_t<DType::I8>(xq, M, K, w, n0, n1, y, ldy), true;
    case DType::Q4_K: return matmul_t<DType::Q4_K>(xq, M, K, w, n0, n1, y, ldy), true;
    default: return false;
  }
}

}  // namespace ftllm::cpu::FTLLM_QUANT_NS
