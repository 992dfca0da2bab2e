// Bad model files fail their load with a reason a person can act on, and never crash the process.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <tuple>
#include <unistd.h>
#include <sstream>

#include "core/mapped_file.h"
#include "core/tensor.h"
#include "engine.h"
#include "runner/loader.h"
#include "runner/model_instance.h"
#include "model/safetensors.h"
#include "../common/exact_options.h"
#include "../common/model_run.h"

namespace fs = std::filesystem;
using namespace ftllm;

namespace {

const fs::path kLlama = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "models" / "llama-f32";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

ModelLoadOptions opts(const std::string& path, const std::string& name) {
  ModelLoadOptions o = test::exact_options();
  o.path = path;
  o.name = name;
  o.threads = 1;
  o.context_length = 64;
  o.max_sequences = 1;
  return o;
}

// A copy of the llama fixture in a fresh directory, for a test to break.
struct ModelCopy {
  fs::path dir;
  explicit ModelCopy(const fs::path& from = kLlama) {
    char tmpl[] = "/tmp/ftllm-model-XXXXXX";
    dir = mkdtemp(tmpl);
    for (auto& e : fs::directory_iterator(from)) fs::copy(e.path(), dir / e.path().filename());
  }
  ~ModelCopy() { fs::remove_all(dir); }
  fs::path weights() const { return dir / "model.safetensors"; }
};

std::string load_error(const fs::path& dir) {
  Engine engine;
  Status s = engine.load(opts(dir.string(), "m"));
  BOOST_REQUIRE_MESSAGE(!s.ok, "the load should have failed");
  BOOST_TEST(s.message.starts_with("cannot load " + dir.string() + ": "));
  BOOST_TEST(engine.models().empty());  // nothing half-loaded
  BOOST_TEST_MESSAGE(s.message);
  return s.message;
}

// Replaces the safetensors header (keeping the data) with `header`.
void rewrite_header(const fs::path& file, const std::string& header) {
  std::string bytes = read(file);
  uint64_t old_len;
  std::memcpy(&old_len, bytes.data(), 8);
  std::string data = bytes.substr(8 + old_len);
  uint64_t len = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  write(file, out + header + data);
}

std::string header_of(const fs::path& file) {
  std::string bytes = read(file);
  uint64_t len;
  std::memcpy(&len, bytes.data(), 8);
  return bytes.substr(8, len);
}

void replace_in_file(const fs::path& file, const std::string& from, const std::string& to) {
  std::string text = read(file);
  size_t at = text.find(from);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, from + " not in " + file.string());
  write(file, text.replace(at, from.size(), to));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(load_errors)

BOOST_AUTO_TEST_CASE(the_intact_copy_loads) {
  ModelCopy m;
  Engine engine;
  Status s = engine.load(opts(m.dir.string(), "llama"));
  BOOST_TEST(s.ok, s.message);
  BOOST_TEST(engine.models().size() == 1u);
  BOOST_TEST(engine.models()[0].architecture == "LlamaForCausalLM");
}

// Progress has the weight files' total from the first "reading" line on, and ends at it.
// Kimi-K2 as Moonshot ships it: DeepSeek V3 weights beside tiktoken.model and tokenizer_config.json (here the
// DeepSeek V3 fixture with the synthetic Kimi-style vocabulary, tests/data/tokenizers/kimi-synth).
BOOST_AUTO_TEST_CASE(a_kimi_directory_reads_its_tiktoken_vocabulary) {
  ModelCopy m(fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "models" / "deepseek-v3-f32");
  const fs::path kimi = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "tokenizers" / "kimi-synth";
  for (const char* f : {"tiktoken.model", "tokenizer_config.json"}) fs::copy_file(kimi / f, m.dir / f);
  auto loaded = ModelInstance::load(opts(m.dir.string(), "kimi"));
  BOOST_REQUIRE(loaded->text().tokenizer);
  const auto& t = *loaded->text().tokenizer;
  const int32_t base = 151643;  // the synthetic vocabulary's ranks
  BOOST_TEST(t.encode("[BOS]中文English").front() == base);
  BOOST_TEST(t.decode(t.encode("中文English混合 <|im_end|>")) == "中文English混合 <|im_end|>");
  const auto& special = loaded->text().special_tokens;
  BOOST_TEST(std::any_of(special.begin(), special.end(), [](const auto& kv) { return kv.first == "bos_token"; }));
}

// A model whose weights cannot stay in memory is refused before any is read, with the numbers and what to
// change: here a llama whose embedding and LM head take 61 GiB each, in a sparse file that holds no data.
BOOST_AUTO_TEST_CASE(a_model_bigger_than_memory_is_refused_before_it_is_read) {
  char tmpl[] = "/tmp/ftllm-huge-XXXXXX";
  const fs::path dir = mkdtemp(tmpl);
  const int64_t H = 8192, I = 8192, V = 2000000, KV = 1024;
  write(dir / "config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 8192,
    "num_hidden_layers": 1, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 2000000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": false})");
  const std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"model.embed_tokens.weight", {V, H}}, {"lm_head.weight", {V, H}}, {"model.norm.weight", {H}},
      {"model.layers.0.input_layernorm.weight", {H}}, {"model.layers.0.post_attention_layernorm.weight", {H}},
      {"model.layers.0.self_attn.q_proj.weight", {H, H}}, {"model.layers.0.self_attn.k_proj.weight", {KV, H}},
      {"model.layers.0.self_attn.v_proj.weight", {KV, H}}, {"model.layers.0.self_attn.o_proj.weight", {H, H}},
      {"model.layers.0.mlp.gate_proj.weight", {I, H}}, {"model.layers.0.mlp.up_proj.weight", {I, H}},
      {"model.layers.0.mlp.down_proj.weight", {H, I}}};
  std::string header = "{";
  uint64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    uint64_t bytes = 4;
    std::string dims;
    for (int64_t d : shape) bytes *= uint64_t(d), dims += (dims.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + ("\"" + name + "\": {\"dtype\": \"F32\", \"shape\": [" + dims + "], \"data_offsets\": [" +
              std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}");
    offset += bytes;
  }
  header += "}";
  std::string prefix(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(prefix.data(), &length, 8);
  write(dir / "model.safetensors", prefix + header);
  fs::resize_file(dir / "model.safetensors", 8 + length + offset);  // sparse: no data on disk
  const auto start = std::chrono::steady_clock::now();
  const std::string why = load_error(dir);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fs::remove_all(dir);
  BOOST_TEST(why.find("this model needs 123.") != std::string::npos, why);
  BOOST_TEST(why.find("GiB of host memory") != std::string::npos, why);
  BOOST_TEST(why.find("--dtype int4g or int8") != std::string::npos, why);
  BOOST_TEST(seconds < 5.0);  // nothing was read
}

