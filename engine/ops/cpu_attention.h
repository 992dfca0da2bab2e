// Paged attention on the CPU (ops::paged_attention's host half).
#pragma once

#include "ops.h"

namespace ftllm::ops {

void cpu_paged_attention(Context& ctx, const Tensor& q, const AttentionBatch& b, const KvLayer& kv, const AttentionShape& sh,
                         Tensor& out);

}  // namespace ftllm::ops
