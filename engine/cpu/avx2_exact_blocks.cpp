// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, int8 and int4 weights (blocks of 32 values, one integer dot each)
// against int8 activations, summed as avx2_exact_blocks.h says. Each batch size takes its own shape:
// - one activation row (decode): eight weight rows' block dots narrowed to int16 and added in pairs to
//   eight lanes (weights of at most 31), or four rows' side by side reduced by unpacks (Q8_0, int8);
// - more, for the unsigned block types (4- and 5-bit, MXFP4): the lane kernels, each vector lane a
//   weight row, a block of eight (sixteen on AVX-512) weight rows unpacked and turned once for up to
//   sixteen activation rows (lane_kernel_rows says which types and batches);
// - more, otherwise (signed weights, int4): a GEMM whose vector lanes are eight activation rows. The
//   activations are transposed once per call so that 4-byte chunk c of eight rows' blocks sits in one
//   register; a weight block is unpacked once per tile and each of its eight 4-byte chunks is broadcast
//   against every group of activation rows (llama.cpp's repacked kernels get the same effect by
//   interleaving the weights at load; here the weights stay as the file holds them).
// The K-quants have kernels of their own (avx2_k_quants.cpp); matmul_q8 hands them over.
#include "avx2_exact_blocks.h"
#include "tiling.h"

namespace ftllm::cpu::FTLLM_QUANT_NS {

namespace {

// Bytes each holding a copy of the qh byte with its value's fifth bit, as 16 where bit j % 8 of byte j
// is set, 0 elsewhere.
inline __m256i sixteen_where_set(__m256i copies) {
  const __m256i mask = _mm256_set1_epi64x(int64_t(0x8040201008040201));  // byte j tests bit j % 8
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(copies, mask), mask), _mm256_set1_epi8(16));
}

// ggml's fifth bits (bit j of 4 bytes for value j) as 16 in byte j where set, 0 elsewhere.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)),  // byte j holds source byte j / 8
                                             _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2,
                                                              2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  return sixteen_where_set(spread);
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
  static constexpr bool kSigned = false, kPacked = true, kHasMin = HasMin, kHasScale = true, kFifthBit = FifthBit;
  static constexpr int kOffset = Offset, kMaxByte = MaxByte;
  static const Block& block(const uint8_t* row, int64_t b) { return reinterpret_cast<const Block*>(row)[b]; }
  static const uint8_t* fifth_bit_bytes(const uint8_t* row, int64_t b) {
    if constexpr (FifthBit) return block(row, b).qh;
    else return nullptr;
  }
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
// Every e8m0 exponent's half scale (block_decode.h's e8m0_half, spelled out to be constexpr), looked up
// instead of branched on. Built by the compiler: a table this file filled at start-up would run code built
// with this file's ISA flags before cpuid is asked, and stop the program on machines without them.
constexpr auto kHalfScales = [] {
  std::array<float, 256> t{};
  for (uint32_t e = 0; e < 256; ++e) t[e] = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  return t;
}();

template <>
struct Weights<DType::MXFP4> {
  static constexpr bool kSigned = false, kPacked = true, kHasMin = false, kHasScale = true, kFifthBit = false;
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
  static const uint8_t* nibble_bytes(const uint8_t* row, int64_t b) { return block(row, b).qs; }
  static __m256i values(__m256i nibbles) {  // each nibble (0-15 in a byte) looked up
    const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12,
                                           11, 10, 9, 8, 6, 4, 0);
    return _mm256_shuffle_epi8(table, nibbles);
  }
  static __m256i bytes(const uint8_t* row, int64_t b) { return values(nibbles(block(row, b).qs)); }
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
  static constexpr bool kSigned = false, kPacked = true, kHasMin = true, kHasScale = true, kFifthBit = false;
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
  static constexpr bool kSigned = false, kPacked = true, kHasMin = true, kHasScale = true, kFifthBit = false;
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

template <DType T>
inline __m256i block_dot(__m256i acc, __m256i w, __m256i x) {
  if constexpr (Weights<T>::kSigned) return dot_s8s8(acc, w, x);
  else return dot_u8s8(acc, w, x);
}


// -offset * (the activation lane sums) per block: starting each block's dot there makes the lanes sum
// to (q - offset) . x exactly.
template <DType T>
__m256i offset_lanes(const Q8Block& x) {
  return _mm256_sub_epi32(_mm256_setzero_si256(),
                          dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(Weights<T>::kOffset), load32(x.q)));
}

