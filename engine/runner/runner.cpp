#include "runner.h"

#include <algorithm>
#include <utility>

#include "../core/error.h"

namespace ftllm {

Tensor ForwardPass::forward(const model::Batch& batch, const std::vector<kvcache::SequenceKv*>& seqs) const {
  ops::Context ctx = layout.context();
  return ops::to_device(model.forward(ctx, batch, kv, seqs, layout.layer_contexts()), Device::cpu());
}

Runner::Runner(const model::DecoderModel& model, kvcache::KvPool& kv, DeviceLayout& layout, LoadNotes& notes, int64_t context,
               int32_t max_running)
    : model_(model),
      kv_(kv),
      layout_(layout),
      notes_(notes),
      context_(context),
      scheduler_(scheduler::SchedulerLimits{.max_running = max_running}),
      placement_(layout.placement()),
      current_threads_(layout.pool().size()),
      worker_([this] { worker_loop(); }) {}

Runner::~Runner() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

uint64_t Runner::submit(GenerationRequest request, GenerationCallback callback) {
  const model::ModelConfig& c = model_.config();
  std::string refused;
  for (int32_t t : request.prompt)
    if (t < 0 || t >= c.vocab_size) {
      refused = "token id " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(c.vocab_size);
      break;
    }
  if (refused.empty() && int64_t(request.prompt.size()) >= context_)
    refused = "the prompt has " + std::to_string(request.prompt.size()) + " tokens; this model is loaded with a context of " +
              std::to_string(context_) + " tokens";
  std::unique_lock lock(mu_);
  const uint64_t id = next_id_++;
  if (!refused.empty() || stop_) {
    lock.unlock();
    GenerationEvent e;
    e.finished = true;
    e.result = {{}, FinishReason::Error, refused.empty() ? "the model is being unloaded" : refused};
    callback(e);
    return id;
  }
  // No sequence may outgrow its context: the cache was sized for it.
  request.max_tokens = int32_t(std::min<int64_t>(request.max_tokens, context_ - int64_t(request.prompt.size())));
  requests_[id] = {std::move(callback), std::move(request)};
  arrivals_.push_back(id);
  ++waiting_;
  lock.unlock();
  wake_.notify_one();
  return id;
}

void Runner::cancel(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

void Runner::fail_all(const std::string& message) {
  {
    std::lock_guard lock(mu_);
    fail_all_message_ = message;
  }
  wake_.notify_one();
}

void Runner::set_threads(int threads) {
  {
    std::lock_guard lock(mu_);
    pending_threads_ = threads;
  }
  wake_.notify_one();
}

void Runner::set_placement(Placement placement) {
  {
    std::lock_guard lock(mu_);
    pending_placement_ = std::move(placement);
  }
  wake_.notify_one();
}

Placement Runner::placement() const {
  std::lock_guard lock(mu_);
  return placement_;
}

ServingLoad Runner::load() const {
  std::lock_guard lock(mu_);
  ServingLoad l;
  l.running = running_;
  l.waiting = waiting_;
  l.kv_blocks_total = kv_.num_blocks();
  l.kv_blocks_used = kv_.num_blocks() - kv_.free_blocks();
  l.threads = current_threads_;
  const auto now = std::chrono::steady_clock::now();
  size_t tokens = 0;
  for (auto& [t, n] : recent_tokens_)
    if (now - t <= std::chrono::seconds(10)) tokens += n;
  l.tokens_per_second = double(tokens) / 10.0;
  return l;
}

void Runner::exclusive(const std::function<void(const ForwardPass&)>& fn) {
  std::lock_guard lock(compute_mu_);
  fn(ForwardPass{model_, kv_, layout_});
}

GenerationCallback* Runner::callback_of(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second.callback;  // map nodes stay put while others come and go
}

void Runner::worker_loop() {
  for (;;) {
    std::vector<uint64_t> cancels;
    std::string fail_message;
    int threads = 0;
    std::optional<Placement> placement;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        return stop_ || !arrivals_.empty() || !cancels_.empty() || !fail_all_message_.empty() || pending_threads_ ||
               pending_placement_ || !scheduler_.idle();
      });
      threads = std::exchange(pending_threads_, 0);
      placement = std::exchange(pending_placement_, std::nullopt);
      fail_message = std::exchange(fail_all_message_, {});
      cancels = std::exchange(cancels_, {});
      if (stop_) {
        // Everything still queued or running ends as cancelled, so no caller waits forever.
        arrivals_.clear();
        for (auto& [id, r] : requests_) cancels.push_back(id);
      }
    }
    take_arrivals();
    if (!fail_message.empty()) fail_all_running(fail_message);
    for (uint64_t id : cancels) {
      std::unique_lock lock(mu_);
      auto it = requests_.find(id);
      if (it == requests_.end()) continue;
      if (!it->second.queued) {
        lock.unlock();
        scheduler_.cancel(id);
        continue;
      }
      // It never reached the scheduler: it ends here.
      GenerationCallback cb = std::move(it->second.callback);
      requests_.erase(it);
      std::erase(arrivals_, id);
      lock.unlock();
      GenerationEvent e;
      e.finished = true;
      e.result.finish = FinishReason::Cancelled;
      if (cb) cb(e);
    }
    {
      std::lock_guard compute(compute_mu_);
      apply_changes(std::move(placement), threads);
      if (!scheduler_.idle()) step();
      report_finished();
    }
    std::lock_guard lock(mu_);
    current_threads_ = layout_.pool().size();
    placement_ = layout_.placement();
    running_ = scheduler_.running();
    waiting_ = scheduler_.waiting() + arrivals_.size();
    if (stop_ && scheduler_.idle() && requests_.empty()) return;
  }
}

