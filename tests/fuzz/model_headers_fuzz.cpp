// libFuzzer target for the two model-file header parsers (GGUF and safetensors). Any input must either
// parse or throw EngineError naming the problem: a crash, a sanitizer report, a hang or a huge allocation
// is a bug. The first input byte picks the parser; the rest is the file. Run by tests/fuzz/run.sh.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "model/gguf.h"
#include "model/safetensors.h"

namespace {

// The parsers read files by path; a memfd gives each input a path without touching the disk.
const std::string& memfd_path() {
  static const std::string path = "/proc/self/fd/" + std::to_string(memfd_create("fuzz-input", 0));
  return path;
}

void write_input(const uint8_t* data, size_t size) {
  int fd = std::stoi(memfd_path().substr(sizeof "/proc/self/fd/" - 1));
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  write_input(data + 1, size - 1);
  try {
    if (data[0] & 1) {
      auto g = ftllm::model::GgufFile::open(memfd_path());
      for (const auto& t : g.tensors()) (void)t.name.size();
    } else {
      auto tensors = ftllm::model::read_safetensors(memfd_path());
      // Touch each tensor's first and last byte: the parser promised they lie inside the file.
      volatile uint8_t sink = 0;
      for (const auto& [name, t] : tensors)
        if (t.bytes) sink = sink ^ static_cast<const uint8_t*>(t.data)[0] ^ static_cast<const uint8_t*>(t.data)[t.bytes - 1];
    }
  } catch (const ftllm::EngineError&) {
  }
  return 0;
}
