// The daemon's routes: the public ones on TCP (OpenAI API, health) and the admin ones on the Unix socket.
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

void add_public_routes(http::Router& router, const Engine& engine, const Config& config);
void add_admin_routes(http::Router& router, const Engine& engine, const DaemonInfo& info);

}  // namespace ftllm::daemon
