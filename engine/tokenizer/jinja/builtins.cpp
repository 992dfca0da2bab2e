#include "builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

namespace ftllm::jinja {

namespace {

[[noreturn]] void error(const std::string& why) { throw TemplateError(why); }

// A string or list of this size is about to be built: within the render's limits, and counted as work.
void will_build(size_t size) {
  check_size(size);
  charge_work(size / 16);
}
size_t will_build(int64_t count, size_t unit) {
  if (count <= 0) return 0;
  if (unit && uint64_t(count) > (size_t(-1) / 2) / unit) check_size(size_t(-1));
  will_build(size_t(count) * unit);
  return size_t(count);
}

const Value* arg(const CallArgs& a, size_t pos, const char* name) { return a.get(pos, name); }

// Python's int(x) of a float, which must be finite and, here, fit in 64 bits.
int64_t float_to_int(double f) {
  if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0))  // -2^63 <= f < 2^63, and not NaN
    error("cannot convert the float " + Value::number(f).repr() + " to a 64-bit integer");
  return int64_t(f);
}
std::string arg_str(const CallArgs& a, size_t pos, const char* name, std::string fallback = {}) {
  const Value* v = arg(a, pos, name);
  return v && !v->is_none() && !v->is_undefined() ? v->str() : fallback;
}
int64_t arg_int(const CallArgs& a, size_t pos, const char* name, int64_t fallback) {
  const Value* v = arg(a, pos, name);
  return v && v->is_number() ? (v->type == Value::Type::Int ? v->i : float_to_int(v->f)) : v && v->type == Value::Type::Bool ? v->b : fallback;
}
bool arg_bool(const CallArgs& a, size_t pos, const char* name, bool fallback) {
  const Value* v = arg(a, pos, name);
  return v ? v->truthy() : fallback;
}

Array items_of(const Value& v) {
  if (v.is_array()) return *v.array;
  Array out;
  if (v.is_object())
    for (auto& [k, x] : *v.object) out.push_back(Value::string(k));
  else if (v.is_string())
    for (size_t i = 0; i < v.s.size();) {  // by character
      size_t start = i++;
      while (i < v.s.size() && (static_cast<unsigned char>(v.s[i]) & 0xC0) == 0x80) ++i;
      out.push_back(Value::string(v.s.substr(start, i - start)));
    }
  else if (!v.is_undefined() && !v.is_none())
    error(v.repr() + " is not iterable");
  else if (v.is_none())
    error("'NoneType' object is not iterable");
  return out;
}

// "a.b.c" attribute paths, as jinja2's attribute= arguments allow.
Value attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_object()) cur = cur.get(part);
    else if (cur.is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      auto i = parse_int64(part);
      cur = i && uint64_t(*i) < cur.array->size() ? (*cur.array)[size_t(*i)] : Value::undefined(part);
    } else cur = Value::undefined(part);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  const std::string set = chars.empty() ? std::string(" \t\n\r\v\f") : chars;
  size_t b = 0, e = s.size();
  if (left) while (b < e && set.find(s[b]) != std::string::npos) ++b;
  if (right) while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to, int64_t count = -1) {
  if (from.empty()) return s;
  size_t pos = 0;
  for (int64_t n = 0; (count < 0 || n < count) && (pos = s.find(from, pos)) != std::string::npos; ++n) {
    if (to.size() > from.size()) will_build(s.size() + to.size() - from.size());
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

std::string case_map(const std::string& s, bool upper) {
  std::string out = s;
  for (char& c : out) c = char(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    unsigned char u = static_cast<unsigned char>(c);
    c = char(start ? std::toupper(u) : std::tolower(u));
    start = !std::isalnum(u) && u < 0x80;
  }
  return out;
}

Value split(const std::string& s, const Value* sep_v, int64_t maxsplit) {
  Array parts;
  if (!sep_v || sep_v->is_none()) {  // runs of whitespace, no empty strings
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && int64_t(parts.size()) == maxsplit) {
        parts.push_back(Value::string(strip_chars(s.substr(i), "", false, true)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      parts.push_back(Value::string(s.substr(i, j - i)));
      i = j;
    }
    return Value::list(parts);
  }
  const std::string sep = sep_v->str();
  if (sep.empty()) error("empty separator");
  size_t start = 0;
  for (;;) {
    size_t at = s.find(sep, start);
    if (at == std::string::npos || (maxsplit >= 0 && int64_t(parts.size()) == maxsplit)) {
      parts.push_back(Value::string(s.substr(start)));
      break;
    }
    parts.push_back(Value::string(s.substr(start, at - start)));
    start = at + sep.size();
  }
  return Value::list(parts);
}

// Python's "%s" % args for the conversions templates use (%s %d %i %f %r %%).
std::string percent_format(const std::string& fmt, const Value& args) {
  Array list = args.is_array() ? *args.array : Array{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out += fmt[i];
      continue;
    }
    char c = fmt[++i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= list.size()) error("not enough arguments for format string");
    const Value& v = list[next++];
    will_build(out.size());
    if (c == 's') out += v.str();
    else if (c == 'r') out += v.repr();
    else if (c == 'd' || c == 'i') out += std::to_string(v.type == Value::Type::Float ? float_to_int(v.f) : v.i);
    else if (c == 'f') {
      char b[64];
      std::snprintf(b, sizeof b, "%f", v.as_double());
      out += b;
    } else error(std::string("unsupported format %") + c);
  }
  return out;
}

// Python's integers never overflow; ours are 64-bit, and a result that does not fit is an error.
// The result is read through a pointer, after the overflow check has written it.
int64_t checked(bool overflowed, const int64_t* result) {
  if (overflowed) error("integer overflow: the result does not fit in 64 bits");
  return *result;
}

int64_t int_power(int64_t base, int64_t exponent) {  // exponent >= 0, by squaring
  int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) checked(__builtin_mul_overflow(result, base, &result), &result);
    exponent >>= 1;
    if (exponent) checked(__builtin_mul_overflow(base, base, &base), &base);
  }
  return result;
}

