// Anthropic's Messages API on the same listener, for the clients and agents that speak it: POST
// /v1/messages (system, content blocks, tool_use / tool_result, thinking, stop_sequences; whole, or streamed
// as message_start ... content_block_start / _delta / _stop ... message_delta, message_stop) and POST
// /v1/messages/count_tokens; output_config.format's JSON schema is enforced (constrained decoding), and
// temperature, top_p and top_k are taken where older clients still send them. The body is read into the OpenAI chat request it means (tool results as tool
// messages, tool_use as tool calls, thinking as the template's enable_thinking), so it is checked and run
// exactly as /v1/chat/completions is; the answer is written in Anthropic's shapes, errors included
// ({"type": "error", "error": {"type": ..., "message": ...}}). The key may come as x-api-key.
#include <simdjson.h>

#include <chrono>

#include "core/json_writer.h"
#include "routes.h"

namespace ftllm::daemon {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

http::Response anthropic_error(int status, const std::string& message) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_error"
                     : status == 503 ? "overloaded_error"
                     : status >= 500 ? "api_error"
                                     : "invalid_request_error";
  JsonWriter w;
  w.begin_object().key("type").string("error").key("error").begin_object().key("type").string(type).key("message").string(message);
  w.end_object().end_object();
  http::Response r{status, "application/json", {}, w.take()};
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

// The text of a content that is a string or an array of text blocks (system, tool_result's content).
std::optional<std::string> plain_text(element content, const std::string& where, std::optional<ApiError>& error) {
  std::string_view s;
  if (!content.get(s)) return std::string(s);
  if (content.type() != element_type::ARRAY) return error = ApiError{400, where + ": must be a string or an array of text blocks"}, std::nullopt;
  std::string text;
  for (element b : content.get_array()) {
    std::string_view type, t;
    if (b["type"].get(type) || type != "text" || b["text"].get(t))
      return error = ApiError{400, where + ": only text blocks are supported here"}, std::nullopt;
    text += t;
  }
  return text;
}

// Anthropic's body as the OpenAI chat body it means; `stream` and the stop sequences are noted.
std::optional<ApiError> to_openai(element body, std::string& openai, bool& stream, std::vector<std::string>& stops) {
  JsonWriter w;
  w.begin_object();
  std::string_view model;
  if (body["model"].get(model)) return ApiError{400, "model: field required"};
  w.key("model").string(model);
  int64_t max_tokens = 0;
  if (body["max_tokens"].get(max_tokens)) return ApiError{400, "max_tokens: field required (a positive integer)"};
  if (max_tokens < 1) return ApiError{400, "max_tokens: must be at least 1"};
  w.key("max_tokens").number(max_tokens);
  if (!body["stream"].error() && !body["stream"].is_null() && body["stream"].get(stream)) return ApiError{400, "stream: must be a boolean"};
  std::optional<ApiError> error;
  w.key("messages").begin_array();
  element system;
  if (!body["system"].get(system)) {
    auto text = plain_text(system, "system", error);
    if (!text) return error;
    w.begin_object().key("role").string("system").key("content").string(*text).end_object();
  }
  simdjson::dom::array messages;
  if (body["messages"].get(messages) || messages.size() == 0) return ApiError{400, "messages: a non-empty array is required"};
  size_t i = 0;
  for (element m : messages) {
    const std::string where = "messages." + std::to_string(i++);
    std::string_view role, text;
    if (m["role"].get(role) || (role != "user" && role != "assistant"))
      return ApiError{400, where + ".role: must be \"user\" or \"assistant\""};
    element content;
    if (m["content"].get(content)) return ApiError{400, where + ".content: field required"};
    if (!content.get(text)) {
      w.begin_object().key("role").string(role).key("content").string(text).end_object();
      continue;
    }
    if (content.type() != element_type::ARRAY) return ApiError{400, where + ".content: must be a string or an array of blocks"};
    std::string joined;
    JsonWriter calls;
    size_t call_count = 0;
    calls.begin_array();
    std::vector<std::string> results;  // tool messages, after the user's turn is split at them
    size_t j = 0;
    for (element block : content.get_array()) {
      const std::string at = where + ".content." + std::to_string(j++);
      std::string_view type;
      if (block["type"].get(type)) return ApiError{400, at + ".type: field required"};
      if (type == "text") {
        if (block["text"].get(text)) return ApiError{400, at + ".text: field required"};
        joined += text;
      } else if (type == "thinking" || type == "redacted_thinking") {
        // A previous turn's reasoning: templates leave it out of the prompt.
      } else if (type == "tool_use" && role == "assistant") {
        std::string_view id, name;
        element input;
        if (block["id"].get(id) || block["name"].get(name) || block["input"].get(input))
          return ApiError{400, at + ": tool_use needs id, name and input"};
        calls.begin_object().key("id").string(id).key("type").string("function").key("function").begin_object();
        calls.key("name").string(name).key("arguments").string(simdjson::to_string(input)).end_object().end_object();
        ++call_count;
      } else if (type == "tool_result" && role == "user") {
        std::string_view id;
        if (block["tool_use_id"].get(id)) return ApiError{400, at + ".tool_use_id: field required"};
        std::string result;
        element c;
        if (!block["content"].get(c)) {
          auto t = plain_text(c, at + ".content", error);
          if (!t) return error;
          result = *t;
        }
        JsonWriter r;
        r.begin_object().key("role").string("tool").key("tool_call_id").string(id).key("content").string(result).end_object();
        results.push_back(r.take());
      } else {
        return ApiError{400, at + ".type: \"" + std::string(type) + "\" is not supported here (text, tool_use, tool_result, thinking)"};
      }
    }
    calls.end_array();
    for (const std::string& r : results) w.raw(r);
    if (role == "assistant" || !joined.empty() || results.empty()) {
      w.begin_object().key("role").string(role).key("content").string(joined);
      if (call_count) w.key("tool_calls").raw(calls.take());
      w.end_object();
    }
  }
  w.end_array();
  simdjson::dom::array tools;
  if (!body["tools"].get(tools)) {
    w.key("tools").begin_array();
    for (element t : tools) {
      std::string_view name, description;
      element schema;
      if (t["name"].get(name) || t["input_schema"].get(schema)) return ApiError{400, "tools: each tool needs name and input_schema"};
      w.begin_object().key("type").string("function").key("function").begin_object().key("name").string(name);
      if (!t["description"].get(description)) w.key("description").string(description);
      w.key("parameters").raw(simdjson::to_string(schema)).end_object().end_object();
    }
    w.end_array();
  }
  element choice;
  if (!body["tool_choice"].get(choice)) {
    std::string_view type, name;
    if (choice["type"].get(type)) return ApiError{400, "tool_choice.type: field required"};
    if (type == "auto" || type == "none") w.key("tool_choice").string(type);
    else if (type == "any") w.key("tool_choice").string("required");
    else if (type == "tool" && !choice["name"].get(name))
      w.key("tool_choice").begin_object().key("type").string("function").key("function").begin_object().key("name").string(name).end_object().end_object();
    else return ApiError{400, "tool_choice: must be {\"type\": auto, any, none} or {\"type\": \"tool\", \"name\": ...}"};
    bool disable_parallel = false;
    if (!choice["disable_parallel_tool_use"].get(disable_parallel) && disable_parallel) w.key("parallel_tool_calls").boolean(false);
  }
  // Structured output: output_config.format {"type": "json_schema", "schema": ...}, by constrained decoding.
  element format;
  if (!body["output_config"]["format"].get(format) && !format.is_null()) {
    std::string_view type;
    element schema;
    if (format["type"].get(type) || type != "json_schema" || format["schema"].get(schema) || schema.type() != element_type::OBJECT)
      return ApiError{400, "output_config.format: must be {\"type\": \"json_schema\", \"schema\": {...}}"};
    w.key("response_format").begin_object().key("type").string("json_schema").key("json_schema").begin_object();
    w.key("name").string("output").key("schema").raw(simdjson::to_string(schema)).end_object().end_object();
  }
  std::string_view thinking;
  if (!body["thinking"]["type"].get(thinking))
    w.key("chat_template_kwargs").begin_object().key("enable_thinking").boolean(thinking == "enabled").end_object();
  for (const char* key : {"temperature", "top_p", "top_k"})
    if (!body[key].error()) w.key(key).raw(simdjson::to_string(body[key].value_unsafe()));
  simdjson::dom::array stop_sequences;
  if (!body["stop_sequences"].get(stop_sequences)) {
    w.key("stop").raw(simdjson::to_string(stop_sequences));
    for (element s : stop_sequences) {
      std::string_view v;
      if (!s.get(v)) stops.emplace_back(v);
    }
  }
  w.end_object();
  openai = w.take();
  return std::nullopt;
}

// One /v1/messages answer, on the loop thread: the content blocks as they come (streamed as Anthropic's
// events), then the stop reason and usage.
struct MessageReply {
  ApiContext& api;
  std::shared_ptr<http::Exchange> ex;
  bool stream;
  std::vector<std::string> stops;
  std::string id, model_name;
  std::shared_ptr<ModelHandle> model;  // alive until the answer ends
  size_t input_tokens = 0, output_tokens = 0;
  // The blocks so far: thinking, text, tool_use; streamed ones opened and closed in order.
  struct Block {
    std::string type, text, tool_id, tool_name;  // text: the thinking, the text, or a tool's input JSON
  };
  std::vector<Block> blocks;
  bool block_open = false;
  size_t calls_seen = 0;

