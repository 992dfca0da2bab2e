// Qwen3MoeForCausalLM: Qwen3's attention (q/k norms) with mixture-of-experts MLPs: softmax over the
// router's logits, the top num_experts_per_tok experts, optionally renormalised (norm_topk_prob); layers
// listed in mlp_only_layers or off the decoder_sparse_step keep a dense MLP.
#include "architecture.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

class Qwen3Moe final : public Architecture {
 public:
  Qwen3Moe() : Architecture("Qwen3MoeForCausalLM") {}
  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    if (r.bool_or("use_sliding_window", false))
      throw r.error("use_sliding_window", "is true: windowed Qwen3-MoE layers are not supported; set it to false");
    read_experts(r, c, hf_name());
  }
  // llama.cpp's qwen3moe graph always renormalises the chosen experts' weights.
  void read_gguf(const GgufFile&, const std::string&, ModelConfig& c) const override { c.moe.norm_topk_prob = true; }
  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    const bool bias = b.config.attention_bias;
    bind_norms(b, L);
    bind_attention(b, L, {.qkv_bias = bias, .o_bias = bias, .qk_norm = true});
    if (b.config.moe.is_moe_layer(b.layer)) bind_experts(b, L);
    else bind_dense_mlp(b, L);
  }
};

}  // namespace

const Architecture& qwen3_moe() {
  static const Qwen3Moe a;
  return a;
}

}  // namespace ftllm::model
