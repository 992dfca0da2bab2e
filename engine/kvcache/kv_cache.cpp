#include "kv_cache.h"

namespace ftllm::kvcache {

KvPool::KvPool(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_tokens, int64_t num_blocks, bool keys_only)
    : layers_(layers), row_(kv_heads * head_dim), block_tokens_(block_tokens), num_blocks_(num_blocks), kinds_(keys_only ? 1 : 2),
      floats_(size_t(layers * kinds_ * num_blocks * block_tokens * kv_heads * head_dim)), data_(new float[floats_]) {
  free_.reserve(size_t(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

int32_t KvPool::allocate() {
  if (free_.empty()) return -1;
  int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void KvPool::release(int32_t block) { free_.push_back(block); }

bool SequenceKv::reserve(KvPool& pool, int64_t tokens) {
  int64_t needed = (tokens + pool.block_tokens() - 1) / pool.block_tokens() - int64_t(blocks.size());
  if (needed <= 0) return true;
  if (needed > pool.free_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i) blocks.push_back(pool.allocate());
  return true;
}

void SequenceKv::release(KvPool& pool) {
  for (int32_t b : blocks) pool.release(b);
  blocks.clear();
  length = 0;
}

}  // namespace ftllm::kvcache
