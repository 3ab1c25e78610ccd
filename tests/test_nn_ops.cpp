// Model-building breadth ops: softmax, log_softmax, sparse softmax cross-entropy, softplus, elu,
// leaky_relu, l2_loss (nn family) and abs, sign, clip_by_value, reduce_max/min/prod,
// argmax/argmin and batch matmul (math family): values against numpy (literals pasted from
// numpy), build-time and run-time errors, and every gradient against central differences.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>
#include <xtensor/xarray.hpp>

#include "psflow/runtime.hpp"
#include "psflow/train/gradients.hpp"
#include "support/error_message.hpp"
#include "support/numeric_gradient.hpp"

namespace nn_ops_test {

using psflow::testing::invalid_argument_message;

namespace ops = psflow::ops;
namespace train = psflow::train;
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

// A constant of T from doubles, in `shape`.
template <class T>
Output constant(Graph& g, const Shape& shape, const std::vector<double>& flat) {
  std::vector<T> v(flat.begin(), flat.end());
  return ops::constant(g, Tensor::from_vector(v, shape));
}

Tensor run(Output o, const FeedMap& feeds = {}) {
  Session sess(o.graph());
  return sess.run({o}, feeds)[0];
}

std::vector<double> as_doubles(const Tensor& t) {
  return psflow::visit_numeric_dtype(t.dtype(), "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<double> out;
    for (T v : t.values<T>()) out.push_back(static_cast<double>(v));
    return out;
  });
}

// got has dtype T, shape `shape` and the values `want` (relative tolerance by T; NaN == NaN).
template <class T>
void expect_values(const Tensor& got, const Shape& shape, const std::vector<double>& want) {
  REQUIRE(got.dtype() == psflow::dtype_of<T>());
  REQUIRE(got.shape() == shape);
  const auto values = as_doubles(got);
  REQUIRE(values.size() == want.size());
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-12;
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << values[i] << ", want " << want[i]);
    if (std::isnan(want[i]))
      CHECK(std::isnan(values[i]));
    else if (std::isinf(want[i]))
      CHECK(values[i] == want[i]);
    else
      CHECK(std::abs(values[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i])));
  }
}

// o times fixed random weights of o's shape (so that, e.g., softmax's sum is not constant).
Output weighted(Output o, std::uint64_t seed = 77) {
  const auto shape = o.shape();
  if (!shape.fully_defined()) return ops::square(o);
  Random r(seed);
  return o * ops::constant(o.graph(), Tensor(r.array(shape.to_shape(), 0.5, 1.5)));
}

// The gradient of sum(y) with respect to x at `value` (a float64 placeholder).
std::vector<double> gradient_at(const std::function<Output(Output)>& f, const Shape& shape,
                                const std::vector<double>& value) {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, Dims(shape.begin(), shape.end()), "x");
  const Output y = f(x);
  const auto grads = train::gradients(y, {x});
  Session sess(g);
  return as_doubles(sess.run(grads, {{x, Tensor::from_vector(value, shape)}})[0]);
}

// ---------------------------------------------------------------------------------------------
// Softmax and LogSoftmax

TEMPLATE_TEST_CASE("softmax and log_softmax over the last axis match numpy", "[nn_ops]", float,
                   double) {
  Graph g;
  const Output x = constant<TestType>(g, {2, 3}, {1, 2, 3, -1, 0, 5});
  expect_values<TestType>(run(ops::softmax(x)), {2, 3},
                          {0.09003057317038043, 0.24472847105479767, 0.6652409557748218,
                           0.0024561149044509535, 0.006676412513376451, 0.9908674725821726});
  expect_values<TestType>(run(ops::log_softmax(x)), {2, 3},
                          {-2.4076059644443806, -1.4076059644443804, -0.40760596444438035,
                           -6.0091744845917345, -5.0091744845917345, -0.009174484591734727});

  SECTION("rank 3 and rank 1 normalise over the last axis") {
    const Output x3 = constant<TestType>(g, {2, 1, 3}, {1, 2, 3, -1, 0, 5});
    const Tensor s = run(ops::softmax(x3));
    CHECK(s.shape() == Shape{2, 1, 3});
    expect_values<TestType>(run(ops::softmax(constant<TestType>(g, {3}, {1, 2, 3}))), {3},
                            {0.09003057317038043, 0.24472847105479767, 0.6652409557748218});
    expect_values<TestType>(run(ops::reshape(ops::softmax(x3), {2, 3})), {2, 3},
                            {0.09003057317038043, 0.24472847105479767, 0.6652409557748218,
                             0.0024561149044509535, 0.006676412513376451, 0.9908674725821726});
  }
  SECTION("large logits (1000) stay finite: the row maximum is subtracted first") {
    const Output big = constant<TestType>(g, {2, 3}, {1000, 1001, 1002, -1000, 0, 1000});
    expect_values<TestType>(
        run(ops::softmax(big)), {2, 3},
        {0.09003057317038043, 0.24472847105479767, 0.6652409557748218, 0, 0, 1});
    expect_values<TestType>(
        run(ops::log_softmax(big)), {2, 3},
        {-2.4076059644443806, -1.4076059644443804, -0.40760596444438035, -2000, -1000, 0});
  }
  SECTION("empty tensors") {
    for (const Shape& shape : {Shape{0, 3}, Shape{2, 0}}) {
      const Output e = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), shape));
      CHECK(run(ops::softmax(e)).shape() == shape);
      CHECK(run(ops::log_softmax(e)).shape() == shape);
    }
  }
}

