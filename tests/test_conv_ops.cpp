// The image ops (graph/conv_ops.hpp): Conv2D and its two backprop ops, MaxPool, AvgPool and
// their gradient ops, BiasAdd and BiasAddGrad. Values against numpy references computed by
// plain loops (pasted as literals below), in float32 and float64; every build-time error; the
// gradients against central differences; empty batches; and a small conv net end to end.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
#include <xtensor/xarray.hpp>

#include "psflow/runtime.hpp"
#include "support/error_message.hpp"
#include "support/numeric_gradient.hpp"

namespace conv_ops_test {

using psflow::testing::invalid_argument_message;

namespace ops = psflow::ops;
using Catch::Contains;
using psflow::DType;
using psflow::FeedMap;
using psflow::Graph;
using psflow::InvalidArgument;
using psflow::Output;
using psflow::PartialShape;
using psflow::Session;
using psflow::Shape;
using psflow::Tensor;
using psflow::testing::Arg;
using psflow::testing::check_gradients;
using psflow::testing::Dims;
using psflow::testing::Random;

// ---------------------------------------------------------------------------------------------
// Helpers

std::size_t count(const Shape& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// The test inputs, the same formulas as the numpy script that computed the references:
// input i -> ((7i mod 13) - 6) / 2 + 1/4, filter i -> ((5i mod 11) - 5) / 4, incoming gradient
// i -> ((3i mod 7) - 3) / 2. Every value and every result is exact in float32.
std::vector<double> input_pattern(const Shape& shape) {
  std::vector<double> v(count(shape));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7) % 13) * 0.5 - 2.75;
  return v;
}
std::vector<double> filter_pattern(const Shape& shape) {
  std::vector<double> v(count(shape));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 5) % 11) * 0.25 - 1.25;
  return v;
}
std::vector<double> grad_pattern(const Shape& shape) {
  std::vector<double> v(count(shape));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 3) % 7) * 0.5 - 1.5;
  return v;
}

Tensor make(DType dtype, const std::vector<double>& values, const Shape& shape) {
  return psflow::visit_floating_dtype(dtype, "make", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> v(values.begin(), values.end());
    return Tensor::from_vector(v, shape);
  });
}

Tensor sizes32(const Shape& shape) {
  return Tensor::from_vector(std::vector<std::int32_t>(shape.begin(), shape.end()));
}
Tensor sizes64(const Shape& shape) {
  return Tensor::from_vector(std::vector<std::int64_t>(shape.begin(), shape.end()));
}

Dims dims_of(const Shape& s) { return Dims(s.begin(), s.end()); }

std::vector<double> as_doubles(const Tensor& t) {
  return psflow::visit_numeric_dtype(t.dtype(), "as_doubles", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    return std::vector<double>(p, p + t.size());
  });
}

