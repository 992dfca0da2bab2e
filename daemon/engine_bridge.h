// Carries work from other threads to the libuv loop thread: engine events (sampled tokens, finishes)
// from model worker threads, and the completion of background jobs such as model loads. The loop never
// waits on the engine.
#pragma once

#include <uv.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "../engine/engine.h"

namespace ftllm::daemon {

class EngineBridge {
 public:
  explicit EngineBridge(uv_loop_t* loop);
  ~EngineBridge();
  EngineBridge(const EngineBridge&) = delete;
  EngineBridge& operator=(const EngineBridge&) = delete;

  // A callback for the engine: each event it receives reaches `deliver` on the loop thread, in order.
  template <typename Event>
  std::function<void(const Event&)> make_callback(std::function<void(const Event&)> deliver) {
    auto target = std::make_shared<std::function<void(const Event&)>>(std::move(deliver));
    return [bridge = weak_poster(), target](const Event& e) { bridge([target, e] { (*target)(e); }); };
  }
  // Runs `task` on the loop thread, from any thread (dropped after close()).
  void post(std::function<void()> task);
  // post() for other threads to keep: it does nothing once the bridge is gone.
  std::function<void(std::function<void()>)> weak_poster() const;
  // Runs `work` on a thread of its own, then `then` on the loop thread (not at all after close()).
  void run_in_background(std::function<void()> work, std::function<void()> then);
  // Runs `work` on one of kWorkers threads (in order of arrival), then `then` (if any) on the loop thread: for work
  // that grows with a request's size (parsing, rendering, tokenizing), so the loop keeps answering.
  void run_on_workers(std::function<void()> work, std::function<void()> then);
  // Drops `garbage` on a worker: freeing a buffer of megabytes (a big request's body, prompt or tokens)
  // returns its pages to the kernel, milliseconds the loop would otherwise spend beside every client.
  template <typename T>
  void free_on_workers(T garbage) {
    run_on_workers([garbage = std::move(garbage)] {}, nullptr);
  }
  static constexpr int kWorkers = 4;
  static constexpr int kWorkerNice = 5;  // added to the daemon's niceness, for these threads alone
  // Stops delivering (what is in flight is dropped), waits for background jobs, releases the loop handle.
  void close();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<std::thread> jobs_;
  struct Workers;
  std::unique_ptr<Workers> workers_;
};

}  // namespace ftllm::daemon
