// Logic ops and the math additions floor, pow, cos and sin: values against numpy (broadcasting,
// every dtype each kernel accepts, empty tensors), build-time and run-time errors, and the
// gradients of Pow, Cos, Sin, Select and Cast.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "psflow/runtime.hpp"
#include "psflow/train/gradients.hpp"
#include "support/numeric_gradient.hpp"

namespace logic_ops_test {

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

// A tensor of `dtype` and `shape` holding `values` (converted from double; bool: nonzero).
inline Tensor make(DType dtype, const std::vector<double>& values, Shape shape) {
  return psflow::visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> v;
    for (double d : values) {
      if constexpr (std::is_same_v<T, bool>)
        v.push_back(d != 0);
      else
        v.push_back(static_cast<T>(d));
    }
    return Tensor::from_vector(v, std::move(shape));
  });
}
inline Tensor make(DType dtype, const std::vector<double>& values) {
  return make(dtype, values, Shape{values.size()});
}

// Every element as a double (bool: 0 or 1).
inline std::vector<double> doubles(const Tensor& t) {
  return psflow::visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<double> out;
    for (T v : t.values<T>()) out.push_back(static_cast<double>(v));
    return out;
  });
}

inline Output constant(Graph& g, const Tensor& t) { return ops::constant(g, t); }

// Runs `y` (no feeds) and returns its value.
inline Tensor run(Graph& g, Output y, const FeedMap& feeds = {}) {
  Session sess(g);
  return sess.run({y}, feeds)[0];
}

inline const DType all_dtypes[] = {DType::float32, DType::float64, DType::int32, DType::int64,
                                   DType::boolean};
inline const DType number_dtypes[] = {DType::float32, DType::float64, DType::int32, DType::int64};

// ---------------------------------------------------------------------------------------------
// Comparisons

TEST_CASE("comparisons broadcast and give bool tensors for every number dtype") {
  // numpy: a = [[1,2,3],[4,5,6]], b = [3,5,1]; np.less(a, b) etc.
  const std::vector<std::pair<const char*, std::vector<double>>> expected = {
      {"Equal", {0, 0, 0, 0, 1, 0}},   {"NotEqual", {1, 1, 1, 1, 0, 1}},
      {"Less", {1, 1, 0, 0, 0, 0}},    {"LessEqual", {1, 1, 0, 0, 1, 0}},
      {"Greater", {0, 0, 1, 1, 0, 1}}, {"GreaterEqual", {0, 0, 1, 1, 1, 1}}};
  for (DType dtype : number_dtypes) {
    INFO("dtype " << psflow::dtype_name(dtype));
    Graph g;
    const Output a = constant(g, make(dtype, {1, 2, 3, 4, 5, 6}, {2, 3}));
    const Output b = constant(g, make(dtype, {3, 5, 1}));
    for (const auto& [type, want] : expected) {
      INFO("op " << type);
      const std::string t = type;
      Output y = t == "Equal"       ? ops::equal(a, b)
                 : t == "NotEqual"  ? ops::not_equal(a, b)
                 : t == "Less"      ? ops::less(a, b)
                 : t == "LessEqual" ? ops::less_equal(a, b)
                 : t == "Greater"   ? ops::greater(a, b)
                                    : ops::greater_equal(a, b);
      CHECK(y.op().type() == t);
      CHECK(y.dtype() == DType::boolean);
      CHECK(y.shape() == PartialShape::of({2, 3}));
      const Tensor got = run(g, y);
      CHECK(got.dtype() == DType::boolean);
      CHECK(got.shape() == Shape{2, 3});
      CHECK(doubles(got) == want);
      // The other way round: b against a ([3] against [2,3]) swaps less and greater.
      Output z = t == "Less" ? ops::greater(b, a) : t == "Greater" ? ops::less(b, a) : y;
      CHECK(doubles(run(g, z)) == want);
    }
  }
}

TEST_CASE("comparison operators take Outputs and numbers") {
  Graph g;
  const Output x = constant(g, make(DType::float32, {-1, 0.5, 2}));
  CHECK(doubles(run(g, x < 0.5)) == std::vector<double>{1, 0, 0});
  CHECK(doubles(run(g, x <= 0.5)) == std::vector<double>{1, 1, 0});
  CHECK(doubles(run(g, x > 0.5)) == std::vector<double>{0, 0, 1});
  CHECK(doubles(run(g, x >= 0.5)) == std::vector<double>{0, 1, 1});
  CHECK(doubles(run(g, 0.5 < x)) == std::vector<double>{0, 0, 1});
  CHECK(doubles(run(g, 0.5 >= x)) == std::vector<double>{1, 1, 0});
  CHECK(doubles(run(g, x < x)) == std::vector<double>{0, 0, 0});
  CHECK((x < 0.5).op().type() == "Less");
  CHECK((x >= x).op().type() == "GreaterEqual");
}

