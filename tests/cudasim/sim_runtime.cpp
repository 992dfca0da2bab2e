// The simulator's CUDA runtime: devices (FTLLM_CUDASIM_DEVICES of them, default 2, each with
// FTLLM_CUDASIM_MEMORY_MIB of accounted memory, default 8192), allocations in host memory that every
// copy and kernel argument is checked against, streams, and the last-error state. Work runs when it is
// queued, so every stream is always idle.
#include "sim_runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime.h>

struct CUstream_st {  // a stream is its device: work runs when queued
  int device;
};

namespace ftllm_sim {

namespace {

struct Allocation {
  size_t bytes;
  int device;
};

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Allocation> allocations;  // by start address
  std::vector<size_t> used;                     // bytes per device
  std::set<CUstream_st*> streams;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: tensors may be freed during static destruction
  return *r;
}

size_t env_number(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? size_t(std::strtoull(v, nullptr, 10)) : fallback;
}

thread_local int current = 0;
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

// The allocation holding [p, p + bytes), or null.
const Allocation* find_locked(Registry& r, const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = r.allocations.upper_bound(a);
  if (it == r.allocations.begin()) return nullptr;
  --it;
  if (a + bytes > it->first + it->second.bytes) return nullptr;
  return &it->second;
}

}  // namespace

int device_count() { return int(env_number("FTLLM_CUDASIM_DEVICES", 2)); }
size_t device_memory() { return env_number("FTLLM_CUDASIM_MEMORY_MIB", 8192) << 20; }
int current_device() { return current; }
void set_launch_error(int error) { last_error = cudaError_t(error); }

int device_of(const void* p, size_t bytes) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  const Allocation* a = find_locked(r, p, bytes == 0 ? 1 : bytes);
  return a ? a->device : -1;
}


int stream_device(CUstream_st* s) {
  if (!s) return current;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.streams.count(s) ? s->device : -2;
}

}  // namespace ftllm_sim

using namespace ftllm_sim;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  current = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  // An H200's shape, so that launch heuristics choose as they would there.
  std::snprintf(prop->name, sizeof prop->name, "ftllm CUDA simulator (sm_90, 132 SMs)");
  prop->totalGlobalMem = device_memory();
  prop->sharedMemPerBlock = 48 << 10;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->memoryBusWidth = 6144;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.used.resize(size_t(device_count()));
  *total = device_memory();
  *free = *total - std::min(*total, r.used[size_t(current)]);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  Registry& r = registry();
  const size_t rounded = (bytes + 255) & ~size_t(255);
  {
    std::lock_guard lock(r.mu);
    r.used.resize(size_t(device_count()));
    if (r.used[size_t(current)] + rounded > device_memory()) return fail(cudaErrorMemoryAllocation);
    r.used[size_t(current)] += rounded;
  }
  void* p = std::aligned_alloc(256, rounded);
  if (!p) return fail(cudaErrorMemoryAllocation);
  // Device memory comes uninitialised: NaN bytes make a kernel that reads what nobody wrote visible.
  // (Huge blocks, a KV pool, are left to the kernel's pages untouched.)
  if (rounded <= (size_t(64) << 20)) std::memset(p, 0xff, rounded);
  std::lock_guard lock(r.mu);
  r.allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, current};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  Registry& r = registry();
  {
    std::lock_guard lock(r.mu);
    auto it = r.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.allocations.end()) return fail(cudaErrorInvalidValue);
    r.used[size_t(it->second.device)] -= (it->second.bytes + 255) & ~size_t(255);
    r.allocations.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

namespace {

// Where each side of a copy must be, as the copy's kind says.
bool placed(const void* p, size_t bytes, bool on_device) {
  const int d = device_of(p, bytes);
  if (on_device) return d >= 0;
  return device_of(p, 1) < 0;  // host memory: not inside any device allocation
}

cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (stream_device(stream) == -2) return fail(cudaErrorInvalidResourceHandle);
  bool dst_device = false, src_device = false;
  switch (kind) {
    case cudaMemcpyHostToDevice: dst_device = true; break;
    case cudaMemcpyDeviceToHost: src_device = true; break;
    case cudaMemcpyDeviceToDevice: dst_device = src_device = true; break;
    case cudaMemcpyHostToHost: break;
    case cudaMemcpyDefault: dst_device = device_of(dst, 1) >= 0, src_device = device_of(src, 1) >= 0; break;
  }
  if (!placed(dst, bytes, dst_device) || !placed(src, bytes, src_device)) {
    std::fprintf(stderr, "cudasim: cudaMemcpy of %zu bytes (kind %d): a side is not where the kind says or runs past its allocation\n",
                 bytes, int(kind));
    return fail(cudaErrorInvalidValue);
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (device_of(dst, bytes) != dst_device || device_of(src, bytes) != src_device) {
    std::fprintf(stderr, "cudasim: cudaMemcpyPeerAsync of %zu bytes: a pointer is not memory of the device named\n", bytes);
    return fail(cudaErrorInvalidValue);
  }
  if (stream_device(stream) == -2) return fail(cudaErrorInvalidResourceHandle);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (device_of(ptr, bytes) < 0) return fail(cudaErrorInvalidValue);
  if (stream_device(stream) == -2) return fail(cudaErrorInvalidResourceHandle);
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new CUstream_st{current};
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return stream_device(stream) == -2 ? fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  }
  return "unknown error";
}
