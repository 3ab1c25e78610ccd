// Optimizer: TF1's tf.train.Optimizer, the base of GradientDescentOptimizer, MomentumOptimizer,
// AdagradOptimizer and AdamOptimizer (one header each, next to this one).
//
// minimize(loss) = apply_gradients(compute_gradients(loss)). apply_gradients builds, for each
// (gradient, variable) pair, one fused update op (ApplyGradientDescent, ApplyAdam, ... from
// psflow/graph/training_ops.hpp) colocated with its variable, so in a ps cluster only the
// gradient travels to the variable's ps and the update runs there (in place when no reader
// holds the variable's buffer, see psflow/runtime/kernels/training_kernels.hpp; every process
// that runs the updates, each ps task, must include that header). It groups the updates into
// one op named like TF's ("GradientDescent", "Adam", then "Adam_1", ...); with a global step it
// instead returns an AssignAdd of 1 on the global step (named that way), which runs after every
// update, on the global step's device.
//
// Slot variables (a momentum accumulator per variable, Adam's m and v, ...) are created on the
// first apply_gradients that sees the variable, named like TF's slot_creator ("w/Momentum",
// "w/Adam", "w/Adam_1"), not trainable, in the global variables collection (so
// global_variables_initializer and Saver see them; build the optimizer before asking for the
// initializer), and colocated with their variable. Later calls reuse them.
//
// Hyper-parameters are doubles; each update op gets them as constants of its variable's dtype,
// created colocated with the variable (TF creates float32 tensors on the worker and casts them
// per variable; here they live next to the update, so no scalar crosses the network per step).
// The learning rate may instead be a scalar float32/float64 Output (LearningRate below), e.g. a
// rate decayed from the global step, computed on any device: each update op takes it as its
// input, so that one scalar travels to each ps per step; as TF, it is cast to each variable's
// dtype where their dtypes differ.
//
// Sparse gradients: a gradient that is an IndexedSlices (the gradient of a gather or
// embedding_lookup, see psflow/graph/sparse_ops.hpp; in the pairs it is the IndexedSlicesToDense
// Output, which IndexedSlices converts to implicitly) is applied by apply_sparse, with the
// optimizer's sparse kernel on the variable's ps: only the rows in the gradient travel and change
// (duplicate ids summed first, as TF's _apply_sparse_duplicate_indices); every other row of the
// variable and of its slots stays bit-identical. The one exception is AdamOptimizer without
// `lazy`, which follows TF1 and decays every row's moments. A gradient that was transformed
// (clipped, scaled) after compute_gradients is a dense Output and is applied densely.
//
// compute_gradients differs from gradients() in one way, on purpose: a variable the loss does not
// depend on gets an empty Output (TF's None), not gradients()'s zeros, so apply_gradients skips
// it as TF does instead of creating slots for it and decaying them with zero gradients.
//
// Not thread-safe: build graphs from one thread, as with Graph. An Optimizer may be used on
// several graphs; its slots are kept per graph.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/graph/control_ops.hpp"
#include "psflow/graph/dynamic_embedding.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/sparse_ops.hpp"
#include "psflow/graph/training_ops.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/train/gradients.hpp"

namespace psflow::train {

using GradsAndVars = std::vector<std::pair<Output, Variable>>;

// An optimizer's learning rate: a number, or a scalar float32/float64 Output computed in the
// graph (from a placeholder, a variable, the global step...). Implicitly constructible from
// both, so every optimizer takes either: GradientDescentOptimizer(0.1) or
// GradientDescentOptimizer(lr_tensor). Per variable, a number becomes a constant of the
// variable's dtype next to the update; an Output is used as it is, cast to the variable's dtype
// when that differs (as TF's _prepare casts the rate per variable dtype).
class LearningRate {
 public:
  LearningRate(double value) : value_(value) {}  // NOLINT: implicit, numbers stay numbers
  // Throws InvalidArgument for an empty Output, a dtype other than float32/float64, or a shape
  // known not to be a scalar (a shape known only at run time is checked by the update kernel).
  LearningRate(Output tensor);                                                // NOLINT: implicit
  LearningRate(const Variable& variable) : LearningRate(variable.value()) {}  // NOLINT: implicit

