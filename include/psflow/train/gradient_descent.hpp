// GradientDescentOptimizer: TF1's tf.train.GradientDescentOptimizer, plain SGD.
//
// Per variable, one ApplyGradientDescent op on the variable's device:
//   var -= grad * learning_rate
// No slots.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/optimizer.hpp"

namespace psflow::train {

class GradientDescentOptimizer : public Optimizer {
 public:
  explicit GradientDescentOptimizer(LearningRate learning_rate,
                                    std::string name = "GradientDescent", bool use_locking = true)
      : Optimizer(std::move(name), use_locking), learning_rate_(learning_rate) {}

  const LearningRate& learning_rate() const noexcept { return learning_rate_; }

 protected:
  PSFLOW_DECL Operation apply_dense(Output grad, const Variable& var) override;
  // TF's _apply_sparse_duplicate_indices: var[indices] -= lr * values (duplicates add up).
  PSFLOW_DECL Operation apply_sparse(const IndexedSlices& grad, const Variable& var) override;
  PSFLOW_DECL DynamicRule dynamic_rule(const Variable& shard) override;

 private:
  LearningRate learning_rate_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
Operation GradientDescentOptimizer::apply_dense(Output grad, const Variable& var) {
  return ops::apply_gradient_descent(var.ref(), learning_rate_for(learning_rate_, var), grad,
                                     "ApplyGradientDescent", use_locking())
      .op();
}

Operation GradientDescentOptimizer::apply_sparse(const IndexedSlices& grad, const Variable& var) {
  Output delta = ops::mul(grad.values, learning_rate_for(learning_rate_, var));
  return ops::scatter_sub(var, grad.indices, delta, "ScatterSub", use_locking()).op();
}

Optimizer::DynamicRule GradientDescentOptimizer::dynamic_rule(const Variable& shard) {
  return {"GradientDescent", {}, {learning_rate_for(learning_rate_, shard)}};
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
