// GGUF models as llama.cpp's converter writes them (tests/data/gguf, by tests/tools/make_gguf_fixtures.py
// from the transformers fixtures): llama with its permuted q/k rows, qwen2 with biases and tied
// embeddings, qwen3 with q/k norms, Gemma 2 and 3 with the converter's 1 + w norms and what llama.cpp
// derives instead of storing (layer pattern, score scale, local RoPE base), Phi-3 with fused tensors and
// LongRoPE factors as tensors; the MoE architectures with their experts stacked per projection (Qwen3-MoE,
// Qwen2-MoE with its shared expert and gate, GLM-4.5 with sigmoid group routing, gpt-oss with MXFP4
// experts, biases and sinks). They must compute what transformers computed for the source model; block
// types within their quantization's reach of it.
#include <simdjson.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "../common/exact_options.h"
#include "../common/greedy_run.h"
#include "../common/logit_error.h"
#include "runner/model_instance.h"
#include "../common/model_run.h"

using namespace ftllm;

namespace {

struct Case {
  const char* gguf;
  const char* fixture;  // under tests/data
  const char* dtypes;
  double bound;  // max |logit error| / logit range against transformers
  const char* kernels = "auto";
};

// Block types: measured 0.019 (q8_0) and 0.17 (q5_1; random weights fill the range evenly), bounds ~2x.
// gpt-oss's MXFP4 experts: on the reference kernels to float32 rounding, on the integer kernels within
// what int8 activations move (as the safetensors copy, prequantized_test.cpp).
const Case kCases[] = {{"llama-f32.gguf", "models/llama-f32", "float32", 1e-4},
                       {"qwen2-f32.gguf", "models/qwen2-f32", "float32", 1e-4},
                       {"qwen3-f32.gguf", "models/qwen3-f32", "float32", 1e-4},
                       {"qwen3-q8_0.gguf", "models/qwen3-f32", "float32, q8_0", 0.04},
                       {"llama-q5_1.gguf", "models/llama-f32", "float32, q5_1", 0.3},
                       {"gemma2-f32.gguf", "models/gemma2-f32", "float32", 1e-4},
                       {"gemma3-f32.gguf", "models/gemma3-pattern-f32", "float32", 1e-4},
                       {"phi3-f32.gguf", "models/phi3-f32", "float32", 1e-4},
                       {"qwen3moe-f32.gguf", "models/qwen3-moe-f32", "float32", 1e-4},
                       {"qwen3moe-q8_0.gguf", "models/qwen3-moe-f32", "float32, q8_0", 0.06},
                       {"qwen2moe-f32.gguf", "models/qwen2-moe-f32", "float32", 1e-4},
                       {"glm4moe-f32.gguf", "models/glm4-moe-f32", "float32", 1e-4},
                       {"gpt-oss-mxfp4.gguf", "quantized/gpt-oss-mxfp4", "float32, mxfp4", 1e-4, "scalar"},
                       {"gpt-oss-mxfp4.gguf", "quantized/gpt-oss-mxfp4", "float32, mxfp4", 0.05}};

}  // namespace

BOOST_AUTO_TEST_CASE(gguf_fixtures_compute_what_transformers_computed) {
  for (const Case& c : kCases) {
    ModelLoadOptions o = test::exact_options();
    o.path = std::string(FTLLM_SOURCE_ROOT "/tests/data/gguf/") + c.gguf;
    o.threads = 2;
    o.context_length = 128;
    o.max_sequences = 1;
    o.kernels = c.kernels;
    auto model = ModelInstance::load(o);
    BOOST_TEST(model->dtypes() == c.dtypes, c.gguf);
    BOOST_TEST(!model->text().tokenizer);  // weights only

    simdjson::dom::parser parser;
    simdjson::dom::element ref = parser.load(std::string(FTLLM_SOURCE_ROOT "/tests/data/") + c.fixture + "/reference.json");
    std::vector<int32_t> prompt;
    for (int64_t t : ref["prompt"].get_array()) prompt.push_back(int32_t(t));
    std::vector<float> want;
    for (double v : ref["last_logits"].get_array()) want.push_back(float(v));
    auto got = test::prompt_logits(*model, prompt, {int64_t(prompt.size()) - 1})[0];
    BOOST_REQUIRE_EQUAL(got.size(), want.size());
    const double error = test::relative_error(got, want);
    BOOST_TEST_MESSAGE(c.gguf << " (" << c.kernels << " kernels): max |logit error| / logit range " << error);
    BOOST_TEST(error < c.bound, c.gguf << ": " << error);
    if (c.bound <= 1e-4) {  // computed to float32 rounding: transformers' greedy tokens too
      std::vector<int32_t> want_tokens;
      for (int64_t t : ref["greedy"].get_array()) want_tokens.push_back(int32_t(t));
      BOOST_TEST(test::greedy(*model, prompt, int32_t(want_tokens.size())) == want_tokens, c.gguf);
    }
  }
}