TEST_CASE("softmax and log_softmax reject scalars and integers when the graph is built",
          "[nn_ops]") {
  Graph g;
  const Output scalar = ops::constant(g, Tensor(1.0), "s");
  CHECK_THAT(invalid_argument_message([&] { ops::softmax(scalar); }),
             Contains("Softmax") && Contains("rank >= 1") && Contains("'s:0'"));
  const Output ints = constant<std::int32_t>(g, {2}, {1, 2});
  CHECK_THAT(invalid_argument_message([&] { ops::log_softmax(ints); }),
             Contains("LogSoftmax") && Contains("float32 or float64"));
  const Output x = ops::placeholder(g, DType::float32, {-1, 4});
  CHECK(ops::softmax(x).shape().dims == Dims{-1, 4});
}

TEST_CASE("softmax and log_softmax gradients match central differences", "[nn_ops]") {
  Random r(11);
  for (int axis_rank : {1, 2, 3}) {
    DYNAMIC_SECTION("rank " << axis_rank) {
      const Shape shape = axis_rank == 1 ? Shape{4} : axis_rank == 2 ? Shape{3, 4} : Shape{2, 2, 3};
      check_gradients(
          [](Graph&, const std::vector<Output>& in) { return weighted(ops::softmax(in[0])); },
          {Arg{r.array(shape, -2, 2)}});
      check_gradients(
          [](Graph&, const std::vector<Output>& in) { return weighted(ops::log_softmax(in[0])); },
          {Arg{r.array(shape, -2, 2)}});
    }
  }
  SECTION("an unknown batch") {
    check_gradients(
        [](Graph&, const std::vector<Output>& in) { return ops::square(ops::softmax(in[0])); },
        {Arg{r.array({3, 4}, -2, 2), Dims{-1, 4}}});
  }
}

// ---------------------------------------------------------------------------------------------
// SparseSoftmaxCrossEntropyWithLogits

TEMPLATE_TEST_CASE("sparse softmax cross-entropy matches numpy, int32 and int64 labels", "[nn_ops]",
                   float, double) {
  Graph g;
  const Output logits = constant<TestType>(g, {3, 3}, {1, 2, 3, 1, 1, 1, -2, 0, 2});
  const std::vector<double> want = {0.40760596444438035, 1.0986122886681096, 2.1429316284998996};
  const Output l32 = constant<std::int32_t>(g, {3}, {2, 0, 1});
  const Output l64 = constant<std::int64_t>(g, {3}, {2, 0, 1});
  expect_values<TestType>(run(ops::sparse_softmax_cross_entropy_with_logits(l32, logits)), {3},
                          want);
  expect_values<TestType>(run(ops::sparse_softmax_cross_entropy_with_logits(l64, logits)), {3},
                          want);

  SECTION("large logits stay finite") {
    const Output big = constant<TestType>(g, {2, 2}, {1000, 0, -1000, 1000});
    const Output labels = constant<std::int64_t>(g, {2}, {1, 1});
    expect_values<TestType>(run(ops::sparse_softmax_cross_entropy_with_logits(labels, big)), {2},
                            {1000, 0});
  }
  SECTION("an empty batch") {
    const Output e = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {0, 3}));
    const Output labels = ops::constant(g, Tensor(DType::int64, {0}));
    CHECK(run(ops::sparse_softmax_cross_entropy_with_logits(labels, e)).shape() == Shape{0});
  }
}

