// How a model is loaded, and the one description of every load option. ftllmd's command line, its
// [[model]] tables, the admin API's JSON, `ftllmctl load`, `ftllm-export` and their usage texts all read
// load_options(): adding an option is a field of ModelLoadOptions and a row of that table.
// Header-only and std-only, so ftllmctl reads the table without linking the engine.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ftllm {

// How far a load has come: phase ("reading", "converting", "binding", "ready") and bytes of the weight
// files handled out of their total. Called on the loading thread.
using LoadProgress = std::function<void(const std::string& phase, uint64_t done, uint64_t total)>;

struct ModelLoadOptions {
  std::string path;            // a Hugging Face directory, a .gguf file, or "org/name" in the Hugging Face cache
  std::string name;            // defaults to the directory's name
  int threads = 0;             // 0: one per core
  int64_t context_length = 0;  // 0: the model's own maximum, capped at kDefaultContextCap
  // Sequences decoded at once; the KV cache holds this many at the full context. 0 (the default): the
  // KV cache holds kDefaultKvSequences at the full context, and as many run as it has room for
  // (Runner's rule).
  int32_t max_sequences = 0;
  int32_t kv_sequences() const { return max_sequences ? max_sequences : kDefaultKvSequences; }
  // LoRA adapters (ftllmctl load-adapter): how many different ones may run in one batch; requests for
  // another wait until a running one's requests end.
  int32_t max_loras = 8;
  std::string prefix_cache = "on";  // "off": no KV pages are kept for reuse between requests
  // How the KV cache stores keys and values: f16 (the default: half of f32's memory, and f16's 10-bit
  // mantissa keeps attention within 1e-3 of f32, where bf16 gives 1e-2), bf16, f32 (exact: the fixture
  // tests' setting), q8_0 or fp8 (a quarter of f32's memory).
  std::string kv_dtype = "f16";
  std::string chat_template;   // a file that overrides the model's own template (--chat_template)
  std::string cache_dir;       // where to find "org/name" models (default $HF_HOME/hub), offline
  std::string device = "cpu";  // fastllm's device syntax (runner/placement.h)
  // Compute dtypes (fastllm's --dtype, --moe_dtype, --dtype_config): "auto" keeps what the files store.
  std::string dtype = "auto", moe_dtype = "auto";
  std::string dtype_config;    // a JSON file of {"key": REGEX, "dtype": NAME} rules
  std::string kernels = "auto";  // "scalar" (the reference kernels), "avx2", "avx512vnni", "avx512amx", or the fastest the CPU runs
  // Mixture-of-experts models (fastllm's --moe_experts, --moe_device, --cuda_se): routed experts per
  // token (0: the model's num_experts_per_tok); where the experts run ("cpu", "numa": their rows split
  // over the NUMA nodes, or "cuda"); whether shared experts stay on the GPU (needs a CUDA device).
  int moe_experts = 0;
  std::string moe_device = "cpu";
  bool cuda_se = false;
  // The share of a GPU's free memory a load may take for its layers' weights and KV pages; the KV cache
  // shrinks (fewer sequences at full context) to fit it, down to one sequence.
  double gpu_memory = 0.9;
  LoadProgress progress;       // optional

  // A model's own context is capped here unless --ctx asks for more: the KV cache is sized for it.
  static constexpr int64_t kDefaultContextCap = 8192;
  static constexpr int32_t kDefaultKvSequences = 8;
};

// Where an option may be given.
enum LoadSurface : unsigned {
  kCommandLine = 1,  // ftllmd MODEL --flag
  kConfigFile = 2,   // [[model]] key = value
  kAdmin = 4,        // POST /admin/v1/models {"key": value}, and so ftllmctl load --flag
  kExport = 8,       // ftllm-export --flag
  kServing = kCommandLine | kConfigFile | kAdmin,
};

struct LoadOption {
  enum class Type { String, Integer, Number, Flag };
  static constexpr double kUnbounded = 9.2e18;  // an Integer's max when only its minimum matters
  using Field = std::variant<std::string ModelLoadOptions::*, int ModelLoadOptions::*, int64_t ModelLoadOptions::*,
                             double ModelLoadOptions::*, bool ModelLoadOptions::*>;
  const char* key;         // the JSON and TOML key
  const char* flag;        // the command-line flag
  const char* short_flag;  // "-t", or "" for none
  const char* value_name;  // in the usage synopsis: --ctx TOKENS
  const char* what;        // what a value must be, for errors: "a positive number of tokens"
  double min = 0, max = 0; // the range of an Integer, [min, max], or of a Number, (min, max]
  unsigned surfaces = kServing;
  Field field;

  // The value's type, as the field it sets has it.
  Type type() const {
    static constexpr Type by_field[] = {Type::String, Type::Integer, Type::Integer, Type::Number, Type::Flag};
    return by_field[field.index()];
  }

  std::string flags() const { return *short_flag ? std::string(short_flag) + "/" + flag : std::string(flag); }
  // A command line's refusal of `value`, from what set_text said was wrong: "-t/--threads needs ..., not 0".
  std::string refusal(const std::string& why, const std::string& value) const { return flags() + " needs " + why + ", not " + value; }
  std::string synopsis() const {  // "[-t N]", "[--cuda_se]"
    const std::string f = *short_flag ? short_flag : flag;
    return "[" + f + (type() == Type::Flag ? std::string() : std::string(" ") + value_name) + "]";
  }

