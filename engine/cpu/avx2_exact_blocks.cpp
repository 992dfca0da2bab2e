// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, int8, Q4_K and Q5_K weights against int8 activations, with every output
// summed one way whatever the batch: each block's integer dot exactly (a K-quant super-block's: its
// sub-blocks' dots times their scales), then one float step per block,
//     acc = fma(float(dot_b), weight_scale_b * activation_scale_b, acc)
// in block order (types with minimums add their step after each; int8 multiplies by its row scale at the end).
// The integers are exact, so how a kernel finds them is free; that lets each batch size take its own shape:
// - one activation row (decode): eight weight rows' block dots narrowed to int16 and added in pairs to
//   eight lanes (weights of at most 31), or four rows' side by side reduced by unpacks (Q8_0, int8);
// - two to five (small decode batches): eight weight rows, each block unpacked and turned once so that a
//   vector lane is a weight row, then dotted against every activation row with nothing to reduce;
// - more (prefill, batched decode): a GEMM whose vector lanes are eight activation rows. The
//   activations are transposed once per call so that 4-byte chunk c of eight rows' blocks sits in one
//   register; a weight block is unpacked once per tile and each of its eight 4-byte chunks is broadcast
//   against every group of activation rows (llama.cpp's repacked kernels get the same effect by
//   interleaving the weights at load; here the weights stay as the file holds them).
// Compiled twice: AVX2 (vpmaddubsw + vpmaddwd) into namespace avx2 and AVX-512 VNNI (vpdpbusd,
// and 32 vector registers for a bigger tile).
#include <immintrin.h>

#ifdef FTLLM_VNNI
// GCC 12's AVX-512 headers pass _mm512_undefined_*() as the unused merge source of unmasked operations,
// which its own flow analysis then reports as uninitialized (a false positive, as in avx512_float_gemm.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <algorithm>
#include <array>
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

// Q4_K / Q5_K: a super-block's twelve packed bytes as its eight 6-bit scales and eight 6-bit minimums.
// As words A, B, C: scales 0-3 are A's low six bits, mins 0-3 B's; scales 4-7 are C's low nibbles with
// A's top two bits above them, mins 4-7 C's high nibbles with B's top two bits (scale_min_k4 per byte).
inline void k_scale_bytes(const uint8_t* packed, uint8_t* sc, uint8_t* mn) {
  uint32_t a, b, c;
  std::memcpy(&a, packed, 4);
  std::memcpy(&b, packed + 4, 4);
  std::memcpy(&c, packed + 8, 4);
  const uint32_t low6 = 0x3f3f3f3f, nibble = 0x0f0f0f0f, two = 0x03030303;
  const uint32_t s[2] = {a & low6, (c & nibble) | (((a >> 6) & two) << 4)};
  const uint32_t m[2] = {b & low6, ((c >> 4) & nibble) | (((b >> 6) & two) << 4)};
  std::memcpy(sc, s, 8);
  std::memcpy(mn, m, 8);
}

// ggml's fifth bits (bit j of 4 bytes for value j) as 16 in byte j where set, 0 elsewhere.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)),  // byte j holds source byte j / 8
                                             _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                                              2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i mask = _mm256_set1_epi64x(int64_t(0x8040201008040201));  // byte j tests bit j % 8
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask), _mm256_set1_epi8(16));
}

// Four rows' float16 fields packed in a general register, widened together.
inline __m128 widen4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  return _mm_cvtph_ps(_mm_cvtsi64_si128(int64_t(uint64_t(a) | uint64_t(b) << 16 | uint64_t(c) << 32 | uint64_t(d) << 48)));
}

// 16 bytes of packed nibbles to 32 unsigned bytes: values 0-15 (low nibbles), then 16-31 (high ones).
// The 16 bytes go to both halves in the load itself and the upper half is shifted by a per-lane count,
// which keeps the shuffle port free (an insert would take it).
inline __m256i nibbles(const uint8_t* qs) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// What the kernels need of a block type: its 32 values as bytes, signed (kSigned) or unsigned with an
// offset taken off in the dot (Q4_0 holds q + 8: the dot starts from -8 * sum(x)), and at most kMaxByte;
// its float16 scale, and minimum where it has one (value = d * q + m: one more step, m * s, per block,
// s being the activation block's d * sum(q) rounded to float16 as llama.cpp's q8_1 carries it).
template <typename Block, int Offset, int MaxByte, bool HasMin, bool FifthBit>
struct NibbleBlocks {
  static constexpr bool kSigned = false, kPacked = true, kHasMin = HasMin, kHasScale = true;
  static constexpr int kOffset = Offset, kMaxByte = MaxByte;
  static const Block& block(const uint8_t* row, int64_t b) { return reinterpret_cast<const Block*>(row)[b]; }
  static const void* at(const uint8_t* row, int64_t b) { return &block(row, b); }
  static uint16_t d16(const uint8_t* row, int64_t b) { return block(row, b).d; }
  static uint16_t m16(const uint8_t* row, int64_t b) {
    if constexpr (HasMin) return block(row, b).m;
    else return 0;
  }
  static float scale(const uint8_t* row, int64_t b) { return h2f(d16(row, b)); }
  static float min(const uint8_t* row, int64_t b) { return h2f(m16(row, b)); }
  static __m128 scales4(const uint8_t* const* r, int64_t b) { return widen4(d16(r[0], b), d16(r[1], b), d16(r[2], b), d16(r[3], b)); }
  static __m128 mins4(const uint8_t* const* r, int64_t b) { return widen4(m16(r[0], b), m16(r[1], b), m16(r[2], b), m16(r[3], b)); }
  static const uint8_t* nibble_bytes(const uint8_t* row, int64_t b) { return block(row, b).qs; }
  static __m256i bytes(const uint8_t* row, int64_t b) {
    if constexpr (FifthBit) return _mm256_or_si256(nibbles(block(row, b).qs), fifth_bits(block(row, b).qh));
    else return nibbles(block(row, b).qs);
  }
};

template <DType T>
struct Weights;
template <>
struct Weights<DType::Q4_0> : NibbleBlocks<quant::BlockQ4_0, 8, 15, false, false> {};
template <>
struct Weights<DType::Q4_1> : NibbleBlocks<quant::BlockQ4_1, 0, 15, true, false> {};
template <>
struct Weights<DType::Q5_0> : NibbleBlocks<quant::BlockQ5_0, 16, 31, false, true> {};
template <>
struct Weights<DType::Q5_1> : NibbleBlocks<quant::BlockQ5_1, 0, 31, true, true> {};

template <>
struct Weights<DType::Q8_0> {
  static constexpr bool kSigned = true, kPacked = false, kHasMin = false, kHasScale = true;
  static constexpr int kOffset = 0, kMaxByte = 127;
  static const quant::BlockQ8_0& block(const uint8_t* row, int64_t b) { return reinterpret_cast<const quant::BlockQ8_0*>(row)[b]; }
  static const void* at(const uint8_t* row, int64_t b) { return &block(row, b); }
  static uint16_t d16(const uint8_t* row, int64_t b) { return block(row, b).d; }
  static float scale(const uint8_t* row, int64_t b) { return h2f(d16(row, b)); }
  static __m128 scales4(const uint8_t* const* r, int64_t b) { return widen4(d16(r[0], b), d16(r[1], b), d16(r[2], b), d16(r[3], b)); }
  static __m256i bytes(const uint8_t* row, int64_t b) { return load32(chunks(row, b)); }
  static const uint8_t* chunks(const uint8_t* row, int64_t b) { return reinterpret_cast<const uint8_t*>(block(row, b).qs); }
};

// MXFP4: each nibble looked up as ggml's doubled e2m1 integer plus 12 (0..24, unsigned bytes; the dot
// starts from -12 * sum(x), as Q4_0's from -8 * sum(x)), the block scale 2^(e - 128) exact, so a block's
// step is as exact as Q4_0's.
// Every e8m0 exponent's half scale (block_decode.h's e8m0_half), looked up instead of branched on.
const auto kHalfScales = [] {
  std::array<float, 256> t{};
  for (int e = 0; e < 256; ++e) t[size_t(e)] = quant::decode::e8m0_half(uint8_t(e));
  return t;
}();

template <>
struct Weights<DType::MXFP4> {
  static constexpr bool kSigned = false, kPacked = true, kHasMin = false, kHasScale = true;
  static constexpr int kOffset = 12, kMaxByte = 24;
  static const quant::BlockMXFP4& block(const uint8_t* row, int64_t b) { return reinterpret_cast<const quant::BlockMXFP4*>(row)[b]; }
  static const void* at(const uint8_t* row, int64_t b) { return &block(row, b); }
  static float scale(const uint8_t* row, int64_t b) { return kHalfScales[block(row, b).e]; }
  static __m128 scales4(const uint8_t* const* r, int64_t b) {  // four exponents widened, then shifted into place
    const __m128i e = _mm_setr_epi32(block(r[0], b).e, block(r[1], b).e, block(r[2], b).e, block(r[3], b).e);
    const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);             // 2^(e - 128)
    const __m128i subnormal = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);                   // e = 0, 1
    return _mm_castsi128_ps(_mm_blendv_epi8(normal, subnormal, _mm_cmplt_epi32(e, _mm_set1_epi32(2))));
  }
  static __m256i bytes(const uint8_t* row, int64_t b) {
    const __m256i values = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12,
                                            11, 10, 9, 8, 6, 4, 0);
    return _mm256_shuffle_epi8(values, nibbles(block(row, b).qs));
  }
};

template <>
struct Weights<DType::I8> {  // [float32 row scale] then K signed bytes: the block scale is 1
  static constexpr bool kSigned = true, kPacked = false, kHasMin = false, kHasScale = false;
  static constexpr int kOffset = 0, kMaxByte = 127;
  static float scale(const uint8_t*, int64_t) { return 1.0f; }
  static __m256i bytes(const uint8_t* row, int64_t b) { return load32(chunks(row, b)); }
  static const uint8_t* chunks(const uint8_t* row, int64_t b) { return row + 4 + 32 * b; }
  static const void* at(const uint8_t* row, int64_t b) { return chunks(row, b); }
};

// int4: [float32 scale, float32 min] then K nibbles; int4gN: groups of N values, each [float16 scale,
// float16 min] then N nibbles. value = scale * q + min, so each block's step is Q4_1's with the group's
// scale and minimum, the minimum times d * sum(q) of the activations unrounded (ds).
struct I4Row {
  static constexpr bool kSigned = false, kPacked = true, kHasMin = true, kHasScale = true;
  static constexpr int kOffset = 0, kMaxByte = 15;
  static float scale(const uint8_t* row, int64_t) {
    float v;
    std::memcpy(&v, row, 4);
    return v;
  }
  static float min(const uint8_t* row, int64_t) {
    float v;
    std::memcpy(&v, row + 4, 4);
    return v;
  }
  static __m128 scales4(const uint8_t* const* r, int64_t) { return _mm_setr_ps(scale(r[0], 0), scale(r[1], 0), scale(r[2], 0), scale(r[3], 0)); }
  static __m128 mins4(const uint8_t* const* r, int64_t) { return _mm_setr_ps(min(r[0], 0), min(r[1], 0), min(r[2], 0), min(r[3], 0)); }
  static const uint8_t* at(const uint8_t* row, int64_t b) { return row + 8 + 16 * b; }
  static const uint8_t* nibble_bytes(const uint8_t* row, int64_t b) { return at(row, b); }
  static __m256i bytes(const uint8_t* row, int64_t b) { return nibbles(at(row, b)); }
};

template <int N>
struct I4Groups {
  static constexpr bool kSigned = false, kPacked = true, kHasMin = true, kHasScale = true;
  static constexpr int kOffset = 0, kMaxByte = 15;
  static const uint8_t* group(const uint8_t* row, int64_t b) { return row + size_t(b / (N / 32)) * size_t(4 + N / 2); }
  static uint16_t d16(const uint8_t* row, int64_t b) {
    uint16_t h;
    std::memcpy(&h, group(row, b), 2);
    return h;
  }
  static uint16_t m16(const uint8_t* row, int64_t b) {
    uint16_t h;
    std::memcpy(&h, group(row, b) + 2, 2);
    return h;
  }
  static float scale(const uint8_t* row, int64_t b) { return h2f(d16(row, b)); }
  static float min(const uint8_t* row, int64_t b) { return h2f(m16(row, b)); }
  static __m128 scales4(const uint8_t* const* r, int64_t b) { return widen4(d16(r[0], b), d16(r[1], b), d16(r[2], b), d16(r[3], b)); }
  static __m128 mins4(const uint8_t* const* r, int64_t b) { return widen4(m16(r[0], b), m16(r[1], b), m16(r[2], b), m16(r[3], b)); }
  static const uint8_t* at(const uint8_t* row, int64_t b) { return group(row, b) + 4 + 16 * (b % (N / 32)); }
  static const uint8_t* nibble_bytes(const uint8_t* row, int64_t b) { return at(row, b); }
  static __m256i bytes(const uint8_t* row, int64_t b) { return nibbles(at(row, b)); }
};

