// An HTTP response and its wire form.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ftllm::http {

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers, as written
  std::string body;

  // Status line, headers and body. `keep_alive` false adds "Connection: close"; `head` omits the body
  // but keeps its Content-Length, as HEAD requires.
  std::string serialize(bool keep_alive, bool head = false) const;
};

std::string_view reason_phrase(int status);

// A JSON response in OpenAI's error envelope: {"error":{"message","type","param","code"}}.
Response json_error(int status, std::string_view message, std::string_view type, std::string_view code);

}  // namespace ftllm::http
