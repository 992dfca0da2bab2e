// What avx2_exact_blocks.cpp (the 32-value block types) and avx2_k_quants.cpp (the K-quants' super-blocks)
// share: every output is summed one way whatever the batch: each block's integer dot exactly (a K-quant
// super-block's: its sub-blocks' or runs' dots times their scales), then one float step per block,
//     acc = fma(float(dot_b), weight_scale_b * activation_scale_b, acc)
// in block order (types with minimums add their step after each; int8 multiplies by its row scale at the end).
// The integers are exact, so how a kernel finds them is free; that lets each batch size take its own shape.
// Both files are compiled twice: AVX2 (vpmaddubsw + vpmaddwd) into namespace avx2 and AVX-512 VNNI
// (vpdpbusd, 32 vector registers) into avx512vnni. Here: the dot-product steps, the activations' transpose
// and the GEMM's cache-blocked walk over tiles, whose tile each file brings for its types.
#pragma once

#include <immintrin.h>

#ifdef FTLLM_VNNI
// GCC 12's AVX-512 headers pass _mm512_undefined_*() as the unused merge source of unmasked operations,
// which its own flow analysis then reports as uninitialized (a false positive, as in avx512_float_gemm.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "../quant/block_decode.h"
#include "../quant/ggml_blocks.h"
#include "avx2_quant.h"
#include "avx2_util.h"

#ifdef FTLLM_VNNI
#define FTLLM_QUANT_NS avx512vnni
#else
#define FTLLM_QUANT_NS avx2
#endif

namespace ftllm::cpu::FTLLM_QUANT_NS {

// avx2_k_quants.cpp: matmul_q8 for Q2_K, Q3_K, Q4_K, Q5_K and Q6_K.
void matmul_k_quant(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy);

// Both files' helpers are theirs alone (internal linkage): each build of each file has its own copy.
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
// u1 . s1 + u2 . s2 per int32 lane; without VNNI the two meet in int16, exact while 4 * max(u) * max|s| <= 32767.
inline __m256i dot_u8s8_twice(__m256i u1, __m256i s1, __m256i u2, __m256i s2) {
#ifdef FTLLM_VNNI
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u1, s1), u2, s2);
#else
  return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u1, s1), _mm256_maddubs_epi16(u2, s2)), _mm256_set1_epi16(1));
#endif
}
// Signed by signed (|a| <= 128, |b| <= 127): a's sign moved onto b, |a| as the unsigned operand.
inline __m256i dot_s8s8(__m256i acc, __m256i a, __m256i b) {
  return dot_u8s8(acc, _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// acc + the int16 pairs of p times those of s, summed per int32 lane (exact: products of int16s).
inline __m256i dot_i16(__m256i acc, __m256i p, __m256i s) {
#ifdef FTLLM_VNNI
  return _mm256_dpwssd_epi32(acc, p, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
#endif
}

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// Four rows' float16 fields packed in a general register, widened together.
inline __m128 widen4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(uint64_t(a) | uint64_t(b) << 16 | uint64_t(c) << 32 | uint64_t(d) << 48)));
}

// What the kernels need of a weight type (each file defines its types').
template <DType T>
struct Weights;

// The minimum multiplies the activations' ds for int4 types, s (float16, as llama.cpp) for ggml's.
template <DType T>
constexpr bool kMinTimesDs = T == DType::I4 || T == DType::I4G32 || T == DType::I4G64 || T == DType::I4G128 || T == DType::I4G256;

template <DType T>
float min_operand(const Q8Block& x) {
  return kMinTimesDs<T> ? x.ds : x.s;
}

// The K-quants: super-blocks of 256 values, with activations in blocks of 32 sharing one scale per 256.
template <DType T>
constexpr bool kRuns16 = T == DType::Q2_K || T == DType::Q3_K;
// A super-block type with 6-bit scales and minimums: its unit is eight blocks.
template <DType T>
constexpr bool kSuper = T == DType::Q4_K || T == DType::Q5_K;
template <DType T>
constexpr bool kKQuant = kSuper<T> || T == DType::Q6_K || kRuns16<T>;

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

