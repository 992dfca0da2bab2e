// Finding tool calls in generated text, whole or still growing, in each dialect (tool_dialect.h): a
// reader that says "matches", "needs more text" or "not this dialect" at each step, so a stream can be
// scanned again as it grows and report each call's name and arguments as soon as they are there.
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <regex>

#include "../core/json_writer.h"
#include "tool_dialect.h"

namespace ftllm::text {

namespace {

// Reading text that may still be growing: each step matches, needs more text, or fails.
enum class Got { Yes, More, No };

struct Reader {
  std::string_view s;
  size_t pos = 0;
  ScanMemo* memo = nullptr;

  bool at_end() const { return pos >= s.size(); }
  void spaces() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  }
  Got literal(std::string_view lit) {
    const size_t n = std::min(lit.size(), s.size() - pos);
    if (s.substr(pos, n) != lit.substr(0, n)) return Got::No;
    if (n < lit.size()) return Got::More;
    pos += n;
    return Got::Yes;
  }
  // The text before `end` (moving past it), or More while `end` has not come.
  Got until(std::string_view end, std::string_view& out) {
    size_t from = pos;
    if (memo && memo->until_start == pos && memo->until_end == end) from = std::max(pos, memo->until_at);
    const size_t at = s.find(end, from);
    if (at == std::string_view::npos) {
      if (memo) {
        memo->until_start = pos;
        memo->until_at = s.size() >= end.size() ? std::max(pos, s.size() - end.size() + 1) : pos;
        memo->until_end = end;
      }
      return Got::More;
    }
    out = s.substr(pos, at - pos);
    pos = at + end.size();
    return Got::Yes;
  }
  // The text before the first of `ends`, not moving past it.
  Got until_any(std::initializer_list<std::string_view> ends, std::string_view& out) {
    size_t at = std::string_view::npos;
    for (std::string_view e : ends) at = std::min(at, s.find(e, pos));
    if (at == std::string_view::npos) return Got::More;
    out = s.substr(pos, at - pos);
    pos = at;
    return Got::Yes;
  }
  // One JSON value's text: Yes when whole, More (with what there is) while it is still being written, No
  // when it cannot be JSON. Only its extent is checked here; simdjson validates it whole.
  Got json(std::string_view& out) {
    const size_t start = pos;
    size_t i = pos;
    if (i >= s.size()) return Got::More;
    const char c = s[i];
    if (c == '{' || c == '[' || c == '"') {
      int depth = 0;
      bool in_string = false;
      if (memo && memo->json_start == start && memo->json_at > i) {
        i = memo->json_at;
        depth = memo->json_depth;
        in_string = memo->json_in_string;
      }
      for (; i < s.size(); ++i) {
        const char ch = s[i];
        if (in_string) {
          if (ch == '\\') ++i;
          else if (ch == '"') {
            in_string = false;
            if (depth == 0) break;
          }
        } else if (ch == '"') in_string = true;
        else if (ch == '{' || ch == '[') ++depth;
        else if (ch == '}' || ch == ']') {
          if (--depth == 0) break;
        }
      }
      if (i >= s.size()) {
        if (memo) memo->json_start = start, memo->json_at = i, memo->json_depth = depth, memo->json_in_string = in_string;
        out = s.substr(start);
        return Got::More;
      }
      pos = i + 1;
      out = s.substr(start, pos - start);
      return Got::Yes;
    }
    if (!(c == '-' || std::isalnum(static_cast<unsigned char>(c)))) return Got::No;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == '+' || s[i] == '.')) ++i;
    out = s.substr(start, i - start);
    if (i >= s.size()) return Got::More;  // a number may go on
    pos = i;
    return Got::Yes;
  }
};

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

std::string rtrim(std::string_view s) {
  size_t b = s.size();
  while (b > 0 && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(0, b));
}

// JSON as models write it, repaired and compact: control characters inside strings (a raw tab or
// newline, which JSON wants escaped and grammars let through) escaped, whitespace between tokens dropped.
std::string compact_json(std::string_view raw) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (in_string && c == '\\' && i + 1 < raw.size()) {
      out += c;
      out += raw[++i];
      continue;
    }
    if (c == '"') in_string = !in_string;
    if (in_string && static_cast<unsigned char>(c) < 0x20) {
      const std::string escaped = json_quote(std::string_view(&c, 1));  // "\t", with its quotes
      out.append(escaped, 1, escaped.size() - 2);
    } else if (in_string || !std::isspace(static_cast<unsigned char>(c))) {
      out += c;
    }
  }
  return out;
}

