// A tensor: element type, shape and a pointer to its data, owning the data or viewing someone else's
// (a memory-mapped weight file, for instance). Row-major; the last dimension is contiguous.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device.h"
#include "dtype.h"

namespace ftllm {

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  void* data = nullptr;
  std::shared_ptr<void> owner;  // keeps `data` alive: an allocation or a mapped file
  Device device;                // host unless the CUDA backend made it (cuda::empty, cuda::to_device)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // Matrices of a block type are whole rows of the last dimension.
  size_t bytes() const { return shape.empty() ? row_bytes(dtype, 1) : size_t(numel() / dim(-1)) * row_bytes(dtype, dim(-1)); }
  int64_t dim(int i) const { return shape[size_t(i < 0 ? int(shape.size()) + i : i)]; }
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* as() const { return static_cast<T*>(data); }

  // A fresh zero-filled tensor (64-byte aligned) of any dtype; matrices of block types hold whole rows.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  static Tensor zeros_f32(std::vector<int64_t> shape) { return zeros(DType::F32, std::move(shape)); }
  // The same on transparent huge pages, for a large buffer kept as long as its model (a KV cache, weights
  // made at load): the kernel's zero pages, no memset. Under kHugePageMinBytes, as zeros() (a 2 MiB page
  // would be mostly waste).
  static constexpr size_t kHugePageMinBytes = size_t(4) << 20;
  static Tensor resident_zeros(DType dtype, std::vector<int64_t> shape);
  // The same, its bytes left as they are: for an output the op writing it fills completely.
  static Tensor uninitialized(DType dtype, std::vector<int64_t> shape);
  // A fresh tensor of any dtype holding a copy of `bytes`.
  static Tensor copy_of(DType dtype, std::vector<int64_t> shape, const void* bytes);
};

std::string shape_string(const std::vector<int64_t>& shape);  // "[2, 64]"

// Rows [r0, r1) of a matrix (elements of a float vector) as a view sharing t's memory, on t's device.
Tensor slice_rows(const Tensor& t, int64_t r0, int64_t r1);
// Columns [c0, c1) of a host matrix as a new host matrix of the same dtype: each row keeps its header
// (int8's and int4's per-row scales) and the blocks of those columns. c0 and c1 must fall on block
// boundaries; throws EngineError saying so otherwise.
Tensor slice_columns(const Tensor& t, int64_t c0, int64_t c1);

}  // namespace ftllm
