#include "model_instance.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "core/mapped_file.h"
#include "core/error.h"
#include "cpu/kernels.h"
#include "cpu/numa_topology.h"
#include "model/architecture.h"
#include "model/gguf.h"
#include "model/gguf_model.h"

namespace ftllm {

namespace fs = std::filesystem;

namespace {

int64_t context_of(const ModelLoadOptions& o, const model::ModelConfig& c) {
  return o.context_length > 0 ? o.context_length : std::min<int64_t>(c.max_position_embeddings, 8192);
}

}  // namespace

namespace {

// Parses a template, or keeps the reason it failed for the first chat request to report: a model with a
// broken template still serves completions.
std::unique_ptr<tokenizer::ChatTemplate> parse_chat_template(const std::string& source, std::string& error) {
  if (source.empty()) return nullptr;
  try {
    return std::make_unique<tokenizer::ChatTemplate>(source);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
}

}  // namespace

namespace {

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

uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return UINT64_MAX;
}

}  // namespace

// Refuses a KV cache that cannot fit in the memory available now, with what to change.
ModelLoadOptions ModelInstance::check_kv_fits(ModelLoadOptions o, const model::ModelConfig& c) {
  const uint64_t blocks = uint64_t(o.max_sequences) * uint64_t((context_of(o, c) + kKvBlockTokens - 1) / kKvBlockTokens);
  const uint64_t bytes =
      uint64_t(c.num_layers) * (c.kv_keys_only() ? 1 : 2) * blocks * kKvBlockTokens * uint64_t(c.kv_row_floats()) * 4;
  const uint64_t available = available_memory();
  if (bytes > available) {
    char msg[512];
    std::snprintf(msg, sizeof msg,
                  "the KV cache for %d sequences of %lld tokens needs %.1f GiB but only %.1f GiB of memory is available; "
                  "lower the context (--ctx) or the sequences (--max_sequences)",
                  o.max_sequences, (long long)context_of(o, c), double(bytes) / (1 << 30), double(available) / (1 << 30));
    throw EngineError(msg);
  }
  return o;
}

namespace {

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
      resolve_placement(device, 1);
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

}  // namespace

std::unique_ptr<ModelInstance> ModelInstance::load(const ModelLoadOptions& requested) {
  ModelLoadOptions options = requested;
  cpu::kernels_named(options.kernels);  // an unknown or unrunnable kernel set fails the load, not a request
  const model::DTypeRules rules = model::DTypeRules::parse(options.dtype, options.moe_dtype, options.dtype_config);
  const int load_threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  if (!fs::exists(options.path)) {
    std::string cached = resolve_hf_cache(options.path, options.cache_dir);
    if (cached.empty() && options.path.find('/') != std::string::npos && options.path[0] != '/' && options.path[0] != '.')
      throw EngineError(options.path + " is neither a path nor a model in the Hugging Face cache (" +
                        (options.cache_dir.empty() ? std::string("$HF_HOME/hub") : options.cache_dir) +
                        "); download it there first, or give a directory or .gguf file");
    if (!cached.empty()) {
      if (options.name.empty()) options.name = options.path.substr(options.path.find('/') + 1);
      options.path = cached;
    }
  }
  fs::path dir(options.path);
  std::unique_ptr<ModelInstance> m;
  std::string template_source;
  if (dir.extension() == ".gguf" && fs::is_regular_file(dir)) {
    const uint64_t file_bytes = fs::file_size(dir);
    if (options.progress) options.progress("reading", 0, file_bytes);
    model::GgufModel g = model::load_gguf_model(options.path, [&](uint64_t done, uint64_t total) {
      if (options.progress) options.progress("converting", done, total);
    });
    if (options.progress) options.progress("binding", file_bytes, file_bytes);
    g.weights.set_dtype_rules(rules, load_threads);
    apply_moe_options(options, g.config);
    const model::Architecture& arch = model::find_architecture(g.config.architecture);
    auto decoder = std::make_unique<model::DecoderModel>(g.config, arch.spec(g.config), g.weights);
    ModelLoadOptions o = options;
    if (o.name.empty()) o.name = dir.stem().string();
    m.reset(new ModelInstance(o, std::move(decoder), fs::file_size(dir)));
    m->add_load_note(g.weights.conversion_notes());
    model::GgufFile file = model::GgufFile::open(options.path);
    m->read_gguf_tokenizer(file);
    template_source = file.get_string("tokenizer.chat_template").value_or("");
  } else {
    if (!fs::is_directory(dir))
      throw EngineError(options.path + " is not a model directory (expected config.json and *.safetensors) or a .gguf file");
    if (!fs::exists(dir / "config.json")) throw EngineError(options.path + " has no config.json");
    model::ModelConfig config =
        model::parse_model_config(read_text_file(dir / "config.json"), (dir / "config.json").string());
    if (fs::exists(dir / "generation_config.json"))
      model::merge_generation_config(config, read_text_file(dir / "generation_config.json"),
                                     (dir / "generation_config.json").string());
    apply_moe_options(options, config);
    const model::Architecture& arch = model::find_architecture(config.architecture);
    model::DecoderSpec spec = arch.spec(config);
    if (options.progress) options.progress("reading", 0, 0);
    model::WeightStore weights = model::WeightStore::open_directory(options.path);
    if (options.progress) options.progress("binding", weights.file_bytes(), weights.file_bytes());
    weights.set_dtype_rules(rules, load_threads);
    auto decoder = std::make_unique<model::DecoderModel>(config, spec, weights);
    ModelLoadOptions o = options;
    if (o.name.empty()) o.name = fs::absolute(dir).lexically_normal().filename().string();
    if (o.name.empty()) o.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
    m.reset(new ModelInstance(o, std::move(decoder), weights.file_bytes()));
    m->add_load_note(weights.conversion_notes());
    template_source = tokenizer::find_chat_template(options.path);
    if (fs::exists(dir / "tokenizer.json")) {
      m->tokenizer_ = tokenizer::Tokenizer::from_json(read_text_file(dir / "tokenizer.json"), (dir / "tokenizer.json").string());
      m->special_tokens_ = tokenizer::special_tokens_of(options.path);
    } else if (fs::exists(dir / "tokenizer.gguf")) {  // exported from a GGUF model
      m->read_gguf_tokenizer(model::GgufFile::open((dir / "tokenizer.gguf").string()));
    }
  }
  if (!options.chat_template.empty()) template_source = read_text_file(options.chat_template);
  m->chat_template_ = parse_chat_template(template_source, m->chat_template_error_);
  if (options.progress) options.progress("ready", m->weight_file_bytes(), m->weight_file_bytes());
  return m;
}

void ModelInstance::read_gguf_tokenizer(const model::GgufFile& file) {
  if (!file.get_strings("tokenizer.ggml.tokens")) return;  // weights only: served by token ids, like a directory without tokenizer.json
  tokenizer_ = tokenizer::Tokenizer::from_gguf(file);
  for (auto [key, meta] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"}, {"eos_token", "tokenizer.ggml.eos_token_id"}})
    if (auto id = file.get_int(meta); id && *id >= 0 && *id < tokenizer_->vocab_size())
      special_tokens_.emplace_back(key, jinja::Value::string(tokenizer_->token(int32_t(*id))));
}

ModelInstance::ModelInstance(ModelLoadOptions options, std::unique_ptr<model::DecoderModel> model, size_t weight_bytes)
    : options_(check_kv_fits(std::move(options), model->config())),
      kernels_(cpu::kernels_named(options_.kernels)),
      model_(std::move(model)),
      weight_file_bytes_(weight_bytes),
      pool_(std::make_unique<cpu::ThreadPool>(options_.threads)),
      kv_(model_->config().num_layers, 1, model_->config().kv_row_floats(), kKvBlockTokens,
          options_.max_sequences * ((context_of(options_, model_->config()) + kKvBlockTokens - 1) / kKvBlockTokens),
          model_->config().kv_keys_only()),
      // Prompts are fed in slices of at most 512 tokens per step so running streams keep flowing.
      scheduler_({512, options_.max_sequences}) {
  current_threads_ = pool_->size();
  if (options_.moe_device == "numa" && model_->config().moe.num_experts > 0) {
    if (cpu::numa_nodes_with_cpus().size() > 1) experts_on_nodes_ = true;
    else add_load_note("--moe_device numa: this machine has one NUMA node, so the experts run as --moe_device cpu");
  }
  std::string note;
  apply_placement(resolve_placement(options_.device, model_->config().num_layers, &note), 0);
  add_load_note(note);
  worker_ = std::thread([this] { worker_loop(); });
}

ModelInstance::~ModelInstance() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

int64_t ModelInstance::context_length() const { return context_of(options_, config()); }

uint64_t ModelInstance::submit(GenerationRequest request, GenerationCallback callback) {
  const model::ModelConfig& c = config();
  const int64_t context = context_length();
  std::string refused;
  for (int32_t t : request.prompt)
    if (t < 0 || t >= c.vocab_size) {
      refused = "token id " + std::to_string(t) + " is outside the vocabulary of " + std::to_string(c.vocab_size);
      break;
    }
  if (refused.empty() && int64_t(request.prompt.size()) >= context)
    refused = "the prompt has " + std::to_string(request.prompt.size()) +
              " tokens; this model is loaded with a context of " + std::to_string(context) + " tokens";
  std::unique_lock lock(mu_);
  const uint64_t id = next_id_++;
  if (!refused.empty() || stop_) {
    lock.unlock();
    GenerationEvent e;
    e.finished = true;
    e.result = {{}, FinishReason::Error, refused.empty() ? "the model is being unloaded" : refused};
    callback(e);
    return id;
  }
  // No sequence may outgrow its context: the cache was sized for it.
  request.max_tokens = int32_t(std::min<int64_t>(request.max_tokens, context - int64_t(request.prompt.size())));
  incoming_.push_back({id, std::move(request), std::move(callback)});
  ++waiting_;
  lock.unlock();
  wake_.notify_one();
  return id;
}

void ModelInstance::cancel(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

void ModelInstance::set_placement(std::vector<LayerRange> placement) {
  {
    std::lock_guard lock(mu_);
    pending_placement_ = std::move(placement);
  }
  wake_.notify_one();
}

std::vector<LayerRange> ModelInstance::placement() const {
  std::lock_guard lock(mu_);
  return placement_;
}

void ModelInstance::add_load_note(const std::string& note) {
  std::lock_guard lock(mu_);  // the worker adds notes (a failed rebalance) while status reads them
  if (!note.empty()) load_notes_ += (load_notes_.empty() ? "" : "; ") + note;
}

std::string ModelInstance::load_notes() const {
  std::lock_guard lock(mu_);
  return load_notes_;
}

std::vector<ModelHandle::Footprint::OnDevice> ModelInstance::memory_by_device() const {
  std::lock_guard lock(mu_);
  return memory_;
}

namespace {

// Where a placement's device runs a layer: a tensor-parallel group on its first shard's device.
Device device_of(const std::string& d) {
  const auto shards = tensor_parallel_shards(d);
  const int i = cuda_index(shards.empty() ? d : shards[0].first);
  return i >= 0 ? Device::cuda(i) : Device::cpu();
}

}  // namespace

namespace {

std::string gib(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", double(bytes) / double(uint64_t(1) << 30));
  return s;
}

}  // namespace

void ModelInstance::move_to_devices(const std::vector<LayerRange>& placement) {
  using D = model::DecoderModel;
  const model::ModelConfig& c = config();
  // Each layer's device, and its weights' own: a tensor-parallel layer keeps its own on the host (its
  // shards hold the slices it computes with).
  std::vector<Device> target(size_t(c.num_layers)), own(size_t(c.num_layers));
  std::vector<std::string> spec(size_t(c.num_layers));
  for (const LayerRange& r : placement)
    for (int64_t l = r.first; l < r.first + r.count; ++l) {
      spec[size_t(l)] = r.device;
      target[size_t(l)] = device_of(r.device);
      own[size_t(l)] = tensor_parallel_shards(r.device).empty() ? target[size_t(l)] : Device::cpu();
    }
  // The routed experts stay where --moe_device says whatever the layer's device; shared experts follow
  // the layer onto a GPU with --cuda_se, else stay with the routed ones.
  const Device experts = options_.moe_device.starts_with("cuda") ? device_of(resolve_placement(options_.moe_device, 1)[0].device)
                                                                 : Device::cpu();
  if (layer_place_.empty()) layer_place_.assign(size_t(c.num_layers), "cpu");
  struct Move {
    int64_t layer;
    Device to;
    unsigned parts;
  };
  std::vector<Move> moves;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Device d = target[size_t(l)];
    if (spec[size_t(l)] == layer_place_[size_t(l)] && layers_placed_) continue;  // the first placement also places the experts
    moves.push_back({l, own[size_t(l)], D::kAttentionAndDense});
    moves.push_back({l, experts, D::kRoutedExperts});
    moves.push_back({l, options_.cuda_se && d.is_cuda() ? d : experts, D::kSharedExperts});
  }
  const Device head = target.empty() ? Device::cpu() : target.back();  // the LM head runs where the last layer does

  // Before anything moves: what each GPU must take (bytes not there yet) against its share of free memory.
  std::map<int, uint64_t> weights;
  std::map<int, int64_t> kv_layers;
  for (const Move& m : moves)
    if (m.to.is_cuda())
      model_->move_layer(m.layer, [&](Tensor& t) { if (!(t.device == m.to)) weights[m.to.index] += t.bytes(); }, m.parts);
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (own[size_t(l)].is_cuda() && !(kv_.layer_storage(l).device == own[size_t(l)])) ++kv_layers[own[size_t(l)].index];
  if (head.is_cuda() && !(model_->head_device() == head))
    model_->move_head([&](Tensor& t) { if (!(t.device == head)) weights[head.index] += t.bytes(); });
  const int64_t per_sequence = (context_length() + kKvBlockTokens - 1) / kKvBlockTokens;
  int64_t blocks = kv_.num_blocks();
  for (auto& [gpu, bytes] : weights) kv_layers[gpu];
  for (auto& [gpu, layers] : kv_layers) {
    const uint64_t free_now = ops::device_available_bytes(Device::cuda(gpu));
    const uint64_t budget = uint64_t(options_.gpu_memory * double(free_now));
    const uint64_t block_bytes = uint64_t(layers) * (kv_.layer_bytes() / uint64_t(kv_.num_blocks()));
    const uint64_t w = weights[gpu];
    if (w + block_bytes * uint64_t(blocks) <= budget) continue;
    // At load the KV cache shrinks to what fits there: whole sequences at the full context, at least one.
    const int64_t fit = block_bytes && w < budget ? int64_t((budget - w) / block_bytes) / per_sequence * per_sequence : 0;
    if (!layers_placed_ && layers > 0 && fit >= per_sequence) {
      blocks = std::min(blocks, fit);
      continue;
    }
    throw EngineError("the layers placed on cuda:" + std::to_string(gpu) + " need " + gib(w) + " of weights and " +
                      gib(block_bytes * uint64_t(blocks)) + " of KV cache, but --gpu_memory " +
                      std::to_string(options_.gpu_memory).substr(0, 4) + " of its " + gib(free_now) + " free is " +
                      gib(budget) + "; place fewer layers there (as {'cuda:" + std::to_string(gpu) +
                      "':3,'cpu':1}), lower --ctx or --max_sequences, use a smaller --dtype, or raise --gpu_memory");
  }
  if (blocks < kv_.num_blocks()) {
    const int64_t sequences = blocks / per_sequence;
    kv_ = kvcache::KvPool(c.num_layers, 1, c.kv_row_floats(), kKvBlockTokens, blocks, c.kv_keys_only());
    scheduler_.set_max_running(int32_t(std::min<int64_t>(sequences, options_.max_sequences)));
    add_load_note("the KV cache holds " + std::to_string(sequences) + " sequences of " + std::to_string(context_length()) +
                  " tokens (not " + std::to_string(options_.max_sequences) + "): that is what --gpu_memory " +
                  std::to_string(options_.gpu_memory).substr(0, 4) + " of the GPU's free memory holds");
  }

  auto move_to = [](Device d) { return [d](Tensor& t) { t = ops::to_device(t, d); }; };
  for (const Move& m : moves) model_->move_layer(m.layer, move_to(m.to), m.parts);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (spec[size_t(l)] == layer_place_[size_t(l)] && layers_placed_) continue;
    // The layer's cached keys and values go with it, so running sequences carry on: a split layer's
    // pages are cut by KV heads to its shards' devices, and put together again when it is whole.
    if (model_->is_split(l)) {
      kv_.replace_layer(l, join_kv_shards(l));
      model_->join_layer(l);
    }
    const auto shards = tensor_parallel_shards(spec[size_t(l)]);
    if (shards.empty()) {
      kv_.replace_layer(l, ops::to_device(kv_.layer_storage(l), target[size_t(l)]));
    } else {
      std::vector<std::pair<Device, double>> devices;
      for (auto& [name, share] : shards) devices.emplace_back(device_of(name), share);
      split_kv(l, model_->split_layer(l, devices));
    }
    layer_place_[size_t(l)] = spec[size_t(l)];
  }
  if (!(model_->head_device() == head)) model_->move_head(move_to(head));
  layers_placed_ = true;

  // What sits where now, for status (read on other threads: computed here, between steps).
  std::map<std::string, ModelHandle::Footprint::OnDevice> by;
  by["cpu"].device = "cpu";
  std::vector<const Tensor*> weights_now = model_->shard_tensors();
  for (auto& [name, t] : model_->named_tensors()) weights_now.push_back(t);
  for (const Tensor* t : weights_now) {
    auto& m = by[t->device.name()];
    m.device = t->device.name();
    m.weight_bytes += t->bytes();
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::vector<const Tensor*> pages;
    for (const Tensor& t : kv_.shards(l)) pages.push_back(&t);
    if (pages.empty()) pages.push_back(&kv_.layer_storage(l));
    for (const Tensor* t : pages) {
      auto& m = by[t->device.name()];
      m.device = t->device.name();
      m.kv_bytes += t->bytes();
    }
  }
  std::vector<ModelHandle::Footprint::OnDevice> memory{by["cpu"]};
  for (auto& [name, m] : by)
    if (name != "cpu") memory.push_back(m);
  std::lock_guard lock(mu_);
  memory_ = std::move(memory);
}

void ModelInstance::split_kv(int64_t l, const std::vector<model::DecoderModel::ShardSpan>& spans) {
  // [kinds, blocks, slots, row] seen as rows of `row` floats; shard s takes its heads' columns.
  const Tensor whole = ops::to_device(kv_.layer_storage(l), Device::cpu());
  const std::vector<int64_t> shape = kv_.layer_shape();
  const int64_t d = config().head_dim, rows = shape[0] * shape[1] * shape[2];
  Tensor flat = whole;
  flat.shape = {rows, shape[3]};
  std::vector<Tensor> shards;
  for (const auto& span : spans) {
    Tensor part = slice_columns(flat, span.kv_head0 * d, (span.kv_head0 + span.kv_heads) * d);
    part.shape = {shape[0], shape[1], shape[2], span.kv_heads * d};
    shards.push_back(ops::to_device(part, span.device));
  }
  kv_.set_shards(l, std::move(shards));
  kv_.replace_layer(l, Tensor::zeros_f32({0, 0, 0, shape[3]}));  // the whole pages are in the shards now
}

Tensor ModelInstance::join_kv_shards(int64_t l) {
  const std::vector<int64_t> shape = kv_.layer_shape();
  Tensor whole = kvcache::KvPool::host_storage(shape);
  const int64_t rows = shape[0] * shape[1] * shape[2];
  int64_t col = 0;
  for (const Tensor& s : kv_.shards(l)) {
    const Tensor part = ops::to_device(s, Device::cpu());
    const int64_t w = part.dim(3);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(whole.as<float>() + r * shape[3] + col, part.as<float>() + r * w, size_t(w) * 4);
    col += w;
  }
  kv_.set_shards(l, {});
  return whole;
}

void ModelInstance::apply_placement(std::vector<LayerRange> placement, int threads) {
  if (threads <= 0) threads = pool_->size();
  // NUMA mode: one pool whose threads are grouped by node, over weights whose rows are split the same way.
  // --moe_device numa alone: only the experts' rows are split, but the pool is grouped the same way.
  const bool numa_mode = placement.size() == 1 && placement[0].device == "numa";
  if (numa_mode || experts_on_nodes_) place_weights_on_nodes(!numa_mode);
  move_to_devices(placement);
  const bool grouped = numa_mode || experts_on_nodes_;
  if (threads != pool_->size() || grouped != (pool_->groups() > 1))
    pool_ = grouped ? std::make_unique<cpu::ThreadPool>(threads, split_nodes_) : std::make_unique<cpu::ThreadPool>(threads);
  device_contexts_.clear();
  device_pools_.clear();
  layer_ctx_.clear();
  bool all_cpu = true;
  for (const LayerRange& r : placement) all_cpu = all_cpu && (r.device == "cpu" || r.device == "numa");
  if (!all_cpu) {
    static ops::Context* none = nullptr;
    layer_ctx_.assign(size_t(config().num_layers), none);
    main_ctx_ = std::make_unique<ops::Context>(ops::Context{*pool_, kernels()});
    for (const LayerRange& r : placement) {
      ops::Context* ctx = main_ctx_.get();
      if (r.device != "cpu") {
        const bool gpu = cuda_index(r.device) >= 0 || r.device.starts_with("multi:");
        // A GPU's layers keep the model's pool for what runs on the host beside them (experts).
        if (!gpu && !device_pools_.count(r.device))
          device_pools_[r.device] = std::make_unique<cpu::ThreadPool>(threads, std::stoi(r.device.substr(5)));
        if (!device_contexts_.count(r.device))
          device_contexts_[r.device] = std::make_unique<ops::Context>(
              ops::Context{gpu ? *pool_ : *device_pools_[r.device], kernels(), device_of(r.device)});
        ctx = device_contexts_[r.device].get();
      }
      for (int64_t l = r.first; l < r.first + r.count; ++l) layer_ctx_[size_t(l)] = ctx;
    }
  }
  std::lock_guard lock(mu_);
  placement_ = std::move(placement);
}

void ModelInstance::place_weights_on_nodes(bool experts_only) {
  const int done = experts_only ? 1 : 2;
  if (nodes_placed_ >= done) return;  // once: the rows stay where they are for later placements
  split_nodes_ = cpu::numa_nodes_with_cpus();
  // Experts placed before (--moe_device numa) move again with the rest: a copy each, the old one freed.
  model_->move_matrices([&](Tensor& w) { cpu::place_rows_on_nodes(w, split_nodes_); }, experts_only);
  nodes_placed_ = done;
}

void ModelInstance::set_threads(int threads) {
  {
    std::lock_guard lock(mu_);
    pending_threads_ = threads;
  }
  wake_.notify_one();
}

void ModelInstance::fail_all_running(const std::string& message) {
  std::vector<uint64_t> sids;
  {
    std::lock_guard lock(mu_);
    for (auto& [sid, id] : public_of_) sids.push_back(sid);
  }
  for (uint64_t sid : sids) scheduler_.fail(sid, message);
}

void ModelInstance::fail_all(const std::string& message) {
  {
    std::lock_guard lock(mu_);
    fail_all_message_ = message;
  }
  wake_.notify_one();
}

ModelInstance::Load ModelInstance::load_now() const {
  std::lock_guard lock(mu_);
  Load l;
  l.running = running_;
  l.waiting = waiting_;
  l.kv_blocks_total = kv_.num_blocks();
  l.kv_blocks_used = kv_.num_blocks() - kv_.free_blocks();
  l.threads = current_threads_;
  const auto now = std::chrono::steady_clock::now();
  size_t tokens = 0;
  for (auto& [t, n] : recent_tokens_)
    if (now - t <= std::chrono::seconds(10)) tokens += n;
  l.tokens_per_second = double(tokens) / 10.0;
  return l;
}

void ModelInstance::worker_loop() {
  for (;;) {
    std::vector<Pending> arrivals;
    std::vector<uint64_t> cancels;
    std::string fail_message;
    int threads = 0;
    std::optional<std::vector<LayerRange>> placement;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        return stop_ || !incoming_.empty() || !cancels_.empty() || !fail_all_message_.empty() || pending_threads_ ||
               pending_placement_ || !scheduler_.idle();
      });
      threads = std::exchange(pending_threads_, 0);
      if (pending_placement_) placement = std::exchange(pending_placement_, std::nullopt);
      fail_message = std::exchange(fail_all_message_, {});
      if (stop_) {
        // Everything still queued or running ends as cancelled, so no caller waits forever.
        for (Pending& p : incoming_) scheduler_of_[p.id] = 0, callbacks_[p.id] = std::move(p.callback);
        incoming_.clear();
        for (auto& [id, cb] : callbacks_) cancels.push_back(id);
      }
      arrivals.assign(std::make_move_iterator(incoming_.begin()), std::make_move_iterator(incoming_.end()));
      incoming_.clear();
      cancels.insert(cancels.end(), cancels_.begin(), cancels_.end());
      cancels_.clear();
      for (Pending& p : arrivals) callbacks_[p.id] = std::move(p.callback);
    }
    for (Pending& p : arrivals) {
      uint64_t sid = scheduler_.add(std::move(p.request), config().eos_token_ids);
      std::lock_guard lock(mu_);
      public_of_[sid] = p.id;
      scheduler_of_[p.id] = sid;
    }
    if (!fail_message.empty()) fail_all_running(fail_message);
    for (uint64_t id : cancels) {
      std::unique_lock lock(mu_);
      auto it = scheduler_of_.find(id);
      if (it == scheduler_of_.end()) continue;
      uint64_t sid = it->second;
      lock.unlock();
      if (sid) scheduler_.cancel(sid);
      else {  // never reached the scheduler
        lock.lock();
        GenerationCallback cb = std::move(callbacks_[id]);
        callbacks_.erase(id);
        scheduler_of_.erase(id);
        lock.unlock();
        GenerationEvent e;
        e.finished = true;
        e.result.finish = FinishReason::Cancelled;
        if (cb) cb(e);
      }
    }
    {
      std::lock_guard compute(compute_mu_);
      try {
        if (placement) apply_placement(std::move(*placement), threads);
        else if (threads > 0 && threads != pool_->size()) apply_placement(this->placement(), threads);
      } catch (const std::exception& e) {
        // A move that ran out of device memory: put everything back where it was and keep serving.
        add_load_note(std::string("rebalance failed: ") + e.what());
        try {
          apply_placement(this->placement(), 0);
        } catch (const std::exception& again) {
          fail_all_running(std::string("the model could not be placed back after a failed rebalance: ") + again.what());
        }
      }
      if (!scheduler_.idle()) step();
      // Report finished sequences (cancelled ones included) and free their pages.
      for (scheduler::Finished& f : scheduler_.take_finished()) {
        caches_[f.seq_id].release(kv_);
        caches_.erase(f.seq_id);
        GenerationCallback cb;
        {
          std::lock_guard lock(mu_);
          uint64_t id = public_of_[f.seq_id];
          public_of_.erase(f.seq_id);
          scheduler_of_.erase(id);
          cb = std::move(callbacks_[id]);
          callbacks_.erase(id);
        }
        GenerationEvent e;
        e.finished = true;
        e.result = std::move(f.result);
        if (cb) cb(e);
      }
    }
    std::lock_guard lock(mu_);
    current_threads_ = pool_->size();
    running_ = scheduler_.running();
    waiting_ = scheduler_.waiting() + incoming_.size();
    if (stop_ && scheduler_.idle() && callbacks_.empty()) return;
  }
}