// Arguments written as JSON: an object, serialised compactly, or a string holding one (some templates
// render arguments that way). False when they are not an object.
bool normalise_arguments(std::string_view raw, std::string& out) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(raw);
  simdjson::dom::element e;
  simdjson::error_code error = parser.parse(text).get(e);
  if (error) {
    const std::string repaired = compact_json(raw);
    text = simdjson::padded_string(repaired);
    error = parser.parse(text).get(e);
    // An integer past 64 bits is JSON all the same (and a grammar's "integer" allows it), which simdjson
    // does not read: kept as written when the text is JSON with such numbers as 0.
    if (error && repaired.starts_with('{')) {
      static const std::regex long_digits("[0-9]{19,}");
      simdjson::padded_string check(std::regex_replace(repaired, long_digits, "0"));
      if (!parser.parse(check).get(e) && e.type() == simdjson::dom::element_type::OBJECT) {
        out = repaired;
        return true;
      }
    }
    if (error) return false;
  }
  if (std::string_view inner; !e.get(inner)) {
    simdjson::padded_string again(inner);
    simdjson::dom::parser inner_parser;
    simdjson::dom::element o;
    if (inner_parser.parse(again).get(o) || o.type() != simdjson::dom::element_type::OBJECT) return false;
    out = simdjson::to_string(o);
    return true;
  }
  if (e.type() != simdjson::dom::element_type::OBJECT) return false;
  out = simdjson::to_string(e);
  return true;
}

// A call's JSON arguments as far as they go: streamed as written while they are an object, whole otherwise.
Got json_arguments(Reader& r, CallProgress& call) {
  std::string_view raw;
  const Got got = r.json(raw);
  if (got == Got::No) return Got::No;
  if (got == Got::More) {
    if (!raw.empty() && raw[0] == '{') call.args = rtrim(raw);
    return Got::More;
  }
  if (!normalise_arguments(raw, call.arguments)) return Got::No;
  call.args = raw[0] == '{' ? std::string(raw) : call.arguments;
  return Got::Yes;
}

// A JSON call object, {"name": ..., ARGS_KEY: {...}} with its keys in any order (and others, such as
// "id" or "type"), as Hermes, Llama 3 and Mistral write them.
Got json_call(Reader& r, CallProgress& call, std::initializer_list<std::string_view> args_keys) {
  if (Got g = r.literal("{"); g != Got::Yes) return g;
  bool have_args = false;
  for (bool first = true;; first = false) {
    r.spaces();
    if (r.at_end()) return Got::More;
    if (r.s[r.pos] == '}') {
      ++r.pos;
      break;
    }
    if (!first) {
      if (Got g = r.literal(","); g != Got::Yes) return g;
      r.spaces();
    }
    std::string_view key_text;
    if (r.at_end()) return Got::More;
    if (r.s[r.pos] != '"') return Got::No;
    if (Got g = r.json(key_text); g != Got::Yes) return g;
    const std::string key(key_text.substr(1, key_text.size() - 2));
    r.spaces();
    if (Got g = r.literal(":"); g != Got::Yes) return g;
    r.spaces();
    if (std::find(args_keys.begin(), args_keys.end(), key) != args_keys.end()) {
      if (Got g = json_arguments(r, call); g != Got::Yes) return g;
      have_args = true;
      continue;
    }
    std::string_view value;
    if (Got g = r.json(value); g != Got::Yes) return g;
    if (key == "name" || key == "id") {
      simdjson::dom::parser parser;
      simdjson::padded_string text(value);
      std::string_view s;
      if (parser.parse(text).get(s)) return Got::No;
      (key == "name" ? call.name : call.id) = s;
    }
  }
  if (call.name.empty()) return Got::No;
  if (!have_args) call.args = call.arguments = "{}";
  return Got::Yes;
}

