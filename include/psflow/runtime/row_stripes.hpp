// The lock stripes of a variable's rows. Sparse updates and gathers of one variable (a shard of
// an embedding table) lock only the stripes of the rows they touch (VariableResource::RowAccess),
// so two workers' updates to different rows run at once. RowStripes groups a batch's rows by
// stripe so each stripe is locked once per batch, one at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace psflow {

inline constexpr std::size_t kRowStripes = 32;

// Consecutive rows fall in different stripes: a batch of nearby ids spreads over all of them.
constexpr std::size_t row_stripe(std::int64_t row) noexcept {
  return static_cast<std::size_t>(row) % kRowStripes;
}

// The positions of a batch's rows grouped by stripe (a counting sort, stable within a stripe, so
// a row given twice is visited in the order given).
class RowStripes {
 public:
  explicit RowStripes(std::span<const std::int64_t> ids) : at_(ids.size()) {
    for (const std::int64_t id : ids) ++begin_[row_stripe(id) + 1];
    for (std::size_t s = 0; s < kRowStripes; ++s) begin_[s + 1] += begin_[s];
    auto next = begin_;
    for (std::size_t k = 0; k < ids.size(); ++k) at_[next[row_stripe(ids[k])]++] = k;
  }

  // Calls fn(stripe, at) for each stripe holding rows of the batch: `at` are the positions in
  // the batch of its rows in that stripe, in order.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (std::size_t s = 0; s < kRowStripes; ++s)
      if (begin_[s + 1] > begin_[s])
        fn(s, std::span<const std::size_t>(at_).subspan(begin_[s], begin_[s + 1] - begin_[s]));
  }

 private:
  std::vector<std::size_t> at_;
  std::array<std::size_t, kRowStripes + 1> begin_{};
};

}  // namespace psflow
