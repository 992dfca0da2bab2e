// OpenAI's Responses API, stateless: POST /v1/responses with `input` a string or items (messages,
// function_call and function_call_output items, reasoning items, which templates leave out), `instructions`,
// function `tools` and `tool_choice`, `max_output_tokens`, `text.format` (json_object, or json_schema by
// constrained decoding), `reasoning.effort` "none" as the template's enable_thinking false. The body is read
// into the chat request it means and run exactly as /v1/chat/completions is; the answer is a response
// object of output items, or its typed events (response.created, response.output_item.added,
// response.output_text.delta, response.function_call_arguments.delta, ..., response.completed). This server
// keeps no responses: `store: true` and `previous_response_id` are refused, saying so.
#include <simdjson.h>

#include <chrono>

#include "core/json_writer.h"
#include "routes.h"

namespace ftllm::daemon {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

std::string new_id(const char* prefix) {
  static uint64_t n = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix, (unsigned long long)(++n * 0x9e3779b97f4a7c15ULL));
  return buf;
}

// What the response object echoes of its request.
struct Echo {
  std::string instructions = "null", tools = "[]", tool_choice = "\"auto\"", text_format = "{\"type\":\"text\"}";
  std::string max_output_tokens = "null", temperature = "null", top_p = "null";
  bool parallel_tool_calls = true;
};

// The text of a message's content: a string, or input_text / output_text parts.
std::optional<ApiError> content_text(element content, const std::string& where, std::string& out) {
  std::string_view s;
  if (!content.get(s)) return out = s, std::nullopt;
  if (content.type() != element_type::ARRAY) return ApiError{400, "'" + where + "' must be a string or an array of text parts", where};
  for (element part : content.get_array()) {
    std::string_view type, text;
    if (part["type"].get(type) || (type != "input_text" && type != "output_text" && type != "text") || part["text"].get(text))
      return ApiError{400, "'" + where + "' parts must be input_text or output_text; only text is supported", where};
    out += text;
  }
  return std::nullopt;
}

