// OpenAI request bodies (chat completions and completions) parsed and validated with simdjson. Wrong
// types and values give an ApiError naming the field; unknown fields are ignored, as OpenAI does.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../../engine/engine.h"

namespace ftllm::daemon {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field, when there is one
  std::string type = "invalid_request_error";
  std::string code;

  ApiError() = default;
  ApiError(int s, std::string m, std::string p = {}, std::string t = "invalid_request_error", std::string c = {})
      : status(s), message(std::move(m)), param(std::move(p)), type(std::move(t)), code(std::move(c)) {}
};

struct GenerationBody {
  std::string model;
  bool chat = true;
  ChatInput chat_input;              // chat: messages, tools, chat_template_kwargs
  std::string prompt;                // completions: text prompt
  std::vector<int32_t> prompt_ids;   // completions: a prompt given as token ids
  bool prompt_is_ids = false;
  GenerationRequest generation;      // sampling, max_tokens (0: up to the context), ignore_eos
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  int n = 1;              // choices, each its own sequence
  bool logprobs = false;  // chat: logprobs true; completions: logprobs N
  int top_logprobs = 0;
};

// Parses a body (JSON text, up to the server's body limit). `chat` selects /v1/chat/completions' shape.
std::optional<ApiError> parse_generation_body(std::string_view json, bool chat, GenerationBody& out);

}  // namespace ftllm::daemon
