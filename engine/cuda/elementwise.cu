// Norms, activations, residual adds, RoPE, embedding lookups and row moves on the device.
#include <vector>

#include "../quant/block_decode.h"
#include "cuda_ops.h"
#include "device_state.h"
#include "reduce.cuh"

namespace ftllm::cuda {

namespace {

// One block per row; rows `stride` floats apart, the first n of each normalised (n == stride: whole rows).
// x may be out (in place): each thread reads its values before writing them.
__global__ void rmsnorm_kernel(const float* x, const float* __restrict__ w, float w_offset, int64_t n, int64_t stride, float eps,
                               float* out) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * stride;
  float* o = out + blockIdx.x * stride;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, scratch);
  const float scale = 1.0f / sqrtf(ss / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] * scale * (w[i] + w_offset);
}

__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up, float* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// GeGLU's tanh-approximated GELU, as torch computes gelu(approximate="tanh").
__global__ void gelu_tanh_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up, float* out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * up[i];
  }
}

__global__ void clamped_swiglu_kernel(const float* __restrict__ gate, const float* __restrict__ up, float* out, size_t n,
                                      float alpha, float limit) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
    out[i] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
  }
}

__global__ void softcap_kernel(float* x, float cap, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = cap * tanhf(x[i] / cap);
}

__global__ void add_kernel(float* x, const float* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) x[i] += y[i];
}

// One thread per (token, head, pair).
__global__ void rope_kernel(float* x, int64_t T, int64_t heads, int64_t half, const float* __restrict__ cos,
                            const float* __restrict__ sin, int64_t stride, int64_t offset, int64_t head_stride) {
  const size_t n = size_t(T * heads * half);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int64_t p = int64_t(i % size_t(half)), h = int64_t(i / size_t(half)) % heads, t = int64_t(i / size_t(half * heads));
    float* v = x + t * stride + offset + h * head_stride;
    const float c = cos[t * half + p], s = sin[t * half + p];
    const float a = v[p], b = v[p + half];
    v[p] = a * c - b * s;
    v[p + half] = b * c + a * s;
  }
}

// Interleaved RoPE (DeepSeek's pairs (2p, 2p + 1), results laid out rotate-half style as on the CPU):
// pair p's inputs overlap other pairs' outputs, so one block per (token, head) stages the head in shared
// memory first.
__global__ void rope_interleaved_kernel(float* x, int64_t heads, int64_t half, const float* __restrict__ cos,
                                        const float* __restrict__ sin, int64_t stride, int64_t offset, int64_t head_stride) {
  extern __shared__ float head[];
  const int64_t t = blockIdx.x / heads, h = blockIdx.x % heads;
  float* v = x + t * stride + offset + h * head_stride;
  for (int64_t i = threadIdx.x; i < 2 * half; i += blockDim.x) head[i] = v[i];
  __syncthreads();
  for (int64_t p = threadIdx.x; p < half; p += blockDim.x) {
    const float a = head[2 * p], b = head[2 * p + 1], c = cos[t * half + p], s = sin[t * half + p];
    v[p] = a * c - b * s;
    v[half + p] = b * c + a * s;
  }
}

// One block per token: the table row decoded 32 values per thread step.
template <DType T>
__global__ void embedding_kernel(const uint8_t* __restrict__ table, size_t row_bytes, const int32_t* __restrict__ ids,
                                 int64_t d, float* __restrict__ out) {
  const uint8_t* row = table + size_t(ids[blockIdx.x]) * row_bytes;
  float* o = out + blockIdx.x * d;
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      if constexpr (T == DType::F32) o[i] = reinterpret_cast<const float*>(row)[i];
      else if constexpr (T == DType::F16) o[i] = quant::decode::half(reinterpret_cast<const uint16_t*>(row)[i]);
      else o[i] = __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[i]) << 16);
    }
  } else {
    float v[32];
    for (int64_t u = threadIdx.x; u < d / 32; u += blockDim.x) {
      quant::decode::unit<T>(row, u, v);
      for (int j = 0; j < 32; ++j) o[u * 32 + j] = v[j];
    }
  }
}

