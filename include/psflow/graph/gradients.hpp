// gradients(): TF1's reverse-mode symbolic differentiation (tf.gradients). It adds to the graph
// the ops that compute d(sum of y's elements)/dx for each x, walking back from y through the
// ops that lie between the xs and y and asking each op's registered gradient function for the
// gradients of its inputs. Gradient functions live in a registry keyed by op type
// (graph/gradient_registry.hpp): each op family registers its gradients next to its op
// definitions (graph/<family>_ops.hpp), so a new op never touches gradients().
//
// The rules, taken from TF's gradients_util.py unless marked as psflow's choice:
// - The initial gradient is OnesLike(y); y must be float32 or float64.
// - Only ops on a data path from some x to y are differentiated; control inputs carry nothing.
//   The walk stops at the xs and at ops registered as not differentiable (their inputs get no
//   gradient: Const, Placeholder, Fill, random ops, variables, Assign*, ZerosLike, OnesLike).
// - An op on such a path with nothing registered throws InvalidArgument naming it and its type.
// - Several paths into one tensor: the contributions are summed by one AddN; when every one is
//   an IndexedSlices (a sparse gradient, see graph/sparse_ops.hpp) they are concatenated into
//   one IndexedSlices instead, as TF does, so a table's gradient stays sparse.
// - An x that is a variable's value ("w/read", Variable::value()) stands for the variable
//   itself, as TF differentiates with respect to a resource variable's handle: its gradient
//   also collects what flows into ops that read the variable directly (ResourceGather, which
//   embedding_lookup uses), so it is the sum over every way the variable is read.
// - An x that y does not depend on gets ZerosLike(x) (psflow's choice: TF returns None), so
//   every result can be fetched and applied.
// - Names: every op goes under the name scope "gradients" (made unique per call, like TF), the
//   ones of forward op "dense/MatMul" under "gradients/dense/MatMul_grad/".
// - Placement (psflow's choice): the gradient ops of a forward op are created under
//   graph.device(op.device()), merged with the device scopes active at the call like any scope,
//   so the backward pass of an op runs where its forward pass ran and needs no extra transfers
//   (like TF's colocate_gradients_with_ops=True, but without pinning). An AddN is created on
//   the device of its first contribution; OnesLike(y) / ZerosLike(x) on the device of y / x.
// - A while_loop is differentiated as a whole when the walk reaches its results (its Exits):
//   graph/while_loop_gradient.hpp builds a loop that runs its iterations backwards.
// - SoftmaxCrossEntropyWithLogits backpropagates into logits only, like TF1's
//   softmax_cross_entropy_with_logits (v1), which stops the gradient into labels.
//
// Like all graph building, gradients() must not run concurrently with other changes to the
// same graph. The registry itself is thread-safe.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/sparse_ops.hpp"
#include "psflow/graph/while_loop_gradient.hpp"

