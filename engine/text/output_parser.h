// Splits generated text into what OpenAI clients expect: reasoning (between <think> and </think>, as
// Qwen3 and DeepSeek-R1 write it) goes to reasoning_content, Hermes/Qwen-style
// <tool_call>{"name": ..., "arguments": ...}</tool_call> blocks become tool_calls, the rest is content.
// Works on streamed text: a tag split across chunks is held back until it is whole.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text_request.h"

namespace ftllm::text {

struct ParsedDelta {
  std::string reasoning, content;
  std::vector<ToolCall> tool_calls;             // complete calls
  std::vector<ToolCallFragment> fragments;      // the calls as they grow (every call, name first)
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty() && fragments.empty(); }
};

class OutputParser {
 public:
  // `reasoning`: the template thinks in <think> tags; `starts_in_reasoning`: the prompt already opened
  // one (DeepSeek-R1 style). `tools`: the request offered tools and the template writes <tool_call>.
  OutputParser(bool reasoning, bool starts_in_reasoning, bool tools)
      : reasoning_(reasoning), in_think_(starts_in_reasoning), tools_(tools), content_started_(!reasoning) {}

  ParsedDelta push(const std::string& text);
  ParsedDelta finish();  // whatever is held back; an unclosed tool call is returned as content
  bool saw_tool_call() const { return tool_count_ > 0; }

 private:
  void route(std::string text, ParsedDelta& out, bool final);
  // The open call's name once its head is whole, then its arguments as they come.
  void stream_call(ParsedDelta& out);

  bool reasoning_, in_think_, tools_;
  bool content_started_;  // leading newlines after </think> are dropped until content starts
  bool in_tool_ = false;
  std::string pending_, tool_buffer_;
  std::string held_space_;  // whitespace that may only separate tool calls
  int tool_count_ = 0;
  bool call_named_ = false;  // the open call's name went out in a fragment
  bool streaming_args_ = false;  // its arguments go out as they come (an object, not a JSON string)
  size_t args_sent_ = 0;     // bytes of tool_buffer_ up to which the arguments went out
};

}  // namespace ftllm::text
