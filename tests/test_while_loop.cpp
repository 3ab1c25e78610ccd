// ops::while_loop (graph/while_loop.hpp) and the executor's frames: a counting loop, several
// loop variables, loop-invariant values, maximum_iterations, parallel_iterations (iterations
// pipelined, and bounded), nested loops, a loop in a cond's branch and a cond in a loop, 1000
// iterations, a traced loop's records, a loop that never ends stopped by RunOptions::timeout_in_ms,
// an op failing in an iteration, a ps variable read in the body (entered once), the errors of a bad
// loop, and a loop's graph shipped as a GraphDef.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "psflow/psflow.hpp"
#include "support/local_cluster.hpp"

namespace while_loop_test {

using namespace psflow;
using Catch::Contains;

inline Output scalar(Graph& g, double value) { return ops::constant(g, Tensor(value)); }

TEST_CASE("while_loop counts up while cond holds and returns the final values") {
  Graph g;
  const Output limit = ops::placeholder(g, DType::int32, {}, "limit");
  const auto out =
      ops::while_loop([&](const std::vector<Output>& v) { return ops::less(v[0], limit); },
                      [&](const std::vector<Output>& v) {
                        return std::vector<Output>{v[0] + 1.0, v[1] * 2.0};
                      },
                      {ops::constant(g, Tensor(std::int32_t{0})), scalar(g, 1.0)});
  REQUIRE(out.size() == 2);
  Session sess(g);
  auto run = [&](std::int32_t n) { return sess.run({out[0], out[1]}, {{limit, Tensor(n)}}); };
  auto r = run(10);
  CHECK(r[0].scalar<std::int32_t>() == 10);
  CHECK(r[1].scalar<double>() == 1024.0);
  r = run(0);  // cond false at once: the initial values
  CHECK(r[0].scalar<std::int32_t>() == 0);
  CHECK(r[1].scalar<double>() == 1.0);
  CHECK(run(3)[1].scalar<double>() == 8.0);  // the same executor, another step
}

TEST_CASE("values from outside the loop enter it once and are the same in every iteration") {
  Graph g;
  const Output step = ops::placeholder(g, DType::float64, {2}, "step");
  const Output x0 = ops::constant(g, Tensor::from_vector<double>({0, 0}));
  const auto out = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[1], scalar(g, 5.0)); },
      [&](const std::vector<Output>& v) {
        // step and the constant 3 come from outside the body; 3 is made in it
        return std::vector<Output>{v[0] + step * ops::constant(g, Tensor(3.0)), v[1] + 1.0};
      },
      {x0, scalar(g, 0.0)});
  Session sess(g);
  const Tensor r = sess.run({out[0]}, {{step, Tensor::from_vector<double>({1, -2})}})[0];
  CHECK(r.values<double>()[0] == 15.0);
  CHECK(r.values<double>()[1] == -30.0);
  int enters = 0, constant_enters = 0;
  for (const Operation& op : g.operations())
    if (op.type() == "Enter") {
      ++enters;
      if (std::get<bool>(op.attrs().at("is_constant"))) ++constant_enters;
    }
  CHECK(enters == 2 + constant_enters);
  CHECK(constant_enters == 1);  // step; the constants made in cond and body wait on the pivot
}

TEST_CASE("maximum_iterations stops a loop whose cond still holds") {
  Graph g;
  const auto out = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 100.0)); },
      [&](const std::vector<Output>& v) { return std::vector<Output>{v[0] + 1.0}; },
      {scalar(g, 0.0)}, {.maximum_iterations = 7});
  REQUIRE(out.size() == 1);  // the counter is not among the results
  Session sess(g);
  CHECK(sess.run({out[0]})[0].scalar<double>() == 7.0);
  const auto zero = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 100.0)); },
      [&](const std::vector<Output>& v) { return std::vector<Output>{v[0] + 1.0}; },
      {scalar(g, 0.0)}, {.maximum_iterations = 0});
  CHECK(sess.run({zero[0]})[0].scalar<double>() == 0.0);
}

TEST_CASE("a thousand iterations, with 1 and 10 iterations in flight") {
  for (int parallel : {1, 10}) {
    INFO("parallel_iterations " << parallel);
    Graph g;
    const auto out = ops::while_loop(
        [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 1000.0)); },
        [&](const std::vector<Output>& v) {
          return std::vector<Output>{v[0] + 1.0, v[1] + v[0]};
        },
        {scalar(g, 0.0), scalar(g, 0.0)}, {.parallel_iterations = parallel});
    Session sess(g);
    const auto r = sess.run({out[0], out[1]});
    CHECK(r[0].scalar<double>() == 1000.0);
    CHECK(r[1].scalar<double>() == 999.0 * 1000.0 / 2);
  }
}

