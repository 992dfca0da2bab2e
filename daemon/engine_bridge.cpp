#include "engine_bridge.h"

namespace ftllm::daemon {

struct EngineBridge::State {
  uv_async_t async{};
  std::mutex mu;
  bool closed = false;
  struct Item {
    std::shared_ptr<std::function<void(const GenerationEvent&)>> deliver;
    GenerationEvent event;
  };
  std::vector<Item> queue;
};

EngineBridge::EngineBridge(uv_loop_t* loop) : state_(std::make_shared<State>()) {
  uv_async_init(loop, &state_->async, [](uv_async_t* a) {
    auto* s = static_cast<State*>(a->data);
    std::vector<State::Item> items;
    {
      std::lock_guard lock(s->mu);
      items.swap(s->queue);
    }
    for (auto& item : items) (*item.deliver)(item.event);
  });
  state_->async.data = state_.get();
}

EngineBridge::~EngineBridge() { close(); }

void EngineBridge::close() {
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

GenerationCallback EngineBridge::make_callback(std::function<void(const GenerationEvent&)> deliver) {
  auto target = std::make_shared<std::function<void(const GenerationEvent&)>>(std::move(deliver));
  std::weak_ptr<State> weak = state_;
  return [weak, target](const GenerationEvent& e) {
    auto s = weak.lock();
    if (!s) return;
    std::lock_guard lock(s->mu);
    if (s->closed) return;
    s->queue.push_back({target, e});
    uv_async_send(&s->async);
  };
}

}  // namespace ftllm::daemon