Value number_op(const std::string& op, const Value& l, const Value& r) {
  const bool ints = l.type != Value::Type::Float && r.type != Value::Type::Float;
  const double x = l.as_double(), y = r.as_double();
  const int64_t a = l.type == Value::Type::Bool ? l.b : l.i, b = r.type == Value::Type::Bool ? r.b : r.i;
  int64_t n = 0;
  if (op == "+") return ints ? Value::integer(checked(__builtin_add_overflow(a, b, &n), &n)) : Value::number(x + y);
  if (op == "-") return ints ? Value::integer(checked(__builtin_sub_overflow(a, b, &n), &n)) : Value::number(x - y);
  if (op == "*") return ints ? Value::integer(checked(__builtin_mul_overflow(a, b, &n), &n)) : Value::number(x * y);
  if (op == "/") {
    if (y == 0) error("division by zero");
    return Value::number(x / y);
  }
  if (op == "//") {
    if (y == 0) error("integer division by zero");
    if (ints) {
      if (a == INT64_MIN && b == -1) checked(true, &a);
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return Value::integer(q);
    }
    return Value::number(std::floor(x / y));
  }
  if (op == "%") {
    if (y == 0) error("modulo by zero");
    if (ints) {
      if (b == -1) return Value::integer(0);
      int64_t m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return Value::integer(m);
    }
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::number(m);
  }
  if (op == "**") {
    if (ints && b >= 0) return Value::integer(int_power(a, b));
    return Value::number(std::pow(x, y));
  }
  error("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) return container.s.find(item.str()) != std::string::npos;
  if (container.is_array()) {
    for (const Value& v : *container.array)
      if (equals(v, item)) return true;
    return false;
  }
  if (container.is_object()) return !container.get(item.str()).is_undefined();
  if (container.is_undefined()) return false;  // jinja2's Undefined iterates as empty
  error("argument of type " + container.repr() + " is not iterable");
}

}  // namespace

