// Placement and partitioning: completing partial device specs, colocation, clear errors, and
// cutting edges between tasks into one Send/Recv pair per (tensor, destination).
#include <algorithm>
#include <catch2/catch.hpp>

#include "psflow/graph.hpp"
#include "psflow/graph/subgraph.hpp"
#include "psflow/runtime/kernels/sendrecv_kernels.hpp"
#include "psflow/runtime/partition.hpp"
#include "psflow/runtime/placer.hpp"

using namespace psflow;

namespace {
const std::string kPs0 = "/job:ps/replica:0/task:0/device:CPU:0";
const std::string kPs1 = "/job:ps/replica:0/task:1/device:CPU:0";
const std::string kWorker = "/job:worker/replica:0/task:0/device:CPU:0";
const std::vector<std::string> kDevices = {kPs0, kPs1, kWorker};

std::vector<int> all_nodes(const Graph& g) {
  std::vector<int> ids;
  for (std::size_t i = 0; i < g.num_nodes(); ++i) ids.push_back(static_cast<int>(i));
  return ids;
}
std::string placed(const Graph& g, const std::vector<std::string>& devices, std::string_view op) {
  return devices.at(static_cast<std::size_t>(g.operation(op).id()));
}
std::size_t count_ops(const GraphDef& def, const std::string& type) {
  return static_cast<std::size_t>(std::count_if(def.nodes.begin(), def.nodes.end(),
                                                [&](const NodeDef& n) { return n.op == type; }));
}
}  // namespace

TEST_CASE("partial specs are completed, unplaced ops go to the session's device") {
  Graph g;
  Output a, b, c;
  {
    auto ps = g.device("/job:ps");
    a = ops::constant(g, Tensor(1.0f), "a");
  }
  {
    auto ps1 = g.device("/task:1/job:ps");
    b = ops::constant(g, Tensor(1.0f), "b");
  }
  c = a + b;
  const auto devices = place_nodes(g, all_nodes(g), kDevices, kWorker);
  CHECK(placed(g, devices, "a") == kPs0);
  CHECK(placed(g, devices, "b") == kPs1);
  CHECK(placed(g, devices, "add") == kWorker);
}

TEST_CASE("colocated ops and ref consumers follow the variable") {
  Graph g;
  Variable v;
  {
    auto ps = g.device("/job:ps/task:1");
    v = get_variable(g, "v", {2}, zeros_initializer());
  }
  Output update = v.assign_add(ops::constant(g, Tensor::from_vector<float>({1, 1})));
  const auto devices = place_nodes(g, all_nodes(g), kDevices, kWorker);
  for (const auto* name : {"v", "v/read", "v/Assign", "v/Initializer/zeros"}) {
    CAPTURE(name);
    CHECK(placed(g, devices, name) == kPs1);
  }
  CHECK(placed(g, devices, update.op().name()) == kPs1);
}

TEST_CASE("placement errors name the op, the device and what exists") {
  Graph g;
  {
    auto nowhere = g.device("/job:ps/task:7");
    ops::constant(g, Tensor(1.0f), "lost");
  }
  CHECK_THROWS_WITH(
      place_nodes(g, all_nodes(g), kDevices, kWorker),
      Catch::Contains("'lost'") && Catch::Contains("/job:ps/task:7") && Catch::Contains(kPs1));

  Graph h;
  Variable v;
  {
    auto ps = h.device("/job:ps/task:0");
    v = get_variable(h, "v", {1}, zeros_initializer());
  }
  // Force a conflicting request inside v's colocation group.
  NodeSpec spec{"Identity", {v.ref()}, {}, "conflict", "", {}, std::string("/job:ps/task:1")};
  Operation conflict = h.create_op(spec);
  CHECK_FALSE(conflict.device().empty());
  CHECK_THROWS_WITH(place_nodes(h, all_nodes(h), kDevices, kWorker),
                    Catch::Contains("must run on one device") && Catch::Contains("conflict"));
}

TEST_CASE("one Send/Recv pair per (tensor, destination), however many consumers") {
  Graph g;
  Output w;
  {
    auto ps = g.device("/job:ps/task:0");
    w = ops::constant(g, Tensor::from_vector<float>({1, 2}), "w");
  }
  Output sum = (w + w) * w + ops::square(w);  // four consumers on the worker
  const auto nodes = needed_nodes(g, {sum.id()}, {}, {});
  const auto devices = place_nodes(g, nodes, kDevices, kWorker);
  const auto plan = partition_graph(g, nodes, devices, {}, {sum.id()}, kWorker,
                                    [](const std::string&) { return 0xabcu; });
  REQUIRE(plan.graphs.size() == 2);
  CHECK(count_ops(plan.graphs.at(kPs0), "_Send") == 1);
  CHECK(count_ops(plan.graphs.at(kWorker), "_Recv") == 1);
  REQUIRE(plan.transfers.size() == 1);
  CHECK(plan.transfers[0].tensor == "w:0");
  CHECK(plan.transfers[0].key == kPs0 + ";0000000000000abc;" + kWorker + ";w:0;0:0");
  CHECK(plan.fetch_tensors.size() == 1);
  // Every partition imports cleanly.
  for (const auto& [device, def] : plan.graphs) {
    Graph part;
    import_graph_def(part, def);
  }
}

TEST_CASE("fetches, feeds and control edges cross devices too") {
  Graph g;
  Output x = ops::placeholder(g, DType::float32, {2}, "x");
  Output on_ps;
  Operation marker;
  {
    auto ps = g.device("/job:ps/task:1");
    on_ps = x * 3.0;
    marker = ops::no_op(g, "marker");
  }
  Output after;
  {
    auto deps = g.control_dependencies({marker});
    after = ops::identity(ops::constant(g, Tensor(1.0f), "one"), "after");
  }
  const auto nodes = needed_nodes(g, {on_ps.id(), after.id()}, {}, {x.id()});
  const auto devices = place_nodes(g, nodes, kDevices, kWorker);
  const auto plan = partition_graph(g, nodes, devices, {x.id()}, {on_ps.id(), after.id()}, kWorker,
                                    [](const std::string&) { return 1u; });
  // x is fed on the worker and sent to ps1; on_ps comes back; the control edge is a signal.
  CHECK(plan.feed_nodes == std::vector<std::string>{"_feed_0"});
  CHECK(count_ops(plan.graphs.at(kPs1), "_Recv") == 1);
  CHECK(count_ops(plan.graphs.at(kPs1), "_Send") == 2);
  CHECK(count_ops(plan.graphs.at(kWorker), "_Recv") == 2);
  const auto control = std::count_if(plan.transfers.begin(), plan.transfers.end(),
                                     [](const Transfer& t) { return t.control; });
  CHECK(control == 1);
  for (const auto& [device, def] : plan.graphs) {
    Graph part;
    import_graph_def(part, def);
  }
}

TEST_CASE("importing a GraphDef checks names and order") {
  GraphDef def;
  def.nodes.push_back(NodeDef{"b", "Identity", {"a:0"}, "", {}});
  Graph g;
  CHECK_THROWS_WITH(import_graph_def(g, def), Catch::Contains("not defined before"));
  GraphDef dup;
  dup.nodes.push_back(NodeDef{"a", "NoOp", {}, "", {}});
  dup.nodes.push_back(NodeDef{"a", "NoOp", {}, "", {}});
  Graph h;
  CHECK_THROWS_WITH(import_graph_def(h, dup), Catch::Contains("two nodes named"));
}
