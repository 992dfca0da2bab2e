#include "scheduler.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace ftllm::scheduler {

uint64_t Scheduler::add(GenerationRequest request, std::span<const int32_t> eos_ids, uint64_t id) {
  if (id == 0) id = next_id_++;
  auto seq = std::make_unique<Sequence>(Sequence{id, std::move(request), {}, {}, 0, 0, Sampler({})});
  seq->sampler = Sampler(seq->request.sampling);
  if (seq->request.grammar) seq->matcher = seq->request.grammar->start();
  seq->stop_ids = seq->request.stop_token_ids;
  if (!seq->request.ignore_eos) seq->stop_ids.insert(seq->stop_ids.end(), eos_ids.begin(), eos_ids.end());
  seq->context = seq->request.prompt;
  seq->prompt_size = seq->context.size();
  if (seq->prompt_size == 0) {
    sequences_.emplace(id, std::move(seq));
    fail(id, "the prompt is empty; give at least one token");
    return id;
  }
  if (seq->request.max_tokens <= 0) {
    sequences_.emplace(id, std::move(seq));
    finish(sequences_.find(id), FinishReason::Length);
    return id;
  }
  sequences_.emplace(id, std::move(seq));
  waiting_.push_back(id);
  return id;
}

void Scheduler::finish(std::map<uint64_t, std::unique_ptr<Sequence>>::iterator it, FinishReason why,
                       std::string error) {
  Sequence& s = *it->second;
  GenerationResult r;
  r.tokens.assign(s.context.begin() + int64_t(s.prompt_size), s.context.end());
  r.finish = why;
  r.error = std::move(error);
  r.cached_tokens = s.cached.value_or(0);
  finished_.push_back({s.id, std::move(r)});
  std::erase(running_, s.id);
  std::erase(waiting_, s.id);
  sequences_.erase(it);
}

void Scheduler::cancel(uint64_t seq_id) {
  auto it = sequences_.find(seq_id);
  if (it != sequences_.end()) finish(it, FinishReason::Cancelled);
}

void Scheduler::fail(uint64_t seq_id, std::string message) {
  auto it = sequences_.find(seq_id);
  if (it != sequences_.end()) finish(it, FinishReason::Error, std::move(message));
}

StepPlan Scheduler::plan(const Admit& admit) {
  StepPlan plan;
  int64_t budget = limits_.max_batch_tokens;
  // Sequences still feeding their prompt (a long one continues in slices), and decoders.
  for (uint64_t id : running_) {
    Sequence& s = *sequences_.at(id);
    int64_t remaining = int64_t(s.context.size()) - s.fed;
    int64_t n = std::min<int64_t>(remaining, std::max<int64_t>(1, budget));
    plan.items.push_back({id, std::vector<int32_t>(s.context.begin() + s.fed, s.context.begin() + s.fed + n), s.fed});
    budget -= n;
  }
  for (auto it = waiting_.begin(); it != waiting_.end() && int32_t(running_.size()) < limits_.max_running && budget > 0;) {
    const uint64_t id = *it;
    Sequence& s = *sequences_.at(id);
    const Admission a = admit ? admit(id, s.context) : Admission{};
    if (a.kind == Admission::Wait) break;
    if (a.kind == Admission::Skip) {
      ++it;
      continue;
    }
    it = waiting_.erase(it);
    running_.push_back(id);
    if (!s.cached) s.cached = a.cached;
    s.fed = a.cached;
    const int64_t n = std::min<int64_t>(int64_t(s.context.size()) - s.fed, budget);
    plan.items.push_back({id, std::vector<int32_t>(s.context.begin() + s.fed, s.context.begin() + s.fed + n), s.fed});
    budget -= n;
  }
  return plan;
}

void Scheduler::preempt(uint64_t seq_id) {
  auto it = sequences_.find(seq_id);
  if (it == sequences_.end() || std::erase(running_, seq_id) == 0) return;
  it->second->fed = 0;
  waiting_.push_front(seq_id);
}

