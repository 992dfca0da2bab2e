// Where a model's parts are and which threads run them: each layer's weights and KV pages on the device
// its Placement names (a tensor-parallel layer cut into shards, its pages cut by KV heads), routed
// experts where --moe_device says, rows split over NUMA nodes in NUMA mode, the LM head beside the last
// layer, and a thread pool and ops::Context per device. Changed between two steps of the worker only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../cpu/kernels.h"
#include "../cpu/thread_pool.h"
#include "../kvcache/kv_cache.h"
#include "../load_options.h"
#include "../model/decoder.h"
#include "../ops/ops.h"
#include "placement.h"

namespace ftllm {

// Notes about a model a person should see in its status (dtypes kept, how a device spec was taken, a
// failed rebalance). Written by the loader and the worker, read by status.
class LoadNotes {
 public:
  void add(const std::string& note);
  std::string text() const;

 private:
  mutable std::mutex mu_;
  std::string text_;
};

class DeviceLayout {
 public:
  DeviceLayout(model::DecoderModel& model, kvcache::KvPool& kv, const ModelLoadOptions& options, int64_t context,
               LoadNotes& notes);

  // Moves what `placement` places elsewhere and sets the compute threads (0: as many as now). Throws
  // EngineError, before moving anything, for what cannot go (a GPU's share of memory too small). At the
  // first placement the KV pool shrinks instead to the whole sequences that fit (and says so in the notes).
  void apply(const Placement& placement, int threads);

  const Placement& placement() const { return placement_; }
  cpu::ThreadPool& pool() { return *pool_; }
  const cpu::Kernels& kernels() const { return kernels_; }
  // The context of the layers left on the host pool, and each layer's own (null: all on that one).
  ops::Context context() const { return {*pool_, kernels_}; }
  const std::vector<ops::Context*>* layer_contexts() const { return layer_ctx_.empty() ? nullptr : &layer_ctx_; }
  // Weight and KV bytes per device as of the last placement, the host first (a copy: status reads it).
  std::vector<DeviceMemory> memory() const;

 private:
  void move_to_devices(const Placement& placement);
  void split_kv(int64_t l, const std::vector<model::DecoderModel::ShardSpan>& spans);
  Tensor join_kv_shards(int64_t l);
  // --device numa (every matrix) or --moe_device numa (experts only): rows split over the nodes, once.
  void place_weights_on_nodes(bool experts_only);
  void put_host_weights_on_huge_pages();
  void measure_memory();

  model::DecoderModel& model_;
  kvcache::KvPool& kv_;
  const ModelLoadOptions& options_;
  const int64_t context_;
  LoadNotes& notes_;
  const cpu::Kernels& kernels_;  // options_.kernels resolved once
  std::unique_ptr<cpu::ThreadPool> pool_;
  const Device experts_device_;           // where --moe_device puts the routed experts
  Placement placement_;                   // as applied
  std::vector<PlacedDevice> layer_place_; // each layer's device as applied
  bool placed_ = false;                   // the first placement (which also places the experts) is done
  // NUMA-node layers run on pools bound to their nodes; rebuilt with every placement.
  std::map<std::string, std::unique_ptr<cpu::ThreadPool>> device_pools_;
  std::map<std::string, std::unique_ptr<ops::Context>> device_contexts_;
  std::vector<ops::Context*> layer_ctx_;  // empty: every layer on pool_
  std::unique_ptr<ops::Context> main_ctx_;
  std::vector<int> split_nodes_;   // the nodes the rows were split over; empty until then
  int nodes_placed_ = 0;           // 0 nothing, 1 the experts, 2 every matrix
  bool experts_on_nodes_ = false;  // --moe_device numa on a machine of several nodes
  mutable std::mutex memory_mu_;
  std::vector<DeviceMemory> memory_;
};

}  // namespace ftllm