// Lanes added up: four registers' to one lane each (a, b, c, d), one register's to an integer.
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

#ifdef FTLLM_VNNI
// a in the low half, b in the high one (AVX-512F alone: the tables do not ask for DQ).
inline __m512i join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }
inline __m512 join_ps(__m128 a, __m128 b, __m128 c, __m128 d) {
  return _mm512_castsi512_ps(join(_mm256_castps_si256(_mm256_set_m128(b, a)), _mm256_castps_si256(_mm256_set_m128(d, c))));
}

// acc + the dots of u's unsigned bytes with the signed 4-byte word at s, broadcast to every lane by the
// dot product itself (an embedded broadcast): a separate broadcast from memory costs a vector uop, and
// with it Zen 5 ran a third fewer dot products a cycle. GCC 12 does not fold the broadcast into the
// instruction's operand, so it is written out.
inline __m512i dpbusd_broadcast(__m512i acc, __m512i u, const int8_t* s) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const int32_t*>(s)));
  return acc;
}

// Sixteen rows' 32 bytes, row i's in v[i % 8] (rows 0-7 in the low halves, 8-15 in the high ones), turned
// so that v[c] holds 4-byte chunk c of every row, row i in lane i.
[[gnu::always_inline]] inline void turn16(__m512i* v) {
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  // After the two unpack rounds (within 128-bit lanes) u[k] holds, per 256-bit half, one chunk of rows
  // 0-3 (of that half's eight) in its low lane and chunk + 4 in its high one; u[4 + k] the same of rows 4-7.
  for (int h = 0; h < 2; ++h) {
    u[4 * h] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  const __m512i low = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), high = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm512_permutex2var_epi64(u[j], low, u[4 + j]);
    v[j + 4] = _mm512_permutex2var_epi64(u[j], high, u[4 + j]);
  }
}

// Word k of row r of `values` (rows row_stride bytes apart) for r = 0..15, as a tile's row k, k < words.
inline void amx_transpose16(const uint8_t* values, int row_stride, uint8_t (*b_tile)[64], int words = 8) {
  const __m512i word_of_row = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(row_stride / 4));
  for (int k = 0; k < words; ++k)
    _mm512_store_si512(b_tile[k], _mm512_i32gather_epi32(_mm512_add_epi32(word_of_row, _mm512_set1_epi32(k)), values, 4));
}
#endif

// ---- Many activation rows ------------------------------------------------------------------------

// Eight activation rows' block b, transposed: chunk[c] holds bytes 4c..4c+3 of each row (row i in lane
// i), d their scales and start their offset lanes (-offset * sum(q)); for even b, sum_pairs has each
// row's sum(q) of blocks b and b + 1 as two int16 (for K-quant minimums). Rows past M are zeros.
struct alignas(32) Octet {
  int8_t chunk[8][32];
  float d[8];
  float s[8];  // what minimums multiply: d * sum(q) as float16, or unrounded for int4 (min_operand)
  int32_t start[8];
  int32_t sum_pairs[8];
  int32_t half_sums[8];  // each row's sum(q) of the block's first 16 and last 16 values, as two int16 (Q6_K)
};

// The signed types' transposed rows start from -128 * sum(q) under VNNI (weights offset to unsigned
// there), from 0 with AVX2's sign trick.
template <DType T>
constexpr int kTransposeOffset =
#ifdef FTLLM_VNNI
    Weights<T>::kSigned ? 128 : Weights<T>::kOffset;
#else
    Weights<T>::kOffset;
#endif