TEST_CASE("sparse softmax cross-entropy: a label out of range fails the step naming it",
          "[nn_ops]") {
  Graph g;
  const Output logits = constant<float>(g, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Output labels = ops::placeholder(g, DType::int64, {2}, "labels");
  const Output loss = ops::sparse_softmax_cross_entropy_with_logits(labels, logits, "xent");
  Session sess(g);
  for (std::int64_t bad : {3, -1}) {
    const auto msg = invalid_argument_message([&] {
      sess.run({loss}, {{labels, Tensor::from_vector(std::vector<std::int64_t>{0, bad}, {2})}});
    });
    CHECK_THAT(msg, Contains("xent") && Contains(std::to_string(bad)) && Contains("[0, 3)"));
  }
}

TEST_CASE("sparse softmax cross-entropy checks shapes and dtypes when the graph is built",
          "[nn_ops]") {
  Graph g;
  const Output logits = ops::placeholder(g, DType::float32, {3, 4}, "logits");
  const Output labels2 = ops::placeholder(g, DType::int64, {2}, "labels");
  CHECK_THAT(invalid_argument_message(
                 [&] { ops::sparse_softmax_cross_entropy_with_logits(labels2, logits); }),
             Contains("SparseSoftmaxCrossEntropyWithLogits") && Contains("batch size") &&
                 Contains("int64[2]") && Contains("float32[3,4]"));
  const Output float_labels = ops::placeholder(g, DType::float32, {3}, "flabels");
  CHECK_THAT(invalid_argument_message(
                 [&] { ops::sparse_softmax_cross_entropy_with_logits(float_labels, logits); }),
             Contains("int32 or int64") && Contains("flabels"));
  const Output matrix_labels = ops::placeholder(g, DType::int32, {3, 4}, "mlabels");
  CHECK_THAT(invalid_argument_message(
                 [&] { ops::sparse_softmax_cross_entropy_with_logits(matrix_labels, logits); }),
             Contains("labels must be [batch]"));
  const Output vector_logits = ops::placeholder(g, DType::float32, {3}, "vlogits");
  CHECK_THAT(invalid_argument_message([&] {
               ops::sparse_softmax_cross_entropy_with_logits(ops::placeholder(g, DType::int32, {3}),
                                                             vector_logits);
             }),
             Contains("[batch, classes]"));
  const Output unknown = ops::placeholder(g, DType::int32, {-1});
  const Output loss = ops::sparse_softmax_cross_entropy_with_logits(unknown, logits);
  CHECK(loss.shape().dims == Dims{3});
}

TEST_CASE("sparse softmax cross-entropy gradient reaches the logits only", "[nn_ops]") {
  Random r(21);
  const auto labels = Tensor::from_vector(std::vector<std::int32_t>{2, 0, 3, 3}, {4});
  check_gradients(
      [&](Graph& g, const std::vector<Output>& in) {
        return weighted(
            ops::sparse_softmax_cross_entropy_with_logits(ops::constant(g, labels), in[0]));
      },
      {Arg{r.array({4, 5}, -2, 2), Dims{-1, 5}}});

  Graph g;
  const Output l = ops::placeholder(g, DType::int32, {-1}, "labels");
  const Output logits = ops::placeholder(g, DType::float64, {-1, 5}, "logits");
  const auto grads = train::gradients(
      ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(l, logits)), {l});
  // Like an x that y does not depend on: zeros shaped like the labels.
  Session sess(g);
  const Tensor got = sess.run(grads, {{l, labels}, {logits, Tensor(r.array({4, 5}))}})[0];
  CHECK(got.equals(Tensor(DType::int32, {4})));
}

// ---------------------------------------------------------------------------------------------
// Softplus, Elu, LeakyRelu, L2Loss

