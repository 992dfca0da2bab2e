#include "runner.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "../core/error.h"
#include "../cpu/kernels.h"

namespace ftllm {

Tensor ForwardPass::forward(const model::Batch& batch, const std::vector<kvcache::SequenceKv*>& seqs) const {
  ops::Context ctx = layout.context();
  return ops::to_device(model.forward(ctx, batch, kv, seqs, layout.layer_contexts()), Device::cpu());
}

Runner::Runner(const model::DecoderModel& model, kvcache::KvPool& kv, DeviceLayout& layout, LoadNotes& notes, int64_t context,
               int32_t max_running, int32_t max_loras)
    : model_(model),
      kv_(kv),
      layout_(layout),
      notes_(notes),
      context_(context),
      scheduler_(scheduler::SchedulerLimits{
          .max_running = kv.has_state() ? int32_t(kv.state_slots())  // linear attention: a state slot each
                         : max_running  ? max_running
                                        : int32_t(std::clamp<int64_t>(kv.num_blocks() * kv.block_tokens() / kTokensPerRunning, 1, kMaxRunning))}),
      max_loras_(std::max(1, max_loras)),
      placement_(layout.placement()),
      worker_([this] { worker_loop(); }) {
  std::lock_guard lock(mu_);
  note_load();
}

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
    e.result.finish = FinishReason::Error;
    e.result.error = refused.empty() ? "the model is being unloaded" : refused;
    callback(e);
    return id;
  }
  // No sequence may outgrow its context: the cache was sized for it.
  request.max_tokens = int32_t(std::min<int64_t>(request.max_tokens, context_ - int64_t(request.prompt.size())));
  requests_[id] = {std::move(callback), std::move(request)};
  arrivals_.push_back(id);
  ++seen_.waiting;
  lock.unlock();
  wake_.notify_one();
  return id;
}

void Runner::cancel(uint64_t id) {
  std::unique_lock lock(mu_);
  auto it = requests_.find(id);
  if (it != requests_.end() && it->second.queued) {
    // Not handed to the worker yet: it leaves the queue now, here, and no longer counts as waiting (a
    // client that went away must not hold a place others are refused for).
    GenerationCallback cb = std::move(it->second.callback);
    requests_.erase(it);
    std::erase(arrivals_, id);
    --seen_.waiting;
    lock.unlock();
    GenerationEvent e;
    e.finished = true;
    e.result.finish = FinishReason::Cancelled;
    if (cb) cb(e);
    return;
  }
  // With the scheduler: it leaves at the next step boundary, but if it was still waiting it stops counting
  // as waiting now (a step may take a while, and a live client must not be refused for it meanwhile).
  if (auto w = std::find(scheduler_waiting_.begin(), scheduler_waiting_.end(), id); w != scheduler_waiting_.end()) {
    scheduler_waiting_.erase(w);
    --seen_.waiting;
  }
  cancels_.push_back(id);
  lock.unlock();
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

void Runner::note_load() {
  seen_.running = scheduler_.running();
  // Cancelled during the step just ended, they leave the scheduler at the next boundary: not waiting now.
  scheduler_waiting_.clear();
  for (uint64_t id : scheduler_.waiting_ids())
    if (std::find(cancels_.begin(), cancels_.end(), id) == cancels_.end()) scheduler_waiting_.push_back(id);
  seen_.waiting = scheduler_waiting_.size() + arrivals_.size();
  seen_.kv_blocks_total = kv_.num_blocks();
  seen_.kv_blocks_used = kv_.used_blocks();
  seen_.kv_blocks_cached = kv_.cached_blocks();
  seen_.prefix_cache = kv_.prefix_cache();
  seen_.threads = layout_.pool().size();
  seen_.threads_active = layout_.pool().active();
  seen_.kernels = cpu::kernels_description(layout_.kernels());
  seen_.max_loras = max_loras_;
  std::set<std::string> running, waiting;
  for (auto& [id, a] : adapters_running_) running.insert(a->name());
  for (auto& [id, a] : adapters_)
    if (!adapters_running_.count(id)) waiting.insert(a->name());
  for (uint64_t id : arrivals_)
    if (const auto& q = requests_.at(id).queued; q && q->adapter) waiting.insert(q->adapter->name());
  seen_.running_adapters.assign(running.begin(), running.end());
  seen_.waiting_adapters.assign(waiting.begin(), waiting.end());
}

ServingLoad Runner::load() const {
  std::lock_guard lock(mu_);
  ServingLoad l = seen_;
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
      if (stop_)  // everything queued (handed over below) or running ends as cancelled: no caller waits forever
        for (auto& [id, r] : requests_) cancels.push_back(id);
    }
    take_arrivals();
    if (!fail_message.empty()) fail_all_running(fail_message);
    for (uint64_t id : cancels) scheduler_.cancel(id);  // queued ones left in cancel()
    {
      std::lock_guard compute(compute_mu_);
      apply_changes(std::move(placement), threads);
      if (!scheduler_.idle()) step();
      report_finished();
    }
    std::lock_guard lock(mu_);
    placement_ = layout_.placement();
    note_load();
    if (stop_ && scheduler_.idle() && requests_.empty()) return;
  }
}

