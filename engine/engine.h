// The engine's only face: everything the daemon and tests may call.
// No libuv, sockets, HTTP or API JSON on this side of the line.
#pragma once

#include <cstdint>
#include <string_view>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "load_options.h"
#include "scheduler/request.h"
#include "text/text_request.h"

namespace ftllm {

// A model resident in the engine, as listed by /v1/models and the admin status.
struct ModelInfo {
  std::string name;
  std::string source;
  std::string architecture;
  std::string layers;  // their kinds (model::describe_layers)
  std::string parent;  // a LoRA adapter's base model (source is then the adapter's directory); empty for a model
};

namespace model {
class LoraAdapter;
}

class ModelInstance;
struct BuiltPrompts;  // runner/text_generation.h

// ftllm-export: loads `source` (converting as its dtype options say) and writes it to out_dir as a
// directory that loads without converting again: model.safetensors, config.json, tokenizer, template.
struct ExportResult {
  double load_seconds = 0, write_seconds = 0;
  uint64_t bytes = 0;     // of model.safetensors
  std::string dtypes;     // what the tensors are stored in
  std::string notes;      // tensors the dtype options could not convert, and why
};
Status export_model(const ModelLoadOptions& source, const std::string& out_dir, ExportResult& result);

// A resident model as callers use it. Holding the handle keeps the model alive through an unload.
class ModelHandle {
 public:
  // With `adapter`, the handle serves the base model through that LoRA adapter, under the adapter's name.
  explicit ModelHandle(std::shared_ptr<ModelInstance> impl, std::shared_ptr<const model::LoraAdapter> adapter = nullptr)
      : impl_(std::move(impl)), adapter_(std::move(adapter)) {}
  const std::string& name() const;
  const std::string& parent() const;  // a LoRA adapter's base model; empty for a model itself
  const std::string& source() const;
  const std::string& architecture() const;
  int64_t context_length() const;

  // Throw nothing: a model without a tokenizer gives an error Status.
  Status tokenize(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t>& ids) const;
  Status detokenize(const std::vector<int32_t>& ids, bool skip_special, std::string& text) const;
  // The chat rendered with the model's template, as a generation's prompt would be.
  Status apply_chat_template(const ChatInput& input, std::string& prompt) const;

  // Embeddings: each input's (token ids) pooled vector, read by the model's batches beside its other
  // requests; `done` runs once, on the model's worker thread. A model that is no embedding model (it has no
  // sentence-transformers Pooling module or GGUF pooling_type) gives an error saying so.
  struct Embeddings {
    Status status;
    std::vector<std::vector<float>> vectors;
    size_t prompt_tokens = 0;
  };
  void embed(std::vector<std::vector<int32_t>> inputs, std::function<void(Embeddings)> done) const;
  bool is_embedding_model() const;
  Status embedding_support() const;  // ok, or why this model gives no embeddings
  int64_t hidden_size() const;  // an embedding's values

  void cancel(uint64_t choice_id) const;  // ends a choice at the next step (its text event finishes it)
  void fail_all(const std::string& message) const;  // every running and queued request ends with it
  using Load = ServingLoad;
  Load load() const;
  struct Footprint {
    uint64_t parameters = 0, weight_bytes = 0, kv_bytes = 0;
    std::string dtypes;  // "bfloat16", "float32", ...
    std::string kv_dtype;  // how the KV cache stores keys and values: "f16", "q8_0", ...
    std::string load_notes;  // tensors --dtype could not convert and why, how --device was taken; empty when none
    int64_t layers = 0;
    std::vector<DeviceMemory> memory;  // where the bytes above are, the host first
  };
  Footprint footprint() const;
  // Changes the model's compute threads live (between two steps); requests in flight carry on.
  void set_threads(int threads) const;
  // Moves layers between devices live (fastllm's --device syntax); an invalid spec changes nothing.
  // `note`, when given, says how the spec was taken where that differs from its words (numa on one node).
  Status set_placement(const std::string& device, std::string* note = nullptr) const;
  std::string placement() const;  // "cpu:0-29", "cpu:0-14 numa:0:15-29"

  // The LoRA adapters loaded onto the model (ftllmctl load-adapter), for status.
  struct Adapter {
    std::string name, path, targets;  // targets: "q_proj, v_proj"
    int rank = 0;
    uint64_t bytes = 0;
  };
  std::vector<Adapter> adapters() const;

 private:
  std::shared_ptr<ModelInstance> impl_;
  std::shared_ptr<const model::LoraAdapter> adapter_;
};

// A request the engine took, or refused before it started.
struct TextSubmission {
  Refusal refusal = Refusal::None;
  std::string error, param;            // when refused: what to tell the client, and the request field at fault
  std::shared_ptr<ModelHandle> model;  // the model serving it, kept alive through an unload until it ends
  std::vector<uint64_t> choice_ids;    // one per choice, for ModelHandle::cancel
  size_t prompt_tokens = 0;
};

// A request's prompts, built for the model it names (Engine::prepare).
struct PreparedText {
  std::shared_ptr<ModelInstance> model;  // null: no such model
  std::shared_ptr<const BuiltPrompts> prompts;
};

// Owns the resident models. Thread-safe: the daemon's loop thread and load threads may call it at once.
class Engine {
 public:
  Engine();
  ~Engine();

  // `loaded_name`, when given, receives the name the model serves under (the given one, or the one derived
  // from its path or repo id).
  Status load(const ModelLoadOptions& options, std::string* loaded_name = nullptr);
  Status unload(const std::string& name);
  // Every model, each followed by its LoRA adapters.
  std::vector<ModelInfo> models() const;

  // A PEFT LoRA adapter (a directory with adapter_config.json and adapter_model.safetensors) loaded onto the
  // resident model `base` without a restart, served under `name` (requests name it as their model) beside
  // the base and its other adapters, rows of each in the same batches. An adapter that does not fit the base
  // is refused with the reason. Unloading lets requests already running with it finish.
  Status load_adapter(const std::string& base, const std::string& path, const std::string& name);
  Status unload_adapter(const std::string& name);

  // The named resident model, or null.
  std::shared_ptr<ModelHandle> model(const std::string& name) const;

  // The one call of a generation: the request as the API layer has it; each choice's text comes to
  // `callback` (on the model's worker thread) until its finished event. prepare() then submit() is the
  // same in two parts: prepare does what grows with the request's size (its prompts rendered and
  // tokenized), on any thread, so a server's event loop can hand it to a worker and only submit itself.
  TextSubmission submit(const TextRequest& request, TextCallback callback);
  PreparedText prepare(const TextRequest& request) const;
  TextSubmission submit(const TextRequest& request, const PreparedText& prepared, TextCallback callback);

  DeviceReport devices() const;
  bool cuda_built() const;

 private:
  // The model serving `name` and, when the name is an adapter's, the adapter; call with mu_ held.
  std::pair<std::shared_ptr<ModelInstance>, std::shared_ptr<const model::LoraAdapter>> find(const std::string& name) const;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ModelInstance>> models_;
  std::set<std::string> adapters_loading_;  // names of adapters being read
};

const char* engine_version();

}  // namespace ftllm