TEMPLATE_TEST_CASE("softplus, elu, leaky_relu and l2_loss match numpy", "[nn_ops]", float, double) {
  Graph g;
  const Output s = constant<TestType>(g, {6}, {-30, -1, 0, 1, 30, 100});
  expect_values<TestType>(run(ops::softplus(s)), {6},
                          {9.3576229688397368e-14, 0.31326168751822286, 0.69314718055994529,
                           1.3132616875182228, 30.000000000000092, 100});
  const Output e = constant<TestType>(g, {5}, {-2, -0.5, 0, 0.5, 2});
  expect_values<TestType>(run(ops::elu(e)), {5},
                          {-0.8646647167633873, -0.3934693402873666, 0, 0.5, 2});
  expect_values<TestType>(run(ops::leaky_relu(e)), {5}, {-0.4, -0.1, 0, 0.5, 2});
  expect_values<TestType>(run(ops::leaky_relu(e, 0.01)), {5}, {-0.02, -0.005, 0, 0.5, 2});
  expect_values<TestType>(run(ops::l2_loss(constant<TestType>(g, {2, 2}, {1, 2, 3, -4}))), {},
                          {15});
  const Output empty = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {0, 2}));
  expect_values<TestType>(run(ops::l2_loss(empty)), {}, {0});
  CHECK(run(ops::softplus(empty)).shape() == Shape{0, 2});
  CHECK(run(ops::elu(empty)).shape() == Shape{0, 2});
  CHECK(run(ops::leaky_relu(empty)).shape() == Shape{0, 2});
  CHECK(ops::l2_loss(ops::placeholder(g, psflow::dtype_of<TestType>(), {-1, 3})).shape().dims ==
        Dims{});
}

TEST_CASE("softplus, elu, leaky_relu and l2_loss reject integers", "[nn_ops]") {
  Graph g;
  const Output ints = constant<std::int64_t>(g, {2}, {1, 2});
  for (auto [type, f] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"Softplus", [&] { ops::softplus(ints); }},
           {"Elu", [&] { ops::elu(ints); }},
           {"LeakyRelu", [&] { ops::leaky_relu(ints); }},
           {"L2Loss", [&] { ops::l2_loss(ints); }}})
    CHECK_THAT(invalid_argument_message(f), Contains(type) && Contains("float32 or float64"));
}

TEST_CASE("softplus, elu, leaky_relu and l2_loss gradients match central differences", "[nn_ops]") {
  Random r(31);
  const std::vector<std::pair<const char*, std::function<Output(Output)>>> cases = {
      {"Softplus", [](Output x) { return ops::softplus(x); }},
      {"Elu", [](Output x) { return ops::elu(x); }},
      {"LeakyRelu 0.2", [](Output x) { return ops::leaky_relu(x); }},
      {"LeakyRelu 0.01", [](Output x) { return ops::leaky_relu(x, 0.01); }},
      {"L2Loss", [](Output x) { return ops::l2_loss(x); }}};
  for (const auto& [label, f] : cases) {
    DYNAMIC_SECTION(label) {
      check_gradients([&](Graph&, const std::vector<Output>& in) { return weighted(f(in[0])); },
                      {Arg{r.away_from_zero({2, 3})}});
      check_gradients([&](Graph&, const std::vector<Output>& in) { return ops::square(f(in[0])); },
                      {Arg{r.away_from_zero({2, 3}), Dims{-1, 3}}});
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Abs, Sign, clip_by_value

TEMPLATE_TEST_CASE("abs and sign match numpy", "[nn_ops]", float, double, std::int32_t,
                   std::int64_t) {
  Graph g;
  const Output x = constant<TestType>(g, {2, 2}, {-3, 0, 4, -1});
  expect_values<TestType>(run(ops::abs(x)), {2, 2}, {3, 0, 4, 1});
  expect_values<TestType>(run(ops::sign(x)), {2, 2}, {-1, 0, 1, -1});
  const Output empty = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {0}));
  CHECK(run(ops::abs(empty)).shape() == Shape{0});
  if constexpr (std::is_floating_point_v<TestType>) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const Output f = constant<TestType>(g, {3}, {-2.5, nan, 0.5});
    expect_values<TestType>(run(ops::abs(f)), {3}, {2.5, nan, 0.5});
    expect_values<TestType>(run(ops::sign(f)), {3}, {-1, 0, 1});  // TF: 0 for NaN
  }
}

TEST_CASE("abs and sign gradients: sign(x) and zero", "[nn_ops]") {
  Random r(41);
  check_gradients([](Graph&, const std::vector<Output>& in) { return weighted(ops::abs(in[0])); },
                  {Arg{r.away_from_zero({2, 3})}});
  check_gradients([](Graph&, const std::vector<Output>& in) { return weighted(ops::sign(in[0])); },
                  {Arg{r.away_from_zero({2, 3})}});
  CHECK(gradient_at([](Output x) { return ops::sign(x); }, {3}, {-1, 0, 2}) ==
        std::vector<double>{0, 0, 0});
}