namespace {

// log-softmax of the raw logits, the chosen token's value and the n best.
TokenLogprob logprobs_of(std::span<const float> logits, int32_t chosen, int32_t n) {
  double max = *std::max_element(logits.begin(), logits.end()), sum = 0;
  for (float l : logits) sum += std::exp(double(l) - max);
  const double log_z = max + std::log(sum);
  TokenLogprob lp;
  lp.logprob = float(double(logits[size_t(chosen)]) - log_z);
  if (n > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
    size_t k = std::min<size_t>(size_t(n), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + int64_t(k), ids.end(),
                      [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    for (size_t i = 0; i < k; ++i) lp.top.emplace_back(ids[i], float(double(logits[size_t(ids[i])]) - log_z));
  }
  return lp;
}

}  // namespace

std::map<uint64_t, std::unique_ptr<Scheduler::Sequence>>::iterator Scheduler::fed(const StepItem& item) {
  auto it = sequences_.find(item.seq_id);
  if (it == sequences_.end()) return it;  // cancelled during the step
  Sequence& s = *it->second;
  s.fed = item.start_pos + int64_t(item.tokens.size());
  if (s.fed < int64_t(s.context.size())) return sequences_.end();  // prompt slice: no token to sample yet
  if (s.request.embed) {  // read whole: it ends here (the runner pools its rows), sampling nothing
    finish(it, FinishReason::Stop);
    return sequences_.end();
  }
  return it;
}

void Scheduler::accept(std::map<uint64_t, std::unique_ptr<Sequence>>::iterator it, int32_t token) {
  Sequence& s = *it->second;
  s.context.push_back(token);
  const bool stop = std::find(s.stop_ids.begin(), s.stop_ids.end(), token) != s.stop_ids.end();
  const int64_t produced = int64_t(s.context.size() - s.prompt_size);
  if (stop || (s.matcher && s.matcher->complete()))
    finish(it, FinishReason::Stop);
  else if (produced >= s.request.max_tokens)
    finish(it, FinishReason::Length);
}

std::vector<Scheduler::Sampled> Scheduler::commit(const StepPlan& plan, std::span<float* const> logits, int64_t vocab,
                                                  const ForEach& for_each) {
  // Which items sample (a prompt slice that is not the last does not), then the sampling itself, each
  // item touching only its own sequence (its sampler, its logits row), then the tokens taken in order.
  struct Sampling {
    std::map<uint64_t, std::unique_ptr<Sequence>>::iterator sequence;
    float* logits;
  };
  std::vector<Sampling> at;
  for (size_t i = 0; i < plan.items.size(); ++i)
    if (auto it = fed(plan.items[i]); it != sequences_.end()) at.push_back({it, logits[i]});
  std::vector<Sampled> sampled(at.size());
  std::vector<char> refused(at.size(), 0);  // by the sequence's grammar
  auto sample = [&](int64_t k) {
    Sequence& s = *at[size_t(k)].sequence->second;
    float* row = at[size_t(k)].logits;
    std::span<const int32_t> output(s.context.data() + s.prompt_size, s.context.size() - s.prompt_size);
    // The grammar's mask comes first: everything after it (and the logprobs) sees only allowed tokens.
    if (s.matcher) s.matcher->mask(std::span<float>(row, size_t(vocab)));
    std::vector<float> raw;
    if (s.request.logprobs >= 0) raw.assign(row, row + vocab);  // sampling rewrites the logits
    const int32_t token = s.sampler.next(std::span<float>(row, size_t(vocab)), s.context, output);
    sampled[size_t(k)] = {s.id, token, std::nullopt};
    if (s.request.logprobs >= 0) sampled[size_t(k)].logprob = logprobs_of(raw, token, s.request.logprobs);
    if (s.matcher && !s.matcher->accept(token)) refused[size_t(k)] = 1;
  };
  if (for_each) for_each(int64_t(at.size()), sample);
  else
    for (int64_t k = 0; k < int64_t(at.size()); ++k) sample(k);
  for (size_t k = 0; k < at.size(); ++k) {
    if (refused[k]) finish(at[k].sequence, FinishReason::Error, "the output grammar allows no token here");
    else accept(at[k].sequence, sampled[k].token);
  }
  return sampled;
}

bool Scheduler::plain_greedy(const StepPlan& plan) const {
  for (const StepItem& item : plan.items) {
    auto it = sequences_.find(item.seq_id);
    if (it == sequences_.end()) continue;
    const GenerationRequest& r = it->second->request;
    if (!r.sampling.plain_argmax() || r.logprobs >= 0 || r.grammar) return false;
  }
  return true;
}

std::vector<Scheduler::Sampled> Scheduler::commit_tokens(const StepPlan& plan, std::span<const int32_t> tokens) {
  std::vector<Sampled> sampled;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    auto it = fed(plan.items[i]);
    if (it == sequences_.end()) continue;
    sampled.push_back({it->second->id, tokens[i], std::nullopt});
    accept(it, tokens[i]);
  }
  return sampled;
}

std::vector<Finished> Scheduler::take_finished() { return std::exchange(finished_, {}); }

}  // namespace ftllm::scheduler
