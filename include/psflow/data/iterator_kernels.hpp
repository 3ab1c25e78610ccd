// Kernels of the iterator ops (data/iterator.hpp). The Iterator op's kernel owns the iterator's
// state: a session keeps one kernel per stateful node, so each session has its own pass, and the
// pass (with its threads) ends when the session lets the kernel go. Its output, a string
// handle, names the state in a registry of this process, where IteratorGetNext and MakeIterator
// find it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "psflow/core/compilation.hpp"
#include "psflow/data/iterator.hpp"
#include "psflow/runtime/kernel.hpp"

namespace psflow::data::detail {

// One iterator's pass. next() is serialised: elements come out in order, each once.
class IteratorState {
 public:
  IteratorState(std::shared_ptr<const DatasetNode> node, bool one_shot, ElementSpec spec,
                std::string name, std::shared_ptr<InputWaitCounters::Counter> waits)
      : node_(std::move(node)),
        one_shot_(one_shot),
        spec_(std::move(spec)),
        name_(std::move(name)),
        waits_(std::move(waits)) {}

  // Starts a new pass (MakeIterator).
  void restart() {
    std::unique_ptr<ElementIterator> fresh = iterate_owned(node_, 0);
    std::unique_ptr<ElementIterator> old;
    std::lock_guard lock(mutex_);
    old = std::exchange(pass_, std::move(fresh));
    ended_ = false;
    started_ = true;
  }  // `old` (and its threads) ends here, outside the lock

  // The next element's components, checked against the declared spec; OutOfRange at the end.
  std::vector<Tensor> next() {
    // The wait counted: for the lock (another step's get_next), a one-shot pass starting, and
    // the pipeline giving the element.
    const auto waiting_since = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    if (!started_) {
      if (!one_shot_)
        throw FailedPrecondition("GetNext() failed because the iterator '" + name_ +
                                 "' has not been initialized: run its initializer() first");
      pass_ = iterate_owned(node_, 0);
      started_ = true;
    }
    if (ended_ || !pass_) throw OutOfRange("End of sequence of iterator '" + name_ + "'");
    std::optional<Element> e = pass_->next();
    waits_->wait_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - waiting_since)
                                  .count(),
                              std::memory_order_relaxed);
    if (!e) {
      ended_ = true;
      pass_.reset();  // its threads end now, not with the session
      throw OutOfRange("End of sequence of iterator '" + name_ + "'");
    }
    check(*e);
    waits_->elements.fetch_add(1, std::memory_order_relaxed);
    return std::move(e->components);
  }

 private:
  void check(const Element& e) const {
    if (e.components.size() != spec_.size())
      throw InvalidArgument("iterator '" + name_ + "': an element has " +
                            std::to_string(e.components.size()) + " components, the first had " +
                            std::to_string(spec_.size()) + " (element from " + e.origin.describe() +
                            ")");
    for (std::size_t i = 0; i < spec_.size(); ++i) {
      const Tensor& t = e.components[i];
      if (t.dtype() != spec_[i].dtype || !spec_[i].shape.is_compatible_with(t.shape()))
        throw InvalidArgument("iterator '" + name_ + "': component " + std::to_string(i) + " is " +
                              t.summary() + ", the dataset declared " +
                              std::string(dtype_name(spec_[i].dtype)) + spec_[i].shape.to_string() +
                              " (element from " + e.origin.describe() + ")");
    }
  }

  const std::shared_ptr<const DatasetNode> node_;
  const bool one_shot_;
  const ElementSpec spec_;
  const std::string name_;
  const std::shared_ptr<InputWaitCounters::Counter> waits_;
  std::mutex mutex_;
  std::unique_ptr<ElementIterator> pass_;
  bool started_ = false, ended_ = false;
};

// The iterator states alive in this process, by handle.
class IteratorStates {
 public:
  static IteratorStates& global() {
    static IteratorStates states;
    return states;
  }
  std::string add(const std::shared_ptr<IteratorState>& state) {
    std::lock_guard lock(mutex_);
    const std::string handle = "iterator:" + std::to_string(next_++);
    states_[handle] = state;
    return handle;
  }
  void remove(const std::string& handle) {
    std::lock_guard lock(mutex_);
    states_.erase(handle);
  }
  std::shared_ptr<IteratorState> find(const std::string& handle, const std::string& who) const {
    std::lock_guard lock(mutex_);
    const auto it = states_.find(handle);
    std::shared_ptr<IteratorState> state = it == states_.end() ? nullptr : it->second.lock();
    if (!state)
      throw FailedPrecondition(who + ": the iterator " + handle + " is gone (its session ended)");
    return state;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::weak_ptr<IteratorState>> states_;
  std::uint64_t next_ = 1;
};

class IteratorKernel : public OpKernel {
 public:
  explicit IteratorKernel(const OpKernelConstruction& c) {
    const std::string& id = c.attr<std::string>("dataset");
    std::shared_ptr<const DatasetNode> node = DatasetRegistry::global().find(id);
    if (!node)
      throw FailedPrecondition(
          "iterator '" + c.name() + "' on " + c.device().name() +
          ": its dataset is not in this process. A Dataset runs in the process that built the "
          "graph (its functions are C++ code): place the iterator on that task, e.g. under "
          "device(\"/job:worker/task:<this worker>\")");
    state_ = std::make_shared<IteratorState>(std::move(node), c.attr<bool>("one_shot"),
                                             element_spec_from_attrs(c.node().attrs, c.name()),
                                             c.name(), InputWaitCounters::global().counter(id));
    handle_ = Tensor(IteratorStates::global().add(state_));
  }
  ~IteratorKernel() override { IteratorStates::global().remove(handle_.scalar<std::string>()); }
  void compute(OpKernelContext& ctx) override { ctx.set_output(0, handle_); }
  bool is_expensive() const override { return false; }

 private:
  std::shared_ptr<IteratorState> state_;
  Tensor handle_;
};

class IteratorGetNextKernel : public OpKernel {
 public:
  explicit IteratorGetNextKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    const std::shared_ptr<IteratorState> state = IteratorStates::global().find(
        ctx.input(0).scalar<std::string>(), "IteratorGetNext '" + ctx.name() + "'");
    std::vector<Tensor> components = state->next();
    for (std::size_t i = 0; i < components.size(); ++i)
      ctx.set_output(static_cast<int>(i), std::move(components[i]));
  }
};

class MakeIteratorKernel : public OpKernel {
 public:
  explicit MakeIteratorKernel(const OpKernelConstruction&) {}
  void compute(OpKernelContext& ctx) override {
    IteratorStates::global()
        .find(ctx.input(0).scalar<std::string>(), "MakeIterator '" + ctx.name() + "'")
        ->restart();
  }
};

PSFLOW_REGISTERED_AT_STARTUP const bool iterator_kernels_registered = [] {
  auto& r = KernelRegistry::global();
  r.add<IteratorKernel>("Iterator");
  r.add<IteratorGetNextKernel>("IteratorGetNext");
  r.add<MakeIteratorKernel>("MakeIterator");
  return true;
}();

}  // namespace psflow::data::detail
