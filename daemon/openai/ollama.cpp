// Ollama's API on the same listener, for the tools that speak it (editors, Open WebUI, LangChain's Ollama
// classes, the ollama client libraries): /api/chat and /api/generate (newline-delimited JSON streams, or one
// object with "stream": false), /api/tags, /api/ps, /api/show, /api/version, /api/embed. A request's body is
// read into the OpenAI request it means (options.num_predict as max_tokens, format as response_format,
// think as the template's enable_thinking), so it is checked and run exactly as /v1/chat/completions and
// /v1/completions are. Models are an operator's matter here: /api/pull, /api/create, /api/delete, /api/copy
// and /api/push answer with an error pointing to ftllmctl. Errors are Ollama's {"error": "..."}.
#include <simdjson.h>

#include <chrono>
#include <cmath>
#include <ctime>

#include "core/json_writer.h"
#include "routes.h"

namespace ftllm::daemon {

namespace {

using Clock = std::chrono::steady_clock;
using simdjson::dom::element;
using simdjson::dom::element_type;

http::Response ollama_error(int status, const std::string& message) {
  JsonWriter w;
  w.begin_object().key("error").string(message).end_object();
  return {status, "application/json", {}, w.take()};
}

http::Response ollama_error(const ApiError& e) { return ollama_error(e.status, e.message); }

std::string rfc3339_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[48];
  const long micros = long(std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000);
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, micros);
  return buf;
}

int64_t nanos(Clock::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }

// Ollama's body as the OpenAI body it means (chat: /api/chat, or /api/generate through the template;
// raw /api/generate: a completion). Returns the error to answer, or nothing.
std::optional<ApiError> to_openai(element body, bool chat_route, std::string& openai, bool& chat, bool& stream) {
  JsonWriter w;
  w.begin_object();
  std::string_view model;
  if (body["model"].get(model)) return ApiError{400, "model is required"};
  w.key("model").string(model);
  bool raw = false;
  if (!body["raw"].error() && body["raw"].get(raw)) return ApiError{400, "raw must be true or false"};
  stream = true;  // Ollama streams unless told not to
  if (!body["stream"].error() && !body["stream"].is_null() && body["stream"].get(stream)) return ApiError{400, "stream must be true or false"};
  chat = chat_route || !raw;
  if (chat_route) {
    simdjson::dom::array messages;
    if (body["messages"].get(messages)) return ApiError{400, "messages is required and must be an array"};
    w.key("messages").begin_array();
    size_t i = 0;
    for (element m : messages) {
      simdjson::dom::object obj;
      if (m.get(obj)) return ApiError{400, "messages[" + std::to_string(i) + "] must be an object"};
      std::string_view role;
      const bool tool = !obj["role"].get(role) && role == "tool";
      w.begin_object();
      for (auto [key, value] : obj) {
        if (key == "images") return ApiError{400, "messages[" + std::to_string(i) + "].images: this server runs text models only"};
        if (key == "thinking") continue;  // a previous turn's reasoning: templates drop it
        w.key(key).raw(simdjson::to_string(value));
      }
      // Ollama's tool results name the tool rather than a call id.
      if (tool && obj["tool_call_id"].error()) {
        std::string_view name;
        w.key("tool_call_id").string(obj["tool_name"].get(name) ? std::string_view("call") : name);
      }
      w.end_object();
      ++i;
    }
    w.end_array();
    if (!body["tools"].error() && !body["tools"].is_null()) w.key("tools").raw(simdjson::to_string(body["tools"].value_unsafe()));
  } else {
    std::string_view prompt, system;
    if (!body["prompt"].error() && body["prompt"].get(prompt)) return ApiError{400, "prompt must be a string"};
    if (!body["images"].error() && !body["images"].is_null()) return ApiError{400, "images: this server runs text models only"};
    if (raw) {
      w.key("prompt").string(prompt);
    } else {
      w.key("messages").begin_array();
      if (!body["system"].get(system)) w.begin_object().key("role").string("system").key("content").string(system).end_object();
      w.begin_object().key("role").string("user").key("content").string(prompt).end_object();
      w.end_array();
    }
  }
  // think: the template's enable_thinking (models whose templates read it: Qwen3, DeepSeek-R1 distills).
  bool think = true;
  if (!body["think"].error() && !body["think"].is_null()) {
    if (body["think"].get(think)) return ApiError{400, "think must be true or false"};
    if (chat) w.key("chat_template_kwargs").begin_object().key("enable_thinking").boolean(think).end_object();
  }
  // format: "json", or a JSON schema.
  element format;
  if (!body["format"].get(format) && !format.is_null()) {
    std::string_view f;
    if (!format.get(f)) {
      if (f == "json") w.key("response_format").begin_object().key("type").string("json_object").end_object();
      else if (!f.empty()) return ApiError{400, "format must be \"json\" or a JSON schema object"};
    } else if (format.type() == element_type::OBJECT) {
      w.key("response_format").begin_object().key("type").string("json_schema").key("json_schema").begin_object();
      w.key("name").string("format").key("schema").raw(simdjson::to_string(format)).end_object().end_object();
    } else {
      return ApiError{400, "format must be \"json\" or a JSON schema object"};
    }
  }
  // options: the sampling Ollama's Modelfile parameters name, under OpenAI's keys.
  simdjson::dom::object options;
  if (!body["options"].get(options)) {
    for (auto [key, value] : options) {
      static const std::pair<std::string_view, const char*> same[] = {
          {"temperature", "temperature"}, {"top_p", "top_p"}, {"top_k", "top_k"}, {"min_p", "min_p"}, {"seed", "seed"},
          {"stop", "stop"}, {"repeat_penalty", "repetition_penalty"}, {"presence_penalty", "presence_penalty"},
          {"frequency_penalty", "frequency_penalty"}};
      for (auto [from, to] : same)
        if (key == from) w.key(to).raw(simdjson::to_string(value));
      int64_t n;
      if (key == "num_predict" && !value.get(n) && n > 0) w.key("max_tokens").number(n);  // -1, -2: up to the context
    }
  } else if (!body["options"].error() && !body["options"].is_null()) {
    return ApiError{400, "options must be an object"};
  }
  w.end_object();
  openai = w.take();
  return std::nullopt;
}

