// Training helpers: gradient clipping (global_norm, clip_by_global_norm, clip_by_norm) against
// values worked out by hand, for float32 and float64, IndexedSlices and empty gradients, and
// compute_gradients -> clip -> apply_gradients training; ExponentialMovingAverage's shadows
// (names, initial values, placement next to their variable) and updates against hand-computed
// steps, with and without num_updates; and the errors of both.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "psflow/runtime.hpp"
#include "psflow/train/clip_ops.hpp"
#include "psflow/train/global_step.hpp"
#include "psflow/train/gradient_descent.hpp"
#include "psflow/train/moving_averages.hpp"
#include "psflow/train/replica_device_setter.hpp"

// Everything is in this namespace: the file joins a unity build with other test files.
namespace train_helpers_test {

using namespace psflow;

template <class T>
constexpr DType dt_of = std::is_same_v<T, float> ? DType::float32 : DType::float64;

template <class T>
Output constant_of(Graph& g, std::vector<double> values, Shape shape = {}) {
  if (shape.empty()) shape = {values.size()};
  return ops::constant(g, Tensor::from_vector(std::vector<T>(values.begin(), values.end()), shape));
}

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> out;
  visit_floating_dtype(t.dtype(), "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (T v : t.values<T>()) out.push_back(static_cast<double>(v));
  });
  return out;
}

void check_values(const Tensor& t, const std::vector<double>& want, double eps) {
  const auto got = doubles(t);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(eps).margin(eps));
  }
}

Initializer values_initializer(std::vector<double> values) {
  return Initializer([values](Graph& g, const Shape& shape, DType dtype) {
    Tensor t = visit_floating_dtype(dtype, "test initializer", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return Tensor::from_vector(std::vector<T>(values.begin(), values.end()), shape);
    });
    return ops::constant(g, t, "Const");
  });
}

using Catch::Contains;

// ---------------------------------------------------------------------------------------------
// Clipping

TEMPLATE_TEST_CASE("global_norm and clip_by_global_norm: t * clip / max(norm, clip)",
                   "[train_helpers]", float, double) {
  using T = TestType;
  const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  Graph g;
  // norms: |[3, 4]| = 5, |[[12]]| = 12: global norm sqrt(25 + 144) = 13.
  Output a = constant_of<T>(g, {3, 4});
  Output b = constant_of<T>(g, {12}, {1, 1});
  Session sess(g);
  check_values(sess.run({train::global_norm({a, Output(), b})})[0], {13}, eps);
  CHECK(ops::global_norm({a}).dtype() == dt_of<T>);

  SECTION("above the clip norm: scaled by clip / norm") {
    auto [clipped, norm] = train::clip_by_global_norm({a, Output(), b}, 6.5);
    REQUIRE(clipped.size() == 3);
    CHECK_FALSE(clipped[1].valid());  // None passes through
    auto out = sess.run({clipped[0], clipped[2], norm});
    check_values(out[0], {1.5, 2}, eps);
    check_values(out[1], {6}, eps);
    CHECK(out[1].shape() == Shape{1, 1});
    check_values(out[2], {13}, eps);
  }
  SECTION("below: unchanged") {
    auto [clipped, norm] = ops::clip_by_global_norm({a, b}, 20);
    auto out = sess.run({clipped[0], clipped[1]});
    check_values(out[0], {3, 4}, eps);
    check_values(out[1], {12}, eps);
  }
  SECTION("use_norm instead of the tensors' norm, and TF's NaN for an infinite norm") {
    Output use = ops::placeholder(g, dt_of<T>, {}, "use_norm");
    auto [clipped, norm] = train::clip_by_global_norm({a, b}, 6.5, use);
    CHECK(norm == use);
    check_values(sess.run({clipped[0]}, {{use, Tensor(static_cast<T>(26))}})[0], {0.75, 1}, eps);
    const auto nan =
        doubles(sess.run({clipped[1]}, {{use, Tensor(std::numeric_limits<T>::infinity())}})[0]);
    CHECK(std::isnan(nan[0]));
  }
  SECTION("all-zero tensors stay zero") {
    Output z = constant_of<T>(g, {0, 0});
    auto [clipped, norm] = train::clip_by_global_norm({z}, 1);
    check_values(sess.run({clipped[0]})[0], {0, 0}, eps);
  }
}

