#include "lora.h"

#include <simdjson.h>

#include <atomic>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "../core/error.h"
#include "../core/mapped_file.h"
#include "decoder.h"
#include "safetensors.h"
#include "weights.h"

namespace ftllm::model {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTargetNames[kLoraTargets] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

std::optional<LoraTarget> target_of(const std::string& module) {
  for (int t = 0; t < kLoraTargets; ++t)
    if (module == kTargetNames[t]) return LoraTarget(t);
  return std::nullopt;
}

// The base's weight a target adapts in layer L, or null when the layer has none of its own (a mixture of
// experts' MLP, attention an architecture computes its own way).
const Tensor* base_weight(const DecoderModel& base, int64_t layer, LoraTarget t) {
  const LayerWeights& L = base.layer(layer);
  const bool attention = t <= LoraTarget::O;
  if (attention && !base.architecture().standard_attention(base.config(), layer)) return nullptr;
  if (!attention && !L.experts.empty()) return nullptr;
  const Tensor* w[kLoraTargets] = {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down};
  return w[int(t)]->empty() ? nullptr : w[int(t)];
}

// adapter_config.json's settings that matter here.
struct AdapterConfig {
  int64_t r = 8;
  double alpha = 8;
  bool rslora = false;
  std::vector<std::pair<std::string, int64_t>> rank_pattern;
  std::vector<std::pair<std::string, double>> alpha_pattern;

  // PEFT's pattern lookup: a key matches a module whose full name ends with it after a dot (or is it).
  template <class V>
  static const V* match(const std::vector<std::pair<std::string, V>>& pattern, const std::string& module) {
    for (auto& [key, value] : pattern)
      if (std::regex_match(module, std::regex("(.*\\.)?(" + key + ")"))) return &value;
    return nullptr;
  }
  int64_t rank_of(const std::string& module) const {
    const int64_t* p = match(rank_pattern, module);
    return p ? *p : r;
  }
  float scale_of(const std::string& module) const {
    const int64_t rank = rank_of(module);
    const double* a = match(alpha_pattern, module);
    const double alpha_m = a ? *a : alpha;
    return float(rslora ? alpha_m / std::sqrt(double(rank)) : alpha_m / double(rank));
  }
};

AdapterConfig read_adapter_config(const fs::path& file) {
  if (!fs::exists(file)) throw EngineError(file.string() + " is missing: an adapter directory is what PEFT's save_pretrained writes");
  simdjson::dom::parser parser;
  simdjson::padded_string text(read_text_file(file));
  simdjson::dom::object o;
  if (parser.parse(text).get(o)) throw EngineError(file.string() + " is not a JSON object");
  AdapterConfig c;
  std::string_view type;
  if (!o["peft_type"].get(type) && type != "LORA")
    throw EngineError("peft_type is " + std::string(type) + "; only LoRA adapters (peft_type LORA) can be loaded");
  // Options that change the forward pass in ways this engine does not compute; set, they refuse the adapter.
  auto truthy = [&](const char* key) {
    simdjson::dom::element e;
    if (o[key].get(e)) return false;
    bool b;
    if (!e.get(b)) return b;
    simdjson::dom::array a;
    if (!e.get(a)) return a.size() > 0;
    simdjson::dom::object obj;
    if (!e.get(obj)) return obj.size() > 0;
    return !e.is_null();
  };
  if (truthy("use_dora"))
    throw EngineError("use_dora is set: DoRA adapters are not supported; merge it into the base (peft's merge_and_unload) and load that model");
  for (const char* key : {"fan_in_fan_out", "lora_bias", "modules_to_save", "layer_replication", "alora_invocation_tokens",
                          "use_qalora", "target_parameters", "trainable_token_indices", "use_bdlora", "arrow_config"})
    if (truthy(key)) throw EngineError(std::string(key) + " is set: adapters with that option are not supported");
  if (std::string_view bias; !o["bias"].get(bias) && bias != "none")
    throw EngineError("bias is \"" + std::string(bias) + "\": adapters that train biases are not supported (bias \"none\" only)");
  auto number = [&](const char* key, double& out) {
    simdjson::dom::element e;
    if (o[key].get(e)) return;
    if (int64_t i; !e.get(i)) out = double(i);
    else if (double d; !e.get(d)) out = d;
    else throw EngineError(std::string(key) + " is not a number");
  };
  double r = double(c.r);
  number("r", r);
  if (r < 1 || r != std::floor(r)) throw EngineError("r is " + std::to_string(r) + "; a rank is a positive whole number");
  c.r = int64_t(r);
  c.alpha = double(c.r);
  number("lora_alpha", c.alpha);
  if (bool b; !o["use_rslora"].get(b)) c.rslora = b;
  if (simdjson::dom::object p; !o["rank_pattern"].get(p))
    for (auto [key, value] : p) {
      int64_t v;
      if (value.get(v) || v < 1) throw EngineError("rank_pattern." + std::string(key) + " is not a positive whole number");
      c.rank_pattern.emplace_back(std::string(key), v);
    }
  if (simdjson::dom::object p; !o["alpha_pattern"].get(p))
    for (auto [key, value] : p) {
      double v;
      if (int64_t i; !value.get(i)) v = double(i);
      else if (value.get(v)) throw EngineError("alpha_pattern." + std::string(key) + " is not a number");
      c.alpha_pattern.emplace_back(std::string(key), v);
    }
  return c;
}

// "model.layers.3.self_attn.q_proj" from PEFT's "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"
// (with or without an adapter name before ".weight"); which of A and B in *is_a.
struct TensorName {
  std::string module;  // "model.layers.3.self_attn.q_proj"
  int64_t layer = -1;
  std::string leaf;  // "q_proj"
  bool is_a = false;
};

TensorName parse_name(const std::string& full) {
  static const std::regex layer_re(R"(^(?:base_model\.model\.)?(model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+))\.lora_(A|B)(?:\.\w+)?\.weight$)");
  std::smatch m;
  if (full.find("lora_embedding") != std::string::npos || full.find("embed_tokens") != std::string::npos)
    throw EngineError("tensor " + full + " adapts the embedding: only q/k/v/o_proj and gate/up/down_proj can be adapted");
  if (full.find("lora_magnitude_vector") != std::string::npos)
    throw EngineError("tensor " + full + " is a DoRA magnitude: DoRA adapters are not supported");
  if (!std::regex_match(full, m, layer_re))
    throw EngineError("tensor " + full + " is not a LoRA matrix of a decoder layer's linear module; only q/k/v/o_proj and "
                      "gate/up/down_proj can be adapted");
  return {m[1], std::stoll(m[2]), m[3], m[4] == "A"};
}

// A stored matrix in the dtype it is kept in: 16-bit floats as they are, anything else as float32.
Tensor kept(const WeightStore& store, const std::string& name, const std::vector<int64_t>& shape) {
  const StoredTensor& s = store.tensors().at(name);
  if (s.dtype == DType::BF16 || s.dtype == DType::F16) return Tensor::copy_of(*s.dtype, shape, s.data);
  return store.floats(name, shape);
}

Tensor transposed(const Tensor& b) {  // [out, r] -> [r, out], elements moved as they are
  const int64_t out = b.dim(0), r = b.dim(1);
  const size_t size = b.dtype == DType::F32 ? 4 : 2;
  Tensor t = Tensor::zeros(b.dtype, {r, out});
  const auto* from = static_cast<const char*>(b.data);
  auto* to = static_cast<char*>(t.data);
  for (int64_t i = 0; i < out; ++i)
    for (int64_t j = 0; j < r; ++j) std::memcpy(to + size_t(j * out + i) * size, from + size_t(i * r + j) * size, size);
  return t;
}

}  // namespace