// One /api/chat or /api/generate answer: Ollama's lines as the engine's text comes (on the loop thread),
// then the last one with done_reason, the counts and the durations in nanoseconds.
struct OllamaReply : std::enable_shared_from_this<OllamaReply> {
  ApiContext& api;
  std::shared_ptr<http::Exchange> ex;
  bool chat_route, stream;
  std::string model_name, content, thinking;
  std::vector<ToolCall> calls;
  std::shared_ptr<ModelHandle> model;  // alive until the answer ends
  size_t prompt_tokens = 0, eval_count = 0;
  Clock::time_point arrived, first_token{};

  OllamaReply(ApiContext& a, std::shared_ptr<http::Exchange> e, bool chat, bool s) : api(a), ex(std::move(e)), chat_route(chat), stream(s) {}

  void head(JsonWriter& w) { w.begin_object().key("model").string(model_name).key("created_at").string(rfc3339_now()); }

  void text(JsonWriter& w, const std::string& c, const std::string& t, const std::vector<ToolCall>& tool_calls) {
    if (!chat_route) {
      w.key("response").string(c);
      if (!t.empty()) w.key("thinking").string(t);
      return;
    }
    w.key("message").begin_object().key("role").string("assistant").key("content").string(c);
    if (!t.empty()) w.key("thinking").string(t);
    if (!tool_calls.empty()) {
      w.key("tool_calls").begin_array();
      for (const ToolCall& call : tool_calls)
        w.begin_object().key("function").begin_object().key("name").string(call.name).key("arguments").raw(call.arguments_json).end_object().end_object();
      w.end_array();
    }
    w.end_object();
  }

