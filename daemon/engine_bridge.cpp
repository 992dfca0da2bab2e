#include "engine_bridge.h"

#include <sys/resource.h>
#include <unistd.h>

#include <exception>
#include <string>

#include "log.h"

namespace ftllm::daemon {

struct EngineBridge::State {
  uv_async_t async{};
  std::mutex mu;
  bool closed = false;
  std::vector<std::function<void()>> queue;  // run on the loop thread, in order

  void post(std::function<void()> task) {
    std::lock_guard lock(mu);
    if (closed) return;
    queue.push_back(std::move(task));
    uv_async_send(&async);
  }
};

struct EngineBridge::Workers {
  std::mutex mu;
  std::condition_variable wake;
  std::deque<std::pair<std::function<void()>, std::function<void()>>> queue;  // work, then
  bool stop = false;
  std::vector<std::thread> threads;
};

EngineBridge::EngineBridge(uv_loop_t* loop) : state_(std::make_shared<State>()), workers_(std::make_unique<Workers>()) {
  uv_async_init(loop, &state_->async, [](uv_async_t* a) {
    auto* s = static_cast<State*>(a->data);
    std::vector<std::function<void()>> tasks;
    {
      std::lock_guard lock(s->mu);
      tasks.swap(s->queue);
    }
    for (auto& task : tasks) {
      // No exception may cross libuv: a task that throws is logged and the loop goes on with the rest.
      try {
        task();
      } catch (const std::exception& e) {
        log_error(std::string("a task on the event loop failed: ") + e.what());
      } catch (...) {
        log_error("a task on the event loop failed");
      }
    }
  });
  state_->async.data = state_.get();
}

EngineBridge::~EngineBridge() { close(); }

void EngineBridge::close() {
  {
    std::lock_guard lock(state_->mu);
    if (state_->closed) return;
    state_->closed = true;
    state_->queue.clear();
    // The handle lives inside State; keep State alive until libuv is done with it.
    auto* keep = new std::shared_ptr<State>(state_);
    state_->async.data = keep;
    uv_close(reinterpret_cast<uv_handle_t*>(&state_->async),
             [](uv_handle_t* h) { delete static_cast<std::shared_ptr<State>*>(h->data); });
  }
  for (auto& t : jobs_) t.join();
  jobs_.clear();
  {
    std::lock_guard lock(workers_->mu);
    workers_->stop = true;
    workers_->queue.clear();
  }
  workers_->wake.notify_all();
  for (auto& t : workers_->threads) t.join();
  workers_->threads.clear();
}

std::function<void(std::function<void()>)> EngineBridge::weak_poster() const {
  std::weak_ptr<State> weak = state_;
  return [weak](std::function<void()> task) {
    if (auto s = weak.lock()) s->post(std::move(task));
  };
}

void EngineBridge::post(std::function<void()> task) { state_->post(std::move(task)); }

void EngineBridge::run_on_workers(std::function<void()> work, std::function<void()> then) {
  Workers& w = *workers_;
  std::lock_guard lock(w.mu);
  if (w.stop) return;
  w.queue.emplace_back(std::move(work), std::move(then));
  if (w.threads.size() < size_t(kWorkers) && w.threads.size() < w.queue.size())
    w.threads.emplace_back([&w, poster = weak_poster()] {
      // A little below the event loop's priority: when input-sized work fills every core, the loop
      // thread wins the CPU when it wakes (beside sixteen 16 MiB bodies on 2 cores the slowest /health
      // of a run went from 53-91 ms to 37-59 ms, alternated A/B, three runs each).
      const id_t self = static_cast<id_t>(gettid());
      (void)setpriority(PRIO_PROCESS, self, getpriority(PRIO_PROCESS, self) + kWorkerNice);
      for (;;) {
        std::unique_lock lock(w.mu);
        w.wake.wait(lock, [&] { return w.stop || !w.queue.empty(); });
        if (w.stop) return;
        auto [job, then] = std::move(w.queue.front());
        w.queue.pop_front();
        lock.unlock();
        try {
          job();
        } catch (const std::exception& e) {  // as on the loop: logged, and the rest goes on
          log_error(std::string("a worker task failed: ") + e.what());
        }
        job = nullptr;  // what it holds is freed here, off the loop
        if (then) poster(std::move(then));
      }
    });
  w.wake.notify_one();
}

void EngineBridge::run_in_background(std::function<void()> work, std::function<void()> then) {
  std::weak_ptr<State> weak = state_;
  jobs_.emplace_back([weak, work = std::move(work), then = std::move(then)]() mutable {
    work();
    if (auto s = weak.lock()) s->post(std::move(then));
  });
}

}  // namespace ftllm::daemon