TEST_CASE("a traced loop records each op in every iteration it ran, the passed-over ones too") {
  // Untraced, the inline loop calls no kernel for LoopCond, Identity or NextIteration (their
  // producers' values go straight to their consumers); traced, each still has its record.
  Graph g;
  const auto out = ops::while_loop(
      [&](const std::vector<Output>& v) {
        return ops::less(v[0], ops::constant(g, Tensor(std::int32_t{5})));
      },
      [&](const std::vector<Output>& v) {
        return std::vector<Output>{v[0] + 1.0, v[1] + v[0]};
      },
      {ops::constant(g, Tensor(std::int32_t{0})), ops::constant(g, Tensor(std::int32_t{0}))});
  Session sess(g);
  RunMetadata metadata;
  const auto traced = sess.run(RunOptions{.trace = true}, {out[0], out[1]}, {}, {}, &metadata);
  CHECK(traced[0].scalar<std::int32_t>() == 5);
  CHECK(traced[1].scalar<std::int32_t>() == 0 + 1 + 2 + 3 + 4);
  REQUIRE(metadata.tasks.size() == 1);
  std::map<std::string, int> runs;  // op type -> records
  for (const NodeExecStats& node : metadata.tasks[0].nodes) ++runs[node.op];
  // Six iterations test the cond, five of them run the body; the Exits pass on the last.
  CHECK(runs["Less"] == 6);
  CHECK(runs["LoopCond"] == 6);
  CHECK(runs["Switch"] == 2 * 6);
  CHECK(runs["Identity"] == 2 * 5);
  CHECK(runs["Add"] == 2 * 5);
  CHECK(runs["NextIteration"] == 2 * 5);
  CHECK(runs["Exit"] == 2);
  const auto untraced = sess.run({out[0], out[1]});
  CHECK(untraced[0].scalar<std::int32_t>() == 5);
  CHECK(untraced[1].scalar<std::int32_t>() == 10);
}

TEST_CASE("a tensor of the body fed by the caller is the same in every iteration") {
  Graph g;
  Output step;
  const auto out = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 10.0)); },
      [&](const std::vector<Output>& v) {
        step = v[0] * 0.0 + 1.0;  // 1 unless fed
        return std::vector<Output>{v[0] + step};
      },
      {scalar(g, 0.0)});
  Session sess(g);
  CHECK(sess.run({out[0]})[0].scalar<double>() == 10.0);
  // Each iteration adds the fed 4, which no op may take over and change: 0, 4, 8, 12.
  CHECK(sess.run({out[0]}, {{step, Tensor(4.0)}})[0].scalar<double>() == 12.0);
  CHECK(sess.run({out[0]}, {{step, Tensor(3.0)}})[0].scalar<double>() == 12.0);
}

TEST_CASE("nested loops: an inner loop runs in every iteration of the outer one") {
  Graph g;
  // sum over i < 4 of (sum over j < i of j), the inner loop using the outer i
  const auto out =
      ops::while_loop([&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 4.0)); },
                      [&](const std::vector<Output>& outer) {
                        const auto inner = ops::while_loop(
                            [&](const std::vector<Output>& v) { return ops::less(v[0], outer[0]); },
                            [&](const std::vector<Output>& v) {
                              return std::vector<Output>{v[0] + 1.0, v[1] + v[0]};
                            },
                            {scalar(g, 0.0), scalar(g, 0.0)});
                        return std::vector<Output>{outer[0] + 1.0, outer[1] + inner[1]};
                      },
                      {scalar(g, 0.0), scalar(g, 0.0)});
  Session sess(g);
  CHECK(sess.run({out[1]})[0].scalar<double>() == 0.0 + 0 + 1 + 3);
}