template <>
struct Weights<DType::I4> : I4Row {};
template <>
struct Weights<DType::I4G32> : I4Groups<32> {};
template <>
struct Weights<DType::I4G64> : I4Groups<64> {};
template <>
struct Weights<DType::I4G128> : I4Groups<128> {};
template <>
struct Weights<DType::I4G256> : I4Groups<256> {};

// The minimum multiplies the activations' ds for int4 types, s (float16, as llama.cpp) for ggml's.
template <DType T>
constexpr bool kMinTimesDs = T == DType::I4 || T == DType::I4G32 || T == DType::I4G64 || T == DType::I4G128 || T == DType::I4G256;

template <DType T>
float min_operand(const Q8Block& x) {
  return kMinTimesDs<T> ? x.ds : x.s;
}

// Q4_K's super-block: 256 values in eight sub-blocks of 32, each with a 6-bit scale and minimum; the
// activations come with one scale per 256 (quantize_q8_256). Its step per super-block is
//     acc = fma(float(sum_j sc_j * (u_j . x_j)), d * xd, acc); acc = fma(-dmin * xd, float(sum_j mn_j * sum(x_j)), acc)
template <>
struct Weights<DType::Q4_K> {
  using Block = quant::BlockQ4_K;
  static constexpr bool kSigned = false;
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

// Q5_K: Q4_K with a fifth bit per value in qh (sub-block 2p's in bit 2p of each byte, 2p + 1's in bit 2p + 1).
template <>
struct Weights<DType::Q5_K> {
  using Block = quant::BlockQ5_K;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static const quant::BlockQ5_K& block(const uint8_t* row, int64_t sb) { return reinterpret_cast<const quant::BlockQ5_K*>(row)[sb]; }
  static void unpack(const quant::BlockQ5_K& blk, uint8_t (*out)[32]) {
    const __m256i low = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
    const __m256i qh = load32(blk.qh);
    for (int p = 0; p < 4; ++p) {
      const __m256i v = load32(blk.qs + 32 * p), h = _mm256_srli_epi16(qh, 2 * p);
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[2 * p]),
                         _mm256_or_si256(_mm256_and_si256(v, low), _mm256_slli_epi16(_mm256_and_si256(h, one), 4)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[2 * p + 1]),
                         _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), _mm256_slli_epi16(_mm256_and_si256(h, two), 3)));
    }
  }
};

// Q6_K: 256 six-bit values q in sixteen runs of 16, each with an int8 scale; the weight is d * sc * (q - 32).
// Its integer per super-block is sum_runs sc_r * ((q . x)_r - 32 * sum(x)_r).
template <>
struct Weights<DType::Q6_K> {
  using Block = quant::BlockQ6_K;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static const Block& block(const uint8_t* row, int64_t sb) { return reinterpret_cast<const Block*>(row)[sb]; }
  // The values in activation order: block 4h + k of the super-block is quarter k of half h (low nibbles
  // of ql's 64 bytes for quarters 0 and 1, high ones for 2 and 3; the top two bits from qh, 2k up).
  // quarters() gives a half's four blocks of unsigned values (0..63); unpack() stores all eight.
  [[gnu::always_inline]] static void quarters(const Block& blk, int half, __m256i* u) {
    const __m256i mask = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    const __m256i ql0 = load32(blk.ql + 64 * half), ql1 = load32(blk.ql + 64 * half + 32), qh = load32(blk.qh + 32 * half);
    const __m256i low[4] = {_mm256_and_si256(ql0, mask), _mm256_and_si256(ql1, mask), _mm256_and_si256(_mm256_srli_epi16(ql0, 4), mask),
                            _mm256_and_si256(_mm256_srli_epi16(ql1, 4), mask)};
    for (int k = 0; k < 4; ++k) u[k] = _mm256_or_si256(low[k], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), three), 4));
  }
  static void unpack(const Block& blk, uint8_t (*out)[32]) {
    for (int half = 0; half < 2; ++half) {
      __m256i u[4];
      quarters(blk, half, u);
      for (int k = 0; k < 4; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(out[4 * half + k]), u[k]);
    }
  }
};

// Q2_K and Q3_K: 256 values in sixteen runs of 16, each with its own scale, two bits a value in four planes
// of each half's 32 bytes (sub-block 4h + j is plane j of bytes 32h..32h+31). Q2_K: value = d * sc * q - dmin
// * m (4-bit sc and m per run); Q3_K: value = d * (sc - 32) * (q - 4), q's third bit (4) in hmask (bit
// 4h + j of byte l), sc six bits (ggml's 12-byte packing).
template <DType T, typename B>
struct Runs16 {
  using Block = B;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static const Block& block(const uint8_t* row, int64_t sb) { return reinterpret_cast<const Block*>(row)[sb]; }
  // Sub-block 4h + j as unsigned bytes (Q3_K's q + 4).
  static __m256i plane(const Block& blk, int h, int j) {
    const __m256i u = _mm256_and_si256(_mm256_srli_epi16(load32(blk.qs + 32 * h), 2 * j), _mm256_set1_epi8(3));
    if constexpr (T == DType::Q3_K)
      return _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(load32(blk.hmask), 4 * h + j), _mm256_set1_epi8(1)), 2));
    return u;
  }
  // The 256 values in activation order.
  static void unpack(const Block& blk, uint8_t (*out)[32]) {
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(out[4 * h + j]), plane(blk, h, j));
  }
};
template <>
struct Weights<DType::Q2_K> : Runs16<DType::Q2_K, quant::BlockQ2_K> {};
template <>
struct Weights<DType::Q3_K> : Runs16<DType::Q3_K, quant::BlockQ3_K> {
  static int scale(const Block& blk, int i) { return quant::decode::q3_k_scale(blk.scales, i); }  // less 32
};
template <DType T>
constexpr bool kRuns16 = T == DType::Q2_K || T == DType::Q3_K;
// The K-quants whose values have a minimum (-dmin * m) besides the scaled quant.
template <DType T>
constexpr bool kHasMins = T == DType::Q2_K || T == DType::Q4_K || T == DType::Q5_K;

template <DType T>
inline __m256i block_dot(__m256i acc, __m256i w, __m256i x) {
  if constexpr (Weights<T>::kSigned) return dot_s8s8(acc, w, x);
  else return dot_u8s8(acc, w, x);
}


// A super-block type with 6-bit scales and minimums: its unit is eight blocks.
template <DType T>
constexpr bool kSuper = T == DType::Q4_K || T == DType::Q5_K;

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

// The one-row kernel's eight-row shapes, for unsigned weights of at most 31 against activations of
// magnitude at most 128, where a lane of four products (or a pair of lanes) fits int16: their block dots
// are reduced by narrowing to int16 and adding neighbours (vpackssdw, vpmaddwd), exact within that bound
// and cheaper on the shuffle ports than sum_lanes4's unpacks, which set the one-row pace.
// - kHalfRows (plain 4-bit nibbles, at most 15): a register holds two rows' 16 nibble bytes, [row j | row
//   j + 4]; its low nibbles are values 0-15 of each row and meet activations 0-15 in both halves, its high
//   ones values 16-31, so one dot chain leaves four lanes per row of eight products (at most 15360)
//   and one narrowing round less to go;
// - otherwise each row's 32 values in a register of its own, eight lanes of four products.
// Without AVX-512's 32 vector registers eight rows of 32 values spill, and the types that need them
// (Q5_*, MXFP4) ran slower than on the four-row kernel (measured, Zen 4, the AVX2 table).
template <DType T>
constexpr bool kHalfRows = T == DType::Q4_0 || T == DType::Q4_1 || T == DType::I4 || T == DType::I4G32 || T == DType::I4G64 ||
                           T == DType::I4G128 || T == DType::I4G256;
#ifdef FTLLM_VNNI
constexpr bool kEightRowsOfBytes = true;
#else
constexpr bool kEightRowsOfBytes = false;
#endif
template <DType T>
constexpr bool kNarrowLanes = !Weights<T>::kSigned && Weights<T>::kMaxByte * 128 * 8 <= 32767 && (kHalfRows<T> || kEightRowsOfBytes);

// Rows i and i + 4 (d[i], i < 4) each as four int32 lanes in their own 128-bit half, summed to row i in lane i.
inline __m256i sum_half_rows(const __m256i* d) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i rows01 = _mm256_madd_epi16(_mm256_packs_epi32(d[0], d[1]), ones);  // [0 0 1 1 | 4 4 5 5]
  const __m256i rows23 = _mm256_madd_epi16(_mm256_packs_epi32(d[2], d[3]), ones);  // [2 2 3 3 | 6 6 7 7]
  return _mm256_madd_epi16(_mm256_packs_epi32(rows01, rows23), ones);
}

// Eight rows' dots d[0..7], eight int32 lanes each, summed to one lane per row, row i in lane i.
inline __m256i sum_lanes8_narrow(const __m256i* d) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i pairs[4], quads[2];
  for (int i = 0; i < 4; ++i)  // rows 2i, 2i + 1: lane pairs (0+1, 2+3 of each row | 4+5, 6+7)
    pairs[i] = _mm256_madd_epi16(_mm256_packs_epi32(d[2 * i], d[2 * i + 1]), ones);
  for (int i = 0; i < 2; ++i)  // rows 4i..4i + 3: lanes 0-3 of each | lanes 4-7
    quads[i] = _mm256_madd_epi16(_mm256_packs_epi32(pairs[2 * i], pairs[2 * i + 1]), ones);
  return _mm256_add_epi32(_mm256_permute2x128_si256(quads[0], quads[1], 0x20), _mm256_permute2x128_si256(quads[0], quads[1], 0x31));
}

inline __m256i broadcast16(const void* p) { return _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p))); }

// Block b of eight weight rows, unpacked once for every activation row (the shapes above).
template <DType T>
[[gnu::always_inline]] inline void unpack8(const uint8_t* const* r, int64_t b, __m256i* u) {
  if constexpr (kHalfRows<T>) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_blend_epi32(broadcast16(Weights<T>::nibble_bytes(r[j], b)), broadcast16(Weights<T>::nibble_bytes(r[j + 4], b)), 0xF0);
      u[2 * j] = _mm256_and_si256(v, low);
      u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
  } else {
    for (int j = 0; j < 8; ++j) u[j] = Weights<T>::bytes(r[j], b);
  }
}

// The eight rows' exact block dots against activation block xb, row i in lane i (the offset included).
template <DType T>
[[gnu::always_inline]] inline __m256i dots8(const __m256i* u, const Q8Block& xb) {
  __m256i d[8], dots;
  if constexpr (kHalfRows<T>) {
    const __m256i first = broadcast16(xb.q), second = broadcast16(xb.q + 16);
    for (int j = 0; j < 4; ++j) d[j] = dot_u8s8_twice(u[2 * j], first, u[2 * j + 1], second);
    dots = sum_half_rows(d);
  } else {
    const __m256i xv = load32(xb.q);
    for (int j = 0; j < 8; ++j) d[j] = dot_u8s8(_mm256_setzero_si256(), u[j], xv);
    dots = sum_lanes8_narrow(d);
  }
  if constexpr (Weights<T>::kOffset != 0) dots = _mm256_add_epi32(dots, _mm256_set1_epi32(-Weights<T>::kOffset * xb.sum));
  return dots;
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
  int64_t n = n0;
  if constexpr (kNarrowLanes<T>)
    for (; n + 8 <= n1; n += 8) {  // eight rows at a time (unpack8, dots8)
      using Wt = Weights<T>;
      const uint8_t* r[8];
      for (int i = 0; i < 8; ++i) r[i] = w + size_t(n + i) * row_bytes;
      AheadLines ahead(r[0] + size_t(8) * row_bytes, 8 * row_bytes, nb, n + 16 <= n1);
      auto eight = [&](__m128 (*four)(const uint8_t* const*, int64_t), int64_t b) { return _mm256_set_m128(four(r + 4, b), four(r, b)); };
      __m256 acc[R];
      for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
      __m256 wscales = _mm256_set1_ps(1.0f), wmins = _mm256_setzero_ps();
      if constexpr (T == DType::I4) wscales = eight(Wt::scales4, 0), wmins = eight(Wt::mins4, 0);
      for (int64_t b = 0; b < nb; ++b) {
        ahead.step();
        __m256i u[8];
        unpack8<T>(r, b, u);
        if constexpr (T != DType::I4) wscales = eight(Wt::scales4, b);
        if constexpr (Wt::kHasMin && T != DType::I4) wmins = eight(Wt::mins4, b);
        for (int i = 0; i < R; ++i) {
          const Q8Block& xb = x[i * nb + b];
          const __m256i dots = dots8<T>(u, xb);
          acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), _mm256_mul_ps(wscales, _mm256_set1_ps(xb.d)), acc[i]);
          if constexpr (Wt::kHasMin) acc[i] = _mm256_fmadd_ps(wmins, _mm256_set1_ps(min_operand<T>(xb)), acc[i]);
        }
      }
      for (int i = 0; i < R; ++i) {
        alignas(32) float out[8];
        _mm256_store_ps(out, acc[i]);
        for (int j = 0; j < 8; ++j) y[i * ldy + n + j] = finish<T>(r[j], out[j]);
      }
    }
  for (; n + 4 <= n1; n += 4) {
    const uint8_t* r[4] = {w + size_t(n) * row_bytes, w + size_t(n + 1) * row_bytes, w + size_t(n + 2) * row_bytes,
                           w + size_t(n + 3) * row_bytes};
    AheadLines ahead(r[0] + size_t(kAheadRows) * row_bytes, 4 * row_bytes, nb, n + 4 + kAheadRows <= n1);
    __m128 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm_setzero_ps();
    using Wt = Weights<T>;
    // int4's scale and minimum are the row's: read once, not per block.
    __m128 wscales = _mm_set1_ps(1.0f), wmins = _mm_setzero_ps();
    if constexpr (T == DType::I4) wscales = Wt::scales4(r, 0), wmins = Wt::mins4(r, 0);
    for (int64_t b = 0; b < nb; ++b) {
      ahead.step();
      const __m256i u[4] = {Wt::bytes(r[0], b), Wt::bytes(r[1], b), Wt::bytes(r[2], b), Wt::bytes(r[3], b)};
      if constexpr (Wt::kHasScale && T != DType::I4) wscales = Wt::scales4(r, b);
      if constexpr (Wt::kHasMin && T != DType::I4) wmins = Wt::mins4(r, b);
      for (int i = 0; i < R; ++i) {
        const Q8Block& xb = x[i * nb + b];
        const __m256i xv = load32(xb.q), o = start(i, b);
        const __m128i dots = sum_lanes4(block_dot<T>(o, u[0], xv), block_dot<T>(o, u[1], xv), block_dot<T>(o, u[2], xv),
                                        block_dot<T>(o, u[3], xv));
        const __m128 xd = _mm_set1_ps(xb.d);
        acc[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(dots), Wt::kHasScale ? _mm_mul_ps(wscales, xd) : xd, acc[i]);
        if constexpr (Wt::kHasMin) acc[i] = _mm_fmadd_ps(wmins, _mm_set1_ps(min_operand<T>(xb)), acc[i]);
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
        if constexpr (Weights<T>::kHasMin) acc = std::fma(Weights<T>::min(r, b), min_operand<T>(x[i * nb + b]), acc);
      }
      y[i * ldy + n] = finish<T>(r, acc);
    }
  }
}

