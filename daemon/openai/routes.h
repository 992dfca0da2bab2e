// The OpenAI API and llama-server's helper routes, on the TCP listener.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <simdjson.h>

#include "../../engine/engine.h"
#include "../config.h"
#include "../engine_bridge.h"
#include "../http/router.h"
#include "../metrics.h"
#include "request.h"

namespace ftllm::daemon {

// Models the daemon is still loading (for /health); shared with the thread that loads them.
struct LoadingModels {
  std::mutex mu;
  std::vector<std::string> names;
};

class Generation;

struct ApiContext {
  Engine& engine;
  EngineBridge& bridge;
  const Config& config;
  Metrics& metrics;
  LoadingModels& loading;
  // Generations in flight, owned here on the loop thread: engine worker threads hold only weak
  // references, so a generation (and the model it keeps alive after an unload) is always destroyed on
  // the loop thread, never on the worker it would have to join.
  std::set<std::shared_ptr<Generation>> generations;
  std::set<std::shared_ptr<void>> other_generations;  // the same for the other APIs' answers (submit_with)
  // SIGTERM's drain: running generations finish; /health and new generations answer 503, so a load
  // balancer's readiness probe takes this instance out while its connections are still answered.
  bool draining = false;
};

void add_openai_routes(http::Router& router, ApiContext& api);
void add_embedding_routes(http::Router& router, ApiContext& api);  // embeddings.cpp
void add_ollama_routes(http::Router& router, ApiContext& api);     // ollama.cpp
void add_anthropic_routes(http::Router& router, ApiContext& api);  // anthropic.cpp
void add_responses_routes(http::Router& router, ApiContext& api);  // responses.cpp

// Shared by the route files: an error as OpenAI's JSON (503s with Retry-After), a 200 JSON body, the API
// key check (a 401 when it fails), and the model a request names (or the only one loaded), else why not.
http::Response api_error(const ApiError& e);
http::Response json_ok(std::string body);
std::optional<http::Response> check_key(const Config& config, const http::Request& req);
std::shared_ptr<ModelHandle> model_for(const ApiContext& api, simdjson::dom::element body, ApiError& error);

// Submits a request whose answer `reply` writes in another API's shapes (Ollama's, Anthropic's, the
// Responses API's): its on_event(const TextEvent&) gets the engine's events on the loop thread; it stays in
// api.other_generations until the last one, so it (and the model it holds) is destroyed there; a client
// that goes away cancels the request. Returns the engine's answer (a refusal changes nothing).
template <class Reply>
TextSubmission submit_with(ApiContext& api, const std::shared_ptr<http::Exchange>& ex, const TextRequest& request,
                           const PreparedText& prepared, const std::shared_ptr<Reply>& reply) {
  std::weak_ptr<Reply> weak = reply;
  TextSubmission s = api.engine.submit(request, prepared, api.bridge.make_callback<TextEvent>([weak, &api](const TextEvent& e) {
    if (auto r = weak.lock()) {
      r->on_event(e);
      if (e.finished) api.other_generations.erase(r);
    }
  }));
  if (s.refusal != Refusal::None) return s;
  api.other_generations.insert(reply);
  ex->on_close([model = std::weak_ptr<ModelHandle>(s.model), ids = s.choice_ids] {
    if (auto m = model.lock())
      for (uint64_t id : ids) m->cancel(id);
  });
  return s;
}

}  // namespace ftllm::daemon