TEST_CASE("a loop in a cond's branch runs only when the branch is taken, and a cond in a loop") {
  Graph g;
  const Output pred = ops::placeholder(g, DType::boolean, {}, "pred");
  const Output y = ops::cond(
      pred,
      [&] {
        return ops::while_loop(
            [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 5.0)); },
            [&](const std::vector<Output>& v) { return std::vector<Output>{v[0] + 2.0}; },
            {scalar(g, 0.0)});
      },
      [&] { return std::vector<Output>{scalar(g, -1.0)}; })[0];
  Session sess(g);
  CHECK(sess.run({y}, {{pred, Tensor(true)}})[0].scalar<double>() == 6.0);
  CHECK(sess.run({y}, {{pred, Tensor(false)}})[0].scalar<double>() == -1.0);

  // 1 2 4 8 11 14 17 20: doubling below 5, adding 3 from there; the body branches each time.
  const auto branching = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 20.0)); },
      [&](const std::vector<Output>& v) {
        const Output next = ops::cond(
            ops::less(v[0], scalar(g, 5.0)), [&] { return std::vector<Output>{v[0] * 2.0}; },
            [&] { return std::vector<Output>{v[0] + 3.0}; })[0];
        return std::vector<Output>{next, v[1] + 1.0};
      },
      {scalar(g, 1.0), scalar(g, 0.0)});
  CHECK(sess.run({branching[0]})[0].scalar<double>() == 20.0);
  CHECK(sess.run({branching[1]})[0].scalar<double>() == 7.0);
}

TEST_CASE("a loop that never ends is stopped by RunOptions::timeout_in_ms") {
  Graph g;
  const auto out =
      ops::while_loop([&](const std::vector<Output>&) { return ops::constant(g, Tensor(true)); },
                      [&](const std::vector<Output>& v) { return std::vector<Output>{v[0] + 1.0}; },
                      {scalar(g, 0.0)});
  Session sess(g);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(sess.run(RunOptions{.timeout_in_ms = 300}, {out[0]}, {}, {}, nullptr),
                  DeadlineExceeded);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  // The session still runs other steps.
  CHECK(sess.run({scalar(g, 2.0)})[0].scalar<double>() == 2.0);
}

TEST_CASE("an op failing in the fourth iteration fails the step, naming the op") {
  Graph g;
  const Output table = ops::constant(g, Tensor::from_vector<double>({1, 2, 3}));
  const auto out = ops::while_loop(
      [&](const std::vector<Output>& v) {
        return ops::less(v[0], ops::constant(g, Tensor(std::int32_t{10})));
      },
      [&](const std::vector<Output>& v) {  // table has 3 rows: row 3 does not exist
        return std::vector<Output>{v[0] + 1.0, v[1] + ops::gather(table, v[0], "row")};
      },
      {ops::constant(g, Tensor(std::int32_t{0})), scalar(g, 0.0)});
  Session sess(g);
  CHECK_THROWS_AS(sess.run({out[1]}), InvalidArgument);
  CHECK_THROWS_WITH(sess.run({out[1]}), Contains("while/row"));
  CHECK(sess.run({scalar(g, 2.0)})[0].scalar<double>() == 2.0);  // the session goes on
}

TEST_CASE("a bad loop is refused when it is built, naming the loop variable") {
  Graph g;
  const Output x = ops::constant(g, Tensor::from_vector<double>({1, 2}));
  auto less_than_ten = [&](const std::vector<Output>& v) {
    return ops::less(ops::reduce_sum(v[0]), scalar(g, 10.0));
  };
  // The shape changes across iterations, with no shape invariant.
  CHECK_THROWS_WITH(ops::while_loop(less_than_ten,
                                    [&](const std::vector<Output>& v) {
                                      return std::vector<Output>{ops::concat({v[0], v[0]}, 0)};
                                    },
                                    {x}),
                    Contains("loop variable 0") && Contains("shape invariant"));
  // With one, it builds and runs.
  const auto grown = ops::while_loop(less_than_ten,
                                     [&](const std::vector<Output>& v) {
                                       return std::vector<Output>{ops::concat({v[0], v[0]}, 0)};
                                     },
                                     {x}, {.shape_invariants = {{-1}}});
  Session sess(g);
  CHECK(sess.run({grown[0]})[0].size() == 8);
  // A dtype that changes, a count that differs, a cond that is not a scalar bool, bad options.
  CHECK_THROWS_WITH(ops::while_loop(less_than_ten,
                                    [&](const std::vector<Output>& v) {
                                      return std::vector<Output>{ops::cast(v[0], DType::float32)};
                                    },
                                    {x}),
                    Contains("loop variable 0") && Contains("float32"));
  CHECK_THROWS_WITH(ops::while_loop(less_than_ten,
                                    [&](const std::vector<Output>& v) {
                                      return std::vector<Output>{v[0], v[0]};
                                    },
                                    {x}),
                    Contains("returns 2 tensors for 1"));
  CHECK_THROWS_WITH(
      ops::while_loop([&](const std::vector<Output>& v) { return v[0]; },
                      [&](const std::vector<Output>& v) { return std::vector<Output>{v[0]}; }, {x}),
      Contains("scalar bool"));
  CHECK_THROWS_AS(
      ops::while_loop(less_than_ten,
                      [&](const std::vector<Output>& v) { return std::vector<Output>{v[0]}; }, {x},
                      {.parallel_iterations = 0}),
      InvalidArgument);
  CHECK_THROWS_WITH(
      ops::while_loop(less_than_ten,
                      [&](const std::vector<Output>& v) { return std::vector<Output>{v[0]}; }, {x},
                      {.shape_invariants = {{3}}}),
      Contains("does not fit its shape invariant"));
}

