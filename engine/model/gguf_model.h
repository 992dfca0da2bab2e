// A GGUF file as a model: its metadata as a ModelConfig and its tensors under Hugging Face names, so the
// same architecture code runs it. Quantised tensors are dequantised to float32 while loading (the
// quantisation issue replaces this with kernels that compute on the blocks).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model_config.h"
#include "weights.h"

namespace ftllm::model {

struct GgufModel {
  ModelConfig config;
  WeightStore weights;
  uint64_t file_bytes = 0;  // every part of a split set
};

// Throws EngineError naming what is missing or unsupported. `path` may be the first part of a split set.
// `progress` (optional) hears bytes of tensor data converted so far, out of the file's total.
GgufModel load_gguf_model(const std::string& path,
                          const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr);

}  // namespace ftllm::model
