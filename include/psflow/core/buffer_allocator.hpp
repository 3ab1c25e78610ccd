// Tensor memory: where the bytes of every Tensor come from, and why freed ones are kept.
//
// Training allocates the same sizes step after step (received gradients and variables, kernel
// outputs), and both ends of that are slow when left to malloc:
// - Large blocks. glibc maps every block above its mmap threshold (at most 32 MiB) afresh and
//   unmaps it on free, so each 4 KiB page of the next one faults on first touch; on this VM that
//   is 10-80 us a page (a fresh 64 MiB receive buffer took 0.3-1.3 s to fill, a reused one
//   20 ms). Freed blocks from 256 KiB up are therefore kept in one process-wide cache, bounded
//   in bytes (oldest dropped first), and handed to the next request of the same size class.
// - Small blocks. A scalar op allocates for every output. Blocks up to 4 KiB are recycled
//   through a short per-thread free list, with no lock (glibc's own per-thread cache stops at
//   about 1 KiB).
// - Blocks freed on another thread. A worker's I/O thread allocates every tensor it receives
//   and the caller frees it, so neither thread's own list helps. Blocks under 256 KiB that a
//   thread cannot keep go on one process-wide shelf (a lock, a few per size, bounded in bytes)
//   that serves the next request of their size on any thread. Left to glibc, each went back to
//   the allocating thread's heap, merged into its top and made the next allocation consolidate
//   the heap's fast bins: about 1 µs of every small step in the worker.
// - Aligned blocks from glibc's memalign are never reused for a request of their own size
//   (see aligned_new), so every block here comes from plain malloc, aligned by hand.
// Under AddressSanitizer cached blocks are poisoned, so a use after free is still reported.
//
// Thread-safe.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <exception>
#include <iterator>
#include <mutex>
#include <new>
#include <string>

#include "psflow/core/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define PSFLOW_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define PSFLOW_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define PSFLOW_POISON(p, n) ((void)(p), (void)(n))
#define PSFLOW_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace psflow {

// What the large-buffer cache holds and how often it served a request.
struct BufferCacheStats {
  std::size_t cached_bytes = 0;  // freed bytes kept for reuse now
  std::size_t limit_bytes = 0;
  std::size_t hits = 0;    // large requests served from the cache
  std::size_t misses = 0;  // large requests that needed fresh memory
};

namespace detail {

inline constexpr std::size_t kBufferAlignment = 64;
inline constexpr std::size_t kSmallBlockMax = 4096;        // per-thread free lists up to here
inline constexpr std::size_t kLargeBlockMin = 256 * 1024;  // the shared cache from here
inline constexpr std::size_t kDefaultBufferCacheLimit = std::size_t{1} << 30;

// A block of tensor memory: `capacity` is what was allocated, at least the bytes asked for.
struct Block {
  void* data = nullptr;
  std::size_t capacity = 0;
};

// Aligned blocks come from plain malloc, aligned by hand, never from glibc's aligned allocation
// (memalign, behind operator new with an alignment): glibc 2.36 (Debian 12) serves a memalign
// request by carving the size plus the alignment out of its heap and trimming both ends, so a
// freed block can never serve the next request of its own size. Where tensors are allocated on
// one thread and freed on another (a worker's I/O thread receives the ps's 4-16 KiB variable,
// the caller frees it), the heap then grew by the whole tensor nearly every step (a 16 KiB
// step: 134 MB of heap after 20000 steps, 1.3 MB of it in use), and every step paid page
// faults for fresh memory. Plain malloc reuses a freed block for the next request of its size.
inline constexpr std::size_t kAlignedOverhead = kBufferAlignment + sizeof(void*);

inline void* aligned_new(std::size_t bytes) {
  if (bytes > SIZE_MAX - kAlignedOverhead) throw std::bad_alloc();
  void* base = std::malloc(bytes + kAlignedOverhead);
  if (base == nullptr) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(base);
  const std::uintptr_t aligned =
      (start + sizeof(void*) + kBufferAlignment - 1) & ~std::uintptr_t{kBufferAlignment - 1};
  reinterpret_cast<void**>(aligned)[-1] = base;  // where free() must start
  // The slack after the block stays out of bounds under AddressSanitizer.
  PSFLOW_POISON(reinterpret_cast<char*>(aligned) + bytes,
                start + bytes + kAlignedOverhead - (aligned + bytes));
  return reinterpret_cast<void*>(aligned);
}
inline void aligned_delete(void* p) noexcept {
  if (p != nullptr) std::free(static_cast<void**>(p)[-1]);
}

// Size classes. Small: powers of two from 64 B. Large: eight classes per power of two (at most
// 12.5 % over; pages past the bytes a tensor uses are never touched, so cost no memory).
inline std::size_t small_class_index(std::size_t bytes) {
  return static_cast<std::size_t>(
             std::countr_zero(std::bit_ceil(std::max(bytes, kBufferAlignment)))) -
         6;
}
inline std::size_t large_class_capacity(std::size_t bytes) {
  const std::size_t step = std::bit_floor(bytes) / 8;
  return (bytes + step - 1) / step * step;
}

// The cache limit PSFLOW_BUFFER_CACHE_MB asks for: a whole number of MiB.
inline std::size_t buffer_cache_limit_from(const std::string& megabytes) {
  std::size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(megabytes, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != megabytes.size() || megabytes.front() == '-' ||
      value > (std::size_t{1} << 40))
    throw InvalidArgument(
        "PSFLOW_BUFFER_CACHE_MB='" + megabytes +
        "' is not a size: give the MiB of freed tensor buffers to keep for reuse, "
        "e.g. 1024, or 0 to keep none");
  return static_cast<std::size_t>(value) << 20;
}

// Freed large blocks, oldest first; a request takes the newest block of its exact class.
class LargeBlockCache {
 public:
  static LargeBlockCache& instance() {
    // Never destroyed: tensors in static objects may be freed after any static destructor.
    static LargeBlockCache* cache = new LargeBlockCache;
    return *cache;
  }

