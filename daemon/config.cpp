#include "config.h"

#include <arpa/inet.h>

#include <algorithm>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
// toml++ asserts what some malformed files break, such as a table header "[;" (found by fuzzing; with
// NDEBUG it would assume it instead): here its assertions throw, and parse_config reports a malformed file.
#define TOML_ASSERT(expr) ((expr) ? void(0) : throw std::runtime_error("malformed TOML near here"))
#include <toml++/toml.h>

namespace ftllm::daemon {

std::string ListenAddress::to_string() const {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string ConfigError::to_string() const {
  std::string out = source;
  if (line) {
    out += ':';
    out += std::to_string(line);
    out += ':';
    out += std::to_string(column);
  }
  out += ": ";
  out += reason;
  return out;
}

std::optional<ListenAddress> parse_listen_address(std::string_view text, std::string& why) {
  std::string_view host, port;
  if (text.starts_with('[')) {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      why = "expected \"[IPV6]:PORT\", for example \"[::1]:8080\"";
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || text.find(':') != colon) {
      why = "expected \"HOST:PORT\", for example \"127.0.0.1:8080\"";
      return std::nullopt;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    why = "port \"" + std::string(port) + "\" is not a number from 0 to 65535";
    return std::nullopt;
  }
  std::string host_str(host);
  if (host_str == "localhost") host_str = "127.0.0.1";
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, host_str.c_str(), buf) != 1 && inet_pton(AF_INET6, host_str.c_str(), buf) != 1) {
    why = "host \"" + host_str + "\" is not an IPv4 or IPv6 address (use 0.0.0.0 or :: for all interfaces)";
    return std::nullopt;
  }
  return ListenAddress{host_str, uint16_t(value)};
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  if (text == "error") return LogLevel::Error;
  if (text == "warn") return LogLevel::Warn;
  if (text == "info") return LogLevel::Info;
  if (text == "debug") return LogLevel::Debug;
  return std::nullopt;
}

namespace {

// A key's handler returns an empty string when the value is accepted, else the reason.
using KeyHandler = std::function<std::string(const toml::node&, Config&)>;
using Section = std::map<std::string, KeyHandler, std::less<>>;

KeyHandler string_key(std::function<std::string(std::string_view, Config&)> apply) {
  return [apply](const toml::node& node, Config& cfg) -> std::string {
    auto value = node.value<std::string_view>();
    if (!node.is_string() || !value) return "must be a string";
    return apply(*value, cfg);
  };
}

KeyHandler bool_key(bool Config::*field) {
  return [=](const toml::node& node, Config& cfg) -> std::string {
    if (!node.is_boolean()) return "must be true or false";
    cfg.*field = *node.value<bool>();
    return {};
  };
}

KeyHandler size_key(size_t Config::*field, int64_t min, int64_t max) {
  return [=](const toml::node& node, Config& cfg) -> std::string {
    if (!node.is_integer()) return "must be an integer";
    int64_t v = *node.value<int64_t>();
    if (v < min || v > max)
      return "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", not " +
             std::to_string(v);
    cfg.*field = size_t(v);
    return {};
  };
}

// An origin as browsers send it: scheme://host[:port], nothing after; or "*".
std::string check_origin(std::string_view o) {
  if (o == "*") return {};
  const size_t scheme = o.find("://");
  const std::string_view rest = scheme == std::string_view::npos ? std::string_view() : o.substr(scheme + 3);
  if (scheme == std::string_view::npos || scheme == 0 || rest.empty() || rest.find('/') != std::string_view::npos ||
      o.find_first_of(" \t,") != std::string_view::npos)
    return "holds \"" + std::string(o) + "\"; an origin is scheme://host[:port] with no path, such as \"https://chat.example.com\", or \"*\"";
  return {};
}

const std::map<std::string, Section, std::less<>>& schema() {
  static const std::map<std::string, Section, std::less<>> sections = {
      {"server",
       {
           {"listen", string_key([](std::string_view v, Config& c) {
              std::string why;
              auto addr = parse_listen_address(v, why);
              if (addr) c.listen = *addr;
              return why;
            })},
           {"api_key", string_key([](std::string_view v, Config& c) {
              c.api_key = v;
              return std::string();
            })},
           {"max_header_bytes", size_key(&Config::max_header_bytes, 1024, 1 << 24)},
           {"max_body_bytes", size_key(&Config::max_body_bytes, 1024, int64_t(1) << 34)},
           {"max_connections", size_key(&Config::max_connections, 1, 1 << 20)},
           {"max_waiting", size_key(&Config::max_waiting, 1, 1 << 20)},
           {"idle_timeout_seconds", size_key(&Config::idle_timeout_seconds, 1, 86400)},
           {"request_timeout_seconds", size_key(&Config::request_timeout_seconds, 1, 3600)},
           {"shutdown_timeout_seconds", size_key(&Config::shutdown_timeout_seconds, 0, 86400)},
           {"public_metrics", bool_key(&Config::public_metrics)},
           {"webui", bool_key(&Config::webui)},
           {"cors_origins", [](const toml::node& node, Config& cfg) -> std::string {
              const toml::array* list = node.as_array();
              if (!list) return "must be an array of origins, such as [\"https://chat.example.com\"] or [\"*\"]";
              cfg.cors_origins.clear();
              for (const toml::node& item : *list) {
                const std::optional<std::string_view> origin = item.value<std::string_view>();
                if (!item.is_string() || !origin) return "must hold strings";
                if (std::string why = check_origin(*origin); !why.empty()) return why;
                cfg.cors_origins.emplace_back(*origin);
              }
              return {};
            }},
       }},
      {"admin",
       {
           {"socket", string_key([](std::string_view v, Config& c) -> std::string {
              if (v.empty() || v[0] != '/') return "must be an absolute path";
              if (v.size() >= 108) return "is longer than a Unix socket path may be (107 bytes)";
              c.admin_socket = v;
              return {};
            })},
           {"socket_group", string_key([](std::string_view v, Config& c) {
              c.admin_socket_group = v;
              return std::string();
            })},
           {"socket_mode", string_key([](std::string_view v, Config& c) -> std::string {
              unsigned mode = 0;
              auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), mode, 8);
              if (v.empty() || ec != std::errc() || end != v.data() + v.size() || mode > 0777)
                return "must be an octal permission string such as \"0660\"";
              c.admin_socket_mode = mode;
              return {};
            })},
       }},
      {"log",
       {
           {"level", string_key([](std::string_view v, Config& c) -> std::string {
              auto level = parse_log_level(v);
              if (!level) return "must be one of error, warn, info, debug";
              c.log_level = *level;
              return {};
            })},
       }},
  };
  return sections;
}