// Eight registers of eight int32 each (row i's 4-byte chunks), turned so that register j holds chunk j
// of all eight rows, row i in lane i.
[[gnu::always_inline]] inline void transpose8(__m256i* v) {
  __m256i t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);      // chunks 0, 1 | 4, 5 of rows 2i, 2i + 1
    t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);  // chunks 2, 3 | 6, 7
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    s[4 * h] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);          // chunk 0 | 4 of four rows
    s[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);      // 1 | 5
    s[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);  // 2 | 6
    s[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);  // 3 | 7
  }
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_permute2x128_si256(s[j], s[4 + j], 0x20);
    v[j + 4] = _mm256_permute2x128_si256(s[j], s[4 + j], 0x31);
  }
}

// Weight rows [n0, n1) against R activation rows (2 to 5: a small decode batch or prefill chunk), eight
// weight rows at a time with each vector lane a weight row: a block of the eight rows is unpacked and
// turned once (transpose8), then every activation row's block is dotted against it by broadcasting its
// 4-byte chunks, and the eight lanes are the eight rows' block dots, with nothing left to add across
// lanes. (rows_times_weights_few adds its four rows' lanes per activation row; that sum, not the weights,
// set the pace from two rows up.) The float steps are the same, lane by lane, so the sums are equal to the bit.
template <DType T, int R>
void rows_times_weights_lanes(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y,
                              int64_t ldy) {
  using Wt = Weights<T>;
  int64_t n = n0;
  for (; n + 8 <= n1; n += 8) {
    const uint8_t* r[8];
    for (int i = 0; i < 8; ++i) r[i] = w + size_t(n + i) * row_bytes;
    AheadLines ahead(r[0] + size_t(8) * row_bytes, 8 * row_bytes, nb, n + 16 <= n1);
    __m256 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
    auto eight = [&](__m128 (*four)(const uint8_t* const*, int64_t), int64_t b) { return _mm256_set_m128(four(r + 4, b), four(r, b)); };
    __m256 wscales = _mm256_set1_ps(1.0f), wmins = _mm256_setzero_ps();
    if constexpr (T == DType::I4) wscales = eight(Wt::scales4, 0), wmins = eight(Wt::mins4, 0);
    for (int64_t b = 0; b < nb; ++b) {
      ahead.step();
      __m256i u[8];
      for (int i = 0; i < 8; ++i) u[i] = Wt::bytes(r[i], b);
      transpose8(u);
      __m256i magnitude[8];  // signed weights: |w| is the unsigned operand, w's sign goes onto x
      if constexpr (Wt::kSigned)
        for (int j = 0; j < 8; ++j) magnitude[j] = _mm256_sign_epi8(u[j], u[j]);
      if constexpr (Wt::kHasScale && T != DType::I4) wscales = eight(Wt::scales4, b);
      if constexpr (Wt::kHasMin && T != DType::I4) wmins = eight(Wt::mins4, b);
      for (int i = 0; i < R; ++i) {
        const Q8Block& xb = x[i * nb + b];
        // Two chains of dots, not one of eight: a dot waits for the one before it (4-5 cycles).
        __m256i chain[2] = {_mm256_set1_epi32(-Wt::kOffset * xb.sum), _mm256_setzero_si256()};
        for (int j = 0; j < 8; ++j) {
          const __m256i xj = broadcast4(xb.q + 4 * j);
          if constexpr (Wt::kSigned) chain[j % 2] = dot_u8s8(chain[j % 2], magnitude[j], _mm256_sign_epi8(xj, u[j]));
          else chain[j % 2] = dot_u8s8(chain[j % 2], u[j], xj);
        }
        const __m256i dots = _mm256_add_epi32(chain[0], chain[1]);
        const __m256 xd = _mm256_set1_ps(xb.d);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), Wt::kHasScale ? _mm256_mul_ps(wscales, xd) : xd, acc[i]);
        if constexpr (Wt::kHasMin) acc[i] = _mm256_fmadd_ps(wmins, _mm256_set1_ps(min_operand<T>(xb)), acc[i]);
      }
    }
    for (int i = 0; i < R; ++i) {
      alignas(32) float out[8];
      _mm256_store_ps(out, acc[i]);
      for (int j = 0; j < 8; ++j) y[i * ldy + n + j] = finish<T>(r[j], out[j]);
    }
  }
  if (n < n1) rows_times_weights_few<T, R>(x, nb, w, row_bytes, n, n1, y, ldy);
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

// rows_times_weights_lanes on sixteen weight rows at a time, for the unsigned block types and up to
// sixteen activation rows: row i of the sixteen in lane i of 512-bit registers, so each activation chunk
// (broadcast by the dot product itself) and each dot product serve twice the rows, and the turn of a
// block is one transpose of eight register pairs. Every lane takes the eight-row kernel's steps (its
// two chains, its float steps), so the bits are the same.
template <DType T, int R>
void rows_times_weights_lanes16(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y,
                                int64_t ldy) {
  using Wt = Weights<T>;
  static_assert(T != DType::I4);
  // Signed weights go in as unsigned bytes w + 128 (the dot's unsigned operand); the dots start 128 *
  // sum(x) lower instead.
  constexpr int kLaneOffset = Wt::kSigned ? 128 : Wt::kOffset;
  int64_t n = n0;
  for (; n + 16 <= n1; n += 16) {
    const uint8_t* r[16];
    for (int i = 0; i < 16; ++i) r[i] = w + size_t(n + i) * row_bytes;
    AheadLines ahead(r[0] + size_t(16) * row_bytes, 16 * row_bytes, nb, n + 32 <= n1);
    __m512 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      ahead.step();
      __m512i v[8];
      for (int i = 0; i < 8; ++i) v[i] = join(Wt::bytes(r[i], b), Wt::bytes(r[i + 8], b));
      turn16(v);
      if constexpr (Wt::kSigned)
        for (int j = 0; j < 8; ++j) v[j] = _mm512_xor_si512(v[j], _mm512_set1_epi8(char(0x80)));
      __m512 wscales = _mm512_set1_ps(1.0f);
      if constexpr (Wt::kHasScale) wscales = join_ps(Wt::scales4(r, b), Wt::scales4(r + 4, b), Wt::scales4(r + 8, b), Wt::scales4(r + 12, b));
      __m512 wmins = _mm512_setzero_ps();
      if constexpr (Wt::kHasMin) wmins = join_ps(Wt::mins4(r, b), Wt::mins4(r + 4, b), Wt::mins4(r + 8, b), Wt::mins4(r + 12, b));
      for (int i = 0; i < R; ++i) {
        const Q8Block& xb = x[i * nb + b];
        __m512i chain[2] = {_mm512_set1_epi32(-kLaneOffset * xb.sum), _mm512_setzero_si512()};
        for (int j = 0; j < 8; ++j) chain[j % 2] = dpbusd_broadcast(chain[j % 2], v[j], xb.q + 4 * j);
        const __m512i dots = _mm512_add_epi32(chain[0], chain[1]);
        const __m512 xd = _mm512_set1_ps(xb.d);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots), Wt::kHasScale ? _mm512_mul_ps(wscales, xd) : xd, acc[i]);
        if constexpr (Wt::kHasMin) acc[i] = _mm512_fmadd_ps(wmins, _mm512_set1_ps(min_operand<T>(xb)), acc[i]);
      }
    }
    for (int i = 0; i < R; ++i) {
      alignas(64) float out[16];
      _mm512_store_ps(out, acc[i]);
      for (int j = 0; j < 16; ++j) y[i * ldy + n + j] = finish<T>(r[j], out[j]);
    }
  }
  if (n < n1) rows_times_weights_lanes<T, R>(x, nb, w, row_bytes, n, n1, y, ldy);
}
#endif

// The super-block sb of rows + ahead (rows to come) asked for from memory.
template <typename Block, int W>
[[gnu::always_inline]] inline void prefetch_superblock(const uint8_t* const* rows, size_t ahead, int64_t sb) {
  if (!ahead) return;
  for (int w = 0; w < W; ++w)
    for (size_t line = 0; line < sizeof(Block); line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(rows[w] + ahead + sizeof(Block) * size_t(sb) + line), _MM_HINT_T0);
}

// One K-quant weight row's super-block sb against R activation rows (nb blocks each, one after another):
// per row, the sub-block dots times their scales (as lanes to be added) and the minimums' sum_j mn_j * sum(x_j).
template <DType T, int R>
[[gnu::always_inline]] inline void super_dots_k(const Q8Block* x, int64_t nb, const uint8_t* row, int64_t sb, __m256i* isum,
                                                int32_t* msum) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const auto& blk = Weights<T>::block(row, sb);
  alignas(8) uint8_t sc[8], mn[8];
  k_scale_bytes(blk.scales, sc, mn);
  for (int i = 0; i < R; ++i) isum[i] = _mm256_setzero_si256();
  for (int p = 0; p < 4; ++p) {
    const __m256i v = load32(blk.qs + 32 * p);
    __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    if constexpr (T == DType::Q5_K) {  // bits 2p and 2p + 1 of each qh byte, worth 16
      const __m256i h = _mm256_srli_epi16(load32(blk.qh), 2 * p);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(1)), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(2)), 3));
    }
    const __m256i s0 = _mm256_set1_epi16(sc[2 * p]), s1 = _mm256_set1_epi16(sc[2 * p + 1]);
    for (int i = 0; i < R; ++i) {
      const Q8Block* xb = x + i * nb + sb * 8 + 2 * p;
      // u <= 31 and |x| <= 127: the byte-pair sums fit int16, then times the 6-bit scale in int32.
      const __m256i p0 = _mm256_maddubs_epi16(lo, load32(xb[0].q)), p1 = _mm256_maddubs_epi16(hi, load32(xb[1].q));
      isum[i] = dot_i16(dot_i16(isum[i], p0, s0), p1, s1);
    }
  }
  for (int i = 0; i < R; ++i) {
    msum[i] = 0;
    for (int j = 0; j < 8; ++j) msum[i] += int32_t(mn[j]) * x[i * nb + sb * 8 + j].sum;
  }
}

// Q6_K's super-block sb of one weight row against R activation rows: per row, the integer
// sum_runs sc_r * ((q - 32) . x)_r as lanes to be added (the offset taken off the byte pairs).
template <int R>
[[gnu::always_inline]] inline void super_dots_q6k(const Q8Block* x, int64_t nb, const uint8_t* row, int64_t sb, __m256i* isum) {
  const __m256i offset = _mm256_set1_epi8(32);
  const auto& blk = Weights<DType::Q6_K>::block(row, sb);
  for (int i = 0; i < R; ++i) isum[i] = _mm256_setzero_si256();
  for (int half = 0; half < 2; ++half) {
    __m256i values[4];
    Weights<DType::Q6_K>::quarters(blk, half, values);
    for (int k = 0; k < 4; ++k) {
      const __m256i u = values[k];
      const int8_t* sc = blk.scales + 8 * half + 2 * k;
      const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
      for (int i = 0; i < R; ++i) {
        const __m256i xv = load32(x[i * nb + sb * 8 + 4 * half + k].q);
        // |u x + u' x'| <= 16002 and |32 (x + x')| <= 8128: int16 holds both and their difference.
        const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(u, xv), _mm256_maddubs_epi16(offset, xv));
        isum[i] = dot_i16(isum[i], pairs, scales);
      }
    }
  }
}

