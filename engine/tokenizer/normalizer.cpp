#include "normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "../core/error.h"

namespace ftllm::tokenizer {

namespace {

std::string utf8proc_form(const std::string& text, int options) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), utf8proc_ssize_t(text.size()),
                                    &out, utf8proc_option_t(options));
  if (n < 0) return text;  // cannot happen on sanitised input; leave it as is rather than fail
  std::string result(reinterpret_cast<char*>(out), size_t(n));
  std::free(out);
  return result;
}

}  // namespace

std::string Normalizer::apply(std::string text) const {
  for (const NormalizerStep& s : steps_) {
    switch (s.kind) {
      case NormalizerStep::NFC: text = utf8proc_form(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE); break;
      case NormalizerStep::NFD: text = utf8proc_form(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); break;
      case NormalizerStep::NFKC: text = utf8proc_form(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case NormalizerStep::NFKD: text = utf8proc_form(text, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      case NormalizerStep::Lowercase: text = utf8proc_form(text, UTF8PROC_STABLE | UTF8PROC_CASEFOLD); break;
      case NormalizerStep::Prepend:
        if (!text.empty()) text = s.text + text;
        break;
      case NormalizerStep::Replace: {
        std::string out;
        size_t last = 0;
        for (auto [b, e] : s.regex->matches(text)) {
          out.append(text, last, b - last);
          out += s.text;
          last = e;
        }
        out.append(text, last, std::string::npos);
        text = std::move(out);
        break;
      }
    }
  }
  return text;
}

}  // namespace ftllm::tokenizer
