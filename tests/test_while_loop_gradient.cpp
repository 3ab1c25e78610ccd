// The gradient of a while_loop (graph/while_loop_gradient.hpp) and the stacks it uses
// (graph/stack_ops.hpp): closed forms for a loop that multiplies, 1000 iterations with several in
// flight, a 10-step RNN cell against numeric gradients, a loop that runs no iteration, a
// variable read in the body trained by an optimizer, two gradient calls on one loop, the stacks
// themselves, and what is refused.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "psflow/psflow.hpp"

namespace while_loop_gradient_test {

using namespace psflow;
using Catch::Contains;

inline Output scalar(Graph& g, double value) { return ops::constant(g, Tensor(value)); }

// y = v0 * w^n, by a loop of n multiplications (n fed).
struct PowerLoop {
  Graph g;
  Output n = ops::placeholder(g, DType::int32, {}, "n");
  Output w = ops::placeholder(g, DType::float64, {}, "w");
  Output v0 = ops::placeholder(g, DType::float64, {}, "v0");
  Output y;

  explicit PowerLoop(int parallel_iterations = 10) {
    y = ops::while_loop([&](const std::vector<Output>& v) { return ops::less(v[0], n); },
                        [&](const std::vector<Output>& v) {
                          return std::vector<Output>{v[0] + 1.0, v[1] * w};
                        },
                        {ops::constant(g, Tensor(std::int32_t{0})), v0},
                        {.parallel_iterations = parallel_iterations})[1];
  }
  FeedMap feeds(std::int32_t iterations, double w_value, double v0_value) const {
    return {{n, Tensor(iterations)}, {w, Tensor(w_value)}, {v0, Tensor(v0_value)}};
  }
};

TEST_CASE("the gradient of a loop that multiplies is the closed form's") {
  PowerLoop loop;
  const auto grads = train::gradients(loop.y, {loop.w, loop.v0});
  Session sess(loop.g);
  const auto r = sess.run({loop.y, grads[0], grads[1]}, loop.feeds(5, 1.5, 2.0));
  CHECK(r[0].scalar<double>() == Approx(2.0 * std::pow(1.5, 5)));
  CHECK(r[1].scalar<double>() == Approx(5 * 2.0 * std::pow(1.5, 4)));  // dy/dw = n v0 w^(n-1)
  CHECK(r[2].scalar<double>() == Approx(std::pow(1.5, 5)));            // dy/dv0 = w^n
  // No iteration: y = v0, so dy/dw = 0 and dy/dv0 = 1.
  const auto none = sess.run({grads[0], grads[1]}, loop.feeds(0, 1.5, 2.0));
  CHECK(none[0].scalar<double>() == 0.0);
  CHECK(none[1].scalar<double>() == 1.0);
}

TEST_CASE("a 1000-iteration loop's gradient, with 1 and 10 iterations in flight") {
  for (int parallel : {1, 10}) {
    PowerLoop loop(parallel);
    const auto grads = train::gradients(loop.y, {loop.w, loop.v0});
    Session sess(loop.g);
    for (int repeat = 0; repeat < 3; ++repeat) {  // the same executor, fresh stacks each step
      const auto r = sess.run({grads[0], grads[1]}, loop.feeds(1000, 1.0005, 3.0));
      CHECK(r[0].scalar<double>() == Approx(1000 * 3.0 * std::pow(1.0005, 999)));
      CHECK(r[1].scalar<double>() == Approx(std::pow(1.0005, 1000)));
    }
  }
}

// A 10-step RNN cell, h <- tanh(h W + x_t U + b), and loss = sum(h_10^2).
struct RnnCell {
  static constexpr int kSteps = 10, kInput = 3, kHidden = 4;
  Graph g;
  Output xs = ops::placeholder(g, DType::float64, {kSteps, kInput}, "xs");
  Output w = ops::placeholder(g, DType::float64, {kHidden, kHidden}, "w");
  Output u = ops::placeholder(g, DType::float64, {kInput, kHidden}, "u");
  Output b = ops::placeholder(g, DType::float64, {kHidden}, "b");
  Output h0 = ops::placeholder(g, DType::float64, {1, kHidden}, "h0");
  Output loss;

