// AdamOptimizer: TF1's tf.train.AdamOptimizer (Kingma & Ba, the "epsilon hat" formulation).
//
// Per variable, slots "m" and "v" named "<var>/Adam" and "<var>/Adam_1" (zeros, on the
// variable's device) and one ApplyAdam op there; plus two scalars shared by all variables,
// "beta1_power" and "beta2_power" (initially beta1 and beta2, not trainable), colocated with the
// first variable by name, as TF does. With t the step number (1 on the first update):
//   lr_t = learning_rate * sqrt(1 - beta2^t) / (1 - beta1^t)
//   m    = beta1 * m + (1 - beta1) * grad       (computed as m += (grad - m) * (1 - beta1))
//   v    = beta2 * v + (1 - beta2) * grad^2     (computed as v += (grad^2 - v) * (1 - beta2))
//   var -= lr_t * m / (sqrt(v) + epsilon)
// After every variable's update, beta1_power *= beta1 and beta2_power *= beta2 (ops
// "<name>/mul", "<name>/Assign", on beta1_power's device).
//
// Sparse gradients (an embedding table's): by default TF1's AdamOptimizer._apply_sparse: the
// moments of every row decay (m *= beta1, v *= beta2), the gradient rows are added, and every
// row of the variable moves by lr_t * m / (sqrt(v) + epsilon): dense work on the ps (no dense
// traffic), and rows not in the batch change. With lazy = true (TF's LazyAdamOptimizer) only the
// rows in the batch are updated, with the equations above; every other row and its moments stay
// bit-identical.
//
// Choices where TF is not explicit: beta1_power/beta2_power take the first variable's dtype
// (TF makes them float32 and casts per variable; psflow has no Cast op, and the ApplyAdam kernel
// accepts either float dtype for them, so float64 models keep full precision).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/optimizer.hpp"

namespace psflow::train {

class AdamOptimizer : public Optimizer {
 public:
  // `lazy` changes sparse updates only: see the file comment.
  explicit AdamOptimizer(LearningRate learning_rate = 0.001, double beta1 = 0.9,
                         double beta2 = 0.999, double epsilon = 1e-8, std::string name = "Adam",
                         bool lazy = false, bool use_locking = true)
      : Optimizer(std::move(name), use_locking),
        learning_rate_(learning_rate),
        beta1_(beta1),
        beta2_(beta2),
        epsilon_(epsilon),
        lazy_(lazy) {}

  const LearningRate& learning_rate() const noexcept { return learning_rate_; }
  double beta1() const noexcept { return beta1_; }
  double beta2() const noexcept { return beta2_; }
  double epsilon() const noexcept { return epsilon_; }
  bool lazy() const noexcept { return lazy_; }

  // beta1_power and beta2_power of `graph` (TF's _get_beta_accumulators), once created.
  PSFLOW_DECL std::optional<std::pair<Variable, Variable>> beta_accumulators(
      const Graph& graph) const;

 protected:
  PSFLOW_DECL void create_slots(const std::vector<Variable>& var_list) override;
  PSFLOW_DECL Operation apply_dense(Output grad, const Variable& var) override;
  PSFLOW_DECL Operation apply_sparse(const IndexedSlices& grad, const Variable& var) override;
  // A dynamic table's rows always take the lazy update (only the looked-up rows move).
  PSFLOW_DECL DynamicRule dynamic_rule(const Variable& shard) override;

  // TF's _finish: after the updates, beta1_power *= beta1 and beta2_power *= beta2, on their
  // device.
  PSFLOW_DECL std::vector<Operation> finish(Graph& graph,
                                            const std::vector<Operation>& update_ops) override;

 private:
  PSFLOW_DECL std::pair<Variable, Variable> accumulators(const Graph& graph) const;

  LearningRate learning_rate_;
  double beta1_;
  double beta2_;
  double epsilon_;
  bool lazy_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
std::optional<std::pair<Variable, Variable>> AdamOptimizer::beta_accumulators(
    const Graph& graph) const {
  auto b1 = non_slot_variable(graph, "beta1_power");
  auto b2 = non_slot_variable(graph, "beta2_power");
  if (!b1 || !b2) return std::nullopt;
  return std::pair{*b1, *b2};
}

void AdamOptimizer::create_slots(const std::vector<Variable>& var_list) {
  const Variable& first =
      *std::min_element(var_list.begin(), var_list.end(),
                        [](const Variable& a, const Variable& b) { return a.name() < b.name(); });
  get_or_create_non_slot_variable("beta1_power", beta1_, first);
  get_or_create_non_slot_variable("beta2_power", beta2_, first);
  for (const auto& v : var_list) {
    zeros_slot(v, "m", name());
    zeros_slot(v, "v", name());
  }
}

Operation AdamOptimizer::apply_dense(Output grad, const Variable& var) {
  auto [beta1_power, beta2_power] = accumulators(var.graph());
  return ops::apply_adam(var.ref(), slot(var, "m").ref(), slot(var, "v").ref(), beta1_power.value(),
                         beta2_power.value(), learning_rate_for(learning_rate_, var),
                         constant_like(var, beta1_, "beta1"), constant_like(var, beta2_, "beta2"),
                         constant_like(var, epsilon_, "epsilon"), grad, /*use_nesterov=*/false,
                         "ApplyAdam", use_locking())
      .op();
}

Operation AdamOptimizer::apply_sparse(const IndexedSlices& grad, const Variable& var) {
  auto [beta1_power, beta2_power] = accumulators(var.graph());
  const IndexedSlices rows = deduplicate(grad);
  return ops::sparse_apply_adam(
             var.ref(), slot(var, "m").ref(), slot(var, "v").ref(), beta1_power.value(),
             beta2_power.value(), learning_rate_for(learning_rate_, var),
             constant_like(var, beta1_, "beta1"), constant_like(var, beta2_, "beta2"),
             constant_like(var, epsilon_, "epsilon"), rows.values, rows.indices, lazy_,
             "SparseApplyAdam", use_locking())
      .op();
}

Optimizer::DynamicRule AdamOptimizer::dynamic_rule(const Variable& shard) {
  // Made here when the model has only dynamic tables (create_slots then never ran).
  const Variable beta1_power = get_or_create_non_slot_variable("beta1_power", beta1_, shard);
  const Variable beta2_power = get_or_create_non_slot_variable("beta2_power", beta2_, shard);
  return {"Adam",
          {{name() + "/m", 0.0}, {name() + "/v", 0.0}},
          {beta1_power.value(), beta2_power.value(), learning_rate_for(learning_rate_, shard),
           constant_like(shard, beta1_, "beta1"), constant_like(shard, beta2_, "beta2"),
           constant_like(shard, epsilon_, "epsilon")}};
}

std::vector<Operation> AdamOptimizer::finish(Graph& graph,
                                             const std::vector<Operation>& update_ops) {
  auto after = graph.control_dependencies(update_ops);
  auto [beta1_power, beta2_power] = accumulators(graph);
  auto colocated = graph.colocate_with(beta1_power.op());
  Output update_beta1 =
      ops::assign(beta1_power.ref(), beta1_power.value() * constant_like(beta1_power, beta1_, ""));
  Output update_beta2 =
      ops::assign(beta2_power.ref(), beta2_power.value() * constant_like(beta2_power, beta2_, ""));
  return {update_beta1.op(), update_beta2.op()};
}

std::pair<Variable, Variable> AdamOptimizer::accumulators(const Graph& graph) const {
  auto acc = beta_accumulators(graph);
  if (!acc) throw Internal(name() + ": beta1_power/beta2_power were not created for this graph");
  return *acc;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
