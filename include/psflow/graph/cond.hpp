// ops::cond, TF1's tf.cond, built as TF1 builds it: from Switch and Merge.
//
//   Switch(data, pred) -> (output_false, output_true): data goes to the output that pred picks;
//       the other output is dead (runtime/executor.hpp). RefSwitch does the same with a
//       variable reference.
//   Merge(inputs...) -> (output, value_index): the one live input, and its index.
//
// cond(pred, true_fn, false_fn) calls each function inside a CondContext, the branch's
// control-flow context (graph/graph.hpp): every value a branch op takes from outside the branch
// goes through a Switch on pred, created next to that value (so a branch reading a ps variable
// switches it on the ps), and a branch op without inputs (a constant) waits on the branch's
// pivot, the Switch of pred itself. At run time the untaken branch's values are dead, so none
// of its ops runs; a dead value crosses tasks as such, and the Merges at the end pass on the
// taken branch's results. Nested conds nest their contexts the same way.
//
// Gradients (TF's _SwitchGrad and _MergeGrad): Merge's gradient is a Switch of the incoming
// gradient on the branch's pred, so it reaches the taken branch only; Switch's gradient merges
// the two branches' gradients (zeros on the side a branch did not use).
//
// Kernels: runtime/kernels/control_kernels.hpp.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

// One branch of a cond while it is built: ops created in it take outside values through
// Switches on `pred` (its `branch` output: 1 for true_fn, 0 for false_fn).
class CondContext final : public ControlFlowContext {
 public:
  // `label`: what the branch is, for pictures ("cond 'cond': when 'pred:0' is true").
  CondContext(Output pred, Output pivot, int branch, std::string label)
      : pred_(std::move(pred)),
        pivot_(std::move(pivot)),
        branch_(branch),
        label_(std::move(label)) {}
  void enter_op(Graph& graph, NodeSpec& spec) override;
  std::string label() const override { return label_; }
  const Output& pred() const noexcept { return pred_; }
  // `x` as this branch sees it: x itself when it was built in the branch, else its Switch.
  Output switched(Graph& graph, const Output& x);

 private:
  Output pred_;
  Output pivot_;
  int branch_;
  std::string label_;
  std::map<std::pair<int, int>, Output> switched_;  // one Switch per outside value (node, index)
};

namespace ops {

// TF1's tf.cond: the results of true_fn when `pred` (a scalar bool) is true, else false_fn's.
// Only the taken branch's ops run. Both functions must return the same number of tensors with
// the same dtypes (shapes may differ: a result's shape is what the two have in common).
// Throws InvalidArgument, naming what differs, when they do not, or when pred is not a scalar
// bool.
PSFLOW_DECL std::vector<Output> cond(Output pred, std::function<std::vector<Output>()> true_fn,
                                     std::function<std::vector<Output>()> false_fn);

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

namespace detail {

PSFLOW_DECL void expect_scalar_bool_pred(const InferenceContext& ctx, std::size_t i) {
  const PartialShape& shape = ctx.input_shapes[i];
  if (ctx.input_dtypes[i] != DType::boolean || (shape.known && shape.rank() != 0))
    ctx.fail("the predicate " + ctx.describe_input(i) + " must be a scalar bool");
}

PSFLOW_DECL std::vector<OutputSpec> infer_switch(const InferenceContext& ctx, bool ref) {
  expect_scalar_bool_pred(ctx, 1);
  const OutputSpec data{ctx.input_dtypes[0], ctx.input_shapes[0], ref};
  return {data, data};
}

// The shape two values have in common: each dimension where they agree, else unknown.
PSFLOW_DECL PartialShape common_shape(const PartialShape& a, const PartialShape& b) {
  if (!a.known || !b.known || a.rank() != b.rank()) return PartialShape::unknown();
  PartialShape out = a;
  for (std::size_t d = 0; d < a.dims.size(); ++d)
    if (a.dims[d] != b.dims[d]) out.dims[d] = -1;
  return out;
}

PSFLOW_DECL std::vector<OutputSpec> infer_merge(const InferenceContext& ctx) {
  if (ctx.input_dtypes.empty()) ctx.fail("takes at least one input");
  PartialShape shape = ctx.input_shapes[0];
  for (std::size_t i = 1; i < ctx.input_dtypes.size(); ++i) {
    ctx.expect_same_dtype(0, i);
    shape = common_shape(shape, ctx.input_shapes[i]);
  }
  return {{ctx.input_dtypes[0], shape, false}, {DType::int32, PartialShape::scalar(), false}};
}

PSFLOW_DECL Operation build_switch(const Output& data, const Output& pred) {
  auto next_to_data = data.graph().colocate_with(data.op());
  return build_op(data.is_ref() ? "RefSwitch" : "Switch", {data, pred}, {}, "", "Switch");
}

// Switch's gradient: the two branches' gradients merged (zeros where a branch has none).
PSFLOW_DECL Grads switch_grad(const Operation& op, const Grads& g) {
  std::vector<Output> sides(2);
  for (int k = 0; k < 2; ++k)
    sides[static_cast<std::size_t>(k)] = g[static_cast<std::size_t>(k)].valid()
                                             ? g[static_cast<std::size_t>(k)]
                                             : ops::zeros_like(op.output(k));
  return {build_op("Merge", sides, {}, "", "cond_grad").output(0), Output()};
}

// Merge's gradient: the incoming gradient switched on the pred of the branch its inputs came
// from, so that each input gets it only when its branch was taken.
PSFLOW_DECL Grads merge_grad(const Operation& op, const Grads& g) {
  Graph& graph = op.graph();
  const auto* branch =
      dynamic_cast<const CondContext*>(graph.context(op.input(0).op().node().context));
  if (!branch)
    throw InvalidArgument("gradient of Merge '" + op.name() +
                          "': only the Merges that ops::cond builds can be differentiated");
  const Operation sw = build_op("Switch", {g[0], branch->pred()}, {}, "", "cond_grad");
  Grads out;
  for (int i = 0; i < op.num_inputs(); ++i) out.push_back(sw.output(i == 0 ? 0 : 1));
  return out;
}

PSFLOW_REGISTERED_AT_STARTUP const bool cond_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "Switch", .num_inputs = 2, .infer = [](const InferenceContext& ctx) {
              return infer_switch(ctx, false);
            }});
  defs.add({.type = "RefSwitch",
            .num_inputs = 2,
            .ref_inputs = {0},
            .infer = [](const InferenceContext& ctx) { return infer_switch(ctx, true); }});
  defs.add({.type = "Merge", .num_inputs = -1, .infer = infer_merge});
  auto& grads = GradientRegistry::global();
  grads.add("Switch", switch_grad);
  grads.add("RefSwitch", switch_grad);
  grads.add("Merge", merge_grad);
  return true;
}();

}  // namespace detail