  MessageReply(ApiContext& a, std::shared_ptr<http::Exchange> e, bool s) : api(a), ex(std::move(e)), stream(s) {}

  void event(const char* name, JsonWriter& w) { ex->send(std::string("event: ") + name + "\ndata: " + w.take() + "\n\n"); }

  void close_block() {
    if (!block_open) return;
    block_open = false;
    JsonWriter w;
    w.begin_object().key("type").string("content_block_stop").key("index").number(int64_t(blocks.size() - 1)).end_object();
    event("content_block_stop", w);
  }

  // The block that `type`'s next piece goes into: the open one of that type, or a new one.
  Block& block(const std::string& type, const std::string& tool_id = {}, const std::string& tool_name = {}) {
    if (!blocks.empty() && blocks.back().type == type && type != "tool_use" && (block_open || !stream)) return blocks.back();
    if (stream) close_block();
    blocks.push_back({type, "", tool_id, tool_name});
    if (stream) {
      block_open = true;
      JsonWriter w;
      w.begin_object().key("type").string("content_block_start").key("index").number(int64_t(blocks.size() - 1));
      w.key("content_block").begin_object().key("type").string(type);
      if (type == "text") w.key("text").string("");
      if (type == "thinking") w.key("thinking").string("").key("signature").string("");
      if (type == "tool_use") w.key("id").string(tool_id).key("name").string(tool_name).key("input").begin_object().end_object();
      w.end_object().end_object();
      event("content_block_start", w);
    }
    return blocks.back();
  }

