// One choice's tokens turned into the text a client sees, as they come: decoded without splitting a
// UTF-8 character, cut before the first stop string (held back while it may still be forming), and for
// chats split into reasoning, content and tool calls in the model's format.
#pragma once

#include <string>
#include <vector>

#include "../tokenizer/tokenizer.h"
#include "output_parser.h"
#include "prompt.h"
#include "stop_text.h"
#include "text_request.h"

namespace ftllm::text {

class ChoiceText {
 public:
  // `tokenizer` may be null (a model served by token ids: no text, tokens are still counted).
  ChoiceText(const tokenizer::Tokenizer* tokenizer, size_t choice, OutputFormat format, std::vector<std::string> stop,
             bool logprobs);

  // The text event for a step's tokens, and at the end everything held back with the finish.
  TextEvent on(const GenerationEvent& e);
  // A stop string has appeared: generating more is wasted (the caller cancels the sequence).
  bool stopped() const { return stop_.stopped(); }

 private:
  void emit(const std::string& text, TextEvent& out);
  void deliver(const ParsedDelta& d, TextEvent& out);

  const tokenizer::Tokenizer* tokenizer_;
  size_t choice_;
  OutputFormat format_;
  bool logprobs_;
  std::optional<tokenizer::Tokenizer::Stream> stream_;
  StopText stop_;
  OutputParser parser_;
};

}  // namespace ftllm::text
