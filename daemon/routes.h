// The admin routes, on the Unix socket (the public ones are in openai/routes.h).
#pragma once

#include <chrono>
#include <string>

#include "../engine/engine.h"
#include "config.h"
#include "http/router.h"

namespace ftllm::daemon {

// What the routes may read about the daemon itself.
struct DaemonInfo {
  std::chrono::steady_clock::time_point started;
  std::string listen_address;  // filled in once bound
  std::string admin_socket;
};

void add_admin_routes(http::Router& router, const Engine& engine, const DaemonInfo& info);

}  // namespace ftllm::daemon