// Q2_K's or Q3_K's super-block sb of one weight row against R activation rows: per row, the integer
// sum_runs sc_r * (q . x)_r (Q3_K: (sc_r - 32) * ((q - 4) . x)_r, the offset taken off the byte pairs) as
// lanes to be added, and (Q2_K) sum_runs m_r * sum(x)_r in msum.
template <DType T, int R>
[[gnu::always_inline]] inline void super_dots_runs16(const Q8Block* x, int64_t nb, const uint8_t* row, int64_t sb, __m256i* isum,
                                                     int32_t* msum) {
  const auto& blk = Weights<T>::block(row, sb);
  int16_t scale[16];
  uint8_t mins[16];
  for (int i = 0; i < 16; ++i) {
    if constexpr (T == DType::Q2_K) scale[i] = int16_t(blk.scales[i] & 0xF), mins[i] = uint8_t(blk.scales[i] >> 4);
    else scale[i] = int16_t(Weights<T>::scale(blk, i));
  }
  __m256i mins_x[R];  // Q2_K: sum_l m_run(l) * x_l, as lanes to be added
  for (int i = 0; i < R; ++i) isum[i] = mins_x[i] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      const __m256i u = Weights<T>::plane(blk, h, j);
      const int run = 8 * h + 2 * j;
      const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(scale[run + 1]), _mm_set1_epi16(scale[run]));
      for (int i = 0; i < R; ++i) {
        const Q8Block& xb = x[i * nb + sb * 8 + 4 * h + j];
        const __m256i xv = load32(xb.q);
        // u <= 7 and |x| <= 127: the byte pairs (less Q3_K's 4 * (x + x')) fit int16.
        __m256i pairs = _mm256_maddubs_epi16(u, xv);
        if constexpr (T == DType::Q3_K) pairs = _mm256_sub_epi16(pairs, _mm256_maddubs_epi16(_mm256_set1_epi8(4), xv));
        isum[i] = dot_i16(isum[i], pairs, scales);
        if constexpr (T == DType::Q2_K)
          mins_x[i] = dot_i16(mins_x[i], _mm256_maddubs_epi16(_mm256_set_m128i(_mm_set1_epi8(int8_t(mins[run + 1])), _mm_set1_epi8(int8_t(mins[run]))), xv),
                              _mm256_set1_epi16(1));
      }
    }
  }
  if constexpr (T == DType::Q2_K)
    for (int i = 0; i < R; ++i) msum[i] = sum_lanes(mins_x[i]);
}

// A super-block's dots for any K-quant (Q6_K has no minimums: msum is left alone).
template <DType T, int R>
[[gnu::always_inline]] inline void super_dots(const Q8Block* x, int64_t nb, const uint8_t* row, int64_t sb, __m256i* isum, int32_t* msum) {
  if constexpr (T == DType::Q6_K) super_dots_q6k<R>(x, nb, row, sb, isum);
  else if constexpr (kRuns16<T>) super_dots_runs16<T, R>(x, nb, row, sb, isum, msum);
  else super_dots_k<T, R>(x, nb, row, sb, isum, msum);
}

// Q4_K, Q5_K and Q6_K: weight rows [n0, n1) against R activation rows (nb blocks each, one after another),
// into y (rows ldy apart): four weight rows' super-blocks side by side, each unpacked once for the R rows.
template <DType T, int R>
void rows_times_super_few(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y,
                      int64_t ldy) {
  using K = Weights<T>;
  constexpr bool kMins = kHasMins<T>;
  const int64_t supers = nb / 8;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const uint8_t* r[4] = {w + size_t(n) * row_bytes, w + size_t(n + 1) * row_bytes, w + size_t(n + 2) * row_bytes,
                           w + size_t(n + 3) * row_bytes};
    AheadLines ahead(r[0] + size_t(kAheadRows) * row_bytes, 4 * row_bytes, supers, n + 4 + kAheadRows <= n1);
    __m128 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm_setzero_ps();
    for (int64_t sb = 0; sb < supers; ++sb) {
      ahead.step();
      __m256i i0[R], i1[R], i2[R], i3[R];
      int32_t m0[R], m1[R], m2[R], m3[R];
      super_dots<T, R>(x, nb, r[0], sb, i0, m0);
      super_dots<T, R>(x, nb, r[1], sb, i1, m1);
      super_dots<T, R>(x, nb, r[2], sb, i2, m2);
      super_dots<T, R>(x, nb, r[3], sb, i3, m3);
      const __m128 d = widen4(K::block(r[0], sb).d, K::block(r[1], sb).d, K::block(r[2], sb).d, K::block(r[3], sb).d);
      __m128 neg_dmin = _mm_setzero_ps();
      if constexpr (kMins)
        neg_dmin = _mm_sub_ps(_mm_setzero_ps(), widen4(K::block(r[0], sb).dmin, K::block(r[1], sb).dmin, K::block(r[2], sb).dmin,
                                                       K::block(r[3], sb).dmin));
      for (int i = 0; i < R; ++i) {
        const __m128 xd = _mm_set1_ps(x[i * nb + sb * 8].d);
        acc[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(sum_lanes4(i0[i], i1[i], i2[i], i3[i])), _mm_mul_ps(d, xd), acc[i]);
        if constexpr (kMins)
          acc[i] = _mm_fmadd_ps(_mm_mul_ps(neg_dmin, xd), _mm_cvtepi32_ps(_mm_setr_epi32(m0[i], m1[i], m2[i], m3[i])), acc[i]);
      }
    }
    for (int i = 0; i < R; ++i) _mm_storeu_ps(y + i * ldy + n, acc[i]);
  }
  for (; n < n1; ++n) {
    const uint8_t* r = w + size_t(n) * row_bytes;
    float acc[R] = {};
    for (int64_t sb = 0; sb < supers; ++sb) {
      __m256i isum[R];
      int32_t ms[R];
      super_dots<T, R>(x, nb, r, sb, isum, ms);
      const float d = h2f(K::block(r, sb).d);
      for (int i = 0; i < R; ++i) {
        const float xd = x[i * nb + sb * 8].d;
        acc[i] = std::fma(float(sum_lanes(isum[i])), d * xd, acc[i]);
        if constexpr (kMins) acc[i] = std::fma(-h2f(K::block(r, sb).dmin) * xd, float(ms[i]), acc[i]);
      }
    }
    for (int i = 0; i < R; ++i) y[i * ldy + n] = acc[i];
  }
}

#ifdef FTLLM_VNNI
// 32 bytes at `offset` in super-block sb of each of sixteen rows, turned (turn16): v[c] holds bytes
// 4c..4c+3 of each row, row i in lane i.
template <typename Block>
[[gnu::always_inline]] inline void turned_bytes(const uint8_t* const* r, int64_t sb, size_t offset, __m512i* v) {
  const size_t at = sizeof(Block) * size_t(sb) + offset;
  for (int i = 0; i < 8; ++i) v[i] = join(load32(r[i] + at), load32(r[i + 8] + at));
  turn16(v);
}

// Super-block sb of sixteen K-quant rows as unsigned values, turned: out[j][c] holds chunk c of sub-block
// j (values 32j + 4c .. 32j + 4c + 3) of every row, row i in lane i. The packed bytes are turned first and
// split into values after: every unpacking step (Weights<T>::unpack) works on each byte in its place, so
// it gives the same bytes either way, and one turn of packed bytes serves two sub-blocks (Q4_K).
template <DType T>
[[gnu::always_inline]] inline void turned_super(const uint8_t* const* r, int64_t sb, __m512i (*out)[8]) {
  using Block = typename Weights<T>::Block;
  const __m512i mask = _mm512_set1_epi8(0x0F);
  if constexpr (T == DType::Q6_K) {
    const __m512i three = _mm512_set1_epi8(3);
    for (int half = 0; half < 2; ++half) {  // Weights<Q6_K>::quarters
      __m512i ql0[8], ql1[8], qh[8];
      turned_bytes<Block>(r, sb, offsetof(Block, ql) + 64 * half, ql0);
      turned_bytes<Block>(r, sb, offsetof(Block, ql) + 64 * half + 32, ql1);
      turned_bytes<Block>(r, sb, offsetof(Block, qh) + 32 * half, qh);
      for (int c = 0; c < 8; ++c) {
        const __m512i low[4] = {_mm512_and_si512(ql0[c], mask), _mm512_and_si512(ql1[c], mask),
                                _mm512_and_si512(_mm512_srli_epi16(ql0[c], 4), mask), _mm512_and_si512(_mm512_srli_epi16(ql1[c], 4), mask)};
        for (int k = 0; k < 4; ++k)
          out[4 * half + k][c] = _mm512_or_si512(low[k], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[c], 2 * k), three), 4));
      }
    }
  } else if constexpr (kRuns16<T>) {  // plane j of half h's bytes is sub-block 4h + j (Q3_K: bit 4h + j of hmask, worth 4)
    __m512i hm[8];
    if constexpr (T == DType::Q3_K) turned_bytes<Block>(r, sb, offsetof(Block, hmask), hm);
    for (int h = 0; h < 2; ++h) {
      __m512i qs[8];
      turned_bytes<Block>(r, sb, offsetof(Block, qs) + 32 * h, qs);
      for (int j = 0; j < 4; ++j)
        for (int c = 0; c < 8; ++c) {
          __m512i u = _mm512_and_si512(_mm512_srli_epi16(qs[c], 2 * j), _mm512_set1_epi8(3));
          if constexpr (T == DType::Q3_K)
            u = _mm512_or_si512(u, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hm[c], 4 * h + j), _mm512_set1_epi8(1)), 2));
          out[4 * h + j][c] = u;
        }
    }
  } else {
    __m512i qh[8];
    if constexpr (T == DType::Q5_K) turned_bytes<Block>(r, sb, offsetof(Block, qh), qh);
    for (int p = 0; p < 4; ++p) {  // Weights<Q4_K>::unpack (and Q5_K's)
      __m512i qs[8];
      turned_bytes<Block>(r, sb, offsetof(Block, qs) + 32 * p, qs);
      for (int c = 0; c < 8; ++c) {
        __m512i lo = _mm512_and_si512(qs[c], mask), hi = _mm512_and_si512(_mm512_srli_epi16(qs[c], 4), mask);
        if constexpr (T == DType::Q5_K) {  // bits 2p and 2p + 1 of each qh byte, worth 16
          const __m512i h = _mm512_srli_epi16(qh[c], 2 * p);
          lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(1)), 4));
          hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(2)), 3));
        }
        out[2 * p][c] = lo;
        out[2 * p + 1][c] = hi;
      }
    }
  }
}

