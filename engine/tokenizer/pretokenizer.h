// Pre-tokenizers of Hugging Face tokenizer.json (Split, ByteLevel, Metaspace, Digits, Sequence) and the
// byte-to-character table of byte-level BPE (GPT-2's).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "regex_split.h"

namespace ftllm::tokenizer {

struct PreTokenizerStep {
  enum Kind { Split, ByteLevel, Metaspace, Digits } kind;
  // Split: the pattern; ByteLevel with use_regex: GPT-2's; Metaspace with split: the replacement, literally.
  std::shared_ptr<RegexSplitter> regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;   // ByteLevel
  std::string replacement = "\xe2\x96\x81";  // Metaspace: "▁"
  enum Prepend { Always, First, Never } prepend = Always;  // Metaspace
  bool split = true;               // Metaspace
  bool individual_digits = false;  // Digits
};

class PreTokenizer {
 public:
  void add(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  // Splits one stretch of normalised text into the words the model encodes. `first` is whether this
  // stretch starts the input (Metaspace's prepend_scheme "first").
  std::vector<std::string> apply(const std::string& text, bool first) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// GPT-2's reversible map from bytes to printable characters, and back.
const std::array<std::string, 256>& byte_to_chars();
// The byte a byte-level character stands for, or -1 when it is not one.
int chars_to_byte(uint32_t codepoint);

// GPT-2's split pattern, which ByteLevel with use_regex applies.
extern const char* const kGpt2Pattern;
// Kimi-K2's (tokenization_kimi.py's pat_str; llama.cpp's "kimi-k2" pre-tokenizer) in PCRE2's dialect.
extern const char* const kKimiPattern;

}  // namespace ftllm::tokenizer
