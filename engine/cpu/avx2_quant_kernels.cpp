// Integer dot products of quantized weight rows with int8 activations (Q8Block), for the types
// avx2_exact_blocks.cpp does not take (Q6_K, int4, int4gN): 32 weights and 32
// activations per step, scaled into eight float lanes. Compiled twice: for AVX2 (-mavx2 -mfma -mf16c;
// vpmaddubsw + vpmaddwd) into namespace avx2, and with FTLLM_VNNI for AVX-512 VNNI on 256-bit registers
// (vpdpbusd does both in one instruction) into namespace avx512vnni. Each is only called after cpuid
// said the processor has it.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../quant/ggml_blocks.h"
#include "avx2_quant.h"
#include "avx2_util.h"
#include "tiling.h"

#ifdef FTLLM_VNNI
#define FTLLM_QUANT_NS avx512vnni
#else
#define FTLLM_QUANT_NS avx2
#endif

namespace ftllm::cpu::FTLLM_QUANT_NS {

namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// 16 bytes of packed nibbles to 32 unsigned bytes: low nibbles first (values 0-15), then high ones.
// The 16 bytes are broadcast to both halves by the load itself and the upper half shifted by a per-lane
// count, which keeps the shuffle port free (an insert would take it).
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// acc + the sum of products of unsigned bytes u and signed bytes s, as eight int32 lanes (lane i: bytes
// 4i..4i+3). Without VNNI the byte pairs go through int16, exact while u <= 127 or |s| small enough.
inline __m256i dot_u8s8_acc(__m256i acc, __m256i u, __m256i s) {
#ifdef FTLLM_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
// The same without an accumulator, as float.
inline __m256 dot_u8s8(__m256i u, __m256i s) { return _mm256_cvtepi32_ps(dot_u8s8_acc(_mm256_setzero_si256(), u, s)); }
// Signed by signed: move a's sign onto b so that |a| can go in as the unsigned operand.

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }



// The kernels below add one unit of a weight row (a block; a super-block for K-quants; a group for
// int4gN) times R activation rows into acc[R] (eight float
// lanes) and mins[R] (the minimums' share, scaled). dot_rows runs them over W weight rows at once.

template <int R>
[[gnu::always_inline]] inline void add_block_i4(const Q8Block* const* xq, int64_t b, const uint8_t* row, __m256* acc, float* mins) {
  const __m256i w = unpack_nibbles(row + 8 + 16 * b);
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_fmadd_ps(dot_u8s8(w, load32(xq[r][b].q)), _mm256_set1_ps(xq[r][b].d), acc[r]);
    mins[r] += xq[r][b].ds;
  }
}

// Q6_K a super-block at a time over q8_K-style activations (one scale per 256): per 128-value half, 64
// bytes of low nibbles and 32 of high bit pairs loaded once for its four runs of 32 values. A run's
// unsigned 6-bit values u meet the activations in vpmaddubsw, 32 * x is taken off the pairs (u - 32 is
// the weight), and vpmaddwd applies the run's two int8 scales (first 16 values, last 16); all sixteen
// runs sum in integers before one float multiply.
template <int R>
[[gnu::always_inline]] inline void add_superblock_q6k(const Q8Block* const* xq, int64_t sb, const uint8_t* row, __m256* acc) {
  const __m256i mask = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), offset = _mm256_set1_epi8(32);
  const auto& blk = reinterpret_cast<const quant::BlockQ6_K*>(row)[sb];
  __m256i isum[R];
  for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
  for (int half = 0; half < 2; ++half) {
    const __m256i ql0 = load32(blk.ql + 64 * half), ql1 = load32(blk.ql + 64 * half + 32);
    const __m256i qh = load32(blk.qh + 32 * half);
    const __m256i low[4] = {_mm256_and_si256(ql0, mask), _mm256_and_si256(ql1, mask),
                            _mm256_and_si256(_mm256_srli_epi16(ql0, 4), mask), _mm256_and_si256(_mm256_srli_epi16(ql1, 4), mask)};
    for (int quarter = 0; quarter < 4; ++quarter) {
      const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), three);
      const __m256i u = _mm256_or_si256(low[quarter], _mm256_slli_epi16(top, 4));  // 0..63
      const int8_t* sc = blk.scales + 8 * half + 2 * quarter;
      const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
      const int64_t b = sb * 8 + 4 * half + quarter;
      for (int r = 0; r < R; ++r) {
        const __m256i x = load32(xq[r][b].q);
        // |u x + u' x'| <= 16002 and |32 (x + x')| <= 8128: int16 holds both and their difference.
        const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(u, x), _mm256_maddubs_epi16(offset, x));
