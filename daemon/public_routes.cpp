// Routes on the TCP listener: what HTTP clients (OpenAI SDKs, curl, chat front ends) use.
#include "json_writer.h"
#include "routes.h"

namespace ftllm::daemon {

namespace {

// With an API key configured, /v1 routes need "Authorization: Bearer KEY"; /health stays open so that
// load balancers and systemd checks work without the key.
http::Handler require_key(const Config& config, http::Handler inner) {
  return [&config, inner = std::move(inner)](const http::Request& req) {
    if (!config.api_key.empty() && req.header("authorization") != "Bearer " + config.api_key)
      return http::json_error(401, "missing or wrong API key: send the header \"Authorization: Bearer <key>\"",
                              "invalid_request_error", "invalid_api_key");
    return inner(req);
  };
}

}  // namespace

void add_public_routes(http::Router& router, const Engine& engine, const Config& config) {
  router.add("GET", "/health", [](const http::Request&) {
    return http::Response{200, "application/json", {}, R"({"status":"ok"})"};
  });

  router.add("GET", "/v1/models", require_key(config, [&engine](const http::Request&) {
               JsonWriter w;
               w.begin_object().key("object").string("list").key("data").begin_array();
               for (const ModelInfo& m : engine.models()) {
                 w.begin_object();
                 w.key("id").string(m.name).key("object").string("model");
                 w.key("created").number(0).key("owned_by").string("ftllm");
                 w.end_object();
               }
               w.end_array().end_object();
               return http::Response{200, "application/json", {}, w.take()};
             }));
}

}  // namespace ftllm::daemon
