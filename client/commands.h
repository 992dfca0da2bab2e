// ftllmctl's subcommands, one function each. Each returns the process exit status.
#pragma once

#include <string>
#include <vector>

#include "admin_client.h"

namespace ftllm::client {

struct CommandContext {
  AdminClient client;
  bool json = false;  // print the daemon's raw JSON instead of a table
};

int cmd_status(const CommandContext& ctx, const std::vector<std::string>& args);

}  // namespace ftllm::client