// A parameter's value written as bare text: a string parameter's is taken as it is, any other's is read
// as JSON (with Python's True, False and None, which Jinja's `string` filter writes), else it is a
// string without the whitespace around it (an enum's value, say).
std::string parameter_json(std::string_view value, const std::vector<std::string>* types) {
  const std::string v = trim(value);
  if (types && types->size() == 1 && (*types)[0] == "string") return json_quote(v);
  simdjson::dom::parser parser;
  simdjson::padded_string text(v);
  simdjson::dom::element e;
  if (!v.empty() && !parser.parse(text).get(e)) return simdjson::to_string(e);
  if (v == "True" || v == "False") return v == "True" ? "true" : "false";
  if (v == "None") return "null";
  return json_quote(v);
}

// Parameters one by one (Qwen3-Coder's <parameter=P>...</parameter>, GLM's <arg_key>P</arg_key>
// <arg_value>...</arg_value>) up to `end`, built into a JSON object as each completes.
Got xml_parameters(Reader& r, CallProgress& call, const ToolParameterTypes& types, std::string_view key_open,
                   std::string_view key_close, std::string_view value_open, std::string_view value_close,
                   std::string_view end) {
  const auto tool = types.find(call.name);
  std::string object = "{";
  auto done = [&] {
    call.args = object + "}";
    simdjson::dom::parser parser;
    simdjson::padded_string text(call.args);
    simdjson::dom::element e;
    if (parser.parse(text).get(e)) return Got::No;
    call.arguments = simdjson::to_string(e);
    return Got::Yes;
  };
  for (;;) {
    call.args = object;
    r.spaces();
    if (Got g = r.literal(end); g == Got::Yes) return done();
    else if (g == Got::More) return Got::More;
    if (Got g = r.literal(key_open); g != Got::Yes) return g;
    std::string_view key, value;
    if (Got g = r.until(key_close, key); g != Got::Yes) return g;
    if (!value_open.empty()) {
      r.spaces();
      if (Got g = r.literal(value_open); g != Got::Yes) return g;
    }
    if (Got g = r.until(value_close, value); g != Got::Yes) return g;
    // Whitespace around a value is layout: the templates put it on lines of its own, and the grammar
    // that enforces these calls lets whitespace pad a string (its length limits count without it).
    const std::vector<std::string>* param_types = nullptr;
    if (tool != types.end())
      if (auto p = tool->second.find(std::string(trim(key))); p != tool->second.end()) param_types = &p->second;
    object += (object.size() > 1 ? ", " : "") + json_quote(trim(key)) + ": " + parameter_json(value, param_types);
  }
}

// Llama 3's built-in tools: NAME.call(key="value", ...).
bool builtin_call(std::string_view text, CallProgress& call) {
  static const std::regex whole(R"(^\s*([A-Za-z_][A-Za-z0-9_]*)\.call\((.*)\)\s*$)");
  static const std::regex arg(R"re(([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)")re");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_match(text.begin(), text.end(), m, whole)) return false;
  call.name = m.str(1);
  const std::string args = m.str(2);
  std::string object = "{";
  for (auto it = std::sregex_iterator(args.begin(), args.end(), arg); it != std::sregex_iterator(); ++it)
    object += (object.size() > 1 ? ", " : "") + json_quote((*it)[1].str()) + ": " + json_quote((*it)[2].str());
  call.args = call.arguments = object + "}";
  return true;
}

}  // namespace

std::string nine_character_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(9, 'a');
  for (char& c : id) c = kAlnum[rng() % 62];
  return id;
}

