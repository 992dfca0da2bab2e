// The admin routes, on the Unix socket (the public ones are in openai/routes.h).
#pragma once

#include <chrono>
#include <string>

#include "../engine/engine.h"
#include "config.h"
#include "engine_bridge.h"
#include "http/router.h"

namespace ftllm::daemon {

// What the routes may read about the daemon itself.
struct DaemonInfo {
  std::chrono::steady_clock::time_point started;
  std::string listen_address;  // filled in once bound
  std::string admin_socket;
};

// Status, and models loaded and unloaded while the daemon serves (loads run on their own thread and
// stream their progress as newline-delimited JSON).
void add_admin_routes(http::Router& router, Engine& engine, const DaemonInfo& info, EngineBridge& bridge);

}  // namespace ftllm::daemon
