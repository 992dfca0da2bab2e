// Maps method and path to a handler. Each listener has its own router, so admin routes exist only on
// the Unix socket.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exchange.h"

namespace ftllm::http {

// Gives a response at once.
using Handler = std::function<Response(const Request&)>;
// May respond later, or stream; owns the exchange through the shared pointer as long as it needs.
using AsyncHandler = std::function<void(const std::shared_ptr<Exchange>&)>;

class Router {
 public:
  void add(std::string method, std::string path, Handler handler);
  void add_async(std::string method, std::string path, AsyncHandler handler);
  // Matches every path that starts with `prefix` ("/v1/models/" for /v1/models/{id}).
  void add_prefix(std::string method, std::string prefix, Handler handler);

  // Runs the matching handler; 404 for an unknown path, 405 (with Allow) for a known path with
  // another method. A handler that throws gives 500 and the connection carries on.
  void dispatch(const std::shared_ptr<Exchange>& exchange) const;
  Response dispatch(const Request& request) const;  // synchronous routes only (tests)

 private:
  struct Route {
    std::string method, path;
    bool prefix;
    Handler handler;
    AsyncHandler async;
  };
  const Route* match(const Request& request, std::string& allowed) const;
  std::vector<Route> routes_;
};

Response not_found(const Request& request);

}  // namespace ftllm::http
