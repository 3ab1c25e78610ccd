// AdadeltaOptimizer: TF1's tf.train.AdadeltaOptimizer (Zeiler 2012).
//
// Per variable, on the variable's device, slots "accum" and "accum_update" (zeros), named
// "<var>/Adadelta" and "<var>/Adadelta_1" like TF's; one ApplyAdadelta op there for a dense
// gradient, one SparseApplyAdadelta after summing duplicate ids for an IndexedSlices, which
// leaves every other row untouched:
//   accum        = rho * accum + (1 - rho) * grad^2
//   update       = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad
//   var         -= learning_rate * update
//   accum_update = rho * accum_update + (1 - rho) * update^2
// The learning rate is a number or a scalar Output of the variables' dtype (LearningRate,
// psflow/train/optimizer.hpp); TF's default 0.001 is kept (the paper's rule has none: pass 1.0).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/optimizer.hpp"

namespace psflow::train {

class AdadeltaOptimizer : public Optimizer {
 public:
  explicit AdadeltaOptimizer(LearningRate learning_rate = 0.001, double rho = 0.95,
                             double epsilon = 1e-8, std::string name = "Adadelta",
                             bool use_locking = true)
      : Optimizer(std::move(name), use_locking),
        learning_rate_(std::move(learning_rate)),
        rho_(rho),
        epsilon_(epsilon) {}

  const LearningRate& learning_rate() const noexcept { return learning_rate_; }
  double rho() const noexcept { return rho_; }
  double epsilon() const noexcept { return epsilon_; }

 protected:
  PSFLOW_DECL void create_slots(const std::vector<Variable>& var_list) override;
  PSFLOW_DECL Operation apply_dense(Output grad, const Variable& var) override;
  PSFLOW_DECL Operation apply_sparse(const IndexedSlices& grad, const Variable& var) override;

 private:
  LearningRate learning_rate_;
  double rho_;
  double epsilon_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
void AdadeltaOptimizer::create_slots(const std::vector<Variable>& var_list) {
  for (const auto& v : var_list) {
    zeros_slot(v, "accum", name());
    zeros_slot(v, "accum_update", name());
  }
}

Operation AdadeltaOptimizer::apply_dense(Output grad, const Variable& var) {
  return ops::apply_adadelta(
             var.ref(), slot(var, "accum").ref(), slot(var, "accum_update").ref(),
             learning_rate_for(learning_rate_, var), constant_like(var, rho_, "rho"),
             constant_like(var, epsilon_, "epsilon"), grad, "ApplyAdadelta", use_locking())
      .op();
}

Operation AdadeltaOptimizer::apply_sparse(const IndexedSlices& grad, const Variable& var) {
  const IndexedSlices rows = deduplicate(grad);
  return ops::sparse_apply_adadelta(
             var.ref(), slot(var, "accum").ref(), slot(var, "accum_update").ref(),
             learning_rate_for(learning_rate_, var), constant_like(var, rho_, "rho"),
             constant_like(var, epsilon_, "epsilon"), rows.values, rows.indices,
             "SparseApplyAdadelta", use_locking())
      .op();
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
