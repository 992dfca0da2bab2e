#include "value.h"

#include "../../core/json_writer.h"
#include "render.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ftllm::jinja {

const Value* CallArgs::get(size_t pos, const char* name) const {
  if (pos < positional.size()) return &positional[pos];
  for (auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (type) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return b;
    case Type::Int: return i != 0;
    case Type::Float: return f != 0;
    case Type::String: return !s.empty();
    case Type::Array: return !array->empty();
    case Type::Object: return is_namespace || !object->empty();
    case Type::Function: return true;
  }
  return false;
}

Value Value::get(const std::string& key) const {
  if (type == Type::Object)
    for (auto& [k, v] : *object)
      if (k == key) return v;
  return undefined(key);
}

Value Value::key_at(size_t index) const {
  if (keys && index < keys->size()) return (*keys)[index];
  return string((*object)[index].first);
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *object)
    if (k == key) {
      old = std::move(v);
      return;
    }
  object->emplace_back(key, std::move(v));
}

std::optional<int64_t> parse_int64(std::string_view text) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return v;
}

// Python's float repr: the shortest digits that round-trip, exponent form outside [1e-4, 1e16).
std::string python_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, end);  // d.ddde±XX
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else {
    if (digits.size() <= size_t(exp) + 1) out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    else out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
  }
  return negative ? "-" + out : out;
}

namespace {

std::string python_quote(const std::string& s) {
  // Python prefers single quotes, and switches to double quotes when the text has ' but no ".
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == q) out += std::string("\\") + char(q);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out += char(c);
  }
  return out + q;
}

}  // namespace

std::string Value::str() const {
  switch (type) {
    case Type::Undefined: return "";
    case Type::String: return s;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (type) {
    case Type::Undefined: return "";
    case Type::None: return "None";
    case Type::Bool: return b ? "True" : "False";
    case Type::Int: return std::to_string(i);
    case Type::Float: return python_float(f);
    case Type::String: return python_quote(s);
    case Type::Array: {
      std::string out = "[";
      for (size_t k = 0; k < array->size(); ++k) out += (k ? ", " : "") + (*array)[k].repr();
      return out + "]";
    }
    case Type::Object: {
      if (is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t k = 0; k < object->size(); ++k)
        out += (k ? ", " : "") + python_quote((*object)[k].first) + ": " + (*object)[k].second.repr();
      return out + "}";
    }
    case Type::Function: return "<function>";
  }
  return "";
}

std::string Value::json(int indent, bool sort_keys, int depth) const {
  // A namespace can hold itself; Python would recurse until its own limit too.
  if (depth > 256) throw TemplateError("tojson: a value nested deeper than 256 levels (one that contains itself?)");
  if (indent > 0) check_size(size_t(indent) * size_t(depth + 1));
  const std::string nl = indent >= 0 ? "\n" + std::string(size_t(indent * (depth + 1)), ' ') : "";
  const std::string close_nl = indent >= 0 ? "\n" + std::string(size_t(indent * depth), ' ') : "";
  const std::string item_sep = indent >= 0 ? "," : ", ";
  switch (type) {
    case Type::Undefined:
    case Type::None: return "null";
    case Type::Bool: return b ? "true" : "false";
    case Type::Int: return std::to_string(i);
    case Type::Float:
      if (std::isnan(f)) return "NaN";
      if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
      return python_float(f);
    case Type::String: return json_quote(s);
    case Type::Array: {
      if (array->empty()) return "[]";
      std::string out = "[";
      for (size_t k = 0; k < array->size(); ++k) out += (k ? item_sep : "") + nl + (*array)[k].json(indent, sort_keys, depth + 1);
      return out + close_nl + "]";
    }
    case Type::Object: {
      if (object->empty()) return "{}";
      Object items = *object;
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.first < b.first; });
      std::string out = "{";
      for (size_t k = 0; k < items.size(); ++k)
        out += (k ? item_sep : "") + nl + json_quote(items[k].first) + ": " + items[k].second.json(indent, sort_keys, depth + 1);
      return out + close_nl + "}";
    }
    case Type::Function: throw TemplateError("a function cannot be turned into JSON");
  }
  return "null";
}

bool equals(const Value& a, const Value& b) {
  using T = Value::Type;
  if ((a.type == T::Int || a.type == T::Float || a.type == T::Bool) && (b.type == T::Int || b.type == T::Float || b.type == T::Bool))
    return a.as_double() == b.as_double();
  if (a.type != b.type) return (a.is_undefined() && b.is_undefined());
  switch (a.type) {
    case T::Undefined:
    case T::None: return true;
    case T::String: return a.s == b.s;
    case T::Array:
      if (a.array->size() != b.array->size()) return false;
      for (size_t k = 0; k < a.array->size(); ++k)
        if (!equals((*a.array)[k], (*b.array)[k])) return false;
      return true;
    case T::Object:
      if (a.object->size() != b.object->size()) return false;
      for (auto& [k, v] : *a.object)
        if (!equals(v, b.get(k))) return false;
      return true;
    default: return a.fn == b.fn;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
  throw TemplateError("cannot compare " + a.repr() + " with " + b.repr());
}

}  // namespace ftllm::jinja
