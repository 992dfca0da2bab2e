// Qwen3MoeForCausalLM: Qwen3's attention (q/k norms) with mixture-of-experts MLPs: softmax over the
// router's logits, the top num_experts_per_tok experts, optionally renormalised (norm_topk_prob); layers
// listed in mlp_only_layers or off the decoder_sparse_step keep a dense MLP.
#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

DecoderSpec qwen3_moe_spec(const ModelConfig& c) {
  if (c.sliding_window)
    throw EngineError("Qwen3-MoE with use_sliding_window=true is not supported; set it to false in config.json");
  if (c.moe.num_experts == 0) throw EngineError("Qwen3MoeForCausalLM needs num_experts in config.json");
  DecoderSpec s;
  s.qkv_bias = s.o_bias = c.attention_bias;
  s.qk_norm = true;
  s.moe = true;
  return s;
}

}  // namespace ftllm::model
