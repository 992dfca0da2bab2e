// Flash attention's step on AVX2: every query row of the call is scored against a block of cached keys
// and folded into its running softmax. Rows go in groups of one key-value head, so each loaded key or
// value chunk serves several rows, and the groups of every head take the block a few keys at a time in
// turn, so its cache rows are read once, in order; the cache is read as stored (F16C and friends widen as they load, which measured faster
// than widening the block into a float copy once: 144 against 105 GFLOP/s). A row's arithmetic is the
// same alone or grouped, so its bits depend on nothing but its own query and keys, in either build.
//
// Groups of up to eight rows (kGroup). Built twice (meson.build): for the AVX2 table, whose scores take
// a group's rows four at a time and the keys two at a time (accumulators, keys and query fill AVX2's 16
// registers) and whose weighing takes them four at a time too (weight broadcasts, not fmas, limited seven
// at once); with FTLLM_VNNI for the AVX-512 tables, the scores, softmax and weighing steps of
// avx512_attention_steps.h on 512-bit registers, all eight rows at a time, with the same bits. Decode's
// seven query heads per key-value head (Qwen2.5) then widen each key and value once rather than four
// times (AVX2: twice).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "avx2_kv.h"
#include "avx2_quant.h"
#include "avx2_util.h"
#ifdef FTLLM_VNNI
#include "avx512_attention_steps.h"
#endif

