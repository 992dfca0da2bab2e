// ftllmd: keeps models resident and serves them. See README.md and `ftllmd --help`.
#include <cstdio>
#include <string>
#include <vector>

#include "daemon.h"
#include "ftllm_version.h"

int main(int argc, char** argv) {
  using namespace ftllm::daemon;
  OptionsResult parsed = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "ftllmd: %s\n\n%s", parsed.error.c_str(), usage().c_str());
    return 2;
  }
  const Options& options = parsed.options;
  if (options.help) return std::fputs(usage().c_str(), stdout), 0;
  if (options.version) return std::puts("ftllmd " FTLLM_VERSION), 0;

  if (options.check_config) {
    ConfigResult r = load_config_file(*options.check_config);
    if (r.config) r.error = check_config_models(*r.config);  // values too, as the daemon would find them at start
    if (r.error) return std::fprintf(stderr, "%s\n", r.error->to_string().c_str()), 1;
    std::printf("%s: ok\n", options.check_config->c_str());
    return 0;
  }

  Config config;
  std::string error;
  if (!resolve_config(options, config, error)) {
    std::fprintf(stderr, "ftllmd: %s\n", error.c_str());
    return 1;
  }
  if (options.print_config) {
    std::vector<ftllm::ModelLoadOptions> models;
    if (std::string why = model_load_options(options, config, models); !why.empty())
      return std::fprintf(stderr, "ftllmd: %s\n", why.c_str()), 1;
    std::fputs(config_toml(config, models, config.source.empty() ? "built-in defaults" : config.source).c_str(), stdout);
    return 0;
  }
  return run_daemon(options, config);
}
