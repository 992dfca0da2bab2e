// Where a model's layers run, as a value: fastllm's device syntax ("cpu", "numa:1", "cuda", "cuda:1",
// "{'cuda:0':3,'cpu':1}" splitting the layers in those proportions, in order; "cudapp=N" and "cudapp=1:2"
// as fastllm's shorthands for an even or weighted split over N GPUs) parsed once into layer ranges, each
// on one PlacedDevice. "numa" alone is fastllm's NUMA mode: every layer on all nodes, each weight's rows
// split across them. "multicuda:0,1" (fastllm's tensor parallelism; "multicuda:0:4,1:5,cpu:1" with
// shares, the CPU among them) splits each layer's heads and MLP over those devices; over one device it
// is that device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../core/device.h"

namespace ftllm {

// One place a range of layers runs.
struct PlacedDevice {
  enum class Kind { Cpu, Numa, NumaNode, Cuda, TensorParallel };
  struct Shard {
    Device device;  // the host or a GPU
    double share = 1;
    bool operator==(const Shard&) const = default;
  };
  Kind kind = Kind::Cpu;
  int index = 0;              // NumaNode: the node; Cuda: the ordinal
  std::vector<Shard> shards;  // TensorParallel: each layer's heads and MLP over these, in these shares

  // Where the layer's ops run and its activations live: its GPU, a tensor-parallel group's first shard's
  // device (where partial sums meet), or the host.
  Device compute_device() const;
  bool on_host() const { return kind == Kind::Cpu || kind == Kind::Numa; }
  // "cpu", "numa", "numa:1", "cuda:0", "multi:cuda:0=1,cpu=1": the names status shows.
  std::string name() const;
  bool operator==(const PlacedDevice&) const = default;
};

struct LayerRange {
  PlacedDevice device;
  int64_t first = 0, count = 0;
  bool operator==(const LayerRange&) const = default;
};

class Placement {
 public:
  Placement() = default;  // nothing placed yet
  // Parses `spec` for a model of `layers` layers. Throws EngineError naming what is wrong, and which
  // devices this build offers. On a machine of one NUMA node "numa" is "cpu", and `note` (when given)
  // says so. `cuda_devices`: how many CUDA devices to offer (-1: the ones this build and machine have).
  static Placement parse(const std::string& spec, int64_t layers, std::string* note = nullptr, int cuda_devices = -1);

  const std::vector<LayerRange>& ranges() const { return ranges_; }
  bool empty() const { return ranges_.empty(); }
  // Each layer's device (layers() of them).
  std::vector<PlacedDevice> per_layer() const;
  bool all_on_host() const;
  bool numa_mode() const { return ranges_.size() == 1 && ranges_[0].device.kind == PlacedDevice::Kind::Numa; }
  std::string to_string() const;  // "cpu:0-14 numa:0:15-29"
  bool operator==(const Placement&) const = default;

 private:
  std::vector<LayerRange> ranges_;
};

}  // namespace ftllm
