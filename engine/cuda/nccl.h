// Tensor-parallel sums over GPUs (nccl.cu).
#pragma once

#include <string>
#include <vector>

#include "../core/tensor.h"

namespace ftllm::cuda {

// Sums the float32 tensors (one per GPU, same shape) in place on every GPU with NCCL's all-reduce,
// queued on each device's stream. Returns false, with the reason, and touches nothing when it does not
// apply: a part on the host, two on one GPU, or NCCL not installed.
bool all_reduce_sum(const std::vector<Tensor*>& parts, std::string* why_not = nullptr);

}  // namespace ftllm::cuda
