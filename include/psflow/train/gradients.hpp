// gradients(): TF1's reverse-mode symbolic differentiation (tf.gradients). It adds to the graph
// the ops that compute d(sum of y's elements)/dx for each x, walking back from y through the
// ops that lie between the xs and y and asking each op's registered gradient function for the
// gradients of its inputs. Gradient functions live in a registry keyed by op type, so a new op
// registers its gradient next to its definition without touching gradients().
//
// The rules, taken from TF's gradients_util.py unless marked as psflow's choice:
// - The initial gradient is OnesLike(y); y must be float32 or float64.
// - Only ops on a data path from some x to y are differentiated; control inputs carry nothing.
//   The walk stops at the xs and at ops registered as not differentiable (their inputs get no
//   gradient: Const, Placeholder, Fill, random ops, variables, Assign*, ZerosLike, OnesLike).
// - An op on such a path with nothing registered throws InvalidArgument naming it and its type.
// - Several paths into one tensor: the contributions are summed by one AddN.
// - An x that y does not depend on gets ZerosLike(x) (psflow's choice: TF returns None), so
//   every result can be fetched and applied.
// - Names: every op goes under the name scope "gradients" (made unique per call, like TF), the
//   ones of forward op "dense/MatMul" under "gradients/dense/MatMul_grad/".
// - Placement (psflow's choice): the gradient ops of a forward op are created under
//   graph.device(op.device()), merged with the device scopes active at the call like any scope,
//   so the backward pass of an op runs where its forward pass ran and needs no extra transfers
//   (like TF's colocate_gradients_with_ops=True, but without pinning). An AddN is created on
//   the device of its first contribution; OnesLike(y) / ZerosLike(x) on the device of y / x.
// - SoftmaxCrossEntropyWithLogits backpropagates into logits only, like TF1's
//   softmax_cross_entropy_with_logits (v1), which stops the gradient into labels.
//
// Like all graph building, gradients() must not run concurrently with other changes to the
// same graph. The registry itself is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/nn_ops.hpp"