// The body as the chat body it means. Returns the error to answer, or nothing.
std::optional<ApiError> to_chat(element body, std::string& chat, bool& stream, Echo& echo) {
  bool store = false;
  if (!body["store"].error() && !body["store"].is_null() && body["store"].get(store)) return ApiError{400, "'store' must be a boolean", "store"};
  if (store)
    return ApiError{400, "this server keeps no responses: send \"store\": false (or leave it out) and the whole conversation as input", "store"};
  if (!body["previous_response_id"].error() && !body["previous_response_id"].is_null())
    return ApiError{400, "this server keeps no responses, so previous_response_id cannot be followed: send the whole conversation as input",
                    "previous_response_id"};
  if (!body["conversation"].error() && !body["conversation"].is_null())
    return ApiError{400, "this server keeps no conversations: send the whole conversation as input", "conversation"};
  if (!body["stream"].error() && !body["stream"].is_null() && body["stream"].get(stream)) return ApiError{400, "'stream' must be a boolean", "stream"};
  JsonWriter w;
  w.begin_object();
  std::string_view model;
  if (body["model"].get(model)) return ApiError{400, "'model' is required", "model"};
  w.key("model").string(model);
  w.key("messages").begin_array();
  std::string_view instructions;
  if (!body["instructions"].get(instructions)) {
    w.begin_object().key("role").string("system").key("content").string(instructions).end_object();
    echo.instructions = simdjson::to_string(body["instructions"].value_unsafe());
  }
  element input;
  if (body["input"].get(input)) return ApiError{400, "'input' is required", "input"};
  std::string_view text;
  if (!input.get(text)) {
    w.begin_object().key("role").string("user").key("content").string(text).end_object();
  } else if (input.type() == element_type::ARRAY) {
    size_t i = 0;
    bool open_calls = false;  // an assistant message whose tool_calls array is still open
    auto close_calls = [&] {
      if (open_calls) w.end_array().end_object();
      open_calls = false;
    };
    for (element item : input.get_array()) {
      const std::string where = "input[" + std::to_string(i++) + "]";
      std::string_view type = "message", role;
      if (!item["type"].error() && item["type"].get(type)) return ApiError{400, "'" + where + ".type' must be a string", where};
      if (type == "function_call") {
        std::string_view call_id, name, arguments;
        if (item["call_id"].get(call_id) || item["name"].get(name) || item["arguments"].get(arguments))
          return ApiError{400, "'" + where + "' function_call needs call_id, name and arguments", where};
        if (!open_calls) {
          w.begin_object().key("role").string("assistant").key("content").string("").key("tool_calls").begin_array();
          open_calls = true;
        }
        w.begin_object().key("id").string(call_id).key("type").string("function").key("function").begin_object();
        w.key("name").string(name).key("arguments").string(arguments).end_object().end_object();
        continue;
      }
      close_calls();
      if (type == "function_call_output") {
        std::string_view call_id;
        std::string output;
        element out;
        if (item["call_id"].get(call_id) || item["output"].get(out))
          return ApiError{400, "'" + where + "' function_call_output needs call_id and output", where};
        if (auto e = content_text(out, where + ".output", output)) return e;
        w.begin_object().key("role").string("tool").key("tool_call_id").string(call_id).key("content").string(output).end_object();
      } else if (type == "reasoning") {
        // A previous turn's reasoning: templates leave it out of the prompt.
      } else if (type == "message") {
        element content;
        if (item["role"].get(role) || (role != "user" && role != "assistant" && role != "system" && role != "developer"))
          return ApiError{400, "'" + where + ".role' must be user, assistant, system or developer", where + ".role"};
        if (item["content"].get(content)) return ApiError{400, "'" + where + ".content' is required", where + ".content"};
        std::string joined;
        if (auto e = content_text(content, where + ".content", joined)) return e;
        w.begin_object().key("role").string(role).key("content").string(joined).end_object();
      } else {
        return ApiError{400, "'" + where + ".type' \"" + std::string(type) +
                                 "\" is not supported (message, function_call, function_call_output, reasoning)", where + ".type"};
      }
    }
    close_calls();
  } else {
    return ApiError{400, "'input' must be a string or an array of items", "input"};
  }
  w.end_array();
  simdjson::dom::array tools;
  if (!body["tools"].get(tools)) {
    echo.tools = simdjson::to_string(tools);
    w.key("tools").begin_array();
    for (element t : tools) {
      std::string_view type, name, description;
      element parameters;
      if (t["type"].get(type) || type != "function")
        return ApiError{400, "'tools': only function tools are offered here ({\"type\": \"function\", \"name\": ..., \"parameters\": ...})", "tools"};
      if (t["name"].get(name)) return ApiError{400, "'tools': each function needs a name", "tools"};
      w.begin_object().key("type").string("function").key("function").begin_object().key("name").string(name);
      if (!t["description"].get(description)) w.key("description").string(description);
      if (!t["parameters"].get(parameters)) w.key("parameters").raw(simdjson::to_string(parameters));
      w.end_object().end_object();
    }
    w.end_array();
  }
  element choice;
  if (!body["tool_choice"].get(choice) && !choice.is_null()) {
    echo.tool_choice = simdjson::to_string(choice);
    std::string_view mode, name;
    if (!choice.get(mode)) w.key("tool_choice").string(mode);
    else if (!choice["name"].get(name))
      w.key("tool_choice").begin_object().key("type").string("function").key("function").begin_object().key("name").string(name).end_object().end_object();
    else return ApiError{400, "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}", "tool_choice"};
  }
  if (!body["parallel_tool_calls"].error() && !body["parallel_tool_calls"].is_null()) {
    if (body["parallel_tool_calls"].get(echo.parallel_tool_calls)) return ApiError{400, "'parallel_tool_calls' must be a boolean", "parallel_tool_calls"};
    w.key("parallel_tool_calls").boolean(echo.parallel_tool_calls);
  }
  for (auto [from, to, kept] : {std::tuple{"max_output_tokens", "max_tokens", &echo.max_output_tokens},
                                {"temperature", "temperature", &echo.temperature}, {"top_p", "top_p", &echo.top_p}}) {
    element v;
    if (!body[from].get(v) && !v.is_null()) {
      // max_output_tokens is checked here (it is named so in the error); the others by the chat parser.
      int64_t n;
      if (std::string_view(from) == "max_output_tokens" && (v.get(n) || n < 1))
        return ApiError{400, "'max_output_tokens' must be a positive integer", "max_output_tokens"};
      w.key(to).raw(simdjson::to_string(v));
      *kept = simdjson::to_string(v);
    }
  }
  element format;
  if (!body["text"]["format"].get(format) && !format.is_null()) {
    echo.text_format = simdjson::to_string(format);
    std::string_view type, name = "output";
    element schema;
    if (format["type"].get(type)) return ApiError{400, "'text.format.type' is required", "text.format.type"};
    if (type == "json_object") {
      w.key("response_format").begin_object().key("type").string("json_object").end_object();
    } else if (type == "json_schema") {
      if (format["schema"].get(schema)) return ApiError{400, "'text.format.schema' is required with type json_schema", "text.format.schema"};
      if (format["name"].get(name)) name = "output";
      w.key("response_format").begin_object().key("type").string("json_schema").key("json_schema").begin_object();
      w.key("name").string(name.empty() ? "output" : name).key("schema").raw(simdjson::to_string(schema)).end_object().end_object();
    } else if (type != "text") {
      return ApiError{400, "'text.format.type' must be text, json_object or json_schema", "text.format.type"};
    }
  }
  std::string_view effort;
  if (!body["reasoning"]["effort"].get(effort) && effort == "none")
    w.key("chat_template_kwargs").begin_object().key("enable_thinking").boolean(false).end_object();
  w.end_object();
  chat = w.take();
  return std::nullopt;
}

