// ops::while_loop, TF1's tf.while_loop, built as TF1 builds it, from five ops:
//
//   Enter(data)             data, in the loop's frame (attrs frame_name, is_constant,
//                           parallel_iterations); RefEnter passes a variable reference
//   Merge(enter, next)      a loop variable in one iteration: the Enter's value in the first, the
//                           NextIteration's in the others (graph/cond.hpp)
//   LoopCond(pred)          the loop's condition, a scalar bool
//   Switch(merge, cond)     on to the body when it holds, else to the Exit
//   NextIteration(value)    the body's result, carried to the Merge of the next iteration
//   Exit(switch:0)          the loop variable's final value, back outside the loop
//
// At run time (runtime/executor.hpp) every iteration of a loop is a frame iteration of its own:
// a value in iteration i is distinct from the same op's value in iteration i+1, up to
// parallel_iterations iterations run at once, and the loop ends when the condition is false, its
// Switches then sending the body a dead value (nothing runs) and the Exits the result.
//
// while_loop calls cond and body inside a WhileContext (graph/graph.hpp): a value from outside
// the loop that they use enters it once, through an Enter made constant for every iteration, so a
// variable of a ps read in the body is read once per step and received once (the Enter is placed
// with the loop, not with the variable). An op of the loop without inputs (a constant) waits on
// the loop's pivot, so it runs in every iteration. A loop's ops must run on one task: a loop cut
// across tasks is refused when its step is prepared.
//
// Gradients (graph/while_loop_gradient.hpp): gradients() builds a second loop that runs the
// iterations backwards, with the forward values it needs saved on stacks; with back_prop = false
// the results pass through a StopGradient and carry none, as in TF.
//
// Kernels: runtime/kernels/control_kernels.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/cond.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

// A while_loop while it is built: ops created in it take outside values through Enters of its
// frame, made constant for every iteration.
class WhileContext : public ControlFlowContext {
 public:
  // The loop's ops, per loop variable k (a counter for maximum_iterations included), for its
  // gradient: the variable's Enter, Merge and Switch, its value in the body (an Identity of the
  // Switch), what the body returns for it (the NextIteration's input), and its Exit (none for
  // the counter).
  struct Structure {
    std::vector<Operation> enters, merges, switches;
    std::vector<Output> body_vars, results, exits;
    Output loop_cond;  // the LoopCond's output
  };

  // `label`: what the loop is, for pictures ("while_loop 'while'").
  WhileContext(std::string frame_name, std::int64_t parallel_iterations, std::string label)
      : frame_name_(std::move(frame_name)),
        parallel_iterations_(parallel_iterations),
        label_(std::move(label)) {}
  void enter_op(Graph& graph, NodeSpec& spec) override;
  std::string label() const override { return label_; }
  const std::string& frame_name() const noexcept { return frame_name_; }
  std::int64_t parallel_iterations() const noexcept { return parallel_iterations_; }
  // Input-less ops created from now on wait on `pivot` (the cond's, then the body's).
  void set_pivot(Output pivot) { pivot_ = std::move(pivot); }
  const Output& pivot() const noexcept { return pivot_; }
  // `x` as the loop sees it: x itself when it was built in the loop, else its Enter.
  Output entered(Graph& graph, const Output& x);
  // The Enters of values from outside, made constant for every iteration, in creation order.
  std::vector<Output> invariant_enters() const;
  const Structure& structure() const noexcept { return structure_; }
  void set_structure(Structure structure) { structure_ = std::move(structure); }

 private:
  std::string frame_name_;
  std::int64_t parallel_iterations_;
  std::string label_;
  Output pivot_;
  std::map<std::pair<int, int>, Output> entered_;  // one Enter per outside value (node, index)
  Structure structure_;
};

namespace ops {

// TF1's tf.while_loop options. maximum_iterations: stop after that many iterations even when
// cond still holds (-1: no limit). parallel_iterations: how many iterations may run at once
// (> 0). back_prop: false makes the loop's results carry no gradient. shape_invariants: per loop
// variable, the shape it keeps across iterations (-1 for a dimension that may change); empty:
// each keeps the shape of its initial value.
struct WhileLoopOptions {
  std::int64_t maximum_iterations = -1;
  int parallel_iterations = 10;
  bool back_prop = true;
  std::vector<std::vector<std::int64_t>> shape_invariants = {};
};

// TF1's tf.while_loop: repeats body on loop_vars while cond(loop_vars) (a scalar bool) is true,
// and returns their final values. body returns as many tensors as loop_vars, with the same
// dtypes, and shapes within the shape invariants. Throws InvalidArgument, naming the loop
// variable, when they differ, when cond's result is not a scalar bool, or for bad options.
PSFLOW_DECL std::vector<Output> while_loop(
    std::function<Output(const std::vector<Output>&)> cond,
    std::function<std::vector<Output>(const std::vector<Output>&)> body,
    std::vector<Output> loop_vars, WhileLoopOptions options = {});

}  // namespace ops

