// gradients(): every op's gradient is checked against central differences of sum(y) in float64
// (broadcasting, transposes, reductions, reshape, softmax and sigmoid cross-entropy, a 2-layer MLP
// with an unknown batch size), plus the walk's rules (several paths, unrelated xs,
// non-differentiable ops, placement and names), the helper ops' values, and
// get_or_create_global_step.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
#include <xtensor/xarray.hpp>

#include "psflow/graph/grad_ops.hpp"
#include "psflow/runtime.hpp"
#include "psflow/runtime/kernels/grad_kernels.hpp"
#include "psflow/train/global_step.hpp"
#include "psflow/train/gradients.hpp"
#include "psflow/train/replica_device_setter.hpp"
#include "support/error_message.hpp"
#include "support/numeric_gradient.hpp"

namespace ops = psflow::ops;
namespace train = psflow::train;
using Catch::Contains;
using psflow::DType;
using psflow::FeedMap;
using psflow::Graph;
using psflow::InvalidArgument;
using psflow::Operation;
using psflow::Output;
using psflow::Session;
using psflow::Shape;
using psflow::Tensor;

namespace {

using psflow::testing::Arg;
using psflow::testing::check_gradients;
using psflow::testing::close;
using psflow::testing::Dims;
using psflow::testing::dims_of;
using psflow::testing::expect_numeric_gradients;
using psflow::testing::invalid_argument_message;
using psflow::testing::Random;
using psflow::testing::shape_of;

// ---------------------------------------------------------------------------------------------
// Helpers

// o times fixed random weights of o's shape (so a wrong permutation of the gradient shows), or
// o squared when o's shape is not known before running.
Output weighted(Output o, std::uint64_t seed = 99) {
  const auto shape = o.shape();
  if (!shape.fully_defined()) return ops::square(o);
  Random r(seed);
  return o * ops::constant(o.graph(), Tensor(r.array(shape.to_shape(), 0.5, 1.5)));
}

bool has_op_type(const Graph& g, const std::string& type) {
  for (const auto& op : g.operations())
    if (op.type() == type) return true;
  return false;
}

std::string shape_name(const Shape& s) { return psflow::shape_string(s); }

// A test op without a gradient (identity in value), and one with a registered gradient (3x).
class PassThroughKernel : public psflow::OpKernel {
 public:
  explicit PassThroughKernel(const psflow::OpKernelConstruction&) {}
  void compute(psflow::OpKernelContext& ctx) override { ctx.set_output(0, ctx.input(0)); }
};
class TripleKernel : public psflow::OpKernel {
 public:
  explicit TripleKernel(const psflow::OpKernelConstruction&) {}
  void compute(psflow::OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    Tensor& out = ctx.allocate_output(0, x.dtype(), x.shape());
    for (std::size_t i = 0; i < x.size(); ++i) out.data<double>()[i] = 3 * x.data<double>()[i];
  }
};

const bool test_ops_registered = [] {
  for (const char* type : {"TestNoGradient", "TestTriple"})
    psflow::OpRegistry::global().add(
        psflow::OpDef{type, 1, {}, false, psflow::detail::same_as_input});
  psflow::KernelRegistry::global().add<PassThroughKernel>("TestNoGradient");
  psflow::KernelRegistry::global().add<TripleKernel>("TestTriple");
  train::GradientRegistry::global().add(
      "TestTriple", [](const Operation&, const std::vector<Output>& grads) -> std::vector<Output> {
        return {grads[0] * 3.0};
      });
  return true;
}();

Output test_op(const char* type, Output x, std::string_view name = "") {
  return psflow::detail::build_op(type, {x}, {}, name, type).output(0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Element-wise ops

TEST_CASE("gradients of broadcasting binary ops sum back over broadcast axes", "[gradients]") {
  struct BinaryCase {
    const char* name;
    Output (*fn)(Output, Output, std::string_view);
  };
  const std::vector<BinaryCase> cases = {{"Add", ops::add},         {"Sub", ops::sub},
                                         {"Mul", ops::mul},         {"RealDiv", ops::div},
                                         {"Maximum", ops::maximum}, {"Minimum", ops::minimum}};
  // (shape of x, shape of y, placeholder shapes); -1 dims make the sums run-time only.
  struct Shapes {
    Shape x, y;
    std::optional<Dims> px = std::nullopt, py = std::nullopt;
  };
  const std::vector<Shapes> shapes = {
      {{3, 1}, {1, 4}},
      {{2, 3}, {3}},
      {{}, {2, 3}},
      {{2, 3}, {}},
      {{2, 3}, {2, 3}},
      {{4}, {3, 1}},
      {{3, 1}, {1, 4}, Dims{-1, 1}, Dims{1, -1}},
      {{2, 3}, {3}, Dims{-1, 3}, std::nullopt},
      {{2, 3}, {2, 3}, Dims{-1, -1}, Dims{-1, 3}},
  };
  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    for (const auto& s : shapes) {
      DYNAMIC_SECTION(c.name << " " << shape_name(s.x) << " with " << shape_name(s.y)
                             << (s.px || s.py ? " (unknown dims)" : "")) {
        Random r(seed);
        const bool divides = std::string(c.name) == "RealDiv";
        Arg x{r.array(s.x), s.px};
        Arg y{divides ? r.away_from_zero(s.y) : r.array(s.y), s.py};
        check_gradients(
            [&](Graph&, const std::vector<Output>& in) { return weighted(c.fn(in[0], in[1], "")); },
            {x, y});
      }
      ++seed;
    }
  }
}

TEST_CASE("gradients of Maximum and Minimum route ties to x, like TF", "[gradients]") {
  Graph g;
  const Output x = ops::constant(g, Tensor(xt::xarray<double>{1.0, 2.0, 3.0}));
  const Output y = ops::constant(g, Tensor(xt::xarray<double>{1.0, 5.0, 0.0}));
  const auto max_grads = train::gradients(ops::maximum(x, y), {x, y});
  const auto min_grads = train::gradients(ops::minimum(x, y), {x, y});
  Session sess(g);
  const auto v = sess.run({max_grads[0], max_grads[1], min_grads[0], min_grads[1]});
  CHECK(v[0].equals(Tensor(xt::xarray<double>{1, 0, 1})));
  CHECK(v[1].equals(Tensor(xt::xarray<double>{0, 1, 0})));
  CHECK(v[2].equals(Tensor(xt::xarray<double>{1, 1, 0})));
  CHECK(v[3].equals(Tensor(xt::xarray<double>{0, 0, 1})));
}

TEST_CASE("gradients of unary ops match central differences", "[gradients]") {
  struct UnaryCase {
    const char* name;
    Output (*fn)(Output, std::string_view);
    int domain;  // 0: [-1, 1], 1: away from zero, 2: positive
  };
  const std::vector<UnaryCase> cases = {{"Neg", ops::neg, 0},     {"Square", ops::square, 0},
                                        {"Relu", ops::relu, 1},   {"Sigmoid", ops::sigmoid, 0},
                                        {"Tanh", ops::tanh, 0},   {"Exp", ops::exp, 0},
                                        {"Log", ops::log, 2},     {"Sqrt", ops::sqrt, 2},
                                        {"Rsqrt", ops::rsqrt, 2}, {"Identity", ops::identity, 0}};
  std::uint64_t seed = 100;
  for (const auto& c : cases) {
    for (bool unknown : {false, true}) {
      DYNAMIC_SECTION(c.name << (unknown ? " with an unknown batch" : "")) {
        Random r(seed);
        const Shape shape{2, 3};
        auto value = c.domain == 0   ? r.array(shape)
                     : c.domain == 1 ? r.away_from_zero(shape)
                                     : r.array(shape, 0.5, 2.0);
        const std::optional<Dims> ph = unknown ? std::optional<Dims>(Dims{-1, 3}) : std::nullopt;
        check_gradients(
            [&](Graph&, const std::vector<Output>& in) { return weighted(c.fn(in[0], "")); },
            {Arg{value, ph}});
      }
      ++seed;
    }
  }
}

TEST_CASE("Relu's gradient is zero where the unit is inactive", "[gradients]") {
  Graph g;
  const Output x = ops::constant(g, Tensor(xt::xarray<double>{-2.0, 0.5, 3.0}));
  const auto grads = train::gradients(ops::relu(x), {x});
  Session sess(g);
  CHECK(sess.run(grads)[0].equals(Tensor(xt::xarray<double>{0, 1, 1})));
}

// ---------------------------------------------------------------------------------------------
// MatMul, reductions, reshape, softmax cross-entropy

TEST_CASE("MatMul gradients for every transpose combination", "[gradients]") {
  std::uint64_t seed = 200;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (bool unknown : {false, true}) {
        DYNAMIC_SECTION("transpose_a=" << ta << " transpose_b=" << tb
                                       << (unknown ? " unknown dims" : "")) {
          Random r(seed);
          const Shape a = ta ? Shape{3, 2} : Shape{2, 3};
          const Shape b = tb ? Shape{4, 3} : Shape{3, 4};
          const std::optional<Dims> pa =
              unknown ? std::optional<Dims>(ta ? Dims{3, -1} : Dims{-1, 3}) : std::nullopt;
          const std::optional<Dims> pb = unknown ? std::optional<Dims>(Dims{-1, -1}) : std::nullopt;
          check_gradients(
              [&](Graph&, const std::vector<Output>& in) {
                return weighted(ops::matmul(in[0], in[1], ta, tb));
              },
              {Arg{r.array(a), pa}, Arg{r.array(b), pb}});
        }
        ++seed;
      }
    }
  }
}