void Runner::take_arrivals() {
  std::unique_lock lock(mu_);
  while (!arrivals_.empty()) {
    const uint64_t id = arrivals_.front();
    arrivals_.pop_front();
    scheduler_waiting_.push_back(id);  // in the same moment, so that a cancel during this step finds it
    std::optional<GenerationRequest>& queued = requests_.at(id).queued;
    GenerationRequest request = std::move(*queued);
    queued.reset();
    lock.unlock();
    if (request.embed) pooled_[id] = {*request.embed, int64_t(request.prompt.size()), {}, 0};
    if (request.adapter) adapters_[id] = request.adapter;
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

void Runner::release_pages(uint64_t id) {
  if (auto it = caches_.find(id); it != caches_.end()) {
    it->second.release(kv_);
    caches_.erase(it);
  }
  std::erase_if(computing_, [&](const auto& entry) { return entry.second == id; });
  adapters_running_.erase(id);
}

bool Runner::adapter_has_room(const model::LoraAdapter* adapter) const {
  std::set<const model::LoraAdapter*> running;
  for (auto& [id, a] : adapters_running_) running.insert(a);
  return running.count(adapter) || int32_t(running.size()) < max_loras_;
}

// Reports finished sequences (cancelled ones included) and frees their pages.
void Runner::report_finished() {
  for (scheduler::Finished& f : scheduler_.take_finished()) {
    release_pages(f.seq_id);
    adapters_.erase(f.seq_id);
    if (auto p = pooled_.find(f.seq_id); p != pooled_.end()) {
      if (f.result.finish == FinishReason::Stop && p->second.rows > 0) {
        double norm = 0;
        for (double& v : p->second.sum) v /= double(p->second.rows), norm += v * v;
        const double scale = p->second.pooling.normalize && norm > 0 ? 1.0 / std::sqrt(norm) : 1.0;
        for (double v : p->second.sum) f.result.embedding.push_back(float(v * scale));
      }
      pooled_.erase(p);
    }
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

scheduler::Admission Runner::admit(uint64_t id, std::span<const int32_t> context) {
  const auto adapter = adapters_.find(id);
  const model::LoraAdapter* lora = adapter == adapters_.end() ? nullptr : adapter->second.get();
  // Another adapter while max_loras run: later sequences (of the base, or of a running adapter) may join.
  if (lora && !adapter_has_room(lora)) return {scheduler::Admission::Skip, 0};
  kvcache::SequenceKv& kv = caches_[id];  // empty: a sequence joining, or rejoining after preemption
  kv.root = lora ? lora->cache_key() : 0;  // rows computed with an adapter serve only that adapter
  // An embedding reads every row of its prompt (Mean, First pool them): nothing comes from the cache.
  const int64_t cached = pooled_.count(id) ? 0 : kv.attach_prefix(kv_, context);
  const int64_t bt = kv_.block_tokens();
  // The chain of the context's full blocks not found: a waiting sequence whose next block another one is
  // computing (the choices of n > 1, users of one system prompt) takes it from the cache next step.
  std::vector<uint64_t> pending;
  for (uint64_t parent = kv.chain.empty() ? kv.root : kv.chain.back(); int64_t(kv.chain.size() + pending.size() + 1) * bt <= int64_t(context.size());) {
    const size_t i = kv.chain.size() + pending.size();
    parent = kvcache::KvPool::chain_hash(parent, context.subspan(i * size_t(bt), size_t(bt)));
    pending.push_back(parent);
  }
  auto leave = [&](scheduler::Admission::Kind why) {
    release_pages(id);
    return scheduler::Admission{why, 0};
  };
  if (kv_.prefix_cache() && !pending.empty())
    if (auto it = computing_.find(pending.front()); it != computing_.end() && it->second != id) return leave(scheduler::Admission::Skip);
  // Room for its whole context and its first new token, and a block for each running sequence to grow into.
  if (kv.blocks_needed(kv_, int64_t(context.size()) + 1) + int64_t(scheduler_.running()) > kv_.free_blocks())
    return leave(scheduler::Admission::Wait);
  if (!kv.take_state_slot(kv_)) return leave(scheduler::Admission::Wait);  // linear attention's state: a slot each
  if (kv_.prefix_cache())
    for (uint64_t hash : pending) computing_.try_emplace(hash, id);
  if (lora) adapters_running_[id] = lora;
  std::lock_guard lock(mu_);
  seen_.prefix_cache_queries += context.size();
  seen_.prefix_cache_hits += uint64_t(cached);
  return {scheduler::Admission::Join, cached};
}

std::vector<kvcache::SequenceKv*> Runner::reserve_pages(scheduler::StepPlan& plan) {
  auto needed = [&] {
    int64_t n = 0;
    for (const scheduler::StepItem& item : plan.items)
      n += caches_[item.seq_id].blocks_needed(kv_, item.start_pos + int64_t(item.tokens.size()));
    return n;
  };
  // The newest first: it has waited least, and has the least to compute again.
  while (plan.items.size() > 1 && needed() > kv_.free_blocks()) {
    const uint64_t id = plan.items.back().seq_id;
    plan.items.pop_back();
    release_pages(id);
    scheduler_.preempt(id);
    if (auto p = pooled_.find(id); p != pooled_.end()) p->second.sum.clear(), p->second.rows = 0;  // read again from the start
    std::lock_guard lock(mu_);
    ++seen_.preemptions;
  }
  std::vector<kvcache::SequenceKv*> seqs;
  for (const scheduler::StepItem& item : plan.items) {
    kvcache::SequenceKv& kv = caches_[item.seq_id];
    if (!kv.reserve(kv_, item.start_pos + int64_t(item.tokens.size())))  // one sequence longer than the pool
      throw EngineError("the KV cache cannot hold " + std::to_string(item.start_pos + item.tokens.size()) +
                        " tokens; load the model with a larger --max_sequences or a shorter --ctx");
    seqs.push_back(&kv);
  }
  return seqs;
}

void Runner::step() {
  const model::ModelConfig& c = model_.config();
  scheduler::StepPlan plan = scheduler_.plan([this](uint64_t id, std::span<const int32_t> context) { return admit(id, context); });
  std::vector<kvcache::SequenceKv*> seqs;
  try {
    seqs = reserve_pages(plan);
  } catch (const std::exception& e) {
    for (const auto& item : plan.items) scheduler_.fail(item.seq_id, e.what());
    return;
  }
  model::Batch batch;
  std::vector<Pooled*> pooled_rows;  // per hidden row: the embedding request it is pooled into
  for (size_t s = 0; s < plan.items.size(); ++s) {
    const scheduler::StepItem& item = plan.items[s];
    const int64_t first = int64_t(batch.tokens.size()), n = int64_t(item.tokens.size());
    for (size_t j = 0; j < item.tokens.size(); ++j) {
      batch.tokens.push_back(item.tokens[j]);
      batch.positions.push_back(item.start_pos + int64_t(j));
      batch.seq.push_back(int32_t(s));
    }
    batch.logit_rows.push_back(int64_t(batch.tokens.size()) - 1);
    const auto adapter = adapters_.find(item.seq_id);
    batch.adapters.push_back(adapter == adapters_.end() ? nullptr : adapter->second.get());
    if (auto p = pooled_.find(item.seq_id); p != pooled_.end()) {  // the rows its pooling reads
      using Mode = Pooling::Mode;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t pos = item.start_pos + j;
        const Mode m = p->second.pooling.mode;
        if (m == Mode::Mean || (m == Mode::First && pos == 0) || (m == Mode::Last && pos == p->second.prompt_size - 1)) {
          batch.hidden_rows.push_back(first + j);
          pooled_rows.push_back(&p->second);
        }
      }
    }
  }
  if (batch.tokens.empty()) return;

  ops::Context ctx = layout_.context();
  std::vector<scheduler::Scheduler::Sampled> sampled;
  try {
    Tensor hidden;
    Tensor logits = model_.forward(ctx, batch, kv_, seqs, layout_.layer_contexts(), false, pooled_rows.empty() ? nullptr : &hidden);
    for (size_t r = 0; r < pooled_rows.size(); ++r) {  // in double: a mean over thousands of rows
      Pooled& p = *pooled_rows[r];
      const float* row = hidden.as<float>() + int64_t(r) * hidden.dim(1);
      p.sum.resize(size_t(hidden.dim(1)));
      for (int64_t i = 0; i < hidden.dim(1); ++i) p.sum[size_t(i)] += double(row[i]);
      ++p.rows;
    }
    // The rows are written: full blocks go into the prefix cache (before sampling, which may end them).
    for (size_t s = 0; s < plan.items.size(); ++s) {
      const size_t published = seqs[s]->chain.size();
      seqs[s]->written(kv_, plan.items[s].tokens);
      for (size_t i = published; i < seqs[s]->chain.size(); ++i) computing_.erase(seqs[s]->chain[i]);
    }
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
