// Tensor parallelism (fastllm's multicuda) with every shard on the host: the same split, shard sums
// and KV-page cuts a GPU group uses, checked against the unsplit model on any machine.
#include <boost/test/unit_test.hpp>
#include <filesystem>

#include "../common/exact_options.h"
#include "../common/fixture_reference.h"
#include "../common/greedy_run.h"
#include "../common/logit_error.h"
#include "core/error.h"
#include "runner/model_instance.h"
#include "../common/model_run.h"

namespace fs = std::filesystem;
using namespace ftllm;
using test::greedy;

namespace {

const fs::path kModels = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "models";

std::unique_ptr<ModelInstance> load(const std::string& name, const std::string& device) {
  ModelLoadOptions o = test::exact_options();
  o.path = (kModels / name).string();
  o.threads = 2;
  o.context_length = 128;
  o.max_sequences = 2;
  o.device = device;
  return ModelInstance::load(o);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tensor_parallel)

BOOST_AUTO_TEST_CASE(split_layers_compute_what_whole_ones_do) {
  for (const char* name : {"qwen3-f32", "qwen2-f32", "llama-linear-tied-bias-f32", "mistral-window-f32", "qwen3-moe-f32",
                           "qwen2-bf16", "gemma3-f32", "phi3-f32"}) {
    for (const char* device : {"multicuda:cpu,cpu", "multicuda:cpu:1,cpu:3", "{'multicuda:cpu,cpu':1,'cpu':1}"}) {
      BOOST_TEST_CONTEXT(name << " on " << device) {
        const test::Reference ref = test::read_reference(kModels / name);
        auto m = load(name, device);
        BOOST_TEST(m->placement().to_string().starts_with("multi:cpu="), m->placement().to_string());
        const int64_t last = int64_t(ref.prompt.size()) - 1;
        const double err = test::relative_error(test::prompt_logits(*m, ref.prompt, {last})[0], ref.last_logits);
        std::vector<int32_t> all = ref.prompt;
        all.insert(all.end(), ref.greedy.begin(), ref.greedy.end() - 1);
        const double decode = test::relative_error(test::decode_logits(*m, all, ref.prompt.size()), ref.final_logits);
        BOOST_TEST(err < 1e-4);
        BOOST_TEST(decode < 1e-4);
        BOOST_TEST(greedy(*m, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
      }
    }
  }
}

// Layers go whole -> split -> whole between steps of a running generation: the KV pages are cut by
// heads and put back, so the tokens are the ones an unmoved model gives.
BOOST_AUTO_TEST_CASE(rebalance_into_and_out_of_a_split_during_a_stream) {
  const test::Reference ref = test::read_reference(kModels / "qwen3-f32");
  auto m = load("qwen3-f32", "cpu");
  const std::vector<int32_t> want = greedy(*m, ref.prompt, 40);
  const std::vector<std::string> moves = {"multicuda:cpu,cpu", "{'cpu':1,'multicuda:cpu:2,cpu:1':1}", "cpu"};
  size_t applied = 0;
  const std::vector<int32_t> got = test::greedy_while_moving(*m, ref.prompt, 40, moves, &applied);
  BOOST_TEST(applied == moves.size());
  BOOST_TEST(got == want, boost::test_tools::per_element());
  BOOST_TEST(m->load_notes().find("rebalance failed") == std::string::npos, m->load_notes());
}

BOOST_AUTO_TEST_CASE(splits_the_shapes_cannot_take_are_refused_by_name) {
  auto error_of = [](const std::string& name, const std::string& device) {
    try {
      load(name, device);
    } catch (const EngineError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // One KV head cannot go to two devices; latent attention is not split.
  BOOST_TEST(error_of("llama3-rope-f32", "multicuda:cpu,cpu").find("1 KV heads cannot be split over 2 devices") !=
             std::string::npos);
  BOOST_TEST(error_of("deepseek-v3-f32", "multicuda:cpu,cpu").find("multi-head latent attention") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
