// ftllmd's command line. Options given here override the config file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "../engine/engine.h"
#include "config.h"

namespace ftllm::daemon {

struct Options {
  std::optional<std::string> config_path;   // --config FILE
  std::optional<std::string> check_config;  // --check-config FILE: validate and exit
  std::optional<std::string> listen;        // --listen HOST:PORT
  std::optional<std::string> admin_socket;  // --admin-socket PATH
  std::optional<std::string> api_key;       // --api_key KEY
  std::optional<std::string> log_level;     // --log-level LEVEL
  // Models to preload (as `ftllm server MODEL` does) and how.
  std::vector<std::string> models;
  std::optional<std::string> model_name;     // --name, for the first model
  std::optional<std::string> threads;        // -t / --threads
  std::optional<std::string> chat_template;  // --chat_template FILE
  std::optional<std::string> context;        // --ctx TOKENS: context length per sequence
  std::optional<std::string> max_sequences;  // --max_sequences N: sequences decoded together
  std::optional<std::string> gpu_memory;     // --gpu_memory F: share of a GPU's free memory a load may take
  std::optional<std::string> dtype;          // --dtype: compute dtype of linear layers (int4g, int8, fp8, ...)
  std::optional<std::string> moe_dtype;      // --moe_dtype: compute dtype of routed experts
  std::optional<std::string> dtype_config;   // --dtype_config FILE: per-tensor dtype rules
  std::optional<std::string> kernels;        // --kernels auto|avx512vnni|avx2|scalar (scalar: float32 reference, slow)
  std::optional<std::string> device;         // --device: cpu, numa, numa:N, or {'cpu':1,'numa:0':1}
  std::optional<std::string> cache_dir;      // --cache_dir: the Hugging Face cache for "org/name" models
  std::optional<std::string> moe_device;     // --moe_device: where routed experts run (cpu, numa)
  std::optional<std::string> moe_experts;    // --moe_experts N: routed experts per token
  bool cuda_se = false;                      // --cuda_se: shared experts on the GPU
  bool hide_input = false;                   // --hide_input: prompts never reach the log
  bool help = false;
  bool version = false;
};

struct OptionsResult {
  Options options;
  std::string error;  // non-empty: what was wrong, for the user
};

OptionsResult parse_options(const std::vector<std::string>& args);

// Applies the command-line overrides to a config; returns what was wrong with one, or empty.
std::string apply_overrides(const Options& options, Config& config);

// The engine load options for the preloaded models (the config's [[model]] entries, then the command
// line's); returns what was wrong, or empty.
std::string model_load_options(const Options& options, const Config& config, std::vector<ModelLoadOptions>& out);

const char* usage();

}  // namespace ftllm::daemon
