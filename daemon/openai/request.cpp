#include "request.h"

#include <simdjson.h>

#include "core/json_writer.h"

namespace ftllm::daemon {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

ApiError bad(const std::string& param, const std::string& why) { return {400, "'" + param + "' " + why, param}; }

bool is_number(element e) {
  auto t = e.type();
  return t == element_type::INT64 || t == element_type::UINT64 || t == element_type::DOUBLE;
}

// Reads an optional number field into `out`, checking it lies in [lo, hi].
std::optional<ApiError> number(element obj, const char* key, double lo, double hi, float& out) {
  element e;
  if (obj[key].get(e) || e.is_null()) return std::nullopt;
  if (!is_number(e)) return bad(key, "must be a number");
  double v = double(e);
  if (v < lo || v > hi) return bad(key, "must be between " + std::to_string(lo).substr(0, 4) + " and " + std::to_string(hi).substr(0, 4));
  out = float(v);
  return std::nullopt;
}

std::optional<ApiError> integer(element obj, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>& out) {
  element e;
  if (obj[key].get(e) || e.is_null()) return std::nullopt;
  int64_t v;
  if (e.get(v)) return bad(key, "must be an integer");
  if (v < lo || v > hi) return bad(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  out = v;
  return std::nullopt;
}

// A tool call of an assistant message as templates expect it: OpenAI's arguments string parsed into the
// object it holds (templates write it with tojson), as transformers' and vLLM's renderers do.
std::optional<ApiError> tool_call_json(element call, const std::string& where, JsonWriter& w) {
  simdjson::dom::object obj;
  std::string_view name;
  if (call.get(obj)) return bad(where, "must be an object");
  if (obj["function"]["name"].get(name)) return bad(where + ".function.name", "is required and must be a string");
  w.begin_object();
  for (auto [key, value] : obj) {
    if (key != "function") {
      w.key(key).raw(simdjson::to_string(value));
      continue;
    }
    w.key(key).begin_object();
    for (auto [fkey, fvalue] : simdjson::dom::object(value)) {
      std::string_view arguments;
      if (fkey == "arguments" && !fvalue.get(arguments)) {
        simdjson::dom::parser inner;
        const simdjson::padded_string text(arguments);
        simdjson::dom::element parsed;
        if (!inner.parse(text).get(parsed) && parsed.type() == element_type::OBJECT) {
          w.key(fkey).raw(simdjson::to_string(parsed));
          continue;
        }
      }
      w.key(fkey).raw(simdjson::to_string(fvalue));
    }
    w.end_object();
  }
  w.end_object();
  return std::nullopt;
}

// A message as the template sees it: OpenAI's content-part arrays become the joined text of their parts;
// an assistant's null content beside tool calls becomes "" (what the templates expect, as the reference
// renderers give it); roles, tool messages and tool calls are checked as OpenAI does.
std::optional<ApiError> message_json(element message, size_t index, std::string& json_out) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  simdjson::dom::object obj;
  if (message.get(obj)) return bad(where, "must be an object");
  std::string_view role;
  if (obj["role"].get(role)) return bad(where + ".role", "is required and must be a string");
  // OpenAI's roles; "function" is its deprecated form of "tool", still accepted there.
  if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool" && role != "function")
    return bad(where + ".role", "must be one of system, developer, user, assistant, tool, not \"" + std::string(role) + "\"");
  simdjson::dom::array calls;
  const bool has_calls = role == "assistant" && !obj["tool_calls"].get(calls) && calls.size() > 0;
  element content;
  const bool no_content = obj["content"].get(content) || content.is_null();
  if (no_content && !has_calls) return bad(where + ".content", "is required (it may be null only beside tool_calls)");
  std::string_view tool_call_id;
  if (role == "tool" && obj["tool_call_id"].get(tool_call_id)) return bad(where + ".tool_call_id", "is required and must be a string");
  JsonWriter w;
  w.begin_object();
  for (auto [key, value] : obj) {
    if (key == "content" && value.is_null()) {
      w.key(key).string("");
      continue;
    }
    if (key == "content" && value.type() == element_type::ARRAY) {
      std::string text;
      for (element part : value.get_array()) {
        std::string_view type, t;
        if (part["type"].get(type) || type != "text" || part["text"].get(t))
          return bad(where + ".content", "parts must be {\"type\": \"text\", \"text\": ...}; only text is supported");
        text += t;
      }
      w.key(key).string(text);
    } else if (key == "content" && value.type() != element_type::STRING) {
      return bad(where + ".content", "must be a string or an array of text parts");
    } else if (key == "tool_calls" && value.type() == element_type::ARRAY) {
      w.key(key).begin_array();
      size_t i = 0;
      for (element call : value.get_array())
        if (auto e = tool_call_json(call, where + ".tool_calls[" + std::to_string(i++) + "]", w)) return e;
      w.end_array();
    } else {
      w.key(key).raw(simdjson::to_string(value));
    }
  }
  if (no_content && obj["content"].error()) w.key("content").string("");  // absent beside tool calls
  w.end_object();
  json_out = w.take();
  return std::nullopt;
}

// What the output must match: OpenAI's response_format, or llama-server's json_schema or grammar field
// (for clients written against llama.cpp). At most one of them.
std::optional<ApiError> output_constraint(element root, OutputConstraint& out) {
  auto set = [&](OutputConstraint::Kind kind, std::string text, std::string param) -> std::optional<ApiError> {
    if (out.kind != OutputConstraint::Kind::None)
      return bad(param, "cannot be combined with '" + out.param + "': give one constraint on the output");
    out.kind = kind;
    out.text = std::move(text);
    out.param = std::move(param);
    return std::nullopt;
  };
  element format;
  if (!root["response_format"].get(format) && !format.is_null()) {
    std::string_view type;
    if (format.type() != element_type::OBJECT || format["type"].get(type))
      return bad("response_format", "must be an object with a \"type\": text, json_object or json_schema");
    if (type == "json_object") {
      if (auto e = set(OutputConstraint::Kind::JsonObject, "", "response_format")) return e;
    } else if (type == "json_schema") {
      element spec, schema;
      std::string_view name;
      if (format["json_schema"].get(spec) || spec.type() != element_type::OBJECT)
        return bad("response_format.json_schema", "is required with type json_schema: {\"name\": ..., \"schema\": {...}}");
      if (spec["name"].get(name) || name.empty())
        return bad("response_format.json_schema.name", "is required and must be a non-empty string");
      if (spec["schema"].get(schema) || schema.is_null()) {
        if (auto e = set(OutputConstraint::Kind::JsonObject, "", "response_format.json_schema.schema")) return e;
      } else {
        if (schema.type() != element_type::OBJECT) return bad("response_format.json_schema.schema", "must be a JSON Schema object");
        if (auto e = set(OutputConstraint::Kind::JsonSchema, simdjson::to_string(schema), "response_format.json_schema.schema")) return e;
      }
    } else if (type != "text") {
      return bad("response_format.type", "must be text, json_object or json_schema, not \"" + std::string(type) + "\"");
    }
  }
  element schema;
  if (!root["json_schema"].get(schema) && !schema.is_null()) {
    if (schema.type() != element_type::OBJECT) return bad("json_schema", "must be a JSON Schema object");
    if (auto e = set(OutputConstraint::Kind::JsonSchema, simdjson::to_string(schema), "json_schema")) return e;
  }
  element grammar;
  if (!root["grammar"].get(grammar) && !grammar.is_null()) {
    std::string_view text;
    if (grammar.get(text)) return bad("grammar", "must be a string: a GBNF grammar with a root rule");
    if (!text.empty())
      if (auto e = set(OutputConstraint::Kind::Gbnf, std::string(text), "grammar")) return e;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_generation_body(std::string_view json, bool chat, GenerationBody& out) {
  simdjson::dom::parser parser;
  simdjson::padded_string text(json);
  element root;
  if (auto err = parser.parse(text).get(root))
    return ApiError{400, std::string("the body is not valid JSON: ") + simdjson::error_message(err), "", "invalid_request_error", "invalid_json"};
  if (root.type() != element_type::OBJECT) return ApiError{400, "the body must be a JSON object", "", "invalid_request_error", "invalid_json"};

  std::string_view model;
  if (root["model"].get(model)) return bad("model", "is required and must be a string");
  TextRequest& r = out.request;
  r.model = model;
  r.input = chat ? TextRequest::Input::Chat : TextRequest::Input::Text;
  out.chat = chat;

  if (chat) {
    simdjson::dom::array messages;
    if (root["messages"].get(messages)) return bad("messages", "is required and must be an array");
    if (messages.size() == 0) return bad("messages", "must not be empty");
    std::string joined = "[";
    size_t i = 0;
    for (element m : messages) {
      std::string one;
      if (auto e = message_json(m, i, one)) return e;
      joined += (i++ ? "," : "") + one;
    }
    r.chat.messages_json = joined + "]";
    element tools;
    const bool has_tools = !root["tools"].get(tools) && !tools.is_null();
    if (has_tools) {
      if (tools.type() != element_type::ARRAY) return bad("tools", "must be an array");
      r.chat.tools_json = simdjson::to_string(tools);
    }
    // tool_choice as OpenAI has it: a mode, or a function that must be among the tools.
    element choice;
    if (!root["tool_choice"].get(choice) && !choice.is_null()) {
      std::string_view mode, named;
      if (!choice.get(mode)) {
        if (mode != "none" && mode != "auto" && mode != "required")
          return bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (mode == "required" && !has_tools) return bad("tool_choice", "is required, but no tools are given");
        r.chat.tool_choice = mode;
      } else if (choice["function"]["name"].get(named)) {
        return bad("tool_choice", "must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}");
      } else {
        bool offered = false;
        if (has_tools)
          for (element t : tools.get_array()) {
            std::string_view name;
            offered = offered || (!t["function"]["name"].get(name) && name == named);
          }
        if (!offered) return bad("tool_choice", "names the function \"" + std::string(named) + "\", which is not among the tools");
        r.chat.tool_choice = "function";
        r.chat.forced_tool = named;
      }
    }
    element parallel;
    if (!root["parallel_tool_calls"].get(parallel) && !parallel.is_null() && parallel.get(r.chat.parallel_tool_calls))
      return bad("parallel_tool_calls", "must be true or false");
    element kwargs;
    if (!root["chat_template_kwargs"].get(kwargs) && !kwargs.is_null()) {
      if (kwargs.type() != element_type::OBJECT) return bad("chat_template_kwargs", "must be an object");
      r.chat.kwargs_json = simdjson::to_string(kwargs);
    }
  } else {
    element prompt;
    if (root["prompt"].get(prompt)) return bad("prompt", "is required");
    // A string, token ids, or an array of either: one choice (times n) per prompt, all in one batch.
    auto token_ids = [&](element ids) -> std::optional<ApiError> {
      std::vector<int32_t>& out_ids = r.token_prompts.emplace_back();
      for (element id : ids.get_array()) {
        int64_t v;
        if (id.get(v) || v < 0 || v > INT32_MAX) return bad("prompt", "token ids must be non-negative integers");
        out_ids.push_back(int32_t(v));
      }
      return std::nullopt;
    };
    std::string_view p;
    if (!prompt.get(p)) {
      r.prompts.emplace_back(p);
    } else if (prompt.type() == element_type::ARRAY) {
      simdjson::dom::array list = prompt.get_array();
      if (list.size() == 0) return bad("prompt", "must not be empty");
      const element_type first = list.at(0).type();
      if (first == element_type::STRING || first == element_type::ARRAY) {
        if (list.size() > 64) return bad("prompt", "may hold at most 64 prompts");
        for (element one : list) {
          if (one.type() != first) return bad("prompt", "must hold prompts of one kind: strings, or arrays of token ids");
          if (first == element_type::STRING) r.prompts.emplace_back(std::string_view(one));
          else if (auto e = token_ids(one)) return e;
        }
      } else if (auto e = token_ids(prompt)) {
        return e;
      }
      if (first != element_type::STRING) r.input = TextRequest::Input::Tokens;
    } else {
      return bad("prompt", "must be a string, an array of strings, or an array of token ids");
    }
  }

  if (auto e = output_constraint(root, r.constraint)) return e;

  SamplingParams& s = r.generation.sampling;
  if (auto e = number(root, "temperature", 0, 2, s.temperature)) return e;
  if (auto e = number(root, "top_p", 0, 1, s.top_p)) return e;
  if (auto e = number(root, "min_p", 0, 1, s.min_p)) return e;
  if (auto e = number(root, "presence_penalty", -2, 2, s.presence_penalty)) return e;
  if (auto e = number(root, "frequency_penalty", -2, 2, s.frequency_penalty)) return e;
  if (auto e = number(root, "repetition_penalty", 0.01, 10, s.repetition_penalty)) return e;
  std::optional<int64_t> top_k, seed, max_tokens, max_completion_tokens, n;
  if (auto e = integer(root, "top_k", -1, 1 << 20, top_k)) return e;
  if (top_k) s.top_k = int32_t(std::max<int64_t>(0, *top_k));
  if (auto e = integer(root, "seed", INT64_MIN, INT64_MAX, seed)) return e;
  if (seed) s.seed = uint64_t(*seed);
  if (auto e = integer(root, "max_tokens", 1, 1 << 24, max_tokens)) return e;
  if (auto e = integer(root, "max_completion_tokens", 1, 1 << 24, max_completion_tokens)) return e;
  r.generation.max_tokens = int32_t(max_completion_tokens.value_or(max_tokens.value_or(0)));
  if (auto e = integer(root, "n", 1, 16, n)) return e;
  r.n = int(n.value_or(1));

  element flag;
  if (!root["stream"].get(flag) && !flag.is_null()) {
    if (flag.get(out.stream)) return bad("stream", "must be true or false");
  }
  if (!root["stream_options"].get(flag) && !flag.is_null()) {
    if (flag.type() != element_type::OBJECT) return bad("stream_options", "must be an object");
    if (!out.stream) return bad("stream_options", "is only allowed when \"stream\" is true");
    element usage;
    if (!flag["include_usage"].get(usage) && usage.get(out.include_usage)) return bad("stream_options.include_usage", "must be true or false");
  }
  if (!root["ignore_eos"].get(flag) && !flag.is_null() && flag.get(r.generation.ignore_eos)) return bad("ignore_eos", "must be true or false");
  // Chat: "logprobs": true with "top_logprobs": 0..20. Completions: "logprobs": 0..5 (the alternatives).
  std::optional<int64_t> top;
  if (chat) {
    if (!root["logprobs"].get(flag) && !flag.is_null() && flag.get(out.logprobs)) return bad("logprobs", "must be true or false");
    if (auto e = integer(root, "top_logprobs", 0, 20, top)) return e;
    if (top && !out.logprobs) return bad("top_logprobs", "needs \"logprobs\": true");
  } else {
    if (auto e = integer(root, "logprobs", 0, 5, top)) return e;
    out.logprobs = top.has_value();
  }
  out.top_logprobs = int(top.value_or(0));
  r.generation.logprobs = out.logprobs ? out.top_logprobs : -1;

  element bias;
  if (!root["logit_bias"].get(bias) && !bias.is_null()) {
    simdjson::dom::object map;
    if (bias.get(map)) return bad("logit_bias", "must be an object of token ids to biases");
    for (auto [key, value] : map) {
      int64_t token = -1;
      try {
        size_t used = 0;
        token = std::stoll(std::string(key), &used);
        if (used != key.size()) token = -1;
      } catch (...) {
      }
      if (token < 0 || token > INT32_MAX) return bad("logit_bias", "keys must be token ids, not \"" + std::string(key) + "\"");
      if (!is_number(value) || double(value) < -100 || double(value) > 100) return bad("logit_bias", "values must be numbers from -100 to 100");
      s.logit_bias.emplace_back(int32_t(token), float(double(value)));
    }
  }

  // vLLM's extension: token ids that end generation as the model's end-of-sequence tokens do.
  element stop_ids;
  if (!root["stop_token_ids"].get(stop_ids) && !stop_ids.is_null()) {
    simdjson::dom::array ids;
    if (stop_ids.get(ids) || ids.size() > 1024) return bad("stop_token_ids", "must be an array of at most 1024 token ids");
    for (element id : ids) {
      int64_t v;
      if (id.get(v) || v < 0 || v > INT32_MAX) return bad("stop_token_ids", "must hold non-negative integers");
      r.generation.stop_token_ids.push_back(int32_t(v));
    }
  }

  element stop;
  if (!root["stop"].get(stop) && !stop.is_null()) {
    std::string_view one;
    if (!stop.get(one)) {
      r.stop.emplace_back(one);
    } else if (stop.type() == element_type::ARRAY) {
      for (element x : stop.get_array()) {
        if (x.get(one)) return bad("stop", "must be a string or an array of strings");
        r.stop.emplace_back(one);
      }
      if (r.stop.size() > 16) return bad("stop", "may hold at most 16 strings");
    } else {
      return bad("stop", "must be a string or an array of strings");
    }
  }
  return std::nullopt;
}

}  // namespace ftllm::daemon
