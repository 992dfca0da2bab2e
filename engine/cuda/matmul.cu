// Linear layers on the device. Weights stay in their stored dtype (every type dtype.h knows). Few
// activation rows (decode): a GEMV, one warp per weight row, each lane decoding 32 values at a time in
// registers and dotting them with up to kGemvRows activation rows, so each weight byte is read once per
// kGemvRows rows. Many rows (prefill): the weights decoded to bf16 (float32 before sm_80) a slab of rows
// at a time and multiplied by cuBLAS on the tensor cores.
#include <cuda_bf16.h>

#include <algorithm>

#include "../quant/block_decode.h"
#include "blas.h"
#include "convert.h"
#include "cuda_ops.h"
#include "device_state.h"
#include "reduce.cuh"
#include "runtime.h"

namespace ftllm::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

template <DType T>
__global__ void gemv_kernel(const float* __restrict__ x, int M, int64_t K, const uint8_t* __restrict__ w, size_t row_bytes,
                            int64_t N, const float* __restrict__ bias, float* __restrict__ y, int64_t ldy) {
  const int lane = threadIdx.x % 32;
  const int64_t n = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const uint8_t* row = w + size_t(n) * row_bytes;
  float acc[kGemvRows];
#pragma unroll
  for (int m = 0; m < kGemvRows; ++m) acc[m] = 0.0f;
  float v[32];
  const int64_t units = K / 32;
  for (int64_t u = lane; u < units; u += 32) {
    quant::decode::unit<T>(row, u, v);
#pragma unroll
    for (int m = 0; m < kGemvRows; ++m) {
      if (m >= M) break;
      const float4* xm = reinterpret_cast<const float4*>(x + m * K + u * 32);
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float4 a = xm[j];
        s += v[4 * j] * a.x + v[4 * j + 1] * a.y + v[4 * j + 2] * a.z + v[4 * j + 3] * a.w;
      }
      acc[m] += s;
    }
  }
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {  // float rows need not be whole units
    for (int64_t k = units * 32 + lane; k < K; k += 32) {
      float wk;
      if constexpr (T == DType::F32) wk = reinterpret_cast<const float*>(row)[k];
      else if constexpr (T == DType::F16) wk = quant::decode::half(reinterpret_cast<const uint16_t*>(row)[k]);
      else wk = __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[k]) << 16);
      for (int m = 0; m < M; ++m) acc[m] += wk * x[m * K + k];
    }
  }
#pragma unroll
  for (int m = 0; m < kGemvRows; ++m) acc[m] = warp_sum(acc[m]);
  if (lane == 0)
    for (int m = 0; m < M; ++m) y[m * ldy + n] = acc[m] + (bias ? bias[n] : 0.0f);
}

// Rows [n0, n0 + rows) of w decoded into out (row-major, K values a row) as float32 or 16-bit.
template <DType T, typename Out>
__global__ void dequantize_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t K, int64_t n0, int64_t rows,
                                  Out* __restrict__ out) {
  const int64_t units = K / 32;
  const size_t total = size_t(rows * units);
  float v[32];
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int64_t r = int64_t(i / size_t(units)), u = int64_t(i % size_t(units));
    quant::decode::unit<T>(w + size_t(n0 + r) * row_bytes, u, v);
    Out* o = out + r * K + u * 32;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      if constexpr (sizeof(Out) == 4) o[j] = v[j];
      else o[j] = __float2bfloat16_rn(v[j]);
    }
  }
}

__global__ void add_bias_kernel(float* y, const float* __restrict__ bias, int64_t rows, int64_t N) {
  const size_t total = size_t(rows * N);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % size_t(N)];
}

void check_units(const Tensor& w, int64_t K) {
  if (!is_float(w.dtype) && K % 32)
    throw EngineError("cuda linear: rows of " + std::to_string(K) + " values are not whole 32-value units of " +
                      std::string(dtype_name(w.dtype)));
}

}  // namespace

void linear_gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  DeviceState& s = state(x.device);
  const int64_t T = x.dim(0), K = x.dim(1), N = w.dim(0);
  check_units(w, K);
  // float4 loads of the activations want rows that start 16-byte aligned: K a multiple of 4.
  if (K % 4) throw EngineError("cuda linear: rows of " + std::to_string(K) + " values (want a multiple of 4)");
  const size_t rb = row_bytes(w.dtype, K);
  for (int64_t m0 = 0; m0 < T; m0 += kGemvRows) {
    const int M = int(std::min<int64_t>(kGemvRows, T - m0));
    quant::decode::with_dtype(w.dtype, [&]<DType D>() {
      gemv_kernel<D><<<unsigned((N + kWarpsPerBlock - 1) / kWarpsPerBlock), 32 * kWarpsPerBlock, 0, s.stream>>>(
          x.as<float>() + m0 * K, M, K, static_cast<const uint8_t*>(w.data), rb, N, bias ? bias->as<float>() : nullptr,
          y.as<float>() + m0 * N, N);
    });
    check_launch("gemv", s.index);
  }
}

