// Reads GGUF files (versions 2 and 3) over mmap, and split sets of them: metadata, tensor directory,
// tensor data. Every count, length and offset is checked against the file, so a truncated or corrupt file
// fails its load.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "../core/mapped_file.h"

namespace ftllm::model {

struct GgufValue {
  // Scalars widen to int64, uint64 or double; arrays keep strings or numbers (as double).
  std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<std::string>, std::vector<double>> v;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous dimension
  uint32_t type = 0;
  const void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<MappedFile> file;  // the mapping `data` lies in (a split set's part)
  int64_t numel() const;
};

class GgufFile {
 public:
  // Throws EngineError naming the file and what is wrong with it. A split set (gguf-split's
  // NAME-00001-of-0000N.gguf) opens from its first part: the others are read and checked with it.
  static GgufFile open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::shared_ptr<MappedFile>& file() const { return file_; }
  uint64_t bytes() const { return bytes_; }  // of every part
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* tensor(const std::string& name) const;

  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  const std::vector<std::string>* get_strings(const std::string& key) const;
  const std::vector<double>* get_numbers(const std::string& key) const;  // an array of numbers or booleans

 private:
  std::shared_ptr<MappedFile> file_;
  uint64_t bytes_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
};

// A GGUF v3 file holding these metadata keys and no tensors (ftllmctl export keeps a GGUF model's
// vocabulary this way, for GgufFile::open and the tokenizer to read back).
void write_gguf_metadata(const std::string& path, const std::vector<std::pair<std::string, const GgufValue*>>& keys);

}  // namespace ftllm::model
