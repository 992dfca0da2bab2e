// Qwen3ForCausalLM: per-head RMSNorm of q and k before RoPE; head_dim set in the config.
#include "architecture.h"

namespace ftllm::model {

namespace {

class Qwen3 final : public Architecture {
 public:
  Qwen3() : Architecture("Qwen3ForCausalLM") {}
  void read_config(const ConfigReader& r, ModelConfig&) const override {
    if (r.bool_or("use_sliding_window", false))
      throw r.error("use_sliding_window", "is true: windowed Qwen3 layers are not supported; set it to false");
  }
  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    const bool bias = b.config.attention_bias;
    bind_norms(b, L);
    bind_attention(b, L, {.qkv_bias = bias, .o_bias = bias, .qk_norm = true});
    bind_dense_mlp(b, L);
  }
};

}  // namespace

const Architecture& qwen3() {
  static const Qwen3 a;
  return a;
}

}  // namespace ftllm::model