namespace detail {

// while_loop's construction, in a context the caller made (a gradient's loop is one of its own
// kind); the frame is named after the current name scope.
PSFLOW_DECL std::vector<Output> build_while_loop(
    std::function<Output(const std::vector<Output>&)> cond,
    std::function<std::vector<Output>(const std::vector<Output>&)> body,
    std::vector<Output> loop_vars, ops::WhileLoopOptions options,
    std::function<std::shared_ptr<WhileContext>(std::string frame_name)> make_context);

// A while_loop's Enter of `data` into `loop`'s frame (is_constant: the same value in every
// iteration), built in the current context.
PSFLOW_DECL Operation build_enter(const Output& data, const WhileContext& loop, bool is_constant);

}  // namespace detail

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

namespace detail {

PSFLOW_DECL std::vector<OutputSpec> infer_forward(const InferenceContext& ctx, bool ref) {
  return {OutputSpec{ctx.input_dtypes[0], ctx.input_shapes[0], ref}};
}

PSFLOW_DECL Operation build_enter(const Output& data, const WhileContext& loop, bool is_constant) {
  return build_op(data.is_ref() ? "RefEnter" : "Enter", {data},
                  {{"frame_name", loop.frame_name()},
                   {"is_constant", is_constant},
                   {"parallel_iterations", loop.parallel_iterations()}},
                  "", "Enter");
}

PSFLOW_REGISTERED_AT_STARTUP const bool while_loop_ops_registered = [] {
  auto& defs = OpRegistry::global();
  auto forward = [](const InferenceContext& ctx) { return infer_forward(ctx, false); };
  auto forward_ref = [](const InferenceContext& ctx) { return infer_forward(ctx, true); };
  defs.add({.type = "Enter", .num_inputs = 1, .infer = forward});
  defs.add({.type = "RefEnter", .num_inputs = 1, .ref_inputs = {0}, .infer = forward_ref});
  defs.add({.type = "Exit", .num_inputs = 1, .infer = forward});
  defs.add({.type = "RefExit", .num_inputs = 1, .ref_inputs = {0}, .infer = forward_ref});
  defs.add({.type = "NextIteration", .num_inputs = 1, .infer = forward});
  defs.add({.type = "RefNextIteration", .num_inputs = 1, .ref_inputs = {0}, .infer = forward_ref});
  defs.add({.type = "LoopCond", .num_inputs = 1, .infer = [](const InferenceContext& ctx) {
              expect_scalar_bool_pred(ctx, 0);
              return infer_forward(ctx, false);
            }});
  return true;
}();

// True when `shape` fits `invariant`: unknown invariant, or the same rank with every known
// dimension of the invariant equal.
PSFLOW_DECL bool fits_invariant(const PartialShape& shape, const PartialShape& invariant) {
  if (!invariant.known) return true;
  if (!shape.known || shape.rank() != invariant.rank()) return false;
  for (std::size_t d = 0; d < invariant.dims.size(); ++d)
    if (invariant.dims[d] >= 0 && shape.dims[d] != invariant.dims[d]) return false;
  return true;
}

}  // namespace detail

PSFLOW_DECL void WhileContext::enter_op(Graph& graph, NodeSpec& spec) {
  for (Output& in : spec.inputs)
    if (in.valid() && &in.graph() == &graph) in = entered(graph, in);
  for (const Operation& c : spec.control_inputs)
    if (!graph.context_within(c.node().context, id()))
      throw InvalidArgument("while_loop '" + frame_name_ + "': '" + spec.type + "' waits on '" +
                            c.name() +
                            "', an op outside the loop; make the loop's inputs wait on it instead");
  // An op without inputs (a constant) runs in every iteration: after the pivot.
  if (spec.inputs.empty() && pivot_.valid()) spec.control_inputs.push_back(pivot_.op());
}