void Runner::take_arrivals() {
  std::unique_lock lock(mu_);
  while (!arrivals_.empty()) {
    const uint64_t id = arrivals_.front();
    arrivals_.pop_front();
    std::optional<GenerationRequest>& queued = requests_.at(id).queued;
    GenerationRequest request = std::move(*queued);
    queued.reset();
    lock.unlock();
    scheduler_.add(std::move(request), model_.config().eos_token_ids, id);
    lock.lock();
  }
}

void Runner::apply_changes(std::optional<Placement> placement, int threads) {
  try {
    if (placement) {
      layout_.apply(*placement, threads);
    } else if (threads > 0 && threads != layout_.pool().size()) {
      layout_.apply(layout_.placement(), threads);
    }
  } catch (const std::exception& e) {
    // A move that ran out of device memory: put everything back where it was and keep serving.
    notes_.add(std::string("rebalance failed: ") + e.what());
    try {
      layout_.apply(layout_.placement(), 0);
    } catch (const std::exception& again) {
      fail_all_running(std::string("the model could not be placed back after a failed rebalance: ") + again.what());
    }
  }
}

void Runner::fail_all_running(const std::string& message) {
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, r] : requests_)
      if (!r.queued) ids.push_back(id);
  }
  for (uint64_t id : ids) scheduler_.fail(id, message);
}

// Reports finished sequences (cancelled ones included) and frees their pages.
void Runner::report_finished() {
  for (scheduler::Finished& f : scheduler_.take_finished()) {
    caches_[f.seq_id].release(kv_);
    caches_.erase(f.seq_id);
    GenerationCallback cb;
    {
      std::lock_guard lock(mu_);
      auto it = requests_.find(f.seq_id);
      if (it == requests_.end()) continue;
      cb = std::move(it->second.callback);
      requests_.erase(it);
    }
    GenerationEvent e;
    e.finished = true;
    e.result = std::move(f.result);
    if (cb) cb(e);
  }
}

void Runner::step() {
  const model::ModelConfig& c = model_.config();
  scheduler::StepPlan plan = scheduler_.plan();
  model::Batch batch;
  std::vector<kvcache::SequenceKv*> seqs;
  std::vector<uint64_t> failed;
  for (const scheduler::StepItem& item : plan.items) {
    kvcache::SequenceKv& kv = caches_[item.seq_id];
    if (!kv.reserve(kv_, item.start_pos + int64_t(item.tokens.size()))) {
      failed.push_back(item.seq_id);
      continue;
    }
    const int32_t s = int32_t(seqs.size());
    seqs.push_back(&kv);
    for (size_t j = 0; j < item.tokens.size(); ++j) {
      batch.tokens.push_back(item.tokens[j]);
      batch.positions.push_back(item.start_pos + int64_t(j));
      batch.seq.push_back(s);
    }
    batch.logit_rows.push_back(int64_t(batch.tokens.size()) - 1);
  }
  for (uint64_t id : failed) scheduler_.fail(id, "the KV cache is full; retry when other requests finish");
  std::erase_if(plan.items, [&](const scheduler::StepItem& it) {
    return std::find(failed.begin(), failed.end(), it.seq_id) != failed.end();
  });
  if (batch.tokens.empty()) return;

  ops::Context ctx = layout_.context();
  std::vector<scheduler::Scheduler::Sampled> sampled;
  try {
    Tensor logits = model_.forward(ctx, batch, kv_, seqs, layout_.layer_contexts(), false);
    if (logits.device.is_cuda() && scheduler_.plain_greedy(plan)) {
      // Greedy decoding picks on the GPU: R token ids cross instead of R rows of the vocabulary.
      sampled = scheduler_.commit_tokens(plan, ops::argmax_rows(ctx, logits));
    } else {
      logits = ops::to_device(logits, Device::cpu());
      std::vector<float*> rows;
      for (size_t r = 0; r < plan.items.size(); ++r) rows.push_back(logits.as<float>() + int64_t(r) * c.vocab_size);
      // One sequence per task: sampling reads the whole vocabulary (152K exponentials for Qwen at a
      // temperature), which for 16 sequences took longer than the step's forward pass on one thread.
      sampled = scheduler_.commit(plan, rows, c.vocab_size, [&](int64_t n, const std::function<void(int64_t)>& fn) {
        ctx.pool.parallel_for(n, 1, [&](int64_t k0, int64_t k1) {
          for (int64_t k = k0; k < k1; ++k) fn(k);
        });
      });
    }
  } catch (const std::exception& e) {
    for (const auto& item : plan.items) scheduler_.fail(item.seq_id, std::string("generation failed: ") + e.what());
    return;
  }
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    recent_tokens_.emplace_back(now, sampled.size());
    while (!recent_tokens_.empty() && now - recent_tokens_.front().first > std::chrono::seconds(10)) recent_tokens_.pop_front();
  }
  // New tokens go out before any finish event of the same step.
  std::map<uint64_t, GenerationEvent> by_sequence;
  for (auto& s : sampled) {
    GenerationEvent& e = by_sequence[s.seq_id];
    e.tokens.push_back(s.token);
    if (s.logprob) e.logprobs.push_back(std::move(*s.logprob));
  }
  for (auto& [id, event] : by_sequence)
    if (GenerationCallback* cb = callback_of(id); cb && *cb) (*cb)(event);
}

}  // namespace ftllm