TEMPLATE_TEST_CASE("clip_by_norm: over all axes, or per row, negative axes too", "[train_helpers]",
                   float, double) {
  using T = TestType;
  const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  Graph g;
  Output t = constant_of<T>(g, {3, 4, 6, 8}, {2, 2});
  Session sess(g);
  // All axes: |t| = sqrt(125); scaled by 5 / sqrt(125).
  const double s = 5 / std::sqrt(125.0);
  check_values(sess.run({train::clip_by_norm(t, 5)})[0], {3 * s, 4 * s, 6 * s, 8 * s}, eps);
  // Per row (axis 1 or -1): norms 5 and 10; with clip 5 row 0 stays, row 1 halves.
  for (int axis : {1, -1}) {
    INFO("axis " << axis);
    Output clipped = ops::clip_by_norm(t, 5, {axis});
    CHECK(clipped.shape().dims == std::vector<std::int64_t>{2, 2});
    check_values(sess.run({clipped})[0], {3, 4, 3, 4}, eps);
  }
  // Per column (axis 0): norms sqrt(45) and sqrt(80); clip 7: column 0 stays.
  check_values(sess.run({train::clip_by_norm(t, 7, {0})})[0],
               {3, 4 * 7 / std::sqrt(80.0), 6, 8 * 7 / std::sqrt(80.0)}, eps);
  // Below the clip norm, and zeros: unchanged.
  check_values(sess.run({train::clip_by_norm(t, 100)})[0], {3, 4, 6, 8}, eps);
  check_values(sess.run({train::clip_by_norm(constant_of<T>(g, {0, 0}), 1)})[0], {0, 0}, eps);
  // Empty tensor: nothing to clip.
  Output empty = ops::constant(g, Tensor(dt_of<T>, Shape{0}));
  CHECK(sess.run({train::clip_by_norm(empty, 1)})[0].size() == 0);
}

TEST_CASE("clipping keeps an IndexedSlices gradient sparse, its norm over the values") {
  Graph g;
  Variable table = get_variable(g, "t", {5, 2}, constant_initializer(1), DType::float64);
  Output ids = ops::constant(g, Tensor::from_vector(std::vector<std::int64_t>{3, 0}));
  Output weights = ops::constant(g, Tensor::from_vector(std::vector<double>{3, 4, 0, 12}, {2, 2}));
  Output loss = ops::reduce_sum(ops::embedding_lookup(table, ids) * weights);
  train::GradientDescentOptimizer opt(1.0);
  auto grads = opt.compute_gradients(loss);
  REQUIRE(as_indexed_slices(grads[0].first));
  auto [clipped, norm] = train::clip_by_global_norm({grads[0].first}, 6.5);
  REQUIRE(as_indexed_slices(clipped[0]));  // still rows + ids
  Output by_norm = train::clip_by_norm(grads[0].first, 6.5);
  REQUIRE(as_indexed_slices(by_norm));
  Operation train_op = opt.apply_gradients({{clipped[0], table}});
  CHECK(g.find_operation("GradientDescent/update_t/ScatterSub"));  // the sparse update
  Session sess(g);
  sess.run(global_variables_initializer(g));
  check_values(sess.run({norm})[0], {13}, 1e-14);
  check_values(sess.run({by_norm})[0], {0, 6, 0, 0, 0, 0, 1.5, 2, 0, 0}, 1e-14);  // dense form
  sess.run(train_op);
  // Row 3 moves by 0.5 * [3, 4], row 0 by 0.5 * [0, 12]; the others stay.
  check_values(sess.run({table.value()})[0], {1, -5, 1, 1, 1, 1, -0.5, -1, 1, 1}, 1e-14);
}