PSFLOW_DECL void CondContext::enter_op(Graph& graph, NodeSpec& spec) {
  for (Output& in : spec.inputs)
    if (in.valid() && &in.graph() == &graph) in = switched(graph, in);
  // An op without inputs (a constant) runs only in the taken branch: after the pivot.
  if (spec.inputs.empty()) spec.control_inputs.push_back(pivot_.op());
}

PSFLOW_DECL Output CondContext::switched(Graph& graph, const Output& x) {
  if (graph.context_within(x.op().node().context, id())) return x;
  auto [it, inserted] = switched_.try_emplace(std::pair{x.op().id(), x.index()});
  if (inserted) it->second = detail::build_switch(x, pred_).output(branch_);
  return it->second;
}

namespace ops {

PSFLOW_DECL std::vector<Output> cond(Output pred, std::function<std::vector<Output>()> true_fn,
                                     std::function<std::vector<Output>()> false_fn) {
  if (!pred.valid()) throw InvalidArgument("cond: pred is an empty Output (default-constructed)");
  if (!true_fn || !false_fn) throw InvalidArgument("cond: true_fn and false_fn must be functions");
  Graph& graph = pred.graph();
  if (pred.dtype() != DType::boolean || (pred.shape().known && pred.shape().rank() != 0))
    throw InvalidArgument("cond: pred '" + pred.name() + "' is " +
                          std::string(dtype_name(pred.dtype())) + pred.shape().to_string() +
                          ", it must be a scalar bool");
  auto scope = graph.name_scope("cond");
  // The pivots: Switch(pred, pred)'s outputs, live only on their own side.
  const Operation pivots = detail::build_switch(pred, pred);
  const Output pivot_false = identity(pivots.output(0), "switch_f");
  const Output pivot_true = identity(pivots.output(1), "switch_t");
  const Output pred_id = identity(pred, "pred_id");

  const std::string cond_name = graph.current_name_scope();
  auto build_branch = [&](int branch, const Output& pivot,
                          const std::function<std::vector<Output>()>& fn) {
    auto context = std::make_shared<CondContext>(
        pred_id, pivot, branch,
        "cond '" + cond_name + "': when '" + pred.name() + "' is " + (branch ? "true" : "false"));
    auto inside = graph.enter_context(context);
    std::vector<Output> results = fn();
    for (std::size_t i = 0; i < results.size(); ++i) {
      Output& r = results[i];
      if (!r.valid())
        throw InvalidArgument(std::string("cond: ") + (branch ? "true_fn" : "false_fn") +
                              " returned an empty Output as result " + std::to_string(i));
      // A result from outside the branch, or a variable reference, is passed through an
      // Identity in the branch, so that the Merge sees the branch's own value.
      if (r.is_ref() || !graph.context_within(r.op().node().context, context->id()))
        r = identity(r);
    }
    return results;
  };
  const std::vector<Output> when_true = build_branch(1, pivot_true, true_fn);
  const std::vector<Output> when_false = build_branch(0, pivot_false, false_fn);

  if (when_true.size() != when_false.size() || when_true.empty())
    throw InvalidArgument("cond: true_fn returns " + std::to_string(when_true.size()) +
                          " tensors and false_fn " + std::to_string(when_false.size()) +
                          "; both must return the same number, at least one");
  for (std::size_t i = 0; i < when_true.size(); ++i)
    if (when_true[i].dtype() != when_false[i].dtype())
      throw InvalidArgument("cond: result " + std::to_string(i) + " is '" + when_true[i].name() +
                            "' " + std::string(dtype_name(when_true[i].dtype())) +
                            " from true_fn but '" + when_false[i].name() + "' " +
                            std::string(dtype_name(when_false[i].dtype())) +
                            " from false_fn; the branches must return the same dtypes");
  std::vector<Output> merged;
  for (std::size_t i = 0; i < when_true.size(); ++i)
    merged.push_back(
        detail::build_op("Merge", {when_false[i], when_true[i]}, {}, "", "Merge").output(0));
  return merged;
}

}  // namespace ops

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