ConfigError error_at(const std::string& source, const toml::source_region& where, std::string reason) {
  return {source, where.begin.line, where.begin.column, std::move(reason)};
}

std::string known_keys(const Section& section) {
  std::string list;
  for (auto& [k, _] : section) list += (list.empty() ? "" : ", ") + k;
  return list;
}

// The [[model]] keys: path (required), and the load options the table lets the config file set.
std::string model_keys() {
  std::vector<std::string> keys{"path"};
  for (const LoadOption& o : load_options())
    if (o.surfaces & kConfigFile) keys.push_back(o.key);
  std::sort(keys.begin(), keys.end());
  std::string list;
  for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
  return list;
}

// A [[model]] value as its load option's type: why it does not fit, or empty.
std::string set_model_option(const LoadOption& option, const toml::node& value, ModelLoadOptions& m) {
  using T = LoadOption::Type;
  switch (option.type()) {
    case T::String:
      if (!value.is_string()) return "must be a string";
      return option.set(m, std::string_view(*value.value<std::string_view>()));
    case T::Flag:
      if (!value.is_boolean()) return "must be true or false";
      return option.set(m, *value.value<bool>());
    case T::Integer: {
      const std::string range = option.max >= LoadOption::kUnbounded ? "a positive integer"
                                                   : "an integer from " + std::to_string(int64_t(option.min)) + " to " +
                                                         std::to_string(int64_t(option.max));
      if (!value.is_integer() || !option.set(m, *value.value<int64_t>()).empty()) return "must be " + range;
      return {};
    }
    case T::Number:
      if (!(value.is_floating_point() || value.is_integer()) || !option.set(m, *value.value<double>()).empty())
        return std::string("must be ") + option.what;
      return {};
  }
  return "has a type this build cannot read";
}

