#include "engine.h"

#include "core/error.h"
#include "cpu/numa_topology.h"
#include "ftllm_version.h"
#include "runner/model_instance.h"
#include "runner/placement.h"
#ifdef FTLLM_WITH_CUDA
#include "cuda/cuda_devices.h"
#endif

namespace ftllm {

const std::string& ModelHandle::name() const { return impl_->options().name; }
const std::string& ModelHandle::source() const { return impl_->options().path; }
const std::string& ModelHandle::architecture() const { return impl_->config().architecture; }
int64_t ModelHandle::context_length() const { return impl_->context_length(); }
std::vector<int32_t> ModelHandle::eos_token_ids() const { return impl_->config().eos_token_ids; }

Status ModelHandle::tokenize(std::string_view text, bool add_special, bool parse_special,
                             std::vector<int32_t>& ids) const {
  if (!impl_->text().tokenizer) return Status::error("model " + name() + " has no tokenizer (tokenizer.json or GGUF vocabulary)");
  ids = impl_->text().tokenizer->encode(text, add_special, parse_special);
  return Status::success();
}

Status ModelHandle::detokenize(const std::vector<int32_t>& ids, bool skip_special, std::string& text) const {
  if (!impl_->text().tokenizer) return Status::error("model " + name() + " has no tokenizer (tokenizer.json or GGUF vocabulary)");
  text = impl_->text().tokenizer->decode(ids, skip_special);
  return Status::success();
}

namespace {
class TokenizerTextStream : public TextStream {
 public:
  TokenizerTextStream(const tokenizer::Tokenizer& t, bool skip_special) : stream_(t, skip_special) {}
  std::string feed(int32_t token) override { return stream_.feed(token); }
  std::string finish() override { return stream_.finish(); }

 private:
  tokenizer::Tokenizer::Stream stream_;
};
}  // namespace

std::string ModelHandle::token_bytes(int32_t id) const {
  const tokenizer::Tokenizer* t = impl_->text().tokenizer.get();
  return t && id >= 0 && id < t->vocab_size() ? t->token_bytes(id) : std::string();
}

std::unique_ptr<TextStream> ModelHandle::text_stream(bool skip_special) const {
  if (!impl_->text().tokenizer) return nullptr;
  return std::make_unique<TokenizerTextStream>(*impl_->text().tokenizer, skip_special);
}

Status ModelHandle::apply_chat_template(const ChatInput& input, std::string& prompt) const {
  const tokenizer::ChatTemplate* t = impl_->text().chat_template.get();
  if (!t) {
    if (!impl_->text().chat_template_error.empty())
      return Status::error("model " + name() + "'s chat template does not parse: " + impl_->text().chat_template_error);
    return Status::error("model " + name() + " has no chat template; start it with --chat_template FILE, or use /v1/completions");
  }
  try {
    tokenizer::ChatRequest r;
    r.messages = tokenizer::json_to_value(input.messages_json);
    if (!input.tools_json.empty()) r.tools = tokenizer::json_to_value(input.tools_json);
    r.add_generation_prompt = input.add_generation_prompt;
    r.kwargs = impl_->text().special_tokens;
    if (!input.kwargs_json.empty()) {
      jinja::Value extra = tokenizer::json_to_value(input.kwargs_json);
      if (extra.is_object())
        for (auto& [k, v] : *extra.object) r.kwargs.emplace_back(k, v);
    }
    prompt = t->render(r);
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
  return Status::success();
}

const std::string& ModelHandle::chat_template_source() const {
  static const std::string none;
  return impl_->text().chat_template ? impl_->text().chat_template->source() : none;
}

uint64_t ModelHandle::submit(GenerationRequest request, GenerationCallback callback) const {
  return impl_->runner().submit(std::move(request), std::move(callback));
}

void ModelHandle::cancel(uint64_t id) const { impl_->runner().cancel(id); }
void ModelHandle::fail_all(const std::string& message) const { impl_->runner().fail_all(message); }
void ModelHandle::set_threads(int threads) const { impl_->runner().set_threads(threads); }

Status ModelHandle::set_placement(const std::string& device) const {
  try {
    impl_->runner().set_placement(Placement::parse(device, impl_->config().num_layers));
  } catch (const std::exception& e) {
    return Status::error(e.what());
  }
  return Status::success();
}

std::string ModelHandle::placement() const { return impl_->placement().to_string(); }

ModelHandle::Load ModelHandle::load() const {
  auto l = impl_->runner().load();
  return {l.running, l.waiting, l.kv_blocks_used, l.kv_blocks_total, l.threads, l.tokens_per_second};
}

ModelHandle::Footprint ModelHandle::footprint() const {
  return {impl_->model().parameter_count(), impl_->model().weight_bytes(), impl_->kv_bytes(), impl_->dtypes(), impl_->load_notes(),
          impl_->config().num_layers, impl_->memory_by_device()};
}

Engine::Engine() = default;
Engine::~Engine() = default;

Status Engine::load(const ModelLoadOptions& o) {
  std::shared_ptr<ModelInstance> instance;
  try {
    instance = ModelInstance::load(o);
  } catch (const std::exception& e) {
    return Status::error("cannot load " + o.path + ": " + e.what());
  }
  std::lock_guard lock(mu_);
  const std::string& name = instance->options().name;
  if (models_.count(name)) return Status::error("a model named " + name + " is already loaded; unload it or pick another name");
  models_[name] = std::move(instance);
  return Status::success();
}

Status Engine::unload(const std::string& name) {
  std::shared_ptr<ModelInstance> gone;  // freed outside the lock
  std::lock_guard lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) return Status::error("no model named " + name + " is loaded");
  gone = std::move(it->second);
  models_.erase(it);
  return Status::success();
}

std::shared_ptr<ModelHandle> Engine::model(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : std::make_shared<ModelHandle>(it->second);
}

std::vector<ModelInfo> Engine::models() const {
  std::lock_guard lock(mu_);
  std::vector<ModelInfo> out;
  for (auto& [name, m] : models_) out.push_back({name, m->options().path, m->config().architecture});
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