// rows_times_super_few on sixteen weight rows at a time, row i in lane i of 512-bit registers, against up
// to sixteen activation rows (rows_times_weights_lanes16's shape for the 32-value blocks): a super-block
// of the sixteen rows is unpacked and turned once for all of them, and each activation word is
// broadcast by the dot itself. Each lane's integer is the few-rows kernel's (the sub-block or run dots,
// exact, times their scales) and its float steps are that kernel's, so the bits are the same. In the last
// sixteen, rows past n1 repeat the last row and are not stored.
template <DType T, int R>
void rows_times_super_lanes16(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y,
                              int64_t ldy) {
  using K = Weights<T>;
  constexpr bool kRuns = T == DType::Q6_K || kRuns16<T>;  // a scale per run of 16 values, not per sub-block
  constexpr bool kMins = kHasMins<T>;
  const int64_t supers = nb / 8;
  alignas(64) __m512i values[8][8];
  // Each activation block's two halves' sums as an int16 pair (for the runs' offsets or minimums).
  thread_local std::vector<int32_t> halves;
  if constexpr (kRuns) {
    halves.resize(size_t(R * nb));
    for (int64_t i = 0; i < R * nb; ++i) halves[size_t(i)] = half_sums(x[i]);
  }
  for (int64_t n = n0; n < n1; n += 16) {
    const int live = int(std::min<int64_t>(16, n1 - n));
    const uint8_t* r[16];
    for (int i = 0; i < 16; ++i) r[i] = w + size_t(n + std::min(i, live - 1)) * row_bytes;
    AheadLines ahead(r[0] + size_t(16) * row_bytes, 16 * row_bytes, supers, n + 32 <= n1);
    const __m512i rows = _mm512_mullo_epi32(_mm512_min_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                             _mm512_set1_epi32(live - 1)),
                                            _mm512_set1_epi32(int32_t(row_bytes)));  // byte offsets of r[i] from r[0]
    alignas(64) float acc[R][16];
    for (int a = 0; a < R; ++a) _mm512_store_ps(acc[a], _mm512_setzero_ps());
    for (int64_t sb = 0; sb < supers; ++sb) {
      ahead.step();
      turned_super<T>(r, sb, values);
      // The sixteen rows' scale words, gathered (row i's in lane i) and taken apart lane by lane.
      const uint8_t* at = r[0] + sizeof(typename K::Block) * size_t(sb);
      auto word = [&](size_t offset) { return _mm512_i32gather_epi32(rows, at + offset, 1); };
      const __m512i ff = _mm512_set1_epi32(0xff);
      __m512i packed[4];  // the scale bytes as words, taken apart by scales() and (Q2_K) run_pairs
      __m512 d, neg_dmin = _mm512_setzero_ps();
      if constexpr (T == DType::Q4_K || T == DType::Q5_K) {  // scales 0-3, 4-7, minimums 0-3, 4-7
        const __m512i dd = word(0), a = word(4), b = word(8), c = word(12);  // k_scale_bytes' A, B, C
        const __m512i low6 = _mm512_set1_epi32(0x3f3f3f3f), nibble = _mm512_set1_epi32(0x0f0f0f0f), two = _mm512_set1_epi32(0x03030303);
        packed[0] = _mm512_and_si512(a, low6);
        packed[1] = _mm512_or_si512(_mm512_and_si512(c, nibble), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a, 6), two), 4));
        packed[2] = _mm512_and_si512(b, low6);
        packed[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), nibble), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 6), two), 4));
        d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
        neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
      } else if constexpr (T == DType::Q2_K) {  // sixteen bytes: scale (low nibble) and minimum (high) of each run
        for (int q = 0; q < 4; ++q) packed[q] = word(offsetof(typename K::Block, scales) + 4 * q);
        const __m512i dd = word(offsetof(typename K::Block, d));
        d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
        neg_dmin = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
      } else {  // Q6_K: sixteen signed bytes; Q3_K: the twelve bytes of six-bit scales
        for (int q = 0; q < (T == DType::Q6_K ? 4 : 3); ++q) packed[q] = word(offsetof(typename K::Block, scales) + 4 * q);
        d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(word(offsetof(typename K::Block, d) - 2), 16)));
      }
      // Scale k of every row: Q4_K / Q5_K sub-block k's, the others run k's (Q3_K's less 32).
      auto scales = [&](int k) {
        auto byte = [&](__m512i w, int i, int shift = 0) { return _mm512_srli_epi32(w, 8 * i + shift); };
        if constexpr (T == DType::Q4_K || T == DType::Q5_K) return _mm512_and_si512(byte(packed[k / 4], k % 4), ff);
        else if constexpr (T == DType::Q6_K) return _mm512_srai_epi32(_mm512_slli_epi32(packed[k / 4], 24 - 8 * (k % 4)), 24);
        else if constexpr (T == DType::Q2_K) return _mm512_and_si512(byte(packed[k / 4], k % 4), _mm512_set1_epi32(0xF));
        else {  // Weights<Q3_K>::scale
          const __m512i low = _mm512_and_si512(byte(packed[(k % 8) / 4], k % 4, k < 8 ? 0 : 4), _mm512_set1_epi32(0xF));
          const __m512i high = _mm512_and_si512(byte(packed[2], k % 4, 2 * (k / 4)), _mm512_set1_epi32(3));
          return _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high, 4)), _mm512_set1_epi32(32));
        }
      };
      // Two values per int32 lane as an int16 pair.
      auto pair = [](__m512i first, __m512i second) { return _mm512_or_si512(_mm512_and_si512(first, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(second, 16)); };
      __m512i isum[R];
      for (int a = 0; a < R; ++a) isum[a] = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        __m512i v[8];
        for (int c = 0; c < 8; ++c) v[c] = _mm512_load_si512(&values[j][c]);
        if constexpr (!kRuns) {
          const __m512i sc = scales(j);
#pragma GCC unroll 16
          for (int a = 0; a < R; ++a) {
            const int8_t* q = x[a * nb + sb * 8 + j].q;
            __m512i chain[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
            for (int c = 0; c < 8; ++c) chain[c % 2] = dpbusd_broadcast(chain[c % 2], v[c], q + 4 * c);
            isum[a] = _mm512_add_epi32(isum[a], _mm512_mullo_epi32(_mm512_add_epi32(chain[0], chain[1]), sc));
          }
        } else {  // two runs of 16 values (their offsets or minimums below)
          const __m512i sc0 = scales(2 * j), sc1 = scales(2 * j + 1);
#pragma GCC unroll 16
          for (int a = 0; a < R; ++a) {
            const int8_t* q = x[a * nb + sb * 8 + j].q;
            __m512i run[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
            for (int c = 0; c < 8; ++c) run[c / 4] = dpbusd_broadcast(run[c / 4], v[c], q + 4 * c);
            isum[a] = _mm512_add_epi32(isum[a], _mm512_add_epi32(_mm512_mullo_epi32(run[0], sc0), _mm512_mullo_epi32(run[1], sc1)));
          }
        }
      }
      // The runs' offsets (Q6_K: isum -= 32 * sum_runs sc_r * sum(x_r); Q3_K: 4 * ...) and Q2_K's minimums
      // (sum_runs m_r * sum(x_r)): a block's two runs as an int16 pair against the pair of its halves'
      // sums (each at most 16 * 128). Q4_K / Q5_K: a minimum per sub-block against each block's sum.
      __m512i run_pairs[8], min_pairs[4];
      if constexpr (kRuns)
        for (int k = 0; k < 8; ++k) {
          if constexpr (T == DType::Q2_K) {
            const __m512i m = _mm512_srli_epi32(packed[k / 2], 16 * (k % 2) + 4);  // the minimums: high nibbles
            run_pairs[k] = pair(_mm512_and_si512(m, _mm512_set1_epi32(0xF)), _mm512_and_si512(_mm512_srli_epi32(m, 8), _mm512_set1_epi32(0xF)));
          } else {
            run_pairs[k] = pair(scales(2 * k), scales(2 * k + 1));
          }
        }
      if constexpr (T == DType::Q6_K || T == DType::Q3_K) {
        constexpr int kShift = T == DType::Q6_K ? 5 : 2;  // the offset: 32 or 4
        for (int a = 0; a < R; ++a) {
          __m512i offsets = _mm512_setzero_si512();
          for (int k = 0; k < 8; ++k) offsets = _mm512_dpwssd_epi32(offsets, run_pairs[k], _mm512_set1_epi32(halves[size_t(a * nb + sb * 8 + k)]));
          isum[a] = _mm512_sub_epi32(isum[a], _mm512_slli_epi32(offsets, kShift));
        }
      }
      if constexpr (T == DType::Q4_K || T == DType::Q5_K)
        for (int k = 0; k < 4; ++k) {
          const __m512i m = _mm512_srli_epi32(packed[2 + k / 2], 16 * (k % 2));  // its bytes 0, 1: the pair
          min_pairs[k] = pair(_mm512_and_si512(m, ff), _mm512_and_si512(_mm512_srli_epi32(m, 8), ff));
        }
      for (int a = 0; a < R; ++a) {
        const Q8Block* xs = x + a * nb + sb * 8;
        const __m512 xd = _mm512_set1_ps(xs[0].d);
        __m512 acc_a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[a]), _mm512_mul_ps(d, xd), _mm512_load_ps(acc[a]));
        if constexpr (kMins) {
          // sum_j mn_j * sum(x_j), exact: each activation block's sum fits int16 (at most 32 * 128)
          __m512i msum = _mm512_setzero_si512();
          if constexpr (T == DType::Q2_K)
            for (int k = 0; k < 8; ++k) msum = _mm512_dpwssd_epi32(msum, run_pairs[k], _mm512_set1_epi32(halves[size_t(a * nb + sb * 8 + k)]));
          else
            for (int k = 0; k < 4; ++k) {
              const uint32_t sums = uint32_t(uint16_t(xs[2 * k].sum)) | uint32_t(xs[2 * k + 1].sum) << 16;
              msum = _mm512_dpwssd_epi32(msum, min_pairs[k], _mm512_set1_epi32(int32_t(sums)));
            }
          acc_a = _mm512_fmadd_ps(_mm512_mul_ps(neg_dmin, xd), _mm512_cvtepi32_ps(msum), acc_a);
        }
        _mm512_store_ps(acc[a], acc_a);
      }
    }
    for (int a = 0; a < R; ++a)
      for (int i = 0; i < live; ++i) y[a * ldy + n + i] = acc[a][i];
  }
}

// ---- One activation row against K-quants, 512 bits at a time ----------------------------------------
// A 64-byte load of Q4_K's packed bytes holds the nibbles of two pairs of sub-blocks: its low nibbles are
// sub-blocks 4q and 4q + 2, its high ones 4q + 1 and 4q + 3. The activation row is laid out once per call
// in that order (kOneRowOrder), so each half meets its own block; Q6_K's halves come in block order.
// (Q2_K and Q3_K: below.)
template <DType T>
constexpr int kOneRowOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
template <>
constexpr int kOneRowOrder<DType::Q6_K>[8] = {0, 1, 2, 3, 4, 5, 6, 7};
// Q2_K / Q3_K: a 64-byte load holds both halves' bytes, and its plane j is sub-blocks j and 4 + j.
template <>
constexpr int kOneRowOrder<DType::Q2_K>[8] = {0, 4, 1, 5, 2, 6, 3, 7};
template <>
constexpr int kOneRowOrder<DType::Q3_K>[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// int16 word `a` of `words` in the result's words 0-15, word `b` in words 16-31.
inline __m512i two_words(__m512i words, int a, int b) {
  return _mm512_permutexvar_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(int16_t(a))), _mm256_set1_epi16(int16_t(b)), 1),
                                  words);
}

// One weight row's super-block as four registers of 64 unsigned values, u[k] meeting the activations' bytes
// 64k..64k+63 as kOneRowOrder lays them out, and each one's scales as int16 words for its byte pairs
// (Q4_K, Q5_K: from the row's eight scales, given as words). The byte pairs of values (at most 31, or
// Q6_K's 63 less its offset 32) and activations (at most 127) fit int16, as in super_dots_k /
// super_dots_q6k, whose integers these give.
template <DType T>
[[gnu::always_inline]] inline void super_values(const typename Weights<T>::Block& blk, __m256i scale_words, __m512i* u, __m512i* s) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const int64_t one = 0x0001000100010001;  // 1 in each int16 word
  if constexpr (kRuns16<T>) {  // the sixteen runs' scales given as words
    const __m512i words = _mm512_castsi256_si512(scale_words), q = _mm512_loadu_si512(blk.qs);
    __m512i hm;
    if constexpr (T == DType::Q3_K) hm = _mm512_broadcast_i64x4(load32(blk.hmask));
    for (int j = 0; j < 4; ++j) {  // plane j: sub-blocks j (runs 2j, 2j + 1) and 4 + j (runs 8 + 2j, 9 + 2j)
      u[j] = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), _mm512_set1_epi8(3));
      if constexpr (T == DType::Q3_K) {  // sub-block k's third bit: bit k of each hmask byte, worth 4
        const __m512i h = _mm512_srlv_epi16(hm, _mm512_inserti64x4(_mm512_set1_epi16(int16_t(j)), _mm256_set1_epi16(int16_t(4 + j)), 1));
        u[j] = _mm512_or_si512(u[j], _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(1)), 2));
      }
      s[j] = _mm512_permutexvar_epi16(_mm512_setr_epi64(2 * j * one, 2 * j * one, (2 * j + 1) * one, (2 * j + 1) * one, (8 + 2 * j) * one,
                                                        (8 + 2 * j) * one, (9 + 2 * j) * one, (9 + 2 * j) * one),
                                      words);
    }
  } else if constexpr (T == DType::Q6_K) {
    const __m512i scales = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales))));
    const __m512i three = _mm512_set1_epi8(3);
    const __m512i run_of_lane = _mm512_setr_epi64(0, 0, one, one, 2 * one, 2 * one, 3 * one, 3 * one);
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * half);  // quarters 0 and 1 (low nibbles), 2 and 3 (high)
      const __m512i qh = _mm512_broadcast_i64x4(load32(blk.qh + 32 * half));
      // quarter k's top bits sit at bit 2k of qh's bytes: 0 and 2 for the low pair, 4 and 6 for the high one
      const __m512i h01 = _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1));
      const __m512i h23 = _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1));
      u[2 * half] = _mm512_or_si512(_mm512_and_si512(ql, mask), _mm512_slli_epi16(_mm512_and_si512(h01, three), 4));
      u[2 * half + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), mask), _mm512_slli_epi16(_mm512_and_si512(h23, three), 4));
      // runs of 16 values, one per 128-bit lane: runs 8 half .. 8 half + 3, then 8 half + 4 .. 8 half + 7
      s[2 * half] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_set1_epi16(int16_t(8 * half)), run_of_lane), scales);
      s[2 * half + 1] = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_set1_epi16(int16_t(8 * half + 4)), run_of_lane), scales);
    }
  } else {
    const __m512i words = _mm512_castsi256_si512(scale_words);
    __m512i qh;
    if constexpr (T == DType::Q5_K) qh = _mm512_broadcast_i64x4(load32(blk.qh));
    for (int q = 0; q < 2; ++q) {
      const __m512i v = _mm512_loadu_si512(blk.qs + 64 * q);
      __m512i lo = _mm512_and_si512(v, mask), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
      if constexpr (T == DType::Q5_K) {  // sub-block j's fifth bits: bit j of each qh byte, worth 16
        const __m512i h = _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(int16_t(4 * q)), _mm256_set1_epi16(int16_t(4 * q + 2)), 1));
        lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(1)), 4));
        hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(2)), 3));
      }
      u[2 * q] = lo, u[2 * q + 1] = hi;
      s[2 * q] = two_words(words, 4 * q, 4 * q + 2);
      s[2 * q + 1] = two_words(words, 4 * q + 1, 4 * q + 3);
    }
  }
}

