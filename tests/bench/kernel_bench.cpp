// One thread's matmul speed per weight dtype, with the weights in cache (hot: what the kernel computes,
// memory aside) and streamed from memory (cold), for M = 1 (decode), M = 2, 4, 5 and 8 (small decode
// batches), 16 and 32 (larger ones, where AMX's tiles begin to pay), M = 64 (a batch) and M = 512 against
// one thread's share of a 0.5B model's MLP rows (a prefill).
//   ftllm-kernel-bench [--kernels auto|avx512amx|avx512vnni|avx2|scalar] [--k K] [--m M] [DTYPE ...]
// --m M measures only M rows against the prefill's weight rows (for a profiler, or a quick A/B).
// Prints Gweights/s (weights x activation rows per second / 1e9): best of five runs, each ~0.1 s; first
// the processor's AVX2 fma rate in the same unit, the roofline of a float matmul on AVX2 registers.
#include <immintrin.h>

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

// Twelve independent chains of eight-lane fmas, `steps` each: enough chains to cover the latency on any
// AVX2 core, so they run at its issue rate.
__attribute__((target("avx2,fma"))) float fma_chains(int64_t steps) {
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3);
  __m256 a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7);
  __m256 a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  for (int64_t i = 0; i < steps; ++i) {
    a0 = _mm256_fmadd_ps(a0, m, c), a1 = _mm256_fmadd_ps(a1, m, c), a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c), a4 = _mm256_fmadd_ps(a4, m, c), a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c), a7 = _mm256_fmadd_ps(a7, m, c), a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c), a10 = _mm256_fmadd_ps(a10, m, c), a11 = _mm256_fmadd_ps(a11, m, c);
    // Each step's sums are in registers, as far as the compiler knows used: it can neither fold the
    // chains nor hoist the call out of the timing loop.
    asm volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9),
                 "+x"(a10), "+x"(a11));
  }
  const __m256 all = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                                 _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))),
                                   _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  return _mm256_cvtss_f32(all);
}

// One thread's fma lanes a second / 1e9 (each lane one weight times one row, as the matmul rates count).
double avx2_fma_peak() {
  constexpr int64_t kSteps = 1 << 20;
  float sink = 0;
  const double rate = best_rate(double(kSteps) * 12 * 8, [&] { sink += fma_chains(kSteps); });
  return sink == 12345.0f ? 0 : rate;  // the sums are used, so the chains are computed
}

}  // namespace

int main(int argc, char** argv) {
  std::string kernels = "auto";
  int64_t k_arg = 2048;  // rounded down to whole K-quant super-blocks
  int64_t only_m = 0;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--kernels" && i + 1 < argc) kernels = argv[++i];
    else if (a == "--k" && i + 1 < argc) k_arg = std::stoll(argv[++i]) / 256 * 256;
    else if (a == "--m" && i + 1 < argc) only_m = std::stoll(argv[++i]);
    else names.push_back(a);
  }
  if (names.empty()) names = {"f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "mxfp4", "q4_k", "q6_k", "int8", "int4g128", "fp8"};
  const cpu::Kernels& k = cpu::kernels_named(kernels);
  const int64_t K = k_arg;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    std::printf("AVX2 fma rate, one thread: %.2f Gweights/s (the roofline of a float matmul on AVX2 registers)\n", avx2_fma_peak());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(512 * K));
  for (float& v : x) v = normal(rng);
  std::printf("%s kernels, one thread, K = %lld; Gweights/s\n", k.name, (long long)K);
  if (only_m == 0)
    std::printf("%-10s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n",
              "dtype", "M=1 hot", "M=1 cold", "M=2 cold", "M=4 hot", "M=4 cold", "M=5 cold", "M=8 cold", "M=16 cold", "M=32 cold",
              "M=64 hot", "M=512");
  for (const std::string& name : names) {
    const std::optional<DType> parsed = parse_dtype(name);
    if (!parsed) return std::fprintf(stderr, "ftllm-kernel-bench: unknown dtype %s\n", name.c_str()), 2;
    const DType t = *parsed;
    // Hot: 256 rows (in L2 for 4-bit types); cold: 64 MB of rows, more than any cache here, and at least
    // the prefill's rows (one thread's share of a 0.5B model's MLP rows).
    const int64_t hot_rows = 256, prefill_rows = 2432;
    const int64_t cold_rows = std::max<int64_t>(prefill_rows, int64_t(64e6 / double(row_bytes(t, K))));
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
    if (only_m > 0) {
      std::printf("%-10s M=%lld: %.2f\n", name.c_str(), (long long)only_m, run(std::min<int64_t>(only_m, 512), prefill_rows));
      continue;
    }
    std::printf("%-10s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", name.c_str(), run(1, hot_rows),
                run(1, cold_rows), run(2, cold_rows), run(4, hot_rows), run(4, cold_rows), run(5, cold_rows), run(8, cold_rows),
                run(16, cold_rows), run(32, cold_rows), run(64, hot_rows), run(512, prefill_rows));
  }
  return 0;
}
