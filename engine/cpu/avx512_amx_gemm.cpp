// The quantized-weight GEMM on AMX tiles (Intel Sapphire Rapids and later): for 16 activation rows by 16
// weight rows, each 32-value block's 256 integer dots come from one tile instruction (tdpbssd for signed
// weights, tdpbsud for the unsigned ones), where AVX-512 VNNI needs 64 vpdpbusd and their operands' loads
// and broadcasts. The integers are exact, and every block then takes the float steps all the other
// kernels take (avx2_quant.h, AmxType), in block order: a row's bits are the same on this path, the VNNI
// GEMM and the one-row path, so batching still never changes a request's tokens.
//
// Shape: the weights go through in panels of 16 rows, unpacked once per call into the tiles' layout
// (amx_pack_panel); every group of 16 activation rows is read in place from its Q8Blocks (a strided tile
// load), and two blocks are in flight in two sets of tiles so the tile unit works on the next pair while
// the vector unit scales the last. Rows that do not fill 16 (the batch's last M % 16 activation rows, a
// thread's last weight rows) go through the VNNI kernels. Q4_K and Q5_K take eight tiles per super-block,
// Q6_K sixteen of 16-value runs, whose dots are then scaled in integers.
//
// The tile instructions come through a policy: Hardware issues them (GNU as knows them, no -mamx flags
// needed), Emulated carries them out in C++ exactly as the Intel SDM defines them. The emulated table is
// what the unit tests check the tiling and layout with on machines without AMX; the hardware table is
// used only after the kernel granted the tile state (kernel_select.cpp) and a self-check here matched
// the VNNI kernels bit for bit.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "../quant/ggml_blocks.h"
#include "avx2_quant.h"

