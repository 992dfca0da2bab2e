// Qwen3-Next's gated DeltaNet layers: a recurrent state per sequence instead of KV pages. Beyond the
// transformers fixtures every architecture passes (model_test.cpp), what the state adds: a prompt fed in
// steps of any size computes what token-by-token decoding computes, to the bit; a slot let go and taken
// by another sequence starts from zeros; the pool sizes the states and keeps prefix caching off.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <functional>

#include "../common/exact_options.h"
#include "../common/fixture_reference.h"
#include "../common/logit_error.h"
#include "../common/model_run.h"
#include "runner/model_instance.h"

namespace fs = std::filesystem;
using namespace ftllm;

namespace {

const fs::path kModels = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "models";

std::unique_ptr<ModelInstance> load(const std::string& name, const std::string& kernels = "auto") {
  ModelLoadOptions o = test::exact_options();
  o.kv_dtype = "f32";
  o.path = (kModels / name).string();
  o.threads = 2;
  o.context_length = 128;
  o.max_sequences = 3;
  o.kernels = kernels;
  return ModelInstance::load(o);
}

// The last token's logits after feeding `tokens` in steps of `chunk` tokens.
std::vector<float> fed_in_chunks(ModelInstance& m, const std::vector<int32_t>& tokens, size_t chunk) {
  std::vector<float> out;
  m.runner().exclusive([&](const ForwardPass& pass) {
    kvcache::SequenceKv kv;
    if (!kv.reserve(pass.kv, int64_t(tokens.size()))) throw EngineError("no room in the KV cache");
    Tensor logits;
    for (size_t done = 0; done < tokens.size(); done += chunk) {
      model::Batch batch;
      for (size_t i = done; i < std::min(tokens.size(), done + chunk); ++i) {
        batch.tokens.push_back(tokens[i]);
        batch.positions.push_back(int64_t(i));
        batch.seq.push_back(0);
      }
      batch.logit_rows = {int64_t(batch.tokens.size()) - 1};
      logits = pass.forward(batch, {&kv});
    }
    kv.release(pass.kv);
    out.assign(logits.as<float>(), logits.as<float>() + m.config().vocab_size);
  });
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(linear_attention)

// Chunks of every size from 1 to 64 over 85 tokens, with each kernel set: the same bits as one token per
// step (and with the reference kernels, transformers' logits after the fixture's 45).
BOOST_AUTO_TEST_CASE(a_prompt_in_chunks_of_any_size_equals_token_by_token) {
  for (const char* name : {"qwen3-next-f32", "qwen3-next-bf16"})
    for (const char* kernels : {"scalar", "avx2", "auto"}) {
      BOOST_TEST_CONTEXT(name << " --kernels " << kernels) {
        auto m = load(name, kernels);
        const test::Reference ref = test::read_reference(kModels / name);
        std::vector<int32_t> all = ref.prompt;
        all.insert(all.end(), ref.greedy.begin(), ref.greedy.end() - 1);
        if (std::string(kernels) == "scalar") BOOST_TEST(test::relative_error(fed_in_chunks(*m, all, 1), ref.final_logits) < 1e-4);
        all.insert(all.end(), ref.prompt.rbegin(), ref.prompt.rend());  // longer than the largest chunk
        const std::vector<float> one_by_one = fed_in_chunks(*m, all, 1);
        for (size_t chunk = 2; chunk <= 64; ++chunk) {
          const std::vector<float> got = fed_in_chunks(*m, all, chunk);
          BOOST_TEST(std::memcmp(got.data(), one_by_one.data(), got.size() * sizeof(float)) == 0, "chunks of " << chunk);
        }
      }
    }
}

// Three slots: sequences come and go through them; each new one starts from a zero state, whatever the
// slot held before, so the same prompt gives the same tokens first and last.
BOOST_AUTO_TEST_CASE(a_reused_state_slot_starts_from_zeros) {
  auto m = load("qwen3-next-f32");
  auto pool = [&](const std::function<void(const kvcache::KvPool&)>& look) {
    m->runner().exclusive([&](const ForwardPass& pass) { look(pass.kv); });
  };
  pool([](const kvcache::KvPool& kv) {
    BOOST_TEST(kv.state_slots() == 3);
    BOOST_TEST(!kv.prefix_cache());  // asked for "on"
    BOOST_TEST(kv.recurrent(0));
    BOOST_TEST(!kv.recurrent(1));  // the full-attention layer keeps pages
  });
  const test::Reference ref = test::read_reference(kModels / "qwen3-next-f32");
  auto request = [](std::vector<int32_t> prompt, int32_t n) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.max_tokens = n;
    return r;
  };
  const auto first = test::generate(*m, {request(ref.prompt, 12)});
  std::vector<GenerationRequest> crowd;
  for (int i = 0; i < 7; ++i) crowd.push_back(request(std::vector<int32_t>(ref.prompt.rbegin() + i, ref.prompt.rend()), 5 + i));
  test::generate(*m, crowd);  // seven sequences through three slots
  const auto again = test::generate(*m, {request(ref.prompt, 12)});
  BOOST_TEST(first[0].tokens == again[0].tokens, boost::test_tools::per_element());
  const size_t n = std::min<size_t>(12, ref.greedy.size());
  BOOST_TEST(std::vector<int32_t>(ref.greedy.begin(), ref.greedy.begin() + ptrdiff_t(n)) == again[0].tokens, boost::test_tools::per_element());
  pool([](const kvcache::KvPool& kv) { BOOST_TEST(kv.free_state_slots() == 3); });
}

BOOST_AUTO_TEST_SUITE_END()