#ifdef FTLLM_VNNI
namespace ftllm::cpu::avx512vnni {
// Scores take up to eight rows of a head (16 accumulators), each key widened once for them; the
// weighing takes them all too (up to 16 accumulators: 32 values of eight rows), so each value is widened
// once, not twice, for Qwen's seven query heads.
constexpr int kScoreRows = 8;
using avx512::scores4, avx512::softmax_step, avx512::weigh16;
#else
namespace ftllm::cpu::avx2 {
// Tried on Zen 3 (one layer, 14/2 heads of 64, 8k keys, one thread, alternated): seven rows in one pass
// (fourteen accumulators, the queries read from memory) ran 6% faster with the cache in L2 but 3% slower
// from memory, as in a model; the four keys widened once into a float scratch for both passes, 12% slower;
// the query chunk held in a register rather than read by each fma, no faster. So the loads and the
// widening do not set the pace here.
constexpr int kScoreRows = 4;
#endif
constexpr int kGroup = 8;

namespace {

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Rows [j0, j1) of the block widened to float32 rows of `width` (zeros past `count` values), for heads
// whose length is not a multiple of 8; the rows of the groups of four around them are zeros.
template <typename L>
void widen(const uint8_t* const* rows, kvcache::KvDtype t, int64_t j0, int64_t j1, int64_t count, int64_t width, float* out) {
  const int64_t c8 = count & ~int64_t(7);
  for (int64_t j = j0 & ~int64_t(3); j < round_up(j1, 4); ++j) {
    float* o = out + j * width;
    if (j < j0 || j >= j1) {
      std::fill(o, o + width, 0.0f);
      continue;
    }
    for (int64_t c = 0; c < c8; c += 8) _mm256_storeu_ps(o + c, L::load8(rows[j], c));
    for (int64_t c = c8; c < count; ++c) o[c] = kvcache::kv_value(t, rows[j], c);
    std::fill(o + count, o + width, 0.0f);
  }
}

#ifndef FTLLM_VNNI  // the AVX-512 tables' scores4 and softmax_step are avx512_attention_steps.h's
// Q rows (queries q[0..Q), Q <= 4) against keys k[0..3] (rows read by L, `width` values, a multiple of
// 8), times scale, into s[r] + j. The keys go in two pairs, each over the whole width: four rows' eight
// accumulators, two keys and a query fit AVX2's 16 registers with the first pair's sums, and each key is
// widened once for four rows, not two (7 query heads a key-value head: twice a decode, not four times).
// Each key's eight lanes are summed by the same hadd tree whatever its neighbours, so a score's bits
// depend only on its query and key.
template <int Q, typename L>
inline void scores4(const float* const* q, const uint8_t* const* k, int64_t width, float scale, float* const* s, int64_t j) {
  __m256 first_pair[Q];
  for (int half = 0; half < 2; ++half) {
    __m256 a[Q][2];
    for (int r = 0; r < Q; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
    for (int64_t c = 0; c < width; c += 8) {
      const __m256 k0 = L::load8(k[2 * half], c), k1 = L::load8(k[2 * half + 1], c);
      for (int r = 0; r < Q; ++r) {
        const __m256 qv = _mm256_loadu_ps(q[r] + c);
        a[r][0] = _mm256_fmadd_ps(qv, k0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(qv, k1, a[r][1]);
      }
    }
    for (int r = 0; r < Q; ++r) {
      const __m256 pair = _mm256_hadd_ps(a[r][0], a[r][1]);
      if (half == 0) {
        first_pair[r] = pair;
        continue;
      }
      const __m256 h = _mm256_hadd_ps(first_pair[r], pair);
      const __m128 sum = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
      _mm_storeu_ps(s[r] + j, _mm_mul_ps(sum, _mm_set1_ps(scale)));
    }
  }
}

// Lanes j..j+7 that lie in [lo, hi), as a mask.
inline __m256 lanes_in(int64_t j, int32_t lo, int32_t hi) {
  const __m256i at = _mm256_add_epi32(_mm256_set1_epi32(int32_t(j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i below_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(lo), at), below_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), at);
  return _mm256_castsi256_ps(_mm256_andnot_si256(below_lo, below_hi));
}

// One row's softmax step over groups of eight from g0 (a multiple of 8) to end (the call's last key,
// so a partner's keys get their zeros): the new max, e^(s - max) into p (zero outside [lo, hi); lanes
// never scored are masked whatever they hold) and their sum. The lanes start at the block's first key,
// so groups a partner adds hold zeros and change no bit. Not inlined: inside the caller exp8's
// constants spilled to the stack (measured).
__attribute__((noinline)) float softmax_step(const float* s, int64_t g0, int64_t end, int32_t lo, int32_t hi, float m_old, float* p,
                                             float* m_new) {
  __m256 top = _mm256_set1_ps(-INFINITY);
  for (int64_t j = g0; j < hi; j += 8)
    top = _mm256_max_ps(top, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(s + j), lanes_in(j, lo, hi)));
  __m128 t4 = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
  t4 = _mm_max_ps(t4, _mm_movehl_ps(t4, t4));
  t4 = _mm_max_ss(t4, _mm_movehdup_ps(t4));
  const float m = std::max(m_old, _mm_cvtss_f32(t4));
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = g0; j < end; j += 8) {
    const __m256 e = _mm256_and_ps(lanes_in(j, lo, hi), exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv)));
    sum = _mm256_add_ps(sum, e);
    _mm256_storeu_ps(p + j, e);
  }
  *m_new = m;
  return hsum(sum);
}
#endif

// Q rows' outputs, chunks [c, c + 8 * kChunks): acc = acc * alpha + sum_j p_j v_j over j in [j0, j1),
// in j order (a partner's extra keys carry p = 0 and add nothing).
template <int Q, int kChunks, typename L>
inline void weigh(const float* const* p, const float* alpha, const uint8_t* const* v, int64_t j0, int64_t j1, int64_t c,
                  float* const* acc) {
  __m256 a[Q][kChunks];
  for (int r = 0; r < Q; ++r)
    for (int u = 0; u < kChunks; ++u) a[r][u] = _mm256_mul_ps(_mm256_loadu_ps(acc[r] + c + 8 * u), _mm256_set1_ps(alpha[r]));
  for (int64_t j = j0; j < j1; ++j) {
    __m256 pj[Q];
    for (int r = 0; r < Q; ++r) pj[r] = _mm256_set1_ps(p[r][j]);
    for (int u = 0; u < kChunks; ++u) {
      const __m256 vu = L::load8(v[j], c + 8 * u);
      for (int r = 0; r < Q; ++r) a[r][u] = _mm256_fmadd_ps(pj[r], vu, a[r][u]);
    }
  }
  for (int r = 0; r < Q; ++r)
    for (int u = 0; u < kChunks; ++u) _mm256_storeu_ps(acc[r] + c + 8 * u, a[r][u]);
}

template <int Q, typename L>
void weigh_rows(const float* const* p, const float* alpha, const uint8_t* const* v, int64_t width, int64_t j0, int64_t j1,
                float* const* acc) {
  int64_t c = 0;
#ifdef FTLLM_VNNI
  constexpr int kChunks = Q > 4 ? 2 : 4;  // at most 16 accumulators
  for (; c + 16 * kChunks <= width; c += 16 * kChunks) weigh16<Q, kChunks, L>(p, alpha, v, j0, j1, c, acc);
  for (; c + 16 <= width; c += 16) weigh16<Q, 1, L>(p, alpha, v, j0, j1, c, acc);
#endif
#ifndef FTLLM_VNNI
  // More than four rows go as four, then the rest: seven rows by one chunk broadcast seven weights for
  // each value chunk's seven fmas (the loads, not the fmas, set the pace); four rows by two chunks and
  // three by four load 38 weights and chunks for a key's 56 fmas (d 64), not 64, each value widened twice.
  if constexpr (Q > 4) {
    weigh_rows<4, L>(p, alpha, v, width, j0, j1, acc);
    return weigh_rows<Q - 4, L>(p + 4, alpha + 4, v, width, j0, j1, acc + 4);
  }
#endif
  // AVX2's 16 registers: Q x kChunks accumulators, Q weights and a value (three rows: 12, 3 and 1).
  constexpr int kChunks8 = Q <= 3 ? 4 : Q <= 4 ? 2 : 1;
  for (; c + 8 * kChunks8 <= width; c += 8 * kChunks8) weigh<Q, kChunks8, L>(p, alpha, v, j0, j1, c, acc);
  for (; c < width; c += 8) weigh<Q, 1, L>(p, alpha, v, j0, j1, c, acc);
}

// s = cap * tanh(s / cap) over [j0, j1) (multiples of 8), tanh(y) as 1 - 2 / (1 + e^2y): each lane
// alone, so a score's bits still depend only on its query and key.
void softcap_scores(float* s, int64_t j0, int64_t j1, float cap) {
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), c = _mm256_set1_ps(cap), inv = _mm256_set1_ps(2.0f / cap);
  for (int64_t j = j0; j < j1; j += 8) {
    const __m256 e = exp8(_mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
    _mm256_storeu_ps(s + j, _mm256_mul_ps(c, _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(one, e)))));
  }
}

