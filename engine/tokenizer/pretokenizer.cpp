#include "pretokenizer.h"

#include "utf8.h"

namespace ftllm::tokenizer {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Han runs apart, then letters other than Han: the original's class intersections [X&&[^\p{Han}]]
// (fancy-regex syntax) written as (?:(?!\p{Han})[X]), which PCRE2 reads.
const char* const kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// Bytes that are printable stay themselves; the others map, in order, to U+0100 upward.
std::array<int, 256> byte_codepoints() {
  std::array<int, 256> cp{};
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    cp[size_t(b)] = printable ? b : next++;
  }
  return cp;
}

}  // namespace

const std::array<std::string, 256>& byte_to_chars() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    auto cps = byte_codepoints();
    for (int b = 0; b < 256; ++b) append_utf8(t[size_t(b)], uint32_t(cps[size_t(b)]));
    return t;
  }();
  return table;
}

int chars_to_byte(uint32_t codepoint) {
  static const std::vector<int> reverse = [] {
    std::vector<int> r(324, -1);
    auto cps = byte_codepoints();
    for (int b = 0; b < 256; ++b) r[size_t(cps[size_t(b)])] = b;
    return r;
  }();
  return codepoint < reverse.size() ? reverse[codepoint] : -1;
}

std::vector<std::string> PreTokenizer::apply(const std::string& text, bool first) const {
  std::vector<std::string> pieces{text};
  for (const PreTokenizerStep& s : steps_) {
    std::vector<std::string> next;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string& p = pieces[i];
      switch (s.kind) {
        case PreTokenizerStep::Split:
          s.regex->split(p, s.behavior, s.invert, next);
          break;
        case PreTokenizerStep::Digits: {
          static const RegexSplitter individual(R"(\p{N})"), runs(R"(\p{N}+)");
          (s.individual_digits ? individual : runs).split(p, SplitBehavior::Isolated, false, next);
          break;
        }
        case PreTokenizerStep::ByteLevel: {
          if (s.add_prefix_space && !p.empty() && p[0] != ' ') p = " " + p;
          std::vector<std::string> words;
          if (s.regex) s.regex->split(p, SplitBehavior::Isolated, false, words);
          else words.push_back(p);
          const auto& table = byte_to_chars();
          for (const std::string& w : words) {
            std::string mapped;
            mapped.reserve(w.size() * 2);
            for (unsigned char c : w) mapped += table[c];
            next.push_back(std::move(mapped));
          }
          break;
        }
        case PreTokenizerStep::Metaspace: {
          std::string replaced;
          for (char c : p) {
            if (c == ' ') replaced += s.replacement;
            else replaced += c;
          }
          bool prepend = s.prepend == PreTokenizerStep::Always || (s.prepend == PreTokenizerStep::First && first && i == 0);
          if (prepend && !replaced.starts_with(s.replacement)) replaced = s.replacement + replaced;
          if (s.split) {
            s.regex->split(replaced, SplitBehavior::MergedWithNext, false, next);  // the replacement, literally
          } else {
            next.push_back(std::move(replaced));
          }
          break;
        }
      }
    }
    pieces = std::move(next);
  }
  std::erase_if(pieces, [](const std::string& p) { return p.empty(); });
  return pieces;
}

}  // namespace ftllm::tokenizer
