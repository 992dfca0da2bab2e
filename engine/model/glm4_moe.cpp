// Glm4MoeForCausalLM (GLM-4.5, GLM-4.5-Air, GLM-4.6): q, k and v with biases (attention_bias), optional
// per-head q/k norms (use_qk_norm), RoPE on the first half of each head (partial_rotary_factor, 0.5 unless
// the config says), the first first_k_dense_replace layers dense, then DeepSeek V3's routing (sigmoid
// scores plus e_score_correction_bias over expert groups, renormalised, scaled by routed_scaling_factor)
// with shared experts. The checkpoints' next-token-prediction layers (num_nextn_predict_layers, after the
// last decoder layer) serve speculative decoding only; plain decoding does not read them.
#include "../core/error.h"
#include "../core/json_writer.h"
#include "architecture.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

class Glm4Moe final : public Architecture {
 public:
  Glm4Moe() : Architecture("Glm4MoeForCausalLM") {}

  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    read_experts(r, c, hf_name());
    c.moe.norm_topk_prob = r.bool_or("norm_topk_prob", true);
    read_expert_groups(r, c, "sigmoid");
    if (!c.moe.sigmoid_grouped) throw r.error("scoring_func", "must be sigmoid for GLM-4.5's router");
    const std::optional<ConfigReader> params = r.object("rope_parameters");
    if (!r.has("partial_rotary_factor") && !(params && params->has("partial_rotary_factor"))) c.rope.partial_rotary_factor = 0.5;
    c.qk_norm = r.bool_or("use_qk_norm", false);
  }
  // llama.cpp's glm4moe: the rotated dimensions as a count, sigmoid gating unless the file says otherwise,
  // biases and q/k norms where their tensors are; the attention's second norm under its own name.
  void read_gguf(const GgufFile& g, const std::string& arch, ModelConfig& c) const override {
    if (auto dims = g.get_int(arch + ".rope.dimension_count")) c.rope.partial_rotary_factor = double(*dims) / double(c.head_dim);
    else c.rope.partial_rotary_factor = 0.5;
    if (!g.get_int(arch + ".expert_gating_func")) c.moe.sigmoid_grouped = true;
    if (!c.moe.sigmoid_grouped) throw EngineError(g.path() + ": " + arch + ".expert_gating_func must be sigmoid for GLM-4.5's router");
    c.attention_bias = g.tensor("blk.0.attn_q.bias") != nullptr;
    c.qk_norm = g.tensor("blk.0.attn_q_norm.weight") != nullptr;
  }
  std::vector<std::pair<std::string, std::string>> gguf_layer_names() const override {
    return {{"post_attention_norm.weight", "post_attention_layernorm.weight"}};
  }
  void write_config(const ModelConfig& c, const ConfigField& field) const override {
    field("use_qk_norm", c.qk_norm ? "true" : "false");
    field("partial_rotary_factor", json_number(c.rope.partial_rotary_factor));
  }

  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    const ModelConfig& c = b.config;
    bind_norms(b, L);
    bind_attention(b, L, {.qkv_bias = c.attention_bias, .qk_norm = c.qk_norm});
    if (c.moe.is_moe_layer(b.layer)) bind_experts(b, L, "mlp.shared_experts.");
    else bind_dense_mlp(b, L);
  }
};

}  // namespace

const Architecture& glm4_moe() {
  static const Glm4Moe a;
  return a;
}

}  // namespace ftllm::model