namespace psflow::train {

// The gradient of one forward op: `grads[i]` is the gradient flowing into output i (an empty
// Output when nothing from that output reaches y; at least one is set). Returns one gradient
// per input of `op`, an empty Output where an input gets none. Called with the op's device and
// name scope ("gradients/<op>_grad") active.
using GradientFunction =
    std::function<std::vector<Output>(const Operation& op, const std::vector<Output>& grads)>;

class GradientRegistry {
 public:
  static GradientRegistry& global() {
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

// Symbolic gradients of sum(y) with respect to each of `xs`, in order: one Output per x,
// shaped and typed like it. Throws InvalidArgument when y is empty or not a float tensor, when
// an x is empty or from another graph, or when a path from an x to y crosses an op without a
// registered gradient.
inline std::vector<Output> gradients(Output y, const std::vector<Output>& xs);

// ---------------------------------------------------------------------------------------------
// Definitions

namespace detail {

using TensorKey = std::pair<int, int>;  // (node id, output index)

inline TensorKey key_of(const Output& t) { return {t.op().id(), t.index()}; }

// One call of gradients(): which ops lie between the xs and y, and the gradient contributions
// collected so far per tensor.
class GradientWalk {
 public:
  GradientWalk(Graph& graph, const Output& y, const std::vector<Output>& xs)
      : graph_(graph), y_(y) {
    for (const auto& x : xs) xs_.insert(key_of(x));
    const int n = y.op().id() + 1;  // nodes are appended after their inputs: none later feeds y
    reaches_y_.assign(static_cast<std::size_t>(n), false);
    reaches_y_[static_cast<std::size_t>(n - 1)] = true;
    for (int id = n - 1; id >= 0; --id)
      if (reaches_y_[static_cast<std::size_t>(id)])
        for (const auto& in : graph.node(id).inputs)
          reaches_y_[static_cast<std::size_t>(in.node)] = true;
    from_x_.assign(static_cast<std::size_t>(n), false);
    for (int id = 0; id < n; ++id)
      for (const auto& in : graph.node(id).inputs)
        if (on_path({in.node, in.index})) from_x_[static_cast<std::size_t>(id)] = true;
  }

  std::vector<Output> run(const std::vector<Output>& xs) {
    if (on_path(key_of(y_))) {
      auto device = graph_.device(y_.op().device());
      pending_[key_of(y_)].push_back(ops::ones_like(y_, "OnesLike"));
    }
    for (int id = y_.op().id(); id >= 0; --id)
      if (reaches_y_[static_cast<std::size_t>(id)] && from_x_[static_cast<std::size_t>(id)])
        backprop(Operation(&graph_, id));
    std::vector<Output> result;
    for (const auto& x : xs) {
      Output g = aggregated(key_of(x));
      if (!g.valid()) {
        auto device = graph_.device(x.op().device());
        g = ops::zeros_like(x, "ZerosLike");
        pending_[key_of(x)] = {g};  // one ZerosLike per x even when it is asked for twice
      }
      result.push_back(g);
    }
    return result;
  }

 private:
  // True when tensor `t` is an x or computed from one.
  bool on_path(const TensorKey& t) const {
    return xs_.count(t) != 0 || (t.first < static_cast<int>(from_x_.size()) &&
                                 from_x_[static_cast<std::size_t>(t.first)]);
  }

  // The sum of the contributions to tensor `t` (empty when none), summed once.
  Output aggregated(const TensorKey& t) {
    auto it = pending_.find(t);
    if (it == pending_.end() || it->second.empty()) return {};
    auto& list = it->second;
    if (list.size() > 1) {
      auto device = graph_.device(list.front().device());
      list = {ops::add_n(list, "AddN")};
    }
    return list.front();
  }

  void backprop(const Operation& op) {
    std::vector<Output> out_grads(static_cast<std::size_t>(op.num_outputs()));
    bool any = false;
    for (int k = 0; k < op.num_outputs(); ++k) {
      out_grads[static_cast<std::size_t>(k)] = aggregated({op.id(), k});
      any = any || out_grads[static_cast<std::size_t>(k)].valid();
    }
    if (!any) return;  // e.g. only reaches y through an input that gets no gradient
    auto fn = GradientRegistry::global().lookup(op.type());
    if (!fn)
      throw InvalidArgument("gradients: no gradient is registered for op '" + op.name() +
                            "' (op type: " + op.type() + "), which lies on a path from an x to '" +
                            y_.name() +
                            "': register one with train::GradientRegistry::global()"
                            ".add(\"" +
                            op.type() + "\", fn), or keep the op off that path");
    if (!*fn) return;  // not differentiable: the walk stops here
    std::vector<Output> in_grads;
    {
      auto device = graph_.device(op.device());
      auto scope = graph_.name_scope(op.name() + "_grad");
      in_grads = (*fn)(op, out_grads);
    }
    if (static_cast<int>(in_grads.size()) != op.num_inputs())
      throw Internal("gradient function of op type " + op.type() + " returned " +
                     std::to_string(in_grads.size()) + " gradients for op '" + op.name() +
                     "', which has " + std::to_string(op.num_inputs()) + " inputs");
    for (int i = 0; i < op.num_inputs(); ++i) {
      const Output& g = in_grads[static_cast<std::size_t>(i)];
      const Output in = op.input(i);
      if (!g.valid() || !on_path(key_of(in))) continue;
      if (g.dtype() != in.dtype())
        throw Internal("gradient function of op type " + op.type() + " returned a " +
                       std::string(dtype_name(g.dtype())) + " gradient for input '" + in.name() +
                       "' (" + std::string(dtype_name(in.dtype())) + ") of op '" + op.name() + "'");
      pending_[key_of(in)].push_back(g);
    }
  }

  Graph& graph_;
  Output y_;
  std::set<TensorKey> xs_;
  std::vector<bool> reaches_y_;  // per node id: y depends on it through data edges
  std::vector<bool> from_x_;     // per node id: some input is an x or computed from one
  std::map<TensorKey, std::vector<Output>> pending_;
};

// ---- gradient functions: TF's math_grad.py / nn_grad.py / array_grad.py rules ----------------

using Grads = std::vector<Output>;

template <class T>
const T& op_attr(const Operation& op, std::string_view key) {
  return psflow::detail::attr_or_throw<T>(op.attrs(), key, op.name());
}

// `grad` summed back to the shape of `like` (a broadcasting op's input); nothing to do when
// both shapes are known and equal.
inline Output sum_back(const Output& grad, const Output& like) {
  const PartialShape g = grad.shape(), l = like.shape();
  if (g.fully_defined() && l.fully_defined() && g.dims == l.dims) return grad;
  return ops::sum_to_shape_of(grad, like);
}

inline Grads add_grad(const Operation& op, const Grads& g) {
  return {sum_back(g[0], op.input(0)), sum_back(g[0], op.input(1))};
}
inline Grads sub_grad(const Operation& op, const Grads& g) {
  return {sum_back(g[0], op.input(0)), sum_back(ops::neg(g[0]), op.input(1))};
}
inline Grads mul_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0), y = op.input(1);
  return {sum_back(ops::mul(g[0], y), x), sum_back(ops::mul(x, g[0]), y)};
}
// d(x/y)/dy = -x/y^2, computed as (-x / y) / y like TF.
inline Grads div_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0), y = op.input(1);
  return {sum_back(ops::div(g[0], y), x),
          sum_back(ops::mul(g[0], ops::div(ops::div(ops::neg(x), y), y)), y)};
}
// Ties go to x (x >= y for Maximum, x <= y for Minimum), as in TF.
template <bool Maximum>
Grads max_min_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0), y = op.input(1);
  auto [gx, gy] = Maximum ? ops::maximum_grad(x, y, g[0]) : ops::minimum_grad(x, y, g[0]);
  return {sum_back(gx, x), sum_back(gy, y)};
}

