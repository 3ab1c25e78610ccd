// The gradient of a while_loop (graph/while_loop.hpp), built as TF1 builds it: with a second loop
// that runs the forward loop's iterations backwards, and stacks that carry the forward values
// it needs from one loop to the other.
//
// - The forward loop gains a counter of its iterations. Its final value, n, is where the
//   backward loop's counter starts; the backward loop runs while it is above 0, so it runs n
//   times.
// - The backward loop's variables: the counter; per float loop variable, the gradient with
//   respect to that variable at the start of the iteration it undoes (at first: the gradient of
//   the loop's result); per float loop-invariant value (a variable read in the body), the sum of
//   its gradient over the iterations undone so far.
// - Its body differentiates the forward body, from what the body returns back to the loop
//   variables and invariants as the body sees them. Each gradient op built there that takes a
//   forward value instead takes a pop from that value's stack (a loop-invariant value is taken
//   from outside, once), and the forward loop pushes the value in each iteration. A stack is
//   last in, first out, so iteration i of the backward loop gets iteration n-1-i's values.
// - Order: the forward loop may run several iterations at once, and so may the backward one.
//   A push waits for its iteration's counter, and the counter's next value waits for the
//   iteration's pushes, so one stack's pushes happen in iteration order; the same holds for
//   the pops and the backward counter.
//
// Not supported yet (gradients() throws InvalidArgument naming the op): a while_loop nested in
// another, or a cond inside a loop's body, on the way from an x to y.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/graph/stack_ops.hpp"
#include "psflow/graph/while_loop.hpp"

namespace psflow::detail {

// Differentiates part of a graph: the gradients of `xs` given those of `ys` (TF's grad_ys); an
// empty Output for an x that gets none. gradients() supplies it (graph/gradients.hpp).
using PartialGradient = std::function<std::vector<Output>(const std::vector<Output>& ys,
                                                          const std::vector<Output>& grad_ys,
                                                          const std::vector<Output>& xs)>;

// What a loop's gradient gives: per loop variable k, the gradient of its initial value (empty
// when none); per invariant Enter of `invariants`, the gradient of the value it takes in.
struct LoopGradient {
  std::vector<Output> initial;
  std::vector<Output> invariants;
};

// Builds the gradient of `forward`'s loop. `exit_grads[k]`: the gradient flowing into loop
// variable k's result (empty when none); `invariants`: the forward loop's invariant Enters to
// differentiate. Float variables and invariants only; the others get none.
PSFLOW_DECL LoopGradient while_loop_gradient(Graph& graph, WhileContext& forward,
                                             const std::vector<Output>& exit_grads,
                                             const std::vector<Output>& invariants,
                                             const PartialGradient& differentiate);

// The backward loop's context: a forward value taken by an op built in it becomes a pop of that
// value's stack, and a forward invariant the value from outside.
class GradLoopContext final : public WhileContext {
 public:
  GradLoopContext(std::string frame_name, std::int64_t parallel_iterations,
                  const WhileContext& forward)
      : WhileContext(frame_name, parallel_iterations,
                     "gradient of while_loop '" + forward.frame_name() + "'"),
        forward_(forward) {}
  void enter_op(Graph& graph, NodeSpec& spec) override;

  // A forward value with the stack that carries it.
  struct Stacked {
    Output value;
    Output handle;
  };
  const std::vector<Stacked>& stacked() const noexcept { return stacked_; }
  const std::vector<Operation>& pops() const noexcept { return pops_; }

 private:
  Output from_forward(Graph& graph, const Output& x);

  const WhileContext& forward_;
  std::map<std::pair<int, int>, Output> popped_;  // per forward value: its pop
  std::vector<Stacked> stacked_;
  std::vector<Operation> pops_;
};

}  // namespace psflow::detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL void GradLoopContext::enter_op(Graph& graph, NodeSpec& spec) {
  for (Output& in : spec.inputs)
    if (in.valid() && &in.graph() == &graph &&
        graph.context_within(in.op().node().context, forward_.id()))
      in = from_forward(graph, in);
  WhileContext::enter_op(graph, spec);
}

PSFLOW_DECL Output GradLoopContext::from_forward(Graph& graph, const Output& x) {
  const Operation op = x.op();
  if (op.node().context != forward_.id())
    throw InvalidArgument("gradients: '" + op.name() + "' lies in a cond or a loop inside " +
                          forward_.label() +
                          "; the gradient through a cond or loop nested in a while_loop is not "
                          "supported yet");
  if ((op.type() == "Enter" || op.type() == "RefEnter") && op_attr<bool>(op, "is_constant"))
    return op.input(0);  // the same in every iteration: taken from outside (and entered)
  auto [it, inserted] = popped_.try_emplace(std::pair{op.id(), x.index()});
  if (inserted) {
    // The stack lives outside both loops (the current context is this loop's outer one).
    const Output handle = ops::stack(graph, x.dtype(), -1, op.name() + "_stack");
    stacked_.push_back({x, handle});
    auto inside = graph.with_context(id());
    auto after_pivot = graph.control_dependencies({pivot().op()});
    const Output pop = ops::stack_pop(handle, x.dtype(), x.shape());
    pops_.push_back(pop.op());
    it->second = pop;
  }
  return it->second;
}

