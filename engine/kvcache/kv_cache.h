// The key/value cache in fixed-size blocks ("pages"). A sequence owns a list of blocks; its token at
// position p lives in block blocks[p / block_tokens], slot p % block_tokens. Blocks come from one pool
// per model, so sequences of any length share memory without fragmenting it. Each layer's pages live
// where that layer runs (host memory, or a CUDA device's when the layer is placed there); a block id
// means the same slots in every layer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "../core/tensor.h"

namespace ftllm::kvcache {

class KvPool {
 public:
  // keys_only: one row per token serves as key and value (multi-head latent attention's compressed
  // cache); value() then returns the key row. Every layer starts in host memory.
  KvPool(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_tokens, int64_t num_blocks,
         bool keys_only = false);

  int64_t layers() const { return int64_t(storage_.size()); }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t row_floats() const { return row_; }  // kv_heads * head_dim
  int64_t block_floats() const { return block_tokens_ * row_; }
  size_t bytes() const { return layer_bytes() * storage_.size(); }
  size_t layer_bytes() const { return size_t(kinds_ * num_blocks_ * block_tokens_ * row_) * sizeof(float); }

  int32_t allocate();  // -1 when the pool is exhausted
  void release(int32_t block);

  // The key (value) row of one token: kv_heads * head_dim floats, in the layer's memory (a device
  // pointer when the layer is on a device: for kernels, not for the host to read).
  float* key(int64_t layer, int32_t block, int64_t slot) { return row_at(layer, 0, block, slot); }
  float* value(int64_t layer, int32_t block, int64_t slot) { return row_at(layer, kinds_ - 1, block, slot); }

  // Layer l's pages as one tensor [kinds, blocks, block_tokens, row] (kinds: 2, or 1 keys only).
  const Tensor& layer_storage(int64_t layer) const { return storage_[size_t(layer)]; }
  // Puts layer l's pages elsewhere: `storage` holds the same bytes (the caller copied them), so the
  // sequences cached there carry on.
  void replace_layer(int64_t layer, Tensor storage);
  // One layer's pages as a tensor: [kinds, blocks, block_tokens, row_floats].
  std::vector<int64_t> layer_shape() const { return {kinds_, num_blocks_, block_tokens_, row_}; }
  // Host memory for one layer's pages, not zeroed (pages are touched only as sequences fill them).
  static Tensor host_storage(std::vector<int64_t> shape);

  // Tensor parallelism: layer l's pages as one tensor per shard ([kinds, blocks, block_tokens, the
  // shard's KV heads x head_dim]), each where its shard runs; an empty list: the layer is whole again
  // (layer_storage). The caller moves the bytes between the two forms.
  void set_shards(int64_t layer, std::vector<Tensor> shards) { shards_[size_t(layer)] = std::move(shards); }
  const std::vector<Tensor>& shards(int64_t layer) const { return shards_[size_t(layer)]; }

 private:
  float* row_at(int64_t layer, int kind, int32_t block, int64_t slot) {
    return storage_[size_t(layer)].as<float>() + ((kind * num_blocks_ + block) * block_tokens_ + slot) * row_;
  }
  int64_t row_, block_tokens_, num_blocks_;
  int kinds_;  // 2: keys and values; 1: keys only
  std::vector<Tensor> storage_;  // per layer
  std::vector<std::vector<Tensor>> shards_;  // per layer; empty unless split over devices
  std::vector<int32_t> free_;
};

// One sequence's blocks and how many of its tokens are cached.
struct SequenceKv {
  std::vector<int32_t> blocks;
  int64_t length = 0;

  // Makes room for `tokens` positions in total. Returns false (allocating nothing) when the pool
  // has too few free blocks.
  bool reserve(KvPool& pool, int64_t tokens);
  void release(KvPool& pool);
  int32_t block_of(int64_t pos, int64_t block_tokens) const { return blocks[size_t(pos / block_tokens)]; }
};

}  // namespace ftllm::kvcache
