// The key/value cache in fixed-size blocks ("pages"). A sequence owns a list of blocks; its token at
// position p lives in block blocks[p / block_tokens], slot p % block_tokens. Blocks come from one pool
// per model, so sequences of any length share memory without fragmenting it. Each layer's pages live
// where that layer runs (host memory, or a CUDA device's when the layer is placed there); a block id
// means the same slots in every layer.
//
// Prefix caching: a full block whose rows are written is published under the hash chain of the tokens up
// to its end; a later sequence whose context starts with the same tokens takes those blocks by reference
// instead of computing them again. A block is shared by reference count; when the last sequence lets go,
// a published block stays cached (least recently used first out) until the pool needs it for new rows.
// The rows depend only on the tokens before them and the model, and a pool belongs to one loaded model
// (its weights, dtype rules and KV layout), so the tokens are the whole key. Where a context parts from
// a cached block midway (a new question after a shared system prompt or conversation), that block's rows
// before the parting are copied into a block of the sequence's own, so only the rest is computed; the
// copy is made where every layer's pages are in host memory (a model with pages on a GPU takes whole
// blocks only). A sequence letting go publishes its last block too, not full, with the rows it holds, to
// be copied from (never taken by reference, as a full block is).
//
// A linear-attention layer (Qwen3-Next's gated DeltaNet) has no pages: its cache is one fixed-size
// recurrent state per sequence, in a slot the sequence holds while it lives. Such a state summarises every
// token before it and cannot be cut at a block boundary, so a pool with one has prefix caching off.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "../core/tensor.h"
#include "kv_format.h"

namespace ftllm::kvcache {

class KvPool {
 public:
  // A token's row holds kv_heads heads of head_dim values, each stored as `dtype` (kv_format.h) at
  // offset h * head_bytes(); rows are padded to whole 32-bit words. keys_only: one row per token serves
  // as key and value (multi-head latent attention's compressed cache); value() then returns the key row.
  // Every layer starts in host memory.
  KvPool(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t block_tokens, int64_t num_blocks,
         bool keys_only = false, KvDtype dtype = KvDtype::F32);

