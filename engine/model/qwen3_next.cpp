// Qwen3NextForCausalLM: three of every four layers are gated DeltaNet linear attention (a recurrent state
// per sequence instead of a KV cache: ops::gated_delta_net), the others full attention whose output is
// gated by sigmoid(a second half of q_proj) with q/k norms and RoPE on a quarter of each head; MoE MLPs with
// a gated shared expert; every RMSNorm but the DeltaNet's output norm scales by (1 + w).
#include <cmath>

#include "../ops/ops.h"
#include "architecture.h"
#include "decoder.h"

namespace ftllm::model {

namespace {

const char* const kQkvz = "linear_attn.in_proj_qkvz.weight";
const char* const kBa = "linear_attn.in_proj_ba.weight";
const char* const kConv = "linear_attn.conv1d.weight";
const char* const kDtBias = "linear_attn.dt_bias";
const char* const kALog = "linear_attn.A_log";
const char* const kNorm = "linear_attn.norm.weight";
const char* const kOut = "linear_attn.out_proj.weight";

class Qwen3Next final : public Architecture {
 public:
  Qwen3Next() : Architecture("Qwen3NextForCausalLM") {}

  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    read_experts(r, c, hf_name());
    c.norm_weight_offset = 1;  // Qwen3NextRMSNorm: zero-centred weights
    LinearAttentionConfig& a = c.linear;
    a.k_heads = r.required_int("linear_num_key_heads");
    a.v_heads = r.required_int("linear_num_value_heads");
    a.k_dim = r.required_int("linear_key_head_dim");
    a.v_dim = r.required_int("linear_value_head_dim");
    a.conv_kernel = r.required_int("linear_conv_kernel_dim");
    if (a.k_heads == 0 || a.v_heads % a.k_heads != 0)
      throw r.error("linear_num_value_heads", "must be a multiple of linear_num_key_heads");
    if (a.k_dim == 0 || a.v_dim == 0 || a.conv_kernel == 0)
      throw r.error("linear_key_head_dim", "linear_value_head_dim and linear_conv_kernel_dim must be positive");
    a.linear_layers.clear();
    if (r.has("layer_types")) {
      for (const std::string& type : r.string_list("layer_types")) {
        if (type != "linear_attention" && type != "full_attention")
          throw r.error("layer_types", "holds \"" + type + "\"; Qwen3-Next layers are linear_attention or full_attention");
        a.linear_layers.push_back(type == "linear_attention");
      }
      if (int64_t(a.linear_layers.size()) != c.num_layers) throw r.error("layer_types", "must name one type per layer");
    } else {  // older configs: every full_attention_interval-th layer is full attention
      const int64_t interval = r.int_or("full_attention_interval", 4);
      if (interval == 0) throw r.error("full_attention_interval", "must be at least 1");
      for (int64_t l = 0; l < c.num_layers; ++l) a.linear_layers.push_back((l + 1) % interval != 0);
    }
  }

  void write_config(const ModelConfig& c, const ConfigField& field) const override {
    const LinearAttentionConfig& a = c.linear;
    field("linear_num_key_heads", std::to_string(a.k_heads));
    field("linear_num_value_heads", std::to_string(a.v_heads));
    field("linear_key_head_dim", std::to_string(a.k_dim));
    field("linear_value_head_dim", std::to_string(a.v_dim));
    field("linear_conv_kernel_dim", std::to_string(a.conv_kernel));
    std::string types;
    for (bool linear : a.linear_layers) types += std::string(types.empty() ? "" : ", ") + (linear ? "\"linear_attention\"" : "\"full_attention\"");
    field("layer_types", "[" + types + "]");
  }

  void check(const ModelConfig& c) const override {
    if (c.moe.num_experts == 0) throw EngineError("Qwen3NextForCausalLM needs num_experts in config.json");
    if (int64_t(c.linear.linear_layers.size()) != c.num_layers)
      throw EngineError("Qwen3NextForCausalLM needs layer_types or full_attention_interval in config.json");
  }

  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    const ModelConfig& c = b.config;
    const int64_t H = c.hidden_size;
    bind_norms(b, L);
    if (c.linear.is_linear(b.layer)) {
      const LinearAttentionConfig& a = c.linear;
      const int64_t r = a.v_heads / a.k_heads, channels = a.conv_channels();
      auto own = [&](const char* name, Tensor t, bool matrix) { L.own.push_back({name, std::move(t), kAttentionAndDense, matrix}); };
      own(kQkvz, b.matrix(kQkvz, {a.k_heads * (2 * a.k_dim + 2 * r * a.v_dim), H}), true);
      own(kBa, b.matrix(kBa, {2 * a.v_heads, H}), true);
      Tensor conv = b.store.floats(b.prefix + kConv, {channels, 1, a.conv_kernel});
      conv.shape = {channels, a.conv_kernel};
      own(kConv, std::move(conv), false);
      own(kDtBias, b.vector(kDtBias, a.v_heads), false);
      own(kALog, b.vector(kALog, a.v_heads), false);
      own(kNorm, b.vector(kNorm, a.v_dim), false);
      own(kOut, b.matrix(kOut, {H, a.v_heads * a.v_dim}), true);
    } else {
      // q_proj gives each head's query and then its gate: 2 * head_dim rows per head.
      const int64_t d = c.head_dim, q_dim = c.num_heads * d, kv_dim = c.num_kv_heads * d;
      const bool bias = c.attention_bias;
      L.q = b.matrix("self_attn.q_proj.weight", {2 * q_dim, H});
      L.k = b.matrix("self_attn.k_proj.weight", {kv_dim, H});
      L.v = b.matrix("self_attn.v_proj.weight", {kv_dim, H});
      L.o = b.matrix("self_attn.o_proj.weight", {H, q_dim});
      L.q_bias = b.vector_if(bias, "self_attn.q_proj.bias", 2 * q_dim);
      L.k_bias = b.vector_if(bias, "self_attn.k_proj.bias", kv_dim);
      L.v_bias = b.vector_if(bias, "self_attn.v_proj.bias", kv_dim);
      L.o_bias = b.vector_if(bias, "self_attn.o_proj.bias", H);
      L.q_norm = b.vector("self_attn.q_norm.weight", d);
      L.k_norm = b.vector("self_attn.k_norm.weight", d);
    }
    if (c.moe.is_moe_layer(b.layer)) bind_experts(b, L, "mlp.shared_expert.", true);
    else bind_dense_mlp(b, L);
  }

