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

// A subcommand: its name, its lines in `ftllmctl --help`, its place among them, and what runs it.
struct Command {
  int order;
  const char* name;
  std::string (*usage)();
  int (*run)(const CommandContext& ctx, const std::vector<std::string>& args);
};

// Each subcommand's file registers itself with one static RegisteredCommand; main() and the usage text
// read the registry, so a new subcommand is one new file (the library is linked whole for that).
struct RegisteredCommand {
  explicit RegisteredCommand(Command command);
};
const std::vector<Command>& registered_commands();  // in their order

// Exit codes: 0 done, 1 the daemon refused (its reason printed), 2 usage error, 3 daemon not running,
// 4 the socket could not be used (permission denied, ...).

}  // namespace ftllm::client
