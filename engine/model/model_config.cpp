#include "model_config.h"

#include <simdjson.h>

#include <algorithm>

#include "../core/error.h"
#include "../core/json_writer.h"

namespace ftllm::model {

namespace {

using simdjson::dom::element;
using simdjson::dom::object;

struct Reader {
  object obj;
  const std::string& source;

  EngineError error(const std::string& field, const std::string& why) const {
    return EngineError(source + ": field \"" + field + "\" " + why);
  }
  bool has(const char* key) const {
    element e;
    return !obj[key].get(e) && !e.is_null();
  }
  int64_t required_int(const char* key) const {
    if (!has(key)) throw error(key, "is missing; it is required to build the model");
    return int_or(key, 0);
  }
  int64_t int_or(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    int64_t v;
    if (obj[key].get(v) || v < 0) throw error(key, "must be a non-negative integer");
    return v;
  }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    double v;
    if (obj[key].get(v)) throw error(key, "must be a number");
    return v;
  }
  bool bool_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    bool v;
    if (obj[key].get(v)) throw error(key, "must be true or false");
    return v;
  }
};

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

RopeConfig parse_rope(const Reader& r, const object* scaling_or_null) {
  RopeConfig rope;
  rope.theta = r.number_or("rope_theta", 10000.0);
  if (!scaling_or_null) return rope;
  object scaling = *scaling_or_null;
  Reader s{scaling, r.source};
  if (s.has("rope_theta")) rope.theta = s.number_or("rope_theta", rope.theta);
  std::string_view type;
  if (scaling["rope_type"].get(type) && scaling["type"].get(type)) type = "default";
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
  } else {
    throw r.error("rope_scaling", "has type \"" + std::string(type) + "\", which is not supported (default, linear, llama3, yarn)");
  }
  if (rope.type != RopeType::Yarn || s.has("factor")) rope.factor = s.number_or("factor", 1.0);
  if (rope.factor <= 0) throw r.error("rope_scaling", "needs a positive factor");
  return rope;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json_text);
  object obj;
  if (auto err = parser.parse(text).get(obj))
    throw EngineError(source + ": not a JSON object (" + simdjson::error_message(err) + ")");
  Reader r{obj, source};

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

  // Transformers 5 writes rope_parameters (with rope_theta inside); older files rope_theta + rope_scaling.
  object scaling;
  bool has_scaling = !obj["rope_parameters"].get(scaling) || !obj["rope_scaling"].get(scaling);
  c.rope = parse_rope(r, has_scaling ? &scaling : nullptr);

  // Mistral: sliding_window applies when set; Qwen2: only with use_sliding_window.
  if (r.has("sliding_window") && r.bool_or("use_sliding_window", true))
    c.sliding_window = r.int_or("sliding_window", 0);

  // Qwen's own configs say num_experts; transformers 5 writes num_local_experts (Mixtral's name);
  // DeepSeek n_routed_experts.
  const char* experts_key = r.has("num_experts") ? "num_experts" : r.has("n_routed_experts") ? "n_routed_experts" : "num_local_experts";
  if (r.int_or(experts_key, 0) > 0) {
    MoeConfig& m = c.moe;
    m.num_experts = r.int_or(experts_key, 0);
    m.experts_per_token = r.required_int("num_experts_per_tok");
    if (m.experts_per_token == 0 || m.experts_per_token > m.num_experts)
      throw r.error("num_experts_per_tok", "must be between 1 and num_experts (" + std::to_string(m.num_experts) + ")");
    m.expert_intermediate = r.required_int("moe_intermediate_size");
    m.shared_intermediate = r.int_or("shared_expert_intermediate_size", 0);
    if (r.has("n_shared_experts")) m.shared_intermediate = m.expert_intermediate * r.int_or("n_shared_experts", 0);
    m.norm_topk_prob = r.bool_or("norm_topk_prob", false);
    m.sparse_step = r.int_or("decoder_sparse_step", 1);
    if (m.sparse_step == 0) throw r.error("decoder_sparse_step", "must be at least 1");
    simdjson::dom::array dense;
    if (!obj["mlp_only_layers"].get(dense))
      for (element layer : dense) {
        int64_t v;
        if (layer.get(v)) throw r.error("mlp_only_layers", "must be a list of layer numbers");
        m.dense_layers.push_back(v);
      }
    // DeepSeek: the first first_k_dense_replace layers are dense; sigmoid routing over expert groups.
    for (int64_t l = 0; l < r.int_or("first_k_dense_replace", 0); ++l) m.dense_layers.push_back(l);
    std::string_view scoring = c.architecture == "DeepseekV3ForCausalLM" ? "sigmoid" : "softmax";
    if (r.has("scoring_func") && obj["scoring_func"].get(scoring)) throw r.error("scoring_func", "must be a string");
    if (scoring != "softmax" && scoring != "sigmoid") throw r.error("scoring_func", "must be softmax or sigmoid");
    m.sigmoid_grouped = scoring == "sigmoid";
    std::string_view method = "noaux_tc";
    if (r.has("topk_method") && obj["topk_method"].get(method)) throw r.error("topk_method", "must be a string");
    if (method != "greedy" && method != "group_limited_greedy" && method != "noaux_tc")
      throw r.error("topk_method", "must be greedy, group_limited_greedy or noaux_tc");
    const bool grouped = method != "greedy";
    m.n_group = grouped ? std::max<int64_t>(1, r.int_or("n_group", 1)) : 1;
    m.topk_group = grouped ? std::max<int64_t>(1, r.int_or("topk_group", m.n_group)) : 1;
    if (m.num_experts % m.n_group != 0 || m.topk_group > m.n_group)
      throw r.error("n_group", "must divide the experts, with topk_group at most n_group");
    m.routed_scaling_factor = r.number_or("routed_scaling_factor", 1.0);
  }
  if (r.int_or("kv_lora_rank", 0) > 0) {
    MlaConfig& a = c.mla;
    a.kv_lora_rank = r.int_or("kv_lora_rank", 0);
    a.q_lora_rank = r.int_or("q_lora_rank", 0);  // null (no q compression) reads as absent
    a.nope_dim = r.required_int("qk_nope_head_dim");
    a.rope_dim = r.required_int("qk_rope_head_dim");
    a.v_dim = r.required_int("v_head_dim");
    a.rope_interleave = r.bool_or("rope_interleave", true);
    if (a.rope_dim % 2 != 0) throw r.error("qk_rope_head_dim", "must be even");
    c.head_dim = a.rope_dim;  // what RoPE rotates
  }

  element e;
  if (!obj["bos_token_id"].get(e) && !e.is_null()) {
    std::vector<int32_t> bos;
    add_token_ids(e, bos);
    if (!bos.empty()) c.bos_token_id = bos[0];
  }
  if (!obj["eos_token_id"].get(e)) add_token_ids(e, c.eos_token_ids);
  return c;
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
  if (c.rope.type == RopeType::Llama3)
    field("rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": " + json_number(c.rope.factor) +
                              ", \"low_freq_factor\": " + json_number(c.rope.low_freq_factor) +
                              ", \"high_freq_factor\": " + json_number(c.rope.high_freq_factor) +
                              ", \"original_max_position_embeddings\": " +
                              std::to_string(c.rope.original_max_position_embeddings) + "}");
  field("attention_bias", c.attention_bias ? "true" : "false");
  field("mlp_bias", c.mlp_bias ? "true" : "false");
  if (c.sliding_window) field("sliding_window", std::to_string(*c.sliding_window));
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
  if (c.mla.kv_lora_rank) {
    const MlaConfig& a = c.mla;
    field("kv_lora_rank", std::to_string(a.kv_lora_rank));
    field("q_lora_rank", a.q_lora_rank ? std::to_string(a.q_lora_rank) : "null");
    field("qk_nope_head_dim", std::to_string(a.nope_dim));
    field("qk_rope_head_dim", std::to_string(a.rope_dim));
    field("v_head_dim", std::to_string(a.v_dim));
    field("rope_interleave", a.rope_interleave ? "true" : "false");
  }
  if (c.bos_token_id) field("bos_token_id", std::to_string(*c.bos_token_id));
  std::string eos;
  for (int32_t id : c.eos_token_ids) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  field("eos_token_id", "[" + eos + "]");
  return j + "  \"tie_word_embeddings\": " + (c.tie_word_embeddings ? "true" : "false") + "\n}\n";
}

}  // namespace ftllm::model
