// What templates can call without defining it: globals (range, namespace, dict, raise_exception,
// strftime_now), methods of str/dict/list, operators, filters and tests, with Python's semantics.
#pragma once

#include <functional>
#include <string>

#include "render.h"
#include "value.h"

namespace ftllm::jinja {

using TestFn = std::function<bool(const std::string&, const Value&, const CallArgs&)>;
using FilterFn = std::function<Value(const std::string&, const Value&, const CallArgs&)>;

Value builtin_global(const std::string& name, const RenderOptions& options);
// A bound method of a string, dict or list, or undefined when there is none of that name.
Value method(const Value& obj, const std::string& name);
Value binary_op(const std::string& op, const Value& l, const Value& r);
Value builtin_filter(const std::string& name, const Value& input, const CallArgs& args, const TestFn& test,
                     const FilterFn& filter);
bool builtin_test(const std::string& name, const Value& input, const CallArgs& args);

}  // namespace ftllm::jinja
