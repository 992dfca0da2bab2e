#include "thread_pool.h"

#include <immintrin.h>

#include <numa.h>

#include <algorithm>

namespace ftllm::cpu {

std::vector<int64_t> split_rows(int64_t rows, int parts) {
  std::vector<int64_t> bounds(size_t(parts) + 1, rows);
  bounds[0] = 0;
  for (int p = 1; p < parts; ++p) bounds[size_t(p)] = std::min(rows, (rows * p / parts + 8) / 16 * 16);
  return bounds;
}

ThreadPool::ThreadPool(int threads, std::vector<int> group_nodes)
    : group_nodes_(std::move(group_nodes)), ranges_(new GroupRange[std::max<size_t>(1, group_nodes_.size())]) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  const int groups = this->groups();
  threads = std::max(threads, groups);  // every group needs a thread, or its rows go unread
  threads_in_group_.assign(size_t(groups), 0);
  for (int i = 0; i < threads; ++i) {
    const int group = int(int64_t(i) * groups / threads);  // contiguous runs: thread 0 (the caller) is in group 0
    ++threads_in_group_[size_t(group)];
    if (i == 0) continue;
    const int node = group_nodes_.empty() ? -1 : group_nodes_[size_t(group)];
    workers_.emplace_back([this, group, node] {
      if (node >= 0 && numa_available() >= 0) numa_run_on_node(node);
      worker_loop(group);
    });
  }
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

void ThreadPool::work_on_current_job(int group) {
  GroupRange& r = ranges_[shared_ ? 0 : size_t(group)];
  for (;;) {
    int64_t begin = r.next.fetch_add(r.chunk, std::memory_order_relaxed);
    if (begin >= r.end) break;
    (*fn_)(begin, std::min(r.end, begin + r.chunk));
  }
}

void ThreadPool::worker_loop(int group) {
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
    work_on_current_job(group);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_job(const std::function<void(int64_t, int64_t)>& fn) {
  // Every worker checks in once per job, so the next job is never published while a worker may still
  // read this one's fields.
  fn_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  work_on_current_job(0);
  const int workers = int(workers_.size());
  while (done_.load(std::memory_order_acquire) != workers) _mm_pause();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = size();
  grain = std::max<int64_t>(1, grain);
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // About four chunks per thread balances uneven rows without much contention on the counter.
  shared_ = true;
  ranges_[0].next.store(0, std::memory_order_relaxed);
  ranges_[0].end = n;
  ranges_[0].chunk = std::max(grain, (n + threads * 4 - 1) / (threads * 4));
  run_job(fn);
}

void ThreadPool::parallel_for_groups(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (group_nodes_.size() < 2) return parallel_for(n, grain, fn);
  parallel_for_bounds(split_rows(n, groups()), grain, fn);
}

void ThreadPool::parallel_for_bounds(const std::vector<int64_t>& bounds, int64_t grain,
                                     const std::function<void(int64_t, int64_t)>& fn) {
  if (group_nodes_.size() < 2) {
    const int64_t begin = bounds.front();
    return parallel_for(bounds.back() - begin, grain, [&](int64_t b, int64_t e) { fn(begin + b, begin + e); });
  }
  if (bounds.back() <= bounds.front()) return;
  grain = std::max<int64_t>(1, grain);
  shared_ = false;
  for (size_t g = 0; g < group_nodes_.size(); ++g) {
    const int64_t rows = bounds[g + 1] - bounds[g], threads = threads_in_group_[g];
    ranges_[g].next.store(bounds[g], std::memory_order_relaxed);
    ranges_[g].end = bounds[g + 1];
    ranges_[g].chunk = std::max(grain, (rows + threads * 4 - 1) / (threads * 4));
  }
  run_job(fn);
}

}  // namespace ftllm::cpu
