#include "caching_allocator.h"

#include <bit>
#include <cstdio>

#include "error.h"

namespace ftllm {

namespace {
constexpr size_t kLargeStep = size_t(2) << 20;
std::string mib(size_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(b) / double(1 << 20));
  return s;
}
}  // namespace

CachingAllocator::CachingAllocator(std::string name, std::function<void*(size_t)> raw_alloc, std::function<void(void*)> raw_free)
    : name_(std::move(name)), raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

CachingAllocator::~CachingAllocator() { release_cached(); }

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes < 512) return 512;
  if (bytes < (size_t(1) << 20)) return std::bit_ceil(bytes);
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  std::lock_guard lock(mu_);
  if (auto it = cached_.find(size); it != cached_.end()) {
    void* p = it->second;
    cached_.erase(it);
    cached_bytes_ -= size;
    in_use_[p] = size;
    in_use_bytes_ += size;
    return p;
  }
  void* p = raw_alloc_(size);
  if (!p && !cached_.empty()) {  // the cache holds what the device lacks: give it back and try again
    release_cached_locked();
    p = raw_alloc_(size);
  }
  if (!p)
    throw EngineError("out of memory on " + name_ + ": " + mib(size) + " asked for with " + mib(in_use_bytes_) +
                      " in use; place fewer layers there (--device), lower the context (--ctx) or the sequences "
                      "(--max_sequences), or use a smaller --dtype");
  in_use_[p] = size;
  in_use_bytes_ += size;
  return p;
}

void CachingAllocator::free(void* p) {
  if (!p) return;
  std::lock_guard lock(mu_);
  auto it = in_use_.find(p);
  if (it == in_use_.end()) return;  // not ours: nothing sensible to do with it
  cached_.emplace(it->second, p);
  cached_bytes_ += it->second;
  in_use_bytes_ -= it->second;
  in_use_.erase(it);
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mu_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, p] : cached_) raw_free_(p);
  cached_.clear();
  cached_bytes_ = 0;
}

size_t CachingAllocator::bytes_in_use() const {
  std::lock_guard lock(mu_);
  return in_use_bytes_;
}

size_t CachingAllocator::bytes_cached() const {
  std::lock_guard lock(mu_);
  return cached_bytes_;
}

}  // namespace ftllm
