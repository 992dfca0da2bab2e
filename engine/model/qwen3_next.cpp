// Qwen3NextForCausalLM: three of every four layers are gated DeltaNet linear attention (a recurrent state
// per sequence instead of a KV cache: ops::gated_delta_net), the others full attention whose output is
// gated by sigmoid(a second half of q_proj) with q/k norms and RoPE on a quarter of each head; MoE MLPs with
// a gated shared expert; every RMSNorm but the DeltaNet's output norm scales by (1 + w).
#include <cmath>
#include <cstring>

#include "../ops/ops.h"
#include "architecture.h"
#include "decoder.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

// Hugging Face's in_proj_qkvz groups its rows by key head ([q, k, r values, r gates] each); bound split
// into the convolution's channels in order (all q heads, all k heads, all v heads) and the gates, which
// is how llama.cpp's converter writes them (attn_qkv, attn_gate).
const char* const kQkvz = "linear_attn.in_proj_qkvz.weight";
const char* const kQkv = "linear_attn.in_proj_qkv.weight";
const char* const kZ = "linear_attn.in_proj_z.weight";
const char* const kGgufA = "linear_attn.ssm_a";  // a GGUF's -exp(A_log)
const char* const kBa = "linear_attn.in_proj_ba.weight";
const char* const kConv = "linear_attn.conv1d.weight";
const char* const kDtBias = "linear_attn.dt_bias";
const char* const kALog = "linear_attn.A_log";
const char* const kNorm = "linear_attn.norm.weight";
const char* const kOut = "linear_attn.out_proj.weight";