PSFLOW_DECL Output WhileContext::entered(Graph& graph, const Output& x) {
  if (graph.context_within(x.op().node().context, id())) return x;
  auto [it, inserted] = entered_.try_emplace(std::pair{x.op().id(), x.index()});
  if (inserted) {
    auto outside = graph.with_context(outer());  // x enters from the enclosing context
    // It runs there: not after the ops inside that a control_dependencies scope names.
    auto no_inner_controls = graph.clear_control_dependencies();
    const Operation enter = detail::build_enter(x, *this, true);
    graph.set_node_context(enter, id());
    it->second = enter.output(0);
  }
  return it->second;
}

PSFLOW_DECL std::vector<Output> WhileContext::invariant_enters() const {
  std::vector<Output> enters;
  for (const auto& [key, enter] : entered_) enters.push_back(enter);
  std::sort(enters.begin(), enters.end(),
            [](const Output& a, const Output& b) { return a.op().id() < b.op().id(); });
  return enters;
}

namespace ops {

PSFLOW_DECL std::vector<Output> while_loop(
    std::function<Output(const std::vector<Output>&)> cond,
    std::function<std::vector<Output>(const std::vector<Output>&)> body,
    std::vector<Output> loop_vars, WhileLoopOptions options) {
  return detail::build_while_loop(std::move(cond), std::move(body), std::move(loop_vars), options,
                                  [parallel = options.parallel_iterations](std::string frame_name) {
                                    std::string label = "while_loop '" + frame_name + "'";
                                    return std::make_shared<WhileContext>(
                                        std::move(frame_name), parallel, std::move(label));
                                  });
}

}  // namespace ops