  Block take(std::size_t bytes) {
    const std::size_t capacity = large_class_capacity(bytes);
    {
      std::lock_guard lock(mutex_);
      for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
        if (it->capacity != capacity) continue;
        Block block = *it;
        blocks_.erase(std::next(it).base());
        cached_bytes_ -= capacity;
        ++hits_;
        PSFLOW_UNPOISON(block.data, block.capacity);
        return block;
      }
      ++misses_;
    }
    return Block{aligned_new(capacity), capacity};
  }

  void give_back(Block block) noexcept {
    std::deque<Block> dropped;
    {
      std::lock_guard lock(mutex_);
      if (block.capacity > limit_) {
        dropped.push_back(block);
      } else {
        PSFLOW_POISON(block.data, block.capacity);
        blocks_.push_back(block);
        cached_bytes_ += block.capacity;
        dropped = take_oldest_over_limit();
      }
    }
    for (Block b : dropped) release(b);  // outside the lock: munmap is slow
  }

  void set_limit(std::size_t bytes) {
    std::deque<Block> dropped;
    {
      std::lock_guard lock(mutex_);
      limit_ = bytes;
      dropped = take_oldest_over_limit();
    }
    for (Block b : dropped) release(b);
  }

  BufferCacheStats stats() const {
    std::lock_guard lock(mutex_);
    return {cached_bytes_, limit_, hits_, misses_};
  }

 private:
  LargeBlockCache() : limit_(limit_from_environment()) {}

  static std::size_t limit_from_environment() {
    const char* mb = std::getenv("PSFLOW_BUFFER_CACHE_MB");
    return mb ? buffer_cache_limit_from(mb) : kDefaultBufferCacheLimit;
  }

  // Removes the oldest blocks until the cache is within its limit (mutex_ held); the caller
  // releases them after unlocking.
  std::deque<Block> take_oldest_over_limit() {
    std::deque<Block> dropped;
    while (cached_bytes_ > limit_) {
      dropped.push_back(blocks_.front());
      cached_bytes_ -= blocks_.front().capacity;
      blocks_.pop_front();
    }
    return dropped;
  }

  static void release(Block block) noexcept {
    PSFLOW_UNPOISON(block.data, block.capacity);
    aligned_delete(block.data);
  }

  mutable std::mutex mutex_;
  std::deque<Block> blocks_;
  std::size_t cached_bytes_ = 0;
  std::size_t limit_;
  std::size_t hits_ = 0;
  std::size_t misses_ = 0;
};

// Freed blocks under kLargeBlockMin, a short stack per size class, newest on top.
class BlockShelf {
 public:
  static BlockShelf& instance() {
    // Never destroyed, as LargeBlockCache.
    static BlockShelf* shelf = new BlockShelf;
    return *shelf;
  }

  // A shelved block of exactly `capacity` bytes (a class capacity), or null.
  void* take(std::size_t capacity) {
    const std::size_t c = class_index(capacity);
    std::lock_guard lock(mutex_);
    if (count_[c] == 0) return nullptr;
    bytes_ -= capacity;
    void* p = blocks_[c][--count_[c]];
    PSFLOW_UNPOISON(p, capacity);
    return p;
  }

