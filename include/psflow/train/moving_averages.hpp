// ExponentialMovingAverage: TF1's tf.train.ExponentialMovingAverage, shadow copies of variables
// that follow them slowly (evaluate or serve with the averaged weights).
//
// apply(var_list) creates, per variable, a shadow variable "<var>/ExponentialMovingAverage"
// (average_name), not trainable, in the global variables (so global_variables_initializer and
// Saver see it), colocated with its variable: under replica_device_setter the shadow lives on
// the variable's ps, and each update reads the variable and writes the shadow there, so nothing
// but the decay crosses the network. The shadow starts at the variable's initial value: its
// initializer reads the very node that feeds the variable's own initializer, so
// global_variables_initializer gives both the same value even from a random initializer (TF
// reads var.initialized_value(); psflow has no cond, and this is the same value whenever both
// are initialized in one step, as the initializer and Supervisor do). apply returns one op that
// runs, per variable,
//   shadow -= (1 - decay) * (shadow - var)
// with decay = min(decay, (1 + num_updates) / (10 + num_updates)) when num_updates is given
// (TF's warm-up: the average moves faster while few updates were made).
//
// num_updates is any number variable, usually the int64 global step; as TF, it is cast to float32
// for the decay, which is then cast to each variable's dtype. zero_debias is accepted as TF's,
// and as in TF it changes nothing here: TF debiases only averages of plain tensors, which start
// at zero; apply averages variables, whose shadows start at their value.
//
// Not thread-safe: build graphs from one thread, as with Graph.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "psflow/graph/control_ops.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/variable.hpp"
#include "psflow/train/optimizer.hpp"

namespace psflow::train {

class ExponentialMovingAverage {
 public:
  // Throws InvalidArgument for a decay outside [0, 1], or an empty or non-floating num_updates.
  explicit ExponentialMovingAverage(double decay, std::optional<Variable> num_updates = {},
                                    bool zero_debias = false,
                                    std::string name = "ExponentialMovingAverage");

  // The update op of `var_list` (empty: the trainable variables of num_updates' graph; without
  // num_updates pass the graph, below), grouped into one NoOp named `name()` (made unique like
  // TF's name scopes). Creates the shadows. Throws InvalidArgument for an empty or non-floating
  // variable, variables of several graphs, a variable this object already averages (TF's
  // "Moving average already computed"), or a num_updates of another dtype than a variable.
  Operation apply(const std::vector<Variable>& var_list = {});
  // The same, with `graph`'s trainable variables when var_list is empty.
  Operation apply(Graph& graph, const std::vector<Variable>& var_list = {});

  // The shadow of `var`; throws NotFound naming the variable when apply() did not cover it.
  Variable average(const Variable& var) const;
  // "<var>/<name>", the shadow's name (also before apply, as TF's average_name).
  std::string average_name(const Variable& var) const { return var.name() + "/" + name_; }

  double decay() const noexcept { return decay_; }
  bool zero_debias() const noexcept { return zero_debias_; }
  const std::string& name() const noexcept { return name_; }

 private:
  using VarKey = std::pair<std::uint64_t, std::string>;  // (graph uid, variable name)
  static VarKey key_of(const Variable& var) { return {var.graph().uid(), var.name()}; }

