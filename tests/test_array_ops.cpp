// Array ops: transpose, split, pad, slice, strided_slice, stack/unstack, tile, expand_dims,
// squeeze and one_hot, and the TF1 behaviour of concat, fill, range, shape and size. Values are
// checked against numpy (expected element positions pasted from np.transpose, np.split, ...
// applied to np.arange) for every dtype, with negative axes and empty tensors; build-time and
// run-time errors by their messages; gradients against central differences in float64.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xarray.hpp>

#include "psflow/runtime.hpp"
#include "support/numeric_gradient.hpp"

namespace array_ops_test {

namespace ops = psflow::ops;
using Catch::Contains;
using psflow::DType;
using psflow::FeedMap;
using psflow::Graph;
using psflow::InvalidArgument;
using psflow::Output;
using psflow::Session;
using psflow::Shape;
using psflow::Tensor;
using psflow::testing::Arg;
using psflow::testing::check_gradients;
using psflow::testing::Dims;
using psflow::testing::Random;

// ---------------------------------------------------------------------------------------------
// Helpers

// The value standing for element k of np.arange in each dtype (distinct for numbers).
template <class T>
T val(std::int64_t k) {
  if constexpr (std::is_same_v<T, bool>)
    return k % 3 == 0;
  else if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(k) * T(0.5) - T(2.25);
  else
    return static_cast<T>(k * 3 - 7);
}

// np.arange(first, first + n).reshape(shape), as val<T>.
template <class T>
Tensor iota(const Shape& shape, std::int64_t first = 0) {
  Tensor t = Tensor::uninitialized(psflow::dtype_of<T>(), shape);
  T* p = t.data<T>();
  for (std::size_t i = 0; i < t.size(); ++i) p[i] = val<T>(first + static_cast<std::int64_t>(i));
  return t;
}

// The elements of iota at numpy's positions `indices` (-1: a zero, for padding).
template <class T>
Tensor picked(const std::vector<std::int64_t>& indices, const Shape& shape) {
  Tensor t = Tensor::uninitialized(psflow::dtype_of<T>(), shape);
  REQUIRE(t.size() == indices.size());
  T* p = t.data<T>();
  for (std::size_t i = 0; i < indices.size(); ++i) p[i] = indices[i] < 0 ? T{} : val<T>(indices[i]);
  return t;
}

void check_equal(const Tensor& got, const Tensor& want) {
  INFO("got " << got.summary() << " " << psflow::to_string(got) << ", want " << want.summary()
              << " " << psflow::to_string(want));
  CHECK(got.equals(want));
}

std::vector<Tensor> run(const std::vector<Output>& fetches, const FeedMap& feeds = {}) {
  Session sess(fetches.at(0).graph());
  return sess.run(fetches, feeds);
}
Tensor run(Output fetch, const FeedMap& feeds = {}) {
  return run(std::vector<Output>{fetch}, feeds).at(0);
}

template <class T>
Output constant(Graph& g, const Shape& shape, std::int64_t first = 0) {
  return ops::constant(g, iota<T>(shape, first));
}

// The gradient check's y: o times fixed weights (so each element's gradient differs), or o^2
// when o's shape is not known when the graph is built.
Output weighted(Output o, std::uint64_t seed = 7) {
  const auto shape = o.shape();
  if (!shape.fully_defined()) return ops::square(o);
  Random r(seed);
  return o * ops::constant(o.graph(), Tensor(r.array(shape.to_shape(), 0.5, 1.5)));
}

// Runs check_gradients for y = weighted(f(x)) with x of `shape`, its placeholder declared
// `placeholder` (default: the value's shape).
void check_unary_gradient(const std::function<Output(Output)>& f, const Shape& shape,
                          std::optional<Dims> placeholder = std::nullopt, std::uint64_t seed = 1) {
  Random r(seed);
  check_gradients([&](Graph&, const std::vector<Output>& in) { return weighted(f(in[0])); },
                  {Arg{r.array(shape), std::move(placeholder)}});
}

// ---------------------------------------------------------------------------------------------
// transpose

TEMPLATE_TEST_CASE("transpose permutes the axes like np.transpose", "[array][transpose]", float,
                   double, std::int32_t, std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output x = constant<T>(g, {2, 3, 4});
  const Output p = ops::transpose(x, {2, 0, 1});
  CHECK(p.shape() == psflow::PartialShape::of({4, 2, 3}));
  check_equal(run(p), picked<T>({0, 4, 8,  12, 16, 20, 1, 5, 9,  13, 17, 21,
                                 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23},
                                {4, 2, 3}));
  // An empty perm reverses the axes.
  const Output r = ops::transpose(x);
  CHECK(r.shape() == psflow::PartialShape::of({4, 3, 2}));
  check_equal(run(r), picked<T>({0, 12, 4, 16, 8,  20, 1, 13, 5, 17, 9,  21,
                                 2, 14, 6, 18, 10, 22, 3, 15, 7, 19, 11, 23},
                                {4, 3, 2}));
  check_equal(run(ops::transpose(constant<T>(g, {2, 3}), {1, 0})),
              picked<T>({0, 3, 1, 4, 2, 5}, {3, 2}));
  // A scalar, an empty tensor, and the identity permutation.
  check_equal(run(ops::transpose(constant<T>(g, {}))), iota<T>({}));
  check_equal(run(ops::transpose(constant<T>(g, {0, 3}), {1, 0})), iota<T>({3, 0}));
  check_equal(run(ops::transpose(constant<T>(g, {2, 3}), {0, 1})), iota<T>({2, 3}));
}

TEST_CASE("transpose keeps unknown dimensions and rejects a perm that is not a permutation",
          "[array][transpose]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {-1, 3, 5});
  CHECK(ops::transpose(x, {1, 2, 0}).shape() == psflow::PartialShape::of({3, 5, -1}));
  CHECK(ops::transpose(x).shape() == psflow::PartialShape::of({5, 3, -1}));
  CHECK_THROWS_AS(ops::transpose(x, {0, 0, 1}), InvalidArgument);
  CHECK_THROWS_WITH(ops::transpose(x, {0, 0, 1}),
                    Contains("Transpose") && Contains("perm [0,0,1] is not a permutation"));
  CHECK_THROWS_WITH(ops::transpose(x, {1, 0}), Contains("Transpose") &&
                                                   Contains("perm [1,0] has 2 entries") &&
                                                   Contains("rank 3"));
  CHECK_THROWS_WITH(ops::transpose(x, {0, 1, -1}), Contains("Transpose") && Contains("[0,1,-1]"));
}

// ---------------------------------------------------------------------------------------------
// split

TEMPLATE_TEST_CASE("split into equal pieces and by sizes like np.split", "[array][split]", float,
                   double, std::int32_t, std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output x = constant<T>(g, {4, 6});
  for (int axis : {1, -1}) {
    const auto pieces = ops::split(x, 3, axis);
    REQUIRE(pieces.size() == 3);
    CHECK(pieces[0].op().type() == "Split");
    for (const auto& p : pieces) CHECK(p.shape() == psflow::PartialShape::of({4, 2}));
    const auto got = run(pieces);
    check_equal(got[0], picked<T>({0, 1, 6, 7, 12, 13, 18, 19}, {4, 2}));
    check_equal(got[1], picked<T>({2, 3, 8, 9, 14, 15, 20, 21}, {4, 2}));
    check_equal(got[2], picked<T>({4, 5, 10, 11, 16, 17, 22, 23}, {4, 2}));
  }
  const auto rows = run(ops::split(x, 2));
  check_equal(rows[0], iota<T>({2, 6}));
  check_equal(rows[1], iota<T>({2, 6}, 12));
  CHECK(run(ops::split(x, 1))[0].equals(iota<T>({4, 6})));

  // Sizes with one -1 (the rest), and a negative axis.
  const auto parts = ops::split(x, std::vector<std::int64_t>{1, -1, 2}, -1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].op().type() == "SplitV");
  CHECK(parts[1].shape() == psflow::PartialShape::of({4, 3}));
  const auto got = run(parts);
  check_equal(got[0], picked<T>({0, 6, 12, 18}, {4, 1}));
  check_equal(got[1], picked<T>({1, 2, 3, 7, 8, 9, 13, 14, 15, 19, 20, 21}, {4, 3}));
  check_equal(got[2], picked<T>({4, 5, 10, 11, 16, 17, 22, 23}, {4, 2}));
  // An empty piece and an empty input.
  const auto with_empty = run(ops::split(x, std::vector<std::int64_t>{0, 6}, 1));
  check_equal(with_empty[0], iota<T>({4, 0}));
  check_equal(with_empty[1], iota<T>({4, 6}));
  const auto empty = run(ops::split(constant<T>(g, {0, 4}), 2, 1));
  check_equal(empty[0], iota<T>({0, 2}));
  check_equal(empty[1], iota<T>({0, 2}));
}

