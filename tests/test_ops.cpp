// Op values and build-time inference: every op is built into a Graph, run in a Session and
// compared with the same computation done directly in xtensor (or with plain loops where
// xtensor has no direct equivalent, e.g. MatMul without xtensor-blas).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>
#include <xtensor/xarray.hpp>
#include <xtensor/xbroadcast.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xreducer.hpp>

#include "psflow/runtime.hpp"
#include "psflow/train/gradients.hpp"
#include "support/error_message.hpp"

namespace ops = psflow::ops;
using Catch::Contains;
using psflow::DType;
using psflow::Graph;
using psflow::InvalidArgument;
using psflow::Output;
using psflow::PartialShape;
using psflow::Session;
using psflow::Shape;
using psflow::Tensor;

namespace Catch {
template <>
struct StringMaker<psflow::PartialShape> {
  static std::string convert(const psflow::PartialShape& s) { return s.to_string(); }
};
}  // namespace Catch

namespace {

using psflow::testing::invalid_argument_message;

// ---------------------------------------------------------------------------------------------
// Helpers

using Dims = std::vector<std::int64_t>;

// Deterministic test values of T in shape `shape`: a repeating mix of negatives and positives.
// Floats are never zero (k/2 + 1/4); integers are zero now and then unless `nonzero`.
template <class T>
xt::xarray<T> pattern(const Shape& shape, int offset = 0, bool nonzero = false) {
  auto a = xt::xarray<T>::from_shape(shape);
  int i = offset;
  for (auto& v : a) {
    int k = (i++ * 7) % 13 - 6;  // -6 .. 6
    if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(k) * T(0.5) + T(0.25);
    } else {
      if (nonzero && k == 0) k = 5;
      v = static_cast<T>(k);
    }
  }
  return a;
}

template <class T>
xt::xarray<T> values(const Shape& shape, const std::vector<T>& flat) {
  auto a = xt::xarray<T>::from_shape(shape);
  REQUIRE(a.size() == flat.size());
  std::copy(flat.begin(), flat.end(), a.begin());
  return a;
}

template <class T>
Output constant(Graph& g, const xt::xarray<T>& value, std::string_view name = "") {
  return ops::constant(g, Tensor(value), name);
}

// Default relative tolerance per element type (integers compare exactly).
template <class T>
constexpr double default_tolerance() {
  if constexpr (std::is_same_v<T, float>)
    return 1e-5;
  else if constexpr (std::is_same_v<T, double>)
    return 1e-12;
  else
    return 0.0;
}

template <class T>
bool close(T got, T want, double tol) {
  if constexpr (std::is_integral_v<T>) {
    return got == want;
  } else {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    const double g = got, w = want;
    return std::abs(g - w) <= tol * std::max({1.0, std::abs(g), std::abs(w)});
  }
}

Shape shape_of(const auto& xarray) { return Shape(xarray.shape().begin(), xarray.shape().end()); }

// "" when `got` has T's dtype, `want`'s shape and (within `tol`) its values; otherwise what
// differs.
template <class T>
std::string mismatch(const Tensor& got, const xt::xarray<T>& want,
                     double tol = default_tolerance<T>()) {
  if (got.empty()) return "got an empty tensor";
  if (got.dtype() != psflow::dtype_of<T>())
    return "dtype " + std::string(psflow::dtype_name(got.dtype())) + ", want " +
           std::string(psflow::dtype_name(psflow::dtype_of<T>()));
  if (got.shape() != shape_of(want))
    return "shape " + psflow::shape_string(got.shape()) + ", want " +
           psflow::shape_string(shape_of(want));
  auto g = got.values<T>();
  std::size_t i = 0;
  for (auto it = want.begin(); it != want.end(); ++it, ++i) {
    if (!close<T>(g[i], *it, tol)) {
      std::ostringstream os;
      os.precision(std::numeric_limits<T>::max_digits10);
      os << "element " << i << " (flat) of " << psflow::shape_string(got.shape()) << ": got "
         << +g[i] << ", want " << +*it;
      return os.str();
    }
  }
  return "";
}

#define CHECK_TENSOR(got, ...) CHECK(mismatch(got, __VA_ARGS__) == std::string())

// numpy's broadcasting rule, written out independently of psflow's.
Shape numpy_broadcast(const Shape& a, const Shape& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::size_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const std::size_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    REQUIRE((da == db || da == 1 || db == 1));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// f applied element-wise to a and b broadcast by xtensor to their common shape.
template <class T, class F>
xt::xarray<T> reference_binary(const xt::xarray<T>& a, const xt::xarray<T>& b, F f) {
  const Shape shape = numpy_broadcast(shape_of(a), shape_of(b));
  const xt::xarray<T> ba = xt::broadcast(a, shape);
  const xt::xarray<T> bb = xt::broadcast(b, shape);
  auto out = xt::xarray<T>::from_shape(shape);
  std::transform(ba.begin(), ba.end(), bb.begin(), out.begin(), f);
  return out;
}

template <class T>
xt::xarray<T> scalar_array(T v) {
  xt::xarray<T> a = xt::xarray<T>::from_shape(Shape{});
  a() = v;
  return a;
}

// Reduction reference with xt::sum: floats accumulate in double, integer means truncate.
template <class T>
xt::xarray<T> reference_reduce(const xt::xarray<T>& a, std::vector<int> axes, bool keep_dims,
                               bool mean) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  const int rank = static_cast<int>(a.dimension());
  std::vector<std::size_t> ax;
  if (axes.empty())
    for (int i = 0; i < rank; ++i) ax.push_back(static_cast<std::size_t>(i));
  for (int axis : axes) ax.push_back(static_cast<std::size_t>(axis < 0 ? axis + rank : axis));
  std::sort(ax.begin(), ax.end());
  std::size_t count = 1;
  for (auto i : ax) count *= a.shape()[i];
  const xt::xarray<Acc> acc = xt::cast<Acc>(a);
  xt::xarray<Acc> sum;
  if (ax.empty())
    sum = acc;  // rank-0 input
  else if (keep_dims)
    sum = xt::sum<Acc>(acc, ax, xt::keep_dims);
  else
    sum = xt::sum<Acc>(acc, ax);
  if (mean)
    for (auto& v : sum) v = v / static_cast<Acc>(count);
  return xt::cast<T>(sum);
}