void ModelInstance::step() {
  const model::ModelConfig& c = config();
  scheduler::StepPlan plan = scheduler_.plan();
  model::Batch batch;
  std::vector<kvcache::SequenceKv*> seqs;
  std::vector<uint64_t> failed;
  for (const scheduler::StepItem& item : plan.items) {
    kvcache::SequenceKv& kv = caches_[item.seq_id];
    if (!kv.reserve(kv_, item.start_pos + int64_t(item.tokens.size()))) {
      failed.push_back(item.seq_id);
      continue;
    }
    const int32_t s = int32_t(seqs.size());
    seqs.push_back(&kv);
    for (size_t j = 0; j < item.tokens.size(); ++j) {
      batch.tokens.push_back(item.tokens[j]);
      batch.positions.push_back(item.start_pos + int64_t(j));
      batch.seq.push_back(s);
    }
    batch.logit_rows.push_back(int64_t(batch.tokens.size()) - 1);
  }
  for (uint64_t id : failed) scheduler_.fail(id, "the KV cache is full; retry when other requests finish");
  std::erase_if(plan.items, [&](const scheduler::StepItem& it) {
    return std::find(failed.begin(), failed.end(), it.seq_id) != failed.end();
  });
  if (batch.tokens.empty()) return;

  ops::Context ctx{*pool_, kernels()};
  std::vector<scheduler::Scheduler::Sampled> sampled;
  try {
    Tensor logits = model_->forward(ctx, batch, kv_, seqs, layer_contexts(), false);
    if (logits.device.is_cuda() && scheduler_.plain_greedy(plan)) {
      // Greedy decoding picks on the GPU: R token ids cross instead of R rows of the vocabulary.
      sampled = scheduler_.commit_tokens(plan, ops::argmax_rows(ctx, logits));
    } else {
      logits = ops::to_device(logits, Device::cpu());
      std::vector<float*> rows;
      for (size_t r = 0; r < plan.items.size(); ++r) rows.push_back(logits.as<float>() + int64_t(r) * c.vocab_size);
      sampled = scheduler_.commit(plan, rows, c.vocab_size);
    }
  } catch (const std::exception& e) {
    for (const auto& item : plan.items) scheduler_.fail(item.seq_id, std::string("generation failed: ") + e.what());
    return;
  }
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    recent_tokens_.emplace_back(now, sampled.size());
    while (!recent_tokens_.empty() && now - recent_tokens_.front().first > std::chrono::seconds(10)) recent_tokens_.pop_front();
  }
  // New tokens go out before any finish event of the same step.
  std::map<uint64_t, GenerationEvent> by_sequence;
  for (auto& s : sampled) {
    GenerationEvent& e = by_sequence[s.seq_id];
    e.tokens.push_back(s.token);
    if (s.logprob) e.logprobs.push_back(std::move(*s.logprob));
  }
  for (auto& [sid, event] : by_sequence) {
    GenerationCallback* cb = nullptr;
    {
      std::lock_guard lock(mu_);
      auto id = public_of_.find(sid);
      if (id != public_of_.end()) cb = &callbacks_[id->second];
    }
    if (cb && *cb) (*cb)(event);
  }
}

