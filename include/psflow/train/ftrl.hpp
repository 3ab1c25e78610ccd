// FtrlOptimizer: TF1's tf.train.FtrlOptimizer (FTRL-Proximal, McMahan et al. 2013), the usual
// optimizer of the wide (linear) part of click-through-rate models: its l1 term drives the
// weights of rare features to exactly zero.
//
// Per variable, slots "accum" (initial_accumulator_value) and "linear" (zeros), named
// "<var>/Ftrl" and "<var>/Ftrl_1" like TF's, on the variable's device; one ApplyFtrl op there
// for a dense gradient, one SparseApplyFtrl (after summing duplicate ids) for an IndexedSlices,
// which leaves every other row of the variable and both slots untouched. The equations are in
// psflow/graph/training_ops.hpp. TF's l2_shrinkage_regularization_strength (FtrlV2) is not
// offered.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/train/optimizer.hpp"

namespace psflow::train {

class FtrlOptimizer : public Optimizer {
 public:
  // Throws InvalidArgument, as TF raises ValueError, for learning_rate_power > 0, a negative
  // initial_accumulator_value, l1 or l2, or a learning rate number that is not positive (a
  // learning rate Output is not checked).
  PSFLOW_DECL explicit FtrlOptimizer(LearningRate learning_rate, double learning_rate_power = -0.5,
                                     double initial_accumulator_value = 0.1, double l1 = 0.0,
                                     double l2 = 0.0, std::string name = "Ftrl",
                                     bool use_locking = true);

  const LearningRate& learning_rate() const noexcept { return learning_rate_; }
  double learning_rate_power() const noexcept { return learning_rate_power_; }
  double initial_accumulator_value() const noexcept { return initial_accumulator_value_; }
  double l1() const noexcept { return l1_; }
  double l2() const noexcept { return l2_; }

 protected:
  PSFLOW_DECL void create_slots(const std::vector<Variable>& var_list) override;
  PSFLOW_DECL Operation apply_dense(Output grad, const Variable& var) override;
  PSFLOW_DECL Operation apply_sparse(const IndexedSlices& grad, const Variable& var) override;
  PSFLOW_DECL DynamicRule dynamic_rule(const Variable& shard) override;

 private:
  LearningRate learning_rate_;
  double learning_rate_power_;
  double initial_accumulator_value_;
  double l1_;
  double l2_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
FtrlOptimizer::FtrlOptimizer(LearningRate learning_rate, double learning_rate_power,
                             double initial_accumulator_value, double l1, double l2,
                             std::string name, bool use_locking)
    : Optimizer(std::move(name), use_locking),
      learning_rate_(learning_rate),
      learning_rate_power_(learning_rate_power),
      initial_accumulator_value_(initial_accumulator_value),
      l1_(l1),
      l2_(l2) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw InvalidArgument("FtrlOptimizer: " + what);
  };
  require(learning_rate.is_tensor() || learning_rate.value() > 0,
          "learning_rate must be positive, got " +
              (learning_rate.is_tensor() ? std::string() : std::to_string(learning_rate.value())));
  require(learning_rate_power <= 0,
          "learning_rate_power must be <= 0, got " + std::to_string(learning_rate_power));
  require(initial_accumulator_value >= 0, "initial_accumulator_value must be >= 0, got " +
                                              std::to_string(initial_accumulator_value));
  require(l1 >= 0, "l1 must be >= 0, got " + std::to_string(l1));
  require(l2 >= 0, "l2 must be >= 0, got " + std::to_string(l2));
}

void FtrlOptimizer::create_slots(const std::vector<Variable>& var_list) {
  for (const auto& v : var_list) {
    get_or_make_slot(v, constant_initializer(initial_accumulator_value_), "accum", name());
    zeros_slot(v, "linear", name());
  }
}

Operation FtrlOptimizer::apply_dense(Output grad, const Variable& var) {
  return ops::apply_ftrl(var.ref(), slot(var, "accum").ref(), slot(var, "linear").ref(), grad,
                         learning_rate_for(learning_rate_, var), constant_like(var, l1_, "l1"),
                         constant_like(var, l2_, "l2"),
                         constant_like(var, learning_rate_power_, "learning_rate_power"),
                         "ApplyFtrl", use_locking())
      .op();
}

Operation FtrlOptimizer::apply_sparse(const IndexedSlices& grad, const Variable& var) {
  const IndexedSlices rows = deduplicate(grad);
  return ops::sparse_apply_ftrl(var.ref(), slot(var, "accum").ref(), slot(var, "linear").ref(),
                                rows.values, rows.indices, learning_rate_for(learning_rate_, var),
                                constant_like(var, l1_, "l1"), constant_like(var, l2_, "l2"),
                                constant_like(var, learning_rate_power_, "learning_rate_power"),
                                "SparseApplyFtrl", use_locking())
      .op();
}

Optimizer::DynamicRule FtrlOptimizer::dynamic_rule(const Variable& shard) {
  return {"Ftrl",
          {{name() + "/accum", initial_accumulator_value_}, {name() + "/linear", 0.0}},
          {learning_rate_for(learning_rate_, shard), constant_like(shard, l1_, "l1"),
           constant_like(shard, l2_, "l2"),
           constant_like(shard, learning_rate_power_, "learning_rate_power")}};
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::train
