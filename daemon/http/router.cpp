#include "router.h"

#include <exception>

namespace ftllm::http {

void Router::add(std::string method, std::string path, Handler handler) {
  routes_.push_back({std::move(method), std::move(path), false, std::move(handler), nullptr});
}

void Router::add_async(std::string method, std::string path, AsyncHandler handler) {
  routes_.push_back({std::move(method), std::move(path), false, nullptr, std::move(handler)});
}

void Router::add_prefix(std::string method, std::string prefix, Handler handler) {
  routes_.push_back({std::move(method), std::move(prefix), true, std::move(handler), nullptr});
}

Response not_found(const Request& request) {
  return json_error(404, "unknown path " + std::string(request.path()) + " (method " + request.method + ")",
                    "invalid_request_error", "unknown_url");
}

const Router::Route* Router::match(const Request& request, std::string& allowed) const {
  for (const auto& route : routes_) {
    bool path_matches = route.prefix ? request.path().starts_with(route.path) && request.path().size() > route.path.size()
                                     : route.path == request.path();
    if (!path_matches) continue;
    if (route.method == request.method || (request.method == "HEAD" && route.method == "GET")) return &route;
    allowed += (allowed.empty() ? "" : ", ") + route.method;
  }
  return nullptr;
}

static Response method_not_allowed(const Request& request, const std::string& allowed) {
  Response r = json_error(405, "method " + request.method + " is not allowed on " + std::string(request.path()) +
                                   "; use " + allowed,
                          "invalid_request_error", "method_not_allowed");
  r.headers.emplace_back("Allow", allowed);
  return r;
}

static Response internal_error(const std::exception& e) {
  return json_error(500, std::string("internal error: ") + e.what(), "server_error", "internal_error");
}

Response Router::dispatch(const Request& request) const {
  std::string allowed;
  const Route* route = match(request, allowed);
  if (!route) return allowed.empty() ? not_found(request) : method_not_allowed(request, allowed);
  if (!route->handler) return json_error(500, "asynchronous route called synchronously", "server_error", "internal_error");
  try {
    return route->handler(request);
  } catch (const std::exception& e) {
    return internal_error(e);
  }
}

void Router::dispatch(const std::shared_ptr<Exchange>& exchange) const {
  std::string allowed;
  const Route* route = match(exchange->request(), allowed);
  if (!route && !allowed.empty() && exchange->cors())  // a browser's preflight of a path we serve
    if (std::optional<Response> answer = exchange->cors()->preflight(exchange->request(), allowed)) return exchange->respond(*answer);
  if (!route || route->handler) return exchange->respond(dispatch(exchange->request()));
  try {
    route->async(exchange);
  } catch (const std::exception& e) {
    if (!exchange->done()) exchange->respond(internal_error(e));
  }
}

}  // namespace ftllm::http
