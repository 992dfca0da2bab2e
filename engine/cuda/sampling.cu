// Choosing the next token on the device, so a step can hand back token ids instead of whole rows of
// logits: argmax, and temperature sampling restricted to the top k (at most kMaxTopK) and then top p.
#include <vector>

#include "cuda_ops.h"
#include "device_state.h"
#include "reduce.cuh"

namespace ftllm::cuda {

namespace {

constexpr int kThreads = 1024, kMaxTopK = 256;

// (value, index) maximum over the block, ties to the lower index; every thread gets the winner.
__device__ void block_argmax(float& v, int& i, float* sv, int* si) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = v, si[threadIdx.x / 32] = i;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < blockDim.x / 32 ? sv[threadIdx.x] : -INFINITY;
    i = threadIdx.x < blockDim.x / 32 ? si[threadIdx.x] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, i, o);
      if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
    }
    if (threadIdx.x == 0) sv[0] = v, si[0] = i;
  }
  __syncthreads();
  v = sv[0];
  i = si[0];
}

__global__ void argmax_kernel(const float* __restrict__ logits, int64_t V, int32_t* __restrict__ out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = logits + blockIdx.x * V;
  float v = -INFINITY;
  int best = 0x7fffffff;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    if (row[j] > v) v = row[j], best = int(j);  // ascending j per thread: the first maximum stays
  block_argmax(v, best, sv, si);
  if (threadIdx.x == 0) out[blockIdx.x] = best == 0x7fffffff ? 0 : best;
}

// One block per row. top_k > 0: the k best found one at a time (each round a block argmax over what is
// left), then the smallest prefix reaching top_p, then a draw from their renormalised softmax.
// top_k == 0 (and top_p == 1): a draw from the whole softmax by its running sum.
__global__ void sample_kernel(const float* __restrict__ logits, int64_t V, const float* __restrict__ temperature,
                              const int32_t* __restrict__ top_k, const float* __restrict__ top_p,
                              const float* __restrict__ uniform, int32_t* __restrict__ out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float cand_v[kMaxTopK];
  __shared__ int cand_i[kMaxTopK];
  __shared__ float scan[kThreads];
  const int r = blockIdx.x;
  const float* row = logits + int64_t(r) * V;
  const float inv_t = 1.0f / temperature[r];
  const int k = top_k[r];
  if (k > 0) {
    // Round c takes the best token ranked after round c - 1's, in (value descending, index ascending) order.
    float prev_v = INFINITY;
    int prev_i = -1;
    for (int c = 0; c < k; ++c) {
      float v = -INFINITY;
      int best = 0x7fffffff;
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        const float x = row[j];
        const bool after = x < prev_v || (x == prev_v && int(j) > prev_i);
        if (after && (x > v || (x == v && int(j) < best))) v = x, best = int(j);
      }
      block_argmax(v, best, sv, si);
      if (threadIdx.x == 0) cand_v[c] = v, cand_i[c] = best;
      prev_v = v;
      prev_i = best;
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const float top = cand_v[0] * inv_t;
      float total = 0;
      for (int c = 0; c < k; ++c) total += expf(cand_v[c] * inv_t - top);
      // Keep the smallest prefix whose probability reaches top_p (at least one token).
      int keep = k;
      float acc = 0;
      for (int c = 0; c < k; ++c) {
        acc += expf(cand_v[c] * inv_t - top) / total;
        if (acc >= top_p[r]) {
          keep = c + 1;
          break;
        }
      }
      float kept = 0;
      for (int c = 0; c < keep; ++c) kept += expf(cand_v[c] * inv_t - top);
      const float target = uniform[r] * kept;
      float run = 0;
      int chosen = cand_i[keep - 1];
      for (int c = 0; c < keep; ++c) {
        run += expf(cand_v[c] * inv_t - top);
        if (run > target) {
          chosen = cand_i[c];
          break;
        }
      }
      out[r] = chosen;
    }
    return;
  }
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, row[j] * inv_t);
  m = block_max(m, sv);
  float total = 0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) total += expf(row[j] * inv_t - m);
  total = block_sum(total, sv);
  const float target = uniform[r] * total;
  float before = 0;  // the sum of every tile so far
  for (int64_t base = 0; base < V; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    scan[threadIdx.x] = j < V ? expf(row[j] * inv_t - m) : 0.0f;
    __syncthreads();
    for (int o = 1; o < int(blockDim.x); o <<= 1) {  // inclusive Hillis-Steele scan of the tile
      const float add = int(threadIdx.x) >= o ? scan[threadIdx.x - o] : 0.0f;
      __syncthreads();
      scan[threadIdx.x] += add;
      __syncthreads();
    }
    const float lo = before + (threadIdx.x ? scan[threadIdx.x - 1] : 0.0f), hi = before + scan[threadIdx.x];
    if (j < V && lo <= target && target < hi) out[r] = int32_t(j);
    const float tile = scan[blockDim.x - 1];
    __syncthreads();
    if (before + tile > target) return;
    before += tile;
  }
  if (threadIdx.x == 0) {  // rounding left the target past the end: the last token with any weight
    int64_t j = V - 1;
    while (j > 0 && expf(row[j] * inv_t - m) == 0.0f) --j;
    out[r] = int32_t(j);
  }
}

}  // namespace