TEST_CASE("equal and not_equal accept bool tensors and treat NaN as unequal") {
  Graph g;
  const Output p = constant(g, make(DType::boolean, {1, 0, 0, 1}, {2, 2}));
  const Output q = constant(g, make(DType::boolean, {1, 0}));
  CHECK(doubles(run(g, ops::equal(p, q))) == std::vector<double>{1, 1, 0, 0});
  CHECK(doubles(run(g, ops::not_equal(p, q))) == std::vector<double>{0, 0, 1, 1});

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Output a = constant(g, make(DType::float64, {nan, 1, nan}));
  const Output b = constant(g, make(DType::float64, {nan, 1, 0}));
  CHECK(doubles(run(g, ops::equal(a, b))) == std::vector<double>{0, 1, 0});
  CHECK(doubles(run(g, ops::not_equal(a, b))) == std::vector<double>{1, 0, 1});
  CHECK(doubles(run(g, ops::less(a, b))) == std::vector<double>{0, 0, 0});
  CHECK(doubles(run(g, ops::greater_equal(a, b))) == std::vector<double>{0, 1, 0});
}

TEST_CASE("comparisons of scalars and of empty tensors") {
  Graph g;
  const Output s = constant(g, Tensor(std::int64_t{3}));
  const Output v = constant(g, make(DType::int64, {1, 3, 5}));
  CHECK(doubles(run(g, ops::less(s, v))) == std::vector<double>{0, 0, 1});
  const Tensor scalar = run(g, ops::equal(s, s));
  CHECK(scalar.shape() == Shape{});
  CHECK(scalar.scalar<bool>());

  const Output empty = constant(g, make(DType::float32, {}, {0, 3}));
  const Output row = constant(g, make(DType::float32, {1, 2, 3}));
  const Output y = ops::greater(empty, row);
  CHECK(y.shape() == PartialShape::of({0, 3}));
  const Tensor got = run(g, y);
  CHECK(got.dtype() == DType::boolean);
  CHECK(got.shape() == Shape{0, 3});
}

TEST_CASE("comparisons reject mismatched dtypes, bool order comparisons and bad shapes") {
  Graph g;
  const Output f = constant(g, make(DType::float32, {1, 2, 3}));
  const Output i = constant(g, make(DType::int32, {1, 2, 3}));
  const Output b = constant(g, make(DType::boolean, {1, 0, 1}));
  const Output m = constant(g, make(DType::float32, {1, 2, 3, 4}, {2, 2}));
  CHECK_THROWS_AS(ops::equal(f, i), InvalidArgument);
  CHECK_THROWS_WITH(ops::equal(f, i), Contains("Equal") && Contains("float32") &&
                                          Contains("int32") && Contains("same dtype"));
  CHECK_THROWS_WITH(ops::less(i, f), Contains("Less") && Contains("int32") && Contains("float32"));
  CHECK_THROWS_WITH(ops::greater_equal(f, b),
                    Contains("GreaterEqual") && Contains("float32") && Contains("bool"));
  CHECK_THROWS_WITH(ops::less(b, b), Contains("Less") && Contains("number") && Contains("bool"));
  CHECK_THROWS_WITH(ops::not_equal(f, m), Contains("NotEqual") && Contains("broadcast") &&
                                              Contains("[3]") && Contains("[2,2]"));
}

TEST_CASE("a comparison of shapes that only meet at run time fails naming the node") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {-1}, "x");
  const Output y = ops::placeholder(g, DType::float32, {-1}, "y");
  const Output z = ops::less(x, y, "cmp");
  Session sess(g);
  CHECK_THROWS_WITH(
      sess.run({z}, {{x, make(DType::float32, {1, 2})}, {y, make(DType::float32, {1, 2, 3})}}),
      Contains("cmp") && Contains("broadcast"));
}

// ---------------------------------------------------------------------------------------------
// Logical connectives

