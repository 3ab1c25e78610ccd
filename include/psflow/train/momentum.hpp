// MomentumOptimizer: TF1's tf.train.MomentumOptimizer (heavy-ball or Nesterov momentum).
//
// Per variable, a slot "momentum" named "<var>/Momentum" (zeros, on the variable's device) and
// one ApplyMomentum op there:
//   accum = accum * momentum + grad
//   var  -= accum * learning_rate                                      (use_nesterov = false)
//   var  -= grad * learning_rate + accum * momentum * learning_rate    (use_nesterov = true)
// The slot holds the new accumulator (TF's formulation, where the learning rate multiplies the
// accumulated value rather than being folded into it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/optimizer.hpp"

namespace psflow::train {

class MomentumOptimizer : public Optimizer {
 public:
  // TF's argument order differs (use_locking, name, use_nesterov); psflow always locks, and
  // takes use_nesterov third (with the learning rate and momentum first), the name last.
  MomentumOptimizer(LearningRate learning_rate, double momentum, bool use_nesterov = false,
                    std::string name = "Momentum", bool use_locking = true)
      : Optimizer(std::move(name), use_locking),
        learning_rate_(learning_rate),
        momentum_(momentum),
        use_nesterov_(use_nesterov) {}

  const LearningRate& learning_rate() const noexcept { return learning_rate_; }
  double momentum() const noexcept { return momentum_; }
  bool use_nesterov() const noexcept { return use_nesterov_; }

 protected:
  PSFLOW_DECL void create_slots(const std::vector<Variable>& var_list) override;
  PSFLOW_DECL Operation apply_dense(Output grad, const Variable& var) override;
  PSFLOW_DECL Operation apply_sparse(const IndexedSlices& grad, const Variable& var) override;
  PSFLOW_DECL DynamicRule dynamic_rule(const Variable& shard) override;

 private:
  LearningRate learning_rate_;
  double momentum_;
  bool use_nesterov_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
void MomentumOptimizer::create_slots(const std::vector<Variable>& var_list) {
  for (const auto& v : var_list) zeros_slot(v, "momentum", name());
}

Operation MomentumOptimizer::apply_dense(Output grad, const Variable& var) {
  return ops::apply_momentum(var.ref(), slot(var, "momentum").ref(),
                             learning_rate_for(learning_rate_, var), grad,
                             constant_like(var, momentum_, "momentum"), use_nesterov_,
                             "ApplyMomentum", use_locking())
      .op();
}

Operation MomentumOptimizer::apply_sparse(const IndexedSlices& grad, const Variable& var) {
  const IndexedSlices rows = deduplicate(grad);
  return ops::sparse_apply_momentum(var.ref(), slot(var, "momentum").ref(),
                                    learning_rate_for(learning_rate_, var), rows.values,
                                    rows.indices, constant_like(var, momentum_, "momentum"),
                                    use_nesterov_, "SparseApplyMomentum", use_locking())
      .op();
}

Optimizer::DynamicRule MomentumOptimizer::dynamic_rule(const Variable& shard) {
  return {"Momentum",
          {{name() + "/momentum", 0.0}},
          {learning_rate_for(learning_rate_, shard), constant_like(shard, momentum_, "momentum")},
          use_nesterov_};
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
