#include "render.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "builtins.h"

namespace ftllm::jinja {

namespace {

using Scope = std::unordered_map<std::string, Value>;

// The running render's limits and what it has used; renders nest only through macros, on one thread.
struct Budget {
  RenderLimits limits;
  uint64_t work = 0;
  int depth = 0;
  std::vector<std::weak_ptr<Object>> namespaces;
};
thread_local Budget* current_budget = nullptr;

// One level of nesting (an expression, a statement, a macro call) and one unit of work.
class Nested {
 public:
  explicit Nested(int line) : budget_(*current_budget) {
    if (++budget_.depth > budget_.limits.max_depth) {
      --budget_.depth;
      throw TemplateError("chat template line " + std::to_string(line) + ": nested deeper than " +
                          std::to_string(budget_.limits.max_depth) + " levels (endless recursion?)");
    }
    charge_work(1);
  }
  ~Nested() { --budget_.depth; }
  Nested(const Nested&) = delete;
  Nested& operator=(const Nested&) = delete;

 private:
  Budget& budget_;
};

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  Renderer(const RenderOptions& options) : options_(options) {}

  std::string run(const Template& t, const Object& context) {
    Budget budget;
    budget.limits = options_.limits;
    Budget* outer = std::exchange(current_budget, &budget);
    struct Restore {
      Budget& budget;
      Budget* outer;
      ~Restore() {
        current_budget = outer;
        for (auto& weak : budget.namespaces)
          if (auto attributes = weak.lock()) Object().swap(*attributes);
      }
    } restore{budget, outer};
    auto globals = std::make_shared<Scope>();
    for (auto& [k, v] : context) (*globals)[k] = v;
    scopes_.push_back(globals);
    std::string out;
    exec(t.body, out);
    return out;
  }

 private:
  [[noreturn]] static void fail(int line, const std::string& why) {
    throw TemplateError("chat template line " + std::to_string(line) + ": " + why);
  }

