#include "text_generation.h"

#include <memory>
#include <mutex>
#include <optional>

#include "../text/choice_text.h"
#include "../text/prompt.h"

namespace ftllm {

namespace {

// A choice's text state and its id, shared by the submitting thread and the worker's callbacks: a stop
// string may appear before submit() has returned the id to cancel by.
struct Choice {
  text::ChoiceText text;
  std::mutex mu;
  uint64_t id = 0;
  bool stop_wanted = false, stop_sent = false;
};

// The request's output constraint: its own (response_format, json_schema, grammar), tool calls in the
// model's format when tool_choice requires them, or text without calls when it forbids them. The caller
// sets the dialect.
std::optional<OutputConstraint> output_constraint(const TextRequest& request, const text::OutputFormat& format,
                                                  std::string& error, std::string& param) {
  const ChatInput& chat = request.chat;
  const bool chat_input = request.input == TextRequest::Input::Chat;
  // tool_choice "none" with tools rendered: the model must not open a call it was told not to make.
  if (chat_input && chat.tool_choice == "none" && !chat.tools_json.empty() && format.dialect != text::ToolDialect::None &&
      request.constraint.kind == OutputConstraint::Kind::None) {
    OutputConstraint c;
    c.kind = OutputConstraint::Kind::NoToolCalls;
    c.param = "tool_choice";
    return c;
  }
  const bool call_required = chat_input && (chat.tool_choice == "required" || chat.tool_choice == "function");
  if (!call_required) return request.constraint;
  param = "tool_choice";
  if (request.constraint.kind != OutputConstraint::Kind::None) {
    error = "'tool_choice' " + chat.tool_choice + " cannot be combined with '" + request.constraint.param + "'";
    return std::nullopt;
  }
  if (!format.tools) {
    error = "'tool_choice' " + chat.tool_choice + " cannot be enforced: this model's chat template writes no tool-call format the "
            "server knows (Hermes/Qwen, Qwen3-Coder, GLM-4.5, Llama 3, Mistral, DeepSeek, Kimi-K2, gpt-oss)";
    return std::nullopt;
  }
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::ToolCalls;
  c.text = chat.tools_json;
  c.param = "tools";
  c.only_tool = chat.tool_choice == "function" ? chat.forced_tool : "";
  c.parallel = chat.parallel_tool_calls;
  return c;
}

}  // namespace

BuiltPrompts build_prompts(const ModelInstance& m, const TextRequest& request) {
  BuiltPrompts built;
  auto refuse = [&](std::string why, std::string param) {
    built.refusal = Refusal::InvalidPrompt;
    built.error = std::move(why);
    built.param = std::move(param);
    return built;
  };
  for (size_t p = 0; p < request.prompt_count(); ++p) {
    built.prompts.push_back(text::build_prompt(m.text(), m.options().name, m.context_length(), request, p));
    if (built.prompts.back().refusal != Refusal::None) {
      built.refusal = built.prompts.back().refusal;
      built.error = built.prompts.back().error;
      built.param = built.prompts.back().param;
      return built;
    }
  }
  std::string error, param;
  const text::OutputFormat& format = built.prompts.at(0).format;
  std::optional<OutputConstraint> constraint = output_constraint(request, format, error, param);
  if (!constraint) return refuse(error, param);
  // A model that thinks first is constrained after its </think>: its reasoning stays free, and the parser
  // still finds it.
  if (format.chat && format.reasoning)
    constraint->thinking = format.starts_in_reasoning ? OutputConstraint::Thinking::Opened : OutputConstraint::Thinking::Optional;
  if (format.chat) constraint->dialect = format.dialect;
  if (constraint->kind != OutputConstraint::Kind::None) {
    if (!m.text().tokenizer) return refuse(ModelText::no_tokenizer(m.options().name) + ": its output cannot be constrained", constraint->param);
    built.grammar = m.grammars().compile(*constraint, error);
    if (!built.grammar) return refuse(constraint->param + ": " + error, constraint->param);
  }
  return built;
}

StartedText start_text_generation(ModelInstance& m, const TextRequest& request, const BuiltPrompts& built,
                                  TextCallback callback, std::shared_ptr<const model::LoraAdapter> adapter) {
  StartedText started;
  if (built.refusal != Refusal::None) {
    started.refusal = built.refusal;
    started.error = built.error;
    started.param = built.param;
    return started;
  }
  const std::vector<text::Prompt>& prompts = built.prompts;
  for (const text::Prompt& p : prompts) started.prompt_tokens += p.ids.size();
  auto shared_callback = std::make_shared<TextCallback>(std::move(callback));
  Runner& runner = m.runner();
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int c = 0; c < request.n; ++c) {
      const size_t index = p * size_t(request.n) + size_t(c);
      GenerationRequest g = request.generation;
      if (g.max_tokens <= 0) g.max_tokens = int32_t(m.context_length() - int64_t(prompts[p].ids.size()));
      g.prompt = prompts[p].ids;
      g.grammar = built.grammar;
      g.adapter = adapter;
      // Each choice samples on its own: seed + index keeps a seeded request reproducible.
      if (g.sampling.seed) *g.sampling.seed += uint64_t(index);
      auto choice = std::make_shared<Choice>(text::ChoiceText(m.text().tokenizer.get(), index, prompts[p].format, request.stop,
                                                               g.logprobs >= 0));
      const uint64_t id = runner.submit(std::move(g), [choice, shared_callback, &runner](const GenerationEvent& e) {
        (*shared_callback)(choice->text.on(e));
        if (e.finished || !choice->text.stopped()) return;
        std::lock_guard lock(choice->mu);
        if (choice->stop_sent) return;
        choice->stop_sent = choice->id != 0;
        if (choice->id) runner.cancel(choice->id);  // a stop string ends generation at once
        else choice->stop_wanted = true;
      });
      std::lock_guard lock(choice->mu);
      choice->id = id;
      if (choice->stop_wanted) runner.cancel(id);
      started.choice_ids.push_back(id);
    }
  return started;
}

}  // namespace ftllm
