// Learning-rate schedules computed in the graph from the global step, as TF1's
// tf.train.exponential_decay, piecewise_constant, polynomial_decay and cosine_decay: each returns
// a float32 scalar Output that any optimizer takes as its learning rate. The step is read where
// the graph evaluates the schedule (under replica_device_setter: the worker reads global_step
// from its ps each step), so every worker follows the shared step.
#pragma once

#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/graph/math_ops.hpp"

namespace psflow::train {

// learning_rate * decay_rate ^ (global_step / decay_steps); with staircase the exponent is
// floored, so the rate drops every decay_steps steps.
PSFLOW_DECL Output exponential_decay(double learning_rate, Output global_step,
                                     std::int64_t decay_steps, double decay_rate,
                                     bool staircase = false);

// values[0] while x <= boundaries[0], values[i] while boundaries[i-1] < x <= boundaries[i],
// values.back() once x > boundaries.back(). Needs one more value than boundaries, boundaries
// strictly increasing. x is usually the global step; the boundaries take its dtype.
PSFLOW_DECL Output piecewise_constant(Output x, std::vector<std::int64_t> boundaries,
                                      std::vector<double> values);

// (learning_rate - end_learning_rate) * (1 - step / decay_steps) ^ power + end_learning_rate,
// the step capped at decay_steps; with cycle, decay_steps grows to the next multiple of itself
// above the step instead, so the rate restarts.
PSFLOW_DECL Output polynomial_decay(double learning_rate, Output global_step,
                                    std::int64_t decay_steps, double end_learning_rate = 0.0001,
                                    double power = 1.0, bool cycle = false);

// learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * step / decay_steps)) + alpha), the step
// capped at decay_steps (SGDR's decay without restarts).
PSFLOW_DECL Output cosine_decay(double learning_rate, Output global_step, std::int64_t decay_steps,
                                double alpha = 0.0);

}  // namespace psflow::train

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::train::detail {

PSFLOW_DECL Output float_constant(Graph& graph, double value, const char* name) {
  return ops::constant(graph, Tensor(static_cast<float>(value)), name);
}

PSFLOW_DECL void expect_scalar_step(Output step, const char* schedule) {
  if (!step.valid())
    throw InvalidArgument(std::string(schedule) + ": global_step is an empty Output");
  const auto shape = step.shape();
  if (shape.known && !shape.dims.empty())
    throw InvalidArgument(std::string(schedule) + ": global_step must be a scalar, got " +
                          step.name() + " " + shape.to_string());
}

// The step as float32 (TF casts it to the learning rate's dtype).
PSFLOW_DECL Output step_as_float(Output step) {
  return step.dtype() == DType::float32 ? step : ops::cast(step, DType::float32);
}

PSFLOW_DECL void expect_positive_steps(std::int64_t decay_steps, const char* schedule) {
  if (decay_steps <= 0)
    throw InvalidArgument(std::string(schedule) + ": decay_steps must be positive, got " +
                          std::to_string(decay_steps));
}

}  // namespace psflow::train::detail

namespace psflow::train {

PSFLOW_DECL Output exponential_decay(double learning_rate, Output global_step,
                                     std::int64_t decay_steps, double decay_rate, bool staircase) {
  detail::expect_scalar_step(global_step, "exponential_decay");
  detail::expect_positive_steps(decay_steps, "exponential_decay");
  Graph& graph = global_step.graph();
  auto scope = graph.name_scope("ExponentialDecay");
  Output p =
      ops::div(detail::step_as_float(global_step),
               detail::float_constant(graph, static_cast<double>(decay_steps), "decay_steps"));
  if (staircase) p = ops::floor(p);
  return ops::mul(detail::float_constant(graph, learning_rate, "learning_rate"),
                  ops::pow(detail::float_constant(graph, decay_rate, "decay_rate"), p));
}

PSFLOW_DECL Output piecewise_constant(Output x, std::vector<std::int64_t> boundaries,
                                      std::vector<double> values) {
  if (!x.valid()) throw InvalidArgument("piecewise_constant: x is an empty Output");
  if (values.size() != boundaries.size() + 1)
    throw InvalidArgument("piecewise_constant: needs one more value than boundaries, got " +
                          std::to_string(boundaries.size()) + " boundaries and " +
                          std::to_string(values.size()) + " values");
  for (std::size_t i = 1; i < boundaries.size(); ++i)
    if (boundaries[i] <= boundaries[i - 1])
      throw InvalidArgument("piecewise_constant: boundaries must increase, got " +
                            std::to_string(boundaries[i - 1]) + " then " +
                            std::to_string(boundaries[i]));
  Graph& graph = x.graph();
  auto scope = graph.name_scope("PiecewiseConstant");
  Output rate = detail::float_constant(graph, values.back(), "value");
  for (std::size_t i = boundaries.size(); i-- > 0;) {
    const Output at_most =
        ops::less_equal(x, ops::scalar_like(x, static_cast<double>(boundaries[i]), "boundary"));
    rate = ops::where(at_most, detail::float_constant(graph, values[i], "value"), rate);
  }
  return rate;
}

PSFLOW_DECL Output polynomial_decay(double learning_rate, Output global_step,
                                    std::int64_t decay_steps, double end_learning_rate,
                                    double power, bool cycle) {
  detail::expect_scalar_step(global_step, "polynomial_decay");
  detail::expect_positive_steps(decay_steps, "polynomial_decay");
  Graph& graph = global_step.graph();
  auto scope = graph.name_scope("PolynomialDecay");
  Output step = detail::step_as_float(global_step);
  Output steps = detail::float_constant(graph, static_cast<double>(decay_steps), "decay_steps");
  if (cycle) {
    // ceil(step / decay_steps), at least 1 (TF: step 0 uses one period).
    Output periods = ops::neg(ops::floor(ops::neg(ops::div(step, steps))));
    periods = ops::maximum(periods, detail::float_constant(graph, 1, "one"));
    steps = ops::mul(steps, periods);
  } else {
    step = ops::minimum(step, steps);
  }
  const Output one = detail::float_constant(graph, 1, "one");
  const Output end = detail::float_constant(graph, end_learning_rate, "end_learning_rate");
  return ops::add(
      ops::mul(ops::sub(detail::float_constant(graph, learning_rate, "learning_rate"), end),
               ops::pow(ops::sub(one, ops::div(step, steps)),
                        detail::float_constant(graph, power, "power"))),
      end);
}

PSFLOW_DECL Output cosine_decay(double learning_rate, Output global_step, std::int64_t decay_steps,
                                double alpha) {
  detail::expect_scalar_step(global_step, "cosine_decay");
  detail::expect_positive_steps(decay_steps, "cosine_decay");
  Graph& graph = global_step.graph();
  auto scope = graph.name_scope("CosineDecay");
  const Output steps =
      detail::float_constant(graph, static_cast<double>(decay_steps), "decay_steps");
  const Output fraction = ops::div(ops::minimum(detail::step_as_float(global_step), steps), steps);
  const Output cosine = ops::mul(
      detail::float_constant(graph, 0.5, "half"),
      ops::add(
          detail::float_constant(graph, 1, "one"),
          ops::cos(ops::mul(detail::float_constant(graph, std::numbers::pi, "pi"), fraction))));
  const Output decayed =
      ops::add(ops::mul(detail::float_constant(graph, 1 - alpha, "one_minus_alpha"), cosine),
               detail::float_constant(graph, alpha, "alpha"));
  return ops::mul(detail::float_constant(graph, learning_rate, "learning_rate"), decayed);
}

}  // namespace psflow::train

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