TEST_CASE("Sum and Mean gradients over any axes, with keep_dims and negative axes", "[gradients]") {
  const std::vector<std::vector<int>> axes_sets = {{},     {0},      {1},     {2},      {-1},
                                                   {0, 2}, {-1, -3}, {1, -1}, {0, 1, 2}};
  std::uint64_t seed = 300;
  for (bool mean : {false, true}) {
    for (const auto& axes : axes_sets) {
      for (bool keep : {false, true}) {
        for (bool unknown : {false, true}) {
          std::ostringstream axes_text;
          for (int a : axes) axes_text << a << " ";
          DYNAMIC_SECTION((mean ? "Mean" : "Sum") << " axes {" << axes_text.str() << "} keep_dims="
                                                  << keep << (unknown ? " unknown dims" : "")) {
            Random r(seed);
            const std::optional<Dims> ph =
                unknown ? std::optional<Dims>(Dims{-1, 3, -1}) : std::nullopt;
            check_gradients(
                [&](Graph&, const std::vector<Output>& in) {
                  return weighted(mean ? ops::reduce_mean(in[0], axes, keep)
                                       : ops::reduce_sum(in[0], axes, keep));
                },
                {Arg{r.array({2, 3, 4}), ph}});
          }
          ++seed;
        }
      }
    }
  }
}

