#include "output_parser.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <regex>

namespace ftllm::text {

namespace {

const std::string kThinkOpen = "<think>", kThinkClose = "</think>";
const std::string kToolOpen = "<tool_call>", kToolClose = "</tool_call>";

// How many trailing bytes of `s` could begin `tag` (so must wait for more text).
size_t partial_tag(const std::string& s, const std::string& tag) {
  for (size_t n = std::min(tag.size() - 1, s.size()); n > 0; --n)
    if (s.compare(s.size() - n, n, tag, 0, n) == 0) return n;
  return 0;
}

bool parse_tool_call(const std::string& body, ToolCall& call) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(body);
  simdjson::dom::element e;
  std::string_view name;
  if (parser.parse(text).get(e) || e["name"].get(name)) return false;
  call.name = name;
  simdjson::dom::element args;
  if (e["arguments"].get(args)) call.arguments_json = "{}";
  else if (std::string_view s; !args.get(s)) call.arguments_json = s;  // already a JSON string
  else call.arguments_json = simdjson::to_string(args);
  return true;
}

}  // namespace

void OutputParser::route(std::string text, ParsedDelta& out, bool final) {
  // `text` holds no partial tag at its end unless final.
  while (!text.empty()) {
    if (in_think_) {
      size_t close = text.find(kThinkClose);
      if (close == std::string::npos) {
        out.reasoning += text;
        return;
      }
      out.reasoning += text.substr(0, close);
      text.erase(0, close + kThinkClose.size());
      in_think_ = false;
      content_started_ = false;
      continue;
    }
    if (in_tool_) {
      size_t close = text.find(kToolClose);
      if (close == std::string::npos) {
        tool_buffer_ += text;
        stream_call(out);
        return;
      }
      tool_buffer_ += text.substr(0, close);
      text.erase(0, close + kToolClose.size());
      in_tool_ = false;
      ToolCall call;
      if (parse_tool_call(tool_buffer_, call)) {
        out.tool_calls.push_back(call);
        if (!call_named_) {
          out.fragments.push_back({size_t(tool_count_), call.name, call.arguments_json});
        } else if (!streaming_args_) {
          out.fragments.push_back({size_t(tool_count_), "", call.arguments_json});
        } else {
          // The rest of the arguments: up to the call object's closing brace, the last one.
          const size_t end = tool_buffer_.rfind('}');
          std::string rest = end > args_sent_ ? tool_buffer_.substr(args_sent_, end - args_sent_) : "";
          rest.erase(rest.find_last_not_of(" \t\r\n") + 1);
          if (!rest.empty()) out.fragments.push_back({size_t(tool_count_), "", rest});
        }
        ++tool_count_;
      } else {
        // Not a call after all: keep the text (fragments already streamed for it cannot be taken back).
        out.content += kToolOpen + tool_buffer_ + kToolClose;
      }
      tool_buffer_.clear();
      call_named_ = streaming_args_ = false;
      args_sent_ = 0;
      continue;
    }
    size_t think = reasoning_ ? text.find(kThinkOpen) : std::string::npos;
    size_t tool = tools_ ? text.find(kToolOpen) : std::string::npos;
    size_t next = std::min(think, tool);
    std::string plain = text.substr(0, next);
    // Content begins after </think> with the newlines that separate it: drop those.
    if (!content_started_) {
      size_t start = plain.find_first_not_of("\n");
      plain = start == std::string::npos ? "" : plain.substr(start);
      if (!plain.empty()) content_started_ = true;
    }
    if (tools_) {
      // Whitespace before a call (between calls, as separators) is not content: held back until text
      // other than whitespace shows it is.
      const size_t body = plain.find_last_not_of(" \t\r\n") + 1;  // npos + 1 == 0: all whitespace
      if (body > 0) out.content += std::exchange(held_space_, {}) + plain.substr(0, body);
      held_space_ += plain.substr(body);
    } else {
      out.content += plain;
    }
    if (next == std::string::npos) return;
    if (next == think) {
      in_think_ = true;
      text.erase(0, think + kThinkOpen.size());
    } else {
      in_tool_ = true;
      held_space_.clear();
      text.erase(0, tool + kToolOpen.size());
    }
  }
  (void)final;
}

void OutputParser::stream_call(ParsedDelta& out) {
  if (!call_named_) {
    static const std::regex head(R"re(^\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*)re");
    std::smatch m;
    if (!std::regex_search(tool_buffer_, m, head) || size_t(m.length(0)) == tool_buffer_.size()) return;
    simdjson::dom::parser parser;
    simdjson::padded_string quoted(m.str(1));
    std::string_view name;
    if (parser.parse(quoted).get(name)) return;
    out.fragments.push_back({size_t(tool_count_), std::string(name), ""});
    call_named_ = true;
    args_sent_ = size_t(m.length(0));
    streaming_args_ = tool_buffer_[args_sent_] == '{';  // a JSON string of arguments comes whole, decoded
  }
  if (!streaming_args_) return;
  // Held back: trailing whitespace and a last '}', which may close the call object rather than the
  // arguments (then it is never sent).
  size_t end = tool_buffer_.size();
  while (end > args_sent_ && std::isspace(static_cast<unsigned char>(tool_buffer_[end - 1]))) --end;
  if (end > args_sent_ && tool_buffer_[end - 1] == '}') --end;
  if (end <= args_sent_) return;
  out.fragments.push_back({size_t(tool_count_), "", tool_buffer_.substr(args_sent_, end - args_sent_)});
  args_sent_ = end;
}

ParsedDelta OutputParser::push(const std::string& text) {
  ParsedDelta out;
  pending_ += text;
  size_t hold = 0;
  for (const std::string* tag : {&kThinkOpen, &kThinkClose, &kToolOpen, &kToolClose}) hold = std::max(hold, partial_tag(pending_, *tag));
  std::string ready = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  route(std::move(ready), out, false);
  return out;
}

ParsedDelta OutputParser::finish() {
  ParsedDelta out;
  route(std::exchange(pending_, {}), out, true);
  if (tool_count_ == 0 || in_tool_) out.content += held_space_;  // an answer without calls keeps its text whole
  held_space_.clear();
  if (in_tool_) {
    out.content += kToolOpen + tool_buffer_;
    tool_buffer_.clear();
    in_tool_ = false;
  }
  return out;
}

}  // namespace ftllm::text
