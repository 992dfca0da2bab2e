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
  runner_ = std::make_unique<Runner>(*loaded_.model, kv_, layout_, notes_, context_, options().max_sequences);
}

ModelInstance::~ModelInstance() { runner_.reset(); }

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
