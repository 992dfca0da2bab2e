// LoRA adapters over resident models against PEFT (tests/tools/make_fixtures.py lora: the base fixture with
// the adapter applied unmerged in transformers): logits and greedy tokens; a batch mixing the base and two
// adapters equals each alone bit for bit; the prefix cache keeps each adapter's rows to itself; at most
// --max_loras adapters run at once; adapters that do not fit are refused with the reason while the base
// serves on; unloading an adapter lets its running stream finish.
#include <simdjson.h>

#include <algorithm>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <condition_variable>
#include <filesystem>
#include <fstream>

#include "../common/exact_options.h"
#include "../common/fixture_reference.h"
#include "../common/greedy_run.h"
#include "../common/logit_error.h"
#include "../common/model_run.h"
#include "core/error.h"
#include "engine.h"
#include "model/lora.h"
#include "runner/model_instance.h"

namespace fs = std::filesystem;
namespace bdata = boost::unit_test::data;
using namespace ftllm;

namespace {

const fs::path kData = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data";

std::vector<std::string> adapter_fixtures() {
  std::vector<std::string> names;
  for (auto& e : fs::directory_iterator(kData / "lora"))
    if (fs::exists(e.path() / "reference.json")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string base_of(const std::string& adapter) {
  simdjson::dom::parser parser;
  return std::string(std::string_view(parser.load((kData / "lora" / adapter / "reference.json").string())["base"]));
}

ModelLoadOptions options(const std::string& base, int32_t max_loras = 8) {
  ModelLoadOptions o = test::exact_options();
  o.path = (kData / "models" / base).string();
  o.name = base;
  o.threads = 2;
  o.context_length = 256;
  o.max_sequences = 4;
  o.max_loras = max_loras;
  return o;
}

std::string refusal(ModelInstance& m, const fs::path& dir) {
  try {
    m.load_adapter(dir.string(), "bad");
  } catch (const EngineError& e) {
    return e.what();
  }
  return "(loaded)";
}

// A copy of an adapter directory with adapter_config.json edited by `edit`.
fs::path edited_copy(const std::string& adapter, const fs::path& to, const std::function<void(std::string&)>& edit) {
  fs::remove_all(to);
  fs::create_directories(to);
  for (auto& e : fs::directory_iterator(kData / "lora" / adapter)) fs::copy_file(e.path(), to / e.path().filename());
  std::ifstream in(to / "adapter_config.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  edit(text);
  std::ofstream(to / "adapter_config.json") << text;
  return to;
}

void replace(std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  BOOST_REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lora)

BOOST_DATA_TEST_CASE(adapters_match_peft, bdata::make(adapter_fixtures()), name) {
  const std::string base = base_of(name);
  auto model = ModelInstance::load(options(base));
  auto adapter = model->load_adapter((kData / "lora" / name).string(), name);
  const test::Reference ref = test::read_reference(kData / "lora" / name);
  const int64_t last = int64_t(ref.prompt.size()) - 1;
  const double prefill = test::relative_error(test::prompt_logits(*model, ref.prompt, {last}, adapter.get())[0], ref.last_logits);
  std::vector<int32_t> all = ref.prompt;
  all.insert(all.end(), ref.greedy.begin(), ref.greedy.end() - 1);
  const double decode = test::relative_error(test::decode_logits(*model, all, ref.prompt.size(), adapter.get()), ref.final_logits);
  BOOST_TEST_MESSAGE(name << " on " << base << " (" << adapter->targets() << ", r " << adapter->rank()
                          << "): max |logit error| / range: prefill " << prefill << ", decode " << decode);
  BOOST_TEST(prefill < 1e-4);
  BOOST_TEST(decode < 1e-4);

  GenerationRequest r = test::greedy_request(ref.prompt, int32_t(ref.greedy.size()));
  r.adapter = adapter;
  BOOST_TEST(test::generate(*model, {r})[0].tokens == ref.greedy, boost::test_tools::per_element());
  // The base model is untouched by its adapter.
  const test::Reference base_ref = test::read_reference(kData / "models" / base);
  BOOST_TEST(test::relative_error(test::prompt_logits(*model, base_ref.prompt, {last})[0], base_ref.last_logits) < 1e-4);
}

// Over a converted base the adapter adds its update to whatever the base computes: PEFT's logits within the
// bound the conversion itself has (model_test's kQuantizedBounds), and nearer them than the base alone.
BOOST_AUTO_TEST_CASE(adapters_apply_over_any_base_dtype) {
  const test::Reference ref = test::read_reference(kData / "lora" / "llama-all-r8");
  const int64_t last = int64_t(ref.prompt.size()) - 1;
  for (auto [dtype, bound] : {std::pair{"float16", 0.003}, {"int8", 0.07}, {"int4g32", 0.75}}) {
    ModelLoadOptions o = options("llama-f32");
    o.dtype = dtype;
    auto model = ModelInstance::load(o);
    BOOST_TEST_REQUIRE(model->dtypes().find(dtype) != std::string::npos, model->dtypes());
    auto adapter = model->load_adapter((kData / "lora" / "llama-all-r8").string(), "a");
    const double with = test::relative_error(test::prompt_logits(*model, ref.prompt, {last}, adapter.get())[0], ref.last_logits);
    const double without = test::relative_error(test::prompt_logits(*model, ref.prompt, {last})[0], ref.last_logits);
    BOOST_TEST_MESSAGE(dtype << " base: with the adapter " << with << " from PEFT's logits, without it " << without);
    BOOST_TEST(with < bound, dtype);
    BOOST_TEST(with < without / 2, dtype);
  }
}

BOOST_AUTO_TEST_CASE(a_batch_mixing_base_and_adapters_equals_each_alone_bit_for_bit) {
  auto model = ModelInstance::load(options("llama-f32"));
  auto a = model->load_adapter((kData / "lora" / "llama-all-r8").string(), "a");
  auto b = model->load_adapter((kData / "lora" / "llama-qv-r4-rslora").string(), "b");
  const test::Reference ref = test::read_reference(kData / "models" / "llama-f32");
  std::vector<std::vector<int32_t>> prompts = {ref.prompt, ref.prompt, ref.prompt, ref.prompt};
  std::rotate(prompts[2].begin(), prompts[2].begin() + 5, prompts[2].end());
  prompts[3].resize(17);
  const std::vector<const model::LoraAdapter*> adapters = {nullptr, a.get(), b.get(), a.get()};

  auto run = [&](const std::vector<size_t>& which) {
    std::vector<std::vector<float>> rows;
    model->runner().exclusive([&](const ForwardPass& pass) {
      model::Batch batch;
      std::vector<kvcache::SequenceKv> kv(which.size());
      std::vector<kvcache::SequenceKv*> seqs;
      for (size_t s = 0; s < which.size(); ++s) {
        const auto& p = prompts[which[s]];
        BOOST_REQUIRE(kv[s].reserve(pass.kv, int64_t(p.size())));
        seqs.push_back(&kv[s]);
        for (size_t i = 0; i < p.size(); ++i) {
          batch.tokens.push_back(p[i]);
          batch.positions.push_back(int64_t(i));
          batch.seq.push_back(int32_t(s));
        }
        batch.logit_rows.push_back(int64_t(batch.tokens.size()) - 1);
        batch.adapters.push_back(adapters[which[s]]);
      }
      const Tensor logits = pass.forward(batch, seqs);
      for (size_t s = 0; s < which.size(); ++s)
        rows.emplace_back(logits.as<float>() + int64_t(s) * logits.dim(1), logits.as<float>() + int64_t(s + 1) * logits.dim(1));
      for (auto& k : kv) k.release(pass.kv);
    });
    return rows;
  };
  const auto mixed = run({0, 1, 2, 3});
  for (size_t s = 0; s < 4; ++s) {
    BOOST_TEST_CONTEXT("sequence " << s) { BOOST_TEST(mixed[s] == run({s})[0]); }
  }
  BOOST_TEST(mixed[0] != mixed[1]);  // the adapters do change the rows they apply to

  // Through the runner: greedy streams of each, batched together, equal each alone.
  std::vector<GenerationRequest> requests;
  for (size_t s = 0; s < 4; ++s) {
    requests.push_back(test::greedy_request(prompts[s], 16));
    if (adapters[s]) requests.back().adapter = s == 1 || s == 3 ? a : b;
  }
  const auto together = test::generate(*model, requests);
  for (size_t s = 0; s < 4; ++s) BOOST_TEST(together[s].tokens == test::generate(*model, {requests[s]})[0].tokens);
}

BOOST_AUTO_TEST_CASE(the_prefix_cache_keeps_each_adapters_rows_to_itself) {
  auto model = ModelInstance::load(options("llama-f32"));
  auto a = model->load_adapter((kData / "lora" / "llama-all-r8").string(), "a");
  const test::Reference ref = test::read_reference(kData / "lora" / "llama-all-r8");
  GenerationRequest base = test::greedy_request(ref.prompt, 8);
  const auto first = test::generate(*model, {base})[0];  // publishes the prompt's blocks, computed without the adapter
  GenerationRequest with_a = test::greedy_request(ref.prompt, int32_t(ref.greedy.size()));
  with_a.adapter = a;
  const auto once = test::generate(*model, {with_a})[0];
  BOOST_TEST(once.cached_tokens == 0);  // the base's rows are not the adapter's
  BOOST_TEST(once.tokens == ref.greedy, boost::test_tools::per_element());
  const auto again = test::generate(*model, {with_a})[0];
  BOOST_TEST(again.cached_tokens > 0);  // its own rows are
  BOOST_TEST(again.tokens == ref.greedy, boost::test_tools::per_element());
  BOOST_TEST(test::generate(*model, {base})[0].cached_tokens > 0);
  BOOST_TEST(first.tokens == test::generate(*model, {base})[0].tokens);
}

BOOST_AUTO_TEST_CASE(max_loras_bounds_the_adapters_of_one_batch) {
  for (int32_t max_loras : {1, 2}) {
    BOOST_TEST_CONTEXT("max_loras " << max_loras) {
      auto model = ModelInstance::load(options("llama-f32", max_loras));
      auto a = model->load_adapter((kData / "lora" / "llama-all-r8").string(), "a");
      auto b = model->load_adapter((kData / "lora" / "llama-qv-r4-rslora").string(), "b");
      const test::Reference ref = test::read_reference(kData / "models" / "llama-f32");
      std::vector<GenerationRequest> requests;
      for (auto& adapter : {a, b, a, b}) {
        requests.push_back(test::greedy_request(ref.prompt, 24));
        requests.back().adapter = adapter;
      }
      // What the runner reports between steps while they run.
      size_t most_running = 0;
      bool b_waited = false;
      std::mutex mu;
      std::condition_variable cv;
      size_t left = requests.size();
      std::vector<std::vector<int32_t>> tokens(requests.size());
      // All four are queued before any step runs (the worker waits for the compute lock held here): else
      // this thread, paused by a busy machine, could queue b after the first a had finished (seen in CI).
      model->runner().exclusive([&](const auto&) {
        for (size_t i = 0; i < requests.size(); ++i)
          model->runner().submit(requests[i], [&, i](const GenerationEvent& e) {
            const ServingLoad load = model->runner().load();
            std::lock_guard lock(mu);
            most_running = std::max(most_running, load.running_adapters.size());
            b_waited |= std::count(load.waiting_adapters.begin(), load.waiting_adapters.end(), "b") > 0 && load.running_adapters == std::vector<std::string>{"a"};
            tokens[i].insert(tokens[i].end(), e.tokens.begin(), e.tokens.end());
            if (e.finished && --left == 0) cv.notify_all();
          });
      });
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return left == 0; });
      BOOST_TEST(most_running == size_t(max_loras));
      if (max_loras == 1) BOOST_TEST(b_waited);
      BOOST_TEST(model->runner().load().max_loras == max_loras);
      const auto a_alone = test::generate(*model, {requests[0]})[0].tokens, b_alone = test::generate(*model, {requests[1]})[0].tokens;
      BOOST_TEST(a_alone != b_alone);
      for (size_t i = 0; i < requests.size(); ++i) BOOST_TEST(tokens[i] == (i % 2 ? b_alone : a_alone));
    }
  }
}

BOOST_AUTO_TEST_CASE(adapters_that_do_not_fit_are_refused_and_the_base_serves_on) {
  auto model = ModelInstance::load(options("llama-f32"));
  const fs::path tmp = fs::temp_directory_path() / ("ftllm-lora-test-" + std::to_string(getpid()));
  const std::pair<fs::path, std::string> cases[] = {
      {kData / "lora" / "bad-extra-layer", "the base model has 3 layers"},
      {kData / "lora" / "bad-embedding", "adapts the embedding"},
      {kData / "lora" / "qwen3-bf16-r8", "do not fit the base's"},
      {tmp / "missing", "is not a directory"},
      {edited_copy("llama-all-r8", tmp / "dora", [](std::string& t) { replace(t, "\"use_dora\": false", "\"use_dora\": true"); }), "DoRA"},
      {edited_copy("llama-all-r8", tmp / "rank", [](std::string& t) { replace(t, "\"r\": 8", "\"r\": 4"); }), "rank 8 but adapter_config.json says r = 4"},
      {edited_copy("llama-all-r8", tmp / "bias", [](std::string& t) { replace(t, "\"bias\": \"none\"", "\"bias\": \"all\""); }), "bias"},
      {edited_copy("llama-all-r8", tmp / "type", [](std::string& t) { replace(t, "\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\""); }), "only LoRA"},
      {edited_copy("llama-all-r8", tmp / "json", [](std::string& t) { t.resize(t.size() / 2); }), "not a JSON object"},
  };
  for (const auto& [dir, reason] : cases) {
    const std::string why = refusal(*model, dir);
    BOOST_TEST_CONTEXT(dir.filename() << ": " << why) { BOOST_TEST(why.find(reason) != std::string::npos); }
  }
  // A truncated weights file.
  const fs::path cut = edited_copy("llama-all-r8", tmp / "cut", [](std::string&) {});
  fs::resize_file(cut / "adapter_model.safetensors", fs::file_size(cut / "adapter_model.safetensors") - 1000);
  BOOST_TEST(refusal(*model, cut).find("adapter_model.safetensors") != std::string::npos);
  // A mixture-of-experts layer has no gate/up/down_proj of its own to adapt.
  auto moe = ModelInstance::load(options("qwen3-moe-f32"));
  const std::string moe_why = refusal(*moe, edited_copy("llama-all-r8", tmp / "moe", [](std::string&) {}));
  BOOST_TEST(moe_why.find("has no down_proj of its own") != std::string::npos, moe_why);
  fs::remove_all(tmp);

  BOOST_TEST(model->adapters().empty());
  const test::Reference ref = test::read_reference(kData / "models" / "llama-f32");
  BOOST_TEST(test::greedy(*model, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_engine_serves_adapters_by_name_and_unloads_them_under_a_running_stream) {
  Engine engine;
  BOOST_REQUIRE(engine.load(options("llama-f32")).ok);
  const fs::path dir = kData / "lora" / "llama-all-r8";
  BOOST_TEST(engine.load_adapter("nope", dir.string(), "a").message.find("no model named nope") != std::string::npos);
  BOOST_REQUIRE(engine.load_adapter("llama-f32", dir.string(), "a").ok);
  BOOST_TEST(engine.load_adapter("llama-f32", dir.string(), "a").message.find("taken") != std::string::npos);
  BOOST_TEST(engine.load_adapter("llama-f32", dir.string(), "llama-f32").message.find("taken") != std::string::npos);
  BOOST_TEST(engine.load_adapter("a", dir.string(), "a2").message.find("is itself a LoRA adapter") != std::string::npos);
  const auto models = engine.models();
  BOOST_REQUIRE(models.size() == 2u);
  BOOST_TEST(models[1].name == "a");
  BOOST_TEST(models[1].parent == "llama-f32");
  BOOST_TEST(engine.model("a")->parent() == "llama-f32");
  BOOST_TEST(engine.model("a")->adapters().size() == 1u);
  BOOST_TEST(!engine.model("a")->set_placement("multicuda:0,1").ok);  // (the simulator's GPUs say why: cuda_model_test)

  // A stream with the adapter; the adapter is unloaded once its first tokens have come: it finishes as it
  // would have, and new requests for it are refused.
  const test::Reference ref = test::read_reference(dir);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> got;
  bool done = false;
  TextRequest r;
  r.model = "a";
  r.input = TextRequest::Input::Tokens;
  r.token_prompts = {ref.prompt};
  r.generation = test::greedy_request(ref.prompt, int32_t(ref.greedy.size()));
  TextSubmission s = engine.submit(r, [&](const TextEvent& e) {
    std::lock_guard lock(mu);
    got.insert(got.end(), e.tokens.begin(), e.tokens.end());
    done = e.finished;
    cv.notify_all();
  });
  BOOST_REQUIRE_MESSAGE(s.refusal == Refusal::None, s.error);
  BOOST_TEST(s.model->name() == "a");
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !got.empty(); });
  }
  BOOST_TEST(engine.unload_adapter("a").ok);
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  BOOST_TEST(got == ref.greedy, boost::test_tools::per_element());
  BOOST_TEST((engine.submit(r, [](const TextEvent&) {}).refusal == Refusal::ModelNotFound));
  BOOST_TEST(engine.unload_adapter("a").message.find("no LoRA adapter named a") != std::string::npos);
  BOOST_TEST(engine.unload_adapter("llama-f32").message.find("is a model") != std::string::npos);
  BOOST_TEST(engine.models().size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