// Sixteen int32 lanes folded to eight (exact: integers).
inline __m256i fold16(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }

// Q4_K / Q5_K's packed scale bytes of four rows (the first 16 bytes of each one's super-block) taken
// apart together (k_scale_bytes on four lanes): each row's eight scales and eight minimums as int16
// words, and d and -dmin.
struct FourRowScales {
  __m256i words[4] = {}, mins[4] = {};
  __m128 d, neg_dmin;
  // Each row's sum_j mn_j * sum(x_j), row i in lane i, against the activation blocks' (or runs') sums
  // as int16 words.
  __m128i min_sums(__m256i sums) const {
    __m256i m[4];
    for (int i = 0; i < 4; ++i) m[i] = _mm256_madd_epi16(mins[i], sums);
    return sum_lanes4(m[0], m[1], m[2], m[3]);
  }
};
inline FourRowScales four_row_scales(const uint8_t* const* heads) {
  __m128i v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(heads[i]));
  const __m128i t0 = _mm_unpacklo_epi32(v[0], v[1]), t1 = _mm_unpackhi_epi32(v[0], v[1]);
  const __m128i t2 = _mm_unpacklo_epi32(v[2], v[3]), t3 = _mm_unpackhi_epi32(v[2], v[3]);
  // word k of every row, row i in lane i: d | dmin, then k_scale_bytes' A, B, C
  const __m128i dd = _mm_unpacklo_epi64(t0, t2), a = _mm_unpackhi_epi64(t0, t2), b = _mm_unpacklo_epi64(t1, t3), c = _mm_unpackhi_epi64(t1, t3);
  const __m128i low6 = _mm_set1_epi32(0x3f3f3f3f), nibble = _mm_set1_epi32(0x0f0f0f0f), two = _mm_set1_epi32(0x03030303);
  const __m128i sc_lo = _mm_and_si128(a, low6), mn_lo = _mm_and_si128(b, low6);
  const __m128i sc_hi = _mm_or_si128(_mm_and_si128(c, nibble), _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(a, 6), two), 4));
  const __m128i mn_hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi32(c, 4), nibble), _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(b, 6), two), 4));
  // rows 0, 1 then 2, 3: eight bytes each
  const __m128i sc[2] = {_mm_unpacklo_epi32(sc_lo, sc_hi), _mm_unpackhi_epi32(sc_lo, sc_hi)};
  const __m128i mn[2] = {_mm_unpacklo_epi32(mn_lo, mn_hi), _mm_unpackhi_epi32(mn_lo, mn_hi)};
  FourRowScales out;
  for (int i = 0; i < 4; ++i) {
    out.words[i] = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(i % 2 ? _mm_srli_si128(sc[i / 2], 8) : sc[i / 2]));
    out.mins[i] = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(i % 2 ? _mm_srli_si128(mn[i / 2], 8) : mn[i / 2]));
  }
  out.d = _mm_cvtph_ps(_mm_cvtepi32_epi16(dd));
  out.neg_dmin = _mm_sub_ps(_mm_setzero_ps(), _mm_cvtph_ps(_mm_cvtepi32_epi16(_mm_srli_epi32(dd, 16))));
  return out;
}

// Q2_K's and Q3_K's run scales of four rows as sixteen int16 words each (Q3_K's less 32; Weights<Q3_K>::scale
// on sixteen bytes at once), Q2_K's minimums too, and d (Q2_K: -dmin).
template <DType T>
inline FourRowScales four_row_run_scales(const typename Weights<T>::Block* const* blocks) {
  FourRowScales out;
  for (int i = 0; i < 4; ++i) {
    const auto& blk = *blocks[i];
    if constexpr (T == DType::Q2_K) {
      const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
      out.words[i] = _mm256_and_si256(bytes, _mm256_set1_epi16(0xF));
      out.mins[i] = _mm256_srli_epi16(bytes, 4);
    } else {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales));
      const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(b, _mm_set1_epi8(0xF)), _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0xF)));
      int32_t c;
      std::memcpy(&c, blk.scales + 8, 4);  // run i's top two bits: bits 2 (i / 4) of byte i % 4
      const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(c), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
      out.words[i] = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_or_si128(low, _mm_slli_epi16(high, 4))), _mm256_set1_epi16(32));
    }
  }
  out.d = widen4(blocks[0]->d, blocks[1]->d, blocks[2]->d, blocks[3]->d);
  if constexpr (T == DType::Q2_K)
    out.neg_dmin = _mm_sub_ps(_mm_setzero_ps(), widen4(blocks[0]->dmin, blocks[1]->dmin, blocks[2]->dmin, blocks[3]->dmin));
  return out;
}

// rows_times_super_few for one to four activation rows (decode, a small batch), each weight super-block's
// values taken 64 at a time and the scales of four weight rows taken apart together: the same integers
// and float steps, so the same bits. In the last four, rows past n1 repeat the last row and are not stored.
template <DType T, int R>
void rows_times_super_one(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  using K = Weights<T>;
  constexpr bool kMins = kHasMins<T>;
  constexpr bool kOffsets = T == DType::Q6_K || T == DType::Q3_K;
  const int64_t supers = nb / 8;
  // Each activation row's super-blocks in kOneRowOrder, with the byte pairs' offsets (Q6_K: 32 * (x + x'),
  // Q3_K: 4 * (x + x')) and the sums the minimums meet (Q4_K, Q5_K: the eight blocks'; Q2_K: the sixteen runs').
  struct alignas(64) LaidOut {
    int8_t q[256];
    int16_t offsets[128];
    __m256i sums;
  };
  thread_local std::vector<LaidOut> laid_out;
  laid_out.resize(size_t(R * supers));
  for (int a = 0; a < R; ++a)
    for (int64_t sb = 0; sb < supers; ++sb) {
      LaidOut& o = laid_out[size_t(a * supers + sb)];
      const Q8Block* xs = x + a * nb + sb * 8;
      for (int j = 0; j < 8; ++j) std::memcpy(o.q + 32 * j, xs[kOneRowOrder<T>[j]].q, 32);
      if constexpr (T == DType::Q2_K) {
        alignas(32) int32_t runs[8];  // int16 pairs: the runs in order
        for (int j = 0; j < 8; ++j) runs[j] = half_sums(xs[j]);
        o.sums = _mm256_load_si256(reinterpret_cast<const __m256i*>(runs));
      } else if constexpr (kMins) {
        o.sums = _mm256_zextsi128_si256(_mm_setr_epi16(int16_t(xs[0].sum), int16_t(xs[1].sum), int16_t(xs[2].sum), int16_t(xs[3].sum),
                                                       int16_t(xs[4].sum), int16_t(xs[5].sum), int16_t(xs[6].sum), int16_t(xs[7].sum)));
      } else {
        for (int k = 0; k < 4; ++k)
          _mm512_store_si512(o.offsets + 32 * k, _mm512_maddubs_epi16(_mm512_set1_epi8(T == DType::Q6_K ? 32 : 4), _mm512_load_si512(o.q + 64 * k)));
      }
    }
  for (int64_t n = n0; n < n1; n += 4) {
    const int live = int(std::min<int64_t>(4, n1 - n));
    const uint8_t* r[4];
    for (int i = 0; i < 4; ++i) r[i] = w + size_t(n + std::min(i, live - 1)) * row_bytes;
    AheadLines ahead(r[0] + size_t(kAheadRows) * row_bytes, 4 * row_bytes, supers, n + 4 + kAheadRows <= n1);
    __m128 acc[R];
    for (int a = 0; a < R; ++a) acc[a] = _mm_setzero_ps();
    for (int64_t sb = 0; sb < supers; ++sb) {
      ahead.step();
      const auto blk = [&](int i) -> const typename K::Block& { return K::block(r[i], sb); };
      FourRowScales f;
      if constexpr (kRuns16<T>) {
        const typename K::Block* blocks[4] = {&blk(0), &blk(1), &blk(2), &blk(3)};
        f = four_row_run_scales<T>(blocks);
      } else if constexpr (kMins) {
        const uint8_t* heads[4] = {reinterpret_cast<const uint8_t*>(&blk(0)), reinterpret_cast<const uint8_t*>(&blk(1)),
                                   reinterpret_cast<const uint8_t*>(&blk(2)), reinterpret_cast<const uint8_t*>(&blk(3))};
        f = four_row_scales(heads);
      } else {
        f.d = widen4(blk(0).d, blk(1).d, blk(2).d, blk(3).d);
      }
      __m512i isum[4][R];
      for (int i = 0; i < 4; ++i) {
        __m512i u[4], s[4];
        super_values<T>(blk(i), f.words[i], u, s);
        for (int a = 0; a < R; ++a) {
          const LaidOut& o = laid_out[size_t(a * supers + sb)];
          isum[i][a] = _mm512_setzero_si512();
          for (int k = 0; k < 4; ++k) {
            __m512i pairs = _mm512_maddubs_epi16(u[k], _mm512_load_si512(o.q + 64 * k));
            if constexpr (kOffsets) pairs = _mm512_sub_epi16(pairs, _mm512_load_si512(o.offsets + 32 * k));
            isum[i][a] = _mm512_dpwssd_epi32(isum[i][a], pairs, s[k]);
          }
        }
      }
      for (int a = 0; a < R; ++a) {
        const __m128 xd = _mm_set1_ps(x[a * nb + sb * 8].d);
        const __m128i dots = sum_lanes4(fold16(isum[0][a]), fold16(isum[1][a]), fold16(isum[2][a]), fold16(isum[3][a]));
        acc[a] = _mm_fmadd_ps(_mm_cvtepi32_ps(dots), _mm_mul_ps(f.d, xd), acc[a]);
        if constexpr (kMins)
          acc[a] = _mm_fmadd_ps(_mm_mul_ps(f.neg_dmin, xd), _mm_cvtepi32_ps(f.min_sums(laid_out[size_t(a * supers + sb)].sums)), acc[a]);
      }
    }
    for (int a = 0; a < R; ++a) {
      alignas(16) float out[4];
      _mm_store_ps(out, acc[a]);
      for (int i = 0; i < live; ++i) y[a * ldy + n + i] = out[i];
    }
  }
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

// Block b of W weight rows as 32 bytes each, chunks[w]: unpacked into unpacked[w] where the type packs
// them, read in place otherwise. With `ahead`, the same block of the rows that far on is asked for from
// memory (the rows the next tile reads) while these are summed.
template <DType T, int W>
[[gnu::always_inline]] inline void weight_chunks(const uint8_t* const* rows, int64_t b, size_t ahead, uint8_t (*unpacked)[32],
                                                 const uint8_t** chunks) {
  for (int w = 0; w < W; ++w) {
    if (ahead) _mm_prefetch(static_cast<const char*>(static_cast<const void*>(Weights<T>::at(rows[w] + ahead, b))), _MM_HINT_T0);
    if constexpr (Weights<T>::kPacked) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked[w]), Weights<T>::bytes(rows[w], b));
      chunks[w] = unpacked[w];
    } else {
      chunks[w] = Weights<T>::chunks(rows[w], b);
    }
  }
}

