// ftllm-export: converts a model once, here (no daemon needed), into a directory that ftllmd then loads
// without converting again. It runs the engine in this process (ftllmctl stays a thin client of the
// daemon): -t sets the quantizing threads. Its options are the load option table's kExport rows.
#include <cstdio>
#include <string>
#include <vector>

#include "engine.h"
#include "ftllm_version.h"

using namespace ftllm;

int main(int argc, char** argv) {
  const std::string usage = "usage: ftllm-export MODEL -o DIR\n" + load_options_synopsis(kExport, 7) +
                            "\n\nConverts MODEL (a Hugging Face directory, a .gguf file or org/name in the Hugging Face cache)\n"
                            "as --dtype and --moe_dtype say, and writes it to DIR, which ftllmd loads without converting.\n";
  ModelLoadOptions o;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return std::fputs(usage.c_str(), stdout), 0;
    if (a == "--version") return std::puts("ftllm-export " FTLLM_VERSION), 0;
    const LoadOption* option = load_option_by_flag(a, kExport);
    if (a == "-o" || a == "--output" || option) {
      if (i + 1 >= argc) return std::fprintf(stderr, "ftllm-export: %s needs a value\n", a.c_str()), 2;
      const std::string value = argv[++i];
      if (!option) out = value;
      else if (std::string why = option->set_text(o, value); !why.empty())
        return std::fprintf(stderr, "ftllm-export: %s\n", option->refusal(why, value).c_str()), 2;
    } else if (a.starts_with("-")) {
      return std::fprintf(stderr, "ftllm-export: unknown option %s\n\n%s", a.c_str(), usage.c_str()), 2;
    } else if (o.path.empty()) {
      o.path = a;
    } else {
      return std::fprintf(stderr, "ftllm-export: takes one MODEL\n"), 2;
    }
  }
  if (o.path.empty() || out.empty()) return std::fputs(usage.c_str(), stderr), 2;
  o.context_length = 16;  // only the weights are wanted: keep the KV cache small
  o.max_sequences = 1;
  ExportResult r;
  Status s = export_model(o, out, r);
  if (!s.ok) return std::fprintf(stderr, "ftllm-export: cannot export %s: %s\n", o.path.c_str(), s.message.c_str()), 1;
  std::printf("exported %s to %s: %.1f MB (%s), loaded and converted in %.2f s, written in %.2f s\n", o.path.c_str(),
              out.c_str(), double(r.bytes) / 1e6, r.dtypes.c_str(), r.load_seconds, r.write_seconds);
  if (!r.notes.empty()) std::printf("note: %s\n", r.notes.c_str());
  return 0;
}