  void on_event(const TextEvent& e) {
    const auto now = Clock::now();
    if (!e.tokens.empty() && first_token == Clock::time_point{}) first_token = now;
    eval_count += e.tokens.size();
    content += e.content;
    thinking += e.reasoning;
    calls.insert(calls.end(), e.tool_calls.begin(), e.tool_calls.end());
    if (stream && !ex->closed() && (!e.content.empty() || !e.reasoning.empty() || !e.tool_calls.empty())) {
      JsonWriter w;
      head(w);
      text(w, e.content, e.reasoning, e.tool_calls);
      w.key("done").boolean(false).end_object();
      ex->send(w.take() + "\n");
    }
    if (!e.finished) return;
    api.metrics.tokens(model_name, prompt_tokens, eval_count);
    if (ex->closed()) return;
    if (e.finish == FinishReason::Error) {
      if (!stream) return ex->respond(ollama_error(500, e.error));
      JsonWriter w;
      w.begin_object().key("error").string(e.error).end_object();
      ex->send(w.take() + "\n");
      return ex->finish();
    }
    JsonWriter w;
    head(w);
    if (stream) text(w, "", "", {});
    else text(w, content, thinking, calls);
    const Clock::time_point first = first_token == Clock::time_point{} ? now : first_token;
    w.key("done").boolean(true).key("done_reason").string(e.finish == FinishReason::Length ? "length" : "stop");
    w.key("total_duration").number(nanos(now - arrived)).key("load_duration").number(int64_t(0));
    w.key("prompt_eval_count").number(int64_t(prompt_tokens)).key("prompt_eval_duration").number(nanos(first - arrived));
    w.key("eval_count").number(int64_t(eval_count)).key("eval_duration").number(nanos(now - first));
    w.end_object();
    if (stream) {
      ex->send(w.take() + "\n");
      ex->finish();
    } else {
      ex->respond(http::Response{200, "application/json", {}, w.take()});
    }
  }
};

void handle_generate(ApiContext& api, const std::shared_ptr<http::Exchange>& ex, bool chat_route) {
  if (auto denied = check_key(api.config, ex->request())) return ex->respond(ollama_error(401, "unauthorized: send \"Authorization: Bearer <key>\""));
  if (api.draining) return ex->respond(ollama_error(503, "this server is shutting down; send the request to another instance"));
  struct Work {
    Clock::time_point arrived = Clock::now();
    GenerationBody body;
    std::optional<ApiError> error;
    PreparedText prepared;
    bool stream = true, load_only = false;
  };
  auto work = std::make_shared<Work>();
  api.bridge.run_on_workers(
      [&api, ex, chat_route, work] {
        const std::string text = ex->take_body();
        simdjson::dom::parser parser;
        simdjson::padded_string padded(text);
        element body;
        if (parser.parse(padded).get(body) || body.type() != element_type::OBJECT) {
          work->error = ApiError{400, "the body must be a JSON object"};
          return;
        }
        std::string openai;
        bool chat = true;
        if ((work->error = to_openai(body, chat_route, openai, chat, work->stream))) return;
        // An empty prompt (or no messages) loads the model in Ollama: here every model is resident already.
        std::string_view prompt;
        simdjson::dom::array messages;
        work->load_only = chat_route ? !body["messages"].get(messages) && messages.size() == 0
                                     : body["prompt"].get(prompt) || prompt.empty();
        if (work->load_only) {
          std::string_view model;
          if (body["model"].get(model)) return;  // (to_openai checked it)
          work->body.request.model = model;
          return;
        }
        if ((work->error = parse_generation_body(openai, chat, work->body))) return;
        work->body.request.max_waiting = api.config.max_waiting;
        work->prepared = api.engine.prepare(work->body.request);
      },
      [&api, ex, chat_route, work] {
        if (ex->closed()) return;
        if (work->error) return ex->respond(ollama_error(*work->error));
        auto reply = std::make_shared<OllamaReply>(api, ex, chat_route, work->stream);
        reply->arrived = work->arrived;
        if (work->load_only) {
          auto model = api.engine.model(work->body.request.model);
          if (!model) return ex->respond(ollama_error(404, "model \"" + work->body.request.model + "\" not found; ftllmctl load it first"));
          JsonWriter w;
          reply->model_name = model->name();
          reply->head(w);
          if (chat_route) reply->text(w, "", "", {});
          else w.key("response").string("");
          w.key("done").boolean(true).key("done_reason").string("load").end_object();
          return ex->respond(http::Response{200, "application/json", {}, w.take()});
        }
        TextSubmission s = submit_with(api, ex, work->body.request, work->prepared, reply);
        if (s.refusal == Refusal::ModelNotFound)
          return ex->respond(ollama_error(404, "model \"" + work->body.request.model + "\" not found; ftllmctl load it first"));
        if (s.refusal != Refusal::None) return ex->respond(ollama_error(s.refusal == Refusal::Busy ? 503 : 400, s.error));
        reply->model = s.model;
        reply->model_name = s.model->name();
        reply->prompt_tokens = s.prompt_tokens;
        if (reply->stream) ex->begin_stream(200, "application/x-ndjson");
      });
}

