// Chat templates: a model's Jinja template rendered with the context transformers' apply_chat_template
// gives it (messages, tools, documents, add_generation_prompt, special tokens, chat_template_kwargs).
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include "jinja/ast.h"
#include "jinja/render.h"
#include "jinja/value.h"

namespace ftllm::tokenizer {

struct ChatRequest {
  jinja::Value messages = jinja::Value::list();  // list of message dicts
  jinja::Value tools = jinja::Value::none();     // list of tool schemas, or none
  jinja::Value documents = jinja::Value::none();
  bool add_generation_prompt = true;
  jinja::Object kwargs;  // chat_template_kwargs (enable_thinking, ...), bos_token, eos_token, date_string, ...
  std::time_t now = 0;   // strftime_now's clock; 0 for the current time
  jinja::RenderLimits limits;
};

class ChatTemplate {
 public:
  // Throws jinja::TemplateError naming the line and the reason.
  explicit ChatTemplate(std::string source);
  const std::string& source() const { return source_; }
  // Throws jinja::TemplateError (with the template line) when the template fails or raises.
  std::string render(const ChatRequest& request) const;

 private:
  std::string source_;
  std::shared_ptr<jinja::Template> parsed_;
};

// JSON text to a template value (objects keep their key order).
jinja::Value json_to_value(std::string_view json);

// The template a model directory ships: chat_template.jinja, else tokenizer_config.json's chat_template
// ("default" when it lists several). Empty when the directory has none.
std::string find_chat_template(const std::string& model_dir);
// The bos/eos token strings of tokenizer_config.json (strings or {"content": ...}), for the template.
jinja::Object special_tokens_of(const std::string& model_dir);

}  // namespace ftllm::tokenizer