  void delta(const char* kind, const char* field, const std::string& piece) {
    if (!stream || piece.empty()) return;
    JsonWriter w;
    w.begin_object().key("type").string("content_block_delta").key("index").number(int64_t(blocks.size() - 1));
    w.key("delta").begin_object().key("type").string(kind).key(field).string(piece).end_object().end_object();
    event("content_block_delta", w);
  }

  void start() {
    if (!stream) return;
    ex->begin_stream(200, "text/event-stream");
    JsonWriter w;
    w.begin_object().key("type").string("message_start").key("message").begin_object();
    message_head(w);
    w.key("content").begin_array().end_array().key("stop_reason").null().key("stop_sequence").null();
    w.key("usage").begin_object().key("input_tokens").number(int64_t(input_tokens)).key("output_tokens").number(int64_t(0)).end_object();
    w.end_object().end_object();
    event("message_start", w);
  }

  void message_head(JsonWriter& w) {
    w.key("id").string(id).key("type").string("message").key("role").string("assistant").key("model").string(model_name);
  }

  void on_event(const TextEvent& e) {
    output_tokens += e.tokens.size();
    if (!e.reasoning.empty()) {
      block("thinking").text += e.reasoning;
      delta("thinking_delta", "thinking", e.reasoning);
    }
    if (!e.content.empty()) {
      block("text").text += e.content;
      delta("text_delta", "text", e.content);
    }
    if (stream) {
      for (const ToolCallFragment& f : e.tool_call_fragments) {
        if (!f.name.empty()) block("tool_use", f.id.empty() ? "toolu_" + std::to_string(calls_seen++) + "_" + id : f.id, f.name);
        if (!blocks.empty() && blocks.back().type == "tool_use") {
          blocks.back().text += f.arguments;
          delta("input_json_delta", "partial_json", f.arguments);
        }
      }
    } else {
      for (const ToolCall& c : e.tool_calls) block("tool_use", c.id.empty() ? "toolu_" + std::to_string(calls_seen++) + "_" + id : c.id, c.name).text = c.arguments_json;
    }
    if (!e.finished) return;
    api.metrics.tokens(model_name, input_tokens, output_tokens);
    if (ex->closed()) return;
    if (e.finish == FinishReason::Error) {
      if (!stream) return ex->respond(anthropic_error(500, e.error));
      JsonWriter w;
      w.begin_object().key("type").string("error").key("error").begin_object().key("type").string("api_error");
      w.key("message").string(e.error).end_object().end_object();
      event("error", w);
      return ex->finish();
    }
    bool called = false;
    for (const Block& b : blocks) called |= b.type == "tool_use";
    const char* reason = e.finish == FinishReason::Length ? "max_tokens" : called ? "tool_use" : e.stopped ? "stop_sequence" : "end_turn";
    // Which sequence stopped it is known when there is one to choose from.
    const bool named_stop = e.stopped && stops.size() == 1;
    if (stream) {
      close_block();
      JsonWriter w;
      w.begin_object().key("type").string("message_delta").key("delta").begin_object().key("stop_reason").string(reason);
      if (named_stop) w.key("stop_sequence").string(stops[0]);
      else w.key("stop_sequence").null();
      w.end_object().key("usage").begin_object().key("output_tokens").number(int64_t(output_tokens)).end_object().end_object();
      event("message_delta", w);
      JsonWriter stop;
      stop.begin_object().key("type").string("message_stop").end_object();
      event("message_stop", stop);
      return ex->finish();
    }
    JsonWriter w;
    w.begin_object();
    message_head(w);
    w.key("content").begin_array();
    for (const Block& b : blocks) {
      w.begin_object().key("type").string(b.type);
      if (b.type == "text") w.key("text").string(b.text);
      if (b.type == "thinking") w.key("thinking").string(b.text).key("signature").string("");
      if (b.type == "tool_use") w.key("id").string(b.tool_id).key("name").string(b.tool_name).key("input").raw(b.text.empty() ? "{}" : b.text);
      w.end_object();
    }
    w.end_array().key("stop_reason").string(reason);
    if (named_stop) w.key("stop_sequence").string(stops[0]);
    else w.key("stop_sequence").null();
    w.key("usage").begin_object().key("input_tokens").number(int64_t(input_tokens)).key("output_tokens").number(int64_t(output_tokens));
    w.end_object().end_object();
    ex->respond(json_ok(w.take()));
  }
};

std::string message_id() {
  static uint64_t n = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[40];
  std::snprintf(buf, sizeof buf, "msg_%016llx", (unsigned long long)(n++ * 0x9e3779b97f4a7c15ULL));
  return buf;
}

// /v1/messages and /v1/messages/count_tokens: the body is read and its prompt built on a worker.
void handle_messages(ApiContext& api, const std::shared_ptr<http::Exchange>& ex, bool count_only) {
  if (check_key(api.config, ex->request()))
    return ex->respond(anthropic_error(401, "invalid x-api-key: send the server's API key as x-api-key or Authorization: Bearer"));
  if (api.draining && !count_only) return ex->respond(anthropic_error(503, "this server is shutting down; send the request to another instance"));
  struct Work {
    GenerationBody body;
    std::optional<ApiError> error;
    PreparedText prepared;
    bool stream = false;
    std::vector<std::string> stops;
    int64_t counted = -1;
  };
  auto work = std::make_shared<Work>();
  api.bridge.run_on_workers(
      [&api, ex, count_only, work] {
        const std::string text = ex->take_body();
        simdjson::dom::parser parser;
        simdjson::padded_string padded(text);
        element body;
        if (parser.parse(padded).get(body) || body.type() != element_type::OBJECT)
          return void(work->error = ApiError{400, "the body must be a JSON object"});
        // count_tokens takes no max_tokens: one is supplied for the conversion.
        std::string openai;
        if (count_only) {
          std::string with_max = simdjson::to_string(body);
          with_max.insert(with_max.size() - 1, std::string(with_max.size() > 2 ? "," : "") + "\"max_tokens\":1");
          simdjson::dom::parser again;
          simdjson::padded_string p2(with_max);
          if ((work->error = to_openai(again.parse(p2).value_unsafe(), openai, work->stream, work->stops))) return;
        } else if ((work->error = to_openai(body, openai, work->stream, work->stops))) {
          return;
        }
        if ((work->error = parse_generation_body(openai, true, work->body))) return;
        work->body.request.max_waiting = api.config.max_waiting;
        if (!count_only) return void(work->prepared = api.engine.prepare(work->body.request));
        auto model = api.engine.model(work->body.request.model);
        if (!model) return void(work->error = ApiError{404, "model: " + work->body.request.model + " is not loaded"});
        std::string prompt;
        std::vector<int32_t> ids;
        Status s = model->apply_chat_template(work->body.request.chat, prompt);
        if (s.ok) s = model->tokenize(prompt, false, true, ids);
        if (!s.ok) return void(work->error = ApiError{400, s.message});
        work->counted = int64_t(ids.size());
      },
      [&api, ex, count_only, work] {
        if (ex->closed()) return;
        if (work->error) return ex->respond(anthropic_error(work->error->status, work->error->message));
        if (count_only) {
          JsonWriter w;
          w.begin_object().key("input_tokens").number(work->counted).end_object();
          return ex->respond(json_ok(w.take()));
        }
        auto reply = std::make_shared<MessageReply>(api, ex, work->stream);
        reply->stops = work->stops;
        reply->id = message_id();
        TextSubmission s = submit_with(api, ex, work->body.request, work->prepared, reply);
        if (s.refusal == Refusal::ModelNotFound)
          return ex->respond(anthropic_error(404, "model: " + work->body.request.model + " is not loaded (ftllmctl load it first)"));
        if (s.refusal != Refusal::None) return ex->respond(anthropic_error(s.refusal == Refusal::Busy ? 503 : 400, s.error));
        reply->model = s.model;
        reply->model_name = s.model->name();
        reply->input_tokens = s.prompt_tokens;
        reply->start();
      });
}

}  // namespace

void add_anthropic_routes(http::Router& router, ApiContext& api) {
  router.add_async("POST", "/v1/messages", [&api](const auto& ex) { handle_messages(api, ex, false); });
  router.add_async("POST", "/v1/messages/count_tokens", [&api](const auto& ex) { handle_messages(api, ex, true); });
}

}  // namespace ftllm::daemon