TEST_CASE("Sum gradient of a scalar input", "[gradients]") {
  Random r(350);
  check_gradients(
      [](Graph&, const std::vector<Output>& in) { return ops::reduce_sum(in[0]) * in[0]; },
      {Arg{r.array({})}});
}

TEST_CASE("Reshape gradients, with known and unknown input shapes", "[gradients]") {
  const std::vector<Dims> targets = {{6, 4}, {-1, 2}, {24}, {4, -1, 3}};
  const std::vector<Dims> inputs = {{2, 3, 4}, {-1, 3, 4}, {-1, -1, 4}};
  std::uint64_t seed = 400;
  for (const auto& target : targets) {
    for (const auto& input : inputs) {
      DYNAMIC_SECTION("to " << psflow::shape_string(target) << " from placeholder "
                            << psflow::shape_string(input)) {
        Random r(seed);
        check_gradients(
            [&](Graph&, const std::vector<Output>& in) {
              return weighted(ops::reshape(in[0], target));
            },
            {Arg{r.array({2, 3, 4}), input}});
      }
      ++seed;
    }
  }
  // Two unknown dims: only the run-time shape can undo the reshape.
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {-1, -1});
  const auto grads = train::gradients(ops::reshape(x, {-1}), {x});
  CHECK(grads[0].op().type() == "ReshapeToShapeOf");
}

