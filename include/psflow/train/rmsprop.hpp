// RMSPropOptimizer: TF1's tf.train.RMSPropOptimizer.
//
// Per variable, on the variable's device, slots "rms" (ONES, TF's rule), then "mg" (zeros, only
// when centered), then "momentum" (zeros), named in that order "<var>/RMSProp",
// "<var>/RMSProp_1", ... as TF's slot_creator does; one ApplyRMSProp (ApplyCenteredRMSProp when
// centered) op there for a dense gradient, one SparseApplyRMSProp (SparseApplyCenteredRMSProp)
// after summing duplicate ids for an IndexedSlices, which leaves every other row untouched:
//   ms  = decay * ms + (1 - decay) * grad^2
//   mg  = decay * mg + (1 - decay) * grad                              (centered only)
//   mom = momentum * mom + learning_rate * grad / sqrt(ms + epsilon)   (ms - mg^2 + epsilon
//                                                                       when centered)
//   var -= mom
// (the exact arithmetic is psflow/graph/training_ops.hpp's). The learning rate is a number or a
// scalar Output of the variables' dtype (LearningRate, psflow/train/optimizer.hpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/optimizer.hpp"

namespace psflow::train {

class RMSPropOptimizer : public Optimizer {
 public:
  // TF's argument order, without use_locking (psflow always locks) and with centered before the
  // name.
  explicit RMSPropOptimizer(LearningRate learning_rate, double decay = 0.9, double momentum = 0.0,
                            double epsilon = 1e-10, bool centered = false,
                            std::string name = "RMSProp", bool use_locking = true)
      : Optimizer(std::move(name), use_locking),
        learning_rate_(std::move(learning_rate)),
        decay_(decay),
        momentum_(momentum),
        epsilon_(epsilon),
        centered_(centered) {}

  const LearningRate& learning_rate() const noexcept { return learning_rate_; }
  double decay() const noexcept { return decay_; }
  double momentum() const noexcept { return momentum_; }
  double epsilon() const noexcept { return epsilon_; }
  bool centered() const noexcept { return centered_; }

 protected:
  PSFLOW_DECL void create_slots(const std::vector<Variable>& var_list) override;
  PSFLOW_DECL Operation apply_dense(Output grad, const Variable& var) override;
  PSFLOW_DECL Operation apply_sparse(const IndexedSlices& grad, const Variable& var) override;

 private:
  LearningRate learning_rate_;
  double decay_;
  double momentum_;
  double epsilon_;
  bool centered_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
void RMSPropOptimizer::create_slots(const std::vector<Variable>& var_list) {
  for (const auto& v : var_list) {
    get_or_make_slot(v, constant_initializer(1.0), "rms", name());
    if (centered_) zeros_slot(v, "mg", name());
    zeros_slot(v, "momentum", name());
  }
}

Operation RMSPropOptimizer::apply_dense(Output grad, const Variable& var) {
  if (centered_)
    return ops::apply_centered_rms_prop(
               var.ref(), slot(var, "mg").ref(), slot(var, "rms").ref(),
               slot(var, "momentum").ref(), learning_rate_for(learning_rate_, var),
               constant_like(var, decay_, "decay"), constant_like(var, momentum_, "momentum"),
               constant_like(var, epsilon_, "epsilon"), grad, "ApplyCenteredRMSProp", use_locking())
        .op();
  return ops::apply_rms_prop(
             var.ref(), slot(var, "rms").ref(), slot(var, "momentum").ref(),
             learning_rate_for(learning_rate_, var), constant_like(var, decay_, "decay"),
             constant_like(var, momentum_, "momentum"), constant_like(var, epsilon_, "epsilon"),
             grad, "ApplyRMSProp", use_locking())
      .op();
}

Operation RMSPropOptimizer::apply_sparse(const IndexedSlices& grad, const Variable& var) {
  const IndexedSlices rows = deduplicate(grad);
  if (centered_)
    return ops::sparse_apply_centered_rms_prop(
               var.ref(), slot(var, "mg").ref(), slot(var, "rms").ref(),
               slot(var, "momentum").ref(), learning_rate_for(learning_rate_, var),
               constant_like(var, decay_, "decay"), constant_like(var, momentum_, "momentum"),
               constant_like(var, epsilon_, "epsilon"), rows.values, rows.indices,
               "SparseApplyCenteredRMSProp", use_locking())
        .op();
  return ops::sparse_apply_rms_prop(
             var.ref(), slot(var, "rms").ref(), slot(var, "momentum").ref(),
             learning_rate_for(learning_rate_, var), constant_like(var, decay_, "decay"),
             constant_like(var, momentum_, "momentum"), constant_like(var, epsilon_, "epsilon"),
             rows.values, rows.indices, "SparseApplyRMSProp", use_locking())
      .op();
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
