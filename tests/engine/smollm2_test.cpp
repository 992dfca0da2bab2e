// A real pretrained model end to end: SmolLM2-135M-Instruct, read straight from its Q4_1 GGUF, must
// continue a chat prompt exactly as transformers does (tests/data/smollm2.json, by make_fixtures.py).
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <cmath>

#include "../common/real_model.h"
#include "model_instance.h"

using namespace ftllm;

BOOST_AUTO_TEST_CASE(smollm2_matches_transformers_token_for_token) {
  std::string gguf = test::smollm2_gguf_path();
  BOOST_REQUIRE_MESSAGE(!gguf.empty(), "SmolLM2 GGUF not found under .venv: run scripts/setup.sh");
  simdjson::dom::parser parser;
  simdjson::dom::element ref = parser.load(FTLLM_SOURCE_ROOT "/tests/data/smollm2.json");

  ModelLoadOptions o;
  o.path = gguf;
  o.threads = 2;
  o.context_length = 256;
  o.max_sequences = 1;
  auto model = ModelInstance::load(o);
  BOOST_TEST(model->config().num_layers == 30);
  BOOST_TEST(model->config().vocab_size == 49152);

  GenerationRequest req;
  for (int64_t t : ref["prompt"].get_array()) req.prompt.push_back(int32_t(t));
  std::vector<int32_t> want;
  for (int64_t t : ref["greedy"].get_array()) want.push_back(int32_t(t));
  BOOST_REQUIRE_EQUAL(want.size(), 32u);

  // The logits of transformers' top 20 tokens after the prompt.
  auto logits = model->prompt_logits(req.prompt, {int64_t(req.prompt.size()) - 1})[0];
  auto ids = ref["top_ids"].get_array();
  auto values = ref["top_logits"].get_array();
  double worst = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    worst = std::max(worst, std::fabs(double(logits[size_t(int64_t(ids.at(i)))]) - double(values.at(i))));
  BOOST_TEST_MESSAGE("SmolLM2: max |logit error| over transformers' top 20 = " << worst);
  BOOST_TEST(worst < 1e-3);

  req.sampling.temperature = 0;
  req.max_tokens = 32;
  std::vector<GenerationResult> out = model->generate({req});
  BOOST_TEST(out[0].tokens == want, boost::test_tools::per_element());
}
