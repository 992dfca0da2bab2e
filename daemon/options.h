// ftllmd's command line. Options given here override the config file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config.h"

namespace ftllm::daemon {

struct Options {
  std::optional<std::string> config_path;   // --config FILE
  std::optional<std::string> check_config;  // --check-config FILE: validate and exit
  std::optional<std::string> listen;        // --listen HOST:PORT
  std::optional<std::string> admin_socket;  // --admin-socket PATH
  std::optional<std::string> api_key;       // --api_key KEY
  std::optional<std::string> log_level;     // --log-level LEVEL
  bool help = false;
  bool version = false;
};

struct OptionsResult {
  Options options;
  std::string error;  // non-empty: what was wrong, for the user
};

OptionsResult parse_options(const std::vector<std::string>& args);

// Applies the command-line overrides to a config; returns what was wrong with one, or empty.
std::string apply_overrides(const Options& options, Config& config);

const char* usage();

}  // namespace ftllm::daemon
