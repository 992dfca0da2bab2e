// The daemon's log: one line per event on stderr. Under systemd (JOURNAL_STREAM set) each line carries
// a syslog priority prefix so journald files it at the right level.
#pragma once

#include <string_view>

#include "config.h"

namespace ftllm::daemon {

void set_log_level(LogLevel level);
void log(LogLevel level, std::string_view message);

inline void log_error(std::string_view m) { log(LogLevel::Error, m); }
inline void log_warn(std::string_view m) { log(LogLevel::Warn, m); }
inline void log_info(std::string_view m) { log(LogLevel::Info, m); }

}  // namespace ftllm::daemon
