// Every CUDA op against the CPU reference on random data, odd sizes and tails. Skipped, with the
// reason, where no GPU is usable.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "../common/gpu.h"
#include "../common/logit_error.h"
#include "../common/random_weights.h"
#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "cuda/cuda_ops.h"
#include "kvcache/kv_cache.h"
#include "ops/ops.h"

using namespace ftllm;
using test::kGpu;
using test::on_gpu;
using test::random_floats;
using test::to_host;

namespace {

// max |got - want| / max |want|: the bounds below are stated in it.
double error_of(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, top = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, test::difference(got[i], want[i]));
    top = std::max(top, std::fabs(double(want[i])));
  }
  return got.size() == want.size() ? worst / top : INFINITY;
}

struct Host {
  cpu::ThreadPool pool{2};
  ops::Context ctx{pool, cpu::scalar_kernels()};
};

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_ops, *boost::unit_test::precondition(test::GpuPresent()))

// GEMV (decode), chunked GEMV and the cuBLAS GEMM over decoded weights, every stored type, with a bias.
BOOST_AUTO_TEST_CASE(linear_matches_the_scalar_reference_for_every_dtype) {
  std::mt19937 rng(5);
  const int64_t K = 1024, N = 67;
  Host h;
  for (DType t : kAllDTypes) {
    const std::vector<uint8_t> w = test::random_rows(t, N, K, rng);
    const Tensor wh = Tensor::copy_of(t, {N, K}, w.data()), wd = on_gpu(t, {N, K}, w.data());
    const std::vector<float> bias = random_floats(size_t(N), rng);
    const Tensor bh = Tensor::copy_of(DType::F32, {N}, bias.data()), bd = on_gpu(bias, {N});
    for (int64_t M : {1, 5, 8, 13, 40, 100}) {
      BOOST_TEST_CONTEXT(dtype_name(t) << " M=" << M) {
        const std::vector<float> x = random_floats(size_t(M * K), rng);
        Tensor xh = Tensor::copy_of(DType::F32, {M, K}, x.data()), yh = Tensor::zeros_f32({M, N});
        ops::linear(h.ctx, xh, wh, &bh, yh);
        const std::vector<float> want(yh.as<float>(), yh.as<float>() + M * N);
        Tensor xd = on_gpu(x, {M, K}), yd = cuda::zeros(kGpu, DType::F32, {M, N});
        cuda::linear(xd, wd, &bd, yd);
        const double err = error_of(to_host(yd), want);
        // float32 sums in registers (GEMV) or cuBLAS over 16-bit operands (GEMM: bf16 rounds 2^-9).
        const bool gemm = M > cuda::kGemvRows && (is_float(t) || M > 4 * cuda::kGemvRows);
        const double bound = !gemm || t == DType::F32 ? 2e-5 : 2e-2;
        BOOST_TEST(err < bound, "error " << err << " bound " << bound);
        Tensor yv = cuda::zeros(kGpu, DType::F32, {M, N});
        cuda::linear_gemv(xd, wd, &bd, yv);
        BOOST_TEST(error_of(to_host(yv), want) < 2e-5);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(device_dequantization_equals_the_reference) {
  std::mt19937 rng(6);
  const int64_t K = 512, N = 9;
  for (DType t : kAllDTypes) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      const std::vector<uint8_t> w = test::random_rows(t, N, K, rng);
      std::vector<float> want(size_t(N * K));
      for (int64_t r = 0; r < N; ++r) quant::dequantize_row(t, w.data() + size_t(r) * row_bytes(t, K), want.data() + r * K, K);
      Tensor out = cuda::zeros(kGpu, DType::F32, {N, K});
      cuda::dequantize(on_gpu(t, {N, K}, w.data()), out);
      BOOST_TEST(error_of(to_host(out), want) < 1e-6);  // a fused multiply-add may round once less
    }
  }
}

BOOST_AUTO_TEST_CASE(norms_activations_rope_and_row_moves_match_the_cpu) {
  std::mt19937 rng(7);
  Host h;
  const int64_t T = 7, heads = 3, d = 64, H = heads * d;
  const std::vector<float> x = random_floats(size_t(T * H), rng), y = random_floats(size_t(T * H), rng);
  const std::vector<float> w = random_floats(size_t(d), rng), wide = random_floats(size_t(H), rng);
  auto host = [](const std::vector<float>& v, std::vector<int64_t> shape) { return Tensor::copy_of(DType::F32, std::move(shape), v.data()); };
  auto vec = [](const Tensor& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); };
  {  // rmsnorm over whole rows and per head, with Gemma's 1 + w too
    for (const std::vector<float>* wt : {&wide, &w})
      for (float offset : {0.0f, 1.0f}) {
        const int64_t n = int64_t(wt->size());
        Tensor oh = Tensor::zeros_f32({T, H}), od = cuda::zeros(kGpu, DType::F32, {T, H});
        ops::rmsnorm(h.ctx, host(x, {T, H}), host(*wt, {n}), 1e-6f, oh, offset);
        cuda::rmsnorm(on_gpu(x, {T, H}), on_gpu(*wt, {n}), 1e-6f, od, offset);
        BOOST_TEST(error_of(to_host(od), vec(oh)) < 1e-6);
      }
  }
  {  // silu(gate) * up, gelu_tanh(gate) * up, and x += y
    Tensor oh = Tensor::zeros_f32({T, H}), od = cuda::zeros(kGpu, DType::F32, {T, H});
    ops::silu_mul(h.ctx, host(x, {T, H}), host(y, {T, H}), oh);
    cuda::silu_mul(on_gpu(x, {T, H}), on_gpu(y, {T, H}), od);
    BOOST_TEST(error_of(to_host(od), vec(oh)) < 1e-6);
    ops::gelu_tanh_mul(h.ctx, host(x, {T, H}), host(y, {T, H}), oh);
    cuda::gelu_tanh_mul(on_gpu(x, {T, H}), on_gpu(y, {T, H}), od);
    BOOST_TEST(error_of(to_host(od), vec(oh)) < 1e-6);
    Tensor ah = host(x, {T, H}), ad = on_gpu(x, {T, H});
    ops::add(h.ctx, ah, host(y, {T, H}));
    cuda::add(ad, on_gpu(y, {T, H}));
    BOOST_TEST(error_of(to_host(ad), vec(ah)) == 0.0);
  }
  {  // rotate-half RoPE
    const std::vector<float> angle = random_floats(size_t(T * d / 2), rng, 3.0f);
    std::vector<float> c(angle.size()), s(angle.size());
    for (size_t i = 0; i < angle.size(); ++i) c[i] = std::cos(angle[i]), s[i] = std::sin(angle[i]);
    Tensor rh = host(x, {T, H}), rd = on_gpu(x, {T, H});
    ops::rope(h.ctx, rh, heads, host(c, {T, d / 2}), host(s, {T, d / 2}));
    cuda::rope(rd, heads, on_gpu(c, {T, d / 2}), on_gpu(s, {T, d / 2}));
    BOOST_TEST(error_of(to_host(rd), vec(rh)) < 1e-6);
    // Interleaved (DeepSeek): pairs (2i, 2i + 1), results laid out rotate-half style.
    Tensor id = on_gpu(x, {T, H});
    cuda::rope(id, heads, on_gpu(c, {T, d / 2}), on_gpu(s, {T, d / 2}), true);
    std::vector<float> want = x;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hd = 0; hd < heads; ++hd) {
        float* v = want.data() + t * H + hd * d;
        std::vector<float> in(v, v + d);
        for (int64_t i = 0; i < d / 2; ++i) {
          const float cc = c[size_t(t * d / 2 + i)], ss = s[size_t(t * d / 2 + i)];
          v[i] = in[size_t(2 * i)] * cc - in[size_t(2 * i + 1)] * ss;
          v[d / 2 + i] = in[size_t(2 * i + 1)] * cc + in[size_t(2 * i)] * ss;
        }
      }
    BOOST_TEST(error_of(to_host(id), want) < 1e-6);
  }
  {  // gather, weighted scatter-add and row scaling
    const std::vector<int64_t> rows = {4, 0, 6};
    const std::vector<float> weights = {0.5f, -2.0f, 1.25f};
    Tensor gd = cuda::zeros(kGpu, DType::F32, {3, H});
    cuda::gather_rows(on_gpu(x, {T, H}), rows, gd);
    std::vector<float> g = to_host(gd), want;
    for (int64_t r : rows) want.insert(want.end(), x.begin() + r * H, x.begin() + (r + 1) * H);
    BOOST_TEST(error_of(g, want) == 0.0);
    Tensor od = on_gpu(y, {T, H});
    cuda::scatter_add_rows(gd, rows, weights, od);
    std::vector<float> sum = y;
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t j = 0; j < H; ++j) sum[size_t(rows[i] * H + j)] += weights[i] * want[size_t(int64_t(i) * H + j)];
    BOOST_TEST(error_of(to_host(od), sum) < 1e-6);
    const std::vector<float> scale = random_floats(size_t(T), rng);
    Tensor sh = host(x, {T, H}), sd = on_gpu(x, {T, H});
    ops::scale_rows(h.ctx, sh, host(scale, {T, 1}), true);
    cuda::scale_rows(sd, on_gpu(scale, {T, 1}), true);
    BOOST_TEST(error_of(to_host(sd), vec(sh)) < 1e-6);
  }
}