Value binary_op(const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return Value::boolean(equals(l, r));
  if (op == "!=") return Value::boolean(!equals(l, r));
  if (op == "<") return Value::boolean(compare(l, r) < 0);
  if (op == ">") return Value::boolean(compare(l, r) > 0);
  if (op == "<=") return Value::boolean(compare(l, r) <= 0);
  if (op == ">=") return Value::boolean(compare(l, r) >= 0);
  if (op == "in") return Value::boolean(contains(r, l));
  if (op == "not in") return Value::boolean(!contains(r, l));
  if (op == "~") {
    std::string a = l.str(), b = r.str();
    will_build(a.size() + b.size());
    return Value::string(a + b);
  }
  if (op == "+" && l.is_string() && r.is_string()) {
    will_build(l.s.size() + r.s.size());
    return Value::string(l.s + r.s);
  }
  if (op == "+" && l.is_array() && r.is_array()) {
    will_build(int64_t(l.array->size() + r.array->size()), sizeof(Value));
    Array a = *l.array;
    a.insert(a.end(), r.array->begin(), r.array->end());
    return Value::list(a);
  }
  if (op == "%" && l.is_string()) return Value::string(percent_format(l.s, r));
  if (op == "*" && l.is_string() && r.type == Value::Type::Int) {
    const size_t copies = will_build(r.i, l.s.size());
    std::string s;
    s.reserve(copies * l.s.size());
    for (size_t k = 0; k < copies && !l.s.empty(); ++k) s += l.s;
    return Value::string(s);
  }
  auto numeric = [](const Value& v) { return v.is_number() || v.type == Value::Type::Bool; };
  if (numeric(l) && numeric(r)) return number_op(op, l, r);
  if (l.is_undefined() || r.is_undefined())
    error("'" + (l.is_undefined() ? l.undefined_name : r.undefined_name) + "' is undefined");
  error("unsupported operand types for " + op + ": " + l.repr() + " and " + r.repr());
}

