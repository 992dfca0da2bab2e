// A GGUF file as a model: its metadata as a ModelConfig and its tensors under Hugging Face names, so the
// same architecture code runs it. Quantised tensors are dequantised to float32 while loading (the
// quantisation issue replaces this with kernels that compute on the blocks).
#pragma once

#include <string>

#include "model_config.h"
#include "weights.h"

namespace ftllm::model {

struct GgufModel {
  ModelConfig config;
  WeightStore weights;
};

// Throws EngineError naming what is missing or unsupported.
GgufModel load_gguf_model(const std::string& path);

}  // namespace ftllm::model