// W weight rows against G groups of eight activation rows, over all nb blocks: out[w][g] (eight lanes).
template <DType T, int W, int G>
[[gnu::always_inline]] inline void tile(const Octet* const* x, int64_t nb, const uint8_t* const* rows, size_t ahead, __m256* out) {
  __m256 acc[W][G];
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) acc[w][g] = _mm256_setzero_ps();
  alignas(32) uint8_t unpacked[W][32];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* chunks[W];
    weight_chunks<T, W>(rows, b, ahead, unpacked, chunks);
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
    for (int c = 0; c < 8; ++c) {
      for (int w = 0; w < W; ++w) {
        __m256i wc = broadcast4(chunks[w] + 4 * c);
#ifdef FTLLM_VNNI
        // Signed weights as unsigned bytes w + 128; the transposed rows' start took 128 * sum(q) off.
        if constexpr (Weights<T>::kSigned) wc = _mm256_xor_si256(wc, _mm256_set1_epi8(char(0x80)));
        for (int g = 0; g < G; ++g) dots[w][g] = _mm256_dpbusd_epi32(dots[w][g], wc, load32(x[g][b].chunk[c]));
#else
        if constexpr (Weights<T>::kSigned) {
          const __m256i magnitude = _mm256_sign_epi8(wc, wc);
          for (int g = 0; g < G; ++g)
            dots[w][g] = dot_u8s8(dots[w][g], magnitude, _mm256_sign_epi8(load32(x[g][b].chunk[c]), wc));
        } else {
          for (int g = 0; g < G; ++g) pairs[w][g] = _mm256_add_epi16(pairs[w][g], _mm256_maddubs_epi16(wc, load32(x[g][b].chunk[c])));
        }
#endif
      }
#ifndef FTLLM_VNNI
      // Unsigned bytes times int8 pair up to 2 * kMaxByte * 127 per int16 lane: as many chunks as still
      // fit add as int16 (8 for nibbles, 4 for five bits), then widen.
      constexpr int kPairChunks = 32767 / (2 * Weights<T>::kMaxByte * 127) >= 8 ? 8 : 4;
      if constexpr (!Weights<T>::kSigned)
        if (c % kPairChunks == kPairChunks - 1)
          for (int w = 0; w < W; ++w)
            for (int g = 0; g < G; ++g) {
              dots[w][g] = _mm256_add_epi32(dots[w][g], _mm256_madd_epi16(pairs[w][g], _mm256_set1_epi16(1)));
              pairs[w][g] = _mm256_setzero_si256();
            }
#endif
    }
    for (int w = 0; w < W; ++w) {
      const __m256 ws = _mm256_set1_ps(Weights<T>::scale(rows[w], b));
      for (int g = 0; g < G; ++g) {
        acc[w][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[w][g]), _mm256_mul_ps(ws, _mm256_load_ps(x[g][b].d)), acc[w][g]);
        if constexpr (Weights<T>::kHasMin)
          acc[w][g] = _mm256_fmadd_ps(_mm256_set1_ps(Weights<T>::min(rows[w], b)), _mm256_load_ps(x[g][b].s), acc[w][g]);
      }
    }
  }
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) out[w * G + g] = acc[w][g];
}

#ifdef FTLLM_VNNI
// AVX-512's registers hold two groups of eight activation rows: lanes 0-7 group g, 8-15 group g + 1.
inline __m512i load_pair(const void* low, const void* high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load32(low)), load32(high), 1);
}
inline __m512 load_pair_ps(const float* low, const float* high) { return _mm512_castsi512_ps(load_pair(low, high)); }

// tile() with 512-bit vectors: W weight rows against P pairs of groups (x[2p], x[2p + 1]), out[w][2p + j]
// as tile() leaves it. Every lane takes the same steps as tile()'s, so the bits are the same; each
// weight chunk broadcast now meets sixteen activation rows per instruction instead of eight.
template <DType T, int W, int P>
[[gnu::always_inline]] inline void tile_wide(const Octet* const* x, int64_t nb, const uint8_t* const* rows, size_t ahead, __m256* out) {
  __m512 acc[W][P];
  for (int w = 0; w < W; ++w)
    for (int p = 0; p < P; ++p) acc[w][p] = _mm512_setzero_ps();
  alignas(32) uint8_t unpacked[W][32];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* chunks[W];
    weight_chunks<T, W>(rows, b, ahead, unpacked, chunks);
    __m512i dots[W][P];
    for (int p = 0; p < P; ++p) {
      const __m512i start = load_pair(x[2 * p][b].start, x[2 * p + 1][b].start);
      for (int w = 0; w < W; ++w) dots[w][p] = start;
    }
    // Broadcast each 4-byte word from memory (a load): held in registers instead, the compiler extracts
    // the words with two shuffles each, and the shuffle port, not the dot products, set the pace.
    if constexpr (Weights<T>::kPacked) asm volatile("" : : "r"(unpacked) : "memory");
    for (int c = 0; c < 8; ++c) {
      __m512i xc[P];
      for (int p = 0; p < P; ++p) xc[p] = load_pair(x[2 * p][b].chunk[c], x[2 * p + 1][b].chunk[c]);
      for (int w = 0; w < W; ++w) {
        int32_t word;
        std::memcpy(&word, chunks[w] + 4 * c, 4);
        __m512i wc = _mm512_set1_epi32(word);
        if constexpr (Weights<T>::kSigned) wc = _mm512_xor_si512(wc, _mm512_set1_epi8(char(0x80)));
        for (int p = 0; p < P; ++p) dots[w][p] = _mm512_dpbusd_epi32(dots[w][p], wc, xc[p]);
      }
    }
    for (int p = 0; p < P; ++p) {
      const __m512 d = load_pair_ps(x[2 * p][b].d, x[2 * p + 1][b].d);
      for (int w = 0; w < W; ++w) {
        acc[w][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[w][p]), _mm512_mul_ps(_mm512_set1_ps(Weights<T>::scale(rows[w], b)), d), acc[w][p]);
        if constexpr (Weights<T>::kHasMin)
          acc[w][p] = _mm512_fmadd_ps(_mm512_set1_ps(Weights<T>::min(rows[w], b)), load_pair_ps(x[2 * p][b].s, x[2 * p + 1][b].s), acc[w][p]);
      }
    }
  }
  for (int w = 0; w < W; ++w)
    for (int p = 0; p < P; ++p) {
      out[w * 2 * P + 2 * p] = _mm512_castps512_ps256(acc[w][p]);
      out[w * 2 * P + 2 * p + 1] = _mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(acc[w][p]), 1));
    }
}
#endif

#ifndef FTLLM_VNNI  // (the AVX-512 tables take the K-quants through rows_times_super_lanes16)
// Q4_K and Q5_K: W weight rows against G groups of eight activation rows, a super-block at a time.
template <DType T, int W, int G>
[[gnu::always_inline]] inline void tile_k(const Octet* const* x, int64_t nb, const uint8_t* const* rows, size_t ahead, __m256* out) {
  using K = Weights<T>;
  __m256 acc[W][G];
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) acc[w][g] = _mm256_setzero_ps();
  alignas(32) uint8_t nibbles[W][8][32];
  alignas(8) uint8_t sc[W][8], mn[W][8];
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    prefetch_superblock<typename K::Block, W>(rows, ahead, sb);
    for (int w = 0; w < W; ++w) {
      K::unpack(K::block(rows[w], sb), nibbles[w]);
      k_scale_bytes(K::block(rows[w], sb).scales, sc[w], mn[w]);
    }
    __m256i isum[W][G];
    for (int w = 0; w < W; ++w)
      for (int g = 0; g < G; ++g) isum[w][g] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const int64_t b = sb * 8 + j;
      __m256i part[W][G];
      for (int w = 0; w < W; ++w)
        for (int g = 0; g < G; ++g) part[w][g] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        for (int w = 0; w < W; ++w) {
          const __m256i wc = broadcast4(nibbles[w][j] + 4 * c);
          for (int g = 0; g < G; ++g)
            part[w][g] = _mm256_add_epi16(part[w][g], _mm256_maddubs_epi16(wc, load32(x[g][b].chunk[c])));
        }
        // The int16 pairs hold eight chunks of nibbles or four of five-bit values (see tile), then go
        // into int32 times the sub-block's scale.
        constexpr int kPairChunks = T == DType::Q4_K ? 8 : 4;
        if (c % kPairChunks == kPairChunks - 1)
          for (int w = 0; w < W; ++w)
            for (int g = 0; g < G; ++g) {
              isum[w][g] = _mm256_add_epi32(isum[w][g], _mm256_madd_epi16(part[w][g], _mm256_set1_epi16(sc[w][j])));
              part[w][g] = _mm256_setzero_si256();
            }
      }
    }
    for (int w = 0; w < W; ++w) {
      const auto& blk = K::block(rows[w], sb);
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

// Q6_K, Q2_K and Q3_K (runs of 16 values, each with its scale): W weight rows against G groups of eight
// activation rows, a super-block at a time. The few-rows kernel's integers (Q6_K and Q3_K: the runs'
// offsets 32 or 4 times their activations' sums taken off; Q2_K: its minimums against them) and float steps.
template <DType T, int W, int G>
[[gnu::always_inline]] inline void tile_runs16(const Octet* const* x, int64_t nb, const uint8_t* const* rows, size_t ahead, __m256* out) {
  using K = Weights<T>;
  __m256 acc[W][G];
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) acc[w][g] = _mm256_setzero_ps();
  alignas(32) uint8_t values[W][8][32];
  int16_t scale[W][16], mins[W][16];
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    prefetch_superblock<typename K::Block, W>(rows, ahead, sb);
    for (int w = 0; w < W; ++w) {
      const auto& blk = K::block(rows[w], sb);
      K::unpack(blk, values[w]);
      for (int r = 0; r < 16; ++r) {
        if constexpr (T == DType::Q6_K) scale[w][r] = blk.scales[r];
        else if constexpr (T == DType::Q3_K) scale[w][r] = int16_t(K::scale(blk, r));
        else scale[w][r] = int16_t(blk.scales[r] & 0xF), mins[w][r] = int16_t(blk.scales[r] >> 4);
      }
    }
    __m256i isum[W][G];
    for (int w = 0; w < W; ++w)
      for (int g = 0; g < G; ++g) isum[w][g] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const int64_t b = sb * 8 + j;
      for (int run = 0; run < 2; ++run) {  // values 16 run .. 16 run + 15 of the block: chunks 4 run .. 4 run + 3
        __m256i part[W][G];
        for (int w = 0; w < W; ++w)
          for (int g = 0; g < G; ++g) part[w][g] = _mm256_setzero_si256();
        for (int c = 4 * run; c < 4 * run + 4; ++c) {
          for (int w = 0; w < W; ++w) {
            const __m256i wc = broadcast4(values[w][j] + 4 * c);
            for (int g = 0; g < G; ++g)
              part[w][g] = _mm256_add_epi16(part[w][g], _mm256_maddubs_epi16(wc, load32(x[g][b].chunk[c])));
          }
          // Six-bit values times int8 pair up to 16002 per int16 lane: two chunks fit, then widen times the scale.
          if (c % 2 == 1)
            for (int w = 0; w < W; ++w)
              for (int g = 0; g < G; ++g) {
                isum[w][g] = _mm256_add_epi32(isum[w][g], _mm256_madd_epi16(part[w][g], _mm256_set1_epi16(scale[w][2 * j + run])));
                part[w][g] = _mm256_setzero_si256();
              }
        }
      }
    }
    for (int w = 0; w < W; ++w) {
      const auto& blk = K::block(rows[w], sb);
      const __m256 d = _mm256_set1_ps(h2f(blk.d));
      for (int g = 0; g < G; ++g) {
        // sum_runs v_r * sum(x)_r (v: the scales, or Q2_K's minimums), two runs per block as int16 pairs.
        __m256i runs = _mm256_setzero_si256();
        const int16_t* v = T == DType::Q2_K ? mins[w] : scale[w];
        for (int j = 0; j < 8; ++j)
          runs = _mm256_add_epi32(runs, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(x[g][sb * 8 + j].half_sums)),
                                                          _mm256_set1_epi32(int16_pair(v[2 * j], v[2 * j + 1]))));
        const __m256 xd = _mm256_load_ps(x[g][sb * 8].d);
        if constexpr (T == DType::Q2_K) {
          acc[w][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[w][g]), _mm256_mul_ps(d, xd), acc[w][g]);
          const __m256 neg_dmin = _mm256_set1_ps(-h2f(blk.dmin));
          acc[w][g] = _mm256_fmadd_ps(_mm256_mul_ps(neg_dmin, xd), _mm256_cvtepi32_ps(runs), acc[w][g]);
        } else {
          const __m256i total = _mm256_sub_epi32(isum[w][g], _mm256_slli_epi32(runs, T == DType::Q6_K ? 5 : 2));
          acc[w][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, xd), acc[w][g]);
        }
      }
    }
  }
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) out[w * G + g] = acc[w][g];
}
#endif

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

