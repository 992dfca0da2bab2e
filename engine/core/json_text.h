// JSON text for the few files the engine writes (config.json, safetensors headers): strings escaped,
// numbers printed so that they read back to the same double.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>

namespace ftllm {

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

inline std::string json_number(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

}  // namespace ftllm
