// Where a tensor's bytes live and where an op on it runs: host memory (the CPU kernels) or one CUDA
// device's memory (the CUDA kernels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// A place that can hold weights and run kernels.
struct DeviceInfo {
  std::string id;    // "numa:0", "cuda:0"; the names placement options use
  std::string name;  // human-readable: "NUMA node 0", "NVIDIA H200"
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
};

// The devices this machine offers, and why an expected kind is absent (for example the CUDA driver
// missing), so that status can tell the user rather than show an empty list.
struct DeviceReport {
  std::vector<DeviceInfo> devices;
  std::vector<std::string> notes;
};

// A model's weight and KV bytes on one device.
struct DeviceMemory {
  std::string device;  // "cpu", "cuda:0"
  uint64_t weight_bytes = 0, kv_bytes = 0;
};

}  // namespace ftllm
