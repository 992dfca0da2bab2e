// Where a model's layers run: fastllm's device syntax ("cpu", "numa:1", "cuda", "cuda:1", or
// "{'cuda:0':3,'cpu':1}" splitting the layers in those proportions, in order; "cudapp=N" and
// "cudapp=1:2" as fastllm's shorthands for an even or weighted split over N GPUs), parsed and resolved
// to layer ranges. "numa" alone is fastllm's NUMA mode: every layer on all nodes, each weight's rows
// split across them. "multicuda:0,1" (fastllm's tensor parallelism; "multicuda:0:4,1:5,cpu:1" with
// shares, the CPU among them) splits each layer's heads and MLP over those devices; over one device it
// is that device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftllm {

struct LayerRange {
  // "cpu", "numa:N", "numa" (all nodes, rows split), "cuda:N", or a tensor-parallel group
  // "multi:cuda:0=1,cuda:1=1" (each layer's heads and MLP split over those devices in those shares)
  std::string device;
  int64_t first = 0, count = 0;
};

// Resolves `spec` for a model of `layers` layers. Throws EngineError naming what is wrong, and which
// devices this build offers. On a machine of one NUMA node "numa" resolves to "cpu", and `note` (when
// given) says so.
// `cuda_devices`: how many CUDA devices to offer (-1: the ones this build and machine have).
std::vector<LayerRange> resolve_placement(const std::string& spec, int64_t layers, std::string* note = nullptr,
                                          int cuda_devices = -1);
// The CUDA ordinal of "cuda:N", or -1 for a host device.
int cuda_index(const std::string& device);
// A tensor-parallel group's devices and shares ("multi:cuda:0=1,cpu=1"); empty for a single device.
std::vector<std::pair<std::string, double>> tensor_parallel_shards(const std::string& device);
std::string placement_string(const std::vector<LayerRange>& ranges);  // "cpu:0-14 numa:0:15-29"

}  // namespace ftllm
