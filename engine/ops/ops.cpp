#include "ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../core/error.h"
#include "../cpu/kernels.h"
#include "../cpu/thread_pool.h"

namespace ftllm::ops {

std::vector<cpu::Q8Block> quantized_rows(Context& ctx, DType wt, const float* x, int64_t rows, int64_t K) {
  std::vector<cpu::Q8Block> xq;
  if (!ctx.kernels.uses_q8(wt)) return xq;
  xq.resize(size_t(rows * (K / 32)));
  ctx.pool.parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) cpu::quantize_activations(ctx.kernels, wt, x + r * K, K, xq.data() + r * (K / 32));
  });
  return xq;
}

void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  const int64_t T = x.dim(0), K = x.dim(1), N = w.dim(0);
  if (w.dim(1) != K || y.dim(0) != T || y.dim(1) != N)
    throw EngineError("linear: shapes " + shape_string(x.shape) + " x " + shape_string(w.shape) + " -> " +
                      shape_string(y.shape) + " do not fit");
  const float* xs = x.as<float>();
  float* ys = y.as<float>();
  // Quantized weights dot int8 activations: quantize x once, row by row, before the matmul.
  const std::vector<cpu::Q8Block> xq = quantized_rows(ctx, w.dtype, xs, T, K);
  // Split the output features: each thread streams its own slice of the weight once (with --device numa,
  // a slice from its own node's share).
  ctx.pool.parallel_for_groups(N, 16, [&](int64_t n0, int64_t n1) {
    ctx.kernels.matmul(w.dtype, xs, xq.data(), T, K, w.data, n0, n1, ys, N);
    if (bias)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t n = n0; n < n1; ++n) ys[t * N + n] += bias->as<float>()[n];
  });
}

void rmsnorm(Context& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  const int64_t d = w.numel(), rows = x.numel() / d;
  const float* xs = x.as<float>();
  float* os = out.as<float>();
  ctx.pool.parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) ctx.kernels.rmsnorm(xs + r * d, w.as<float>(), d, eps, os + r * d);
  });
}

void embedding(Context& ctx, const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  const int64_t vocab = table.dim(0), d = table.dim(1);
  const size_t bytes = row_bytes(table.dtype, d);
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw EngineError("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  ctx.pool.parallel_for(int64_t(ids.size()), 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      ctx.kernels.to_f32(table.dtype, static_cast<const char*>(table.data) + size_t(ids[size_t(t)]) * bytes,
                         out.as<float>() + t * d, d);
  });
}

void silu_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  const int64_t n = gate.numel();
  ctx.pool.parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    ctx.kernels.silu_mul(gate.as<float>() + i0, up.as<float>() + i0, out.as<float>() + i0, i1 - i0);
  });
}

void add(Context& ctx, Tensor& x, const Tensor& y) {
  const int64_t n = x.numel();
  ctx.pool.parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    ctx.kernels.axpy(1.0f, y.as<float>() + i0, x.as<float>() + i0, i1 - i0);
  });
}

void rope(Context&, Tensor& x, int64_t heads, const Tensor& cos, const Tensor& sin) {
  const int64_t T = x.dim(0), half = cos.dim(1), d = half * 2;
  for (int64_t t = 0; t < T; ++t) {
    const float* c = cos.as<float>() + t * half;
    const float* s = sin.as<float>() + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.as<float>() + (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void paged_attention(Context& ctx, const Tensor& q, std::span<const int64_t> pos, std::span<const int32_t> seq,
                     std::span<const KvBlocks> kv, const AttentionShape& sh, Tensor& out) {
  const int64_t T = q.dim(0), d = sh.head_dim, group = sh.heads / sh.kv_heads, row = sh.kv_heads * d;
  const int64_t vd = sh.value_dim ? sh.value_dim : d;
  const auto& k = ctx.kernels;
  ctx.pool.parallel_for(T * sh.heads, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    std::vector<const float*> keys, values;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / sh.heads, h = i % sh.heads, kvh = h / group;
      const KvBlocks& cache = kv[size_t(seq[size_t(t)])];
      const int64_t last = pos[size_t(t)];
      const int64_t first = sh.window > 0 ? std::max<int64_t>(0, last - sh.window + 1) : 0;
      const int64_t n = last - first + 1;
      const float* qv = q.as<float>() + (t * sh.heads + h) * d;
      scores.resize(size_t(n));
      keys.resize(size_t(n));
      values.resize(size_t(n));
      for (int64_t p = first; p <= last; ++p) {
        const int64_t at = (p % sh.block_tokens) * row + kvh * d;
        keys[size_t(p - first)] = cache.keys[size_t(p / sh.block_tokens)] + at;
        values[size_t(p - first)] = cache.values[size_t(p / sh.block_tokens)] + at;
      }
      k.scores(qv, keys.data(), n, d, sh.scale, scores.data());
      const float max_score = *std::max_element(scores.begin(), scores.end());
      float sum = 0;
      for (float& s : scores) sum += (s = std::exp(s - max_score));
      const float inv = 1.0f / sum;
      for (float& s : scores) s *= inv;
      k.weighted_sum(scores.data(), values.data(), n, vd, out.as<float>() + (t * sh.heads + h) * vd);
    }
  });
}

}  // namespace ftllm::ops
