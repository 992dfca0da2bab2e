#pragma once

#include "../core/device.h"

namespace ftllm::cuda {

// Adds one device per visible CUDA GPU with free and total memory; when none can be used (no driver,
// no device) it adds a note with the CUDA runtime's reason instead.
void append_cuda_devices(DeviceReport& report);

// Number of usable CUDA devices; 0 when there is no driver or no device.
int device_count();

}  // namespace ftllm::cuda
