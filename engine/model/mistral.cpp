// MistralForCausalLM: Llama's block with a sliding attention window on every layer when the config
// sets sliding_window.
#include "architecture.h"

namespace ftllm::model {

namespace {

class Mistral final : public Architecture {
 public:
  Mistral() : Architecture("MistralForCausalLM") {}
  void read_config(const ConfigReader& r, ModelConfig& c) const override {
    if (r.has("sliding_window")) c.sliding_window = r.int_or("sliding_window", 0);
  }
  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    bind_norms(b, L);
    bind_attention(b, L, {});
    bind_dense_mlp(b, L);
    L.window = b.config.sliding_window.value_or(0);
  }
};

}  // namespace

const Architecture& mistral() {
  static const Mistral a;
  return a;
}

}  // namespace ftllm::model