template <class T>
const char* type_name() {
  return psflow::dtype_name(psflow::dtype_of<T>()).data();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Binary arithmetic

namespace {
struct BroadcastCase {
  Shape a, b;
};
const std::vector<BroadcastCase> kBroadcastCases = {
    {{2, 3}, {2, 3}},
    {{}, {2, 3}},
    {{2, 3}, {}},
    {{3, 1}, {1, 4}},
    {{1, 4}, {3, 1}},
    {{2, 3, 4}, {4}},
    {{4}, {2, 3, 4}},
    {{2, 1, 4}, {3, 1}},
    {{3, 1}, {2, 1, 4}},
    {{}, {}},
    {{1}, {2, 2}},
    {{5}, {1}},
    {{2, 1, 3, 1}, {4, 1, 5}},
    {{2, 3, 4}, {2, 1, 4}},
    {{2, 3, 4}, {2, 3, 1}},
    {{1, 1}, {1}},
    {{2, 3, 1}, {1, 1, 4}},
    {{3, 1, 1}, {1, 2, 1}},
    {{0, 3}, {1, 3}},
    {{2, 0}, {2, 1}},
};
}  // namespace

TEMPLATE_TEST_CASE("add/sub/mul/div/maximum/minimum broadcast like numpy", "[ops][binary]", float,
                   double, std::int32_t, std::int64_t) {
  using T = TestType;
  for (const auto& c : kBroadcastCases) {
    INFO(type_name<T>() << " " << psflow::shape_string(c.a) << " op " << psflow::shape_string(c.b));
    const auto a = pattern<T>(c.a, 0);
    const auto b = pattern<T>(c.b, 5, /*nonzero=*/true);
    const Shape out_shape = numpy_broadcast(c.a, c.b);

    Graph g;
    const Output x = constant(g, a, "x");
    const Output y = constant(g, b, "y");
    struct Case {
      const char* what;
      Output out;
      xt::xarray<T> want;
    };
    const auto maxf = [](T p, T q) { return std::max(p, q); };
    const auto minf = [](T p, T q) { return std::min(p, q); };
    const std::vector<Case> cases = {
        {"add", ops::add(x, y), reference_binary(a, b, std::plus<T>{})},
        {"sub", ops::sub(x, y), reference_binary(a, b, std::minus<T>{})},
        {"mul", ops::mul(x, y), reference_binary(a, b, std::multiplies<T>{})},
        {"div", ops::div(x, y), reference_binary(a, b, std::divides<T>{})},
        {"maximum", ops::maximum(x, y), reference_binary(a, b, maxf)},
        {"minimum", ops::minimum(x, y), reference_binary(a, b, minf)},
        {"operator+", x + y, reference_binary(a, b, std::plus<T>{})},
        {"operator-", x - y, reference_binary(a, b, std::minus<T>{})},
        {"operator*", x * y, reference_binary(a, b, std::multiplies<T>{})},
        {"operator/", x / y, reference_binary(a, b, std::divides<T>{})},
    };
    std::vector<Output> fetches;
    for (const auto& k : cases) fetches.push_back(k.out);
    Session sess(g);
    const auto got = sess.run(fetches);
    REQUIRE(got.size() == cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
      INFO(cases[i].what);
      CHECK(cases[i].out.dtype() == psflow::dtype_of<T>());
      CHECK(cases[i].out.shape() == PartialShape::of_shape(out_shape));
      CHECK_TENSOR(got[i], cases[i].want);
    }
  }
}

TEMPLATE_TEST_CASE(
    "a number on either side of an operator becomes a constant of the tensor's dtype",
    "[ops][binary]", float, double, std::int32_t, std::int64_t) {
  using T = TestType;
  const auto a = pattern<T>({2, 3}, 1, /*nonzero=*/true);
  Graph g;
  const Output x = constant(g, a, "x");
  const auto s = [](double v) { return scalar_array(static_cast<T>(v)); };
  struct Case {
    const char* what;
    Output out;
    xt::xarray<T> want;
  };
  const std::vector<Case> cases = {
      {"x * 2", x * 2.0, reference_binary(a, s(2), std::multiplies<T>{})},
      {"2 * x", 2.0 * x, reference_binary(s(2), a, std::multiplies<T>{})},
      {"x + 3", x + 3.0, reference_binary(a, s(3), std::plus<T>{})},
      {"3 + x", 3.0 + x, reference_binary(s(3), a, std::plus<T>{})},
      {"x - 4", x - 4.0, reference_binary(a, s(4), std::minus<T>{})},
      {"4 - x", 4.0 - x, reference_binary(s(4), a, std::minus<T>{})},
      {"x / 2", x / 2.0, reference_binary(a, s(2), std::divides<T>{})},
      {"12 / x", 12.0 / x, reference_binary(s(12), a, std::divides<T>{})},
      {"-x", -x, reference_binary(s(0), a, std::minus<T>{})},
  };
  std::vector<Output> fetches;
  for (const auto& k : cases) fetches.push_back(k.out);
  Session sess(g);
  const auto got = sess.run(fetches);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(type_name<T>() << " " << cases[i].what);
    CHECK(cases[i].out.dtype() == psflow::dtype_of<T>());
    CHECK(cases[i].out.shape() == PartialShape::of({2, 3}));
    CHECK_TENSOR(got[i], cases[i].want);
  }
}

TEMPLATE_TEST_CASE("integer division truncates toward zero and rejects division by zero",
                   "[ops][binary]", std::int32_t, std::int64_t) {
  using T = TestType;
  Graph g;
  const Output x = constant(g, values<T>({8}, {-7, 7, -7, 7, 1, -1, 0, 9}), "x");
  const Output y = constant(g, values<T>({8}, {2, 2, -2, -2, 3, 3, 5, -3}), "y");
  const Output zero_somewhere = constant(g, values<T>({8}, {1, 1, 1, 0, 1, 1, 1, 1}), "z");
  const Output q = x / y;
  const Output half = x / 2.0;
  const Output by_zero = ops::div(x, zero_somewhere);
  const Output scalar_zero = x / 0.0;
  Session sess(g);
  CHECK_TENSOR(sess.run({q})[0], values<T>({8}, {-3, 3, 3, -3, 0, 0, 0, -3}));
  CHECK_TENSOR(sess.run({half})[0], values<T>({8}, {-3, 3, -3, 3, 0, 0, 0, 4}));
  CHECK_THAT(invalid_argument_message([&] { sess.run({by_zero}); }), Contains("division by zero"));
  CHECK_THAT(invalid_argument_message([&] { sess.run({scalar_zero}); }),
             Contains("division by zero"));
}

TEMPLATE_TEST_CASE("floating division by zero gives inf and nan like numpy", "[ops][binary]", float,
                   double) {
  using T = TestType;
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  Graph g;
  const Output x = constant(g, values<T>({3}, {1, -1, 0}), "x");
  const Output y = constant(g, values<T>({3}, {0, 0, 0}), "y");
  Session sess(g);
  CHECK_TENSOR(sess.run({x / y})[0], values<T>({3}, {inf, -inf, nan}));
}

// numpy's maximum/minimum return NaN when either side is NaN.
TEMPLATE_TEST_CASE("maximum and minimum propagate NaN from either side like numpy", "[ops][binary]",
                   float, double) {
  using T = TestType;
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  Graph g;
  const Output x = constant(g, values<T>({5}, {nan, 1, nan, -inf, 2}), "x");
  const Output y = constant(g, values<T>({5}, {1, nan, nan, 3, 2}), "y");
  Session sess(g);
  const auto got = sess.run({ops::maximum(x, y), ops::minimum(x, y)});
  CHECK_TENSOR(got[0], values<T>({5}, {nan, nan, nan, 3, 2}));
  CHECK_TENSOR(got[1], values<T>({5}, {nan, nan, nan, -inf, 2}));
}

// ---------------------------------------------------------------------------------------------
// Unary functions

TEMPLATE_TEST_CASE("neg, square and relu on every number type", "[ops][unary]", float, double,
                   std::int32_t, std::int64_t) {
  using T = TestType;
  for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 4}, Shape{2, 3, 2}}) {
    INFO(type_name<T>() << psflow::shape_string(shape));
    const xt::xarray<T> a = pattern<T>(shape, 3);
    Graph g;
    const Output x = constant(g, a, "x");
    const Output n = ops::neg(x), s = ops::square(x), r = ops::relu(x);
    for (const Output& o : {n, s, r}) {
      CHECK(o.dtype() == psflow::dtype_of<T>());
      CHECK(o.shape() == PartialShape::of_shape(shape));
    }
    Session sess(g);
    const auto got = sess.run({n, s, r});
    CHECK_TENSOR(got[0], xt::xarray<T>(-a));
    CHECK_TENSOR(got[1], xt::xarray<T>(a * a));
    CHECK_TENSOR(got[2], xt::xarray<T>(xt::maximum(a, T(0))));
  }
}