  bool is_tensor() const noexcept { return tensor_.valid(); }
  // The number; throws FailedPrecondition when the learning rate is an Output.
  double value() const {
    if (is_tensor())
      throw FailedPrecondition("the learning rate is the tensor '" + tensor_.name() +
                               "', not a number");
    return value_;
  }
  // The Output; empty when the learning rate is a number.
  const Output& tensor() const noexcept { return tensor_; }

  // The learning rate as a scalar of `var`'s dtype: for a number, a constant named `name`
  // created where the caller's scopes say; for an Output, the Output itself (cast to var's dtype
  // where it differs) after checking that it belongs to var's graph (InvalidArgument naming
  // `optimizer`, the tensor and the variable otherwise).
  Output for_variable(const Variable& var, std::string_view optimizer,
                      std::string_view name = "learning_rate") const;

 private:
  double value_ = 0;
  Output tensor_;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Ops that compute the gradients of `loss` and apply them: apply_gradients(compute_gradients(
  // loss, var_list), global_step, name). Throws InvalidArgument when no variable gets a gradient.
  Operation minimize(Output loss, std::optional<Variable> global_step = {},
                     const std::vector<Variable>& var_list = {}, std::string_view name = "");

  // (gradient, variable) for each variable of `var_list` (default: trainable_variables of the
  // loss's graph), the gradient taken with respect to the variable's value (Variable::value()).
  // A variable the loss does not depend on gets an empty Output, TF's None, which
  // apply_gradients skips. Throws InvalidArgument when there is no variable to optimize.
  GradsAndVars compute_gradients(Output loss, const std::vector<Variable>& var_list = {});

  // One update op per pair whose gradient is non-empty, grouped as described above; `name`
  // defaults to the optimizer's name. The gradient must have its variable's dtype and shape;
  // the variables must be float32/float64 and live in one graph. Throws InvalidArgument
  // otherwise, or when every gradient is empty.
  Operation apply_gradients(const GradsAndVars& grads_and_vars,
                            std::optional<Variable> global_step = {}, std::string_view name = "");

  // The slot `slot_name` (e.g. "momentum", "m") of `var`, once apply_gradients has created it.
  std::optional<Variable> get_slot(const Variable& var, std::string_view slot_name) const;
  // The slot names this optimizer uses, sorted (e.g. {"m", "v"} for Adam).
  std::vector<std::string> get_slot_names() const;
  // Every variable this optimizer created in `graph` (slots and non-slot variables such as
  // Adam's beta1_power), sorted by name: what to save or initialize with the model.
  std::vector<Variable> variables(const Graph& graph) const;

  const std::string& name() const noexcept { return name_; }
  // Every optimizer's last constructor argument, default true: each update holds its variable's
  // (and slots') locks, so concurrent updates from many workers are exact. false is TF1's
  // default, lock-free (Hogwild) updates: updates of a variable run at once and may overwrite
  // one another (runtime/resource_manager.hpp, VariableResource::LockFreeWriter). Dynamic
  // tables are always updated under their stripes' locks, exact either way.
  bool use_locking() const noexcept { return use_locking_; }

 protected:
  explicit Optimizer(std::string name, bool use_locking = true);

  // Hooks for the optimizers, called by apply_gradients in this order (TF's _create_slots,
  // _apply_dense and _finish):
  // creates the slots of `var_list` (the variables that have gradients) not yet created;
  virtual void create_slots(const std::vector<Variable>& var_list) { (void)var_list; }
  // builds the update of one variable; runs inside the name scope "<name>/update_<var>" and
  // colocated with `var`;
  virtual Operation apply_dense(Output grad, const Variable& var) = 0;
  // the same for a sparse gradient (same scope and colocation). The default applies the dense
  // value with apply_dense (what an optimizer without a sparse kernel can do); the built-in ones
  // override it with sparse kernels, most of them on deduplicate(grad).
  virtual Operation apply_sparse(const IndexedSlices& grad, const Variable& var) {
    return apply_dense(ops::indexed_slices_to_dense(grad), var);
  }
  // The update of a shard of a dynamic embedding table (graph/dynamic_embedding.hpp): the
  // DynamicTableApply rule, the slots it keeps in every row (named "<optimizer>/<slot>") and its
  // hyper-parameters in the rule's order, built on the shard's device (same scope and colocation
  // as apply_sparse). The default throws InvalidArgument: an optimizer without a row rule cannot
  // train dynamic tables.
  struct DynamicRule {
    std::string rule;
    std::vector<psflow::detail::DynamicSlot> slots;
    std::vector<Output> hyper;
    bool use_nesterov = false;
  };
  virtual DynamicRule dynamic_rule(const Variable& shard) {
    throw InvalidArgument(name_ + " cannot train the dynamic embedding table shard '" +
                          shard.name() +
                          "': use GradientDescent, Momentum, Adagrad, Adam or Ftrl for it");
  }
  // returns more ops to group with the updates (e.g. Adam's beta-power updates); runs inside
  // the name scope "<name>/".
  virtual std::vector<Operation> finish(Graph& graph, const std::vector<Operation>& update_ops) {
    (void)graph;
    (void)update_ops;
    return {};
  }

  // For the hooks: the slot `slot_name` of `var`, created on first use with `init` and named
  // "<var>/<op_name>" (made unique with _1, _2, ... like TF's slot_creator).
  Variable get_or_make_slot(const Variable& var, const Initializer& init,
                            const std::string& slot_name, const std::string& op_name);
  Variable zeros_slot(const Variable& var, const std::string& slot_name,
                      const std::string& op_name) {
    return get_or_make_slot(var, zeros_initializer(), slot_name, op_name);
  }
  // The slot, which create_slots must have made; throws Internal otherwise.
  Variable slot(const Variable& var, const std::string& slot_name) const;
  // A variable of this optimizer not tied to one variable (TF's _create_non_slot_variable),
  // created once per graph: `name` (unique), scalar of `colocate_with`'s dtype, not trainable,
  // colocated with `colocate_with`.
  Variable get_or_create_non_slot_variable(const std::string& name, double initial_value,
                                           const Variable& colocate_with);
  std::optional<Variable> non_slot_variable(const Graph& graph, const std::string& name) const;
  // `grad` with each index once and the rows of duplicate indices summed (TF's
  // _deduplicate_indexed_slices: Unique + UnsortedSegmentSum), built where the caller's scopes
  // say (apply_sparse: on the variable's device).
  // A gradient known to have unique indices (one lookup's) is returned as it is.
  static IndexedSlices deduplicate(const IndexedSlices& grad) {
    if (grad.unique_indices) return grad;
    auto [unique_indices, positions] = ops::unique(grad.indices);
    Output summed = ops::unsorted_segment_sum(grad.values, positions, ops::size(unique_indices));
    return IndexedSlices{summed, unique_indices, grad.dense_shape, true};
  }
  // The learning rate `lr` for `var` (LearningRate::for_variable, errors naming this optimizer).
  Output learning_rate_for(const LearningRate& lr, const Variable& var) const {
    return lr.for_variable(var, name_);
  }
  // A scalar constant of `like`'s dtype, created where the caller's scopes say.
  static Output constant_like(const Variable& like, double value, std::string_view name) {
    return ops::scalar_like(like.value(), value, name);
  }

 private:
  // The DynamicTableApply of a dynamic table shard's gradient (an IndexedSlices keyed by id),
  // duplicates summed (unless it is one lookup's, whose keys are distinct), stamped with the
  // global step when there is one.
  Operation apply_dynamic(const Output& grad, const Variable& shard,
                          const std::optional<Variable>& global_step);

  using VarKey = std::pair<std::uint64_t, std::string>;  // (graph uid, variable name)
  static VarKey key_of(const Variable& var) { return {var.graph().uid(), var.name()}; }

  std::string name_;
  bool use_locking_ = true;
  std::map<std::string, std::map<VarKey, Variable>> slots_;  // slot name -> variable -> slot
  std::map<VarKey, Variable> non_slot_;                      // (graph, name) -> variable
};

namespace detail {

// `base`, or base_1, base_2, ... : the first that names neither an op nor a scope, after
// prefixing `scope` (TF's unique naming of a name scope whose op carries the scope's name).
PSFLOW_DECL std::string unique_leaf_name(const Graph& graph, const std::string& scope,
                                         const std::string& base);

}  // namespace detail

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

namespace detail {

// True when `name` is an op of `graph` or the scope of one ("name/...").
PSFLOW_DECL bool name_in_use(const Graph& graph, const std::string& name) {
  if (graph.find_operation(name)) return true;
  const std::string prefix = name + "/";
  for (std::size_t i = 0; i < graph.num_nodes(); ++i)
    if (graph.node(static_cast<int>(i)).name.starts_with(prefix)) return true;
  return false;
}

PSFLOW_DECL std::string unique_leaf_name(const Graph& graph, const std::string& scope,
                                         const std::string& base) {
  for (int i = 0;; ++i) {
    std::string leaf = i == 0 ? base : base + "_" + std::to_string(i);
    if (!name_in_use(graph, scope.empty() ? leaf : scope + "/" + leaf)) return leaf;
  }
}

// `base`, or base_1, base_2, ... : the first name no op has (TF's unique variable names).
PSFLOW_DECL std::string unique_variable_name(const Graph& graph, const std::string& base) {
  for (int i = 0;; ++i) {
    std::string name = i == 0 ? base : base + "_" + std::to_string(i);
    if (!graph.find_operation(name)) return name;
  }
}

// True when `y` depends on `x` through data edges (TF's gradients would not return None).
PSFLOW_DECL bool depends_on(const Output& y, const Operation& x) {
  const Graph& graph = y.graph();
  std::vector<int> stack{y.op().id()};
  std::vector<bool> seen(graph.num_nodes(), false);
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (id == x.id()) return true;
    if (seen[static_cast<std::size_t>(id)]) continue;
    seen[static_cast<std::size_t>(id)] = true;
    for (const TensorId& in : graph.node(id).inputs) stack.push_back(in.node);
  }
  return false;
}

}  // namespace detail

PSFLOW_DECL LearningRate::LearningRate(Output tensor) : tensor_(tensor) {
  if (!tensor.valid()) throw InvalidArgument("learning rate: the Output is empty");
  if (tensor.dtype() != DType::float32 && tensor.dtype() != DType::float64)
    throw InvalidArgument("learning rate '" + tensor.name() + "' is " +
                          std::string(dtype_name(tensor.dtype())) +
                          "; a learning rate must be a float32 or float64 scalar");
  const PartialShape shape = tensor.shape();
  if (shape.known && !shape.dims.empty())
    throw InvalidArgument("learning rate '" + tensor.name() + "' has shape " + shape.to_string() +
                          "; a learning rate must be a scalar (shape [])");
}

PSFLOW_DECL Output LearningRate::for_variable(const Variable& var, std::string_view optimizer,
                                              std::string_view name) const {
  if (!is_tensor()) return ops::scalar_like(var.value(), value_, name);
  if (&tensor_.graph() != &var.graph())
    throw InvalidArgument(std::string(optimizer) + ": the learning rate '" + tensor_.name() +
                          "' belongs to another graph than variable '" + var.name() + "'");
  return ops::cast(tensor_, var.dtype());
}

PSFLOW_DECL Optimizer::Optimizer(std::string name, bool use_locking)
    : name_(std::move(name)), use_locking_(use_locking) {
  if (name_.empty()) throw InvalidArgument("Optimizer: the name must not be empty");
}

PSFLOW_DECL Operation Optimizer::minimize(Output loss, std::optional<Variable> global_step,
                                          const std::vector<Variable>& var_list,
                                          std::string_view name) {
  GradsAndVars grads = compute_gradients(loss, var_list);
  const bool any =
      std::any_of(grads.begin(), grads.end(), [](const auto& gv) { return gv.first.valid(); });
  if (!any) {
    std::string names;
    for (const auto& [g, v] : grads) names += (names.empty() ? "" : ", ") + v.name();
    throw InvalidArgument("minimize: no gradients provided for any variable: loss '" + loss.name() +
                          "' depends on none of [" + names +
                          "]; check that the loss is computed from the variables");
  }
  return apply_gradients(grads, std::move(global_step), name);
}

PSFLOW_DECL GradsAndVars Optimizer::compute_gradients(Output loss,
                                                      const std::vector<Variable>& var_list) {
  if (!loss.valid()) throw InvalidArgument("compute_gradients: the loss is an empty Output");
  std::vector<Variable> vars = var_list;
  if (vars.empty()) {  // the trainable variables, and the shards of trainable dynamic tables
    vars = trainable_variables(loss.graph());
    for (const auto& shard : trainable_dynamic_table_shards(loss.graph())) vars.push_back(shard);
  }
  if (vars.empty())
    throw InvalidArgument(
        "compute_gradients: no variables to optimize (the graph has no trainable "
        "variables and no var_list was given)");
  std::vector<Output> xs;
  std::vector<std::size_t> connected;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!vars[i].valid())
      throw InvalidArgument("compute_gradients: var_list holds an empty Variable");
    if (&vars[i].graph() != &loss.graph())
      throw InvalidArgument("compute_gradients: variable '" + vars[i].name() +
                            "' belongs to another graph than the loss '" + loss.name() + "'");
    if (detail::depends_on(loss, vars[i].op())) {  // through its value or a direct read
      xs.push_back(vars[i].value());
      connected.push_back(i);
    }
  }
  GradsAndVars out;
  for (const auto& v : vars) out.emplace_back(Output(), v);
  if (xs.empty()) return out;
  std::vector<Output> grads = gradients(loss, xs);
  if (grads.size() != xs.size())
    throw Internal("compute_gradients: gradients() returned " + std::to_string(grads.size()) +
                   " gradients for " + std::to_string(xs.size()) + " variables");
  for (std::size_t k = 0; k < connected.size(); ++k) out[connected[k]].first = grads[k];
  return out;
}

