// Qwen2MoeForCausalLM (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention (q, k, v biases) with
// mixture-of-experts MLPs as Qwen3-MoE's, plus a shared expert every token goes through, scaled by
// sigmoid(shared_expert_gate · x).
#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

DecoderSpec qwen2_moe_spec(const ModelConfig& c) {
  if (c.sliding_window)
    throw EngineError("Qwen2-MoE with use_sliding_window=true is not supported; set it to false in config.json");
  if (c.moe.num_experts == 0) throw EngineError("Qwen2MoeForCausalLM needs num_experts in config.json");
  DecoderSpec s;
  s.qkv_bias = true;
  s.moe = true;
  s.shared_expert = c.moe.shared_intermediate > 0;
  return s;
}

}  // namespace ftllm::model
