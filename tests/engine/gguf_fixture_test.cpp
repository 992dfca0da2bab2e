// GGUF models as llama.cpp's converter writes them (tests/data/gguf, by tests/tools/make_gguf_fixtures.py
// from the transformers fixtures): llama with its permuted q/k rows, qwen2 with biases and tied
// embeddings, qwen3 with q/k norms, Gemma 2 and 3 with the converter's 1 + w norms and what llama.cpp
// derives instead of storing (layer pattern, score scale, local RoPE base), Phi-3 with fused tensors and
// LongRoPE factors as tensors; the MoE architectures with their experts stacked per projection (Qwen3-MoE,
// Qwen2-MoE with its shared expert and gate, GLM-4.5 with sigmoid group routing, gpt-oss with MXFP4
// experts, biases and sinks, DeepSeek V3 (YaRN too) with kv_b split per head into k_b and v_b as the
// converter writes it now, DeepSeek V2 with the whole kv_b of older files). They must compute what transformers computed for the source model; block
// types within their quantization's reach of it.
#include <simdjson.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <unistd.h>

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
                       {"qwen3moe-fused-f32.gguf", "models/qwen3-moe-f32", "float32", 1e-4},
                       {"qwen3moe-split-00001-of-00003.gguf", "models/qwen3-moe-f32", "float32", 1e-4},
                       {"glm4moe-f32.gguf", "models/glm4-moe-f32", "float32", 1e-4},
                       {"deepseek-v3-f32.gguf", "models/deepseek-v3-f32", "float32", 1e-4},
                       {"deepseek-v3-yarn-f32.gguf", "models/deepseek-v3-yarn-f32", "float32", 1e-4},
                       {"deepseek-v2-kv_b-f32.gguf", "models/deepseek-v2-f32", "float32", 1e-4},
                       {"qwen3next-f32.gguf", "models/qwen3-next-f32", "float32", 1e-4},
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

namespace {

namespace fs = std::filesystem;

const fs::path kGguf = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "gguf";

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("ftllm-split-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::string part(int i) { return "qwen3moe-split-0000" + std::to_string(i) + "-of-00003.gguf"; }

ModelLoadOptions split_options(const fs::path& first) {
  ModelLoadOptions o = test::exact_options();
  o.path = first.string();
  o.threads = 2;
  o.context_length = 64;
  o.max_sequences = 1;
  return o;
}

// The load's error message, or "" when it loaded.
std::string load_error(const ModelLoadOptions& o) {
  try {
    ModelInstance::load(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// A split set (gguf-split's names) loads from its first part, its tensors mapped in place from every
// part, and computes what the single file computes, bit for bit; the MoE options work on it as on
// safetensors.
BOOST_AUTO_TEST_CASE(split_gguf_computes_what_the_single_file_computes) {
  auto whole = ModelInstance::load(split_options(kGguf / "qwen3moe-f32.gguf"));
  auto split = ModelInstance::load(split_options(kGguf / part(1)));
  BOOST_TEST(split->options().name == "qwen3moe-split");  // the set's name, not its first part's
  BOOST_TEST(split->weight_file_bytes() == fs::file_size(kGguf / part(1)) + fs::file_size(kGguf / part(2)) + fs::file_size(kGguf / part(3)));
  const std::vector<int32_t> ids = {1, 17, 300, 42, 5, 99, 7, 8};
  const std::vector<float> want = test::prompt_logits(*whole, ids, {7})[0];
  BOOST_TEST(test::prompt_logits(*split, ids, {7})[0] == want);
  ModelLoadOptions o = split_options(kGguf / part(1));
  o.moe_dtype = "int8";
  auto int8 = ModelInstance::load(o);
  BOOST_TEST(int8->dtypes() == "float32, int8");
  for (auto& [name, t] : int8->model().named_tensors())
    if (name.find(".mlp.experts.") != std::string::npos) BOOST_TEST((t->dtype == DType::I8), name);
  const double err = test::relative_error(test::prompt_logits(*int8, ids, {7})[0], want);
  BOOST_TEST(err > 0.0);
  BOOST_TEST(err < 0.1);
}

// --moe_experts on a GGUF computes what transformers computes with that many experts per token.
BOOST_AUTO_TEST_CASE(moe_experts_apply_to_a_gguf_as_to_safetensors) {
  ModelLoadOptions o = split_options(kGguf / "qwen3moe-f32.gguf");
  o.context_length = 128;
  simdjson::dom::parser parser;
  simdjson::dom::element ref = parser.load((fs::path(FTLLM_SOURCE_ROOT) / "tests/data/models/qwen3-moe-f32/reference.json").string());
  o.moe_experts = int(int64_t(ref["moe_experts"]["k"]));
  auto model = ModelInstance::load(o);
  std::vector<int32_t> prompt;
  for (int64_t t : ref["prompt"].get_array()) prompt.push_back(int32_t(t));
  std::vector<float> want;
  for (double v : ref["moe_experts"]["last_logits"].get_array()) want.push_back(float(v));
  const double err = test::relative_error(test::prompt_logits(*model, prompt, {int64_t(prompt.size()) - 1})[0], want);
  BOOST_TEST_MESSAGE("qwen3moe GGUF --moe_experts " << o.moe_experts << ": " << err);
  BOOST_TEST(err < 1e-4);
}

// deepseek2 holds V2 and V3 alike; the routing keys tell them apart, and status names the right one.
BOOST_AUTO_TEST_CASE(deepseek2_ggufs_name_their_deepseek_version) {
  BOOST_TEST(ModelInstance::load(split_options(kGguf / "deepseek-v2-kv_b-f32.gguf"))->config().architecture == "DeepseekV2ForCausalLM");
  BOOST_TEST(ModelInstance::load(split_options(kGguf / "deepseek-v3-f32.gguf"))->config().architecture == "DeepseekV3ForCausalLM");
}

// What can go wrong with a split set is refused before anything is computed, naming the file.
BOOST_AUTO_TEST_CASE(broken_split_sets_are_refused_naming_the_part) {
  TempDir dir;
  auto copy_all = [&] {
    for (int i = 1; i <= 3; ++i) fs::copy_file(kGguf / part(i), dir.path / part(i), fs::copy_options::overwrite_existing);
  };
  copy_all();
  BOOST_TEST(load_error(split_options(dir.path / part(1))) == "");

  fs::remove(dir.path / part(2));
  std::string why = load_error(split_options(dir.path / part(1)));
  BOOST_TEST(why.find((dir.path / part(2)).string() + ", is missing") != std::string::npos, why);

  copy_all();
  why = load_error(split_options(dir.path / part(2)));
  BOOST_TEST(why.find("give the first, " + (dir.path / part(1)).string()) != std::string::npos, why);

  // A part of another model in its place: not part 2 of 3.
  fs::copy_file(kGguf / "qwen3moe-f32.gguf", dir.path / part(2), fs::copy_options::overwrite_existing);
  why = load_error(split_options(dir.path / part(1)));
  BOOST_TEST(why.find((dir.path / part(2)).string() + " does not say it is part 2 of 3") != std::string::npos, why);

  // A truncated last part.
  copy_all();
  fs::resize_file(dir.path / part(3), fs::file_size(dir.path / part(3)) / 2);
  why = load_error(split_options(dir.path / part(1)));
  BOOST_TEST(why.find((dir.path / part(3)).string()) != std::string::npos, why);
  BOOST_TEST(why.find("truncated") != std::string::npos, why);
}
