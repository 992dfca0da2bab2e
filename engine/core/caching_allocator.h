// A caching allocator over a slow raw allocator (cudaMalloc synchronises the device and takes
// milliseconds): freed blocks are kept by size class and handed out again. Small requests round up
// to a power of two (at least 512 bytes), large ones to whole 2 MiB, so the per-step temporaries of a
// forward pass, which repeat their sizes, are served from the cache after the first step. When the
// raw allocator fails, the cache is returned to it and the request tried once more.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ftllm {

class CachingAllocator {
 public:
  // raw_alloc returns nullptr when it has no memory left.
  CachingAllocator(std::string name, std::function<void*(size_t)> raw_alloc, std::function<void(void*)> raw_free);
  ~CachingAllocator();  // returns every cached block; blocks still in use must not outlive it
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Throws EngineError naming the device and the sizes when even an empty cache cannot serve it.
  void* allocate(size_t bytes);
  void free(void* p);
  void release_cached();  // hands every cached block back to the raw allocator

  static size_t size_class(size_t bytes);
  size_t bytes_in_use() const;
  size_t bytes_cached() const;

 private:
  std::string name_;
  std::function<void*(size_t)> raw_alloc_;
  std::function<void(void*)> raw_free_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> cached_;        // size class -> free block
  std::unordered_map<void*, size_t> in_use_;   // block -> size class
  size_t in_use_bytes_ = 0, cached_bytes_ = 0;
  void release_cached_locked();
};

}  // namespace ftllm