namespace {

// Each dialect's section. `calls` gets every call begun; the result says whether the section is whole.
Got scan(ToolDialect d, Reader& r, std::vector<CallProgress>& calls, size_t& last_complete, const ToolParameterTypes& types,
         bool final) {
  auto call_done = [&] {
    calls.back().complete = true;
    last_complete = r.pos;
  };
  switch (d) {
    case ToolDialect::Hermes: {
      if (Got g = r.literal("<tool_call>"); g != Got::Yes) return g;
      r.spaces();
      calls.emplace_back();
      if (Got g = json_call(r, calls.back(), {"arguments", "parameters"}); g != Got::Yes) return g;
      r.spaces();
      if (Got g = r.literal("</tool_call>"); g != Got::Yes) return g;
      call_done();
      return Got::Yes;
    }
    case ToolDialect::QwenXml: {
      if (Got g = r.literal("<tool_call>"); g != Got::Yes) return g;
      r.spaces();
      if (Got g = r.literal("<function="); g != Got::Yes) return g;
      std::string_view name;
      if (Got g = r.until(">", name); g != Got::Yes) return g;
      calls.emplace_back().name = trim(name);
      if (Got g = xml_parameters(r, calls.back(), types, "<parameter=", ">", "", "</parameter>", "</function>"); g != Got::Yes) return g;
      r.spaces();
      if (Got g = r.literal("</tool_call>"); g != Got::Yes) return g;
      call_done();
      return Got::Yes;
    }
    case ToolDialect::Glm: {
      if (Got g = r.literal("<tool_call>"); g != Got::Yes) return g;
      std::string_view name;
      if (Got g = r.until_any({"\n", "<arg_key>", "</tool_call>"}, name); g != Got::Yes) return g;
      if (trim(name).empty()) return Got::No;
      calls.emplace_back().name = trim(name);
      if (Got g = xml_parameters(r, calls.back(), types, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "</tool_call>"); g != Got::Yes) return g;
      call_done();
      return Got::Yes;
    }
    case ToolDialect::Llama3: {
      if (r.literal("<|python_tag|>") == Got::Yes) {
        r.spaces();
        if (r.at_end()) return Got::More;
        if (r.s[r.pos] != '{') {
          // A built-in tool's call runs to the end of the answer (<|eom_id|> ends it).
          calls.emplace_back();
          std::string_view rest = r.s.substr(r.pos);
          if (!final) return Got::More;
          if (!builtin_call(rest, calls.back())) return Got::No;
          r.pos = r.s.size();
          call_done();
          return Got::Yes;
        }
      }
      r.spaces();
      calls.emplace_back();
      if (Got g = json_call(r, calls.back(), {"parameters", "arguments"}); g != Got::Yes) return g;
      call_done();
      return Got::Yes;
    }
    case ToolDialect::MistralJson: {
      if (Got g = r.literal("[TOOL_CALLS]"); g != Got::Yes) return g;
      r.spaces();
      if (Got g = r.literal("["); g != Got::Yes) return g;
      for (bool first = true;; first = false) {
        r.spaces();
        if (Got g = r.literal("]"); g == Got::Yes) return Got::Yes;
        else if (g == Got::More) return Got::More;
        if (!first) {
          if (Got g = r.literal(","); g != Got::Yes) return g;
          r.spaces();
        }
        calls.emplace_back();
        if (Got g = json_call(r, calls.back(), {"arguments", "parameters"}); g != Got::Yes) return g;
        call_done();
      }
    }
    case ToolDialect::Mistral: {
      if (Got g = r.literal("[TOOL_CALLS]"); g != Got::Yes) return g;
      std::string_view head;
      if (Got g = r.until("[ARGS]", head); g != Got::Yes) return g;
      CallProgress& call = calls.emplace_back();
      const size_t id_at = head.find("[CALL_ID]");
      call.name = trim(head.substr(0, id_at));
      if (id_at != std::string_view::npos) call.id = trim(head.substr(id_at + 9));
      if (call.name.empty()) return Got::No;
      if (Got g = json_arguments(r, call); g != Got::Yes) return g;
      call_done();
      return Got::Yes;
    }
    case ToolDialect::DeepSeekR1:
    case ToolDialect::DeepSeekV31: {
      if (Got g = r.literal(kDsCallsBegin); g != Got::Yes) return g;
      for (;;) {
        r.spaces();
        if (Got g = r.literal(kDsCallsEnd); g == Got::Yes) return Got::Yes;
        else if (g == Got::More) return Got::More;
        if (Got g = r.literal(kDsCallBegin); g != Got::Yes) return g;
        std::string_view head;
        if (d == ToolDialect::DeepSeekR1) {
          if (Got g = r.until(kDsSep, head); g != Got::Yes) return g;  // the call's type: "function"
          if (Got g = r.until("\n", head); g != Got::Yes) return g;
          calls.emplace_back().name = trim(head);
          r.spaces();
          if (Got g = r.literal("```json"); g != Got::Yes) return g;
          r.spaces();
        } else {
          if (Got g = r.until(kDsSep, head); g != Got::Yes) return g;
          calls.emplace_back().name = trim(head);
          r.spaces();
        }
        if (calls.back().name.empty()) return Got::No;
        if (Got g = json_arguments(r, calls.back()); g != Got::Yes) return g;
        r.spaces();
        if (d == ToolDialect::DeepSeekR1) {
          if (Got g = r.literal("```"); g != Got::Yes) return g;
          r.spaces();
        }
        if (Got g = r.literal(kDsCallEnd); g != Got::Yes) return g;
        call_done();
      }
    }
    case ToolDialect::Kimi: {
      if (Got g = r.literal(kKimiSectionBegin); g != Got::Yes) return g;
      for (;;) {
        r.spaces();
        if (Got g = r.literal(kKimiSectionEnd); g == Got::Yes) return Got::Yes;
        else if (g == Got::More) return Got::More;
        if (Got g = r.literal(kKimiCallBegin); g != Got::Yes) return g;
        std::string_view id;
        if (Got g = r.until(kKimiArgBegin, id); g != Got::Yes) return g;
        // functions.NAME:IDX; the name is what lies between.
        CallProgress& call = calls.emplace_back();
        call.id = trim(id);
        std::string_view name = call.id;
        if (name.starts_with("functions.")) name.remove_prefix(10);
        if (size_t colon = name.rfind(':'); colon != std::string_view::npos) name = name.substr(0, colon);
        call.name = name;
        if (call.name.empty()) return Got::No;
        r.spaces();
        if (Got g = json_arguments(r, call); g != Got::Yes) return g;
        r.spaces();
        if (Got g = r.literal(kKimiCallEnd); g != Got::Yes) return g;
        call_done();
      }
    }
    case ToolDialect::Harmony: {
      // <|channel|>commentary to=functions.NAME [<|constrain|>json]<|message|>{...} up to <|call|> or the
      // end (<|call|> is a stop token), or the template's order: " to=functions.NAME<|channel|>commentary json<|message|>".
      if (r.literal("<|channel|>commentary") == Got::More) return Got::More;
      r.pos = 0;
      std::string_view head;
      if (Got g = r.until("<|message|>", head); g != Got::Yes) return g;
      static const std::regex recipient(R"(to=functions\.([^\s<]+))");
      std::match_results<std::string_view::const_iterator> m;
      if (!std::regex_search(head.begin(), head.end(), m, recipient)) return Got::No;
      calls.emplace_back().name = m.str(1);
      r.spaces();
      if (Got g = json_arguments(r, calls.back()); g != Got::Yes) return g;
      r.spaces();
      if (Got g = r.literal("<|call|>"); g == Got::No || (g == Got::More && !final)) return g;
      call_done();
      return Got::Yes;
    }
    case ToolDialect::None: break;
  }
  return Got::No;
}

}  // namespace

