// Gemma 2 (Gemma2ForCausalLM) and Gemma 3 text models (Gemma3ForCausalLM: gemma-3-270m, 1b): norms that
// scale by 1 + w, the embedding times sqrt(hidden_size), GeGLU MLPs (tanh-approximated GELU), a norm
// before and after both attention and the MLP, scores scaled by query_pre_attn_scalar^-0.5, and
// sliding-window layers beside global ones (layer_types, else Gemma 2 alternates and Gemma 3 makes every
// sliding_window_pattern-th layer global). Gemma 2 soft-caps attention scores and final logits; Gemma 3
// has q/k norms and a RoPE of its own for the sliding layers.
#include <algorithm>
#include <cmath>

#include "../core/json_writer.h"
#include "../ops/ops.h"
#include "architecture.h"
#include "decoder.h"
#include "gguf.h"

namespace ftllm::model {

namespace {

const char* const kPostAttentionNorm = "post_attention_layernorm.weight";
const char* const kPreMlpNorm = "pre_feedforward_layernorm.weight";
const char* const kPostMlpNorm = "post_feedforward_layernorm.weight";

class Gemma final : public Architecture {
 public:
  Gemma(const char* name, int version) : Architecture(name), v3_(version == 3) {}

  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    if (r.bool_or("use_bidirectional_attention", false))
      throw r.error("use_bidirectional_attention", "is true: only causal Gemma models are supported");
    set_gemma_blocks(c);
    c.attention_scale = float(std::pow(double(r.int_or("query_pre_attn_scalar", 256)), -0.5));
    c.sliding_window = r.int_or("sliding_window", 4096);
    // Absent: the config class's defaults (Gemma 2 caps at 50 and 30); null: no capping.
    auto cap = [&](const char* key, double fallback) { return r.present(key) ? float(r.number_or(key, 0.0)) : float(fallback); };
    c.attention_softcap = cap("attn_logit_softcapping", v3_ ? 0.0 : 50.0);
    c.final_softcap = cap("final_logit_softcapping", v3_ ? 0.0 : 30.0);

    if (!read_layer_types(r, c)) {
      const int64_t pattern = v3_ ? r.int_or("sliding_window_pattern", 6) : 2;
      if (pattern == 0) throw r.error("sliding_window_pattern", "must be at least 1");
      set_pattern(c, pattern);
    }
    if (v3_) read_gemma3_rope(r, c);
  }

  // llama.cpp's converter keeps neither query_pre_attn_scalar, nor the layer pattern, nor Gemma 3's local
  // RoPE base; its loader derives them as here: the 27B models (Gemma 2: 46 layers, Gemma 3: 62) scale
  // scores by (hidden / heads)^-0.5, the others by head_dim^-0.5; every 2nd (6th) layer global; base 10000.
  void read_gguf(const GgufFile& g, const std::string& arch, ModelConfig& c) const override {
    set_gemma_blocks(c);
    const bool big = c.num_layers == (v3_ ? 62 : 46);
    c.attention_scale = float(std::pow(double(big ? c.hidden_size / c.num_heads : c.head_dim), -0.5));
    c.sliding_window = g.get_int(arch + ".attention.sliding_window").value_or(4096);
    c.attention_softcap = float(g.get_float(arch + ".attn_logit_softcapping").value_or(0.0));
    c.final_softcap = float(g.get_float(arch + ".final_logit_softcapping").value_or(0.0));
    set_pattern(c, std::max<int64_t>(1, g.get_int(arch + ".attention.sliding_window_pattern").value_or(v3_ ? 6 : 2)));
    if (v3_) {
      c.sliding_rope = RopeConfig{};
      c.sliding_rope->theta = g.get_float(arch + ".rope.freq_base_swa").value_or(10000.0);
    }
  }
  std::vector<std::pair<std::string, std::string>> gguf_layer_names() const override {
    return {{"post_attention_norm.weight", kPostAttentionNorm}, {"ffn_norm.weight", kPreMlpNorm}, {"post_ffw_norm.weight", kPostMlpNorm}};
  }
  float gguf_norm_shift(const std::string& hf_name) const override { return hf_name.ends_with("norm.weight") ? 1.0f : 0.0f; }

