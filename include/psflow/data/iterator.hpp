// Datasets in the graph, TF1's way: dataset.make_one_shot_iterator(graph) or
// make_initializable_iterator(graph) add an iterator to the graph; get_next() gives Outputs (an
// IteratorGetNext op), so a step pulls its own batch with no feed. Past the end a run throws
// OutOfRange, which MonitoredTrainingSession takes as the end of training.
//
// The ops: "Iterator" (stateful; its output is a string handle naming the iterator's state),
// "IteratorGetNext" (the next element's components) and "MakeIterator" (starts a new pass: an
// initializable iterator's initializer). The state lives in the Iterator op's kernel, of which a
// session keeps one, so each session has its own pass and the pass, with the threads its map
// and prefetch stages started, ends with the session. The Dataset itself stays in the process
// that built the graph (its functions are C++ code): an iterator placed on another task fails
// with FailedPrecondition saying so. Kernels: data/iterator_kernels.hpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/data/dataset.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/graph.hpp"
#include "psflow/graph/op_builder.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <unistd.h>

#include <iterator>
#include <random>
#include <sstream>
#endif

namespace psflow::data {

// How an iterator's steps waited for their input, summed over the sessions of this process that
// ran it: each IteratorGetNext counts one element and the time it spent waiting for the
// pipeline to give it. The same wait is the IteratorGetNext node's span in a traced step.
struct IteratorStats {
  std::uint64_t elements = 0;
  std::int64_t wait_ns = 0;
};

class Iterator {
 public:
  Iterator() = default;
  // The next element, as one Output per component (an IteratorGetNext op; each call adds one,
  // and a step that runs two pulls two elements). A run past the end throws OutOfRange.
  std::vector<Output> get_next(std::string_view name = "");
  // Starts a new pass (MakeIterator); an initializable iterator must run it before get_next.
  // FailedPrecondition for a one-shot iterator.
  Operation initializer() const;
  // The dtype and shape of each component.
  const ElementSpec& element_spec() const noexcept { return spec_; }
  Operation op() const noexcept { return handle_.op(); }
  // Its waits so far, in this process (where a Dataset always runs).
  IteratorStats stats() const;

  // Made by Dataset::make_one_shot_iterator and make_initializable_iterator.
  Iterator(Output handle, ElementSpec spec, bool one_shot)
      : handle_(handle), spec_(std::move(spec)), one_shot_(one_shot) {}

 private:
  Output handle_;  // the Iterator op's string handle
  ElementSpec spec_;
  bool one_shot_ = true;
};

namespace detail {

// The Datasets of graphs built in this process, by id: an Iterator op names its dataset by an id
// (an attribute), the kernel finds it here. The graph that made the iterator keeps the dataset
// alive (a collection), this registry only refers to it.
class DatasetRegistry {
 public:
  static DatasetRegistry& global();
  // Registers `node` and returns its id, unique to this process.
  std::string add(const std::shared_ptr<const DatasetNode>& node);
  // The dataset `id` names, or null when it is not (or no longer) in this process.
  std::shared_ptr<const DatasetNode> find(const std::string& id) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::weak_ptr<const DatasetNode>> nodes_;
  std::uint64_t next_ = 1;
  std::string process_prefix_;
};

// The input-wait counters of the iterators of this process, by dataset id (one small entry per
// iterator made, kept for the process's life so that stats() still answers after its sessions).
class InputWaitCounters {
 public:
  struct Counter {
    std::atomic<std::uint64_t> elements{0};
    std::atomic<std::int64_t> wait_ns{0};
  };
  static InputWaitCounters& global();
  std::shared_ptr<Counter> counter(const std::string& dataset_id);
  IteratorStats read(const std::string& dataset_id) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Counter>> counters_;
};

// The element spec as Iterator and IteratorGetNext attributes: output_types (DType values) and
// output_shapes (per component its rank, -1 when unknown, then its dims).
AttrMap element_spec_attrs(const ElementSpec& spec);
ElementSpec element_spec_from_attrs(const AttrMap& attrs, const std::string& node);

}  // namespace detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace detail {

PSFLOW_DECL DatasetRegistry& DatasetRegistry::global() {
  static DatasetRegistry registry;
  return registry;
}

PSFLOW_DECL std::string DatasetRegistry::add(const std::shared_ptr<const DatasetNode>& node) {
  std::lock_guard lock(mutex_);
  if (process_prefix_.empty()) {
    // The process and a random number: an id copied into another process never names a
    // dataset there by accident.
    std::ostringstream prefix;
    prefix << "dataset:" << ::getpid() << ":" << std::hex << std::random_device{}()
           << std::random_device{}() << ":";
    process_prefix_ = prefix.str();
  }
  for (auto it = nodes_.begin(); it != nodes_.end();)  // drop the datasets of deleted graphs
    it = it->second.expired() ? nodes_.erase(it) : std::next(it);
  const std::string id = process_prefix_ + std::to_string(next_++);
  nodes_[id] = node;
  return id;
}

PSFLOW_DECL std::shared_ptr<const DatasetNode> DatasetRegistry::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : it->second.lock();
}

