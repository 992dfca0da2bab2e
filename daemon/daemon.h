// The running daemon: the loop, both listeners, signals and systemd notification.
#pragma once

#include <optional>
#include <string>

#include "config.h"
#include "options.h"

namespace ftllm::daemon {

// Reads the config the options point at (or the default file, or built-in defaults when no default
// file is installed) and applies the overrides. On failure returns false with `error` set.
bool resolve_config(const Options& options, Config& config, std::string& error);
// Every [[model]] value checked as a load would check it, before anything loads: the first one refused,
// at its file, line and column ("FILE:LINE:COL: model.dtype: ..."), or nullopt.
std::optional<ConfigError> check_config_models(const Config& config);

// Serves until SIGTERM or SIGINT. Returns the process exit status.
int run_daemon(const Options& options, Config config);

}  // namespace ftllm::daemon
