// Rotary position embedding frequencies, computed in float32 the way Hugging Face computes them, so
// that cos/sin agree with transformers to the last bit or two.
#pragma once

#include <span>
#include <vector>

#include "../core/tensor.h"
#include "model_config.h"

namespace ftllm::model {

// inv_freq[i] for i < head_dim / 2, with the config's scaling (default, linear, llama3) applied.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

// cos/sin [T, head_dim / 2] for the positions of a batch.
void rope_tables(const std::vector<float>& inv_freq, std::span<const int64_t> positions, Tensor& cos, Tensor& sin);

}  // namespace ftllm::model
