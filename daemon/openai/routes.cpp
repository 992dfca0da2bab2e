#include "routes.h"

#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/json_writer.h"
#include "../log.h"
#include "request.h"

namespace ftllm::daemon {

using Clock = std::chrono::steady_clock;

http::Response api_error(const ApiError& e) {
  JsonWriter w;
  w.begin_object().key("error").begin_object();
  w.key("message").string(e.message).key("type").string(e.type);
  if (e.param.empty()) w.key("param").null();
  else w.key("param").string(e.param);
  if (e.code.empty()) w.key("code").null();
  else w.key("code").string(e.code);
  w.end_object().end_object();
  http::Response r{e.status, "application/json", {}, w.take()};
  if (e.status == 503) r.headers.emplace_back("Retry-After", "1");  // every 503 here passes in moments
  return r;
}

http::Response json_ok(std::string body) { return {200, "application/json", {}, std::move(body)}; }

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix, (unsigned long long)rng(), (unsigned long long)(rng() & 0xffffffff));
  return buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Constant-time comparison, so the key cannot be guessed byte by byte from response times.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0;
}

std::optional<http::Response> check_key(const Config& config, const http::Request& req) {
  if (config.api_key.empty()) return std::nullopt;
  std::string_view auth = req.header("authorization");
  if (auth.starts_with("Bearer ") && same_secret(auth.substr(7), config.api_key)) return std::nullopt;
  // Anthropic's clients send the key as x-api-key: the same key, the same check.
  if (std::string_view key = req.header("x-api-key"); !key.empty() && same_secret(key, config.api_key)) return std::nullopt;
  return http::json_error(401, "missing or wrong API key: send the header \"Authorization: Bearer <key>\"",
                          "invalid_request_error", "invalid_api_key");
}

std::string loaded_names(const Engine& engine) {
  std::string names;
  for (const ModelInfo& m : engine.models()) names += (names.empty() ? "" : ", ") + m.name;
  return names.empty() ? "none" : names;
}

// A model the daemon is still loading at start is worth a retry (503); any other is not there (404).
ApiError unknown_model(const ApiContext& api, const std::string& name) {
  {
    std::lock_guard lock(api.loading.mu);
    if (std::find(api.loading.names.begin(), api.loading.names.end(), name) != api.loading.names.end())
      return {503, "model \"" + name + "\" is still loading; retry in a moment", "model", "server_error", "model_loading"};
  }
  return {404, "model \"" + name + "\" is not loaded; loaded models: " + loaded_names(api.engine), "model",
          "invalid_request_error", "model_not_found"};
}

// The model a helper route names, or the only one loaded when it names none.
std::shared_ptr<ModelHandle> model_for(const ApiContext& api, simdjson::dom::element body, ApiError& error) {
  const Engine& engine = api.engine;
  std::string_view name;
  if (body["model"].get(name)) {
    auto models = engine.models();
    if (models.size() == 1) return engine.model(models[0].name);  // (with an adapter there are two names)
    error = {400, "'model' is required when " + std::to_string(models.size()) + " models are loaded", "model"};
    return nullptr;
  }
  auto m = engine.model(std::string(name));
  if (!m) error = unknown_model(api, std::string(name));
  return m;
}

namespace {

const char* finish_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "stop";
    case FinishReason::Error: return "error";
  }
  return "stop";
}

// What the choices of one request share: the exchange, the ids, the usage, the choices done so far.
struct Reply {
  std::shared_ptr<http::Exchange> ex;
  std::string id;
  int64_t created = 0;
  size_t prompt_tokens = 0, completion_tokens = 0, remaining = 0;
  // Per prompt: the fewest of its tokens any of its choices read from the prefix cache (a prompt is
  // counted once, as in prompt_tokens, and computed at least once).
  std::vector<int64_t> cached_tokens;
  std::vector<std::string> choices;  // finished choices' JSON (whole responses)
  // The model, for cancelling: weak, as the reply lives as long as its exchange; the choices hold it
  // (an unloaded model stays until its running choices end).
  std::weak_ptr<ModelHandle> model;
  std::vector<uint64_t> choice_ids;  // the engine's, to cancel by
  bool failed = false, client_gone = false;
  std::chrono::steady_clock::time_point arrived;  // when its request was read: time to first token counts from here
  void cancel_all() {
    if (auto m = model.lock())
      for (uint64_t id : choice_ids) m->cancel(id);
  }
};

}  // namespace

