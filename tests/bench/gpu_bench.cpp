// ftllm-gpu-bench: the CUDA backend's kernels against the device's limits. A program, not a test.
//
//   ftllm-gpu-bench [--device N]
//
// Prints: the device-to-device copy bandwidth (bytes read + written per second: the roofline decode is
// held to); each dtype's decode GEMV as weight bytes read per second and the fraction of that bandwidth;
// the prefill GEMM (bf16 and int4g128 weights, through our linear) in TFLOP/s next to a bare cuBLAS
// bf16 GEMM of the same shape, and their ratio.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda/cuda_ops.h"
#include "cuda/runtime.h"
#include "quant/quant.h"
#include "../common/random_weights.h"

using namespace ftllm;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Seconds per call of fn, the best of `repeat` after a warm-up.
// (cudaDeviceSynchronize: the bare cuBLAS and copy calls use the default stream, ours their own.)
template <typename F>
double time_best(int repeat, F&& fn) {
  fn();
  cudaDeviceSynchronize();
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const double a = now();
    fn();
    cudaDeviceSynchronize();
    best = std::min(best, now() - a);
  }
  return best;
}

// A weight matrix of type t: 64 random rows (as the kernel tests make them), repeated. Every byte is
// read by every call anyway, so repeating rows changes nothing but the time to make them.
Tensor random_weight(Device d, DType t, int64_t N, int64_t K) {
  std::mt19937 rng(1);
  const std::vector<uint8_t> rows = test::random_rows(t, 64, K, rng);
  Tensor w = Tensor::zeros(t, {N, K});
  const size_t rb = row_bytes(t, K);
  for (int64_t n = 0; n < N; ++n) std::memcpy(static_cast<char*>(w.data) + size_t(n) * rb, rows.data() + size_t(n % 64) * rb, rb);
  return cuda::to_device(w, d);
}

}  // namespace

int main(int argc, char** argv) {
  int index = 0;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--device" && i + 1 < argc) index = std::stoi(argv[++i]);
  const Device d = Device::cuda(index);
  try {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, index);
    std::printf("device cuda:%d %s, %d SMs, %.0f GiB\n", index, prop.name, prop.multiProcessorCount,
                double(prop.totalGlobalMem) / double(1 << 30));

    // Copy bandwidth: 2 GiB device to device.
    const size_t bytes = size_t(2) << 30;
    Tensor a = cuda::zeros(d, DType::F32, {int64_t(bytes / 4)}), b = cuda::zeros(d, DType::F32, {int64_t(bytes / 4)});
    const double copy_s = time_best(10, [&] { cudaMemcpyAsync(b.data, a.data, bytes, cudaMemcpyDeviceToDevice, nullptr); });
    const double bandwidth = 2.0 * double(bytes) / copy_s / 1e9;
    std::printf("copy bandwidth %.0f GB/s (read + written)\n", bandwidth);
    a = b = Tensor();

    // Decode GEMV: one activation row against an 8192 x 8192 weight (and 8 rows: a batch).
    std::printf("\n%-10s %12s %10s %12s %10s\n", "gemv", "GB/s (M=1)", "roofline", "GB/s (M=8)", "roofline");
    const int64_t N = 8192, K = 8192;
    for (DType t : {DType::BF16, DType::F16, DType::I8, DType::I4G128, DType::FP8, DType::Q8_0, DType::Q4_0, DType::Q4_K,
                    DType::Q6_K}) {
      Tensor w = random_weight(d, t, N, K);
      double rate[2];
      for (int i = 0; i < 2; ++i) {
        const int64_t M = i ? 8 : 1;
        Tensor x = cuda::zeros(d, DType::F32, {M, K}), y = cuda::zeros(d, DType::F32, {M, N});
        const double s = time_best(20, [&] { cuda::linear_gemv(x, w, nullptr, y); });
        rate[i] = double(w.bytes()) / s / 1e9;
      }
      std::printf("%-10s %12.0f %9.0f%% %12.0f %9.0f%%\n", std::string(dtype_name(t)).c_str(), rate[0], 100 * rate[0] / bandwidth,
                  rate[1], 100 * rate[1] / bandwidth);
    }

    // Prefill GEMM: ours (activations to bf16, weights as stored or decoded, cuBLAS, float32 out) against
    // a bare cuBLAS bf16 x bf16 -> bf16 GEMM.
    std::printf("\n%-26s %10s %10s %8s\n", "gemm M x N x K", "ours TF/s", "cuBLAS", "ratio");
    cublasHandle_t blas;
    cublasCreate(&blas);
    for (int64_t M : {512, 4096})
      for (DType t : {DType::BF16, DType::I4G128, DType::I8}) {
        Tensor w = random_weight(d, t, N, K);
        Tensor x = cuda::zeros(d, DType::F32, {M, K}), y = cuda::zeros(d, DType::F32, {M, N});
        const double ours = time_best(5, [&] { cuda::linear_gemm(x, w, nullptr, y); });
        Tensor wb = cuda::zeros(d, DType::BF16, {N, K}), xb = cuda::zeros(d, DType::BF16, {M, K}),
               yb = cuda::zeros(d, DType::BF16, {M, N});
        const float one = 1.0f, zero = 0.0f;
        const double bare = time_best(5, [&] {
          cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &one, wb.data, CUDA_R_16BF, int(K), xb.data,
                       CUDA_R_16BF, int(K), &zero, yb.data, CUDA_R_16BF, int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        });
        const double flops = 2.0 * double(M) * double(N) * double(K);
        char shape[64];
        std::snprintf(shape, sizeof shape, "%lld x %lld x %lld %s", (long long)M, (long long)N, (long long)K,
                      std::string(dtype_name(t)).c_str());
        std::printf("%-26s %10.1f %10.1f %8.2f\n", shape, flops / ours / 1e12, flops / bare / 1e12, bare / ours);
      }
    cublasDestroy(blas);
    std::printf("\nBANDWIDTH_GBPS=%.0f\n", bandwidth);
  } catch (const std::exception& e) {
    return std::fprintf(stderr, "ftllm-gpu-bench: %s\n", e.what()), 1;
  }
  return 0;
}
