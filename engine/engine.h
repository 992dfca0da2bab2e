// The engine's only face: everything the daemon and tests may call.
// No libuv, sockets, HTTP or API JSON on this side of the line.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "scheduler/request.h"

namespace ftllm {

// What a call into the engine produced: ok, or a message a person can act on.
struct Status {
  bool ok = true;
  std::string message;
  static Status success() { return {}; }
  static Status error(std::string msg) { return {false, std::move(msg)}; }
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

// A model resident in the engine, as listed by /v1/models and the admin status.
struct ModelInfo {
  std::string name;
  std::string source;
  std::string architecture;
};

struct ModelLoadOptions {
  std::string path;            // a Hugging Face model directory (config.json, *.safetensors)
  std::string name;            // defaults to the directory's name
  int threads = 0;             // 0: one per core
  int64_t context_length = 0;  // 0: the model's own maximum, capped at 8192
  int32_t max_sequences = 8;
  std::string chat_template;   // a file that overrides the model's own template (--chat_template)
};

class ModelInstance;

// Owns the resident models. Thread-safe: the daemon's loop thread and load threads may call it at once.
class Engine {
 public:
  Engine();
  ~Engine();

  Status load(const ModelLoadOptions& options);
  Status unload(const std::string& name);
  std::vector<ModelInfo> models() const;

  // Generates for each request with the named model, batched; results in request order.
  Status generate(const std::string& model, std::vector<GenerationRequest> requests,
                  std::vector<GenerationResult>& results);

  DeviceReport devices() const;
  bool cuda_built() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ModelInstance>> models_;
};

const char* engine_version();

}  // namespace ftllm
