// A request's prompt as the model sees it: a chat rendered with the model's template (with its special
// tokens) and tokenized, a text tokenized, or token ids as given; and the format the model will answer
// in, read off its template (reasoning in <think> tags, tool calls in its dialect).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../core/status.h"
#include "model_text.h"
#include "text_request.h"
#include "tool_dialect.h"

namespace ftllm::text {

// How a chat answer is written, so that OutputParser can split it.
struct OutputFormat {
  bool chat = false;                 // a chat answer (else plain completion text)
  bool reasoning = false;            // the template thinks in <think> tags
  bool starts_in_reasoning = false;  // the prompt already opened one (DeepSeek-R1 style)
  ToolDialect dialect = ToolDialect::None;  // how the template writes tool calls
  bool tools = false;                // tools were offered (and tool_choice is not "none"): calls are parsed
  std::string tools_json;            // the tools offered
};

struct Prompt {
  std::vector<int32_t> ids;
  OutputFormat format;
  Refusal refusal = Refusal::None;  // why there is no prompt: the message and the request field at fault
  std::string error, param;
};

// The chat rendered as text (what /apply-template shows).
Status render_chat(const ModelText& text, const std::string& model_name, const ChatInput& input, std::string& prompt);

// Prompt `which` (< request.prompt_count()) of `request` for a model served with `context` tokens; refused
// when it is empty, does not render or tokenize, or leaves no room to generate.
Prompt build_prompt(const ModelText& text, const std::string& model_name, int64_t context, const TextRequest& request,
                    size_t which = 0);

}  // namespace ftllm::text