TEST_CASE("compute_gradients, clip_by_global_norm, apply_gradients trains with bounded steps") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, zeros_initializer());
  Variable b = get_variable(g, "b", {}, zeros_initializer());
  Variable gs = train::get_or_create_global_step(g);
  Output target = ops::constant(g, Tensor::from_vector(std::vector<float>{3, 4}));
  // loss = |w - target|^2 + b^2: at 0 the gradients are [-6, -8] and 0 (global norm 10).
  Output loss = ops::reduce_sum(ops::square(w.value() - target)) + ops::square(b.value());
  train::GradientDescentOptimizer opt(0.25);
  auto grads = opt.compute_gradients(loss);
  std::vector<Output> tensors;
  for (const auto& [grad, var] : grads) tensors.push_back(grad);
  auto [clipped, norm] = train::clip_by_global_norm(tensors, 4.0);
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i].first = clipped[i];
  Operation train_op = opt.apply_gradients(grads, gs);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  CHECK(sess.run({norm})[0].scalar<float>() == Approx(10));
  sess.run(train_op);
  // Clipped to norm 4, times the learning rate 0.25: a step of length 1 towards the target.
  check_values(sess.run({w.value()})[0], {0.6, 0.8}, 1e-6);
  sess.run(train_op);
  check_values(sess.run({w.value()})[0], {1.2, 1.6}, 1e-6);
  CHECK(sess.run({norm})[0].scalar<float>() == Approx(6));
  for (int i = 0; i < 20; ++i) sess.run(train_op);
  // Within distance 2 of the target the norm is at most 4 and the steps are plain gradient
  // descent, halving the distance each time.
  check_values(sess.run({w.value()})[0], {3, 4}, 1e-5);
  CHECK(sess.run({gs.value()})[0].scalar<std::int64_t>() == 22);
}

TEST_CASE("clipping errors are InvalidArgument and name what is wrong") {
  Graph g;
  Output f32 = ops::placeholder(g, DType::float32, {2}, "f32");
  Output f64 = ops::placeholder(g, DType::float64, {2}, "f64");
  Output i32 = ops::placeholder(g, DType::int32, {2}, "i32");
  CHECK_THROWS_WITH(train::global_norm({f32, f64}),
                    Contains("global_norm") && Contains("f64:0") && Contains("float32"));
  CHECK_THROWS_WITH(train::global_norm({i32}), Contains("i32:0") && Contains("int32"));
  CHECK_THROWS_WITH(train::global_norm({Output()}), Contains("no tensors"));
  CHECK_THROWS_WITH(train::clip_by_global_norm({f32}, 0), Contains("clip_norm"));
  CHECK_THROWS_WITH(train::clip_by_global_norm({f32}, 1, f32), Contains("[2]"));
  CHECK_THROWS_WITH(
      train::clip_by_global_norm({f32}, 1, ops::placeholder(g, DType::float64, {}, "n")),
      Contains("float64") && Contains("float32"));
  CHECK_THROWS_WITH(train::clip_by_norm(i32, 1), Contains("clip_by_norm") && Contains("int32"));
  CHECK_THROWS_WITH(train::clip_by_norm(f32, -1), Contains("clip_norm"));
  CHECK_THROWS_AS(train::clip_by_norm(f32, 1, {2}), InvalidArgument);  // axis out of range
}

// ---------------------------------------------------------------------------------------------
// ExponentialMovingAverage

