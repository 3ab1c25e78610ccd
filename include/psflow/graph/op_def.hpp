// OpDef: what the graph knows about an op type (TF's OpDef + shape function), and the registry
// that maps type names to them. Kernels live in a separate registry in runtime/, so graph
// building never depends on how an op is executed.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/core/error.hpp"
#include "psflow/graph/attr_value.hpp"
#include "psflow/graph/partial_shape.hpp"

namespace psflow {

// Static description of one output of a node.
struct OutputSpec {
  DType dtype = DType::float32;
  PartialShape shape;
  bool is_ref = false;  // a variable reference (TF's float32_ref), only for state ops
};

// What a shape/dtype function sees while a node is being created.
struct InferenceContext {
  std::string_view op_type;
  std::string_view node_name;
  const std::vector<std::string>& input_names;  // "x:0", for error messages
  const std::vector<DType>& input_dtypes;
  const std::vector<PartialShape>& input_shapes;
  const AttrMap& attrs;

  template <class T>
  const T& attr(std::string_view key) const {
    return detail::attr_or_throw<T>(attrs, key, node_name);
  }
  // Throws InvalidArgument "<Type> '<name>': <message>".
  [[noreturn]] void fail(const std::string& message) const {
    throw InvalidArgument(std::string(op_type) + " '" + std::string(node_name) + "': " + message);
  }
  // "'x:0' float32[2,3]": how errors name an input.
  std::string describe_input(std::size_t i) const {
    return "'" + input_names[i] + "' " + std::string(dtype_name(input_dtypes[i])) +
           input_shapes[i].to_string();
  }
  // Fails unless inputs i and j have the same dtype.
  void expect_same_dtype(std::size_t i, std::size_t j) const {
    if (input_dtypes[i] != input_dtypes[j])
      fail("inputs must have the same dtype, got " + describe_input(i) + " and " +
           describe_input(j));
  }
};

using ShapeFn = std::function<std::vector<OutputSpec>(const InferenceContext&)>;

// Built with designated initialisers, naming only what differs from the defaults:
//   OpRegistry::global().add({.type = "Add", .num_inputs = 2, .infer = broadcast_binary});
struct OpDef {
  std::string type{};
  int num_inputs = 0;             // -1: any number
  std::vector<int> ref_inputs{};  // inputs that must be variable references (Assign's input 0)
  bool stateful = false;          // touches state that outlives a step (variables, random seeds)
  ShapeFn infer{};                // outputs' dtypes and shapes from inputs and attrs; empty: none
};

class OpRegistry {
 public:
  static OpRegistry& global() {
    detail::link_compiled_library();
    static OpRegistry registry;
    return registry;
  }

  // Registers `def`; registering a type twice keeps the first (headers may be seen twice).
  bool add(OpDef def) {
    std::lock_guard lock(mutex_);
    defs_.try_emplace(def.type, std::move(def));
    return true;
  }

  // Throws NotFound naming the type when it was never registered.
  const OpDef& lookup(std::string_view type) const {
    std::lock_guard lock(mutex_);
    auto it = defs_.find(type);
    if (it == defs_.end())
      throw NotFound("no op type '" + std::string(type) +
                     "' is registered: include the header that defines it (psflow/psflow.hpp "
                     "has them all)");
    return it->second;
  }

  bool contains(std::string_view type) const {
    std::lock_guard lock(mutex_);
    return defs_.find(type) != defs_.end();
  }

  // Every registered type, sorted.
  std::vector<std::string> types() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [type, def] : defs_) out.push_back(type);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, OpDef, std::less<>> defs_;  // map: references stay valid on insert
};

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
