// Learning-rate schedules: each one's value at several global steps against TF1's formulas
// (computed by hand here), their argument errors, and an optimizer stepping with a schedule.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>
#include <vector>

#include "psflow/runtime.hpp"
#include "psflow/train/global_step.hpp"
#include "psflow/train/gradient_descent.hpp"
#include "psflow/train/learning_rate_decay.hpp"

namespace learning_rate_decay_test {

namespace ops = psflow::ops;
namespace train = psflow::train;
using Catch::Contains;
using psflow::DType;
using psflow::Graph;
using psflow::InvalidArgument;
using psflow::Output;
using psflow::Session;
using psflow::Tensor;

using StepAndRate = std::pair<std::int64_t, double>;

// Evaluates `schedule` (built on an int64 step placeholder) at each step; checks the rate.
template <class Build>
void expect_rates(Build build, const std::vector<StepAndRate>& expected) {
  Graph g;
  const Output step = ops::placeholder(g, DType::int64, {}, "global_step");
  const Output rate = build(step);
  CHECK(rate.dtype() == DType::float32);
  Session sess(g);
  for (const auto& [at, want] : expected) {
    INFO("global step " << at);
    CHECK(sess.run({rate}, {{step, Tensor(at)}})[0].scalar<float>() == Approx(want).epsilon(1e-6));
  }
}

TEST_CASE("exponential_decay: lr * rate ^ (step / decay_steps), floored with staircase",
          "[train][schedules]") {
  expect_rates(
      [](Output step) { return train::exponential_decay(0.1, step, 100, 0.96); },
      {{0, 0.1}, {50, 0.1 * std::pow(0.96, 0.5)}, {100, 0.096}, {250, 0.1 * std::pow(0.96, 2.5)}});
  expect_rates([](Output step) { return train::exponential_decay(0.1, step, 100, 0.96, true); },
               {{0, 0.1}, {99, 0.1}, {100, 0.096}, {150, 0.096}, {250, 0.1 * 0.96 * 0.96}});
}

TEST_CASE("piecewise_constant: values[i] up to and including boundaries[i]", "[train][schedules]") {
  expect_rates(
      [](Output step) {
        return train::piecewise_constant(step, {100, 200}, {1.0, 0.5, 0.1});
      },
      {{0, 1.0}, {100, 1.0}, {101, 0.5}, {200, 0.5}, {201, 0.1}, {100000, 0.1}});
  expect_rates([](Output step) { return train::piecewise_constant(step, {}, {0.25}); },
               {{0, 0.25}, {7, 0.25}});
}

TEST_CASE("polynomial_decay: from lr to end_learning_rate over decay_steps, or in cycles",
          "[train][schedules]") {
  expect_rates([](Output step) { return train::polynomial_decay(0.1, step, 1000, 0.01, 0.5); },
               {{0, 0.1}, {500, 0.09 * std::sqrt(0.5) + 0.01}, {1000, 0.01}, {2000, 0.01}});
  expect_rates([](Output step) { return train::polynomial_decay(0.1, step, 1000); },
               {{0, 0.1}, {250, (0.1 - 0.0001) * 0.75 + 0.0001}, {5000, 0.0001}});
  // cycle: decay_steps grows to the next multiple of 1000 at or above the step.
  expect_rates(
      [](Output step) { return train::polynomial_decay(0.1, step, 1000, 0.01, 1.0, true); },
      {{0, 0.1}, {500, 0.055}, {1000, 0.01}, {1500, 0.09 * 0.25 + 0.01}, {2000, 0.01}});
}

TEST_CASE("cosine_decay: half a cosine from lr down to alpha * lr", "[train][schedules]") {
  expect_rates([](Output step) { return train::cosine_decay(0.1, step, 1000, 0.1); },
               {{0, 0.1},
                {250, 0.1 * (0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4)) + 0.1)},
                {500, 0.055},
                {1000, 0.01},
                {3000, 0.01}});
}

TEST_CASE("schedules reject bad arguments naming the schedule", "[train][schedules]") {
  Graph g;
  const Output step = ops::placeholder(g, DType::int64, {}, "global_step");
  CHECK_THROWS_WITH(train::piecewise_constant(step, {10, 20}, {1.0, 0.5}),
                    Contains("piecewise_constant") && Contains("one more value"));
  CHECK_THROWS_WITH(train::piecewise_constant(step, {20, 10}, {1.0, 0.5, 0.1}),
                    Contains("piecewise_constant") && Contains("increase"));
  CHECK_THROWS_WITH(train::exponential_decay(0.1, step, 0, 0.5),
                    Contains("exponential_decay") && Contains("decay_steps"));
  CHECK_THROWS_WITH(train::cosine_decay(0.1, step, -5),
                    Contains("cosine_decay") && Contains("decay_steps"));
  const Output vector_step = ops::placeholder(g, DType::int64, {2});
  CHECK_THROWS_WITH(train::polynomial_decay(0.1, vector_step, 10),
                    Contains("polynomial_decay") && Contains("scalar"));
  CHECK_THROWS_AS(train::exponential_decay(0.1, Output{}, 10, 0.5), InvalidArgument);
}

TEST_CASE("an optimizer steps with the schedule's rate at each global step", "[train][schedules]") {
  // loss = sum(w): every step subtracts the learning rate of the global step it started at.
  Graph g;
  auto global_step = train::get_or_create_global_step(g);
  auto w = psflow::get_variable(g, "w", {2}, psflow::constant_initializer(1.0));
  const Output lr = train::piecewise_constant(global_step, {1}, {0.5, 0.125});
  train::GradientDescentOptimizer sgd(lr);
  auto step = sgd.minimize(ops::reduce_sum(w), global_step);
  Session sess(g);
  sess.run(psflow::global_variables_initializer(g));
  const std::vector<double> want = {0.5, 0.0, -0.125, -0.25};  // steps 0 and 1 at 0.5, then 0.125
  for (double expected : want) {
    sess.run(step);
    CHECK(sess.run({w.value()})[0].data<float>()[0] == Approx(expected));
  }
}

}  // namespace learning_rate_decay_test