Value builtin_global(const std::string& name, const RenderOptions& options) {
  if (name == "range")
    return Value::function([](const CallArgs& a) {
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.size() == 1) stop = a.positional[0].i;
      else if (a.positional.size() >= 2) {
        start = a.positional[0].i;
        stop = a.positional[1].i;
        if (a.positional.size() > 2) step = a.positional[2].i;
      }
      if (step == 0) error("range() step must not be zero");
      // jinja2's sandbox refuses ranges over 100,000 items (MAX_RANGE); so do we.
      const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
      const __int128 count = span <= 0 ? 0 : (span + (step > 0 ? step : -__int128(step)) - 1) / (step > 0 ? step : -__int128(step));
      if (count > 100000) error("range() too large: " + std::to_string(int64_t(count)) + " items, over the limit of 100000");
      will_build(int64_t(count), sizeof(Value));
      Array out;
      for (int64_t k = 0; k < int64_t(count); ++k) out.push_back(Value::integer(start + k * step));
      return Value::list(out);
    });
  if (name == "namespace")
    return Value::function([](const CallArgs& a) {
      Value ns = Value::dict();
      ns.is_namespace = true;
      own_namespace(ns.object);
      if (!a.positional.empty() && a.positional[0].is_object()) *ns.object = *a.positional[0].object;
      for (auto& [k, v] : a.keyword) ns.set(k, v);
      return ns;
    });
  if (name == "dict")
    return Value::function([](const CallArgs& a) {
      Value d = Value::dict();
      if (!a.positional.empty() && a.positional[0].is_object()) *d.object = *a.positional[0].object;
      for (auto& [k, v] : a.keyword) d.set(k, v);
      return d;
    });
  if (name == "raise_exception")
    return Value::function([](const CallArgs& a) -> Value {
      error(a.positional.empty() ? std::string("raise_exception called") : a.positional[0].str());
    });
  if (name == "strftime_now") {
    std::time_t now = options.now ? options.now : std::time(nullptr);
    return Value::function([now](const CallArgs& a) {
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof buf, a.positional.empty() ? "" : a.positional[0].str().c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
  }
  return Value::undefined(name);
}

Value method(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    const std::string s = obj.s;
    auto str_fn = [](std::function<Value(const CallArgs&)> f) { return Value::function(std::move(f)); };
    if (name == "strip") return str_fn([s](const CallArgs& a) { return Value::string(strip_chars(s, arg_str(a, 0, "chars"), true, true)); });
    if (name == "lstrip") return str_fn([s](const CallArgs& a) { return Value::string(strip_chars(s, arg_str(a, 0, "chars"), true, false)); });
    if (name == "rstrip") return str_fn([s](const CallArgs& a) { return Value::string(strip_chars(s, arg_str(a, 0, "chars"), false, true)); });
    if (name == "upper") return str_fn([s](const CallArgs&) { return Value::string(case_map(s, true)); });
    if (name == "lower") return str_fn([s](const CallArgs&) { return Value::string(case_map(s, false)); });
    if (name == "title") return str_fn([s](const CallArgs&) { return Value::string(title_case(s)); });
    if (name == "capitalize")
      return str_fn([s](const CallArgs&) {
        std::string out = case_map(s, false);
        if (!out.empty()) out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
        return Value::string(out);
      });
    if (name == "startswith" || name == "endswith")
      return str_fn([s, name](const CallArgs& a) {
        const Value* p = arg(a, 0, "prefix");
        Array options = p && p->is_array() ? *p->array : Array{p ? *p : Value::string("")};
        for (const Value& o : options)
          if (name == "startswith" ? s.starts_with(o.str()) : s.ends_with(o.str())) return Value::boolean(true);
        return Value::boolean(false);
      });
    if (name == "split")
      return str_fn([s](const CallArgs& a) { return split(s, arg(a, 0, "sep"), arg_int(a, 1, "maxsplit", -1)); });
    if (name == "rsplit")
      return str_fn([s](const CallArgs& a) {
        int64_t max = arg_int(a, 1, "maxsplit", -1);
        if (max < 0) return split(s, arg(a, 0, "sep"), -1);
        // Split from the right: reverse, split, reverse back (separators are compared reversed too).
        std::string rs(s.rbegin(), s.rend());
        const Value* sep = arg(a, 0, "sep");
        Value rsep = sep && !sep->is_none() ? Value::string(std::string(sep->s.rbegin(), sep->s.rend())) : Value::none();
        Value parts = split(rs, sep && !sep->is_none() ? &rsep : nullptr, max);
        Array out;
        for (auto it = parts.array->rbegin(); it != parts.array->rend(); ++it)
          out.push_back(Value::string(std::string(it->s.rbegin(), it->s.rend())));
        return Value::list(out);
      });
    if (name == "splitlines")
      return str_fn([s](const CallArgs&) {
        Array out;
        size_t start = 0;
        for (size_t i = 0; i < s.size(); ++i)
          if (s[i] == '\n' || s[i] == '\r') {
            out.push_back(Value::string(s.substr(start, i - start)));
            if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
            start = i + 1;
          }
        if (start < s.size()) out.push_back(Value::string(s.substr(start)));
        return Value::list(out);
      });
    if (name == "replace")
      return str_fn([s](const CallArgs& a) {
        return Value::string(replace_all(s, arg_str(a, 0, "old"), arg_str(a, 1, "new"), arg_int(a, 2, "count", -1)));
      });
    if (name == "find")
      return str_fn([s](const CallArgs& a) {
        size_t at = s.find(arg_str(a, 0, "sub"));
        return Value::integer(at == std::string::npos ? -1 : int64_t(at));
      });
    if (name == "count")
      return str_fn([s](const CallArgs& a) {
        std::string sub = arg_str(a, 0, "sub");
        int64_t n = 0;
        for (size_t at = 0; !sub.empty() && (at = s.find(sub, at)) != std::string::npos; at += sub.size()) ++n;
        return Value::integer(n);
      });
    if (name == "join")
      return str_fn([s](const CallArgs& a) {
        std::string out;
        Array items = a.positional.empty() ? Array{} : items_of(a.positional[0]);
        for (size_t i = 0; i < items.size(); ++i) {
          out += (i ? s : "") + items[i].str();
          will_build(out.size());
        }
        return Value::string(out);
      });
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum")
      return str_fn([s, name](const CallArgs&) {
        if (s.empty()) return Value::boolean(false);
        for (unsigned char c : s) {
          bool ok = name == "isdigit" ? std::isdigit(c) : name == "isalpha" ? std::isalpha(c) : name == "isspace" ? std::isspace(c) : std::isalnum(c);
          if (!ok) return Value::boolean(false);
        }
        return Value::boolean(true);
      });
    if (name == "format")
      return str_fn([s](const CallArgs& a) {
        std::string out;
        size_t next = 0;
        for (size_t i = 0; i < s.size(); ++i) {
          if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') { out += '{'; ++i; continue; }
          if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') { out += '}'; ++i; continue; }
          if (s[i] != '{') { out += s[i]; continue; }
          size_t close = s.find('}', i);
          if (close == std::string::npos) error("unmatched '{' in format string");
          std::string field = s.substr(i + 1, close - i - 1);
          const Value* v = nullptr;
          if (field.empty()) v = next < a.positional.size() ? &a.positional[next++] : nullptr;
          else if (std::all_of(field.begin(), field.end(), ::isdigit)) v = arg(a, size_t(parse_int64(field).value_or(-1)), "");
          else v = arg(a, size_t(-1), field.c_str());
          if (!v) error("format string refers to a missing argument {" + field + "}");
          out += v->str();
          will_build(out.size());
          i = close;
        }
        return Value::string(out);
      });
    return Value::undefined(name);
  }
  if (obj.is_object() && !obj.is_namespace) {
    Value self = obj;
    if (name == "items")
      return Value::function([self](const CallArgs&) {
        Array out;
        for (size_t k = 0; k < self.object->size(); ++k) out.push_back(Value::list({self.key_at(k), (*self.object)[k].second}));
        return Value::list(out);
      });
    if (name == "keys")
      return Value::function([self](const CallArgs&) {
        Array out;
        for (size_t k = 0; k < self.object->size(); ++k) out.push_back(self.key_at(k));
        return Value::list(out);
      });
    if (name == "values")
      return Value::function([self](const CallArgs&) {
        Array out;
        for (auto& [k, v] : *self.object) out.push_back(v);
        return Value::list(out);
      });
    if (name == "get")
      return Value::function([self](const CallArgs& a) {
        Value v = self.get(arg_str(a, 0, "key"));
        if (!v.is_undefined()) return v;
        const Value* d = arg(a, 1, "default");
        return d ? *d : Value::none();
      });
    return Value::undefined(name);
  }
  if (obj.is_array()) {
    Value self = obj;
    if (name == "index")
      return Value::function([self](const CallArgs& a) {
        for (size_t i = 0; i < self.array->size(); ++i)
          if (!a.positional.empty() && equals((*self.array)[i], a.positional[0])) return Value::integer(int64_t(i));
        error("value is not in list");
      });
    if (name == "count")
      return Value::function([self](const CallArgs& a) {
        int64_t n = 0;
        for (const Value& v : *self.array) n += !a.positional.empty() && equals(v, a.positional[0]);
        return Value::integer(n);
      });
    if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove")
      return Value::function([name](const CallArgs&) -> Value {
        error("list." + name + "() is not allowed: chat templates cannot modify lists (use a namespace)");
      });
  }
  return Value::undefined(name);
}

