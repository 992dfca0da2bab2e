// Rotary position embedding frequencies, computed in float32 the way Hugging Face computes them, so
// that cos/sin agree with transformers to the last bit or two.
#pragma once

#include <span>
#include <vector>

#include "../core/tensor.h"
#include "model_config.h"

namespace ftllm::model {

// inv_freq[i] for i < rotary_dim / 2 (the rotated part of a head), with the config's scaling (default,
// linear, llama3, yarn, longrope's short factors or `long_factors`) applied.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim, bool long_factors = false);

// What cos and sin are multiplied by: yarn's attention factor, 1 otherwise.
float rope_attention_factor(const RopeConfig& rope);
// DeepSeek's extra softmax scale under yarn: mscale(factor, mscale_all_dim)^2, 1 otherwise.
float yarn_softmax_scale(const RopeConfig& rope);

// cos/sin [T, inv_freq.size()] for the positions of a batch, times `factor`. With `long_inv_freq`, positions
// from `long_from` on rotate by those (longrope's long factors past the pretrained context: transformers
// switches a whole forward pass to them once its sequence outgrows that context; per position here, so
// a sequence's cached keys never change).
void rope_tables(const std::vector<float>& inv_freq, std::span<const int64_t> positions, Tensor& cos, Tensor& sin,
                 float factor = 1.0f, const std::vector<float>* long_inv_freq = nullptr, int64_t long_from = 0);

}  // namespace ftllm::model