// ---- One activation row --------------------------------------------------------------------------

// The one-row kernel's eight-row shapes, for unsigned weights of at most 31 against activations of
// magnitude at most 128, where a lane of four products (or a pair of lanes) fits int16: their block dots
// are reduced by narrowing to int16 and adding neighbours (vpackssdw, vpmaddwd), exact within that bound
// and cheaper on the shuffle ports than sum_lanes4's unpacks, which set the one-row pace.
// - kHalfRows (nibbles; with the AVX2 table also Q5_0's and Q5_1's, their fifth bits or'ed in, and
//   MXFP4's, looked up): a register holds two rows' 16 nibble bytes, [row j | row j + 4]; its low nibbles
//   are values 0-15 of each row and meet activations 0-15 in both halves, its high ones values 16-31, so
//   one dot chain leaves four lanes per row of eight products (at most 31744) and one narrowing round
//   less to go;
// - otherwise (the AVX-512 tables' other types) each row's 32 values in a register of its own, eight
//   lanes of four products. Without AVX-512's 32 vector registers eight such rows spill: the five-bit
//   types and MXFP4 ran slower that way than on the four-row kernel (Zen 4), and faster in half rows (Zen 1,
//   one thread, K 2048: Q5_0 7.2 -> 9.5, MXFP4 8.7 -> 13.9 Gweights/s).
#ifdef FTLLM_VNNI
constexpr bool kEightRowsOfBytes = true;
#else
constexpr bool kEightRowsOfBytes = false;
#endif
template <DType T>
constexpr bool kHalfRows = T == DType::Q4_0 || T == DType::Q4_1 || T == DType::I4 || T == DType::I4G32 || T == DType::I4G64 ||
                           T == DType::I4G128 || T == DType::I4G256 ||
                           (!kEightRowsOfBytes && (T == DType::Q5_0 || T == DType::Q5_1 || T == DType::MXFP4));
template <DType T>
constexpr bool kNarrowLanes = !Weights<T>::kSigned && Weights<T>::kMaxByte * 128 * 8 <= 32767 && (kHalfRows<T> || kEightRowsOfBytes);

// Rows i and i + 4 (d[i], i < 4) each as four int32 lanes in their own 128-bit half, summed to row i in
// lane i. The last round narrows again where sixteen products fit int16 (4-bit weights: 30720), else
// adds neighbours (vphaddd: five-bit weights' sixteen reach 63488).
template <int MaxByte>
inline __m256i sum_half_rows(const __m256i* d) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i rows01 = _mm256_madd_epi16(_mm256_packs_epi32(d[0], d[1]), ones);  // [0 0 1 1 | 4 4 5 5]
  const __m256i rows23 = _mm256_madd_epi16(_mm256_packs_epi32(d[2], d[3]), ones);  // [2 2 3 3 | 6 6 7 7]
  if constexpr (MaxByte * 128 * 16 <= 32767) return _mm256_madd_epi16(_mm256_packs_epi32(rows01, rows23), ones);
  else return _mm256_hadd_epi32(rows01, rows23);
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

// Fifth bits (ggml's qh, bit j for value j) of two rows as the half rows hold their values: bytes 0-15
// of each half for values 0-15 (`low`, [row a | row b]), values 16-31 in `high`; 16 where set.
inline void fifth_bits_half_rows(const uint8_t* qh_a, const uint8_t* qh_b, __m256i& low, __m256i& high) {
  const __m256i both = _mm256_blend_epi32(broadcast4(qh_a), broadcast4(qh_b), 0xF0);
  low = sixteen_where_set(_mm256_shuffle_epi8(both, _mm256_setr_epi64x(0, 0x0101010101010101, 0, 0x0101010101010101)));
  high = sixteen_where_set(_mm256_shuffle_epi8(
      both, _mm256_setr_epi64x(0x0202020202020202, 0x0303030303030303, 0x0202020202020202, 0x0303030303030303)));
}

