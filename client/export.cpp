// ftllmctl export: the conversion runs the engine, which ftllmctl does not link; it is its own program,
// ftllm-export, installed beside ftllmctl. This hands the arguments over to it unchanged.
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "load_options.h"

namespace ftllm::client {

int cmd_export(const CommandContext&, const std::vector<std::string>& args) {
  std::vector<std::string> argv_strings{"ftllm-export"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The ftllm-export beside this ftllmctl first (a build tree, an install prefix), then PATH.
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string beside(self, size_t(n));
    beside = beside.substr(0, beside.rfind('/') + 1) + "ftllm-export";
    execv(beside.c_str(), argv.data());
  }
  execvp("ftllm-export", argv.data());
  std::fprintf(stderr, "ftllmctl: export runs ftllm-export, which could not be started (%s); install it beside ftllmctl\n",
               std::strerror(errno));
  return 4;
}

const RegisteredCommand export_command({70, "export", [] {
  return std::string("  export MODEL -o DIR\n" + load_options_synopsis(kExport, 7) +
         "\n                                convert a model once into a directory that loads without converting\n"
         "                                (runs ftllm-export, which links the engine; ftllmctl does not)\n");
}, &cmd_export});

}  // namespace ftllm::client
