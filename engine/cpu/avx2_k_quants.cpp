// The K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against int8 activations with one scale per 256
// (quantize_q8_256), summed as avx2_exact_blocks.h says: per super-block, the integer of its sub-blocks'
// or runs' exact dots times their scales, then its float steps. The shapes by batch size:
// - AVX-512: one or two activation rows through rows_times_super_one (a weight row's super-block read 64
//   values a register), more through rows_times_super_lanes16 (sixteen weight rows a lane each);
// - AVX2: up to five rows through rows_times_super_few (four weight rows side by side), more through the
//   GEMM with tile_k (Q4_K, Q5_K) or tile_runs16 (runs of 16: Q6_K, Q2_K, Q3_K).
#include "avx2_exact_blocks.h"

namespace ftllm::cpu::FTLLM_QUANT_NS {

namespace {

// Q4_K / Q5_K: a super-block's twelve packed bytes as its eight 6-bit scales (bytes 0-7) and eight 6-bit
// minimums (bytes 8-15). As words A, B, C: scales 0-3 are A's low six bits, mins 0-3 B's; scales 4-7 are C's
// low nibbles with A's top two bits above them, mins 4-7 C's high nibbles with B's top two bits
// (scale_min_k4 per byte). The load takes 16 bytes: the block's next four follow the scales.
template <typename Block>
inline __m128i k_scales_mins(const Block& blk) {
  static_assert(offsetof(Block, scales) + 16 <= sizeof(Block));
  const __m128i abc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
  const __m128i acbc = _mm_shuffle_epi32(abc, 0x98), low = _mm_srlv_epi32(acbc, _mm_setr_epi32(0, 0, 0, 4));  // A, C, B, C >> 4
  const __m128i top = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(abc, 0x40), 6), _mm_set1_epi8(3)), 4);  // A's, B's top bits
  return _mm_or_si128(_mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
                      _mm_and_si128(top, _mm_setr_epi32(0, -1, 0, -1)));
}
// The same in general registers, for the kernels whose vector ports are the busier (the GEMM tile: the
// vector form cost it 5%).
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

// Q3_K's sixteen 6-bit scales less 32, as int8: run i's low four bits are byte i's low nibble (i < 8) or
// byte i - 8's high one, its top two bits 2 (i / 4) up in byte 8 + i % 4 (block_decode.h's q3_k_scale).
inline __m128i q3_k_scales(const uint8_t* packed) {
  const __m128i nibbles = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed));
  const __m128i low = _mm_and_si128(_mm_unpacklo_epi64(nibbles, _mm_srli_epi16(nibbles, 4)), _mm_set1_epi8(0x0F));
  uint32_t top_bytes;
  std::memcpy(&top_bytes, packed + 8, 4);
  const __m128i top = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(int(top_bytes)), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(top, 4)), _mm_set1_epi8(32));
}

// Each K-quant's Weights<T>::sub_block(blk, k) gives sub-block k of a super-block (values 32k..32k+31, the
// activations' order) as unsigned bytes; unpack_sub_blocks stores all eight.
template <typename W>
inline void unpack_sub_blocks(const typename W::Block& blk, uint8_t (*out)[32]) {
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(out[k]), W::sub_block(blk, k));
}
// Q4_K's and Q5_K's sub-blocks 2p and 2p + 1 are the low and high nibbles of bytes 32p..32p+31 of qs.
inline __m256i k_nibbles(const uint8_t* qs, int k) {
  const __m256i v = load32(qs + 32 * (k / 2));
  return _mm256_and_si256(k % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));
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
  static __m256i sub_block(const Block& blk, int k) { return k_nibbles(blk.qs, k); }
};

