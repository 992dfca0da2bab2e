// The tensors of a model directory (one safetensors file, a sharded set with its index, or any
// *.safetensors files), and binding them to the shapes an architecture expects.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "../core/tensor.h"
#include "safetensors.h"

namespace ftllm::model {

class WeightStore {
 public:
  // Throws EngineError when the directory holds no weights or a file is unreadable or corrupt.
  static WeightStore open_directory(const std::string& dir);
  // Adds tensors directly (tests, and formats read elsewhere).
  void add(StoredTensor t) { tensors_[t.name] = std::move(t); }

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  size_t file_bytes() const { return file_bytes_; }

  // A view of a weight matrix in its stored dtype (no copy), after checking its shape.
  Tensor matrix(const std::string& name, const std::vector<int64_t>& shape) const;
  // A small vector (norm weight, bias) converted to float32.
  Tensor vector_f32(const std::string& name, int64_t n) const;

 private:
  const StoredTensor& get(const std::string& name, const std::vector<int64_t>& shape) const;
  std::map<std::string, StoredTensor> tensors_;
  size_t file_bytes_ = 0;
};

}  // namespace ftllm::model
