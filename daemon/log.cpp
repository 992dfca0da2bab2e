#include "log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ftllm::daemon {

namespace {
std::atomic<LogLevel> g_level{LogLevel::Info};
const bool g_journal = std::getenv("JOURNAL_STREAM") != nullptr;
}  // namespace

void set_log_level(LogLevel level) { g_level = level; }

void log(LogLevel level, std::string_view message) {
  if (level > g_level.load()) return;
  static const char* const journal_prefix[] = {"<3>", "<4>", "<6>", "<7>"};
  static const char* const plain_prefix[] = {"error: ", "warning: ", "", "debug: "};
  int i = int(level);
  std::string line = g_journal ? journal_prefix[i] : std::string("ftllmd: ") + plain_prefix[i];
  line.append(message);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ftllm::daemon