// The scores pass takes the block four keys at a time, every group of rows (of every head) in turn, so
// the block's key rows are read once, in order, and asks for the key and value rows kPrefetchKeys ahead:
// a long context's cache does not stay in the CPU's caches, and read one head's part of each row over
// the block, then the next head's (a stride that goes back, which the prefetchers do not follow), it
// streamed from memory 3-4x slower. The values are then in cache for the weighing pass. Near the block's
// end it asks for the next block's first rows (AttendBlock::ahead): each block's first 16 keys and values
// used to wait for memory, and one layer's 8k-key decode from memory took 0.25 ms instead of 0.19 (Zen 5).
constexpr int64_t kPrefetchKeys = 16;

inline void prefetch_row(const uint8_t* row, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch(reinterpret_cast<const char*>(row + at), _MM_HINT_T0);
}

// Up to kGroup live rows of one head, with what the passes read and write for them.
struct Group {
  Group() {}  // left uninitialised: attend() fills what a group uses (value-initialised, ~0.4 KB were zeroed a block)
  int q;
  int64_t head;
  int64_t row[kGroup];
  const float* query[kGroup];
  float* s[kGroup];
  const float* p[kGroup];
  float* acc[kGroup];
  float alpha[kGroup];
  int64_t k0, k1;  // the keys any of its rows sees
};

struct Scratch {
  std::vector<float> q, k, v, s, p, alpha;
  std::vector<float> q_twice;  // the AVX-512 scores' query rows (avx512::twice)
  float *s_rows, *p_rows;      // s's and p's rows from a 64-byte boundary (aligned_floats)
  std::vector<const uint8_t*> krows, vrows;  // per head: n rounded up to 4 row pointers each
  std::vector<const float*> qrows;
  std::vector<int64_t> live;  // the rows that see a key of this block
  std::vector<Group> groups;
  std::vector<uint8_t> zeros;
};

// v resized to hold n floats from a 64-byte boundary, which it returns: from a vector's own 16-byte
// boundary every whole-register load of the AVX-512 steps straddles two cache lines (on Zen 5 the score
// loop, its queries loaded whole, ran 0.9x so).
float* aligned_floats(std::vector<float>& v, int64_t n) {
  v.resize(size_t(n + 16));
  return v.data() + (16 - reinterpret_cast<uintptr_t>(v.data()) / 4 % 16) % 16;
}

// Row groups of Q (1..kGroup) rows: the compile-time Q the group's size asks for.
template <int Q, typename F>
inline void with_group_size(int q, F&& f) {
  if constexpr (Q > 1)
    if (q < Q) return with_group_size<Q - 1>(q, f);
  f(std::integral_constant<int, Q>{});
}

