#include "tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace ftllm {

namespace {
// 64-byte aligned, so vector kernels never straddle cache lines at row starts.
std::shared_ptr<void> aligned_buffer(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.owner = aligned_buffer(t.bytes());
  t.data = t.owner.get();
  std::memset(t.data, 0, t.bytes());
  return t;
}

Tensor Tensor::copy_of(DType dtype, std::vector<int64_t> shape, const void* bytes) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.owner = aligned_buffer(t.bytes());
  t.data = t.owner.get();
  std::memcpy(t.data, bytes, t.bytes());
  return t;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace ftllm