std::string parse_models(const toml::node& node, Config& cfg, const std::string& source, ConfigError& error) {
  const toml::array* list = node.as_array();
  if (!list || !list->is_array_of_tables()) {
    error = error_at(source, node.source(), "model entries must be [[model]] tables");
    return error.reason;
  }
  for (const toml::node& entry : *list) {
    const toml::table& t = *entry.as_table();
    ModelLoadOptions m;
    std::map<std::string, std::pair<uint32_t, uint32_t>> at;
    for (auto&& [key, value] : t) {
      const std::string k(key.str());
      at[k] = {value.source().begin.line, value.source().begin.column};
      std::string why;
      if (k == "path") {
        if (!value.is_string()) why = "must be a string";
        else m.path = *value.value<std::string>();
      } else if (const LoadOption* option = load_option_by_key(k); option && (option->surfaces & kConfigFile)) {
        why = set_model_option(*option, value, m);
      } else {
        error = error_at(source, key.source(), "unknown key \"" + k + "\" in [[model]]; known keys: " + model_keys());
        return error.reason;
      }
      if (!why.empty()) {
        error = error_at(source, value.source(), "model." + k + " " + why);
        return error.reason;
      }
    }
    if (m.path.empty()) {
      error = error_at(source, t.source(), "a [[model]] needs a path");
      return error.reason;
    }
    cfg.models.push_back(m);
    cfg.model_positions.push_back(std::move(at));
  }
  return {};
}

}  // namespace

namespace {

// What toml++ (3.x, as Debian ships it) cannot read safely, found by fuzzing: a NUL byte (it asserts) and
// the characters its whitespace test (unicode_autogenerated.h) sends to an unreachable point, wherever it
// asks (not only outside strings): U+00A1..U+0499, U+2C5E..U+3057 and U+FB26..U+FEFE, bar U+3000. Their
// first position, and why; npos when none. A comment line without quotes is skipped: toml++ skips it whole.
std::pair<size_t, std::string> unparseable_byte(std::string_view t) {
  auto breaks_toml = [](uint32_t cp) {  // toml++'s is_non_ascii_horizontal_whitespace, where it has no answer
    if (cp <= 0xA0 || cp >= 0xFEFF || cp == 0x3000) return false;
    const uint32_t child = (cp - 0xA0) / 0x3FA;
    return child == 0 || child == 11 || child == 63;
  };
  for (size_t i = 0; i < t.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    if (c == '#') {
      const size_t eol = t.find('\n', i);
      const std::string_view line = t.substr(i, eol == std::string_view::npos ? std::string_view::npos : eol - i);
      if (line.find_first_of("\"'") == std::string_view::npos && line.find('\0') == std::string_view::npos) {
        i = eol == std::string_view::npos ? t.size() : eol;
        continue;
      }
    }
    if (c == 0) return {i, "a NUL byte; a config file is text"};
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0 && i + 1 < t.size()) cp = uint32_t(c & 0x1F) << 6 | (static_cast<unsigned char>(t[i + 1]) & 0x3F);
    else if ((c & 0xF0) == 0xE0 && i + 2 < t.size())
      cp = uint32_t(c & 0x0F) << 12 | uint32_t(static_cast<unsigned char>(t[i + 1]) & 0x3F) << 6 |
           (static_cast<unsigned char>(t[i + 2]) & 0x3F);
    if (breaks_toml(cp)) {
      char why[160];
      std::snprintf(why, sizeof why, "the character U+%04X, which the TOML parser cannot read safely; write it as \\u%04X in a string",
                    unsigned(cp), unsigned(cp));
      return {i, why};
    }
  }
  return {std::string_view::npos, {}};
}

}  // namespace

