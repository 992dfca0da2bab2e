// Rotary position embedding frequencies, computed in float32 the way Hugging Face computes them, so
// that cos/sin agree with transformers to the last bit or two.
#pragma once

#include <span>
#include <vector>

#include "../core/tensor.h"
#include "model_config.h"

namespace ftllm::model {

// inv_freq[i] for i < head_dim / 2, with the config's scaling (default, linear, llama3, yarn) applied.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

// What cos and sin are multiplied by: yarn's attention factor, 1 otherwise.
float rope_attention_factor(const RopeConfig& rope);
// DeepSeek's extra softmax scale under yarn: mscale(factor, mscale_all_dim)^2, 1 otherwise.
float yarn_softmax_scale(const RopeConfig& rope);

// cos/sin [T, head_dim / 2] for the positions of a batch, times `factor`.
void rope_tables(const std::vector<float>& inv_freq, std::span<const int64_t> positions, Tensor& cos, Tensor& sin,
                 float factor = 1.0f);

}  // namespace ftllm::model
