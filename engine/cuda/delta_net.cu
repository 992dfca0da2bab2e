// Gated DeltaNet on the device (ops::gated_delta_net): a thread per channel runs the causal convolution
// along each sequence's tokens, then a block per (value head, sequence) runs the delta rule token after
// token, thread c owning column c of the head's state. The recurrent form, as on the host: the same
// arithmetic per token however a prompt is split into steps.
#include <vector>

#include "../core/error.h"
#include "cuda_ops.h"
#include "device_state.h"
#include "reduce.cuh"

namespace ftllm::cuda {

namespace {

struct Shape {
  int k_heads, v_heads, k_dim, v_dim, kernel;
  float eps;
};

// The step's sequences: tokens order[start[s] .. start[s + 1]) in position order, state row slot[s], and
// whether the sequence starts here (its first token at position 0: its state starts from zeros).
struct Sequences {
  const int* start;
  const int* slot;
  const int* fresh;
  const int* order;
};

__device__ float silu(float x) { return x / (1.0f + expf(-x)); }

// Thread per channel (all q heads, all k heads, all v heads), along one sequence's tokens.
__global__ void conv_kernel(const float* __restrict__ qkv, const float* __restrict__ conv, Shape n, Sequences q,
                            float* state, int64_t state_floats, float* mixed) {
  const int channels = 2 * n.k_heads * n.k_dim + n.v_heads * n.v_dim, K = n.kernel, s = blockIdx.y;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  float* win = state + int64_t(q.slot[s]) * state_floats + int64_t(c) * (K - 1);
  if (q.fresh[s])
    for (int m = 0; m < K - 1; ++m) win[m] = 0.0f;
  const float* w = conv + int64_t(c) * K;
  for (int i = q.start[s]; i < q.start[s + 1]; ++i) {
    const int64_t t = q.order[i];
    const float in = qkv[t * channels + c];
    float y = 0;
    for (int m = 0; m < K - 1; ++m) y += w[m] * win[m];
    y += w[K - 1] * in;
    for (int m = 0; m + 1 < K - 1; ++m) win[m] = win[m + 1];
    if (K > 1) win[K - 2] = in;
    mixed[t * channels + c] = silu(y);
  }
}

// Block (value head, sequence); shared memory holds the token's q and k (2 k_dim floats).
__global__ void delta_kernel(const float* __restrict__ z, const float* __restrict__ ba, const float* __restrict__ mixed,
                             const float* __restrict__ a_log, const float* __restrict__ dt_bias, const float* __restrict__ norm,
                             Shape n, Sequences q, float* state, int64_t state_floats, float* out) {
  extern __shared__ float qk[];
  __shared__ float scratch[32];
  const int r = n.v_heads / n.k_heads, keys = n.k_heads * n.k_dim, channels = 2 * keys + n.v_heads * n.v_dim;
  const int dk = n.k_dim, dv = n.v_dim;
  const int vh = blockIdx.x, s = blockIdx.y, kh = vh / r, j = vh % r, c = threadIdx.x;
  float* S = state + int64_t(q.slot[s]) * state_floats + int64_t(channels) * (n.kernel - 1) + int64_t(vh) * dk * dv;
  if (q.fresh[s] && c < dv)
    for (int i = 0; i < dk; ++i) S[int64_t(i) * dv + c] = 0.0f;
  const float a_scale = expf(a_log[vh]), bias = dt_bias[vh];
  for (int at = q.start[s]; at < q.start[s + 1]; ++at) {
    const int64_t t = q.order[at];
    const float* row = mixed + t * channels;
    float sq = 0, sk = 0;
    for (int i = c; i < dk; i += blockDim.x) {
      const float qi = row[kh * dk + i], ki = row[keys + kh * dk + i];
      qk[i] = qi;
      qk[dk + i] = ki;
      sq += qi * qi;
      sk += ki * ki;
    }
    sq = block_sum(sq, scratch);  // synchronises: qk is written
    sk = block_sum(sk, scratch);
    const float q_scale = 1.0f / sqrtf(float(dk)) / sqrtf(sq + 1e-6f), k_scale = 1.0f / sqrtf(sk + 1e-6f);
    const float* g = ba + t * 2 * n.v_heads + kh * 2 * r;
    const float beta = 1.0f / (1.0f + expf(-g[j]));
    const float x = g[r + j] + bias, decay = expf(-a_scale * (x > 20.0f ? x : log1pf(expf(x))));
    float o = 0;
    if (c < dv) {
      float kv = 0;
      for (int i = 0; i < dk; ++i) {
        const float v = S[int64_t(i) * dv + c] * decay;
        S[int64_t(i) * dv + c] = v;
        kv += v * (qk[dk + i] * k_scale);
      }
      const float delta = (row[2 * keys + vh * dv + c] - kv) * beta;
      for (int i = 0; i < dk; ++i) {
        const float v = S[int64_t(i) * dv + c] + (qk[dk + i] * k_scale) * delta;
        S[int64_t(i) * dv + c] = v;
        o += v * (qk[i] * q_scale);
      }
    }
    const float ss = block_sum(c < dv ? o * o : 0.0f, scratch);  // also: every thread is done with qk
    if (c < dv) {
      const float inv = 1.0f / sqrtf(ss / float(dv) + n.eps);
      const float gate = z[t * int64_t(n.v_heads) * dv + vh * dv + c];
      out[t * int64_t(n.v_heads) * dv + vh * dv + c] = norm[c] * (o * inv) * silu(gate);
    }
  }
}

}  // namespace

void gated_delta_net(const Tensor& qkv, const Tensor& z, const Tensor& ba, const DeltaNetParams& p, std::span<const int64_t> pos,
                     std::span<const int32_t> seq, std::span<const int32_t> slots, Tensor& rows, Tensor& out) {
  DeviceState& s = state(qkv.device);
  const int64_t T = qkv.dim(0), S = int64_t(slots.size());
  const int64_t channels = 2 * p.k_heads * p.k_dim + p.v_heads * p.v_dim;
  if (T == 0 || S == 0) return;
  if (p.v_dim > 1024 || p.k_dim > 4096)
    throw EngineError("gated_delta_net on CUDA takes value heads of at most 1024 and key heads of at most 4096 values");
  // One upload: [start (S + 1) | slot (S) | fresh (S) | order (T)].
  std::vector<int> table(size_t(3 * S + 1 + T));
  std::vector<std::vector<int>> by(static_cast<size_t>(S));
  const int32_t* seq_of = seq.data();
  for (int64_t t = 0; t < T; ++t) by[size_t(seq_of[t])].push_back(int(t));
  int at = 0;
  for (int64_t i = 0; i < S; ++i) {
    table[size_t(i)] = at;
    table[size_t(S + 1 + i)] = slots.data()[i];
    table[size_t(2 * S + 1 + i)] = !by[size_t(i)].empty() && pos.data()[by[size_t(i)][0]] == 0;
    for (int t : by[size_t(i)]) table[size_t(3 * S + 1 + at++)] = t;
  }
  table[size_t(S)] = at;
  DeviceArray<int> dev = upload(qkv.device, table);
  const Sequences q{dev.ptr, dev.ptr + S + 1, dev.ptr + 2 * S + 1, dev.ptr + 3 * S + 1};
  const Shape n{int(p.k_heads), int(p.v_heads), int(p.k_dim), int(p.v_dim), int(p.kernel), p.eps};
  std::shared_ptr<void> mixed = device_bytes(s, size_t(T * channels) * sizeof(float));
  const int64_t floats = rows.dim(1);
  conv_kernel<<<dim3(blocks_for(size_t(channels), 128), unsigned(S)), 128, 0, s.stream>>>(
      qkv.as<float>(), p.conv->as<float>(), n, q, rows.as<float>(), floats, static_cast<float*>(mixed.get()));
  check_launch("gated_delta_net conv", s.index);
  const unsigned threads = unsigned((p.v_dim + 31) / 32 * 32);
  delta_kernel<<<dim3(unsigned(p.v_heads), unsigned(S)), threads, size_t(2 * p.k_dim) * sizeof(float), s.stream>>>(
      z.as<float>(), ba.as<float>(), static_cast<const float*>(mixed.get()), p.a_log->as<float>(), p.dt_bias->as<float>(),
      p.norm->as<float>(), n, q, rows.as<float>(), floats, out.as<float>());
  check_launch("gated_delta_net", s.index);
}

}  // namespace ftllm::cuda