TEMPLATE_TEST_CASE("sigmoid, tanh, exp, log, sqrt and rsqrt match xtensor", "[ops][unary]", float,
                   double) {
  using T = TestType;
  const auto any = values<T>({3, 4}, {-100, -20, -3.5, -1, -0.25, 0, 0.25, 1, 3.5, 20, 80, 100});
  const auto positive = values<T>({2, 4}, {1e-6, 0.01, 0.25, 1, 2, 9, 1e4, 1e30});
  Graph g;
  const Output x = constant(g, any, "x");
  const Output p = constant(g, positive, "p");
  struct Case {
    const char* what;
    Output out;
    xt::xarray<T> want;
  };
  const std::vector<Case> cases = {
      {"sigmoid", ops::sigmoid(x), T(1) / (T(1) + xt::exp(-any))},
      {"tanh", ops::tanh(x), xt::tanh(any)},
      {"exp", ops::exp(x), xt::exp(any)},
      {"log", ops::log(p), xt::log(positive)},
      {"sqrt", ops::sqrt(p), xt::sqrt(positive)},
      {"rsqrt", ops::rsqrt(p), T(1) / xt::sqrt(positive)},
  };
  std::vector<Output> fetches;
  for (const auto& k : cases) fetches.push_back(k.out);
  Session sess(g);
  const auto got = sess.run(fetches);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO(type_name<T>() << " " << cases[i].what);
    CHECK(cases[i].out.dtype() == psflow::dtype_of<T>());
    CHECK(cases[i].out.shape() == cases[i].out.op().input(0).shape());
    CHECK_TENSOR(got[i], cases[i].want);
  }

  SECTION("values outside the domain follow IEEE like numpy") {
    const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
    Graph h;
    const Output e = constant(h, values<T>({3}, {0, -1, inf}), "e");
    Session s(h);
    const auto r = s.run({ops::log(e), ops::sqrt(e), ops::rsqrt(e), ops::sigmoid(e), ops::tanh(e)});
    CHECK_TENSOR(r[0], values<T>({3}, {-inf, nan, inf}));
    CHECK_TENSOR(r[1], values<T>({3}, {0, nan, inf}));
    CHECK_TENSOR(r[2], values<T>({3}, {inf, nan, 0}));
    CHECK_TENSOR(r[3], values<T>({3}, {0.5, T(1) / (T(1) + std::exp(T(1))), 1}));
    CHECK_TENSOR(r[4], values<T>({3}, {0, std::tanh(T(-1)), 1}));
  }
}

TEMPLATE_TEST_CASE("float-only functions reject integer inputs while the graph is built",
                   "[ops][unary][inference]", std::int32_t, std::int64_t) {
  using T = TestType;
  Graph g;
  const Output x = constant(g, pattern<T>({2, 3}), "x");
  const std::vector<std::pair<const char*, std::function<Output(Output)>>> fns = {
      {"sigmoid", [](Output o) { return ops::sigmoid(o); }},
      {"tanh", [](Output o) { return ops::tanh(o); }},
      {"exp", [](Output o) { return ops::exp(o); }},
      {"log", [](Output o) { return ops::log(o); }},
      {"sqrt", [](Output o) { return ops::sqrt(o); }},
      {"rsqrt", [](Output o) { return ops::rsqrt(o); }},
  };
  const std::size_t before = g.num_nodes();
  for (const auto& [what, fn] : fns) {
    INFO(what);
    CHECK_THAT(
        invalid_argument_message([&] { fn(x); }),
        Contains("'x:0'") && Contains(std::string(type_name<T>()) + "[2,3]") && Contains("float"));
  }
  CHECK(g.num_nodes() == before);  // a rejected op leaves no node behind
}

TEST_CASE("number ops reject bool inputs while the graph is built", "[ops][unary][inference]") {
  Graph g;
  const Output b = ops::constant(g, Tensor(xt::xarray<bool>{true, false}), "b");
  CHECK_THAT(invalid_argument_message([&] { ops::neg(b); }),
             Contains("'b:0'") && Contains("bool[2]"));
  CHECK_THAT(invalid_argument_message([&] { ops::add(b, b); }),
             Contains("'b:0'") && Contains("bool[2]"));
  CHECK_THAT(invalid_argument_message([&] { ops::reduce_sum(b); }), Contains("'b:0'"));
}

// ---------------------------------------------------------------------------------------------
// MatMul

namespace {
// C = op(A) * op(B) with plain loops, accumulating in double for floats.
template <class T>
xt::xarray<T> reference_matmul(const xt::xarray<T>& a, const xt::xarray<T>& b, bool ta, bool tb) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
  const std::size_t m = a.shape()[ta ? 1 : 0], k = a.shape()[ta ? 0 : 1];
  const std::size_t n = b.shape()[tb ? 0 : 1];
  auto c = xt::xarray<T>::from_shape(Shape{m, n});
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      Acc sum = 0;
      for (std::size_t p = 0; p < k; ++p)
        sum += static_cast<Acc>(ta ? a(p, i) : a(i, p)) * static_cast<Acc>(tb ? b(j, p) : b(p, j));
      c(i, j) = static_cast<T>(sum);
    }
  return c;
}
}  // namespace

TEMPLATE_TEST_CASE("matmul with every transpose combination", "[ops][matmul]", float, double,
                   std::int32_t, std::int64_t) {
  using T = TestType;
  struct Dims3 {
    std::size_t m, k, n;
  };
  for (const Dims3 d : {Dims3{3, 4, 5}, Dims3{1, 7, 2}, Dims3{5, 1, 3}, Dims3{4, 4, 4},
                        Dims3{2, 3, 1}, Dims3{33, 17, 29}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        INFO(type_name<T>() << " m=" << d.m << " k=" << d.k << " n=" << d.n << " transpose_a=" << ta
                            << " transpose_b=" << tb);
        const auto a = pattern<T>(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, 1);
        const auto b = pattern<T>(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, 4);
        Graph g;
        const Output c = ops::matmul(constant(g, a, "a"), constant(g, b, "b"), ta, tb);
        CHECK(c.dtype() == psflow::dtype_of<T>());
        CHECK(c.shape() ==
              PartialShape::of({static_cast<std::int64_t>(d.m), static_cast<std::int64_t>(d.n)}));
        Session sess(g);
        CHECK_TENSOR(sess.run({c})[0], reference_matmul(a, b, ta, tb));
      }
    }
  }
}

