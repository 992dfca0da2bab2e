// Reading config.json's keys with errors that name the file and the key: the common keys in
// model_config.cpp, the keys only one architecture has in its file.
#pragma once

#include <simdjson.h>

#include <optional>
#include <string>
#include <vector>

#include "../core/error.h"
#include "model_config.h"

namespace ftllm::model {

class ConfigReader {
 public:
  ConfigReader(simdjson::dom::object obj, const std::string& source) : obj_(obj), source_(&source) {}

  EngineError error(const std::string& key, const std::string& why) const {
    return EngineError(*source_ + ": field \"" + key + "\" " + why);
  }
  // Present and not null.
  bool has(const char* key) const;
  // Present, null or not.
  bool present(const char* key) const;
  int64_t required_int(const char* key) const;
  int64_t int_or(const char* key, int64_t fallback) const;  // non-negative
  double number_or(const char* key, double fallback) const;
  bool bool_or(const char* key, bool fallback) const;
  std::string string_or(const char* key, const std::string& fallback) const;
  std::vector<int64_t> int_list(const char* key) const;  // empty when absent
  std::vector<std::string> string_list(const char* key) const;
  std::vector<double> number_list(const char* key) const;
  // A nested object ("rope_scaling"), when present.
  std::optional<ConfigReader> object(const char* key) const;

 private:
  simdjson::dom::object obj_;
  const std::string* source_;  // outlives the reader
};

// layer_types (one "sliding_attention" or "full_attention" per layer) into config.sliding_layers; false
// when the config has none (the architecture then says which layers slide).
bool read_layer_types(const ConfigReader& r, ModelConfig& c);

// RoPE: rope_theta from r, the scaling (linear, llama3, yarn) and any rope_theta inside from `scaling`.
RopeConfig read_rope(const ConfigReader& r, const std::optional<ConfigReader>& scaling);

// The keys of the shared mixture-of-experts block: the routed experts (num_experts; DeepSeek says
// n_routed_experts, transformers 5 num_local_experts), num_experts_per_tok, moe_intermediate_size,
// shared experts (shared_expert_intermediate_size, or n_shared_experts of the experts' size),
// norm_topk_prob, decoder_sparse_step and mlp_only_layers. Throws when the model has no routed experts:
// `arch` names the architecture that needs them.
void read_experts(const ConfigReader& r, ModelConfig& c, const std::string& arch);
// Routing over expert groups (DeepSeek, GLM-4.5): first_k_dense_replace dense layers, scoring_func
// (sigmoid scores with e_score_correction_bias, or softmax; `default_scoring` when absent), topk_method,
// n_group, topk_group, routed_scaling_factor.
void read_expert_groups(const ConfigReader& r, ModelConfig& c, const std::string& default_scoring);

}  // namespace ftllm::model
