// One decoder layer's weights, and binding them: the shared blocks (attention, a dense MLP, a mixture
// of experts) have fields of their own; what only one architecture has (DeepSeek's latent attention,
// Qwen2-MoE's shared-expert gate) it binds as named `own` tensors, which the decoder moves, counts and
// exports with the rest without knowing what they are for.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "../ops/moe.h"
#include "model_config.h"
#include "weights.h"

namespace ftllm::model {

// Which part of a layer a tensor belongs to: --device and rebalance move attention and dense MLPs,
// --moe_device the routed experts, --cuda_se the shared ones.
enum LayerParts : unsigned {
  kStaysOnHost = 0,        // read by host code (routing) wherever the layer runs
  kAttentionAndDense = 1,  // norms, attention, a dense MLP, their biases
  kRoutedExperts = 2,      // the routed experts with their router
  kSharedExperts = 4,      // shared experts with their gate
};

// Sigmoid routing's per-expert bias (DeepSeek V3, GLM-4.5), an own tensor of a MoE layer.
inline const char* const kCorrectionBias = "mlp.gate.e_score_correction_bias";
// Qwen2-MoE and Qwen3-Next scale their shared expert's output by sigmoid(this row · x).
inline const char* const kSharedExpertGate = "mlp.shared_expert_gate.weight";

struct OwnTensor {
  std::string name;  // under "model.layers.N."
  Tensor tensor;
  LayerParts part = kAttentionAndDense;
  bool matrix = false;  // a weight the linear op reads (moved into node-bound memory by --device numa)
};

struct LayerWeights {
  Tensor attn_norm, q, k, v, o;  // q, k, v empty when the architecture computes attention its own way
  std::optional<Tensor> q_bias, k_bias, v_bias, o_bias;
  std::optional<Tensor> q_norm, k_norm;
  std::optional<Tensor> sinks;  // gpt-oss: a logit per query head in each softmax's sum
  // Qwen3-Next: q_proj gives each head's query and then its output gate (2 * head_dim rows per head); the
  // attention's output is multiplied by sigmoid(gate) before o_proj.
  bool gated_output = false;
  Tensor mlp_norm, gate, up, down;  // a dense layer's MLP (empty in a mixture-of-experts layer)
  std::optional<Tensor> gate_bias, up_bias, down_bias;
  // A mixture-of-experts layer: the router [E, H], the routed experts, and shared experts every token
  // goes through.
  Tensor router;
  std::optional<Tensor> router_bias;        // gpt-oss
  std::string router_prefix = "mlp.gate.";  // gpt-oss: "mlp.router."
  std::vector<ops::Expert> experts;
  std::optional<ops::Expert> shared;
  std::string shared_prefix;  // "mlp.shared_expert." or "mlp.shared_experts."
  std::vector<OwnTensor> own;
  int64_t window = 0;  // attention sees this many positions back; 0: all
  int rope_table = 0;  // 1: the layer rotates by config.sliding_rope (Gemma 3's sliding layers)

  // The own tensor of that name; throws when the architecture did not bind it.
  const Tensor& own_tensor(const std::string& name) const;
  const Tensor* find_own(const std::string& name) const;  // null when not bound

  // Calls f(name, tensor, part, matrix) for every bound tensor, names under "model.layers.N.".
  template <class Weights, class F>
  static void visit(Weights& w, F&& f);
};

// Binds one layer's weights under "model.layers.N." with the shapes the config gives.
struct LayerBinder {
  const WeightStore& store;
  const ModelConfig& config;
  int64_t layer;
  std::string prefix;  // "model.layers.N."

