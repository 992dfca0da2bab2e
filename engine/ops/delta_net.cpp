// Gated DeltaNet on the host (ops.h): the causal convolution over channels, then the delta rule per
// (sequence, value head), each token after the last. The state of one head ([k_dim, v_dim] floats, 64 KiB
// at Qwen3-Next's 128 x 128) stays in the core's cache while a prompt streams through it, so the recurrent
// form costs a few percent of the layer's matmuls; the chunked form a GPU wants would change bits with the
// chunking.
#include <cmath>
#include <vector>

#include "../core/error.h"
#include "../cpu/thread_pool.h"
#include "ops.h"
#if defined(FTLLM_WITH_CUDA)
#include "../cuda/cuda_ops.h"
#endif

namespace ftllm::ops {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold

// Each sequence's tokens in the batch, in order.
std::vector<std::vector<int64_t>> tokens_by_sequence(const AttentionBatch& b) {
  std::vector<std::vector<int64_t>> by(b.state_slot.size());
  for (size_t t = 0; t < b.seq.size(); ++t) by[size_t(b.seq[t])].push_back(int64_t(t));
  return by;
}

}  // namespace

void gated_delta_net(Context& ctx, const Tensor& qkv, const Tensor& z, const Tensor& ba, const DeltaNet& n, const AttentionBatch& b,
                     Tensor& state, Tensor& out) {
  const int64_t T = qkv.dim(0), r = n.v_heads / n.k_heads, dk = n.k_dim, dv = n.v_dim, K = n.kernel;
  const int64_t keys = n.k_heads * dk, channels = 2 * keys + n.v_heads * dv;
  const int64_t window = channels * (K - 1), floats = window + n.v_heads * dk * dv;
  if (n.v_heads % n.k_heads || qkv.dim(1) != channels || z.dim(1) != n.v_heads * dv || ba.dim(1) != 2 * n.v_heads ||
      out.dim(1) != n.v_heads * dv || n.conv.numel() != channels * K || state.dim(1) != floats ||
      b.state_slot.size() != b.table_start.size())
    throw EngineError("gated_delta_net: shapes " + shape_string(qkv.shape) + ", " + shape_string(z.shape) + ", " +
                      shape_string(ba.shape) + " -> " + shape_string(out.shape) + " with state " + shape_string(state.shape) +
                      " do not fit");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&z, &ba, &n.conv, &n.a_log, &n.dt_bias, &n.norm, &state, &out})
    if (!(t->device == qkv.device))
      throw EngineError("gated_delta_net: operands on " + qkv.device.name() + " and " + t->device.name());
#if defined(FTLLM_WITH_CUDA)
  if (qkv.device.is_cuda())
    return cuda::gated_delta_net(qkv, z, ba, {&n.conv, &n.a_log, &n.dt_bias, &n.norm, n.k_heads, n.v_heads, dk, dv, K, n.eps}, b.pos,
                                 b.seq, b.state_slot, state, out);
#endif
  const std::vector<std::vector<int64_t>> seqs = tokens_by_sequence(b);
  auto slot = [&](size_t s) { return state.as<float>() + int64_t(b.state_slot[s]) * floats; };
  auto fresh = [&](size_t s) { return !seqs[s].empty() && b.pos[size_t(seqs[s][0])] == 0; };

  // The convolution: each channel's window holds its previous K - 1 inputs.
  Tensor mixed = Tensor::uninitialized(DType::F32, {T, channels});
  ctx.pool.parallel_for(channels, 64, [&](int64_t c0, int64_t c1) {
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (int64_t c = c0; c < c1; ++c) {
        float* win = slot(s) + c * (K - 1);
        if (fresh(s)) std::fill(win, win + K - 1, 0.0f);
        const float* w = n.conv.as<float>() + c * K;
        for (int64_t t : seqs[s]) {
          const float in = qkv.as<float>()[t * channels + c];
          float y = 0;
          for (int64_t m = 0; m < K - 1; ++m) y += w[m] * win[m];
          y += w[K - 1] * in;
          for (int64_t m = 0; m + 1 < K - 1; ++m) win[m] = win[m + 1];
          if (K > 1) win[K - 2] = in;
          mixed.as<float>()[t * channels + c] = silu(y);
        }
      }
    }
  });

  // The delta rule, one task per (sequence, value head).
  const int64_t tasks = int64_t(seqs.size()) * n.v_heads;
  ctx.pool.parallel_for(tasks, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), kv(static_cast<size_t>(dv)), o(static_cast<size_t>(dv));
    for (int64_t task = i0; task < i1; ++task) {
      const size_t s = size_t(task / n.v_heads);
      const int64_t vh = task % n.v_heads, kh = vh / r, j = vh % r;
      float* S = slot(s) + window + vh * dk * dv;
      if (fresh(s)) std::fill(S, S + dk * dv, 0.0f);
      const float a_scale = std::exp(n.a_log.as<float>()[vh]), bias = n.dt_bias.as<float>()[vh];
      for (int64_t t : seqs[s]) {
        const float* row = mixed.as<float>() + t * channels;
        auto unit = [&](const float* from, std::vector<float>& to, float scale) {  // L2-normalised, times scale
          float ss = 0;
          for (int64_t i = 0; i < dk; ++i) ss += from[i] * from[i];
          const float inv = scale / std::sqrt(ss + 1e-6f);
          for (int64_t i = 0; i < dk; ++i) to[size_t(i)] = from[i] * inv;
        };
        unit(row + kh * dk, q, 1.0f / std::sqrt(float(dk)));
        unit(row + keys + kh * dk, k, 1.0f);
        const float* v = row + 2 * keys + vh * dv;
        const float* g = ba.as<float>() + t * ba.dim(1) + kh * 2 * r;
        const float beta = 1.0f / (1.0f + std::exp(-g[j])), decay = std::exp(-a_scale * softplus(g[r + j] + bias));

        std::fill(kv.begin(), kv.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* Si = S + i * dv;
          const float ki = k[size_t(i)];
          for (int64_t c = 0; c < dv; ++c) {
            Si[c] *= decay;
            kv[size_t(c)] += Si[c] * ki;
          }
        }
        for (int64_t c = 0; c < dv; ++c) kv[size_t(c)] = (v[c] - kv[size_t(c)]) * beta;  // the delta
        std::fill(o.begin(), o.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* Si = S + i * dv;
          const float ki = k[size_t(i)], qi = q[size_t(i)];
          for (int64_t c = 0; c < dv; ++c) {
            Si[c] += ki * kv[size_t(c)];
            o[size_t(c)] += Si[c] * qi;
          }
        }
        // RMSNorm over the head, times the weight, times silu(z).
        float ss = 0;
        for (float y : o) ss += y * y;
        const float inv = 1.0f / std::sqrt(ss / float(dv) + n.eps);
        const float* gate = z.as<float>() + t * z.dim(1) + vh * dv;
        float* dst = out.as<float>() + t * out.dim(1) + vh * dv;
        for (int64_t c = 0; c < dv; ++c) dst[c] = n.norm.as<float>()[c] * (o[size_t(c)] * inv) * silu(gate[c]);
      }
    }
  });
}

}  // namespace ftllm::ops
