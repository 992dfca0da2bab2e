// ftllmctl: controls a running ftllmd through its admin socket.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "config.h"
#include "ftllm_version.h"

namespace {

std::string usage() {
  std::string text = "usage: ftllmctl [--socket PATH] [--config FILE] [--json] COMMAND [ARGS]\n\ncommands:\n";
  for (const ftllm::client::Command& c : ftllm::client::registered_commands()) text += c.usage();
  return text + "\n"
                "The socket is --socket, else $FTLLMD_SOCKET, else admin.socket of the config file\n"
                "(--config, default " FTLLM_DEFAULT_CONFIG "), else /run/ftllmd/admin.sock.\n";
}

// Where the admin socket is, in the order the usage text gives. A config file that does not parse is
// reported and skipped: status should still work with a broken config.
std::string resolve_socket(const std::string& flag, const std::string& config_flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("FTLLMD_SOCKET"); env && *env) return env;
  std::string path = config_flag.empty() ? FTLLM_DEFAULT_CONFIG : config_flag;
  ftllm::daemon::Config defaults;
  if (!config_flag.empty() || std::filesystem::exists(path)) {
    auto result = ftllm::daemon::load_config_file(path);
    if (result.config) return result.config->admin_socket;
    std::fprintf(stderr, "ftllmctl: warning: %s; using %s\n", result.error->to_string().c_str(),
                 defaults.admin_socket.c_str());
  }
  return defaults.admin_socket;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ftllm::client;
  std::string socket_flag, config_flag;
  bool json = false;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!rest.empty()) {
      rest.push_back(arg);  // everything after the command belongs to it
    } else if (arg == "--socket" || arg == "--config") {
      if (i + 1 >= argc) return std::fprintf(stderr, "ftllmctl: %s needs a value\n", arg.c_str()), 2;
      (arg == "--socket" ? socket_flag : config_flag) = argv[++i];
    } else if (arg.starts_with("--socket=")) {
      socket_flag = arg.substr(9);
    } else if (arg.starts_with("--config=")) {
      config_flag = arg.substr(9);
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "-h" || arg == "--help") {
      return std::fputs(usage().c_str(), stdout), 0;
    } else if (arg == "--version") {
      return std::puts("ftllmctl " FTLLM_VERSION), 0;
    } else if (arg.starts_with("-")) {
      return std::fprintf(stderr, "ftllmctl: unknown option %s\n\n%s", arg.c_str(), usage().c_str()), 2;
    } else {
      rest.push_back(arg);
    }
  }
  if (rest.empty()) return std::fprintf(stderr, "ftllmctl: no command given\n\n%s", usage().c_str()), 2;

  // Options after the command: --json is common to all commands.
  std::vector<std::string> args;
  for (size_t i = 1; i < rest.size(); ++i) {
    if (rest[i] == "--json")
      json = true;
    else
      args.push_back(rest[i]);
  }

  const auto& commands = registered_commands();
  auto it = std::find_if(commands.begin(), commands.end(), [&](const Command& c) { return rest[0] == c.name; });
  if (it == commands.end())
    return std::fprintf(stderr, "ftllmctl: unknown command \"%s\"\n\n%s", rest[0].c_str(), usage().c_str()), 2;

  CommandContext ctx{AdminClient(resolve_socket(socket_flag, config_flag)), json};
  return it->run(ctx, args);
}