// The groups' scores, softmax step and weighted values, reading keys and values through L from the
// row pointers (cache rows as stored, or float rows widened from them; head h's from krows + h * n4).
// width: the key values read (a multiple of 8, zeros past d); vwidth: the values weighed.
template <typename L>
void attend_rows(const AttendBlock& b, const AttendRows& r, Scratch& t, int64_t j0, int64_t j1, int64_t width, int64_t vwidth) {
  const int64_t n4 = round_up(b.n, 4), n8 = round_up(b.n, 8);
  const int64_t span = (b.heads - 1) * b.head_stride + kvcache::kv_head_bytes(b.dtype, b.d);
  // The block's first kPrefetchKeys rows, asked for at once: the loop asks that far ahead, and a block
  // after another of the same item had them asked for by it (AttendBlock::ahead), but an item's first
  // block (each 512-key segment of a split decode) read them from memory as it went. One layer's 8k
  // decode from memory (two Zen 5 threads, alternated): AVX-512 0.121-0.132 -> 0.118-0.125 ms, AVX2
  // 0.194-0.206 -> 0.191-0.193.
  for (int64_t x = j0; x < std::min(j1, j0 + kPrefetchKeys); ++x) {
    prefetch_row(b.keys[x], span);
    prefetch_row(b.values[x], span);
  }
  for (int64_t j = j0 & ~int64_t(3); j < j1; j += 4) {
    for (int64_t x = j + kPrefetchKeys; x < j + kPrefetchKeys + 4; ++x) {
      const bool here = x < j1, next = !here && j1 == b.n && x - b.n < b.ahead;
      if (!here && !next) break;
      prefetch_row(here ? b.keys[x] : b.ahead_keys[x - b.n], span);
      prefetch_row(here ? b.values[x] : b.ahead_values[x - b.n], span);
    }
    for (Group& g : t.groups)
      for (int i = 0; i < g.q; i += kScoreRows)
        with_group_size<kScoreRows>(std::min(kScoreRows, g.q - i), [&](auto Q) {
          scores4<Q(), L>(g.query + i, t.krows.data() + g.head * n4 + j, width, b.scale, g.s + i, j);
        });
  }
  if (b.softcap)
    for (int64_t i : t.live) softcap_scores(t.s_rows + i * n8, j0 & ~int64_t(7), round_up(j1, 8), b.softcap);
  for (int64_t i : t.live) {
    float m;
    const float sum = softmax_step(t.s_rows + i * n8, j0 & ~int64_t(7), j1, r.lo[i], r.hi[i], r.m[i], t.p_rows + i * n8, &m);
    t.alpha[size_t(i)] = r.m[i] == -INFINITY ? 0.0f : std::exp(r.m[i] - m);
    r.l[i] = r.l[i] * t.alpha[size_t(i)] + sum;
    r.m[i] = m;
  }
  for (Group& g : t.groups) {
    for (int i = 0; i < g.q; ++i) g.alpha[i] = t.alpha[size_t(g.row[i])];
    with_group_size<kGroup>(g.q, [&](auto Q) { weigh_rows<Q(), L>(g.p, g.alpha, t.vrows.data() + g.head * n4, vwidth, g.k0, g.k1, g.acc); });
  }
}

