// Paged attention on the device: the cache in blocks of block_tokens rows, each sequence's blocks listed
// in the step's block table. One thread block per (token, head, split of its keys): scores for 64 keys
// at a time (a warp per key, lanes across the head), an online softmax, and the weighted values summed
// with the output held in registers. A token with many keys splits them over several blocks whose
// partial softmaxes a second kernel merges (flash-decoding), by a rule of its own key count alone
// (attention_plan.h): a token's result never depends on what else the step holds.
#include <algorithm>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention_plan.h"
#include "cuda_ops.h"
#include "device_state.h"
#include "reduce.cuh"

namespace ftllm::cuda {

struct AttentionIndex {
  Device device;
  int64_t tokens = 0, longest = 0;  // the most keys any token sees
  DeviceArray<int32_t> all;         // pos, seq, block_table, table_start, one after another: one upload
  const int32_t *pos, *seq, *block_table, *table_start;
};

std::shared_ptr<AttentionIndex> make_attention_index(Device device, std::span<const int64_t> pos,
                                                     std::span<const int32_t> seq,
                                                     std::span<const int32_t> block_table,
                                                     std::span<const int32_t> table_start) {
  auto ix = std::make_shared<AttentionIndex>();
  ix->device = device;
  ix->tokens = int64_t(pos.size());
  std::vector<int32_t> all;
  all.reserve(pos.size() + seq.size() + block_table.size() + table_start.size() + 1);
  for (int64_t p : pos) {
    all.push_back(int32_t(p));
    ix->longest = std::max(ix->longest, p + 1);
  }
  all.insert(all.end(), seq.begin(), seq.end());
  all.insert(all.end(), block_table.begin(), block_table.end());
  all.insert(all.end(), table_start.begin(), table_start.end());
  all.push_back(0);  // never empty, so every pointer below is legal
  ix->all = upload(device, all);
  ix->pos = ix->all.ptr;
  ix->seq = ix->pos + pos.size();
  ix->block_table = ix->seq + seq.size();
  ix->table_start = ix->block_table + block_table.size();
  return ix;
}

namespace {

constexpr int kThreads = 128, kChunk = 64, kMaxValuePerThread = 8;

__device__ __forceinline__ const uint8_t* cache_row(const uint8_t* base, const int32_t* table, int64_t block_bytes,
                                                    int64_t row_bytes, int block_tokens, int p) {
  return base + int64_t(table[p / block_tokens]) * block_bytes + int64_t(p % block_tokens) * row_bytes;
}

// partial: [T * heads, splits, value_dim + 2] (sum of weighted values, running max, running sum) when
// splits > 1; else the normalised output goes straight to out. The cache holds heads of type T.
template <kvcache::KvDtype T>
__global__ void attention_kernel(const float* __restrict__ q, const int32_t* __restrict__ pos,
                                 const int32_t* __restrict__ seq, const int32_t* __restrict__ block_table,
                                 const int32_t* __restrict__ table_start, const uint8_t* __restrict__ keys,
                                 const uint8_t* __restrict__ values, int64_t block_bytes, int64_t row_bytes, int heads,
                                 int kv_heads, int head_dim, int value_dim, int block_tokens, int window, float scale,
                                 float softcap, const float* __restrict__ sinks, int splits, float* __restrict__ out,
                                 float* __restrict__ partial) {
  extern __shared__ float shared[];
  float* qs = shared;                // head_dim
  float* sc = shared + head_dim;     // kChunk scores, then their exponentials
  const int th = blockIdx.x, split = blockIdx.y;
  const int t = th / heads, h = th % heads, kvh = h / (heads / kv_heads);
  const int last = pos[t], first = window > 0 ? max(0, last - window + 1) : 0, n = last - first + 1;
  const int chunk = int(attention_split_keys(n));  // this token's splits; the step's other splits stay empty
  const int begin = first + split * chunk, end = min(last + 1, begin + chunk);
  const int32_t* table = block_table + table_start[seq[t]];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t head_bytes = kvcache::kv_head_bytes(T, head_dim);

  for (int i = threadIdx.x; i < head_dim; i += kThreads) qs[i] = q[(int64_t(t) * heads + h) * head_dim + i];
  __syncthreads();

  float acc[kMaxValuePerThread];
#pragma unroll
  for (int i = 0; i < kMaxValuePerThread; ++i) acc[i] = 0.0f;
  float running_max = -INFINITY, running_sum = 0.0f;

  for (int c0 = begin; c0 < end; c0 += kChunk) {
    const int count = min(kChunk, end - c0);
    for (int j = warp; j < count; j += kThreads / 32) {
      const uint8_t* k = cache_row(keys, table, block_bytes, row_bytes, block_tokens, c0 + j) + kvh * head_bytes;
      float s = 0.0f;
      for (int i = lane; i < head_dim; i += 32) s += qs[i] * kvcache::kv_value(T, k, i);
      s = warp_sum(s);
      if (lane == 0) sc[j] = softcap > 0.0f ? softcap * tanhf(s * scale / softcap) : s * scale;
    }
    __syncthreads();
    float chunk_max = -INFINITY;
    for (int j = 0; j < count; ++j) chunk_max = fmaxf(chunk_max, sc[j]);
    const float new_max = fmaxf(running_max, chunk_max);
    const float correction = expf(running_max - new_max);  // 0 on the first chunk
    __syncthreads();
    if (int(threadIdx.x) < count) sc[threadIdx.x] = expf(sc[threadIdx.x] - new_max);
    __syncthreads();
    float chunk_sum = 0.0f;
    for (int j = 0; j < count; ++j) chunk_sum += sc[j];
    running_sum = running_sum * correction + chunk_sum;
    running_max = new_max;
#pragma unroll
    for (int i = 0; i < kMaxValuePerThread; ++i) acc[i] *= correction;
    for (int j = 0; j < count; ++j) {
      const uint8_t* v = cache_row(values, table, block_bytes, row_bytes, block_tokens, c0 + j) + kvh * head_bytes;
      const float p = sc[j];
#pragma unroll
      for (int i = 0; i < kMaxValuePerThread; ++i) {
        const int d = threadIdx.x + i * kThreads;
        if (d < value_dim) acc[i] += p * kvcache::kv_value(T, v, d);
      }
    }
    __syncthreads();  // sc is rewritten by the next chunk
  }

  if (splits == 1) {
    // A division, as the merge does: a one-split token gets the same bits either way (the merge's
    // rescaling of its one split is by expf(0) = 1).
    float* o = out + (int64_t(t) * heads + h) * value_dim;
    float scale = 1.0f;
    if (sinks) {  // the head's sink joins the sum, both rescaled to the larger maximum
      const float top = fmaxf(running_max, sinks[h]);
      scale = expf(running_max - top);
      running_sum = running_sum * scale + expf(sinks[h] - top);
    }
#pragma unroll
    for (int i = 0; i < kMaxValuePerThread; ++i) {
      const int d = threadIdx.x + i * kThreads;
      if (d < value_dim) o[d] = sinks ? acc[i] * scale / running_sum : acc[i] / running_sum;
    }
    return;
  }
  float* part = partial + (int64_t(th) * splits + split) * (value_dim + 2);
#pragma unroll
  for (int i = 0; i < kMaxValuePerThread; ++i) {
    const int d = threadIdx.x + i * kThreads;
    if (d < value_dim) part[d] = acc[i];
  }
  if (threadIdx.x == 0) {
    part[value_dim] = running_max;
    part[value_dim + 1] = running_sum;
  }
}

// One block per (token, head): the splits' partial softmaxes rescaled to the largest maximum and summed.
__global__ void merge_kernel(const float* __restrict__ partial, int splits, int value_dim, const float* __restrict__ sinks,
                             int heads, float* __restrict__ out) {
  const float* part = partial + int64_t(blockIdx.x) * splits * (value_dim + 2);
  float top = -INFINITY;
  for (int s = 0; s < splits; ++s) top = fmaxf(top, part[s * (value_dim + 2) + value_dim]);
  const float sink = sinks ? sinks[blockIdx.x % heads] : -INFINITY;
  top = fmaxf(top, sink);
  float total = sinks ? expf(sink - top) : 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float m = part[s * (value_dim + 2) + value_dim];
    total += m == -INFINITY ? 0.0f : part[s * (value_dim + 2) + value_dim + 1] * expf(m - top);
  }
  for (int d = threadIdx.x; d < value_dim; d += blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float m = part[s * (value_dim + 2) + value_dim];
      if (m != -INFINITY) v += part[s * (value_dim + 2) + d] * expf(m - top);
    }
    out[int64_t(blockIdx.x) * value_dim + d] = v / total;
  }
}