TEST_CASE("fetching a value inside a loop is refused, and so is differentiating one") {
  Graph g;
  Output inside;
  const Output x = ops::placeholder(g, DType::float64, {}, "x");
  ops::while_loop([&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 3.0)); },
                  [&](const std::vector<Output>& v) {
                    inside = v[0] * x;
                    return std::vector<Output>{inside + 1.0};
                  },
                  {x});
  Session sess(g);
  CHECK_THROWS_WITH(sess.run({inside}, {{x, Tensor(0.5)}}),
                    Contains("inside while_loop") && Contains("fetch the loop's results"));
  CHECK_THROWS_WITH(train::gradients(inside, {x}),
                    Contains("inside while_loop 'while'") && Contains("differentiate the results"));
  const auto constant_loop =
      ops::while_loop([&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 3.0)); },
                      [&](const std::vector<Output>& v) { return std::vector<Output>{v[0] + 1.0}; },
                      {x}, {.back_prop = false});
  const Output dx = train::gradients(constant_loop[0] + x, {x})[0];
  CHECK(sess.run({dx}, {{x, Tensor(0.5)}})[0].scalar<double>() == 1.0);
}

TEST_CASE(
    "a ps variable read in the body enters the loop once per step, and a dead loop's result "
    "crosses tasks") {
  using namespace std::chrono_literals;
  testing::LocalCluster cluster(1, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  Variable w;
  std::vector<Output> out;
  Output pred, z;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    w = get_variable(g, "w", {}, constant_initializer(2));
    out = ops::while_loop(
        [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 5.0)); },
        [&](const std::vector<Output>& v) {
          return std::vector<Output>{v[0] + 1.0, v[1] * ops::cast(w.value(), DType::float64)};
        },
        {scalar(g, 0.0), scalar(g, 1.0)});
    // A loop on the worker in a branch whose result goes on to the ps: when the branch is not
    // taken, the loop's result is dead, crosses to the ps as such, and nothing waits for it.
    pred = ops::placeholder(g, DType::boolean, {}, "pred");
    z = ops::cond(
        pred,
        [&] {
          const Output r = ops::while_loop(
              [&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 5.0)); },
              [&](const std::vector<Output>& v) { return std::vector<Output>{v[0] + 1.0}; },
              {scalar(g, 0.0)})[0];
          auto on_the_ps = g.device("/job:ps/task:0");
          return std::vector<Output>{r * 3.0};
        },
        [&] { return std::vector<Output>{scalar(g, -1.0)}; })[0];
  }
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  CHECK(
      sess.run(RunOptions{.timeout_in_ms = 20000}, {out[1]}, {}, {}, nullptr)[0].scalar<double>() ==
      32.0);
  auto plan = sess.describe({out[1]}, {});
  REQUIRE(plan);
  int received = 0;
  for (const Transfer& t : plan->transfers) received += t.tensor == w.value().name() ? 1 : 0;
  CHECK(received == 1);
  const RunOptions bounded{.timeout_in_ms = 20000};
  CHECK(sess.run(bounded, {z}, {{pred, Tensor(true)}}, {}, nullptr)[0].scalar<double>() == 15.0);
  CHECK(sess.run(bounded, {z}, {{pred, Tensor(false)}}, {}, nullptr)[0].scalar<double>() == -1.0);
  CHECK(worker.stop_job("ps") == 1);
  REQUIRE(cluster.ps[0]->wait_for(10s));
}

TEST_CASE("a loop's graph survives a GraphDef round trip (its back edges included)") {
  Graph g;
  const auto out =
      ops::while_loop([&](const std::vector<Output>& v) { return ops::less(v[0], scalar(g, 4.0)); },
                      [&](const std::vector<Output>& v) { return std::vector<Output>{v[0] + 1.5}; },
                      {scalar(g, 0.0)});
  GraphDef def;
  for (int id = 0; id < static_cast<int>(g.num_nodes()); ++id)
    def.nodes.push_back(to_node_def(g, id));
  Graph copy;
  import_graph_def(copy, def);
  Session sess(copy);
  CHECK(sess.run({copy.tensor(out[0].name())})[0].scalar<double>() == 4.5);
}

}  // namespace while_loop_test
