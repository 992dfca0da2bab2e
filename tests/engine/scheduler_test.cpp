// Sampling against transformers' logits processors, and the scheduler, KV pages and stop rules with no
// model at all.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <functional>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "kvcache/kv_cache.h"
#include "scheduler/sampling.h"
#include "scheduler/scheduler.h"

using namespace ftllm;
using namespace ftllm::scheduler;

BOOST_AUTO_TEST_SUITE(sampling)

BOOST_AUTO_TEST_CASE(filters_match_transformers_processors) {
  simdjson::dom::parser parser;
  auto doc = parser.load(FTLLM_SOURCE_ROOT "/tests/data/sampling.json");
  std::vector<float> logits;
  std::vector<int32_t> context;
  for (double v : doc["logits"].get_array()) logits.push_back(float(v));
  for (int64_t v : doc["context"].get_array()) context.push_back(int32_t(v));
  int cases = 0;
  for (auto c : doc["cases"].get_array()) {
    SamplingParams p;
    simdjson::dom::object params = c["params"];
    for (auto [key, value] : params) {
      double v = double(value);
      if (key == "repetition_penalty") p.repetition_penalty = float(v);
      if (key == "temperature") p.temperature = float(v);
      if (key == "top_k") p.top_k = int32_t(v);
      if (key == "top_p") p.top_p = float(v);
      if (key == "min_p") p.min_p = float(v);
    }
    std::vector<float> got = logits;
    process_logits(p, got, context, {});
    size_t i = 0;
    BOOST_TEST_CONTEXT("case " << simdjson::to_string(params)) {
      for (auto e : c["expected"].get_array()) {
        if (e.is_null()) {
          BOOST_TEST(std::isinf(got[i]), "token " << i << " should be filtered out");
        } else {
          BOOST_TEST(std::fabs(got[i] - float(double(e))) < 1e-5, "token " << i << ": " << got[i] << " vs " << double(e));
        }
        ++i;
      }
    }
    ++cases;
  }
  BOOST_TEST(cases == 10);
}

BOOST_AUTO_TEST_CASE(presence_and_frequency_penalties_count_output_tokens) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  std::vector<float> logits(6, 1.0f);
  std::vector<int32_t> context = {0, 1, 2, 2, 2, 4};
  std::vector<int32_t> output = {2, 2, 4};  // the last three of the context
  process_logits(p, logits, context, output);
  BOOST_TEST(logits[0] == 1.0f);  // prompt only: no penalty
  BOOST_TEST(logits[1] == 1.0f);
  BOOST_TEST(logits[2] == 1.0f - 0.5f - 0.25f * 2);
  BOOST_TEST(logits[4] == 1.0f - 0.5f - 0.25f);
  BOOST_TEST(logits[5] == 1.0f);
}

BOOST_AUTO_TEST_CASE(logit_bias_comes_first) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{0, 5.0f}, {1, -100.0f}, {99, 3.0f}};  // an id outside the vocabulary is ignored
  Sampler s(p);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  BOOST_TEST(s.next(logits, {}, {}) == 0);
  BOOST_TEST(logits[1] == -97.0f);
}

BOOST_AUTO_TEST_CASE(greedy_is_argmax_after_penalties) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  std::vector<int32_t> context = {1};
  BOOST_TEST(s.next(logits, context, {}) == 2);  // 3 / 2 = 1.5 < 2
}

BOOST_AUTO_TEST_CASE(seeded_draws_are_reproducible_and_follow_the_distribution) {
  SamplingParams p;
  p.seed = 1234;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 20000; ++i) {
      std::vector<float> logits = {0.0f, std::log(3.0f), -INFINITY};
      out.push_back(s.next(logits, {}, {}));
    }
    return out;
  };
  auto a = draw(1234), b = draw(1234), c = draw(99);
  BOOST_TEST((a == b));
  BOOST_TEST((a != c));
  double ones = double(std::count(a.begin(), a.end(), 1)) / double(a.size());
  BOOST_TEST(std::fabs(ones - 0.75) < 0.015, "P(token 1) = " << ones << ", expected 0.75");
  BOOST_TEST(std::count(a.begin(), a.end(), 2) == 0);
}