TEMPLATE_TEST_CASE("matmul with an empty dimension gives numpy's result", "[ops][matmul]", float,
                   double, std::int32_t) {
  using T = TestType;
  SECTION("inner dimension 0: a zero matrix") {
    Graph g;
    const Output c =
        ops::matmul(constant(g, pattern<T>({2, 0}), "a"), constant(g, pattern<T>({0, 3}), "b"));
    CHECK(c.shape() == PartialShape::of({2, 3}));
    Session sess(g);
    CHECK_TENSOR(sess.run({c})[0], xt::xarray<T>(xt::zeros<T>({2, 3})));
  }
  SECTION("no rows: an empty matrix") {
    Graph g;
    const Output c =
        ops::matmul(constant(g, pattern<T>({0, 4}), "a"), constant(g, pattern<T>({4, 3}), "b"));
    Session sess(g);
    CHECK_TENSOR(sess.run({c})[0], xt::xarray<T>::from_shape(Shape{0, 3}));
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions

TEMPLATE_TEST_CASE("reduce_sum and reduce_mean over any set of axes", "[ops][reduce]", float,
                   double, std::int32_t, std::int64_t) {
  using T = TestType;
  for (const Shape& shape : {Shape{}, Shape{5}, Shape{3, 4}, Shape{2, 3, 4}, Shape{2, 3, 2, 3},
                             Shape{1, 4, 1}, Shape{2, 3, 1}, Shape{3, 1, 2}}) {
    const int rank = static_cast<int>(shape.size());
    std::vector<std::vector<int>> axis_sets = {{}};
    for (int i = 0; i < rank; ++i) {
      axis_sets.push_back({i});
      axis_sets.push_back({i - rank});
      for (int j = i + 1; j < rank; ++j) {
        axis_sets.push_back({i, j});
        axis_sets.push_back({j - rank, i});
        for (int k = j + 1; k < rank; ++k) axis_sets.push_back({i, j - rank, k});
      }
    }
    std::vector<int> all;
    for (int i = rank - 1; i >= 0; --i) all.push_back(i);
    if (rank > 0) axis_sets.push_back(all);

    const auto a = pattern<T>(shape, 2);
    Graph g;
    const Output x = constant(g, a, "x");
    struct Case {
      std::vector<int> axes;
      bool keep_dims, mean;
      Output out;
    };
    std::vector<Case> cases;
    std::vector<Output> fetches;
    for (const auto& axes : axis_sets)
      for (const bool keep : {false, true})
        for (const bool mean : {false, true}) {
          const Output o = mean ? ops::reduce_mean(x, axes, keep) : ops::reduce_sum(x, axes, keep);
          cases.push_back({axes, keep, mean, o});
          fetches.push_back(o);
        }
    Session sess(g);
    const auto got = sess.run(fetches);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      INFO(type_name<T>() << psflow::shape_string(shape) << (c.mean ? " mean" : " sum") << " axes "
                          << Catch::Detail::stringify(c.axes) << " keep_dims=" << c.keep_dims);
      const auto want = reference_reduce(a, c.axes, c.keep_dims, c.mean);
      CHECK(c.out.dtype() == psflow::dtype_of<T>());
      CHECK(c.out.shape() == PartialShape::of_shape(shape_of(want)));
      CHECK_TENSOR(got[i], want);
    }
  }
}

TEMPLATE_TEST_CASE("integer reduce_mean truncates toward zero", "[ops][reduce]", std::int32_t,
                   std::int64_t) {
  using T = TestType;
  Graph g;
  const Output x = constant(g, values<T>({3, 2}, {1, 2, 3, 5, -3, -4}), "x");
  Session sess(g);
  const auto got =
      sess.run({ops::reduce_mean(x, {1}), ops::reduce_mean(x), ops::reduce_mean(x, {0}, true)});
  CHECK_TENSOR(got[0], values<T>({3}, {1, 4, -3}));
  CHECK_TENSOR(got[1], scalar_array<T>(0));         // 4 / 6
  CHECK_TENSOR(got[2], values<T>({1, 2}, {0, 1}));  // 1/3, 3/3
}

// ---------------------------------------------------------------------------------------------
// Array ops: constant, fill, identity, reshape, placeholder

TEST_CASE("constant returns its value for every dtype", "[ops][array]") {
  Graph g;
  const xt::xarray<float> f = pattern<float>({2, 3});
  const xt::xarray<double> d = pattern<double>({4});
  const xt::xarray<std::int32_t> i = pattern<std::int32_t>({3, 1, 2});
  const xt::xarray<std::int64_t> l = scalar_array<std::int64_t>(std::int64_t{1} << 40);
  const xt::xarray<bool> b = {{true, false}, {false, true}};
  const Output cf = constant(g, f), cd = constant(g, d), ci = constant(g, i), cl = constant(g, l),
               cb = constant(g, b);
  CHECK(cf.shape() == PartialShape::of({2, 3}));
  CHECK(cl.shape() == PartialShape::scalar());
  CHECK(cb.dtype() == DType::boolean);
  Session sess(g);
  const auto got = sess.run({cf, cd, ci, cl, cb});
  CHECK_TENSOR(got[0], f, 0.0);
  CHECK_TENSOR(got[1], d, 0.0);
  CHECK_TENSOR(got[2], i);
  CHECK_TENSOR(got[3], l);
  REQUIRE(got[4].dtype() == DType::boolean);
  CHECK(got[4].shape() == Shape{2, 2});
  const bool same_bools = got[4].as<bool>() == b;
  CHECK(same_bools);
  CHECK_THROWS_AS(ops::constant(g, Tensor()), InvalidArgument);
}

// A fetched value belongs to the caller (TF hands back a fresh numpy array): writing into it
// must not change what the graph computes next time.
TEST_CASE("writing into a fetched value changes no later result", "[ops][array]") {
  Graph g;
  const xt::xarray<float> v = {1, 2, 3};
  const Output c = constant(g, v, "c");
  const Output i = ops::identity(c);
  Session sess(g);
  SECTION("the constant itself") {
    Tensor fetched = sess.run({c})[0];
    fetched.as<float>()(0) = 99;
    CHECK_TENSOR(sess.run({c})[0], v);
  }
  SECTION("the constant through identity") {
    Tensor fetched = sess.run({i})[0];
    fetched.as<float>()(1) = 55;
    CHECK_TENSOR(sess.run({c})[0], v);
    CHECK_TENSOR(sess.run({i})[0], v);
  }
}

TEMPLATE_TEST_CASE("fill, zeros and ones", "[ops][array]", float, double, std::int32_t,
                   std::int64_t) {
  using T = TestType;
  constexpr DType dt = psflow::dtype_of<T>();
  Graph g;
  const Output f = ops::fill(g, dt, {2, 3}, 2.0);
  const Output z = ops::zeros(g, dt, {4});
  const Output o = ops::ones(g, dt, {3, 1, 2});
  const Output s = ops::fill(g, dt, {}, -7.0);
  CHECK(f.dtype() == dt);
  CHECK(f.shape() == PartialShape::of({2, 3}));
  CHECK(o.shape() == PartialShape::of({3, 1, 2}));
  CHECK(s.shape() == PartialShape::scalar());
  Session sess(g);
  const auto got = sess.run({f, z, o, s});
  CHECK_TENSOR(got[0], values<T>({2, 3}, std::vector<T>(6, T(2))));
  CHECK_TENSOR(got[1], xt::xarray<T>(xt::zeros<T>({4})));
  CHECK_TENSOR(got[2], xt::xarray<T>(xt::ones<T>({3, 1, 2})));
  CHECK_TENSOR(got[3], scalar_array<T>(T(-7)));
}

TEMPLATE_TEST_CASE("identity and reshape keep the elements", "[ops][array]", float, std::int64_t) {
  using T = TestType;
  const auto a = pattern<T>({2, 3, 4}, 6);
  Graph g;
  const Output x = constant(g, a, "x");
  struct Case {
    Dims target;
    Shape want;
  };
  const std::vector<Case> cases = {
      {{4, 6}, {4, 6}}, {{-1, 4}, {6, 4}},       {{2, -1}, {2, 12}},       {{24}, {24}},
      {{-1}, {24}},     {{3, -1, 2}, {3, 4, 2}}, {{1, 24, 1}, {1, 24, 1}}, {{2, 3, 4}, {2, 3, 4}},
  };
  std::vector<Output> fetches = {ops::identity(x)};
  CHECK(fetches[0].shape() == PartialShape::of({2, 3, 4}));
  CHECK(fetches[0].dtype() == psflow::dtype_of<T>());
  for (const auto& c : cases) {
    fetches.push_back(ops::reshape(x, c.target));
    CHECK(fetches.back().shape() == PartialShape::of_shape(c.want));  // -1 resolved at build time
  }
  Session sess(g);
  const auto got = sess.run(fetches);
  CHECK_TENSOR(got[0], a);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("reshape to " << psflow::shape_string(cases[i].target));
    CHECK_TENSOR(got[i + 1], xt::xarray<T>(xt::reshape_view(a, cases[i].want)));
  }

  SECTION("a one-element tensor reshapes to a scalar and back") {
    Graph h;
    const Output one = constant(h, values<T>({1, 1}, {T(5)}), "one");
    const Output scalar = ops::reshape(one, {});
    const Output back = ops::reshape(scalar, {1, -1, 1});
    CHECK(scalar.shape() == PartialShape::scalar());
    CHECK(back.shape() == PartialShape::of({1, 1, 1}));
    Session s(h);
    const auto r = s.run({scalar, back});
    CHECK_TENSOR(r[0], scalar_array<T>(T(5)));
    CHECK_TENSOR(r[1], values<T>({1, 1, 1}, {T(5)}));
  }
}

