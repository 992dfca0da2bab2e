// Flash attention's step on AVX2 (both kernel tables): a block of cached keys and values is widened to
// float32 once, then every query row of the call is scored against it and folded into its running
// softmax. Rows go in pairs, so each loaded key or value chunk serves two rows; a row's arithmetic is
// the same alone or paired, so its bits do not depend on its partner.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "avx2_kv.h"
#include "avx2_quant.h"
#include "avx2_util.h"

namespace ftllm::cpu::avx2 {

namespace {

constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Rows [j0, j1) of the block widened to float32 rows of `width` (zeros past `count` values); the
// scores' partial groups of four read the rows next to them, which hold zeros.
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

// Q rows (1 or 2, `width` floats apart) against keys j..j+3: s[r][i] = q_r . k_(j+i). Each key's
// eight lanes are summed by the same hadd tree whatever its neighbours, so a score's bits depend only
// on its query and key.
template <int Q>
inline void scores4(const float* q, const float* k, int64_t width, float (*s)[4]) {
  __m256 a[Q][4];
  for (int r = 0; r < Q; ++r)
    for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < width; c += 8) {
    const __m256 k0 = _mm256_loadu_ps(k + c), k1 = _mm256_loadu_ps(k + width + c), k2 = _mm256_loadu_ps(k + 2 * width + c),
                 k3 = _mm256_loadu_ps(k + 3 * width + c);
    for (int r = 0; r < Q; ++r) {
      const __m256 qv = _mm256_loadu_ps(q + r * width + c);
      a[r][0] = _mm256_fmadd_ps(qv, k0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(qv, k1, a[r][1]);
      a[r][2] = _mm256_fmadd_ps(qv, k2, a[r][2]);
      a[r][3] = _mm256_fmadd_ps(qv, k3, a[r][3]);
    }
  }
  for (int r = 0; r < Q; ++r) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a[r][0], a[r][1]), _mm256_hadd_ps(a[r][2], a[r][3]));
    _mm_storeu_ps(s[r], _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
}

// Q rows' outputs, chunks [c, c + 8 * kChunks) of `width`: acc = acc * alpha + sum_j p_j v_j over
// j in [j0, j1), in j order (a partner's extra keys carry p = 0 and add nothing).
template <int Q, int kChunks>
inline void weigh(const float* const* p, const float* alpha, const float* v, int64_t width, int64_t j0, int64_t j1, int64_t c,
                  float* const* acc) {
  __m256 a[Q][kChunks];
  for (int r = 0; r < Q; ++r)
    for (int u = 0; u < kChunks; ++u) a[r][u] = _mm256_mul_ps(_mm256_loadu_ps(acc[r] + c + 8 * u), _mm256_set1_ps(alpha[r]));
  for (int64_t j = j0; j < j1; ++j) {
    __m256 pj[Q];
    for (int r = 0; r < Q; ++r) pj[r] = _mm256_set1_ps(p[r][j]);
    for (int u = 0; u < kChunks; ++u) {
      const __m256 vu = _mm256_loadu_ps(v + j * width + c + 8 * u);
      for (int r = 0; r < Q; ++r) a[r][u] = _mm256_fmadd_ps(pj[r], vu, a[r][u]);
    }
  }
  for (int r = 0; r < Q; ++r)
    for (int u = 0; u < kChunks; ++u) _mm256_storeu_ps(acc[r] + c + 8 * u, a[r][u]);
}

template <int Q>
void weigh_rows(const float* const* p, const float* alpha, const float* v, int64_t width, int64_t j0, int64_t j1, float* const* acc) {
  int64_t c = 0;
  for (; c + 32 <= width; c += 32) weigh<Q, 4>(p, alpha, v, width, j0, j1, c, acc);
  for (; c < width; c += 8) weigh<Q, 1>(p, alpha, v, width, j0, j1, c, acc);
}

struct Scratch {
  std::vector<float> q, k, v, s, p, alpha;
  std::vector<int64_t> live;  // the rows that see a key of this block
};

template <typename L>
void attend(const AttendBlock& b, const AttendRows& r) {
  int64_t j0 = b.n, j1 = 0;
  thread_local Scratch t;
  std::vector<int64_t>& live = t.live;
  live.clear();
  for (int64_t i = 0; i < r.nq; ++i)
    if (r.lo[i] < r.hi[i]) {
      live.push_back(i);
      j0 = std::min<int64_t>(j0, r.lo[i]);
      j1 = std::max<int64_t>(j1, r.hi[i]);
    }
  if (live.empty()) return;
  const int64_t dw = round_up(b.d, 8), vw = r.acc_stride, n4 = round_up(b.n, 4), n8 = round_up(b.n, 8);
  t.k.resize(size_t(n4 * dw));
  t.v.resize(size_t(n4 * vw));
  t.q.resize(size_t(r.nq * dw));
  t.s.resize(size_t(r.nq * n4));
  t.p.resize(size_t(r.nq * n8));
  widen<L>(b.keys, b.dtype, j0, j1, b.d, dw, t.k.data());
  widen<L>(b.values, b.dtype, j0, std::min(j1, b.n), b.vd, vw, t.v.data());
  for (int64_t i : live) {
    std::copy(r.q[i], r.q[i] + b.d, t.q.data() + i * dw);
    std::fill(t.q.data() + i * dw + b.d, t.q.data() + (i + 1) * dw, 0.0f);
  }

  // Scores over the keys any row sees, two rows at a time.
  for (size_t x = 0; x < live.size(); x += 2) {
    const bool pair = x + 1 < live.size();
    const int64_t a = live[x], c = pair ? live[x + 1] : a;
    // The pair's rows are adjacent in the scratch copy only when their indices are; copy otherwise.
    for (int64_t j = j0 & ~int64_t(3); j < j1; j += 4) {
      float s[2][4];
      if (pair && c == a + 1) {
        scores4<2>(t.q.data() + a * dw, t.k.data() + j * dw, dw, s);
      } else {
        scores4<1>(t.q.data() + a * dw, t.k.data() + j * dw, dw, s);
        if (pair) scores4<1>(t.q.data() + c * dw, t.k.data() + j * dw, dw, s + 1);
      }
      for (int i = 0; i < 4; ++i) {
        t.s[size_t(a * n4 + j + i)] = s[0][i] * b.scale;
        if (pair) t.s[size_t(c * n4 + j + i)] = s[1][i] * b.scale;
      }
    }
  }

  // Each row's new max, its e^(s - max) (zero outside its keys) and their sum, in lanes that start at
  // the block's first key, so groups a partner adds hold zeros.
  std::vector<float>& alpha = t.alpha;
  alpha.resize(size_t(r.nq));
  for (int64_t i : live) {
    const float* s = t.s.data() + i * n4;
    float* p = t.p.data() + i * n8;
    float top = -INFINITY;
    for (int64_t j = r.lo[i]; j < r.hi[i]; ++j) top = std::max(top, s[j]);
    const float m = std::max(r.m[i], top);
    alpha[size_t(i)] = r.m[i] == -INFINITY ? 0.0f : std::exp(r.m[i] - m);
    const __m256 mv = _mm256_set1_ps(m), lo = _mm256_set1_ps(float(r.lo[i])), hi = _mm256_set1_ps(float(r.hi[i]));
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = j0 & ~int64_t(7); j < j1; j += 8) {
      const __m256 at = _mm256_add_ps(_mm256_set1_ps(float(j)), _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
      const __m256 seen = _mm256_and_ps(_mm256_cmp_ps(at, lo, _CMP_GE_OQ), _mm256_cmp_ps(at, hi, _CMP_LT_OQ));
      // Lanes past the scores written are masked, whatever they hold.
      alignas(32) float sj[8];
      for (int x = 0; x < 8; ++x) sj[x] = j + x >= j0 && j + x < j1 ? s[j + x] : m;
      const __m256 e = _mm256_and_ps(seen, exp8(_mm256_sub_ps(_mm256_load_ps(sj), mv)));
      sum = _mm256_add_ps(sum, e);
      _mm256_storeu_ps(p + j, e);
    }
    r.l[i] = r.l[i] * alpha[size_t(i)] + hsum(sum);
    r.m[i] = m;
  }

  // acc = acc * alpha + p V, two rows at a time over the keys either sees.
  for (size_t x = 0; x < live.size(); x += 2) {
    const bool pair = x + 1 < live.size();
    const int64_t a = live[x], c = pair ? live[x + 1] : a;
    const float* p[2] = {t.p.data() + a * n8, t.p.data() + c * n8};
    const float al[2] = {alpha[size_t(a)], alpha[size_t(c)]};
    float* acc[2] = {r.acc + a * vw, r.acc + c * vw};
    const int64_t k0 = std::min(r.lo[a], r.lo[c]), k1 = std::max(r.hi[a], r.hi[c]);
    if (pair) weigh_rows<2>(p, al, t.v.data(), vw, k0, k1, acc);
    else weigh_rows<1>(p, al, t.v.data(), vw, k0, k1, acc);
  }
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

}  // namespace ftllm::cpu::avx2
