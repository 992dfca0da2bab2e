// ftllmd's configuration: the TOML file (config/ftllmd.conf documents every key) and its validation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "http/limits.h"
#include "load_options.h"

namespace ftllm::daemon {

enum class LogLevel { Error, Warn, Info, Debug };

struct ListenAddress {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::string to_string() const;  // "127.0.0.1:8080", "[::1]:8080"
};

struct Config {
  ListenAddress listen;
  std::string api_key;
  size_t max_header_bytes = http::kDefaultMaxHeaderBytes;
  size_t max_body_bytes = http::kDefaultMaxBodyBytes;
  size_t max_connections = 1024;
  size_t max_waiting = 256;  // requests queued per model before new ones get 503
  size_t idle_timeout_seconds = 75;     // a keep-alive connection with nothing to do is closed
  size_t request_timeout_seconds = 30;  // from its first byte (+1 s per 64 KB of body), else 408
  size_t shutdown_timeout_seconds = 30; // on SIGTERM, running streams get this long to finish
  bool public_metrics = false;          // /metrics without the API key (when one is set)
  bool webui = true;                    // the chat page at GET / (--webui off)
  // Browser pages on these origins ("https://chat.example.com", or "*") may call the API (CORS); none by default.
  std::vector<std::string> cors_origins;

  std::string admin_socket = "/run/ftllmd/admin.sock";
  std::string admin_socket_group = "ftllm";
  uint32_t admin_socket_mode = 0660;

  LogLevel log_level = LogLevel::Info;
  std::vector<ModelLoadOptions> models;  // [[model]]: path and the load options this file takes
  // Where each [[model]]'s values are: its key -> (line, column), for errors found after parsing.
  std::vector<std::map<std::string, std::pair<uint32_t, uint32_t>>> model_positions;
  std::string source;  // the file's name, as errors give it
};

// Where and why a configuration is wrong. line/column are 1-based; 0 when the error has no position
// (an unreadable file).
struct ConfigError {
  std::string source;
  uint32_t line = 0;
  uint32_t column = 0;
  std::string reason;
  std::string to_string() const;  // "FILE:LINE:COL: reason", the form editors jump to
};

struct ConfigResult {
  std::optional<Config> config;
  std::optional<ConfigError> error;
};

ConfigResult parse_config(std::string_view toml_text, std::string source_name);
ConfigResult load_config_file(const std::string& path);

// `ftllmd --print-config`: the configuration in effect as a config file that reads back to it (the API
// key itself left out, saying whether one is set), with the preloaded models as [[model]] entries: the
// values set, and as comments the defaults and what only the command line sets.
std::string config_toml(const Config& config, const std::vector<ModelLoadOptions>& models, const std::string& source);

// "HOST:PORT" or "[IPV6]:PORT"; nullopt with `why` set when malformed.
std::optional<ListenAddress> parse_listen_address(std::string_view text, std::string& why);
std::optional<LogLevel> parse_log_level(std::string_view text);

}  // namespace ftllm::daemon