// kHalfRows: block b of weight rows j and j + 4, values 0-15 in u[0] and 16-31 in u[1] ([row j | row j + 4]).
template <DType T>
[[gnu::always_inline]] inline void unpack_half_rows(const uint8_t* const* r, int64_t b, int j, __m256i* u) {
  using Wt = Weights<T>;
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_blend_epi32(broadcast16(Wt::nibble_bytes(r[j], b)), broadcast16(Wt::nibble_bytes(r[j + 4], b)), 0xF0);
  u[0] = _mm256_and_si256(v, low);
  u[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
  if constexpr (T == DType::MXFP4) u[0] = Wt::values(u[0]), u[1] = Wt::values(u[1]);
  if constexpr (Wt::kFifthBit) {
    __m256i fifth_low, fifth_high;
    fifth_bits_half_rows(Wt::fifth_bit_bytes(r[j], b), Wt::fifth_bit_bytes(r[j + 4], b), fifth_low, fifth_high);
    u[0] = _mm256_or_si256(u[0], fifth_low);
    u[1] = _mm256_or_si256(u[1], fifth_high);
  }
}

// Block b of eight weight rows against R activation blocks xb(i), into dots[i] (row j in lane j, the
// offset included). Half rows go a pair at a time, each pair unpacked and dotted against every activation
// row at once (unpacking all four first kept eight registers live and spilled the five-bit types' masks);
// eight rows of bytes are unpacked whole, then dotted.
template <DType T, int R, typename Block>
[[gnu::always_inline]] inline void dots8(const uint8_t* const* r, int64_t b, Block xb, __m256i* dots) {
  if constexpr (kHalfRows<T>) {
    __m256i d[R][4];
    for (int j = 0; j < 4; ++j) {
      __m256i u[2];
      unpack_half_rows<T>(r, b, j, u);
      for (int i = 0; i < R; ++i) d[i][j] = dot_u8s8_twice(u[0], broadcast16(xb(i).q), u[1], broadcast16(xb(i).q + 16));
    }
    for (int i = 0; i < R; ++i) dots[i] = sum_half_rows<Weights<T>::kMaxByte>(d[i]);
  } else {
    __m256i u[8];
    for (int j = 0; j < 8; ++j) u[j] = Weights<T>::bytes(r[j], b);
    for (int i = 0; i < R; ++i) {
      const __m256i xv = load32(xb(i).q);
      __m256i d[8];
      for (int j = 0; j < 8; ++j) d[j] = dot_u8s8(_mm256_setzero_si256(), u[j], xv);
      dots[i] = sum_lanes8_narrow(d);
    }
  }
  if constexpr (Weights<T>::kOffset != 0)
    for (int i = 0; i < R; ++i) dots[i] = _mm256_add_epi32(dots[i], _mm256_set1_epi32(-Weights<T>::kOffset * xb(i).sum));
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
    for (; n + 8 <= n1; n += 8) {  // eight rows at a time (dots8)
      using Wt = Weights<T>;
      const uint8_t* r[8];
      for (int i = 0; i < 8; ++i) r[i] = w + size_t(n + i) * row_bytes;
      AheadLines ahead(r[0], row_bytes, 8, nb, w + size_t(n1) * row_bytes);
      auto eight = [&](__m128 (*four)(const uint8_t* const*, int64_t), int64_t b) { return _mm256_set_m128(four(r + 4, b), four(r, b)); };
      __m256 acc[R];
      for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
      __m256 wscales = _mm256_set1_ps(1.0f), wmins = _mm256_setzero_ps();
      if constexpr (T == DType::I4) wscales = eight(Wt::scales4, 0), wmins = eight(Wt::mins4, 0);
      for (int64_t b = 0; b < nb; ++b) {
        ahead.step();
        __m256i dots[R];
        dots8<T, R>(r, b, [&](int i) -> const Q8Block& { return x[i * nb + b]; }, dots);
        if constexpr (T != DType::I4) wscales = eight(Wt::scales4, b);
        if constexpr (Wt::kHasMin && T != DType::I4) wmins = eight(Wt::mins4, b);
        for (int i = 0; i < R; ++i) {
          const Q8Block& xb = x[i * nb + b];
          acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[i]), _mm256_mul_ps(wscales, _mm256_set1_ps(xb.d)), acc[i]);
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
    AheadLines ahead(r[0], row_bytes, 4, nb, w + size_t(n1) * row_bytes);
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

#ifndef FTLLM_VNNI
// Without VNNI, unsigned weights' byte pairs times int8 activations (vpmaddubsw) reach 2 * kMaxByte * 128
// per int16 lane: this many 4-byte chunks (8 for 4-bit values, 4 for 5-bit and MXFP4) still add exactly
// as int16 before one widening vpmaddwd.
template <DType T>
constexpr int kInt16Chunks = 32767 / (2 * Weights<T>::kMaxByte * 128) >= 8 ? 8 : 4;
#endif

// Eight weight rows' block dots against activation block xb, row i in lane i (the offset included): u[j]
// holds chunk j of the eight rows (transpose8), magnitude[j] its |w| where the weights are signed.
template <DType T>
[[gnu::always_inline]] inline __m256i lane_block_dots(const __m256i* u, const __m256i* magnitude, const Q8Block& xb) {
  using Wt = Weights<T>;
  const __m256i start = _mm256_set1_epi32(-Wt::kOffset * xb.sum);
#ifndef FTLLM_VNNI
  // Without VNNI a dot is two multiplies (byte pairs to int16, then int16 pairs to int32), and the
  // multiply ports set this kernel's pace: unsigned weights' chunks add as int16 first (kInt16Chunks)
  // and meet one widening multiply, 9 or 10 multiplies a block and row instead of 16. Exact, as before.
  if constexpr (!Wt::kSigned) {
    constexpr int kPerWidening = kInt16Chunks<T>;
    static_assert(32767 / (2 * Wt::kMaxByte * 128) >= kPerWidening);
    __m256i dots = start;
    for (int h = 0; h < 8; h += kPerWidening) {
      __m256i pairs[2] = {_mm256_maddubs_epi16(u[h], broadcast4(xb.q + 4 * h)),
                          _mm256_maddubs_epi16(u[h + 1], broadcast4(xb.q + 4 * (h + 1)))};
      for (int j = h + 2; j < h + kPerWidening; ++j)  // two chains: an add waits for the multiply before it
        pairs[j % 2] = _mm256_add_epi16(pairs[j % 2], _mm256_maddubs_epi16(u[j], broadcast4(xb.q + 4 * j)));
      dots = _mm256_add_epi32(dots, _mm256_madd_epi16(_mm256_add_epi16(pairs[0], pairs[1]), _mm256_set1_epi16(1)));
    }
    return dots;
  }
#endif
  // Two chains of dots, not one of eight: a dot waits for the one before it (4-5 cycles).
  __m256i chain[2] = {start, _mm256_setzero_si256()};
  for (int j = 0; j < 8; ++j) {
    const __m256i xj = broadcast4(xb.q + 4 * j);
    if constexpr (Wt::kSigned) chain[j % 2] = dot_u8s8(chain[j % 2], magnitude[j], _mm256_sign_epi8(xj, u[j]));
    else chain[j % 2] = dot_u8s8(chain[j % 2], u[j], xj);
  }
  return _mm256_add_epi32(chain[0], chain[1]);
}

// Weight rows [n0, n1) against R activation rows (2 to 16: a decode batch or a prefill's rows), eight
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
    AheadLines ahead(r[0], row_bytes, 8, nb, w + size_t(n1) * row_bytes);
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
        const __m256i dots = lane_block_dots<T>(u, magnitude, xb);
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
    AheadLines ahead(r[0], row_bytes, 16, nb, w + size_t(n1) * row_bytes);
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
      // As many chunks as still fit add as int16 (kInt16Chunks), then widen.
      constexpr int kPairChunks = kInt16Chunks<T>;
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

// The types go through the lane kernels, L = 16 activation rows at a time against 16 weight rows a lane
// each (AVX-512) or 8 (AVX2), for batches of up to this many rows (0: never; every batch: kAnyRows).
// Against the GEMM's tiles (whose dots need a separate broadcast of each weight word) Zen 5 ran, one
// thread, Q4_0: 8 rows 1.75x, 16 rows 1.35x and a prefill 1.1x as fast on AVX-512. On AVX2, since its
// lanes add int16 pairs over several chunks (lane_block_dots) and each unpacked block meets 16 rows, not
// 8, Zen 3 ran Q4_0 from 16 rows 1.2-1.4x as fast as with 8 rows (32 rows a pass: no further gain), and
// Q5_0, MXFP4 and Q4_1 as fast as or faster than on the tiles, which 8-row passes had lost to (0.87x).
// Signed weights (Q8_0, int8) take them only up to sixteen rows on AVX-512 (a prefill ran 0.75x: their
// tiles broadcast the weights straight from their rows, with no unpacking) and never on AVX2 (its sign
// steps lost 3-7%).
constexpr int64_t kAnyRows = INT64_MAX;
constexpr int kLaneRows = 16;
template <DType T>
constexpr int64_t lane_kernel_rows() {
  if constexpr (T == DType::I4) return 0;
#ifdef FTLLM_VNNI
  else return Weights<T>::kSigned ? 16 : kAnyRows;
#else
  else return Weights<T>::kSigned ? 0 : kAnyRows;
#endif
}

template <DType T>
void matmul_t(const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t nb = K / 32;
  const size_t bytes = row_bytes(T, K);
  const auto* weights = static_cast<const uint8_t*>(w);
  if (M <= 0) return;
  prefetch_first_lines(weights + size_t(n0) * bytes, weights + size_t(n1) * bytes);  // this thread's rows, whichever kernel reads them
  if (M == 1) return rows_times_weights_few<T, 1>(xq, nb, weights, bytes, n0, n1, y, ldy);  // decode
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
            if constexpr (R == 1) rows_times_weights_few<T, 1>(x, nb, weights, bytes, n, n_end, out, ldy);
#ifdef FTLLM_VNNI
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
    if (M >= kFewRows)
      return rows_times_weights<T>(xq, M, nb, weights, bytes, n0, n1, y, ldy,
                                   []<int W, int G>(const Octet* const* x, int64_t nb, const uint8_t* const* rows, size_t ahead, __m256* out) __attribute__((always_inline)) {
#ifdef FTLLM_VNNI
                                     if constexpr (G % 2 == 0) return tile_wide<T, W, G / 2>(x, nb, rows, ahead, out);
#endif
                                     tile<T, W, G>(x, nb, rows, ahead, out);
                                   });
    with_rows<2, kFewRows - 1>(M, [&]<int R>() { rows_times_weights_lanes<T, R>(xq, nb, weights, bytes, n0, n1, y, ldy); });  // every row in one pass over the weights
  }
}

#ifdef FTLLM_VNNI
template <DType T>
AmxType amx_type_t() {
  using Wt = Weights<T>;
  return AmxType{.supported = true, .is_signed = Wt::kSigned, .has_min = Wt::kHasMin, .min_times_ds = kMinTimesDs<T>, .row_scale = T == DType::I8, .offset = Wt::kOffset};
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

void amx_pack_panel(DType wt, const uint8_t* w, size_t row_bytes, int64_t n, int64_t nb, AmxPanelBlock* out, float* row_scale) {
  quant::decode::with_dtype(wt, [&]<DType T>() {
    if constexpr (kOneDotPerBlock<T>) amx_pack_panel_t<T>(w, row_bytes, n, nb, out, row_scale);
  });
}
#endif

void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  // Many activation rows in blocks (tiling.h), each of whole passes of 16 rows. Zen 3, one thread, 512
  // rows at K 18944 (14 MB of quantized rows), 3 alternated runs: Q4_0 55-65 -> 64-65, Q8_0 36-41 ->
  // 42-46, Q4_K 47-53 -> 57-59 Gweights/s (K 4864, two blocks: the same within noise).
  const int64_t row_bytes = K / 32 * int64_t(sizeof(Q8Block));
  if (M * row_bytes > kActivationBlockBytes && M > 16)
    return for_each_activation_block(M, row_bytes, 16, [&](int64_t m, int64_t rows) {
      matmul_q8(wt, xq + m * (K / 32), rows, K, w, n0, n1, y + m * ldy, ldy);
    });
  if (wt == DType::Q2_K || wt == DType::Q3_K || wt == DType::Q4_K || wt == DType::Q5_K || wt == DType::Q6_K)
    return matmul_k_quant(wt, xq, M, K, w, n0, n1, y, ldy);
  switch (wt) {
    case DType::Q4_0: return matmul_t<DType::Q4_0>(xq, M, K, w, n0, n1, y, ldy);
    case DType::Q8_0: return matmul_t<DType::Q8_0>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I8: return matmul_t<DType::I8>(xq, M, K, w, n0, n1, y, ldy);
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