// The memory a load may count on: MemAvailable, capped by the cgroup's limit less its usage (a systemd
// MemoryMax= or a container's limit), v2 or v1's memory controller; "max" is no limit; inactive page
// cache is counted as free.
BOOST_AUTO_TEST_CASE(available_memory_is_capped_by_the_cgroup_limit) {
  char tmpl[] = "/tmp/ftllm-root-XXXXXX";
  const fs::path root = mkdtemp(tmpl);
  fs::create_directories(root / "proc/self");
  write(root / "proc/meminfo", "MemTotal: 16000000 kB\nMemFree: 1000 kB\nMemAvailable: 8000000 kB\n");
  BOOST_TEST(available_memory(root.string()) == 8000000ull * 1024);  // no cgroup file
  write(root / "proc/self/cgroup", "0::/system.slice/ftllmd.service\n");
  const fs::path v2 = root / "sys/fs/cgroup/system.slice/ftllmd.service";
  fs::create_directories(v2);
  write(v2 / "memory.max", "max\n");
  write(v2 / "memory.current", "1000\n");
  BOOST_TEST(available_memory(root.string()) == 8000000ull * 1024);
  write(v2 / "memory.max", "4294967296\n");  // MemoryMax=4G, of which 1 GiB is used
  write(v2 / "memory.current", "1073741824\n");
  BOOST_TEST(available_memory(root.string()) == 3ull << 30);
  write(v2 / "memory.stat", "anon 1000\nfile 600000000\ninactive_file 536870912\nactive_file 1\n");  // page cache
  BOOST_TEST(available_memory(root.string()) == (3ull << 30) + (1ull << 29));
  write(root / "proc/self/cgroup", "12:cpu,cpuacct:/x\n11:memory:/docker/abc\n");
  const fs::path v1 = root / "sys/fs/cgroup/memory/docker/abc";
  fs::create_directories(v1);
  write(v1 / "memory.limit_in_bytes", "2147483648\n");
  write(v1 / "memory.usage_in_bytes", "3221225472\n");  // over the limit: nothing left
  BOOST_TEST(available_memory(root.string()) == 0u);
  fs::remove_all(root);
}