TEST_CASE("split errors name the op, the sizes and the input", "[array][split]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {4, 6});
  CHECK_THROWS_AS(ops::split(x, 4, 1), InvalidArgument);
  CHECK_THROWS_WITH(ops::split(x, 4, 1), Contains("Split") && Contains("num_split 4") &&
                                             Contains("(size 6)") && Contains("[4,6]"));
  CHECK_THROWS_WITH(ops::split(x, 0, 1), Contains("Split") && Contains("at least 1"));
  CHECK_THROWS_WITH(ops::split(x, 2, 2), Contains("Split") && Contains("axis 2 is out of range"));
  CHECK_THROWS_WITH(ops::split(x, std::vector<std::int64_t>{1, 2}, 1),
                    Contains("SplitV") && Contains("[1,2] add up to 3") && Contains("size 6"));
  CHECK_THROWS_WITH(ops::split(x, std::vector<std::int64_t>{-1, -1}, 1),
                    Contains("SplitV") && Contains("at most one"));
  CHECK_THROWS_WITH(ops::split(x, std::vector<std::int64_t>{2, -2, 6}, 1),
                    Contains("SplitV") && Contains("negative size"));
  CHECK_THROWS_WITH(ops::split(x, std::vector<std::int64_t>{7, -1}, 1),
                    Contains("SplitV") && Contains("more than dimension 1"));

  // Unknown at build time: the kernel checks.
  const Output u = ops::placeholder(g, DType::float32, {-1}, "u");
  const auto halves = ops::split(u, 2);
  CHECK(halves[0].shape() == psflow::PartialShape::of({-1}));
  const auto five = Tensor::from_vector<float>({1, 2, 3, 4, 5});
  CHECK_THROWS_WITH(run(halves, {{u, five}}),
                    Contains("Split") && Contains("num_split 2") && Contains("(size 5)"));
  const auto sized = ops::split(u, std::vector<std::int64_t>{2, -1, 1});
  const auto got = run(sized, {{u, five}});
  CHECK(got[1].equals(Tensor::from_vector<float>({3, 4})));
  CHECK_THROWS_WITH(run(ops::split(u, std::vector<std::int64_t>{2, 4}), {{u, five}}),
                    Contains("SplitV") && Contains("do not add up"));
}

