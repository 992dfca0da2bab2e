// What a kernel sees when the simulator runs it on the host: CUDA's qualifiers, the built-in index
// variables, warp shuffles and barriers, and the launch that replaces `kernel<<<grid, block, shared,
// stream>>>(args)` (hostify.py rewrites the one into the other). Each thread of a block is a fiber;
// barriers and shuffles switch between them, so a block's threads meet at every barrier as they would
// on the device, and a barrier some threads never reach is reported instead of hanging.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
// A block runs on one host thread at a time, so a thread-local static is the block's shared memory.
#define __shared__ static thread_local

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;

struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) int2 { int x, y; };

struct CUstream_st;

namespace ftllm_sim {

// The built-ins of the running thread and block.
const dim3& thread_idx();
const dim3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

void syncthreads();
void syncwarp(unsigned mask);
// Lane `src_lane(lane)`'s value of the 8 bytes each lane of the warp offers (the lanes in `mask` all
// take part, as __shfl_*_sync requires).
uint64_t exchange(unsigned mask, uint64_t mine, int mode, int arg, int width);
void* dynamic_shared();  // the block's `extern __shared__` bytes
// A static __shared__ array as a block's first thread reaches it: filled with NaN bytes, so that a read
// of what no thread of this block wrote shows (hostify.py adds the call after each declaration).
void fresh_shared(void* p, size_t bytes);
[[noreturn]] void kernel_fault(const char* what);

enum ShuffleMode { kXor, kDown, kUp, kIndex };
template <typename T>
T shuffle(unsigned mask, T v, int mode, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = exchange(mask, bits, mode, arg, width);
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// One launch: checks the configuration as the runtime does (an error for cudaGetLastError, nothing run)
// and otherwise runs every block before returning (the stream's order is the call order).
class Launch {
 public:
  Launch(const char* kernel, dim3 grid, dim3 block, size_t shared = 0, CUstream_st* stream = nullptr);

  template <typename... Params, typename... Args>
  void run(void (*kernel)(Params...), Args&&... args) {
    if (!valid_) return;
    // Arguments are copied once at launch, converted to the kernel's parameter types, as on a device.
    std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
    int index = 0;
    std::apply([&](const auto&... p) { (check_argument(p, index++), ...); }, params);
    execute(
        [](void* k, void* p) {
          std::apply(reinterpret_cast<void (*)(Params...)>(k), *static_cast<std::tuple<std::decay_t<Params>...>*>(p));
        },
        reinterpret_cast<void*>(kernel), &params);
  }

 private:
  // Every pointer a kernel gets must be memory of the launching device (or null).
  template <typename T>
  void check_argument(const T& v, int index) const {
    if constexpr (std::is_pointer_v<T>) check_pointer(v, index);
  }
  void check_pointer(const void* p, int index) const;
  void execute(void (*body)(void*, void*), void* kernel, void* params);
  const char* name_;
  dim3 grid_, block_;
  size_t shared_;
  bool valid_ = false;
};

}  // namespace ftllm_sim

#define threadIdx (::ftllm_sim::thread_idx())
#define blockIdx (::ftllm_sim::block_idx())
#define blockDim (::ftllm_sim::block_dim())
#define gridDim (::ftllm_sim::grid_dim())
constexpr int warpSize = 32;

inline void __syncthreads() { ::ftllm_sim::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::ftllm_sim::syncwarp(mask); }
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::ftllm_sim::shuffle(mask, v, ::ftllm_sim::kXor, lane_mask, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::ftllm_sim::shuffle(mask, v, ::ftllm_sim::kDown, int(delta), width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::ftllm_sim::shuffle(mask, v, ::ftllm_sim::kUp, int(delta), width);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::ftllm_sim::shuffle(mask, v, ::ftllm_sim::kIndex, src_lane, width);
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __int_as_float(int i) { return __uint_as_float(unsigned(i)); }
inline int __float_as_int(float f) { return int(__float_as_uint(f)); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float a, float b) { return a / b; }
template <typename T>
T __ldg(const T* p) {
  return *p;
}

// CUDA's integer min/max overloads, which device code calls unqualified.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
