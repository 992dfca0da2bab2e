// Element-type conversion on a CUDA device: the kernels of the "dtype conversion" family.
#pragma once

#include <cstddef>
#include <string>

#include "../core/dtype.h"

namespace ftllm::cuda {

// Converts n elements of type `from` at device pointer `src` to float32 at device pointer `dst`,
// queued on `stream` (a cudaStream_t; nullptr for the default stream). Returns an empty string on
// success, else the CUDA error text.
std::string convert_to_f32(DType from, const void* src, float* dst, size_t n, void* stream);

// Converts n float32 values to `to` (rounding to nearest even), device pointers as above.
std::string convert_from_f32(DType to, const float* src, void* dst, size_t n, void* stream);

}  // namespace ftllm::cuda
