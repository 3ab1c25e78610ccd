// tf.layers (psflow/layers.hpp): the layers' names and variables (a second layer "dense_1",
// scopes, reuse finding the same variables), their values (dense, conv2d, max_pooling2d,
// flatten), dropout switched by a training tensor, batch_normalization's batch and moving
// statistics with its update ops in the "update_ops" collection, its variables on a ps under
// replica_device_setter, and the errors of bad arguments.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
#include <xtensor/xarray.hpp>

#include "psflow/psflow.hpp"

namespace layers_test {

using namespace psflow;
using Catch::Contains;

inline std::vector<std::string> names(const std::vector<Variable>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(v.name());
  return out;
}

inline std::vector<float> floats(const Tensor& t) {
  const auto v = t.values<float>();
  return {v.begin(), v.end()};
}

TEST_CASE("layers name themselves like tf.layers and reuse finds the same variables") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {-1, 3}, "x");
  const Output h = layers::dense(x, 4, [](Output v) { return ops::relu(v); });
  layers::dense(h, 2, {}, glorot_uniform_initializer(), false);
  {
    auto scope = g.variable_scope("tower");
    layers::dense(x, 2);
  }
  {
    auto scope = g.variable_scope("tower", VariableReuse::reuse);
    layers::dense(x, 2);  // the same "tower/dense" variables
  }
  CHECK(names(trainable_variables(g)) ==
        std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel",
                                 "tower/dense/kernel", "tower/dense/bias"});
  CHECK(h.shape() == PartialShape::of({-1, 4}));
}

TEST_CASE("dense, conv2d, max_pooling2d and flatten compute what TF's layers compute") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {1, 4, 4, 1}, "x");
  const Output conv = layers::conv2d(x, 2, {2, 2}, {1, 1}, "same", {}, constant_initializer(1));
  CHECK(conv.shape() == PartialShape::of({1, 4, 4, 2}));
  const Output valid = layers::conv2d(x, 1, {3, 3}, {1, 1}, "VALID", {}, constant_initializer(1));
  CHECK(valid.shape() == PartialShape::of({1, 2, 2, 1}));
  const Output pooled = layers::max_pooling2d(x, {2, 2}, {2, 2});
  CHECK(pooled.shape() == PartialShape::of({1, 2, 2, 1}));
  const Output flat = layers::flatten(pooled);
  CHECK(flat.shape() == PartialShape::of({1, 4}));
  const Output out = layers::dense(flat, 1, {}, constant_initializer(0.5));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  std::vector<float> pixels(16);
  for (std::size_t i = 0; i < 16; ++i) pixels[i] = static_cast<float>(i);
  const auto got = sess.run({valid, pooled, out}, {{x, Tensor::from_vector(pixels, {1, 4, 4, 1})}});
  // 3x3 window sums of 0..15 laid out row by row.
  CHECK(floats(got[0]) == std::vector<float>{45, 54, 81, 90});
  CHECK(floats(got[1]) == std::vector<float>{5, 7, 13, 15});
  CHECK(floats(got[2]) == std::vector<float>{0.5f * (5 + 7 + 13 + 15)});
}

TEST_CASE("dropout drops only when training is true") {
  Graph g;
  const Output training = ops::placeholder(g, DType::boolean, {}, "training");
  const Output x = ops::constant(g, Tensor::filled(1.0f, {10000}), "x");
  const Output y = layers::dropout(x, 0.25, training);
  Session sess(g);
  CHECK(floats(sess.run({y}, {{training, Tensor(false)}})[0]) == std::vector<float>(10000, 1.0f));
  const auto dropped = floats(sess.run({y}, {{training, Tensor(true)}})[0]);
  std::size_t zeros = 0;
  for (float v : dropped) {
    if (v == 0) {
      ++zeros;
    } else {
      CHECK(v == Approx(1 / 0.75));
    }
  }
  CHECK(zeros > 2200);  // 2500 expected; a binomial's 6 standard deviations either side
  CHECK(zeros < 2800);
  CHECK_THROWS_WITH(layers::dropout(x, 1.0, training), Contains("[0, 1)"));
}

