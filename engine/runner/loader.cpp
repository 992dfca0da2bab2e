#include "loader.h"

#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include "../core/error.h"
#include "../core/mapped_file.h"
#include "../cpu/kernels.h"
#include "../model/architecture.h"
#include "../model/gguf.h"
#include "../model/gguf_model.h"
#include "placement.h"

namespace ftllm {

namespace fs = std::filesystem;

int64_t served_context(const ModelLoadOptions& o, const model::ModelConfig& c) {
  return o.context_length > 0 ? o.context_length : std::min<int64_t>(c.max_position_embeddings, ModelLoadOptions::kDefaultContextCap);
}

int64_t kv_blocks_for(const ModelLoadOptions& o, const model::ModelConfig& c) {
  return o.kv_sequences() * ((served_context(o, c) + kKvBlockTokens - 1) / kKvBlockTokens);
}

kvcache::KvPool make_kv_pool(const ModelLoadOptions& o, const model::ModelConfig& c, int64_t blocks) {
  kvcache::KvPool pool(c.num_layers, c.kv_cache_heads(), c.kv_cache_head_dim(), kKvBlockTokens, blocks, c.kv_keys_only(),
                       *kvcache::parse_kv_dtype(o.kv_dtype));
  pool.set_prefix_cache(o.prefix_cache != "off");
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (c.linear.is_linear(l)) pool.make_recurrent(l, c.linear.state_floats(), o.kv_sequences());
  return pool;
}

namespace {

// Parses a template, or keeps the reason it failed for the first chat request to report: a model with a
// broken template still serves completions.
void parse_chat_template(const std::string& source, ModelText& text) {
  if (source.empty()) return;
  try {
    text.chat_template = std::make_unique<tokenizer::ChatTemplate>(source);
  } catch (const std::exception& e) {
    text.chat_template_error = e.what();
  }
}

// A GGUF file's vocabulary, and its bos/eos tokens for the template.
void read_gguf_tokenizer(const model::GgufFile& file, ModelText& text) {
  if (!file.get_strings("tokenizer.ggml.tokens")) return;  // weights only: served by token ids
  text.tokenizer = tokenizer::Tokenizer::from_gguf(file);
  for (auto [key, meta] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"}})
    if (auto id = file.get_int(meta); id && *id >= 0 && *id < text.tokenizer->vocab_size())
      text.special_tokens.emplace_back(key, jinja::Value::string(text.tokenizer->token(int32_t(*id))));
}

// "org/name" in the Hugging Face cache ($HF_HOME/hub, ~/.cache/huggingface/hub, or cache_dir), offline:
// the snapshot refs/main points at. Empty when it is not there.
std::string resolve_hf_cache(const std::string& repo, const std::string& cache_dir) {
  static const std::regex repo_id(R"([A-Za-z0-9][\w.-]*/[\w.-]+)");
  if (!std::regex_match(repo, repo_id)) return {};
  std::vector<fs::path> roots;
  if (!cache_dir.empty()) roots.push_back(cache_dir);
  if (const char* hub = std::getenv("HF_HUB_CACHE")) roots.push_back(hub);
  if (const char* home = std::getenv("HF_HOME")) roots.push_back(fs::path(home) / "hub");
  if (const char* home = std::getenv("HOME")) roots.push_back(fs::path(home) / ".cache" / "huggingface" / "hub");
  std::string folder = "models--" + repo.substr(0, repo.find('/')) + "--" + repo.substr(repo.find('/') + 1);
  for (const fs::path& root : roots) {
    fs::path base = root / folder;
    std::ifstream ref(base / "refs" / "main");
    std::string revision;
    if (ref >> revision && fs::is_directory(base / "snapshots" / revision)) return (base / "snapshots" / revision).string();
    std::error_code ec;  // no refs/main: the only snapshot, if there is one
    std::vector<fs::path> snapshots;
    for (auto& e : fs::directory_iterator(base / "snapshots", ec)) snapshots.push_back(e.path());
    if (snapshots.size() == 1) return snapshots[0].string();
  }
  return {};
}

}  // namespace

uint64_t available_memory(const std::string& root) {
  auto read_number = [](const fs::path& file) -> std::optional<uint64_t> {
    std::ifstream in(file);
    std::string text;
    if (!(in >> text) || text == "max") return std::nullopt;
    try {
      return std::stoull(text);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  uint64_t available = UINT64_MAX;
  std::ifstream meminfo(fs::path(root) / "proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") available = kib * 1024;
  }
  // The cgroup's limit less what it uses: cgroup v2 ("0::/path": memory.max, memory.current) or v1's
  // memory controller (memory.limit_in_bytes, memory.usage_in_bytes). Its usage counts the page cache too:
  // the inactive file pages (memory.stat) are given back under pressure, so they count as free (as
  // docker stats does).
  auto inactive_file = [](const fs::path& stat, const char* key) {
    std::ifstream in(stat);
    std::string k;
    uint64_t v = 0;
    while (in >> k >> v)
      if (k == key) return v;
    return uint64_t(0);
  };
  std::ifstream cgroups(fs::path(root) / "proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = line.compare(0, a, "0") == 0 && controllers.empty();
    const bool v1_memory = ("," + controllers + ",").find(",memory,") != std::string::npos;
    if (!v2 && !v1_memory) continue;
    const fs::path dir = fs::path(root) / (v2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory") / fs::path(path).relative_path();
    const auto limit = read_number(dir / (v2 ? "memory.max" : "memory.limit_in_bytes"));
    const uint64_t reclaimable = inactive_file(dir / "memory.stat", v2 ? "inactive_file" : "total_inactive_file");
    const uint64_t used = read_number(dir / (v2 ? "memory.current" : "memory.usage_in_bytes")).value_or(0);
    const uint64_t held = used > reclaimable ? used - reclaimable : 0;
    if (limit && *limit < (uint64_t(1) << 60)) available = std::min(available, *limit > held ? *limit - held : 0);
  }
  return available;
}

namespace {

// The KV cache's bytes for the sequences and context the options ask (--kv_dtype parsed in load_model).
uint64_t kv_cache_bytes(const ModelLoadOptions& o, const model::ModelConfig& c) {
  const kvcache::KvDtype dtype = *kvcache::parse_kv_dtype(o.kv_dtype);
  const uint64_t states = uint64_t(c.linear.count() * c.linear.state_floats()) * 4 * uint64_t(o.kv_sequences());
  return uint64_t(kvcache::KvPool::token_bytes(c.kv_layers(), c.kv_cache_heads(), c.kv_cache_head_dim(), c.kv_keys_only(), dtype)) *
             uint64_t(kv_blocks_for(o, c)) * kKvBlockTokens + states;
}

// Refuses a KV cache that cannot fit in the memory available now, with what to change.
void check_kv_fits(const ModelLoadOptions& o, const model::ModelConfig& c) {
  const std::optional<kvcache::KvDtype> dtype = kvcache::parse_kv_dtype(o.kv_dtype);  // checked in load_model
  if (!kvcache::kv_fits(*dtype, c.kv_cache_head_dim()))
    throw EngineError("--kv_dtype " + o.kv_dtype + " stores heads in blocks of " + (*dtype == kvcache::KvDtype::Q8_0 ? "32" : "4") +
                      " values, and this model's heads have " + std::to_string(c.kv_cache_head_dim()) + "; use f16, bf16 or f32");
  const uint64_t bytes = kv_cache_bytes(o, c);
  const uint64_t available = available_memory("/");
  if (bytes > available) {
    char msg[512];
    std::snprintf(msg, sizeof msg,
                  "the KV cache for %d sequences of %lld tokens needs %.1f GiB but only %.1f GiB of memory is available; "
                  "lower the context (--ctx) or the sequences (--max_sequences)",
                  o.kv_sequences(), (long long)served_context(o, c), double(bytes) / (1 << 30), double(available) / (1 << 30));
    throw EngineError(msg);
  }
}

// Refuses, before any weight is read, a model whose weights and KV cache cannot stay in host memory:
// every weight when the model runs on the CPU, the routed experts when they stay in host memory beside a
// GPU (their pages mapped from the file or converted). Sizes are the dtypes the rules convert to.
void check_host_memory_fits(const ModelLoadOptions& o, const model::ModelConfig& c, const model::WeightStore& store,
                            const model::DTypeRules& rules) {
  uint64_t experts = 0, rest = 0, expert_values = 0;
  for (const auto& [name, t] : store.tensors()) {
    uint64_t bytes = t.bytes;
    const int64_t cols = t.shape.empty() ? 0 : t.shape.back();
    int64_t values = 1;
    for (int64_t d : t.shape) values *= d;
    const std::optional<DType> to = t.shape.size() >= 2 && t.dtype ? rules.target(name) : std::nullopt;
    if (to && *to != *t.dtype && fits_rows(*to, cols)) bytes = uint64_t(values / cols) * row_bytes(*to, cols);
    const bool expert = name.find(".mlp.experts.") != std::string::npos;
    (expert ? experts : rest) += bytes;
    if (expert) expert_values += uint64_t(values);
  }
  const bool on_gpu = o.device.find("cuda") != std::string::npos;
  const bool experts_on_host = o.moe_device.empty() || o.moe_device == "cpu" || o.moe_device == "numa";
  const uint64_t weights = on_gpu ? (experts_on_host ? experts : 0) : experts + rest;
  const uint64_t kv = on_gpu ? 0 : kv_cache_bytes(o, c);
  const uint64_t available = available_memory("/");
  if (weights + kv <= available) return;
  const double gib = 1 << 30;
  char msg[768], part[128] = "";
  if (experts > 0 && (!on_gpu || experts_on_host)) std::snprintf(part, sizeof part, ", %.1f GiB of them routed experts", double(experts) / gib);
  std::snprintf(msg, sizeof msg, "this model needs %.1f GiB of host memory (weights %.1f GiB%s; KV cache %.1f GiB) but %.1f GiB is available; ",
                double(weights + kv) / gib, double(weights) / gib, part, double(kv) / gib, double(available) / gib);
  std::string advice = msg;
  if (expert_values > 0)
    advice += "convert the experts smaller (--moe_dtype int4g would make them about " +
              std::to_string(int(double(expert_values) * 0.53125 / gib + 0.5)) + " GiB), put them on a GPU (--moe_device cuda), ";
  else
    advice += "convert the weights smaller (--dtype int4g or int8), run it on a GPU (--device cuda), ";
  advice += "or lower --ctx / --max_sequences";
  throw EngineError(advice);
}

// --moe_experts, --moe_device and --cuda_se checked against the model and this build.
void apply_moe_options(const ModelLoadOptions& o, model::ModelConfig& c) {
  const bool moe = c.moe.num_experts > 0;
  if (o.moe_experts != 0) {
    if (!moe) throw EngineError("--moe_experts applies to mixture-of-experts models; " + c.architecture + " has no experts");
    if (o.moe_experts < 1 || o.moe_experts > c.moe.num_experts)
      throw EngineError("--moe_experts " + std::to_string(o.moe_experts) + " is outside 1.." + std::to_string(c.moe.num_experts) +
                        " (the experts this model has)");
    c.moe.experts_per_token = o.moe_experts;
  }
  const bool cuda_experts = o.moe_device == "cuda" || o.moe_device.starts_with("cuda:");
  if (o.moe_device != "cpu" && o.moe_device != "numa" && !o.moe_device.empty() && !cuda_experts)
    throw EngineError("--moe_device " + o.moe_device + " is unknown; use cpu, numa or cuda");
  if ((o.moe_device == "numa" || cuda_experts) && !moe)
    throw EngineError("--moe_device " + o.moe_device + " applies to mixture-of-experts models; " + c.architecture +
                      " has no experts");
  auto no_gpu = [](const std::string& device) {  // why `device` cannot be used, or empty
    try {
      Placement::parse(device, 1);
    } catch (const EngineError& e) {
      std::string why = e.what();
      const size_t colon = why.find(": ");  // after "device cuda:1 is not available"
      return colon == std::string::npos ? why : why.substr(colon + 2);
    }
    return std::string();
  };
  if (cuda_experts)
    if (std::string why = no_gpu(o.moe_device); !why.empty())
      throw EngineError("--moe_device " + o.moe_device + " is not available: " + why);
  if (o.cuda_se)
    if (std::string why = no_gpu("cuda"); !why.empty())
      throw EngineError("--cuda_se keeps shared experts on a CUDA device, and " + why + "; load without it");
}

void add_note(std::string& notes, const std::string& note) {
  if (!note.empty()) notes += (notes.empty() ? "" : "; ") + note;
}

// sentence-transformers' modules.json: a Pooling module (its config's pooling_mode_*) and whether a
// Normalize module follows.
void read_sentence_transformers_pooling(const fs::path& dir, LoadedModel& m) {
  if (!fs::exists(dir / "modules.json")) return;
  simdjson::dom::parser parser;
  simdjson::dom::array modules;
  if (parser.load((dir / "modules.json").string()).get(modules)) {
    m.pooling_problem = (dir / "modules.json").string() + " is not a JSON array of modules";
    return;
  }
  std::string pooling_dir;
  bool normalize = false;
  for (simdjson::dom::element module : modules) {
    std::string_view type, path;
    if (module["type"].get(type) || module["path"].get(path)) continue;
    if (type.ends_with(".Pooling")) pooling_dir = std::string(path);
    if (type.ends_with(".Normalize")) normalize = true;
  }
  if (pooling_dir.empty()) return;
  const fs::path config = dir / pooling_dir / "config.json";
  simdjson::dom::parser pooling_parser;
  simdjson::dom::object modes;
  if (pooling_parser.load(config.string()).get(modes)) {
    m.pooling_problem = config.string() + " is missing or not a JSON object";
    return;
  }
  auto on = [&](const char* key) {
    bool v = false;
    return !modes[key].get(v) && v;
  };
  for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"})
    if (on(unsupported)) {
      m.pooling_problem = config.string() + " asks for " + unsupported + ", which this server does not compute (it pools the "
                          "last token, the mean or the first token)";
      return;
    }
  Pooling p;
  p.normalize = normalize;
  if (on("pooling_mode_lasttoken")) p.mode = Pooling::Mode::Last;
  else if (on("pooling_mode_mean_tokens")) p.mode = Pooling::Mode::Mean;
  else if (on("pooling_mode_cls_token")) p.mode = Pooling::Mode::First;
  else {
    m.pooling_problem = config.string() + " turns on no pooling mode";
    return;
  }
  m.pooling = p;
}

// A .gguf file: weights, config, vocabulary and template all inside.
void load_gguf(LoadedModel& m, const model::DTypeRules& rules, int threads) {
  const ModelLoadOptions& o = m.options;
  const fs::path file_path(o.path);
  uint64_t file_bytes = fs::file_size(file_path);  // the first part's, until the set is open
  if (o.progress) o.progress("reading", 0, file_bytes);
  model::GgufModel g = model::load_gguf_model(o.path, [&](uint64_t done, uint64_t total) {
    if (o.progress) o.progress("converting", done, total);
  });
  file_bytes = g.file_bytes;
  if (o.progress) o.progress("binding", file_bytes, file_bytes);
  g.weights.set_dtype_rules(rules, threads);
  apply_moe_options(o, g.config);
  const model::Architecture& arch = model::find_architecture(g.config.architecture);
  arch.check(g.config);
  check_kv_fits(o, g.config);
  check_host_memory_fits(o, g.config, g.weights, rules);
  m.model = std::make_unique<model::DecoderModel>(g.config, arch, g.weights);
  m.weight_file_bytes = file_bytes;
  if (m.options.name.empty()) {  // a split set is named without its part suffix
    static const std::regex kPart(R"((.*)-\d{5}-of-\d{5})");
    std::smatch part;
    const std::string stem = file_path.stem().string();
    m.options.name = std::regex_match(stem, part, kPart) ? part[1].str() : stem;
  }
  add_note(m.notes, g.weights.conversion_notes());
  model::GgufFile file = model::GgufFile::open(o.path);
  read_gguf_tokenizer(file, m.text);
  // llama.cpp's pooling_type (1 mean, 2 cls, 3 last; 0 none, 4 rank); its server normalises embeddings.
  const std::string gguf_arch = file.get_string("general.architecture").value_or("");
  if (const std::optional<int64_t> type = file.get_int(gguf_arch + ".pooling_type"); type && *type != 0) {
    if (*type == 1 || *type == 2 || *type == 3)
      m.pooling = Pooling{*type == 1 ? Pooling::Mode::Mean : *type == 2 ? Pooling::Mode::First : Pooling::Mode::Last, true};
    else
      m.pooling_problem = o.path + ": " + gguf_arch + ".pooling_type " + std::to_string(*type) + " (a reranker's) is not an embedding";
  }
  parse_chat_template(o.chat_template.empty() ? file.get_string("tokenizer.chat_template").value_or("")
                                              : read_text_file(o.chat_template),
                      m.text);
}

// A Hugging Face directory (or one ftllm-export wrote): config.json, *.safetensors, tokenizer files.
void load_directory(LoadedModel& m, const model::DTypeRules& rules, int threads) {
  const ModelLoadOptions& o = m.options;
  const fs::path dir(o.path);
  if (!fs::is_directory(dir))
    throw EngineError(o.path + " is not a model directory (expected config.json and *.safetensors) or a .gguf file");
  if (!fs::exists(dir / "config.json")) throw EngineError(o.path + " has no config.json");
  model::ModelConfig config = model::parse_model_config(read_text_file(dir / "config.json"), (dir / "config.json").string());
  if (fs::exists(dir / "generation_config.json"))
    model::merge_generation_config(config, read_text_file(dir / "generation_config.json"),
                                   (dir / "generation_config.json").string());
  apply_moe_options(o, config);
  const model::Architecture& arch = model::find_architecture(config.architecture);
  arch.check(config);
  if (o.progress) {  // the weight files' bytes, so a progress bar has its total from the start
    uint64_t total = 0;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors" && e.is_regular_file()) total += e.file_size();
    o.progress("reading", 0, total);
  }
  model::WeightStore weights = model::WeightStore::open_directory(o.path);
  if (o.progress) o.progress("binding", weights.file_bytes(), weights.file_bytes());
  weights.set_dtype_rules(rules, threads);
  check_kv_fits(o, config);
  check_host_memory_fits(o, config, weights, rules);
  m.model = std::make_unique<model::DecoderModel>(config, arch, weights);
  m.weight_file_bytes = weights.file_bytes();
  if (m.options.name.empty()) m.options.name = fs::absolute(dir).lexically_normal().filename().string();
  if (m.options.name.empty()) m.options.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  add_note(m.notes, weights.conversion_notes());
  if (fs::exists(dir / "tokenizer.json")) {
    m.text.tokenizer = tokenizer::Tokenizer::from_json(read_text_file(dir / "tokenizer.json"), (dir / "tokenizer.json").string());
    m.text.special_tokens = tokenizer::special_tokens_of(o.path);
  } else if (fs::exists(dir / "tiktoken.model")) {  // Kimi-K2's tiktoken vocabulary
    m.text.tokenizer = tokenizer::Tokenizer::from_tiktoken((dir / "tiktoken.model").string(), (dir / "tokenizer_config.json").string());
    m.text.special_tokens = tokenizer::special_tokens_of(o.path);
  } else if (fs::exists(dir / "tokenizer.gguf")) {  // exported from a GGUF model
    read_gguf_tokenizer(model::GgufFile::open((dir / "tokenizer.gguf").string()), m.text);
  }
  parse_chat_template(o.chat_template.empty() ? tokenizer::find_chat_template(o.path) : read_text_file(o.chat_template), m.text);
  read_sentence_transformers_pooling(dir, m);
}

}  // namespace

namespace {

// The path a load reads: o.path, or the snapshot of the repo id o.path names in the Hugging Face cache.
// Throws when neither exists.
std::string model_path(const ModelLoadOptions& o) {
  if (fs::exists(o.path)) return o.path;
  std::string cached = resolve_hf_cache(o.path, o.cache_dir);
  if (!cached.empty()) return cached;
  if (o.path.find('/') != std::string::npos && o.path[0] != '/' && o.path[0] != '.')
    throw EngineError(o.path + " is neither a path nor a model in the Hugging Face cache (" +
                      (o.cache_dir.empty() ? std::string("$HF_HOME/hub") : o.cache_dir) +
                      "); download it there first, or give a directory or .gguf file");
  throw EngineError(o.path + " does not exist; give a model directory (config.json and *.safetensors), a .gguf file, "
                    "or a repo id found in the Hugging Face cache");
}

}  // namespace

std::optional<OptionProblem> check_load_options(const ModelLoadOptions& o) {
  auto problem = [](const char* key, const std::function<void()>& check) -> std::optional<OptionProblem> {
    try {
      check();
    } catch (const std::exception& e) {
      return OptionProblem{key, e.what()};
    }
    return std::nullopt;
  };
  const std::pair<const char*, std::function<void()>> checks[] = {
      {"path", [&] { model_path(o); }},
      {"kernels", [&] { cpu::kernels_named(o.kernels); }},
      {"dtype", [&] { model::DTypeRules::parse(o.dtype, "auto", ""); }},
      {"moe_dtype", [&] { model::DTypeRules::parse("auto", o.moe_dtype, ""); }},
      {"dtype_config", [&] { model::DTypeRules::parse("auto", "auto", o.dtype_config); }},
      {"kv_dtype",
       [&] {
         if (!kvcache::parse_kv_dtype(o.kv_dtype))
           throw EngineError("--kv_dtype " + o.kv_dtype + " is unknown; use f16, bf16, f32, q8_0 or fp8");
       }},
      {"prefix_cache",
       [&] {
         if (o.prefix_cache != "on" && o.prefix_cache != "off")
           throw EngineError("--prefix_cache takes on or off, not \"" + o.prefix_cache + "\"");
       }},
      {"device", [&] { Placement::parse(o.device, 64); }},
      {"chat_template",
       [&] {
         if (!o.chat_template.empty() && !fs::is_regular_file(o.chat_template))
           throw EngineError("the chat template " + o.chat_template + " is not a readable file");
       }},
  };
  for (const auto& [key, check] : checks)
    if (auto p = problem(key, check)) return p;
  return std::nullopt;
}

LoadedModel load_model(const ModelLoadOptions& requested) {
  LoadedModel m;
  m.options = requested;
  ModelLoadOptions& o = m.options;
  if (std::optional<OptionProblem> p = check_load_options(o)) throw EngineError(p->reason);
  const model::DTypeRules rules = model::DTypeRules::parse(o.dtype, o.moe_dtype, o.dtype_config);
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  if (const std::string path = model_path(o); path != o.path) {  // a repo id in the cache
    if (o.name.empty()) o.name = o.path.substr(o.path.find('/') + 1);
    o.path = path;
  }
  const fs::path path(o.path);
  if (path.extension() == ".gguf" && fs::is_regular_file(path)) load_gguf(m, rules, threads);
  else load_directory(m, rules, threads);
  if (o.progress) o.progress("ready", m.weight_file_bytes, m.weight_file_bytes);
  return m;
}

}  // namespace ftllm