// ---------------------------------------------------------------------------------------------
// pad and slice

TEMPLATE_TEST_CASE("pad adds zeros around like np.pad", "[array][pad]", float, double, std::int32_t,
                   std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output padded = ops::pad(constant<T>(g, {2, 3}), {{1, 0}, {2, 1}});
  CHECK(padded.shape() == psflow::PartialShape::of({3, 6}));
  check_equal(
      run(padded),
      picked<T>({-1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 2, -1, -1, -1, 3, 4, 5, -1}, {3, 6}));
  check_equal(run(ops::pad(constant<T>(g, {}), {})), iota<T>({}));
  check_equal(run(ops::pad(constant<T>(g, {0, 2}), {{1, 1}, {0, 0}})),
              Tensor(psflow::dtype_of<T>(), {2, 2}));
  check_equal(run(ops::pad(constant<T>(g, {2, 3}), {{0, 0}, {0, 0}})), iota<T>({2, 3}));
}

TEST_CASE("pad rejects negative paddings and a wrong number of pairs", "[array][pad]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {2, 3});
  CHECK_THROWS_AS(ops::pad(x, {{1, 0}, {0, -1}}), InvalidArgument);
  CHECK_THROWS_WITH(ops::pad(x, {{1, 0}, {0, -1}}),
                    Contains("Pad") && Contains("[[1,0],[0,-1]] must be non-negative"));
  CHECK_THROWS_WITH(ops::pad(x, {{1, 0}}),
                    Contains("Pad") && Contains("has 1 pairs") && Contains("rank 2"));
  const Output u = ops::placeholder(g, DType::float32, {-1, 3});
  CHECK(ops::pad(u, {{1, 2}, {0, 1}}).shape() == psflow::PartialShape::of({-1, 4}));
}

TEMPLATE_TEST_CASE("slice takes a block, to the end of an axis for size -1", "[array][slice]",
                   float, double, std::int32_t, std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output x = constant<T>(g, {4, 5});
  check_equal(run(ops::slice(x, {1, 2}, {2, -1})), picked<T>({7, 8, 9, 12, 13, 14}, {2, 3}));
  check_equal(run(ops::slice(x, {4, 0}, {0, 5})), iota<T>({0, 5}));
  check_equal(run(ops::slice(constant<T>(g, {0, 3}), {0, 1}, {-1, 2})), iota<T>({0, 2}));
}

// ---------------------------------------------------------------------------------------------
// strided_slice

TEMPLATE_TEST_CASE("strided_slice follows python slices and TF's masks", "[array][strided_slice]",
                   float, double, std::int32_t, std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output x = constant<T>(g, {4, 5});
  const Output y = constant<T>(g, {2, 3, 4});
  struct Case {
    const char* numpy;
    Output out;
    std::vector<std::int64_t> want;
    Shape shape;
  };
  const std::vector<Case> cases = {
      {"x[1:3, ::2]",
       ops::strided_slice(x, {1, 0}, {3, 0}, {1, 2}, 0, 2),
       {5, 7, 9, 10, 12, 14},
       {2, 3}},
      {"x[::-1, -2:]",
       ops::strided_slice(x, {0, -2}, {0, 0}, {-1, 1}, 1, 3),
       {18, 19, 13, 14, 8, 9, 3, 4},
       {4, 2}},
      {"x[-1, 1:4:2]", ops::strided_slice(x, {-1, 1}, {0, 4}, {1, 2}, 0, 0, 1), {16, 18}, {2}},
      {"x[-10:10, 3:100]",
       ops::strided_slice(x, {-10, 3}, {10, 100}),
       {3, 4, 8, 9, 13, 14, 18, 19},
       {4, 2}},
      {"x[10:-10:-2, 4:0:-1]",
       ops::strided_slice(x, {10, 4}, {-10, 0}, {-2, -1}),
       {19, 18, 17, 16, 9, 8, 7, 6},
       {2, 4}},
      {"x[3:1, :]", ops::strided_slice(x, {3, 0}, {1, 0}, {}, 0, 2), {}, {0, 5}},
      {"x[1:3:-1, :]", ops::strided_slice(x, {1, 0}, {3, 0}, {-1, 1}, 0, 2), {}, {0, 5}},
      {"y[1:2]",
       ops::strided_slice(y, {1}, {2}),
       {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23},
       {1, 3, 4}},
      {"y[1, -1, 2]", ops::strided_slice(y, {1, -1, 2}, {0, 0, 0}, {}, 0, 0, 7), {22}, {}},
      {"y[:, 1]",
       ops::strided_slice(y, {0, 1}, {0, 2}, {}, 1, 1, 2),
       {4, 5, 6, 7, 16, 17, 18, 19},
       {2, 4}},
      {"y[:, ::-2, 1:-1]",
       ops::strided_slice(y, {0, 0, 1}, {0, 0, -1}, {1, -2, 1}, 3, 3),
       {9, 10, 1, 2, 21, 22, 13, 14},
       {2, 2, 2}},
  };
  for (const auto& c : cases) {
    INFO(c.numpy);
    CHECK(c.out.shape() == psflow::PartialShape::of_shape(c.shape));
    check_equal(run(c.out), picked<T>(c.want, c.shape));
  }
}

