// Qwen2MoeForCausalLM (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention (q, k, v biases) with
// mixture-of-experts MLPs as Qwen3-MoE's, plus a shared expert every token goes through, scaled by
// sigmoid(shared_expert_gate · x).
#include "../ops/ops.h"
#include "architecture.h"

namespace ftllm::model {

namespace {

const char* const kSharedGate = "mlp.shared_expert_gate.weight";

class Qwen2Moe final : public Architecture {
 public:
  Qwen2Moe() : Architecture("Qwen2MoeForCausalLM") {}
  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    if (r.bool_or("use_sliding_window", false))
      throw r.error("use_sliding_window", "is true: windowed Qwen2-MoE layers are not supported; set it to false");
    read_experts(r, c, hf_name());
  }
  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    bind_norms(b, L);
    bind_attention(b, L, {.qkv_bias = true});
    if (!b.config.moe.is_moe_layer(b.layer)) return bind_dense_mlp(b, L);
    bind_experts(b, L, "mlp.shared_expert.");
    if (L.shared) L.own.push_back({kSharedGate, b.matrix(kSharedGate, {1, b.config.hidden_size}), kSharedExperts, false});
  }
  void scale_shared_experts(ops::Context& ctx, const LayerWeights& L, const Tensor& h, Tensor& shared) const override {
    Tensor gate = ops::zeros(ctx, {h.dim(0), 1});
    ops::linear(ctx, h, L.own_tensor(kSharedGate), nullptr, gate);
    ops::scale_rows(ctx, shared, gate, true);
  }
};

}  // namespace

const Architecture& qwen2_moe() {
  static const Qwen2Moe a;
  return a;
}

}  // namespace ftllm::model