ToolParameterTypes tool_parameter_types(const std::string& tools_json) {
  ToolParameterTypes types;
  if (tools_json.empty()) return types;
  simdjson::dom::parser parser;
  simdjson::padded_string text(tools_json);
  simdjson::dom::array tools;
  if (parser.parse(text).get(tools)) return types;
  for (simdjson::dom::element tool : tools) {
    std::string_view name;
    simdjson::dom::object properties;
    if (tool["function"]["name"].get(name)) continue;
    auto& params = types[std::string(name)];
    if (tool["function"]["parameters"]["properties"].get(properties)) continue;
    for (auto [key, schema] : properties) {
      std::vector<std::string>& list = params[std::string(key)];
      simdjson::dom::element type;
      if (schema["type"].get(type)) continue;
      if (std::string_view one; !type.get(one)) list.emplace_back(one);
      else if (simdjson::dom::array many; !type.get(many))
        for (simdjson::dom::element t : many)
          if (std::string_view s; !t.get(s)) list.emplace_back(s);
    }
  }
  return types;
}

SectionScan scan_tool_section(ToolDialect d, std::string_view text, const ToolParameterTypes& types, bool final,
                              ScanMemo* memo) {
  SectionScan out;
  Reader r{text, 0, memo};
  const Got got = scan(d, r, out.calls, out.consumed, types, final);
  out.closed = got == Got::Yes;
  if (out.closed) out.consumed = r.pos;
  // Text that does not follow the dialect is not a call, unless calls before it were whole.
  out.failed = got == Got::No && out.consumed == 0;
  if (got == Got::No && !out.failed) out.closed = true;
  if (!out.calls.empty() && !out.calls.back().complete && (got == Got::No)) out.calls.pop_back();
  return out;
}

}  // namespace ftllm::text
