// LlamaForCausalLM: Llama 2 and 3, TinyLlama, SmolLM2. Optional biases from attention_bias and mlp_bias.
#include "architecture.h"

namespace ftllm::model {

namespace {

class Llama final : public Architecture {
 public:
  Llama() : Architecture("LlamaForCausalLM") {}
  void bind_layer(const LayerBinder& b, LayerWeights& L) const override {
    bind_norms(b, L);
    bind_attention(b, L, {.qkv_bias = b.config.attention_bias, .o_bias = b.config.attention_bias});
    bind_dense_mlp(b, L, b.config.mlp_bias);
  }
};

}  // namespace

const Architecture& llama() {
  static const Llama a;
  return a;
}

}  // namespace ftllm::model
