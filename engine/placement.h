// Where a model's layers run: fastllm's device syntax ("cpu", "numa:1", or "{'cpu':1,'numa:0':1}"
// splitting the layers in those proportions, in order), parsed and resolved to layer ranges. "numa"
// alone is fastllm's NUMA mode: every layer on all nodes, each weight's rows split across them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftllm {

struct LayerRange {
  std::string device;  // "cpu", "numa:N", or "numa" (all nodes, rows split)
  int64_t first = 0, count = 0;
};

// Resolves `spec` for a model of `layers` layers. Throws EngineError naming what is wrong, and which
// devices this build offers. On a machine of one NUMA node "numa" resolves to "cpu", and `note` (when
// given) says so.
std::vector<LayerRange> resolve_placement(const std::string& spec, int64_t layers, std::string* note = nullptr);
std::string placement_string(const std::vector<LayerRange>& ranges);  // "cpu:0-14 numa:0:15-29"

}  // namespace ftllm