PSFLOW_DECL Operation Optimizer::apply_gradients(const GradsAndVars& grads_and_vars,
                                                 std::optional<Variable> global_step,
                                                 std::string_view name) {
  if (grads_and_vars.empty())
    throw InvalidArgument("apply_gradients: no (gradient, variable) pairs given");
  std::vector<std::pair<Output, Variable>> pairs;
  std::string skipped;
  Graph* graph = nullptr;
  for (const auto& [grad, var] : grads_and_vars) {
    if (!var.valid()) throw InvalidArgument("apply_gradients: a pair holds an empty Variable");
    if (!graph) graph = &var.graph();
    if (&var.graph() != graph)
      throw InvalidArgument("apply_gradients: variable '" + var.name() +
                            "' belongs to another graph than '" +
                            grads_and_vars.front().second.name() + "'");
    if (!is_floating(var.dtype()))
      throw InvalidArgument("apply_gradients: variable '" + var.name() + "' is " +
                            std::string(dtype_name(var.dtype())) +
                            "; optimizers update float32 or float64 variables only");
    if (!grad.valid()) {
      skipped += (skipped.empty() ? "" : ", ") + var.name();
      continue;
    }
    if (&grad.graph() != graph)
      throw InvalidArgument("apply_gradients: the gradient of '" + var.name() +
                            "' belongs to another graph");
    if (grad.dtype() != var.dtype())
      throw InvalidArgument("apply_gradients: the gradient '" + grad.name() + "' of variable '" +
                            var.name() + "' is " + std::string(dtype_name(grad.dtype())) +
                            ", the variable is " + std::string(dtype_name(var.dtype())));
    pairs.emplace_back(grad, var);
  }
  if (pairs.empty())
    throw InvalidArgument("apply_gradients: no gradients provided for any variable (all empty): " +
                          skipped);
  if (global_step) {
    if (!global_step->valid())
      throw InvalidArgument("apply_gradients: global_step is an empty Variable");
    if (&global_step->graph() != graph)
      throw InvalidArgument(
          "apply_gradients: global_step belongs to another graph than the variables");
    if (!is_numeric(global_step->dtype()))
      throw InvalidArgument("apply_gradients: global_step '" + global_step->name() +
                            "' must be an integer variable (get_or_create_global_step makes one)");
  }

  std::vector<Variable> var_list;  // dynamic table shards keep their slots in their rows
  for (const auto& [g, v] : pairs)
    if (!psflow::detail::is_dynamic_table(v)) var_list.push_back(v);
  if (!var_list.empty()) create_slots(var_list);

  const std::string outer = graph->current_name_scope();
  const std::string leaf =
      detail::unique_leaf_name(*graph, outer, name.empty() ? name_ : std::string(name));
  const std::string scope = outer.empty() ? leaf : outer + "/" + leaf;

  std::vector<Operation> to_group;
  Operation update;
  {
    auto in_scope = graph->name_scope(scope + "/");
    std::vector<Operation> update_ops;
    for (const auto& [grad, var] : pairs) {
      auto var_scope = graph->name_scope("update_" + var.name());
      auto colocated = graph->colocate_with(var.op());
      if (psflow::detail::is_dynamic_table(var))
        update_ops.push_back(apply_dynamic(grad, var, global_step));
      else if (auto slices = as_indexed_slices(grad))
        update_ops.push_back(apply_sparse(*slices, var));
      else
        update_ops.push_back(apply_dense(grad, var));
    }
    to_group = update_ops;
    for (const auto& op : finish(*graph, update_ops)) to_group.push_back(op);
    if (global_step) update = ops::group(to_group, "update");
  }
  if (!global_step) return ops::group(to_group, leaf);

  // TF: with control_dependencies([finish]): with colocate_with(global_step): assign_add(gs, 1).
  auto after_updates = graph->control_dependencies({update});
  Output one;
  {
    auto in_scope = graph->name_scope(scope + "/");
    auto colocated = graph->colocate_with(global_step->op());
    Tensor value = visit_numeric_dtype(global_step->dtype(), "global_step increment", [](auto tag) {
      using T = typename decltype(tag)::type;
      return Tensor(static_cast<T>(1));
    });
    one = ops::constant(*graph, value, "value");
  }
  return ops::assign_add(global_step->ref(), one, leaf).op();
}

