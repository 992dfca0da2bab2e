#include "model_instance.h"

namespace ftllm {

std::unique_ptr<ModelInstance> ModelInstance::load(const ModelLoadOptions& options) {
  return std::unique_ptr<ModelInstance>(new ModelInstance(load_model(options)));
}

ModelInstance::ModelInstance(LoadedModel loaded)
    : loaded_(std::move(loaded)),
      context_(served_context(loaded_.options, config())),
      kv_(make_kv_pool(loaded_.options, config(), kv_blocks_for(loaded_.options, config()))),
      layout_(*loaded_.model, kv_, loaded_.options, context_, notes_) {
  std::string note;
  layout_.apply(Placement::parse(options().device, config().num_layers, &note), 0);
  notes_.add(note);
  notes_.add(loaded_.notes);
  runner_ = std::make_unique<Runner>(*loaded_.model, kv_, layout_, notes_, context_, options().max_sequences,
                                     options().max_loras);
}

ModelInstance::~ModelInstance() { runner_.reset(); }

std::shared_ptr<const model::LoraAdapter> ModelInstance::load_adapter(const std::string& path, const std::string& name) {
  std::shared_ptr<const model::LoraAdapter> adapter;
  // Between two steps: the layers it is checked against (split or whole) stay as they are meanwhile.
  runner().exclusive([&](const ForwardPass&) { adapter = model::LoraAdapter::load(path, name, model()); });
  std::lock_guard lock(adapters_mu_);
  adapters_[name] = adapter;
  return adapter;
}

bool ModelInstance::unload_adapter(const std::string& name) {
  std::lock_guard lock(adapters_mu_);
  return adapters_.erase(name) > 0;  // requests running with it hold it until they end
}

std::shared_ptr<const model::LoraAdapter> ModelInstance::adapter(const std::string& name) const {
  std::lock_guard lock(adapters_mu_);
  auto it = adapters_.find(name);
  return it == adapters_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const model::LoraAdapter>> ModelInstance::adapters() const {
  std::lock_guard lock(adapters_mu_);
  std::vector<std::shared_ptr<const model::LoraAdapter>> out;
  for (auto& [name, a] : adapters_) out.push_back(a);
  return out;
}

const grammar::GrammarCompiler& ModelInstance::grammars() const {
  // Built on first use: reading a 151k vocabulary into the grammar engine takes a moment that models
  // never asked for structured output need not pay at load.
  std::call_once(grammars_once_, [this] {
    const auto dialect = text().chat_template ? text::detect_tool_dialect(text().chat_template->source()) : text::ToolDialect::None;
    grammars_ = std::make_unique<grammar::GrammarCompiler>(*text().tokenizer, config().vocab_size, config().eos_token_ids, dialect);
  });
  return *grammars_;
}

}  // namespace ftllm
