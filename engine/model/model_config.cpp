#include "model_config.h"

#include <simdjson.h>

#include <algorithm>

#include "../core/error.h"
#include "../core/json_writer.h"
#include "architecture.h"
#include "config_reader.h"

namespace ftllm::model {

namespace {

using simdjson::dom::element;
using simdjson::dom::object;

// "eos_token_id": 2 or [2, 32000].
void add_token_ids(element e, std::vector<int32_t>& out) {
  int64_t id;
  if (!e.get(id)) {
    out.push_back(int32_t(id));
    return;
  }
  simdjson::dom::array list;
  if (!e.get(list))
    for (auto item : list)
      if (!item.get(id)) out.push_back(int32_t(id));
}

}  // namespace

RopeConfig read_rope(const ConfigReader& r, const std::optional<ConfigReader>& scaling) {
  RopeConfig rope;
  rope.theta = r.number_or("rope_theta", 10000.0);
  rope.partial_rotary_factor = r.number_or("partial_rotary_factor", 1.0);
  if (!scaling) return rope;
  const ConfigReader& s = *scaling;
  if (s.has("rope_theta")) rope.theta = s.number_or("rope_theta", rope.theta);
  rope.partial_rotary_factor = s.number_or("partial_rotary_factor", rope.partial_rotary_factor);
  const std::string type = s.string_or("rope_type", s.string_or("type", "default"));
  if (type == "default") return rope;
  if (type == "linear") {
    rope.type = RopeType::Linear;
  } else if (type == "llama3") {
    rope.type = RopeType::Llama3;
    rope.low_freq_factor = s.number_or("low_freq_factor", 1.0);
    rope.high_freq_factor = s.number_or("high_freq_factor", 4.0);
    rope.original_max_position_embeddings = s.int_or("original_max_position_embeddings", 8192);
  } else if (type == "yarn") {
    rope.type = RopeType::Yarn;
    rope.original_max_position_embeddings = s.int_or("original_max_position_embeddings", r.int_or("max_position_embeddings", 2048));
    rope.beta_fast = s.number_or("beta_fast", 32.0);
    rope.beta_slow = s.number_or("beta_slow", 1.0);
    rope.mscale = s.number_or("mscale", 0.0);
    rope.mscale_all_dim = s.number_or("mscale_all_dim", 0.0);
    rope.attention_factor = s.number_or("attention_factor", 0.0);
    rope.truncate = s.bool_or("truncate", true);
    // Without a factor, the ratio of the context to the pretrained one (as transformers does for DeepSeek).
    if (!s.has("factor"))
      rope.factor = double(r.int_or("max_position_embeddings", 2048)) / double(rope.original_max_position_embeddings);
  } else if (type == "longrope" || type == "su") {
    rope.type = RopeType::LongRope;
    rope.original_max_position_embeddings =
        s.int_or("original_max_position_embeddings", r.int_or("original_max_position_embeddings", r.int_or("max_position_embeddings", 2048)));
    for (auto [key, factors] : {std::pair{"short_factor", &rope.short_factor}, {"long_factor", &rope.long_factor}}) {
      for (double f : s.number_list(key)) factors->push_back(f);
      if (factors->empty()) throw r.error("rope_scaling", std::string("longrope needs ") + key);
    }
    rope.attention_factor = s.number_or("attention_factor", 0.0);
    // Without a factor, the ratio of the context to the pretrained one (as transformers does for Phi-3).
    if (!s.has("factor"))
      rope.factor = double(r.int_or("max_position_embeddings", 2048)) / double(rope.original_max_position_embeddings);
  } else {
    throw r.error("rope_scaling", "has type \"" + type + "\", which is not supported (default, linear, llama3, yarn, longrope)");
  }
  if ((rope.type != RopeType::Yarn && rope.type != RopeType::LongRope) || s.has("factor")) rope.factor = s.number_or("factor", 1.0);
  if (rope.factor <= 0) throw r.error("rope_scaling", "needs a positive factor");
  return rope;
}

bool ConfigReader::has(const char* key) const {
  element e;
  return !obj_[key].get(e) && !e.is_null();
}

bool ConfigReader::present(const char* key) const {
  element e;
  return !obj_[key].get(e);
}

int64_t ConfigReader::required_int(const char* key) const {
  if (!has(key)) throw error(key, "is missing; it is required to build the model");
  return int_or(key, 0);
}

int64_t ConfigReader::int_or(const char* key, int64_t fallback) const {
  if (!has(key)) return fallback;
  int64_t v;
  if (obj_[key].get(v) || v < 0) throw error(key, "must be a non-negative integer");
  return v;
}

double ConfigReader::number_or(const char* key, double fallback) const {
  if (!has(key)) return fallback;
  double v;
  if (obj_[key].get(v)) throw error(key, "must be a number");
  return v;
}

bool ConfigReader::bool_or(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  bool v;
  if (obj_[key].get(v)) throw error(key, "must be true or false");
  return v;
}

std::string ConfigReader::string_or(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  std::string_view v;
  if (obj_[key].get(v)) throw error(key, "must be a string");
  return std::string(v);
}

std::vector<int64_t> ConfigReader::int_list(const char* key) const {
  std::vector<int64_t> out;
  if (!has(key)) return out;
  simdjson::dom::array list;
  if (obj_[key].get(list)) throw error(key, "must be a list of integers");
  for (element item : list) {
    int64_t v;
    if (item.get(v)) throw error(key, "must be a list of integers");
    out.push_back(v);
  }
  return out;
}

std::vector<double> ConfigReader::number_list(const char* key) const {
  std::vector<double> out;
  if (!has(key)) return out;
  simdjson::dom::array list;
  if (obj_[key].get(list)) throw error(key, "must be a list of numbers");
  for (element item : list) {
    double v;
    if (item.get(v)) throw error(key, "must be a list of numbers");
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> ConfigReader::string_list(const char* key) const {
  std::vector<std::string> out;
  if (!has(key)) return out;
  simdjson::dom::array list;
  if (obj_[key].get(list)) throw error(key, "must be a list of strings");
  for (element item : list) {
    std::string_view v;
    if (item.get(v)) throw error(key, "must be a list of strings");
    out.emplace_back(v);
  }
  return out;
}

std::optional<ConfigReader> ConfigReader::object(const char* key) const {
  simdjson::dom::object o;
  if (obj_[key].get(o)) return std::nullopt;
  return ConfigReader(o, *source_);
}

bool read_layer_types(const ConfigReader& r, ModelConfig& c) {
  if (!r.has("layer_types")) return false;
  c.sliding_layers.clear();
  for (const std::string& type : r.string_list("layer_types")) {
    if (type != "sliding_attention" && type != "full_attention")
      throw r.error("layer_types", "holds \"" + type + "\"; layers are sliding_attention or full_attention here");
    c.sliding_layers.push_back(type == "sliding_attention");
  }
  if (int64_t(c.sliding_layers.size()) != c.num_layers) throw r.error("layer_types", "must name one type per layer");
  return true;
}

void read_experts(const ConfigReader& r, ModelConfig& c, const std::string& arch) {
  const char* key = r.has("num_experts") ? "num_experts" : r.has("n_routed_experts") ? "n_routed_experts" : "num_local_experts";
  MoeConfig& m = c.moe;
  m.num_experts = r.int_or(key, 0);
  if (m.num_experts == 0) throw r.error(key, "is missing; " + arch + " routes tokens to that many experts");
  m.experts_per_token = r.required_int("num_experts_per_tok");
  if (m.experts_per_token == 0 || m.experts_per_token > m.num_experts)
    throw r.error("num_experts_per_tok", "must be between 1 and " + std::string(key) + " (" + std::to_string(m.num_experts) + ")");
  m.expert_intermediate = r.required_int("moe_intermediate_size");
  m.shared_intermediate = r.int_or("shared_expert_intermediate_size", 0);
  if (r.has("n_shared_experts")) m.shared_intermediate = m.expert_intermediate * r.int_or("n_shared_experts", 0);
  m.norm_topk_prob = r.bool_or("norm_topk_prob", false);
  m.sparse_step = r.int_or("decoder_sparse_step", 1);
  if (m.sparse_step == 0) throw r.error("decoder_sparse_step", "must be at least 1");
  m.dense_layers = r.int_list("mlp_only_layers");
  if (c.activation != Activation::Silu) throw r.error("hidden_act", "must be silu: the experts are SwiGLU MLPs");
}

void read_expert_groups(const ConfigReader& r, ModelConfig& c, const std::string& default_scoring) {
  MoeConfig& m = c.moe;
  for (int64_t l = 0; l < r.int_or("first_k_dense_replace", 0); ++l) m.dense_layers.push_back(l);
  const std::string scoring = r.string_or("scoring_func", default_scoring);
  if (scoring != "softmax" && scoring != "sigmoid") throw r.error("scoring_func", "must be softmax or sigmoid");
  m.sigmoid_grouped = scoring == "sigmoid";
  const std::string method = r.string_or("topk_method", "noaux_tc");
  if (method != "greedy" && method != "group_limited_greedy" && method != "noaux_tc")
    throw r.error("topk_method", "must be greedy, group_limited_greedy or noaux_tc");
  const bool grouped = method != "greedy";
  m.n_group = grouped ? std::max<int64_t>(1, r.int_or("n_group", 1)) : 1;
  m.topk_group = grouped ? std::max<int64_t>(1, r.int_or("topk_group", m.n_group)) : 1;
  if (m.num_experts % m.n_group != 0 || m.topk_group > m.n_group)
    throw r.error("n_group", "must divide the experts, with topk_group at most n_group");
  m.routed_scaling_factor = r.number_or("routed_scaling_factor", 1.0);
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json_text);
  object obj;
  if (auto err = parser.parse(text).get(obj))
    throw EngineError(source + ": not a JSON object (" + simdjson::error_message(err) + ")");
  ConfigReader r(obj, source);

  ModelConfig c;
  simdjson::dom::array archs;
  std::string_view arch;
  if (obj["architectures"].get(archs) || archs.size() == 0 || archs.at(0).get(arch))
    throw r.error("architectures", "is missing; it names the model class, for example [\"LlamaForCausalLM\"]");
  c.architecture = arch;

  c.hidden_size = r.required_int("hidden_size");
  c.intermediate_size = r.required_int("intermediate_size");
  c.num_layers = r.required_int("num_hidden_layers");
  c.num_heads = r.required_int("num_attention_heads");
  c.vocab_size = r.required_int("vocab_size");
  c.num_kv_heads = r.int_or("num_key_value_heads", c.num_heads);
  if (c.num_heads == 0 || c.num_kv_heads == 0 || c.num_heads % c.num_kv_heads != 0)
    throw r.error("num_key_value_heads", "must divide num_attention_heads");
  c.head_dim = r.int_or("head_dim", c.hidden_size / c.num_heads);
  if (c.head_dim == 0 || c.head_dim % 2 != 0) throw r.error("head_dim", "must be a positive even number");
  c.max_position_embeddings = r.int_or("max_position_embeddings", 2048);
  c.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = r.bool_or("tie_word_embeddings", false);
  c.attention_bias = r.bool_or("attention_bias", false);
  c.mlp_bias = r.bool_or("mlp_bias", false);
  const std::string act = r.string_or("hidden_activation", r.string_or("hidden_act", "silu"));
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") c.activation = Activation::GeluTanh;
  else if (act != "silu" && act != "swish")
    throw r.error(r.has("hidden_activation") ? "hidden_activation" : "hidden_act",
                  "is \"" + act + "\"; supported are silu and gelu_pytorch_tanh");

  // Transformers 5 writes rope_parameters (with rope_theta inside); older files rope_theta + rope_scaling.
  std::optional<ConfigReader> scaling = r.object("rope_parameters");
  if (!scaling) scaling = r.object("rope_scaling");
  c.rope = read_rope(r, scaling);
  find_architecture(c.architecture).read_config(r, c);

  element e;
  if (!obj["bos_token_id"].get(e) && !e.is_null()) {
    std::vector<int32_t> bos;
    add_token_ids(e, bos);
    if (!bos.empty()) c.bos_token_id = bos[0];
  }
  if (!obj["eos_token_id"].get(e)) add_token_ids(e, c.eos_token_ids);
  return c;
}

std::string describe_layers(const ModelConfig& c) {
  std::string kinds;
  auto add = [&](const std::string& kind) { kinds += (kinds.empty() ? ": " : ", ") + kind; };
  if (c.mla.kv_lora_rank) add("latent attention");
  if (const int64_t linear = c.linear.count()) add(std::to_string(linear) + " linear attention, " + std::to_string(c.num_layers - linear) + " full");
  if (!c.sliding_layers.empty()) {
    const int64_t sliding = std::count(c.sliding_layers.begin(), c.sliding_layers.end(), true);
    add(std::to_string(sliding) + " sliding/" + std::to_string(c.sliding_window.value_or(0)));
    add(std::to_string(c.num_layers - sliding) + " global");
  } else if (c.sliding_window) {
    add("all sliding/" + std::to_string(*c.sliding_window));
  }
  if (c.moe.num_experts) {
    int64_t moe = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) moe += c.moe.is_moe_layer(l);
    if (moe < c.num_layers) add(std::to_string(c.num_layers - moe) + " dense");
    add(std::to_string(moe) + " MoE " + std::to_string(c.moe.experts_per_token) + " of " + std::to_string(c.moe.num_experts));
  }
  return std::to_string(c.num_layers) + " layers" + kinds;
}

void merge_generation_config(ModelConfig& config, const std::string& json_text, const std::string& source) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json_text);
  object obj;
  if (auto err = parser.parse(text).get(obj))
    throw EngineError(source + ": not a JSON object (" + simdjson::error_message(err) + ")");
  element e;
  std::vector<int32_t> ids;
  if (!obj["eos_token_id"].get(e)) add_token_ids(e, ids);
  for (int32_t id : ids)
    if (std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), id) == config.eos_token_ids.end())
      config.eos_token_ids.push_back(id);
}

