// Maps method and path to a handler. Each listener has its own router, so admin routes exist only on
// the Unix socket.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "request.h"
#include "response.h"

namespace ftllm::http {

using Handler = std::function<Response(const Request&)>;

class Router {
 public:
  void add(std::string method, std::string path, Handler handler);
  // Runs the matching handler; 404 for an unknown path, 405 (with Allow) for a known path with
  // another method. A handler that throws gives 500 and the connection carries on.
  Response dispatch(const Request& request) const;

 private:
  struct Route {
    std::string method, path;
    Handler handler;
  };
  std::vector<Route> routes_;
};

}  // namespace ftllm::http
