// Every vectorised kernel against the scalar reference, on random data with odd sizes and tails.
#include <sched.h>

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cpu/kernels.h"
#include "cpu/numa_topology.h"
#include "cpu/thread_pool.h"
#include "kvcache/kv_cache.h"
#include "ops/ops.h"
#include "quant/quant.h"

using namespace ftllm;
using ftllm::cpu::Kernels;

namespace {

struct HasAvx2 {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(cpu::avx2_kernels() != nullptr);
    r.message() << "this processor lacks AVX2, FMA or F16C";
    return r;
  }
};

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Weights of dtype t (as raw bytes) holding the rounded values of `src`.
std::vector<uint16_t> to_half_bits(const std::vector<float>& src, DType t) {
  std::vector<uint16_t> out(src.size());
  for (size_t i = 0; i < src.size(); ++i) out[i] = t == DType::F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
  return out;
}

// Summation order differs (8 lanes, FMA), so allow a few ulps of the magnitude summed.
void check_close(const std::vector<float>& got, const std::vector<float>& want, double magnitude, const char* what) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= 1e-5 * magnitude + 1e-6,
                          what << " element " << i << ": " << got[i] << " vs " << want[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernels, *boost::unit_test::precondition(HasAvx2()))

BOOST_AUTO_TEST_CASE(matmul_all_dtypes_odd_shapes) {
  const Kernels& ref = cpu::scalar_kernels();
  const Kernels& fast = *cpu::avx2_kernels();
  std::mt19937 rng(1);
  for (int64_t K : {1, 7, 8, 9, 31, 64, 100, 257}) {
    for (int64_t M : {1, 3, 4, 5, 9}) {
      const int64_t N = 13;
      auto x = random_floats(size_t(M * K), rng);
      auto w32 = random_floats(size_t(N * K), rng, 0.5f);
      for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        std::vector<uint16_t> half;
        const void* w = w32.data();
        if (t != DType::F32) w = (half = to_half_bits(w32, t)).data();
        // Each kernel writes only columns [2, N - 1): the rest must stay as they were.
        std::vector<float> want(size_t(M * N), -7.0f), got(size_t(M * N), -7.0f);
        ref.matmul(t, x.data(), nullptr, M, K, w, 2, N - 1, want.data(), N);
        fast.matmul(t, x.data(), nullptr, M, K, w, 2, N - 1, got.data(), N);
        BOOST_TEST_CONTEXT("K=" << K << " M=" << M << " dtype=" << dtype_name(t)) {
          check_close(got, want, double(K), "matmul");
          BOOST_TEST(got[0] == -7.0f);
          BOOST_TEST(got[size_t(N - 1)] == -7.0f);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(matmul_rows_are_bitwise_the_same_alone_or_batched) {
  // Continuous batching must not change a sequence's tokens: row m of a batch equals the row computed
  // alone (the M = 1 path reads two weight rows side by side), for every tail the 4 x 3 tiles leave in
  // batch sizes and weight-row counts; across the blocks the AVX2 GEMM cuts the rows into (2 MB of
  // activations: at most 12 rows of K = 40000); and across its weight tiles, from a row other than the first (K 2060, rows 1 to 40: a 128 KB tile is 15
  // float rows or 30 half rows; 2060 also leaves 12 values past the last whole 16).
  const Kernels& fast = *cpu::avx2_kernels();
  std::mt19937 rng(9);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t K : {24, 100, 576, 2060, 40000}) {
      const int64_t N = K == 2060 ? 41 : 7, n0 = K == 2060 ? 1 : 0;
      for (int64_t M : {2, 3, 4, 5, 6, 7, 9, 29}) {
        auto x = random_floats(size_t(M * K), rng);
        auto w32 = random_floats(size_t(N * K), rng);
        std::vector<uint16_t> half;
        const void* w = w32.data();
        if (t != DType::F32) w = (half = to_half_bits(w32, t)).data();
        std::vector<float> batched(static_cast<size_t>(M * N)), alone(static_cast<size_t>(N));
        fast.matmul(t, x.data(), nullptr, M, K, w, n0, N, batched.data(), N);
        for (int64_t m = 0; m < M; ++m) {
          fast.matmul(t, x.data() + m * K, nullptr, 1, K, w, 0, N, alone.data(), N);
          for (int64_t n = n0; n < N; ++n)
            BOOST_REQUIRE_MESSAGE(float_bits(alone[size_t(n)]) == float_bits(batched[size_t(m * N + n)]),
                                  dtype_name(t) << " K=" << K << " M=" << M << " row " << m << " col " << n);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(vector_kernels_with_tails) {
  const Kernels& ref = cpu::scalar_kernels();
  const Kernels& fast = *cpu::avx2_kernels();
  std::mt19937 rng(2);
  for (int64_t n : {1, 5, 8, 15, 16, 17, 63, 64, 65, 1000}) {
    BOOST_TEST_CONTEXT("n=" << n) {
      auto a = random_floats(size_t(n), rng), b = random_floats(size_t(n), rng), w = random_floats(size_t(n), rng);
      BOOST_TEST(std::fabs(fast.dot(a.data(), b.data(), n) - ref.dot(a.data(), b.data(), n)) <= 1e-5 * n);

      auto y1 = b, y2 = b;
      ref.axpy(0.37f, a.data(), y1.data(), n);
      fast.axpy(0.37f, a.data(), y2.data(), n);
      check_close(y2, y1, 1.0, "axpy");

      y1 = b, y2 = b;  // fma rounds once: the same bits on every table
      ref.rescale_add(y1.data(), 0.61f, a.data(), 1.7f, n);
      fast.rescale_add(y2.data(), 0.61f, a.data(), 1.7f, n);
      for (int64_t i = 0; i < n; ++i) BOOST_REQUIRE_EQUAL(float_bits(y2[size_t(i)]), float_bits(y1[size_t(i)]));

      std::vector<float> r1(static_cast<size_t>(n)), r2(static_cast<size_t>(n));
      ref.rmsnorm(a.data(), w.data(), n, 1e-6f, r1.data());
      fast.rmsnorm(a.data(), w.data(), n, 1e-6f, r2.data());
      check_close(r2, r1, 1.0, "rmsnorm");

      ref.silu_mul(a.data(), b.data(), r1.data(), n);
      fast.silu_mul(a.data(), b.data(), r2.data(), n);
      check_close(r2, r1, 1.0, "silu_mul");

      ref.gelu_tanh_mul(a.data(), b.data(), r1.data(), n);
      fast.gelu_tanh_mul(a.data(), b.data(), r2.data(), n);
      check_close(r2, r1, 1.0, "gelu_tanh_mul");

      for (DType t : {DType::F32, DType::F16, DType::BF16}) {
        std::vector<uint16_t> half = to_half_bits(a, t);
        const void* src = t == DType::F32 ? static_cast<const void*>(a.data()) : half.data();
        ref.to_f32(t, src, r1.data(), n);
        fast.to_f32(t, src, r2.data(), n);
        BOOST_TEST(r1 == r2, boost::test_tools::per_element());  // conversions are exact
      }
    }
  }
}

// The vectorised exponential behind silu_mul and attention, within a few ulp of expf over the whole
// range where it is a normal float, and an element's value the same wherever it falls in a call.
BOOST_AUTO_TEST_CASE(exponential_is_close_to_expf_and_independent_of_position) {
  const Kernels& fast = *cpu::avx2_kernels();
  std::vector<float> gate, up, out;
  for (float x = -80.0f; x <= 80.0f; x += 0.0137f) gate.push_back(x), up.push_back(1.0f);
  out.resize(gate.size());
  fast.silu_mul(gate.data(), up.data(), out.data(), int64_t(gate.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double want = double(gate[i]) / (1.0 + std::exp(-double(gate[i])));
    BOOST_REQUIRE_MESSAGE(std::fabs(out[i] - want) <= 4e-7 * std::fabs(want) + 1e-37, "silu(" << gate[i] << ") = " << out[i] << ", want " << want);
  }
  for (size_t start : {size_t(0), size_t(1), size_t(3), size_t(7)}) {
    std::vector<float> part(gate.size() - start);
    fast.silu_mul(gate.data() + start, up.data(), part.data(), int64_t(part.size()));
    for (size_t i = 0; i < part.size(); ++i) BOOST_REQUIRE_EQUAL(float_bits(part[i]), float_bits(out[start + i]));
  }
}

// GeGLU's tanh-approximated GELU (Gemma) against the formula in double precision, over the range where
// it bends and into both saturated ends, in both kernel tables.
BOOST_AUTO_TEST_CASE(gelu_tanh_matches_the_formula) {
  std::vector<float> gate, up, out;
  for (float x = -30.0f; x <= 30.0f; x += 0.00731f) gate.push_back(x), up.push_back(1.0f);
  out.resize(gate.size());
  for (const Kernels* k : {&cpu::scalar_kernels(), cpu::avx2_kernels()}) {
    k->gelu_tanh_mul(gate.data(), up.data(), out.data(), int64_t(gate.size()));
    for (size_t i = 0; i < gate.size(); ++i) {
      const double x = gate[i], want = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      BOOST_REQUIRE_MESSAGE(std::fabs(out[i] - want) <= 1e-6 * std::fabs(want) + 2e-7,
                            k->name << ": gelu_tanh(" << gate[i] << ") = " << out[i] << ", want " << want);
    }
  }
}

// Every KV dtype: attend_block's online softmax against the scalar reference over two blocks (a fresh
// state, then a running one), rows seeing different ranges of keys (none, some, all); a row computed
// alone gets the bits it got beside the others; and rows no query sees are never read (they hold NaN).
// Gemma 2's soft-capped scores on float32 caches. Five to seven rows: AVX2 weighs them as four and the
// rest. Where the CPU has AVX-512, its table (all eight rows of a group at once) gives AVX2's bits,
// alone and beside the others.
BOOST_AUTO_TEST_CASE(attend_block_matches_the_reference_and_rows_do_not_depend_on_each_other) {
  using kvcache::KvDtype;
  const Kernels& ref = cpu::scalar_kernels();
  const Kernels& fast = *cpu::avx2_kernels();
  const Kernels* wide = cpu::avx512vnni_kernels();
  if (!wide) BOOST_TEST_MESSAGE("no AVX-512 here: only the AVX2 attention checked");
  std::mt19937 rng(4);
  for (KvDtype t : {KvDtype::F32, KvDtype::F16, KvDtype::BF16, KvDtype::Q8_0, KvDtype::FP8}) {
    for (auto [d, vd] : {std::pair<int64_t, int64_t>{8, 8}, {60, 60}, {64, 64}, {128, 128}, {200, 200}, {576, 512}}) {
      if (!kvcache::kv_fits(t, d)) continue;
      for (int64_t n : {1, 3, 9, 33, 64, 100, 128, 256}) {
        for (int64_t nq : {1, 2, 3, 5, 6, 7, 16})
        for (float cap : t == KvDtype::F32 ? std::vector<float>{0.0f, 0.5f} : std::vector<float>{0.0f}) {
          BOOST_TEST_CONTEXT(kvcache::kv_dtype_name(t) << " d=" << d << " n=" << n << " rows=" << nq << " softcap=" << cap) {
            const int64_t head_bytes = kvcache::kv_head_bytes(t, d), width = (vd + 7) / 8 * 8;
            const auto q = random_floats(size_t(nq * d), rng);
            std::vector<int32_t> lo(static_cast<size_t>(nq)), hi(lo.size());
            for (int64_t i = 0; i < nq; ++i) {
              // Row 0 sees every key; the others random ranges, an empty one among them.
              const int32_t a = int32_t(rng() % uint32_t(n)), c = int32_t(rng() % uint32_t(n + 1));
              lo[size_t(i)] = i == 0 ? 0 : std::min(a, c);
              hi[size_t(i)] = i == 0 ? int32_t(n) : i == 2 ? lo[size_t(i)] : std::max(a + 1, c);
            }
            const int32_t seen_lo = *std::min_element(lo.begin(), lo.end()), seen_hi = *std::max_element(hi.begin(), hi.end());
            // Two blocks of n rows; the rows outside what a block's queries see are NaN bytes.
            std::vector<std::vector<uint8_t>> stored(2, std::vector<uint8_t>(size_t(n * head_bytes + 4), 0xff));
            std::vector<std::vector<const uint8_t*>> ptr(2);
            for (int blk = 0; blk < 2; ++blk)
              for (int64_t j = 0; j < n; ++j) {
                uint8_t* row = stored[size_t(blk)].data() + j * head_bytes;
                if (j >= seen_lo && j < seen_hi) kvcache::kv_store_head(t, random_floats(size_t(d), rng).data(), d, row);
                ptr[size_t(blk)].push_back(row);
              }
            struct State {
              std::vector<float> m, l, acc;
            };
            auto fresh = [&] { return State{std::vector<float>(size_t(nq), -INFINITY), std::vector<float>(size_t(nq), 0.0f),
                                            std::vector<float>(size_t(nq * width), 0.0f)}; };
            std::vector<const float*> qrows;
            for (int64_t i = 0; i < nq; ++i) qrows.push_back(q.data() + i * d);
            auto run = [&](const Kernels& k, State& st, int64_t first, int64_t rows) {
              for (int blk = 0; blk < 2; ++blk) {
                const cpu::AttendBlock block{ptr[size_t(blk)].data(), ptr[size_t(blk)].data(), t, n, d, vd, 0.125f, cap};
                k.attend_block(block, {qrows.data() + first, rows, lo.data() + first, hi.data() + first, st.m.data() + first,
                                       st.l.data() + first, st.acc.data() + first * width, width});
              }
            };
            State want = fresh(), got = fresh();
            run(ref, want, 0, nq);
            run(fast, got, 0, nq);
            for (int64_t i = 0; i < nq; ++i) {
              if (lo[size_t(i)] >= hi[size_t(i)]) {  // left alone
                BOOST_TEST(got.m[size_t(i)] == -INFINITY);
                BOOST_TEST(got.l[size_t(i)] == 0.0f);
                continue;
              }
              BOOST_TEST(std::fabs(got.m[size_t(i)] - want.m[size_t(i)]) <= 1e-5 * std::max(1.0f, std::fabs(want.m[size_t(i)])));
              BOOST_TEST(std::fabs(got.l[size_t(i)] - want.l[size_t(i)]) <= 1e-4 * want.l[size_t(i)]);
              for (int64_t x = 0; x < vd; ++x)
                BOOST_REQUIRE_MESSAGE(std::fabs(got.acc[size_t(i * width + x)] - want.acc[size_t(i * width + x)]) <= 1e-4 * want.l[size_t(i)],
                                      "row " << i << " value " << x << ": " << got.acc[size_t(i * width + x)] << " vs "
                                             << want.acc[size_t(i * width + x)]);
              for (const Kernels* k : {&fast, wide}) {
                if (!k) continue;
                State alone = fresh();
                run(*k, alone, i, 1);
                BOOST_TEST(float_bits(alone.m[size_t(i)]) == float_bits(got.m[size_t(i)]), k->name);
                BOOST_TEST(float_bits(alone.l[size_t(i)]) == float_bits(got.l[size_t(i)]), k->name);
                BOOST_TEST(std::memcmp(alone.acc.data() + i * width, got.acc.data() + i * width, size_t(width) * 4) == 0, k->name);
              }
            }
            if (wide) {
              State grouped = fresh();
              run(*wide, grouped, 0, nq);
              BOOST_TEST(std::memcmp(grouped.m.data(), got.m.data(), got.m.size() * 4) == 0);
              BOOST_TEST(std::memcmp(grouped.l.data(), got.l.data(), got.l.size() * 4) == 0);
              BOOST_TEST(std::memcmp(grouped.acc.data(), got.acc.data(), got.acc.size() * 4) == 0);
            }
          }
        }
      }
    }
  }
}

// One call for the rows of several key-value heads (each reading its part of the cache rows, a head's
// bytes apart) gives every row the bits of a call for its head alone, in every table; the scalar
// reference's rows likewise. Heads of 64 values read as stored, of 60 widened first; a head whose rows
// see no key of the block between two that do.
BOOST_AUTO_TEST_CASE(attend_block_rows_of_several_heads_get_the_bits_of_each_head_alone) {
  using kvcache::KvDtype;
  std::vector<const Kernels*> tables{&cpu::scalar_kernels(), cpu::avx2_kernels()};
  if (const Kernels* wide = cpu::avx512vnni_kernels()) tables.push_back(wide);
  std::mt19937 rng(12);
  for (KvDtype t : {KvDtype::F32, KvDtype::F16, KvDtype::Q8_0})
    for (int64_t d : {64, 60}) {
      if (!kvcache::kv_fits(t, d)) continue;
      const int64_t heads = 3, per_head = 7, nq = heads * per_head, n = 37, width = (d + 7) / 8 * 8;
      const int64_t head_bytes = kvcache::kv_head_bytes(t, d), row_bytes = heads * head_bytes;
      std::vector<uint8_t> keys(size_t(n * row_bytes)), values(keys.size());
      std::vector<const uint8_t*> kptr, vptr;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t h = 0; h < heads; ++h) {
          kvcache::kv_store_head(t, random_floats(size_t(d), rng).data(), d, keys.data() + j * row_bytes + h * head_bytes);
          kvcache::kv_store_head(t, random_floats(size_t(d), rng).data(), d, values.data() + j * row_bytes + h * head_bytes);
        }
        kptr.push_back(keys.data() + j * row_bytes);
        vptr.push_back(values.data() + j * row_bytes);
      }
      const auto q = random_floats(size_t(nq * d), rng);
      std::vector<const float*> qrows;
      std::vector<int32_t> lo, hi;
      for (int64_t i = 0; i < nq; ++i) {
        qrows.push_back(q.data() + i * d);
        const int32_t a = int32_t(rng() % uint32_t(n)), c = int32_t(rng() % uint32_t(n + 1));
        const bool blind = i / per_head == 1;  // the middle head's rows see nothing of this block
        lo.push_back(blind ? 5 : std::min(a, c));
        hi.push_back(blind ? 5 : std::max(a + 1, c));
      }
      for (const Kernels* k : tables)
        BOOST_TEST_CONTEXT(k->name << " " << kvcache::kv_dtype_name(t) << " d=" << d) {
          std::vector<float> m(size_t(nq), 1.5f), l(size_t(nq), 2.0f), acc(size_t(nq * width), 0.25f);
          std::vector<float> m1 = m, l1 = l, acc1 = acc;
          const cpu::AttendBlock all{kptr.data(), vptr.data(), t, n, d, d, 0.125f, 0.0f, heads, head_bytes};
          k->attend_block(all, {qrows.data(), nq, lo.data(), hi.data(), m.data(), l.data(), acc.data(), width});
          for (int64_t h = 0; h < heads; ++h) {
            std::vector<const uint8_t*> kh, vh;
            for (int64_t j = 0; j < n; ++j) kh.push_back(kptr[size_t(j)] + h * head_bytes), vh.push_back(vptr[size_t(j)] + h * head_bytes);
            const cpu::AttendBlock one{kh.data(), vh.data(), t, n, d, d, 0.125f};
            const int64_t f = h * per_head;
            k->attend_block(one, {qrows.data() + f, per_head, lo.data() + f, hi.data() + f, m1.data() + f, l1.data() + f,
                                  acc1.data() + f * width, width});
          }
          BOOST_TEST(std::memcmp(m.data(), m1.data(), m.size() * 4) == 0);
          BOOST_TEST(std::memcmp(l.data(), l1.data(), l.size() * 4) == 0);
          BOOST_TEST(std::memcmp(acc.data(), acc1.data(), acc.size() * 4) == 0);
          BOOST_TEST(m[size_t(per_head)] == 1.5f);  // a blind row is left as it was
        }
    }
}

// ops::paged_attention on the CPU (flash attention: tiles of tokens, blocks of keys, long contexts split
// over threads and merged) against a double-precision softmax over the stored keys and values, for the
// scalar and fast tables: a prefill slice crossing segments, decodes of 1 to 2100 keys, sliding windows,
// latent attention's shape. Each token alone in its step, and the batch on 1 or 3 threads, give the
// same bits as the batch on 2 threads; cache slots no token wrote hold NaN and are never read.
BOOST_AUTO_TEST_CASE(paged_attention_matches_a_double_softmax_and_batching_changes_no_bit) {
  using kvcache::KvDtype;
  std::mt19937 rng(9);
  struct Case {
    int64_t heads, kv_heads, head_dim, value_dim, window;
    bool sinks = false;  // gpt-oss's per-head logits in each softmax's sum
  };
  cpu::ThreadPool one(1), two(2), three(3);
  for (KvDtype dtype : {KvDtype::F16, KvDtype::Q8_0})
  for (const Case& c : {Case{14, 2, 64, 0, 0, true}, Case{4, 4, 128, 0, 700}, Case{9, 3, 64, 0, 40}, Case{16, 1, 576, 512, 0}}) {
    BOOST_TEST_CONTEXT(kvcache::kv_dtype_name(dtype) << " heads " << c.heads << " kv " << c.kv_heads << " d " << c.head_dim
                                                   << " window " << c.window << " sinks " << c.sinks) {
      const bool mla = c.value_dim > 0;
      const int64_t B = 16, lengths[] = {1, 1300, 300, 2100};
      int64_t blocks = 0;
      for (int64_t n : lengths) blocks += (n + B - 1) / B + 1;
      kvcache::KvPool pool(1, c.kv_heads, c.head_dim, B, blocks, mla, dtype);
      std::memset(pool.layer_storage(0).data, 0xff, pool.layer_bytes());
      std::vector<kvcache::SequenceKv> seqs(4);
      ops::AttentionBatch b, fill;
      std::vector<int64_t> pos, every_pos;
      std::vector<int32_t> seq, every_seq;
      for (size_t s = 0; s < 4; ++s) {
        BOOST_REQUIRE(seqs[s].reserve(pool, lengths[s] + 7));  // room past the last token, never written
        b.table_start.push_back(int32_t(b.block_table.size()));
        b.block_table.insert(b.block_table.end(), seqs[s].blocks.begin(), seqs[s].blocks.end());
        // Sequence 1 computes a slice of 40 tokens across the segment boundary at 512; the others
        // their last token.
        const int64_t first = s == 1 ? 500 : lengths[s] - 1, last = s == 1 ? 540 : lengths[s];
        for (int64_t p = first; p < last; ++p) pos.push_back(p), seq.push_back(int32_t(s));
        for (int64_t p = 0; p < last; ++p) every_pos.push_back(p), every_seq.push_back(int32_t(s));
      }
      b.pos = pos;
      b.seq = seq;
      fill.block_table = b.block_table;
      fill.table_start = b.table_start;
      fill.pos = every_pos;
      fill.seq = every_seq;
      const int64_t row = c.kv_heads * c.head_dim, all = int64_t(every_pos.size());
      const std::vector<float> keys = random_floats(size_t(all * row), rng), values = random_floats(size_t(all * row), rng);
      const ops::KvLayer kv{pool.key(0, 0, 0), pool.value(0, 0, 0), pool.block_bytes(), pool.row_bytes(), dtype, Device::cpu()};
      ops::Context ctx2{two, cpu::scalar_kernels()};
      const Tensor vt = Tensor::copy_of(DType::F32, {all, row}, values.data());
      ops::store_kv(ctx2, fill, Tensor::copy_of(DType::F32, {all, row}, keys.data()), mla ? nullptr : &vt, kv, B, c.head_dim);
      const int64_t T = int64_t(pos.size()), d = c.head_dim, vd = mla ? c.value_dim : d;
      const std::vector<float> q = random_floats(size_t(T * c.heads * d), rng, 2.0f);
      ops::AttentionShape shape{c.heads, c.kv_heads, d, B, c.window, 1.0f / std::sqrt(float(d)), c.value_dim};
      const Tensor sinks = Tensor::copy_of(DType::F32, {c.heads}, random_floats(size_t(c.heads), rng, 4.0f).data());
      if (c.sinks) shape.sinks = &sinks;
      // The reference: e^(s - max) in double over each token's keys as stored.
      const int64_t head_bytes = kvcache::kv_head_bytes(dtype, d);
      std::vector<double> want(size_t(T * c.heads * vd));
      for (int64_t t = 0; t < T; ++t) {
        const int64_t s = seq[size_t(t)], p = pos[size_t(t)], from = c.window ? std::max<int64_t>(0, p - c.window + 1) : 0;
        const int32_t* table = b.block_table.data() + b.table_start[size_t(s)];
        for (int64_t h = 0; h < c.heads; ++h) {
          const int64_t kvh = h / (c.heads / c.kv_heads);
          std::vector<double> score;
          for (int64_t j = from; j <= p; ++j) {
            const uint8_t* key = pool.key(0, table[j / B], j % B) + kvh * head_bytes;
            double dot = 0;
            for (int64_t x = 0; x < d; ++x) dot += double(q[size_t((t * c.heads + h) * d + x)]) * kvcache::kv_value(dtype, key, x);
            score.push_back(dot * shape.scale);
          }
          double top = *std::max_element(score.begin(), score.end());
          if (c.sinks) top = std::max(top, double(sinks.as<float>()[h]));
          double sum = c.sinks ? std::exp(double(sinks.as<float>()[h]) - top) : 0.0;
          for (double& e : score) sum += (e = std::exp(e - top));
          for (int64_t x = 0; x < vd; ++x) {
            double& w = want[size_t((t * c.heads + h) * vd + x)];
            for (int64_t j = from; j <= p; ++j) {
              const uint8_t* value = (mla ? pool.key(0, table[j / B], j % B) : pool.value(0, table[j / B], j % B)) + kvh * head_bytes;
              w += score[size_t(j - from)] / sum * kvcache::kv_value(dtype, value, x);
            }
          }
        }
      }
      for (const Kernels* kernels : {&cpu::scalar_kernels(), cpu::avx2_kernels()}) {
        if (kernels == &cpu::scalar_kernels() && mla) continue;  // slow, and the fast table covers it
        auto attend = [&](cpu::ThreadPool& pool_, std::span<const int64_t> p, std::span<const int32_t> sq, const float* qs) {
          ops::AttentionBatch part;
          part.block_table = b.block_table;
          part.table_start = b.table_start;
          part.pos = p;
          part.seq = sq;
          ops::Context ctx{pool_, *kernels};
          const int64_t n = int64_t(p.size());
          Tensor out = Tensor::zeros_f32({n, c.heads * vd});
          ops::paged_attention(ctx, Tensor::copy_of(DType::F32, {n, c.heads * d}, qs), part, kv, shape, out);
          return std::vector<float>(out.as<float>(), out.as<float>() + out.numel());
        };
        const std::vector<float> batched = attend(two, pos, seq, q.data());
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(batched[i] - want[i]));
        BOOST_TEST_MESSAGE(kernels->name << " attention: max |error| " << worst);
        BOOST_TEST(worst < 2e-5, kernels->name << ": max |error| " << worst);

        auto same_bits = [&](const std::vector<float>& v) { return std::memcmp(v.data(), batched.data(), v.size() * 4) == 0; };
        BOOST_TEST(same_bits(attend(one, pos, seq, q.data())), kernels->name << ": one thread");
        BOOST_TEST(same_bits(attend(three, pos, seq, q.data())), kernels->name << ": three threads");
        for (int64_t t = 0; t < T; ++t) {
          const std::vector<float> alone = attend(two, std::span(pos).subspan(size_t(t), 1), std::span(seq).subspan(size_t(t), 1),
                                                  q.data() + t * c.heads * d);
          BOOST_TEST(std::memcmp(alone.data(), batched.data() + t * c.heads * vd, alone.size() * sizeof(float)) == 0,
                     kernels->name << ": token " << t);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(scalar_reference_is_right_on_known_values) {
  const Kernels& ref = cpu::scalar_kernels();
  float x[] = {1, 2, 3, 4}, w[] = {1, 1, 1, 1}, out[4];
  ref.rmsnorm(x, w, 4, 0.0f, out);
  BOOST_TEST(out[3] == 4.0f / std::sqrt(7.5f), boost::test_tools::tolerance(1e-6f));
  float y[2];
  float mat[] = {1, 0, 0, 0, 0, 1, 0, 0};  // 2 x 4
  ref.matmul(DType::F32, x, nullptr, 1, 4, mat, 0, 2, y, 2);
  BOOST_TEST(y[0] == 1.0f);
  BOOST_TEST(y[1] == 2.0f);
  ref.silu_mul(x, w, out, 1);
  BOOST_TEST(out[0] == 1.0f / (1.0f + std::exp(-1.0f)), boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(thread_pool_covers_every_index_once) {
  for (int threads : {1, 2, 3}) {
    cpu::ThreadPool pool(threads);
    BOOST_TEST(pool.size() == threads);
    for (int64_t n : {0, 1, 7, 1000, 100003}) {
      std::vector<int> hits(size_t(n), 0);
      for (int round = 0; round < 3; ++round)
        pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
        });
      for (int h : hits) BOOST_REQUIRE_EQUAL(h, 3);
    }
  }
}

// A straggler inside a job (a thread whose chunk is slow) keeps only its own chunk: the others take the
// rest as they free up, and every index is still done once.
BOOST_AUTO_TEST_CASE(thread_pool_work_flows_around_a_straggler) {
  cpu::ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int> hits(64, 0);
  std::atomic<int64_t> by_caller{0};
  std::atomic<bool> slowed{false};
  pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
    // Every chunk takes a moment, so the worker surely turns up for one; its first takes far longer.
    const bool worker = std::this_thread::get_id() != caller;
    std::this_thread::sleep_for(std::chrono::milliseconds(worker && !slowed.exchange(true) ? 200 : 2));
    if (std::this_thread::get_id() == caller) by_caller += e - b;
    for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
  });
  for (int h : hits) BOOST_REQUIRE_EQUAL(h, 1);
  // The worker took only its first chunk (it slept on it); of the 8 chunks of 8 the caller did the rest.
  BOOST_TEST(by_caller.load() >= 56);
}

// A worker that turns up late for every job (asleep, preempted, its core busy with another process) does
// not hold the jobs up: the caller does the work and returns without waiting for it to check in.
BOOST_AUTO_TEST_CASE(thread_pool_jobs_do_not_wait_for_a_late_worker) {
  cpu::ThreadPool pool(2);
  pool.set_wake_hook_for_tests([] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); });
  std::vector<int> hits(1000, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int job = 0; job < 20; ++job)
    pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
    });
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (int h : hits) BOOST_REQUIRE_EQUAL(h, 20);
  // Waiting for the late worker would take 20 x 100 ms; without it the jobs take next to nothing.
  BOOST_TEST(ms < 1000, ms << " ms for 20 jobs");
}

// A pool adapting to the machine's load runs its jobs on as many threads as cores are free: with one free
// (a neighbour busy on the other), all on the caller while the worker sits out asleep; with two, the worker
// takes part again; never fewer than the caller.
BOOST_AUTO_TEST_CASE(thread_pool_leaves_out_threads_the_machine_has_no_core_for) {
  cpu::ThreadPool pool(2);
  std::atomic<double> free_cores{1.0};
  pool.adapt_to_machine_load([&] { return free_cores.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its first look is 50 ms on (later ones 200)
  const std::thread::id caller = std::this_thread::get_id();
  auto worker_share = [&] {  // chunks that take a moment, so a worker taking part surely takes some
    std::atomic<int64_t> by_worker{0};
    std::vector<int> hits(64, 0);
    pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (std::this_thread::get_id() != caller) by_worker += e - b;
      for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
    });
    for (int h : hits) BOOST_REQUIRE_EQUAL(h, 1);
    return by_worker.load();
  };
  auto after_next_check = [&](double cores) {
    free_cores = cores;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // the pool looks every 200 ms
  };
  // A woken worker may be scheduled late on a loaded machine and find a short job done: a few jobs in a
  // row, one of which it must join.
  auto worker_joins = [&] {
    for (int job = 0; job < 10; ++job)
      if (worker_share() > 0) return true;
    return false;
  };
  BOOST_TEST(worker_share() == 0);
  BOOST_TEST(pool.active() == 1);
  after_next_check(2.0);
  BOOST_TEST(worker_joins());
  BOOST_TEST(pool.active() == 2);
  after_next_check(0.2);
  BOOST_TEST(worker_share() == 0);
  BOOST_TEST(pool.active() == 1);
  // The default reads /proc/stat: first every CPU of this process's affinity, then what others left of
  // them, this process's own work (a thread spinning meanwhile) not counted against it.
  cpu_set_t set;
  CPU_ZERO(&set);
  BOOST_REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const double cpus = CPU_COUNT(&set);
  cpu::MachineLoad load;
  BOOST_TEST(load.free_cores() == cpus);
  std::atomic<bool> spin = true;
  std::jthread busy([&] {
    while (spin) continue;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double free = load.free_cores();
  spin = false;
  BOOST_TEST(free <= cpus);
  BOOST_TEST(free >= -0.3, free << " of " << cpus << " CPUs free");  // others can take all, no more (ticks round)
}

// --device numa: group g's threads take exactly share g of the rows, and every row is done once. On a
// one-node machine the groups are all node 0, which exercises the same split.
BOOST_AUTO_TEST_CASE(a_thread_late_for_a_finished_job_takes_nothing_from_the_next) {
  // A worker reads its job's (spent) next index, is held up, and reads the end only once the caller has
  // set the next job's end but not yet its first index: it must see that the job is over, not run the
  // finished job's function on the next job's range (which had crashed and hung ftllmd at shutdown).
  cpu::ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> armed{false};
  pool.set_race_hook_for_tests([&](const char* where) {
    if (!armed.load()) return;
    if (std::string_view(where) == "claim read" && std::this_thread::get_id() != caller)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    else if (std::string_view(where) == "end set")
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  // Short jobs (two chunks: the worker's last read is of a spent range) alternate with long ones; every
  // index of every job must be worked on exactly once, checked after the job and again at the end.
  std::vector<std::vector<std::atomic<int>>> hits;
  for (int j = 0; j < 40; ++j) hits.emplace_back(j % 2 ? 2 : 1000);
  for (int j = 0; j < 40; ++j) {
    armed = j > 0;
    auto& mine = hits[size_t(j)];
    pool.parallel_for(int64_t(mine.size()), 1, [&mine](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) mine[size_t(i)] += 1;
    });
    for (auto& h : mine) BOOST_REQUIRE_EQUAL(h.load(), 1);
  }
  armed = false;
  pool.parallel_for(1000, 1, [](int64_t, int64_t) {});
  for (auto& job : hits)
    for (auto& h : job) BOOST_REQUIRE_EQUAL(h.load(), 1);
}

BOOST_AUTO_TEST_CASE(grouped_pool_gives_each_group_its_row_share) {
  for (int threads : {2, 3, 5}) {
    cpu::ThreadPool pool(threads, std::vector<int>{0, 0});
    BOOST_TEST(pool.groups() == 2);
    const std::thread::id caller = std::this_thread::get_id();  // group 0
    for (int64_t n : {1, 17, 576, 4099}) {
      const std::vector<int64_t> split = cpu::split_rows(n, 2);
      BOOST_TEST(split.front() == 0);
      BOOST_TEST(split.back() == n);
      BOOST_TEST((split[1] % 16 == 0 || split[1] == n));
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::vector<std::thread::id> by(static_cast<size_t>(n));
      for (int round = 0; round < 3; ++round)
        pool.parallel_for_groups(n, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++hits[size_t(i)], by[size_t(i)] = std::this_thread::get_id();
        });
      for (int64_t i = 0; i < n; ++i) {
        BOOST_REQUIRE_EQUAL(hits[size_t(i)].load(), 3);
        // With two threads the caller is group 0 alone and the worker group 1 alone.
        if (threads == 2) BOOST_REQUIRE_EQUAL(by[size_t(i)] == caller, i < split[1]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(rows_placed_on_nodes_keep_their_bytes_and_node) {
  const std::vector<int> nodes = cpu::numa_nodes_with_cpus();
  std::mt19937 rng(11);
  std::vector<float> values = random_floats(300 * 64, rng);
  Tensor w = Tensor::copy_of(DType::F32, {300, 64}, values.data());
  const void* before = w.data;
  std::vector<int> groups = {nodes[0], nodes.back()};
  cpu::place_rows_on_nodes(w, groups);
  BOOST_TEST(w.data != before);
  BOOST_TEST(std::memcmp(w.data, values.data(), values.size() * 4) == 0);
  const std::vector<int64_t> split = cpu::split_rows(300, 2);
  BOOST_TEST(cpu::node_of_address(w.as<float>()) == groups[0]);
  BOOST_TEST(cpu::node_of_address(w.as<float>() + 299 * 64) == groups[1]);
  BOOST_TEST(split[1] == 144);
}

// The linear op on a grouped pool computes the same bits as on a plain one: each output element is one
// thread's dot product whichever thread that is.
BOOST_AUTO_TEST_CASE(linear_on_node_groups_equals_plain_pool) {
  std::mt19937 rng(12);
  const cpu::Kernels& k = cpu::kernels_named("auto");
  for (DType t : {DType::F32, DType::I8, DType::I4G32}) {
    const int64_t N = 200, K = 256, T = 3;
    std::vector<float> wf = random_floats(size_t(N * K), rng), xf = random_floats(size_t(T * K), rng);
    Tensor w = Tensor::zeros(t, {N, K});
    for (int64_t r = 0; r < N; ++r)
      quant::quantize_row(t, wf.data() + r * K, K, static_cast<uint8_t*>(w.data) + size_t(r) * row_bytes(t, K));
    Tensor x = Tensor::copy_of(DType::F32, {T, K}, xf.data());
    Tensor plain = Tensor::zeros_f32({T, N}), grouped = Tensor::zeros_f32({T, N});
    cpu::ThreadPool p1(2), p2(3, std::vector<int>{0, 0});
    ops::Context c1{p1, k}, c2{p2, k};
    ops::linear(c1, x, w, nullptr, plain);
    cpu::place_rows_on_nodes(w, {0, 0});
    ops::linear(c2, x, w, nullptr, grouped);
    BOOST_TEST(std::memcmp(plain.data, grouped.data, size_t(T * N) * 4) == 0);
  }
}

// Layers sharing an input (q, k, v; gate, up) in one job give each output linear()'s bits: whichever
// activation formats the weights want (int8 per 32 and per 256 values, floats), with and without bias,
// for a decode row, a small batch and a GEMM's many rows, however the threads cut the joined rows.
BOOST_AUTO_TEST_CASE(linear_many_gives_each_layer_the_bits_of_its_own_linear) {
  std::mt19937 rng(31);
  const cpu::Kernels& k = cpu::kernels_named("auto");
  const int64_t K = 512;
  const std::vector<std::pair<DType, int64_t>> layers = {{DType::Q4_0, 96}, {DType::Q4_K, 40}, {DType::F16, 17}, {DType::Q5_1, 33}, {DType::I8, 8}};
  std::vector<Tensor> w, bias;
  for (auto [t, N] : layers) {
    std::vector<float> wf = random_floats(size_t(N * K), rng, 0.5f), bf = random_floats(size_t(N), rng);
    w.push_back(Tensor::zeros(t, {N, K}));
    for (int64_t r = 0; r < N; ++r)
      quant::quantize_row(t, wf.data() + r * K, K, static_cast<uint8_t*>(w.back().data) + size_t(r) * row_bytes(t, K));
    bias.push_back(Tensor::copy_of(DType::F32, {N}, bf.data()));
  }
  for (int threads : {1, 2, 3})
    for (int64_t T : {1, 3, 9}) {
      std::vector<float> xf = random_floats(size_t(T * K), rng);
      Tensor x = Tensor::copy_of(DType::F32, {T, K}, xf.data());
      cpu::ThreadPool pool(threads);
      ops::Context ctx{pool, k};
      std::vector<Tensor> alone, joined;
      std::vector<ops::LinearOut> outs;
      for (size_t i = 0; i < layers.size(); ++i) {
        alone.push_back(Tensor::zeros_f32({T, layers[i].second}));
        joined.push_back(Tensor::zeros_f32({T, layers[i].second}));
      }
      for (size_t i = 0; i < layers.size(); ++i) {
        const Tensor* b = i % 2 ? nullptr : &bias[i];
        ops::linear(ctx, x, w[i], b, alone[i]);
        outs.push_back({&w[i], b, &joined[i]});
      }
      ops::linear_many(ctx, x, outs);
      for (size_t i = 0; i < layers.size(); ++i)
        BOOST_TEST(std::memcmp(alone[i].data, joined[i].data, size_t(T * layers[i].second) * 4) == 0,
                   dtype_name(layers[i].first) << " T=" << T << " threads=" << threads);
    }
  Tensor x = Tensor::zeros_f32({1, K + 32}), y = Tensor::zeros_f32({1, 96});
  cpu::ThreadPool pool(2);
  ops::Context ctx{pool, k};
  const ops::LinearOut misfit[] = {{&w[0], nullptr, &y}};
  BOOST_CHECK_THROW(ops::linear_many(ctx, x, misfit), EngineError);
}
