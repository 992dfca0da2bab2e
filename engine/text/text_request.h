// A generation as the API layer understands it, and what it reports back: text, not tokens. The engine
// renders the chat with the model's template, tokenizes, decodes, applies stop strings, and splits
// reasoning and tool calls out of the text in the model's own format; the caller speaks HTTP and JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../scheduler/request.h"
#include "tool_dialect.h"

namespace ftllm {

// A chat to render with a model's template: JSON texts as OpenAI requests carry them.
struct ChatInput {
  std::string messages_json = "[]";  // [{"role": ..., "content": ...}, ...]
  std::string tools_json;            // empty: no tools
  bool add_generation_prompt = true;
  std::string kwargs_json;           // chat_template_kwargs object ({"enable_thinking": false}); empty for none
  // OpenAI's tool_choice: "auto", "none", "required", or "function" with the one tool to call named.
  // "required" and "function" are enforced by constrained decoding in the model's tool-call format.
  std::string tool_choice = "auto", forced_tool;
  bool parallel_tool_calls = true;   // false: at most one call
};

// What the output must match, enforced token by token (constrained decoding): OpenAI's response_format,
// llama-server's json_schema and grammar fields.
struct OutputConstraint {
  // ToolCalls: one or more calls (or exactly the one named) in the model's dialect, each call's arguments
  // valid against its tool's parameters. NoToolCalls: free text that never opens a call (tool_choice "none").
  enum class Kind { None, JsonObject, JsonSchema, Gbnf, ToolCalls, NoToolCalls };
  Kind kind = Kind::None;
  std::string text;   // JsonSchema: the schema (JSON); Gbnf: the grammar; ToolCalls: the tools (JSON array)
  std::string param;  // the request field it came from, named when it cannot be enforced
  text::ToolDialect dialect = text::ToolDialect::None;  // ToolCalls, NoToolCalls: how calls are written
  std::string only_tool;  // ToolCalls: the one tool that must be called (empty: any of them)
  bool parallel = true;   // ToolCalls: several calls allowed
  // Whether the constrained part follows a <think> block the model writes first: none, one it may write
  // (a template that thinks), or one the prompt already opened (DeepSeek-R1 style). Set by the engine.
  enum class Thinking { None, Optional, Opened };
  Thinking thinking = Thinking::None;
};

struct TextRequest {
  std::string model;
  enum class Input { Chat, Text, Tokens } input = Input::Chat;
  ChatInput chat;                                // Input::Chat
  std::vector<std::string> prompts;              // Input::Text: each tokenized with the model's special tokens
  std::vector<std::vector<int32_t>> token_prompts;  // Input::Tokens
  // Sampling (a seed is the first choice's; choice i samples with seed + i), max_tokens (0: up to the
  // context), ignore_eos, logprobs.
  GenerationRequest generation;
  std::vector<std::string> stop;  // generation ends before the first of these; they never reach the text
  int n = 1;                      // choices per prompt, each its own sequence
  OutputConstraint constraint;    // every choice's output must match it
  size_t max_waiting = 0;         // refused as Busy when the model has this many requests waiting (0: none)

  size_t prompt_count() const {
    return input == Input::Chat ? 1 : input == Input::Text ? prompts.size() : token_prompts.size();
  }
  // Prompt p's choices are numbered p * n .. p * n + n - 1.
  size_t choice_count() const { return prompt_count() * size_t(n); }
};

// A function call the model wrote in its tool-call format.
struct ToolCall {
  std::string name;
  std::string arguments_json;  // the arguments object, serialised
  std::string id;              // the call's id when the dialect names calls (Kimi, Mistral); else ""
  bool operator==(const ToolCall&) const = default;
};

// A tool call as it is generated, for streaming: the first fragment of call `index` names the function,
// the ones after it carry pieces of its arguments; together, the arguments as the model wrote them (a call
// whose name the model writes after its arguments comes whole, at its end).
struct ToolCallFragment {
  size_t index = 0;
  std::string name;       // the first fragment of a call only
  std::string arguments;  // a piece of the arguments' JSON text
  std::string id;         // the first fragment only: as ToolCall::id
};

// One generated token for logprobs: its bytes (possibly part of a UTF-8 character), its log-probability,
// and the most likely alternatives.
struct TokenText {
  std::string bytes;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// A choice's progress, in order: new text as it becomes final, then once its end.
struct TextEvent {
  size_t choice = 0;
  std::string reasoning, content;   // new text: reasoning (the model's thinking) and the rest
  std::vector<ToolCall> tool_calls; // calls completed since the last event
  std::vector<ToolCallFragment> tool_call_fragments;  // the same calls as they grow, for streaming
  std::vector<int32_t> tokens;      // token ids generated since the last event
  std::vector<TokenText> logprobs;  // one per token, when the request asked for them
  bool finished = false;
  FinishReason finish = FinishReason::Length;  // when finished
  bool stopped = false;             // a stop string ended it
  std::string error;                // when finish == Error
  int64_t cached_tokens = 0;        // when finished: prompt tokens read from the prefix cache
};

// Called on the model's worker thread; must not block.
using TextCallback = std::function<void(const TextEvent&)>;

// Why a request was refused before it started.
enum class Refusal { None, ModelNotFound, Busy, InvalidPrompt, ChatTemplate, ContextExceeded };

}  // namespace ftllm
