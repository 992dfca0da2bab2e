#include "chat_template.h"

#include <simdjson.h>

#include <filesystem>

#include "../core/mapped_file.h"
#include "jinja/render.h"

namespace ftllm::tokenizer {

namespace {

jinja::Value from_element(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::ARRAY: {
      jinja::Array a;
      for (auto x : e.get_array()) a.push_back(from_element(x));
      return jinja::Value::list(std::move(a));
    }
    case element_type::OBJECT: {
      jinja::Object o;
      for (auto [k, x] : e.get_object()) o.emplace_back(std::string(k), from_element(x));
      return jinja::Value::dict(std::move(o));
    }
    case element_type::INT64: return jinja::Value::integer(int64_t(e));
    case element_type::UINT64: return jinja::Value::integer(int64_t(uint64_t(e)));
    case element_type::DOUBLE: return jinja::Value::number(double(e));
    case element_type::STRING: return jinja::Value::string(std::string(std::string_view(e)));
    case element_type::BOOL: return jinja::Value::boolean(bool(e));
    case element_type::NULL_VALUE: return jinja::Value::none();
  }
  return jinja::Value::none();
}

// transformers fills reasoning_content from older names, and `thinking` for templates that read that.
jinja::Value alias_reasoning(const jinja::Value& messages) {
  if (!messages.is_array()) return messages;
  jinja::Array out;
  for (const jinja::Value& m : *messages.array) {
    if (!m.is_object()) {
      out.push_back(m);
      continue;
    }
    jinja::Value reasoning = jinja::Value::undefined();
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      jinja::Value v = m.get(key);
      if (!v.is_undefined() && !v.is_none()) {
        reasoning = v;
        break;
      }
    }
    if (reasoning.is_undefined()) {
      out.push_back(m);
      continue;
    }
    jinja::Value copy = jinja::Value::dict({{"thinking", reasoning}});
    for (auto& [k, v] : *m.object) copy.set(k, k == "thinking" ? reasoning : v);
    copy.set("reasoning_content", reasoning);
    out.push_back(copy);
  }
  return jinja::Value::list(std::move(out));
}

}  // namespace

jinja::Value json_to_value(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json);
  simdjson::dom::element e;
  if (auto err = parser.parse(text).get(e)) throw jinja::TemplateError(std::string("invalid JSON: ") + simdjson::error_message(err));
  return from_element(e);
}

ChatTemplate::ChatTemplate(std::string source) : source_(std::move(source)), parsed_(jinja::parse_template(source_)) {}

std::string ChatTemplate::render(const ChatRequest& r) const {
  jinja::Object context;
  context.emplace_back("messages", alias_reasoning(r.messages));
  context.emplace_back("tools", r.tools);
  context.emplace_back("documents", r.documents);
  context.emplace_back("add_generation_prompt", jinja::Value::boolean(r.add_generation_prompt));
  for (auto& [k, v] : r.kwargs) context.emplace_back(k, v);
  return jinja::render(*parsed_, context, {r.now, r.limits});
}

std::string find_chat_template(const std::string& model_dir) {
  namespace fs = std::filesystem;
  fs::path dir(model_dir);
  if (fs::exists(dir / "chat_template.jinja")) return read_text_file(dir / "chat_template.jinja");
  if (!fs::exists(dir / "tokenizer_config.json")) return {};
  simdjson::dom::parser parser;
  simdjson::dom::element config;
  if (parser.load((dir / "tokenizer_config.json").string()).get(config)) return {};
  std::string_view text;
  if (!config["chat_template"].get(text)) return std::string(text);
  simdjson::dom::array list;
  if (!config["chat_template"].get(list))
    for (auto item : list) {
      std::string_view name, body;
      if (!item["name"].get(name) && name == "default" && !item["template"].get(body)) return std::string(body);
    }
  return {};
}

jinja::Object special_tokens_of(const std::string& model_dir) {
  jinja::Object out;
  simdjson::dom::parser parser;
  simdjson::dom::element config;
  if (parser.load((std::filesystem::path(model_dir) / "tokenizer_config.json").string()).get(config)) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    std::string_view v;
    if (!config[key].get(v) || !config[key]["content"].get(v)) out.emplace_back(key, jinja::Value::string(std::string(v)));
  }
  return out;
}

}  // namespace ftllm::tokenizer
