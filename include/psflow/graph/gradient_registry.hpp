// GradientRegistry: the gradient function of each op type (TF's ops.RegisterGradient), keyed
// by type name. Each op family registers its gradients right next to its op definitions, so
// adding an op never edits gradients() or a central list.
//
// Thread-safe.
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/graph/graph.hpp"

namespace psflow {

// The gradient of one forward op: `grads[i]` is the gradient flowing into output i (an empty
// Output when nothing from that output reaches y; at least one is set). Returns one gradient
// per input of `op`, an empty Output where an input gets none. Called with the op's device and
// name scope ("gradients/<op>_grad") active.
using GradientFunction =
    std::function<std::vector<Output>(const Operation& op, const std::vector<Output>& grads)>;

class GradientRegistry {
 public:
  static GradientRegistry& global() {
    detail::link_compiled_library();
    static GradientRegistry registry;
    return registry;
  }

  // Registers the gradient of ops of `type`; the first registration wins (headers may be seen
  // twice). Throws InvalidArgument for an empty function (use add_not_differentiable).
  bool add(const std::string& type, GradientFunction fn) {
    if (!fn)
      throw InvalidArgument("GradientRegistry::add('" + type +
                            "'): empty function; use add_not_differentiable for ops without one");
    std::lock_guard lock(mutex_);
    functions_.try_emplace(type, std::move(fn));
    return true;
  }

  // TF's ops.NotDifferentiable: the walk stops at ops of `type`, their inputs get no gradient.
  bool add_not_differentiable(const std::string& type) {
    std::lock_guard lock(mutex_);
    functions_.try_emplace(type, GradientFunction{});
    return true;
  }
  bool add_not_differentiable(std::initializer_list<const char*> types) {
    for (const char* type : types) add_not_differentiable(type);
    return true;
  }

  // nullopt when nothing is registered for `type`; an empty function when it is registered
  // as not differentiable.
  std::optional<GradientFunction> lookup(std::string_view type) const {
    std::lock_guard lock(mutex_);
    auto it = functions_.find(type);
    if (it == functions_.end()) return std::nullopt;
    return it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, GradientFunction, std::less<>> functions_;
};

namespace detail {

using Grads = std::vector<Output>;

// Attribute `key` of a forward op, for gradient functions.
template <class T>
const T& op_attr(const Operation& op, std::string_view key) {
  return attr_or_throw<T>(op.attrs(), key, op.name());
}

}  // namespace detail

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