TEST_CASE("logical_and, logical_or and logical_not on bool tensors, with broadcasting") {
  Graph g;
  const Output p = constant(g, make(DType::boolean, {1, 1, 0, 0}, {2, 2}));
  const Output q = constant(g, make(DType::boolean, {1, 0}));
  CHECK(doubles(run(g, ops::logical_and(p, q))) == std::vector<double>{1, 0, 0, 0});
  CHECK(doubles(run(g, ops::logical_or(p, q))) == std::vector<double>{1, 1, 1, 0});
  CHECK(doubles(run(g, ops::logical_not(p))) == std::vector<double>{0, 0, 1, 1});
  CHECK(doubles(run(g, p & q)) == std::vector<double>{1, 0, 0, 0});
  CHECK(doubles(run(g, p | q)) == std::vector<double>{1, 1, 1, 0});
  CHECK(doubles(run(g, ~q)) == std::vector<double>{0, 1});
  CHECK(ops::logical_and(p, q).shape() == PartialShape::of({2, 2}));
  CHECK(ops::logical_not(p).dtype() == DType::boolean);

  const Output t = constant(g, Tensor(true));
  CHECK(doubles(run(g, ops::logical_and(t, p))) == std::vector<double>{1, 1, 0, 0});
  const Output empty = constant(g, make(DType::boolean, {}, {0}));
  CHECK(run(g, ops::logical_or(empty, t)).shape() == Shape{0});
  CHECK(run(g, ops::logical_not(empty)).shape() == Shape{0});
}

TEST_CASE("logical ops reject non-bool inputs") {
  Graph g;
  const Output p = constant(g, make(DType::boolean, {1, 0}));
  const Output f = constant(g, make(DType::float32, {1, 0}));
  CHECK_THROWS_WITH(ops::logical_and(p, f),
                    Contains("LogicalAnd") && Contains("bool") && Contains("float32"));
  CHECK_THROWS_WITH(ops::logical_or(f, p), Contains("LogicalOr") && Contains("float32"));
  CHECK_THROWS_WITH(ops::logical_not(f), Contains("LogicalNot") && Contains("float32"));
  const Output b3 = constant(g, make(DType::boolean, {1, 0, 1}));
  CHECK_THROWS_WITH(ops::logical_and(p, b3), Contains("LogicalAnd") && Contains("broadcast"));
}

// ---------------------------------------------------------------------------------------------
// where (Select)

TEST_CASE("where picks element-wise, whole rows, or whole tensors, for every dtype") {
  for (DType dtype : all_dtypes) {
    INFO("dtype " << psflow::dtype_name(dtype));
    Graph g;
    const Output x = constant(g, make(dtype, {1, 2, 3, 4, 5, 6}, {3, 2}));
    const Output y = constant(g, make(dtype, {0, -1, 0, -1, 0, -1}, {3, 2}));
    const Output same = constant(g, make(DType::boolean, {1, 0, 0, 1, 1, 1}, {3, 2}));
    const Output rows = constant(g, make(DType::boolean, {0, 1, 0}));
    const Output no = constant(g, Tensor(false));

    const Output e = ops::where(same, x, y);
    CHECK(e.op().type() == "Select");
    CHECK(e.dtype() == dtype);
    CHECK(e.shape() == PartialShape::of({3, 2}));
    const Tensor got = run(g, e);
    CHECK(got.dtype() == dtype);
    CHECK(got.shape() == Shape{3, 2});
    const std::vector<double> elementwise = dtype == DType::boolean
                                                ? std::vector<double>{1, 1, 0, 1, 1, 1}
                                                : std::vector<double>{1, -1, 0, 4, 5, 6};
    CHECK(doubles(got) == elementwise);

    const std::vector<double> by_rows = dtype == DType::boolean
                                            ? std::vector<double>{0, 1, 1, 1, 0, 1}
                                            : std::vector<double>{0, -1, 3, 4, 0, -1};
    CHECK(doubles(run(g, ops::where(rows, x, y))) == by_rows);
    CHECK(doubles(run(g, ops::where(no, x, y))) == doubles(run(g, y)));
  }
}

