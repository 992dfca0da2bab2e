// Reading files: a whole file mapped read-only, or a small one read into a string.
// A mapped file: Weights are used in place from the mapping, never copied when
// their dtype is the one computed with.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

namespace ftllm {

class MappedFile {
 public:
  // Throws EngineError naming the path when the file cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return static_cast<const unsigned char*>(data_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Whether [p, p + bytes) lies in one live mapped file.
  static bool contains(const void* p, size_t bytes);
  // Unmaps the whole pages of [p, p + bytes) when that range lies in a live mapped file (a weight copied
  // elsewhere), so they stop counting as the process's memory; anything else is left alone.
  static void release_pages(const void* p, size_t bytes);

 private:
  MappedFile() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// A small file's whole contents (configs, tokenizer.json, templates); throws EngineError naming it.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace ftllm