  double decay_;
  std::optional<Variable> num_updates_;
  bool zero_debias_;
  std::string name_;
  std::map<VarKey, Variable> averages_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

PSFLOW_DECL ExponentialMovingAverage::ExponentialMovingAverage(double decay,
                                                               std::optional<Variable> num_updates,
                                                               bool zero_debias, std::string name)
    : decay_(decay),
      num_updates_(std::move(num_updates)),
      zero_debias_(zero_debias),
      name_(std::move(name)) {
  if (name_.empty()) throw InvalidArgument("ExponentialMovingAverage: the name must not be empty");
  if (!(decay >= 0.0 && decay <= 1.0))
    throw InvalidArgument("ExponentialMovingAverage: decay must be in [0, 1], got " +
                          std::to_string(decay));
  if (num_updates_) {
    if (!num_updates_->valid())
      throw InvalidArgument("ExponentialMovingAverage: num_updates is an empty Variable");
    if (!is_numeric(num_updates_->dtype()))
      throw InvalidArgument("ExponentialMovingAverage: num_updates '" + num_updates_->name() +
                            "' is " + std::string(dtype_name(num_updates_->dtype())) +
                            "; it counts updates, so it must be a number (usually global_step)");
  }
}

PSFLOW_DECL Operation ExponentialMovingAverage::apply(const std::vector<Variable>& var_list) {
  if (var_list.empty()) {
    if (!num_updates_)
      throw InvalidArgument(
          "ExponentialMovingAverage::apply: no variables given and no graph to take the "
          "trainable variables of: pass var_list, or the graph (apply(graph))");
    return apply(num_updates_->graph(), var_list);
  }
  if (!var_list.front().valid())
    throw InvalidArgument("ExponentialMovingAverage::apply: var_list holds an empty Variable");
  return apply(var_list.front().graph(), var_list);
}

PSFLOW_DECL Operation ExponentialMovingAverage::apply(Graph& graph,
                                                      const std::vector<Variable>& var_list) {
  const std::vector<Variable> vars = var_list.empty() ? trainable_variables(graph) : var_list;
  if (vars.empty())
    throw InvalidArgument("ExponentialMovingAverage::apply: no variables to average");
  for (const Variable& var : vars) {
    if (!var.valid())
      throw InvalidArgument("ExponentialMovingAverage::apply: var_list holds an empty Variable");
    if (&var.graph() != &graph)
      throw InvalidArgument("ExponentialMovingAverage::apply: variable '" + var.name() +
                            "' belongs to another graph");
    if (!is_floating(var.dtype()))
      throw InvalidArgument("ExponentialMovingAverage::apply: variable '" + var.name() + "' is " +
                            std::string(dtype_name(var.dtype())) +
                            "; the variables must be float32 or float64");
    if (averages_.count(key_of(var)))
      throw InvalidArgument(
          "ExponentialMovingAverage::apply: moving average already computed for '" + var.name() +
          "'");
    if (num_updates_ && &num_updates_->graph() != &graph)
      throw InvalidArgument("ExponentialMovingAverage::apply: num_updates '" +
                            num_updates_->name() + "' belongs to another graph");
  }

  // The shadows, colocated with their variables, initialized from the variables' initial values.
  for (const Variable& var : vars) {
    const Output initial = var.initializer().input(1);
    auto colocated = graph.colocate_with(var.op());
    std::optional<SaveSliceInfo> slice;
    if (const auto& info = var.save_slice_info()) {
      slice = *info;
      slice->full_name = info->full_name + "/" + name_;
    }
    Variable avg = psflow::detail::create_variable(
        graph, average_name(var), var.shape(),
        Initializer([initial](Graph&, const Shape&, DType) { return ops::identity(initial); }),
        var.dtype(), /*trainable=*/false, nullptr, std::move(slice));
    averages_.emplace(key_of(var), avg);
  }

  const std::string outer = graph.current_name_scope();
  const std::string leaf = detail::unique_leaf_name(graph, outer, name_);
  const std::string scope = outer.empty() ? leaf : outer + "/" + leaf;
  std::vector<Operation> updates;
  {
    auto in_scope = graph.name_scope(scope + "/");
    Output one_minus_decay;  // with num_updates: 1 - min(decay, (1 + n) / (10 + n))
    if (num_updates_) {
      Output n = ops::cast(num_updates_->value(), DType::float32);
      Output decay = ops::minimum(ops::scalar_like(n, decay_, "decay"), (1.0 + n) / (10.0 + n));
      one_minus_decay = ops::sub(ops::scalar_like(n, 1.0), decay, "one_minus_decay");
    }
    for (const Variable& var : vars) {
      const Variable& avg = averages_.at(key_of(var));
      auto name_scope = graph.name_scope("AssignMovingAvg");
      auto colocated = graph.colocate_with(avg.op());
      Output factor = one_minus_decay.valid()
                          ? ops::cast(one_minus_decay, var.dtype())
                          : ops::scalar_like(avg.value(), 1.0 - decay_, "decay");
      // Fresh reads, made in the caller's control_dependencies scope (TF's pattern: average
      // after the training op), not the variables' "read" snapshots made at their creation.
      Output delta = ops::mul(
          ops::identity(avg.ref(), "read_average") - ops::identity(var.ref(), "read"), factor);
      updates.push_back(ops::assign_sub(avg.ref(), delta).op());
    }
  }
  return ops::group(updates, leaf);
}

PSFLOW_DECL Variable ExponentialMovingAverage::average(const Variable& var) const {
  if (!var.valid()) throw InvalidArgument("ExponentialMovingAverage::average: empty Variable");
  if (auto it = averages_.find(key_of(var)); it != averages_.end()) return it->second;
  throw NotFound("ExponentialMovingAverage '" + name_ + "' has no average of variable '" +
                 var.name() + "': apply() did not cover it");
}
#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