TEST_CASE("where on vectors, on rank-3 rows, and on empty tensors") {
  Graph g;
  const Output c = constant(g, make(DType::boolean, {1, 0, 1}));
  const Output x = constant(g, make(DType::int32, {1, 2, 3}));
  const Output y = constant(g, make(DType::int32, {7, 8, 9}));
  CHECK(doubles(run(g, ops::where(c, x, y))) == std::vector<double>{1, 8, 3});

  const Output c2 = constant(g, make(DType::boolean, {0, 1}));
  const Output x3 = constant(g, make(DType::float64, {1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}));
  const Output y3 = constant(g, make(DType::float64, {0, 0, 0, 0, 0, 0, 0, 0}, {2, 2, 2}));
  CHECK(doubles(run(g, ops::where(c2, x3, y3))) == std::vector<double>{0, 0, 0, 0, 5, 6, 7, 8});

  const Output ce = constant(g, make(DType::boolean, {}, {0}));
  const Output xe = constant(g, make(DType::float32, {}, {0, 4}));
  const Output ye = constant(g, make(DType::float32, {}, {0, 4}));
  const Output e = ops::where(ce, xe, ye);
  CHECK(e.shape() == PartialShape::of({0, 4}));
  CHECK(run(g, e).shape() == Shape{0, 4});
}

