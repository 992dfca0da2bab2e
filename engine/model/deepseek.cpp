// DeepSeek V2 and V3: multi-head latent attention (a compressed KV row per token, absorbed into the
// query and the output per head), the first first_k_dense_replace layers dense, then mixture-of-experts
// layers with shared experts. V3 routes by sigmoid scores plus e_score_correction_bias over expert groups
// (config.moe.sigmoid_grouped); V2 by softmax scores, greedy or group_limited_greedy; both scale the
// chosen weights by routed_scaling_factor.
#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

namespace {

DecoderSpec deepseek_spec(const ModelConfig& c, const std::string& name) {
  if (c.mla.kv_lora_rank == 0) throw EngineError(name + " needs kv_lora_rank in config.json");
  if (c.moe.num_experts == 0) throw EngineError(name + " needs n_routed_experts in config.json");
  if (c.rope.type != RopeType::Default && c.rope.type != RopeType::Yarn)
    throw EngineError(name + " with rope scaling other than yarn is not supported");
  if (c.attention_bias) throw EngineError(name + " with attention_bias=true is not supported");
  DecoderSpec s;
  s.mla = true;
  s.moe = true;
  s.shared_experts = c.moe.shared_intermediate > 0;
  return s;
}

}  // namespace

DecoderSpec deepseek_v2_spec(const ModelConfig& c) { return deepseek_spec(c, "DeepseekV2ForCausalLM"); }
DecoderSpec deepseek_v3_spec(const ModelConfig& c) { return deepseek_spec(c, "DeepseekV3ForCausalLM"); }

}  // namespace ftllm::model