// One choice's answer as JSON: lives on the loop thread from submit to its last byte. The engine sends
// it text (content, reasoning, tool calls); this writes OpenAI's chunks or its whole response.
class Generation : public std::enable_shared_from_this<Generation> {
 public:
  Generation(ApiContext& api, std::shared_ptr<Reply> reply, size_t index, std::shared_ptr<const GenerationBody> request)
      : api_(api), reply_(std::move(reply)), ex_(reply_->ex), index_(index), request_(std::move(request)), body_(*request_), id_(reply_->id),
        created_(reply_->created), started_(reply_->arrived) {}

  // The model is known once the engine has taken the request.
  void started(std::shared_ptr<ModelHandle> model) {
    model_ = std::move(model);
    model_name_ = model_->name();
    prompt_tokens_ = reply_->prompt_tokens;
  }

  void on_event(const TextEvent& e) {
    if (finished_) return;
    // The role's chunk goes with the first token, not before: a client's time to first token (and the
    // first byte after the headers) includes the wait in the queue.
    if (body_.stream && body_.chat && !role_sent_) {
      role_sent_ = true;
      send_chunk([](JsonWriter& w) { w.key("role").string("assistant").key("content").string(""); }, nullptr);
    }
    const auto now = Clock::now();
    if (!e.tokens.empty()) {
      if (first_token_at_ == Clock::time_point{}) {
        first_token_at_ = now;
        api_.metrics.first_token(model_name_, std::chrono::duration<double>(now - started_).count());
      } else {
        api_.metrics.inter_token(model_name_, std::chrono::duration<double>(now - last_token_at_).count() / double(e.tokens.size()));
      }
      last_token_at_ = now;
    }
    completion_tokens_ += e.tokens.size();
    if (body_.logprobs) logprobs_.insert(logprobs_.end(), e.logprobs.begin(), e.logprobs.end());
    deliver(e);
    if (e.finished) {
      auto self = shared_from_this();  // alive until this call returns
      finish(e);
      api_.generations.erase(self);
    }
  }

 private:
  // New text: kept for the whole response, or sent now as chunks.
  void deliver(const TextEvent& d) {
    reasoning_ += d.reasoning;
    text_ += d.content;
    // Ids the model wrote (Kimi's functions.NAME:IDX, Mistral's nine characters) are kept: its template
    // reads them back in the next turn.
    for (const ToolCall& call : d.tool_calls) calls_.push_back({call, call.id.empty() ? random_id("call_") : call.id});
    if (!body_.stream) return;
    if (!body_.chat) {
      if (!d.content.empty()) send_chunk([&](JsonWriter& w) { w.key("text").string(d.content); }, nullptr, true);
      return;
    }
    if (!d.reasoning.empty()) send_chunk([&](JsonWriter& w) { w.key("reasoning_content").string(d.reasoning); }, nullptr);
    if (!d.content.empty()) send_chunk([&](JsonWriter& w) { w.key("content").string(d.content); }, nullptr);
    // Calls stream as OpenAI and vLLM send them: the first delta of a call has its index, id, type and
    // name; its arguments follow in pieces as the model writes them.
    for (const ToolCallFragment& f : d.tool_call_fragments) {
      const bool first = !f.name.empty();
      if (first) streamed_call_ids_.push_back(f.id.empty() ? random_id("call_") : f.id);
      if (f.index >= streamed_call_ids_.size()) continue;  // a piece of a call whose head never came
      send_chunk([&](JsonWriter& w) {
        w.key("tool_calls").begin_array().begin_object().key("index").number(int64_t(f.index));
        if (first) w.key("id").string(streamed_call_ids_[f.index]).key("type").string("function");
        w.key("function").begin_object();
        if (first) w.key("name").string(f.name);
        w.key("arguments").string(f.arguments).end_object().end_object().end_array();
      }, nullptr);
    }
  }

  std::vector<std::string> streamed_call_ids_;  // by call index