ConfigResult parse_config(std::string_view toml_text, std::string source_name) {
  ConfigError error;
  if (auto [at, why] = unparseable_byte(toml_text); !why.empty()) {
    const std::string_view before = toml_text.substr(0, at);
    const uint32_t line = uint32_t(std::count(before.begin(), before.end(), '\n') + 1);
    const size_t line_start = before.rfind('\n');
    const uint32_t column = uint32_t(at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1);
    return {std::nullopt, ConfigError{source_name, line, column, why}};
  }
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    return {std::nullopt, error_at(source_name, e.source(), std::string(e.description()))};
  } catch (const std::runtime_error& e) {
    return {std::nullopt, ConfigError{source_name, 0, 0, std::string(e.what()) + "; check the file's syntax (TOML)"}};
  }

  Config cfg;
  cfg.source = source_name;
  const auto& sections = schema();
  for (auto&& [section_name, section_node] : root) {
    if (section_name.str() == "model") {
      if (std::string why = parse_models(section_node, cfg, source_name, error); !why.empty()) return {std::nullopt, error};
      continue;
    }
    auto section = sections.find(section_name.str());
    if (section == sections.end()) {
      std::string names;
      for (auto& [k, _] : sections) names += (names.empty() ? "[" : ", [") + k + "]";
      return {std::nullopt, error_at(source_name, section_node.source(),
                                     "unknown section [" + std::string(section_name.str()) +
                                         "]; known sections: " + names)};
    }
    const toml::table* table = section_node.as_table();
    if (!table)
      return {std::nullopt, error_at(source_name, section_node.source(),
                                     "\"" + std::string(section_name.str()) + "\" must be a [section]")};
    for (auto&& [key, value] : *table) {
      auto handler = section->second.find(key.str());
      if (handler == section->second.end())
        return {std::nullopt,
                error_at(source_name, key.source(),
                         "unknown key \"" + std::string(key.str()) + "\" in [" + section->first +
                             "]; known keys: " + known_keys(section->second))};
      std::string why = handler->second(value, cfg);
      if (!why.empty())
        return {std::nullopt, error_at(source_name, value.source(),
                                       section->first + "." + std::string(key.str()) + " " + why)};
    }
  }
  return {cfg, std::nullopt};
}

ConfigResult load_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return {std::nullopt, ConfigError{path, 0, 0, std::string("cannot read the file: ") + std::strerror(errno)}};
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

namespace {

std::string toml_string(std::string_view v) {
  std::string out = "\"";
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') out += '\\', out += ch;
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", c);
      out += hex;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// A load option's value in `m` as TOML.
std::string option_value(const LoadOption& o, const ModelLoadOptions& m) {
  return std::visit(
      [&](auto field) -> std::string {
        const auto& v = m.*field;
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) return toml_string(v);
        else if constexpr (std::is_same_v<V, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<V, double>) {
          char text[32];
          const auto end = std::to_chars(text, text + sizeof text, v).ptr;  // the shortest that reads back
          return std::string(text, end);
        } else return std::to_string(v);
      },
      o.field);
}

}  // namespace

std::string config_toml(const Config& c, const std::vector<ModelLoadOptions>& models, const std::string& source) {
  static const char* const levels[] = {"error", "warn", "info", "debug"};
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", c.admin_socket_mode);
  std::string out = "# ftllmd's configuration in effect: " + source + ", with the command line's overrides\n\n[server]\n";
  out += "listen = " + toml_string(c.listen.to_string()) + "\n";
  out += c.api_key.empty() ? "# no api_key: the API is open\n" : "# api_key is set (not shown)\n";
  for (auto [key, value] : {std::pair{"max_header_bytes", c.max_header_bytes}, {"max_body_bytes", c.max_body_bytes},
                            {"max_connections", c.max_connections}, {"max_waiting", c.max_waiting},
                            {"idle_timeout_seconds", c.idle_timeout_seconds}, {"request_timeout_seconds", c.request_timeout_seconds},
                            {"shutdown_timeout_seconds", c.shutdown_timeout_seconds}})
    out += std::string(key) + " = " + std::to_string(value) + "\n";
  out += std::string("public_metrics = ") + (c.public_metrics ? "true" : "false") + "\n";
  out += std::string("webui = ") + (c.webui ? "true" : "false") + "\n";
  std::string origins;
  for (const std::string& o : c.cors_origins) origins += (origins.empty() ? "" : ", ") + toml_string(o);
  out += "cors_origins = [" + origins + "]\n";
  out += "\n[admin]\nsocket = " + toml_string(c.admin_socket) + "\nsocket_group = " + toml_string(c.admin_socket_group) +
         "\nsocket_mode = " + toml_string(mode) + "\n";
  out += std::string("\n[log]\nlevel = ") + toml_string(levels[int(c.log_level)]) + "\n";
  const ModelLoadOptions defaults;
  for (const ModelLoadOptions& m : models) {
    out += "\n[[model]]\npath = " + toml_string(m.path) + "\n";
    for (const LoadOption& o : load_options()) {
      const std::string value = option_value(o, m);
      const bool fixed = value != option_value(o, defaults);
      if (!(o.surfaces & kConfigFile)) {
        if (fixed) out += "# " + std::string(o.key) + " = " + value + " (command line only)\n";
      } else {
        out += (fixed ? "" : "# ") + std::string(o.key) + " = " + value + (fixed ? "\n" : " (default)\n");
      }
    }
  }
  return out;
}

}  // namespace ftllm::daemon
