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
int cmd_load(const CommandContext& ctx, const std::vector<std::string>& args);
int cmd_unload(const CommandContext& ctx, const std::vector<std::string>& args);
int cmd_list(const CommandContext& ctx, const std::vector<std::string>& args);
int cmd_rebalance(const CommandContext& ctx, const std::vector<std::string>& args);
int cmd_chat(const CommandContext& ctx, const std::vector<std::string>& args);
int cmd_export(const CommandContext& ctx, const std::vector<std::string>& args);  // local: no daemon

// Exit codes: 0 done, 1 the daemon refused (its reason printed), 2 usage error, 3 daemon not running,
// 4 the socket could not be used (permission denied, ...).

}  // namespace ftllm::client
