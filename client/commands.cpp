#include "commands.h"

#include <algorithm>

namespace ftllm::client {

namespace {
std::vector<Command>& registry() {
  static std::vector<Command> commands;  // filled by static objects of other files: built on first use
  return commands;
}
}  // namespace

RegisteredCommand::RegisteredCommand(Command command) {
  auto& all = registry();
  all.insert(std::upper_bound(all.begin(), all.end(), command, [](const Command& a, const Command& b) { return a.order < b.order; }),
             command);
}

const std::vector<Command>& registered_commands() { return registry(); }

}  // namespace ftllm::client
