// The OpenAI API and llama-server's helper routes, on the TCP listener.
#pragma once

#include "../../engine/engine.h"
#include "../config.h"
#include "../engine_bridge.h"
#include "../http/router.h"
#include "../metrics.h"

namespace ftllm::daemon {

struct ApiContext {
  Engine& engine;
  EngineBridge& bridge;
  const Config& config;
  Metrics& metrics;
};

void add_openai_routes(http::Router& router, ApiContext& api);

}  // namespace ftllm::daemon