TEST_CASE(
    "batch_normalization: batch statistics in training, moving ones otherwise, updated by "
    "update_ops") {
  Graph g;
  const Output training = ops::placeholder(g, DType::boolean, {}, "training");
  const Output x = ops::placeholder(g, DType::float32, {4, 1, 1, 2}, "x");
  const Output y = layers::batch_normalization(x, training, 0.9, 1e-3);
  const Output flat = ops::placeholder(g, DType::float32, {-1, 2}, "flat");
  const Output y2 = layers::batch_normalization(flat, training);
  CHECK(names(trainable_variables(g)) ==
        std::vector<std::string>{"batch_normalization/gamma", "batch_normalization/beta",
                                 "batch_normalization_1/gamma", "batch_normalization_1/beta"});
  const auto updates = get_collection_ops(g, kUpdateOps);
  REQUIRE(updates.size() == 4);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  const Tensor batch = Tensor::from_vector<float>({1, 10, 3, 20, 5, 30, 7, 40}, {4, 1, 1, 2});
  // Training: each channel normalized by its own mean (4, 25) and biased variance (5, 125).
  const auto trained = floats(sess.run({y}, {{x, batch}, {training, Tensor(true)}})[0]);
  CHECK(trained[0] == Approx(-3 / std::sqrt(5.001)).epsilon(1e-4));
  CHECK(trained[1] == Approx(-15 / std::sqrt(125.001)).epsilon(1e-4));
  // Two training updates move each moving mean 10% of the way each time: 0 -> 0.4 -> 0.76 for
  // the first channel; the moving variance moves to the Bessel-corrected 20/3 from 1.
  auto first_layer = [&](const std::pair<Output, Tensor>& training_value) {
    for (const auto& op : updates)
      if (op.input(0).op().name().rfind("batch_normalization/", 0) == 0)
        sess.run(op, {{x, batch}, training_value});
  };
  first_layer({training, Tensor(true)});
  first_layer({training, Tensor(true)});
  first_layer({training, Tensor(false)});  // an evaluation step leaves them as they are
  auto value_of = [&](const std::string& name) { return floats(sess.run({g.tensor(name)})[0]); };
  const auto mean = value_of("batch_normalization/moving_mean:0");
  const auto variance = value_of("batch_normalization/moving_variance:0");
  CHECK(mean[0] == Approx(0.76));
  CHECK(mean[1] == Approx(4.75));
  const double v1 = 1 + (20.0 / 3 - 1) * 0.1;
  CHECK(variance[0] == Approx(v1 + (20.0 / 3 - v1) * 0.1));
  // Evaluation: the moving statistics normalize.
  const auto evaluated = floats(sess.run({y}, {{x, batch}, {training, Tensor(false)}})[0]);
  CHECK(evaluated[0] == Approx((1 - 0.76) / std::sqrt(variance[0] + 0.001)).epsilon(1e-4));
  // The [batch, features] layer: moments over the batch.
  const auto rows = floats(sess.run({y2}, {{flat, Tensor::from_vector<float>({0, 2, 2, 4}, {2, 2})},
                                           {training, Tensor(true)}})[0]);
  CHECK(rows[0] == Approx(-1 / std::sqrt(1.001)).epsilon(1e-4));
  CHECK(rows[3] == Approx(1 / std::sqrt(1.001)).epsilon(1e-4));
}

TEST_CASE("batch_normalization's variables go to the ps under replica_device_setter") {
  Graph g;
  const ClusterSpec cluster({{"ps", {"localhost:1"}}, {"worker", {"localhost:2"}}});
  auto placement = g.device(
      train::replica_device_setter({.worker_device = "/job:worker/task:0", .cluster = cluster}));
  const Output training = ops::placeholder(g, DType::boolean, {}, "training");
  const Output x = ops::placeholder(g, DType::float32, {-1, 3}, "x");
  layers::batch_normalization(x, training);
  for (const auto& v : global_variables(g)) CHECK(v.device() == "/job:ps/task:0");
  CHECK(g.operation("batch_normalization/moving_mean").device() == "/job:ps/task:0");
  for (const auto& op : get_collection_ops(g, kUpdateOps)) CHECK(op.device() == "/job:ps/task:0");
}

TEST_CASE("bad layer arguments are InvalidArgument naming the tensor and what to change") {
  Graph g;
  const Output unknown = ops::placeholder(g, DType::float32, {2, -1}, "unknown");
  CHECK_THROWS_WITH(layers::dense(unknown, 3), Contains("unknown:0") && Contains("known"));
  const Output image = ops::placeholder(g, DType::float32, {1, 4, 4, 1}, "image");
  CHECK_THROWS_WITH(layers::dense(image, 3), Contains("flatten"));
  CHECK_THROWS_WITH(layers::conv2d(image, 2, {2, 2}, {1, 1}, "full"), Contains("\"valid\""));
  CHECK_THROWS_WITH(layers::conv2d(image, 2, {2}), Contains("kernel_size"));
  CHECK_THROWS_WITH(layers::max_pooling2d(image, {2, 2}, {0, 1}), Contains("strides"));
  const Output training = ops::placeholder(g, DType::boolean, {}, "training");
  CHECK_THROWS_WITH(layers::batch_normalization(image, training, 1.5), Contains("momentum"));
}

}  // namespace layers_test
