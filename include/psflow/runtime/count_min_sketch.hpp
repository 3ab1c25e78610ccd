// CountMinSketch: how often each 64-bit key has been seen, in a fixed amount of memory, for the
// admission of keys into a dynamic embedding table (min_count sightings before a row is made).
//
// `depth` rows of `width` saturating 32-bit counters; a key adds one to one counter per row
// (chosen by an independent hash per row) and its count is the smallest of its counters. The
// count is never below the true one; above it by at most e * N / width (N: sightings counted
// so far) with probability at least 1 - e^-depth (Cormode and Muthukrishnan). With the default
// 4 x 65536 counters (1 MiB) and a million sightings, a count is at most 42 too high with
// probability 98%. Memory never grows with the number of keys.
//
// Thread-safe without locks: counters are relaxed atomics, so concurrent lookups of one shard
// count in parallel (a count read while another thread adds may miss that one sighting).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "psflow/core/counter_random.hpp"
#include "psflow/core/error.hpp"

namespace psflow {

class CountMinSketch {
 public:
  static constexpr std::size_t kDefaultDepth = 4;
  static constexpr std::size_t kDefaultWidth = std::size_t{1} << 16;

  explicit CountMinSketch(std::size_t depth = kDefaultDepth, std::size_t width = kDefaultWidth)
      : depth_(depth), width_(width), counters_(new std::atomic<std::uint32_t>[depth * width]) {
    if (depth == 0 || width == 0 || (width & (width - 1)) != 0)
      throw InvalidArgument("CountMinSketch: depth must be positive and width a power of two");
    clear();
  }

  std::size_t depth() const noexcept { return depth_; }
  std::size_t width() const noexcept { return width_; }

  // Counts one more sighting of `key`; returns its count including this one.
  std::uint32_t add(std::int64_t key) {
    std::uint32_t estimate = UINT32_MAX;
    for (std::size_t row = 0; row < depth_; ++row) {
      auto& counter = counters_[row * width_ + column(key, row)];
      std::uint32_t seen = counter.load(std::memory_order_relaxed);
      while (seen != UINT32_MAX &&
             !counter.compare_exchange_weak(seen, seen + 1, std::memory_order_relaxed)) {
      }
      estimate = std::min(estimate, seen == UINT32_MAX ? seen : seen + 1);
    }
    return estimate;
  }

  // The count of `key` so far.
  std::uint32_t count(std::int64_t key) const {
    std::uint32_t estimate = UINT32_MAX;
    for (std::size_t row = 0; row < depth_; ++row)
      estimate = std::min(
          estimate, counters_[row * width_ + column(key, row)].load(std::memory_order_relaxed));
    return estimate;
  }

  void clear() {
    for (std::size_t i = 0; i < depth_ * width_; ++i)
      counters_[i].store(0, std::memory_order_relaxed);
  }

  // The counters, row by row (depth * width values), to save them.
  std::vector<std::uint32_t> counters() const {
    std::vector<std::uint32_t> out(depth_ * width_);
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = counters_[i].load(std::memory_order_relaxed);
    return out;
  }

  // Adds saved counters to these (saturating). The sum of the sketches of several shards counts
  // every key at least as often as it was seen on any of them, so it can restore a table cut
  // into another number of shards. Throws InvalidArgument when the size is not depth * width.
  void merge(const std::uint32_t* values, std::size_t n) {
    if (n != depth_ * width_)
      throw InvalidArgument("admission counts of " + std::to_string(n) + " values cannot be " +
                            "merged into a sketch of " + std::to_string(depth_) + " x " +
                            std::to_string(width_) + " counters");
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t sum =
          std::uint64_t{counters_[i].load(std::memory_order_relaxed)} + values[i];
      counters_[i].store(static_cast<std::uint32_t>(std::min<std::uint64_t>(sum, UINT32_MAX)),
                         std::memory_order_relaxed);
    }
  }

 private:
  std::size_t column(std::int64_t key, std::size_t row) const {
    return static_cast<std::size_t>(
               detail::splitmix64_at(0x5bd1e995u + row, static_cast<std::uint64_t>(key))) &
           (width_ - 1);
  }

  std::size_t depth_;
  std::size_t width_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> counters_;
};

}  // namespace psflow
