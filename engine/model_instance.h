// One resident model: its weights, cache pool, threads and scheduler. Nothing here is shared between
// models, so one can be unloaded while another serves.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine.h"
#include "kvcache/kv_cache.h"
#include "model/decoder.h"
#include "model/weights.h"
#include "scheduler/request.h"
#include "scheduler/scheduler.h"

namespace ftllm {

constexpr int64_t kKvBlockTokens = 16;

class ModelInstance {
 public:
  // Throws EngineError with a reason a person can act on.
  static std::unique_ptr<ModelInstance> load(const ModelLoadOptions& options);

  const model::ModelConfig& config() const { return model_->config(); }
  const ModelLoadOptions& options() const { return options_; }
  size_t weight_file_bytes() const { return weight_file_bytes_; }

  // Runs the requests to completion, batched together; results in request order. Calls are
  // serialised: one batch runs at a time.
  std::vector<GenerationResult> generate(std::vector<GenerationRequest> requests);

  // Next-token logits after each prefix of `tokens` that `positions_wanted` lists (0-based positions),
  // computed in one prefill pass of a fresh sequence. For tests and the perplexity tool.
  std::vector<std::vector<float>> prompt_logits(const std::vector<int32_t>& tokens,
                                                const std::vector<int64_t>& positions_wanted);

  // Next-token logits after all of `tokens`, reached by prefilling the first `prefill` tokens in one
  // pass and then decoding the rest one step at a time: the decode path, for tests.
  std::vector<float> decode_logits(const std::vector<int32_t>& tokens, size_t prefill);

 private:
  ModelInstance(ModelLoadOptions options, std::unique_ptr<model::DecoderModel> model, size_t weight_bytes);

  ModelLoadOptions options_;
  std::unique_ptr<model::DecoderModel> model_;
  size_t weight_file_bytes_;
  cpu::ThreadPool pool_;
  kvcache::KvPool kv_;
  std::mutex run_mu_;
  scheduler::Scheduler scheduler_;
};

}  // namespace ftllm
