// GradientAccumulator: TF's ConditionalAccumulator, the heart of synchronous training. Workers
// apply gradients tagged with the global step they were computed at; a gradient older than the
// accumulator's step is stale and dropped (and counted). take() waits until `required`
// gradients are in, returns their average, resets, and advances the accumulator's step, so
// every gradient computed before this aggregate is stale from then on.
//
// A sparse accumulator (TF's SparseConditionalAccumulator) takes IndexedSlices gradients (row
// indices and their rows) and sums them per row without densifying; take_sparse() returns the
// touched rows, indices sorted, each row's sum divided by the number of gradients accumulated
// (TF's average: a row missing from some gradients counts as zero there).
//
// Thread-safe. Waiting takers are callbacks (no thread blocks); close() fails them with
// OutOfRange so a finished run releases whoever still waits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/partial_shape.hpp"

namespace psflow {

class GradientAccumulator {
 public:
  using TakeCallback = std::function<void(const Status&, Tensor)>;
  // Sparse takes get (status, indices int64 [k], rows [k, row...]).
  using SparseTakeCallback = std::function<void(const Status&, Tensor, Tensor)>;

  GradientAccumulator(std::string name, DType dtype, PartialShape shape, bool sparse = false)
      : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)), sparse_(sparse) {}

  bool sparse() const noexcept { return sparse_; }

  // Adds the rows `values` ([n, row...]) at `indices` ([n], int32/int64) computed at
  // `local_step`; false when stale. Sparse accumulators only.
  bool apply_sparse(const Tensor& indices, const Tensor& values, std::int64_t local_step) {
    if (!sparse_)
      throw InvalidArgument("accumulator '" + name_ +
                            "' holds dense gradients; it got an IndexedSlices");
    if (values.dtype() != dtype_ || !shape_.known || shape_.dims.empty() || indices.rank() != 1 ||
        values.rank() != shape_.dims.size() || values.shape()[0] != indices.size() ||
        !std::equal(values.shape().begin() + 1, values.shape().end(), shape_.dims.begin() + 1,
                    [](std::size_t a, std::int64_t b) {
                      return b < 0 || a == static_cast<std::size_t>(b);
                    }))
      throw InvalidArgument("accumulator '" + name_ + "' holds rows of " +
                            std::string(dtype_name(dtype_)) + shape_.to_string() +
                            " gradients, got indices " + indices.summary() + " and rows " +
                            values.summary());
    const std::int64_t rows = shape_.dims[0];
    std::vector<std::int64_t> ids(indices.size());
    visit_index_dtype(indices.dtype(), "accumulator '" + name_ + "' indices", [&](auto tag) {
      using I = typename decltype(tag)::type;
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = indices.data<I>()[i];
    });
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (rows >= 0 && (ids[i] < 0 || ids[i] >= rows))  // rows -1: a dynamic table, any key
        throw InvalidArgument("accumulator '" + name_ + "': index " + std::to_string(ids[i]) +
                              " is outside the variable's " + std::to_string(rows) + " rows");
    const std::size_t row = ids.empty() ? 0 : values.size() / ids.size();
    std::vector<std::pair<TakeCallback, Tensor>> ready_dense;
    std::vector<std::pair<SparseTakeCallback, std::pair<Tensor, Tensor>>> ready;
    {
      std::lock_guard lock(mutex_);
      if (closed_) throw OutOfRange("accumulator '" + name_ + "' is closed: training has ended");
      if (local_step < global_step_) {
        ++dropped_;
        return false;
      }
      visit_floating_dtype(dtype_, "gradient accumulation", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = values.data<T>();
        for (std::size_t i = 0; i < ids.size(); ++i) {
          auto [it, fresh] = row_of_.try_emplace(ids[i], row_of_.size());
          if (fresh) row_sums_.resize(row_sums_.size() + row, 0.0);
          double* dst = row_sums_.data() + it->second * row;
          for (std::size_t j = 0; j < row; ++j) dst[j] += static_cast<double>(src[i * row + j]);
        }
      });
      ++count_;
      collect_ready(ready_dense, ready);
    }
    for (auto& [callback, value] : ready)
      callback(Status{}, std::move(value.first), std::move(value.second));
    return true;
  }

  // Like take(), for a sparse accumulator.
  std::uint64_t take_sparse(int required, SparseTakeCallback done) {
    if (!sparse_)
      throw InvalidArgument("accumulator '" + name_ + "' holds dense gradients, not IndexedSlices");
    return add_taker(required, {}, std::move(done));
  }

  // Adds `gradient` computed at `local_step`; false when it was stale (dropped).
  bool apply(const Tensor& gradient, std::int64_t local_step) {
    if (sparse_)
      throw InvalidArgument("accumulator '" + name_ +
                            "' holds IndexedSlices gradients; it got a dense one");
    if (gradient.dtype() != dtype_ || !shape_.is_compatible_with(gradient.shape()))
      throw InvalidArgument("accumulator '" + name_ + "' holds " + std::string(dtype_name(dtype_)) +
                            shape_.to_string() + " gradients, got " + gradient.summary());
    std::vector<std::pair<TakeCallback, Tensor>> ready;
    std::vector<std::pair<SparseTakeCallback, std::pair<Tensor, Tensor>>> ready_sparse;
    {
      std::lock_guard lock(mutex_);
      if (closed_) throw OutOfRange("accumulator '" + name_ + "' is closed: training has ended");
      if (local_step < global_step_) {
        ++dropped_;
        return false;
      }
      if (count_ == 0) {
        sum_ = gradient.deep_copy();
      } else {
        if (gradient.shape() != sum_.shape())
          throw InvalidArgument("accumulator '" + name_ + "' got gradients of shapes " +
                                shape_string(sum_.shape()) + " and " +
                                shape_string(gradient.shape()));
        visit_floating_dtype(dtype_, "gradient accumulation", [&](auto tag) {
          using T = typename decltype(tag)::type;
          T* dst = sum_.data<T>();
          const T* src = gradient.data<T>();
          for (std::size_t i = 0; i < sum_.size(); ++i) dst[i] += src[i];
        });
      }
      ++count_;
      collect_ready(ready, ready_sparse);
    }
    for (auto& [callback, value] : ready) callback(Status{}, std::move(value));
    return true;
  }

  // Calls `done` with the average of `required` gradients once they are in; returns an id for
  // cancel_take(). Dense accumulators only.
  std::uint64_t take(int required, TakeCallback done) {
    if (sparse_)
      throw InvalidArgument("accumulator '" + name_ + "' holds IndexedSlices; use take_sparse");
    return add_taker(required, std::move(done), {});
  }

  // Removes a waiting take; true when it had not completed yet.
  bool cancel_take(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    return takers_.erase(id) == 1;
  }

  // Sets the step below which gradients are stale (the chief does this when a session starts).
  void set_global_step(std::int64_t step) {
    std::lock_guard lock(mutex_);
    if (step != global_step_) reset();  // gradients from another step no longer count
    global_step_ = step;
  }

  // Fails every waiting take, and every later apply/take, with OutOfRange.
  void close() {
    std::map<std::uint64_t, Taker> takers;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      takers.swap(takers_);
    }
    const Status status(ErrorCode::out_of_range,
                        "accumulator '" + name_ + "' closed: training has ended");
    for (auto& [id, t] : takers) {
      if (t.done) t.done(status, Tensor());
      if (t.done_sparse) t.done_sparse(status, Tensor(), Tensor());
    }
  }
  // Opens a closed accumulator again (a new session of the chief).
  void reopen() {
    std::lock_guard lock(mutex_);
    closed_ = false;
  }

  std::int64_t num_dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
  }
  std::int64_t global_step() const {
    std::lock_guard lock(mutex_);
    return global_step_;
  }
  int num_accumulated() const {
    std::lock_guard lock(mutex_);
    return count_;
  }

 private:
  struct Taker {
    int required;
    TakeCallback done;               // dense accumulators
    SparseTakeCallback done_sparse;  // sparse ones
  };

  std::uint64_t add_taker(int required, TakeCallback done, SparseTakeCallback done_sparse) {
    if (required < 1)
      throw InvalidArgument("accumulator '" + name_ + "': num_required must be at least 1");
    std::vector<std::pair<TakeCallback, Tensor>> ready;
    std::vector<std::pair<SparseTakeCallback, std::pair<Tensor, Tensor>>> ready_sparse;
    std::uint64_t id = 0;
    Status closed;
    {
      std::lock_guard lock(mutex_);
      if (closed_) {
        closed = Status(ErrorCode::out_of_range,
                        "accumulator '" + name_ + "' is closed: training has ended");
      } else {
        id = next_taker_++;
        takers_.emplace(id, Taker{required, std::move(done), std::move(done_sparse)});
        collect_ready(ready, ready_sparse);
      }
    }
    if (!closed.ok()) {
      if (done) done(closed, Tensor());
      if (done_sparse) done_sparse(closed, Tensor(), Tensor());
    }
    for (auto& [callback, value] : ready) callback(Status{}, std::move(value));
    for (auto& [callback, value] : ready_sparse)
      callback(Status{}, std::move(value.first), std::move(value.second));
    return id;
  }

  void reset() {
    count_ = 0;
    sum_ = Tensor();
    row_of_.clear();
    row_sums_.clear();
  }

  // The sparse average: indices sorted, each row's sum / count_, in the accumulator's dtype.
  std::pair<Tensor, Tensor> sparse_average() const {
    std::vector<std::pair<std::int64_t, std::size_t>> order(row_of_.begin(), row_of_.end());
    std::sort(order.begin(), order.end());
    Tensor indices(DType::int64, {order.size()});
    Shape shape{order.size()};
    for (std::size_t d = 1; d < shape_.dims.size(); ++d)
      shape.push_back(static_cast<std::size_t>(shape_.dims[d]));
    Tensor values = Tensor::uninitialized(dtype_, shape);
    const std::size_t row = order.empty() ? 0 : values.size() / order.size();
    visit_floating_dtype(dtype_, "gradient accumulation", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = values.data<T>();
      for (std::size_t k = 0; k < order.size(); ++k) {
        indices.data<std::int64_t>()[k] = order[k].first;
        const double* src = row_sums_.data() + order[k].second * row;
        for (std::size_t j = 0; j < row; ++j)
          dst[k * row + j] = static_cast<T>(src[j] / static_cast<double>(count_));
      }
    });
    return {std::move(indices), std::move(values)};
  }

  // Under the lock: hands the average to the oldest taker when enough gradients are in.
  void collect_ready(
      std::vector<std::pair<TakeCallback, Tensor>>& ready,
      std::vector<std::pair<SparseTakeCallback, std::pair<Tensor, Tensor>>>& ready_sparse) {
    if (takers_.empty() || count_ < takers_.begin()->second.required) return;
    Taker& taker = takers_.begin()->second;
    if (sparse_) {
      ready_sparse.emplace_back(std::move(taker.done_sparse), sparse_average());
    } else {
      Tensor average = std::move(sum_);
      visit_floating_dtype(dtype_, "gradient accumulation", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = average.data<T>();
        const T n = static_cast<T>(count_);
        for (std::size_t i = 0; i < average.size(); ++i) p[i] /= n;
      });
      ready.emplace_back(std::move(taker.done), std::move(average));
    }
    takers_.erase(takers_.begin());
    reset();
    ++global_step_;
  }

  const std::string name_;
  const DType dtype_;
  const PartialShape shape_;
  const bool sparse_;
  mutable std::mutex mutex_;
  Tensor sum_;                                            // dense: the sum so far
  std::unordered_map<std::int64_t, std::size_t> row_of_;  // sparse: index -> its sum's slot
  std::vector<double> row_sums_;                          // sparse: the row sums, slot by slot
  int count_ = 0;
  std::int64_t global_step_ = 0;
  std::int64_t dropped_ = 0;
  bool closed_ = false;
  std::uint64_t next_taker_ = 1;
  std::map<std::uint64_t, Taker> takers_;
};

}  // namespace psflow