TEST_CASE("strided_slice with unknown dimensions and its errors", "[array][strided_slice]") {
  Graph g;
  const Output u = ops::placeholder(g, DType::int32, {-1, 5}, "u");
  const Output s = ops::strided_slice(u, {1, 0}, {0, -1}, {1, 2}, 0, 1);
  CHECK(s.shape() == psflow::PartialShape::of({-1, 2}));
  const Output row = ops::strided_slice(u, {-1}, {0}, {}, 0, 0, 1);
  CHECK(row.shape() == psflow::PartialShape::of({5}));
  const auto fed = iota<std::int32_t>({3, 5});
  check_equal(run(s, {{u, fed}}), picked<std::int32_t>({5, 7, 10, 12}, {2, 2}));
  check_equal(run(row, {{u, fed}}), picked<std::int32_t>({10, 11, 12, 13, 14}, {5}));
  CHECK_THROWS_WITH(run(ops::strided_slice(u, {3}, {0}, {}, 0, 0, 1), {{u, fed}}),
                    Contains("StridedSlice") && Contains("index 3 of axis 0 is out of bounds"));

  const Output x = ops::placeholder(g, DType::float32, {4, 5});
  CHECK_THROWS_AS(ops::strided_slice(x, {0, 0}, {1, 1}, {1, 0}), InvalidArgument);
  CHECK_THROWS_WITH(ops::strided_slice(x, {0, 0}, {1, 1}, {1, 0}),
                    Contains("StridedSlice") && Contains("strides[1] must be non-zero"));
  CHECK_THROWS_WITH(ops::strided_slice(x, {4}, {0}, {}, 0, 0, 1),
                    Contains("StridedSlice") && Contains("index 4 of axis 0 is out of bounds"));
  CHECK_THROWS_WITH(ops::strided_slice(x, {-5}, {0}, {}, 0, 0, 1),
                    Contains("index -5 of axis 0 is out of bounds"));
  CHECK_THROWS_WITH(ops::strided_slice(x, {0, 0}, {1}), Contains("need one entry each"));
  CHECK_THROWS_WITH(ops::strided_slice(x, {0, 0, 0}, {1, 1, 1}),
                    Contains("StridedSlice") && Contains("more than the input's rank 2"));
  CHECK_THROWS_WITH(ops::strided_slice(x, {0}, {1}, {-1}, 0, 0, 1),
                    Contains("shrink_axis_mask") && Contains("positive"));
}

// ---------------------------------------------------------------------------------------------
// stack and unstack

TEMPLATE_TEST_CASE("stack joins values along a new axis like np.stack", "[array][stack]", float,
                   double, std::int32_t, std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const std::vector<Output> v = {constant<T>(g, {2, 3}), constant<T>(g, {2, 3}, 6),
                                 constant<T>(g, {2, 3}, 12)};
  const Output s0 = ops::stack(v);
  CHECK(s0.op().type() == "Pack");
  CHECK(s0.shape() == psflow::PartialShape::of({3, 2, 3}));
  check_equal(run(s0), iota<T>({3, 2, 3}));
  check_equal(run(ops::stack(v, 1)),
              picked<T>({0, 1, 2, 6, 7, 8, 12, 13, 14, 3, 4, 5, 9, 10, 11, 15, 16, 17}, {2, 3, 3}));
  const std::vector<std::int64_t> last = {0, 6, 12, 1, 7,  13, 2, 8,  14,
                                          3, 9, 15, 4, 10, 16, 5, 11, 17};
  check_equal(run(ops::stack(v, 2)), picked<T>(last, {2, 3, 3}));
  check_equal(run(ops::stack(v, -1)), picked<T>(last, {2, 3, 3}));
  check_equal(run(ops::stack(v, -3)), iota<T>({3, 2, 3}));
  // Scalars, one value, empty values.
  check_equal(run(ops::stack({constant<T>(g, {}), constant<T>(g, {}, 1)})), iota<T>({2}));
  check_equal(run(ops::stack({constant<T>(g, {2})}, 1)), iota<T>({2, 1}));
  check_equal(run(ops::stack({constant<T>(g, {0, 2}), constant<T>(g, {0, 2})}, 1)),
              iota<T>({0, 2, 2}));
}

TEMPLATE_TEST_CASE("unstack splits an axis into its slices", "[array][unstack]", float, double,
                   std::int32_t, std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output x = constant<T>(g, {2, 3, 4});
  const auto mid = ops::unstack(x, 1);
  REQUIRE(mid.size() == 3);
  CHECK(mid[0].op().type() == "Unpack");
  CHECK(mid[0].shape() == psflow::PartialShape::of({2, 4}));
  const auto got = run(mid);
  check_equal(got[0], picked<T>({0, 1, 2, 3, 12, 13, 14, 15}, {2, 4}));
  check_equal(got[1], picked<T>({4, 5, 6, 7, 16, 17, 18, 19}, {2, 4}));
  check_equal(got[2], picked<T>({8, 9, 10, 11, 20, 21, 22, 23}, {2, 4}));
  const auto last = run(ops::unstack(x, -1));
  REQUIRE(last.size() == 4);
  check_equal(last[0], picked<T>({0, 4, 8, 12, 16, 20}, {2, 3}));
  check_equal(last[3], picked<T>({3, 7, 11, 15, 19, 23}, {2, 3}));
  const auto first = run(ops::unstack(x));
  check_equal(first[1], iota<T>({3, 4}, 12));
  const auto empty = run(ops::unstack(constant<T>(g, {0, 3}), 1));
  REQUIRE(empty.size() == 3);
  check_equal(empty[2], iota<T>({0}));
  check_equal(run(ops::unstack(constant<T>(g, {2}))[1]), iota<T>({}, 1));
}

