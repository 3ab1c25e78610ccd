// Test support: checks gradients() against central differences in float64, and the
// deterministic random inputs such checks use.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>
#include <xtensor/xarray.hpp>

#include "psflow/runtime.hpp"
#include "psflow/train/gradients.hpp"

namespace psflow::testing {

using Dims = std::vector<std::int64_t>;

// Deterministic pseudo-random doubles (a fixed LCG, so every platform sees the same values).
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed * 2862933555777941757ULL + 3037000493ULL) {}
  double uniform(double lo, double hi) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * static_cast<double>(state_ >> 11) / 9007199254740992.0;  // 2^53
  }
  xt::xarray<double> array(const Shape& shape, double lo = -1, double hi = 1) {
    auto a = xt::xarray<double>::from_shape(shape);
    for (auto& v : a) v = uniform(lo, hi);
    return a;
  }
  // Magnitudes in [0.3, 1.3] with random signs: safe for division and relu's kink.
  xt::xarray<double> away_from_zero(const Shape& shape) {
    auto a = array(shape, 0.3, 1.3);
    for (auto& v : a)
      if (uniform(0, 1) < 0.5) v = -v;
    return a;
  }

 private:
  std::uint64_t state_;
};

inline Shape shape_of(const xt::xarray<double>& a) {
  return Shape(a.shape().begin(), a.shape().end());
}
inline Dims dims_of(const Shape& s) { return Dims(s.begin(), s.end()); }

inline double sum_of(const Tensor& t) {
  double s = 0;
  for (double v : t.values<double>()) s += v;
  return s;
}

inline bool close(double got, double want, double tol) {
  return std::abs(got - want) <= tol * std::max({1.0, std::abs(got), std::abs(want)});
}

// Compares grads[i] = d sum(y) / d xs[i] (from gradients()) with central differences, feeding
// xs[i] = values[i] and the `fixed` feeds.
inline void expect_numeric_gradients(Session& sess, Output y, const std::vector<Output>& xs,
                                     const std::vector<Tensor>& values,
                                     const std::vector<Output>& grads, const FeedMap& fixed = {},
                                     double tol = 1e-6) {
  REQUIRE(xs.size() == values.size());
  REQUIRE(grads.size() == xs.size());
  auto feeds_of = [&](const std::vector<Tensor>& v) {
    FeedMap feeds = fixed;
    for (std::size_t i = 0; i < xs.size(); ++i) feeds.emplace_back(xs[i], v[i]);
    return feeds;
  };
  const std::vector<Tensor> analytic = sess.run(grads, feeds_of(values));
  const double eps = 1e-6;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    INFO("gradient with respect to " << xs[i].name());
    REQUIRE(analytic[i].dtype() == DType::float64);
    REQUIRE(analytic[i].shape() == values[i].shape());
    for (std::size_t j = 0; j < values[i].size(); ++j) {
      std::vector<Tensor> plus = values, minus = values;
      plus[i] = values[i].deep_copy();
      minus[i] = values[i].deep_copy();
      plus[i].data<double>()[j] += eps;
      minus[i].data<double>()[j] -= eps;
      const double numeric =
          (sum_of(sess.run({y}, feeds_of(plus))[0]) - sum_of(sess.run({y}, feeds_of(minus))[0])) /
          (2 * eps);
      const double got = analytic[i].values<double>()[j];
      INFO("element " << j << ": gradients() " << got << ", central difference " << numeric);
      CHECK(close(got, numeric, tol));
    }
  }
}

// One input of a checked function: its value and the placeholder's shape (-1: unknown; by
// default the value's shape).
struct Arg {
  xt::xarray<double> value;
  std::optional<Dims> placeholder_shape = std::nullopt;
};

using Builder = std::function<Output(Graph&, const std::vector<Output>&)>;

// Builds y = build(placeholders) and checks gradients(y, placeholders) numerically.
inline void check_gradients(const Builder& build, const std::vector<Arg>& args) {
  Graph g;
  std::vector<Output> xs;
  std::vector<Tensor> values;
  for (std::size_t i = 0; i < args.size(); ++i) {
    xs.push_back(ops::placeholder(
        g, DType::float64, args[i].placeholder_shape.value_or(dims_of(shape_of(args[i].value))),
        std::string("x").append(std::to_string(i))));  // not "x" + ...: GCC 12 -O3 -Wrestrict
    values.emplace_back(args[i].value);
  }
  const Output y = build(g, xs);
  const auto grads = train::gradients(y, xs);
  for (std::size_t i = 0; i < xs.size(); ++i) CHECK(grads[i].dtype() == DType::float64);
  Session sess(g);
  expect_numeric_gradients(sess, y, xs, values, grads);
}

}  // namespace psflow::testing
