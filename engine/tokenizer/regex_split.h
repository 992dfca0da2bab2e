// Splitting text by a regular expression with Unicode properties (PCRE2, UTF + UCP mode, JIT-compiled),
// as Hugging Face's Split pre-tokenizer and llama.cpp's pre-tokenizers do.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ftllm::tokenizer {

enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

class RegexSplitter {
 public:
  // Throws EngineError quoting the pattern and PCRE2's reason when it does not compile.
  explicit RegexSplitter(const std::string& pattern, bool literal = false);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends the pieces of `text` (valid UTF-8) to `out`. With `invert`, the pattern describes the gaps.
  void split(std::string_view text, SplitBehavior behavior, bool invert, std::vector<std::string>& out) const;

  // [begin, end) of every match, in order.
  std::vector<std::pair<size_t, size_t>> matches(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ftllm::tokenizer
