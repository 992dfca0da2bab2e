#include "options.h"

#include <cstdlib>
#include <map>

namespace ftllm::daemon {

const std::string& usage() {
  static const std::string text =
      "usage: ftllmd [MODEL ...]\n" + load_options_synopsis(kCommandLine, 14) +
      "\n"
      "              [--config FILE] [--listen HOST:PORT] [--admin-socket PATH] [--api_key KEY]\n"
      "              [--log-level error|warn|info|debug] [--hide_input] [--webui on|off]\n"
      "       ftllmd --check-config FILE\n"
      "       ftllmd [--config FILE] [options and MODELs as above] --print-config\n"
      "       ftllmd --help | --version\n"
      "\n"
      "Serves the OpenAI API on --listen (default 127.0.0.1:8080) and the admin API on the Unix socket\n"
      "--admin-socket (default /run/ftllmd/admin.sock), used by ftllmctl. Options override the config file.\n"
      "MODEL is a Hugging Face model directory or a .gguf file; it is loaded before the daemon reports ready.\n"
      "DTYPE converts weights while loading: float32, float16, bfloat16, int8, int4, int4g (group 128),\n"
      "int4g32/64/256, fp8; auto (the default) computes in the dtype the files store.\n"
      "--kernels scalar computes everything in float32 with the reference kernels (exact, slow).\n"
      "SPEC: cpu, numa, numa:N, cuda, cuda:N, or a layer split such as \"{'cuda:0':3,'cpu':1}\" (cudapp=N\n"
      "splits evenly over N GPUs). --moe_device puts a mixture of experts' routed experts apart (cpu: the\n"
      "dense part on the GPU, the experts in host memory); --cuda_se keeps its shared experts on the GPU.\n";
  return text;
}

OptionsResult parse_options(const std::vector<std::string>& args) {
  OptionsResult result;
  Options& o = result.options;
  const std::map<std::string, std::optional<std::string> Options::*> valued = {
      {"--config", &Options::config_path},   {"--check-config", &Options::check_config},
      {"--listen", &Options::listen},        {"--admin-socket", &Options::admin_socket},
      {"--api_key", &Options::api_key},      {"--api-key", &Options::api_key},
      {"--log-level", &Options::log_level},  {"--webui", &Options::webui},
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
    if (arg == "--hide_input") {
      o.hide_input = true;
      continue;
    }
    if (arg == "--print-config") {
      o.print_config = true;
      continue;
    }
    if (!arg.starts_with("-")) {
      o.models.push_back(arg);
      continue;
    }
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    const LoadOption* load = load_option_by_flag(arg, kCommandLine);
    if (load && load->type() == LoadOption::Type::Flag) {
      o.load.emplace_back(load, inline_value.value_or("true"));
      continue;
    }
    auto it = valued.find(arg);
    if (!load && it == valued.end()) {
      result.error = "unknown option " + arg;
      return result;
    }
    if (!inline_value && i + 1 >= args.size()) {
      result.error = "option " + arg + " needs a value";
      return result;
    }
    std::string value = inline_value ? *inline_value : args[++i];
    if (load) o.load.emplace_back(load, std::move(value));
    else o.*(it->second) = std::move(value);
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
  if (o.webui) {
    if (*o.webui != "on" && *o.webui != "off") return "--webui must be on or off";
    config.webui = *o.webui == "on";
  }
  if (o.log_level) {
    auto level = parse_log_level(*o.log_level);
    if (!level) return "--log-level must be one of error, warn, info, debug";
    config.log_level = *level;
  }
  return {};
}

}  // namespace ftllm::daemon

namespace ftllm::daemon {

std::string model_load_options(const Options& o, const Config& config, std::vector<ModelLoadOptions>& out) {
  // The config file's [[model]] entries first, then the command line's.
  out.insert(out.end(), config.models.begin(), config.models.end());
  for (const auto& [option, value] : o.load)
    if (option->key == std::string_view("name") && o.models.size() != 1) return "--name needs exactly one MODEL";
  for (const std::string& path : o.models) {
    ModelLoadOptions m;
    m.path = path;
    for (const auto& [option, value] : o.load) {
      if (std::string why = option->set_text(m, value); !why.empty())
        return option->refusal(why, value);
    }
    out.push_back(m);
  }
  return {};
}

}  // namespace ftllm::daemon
