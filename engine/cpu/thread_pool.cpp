#include "thread_pool.h"

#include <immintrin.h>

#include <numa.h>

#include <algorithm>

namespace ftllm::cpu {

ThreadPool::ThreadPool(int threads, int numa_node) : numa_node_(numa_node) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i)
    workers_.emplace_back([this] {
      if (numa_node_ >= 0 && numa_available() >= 0) numa_run_on_node(numa_node_);
      worker_loop();
    });
}

ThreadPool::~ThreadPool() {
  stop_flag_.store(true, std::memory_order_release);
  {
    std::lock_guard lock(mu_);
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on_current_job() {
  for (;;) {
    int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) break;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly: decode issues many small jobs back to back, and a futex wake costs more than one.
    uint64_t g = published_generation_.load(std::memory_order_acquire);
    for (int spin = 0; spin < 20000 && g == seen; ++spin) {
      _mm_pause();
      g = published_generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return generation_ != seen; });
      g = generation_;
    }
    seen = g;
    if (stop_flag_.load(std::memory_order_acquire)) return;
    work_on_current_job();
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = size();
  grain = std::max<int64_t>(1, grain);
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // About four chunks per thread balances uneven rows without much contention on `next_`.
  int64_t chunk = std::max(grain, (n + threads * 4 - 1) / (threads * 4));
  // Every worker checks in once per job, so the next job is never published while a worker may still
  // read this one's fields.
  fn_ = &fn;
  n_ = n;
  chunk_ = chunk;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  work_on_current_job();
  const int workers = int(workers_.size());
  while (done_.load(std::memory_order_acquire) != workers) _mm_pause();
}

}  // namespace ftllm::cpu