BOOST_AUTO_TEST_CASE(draws_over_a_large_vocabulary_follow_the_distribution) {
  // 1003 tokens (vectorised lanes and a tail): the likeliest one early, then late, then in the tail, the
  // rest far below or removed, and a NaN the draw must pass over.
  for (size_t likely : {size_t(5), size_t(700), size_t(1001)}) {
    SamplingParams p;
    p.seed = 42;
    p.temperature = 0.5f;
    Sampler s(p);
    int hits = 0, other = 0;
    const int draws = 20000;
    for (int i = 0; i < draws; ++i) {
      std::vector<float> logits(1003, -1000.0f);
      logits[17] = -INFINITY;
      logits[300] = std::nanf("");
      logits[likely] = 10.0f + 0.5f * std::log(3.0f);  // at T = 0.5: weight 3 against token 512's 1
      logits[512] = 10.0f;
      const int32_t t = s.next(logits, {}, {});
      hits += t == int32_t(likely);
      other += t != int32_t(likely) && t != 512;
    }
    BOOST_TEST(std::fabs(double(hits) / draws - 0.75) < 0.015, "likely at " << likely << ": P = " << double(hits) / draws);
    BOOST_TEST(other == 0);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(scheduler)

namespace {
// Runs the scheduler with logits that always favour `token_of(step)`, as a fake model.
struct FakeModel {
  int64_t vocab = 10;
  std::vector<std::vector<float>> rows;
  std::vector<float*> step(const StepPlan& plan, int32_t favourite) {
    rows.assign(plan.items.size(), std::vector<float>(size_t(vocab), 0.0f));
    std::vector<float*> ptrs;
    for (auto& r : rows) {
      r[size_t(favourite)] = 5.0f;
      ptrs.push_back(r.data());
    }
    return ptrs;
  }
};
GenerationRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  return r;
}
}  // namespace

BOOST_AUTO_TEST_CASE(prefill_then_one_token_per_step_until_length) {
  Scheduler s;
  FakeModel m;
  std::vector<int32_t> eos = {9};
  uint64_t id = s.add(greedy({1, 2, 3}, 3), eos);
  StepPlan p1 = s.plan();
  BOOST_REQUIRE_EQUAL(p1.items.size(), 1u);
  BOOST_TEST(p1.items[0].tokens == std::vector<int32_t>({1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(p1.items[0].start_pos == 0);
  s.commit(p1, m.step(p1, 4), m.vocab);
  StepPlan p2 = s.plan();
  BOOST_TEST(p2.items[0].tokens == std::vector<int32_t>({4}), boost::test_tools::per_element());
  BOOST_TEST(p2.items[0].start_pos == 3);
  s.commit(p2, m.step(p2, 5), m.vocab);
  StepPlan p3 = s.plan();
  s.commit(p3, m.step(p3, 6), m.vocab);
  auto done = s.take_finished();
  BOOST_REQUIRE_EQUAL(done.size(), 1u);
  BOOST_TEST(done[0].seq_id == id);
  BOOST_TEST((done[0].result.finish == FinishReason::Length));
  BOOST_TEST(done[0].result.tokens == std::vector<int32_t>({4, 5, 6}), boost::test_tools::per_element());
  BOOST_TEST(s.idle());
}

BOOST_AUTO_TEST_CASE(eos_and_stop_ids_end_a_sequence_unless_ignored) {
  Scheduler s;
  FakeModel m;
  std::vector<int32_t> eos = {9};
  GenerationRequest stop_on_7 = greedy({1}, 10);
  stop_on_7.stop_token_ids = {7};
  GenerationRequest ignore = greedy({1}, 2);
  ignore.ignore_eos = true;
  s.add(greedy({1}, 10), eos);
  s.add(stop_on_7, eos);
  s.add(ignore, eos);
  StepPlan p = s.plan();
  BOOST_TEST(p.items.size() == 3u);
  s.commit(p, m.step(p, 9), m.vocab);  // everyone draws eos
  auto done = s.take_finished();
  BOOST_REQUIRE_EQUAL(done.size(), 2u);
  for (auto& f : done) BOOST_TEST((f.result.finish == FinishReason::Stop));
  p = s.plan();
  s.commit(p, m.step(p, 7), m.vocab);
  done = s.take_finished();
  BOOST_REQUIRE_EQUAL(done.size(), 1u);
  BOOST_TEST((done[0].result.finish == FinishReason::Length));
  BOOST_TEST(done[0].result.tokens == std::vector<int32_t>({9, 7}), boost::test_tools::per_element());
}

// A GPU step of plain greedy requests hands the scheduler token ids, not logits: the same sequences end
// the same way; anything that needs the logits (sampling, penalties, logprobs) keeps the step on commit().
BOOST_AUTO_TEST_CASE(greedy_steps_can_commit_chosen_tokens) {
  std::vector<int32_t> eos = {9};
  Scheduler by_logits, by_tokens;
  FakeModel m;
  GenerationRequest stop_on_7 = greedy({1, 2}, 10);
  stop_on_7.stop_token_ids = {7};
  for (Scheduler* s : {&by_logits, &by_tokens}) {
    s->add(greedy({1, 2, 3}, 3), eos);
    s->add(stop_on_7, eos);
  }
  for (int32_t favourite : {4, 7, 5, 6}) {
    StepPlan a = by_logits.plan(), b = by_tokens.plan();
    BOOST_REQUIRE_EQUAL(a.items.size(), b.items.size());
    BOOST_TEST(by_tokens.plain_greedy(b));
    const std::vector<int32_t> chosen(b.items.size(), favourite);
    auto x = by_logits.commit(a, m.step(a, favourite), m.vocab);
    auto y = by_tokens.commit_tokens(b, chosen);
    BOOST_REQUIRE_EQUAL(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) BOOST_TEST((x[i].seq_id == y[i].seq_id && x[i].token == y[i].token));
  }
  auto fa = by_logits.take_finished(), fb = by_tokens.take_finished();
  BOOST_REQUIRE_EQUAL(fa.size(), 2u);
  BOOST_REQUIRE_EQUAL(fb.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    BOOST_TEST(fa[i].result.tokens == fb[i].result.tokens, boost::test_tools::per_element());
    BOOST_TEST((fa[i].result.finish == fb[i].result.finish));
  }
  BOOST_TEST(by_tokens.idle());
  // Requests that need the logits are not plain greedy.
  for (auto tweak : std::vector<std::function<void(GenerationRequest&)>>{
           [](GenerationRequest& r) { r.sampling.temperature = 0.7f; },
           [](GenerationRequest& r) { r.sampling.repetition_penalty = 1.1f; },
           [](GenerationRequest& r) { r.sampling.presence_penalty = 0.5f; },
           [](GenerationRequest& r) { r.sampling.logit_bias = {{3, 1.0f}}; },
           [](GenerationRequest& r) { r.logprobs = 0; }}) {
    Scheduler s;
    GenerationRequest r = greedy({1}, 4);
    tweak(r);
    s.add(greedy({1}, 4), eos);
    s.add(r, eos);
    BOOST_TEST(!s.plain_greedy(s.plan()));
  }
}

BOOST_AUTO_TEST_CASE(long_prompts_are_fed_in_slices_and_running_is_capped) {
  Scheduler s({4, 2});
  FakeModel m;
  s.add(greedy({1, 2, 3, 4, 5, 6, 7, 8, 9, 1}, 1), {});
  s.add(greedy({1}, 1), {});
  s.add(greedy({2}, 1), {});
  StepPlan p = s.plan();
  BOOST_REQUIRE_EQUAL(p.items.size(), 1u);  // the 4-token budget is used up by the first slice
  BOOST_TEST(p.items[0].tokens.size() == 4u);
  s.commit(p, m.step(p, 3), m.vocab);
  BOOST_TEST(s.take_finished().empty());  // a slice samples nothing
  p = s.plan();
  BOOST_TEST(p.items[0].start_pos == 4);
  BOOST_TEST(p.items[0].tokens.size() == 4u);
  s.commit(p, m.step(p, 3), m.vocab);
  p = s.plan();
  BOOST_REQUIRE_EQUAL(p.items.size(), 2u);  // last slice of 2, and one more sequence (max_running 2)
  BOOST_TEST(p.items[0].tokens.size() == 2u);
  BOOST_TEST(s.waiting() == 1u);
  s.commit(p, m.step(p, 3), m.vocab);
  BOOST_TEST(s.take_finished().size() == 2u);
  p = s.plan();
  s.commit(p, m.step(p, 3), m.vocab);
  BOOST_TEST(s.take_finished().size() == 1u);
  BOOST_TEST(s.idle());
}

BOOST_AUTO_TEST_CASE(logprobs_are_the_raw_log_softmax) {
  Scheduler s;
  FakeModel m;
  GenerationRequest r = greedy({1}, 1);
  r.logprobs = 2;
  s.add(r, {});
  StepPlan p = s.plan();
  auto sampled = s.commit(p, m.step(p, 5), m.vocab);
  BOOST_REQUIRE_EQUAL(sampled.size(), 1u);
  BOOST_REQUIRE(sampled[0].logprob.has_value());
  const double want = 5.0 - std::log(std::exp(5.0) + 9.0);  // one logit of 5, nine of 0
  BOOST_TEST(sampled[0].logprob->logprob == want, boost::test_tools::tolerance(1e-5));
  BOOST_REQUIRE_EQUAL(sampled[0].logprob->top.size(), 2u);
  BOOST_TEST(sampled[0].logprob->top[0].first == 5);
  BOOST_TEST(sampled[0].logprob->top[1].second == -std::log(std::exp(5.0) + 9.0), boost::test_tools::tolerance(1e-5));
  GenerationRequest plain = greedy({1}, 1);
  s.add(plain, {});
  p = s.plan();
  BOOST_TEST(!s.commit(p, m.step(p, 5), m.vocab)[0].logprob.has_value());
}

namespace {
// A grammar over the fake vocabulary: odd tokens only, complete after `length` of them.
struct OddTokens final : TokenGrammar {
  int length;
  explicit OddTokens(int n) : length(n) {}
  struct Matcher final : TokenMatcher {
    int left;
    explicit Matcher(int n) : left(n) {}
    void mask(std::span<float> logits) override {
      for (size_t i = 0; i < logits.size(); i += 2) logits[i] = -INFINITY;
    }
    bool accept(int32_t token) override { return token % 2 == 1 && left-- > 0; }
    bool complete() const override { return left == 0; }
  };
  std::unique_ptr<TokenMatcher> start() const override { return std::make_unique<Matcher>(length); }
};
}  // namespace

// The grammar's mask comes before everything else: greedy and sampled draws, and the logprobs, see only
// allowed tokens; a complete grammar ends the sequence; it keeps the step off the plain-greedy path.
BOOST_AUTO_TEST_CASE(a_grammar_masks_before_sampling_and_logprobs_and_ends_the_sequence) {
  Scheduler s;
  FakeModel m;
  auto grammar = std::make_shared<OddTokens>(3);
  GenerationRequest g = greedy({1}, 10);
  g.grammar = grammar;
  g.logprobs = 3;
  GenerationRequest sampled = g;
  sampled.sampling.temperature = 1.0f;
  sampled.sampling.seed = 7;
  sampled.logprobs = -1;
  s.add(g, {});
  s.add(sampled, {});
  std::vector<std::vector<int32_t>> got;
  for (int step = 0; step < 5 && !s.idle(); ++step) {
    StepPlan p = s.plan();
    BOOST_TEST(!s.plain_greedy(p));
    auto taken = s.commit(p, m.step(p, 4), m.vocab);  // the model wants 4, which the grammar forbids
    for (auto& t : taken) {
      BOOST_TEST(t.token % 2 == 1, "token " << t.token);
      if (t.logprob) {
        // Five odd tokens share the mass: log(1/5) each; no even token among the alternatives.
        BOOST_TEST(t.logprob->logprob == -std::log(5.0), boost::test_tools::tolerance(1e-5));
        for (auto [alt, lp] : t.logprob->top) BOOST_TEST(alt % 2 == 1);
      }
    }
  }
  auto done = s.take_finished();
  BOOST_REQUIRE_EQUAL(done.size(), 2u);
  for (auto& f : done) {
    BOOST_TEST((f.result.finish == FinishReason::Stop));
    BOOST_TEST(f.result.tokens.size() == 3u);
  }
  BOOST_TEST(s.idle());
}

BOOST_AUTO_TEST_CASE(cancel_and_errors) {
  Scheduler s;
  FakeModel m;
  uint64_t a = s.add(greedy({1}, 5), {});
  uint64_t b = s.add(greedy({}, 5), {});
  auto done = s.take_finished();
  BOOST_REQUIRE_EQUAL(done.size(), 1u);
  BOOST_TEST(done[0].seq_id == b);
  BOOST_TEST((done[0].result.finish == FinishReason::Error));
  BOOST_TEST(done[0].result.error.find("empty") != std::string::npos);
  StepPlan p = s.plan();
  s.cancel(a);  // during the step: its logits are ignored
  s.commit(p, m.step(p, 1), m.vocab);
  done = s.take_finished();
  BOOST_REQUIRE_EQUAL(done.size(), 1u);
  BOOST_TEST((done[0].result.finish == FinishReason::Cancelled));
  BOOST_TEST(s.idle());
}

// The stated budget: a step carries at most max_batch_tokens tokens, every running stream's next token
// first; a 2000-token prompt arriving among three streams goes in slices beside them, never instead.
BOOST_AUTO_TEST_CASE(a_long_prompt_never_holds_running_streams_back_more_than_one_step) {
  Scheduler s({512, 8});
  FakeModel m;
  std::vector<uint64_t> streams;
  for (int32_t i = 0; i < 3; ++i) streams.push_back(s.add(greedy({i + 1}, 50), {}));
  StepPlan p = s.plan();
  s.commit(p, m.step(p, 3), m.vocab);
  const uint64_t long_one = s.add(greedy(std::vector<int32_t>(2000, 5), 2), {});
  int slices = 0;
  for (int step = 0; step < 6; ++step) {
    p = s.plan();
    int64_t tokens = 0;
    for (const StepItem& item : p.items) tokens += int64_t(item.tokens.size());
    BOOST_TEST(tokens <= 512);
    for (uint64_t id : streams)
      BOOST_TEST(std::count_if(p.items.begin(), p.items.end(), [&](const StepItem& it) { return it.seq_id == id && it.tokens.size() == 1; }) == 1);
    slices += int(std::count_if(p.items.begin(), p.items.end(), [&](const StepItem& it) { return it.seq_id == long_one; }));
    s.commit(p, m.step(p, 3), m.vocab);
  }
  BOOST_TEST(slices >= 4);  // 509 prompt tokens a step: the 2000 are in by the fourth
}

BOOST_AUTO_TEST_CASE(admission_waits_skips_and_preempted_sequences_feed_their_context_again) {
  Scheduler s({64, 8});
  FakeModel m;
  const uint64_t a = s.add(greedy({1, 2, 3, 4, 5}, 4), {});
  const uint64_t b = s.add(greedy({6, 7}, 4), {});
  const uint64_t c = s.add(greedy({8}, 4), {});
  // a joins with 3 tokens cached (it feeds from position 3); b is skipped; c joins; then wait.
  StepPlan p = s.plan([&](uint64_t id, std::span<const int32_t>) {
    if (id == a) return Admission{Admission::Join, 3};
    if (id == b) return Admission{Admission::Skip, 0};
    return Admission{Admission::Join, 0};
  });
  BOOST_REQUIRE_EQUAL(p.items.size(), 2u);
  BOOST_TEST(p.items[0].seq_id == a);
  BOOST_TEST(p.items[0].start_pos == 3);
  BOOST_TEST(p.items[0].tokens == std::vector<int32_t>({4, 5}), boost::test_tools::per_element());
  BOOST_TEST(p.items[1].seq_id == c);
  BOOST_TEST(s.waiting() == 1u);
  s.commit(p, m.step(p, 7), m.vocab);
  // Nobody joins while the admission says wait; running ones decode.
  p = s.plan([](uint64_t, std::span<const int32_t>) { return Admission{Admission::Wait, 0}; });
  BOOST_TEST(p.items.size() == 2u);
  // a goes back to the queue's head: it joins again before b and feeds prompt and output so far.
  s.preempt(a);
  BOOST_TEST(s.running() == 1u);
  p = s.plan();
  BOOST_REQUIRE_EQUAL(p.items.size(), 3u);
  BOOST_TEST(p.items[0].seq_id == c);
  BOOST_TEST(p.items[1].seq_id == a);
  BOOST_TEST(p.items[1].start_pos == 0);
  BOOST_TEST(p.items[1].tokens == std::vector<int32_t>({1, 2, 3, 4, 5, 7}), boost::test_tools::per_element());
  BOOST_TEST(p.items[2].seq_id == b);
  for (int step = 0; step < 4; ++step) {
    s.commit(p, m.step(p, 7), m.vocab);
    p = s.plan();
  }
  std::map<uint64_t, GenerationResult> done;
  for (auto& f : s.take_finished()) done[f.seq_id] = f.result;
  BOOST_REQUIRE_EQUAL(done.size(), 3u);
  BOOST_TEST(done[a].tokens == std::vector<int32_t>({7, 7, 7, 7}), boost::test_tools::per_element());
  BOOST_TEST(done[a].cached_tokens == 3);  // as found when it first joined
  BOOST_TEST(done[b].cached_tokens == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(prefix_cache)

namespace {
std::vector<int32_t> count_from(int32_t first, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}
}  // namespace

BOOST_AUTO_TEST_CASE(full_blocks_are_found_by_their_tokens_and_kept_after_release) {
  kvcache::KvPool pool(1, 1, 4, 16, 8);
  kvcache::SequenceKv a;
  const std::vector<int32_t> context = count_from(100, 40);  // two full blocks and 8 tokens
  BOOST_TEST(a.attach_prefix(pool, context) == 0);
  BOOST_REQUIRE(a.reserve(pool, 40));
  a.written(pool, std::span(context).first(20));
  BOOST_TEST(pool.cached_blocks() == 1);
  a.written(pool, std::span(context).subspan(20));
  BOOST_TEST(pool.cached_blocks() == 2);
  const std::vector<int32_t> held = a.blocks;
  a.release(pool);
  // Both full blocks stay cached and still count as free, and so does the last, with its 8 rows.
  BOOST_TEST(pool.free_blocks() == 8);
  BOOST_TEST(pool.used_blocks() == 0);
  BOOST_TEST(pool.cached_blocks() == 3);

  kvcache::SequenceKv b;
  // The two full blocks by reference, and 2 of the last one's rows copied (the last token computed).
  BOOST_TEST(b.attach_prefix(pool, std::span(context).first(35)) == 34);
  BOOST_TEST(b.blocks.size() == 3u);
  BOOST_TEST(std::vector<int32_t>(b.blocks.begin(), b.blocks.begin() + 2) == std::vector<int32_t>(held.begin(), held.begin() + 2),
             boost::test_tools::per_element());
  BOOST_TEST(b.blocks[2] != held[2]);
  BOOST_TEST(pool.used_blocks() == 3);
  b.release(pool);
  // b's last block held 2 rows, the same tokens as a's 8 begin with: published beside it.
  BOOST_TEST(pool.cached_blocks() == 4);
  // The last token is computed, never found: a context of exactly 32 tokens takes one block and 15 rows
  // of the second (copied into a block of its own).
  BOOST_TEST(b.attach_prefix(pool, std::span(context).first(32)) == 31);
  BOOST_TEST(b.blocks.size() == 2u);
  BOOST_TEST(b.blocks[1] != held[1]);
  b.release(pool);
  // A different token in the second block: the first block and the second's four rows before it; in the
  // first block's fourth: its three rows.
  std::vector<int32_t> other = context;
  other[20] = 7;
  BOOST_TEST(b.attach_prefix(pool, other) == 20);
  b.release(pool);
  other[3] = 7;
  BOOST_TEST(b.attach_prefix(pool, other) == 3);
  b.release(pool);
  other[0] = 7;
  BOOST_TEST(b.attach_prefix(pool, other) == 0);
  // Turned off: nothing is found, and the cached blocks are plain free ones.
  pool.set_prefix_cache(false);
  BOOST_TEST(b.attach_prefix(pool, context) == 0);
  BOOST_TEST(pool.cached_blocks() == 0);
  BOOST_TEST(pool.free_blocks() == 8);
  b.release(pool);
  BOOST_TEST(pool.cached_blocks() == 0);  // nor is a last block published when off
}

// A context that parts from a cached block midway gets that block's rows before the parting, in every
// layer, keys and values, byte for byte, in a block of its own; the cached block stays as it was. Where
// the pages are not all in host memory, only whole blocks are taken.
BOOST_AUTO_TEST_CASE(a_block_found_in_part_lends_its_first_rows) {
  kvcache::KvPool pool(2, 2, 8, 16, 6, false, kvcache::KvDtype::F16);
  const std::vector<int32_t> context = count_from(100, 40);
  kvcache::SequenceKv a;
  BOOST_REQUIRE(a.reserve(pool, 40));
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t pos = 0; pos < 40; ++pos)
      for (int64_t i = 0; i < pool.row_bytes(); ++i) {
        pool.key(l, a.block_of(pos, 16), pos % 16)[i] = uint8_t(l * 7 + pos * 3 + i);
        pool.value(l, a.block_of(pos, 16), pos % 16)[i] = uint8_t(l * 5 + pos * 11 + i + 1);
      }
  a.written(pool, context);
  const int32_t source = a.blocks[1];
  a.release(pool);
  std::vector<int32_t> other = context;
  other[25] = 1;  // parts from the second block after 9 rows
  kvcache::SequenceKv b;
  BOOST_TEST(b.attach_prefix(pool, other) == 25);
  BOOST_REQUIRE(b.blocks.size() == 2u);
  BOOST_TEST(b.tokens == std::vector<int32_t>(context.begin(), context.begin() + 25), boost::test_tools::per_element());
  const int32_t own = b.blocks[1];
  BOOST_TEST(own != source);
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t slot = 0; slot < 9; ++slot) {
      BOOST_TEST(std::memcmp(pool.key(l, own, slot), pool.key(l, source, slot), size_t(pool.row_bytes())) == 0);
      BOOST_TEST(std::memcmp(pool.value(l, own, slot), pool.value(l, source, slot), size_t(pool.row_bytes())) == 0);
    }
  BOOST_TEST(pool.key(1, source, 9)[0] == uint8_t(7 + 25 * 3));  // the source's own rows untouched
  // b's rows of the second block, once written, publish it as its own (different tokens from position 25),
  // beside a's two full blocks and its last, part written.
  b.written(pool, std::span(other).subspan(25, 7));
  BOOST_TEST(pool.cached_blocks() == 4);
  b.release(pool);
  // With a layer's pages split over devices, no copy: the whole first block only.
  pool.set_shards(1, {Tensor::zeros_f32({1})});
  BOOST_TEST(!pool.rows_on_host());
  other[20] = 2;
  BOOST_TEST(b.attach_prefix(pool, other) == 16);
  b.release(pool);
}

BOOST_AUTO_TEST_CASE(the_least_recently_used_blocks_give_way_tails_first) {
  kvcache::KvPool pool(1, 1, 4, 16, 6);
  const std::vector<int32_t> first = count_from(1, 33), second = count_from(500, 33);
  for (const auto* context : {&first, &second}) {
    kvcache::SequenceKv s;
    BOOST_REQUIRE(s.reserve(pool, 33));
    s.written(pool, std::span(*context).first(32));  // two full blocks (a last block part written is kept too)
    s.release(pool);
  }
  BOOST_TEST(pool.cached_blocks() == 4);
  // Using `first` again makes `second` the least recently used.
  kvcache::SequenceKv s;
  BOOST_TEST(s.attach_prefix(pool, first) == 32);
  s.release(pool);
  // A new sequence takes the two never-cached blocks, then the tail of `second`: its head stays findable.
  kvcache::SequenceKv t;
  BOOST_REQUIRE(t.reserve(pool, 48));
  BOOST_TEST(pool.cached_blocks() == 3);
  BOOST_TEST(s.attach_prefix(pool, second) == 16);
  s.release(pool);
  BOOST_TEST(s.attach_prefix(pool, first) == 32);
  // The last idle block goes too; with everything held, nothing is left to take.
  BOOST_REQUIRE(t.reserve(pool, 64));
  BOOST_TEST(pool.free_blocks() == 0);
  BOOST_TEST(pool.cached_blocks() == 2);
  BOOST_TEST(!t.reserve(pool, 80));
  s.release(pool);
  t.release(pool);
  BOOST_TEST(pool.free_blocks() == 6);
}

BOOST_AUTO_TEST_CASE(the_same_rows_computed_twice_are_kept_once) {
  kvcache::KvPool pool(1, 1, 4, 16, 6);
  const std::vector<int32_t> context = count_from(9, 20);
  kvcache::SequenceKv a, b;
  BOOST_REQUIRE(a.reserve(pool, 20));
  BOOST_REQUIRE(b.reserve(pool, 20));
  BOOST_TEST(pool.free_blocks() == 2);
  a.written(pool, context);
  b.written(pool, context);
  // b's first block was a copy of a's: b now shares a's, and its own is free again.
  BOOST_TEST(b.blocks[0] == a.blocks[0]);
  BOOST_TEST(pool.free_blocks() == 3);
  a.release(pool);
  BOOST_TEST(pool.used_blocks() == 2);  // b holds the shared block and its own partial one
  b.release(pool);
  BOOST_TEST(pool.free_blocks() == 6);
  // The full block and a's last one, with its 4 rows; b's last, the same rows, was not kept twice.
  BOOST_TEST(pool.cached_blocks() == 2);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(kv_pages_are_shared_and_returned) {
  kvcache::KvPool pool(2, 2, 4, 16, 5);
  kvcache::SequenceKv a, b;
  BOOST_TEST(a.reserve(pool, 33));  // 3 blocks
  BOOST_TEST(pool.free_blocks() == 2);
  BOOST_TEST(!b.reserve(pool, 48));  // needs 3: refused, nothing taken
  BOOST_TEST(pool.free_blocks() == 2);
  BOOST_TEST(b.reserve(pool, 32));
  BOOST_TEST(pool.free_blocks() == 0);
  BOOST_TEST(a.reserve(pool, 48));  // already has room
  // Rows of different tokens, layers and kinds never overlap.
  uint8_t* k0 = pool.key(0, a.block_of(17, 16), 17 % 16);
  uint8_t* v0 = pool.value(0, a.block_of(17, 16), 17 % 16);
  uint8_t* k1 = pool.key(1, a.block_of(17, 16), 17 % 16);
  BOOST_TEST(std::abs(k0 - v0) >= 32);
  BOOST_TEST(std::abs(k0 - k1) >= 32);
  a.release(pool);
  BOOST_TEST(pool.free_blocks() == 3);
  BOOST_TEST(a.blocks.empty());
}