TEST_CASE("stack and unstack errors name the op and the shapes", "[array][stack]") {
  Graph g;
  const Output a = ops::placeholder(g, DType::float32, {2, 3}, "a");
  const Output b = ops::placeholder(g, DType::float32, {3, 2}, "b");
  const Output c = ops::placeholder(g, DType::int32, {2, 3}, "c");
  CHECK_THROWS_AS(ops::stack({a, b}), InvalidArgument);
  CHECK_THROWS_WITH(ops::stack({a, b}), Contains("Pack") && Contains("one shape") &&
                                            Contains("[2,3]") && Contains("[3,2]"));
  CHECK_THROWS_WITH(ops::stack({a, c}), Contains("Pack") && Contains("same dtype"));
  CHECK_THROWS_WITH(ops::stack({a, a}, 3), Contains("Pack") && Contains("axis 3 is out of range"));
  CHECK_THROWS_WITH(ops::stack({a, a}, -4), Contains("axis -4 is out of range"));
  CHECK_THROWS_WITH(ops::stack({}), Contains("stack") && Contains("no values"));

  const Output u = ops::placeholder(g, DType::float32, {-1, 3}, "u");
  CHECK(ops::stack({u, a}).shape() == psflow::PartialShape::of({2, 2, 3}));
  CHECK_THROWS_AS(ops::unstack(u), InvalidArgument);
  CHECK_THROWS_WITH(ops::unstack(u), Contains("Unpack") && Contains("axis 0") &&
                                         Contains("unknown") && Contains("known when the graph"));
  CHECK(ops::unstack(u, 1).size() == 3);
  CHECK_THROWS_WITH(ops::unstack(a, 2), Contains("Unpack") && Contains("axis 2 is out of range"));
}

// ---------------------------------------------------------------------------------------------
// tile, expand_dims, squeeze

TEMPLATE_TEST_CASE("tile repeats like np.tile", "[array][tile]", float, double, std::int32_t,
                   std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output x = constant<T>(g, {2, 3});
  check_equal(run(ops::tile(x, {2, 1})), picked<T>({0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, {4, 3}));
  check_equal(run(ops::tile(x, {1, 3})),
              picked<T>({0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 3, 4, 5}, {2, 9}));
  const Output t22 = ops::tile(x, {2, 2});
  CHECK(t22.shape() == psflow::PartialShape::of({4, 6}));
  check_equal(
      run(t22),
      picked<T>({0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, {4, 6}));
  check_equal(run(ops::tile(x, {0, 2})), iota<T>({0, 6}));
  check_equal(run(ops::tile(constant<T>(g, {}), {})), iota<T>({}));
  check_equal(run(ops::tile(constant<T>(g, {0, 2}), {3, 1})), iota<T>({0, 2}));
}

TEST_CASE("tile rejects negative multiples and a wrong count", "[array][tile]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {2, 3});
  CHECK_THROWS_AS(ops::tile(x, {1, -1}), InvalidArgument);
  CHECK_THROWS_WITH(ops::tile(x, {1, -1}),
                    Contains("Tile") && Contains("[1,-1]") && Contains("non-negative"));
  CHECK_THROWS_WITH(ops::tile(x, {2}), Contains("Tile") && Contains("one entry per axis"));
  CHECK(ops::tile(ops::placeholder(g, DType::float32, {-1, 3}), {2, 2}).shape() ==
        psflow::PartialShape::of({-1, 6}));
}

TEMPLATE_TEST_CASE("expand_dims and squeeze add and remove size-1 axes", "[array][squeeze]", float,
                   double, std::int32_t, std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output x = constant<T>(g, {2, 3});
  const std::vector<std::pair<int, Shape>> expand = {
      {0, {1, 2, 3}}, {1, {2, 1, 3}}, {2, {2, 3, 1}}, {-1, {2, 3, 1}}, {-3, {1, 2, 3}}};
  for (const auto& [axis, shape] : expand) {
    INFO("axis " << axis);
    const Output e = ops::expand_dims(x, axis);
    CHECK(e.shape() == psflow::PartialShape::of_shape(shape));
    check_equal(run(e), iota<T>(shape));
  }
  check_equal(run(ops::expand_dims(constant<T>(g, {}), 0)), iota<T>({1}));
  check_equal(run(ops::expand_dims(constant<T>(g, {0}), -1)), iota<T>({0, 1}));

  const Output y = constant<T>(g, {1, 2, 1, 3});
  const std::vector<std::pair<std::vector<int>, Shape>> squeeze = {
      {{}, {2, 3}}, {{0}, {2, 1, 3}}, {{-2}, {1, 2, 3}}, {{0, 2}, {2, 3}}};
  for (const auto& [axes, shape] : squeeze) {
    const Output s = ops::squeeze(y, axes);
    CHECK(s.shape() == psflow::PartialShape::of_shape(shape));
    check_equal(run(s), iota<T>(shape));
  }
  check_equal(run(ops::squeeze(constant<T>(g, {1, 1}))), iota<T>({}));
  check_equal(run(ops::squeeze(constant<T>(g, {0, 1}))), iota<T>({0}));
}

TEST_CASE("expand_dims and squeeze errors name the axis and the input", "[array][squeeze]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {1, 2, 3}, "x");
  CHECK_THROWS_AS(ops::expand_dims(x, 4), InvalidArgument);
  CHECK_THROWS_WITH(ops::expand_dims(x, 4),
                    Contains("ExpandDims") && Contains("axis 4") && Contains("[-4, 3]"));
  CHECK_THROWS_WITH(ops::expand_dims(x, -5), Contains("ExpandDims") && Contains("axis -5"));
  CHECK_THROWS_AS(ops::squeeze(x, {1}), InvalidArgument);
  CHECK_THROWS_WITH(ops::squeeze(x, {1}), Contains("Squeeze") &&
                                              Contains("cannot squeeze axis 1") &&
                                              Contains("its size is 2, not 1"));
  CHECK_THROWS_WITH(ops::squeeze(x, {3}),
                    Contains("Squeeze") && Contains("axis 3 is out of range"));

  // Unknown dimensions: no squeeze axes gives an unknown shape; the kernel checks the sizes.
  const Output u = ops::placeholder(g, DType::float32, {-1, 1, 3}, "u");
  CHECK_FALSE(ops::squeeze(u).shape().known);
  CHECK(ops::squeeze(u, {0}).shape() == psflow::PartialShape::of({1, 3}));
  CHECK(ops::expand_dims(u, -1).shape() == psflow::PartialShape::of({-1, 1, 3, 1}));
  const Tensor one = Tensor::from_vector<float>({1, 2, 3}, {1, 1, 3});
  check_equal(run(ops::squeeze(u), {{u, one}}), Tensor::from_vector<float>({1, 2, 3}));
  const Tensor two = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 1, 3});
  CHECK_THROWS_WITH(run(ops::squeeze(u, {0}), {{u, two}}),
                    Contains("Squeeze") && Contains("cannot squeeze axis 0"));
}

