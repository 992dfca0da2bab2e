// Builds compact JSON text (simdjson parses; this writes). Commas are placed automatically.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace ftllm {

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
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out_ += buf;
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
  void quote(std::string_view s) {
    out_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += char(c);
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace ftllm