  Value lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = (*it)->find(name);
      if (f != (*it)->end()) return f->second;
    }
    if (Value b = builtin_global(name, options_); !b.is_undefined()) return b;
    return Value::undefined(name);
  }
  void assign(const std::string& name, Value v) { (*scopes_.back())[name] = std::move(v); }

  Value call_value(const Value& f, const CallArgs& args, int line) {
    if (f.type != Value::Type::Function) {
      if (f.is_undefined()) fail(line, "'" + f.undefined_name + "' is undefined and cannot be called");
      fail(line, f.repr() + " is not callable");
    }
    try {
      return (*f.fn)(args);
    } catch (const TemplateError& e) {
      std::string m = e.what();
      if (m.starts_with("chat template line ")) throw;
      fail(line, m);
    }
  }

  CallArgs eval_args(const std::vector<Arg>& args) {
    CallArgs out;
    for (const Arg& a : args) {
      if (a.name.empty()) out.positional.push_back(eval(*a.value));
      else out.keyword.emplace_back(a.name, eval(*a.value));
    }
    return out;
  }

  Value eval(const Expr& e) {
    Nested nested(e.line);
    switch (e.kind) {
      case Expr::Literal: return e.literal;
      case Expr::Name: return lookup(e.name);
      case Expr::List:
      case Expr::Tuple: {
        Array items;
        for (auto& i : e.items) items.push_back(eval(*i));
        return Value::list(std::move(items));
      }
      case Expr::Dict: {
        Value d = Value::dict();
        Array keys;
        bool plain = true;
        for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
          Value key = eval(*e.items[k]);
          plain = plain && key.is_string();
          size_t before = d.object->size();
          d.set(key.str(), eval(*e.items[k + 1]));
          if (d.object->size() > before) keys.push_back(key);
        }
        if (!plain) d.keys = std::make_shared<Array>(std::move(keys));
        return d;
      }
      case Expr::Attr: {
        Value obj = eval(*e.a);
        if (obj.is_undefined()) fail(e.line, "'" + obj.undefined_name + "' is undefined");
        return get_attribute(obj, e.name, e.line);
      }
      case Expr::Item: {
        Value obj = eval(*e.a);
        if (obj.is_undefined()) fail(e.line, "'" + obj.undefined_name + "' is undefined");
        Value key = eval(*e.b);
        if (key.is_string() && obj.is_object()) return get_attribute(obj, key.s, e.line);
        return get_item(obj, key, e.line);
      }
      case Expr::Slice: {
        Value obj = eval(*e.a);
        auto part = [&](size_t k) { return e.items[k] ? eval(*e.items[k]) : Value::none(); };
        return slice(obj, part(0), part(1), part(2), e.line);
      }
      case Expr::Call: {
        Value f = eval(*e.a);
        return call_value(f, eval_args(e.args), e.line);
      }
      case Expr::Filter: {
        Value input = eval(*e.a);
        return apply_filter(e.name, input, eval_args(e.args), e.line);
      }
      case Expr::Test: {
        Value input = eval(*e.a);
        bool r = apply_test(e.name, input, eval_args(e.args), e.line);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::Unary: {
        Value v = eval(*e.a);
        if (v.type == Value::Type::Int) {
          if (v.i == INT64_MIN) fail(e.line, "integer overflow: the result does not fit in 64 bits");
          return Value::integer(-v.i);
        }
        if (v.type == Value::Type::Float) return Value::number(-v.f);
        fail(e.line, "cannot negate " + v.repr());
      }
      case Expr::Not: return Value::boolean(!eval(*e.a).truthy());
      case Expr::And: {
        Value l = eval(*e.a);
        return l.truthy() ? eval(*e.b) : l;
      }
      case Expr::Or: {
        Value l = eval(*e.a);
        return l.truthy() ? l : eval(*e.b);
      }
      case Expr::Ternary: {
        if (eval(*e.a).truthy()) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::undefined();
      }
      case Expr::Binary: {
        Value l = eval(*e.a), r = eval(*e.b);
        try {
          return binary_op(e.name, l, r);
        } catch (const TemplateError& err) {
          fail(e.line, err.what());
        }
      }
    }
    fail(e.line, "unknown expression");
  }

  Value get_attribute(const Value& obj, const std::string& name, int line) {
    if (obj.is_object()) {
      Value v = obj.get(name);
      if (!v.is_undefined() || obj.is_namespace) return v;
    }
    Value m = method(obj, name);
    if (!m.is_undefined()) return m;
    if (obj.is_array() || obj.is_string()) {
      // jinja2 falls back to item access: list.0
      bool digits = !name.empty() && std::all_of(name.begin(), name.end(), ::isdigit);
      if (auto n = digits ? parse_int64(name) : std::nullopt) return get_item(obj, Value::integer(*n), line);
    }
    return Value::undefined(name);
  }

  Value get_item(const Value& obj, const Value& key, int line) {
    if (obj.is_array() || obj.is_string()) {
      if (key.type != Value::Type::Int && key.type != Value::Type::Bool) return Value::undefined();
      int64_t n = obj.is_array() ? int64_t(obj.array->size()) : int64_t(obj.s.size());
      int64_t i = key.i < 0 ? key.i + n : key.i;
      if (i < 0 || i >= n) return Value::undefined();
      return obj.is_array() ? (*obj.array)[size_t(i)] : Value::string(obj.s.substr(size_t(i), 1));
    }
    if (obj.is_object()) return obj.get(key.str());
    if (obj.is_none()) return Value::undefined();
    fail(line, "cannot index " + obj.repr());
  }

  Value slice(const Value& obj, const Value& a, const Value& b, const Value& c, int line) {
    if (!obj.is_array() && !obj.is_string()) fail(line, "cannot slice " + obj.repr());
    int64_t n = obj.is_array() ? int64_t(obj.array->size()) : int64_t(obj.s.size());
    int64_t step = c.is_none() ? 1 : c.i;
    if (step == 0) fail(line, "slice step cannot be zero");
    auto clamp = [&](const Value& v, int64_t def) {
      if (v.is_none()) return def;
      int64_t x = v.i < 0 ? v.i + n : v.i;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    int64_t start = clamp(a, step > 0 ? 0 : n - 1), stop = clamp(b, step > 0 ? n : -1);
    Array items;
    std::string text;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (obj.is_array()) items.push_back((*obj.array)[size_t(i)]);
      else text += obj.s[size_t(i)];
    }
    return obj.is_array() ? Value::list(std::move(items)) : Value::string(text);
  }

  Flow exec(const Body& body, std::string& out) {
    for (const StmtPtr& s : body) {
      Flow f = exec(*s, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) return assign(targets[0], v);
    if (!v.is_array() || v.array->size() != targets.size())
      fail(line, "cannot unpack " + v.repr() + " into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], (*v.array)[i]);
  }

  Value macro_value(const Stmt& m) {
    const Stmt* def = &m;
    // Weak: the macro is itself stored in the globals, and a strong reference would make a cycle that
    // outlives the render (a leak per chat request).
    std::weak_ptr<Scope> weak_globals = scopes_.front();
    return Value::function([this, def, weak_globals](const CallArgs& args) {
      auto globals = weak_globals.lock();
      if (!globals) throw TemplateError("macro " + def->name + " called after its template finished");
      auto saved = std::move(scopes_);
      scopes_ = {globals, std::make_shared<Scope>()};
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [name, default_value] = def->params[i];
        const Value* given = args.get(i, name.c_str());
        assign(name, given ? *given : default_value ? eval(*default_value) : Value::undefined(name));
      }
      for (auto& [k, v] : args.keyword)
        if (k == "caller") assign("caller", v);
      std::string out;
      try {
        exec(def->body, out);
      } catch (...) {
        scopes_ = std::move(saved);
        throw;
      }
      scopes_ = std::move(saved);
      return Value::string(out);
    });
  }

  Flow exec(const Stmt& s, std::string& out) {
    Nested nested(s.line);
    const Flow flow = exec_statement(s, out);
    check_size(out.size());
    return flow;
  }

  Flow exec_statement(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Text: out += s.text; return Flow::Normal;
      case Stmt::Output: out += eval(*s.expr).str(); return Flow::Normal;
      case Stmt::Break: return Flow::Break;
      case Stmt::Continue: return Flow::Continue;
      case Stmt::If:
        for (auto& [cond, body] : s.branches)
          if (!cond || eval(*cond).truthy()) return exec(body, out);
        return Flow::Normal;
      case Stmt::Set: {
        Value v = eval(*s.expr);
        if (s.attr_target) {
          Value ns = lookup(s.targets[0]);
          if (!ns.is_namespace) fail(s.line, "cannot set an attribute of " + s.targets[0] + ", which is not a namespace");
          ns.set(s.targets[1], std::move(v));
        } else {
          bind_targets(s.targets, v, s.line);
        }
        return Flow::Normal;
      }
      case Stmt::SetBlock: {
        std::string captured;
        exec(s.body, captured);
        Value v = Value::string(captured);
        if (s.expr) v = apply_filter(s.expr->name, v, {}, s.line);
        assign(s.targets[0], v);
        return Flow::Normal;
      }
      case Stmt::Macro: assign(s.name, macro_value(s)); return Flow::Normal;
      case Stmt::CallBlock: {
        const Stmt* block = &s;
        auto outer = scopes_;
        Value caller = Value::function([this, block, outer](const CallArgs& args) {
          auto saved = std::move(scopes_);
          scopes_ = outer;
          scopes_.push_back(std::make_shared<Scope>());
          for (size_t i = 0; i < block->params.size(); ++i) {
            const Value* given = args.get(i, block->params[i].first.c_str());
            assign(block->params[i].first, given ? *given : Value::undefined());
          }
          std::string body;
          exec(block->body, body);
          scopes_ = std::move(saved);
          return Value::string(body);
        });
        const Expr& call = *s.expr;
        if (call.kind != Expr::Call) fail(s.line, "{% call %} needs a macro call");
        CallArgs args = eval_args(call.args);
        args.keyword.emplace_back("caller", caller);
        out += call_value(eval(*call.a), args, s.line).str();
        return Flow::Normal;
      }
      case Stmt::FilterBlock: {
        std::string captured;
        exec(s.body, captured);
        out += apply_filter(s.expr->name, Value::string(captured), eval_args(s.expr->args), s.line).str();
        return Flow::Normal;
      }
      case Stmt::For: return exec_for(s, out);
    }
    return Flow::Normal;
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    Value iterable = eval(*s.expr);
    Array items;
    if (iterable.is_array()) items = *iterable.array;
    else if (iterable.is_object()) for (size_t k = 0; k < iterable.object->size(); ++k) items.push_back(iterable.key_at(k));
    else if (iterable.is_string()) for (char c : iterable.s) items.push_back(Value::string(std::string(1, c)));
    else if (!iterable.is_undefined() && !iterable.is_none()) fail(s.line, iterable.repr() + " is not iterable");
    else if (iterable.is_none()) fail(s.line, "'NoneType' object is not iterable");

    scopes_.push_back(std::make_shared<Scope>());
    // The loop's `if` filters before loop.index and loop.length are counted, as in jinja2.
    if (s.condition) {
      Array kept;
      for (const Value& item : items) {
        bind_targets(s.targets, item, s.line);
        if (eval(*s.condition).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const size_t n = items.size();
    for (size_t i = 0; i < n; ++i) {
      charge_work(1);  // an empty body still costs its iteration
      bind_targets(s.targets, items[i], s.line);
      Value loop = Value::dict();
      loop.set("index", Value::integer(int64_t(i) + 1));
      loop.set("index0", Value::integer(int64_t(i)));
      loop.set("revindex", Value::integer(int64_t(n - i)));
      loop.set("revindex0", Value::integer(int64_t(n - i - 1)));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i + 1 == n));
      loop.set("length", Value::integer(int64_t(n)));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("previtem"));
      loop.set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("nextitem"));
      loop.set("cycle", Value::function([i](const CallArgs& a) {
        return a.positional.empty() ? Value::none() : a.positional[i % a.positional.size()];
      }));
      assign("loop", loop);
      if (exec(s.body, out) == Flow::Break) break;
    }
    scopes_.pop_back();
    if (n == 0) exec(s.else_body, out);
    return Flow::Normal;
  }

  Value apply_filter(const std::string& name, const Value& input, const CallArgs& args, int line) {
    try {
      return builtin_filter(name, input, args, [this](const std::string& test, const Value& v, const CallArgs& a) {
        return apply_test(test, v, a, 0);
      }, [this](const std::string& filter, const Value& v, const CallArgs& a) {
        return apply_filter(filter, v, a, 0);
      });
    } catch (const TemplateError& e) {
      std::string m = e.what();
      if (m.starts_with("chat template line ") || line == 0) throw;
      fail(line, m);
    }
  }

  bool apply_test(const std::string& name, const Value& input, const CallArgs& args, int line) {
    try {
      return builtin_test(name, input, args);
    } catch (const TemplateError& e) {
      std::string m = e.what();
      if (m.starts_with("chat template line ") || line == 0) throw;
      fail(line, m);
    }
  }

  const RenderOptions& options_;
  std::vector<std::shared_ptr<Scope>> scopes_;
};

}  // namespace

void charge_work(uint64_t units) {
  Budget* b = current_budget;
  if (!b) return;
  b->work += units;
  if (b->work > b->limits.max_work)
    throw TemplateError("the chat template needs more work than the limit of " + std::to_string(b->limits.max_work) +
                        " steps (an endless loop?)");
}

void own_namespace(const std::shared_ptr<Object>& attributes) {
  if (current_budget) current_budget->namespaces.push_back(attributes);
}

void check_size(size_t bytes) {
  Budget* b = current_budget;
  if (b && bytes > b->limits.max_output_bytes)
    throw TemplateError("the chat template builds a string over the limit of " + std::to_string(b->limits.max_output_bytes) + " bytes");
}

std::string render(const Template& t, const Object& context, const RenderOptions& options) {
  Renderer r(options);
  return r.run(t, context);
}

}  // namespace ftllm::jinja