  void tool_calls(JsonWriter& w, size_t from, size_t to) {
    w.key("tool_calls").begin_array();
    for (size_t i = from; i < to; ++i) {
      w.begin_object().key("index").number(int64_t(i)).key("id").string(calls_[i].second).key("type").string("function");
      w.key("function").begin_object().key("name").string(calls_[i].first.name);
      w.key("arguments").string(calls_[i].first.arguments_json).end_object();
      w.end_object();
    }
    w.end_array();
  }

  // A streamed chunk: `delta` writes the delta object's fields (chat) or the choice's text (completions).
  template <typename Fill>
  void send_chunk(Fill fill, const char* finish_reason, bool text_choice = false) {
    JsonWriter w;
    w.begin_object();
    w.key("id").string(id_).key("object").string(body_.chat ? "chat.completion.chunk" : "text_completion");
    w.key("created").number(created_).key("model").string(model_name_);
    w.key("choices").begin_array().begin_object().key("index").number(int64_t(index_));
    if (body_.chat) {
      w.key("delta").begin_object();
      fill(w);
      w.end_object();
    } else {
      if (text_choice) fill(w);
      else w.key("text").string("");
    }
    write_logprobs(w);
    if (finish_reason) w.key("finish_reason").string(finish_reason);
    else w.key("finish_reason").null();
    w.end_object().end_array();
    if (body_.include_usage) w.key("usage").null();  // as OpenAI sends them: the last chunk alone has it
    w.end_object();
    ex_->send("data: " + w.take() + "\n\n");
  }

  // The "logprobs" of a choice: the entries gathered since the last chunk (all of them when not streaming),
  // in the chat shape ({"content": [...]}) or the completions shape (parallel arrays).
  void write_logprobs(JsonWriter& w) {
    if (!body_.logprobs || (body_.stream && logprobs_.empty() && !finished_)) {
      w.key("logprobs").null();
      return;
    }
    auto bytes = [&](const std::string& b) {
      w.key("bytes").begin_array();
      for (unsigned char c : b) w.number(int(c));
      w.end_array();
    };
    auto valid = [](std::string b) {  // a token may hold part of a character; JSON needs whole ones
      std::string out;
      for (size_t i = 0; i < b.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(b[i]);
        out += c < 0x80 ? std::string(1, char(c)) : std::string();
        if (c >= 0x80) {
          size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
          bool whole = n > 1 && i + n <= b.size();
          for (size_t k = 1; whole && k < n; ++k) whole = (static_cast<unsigned char>(b[i + k]) & 0xC0) == 0x80;
          out += whole ? b.substr(i, n) : std::string("\xef\xbf\xbd");
          i += whole ? n - 1 : 0;
        }
      }
      return out;
    };
    w.key("logprobs").begin_object();
    if (body_.chat) {
      w.key("content").begin_array();
      for (const TokenText& t : logprobs_) {
        w.begin_object().key("token").string(valid(t.bytes)).key("logprob").number(double(t.logprob));
        bytes(t.bytes);
        w.key("top_logprobs").begin_array();
        for (auto& [alt, alt_lp] : t.top) {
          w.begin_object().key("token").string(valid(alt)).key("logprob").number(double(alt_lp));
          bytes(alt);
          w.end_object();
        }
        w.end_array().end_object();
      }
      w.end_array();
    } else {
      w.key("tokens").begin_array();
      for (const TokenText& t : logprobs_) w.string(valid(t.bytes));
      w.end_array().key("token_logprobs").begin_array();
      for (const TokenText& t : logprobs_) w.number(double(t.logprob));
      w.end_array().key("top_logprobs").begin_array();
      for (const TokenText& t : logprobs_) {
        w.begin_object();
        for (auto& [alt, alt_lp] : t.top) w.key(valid(alt)).number(double(alt_lp));
        w.end_object();
      }
      w.end_array().key("text_offset").begin_array();
      int64_t offset = int64_t(logprob_offset_);
      for (const TokenText& t : logprobs_) {
        w.number(offset);
        offset += int64_t(t.bytes.size());
      }
      logprob_offset_ = size_t(offset);
      w.end_array();
    }
    w.end_object();
    if (body_.stream) logprobs_.clear();
  }

