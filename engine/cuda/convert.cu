#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "convert.h"

namespace ftllm::cuda {
namespace {

template <typename In>
__device__ float to_float(In v);
template <>
__device__ float to_float<float>(float v) { return v; }
template <>
__device__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename Out>
__device__ Out from_float(float v);
template <>
__device__ float from_float<float>(float v) { return v; }
template <>
__device__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Grid-stride loop: any n with a bounded grid.
template <typename In, typename Out>
__global__ void convert_kernel(const In* __restrict__ src, Out* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = from_float<Out>(to_float<In>(src[i]));
}

template <typename In, typename Out>
std::string launch(const void* src, void* dst, size_t n, void* stream) {
  if (n == 0) return {};
  constexpr unsigned threads = 256;
  size_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535u * 8) blocks = 65535u * 8;
  convert_kernel<In, Out><<<unsigned(blocks), threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const In*>(src), static_cast<Out*>(dst), n);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? std::string() : std::string(cudaGetErrorString(err));
}

}  // namespace

std::string convert_to_f32(DType from, const void* src, float* dst, size_t n, void* stream) {
  switch (from) {
    case DType::F32: return launch<float, float>(src, dst, n, stream);
    case DType::F16: return launch<__half, float>(src, dst, n, stream);
    case DType::BF16: return launch<__nv_bfloat16, float>(src, dst, n, stream);
    default: return "convert_to_f32: " + std::string(dtype_name(from)) + " is not an element-wise float type";
  }
}

std::string convert_from_f32(DType to, const float* src, void* dst, size_t n, void* stream) {
  switch (to) {
    case DType::F32: return launch<float, float>(src, dst, n, stream);
    case DType::F16: return launch<float, __half>(src, dst, n, stream);
    case DType::BF16: return launch<float, __nv_bfloat16>(src, dst, n, stream);
    default: return "convert_from_f32: " + std::string(dtype_name(to)) + " is not an element-wise float type";
  }
}

}  // namespace ftllm::cuda