bool builtin_test(const std::string& name, const Value& v, const CallArgs& a) {
  using T = Value::Type;
  const Value* other = arg(a, 0, "value");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.type == T::Bool;
  if (name == "true") return v.type == T::Bool && v.b;
  if (name == "false") return v.type == T::Bool && !v.b;
  if (name == "string") return v.is_string();
  if (name == "number") return v.type == T::Int || v.type == T::Float;
  if (name == "integer") return v.type == T::Int;
  if (name == "float") return v.type == T::Float;
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_string() || v.is_object();
  if (name == "callable") return v.type == T::Function;
  if (name == "lower") return v.is_string() && case_map(v.s, false) == v.s;
  if (name == "upper") return v.is_string() && case_map(v.s, true) == v.s;
  if (name == "odd" || name == "even") {
    if (v.type != T::Int) error("odd/even need an integer");
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") return other && other->i != 0 && v.i % other->i == 0;
  if (!other) error("test '" + name + "' needs an argument");
  if (name == "eq" || name == "equalto" || name == "==" || name == "sameas") return equals(v, *other);
  if (name == "ne" || name == "!=") return !equals(v, *other);
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, *other) < 0;
  if (name == "le" || name == "<=") return compare(v, *other) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, *other) > 0;
  if (name == "ge" || name == ">=") return compare(v, *other) >= 0;
  if (name == "in") return contains(*other, v);
  error("unknown test '" + name + "'");
}