  void usage(JsonWriter& w) {
    w.key("usage").begin_object();
    w.key("prompt_tokens").number(int64_t(prompt_tokens_));
    w.key("completion_tokens").number(int64_t(reply_->completion_tokens));
    w.key("total_tokens").number(int64_t(prompt_tokens_ + reply_->completion_tokens));
    int64_t cached = 0;
    for (int64_t c : reply_->cached_tokens) cached += std::max<int64_t>(c, 0);
    w.key("prompt_tokens_details").begin_object().key("cached_tokens").number(cached).end_object();
    w.end_object();
  }

  void finish(const TextEvent& r) {
    finished_ = true;
    api_.metrics.tokens(model_name_, index_ == 0 ? prompt_tokens_ : 0, completion_tokens_);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
    log_info(std::string(body_.chat ? "chat" : "completion") + " model=" + model_name_ + " choice=" + std::to_string(index_) +
             " prompt_tokens=" + std::to_string(prompt_tokens_) + " completion_tokens=" + std::to_string(completion_tokens_) +
             " finish=" + (reply_->client_gone ? "client closed" : finish_name(r.finish)) + " time_ms=" + std::to_string(int64_t(ms)));
    if (reply_->client_gone || reply_->failed || ex_->closed()) return;
    if (r.finish == FinishReason::Error) {
      reply_->failed = true;
      reply_->cancel_all();
      ApiError err{r.error.find("context") != std::string::npos ? 400 : 500, r.error, "",
                   r.error.find("context") != std::string::npos ? "invalid_request_error" : "server_error"};
      if (!body_.stream) return ex_->respond(api_error(err));
      ex_->send("data: " + api_error(err).body + "\n\n");
      ex_->send("data: [DONE]\n\n");
      return ex_->finish();
    }
    reply_->completion_tokens += completion_tokens_;
    int64_t& cached = reply_->cached_tokens[index_ / size_t(body_.request.n)];
    cached = cached < 0 ? r.cached_tokens : std::min(cached, r.cached_tokens);
    const char* reason = !calls_.empty() && r.finish != FinishReason::Length ? "tool_calls"
                         : r.stopped                                        ? "stop"
                                                                            : finish_name(r.finish);
    if (body_.stream) {
      if (body_.chat) send_chunk([](JsonWriter&) {}, reason);
      else send_chunk([](JsonWriter& w) { w.key("text").string(""); }, reason, true);
    } else {
      JsonWriter c;
      c.begin_object().key("index").number(int64_t(index_));
      if (body_.chat) {
        c.key("message").begin_object().key("role").string("assistant");
        if (text_.empty() && !calls_.empty()) c.key("content").null();
        else c.key("content").string(text_);
        if (!reasoning_.empty()) c.key("reasoning_content").string(reasoning_);
        if (!calls_.empty()) tool_calls(c, 0, calls_.size());
        c.end_object();
      } else {
        c.key("text").string(text_);
      }
      write_logprobs(c);
      c.key("finish_reason").string(reason);
      c.end_object();
      reply_->choices[index_] = c.take();
    }
    if (--reply_->remaining == 0) complete_reply();
  }

  // After the last choice: the usage and [DONE] of a stream, or the whole response.
  void complete_reply() {
    if (body_.stream) {
      if (body_.include_usage) {
        JsonWriter w;
        w.begin_object();
        w.key("id").string(id_).key("object").string(body_.chat ? "chat.completion.chunk" : "text_completion");
        w.key("created").number(created_).key("model").string(model_name_);
        w.key("choices").begin_array().end_array();
        usage(w);
        w.end_object();
        ex_->send("data: " + w.take() + "\n\n");
      }
      ex_->send("data: [DONE]\n\n");
      return ex_->finish();
    }
    JsonWriter w;
    w.begin_object();
    w.key("id").string(id_).key("object").string(body_.chat ? "chat.completion" : "text_completion");
    w.key("created").number(created_).key("model").string(model_name_);
    w.key("choices").begin_array();
    for (const std::string& c : reply_->choices) w.raw(c);
    w.end_array();
    usage(w);
    w.end_object();
    ex_->respond(json_ok(w.take()));
  }

