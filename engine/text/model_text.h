// What a model reads and writes as text: its tokenizer, its chat template (with the special tokens the
// template may name) and why a template it ships could not be used. Filled by the loader; a model may
// have none of them (weights only: served by token ids).
#pragma once

#include <memory>
#include <string>

#include "../tokenizer/chat_template.h"
#include "../tokenizer/jinja/value.h"
#include "../tokenizer/tokenizer.h"

namespace ftllm {

struct ModelText {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<tokenizer::ChatTemplate> chat_template;
  jinja::Object special_tokens;     // bos_token, eos_token, ... for the template
  std::string chat_template_error;  // why the model's template does not parse (it still serves completions)

  // What to tell a request that needs text from a model served by token ids alone.
  static std::string no_tokenizer(const std::string& model_name) {
    return "model " + model_name + " has no tokenizer (tokenizer.json or GGUF vocabulary)";
  }
};

}  // namespace ftllm
