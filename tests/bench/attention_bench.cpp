// CPU attention alone (ops::paged_attention over a paged f16 cache), for one layer of a model's shape:
// decode of one token at a context of N keys (its cache in the CPU's caches, and uncached: another
// sequence's each call, as inside a model), a batch of 16 decoding sequences, and the last 512-token
// slice of an N-token prefill (the slice that sees the whole context; the cache is filled beforehand). Prints milliseconds per
// call and GFLOP/s (4 flops per query head, key and head value: the two dot products).
//   ftllm-attention-bench [-t THREADS] [--heads H --kv_heads K --head_dim D] [--kv_dtype f16|...] [--kernels K]
//                         [--only TEST] [N ...]
// --only runs one test (its name as printed, e.g. "decode 1 uncached"), for a profile of it alone.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "kvcache/kv_cache.h"
#include "ops/ops.h"

using namespace ftllm;

namespace {

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <typename Fn>
double best_seconds(Fn&& fn) {
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    int reps = 0;
    const double a = seconds();
    double b = a;
    while (b - a < 0.2 || reps < 2) {
      fn();
      ++reps;
      b = seconds();
    }
    best = std::min(best, (b - a) / reps);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int64_t heads = 14, kv_heads = 2, d = 64;
  std::string kv_dtype = "f16", kernels = "auto", only;
  std::vector<int64_t> contexts;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "-t") threads = std::stoi(value());
    else if (a == "--heads") heads = std::stoll(value());
    else if (a == "--kv_heads") kv_heads = std::stoll(value());
    else if (a == "--head_dim") d = std::stoll(value());
    else if (a == "--kv_dtype") kv_dtype = value();
    else if (a == "--kernels") kernels = value();
    else if (a == "--only") only = value();
    else contexts.push_back(std::stoll(a));
  }
  if (contexts.empty()) contexts = {512, 2048, 8192, 32768};
  const auto dtype = kvcache::parse_kv_dtype(kv_dtype);
  if (!dtype) return std::fprintf(stderr, "unknown kv dtype %s\n", kv_dtype.c_str()), 2;
  cpu::ThreadPool pool(threads);
  const cpu::Kernels* table = nullptr;
  try {
    table = &cpu::kernels_named(kernels);
  } catch (const std::exception& e) {
    return std::fprintf(stderr, "%s\n", e.what()), 2;
  }
  ops::Context ctx{pool, *table};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::printf("attention of one layer: %lld heads, %lld kv heads, d %lld, %s cache, %d threads, %s kernels\n", (long long)heads,
              (long long)kv_heads, (long long)d, kv_dtype.c_str(), threads, ctx.kernels.name);
  std::printf("%-10s %-22s %10s %10s\n", "context", "test", "ms", "GFLOP/s");
  for (int64_t n : contexts) {
    const int64_t B = 16, seqs = 16, row = kv_heads * d;
    kvcache::KvPool kvpool(1, kv_heads, d, B, seqs * ((n + B - 1) / B + 1), false, *dtype);
    ops::AttentionBatch all;
    std::vector<kvcache::SequenceKv> kv(static_cast<size_t>(seqs));
    for (int64_t s = 0; s < seqs; ++s) {
      if (!kv[size_t(s)].reserve(kvpool, n)) return std::fprintf(stderr, "no room\n"), 1;
      all.table_start.push_back(int32_t(all.block_table.size()));
      all.block_table.insert(all.block_table.end(), kv[size_t(s)].blocks.begin(), kv[size_t(s)].blocks.end());
    }
    const ops::KvLayer layer{kvpool.key(0, 0, 0), kvpool.value(0, 0, 0), kvpool.block_bytes(), kvpool.row_bytes(), *dtype, Device::cpu()};
    // Every slot of every sequence filled with random keys and values, 4096 rows at a time.
    for (int64_t s = 0; s < seqs; ++s)
      for (int64_t p0 = 0; p0 < n; p0 += 4096) {
        const int64_t m = std::min<int64_t>(4096, n - p0);
        std::vector<int64_t> pos;
        std::vector<int32_t> seq;
        std::vector<float> k(size_t(m * row)), v(size_t(m * row));
        for (float& x : k) x = normal(rng);
        for (float& x : v) x = normal(rng);
        for (int64_t p = p0; p < p0 + m; ++p) pos.push_back(p), seq.push_back(int32_t(s));
        ops::AttentionBatch fill;
        fill.block_table = all.block_table;
        fill.table_start = all.table_start;
        fill.pos = pos;
        fill.seq = seq;
        const Tensor vt = Tensor::copy_of(DType::F32, {m, row}, v.data());
        ops::store_kv(ctx, fill, Tensor::copy_of(DType::F32, {m, row}, k.data()), &vt, layer, B, d);
      }
    const ops::AttentionShape shape{heads, kv_heads, d, B, 0, 1.0f / std::sqrt(float(d))};
    // each_call_another: the one sequence's cache is another each call, as inside a model, where the
    // step's other layers push a layer's cache out of the CPU's caches.
    auto run = [&](const char* name, std::vector<int64_t> pos, std::vector<int32_t> seq, double keys, bool each_call_another = false) {
      if (!only.empty() && only != name) return;
      const int64_t T = int64_t(pos.size());
      std::vector<float> q(size_t(T * heads * d));
      for (float& x : q) x = normal(rng);
      const Tensor qt = Tensor::copy_of(DType::F32, {T, heads * d}, q.data());
      Tensor out = Tensor::zeros_f32({T, heads * d});
      ops::AttentionBatch b;
      b.block_table = all.block_table;
      b.table_start = all.table_start;
      b.pos = pos;
      b.seq = seq;
      const double s = best_seconds([&] {
        if (each_call_another) seq[0] = (seq[0] + 1) % int32_t(seqs);
        ops::paged_attention(ctx, qt, b, layer, shape, out);
      });
      std::printf("%-10lld %-22s %10.3f %10.1f\n", (long long)n, name, s * 1e3, keys * double(heads * d) * 4 / s / 1e9);
    };
    run("decode 1", {n - 1}, {0}, double(n));
    run("decode 1 uncached", {n - 1}, {0}, double(n), true);
    std::vector<int64_t> pos;
    std::vector<int32_t> seq;
    for (int64_t s = 0; s < seqs; ++s) pos.push_back(n - 1), seq.push_back(int32_t(s));
    run("decode x16", pos, seq, double(n * seqs));
    pos.clear();
    seq.clear();
    const int64_t slice = std::min<int64_t>(512, n);
    double keys = 0;
    for (int64_t p = n - slice; p < n; ++p) pos.push_back(p), seq.push_back(0), keys += double(p + 1);
    run("prefill slice 512", pos, seq, keys);
  }
  return 0;
}
