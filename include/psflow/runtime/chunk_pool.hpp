// ChunkPool: fixed-size chunks of memory carved from 2 MiB blocks that the kernel is asked to
// back with transparent huge pages (madvise(MADV_HUGEPAGE)), for the rows of a dynamic
// embedding table (runtime/dynamic_table.hpp). A table's lookups hit random rows of a large
// heap: with 4 KiB pages nearly every row costs a TLB miss (and in a VM a two-level page walk),
// with 2 MiB pages one entry covers thousands of rows. Released chunks are kept for reuse, so
// a table under eviction holds its memory at its high-water mark instead of churning pages.
//
// Thread-safe: allocate and release take the pool's mutex (a table calls them once per chunk of
// rows, under a stripe's lock). Chunks stay valid until the pool is destroyed.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace psflow {

class ChunkPool {
 public:
  static constexpr std::size_t kBlockBytes = std::size_t{2} << 20;

  explicit ChunkPool(std::size_t chunk_bytes)
      : chunk_bytes_((std::max<std::size_t>(chunk_bytes, 64) + 63) / 64 * 64),
        block_bytes_((chunk_bytes_ + kBlockBytes - 1) / kBlockBytes * kBlockBytes) {}
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }

  // A chunk of chunk_bytes(), its contents unset. Throws std::bad_alloc when memory runs out.
  std::byte* allocate() {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      std::byte* chunk = free_.back();
      free_.pop_back();
      return chunk;
    }
    if (next_ == nullptr || next_ + chunk_bytes_ > end_) {
      void* block = std::aligned_alloc(kBlockBytes, block_bytes_);
      if (block == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
      madvise(block, block_bytes_, MADV_HUGEPAGE);  // advice only: without THP nothing changes
#endif
      blocks_.emplace_back(static_cast<std::byte*>(block));
      next_ = blocks_.back().get();
      end_ = next_ + block_bytes_;
    }
    std::byte* chunk = next_;
    next_ += chunk_bytes_;
    return chunk;
  }

  // Gives a chunk of this pool back, for a later allocate().
  void release(std::byte* chunk) {
    std::lock_guard lock(mutex_);
    free_.push_back(chunk);
  }

  // Bytes of the blocks held (chunks in use, free and not yet handed out).
  std::size_t bytes() const {
    std::lock_guard lock(mutex_);
    return blocks_.size() * block_bytes_;
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };

  const std::size_t chunk_bytes_, block_bytes_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<std::byte, Free>> blocks_;
  std::vector<std::byte*> free_;
  std::byte* next_ = nullptr;  // the unused rest of the newest block
  std::byte* end_ = nullptr;
};

}  // namespace psflow
