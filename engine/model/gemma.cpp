// Gemma3ForCausalLM (Gemma 3 text models: gemma-3-270m, 1b): norms that scale by 1 + w, the embedding
// times sqrt(hidden_size), GeGLU MLPs (tanh-approximated GELU), a norm before and after both attention
// and the MLP, q/k norms, scores scaled by query_pre_attn_scalar^-0.5, and sliding-window layers
// (layer_types, or every sliding_window_pattern-th layer global) with a RoPE of their own.
#include <cmath>

#include "../core/json_writer.h"
#include "../ops/ops.h"
#include "architecture.h"
#include "decoder.h"

namespace ftllm::model {

namespace {

const char* const kPostAttentionNorm = "post_attention_layernorm.weight";
const char* const kPreMlpNorm = "pre_feedforward_layernorm.weight";
const char* const kPostMlpNorm = "post_feedforward_layernorm.weight";

class Gemma3 final : public Architecture {
 public:
  Gemma3() : Architecture("Gemma3ForCausalLM") {}

  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
      if (r.has(key)) throw r.error(key, "is set: logit soft-capping is not supported for Gemma 3; remove it or set it to null");
    if (r.bool_or("use_bidirectional_attention", false))
      throw r.error("use_bidirectional_attention", "is true: only causal Gemma 3 models are supported");
    c.norm_weight_offset = 1.0f;
    c.embedding_scale = float(std::sqrt(double(c.hidden_size)));
    c.attention_scale = float(std::pow(double(r.int_or("query_pre_attn_scalar", 256)), -0.5));
    c.sliding_window = r.int_or("sliding_window", 4096);

    // Which layers slide: layer_types, or (older configs) all but every sliding_window_pattern-th.
    std::vector<bool>& sliding = c.sliding_layers;
    if (r.has("layer_types")) {
      for (const std::string& type : r.string_list("layer_types")) {
        if (type != "sliding_attention" && type != "full_attention")
          throw r.error("layer_types", "holds \"" + type + "\"; Gemma 3 layers are sliding_attention or full_attention");
        sliding.push_back(type == "sliding_attention");
      }
      if (int64_t(sliding.size()) != c.num_layers) throw r.error("layer_types", "must name one type per layer");
    } else {
      const int64_t pattern = r.int_or("sliding_window_pattern", 6);
      if (pattern == 0) throw r.error("sliding_window_pattern", "must be at least 1");
      for (int64_t l = 0; l < c.num_layers; ++l) sliding.push_back((l + 1) % pattern != 0);
    }

    // Transformers 5: rope_parameters per layer type. Older configs: rope_theta and rope_scaling for the
    // global layers, rope_local_base_freq for the sliding ones.
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

  void write_config(const ModelConfig& c, const ConfigField& field) const override {
    field("query_pre_attn_scalar", json_number(std::round(std::pow(double(c.attention_scale), -2.0))));
    field("sliding_window", std::to_string(c.sliding_window.value_or(0)));
    std::string types;
    for (bool sliding : c.sliding_layers) types += std::string(types.empty() ? "" : ", ") + (sliding ? "\"sliding_attention\"" : "\"full_attention\"");
    field("layer_types", "[" + types + "]");
    field("rope_local_base_freq", json_number(c.sliding_rope ? c.sliding_rope->theta : 10000.0));
  }

  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    const ModelConfig& c = b.config;
    L.attn_norm = b.vector("input_layernorm.weight", c.hidden_size);
    for (const char* norm : {kPostAttentionNorm, kPreMlpNorm, kPostMlpNorm})
      L.own.push_back({norm, b.vector(norm, c.hidden_size), kAttentionAndDense, false});
    bind_attention(b, L, {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .qk_norm = true});
    bind_dense_mlp(b, L);
    if (c.sliding_layers[size_t(b.layer)]) {
      L.window = c.sliding_window.value_or(0);
      L.rope_table = 1;
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
};

}  // namespace

const Architecture& gemma3() {
  static const Gemma3 a;
  return a;
}

}  // namespace ftllm::model
