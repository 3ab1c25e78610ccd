// GradientAccumulator: TF's ConditionalAccumulator, the heart of synchronous training. Workers
// apply gradients tagged with the global step they were computed at; a gradient older than the
// accumulator's step is stale and dropped (and counted). take() waits until `required`
// gradients are in, returns their average, resets, and advances the accumulator's step, so
// every gradient computed before this aggregate is stale from then on.
//
// Thread-safe. Waiting takers are callbacks (no thread blocks); close() fails them with
// OutOfRange so a finished run releases whoever still waits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/partial_shape.hpp"

namespace psflow {

class GradientAccumulator {
 public:
  using TakeCallback = std::function<void(const Status&, Tensor)>;

  GradientAccumulator(std::string name, DType dtype, PartialShape shape)
      : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)) {}

  // Adds `gradient` computed at `local_step`; false when it was stale (dropped).
  bool apply(const Tensor& gradient, std::int64_t local_step) {
    if (gradient.dtype() != dtype_ || !shape_.is_compatible_with(gradient.shape()))
      throw InvalidArgument("accumulator '" + name_ + "' holds " + std::string(dtype_name(dtype_)) +
                            shape_.to_string() + " gradients, got " + gradient.summary());
    std::vector<std::pair<TakeCallback, Tensor>> ready;
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
      collect_ready(ready);
    }
    for (auto& [callback, value] : ready) callback(Status{}, std::move(value));
    return true;
  }

  // Calls `done` with the average of `required` gradients once they are in; returns an id for
  // cancel_take().
  std::uint64_t take(int required, TakeCallback done) {
    if (required < 1)
      throw InvalidArgument("accumulator '" + name_ + "': num_required must be at least 1");
    std::vector<std::pair<TakeCallback, Tensor>> ready;
    std::uint64_t id = 0;
    Status closed;
    {
      std::lock_guard lock(mutex_);
      if (closed_) {
        closed = Status(ErrorCode::out_of_range,
                        "accumulator '" + name_ + "' is closed: training has ended");
      } else {
        id = next_taker_++;
        takers_.emplace(id, Taker{required, std::move(done)});
        collect_ready(ready);
      }
    }
    if (!closed.ok()) done(closed, Tensor());
    for (auto& [callback, value] : ready) callback(Status{}, std::move(value));
    return id;
  }

  // Removes a waiting take; true when it had not completed yet.
  bool cancel_take(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    return takers_.erase(id) == 1;
  }

  // Sets the step below which gradients are stale (the chief does this when a session starts).
  void set_global_step(std::int64_t step) {
    std::lock_guard lock(mutex_);
    if (step != global_step_) {  // gradients from another step no longer count
      count_ = 0;
      sum_ = Tensor();
    }
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
    for (auto& [id, t] : takers)
      t.done(
          Status(ErrorCode::out_of_range, "accumulator '" + name_ + "' closed: training has ended"),
          Tensor());
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
    TakeCallback done;
  };

  // Under the lock: hands the average to the oldest taker when enough gradients are in.
  void collect_ready(std::vector<std::pair<TakeCallback, Tensor>>& ready) {
    if (takers_.empty() || count_ < takers_.begin()->second.required) return;
    Tensor average = std::move(sum_);
    visit_floating_dtype(dtype_, "gradient accumulation", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = average.data<T>();
      const T n = static_cast<T>(count_);
      for (std::size_t i = 0; i < average.size(); ++i) p[i] /= n;
    });
    ready.emplace_back(std::move(takers_.begin()->second.done), std::move(average));
    takers_.erase(takers_.begin());
    count_ = 0;
    sum_ = Tensor();
    ++global_step_;
  }

  const std::string name_;
  const DType dtype_;
  const PartialShape shape_;
  mutable std::mutex mutex_;
  Tensor sum_;
  int count_ = 0;
  std::int64_t global_step_ = 0;
  std::int64_t dropped_ = 0;
  bool closed_ = false;
  std::uint64_t next_taker_ = 1;
  std::map<std::uint64_t, Taker> takers_;
};

}  // namespace psflow
