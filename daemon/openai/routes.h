// The OpenAI API and llama-server's helper routes, on the TCP listener.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "../../engine/engine.h"
#include "../config.h"
#include "../engine_bridge.h"
#include "../http/router.h"
#include "../metrics.h"

namespace ftllm::daemon {

// Models the daemon is still loading (for /health); shared with the thread that loads them.
struct LoadingModels {
  std::mutex mu;
  std::vector<std::string> names;
};

struct ApiContext {
  Engine& engine;
  EngineBridge& bridge;
  const Config& config;
  Metrics& metrics;
  LoadingModels& loading;
};

void add_openai_routes(http::Router& router, ApiContext& api);

}  // namespace ftllm::daemon
