// DeepseekV3ForCausalLM: multi-head latent attention (a compressed KV row per token, absorbed into q and
// the output per head), the first first_k_dense_replace layers dense, then mixture-of-experts layers
// routed by sigmoid scores with e_score_correction_bias over expert groups, plus shared experts.
#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

DecoderSpec deepseek_v3_spec(const ModelConfig& c) {
  if (c.mla.kv_lora_rank == 0) throw EngineError("DeepseekV3ForCausalLM needs kv_lora_rank in config.json");
  if (c.moe.num_experts == 0) throw EngineError("DeepseekV3ForCausalLM needs n_routed_experts in config.json");
  if (c.rope.type != RopeType::Default && c.rope.type != RopeType::Yarn)
    throw EngineError("DeepSeek V3 with rope scaling other than yarn is not supported");
  DecoderSpec s;
  s.o_bias = s.qkv_bias = false;
  if (c.attention_bias) throw EngineError("DeepSeek V3 with attention_bias=true is not supported");
  s.mla = true;
  s.moe = true;
  s.shared_experts = c.moe.shared_intermediate > 0;
  return s;
}

}  // namespace ftllm::model