template <DType T>
void rows_times_weights(const Q8Block* xq, int64_t M, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1,
                        float* y, int64_t ldy) {
  thread_local std::vector<Octet> octets;
  transpose_rows<T>(xq, M, nb, octets);
  const int64_t groups = (M + 7) / 8;
  // Cache blocking: tiles of about 256 KB of weight rows and of activation groups, one of them held in
  // L2 while the other streams past it.
  const int64_t group_bytes = nb * int64_t(sizeof(Octet));
  const int64_t g_tile = std::max<int64_t>(kTileGroups, (256 << 10) / std::max<int64_t>(group_bytes, 1) / kTileGroups * kTileGroups);
  const int64_t n_tile = std::max<int64_t>(kTileRows, int64_t((256 << 10) / row_bytes) / kTileRows * kTileRows);
  // W weight rows from n against G activation groups from g; the last groups of a tile (g_end) prefetch
  // the next W rows.
  auto run = [&]<int W, int G>(int64_t n, int64_t g, int64_t g_end) {
    const Octet* xs[G];
    for (int j = 0; j < G; ++j) xs[j] = octets.data() + (g + j) * nb;
    const uint8_t* rows[W];
    for (int i = 0; i < W; ++i) rows[i] = w + size_t(n + i) * row_bytes;
    __m256 out[W * G];
    const size_t ahead = g + G >= g_end && n + 2 * W <= n1 ? W * row_bytes : 0;
#ifdef FTLLM_VNNI
    if constexpr (G % 2 == 0) tile_wide<T, W, G / 2>(xs, nb, rows, ahead, out);
#else
    if constexpr (T == DType::Q6_K || kRuns16<T>) tile_runs16<T, W, G>(xs, nb, rows, ahead, out);
    else if constexpr (kSuper<T>) tile_k<T, W, G>(xs, nb, rows, ahead, out);
#endif
    else tile<T, W, G>(xs, nb, rows, ahead, out);
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
    if constexpr (!kSuper<T> && T != DType::Q6_K)
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

// The 32-value block types go through the lane kernels, L activation rows at a time (sixteen on the
// AVX-512 tables, eight on AVX2) against L weight rows a lane each, for batches of up to this many rows
// (0: never; every batch: kAnyRows). Against the GEMM's tiles (whose dots need a separate broadcast of
// each weight word) Zen 5 ran, one thread, Q4_0: 8 rows 1.75x, 16 rows 1.35x and a prefill 1.1x as fast
// on AVX-512; on AVX2 8 rows 1.1x and from 16 rows 1.06x (Q4_1 1.1x). Signed weights (Q8_0, int8) take
// them only up to sixteen rows on AVX-512 (a prefill ran 0.75x: their tiles broadcast the weights
// straight from their rows, with no unpacking) and never on AVX2 (its sign steps lost 3-7%); on AVX2
// five-bit values and MXFP4 only up to eight rows (beyond, the tiles' int16 sums won: 16 rows of Q5_0
// ran 0.87x, MXFP4 0.87x). The K-quants take every batch through theirs on AVX-512
// (rows_times_super_lanes16) and none on AVX2, whose GEMM tiles keep them.
constexpr int64_t kAnyRows = INT64_MAX;
#ifdef FTLLM_VNNI
constexpr int kLaneRows = 16;
constexpr int kSuperOneRows = 2;
#else
constexpr int kLaneRows = 8;
#endif
template <DType T>
constexpr int64_t lane_kernel_rows() {
  if constexpr (T == DType::I4) return 0;
#ifdef FTLLM_VNNI
  else if constexpr (kSuper<T> || T == DType::Q6_K || kRuns16<T>) return kAnyRows;
  else return Weights<T>::kSigned ? 16 : kAnyRows;
#else
  else if constexpr (kSuper<T> || T == DType::Q6_K) return 0;
  else return Weights<T>::kSigned ? 0 : Weights<T>::kMaxByte <= 15 ? kAnyRows : 8;
#endif
}

template <DType T>
void matmul_t(const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t nb = K / 32;
  const size_t bytes = row_bytes(T, K);
  const auto* weights = static_cast<const uint8_t*>(w);
  if (M <= 0) return;
#ifdef FTLLM_VNNI
  if constexpr (false) {
#else
  if constexpr (kRuns16<T>) {
#endif
    // AVX2, Q2_K and Q3_K: up to five rows through the few-rows kernel, more through the GEMM.
    if (M >= kFewRows) return rows_times_weights<T>(xq, M, nb, weights, bytes, n0, n1, y, ldy);
    with_rows<1, kFewRows - 1>(M, [&]<int R>() { rows_times_super_few<T, R>(xq, nb, weights, bytes, n0, n1, y, ldy); });
    return;
  } else {
  if (M == 1) {  // decode
#ifdef FTLLM_VNNI
    if constexpr (kSuper<T> || T == DType::Q6_K || kRuns16<T>) return rows_times_super_one<T, 1>(xq, nb, weights, bytes, n0, n1, y, ldy);
#else
    if constexpr (kSuper<T> || T == DType::Q6_K) return rows_times_super_few<T, 1>(xq, nb, weights, bytes, n0, n1, y, ldy);
#endif
    else return rows_times_weights_few<T, 1>(xq, nb, weights, bytes, n0, n1, y, ldy);
  }
  constexpr int64_t lane_rows = lane_kernel_rows<T>();
  if constexpr (lane_rows > 0)
    if (M <= lane_rows) {
      // Beyond L rows the weights go in tiles of about 256 KB, read from memory once and from L2 by each L rows.
      constexpr int L = kLaneRows;
      const int64_t n_tile = M <= L ? n1 - n0 : std::max<int64_t>(L, int64_t((256 << 10) / bytes) / L * L);
      for (int64_t n = n0; n < n1; n += n_tile)
        for (int64_t m = 0; m < M; m += L)
          with_rows<1, L>(std::min<int64_t>(L, M - m), [&, n_end = std::min(n1, n + n_tile)]<int R>() {
            const Q8Block* x = xq + m * nb;
            float* out = y + m * ldy;
            if constexpr (R == 1 && !kSuper<T> && T != DType::Q6_K && !kRuns16<T>) rows_times_weights_few<T, 1>(x, nb, weights, bytes, n, n_end, out, ldy);
#ifdef FTLLM_VNNI
            else if constexpr ((kSuper<T> || T == DType::Q6_K || kRuns16<T>) && R <= kSuperOneRows) rows_times_super_one<T, R>(x, nb, weights, bytes, n, n_end, out, ldy);
            else if constexpr (kSuper<T> || T == DType::Q6_K || kRuns16<T>) rows_times_super_lanes16<T, R>(x, nb, weights, bytes, n, n_end, out, ldy);
            else rows_times_weights_lanes16<T, R>(x, nb, weights, bytes, n, n_end, out, ldy);
#else
            else rows_times_weights_lanes<T, R>(x, nb, weights, bytes, n, n_end, out, ldy);
#endif
          });
      return;
    }
  if constexpr (lane_rows < kAnyRows) {  // (the GEMM is not built for types that never reach it)
    // A handful of rows (a small decode batch) share each weight block's unpacking on the one-row path;
    // from about six the GEMM's eight lanes pay (measured, 2 threads, Q4_0 0.5B shape on Zen 4).
    if (M >= kFewRows) return rows_times_weights<T>(xq, M, nb, weights, bytes, n0, n1, y, ldy);
    with_rows<2, kFewRows - 1>(M, [&]<int R>() {  // every row in one pass over the weights
      if constexpr (kSuper<T> || T == DType::Q6_K) rows_times_super_few<T, R>(xq, nb, weights, bytes, n0, n1, y, ldy);
      else rows_times_weights_lanes<T, R>(xq, nb, weights, bytes, n0, n1, y, ldy);
    });
  }
  }
}

#ifdef FTLLM_VNNI
template <DType T>
AmxType amx_type_t() {
  using Wt = Weights<T>;
  return AmxType{.supported = true, .is_signed = Wt::kSigned, .has_min = Wt::kHasMin, .min_times_ds = kMinTimesDs<T>, .row_scale = T == DType::I8, .offset = Wt::kOffset};
}

// Word k of row r of `values` (rows row_stride bytes apart) for r = 0..15, as a tile's row k, k < words.
inline void amx_transpose16(const uint8_t* values, int row_stride, uint8_t (*b_tile)[64], int words = 8) {
  const __m512i word_of_row = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(row_stride / 4));
  for (int k = 0; k < words; ++k)
    _mm512_store_si512(b_tile[k], _mm512_i32gather_epi32(_mm512_add_epi32(word_of_row, _mm512_set1_epi32(k)), values, 4));
}

template <DType T>
void amx_pack_super_panel_t(const uint8_t* w, size_t row_bytes, int64_t n, int64_t super_blocks, AmxSuperBlock* out) {
  using K = Weights<T>;
  alignas(64) uint8_t values[16][8][32];
  for (int64_t sb = 0; sb < super_blocks; ++sb) {
    AmxSuperBlock& p = out[sb];
    for (int r = 0; r < 16; ++r) {
      const auto& blk = K::block(w + size_t(n + r) * row_bytes, sb);
      K::unpack(blk, values[r]);
      uint8_t sc[8], mn[8];
      k_scale_bytes(blk.scales, sc, mn);
      for (int j = 0; j < 8; ++j) p.scale[j][r] = sc[j];
      for (int k = 0; k < 4; ++k) p.min_pairs[k][r] = int16_pair(mn[2 * k], mn[2 * k + 1]);
      p.d[r] = h2f(blk.d);
      p.neg_dmin[r] = -h2f(blk.dmin);
    }
    for (int j = 0; j < 8; ++j) amx_transpose16(values[0][j], int(sizeof values[0]), p.b_tile[j]);
  }
}

template <DType T>
void amx_pack_panel_t(const uint8_t* w, size_t row_bytes, int64_t n, int64_t nb, AmxPanelBlock* out, float* row_scale) {
  using Wt = Weights<T>;
  const uint8_t* rows[16];
  for (int r = 0; r < 16; ++r) {
    rows[r] = w + size_t(n + r) * row_bytes;
    row_scale[r] = 1.0f;
    if constexpr (T == DType::I8) std::memcpy(&row_scale[r], rows[r], 4);
  }
  alignas(64) uint8_t values[16][32];
  for (int64_t b = 0; b < nb; ++b) {
    AmxPanelBlock& p = out[b];
    for (int r = 0; r < 16; ++r) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(values[r]), Wt::bytes(rows[r], b));
      p.scale[r] = Wt::scale(rows[r], b);
      if constexpr (Wt::kHasMin) p.min[r] = Wt::min(rows[r], b);
      else p.min[r] = 0.0f;
    }
    amx_transpose16(values[0], 32, p.b_tile);
  }
}

// The types with one integer dot per 32-value block (the AMX GEMM's plain case).
template <DType T>
constexpr bool kOneDotPerBlock = T == DType::Q4_0 || T == DType::Q4_1 || T == DType::Q5_0 || T == DType::Q5_1 || T == DType::Q8_0 ||
                                 T == DType::MXFP4 || T == DType::I8 || T == DType::I4 || T == DType::I4G32 || T == DType::I4G64 ||
                                 T == DType::I4G128 || T == DType::I4G256;
#endif

}  // namespace

#ifdef FTLLM_VNNI
AmxType amx_type(DType wt) {
  AmxType type;
  quant::decode::with_dtype(wt, [&]<DType T>() {
    if constexpr (kSuper<T>) type = AmxType{.supported = true, .super = true};
    else if constexpr (T == DType::Q6_K) type = AmxType{.supported = true, .q6k = true};
    else if constexpr (kOneDotPerBlock<T>) type = amx_type_t<T>();
  });
  return type;
}

void amx_pack_q6k_panel(const uint8_t* w, size_t row_bytes, int64_t n, int64_t super_blocks, AmxQ6Block* out) {
  using K = Weights<DType::Q6_K>;
  alignas(64) uint8_t values[16][8][32];
  for (int64_t sb = 0; sb < super_blocks; ++sb) {
    AmxQ6Block& p = out[sb];
    for (int r = 0; r < 16; ++r) {
      const auto& blk = K::block(w + size_t(n + r) * row_bytes, sb);
      K::unpack(blk, values[r]);
      for (int run = 0; run < 16; ++run) p.scale[run][r] = blk.scales[run];
      for (int j = 0; j < 8; ++j) p.scale_pairs[j][r] = int16_pair(blk.scales[2 * j], blk.scales[2 * j + 1]);
      p.d[r] = h2f(blk.d);
    }
    for (int run = 0; run < 16; ++run) amx_transpose16(values[0][run / 2] + 16 * (run % 2), int(sizeof values[0]), p.b_tile[run], 4);
  }
}

void amx_pack_super_panel(DType wt, const uint8_t* w, size_t row_bytes, int64_t n, int64_t super_blocks, AmxSuperBlock* out) {
  quant::decode::with_dtype(wt, [&]<DType T>() {
    if constexpr (kSuper<T>) amx_pack_super_panel_t<T>(w, row_bytes, n, super_blocks, out);
  });
}

void amx_pack_panel(DType wt, const uint8_t* w, size_t row_bytes, int64_t n, int64_t nb, AmxPanelBlock* out, float* row_scale) {
  quant::decode::with_dtype(wt, [&]<DType T>() {
    if constexpr (kOneDotPerBlock<T>) amx_pack_panel_t<T>(w, row_bytes, n, nb, out, row_scale);
  });
}
#endif

void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  switch (wt) {
    case DType::Q4_0: return matmul_t<DType::Q4_0>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q8_0: return matmul_t<DType::Q8_0>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I8: return matmul_t<DType::I8>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q4_K: return matmul_t<DType::Q4_K>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q5_K: return matmul_t<DType::Q5_K>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q6_K: return matmul_t<DType::Q6_K>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q2_K: return matmul_t<DType::Q2_K>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q3_K: return matmul_t<DType::Q3_K>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4: return matmul_t<DType::I4>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4G32: return matmul_t<DType::I4G32>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4G64: return matmul_t<DType::I4G64>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4G128: return matmul_t<DType::I4G128>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4G256: return matmul_t<DType::I4G256>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q4_1: return matmul_t<DType::Q4_1>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q5_0: return matmul_t<DType::Q5_0>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q5_1: return matmul_t<DType::Q5_1>(xq, M, K, w, n0, n1, y, ldy);
    case DType::MXFP4: return matmul_t<DType::MXFP4>(xq, M, K, w, n0, n1, y, ldy);
    default: return;  // not a type uses_q8 names
  }
}

}  // namespace ftllm::cpu::FTLLM_QUANT_NS
