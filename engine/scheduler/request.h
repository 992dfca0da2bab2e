// What a caller asks the engine to generate, and how it ended. Plain data, shared by engine.h and
// the scheduler.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ftllm {

namespace model {
class LoraAdapter;
}

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax after penalties)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // Hugging Face's: over prompt and output tokens
  float presence_penalty = 0.0f;    // OpenAI's: over output tokens
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;     // same seed, same request: same tokens
  std::vector<std::pair<int32_t, float>> logit_bias;  // OpenAI's: added to a token's logit first

  bool operator==(const SamplingParams&) const = default;
  // Whether sampling is a plain argmax of the logits: temperature 0 and nothing else that changes them.
  // The truncations and the seed matter only when sampling, so they are set aside; every other field
  // must be at its default, so a field added later keeps its requests off the plain path until this
  // says otherwise.
  bool plain_argmax() const {
    if (temperature > 0) return false;
    SamplingParams p = *this;
    p.temperature = 0, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed.reset();
    SamplingParams greedy;
    greedy.temperature = 0;
    return p == greedy;
  }
};

// Constrained decoding, per sequence: which tokens may come next. The scheduler masks every other token
// before sampling (so greedy, temperature, filters, penalties and logprobs all see the masked
// distribution) and reports each token it takes. Used on one thread at a time.
class TokenMatcher {
 public:
  virtual ~TokenMatcher() = default;
  // Sets the logit of every token that may not come next to -infinity (the row is the model's vocabulary).
  virtual void mask(std::span<float> logits) = 0;
  // The token taken; false if the grammar cannot take it (then the sequence ends with an error).
  virtual bool accept(int32_t token) = 0;
  // The output is complete: nothing more may follow (not even an end-of-sequence token).
  virtual bool complete() const = 0;
};

// What starts a matcher for each sequence of a request (a compiled grammar, shared by them).
class TokenGrammar {
 public:
  virtual ~TokenGrammar() = default;
  virtual std::unique_ptr<TokenMatcher> start() const = 0;
};

// How an embedding request's vector is made from the final norm's rows of its prompt: the last token's
// (decoder embedding models such as Qwen3-Embedding), their mean, or the first's; then L2-normalised or not.
struct Pooling {
  enum class Mode { Last, Mean, First } mode = Mode::Last;
  bool normalize = true;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  // Set: the prompt is only read, no token is sampled, and the result holds its pooled embedding.
  std::optional<Pooling> embed;
  SamplingParams sampling;
  int32_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's eos ids
  bool ignore_eos = false;
  int32_t logprobs = -1;  // -1: none; n >= 0: each token's log-probability and the n most likely
  std::shared_ptr<const TokenGrammar> grammar;  // null: any token may come
  std::shared_ptr<const model::LoraAdapter> adapter;  // null: the base model; kept alive until the request ends
};

// A sampled token's log-probability under the model (log-softmax of its raw logits), and the most
// likely alternatives, best first.
struct TokenLogprob {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

enum class FinishReason { Stop, Length, Cancelled, Error };

struct GenerationResult {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::Length;
  std::string error;  // set when finish == Error
  int64_t cached_tokens = 0;  // prompt tokens whose KV rows came from the prefix cache
  std::vector<float> embedding;  // an embedding request's vector
};

// What a running generation reports, in order: new tokens as they are sampled, then once its end.
struct GenerationEvent {
  std::vector<int32_t> tokens;  // sampled in the latest step (stop token included)
  std::vector<TokenLogprob> logprobs;  // one per token, when the request asked for them
  bool finished = false;
  GenerationResult result;      // when finished: all tokens, the reason, the error
};

// How busy a model is, for status and admission.
struct ServingLoad {
  size_t running = 0, waiting = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;  // used: held by running sequences
  int64_t kv_blocks_cached = 0;  // published for reuse (held or idle); idle ones give way to new rows
  // Prefix cache, since the load: prompt tokens looked up, and those found (vLLM's queries and hits).
  uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  uint64_t preemptions = 0;  // running sequences sent back to the queue for want of KV pages
  bool prefix_cache = true;
  // LoRA adapters: how many may run in one batch (--max_loras), and the names of those with running and
  // with waiting requests (the model-server protocol's lora_requests_info).
  int32_t max_loras = 0;
  std::vector<std::string> running_adapters, waiting_adapters;
  int threads = 0;
  // Threads the last step ran on: fewer than `threads` while other processes leave no core for the rest
  // (the pool's adapt_to_machine_load).
  int threads_active = 0;
  std::string kernels;  // the CPU kernel table in use: "avx512vnni", "avx2" or "scalar"
  double tokens_per_second = 0;  // generated over the last 10 seconds
};

// Called on the model's worker thread (or at once, on the caller's, for a request refused outright);
// must not block.
using GenerationCallback = std::function<void(const GenerationEvent&)>;

}  // namespace ftllm