// Ollama's "details" of a model, from what the engine knows of it.
void details(JsonWriter& w, ModelHandle& m) {
  const ModelHandle::Footprint f = m.footprint();
  char params[32];
  std::snprintf(params, sizeof params, f.parameters >= 1000000000 ? "%.1fB" : "%.0fM",
                f.parameters >= 1000000000 ? double(f.parameters) / 1e9 : double(f.parameters) / 1e6);
  w.key("details").begin_object();
  w.key("parent_model").string(m.parent()).key("format").string(m.source().ends_with(".gguf") ? "gguf" : "safetensors");
  w.key("family").string(m.architecture()).key("families").begin_array().string(m.architecture()).end_array();
  w.key("parameter_size").string(params).key("quantization_level").string(f.dtypes).end_object();
}

void model_entry(JsonWriter& w, const Engine& engine, const ModelInfo& info, bool running) {
  auto m = engine.model(info.name);
  if (!m) return;
  const ModelHandle::Footprint f = m->footprint();
  w.begin_object().key("name").string(info.name).key("model").string(info.name);
  if (!running) w.key("modified_at").string(rfc3339_now());
  w.key("size").number(f.weight_bytes).key("digest").string("");
  details(w, *m);
  if (running) {
    uint64_t vram = 0;
    for (const DeviceMemory& d : f.memory)
      if (d.device.starts_with("cuda")) vram += d.weight_bytes + d.kv_bytes;
    w.key("expires_at").string("9999-12-31T23:59:59Z").key("size_vram").number(vram).key("context_length").number(m->context_length());
  }
  w.end_object();
}

http::Response model_list(const Engine& engine, bool running) {
  JsonWriter w;
  w.begin_object().key("models").begin_array();
  for (const ModelInfo& m : engine.models()) model_entry(w, engine, m, running);
  w.end_array().end_object();
  return json_ok(w.take());
}

http::Response show(const ApiContext& api, const http::Request& req) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(req.body);
  element body;
  std::string_view name;
  if (parser.parse(padded).get(body) || (body["model"].get(name) && body["name"].get(name)))
    return ollama_error(400, "the body must be a JSON object with \"model\"");
  auto m = api.engine.model(std::string(name));
  if (!m) return ollama_error(404, "model \"" + std::string(name) + "\" not found; ftllmctl load it first");
  const ModelHandle::Footprint f = m->footprint();
  JsonWriter w;
  w.begin_object().key("modelfile").string("").key("parameters").string("").key("template").string("");
  details(w, *m);
  w.key("model_info").begin_object().key("general.architecture").string(m->architecture());
  w.key("general.parameter_count").number(f.parameters).key("general.context_length").number(m->context_length());
  w.end_object();
  w.key("capabilities").begin_array();
  if (m->is_embedding_model()) w.string("embedding");
  else w.string("completion").string("tools");
  w.end_array();
  w.key("modified_at").string(rfc3339_now()).end_object();
  return json_ok(w.take());
}