PSFLOW_DECL Operation Optimizer::apply_dynamic(const Output& grad, const Variable& shard,
                                               const std::optional<Variable>& global_step) {
  const auto slices = as_indexed_slices(grad);
  if (!slices)
    throw InvalidArgument(name_ + ": the gradient '" + grad.name() +
                          "' of dynamic embedding table shard '" + shard.name() +
                          "' is dense; a dynamic table takes the sparse gradient of its lookups "
                          "(pass compute_gradients' gradient unchanged)");
  const IndexedSlices rows = deduplicate(*slices);
  DynamicRule rule = dynamic_rule(shard);
  Graph& graph = shard.graph();
  const Output step = global_step ? global_step->value()
                                  : ops::constant(graph, Tensor(std::int64_t{-1}), "no_step");
  return ops::dynamic_table_apply(shard, rows.values, rows.indices, step, rule.rule, rule.slots,
                                  rule.hyper, rule.use_nesterov, "DynamicTableApply");
}

PSFLOW_DECL std::optional<Variable> Optimizer::get_slot(const Variable& var,
                                                        std::string_view slot_name) const {
  auto named = slots_.find(std::string(slot_name));
  if (named == slots_.end()) return std::nullopt;
  auto it = named->second.find(key_of(var));
  if (it == named->second.end()) return std::nullopt;
  return it->second;
}

