// Per-device state behind runtime.h, for the .cu files: the stream every op uses, cuBLAS, the caching
// allocator, and error checks that throw EngineError naming the device and what failed.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <span>
#include <vector>
#include <string>

#include "../core/caching_allocator.h"
#include "../core/device.h"
#include "../core/error.h"

namespace ftllm::cuda {

struct DeviceState {
  int index = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;  // null without cuBLAS (blas.h)
  std::mutex blas_mu;  // a cuBLAS handle is used by one thread at a time
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  CachingAllocator* alloc = nullptr;
};

// The state of `device`, made on first use (and the device made current for this thread). Throws
// EngineError when the device does not exist.
DeviceState& state(Device device);

inline void check(cudaError_t err, const char* what, int device = -1) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  throw EngineError((device >= 0 ? "cuda:" + std::to_string(device) + ": " : std::string("cuda: ")) + what + ": " +
                    cudaGetErrorString(err));
}
void check_blas(cublasStatus_t status, const char* what, int device);
// After a kernel launch: a launch error (bad configuration) becomes an EngineError.
inline void check_launch(const char* kernel, int device) { check(cudaGetLastError(), kernel, device); }

// `bytes` of device memory from the device's caching allocator, returned to it when the last owner goes.
std::shared_ptr<void> device_bytes(DeviceState& s, size_t bytes);

// A small host array copied to the device (indices, positions, weights of one call).
template <typename T>
struct DeviceArray {
  std::shared_ptr<void> owner;
  T* ptr = nullptr;
};
template <typename T>
DeviceArray<T> upload(Device device, std::span<const T> host) {
  DeviceState& s = state(device);
  DeviceArray<T> a;
  a.owner = device_bytes(s, host.size_bytes());
  a.ptr = static_cast<T*>(a.owner.get());
  check(cudaMemcpyAsync(a.ptr, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, s.stream), "upload", s.index);
  // The host array may be a temporary of the caller's: the copy must have read it before we return.
  check(cudaStreamSynchronize(s.stream), "upload", s.index);
  return a;
}
template <typename T>
DeviceArray<T> upload(Device device, const std::vector<T>& host) {
  return upload(device, std::span<const T>(host));
}

// Blocks of `threads` covering n items, capped so the grid stays legal (kernels stride over the rest).
inline unsigned blocks_for(size_t n, unsigned threads, size_t cap = 65535u * 16) {
  size_t b = (n + threads - 1) / threads;
  return unsigned(b == 0 ? 1 : (b > cap ? cap : b));
}

}  // namespace ftllm::cuda