TEST_CASE("softmax cross-entropy gradient backpropagates into logits", "[gradients]") {
  Random r(500);
  auto labels = r.array({4, 5}, 0.1, 1.0);
  for (std::size_t i = 0; i < 4; ++i) {
    double row = 0;
    for (std::size_t j = 0; j < 5; ++j) row += labels(i, j);
    for (std::size_t j = 0; j < 5; ++j) labels(i, j) /= row;
  }
  const auto weights = r.array({4}, 0.5, 1.5);
  check_gradients(
      [&](Graph& g, const std::vector<Output>& in) {
        const Output loss =
            ops::softmax_cross_entropy_with_logits(ops::constant(g, Tensor(labels)), in[0]);
        return loss * ops::constant(g, Tensor(weights));
      },
      {Arg{r.array({4, 5}, -2, 2), Dims{-1, 5}}});

  SECTION("labels get no gradient, as in TF1's softmax_cross_entropy_with_logits") {
    Graph g;
    const Output y = ops::placeholder(g, DType::float64, {-1, 5}, "labels");
    const Output logits = ops::placeholder(g, DType::float64, {-1, 5}, "logits");
    const auto grads =
        train::gradients(ops::reduce_mean(ops::softmax_cross_entropy_with_logits(y, logits)), {y});
    Session sess(g);
    const Tensor got = sess.run(grads, {{y, Tensor(labels)}, {logits, Tensor(r.array({4, 5}))}})[0];
    CHECK(got.equals(Tensor(DType::float64, {4, 5})));
  }
}