PSFLOW_DECL InputWaitCounters& InputWaitCounters::global() {
  static InputWaitCounters counters;
  return counters;
}

PSFLOW_DECL std::shared_ptr<InputWaitCounters::Counter> InputWaitCounters::counter(
    const std::string& dataset_id) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<Counter>& c = counters_[dataset_id];
  if (!c) c = std::make_shared<Counter>();
  return c;
}

PSFLOW_DECL IteratorStats InputWaitCounters::read(const std::string& dataset_id) const {
  std::lock_guard lock(mutex_);
  const auto it = counters_.find(dataset_id);
  if (it == counters_.end()) return {};
  return {it->second->elements.load(std::memory_order_relaxed),
          it->second->wait_ns.load(std::memory_order_relaxed)};
}

PSFLOW_DECL AttrMap element_spec_attrs(const ElementSpec& spec) {
  std::vector<std::int64_t> types, shapes;
  for (const ComponentSpec& c : spec) {
    types.push_back(static_cast<std::int64_t>(c.dtype));
    shapes.push_back(c.shape.known ? static_cast<std::int64_t>(c.shape.dims.size()) : -1);
    if (c.shape.known) shapes.insert(shapes.end(), c.shape.dims.begin(), c.shape.dims.end());
  }
  return {{"output_types", types}, {"output_shapes", shapes}};
}

PSFLOW_DECL ElementSpec element_spec_from_attrs(const AttrMap& attrs, const std::string& node) {
  const auto& types =
      psflow::detail::attr_or_throw<std::vector<std::int64_t>>(attrs, "output_types", node);
  const auto& shapes =
      psflow::detail::attr_or_throw<std::vector<std::int64_t>>(attrs, "output_shapes", node);
  ElementSpec spec;
  std::size_t at = 0;
  for (std::int64_t t : types) {
    if (t < 0 || static_cast<std::size_t>(t) >= std::size(kAllDTypes) || at >= shapes.size())
      throw InvalidArgument("iterator '" + node + "' has malformed output_types/output_shapes");
    ComponentSpec c{static_cast<DType>(t), PartialShape::unknown()};
    const std::int64_t rank = shapes[at++];
    if (rank >= 0) {
      if (shapes.size() - at < static_cast<std::size_t>(rank))
        throw InvalidArgument("iterator '" + node + "' has malformed output_shapes");
      c.shape = PartialShape::of(
          std::vector<std::int64_t>(shapes.begin() + static_cast<std::ptrdiff_t>(at),
                                    shapes.begin() + static_cast<std::ptrdiff_t>(at) + rank));
      at += static_cast<std::size_t>(rank);
    }
    spec.push_back(std::move(c));
  }
  return spec;
}