std::shared_ptr<const LoraAdapter> LoraAdapter::load(const std::string& dir, const std::string& name, const DecoderModel& base) {
  static std::atomic<uint64_t> loads{0};
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw EngineError(dir + " is not a directory (an adapter is a directory PEFT's save_pretrained writes)");
  const AdapterConfig config = read_adapter_config(root / "adapter_config.json");
  const fs::path weights = root / "adapter_model.safetensors";
  if (!fs::exists(weights))
    throw EngineError(weights.string() + " is missing (adapter_model.bin is not read: save the adapter with safe_serialization)");
  WeightStore store;
  for (auto& [n, t] : read_safetensors(weights.string())) store.add(std::move(t));

  auto adapter = std::make_shared<LoraAdapter>();
  adapter->name_ = name;
  adapter->path_ = dir;
  // Mixed into the hash chain's root: never 0, the base model's.
  adapter->cache_key_ = 0x6c6f7261'00000000ULL + (++loads);
  const int64_t layers = base.config().num_layers;
  adapter->host_.resize(size_t(layers));
  std::set<std::string> targets;
  struct Module {
    TensorName n;
    std::string a, b;  // its lora_A and lora_B tensors' names
  };
  std::map<std::string, Module> modules;  // by module name
  for (const auto& [full, t] : store.tensors()) {
    const TensorName n = parse_name(full);
    Module& m = modules[n.module];
    m.n = n;
    (n.is_a ? m.a : m.b) = full;
  }
  if (modules.empty()) throw EngineError(weights.string() + " holds no LoRA matrices");
  for (const auto& [module, m] : modules) {
    const TensorName& n = m.n;
    if (m.a.empty() || m.b.empty())
      throw EngineError(module + " has lora_" + std::string(m.a.empty() ? "B" : "A") + " without lora_" + (m.a.empty() ? "A" : "B") +
                        "; the adapter file is incomplete");
    const std::optional<LoraTarget> target = target_of(n.leaf);
    if (!target) throw EngineError(module + ": " + n.leaf + " is not a module ftllm adapts (q/k/v/o_proj, gate/up/down_proj)");
    if (n.layer >= layers)
      throw EngineError(module + ": the base model has " + std::to_string(layers) + " layers; this adapter was made for another model");
    if (base.is_split(n.layer))
      throw EngineError(module + ": layer " + std::to_string(n.layer) +
                        " is split over GPUs (tensor parallelism); adapters need whole layers (move the model without splitting first)");
    const Tensor* w = base_weight(base, n.layer, *target);
    if (!w)
      throw EngineError(module + ": the base model's layer " + std::to_string(n.layer) + " has no " + n.leaf +
                        " of its own (its " + (*target <= LoraTarget::O ? "attention" : "MLP") +
                        " is computed another way); this adapter was made for another model");
    const StoredTensor& sa = store.tensors().at(m.a);
    const StoredTensor& sb = store.tensors().at(m.b);
    const int64_t rank = config.rank_of(module), in = w->dim(1), out = w->dim(0);
    if (sa.shape.size() != 2 || sb.shape.size() != 2 || sa.shape[0] != sb.shape[1])
      throw EngineError(module + ": lora_A " + shape_string(sa.shape) + " and lora_B " + shape_string(sb.shape) +
                        " are not [r, in] and [out, r] of one rank");
    if (sa.shape[0] != rank)
      throw EngineError(module + ": its matrices have rank " + std::to_string(sa.shape[0]) + " but adapter_config.json says r = " +
                        std::to_string(rank));
    if (sa.shape[1] != in || sb.shape[0] != out)
      throw EngineError(module + ": lora_A " + shape_string(sa.shape) + " and lora_B " + shape_string(sb.shape) + " do not fit the base's " +
                        n.leaf + " of " + std::to_string(out) + " outputs and " + std::to_string(in) +
                        " inputs; this adapter was made for another model");
    LoraPair p;
    p.a = kept(store, m.a, sa.shape);
    p.bt = transposed(kept(store, m.b, sb.shape));
    p.scale = config.scale_of(module);
    adapter->bytes_ += uint64_t(p.a.bytes() + p.bt.bytes());
    adapter->rank_ = std::max(adapter->rank_, int(rank));
    adapter->host_[size_t(n.layer)][int(*target)] = std::move(p);
    targets.insert(n.leaf);
  }
  for (int t = 0; t < kLoraTargets; ++t)
    if (targets.count(kTargetNames[t])) adapter->targets_ += (adapter->targets_.empty() ? "" : ", ") + std::string(kTargetNames[t]);
  return adapter;
}