namespace detail {

PSFLOW_DECL std::vector<Output> build_while_loop(
    std::function<Output(const std::vector<Output>&)> cond,
    std::function<std::vector<Output>(const std::vector<Output>&)> body,
    std::vector<Output> loop_vars, ops::WhileLoopOptions options,
    std::function<std::shared_ptr<WhileContext>(std::string frame_name)> make_context) {
  using namespace ops;
  if (!cond || !body) throw InvalidArgument("while_loop: cond and body must be functions");
  if (loop_vars.empty()) throw InvalidArgument("while_loop: loop_vars is empty; give at least one");
  for (std::size_t i = 0; i < loop_vars.size(); ++i)
    if (!loop_vars[i].valid())
      throw InvalidArgument("while_loop: loop variable " + std::to_string(i) +
                            " is an empty Output (default-constructed)");
  if (options.parallel_iterations <= 0)
    throw InvalidArgument("while_loop: parallel_iterations is " +
                          std::to_string(options.parallel_iterations) + "; it must be positive");
  if (options.maximum_iterations < -1)
    throw InvalidArgument("while_loop: maximum_iterations is " +
                          std::to_string(options.maximum_iterations) +
                          "; it must be -1 (no limit) or at least 0");
  if (!options.shape_invariants.empty() && options.shape_invariants.size() != loop_vars.size())
    throw InvalidArgument("while_loop: " + std::to_string(options.shape_invariants.size()) +
                          " shape_invariants for " + std::to_string(loop_vars.size()) +
                          " loop variables; give one per variable, or none");
  Graph& graph = loop_vars[0].graph();

  // maximum_iterations, as TF: a counter carried as loop variable 0, checked with cond.
  const bool counted = options.maximum_iterations >= 0;
  const std::size_t first = counted ? 1 : 0;
  if (counted) {
    loop_vars.insert(loop_vars.begin(), constant(graph, Tensor(std::int64_t{0}), "iteration"));
    if (!options.shape_invariants.empty())
      options.shape_invariants.insert(options.shape_invariants.begin(),
                                      std::vector<std::int64_t>{});
  }
  std::vector<PartialShape> invariants;
  for (std::size_t i = 0; i < loop_vars.size(); ++i) {
    Output& v = loop_vars[i];
    if (v.is_ref()) v = identity(v);  // a variable enters the loop as its value
    PartialShape invariant = v.shape();
    if (!options.shape_invariants.empty() && !(counted && i == 0)) {
      invariant = PartialShape::of(options.shape_invariants[i]);
      if (!detail::fits_invariant(v.shape(), invariant))
        throw InvalidArgument("while_loop: loop variable " + std::to_string(i - first) + " ('" +
                              v.name() + "') has shape " + v.shape().to_string() +
                              ", which does not fit its shape invariant " + invariant.to_string());
    }
    invariants.push_back(std::move(invariant));
  }

  auto scope = graph.name_scope("while");
  const std::string frame_name = graph.current_name_scope();
  std::shared_ptr<WhileContext> loop = make_context(frame_name);
  auto inside = graph.enter_context(loop);
  std::vector<Operation> enters;
  for (std::size_t i = 0; i < loop_vars.size(); ++i) {
    auto outside = graph.with_context(loop->outer());  // the initial values come from there
    enters.push_back(detail::build_enter(loop_vars[i], *loop, false));
  }
  // The loop's ops wait on its inputs only, not on control scopes around the loop.
  auto no_outer_controls = graph.clear_control_dependencies();
  std::vector<Output> merges;
  std::vector<Operation> merge_ops;
  for (std::size_t i = 0; i < loop_vars.size(); ++i) {
    graph.set_node_context(enters[i], loop->id());
    graph.set_output_shape(enters[i].output(0), invariants[i]);
    // The back edge is set once the body exists; until then the Enter stands in for it.
    const Operation merge =
        detail::build_op("Merge", {enters[i].output(0), enters[i].output(0)}, {}, "", "Merge");
    merge_ops.push_back(merge);
    merges.push_back(merge.output(0));
  }

  loop->set_pivot(merges[0]);
  const std::vector<Output> user_vars(merges.begin() + static_cast<std::ptrdiff_t>(first),
                                      merges.end());
  Output pred = cond(user_vars);
  if (!pred.valid()) throw InvalidArgument("while_loop: cond returned an empty Output");
  if (pred.dtype() != DType::boolean || (pred.shape().known && pred.shape().rank() != 0))
    throw InvalidArgument("while_loop: cond returned '" + pred.name() + "' " +
                          std::string(dtype_name(pred.dtype())) + pred.shape().to_string() +
                          "; it must return a scalar bool");
  pred = loop->entered(graph, pred);
  if (counted)
    pred = logical_and(
        less(merges[0], constant(graph, Tensor(options.maximum_iterations), "maximum_iterations")),
        pred);
  const Output loop_cond = detail::build_op("LoopCond", {pred}, {}, "", "LoopCond").output(0);

  std::vector<Operation> switches;
  std::vector<Output> body_vars;
  for (const Output& merge : merges) {
    switches.push_back(detail::build_switch(merge, loop_cond));
    body_vars.push_back(identity(switches.back().output(1)));
  }
  loop->set_pivot(body_vars[0]);
  std::vector<Output> results = body(
      std::vector<Output>(body_vars.begin() + static_cast<std::ptrdiff_t>(first), body_vars.end()));
  if (counted) results.insert(results.begin(), body_vars[0] + 1.0);
  if (results.size() != loop_vars.size())
    throw InvalidArgument("while_loop: body returns " + std::to_string(results.size() - first) +
                          " tensors for " + std::to_string(loop_vars.size() - first) +
                          " loop variables; it must return one per variable");
  for (std::size_t i = 0; i < results.size(); ++i) {
    Output r = results[i];
    const std::string which = "loop variable " + std::to_string(i - first);
    if (!r.valid()) throw InvalidArgument("while_loop: body returned an empty Output for " + which);
    if (r.is_ref()) r = identity(r);
    r = loop->entered(graph, r);
    if (r.dtype() != merges[i].dtype())
      throw InvalidArgument("while_loop: " + which + " ('" + loop_vars[i].name() + "') is " +
                            std::string(dtype_name(merges[i].dtype())) + " but body returns '" +
                            r.name() + "' " + std::string(dtype_name(r.dtype())));
    if (!detail::fits_invariant(r.shape(), invariants[i]))
      throw InvalidArgument("while_loop: " + which + " ('" + loop_vars[i].name() + "') has shape " +
                            invariants[i].to_string() + " on entry but '" + r.name() +
                            "' has shape " + r.shape().to_string() +
                            " after an iteration; give it a shape invariant "
                            "(WhileLoopOptions::shape_invariants) that both fit");
    const Operation next = detail::build_op("NextIteration", {r}, {}, "", "NextIteration");
    graph.set_input(merge_ops[i], 1, next.output(0));
    results[i] = r;
  }
  std::vector<Output> exits;
  WhileContext::Structure structure{.enters = enters,
                                    .merges = merge_ops,
                                    .switches = switches,
                                    .body_vars = body_vars,
                                    .results = results,
                                    .exits = std::vector<Output>(first),
                                    .loop_cond = loop_cond};
  for (std::size_t i = first; i < switches.size(); ++i) {
    exits.push_back(detail::build_op("Exit", {switches[i].output(0)}, {}, "", "Exit").output(0));
    structure.exits.push_back(exits.back());
  }
  loop->set_structure(std::move(structure));
  if (!options.back_prop) {
    auto outside = graph.with_context(loop->outer());
    for (Output& e : exits) e = stop_gradient(e);
  }
  return exits;
}

}  // namespace detail

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
