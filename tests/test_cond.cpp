// ops::cond (graph/cond.hpp) and the executor's dead values: the taken branch's results, an op
// of the untaken branch that would fail never running, nested conds, gradients through the
// taken branch only (against central differences), fetching the untaken side, the errors of
// a bad cond, and branches placed on a ps process: a dead value crosses tasks and nothing
// waits for the branch that did not run.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "psflow/psflow.hpp"
#include "support/local_cluster.hpp"
#include "support/numeric_gradient.hpp"

namespace cond_test {

using namespace psflow;
using Catch::Contains;

inline Output scalar_placeholder(Graph& g, DType dtype, const char* name) {
  return ops::placeholder(g, dtype, {}, name);
}

inline float run_float(Session& sess, const Output& y, const FeedMap& feeds) {
  return sess.run({y}, feeds)[0].scalar<float>();
}

TEST_CASE("cond returns the results of the branch pred picks") {
  Graph g;
  const Output pred = scalar_placeholder(g, DType::boolean, "pred");
  const Output x = ops::constant(g, Tensor(3.0f), "x");
  const auto out = ops::cond(
      pred,
      [&] {
        return std::vector<Output>{x * x, ops::constant(g, Tensor(std::int32_t{1}))};
      },
      [&] {
        return std::vector<Output>{x + 10.0, ops::constant(g, Tensor(std::int32_t{2}))};
      });
  REQUIRE(out.size() == 2);
  CHECK(out[0].dtype() == DType::float32);
  CHECK(out[0].op().type() == "Merge");
  Session sess(g);
  auto taken = sess.run(out, {{pred, Tensor(true)}});
  CHECK(taken[0].scalar<float>() == 9.0f);
  CHECK(taken[1].scalar<std::int32_t>() == 1);
  taken = sess.run(out, {{pred, Tensor(false)}});
  CHECK(taken[0].scalar<float>() == 13.0f);
  CHECK(taken[1].scalar<std::int32_t>() == 2);
}

TEST_CASE("an op of the untaken branch never executes") {
  Graph g;
  const Output pred = scalar_placeholder(g, DType::boolean, "pred");
  Variable true_runs = get_variable(g, "true_runs", {}, zeros_initializer(), DType::int32);
  Variable false_runs = get_variable(g, "false_runs", {}, zeros_initializer(), DType::int32);
  const Output one = ops::constant(g, Tensor(std::int32_t{1}));
  const auto out = ops::cond(
      pred,
      [&] {
        const Output counted = true_runs.assign_add(one);
        return std::vector<Output>{ops::cast(counted, DType::float32)};
      },
      [&] {
        // Fails whenever it runs: "not a number" is not a number.
        const Output parsed = ops::string_to_number(ops::constant(g, Tensor(std::string("nan?x"))));
        false_runs.assign_add(one);
        return std::vector<Output>{parsed};
      });
  Session sess(g);
  sess.run(global_variables_initializer(g));
  for (int i = 0; i < 3; ++i)
    CHECK(sess.run(out, {{pred, Tensor(true)}})[0].scalar<float>() == i + 1);
  CHECK(sess.run({true_runs.value()})[0].scalar<std::int32_t>() == 3);
  CHECK(sess.run({false_runs.value()})[0].scalar<std::int32_t>() == 0);
  // The same branch taken fails as it must: the test above shows it was skipped, not broken.
  CHECK_THROWS_AS(sess.run(out, {{pred, Tensor(false)}}), InvalidArgument);
  CHECK_THROWS_WITH(sess.run(out, {{pred, Tensor(false)}}), Contains("nan?x"));
}

TEST_CASE("nested conds pick one of four branches") {
  Graph g;
  const Output outer = scalar_placeholder(g, DType::boolean, "outer");
  const Output inner = scalar_placeholder(g, DType::boolean, "inner");
  const Output x = ops::placeholder(g, DType::float32, {2}, "x");
  const Output y = ops::cond(
      outer,
      [&] {
        return ops::cond(
            inner, [&] { return std::vector<Output>{x * 2.0}; },
            [&] { return std::vector<Output>{x * 3.0}; });
      },
      [&] {
        return ops::cond(
            inner, [&] { return std::vector<Output>{x + 1.0}; },
            [&] {
              return std::vector<Output>{ops::constant(g, Tensor::from_vector<float>({7, 7}))};
            });
      })[0];
  Session sess(g);
  const Tensor value = Tensor::from_vector<float>({1, 2});
  auto run = [&](bool o, bool i) {
    const auto v = sess.run({y}, {{outer, Tensor(o)}, {inner, Tensor(i)}, {x, value}})[0];
    return std::vector<float>(v.values<float>().begin(), v.values<float>().end());
  };
  CHECK(run(true, true) == std::vector<float>{2, 4});
  CHECK(run(true, false) == std::vector<float>{3, 6});
  CHECK(run(false, true) == std::vector<float>{2, 3});
  CHECK(run(false, false) == std::vector<float>{7, 7});
}

TEST_CASE("the gradient flows through the taken branch only") {
  Graph g;
  const Output pred = scalar_placeholder(g, DType::boolean, "pred");
  const Output x = ops::placeholder(g, DType::float64, {3}, "x");
  const Output w = ops::placeholder(g, DType::float64, {3}, "w");
  const Output y = ops::cond(
      pred, [&] { return std::vector<Output>{x * x * w}; },
      [&] { return std::vector<Output>{ops::sin(x) + w * 4.0}; })[0];
  const auto grads = train::gradients(y, {x, w});
  Session sess(g);
  testing::Random random(7);
  const std::vector<Tensor> values{Tensor(random.array({3})), Tensor(random.array({3}))};
  for (bool taken : {true, false}) {
    INFO("pred " << taken);
    testing::expect_numeric_gradients(sess, y, {x, w}, values, grads, {{pred, Tensor(taken)}});
  }
  // Nested: the inner cond's gradient reaches x only when both branches are taken.
  const Output z = ops::cond(
      pred,
      [&] {
        return ops::cond(
            ops::logical_not(pred), [&] { return std::vector<Output>{x * 5.0}; },
            [&] { return std::vector<Output>{x * x}; });
      },
      [&] { return std::vector<Output>{x * 0.0}; })[0];
  const Output dz = train::gradients(z, {x})[0];
  const auto at = [&](bool p) {
    const Tensor grad = sess.run({dz}, {{pred, Tensor(p)}, {x, values[0]}})[0];
    const auto v = grad.values<double>();
    return std::vector<double>(v.begin(), v.end());
  };
  const auto xs = values[0].values<double>();
  CHECK(at(true) == std::vector<double>{2 * xs[0], 2 * xs[1], 2 * xs[2]});
  CHECK(at(false) == std::vector<double>{0, 0, 0});
}

TEST_CASE("fetching a tensor of the untaken branch is an InvalidArgument saying so") {
  Graph g;
  const Output pred = scalar_placeholder(g, DType::boolean, "pred");
  const Output x = ops::constant(g, Tensor(2.0f), "x");
  Output inside;
  const Output y = ops::cond(
      pred,
      [&] {
        inside = x * 3.0;
        return std::vector<Output>{inside};
      },
      [&] { return std::vector<Output>{x}; })[0];
  Session sess(g);
  CHECK(sess.run({y, inside}, {{pred, Tensor(true)}})[1].scalar<float>() == 6.0f);
  CHECK_THROWS_AS(sess.run({y, inside}, {{pred, Tensor(false)}}), InvalidArgument);
  CHECK_THROWS_WITH(sess.run({y, inside}, {{pred, Tensor(false)}}),
                    Contains(inside.name()) && Contains("not taken"));
  CHECK(run_float(sess, y, {{pred, Tensor(false)}}) == 2.0f);
}

TEST_CASE("a bad cond is refused when it is built, naming what is wrong") {
  Graph g;
  const Output x = ops::constant(g, Tensor(1.0f), "x");
  const Output flag = ops::placeholder(g, DType::boolean, {2}, "flags");
  const auto one = [&] { return std::vector<Output>{x}; };
  CHECK_THROWS_AS(ops::cond(x, one, one), InvalidArgument);
  CHECK_THROWS_WITH(ops::cond(x, one, one), Contains("'x:0'") && Contains("scalar bool"));
  CHECK_THROWS_WITH(ops::cond(flag, one, one), Contains("flags:0") && Contains("scalar bool"));
  const Output pred = scalar_placeholder(g, DType::boolean, "pred");
  CHECK_THROWS_WITH(
      ops::cond(
          pred, [&] { return std::vector<Output>{x * 2.0}; },
          [&] { return std::vector<Output>{ops::constant(g, Tensor(std::int32_t{2}), "two")}; }),
      Contains("float32") && Contains("int32") && Contains("two") && Contains("true_fn") &&
          Contains("false_fn"));
  CHECK_THROWS_WITH(ops::cond(pred, one,
                              [&] {
                                return std::vector<Output>{x, x};
                              }),
                    Contains("true_fn returns 1") && Contains("false_fn 2"));
}

TEST_CASE("branches on a ps process: dead values cross tasks and nothing waits for them") {
  using namespace std::chrono_literals;
  testing::LocalCluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Output pred, y, on_ps;
  Variable v;
  Operation train_op;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    v = get_variable(g, "v", {}, constant_initializer(10));
    pred = scalar_placeholder(g, DType::boolean, "pred");
    y = ops::cond(
        pred,
        [&] {
          auto on_the_ps = g.device("/job:ps/task:0");
          on_ps = v.value() * 3.0;  // a branch op on the ps
          return std::vector<Output>{on_ps};
        },
        [&] { return std::vector<Output>{v.value() * 5.0}; })[0];
    train_op = train::GradientDescentOptimizer(1.0).minimize(y);
  }
  CHECK(on_ps.device() == "/job:ps/task:0");
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  RunOptions bounded;
  bounded.timeout_in_ms = 20000;  // a step waiting for the untaken branch would end here
  auto step = [&](bool p) {
    return sess.run(bounded, {y}, {{pred, Tensor(p)}}, {}, nullptr)[0].scalar<float>();
  };
  CHECK(step(true) == 30.0f);
  CHECK(step(false) == 50.0f);
  // Training through the cond: dy/dv is 3 or 5, whichever branch ran.
  sess.run({}, {{pred, Tensor(true)}}, {train_op});
  CHECK(sess.run({v.value()})[0].scalar<float>() == 7.0f);
  sess.run({}, {{pred, Tensor(false)}}, {train_op});
  CHECK(sess.run({v.value()})[0].scalar<float>() == 2.0f);
  // The Switch that gates the ps variable's value runs on the ps, next to it.
  auto plan = sess.describe({y}, {{pred, Tensor(false)}});
  REQUIRE(plan);
  bool switch_on_ps = false;
  for (const auto& [op, device] : plan->placement)
    if (g.operation(op).type() == "Switch" && g.operation(op).input(0) == v.value())
      switch_on_ps = device == "/job:ps/replica:0/task:0/device:CPU:0";
  CHECK(switch_on_ps);
  CHECK(worker.stop_job("ps") == 1);
  REQUIRE(cluster.ps[0]->wait_for(10s));
}

}  // namespace cond_test
