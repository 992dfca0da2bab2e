#include "tensor.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "error.h"

namespace ftllm {

namespace {
// 64-byte aligned, so vector kernels never straddle cache lines at row starts.
// A forward pass allocates and frees its activations every layer, tens of MB at a prefill. Left to
// glibc, each above its 128 KB-and-growing mmap threshold is mapped, zero-filled by the kernel page by
// page and unmapped again: 7% of a 512-token prefill went to page faults. Kept in the heap (below the
// largest threshold glibc takes) and not trimmed, the pages are reused from one layer to the next.
void keep_activations_in_the_heap() {
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)once;
}

std::shared_ptr<void> aligned_buffer(size_t bytes) {
  keep_activations_in_the_heap();
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

// Zeroed pages for a buffer that lives as long as a model: 2 MiB-aligned and marked for transparent
// huge pages (distributions default THP to madvise), so a stream over it neither misses the TLB every
// 4 KiB nor restarts the hardware prefetchers at each 4 KiB page boundary.
std::shared_ptr<void> huge_page_buffer(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge, mapped = size + kHuge;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  char* base = static_cast<char*>(m);
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) / kHuge * kHuge);
  if (p > base) munmap(base, size_t(p - base));
  if (p + size < base + mapped) munmap(p + size, size_t(base + mapped - (p + size)));
  madvise(p, size, MADV_HUGEPAGE);  // advice: without THP the pages are ordinary ones
  return std::shared_ptr<void>(p, [size](void* q) { munmap(q, size); });
}
}  // namespace

Tensor Tensor::resident_zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  if (t.bytes() < kHugePageMinBytes) return zeros(t.dtype, t.shape);
  t.owner = huge_page_buffer(t.bytes());
  t.data = t.owner.get();
  return t;
}

Tensor Tensor::uninitialized(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.owner = aligned_buffer(t.bytes());
  t.data = t.owner.get();
  return t;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t = uninitialized(dtype, std::move(shape));
  std::memset(t.data, 0, t.bytes());
  return t;
}

Tensor Tensor::copy_of(DType dtype, std::vector<int64_t> shape, const void* bytes) {
  Tensor t = uninitialized(dtype, std::move(shape));
  std::memcpy(t.data, bytes, t.bytes());
  return t;
}

Tensor slice_rows(const Tensor& t, int64_t r0, int64_t r1) {
  Tensor v = t;
  if (t.shape.size() == 1) {  // a vector of floats
    v.shape = {r1 - r0};
    v.data = static_cast<char*>(t.data) + size_t(r0) * dtype_size(t.dtype);
    return v;
  }
  v.shape[0] = r1 - r0;
  v.data = static_cast<char*>(t.data) + size_t(r0) * row_bytes(t.dtype, t.dim(-1));
  return v;
}

Tensor slice_columns(const Tensor& t, int64_t c0, int64_t c1) {
  const DTypeLayout l = dtype_layout(t.dtype);
  if (c0 % l.block_values || c1 % l.block_values)
    throw EngineError("columns " + std::to_string(c0) + ".." + std::to_string(c1) + " of a " + std::string(dtype_name(t.dtype)) +
                      " matrix do not fall on its blocks of " + std::to_string(l.block_values));
  const int64_t rows = t.dim(0), K = t.dim(1);
  Tensor out = Tensor::zeros(t.dtype, {rows, c1 - c0});
  const size_t in_row = row_bytes(t.dtype, K), out_row = row_bytes(t.dtype, c1 - c0);
  const size_t skip = size_t(c0 / l.block_values) * l.block_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    const char* src = static_cast<const char*>(t.data) + size_t(r) * in_row;
    char* dst = static_cast<char*>(out.data) + size_t(r) * out_row;
    std::memcpy(dst, src, l.row_header);
    std::memcpy(dst + l.row_header, src + l.row_header + skip, out_row - l.row_header);
  }
  return out;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace ftllm
