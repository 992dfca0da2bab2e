// Normalizers of Hugging Face tokenizer.json that real models use: Unicode forms (utf8proc), Prepend,
// Replace, Lowercase, Sequence. Applied to each stretch of text between added tokens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "regex_split.h"

namespace ftllm::tokenizer {

struct NormalizerStep {
  enum Kind { NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace } kind;
  std::string text;                      // Prepend: the prefix; Replace: the replacement
  std::shared_ptr<RegexSplitter> regex;  // Replace: what to find (literal strings compile as literals)
};

class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  std::string apply(std::string text) const;

 private:
  std::vector<NormalizerStep> steps_;
};

}  // namespace ftllm::tokenizer