namespace ftllm::cpu {

const Kernels& avx512vnni_kernel_table();  // avx2_kernels.cpp
using avx512vnni::AmxPanelBlock;
using avx512vnni::AmxQ6Block;
using avx512vnni::AmxSuperBlock;
using avx512vnni::AmxType;

namespace {

// The 64-byte operand of ldtilecfg, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0 and 1 hold sums (16 x 16 int32), 2 and 3 activations (16 rows x 32 bytes: one block each),
// 4 and 5 weights (8 rows x 64 bytes: 16 rows' block, words transposed); slot s uses 0 + s, 2 + s, 4 + s.
TileConfig gemm_config() {
  TileConfig c;
  for (int s = 0; s < 2; ++s) {
    c.rows[s] = 16, c.colsb[s] = 64;
    c.rows[2 + s] = 16, c.colsb[2 + s] = 32;
    c.rows[4 + s] = 8, c.colsb[4 + s] = 64;
  }
  return c;
}

struct Hardware {
  static void configure(const TileConfig& c) { asm volatile("ldtilecfg %0" : : "m"(c) : "memory"); }
  static void release() { asm volatile("tilerelease" : : : "memory"); }
  template <int S>
  static void load_a(const void* p, int64_t stride) {
    if constexpr (S == 0) asm volatile("tileloadd (%0,%1,1), %%tmm2" : : "r"(p), "r"(stride) : "memory");
    else asm volatile("tileloadd (%0,%1,1), %%tmm3" : : "r"(p), "r"(stride) : "memory");
  }
  template <int S>
  static void load_b(const void* p) {
    const int64_t stride = 64;
    if constexpr (S == 0) asm volatile("tileloadd (%0,%1,1), %%tmm4" : : "r"(p), "r"(stride) : "memory");
    else asm volatile("tileloadd (%0,%1,1), %%tmm5" : : "r"(p), "r"(stride) : "memory");
  }
  // C_s = A_s . B_s (the sums start from zero), signed activations by signed or unsigned weight bytes.
  template <int S, bool SignedWeights>
  static void dot() {
    if constexpr (S == 0) {
      asm volatile("tilezero %%tmm0" : : : );
      if constexpr (SignedWeights) asm volatile("tdpbssd %%tmm4, %%tmm2, %%tmm0" : : : );
      else asm volatile("tdpbsud %%tmm4, %%tmm2, %%tmm0" : : : );
    } else {
      asm volatile("tilezero %%tmm1" : : : );
      if constexpr (SignedWeights) asm volatile("tdpbssd %%tmm5, %%tmm3, %%tmm1" : : : );
      else asm volatile("tdpbsud %%tmm5, %%tmm3, %%tmm1" : : : );
    }
  }
  template <int S>
  static void store_c(int32_t (*out)[16]) {
    const int64_t stride = 64;
    if constexpr (S == 0) asm volatile("tilestored %%tmm0, (%0,%1,1)" : : "r"(out), "r"(stride) : "memory");
    else asm volatile("tilestored %%tmm1, (%0,%1,1)" : : "r"(out), "r"(stride) : "memory");
  }
};

// The same instructions in C++ (Intel SDM: TILELOADD, TILEZERO, TDPBSSD/TDPBSUD, TILESTORED): a tile is
// rows x colsb bytes, the rest of its 16 x 64 zero.
struct Emulated {
  struct State {
    TileConfig config;
    alignas(64) uint8_t tile[8][16][64];
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  static void configure(const TileConfig& c) {
    state().config = c;
    std::memset(state().tile, 0, sizeof state().tile);
  }
  static void release() { configure(TileConfig{}); }
  static void load(int t, const void* p, int64_t stride) {
    State& s = state();
    std::memset(s.tile[t], 0, sizeof s.tile[t]);
    for (int r = 0; r < s.config.rows[t]; ++r) std::memcpy(s.tile[t][r], static_cast<const uint8_t*>(p) + r * stride, s.config.colsb[t]);
  }
  template <int S>
  static void load_a(const void* p, int64_t stride) { load(2 + S, p, stride); }
  template <int S>
  static void load_b(const void* p) { load(4 + S, p, 64); }
  template <int S, bool SignedWeights>
  static void dot() {
    State& s = state();
    const int c = S, a = 2 + S, b = 4 + S;
    std::memset(s.tile[c], 0, sizeof s.tile[c]);
    for (int m = 0; m < s.config.rows[c]; ++m)
      for (int n = 0; n < s.config.colsb[c] / 4; ++n) {
        int32_t sum = 0;
        for (int k = 0; k < s.config.colsb[a] / 4; ++k)
          for (int i = 0; i < 4; ++i) {
            const int32_t av = int8_t(s.tile[a][m][4 * k + i]);
            const uint8_t bb = s.tile[b][k][4 * n + i];
            sum += av * (SignedWeights ? int32_t(int8_t(bb)) : int32_t(bb));
          }
        std::memcpy(&s.tile[c][m][4 * n], &sum, 4);
      }
  }
  template <int S>
  static void store_c(int32_t (*out)[16]) {
    State& s = state();
    for (int r = 0; r < s.config.rows[S]; ++r) std::memcpy(out[r], s.tile[S][r], s.config.colsb[S]);
  }
};

// Block b's 256 integer dots (c) into the 16 rows' sums, the steps of avx2_quant.h's AmxType.
template <bool HasMin, bool MinTimesDs>
[[gnu::always_inline]] inline void scale_block(__m512* acc, const int32_t (*c)[16], const AmxPanelBlock& w, const Q8Block* x, int64_t nb,
                                               int64_t b, int offset) {
  const __m512 ws = _mm512_loadu_ps(w.scale), mins = _mm512_loadu_ps(w.min);
  for (int r = 0; r < 16; ++r) {
    const Q8Block& xb = x[r * nb + b];
    const __m512i dot = _mm512_add_epi32(_mm512_load_si512(c[r]), _mm512_set1_epi32(-offset * xb.sum));
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws, _mm512_set1_ps(xb.d)), acc[r]);
    if constexpr (HasMin) acc[r] = _mm512_fmadd_ps(mins, _mm512_set1_ps(MinTimesDs ? xb.ds : xb.s), acc[r]);
  }
}

// Activation rows [0, 16 * groups) against weight rows [n0, n1), n1 - n0 a multiple of 16.
template <class Tiles, bool Signed, bool HasMin, bool MinTimesDs>
void gemm(DType wt, const AmxType& type, const Q8Block* xq, int64_t groups, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0,
          int64_t n1, float* y, int64_t ldy) {
  thread_local std::vector<AmxPanelBlock> panel;
  panel.resize(size_t(nb));
  alignas(64) float row_scale[16];
  alignas(64) int32_t sums[2][16][16];
  const int64_t a_stride = nb * int64_t(sizeof(Q8Block));
  Tiles::configure(gemm_config());
  for (int64_t n = n0; n < n1; n += 16) {
    avx512vnni::amx_pack_panel(wt, w, row_bytes, n, nb, panel.data(), row_scale);
    for (int64_t g = 0; g < groups; ++g) {
      const Q8Block* x = xq + g * 16 * nb;
      auto issue = [&]<int S>(int64_t b) {
        Tiles::template load_a<S>(x[b].q, a_stride);
        Tiles::template load_b<S>(panel[size_t(b)].b_tile);
        Tiles::template dot<S, Signed>();
      };
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      issue.template operator()<0>(0);
      if (nb > 1) issue.template operator()<1>(1);
      for (int64_t b = 0; b < nb; b += 2) {
        Tiles::template store_c<0>(sums[0]);
        if (b + 1 < nb) Tiles::template store_c<1>(sums[1]);
        if (b + 2 < nb) issue.template operator()<0>(b + 2);
        if (b + 3 < nb) issue.template operator()<1>(b + 3);
        scale_block<HasMin, MinTimesDs>(acc, sums[0], panel[size_t(b)], x, nb, b, type.offset);
        if (b + 1 < nb) scale_block<HasMin, MinTimesDs>(acc, sums[1], panel[size_t(b + 1)], x, nb, b + 1, type.offset);
      }
      const __m512 rs = _mm512_load_ps(row_scale);
      for (int r = 0; r < 16; ++r) _mm512_storeu_ps(y + (g * 16 + r) * ldy + n, type.row_scale ? _mm512_mul_ps(rs, acc[r]) : acc[r]);
    }
  }
  Tiles::release();
}

// Count tiles' dots into sums[0..Count), two in flight: issue<S>(i) loads tile i's operands into slot S
// and takes its dot; each slot is stored before it is issued again.
template <class Tiles, int Count, typename Issue>
[[gnu::always_inline]] inline void dots_into(int32_t (*sums)[16][16], Issue&& issue) {
  issue.template operator()<0>(0);
  issue.template operator()<1>(1);
  for (int i = 0; i < Count; i += 2) {
    Tiles::template store_c<0>(sums[i]);
    Tiles::template store_c<1>(sums[i + 1]);
    if (i + 2 < Count) issue.template operator()<0>(i + 2), issue.template operator()<1>(i + 3);
  }
}

// Q4_K and Q5_K: activation rows [0, 16 * groups) against weight rows [n0, n1), a super-block at a time:
// its eight blocks' dots from the tiles, then in integers times their 6-bit scales and summed, the
// minimums' integer from the activations' block sums (vpdpwssd on pairs), and the two float steps.
template <class Tiles>
void gemm_super(DType wt, const Q8Block* xq, int64_t groups, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1,
                float* y, int64_t ldy) {
  const int64_t super_blocks = nb / 8;
  thread_local std::vector<AmxSuperBlock> panel;
  panel.resize(size_t(super_blocks));
  alignas(64) int32_t sums[8][16][16];
  const int64_t a_stride = nb * int64_t(sizeof(Q8Block));
  Tiles::configure(gemm_config());
  for (int64_t n = n0; n < n1; n += 16) {
    avx512vnni::amx_pack_super_panel(wt, w, row_bytes, n, super_blocks, panel.data());
    for (int64_t g = 0; g < groups; ++g) {
      const Q8Block* x = xq + g * 16 * nb;
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int64_t sb = 0; sb < super_blocks; ++sb) {
        const AmxSuperBlock& p = panel[size_t(sb)];
        dots_into<Tiles, 8>(sums, [&]<int S>(int j) {
          Tiles::template load_a<S>(x[sb * 8 + j].q, a_stride);
          Tiles::template load_b<S>(p.b_tile[j]);
          Tiles::template dot<S, false>();
        });
        const __m512 d = _mm512_loadu_ps(p.d), neg_dmin = _mm512_loadu_ps(p.neg_dmin);
        for (int r = 0; r < 16; ++r) {
          const Q8Block* xr = x + r * nb + sb * 8;
          __m512i isum = _mm512_setzero_si512(), msum = _mm512_setzero_si512();
          for (int j = 0; j < 8; ++j)
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(_mm512_load_si512(sums[j][r]), _mm512_loadu_si512(p.scale[j])));
          for (int k = 0; k < 4; ++k) {
            const __m512i pair = _mm512_set1_epi32(int16_pair(xr[2 * k].sum, xr[2 * k + 1].sum));
            msum = _mm512_dpwssd_epi32(msum, pair, _mm512_loadu_si512(p.min_pairs[k]));
          }
          const __m512 xd = _mm512_set1_ps(xr[0].d);
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, xd), acc[r]);
          acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(neg_dmin, xd), _mm512_cvtepi32_ps(msum), acc[r]);
        }
      }
      for (int r = 0; r < 16; ++r) _mm512_storeu_ps(y + (g * 16 + r) * ldy + n, acc[r]);
    }
  }
  Tiles::release();
}