// /api/embed {"model", "input": string or strings, "dimensions"?}: the model's pooled vectors.
void embed(ApiContext& api, const std::shared_ptr<http::Exchange>& ex) {
  if (auto denied = check_key(api.config, ex->request())) return ex->respond(ollama_error(401, "unauthorized"));
  struct Work {
    Clock::time_point arrived = Clock::now();
    std::optional<ApiError> error;
    std::shared_ptr<ModelHandle> model;
    std::vector<std::vector<int32_t>> inputs;
    int64_t dimensions = 0;
  };
  auto work = std::make_shared<Work>();
  api.bridge.run_on_workers(
      [&api, ex, work] {
        simdjson::dom::parser parser;
        simdjson::padded_string padded(ex->take_body());
        element body, input;
        std::string_view name;
        if (parser.parse(padded).get(body) || body["model"].get(name)) return void(work->error = ApiError{400, "model is required"});
        work->model = api.engine.model(std::string(name));
        if (!work->model) return void(work->error = ApiError{404, "model \"" + std::string(name) + "\" not found; ftllmctl load it first"});
        if (Status s = work->model->embedding_support(); !s.ok) return void(work->error = ApiError{400, s.message});
        if (!body["dimensions"].error() && (body["dimensions"].get(work->dimensions) || work->dimensions < 1 ||
                                            work->dimensions > work->model->hidden_size()))
          return void(work->error = ApiError{400, "dimensions must be from 1 to " + std::to_string(work->model->hidden_size())});
        std::vector<std::string_view> texts;
        std::string_view one;
        if (body["input"].get(input)) return void(work->error = ApiError{400, "input is required"});
        if (!input.get(one)) texts.push_back(one);
        else if (input.type() == element_type::ARRAY)
          for (element e : input.get_array()) {
            if (e.get(one)) return void(work->error = ApiError{400, "input must be a string or an array of strings"});
            texts.push_back(one);
          }
        else return void(work->error = ApiError{400, "input must be a string or an array of strings"});
        for (std::string_view t : texts) {
          std::vector<int32_t> ids;
          if (Status s = work->model->tokenize(t, true, false, ids); !s.ok) return void(work->error = ApiError{400, s.message});
          work->inputs.push_back(std::move(ids));
        }
      },
      [&api, ex, work] {
        if (ex->closed()) return;
        if (work->error) return ex->respond(ollama_error(*work->error));
        auto model = work->model;
        model->embed(std::move(work->inputs), api.bridge.make_callback<ModelHandle::Embeddings>([ex, work](const ModelHandle::Embeddings& r) {
          if (ex->closed()) return;
          if (!r.status.ok) return ex->respond(ollama_error(400, r.status.message));
          JsonWriter w;
          w.begin_object().key("model").string(work->model->name()).key("embeddings").begin_array();
          for (const std::vector<float>& v : r.vectors) {
            const size_t n = work->dimensions ? size_t(work->dimensions) : v.size();
            double norm = 0;
            for (size_t i = 0; i < n; ++i) norm += double(v[i]) * v[i];
            const double scale = work->dimensions && norm > 0 ? 1.0 / std::sqrt(norm) : 1.0;  // truncated: renormalised
            w.begin_array();
            for (size_t i = 0; i < n; ++i) w.number(double(v[i]) * scale);
            w.end_array();
          }
          w.end_array().key("total_duration").number(nanos(Clock::now() - work->arrived)).key("load_duration").number(int64_t(0));
          w.key("prompt_eval_count").number(int64_t(r.prompt_tokens)).end_object();
          ex->respond(json_ok(w.take()));
        }));
      });
}

}  // namespace

void add_ollama_routes(http::Router& router, ApiContext& api) {
  router.add_async("POST", "/api/chat", [&api](const auto& ex) { handle_generate(api, ex, true); });
  router.add_async("POST", "/api/generate", [&api](const auto& ex) { handle_generate(api, ex, false); });
  router.add_async("POST", "/api/embed", [&api](const auto& ex) { embed(api, ex); });
  router.add("GET", "/api/tags", [&api](const http::Request& req) {
    if (auto denied = check_key(api.config, req)) return ollama_error(401, "unauthorized");
    return model_list(api.engine, false);
  });
  router.add("GET", "/api/ps", [&api](const http::Request& req) {
    if (auto denied = check_key(api.config, req)) return ollama_error(401, "unauthorized");
    return model_list(api.engine, true);
  });
  router.add("POST", "/api/show", [&api](const http::Request& req) {
    if (auto denied = check_key(api.config, req)) return ollama_error(401, "unauthorized");
    return show(api, req);
  });
  router.add("GET", "/api/version", [](const http::Request&) {
    JsonWriter w;
    w.begin_object().key("version").string(engine_version()).end_object();
    return json_ok(w.take());
  });
  for (const char* path : {"/api/pull", "/api/push", "/api/create", "/api/copy"})
    router.add("POST", path, [path](const http::Request&) {
      return ollama_error(403, std::string(path) + " is not offered: ftllmd's models are loaded by its operator (ftllmctl load MODEL, "
                                                   "ftllmctl unload NAME)");
    });
  router.add("DELETE", "/api/delete", [](const http::Request&) {
    return ollama_error(403, "/api/delete is not offered: ftllmd's models are unloaded by its operator (ftllmctl unload NAME)");
  });
}

}  // namespace ftllm::daemon
