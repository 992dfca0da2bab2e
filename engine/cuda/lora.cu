// LoRA's per-row update on the device (ops::lora): one block per (row, rank index) takes the row's dot
// with that row of A, then a thread per output column adds scale · t · Bᵀ. Each row names its own
// adapter's matrices, so rows of different adapters run in the same two launches.
#include <vector>

#include "../quant/block_decode.h"
#include "cuda_ops.h"
#include "device_state.h"
#include "reduce.cuh"

namespace ftllm::cuda {

namespace {

__device__ __forceinline__ float element(const void* p, int64_t i, int dtype) {
  if (dtype == 0) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return dtype == 1 ? quant::decode::bits_to_float(uint32_t(h) << 16) : quant::decode::half(h);
}

__global__ void lora_down_kernel(const float* __restrict__ x, const LoraRow* __restrict__ rows, int64_t K, int max_rank,
                                 float* __restrict__ t) {
  __shared__ float scratch[32];
  const LoraRow r = rows[blockIdx.x];
  const int j = blockIdx.y;
  if (j >= r.rank) return;  // the whole block leaves: no barrier is left waiting
  const float* xr = x + r.row * K;
  float sum = 0;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) sum += xr[k] * element(r.a, int64_t(j) * K + k, r.dtype);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) t[int64_t(blockIdx.x) * max_rank + j] = r.scale * sum;
}

__global__ void lora_up_kernel(const float* __restrict__ t, const LoraRow* __restrict__ rows, int max_rank) {
  const LoraRow r = rows[blockIdx.y];
  const float* tr = t + int64_t(blockIdx.y) * max_rank;
  for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < r.n; n += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0;
    for (int j = 0; j < r.rank; ++j) sum += tr[j] * element(r.bt, int64_t(j) * r.n + n, r.dtype);
    r.y[r.row * r.n + n] += sum;
  }
}

}  // namespace

void lora(const Tensor& x, std::span<const LoraRow> rows, int max_rank, int64_t max_n) {
  if (rows.empty()) return;
  DeviceState& s = state(x.device);
  const int64_t K = x.dim(1);
  DeviceArray<LoraRow> dev_rows = upload(x.device, rows);
  std::shared_ptr<void> t = device_bytes(s, rows.size() * size_t(max_rank) * sizeof(float));
  float* tp = static_cast<float*>(t.get());
  lora_down_kernel<<<dim3(unsigned(rows.size()), unsigned(max_rank)), 128, 0, s.stream>>>(x.as<float>(), dev_rows.ptr, K,
                                                                                           max_rank, tp);
  check_launch("lora_down", s.index);
  lora_up_kernel<<<dim3(blocks_for(size_t(max_n), 128, 1024), unsigned(rows.size())), 128, 0, s.stream>>>(tp, dev_rows.ptr,
                                                                                                           max_rank);
  check_launch("lora_up", s.index);
}

}  // namespace ftllm::cuda
