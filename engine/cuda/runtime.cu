#include <array>
#include <cstring>
#include <memory>

#include "blas.h"
#include "device_state.h"
#include "runtime.h"

namespace ftllm::cuda {

namespace {

constexpr int kMaxDevices = 16;
std::array<std::once_flag, kMaxDevices> made;
std::array<std::unique_ptr<DeviceState>, kMaxDevices> states;

void make_state(int index) {
  auto s = std::make_unique<DeviceState>();
  s->index = index;
  check(cudaSetDevice(index), "cudaSetDevice", index);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties", index);
  s->cc_major = prop.major;
  s->cc_minor = prop.minor;
  s->sm_count = prop.multiProcessorCount;
  check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate", index);
  if (const Blas* b = blas()) {  // else the GEMMs run on the GEMV kernels
    check_blas(b->create(&s->blas), "cublasCreate", index);
    check_blas(b->set_stream(s->blas, s->stream), "cublasSetStream", index);
  }
  // Deliberately never destroyed: models may free tensors during static destruction, after the
  // CUDA runtime has begun to shut down; the process's end returns the memory.
  s->alloc = new CachingAllocator(
      "cuda:" + std::to_string(index),
      [index](size_t bytes) -> void* {
        void* p = nullptr;
        cudaSetDevice(index);
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
          cudaGetLastError();
          return nullptr;
        }
        return p;
      },
      [index](void* p) {
        cudaSetDevice(index);
        cudaFree(p);
      });
  states[size_t(index)] = std::move(s);
}

}  // namespace

std::shared_ptr<void> device_bytes(DeviceState& s, size_t bytes) {
  void* p = s.alloc->allocate(bytes == 0 ? 1 : bytes);
  CachingAllocator* alloc = s.alloc;
  // A freed block may be handed out again at once: that is safe because every user queues on the
  // same stream, so the new owner's work runs after the old owner's.
  return std::shared_ptr<void>(p, [alloc](void* q) { alloc->free(q); });
}

void check_blas(cublasStatus_t status, const char* what, int device) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw EngineError("cuda:" + std::to_string(device) + ": " + what + ": " + blas()->status_string(status));
}

DeviceState& state(Device device) {
  // Asked once: every op passes through here.
  static const int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      count = 0;
    }
    return count;
  }();
  if (!device.is_cuda() || device.index < 0 || device.index >= kMaxDevices || device.index >= n)
    throw EngineError("device " + device.name() + " is not a usable CUDA device on this machine (" + std::to_string(n) +
                      " found)");
  std::call_once(made[size_t(device.index)], make_state, device.index);
  if (!states[size_t(device.index)]) throw EngineError(device.name() + " could not be initialised");
  check(cudaSetDevice(device.index), "cudaSetDevice", device.index);
  return *states[size_t(device.index)];
}

Tensor empty(Device device, DType dtype, std::vector<int64_t> shape) {
  DeviceState& s = state(device);
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.device = device;
  t.owner = device_bytes(s, t.bytes());
  t.data = t.owner.get();
  return t;
}

Tensor zeros(Device device, DType dtype, std::vector<int64_t> shape) {
  Tensor t = empty(device, dtype, std::move(shape));
  check(cudaMemsetAsync(t.data, 0, t.bytes(), state(device).stream), "cudaMemsetAsync", device.index);
  return t;
}

Tensor to_device(const Tensor& t, Device to) {
  if (t.device == to) return t;
  if (!to.is_cuda()) {  // device -> host
    Tensor h = Tensor::zeros(t.dtype, t.shape);
    copy_to_host(t, h.data);
    return h;
  }
  Tensor d = empty(to, t.dtype, t.shape);
  DeviceState& s = state(to);
  if (!t.device.is_cuda()) {
    check(cudaMemcpyAsync(d.data, t.data, t.bytes(), cudaMemcpyHostToDevice, s.stream), "copy to the device", to.index);
    // The host bytes may be freed as soon as we return (a temporary): wait for the copy to read them.
    check(cudaStreamSynchronize(s.stream), "copy to the device", to.index);
  } else {  // another device: let the source's stream finish first
    synchronize(t.device);
    check(cudaMemcpyPeerAsync(d.data, to.index, t.data, t.device.index, t.bytes(), s.stream), "copy between devices",
          to.index);
    check(cudaStreamSynchronize(s.stream), "copy between devices", to.index);
  }
  return d;
}

void copy_to_host(const Tensor& t, void* dst) {
  DeviceState& s = state(t.device);
  check(cudaMemcpyAsync(dst, t.data, t.bytes(), cudaMemcpyDeviceToHost, s.stream), "copy to the host", s.index);
  check(cudaStreamSynchronize(s.stream), "copy to the host", s.index);
}

void synchronize(Device device) {
  DeviceState& s = state(device);
  check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize", s.index);
}

MemoryUse memory_use(Device device) {
  DeviceState& s = state(device);
  MemoryUse m;
  m.in_use = s.alloc->bytes_in_use();
  m.cached = s.alloc->bytes_cached();
  check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo", s.index);
  return m;
}

size_t available_bytes(Device device) {
  MemoryUse m = memory_use(device);
  return m.free + m.cached;
}

}  // namespace ftllm::cuda
