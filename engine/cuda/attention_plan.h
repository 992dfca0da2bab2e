// How the attention kernel splits a token's keys (flash-decoding), as code the host tests check: by a
// rule of the token's own key count alone, so its partial sums and their merge run in the same order
// whatever else the step holds (a batch of other sequences, or a prefix-cache hit that leaves only the
// prompt's tail to compute). Splits of 1024 keys (64 at most, longer ones take larger splits): a decode
// of 8k keys fills 8 x heads thread blocks.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FTLLM_HOST_DEVICE __host__ __device__
#else
#define FTLLM_HOST_DEVICE
#endif

namespace ftllm::cuda {

constexpr int64_t kSplitKeys = 1024, kMaxSplits = 64, kSplitAlign = 64;  // kSplitAlign: the kernel's chunk

// Keys per split for a token that sees n keys.
FTLLM_HOST_DEVICE inline int64_t attention_split_keys(int64_t n) {
  const int64_t even = (n + kMaxSplits - 1) / kMaxSplits;
  const int64_t aligned = (even + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
  return aligned > kSplitKeys ? aligned : kSplitKeys;
}

// The splits of a token that sees n keys (at least 1).
FTLLM_HOST_DEVICE inline int attention_splits(int64_t n) {
  return n <= 0 ? 1 : int((n + attention_split_keys(n) - 1) / attention_split_keys(n));
}

}  // namespace ftllm::cuda
