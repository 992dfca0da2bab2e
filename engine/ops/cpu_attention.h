// Paged attention on the CPU (ops::paged_attention's host half).
#pragma once

#include "ops.h"

namespace ftllm::ops {

void cpu_paged_attention(Context& ctx, const Tensor& q, const AttentionBatch& b, const KvLayer& kv, const AttentionShape& sh,
                         Tensor& out);

// Keys per block of the online softmax and per segment (the part of a long context one thread takes,
// flash-decoding), both counted from position 0 for a head of d values.
int64_t attention_block_keys(int64_t d);
constexpr int64_t kAttentionSegmentKeys = 512;

}  // namespace ftllm::ops
