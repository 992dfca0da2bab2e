// Reading fields of the daemon's JSON replies, with a fallback when a field is absent.
#pragma once

#include <simdjson.h>

namespace ftllm::client {

template <typename T>
T field(simdjson::dom::element e, const char* key, T fallback = {}) {
  T value;
  return e[key].get(value) == simdjson::SUCCESS ? value : fallback;
}

}  // namespace ftllm::client
