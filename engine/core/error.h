// The engine's internal failure: thrown inside the engine, turned into a Status at engine.h.
#pragma once

#include <stdexcept>
#include <string>

namespace ftllm {

class EngineError : public std::runtime_error {
 public:
  explicit EngineError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ftllm
