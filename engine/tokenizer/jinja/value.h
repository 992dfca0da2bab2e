// Values of the Jinja engine: Python's data model as chat templates see it (None, bool, int, float, str,
// list, dict with insertion order, callables), with reference semantics for lists and dicts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ftllm::jinja {

// A template failed: the message names the template line when one is known.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& m) : std::runtime_error(m) {}
};

// Decimal digits (an optional sign first) to an int64; nullopt when not that or out of 64-bit range.
std::optional<int64_t> parse_int64(std::string_view text);

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, like Python's dict

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* get(size_t pos, const char* name) const;  // by position, else by keyword; null if absent
};
using Function = std::function<Value(const CallArgs&)>;

struct Value {
  enum class Type { Undefined, None, Bool, Int, Float, String, Array, Object, Function };
  Type type = Type::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> array;
  std::shared_ptr<Object> object;
  std::shared_ptr<Function> fn;
  bool is_namespace = false;  // an Object whose attributes `set ns.x = ...` may assign
  // A dict literal with non-string keys ({0: 'a'}) keeps them here, parallel to `object`, for iteration.
  std::shared_ptr<Array> keys;
  std::string undefined_name;  // for errors about using an undefined value

  Value() = default;
  static Value undefined(std::string name = {}) {
    Value v;
    v.undefined_name = std::move(name);
    return v;
  }
  static Value none() { return with(Type::None); }
  static Value boolean(bool x) {
    Value v = with(Type::Bool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = with(Type::Int);
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v = with(Type::Float);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = with(Type::String);
    v.s = std::move(x);
    return v;
  }
  static Value list(Array a = {}) {
    Value v = with(Type::Array);
    v.array = std::make_shared<Array>(std::move(a));
    return v;
  }
  static Value dict(Object o = {}) {
    Value v = with(Type::Object);
    v.object = std::make_shared<Object>(std::move(o));
    return v;
  }
  static Value function(Function f) {
    Value v = with(Type::Function);
    v.fn = std::make_shared<Function>(std::move(f));
    return v;
  }

  bool is_undefined() const { return type == Type::Undefined; }
  bool is_none() const { return type == Type::None; }
  bool is_string() const { return type == Type::String; }
  bool is_number() const { return type == Type::Int || type == Type::Float; }
  bool is_array() const { return type == Type::Array; }
  bool is_object() const { return type == Type::Object; }
  bool truthy() const;
  double as_double() const { return type == Type::Float ? f : double(type == Type::Bool ? b : i); }

  // Dict lookup; undefined when absent.
  Value get(const std::string& key) const;
  Value key_at(size_t index) const;  // the original key of entry `index`
  void set(const std::string& key, Value v);

  // str(x) as Python prints it ({{ x }}): None, True, 1.5, ['a', 1], {'k': None}; undefined is "".
  std::string str() const;
  // repr(x): strings quoted as Python quotes them.
  std::string repr() const;
  // json.dumps(x, ensure_ascii=False, indent=..., sort_keys=...) as transformers' tojson filter does.
  std::string json(int indent = -1, bool sort_keys = false, int depth = 0) const;

 private:
  static Value with(Type t) {
    Value v;
    v.type = t;
    return v;
  }
};

bool equals(const Value& a, const Value& b);
// Python's ordering for numbers and strings; throws TemplateError for others.
int compare(const Value& a, const Value& b);
std::string python_float(double x);

}  // namespace ftllm::jinja
