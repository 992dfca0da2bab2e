#include "output_parser.h"

#include <algorithm>
#include <string_view>

namespace ftllm::text {

namespace {

// How many trailing bytes of `s` could begin `tag` (so must wait for more text).
size_t partial_tag(const std::string& s, const std::string& tag) {
  for (size_t n = std::min(tag.size() - 1, s.size()); n > 0; --n)
    if (s.compare(s.size() - n, n, tag, 0, n) == 0) return n;
  return 0;
}

bool all_space(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

constexpr std::string_view kHarmonyEnd = "<|end|>";  // the end of a gpt-oss message

}  // namespace

OutputParser::OutputParser(bool reasoning, bool starts_in_reasoning, ToolDialect dialect, bool parse_calls,
                           const std::string& tools_json)
    : reasoning_(reasoning),
      in_think_(starts_in_reasoning),
      dialect_(dialect),
      parse_calls_(parse_calls && dialect != ToolDialect::None),
      types_(parse_calls ? tool_parameter_types(tools_json) : ToolParameterTypes{}),
      content_started_(!reasoning) {
  if (parse_calls_) openers_ = dialect_openers(dialect);
  if (dialect == ToolDialect::Harmony) {
    // gpt-oss answers in channels: analysis is its reasoning, final (and commentary to no one) is content.
    // The analysis message ends where the next assistant message begins, as the grammar has it
    // (output_grammar.cpp's structural tag): an <|end|> followed by anything else (a random model's
    // "<|start|>latest...") is still analysis, never content the grammar did not shape.
    think_open_ = "<|channel|>analysis<|message|>";
    think_close_ = std::string(kHarmonyEnd) + "<|start|>assistant";
    dropped_ = {"<|start|>assistant", "<|channel|>final<|message|>", "<|channel|>commentary<|message|>", "<|end|>",
                "<|return|>", "<|call|>"};
  }
}

void OutputParser::add_content(const std::string& text, ParsedDelta& out) {
  out.content += text;
  wrote_content_ = wrote_content_ || !text.empty();
}

bool OutputParser::scan_section(ParsedDelta& out, bool final, std::string& after) {
  const SectionScan s = scan_tool_section(dialect_, section_, types_, final, &memo_);
  if (s.failed) {
    // Not a call after all: the opener is text, and what follows is read again (fragments already sent
    // for it cannot be taken back).
    add_content(std::exchange(space_before_section_, {}) + section_.substr(0, opener_size_), out);
    after = section_.substr(opener_size_);
  } else {
    for (size_t i = 0; i < s.calls.size(); ++i) {
      const CallProgress& c = s.calls[i];
      if (c.name.empty()) break;
      if (reported_.size() <= i) reported_.emplace_back();
      Reported& r = reported_[i];
      const size_t index = size_t(tool_count_) + i;
      if (!r.named) {
        r.id = c.id.empty() && dialect_names_calls(dialect_) ? nine_character_call_id() : c.id;
        // Kimi's template numbers the calls it renders back itself (functions.NAME:IDX by position): the
        // id says the same, whatever number the model wrote.
        if (dialect_ == ToolDialect::Kimi) r.id = "functions." + c.name + ":" + std::to_string(index);
        out.fragments.push_back({index, c.name, c.args, r.id});
        r.named = true;
        r.args = c.args.size();
      } else if (c.args.size() > r.args) {
        out.fragments.push_back({index, "", c.args.substr(r.args), ""});
        r.args = c.args.size();
      }
      if (c.complete && !r.done) {
        out.tool_calls.push_back({c.name, c.arguments, r.id});
        r.done = true;
      }
    }
    if (!s.closed && !final) return false;
    // Ended, or the answer ended first: its whole calls count, the rest is text.
    size_t whole = 0;
    while (whole < s.calls.size() && s.calls[whole].complete) ++whole;
    tool_count_ += int(whole);
    after = s.closed ? section_.substr(s.consumed) : "";
    if (!s.closed) add_content(whole ? section_.substr(s.consumed) : space_before_section_ + section_, out);
    space_before_section_.clear();
  }
  in_section_ = false;
  section_.clear();
  reported_.clear();
  memo_ = {};
  return true;
}

void OutputParser::route(std::string text, ParsedDelta& out, bool final) {
  // `text` holds no partial tag at its end unless final.
  while (!text.empty() || (final && in_section_)) {
    if (in_think_) {
      size_t close = text.find(think_close_);
      if (close == std::string::npos) {
        // gpt-oss cut off after its analysis message's <|end|>: the framing is not thought.
        if (final && dialect_ == ToolDialect::Harmony)
          if (const size_t framing = partial_tag(text, think_close_); framing >= kHarmonyEnd.size()) text.erase(text.size() - framing);
        out.reasoning += text;
        return;
      }
      out.reasoning += text.substr(0, close);
      text.erase(0, close + think_close_.size());
      in_think_ = false;
      content_started_ = false;
      continue;
    }
    if (in_section_) {
      section_ += std::exchange(text, {});
      if (!scan_section(out, final, text)) return;
      continue;
    }
    // The first of: a <think>, a tool call's opener, framing to drop.
    size_t next = std::string::npos, next_size = 0;
    enum { None, Think, Call, Drop } what = None;
    auto consider = [&](const std::string& tag, decltype(what) kind) {
      size_t at = text.find(tag);
      // A bare "{" opens Llama 3's call only as the answer's first text.
      if (tag == "{" && at != std::string::npos && (wrote_content_ || !all_space(text.substr(0, at)))) at = std::string::npos;
      if (at < next) next = at, next_size = tag.size(), what = kind;
    };
    if (reasoning_) consider(think_open_, Think);
    for (const std::string& o : openers_) consider(o, Call);
    for (const std::string& d : dropped_) consider(d, Drop);
    std::string plain = text.substr(0, next);
    // Content begins after </think> with the newlines that separate it: drop those.
    if (!content_started_) {
      size_t start = plain.find_first_not_of("\n");
      plain = start == std::string::npos ? "" : plain.substr(start);
      if (!plain.empty()) content_started_ = true;
    }
    if (parse_calls_) {
      // Whitespace before a call (between calls, as separators) is not content: held back until text
      // other than whitespace shows it is.
      const size_t body = plain.find_last_not_of(" \t\r\n") + 1;  // npos + 1 == 0: all whitespace
      if (body > 0) add_content(std::exchange(held_space_, {}) + plain.substr(0, body), out);
      held_space_ += plain.substr(body);
    } else {
      add_content(plain, out);
    }
    if (what == None) return;
    if (what == Think) {
      in_think_ = true;
      text.erase(0, next + next_size);
    } else if (what == Drop) {
      text.erase(0, next + next_size);
    } else {
      in_section_ = true;
      opener_size_ = next_size;
      space_before_section_ = std::exchange(held_space_, {});
      text.erase(0, next);  // the section's text starts with its opener
    }
  }
}

ParsedDelta OutputParser::push(const std::string& text) {
  ParsedDelta out;
  pending_ += text;
  std::vector<const std::string*> tags;
  if (reasoning_ || in_think_) tags.push_back(&think_open_), tags.push_back(&think_close_);
  for (const std::string& o : openers_) tags.push_back(&o);
  for (const std::string& d : dropped_) tags.push_back(&d);
  size_t hold = 0;
  for (const std::string* tag : tags) hold = std::max(hold, partial_tag(pending_, *tag));
  // Nor may the cut split a whole tag (one tag's beginning can end another: "<|channel|>commentary to=").
  size_t cut = pending_.size() - hold;
  for (bool moved = true; moved;) {
    moved = false;
    for (const std::string* tag : tags)
      for (size_t at = cut > tag->size() ? cut - tag->size() + 1 : 0; at < cut; ++at)
        if (pending_.compare(at, tag->size(), *tag) == 0 && at + tag->size() > cut) {
          cut = at;
          moved = true;
          break;
        }
  }
  std::string ready = pending_.substr(0, cut);
  pending_.erase(0, cut);
  route(std::move(ready), out, false);
  return out;
}

ParsedDelta OutputParser::finish() {
  ParsedDelta out;
  route(std::exchange(pending_, {}), out, true);
  if (tool_count_ == 0) add_content(held_space_, out);  // an answer without calls keeps its text whole
  held_space_.clear();
  return out;
}

}  // namespace ftllm::text
