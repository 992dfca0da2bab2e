#include "engine.h"

#include <mutex>

#include "core/error.h"
#include "model/lora.h"
#include "cpu/numa_topology.h"
#include "ftllm_version.h"
#include "runner/model_instance.h"
#include "runner/placement.h"
#include "runner/text_generation.h"
#include "text/prompt.h"
#ifdef FTLLM_WITH_CUDA
#include "cuda/cuda_devices.h"
#endif

namespace ftllm {

const std::string& ModelHandle::name() const { return adapter_ ? adapter_->name() : impl_->options().name; }
const std::string& ModelHandle::parent() const {
  static const std::string none;
  return adapter_ ? impl_->options().name : none;
}
const std::string& ModelHandle::source() const { return impl_->options().path; }
const std::string& ModelHandle::architecture() const { return impl_->config().architecture; }
int64_t ModelHandle::context_length() const { return impl_->context_length(); }

Status ModelHandle::tokenize(std::string_view text, bool add_special, bool parse_special,
                             std::vector<int32_t>& ids) const {
  if (!impl_->text().tokenizer) return Status::error(ModelText::no_tokenizer(name()));
  ids = impl_->text().tokenizer->encode(text, add_special, parse_special);
  return Status::success();
}

Status ModelHandle::detokenize(const std::vector<int32_t>& ids, bool skip_special, std::string& text) const {
  const tokenizer::Tokenizer* t = impl_->text().tokenizer.get();
  if (!t) return Status::error(ModelText::no_tokenizer(name()));
  for (int32_t id : ids)
    if (id < 0 || id >= t->vocab_size())
      return Status::error("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(t->vocab_size()));
  text = t->decode(ids, skip_special);
  return Status::success();
}

Status ModelHandle::apply_chat_template(const ChatInput& input, std::string& prompt) const {
  return text::render_chat(impl_->text(), name(), input, prompt);
}

bool ModelHandle::is_embedding_model() const { return impl_->pooling().has_value(); }
int64_t ModelHandle::hidden_size() const { return impl_->config().hidden_size; }

Status ModelHandle::embedding_support() const {
  if (impl_->pooling()) return Status::success();
  return Status::error(impl_->pooling_problem().empty()
                           ? "model " + name() + " is not an embedding model (it has no sentence-transformers Pooling module "
                             "in modules.json, nor a GGUF pooling_type); load an embedding model such as Qwen3-Embedding"
                           : "model " + name() + " cannot give embeddings: " + impl_->pooling_problem());
}

void ModelHandle::embed(std::vector<std::vector<int32_t>> inputs, std::function<void(Embeddings)> done) const {
  if (Status s = embedding_support(); !s.ok) return done({s, {}, 0});
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].empty()) return done({Status::error("input " + std::to_string(i) + " is empty"), {}, 0});
  if (inputs.empty()) return done({Status::error("no input to embed"), {}, 0});
  // The inputs run as requests of their own (batched like any); the last to finish answers.
  struct Gather {
    std::mutex mu;
    Embeddings out;
    size_t left;
    std::function<void(Embeddings)> done;
  };
  auto gather = std::make_shared<Gather>();
  gather->out.vectors.resize(inputs.size());
  gather->left = inputs.size();
  gather->done = std::move(done);
  for (const auto& in : inputs) gather->out.prompt_tokens += in.size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    GenerationRequest r;
    r.prompt = std::move(inputs[i]);
    r.embed = impl_->pooling();
    r.max_tokens = 1;
    r.adapter = adapter_;
    impl_->runner().submit(std::move(r), [gather, i](const GenerationEvent& e) {
      if (!e.finished) return;
      std::unique_lock lock(gather->mu);
      if (e.result.finish == FinishReason::Error && gather->out.status.ok)
        gather->out.status = Status::error("input " + std::to_string(i) + ": " + e.result.error);
      else if (e.result.finish == FinishReason::Cancelled && gather->out.status.ok)
        gather->out.status = Status::error("the model was unloaded");
      gather->out.vectors[i] = e.result.embedding;
      if (--gather->left > 0) return;
      lock.unlock();
      gather->done(std::move(gather->out));
    });
  }
}