template <typename L>
void attend(const AttendBlock& b, const AttendRows& r) {
  thread_local Scratch t;
  int64_t j0 = b.n, j1 = 0;
  t.live.clear();
  for (int64_t i = 0; i < r.nq; ++i)
    if (r.lo[i] < r.hi[i]) {
      t.live.push_back(i);
      j0 = std::min<int64_t>(j0, r.lo[i]);
      j1 = std::max<int64_t>(j1, r.hi[i]);
    }
  if (t.live.empty()) return;
  const int64_t dw = round_up(b.d, 8), vw = r.acc_stride, n4 = round_up(b.n, 4), n8 = round_up(b.n, 8);
  const int64_t per_head = r.nq / b.heads;
  t.s_rows = aligned_floats(t.s, r.nq * n8);
  t.p_rows = aligned_floats(t.p, r.nq * n8);
  t.alpha.resize(size_t(r.nq));
  t.krows.resize(size_t(b.heads * n4));
  t.vrows.resize(size_t(b.heads * n4));
#ifdef FTLLM_VNNI
  float* const q_twice = aligned_floats(t.q_twice, r.nq * 2 * dw);
#endif
  // Heads whose length is not a multiple of 8 are widened to whole chunks of 8, queries too (zeros past d).
  const bool widened = b.d % 8 != 0 || b.vd % 8 != 0;
  if (widened) {
    t.q.resize(size_t(r.nq * dw));
    t.qrows.resize(size_t(r.nq));
    for (int64_t i : t.live) {
      std::copy(r.q[i], r.q[i] + b.d, t.q.data() + i * dw);
      std::fill(t.q.data() + i * dw + b.d, t.q.data() + (i + 1) * dw, 0.0f);
      t.qrows[size_t(i)] = t.q.data() + i * dw;
    }
  }
  t.groups.clear();
  for (int64_t i : t.live) {
    const int64_t head = i / per_head;
    if (t.groups.empty() || t.groups.back().head != head || t.groups.back().q == kGroup) {
      t.groups.emplace_back();
      t.groups.back().q = 0, t.groups.back().head = head, t.groups.back().k0 = b.n, t.groups.back().k1 = 0;
    }
    Group& g = t.groups.back();
    g.row[g.q] = i;
    g.query[g.q] = widened ? t.qrows[size_t(i)] : r.q[i];
#ifdef FTLLM_VNNI
    avx512::twice(g.query[g.q], dw, q_twice + i * 2 * dw);
    g.query[g.q] = q_twice + i * 2 * dw;
#endif
    g.s[g.q] = t.s_rows + i * n8, g.p[g.q] = t.p_rows + i * n8, g.acc[g.q] = r.acc + i * vw;
    g.k0 = std::min<int64_t>(g.k0, r.lo[i]), g.k1 = std::max<int64_t>(g.k1, r.hi[i]);
    ++g.q;
  }
  // The cache rows as they are; the groups of four around the keys read a row of zeros (any dtype's
  // zero bytes read as 0). The acc rows' zeros past vd are left alone.
  t.zeros.resize(size_t(kvcache::kv_head_bytes(b.dtype, b.d)));
  // (The loop-invariant parts held in locals: the stores through krows may alias b's fields as far as
  // the compiler knows, and it re-read them and multiplied for every row: 2% of an 8k decode.)
  const uint8_t* const* keys = b.keys;
  const uint8_t* const* values = b.values;
  const uint8_t* zero_row = t.zeros.data();
  for (int64_t h = 0; h < b.heads; ++h) {
    const uint8_t** krows = t.krows.data() + h * n4;
    const uint8_t** vrows = t.vrows.data() + h * n4;
    const int64_t at = h * b.head_stride;
    for (int64_t j = j0 & ~int64_t(3); j < j0; ++j) krows[j] = zero_row;
    for (int64_t j = j0; j < j1; ++j) krows[j] = keys[j] + at, vrows[j] = values[j] + at;
    for (int64_t j = j1; j < round_up(j1, 4); ++j) krows[j] = zero_row;
  }
  if (!widened) return attend_rows<L>(b, r, t, j0, j1, b.d, b.vd);
  t.k.resize(size_t(b.heads * n4 * dw));
  t.v.resize(size_t(b.heads * n4 * vw));
  for (int64_t h = 0; h < b.heads; ++h) {
    float* k = t.k.data() + h * n4 * dw;
    float* v = t.v.data() + h * n4 * vw;
    widen<L>(t.krows.data() + h * n4, b.dtype, j0, j1, b.d, dw, k);
    widen<L>(t.vrows.data() + h * n4, b.dtype, j0, j1, b.vd, vw, v);
    for (int64_t j = j0 & ~int64_t(3); j < round_up(j1, 4); ++j) {
      t.krows[size_t(h * n4 + j)] = reinterpret_cast<const uint8_t*>(k + j * dw);
      t.vrows[size_t(h * n4 + j)] = reinterpret_cast<const uint8_t*>(v + j * vw);
    }
  }
  attend_rows<KvF32>(b, r, t, j0, j1, dw, vw);
}

}  // namespace

void attend_block(const AttendBlock& b, const AttendRows& r) {
  switch (b.dtype) {
    case kvcache::KvDtype::F32: return attend<KvF32>(b, r);
    case kvcache::KvDtype::F16: return attend<KvF16>(b, r);
    case kvcache::KvDtype::BF16: return attend<KvBF16>(b, r);
    case kvcache::KvDtype::Q8_0: return attend<KvQ8_0>(b, r);
    case kvcache::KvDtype::FP8: return attend<KvFP8>(b, r);
  }
}

}  // namespace ftllm::cpu::avx2 or avx512vnni