// Q5_K: Q4_K with a fifth bit per value in qh (sub-block 2p's in bit 2p of each byte, 2p + 1's in bit 2p + 1).
template <>
struct Weights<DType::Q5_K> {
  using Block = quant::BlockQ5_K;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static const quant::BlockQ5_K& block(const uint8_t* row, int64_t sb) { return reinterpret_cast<const quant::BlockQ5_K*>(row)[sb]; }
  // Bit k of each qh byte moved to bit 4 (worth 16; a 16-bit shift of at most 4 leaves it in its byte).
  static __m256i sub_block(const Block& blk, int k) {
    const __m256i qh = load32(blk.qh), fifth = k < 4 ? _mm256_slli_epi16(qh, 4 - k) : k > 4 ? _mm256_srli_epi16(qh, k - 4) : qh;
    return _mm256_or_si256(k_nibbles(blk.qs, k), _mm256_and_si256(fifth, _mm256_set1_epi8(16)));
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
  // Sub-block k of the super-block is quarter q = k % 4 of half k / 4 (low nibbles of the half's 64 ql
  // bytes for quarters 0 and 1, high ones for 2 and 3; the top two bits from qh, 2q up), as unsigned
  // values (0..63).
  [[gnu::always_inline]] static __m256i sub_block(const Block& blk, int k) {
    const int half = k / 4, q = k % 4;
    const __m256i ql = load32(blk.ql + 64 * half + 32 * (q % 2)), qh = load32(blk.qh + 32 * half);
    return _mm256_or_si256(_mm256_and_si256(q < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F)),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), _mm256_set1_epi8(3)), 4));
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
  // Sub-block k = 4h + j (plane j of half h) as unsigned bytes (Q3_K's q + 4; its third bit is bit k of hmask).
  static __m256i sub_block(const Block& blk, int k) {
    const __m256i u = _mm256_and_si256(_mm256_srli_epi16(load32(blk.qs + 32 * (k / 4)), 2 * (k % 4)), _mm256_set1_epi8(3));
    if constexpr (T == DType::Q3_K)
      return _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(load32(blk.hmask), k), _mm256_set1_epi8(1)), 2));
    return u;
  }
};
template <>
struct Weights<DType::Q2_K> : Runs16<DType::Q2_K, quant::BlockQ2_K> {};
template <>
struct Weights<DType::Q3_K> : Runs16<DType::Q3_K, quant::BlockQ3_K> {
  static int scale(const Block& blk, int i) { return quant::decode::q3_k_scale(blk.scales, i); }  // less 32
};

// The K-quants whose values have a minimum (-dmin * m) besides the scaled quant.
template <DType T>
constexpr bool kHasMins = T == DType::Q2_K || T == DType::Q4_K || T == DType::Q5_K;

// The super-block sb of rows + ahead (rows to come) asked for from memory.
template <typename Block, int W>
[[gnu::always_inline]] inline void prefetch_superblock(const uint8_t* const* rows, size_t ahead, int64_t sb) {
  if (!ahead) return;
  for (int w = 0; w < W; ++w)
    for (size_t line = 0; line < sizeof(Block); line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(rows[w] + ahead + sizeof(Block) * size_t(sb) + line), _MM_HINT_T0);
}

// ---- Up to five activation rows on AVX2: four weight rows side by side -------------------------------
// Each activation row's sums of its runs of 16 values, super-block by super-block: 16 int16 a register, run
// r of the super-block in word r (|sum| <= 2032). The per-run terms of a super-block (minimums times their
// activation sums, offsets times theirs) are then one vpmaddwd a row instead of a step per sub-block.
struct alignas(32) RunSums {
  int32_t pairs[8];  // half_sums of the super-block's blocks
  __m256i load() const { return _mm256_load_si256(reinterpret_cast<const __m256i*>(pairs)); }
};
inline void run_sums(const Q8Block* x, int64_t nb, int64_t rows, std::vector<RunSums>& out) {
  const int64_t supers = nb / 8;
  out.resize(size_t(rows * supers));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t sb = 0; sb < supers; ++sb)
      for (int b = 0; b < 8; ++b) out[size_t(i * supers + sb)].pairs[b] = half_sums(x[i * nb + sb * 8 + b]);
}

// Word a of each 128-bit half of v (a < 8) in every word of the low half, word b of the high half in every word of the high half.
template <int A, int B>
inline __m256i words_of_halves(__m256i v) {
  return _mm256_shuffle_epi8(v, _mm256_set_m128i(_mm_set1_epi16(int16_t(((2 * B + 1) << 8) | 2 * B)), _mm_set1_epi16(int16_t(((2 * A + 1) << 8) | 2 * A))));
}

