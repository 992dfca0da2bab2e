// Qwen2ForCausalLM (Qwen2, Qwen2.5): biases on q, k and v.
#include "../core/error.h"
#include "architecture.h"

namespace ftllm::model {

DecoderSpec qwen2_spec(const ModelConfig& c) {
  // Qwen2's windowed layers start at max_window_layers; no released checkpoint turns them on.
  if (c.sliding_window)
    throw EngineError("Qwen2 with use_sliding_window=true is not supported; set it to false in config.json");
  DecoderSpec s;
  s.qkv_bias = true;
  return s;
}

}  // namespace ftllm::model
