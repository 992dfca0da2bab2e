// Reading fields of the daemon's JSON replies, with a fallback when a field is absent.
#pragma once

#include <simdjson.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace ftllm::client {

template <typename T>
T field(simdjson::dom::element e, const char* key, T fallback = {}) {
  T value;
  return e[key].get(value) == simdjson::SUCCESS ? value : fallback;
}

// A model's placement as the tables show it: "cpu:0-11 numa:1:12-23".
inline std::string placement_text(simdjson::dom::element model) {
  std::string text;
  simdjson::dom::array places;
  if (model["placement"].get(places) == simdjson::SUCCESS)
    for (auto p : places)
      text += (text.empty() ? "" : " ") + std::string(field<std::string_view>(p, "device")) + ":" +
              std::string(field<std::string_view>(p, "layers"));
  return text;
}

// A JSON string literal for `s` (UTF-8 passes through; quotes, backslashes and controls are escaped).
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else out += char(c);
  }
  return out + "\"";
}

}  // namespace ftllm::client
