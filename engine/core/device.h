// Where a tensor's bytes live and where an op on it runs: host memory (the CPU kernels) or one CUDA
// device's memory (the CUDA kernels).
#pragma once

#include <string>

namespace ftllm {

struct Device {
  enum class Kind : unsigned char { Cpu, Cuda };
  Kind kind = Kind::Cpu;
  int index = 0;  // the CUDA ordinal; 0 for the host

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {Kind::Cuda, index}; }
  bool is_cuda() const { return kind == Kind::Cuda; }
  bool operator==(const Device&) const = default;
  std::string name() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }
};

}  // namespace ftllm
