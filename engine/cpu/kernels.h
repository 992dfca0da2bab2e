// The CPU kernel table. Every entry has a scalar reference (the oracle) and, where the processor
// allows, a vectorised twin checked against it. Kernels are single-threaded; ops/ spreads them
// over the thread pool.
#pragma once

#include <cstdint>

#include "../core/dtype.h"

namespace ftllm::cpu {

struct Kernels {
  const char* name;
  // y[m * ldy + n] = sum_k x[m * K + k] * w[n * K + k] for m in [0, M), n in [n0, n1).
  // w is row-major [N, K] in dtype wt (a Linear layer's weight as Hugging Face stores it).
  void (*matmul)(DType wt, const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
                 int64_t ldy);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a * x
  // out = x / sqrt(mean(x^2) + eps) * w
  void (*rmsnorm)(const float* x, const float* w, int64_t n, float eps, float* out);
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);  // silu(gate) * up
  void (*to_f32)(DType t, const void* src, float* dst, int64_t n);
};

const Kernels& scalar_kernels();
// nullptr when this processor lacks AVX2, FMA or F16C.
const Kernels* avx2_kernels();
// The fastest table this processor runs; chosen once from cpuid.
const Kernels& best_kernels();

}  // namespace ftllm::cpu
