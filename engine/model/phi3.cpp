// Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4-mini): Llama's layer with q, k and v in one fused qkv_proj and
// gate and up in one gate_up_proj (bound as row views of them; an exported model's split tensors read
// as well), LongRoPE ("su") scaling and a partial rotary part (rope.h), and the sliding window the
// config names on every layer.
#include "../core/error.h"
#include "architecture.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

class Phi3 final : public Architecture {
 public:
  Phi3() : Architecture("Phi3ForCausalLM") {}

  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    if (r.has("sliding_window")) c.sliding_window = r.int_or("sliding_window", 0);
  }
  // llama.cpp's converter: the rotated dimensions, the pretrained context and cos/sin factor as metadata,
  // LongRoPE's factors as the tensors rope_factors_long and rope_factors_short.
  void read_gguf(const GgufFile& g, const std::string& arch, ModelConfig& c) const override {
    if (auto dims = g.get_int(arch + ".rope.dimension_count")) c.rope.partial_rotary_factor = double(*dims) / double(c.head_dim);
    if (auto window = g.get_int(arch + ".attention.sliding_window"); window && *window > 0) c.sliding_window = *window;
    const GgufTensor *lf = g.tensor("rope_factors_long.weight"), *sf = g.tensor("rope_factors_short.weight");
    if (!lf || !sf) return;
    RopeConfig& rope = c.rope;
    rope.type = RopeType::LongRope;
    rope.original_max_position_embeddings = g.get_int(arch + ".rope.scaling.original_context_length").value_or(c.max_position_embeddings);
    rope.factor = double(c.max_position_embeddings) / double(rope.original_max_position_embeddings);
    rope.attention_factor = g.get_float(arch + ".rope.scaling.attn_factor").value_or(0.0);
    for (auto [t, factors] : {std::pair{lf, &rope.long_factor}, {sf, &rope.short_factor}}) {
      if (t->type != 0 /* F32 */ || !t->data) throw EngineError(g.path() + ": " + t->name + " must be float32");
      const float* v = static_cast<const float*>(t->data);
      factors->assign(v, v + t->bytes / 4);
    }
  }
  std::vector<std::pair<std::string, std::string>> gguf_layer_names() const override {
    return {{"attn_qkv.weight", "self_attn.qkv_proj.weight"}, {"ffn_up.weight", "mlp.gate_up_proj.weight"}};
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
