// AdagradOptimizer: TF1's tf.train.AdagradOptimizer.
//
// Per variable, a slot "accumulator" named "<var>/Adagrad" (filled with
// initial_accumulator_value, on the variable's device) and one ApplyAdagrad op there:
//   accum += grad * grad
//   var   -= grad * learning_rate / sqrt(accum)
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/optimizer.hpp"

namespace psflow::train {

class AdagradOptimizer : public Optimizer {
 public:
  // Throws InvalidArgument unless initial_accumulator_value > 0 (as TF: the first update
  // divides by its square root).
  PSFLOW_DECL explicit AdagradOptimizer(LearningRate learning_rate,
                                        double initial_accumulator_value = 0.1,
                                        std::string name = "Adagrad", bool use_locking = true);

  const LearningRate& learning_rate() const noexcept { return learning_rate_; }
  double initial_accumulator_value() const noexcept { return initial_accumulator_value_; }

 protected:
  PSFLOW_DECL void create_slots(const std::vector<Variable>& var_list) override;
  PSFLOW_DECL Operation apply_dense(Output grad, const Variable& var) override;
  PSFLOW_DECL Operation apply_sparse(const IndexedSlices& grad, const Variable& var) override;
  PSFLOW_DECL DynamicRule dynamic_rule(const Variable& shard) override;

 private:
  LearningRate learning_rate_;
  double initial_accumulator_value_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
AdagradOptimizer::AdagradOptimizer(LearningRate learning_rate, double initial_accumulator_value,
                                   std::string name, bool use_locking)
    : Optimizer(std::move(name), use_locking),
      learning_rate_(learning_rate),
      initial_accumulator_value_(initial_accumulator_value) {
  if (!(initial_accumulator_value > 0.0))
    throw InvalidArgument("AdagradOptimizer: initial_accumulator_value must be positive, got " +
                          std::to_string(initial_accumulator_value));
}

void AdagradOptimizer::create_slots(const std::vector<Variable>& var_list) {
  for (const auto& v : var_list)
    get_or_make_slot(v, constant_initializer(initial_accumulator_value_), "accumulator", name());
}

Operation AdagradOptimizer::apply_dense(Output grad, const Variable& var) {
  return ops::apply_adagrad(var.ref(), slot(var, "accumulator").ref(),
                            learning_rate_for(learning_rate_, var), grad, "ApplyAdagrad",
                            use_locking())
      .op();
}

Operation AdagradOptimizer::apply_sparse(const IndexedSlices& grad, const Variable& var) {
  const IndexedSlices rows = deduplicate(grad);
  return ops::sparse_apply_adagrad(var.ref(), slot(var, "accumulator").ref(),
                                   learning_rate_for(learning_rate_, var), rows.values,
                                   rows.indices, "SparseApplyAdagrad", use_locking())
      .op();
}

Optimizer::DynamicRule AdagradOptimizer::dynamic_rule(const Variable& shard) {
  return {"Adagrad",
          {{name() + "/accumulator", initial_accumulator_value_}},
          {learning_rate_for(learning_rate_, shard)}};
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