template <DType T>
void transpose_rows(const Q8Block* xq, int64_t M, int64_t nb, std::vector<Octet>& out) {
  const int64_t groups = (M + 7) / 8;
  out.resize(size_t(groups * nb));
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = std::min<int64_t>(8, M - g * 8);
    const Q8Block* first = xq + g * 8 * nb;
    for (int64_t b = 0; b < nb; ++b) {
      Octet& o = out[size_t(g * nb + b)];
      // The eight rows' 32 bytes as an 8 x 8 matrix of 4-byte words, transposed: word c of row i goes to
      // chunk c, lane i (rows past M are zeros).
      __m256i r[8];
      for (int i = 0; i < 8; ++i) r[i] = i < rows ? load32(first[i * nb + b].q) : _mm256_setzero_si256();
      __m256i t[8], u[8];
      for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
      for (int i = 0; i < 8; i += 4)
        for (int j = 0; j < 2; ++j)
          u[i + j] = _mm256_unpacklo_epi64(t[i + j], t[i + j + 2]), u[i + j + 2] = _mm256_unpackhi_epi64(t[i + j], t[i + j + 2]);
      // After the two unpack rounds (within 128-bit halves) u[k] holds one word of rows 0-3, word
      // kWord[k] in its low half and kWord[k] + 4 in its high one; u[4 + k] the same for rows 4-7.
      constexpr int kWord[4] = {0, 2, 1, 3};  // which word of each half u[k] carries
      for (int k = 0; k < 4; ++k) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(o.chunk[kWord[k]]), _mm256_permute2x128_si256(u[k], u[4 + k], 0x20));
        _mm256_store_si256(reinterpret_cast<__m256i*>(o.chunk[kWord[k] + 4]), _mm256_permute2x128_si256(u[k], u[4 + k], 0x31));
      }
      for (int i = 0; i < 8; ++i) {
        const Q8Block* x = i < rows ? &first[i * nb + b] : nullptr;
        o.d[i] = x ? x->d : 0.0f;
        o.s[i] = x ? min_operand<T>(*x) : 0.0f;
        o.start[i] = x ? -kTransposeOffset<T> * x->sum : 0;
        o.sum_pairs[i] = x && b % 2 == 0 && b + 1 < nb ? int16_pair(x->sum, x[1].sum) : 0;
        o.half_sums[i] = (T == DType::Q6_K || kRuns16<T>) && x ? half_sums(*x) : 0;
      }
    }
  }
}

#ifdef FTLLM_VNNI
constexpr int kTileRows = 4;  // 32 vector registers: 4 weight rows x 4 groups (tile_wide: two registers' worth)
constexpr int kTileGroups = 4;
#else
constexpr int kTileRows = 2;  // 16 registers: 2 x 2
constexpr int kTileGroups = 2;
#endif