  int64_t layers() const { return int64_t(storage_.size()); }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t num_blocks() const { return num_blocks_; }
  KvDtype dtype() const { return dtype_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t head_bytes() const { return kv_head_bytes(dtype_, head_dim_); }
  int64_t row_bytes() const { return row_words_ * 4; }  // one token's row, padded
  int64_t block_bytes() const { return block_tokens_ * row_bytes(); }
  // Blocks a sequence can take: never used, or cached with no sequence holding them (evicted on taking).
  int64_t free_blocks() const { return int64_t(free_.size() + idle_.size()); }
  int64_t used_blocks() const { return num_blocks_ - free_blocks(); }  // held by sequences
  int64_t cached_blocks() const { return int64_t(published_.size()); }  // published (held or idle)
  size_t bytes() const;  // every layer's pages and states
  // Layer l keeps a recurrent state of `floats` per sequence in one of `slots` slots instead of pages
  // (its storage becomes [slots, floats], host memory, not zeroed), and prefix caching goes off.
  void make_recurrent(int64_t layer, int64_t floats, int64_t slots);
  bool recurrent(int64_t layer) const { return recurrent_[size_t(layer)]; }
  bool has_state() const { return state_slots_ > 0; }
  int64_t state_slots() const { return state_slots_; }
  int64_t free_state_slots() const { return int64_t(free_slots_.size()); }
  int32_t take_state_slot();  // -1 when every slot is held
  void give_state_slot(int32_t slot) { free_slots_.push_back(slot); }
  Tensor& states(int64_t layer) { return storage_[size_t(layer)]; }  // a recurrent layer's [slots, floats]
  size_t layer_bytes() const { return size_t(kinds_ * num_blocks_ * block_bytes()); }
  // Bytes of one token's keys and values over `layers` layers, as sized here (for memory plans).
  static int64_t token_bytes(int64_t layers, int64_t kv_heads, int64_t head_dim, bool keys_only, KvDtype dtype) {
    return layers * (keys_only ? 1 : 2) * (kv_heads * kv_head_bytes(dtype, head_dim) + 3) / 4 * 4;
  }

  int32_t allocate();  // -1 when the pool is exhausted; evicts the least recently used idle cached block
  void retain(int32_t block);  // one more holder
  void release(int32_t block);  // one holder fewer

  // Prefix caching: off, nothing is published or found (lookup always misses).
  void set_prefix_cache(bool on);
  bool prefix_cache() const { return prefix_cache_; }
  // The published block whose tokens are `tokens` after the chain `parent` (0 at the start), or -1.
  // `hash` is chain_hash(parent, tokens).
  int32_t lookup(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;
  // Publishes a written block, full (or the last of a sequence letting go, with the rows it holds: found
  // only by longest_start); returns the block now published under that hash (another one when the same
  // tokens were published first: the caller may switch to it).
  int32_t publish(int32_t block, uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens);
  // Of the published blocks after `parent`, the one whose tokens begin with the longest run of `tokens`,
  // and that run's length ({-1, 0} when none begins with tokens[0]).
  std::pair<int32_t, int64_t> longest_start(uint64_t parent, std::span<const int32_t> tokens) const;
  // Whether copy_rows can copy: every layer's pages in host memory, none split over devices.
  bool rows_on_host() const;
  // The first `rows` rows of block src (keys and values, every layer) into block dst.
  void copy_rows(int32_t src, int32_t dst, int64_t rows);

  // The key (value) row of one token, in the layer's memory (a device pointer when the layer is on a
  // device: for kernels, not for the host to read).
  uint8_t* key(int64_t layer, int32_t block, int64_t slot) { return row_at(layer, 0, block, slot); }
  uint8_t* value(int64_t layer, int32_t block, int64_t slot) { return row_at(layer, kinds_ - 1, block, slot); }

  // Layer l's pages as one tensor [kinds, blocks, block_tokens, row words] (kinds: 2, or 1 keys only),
  // float32 only in name: its words hold rows of `dtype` values.
  const Tensor& layer_storage(int64_t layer) const { return storage_[size_t(layer)]; }
  // Puts layer l's pages elsewhere: `storage` holds the same bytes (the caller copied them), so the
  // sequences cached there carry on.
  void replace_layer(int64_t layer, Tensor storage);
  // One layer's pages as a tensor: [kinds, blocks, block_tokens, row words].
  std::vector<int64_t> layer_shape() const { return {kinds_, num_blocks_, block_tokens_, row_words_}; }
  // Host memory for one layer's pages, not zeroed (pages are touched only as sequences fill them).
  static Tensor host_storage(std::vector<int64_t> shape);

  // Tensor parallelism: layer l's pages as one tensor per shard ([kinds, blocks, block_tokens, words of
  // the shard's KV heads]), each where its shard runs; an empty list: the layer is whole again
  // (layer_storage). The caller moves the bytes between the two forms.
  void set_shards(int64_t layer, std::vector<Tensor> shards) { shards_[size_t(layer)] = std::move(shards); }
  const std::vector<Tensor>& shards(int64_t layer) const { return shards_[size_t(layer)]; }

 private:
  uint8_t* row_at(int64_t layer, int kind, int32_t block, int64_t slot) {
    return reinterpret_cast<uint8_t*>(storage_[size_t(layer)].as<float>() + ((kind * num_blocks_ + block) * block_tokens_ + slot) * row_words_);
  }
  KvDtype dtype_;
  int64_t kv_heads_, head_dim_, row_words_, block_tokens_, num_blocks_;
  int kinds_;  // 2: keys and values; 1: keys only
  std::vector<Tensor> storage_;  // per layer: pages, or a recurrent layer's state slots
  std::vector<bool> recurrent_;  // per layer
  int64_t state_slots_ = 0;
  std::vector<int32_t> free_slots_;
  std::vector<std::vector<Tensor>> shards_;  // per layer; empty unless split over devices
  std::vector<int32_t> free_;  // never used, or unpublished when let go

  // Per block: holders, and where it sits in idle_ when cached with none.
  std::vector<int32_t> holders_;
  std::vector<std::list<int32_t>::iterator> idle_at_;
  std::list<int32_t> idle_;  // cached, held by no sequence: least recently used first
  struct Published {
    uint64_t parent;
    std::vector<int32_t> tokens;  // compared on lookup, so a hash collision is a miss, not wrong rows
    int32_t block;
  };
  std::unordered_map<uint64_t, Published> published_;  // by chain hash
  std::unordered_map<uint64_t, std::vector<uint64_t>> children_;  // published hashes by their parent's
  void unpublish(int32_t block);
  std::vector<uint64_t> hash_of_;  // per block: its published hash, or 0
  bool prefix_cache_ = true;
};

// One sequence's blocks, and the tokens whose rows they hold.
struct SequenceKv {
  std::vector<int32_t> blocks;
  std::vector<int32_t> tokens;   // written rows' tokens, in position order (appended by written())
  std::vector<uint64_t> chain;   // hash chain of the full blocks published or found so far
  uint64_t root = 0;             // the chain's start: 0 for the base model, a LoRA adapter's cache_key for its rows
  int32_t state_slot = -1;       // its recurrent state's slot in a pool with linear-attention layers

  // Takes a state slot when the pool has recurrent layers and this sequence holds none; false when every
  // slot is held (the sequence waits).
  bool take_state_slot(KvPool& pool);
  // Takes the cached blocks that hold the longest prefix of `context` (whole blocks, then the start of
  // a block copied where the pool can; leaving at least its last token to compute, as its logits are
  // wanted). Call on a sequence with no blocks. Returns the tokens found.
  int64_t attach_prefix(KvPool& pool, std::span<const int32_t> context);
  // After a step wrote the rows of `fed` (the next tokens in order): publishes each block they filled.
  void written(KvPool& pool, std::span<const int32_t> fed);
  // Makes room for `tokens` positions in total. Returns false (allocating nothing) when the pool
  // has too few free blocks.
  bool reserve(KvPool& pool, int64_t tokens);
  // Blocks still to take for `tokens` positions in total.
  int64_t blocks_needed(const KvPool& pool, int64_t tokens) const;
  void release(KvPool& pool);
  int32_t block_of(int64_t pos, int64_t block_tokens) const { return blocks[size_t(pos / block_tokens)]; }
};

}  // namespace ftllm::kvcache
