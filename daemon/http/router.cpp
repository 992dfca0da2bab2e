#include "router.h"

#include <exception>

namespace ftllm::http {

void Router::add(std::string method, std::string path, Handler handler) {
  routes_.push_back({std::move(method), std::move(path), std::move(handler)});
}

Response Router::dispatch(const Request& request) const {
  std::string allowed;
  for (const auto& route : routes_) {
    if (route.path != request.path()) continue;
    bool head_as_get = request.method == "HEAD" && route.method == "GET";
    if (route.method == request.method || head_as_get) {
      try {
        return route.handler(request);
      } catch (const std::exception& e) {
        return json_error(500, std::string("internal error: ") + e.what(), "server_error", "internal_error");
      }
    }
    allowed += (allowed.empty() ? "" : ", ") + route.method;
  }
  if (!allowed.empty()) {
    Response r = json_error(405, "method " + request.method + " is not allowed on " + std::string(request.path()) +
                                     "; use " + allowed,
                            "invalid_request_error", "method_not_allowed");
    r.headers.emplace_back("Allow", allowed);
    return r;
  }
  return json_error(404, "unknown path " + std::string(request.path()) + " (method " + request.method + ")",
                    "invalid_request_error", "unknown_url");
}

}  // namespace ftllm::http