std::vector<GenerationResult> ModelInstance::generate(std::vector<GenerationRequest> requests) {
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::vector<GenerationResult> results(requests.size());
  size_t remaining = requests.size();
  for (size_t i = 0; i < requests.size(); ++i)
    submit(std::move(requests[i]), [&, i](const GenerationEvent& e) {
      if (!e.finished) return;
      std::lock_guard lock(done_mu);
      results[i] = e.result;
      if (--remaining == 0) done_cv.notify_all();
    });
  std::unique_lock lock(done_mu);
  done_cv.wait(lock, [&] { return remaining == 0; });
  return results;
}

std::vector<std::vector<float>> ModelInstance::prompt_logits(const std::vector<int32_t>& tokens,
                                                             const std::vector<int64_t>& positions_wanted) {
  std::lock_guard lock(compute_mu_);
  const model::ModelConfig& c = config();
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab_size) throw EngineError("token id " + std::to_string(t) + " is outside the vocabulary");
  kvcache::SequenceKv kv;
  if (!kv.reserve(kv_, int64_t(tokens.size()))) throw EngineError("the prompt does not fit in the KV cache");
  model::Batch batch;
  batch.tokens = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.positions.push_back(int64_t(i));
    batch.seq.push_back(0);
  }
  batch.logit_rows = positions_wanted;
  ops::Context ctx{*pool_, kernels()};
  Tensor logits = model_->forward(ctx, batch, kv_, {&kv}, layer_contexts());
  kv.release(kv_);
  std::vector<std::vector<float>> out;
  for (size_t r = 0; r < positions_wanted.size(); ++r) {
    const float* row = logits.as<float>() + int64_t(r) * c.vocab_size;
    out.emplace_back(row, row + c.vocab_size);
  }
  return out;
}

std::vector<float> ModelInstance::decode_logits(const std::vector<int32_t>& tokens, size_t prefill) {
  std::lock_guard lock(compute_mu_);
  const model::ModelConfig& c = config();
  kvcache::SequenceKv kv;
  if (tokens.empty() || prefill == 0 || prefill > tokens.size() || !kv.reserve(kv_, int64_t(tokens.size())))
    throw EngineError("decode_logits: need 1 <= prefill <= tokens, and room in the KV cache");
  ops::Context ctx{*pool_, kernels()};
  Tensor logits;
  size_t done = 0;
  while (done < tokens.size()) {
    size_t n = done == 0 ? prefill : 1;
    model::Batch batch;
    for (size_t i = done; i < done + n; ++i) {
      batch.tokens.push_back(tokens[i]);
      batch.positions.push_back(int64_t(i));
      batch.seq.push_back(0);
    }
    batch.logit_rows = {int64_t(n) - 1};
    logits = model_->forward(ctx, batch, kv_, {&kv}, layer_contexts());
    done += n;
  }
  kv.release(kv_);
  return std::vector<float>(logits.as<float>(), logits.as<float>() + c.vocab_size);
}

}  // namespace ftllm
