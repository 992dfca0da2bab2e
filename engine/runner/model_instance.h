// One resident model, put together from its parts: what the loader read (weights, config, tokenizer and
// template), its KV pool, the layout of its parts over devices and threads, and the runner whose worker
// thread serves its requests. Nothing here is shared between models, so one can be unloaded while
// another serves.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "../grammar/output_grammar.h"
#include "../kvcache/kv_cache.h"
#include "device_layout.h"
#include "loader.h"
#include "runner.h"

namespace ftllm {

class ModelInstance {
 public:
  // Throws EngineError with a reason a person can act on.
  static std::unique_ptr<ModelInstance> load(const ModelLoadOptions& options);
  ~ModelInstance();  // the runner first: it cancels what is running and stops the worker

  const ModelLoadOptions& options() const { return loaded_.options; }
  const model::DecoderModel& model() const { return *loaded_.model; }
  const model::ModelConfig& config() const { return loaded_.model->config(); }
  const ModelText& text() const { return loaded_.text; }
  size_t weight_file_bytes() const { return loaded_.weight_file_bytes; }
  int64_t context_length() const { return context_; }
  const std::string& dtypes() const { return loaded_.model->dtypes(); }
  uint64_t kv_bytes() const { return kv_.bytes(); }
  std::string load_notes() const { return notes_.text(); }  // what --dtype could not convert, placement notes
  std::vector<DeviceMemory> memory_by_device() const { return layout_.memory(); }
  const cpu::Kernels& kernels() const { return layout_.kernels(); }
  Placement placement() const { return runner_->placement(); }
  const std::optional<Pooling>& pooling() const { return loaded_.pooling; }
  const std::string& pooling_problem() const { return loaded_.pooling_problem; }

  Runner& runner() { return *runner_; }

  // LoRA adapters loaded onto this model, by name. load_adapter throws EngineError saying why an adapter
  // does not fit; the model and its other adapters serve on either way.
  std::shared_ptr<const model::LoraAdapter> load_adapter(const std::string& path, const std::string& name);
  bool unload_adapter(const std::string& name);  // false when none has that name
  std::shared_ptr<const model::LoraAdapter> adapter(const std::string& name) const;
  std::vector<std::shared_ptr<const model::LoraAdapter>> adapters() const;
  // The compiler of output grammars for this model's vocabulary, built on first use (thread-safe).
  const grammar::GrammarCompiler& grammars() const;

 private:
  explicit ModelInstance(LoadedModel loaded);

  LoadedModel loaded_;
  const int64_t context_;
  LoadNotes notes_;
  kvcache::KvPool kv_;
  DeviceLayout layout_;
  mutable std::mutex adapters_mu_;
  std::map<std::string, std::shared_ptr<const model::LoraAdapter>> adapters_;
  mutable std::once_flag grammars_once_;
  mutable std::unique_ptr<grammar::GrammarCompiler> grammars_;
  std::unique_ptr<Runner> runner_;  // last: its worker uses everything above
};

}  // namespace ftllm
