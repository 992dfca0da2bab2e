#include "layer.h"

#include "../core/error.h"

namespace ftllm::model {

const Tensor& LayerWeights::own_tensor(const std::string& name) const {
  for (const OwnTensor& o : own)
    if (o.name == name) return o.tensor;
  throw EngineError("internal: layer has no tensor " + name);
}

const Tensor* LayerWeights::find_own(const std::string& name) const {
  for (const OwnTensor& o : own)
    if (o.name == name) return &o.tensor;
  return nullptr;
}

void bind_norms(const LayerBinder& b, LayerWeights& L) {
  L.attn_norm = b.vector("input_layernorm.weight", b.config.hidden_size);
  L.mlp_norm = b.vector("post_attention_layernorm.weight", b.config.hidden_size);
}

void bind_attention(const LayerBinder& b, LayerWeights& L, AttentionOptions o) {
  const ModelConfig& c = b.config;
  const int64_t H = c.hidden_size, d = c.head_dim, q_dim = c.num_heads * d, kv_dim = c.num_kv_heads * d;
  L.q = b.matrix("self_attn.q_proj.weight", {q_dim, H});
  L.k = b.matrix("self_attn.k_proj.weight", {kv_dim, H});
  L.v = b.matrix("self_attn.v_proj.weight", {kv_dim, H});
  L.o = b.matrix("self_attn.o_proj.weight", {H, q_dim});
  L.q_bias = b.vector_if(o.qkv_bias, "self_attn.q_proj.bias", q_dim);
  L.k_bias = b.vector_if(o.qkv_bias, "self_attn.k_proj.bias", kv_dim);
  L.v_bias = b.vector_if(o.qkv_bias, "self_attn.v_proj.bias", kv_dim);
  L.o_bias = b.vector_if(o.o_bias, "self_attn.o_proj.bias", H);
  L.q_norm = b.vector_if(o.qk_norm, "self_attn.q_norm.weight", d);
  L.k_norm = b.vector_if(o.qk_norm, "self_attn.k_norm.weight", d);
}

void bind_dense_mlp(const LayerBinder& b, LayerWeights& L, bool bias) {
  const int64_t H = b.config.hidden_size, I = b.config.intermediate_size;
  L.gate = b.matrix("mlp.gate_proj.weight", {I, H});
  L.up = b.matrix("mlp.up_proj.weight", {I, H});
  L.down = b.matrix("mlp.down_proj.weight", {H, I});
  L.gate_bias = b.vector_if(bias, "mlp.gate_proj.bias", I);
  L.up_bias = b.vector_if(bias, "mlp.up_proj.bias", I);
  L.down_bias = b.vector_if(bias, "mlp.down_proj.bias", H);
}

// Hugging Face checkpoints hold one tensor per expert matrix (mlp.experts.N.gate_proj.weight, ...);
// transformers 5 saves them fused (mlp.experts.gate_up_proj [E, 2I, H], gate rows first, and
// mlp.experts.down_proj [E, H, I]); a GGUF stacks them (gguf_model.cpp names them mlp.experts.gate_proj,
// up_proj [E, I, H] and down_proj). All bind as views; --moe_dtype sees the per-expert names.
void bind_experts(const LayerBinder& b, LayerWeights& L, const std::string& shared_prefix, bool shared_gate) {
  const MoeConfig& m = b.config.moe;
  const int64_t H = b.config.hidden_size, E = m.num_experts, I = m.expert_intermediate;
  const std::string p = b.prefix + "mlp.";
  L.router = b.matrix("mlp.gate.weight", {E, H});
  const bool fused = b.store.has(p + "experts.gate_up_proj"), stacked = b.store.has(p + "experts.gate_proj");
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + "experts." + std::to_string(e) + ".";
    ops::Expert ex;
    if (fused) {
      ex.gate = b.store.matrix_rows(p + "experts.gate_up_proj", {E, 2 * I, H}, e * 2 * I, I, x + "gate_proj.weight");
      ex.up = b.store.matrix_rows(p + "experts.gate_up_proj", {E, 2 * I, H}, e * 2 * I + I, I, x + "up_proj.weight");
    } else if (stacked) {
      ex.gate = b.store.matrix_rows(p + "experts.gate_proj", {E, I, H}, e * I, I, x + "gate_proj.weight");
      ex.up = b.store.matrix_rows(p + "experts.up_proj", {E, I, H}, e * I, I, x + "up_proj.weight");
    }
    if (fused || stacked) {
      ex.down = b.store.matrix_rows(p + "experts.down_proj", {E, H, I}, e * H, H, x + "down_proj.weight");
    } else {
      ex.gate = b.store.matrix(x + "gate_proj.weight", {I, H});
      ex.up = b.store.matrix(x + "up_proj.weight", {I, H});
      ex.down = b.store.matrix(x + "down_proj.weight", {H, I});
    }
    L.experts.push_back(std::move(ex));
  }
  if (m.sigmoid_grouped)  // read on the host by the routing wherever the experts run
    L.own.push_back({kCorrectionBias, b.vector(kCorrectionBias, E), kStaysOnHost, false});
  const int64_t S = m.shared_intermediate;
  if (shared_prefix.empty() || S == 0) return;
  L.shared_prefix = shared_prefix;
  L.shared.emplace();
  L.shared->gate = b.matrix(shared_prefix + "gate_proj.weight", {S, H});
  L.shared->up = b.matrix(shared_prefix + "up_proj.weight", {S, H});
  L.shared->down = b.matrix(shared_prefix + "down_proj.weight", {H, S});
  if (!shared_gate) return;
  // [1, H] in a checkpoint, [H] in a GGUF: the same row.
  const auto stored = b.store.tensors().find(b.prefix + kSharedExpertGate);
  const bool vector = stored != b.store.tensors().end() && stored->second.shape.size() == 1;
  Tensor gate = vector ? b.matrix(kSharedExpertGate, {H}) : b.matrix(kSharedExpertGate, {1, H});
  gate.shape = {1, H};
  L.own.push_back({kSharedExpertGate, gate, kSharedExperts, false});
}

}  // namespace ftllm::model
