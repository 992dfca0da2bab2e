// Splits generated text into what OpenAI clients expect: reasoning (between <think> and </think>, as
// Qwen3 and DeepSeek-R1 write it, or gpt-oss's analysis channel) goes to reasoning_content, tool calls in
// the model's dialect (tool_dialect.h) become tool_calls, the rest is content. Works on streamed text: a
// tag split across chunks is held back until it is whole, and a call is reported as it grows.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text_request.h"
#include "tool_dialect.h"

namespace ftllm::text {

struct ParsedDelta {
  std::string reasoning, content;
  std::vector<ToolCall> tool_calls;             // complete calls
  std::vector<ToolCallFragment> fragments;      // the calls as they grow (every call, name first)
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty() && fragments.empty(); }
};

class OutputParser {
 public:
  // `reasoning`: the template thinks (in <think> tags, or gpt-oss's channels when `dialect` is Harmony);
  // `starts_in_reasoning`: the prompt already opened a <think> (DeepSeek-R1 style). `dialect`: the
  // template's tool-call dialect; `parse_calls`: tools were offered, so calls in it are parsed, with the
  // offered tools (`tools_json`) saying their parameters' types.
  OutputParser(bool reasoning, bool starts_in_reasoning, ToolDialect dialect = ToolDialect::None, bool parse_calls = false,
               const std::string& tools_json = "");

  ParsedDelta push(const std::string& text);
  ParsedDelta finish();  // whatever is held back; an unfinished tool call is returned as content
  bool saw_tool_call() const { return tool_count_ > 0; }

 private:
  void route(std::string text, ParsedDelta& out, bool final);
  // Scans the open tool-call section; returns the text after it once it has ended (or failed).
  bool scan_section(ParsedDelta& out, bool final, std::string& after);
  void add_content(const std::string& text, ParsedDelta& out);

  bool reasoning_, in_think_;
  ToolDialect dialect_;
  bool parse_calls_;
  ToolParameterTypes types_;
  std::string think_open_ = "<think>", think_close_ = "</think>";
  std::vector<std::string> openers_;  // strings that begin a tool-call section
  std::vector<std::string> dropped_;  // framing that is neither reasoning nor content (gpt-oss's headers)
  bool content_started_;  // leading newlines after </think> are dropped until content starts
  bool wrote_content_ = false;
  std::string pending_;
  std::string held_space_;  // whitespace that may only separate tool calls
  int tool_count_ = 0;      // calls in sections already closed

  // The open section: its text from the opener on, and what was reported of each of its calls.
  bool in_section_ = false;
  std::string section_;
  size_t opener_size_ = 0;
  std::string space_before_section_;  // held whitespace: content again if the section is not a call
  struct Reported {
    bool named = false, done = false;
    size_t args = 0;  // bytes of the call's arguments text sent
    std::string id;
  };
  std::vector<Reported> reported_;
  ScanMemo memo_;
};

}  // namespace ftllm::text