TEMPLATE_TEST_CASE("clip_by_value with number and tensor bounds", "[nn_ops]", float, double,
                   std::int32_t) {
  Graph g;
  const Output t = constant<TestType>(g, {5}, {-2, -1, 0, 1, 2});
  expect_values<TestType>(run(ops::clip_by_value(t, -1, 1)), {5}, {-1, -1, 0, 1, 1});
  const Output lo = constant<TestType>(g, {5}, {0, 0, 0, 0, 0});
  const Output hi = constant<TestType>(g, {}, {1});
  const Output clipped = ops::clip_by_value(t, lo, hi, "clip");
  CHECK(clipped.op().name() == "clip");
  expect_values<TestType>(run(clipped), {5}, {0, 0, 0, 1, 1});
}

TEST_CASE("clip_by_value's gradient passes where min <= t <= max", "[nn_ops]") {
  // Ties at the bounds pass, as TF's Minimum/Maximum gradients route ties to t.
  CHECK(gradient_at([](Output x) { return ops::clip_by_value(x, -1.0, 1.0); }, {6},
                    {-2, -1, 0, 0.5, 1, 3}) == std::vector<double>{0, 1, 1, 1, 1, 0});
  Random r(51);
  check_gradients(
      [](Graph&, const std::vector<Output>& in) {
        return weighted(ops::clip_by_value(in[0], in[1], in[2]));
      },
      {Arg{r.array({2, 3}, -2, 2)}, Arg{r.array({2, 3}, -1.0, -0.5)},
       Arg{r.array({2, 3}, 0.5, 1.0)}});
}

// ---------------------------------------------------------------------------------------------
// reduce_max, reduce_min, reduce_prod

TEMPLATE_TEST_CASE("reduce_max, reduce_min and reduce_prod match numpy", "[nn_ops]", float, double,
                   std::int32_t, std::int64_t) {
  Graph g;
  const Output x = constant<TestType>(g, {2, 3}, {1, 5, 3, 4, 2, 6});
  expect_values<TestType>(run(ops::reduce_max(x)), {}, {6});
  expect_values<TestType>(run(ops::reduce_min(x)), {}, {1});
  expect_values<TestType>(run(ops::reduce_prod(x)), {}, {720});
  expect_values<TestType>(run(ops::reduce_max(x, {0})), {3}, {4, 5, 6});
  expect_values<TestType>(run(ops::reduce_min(x, {0})), {3}, {1, 2, 3});
  expect_values<TestType>(run(ops::reduce_prod(x, {0})), {3}, {4, 10, 18});
  expect_values<TestType>(run(ops::reduce_max(x, {-1})), {2}, {5, 6});
  expect_values<TestType>(run(ops::reduce_min(x, {-1})), {2}, {1, 2});
  expect_values<TestType>(run(ops::reduce_prod(x, {-1})), {2}, {15, 48});
  expect_values<TestType>(run(ops::reduce_max(x, {1}, true)), {2, 1}, {5, 6});
  expect_values<TestType>(run(ops::reduce_min(x, {0, -1}, true)), {1, 1}, {1});
  expect_values<TestType>(run(ops::reduce_prod(x, {}, true)), {1, 1}, {720});

  SECTION("rank 3 over the middle axis") {
    const Output x3 = constant<TestType>(g, {2, 2, 2}, {1, 8, 3, 2, -5, 6, 7, -1});
    expect_values<TestType>(run(ops::reduce_max(x3, {1})), {2, 2}, {3, 8, 7, 6});
    expect_values<TestType>(run(ops::reduce_min(x3, {-2})), {2, 2}, {1, 2, -5, -1});
    expect_values<TestType>(run(ops::reduce_prod(x3, {1})), {2, 2}, {3, 16, -35, -6});
  }
  SECTION("empty tensors give TF's identities") {
    const Output e = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {0, 3}));
    const double lowest = std::is_floating_point_v<TestType>
                              ? -std::numeric_limits<double>::infinity()
                              : static_cast<double>(std::numeric_limits<TestType>::lowest());
    const double highest = std::is_floating_point_v<TestType>
                               ? std::numeric_limits<double>::infinity()
                               : static_cast<double>(std::numeric_limits<TestType>::max());
    expect_values<TestType>(run(ops::reduce_max(e, {0})), {3}, {lowest, lowest, lowest});
    expect_values<TestType>(run(ops::reduce_min(e, {0})), {3}, {highest, highest, highest});
    expect_values<TestType>(run(ops::reduce_prod(e, {0})), {3}, {1, 1, 1});
    CHECK(run(ops::reduce_max(e, {1})).shape() == Shape{0});
    expect_values<TestType>(run(ops::reduce_prod(e)), {}, {1});
  }
}

