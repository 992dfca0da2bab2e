// ftllmd's command line. Options given here override the config file.
#pragma once

#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "../engine/engine.h"
#include "config.h"

namespace ftllm::daemon {

struct Options {
  std::optional<std::string> config_path;   // --config FILE
  std::optional<std::string> check_config;  // --check-config FILE: validate and exit
  std::optional<std::string> listen;        // --listen HOST:PORT
  std::optional<std::string> admin_socket;  // --admin-socket PATH
  std::optional<std::string> api_key;       // --api_key KEY
  std::optional<std::string> log_level;     // --log-level LEVEL
  std::optional<std::string> webui;         // --webui on|off: the chat page at GET /
  // Models to preload (as `ftllm server MODEL` does) and the load options given for them, by the load
  // option table's flags (engine/load_options.h); read and checked by model_load_options.
  std::vector<std::string> models;
  std::vector<std::pair<const LoadOption*, std::string>> load;
  bool hide_input = false;                   // --hide_input: prompts never reach the log
  bool print_config = false;                 // --print-config: show the configuration in effect and exit
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

// The engine load options for the preloaded models (the config's [[model]] entries, then the command
// line's); returns what was wrong, or empty.
std::string model_load_options(const Options& options, const Config& config, std::vector<ModelLoadOptions>& out);

const std::string& usage();

}  // namespace ftllm::daemon
