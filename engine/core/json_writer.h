// The one JSON writer: compact JSON text (simdjson parses; this writes) for the daemon's replies, ftllmctl's
// requests, the files the engine writes (config.json, safetensors headers) and templates' tojson.
// Header-only and std-only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace ftllm {

// Appends `s` as a JSON string literal: UTF-8 passes through; quotes, backslashes and control characters
// are escaped (as Python's json.dumps with ensure_ascii=False writes them).
inline void append_json_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

inline std::string json_quote(std::string_view s) {
  std::string out;
  append_json_quoted(out, s);
  return out;
}

// A double printed so that it reads back as the same double.
inline std::string json_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  JsonWriter& key(std::string_view k) {
    separate();
    quote(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& string(std::string_view s) { return value_begin(), quote(s), *this; }
  JsonWriter& number(int64_t v) { return value_begin(), out_ += std::to_string(v), *this; }
  JsonWriter& number(uint64_t v) { return value_begin(), out_ += std::to_string(v), *this; }
  JsonWriter& number(int v) { return number(int64_t(v)); }
  JsonWriter& number(double v) {
    value_begin();
    out_ += json_number(v);
    return *this;
  }
  JsonWriter& boolean(bool v) { return value_begin(), out_ += v ? "true" : "false", *this; }
  JsonWriter& null() { return value_begin(), out_ += "null", *this; }
  // Already-serialised JSON, inserted as one value.
  JsonWriter& raw(std::string_view json) { return value_begin(), out_ += json, *this; }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  JsonWriter& open(char c) {
    value_begin();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }
  void separate() {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void value_begin() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    separate();
  }
  void quote(std::string_view s) { append_json_quoted(out_, s); }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace ftllm