inline Grads neg_grad(const Operation&, const Grads& g) { return {ops::neg(g[0])}; }
inline Grads square_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  return {ops::mul(g[0], ops::mul(x, ops::scalar_like(x, 2.0)))};
}
inline Grads relu_grad(const Operation& op, const Grads& g) {
  return {ops::relu_grad(g[0], op.output(0))};  // output > 0 exactly where input > 0
}
inline Grads sigmoid_grad(const Operation& op, const Grads& g) {
  return {ops::sigmoid_grad(op.output(0), g[0])};
}
inline Grads tanh_grad(const Operation& op, const Grads& g) {
  return {ops::tanh_grad(op.output(0), g[0])};
}
inline Grads exp_grad(const Operation& op, const Grads& g) {
  return {ops::mul(g[0], op.output(0))};
}
inline Grads log_grad(const Operation& op, const Grads& g) { return {ops::div(g[0], op.input(0))}; }
// d sqrt(x) = 0.5 / sqrt(x), from the output like TF's SqrtGrad.
inline Grads sqrt_grad(const Operation& op, const Grads& g) {
  return {ops::mul(ops::div(g[0], op.output(0)), ops::scalar_like(g[0], 0.5))};
}
// d x^-1/2 = -0.5 * y^3, from the output y like TF's RsqrtGrad.
inline Grads rsqrt_grad(const Operation& op, const Grads& g) {
  const Output y = op.output(0);
  return {ops::mul(ops::mul(g[0], ops::mul(ops::mul(y, y), y)), ops::scalar_like(y, -0.5))};
}

// TF's _MatMulGrad: for each transpose combination, the two products that undo it.
inline Grads matmul_grad(const Operation& op, const Grads& g) {
  const bool ta = op_attr<bool>(op, "transpose_a"), tb = op_attr<bool>(op, "transpose_b");
  const Output a = op.input(0), b = op.input(1), d = g[0];
  if (!ta && !tb) return {ops::matmul(d, b, false, true), ops::matmul(a, d, true, false)};
  if (!ta && tb) return {ops::matmul(d, b, false, false), ops::matmul(d, a, true, false)};
  if (ta && !tb) return {ops::matmul(b, d, false, true), ops::matmul(a, d, false, false)};
  return {ops::matmul(b, d, true, true), ops::matmul(d, a, true, true)};
}