// Latent attention's pieces: per-head products over views of one matrix (both orientations), block
// copies, a norm of each row's prefix, RoPE on blocks at an offset.
BOOST_AUTO_TEST_CASE(latent_attention_pieces_match_the_cpu) {
  std::mt19937 rng(12);
  Host h;
  const int64_t T = 5, heads = 4, nope = 32, rope = 16, lora = 64, v = 24, qk = nope + rope, row = lora + rope;
  const int64_t kvb_rows = nope + v;
  auto host = [](const std::vector<float>& x, std::vector<int64_t> shape) { return Tensor::copy_of(DType::F32, std::move(shape), x.data()); };
  auto vec = [](const Tensor& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); };
  const std::vector<float> q = random_floats(size_t(T * heads * qk), rng), kv_b = random_floats(size_t(heads * kvb_rows * lora), rng);
  const std::vector<float> mixed = random_floats(size_t(T * heads * lora), rng);
  ops::Context g{h.pool, h.ctx.kernels, kGpu};
  {  // absorb: [W_uk^T q_nope] per head, then the rotary part copied beside it
    Tensor qh = host(q, {T, heads * qk}), yh = Tensor::zeros_f32({T, heads * row});
    Tensor qd = on_gpu(q, {T, heads * qk}), yd = cuda::zeros(kGpu, DType::F32, {T, heads * row});
    const ops::HeadMatmul absorb{nope, lora, kvb_rows, 0, true};
    ops::head_matmul(h.ctx, qh, {heads, qk, 0}, host(kv_b, {heads * kvb_rows, lora}), absorb, yh, {heads, row, 0});
    ops::head_matmul(g, qd, {heads, qk, 0}, on_gpu(kv_b, {heads * kvb_rows, lora}), absorb, yd, {heads, row, 0});
    ops::copy_blocks(h.ctx, qh, {heads, qk, nope}, yh, {heads, row, lora}, rope);
    ops::copy_blocks(g, qd, {heads, qk, nope}, yd, {heads, row, lora}, rope);
    BOOST_TEST(error_of(to_host(yd), vec(yh)) < 1e-5);
  }
  {  // expand: W_uv mixed per head
    Tensor yh = Tensor::zeros_f32({T, heads * v}), yd = cuda::zeros(kGpu, DType::F32, {T, heads * v});
    const ops::HeadMatmul expand{lora, v, kvb_rows, nope, false};
    ops::head_matmul(h.ctx, host(mixed, {T, heads * lora}), {heads, lora, 0}, host(kv_b, {heads * kvb_rows, lora}), expand, yh,
                     {heads, v, 0});
    ops::head_matmul(g, on_gpu(mixed, {T, heads * lora}), {heads, lora, 0}, on_gpu(kv_b, {heads * kvb_rows, lora}), expand, yd,
                     {heads, v, 0});
    BOOST_TEST(error_of(to_host(yd), vec(yh)) < 1e-5);
  }
  {  // the compressed row: norm of its first lora values, interleaved RoPE of the rest
    const std::vector<float> lat = random_floats(size_t(T * row), rng), w = random_floats(size_t(lora), rng);
    const std::vector<float> angle = random_floats(size_t(T * rope / 2), rng, 3.0f);
    std::vector<float> c(angle.size()), s(angle.size());
    for (size_t i = 0; i < angle.size(); ++i) c[i] = std::cos(angle[i]), s[i] = std::sin(angle[i]);
    Tensor lh = host(lat, {T, row}), ld = on_gpu(lat, {T, row});
    ops::rmsnorm_prefix(h.ctx, lh, host(w, {lora}), 1e-6f);
    ops::rmsnorm_prefix(g, ld, on_gpu(w, {lora}), 1e-6f);
    ops::rope_blocks(h.ctx, lh, {1, row, lora}, host(c, {T, rope / 2}), host(s, {T, rope / 2}), true);
    ops::rope_blocks(g, ld, {1, row, lora}, on_gpu(c, {T, rope / 2}), on_gpu(s, {T, rope / 2}), true);
    BOOST_TEST(error_of(to_host(ld), vec(lh)) < 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(embedding_lookups_decode_every_dtype) {
  std::mt19937 rng(8);
  Host h;
  const int64_t V = 50, d = 256;
  const std::vector<int32_t> ids = {3, 49, 0, 3, 17};
  for (DType t : kAllDTypes) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      const std::vector<uint8_t> table = test::random_rows(t, V, d, rng);
      Tensor oh = Tensor::zeros_f32({5, d}), od = cuda::zeros(kGpu, DType::F32, {5, d});
      ops::embedding(h.ctx, Tensor::copy_of(t, {V, d}, table.data()), ids, oh);
      cuda::embedding(on_gpu(t, {V, d}, table.data()), ids, od);
      BOOST_TEST(error_of(to_host(od), std::vector<float>(oh.as<float>(), oh.as<float>() + 5 * d)) < 1e-6);
    }
  }
}

