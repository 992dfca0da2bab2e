// Carries engine events (sampled tokens, finishes) from model worker threads to the libuv loop thread,
// where responses are written. The loop never waits on the engine.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <mutex>
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
  GenerationCallback make_callback(std::function<void(const GenerationEvent&)> deliver);
  // Stops delivering (events still in flight are dropped) and releases the loop handle.
  void close();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ftllm::daemon