// The GEMM: weight rows [n0, n1) against M activation rows (M >= kFewRows), their blocks transposed once
// (transpose_rows) and walked in cache-sized tiles of weight rows and activation groups. tile is the
// type's register tile (a lambda marked always_inline), tile.template operator()<W, G>(groups, nb, rows, ahead, out): W weight rows
// against G groups of eight activation rows over all nb blocks, into out[w * G + g] (eight lanes), with
// the block of the rows `ahead` bytes on asked for from memory where ahead is not 0.
template <DType T, typename Tile>
void rows_times_weights(const Q8Block* xq, int64_t M, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1,
                        float* y, int64_t ldy, Tile&& tile) {
  thread_local std::vector<Octet> octets;
  transpose_rows<T>(xq, M, nb, octets);
  const int64_t groups = (M + 7) / 8;
  // Cache blocking: tiles of about 256 KB of weight rows and of activation groups, one of them held in
  // L2 while the other streams past it.
  const int64_t group_bytes = nb * int64_t(sizeof(Octet));
  const int64_t g_tile = std::max<int64_t>(kTileGroups, (256 << 10) / std::max<int64_t>(group_bytes, 1) / kTileGroups * kTileGroups);
  const int64_t n_tile = std::max<int64_t>(kTileRows, int64_t((256 << 10) / row_bytes) / kTileRows * kTileRows);
  // W weight rows from n against G activation groups from g; the last groups of a tile (g_end) prefetch
  // the next W rows. A function of its own with the tile inlined in it (the tile lambdas are
  // always_inline): inlined into the loops below instead, the Q6_K tile ran 10% slower on Zen 5.
  auto run = [&]<int W, int G>(int64_t n, int64_t g, int64_t g_end) __attribute__((noinline)) {
    const Octet* xs[G];
    for (int j = 0; j < G; ++j) xs[j] = octets.data() + (g + j) * nb;
    const uint8_t* rows[W];
    for (int i = 0; i < W; ++i) rows[i] = w + size_t(n + i) * row_bytes;
    __m256 out[W * G];
    const size_t ahead = g + G >= g_end && n + 2 * W <= n1 ? W * row_bytes : 0;
    tile.template operator()<W, G>(xs, nb, rows, ahead, out);
    for (int i = 0; i < W; ++i)
      for (int j = 0; j < G; ++j) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, out[i * G + j]);
        for (int l = 0; l < 8 && (g + j) * 8 + l < M; ++l) y[((g + j) * 8 + l) * ldy + n + i] = finish<T>(rows[i], lanes[l]);
      }
  };
  // Weight rows [nt, nt_end) against activation groups [gt, gt_end).
  auto tiles = [&](int64_t nt, int64_t nt_end, int64_t gt, int64_t gt_end) {
    int64_t n = nt;
#ifdef FTLLM_VNNI
    // One or two groups (6-16 activation rows: a batched decode of int4, which the lane kernels do not
    // take): eight weight rows a tile, so each load of activation chunks and each block's fixed steps
    // serve twice the weight rows. Measured on Zen 5 with Q4_0 (before Q4_0 went to the lane kernels), 0.5B
    // shape, 2 threads: 8 sequences +18%, 16 +19% tokens/s; the AVX2 table's 16 registers lost 7%.
    if constexpr (!kKQuant<T>)
      if (gt_end - gt <= 2)
        for (; n + 2 * kTileRows <= nt_end; n += 2 * kTileRows) {
          if (gt_end - gt == 1) run.template operator()<2 * kTileRows, 1>(n, gt, gt_end);
          else run.template operator()<2 * kTileRows, 2>(n, gt, gt_end);
        }
#endif
    for (; n + kTileRows <= nt_end; n += kTileRows) {
      int64_t g = gt;
      if constexpr (kTileGroups == 4)
        for (; g + 4 <= gt_end; g += 4) run.template operator()<kTileRows, 4>(n, g, gt_end);
      for (; g + 2 <= gt_end; g += 2) run.template operator()<kTileRows, 2>(n, g, gt_end);
      if (g < gt_end) run.template operator()<kTileRows, 1>(n, g, gt_end);
    }
    for (; n < nt_end; ++n) {
      int64_t g = gt;
      for (; g + 2 <= gt_end; g += 2) run.template operator()<1, 2>(n, g, gt_end);
      if (g < gt_end) run.template operator()<1, 1>(n, g, gt_end);
    }
  };
  // Whichever operand is larger streams through once; the smaller is read again for each of its tiles.
  const bool weights_outer = int64_t(n1 - n0) * int64_t(row_bytes) >= groups * group_bytes;
  for (int64_t a = weights_outer ? n0 : 0, a_end = weights_outer ? n1 : groups; a < a_end; a += weights_outer ? n_tile : g_tile)
    for (int64_t b = weights_outer ? 0 : n0, b_end = weights_outer ? groups : n1; b < b_end; b += weights_outer ? g_tile : n_tile) {
      if (weights_outer) tiles(a, std::min(n1, a + n_tile), b, std::min(groups, b + g_tile));
      else tiles(b, std::min(n1, b + n_tile), a, std::min(groups, a + g_tile));
    }
}

constexpr int64_t kFewRows = 6;

// f.template operator()<M>() for M in [Lo, Hi].
template <int Lo, int Hi, typename F>
[[gnu::always_inline]] inline void with_rows(int64_t M, F&& f) {
  if constexpr (Lo < Hi)
    if (M != Lo) return with_rows<Lo + 1, Hi>(M, f);
  f.template operator()<Lo>();
}

}  // namespace

}  // namespace ftllm::cpu::FTLLM_QUANT_NS
