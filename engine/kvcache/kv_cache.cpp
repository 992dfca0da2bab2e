#include "kv_cache.h"

#include <utility>

namespace ftllm::kvcache {

KvPool::KvPool(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_tokens, int64_t num_blocks, bool keys_only)
    : row_(kv_heads * head_dim), block_tokens_(block_tokens), num_blocks_(num_blocks), kinds_(keys_only ? 1 : 2) {
  for (int64_t l = 0; l < layers; ++l) storage_.push_back(host_storage(layer_shape()));
  shards_.resize(size_t(layers));
  free_.reserve(size_t(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

Tensor KvPool::host_storage(std::vector<int64_t> shape) {
  Tensor t;
  t.shape = std::move(shape);
  std::shared_ptr<float[]> data(new float[size_t(t.numel())]);
  t.data = data.get();
  t.owner = std::shared_ptr<void>(data, data.get());
  return t;
}

void KvPool::replace_layer(int64_t layer, Tensor storage) { storage_[size_t(layer)] = std::move(storage); }

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