Value builtin_filter(const std::string& name, const Value& v, const CallArgs& a, const TestFn& test,
                     const FilterFn& filter) {
  if (name == "tojson") {
    const Value* indent = arg(a, 0, "indent");
    return Value::string(v.json(indent && indent->is_number() ? int(std::clamp<int64_t>(indent->i, -1, 1 << 20)) : -1, arg_bool(a, 100, "sort_keys", false)));
  }
  if (name == "safe" || name == "string") return name == "safe" ? v : Value::string(v.str());
  if (name == "e" || name == "escape") {
    std::string out;
    for (char c : v.str()) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&#34;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
      }
    }
    return Value::string(out);
  }
  if (name == "trim") return Value::string(strip_chars(v.str(), arg_str(a, 0, "chars"), true, true));
  if (name == "upper") return Value::string(case_map(v.str(), true));
  if (name == "lower") return Value::string(case_map(v.str(), false));
  if (name == "title") return Value::string(title_case(v.str()));
  if (name == "capitalize") {
    std::string s = case_map(v.str(), false);
    if (!s.empty()) s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
    return Value::string(s);
  }
  if (name == "replace") return Value::string(replace_all(v.str(), arg_str(a, 0, "old"), arg_str(a, 1, "new"), arg_int(a, 2, "count", -1)));
  if (name == "length" || name == "count") {
    if (v.is_string()) {
      int64_t n = 0;
      for (unsigned char c : v.s) n += (c & 0xC0) != 0x80;
      return Value::integer(n);
    }
    if (v.is_array()) return Value::integer(int64_t(v.array->size()));
    if (v.is_object()) return Value::integer(int64_t(v.object->size()));
    if (v.is_undefined()) return Value::integer(0);
    error("object of type " + v.repr() + " has no len()");
  }
  if (name == "default" || name == "d") {
    const Value* fallback = arg(a, 0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy())) return fallback ? *fallback : Value::string("");
    return v;
  }
  if (name == "first" || name == "last") {
    Array items = items_of(v);
    if (items.empty()) return Value::undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(items_of(v));
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_object()) error("items needs a mapping");
    Array out;
    for (size_t k = 0; k < v.object->size(); ++k) out.push_back(Value::list({v.key_at(k), (*v.object)[k].second}));
    return Value::list(out);
  }
  if (name == "dictsort") {
    if (!v.is_object()) error("dictsort needs a mapping");
    Array out;
    for (size_t k = 0; k < v.object->size(); ++k) out.push_back(Value::list({v.key_at(k), (*v.object)[k].second}));
    // By key, case-insensitively for strings, as jinja2 sorts.
    auto sort_key = [](const Value& pair) {
      const Value& key = (*pair.array)[0];
      return key.is_string() ? Value::string(case_map(key.s, false)) : key;
    };
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) { return compare(sort_key(x), sort_key(y)) < 0; });
    return Value::list(out);
  }
  if (name == "join") {
    std::string sep = arg_str(a, 0, "d");
    std::string attribute = arg_str(a, 1, "attribute");
    std::string out;
    Array items = items_of(v);
    for (size_t i = 0; i < items.size(); ++i) {
      out += (i ? sep : "") + (attribute.empty() ? items[i] : attribute_path(items[i], attribute)).str();
      will_build(out.size());
    }
    return Value::string(out);
  }
  if (name == "reverse") {
    if (v.is_string()) return Value::string(std::string(v.s.rbegin(), v.s.rend()));
    Array items = items_of(v);
    std::reverse(items.begin(), items.end());
    return Value::list(items);
  }
  if (name == "unique") {
    Array out;
    for (const Value& x : items_of(v))
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equals(x, y); })) out.push_back(x);
    return Value::list(out);
  }
  if (name == "sort") {
    Array items = items_of(v);
    bool reverse = arg_bool(a, 0, "reverse", false);
    std::string attribute = arg_str(a, 2, "attribute");
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      Value kx = attribute.empty() ? x : attribute_path(x, attribute), ky = attribute.empty() ? y : attribute_path(y, attribute);
      return reverse ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
    });
    return Value::list(items);
  }
  // jinja2's map/select/reject skip a falsy input (None, undefined, empty) instead of iterating it.
  const bool lazy_sequence = name == "map" || name == "select" || name == "reject" || name == "selectattr" ||
                             name == "rejectattr";
  if (lazy_sequence && !v.truthy()) return Value::list();
  if (name == "map") {
    Array out;
    std::string attribute = arg_str(a, size_t(-1), "attribute");
    for (const Value& x : items_of(v)) {
      if (!attribute.empty()) {
        Value got = attribute_path(x, attribute);
        const Value* def = arg(a, size_t(-1), "default");
        out.push_back(got.is_undefined() && def ? *def : got);
      } else {
        if (a.positional.empty()) error("map needs a filter name or attribute=");
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        rest.keyword = a.keyword;
        out.push_back(filter(a.positional[0].str(), x, rest));
      }
    }
    return Value::list(out);
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name.ends_with("attr"), keep = name.starts_with("select");
    size_t first = by_attr ? 1 : 0;
    std::string attribute = by_attr ? arg_str(a, 0, "attribute") : "";
    Array out;
    for (const Value& x : items_of(v)) {
      Value subject = by_attr ? attribute_path(x, attribute) : x;
      bool pass;
      if (a.positional.size() <= first) {
        pass = subject.truthy();
      } else {
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + int64_t(first) + 1, a.positional.end());
        pass = test(a.positional[first].str(), subject, rest);
      }
      if (pass == keep) out.push_back(x);
    }
    return Value::list(out);
  }
  if (name == "sum") {
    std::string attribute = arg_str(a, 0, "attribute");
    Value total = Value::integer(arg_int(a, 1, "start", 0));
    for (const Value& x : items_of(v)) total = binary_op("+", total, attribute.empty() ? x : attribute_path(x, attribute));
    return total;
  }
  if (name == "min" || name == "max") {
    Array items = items_of(v);
    if (items.empty()) return Value::undefined();
    Value best = items[0];
    for (const Value& x : items)
      if (name == "min" ? compare(x, best) < 0 : compare(x, best) > 0) best = x;
    return best;
  }
  if (name == "abs") return v.type == Value::Type::Int ? Value::integer(v.i == INT64_MIN ? checked(true, &v.i) : std::llabs(v.i)) : Value::number(std::fabs(v.as_double()));
  if (name == "int") {
    if (v.is_string()) {
      auto n = parse_int64(strip_chars(v.s, "", true, true));
      return Value::integer(n ? *n : arg_int(a, 0, "default", 0));
    }
    return v.is_number() || v.type == Value::Type::Bool ? Value::integer(v.type == Value::Type::Int ? v.i : float_to_int(v.as_double())) : Value::integer(arg_int(a, 0, "default", 0));
  }
  if (name == "float") {
    if (v.is_string()) {
      try {
        return Value::number(std::stod(v.s));
      } catch (...) {
        return Value::number(0.0);
      }
    }
    return Value::number(v.as_double());
  }
  if (name == "round") {
    int64_t precision = arg_int(a, 0, "precision", 0);
    std::string method_name = arg_str(a, 1, "method", "common");
    double scale = std::pow(10.0, double(precision)), x = v.as_double() * scale;
    double r = method_name == "ceil" ? std::ceil(x) : method_name == "floor" ? std::floor(x) : std::round(x);
    return Value::number(r / scale);
  }
  if (name == "indent") {
    int64_t width = 4;
    std::string pad(4, ' ');
    if (const Value* w = arg(a, 0, "width")) pad = w->is_string() ? w->s : std::string(will_build(w->i, 1), ' ');
    (void)width;
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    std::string s = v.str(), out;
    size_t start = 0;
    bool is_first = true;
    while (start <= s.size()) {
      size_t nl = s.find('\n', start);
      std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      bool indent_it = is_first ? first : (blank || !line.empty());
      if (indent_it && !(is_first && line.empty() && !blank && !first)) out += pad;
      will_build(out.size() + line.size());
      out += line;
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      is_first = false;
    }
    return Value::string(out);
  }
  if (name == "wordcount") return Value::integer(int64_t(split(v.str(), nullptr, -1).array->size()));
  if (name == "center") {
    int64_t width = arg_int(a, 0, "width", 80);
    std::string s = v.str();
    if (int64_t(s.size()) >= width) return Value::string(s);
    will_build(width, 1);
    size_t total = size_t(width) - s.size(), left = total / 2;
    return Value::string(std::string(left, ' ') + s + std::string(total - left, ' '));
  }
  if (name == "batch") {
    int64_t n = std::max<int64_t>(1, arg_int(a, 0, "linecount", 1));
    Array out, cur;
    for (const Value& x : items_of(v)) {
      cur.push_back(x);
      if (int64_t(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
    }
    if (!cur.empty()) out.push_back(Value::list(cur));
    return Value::list(out);
  }
  if (name == "format") {
    CallArgs rest = a;
    return Value::string(percent_format(v.str(), Value::list(rest.positional)));
  }
  if (name == "truncate") {
    int64_t length = arg_int(a, 0, "length", 255);
    std::string s = v.str();
    if (int64_t(s.size()) <= length) return Value::string(s);
    return Value::string(s.substr(0, size_t(std::max<int64_t>(0, length - 3))) + "...");
  }
  error("unknown filter '" + name + "'");
}

}  // namespace ftllm::jinja