// Q6_K: as gemm_super, with tiles of runs of 16 values (activation tiles 16 x 16 bytes, weight tiles
// 4 x 64), each run's dots times its int8 scale, and the -32 offset from the activations' half-block
// sums (computed once per call, as int16 pairs) times the scales.
template <class Tiles>
void gemm_q6k(const Q8Block* xq, int64_t groups, int64_t nb, const uint8_t* w, size_t row_bytes, int64_t n0, int64_t n1, float* y,
              int64_t ldy) {
  const int64_t super_blocks = nb / 8;
  thread_local std::vector<AmxQ6Block> panel;
  thread_local std::vector<int32_t> halves_of_rows;
  panel.resize(size_t(super_blocks));
  halves_of_rows.resize(size_t(groups * 16 * nb));
  for (size_t i = 0; i < halves_of_rows.size(); ++i) halves_of_rows[i] = half_sums(xq[i]);
  alignas(64) int32_t sums[16][16][16];
  const int64_t a_stride = nb * int64_t(sizeof(Q8Block));
  TileConfig config = gemm_config();
  for (int s = 0; s < 2; ++s) config.colsb[2 + s] = 16, config.rows[4 + s] = 4;
  Tiles::configure(config);
  for (int64_t n = n0; n < n1; n += 16) {
    avx512vnni::amx_pack_q6k_panel(w, row_bytes, n, super_blocks, panel.data());
    for (int64_t g = 0; g < groups; ++g) {
      const Q8Block* x = xq + g * 16 * nb;
      const int32_t* halves = halves_of_rows.data() + g * 16 * nb;
      __m512 acc[16];
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int64_t sb = 0; sb < super_blocks; ++sb) {
        const AmxQ6Block& p = panel[size_t(sb)];
        dots_into<Tiles, 16>(sums, [&]<int S>(int run) {
          Tiles::template load_a<S>(x[sb * 8 + run / 2].q + 16 * (run % 2), a_stride);
          Tiles::template load_b<S>(p.b_tile[run]);
          Tiles::template dot<S, false>();
        });
        const __m512 d = _mm512_loadu_ps(p.d);
        for (int r = 0; r < 16; ++r) {
          __m512i isum = _mm512_setzero_si512(), offset = _mm512_setzero_si512();
          for (int run = 0; run < 16; ++run)
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(_mm512_load_si512(sums[run][r]), _mm512_loadu_si512(p.scale[run])));
          for (int j = 0; j < 8; ++j)
            offset = _mm512_dpwssd_epi32(offset, _mm512_set1_epi32(halves[r * nb + sb * 8 + j]), _mm512_loadu_si512(p.scale_pairs[j]));
          const __m512i total = _mm512_sub_epi32(isum, _mm512_slli_epi32(offset, 5));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, _mm512_set1_ps(x[r * nb + sb * 8].d)), acc[r]);
        }
      }
      for (int r = 0; r < 16; ++r) _mm512_storeu_ps(y + (g * 16 + r) * ldy + n, acc[r]);
    }
  }
  Tiles::release();
}