TEST_CASE("placeholders take their values from the feeds", "[ops][array]") {
  Graph g;
  const Output p = ops::placeholder(g, DType::float32, {-1, 3}, "p");
  const Output q = ops::placeholder(g, DType::int32, {}, "q");
  const Output y = p * 2.0 + ops::constant(g, Tensor(xt::xarray<float>{1, 2, 3}));
  const Output r = ops::reshape(p, {-1});
  CHECK(p.shape() == PartialShape::of({-1, 3}));
  CHECK(y.shape() == PartialShape::of({-1, 3}));
  CHECK(r.shape() == PartialShape::of({-1}));
  Session sess(g);
  for (const std::size_t rows : {1u, 2u, 5u}) {
    INFO(rows << " rows");
    const auto v = pattern<float>({rows, 3}, static_cast<int>(rows));
    const auto got = sess.run({y, r, ops::identity(p)}, {{p, Tensor(v)}});
    CHECK_TENSOR(got[0], xt::xarray<float>(v * 2.0f + xt::xarray<float>{1, 2, 3}));
    CHECK_TENSOR(got[1], xt::xarray<float>(xt::reshape_view(v, Shape{rows * 3})));
    CHECK_TENSOR(got[2], v);
  }
  CHECK_TENSOR(sess.run({q * 3.0}, {{q, Tensor(std::int32_t{-4})}})[0],
               scalar_array<std::int32_t>(-12));

  SECTION("a missing or mismatched feed is an InvalidArgument naming the placeholder") {
    CHECK_THAT(invalid_argument_message([&] { sess.run({y}); }), Contains("'p'"));
    CHECK_THAT(invalid_argument_message([&] {
                 sess.run({y}, {{p, Tensor(pattern<float>({2, 4}))}});
               }),
               Contains("'p'") && Contains("[2,4]") && Contains("[?,3]"));
    CHECK_THAT(invalid_argument_message([&] {
                 sess.run({y}, {{p, Tensor(pattern<double>({2, 3}))}});
               }),
               Contains("'p'") && Contains("float64"));
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax cross-entropy

namespace {
// -sum(labels * log(softmax(logits))) per row, computed naively in double (moderate logits only).
template <class T>
xt::xarray<T> reference_softmax_xent(const xt::xarray<T>& labels, const xt::xarray<T>& logits) {
  const std::size_t batch = logits.shape()[0], classes = logits.shape()[1];
  auto loss = xt::xarray<T>::from_shape(Shape{batch});
  for (std::size_t r = 0; r < batch; ++r) {
    double z = 0;
    for (std::size_t c = 0; c < classes; ++c) z += std::exp(static_cast<double>(logits(r, c)));
    double l = 0;
    for (std::size_t c = 0; c < classes; ++c)
      l -= static_cast<double>(labels(r, c)) *
           std::log(std::exp(static_cast<double>(logits(r, c))) / z);
    loss(r) = static_cast<T>(l);
  }
  return loss;
}
}  // namespace

TEMPLATE_TEST_CASE("softmax_cross_entropy_with_logits gives the loss per row", "[ops][nn]", float,
                   double) {
  using T = TestType;
  const auto logits = pattern<T>({4, 5}, 3);
  // One-hot rows, a uniform row and a soft row: each row sums to one.
  const auto labels = values<T>({4, 5}, {1,   0,   0,   0,    0,    //
                                         0,   0,   0,   1,    0,    //
                                         0.2, 0.2, 0.2, 0.2,  0.2,  //
                                         0.1, 0.0, 0.5, 0.25, 0.15});
  Graph g;
  const Output loss = ops::softmax_cross_entropy_with_logits(constant(g, labels, "labels"),
                                                             constant(g, logits, "logits"));
  CHECK(loss.dtype() == psflow::dtype_of<T>());
  CHECK(loss.shape() == PartialShape::of({4}));
  Session sess(g);
  CHECK_TENSOR(sess.run({loss})[0], reference_softmax_xent(labels, logits), 1e-5);

  SECTION("large logits stay finite") {
    Graph h;
    const auto big = values<T>({4, 3}, {1000, 0, -1000,    //
                                        1000, 0, -1000,    //
                                        1000, 1000, 1000,  //
                                        -1000, -1000, -999});
    const auto lab = values<T>({4, 3}, {1, 0, 0,          //
                                        0, 1, 0,          //
                                        0.5, 0.25, 0.25,  //
                                        0, 0, 1});
    const Output l = ops::softmax_cross_entropy_with_logits(constant(h, lab, "labels"),
                                                            constant(h, big, "logits"));
    Session s(h);
    const Tensor got = s.run({l})[0];
    for (T v : got.values<T>()) CHECK(std::isfinite(v));
    // Row 3: equal logits, loss = log(3) whatever the labels; row 4: logits (-1000,-1000,-999)
    // are (0,0,1) shifted, so loss = log(2 + e) - 1.
    const double log3 = std::log(3.0);
    const double row4 = std::log(2 + std::exp(1.0)) - 1;
    CHECK_TENSOR(got, values<T>({4}, {0, 1000, static_cast<T>(log3), static_cast<T>(row4)}), 1e-5);
  }

  SECTION("placeholders with an unknown batch keep it unknown") {
    Graph h;
    const Output lab = ops::placeholder(h, psflow::dtype_of<T>(), {-1, 5}, "labels");
    const Output lg = ops::placeholder(h, psflow::dtype_of<T>(), {-1, -1}, "logits");
    const Output l = ops::softmax_cross_entropy_with_logits(lab, lg);
    CHECK(l.shape() == PartialShape::of({-1}));
    Session s(h);
    CHECK_TENSOR(s.run({l}, {{lab, Tensor(labels)}, {lg, Tensor(logits)}})[0],
                 reference_softmax_xent(labels, logits), 1e-5);
  }
}

// ---------------------------------------------------------------------------------------------
// Sigmoid cross-entropy

TEMPLATE_TEST_CASE("sigmoid_cross_entropy_with_logits gives the element-wise logistic loss",
                   "[ops][nn]", float, double) {
  using T = TestType;
  // Expected: -z*log(sigmoid(x)) - (1-z)*log(1-sigmoid(x)) evaluated naively with Python's
  // decimal module at 60 digits (so independent of the kernel's stable formula), rounded to
  // float64. |x| = 100 would overflow or lose everything in the naive float formula.
  const auto logits = values<T>({3, 4}, {-100, -3.5, -1, -0.25,  //
                                         0, 0.25, 1, 3.5,        //
                                         100, 100, -100, 2});
  const auto labels = values<T>({3, 4}, {1, 0.3, 0, 1,     //
                                         0.5, 0, 0.75, 1,  //
                                         0, 1, 0, 0.2});
  const auto want = values<T>(
      {3, 4}, {100, static_cast<T>(1.0797504182726205), static_cast<T>(0.31326168751822281),
               static_cast<T>(0.82593941987884356), static_cast<T>(0.69314718055994529),
               static_cast<T>(0.82593941987884356), static_cast<T>(0.56326168751822281),
               static_cast<T>(0.029750418272620566), 100, static_cast<T>(3.7200759760208361e-44),
               static_cast<T>(3.7200759760208361e-44), static_cast<T>(1.7269280110429726)});
  Graph g;
  const Output loss = ops::sigmoid_cross_entropy_with_logits(constant(g, labels, "labels"),
                                                             constant(g, logits, "logits"));
  CHECK(loss.op().type() == "SigmoidCrossEntropyWithLogits");
  CHECK(loss.op().name() == "logistic_loss");
  CHECK(loss.dtype() == psflow::dtype_of<T>());
  CHECK(loss.shape() == PartialShape::of({3, 4}));
  Session sess(g);
  const Tensor got = sess.run({loss})[0];
  for (T v : got.values<T>()) CHECK(std::isfinite(v));
  CHECK_TENSOR(got, want, 1e-5);

  SECTION("placeholders with unknown dimensions take the known ones from each other") {
    Graph h;
    const Output lab = ops::placeholder(h, psflow::dtype_of<T>(), {-1, 4}, "labels");
    const Output lg = ops::placeholder(h, psflow::dtype_of<T>(), {3, -1}, "logits");
    const Output l = ops::sigmoid_cross_entropy_with_logits(lab, lg, "loss");
    CHECK(l.op().name() == "loss");
    CHECK(l.shape() == PartialShape::of({3, 4}));
    Session s(h);
    CHECK_TENSOR(s.run({l}, {{lab, Tensor(labels)}, {lg, Tensor(logits)}})[0], want, 1e-5);

    SECTION("fed tensors of different shapes fail at run time") {
      CHECK_THAT(invalid_argument_message([&] {
                   s.run({l}, {{lab, Tensor(pattern<T>({2, 4}))}, {lg, Tensor(logits)}});
                 }),
                 Contains("'loss'") && Contains("[3,4]") && Contains("[2,4]"));
    }
  }

  SECTION("a scalar and an empty tensor") {
    Graph h;
    const Output s0 = ops::sigmoid_cross_entropy_with_logits(constant(h, values<T>({}, {1})),
                                                             constant(h, values<T>({}, {-2})));
    const Output e =
        ops::sigmoid_cross_entropy_with_logits(constant(h, xt::xarray<T>::from_shape({0, 3})),
                                               constant(h, xt::xarray<T>::from_shape({0, 3})));
    Session s(h);
    const auto got2 = s.run({s0, e});
    // -log(sigmoid(-2)) = 2 + log(1 + e^-2)
    CHECK_TENSOR(got2[0], values<T>({}, {static_cast<T>(2.1269280110429726)}), 1e-5);
    CHECK(got2[1].shape() == Shape{0, 3});
  }
}

TEST_CASE("sigmoid cross-entropy shape and dtype mismatches fail at build time",
          "[ops][inference]") {
  Graph g;
  const Output a = constant(g, pattern<float>({2, 3}), "a");
  const Output row = constant(g, pattern<float>({3}), "row");
  const Output d = constant(g, pattern<double>({2, 3}), "d");
  const Output i = constant(g, pattern<std::int32_t>({2, 3}), "i");
  const Output p = ops::placeholder(g, DType::float32, {-1, 4}, "p");
  const auto before = g.num_nodes();
  // No broadcasting, unlike the element-wise math ops: TF1 requires one shape.
  CHECK_THAT(
      invalid_argument_message([&] { ops::sigmoid_cross_entropy_with_logits(row, a); }),
      Contains("'a:0' float32[2,3]") && Contains("'row:0' float32[3]") && Contains("same shape"));
  CHECK_THAT(invalid_argument_message([&] { ops::sigmoid_cross_entropy_with_logits(p, a); }),
             Contains("'p:0' float32[?,4]") && Contains("same shape"));
  CHECK_THAT(invalid_argument_message([&] { ops::sigmoid_cross_entropy_with_logits(d, a); }),
             Contains("'a:0' float32[2,3]") && Contains("'d:0' float64[2,3]"));
  CHECK_THAT(invalid_argument_message([&] { ops::sigmoid_cross_entropy_with_logits(i, i); }),
             Contains("'i:0' int32[2,3]"));
  CHECK(g.num_nodes() == before);
}

// ---------------------------------------------------------------------------------------------
// Random ops

namespace {
template <class T>
std::vector<double> sample(Output (*make)(Graph&, std::uint64_t, DType), std::uint64_t seed) {
  Graph g;
  const Output r = make(g, seed, psflow::dtype_of<T>());
  Session sess(g);
  const Tensor t = sess.run({r})[0];
  REQUIRE(t.dtype() == psflow::dtype_of<T>());
  REQUIRE(t.shape() == Shape{100, 100});
  std::vector<double> out;
  for (T v : t.values<T>()) out.push_back(static_cast<double>(v));
  return out;
}

Output make_normal(Graph& g, std::uint64_t seed, DType dt) {
  return ops::random_normal(g, {100, 100}, 2.0, 3.0, seed, dt);
}
Output make_uniform(Graph& g, std::uint64_t seed, DType dt) {
  return ops::random_uniform(g, {100, 100}, -2.0, 5.0, seed, dt);
}

void mean_stddev(const std::vector<double>& v, double& mean, double& stddev) {
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  mean = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - mean) * (x - mean);
  stddev = std::sqrt(s2 / static_cast<double>(v.size()));
}
}  // namespace

TEMPLATE_TEST_CASE("random_normal and random_uniform: seeded, in range, right moments",
                   "[ops][random]", float, double) {
  using T = TestType;
  double mean = 0, stddev = 0;

  SECTION("normal(2, 3)") {
    const auto a = sample<T>(make_normal, 42);
    CHECK(a == sample<T>(make_normal, 42));  // a fresh graph and session, same seed
    CHECK(a != sample<T>(make_normal, 43));
    mean_stddev(a, mean, stddev);
    CHECK(mean == Approx(2.0).margin(0.15));
    CHECK(stddev == Approx(3.0).margin(0.15));
    for (double x : a) CHECK(std::isfinite(x));
  }
  SECTION("uniform[-2, 5)") {
    const auto a = sample<T>(make_uniform, 7);
    CHECK(a == sample<T>(make_uniform, 7));
    CHECK(a != sample<T>(make_uniform, 8));
    std::size_t out_of_range = 0;
    for (double x : a) out_of_range += (x < -2.0 || x >= 5.0) ? 1 : 0;
    CHECK(out_of_range == 0);
    mean_stddev(a, mean, stddev);
    CHECK(mean == Approx(1.5).margin(0.15));
    CHECK(stddev == Approx(7.0 / std::sqrt(12.0)).margin(0.1));
  }
  SECTION("each run of a seeded op draws new values, the same sequence in every fresh session") {
    auto two_runs = [] {
      Graph g;
      const Output r = ops::random_uniform(g, {16}, 0.0, 1.0, 99, psflow::dtype_of<T>());
      Session sess(g);
      const Tensor first = sess.run({r})[0];
      const Tensor second = sess.run({r})[0];
      return std::make_pair(first, second);
    };
    const auto [a1, a2] = two_runs();
    const auto [b1, b2] = two_runs();
    CHECK_FALSE(a1.equals(a2));
    CHECK(a1.equals(b1));
    CHECK(a2.equals(b2));
  }
  SECTION("shape and dtype are known at build time; integer dtypes are rejected") {
    Graph g;
    const Output r = ops::random_normal(g, {3, 4}, 0, 1, 1, psflow::dtype_of<T>());
    CHECK(r.shape() == PartialShape::of({3, 4}));
    CHECK(r.dtype() == psflow::dtype_of<T>());
    CHECK_THROWS_AS(ops::random_uniform(g, {3}, 0, 1, 1, DType::int32), InvalidArgument);
  }
}

// TF keeps one kernel per stateful op per session, so a seeded op's sequence goes on whatever
// else a run fetches; it must not restart when the fetch list changes.
TEST_CASE("a seeded random op's sequence does not restart when the fetch list changes",
          "[ops][random]") {
  auto draws = [](bool vary_fetches) {
    Graph g;
    const Output r = ops::random_uniform(g, {8}, 0.0, 1.0, 5);
    const Output other = ops::constant(g, Tensor(1.0f));
    Session sess(g);
    std::vector<Tensor> out;
    out.push_back(sess.run({r})[0]);
    out.push_back(vary_fetches ? sess.run({r, other})[0] : sess.run({r})[0]);
    return out;
  };
  const auto same_fetches = draws(false);
  const auto varied_fetches = draws(true);
  CHECK(same_fetches[0].equals(varied_fetches[0]));
  CHECK_FALSE(varied_fetches[1].equals(varied_fetches[0]));  // got the first draw again
  CHECK(varied_fetches[1].equals(same_fetches[1]));
}

TEMPLATE_TEST_CASE("dropout keeps each element with probability keep_prob, scaled by its inverse",
                   "[ops][random][dropout]", float, double) {
  using T = TestType;
  Graph g;
  const std::size_t n = 20000;
  xt::xarray<T> x = pattern<T>({n / 100, 100});
  const Output input = ops::constant(g, Tensor(x));
  const Output keep_prob = ops::placeholder(g, psflow::dtype_of<T>(), {}, "keep_prob");
  const Output y = ops::dropout(input, keep_prob, 17);
  CHECK(y.shape() == PartialShape::of({static_cast<std::int64_t>(n / 100), 100}));
  const auto grad = psflow::train::gradients(ops::reduce_sum(y), {input})[0];
  Session sess(g);

  SECTION("keep_prob 1 passes x through unchanged") {
    CHECK(sess.run({y}, {{keep_prob, Tensor(T(1))}})[0].equals(Tensor(x)));
  }
  SECTION("keep_prob 0.25: a quarter kept, each times 4, a new mask every run") {
    const auto out = sess.run({y, grad}, {{keep_prob, Tensor(T(0.25))}});
    const T* py = out[0].data<T>();
    const T* pg = out[1].data<T>();
    std::size_t kept = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const bool keep = py[i] != T(0);
      kept += keep ? 1 : 0;
      if (keep) CHECK(py[i] == x.data()[i] / T(0.25));
      // The gradient of sum(y) is the scaled mask of the same run.
      CHECK(pg[i] == (keep ? T(4) : T(0)));
    }
    // 20000 Bernoulli(0.25) draws: the count is within 5 standard deviations (61) of 5000.
    CHECK(kept > 4700);
    CHECK(kept < 5300);
    const Tensor again = sess.run({y}, {{keep_prob, Tensor(T(0.25))}})[0];
    CHECK_FALSE(again.equals(out[0]));
  }
  SECTION("a keep_prob outside (0, 1] fails the run naming the op") {
    for (T bad : {T(0), T(-0.5), T(1.5)}) {
      INFO("keep_prob " << bad);
      CHECK_THROWS_AS(sess.run({y}, {{keep_prob, Tensor(bad)}}), InvalidArgument);
      CHECK_THROWS_WITH(sess.run({y}, {{keep_prob, Tensor(bad)}}),
                        Contains("Dropout") && Contains("(0, 1]"));
    }
  }
}