#ifdef FTLLM_VNNI
        isum[r] = _mm256_dpwssd_epi32(isum[r], pairs, scales);
#else
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(pairs, scales));
#endif
      }
    }
  }
  const float d = h2f(blk.d);
  for (int r = 0; r < R; ++r)
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * xq[r][sb * 8].d), acc[r]);
}

// int4gN a group at a time: its float16 scale and minimum converted once, its blocks in an unrolled loop,
// the minimum's share added once per group.
template <DType T, int R>
[[gnu::always_inline]] inline void add_group(const Q8Block* const* xq, int64_t g, const uint8_t* row, __m256* acc, float* mins) {
  constexpr int64_t kBlocks = dtype_layout(T).block_values / 32;
  constexpr size_t kBytes = dtype_layout(T).block_bytes;
  {
    const uint8_t* group = row + size_t(g) * kBytes;
    uint16_t h[2];
    std::memcpy(h, group, 4);
    const float scale = h2f(h[0]), min = h2f(h[1]);
    float sums[R] = {};
    for (int64_t i = 0; i < kBlocks; ++i) {
      const int64_t b = g * kBlocks + i;
      const __m256i w = unpack_nibbles(group + 4 + 16 * i);
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(dot_u8s8(w, load32(xq[r][b].q)), _mm256_set1_ps(scale * xq[r][b].d), acc[r]);
        sums[r] += xq[r][b].ds;
      }
    }
    for (int r = 0; r < R; ++r) mins[r] = std::fma(min, sums[r], mins[r]);
  }
}

template <DType T>
constexpr bool kGrouped = T == DType::I4G32 || T == DType::I4G64 || T == DType::I4G128 || T == DType::I4G256;

// W weight rows against R activation rows: out[w * R + r]. Each output's sum runs in the same order
// whatever R and W are, so a sequence gets the same bits alone or batched; the W rows' sums are
// independent chains the core overlaps (one row alone waits on its accumulator's latency each block).
// Several weight rows read side by side are several streams through one page, which the hardware
// prefetcher follows poorly: each unit read also asks for the same unit `ahead` bytes on (the next rows).
template <DType T, int R, int W>
void dot_rows(const Q8Block* const* xq, int64_t nb, const uint8_t* const* rows, size_t ahead,
              float* out) {
  __m256 acc[W][R];
  float mins[W][R];
  for (int w = 0; w < W; ++w)
    for (int r = 0; r < R; ++r) acc[w][r] = _mm256_setzero_ps(), mins[w][r] = 0;
  constexpr size_t kUnitBytes = dtype_layout(T).block_bytes;
  const int64_t units = nb * 32 / dtype_layout(T).block_values;
  for (int64_t u = 0; u < units; ++u)
    for (int w = 0; w < W; ++w) {
      if (ahead) _mm_prefetch(reinterpret_cast<const char*>(rows[w] + ahead + size_t(u) * kUnitBytes), _MM_HINT_T0);
      if constexpr (T == DType::Q6_K) add_superblock_q6k<R>(xq, u, rows[w], acc[w]);
      else if constexpr (kGrouped<T>) add_group<T, R>(xq, u, rows[w], acc[w], mins[w]);
      else add_block_i4<R>(xq, u, rows[w], acc[w], mins[w]);
    }
  for (int w = 0; w < W; ++w) {
    // mins holds the minimum's share: already scaled, except for int4's one minimum per row.
    float row_scale = 1, row_min = 1;
    if constexpr (T == DType::I4) std::memcpy(&row_scale, rows[w], 4);
    if constexpr (T == DType::I4) std::memcpy(&row_min, rows[w] + 4, 4);
    // An explicit fma: left to contraction, instantiations could fuse different products and differ.
    for (int r = 0; r < R; ++r) out[w * R + r] = std::fma(row_min, mins[w][r], row_scale * hsum(acc[w][r]));
  }
}

