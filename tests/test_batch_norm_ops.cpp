// Batch normalization ops (graph/batch_norm_ops.hpp): moments and batch_normalization against
// values computed here, fused_batch_norm in training (batch statistics, Bessel-corrected
// variance) and inference, its gradients and batch_normalization's against central
// differences, and the errors of bad arguments.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>
#include <xtensor/xarray.hpp>

#include "psflow/runtime.hpp"
#include "support/numeric_gradient.hpp"

namespace batch_norm_ops_test {

using namespace psflow;
using Catch::Contains;
using testing::Arg;

inline std::vector<double> doubles(const Tensor& t) {
  const auto v = t.values<double>();
  return {v.begin(), v.end()};
}

TEST_CASE("moments gives the mean and biased variance over the axes") {
  Graph g;
  const Output x = ops::constant(g, Tensor(xt::xarray<double>{{1, 2}, {3, 6}, {5, 10}}), "x");
  const auto [mean, variance] = ops::moments(x, {0});
  CHECK(mean.shape() == PartialShape::of({2}));
  Session sess(g);
  const auto out = sess.run({mean, variance});
  CHECK(doubles(out[0]) == std::vector<double>{3, 6});
  const auto v = doubles(out[1]);
  CHECK(v[0] == Approx(8.0 / 3));
  CHECK(v[1] == Approx(32.0 / 3));
}

TEST_CASE("fused_batch_norm normalizes NHWC by the batch's statistics, or by the given ones") {
  Graph g;
  testing::Random random(3);
  const xt::xarray<double> values = random.array({2, 3, 2, 4}, -2, 3);
  const Output x = ops::constant(g, Tensor(values), "x");
  const Output scale = ops::constant(g, Tensor(xt::xarray<double>{1, 2, 0.5, 3}), "scale");
  const Output offset = ops::constant(g, Tensor(xt::xarray<double>{0, 1, -1, 2}), "offset");
  const auto trained = ops::fused_batch_norm(x, scale, offset, {}, {}, 0.001);
  const auto [mean, variance] = ops::moments(x, {0, 1, 2});
  const Output expected = ops::batch_normalization(x, mean, variance, offset, scale, 0.001);
  const auto inferred =
      ops::fused_batch_norm(x, scale, offset, mean, variance, 0.001, "NHWC", false);
  Session sess(g);
  const auto out =
      sess.run({trained.y, trained.mean, trained.variance, expected, mean, variance, inferred.y});
  const auto y = doubles(out[0]), want = doubles(out[3]), inferred_y = doubles(out[6]);
  for (std::size_t i = 0; i < y.size(); ++i) {
    CHECK(y[i] == Approx(want[i]).margin(1e-12));
    CHECK(inferred_y[i] == Approx(want[i]).margin(1e-12));
  }
  CHECK(doubles(out[1]) == doubles(out[4]));
  const auto bessel = doubles(out[2]), biased = doubles(out[5]);
  for (std::size_t c = 0; c < 4; ++c) CHECK(bessel[c] == Approx(biased[c] * 12 / 11));
}

TEST_CASE("fused_batch_norm's gradients match central differences, training and not") {
  using testing::check_gradients;
  testing::Random random(11);
  for (bool training : {true, false}) {
    INFO("is_training " << training);
    check_gradients(
        [&](Graph& g, const std::vector<Output>& in) {
          if (training) return ops::fused_batch_norm(in[0], in[1], in[2], {}, {}, 0.01).y * in[0];
          const Output mean = ops::constant(g, Tensor(xt::xarray<double>{0.1, -0.2, 0.3}));
          const Output variance = ops::constant(g, Tensor(xt::xarray<double>{0.5, 1.5, 2.0}));
          return ops::fused_batch_norm(in[0], in[1], in[2], mean, variance, 0.01, "NHWC", false).y *
                 in[0];
        },
        {Arg{random.array({2, 2, 3, 3})}, Arg{random.away_from_zero({3})}, Arg{random.array({3})}});
  }
  check_gradients(
      [](Graph&, const std::vector<Output>& in) {
        const auto [mean, variance] = ops::moments(in[0], {0});
        return ops::batch_normalization(in[0], mean, variance, in[2], in[1], 0.01) * in[0];
      },
      {Arg{random.array({5, 3})}, Arg{random.away_from_zero({3})}, Arg{random.array({3})}});
}

TEST_CASE("bad batch normalization arguments are InvalidArgument saying what to change") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {2, 2, 2, 3}, "x");
  const Output c3 = ops::constant(g, Tensor::from_vector<float>({1, 1, 1}), "c3");
  const Output c2 = ops::constant(g, Tensor::from_vector<float>({1, 1}), "c2");
  CHECK_THROWS_WITH(ops::fused_batch_norm(x, c2, c3), Contains("c2:0") && Contains("[3]"));
  CHECK_THROWS_WITH(ops::fused_batch_norm(x, c3, c3, {}, {}, 0.001, "NCHW"),
                    Contains("NCHW") && Contains("NHWC"));
  CHECK_THROWS_WITH(ops::fused_batch_norm(x, c3, c3, c3, c3), Contains("give no mean"));
  CHECK_THROWS_WITH(ops::fused_batch_norm(x, c3, c3, {}, {}, 0.001, "NHWC", false),
                    Contains("give the mean and variance"));
  CHECK_THROWS_WITH(ops::moments(x, {}), Contains("axes"));
}

}  // namespace batch_norm_ops_test
