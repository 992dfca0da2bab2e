// The default limits every HTTP peer is held to, where the config file and the parser both read them.
#pragma once

#include <cstddef>

namespace ftllm::http {

inline constexpr size_t kDefaultMaxHeaderBytes = 64 * 1024;  // request line plus all headers
inline constexpr size_t kDefaultMaxBodyBytes = 16 * 1024 * 1024;

}  // namespace ftllm::http
