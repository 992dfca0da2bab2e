// Kernel launches in the simulator. A block's threads are fibers (Boost.Context) on one host thread:
// each runs until it reaches a barrier (__syncthreads, __syncwarp, a shuffle) or ends. A warp's barrier
// opens when its last live lane arrives; the block's when every live thread waits at it, and the
// scheduler (run_block) then picks who goes first. A pass in which no thread arrives anywhere or ends
// is a deadlock (threads waiting at barriers the others never reach): that is reported with the
// kernel's name and the process stops, where a device would hang. Blocks are independent, so several
// host threads take them in turn.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cpu/thread_pool.h"
#include "sim_runtime.h"

namespace ctx = boost::context;

namespace ftllm_sim {

namespace {

constexpr size_t kStackBytes = 128 << 10;
constexpr unsigned kMaxThreads = 1024;

struct Barrier {
  unsigned arrived = 0;
  uint64_t generation = 0;
};

struct Warp {
  unsigned live = 0;
  uint32_t live_mask = 0;
  Barrier barrier;
  uint64_t slots[2][32] = {};
};

struct Thread {
  dim3 idx;
  unsigned lane = 0, warp = 0;
  unsigned shuffles = 0;
  bool done = false;
  ctx::fiber fiber, back;
};

struct Block {
  const char* kernel = nullptr;
  dim3 idx, dim, grid;
  unsigned live = 0;
  uint64_t events = 0;  // arrivals and ends: what tells progress from deadlock
  Barrier barrier;
  std::vector<Warp> warps;
  std::vector<unsigned char> shared;
  std::vector<void*> fresh;  // static __shared__ arrays already filled in this block
};

thread_local Thread* this_thread = nullptr;
thread_local Block* this_block = nullptr;

}  // namespace

const dim3& thread_idx() { return this_thread->idx; }
const dim3& block_idx() { return this_block->idx; }
const dim3& block_dim() { return this_block->dim; }
const dim3& grid_dim() { return this_block->grid; }
void* dynamic_shared() { return this_block->shared.data(); }

void fresh_shared(void* p, size_t bytes) {
  std::vector<void*>& fresh = this_block->fresh;
  if (std::find(fresh.begin(), fresh.end(), p) != fresh.end()) return;
  fresh.push_back(p);
  std::memset(p, 0xff, bytes);
}

void kernel_fault(const char* what) {
  const Block* b = this_block;
  const Thread* t = this_thread;
  if (b && t)
    std::fprintf(stderr, "cudasim: kernel %s, block (%u,%u,%u), thread (%u,%u,%u): %s\n", b->kernel, b->idx.x, b->idx.y,
                 b->idx.z, t->idx.x, t->idx.y, t->idx.z, what);
  else
    std::fprintf(stderr, "cudasim: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

namespace {

void yield() {
  Thread* me = this_thread;
  me->back = std::move(me->back).resume();
  this_thread = me;
}

// A warp's barrier (a shuffle, __syncwarp) opens when its last live lane arrives.
void wait_in_warp(Barrier& b, unsigned live) {
  Block& blk = *this_block;
  ++blk.events;
  if (++b.arrived >= live) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  const uint64_t g = b.generation;
  while (b.generation == g) yield();
}

// The block's barrier is opened by the scheduler once every live thread waits at it (run_block), so it
// also chooses which warp goes first after it.
void wait_in_block(Barrier& b) {
  ++this_block->events;
  ++b.arrived;
  const uint64_t g = b.generation;
  while (b.generation == g) yield();
}

// An ended lane no longer holds its warp back.
void release_if_complete(Barrier& b, unsigned live) {
  if (b.arrived > 0 && b.arrived >= live) {
    b.arrived = 0;
    ++b.generation;
  }
}

// Stacks with a guard page below each, made once per host thread, reused by every block it runs and
// unmapped when the thread ends (each guard page is a mapping of its own, and mappings are limited).
class Stacks {
 public:
  ~Stacks() {
    if (base_) munmap(base_, slot_ * kMaxThreads);
  }
  ctx::stack_context get(unsigned i) {
    if (!base_) {
      page_ = size_t(sysconf(_SC_PAGESIZE));
      slot_ = kStackBytes + page_;
      void* p = mmap(nullptr, slot_ * kMaxThreads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) kernel_fault("cannot map fiber stacks");
      base_ = static_cast<char*>(p);
      for (unsigned s = 0; s < kMaxThreads; ++s) mprotect(base_ + s * slot_, page_, PROT_NONE);
    }
    ctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = base_ + (i + 1) * slot_;  // stacks grow down, from the slot's top
    return sc;
  }

 private:
  char* base_ = nullptr;
  size_t page_ = 0, slot_ = 0;
};
thread_local Stacks stacks;

// The stack allocator Boost.Context asks: slot i of this host thread's stacks, never returned.
struct SlotStack {
  unsigned slot;
  ctx::stack_context allocate() { return stacks.get(slot); }
  void deallocate(ctx::stack_context&) noexcept {}
};

void run_block(const char* kernel, dim3 grid, dim3 dim, size_t shared, uint64_t linear_block, uint64_t launch_count,
               void (*body)(void*, void*), void* k, void* p) {
  Block b;
  b.kernel = kernel;
  b.grid = grid;
  b.dim = dim;
  b.idx = dim3(unsigned(linear_block % grid.x), unsigned(linear_block / grid.x % grid.y),
               unsigned(linear_block / (uint64_t(grid.x) * grid.y)));
  const unsigned n = dim.x * dim.y * dim.z;
  b.live = n;
  b.warps.resize((n + 31) / 32);
  for (unsigned i = 0; i < n; ++i) {
    b.warps[i / 32].live++;
    b.warps[i / 32].live_mask |= 1u << (i % 32);
  }
  b.shared.assign(shared, 0xff);  // uninitialised shared memory reads as NaN
  this_block = &b;
  std::vector<Thread> threads(n);
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = threads[i];
    t.idx = dim3(i % dim.x, i / dim.x % dim.y, i / (dim.x * dim.y));
    t.lane = i % 32;
    t.warp = i / 32;
    t.fiber = ctx::fiber(std::allocator_arg, SlotStack{i}, [&b, &t, body, k, p](ctx::fiber&& back) {
      t.back = std::move(back);
      this_thread = &t;
      body(k, p);
      t.done = true;
      ++b.events;
      --b.live;
      Warp& w = b.warps[t.warp];
      --w.live;
      w.live_mask &= ~(1u << t.lane);
      release_if_complete(w.barrier, w.live);
      return std::move(t.back);
    });
  }
  // The schedule is the most adversarial a device may choose: between two of the block's barriers each
  // warp runs as far as it can before the next starts, lane after lane between shuffles, and the order
  // of warps and lanes flips at every barrier and between neighbouring blocks. So a missing barrier
  // shows: in some block the thread that should have written first, or read before an overwrite, comes
  // second and reads the wrong state.
  const unsigned warps = unsigned(b.warps.size());
  for (uint64_t phase = 0; b.live > 0;) {
    const bool reverse = (linear_block + launch_count + phase) % 2 == 1;
    const uint64_t before = b.events;
    for (unsigned wi = 0; wi < warps; ++wi) {
      const unsigned w = reverse ? warps - 1 - wi : wi;
      const unsigned first = w * 32, lanes = std::min(32u, n - first);
      for (uint64_t progress = ~uint64_t(0); progress != b.events;) {
        progress = b.events;
        for (unsigned j = 0; j < lanes; ++j) {
          Thread& t = threads[first + (reverse ? lanes - 1 - j : j)];
          if (t.done) continue;
          this_thread = &t;
          t.fiber = std::move(t.fiber).resume();
        }
      }
    }
    if (b.live > 0 && b.barrier.arrived == b.live) {  // everyone left waits at __syncthreads: open it
      b.barrier.arrived = 0;
      ++b.barrier.generation;
      ++phase;
      continue;
    }
    if (b.live > 0 && b.events == before) {
      this_thread = nullptr;
      for (Thread& t : threads)
        if (!t.done) {
          this_thread = &t;
          break;
        }
      kernel_fault("deadlock: threads wait at a barrier or shuffle that other live threads of the block never reach");
    }
  }
  this_thread = nullptr;
  this_block = nullptr;
}

std::mutex launch_mu;  // one kernel at a time, whichever host thread or device queues it
uint64_t launches = 0;  // under launch_mu

}  // namespace

void syncthreads() { wait_in_block(this_block->barrier); }

void syncwarp(unsigned mask) {
  Warp& w = this_block->warps[this_thread->warp];
  if (mask != w.live_mask)
    kernel_fault("__syncwarp with a mask other than the warp's live lanes (not simulated)");
  wait_in_warp(w.barrier, w.live);
}

uint64_t exchange(unsigned mask, uint64_t mine, int mode, int arg, int width) {
  Thread& t = *this_thread;
  Warp& w = this_block->warps[t.warp];
  if (!(mask >> t.lane & 1u)) kernel_fault("a shuffle by a lane outside its own mask");
  if ((mask & w.live_mask) != mask)
    kernel_fault("a shuffle's mask names lanes that have ended or do not exist (undefined on a device)");
  if (mask != w.live_mask) kernel_fault("a shuffle over part of the live lanes (not simulated)");
  if (width <= 0 || width > 32 || (width & (width - 1))) kernel_fault("a shuffle width that is not a power of two <= 32");
  const unsigned buffer = t.shuffles++ & 1u;  // two buffers: a lane cannot overwrite what others still read
  w.slots[buffer][t.lane] = mine;
  wait_in_warp(w.barrier, w.live);
  const int lane = int(t.lane), start = lane & ~(width - 1);
  int src = lane;
  switch (mode) {
    case kXor: src = lane ^ arg; break;
    case kDown: src = lane + arg; break;
    case kUp: src = lane - arg; break;
    case kIndex: src = start + (arg & (width - 1)); break;
  }
  if (src < start || src >= start + width) src = lane;  // outside the segment: the lane keeps its value
  if (!(mask >> src & 1u)) kernel_fault("a shuffle reads a lane outside its mask");
  return w.slots[buffer][src];
}

Launch::Launch(const char* kernel, dim3 grid, dim3 block, size_t shared, CUstream_st* stream)
    : name_(kernel), grid_(grid), block_(block), shared_(shared) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  const bool config_ok = threads >= 1 && threads <= kMaxThreads && block.x <= 1024 && block.y <= 1024 && block.z <= 64 &&
                         grid.x >= 1 && grid.x <= 0x7fffffffu && grid.y >= 1 && grid.y <= 65535 && grid.z >= 1 &&
                         grid.z <= 65535 && shared <= (48u << 10);
  if (!config_ok) {
    std::fprintf(stderr, "cudasim: %s<<<(%u,%u,%u), (%u,%u,%u), %zu>>>: invalid configuration\n", kernel, grid.x, grid.y,
                 grid.z, block.x, block.y, block.z, shared);
    set_launch_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (stream_device(stream) != current_device()) {
    std::fprintf(stderr, "cudasim: %s launched on a stream of another device (or none made)\n", kernel);
    set_launch_error(cudaErrorInvalidResourceHandle);
    return;
  }
  valid_ = true;
}

void Launch::check_pointer(const void* p, int index) const {
  if (!p) return;
  const int d = device_of(p, 1);
  if (d == current_device()) return;
  char what[200];
  std::snprintf(what, sizeof what, "kernel %s: argument %d (%p) is %s", name_, index, p,
                d < 0 ? "not device memory" : "memory of another device");
  kernel_fault(what);
}

void Launch::execute(void (*body)(void*, void*), void* kernel, void* params) {
  std::lock_guard lock(launch_mu);
  const uint64_t blocks = uint64_t(grid_.x) * grid_.y * grid_.z, launch = launches++;
  const auto block = [&](uint64_t i) {
    run_block(name_, grid_, block_, shared_, i, launch, body, kernel, params);
  };
  if (blocks == 1) {
    block(0);
    return;
  }
  // The engine's pool: blocks are independent, so the host's cores take them in turn.
  static auto* pool = new ftllm::cpu::ThreadPool(int(std::min(8u, std::max(1u, std::thread::hardware_concurrency()))));
  pool->parallel_for(int64_t(blocks), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) block(uint64_t(i));
  });
}

}  // namespace ftllm_sim
