// OpKernel: the code that runs one node, created once per executor from the node's
// definition; and the registry mapping op types to kernel factories. New ops (Send/Recv,
// Apply*, accumulators) add a kernel here without touching the executor.
//
// Kernels must be thread-safe: one executor may run several steps at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/runtime/device.hpp"
#include "psflow/runtime/step_container.hpp"

namespace psflow {

class Rendezvous;
class CancellationManager;
class StepStatsCollector;
class StepActivity;

// What one step shares across all its kernels.
struct StepContext {
  std::uint64_t step_id = 0;
  Rendezvous* rendezvous = nullptr;             // set when the step exchanges tensors (Send/Recv)
  CancellationManager* cancellation = nullptr;  // tells waiting kernels the step failed
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  StepStatsCollector* stats = nullptr;  // set when the run is traced (runtime/step_stats.hpp)
  StepActivity* activity = nullptr;     // set to know what a slow step runs (step_activity.hpp)
  StepContainer container;              // state its kernels share until it ends (stacks)
};

// A value flowing on an edge: a tensor, or a reference to a variable (VariableV2's output).
struct Entry {
  Tensor tensor;
  VariableResource* ref = nullptr;
};

// Which values around one op are dead: a dead value is the untaken output of a Switch
// (ops::cond) or was computed from one, and the ops that consume it are skipped
// (runtime/executor.hpp). The executor keeps these flags beside the entries, not in them, so a
// graph without control flow carries none.
struct DeadValues {
  const bool* inputs = nullptr;  // per data input; null when none is dead
  bool any_input = false;        // a data input is dead, or a control input's op was
  bool* outputs = nullptr;       // per output; null when the executor tracks no dead values
};

class OpKernelConstruction {
 public:
  OpKernelConstruction(const detail::Node& node, Device& device, const Graph& graph)
      : node_(node), device_(device), graph_(graph) {}
  const detail::Node& node() const noexcept { return node_; }
  const std::string& name() const noexcept { return node_.name; }
  Device& device() const noexcept { return device_; }
  template <class T>
  const T& attr(std::string_view key) const {
    return detail::attr_or_throw<T>(node_.attrs, key, node_.name);
  }
  bool has_attr(std::string_view key) const { return node_.attrs.find(key) != node_.attrs.end(); }
  DType input_dtype(int i) const {
    const TensorId& in = node_.inputs.at(static_cast<std::size_t>(i));
    return graph_.node(in.node).outputs.at(static_cast<std::size_t>(in.index)).dtype;
  }
  // "node:index" of input i, for error messages (e.g. the table a gather reads).
  std::string input_name(int i) const {
    const TensorId& in = node_.inputs.at(static_cast<std::size_t>(i));
    return graph_.node(in.node).name + ":" + std::to_string(in.index);
  }
  // The node that feeds input i (e.g. the table a lookup reads).
  const detail::Node& input_node(int i) const {
    return graph_.node(node_.inputs.at(static_cast<std::size_t>(i)).node);
  }
  const OutputSpec& output_spec(int i) const {
    return node_.outputs.at(static_cast<std::size_t>(i));
  }

 private:
  const detail::Node& node_;
  Device& device_;
  const Graph& graph_;
};

class OpKernelContext {
 public:
  OpKernelContext(const detail::Node& node, Device& device, StepContext& step,
                  const Entry* const* inputs, Entry* outputs, DeadValues dead = {})
      : node_(node),
        device_(device),
        step_(step),
        inputs_(inputs),
        outputs_(outputs),
        dead_(dead) {}

  int num_inputs() const noexcept { return static_cast<int>(node_.inputs.size()); }
  // Input i as a tensor; a variable reference is read (FailedPrecondition if uninitialized).
  const Tensor& input(int i) {
    const Entry& e = *inputs_[i];
    if (!e.ref) return e.tensor;
    if (derefs_.empty()) derefs_.resize(node_.inputs.size());
    derefs_[static_cast<std::size_t>(i)] = e.ref->read();
    return derefs_[static_cast<std::size_t>(i)];
  }
  // Input i as a variable; InvalidArgument if it is a plain tensor.
  VariableResource& ref_input(int i) {
    if (!inputs_[i]->ref)
      throw InvalidArgument("input " + std::to_string(i) + " of '" + node_.name +
                            "' must be a variable");
    return *inputs_[i]->ref;
  }
  void set_output(int i, Tensor value) { outputs_[i].tensor = std::move(value); }
  void set_output_ref(int i, VariableResource* ref) { outputs_[i].ref = ref; }
  // Output `out` is input `in` as it came: a tensor, or the same variable reference.
  void forward_input(int in, int out) {
    if (in < 64 && ((movable_inputs_ >> in) & 1)) {
      outputs_[out] = std::move(*const_cast<Entry*>(inputs_[in]));
      return;
    }
    outputs_[out].tensor = inputs_[in]->tensor;
    outputs_[out].ref = inputs_[in]->ref;
  }
  // For an executor whose inputs belong to this op alone (runtime/executor.hpp, in a loop's
  // frames): bit i set lets forward_input move input i instead of copying it.
  void allow_moving_inputs(std::uint64_t mask) noexcept { movable_inputs_ = mask; }

