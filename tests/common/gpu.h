// For CUDA test cases: a precondition that skips them, saying why, where no GPU is usable, and
// copies between host vectors and device tensors.
#pragma once

#include <boost/test/unit_test.hpp>
#include <vector>

#include "core/tensor.h"
#include "cuda/cuda_devices.h"
#include "cuda/runtime.h"

namespace ftllm::test {

struct GpuPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(cuda::device_count() > 0);
    r.message() << "no usable CUDA device on this machine";
    return r;
  }
};

inline const Device kGpu = Device::cuda(0);

inline Tensor on_gpu(DType t, std::vector<int64_t> shape, const void* bytes) {
  return cuda::to_device(Tensor::copy_of(t, std::move(shape), bytes), kGpu);
}
inline Tensor on_gpu(const std::vector<float>& v, std::vector<int64_t> shape) { return on_gpu(DType::F32, std::move(shape), v.data()); }

inline std::vector<float> to_host(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  cuda::copy_to_host(t, v.data());
  return v;
}

}  // namespace ftllm::test
