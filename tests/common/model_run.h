// What model tests and tools ask of a resident model beyond serving: logits after a prompt (one prefill
// pass of a fresh sequence), logits reached through the decode path, and whole generations. Each runs
// between two steps of the model's worker (Runner::exclusive) or through its request queue.
#pragma once

#include <condition_variable>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "engine.h"
#include "runner/model_instance.h"

namespace ftllm::test {

// Next-token logits after each prefix of `tokens` that `positions_wanted` lists (0-based positions), with
// `adapter`'s LoRA when given.
inline std::vector<std::vector<float>> prompt_logits(ModelInstance& m, const std::vector<int32_t>& tokens,
                                                     const std::vector<int64_t>& positions_wanted,
                                                     const model::LoraAdapter* adapter = nullptr) {
  const int64_t vocab = m.config().vocab_size;
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab) throw EngineError("token id " + std::to_string(t) + " is outside the vocabulary");
  std::vector<std::vector<float>> out;
  m.runner().exclusive([&](const ForwardPass& pass) {
    kvcache::SequenceKv kv;
    if (!kv.reserve(pass.kv, int64_t(tokens.size()))) throw EngineError("the prompt does not fit in the KV cache");
    model::Batch batch;
    batch.tokens = tokens;
    for (size_t i = 0; i < tokens.size(); ++i) {
      batch.positions.push_back(int64_t(i));
      batch.seq.push_back(0);
    }
    batch.logit_rows = positions_wanted;
    batch.adapters = {adapter};
    const Tensor logits = pass.forward(batch, {&kv});
    kv.release(pass.kv);
    for (size_t r = 0; r < positions_wanted.size(); ++r) {
      const float* row = logits.as<float>() + int64_t(r) * vocab;
      out.emplace_back(row, row + vocab);
    }
  });
  return out;
}

// Next-token logits after all of `tokens`, reached by prefilling the first `prefill` tokens in one pass
// and then decoding the rest one step at a time.
inline std::vector<float> decode_logits(ModelInstance& m, const std::vector<int32_t>& tokens, size_t prefill,
                                        const model::LoraAdapter* adapter = nullptr) {
  std::vector<float> out;
  m.runner().exclusive([&](const ForwardPass& pass) {
    kvcache::SequenceKv kv;
    if (tokens.empty() || prefill == 0 || prefill > tokens.size() || !kv.reserve(pass.kv, int64_t(tokens.size())))
      throw EngineError("decode_logits: need 1 <= prefill <= tokens, and room in the KV cache");
    Tensor logits;
    for (size_t done = 0; done < tokens.size();) {
      const size_t n = done == 0 ? prefill : 1;
      model::Batch batch;
      for (size_t i = done; i < done + n; ++i) {
        batch.tokens.push_back(tokens[i]);
        batch.positions.push_back(int64_t(i));
        batch.seq.push_back(0);
      }
      batch.logit_rows = {int64_t(n) - 1};
      batch.adapters = {adapter};
      logits = pass.forward(batch, {&kv});
      done += n;
    }
    kv.release(pass.kv);
    out.assign(logits.as<float>(), logits.as<float>() + m.config().vocab_size);
  });
  return out;
}

// A generation's result and, when its request asked for them, each token's log-probabilities.
struct Traced {
  GenerationResult result;
  std::vector<TokenLogprob> logprobs;
};

// Runs the requests to completion through the model's queue, batched together; results in request order.
inline std::vector<Traced> generate_traced(ModelInstance& m, std::vector<GenerationRequest> requests) {
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::vector<Traced> results(requests.size());
  size_t remaining = requests.size();
  for (size_t i = 0; i < requests.size(); ++i)
    m.runner().submit(std::move(requests[i]), [&, i](const GenerationEvent& e) {
      std::lock_guard lock(done_mu);
      results[i].logprobs.insert(results[i].logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      if (!e.finished) return;
      results[i].result = e.result;
      if (--remaining == 0) done_cv.notify_all();
    });
  std::unique_lock lock(done_mu);
  done_cv.wait(lock, [&] { return remaining == 0; });
  return results;
}

inline std::vector<GenerationResult> generate(ModelInstance& m, std::vector<GenerationRequest> requests) {
  std::vector<GenerationResult> results;
  for (Traced& t : generate_traced(m, std::move(requests))) results.push_back(std::move(t.result));
  return results;
}

}  // namespace ftllm::test

namespace ftllm::test {

// The same through the engine's one call (token ids in, one choice each): the named model's results, or
// the refusal's message.
inline Status generate(Engine& engine, const std::string& name, std::vector<GenerationRequest> requests,
                       std::vector<GenerationResult>& results) {
  std::mutex done_mu;
  std::condition_variable done_cv;
  results.assign(requests.size(), {});
  size_t remaining = requests.size();
  for (size_t i = 0; i < requests.size(); ++i) {
    TextRequest r;
    r.model = name;
    r.input = TextRequest::Input::Tokens;
    r.token_prompts = {requests[i].prompt};
    r.generation = requests[i];
    TextSubmission s = engine.submit(r, [&, i](const TextEvent& e) {
      std::lock_guard lock(done_mu);
      results[i].tokens.insert(results[i].tokens.end(), e.tokens.begin(), e.tokens.end());
      if (!e.finished) return;
      results[i].finish = e.finish;
      results[i].error = e.error;
      if (--remaining == 0) done_cv.notify_all();
    });
    if (s.refusal != Refusal::None) return Status::error(s.error);
  }
  std::unique_lock lock(done_mu);
  done_cv.wait(lock, [&] { return remaining == 0; });
  return Status::success();
}

}  // namespace ftllm::test
