// Qwen2ForCausalLM (Qwen2, Qwen2.5): biases on q, k and v.
#include "architecture.h"

namespace ftllm::model {

namespace {

class Qwen2 final : public Architecture {
 public:
  Qwen2() : Architecture("Qwen2ForCausalLM") {}
  void read_config(const ConfigReader& r, ModelConfig&) const override {
    // Qwen2's windowed layers start at max_window_layers; no released checkpoint turns them on.
    if (r.bool_or("use_sliding_window", false))
      throw r.error("use_sliding_window", "is true: windowed Qwen2 layers are not supported; set it to false");
  }
  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    bind_norms(b, L);
    bind_attention(b, L, {.qkv_bias = true});
    bind_dense_mlp(b, L);
  }
};

}  // namespace

const Architecture& qwen2() {
  static const Qwen2 a;
  return a;
}

}  // namespace ftllm::model