template <DType T>
void matmul_t(const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int64_t nb = K / 32;
  const size_t bytes = row_bytes(T, K);
  auto row_of = [&](int64_t n) { return static_cast<const uint8_t*>(w) + size_t(n) * bytes; };
  // R activation rows from m against W weight rows from n.
  auto dots = [&]<int R, int W>(int64_t m, int64_t n) {
    const Q8Block* xs[R];
    for (int r = 0; r < R; ++r) xs[r] = xq + (m + r) * nb;
    const uint8_t* ws[W];
    for (int w = 0; w < W; ++w) ws[w] = row_of(n + w);
    float out[R * W];
    // Prefetch the next W rows while they are still this thread's (n1 is where its share ends).
    const size_t ahead = n + 2 * W + 2 <= n1 ? (W + 2) * bytes : 0;
    dot_rows<T, R, W>(xs, nb, ws, ahead, out);
    for (int w = 0; w < W; ++w)
      for (int r = 0; r < R; ++r) y[(m + r) * ldy + n + w] = out[w * R + r];
  };
  for_each_tile(
      M, n0, n1, size_t(nb) * sizeof(Q8Block), bytes, [&](int64_t m, int64_t n) { dots.template operator()<4, 1>(m, n); },
      [&](int64_t m, int64_t n) {
        // K-quant super-blocks take so many registers that four rows at once spill (measured slower).
        if constexpr (T == DType::Q6_K)
          for (int w = 0; w < 4; ++w) dots.template operator()<1, 1>(m, n + w);
        else
          dots.template operator()<1, 4>(m, n);
      },
      [&](int64_t m, int64_t n) { dots.template operator()<1, 1>(m, n); });
}

}  // namespace

bool uses_q8(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q4_K:
    case DType::Q5_K: case DType::Q6_K: case DType::I8: case DType::I4: case DType::I4G32: case DType::I4G64:
    case DType::I4G128: case DType::I4G256:
      return true;
    default:
      return false;
  }
}

void matmul_q8(DType wt, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
               int64_t ldy) {
  if (matmul_exact_blocks(wt, xq, M, K, w, n0, n1, y, ldy)) return;  // Q4_0, Q8_0, int8
  switch (wt) {
    case DType::Q6_K: return matmul_t<DType::Q6_K>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4: return matmul_t<DType::I4>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4G32: return matmul_t<DType::I4G32>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4G64: return matmul_t<DType::I4G64>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4G128: return matmul_t<DType::I4G128>(xq, M, K, w, n0, n1, y, ldy);
    case DType::I4G256: return matmul_t<DType::I4G256>(xq, M, K, w, n0, n1, y, ldy);
    default: return;
  }
}

namespace {

inline float max_abs(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mx = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

// One block of 32 at scale d (the same float operations as the scalar reference, so the same bytes).
inline void quantize_block(const float* x, float d, bool half_d, Q8Block& out) {
  const float id = d > 0 ? 1.0f / d : 0.0f;
  __m256i q[4];
  for (int i = 0; i < 4; ++i)
    q[i] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), _mm256_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  const int32_t sum = _mm_cvtsi128_si32(s4);
  // Narrow 4 x 8 int32 to 32 int8; the packs interleave 128-bit lanes, the permute restores order.
  __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  packed = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q), packed);
  out.d = half_d ? _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT)) : d;
  out.sum = sum;
  out.ds = out.d * float(sum);
  out.s = _cvtsh_ss(_cvtss_sh(d * float(sum), _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace

void quantize_q8(const float* x, int64_t K, Q8Block* out) {
  for (int64_t b = 0; b < K / 32; ++b, x += 32) quantize_block(x, max_abs(x, 32) / 127.0f, true, out[b]);
}

void quantize_q8_256(const float* x, int64_t K, Q8Block* out) {
  for (int64_t sb = 0; sb < K / 256; ++sb, x += 256) {
    const float d = max_abs(x, 256) / 127.0f;
    for (int b = 0; b < 8; ++b) quantize_block(x + 32 * b, d, false, out[sb * 8 + b]);
  }
}

}  // namespace ftllm::cpu::FTLLM_QUANT_NS
