// Greedy generation for model tests: plainly, and with placements applied from inside the stream (the
// way ftllmctl rebalance reaches a model between two steps of a running generation).
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "model_run.h"
#include "runner/model_instance.h"

namespace ftllm::test {

inline GenerationRequest greedy_request(const std::vector<int32_t>& prompt, int32_t n) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.max_tokens = n;
  r.ignore_eos = true;
  return r;
}

inline std::vector<int32_t> greedy(ModelInstance& m, const std::vector<int32_t>& prompt, int32_t n) {
  return test::generate(m, {greedy_request(prompt, n)})[0].tokens;
}

// n greedy tokens; moves[i] is asked for once 8 * (i + 1) tokens have come. *applied: how many were asked.
inline std::vector<int32_t> greedy_while_moving(ModelInstance& m, const std::vector<int32_t>& prompt, int32_t n,
                                                const std::vector<std::string>& moves, size_t* applied) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> got;
  bool done = false;
  size_t next = 0;
  m.runner().submit(greedy_request(prompt, n), [&](const GenerationEvent& e) {
    std::lock_guard lock(mu);
    got.insert(got.end(), e.tokens.begin(), e.tokens.end());
    if (!e.finished && next < moves.size() && got.size() >= 8 * (next + 1))
      m.runner().set_placement(Placement::parse(moves[next++], m.config().num_layers));
    if (e.finished) done = true;
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  *applied = next;
  return got;
}

}  // namespace ftllm::test