// The rows `rows` of a matrix (stored in any dtype: rows are whole blocks), copied.
Tensor pick_rows(const Tensor& m, const std::vector<int64_t>& rows) {
  const size_t bytes = row_bytes(m.dtype, m.dim(1));
  Tensor out = Tensor::uninitialized(m.dtype, {int64_t(rows.size()), m.dim(1)});
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(static_cast<char*>(out.data) + i * bytes, static_cast<const char*>(m.data) + size_t(rows[i]) * bytes, bytes);
  return out;
}

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

  // llama.cpp's qwen3next: the linear attention under ssm.*, which layers are recurrent (or every
  // full_attention_interval-th is not), RoPE on rope.dimension_count values of each head, the next-token
  // prediction layers (counted in block_count) left out; its graph always renormalises the experts' weights.
  void read_gguf(const GgufFile& g, const std::string& arch, ModelConfig& c) const override {
    const std::string p = arch + ".";
    c.num_layers -= g.get_int(p + "nextn_predict_layers").value_or(0);
    c.norm_weight_offset = 1;
    c.moe.norm_topk_prob = true;
    LinearAttentionConfig& a = c.linear;
    a.conv_kernel = g.get_int(p + "ssm.conv_kernel").value_or(0);
    a.k_dim = g.get_int(p + "ssm.state_size").value_or(0);
    a.k_heads = g.get_int(p + "ssm.group_count").value_or(0);
    a.v_heads = g.get_int(p + "ssm.time_step_rank").value_or(0);
    a.v_dim = a.v_heads ? g.get_int(p + "ssm.inner_size").value_or(0) / a.v_heads : 0;
    if (a.conv_kernel <= 0 || a.k_dim <= 0 || a.k_heads <= 0 || a.v_heads <= 0 || a.v_dim <= 0 || a.v_heads % a.k_heads)
      throw EngineError(g.path() + ": " + p + "ssm.conv_kernel, state_size, group_count, time_step_rank and inner_size do not "
                        "describe gated DeltaNet layers");
    a.linear_layers.clear();
    if (const std::vector<double>* recurrent = g.get_numbers(p + "attention.recurrent_layers")) {
      for (int64_t l = 0; l < c.num_layers && l < int64_t(recurrent->size()); ++l) a.linear_layers.push_back((*recurrent)[size_t(l)] != 0);
    } else {
      const int64_t interval = std::max<int64_t>(1, g.get_int(p + "full_attention_interval").value_or(4));
      for (int64_t l = 0; l < c.num_layers; ++l) a.linear_layers.push_back((l + 1) % interval != 0);
    }
    if (auto rot = g.get_int(p + "rope.dimension_count")) c.rope.partial_rotary_factor = double(*rot) / double(c.head_dim);
  }
  std::vector<std::pair<std::string, std::string>> gguf_layer_names() const override {
    return {{"post_attention_norm.weight", "post_attention_layernorm.weight"},
            {"attn_qkv.weight", kQkv},
            {"attn_gate.weight", kZ},
            {"ssm_ba.weight", kBa},
            {"ssm_conv1d.weight", kConv},
            {"ssm_dt.bias", kDtBias},
            {"ssm_a", kGgufA},
            {"ssm_norm.weight", kNorm},
            {"ssm_out.weight", kOut},
            {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
            {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
            {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
            {"ffn_gate_inp_shexp.weight", kSharedExpertGate}};
  }
  // The converter adds 1 to every zero-centred norm; the DeltaNet's output norm is a plain one.
  float gguf_norm_shift(const std::string& hf_name) const override {
    return hf_name.ends_with("norm.weight") && !hf_name.ends_with(kNorm) ? 1.0f : 0.0f;
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
      if (b.store.has(b.prefix + kQkv)) {
        own(kQkv, b.matrix(kQkv, {channels, H}), true);
        own(kZ, b.matrix(kZ, {a.v_heads * a.v_dim, H}), true);
      } else {
        const int64_t group = 2 * a.k_dim + 2 * r * a.v_dim;
        const Tensor qkvz = b.matrix(kQkvz, {a.k_heads * group, H});
        std::vector<int64_t> qkv_rows, z_rows;
        for (int64_t part : {0, 1})  // q heads, then k heads
          for (int64_t kh = 0; kh < a.k_heads; ++kh)
            for (int64_t i = 0; i < a.k_dim; ++i) qkv_rows.push_back(kh * group + part * a.k_dim + i);
        for (int64_t kh = 0; kh < a.k_heads; ++kh)
          for (int64_t i = 0; i < r * a.v_dim; ++i) {
            qkv_rows.push_back(kh * group + 2 * a.k_dim + i);
            z_rows.push_back(kh * group + 2 * a.k_dim + r * a.v_dim + i);
          }
        own(kQkv, pick_rows(qkvz, qkv_rows), true);
        own(kZ, pick_rows(qkvz, z_rows), true);
      }
      own(kBa, b.matrix(kBa, {2 * a.v_heads, H}), true);
      // [channels, 1, kernel] in a checkpoint, [channels, kernel] in a GGUF.
      const auto stored = b.store.tensors().find(b.prefix + kConv);
      const bool squeezed = stored != b.store.tensors().end() && stored->second.shape.size() == 2;
      Tensor conv = squeezed ? b.store.floats(b.prefix + kConv, {channels, a.conv_kernel})
                             : b.store.floats(b.prefix + kConv, {channels, 1, a.conv_kernel});
      conv.shape = {channels, a.conv_kernel};
      own(kConv, std::move(conv), false);
      own(kDtBias, b.vector(kDtBias, a.v_heads), false);
      Tensor a_log = b.store.has(b.prefix + kALog) ? b.vector(kALog, a.v_heads) : b.vector(kGgufA, a.v_heads);
      if (!b.store.has(b.prefix + kALog))
        for (int64_t h = 0; h < a.v_heads; ++h) a_log.as<float>()[h] = std::log(-a_log.as<float>()[h]);
      own(kALog, std::move(a_log), false);
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
      L.gated_output = true;
    }
    if (c.moe.is_moe_layer(b.layer)) bind_experts(b, L, "mlp.shared_expert.", true);
    else bind_dense_mlp(b, L);
  }

  bool standard_attention(const ModelConfig& c, int64_t layer) const override { return !c.linear.is_linear(layer); }
  void attention(LayerStep& s, const Tensor& h, Tensor& out) const override {
    if (s.config.linear.is_linear(s.layer)) delta_net(s, h, out);
    else s.gqa_attention(h, out);  // with the output gate (LayerWeights::gated_output)
  }

 private:
  static void delta_net(LayerStep& s, const Tensor& h, Tensor& out) {
    const LinearAttentionConfig& a = s.config.linear;
    const LayerWeights& L = s.w;
    const int64_t T = h.dim(0);
    Tensor qkv = ops::scratch(s.ctx, {T, a.conv_channels()}), z = ops::scratch(s.ctx, {T, a.v_heads * a.v_dim});
    Tensor ba = ops::scratch(s.ctx, {T, 2 * a.v_heads});
    ops::linear(s.ctx, h, L.own_tensor(kQkv), nullptr, qkv);
    ops::linear(s.ctx, h, L.own_tensor(kZ), nullptr, z);
    ops::linear(s.ctx, h, L.own_tensor(kBa), nullptr, ba);
    Tensor heads = ops::scratch(s.ctx, {T, a.v_heads * a.v_dim});
    const ops::DeltaNet net{L.own_tensor(kConv), L.own_tensor(kALog), L.own_tensor(kDtBias), L.own_tensor(kNorm),
                            a.k_heads, a.v_heads, a.k_dim, a.v_dim, a.conv_kernel, float(s.config.rms_norm_eps)};
    ops::gated_delta_net(s.ctx, qkv, z, ba, net, s.ab, s.pool.states(s.layer), heads);
    ops::linear(s.ctx, heads, L.own_tensor(kOut), nullptr, out);
  }
};

}  // namespace

const Architecture& qwen3_next() {
  static const Qwen3Next a;
  return a;
}

}  // namespace ftllm::model
