// One thread's matmul speed per weight dtype, with the weights in cache (hot: what the kernel computes,
// memory aside) and streamed from memory (cold), for M = 1 (decode), M = 2, 4, 5 and 8 (small decode
// batches), 16 and 32 (larger ones, where AMX's tiles begin to pay), M = 64 (a batch) and M = 512 against
// one thread's share of a 0.5B model's MLP rows (a prefill).
//   ftllm-kernel-bench [--kernels auto|avx512amx|avx512vnni|avx2|scalar] [--k K] [DTYPE ...]
// Prints Gweights/s (weights x activation rows per second / 1e9): best of five runs, each ~0.1 s.
#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "cpu/kernels.h"
#include "quant/quant.h"

using namespace ftllm;

namespace {

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Best rate over five runs of `fn` repeated for about 0.1 s each; fn does `work` weight-rows of work.
template <typename Fn>
double best_rate(double work, Fn&& fn) {
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    int reps = 0;
    const double t0 = seconds();
    double t = t0;
    while (t - t0 < 0.1) fn(), ++reps, t = seconds();
    best = std::max(best, work * reps / (t - t0));
  }
  return best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string kernels = "auto";
  int64_t k_arg = 2048;  // rounded down to whole K-quant super-blocks
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--kernels" && i + 1 < argc) kernels = argv[++i];
    else if (a == "--k" && i + 1 < argc) k_arg = std::stoll(argv[++i]) / 256 * 256;
    else names.push_back(a);
  }
  if (names.empty()) names = {"f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "mxfp4", "q4_k", "q6_k", "int8", "int4g128", "fp8"};
  const cpu::Kernels& k = cpu::kernels_named(kernels);
  const int64_t K = k_arg;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(512 * K));
  for (float& v : x) v = normal(rng);
  std::printf("%s kernels, one thread, K = %lld; Gweights/s\n%-10s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", k.name, (long long)K,
              "dtype", "M=1 hot", "M=1 cold", "M=2 cold", "M=4 hot", "M=4 cold", "M=5 cold", "M=8 cold", "M=16 cold", "M=32 cold",
              "M=64 hot", "M=512");
  for (const std::string& name : names) {
    const std::optional<DType> parsed = parse_dtype(name);
    if (!parsed) return std::fprintf(stderr, "ftllm-kernel-bench: unknown dtype %s\n", name.c_str()), 2;
    const DType t = *parsed;
    // Hot: 256 rows (in L2 for 4-bit types); cold: 64 MB of rows, more than any cache here.
    const int64_t hot_rows = 256, cold_rows = std::max<int64_t>(256, int64_t(64e6 / double(row_bytes(t, K))));
    Tensor w = Tensor::zeros(t, {cold_rows, K});
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t r = 0; r < cold_rows; ++r) {
      for (float& v : row) v = normal(rng) * 0.05f;
      if (quant::can_quantize_to(t))
        quant::quantize_row(t, row.data(), K, static_cast<uint8_t*>(w.data) + size_t(r) * row_bytes(t, K));
      else  // ggml blocks: any bytes are valid weights; keep the float16 scales finite
        for (size_t i = 0; i < row_bytes(t, K); ++i) static_cast<uint8_t*>(w.data)[size_t(r) * row_bytes(t, K) + i] = uint8_t(rng() & 0x3b);
    }
    std::vector<cpu::Q8Block> xq(static_cast<size_t>(512 * K / 32));
    for (int64_t m = 0; m < 512; ++m) cpu::quantize_activations(k, t, x.data() + m * K, K, xq.data() + m * (K / 32));
    std::vector<float> y(static_cast<size_t>(512 * cold_rows));
    auto run = [&](int64_t M, int64_t rows) {
      return best_rate(double(M * rows * K), [&] { k.matmul(t, x.data(), xq.data(), M, K, w.data, 0, rows, y.data(), cold_rows); });
    };
    std::printf("%-10s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", name.c_str(), run(1, hot_rows),
                run(1, cold_rows), run(2, cold_rows), run(4, hot_rows), run(4, cold_rows), run(5, cold_rows), run(8, cold_rows),
                run(16, cold_rows), run(32, cold_rows), run(64, hot_rows), run(512, 2432));
  }
  return 0;
}
