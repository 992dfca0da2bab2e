// Where a model's layers run: fastllm's device syntax ("cpu", "numa", "numa:1", or
// "{'cpu':1,'numa:0':1}" splitting the layers in those proportions, in order), parsed and resolved to
// layer ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftllm {

struct LayerRange {
  std::string device;  // "cpu" or "numa:N"
  int64_t first = 0, count = 0;
};

// Resolves `spec` for a model of `layers` layers. Throws EngineError naming what is wrong, and which
// devices this build offers.
std::vector<LayerRange> resolve_placement(const std::string& spec, int64_t layers);
std::string placement_string(const std::vector<LayerRange>& ranges);  // "cpu:0-14 numa:0:15-29"

}  // namespace ftllm