template <class Tiles>
void gemm_of_type(DType wt, const AmxType& t, const Q8Block* xq, int64_t groups, int64_t nb, const uint8_t* w, size_t row_bytes,
                  int64_t n0, int64_t n1, float* y, int64_t ldy) {
  if (t.q6k) return gemm_q6k<Tiles>(xq, groups, nb, w, row_bytes, n0, n1, y, ldy);
  if (t.super) return gemm_super<Tiles>(wt, xq, groups, nb, w, row_bytes, n0, n1, y, ldy);
  if (t.is_signed) return gemm<Tiles, true, false, false>(wt, t, xq, groups, nb, w, row_bytes, n0, n1, y, ldy);
  if (!t.has_min) return gemm<Tiles, false, false, false>(wt, t, xq, groups, nb, w, row_bytes, n0, n1, y, ldy);
  if (t.min_times_ds) return gemm<Tiles, false, true, true>(wt, t, xq, groups, nb, w, row_bytes, n0, n1, y, ldy);
  return gemm<Tiles, false, true, false>(wt, t, xq, groups, nb, w, row_bytes, n0, n1, y, ldy);
}

// The VNNI table's matmul, with whole 16 x 16 tiles of the block types on AMX from amx_min_rows(wt) rows.
// Below that the panels, packed for each call, serve too few tile passes to pay for their packing.
template <class Tiles>
void matmul(DType wt, const float* x, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
            int64_t ldy) {
  const Kernels& vnni = avx512vnni_kernel_table();
  const AmxType type = avx512vnni::amx_type(wt);
  const int64_t m16 = M / 16 * 16, n16 = n0 + (n1 - n0) / 16 * 16;
  if (!type.supported || M < amx_min_rows(wt) || n16 == n0) return vnni.matmul(wt, x, xq, M, K, w, n0, n1, y, ldy);
  const int64_t nb = K / 32;
  gemm_of_type<Tiles>(wt, type, xq, m16 / 16, nb, static_cast<const uint8_t*>(w), row_bytes(wt, K), n0, n16, y, ldy);
  if (n16 < n1) vnni.matmul(wt, x, xq, m16, K, w, n16, n1, y, ldy);
  if (m16 < M) vnni.matmul(wt, x + m16 * K, xq + m16 * nb, M - m16, K, w, n0, n1, y + m16 * ldy, ldy);
}