TEST_CASE("dropout's build-time errors name the op", "[ops][random][dropout]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {-1, 4});
  CHECK_THROWS_WITH(ops::dropout(x, 0.0), Contains("Dropout") && Contains("(0, 1]"));
  CHECK_THROWS_WITH(ops::dropout(x, 1.01), Contains("(0, 1]"));
  CHECK_THROWS_WITH(ops::dropout(x, ops::constant(g, Tensor(xt::xarray<float>{0.5f, 0.5f}))),
                    Contains("Dropout") && Contains("scalar"));
  CHECK_THROWS_WITH(ops::dropout(x, ops::constant(g, Tensor(0.5))),
                    Contains("Dropout") && Contains("same dtype"));
  const Output ints = ops::placeholder(g, DType::int32, {4});
  CHECK_THROWS_WITH(ops::dropout(ints, 0.5), Contains("Dropout") && Contains("float32 or float64"));
  CHECK(ops::dropout(x, 0.5).shape() == PartialShape::of({-1, 4}));
}

// ---------------------------------------------------------------------------------------------
// Shape and dtype inference at build time

TEST_CASE("broadcast and dtype mismatches fail at build time naming both inputs",
          "[ops][inference]") {
  Graph g;
  const Output x = constant(g, pattern<float>({2, 3}), "x");
  const Output y = constant(g, pattern<float>({4}), "y");
  const Output z = constant(g, pattern<double>({2, 3}), "z");
  const Output w = constant(g, pattern<float>({3, 3}), "w");
  const Output m = constant(g, pattern<double>({3, 2}), "m");
  const Output two = ops::scalar_like(z, 2.0);
  const Output p = ops::placeholder(g, DType::float32, {-1, 3}, "p");
  const std::size_t before = g.num_nodes();

  for (const auto& [what, fn] : std::vector<std::pair<const char*, std::function<Output()>>>{
           {"add", [&] { return ops::add(x, y); }},
           {"sub", [&] { return ops::sub(x, y); }},
           {"mul", [&] { return x * y; }},
           {"div", [&] { return x / y; }},
           {"maximum", [&] { return ops::maximum(x, y); }},
           {"minimum", [&] { return ops::minimum(x, y); }}}) {
    INFO(what);
    CHECK_THAT(invalid_argument_message(fn), Contains("'x:0'") && Contains("[2,3]") &&
                                                 Contains("'y:0'") && Contains("[4]") &&
                                                 Contains("broadcast"));
  }
  CHECK_THAT(invalid_argument_message([&] { ops::add(x, w); }),
             Contains("'x:0' float32[2,3]") && Contains("'w:0' float32[3,3]"));
  CHECK_THAT(invalid_argument_message([&] { ops::add(x, z); }),
             Contains("'x:0' float32[2,3]") && Contains("'z:0' float64[2,3]") && Contains("dtype"));
  CHECK_THAT(invalid_argument_message([&] { ops::matmul(x, m); }),
             Contains("'x:0' float32[2,3]") && Contains("'m:0' float64[3,2]"));
  CHECK_THAT(invalid_argument_message([&] { x* two; }),
             Contains("'x:0' float32[2,3]") && Contains("float64[]"));
  // A partially known shape still conflicts where its known dimensions do.
  CHECK_THAT(invalid_argument_message([&] { ops::add(p, y); }),
             Contains("'p:0' float32[?,3]") && Contains("'y:0' float32[4]"));
  CHECK(g.num_nodes() == before);
}