  void attention(LayerStep& s, const Tensor& h, Tensor& out) const override {
    if (s.config.linear.is_linear(s.layer)) delta_net(s, h, out);
    else gated_attention(s, h, out);
  }

 private:
  static void delta_net(LayerStep& s, const Tensor& h, Tensor& out) {
    const LinearAttentionConfig& a = s.config.linear;
    const LayerWeights& L = s.w;
    const int64_t T = h.dim(0);
    const Tensor& qkvz_w = L.own_tensor(kQkvz);
    Tensor qkvz = ops::scratch(s.ctx, {T, qkvz_w.dim(0)}), ba = ops::scratch(s.ctx, {T, 2 * a.v_heads});
    ops::linear(s.ctx, h, qkvz_w, nullptr, qkvz);
    ops::linear(s.ctx, h, L.own_tensor(kBa), nullptr, ba);
    Tensor heads = ops::scratch(s.ctx, {T, a.v_heads * a.v_dim});
    const ops::DeltaNet net{L.own_tensor(kConv), L.own_tensor(kALog), L.own_tensor(kDtBias), L.own_tensor(kNorm),
                            a.k_heads, a.v_heads, a.k_dim, a.v_dim, a.conv_kernel, float(s.config.rms_norm_eps)};
    ops::gated_delta_net(s.ctx, qkvz, ba, net, s.ab, s.pool.states(s.layer), heads);
    ops::linear(s.ctx, heads, L.own_tensor(kOut), nullptr, out);
  }

  static void gated_attention(LayerStep& s, const Tensor& h, Tensor& out) {
    const ModelConfig& c = s.config;
    const LayerWeights& L = s.w;
    const int64_t T = h.dim(0), d = c.head_dim, heads = c.num_heads, kv_heads = c.num_kv_heads, B = s.pool.block_tokens();
    const float eps = float(c.rms_norm_eps);
    auto opt = [](const std::optional<Tensor>& t) { return t ? &*t : nullptr; };
    Tensor qg = ops::scratch(s.ctx, {T, 2 * heads * d});
    Tensor q = ops::zeros(s.ctx, {T, heads * d}), gate = ops::zeros(s.ctx, {T, heads * d});
    Tensor k = ops::scratch(s.ctx, {T, kv_heads * d}), v = ops::scratch(s.ctx, {T, kv_heads * d});
    ops::linear(s.ctx, h, L.q, opt(L.q_bias), qg);
    ops::copy_blocks(s.ctx, qg, {heads, 2 * d, 0}, q, {heads, d, 0}, d);
    ops::copy_blocks(s.ctx, qg, {heads, 2 * d, d}, gate, {heads, d, 0}, d);
    ops::linear(s.ctx, h, L.k, opt(L.k_bias), k);
    ops::linear(s.ctx, h, L.v, opt(L.v_bias), v);
    ops::rmsnorm(s.ctx, q, *L.q_norm, eps, q, c.norm_weight_offset);
    ops::rmsnorm(s.ctx, k, *L.k_norm, eps, k, c.norm_weight_offset);
    ops::rope_blocks(s.ctx, q, {heads, d, 0}, s.cos, s.sin, false);
    ops::rope_blocks(s.ctx, k, {kv_heads, d, 0}, s.cos, s.sin, false);
    const ops::KvLayer kv{s.pool.key(s.layer, 0, 0), s.pool.value(s.layer, 0, 0), s.pool.block_bytes(), s.pool.row_bytes(),
                          s.pool.dtype(), s.pool.layer_storage(s.layer).device};
    ops::store_kv(s.ctx, s.ab, k, &v, kv, B, d);
    Tensor attn = ops::scratch(s.ctx, {T, heads * d});
    ops::paged_attention(s.ctx, q, s.ab, kv, {heads, kv_heads, d, B, 0, 1.0f / std::sqrt(float(d))}, attn);
    ops::sigmoid_mul(s.ctx, attn, gate);
    ops::linear(s.ctx, attn, L.o, opt(L.o_bias), out);
  }
};

}  // namespace

const Architecture& qwen3_next() {
  static const Qwen3Next a;
  return a;
}

}  // namespace ftllm::model
