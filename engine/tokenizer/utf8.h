// UTF-8 helpers. Invalid input never throws or crashes: bad bytes read as U+FFFD.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ftllm::tokenizer {

constexpr uint32_t kReplacementChar = 0xFFFD;

// The code point at s[i], advancing i past it; an invalid or truncated sequence reads as U+FFFD and
// advances by one byte.
uint32_t next_codepoint(std::string_view s, size_t& i);
void append_utf8(std::string& out, uint32_t cp);
// s with every invalid byte replaced by U+FFFD (valid text comes back unchanged).
std::string sanitize_utf8(std::string_view s);
// The length of the longest prefix of s that does not end inside an incomplete character: what a stream
// may emit now, keeping the rest until more bytes arrive.
size_t complete_utf8_prefix(std::string_view s);

}  // namespace ftllm::tokenizer
