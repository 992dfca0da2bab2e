// The engine's only face: everything the daemon and tests may call.
// No libuv, sockets, HTTP or API JSON on this side of the line.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
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

// How far a load has come: phase ("reading", "converting", "binding", "ready") and bytes of the weight
// files handled out of their total. Called on the loading thread.
using LoadProgress = std::function<void(const std::string& phase, uint64_t done, uint64_t total)>;

struct ModelLoadOptions {
  std::string path;            // a Hugging Face directory, a .gguf file, or "org/name" in the Hugging Face cache
  std::string name;            // defaults to the directory's name
  int threads = 0;             // 0: one per core
  int64_t context_length = 0;  // 0: the model's own maximum, capped at 8192
  int32_t max_sequences = 8;
  std::string chat_template;   // a file that overrides the model's own template (--chat_template)
  std::string cache_dir;       // where to find "org/name" models (default $HF_HOME/hub), offline
  std::string device = "cpu";  // "cpu", "numa", "numa:N", or {'cpu':1,'numa:0':1} to split the layers
  // Compute dtypes (fastllm's --dtype, --moe_dtype, --dtype_config): "auto" keeps what the files store.
  std::string dtype = "auto", moe_dtype = "auto";
  std::string dtype_config;    // a JSON file of {"key": REGEX, "dtype": NAME} rules
  std::string kernels = "auto";  // "scalar" (the reference kernels), "avx2", or the fastest the CPU runs
  // Mixture-of-experts models (fastllm's --moe_experts, --moe_device, --cuda_se): routed experts per
  // token (0: the model's num_experts_per_tok); where the experts run ("cpu", or "numa": their rows split
  // over the NUMA nodes); whether shared experts stay on the GPU (needs a CUDA device).
  int moe_experts = 0;
  std::string moe_device = "cpu";
  bool cuda_se = false;
  // The share of a GPU's free memory a load may take for its layers' weights and KV pages; the KV cache
  // shrinks (fewer sequences at full context) to fit it, down to one sequence.
  double gpu_memory = 0.9;
  LoadProgress progress;       // optional
};

class ModelInstance;

// ftllmctl export: loads `source` (converting as its dtype options say) and writes it to out_dir as a
// directory that loads without converting again: model.safetensors, config.json, tokenizer, template.
struct ExportResult {
  double load_seconds = 0, write_seconds = 0;
  uint64_t bytes = 0;     // of model.safetensors
  std::string dtypes;     // what the tensors are stored in
  std::string notes;      // tensors the dtype options could not convert, and why
};
Status export_model(const ModelLoadOptions& source, const std::string& out_dir, ExportResult& result);

// Called on the model's worker thread (or at once, on the caller's, for a request refused outright);
// must not block.
using GenerationCallback = std::function<void(const GenerationEvent&)>;

// A chat to render with a model's template: JSON texts as OpenAI requests carry them.
struct ChatInput {
  std::string messages_json = "[]";  // [{"role": ..., "content": ...}, ...]
  std::string tools_json;            // empty: no tools
  bool add_generation_prompt = true;
  std::string kwargs_json;           // chat_template_kwargs object ({"enable_thinking": false}); empty for none
};

// Incremental detokenisation for streaming: never splits a UTF-8 character; the pieces add up to the
// full decode.
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string feed(int32_t token) = 0;
  virtual std::string finish() = 0;
};

// A resident model as callers use it. Holding the handle keeps the model alive through an unload.
class ModelHandle {
 public:
  explicit ModelHandle(std::shared_ptr<ModelInstance> impl) : impl_(std::move(impl)) {}
  const std::string& name() const;
  const std::string& source() const;
  const std::string& architecture() const;
  int64_t context_length() const;
  std::vector<int32_t> eos_token_ids() const;

  bool has_tokenizer() const;
  // Throw nothing: a model without a tokenizer gives an error Status.
  Status tokenize(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t>& ids) const;
  Status detokenize(const std::vector<int32_t>& ids, bool skip_special, std::string& text) const;
  std::unique_ptr<TextStream> text_stream(bool skip_special) const;  // null without a tokenizer
  // The bytes one token stands for (possibly part of a UTF-8 character); empty without a tokenizer.
  std::string token_bytes(int32_t id) const;
  Status apply_chat_template(const ChatInput& input, std::string& prompt) const;
  const std::string& chat_template_source() const;  // empty without a template

  uint64_t submit(GenerationRequest request, GenerationCallback callback) const;
  void cancel(uint64_t id) const;
  void fail_all(const std::string& message) const;  // every running and queued request ends with it
  struct Load {
    size_t running = 0, waiting = 0;
    int64_t kv_blocks_used = 0, kv_blocks_total = 0;
    int threads = 0;
    double tokens_per_second = 0;  // generated over the last 10 seconds
  };
  Load load() const;
  struct Footprint {
    uint64_t parameters = 0, weight_bytes = 0, kv_bytes = 0;
    std::string dtypes;  // "bfloat16", "float32", ...
    std::string load_notes;  // tensors --dtype could not convert and why, how --device was taken; empty when none
    int64_t layers = 0;
    struct OnDevice {
      std::string device;  // "cpu", "cuda:0"
      uint64_t weight_bytes = 0, kv_bytes = 0;
    };
    std::vector<OnDevice> memory;  // where the bytes above are, the host first
  };
  Footprint footprint() const;
  // Changes the model's compute threads live (between two steps); requests in flight carry on.
  void set_threads(int threads) const;
  // Moves layers between devices live (fastllm's --device syntax); an invalid spec changes nothing.
  Status set_placement(const std::string& device) const;
  std::string placement() const;  // "cpu:0-29", "cpu:0-14 numa:0:15-29"

 private:
  std::shared_ptr<ModelInstance> impl_;
};

// Owns the resident models. Thread-safe: the daemon's loop thread and load threads may call it at once.
class Engine {
 public:
  Engine();
  ~Engine();

  Status load(const ModelLoadOptions& options);
  Status unload(const std::string& name);
  std::vector<ModelInfo> models() const;

  // The named resident model, or null.
  std::shared_ptr<ModelHandle> model(const std::string& name) const;

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