PSFLOW_DECL std::vector<std::string> Optimizer::get_slot_names() const {
  std::vector<std::string> names;
  for (const auto& [slot_name, vars] : slots_) names.push_back(slot_name);
  return names;
}

PSFLOW_DECL std::vector<Variable> Optimizer::variables(const Graph& graph) const {
  std::vector<Variable> out;
  for (const auto& [slot_name, vars] : slots_)
    for (const auto& [key, v] : vars)
      if (key.first == graph.uid()) out.push_back(v);
  for (const auto& [key, v] : non_slot_)
    if (key.first == graph.uid()) out.push_back(v);
  std::sort(out.begin(), out.end(),
            [](const Variable& a, const Variable& b) { return a.name() < b.name(); });
  return out;
}

PSFLOW_DECL Variable Optimizer::get_or_make_slot(const Variable& var, const Initializer& init,
                                                 const std::string& slot_name,
                                                 const std::string& op_name) {
  auto& named = slots_[slot_name];
  if (auto it = named.find(key_of(var)); it != named.end()) return it->second;
  Graph& graph = var.graph();
  const std::string name = detail::unique_variable_name(graph, var.name() + "/" + op_name);
  auto colocated = graph.colocate_with(var.op());
  // A shard's slot is the same shard of the slot of the whole variable ("emb/Adagrad"), as TF's
  // slot_creator names it for the Saver.
  std::optional<SaveSliceInfo> slice;
  if (const auto& info = var.save_slice_info()) {
    slice = *info;
    slice->full_name = info->full_name + "/" + op_name;
  }
  Variable slot = psflow::detail::create_variable(graph, name, var.shape(), init, var.dtype(),
                                                  /*trainable=*/false, nullptr, std::move(slice));
  named.emplace(key_of(var), slot);
  return slot;
}