TEST_CASE("reduce_max and reduce_min propagate NaN, as numpy", "[nn_ops]") {
  Graph g;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Output x = constant<double>(g, {2, 2}, {1, nan, nan, -1});
  expect_values<double>(run(ops::reduce_max(x, {1})), {2}, {nan, nan});
  expect_values<double>(run(ops::reduce_min(x, {0})), {2}, {nan, nan});
}

TEST_CASE("reductions check their axes when the graph is built", "[nn_ops]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {2, 3}, "x");
  CHECK_THAT(invalid_argument_message([&] { ops::reduce_max(x, {2}); }),
             Contains("Max") && Contains("axis 2 is out of range") && Contains("'x:0'"));
  CHECK_THAT(invalid_argument_message([&] { ops::reduce_prod(x, {-3}); }),
             Contains("Prod") && Contains("axis -3"));
  const Output b = ops::placeholder(g, DType::boolean, {2}, "b");
  CHECK_THAT(invalid_argument_message([&] { ops::reduce_min(b); }),
             Contains("Min") && Contains("number"));
  CHECK(ops::reduce_max(ops::placeholder(g, DType::float32, {-1, 3}), {0}).shape().dims == Dims{3});
}

TEST_CASE("reduce_max and reduce_min gradients: split equally among the extreme elements",
          "[nn_ops]") {
  // Ties share the gradient equally, as TF's _MinOrMaxGrad.
  CHECK(gradient_at([](Output x) { return ops::reduce_max(x, {1}); }, {2, 3},
                    {2, 2, 1, 0, 3, -1}) == std::vector<double>{0.5, 0.5, 0, 0, 1, 0});
  CHECK(gradient_at([](Output x) { return ops::reduce_min(x); }, {2, 2}, {1, 1, 1, 5}) ==
        std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
  Random r(61);
  const std::vector<std::pair<std::vector<int>, bool>> cases = {
      {{}, false}, {{0}, false}, {{-1}, false}, {{1}, true}, {{0, 2}, true}, {{-2}, false}};
  for (const auto& [axes, keep] : cases) {
    for (bool max : {true, false}) {
      DYNAMIC_SECTION((max ? "max" : "min") << " over " << axes.size() << " axes starting "
                                            << (axes.empty() ? 99 : axes[0]) << " keep " << keep) {
        check_gradients(
            [&](Graph&, const std::vector<Output>& in) {
              return weighted(max ? ops::reduce_max(in[0], axes, keep)
                                  : ops::reduce_min(in[0], axes, keep));
            },
            {Arg{r.array({2, 3, 2}, -2, 2)}});
      }
    }
  }
  SECTION("an unknown batch") {
    check_gradients(
        [](Graph&, const std::vector<Output>& in) {
          return ops::square(ops::reduce_max(in[0], {1}));
        },
        {Arg{r.array({3, 4}), Dims{-1, 4}}});
  }
}

TEST_CASE("reduce_prod gradient, including zeros in the input", "[nn_ops]") {
  // Each element's gradient is the product of the others in its group, exact with zeros.
  CHECK(gradient_at([](Output x) { return ops::reduce_prod(x, {1}); }, {3, 3},
                    {0, 2, 3, 2, 0, 5, 0, 0, 4}) ==
        std::vector<double>{6, 0, 0, 0, 10, 0, 0, 0, 0});
  Random r(71);
  const std::vector<std::pair<std::vector<int>, bool>> cases = {
      {{}, false}, {{0}, false}, {{-1}, true}, {{0, 2}, false}, {{1}, false}};
  for (const auto& [axes, keep] : cases) {
    DYNAMIC_SECTION("over " << axes.size() << " axes starting " << (axes.empty() ? 99 : axes[0])
                            << " keep " << keep) {
      check_gradients(
          [&](Graph&, const std::vector<Output>& in) {
            return weighted(ops::reduce_prod(in[0], axes, keep));
          },
          {Arg{r.away_from_zero({2, 3, 2})}});
    }
  }
  SECTION("with zeros, against central differences") {
    xt::xarray<double> x = r.away_from_zero({2, 3});
    x(0, 1) = 0;
    x(1, 0) = 0;
    x(1, 2) = 0;
    check_gradients(
        [](Graph&, const std::vector<Output>& in) {
          return weighted(ops::reduce_prod(in[0], {1}));
        },
        {Arg{x}});
  }
}

// ---------------------------------------------------------------------------------------------
// ArgMax, ArgMin

TEMPLATE_TEST_CASE("argmax and argmin match numpy, ties pick the first index", "[nn_ops]", float,
                   double, std::int32_t, std::int64_t) {
  Graph g;
  const Output x = constant<TestType>(g, {2, 3}, {1, 5, 5, 7, 2, 7});
  expect_values<std::int64_t>(run(ops::argmax(x, 1)), {2}, {1, 0});
  expect_values<std::int64_t>(run(ops::argmin(x, 1)), {2}, {0, 1});
  expect_values<std::int64_t>(run(ops::argmax(x, -1)), {2}, {1, 0});
  expect_values<std::int64_t>(run(ops::argmax(x, 0)), {3}, {1, 0, 1});
  expect_values<std::int64_t>(run(ops::argmin(x, -2)), {3}, {0, 1, 0});
  const Output x3 = constant<TestType>(g, {2, 2, 2}, {1, 8, 3, 2, -5, 6, 7, -1});
  expect_values<std::int64_t>(run(ops::argmax(x3, 1)), {2, 2}, {1, 0, 1, 0});
  expect_values<std::int64_t>(run(ops::argmin(x3, 0)), {2, 2}, {1, 1, 0, 1});
  const Output empty = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {0, 3}));
  CHECK(run(ops::argmax(empty, 1)).shape() == Shape{0});
}