  ApiContext& api_;
  std::shared_ptr<Reply> reply_;
  std::shared_ptr<http::Exchange> ex_;
  size_t index_;
  std::shared_ptr<const GenerationBody> request_;  // shared by the request's choices
  const GenerationBody& body_;
  std::shared_ptr<ModelHandle> model_;  // alive until this choice ends
  std::string model_name_;
  size_t prompt_tokens_ = 0, completion_tokens_ = 0;
  std::vector<std::pair<ToolCall, std::string>> calls_;  // with their ids
  std::vector<TokenText> logprobs_;  // not yet written (streaming) or all
  size_t logprob_offset_ = 0;
  std::string id_, text_, reasoning_;
  int64_t created_;
  Clock::time_point started_, first_token_at_{}, last_token_at_{};
  bool role_sent_ = false;
  bool finished_ = false;
};

namespace {

// How an engine refusal reads to an OpenAI client.
http::Response refusal_response(const ApiContext& api, const TextRequest& r, const TextSubmission& s) {
  switch (s.refusal) {
    case Refusal::ModelNotFound: return api_error(unknown_model(api, r.model));  // naming the loaded ones
    case Refusal::Busy: return api_error({503, s.error, "", "server_error", "queue_full"});
    case Refusal::ChatTemplate: return api_error({400, s.error, s.param, "invalid_request_error", "chat_template_error"});
    case Refusal::ContextExceeded:
      return api_error({400, s.error, s.param, "invalid_request_error", "context_length_exceeded"});
    case Refusal::InvalidPrompt:
    case Refusal::None: break;
  }
  return api_error({400, s.error, s.param});
}

void start_generation(ApiContext& api, const std::shared_ptr<http::Exchange>& ex, bool chat,
                      std::shared_ptr<GenerationBody> body, const PreparedText& prepared,
                      std::chrono::steady_clock::time_point arrived);

void handle_generation(ApiContext& api, const std::shared_ptr<http::Exchange>& ex, bool chat) {
  if (auto denied = check_key(api.config, ex->request())) return ex->respond(*denied);
  if (api.draining)
    return ex->respond(api_error({503, "this server is shutting down; send the request to another instance", "", "server_error",
                                  "shutting_down"}));
  // Parsing the body and rendering and tokenizing its prompts take time in proportion to its size: a
  // worker does them, so the loop keeps answering everyone else (/health within milliseconds beside
  // bodies of megabytes); the loop then only queues the prompts.
  struct Work {
    std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
    std::shared_ptr<GenerationBody> body = std::make_shared<GenerationBody>();
    std::optional<ApiError> error;
    PreparedText prepared;
    bool done = false;
  };
  auto work = std::make_shared<Work>();
  api.bridge.run_on_workers(
      [&api, ex, chat, work, max_waiting = api.config.max_waiting] {
        const std::string text = ex->take_body();
        work->error = parse_generation_body(text, chat, *work->body);
        if (!work->error) {
          work->body->request.max_waiting = max_waiting;
          work->prepared = api.engine.prepare(work->body->request);
        }
        work->done = true;
      },
      [&api, ex, chat, work]() mutable {
        if (ex->closed()) {
        } else if (!work->done) {
          ex->respond(api_error({500, "the request could not be prepared; the server log says why", "", "server_error"}));
        } else if (work->error) {
          ex->respond(api_error(*work->error));
        } else {
          start_generation(api, ex, chat, work->body, work->prepared, work->arrived);
        }
        api.bridge.free_on_workers(std::move(work));  // its prompt and tokens may be megabytes
      });
}

void start_generation(ApiContext& api, const std::shared_ptr<http::Exchange>& ex, bool chat,
                      std::shared_ptr<GenerationBody> body, const PreparedText& prepared,
                      std::chrono::steady_clock::time_point arrived) {
  auto reply = std::make_shared<Reply>();
  reply->arrived = arrived;
  reply->ex = ex;
  reply->id = random_id(chat ? "chatcmpl-" : "cmpl-");
  reply->created = unix_now();
  reply->remaining = body->request.choice_count();
  reply->choices.resize(reply->remaining);
  reply->cached_tokens.assign(body->request.prompt_count(), -1);
  std::vector<std::shared_ptr<Generation>> choices;
  for (size_t i = 0; i < reply->remaining; ++i) choices.push_back(std::make_shared<Generation>(api, reply, i, body));
  // The engine's events reach the choices on the loop thread. Engine threads hold only weak references,
  // so a choice (and the model it keeps alive after an unload) is always destroyed on the loop thread.
  std::vector<std::weak_ptr<Generation>> targets(choices.begin(), choices.end());
  TextSubmission submitted = api.engine.submit(body->request, prepared, api.bridge.make_callback<TextEvent>([targets](const TextEvent& e) {
    if (e.choice < targets.size())
      if (auto g = targets[e.choice].lock()) g->on_event(e);
  }));
  if (submitted.refusal != Refusal::None) return ex->respond(refusal_response(api, body->request, submitted));
  reply->model = submitted.model;
  reply->choice_ids = submitted.choice_ids;
  reply->prompt_tokens = submitted.prompt_tokens;
  if (body->stream) ex->begin_stream(200, "text/event-stream");
  for (auto& g : choices) {
    g->started(submitted.model);
    api.generations.insert(g);
  }
  ex->on_close([reply] {
    reply->client_gone = true;
    reply->cancel_all();
  });
}

// A helper route (llama-server's shapes): the API key, a JSON object body, and the model it names (or the
// only one loaded) are checked before `fn` runs. All of it runs on a worker (tokenizing or rendering a
// large body takes time in proportion), and the answer goes out from the loop.
http::AsyncHandler helper_route(ApiContext& api,
                                std::function<http::Response(simdjson::dom::element, ModelHandle&, const http::Request&)> fn) {
  auto answer = [&api, fn = std::move(fn)](const http::Request& req) -> http::Response {
    simdjson::dom::parser parser;
    simdjson::padded_string text(req.body);
    simdjson::dom::element body;
    if (parser.parse(text).get(body) || body.type() != simdjson::dom::element_type::OBJECT)
      return api_error({400, "the body must be a JSON object", "", "invalid_request_error", "invalid_json"});
    ApiError err;
    auto model = model_for(api, body, err);
    if (!model) return api_error(err);
    return fn(body, *model, req);
  };
  return [&api, answer](const std::shared_ptr<http::Exchange>& ex) {
    if (auto denied = check_key(api.config, ex->request())) return ex->respond(*denied);  // the config lives on the loop
    auto response = std::make_shared<http::Response>(
        api_error({500, "the request could not be answered; the server log says why", "", "server_error"}));
    api.bridge.run_on_workers(
        [ex, response, answer] {
          *response = answer(ex->request());
          (void)ex->take_body();  // freed here, off the loop
        },
                              [ex, response] {
                                if (!ex->closed()) ex->respond(std::move(*response));
                              });
  };
}

}  // namespace

