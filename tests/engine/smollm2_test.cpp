// A real pretrained model end to end: SmolLM2-135M-Instruct, read straight from its Q4_1 GGUF. With the
// reference kernels (float32 activations) it must continue a chat prompt exactly as transformers does
// (tests/data/smollm2.json, by make_fixtures.py); with the fast kernels (int8 activations, as llama.cpp
// computes) exactly as llama.cpp does (tests/data/smollm2_llamacpp.json, by record_llamacpp.sh).
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <cmath>

#include "../common/exact_options.h"
#include "../common/logit_error.h"
#include "../common/real_model.h"
#include "runner/model_instance.h"
#include "../common/model_run.h"

using namespace ftllm;

namespace {

struct Continuation {
  double worst_logit_error;  // over transformers' top 20 after the prompt
  std::vector<int32_t> greedy, transformers_greedy;
};

Continuation continue_prompt(const std::string& kernels) {
  std::string gguf = test::smollm2_gguf_path();
  BOOST_REQUIRE_MESSAGE(!gguf.empty(), "SmolLM2 GGUF not found under .venv: run scripts/setup.sh");
  simdjson::dom::parser parser;
  simdjson::dom::element ref = parser.load(FTLLM_SOURCE_ROOT "/tests/data/smollm2.json");

  ModelLoadOptions o = test::exact_options();
  o.path = gguf;
  o.threads = 2;
  o.context_length = 256;
  o.max_sequences = 1;
  o.kernels = kernels;
  auto model = ModelInstance::load(o);
  BOOST_TEST(model->config().num_layers == 30);
  BOOST_TEST(model->config().vocab_size == 49152);

  GenerationRequest req;
  for (int64_t t : ref["prompt"].get_array()) req.prompt.push_back(int32_t(t));
  std::vector<int32_t> want;
  for (int64_t t : ref["greedy"].get_array()) want.push_back(int32_t(t));
  BOOST_REQUIRE_EQUAL(want.size(), 32u);

  // The logits of transformers' top 20 tokens after the prompt.
  auto logits = test::prompt_logits(*model, req.prompt, {int64_t(req.prompt.size()) - 1})[0];
  auto ids = ref["top_ids"].get_array();
  auto values = ref["top_logits"].get_array();
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    worst = std::max(worst, test::difference(logits[size_t(int64_t(ids.at(i)))], values.at(i)));
  BOOST_TEST_MESSAGE("SmolLM2 (" << kernels << " kernels): max |logit error| over transformers' top 20 = " << worst);

  req.sampling.temperature = 0;
  req.max_tokens = 32;
  std::vector<GenerationResult> out = test::generate(*model, {req});
  return {worst, out[0].tokens, want};
}

}  // namespace

BOOST_AUTO_TEST_CASE(smollm2_reference_kernels_match_transformers_token_for_token) {
  Continuation c = continue_prompt("scalar");
  BOOST_TEST(c.worst_logit_error < 1e-3);
  BOOST_TEST(c.greedy == c.transformers_greedy, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(smollm2_fast_kernels_match_llamacpp_token_for_token) {
  Continuation c = continue_prompt("auto");
  // int8 activations move logits by their rounding: bounded here, and exactly llama.cpp's greedy path.
  BOOST_TEST(c.worst_logit_error < 0.5);
  simdjson::dom::parser parser;
  simdjson::dom::element ref = parser.load(FTLLM_SOURCE_ROOT "/tests/data/smollm2_llamacpp.json");
  std::vector<int32_t> want;
  for (int64_t t : ref["greedy"].get_array()) want.push_back(int32_t(t));
  BOOST_REQUIRE_EQUAL(want.size(), 32u);
  BOOST_TEST(c.greedy == want, boost::test_tools::per_element());
}

// The CPU's weights are copied out of the file's mapping onto 2 MiB-aligned memory marked for huge pages
// (put_host_weights_on_huge_pages), and the copies are what the model computes with: the tests above
// match transformers and llama.cpp token for token through them.
BOOST_AUTO_TEST_CASE(smollm2_large_weights_leave_the_file_mapping_for_huge_pages) {
  const std::string gguf = test::smollm2_gguf_path();
  BOOST_REQUIRE_MESSAGE(!gguf.empty(), "SmolLM2 GGUF not found under .venv: run scripts/setup.sh");
  ModelLoadOptions o = test::exact_options();
  o.path = gguf;
  o.threads = 2;
  o.context_length = 64;
  o.max_sequences = 1;
  auto model = ModelInstance::load(o);
  int large = 0;
  for (const auto& [name, t] : model->model().named_tensors()) {
    if (t->bytes() < (size_t(4) << 20)) continue;
    ++large;
    BOOST_TEST_INFO(name << ": " << t->bytes() << " bytes at " << t->data);
    BOOST_TEST(reinterpret_cast<uintptr_t>(t->data) % (uintptr_t(2) << 20) == 0u);
  }
  BOOST_TEST(large >= 1);  // the tied embedding and LM head: 49152 x 576 in Q4_1, 17.7 MB
}
