// Reads safetensors files over mmap: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range, then the data. Every field is checked against the file before
// any tensor is used, so a truncated or corrupt file fails its load with the reason.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../core/dtype.h"
#include "../core/mapped_file.h"
#include "../core/tensor.h"

namespace ftllm::model {

struct StoredTensor {
  std::string name;
  std::string dtype_name;      // as written in the file: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;  // empty for dtypes the engine does not compute with
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> owner;  // keeps `data` alive: the mapped file, or a buffer of converted values
};

// All tensors of one file, by name. Throws EngineError naming the file and the problem.
std::map<std::string, StoredTensor> read_safetensors(const std::string& path);

// Writes the tensors in order: float types as themselves, block types as U8 [rows, row bytes] with their
// dtype named in the metadata ({"format": "ftllm", NAME: DTYPE}), which read_safetensors maps back.
// Returns the file's size.
uint64_t write_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors);

}  // namespace ftllm::model