TEST_CASE("argmax and argmin errors: axis out of range, empty axis", "[nn_ops]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {2, 3}, "x");
  CHECK_THAT(invalid_argument_message([&] { ops::argmax(x, 2); }),
             Contains("ArgMax") && Contains("axis 2 is out of range") && Contains("'x:0'"));
  CHECK_THAT(invalid_argument_message([&] { ops::argmin(x, -3); }),
             Contains("ArgMin") && Contains("axis -3"));
  CHECK(ops::argmax(x, -1).dtype() == DType::int64);
  CHECK(ops::argmax(x, -1).shape().dims == Dims{2});
  const Output e = ops::constant(g, Tensor(DType::float32, {2, 0}));
  const Output am = ops::argmax(e, 1, "am");
  CHECK_THAT(invalid_argument_message([&] { run(am); }), Contains("am") && Contains("empty"));
}

TEST_CASE("argmax is not differentiable", "[nn_ops]") {
  for (const char* type : {"ArgMax", "ArgMin"}) {
    const auto fn = psflow::GradientRegistry::global().lookup(type);
    REQUIRE(fn.has_value());
    CHECK_FALSE(*fn);  // registered as not differentiable
  }
}

// ---------------------------------------------------------------------------------------------
// BatchMatMul

TEMPLATE_TEST_CASE("batch_matmul matches numpy for every adjoint combination", "[nn_ops]", float,
                   double, std::int32_t) {
  Graph g;
  // x = arange(12).reshape(2,2,3) - 5, y = arange(12).reshape(2,3,2) * 0.5 - 2 (times 2 for ints).
  const double scale = std::is_integral_v<TestType> ? 2 : 1;
  std::vector<double> xv(12), yv(12), xt(12), yt(12);
  for (int i = 0; i < 12; ++i) {
    xv[i] = i - 5;
    yv[i] = (i * 0.5 - 2) * scale;
  }
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) {
        xt[b * 6 + c * 2 + r] = xv[b * 6 + r * 3 + c];  // x^T: [2,3,2]
        yt[b * 6 + r * 3 + c] = yv[b * 6 + c * 2 + r];  // y^T: [2,2,3]
      }
  std::vector<double> want = {14, 8, 5, 3.5, 14, 17, 32, 39.5};
  for (auto& w : want) w *= scale;
  const Output x = constant<TestType>(g, {2, 2, 3}, xv), y = constant<TestType>(g, {2, 3, 2}, yv);
  const Output xT = constant<TestType>(g, {2, 3, 2}, xt), yT = constant<TestType>(g, {2, 2, 3}, yt);
  expect_values<TestType>(run(ops::batch_matmul(x, y)), {2, 2, 2}, want);
  expect_values<TestType>(run(ops::batch_matmul(xT, y, true, false)), {2, 2, 2}, want);
  expect_values<TestType>(run(ops::batch_matmul(x, yT, false, true)), {2, 2, 2}, want);
  expect_values<TestType>(run(ops::batch_matmul(xT, yT, true, true)), {2, 2, 2}, want);

  SECTION("ops::matmul builds BatchMatMul for rank > 2, MatMul for matrices") {
    const Output m = ops::matmul(x, yT, false, true);
    CHECK(m.op().type() == "BatchMatMul");
    expect_values<TestType>(run(m), {2, 2, 2}, want);
    const Output m2 = ops::matmul(constant<TestType>(g, {2, 2}, {1, 2, 3, 4}),
                                  constant<TestType>(g, {2, 2}, {1, 0, 0, 1}));
    CHECK(m2.op().type() == "MatMul");
  }
  SECTION("rank 4 and empty batches") {
    const Output x4 = ops::reshape(x, {2, 1, 2, 3}), y4 = ops::reshape(y, {2, 1, 3, 2});
    expect_values<TestType>(run(ops::batch_matmul(x4, y4)), {2, 1, 2, 2}, want);
    const Output ex = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {0, 2, 3}));
    const Output ey = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {0, 3, 2}));
    CHECK(run(ops::batch_matmul(ex, ey)).shape() == Shape{0, 2, 2});
    const Output zx = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {2, 2, 0}));
    const Output zy = ops::constant(g, Tensor(psflow::dtype_of<TestType>(), {2, 0, 2}));
    expect_values<TestType>(run(ops::batch_matmul(zx, zy)), {2, 2, 2}, std::vector<double>(8, 0));
  }
}