TEST_CASE("where rejects a non-bool cond, mismatched x and y, and a cond of another shape") {
  Graph g;
  const Output c = constant(g, make(DType::boolean, {1, 0, 1, 0, 1, 0}, {3, 2}));
  const Output x = constant(g, make(DType::float32, {1, 2, 3, 4, 5, 6}, {3, 2}));
  const Output y = constant(g, make(DType::float32, {1, 2, 3, 4, 5, 6}, {3, 2}));
  const Output yi = constant(g, make(DType::int32, {1, 2, 3, 4, 5, 6}, {3, 2}));
  const Output y23 = constant(g, make(DType::float32, {1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK_THROWS_WITH(ops::where(x, x, y), Contains("Select") && Contains("bool"));
  CHECK_THROWS_WITH(ops::where(c, x, yi),
                    Contains("Select") && Contains("float32") && Contains("int32"));
  CHECK_THROWS_WITH(ops::where(c, x, y23),
                    Contains("Select") && Contains("[3,2]") && Contains("[2,3]"));
  const Output c2 = constant(g, make(DType::boolean, {1, 0}));
  CHECK_THROWS_WITH(ops::where(c2, x, y),
                    Contains("Select") && Contains("bool[2]") && Contains("first dimension"));
  const Output c23 = constant(g, make(DType::boolean, {1, 0, 1, 0, 1, 0}, {2, 3}));
  CHECK_THROWS_WITH(ops::where(c23, x, y), Contains("Select") && Contains("bool[2,3]"));
}

TEST_CASE("where with shapes known only at run time checks them when run") {
  Graph g;
  const Output c = ops::placeholder(g, DType::boolean, {-1}, "c");
  const Output x = ops::placeholder(g, DType::float32, {-1, 2}, "x");
  const Output y = ops::placeholder(g, DType::float32, {-1, 2}, "y");
  const Output z = ops::where(c, x, y, "pick");
  Session sess(g);
  const Tensor xv = make(DType::float32, {1, 2, 3, 4}, {2, 2});
  const Tensor yv = make(DType::float32, {5, 6, 7, 8}, {2, 2});
  CHECK(doubles(sess.run({z}, {{c, make(DType::boolean, {1, 0})}, {x, xv}, {y, yv}})[0]) ==
        std::vector<double>{1, 2, 7, 8});
  CHECK_THROWS_WITH(sess.run({z}, {{c, make(DType::boolean, {1, 0, 1})}, {x, xv}, {y, yv}}),
                    Contains("pick") && Contains("bool[3]"));
  CHECK_THROWS_WITH(sess.run({z}, {{c, make(DType::boolean, {1, 0})},
                                   {x, xv},
                                   {y, make(DType::float32, {5, 6, 7, 8, 9, 10}, {3, 2})}}),
                    Contains("pick") && Contains("same shape"));
}

// ---------------------------------------------------------------------------------------------
// cast

TEST_CASE("cast converts between every pair of dtypes as numpy and TF do") {
  // Sources: floats, integers, bools; the values numpy's astype gives for each target.
  const std::vector<double> floats = {-2.7, -0.5, 0.0, 0.5, 1.9, 3.0};
  const std::vector<double> ints = {-3, 0, 2, 7, -1, 1};
  const std::vector<double> bools = {1, 0, 1, 1, 0, 0};
  const std::vector<double> floats_as_f32 = {-2.700000047683716, -0.5, 0.0, 0.5,
                                             1.899999976158142,  3.0};
  const std::vector<double> floats_as_int = {-2, 0, 0, 0, 1, 3};
  const std::vector<double> floats_as_bool = {1, 1, 0, 1, 1, 1};
  const std::vector<double> ints_as_bool = {1, 0, 1, 1, 1, 1};
  auto expected = [&](DType src, DType dst) -> std::vector<double> {
    if (psflow::is_floating(src)) {
      if (dst == DType::boolean) return floats_as_bool;
      if (!psflow::is_floating(dst)) return floats_as_int;
      if (src == DType::float32 || dst == DType::float32) return floats_as_f32;
      return floats;
    }
    if (src == DType::boolean) return bools;
    return dst == DType::boolean ? ints_as_bool : ints;
  };
  for (DType src : all_dtypes) {
    const std::vector<double>& in =
        psflow::is_floating(src) ? floats : (src == DType::boolean ? bools : ints);
    for (DType dst : all_dtypes) {
      INFO("cast " << psflow::dtype_name(src) << " to " << psflow::dtype_name(dst));
      Graph g;
      const Output x = constant(g, make(src, in, {2, 3}));
      const Output y = ops::cast(x, dst);
      CHECK(y.dtype() == dst);
      CHECK(y.shape() == PartialShape::of({2, 3}));
      if (src == dst)
        CHECK(y == x);  // tf.cast returns x itself
      else
        CHECK(y.op().type() == "Cast");
      const Tensor got = run(g, y);
      CHECK(got.dtype() == dst);
      CHECK(got.shape() == Shape{2, 3});
      CHECK(doubles(got) == expected(src, dst));
      // Empty tensors keep their shape.
      const Output e = ops::cast(constant(g, make(src, {}, {0, 2})), dst);
      const Tensor got_empty = run(g, e);
      CHECK(got_empty.dtype() == dst);
      CHECK(got_empty.shape() == Shape{0, 2});
    }
  }
}

TEST_CASE("cast narrows integers by wrapping and maps out-of-range floats to the lowest int") {
  Graph g;
  // numpy: np.array([2**32+5, -(2**31)-1, 2**31], np.int64).astype(np.int32)
  const Output wide = constant(g, make(DType::int64, {4294967301.0, -2147483649.0, 2147483648.0}));
  CHECK(doubles(run(g, ops::cast(wide, DType::int32))) ==
        std::vector<double>{5, 2147483647, -2147483648.0});
  const Output big = constant(g, make(DType::float64, {3e9, -3e9, 2147483647.9, -2147483648.9}));
  CHECK(doubles(run(g, ops::cast(big, DType::int32))) ==
        std::vector<double>{-2147483648.0, -2147483648.0, 2147483647, -2147483648.0});
  const Output precise = constant(g, make(DType::float64, {0.1}));
  CHECK(run(g, ops::cast(precise, DType::float32)).scalar<float>() == 0.1f);
}

TEST_CASE("a Cast op built with the same dtype passes its input through") {
  Graph g;
  const Output x = constant(g, make(DType::int32, {4, 5}));
  const Output y =
      psflow::detail::build_op("Cast", {x}, {{"DstT", DType::int32}}, "", "Cast").output(0);
  CHECK(y.op().type() == "Cast");
  CHECK(doubles(run(g, y)) == std::vector<double>{4, 5});
}

// ---------------------------------------------------------------------------------------------
// floor, pow, cos, sin

TEST_CASE("floor rounds down for float32 and float64 and rejects integers") {
  // numpy: np.floor([-1.5, -0.0, 0.5, 2.0, -2.0, 2.7, -0.2])
  for (DType dtype : {DType::float32, DType::float64}) {
    Graph g;
    const Output x = constant(g, make(dtype, {-1.5, -0.0, 0.5, 2.0, -2.0, 2.7, -0.2}));
    const Output y = ops::floor(x);
    CHECK(y.dtype() == dtype);
    CHECK(doubles(run(g, y)) == std::vector<double>{-2.0, -0.0, 0.0, 2.0, -2.0, 2.0, -1.0});
    CHECK(run(g, ops::floor(constant(g, make(dtype, {}, {0, 2})))).shape() == Shape{0, 2});
  }
  Graph g;
  CHECK_THROWS_WITH(ops::floor(constant(g, make(DType::int32, {1}))),
                    Contains("Floor") && Contains("int32"));
}

TEST_CASE("pow broadcasts for floats and integers") {
  // numpy: x = [[0.5,2,3],[1.5,-2,4]], y = [2,-1,0.5]; np.power(x, y)
  const std::vector<double> want = {0.25, 0.5, 1.7320508075688772, 2.25, -0.5, 2.0};
  for (DType dtype : {DType::float32, DType::float64}) {
    Graph g;
    const Output x = constant(g, make(dtype, {0.5, 2, 3, 1.5, -2, 4}, {2, 3}));
    const Output y = constant(g, make(dtype, {2, -1, 0.5}));
    const Output z = ops::pow(x, y);
    CHECK(z.shape() == PartialShape::of({2, 3}));
    const auto got = doubles(run(g, z));
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
  }
  // numpy: np.power([[2,-3,0],[5,1,-2]], [3,2,0]); np.power(np.int32(3), 21) wraps.
  for (DType dtype : {DType::int32, DType::int64}) {
    Graph g;
    const Output x = constant(g, make(dtype, {2, -3, 0, 5, 1, -2}, {2, 3}));
    const Output y = constant(g, make(dtype, {3, 2, 0}));
    CHECK(doubles(run(g, ops::pow(x, y))) == std::vector<double>{8, 9, 1, 125, 1, 1});
  }
  Graph g;
  const Output wrap =
      ops::pow(constant(g, Tensor(std::int32_t{3})), constant(g, Tensor(std::int32_t{21})));
  CHECK(run(g, wrap).scalar<std::int32_t>() == 1870418611);
  const Output empty = ops::pow(constant(g, make(DType::float32, {}, {0, 3})),
                                constant(g, make(DType::float32, {1, 2, 3})));
  CHECK(run(g, empty).shape() == Shape{0, 3});
}

TEST_CASE("pow rejects mismatched dtypes, bool, and integer negative exponents") {
  Graph g;
  const Output f = constant(g, make(DType::float32, {1, 2}));
  const Output i = constant(g, make(DType::int32, {1, 2}));
  CHECK_THROWS_WITH(ops::pow(f, i), Contains("Pow") && Contains("float32") && Contains("int32"));
  const Output b = constant(g, make(DType::boolean, {1, 0}));
  CHECK_THROWS_WITH(ops::pow(b, b), Contains("Pow") && Contains("bool"));
  const Output f3 = constant(g, make(DType::float32, {1, 2, 3}));
  CHECK_THROWS_WITH(ops::pow(f, f3), Contains("Pow") && Contains("broadcast"));
  const Output neg = ops::pow(i, constant(g, make(DType::int32, {2, -1})), "int_pow");
  CHECK_THROWS_WITH(run(g, neg), Contains("int_pow") && Contains("negative"));
}

TEST_CASE("cos and sin for float32 and float64") {
  // numpy: np.cos / np.sin of [0, 0.5, -1, 3]
  const std::vector<double> cos_want = {1.0, 0.8775825618903728, 0.5403023058681398,
                                        -0.9899924966004454};
  const std::vector<double> sin_want = {0.0, 0.479425538604203, -0.8414709848078965,
                                        0.1411200080598672};
  for (DType dtype : {DType::float32, DType::float64}) {
    Graph g;
    const Output x = constant(g, make(dtype, {0, 0.5, -1, 3}));
    const auto c = doubles(run(g, ops::cos(x)));
    const auto s = doubles(run(g, ops::sin(x)));
    for (std::size_t i = 0; i < c.size(); ++i) {
      CHECK(c[i] == Approx(cos_want[i]).epsilon(1e-6).margin(1e-7));
      CHECK(s[i] == Approx(sin_want[i]).epsilon(1e-6).margin(1e-7));
    }
    CHECK(ops::cos(x).dtype() == dtype);
  }
  Graph g;
  const Output i = constant(g, make(DType::int64, {1}));
  CHECK_THROWS_WITH(ops::cos(i), Contains("Cos") && Contains("int64"));
  CHECK_THROWS_WITH(ops::sin(i), Contains("Sin") && Contains("int64"));
}

// ---------------------------------------------------------------------------------------------
// Gradients

TEST_CASE("gradient of pow against central differences, both inputs, with broadcasting") {
  psflow::testing::Random random(11);
  // x > 0, where both derivatives are smooth.
  check_gradients([](Graph&, const std::vector<Output>& xs) { return ops::pow(xs[0], xs[1]); },
                  {Arg{random.array({2, 3}, 0.3, 2.0)}, Arg{random.array({3}, -1.5, 2.5)}});
  check_gradients([](Graph&, const std::vector<Output>& xs) { return ops::pow(xs[0], xs[1]); },
                  {Arg{random.array({4, 1}, 0.3, 2.0)}, Arg{random.array({1, 3}, -1.5, 2.5)}});
  check_gradients([](Graph&, const std::vector<Output>& xs) { return ops::pow(xs[0], xs[1]); },
                  {Arg{random.array({}, 0.3, 2.0)}, Arg{random.array({2, 2}, -1.5, 2.5)}});
  // Unknown shapes: the broadcast is summed back at run time.
  check_gradients([](Graph&, const std::vector<Output>& xs) { return ops::pow(xs[0], xs[1]); },
                  {Arg{random.array({2, 3}, 0.3, 2.0), psflow::testing::Dims{-1, 3}},
                   Arg{random.array({3}, -1.5, 2.5), psflow::testing::Dims{-1}}});
}

TEST_CASE("gradient of pow with respect to y is 0 where x is not positive, as TF's") {
  Graph g;
  const Output x = constant(g, make(DType::float64, {0.0, -2.0, 2.0}));
  const Output y = constant(g, make(DType::float64, {2.0, 2.0, 3.0}));
  const auto grads = psflow::train::gradients(ops::pow(x, y), {x, y});
  Session sess(g);
  const auto got = sess.run({grads[0], grads[1]});
  // dx = y * x^(y-1): [0, -4, 12]; dy = x^y * log(x) where x > 0: [0, 0, 8 log 2].
  CHECK(doubles(got[0]) == std::vector<double>{0.0, -4.0, 12.0});
  const auto dy = doubles(got[1]);
  CHECK(dy[0] == 0.0);
  CHECK(dy[1] == 0.0);
  CHECK(dy[2] == Approx(8 * std::log(2.0)));
}

TEST_CASE("gradients of cos and sin against central differences") {
  psflow::testing::Random random(12);
  check_gradients([](Graph&, const std::vector<Output>& xs) { return ops::cos(xs[0]); },
                  {Arg{random.array({2, 3}, -3, 3)}});
  check_gradients([](Graph&, const std::vector<Output>& xs) { return ops::sin(xs[0]); },
                  {Arg{random.array({2, 3}, -3, 3)}});
  check_gradients(
      [](Graph&, const std::vector<Output>& xs) {
        return ops::mul(ops::sin(xs[0]), ops::cos(ops::mul(xs[0], xs[1])));
      },
      {Arg{random.array({3}, -2, 2)}, Arg{random.array({3}, -2, 2)}});
}

TEST_CASE("gradient of where against central differences, for x and y") {
  psflow::testing::Random random(13);
  check_gradients(
      [](Graph& g, const std::vector<Output>& xs) {
        const Output c = constant(g, make(DType::boolean, {1, 0, 0, 1, 1, 0}, {2, 3}));
        return ops::mul(ops::where(c, xs[0], xs[1]), ops::where(c, xs[1], xs[0]));
      },
      {Arg{random.array({2, 3})}, Arg{random.array({2, 3})}});
  check_gradients(
      [](Graph& g, const std::vector<Output>& xs) {
        const Output rows = constant(g, make(DType::boolean, {0, 1, 1}));
        return ops::square(ops::where(rows, xs[0], xs[1]));
      },
      {Arg{random.array({3, 2})}, Arg{random.array({3, 2})}});
  check_gradients(
      [](Graph& g, const std::vector<Output>& xs) {
        // cond computed from the inputs: x where x > y, else y (an element-wise maximum).
        (void)g;
        return ops::square(ops::where(ops::greater(xs[0], xs[1]), xs[0], xs[1]));
      },
      {Arg{random.away_from_zero({4})}, Arg{random.array({4}, -0.2, 0.2)}});
}

TEST_CASE("gradient of cast flows between float32 and float64, and stops at int and bool") {
  Graph g;
  const Output x32 = ops::placeholder(g, DType::float32, {3}, "x32");
  const Output x64 = ops::placeholder(g, DType::float64, {3}, "x64");
  const Output w64 = constant(g, make(DType::float64, {0.5, -2.0, 3.0}));
  const Output w32 = constant(g, make(DType::float32, {1.5, 4.0, -1.0}));
  // d sum(cast(x32, f64) * w64) / d x32 = w64 as float32, and the other way round.
  const Output up = ops::mul(ops::cast(x32, DType::float64), w64);
  const Output down = ops::mul(ops::cast(x64, DType::float32), w32);
  const auto g_up = psflow::train::gradients(up, {x32});
  const auto g_down = psflow::train::gradients(down, {x64});
  CHECK(g_up[0].dtype() == DType::float32);
  CHECK(g_down[0].dtype() == DType::float64);
  // Through int32: TF gives None, so x gets zeros.
  const Output through_int = ops::cast(ops::cast(x64, DType::int32), DType::float64);
  const auto g_int = psflow::train::gradients(through_int, {x64});
  // Through bool too.
  const Output through_bool = ops::cast(ops::cast(x32, DType::boolean), DType::float32);
  const auto g_bool = psflow::train::gradients(through_bool, {x32});

  Session sess(g);
  const FeedMap feeds = {{x32, make(DType::float32, {1, 2, 3})},
                         {x64, make(DType::float64, {1.5, -2.5, 3.5})}};
  const auto got = sess.run({g_up[0], g_down[0], g_int[0], g_bool[0]}, feeds);
  CHECK(doubles(got[0]) == std::vector<double>{0.5, -2.0, 3.0});
  CHECK(doubles(got[1]) == std::vector<double>{1.5, 4.0, -1.0});
  CHECK(doubles(got[2]) == std::vector<double>{0, 0, 0});
  CHECK(doubles(got[3]) == std::vector<double>{0, 0, 0});
}

// d sum(y) / d x by central differences with step `eps`, x fed `value` (float32 or float64).
inline std::vector<double> central_difference(Session& sess, Output y, Output x,
                                              const std::vector<double>& value, double eps) {
  std::vector<double> out;
  auto total = [&](const std::vector<double>& v) {
    double s = 0;
    for (double e : doubles(sess.run({y}, {{x, make(x.dtype(), v)}})[0])) s += e;
    return s;
  };
  for (std::size_t i = 0; i < value.size(); ++i) {
    auto plus = value, minus = value;
    plus[i] += eps;
    minus[i] -= eps;
    out.push_back((total(plus) - total(minus)) / (2 * eps));
  }
  return out;
}

TEST_CASE("gradient of cast between float32 and float64 against central differences") {
  // Values and step exactly representable in float32, so the float32 side loses nothing and
  // the differences of these quadratics are exact.
  const std::vector<double> value = {0.5, -1.25, 2.0};
  const double eps = 1.0 / 1024;
  Graph g;
  const Output w64 = constant(g, make(DType::float64, {0.5, -2.0, 3.0}));
  const Output w32 = constant(g, make(DType::float32, {1.5, 4.0, -1.0}));
  const Output x64 = ops::placeholder(g, DType::float64, {3}, "x64");
  const Output x32 = ops::placeholder(g, DType::float32, {3}, "x32");
  // float64 -> float32 -> float64 and float32 -> float64 -> float32.
  const Output y64 =
      ops::mul(ops::cast(ops::square(ops::cast(x64, DType::float32)), DType::float64), w64);
  const Output y32 =
      ops::mul(ops::cast(ops::square(ops::cast(x32, DType::float64)), DType::float32), w32);
  const Output d64 = psflow::train::gradients(y64, {x64})[0];
  const Output d32 = psflow::train::gradients(y32, {x32})[0];
  CHECK(d64.dtype() == DType::float64);
  CHECK(d32.dtype() == DType::float32);
  Session sess(g);
  const auto got64 = doubles(sess.run({d64}, {{x64, make(DType::float64, value)}})[0]);
  const auto got32 = doubles(sess.run({d32}, {{x32, make(DType::float32, value)}})[0]);
  const auto want64 = central_difference(sess, y64, x64, value, eps);
  const auto want32 = central_difference(sess, y32, x32, value, eps);
  for (std::size_t i = 0; i < value.size(); ++i) {
    CHECK(got64[i] == Approx(want64[i]).epsilon(1e-9));
    CHECK(got32[i] == Approx(want32[i]).epsilon(1e-6));
  }
  CHECK(got64 == std::vector<double>{0.5, 5.0, 12.0});  // 2 x w
}

TEST_CASE("comparisons, logical ops and floor are not differentiable") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {2}, "x");
  const Output mask = ops::cast(ops::logical_not(ops::less(x, ops::floor(x))), DType::float64);
  const Output y = ops::mul(mask, x);
  const auto grads = psflow::train::gradients(y, {x});
  Session sess(g);
  // d(mask * x)/dx = mask, mask = !(x < floor(x)) = 1.
  CHECK(doubles(sess.run({grads[0]}, {{x, make(DType::float64, {1.5, -0.5})}})[0]) ==
        std::vector<double>{1, 1});
  for (const char* type : {"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
                           "LogicalAnd", "LogicalOr", "LogicalNot", "Floor"}) {
    INFO(type);
    const auto fn = psflow::GradientRegistry::global().lookup(type);
    REQUIRE(fn.has_value());
    CHECK(!*fn);
  }
}

}  // namespace logic_ops_test
