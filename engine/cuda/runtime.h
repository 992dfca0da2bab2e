// The CUDA backend's memory and streams, for code that includes no CUDA header: tensors on a device
// (from that device's caching allocator), copies between host and device, and the wait for a device.
// Every CUDA op of the backend queues its work on the device's one stream, so ops on one device run in
// the order they were called, from any thread; copies to the host wait for what came before.
#pragma once

#include <cstddef>
#include <vector>

#include "../core/tensor.h"

namespace ftllm::cuda {

// A tensor in device memory; empty() leaves the bytes as they were, zeros() clears them.
Tensor empty(Device device, DType dtype, std::vector<int64_t> shape);
Tensor zeros(Device device, DType dtype, std::vector<int64_t> shape);

// A copy of t on `to` (the host or a CUDA device), or t itself when it is there already.
Tensor to_device(const Tensor& t, Device to);
// t's bytes (a device tensor) into host memory at dst, waiting for them.
void copy_to_host(const Tensor& t, void* dst);

void synchronize(Device device);  // waits for everything queued on the device

struct MemoryUse {
  size_t in_use = 0, cached = 0, free = 0, total = 0;
};
MemoryUse memory_use(Device device);
// Bytes the device could still give a new allocation: its free memory plus what our cache holds.
size_t available_bytes(Device device);

}  // namespace ftllm::cuda