// One weight row's super-block, unpacked for the few-rows kernel: its scales and minimums as int16, ready
// to meet any number of activation rows.
// - per_run: a multiplier per run of 16 against the activations' run sums (run_sums): Q4_K/Q5_K's and
//   Q2_K's minimums (Q4_K's each twice, a sub-block being two runs), Q6_K's and Q3_K's scales (for their
//   offsets 32 and 4);
// - scales: the scales in words, each 128-bit half holding the ones its half of a value register meets.
struct SuperScales {
  __m256i per_run, scales;
};
template <DType T>
[[gnu::always_inline]] inline SuperScales super_scales(const typename Weights<T>::Block& blk) {
  if constexpr (kSuper<T>) {
    const __m128i sm = k_scales_mins(blk);  // scales in bytes 0-7, minimums in 8-15
    return {_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm)), _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm))};
  } else if constexpr (T == DType::Q6_K) {
    const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    return {s, s};
  } else if constexpr (T == DType::Q2_K) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)), low = _mm_set1_epi8(0x0F);
    return {_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), low)), _mm256_cvtepu8_epi16(_mm_and_si128(v, low))};
  } else {
    const __m256i s = _mm256_cvtepi8_epi16(q3_k_scales(blk.scales));
    return {s, s};
  }
}

// The scales for value register k of the few-rows kernel's order (below) as int16 words for its byte pairs.
template <DType T, int K>
[[gnu::always_inline]] inline __m256i scales_for(const SuperScales& s) {
  if constexpr (kSuper<T>) return words_of_halves<K, K>(s.scales);  // sub-block K: one scale
  // Runs of 16: register K is sub-block K (half K / 4), runs 2K and 2K + 1 in its two 128-bit halves.
  const __m256i half = _mm256_permute2x128_si256(s.scales, s.scales, K < 4 ? 0x00 : 0x11);
  return words_of_halves<2 * (K % 4), 2 * (K % 4) + 1>(half);
}

// isum[i] + the dots of sub-blocks K..7 of a weight row's super-block with the activations' blocks at
// x + i * nb (values of at most 63 against |x| <= 127: the byte pairs fit int16, then times the scale in
// int32). Each value register is made and used before the next, so that few are live (AVX2 has 16).
template <DType T, int R, int K>
[[gnu::always_inline]] inline void sub_block_dots(const Q8Block* x, int64_t nb, const typename Weights<T>::Block& blk, const SuperScales& s,
                                                  __m256i* isum) {
  const __m256i u = Weights<T>::sub_block(blk, K), sc = scales_for<T, K>(s);
  for (int i = 0; i < R; ++i) isum[i] = dot_i16(isum[i], _mm256_maddubs_epi16(u, load32(x[i * nb + K].q)), sc);
  if constexpr (K < 7) sub_block_dots<T, R, K + 1>(x, nb, blk, s, isum);
}

// One K-quant weight row's super-block sb against R activation rows (nb blocks each, one after another,
// runs their run_sums for this super-block, one a row): per row, the integer of its sub-blocks' or runs' dots
// times their scales (Q6_K, Q3_K: their offsets 32 and 4 taken off as scale * run sum) as lanes to be added
// in isum, and the minimums' sum_r m_r * sum(x_r) as lanes in mins (types with minimums).
template <DType T, int R>
[[gnu::always_inline]] inline void super_dots(const Q8Block* x, int64_t nb, const RunSums* runs, int64_t supers, const uint8_t* row,
                                              int64_t sb, __m256i* isum, __m256i* mins) {
  const auto& blk = Weights<T>::block(row, sb);
  const SuperScales s = super_scales<T>(blk);
  for (int i = 0; i < R; ++i) isum[i] = _mm256_setzero_si256();
  sub_block_dots<T, R, 0>(x + sb * 8, nb, blk, s, isum);
  for (int i = 0; i < R; ++i) {
    __m256i acc = isum[i];
    const __m256i per_run = _mm256_madd_epi16(s.per_run, runs[i * supers + sb].load());
    if constexpr (kHasMins<T>) mins[i] = per_run;
    if constexpr (T == DType::Q6_K) acc = _mm256_sub_epi32(acc, _mm256_slli_epi32(per_run, 5));
    if constexpr (T == DType::Q3_K) acc = _mm256_sub_epi32(acc, _mm256_slli_epi32(per_run, 2));
    isum[i] = acc;
  }
}

