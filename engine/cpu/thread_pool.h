// A fixed pool of worker threads for data-parallel loops. The calling thread works too.
// A job is a range cut into small chunks that threads take as they come, so a thread that is late (woken
// late, or sharing its core with another busy process) leaves its share to the others instead of stalling
// the step: the caller waits only for chunks a thread has taken, never for a thread to turn up. Idle
// workers spin for a short while (decode issues small jobs back to back), then sleep on a futex.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
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
  // Threads jobs run on now (the caller included): size() unless adapt_to_machine_load() left some out.
  int active() const { return active_.load(std::memory_order_relaxed); }

  // Runs jobs on only as many threads as the machine has cores free for them: every 200 ms (the first
  // time 50 ms after this call) the caller asks `free_cores` (by default MachineLoad below) and, if fewer
  // than size() are free, the rest of the workers sit out (asleep) until cores free up. Two threads
  // sharing one core with a busy neighbour decoded slower than one thread alone (each step waits for the
  // chunks of whichever thread is off its core). Not for grouped pools (each group needs its threads).
  void adapt_to_machine_load(std::function<double()> free_cores = {});
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

  // For tests: called by a worker each time it wakes for a job, before it looks for work (a worker that
  // is late by as long as `hook` takes). Set before the pool runs jobs.
  void set_wake_hook_for_tests(std::function<void()> hook) { wake_hook_ = std::move(hook); }
  // Called where a race can open: "claim read" (a thread has read its job's next index and is about to
  // read the end) and "end set" (the caller has set the next job's end, not yet its first index).
  void set_race_hook_for_tests(std::function<void(const char* where)> hook) { race_hook_ = std::move(hook); }

 private:
  // A group's range of the current job. `claim` packs the job's number (its low 24 bits, high in the
  // word) with the next index to hand out (the low 40 bits), and `end` packs it with the range's end:
  // a thread takes a chunk only by a compare-exchange naming its job, against an end naming the same
  // job, so a thread still in an earlier job takes nothing from a later one (an end of the next job
  // read beside a claim of the last one once let a late thread run the finished job's function).
  struct alignas(64) GroupRange {  // one cache line each: groups do not contend on their counters
    std::atomic<uint64_t> claim{0}, end{0};
    std::atomic<int64_t> chunk{1};  // any job's chunk size is safe to use: it only cuts the range finer
  };
  void set_range(size_t r, int64_t begin, int64_t end, int64_t chunk);
  void worker_loop(int group, int index);
  void update_active();
  void work_on_job(int group, uint64_t job);
  void run_job(const std::function<void(int64_t, int64_t)>& fn, int64_t items);

  std::vector<std::thread> workers_;
  std::vector<int> group_nodes_;  // the node of each group; empty: unbound
  std::vector<int> threads_in_group_;
  std::mutex mu_;
  std::condition_variable wake_;
  uint64_t generation_ = 0;  // guarded by mu_; bumped per job
  std::atomic<uint64_t> published_generation_{0};
  std::atomic<bool> stop_flag_{false};

  // The current job: one range per group, or range 0 for every thread when `shared_`. fn_ is read only
  // by a thread holding a chunk of the job, which cannot end (nor fn_ change) before that chunk is done.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  std::atomic<bool> shared_{true};
  std::unique_ptr<GroupRange[]> ranges_;
  std::atomic<int64_t> remaining_{0};  // items of the current job not yet done
  // adapt_to_machine_load: worker i takes part while i + 1 < active_ (changed under mu_); the others wait on rest_.
  std::atomic<int> active_{1};
  std::condition_variable rest_;
  std::function<double()> free_cores_;  // empty: not adapting
  std::chrono::steady_clock::time_point next_load_check_{};
  std::function<void()> wake_hook_;
  std::function<void(const char*)> race_hook_;
};

// How many of this process's CPUs (its affinity) others left free since the last call: the CPUs'
// busy time in /proc/stat, less this process's own CPU time, per second of wall time. The first call
// (no interval yet) says all of them.
class MachineLoad {
 public:
  MachineLoad();
  double free_cores();

 private:
  struct Sample {
    double busy_seconds = 0, own_seconds = 0;
    std::chrono::steady_clock::time_point at;
  };
  std::optional<Sample> sample() const;
  std::vector<bool> cpus_;  // by CPU number: in this process's affinity
  int cpu_count_ = 1;
  std::optional<Sample> last_;
};

// Bounds of `parts` row shares of `rows` ([0] = 0, [parts] = rows), each a multiple of 16 rows where it
// can be, so a weight's node slices and the threads that read them agree.
std::vector<int64_t> split_rows(int64_t rows, int parts);

}  // namespace ftllm::cpu
