// The parts of a Hugging Face config.json (and generation_config.json) the engine uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ftllm::model {

enum class RopeType { Default, Linear, Llama3 };

struct RopeConfig {
  double theta = 10000.0;
  RopeType type = RopeType::Default;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture;  // the first entry of "architectures"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // Llama-style: bias on q, k, v and o
  bool mlp_bias = false;
  std::optional<int64_t> sliding_window;  // attention sees at most this many positions back
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config.json's and generation_config.json's, merged
};

// Parses config.json text; `source` names it in errors. Throws EngineError naming a missing or
// malformed field.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);

// config.json text for `config` that parse_model_config reads back to the same config (ftllmctl export).
std::string model_config_json(const ModelConfig& config);

// Adds generation_config.json's eos ids (it often lists more stop tokens than config.json).
void merge_generation_config(ModelConfig& config, const std::string& json_text, const std::string& source);

}  // namespace ftllm::model
