// The CUDA backend's host-side parts, on any machine: the block decoder its kernels use (compiled for
// the host here) against the reference dequantization, the caching allocator, the attention split plan
// and moving a layer's KV pages.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <random>
#include <vector>

#include "../common/random_weights.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "cuda/attention_plan.h"
#include "kvcache/kv_cache.h"
#include "quant/block_decode.h"
#include "quant/quant.h"

using namespace ftllm;

BOOST_AUTO_TEST_SUITE(cuda_backend_host_side)

// Every dtype, decoded 32 values at a time as the device does, gives the reference's bits.
BOOST_AUTO_TEST_CASE(block_decoder_equals_the_reference_dequantization) {
  std::mt19937 rng(11);
  for (DType t : kAllDTypes) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      const int64_t K = 1024, rows = 3;
      const std::vector<uint8_t> w = test::random_rows(t, rows, K, rng);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = w.data() + size_t(r) * row_bytes(t, K);
        std::vector<float> want(static_cast<size_t>(K)), got(static_cast<size_t>(K));
        quant::dequantize_row(t, row, want.data(), K);
        quant::decode::with_dtype(t, [&]<DType T>() {
          for (int64_t u = 0; u < K / 32; ++u) quant::decode::unit<T>(row, u, got.data() + u * 32);
        });
        for (int64_t i = 0; i < K; ++i)
          BOOST_REQUIRE_MESSAGE(float_bits(got[size_t(i)]) == float_bits(want[size_t(i)]) ||
                                    (std::isnan(got[size_t(i)]) && std::isnan(want[size_t(i)])),
                                "row " << r << " value " << i << ": " << got[size_t(i)] << " vs " << want[size_t(i)]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(caching_allocator_reuses_by_size_class_and_frees_its_cache_when_short) {
  BOOST_TEST(CachingAllocator::size_class(1) == 512u);
  BOOST_TEST(CachingAllocator::size_class(513) == 1024u);
  BOOST_TEST(CachingAllocator::size_class(size_t(3) << 20) == size_t(4) << 20);  // whole 2 MiB above 1 MiB
  BOOST_TEST(CachingAllocator::size_class((size_t(4) << 20) + 1) == size_t(6) << 20);

  // A raw allocator with a budget of 8 KiB, counting its calls.
  size_t budget = 8192, raw_allocs = 0, raw_frees = 0;
  std::vector<std::pair<void*, size_t>> live;
  CachingAllocator a(
      "test:0",
      [&](size_t n) -> void* {
        if (n > budget) return nullptr;
        budget -= n;
        ++raw_allocs;
        void* p = std::malloc(n);
        live.emplace_back(p, n);
        return p;
      },
      [&](void* p) {
        for (auto it = live.begin(); it != live.end(); ++it)
          if (it->first == p) {
            budget += it->second;
            live.erase(it);
            break;
          }
        ++raw_frees;
        std::free(p);
      });
  void* p = a.allocate(3000);  // 4096
  BOOST_TEST(a.bytes_in_use() == 4096u);
  a.free(p);
  BOOST_TEST(a.bytes_cached() == 4096u);
  void* q = a.allocate(4000);  // the same class: served from the cache
  BOOST_TEST(q == p);
  BOOST_TEST(raw_allocs == 1u);
  a.free(q);
  void* small = a.allocate(100);  // 512 more from the device
  BOOST_TEST(raw_allocs == 2u);
  // 8192 asked with 4096 cached and 512 in use: the cache goes back to the device and the request is
  // tried again, but 512 + 8192 is over the budget, so it fails with a message naming the device.
  try {
    a.allocate(8192);
    BOOST_FAIL("an allocation over the budget succeeded");
  } catch (const EngineError& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("out of memory on test:0") != std::string::npos, m);
    BOOST_TEST(m.find("--device") != std::string::npos, m);
  }
  BOOST_TEST(a.bytes_cached() == 0u);  // it tried once more with the cache returned
  BOOST_TEST(raw_frees == 1u);
  a.free(small);
  void* big = a.allocate(7000);  // 8192: fits once the cached 512 goes back
  BOOST_TEST(big != nullptr);
  a.free(big);
}

BOOST_AUTO_TEST_CASE(attention_splits_by_the_tokens_own_keys) {
  BOOST_TEST(cuda::attention_splits(0) == 1);
  BOOST_TEST(cuda::attention_splits(100) == 1);
  BOOST_TEST(cuda::attention_splits(1024) == 1);
  BOOST_TEST(cuda::attention_splits(1025) == 2);
  BOOST_TEST(cuda::attention_splits(8192) == 8);      // decode of 8k keys: 8 blocks per head
  BOOST_TEST(cuda::attention_splits(65536) == 64);
  BOOST_TEST(cuda::attention_splits(1 << 20) == 64);  // capped: splits of 16384 keys
  BOOST_TEST(cuda::attention_split_keys(1 << 20) == 16384);
  // Every split is whole chunks of 64 keys and the splits cover the keys.
  for (int64_t n : {1, 1000, 5000, 70000, 123457, 1 << 22}) {
    BOOST_TEST(cuda::attention_split_keys(n) % 64 == 0);
    BOOST_TEST(cuda::attention_splits(n) * cuda::attention_split_keys(n) >= n);
    BOOST_TEST(cuda::attention_splits(n) <= 64);
  }
}

// Rebalance moves a layer's pages as one tensor; a copy holds the same rows and the pool serves them.
BOOST_AUTO_TEST_CASE(kv_layer_storage_can_be_replaced_by_a_copy) {
  kvcache::KvPool pool(2, 2, 4, 16, 3);
  kvcache::SequenceKv s;
  BOOST_REQUIRE(s.reserve(pool, 20));
  float* k = reinterpret_cast<float*>(pool.key(1, s.block_of(17, 16), 1));
  for (int i = 0; i < 8; ++i) k[i] = float(i) + 0.5f;
  const Tensor& old = pool.layer_storage(1);
  BOOST_TEST(old.bytes() == pool.layer_bytes());
  Tensor copy = Tensor::copy_of(old.dtype, old.shape, old.data);
  pool.replace_layer(1, copy);
  const float* moved = reinterpret_cast<const float*>(pool.key(1, s.block_of(17, 16), 1));
  BOOST_TEST(moved != k);
  for (int i = 0; i < 8; ++i) BOOST_TEST(moved[i] == float(i) + 0.5f);
  BOOST_TEST(pool.value(1, 0, 0) == pool.key(1, 0, 0) + pool.num_blocks() * pool.block_bytes());
}

BOOST_AUTO_TEST_SUITE_END()