void dequantize(const Tensor& w, Tensor& out) {
  DeviceState& s = state(w.device);
  const int64_t N = w.dim(0), K = w.dim(1);
  if (K % 32) throw EngineError("cuda dequantize: rows of " + std::to_string(K) + " values are not whole 32-value units");
  quant::decode::with_dtype(w.dtype, [&]<DType D>() {
    dequantize_kernel<D, float><<<blocks_for(size_t(N * (K / 32)), 256), 256, 0, s.stream>>>(
        static_cast<const uint8_t*>(w.data), row_bytes(w.dtype, K), K, 0, N, out.as<float>());
  });
  check_launch("dequantize", s.index);
}

void linear_gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  DeviceState& s = state(x.device);
  const int64_t T = x.dim(0), K = x.dim(1), N = w.dim(0);
  if (K % 32) throw EngineError("cuda linear_gemm: rows of " + std::to_string(K) + " values are not whole 32-value units");
  // The 16-bit type cuBLAS multiplies in: the weights' own when they are 16-bit, else bf16 from sm_80 on
  // (its range is float32's, so activations cannot overflow), float32 before.
  const bool bf16_ok = s.cc_major >= 8;
  DType compute = w.dtype == DType::F16 ? DType::F16 : (bf16_ok ? DType::BF16 : DType::F32);
  if (w.dtype == DType::F32) compute = DType::F32;
  const cudaDataType_t type = compute == DType::F32 ? CUDA_R_32F : compute == DType::F16 ? CUDA_R_16F : CUDA_R_16BF;

  Tensor xc = x;
  if (compute != DType::F32) {
    xc = empty(x.device, compute, {T, K});
    const std::string err = convert_from_f32(compute, x.as<float>(), xc.data, size_t(T * K), s.stream);
    if (!err.empty()) throw EngineError("cuda linear: " + err);
  }
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&](const void* wp, int64_t n0, int64_t rows) {
    std::lock_guard lock(s.blas_mu);
    // Row-major y[T, N] = x[T, K] w[N, K]^T is column-major y^T = w^T(op T) x^T.
    check_blas(blas()->gemm_ex(s.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(T), int(K), &alpha, wp, type, int(K), xc.data,
                            type, int(K), &beta, y.as<float>() + n0, CUDA_R_32F, int(N), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx", s.index);
  };
  if (w.dtype == compute) {
    gemm(w.data, 0, N);
  } else {
    // Decoded in slabs of rows so the scratch stays near 64 MiB whatever the matrix.
    const size_t elem = compute == DType::F32 ? 4 : 2;
    const int64_t slab = std::max<int64_t>(64, int64_t((size_t(64) << 20) / (size_t(K) * elem)));
    Tensor scratch = empty(x.device, compute, {std::min(slab, N), K});
    const size_t rb = row_bytes(w.dtype, K);
    for (int64_t n0 = 0; n0 < N; n0 += slab) {
      const int64_t rows = std::min(slab, N - n0);
      quant::decode::with_dtype(w.dtype, [&]<DType D>() {
        const unsigned blocks = blocks_for(size_t(rows * (K / 32)), 256);
        if (compute == DType::F32)
          dequantize_kernel<D, float><<<blocks, 256, 0, s.stream>>>(static_cast<const uint8_t*>(w.data), rb, K, n0, rows,
                                                                     scratch.as<float>());
        else
          dequantize_kernel<D, __nv_bfloat16><<<blocks, 256, 0, s.stream>>>(
              static_cast<const uint8_t*>(w.data), rb, K, n0, rows, scratch.as<__nv_bfloat16>());
      });
      check_launch("dequantize", s.index);
      gemm(scratch.data, n0, rows);
    }
  }
  if (bias) {
    add_bias_kernel<<<blocks_for(size_t(T * N), 256), 256, 0, s.stream>>>(y.as<float>(), bias->as<float>(), T, N);
    check_launch("add_bias", s.index);
  }
}

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  const int64_t T = x.dim(0), K = x.dim(1);
  // The GEMV reads quantized weights once per kGemvRows rows: up to four passes cost less than decoding
  // them to a 16-bit scratch matrix for cuBLAS. Rows that are not whole 32-value units stay on the GEMV.
  const bool gemv = T <= kGemvRows || K % 32 != 0 || (!is_float(w.dtype) && T <= 4 * kGemvRows) ||
                    !state(x.device).blas;
  if (gemv) linear_gemv(x, w, bias, y);
  else linear_gemm(x, w, bias, y);
}

}  // namespace ftllm::cuda
