#include "cuda_devices.h"

#include "blas.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

namespace ftllm::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return 0;
  }
  return n;
}

void append_cuda_devices(DeviceReport& report) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    // Without libcuda the runtime says "driver version is insufficient", which misleads: say what is missing.
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver) dlclose(driver);
    report.notes.push_back(driver ? std::string("cuda: no usable device (") + cudaGetErrorString(err) + ")"
                                  : std::string("cuda: no NVIDIA driver on this machine (libcuda.so.1 not found)"));
    return;
  }
  std::string no_blas;
  if (n > 0 && !blas(&no_blas)) report.notes.push_back("cuda: " + no_blas);
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess || cudaSetDevice(i) != cudaSuccess ||
        cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      report.notes.push_back("cuda:" + std::to_string(i) + ": cannot be queried (" +
                             cudaGetErrorString(cudaGetLastError()) + ")");
      continue;
    }
    report.devices.push_back({"cuda:" + std::to_string(i), prop.name, total_bytes, free_bytes});
  }
}

}  // namespace ftllm::cuda
