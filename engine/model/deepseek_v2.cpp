// DeepseekV2ForCausalLM (DeepSeek V2, V2-Lite, V2.5): V3's multi-head latent attention and shared
// experts, with softmax routing (greedy, or group_limited_greedy over expert groups) scaled by
// routed_scaling_factor, and no routing bias.
#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

DecoderSpec deepseek_v2_spec(const ModelConfig& c) {
  if (c.mla.kv_lora_rank == 0) throw EngineError("DeepseekV2ForCausalLM needs kv_lora_rank in config.json");
  if (c.moe.num_experts == 0) throw EngineError("DeepseekV2ForCausalLM needs n_routed_experts in config.json");
  if (c.rope.type != RopeType::Default && c.rope.type != RopeType::Yarn)
    throw EngineError("DeepSeek V2 with rope scaling other than yarn is not supported");
  if (c.attention_bias) throw EngineError("DeepSeek V2 with attention_bias=true is not supported");
  DecoderSpec s;
  s.mla = true;
  s.moe = true;
  s.shared_experts = c.moe.shared_intermediate > 0;
  return s;
}

}  // namespace ftllm::model
