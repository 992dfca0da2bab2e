// One parsed HTTP request, as the routes see it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ftllm::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path plus optional ?query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool keep_alive = true;

  std::string_view path() const {
    std::string_view t = target;
    return t.substr(0, t.find('?'));
  }
  // The first header of that (lower-case) name, or empty.
  std::string_view header(std::string_view lower_name) const {
    for (auto& [k, v] : headers)
      if (k == lower_name) return v;
    return {};
  }
};

}  // namespace ftllm::http
