// Continuous batching as plain data: plan() says which tokens of which sequences the next forward
// step feeds; commit() takes that step's logits, samples, and decides who has finished. No model,
// no threads: the model runner calls these around each forward pass.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "request.h"
#include "sampling.h"

namespace ftllm::scheduler {

struct SchedulerLimits {
  // Prompt tokens fed in one step, over all sequences: long prompts go in slices so running streams keep
  // flowing between them.
  int64_t max_batch_tokens = 512;
  int32_t max_running = 8;          // sequences decoding at once
};

// One sequence's share of a step: `tokens` at positions start_pos, start_pos + 1, ...
struct StepItem {
  uint64_t seq_id;
  std::vector<int32_t> tokens;
  int64_t start_pos;
};

struct StepPlan {
  std::vector<StepItem> items;
  bool empty() const { return items.empty(); }
};

// What the runner says of a waiting sequence before it joins a step.
struct Admission {
  enum Kind {
    Join,  // it runs from this step on, feeding from token `cached` (the ones before are in the cache)
    Skip,  // not this step (another sequence is computing its prefix); later ones may join
    Wait,  // not this step, nor anyone behind it (no room in the KV cache)
  } kind = Join;
  int64_t cached = 0;
};
using Admit = std::function<Admission(uint64_t seq_id, std::span<const int32_t> context)>;

struct Finished {
  uint64_t seq_id;
  GenerationResult result;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerLimits limits = {}) : limits_(limits) {}

  // `eos_ids` are the model's end-of-sequence tokens (ignored when the request says ignore_eos).
  // `id`: the sequence's id (the caller's request id), or 0 for the next free one.
  uint64_t add(GenerationRequest request, std::span<const int32_t> eos_ids, uint64_t id = 0);
  void cancel(uint64_t seq_id);
  // Ends a sequence with an error (for example when no cache memory is left for it).
  void fail(uint64_t seq_id, std::string message);

  // Running sequences each feed their newest token (or their prompt's next slice); waiting ones join in
  // order while the step has room, each as `admit` says (without one they all join with nothing
  // cached), feeding their whole prompt (one longer than max_batch_tokens over several steps).
  StepPlan plan(const Admit& admit = {});
  // Puts a running sequence back at the head of the queue: its pages were taken back for others. It
  // feeds its whole context (prompt and tokens so far) again when it rejoins, then carries on sampling
  // where it stopped.
  void preempt(uint64_t seq_id);
  // logits[i] is the next-token distribution after the last token of plan.items[i] (vocab floats);
  // consumed (rewritten) by sampling. Returns the tokens sampled.
  struct Sampled {
    uint64_t seq_id;
    int32_t token;
    std::optional<TokenLogprob> logprob;  // when the request asked for logprobs
  };
  // for_each(n, fn) calls fn(0..n-1), in any order and on any threads (the runner's pool): each call
  // samples one sequence, over the whole vocabulary. Empty: one after another, here.
  using ForEach = std::function<void(int64_t, const std::function<void(int64_t)>&)>;
  std::vector<Sampled> commit(const StepPlan& plan, std::span<float* const> logits, int64_t vocab, const ForEach& for_each = {});
  // Whether every sequence of the step samples by plain argmax (temperature 0, no penalties, bias or
  // logprobs), so the step's tokens can be chosen where the logits are (on the GPU) without copying them.
  bool plain_greedy(const StepPlan& plan) const;
  // commit() for such a step: tokens[i] is plan.items[i]'s argmax.
  std::vector<Sampled> commit_tokens(const StepPlan& plan, std::span<const int32_t> tokens);

  std::vector<Finished> take_finished();
  bool idle() const { return running_.empty() && waiting_.empty(); }
  size_t running() const { return running_.size(); }
  size_t waiting() const { return waiting_.size(); }
  const std::deque<uint64_t>& waiting_ids() const { return waiting_; }

 private:
  struct Sequence {
    uint64_t id;
    GenerationRequest request;
    std::vector<int32_t> stop_ids;
    std::vector<int32_t> context;  // prompt + generated
    size_t prompt_size;
    int64_t fed = 0;               // tokens already given to the model
    Sampler sampler;
    std::optional<int64_t> cached = {};  // prompt tokens found in the prefix cache when it first joined
    std::unique_ptr<TokenMatcher> matcher = {};  // the request's grammar, followed token by token
  };
  void finish(std::map<uint64_t, std::unique_ptr<Sequence>>::iterator it, FinishReason why, std::string error = {});
  // The item's sequence after the step fed it, or nullptr when it was cancelled or fed only a prompt slice.
  std::map<uint64_t, std::unique_ptr<Sequence>>::iterator fed(const StepItem& item);
  // Appends the sampled token, ends the sequence on a stop token or its length.
  void accept(std::map<uint64_t, std::unique_ptr<Sequence>>::iterator it, int32_t token);

  SchedulerLimits limits_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Sequence>> sequences_;
  std::deque<uint64_t> waiting_;
  std::vector<uint64_t> running_;
  std::vector<Finished> finished_;
};

}  // namespace ftllm::scheduler