TEST_CASE("batch_matmul checks shapes when the graph is built and when it runs", "[nn_ops]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {2, 2, 3}, "x");
  CHECK_THAT(
      invalid_argument_message([&] {
        ops::batch_matmul(x, ops::placeholder(g, DType::float32, {3, 3, 2}, "y"));
      }),
      Contains("BatchMatMul") && Contains("batch dimension 0") && Contains("float32[3,3,2]"));
  CHECK_THAT(invalid_argument_message([&] {
               ops::batch_matmul(x, ops::placeholder(g, DType::float32, {2, 4, 2}, "y"));
             }),
             Contains("inner dimensions") && Contains("3 == 4"));
  CHECK_THAT(invalid_argument_message([&] {
               ops::batch_matmul(x, ops::placeholder(g, DType::float32, {3, 2}, "y"));
             }),
             Contains("same rank"));
  CHECK_THAT(invalid_argument_message([&] {
               ops::batch_matmul(x, ops::placeholder(g, DType::float64, {2, 3, 2}));
             }),
             Contains("same dtype"));
  CHECK_THAT(invalid_argument_message([&] {
               ops::matmul(x, ops::placeholder(g, DType::float32, {2, 4, 2}));
             }),
             Contains("BatchMatMul") && Contains("inner dimensions"));
  CHECK(ops::batch_matmul(x, ops::placeholder(g, DType::float32, {-1, 2, 5}), true, false)
            .shape()
            .dims == Dims{2, 3, 5});

  const Output px = ops::placeholder(g, DType::float32, {-1, 2, 3}, "px");
  const Output py = ops::placeholder(g, DType::float32, {-1, 3, 2}, "py");
  const Output p = ops::batch_matmul(px, py, false, false, "bmm");
  Session sess(g);
  CHECK_THAT(invalid_argument_message([&] {
               sess.run({p}, {{px, Tensor(DType::float32, {2, 2, 3})},
                              {py, Tensor(DType::float32, {3, 3, 2})}});
             }),
             Contains("bmm") && Contains("batch dimensions differ"));
}

TEST_CASE("batch_matmul gradients for every adjoint combination", "[nn_ops]") {
  Random r(81);
  for (bool ax : {false, true})
    for (bool ay : {false, true}) {
      DYNAMIC_SECTION("adj_x " << ax << " adj_y " << ay) {
        const Shape xs = ax ? Shape{2, 3, 2} : Shape{2, 2, 3};
        const Shape ys = ay ? Shape{2, 4, 3} : Shape{2, 3, 4};
        check_gradients(
            [&](Graph&, const std::vector<Output>& in) {
              return weighted(ops::batch_matmul(in[0], in[1], ax, ay));
            },
            {Arg{r.array(xs)}, Arg{r.array(ys)}});
        check_gradients(
            [&](Graph&, const std::vector<Output>& in) {
              return ops::square(ops::matmul(in[0], in[1], ax, ay));
            },
            {Arg{r.array(xs),
                 Dims{-1, static_cast<std::int64_t>(xs[1]), static_cast<std::int64_t>(xs[2])}},
             Arg{r.array(ys)}});
      }
    }
}

}  // namespace nn_ops_test