  // Dead values, for the kernels that see them (OpKernel::handles_dead_inputs): whether input
  // i is dead, whether any data or control input is, and making output i dead.
  bool input_is_dead(int i) const { return dead_.inputs && dead_.inputs[i]; }
  bool inputs_dead() const noexcept { return dead_.any_input; }
  void set_output_dead(int i) {
    if (!dead_.outputs)
      throw Internal("'" + node_.name + "' makes a dead value, but its executor tracks none");
    outputs_[i] = Entry{};
    dead_.outputs[i] = true;
  }
  // Allocates output i (contents unspecified: the kernel writes every element).
  Tensor& allocate_output(int i, DType dtype, Shape shape) {
    outputs_[i].tensor = Tensor::uninitialized(dtype, std::move(shape));
    return outputs_[i].tensor;
  }

  const detail::Node& node() const noexcept { return node_; }
  const std::string& name() const noexcept { return node_.name; }
  Device& device() noexcept { return device_; }
  StepContext& step() noexcept { return step_; }

 private:
  const detail::Node& node_;
  Device& device_;
  StepContext& step_;
  const Entry* const* inputs_;
  Entry* outputs_;
  DeadValues dead_;
  std::uint64_t movable_inputs_ = 0;
  std::vector<Tensor> derefs_;  // storage for variable reads
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  // Computes the outputs; reports failure by throwing a psflow::Error.
  virtual void compute(OpKernelContext& ctx) = 0;
  // Cheap kernels run inline on the thread that made them ready; expensive ones may be handed
  // to another thread when several are ready at once.
  virtual bool is_expensive() const { return true; }
  // True when its cost does not follow from its inputs' sizes (it writes or reads files, or
  // walks a whole table): it never runs on a network thread (runtime/network_thread.hpp).
  virtual bool runs_long() const { return false; }
  // True for the kernels that run even when an input is dead and decide what that means
  // (Merge, _Send, _Recv). Any other op with a dead input is skipped: its outputs are dead.
  virtual bool handles_dead_inputs() const { return false; }
  // True for the kernels that may make an output dead from live inputs (Switch, _Recv).
  virtual bool makes_dead_outputs() const { return false; }
};

// A kernel that finishes later (e.g. Recv waiting for a tensor). It must call `done` exactly
// once, with the outputs set or an error.
class AsyncOpKernel : public OpKernel {
 public:
  using DoneCallback = std::function<void(Status)>;
  void compute(OpKernelContext&) final { throw Internal("AsyncOpKernel::compute called"); }
  virtual void compute_async(OpKernelContext& ctx, DoneCallback done) = 0;
  bool is_expensive() const override { return false; }
};

using KernelFactory = std::function<std::unique_ptr<OpKernel>(const OpKernelConstruction&)>;

class KernelRegistry {
 public:
  static KernelRegistry& global() {
    detail::link_compiled_library();
    static KernelRegistry registry;
    return registry;
  }
  bool add(const std::string& type, KernelFactory factory) {
    std::lock_guard lock(mutex_);
    factories_.try_emplace(type, std::move(factory));
    return true;
  }
  template <class Kernel>
  bool add(const std::string& type) {
    return add(type, &make<Kernel>);
  }
  bool contains(std::string_view type) const {
    std::lock_guard lock(mutex_);
    return factories_.find(type) != factories_.end();
  }
  std::unique_ptr<OpKernel> create(const OpKernelConstruction& construction) const {
    KernelFactory factory;
    {
      std::lock_guard lock(mutex_);
      auto it = factories_.find(construction.node().type);
      if (it == factories_.end())
        throw NotFound("no kernel registered for op type '" + construction.node().type +
                       "' (node '" + construction.name() +
                       "'): include the header that defines it (psflow/psflow.hpp has them all)");
      factory = it->second;
    }
    return factory(construction);
  }

 private:
  // One plain function per kernel class: every factory is then the same std::function type,
  // which keeps the code compiled per registered kernel small.
  template <class Kernel>
  static std::unique_ptr<OpKernel> make(const OpKernelConstruction& construction) {
    return std::unique_ptr<OpKernel>(new Kernel(construction));
  }

  mutable std::mutex mutex_;
  std::map<std::string, KernelFactory, std::less<>> factories_;
};

namespace detail {

// The use_locking attr of a node that updates variables (TF's): true when it has none.
inline bool uses_locking(const Node& node) {
  return node.attrs.find("use_locking") == node.attrs.end() ||
         attr_or_throw<bool>(node.attrs, "use_locking", node.name);
}

}  // namespace detail

}  // namespace psflow