inline Grads sum_grad(const Operation& op, const Grads& g) {
  return {ops::broadcast_to_shape_of(g[0], op.input(0),
                                     op_attr<std::vector<std::int64_t>>(op, "axes"),
                                     op_attr<bool>(op, "keep_dims"))};
}
inline Grads mean_grad(const Operation& op, const Grads& g) {
  return {ops::mean_grad(g[0], op.input(0), op_attr<std::vector<std::int64_t>>(op, "axes"),
                         op_attr<bool>(op, "keep_dims"))};
}

inline Grads reshape_grad(const Operation& op, const Grads& g) {
  const Output x = op.input(0);
  if (x.shape().fully_defined()) return {ops::reshape(g[0], x.shape().dims)};
  return {ops::reshape_to_shape_of(g[0], x)};  // unknown dims: take x's shape at run time
}

inline Grads identity_grad(const Operation&, const Grads& g) { return {g[0]}; }

// TF's _SoftmaxCrossEntropyWithLogitsGrad: the kernel's second output, softmax(logits) - labels,
// times the per-example incoming gradient expanded to a column. Inputs are (logits, labels).
inline Grads softmax_xent_grad(const Operation& op, const Grads& g) {
  if (g.size() > 1 && g[1].valid())
    throw InvalidArgument("gradients: op '" + op.name() +
                          "' (SoftmaxCrossEntropyWithLogits) is differentiated through its "
                          "backprop output (output 1), which has no gradient: use output 0");
  if (!g[0].valid()) return {Output{}, Output{}};
  return {ops::mul(ops::reshape(g[0], {-1, 1}), op.output(1)), Output{}};
}

inline const bool gradients_registered = [] {
  auto& r = GradientRegistry::global();
  r.add("Add", add_grad);
  r.add("Sub", sub_grad);
  r.add("Mul", mul_grad);
  r.add("RealDiv", div_grad);
  r.add("Maximum", max_min_grad<true>);
  r.add("Minimum", max_min_grad<false>);
  r.add("Neg", neg_grad);
  r.add("Square", square_grad);
  r.add("Relu", relu_grad);
  r.add("Sigmoid", sigmoid_grad);
  r.add("Tanh", tanh_grad);
  r.add("Exp", exp_grad);
  r.add("Log", log_grad);
  r.add("Sqrt", sqrt_grad);
  r.add("Rsqrt", rsqrt_grad);
  r.add("MatMul", matmul_grad);
  r.add("Sum", sum_grad);
  r.add("Mean", mean_grad);
  r.add("Reshape", reshape_grad);
  r.add("Identity", identity_grad);
  r.add("SoftmaxCrossEntropyWithLogits", softmax_xent_grad);
  for (const char* type :
       {"Const", "Placeholder", "Fill", "RandomNormal", "RandomUniform", "VariableV2", "Assign",
        "AssignAdd", "AssignSub", "ZerosLike", "OnesLike", "NoOp"})
    r.add_not_differentiable(type);
  return true;
}();

}  // namespace detail

inline std::vector<Output> gradients(Output y, const std::vector<Output>& xs) {
  if (!y.valid()) throw InvalidArgument("gradients: y is an empty Output (default-constructed)");
  if (!is_floating(y.dtype()))
    throw InvalidArgument("gradients: y '" + y.name() + "' is " +
                          std::string(dtype_name(y.dtype())) +
                          "; only float32 and float64 tensors can be differentiated");
  Graph& graph = y.graph();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].valid())
      throw InvalidArgument("gradients: xs[" + std::to_string(i) + "] is an empty Output");
    if (&xs[i].graph() != &graph)
      throw InvalidArgument("gradients: x '" + xs[i].name() +
                            "' belongs to another Graph than y '" + y.name() + "'");
  }
  auto scope = graph.name_scope("gradients");
  detail::GradientWalk walk(graph, y, xs);
  return walk.run(xs);
}

}  // namespace psflow::train
