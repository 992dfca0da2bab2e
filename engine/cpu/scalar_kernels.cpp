// Scalar reference kernels: the oracle every vectorised kernel is tested against. Plain loops, float
// accumulation in index order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"
#include "../quant/quant.h"

namespace ftllm::cpu {

namespace {

// Every weight row is widened to float32 by the reference dequantisation, then dotted in index order.
void matmul(DType wt, const float* x, const Q8Block*, int64_t M, int64_t K, const void* w, int64_t n0, int64_t n1,
            float* y, int64_t ldy) {
  const size_t bytes = row_bytes(wt, K);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = n0; n < n1; ++n) {
    quant::dequantize_row(wt, static_cast<const char*>(w) + size_t(n) * bytes, row.data(), K);
    for (int64_t m = 0; m < M; ++m) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += x[m * K + k] * row[size_t(k)];
      y[m * ldy + n] = acc;
    }
  }
}

bool uses_q8(DType) { return false; }

// Blocks of `group` values share a scale: 32 (q8_0 / q8_1 style, float16 d) or 256 (q8_K style, float32 d).
void quantize_blocks(const float* x, int64_t K, Q8Block* out, int64_t group) {
  for (int64_t b = 0; b < K / 32; ++b, x += 32) {
    Q8Block& o = out[b];
    float amax = 0;
    if (group == 32) {
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    } else {
      const float* first = x - (b % (group / 32)) * 32;
      for (int64_t j = 0; j < group; ++j) amax = std::max(amax, std::fabs(first[j]));
    }
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      o.q[j] = int8_t(std::nearbyint(x[j] * id));
      sum += o.q[j];
    }
    o.d = group == 32 ? f16_to_f32(f32_to_f16(d)) : d;
    o.sum = sum;
    o.ds = o.d * float(sum);
    o.s = f16_to_f32(f32_to_f16(d * float(sum)));
  }
}

void quantize_q8(const float* x, int64_t K, Q8Block* out) { quantize_blocks(x, K, out, 32); }
void quantize_q8_256(const float* x, int64_t K, Q8Block* out) { quantize_blocks(x, K, out, 256); }

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

// torch's gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(0.7978845608028654f * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void rescale_add(float* acc, float x, const float* b, float y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = std::fma(b[i], y, acc[i] * x);
}

void to_f32(DType t, const void* src, float* dst, int64_t n) { quant::dequantize_row(t, src, dst, n); }

// The cached rows read value by value, in the one order; the online softmax exactly as kernels.h
// states it.
void attend_block(const AttendBlock& b, const AttendRows& r) {
  std::vector<float> p(static_cast<size_t>(b.n));
  const int64_t per_head = r.nq / b.heads;
  for (int64_t i = 0; i < r.nq; ++i) {
    if (r.lo[i] >= r.hi[i]) continue;
    const int64_t at = i / per_head * b.head_stride;
    float top = -INFINITY;
    for (int64_t j = r.lo[i]; j < r.hi[i]; ++j) {
      float s = 0;
      for (int64_t x = 0; x < b.d; ++x) s += r.q[i][x] * kvcache::kv_value(b.dtype, b.keys[j] + at, x);
      p[size_t(j)] = s * b.scale;
      if (b.softcap) p[size_t(j)] = b.softcap * std::tanh(p[size_t(j)] / b.softcap);
      top = std::max(top, p[size_t(j)]);
    }
    const float m = std::max(r.m[i], top), alpha = r.m[i] == -INFINITY ? 0.0f : std::exp(r.m[i] - m);
    float* acc = r.acc + i * r.acc_stride;
    float sum = 0;
    for (int64_t x = 0; x < b.vd; ++x) acc[x] *= alpha;
    for (int64_t j = r.lo[i]; j < r.hi[i]; ++j) {
      const float e = std::exp(p[size_t(j)] - m);
      sum += e;
      for (int64_t x = 0; x < b.vd; ++x) acc[x] += e * kvcache::kv_value(b.dtype, b.values[j] + at, x);
    }
    r.l[i] = r.l[i] * alpha + sum;
    r.m[i] = m;
  }
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{"scalar", matmul, uses_q8, quantize_q8, quantize_q8_256, dot, axpy, rmsnorm, silu_mul, gelu_tanh_mul, to_f32, attend_block, rescale_add};
  return k;
}

}  // namespace ftllm::cpu