  void write_config(const ModelConfig& c, const ConfigField& field) const override {
    field("query_pre_attn_scalar", json_number(std::round(std::pow(double(c.attention_scale), -2.0))));
    field("attn_logit_softcapping", c.attention_softcap ? json_number(c.attention_softcap) : "null");
    field("final_logit_softcapping", c.final_softcap ? json_number(c.final_softcap) : "null");
    if (v3_) field("rope_local_base_freq", json_number(c.sliding_rope->theta));
  }

  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    const ModelConfig& c = b.config;
    L.attn_norm = b.vector("input_layernorm.weight", c.hidden_size);
    for (const char* norm : {kPostAttentionNorm, kPreMlpNorm, kPostMlpNorm})
      L.own.push_back({norm, b.vector(norm, c.hidden_size), kAttentionAndDense, false});
    bind_attention(b, L, {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .qk_norm = v3_});
    bind_dense_mlp(b, L);
    if (c.sliding_layers[size_t(b.layer)]) {
      L.window = c.sliding_window.value_or(0);
      L.rope_table = c.sliding_rope ? 1 : 0;
    }
  }

  void run_layer(LayerStep& s, Tensor& x) const override {
    s.rmsnorm(x, s.local.attn_norm, s.h);
    s.attention(s.h, s.proj);
    s.rmsnorm(s.proj, s.local.own_tensor(kPostAttentionNorm), s.proj);
    ops::add(s.ctx, x, s.proj);
    s.rmsnorm(x, s.local.own_tensor(kPreMlpNorm), s.h);
    s.mlp(s.h, s.proj);
    s.rmsnorm(s.proj, s.local.own_tensor(kPostMlpNorm), s.proj);
    ops::add(s.ctx, x, s.proj);
  }

 private:
  static void set_gemma_blocks(ModelConfig& c) {
    c.norm_weight_offset = 1.0f;
    c.embedding_scale = float(std::sqrt(double(c.hidden_size)));
    c.activation = Activation::GeluTanh;
  }
  static void set_pattern(ModelConfig& c, int64_t pattern) {
    c.sliding_layers.clear();
    for (int64_t l = 0; l < c.num_layers; ++l) c.sliding_layers.push_back((l + 1) % pattern != 0);
  }
  // Transformers 5: rope_parameters per layer type. Older configs: rope_theta and rope_scaling for the
  // global layers, rope_local_base_freq for the sliding ones.
  static void read_gemma3_rope(const ConfigReader& r, ModelConfig& c) {
    if (auto params = r.object("rope_parameters"); params && params->has("full_attention")) {
      const std::optional<ConfigReader> full = params->object("full_attention"), local = params->object("sliding_attention");
      c.rope = read_rope(r, full);
      if (!(full && full->has("rope_theta"))) c.rope.theta = r.number_or("rope_theta", 1000000.0);
      c.sliding_rope = read_rope(r, local);
      if (!(local && local->has("rope_theta"))) c.sliding_rope->theta = r.number_or("rope_local_base_freq", 10000.0);
    } else {
      c.rope = read_rope(r, r.object("rope_scaling"));
      if (!r.has("rope_theta")) c.rope.theta = 1000000.0;
      c.sliding_rope = RopeConfig{};
      c.sliding_rope->theta = r.number_or("rope_local_base_freq", 10000.0);
    }
  }

  bool v3_;
};

}  // namespace

const Architecture& gemma2() {
  static const Gemma a("Gemma2ForCausalLM", 2);
  return a;
}

const Architecture& gemma3() {
  static const Gemma a("Gemma3ForCausalLM", 3);
  return a;
}

}  // namespace ftllm::model
