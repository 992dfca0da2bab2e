// Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4-mini): Llama's layer with q, k and v in one fused qkv_proj and
// gate and up in one gate_up_proj (bound as row views of them; an exported model's split tensors read
// as well), LongRoPE ("su") scaling and a partial rotary part (rope.h), and the sliding window the
// config names on every layer.
#include "architecture.h"

namespace ftllm::model {

namespace {

class Phi3 final : public Architecture {
 public:
  Phi3() : Architecture("Phi3ForCausalLM") {}

  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    if (r.has("sliding_window")) c.sliding_window = r.int_or("sliding_window", 0);
  }
  void write_config(const ModelConfig& c, const ConfigField& field) const override {
    if (c.sliding_window) field("sliding_window", std::to_string(*c.sliding_window));
  }

  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    const ModelConfig& c = b.config;
    const int64_t H = c.hidden_size, I = c.intermediate_size, d = c.head_dim;
    const int64_t q = c.num_heads * d, kv = c.num_kv_heads * d;
    bind_norms(b, L);
    if (b.store.has(b.prefix + "self_attn.qkv_proj.weight")) {
      const std::string fused = b.prefix + "self_attn.qkv_proj.weight";
      L.q = b.store.matrix_rows(fused, {q + 2 * kv, H}, 0, q, b.prefix + "self_attn.q_proj.weight");
      L.k = b.store.matrix_rows(fused, {q + 2 * kv, H}, q, kv, b.prefix + "self_attn.k_proj.weight");
      L.v = b.store.matrix_rows(fused, {q + 2 * kv, H}, q + kv, kv, b.prefix + "self_attn.v_proj.weight");
      L.o = b.matrix("self_attn.o_proj.weight", {H, q});
    } else {
      bind_attention(b, L, {});
    }
    if (b.store.has(b.prefix + "mlp.gate_up_proj.weight")) {
      const std::string fused = b.prefix + "mlp.gate_up_proj.weight";
      L.gate = b.store.matrix_rows(fused, {2 * I, H}, 0, I, b.prefix + "mlp.gate_proj.weight");
      L.up = b.store.matrix_rows(fused, {2 * I, H}, I, I, b.prefix + "mlp.up_proj.weight");
      L.down = b.matrix("mlp.down_proj.weight", {H, I});
    } else {
      bind_dense_mlp(b, L);
    }
    L.window = c.sliding_window.value_or(0);
  }
};

}  // namespace

const Architecture& phi3() {
  static const Phi3 a;
  return a;
}

}  // namespace ftllm::model
