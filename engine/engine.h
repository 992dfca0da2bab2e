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

#include "core/device.h"
#include "load_options.h"
#include "scheduler/request.h"

namespace ftllm {

// What a call into the engine produced: ok, or a message a person can act on.
struct Status {
  bool ok = true;
  std::string message;
  static Status success() { return {}; }
  static Status error(std::string msg) { return {false, std::move(msg)}; }
};

// A model resident in the engine, as listed by /v1/models and the admin status.
struct ModelInfo {
  std::string name;
  std::string source;
  std::string architecture;
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
    std::vector<DeviceMemory> memory;  // where the bytes above are, the host first
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

  DeviceReport devices() const;
  bool cuda_built() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ModelInstance>> models_;
};

const char* engine_version();

}  // namespace ftllm