std::vector<int32_t> argmax_rows(const Tensor& logits) {
  DeviceState& s = state(logits.device);
  const int64_t R = logits.dim(0), V = logits.dim(1);
  std::vector<int32_t> ids(static_cast<size_t>(R));
  if (R == 0) return ids;
  std::shared_ptr<void> out = device_bytes(s, size_t(R) * 4);
  argmax_kernel<<<unsigned(R), kThreads, 0, s.stream>>>(logits.as<float>(), V, static_cast<int32_t*>(out.get()));
  check_launch("argmax", s.index);
  check(cudaMemcpyAsync(ids.data(), out.get(), size_t(R) * 4, cudaMemcpyDeviceToHost, s.stream), "argmax", s.index);
  check(cudaStreamSynchronize(s.stream), "argmax", s.index);
  return ids;
}

std::vector<int32_t> sample_rows(const Tensor& logits, std::span<const float> temperature, std::span<const int32_t> top_k,
                                 std::span<const float> top_p, std::span<const float> uniform) {
  DeviceState& s = state(logits.device);
  const int64_t R = logits.dim(0), V = logits.dim(1);
  for (int64_t r = 0; r < R; ++r) {
    if (top_k[size_t(r)] < 0 || top_k[size_t(r)] > kMaxTopK || top_k[size_t(r)] > V)
      throw EngineError("cuda sampling: top_k " + std::to_string(top_k[size_t(r)]) + " is outside 0.." +
                        std::to_string(std::min<int64_t>(kMaxTopK, V)) + "; sample on the host");
    if (top_k[size_t(r)] == 0 && top_p[size_t(r)] < 1.0f)
      throw EngineError("cuda sampling: top_p without top_k needs the whole vocabulary sorted; sample on the host");
    if (!(temperature[size_t(r)] > 0.0f)) throw EngineError("cuda sampling: temperature must be > 0 (use argmax_rows)");
  }
  std::vector<int32_t> ids(static_cast<size_t>(R));
  if (R == 0) return ids;
  DeviceArray<float> t = upload(logits.device, temperature), p = upload(logits.device, top_p),
                     u = upload(logits.device, uniform);
  DeviceArray<int32_t> k = upload(logits.device, top_k);
  std::shared_ptr<void> out = device_bytes(s, size_t(R) * 4);
  sample_kernel<<<unsigned(R), kThreads, 0, s.stream>>>(logits.as<float>(), V, t.ptr, k.ptr, p.ptr, u.ptr,
                                                        static_cast<int32_t*>(out.get()));
  check_launch("sample", s.index);
  check(cudaMemcpyAsync(ids.data(), out.get(), size_t(R) * 4, cudaMemcpyDeviceToHost, s.stream), "sample", s.index);
  check(cudaStreamSynchronize(s.stream), "sample", s.index);
  return ids;
}

}  // namespace ftllm::cuda
