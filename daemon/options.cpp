#include "options.h"

#include <cstdlib>
#include <map>

namespace ftllm::daemon {

const char* usage() {
  return "usage: ftllmd [MODEL ...] [--name NAME] [-t N] [--ctx TOKENS] [--max_sequences N] [--chat_template FILE]\n"
         "              [--dtype DTYPE] [--moe_dtype DTYPE] [--dtype_config FILE] [--device DEVICE] [--gpu_memory F]\n"
         "              [--kernels auto|avx512vnni|avx2|scalar] [--moe_device cpu|numa|cuda] [--moe_experts N] [--cuda_se]\n"
         "              [--config FILE] [--listen HOST:PORT] [--admin-socket PATH] [--api_key KEY]\n"
         "              [--log-level error|warn|info|debug] [--hide_input]\n"
         "       ftllmd --check-config FILE\n"
         "       ftllmd --help | --version\n"
         "\n"
         "Serves the OpenAI API on --listen (default 127.0.0.1:8080) and the admin API on the Unix socket\n"
         "--admin-socket (default /run/ftllmd/admin.sock), used by ftllmctl. Options override the config file.\n"
         "MODEL is a Hugging Face model directory or a .gguf file; it is loaded before the daemon reports ready.\n"
         "DTYPE converts weights while loading: float32, float16, bfloat16, int8, int4, int4g (group 128),\n"
         "int4g32/64/256, fp8; auto (the default) computes in the dtype the files store.\n"
         "--kernels scalar computes everything in float32 with the reference kernels (exact, slow).\n"
         "DEVICE: cpu, numa, numa:N, cuda, cuda:N, or a layer split such as \"{'cuda:0':3,'cpu':1}\" (cudapp=N\n"
         "splits evenly over N GPUs). --moe_device puts a mixture of experts' routed experts apart (cpu: the\n"
         "dense part on the GPU, the experts in host memory); --cuda_se keeps its shared experts on the GPU.\n";
}

OptionsResult parse_options(const std::vector<std::string>& args) {
  OptionsResult result;
  Options& o = result.options;
  const std::map<std::string, std::optional<std::string> Options::*> valued = {
      {"--config", &Options::config_path},   {"--check-config", &Options::check_config},
      {"--listen", &Options::listen},        {"--admin-socket", &Options::admin_socket},
      {"--api_key", &Options::api_key},      {"--api-key", &Options::api_key},
      {"--log-level", &Options::log_level},  {"--name", &Options::model_name},
      {"-t", &Options::threads},             {"--threads", &Options::threads},
      {"--chat_template", &Options::chat_template}, {"--ctx", &Options::context},
      {"--max_sequences", &Options::max_sequences}, {"--dtype", &Options::dtype},
      {"--gpu_memory", &Options::gpu_memory},
      {"--device", &Options::device},        {"--cache_dir", &Options::cache_dir},
      {"--moe_dtype", &Options::moe_dtype},  {"--dtype_config", &Options::dtype_config},
      {"--kernels", &Options::kernels},      {"--moe_device", &Options::moe_device},
      {"--moe_experts", &Options::moe_experts},
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
    if (arg == "--cuda_se") {
      o.cuda_se = true;
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
    auto it = valued.find(arg);
    if (it == valued.end()) {
      result.error = "unknown option " + arg;
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

namespace ftllm::daemon {

namespace {
bool positive_number(const std::string& text, int64_t& out) {
  try {
    size_t used = 0;
    out = std::stoll(text, &used);
    return used == text.size() && out > 0;
  } catch (...) {
    return false;
  }
}
}  // namespace

std::string model_load_options(const Options& o, const Config& config, std::vector<ModelLoadOptions>& out) {
  // The config file's [[model]] entries first, then the command line's.
  for (const ModelEntry& e : config.models) {
    ModelLoadOptions& m = out.emplace_back();
    m.path = e.path;
    m.name = e.name;
    m.threads = e.threads;
    m.context_length = e.context_length;
    m.max_sequences = e.max_sequences;
    m.chat_template = e.chat_template;
    m.dtype = e.dtype;
    m.moe_dtype = e.moe_dtype;
    m.dtype_config = e.dtype_config;
    m.device = e.device;
    m.moe_device = e.moe_device;
    m.moe_experts = e.moe_experts;
    m.cuda_se = e.cuda_se;
    m.gpu_memory = e.gpu_memory;
  }
  if (o.model_name && o.models.size() != 1) return "--name needs exactly one MODEL";
  for (const std::string& path : o.models) {
    ModelLoadOptions m;
    m.path = path;
    if (o.model_name) m.name = *o.model_name;
    int64_t n = 0;
    if (o.threads) {
      if (!positive_number(*o.threads, n)) return "-t/--threads needs a positive number, not " + *o.threads;
      m.threads = int(n);
    }
    if (o.context) {
      if (!positive_number(*o.context, n)) return "--ctx needs a positive number of tokens, not " + *o.context;
      m.context_length = n;
    }
    if (o.max_sequences) {
      if (!positive_number(*o.max_sequences, n) || n > 1024) return "--max_sequences needs a number from 1 to 1024";
      m.max_sequences = int32_t(n);
    }
    if (o.gpu_memory) {
      char* end = nullptr;
      const double f = std::strtod(o.gpu_memory->c_str(), &end);
      if (end == o.gpu_memory->c_str() || *end || !(f > 0 && f <= 1))
        return "--gpu_memory needs a share of the GPU's free memory in (0, 1], not " + *o.gpu_memory;
      m.gpu_memory = f;
    }
    if (o.chat_template) m.chat_template = *o.chat_template;
    if (o.cache_dir) m.cache_dir = *o.cache_dir;
    if (o.device) m.device = *o.device;
    if (o.dtype) m.dtype = *o.dtype;
    if (o.moe_dtype) m.moe_dtype = *o.moe_dtype;
    if (o.dtype_config) m.dtype_config = *o.dtype_config;
    if (o.kernels) m.kernels = *o.kernels;
    if (o.moe_device) m.moe_device = *o.moe_device;
    if (o.moe_experts) {
      if (!positive_number(*o.moe_experts, n)) return "--moe_experts needs a positive number of experts, not " + *o.moe_experts;
      m.moe_experts = int(n);
    }
    m.cuda_se = o.cuda_se;
    out.push_back(m);
  }
  return {};
}

}  // namespace ftllm::daemon