namespace psflow {

// Symbolic gradients of sum(y) with respect to each of `xs`, in order: one Output per x,
// shaped and typed like it. Throws InvalidArgument when y is empty or not a float tensor, when
// an x is empty or from another graph, or when a path from an x to y crosses an op without a
// registered gradient. (Also reachable as psflow::train::gradients, TF's tf.gradients.)
PSFLOW_DECL std::vector<Output> gradients(Output y, const std::vector<Output>& xs);

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

using TensorKey = std::pair<int, int>;  // (node id, output index)

PSFLOW_DECL TensorKey key_of(const Output& t) { return {t.op().id(), t.index()}; }

// The variable reference behind a variable's snapshot ("w/read" = Identity(VariableV2)), else x.
PSFLOW_DECL Output differentiation_target(const Output& x) {
  const Operation op = x.op();
  if (op.type() == "Identity" && op.num_inputs() == 1 && op.input(0).is_ref() &&
      op.input(0).op().type() == "VariableV2")
    return op.input(0);
  return x;
}

// One IndexedSlices holding all of `parts` (their rows concatenated), or nullopt when some part
// is dense or their index dtypes differ.
PSFLOW_DECL std::optional<IndexedSlices> concatenated_slices(const std::vector<Output>& parts) {
  std::vector<Output> values, indices;
  Output dense_shape;
  for (const auto& part : parts) {
    auto slices = as_indexed_slices(part);
    if (!slices || (!indices.empty() && slices->indices.dtype() != indices.front().dtype()))
      return std::nullopt;
    values.push_back(slices->values);
    indices.push_back(slices->indices);
    dense_shape = slices->dense_shape;
  }
  return IndexedSlices{ops::concat(values, 0), ops::concat(indices, 0), dense_shape};
}

// One call of gradients(), or the differentiation of a while_loop's body for its gradient
// (`loop`: that loop's context): which ops lie between the xs and the ys, and the gradient
// contributions collected so far per tensor.
class GradientWalk {
 public:
  // grad_ys[i]: the gradient flowing into ys[i]; empty (or grad_ys shorter): OnesLike(ys[i]).
  GradientWalk(Graph& graph, const std::vector<Output>& ys, const std::vector<Output>& grad_ys,
               const std::vector<Output>& xs, int loop = -1)
      : graph_(graph), ys_(ys), loop_(loop) {
    for (const auto& x : xs) xs_.insert(key_of(x));
    int n = 0;  // nodes are appended after their inputs: none later feeds a y
    for (const auto& y : ys) n = std::max(n, y.op().id() + 1);
    reaches_y_.assign(static_cast<std::size_t>(n), false);
    for (const auto& y : ys) reaches_y_[static_cast<std::size_t>(y.op().id())] = true;
    // Until nothing changes: a while_loop's back edge comes from a later node.
    for (bool changed = true; changed;) {
      changed = false;
      for (int id = n - 1; id >= 0; --id)
        if (reaches_y_[static_cast<std::size_t>(id)])
          for (const auto& in : graph.node(id).inputs)
            if (in.node < n && !reaches_y_[static_cast<std::size_t>(in.node)]) {
              reaches_y_[static_cast<std::size_t>(in.node)] = true;
              changed = changed || in.node > id;
            }
    }
    from_x_.assign(static_cast<std::size_t>(n), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (int id = 0; id < n; ++id)
        if (!from_x_[static_cast<std::size_t>(id)])
          for (const auto& in : graph.node(id).inputs)
            if (on_path({in.node, in.index})) {
              from_x_[static_cast<std::size_t>(id)] = true;
              changed = true;
              break;
            }
    }
    for (std::size_t i = 0; i < ys.size(); ++i) {
      const Output& y = ys[i];
      if (!on_path(key_of(y))) continue;
      if (i < grad_ys.size() && grad_ys[i].valid()) {
        pending_[key_of(y)].push_back(grad_ys[i]);
      } else {
        auto device = graph_.device(y.op().device());
        pending_[key_of(y)].push_back(ops::ones_like(y, "OnesLike"));
      }
    }
  }

