// What distinguishes one decoder architecture from another, and the registry from the
// Hugging Face "architectures" name to it. A new architecture is one file defining its spec function
// plus one line in registry.cpp.
#pragma once

#include <string>
#include <vector>

#include "model_config.h"

namespace ftllm::model {

struct DecoderSpec {
  bool qkv_bias = false;        // q, k, v projections have biases
  bool o_bias = false;          // the output projection has a bias
  bool mlp_bias = false;        // gate, up and down projections have biases
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen3)
  bool sliding_window = false;  // honour config.sliding_window on every layer (Mistral)
  bool moe = false;             // config.moe's layers route each token to experts (mlp.gate, mlp.experts.N)
  bool shared_expert = false;   // MoE layers also run mlp.shared_expert, gated by mlp.shared_expert_gate
  bool shared_experts = false;  // DeepSeek: MoE layers also run mlp.shared_experts, ungated
  bool mla = false;             // multi-head latent attention (config.mla) instead of q, k, v projections
};

// Returns the spec for this config, or throws EngineError for a variant the engine cannot run.
using SpecFunction = DecoderSpec (*)(const ModelConfig&);

struct Architecture {
  const char* hf_name;
  SpecFunction spec;
};

const std::vector<Architecture>& architectures();
// Throws EngineError naming the architecture and listing the supported ones.
const Architecture& find_architecture(const std::string& hf_name);

// One per architecture file.
DecoderSpec llama_spec(const ModelConfig&);
DecoderSpec mistral_spec(const ModelConfig&);
DecoderSpec qwen2_spec(const ModelConfig&);
DecoderSpec qwen3_spec(const ModelConfig&);
DecoderSpec qwen2_moe_spec(const ModelConfig&);
DecoderSpec qwen3_moe_spec(const ModelConfig&);
DecoderSpec deepseek_v2_spec(const ModelConfig&);
DecoderSpec deepseek_v3_spec(const ModelConfig&);

}  // namespace ftllm::model