// One /v1/responses answer on the loop thread: output items as they come (streamed as typed events),
// then the response object with its status and usage.
struct ResponsesReply {
  ApiContext& api;
  std::shared_ptr<http::Exchange> ex;
  bool stream;
  Echo echo;
  std::string id, model_name;
  int64_t created_at = 0;
  std::shared_ptr<ModelHandle> model;  // alive until the answer ends
  size_t input_tokens = 0, output_tokens = 0, reasoning_tokens = 0;
  struct Item {
    std::string type, id, text, call_id, name;  // text: the reasoning, the message's text, or a call's arguments
  };
  std::vector<Item> items;
  bool item_open = false;
  int64_t sequence = 0;

  ResponsesReply(ApiContext& a, std::shared_ptr<http::Exchange> e, bool s) : api(a), ex(std::move(e)), stream(s) {}

  void event(const char* type, const std::function<void(JsonWriter&)>& fill) {
    JsonWriter w;
    w.begin_object().key("type").string(type).key("sequence_number").number(sequence++);
    fill(w);
    w.end_object();
    ex->send(std::string("event: ") + type + "\ndata: " + w.take() + "\n\n");
  }

  void item_json(JsonWriter& w, const Item& it, bool done) {
    const char* status = done ? "completed" : "in_progress";
    w.begin_object().key("id").string(it.id).key("type").string(it.type);
    if (it.type == "message") {
      w.key("status").string(status).key("role").string("assistant").key("content").begin_array();
      if (done) part_json(w, it);
      w.end_array();
    } else if (it.type == "reasoning") {
      w.key("summary").begin_array().end_array().key("content").begin_array();
      if (done) w.begin_object().key("type").string("reasoning_text").key("text").string(it.text).end_object();
      w.end_array();
    } else {
      w.key("call_id").string(it.call_id).key("name").string(it.name).key("arguments").string(done ? it.text : "").key("status").string(status);
    }
    w.end_object();
  }

  static void part_json(JsonWriter& w, const Item& it) {
    w.begin_object().key("type").string("output_text").key("text").string(it.text).key("annotations").begin_array().end_array();
    w.key("logprobs").begin_array().end_array().end_object();
  }