const LoraPair* LoraAdapter::pair(int64_t layer, LoraTarget target, Device device) const {
  const std::optional<LoraPair>& host = host_[size_t(layer)][int(target)];
  if (!host) return nullptr;
  if (!device.is_cuda()) return &*host;
  std::lock_guard lock(copies_mu_);
  auto it = std::find_if(copies_.begin(), copies_.end(), [&](const auto& c) { return c.first == device; });
  if (it == copies_.end()) {
    copies_.push_back({device, std::vector<LayerPairs>(host_.size())});
    it = copies_.end() - 1;
  }
  std::optional<LoraPair>& copy = it->second[size_t(layer)][int(target)];
  if (!copy) copy = LoraPair{ops::to_device(host->a, device), ops::to_device(host->bt, device), host->scale};
  return &*copy;
}

LoraRows LoraRows::of_batch(const std::vector<int32_t>& token_seq, const std::vector<const LoraAdapter*>& seq_adapter) {
  LoraRows out;
  for (size_t row = 0; row < token_seq.size(); ++row) {
    const size_t s = size_t(token_seq[row]);
    const LoraAdapter* a = s < seq_adapter.size() ? seq_adapter[s] : nullptr;
    if (!a) continue;
    auto g = std::find_if(out.groups.begin(), out.groups.end(), [&](const auto& e) { return e.first == a; });
    if (g == out.groups.end()) g = out.groups.insert(out.groups.end(), {a, {}});
    g->second.push_back(int64_t(row));
  }
  return out;
}

void LoraRows::apply(ops::Context& ctx, int64_t layer, const Tensor& x, std::initializer_list<Output> outputs) const {
  std::vector<ops::LoraSegment> segments;
  for (const Output& out : outputs)
    for (const auto& [adapter, rows] : groups)
      if (const LoraPair* p = adapter->pair(layer, out.target, x.device)) segments.push_back({&p->a, &p->bt, p->scale, rows, out.y});
  if (!segments.empty()) ops::lora(ctx, x, segments);
}

}  // namespace ftllm::model