// ---------------------------------------------------------------------------------------------
// one_hot

TEST_CASE("one_hot gives TF's rows, all off for indices outside 0 to depth - 1",
          "[array][one_hot]") {
  Graph g;
  const Output i32 = ops::constant(g, Tensor::from_vector<std::int32_t>({0, 2, -1, 3}));
  const Output rows = ops::one_hot(i32, 3);
  CHECK(rows.dtype() == DType::float32);
  CHECK(rows.shape() == psflow::PartialShape::of({4, 3}));
  check_equal(run(rows), Tensor::from_vector<float>({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {4, 3}));

  // np: on where np.arange(3)[:, None, None] == idx, along axis 0.
  const Output i64 = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 0, 2, 5}, {2, 2}));
  const Output axis0 = ops::one_hot(i64, 3, 5, -1, 0, DType::int64);
  CHECK(axis0.shape() == psflow::PartialShape::of({3, 2, 2}));
  check_equal(run(axis0), Tensor::from_vector<std::int64_t>(
                              {-1, 5, -1, -1, 5, -1, -1, -1, -1, -1, 5, -1}, {3, 2, 2}));
  const Output axis1 = ops::one_hot(i64, 3, 1, 0, 1, DType::int32);
  CHECK(axis1.shape() == psflow::PartialShape::of({2, 3, 2}));
  check_equal(run(axis1),
              Tensor::from_vector<std::int32_t>({0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0}, {2, 3, 2}));
  check_equal(
      run(ops::one_hot(i64, 2, 1, 0, -1, DType::boolean)),
      Tensor::from_vector<bool>({false, true, true, false, false, false, false, false}, {2, 2, 2}));
  check_equal(run(ops::one_hot(i32, 2, 0.5, -0.5, -1, DType::float64)),
              Tensor::from_vector<double>({0.5, -0.5, -0.5, -0.5, -0.5, -0.5, -0.5, -0.5}, {4, 2}));
  check_equal(run(ops::one_hot(i32, 0)), Tensor(DType::float32, {4, 0}));
  const Output scalar = ops::constant(g, Tensor(std::int32_t{1}));
  check_equal(run(ops::one_hot(scalar, 3)), Tensor::from_vector<float>({0, 1, 0}));
  const Output none = ops::constant(g, Tensor(DType::int32, {0}));
  check_equal(run(ops::one_hot(none, 3)), Tensor(DType::float32, {0, 3}));
}

TEST_CASE("one_hot rejects a negative depth, a bad axis and non-integer indices",
          "[array][one_hot]") {
  Graph g;
  const Output i = ops::placeholder(g, DType::int32, {4}, "i");
  CHECK_THROWS_AS(ops::one_hot(i, -1), InvalidArgument);
  CHECK_THROWS_WITH(ops::one_hot(i, -1),
                    Contains("OneHot") && Contains("depth must be non-negative"));
  CHECK_THROWS_WITH(ops::one_hot(i, 3, 1, 0, 2), Contains("OneHot") && Contains("axis 2"));
  CHECK_THROWS_WITH(ops::one_hot(i, 3, 1, 0, -2), Contains("OneHot") && Contains("axis -2"));
  const Output f = ops::placeholder(g, DType::float32, {4}, "f");
  CHECK_THROWS_WITH(ops::one_hot(f, 3), Contains("OneHot") && Contains("int32 or int64"));
  // Not differentiable: the walk stops there.
  const Output y = ops::one_hot(i, 3);
  const auto grads = psflow::train::gradients(ops::reduce_sum(y), {i});
  CHECK(grads[0].op().type() == "ZerosLike");
}

// ---------------------------------------------------------------------------------------------
// concat, fill, range, shape and size as TF1