  void close_item() {
    if (!item_open) return;
    item_open = false;
    const Item& it = items.back();
    const int64_t index = int64_t(items.size() - 1);
    if (it.type == "message") {
      event("response.output_text.done", [&](JsonWriter& w) {
        w.key("item_id").string(it.id).key("output_index").number(index).key("content_index").number(int64_t(0)).key("text").string(it.text);
        w.key("logprobs").begin_array().end_array();
      });
      event("response.content_part.done", [&](JsonWriter& w) {
        w.key("item_id").string(it.id).key("output_index").number(index).key("content_index").number(int64_t(0)).key("part");
        part_json(w, it);
      });
    } else if (it.type == "reasoning") {
      event("response.reasoning_text.done", [&](JsonWriter& w) {
        w.key("item_id").string(it.id).key("output_index").number(index).key("content_index").number(int64_t(0)).key("text").string(it.text);
      });
    } else {
      event("response.function_call_arguments.done", [&](JsonWriter& w) {
        w.key("item_id").string(it.id).key("output_index").number(index).key("name").string(it.name).key("arguments").string(it.text);
      });
    }
    event("response.output_item.done", [&](JsonWriter& w) {
      w.key("output_index").number(index).key("item");
      item_json(w, it, true);
    });
  }

  Item& item(const std::string& type, const std::string& call_id = {}, const std::string& name = {}) {
    if (!items.empty() && items.back().type == type && type != "function_call" && (item_open || !stream)) return items.back();
    if (stream) close_item();
    items.push_back({type, new_id(type == "message" ? "msg_" : type == "reasoning" ? "rs_" : "fc_"), "", call_id, name});
    if (!stream) return items.back();
    item_open = true;
    const Item& it = items.back();
    const int64_t index = int64_t(items.size() - 1);
    event("response.output_item.added", [&](JsonWriter& w) {
      w.key("output_index").number(index).key("item");
      item_json(w, it, false);
    });
    if (type == "message")
      event("response.content_part.added", [&](JsonWriter& w) {
        w.key("item_id").string(it.id).key("output_index").number(index).key("content_index").number(int64_t(0)).key("part");
        part_json(w, it);
      });
    return items.back();
  }

  void delta(const char* type, const std::string& piece) {
    if (!stream || piece.empty()) return;
    const Item& it = items.back();
    event(type, [&](JsonWriter& w) {
      w.key("item_id").string(it.id).key("output_index").number(int64_t(items.size() - 1));
      if (it.type != "function_call") w.key("content_index").number(int64_t(0));
      w.key("delta").string(piece);
      if (it.type == "message") w.key("logprobs").begin_array().end_array();
    });
  }

  void response_json(JsonWriter& w, const char* status, bool length) {
    w.begin_object().key("id").string(id).key("object").string("response").key("created_at").number(created_at);
    w.key("status").string(status).key("model").string(model_name).key("output").begin_array();
    if (std::string_view(status) != "in_progress")
      for (const Item& it : items) item_json(w, it, true);
    w.end_array();
    w.key("error").null();
    if (length) w.key("incomplete_details").begin_object().key("reason").string("max_output_tokens").end_object();
    else w.key("incomplete_details").null();
    w.key("instructions").raw(echo.instructions).key("max_output_tokens").raw(echo.max_output_tokens);
    w.key("parallel_tool_calls").boolean(echo.parallel_tool_calls).key("temperature").raw(echo.temperature).key("top_p").raw(echo.top_p);
    w.key("tool_choice").raw(echo.tool_choice).key("tools").raw(echo.tools);
    w.key("text").begin_object().key("format").raw(echo.text_format).end_object();
    w.key("store").boolean(false).key("metadata").begin_object().end_object();
    if (std::string_view(status) == "in_progress") {
      w.key("usage").null();
    } else {
      w.key("usage").begin_object().key("input_tokens").number(int64_t(input_tokens));
      w.key("input_tokens_details").begin_object().key("cached_tokens").number(int64_t(0)).end_object();
      w.key("output_tokens").number(int64_t(output_tokens));
      w.key("output_tokens_details").begin_object().key("reasoning_tokens").number(int64_t(reasoning_tokens)).end_object();
      w.key("total_tokens").number(int64_t(input_tokens + output_tokens)).end_object();
    }
    w.end_object();
  }

  void start() {
    if (!stream) return;
    ex->begin_stream(200, "text/event-stream");
    for (const char* type : {"response.created", "response.in_progress"})
      event(type, [&](JsonWriter& w) {
        w.key("response");
        response_json(w, "in_progress", false);
      });
  }

