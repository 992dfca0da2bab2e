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

// A generation body: the engine's request, and how the answer is to be written.
struct GenerationBody {
  TextRequest request;  // model, messages or prompt, sampling, max_tokens (0: up to the context), stop, n
  bool chat = true;
  bool stream = false, include_usage = false;
  bool logprobs = false;  // chat: logprobs true; completions: logprobs N
  int top_logprobs = 0;
};

// Parses a body (JSON text, up to the server's body limit). `chat` selects /v1/chat/completions' shape.
std::optional<ApiError> parse_generation_body(std::string_view json, bool chat, GenerationBody& out);

}  // namespace ftllm::daemon