  Tensor matrix(const std::string& name, const std::vector<int64_t>& shape) const { return store.matrix(prefix + name, shape); }
  Tensor vector(const std::string& name, int64_t n) const { return store.vector_f32(prefix + name, n); }
  std::optional<Tensor> vector_if(bool wanted, const std::string& name, int64_t n) const {
    if (!wanted) return std::nullopt;
    return vector(name, n);
  }
};

// The shared blocks' weights.
struct AttentionOptions {
  bool qkv_bias = false, o_bias = false;
  bool qk_norm = false;  // per-head RMSNorm of q and k before RoPE (Qwen3)
};
void bind_attention(const LayerBinder& b, LayerWeights& L, AttentionOptions options);
void bind_dense_mlp(const LayerBinder& b, LayerWeights& L, bool bias = false);
// The router and config.moe's routed experts under mlp. (per-expert tensors, or transformers 5's fused
// ones), the router's correction bias for sigmoid routing (kCorrectionBias), and shared experts under
// `shared_prefix` when config.moe has a shared intermediate size, with their gate (kSharedExpertGate)
// when `shared_gate`.
void bind_experts(const LayerBinder& b, LayerWeights& L, const std::string& shared_prefix = "", bool shared_gate = false);
// The norms every layer has: input_layernorm and post_attention_layernorm.
void bind_norms(const LayerBinder& b, LayerWeights& L);

template <class Weights, class F>
void LayerWeights::visit(Weights& w, F&& f) {
  for (auto [name, t] : {std::pair<const char*, decltype(&w.q)>{"input_layernorm.weight", &w.attn_norm},
                         {"post_attention_layernorm.weight", &w.mlp_norm}})
    if (!t->empty()) f(std::string(name), *t, kAttentionAndDense, false);
  for (auto [name, t] : {std::pair<const char*, decltype(&w.q)>{"self_attn.q_proj.weight", &w.q}, {"self_attn.k_proj.weight", &w.k},
                         {"self_attn.v_proj.weight", &w.v}, {"self_attn.o_proj.weight", &w.o},
                         {"mlp.gate_proj.weight", &w.gate}, {"mlp.up_proj.weight", &w.up}, {"mlp.down_proj.weight", &w.down}})
    if (!t->empty()) f(std::string(name), *t, kAttentionAndDense, true);
  for (auto [name, t] : {std::pair<const char*, decltype(&w.q_bias)>{"self_attn.q_proj.bias", &w.q_bias},
                         {"self_attn.k_proj.bias", &w.k_bias}, {"self_attn.v_proj.bias", &w.v_bias},
                         {"self_attn.o_proj.bias", &w.o_bias}, {"self_attn.q_norm.weight", &w.q_norm},
                         {"self_attn.k_norm.weight", &w.k_norm}, {"self_attn.sinks", &w.sinks}, {"mlp.gate_proj.bias", &w.gate_bias},
                         {"mlp.up_proj.bias", &w.up_bias}, {"mlp.down_proj.bias", &w.down_bias}})
    if (*t) f(std::string(name), **t, kAttentionAndDense, false);
  if (!w.experts.empty()) {
    f(w.router_prefix + "weight", w.router, kRoutedExperts, true);
    if (w.router_bias) f(w.router_prefix + "bias", *w.router_bias, kRoutedExperts, false);
    for (size_t e = 0; e < w.experts.size(); ++e) {
      const std::string x = "mlp.experts." + std::to_string(e) + ".";
      f(x + "gate_proj.weight", w.experts[e].gate, kRoutedExperts, true);
      f(x + "up_proj.weight", w.experts[e].up, kRoutedExperts, true);
      f(x + "down_proj.weight", w.experts[e].down, kRoutedExperts, true);
      for (auto [name, t] : {std::pair<const char*, decltype(&w.experts[e].gate)>{"gate_proj.bias", &w.experts[e].gate_bias},
                             {"up_proj.bias", &w.experts[e].up_bias}, {"down_proj.bias", &w.experts[e].down_bias}})
        if (!t->empty()) f(x + name, *t, kRoutedExperts, false);
    }
  }
  if (w.shared) {
    f(w.shared_prefix + "gate_proj.weight", w.shared->gate, kSharedExperts, true);
    f(w.shared_prefix + "up_proj.weight", w.shared->up, kSharedExperts, true);
    f(w.shared_prefix + "down_proj.weight", w.shared->down, kSharedExperts, true);
  }
  for (auto& o : w.own) f(o.name, o.tensor, o.part, o.matrix);
}

}  // namespace ftllm::model