  void on_event(const TextEvent& e) {
    output_tokens += e.tokens.size();
    if (!e.reasoning.empty()) {
      item("reasoning").text += e.reasoning;
      reasoning_tokens += e.tokens.size();
      delta("response.reasoning_text.delta", e.reasoning);
    }
    if (!e.content.empty()) {
      item("message").text += e.content;
      delta("response.output_text.delta", e.content);
    }
    if (stream) {
      for (const ToolCallFragment& f : e.tool_call_fragments) {
        if (!f.name.empty()) item("function_call", f.id.empty() ? new_id("call_") : f.id, f.name);
        if (!items.empty() && items.back().type == "function_call") {
          items.back().text += f.arguments;
          delta("response.function_call_arguments.delta", f.arguments);
        }
      }
    } else {
      for (const ToolCall& c : e.tool_calls) item("function_call", c.id.empty() ? new_id("call_") : c.id, c.name).text = c.arguments_json;
    }
    if (!e.finished) return;
    api.metrics.tokens(model_name, input_tokens, output_tokens);
    if (ex->closed()) return;
    if (e.finish == FinishReason::Error) {
      if (!stream) return ex->respond(api_error({500, e.error, "", "server_error"}));
      event("error", [&](JsonWriter& w) { w.key("code").string("server_error").key("message").string(e.error).key("param").null(); });
      return ex->finish();
    }
    const bool length = e.finish == FinishReason::Length;
    const char* status = length ? "incomplete" : "completed";
    if (!stream) {
      JsonWriter w;
      response_json(w, status, length);
      return ex->respond(json_ok(w.take()));
    }
    close_item();
    event(length ? "response.incomplete" : "response.completed", [&](JsonWriter& w) {
      w.key("response");
      response_json(w, status, length);
    });
    ex->finish();
  }
};

void handle_responses(ApiContext& api, const std::shared_ptr<http::Exchange>& ex) {
  if (auto denied = check_key(api.config, ex->request())) return ex->respond(*denied);
  if (api.draining)
    return ex->respond(api_error({503, "this server is shutting down; send the request to another instance", "", "server_error", "shutting_down"}));
  struct Work {
    GenerationBody body;
    std::optional<ApiError> error;
    PreparedText prepared;
    bool stream = false;
    Echo echo;
  };
  auto work = std::make_shared<Work>();
  api.bridge.run_on_workers(
      [&api, ex, work] {
        const std::string text = ex->take_body();
        simdjson::dom::parser parser;
        simdjson::padded_string padded(text);
        element body;
        if (parser.parse(padded).get(body) || body.type() != element_type::OBJECT)
          return void(work->error = ApiError{400, "the body must be a JSON object", "", "invalid_request_error", "invalid_json"});
        std::string chat;
        if ((work->error = to_chat(body, chat, work->stream, work->echo))) return;
        if ((work->error = parse_generation_body(chat, true, work->body))) return;
        work->body.request.max_waiting = api.config.max_waiting;
        work->prepared = api.engine.prepare(work->body.request);
      },
      [&api, ex, work] {
        if (ex->closed()) return;
        if (work->error) return ex->respond(api_error(*work->error));
        auto reply = std::make_shared<ResponsesReply>(api, ex, work->stream);
        reply->echo = work->echo;
        reply->id = new_id("resp_");
        reply->created_at = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
        TextSubmission s = submit_with(api, ex, work->body.request, work->prepared, reply);
        if (s.refusal == Refusal::ModelNotFound)
          return ex->respond(api_error({404, "model \"" + work->body.request.model + "\" is not loaded", "model", "invalid_request_error", "model_not_found"}));
        if (s.refusal != Refusal::None)
          return ex->respond(api_error({s.refusal == Refusal::Busy ? 503 : 400, s.error, s.param,
                                        s.refusal == Refusal::Busy ? "server_error" : "invalid_request_error"}));
        reply->model = s.model;
        reply->model_name = s.model->name();
        reply->input_tokens = s.prompt_tokens;
        reply->start();
      });
}

}  // namespace

void add_responses_routes(http::Router& router, ApiContext& api) {
  router.add_async("POST", "/v1/responses", [&api](const auto& ex) { handle_responses(api, ex); });
}

}  // namespace ftllm::daemon
