// LlamaForCausalLM: Llama 2 and 3, TinyLlama, SmolLM2. Optional biases from attention_bias and mlp_bias.
#include "architecture.h"

namespace ftllm::model {

DecoderSpec llama_spec(const ModelConfig& c) {
  DecoderSpec s;
  s.qkv_bias = s.o_bias = c.attention_bias;
  s.mlp_bias = c.mlp_bias;
  return s;
}

}  // namespace ftllm::model