TEST_CASE("matmul, reshape, reduction and softmax mismatches fail at build time",
          "[ops][inference]") {
  Graph g;
  const Output a = constant(g, pattern<float>({2, 3}), "a");
  const Output b = constant(g, pattern<float>({4, 5}), "b");
  const Output v = constant(g, pattern<float>({3}), "v");
  const Output x = constant(g, pattern<float>({2, 3}), "x");

  SECTION("matmul inner dimensions") {
    CHECK_THAT(
        invalid_argument_message([&] { ops::matmul(a, b); }),
        Contains("'a:0' float32[2,3]") && Contains("'b:0' float32[4,5]") && Contains("3 == 4"));
    CHECK_THAT(invalid_argument_message([&] { ops::matmul(a, x); }),
               Contains("'a:0' float32[2,3]") && Contains("'x:0' float32[2,3]"));
    CHECK_THAT(invalid_argument_message([&] { ops::matmul(a, b, true, false); }),
               Contains("'a:0' float32[2,3] (transposed)") && Contains("'b:0' float32[4,5]") &&
                   Contains("2 == 4"));
    CHECK_THAT(invalid_argument_message([&] { ops::matmul(a, b, false, true); }),
               Contains("'a:0'") && Contains("'b:0' float32[4,5] (transposed)"));
    CHECK_THAT(
        invalid_argument_message([&] { ops::matmul(a, v); }),
        Contains("'a:0' float32[2,3]") && Contains("'v:0' float32[3]") && Contains("rank 2"));
    CHECK(ops::matmul(a, x, false, true).shape() == PartialShape::of({2, 2}));
    CHECK(ops::matmul(a, x, true, false).shape() == PartialShape::of({3, 3}));
  }
  SECTION("reshape to an incompatible shape") {
    CHECK_THAT(invalid_argument_message([&] { ops::reshape(x, {4}); }),
               Contains("'x:0' float32[2,3]") && Contains("[4]"));
    CHECK_THAT(invalid_argument_message([&] {
                 ops::reshape(x, {4, -1});
               }),
               Contains("'x:0' float32[2,3]") && Contains("[4,?]"));
    CHECK_THAT(invalid_argument_message([&] { ops::reshape(x, {-1, -1}); }), Contains("-1"));
    CHECK_THAT(invalid_argument_message([&] { ops::reshape(x, {0, -1}); }), Contains("'x:0'"));
    CHECK_THROWS_AS(ops::reshape(x, {-2, 3}), InvalidArgument);
  }
  SECTION("reduction axis out of range") {
    for (const int axis : {2, -3, 7}) {
      INFO("axis " << axis);
      CHECK_THAT(invalid_argument_message([&] { ops::reduce_sum(x, {axis}); }),
                 Contains("'x:0' float32[2,3]") && Contains("axis " + std::to_string(axis)));
      CHECK_THAT(invalid_argument_message([&] {
                   ops::reduce_mean(x, {0, axis}, true);
                 }),
                 Contains("'x:0' float32[2,3]") && Contains("axis " + std::to_string(axis)));
    }
  }
  SECTION("softmax cross-entropy shapes and dtypes") {
    CHECK_THAT(invalid_argument_message([&] { ops::softmax_cross_entropy_with_logits(a, b); }),
               Contains("'a:0' float32[2,3]") && Contains("'b:0' float32[4,5]"));
    CHECK_THAT(invalid_argument_message([&] { ops::softmax_cross_entropy_with_logits(v, v); }),
               Contains("'v:0' float32[3]"));
    const Output i = constant(g, pattern<std::int32_t>({2, 3}), "i");
    CHECK_THAT(invalid_argument_message([&] { ops::softmax_cross_entropy_with_logits(i, i); }),
               Contains("'i:0' int32[2,3]"));
  }
}

