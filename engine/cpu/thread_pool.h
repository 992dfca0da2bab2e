// A fixed pool of worker threads for data-parallel loops. The calling thread works too.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ftllm::cpu {

class ThreadPool {
 public:
  // `threads` counts the caller: 1 means no workers. 0 means one per online core. With `numa_node` >= 0
  // the workers run on that node's cores (and so first-touch its memory).
  explicit ThreadPool(int threads = 0, int numa_node = -1)
      : ThreadPool(threads, numa_node >= 0 ? std::vector<int>{numa_node} : std::vector<int>{}) {}
  // --device numa: the threads are dealt out over `group_nodes` (one group per entry, in order; the
  // caller belongs to group 0) and each group's workers run on its node. parallel_for_groups then gives
  // each group its own share of the rows, the share whose weights live in that node's memory.
  ThreadPool(int threads, std::vector<int> group_nodes);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  int groups() const { return std::max<int>(1, int(group_nodes_.size())); }  // > 1: grouped by node

  // Calls fn(begin, end) over [0, n) in chunks of at least `grain`, spread over all threads; returns
  // when every chunk is done. Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // As parallel_for, but group g's threads cover only rows [split[g], split[g+1]) of split_rows(n, groups()):
  // the rows place_rows_on_nodes put in group g's memory. The same as parallel_for when not grouped.
  void parallel_for_groups(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // Group g's threads cover [bounds[g], bounds[g + 1]) (groups() + 1 bounds): work whose memory the
  // caller laid out by node. Not grouped: all of [bounds.front(), bounds.back()) over all threads.
  void parallel_for_bounds(const std::vector<int64_t>& bounds, int64_t grain,
                           const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct alignas(64) GroupRange {  // one cache line each: groups do not contend on their counters
    std::atomic<int64_t> next{0};
    int64_t end = 0, chunk = 1;
  };
  void worker_loop(int group);
  void work_on_current_job(int group);
  void run_job(const std::function<void(int64_t, int64_t)>& fn);

  std::vector<std::thread> workers_;
  std::vector<int> group_nodes_;  // the node of each group; empty: unbound
  std::vector<int> threads_in_group_;
  std::mutex mu_;
  std::condition_variable wake_;
  uint64_t generation_ = 0;  // guarded by mu_; bumped per job
  std::atomic<uint64_t> published_generation_{0};
  std::atomic<bool> stop_flag_{false};

  // The current job: one range per group, or range 0 for every thread when `shared_`.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  bool shared_ = true;
  std::unique_ptr<GroupRange[]> ranges_;
  std::atomic<int> done_{0};  // workers finished with the current job
};

// Bounds of `parts` row shares of `rows` ([0] = 0, [parts] = rows), each a multiple of 16 rows where it
// can be, so a weight's node slices and the threads that read them agree.
std::vector<int64_t> split_rows(int64_t rows, int parts);

}  // namespace ftllm::cpu