  // Keeps the block unless its class or the shelf is full; false: the caller frees it.
  bool put(void* p, std::size_t capacity) {
    const std::size_t c = class_index(capacity);
    std::lock_guard lock(mutex_);
    if (count_[c] == kPerClass || bytes_ + capacity > kMaxBytes) return false;
    PSFLOW_POISON(p, capacity);
    blocks_[c][count_[c]++] = p;
    bytes_ += capacity;
    return true;
  }

 private:
  static constexpr std::size_t kPerClass = 16;
  static constexpr std::size_t kMaxBytes = std::size_t{16} << 20;
  // Classes: the seven small ones (64 B .. 4 KiB), then eight per power of two up to
  // kLargeBlockMin (the classes of large_class_capacity).
  static constexpr std::size_t kClasses = 7 + 8 * 6;

  static std::size_t class_index(std::size_t capacity) {
    if (capacity <= kSmallBlockMax) return small_class_index(capacity);
    const std::size_t power = std::bit_floor(capacity);
    return 7 + (static_cast<std::size_t>(std::countr_zero(power)) - 12) * 8 +
           (capacity - power) / (power / 8);
  }

  std::mutex mutex_;
  void* blocks_[kClasses][kPerClass] = {};
  std::size_t count_[kClasses] = {};
  std::size_t bytes_ = 0;
};

// Per-thread free lists of small blocks. Trivially destructible, so it stays usable while the
// thread exits; SmallBlockDrain empties it then and sends later frees straight to the heap.
struct SmallBlockCache {
  static constexpr std::size_t kClasses = 7;  // 64 B .. 4 KiB
  static constexpr std::size_t kPerClass = 32;
  void* blocks[kClasses][kPerClass];
  std::size_t count[kClasses];
  bool closed;
};
inline thread_local SmallBlockCache small_blocks{};

struct SmallBlockDrain {
  SmallBlockDrain() = default;
  SmallBlockDrain(const SmallBlockDrain&) = delete;
  SmallBlockDrain& operator=(const SmallBlockDrain&) = delete;
  ~SmallBlockDrain() {
    for (std::size_t c = 0; c < SmallBlockCache::kClasses; ++c) {
      for (std::size_t i = 0; i < small_blocks.count[c]; ++i) {
        PSFLOW_UNPOISON(small_blocks.blocks[c][i], std::size_t{64} << c);
        aligned_delete(small_blocks.blocks[c][i]);
      }
      small_blocks.count[c] = 0;
    }
    small_blocks.closed = true;
  }
};
inline thread_local SmallBlockDrain small_block_drain;

inline Block allocate_block(std::size_t bytes) {
  std::size_t capacity;
  if (bytes <= kSmallBlockMax) {
    const std::size_t c = small_class_index(bytes);
    capacity = std::size_t{64} << c;
    SmallBlockCache& cache = small_blocks;
    if (cache.count[c] > 0) {
      void* p = cache.blocks[c][--cache.count[c]];
      PSFLOW_UNPOISON(p, capacity);
      return Block{p, capacity};
    }
  } else {
    capacity = large_class_capacity(bytes);
    if (capacity >= kLargeBlockMin) return LargeBlockCache::instance().take(bytes);
  }
  if (void* p = BlockShelf::instance().take(capacity)) return Block{p, capacity};
  return Block{aligned_new(capacity), capacity};
}

inline void free_block(Block block) noexcept {
  if (block.capacity >= kLargeBlockMin) return LargeBlockCache::instance().give_back(block);
  if (block.capacity <= kSmallBlockMax) {
    const std::size_t c = small_class_index(block.capacity);
    SmallBlockCache& cache = small_blocks;
    if (!cache.closed && cache.count[c] < SmallBlockCache::kPerClass) {
      (void)&small_block_drain;  // registers the drain on this thread's first free
      PSFLOW_POISON(block.data, block.capacity);
      cache.blocks[c][cache.count[c]++] = block.data;
      return;
    }
  }
  if (!BlockShelf::instance().put(block.data, block.capacity)) aligned_delete(block.data);
}

}  // namespace detail

// Bytes of freed large tensor buffers kept for reuse (default 1 GiB, or the environment
// variable PSFLOW_BUFFER_CACHE_MB at first use). 0 turns the cache off; lowering the limit
// frees the oldest cached buffers at once.
inline void set_buffer_cache_limit(std::size_t bytes) {
  detail::LargeBlockCache::instance().set_limit(bytes);
}

inline BufferCacheStats buffer_cache_stats() { return detail::LargeBlockCache::instance().stats(); }

}  // namespace psflow

#undef PSFLOW_POISON
#undef PSFLOW_UNPOISON
