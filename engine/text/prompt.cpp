#include "prompt.h"

namespace ftllm::text {

Status render_chat(const ModelText& text, const std::string& model_name, const ChatInput& input, std::string& prompt) {
  const tokenizer::ChatTemplate* t = text.chat_template.get();
  if (!t) {
    if (!text.chat_template_error.empty())
      return Status::error("model " + model_name + "'s chat template does not parse: " + text.chat_template_error);
    return Status::error("model " + model_name + " has no chat template; start it with --chat_template FILE, or use /v1/completions");
  }
  try {
    tokenizer::ChatRequest r;
    r.messages = tokenizer::json_to_value(input.messages_json);
    if (!input.tools_json.empty()) r.tools = tokenizer::json_to_value(input.tools_json);
    r.add_generation_prompt = input.add_generation_prompt;
    r.kwargs = text.special_tokens;
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

Prompt build_prompt(const ModelText& text, const std::string& model_name, int64_t context, const TextRequest& request,
                    size_t which) {
  Prompt p;
  const bool chat = request.input == TextRequest::Input::Chat;
  const std::string field = chat ? "messages" : "prompt";
  auto refuse = [&](Refusal why, std::string message, std::string param) {
    p.refusal = why;
    p.error = std::move(message);
    p.param = std::move(param);
    return p;
  };
  if (chat) {
    std::string rendered;
    if (Status s = render_chat(text, model_name, request.chat, rendered); !s.ok) return refuse(Refusal::ChatTemplate, s.message, field);
    if (!text.tokenizer) return refuse(Refusal::InvalidPrompt, ModelText::no_tokenizer(model_name), "");
    p.ids = text.tokenizer->encode(rendered, false, true);
    // Templates that think in <think> tags (or gpt-oss's analysis channel) get reasoning; tool calls are
    // read in the template's dialect.
    const std::string& source = text.chat_template->source();
    std::string tail = rendered;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    p.format.chat = true;
    p.format.dialect = detect_tool_dialect(source);
    p.format.reasoning = source.find("<think>") != std::string::npos || p.format.dialect == ToolDialect::Harmony;
    p.format.starts_in_reasoning = tail.ends_with("<think>");
    p.format.tools = !request.chat.tools_json.empty() && request.chat.tool_choice != "none" && p.format.dialect != ToolDialect::None;
    if (p.format.tools) p.format.tools_json = request.chat.tools_json;
  } else if (request.input == TextRequest::Input::Tokens) {
    p.ids = request.token_prompts.at(which);
  } else {
    if (!text.tokenizer) return refuse(Refusal::InvalidPrompt, ModelText::no_tokenizer(model_name), "prompt");
    p.ids = text.tokenizer->encode(request.prompts.at(which), true, true);
  }
  if (p.ids.empty()) return refuse(Refusal::InvalidPrompt, "the prompt is empty", field);
  for (const auto& [token, bias] : request.generation.sampling.logit_bias)
    if (text.tokenizer && (token < 0 || token >= text.tokenizer->vocab_size()))
      return refuse(Refusal::InvalidPrompt,
                    "logit_bias names token " + std::to_string(token) + ", outside the vocabulary of " +
                        std::to_string(text.tokenizer->vocab_size()),
                    "logit_bias");
  if (int64_t(p.ids.size()) >= context)
    return refuse(Refusal::ContextExceeded,
                  "the prompt has " + std::to_string(p.ids.size()) + " tokens, but model " + model_name +
                      " is loaded with a context of " + std::to_string(context) + " tokens",
                  field);
  return p;
}

}  // namespace ftllm::text