TEST_CASE("ExponentialMovingAverage: shadows named like TF's, start at the value, then decay") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, values_initializer({1, 2}), DType::float64);
  Variable u = get_variable(g, "u", {}, values_initializer({5}), DType::float64);
  Variable frozen = get_variable(g, "frozen", {}, values_initializer({0}), DType::float64, false);
  Output new_w = ops::placeholder(g, DType::float64, {2}, "new_w");
  Operation set_w = w.assign(new_w).op();
  train::ExponentialMovingAverage ema(0.9);
  CHECK(ema.average_name(w) == "w/ExponentialMovingAverage");
  CHECK_THROWS_WITH(ema.average(w), Contains("'w'") && Contains("apply"));
  Operation update = ema.apply(g);  // the trainable variables: w and u
  CHECK(update.name() == "ExponentialMovingAverage");
  CHECK(update.type() == "NoOp");
  Variable avg = ema.average(w);
  CHECK(avg.name() == "w/ExponentialMovingAverage");
  CHECK(ema.average(u).name() == "u/ExponentialMovingAverage");
  CHECK_FALSE(avg.trainable());
  CHECK(avg.dtype() == DType::float64);
  CHECK(avg.shape() == Shape{2});
  CHECK(find_variable(g, "w/ExponentialMovingAverage"));  // a global variable
  CHECK(trainable_variables(g).size() == 2);              // the shadows are not trainable
  CHECK_THROWS_AS(ema.average(frozen), NotFound);

  Session sess(g);
  sess.run(global_variables_initializer(g));
  check_values(sess.run({avg.value()})[0], {1, 2}, 0);
  check_values(sess.run({ema.average(u).value()})[0], {5}, 0);
  sess.run(set_w, {{new_w, Tensor::from_vector(std::vector<double>{3, 6})}});
  // shadow -= (1 - 0.9) * (shadow - w)
  sess.run(update);
  check_values(sess.run({avg.value()})[0], {1.2, 2.4}, 1e-15);
  sess.run(update);
  check_values(sess.run({avg.value()})[0], {1.38, 2.76}, 1e-15);
  check_values(sess.run({ema.average(u).value()})[0], {5}, 1e-15);  // u did not move

  // A second apply on a covered variable fails like TF's; another name averages again.
  CHECK_THROWS_WITH(ema.apply({w}), Contains("already computed") && Contains("'w'"));
  train::ExponentialMovingAverage slow(0.5, {}, false, "Slow");
  Operation slow_update = slow.apply({w});
  CHECK(slow.average(w).name() == "w/Slow");
  CHECK(slow_update.name() == "Slow");
}

// num_updates is cast to float32 as TF does, so the usual int64 global step works as well.
TEMPLATE_TEST_CASE(
    "ExponentialMovingAverage with num_updates: decay = min(decay, (1 + n) / (10 + n))", "", float,
    std::int64_t) {
  using N = TestType;
  Graph g;
  Variable w = get_variable(g, "w", {2}, values_initializer({1, 2}));
  Variable n = get_variable(g, "n", {}, zeros_initializer(), psflow::dtype_of<N>(), false);
  Output n_value = ops::placeholder(g, psflow::dtype_of<N>(), {}, "n_value");
  Operation set_n = n.assign(n_value).op();
  Output new_w = ops::placeholder(g, DType::float32, {2}, "new_w");
  Operation set_w = w.assign(new_w).op();
  train::ExponentialMovingAverage ema(0.9, n);
  Operation update = ema.apply();  // the trainable variables of n's graph: w
  Variable avg = ema.average(w);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  sess.run(set_w, {{new_w, Tensor::from_vector(std::vector<float>{3, 6})}});
  std::vector<double> shadow{1, 2};
  auto step = [&](double decay) {
    for (std::size_t i = 0; i < 2; ++i) shadow[i] -= (1 - decay) * (shadow[i] - (i ? 6 : 3));
  };
  // n = 0: decay min(0.9, 0.1) = 0.1.
  sess.run(update);
  step(0.1);
  check_values(sess.run({avg.value()})[0], shadow, 1e-6);
  // n = 8: (1 + 8) / (10 + 8) = 0.5.
  sess.run(set_n, {{n_value, Tensor(static_cast<N>(8))}});
  sess.run(update);
  step(0.5);
  check_values(sess.run({avg.value()})[0], shadow, 1e-6);
  // n = 1000: the ratio passes 0.9, so decay is 0.9.
  sess.run(set_n, {{n_value, Tensor(static_cast<N>(1000))}});
  sess.run(update);
  step(0.9);
  check_values(sess.run({avg.value()})[0], shadow, 1e-6);
}

