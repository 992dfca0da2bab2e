#include "regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "../core/error.h"

namespace ftllm::tokenizer {

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  std::string pattern;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

// One JIT stack per thread: long runs of whitespace under `\s+(?!\S)` need more than the default 32 KiB.
pcre2_match_context* match_context() {
  struct Holder {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    Holder() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
    ~Holder() {
      pcre2_match_context_free(ctx);
      pcre2_jit_stack_free(stack);
    }
  };
  thread_local Holder holder;
  return holder.ctx;
}

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern, bool literal) : impl_(std::make_unique<Impl>()) {
  impl_->pattern = pattern;
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Literal patterns take no pattern-language options (PCRE2 refuses UCP and DOLLAR_ENDONLY with them).
  const uint32_t options = literal ? PCRE2_LITERAL | PCRE2_UTF | PCRE2_NO_UTF_CHECK
                                   : PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset,
                              nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw EngineError("pre-tokenizer pattern " + pattern + " does not compile at offset " + std::to_string(offset) +
                      ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> RegexSplitter::matches(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> found;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                         PCRE2_NO_UTF_CHECK, md, match_context());
    if (rc < 0) break;  // no further match (or a resource limit: the rest stays one piece)
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e == b) {  // an empty match: step over one character
      if (b >= text.size()) break;
      size_t next = b + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
      continue;
    }
    found.emplace_back(b, e);
    start = e;
  }
  pcre2_match_data_free(md);
  return found;
}

void RegexSplitter::split(std::string_view text, SplitBehavior behavior, bool invert,
                          std::vector<std::string>& out) const {
  // Pieces as (text, is_match) in order, gaps included.
  std::vector<std::pair<std::string_view, bool>> pieces;
  size_t last = 0;
  for (auto [b, e] : matches(text)) {
    if (b > last) pieces.push_back({text.substr(last, b - last), invert});
    pieces.push_back({text.substr(b, e - b), !invert});
    last = e;
  }
  if (last < text.size()) pieces.push_back({text.substr(last), invert});

  switch (behavior) {
    case SplitBehavior::Isolated:
      for (auto& [p, m] : pieces) out.emplace_back(p);
      break;
    case SplitBehavior::Removed:
      for (auto& [p, m] : pieces)
        if (!m) out.emplace_back(p);
      break;
    case SplitBehavior::MergedWithPrevious: {
      std::string cur;
      for (auto& [p, m] : pieces) {
        cur += p;
        if (m) out.push_back(std::exchange(cur, {}));
      }
      if (!cur.empty()) out.push_back(cur);
      break;
    }
    case SplitBehavior::MergedWithNext: {
      std::string cur;
      for (auto& [p, m] : pieces) {
        if (m && !cur.empty()) out.push_back(std::exchange(cur, {}));
        cur += p;
      }
      if (!cur.empty()) out.push_back(cur);
      break;
    }
    case SplitBehavior::Contiguous: {
      std::string cur;
      bool cur_match = false;
      for (auto& [p, m] : pieces) {
        if (!cur.empty() && m != cur_match) out.push_back(std::exchange(cur, {}));
        cur += p;
        cur_match = m;
      }
      if (!cur.empty()) out.push_back(cur);
      break;
    }
  }
}

}  // namespace ftllm::tokenizer