extern const unsigned char kWebuiPage[];  // webui_page.cpp, generated from daemon/webui/index.html
extern const std::size_t kWebuiPage_size;

void add_openai_routes(http::Router& router, ApiContext& api) {
  // The chat page: public, as any page is; the API calls it makes carry the key the user gives it.
  if (api.config.webui)
    router.add("GET", "/", [](const http::Request&) {
      http::Response r{200, "text/html; charset=utf-8", {}, std::string(reinterpret_cast<const char*>(kWebuiPage), kWebuiPage_size)};
      r.headers.emplace_back("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'");
      return r;
    });
  add_embedding_routes(router, api);
  add_ollama_routes(router, api);
  add_anthropic_routes(router, api);
  add_responses_routes(router, api);
  // Open without the API key, so load balancers and systemd checks work.
  router.add("GET", "/health", [&api](const http::Request&) {
    if (api.draining) {
      http::Response r{503, "application/json", {}, R"({"status":"draining"})"};
      r.headers.emplace_back("Retry-After", "1");
      return r;
    }
    std::lock_guard lock(api.loading.mu);
    if (api.loading.names.empty()) return http::Response{200, "application/json", {}, R"({"status":"ok"})"};
    JsonWriter w;
    w.begin_object().key("status").string("loading").key("loading").begin_array();
    for (const std::string& n : api.loading.names) w.string(n);
    w.end_array().end_object();
    http::Response r{503, "application/json", {}, w.take()};
    r.headers.emplace_back("Retry-After", "1");
    return r;
  });
  router.add("GET", "/metrics", [&api](const http::Request& req) {
    // It names the models and counts their traffic: behind the API key unless the config makes it public.
    if (!api.config.public_metrics)
      if (auto denied = check_key(api.config, req)) return *denied;
    return http::Response{200, "text/plain; version=0.0.4", {}, api.metrics.render(api.engine)};
  });
  router.add("GET", "/v1/models", [&api](const http::Request& req) {
    if (auto denied = check_key(api.config, req)) return *denied;
    JsonWriter w;
    w.begin_object().key("object").string("list").key("data").begin_array();
    for (const ModelInfo& m : api.engine.models()) {
      w.begin_object().key("id").string(m.name).key("object").string("model").key("created").number(0).key("owned_by").string("ftllm");
      if (!m.parent.empty()) w.key("parent").string(m.parent);  // a LoRA adapter's base model, as vLLM lists it
      w.end_object();
    }
    w.end_array().end_object();
    return json_ok(w.take());
  });
  router.add_prefix("GET", "/v1/models/", [&api](const http::Request& req) {
    if (auto denied = check_key(api.config, req)) return *denied;
    std::string name(req.path().substr(std::string_view("/v1/models/").size()));
    auto m = api.engine.model(name);
    if (!m) return api_error(unknown_model(api, name));
    JsonWriter w;
    w.begin_object().key("id").string(m->name()).key("object").string("model").key("created").number(0).key("owned_by").string("ftllm");
    if (!m->parent().empty()) w.key("parent").string(m->parent());
    w.end_object();
    return json_ok(w.take());
  });
  router.add_async("POST", "/v1/chat/completions", [&api](const auto& ex) { handle_generation(api, ex, true); });
  router.add_async("POST", "/v1/completions", [&api](const auto& ex) { handle_generation(api, ex, false); });

  router.add_async("POST", "/tokenize", helper_route(api, [](simdjson::dom::element body, ModelHandle& model, const http::Request&) {
    std::string_view content;
    if (body["content"].get(content)) return api_error({400, "'content' is required and must be a string", "content"});
    bool add_special = false;
    if (body["add_special"].get(add_special)) add_special = false;
    std::vector<int32_t> ids;
    if (Status s = model.tokenize(content, add_special, true, ids); !s.ok) return api_error({400, s.message});
    JsonWriter w;
    w.begin_object().key("tokens").begin_array();
    for (int32_t id : ids) w.number(id);
    w.end_array().end_object();
    return json_ok(w.take());
  }));
  router.add_async("POST", "/detokenize", helper_route(api, [](simdjson::dom::element body, ModelHandle& model, const http::Request&) {
    simdjson::dom::array tokens;
    if (body["tokens"].get(tokens)) return api_error({400, "'tokens' is required and must be an array of ids", "tokens"});
    std::vector<int32_t> ids;
    for (auto t : tokens) {
      int64_t v;
      if (t.get(v) || v < INT32_MIN || v > INT32_MAX) return api_error({400, "'tokens' must hold token ids", "tokens"});
      ids.push_back(int32_t(v));
    }
    std::string text;
    if (Status s = model.detokenize(ids, false, text); !s.ok) return api_error({400, s.message, "tokens"});
    JsonWriter w;
    w.begin_object().key("content").string(text).end_object();
    return json_ok(w.take());
  }));
  router.add_async("POST", "/apply-template", helper_route(api, [](simdjson::dom::element body, ModelHandle& model, const http::Request& req) {
    // The same parsing as chat completions, so the prompt is exactly what /v1/chat/completions feeds.
    std::string with_model = req.body;
    GenerationBody parsed;
    JsonWriter fixed;
    if (body["model"].error()) {
      simdjson::dom::object obj = body;
      fixed.begin_object().key("model").string(model.name());
      for (auto [k, v] : obj) fixed.key(k).raw(simdjson::to_string(v));
      fixed.end_object();
      with_model = fixed.take();
    }
    if (auto e = parse_generation_body(with_model, true, parsed)) return api_error(*e);
    bool add_generation_prompt = true;
    if (body["add_generation_prompt"].get(add_generation_prompt)) add_generation_prompt = true;
    parsed.request.chat.add_generation_prompt = add_generation_prompt;
    std::string prompt;
    if (Status s = model.apply_chat_template(parsed.request.chat, prompt); !s.ok)
      return api_error({400, s.message, "messages", "invalid_request_error", "chat_template_error"});
    JsonWriter w;
    w.begin_object().key("prompt").string(prompt).end_object();
    return json_ok(w.take());
  }));
}

}  // namespace ftllm::daemon