void check_values(const Tensor& got, const Shape& shape, const std::vector<double>& want,
                  double tol) {
  REQUIRE(got.shape() == shape);
  const auto values = as_doubles(got);
  REQUIRE(values.size() == want.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ": got " << values[i] << ", want " << want[i]);
    CHECK(std::abs(values[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

// y times fixed random weights of y's (known) shape, so a misplaced gradient element shows.
Output weighted(Output y, std::uint64_t seed) {
  REQUIRE(y.shape().fully_defined());
  Random r(seed);
  return ops::mul(y, ops::constant(y.graph(), Tensor(r.array(y.shape().to_shape()))));
}

const DType kFloatTypes[] = {DType::float32, DType::float64};

// ---------------------------------------------------------------------------------------------
// Conv2D and its backprop ops against numpy

struct ConvCase {
  const char* name;
  Shape input, filter;
  std::array<int, 2> strides;
  const char* padding;
  Shape output;
  std::vector<double> out, dinput, dfilter;  // dinput, dfilter for the incoming grad_pattern
};

// numpy: for each output pixel, out[n, oh, ow, :] += x[n, h, w, :] @ f[kh, kw, :, :] over the
// window cells inside the input (h = oh * s - pad_before + kh, likewise w); the backprop
// references scatter grad the same way.
const std::vector<ConvCase> kConvCases = {
    {"odd 3x3 SAME stride 1",
     {1, 4, 4, 1},
     {3, 3, 1, 1},
     {1, 1},
     "SAME",
     {1, 4, 4, 1},  // output shape
     {-0.9375, -0.6875, 0.3125, -0.8125, 0.25, 0.6875, 1.6875, 2.75, -1.5, 6.3125, -5.6875, 7.125,
      5.0625, -2.5625, 3.1875, -2.125},
     {-0.25, 1, 2.25, -0.625, 0.5, -0.625, 0.5, -1.25, -2.5, 3.875, -2.875, 0.75, 0, -0.125, 0.125,
      -0.25},
     {-2.75, 1.5, -7.125, 8.25, -2.625, 9.375, 8.25, -15.625, 7.625}},
    {"even 2x2 VALID stride 1 multi-channel",
     {2, 5, 5, 2},
     {2, 2, 2, 3},
     {1, 1},
     "VALID",
     {2, 4, 4, 3},  // output shape
     {2.6875,  4.375,   -4.25,   -4.4375, 7.875,   -9.375,  -5.0625, 8.125,   -9.625,  -5.6875,
      8.375,   -9.875,  -0.4375, 7.25,    -2.25,   0.5625,  1,       0.75,    4.8125,  -2,
      7,       4.1875,  -9.875,  8.375,   2.9375,  -9.375,  7.875,   2.3125,  -9.125,  7.625,
      -3.1875, -4,      4.125,   2.6875,  4.375,   -4.25,   -5.0625, 8.125,   -9.625,  -5.6875,
      8.375,   -9.875,  -6.3125, 8.625,   -10.125, -0.4375, 7.25,    -2.25,   -3.1875, -4,
      4.125,   2.6875,  4.375,   -4.25,   -4.4375, 7.875,   -9.375,  -5.0625, 8.125,   -9.625,
      -6.3125, 8.625,   -10.125, -0.4375, 7.25,    -2.25,   0.5625,  1,       0.75,    4.8125,
      -2,      7,       3.5625,  -9.625,  8.125,   2.9375,  -9.375,  7.875,   2.3125,  -9.125,
      7.625,   -3.1875, -4,      4.125,   -4.4375, 7.875,   -9.375,  -5.0625, 8.125,   -9.625,
      -5.6875, 8.375,   -9.875,  -6.3125, 8.625,   -10.125},
     {3.75,   -0.375, -1,     1.25,   -2.25,  0.375,  0.875,  -2.25,  2,      -2.875,
      -1,     1.125,  -1.375, 2.625,  -2,     -0.625, 3.5,    2.25,   -2.75,  0.625,
      0.375,  -0.75,  2.25,   -1.625, 0.75,   -2.25,  -0.75,  -0.25,  -2.25,  2.625,
      0.875,  0,      -2,     -0.625, 3.5,    2.25,   -2.375, -0.125, 0.875,  1.125,
      2,      -1.125, -0.125, 0,      -2.125, 1.125,  1.125,  -2.125, 1.875,  -1.375,
      -0.625, -1.625, 0.875,  -2.25,  1.375,  -1.375, -2.5,   4.75,   -1.375, 1,
      -2.5,   -0.25,  3.5,    2.25,   -2.375, -0.125, 2.25,   -1.625, 2.75,   -2.75,
      -2,     0.5,    -0.75,  -0.25,  -1.375, 2.625,  -2,     -0.625, 0.625,  0.125,
      2.875,  2.125,  -2.375, -0.125, 2.25,   -1.625, 0.75,   -2.25,  0.25,   -1.375,
      -0.375, -0.375, 1.125,  -2.125, 0,      -0.125, -2,     4.5,    -2.375, 1},
     {15.25, -11.75, 0.625,  -4.25, -2.25,  5.875, -4.25, 7.25, -8.375, 15.25, -12.5,  13.125,
      2.25,  -1.25,  -2.125, 8.75,  -11.25, 6.375, -7.5,  14.5, -4.625, 15.25, -11.75, 0.625}},
    {"3x3 SAME stride 2 odd and even sizes",
     {1, 5, 6, 3},
     {3, 3, 3, 2},
     {2, 2},
     "SAME",
     {1, 3, 3, 2},  // output shape
     {2.75, -1.6875, 8.375, 3.8125, 1.375, -0.5, -1.9375, 1.625, -14.8125, 4.375, -4.625, -2.5625,
      0.875, -2.5, 11.125, -4.625, 2, -2},
     {1.125,  1.5,    1.875,  -1.875, -1.5,   -1.125, -2.125, -2,    -1.875, 2,      1.75,   1.5,
      0,      -0.25,  -1.875, 1.5,    1.5,    1.5,    -0.25,  1.75,  2.375,  3,      3.625,  0.125,
      -4.25,  -4.25,  -4.25,  -2.75,  -3.375, 0.125,  3,      0.875, 0.125,  -2.375, -2.5,   0.125,
      -1.125, -0.875, -0.625, 1,      1.25,   1.5,    2.5,    2.375, -1.875, -0.375, -0.75,  -1.125,
      -0.625, -1.125, 2.5,    -0.875, -1,     -1.125, -0.375, -2.75, -2.375, -2,     -1.625, 0.125,
      5.25,   1.5,    1.875,  -0.75,  -0.75,  -0.75,  -1.5,   2.25,  1.875,  2.25,   1.875,  0.125,
      1,      1.125,  1.25,   -1.375, -1.25,  -1.125, 0.125,  0.625, 2.5,    -1.875, -1.5,   -1.125,
      -2.125, -2,     -1.875, 2,      1.75,   1.5},
     {6.25,  -1,    -10.25, 5.75,    5.75,   -10.25, -10.75, 6.25,   5.25,  -9.75, -1.5,
      6.75,  1.25,  -7.875, 0.75,    3.625,  -3,     2.125,  1,      7.125, 4.25,  -7.625,
      1,     6.875, 1,      1.875,   4.25,   0.125,  1,      1.625,  7.5,   0.75,  -12.5,
      4,     6.5,   0.75,   -1,      3.125,  5.75,   -1.875, -10.25, 6.125, 6.25,  -2.125,
      -9.75, 5.875, 6.75,   -12.125, -7.875, 3.125,  3.625,  -8.375, 2.125, 2.875}},
    {"even 2x2 SAME stride 2",
     {1, 6, 5, 2},
     {2, 2, 2, 2},
     {2, 2},
     "SAME",
     {1, 3, 3, 2},  // output shape
     {4.4375, -6.25, 5.0625, 0.375, 4.9375, -0.875, -2.1875, -0.75, -6.4375, 1, 3.8125, 2.875,
      -2.3125, -5, -3.3125, 0, -3.8125, -1.5},
     {1.875,  -1.875, -1.5,  -1.125, -1.875, 2,      1.75,  1.5,    -1.25,  1.5,    -0.75, -0.375,
      0,      0.375,  1.25,  1,      -0.625, -0.875, 1.5,   1.5,    -0.625, 1,      1.25,  1.5,
      0,      -0.375, -0.75, -1.125, 0.625,  -0.875, 1.75,  2,      -1.875, -1.625, -1.5,  -1.875,
      1.875,  1.5,    -1.25, -1.375, 1.25,   -1.375, -1.25, -1.125, 1.875,  -1.875, -1.5,  -1.125,
      -1.875, 2,      -1,    -0.875, 0.625,  0.75,   -0.75, -0.375, 0,      0.375,  1.25,  1},
     {3.75, -0.125, 7, -1.875, -1.75, -7, 4.25, -0.5, 0.5, 1.875, -6, 0.125, 6.25, -0.5, -0.75,
      2.75}},
    {"3x3 VALID stride 2",
     {2, 7, 7, 2},
     {3, 3, 2, 2},
     {2, 2},
     "VALID",
     {2, 3, 3, 2},  // output shape
     {1.375, 2.625, 3.875, 0.125, 8,     2.5,   2.625, 1.375,  5.125, -9.25, 1.125, 4.5,
      3.875, 0.125, 8,     2.5,   -5.75, -3.25, 5.75,  -0.125, -8,    3.875, 2.625, 1.375,
      3.75,  6.75,  1.375, 2.625, 3.875, 0.125, -8,    3.875,  2.625, 1.375, 5.125, -9.25},
     {1.875,  -1.875, -1.5,   -1.125, -2.625, 1.625,  1.75,   1.5,    0,      2.5,    1.5,
      1.5,    1.5,    1.5,    0,      0.375,  0.75,   1.125,  0.875,  1,      -1.125, -1.375,
      -2.875, -3.125, -1.25,  -1.25,  -1.25,  -1.25,  -2.5,   -0.5,   0.125,  0.75,   3.375,
      3.375,  0.75,   0.125,  1.625,  -1.875, 0.5,    0.375,  0.25,   -2.625, -1.875, -1.625,
      -1.375, -1.125, 1,      0.875,  1.125,  0.75,   1.625,  1.125,  1,      0.875,  0.75,
      0.625,  2.25,   -0.125, 0.25,   0.625,  2.5,    -5.375, -2.625, -2.625, -5.375, 2.5,
      0.625,  0.25,   -0.125, 2.25,   0.625,  0.75,   0.875,  1,      1.125,  1.625,  0.75,
      1.125,  0.875,  1,      -1.125, -1.375, -1.625, -1.875, -1.375, -1.25,  -1.125, -1,
      -2.75,  -0.875, -1.125, -0.75,  1.625,  1.75,   1.5,    1.25,   1,      -0.625, -1.25,
      1.5,    1.5,    1.5,    0.875,  2.5,    1.25,   1.5,    1.75,   1.625,  -0.75,  -1.125,
      -1.5,   -1.875, -1.25,  -1.25,  -1.25,  -1.25,  -3.125, -2.875, -1.375, -1.125, 1,
      0.875,  1.125,  0.75,   0.375,  0,      2.125,  0.625,  0.5,    0.375,  2.5,    -2.75,
      0.25,   0.625,  2.5,    -5.375, -2.625, -2.625, -2.625, 1.5,    1.25,   1.125,  1,
      0.875,  1.375,  1.375,  0.875,  1,      1.125,  1.625,  0.75,   1.125,  1.5,    1.875,
      -2.75,  1,      0.625,  0.25,   -2.75,  2.5,    0.375,  0.5,    -1.875, 1.625,  0.125,
      0.75,   1.375,  2,      -0.625, -0.875, -1.125, -1.375, -2.875, -3.125, -1.25,  -1.25,
      -3.125, -2.875, -1.375, -1.125, -0.875, -0.625, 2,      1.75,   1.5,    1.25,   2.5,
      0.875,  1.5,    1.5,    2.5,    0,      1.5,    1.75,   2,      -1.875},
     {12.875, -4.75, -7.875, 1,    0.625,  6.75,  -3.875, -7,    4.625,  -1.25, 0.125,  -2,
      -7.875, 1,     0.625,  6.75, -3.875, -7,    4.625,  -1.25, 0.125,  -2,    -1.125, 3.75,
      0.625,  6.75,  -3.875, -7,   4.625,  -1.25, 0.125,  -2,    -1.125, 3.75,  -2.375, -3.5}},
    {"4x3 SAME strides 1 and 2",
     {1, 5, 4, 2},
     {4, 3, 2, 1},
     {1, 2},
     "SAME",
     {1, 5, 2, 1},  // output shape
     {-9.75, -16.25, -6.9375, 7.5625, 14.9375, 9.6875, 9.875, -3.3125, -20.4375, 0.4375},
     {-3,    1.125, 1.125, 1.125,  1.75,   1.125, -0.625, 0.125,  -0.125, -3,
      2.375, -3.25, 3,     -3.125, -1.5,   0.75,  1.25,   0.375,  2.25,   0,
      3,     -0.25, -2.25, 0.875,  -0.75,  1.625, -1.5,   0.875,  -4.875, -0.25,
      1.875, 0,     -0.75, 1.125,  -1.125, 0.75,  0.375,  -3.125, 2.125,  -3.25},
     {-10.375, 7.875,   -9.625, 8.625,  -1.25, -0.5,  6.5,   6.5,   3.25,   -3.25, 4.125, -6.875,
      7.125,   -11.125, -0.125, -2.125, 0.625, 5.875, 3.125, 1.375, -6.875, 7.625, -7,    6.25}},
    {"1x1 stride 1",
     {2, 3, 3, 2},
     {1, 1, 2, 3},
     {1, 1},
     "SAME",
     {2, 3, 3, 3},  // output shape
     {3.25,    0.75,   -3.8125, 2.5,     1.25,   -3.4375, 1.75,    1.75,   -3.0625, 1,      2.25,
      -2.6875, 0.25,   2.75,    -2.3125, -0.5,   3.25,    -1.9375, 0.375,  -2.75,   1.6875, -0.375,
      -2.25,   2.0625, -1.125,  -1.75,   2.4375, -1.875,  -1.25,   2.8125, -2.625,  -0.75,  3.1875,
      -3.375,  -0.25,  3.5625,  -4.125,  0.25,   3.9375,  3.25,    0.75,   -3.8125, 2.5,    1.25,
      -3.4375, 1.75,   1.75,    -3.0625, 1,      2.25,    -2.6875, 0.25,   2.75,    -2.3125},
     {3.75,   -0.375, -0.625, 1.625,  -0.625, -1.625, -0.625, -1.375, -0.625,
      1.5,    -0.625, 1.75,   -0.625, -1.5,   3.75,   -0.375, -0.625, 1.625,
      -0.625, -1.625, -0.625, -1.375, -0.625, 1.5,    -0.625, 1.75,   -0.625,
      -1.5,   3.75,   -0.375, -0.625, 1.625,  -0.625, -1.625, -0.625, -1.375},
     {3, 7, -9.125, 3, 3.5, -3.875}},
    {"1x1 VALID stride 2",
     {1, 5, 4, 2},
     {1, 1, 2, 2},
     {2, 2},
     "VALID",
     {1, 3, 2, 2},  // output shape
     {4.375, -0.1875, 4.375, -0.4375, -3.75, 0.4375, -3.75, 0.1875, 4.375, -0.5625, 4.375, -0.8125},
     {1.875,  -1.875, 0, 0, -1.875, 2, 0, 0, 0, 0, 0, 0, 0, 0,      0, 0, -1.25, 1.5,    0, 0,
      -0.625, 1,      0, 0, 0,      0, 0, 0, 0, 0, 0, 0, 0, -0.375, 0, 0, 0.625, -0.875, 0, 0},
     {4, -5.875, -2.25, 8.625}},
};

TEST_CASE(
    "Conv2D and its backprop ops match numpy: SAME, VALID, strides 1 and 2, odd and even sizes",
    "[conv_ops]") {
  for (const auto& c : kConvCases) {
    for (DType dtype : kFloatTypes) {
      INFO(c.name << ", " << psflow::dtype_name(dtype));
      Graph g;
      const std::vector<int> strides = {1, c.strides[0], c.strides[1], 1};
      const Output x = ops::constant(g, make(dtype, input_pattern(c.input), c.input));
      const Output f = ops::constant(g, make(dtype, filter_pattern(c.filter), c.filter));
      const Output y = ops::conv2d(x, f, strides, c.padding);
      CHECK(y.shape() == PartialShape::of(dims_of(c.output)));
      CHECK(y.dtype() == dtype);
      const Output grad = ops::constant(g, make(dtype, grad_pattern(c.output), c.output));
      const Output dx = ops::conv2d_backprop_input(ops::constant(g, sizes32(c.input)), f, grad,
                                                   strides, c.padding);
      const Output df = ops::conv2d_backprop_filter(x, ops::constant(g, sizes64(c.filter)), grad,
                                                    strides, c.padding);
      CHECK(dx.shape() == PartialShape::of(dims_of(c.input)));
      CHECK(df.shape() == PartialShape::of(dims_of(c.filter)));
      Session sess(g);
      const auto got = sess.run({y, dx, df});
      check_values(got[0], c.output, c.out, 1e-6);
      check_values(got[1], c.input, c.dinput, 1e-6);
      check_values(got[2], c.filter, c.dfilter, 1e-6);
    }
  }
}

// Direct loops, for shapes too big to paste: what numpy's reference does.
std::vector<double> naive_conv(const std::vector<double>& x, const Shape& xs,
                               const std::vector<double>& f, const Shape& fs, int s, bool same,
                               Shape& out_shape) {
  const auto window = [&](std::size_t in, std::size_t k) {
    const auto w = psflow::detail::windowed_size(static_cast<std::int64_t>(in),
                                                 static_cast<std::int64_t>(k), s, same);
    return *w;
  };
  const auto wh = window(xs[1], fs[0]), ww = window(xs[2], fs[1]);
  out_shape = {xs[0], static_cast<std::size_t>(wh.out), static_cast<std::size_t>(ww.out), fs[3]};
  std::vector<double> out(count(out_shape), 0.0);
  for (std::size_t n = 0; n < xs[0]; ++n)
    for (std::int64_t oh = 0; oh < wh.out; ++oh)
      for (std::int64_t ow = 0; ow < ww.out; ++ow)
        for (std::size_t kh = 0; kh < fs[0]; ++kh)
          for (std::size_t kw = 0; kw < fs[1]; ++kw) {
            const std::int64_t h = oh * s - wh.pad_before + static_cast<std::int64_t>(kh);
            const std::int64_t w = ow * s - ww.pad_before + static_cast<std::int64_t>(kw);
            if (h < 0 || w < 0 || h >= static_cast<std::int64_t>(xs[1]) ||
                w >= static_cast<std::int64_t>(xs[2]))
              continue;
            for (std::size_t ci = 0; ci < xs[3]; ++ci)
              for (std::size_t co = 0; co < fs[3]; ++co)
                out[((n * out_shape[1] + static_cast<std::size_t>(oh)) * out_shape[2] +
                     static_cast<std::size_t>(ow)) *
                        fs[3] +
                    co] += x[((n * xs[1] + static_cast<std::size_t>(h)) * xs[2] +
                              static_cast<std::size_t>(w)) *
                                 xs[3] +
                             ci] *
                           f[((kh * fs[1] + kw) * fs[2] + ci) * fs[3] + co];
          }
  return out;
}

TEST_CASE("Conv2D over a batch processed in several im2col chunks matches direct loops",
          "[conv_ops]") {
  // 40 images of 16x16x2 with a 3x3 filter: 36 KiB of im2col rows per image in float64, so a
  // 256 KiB chunk holds 7 images and the batch runs in 6 chunks, the last one shorter.
  constexpr std::size_t kSize = 16, kC = 2;
  constexpr std::int64_t kSide = 16;
  const Shape xs = {40, kSize, kSize, kC}, fs = {3, 3, kC, 4};
  Random r(7);
  const auto xa = r.array(xs), fa = r.array(fs);
  const std::vector<double> x(xa.begin(), xa.end()), f(fa.begin(), fa.end());
  for (bool same : {true, false}) {
    INFO((same ? "SAME" : "VALID"));
    Shape ys;
    const auto want = naive_conv(x, xs, f, fs, 1, same, ys);
    Graph g;
    const Output xo = ops::constant(g, make(DType::float64, x, xs));
    const Output fo = ops::constant(g, make(DType::float64, f, fs));
    const Output y = ops::conv2d(xo, fo, {1, 1, 1, 1}, same ? "SAME" : "VALID");
    // The backprop ops, through sum(y * y) / 2: its gradient wrt y is y itself.
    const auto grads = psflow::train::gradients(
        ops::mul(ops::reduce_sum(ops::square(y)), ops::scalar_like(y, 0.5)), {xo, fo});
    Session sess(g);
    const auto got = sess.run({y, grads[0], grads[1]});
    check_values(got[0], ys, want, 1e-9);
    // Check the backprop ops against their definition as sums over the same windows: for the
    // filter, df[kh, kw, ci, co] = sum x[n, h, w, ci] * y[n, oh, ow, co]; for the input, the
    // transposed sum. Spot-check a few elements of each by direct loops.
    const auto dx = as_doubles(got[1]), df = as_doubles(got[2]);
    const auto wh = *psflow::detail::windowed_size(kSide, 3, 1, same);
    const auto in = [&](std::int64_t n, std::int64_t h, std::int64_t w, std::size_t c) {
      return (h < 0 || w < 0 || h >= kSide || w >= kSide)
                 ? 0.0
                 : x[((static_cast<std::size_t>(n) * kSize + static_cast<std::size_t>(h)) * kSize +
                      static_cast<std::size_t>(w)) *
                         kC +
                     c];
    };
    const auto out = [&](std::size_t n, std::int64_t oh, std::int64_t ow, std::size_t co) {
      if (oh < 0 || ow < 0 || oh >= wh.out || ow >= wh.out) return 0.0;
      return want[((n * ys[1] + static_cast<std::size_t>(oh)) * ys[2] +
                   static_cast<std::size_t>(ow)) *
                      4 +
                  co];
    };
    for (std::size_t kh = 0; kh < 3; kh += 2)
      for (std::size_t ci = 0; ci < kC; ci += 1)
        for (std::size_t co = 0; co < 4; co += 3) {
          double sum = 0;
          for (std::size_t n = 0; n < 40; ++n)
            for (std::int64_t oh = 0; oh < wh.out; ++oh)
              for (std::int64_t ow = 0; ow < wh.out; ++ow)
                sum += in(static_cast<std::int64_t>(n),
                          oh - wh.pad_before + static_cast<std::int64_t>(kh),
                          ow - wh.pad_before + 1, ci) *
                       out(n, oh, ow, co);
          CHECK(psflow::testing::close(df[((kh * 3 + 1) * kC + ci) * 4 + co], sum, 1e-9));
        }
    for (std::size_t n = 0; n < 40; n += 13)
      for (std::int64_t h = 0; h < kSide; h += kSide - 1)
        for (std::size_t ci = 0; ci < kC; ci += 1) {
          const std::int64_t w = kSide / 2 + 1;
          double sum = 0;
          for (std::size_t kh = 0; kh < 3; ++kh)
            for (std::size_t kw = 0; kw < 3; ++kw)
              for (std::size_t co = 0; co < 4; ++co)
                sum += f[((kh * 3 + kw) * kC + ci) * 4 + co] *
                       out(n, h + wh.pad_before - static_cast<std::int64_t>(kh),
                           w + wh.pad_before - static_cast<std::int64_t>(kw), co);
          CHECK(psflow::testing::close(
              dx[((n * kSize + static_cast<std::size_t>(h)) * kSize + static_cast<std::size_t>(w)) *
                     kC +
                 ci],
              sum, 1e-9));
        }
  }
}

// ---------------------------------------------------------------------------------------------
// Pools against numpy

struct PoolCase {
  const char* name;
  Shape input;
  std::array<int, 2> ksize, strides;
  const char* padding;
  bool max;
  Shape output;
  std::vector<double> out, dinput;  // dinput for the incoming grad_pattern
};

// numpy: each output cell is blk.max() / blk.mean() of the window's cells inside the input; the
// max gradient goes to np.argmax(blk), the first maximum in row-major order.
const std::vector<PoolCase> kPoolCases = {
    {"max SAME 2x2 stride 2 edges",
     {1, 5, 5, 2},
     {2, 2},
     {2, 2},
     "SAME",
     true,
     {1, 3, 3, 2},  // output shape
     {0.25, 3.25, 1.25, 2.25, 1.75, 2.75, 2.75, 2.25, 3.25, 3.25, 0.25, 1.25, 1.25, -1.75, 2.25,
      -0.75, 2.75, -0.25},
     {0, 0, 0, 0,   0,    0,   0, -0.5, 0,  -1,  0, 0, -1.5, 0, 0,   0,   1.5,
      0, 1, 0, 0,   0,    0.5, 0, 0,    0,  0,   0, 0, 1,    0, 0,   0,   -1.5,
      0, 0, 0, 1.5, -0.5, 0,   0, 0,    -1, 0.5, 0, 0, -1.5, 0, 1.5, -0.5}},
    {"max VALID 3x3 stride 1",
     {2, 4, 5, 1},
     {3, 3},
     {1, 1},
     "VALID",
     true,
     {2, 2, 3, 1},  // output shape
     {3.25, 3.25, 2.75, 3.25, 3.25, 2.75, 2.75, 2.75, 3.25, 3.25, 3.25, 3.25},
     {0, 0, 0,  0, 0, 0, 0, 0, 0, 0.5, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0,
      0, 0, -1, 0, 0, 0, 0, 0, 0, 0,   0, 0,  0, 0, 0, 0, 0, 2, 0, 0}},
    {"max SAME 3x3 stride 2",
     {1, 6, 7, 2},
     {3, 3},
     {2, 2},
     "SAME",
     true,
     {1, 3, 4, 2},  // output shape
     {1.25, 1.75, 2.25, 2.75, 3.25, 3.25, 3.25, 3.25, 1.75, 2.25, 2.75, 3.25,
      3.25, 3.25, 1.25, 1.25, 2.25, 2.25, 3.25, 3.25, 3.25, 3.25, 1.25, 1.75},
     {0,    0, 0, 0,   0, 0,    0,    0, 0,  0,   0, -2.5, 0, 0,   0,    0, -1.5, 0, 0, 0, 1.5,
      0,    0, 0, 1.5, 0, 0,    0,    0, 0,  0,   0, 0,    0, 0,   -0.5, 0, 0.5,  0, 0, 0, 0,
      0,    0, 0, 0,   0, 0,    -0.5, 0, -1, 0,   0, 0,    0, 0,   0,    0, 0,    1, 0, 0, 0,
      -1.5, 0, 0, 0,   0, -1.5, 0,    0, 0,  1.5, 0, 0,    0, 1.5, 0,    0, 0,    0, 0, 0, 1.5}},
    {"max SAME 3x2 strides 1 and 3",
     {1, 4, 5, 1},
     {3, 2},
     {1, 3},
     "SAME",
     true,
     {1, 4, 2, 1},  // output shape
     {1.75, 2.75, 3.25, 2.75, 3.25, 2.75, 3.25, 1.75},
     {0, 0, 0, 0, 0, -1.5, 0, 0, 0, -1.5, 0, 3, 0, 0, 0, 0, 0, 0, -1.5, 0}},
    {"avg SAME 2x2 stride 2 edges",
     {1, 5, 5, 2},
     {2, 2},
     {2, 2},
     "SAME",
     false,
     {1, 3, 3, 2},  // output shape
     {-1.25, 0.625, -0.25, 0, 0.5, 0.75, 0.5, 0.75, -0.125, 1.75, -1, -0.75, 1, -2, 2, -1, 2.75,
      -0.25},
     {-0.375, 0,      -0.375, 0,      0.375, -0.125, 0.375, -0.125, 0.5,   -0.5,
      -0.375, 0,      -0.375, 0,      0.375, -0.125, 0.375, -0.125, 0.5,   -0.5,
      0.125,  -0.375, 0.125,  -0.375, 0,     0.375,  0,     0.375,  -0.25, 0.5,
      0.125,  -0.375, 0.125,  -0.375, 0,     0.375,  0,     0.375,  -0.25, 0.5,
      -0.5,   0.25,   -0.5,   0.25,   -0.75, 0,      -0.75, 0,      1.5,   -0.5}},
    {"avg VALID 3x3 stride 1",
     {2, 4, 5, 1},
     {3, 3},
     {1, 1},
     "VALID",
     false,
     {2, 2, 3, 1},  // output shape
     {0.19444444444444445, 0.08333333333333333, -0.027777777777777776, 0.3611111111111111, 0.25,
      0.1388888888888889, 0.1388888888888889, 0.027777777777777776, 0.6388888888888888,
      0.3055555555555556, 0.19444444444444445, 0.08333333333333333},
     {-0.16666666666666666,
      -0.16666666666666666,
      0,
      0.16666666666666666,
      0.16666666666666666,
      -0.2222222222222222,
      -0.1111111111111111,
      -0.05555555555555555,
      0.16666666666666669,
      0.05555555555555555,
      -0.2222222222222222,
      -0.1111111111111111,
      -0.05555555555555555,
      0.16666666666666669,
      0.05555555555555555,
      -0.05555555555555555,
      0.05555555555555555,
      -0.05555555555555555,
      0,
      -0.1111111111111111,
      0.05555555555555555,
      -0.1111111111111111,
      -0.1111111111111111,
      -0.16666666666666666,
      0,
      0.2222222222222222,
      0,
      0.1111111111111111,
      -0.1111111111111111,
      0.1111111111111111,
      0.2222222222222222,
      0,
      0.1111111111111111,
      -0.1111111111111111,
      0.1111111111111111,
      0.16666666666666666,
      0.1111111111111111,
      0.2222222222222222,
      0.05555555555555555,
      0.1111111111111111}},
    {"avg SAME 3x3 stride 2",
     {1, 6, 7, 2},
     {3, 3},
     {2, 2},
     "SAME",
     false,
     {1, 3, 4, 2},  // output shape
     {-1.1666666666666667,
      0.16666666666666666,
      -0.4166666666666667,
      0.9166666666666666,
      0.5833333333333334,
      1.1944444444444444,
      0.25,
      -0.5833333333333334,
      -0.6666666666666666,
      0.6666666666666666,
      0.08333333333333333,
      1.4166666666666667,
      0.3611111111111111,
      0.25,
      -0.3333333333333333,
      -1.1666666666666667,
      0.25,
      0.5,
      1,
      1.25,
      -0.16666666666666666,
      0.08333333333333333,
      -0.5,
      -0.25},
     {-0.25,
      0,
      -0.08333333333333334,
      -0.05555555555555555,
      0.16666666666666666,
      -0.05555555555555555,
      0.2777777777777778,
      -0.16666666666666666,
      0.1111111111111111,
      -0.1111111111111111,
      0.19444444444444442,
      -0.3611111111111111,
      0.08333333333333333,
      -0.25,
      -0.25,
      0,
      -0.08333333333333334,
      -0.05555555555555555,
      0.16666666666666666,
      -0.05555555555555555,
      0.2777777777777778,
      -0.16666666666666666,
      0.1111111111111111,
      -0.1111111111111111,
      0.19444444444444442,
      -0.3611111111111111,
      0.08333333333333333,
      -0.25,
      -0.25,
      0.25,
      -0.1388888888888889,
      0.3055555555555556,
      0.1111111111111111,
      0.05555555555555555,
      0.11111111111111113,
      0,
      0,
      -0.05555555555555555,
      -0.16666666666666669,
      -0.3055555555555556,
      -0.16666666666666669,
      -0.25,
      0,
      0.25,
      -0.05555555555555555,
      0.3611111111111111,
      -0.05555555555555555,
      0.1111111111111111,
      -0.16666666666666666,
      0.16666666666666666,
      -0.1111111111111111,
      0.05555555555555555,
      -0.3611111111111111,
      0.05555555555555555,
      -0.25,
      0,
      0.375,
      0.125,
      0.48611111111111105,
      0.06944444444444445,
      0.1111111111111111,
      -0.05555555555555555,
      0.08333333333333333,
      -0.25,
      -0.027777777777777776,
      -0.19444444444444445,
      -0.2777777777777778,
      0.18055555555555555,
      -0.25,
      0.375,
      0.375,
      -0.125,
      0.5416666666666666,
      -0.29166666666666663,
      0.16666666666666666,
      -0.16666666666666666,
      0.25,
      -0.41666666666666663,
      0.08333333333333333,
      -0.25,
      0.08333333333333333,
      0.125,
      0,
      0.375}},
    {"avg SAME 3x3 stride 1 every edge",
     {1, 3, 4, 1},
     {3, 3},
     {1, 1},
     "SAME",
     false,
     {1, 3, 4, 1},  // output shape
     {-0.5, -0.9166666666666666, 0.4166666666666667, 0, 0, -0.4166666666666667, 0.9166666666666666,
      0.5, 0.5, 0.08333333333333333, 1.4166666666666667, 1},
     {-0.3194444444444444, -0.013888888888888895, -0.18055555555555555, -0.06944444444444445,
      -0.06944444444444442, 0.1527777777777778, 0.2361111111111111, 0.09722222222222221,
      0.3055555555555556, 0.2777777777777778, 0.1111111111111111, -0.02777777777777779}},
};

TEST_CASE("MaxPool and AvgPool and their gradient ops match numpy, SAME edges included",
          "[conv_ops]") {
  for (const auto& c : kPoolCases) {
    for (DType dtype : kFloatTypes) {
      INFO(c.name << ", " << psflow::dtype_name(dtype));
      Graph g;
      const std::vector<int> ksize = {1, c.ksize[0], c.ksize[1], 1};
      const std::vector<int> strides = {1, c.strides[0], c.strides[1], 1};
      const Output x = ops::constant(g, make(dtype, input_pattern(c.input), c.input));
      const Output y = c.max ? ops::max_pool(x, ksize, strides, c.padding)
                             : ops::avg_pool(x, ksize, strides, c.padding);
      CHECK(y.shape() == PartialShape::of(dims_of(c.output)));
      const Output grad = ops::constant(g, make(dtype, grad_pattern(c.output), c.output));
      const Output dx = c.max ? ops::max_pool_grad(x, y, grad, ksize, strides, c.padding)
                              : ops::avg_pool_grad(ops::constant(g, sizes32(c.input)), grad, ksize,
                                                   strides, c.padding);
      CHECK(dx.shape() == PartialShape::of(dims_of(c.input)));
      Session sess(g);
      const auto got = sess.run({y, dx});
      check_values(got[0], c.output, c.out, 1e-6);
      check_values(got[1], c.input, c.dinput, 1e-6);
    }
  }
}

TEST_CASE("MaxPoolGrad sends a tied window's gradient to its first maximum, like TF's CPU kernel",
          "[conv_ops]") {
  Graph g;
  // One 2x2 window of equal values, one with its two maxima on the second row.
  const Output x = ops::constant(
      g, Tensor::from_vector(std::vector<double>{1, 1, 0, 2, 1, 1, 0, 2}, {1, 2, 4, 1}));
  const Output y = ops::max_pool(x, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID");
  const auto grads = psflow::train::gradients(ops::reduce_sum(y), {x});
  Session sess(g);
  const auto got = sess.run({y, grads[0]});
  check_values(got[0], {1, 1, 2, 1}, {1, 2}, 0);
  check_values(got[1], {1, 2, 4, 1}, {1, 0, 0, 1, 0, 0, 0, 0}, 0);
}

// ---------------------------------------------------------------------------------------------
// BiasAdd

TEST_CASE("BiasAdd adds the bias on the last axis and BiasAddGrad sums all but it, every dtype",
          "[conv_ops]") {
  // numpy: x + b and g.sum(axis=tuple(range(g.ndim - 1))).
  for (DType dtype : {DType::float32, DType::float64, DType::int32, DType::int64}) {
    INFO(psflow::dtype_name(dtype));
    const auto tensor = [&](std::vector<double> v, Shape shape) {
      return psflow::visit_numeric_dtype(dtype, "tensor", [&](auto tag) {
        using T = typename decltype(tag)::type;
        return Tensor::from_vector(std::vector<T>(v.begin(), v.end()), shape);
      });
    };
    Graph g;
    const Output x2 = ops::constant(g, tensor({1, 2, 3, 4, 5, 6}, {2, 3}));
    const Output x4 = ops::constant(
        g, tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {2, 2, 2, 2}));
    const Output b3 = ops::constant(g, tensor({10, -20, 30}, {3}));
    const Output b2 = ops::constant(g, tensor({-1, 100}, {2}));
    const Output y2 = ops::bias_add(x2, b3), y4 = ops::bias_add(x4, b2);
    CHECK(y4.shape() == PartialShape::of({2, 2, 2, 2}));
    const Output s2 = ops::bias_add_grad(x2), s4 = ops::bias_add_grad(x4);
    CHECK(s4.shape() == PartialShape::of({2}));
    Session sess(g);
    const auto got = sess.run({y2, y4, s2, s4});
    check_values(got[0], {2, 3}, {11, -18, 33, 14, -15, 36}, 0);
    check_values(got[1], {2, 2, 2, 2},
                 {-1, 101, 1, 103, 3, 105, 5, 107, 7, 109, 9, 111, 11, 113, 13, 115}, 0);
    check_values(got[2], {3}, {5, 7, 9}, 0);
    check_values(got[3], {2}, {56, 64}, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST_CASE("Conv2D build-time errors name the op and what was wrong", "[conv_ops]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {1, 5, 5, 3}, "x");
  const Output f = ops::placeholder(g, DType::float32, {3, 3, 3, 4}, "f");
  const auto msg = [&](auto fn) { return invalid_argument_message(fn); };
  CHECK_THAT(msg([&] {
               ops::conv2d(x, f, {1, 1, 1}, "SAME");
             }),
             Contains("Conv2D") && Contains("strides must have 4 entries") && Contains("[1,1,1]"));
  CHECK_THAT(msg([&] {
               ops::conv2d(x, f, {2, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2D") && Contains("[2,1,1,1]") && Contains("batch and channel"));
  CHECK_THAT(msg([&] {
               ops::conv2d(x, f, {1, 1, 1, 2}, "SAME");
             }),
             Contains("Conv2D") && Contains("batch and channel"));
  CHECK_THAT(msg([&] {
               ops::conv2d(x, f, {1, 0, 1, 1}, "SAME");
             }),
             Contains("Conv2D") && Contains("at least 1"));
  CHECK_THAT(msg([&] {
               ops::conv2d(x, f, {1, 1, 1, 1}, "same");
             }),
             Contains("Conv2D") && Contains("padding") && Contains("\"same\""));
  CHECK_THAT(msg([&] {
               ops::conv2d(x, f, {1, 1, 1, 1}, "FULL");
             }),
             Contains("Conv2D") && Contains("\"FULL\""));
  const Output f2 = ops::placeholder(g, DType::float32, {3, 3, 2, 4}, "f2");
  CHECK_THAT(
      msg([&] {
        ops::conv2d(x, f2, {1, 1, 1, 1}, "SAME");
      }),
      Contains("Conv2D") && Contains("[1,5,5,3]") && Contains("[3,3,2,4]") && Contains("channels"));
  const Output x3 = ops::placeholder(g, DType::float32, {5, 5, 3}, "x3");
  CHECK_THAT(msg([&] {
               ops::conv2d(x3, f, {1, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2D") && Contains("rank 4") && Contains("[5,5,3]"));
  const Output f3 = ops::placeholder(g, DType::float32, {3, 3, 3}, "f3");
  CHECK_THAT(msg([&] {
               ops::conv2d(x, f3, {1, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2D") && Contains("filter") && Contains("rank 4"));
  const Output xi = ops::placeholder(g, DType::int32, {1, 5, 5, 3}, "xi");
  CHECK_THAT(msg([&] {
               ops::conv2d(xi, f, {1, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2D") && Contains("float32 or float64"));
  const Output fd = ops::placeholder(g, DType::float64, {3, 3, 3, 4}, "fd");
  CHECK_THAT(msg([&] {
               ops::conv2d(x, fd, {1, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2D") && Contains("same dtype"));
  const Output big = ops::placeholder(g, DType::float32, {7, 7, 3, 4}, "big");
  CHECK_THAT(msg([&] {
               ops::conv2d(x, big, {1, 1, 1, 1}, "VALID");
             }),
             Contains("Conv2D") && Contains("VALID") && Contains("too small"));
  CHECK_NOTHROW(ops::conv2d(x, big, {1, 1, 1, 1}, "SAME"));

  // The backprop ops check out_backprop against the forward output and their sizes input.
  const Output grad = ops::placeholder(g, DType::float32, {1, 4, 5, 4}, "grad");
  const Output sizes = ops::constant(g, sizes32({1, 5, 5, 3}));
  CHECK_THAT(msg([&] {
               ops::conv2d_backprop_input(sizes, f, grad, {1, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2DBackpropInput") && Contains("out_backprop") && Contains("[1,5,5,4]"));
  const Output fsizes = ops::constant(g, sizes64({3, 3, 3, 4}));
  CHECK_THAT(msg([&] {
               ops::conv2d_backprop_filter(x, fsizes, grad, {1, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2DBackpropFilter") && Contains("out_backprop"));
  const Output float_sizes = ops::constant(g, Tensor::from_vector(std::vector<float>{1, 5, 5, 3}));
  CHECK_THAT(msg([&] {
               ops::conv2d_backprop_input(float_sizes, f, grad, {1, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2DBackpropInput") && Contains("int32 or int64"));
  const Output short_sizes = ops::constant(g, Tensor::from_vector(std::vector<std::int32_t>{5, 5}));
  CHECK_THAT(msg([&] {
               ops::conv2d_backprop_input(short_sizes, f, grad, {1, 1, 1, 1}, "SAME");
             }),
             Contains("Conv2DBackpropInput") && Contains("vector of 4"));
  CHECK_THAT(msg([&] {
               ops::conv2d_backprop_input(sizes, f, grad, {1, 1, 1, 1}, "Same");
             }),
             Contains("Conv2DBackpropInput") && Contains("\"Same\""));
}

TEST_CASE("Pool and BiasAdd build-time errors name the op and what was wrong", "[conv_ops]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {2, 6, 6, 3}, "x");
  const auto msg = [&](auto fn) { return invalid_argument_message(fn); };
  for (bool max : {true, false}) {
    const char* type = max ? "MaxPool" : "AvgPool";
    const auto pool = [&](std::vector<int> k, std::vector<int> s, const char* padding) {
      return max ? ops::max_pool(x, k, s, padding) : ops::avg_pool(x, k, s, padding);
    };
    CHECK_THAT(msg([&] {
                 pool({1, 2, 2}, {1, 2, 2, 1}, "SAME");
               }),
               Contains(type) && Contains("ksize must have 4 entries"));
    CHECK_THAT(msg([&] {
                 pool({2, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
               }),
               Contains(type) && Contains("ksize") && Contains("batch and channel"));
    CHECK_THAT(msg([&] {
                 pool({1, 2, 2, 1}, {1, 2, 2, 3}, "SAME");
               }),
               Contains(type) && Contains("strides") && Contains("batch and channel"));
    CHECK_THAT(msg([&] {
                 pool({1, 0, 2, 1}, {1, 2, 2, 1}, "SAME");
               }),
               Contains(type) && Contains("ksize") && Contains("at least 1"));
    CHECK_THAT(msg([&] {
                 pool({1, 2, 2, 1}, {1, 2, 2, 1}, "valid");
               }),
               Contains(type) && Contains("\"valid\""));
    CHECK_THAT(msg([&] {
                 pool({1, 8, 2, 1}, {1, 1, 1, 1}, "VALID");
               }),
               Contains(type) && Contains("too small"));
    const Output x3 = ops::placeholder(g, DType::float64, {6, 6, 3});
    CHECK_THAT(msg([&] {
                 max ? ops::max_pool(x3, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME")
                     : ops::avg_pool(x3, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
               }),
               Contains(type) && Contains("rank 4"));
  }
  const Output wrong_grad = ops::placeholder(g, DType::float64, {2, 3, 4, 3}, "wrong_grad");
  const Output y = ops::max_pool(x, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
  CHECK_THAT(msg([&] {
               ops::max_pool_grad(x, y, wrong_grad, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
             }),
             Contains("MaxPoolGrad") && Contains("[2,3,3,3]"));
  CHECK_THAT(msg([&] {
               ops::avg_pool_grad(ops::constant(g, sizes32({2, 6, 6, 3})), wrong_grad, {1, 2, 2, 1},
                                  {1, 2, 2, 1}, "SAME");
             }),
             Contains("AvgPoolGrad") && Contains("[2,3,3,3]"));

  const Output v1 = ops::placeholder(g, DType::float64, {3}, "v1");
  const Output b = ops::placeholder(g, DType::float64, {3}, "b");
  CHECK_THAT(msg([&] { ops::bias_add(v1, b); }),
             Contains("BiasAdd") && Contains("rank 2 or more") && Contains("[3]"));
  const Output v = ops::placeholder(g, DType::float64, {2, 4}, "v");
  CHECK_THAT(msg([&] { ops::bias_add(v, b); }),
             Contains("BiasAdd") && Contains("[2,4]") && Contains("[3]"));
  const Output b2 = ops::placeholder(g, DType::float64, {1, 4}, "b2");
  CHECK_THAT(msg([&] { ops::bias_add(v, b2); }), Contains("BiasAdd") && Contains("rank 1"));
  const Output bf = ops::placeholder(g, DType::float32, {4}, "bf");
  CHECK_THAT(msg([&] { ops::bias_add(v, bf); }), Contains("BiasAdd") && Contains("same dtype"));
  CHECK_THAT(msg([&] { ops::bias_add_grad(v1); }),
             Contains("BiasAddGrad") && Contains("rank 2 or more"));
}

TEST_CASE("the image kernels reject bad run-time shapes with InvalidArgument naming the node",
          "[conv_ops]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {-1, -1, -1, -1}, "x");
  const Output f = ops::placeholder(g, DType::float64, {-1, -1, -1, -1}, "f");
  const Output y = ops::conv2d(x, f, {1, 1, 1, 1}, "VALID", "conv");
  const Output vv = ops::placeholder(g, DType::float64, {-1, -1}, "vv");
  const Output b = ops::placeholder(g, DType::float64, {-1}, "b");
  const Output biased = ops::bias_add(vv, b, "biased");
  const Output sizes = ops::placeholder(g, DType::int32, {4}, "sizes");
  const Output grad = ops::placeholder(g, DType::float64, {-1, -1, -1, -1}, "grad");
  const Output dx = ops::conv2d_backprop_input(sizes, f, grad, {1, 1, 1, 1}, "VALID", "dx");
  Session sess(g);
  const Tensor x1 = make(DType::float64, input_pattern({1, 4, 4, 2}), {1, 4, 4, 2});
  CHECK_THAT(
      invalid_argument_message([&] {
        sess.run({y},
                 {{x, x1}, {f, make(DType::float64, filter_pattern({2, 2, 3, 1}), {2, 2, 3, 1})}});
      }),
      Contains("conv") && Contains("[1,4,4,2]") && Contains("[2,2,3,1]"));
  CHECK_THAT(
      invalid_argument_message([&] {
        sess.run({y},
                 {{x, x1}, {f, make(DType::float64, filter_pattern({6, 2, 2, 1}), {6, 2, 2, 1})}});
      }),
      Contains("conv") && Contains("VALID"));
  CHECK_THAT(invalid_argument_message([&] {
               sess.run({biased}, {{vv, make(DType::float64, {1, 2, 3, 4}, {2, 2})},
                                   {b, make(DType::float64, {1, 2, 3}, {3})}});
             }),
             Contains("biased") && Contains("bias"));
  const Tensor f1 = make(DType::float64, filter_pattern({2, 2, 2, 1}), {2, 2, 2, 1});
  CHECK_THAT(invalid_argument_message([&] {
               sess.run({dx},
                        {{sizes, Tensor::from_vector(std::vector<std::int32_t>{1, -4, 4, 2})},
                         {f, f1},
                         {grad, make(DType::float64, grad_pattern({1, 3, 3, 1}), {1, 3, 3, 1})}});
             }),
             Contains("dx") && Contains("negative"));
  CHECK_THAT(invalid_argument_message([&] {
               sess.run({dx},
                        {{sizes, sizes32({1, 4, 4, 2})},
                         {f, f1},
                         {grad, make(DType::float64, grad_pattern({1, 4, 4, 1}), {1, 4, 4, 1})}});
             }),
             Contains("dx") && Contains("out_backprop") && Contains("[1,3,3,1]"));
}

// ---------------------------------------------------------------------------------------------
// Empty batches

TEST_CASE("the image ops and their gradients handle an empty batch", "[conv_ops]") {
  for (DType dtype : kFloatTypes) {
    INFO(psflow::dtype_name(dtype));
    Graph g;
    const Output x = ops::placeholder(g, dtype, {-1, 5, 5, 2}, "x");
    const Output f = ops::constant(g, make(dtype, filter_pattern({3, 3, 2, 4}), {3, 3, 2, 4}));
    const Output b = ops::constant(g, make(dtype, {1, 2, 3, 4}, {4}));
    const Output y = ops::bias_add(ops::conv2d(x, f, {1, 2, 2, 1}, "SAME"), b);
    CHECK(y.shape() == PartialShape::of({-1, 3, 3, 4}));
    const Output mp = ops::max_pool(y, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID");
    const Output ap = ops::avg_pool(y, {1, 3, 3, 1}, {1, 2, 2, 1}, "SAME");
    const Output loss = ops::add(ops::reduce_sum(mp), ops::reduce_sum(ap));
    const auto grads = psflow::train::gradients(loss, {x, f, b});
    Session sess(g);
    const auto got =
        sess.run({y, mp, ap, grads[0], grads[1], grads[2]}, {{x, make(dtype, {}, {0, 5, 5, 2})}});
    CHECK(got[0].shape() == Shape{0, 3, 3, 4});
    CHECK(got[1].shape() == Shape{0, 2, 2, 4});
    CHECK(got[2].shape() == Shape{0, 2, 2, 4});
    CHECK(got[3].shape() == Shape{0, 5, 5, 2});
    check_values(got[4], {3, 3, 2, 4}, std::vector<double>(72, 0.0), 0);
    check_values(got[5], {4}, {0, 0, 0, 0}, 0);
  }
}

TEST_CASE("VALID padding with a window one cell larger than the input gives an empty output, as TF",
          "[conv_ops]") {
  // TF's arithmetic: (in - k + s) / s = (2 - 3 + 1) / 1 = 0 cells; one cell smaller is an error.
  Graph g;
  const Output x =
      ops::constant(g, make(DType::float32, input_pattern({1, 2, 2, 1}), {1, 2, 2, 1}));
  const Output f =
      ops::constant(g, make(DType::float32, filter_pattern({3, 3, 1, 2}), {3, 3, 1, 2}));
  const Output y = ops::conv2d(x, f, {1, 1, 1, 1}, "VALID");
  const Output p = ops::max_pool(x, {1, 3, 3, 1}, {1, 1, 1, 1}, "VALID");
  CHECK(y.shape() == PartialShape::of({1, 0, 0, 2}));
  CHECK(p.shape() == PartialShape::of({1, 0, 0, 1}));
  Session sess(g);
  const auto got = sess.run({y, p});
  CHECK(got[0].shape() == Shape{1, 0, 0, 2});
  CHECK(got[1].shape() == Shape{1, 0, 0, 1});
}

// ---------------------------------------------------------------------------------------------
// Gradients against central differences

TEST_CASE("Conv2D gradients wrt input and filter: SAME and VALID, strides 1 and 2", "[conv_ops]") {
  struct Case {
    Shape input, filter;
    std::vector<int> strides;
    const char* padding;
    Dims placeholder;  // the input's placeholder shape
  };
  const std::vector<Case> cases = {
      {{2, 5, 6, 3}, {3, 3, 3, 2}, {1, 1, 1, 1}, "SAME", {2, 5, 6, 3}},
      {{2, 5, 6, 3}, {3, 3, 3, 2}, {1, 2, 2, 1}, "SAME", {2, 5, 6, 3}},
      {{2, 5, 6, 3}, {3, 3, 3, 2}, {1, 1, 1, 1}, "VALID", {2, 5, 6, 3}},
      {{2, 5, 6, 3}, {3, 3, 3, 2}, {1, 2, 2, 1}, "VALID", {-1, 5, 6, 3}},
      {{1, 6, 5, 2}, {2, 2, 2, 3}, {1, 2, 1, 1}, "SAME", {-1, -1, -1, 2}},
      {{2, 3, 4, 3}, {1, 1, 3, 2}, {1, 1, 1, 1}, "VALID", {2, 3, 4, 3}},
      {{1, 5, 5, 2}, {1, 1, 2, 2}, {1, 2, 2, 1}, "SAME", {1, 5, 5, 2}},
  };
  std::uint64_t seed = 100;
  for (const auto& c : cases) {
    INFO(psflow::shape_string(c.input) << " * " << psflow::shape_string(c.filter) << ", strides "
                                       << c.strides[1] << "x" << c.strides[2] << ", " << c.padding);
    Random r(seed++);
    const Shape out_shape = [&] {
      Graph g;
      const Output x = ops::placeholder(g, DType::float64, dims_of(c.input));
      const Output f = ops::placeholder(g, DType::float64, dims_of(c.filter));
      return ops::conv2d(x, f, c.strides, c.padding).shape().to_shape();
    }();
    const auto weights = Tensor(r.array(out_shape));
    check_gradients(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::mul(ops::conv2d(in[0], in[1], c.strides, c.padding),
                          ops::constant(g, weights));
        },
        {Arg{r.array(c.input), c.placeholder}, Arg{r.array(c.filter)}});
  }
}

TEST_CASE("the gradients of the backprop ops (second order) are the other convolutions",
          "[conv_ops]") {
  for (const char* padding : {"SAME", "VALID"}) {
    INFO(padding);
    Random r(padding[0] == 'S' ? 200 : 201);
    const Shape input = {2, 5, 6, 2}, filter = {3, 2, 2, 3};
    const std::vector<int> strides = {1, 2, 2, 1};
    Graph probe;
    const Shape out =
        ops::conv2d(ops::placeholder(probe, DType::float64, dims_of(input)),
                    ops::placeholder(probe, DType::float64, dims_of(filter)), strides, padding)
            .shape()
            .to_shape();
    const Tensor w_in = Tensor(r.array(input)), w_filter = Tensor(r.array(filter));
    check_gradients(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::mul(ops::conv2d_backprop_input(ops::constant(g, sizes32(input)), in[0], in[1],
                                                     strides, padding),
                          ops::constant(g, w_in));
        },
        {Arg{r.array(filter)}, Arg{r.array(out)}});
    check_gradients(
        [&](Graph& g, const std::vector<Output>& in) {
          return ops::mul(ops::conv2d_backprop_filter(in[0], ops::constant(g, sizes64(filter)),
                                                      in[1], strides, padding),
                          ops::constant(g, w_filter));
        },
        {Arg{r.array(input)}, Arg{r.array(out)}});
  }
}

TEST_CASE("MaxPool and AvgPool gradients, SAME and VALID, strides 1 and 2", "[conv_ops]") {
  struct Case {
    std::vector<int> ksize, strides;
    const char* padding;
  };
  const std::vector<Case> cases = {{{1, 3, 3, 1}, {1, 2, 2, 1}, "SAME"},
                                   {{1, 2, 2, 1}, {1, 2, 2, 1}, "VALID"},
                                   {{1, 2, 3, 1}, {1, 1, 1, 1}, "SAME"},
                                   {{1, 3, 2, 1}, {1, 1, 2, 1}, "VALID"}};
  std::uint64_t seed = 300;
  for (bool max : {true, false}) {
    for (const auto& c : cases) {
      INFO((max ? "MaxPool " : "AvgPool ")
           << c.ksize[1] << "x" << c.ksize[2] << ", strides " << c.strides[1] << "x" << c.strides[2]
           << ", " << c.padding);
      Random r(seed++);
      const Shape input = {2, 5, 6, 2};
      check_gradients(
          [&](Graph&, const std::vector<Output>& in) {
            return weighted(max ? ops::max_pool(in[0], c.ksize, c.strides, c.padding)
                                : ops::avg_pool(in[0], c.ksize, c.strides, c.padding),
                            seed);
          },
          {Arg{r.array(input)}});
    }
  }
  // AvgPoolGrad's own gradient (it is linear in grad), with a run-time batch.
  Random r(310);
  check_gradients(
      [&](Graph& g, const std::vector<Output>& in) {
        return weighted(ops::avg_pool_grad(ops::constant(g, sizes64({2, 5, 6, 2})), in[0],
                                           {1, 3, 3, 1}, {1, 2, 2, 1}, "SAME"),
                        311);
      },
      {Arg{r.array({2, 3, 3, 2})}});
}

TEST_CASE("BiasAdd and BiasAddGrad gradients", "[conv_ops]") {
  Random r(400);
  check_gradients(
      [](Graph&, const std::vector<Output>& in) {
        return weighted(ops::bias_add(in[0], in[1]), 401);
      },
      {Arg{r.array({3, 4})}, Arg{r.array({4})}});
  check_gradients(
      [](Graph&, const std::vector<Output>& in) {
        return ops::square(ops::bias_add(in[0], in[1]));
      },
      {Arg{r.array({2, 3, 2, 5}), Dims{-1, 3, -1, 5}}, Arg{r.array({5})}});
  check_gradients(
      [](Graph&, const std::vector<Output>& in) {
        return weighted(ops::bias_add_grad(in[0]), 402);
      },
      {Arg{r.array({2, 3, 4})}});
}

TEST_CASE("a small conv net's gradients wrt the input and every weight match central differences",
          "[conv_ops]") {
  // conv2d -> bias_add -> relu -> max_pool -> reshape -> matmul -> reduce_sum, as a TF1 MNIST
  // model's first layer and classifier.
  Random r(500);
  const auto net = [](Graph&, const std::vector<Output>& in) {
    const Output conv = ops::conv2d(in[0], in[1], {1, 1, 1, 1}, "SAME");
    const Output hidden = ops::relu(ops::bias_add(conv, in[2]));
    const Output pooled = ops::max_pool(hidden, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
    const Output flat = ops::reshape(pooled, {-1, 3 * 3 * 4});
    return ops::reduce_sum(ops::matmul(flat, in[3]));
  };
  check_gradients(net, {Arg{r.array({2, 6, 5, 1}), Dims{-1, 6, 5, 1}}, Arg{r.array({3, 3, 1, 4})},
                        Arg{r.array({4}, -0.2, 0.2)}, Arg{r.array({36, 3})}});
}

}  // namespace conv_ops_test
