// CUDA dtype conversion against the scalar reference. Skipped, with the reason, where no GPU is usable.
#include <cuda_runtime.h>

#include <boost/test/unit_test.hpp>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cuda/convert.h"
#include "cuda/cuda_devices.h"

using namespace ftllm;

namespace {

struct GpuPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(cuda::device_count() > 0);
    r.message() << "no usable CUDA device on this machine";
    return r;
  }
};

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { BOOST_REQUIRE(cudaMalloc(&ptr, n * sizeof(T)) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(cuda_conversions_match_the_scalar_reference, *boost::unit_test::precondition(GpuPresent())) {
  const size_t n = 1'000'003;  // odd: exercises the grid-stride tail
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  std::vector<float> input(n);
  for (auto& v : input) v = dist(rng);

  DeviceBuffer<float> d_in(n), d_f32(n);
  DeviceBuffer<uint16_t> d_half(n);
  BOOST_REQUIRE(cudaMemcpy(d_in.ptr, input.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  for (DType t : {DType::F16, DType::BF16}) {
    BOOST_TEST_CONTEXT(dtype_name(t)) {
      BOOST_REQUIRE_EQUAL(cuda::convert_from_f32(t, d_in.ptr, d_half.ptr, n, nullptr), "");
      BOOST_REQUIRE_EQUAL(cuda::convert_to_f32(t, d_half.ptr, d_f32.ptr, n, nullptr), "");
      std::vector<uint16_t> half(n);
      std::vector<float> back(n);
      BOOST_REQUIRE(cudaMemcpy(half.data(), d_half.ptr, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
      BOOST_REQUIRE(cudaMemcpy(back.data(), d_f32.ptr, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
      for (size_t i = 0; i < n; ++i) {
        uint16_t want = t == DType::F16 ? f32_to_f16(input[i]) : f32_to_bf16(input[i]);
        float want_back = t == DType::F16 ? f16_to_f32(want) : bf16_to_f32(want);
        BOOST_REQUIRE_MESSAGE(half[i] == want, "element " << i << " of " << input[i]);
        BOOST_REQUIRE_MESSAGE(back[i] == want_back, "element " << i);
      }
    }
  }
}
