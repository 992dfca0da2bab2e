// MistralForCausalLM: Llama's block with a sliding attention window on every layer when the config
// sets sliding_window.
#include "architecture.h"

namespace ftllm::model {

DecoderSpec mistral_spec(const ModelConfig&) {
  DecoderSpec s;
  s.sliding_window = true;
  return s;
}

}  // namespace ftllm::model
