// ftllmctl export: converts a model once, here (no daemon needed), into a directory ftllmd then loads
// without converting again. It runs the engine in this process: -t sets the quantizing threads.
#include <cstdio>
#include <map>

#include "commands.h"
#include "engine.h"

namespace ftllm::client {

int cmd_export(const CommandContext&, const std::vector<std::string>& args) {
  ModelLoadOptions o;
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::map<std::string, std::string*> keys = {
        {"-o", &out},          {"--output", &out},        {"--dtype", &o.dtype}, {"--moe_dtype", &o.moe_dtype},
        {"--dtype_config", &o.dtype_config}, {"--chat_template", &o.chat_template}, {"--cache_dir", &o.cache_dir}};
    if (auto k = keys.find(a); k != keys.end()) {
      if (i + 1 >= args.size()) return std::fprintf(stderr, "ftllmctl: %s needs a value\n", a.c_str()), 2;
      *k->second = args[++i];
    } else if (a == "-t" || a == "--threads") {
      if (i + 1 >= args.size() || args[i + 1].find_first_not_of("0123456789") != std::string::npos || args[i + 1].empty())
        return std::fprintf(stderr, "ftllmctl: %s needs a number of threads\n", a.c_str()), 2;
      o.threads = std::stoi(args[++i]);
    } else if (a.starts_with("-")) {
      return std::fprintf(stderr, "ftllmctl: export: unknown option %s\n", a.c_str()), 2;
    } else if (o.path.empty()) {
      o.path = a;
    } else {
      return std::fprintf(stderr, "ftllmctl: export takes one MODEL\n"), 2;
    }
  }
  if (o.path.empty() || out.empty())
    return std::fprintf(stderr, "usage: ftllmctl export MODEL -o DIR [--dtype D] [--moe_dtype D] [--dtype_config F] [-t N]\n"), 2;
  o.context_length = 16;  // only the weights are wanted: keep the KV cache small
  o.max_sequences = 1;
  ExportResult r;
  Status s = export_model(o, out, r);
  if (!s.ok) return std::fprintf(stderr, "ftllmctl: cannot export %s: %s\n", o.path.c_str(), s.message.c_str()), 1;
  std::printf("exported %s to %s: %.1f MB (%s), loaded and converted in %.2f s, written in %.2f s\n", o.path.c_str(),
              out.c_str(), double(r.bytes) / 1e6, r.dtypes.c_str(), r.load_seconds, r.write_seconds);
  if (!r.notes.empty()) std::printf("note: %s\n", r.notes.c_str());
  return 0;
}

}  // namespace ftllm::client