__global__ void gather_rows_kernel(const float* __restrict__ x, const int64_t* __restrict__ rows, int64_t n, int64_t d,
                                   float* __restrict__ out) {
  const size_t total = size_t(n * d);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x)
    out[i] = x[rows[i / size_t(d)] * d + int64_t(i % size_t(d))];
}

// Rows may repeat: one thread per column walks the rows in order, so repeated rows add in that order.
__global__ void scatter_add_rows_kernel(const float* __restrict__ y, const int64_t* __restrict__ rows,
                                        const float* __restrict__ weights, int64_t n, int64_t d, float* out) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < d; j += int64_t(gridDim.x) * blockDim.x)
    for (int64_t i = 0; i < n; ++i) out[rows[i] * d + j] += weights[i] * y[i * d + j];
}

__global__ void scale_rows_kernel(float* x, const float* __restrict__ scale, int64_t rows, int64_t d, bool sigmoid) {
  const size_t total = size_t(rows * d);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const float s = scale[i / size_t(d)];
    x[i] *= sigmoid ? 1.0f / (1.0f + expf(-s)) : s;
  }
}

__global__ void sigmoid_mul_kernel(float* x, const float* __restrict__ gate, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] *= 1.0f / (1.0f + expf(-gate[i]));
}

}  // namespace

void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out, float w_offset) {
  DeviceState& s = state(x.device);
  const int64_t d = w.numel(), rows = x.numel() / d;
  if (rows == 0) return;
  rmsnorm_kernel<<<unsigned(rows), 256, 0, s.stream>>>(x.as<float>(), w.as<float>(), w_offset, d, d, eps, out.as<float>());
  check_launch("rmsnorm", s.index);
}

void rmsnorm_prefix(Tensor& x, const Tensor& w, float eps) {
  DeviceState& s = state(x.device);
  if (x.dim(0) == 0) return;
  rmsnorm_kernel<<<unsigned(x.dim(0)), 256, 0, s.stream>>>(x.as<float>(), w.as<float>(), 0.0f, w.numel(), x.dim(1), eps,
                                                           x.as<float>());
  check_launch("rmsnorm_prefix", s.index);
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  DeviceState& s = state(gate.device);
  const size_t n = size_t(gate.numel());
  if (n == 0) return;
  silu_mul_kernel<<<blocks_for(n, 256), 256, 0, s.stream>>>(gate.as<float>(), up.as<float>(), out.as<float>(), n);
  check_launch("silu_mul", s.index);
}

void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  DeviceState& s = state(gate.device);
  const size_t n = size_t(gate.numel());
  if (n == 0) return;
  gelu_tanh_mul_kernel<<<blocks_for(n, 256), 256, 0, s.stream>>>(gate.as<float>(), up.as<float>(), out.as<float>(), n);
  check_launch("gelu_tanh_mul", s.index);
}

void clamped_swiglu(const Tensor& gate, const Tensor& up, Tensor& out, float alpha, float limit) {
  DeviceState& s = state(gate.device);
  const size_t n = size_t(gate.numel());
  if (n == 0) return;
  clamped_swiglu_kernel<<<blocks_for(n, 256), 256, 0, s.stream>>>(gate.as<float>(), up.as<float>(), out.as<float>(), n, alpha, limit);
  check_launch("clamped_swiglu", s.index);
}

void softcap(Tensor& x, float cap) {
  DeviceState& s = state(x.device);
  const size_t n = size_t(x.numel());
  if (n == 0) return;
  softcap_kernel<<<blocks_for(n, 256), 256, 0, s.stream>>>(x.as<float>(), cap, n);
  check_launch("softcap", s.index);
}

void add(Tensor& x, const Tensor& y) {
  DeviceState& s = state(x.device);
  const size_t n = size_t(x.numel());
  if (n == 0) return;
  add_kernel<<<blocks_for(n, 256), 256, 0, s.stream>>>(x.as<float>(), y.as<float>(), n);
  check_launch("add", s.index);
}