PSFLOW_DECL std::vector<OutputSpec> infer_iterator(const InferenceContext&) {
  return {OutputSpec{DType::string, PartialShape::scalar()}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_iterator_get_next(const InferenceContext& ctx) {
  if (ctx.input_dtypes[0] != DType::string)
    ctx.fail("needs an iterator handle (a string), got " + ctx.describe_input(0));
  std::vector<OutputSpec> out;
  for (const ComponentSpec& c : element_spec_from_attrs(ctx.attrs, std::string(ctx.node_name)))
    out.push_back(OutputSpec{c.dtype, c.shape});
  return out;
}

PSFLOW_DECL std::vector<OutputSpec> infer_make_iterator(const InferenceContext& ctx) {
  if (ctx.input_dtypes[0] != DType::string)
    ctx.fail("needs an iterator handle (a string), got " + ctx.describe_input(0));
  return {};
}

PSFLOW_REGISTERED_AT_STARTUP const bool iterator_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "Iterator", .num_inputs = 0, .stateful = true, .infer = infer_iterator});
  defs.add({.type = "IteratorGetNext",
            .num_inputs = 1,
            .stateful = true,
            .infer = infer_iterator_get_next});
  defs.add(
      {.type = "MakeIterator", .num_inputs = 1, .stateful = true, .infer = infer_make_iterator});
  GradientRegistry::global().add_not_differentiable(
      {"Iterator", "IteratorGetNext", "MakeIterator"});
  return true;
}();

}  // namespace detail

PSFLOW_DECL std::vector<Output> Iterator::get_next(std::string_view name) {
  if (!handle_.valid())
    throw FailedPrecondition(
        "get_next on an empty Iterator: make one with "
        "dataset.make_one_shot_iterator(graph)");
  auto colocated = handle_.graph().colocate_with(handle_.op());
  AttrMap attrs = detail::element_spec_attrs(spec_);
  const Operation op = psflow::detail::build_op("IteratorGetNext", {handle_}, std::move(attrs),
                                                name, "IteratorGetNext");
  std::vector<Output> out;
  for (std::size_t i = 0; i < spec_.size(); ++i) out.push_back(op.output(static_cast<int>(i)));
  return out;
}

PSFLOW_DECL IteratorStats Iterator::stats() const {
  if (!handle_.valid()) return {};
  return detail::InputWaitCounters::global().read(psflow::detail::attr_or_throw<std::string>(
      handle_.op().node().attrs, "dataset", handle_.op().name()));
}

PSFLOW_DECL Operation Iterator::initializer() const {
  if (one_shot_)
    throw FailedPrecondition(
        "a one-shot iterator has no initializer: use "
        "make_initializable_iterator to start passes yourself");
  auto colocated = handle_.graph().colocate_with(handle_.op());
  return psflow::detail::build_op("MakeIterator", {handle_}, {}, "", "MakeIterator");
}

namespace detail {
// An Iterator op for `node` in `graph`.
PSFLOW_DECL Iterator make_iterator_op(Graph& graph, const std::shared_ptr<const DatasetNode>& node,
                                      bool one_shot) {
  ElementSpec spec = node->spec();
  graph.add_to_collection("psflow/datasets", node);  // alive as long as the graph
  AttrMap attrs = element_spec_attrs(spec);
  attrs["dataset"] = DatasetRegistry::global().add(node);
  attrs["one_shot"] = one_shot;
  const Operation op = psflow::detail::build_source_op(graph, "Iterator", std::move(attrs), "",
                                                       one_shot ? "OneShotIterator" : "Iterator");
  return Iterator(op.output(0), std::move(spec), one_shot);
}
}  // namespace detail

PSFLOW_DECL Iterator Dataset::make_one_shot_iterator(Graph& graph) const {
  return detail::make_iterator_op(graph, node_, true);
}

PSFLOW_DECL Iterator Dataset::make_initializable_iterator(Graph& graph) const {
  return detail::make_iterator_op(graph, node_, false);
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::data
