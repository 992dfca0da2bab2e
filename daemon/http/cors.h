// CORS (the Fetch standard) for browser pages on other origins that call the API: which origins may
// read its responses, and the answer to their preflight requests.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "request.h"
#include "response.h"

namespace ftllm::http {

struct CorsPolicy {
  // Exact origins ("https://chat.example.com"), or "*" for any; empty: no CORS headers at all (browsers
  // then refuse other origins' reads). Credentials are never allowed: the API key travels in the
  // Authorization header a page sets itself, not in cookies.
  std::vector<std::string> origins;

  bool any() const;
  bool allows(std::string_view origin) const;
  // The CORS headers of a response to `request` (none without an Origin this policy allows).
  void add_headers(const Request& request, std::vector<std::pair<std::string, std::string>>& headers) const;
  // A preflight (OPTIONS with Origin and Access-Control-Request-Method) of a path whose routes take
  // `methods` ("GET, POST"): 204 with what it may send, or 403 naming the origin the config lacks.
  // nullopt when the request is not a preflight.
  std::optional<Response> preflight(const Request& request, const std::string& methods) const;
};

}  // namespace ftllm::http