// One thread per (token, head): the head's row of d floats into its cache slot as T (kv_format.h's
// rules, as kv_store_head does on the host).
template <kvcache::KvDtype T>
__global__ void store_kv_kernel(const float* __restrict__ k, const float* __restrict__ v, const int32_t* __restrict__ pos,
                                const int32_t* __restrict__ seq, const int32_t* __restrict__ block_table,
                                const int32_t* __restrict__ table_start, int64_t T_tokens, int64_t heads, int64_t d,
                                uint8_t* keys, uint8_t* values, int64_t block_bytes, int64_t row_bytes, int block_tokens) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= T_tokens * heads) return;
  const int64_t t = i / heads, h = i % heads, head_bytes = kvcache::kv_head_bytes(T, d);
  const int p = pos[t];
  const int64_t at = int64_t(block_table[table_start[seq[t]] + p / block_tokens]) * block_bytes +
                     int64_t(p % block_tokens) * row_bytes + h * head_bytes;
  for (int kind = 0; kind < (v ? 2 : 1); ++kind) {
    const float* x = (kind ? v : k) + (t * heads + h) * d;
    uint8_t* out = (kind ? values : keys) + at;
    if (T == kvcache::KvDtype::F32) {
      for (int64_t j = 0; j < d; ++j) reinterpret_cast<float*>(out)[j] = x[j];
    } else if (T == kvcache::KvDtype::F16) {
      for (int64_t j = 0; j < d; ++j) reinterpret_cast<__half*>(out)[j] = __float2half_rn(x[j]);
    } else if (T == kvcache::KvDtype::BF16) {
      for (int64_t j = 0; j < d; ++j) reinterpret_cast<__nv_bfloat16*>(out)[j] = __float2bfloat16_rn(x[j]);
    } else if (T == kvcache::KvDtype::Q8_0) {
      for (int64_t b = 0; b < d / 32; ++b) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        const float scale = amax / 127.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
        uint8_t* block = out + b * 34;
        *reinterpret_cast<__half*>(block) = __float2half_rn(scale);
        for (int j = 0; j < 32; ++j) block[2 + j] = uint8_t(int8_t(roundf(x[b * 32 + j] * inverse)));
      }
    } else {  // FP8
      float amax = 0.0f;
      for (int64_t j = 0; j < d; ++j) amax = fmaxf(amax, fabsf(x[j]));
      const float scale = amax / 448.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
      *reinterpret_cast<float*>(out) = scale;
      for (int64_t j = 0; j < d; ++j) out[4 + j] = quant::decode::encode_e4m3(x[j] * inverse);
    }
  }
}

