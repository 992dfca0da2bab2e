// What a call through the engine's face produced: ok, or a message a person can act on.
#pragma once

#include <string>

namespace ftllm {

struct Status {
  bool ok = true;
  std::string message;
  static Status success() { return {}; }
  static Status error(std::string msg) { return {false, std::move(msg)}; }
};

}  // namespace ftllm
