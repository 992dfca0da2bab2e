// Low-rank adapters (LoRA, as PEFT saves them) over a resident base model, applied per row and never
// merged into the base weights: rows of one step may each use a different adapter, or none (S-LoRA,
// Punica). A linear layer's output y = x Wᵀ then gains scale · (x Aᵀ) Bᵀ for the rows of an adapter
// that adapts it.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../core/tensor.h"
#include "../ops/ops.h"

namespace ftllm::model {

class DecoderModel;

// The linear layers an adapter may change: PEFT's target module names.
enum class LoraTarget { Q, K, V, O, Gate, Up, Down };
inline constexpr int kLoraTargets = 7;

// Stored as the adapter file has them (float32, or bfloat16 / float16 as adapters trained in those are
// saved): a step reads each adapter of its rows once, so their bytes are what adapters cost.
struct LoraPair {
  Tensor a;   // [r, in]
  Tensor bt;  // [r, out]: B transposed, so a row's update is r scaled rows of it added up
  float scale = 1;  // lora_alpha / r, or lora_alpha / sqrt(r) with rslora
};

class LoraAdapter {
 public:
  // Reads a PEFT adapter directory (adapter_config.json, adapter_model.safetensors) for `base`, checking
  // every tensor against the base's layers. Throws EngineError saying what does not fit and why (a rank or
  // shape the base does not have, a module it lacks or that ftllm does not adapt, options such as DoRA).
  static std::shared_ptr<const LoraAdapter> load(const std::string& dir, const std::string& name, const DecoderModel& base);

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  // A different number for every adapter loaded in this process: the root of its prefix-cache chains,
  // so cached rows computed with one adapter (or the base) never serve another.
  uint64_t cache_key() const { return cache_key_; }
  int rank() const { return rank_; }            // the largest of its modules'
  const std::string& targets() const { return targets_; }  // "q_proj, v_proj"
  uint64_t bytes() const { return bytes_; }

  // The pair adapting `target` of `layer`, on `device` (copied there the first time a step asks: an
  // adapter follows its layers wherever placement moves them), or null when this adapter leaves it alone.
  const LoraPair* pair(int64_t layer, LoraTarget target, Device device) const;

 private:
  using LayerPairs = std::array<std::optional<LoraPair>, kLoraTargets>;
  std::string name_, path_, targets_;
  uint64_t cache_key_ = 0, bytes_ = 0;
  int rank_ = 0;
  std::vector<LayerPairs> host_;
  mutable std::mutex copies_mu_;
  mutable std::vector<std::pair<Device, std::vector<LayerPairs>>> copies_;  // on CUDA devices
};

// One step's rows that adapters change: each adapter with the batch rows (tokens) that use it.
struct LoraRows {
  std::vector<std::pair<const LoraAdapter*, std::vector<int64_t>>> groups;

  // From a batch's per-token sequence index and per-sequence adapters (null: the base model).
  static LoraRows of_batch(const std::vector<int32_t>& token_seq, const std::vector<const LoraAdapter*>& seq_adapter);
  bool empty() const { return groups.empty(); }
  // For each (target, y): y += the adapters' updates of that linear layer of `layer`, whose input is x, on
  // their rows. The layers sharing an input go in one call.
  struct Output {
    LoraTarget target;
    Tensor* y;
  };
  void apply(ops::Context& ctx, int64_t layer, const Tensor& x, std::initializer_list<Output> outputs) const;
};

// One layer's share of a step's LoraRows (none when rows is null), as its blocks apply it.
struct LayerLora {
  const LoraRows* rows = nullptr;
  int64_t layer = 0;
  void apply(ops::Context& ctx, const Tensor& x, std::initializer_list<LoraRows::Output> outputs) const {
    if (rows && !rows->empty()) rows->apply(ctx, layer, x, outputs);
  }
};

}  // namespace ftllm::model
