// Qwen3ForCausalLM: per-head RMSNorm of q and k before RoPE; head_dim set in the config.
#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

DecoderSpec qwen3_spec(const ModelConfig& c) {
  if (c.sliding_window)
    throw EngineError("Qwen3 with use_sliding_window=true is not supported; set it to false in config.json");
  DecoderSpec s;
  s.qkv_bias = s.o_bias = c.attention_bias;
  s.qk_norm = true;
  return s;
}

}  // namespace ftllm::model