TEST_CASE("ExponentialMovingAverage after each training step, from a random initial value") {
  Graph g;
  Variable w = get_variable(g, "w", {3}, random_normal_initializer(0, 1));
  Output loss = ops::reduce_sum(ops::square(w.value()));
  train::GradientDescentOptimizer opt(0.25);  // w halves each step
  Operation train_op = opt.minimize(loss);
  train::ExponentialMovingAverage ema(0.5);
  Operation averaged;
  {
    auto after = g.control_dependencies({train_op});  // TF's usual pattern
    averaged = ema.apply({w});
  }
  Session sess(g);
  sess.run(global_variables_initializer(g));
  const auto w0 = doubles(sess.run({w.value()})[0]);
  // The shadow got the very value the variable got, though the initializer is random.
  CHECK(doubles(sess.run({ema.average(w).value()})[0]) == w0);
  sess.run(averaged);  // w = w0 / 2; shadow = w0 - 0.5 * (w0 - w0 / 2) = 0.75 w0
  const auto shadow = doubles(sess.run({ema.average(w).value()})[0]);
  for (std::size_t i = 0; i < 3; ++i) CHECK(shadow[i] == Approx(0.75 * w0[i]).epsilon(1e-6));
}

TEST_CASE("ExponentialMovingAverage: under replica_device_setter each shadow lives on its ps") {
  Graph g;
  ClusterSpec cluster({{"ps", {"ps0:2222", "ps1:2222"}}, {"worker", {"worker0:2222"}}});
  auto setter = g.device(train::replica_device_setter({.cluster = cluster}));
  Variable a = get_variable(g, "a", {2}, zeros_initializer());
  Variable b = get_variable(g, "b", {2}, zeros_initializer());
  REQUIRE(a.device() != b.device());
  train::ExponentialMovingAverage ema(0.99);
  Operation update = ema.apply({a, b});
  CHECK(ema.average(a).device() == a.device());
  CHECK(ema.average(b).device() == b.device());
  CHECK(ema.average(a).initializer().device() == a.device());
  // The AssignSub of each shadow runs there too; the group runs on the worker.
  for (const Variable& v : {a, b}) {
    const Variable s = ema.average(v);
    bool found = false;
    for (const Operation& op : g.operations())
      if (op.type() == "AssignSub" && op.input(0) == s.ref()) {
        found = true;
        CHECK(op.device() == v.device());
      }
    CHECK(found);
  }
  CHECK(update.device() == canonical_device("/job:worker"));
}

TEST_CASE("ExponentialMovingAverage errors are InvalidArgument and name what is wrong") {
  Graph g;
  Variable w = get_variable(g, "w", {2}, zeros_initializer(), DType::float64);
  Variable flags = get_variable(g, "flags", {}, zeros_initializer(), DType::boolean, false);
  Variable counter = get_variable(g, "counter", {}, zeros_initializer(), DType::int32);
  CHECK_THROWS_WITH(train::ExponentialMovingAverage(1.5), Contains("decay"));
  CHECK_THROWS_WITH(train::ExponentialMovingAverage(0.9, flags),
                    Contains("flags") && Contains("bool") && Contains("number"));
  train::ExponentialMovingAverage ema(0.9);
  CHECK_THROWS_WITH(ema.apply({counter}), Contains("counter") && Contains("int32"));
  CHECK_THROWS_WITH(ema.apply(), Contains("var_list"));
  Graph other;
  Variable foreign = get_variable(other, "f", {}, zeros_initializer());
  CHECK_THROWS_WITH(ema.apply({w, foreign}), Contains("another graph"));
  CHECK_THROWS_WITH(ema.average(w), Contains("'w'"));
}

}  // namespace train_helpers_test
