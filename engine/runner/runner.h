// The worker of one model: a thread that runs continuous batching over the model's KV pool, and the one
// table of the requests it serves. Requests, cancels, thread and placement changes arrive from other
// threads and are applied between two steps, so running generations go on with the same results.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../kvcache/kv_cache.h"
#include "../model/decoder.h"
#include "../scheduler/request.h"
#include "../scheduler/scheduler.h"
#include "device_layout.h"
#include "placement.h"

namespace ftllm {

// A forward pass with the model to itself, between two steps of the worker: for tests and tools that
// want logits rather than tokens (Runner::exclusive).
struct ForwardPass {
  const model::DecoderModel& model;
  kvcache::KvPool& kv;
  const DeviceLayout& layout;
  // Logits (on the host) of batch.logit_rows, for sequences whose pages `seqs` reserve.
  Tensor forward(const model::Batch& batch, const std::vector<kvcache::SequenceKv*>& seqs) const;
};

class Runner {
 public:
  // Starts the worker. At most `max_running` sequences run at once (0: one per kTokensPerRunning tokens
  // of the KV pool, from 1 to kMaxRunning); one joins only when the pool has room for its whole prompt
  // (and a block for each running sequence to grow into). When running sequences outgrow the pool, the
  // newest goes back to the queue and computes its context again later (mostly from the prefix cache).
  // A model with linear attention runs as many as the pool has recurrent-state slots (--max_sequences).
  // Sequences of at most `max_loras` different LoRA adapters run at once; one for another adapter waits.
  Runner(const model::DecoderModel& model, kvcache::KvPool& kv, DeviceLayout& layout, LoadNotes& notes, int64_t context,
         int32_t max_running, int32_t max_loras = 8);
  static constexpr int64_t kTokensPerRunning = 64;
  static constexpr int32_t kMaxRunning = 256;
  ~Runner();  // cancels what is running (each gets its Cancelled event) and stops the worker

  // Queues a generation; it joins the running batch at the next step. Returns its id for cancel().
  uint64_t submit(GenerationRequest request, GenerationCallback callback);
  // Ends a generation at the next step (its callback gets FinishReason::Cancelled); unknown ids are ignored.
  void cancel(uint64_t id);
  // Ends every generation at the next step with FinishReason::Error and this message.
  void fail_all(const std::string& message);
  // Changes the compute threads, or the placement, between two steps (every output element is computed
  // by one thread whatever their number, and moved layers take their KV pages along).
  void set_threads(int threads);
  void set_placement(Placement placement);
  Placement placement() const;  // as last applied
  ServingLoad load() const;

  // Runs `fn` between two steps with the model to itself.
  void exclusive(const std::function<void(const ForwardPass&)>& fn);

 private:
  void worker_loop();
  void take_arrivals();
  void apply_changes(std::optional<Placement> placement, int threads);
  void step();  // one plan / forward / commit
  scheduler::Admission admit(uint64_t id, std::span<const int32_t> context);
  // Takes pages for the plan's items, sending the newest running sequences back to the queue while the
  // pool is short; returns the items' caches (the plan loses the items sent back).
  std::vector<kvcache::SequenceKv*> reserve_pages(scheduler::StepPlan& plan);
  void release_pages(uint64_t id);
  void note_load();  // copies the worker's state into seen_; call with mu_ held
  void report_finished();
  void fail_all_running(const std::string& message);
  GenerationCallback* callback_of(uint64_t id);

  const model::DecoderModel& model_;
  kvcache::KvPool& kv_;
  DeviceLayout& layout_;
  LoadNotes& notes_;
  const int64_t context_;

  std::mutex compute_mu_;  // the KV pool and the layout: the worker's steps, and exclusive()
  scheduler::Scheduler scheduler_;                  // worker thread only
  std::map<uint64_t, kvcache::SequenceKv> caches_;  // by request id; worker thread only
  // Full blocks of admitted prompts not yet computed, by chain hash: the sequence computing each. A
  // waiting sequence whose prefix one of them computes waits a step for it rather than computing it too.
  std::map<uint64_t, uint64_t> computing_;  // worker thread only
  // Embedding requests being read: their pooling and what the rows seen so far add up to.
  struct Pooled {
    Pooling pooling;
    int64_t prompt_size = 0;
    std::vector<double> sum;  // of the rows pooled (Mean), or the one row (Last, First)
    int64_t rows = 0;
  };
  std::map<uint64_t, Pooled> pooled_;  // worker thread only
  // The LoRA adapter of each request handed to the scheduler that uses one, and those of them admitted
  // (running); worker thread only.
  std::map<uint64_t, std::shared_ptr<const model::LoraAdapter>> adapters_;
  std::map<uint64_t, const model::LoraAdapter*> adapters_running_;
  const int32_t max_loras_;
  // Whether a sequence using `adapter` may join: its adapter already runs, or fewer than max_loras do.
  bool adapter_has_room(const model::LoraAdapter* adapter) const;

  mutable std::mutex mu_;  // everything below
  std::condition_variable wake_;
  // The request table, by id (the scheduler's sequence ids are the same ids).
  struct Request {
    GenerationCallback callback;
    std::optional<GenerationRequest> queued;  // until the worker hands it to the scheduler
  };
  std::map<uint64_t, Request> requests_;
  std::deque<uint64_t> arrivals_;
  std::vector<uint64_t> cancels_;
  std::vector<uint64_t> scheduler_waiting_;  // waiting in the scheduler: as of the last step boundary, plus those handed over since
  std::string fail_all_message_;  // set by fail_all, applied by the worker
  int pending_threads_ = 0;       // set by set_threads, applied by the worker
  std::optional<Placement> pending_placement_;
  Placement placement_;  // the layout's, copied for other threads
  uint64_t next_id_ = 1;
  ServingLoad seen_;  // as of the worker's last step (tokens_per_second aside): what other threads read
  std::deque<std::pair<std::chrono::steady_clock::time_point, size_t>> recent_tokens_;  // for tokens/s
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace ftllm
