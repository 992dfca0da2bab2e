#include "utf8.h"

namespace ftllm::tokenizer {

namespace {
// Sequence length from the lead byte; 0 for bytes that cannot start a character.
int sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}
// Valid second-byte range for a lead byte (Unicode table 3-7); 0x80..0xBF for the rest.
void second_byte_range(unsigned char lead, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
}

}  // namespace

uint32_t next_codepoint(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const int n = sequence_length(c);
  if (n == 1) return ++i, c;
  if (n == 0) return ++i, kReplacementChar;
  // An ill-formed sequence is replaced by one U+FFFD per maximal valid prefix, as Rust's and Python's
  // lossy decoders do.
  uint32_t cp = c & (0xFF >> (n + 1));
  size_t k = 1;
  for (; k < size_t(n); ++k) {
    if (i + k >= s.size()) break;
    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
    unsigned char lo = 0x80, hi = 0xBF;
    if (k == 1) second_byte_range(c, lo, hi);
    if (cc < lo || cc > hi) break;
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += k;
  return k == size_t(n) ? cp : kReplacementChar;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    append_utf8(out, next_codepoint(s, i));
  }
  return out;
}

size_t complete_utf8_prefix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int n = sequence_length(c);
    return n > int(back) ? s.size() - back : s.size();
  }
  return s.size();
}

}  // namespace ftllm::tokenizer