BOOST_AUTO_TEST_CASE(progress_knows_its_total_from_the_start) {
  ModelCopy m;
  uint64_t safetensors = 0;
  for (auto& e : fs::directory_iterator(m.dir))
    if (e.path().extension() == ".safetensors") safetensors += e.file_size();
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> seen;
  ModelLoadOptions o = opts(m.dir.string(), "llama");
  o.progress = [&](const std::string& phase, uint64_t done, uint64_t total) { seen.emplace_back(phase, done, total); };
  Engine engine;
  BOOST_REQUIRE(engine.load(o).ok);
  BOOST_REQUIRE(!seen.empty());
  BOOST_TEST(std::get<0>(seen.front()) == "reading");
  for (auto& [phase, done, total] : seen) {
    BOOST_TEST(total == safetensors, phase);
    BOOST_TEST(done <= total);
  }
  BOOST_TEST(std::get<0>(seen.back()) == "ready");
  BOOST_TEST(std::get<1>(seen.back()) == safetensors);
}

BOOST_AUTO_TEST_CASE(unsupported_architecture_is_named_with_the_supported_ones) {
  ModelCopy m;
  replace_in_file(m.dir / "config.json", "LlamaForCausalLM", "GPT2LMHeadModel");
  std::string e = load_error(m.dir);
  BOOST_TEST(e.find("GPT2LMHeadModel is not supported") != std::string::npos);
  BOOST_TEST(e.find("LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM") != std::string::npos);
}

// A config key an architecture cannot honour is refused by name, never ignored; the layers' kinds
// are what the config says (ftllmctl status shows them).
BOOST_AUTO_TEST_CASE(architecture_keys_are_honoured_or_refused_by_name) {
  const fs::path models = kLlama.parent_path();
  for (auto [fixture, from, to, why] : {
           std::tuple{"gemma3-f32", "\"use_bidirectional_attention\": false", "\"use_bidirectional_attention\": true",
                      "field \"use_bidirectional_attention\" is true: only causal Gemma models are supported"},
           {"gemma3-f32", "\"sliding_attention\",\n    \"full_attention\"", "\"sliding_attention\",\n    \"chunked_attention\"",
            "field \"layer_types\" holds \"chunked_attention\"; layers are sliding_attention or full_attention"},
           {"qwen3-f32", "\"use_sliding_window\": false", "\"use_sliding_window\": true",
            "field \"use_sliding_window\" is true: windowed Qwen3 layers are not supported"},
           {"glm4-moe-f32", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"relu\"", "field \"hidden_act\" is \"relu\""},
           {"phi3-f32", "\"rope_type\": \"longrope\"", "\"rope_type\": \"dynamic\"", "has type \"dynamic\", which is not supported"}}) {
    ModelCopy m(models / fixture);
    replace_in_file(m.dir / "config.json", from, to);
    const std::string e = load_error(m.dir);
    BOOST_TEST(e.find(why) != std::string::npos, fixture << ": " << e);
  }
  Engine engine;
  BOOST_REQUIRE(engine.load(opts((models / "gemma3-f32").string(), "g")).ok);
  BOOST_REQUIRE(engine.load(opts((models / "glm4-moe-f32").string(), "glm")).ok);
  BOOST_REQUIRE(engine.load(opts((models / "deepseek-v3-f32").string(), "ds")).ok);
  std::map<std::string, std::string> layers;
  for (const ModelInfo& i : engine.models()) layers[i.name] = i.layers;
  BOOST_TEST(layers["g"] == "3 layers: 2 sliding/16, 1 global");
  BOOST_TEST(layers["glm"] == "3 layers: 1 dense, 2 MoE 2 of 8");
  BOOST_TEST(layers["ds"] == "3 layers: latent attention, 1 dense, 2 MoE 2 of 8");
}