// Paged attention over sequences of 1 to 5000 tokens (the long ones split their keys over several
// blocks), prefill and decode mixed, grouped heads, a sliding window, and MLA's keys-as-values shape, for
// every KV dtype: the device stores the bytes the host stores, and reads them as the host does.
BOOST_AUTO_TEST_CASE(paged_attention_matches_the_cpu) {
  using kvcache::KvDtype;
  std::mt19937 rng(9);
  Host h;
  struct Case {
    int64_t heads, kv_heads, head_dim, value_dim, window;
  };
  for (KvDtype dtype : {KvDtype::F32, KvDtype::F16, KvDtype::BF16, KvDtype::Q8_0, KvDtype::FP8})
  for (const Case& c : {Case{8, 2, 64, 0, 0}, Case{4, 4, 128, 0, 100}, Case{16, 1, 576, 512, 0}}) {
    BOOST_TEST_CONTEXT(kvcache::kv_dtype_name(dtype) << " heads " << c.heads << " kv " << c.kv_heads << " d " << c.head_dim
                                                   << " window " << c.window) {
      const bool mla = c.value_dim > 0;
      const int64_t B = 16, lengths[] = {1, 17, 300, 5000};
      int64_t blocks = 0;
      for (int64_t n : lengths) blocks += (n + B - 1) / B;
      kvcache::KvPool pool(1, c.kv_heads, c.head_dim, B, blocks, mla, dtype);
      std::memset(pool.layer_storage(0).data, 0, pool.layer_bytes());  // slots no token fills compare equal below
      std::vector<kvcache::SequenceKv> seqs(4);
      ops::AttentionBatch b, fill;
      std::vector<int64_t> pos, every_pos;
      std::vector<int32_t> seq, every_seq;
      for (size_t s = 0; s < 4; ++s) {
        BOOST_REQUIRE(seqs[s].reserve(pool, lengths[s]));
        b.table_start.push_back(int32_t(b.block_table.size()));
        b.block_table.insert(b.block_table.end(), seqs[s].blocks.begin(), seqs[s].blocks.end());
        // The first sequence prefills its one token; the others decode their last, the 17-token one also
        // asks for its first three (a prefill slice).
        const int64_t first = s == 1 ? lengths[s] - 3 : lengths[s] - 1;
        for (int64_t p = first; p < lengths[s]; ++p) pos.push_back(p), seq.push_back(int32_t(s));
        for (int64_t p = 0; p < lengths[s]; ++p) every_pos.push_back(p), every_seq.push_back(int32_t(s));
      }
      b.pos = pos;
      b.seq = seq;
      fill.block_table = b.block_table;
      fill.table_start = b.table_start;
      fill.pos = every_pos;
      fill.seq = every_seq;
      // Random keys and values in every slot, stored by the host.
      const int64_t row = c.kv_heads * c.head_dim, all = int64_t(every_pos.size());
      const std::vector<float> keys = random_floats(size_t(all * row), rng), values = random_floats(size_t(all * row), rng);
      const ops::KvLayer kh{pool.key(0, 0, 0), pool.value(0, 0, 0), pool.block_bytes(), pool.row_bytes(), dtype, Device::cpu()};
      const Tensor vt = Tensor::copy_of(DType::F32, {all, row}, values.data());
      ops::store_kv(h.ctx, fill, Tensor::copy_of(DType::F32, {all, row}, keys.data()), mla ? nullptr : &vt, kh, B, c.head_dim);
      const int64_t T = int64_t(pos.size()), vd = mla ? c.value_dim : c.head_dim;
      const std::vector<float> q = random_floats(size_t(T * c.heads * c.head_dim), rng);
      const ops::AttentionShape shape{c.heads, c.kv_heads, c.head_dim, B, c.window, 1.0f / std::sqrt(float(c.head_dim)),
                                      c.value_dim};
      Tensor oh = Tensor::zeros_f32({T, c.heads * vd});
      ops::paged_attention(h.ctx, Tensor::copy_of(DType::F32, {T, c.heads * c.head_dim}, q.data()), b, kh, shape, oh);

      const Tensor pages = pool.layer_storage(0);
      const Tensor on_device = cuda::to_device(pages, kGpu);
      pool.replace_layer(0, on_device);
      const ops::KvLayer kd{pool.key(0, 0, 0), pool.value(0, 0, 0), pool.block_bytes(), pool.row_bytes(), dtype, kGpu};
      ops::Context gctx{h.pool, h.ctx.kernels, kGpu};
      Tensor od = cuda::zeros(kGpu, DType::F32, {T, c.heads * vd});
      ops::paged_attention(gctx, on_gpu(q, {T, c.heads * c.head_dim}), b, kd, shape, od);
      BOOST_TEST(error_of(to_host(od), std::vector<float>(oh.as<float>(), oh.as<float>() + oh.numel())) < 1e-5);
      // Each token alone in its step gets the bits it got in the batch (the 5000-key one splits, the others
      // do not, and the batch's launch has splits for the longest): batching and prefix-cache hits, which
      // change what else a step holds, never change a token's attention.
      const std::vector<float> batched = to_host(od);
      for (int64_t t = 0; t < T; ++t) {
        ops::AttentionBatch one;
        one.block_table = b.block_table;
        one.table_start = b.table_start;
        one.pos = std::span(pos).subspan(size_t(t), 1);
        one.seq = std::span(seq).subspan(size_t(t), 1);
        Tensor alone = cuda::zeros(kGpu, DType::F32, {1, c.heads * vd});
        const std::vector<float> qt(q.begin() + t * c.heads * c.head_dim, q.begin() + (t + 1) * c.heads * c.head_dim);
        ops::paged_attention(gctx, on_gpu(qt, {1, c.heads * c.head_dim}), one, kd, shape, alone);
        const std::vector<float> got = to_host(alone);
        BOOST_TEST(std::memcmp(got.data(), batched.data() + t * c.heads * vd, got.size() * sizeof(float)) == 0, "token " << t);
      }

      // store_kv on the device writes every slot's bytes as the host did.
      Tensor kdev = on_gpu(keys, {all, row}), vdev = on_gpu(values, {all, row});
      pool.replace_layer(0, cuda::zeros(kGpu, DType::F32, pages.shape));
      const ops::KvLayer kz{pool.key(0, 0, 0), pool.value(0, 0, 0), pool.block_bytes(), pool.row_bytes(), dtype, kGpu};
      ops::store_kv(gctx, fill, kdev, mla ? nullptr : &vdev, kz, B, c.head_dim);
      const std::vector<float> back = to_host(pool.layer_storage(0));
      BOOST_TEST(std::memcmp(back.data(), pages.as<float>(), pages.bytes()) == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(device_sampling_picks_what_the_host_would) {
  std::mt19937 rng(10);
  const int64_t R = 4, V = 151936;  // Qwen's vocabulary: several tiles of the running sum
  std::vector<float> logits = random_floats(size_t(R * V), rng, 3.0f);
  logits[size_t(2 * V + 777)] = 40.0f;  // a clear winner in row 2
  logits[size_t(3 * V + 5)] = logits[size_t(3 * V + 9)] = 50.0f;  // a tie in row 3: the lower index
  // Row 1 far from zero: exp overflows unless taken from the row's own maximum.
  for (int64_t j = 0; j < V; ++j) logits[size_t(V + j)] += 100.0f;
  const Tensor d = on_gpu(logits, {R, V});
  const std::vector<int32_t> best = cuda::argmax_rows(d);
  for (int64_t r = 0; r < R; ++r) {
    const float* row = logits.data() + r * V;
    BOOST_TEST(best[size_t(r)] == int32_t(std::max_element(row, row + V) - row));
  }
  // top_k = 1 is argmax whatever the draw; top_k = 4 with top_p = 1 picks by the running sum of the four.
  const std::vector<float> temperature(size_t(R), 0.7f), top_p(size_t(R), 1.0f), uniform = {0.1f, 0.5f, 0.9f, 0.99f};
  const std::vector<int32_t> one(size_t(R), 1), four(size_t(R), 4), all(size_t(R), 0);
  BOOST_TEST(cuda::sample_rows(d, temperature, one, top_p, uniform) == best, boost::test_tools::per_element());
  const std::vector<int32_t> picked = cuda::sample_rows(d, temperature, four, top_p, uniform);
  const std::vector<int32_t> whole = cuda::sample_rows(d, temperature, all, top_p, uniform);
  for (int64_t r = 0; r < R; ++r) {
    const float* row = logits.data() + r * V;
    std::vector<int32_t> order(static_cast<size_t>(V));
    for (int32_t i = 0; i < int32_t(V); ++i) order[size_t(i)] = i;
    std::partial_sort(order.begin(), order.begin() + 4, order.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    double total = 0, run = 0;
    for (int j = 0; j < 4; ++j) total += std::exp((row[order[size_t(j)]] - row[order[0]]) / 0.7);
    int32_t want = order[3];
    for (int j = 0; j < 4; ++j) {
      run += std::exp((row[order[size_t(j)]] - row[order[0]]) / 0.7);
      if (run > uniform[size_t(r)] * total) {
        want = order[size_t(j)];
        break;
      }
    }
    BOOST_TEST(picked[size_t(r)] == want, "row " << r);
    // The whole vocabulary: a token whose slice of the running softmax holds the draw (to float32's
    // rounding of a 150k-term sum).
    const float top = *std::max_element(row, row + V);
    double sum = 0, before = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp((row[j] - top) / 0.7);
    for (int64_t j = 0; j < whole[size_t(r)]; ++j) before += std::exp((row[j] - top) / 0.7);
    const double after = before + std::exp((row[whole[size_t(r)]] - top) / 0.7), target = uniform[size_t(r)] * sum;
    BOOST_TEST((before <= target * (1 + 1e-4) && after >= target * (1 - 1e-4)), "row " << r << ": token " << whole[size_t(r)]);
  }
}

// Top-k's later rounds and top-p's cut: four close candidates planted in the slices of four different
// warps, and each row's draw aimed at the middle of one candidate's share.
BOOST_AUTO_TEST_CASE(device_top_k_and_top_p_pick_each_candidate_by_its_share) {
  std::mt19937 rng(11);
  const int64_t R = 8, V = 50000;
  std::vector<float> logits = random_floats(size_t(R * V), rng, 1.0f);
  const int32_t at[4] = {40001, 12345, 1030, 999};  // threads 65, 57, 6, 999 of 1024: warps 2, 1, 0, 31
  const float planted[4] = {9.0f, 8.8f, 8.5f, 8.3f}, t = 0.8f;
  double w[4], total = 0;
  for (int c = 0; c < 4; ++c) {
    for (int64_t r = 0; r < R; ++r) logits[size_t(r * V + at[c])] = planted[c];
    w[c] = std::exp((planted[c] - planted[0]) / t);
    total += w[c];
  }
  // Rows 0-3: top_p 1, the draw in candidate r's share. Rows 4-7: top_p keeps the first two; draws in
  // the first's share, the second's, and past the end of both (the second).
  std::vector<float> top_p(size_t(R), 1.0f), uniform(static_cast<size_t>(R));
  std::vector<int32_t> want(static_cast<size_t>(R));
  double before = 0;
  for (int r = 0; r < 4; ++r) {
    uniform[size_t(r)] = float((before + w[r] / 2) / total);
    want[size_t(r)] = at[r];
    before += w[r];
  }
  const double kept = w[0] + w[1];
  for (int r = 4; r < 8; ++r) top_p[size_t(r)] = float(kept / total - 0.01);
  uniform[4] = float(w[0] / 2 / kept), want[4] = at[0];
  uniform[5] = float((w[0] + w[1] / 2) / kept), want[5] = at[1];
  uniform[6] = 0.999f, want[6] = at[1];
  uniform[7] = float((w[0] + w[1] * 0.9) / kept), want[7] = at[1];
  const std::vector<float> temperature(size_t(R), t);
  const std::vector<int32_t> four(size_t(R), 4);
  const std::vector<int32_t> got = cuda::sample_rows(on_gpu(logits, {R, V}), temperature, four, top_p, uniform);
  BOOST_TEST(got == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(memory_comes_back_to_the_cache) {
  const cuda::MemoryUse before = cuda::memory_use(kGpu);
  { Tensor t = cuda::empty(kGpu, DType::F32, {1 << 20}); }
  const cuda::MemoryUse after = cuda::memory_use(kGpu);
  BOOST_TEST(after.in_use == before.in_use);
  BOOST_TEST(after.cached >= size_t(4) << 20);
  Tensor again = cuda::empty(kGpu, DType::F32, {1 << 20});
  BOOST_TEST(cuda::memory_use(kGpu).cached == after.cached - (size_t(4) << 20));
}

BOOST_AUTO_TEST_SUITE_END()
