#include "choice_text.h"

namespace ftllm::text {

ChoiceText::ChoiceText(const tokenizer::Tokenizer* tokenizer, size_t choice, OutputFormat format, std::vector<std::string> stop,
                       bool logprobs)
    : tokenizer_(tokenizer),
      choice_(choice),
      format_(format),
      logprobs_(logprobs),
      stop_(std::move(stop)),
      parser_(format.reasoning, format.starts_in_reasoning, format.dialect, format.tools, format.tools_json) {
  if (!tokenizer) return;
  // Special tokens are not text, except the markers of the dialect whose calls (or gpt-oss's channels)
  // are parsed.
  std::vector<int32_t> kept;
  if (format.chat && (format.tools || format.dialect == ToolDialect::Harmony))
    for (const std::string& marker : dialect_markers(format.dialect))
      if (auto id = tokenizer->token_id(marker); id && tokenizer->is_special(*id)) kept.push_back(*id);
  stream_.emplace(*tokenizer, true, std::move(kept));
}

TextEvent ChoiceText::on(const GenerationEvent& e) {
  TextEvent out;
  out.choice = choice_;
  out.tokens = e.tokens;
  auto bytes = [&](int32_t id) {
    return tokenizer_ && id >= 0 && id < tokenizer_->vocab_size() ? tokenizer_->token_bytes(id) : std::string();
  };
  for (size_t i = 0; logprobs_ && i < e.tokens.size() && i < e.logprobs.size(); ++i) {
    TokenText& t = out.logprobs.emplace_back(TokenText{bytes(e.tokens[i]), e.logprobs[i].logprob, {}});
    for (auto& [alt, lp] : e.logprobs[i].top) t.top.emplace_back(bytes(alt), lp);
  }
  for (int32_t t : e.tokens) emit(stop_.push(stream_ ? stream_->feed(t) : std::string()), out);
  if (e.finished) {
    if (stream_) emit(stop_.push(stream_->finish()), out);
    emit(stop_.flush(), out);
    if (format_.chat) deliver(parser_.finish(), out);
    out.finished = true;
    out.finish = e.result.finish;
    out.error = e.result.error;
    out.cached_tokens = e.result.cached_tokens;
    out.stopped = stop_.stopped();
  }
  return out;
}

void ChoiceText::emit(const std::string& text, TextEvent& out) {
  if (text.empty()) return;
  if (!format_.chat) out.content += text;
  else deliver(parser_.push(text), out);
}

void ChoiceText::deliver(const ParsedDelta& d, TextEvent& out) {
  out.reasoning += d.reasoning;
  out.content += d.content;
  out.tool_calls.insert(out.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  out.tool_call_fragments.insert(out.tool_call_fragments.end(), d.fragments.begin(), d.fragments.end());
}

}  // namespace ftllm::text