// Calls f with the cache's type as a template argument.
template <typename F>
void with_kv_dtype(kvcache::KvDtype t, F&& f) {
  using D = kvcache::KvDtype;
  switch (t) {
    case D::F32: return f(std::integral_constant<D, D::F32>());
    case D::F16: return f(std::integral_constant<D, D::F16>());
    case D::BF16: return f(std::integral_constant<D, D::BF16>());
    case D::Q8_0: return f(std::integral_constant<D, D::Q8_0>());
    case D::FP8: return f(std::integral_constant<D, D::FP8>());
  }
}

}  // namespace

void store_kv(const AttentionIndex& ix, const Tensor& k, const Tensor* v, const KvLayer& kv, int64_t block_tokens,
              int64_t head_dim) {
  DeviceState& s = state(k.device);
  if (ix.tokens == 0) return;
  const int64_t heads = k.dim(1) / head_dim, n = ix.tokens * heads;
  with_kv_dtype(kv.dtype, [&](auto t) {
    constexpr kvcache::KvDtype kType = decltype(t)::value;
    store_kv_kernel<kType><<<unsigned((n + 127) / 128), 128, 0, s.stream>>>(
        k.as<float>(), v ? v->as<float>() : nullptr, ix.pos, ix.seq, ix.block_table, ix.table_start, ix.tokens, heads,
        head_dim, kv.keys, kv.values, kv.block_bytes, kv.row_bytes, int(block_tokens));
  });
  check_launch("store_kv", s.index);
}

void paged_attention(const AttentionIndex& ix, const Tensor& q, const KvLayer& kv, const AttentionParams& p, Tensor& out) {
  DeviceState& s = state(q.device);
  if (ix.tokens == 0) return;
  const int64_t vd = p.value_dim ? p.value_dim : p.head_dim;
  if (vd > int64_t(kThreads) * kMaxValuePerThread)
    throw EngineError("cuda attention: values of " + std::to_string(vd) + " floats per head (at most " +
                      std::to_string(kThreads * kMaxValuePerThread) + ")");
  const int64_t longest = p.window > 0 ? std::min<int64_t>(ix.longest, p.window) : ix.longest;
  const int splits = attention_splits(longest);
  const size_t shared = size_t(p.head_dim + kChunk) * sizeof(float);
  std::shared_ptr<void> partial;
  if (splits > 1) partial = device_bytes(s, size_t(ix.tokens * p.heads) * splits * size_t(vd + 2) * sizeof(float));
  const dim3 grid(unsigned(ix.tokens * p.heads), unsigned(splits));
  with_kv_dtype(kv.dtype, [&](auto t) {
    constexpr kvcache::KvDtype kType = decltype(t)::value;
    attention_kernel<kType><<<grid, kThreads, shared, s.stream>>>(
        q.as<float>(), ix.pos, ix.seq, ix.block_table, ix.table_start, kv.keys, kv.values, kv.block_bytes, kv.row_bytes,
        int(p.heads), int(p.kv_heads), int(p.head_dim), int(vd), int(p.block_tokens), int(p.window), p.scale, p.softcap, p.sinks, splits,
        out.as<float>(), static_cast<float*>(partial.get()));
  });
  check_launch("attention", s.index);
  if (splits > 1) {
    merge_kernel<<<unsigned(ix.tokens * p.heads), 128, 0, s.stream>>>(static_cast<const float*>(partial.get()), splits,
                                                                      int(vd), p.sinks, int(p.heads), out.as<float>());
    check_launch("attention merge", s.index);
  }
}

}  // namespace ftllm::cuda
