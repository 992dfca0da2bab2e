// A fixed pool of worker threads for data-parallel loops. The calling thread works too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ftllm::cpu {

class ThreadPool {
 public:
  // `threads` counts the caller: 1 means no workers. 0 means one per online core. With `numa_node` >= 0
  // the workers run on that node's cores (and so first-touch its memory).
  explicit ThreadPool(int threads = 0, int numa_node = -1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  int numa_node() const { return numa_node_; }

  // Calls fn(begin, end) over [0, n) in chunks of at least `grain`, spread over all threads; returns
  // when every chunk is done. Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void work_on_current_job();

  std::vector<std::thread> workers_;
  int numa_node_ = -1;
  std::mutex mu_;
  std::condition_variable wake_;
  uint64_t generation_ = 0;  // guarded by mu_; bumped per job
  std::atomic<uint64_t> published_generation_{0};
  std::atomic<bool> stop_flag_{false};

  // The current job.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<int> done_{0};  // workers finished with the current job
};

}  // namespace ftllm::cpu