TEST_CASE("inferred output shapes keep unknown dimensions as -1", "[ops][inference]") {
  Graph g;
  const Output p = ops::placeholder(g, DType::float32, {-1, 3}, "p");
  const Output q = ops::placeholder(g, DType::float32, {-1, 1}, "q");
  const Output r = ops::placeholder(g, DType::float32, {5, 1}, "r");
  const Output u = ops::placeholder(g, DType::float32, {-1}, "u");
  const Output row = constant(g, pattern<float>({3}), "row");
  const Output wide = constant(g, pattern<float>({4}), "wide");
  const Output m = constant(g, pattern<float>({3, 4}), "m");

  CHECK(p.shape() == PartialShape::of({-1, 3}));
  CHECK(p.shape().rank() == 2);
  CHECK_FALSE(p.shape().fully_defined());
  CHECK((p + row).shape() == PartialShape::of({-1, 3}));
  CHECK((p * 2.0).shape() == PartialShape::of({-1, 3}));
  CHECK((q + wide).shape() == PartialShape::of({-1, 4}));
  CHECK((p + r).shape() == PartialShape::of({5, 3}));
  CHECK((p + q).shape() == PartialShape::of({-1, 3}));
  CHECK((u + u).shape() == PartialShape::of({-1}));
  CHECK((u + p).shape() == PartialShape::of({-1, 3}));
  CHECK(ops::sigmoid(p).shape() == PartialShape::of({-1, 3}));
  CHECK(ops::matmul(p, m).shape() == PartialShape::of({-1, 4}));
  CHECK(ops::matmul(m, p, true, true).shape() == PartialShape::of({4, -1}));
  CHECK(ops::matmul(p, p, true, false).shape() == PartialShape::of({3, 3}));
  CHECK(ops::reduce_sum(p).shape() == PartialShape::scalar());
  CHECK(ops::reduce_sum(p, {0}).shape() == PartialShape::of({3}));
  CHECK(ops::reduce_mean(p, {-1}, true).shape() == PartialShape::of({-1, 1}));
  CHECK(ops::reduce_mean(p, {}, true).shape() == PartialShape::of({1, 1}));
  CHECK(ops::reshape(p, {-1}).shape() == PartialShape::of({-1}));
  CHECK(ops::reshape(p, {3, -1}).shape() == PartialShape::of({3, -1}));
  CHECK(ops::identity(p).shape() == PartialShape::of({-1, 3}));

  // The shapes the kernels produce agree with what inference promised.
  Session sess(g);
  const Output sum = p + r;
  const auto got =
      sess.run({sum, ops::matmul(p, m), ops::reshape(p, {3, -1})},
               {{p, Tensor(pattern<float>({5, 3}))}, {r, Tensor(pattern<float>({5, 1}))}});
  CHECK(got[0].shape() == Shape{5, 3});
  CHECK(got[1].shape() == Shape{5, 4});
  CHECK(got[2].shape() == Shape{3, 5});
}

TEST_CASE("a runtime shape conflict behind unknown dimensions is an InvalidArgument",
          "[ops][inference]") {
  Graph g;
  const Output p = ops::placeholder(g, DType::float32, {-1, 3}, "p");
  const Output q = ops::placeholder(g, DType::float32, {-1, 3}, "q");
  const Output m = ops::placeholder(g, DType::float32, {-1, -1}, "m");
  Session sess(g);
  CHECK_THAT(invalid_argument_message([&] {
               sess.run({p + q},
                        {{p, Tensor(pattern<float>({2, 3}))}, {q, Tensor(pattern<float>({4, 3}))}});
             }),
             Contains("[2,3]") && Contains("[4,3]"));
  CHECK_THAT(invalid_argument_message([&] {
               sess.run({ops::matmul(p, m)},
                        {{p, Tensor(pattern<float>({2, 3}))}, {m, Tensor(pattern<float>({4, 3}))}});
             }),
             Contains("[2,3]") && Contains("[4,3]"));
  CHECK_THAT(invalid_argument_message([&] {
               sess.run({ops::reshape(m, {-1, 5})}, {{m, Tensor(pattern<float>({2, 3}))}});
             }),
             Contains("[2,3]"));
}
