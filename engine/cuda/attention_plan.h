// How the attention kernel splits a long sequence's keys (flash-decoding), as host code the CPU tests
// check: enough thread blocks to fill the device when the queries are few, never fewer than 256 keys a
// split (merging more partial softmaxes costs more than it gains), at most 64 splits.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ftllm::cuda {

inline int attention_splits(int64_t query_heads, int64_t longest_keys, int sm_count) {
  const int64_t want_blocks = 2 * int64_t(sm_count);
  if (query_heads <= 0 || query_heads >= want_blocks) return 1;
  const int64_t by_keys = std::max<int64_t>(1, longest_keys / 256);
  const int64_t by_blocks = (want_blocks + query_heads - 1) / query_heads;
  return int(std::clamp<int64_t>(std::min(by_keys, by_blocks), 1, 64));
}

}  // namespace ftllm::cuda