PSFLOW_DECL Variable Optimizer::slot(const Variable& var, const std::string& slot_name) const {
  if (auto s = get_slot(var, slot_name)) return *s;
  throw Internal(name_ + ": variable '" + var.name() + "' has no slot '" + slot_name +
                 "' (create_slots must make it before apply_dense)");
}

PSFLOW_DECL Variable Optimizer::get_or_create_non_slot_variable(const std::string& name,
                                                                double initial_value,
                                                                const Variable& colocate_with) {
  Graph& graph = colocate_with.graph();
  const VarKey key{graph.uid(), name};
  if (auto it = non_slot_.find(key); it != non_slot_.end()) return it->second;
  const std::string unique = detail::unique_variable_name(graph, name);
  auto colocated = graph.colocate_with(colocate_with.op());
  Variable v = psflow::detail::create_variable(
      graph, unique, {}, constant_initializer(initial_value), colocate_with.dtype(),
      /*trainable=*/false, nullptr, std::nullopt);
  non_slot_.emplace(key, v);
  return v;
}

PSFLOW_DECL std::optional<Variable> Optimizer::non_slot_variable(const Graph& graph,
                                                                 const std::string& name) const {
  if (auto it = non_slot_.find(VarKey{graph.uid(), name}); it != non_slot_.end()) return it->second;
  return std::nullopt;
}
#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