TEMPLATE_TEST_CASE("concat takes a negative axis and empty values as TF1", "[array][concat]", float,
                   double, std::int32_t, std::int64_t, bool) {
  using T = TestType;
  Graph g;
  const Output a = constant<T>(g, {2, 1});
  const Output b = constant<T>(g, {2, 3}, 2);
  const Output c = ops::concat({a, b}, -1);
  CHECK(c.shape() == psflow::PartialShape::of({2, 4}));
  check_equal(run(c), picked<T>({0, 2, 3, 4, 1, 5, 6, 7}, {2, 4}));
  check_equal(run(ops::concat({constant<T>(g, {0, 3}), constant<T>(g, {2, 3})}, 0)),
              iota<T>({2, 3}));
  check_equal(run(ops::concat({constant<T>(g, {2, 0}), constant<T>(g, {2, 3})}, -1)),
              iota<T>({2, 3}));
  check_equal(run(ops::concat({constant<T>(g, {0, 3}), constant<T>(g, {0, 3})}, -2)),
              iota<T>({0, 3}));
  CHECK_THROWS_WITH(ops::concat({a, b}, -3), Contains("ConcatV2") && Contains("axis -3"));
  CHECK_THROWS_WITH(ops::concat({a, b}, 2), Contains("ConcatV2") && Contains("axis 2"));
}

TEMPLATE_TEST_CASE("fill, zeros and ones for every dtype, empty shapes included", "[array][fill]",
                   float, double, std::int32_t, std::int64_t, bool) {
  using T = TestType;
  const DType dt = psflow::dtype_of<T>();
  Graph g;
  check_equal(run(ops::fill(g, dt, {2, 2}, 1)), Tensor::filled(static_cast<T>(1), {2, 2}));
  check_equal(run(ops::zeros(g, dt, {0, 3})), Tensor(dt, {0, 3}));
  check_equal(run(ops::ones(g, dt, {})), Tensor(static_cast<T>(1)));
  CHECK(ops::zeros(g, dt, {2, 0}).shape() == psflow::PartialShape::of({2, 0}));
}

TEST_CASE("range counts like tf.range for integers and floats", "[array][range]") {
  Graph g;
  auto range_of = [&](auto start, auto limit, auto delta) {
    return run(ops::range(ops::constant(g, Tensor(start)), ops::constant(g, Tensor(limit)),
                          ops::constant(g, Tensor(delta))));
  };
  check_equal(range_of(0, 10, 3), Tensor::from_vector<std::int32_t>({0, 3, 6, 9}));
  check_equal(range_of(std::int64_t{5}, std::int64_t{1}, std::int64_t{-2}),
              Tensor::from_vector<std::int64_t>({5, 3}));
  check_equal(range_of(3, 3, 1), Tensor(DType::int32, {0}));
  check_equal(range_of(0.0f, 1.0f, 0.25f), Tensor::from_vector<float>({0, 0.25f, 0.5f, 0.75f}));
  // np.arange(1, 0, -0.3): 4 values.
  const Tensor down = range_of(1.0, 0.0, -0.3);
  REQUIRE(down.shape() == Shape{4});
  const std::vector<double> want = {1.0, 0.7, 0.4, 0.1};
  for (std::size_t i = 0; i < 4; ++i) CHECK(down.data<double>()[i] == Approx(want[i]));
  CHECK_THROWS_WITH(range_of(0, 5, 0), Contains("delta must not be 0"));
  // TF (unlike numpy) refuses a start past the limit in delta's direction.
  CHECK_THROWS_AS(range_of(5, 1, 1), InvalidArgument);
  CHECK_THROWS_WITH(range_of(5, 1, 1), Contains("start 5 > limit 1"));
  CHECK_THROWS_WITH(range_of(1.0, 5.0, -1.0), Contains("< limit"));
  CHECK_THROWS_WITH(ops::range(ops::constant(g, Tensor(true)), ops::constant(g, Tensor(true)),
                               ops::constant(g, Tensor(true))),
                    Contains("must be numbers"));
  CHECK_THROWS_WITH(ops::range(ops::constant(g, Tensor(0)), ops::constant(g, Tensor(1.0)),
                               ops::constant(g, Tensor(1))),
                    Contains("same dtype"));
}

TEST_CASE("shape and size of scalars, empty tensors and unknown dimensions", "[array][shape]") {
  Graph g;
  check_equal(run(ops::shape(constant<bool>(g, {2, 0, 3}))),
              Tensor::from_vector<std::int64_t>({2, 0, 3}));
  check_equal(run(ops::shape(constant<float>(g, {}))), Tensor(DType::int64, {0}));
  check_equal(run(ops::size(constant<float>(g, {2, 0, 3}))), Tensor(std::int64_t{0}));
  check_equal(run(ops::size(constant<std::int32_t>(g, {}))), Tensor(std::int64_t{1}));
  const Output u = ops::placeholder(g, DType::float32, {-1, 3}, "u");
  CHECK(ops::shape(u).shape() == psflow::PartialShape::of({2}));
  const Tensor fed = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  check_equal(run(ops::shape(u), {{u, fed}}), Tensor::from_vector<std::int64_t>({2, 3}));
  check_equal(run(ops::size(u), {{u, fed}}), Tensor(std::int64_t{6}));
}

// ---------------------------------------------------------------------------------------------
// Gradients against central differences

