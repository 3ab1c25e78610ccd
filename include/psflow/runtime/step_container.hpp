// StepContainer: state that the kernels of one step share and that ends with the step, TF's
// per-step resource container: the tensor stacks of a while_loop's gradient
// (graph/stack_ops.hpp), keyed by the name in their handle.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"

namespace psflow {

// A stack of tensors (StackV2).
class TensorStack {
 public:
  TensorStack(std::string name, DType dtype, std::int64_t max_size)
      : name_(std::move(name)), dtype_(dtype), max_size_(max_size) {}

  void push(Tensor value) {
    if (value.dtype() != dtype_)
      throw InvalidArgument("stack '" + name_ + "' holds " + std::string(dtype_name(dtype_)) +
                            " tensors; cannot push " + value.summary());
    std::lock_guard lock(mutex_);
    if (max_size_ >= 0 && static_cast<std::int64_t>(values_.size()) >= max_size_)
      throw ResourceExhausted("stack '" + name_ + "' is full: it holds at most " +
                              std::to_string(max_size_) + " tensors");
    values_.push_back(std::move(value));
  }

  Tensor pop() {
    std::lock_guard lock(mutex_);
    if (values_.empty())
      throw InvalidArgument("stack '" + name_ +
                            "' is empty: it was popped more often than pushed in this step");
    Tensor value = std::move(values_.back());
    values_.pop_back();
    return value;
  }

 private:
  const std::string name_;
  const DType dtype_;
  const std::int64_t max_size_;
  std::mutex mutex_;
  std::vector<Tensor> values_;
};

class StepContainer {
 public:
  // Makes the stack `name`; InvalidArgument when it exists already in this step.
  void create_stack(const std::string& name, DType dtype, std::int64_t max_size) {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = stacks_.try_emplace(name);
    if (!inserted) throw InvalidArgument("stack '" + name + "' was made twice in one step");
    it->second = std::make_shared<TensorStack>(name, dtype, max_size);
  }

  // The stack `name`; NotFound when this step made none of that name.
  std::shared_ptr<TensorStack> stack(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = stacks_.find(name);
    if (it == stacks_.end())
      throw NotFound("no stack '" + name + "' in this step: its StackV2 did not run here");
    return it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<TensorStack>> stacks_;
};

}  // namespace psflow
