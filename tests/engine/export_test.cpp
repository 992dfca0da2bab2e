// ftllmctl export's directories: they load without converting and compute exactly what loading the
// source with the same --dtype computes; a GGUF's tokenizer and template travel along.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <filesystem>

#include "../common/exact_options.h"
#include "../common/real_model.h"
#include "runner/model_instance.h"
#include "../common/model_run.h"

namespace fs = std::filesystem;
using namespace ftllm;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("ftllm-export-" + std::to_string(::getpid()) + "-" +
                                               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  ~TempDir() { fs::remove_all(path); }
};

ModelLoadOptions options(const std::string& path, const std::string& dtype) {
  ModelLoadOptions o = test::exact_options();
  o.path = path;
  o.dtype = dtype;
  o.threads = 2;
  o.context_length = 64;
  o.max_sequences = 1;
  return o;
}

std::string render(const ModelInstance& m) {
  tokenizer::ChatRequest r;
  r.messages = tokenizer::json_to_value(R"([{"role": "user", "content": "Why is the sky blue?"}])");
  r.kwargs = m.text().special_tokens;
  return m.text().chat_template->render(r);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(export_directories)

BOOST_AUTO_TEST_CASE(exported_gguf_loads_as_the_converted_source) {
  const std::string gguf = test::smollm2_gguf_path();
  BOOST_REQUIRE_MESSAGE(!gguf.empty(), "SmolLM2 GGUF not found under .venv: run scripts/setup.sh");
  TempDir dir;
  ExportResult r;
  Status s = export_model(options(gguf, "int4g64"), dir.path.string(), r);
  BOOST_REQUIRE_MESSAGE(s.ok, s.message);
  BOOST_TEST(r.dtypes == "float32, int4g64");  // the tied embedding too: it is the LM head
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.gguf", "chat_template.jinja"})
    BOOST_TEST(fs::exists(dir.path / f), f);

  auto t0 = std::chrono::steady_clock::now();
  auto converted = ModelInstance::load(options(gguf, "int4g64"));
  auto t1 = std::chrono::steady_clock::now();
  auto exported = ModelInstance::load(options(dir.path.string(), "auto"));
  auto t2 = std::chrono::steady_clock::now();
  BOOST_TEST_MESSAGE("SmolLM2 int4g64: load with conversion " << std::chrono::duration<double>(t1 - t0).count()
                                                              << " s, exported directory " << std::chrono::duration<double>(t2 - t1).count() << " s");
  BOOST_TEST(exported->dtypes() == converted->dtypes());
  BOOST_TEST(exported->load_notes().empty());

  const std::string text = "The sky is blue because of Rayleigh scattering. 天空是蓝色的 🌤";
  BOOST_TEST(exported->text().tokenizer->encode(text) == converted->text().tokenizer->encode(text));
  const std::string prompt = render(*converted);
  BOOST_TEST(render(*exported) == prompt);
  std::vector<int32_t> ids = converted->text().tokenizer->encode(prompt);
  const int64_t last = int64_t(ids.size()) - 1;
  BOOST_TEST(test::prompt_logits(*exported, ids, {last})[0] == test::prompt_logits(*converted, ids, {last})[0]);  // bit for bit
}

BOOST_AUTO_TEST_CASE(exported_safetensors_model_keeps_its_config_and_tokenizer_files) {
  const std::string fixture = FTLLM_SOURCE_ROOT "/tests/data/models/qwen3-f32";
  TempDir dir;
  ExportResult r;
  Status s = export_model(options(fixture, "int8"), dir.path.string(), r);
  BOOST_REQUIRE_MESSAGE(s.ok, s.message);
  BOOST_TEST(fs::exists(dir.path / "generation_config.json"));
  auto converted = ModelInstance::load(options(fixture, "int8"));
  auto exported = ModelInstance::load(options(dir.path.string(), "auto"));
  BOOST_TEST(exported->config().architecture == "Qwen3ForCausalLM");
  BOOST_TEST(exported->config().eos_token_ids == converted->config().eos_token_ids);
  BOOST_TEST(exported->dtypes() == "float32, int8");
  const std::vector<int32_t> ids = {1, 17, 300, 42, 5, 99};
  BOOST_TEST(test::prompt_logits(*exported, ids, {5})[0] == test::prompt_logits(*converted, ids, {5})[0]);
}

// An embedding model stays one: its pooling goes along as sentence-transformers' modules.
BOOST_AUTO_TEST_CASE(exported_embedding_models_keep_their_pooling) {
  for (const char* name : {"qwen3-last-normalized", "qwen3-mean"}) {
    const std::string fixture = std::string(FTLLM_SOURCE_ROOT "/tests/data/embedding/") + name;
    TempDir dir;
    ExportResult r;
    BOOST_REQUIRE(export_model(options(fixture, "int8"), dir.path.string(), r).ok);
    auto converted = ModelInstance::load(options(fixture, "int8"));
    auto exported = ModelInstance::load(options(dir.path.string(), "auto"));
    BOOST_REQUIRE(exported->pooling());
    BOOST_TEST(int(exported->pooling()->mode) == int(converted->pooling()->mode));
    BOOST_TEST(exported->pooling()->normalize == converted->pooling()->normalize);
  }
}

// The keys each architecture writes back (experts, groups, scaling, latent ranks, yarn; Mistral's window;
// Gemma 3's layer types, second RoPE, score scale and activation) read as the source's: the exported
// models compute the same bits.
BOOST_AUTO_TEST_CASE(exported_models_keep_their_architecture_keys_and_compute_as_their_sources) {
  for (const char* name : {"qwen2-moe-f32", "deepseek-v2-f32", "deepseek-v3-f32", "deepseek-v3-yarn-f32", "mistral-window-f32",
                           "gemma2-f32", "gemma3-f32", "phi3-f32", "glm4-moe-f32", "gpt-oss-f32", "qwen3-next-f32"}) {
    const std::string fixture = std::string(FTLLM_SOURCE_ROOT "/tests/data/models/") + name;
    TempDir dir;
    ExportResult r;
    ModelLoadOptions o = options(fixture, "auto");
    o.moe_dtype = "int8";
    Status s = export_model(o, dir.path.string(), r);
    BOOST_REQUIRE_MESSAGE(s.ok, s.message);
    auto converted = ModelInstance::load(o);
    auto exported = ModelInstance::load(options(dir.path.string(), "auto"));
    BOOST_TEST(exported->dtypes() == converted->dtypes(), name);
    if (std::string(name) == "gpt-oss-f32")  // its experts are copies made while binding, converted all the same
      BOOST_TEST(converted->dtypes() == "float32, int8");
    const std::vector<int32_t> ids = {1, 17, 300, 42, 5, 99, 7, 8, 200, 31};
    BOOST_TEST(test::prompt_logits(*exported, ids, {9})[0] == test::prompt_logits(*converted, ids, {9})[0], name);
  }
}

// MXFP4 experts leave as MXFP4 rows (ggml's order) and come back computing the same bits.
BOOST_AUTO_TEST_CASE(exported_mxfp4_experts_stay_mxfp4) {
  const std::string source = FTLLM_SOURCE_ROOT "/tests/data/quantized/gpt-oss-mxfp4";
  TempDir dir;
  ExportResult r;
  Status s = export_model(options(source, "auto"), dir.path.string(), r);
  BOOST_REQUIRE_MESSAGE(s.ok, s.message);
  BOOST_TEST(r.dtypes == "float32, mxfp4");
  auto original = ModelInstance::load(options(source, "auto"));
  auto exported = ModelInstance::load(options(dir.path.string(), "auto"));
  BOOST_TEST(exported->dtypes() == "float32, mxfp4");
  const std::vector<int32_t> ids = {1, 17, 300, 42, 5, 99, 7, 8, 200, 31};
  BOOST_TEST(test::prompt_logits(*exported, ids, {9})[0] == test::prompt_logits(*original, ids, {9})[0]);
}

BOOST_AUTO_TEST_CASE(export_errors_name_the_problem) {
  TempDir dir;
  ExportResult r;
  Status s = export_model(options("/nonexistent/model", "int8"), dir.path.string(), r);
  BOOST_TEST(!s.ok);
  s = export_model(options(FTLLM_SOURCE_ROOT "/tests/data/models/qwen3-f32", "int3"), dir.path.string(), r);
  BOOST_TEST(!s.ok);
  BOOST_TEST(s.message.find("--dtype int3 is not a dtype") != std::string::npos, s.message);
}

BOOST_AUTO_TEST_SUITE_END()