// The forward loop's counter, added to it: its value in the body, and its result.
struct ForwardCounter {
  Operation merge;
  Output in_body;
  Output result;
};

PSFLOW_DECL ForwardCounter add_forward_counter(Graph& graph, WhileContext& forward) {
  const WhileContext::Structure& loop = forward.structure();
  auto in_forward = graph.with_context(forward.id());
  Operation enter;
  {
    auto outside = graph.with_context(forward.outer());
    enter = build_enter(ops::constant(graph, Tensor(std::int64_t{0}), "count"), forward, false);
  }
  graph.set_node_context(enter, forward.id());
  ForwardCounter counter;
  counter.merge = build_op("Merge", {enter.output(0), enter.output(0)}, {}, "", "Merge");
  const Operation sw = build_switch(counter.merge.output(0), loop.loop_cond);
  counter.in_body = ops::identity(sw.output(1));
  counter.result = build_op("Exit", {sw.output(0)}, {}, "", "Exit").output(0);
  return counter;
}

// The counter's next value, after this iteration's pushes: closes the forward counter's loop.
PSFLOW_DECL void close_forward_counter(Graph& graph, WhileContext& forward,
                                       const ForwardCounter& counter,
                                       const std::vector<Operation>& pushes) {
  auto in_forward = graph.with_context(forward.id());
  auto after_pushes = graph.control_dependencies(pushes);
  const Output next_value = counter.in_body + 1.0;
  const Operation next = build_op("NextIteration", {next_value}, {}, "", "NextIteration");
  graph.set_input(counter.merge, 1, next.output(0));
}

PSFLOW_DECL LoopGradient while_loop_gradient(Graph& graph, WhileContext& forward,
                                             const std::vector<Output>& exit_grads,
                                             const std::vector<Output>& invariants,
                                             const PartialGradient& differentiate) {
  const WhileContext::Structure& loop = forward.structure();
  auto no_controls = graph.clear_control_dependencies();
  const ForwardCounter counter = add_forward_counter(graph, forward);

  // The backward loop's variables: counter, gradients of the float loop variables, sums of the
  // invariants' gradients.
  std::vector<std::size_t> carried;  // loop variables whose gradient the loop carries
  std::vector<Output> loop_vars{counter.result};
  for (std::size_t k = 0; k < loop.exits.size(); ++k) {
    if (!loop.exits[k].valid() || !is_floating(loop.exits[k].dtype())) continue;
    carried.push_back(k);
    loop_vars.push_back(exit_grads[k].valid() ? exit_grads[k] : ops::zeros_like(loop.exits[k]));
  }
  for (const Output& enter : invariants) loop_vars.push_back(ops::zeros_like(enter.op().input(0)));

  std::shared_ptr<GradLoopContext> context;
  const std::vector<Output> results = build_while_loop(
      [](const std::vector<Output>& vars) {
        return ops::greater(vars[0], ops::scalar_like(vars[0], 0.0));
      },
      [&](const std::vector<Output>& vars) {
        std::vector<Output> ys, grad_ys, xs;
        for (std::size_t j = 0; j < carried.size(); ++j) {
          ys.push_back(loop.results[carried[j]]);
          grad_ys.push_back(vars[1 + j]);
          xs.push_back(loop.body_vars[carried[j]]);
        }
        xs.insert(xs.end(), invariants.begin(), invariants.end());
        const std::vector<Output> grads = differentiate(ys, grad_ys, xs);
        std::vector<Output> next(vars.size());
        for (std::size_t j = 0; j < carried.size(); ++j)
          next[1 + j] = grads[j].valid() ? grads[j] : ops::zeros_like(vars[1 + j]);
        for (std::size_t i = 0; i < invariants.size(); ++i) {
          const Output& sum = vars[1 + carried.size() + i];
          const Output& g = grads[carried.size() + i];
          next[1 + carried.size() + i] = g.valid() ? sum + g : sum;
        }
        for (std::size_t i = 1; i < next.size(); ++i)  // a gradient is shaped like its value
          if (!fits_invariant(next[i].shape(), vars[i].shape())) {
            next[i] = ops::identity(next[i]);
            graph.set_output_shape(next[i], vars[i].shape());
          }
        auto after_pops = graph.control_dependencies(context->pops());
        next[0] = vars[0] - 1.0;
        return next;
      },
      loop_vars, {.parallel_iterations = static_cast<int>(forward.parallel_iterations())},
      [&](std::string frame_name) {
        context = std::make_shared<GradLoopContext>(std::move(frame_name),
                                                    forward.parallel_iterations(), forward);
        return context;
      });

  // The forward loop pushes what the backward one pops, each after its iteration's counter.
  std::vector<Operation> pushes;
  {
    auto in_forward = graph.with_context(forward.id());
    auto after_count = graph.control_dependencies({counter.in_body.op()});
    for (const auto& [value, handle] : context->stacked())
      pushes.push_back(ops::stack_push(handle, value).op());
  }
  close_forward_counter(graph, forward, counter, pushes);

  LoopGradient gradient;
  gradient.initial.resize(loop.exits.size());
  for (std::size_t j = 0; j < carried.size(); ++j) gradient.initial[carried[j]] = results[1 + j];
  for (std::size_t i = 0; i < invariants.size(); ++i)
    gradient.invariants.push_back(results[1 + carried.size() + i]);
  return gradient;
}

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