void rope(Tensor& x, int64_t heads, const Tensor& cos, const Tensor& sin, bool interleaved, int64_t stride, int64_t offset,
          int64_t head_stride) {
  DeviceState& s = state(x.device);
  const int64_t T = x.dim(0), half = cos.dim(1);
  if (stride == 0) stride = x.dim(1);
  if (head_stride == 0) head_stride = 2 * half;
  if (T == 0) return;
  if (interleaved) {
    rope_interleaved_kernel<<<unsigned(T * heads), 64, size_t(2 * half) * 4, s.stream>>>(
        x.as<float>(), heads, half, cos.as<float>(), sin.as<float>(), stride, offset, head_stride);
  } else {
    rope_kernel<<<blocks_for(size_t(T * heads * half), 256), 256, 0, s.stream>>>(
        x.as<float>(), T, heads, half, cos.as<float>(), sin.as<float>(), stride, offset, head_stride);
  }
  check_launch("rope", s.index);
}

void embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  DeviceState& s = state(table.device);
  if (ids.empty()) return;
  const int64_t d = table.dim(1);
  if (!is_float(table.dtype) && d % 32)
    throw EngineError("embedding: rows of " + std::to_string(d) + " values are not whole 32-value units");
  DeviceArray<int32_t> dev_ids = upload(table.device, ids);
  quant::decode::with_dtype(table.dtype, [&]<DType T>() {
    embedding_kernel<T><<<unsigned(ids.size()), 128, 0, s.stream>>>(static_cast<const uint8_t*>(table.data),
                                                                    row_bytes(table.dtype, d), dev_ids.ptr, d,
                                                                    out.as<float>());
  });
  check_launch("embedding", s.index);
}

void gather_rows(const Tensor& x, std::span<const int64_t> rows, Tensor& out) {
  DeviceState& s = state(x.device);
  if (rows.empty()) return;
  const int64_t d = x.dim(1);
  DeviceArray<int64_t> dev_rows = upload(x.device, rows);
  gather_rows_kernel<<<blocks_for(rows.size() * size_t(d), 256), 256, 0, s.stream>>>(
      x.as<float>(), dev_rows.ptr, int64_t(rows.size()), d, out.as<float>());
  check_launch("gather_rows", s.index);
}

void scatter_add_rows(const Tensor& y, std::span<const int64_t> rows, std::span<const float> weights, Tensor& out) {
  DeviceState& s = state(y.device);
  if (rows.empty()) return;
  const int64_t d = out.dim(1);
  DeviceArray<int64_t> dev_rows = upload(y.device, rows);
  DeviceArray<float> dev_weights = upload(y.device, weights);
  scatter_add_rows_kernel<<<blocks_for(size_t(d), 128), 128, 0, s.stream>>>(
      y.as<float>(), dev_rows.ptr, dev_weights.ptr, int64_t(rows.size()), d, out.as<float>());
  check_launch("scatter_add_rows", s.index);
}

void scale_rows(Tensor& x, const Tensor& scale, bool sigmoid) {
  DeviceState& s = state(x.device);
  const int64_t rows = x.dim(0), d = x.dim(1);
  if (rows == 0) return;
  scale_rows_kernel<<<blocks_for(size_t(rows * d), 256), 256, 0, s.stream>>>(x.as<float>(), scale.as<float>(), rows, d,
                                                                             sigmoid);
  check_launch("scale_rows", s.index);
}

void sigmoid_mul(Tensor& x, const Tensor& gate) {
  DeviceState& s = state(x.device);
  const size_t n = size_t(x.numel());
  if (n == 0) return;
  sigmoid_mul_kernel<<<blocks_for(n, 256), 256, 0, s.stream>>>(x.as<float>(), gate.as<float>(), n);
  check_launch("sigmoid_mul", s.index);
}

}  // namespace ftllm::cuda