void ModelHandle::cancel(uint64_t choice_id) const { impl_->runner().cancel(choice_id); }
void ModelHandle::fail_all(const std::string& message) const { impl_->runner().fail_all(message); }
void ModelHandle::set_threads(int threads) const { impl_->runner().set_threads(threads); }

Status ModelHandle::set_placement(const std::string& device, std::string* note) const {
  try {
    Placement placement = Placement::parse(device, impl_->config().num_layers, note);
    for (const LayerRange& r : placement.ranges())
      if (r.device.kind == PlacedDevice::Kind::TensorParallel && !impl_->adapters().empty())
        return Status::error("LoRA adapters are loaded onto " + impl_->options().name +
                             " and need whole layers: unload them before splitting layers over devices");
    impl_->runner().set_placement(std::move(placement));
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
  return Status::success();
}

std::string ModelHandle::placement() const { return impl_->placement().to_string(); }

std::vector<ModelHandle::Adapter> ModelHandle::adapters() const {
  std::vector<Adapter> out;
  for (const auto& a : impl_->adapters()) out.push_back({a->name(), a->path(), a->targets(), a->rank(), a->bytes()});
  return out;
}

ModelHandle::Load ModelHandle::load() const { return impl_->runner().load(); }

ModelHandle::Footprint ModelHandle::footprint() const {
  return {impl_->model().parameter_count(), impl_->model().weight_bytes(), impl_->kv_bytes(), impl_->dtypes(),
          impl_->options().kv_dtype, impl_->load_notes(), impl_->config().num_layers, impl_->memory_by_device()};
}

Engine::Engine() = default;
Engine::~Engine() = default;

Status Engine::load(const ModelLoadOptions& o, std::string* loaded_name) {
  std::shared_ptr<ModelInstance> instance;
  try {
    instance = ModelInstance::load(o);
  } catch (const std::exception& e) {
    return Status::error("cannot load " + o.path + ": " + e.what());
  }
  std::lock_guard lock(mu_);
  const std::string& name = instance->options().name;
  if (models_.count(name)) return Status::error("a model named " + name + " is already loaded; unload it or pick another name");
  if (find(name).second) return Status::error("a LoRA adapter is named " + name + "; unload it or pick another name");
  if (loaded_name) *loaded_name = name;
  models_[name] = std::move(instance);
  return Status::success();
}

Status Engine::unload(const std::string& name) {
  std::shared_ptr<ModelInstance> gone;  // freed outside the lock
  std::lock_guard lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end())
    return Status::error(find(name).second ? name + " is a LoRA adapter; unload it with unload-adapter" : "no model named " + name + " is loaded");
  gone = std::move(it->second);
  models_.erase(it);
  return Status::success();
}

std::pair<std::shared_ptr<ModelInstance>, std::shared_ptr<const model::LoraAdapter>> Engine::find(const std::string& name) const {
  if (auto it = models_.find(name); it != models_.end()) return {it->second, nullptr};
  for (auto& [base, m] : models_)
    if (auto a = m->adapter(name)) return {m, a};
  return {};
}

std::shared_ptr<ModelHandle> Engine::model(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto [instance, adapter] = find(name);
  return instance ? std::make_shared<ModelHandle>(instance, adapter) : nullptr;
}

std::vector<ModelInfo> Engine::models() const {
  std::lock_guard lock(mu_);
  std::vector<ModelInfo> out;
  for (auto& [name, m] : models_) {
    out.push_back({name, m->options().path, m->config().architecture, model::describe_layers(m->config()), ""});
    for (const auto& a : m->adapters()) out.push_back({a->name(), a->path(), m->config().architecture, "LoRA r" + std::to_string(a->rank()) + " (" + a->targets() + ")", name});
  }
  return out;
}

