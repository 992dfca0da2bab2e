// Scalar reference kernels: the oracle every vectorised kernel is tested against. Plain loops, float
// accumulation in index order.
#include <cmath>

#include "kernels.h"

namespace ftllm::cpu {

namespace {

inline float load(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

void matmul(DType wt, const float* x, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1, float* y,
            int64_t ldy) {
  const size_t row_bytes = size_t(K) * dtype_size(wt);
  for (int64_t n = n0; n < n1; ++n) {
    const void* row = static_cast<const char*>(w) + size_t(n) * row_bytes;
    for (int64_t m = 0; m < M; ++m) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += x[m * K + k] * load(wt, row, k);
      y[m * ldy + n] = acc;
    }
  }
}

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  float scale = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void to_f32(DType t, const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load(t, src, i);
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{"scalar", matmul, dot, axpy, rmsnorm, silu_mul, to_f32};
  return k;
}

}  // namespace ftllm::cpu
