#include "thread_pool.h"

#include <immintrin.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <numa.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <utility>

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
  active_.store(threads, std::memory_order_relaxed);  // before any worker starts: none may think it sits out
  for (int i = 0; i < threads; ++i) {
    const int group = int(int64_t(i) * groups / threads);  // contiguous runs: thread 0 (the caller) is in group 0
    ++threads_in_group_[size_t(group)];
    if (i == 0) continue;
    const int node = group_nodes_.empty() ? -1 : group_nodes_[size_t(group)];
    workers_.emplace_back([this, group, node, index = i - 1] {
      if (node >= 0 && numa_available() >= 0) {
        // libnuma fills its node-to-cpus cache unguarded on first use: one thread at a time (ThreadSanitizer).
        static std::mutex numa_mu;
        std::lock_guard lock(numa_mu);
        numa_run_on_node(node);
      }
      worker_loop(group, index);
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
  rest_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

constexpr int kIndexBits = 40;
constexpr uint64_t kIndexMask = (uint64_t(1) << kIndexBits) - 1;
uint64_t tag_of(uint64_t job) { return job << kIndexBits; }  // the job number's low 24 bits, above the index

// How long an idle worker spins before it sleeps, and a waiting caller before it yields its core: about
// the gap between two jobs of a decode step, whatever a pause instruction costs on this processor.
constexpr auto kSpin = std::chrono::microseconds(250);

// About four chunks per thread balances uneven rows without much contention on the counter.
constexpr int64_t kChunksPerThread = 4;

// How often an adapting pool looks at the machine's load: /proc/stat counts in 10 ms ticks, so shorter
// intervals would mostly measure its rounding.
constexpr auto kLoadCheck = std::chrono::milliseconds(200);
// The first look comes sooner: the pool starts with a model's load (~0.1 s for a 0.5B model), and a
// neighbour found only 200 ms on had the first tokens decode on two threads sharing its core. Five
// ticks still tell a busy core (1 +- 0.2) from a free one.
constexpr auto kFirstLoadCheck = std::chrono::milliseconds(50);

}  // namespace

void ThreadPool::set_range(size_t r, int64_t begin, int64_t end, int64_t chunk) {
  // The job about to be published is the next number (only the calling thread publishes jobs).
  const uint64_t next = published_generation_.load(std::memory_order_relaxed) + 1;
  ranges_[r].end.store(tag_of(next) | uint64_t(end), std::memory_order_relaxed);
  if (race_hook_) race_hook_("end set");
  ranges_[r].chunk.store(chunk, std::memory_order_relaxed);
  ranges_[r].claim.store(tag_of(next) | uint64_t(begin), std::memory_order_relaxed);
}

void ThreadPool::work_on_job(int group, uint64_t job) {
  GroupRange& r = ranges_[shared_.load(std::memory_order_relaxed) ? 0 : size_t(group)];
  const uint64_t tag = tag_of(job);
  uint64_t claim = r.claim.load(std::memory_order_acquire);
  for (;;) {
    if ((claim & ~kIndexMask) != tag) return;  // another job's range: this one is over
    if (race_hook_) race_hook_("claim read");
    const uint64_t end_word = r.end.load(std::memory_order_acquire);
    if ((end_word & ~kIndexMask) != tag) return;  // the next job's range is being set: this one is over
    const int64_t begin = int64_t(claim & kIndexMask), end = int64_t(end_word & kIndexMask);
    if (begin >= end) return;
    const int64_t stop = std::min(end, begin + r.chunk.load(std::memory_order_relaxed));
    if (!r.claim.compare_exchange_weak(claim, tag | uint64_t(stop), std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    // The chunk is this thread's: the job cannot end, nor fn_ change, before it is done.
    (*fn_)(begin, stop);
    remaining_.fetch_sub(stop - begin, std::memory_order_acq_rel);
    claim = r.claim.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop(int group, int index) {
  uint64_t seen = 0;
  for (;;) {
    if (index + 1 >= active_.load(std::memory_order_acquire)) {  // no free core for this one: sit out
      std::unique_lock lock(mu_);
      rest_.wait(lock, [&] { return stop_flag_.load(std::memory_order_acquire) || index + 1 < active_.load(std::memory_order_relaxed); });
      if (stop_flag_.load(std::memory_order_acquire)) return;  // (a job under way it may join: late threads take only what is left)
    }
    uint64_t g = published_generation_.load(std::memory_order_acquire);
    for (auto until = std::chrono::steady_clock::now() + kSpin; g == seen && std::chrono::steady_clock::now() < until;)
      for (int i = 0; i < 16 && g == seen; ++i) {
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
    if (wake_hook_) wake_hook_();
    work_on_job(group, g);
  }
}

void ThreadPool::run_job(const std::function<void(int64_t, int64_t)>& fn, int64_t items) {
  // The ranges are set; publishing the job's number makes them and fn_ visible to the workers.
  fn_ = &fn;
  remaining_.store(items, std::memory_order_relaxed);
  uint64_t job;
  {
    std::lock_guard lock(mu_);
    job = ++generation_;
    published_generation_.store(job, std::memory_order_release);
  }
  wake_.notify_all();
  work_on_job(0, job);  // the caller is in group 0
  // Only chunks that other threads hold are left: wait for them, spinning briefly, then giving the core
  // up in turns, so that a thread which shares it (a worker preempted mid-chunk) can finish.
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (remaining_.load(std::memory_order_acquire) != 0) {
    if (std::chrono::steady_clock::now() < until) _mm_pause();
    else std::this_thread::yield();
  }
}

void ThreadPool::adapt_to_machine_load(std::function<double()> free_cores) {
  if (!free_cores) free_cores = [load = std::make_shared<MachineLoad>()] { return load->free_cores(); };
  free_cores_ = std::move(free_cores);
  free_cores_();  // the start of the first interval: the first jobs (after a model's load) already know
  next_load_check_ = std::chrono::steady_clock::now() + kFirstLoadCheck;
}

void ThreadPool::update_active() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_load_check_) return;
  next_load_check_ = now + kLoadCheck;
  // Round to the nearest: a neighbour must take over half a core before a thread sits out.
  const int want = std::clamp(int(std::lround(free_cores_())), 1, size());
  if (want == active_.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard lock(mu_);
    active_.store(want, std::memory_order_release);
  }
  rest_.notify_all();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (free_cores_) update_active();
  const int threads = active();
  grain = std::max<int64_t>(1, grain);
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  shared_.store(true, std::memory_order_relaxed);
  set_range(0, 0, n, std::max(grain, (n + threads * kChunksPerThread - 1) / (threads * kChunksPerThread)));
  run_job(fn, n);
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
  // Each group's rows are its own threads' (they live in its node's memory), so no group takes another's.
  shared_.store(false, std::memory_order_relaxed);
  for (size_t g = 0; g < group_nodes_.size(); ++g) {
    const int64_t rows = bounds[g + 1] - bounds[g], threads = threads_in_group_[g];
    set_range(g, bounds[g], bounds[g + 1], std::max(grain, (rows + threads * kChunksPerThread - 1) / (threads * kChunksPerThread)));
  }
  run_job(fn, bounds.back() - bounds.front());
}

MachineLoad::MachineLoad() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) {
      if (size_t(c) >= cpus_.size()) cpus_.resize(size_t(c) + 1, false);
      cpus_[size_t(c)] = true;
    }
  cpu_count_ = std::max(1, CPU_COUNT(&set));
}

std::optional<MachineLoad::Sample> MachineLoad::sample() const {
  std::ifstream stat("/proc/stat");
  if (!stat) return std::nullopt;
  const double tick = 1.0 / double(sysconf(_SC_CLK_TCK));
  Sample s;
  std::string line;
  while (std::getline(stat, line)) {
    // cpuN user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait. Only
    // numbered CPUs count (not the "cpu" total line, nor the lines after the CPUs).
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || line[3] < '0' || line[3] > '9') continue;
    int cpu = -1;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (std::sscanf(line.c_str(), "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &user, &nice, &system, &idle, &iowait, &irq,
                    &softirq, &steal) != 9)
      continue;
    if (size_t(cpu) < cpus_.size() && cpus_[size_t(cpu)])
      s.busy_seconds += double(user + nice + system + irq + softirq + steal) * tick;
  }
  timespec own{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &own) != 0) return std::nullopt;
  s.own_seconds = double(own.tv_sec) + double(own.tv_nsec) * 1e-9;
  s.at = std::chrono::steady_clock::now();
  return s;
}

double MachineLoad::free_cores() {
  const std::optional<Sample> now = sample();
  if (!now) return cpu_count_;
  const std::optional<Sample> before = std::exchange(last_, now);
  if (!before) return cpu_count_;
  const double wall = std::chrono::duration<double>(now->at - before->at).count();
  if (wall <= 0) return cpu_count_;
  const double others = std::max(0.0, (now->busy_seconds - before->busy_seconds) - (now->own_seconds - before->own_seconds)) / wall;
  return cpu_count_ - others;
}

}  // namespace ftllm::cpu