TEST_CASE("Transpose gradient", "[array][gradients]") {
  check_unary_gradient([](Output x) { return ops::transpose(x, {2, 0, 1}); }, {2, 3, 4});
  check_unary_gradient([](Output x) { return ops::transpose(x); }, {2, 3, 4});
  check_unary_gradient(
      [](Output x) {
        return ops::transpose(x, {1, 0, 2});
      },
      {2, 3, 4}, Dims{-1, 3, -1});
}

TEST_CASE("Split and SplitV gradients, with a piece left unused", "[array][gradients]") {
  check_unary_gradient(
      [](Output x) {
        auto p = ops::split(x, 3, -1);  // p[1] unused: its gradient is zeros
        return ops::concat({p[2], p[0]}, 1);
      },
      {2, 6});
  check_unary_gradient(
      [](Output x) {
        auto p = ops::split(x, std::vector<std::int64_t>{1, -1, 2}, 0);
        return ops::concat({p[1], p[0]}, 0);
      },
      {5, 3});
  check_unary_gradient([](Output x) { return ops::split(x, 2, 1)[1]; }, {3, 4}, Dims{-1, 4});
}

TEST_CASE("Slice and Pad gradients, with known and unknown shapes", "[array][gradients]") {
  check_unary_gradient([](Output x) { return ops::slice(x, {1, 0}, {2, -1}); }, {4, 3});
  check_unary_gradient(
      [](Output x) {
        return ops::slice(x, {1, 1}, {-1, 2});
      },
      {4, 3}, Dims{-1, -1});
  check_unary_gradient([](Output x) { return ops::pad(x, {{1, 2}, {0, 1}}); }, {2, 3});
  check_unary_gradient([](Output x) { return ops::pad(x, {{1, 0}, {2, 1}}); }, {2, 3}, Dims{-1, 3});
}

TEST_CASE("StridedSlice gradient, and the gradient of its gradient", "[array][gradients]") {
  check_unary_gradient(
      [](Output x) {
        return ops::strided_slice(x, {1, 0}, {3, 0}, {1, 2}, 0, 2);
      },
      {4, 5});
  check_unary_gradient(
      [](Output x) {
        return ops::strided_slice(x, {0, -2}, {0, 0}, {-1, 1}, 1, 3);
      },
      {4, 5});
  check_unary_gradient(
      [](Output x) {
        return ops::strided_slice(x, {-1, 1}, {0, 4}, {1, 2}, 0, 0, 1);
      },
      {4, 5}, Dims{-1, 5});
  check_unary_gradient(
      [](Output x) {
        return ops::strided_slice(x, {0, 0, 1}, {0, 0, -1}, {1, -2, 1}, 3, 3);
      },
      {2, 3, 4});
  // StridedSliceGrad's own gradient is the slice of the incoming gradient.
  check_unary_gradient(
      [](Output dy) {
        const Output like = ops::zeros(dy.graph(), DType::float64, {4, 5});
        return ops::strided_slice_grad(like, dy, {1, 0}, {3, 0}, {1, 2}, 0, 2);
      },
      {2, 3});
}

TEST_CASE("Pack and Unpack gradients, with an output left unused", "[array][gradients]") {
  Random r(5);
  for (int axis : {0, 1, -1}) {
    DYNAMIC_SECTION("stack axis " << axis) {
      check_gradients(
          [&](Graph&, const std::vector<Output>& in) {
            return weighted(ops::stack({in[0], in[1], in[2]}, axis));
          },
          {Arg{r.array({2, 3})}, Arg{r.array({2, 3})}, Arg{r.array({2, 3}), Dims{-1, 3}}});
    }
  }
  check_unary_gradient(
      [](Output x) {
        auto parts = ops::unstack(x, 1);  // parts[1] unused
        return ops::stack({parts[2], parts[0]}, 0);
      },
      {2, 3, 2});
  check_unary_gradient([](Output x) { return ops::unstack(x, -1)[0]; }, {2, 3}, Dims{-1, 3});
}

TEST_CASE("Tile gradient sums the tiles back", "[array][gradients]") {
  check_unary_gradient([](Output x) { return ops::tile(x, {2, 3}); }, {2, 3});
  check_unary_gradient([](Output x) { return ops::tile(x, {1, 2, 1}); }, {2, 1, 3});
  check_unary_gradient([](Output x) { return ops::tile(x, {3, 1}); }, {2, 3}, Dims{-1, 3});
  check_unary_gradient([](Output x) { return ops::tile(x, {1, 1}); }, {2, 3});
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {-1, -1});
  const Output y = ops::tile(x, {2, 2});
  CHECK_THROWS_WITH(psflow::train::gradients(ops::reduce_sum(y), {x}),
                    Contains("Tile") && Contains("must be known when the graph is built"));
}

TEST_CASE("ExpandDims, Squeeze and ConcatV2 (negative axis) gradients", "[array][gradients]") {
  check_unary_gradient([](Output x) { return ops::expand_dims(x, -1); }, {2, 3});
  check_unary_gradient([](Output x) { return ops::expand_dims(x, 1); }, {2, 3}, Dims{-1, 3});
  check_unary_gradient([](Output x) { return ops::squeeze(x); }, {2, 1, 3});
  check_unary_gradient([](Output x) { return ops::squeeze(x, {-2}); }, {2, 1, 3}, Dims{-1, 1, -1});
  Random r(9);
  check_gradients(
      [](Graph&, const std::vector<Output>& in) {
        return weighted(ops::concat({in[0], in[1]}, -1));
      },
      {Arg{r.array({2, 1})}, Arg{r.array({2, 3})}});
}

}  // namespace array_ops_test
