// The key/value cache in fixed-size blocks ("pages"). A sequence owns a list of blocks; its token at
// position p lives in block blocks[p / block_tokens], slot p % block_tokens. Blocks come from one pool
// per model, so sequences of any length share memory without fragmenting it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace ftllm::kvcache {

class KvPool {
 public:
  // keys_only: one row per token serves as key and value (multi-head latent attention's compressed
  // cache); value() then returns the key row.
  KvPool(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_tokens, int64_t num_blocks,
         bool keys_only = false);

  int64_t block_tokens() const { return block_tokens_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t row_floats() const { return row_; }  // kv_heads * head_dim
  size_t bytes() const { return floats_ * sizeof(float); }

  int32_t allocate();  // -1 when the pool is exhausted
  void release(int32_t block);

  // The key (value) row of one token: kv_heads * head_dim floats.
  float* key(int64_t layer, int32_t block, int64_t slot) { return row_at(layer, 0, block, slot); }
  float* value(int64_t layer, int32_t block, int64_t slot) { return row_at(layer, kinds_ - 1, block, slot); }

 private:
  float* row_at(int64_t layer, int kind, int32_t block, int64_t slot) {
    return data_.get() + (((layer * kinds_ + kind) * num_blocks_ + block) * block_tokens_ + slot) * row_;
  }
  int64_t layers_, row_, block_tokens_, num_blocks_;
  int kinds_;  // 2: keys and values; 1: keys only
  size_t floats_;
  std::unique_ptr<float[]> data_;  // not zeroed: pages are touched only as sequences fill them
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
