// The simulator itself: CUDA's semantics for what the backend's kernels use (shuffles, barriers,
// shared memory, launch limits, copies, cuBLAS's column-major GemmEx, NCCL's grouped all-reduce), and
// the faults it reports instead of computing garbage (a deadlocked barrier, a host pointer passed to a
// kernel). The backend's own tests (../engine/cuda_*_test.cpp) run beside these, on the simulator.
#define BOOST_TEST_MODULE cudasim
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <csignal>
#include <numeric>
#include <vector>

namespace {

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n;
  explicit DeviceBuffer(size_t count, const std::vector<T>& init = {}) : n(count) {
    BOOST_REQUIRE_EQUAL(cudaMalloc(&ptr, n * sizeof(T)), cudaSuccess);
    if (!init.empty()) BOOST_REQUIRE_EQUAL(cudaMemcpy(ptr, init.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<T> host() const {
    std::vector<T> v(n);
    BOOST_REQUIRE_EQUAL(cudaMemcpy(v.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

// out[warp * 4 + 0..3]: the warp's xor-butterfly sum, lane 0's value fetched by index, lane 1's down-shift
// by 1 (lane 2's value), and the sum within 8-lane segments seen from lane 31 (lanes 24..31).
__global__ void shuffles(const float* in, float* out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float v = in[threadIdx.x];
  float sum = v;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float first = __shfl_sync(0xffffffffu, v, 0);
  const float next = __shfl_down_sync(0xffffffffu, v, 1);
  float seg = v;
  for (int o = 4; o > 0; o >>= 1) seg += __shfl_xor_sync(0xffffffffu, seg, o, 8);
  if (lane == 0) out[warp * 4] = sum, out[warp * 4 + 1] = first;
  if (lane == 1) out[warp * 4 + 2] = next;
  if (lane == 31) out[warp * 4 + 3] = seg;
}

// Reverses each block's slice through shared memory: wrong without the barrier between write and read.
__global__ void reverse_in_shared(const int* in, int* out) {
  __shared__ int s[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = in[i];
  __syncthreads();
  out[i] = s[blockDim.x - 1 - threadIdx.x];
}

// Writes its shared array when asked, and reads it back: hostify.py adds the fresh_shared call after
// each static __shared__ declaration of the backend's kernels; here it is written out.
__global__ void static_shared(bool write, float* out) {
  __shared__ float s[32];
  ::ftllm_sim::fresh_shared(s, sizeof(s));
  if (write) s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

__global__ void sum_dynamic_shared(const float* in, int n, float* out) {
  float* s = static_cast<float*>(::ftllm_sim::dynamic_shared());
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = in[i] * 2;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (int i = 0; i < n; ++i) t += s[i];
    *out = t;
  }
}

// The classic bug: a barrier inside a branch only some threads take.
__global__ void divergent_barrier(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  }
}

__global__ void store(float* out) { out[threadIdx.x] = 1; }

__global__ void grid_indices(unsigned* out) {
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[b * blockDim.x * blockDim.y * blockDim.z + t] = b * 1000 + t;
}

__global__ void load_float4(const float* in, float* out) {
  const float4 v = reinterpret_cast<const float4*>(in)[threadIdx.x];
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

// Runs f in a child process and returns its standard error if it was stopped (SIGABRT, or the
// sanitizer's exit status), else "".
template <typename F>
std::string aborts_with(F f) {
  int pipe_fd[2];
  BOOST_REQUIRE_EQUAL(pipe(pipe_fd), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);  // not Boost.Test's handler, which would carry on with the next test
    dup2(pipe_fd[1], 2);
    f();
    _exit(0);
  }
  close(pipe_fd[1]);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fd[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
  close(pipe_fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const bool stopped = (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
  return stopped ? err : std::string();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(simulator)

BOOST_AUTO_TEST_CASE(warp_shuffles_follow_cuda) {
  std::vector<float> in(64);
  std::iota(in.begin(), in.end(), 1.0f);
  DeviceBuffer<float> d_in(64, in), d_out(8);
  ::ftllm_sim::Launch("shuffles", 1, 64).run(shuffles, d_in.ptr, d_out.ptr);
  BOOST_REQUIRE_EQUAL(cudaGetLastError(), cudaSuccess);
  const std::vector<float> out = d_out.host();
  for (int w = 0; w < 2; ++w) {
    float sum = 0, seg = 0;
    for (int l = 0; l < 32; ++l) sum += in[size_t(w * 32 + l)];
    for (int l = 24; l < 32; ++l) seg += in[size_t(w * 32 + l)];
    BOOST_TEST(out[size_t(w * 4)] == sum);
    BOOST_TEST(out[size_t(w * 4 + 1)] == in[size_t(w * 32)]);
    BOOST_TEST(out[size_t(w * 4 + 2)] == in[size_t(w * 32 + 2)]);
    BOOST_TEST(out[size_t(w * 4 + 3)] == seg);
  }
}

BOOST_AUTO_TEST_CASE(barriers_order_shared_memory_within_each_block) {
  const int n = 4 * 256;
  std::vector<int> in(n);
  std::iota(in.begin(), in.end(), 0);
  DeviceBuffer<int> d_in(n, in), d_out(n);
  ::ftllm_sim::Launch("reverse_in_shared", 4, 256).run(reverse_in_shared, d_in.ptr, d_out.ptr);
  const std::vector<int> out = d_out.host();
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 256; ++t) BOOST_REQUIRE_EQUAL(out[size_t(b * 256 + t)], b * 256 + 255 - t);

  std::vector<float> f(100, 1.5f);
  DeviceBuffer<float> d_f(100, f), d_sum(1);
  ::ftllm_sim::Launch("sum_dynamic_shared", 1, 64, 100 * sizeof(float)).run(sum_dynamic_shared, d_f.ptr, 100, d_sum.ptr);
  BOOST_TEST(d_sum.host()[0] == 300.0f);
}

BOOST_AUTO_TEST_CASE(shared_memory_nobody_wrote_in_this_block_reads_as_nan) {
  DeviceBuffer<float> d(32);
  ::ftllm_sim::Launch("static_shared", 1, 32).run(static_shared, true, d.ptr);
  BOOST_TEST(d.host()[5] == 1.0f);
  ::ftllm_sim::Launch("static_shared", 1, 32).run(static_shared, false, d.ptr);  // not the last block's 1s
  BOOST_TEST(std::isnan(d.host()[5]));
}

BOOST_AUTO_TEST_CASE(every_block_and_thread_index_runs_once) {
  const dim3 grid(3, 2, 2), block(4, 2, 3);
  const unsigned n = 12 * 24;
  DeviceBuffer<unsigned> d(n);
  ::ftllm_sim::Launch("grid_indices", grid, block).run(grid_indices, d.ptr);
  const std::vector<unsigned> out = d.host();
  for (unsigned i = 0; i < n; ++i) BOOST_REQUIRE_EQUAL(out[i], i / 24 * 1000 + i % 24);
}

BOOST_AUTO_TEST_CASE(launches_outside_the_limits_fail_as_on_a_device) {
  DeviceBuffer<float> d(2048);
  ::ftllm_sim::Launch("store", 1, 2048).run(store, d.ptr);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  ::ftllm_sim::Launch("store", 1, 32, 64 << 10).run(store, d.ptr);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  ::ftllm_sim::Launch("store", 0, 32).run(store, d.ptr);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // reading the error clears it
}

BOOST_AUTO_TEST_CASE(memory_is_accounted_poisoned_and_checked_on_copies) {
  size_t free0 = 0, total = 0;
  BOOST_REQUIRE_EQUAL(cudaMemGetInfo(&free0, &total), cudaSuccess);
  {
    DeviceBuffer<float> d(1 << 20);
    size_t free1 = 0;
    cudaMemGetInfo(&free1, &total);
    BOOST_TEST(free0 - free1 == size_t(4) << 20);
    BOOST_TEST(std::isnan(d.host()[12345]));  // nobody wrote it
    std::vector<float> host(16);
    BOOST_TEST(cudaMemcpy(host.data(), d.ptr, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // kinds swapped
    BOOST_TEST(cudaMemcpy(d.ptr + (1 << 20) - 8, host.data(), 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    cudaGetLastError();
  }
  size_t free2 = 0;
  cudaMemGetInfo(&free2, &total);
  BOOST_TEST(free2 == free0);
  void* p = nullptr;
  BOOST_TEST(cudaMalloc(&p, total + 1) == cudaErrorMemoryAllocation);
  BOOST_TEST(cudaGetLastError() == cudaErrorMemoryAllocation);
}

BOOST_AUTO_TEST_CASE(gemm_ex_is_column_major_with_transposes_and_leading_dimensions) {
  // A = [[1,2,3],[4,5,6]] (2 x 3) stored transposed (op T: A is given as its 3 x 2 transpose, lda 4);
  // B = [[1,0],[0,1],[1,1]] (3 x 2, op N, ldb 3). C = A B = [[4,5],[10,11]], ldc 2.
  const std::vector<float> a_t = {1, 2, 3, 0, 4, 5, 6, 0};  // columns of Aᵀ, padded to lda = 4
  const std::vector<float> b = {1, 0, 1, 0, 1, 1};
  DeviceBuffer<float> da(8, a_t), db(6, b), dc(4);
  cublasHandle_t h = nullptr;
  BOOST_REQUIRE_EQUAL(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0;
  BOOST_REQUIRE_EQUAL(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, da.ptr, CUDA_R_32F, 4, db.ptr, CUDA_R_32F, 3,
                                   &zero, dc.ptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      CUBLAS_STATUS_SUCCESS);
  const std::vector<float> c = dc.host();
  BOOST_TEST(c == (std::vector<float>{4, 10, 5, 11}), boost::test_tools::per_element());
  BOOST_TEST(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, da.ptr, CUDA_R_32F, 2, db.ptr, CUDA_R_32F, 3, &zero,
                          dc.ptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  std::vector<float> host_b = b;  // a host operand is refused
  BOOST_TEST(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, da.ptr, CUDA_R_32F, 4, host_b.data(), CUDA_R_32F, 3,
                          &zero, dc.ptr, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
}

BOOST_AUTO_TEST_CASE(nccl_all_reduce_sums_over_the_devices_of_a_group) {
  int n = 0;
  cudaGetDeviceCount(&n);
  BOOST_REQUIRE_GE(n, 2);
  const int devices[] = {0, 1};
  ncclComm_t comms[2];
  BOOST_REQUIRE_EQUAL(ncclCommInitAll(comms, 2, devices), ncclSuccess);
  cudaSetDevice(0);
  DeviceBuffer<float> a(3, {1, 2, 3});
  cudaStream_t s0, s1;
  cudaStreamCreate(&s0);
  cudaSetDevice(1);
  DeviceBuffer<float> b(3, {10, 20, 30});
  cudaStreamCreate(&s1);
  BOOST_REQUIRE_EQUAL(ncclGroupStart(), ncclSuccess);
  BOOST_REQUIRE_EQUAL(ncclAllReduce(a.ptr, a.ptr, 3, ncclFloat, ncclSum, comms[0], s0), ncclSuccess);
  BOOST_REQUIRE_EQUAL(ncclAllReduce(b.ptr, b.ptr, 3, ncclFloat, ncclSum, comms[1], s1), ncclSuccess);
  BOOST_REQUIRE_EQUAL(ncclGroupEnd(), ncclSuccess);
  const std::vector<float> want = {11, 22, 33};
  BOOST_TEST(b.host() == want, boost::test_tools::per_element());
  cudaSetDevice(0);
  BOOST_TEST(a.host() == want, boost::test_tools::per_element());
  // A buffer on the wrong device is refused.
  BOOST_TEST(ncclAllReduce(a.ptr, a.ptr, 3, ncclFloat, ncclSum, comms[1], s1) == ncclInvalidArgument);
}

BOOST_AUTO_TEST_CASE(a_barrier_not_every_thread_reaches_is_reported_not_hung) {
  const std::string err = aborts_with([] {
    DeviceBuffer<float> d(32);
    ::ftllm_sim::Launch("divergent_barrier", 1, 32).run(divergent_barrier, d.ptr);
  });
  BOOST_TEST_INFO("stderr: " << err);
  BOOST_TEST(err.find("divergent_barrier") != std::string::npos);
  BOOST_TEST(err.find("deadlock") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_host_pointer_given_to_a_kernel_is_reported) {
  const std::string err = aborts_with([] {
    std::vector<float> host(32);
    ::ftllm_sim::Launch("store", 1, 32).run(store, host.data());
  });
  BOOST_TEST_INFO("stderr: " << err);
  BOOST_TEST(err.find("kernel store: argument 0") != std::string::npos);
  BOOST_TEST(err.find("not device memory") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_misaligned_vector_load_is_reported) {
  DeviceBuffer<float> in(40), out(8);
  ::ftllm_sim::Launch("load_float4", 1, 8).run(load_float4, in.ptr, out.ptr);  // aligned: fine
  BOOST_REQUIRE_EQUAL(cudaGetLastError(), cudaSuccess);
  const std::string err = aborts_with([&] { ::ftllm_sim::Launch("load_float4", 1, 8).run(load_float4, in.ptr + 1, out.ptr); });
  BOOST_TEST_INFO("stderr: " << err);
  BOOST_TEST(err.find("misaligned") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