BOOST_AUTO_TEST_CASE(config_missing_a_required_field) {
  ModelCopy m;
  replace_in_file(m.dir / "config.json", "\"hidden_size\"", "\"hidden_sizes\"");
  std::string e = load_error(m.dir);
  BOOST_TEST(e.find("config.json: field \"hidden_size\" is missing") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(config_that_is_not_json) {
  ModelCopy m;
  write(m.dir / "config.json", "{\"architectures\": [\"LlamaForCausalLM\"");
  BOOST_TEST(load_error(m.dir).find("config.json: not a JSON object") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(missing_tensor_is_named_with_its_shape) {
  ModelCopy m;
  std::string h = header_of(m.weights());
  size_t at = h.find("model.layers.1.mlp.up_proj.weight");
  BOOST_REQUIRE(at != std::string::npos);
  h.replace(at, 33, "model.layers.1.mlp.up_proj.wrong!");
  rewrite_header(m.weights(), h);
  std::string e = load_error(m.dir);
  BOOST_TEST(e.ends_with(": missing tensor model.layers.1.mlp.up_proj.weight (expected shape [160, 64])"));
}

BOOST_AUTO_TEST_CASE(mis_shaped_tensor_gives_both_shapes) {
  ModelCopy m;
  std::string h = header_of(m.weights());
  size_t at = h.find("\"model.norm.weight\"");
  BOOST_REQUIRE(at != std::string::npos);
  size_t shape = h.find("\"shape\":[64]", at);
  BOOST_REQUIRE(shape != std::string::npos);
  h.replace(shape, 12, "\"shape\":[8,8]");
  rewrite_header(m.weights(), h);
  BOOST_TEST(load_error(m.dir).ends_with(": tensor model.norm.weight has shape [8, 8], expected [64]"));
}

BOOST_AUTO_TEST_CASE(header_length_past_the_end) {
  ModelCopy m;
  std::string bytes = read(m.weights());
  uint64_t huge = bytes.size();
  std::memcpy(bytes.data(), &huge, 8);
  write(m.weights(), bytes);
  std::string e = load_error(m.dir);
  BOOST_TEST(e.find("runs past the end of the file") != std::string::npos);
  BOOST_TEST(e.find(m.weights().string() + ": header length") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(truncated_data_is_offsets_out_of_range) {
  ModelCopy m;
  std::string bytes = read(m.weights());
  write(m.weights(), bytes.substr(0, bytes.size() - 1000));
  std::string e = load_error(m.dir);
  BOOST_TEST(e.find("outside the file's") != std::string::npos);
  BOOST_TEST(e.find("truncated file?") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(header_that_is_not_json) {
  ModelCopy m;
  std::string h = header_of(m.weights());
  h[0] = '[';
  h[h.size() / 2] = '}';
  rewrite_header(m.weights(), h);
  BOOST_TEST(load_error(m.dir).find("header is not valid JSON") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(tiny_file_and_unsupported_dtype) {
  {
    ModelCopy m;
    write(m.weights(), "abc");
    BOOST_TEST(load_error(m.dir).find("too short to be a safetensors file") != std::string::npos);
  }
  {
    ModelCopy m;
    std::string h = header_of(m.weights());
    size_t at = h.find("\"model.norm.weight\"");
    size_t dt = h.find("\"dtype\":\"F32\"", at);
    BOOST_REQUIRE(dt != std::string::npos);
    h.replace(dt, 13, "\"dtype\":\"I32\"");
    rewrite_header(m.weights(), h);
    BOOST_TEST(load_error(m.dir).ends_with(": tensor model.norm.weight has dtype I32; supported are F32, F16 and BF16"));
  }
}

BOOST_AUTO_TEST_CASE(sharded_checkpoint_with_index_loads_and_generates_the_same) {
  // Split the fixture's tensors over two shard files with an index, as large checkpoints come.
  ModelCopy m;
  auto tensors = model::read_safetensors(m.weights().string());
  std::vector<std::string> shard_json(2, "{"), shard_data(2);
  std::string index = "{\"metadata\":{},\"weight_map\":{";
  int i = 0;
  for (auto& [name, t] : tensors) {
    int s = i++ % 2;
    std::string dims;
    for (int64_t d : t.shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    size_t begin = shard_data[s].size();
    shard_data[s].append(static_cast<const char*>(t.data), t.bytes);
    shard_json[s] += (shard_json[s].size() > 1 ? "," : "") + std::string("\"") + name + "\":{\"dtype\":\"" +
                     t.dtype_name + "\",\"shape\":[" + dims + "],\"data_offsets\":[" + std::to_string(begin) + "," +
                     std::to_string(shard_data[s].size()) + "]}";
    index += (i > 1 ? "," : "") + std::string("\"") + name + "\":\"model-0000" + std::to_string(s + 1) + "-of-00002.safetensors\"";
  }
  tensors.clear();  // release the mapping before the file goes
  fs::remove(m.weights());
  for (int s = 0; s < 2; ++s) {
    std::string header = shard_json[s] + "}";
    uint64_t len = header.size();
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &len, 8);
    write(m.dir / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"), bytes + header + shard_data[s]);
  }
  write(m.dir / "model.safetensors.index.json", index + "}}");

  Engine sharded, single;
  BOOST_REQUIRE(sharded.load(opts(m.dir.string(), "m")).ok);
  BOOST_REQUIRE(single.load(opts(kLlama.string(), "m")).ok);
  GenerationRequest r;
  r.prompt = {5, 6, 7, 8};
  r.sampling.temperature = 0;
  r.max_tokens = 8;
  std::vector<GenerationResult> a, b;
  BOOST_REQUIRE(test::generate(sharded, "m", {r}, a).ok);
  BOOST_REQUIRE(test::generate(single, "m", {r}, b).ok);
  BOOST_TEST(a[0].tokens == b[0].tokens, boost::test_tools::per_element());

  // A shard named in the index but absent fails the load by name.
  fs::remove(m.dir / "model-00002-of-00002.safetensors");
  BOOST_TEST(load_error(m.dir).find("model-00002-of-00002.safetensors named in the index is missing") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(repo_ids_resolve_offline_in_the_hugging_face_cache) {
  char tmpl[] = "/tmp/ftllm-hub-XXXXXX";
  fs::path hub = mkdtemp(tmpl);
  fs::path snapshot = hub / "models--test--tiny-llama" / "snapshots" / "abc123";
  fs::create_directories(snapshot);
  fs::create_directories(hub / "models--test--tiny-llama" / "refs");
  write(hub / "models--test--tiny-llama" / "refs" / "main", "abc123");
  for (auto& e : fs::directory_iterator(kLlama)) fs::copy(e.path(), snapshot / e.path().filename());
  Engine engine;
  ModelLoadOptions o = test::exact_options();
  o.path = "test/tiny-llama";
  o.cache_dir = hub.string();
  o.threads = 1;
  o.context_length = 64;
  o.max_sequences = 1;
  Status s = engine.load(o);
  BOOST_TEST(s.ok, s.message);
  BOOST_TEST(engine.models().at(0).name == "tiny-llama");
  o.path = "test/not-downloaded";
  Status missing = engine.load(o);
  BOOST_TEST(!missing.ok);
  BOOST_TEST(missing.message.find("test/not-downloaded is neither a path nor a model in the Hugging Face cache") != std::string::npos,
             missing.message);
  fs::remove_all(hub);
}

BOOST_AUTO_TEST_CASE(a_kv_cache_larger_than_memory_is_refused_with_what_to_change) {
  Engine engine;
  ModelLoadOptions o = test::exact_options();
  o.path = kLlama.string();
  o.context_length = int64_t(1) << 33;  // 8G tokens: no machine has that much memory for it
  o.max_sequences = 8;
  Status s = engine.load(o);
  BOOST_TEST(!s.ok);
  BOOST_TEST(s.message.find("the KV cache for 8 sequences") != std::string::npos, s.message);
  BOOST_TEST(s.message.find("lower the context (--ctx)") != std::string::npos);
  BOOST_TEST(engine.models().empty());
}

BOOST_AUTO_TEST_CASE(not_a_model_directory) {
  Engine engine;
  Status s = engine.load(opts("/nonexistent/model", "m"));
  BOOST_TEST(!s.ok);
  BOOST_TEST(s.message == "cannot load /nonexistent/model: /nonexistent/model does not exist; give a model directory "
                          "(config.json and *.safetensors), a .gguf file, or a repo id found in the Hugging Face cache");
  // What exists but is neither is said so.
  s = engine.load(opts(std::string(FTLLM_SOURCE_ROOT) + "/README.md", "m"));
  BOOST_TEST(s.message.find("README.md is not a model directory (expected config.json and *.safetensors) or a .gguf file") !=
             std::string::npos, s.message);
}

BOOST_AUTO_TEST_CASE(a_failed_load_leaves_other_models_serving) {
  ModelCopy good, bad;
  write(bad.weights(), "garbage!garbage!");
  Engine engine;
  BOOST_REQUIRE(engine.load(opts(good.dir.string(), "good")).ok);
  BOOST_TEST(!engine.load(opts(bad.dir.string(), "bad")).ok);
  GenerationRequest r;
  r.prompt = {5, 6, 7};
  r.sampling.temperature = 0;
  r.max_tokens = 4;
  std::vector<GenerationResult> out;
  BOOST_TEST(test::generate(engine, "good", {r}, out).ok);
  BOOST_TEST(out.at(0).tokens.size() == 4u);
  BOOST_TEST(!test::generate(engine, "bad", {r}, out).ok);
  BOOST_TEST(engine.unload("good").ok);
  BOOST_TEST(engine.models().empty());
}

BOOST_AUTO_TEST_SUITE_END()

// The daemon prepares a request (prompts rendered and tokenized) on a worker and submits it on its loop; a
// load finishing in between, or a load replacing the model under its name, must not refuse the request
// as "model not found" (the daemon answered 404 while listing the model): it runs on the resident model.
BOOST_AUTO_TEST_CASE(a_request_prepared_before_its_model_loaded_runs_on_it) {
  ModelCopy m;
  Engine engine;
  TextRequest r;
  r.model = "llama";
  r.input = TextRequest::Input::Tokens;
  r.token_prompts = {{1, 2, 3, 4}};
  r.generation.max_tokens = 3;
  r.generation.sampling.temperature = 0;  // greedy: a sampled end-of-text token would end it early (seen once under ASan)
  const PreparedText before_load = engine.prepare(r);
  BOOST_TEST(!before_load.model);
  BOOST_REQUIRE(engine.load(opts(m.dir.string(), "llama")).ok);
  auto run = [&](const PreparedText& prepared) {
    std::promise<size_t> tokens;
    size_t count = 0;
    TextSubmission s = engine.submit(r, prepared, [&](const TextEvent& e) {
      count += e.tokens.size();
      if (e.finished) tokens.set_value(count);
    });
    BOOST_TEST_REQUIRE((s.refusal == Refusal::None), s.error);
    auto answer = tokens.get_future();
    BOOST_REQUIRE(answer.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    return answer.get();
  };
  BOOST_TEST(run(before_load) == 3u);
  const PreparedText before_reload = engine.prepare(r);
  BOOST_REQUIRE(engine.unload("llama").ok);  // and loaded again under its name: a new instance
  BOOST_REQUIRE(engine.load(opts(m.dir.string(), "llama")).ok);
  BOOST_TEST(run(before_reload) == 3u);
}

// The pieces that move a model's weights onto huge pages at load.
BOOST_AUTO_TEST_SUITE(host_weights)

// Resident bytes of this process's mapping that holds `p` (its Rss line in /proc/self/smaps).
size_t mapping_rss(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) inside = a >= lo && a < hi;
    else if (inside && line.starts_with("Rss:")) return size_t(std::stoul(line.substr(4))) * 1024;
  }
  return 0;
}

BOOST_AUTO_TEST_CASE(resident_zeros_are_aligned_to_huge_pages_and_zero) {
  Tensor big = Tensor::resident_zeros(DType::F32, {3, (int64_t(5) << 20) / 4 + 7});
  BOOST_TEST(reinterpret_cast<uintptr_t>(big.data) % (uintptr_t(2) << 20) == 0u);
  const auto* b = big.as<uint8_t>();
  BOOST_TEST(std::all_of(b, b + big.bytes(), [](uint8_t x) { return x == 0; }));
  std::memset(big.data, 7, big.bytes());  // writable to its last byte
  Tensor small = Tensor::resident_zeros(DType::F32, {100});  // below 4 MiB: an ordinary allocation, zeroed
  BOOST_TEST(std::all_of(small.as<float>(), small.as<float>() + 100, [](float x) { return x == 0; }));
}

BOOST_AUTO_TEST_CASE(released_file_pages_leave_the_process_and_read_back_the_same) {
  const fs::path path = fs::temp_directory_path() / ("ftllm-release-" + std::to_string(getpid()));
  std::string bytes(size_t(8) << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char(i * 2654435761u >> 24);
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  {
    auto f = MappedFile::open(path.string());
    BOOST_REQUIRE(std::memcmp(f->data(), bytes.data(), bytes.size()) == 0);  // every page read in
    BOOST_TEST(mapping_rss(f->data()) >= bytes.size() / 2);
    MappedFile::release_pages(f->data(), f->size());
    BOOST_TEST(mapping_rss(f->data()) < bytes.size() / 8);
    BOOST_TEST(std::memcmp(f->data(), bytes.data(), bytes.size()) == 0);  // mapped again from the file
  }
  fs::remove(path);
}

BOOST_AUTO_TEST_CASE(release_pages_leaves_memory_that_is_not_a_mapped_file_alone) {
  // Pages of anything else (a converted weight in the heap) must keep their bytes: dropping them
  // would read back zeros.
  Tensor t = Tensor::resident_zeros(DType::F32, {int64_t(6) << 18});
  std::memset(t.data, 0x5a, t.bytes());
  MappedFile::release_pages(t.data, t.bytes());
  const auto* b = t.as<uint8_t>();
  BOOST_TEST(std::all_of(b, b + t.bytes(), [](uint8_t x) { return x == 0x5a; }));
}

BOOST_AUTO_TEST_SUITE_END()
