// The tensors of a model directory (one safetensors file, a sharded set with its index, or any
// *.safetensors files), and binding them to the shapes an architecture expects.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "../core/tensor.h"
#include "dtype_rules.h"
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
  const std::map<std::string, StoredTensor>& tensors() const { return tensors_; }

  // Matrices are converted as these rules say, on `threads` threads, when matrix() binds them.
  void set_dtype_rules(DTypeRules rules, int threads);
  // Tensors the rules could not convert, and why (for the load log); "" when there were none.
  std::string conversion_notes() const;

  // A weight matrix after checking its shape: a view in its stored dtype (no copy) unless the rules
  // convert it. Pre-quantized checkpoints are read here too: FP8 (F8_E4M3 with weight_scale_inv
  // blocks) becomes fp8, AWQ (qweight, qzeros, scales) becomes int4g of its group size.
  // `rule_name` is the name the dtype rules see (a tied embedding is converted as the LM head it also is).
  Tensor matrix(const std::string& name, const std::vector<int64_t>& shape, const std::string& rule_name = "") const;
  // Rows [first_row, first_row + rows) of a stored tensor of `stored_shape` seen as a matrix (all but the
  // last dimension flattened): one expert of transformers 5's fused experts [E, 2I, H], for instance.
  Tensor matrix_rows(const std::string& name, const std::vector<int64_t>& stored_shape, int64_t first_row, int64_t rows,
                     const std::string& rule_name) const;
  // A matrix an architecture made from stored ones (gpt-oss's transposed experts), converted as the dtype
  // rules say for `rule_name`.
  Tensor converted(Tensor t, const std::string& rule_name) const;
  // A small vector (norm weight, bias) converted to float32.
  Tensor vector_f32(const std::string& name, int64_t n) const;
  // A small tensor of any shape (a convolution's taps) converted to float32.
  Tensor floats(const std::string& name, const std::vector<int64_t>& shape) const;

 private:
  const StoredTensor& get(const std::string& name, const std::vector<int64_t>& shape) const;
  Tensor stored_matrix(const std::string& name, const std::vector<int64_t>& shape) const;
  Tensor from_fp8_blocks(const StoredTensor& w, const std::vector<int64_t>& shape) const;
  Tensor from_awq(const std::string& prefix, const std::vector<int64_t>& shape) const;
  std::map<std::string, StoredTensor> tensors_;
  size_t file_bytes_ = 0;
  DTypeRules rules_;
  int threads_ = 1;
  mutable std::map<std::string, int> kept_;  // reason -> tensors left in their stored dtype
};

}  // namespace ftllm::model
