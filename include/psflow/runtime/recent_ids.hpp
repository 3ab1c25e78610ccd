// RecentIds: the last `capacity` distinct 64-bit ids added, oldest forgotten first, with a
// membership test. A task remembers the steps it finished this way, so that a tensor or a
// request arriving late for one of them is dropped instead of starting the step again.
//
// Every step looks an id up and adds one, so the layout is chosen for cache misses: one flat
// table probed linearly (one miss a lookup) and a ring of the ids in the order they came. A
// node-based set of 100000 random ids cost two to four misses a lookup and an allocation an
// insertion, about 1 µs of each small step in each process.
//
// Contract: not thread-safe (callers hold their own lock). Every id is accepted, 0 included
// (the table marks empty slots with 0 and keeps that one id's membership in a flag).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace psflow::detail {

class RecentIds {
 public:
  explicit RecentIds(std::size_t capacity) : order_(capacity) {
    if (capacity == 0) throw std::invalid_argument("RecentIds: capacity must be at least 1");
    std::size_t slots = 4;
    while (slots < 2 * capacity) slots *= 2;  // load at most one half: short probes
    slots_.assign(slots, kEmpty);
    mask_ = slots - 1;
  }

  bool contains(std::uint64_t id) const {
    if (id == kEmpty) return has_empty_id_;
    for (std::size_t i = home(id);; i = (i + 1) & mask_) {
      if (slots_[i] == id) return true;
      if (slots_[i] == kEmpty) return false;
    }
  }

  // Adds `id` unless present; when full, the oldest id is forgotten first.
  void add(std::uint64_t id) {
    if (contains(id)) return;
    if (size_ == order_.size()) {
      erase(order_[oldest_]);
      oldest_ = (oldest_ + 1) % order_.size();
      --size_;
    }
    order_[(oldest_ + size_) % order_.size()] = id;
    ++size_;
    if (id == kEmpty) {
      has_empty_id_ = true;
      return;
    }
    std::size_t i = home(id);
    while (slots_[i] != kEmpty) i = (i + 1) & mask_;
    slots_[i] = id;
  }

  std::size_t size() const { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = 0;

  std::size_t home(std::uint64_t id) const {
    // Fibonacci hashing: ids need not be random in their low bits.
    return static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }

  // Removes a present id, moving later members of its probe run back so that no lookup stops
  // early at the hole (no tombstones to accumulate).
  void erase(std::uint64_t id) {
    if (id == kEmpty) {
      has_empty_id_ = false;
      return;
    }
    std::size_t hole = home(id);
    while (slots_[hole] != id) hole = (hole + 1) & mask_;
    for (std::size_t i = (hole + 1) & mask_; slots_[i] != kEmpty; i = (i + 1) & mask_) {
      const std::size_t want = home(slots_[i]);
      // slots_[i] may fill the hole unless its home lies cyclically in (hole, i].
      const bool home_after_hole = ((i - want) & mask_) < ((i - hole) & mask_);
      if (home_after_hole) continue;
      slots_[hole] = slots_[i];
      hole = i;
    }
    slots_[hole] = kEmpty;
  }

  std::vector<std::uint64_t> order_;  // ring of members, oldest at oldest_
  std::size_t oldest_ = 0;
  std::size_t size_ = 0;
  std::vector<std::uint64_t> slots_;
  std::size_t mask_ = 0;
  bool has_empty_id_ = false;  // whether 0, which no slot can hold, is a member
};

}  // namespace psflow::detail