  RnnCell() {
    const auto out = ops::while_loop(
        [&](const std::vector<Output>& v) {
          return ops::less(v[0], ops::constant(g, Tensor(std::int32_t{kSteps})));
        },
        [&](const std::vector<Output>& v) {
          const Output x_t = ops::reshape(ops::gather(xs, v[0]), {1, kInput});
          const Output h = ops::tanh(ops::matmul(v[1], w) + ops::matmul(x_t, u) + b);
          return std::vector<Output>{v[0] + 1.0, h};
        },
        {ops::constant(g, Tensor(std::int32_t{0})), h0});
    loss = ops::reduce_sum(ops::square(out[1]));
  }
};

inline Tensor values_of(std::vector<double> v, Shape shape) {
  return Tensor::from_vector<double>(std::move(v), std::move(shape));
}

TEST_CASE("a 10-step RNN cell's gradients match numeric gradients") {
  RnnCell rnn;
  const std::vector<Output> params{rnn.w, rnn.u, rnn.b, rnn.h0};
  const auto grads = train::gradients(rnn.loss, params);
  // Fixed pseudo-random values in [-0.5, 0.5].
  auto fill = [seed = 7u](std::size_t count) mutable {
    std::vector<double> v(count);
    for (auto& x : v) {
      seed = seed * 1103515245u + 12345u;
      x = static_cast<double>((seed >> 8) % 1000) / 1000.0 - 0.5;
    }
    return v;
  };
  std::vector<Tensor> values{values_of(fill(16), {4, 4}), values_of(fill(12), {3, 4}),
                             values_of(fill(4), {4}), values_of(fill(4), {1, 4})};
  const Tensor inputs = values_of(fill(30), {10, 3});
  auto feeds = [&](const std::vector<Tensor>& p) {
    FeedMap f{{rnn.xs, inputs}};
    for (std::size_t i = 0; i < params.size(); ++i) f.emplace_back(params[i], p[i]);
    return f;
  };
  Session sess(rnn.g);
  const auto symbolic = sess.run(grads, feeds(values));
  const double eps = 1e-6;
  for (std::size_t p = 0; p < params.size(); ++p) {
    REQUIRE(symbolic[p].shape() == values[p].shape());
    for (std::size_t i = 0; i < values[p].size(); ++i) {
      auto shifted = [&](double delta) {
        std::vector<Tensor> moved = values;
        moved[p] = values[p].deep_copy();
        moved[p].data<double>()[i] += delta;
        return sess.run({rnn.loss}, feeds(moved))[0].scalar<double>();
      };
      const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
      INFO("parameter " << params[p].name() << " element " << i);
      CHECK(symbolic[p].values<double>()[i] == Approx(numeric).epsilon(1e-6).margin(1e-9));
    }
  }
}

TEST_CASE("an optimizer trains a variable read in a loop's body") {
  Graph g;
  // y = x * w^4 by a loop; minimise (y - 16)^2 from w = 1.5 with x = 1: w goes to 2.
  Variable w = get_variable(g, "w", {}, constant_initializer(1.5), DType::float64);
  const Output x = scalar(g, 1.0);
  const Output y =
      ops::while_loop([&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 4.0)); },
                      [&](const std::vector<Output>& v) {
                        return std::vector<Output>{v[0] + 1.0, v[1] * w.value()};
                      },
                      {scalar(g, 0.0), x})[1];
  const Output loss = ops::square(y - 16.0);
  const Operation train_op = train::GradientDescentOptimizer(0.0003).minimize(loss);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  const double before = sess.run({loss})[0].scalar<double>();
  for (int step = 0; step < 200; ++step) sess.run(train_op);
  CHECK(sess.run({loss})[0].scalar<double>() < before / 100);
  CHECK(sess.run({w.value()})[0].scalar<double>() == Approx(2.0).epsilon(1e-3));
}

TEST_CASE("two gradient calls on one loop each build their own backward loop") {
  PowerLoop loop;
  const Output dw = train::gradients(loop.y, {loop.w})[0];
  const Output dw_twice = train::gradients(loop.y * 2.0, {loop.w})[0];
  Session sess(loop.g);
  const auto r = sess.run({dw, dw_twice, loop.y}, loop.feeds(3, 2.0, 1.0));
  CHECK(r[0].scalar<double>() == Approx(12.0));  // 3 w^2
  CHECK(r[1].scalar<double>() == Approx(24.0));
  CHECK(r[2].scalar<double>() == Approx(8.0));
}

TEST_CASE("a stack pops what was pushed, last first, and is gone with its step") {
  Graph g;
  const Output handle = ops::stack(g, DType::float64);
  const Output a = ops::stack_push(handle, scalar(g, 1.0));
  Output b;
  {
    auto after = g.control_dependencies({a.op()});
    b = ops::stack_push(handle, scalar(g, 2.0));
  }
  Output first, second;
  {
    auto after = g.control_dependencies({b.op()});
    first = ops::stack_pop(handle, DType::float64);
  }
  {
    auto after = g.control_dependencies({first.op()});
    second = ops::stack_pop(handle, DType::float64);
  }
  Session sess(g);
  for (int step = 0; step < 2; ++step) {  // each step has a stack of its own
    const auto r = sess.run({first, second});
    CHECK(r[0].scalar<double>() == 2.0);
    CHECK(r[1].scalar<double>() == 1.0);
  }
  const Output empty = ops::stack_pop(ops::stack(g, DType::float64), DType::float64);
  CHECK_THROWS_AS(sess.run({empty}), InvalidArgument);
  CHECK_THROWS_WITH(sess.run({empty}), Contains("is empty"));
  const Output wrong = ops::stack_push(ops::stack(g, DType::int32), scalar(g, 1.0));
  CHECK_THROWS_WITH(sess.run({wrong}), Contains("holds int32 tensors"));
  CHECK_THROWS_AS(ops::stack_pop(scalar(g, 1.0), DType::float64), InvalidArgument);
}

TEST_CASE("the gradient through a loop nested in another is refused, naming the inner loop") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {}, "x");
  const Output y = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 2.0)); },
      [&](const std::vector<Output>& v) {
        const Output inner = ops::while_loop(
            [&](const std::vector<Output>& u) { return ops::less(u[0], scalar(g, 2.0)); },
            [&](const std::vector<Output>& u) {
              return std::vector<Output>{u[0] + 1.0, u[1] * x};
            },
            {scalar(g, 0.0), v[1]})[1];
        return std::vector<Output>{v[0] + 1.0, inner};
      },
      {scalar(g, 0.0), x})[1];
  CHECK_THROWS_AS(train::gradients(y, {x}), InvalidArgument);
  CHECK_THROWS_WITH(train::gradients(y, {x}),
                    Contains("while/while") && Contains("not supported yet"));
}

}  // namespace while_loop_gradient_test
