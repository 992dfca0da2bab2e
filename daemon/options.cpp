#include "options.h"

#include <map>

namespace ftllm::daemon {

const char* usage() {
  return "usage: ftllmd [--config FILE] [--listen HOST:PORT] [--admin-socket PATH] [--api_key KEY]\n"
         "              [--log-level error|warn|info|debug]\n"
         "       ftllmd --check-config FILE\n"
         "       ftllmd --help | --version\n"
         "\n"
         "Serves the OpenAI API on --listen (default 127.0.0.1:8080) and the admin API on the Unix socket\n"
         "--admin-socket (default /run/ftllmd/admin.sock), used by ftllmctl. Options override the config file.\n";
}

OptionsResult parse_options(const std::vector<std::string>& args) {
  OptionsResult result;
  Options& o = result.options;
  const std::map<std::string, std::optional<std::string> Options::*> valued = {
      {"--config", &Options::config_path},   {"--check-config", &Options::check_config},
      {"--listen", &Options::listen},        {"--admin-socket", &Options::admin_socket},
      {"--api_key", &Options::api_key},      {"--api-key", &Options::api_key},
      {"--log-level", &Options::log_level},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg == "--version") {
      o.version = true;
      continue;
    }
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    auto it = valued.find(arg);
    if (it == valued.end()) {
      result.error = arg.starts_with("-") ? "unknown option " + arg : "unexpected argument \"" + arg + "\"";
      return result;
    }
    if (inline_value) {
      o.*(it->second) = *inline_value;
    } else if (i + 1 < args.size()) {
      o.*(it->second) = args[++i];
    } else {
      result.error = "option " + arg + " needs a value";
      return result;
    }
  }
  return result;
}

std::string apply_overrides(const Options& o, Config& config) {
  if (o.listen) {
    std::string why;
    auto addr = parse_listen_address(*o.listen, why);
    if (!addr) return "--listen " + *o.listen + ": " + why;
    config.listen = *addr;
  }
  if (o.admin_socket) {
    if (o.admin_socket->empty() || o.admin_socket->size() >= 108)
      return "--admin-socket must be a path of 1 to 107 bytes";
    config.admin_socket = *o.admin_socket;
  }
  if (o.api_key) config.api_key = *o.api_key;
  if (o.log_level) {
    auto level = parse_log_level(*o.log_level);
    if (!level) return "--log-level must be one of error, warn, info, debug";
    config.log_level = *level;
  }
  return {};
}

}  // namespace ftllm::daemon
