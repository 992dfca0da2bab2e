// Qwen2MoeForCausalLM (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention (q, k, v biases) with
// mixture-of-experts MLPs as Qwen3-MoE's, plus a shared expert every token goes through, scaled by
// sigmoid(shared_expert_gate · x).
#include "architecture.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

class Qwen2Moe final : public Architecture {
 public:
  Qwen2Moe() : Architecture("Qwen2MoeForCausalLM") {}
  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    if (r.bool_or("use_sliding_window", false))
      throw r.error("use_sliding_window", "is true: windowed Qwen2-MoE layers are not supported; set it to false");
    read_experts(r, c, hf_name());
  }
  // llama.cpp's qwen2moe graph never renormalises; its shared expert keeps Qwen's names.
  void read_gguf(const GgufFile&, const std::string&, ModelConfig& c) const override { c.moe.norm_topk_prob = false; }
  std::vector<std::pair<std::string, std::string>> gguf_layer_names() const override {
    return {{"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
            {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
            {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
            {"ffn_gate_inp_shexp.weight", kSharedExpertGate}};
  }
  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    bind_norms(b, L);
    bind_attention(b, L, {.qkv_bias = true});
    if (!b.config.moe.is_moe_layer(b.layer)) return bind_dense_mlp(b, L);
    bind_experts(b, L, "mlp.shared_expert.", true);
  }
};

}  // namespace

const Architecture& qwen2_moe() {
  static const Qwen2Moe a;
  return a;
}

}  // namespace ftllm::model