  // Each setter stores a value of the option's type and returns what is wrong with it (empty when taken).
  std::string set(ModelLoadOptions& o, std::string_view text) const {
    if (type() != Type::String) return what;
    o.*std::get<std::string ModelLoadOptions::*>(field) = std::string(text);
    return {};
  }
  std::string set(ModelLoadOptions& o, int64_t v) const {
    if (type() == Type::Number) return set(o, double(v));
    if (type() != Type::Integer || double(v) < min || double(v) > max) return what;
    if (auto* f = std::get_if<int ModelLoadOptions::*>(&field)) o.**f = int(v);
    else o.*std::get<int64_t ModelLoadOptions::*>(field) = v;
    return {};
  }
  std::string set(ModelLoadOptions& o, double v) const {
    if (type() != Type::Number || !(v > min && v <= max)) return what;
    o.*std::get<double ModelLoadOptions::*>(field) = v;
    return {};
  }
  std::string set(ModelLoadOptions& o, bool v) const {
    if (type() != Type::Flag) return what;
    o.*std::get<bool ModelLoadOptions::*>(field) = v;
    return {};
  }
  // Command-line text as an integer or a number: the whole text, or nothing.
  static std::optional<int64_t> parse_integer(const std::string& text) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end || errno || text.find_first_not_of("-0123456789") != std::string::npos) return std::nullopt;
    return int64_t(v);
  }
  static std::optional<double> parse_number(const std::string& text) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end == text.c_str() || *end) return std::nullopt;
    return v;
  }
  // A value as typed on a command line ("4", "0.75", "int4g"); a flag takes "true" or "false".
  std::string set_text(ModelLoadOptions& o, const std::string& text) const {
    switch (type()) {
      case Type::String: return set(o, std::string_view(text));
      case Type::Flag: return text == "true" || text == "false" ? set(o, text == "true") : what;
      case Type::Integer: {
        const auto v = parse_integer(text);
        return v ? set(o, *v) : what;
      }
      case Type::Number: {
        const auto v = parse_number(text);
        return v ? set(o, *v) : what;
      }
    }
    return what;
  }
};

// Every load option, in the order usage texts list them.
inline const std::vector<LoadOption>& load_options() {
  using O = ModelLoadOptions;
  static const std::vector<LoadOption> table = {
      {"name", "--name", "", "NAME", "a name", 0, 0, kServing, &O::name},
      {"threads", "--threads", "-t", "N", "a positive number", 1, LoadOption::kUnbounded, kServing | kExport, &O::threads},
      {"context_length", "--ctx", "", "TOKENS", "a positive number of tokens", 1, LoadOption::kUnbounded, kServing, &O::context_length},
      {"max_sequences", "--max_sequences", "", "N", "a number from 0 (sized from the KV cache) to 1024", 0, 1024, kServing, &O::max_sequences},
      {"max_loras", "--max_loras", "", "N", "a number of adapters from 1 to 256", 1, 256, kServing, &O::max_loras},
      {"prefix_cache", "--prefix_cache", "", "on|off", "on or off", 0, 0, kServing, &O::prefix_cache},
      {"kv_dtype", "--kv_dtype", "", "f16|bf16|f32|q8_0|fp8", "a KV cache dtype", 0, 0, kServing, &O::kv_dtype},
      {"chat_template", "--chat_template", "", "FILE", "a file", 0, 0, kServing | kExport, &O::chat_template},
      {"cache_dir", "--cache_dir", "", "DIR", "a directory", 0, 0, kCommandLine | kAdmin | kExport, &O::cache_dir},
      {"dtype", "--dtype", "", "DTYPE", "a dtype", 0, 0, kServing | kExport, &O::dtype},
      {"moe_dtype", "--moe_dtype", "", "DTYPE", "a dtype", 0, 0, kServing | kExport, &O::moe_dtype},
      {"dtype_config", "--dtype_config", "", "FILE", "a file", 0, 0, kServing | kExport, &O::dtype_config},
      {"device", "--device", "", "SPEC", "a device", 0, 0, kServing, &O::device},
      {"gpu_memory", "--gpu_memory", "", "F", "a share of the GPU's free memory in (0, 1]", 0, 1, kServing,
       &O::gpu_memory},
      {"kernels", "--kernels", "", "auto|avx512amx|avx512vnni|avx2|scalar", "a kernel set", 0, 0, kCommandLine | kAdmin,
       &O::kernels},
      {"moe_device", "--moe_device", "", "cpu|numa|cuda", "a device", 0, 0, kServing, &O::moe_device},
      {"moe_experts", "--moe_experts", "", "N", "a positive number of experts", 1, LoadOption::kUnbounded, kServing,
       &O::moe_experts},
      {"cuda_se", "--cuda_se", "", "", "true or false", 0, 0, kServing, &O::cuda_se},
  };
  return table;
}

// The option a key names (nullptr when none does).
inline const LoadOption* load_option_by_key(std::string_view key) {
  for (const LoadOption& o : load_options())
    if (key == o.key) return &o;
  return nullptr;
}

// The option a command-line argument names, by its flag or short flag (nullptr when none does).
inline const LoadOption* load_option_by_flag(std::string_view flag, unsigned surface) {
  for (const LoadOption& o : load_options())
    if ((o.surfaces & surface) && (flag == o.flag || (*o.short_flag && flag == o.short_flag))) return &o;
  return nullptr;
}

// "[--name NAME] [-t N] ..." for the options a surface takes, wrapped to `width` with `indent`.
inline std::string load_options_synopsis(unsigned surface, size_t indent, size_t width = 110) {
  std::string out, line(indent, ' ');
  for (const LoadOption& o : load_options()) {
    if (!(o.surfaces & surface)) continue;
    const std::string s = o.synopsis();
    if (line.size() + 1 + s.size() > width && line.size() > indent) out += line + "\n", line.assign(indent, ' ');
    line += (line.size() > indent ? " " : "") + s;
  }
  return out + line;
}

}  // namespace ftllm
