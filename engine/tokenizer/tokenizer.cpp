#include "tokenizer.h"

#include <utf8proc.h>

#include <algorithm>

#include "utf8.h"

namespace ftllm::tokenizer {

namespace {

bool is_word_char(uint32_t cp) {
  auto cat = utf8proc_category(utf8proc_int32_t(cp));
  return cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The code point just before byte offset `end`.
uint32_t codepoint_before(std::string_view s, size_t end) {
  size_t b = end;
  while (b > 0 && (static_cast<unsigned char>(s[b - 1]) & 0xC0) == 0x80) --b;
  if (b > 0) --b;
  return next_codepoint(s, b);
}

}  // namespace

void Tokenizer::finish_setup() {
  special_.assign(vocab_.tokens.size(), false);
  for (const AddedToken& a : added_) {
    if (size_t(a.id) >= vocab_.tokens.size() || vocab_.tokens[size_t(a.id)].empty()) vocab_.set(a.id, a.content);
    if (size_t(a.id) >= special_.size()) special_.resize(size_t(a.id) + 1, false);
    special_[size_t(a.id)] = a.special;
  }
  // Longest first, so that matching at a position takes the longest added token.
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (auto& bucket : added_by_first_byte_) bucket.clear();
  for (size_t i = 0; i < added_.size(); ++i)
    if (!added_[i].content.empty()) added_by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);

  piece_bytes_.assign(vocab_.tokens.size(), {});
  static const std::string kMeta = "\xe2\x96\x81";
  for (size_t id = 0; id < vocab_.tokens.size(); ++id) {
    const std::string& t = vocab_.tokens[id];
    std::string& out = piece_bytes_[id];
    if (byte_level_decode_) {
      for (size_t i = 0; i < t.size();) {
        size_t start = i;
        int b = chars_to_byte(next_codepoint(t, i));
        if (b >= 0) out += char(b);
        else out.append(t, start, i - start);
      }
    } else if (metaspace_decode_) {
      if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && std::isxdigit(t[3]) && std::isxdigit(t[4])) {
        out += char(std::stoi(t.substr(3, 2), nullptr, 16));
        continue;
      }
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, kMeta.size(), kMeta) == 0) {
          out += ' ';
          i += kMeta.size();
        } else {
          out += t[i++];
        }
      }
    } else {
      out = t;
    }
  }
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  int32_t id = vocab_.find(text);
  if (id >= 0) return id;
  return std::nullopt;
}

void Tokenizer::split_added(std::string_view text, bool parse_special,
                            std::vector<std::pair<std::string_view, int32_t>>& out) const {
  size_t segment_start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    size_t hit_begin = i, hit_end = i;
    for (size_t index : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& a = added_[index];
      if (a.special && !parse_special) continue;
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      size_t end = i + a.content.size();
      if (a.single_word && ((i > 0 && is_word_char(codepoint_before(text, i))) ||
                            (end < text.size() && [&] { size_t k = end; return is_word_char(next_codepoint(text, k)); }())))
        continue;
      hit = &a;
      hit_end = end;
      break;  // longest first
    }
    if (!hit) {
      next_codepoint(text, i);
      continue;
    }
    if (hit->lstrip)
      while (hit_begin > segment_start && is_space(text[hit_begin - 1])) --hit_begin;
    if (hit->rstrip)
      while (hit_end < text.size() && is_space(text[hit_end])) ++hit_end;
    if (hit_begin > segment_start) out.push_back({text.substr(segment_start, hit_begin - segment_start), -1});
    out.push_back({{}, hit->id});
    segment_start = i = hit_end;
  }
  if (segment_start < text.size()) out.push_back({text.substr(segment_start), -1});
}

namespace {

// Python's str.isspace, which Kimi's tokenizer cuts its runs by.
bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// tokenization_kimi.py's cuts: pieces of at most 400,000 characters, each cut again where a run of
// whitespace or of non-whitespace would pass max_run characters.
std::vector<std::string_view> cut_runs(std::string_view text, size_t max_run) {
  std::vector<std::string_view> out;
  size_t start = 0, run = 0, chars = 0, i = 0;
  bool space = false;
  while (i < text.size()) {
    const size_t at = i;
    const bool s = python_space(next_codepoint(text, i));
    if (chars % 400000 == 0) {  // a new 400,000-character piece starts its own run
      if (at > start) out.push_back(text.substr(start, at - start));
      start = at, run = 1, space = s;
    } else if (s != space) {
      run = 1, space = s;
    } else if (++run > max_run) {
      out.push_back(text.substr(start, at - start));
      start = at, run = 1;
    }
    ++chars;
  }
  out.push_back(text.substr(start));
  return out;
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view raw, bool add_special, bool parse_special) const {
  const std::string text = sanitize_utf8(raw);
  std::vector<int32_t> out;
  if (add_special) out = prefix_;
  bool first = true;
  for (std::string_view piece : max_run_ ? cut_runs(text, max_run_) : std::vector<std::string_view>{text})
    encode_piece(piece, parse_special, first, out);
  if (add_special) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

void Tokenizer::encode_piece(std::string_view text, bool parse_special, bool& first, std::vector<int32_t>& out) const {
  std::vector<std::pair<std::string_view, int32_t>> segments;
  split_added(text, parse_special, segments);
  for (auto& [piece, id] : segments) {
    if (id >= 0) {
      out.push_back(id);
      first = false;
      continue;
    }
    std::string normalized = normalizer_.apply(std::string(piece));
    if (spm_) {
      spm_->encode(normalized, out);
    } else {
      for (const std::string& word : pre_tokenizer_.apply(normalized, first)) bpe_->encode(word, out);
    }
    first = false;
  }
}

void Tokenizer::append_token_bytes(int32_t id, bool first, std::string& out) const {
  const std::string& bytes = piece_bytes_[size_t(id)];
  if (first && strip_first_space_ && !bytes.empty() && bytes[0] == ' ') out.append(bytes, 1, std::string::npos);
  else out += bytes;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= piece_bytes_.size() || (skip_special && is_special(id))) continue;
    append_token_bytes(id, first, out);
    first = false;
  }
  return sanitize_utf8(out);
}

std::string Tokenizer::Stream::feed(int32_t id) {
  if (id < 0 || size_t(id) >= t_.piece_bytes_.size()) return {};
  if (skip_special_ && t_.is_special(id) && std::find(kept_.begin(), kept_.end(), id) == kept_.end()) return {};
  t_.append_token_bytes(id, !started_, pending_);
  started_ = true;
  size_t n = complete_utf8_prefix(pending_);
  std::string ready = sanitize_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return ready;
}

std::string Tokenizer::Stream::finish() {
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace ftllm::tokenizer
