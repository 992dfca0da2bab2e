#include "cors.h"

#include <algorithm>

namespace ftllm::http {

bool CorsPolicy::any() const { return std::find(origins.begin(), origins.end(), "*") != origins.end(); }

bool CorsPolicy::allows(std::string_view origin) const {
  return !origin.empty() && (any() || std::find(origins.begin(), origins.end(), origin) != origins.end());
}

void CorsPolicy::add_headers(const Request& request, std::vector<std::pair<std::string, std::string>>& headers) const {
  const std::string_view origin = request.header("origin");
  if (!allows(origin)) return;
  headers.emplace_back("Access-Control-Allow-Origin", any() ? "*" : std::string(origin));
  if (!any()) headers.emplace_back("Vary", "Origin");  // the answer differs by origin: caches must keep them apart
  headers.emplace_back("Access-Control-Expose-Headers", "Retry-After");
}

std::optional<Response> CorsPolicy::preflight(const Request& request, const std::string& methods) const {
  if (request.method != "OPTIONS" || request.header("origin").empty() || request.header("access-control-request-method").empty())
    return std::nullopt;
  const std::string origin(request.header("origin"));
  if (!allows(origin))
    return json_error(403, "origin " + origin + " may not call this API; add it to [server] cors_origins in ftllmd.conf",
                      "invalid_request_error", "cors_origin_not_allowed");
  Response r{204, "", {}, ""};
  add_headers(request, r.headers);
  r.headers.emplace_back("Access-Control-Allow-Methods", methods);
  if (const std::string_view asked = request.header("access-control-request-headers"); !asked.empty())
    r.headers.emplace_back("Access-Control-Allow-Headers", std::string(asked));  // Authorization, Content-Type, ...
  r.headers.emplace_back("Access-Control-Max-Age", "600");
  return r;
}

}  // namespace ftllm::http