std::string model_config_json(const ModelConfig& c) {
  std::string j = "{\n  \"architectures\": [" + json_quote(c.architecture) + "],\n";
  auto field = [&](const char* k, const std::string& v) { j += "  " + json_quote(k) + ": " + v + ",\n"; };
  field("hidden_size", std::to_string(c.hidden_size));
  field("intermediate_size", std::to_string(c.intermediate_size));
  field("num_hidden_layers", std::to_string(c.num_layers));
  field("num_attention_heads", std::to_string(c.num_heads));
  field("num_key_value_heads", std::to_string(c.num_kv_heads));
  field("head_dim", std::to_string(c.head_dim));
  field("vocab_size", std::to_string(c.vocab_size));
  field("max_position_embeddings", std::to_string(c.max_position_embeddings));
  field("rms_norm_eps", json_number(c.rms_norm_eps));
  field("rope_theta", json_number(c.rope.theta));
  if (c.rope.type == RopeType::Linear)
    field("rope_scaling", "{\"rope_type\": \"linear\", \"factor\": " + json_number(c.rope.factor) + "}");
  if (c.rope.type == RopeType::Yarn)
    field("rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": " + json_number(c.rope.factor) +
                              ", \"original_max_position_embeddings\": " + std::to_string(c.rope.original_max_position_embeddings) +
                              ", \"beta_fast\": " + json_number(c.rope.beta_fast) + ", \"beta_slow\": " + json_number(c.rope.beta_slow) +
                              ", \"mscale\": " + json_number(c.rope.mscale) + ", \"mscale_all_dim\": " +
                              json_number(c.rope.mscale_all_dim) + ", \"attention_factor\": " + json_number(c.rope.attention_factor) +
                              ", \"truncate\": " + (c.rope.truncate ? "true" : "false") + "}");
  if (c.rope.type == RopeType::LongRope) {
    auto list = [](const std::vector<double>& v) {
      std::string s;
      for (double x : v) s += (s.empty() ? "" : ", ") + json_number(x);
      return "[" + s + "]";
    };
    field("rope_scaling", "{\"rope_type\": \"longrope\", \"factor\": " + json_number(c.rope.factor) +
                              ", \"original_max_position_embeddings\": " + std::to_string(c.rope.original_max_position_embeddings) +
                              ", \"attention_factor\": " + json_number(c.rope.attention_factor) +
                              ", \"short_factor\": " + list(c.rope.short_factor) + ", \"long_factor\": " + list(c.rope.long_factor) + "}");
  }
  if (c.rope.partial_rotary_factor != 1.0) field("partial_rotary_factor", json_number(c.rope.partial_rotary_factor));
  if (c.rope.type == RopeType::Llama3)
    field("rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": " + json_number(c.rope.factor) +
                              ", \"low_freq_factor\": " + json_number(c.rope.low_freq_factor) +
                              ", \"high_freq_factor\": " + json_number(c.rope.high_freq_factor) +
                              ", \"original_max_position_embeddings\": " +
                              std::to_string(c.rope.original_max_position_embeddings) + "}");
  field("attention_bias", c.attention_bias ? "true" : "false");
  field("mlp_bias", c.mlp_bias ? "true" : "false");
  field("hidden_act", c.activation == Activation::GeluTanh ? "\"gelu_pytorch_tanh\"" : "\"silu\"");
  if (c.sliding_window) field("sliding_window", std::to_string(*c.sliding_window));
  if (!c.sliding_layers.empty()) {
    std::string types;
    for (bool sliding : c.sliding_layers) types += std::string(types.empty() ? "" : ", ") + (sliding ? "\"sliding_attention\"" : "\"full_attention\"");
    field("layer_types", "[" + types + "]");
  }
  if (c.moe.num_experts) {
    const MoeConfig& m = c.moe;
    std::string dense;
    for (int64_t l : m.dense_layers) dense += (dense.empty() ? "" : ", ") + std::to_string(l);
    field("num_experts", std::to_string(m.num_experts));
    field("num_experts_per_tok", std::to_string(m.experts_per_token));
    field("moe_intermediate_size", std::to_string(m.expert_intermediate));
    if (m.shared_intermediate) field("shared_expert_intermediate_size", std::to_string(m.shared_intermediate));
    field("norm_topk_prob", m.norm_topk_prob ? "true" : "false");
    field("decoder_sparse_step", std::to_string(m.sparse_step));
    field("mlp_only_layers", "[" + dense + "]");
    field("scoring_func", m.sigmoid_grouped ? "\"sigmoid\"" : "\"softmax\"");
    field("topk_method", m.n_group > 1 ? (m.sigmoid_grouped ? "\"noaux_tc\"" : "\"group_limited_greedy\"") : "\"greedy\"");
    field("n_group", std::to_string(m.n_group));
    field("topk_group", std::to_string(m.topk_group));
    field("routed_scaling_factor", json_number(m.routed_scaling_factor));
  }
  find_architecture(c.architecture).write_config(c, field);
  if (c.bos_token_id) field("bos_token_id", std::to_string(*c.bos_token_id));
  std::string eos;
  for (int32_t id : c.eos_token_ids) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  field("eos_token_id", "[" + eos + "]");
  return j + "  \"tie_word_embeddings\": " + (c.tie_word_embeddings ? "true" : "false") + "\n}\n";
}

}  // namespace ftllm::model
