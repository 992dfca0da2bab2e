// One resident model: weights, tokenizer and chat template, KV pool, threads, and a worker thread that
// runs continuous batching. Nothing here is shared between models, so one can be unloaded while
// another serves.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "engine.h"
#include "placement.h"
#include "kvcache/kv_cache.h"
#include "model/decoder.h"
#include "model/gguf.h"
#include "model/weights.h"
#include "scheduler/request.h"
#include "scheduler/scheduler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ftllm {

constexpr int64_t kKvBlockTokens = 16;

class ModelInstance {
 public:
  // Throws EngineError with a reason a person can act on.
  static std::unique_ptr<ModelInstance> load(const ModelLoadOptions& options);
  ~ModelInstance();  // cancels what is running (each gets its Cancelled event) and stops the worker

  const model::ModelConfig& config() const { return model_->config(); }
  const model::DecoderModel& model() const { return *model_; }
  const ModelLoadOptions& options() const { return options_; }
  const cpu::Kernels& kernels() const { return kernels_; }
  size_t weight_file_bytes() const { return weight_file_bytes_; }
  int64_t context_length() const;
  // The tokenizer and chat template the model files ship; null when they have none.
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const tokenizer::ChatTemplate* chat_template() const { return chat_template_.get(); }
  const jinja::Object& special_tokens() const { return special_tokens_; }
  // Why the model's chat template could not be used (empty when it parsed, or there is none).
  const std::string& chat_template_error() const { return chat_template_error_; }

  // Queues a generation; it joins the running batch at the next step. Returns its id for cancel().
  uint64_t submit(GenerationRequest request, GenerationCallback callback);
  // Ends a generation at the next step (its callback gets FinishReason::Cancelled); unknown ids are ignored.
  void cancel(uint64_t id);
  // Ends every generation at the next step with FinishReason::Error and this message.
  void fail_all(const std::string& message);

  struct Load {
    size_t running = 0, waiting = 0;
    int64_t kv_blocks_used = 0, kv_blocks_total = 0;
    int threads = 0;
    double tokens_per_second = 0;  // generated over the last 10 seconds
  };
  uint64_t parameter_count() const { return model_->parameter_count(); }
  uint64_t weight_bytes() const { return model_->weight_bytes(); }
  uint64_t kv_bytes() const { return kv_.bytes(); }
  const std::string& dtypes() const { return model_->dtypes(); }
  std::string load_notes() const;  // what --dtype could not convert, placement notes
  // Weight and KV bytes per device as of the last placement (the host first).
  std::vector<ModelHandle::Footprint::OnDevice> memory_by_device() const;
  Load load_now() const;

  // Changes the compute threads between two steps: running generations pause for that moment and go on
  // with the same results (every output element is computed by one thread, whatever their number).
  void set_threads(int threads);
  // Moves layers to other devices between two steps (each NUMA device gets a pool bound to its node).
  void set_placement(std::vector<LayerRange> placement);
  std::vector<LayerRange> placement() const;

  // Runs the requests to completion, batched together; results in request order.
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
  static ModelLoadOptions check_kv_fits(ModelLoadOptions options, const model::ModelConfig& config);
  void worker_loop();
  void step();  // one plan / forward / commit; worker thread, compute_mu_ held

  void read_gguf_tokenizer(const model::GgufFile& file);  // vocabulary and bos/eos for the template
  ModelLoadOptions options_;
  const cpu::Kernels& kernels_;  // options_.kernels resolved once
  std::string load_notes_;
  std::unique_ptr<model::DecoderModel> model_;
  size_t weight_file_bytes_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> chat_template_;
  jinja::Object special_tokens_;
  std::string chat_template_error_;
  std::unique_ptr<cpu::ThreadPool> pool_;  // replaced between steps by set_threads
  // Layers placed on NUMA devices run on pools bound to those nodes; all of this is rebuilt between steps.
  std::vector<LayerRange> placement_;
  std::map<std::string, std::unique_ptr<cpu::ThreadPool>> device_pools_;
  std::map<std::string, std::unique_ptr<ops::Context>> device_contexts_;
  std::vector<ops::Context*> layer_ctx_;  // empty: every layer on pool_
  std::unique_ptr<ops::Context> main_ctx_;  // pool_'s context for the layers left on the cpu
  void apply_placement(std::vector<LayerRange> placement, int threads);  // worker, compute_mu_ held
  // Moves each layer's weights and KV pages to the device its range names (and the experts to
  // --moe_device, the LM head beside the last layer); throws EngineError, before moving, for what cannot go.
  void move_to_devices(const std::vector<LayerRange>& placement);
  std::vector<std::string> layer_place_;  // each layer's placement device as applied ("cuda:0", "multi:...")
  // Tensor parallelism: layer l's KV pages cut by the shards' heads onto their devices, and put back.
  void split_kv(int64_t l, const std::vector<model::DecoderModel::ShardSpan>& spans);
  Tensor join_kv_shards(int64_t l);
  std::vector<ModelHandle::Footprint::OnDevice> memory_;  // by device after the last placement; mu_
  bool layers_placed_ = false;
  void fail_all_running(const std::string& message);  // worker, compute_mu_ held
  // --device numa (every matrix) or --moe_device numa (experts only): rows split over the nodes, once.
  void place_weights_on_nodes(bool experts_only);
  std::vector<int> split_nodes_;  // the nodes the rows were split over; empty until then
  int nodes_placed_ = 0;          // 0 nothing, 1 the experts, 2 every matrix
  bool experts_on_nodes_ = false;  // --moe_device numa on a machine of several nodes
  void add_load_note(const std::string& note);
  const std::vector<ops::Context*>* layer_contexts() const { return layer_ctx_.empty() ? nullptr : &layer_ctx_; }

  std::mutex compute_mu_;  // the KV pool and thread pool: the worker's steps, and the test helpers
  kvcache::KvPool kv_;
  scheduler::Scheduler scheduler_;  // worker thread only
  std::map<uint64_t, kvcache::SequenceKv> caches_;  // by scheduler id; worker thread only

  mutable std::mutex mu_;  // everything below
  std::condition_variable wake_;
  struct Pending {
    uint64_t id;
    GenerationRequest request;
    GenerationCallback callback;
  };
  std::deque<Pending> incoming_;
  std::vector<uint64_t> cancels_;
  std::string fail_all_message_;  // set by fail_all, applied by the worker
  int pending_threads_ = 0;       // set by set_threads, applied by the worker
  std::optional<std::vector<LayerRange>> pending_placement_;
  std::map<uint64_t, GenerationCallback> callbacks_;  // by public id
  std::map<uint64_t, uint64_t> public_of_;            // scheduler id -> public id
  std::map<uint64_t, uint64_t> scheduler_of_;         // public id -> scheduler id
  uint64_t next_id_ = 1;
  size_t running_ = 0, waiting_ = 0;
  int current_threads_ = 0;
  std::deque<std::pair<std::chrono::steady_clock::time_point, size_t>> recent_tokens_;  // for tokens/s
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace ftllm