Status Engine::load_adapter(const std::string& base, const std::string& path, const std::string& name) {
  if (name.empty()) return Status::error("an adapter needs a name (--name)");
  std::shared_ptr<ModelInstance> instance;
  {
    std::lock_guard lock(mu_);
    auto [serving, adapter] = find(base);
    if (!serving) return Status::error("no model named " + base + " is loaded; load the base model first");
    if (adapter) return Status::error(base + " is itself a LoRA adapter; load adapters onto its base model");
    if (find(name).first || adapters_loading_.count(name))
      return Status::error("the name " + name + " is taken by a loaded model or adapter; unload it or pick another name");
    instance = serving;
    adapters_loading_.insert(name);  // the name stays ours while the files are read, outside the lock
  }
  Status status = Status::success();
  try {
    instance->load_adapter(path, name);
  } catch (const std::exception& e) {
    status = Status::error("cannot load adapter " + path + " onto " + base + ": " + e.what());
  }
  std::lock_guard lock(mu_);
  adapters_loading_.erase(name);
  return status;
}

Status Engine::unload_adapter(const std::string& name) {
  std::lock_guard lock(mu_);
  auto [instance, adapter] = find(name);
  if (!adapter) return Status::error(instance ? name + " is a model, not an adapter; unload it with unload"
                                              : "no LoRA adapter named " + name + " is loaded");
  instance->unload_adapter(name);
  return Status::success();
}

PreparedText Engine::prepare(const TextRequest& request) const {
  PreparedText prepared;
  {
    std::lock_guard lock(mu_);
    prepared.model = find(request.model).first;
  }
  if (prepared.model) prepared.prompts = std::make_shared<const BuiltPrompts>(build_prompts(*prepared.model, request));
  return prepared;
}

TextSubmission Engine::submit(const TextRequest& request, TextCallback callback) {
  return submit(request, prepare(request), std::move(callback));
}

TextSubmission Engine::submit(const TextRequest& request, const PreparedText& prepared, TextCallback callback) {
  TextSubmission out;
  std::shared_ptr<ModelInstance> instance;
  std::shared_ptr<const model::LoraAdapter> adapter;
  {
    std::lock_guard lock(mu_);
    std::tie(instance, adapter) = find(request.model);
  }
  if (!instance) {
    out.refusal = Refusal::ModelNotFound;
    out.error = "no model named " + request.model + " is loaded";
    out.param = "model";
    return out;
  }
  if (const size_t waiting = instance->runner().load().waiting; request.max_waiting && waiting >= request.max_waiting) {
    out.refusal = Refusal::Busy;
    out.error = "model " + request.model + " has " + std::to_string(waiting) + " requests waiting, its limit; retry in a moment";
    return out;
  }
  // Loaded, or replaced by a load under the same name, since prepare(): the prompts are built again for
  // the model now resident (rare, and only in that moment, so here rather than back on a worker).
  std::shared_ptr<const BuiltPrompts> prompts = prepared.prompts;
  if (instance != prepared.model) prompts = std::make_shared<const BuiltPrompts>(build_prompts(*instance, request));
  StartedText started = start_text_generation(*instance, request, *prompts, std::move(callback), adapter);
  out.refusal = started.refusal;
  out.error = std::move(started.error);
  out.param = std::move(started.param);
  out.choice_ids = std::move(started.choice_ids);
  out.prompt_tokens = started.prompt_tokens;
  out.model = std::make_shared<ModelHandle>(std::move(instance), std::move(adapter));
  return out;
}

DeviceReport Engine::devices() const {
  DeviceReport report;
  cpu::append_numa_nodes(report);
#ifdef FTLLM_WITH_CUDA
  cuda::append_cuda_devices(report);
#else
  report.notes.push_back("cuda: this build has no CUDA backend (rebuild with -Dcuda=enabled)");
#endif
  return report;
}

bool Engine::cuda_built() const {
#ifdef FTLLM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

const char* engine_version() { return FTLLM_VERSION; }

}  // namespace ftllm