  // The gradient of each x; an x that gets none gets ZerosLike(x) when `zeros_for_none`, else
  // an empty Output.
  std::vector<Output> run(const std::vector<Output>& xs, bool zeros_for_none) {
    for (int id = static_cast<int>(reaches_y_.size()) - 1; id >= 0; --id)
      if (reaches_y_[static_cast<std::size_t>(id)] && from_x_[static_cast<std::size_t>(id)]) {
        const Operation op(&graph_, id);
        if (!in_control_flow(op)) backprop(op);
      }
    std::vector<Output> result;
    for (const auto& x : xs) {
      Output g = aggregated(key_of(x));
      if (!g.valid() && zeros_for_none) {
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
      if (auto sparse = concatenated_slices(list))
        list = {ops::indexed_slices_to_dense(*sparse)};
      else
        list = {ops::add_n(list, "AddN")};
    }
    return list.front();
  }

  // The outermost while_loop around `context` that lies inside this walk's loop (nullptr: none).
  WhileContext* loop_around(int context) const {
    WhileContext* found = nullptr;
    for (int c = context; c >= 0 && c != loop_; c = graph_.context(c)->outer())
      if (auto* loop = dynamic_cast<WhileContext*>(graph_.context(c))) found = loop;
    return found;
  }

  // True when `op` is left to a while_loop's gradient (or to nobody): the ops of a loop are
  // differentiated together, when the walk reaches the loop's results, its Exits.
  bool in_control_flow(const Operation& op) {
    const int context = op.node().context;
    if (context == loop_) return loop_ >= 0 && is_loop_structure(op.type());
    WhileContext* loop = loop_around(context);
    if (loop_ >= 0) {
      if (!graph_.context_within(context, loop_)) return true;  // outside the body: not reached
      throw InvalidArgument("gradients: '" + op.name() + "' lies in " +
                            (loop ? loop->label() : graph_.context(context)->label()) +
                            ", inside the body of " + graph_.context(loop_)->label() +
                            "; the gradient through a cond or loop nested in a while_loop is "
                            "not supported yet");
    }
    if (!loop) return false;  // in a cond: its ops have gradients of their own
    if (handled_loops_.count(loop->id())) return true;
    if ((op.type() != "Exit" && op.type() != "RefExit") || context != loop->id())
      throw InvalidArgument("gradients: '" + ys_.front().name() + "' depends on '" + op.name() +
                            "' inside " + loop->label() +
                            " other than through the loop's results; differentiate the results");
    handled_loops_.insert(loop->id());
    backprop_loop(*loop);
    return true;
  }

  static bool is_loop_structure(const std::string& type) {
    return type == "Enter" || type == "RefEnter" || type == "Merge" || type == "Switch" ||
           type == "RefSwitch" || type == "NextIteration" || type == "RefNextIteration" ||
           type == "Exit" || type == "RefExit" || type == "LoopCond";
  }

  // The gradient of a while_loop (graph/while_loop_gradient.hpp), for its initial values and
  // the values from outside that its body reads.
  void backprop_loop(WhileContext& loop) {
    const WhileContext::Structure& s = loop.structure();
    if (s.exits.empty() || s.enters.empty())
      throw Internal("gradients: " + loop.label() + " has no recorded structure");
    std::vector<Output> exit_grads(s.exits.size());
    for (std::size_t k = 0; k < s.exits.size(); ++k)
      if (s.exits[k].valid()) exit_grads[k] = aggregated(key_of(s.exits[k]));
    std::vector<Output> invariants;
    for (const Output& enter : loop.invariant_enters())
      if (is_floating(enter.dtype()) && !enter.is_ref() && on_path(key_of(enter.op().input(0))))
        invariants.push_back(enter);
    LoopGradient gradient;
    {
      auto device = graph_.device(s.enters.front().device());
      auto scope = graph_.name_scope(loop.frame_name() + "_grad");
      gradient = while_loop_gradient(
          graph_, loop, exit_grads, invariants,
          [this, &loop](const std::vector<Output>& ys, const std::vector<Output>& grad_ys,
                        const std::vector<Output>& xs) {
            return GradientWalk(graph_, ys, grad_ys, xs, loop.id()).run(xs, false);
          });
    }
    for (std::size_t k = 0; k < s.enters.size(); ++k) {
      const Output initial = s.enters[k].input(0);
      if (gradient.initial[k].valid() && on_path(key_of(initial)))
        pending_[key_of(initial)].push_back(gradient.initial[k]);
    }
    for (std::size_t i = 0; i < invariants.size(); ++i)
      pending_[key_of(invariants[i].op().input(0))].push_back(gradient.invariants[i]);
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
                            ys_.front().name() +
                            "': register one with GradientRegistry::global()"
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
  std::vector<Output> ys_;
  int loop_;  // the while_loop whose body this walk differentiates; -1: a whole gradients() call
  std::set<int> handled_loops_;
  std::set<TensorKey> xs_;
  std::vector<bool> reaches_y_;  // per node id: y depends on it through data edges
  std::vector<bool> from_x_;     // per node id: some input is an x or computed from one
  std::map<TensorKey, std::vector<Output>> pending_;
};

}  // namespace psflow::detail

namespace psflow {

PSFLOW_DECL std::vector<Output> gradients(Output y, const std::vector<Output>& xs) {
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
  std::vector<Output> targets;
  for (const auto& x : xs) targets.push_back(detail::differentiation_target(x));
  auto scope = graph.name_scope("gradients");
  return detail::GradientWalk(graph, {y}, {}, targets).run(targets, true);
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