template <class Tiles>
Kernels amx_table(const char* name) {
  Kernels k = avx512vnni_kernel_table();
  k.name = name;
  k.matmul = matmul<Tiles>;
  return k;
}

}  // namespace

// Measured on a Xeon with AMX (an H200 machine's host, 16 threads, 0.5B shape): decoding 16 sequences
// ran 15-25% slower on AMX than on the VNNI kernels (Q4_K_S, Q8_0), 32 as fast or a little faster, 64
// 15-30% faster. int8, whose VNNI kernel is the quickest of all at 16-32 rows, gains only from 64.
int64_t amx_min_rows(DType wt) { return wt == DType::I8 ? 64 : 32; }

const Kernels& avx512amx_kernel_table() {
  static const Kernels k = amx_table<Hardware>("avx512amx");
  return k;
}

const Kernels& avx512amx_emulated_kernel_table() {
  static const Kernels k = amx_table<Emulated>("avx512amx-emulated");
  return k;
}

// Q4_0 (unsigned weights, an offset), Q8_0 (signed), Q4_K and Q6_K (super-blocks), 48 x 48 by K = 768:
// three activation groups and three panels of tiles, an odd super-block count; the AMX table must give
// the VNNI table's bits (kernel_select.cpp asks before using the hardware table; tests ask of the emulated one).
bool avx512amx_matches_vnni(const Kernels& amx) {
  const Kernels& vnni = avx512vnni_kernel_table();
  const int64_t M = 48, N = 48, K = 768, nb = K / 32;
  // splitmix64, not std::mt19937: a library template instantiated here is built with AVX-512, and the
  // linker may hand that copy to callers anywhere in the program (isa_isolation_test.cpp).
  uint64_t state = 7;
  auto rng = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return uint32_t((z ^ (z >> 31)) >> 32);
  };
  std::vector<float> x(size_t(M * K));
  for (float& v : x) v = float(rng()) * 0x1p-31f - 1.0f;  // -1 .. 1
  std::vector<Q8Block> xq(size_t(M * nb));
  // Random bytes, but every block's float16 scales (where the block holds them) finite, 2^-8 .. 2^-5.
  struct Case {
    DType type;
    int64_t block_values;
    std::vector<size_t> scales;
  };
  for (const Case& c : {Case{DType::Q4_0, 32, {0}}, Case{DType::Q8_0, 32, {0}}, Case{DType::Q4_K, 256, {0, 2}},
                        Case{DType::Q6_K, 256, {offsetof(quant::BlockQ6_K, d)}}}) {
    const DType t = c.type;
    for (int64_t m = 0; m < M; ++m) quantize_activations(vnni, t, x.data() + m * K, K, xq.data() + m * nb);
    std::vector<uint8_t> w(size_t(N) * row_bytes(t, K));
    for (uint8_t& byte : w) byte = uint8_t(rng());
    for (size_t at = 0; at < w.size(); at += row_bytes(t, c.block_values))
      for (size_t field : c.scales) {
        const uint16_t d = uint16_t((7 + rng() % 4) << 10 | (rng() & 0x3ff));
        std::memcpy(&w[at + field], &d, 2);
      }
    std::vector<float> want(size_t(M * N)), got(size_t(M * N));
    vnni.matmul(t, x.data(), xq.data(), M, K, w.data(), 0, N, want.data(), N);
    amx.matmul(t, x.data(), xq.data(), M, K, w.data(), 0, N, got.data(), N);
    if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace ftllm::cpu