TEST_CASE("sigmoid cross-entropy gradients for logits and labels", "[gradients]") {
  Random r(510);
  // Logits up to +-4 and labels in [0, 1], both differentiated (TF's composed formula gives the
  // labels a gradient, -logits, too); an unknown batch dimension on the logits.
  check_gradients(
      [&](Graph&, const std::vector<Output>& in) {
        return weighted(ops::sigmoid_cross_entropy_with_logits(in[1], in[0]));
      },
      {Arg{r.array({3, 4}, -4, 4), Dims{-1, 4}}, Arg{r.array({3, 4}, 0, 1)}});

  SECTION("the analytic gradient at large logits: sigmoid(x) - z and -x, without overflow") {
    Graph g;
    const Output x = ops::placeholder(g, DType::float64, {4}, "logits");
    const Output z = ops::placeholder(g, DType::float64, {4}, "labels");
    const auto grads =
        train::gradients(ops::reduce_sum(ops::sigmoid_cross_entropy_with_logits(z, x)), {x, z});
    Session sess(g);
    xt::xarray<double> xv = {100, -100, 0, 2};
    xt::xarray<double> zv = {0, 0, 0.5, 1};
    const auto got = sess.run(grads, {{x, Tensor(xv)}, {z, Tensor(zv)}});
    const auto dx = got[0].values<double>();
    const auto dz = got[1].values<double>();
    const double want_dx[] = {1, 0, 0, 1 / (1 + std::exp(-2.0)) - 1};
    for (std::size_t i = 0; i < 4; ++i) {
      INFO("element " << i);
      CHECK(close(dx[i], want_dx[i], 1e-12));
      CHECK(close(dz[i], -xv(i), 1e-12));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A whole model

TEST_CASE("2-layer MLP: gradients of the mean loss wrt weights and biases, batch of -1",
          "[gradients]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {-1, 4}, "x");
  const Output labels = ops::placeholder(g, DType::float64, {-1, 3}, "labels");
  auto w1 = psflow::get_variable(g, "w1", {4, 5}, psflow::random_normal_initializer(0, 0.7, 1),
                                 DType::float64);
  auto b1 = psflow::get_variable(g, "b1", {5}, psflow::random_normal_initializer(0, 0.3, 2),
                                 DType::float64);
  auto w2 = psflow::get_variable(g, "w2", {5, 3}, psflow::random_normal_initializer(0, 0.7, 3),
                                 DType::float64);
  auto b2 = psflow::get_variable(g, "b2", {3}, psflow::random_normal_initializer(0, 0.3, 4),
                                 DType::float64);
  const Output hidden = ops::relu(ops::matmul(x, w1) + b1);
  const Output logits = ops::matmul(hidden, w2) + b2;
  const Output loss = ops::reduce_mean(ops::softmax_cross_entropy_with_logits(labels, logits));

  const std::vector<Output> params = {w1, b1, w2, b2};  // the "w/read" tensors
  const auto grads = train::gradients(loss, params);
  REQUIRE(grads.size() == 4);
  CHECK(grads[0].shape() == psflow::PartialShape::of({4, 5}));
  CHECK(grads[1].shape() == psflow::PartialShape::of({5}));
  CHECK(grads[2].shape() == psflow::PartialShape::of({5, 3}));
  CHECK(grads[3].shape() == psflow::PartialShape::of({3}));
  for (const auto& gr : grads) CHECK(gr.op().name().rfind("gradients/", 0) == 0);

  Session sess(g);
  sess.run(psflow::global_variables_initializer(g));
  const auto current = sess.run(params);
  Random r(600);
  auto label_values = xt::xarray<double>::from_shape({6, 3});
  label_values.fill(0);
  for (std::size_t i = 0; i < 6; ++i) label_values(i, i % 3) = 1;
  const FeedMap batch = {{x, Tensor(r.array({6, 4}, -2, 2))}, {labels, Tensor(label_values)}};
  // Feeding the variables' read tensors perturbs the weights without assigning them.
  expect_numeric_gradients(sess, loss, params, current, grads, batch);

  SECTION("the gradient wrt the variable reference equals the one wrt its read") {
    const auto via_ref = train::gradients(loss, {w1.ref()});
    const auto both = sess.run({via_ref[0], grads[0]}, batch);
    CHECK(both[0].equals(both[1]));
  }
}

// ---------------------------------------------------------------------------------------------
// The walk's rules

TEST_CASE("several paths to one tensor are summed: x*x + x", "[gradients]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {3}, "x");
  const Output y = x * x + x;
  const auto grads = train::gradients(y, {x});
  CHECK(grads[0].op().type() == "AddN");
  CHECK_FALSE(has_op_type(g, "SumToShapeOf"));  // equal static shapes need no reduction
  Session sess(g);
  const Tensor got = sess.run(grads, {{x, Tensor(xt::xarray<double>{-1.5, 0.0, 2.0})}})[0];
  CHECK(got.equals(Tensor(xt::xarray<double>{-2.0, 1.0, 5.0})));  // 2x + 1

  SECTION("a variable used by two layers, numerically") {
    Random r(700);
    check_gradients(
        [](Graph&, const std::vector<Output>& in) {
          const Output h = ops::tanh(ops::matmul(in[1], in[0]));
          return weighted(ops::matmul(h, in[0], false, true) + ops::reduce_sum(in[0] * in[0], {0}));
        },
        {Arg{r.array({3, 3})}, Arg{r.array({2, 3}), Dims{-1, 3}}});
  }
}

TEST_CASE("an x that y does not depend on gets zeros shaped like it", "[gradients]") {
  Graph g;
  const Output a = ops::placeholder(g, DType::float64, {2}, "a");
  const Output b = ops::placeholder(g, DType::float64, {-1, 3}, "b");
  const Output y = a * a;
  const auto grads = train::gradients(y, {a, b, a});
  CHECK(grads[1].op().type() == "ZerosLike");
  CHECK(grads[0] == grads[2]);
  Session sess(g);
  const auto v =
      sess.run(grads, {{a, Tensor(xt::xarray<double>{1, 2})}, {b, Tensor(DType::float64, {5, 3})}});
  CHECK(v[0].equals(Tensor(xt::xarray<double>{2, 4})));
  CHECK(v[1].equals(Tensor(DType::float64, {5, 3})));

  SECTION("y itself gets ones") {
    const auto self = train::gradients(y, {y});
    CHECK(sess.run(self, {{a, Tensor(xt::xarray<double>{1, 2})}})[0].equals(
        Tensor(xt::xarray<double>{1, 1})));
  }
  SECTION("a constant on the path stops the walk") {
    const Output c = ops::constant(g, Tensor(xt::xarray<double>{3, 4}));
    const auto grads_c = train::gradients(a * c, {a, c});
    const auto got = sess.run(grads_c, {{a, Tensor(xt::xarray<double>{1, 2})}});
    CHECK(got[0].equals(Tensor(xt::xarray<double>{3, 4})));
    CHECK(got[1].equals(Tensor(xt::xarray<double>{1, 2})));
  }
}

TEST_CASE("an op without a gradient on the path throws InvalidArgument naming it", "[gradients]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {2}, "x");
  const Output blocked = test_op("TestNoGradient", x, "blocker");
  const Output y = blocked * 2.0;
  const auto message = invalid_argument_message([&] { train::gradients(y, {x}); });
  CHECK_THAT(message,
             Contains("'blocker'") && Contains("TestNoGradient") && Contains("GradientRegistry"));

  SECTION("off the path it does not matter") {
    const Output c = test_op("TestNoGradient", ops::constant(g, Tensor(xt::xarray<double>{5, 7})));
    const auto grads = train::gradients(c * x, {x});
    Session sess(g);
    CHECK(sess.run(grads, {{x, Tensor(xt::xarray<double>{1, 1})}})[0].equals(
        Tensor(xt::xarray<double>{5, 7})));
  }
  SECTION("asking for the blocking op's own output is fine: the walk stops there") {
    const auto grads = train::gradients(y, {blocked});
    Session sess(g);
    CHECK(sess.run(grads, {{x, Tensor(xt::xarray<double>{1, 1})}})[0].equals(
        Tensor(xt::xarray<double>{2, 2})));
  }
}

TEST_CASE("a gradient registered for a new op is used by gradients()", "[gradients]") {
  Random r(800);
  check_gradients(
      [](Graph&, const std::vector<Output>& in) {
        return weighted(test_op("TestTriple", ops::square(in[0])));
      },
      {Arg{r.array({2, 2})}});
}

TEST_CASE("gradients() rejects bad arguments", "[gradients]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {2}, "x");
  const Output i = ops::placeholder(g, DType::int32, {2}, "i");
  CHECK_THAT(invalid_argument_message([&] { train::gradients(i, {x}); }),
             Contains("'i:0'") && Contains("int32"));
  CHECK_THAT(invalid_argument_message([&] { train::gradients(Output{}, {x}); }), Contains("empty"));
  CHECK_THAT(invalid_argument_message([&] { train::gradients(x * x, {Output{}}); }),
             Contains("xs[0]"));
  Graph other;
  const Output z = ops::placeholder(other, DType::float32, {2}, "z");
  CHECK_THAT(invalid_argument_message([&] { train::gradients(x * x, {z}); }),
             Contains("another Graph"));
}

TEST_CASE("float32 gradients keep float32", "[gradients]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float32, {-1, 2}, "x");
  const Output w = ops::constant(g, Tensor(xt::xarray<float>{{1.f, 2.f}, {3.f, 4.f}}));
  const auto grads = train::gradients(ops::reduce_mean(ops::sigmoid(ops::matmul(x, w))), {x});
  CHECK(grads[0].dtype() == DType::float32);
  Session sess(g);
  const Tensor got = sess.run(grads, {{x, Tensor(xt::xarray<float>{{0.f, 0.f}})}})[0];
  // d/dx mean(sigmoid(xw)) at 0: 0.25 * row sums of w / 2.
  CHECK(got.equals(Tensor(xt::xarray<float>{{0.375f, 0.875f}})));
}

TEST_CASE("gradient ops are named under gradients/ and placed with their forward op",
          "[gradients]") {
  Graph g;
  const Output x = ops::placeholder(g, DType::float64, {-1, 3}, "x");
  Output y;
  {
    auto device = g.device("/job:worker/task:1");
    y = ops::reduce_sum(ops::square(x) * 3.0, {}, false, "loss");
  }
  Output z;
  {
    auto device = g.device("/job:ps/task:0");
    z = ops::exp(y, "on_ps");
  }
  const auto grads = train::gradients(z, {x});
  std::size_t created = 0;
  for (const auto& op : g.operations()) {
    if (op.name().rfind("gradients/", 0) != 0) continue;
    ++created;
    INFO(op.name());
    if (op.name().rfind("gradients/on_ps_grad/", 0) == 0 || op.name() == "gradients/OnesLike")
      CHECK(op.device() == "/job:ps/task:0");
    else
      CHECK(op.device() == "/job:worker/task:1");
  }
  CHECK(created >= 4);
  CHECK(g.find_operation("gradients/Square_grad/mul"));
  CHECK(g.find_operation("gradients/loss_grad/BroadcastToShapeOf"));
  CHECK(grads[0].device() == "/job:worker/task:1");

  SECTION("a second call gets its own scope, and outer scopes fill what the op lacks") {
    auto outer = g.device("/job:worker/task:7/device:CPU:0");
    const auto again = train::gradients(ops::square(x, "sq"), {x});
    CHECK(again[0].op().name().rfind("gradients_1/sq_grad/", 0) == 0);
    CHECK(again[0].device() == "/job:worker/task:7/device:CPU:0");
  }
}

// ---------------------------------------------------------------------------------------------
// Helper ops on their own

TEST_CASE("SumToShapeOf, BroadcastToShapeOf and MeanGrad values", "[gradients][ops]") {
  Graph g;
  const Output grad = ops::constant(g, Tensor(xt::xarray<double>{{1, 2, 3}, {4, 5, 6}}));
  const Output like_row = ops::placeholder(g, DType::float64, {-1}, "like_row");
  const Output like_col = ops::placeholder(g, DType::float64, {-1, 1}, "like_col");
  const Output like_scalar = ops::constant(g, Tensor(0.0));
  const Output like_23 = ops::placeholder(g, DType::float64, {2, -1}, "like_23");
  const Output col = ops::constant(g, Tensor(xt::xarray<double>{10, 20}));
  const Output kept_col = ops::constant(g, Tensor::from_vector<double>({10, 20}, {2, 1}));
  const Output all = ops::constant(g, Tensor(6.0));
  const std::vector<Output> fetches = {ops::sum_to_shape_of(grad, like_row),
                                       ops::sum_to_shape_of(grad, like_col),
                                       ops::sum_to_shape_of(grad, like_scalar),
                                       ops::broadcast_to_shape_of(col, like_23, {1}, false),
                                       ops::broadcast_to_shape_of(kept_col, like_23, {-1}, true),
                                       ops::mean_grad(all, like_23, {}, false)};
  CHECK(fetches[1].shape() == psflow::PartialShape::of({-1, 1}));
  CHECK(fetches[3].shape() == psflow::PartialShape::of({2, -1}));
  Session sess(g);
  const FeedMap feeds = {{like_row, Tensor(DType::float64, {3})},
                         {like_col, Tensor(DType::float64, {2, 1})},
                         {like_23, Tensor(DType::float64, {2, 3})}};
  const auto v = sess.run(fetches, feeds);
  CHECK(v[0].equals(Tensor(xt::xarray<double>{5, 7, 9})));
  CHECK(v[1].equals(Tensor::from_vector<double>({6, 15}, {2, 1})));
  CHECK(v[2].equals(Tensor(21.0)));
  CHECK(v[3].equals(Tensor(xt::xarray<double>{{10, 10, 10}, {20, 20, 20}})));
  CHECK(v[4].equals(Tensor(xt::xarray<double>{{10, 10, 10}, {20, 20, 20}})));
  CHECK(v[5].equals(Tensor(xt::xarray<double>{{1, 1, 1}, {1, 1, 1}})));

  SECTION("shapes that do not match fail with InvalidArgument") {
    CHECK_THAT(invalid_argument_message([&] {
                 sess.run({ops::sum_to_shape_of(grad, like_row)},
                          {{like_row, Tensor(DType::float64, {2})}});
               }),
               Contains("SumToShapeOf") && Contains("[2]"));
    CHECK_THAT(invalid_argument_message([&] {
                 ops::sum_to_shape_of(grad, ops::constant(g, Tensor(DType::float64, {4})));
               }),
               Contains("does not broadcast"));
    CHECK_THAT(
        invalid_argument_message([&] { ops::broadcast_to_shape_of(grad, like_23, {1}, false); }),
        Contains("not a reduction"));
  }
}

TEST_CASE("ZerosLike, OnesLike and AddN", "[gradients][ops]") {
  Graph g;
  const Output x = ops::constant(g, Tensor(xt::xarray<std::int32_t>{{1, 2}, {3, 4}}));
  const Output sum = ops::add_n({x, x, ops::ones_like(x)});
  Session sess(g);
  const auto v = sess.run({ops::zeros_like(x), ops::ones_like(x), sum});
  CHECK(v[0].equals(Tensor(xt::xarray<std::int32_t>{{0, 0}, {0, 0}})));
  CHECK(v[1].equals(Tensor(xt::xarray<std::int32_t>{{1, 1}, {1, 1}})));
  CHECK(v[2].equals(Tensor(xt::xarray<std::int32_t>{{3, 5}, {7, 9}})));
  CHECK_THAT(invalid_argument_message([&] {
               ops::add_n({x, ops::constant(g, Tensor(xt::xarray<std::int32_t>{1, 2, 3}))});
             }),
             Contains("one shape"));
}

// ---------------------------------------------------------------------------------------------
// Global step

TEST_CASE("get_or_create_global_step creates one int64 scalar per graph",
          "[gradients][global_step]") {
  Graph g;
  const psflow::Variable first = train::get_or_create_global_step(g);
  const psflow::Variable second = train::get_or_create_global_step(g);
  CHECK(first == second);
  CHECK(first.name() == "global_step");
  CHECK(first.dtype() == DType::int64);
  CHECK(first.shape().empty());
  CHECK_FALSE(first.trainable());
  CHECK(psflow::trainable_variables(g).empty());
  Session sess(g);
  sess.run(psflow::global_variables_initializer(g));
  CHECK(sess.run({first})[0].scalar<std::int64_t>() == 0);

  SECTION("replica_device_setter puts it on a ps task") {
    Graph placed;
    auto setter = placed.device(train::replica_device_setter({.ps_tasks = 2}));
    CHECK(train::get_or_create_global_step(placed).device() == "/job:ps/task:0");
  }
  SECTION("a global_step of the wrong kind is refused") {
    Graph bad;
    psflow::get_variable(bad, "global_step", {2}, psflow::zeros_initializer());
    CHECK_THAT(invalid_argument_message([&] { train::get_or_create_global_step(bad); }),
               Contains("int64") && Contains("float32[2]"));
  }
}