// Weight rows [n0, n1) against R activation rows (nb blocks each, one after another), into y (rows ldy
// apart): four weight rows' super-blocks side by side, each unpacked once for the R rows, their lanes
// added together (sum_lanes4) before the float steps.
template <DType T, int R>
[[gnu::noinline]] void rows_times_super_few(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1,
                                            float* y, int64_t ldy) {
  using K = Weights<T>;
  constexpr bool kMins = kHasMins<T>;
  const int64_t supers = nb / 8;
  thread_local std::vector<RunSums> runs;
  run_sums(x, nb, R, runs);
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const uint8_t* r[4] = {w + size_t(n) * row_bytes, w + size_t(n + 1) * row_bytes, w + size_t(n + 2) * row_bytes,
                           w + size_t(n + 3) * row_bytes};
    AheadLines ahead(r[0], row_bytes, 4, supers, w + size_t(n1) * row_bytes);
    __m128 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm_setzero_ps();
    for (int64_t sb = 0; sb < supers; ++sb) {
      ahead.step();
      __m256i i0[R], i1[R], i2[R], i3[R], m0[R], m1[R], m2[R], m3[R];
      super_dots<T, R>(x, nb, runs.data(), supers, r[0], sb, i0, m0);
      super_dots<T, R>(x, nb, runs.data(), supers, r[1], sb, i1, m1);
      super_dots<T, R>(x, nb, runs.data(), supers, r[2], sb, i2, m2);
      super_dots<T, R>(x, nb, runs.data(), supers, r[3], sb, i3, m3);
      const __m128 d = widen4(K::block(r[0], sb).d, K::block(r[1], sb).d, K::block(r[2], sb).d, K::block(r[3], sb).d);
      __m128 neg_dmin = _mm_setzero_ps();
      if constexpr (kMins)
        neg_dmin = _mm_sub_ps(_mm_setzero_ps(), widen4(K::block(r[0], sb).dmin, K::block(r[1], sb).dmin, K::block(r[2], sb).dmin,
                                                       K::block(r[3], sb).dmin));
      for (int i = 0; i < R; ++i) {
        const __m128 xd = _mm_set1_ps(x[i * nb + sb * 8].d);
        acc[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(sum_lanes4(i0[i], i1[i], i2[i], i3[i])), _mm_mul_ps(d, xd), acc[i]);
        if constexpr (kMins) acc[i] = _mm_fmadd_ps(_mm_mul_ps(neg_dmin, xd), _mm_cvtepi32_ps(sum_lanes4(m0[i], m1[i], m2[i], m3[i])), acc[i]);
      }
    }
    for (int i = 0; i < R; ++i) _mm_storeu_ps(y + i * ldy + n, acc[i]);
  }
  for (; n < n1; ++n) {
    const uint8_t* r = w + size_t(n) * row_bytes;
    float acc[R] = {};
    for (int64_t sb = 0; sb < supers; ++sb) {
      __m256i isum[R], mins[R];
      super_dots<T, R>(x, nb, runs.data(), supers, r, sb, isum, mins);
      const float d = h2f(K::block(r, sb).d);
      for (int i = 0; i < R; ++i) {
        const float xd = x[i * nb + sb * 8].d;
        acc[i] = std::fma(float(sum_lanes(isum[i])), d * xd, acc[i]);
        if constexpr (kMins) acc[i] = std::fma(-h2f(K::block(r, sb).dmin) * xd, float(sum_lanes(mins[i])), acc[i]);
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
// split into values after: every unpacking step (Weights<T>::sub_block) works on each byte in its place, so
// it gives the same bytes either way, and one turn of packed bytes serves two sub-blocks (Q4_K).
template <DType T>
[[gnu::always_inline]] inline void turned_super(const uint8_t* const* r, int64_t sb, __m512i (*out)[8]) {
  using Block = typename Weights<T>::Block;
  const __m512i mask = _mm512_set1_epi8(0x0F);
  if constexpr (T == DType::Q6_K) {
    const __m512i three = _mm512_set1_epi8(3);
    for (int half = 0; half < 2; ++half) {  // Weights<Q6_K>::sub_block
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
    for (int p = 0; p < 4; ++p) {  // Weights<Q4_K>::sub_block (and Q5_K's)
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
[[gnu::noinline]] void rows_times_super_lanes16(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y,
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
    AheadLines ahead(r[0], row_bytes, 16, supers, w + size_t(n1) * row_bytes);
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
[[gnu::noinline]] void rows_times_super_one(const Q8Block* x, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y, int64_t ldy) {
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
    AheadLines ahead(r[0], row_bytes, 4, supers, w + size_t(n1) * row_bytes);
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
      unpack_sub_blocks<K>(K::block(rows[w], sb), nibbles[w]);
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

// A Q6_K, Q2_K or Q3_K super-block of one weight row as tile_runs16 reads it (mins: Q2_K's).
struct UnpackedRuns16 {
  alignas(32) uint8_t values[8][32];
  int16_t scale[16], mins[16];
};

template <DType T>
void unpack_runs16(const uint8_t* row, int64_t sb, UnpackedRuns16& u) {
  using K = Weights<T>;
  const auto& blk = K::block(row, sb);
  unpack_sub_blocks<K>(blk, u.values);
  for (int r = 0; r < 16; ++r) {
    if constexpr (T == DType::Q6_K) u.scale[r] = blk.scales[r];
    else if constexpr (T == DType::Q3_K) u.scale[r] = int16_t(K::scale(blk, r));
    else u.scale[r] = int16_t(blk.scales[r] & 0xF), u.mins[r] = int16_t(blk.scales[r] >> 4);
  }
}

// The GEMM walks the activation groups innermost (rows_times_weights), so a tile's W weight rows meet
// one group after another: tile_runs16 unpacks their super-blocks once, into a thread's copy that the
// next groups for the same rows read, instead of once a group (one thread, K = 2048, 512 rows, Zen 5,
// AVX2 table: Q3_K 89-95 -> 110-113 Gweights/s, Q6_K 102-107 -> 114-115, Q2_K 105-110 -> 108-113; Q4_K's
// and Q5_K's nibbles, cheap to take apart, measured no faster from a copy). Each GEMM call starts it
// empty (another call may find other weights at the same address).
struct UnpackedRows {
  std::vector<UnpackedRuns16> copy;
  const uint8_t* first = nullptr;  // the tile's first weight row; nullptr: none yet in this call
  int width = 0;                   // and its number of rows
};

template <DType T, int W>
[[gnu::always_inline]] inline const UnpackedRuns16* unpacked_rows(UnpackedRows& u, const uint8_t* const* rows, int64_t supers) {
  if (u.first != rows[0] || u.width != W) {
    u.copy.resize(size_t(W * supers));
    for (int64_t sb = 0; sb < supers; ++sb)
      for (int w = 0; w < W; ++w) unpack_runs16<T>(rows[w], sb, u.copy[size_t(sb * W + w)]);
    u.first = rows[0], u.width = W;
  }
  return u.copy.data();
}

// Q6_K, Q2_K and Q3_K (runs of 16 values, each with its scale): W weight rows against G groups of eight
// activation rows, a super-block at a time. The few-rows kernel's integers (Q6_K and Q3_K: the runs'
// offsets 32 or 4 times their activations' sums taken off; Q2_K: its minimums against them) and float steps.
// reuse: the call's copy of unpacked rows (UnpackedRows), or nullptr where no other group meets these rows.
template <DType T, int W, int G>
[[gnu::always_inline]] inline void tile_runs16(const Octet* const* x, int64_t nb, const uint8_t* const* rows, size_t ahead,
                                               UnpackedRows* reuse, __m256* out) {
  using K = Weights<T>;
  __m256 acc[W][G];
  for (int w = 0; w < W; ++w)
    for (int g = 0; g < G; ++g) acc[w][g] = _mm256_setzero_ps();
  const UnpackedRuns16* unpacked = reuse ? unpacked_rows<T, W>(*reuse, rows, nb / 8) : nullptr;
  UnpackedRuns16 here[W];
  for (int64_t sb = 0; sb < nb / 8; ++sb) {
    prefetch_superblock<typename K::Block, W>(rows, ahead, sb);
    const UnpackedRuns16* u = unpacked + sb * W;
    if (!unpacked) {
      for (int w = 0; w < W; ++w) unpack_runs16<T>(rows[w], sb, here[w]);
      u = here;
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
            const __m256i wc = broadcast4(u[w].values[j] + 4 * c);
            for (int g = 0; g < G; ++g)
              part[w][g] = _mm256_add_epi16(part[w][g], _mm256_maddubs_epi16(wc, load32(x[g][b].chunk[c])));
          }
          // Six-bit values times int8 pair up to 16002 per int16 lane: two chunks fit, then widen times the scale.
          if (c % 2 == 1)
            for (int w = 0; w < W; ++w)
              for (int g = 0; g < G; ++g) {
                isum[w][g] = _mm256_add_epi32(isum[w][g], _mm256_madd_epi16(part[w][g], _mm256_set1_epi16(u[w].scale[2 * j + run])));
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
        const int16_t* v = T == DType::Q2_K ? u[w].mins : u[w].scale;
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

#ifdef FTLLM_VNNI
// Up to this many activation rows take the one-row kernel, more the sixteen-lane kernel: the faster from
// three rows on Zen 5, and for Q3_K (whose third bits cost the one-row kernel more) from two: at two rows,
// one thread, K = 2048, Q3_K ran 64-66 Gweights/s one-row, 85-88 in lanes; Q2_K, Q4_K and Q6_K lost 25-35%.
template <DType T>
constexpr int kSuperOneRows = T == DType::Q3_K ? 1 : 2;
#endif

template <DType T>
void matmul_t(const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t nb = K / 32;
  const size_t bytes = row_bytes(T, K);
  const auto* weights = static_cast<const uint8_t*>(w);
  if (M <= 0) return;
  prefetch_first_lines(weights + size_t(n0) * bytes, weights + size_t(n1) * bytes);  // this thread's rows, whichever kernel reads them
#ifdef FTLLM_VNNI
  // Sixteen activation rows at a time (up to kSuperOneRows through the one-row kernel); beyond
  // sixteen the weights go in tiles of about 256 KB, read from memory once and from L2 by each sixteen rows.
  constexpr int L = 16;
  const int64_t n_tile = M <= L ? n1 - n0 : std::max<int64_t>(L, int64_t((256 << 10) / bytes) / L * L);
  for (int64_t n = n0; n < n1; n += n_tile)
    for (int64_t m = 0; m < M; m += L)
      with_rows<1, L>(std::min<int64_t>(L, M - m), [&, n_end = std::min(n1, n + n_tile)]<int R>() {
        if constexpr (R <= kSuperOneRows<T>) rows_times_super_one<T, R>(xq + m * nb, nb, weights, bytes, n, n_end, y + m * ldy, ldy);
        else rows_times_super_lanes16<T, R>(xq + m * nb, nb, weights, bytes, n, n_end, y + m * ldy, ldy);
      });
#else
  if (M >= kFewRows) {
    // Rows are met again only where the call has more activation groups than a tile takes.
    thread_local UnpackedRows unpacked;
    unpacked.first = nullptr;
    UnpackedRows* reuse = (M + 7) / 8 > kTileGroups ? &unpacked : nullptr;
    return rows_times_weights<T>(xq, M, nb, weights, bytes, n0, n1, y, ldy,
                                 [reuse]<int W, int G>(const Octet* const* x, int64_t nb, const uint8_t* const* rows, size_t ahead, __m256* out) __attribute__((always_inline)) {
                                   if constexpr (kSuper<T>) tile_k<T, W, G>(x, nb, rows, ahead, out);
                                   else tile_runs16<T, W, G>(x, nb, rows, ahead, reuse, out);
                                 });
  }
  with_rows<1, kFewRows - 1>(M, [&]<int R>() { rows_times_super_few<T, R>(xq, nb, weights, bytes, n0, n1, y, ldy); });
#endif
}

#ifdef FTLLM_VNNI

template <DType T>
void amx_pack_super_panel_t(const uint8_t* w, size_t row_bytes, int64_t n, int64_t super_blocks, AmxSuperBlock* out) {
  using K = Weights<T>;
  alignas(64) uint8_t values[16][8][32];
  for (int64_t sb = 0; sb < super_blocks; ++sb) {
    AmxSuperBlock& p = out[sb];
    for (int r = 0; r < 16; ++r) {
      const auto& blk = K::block(w + size_t(n + r) * row_bytes, sb);
      unpack_sub_blocks<K>(blk, values[r]);
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

#endif

}  // namespace

#ifdef FTLLM_VNNI
void amx_pack_q6k_panel(const uint8_t* w, size_t row_bytes, int64_t n, int64_t super_blocks, AmxQ6Block* out) {
  using K = Weights<DType::Q6_K>;
  alignas(64) uint8_t values[16][8][32];
  for (int64_t sb = 0; sb < super_blocks; ++sb) {
    AmxQ6Block& p = out[sb];
    for (int r = 0; r < 16; ++r) {
      const auto& blk = K::block(w + size_t(n + r) * row_bytes, sb);
      unpack_sub_blocks<K>(blk, values[r]);
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

#endif

void matmul_k_quant(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  quant::decode::with_dtype(wt, [&]<DType T>() {
    if constexpr (kKQuant<T>) matmul_t<T>(xq, M, K, w, n0, n1, y, ldy);
  });
}

}  // namespace ftllm::cpu::FTLLM_QUANT_NS
