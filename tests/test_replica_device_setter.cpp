// replica_device_setter and the ps strategies: TF's own device_setter_test.py cases (python
// training and contrib training) ported, plus merge rules, the no-ps cases and greedy placement.
#include <catch2/catch.hpp>

#include "psflow/distributed/cluster_spec.hpp"
#include "psflow/graph.hpp"
#include "psflow/train/replica_device_setter.hpp"

using namespace psflow;

namespace {

// TF's assertDeviceEqual compares canonical device names.
std::string dev(std::string_view spec) { return canonical_device(spec); }

Variable var(Graph& g, std::string_view name, Shape shape = {2}, DType dtype = DType::float32) {
  return get_variable(g, name, std::move(shape), zeros_initializer(), dtype);
}

// TF's test cluster: two ps tasks, three workers.
ClusterSpec tf_cluster() {
  return ClusterSpec({{"ps", {"ps0:2222", "ps1:2222"}},
                      {"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}});
}

ClusterSpec sun_moon_cluster() {
  return ClusterSpec(
      {{"sun", {"sun0:2222", "sun1:2222", "sun2:2222"}}, {"moon", {"moon0:2222", "moon1:2222"}}});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// tensorflow/python/training/device_setter_test.py

TEST_CASE("TF testCPUOverride: an inner /cpu:0 merges into the ps and worker devices") {
  Graph g;
  auto setter = g.device(train::replica_device_setter({.cluster = tf_cluster()}));
  Variable v;
  {
    auto cpu = g.device("/cpu:0");
    v = var(g, "v");
  }
  Variable w = var(g, "w");
  Output a;
  {
    auto cpu = g.device("/cpu:0");
    a = v.value() + w.value();
  }
  CHECK(v.device() == dev("/job:ps/task:0/cpu:0"));
  CHECK(v.initializer().device() == dev("/job:ps/task:0/cpu:0"));
  CHECK(w.device() == dev("/job:ps/task:1"));
  CHECK(w.initializer().device() == dev("/job:ps/task:1"));
  CHECK(a.device() == dev("/job:worker/cpu:0"));
}

TEST_CASE("TF testPS2TasksWithClusterSpecClass: variables round robin, compute on the worker") {
  Graph g;
  auto setter = g.device(train::replica_device_setter({.cluster = tf_cluster()}));
  Variable v = var(g, "v");
  Variable w = var(g, "w");
  Output a = v.value() + w.value();
  CHECK(v.device() == "/job:ps/task:0");
  CHECK(v.initializer().device() == "/job:ps/task:0");
  CHECK(v.value().device() == "/job:ps/task:0");  // "v/read" is colocated with "v"
  CHECK(w.device() == "/job:ps/task:1");
  CHECK(w.initializer().device() == "/job:ps/task:1");
  CHECK(a.device() == "/job:worker");
}

TEST_CASE("TF testPS2TasksPinVariableToJob: another job is kept, an explicit ps job gets a task") {
  Graph g;
  auto setter = g.device(train::replica_device_setter({.cluster = tf_cluster()}));
  Variable v = var(g, "v");
  Variable w, x;
  {
    auto moon = g.device("/job:moon");
    w = var(g, "w");
    auto ps = g.device("/job:ps");  // explicit ps job: the task is set
    x = var(g, "x");
  }
  Output a = v.value() + w.value() + x.value();
  CHECK(v.device() == "/job:ps/task:0");
  CHECK(v.initializer().device() == "/job:ps/task:0");
  CHECK(w.device() == "/job:moon");  // the strategy was not asked: no task consumed
  CHECK(w.initializer().device() == "/job:moon");
  CHECK(x.device() == "/job:ps/task:1");
  CHECK(x.initializer().device() == "/job:ps/task:1");
  CHECK(a.device() == "/job:worker");
}

TEST_CASE("TF testPS2TasksUseCpuForPS: a ps_device without a job gets no task") {
  Graph g;
  auto setter = g.device(train::replica_device_setter({.ps_tasks = 1, .ps_device = "/cpu:0"}));
  Variable v = var(g, "v");
  Variable w;
  {
    auto moon = g.device("/job:moon");
    w = var(g, "w");
  }
  Output a = v.value() + w.value();
  CHECK(v.device() == dev("/cpu:0"));
  CHECK(v.initializer().device() == dev("/cpu:0"));
  CHECK(w.device() == dev("/job:moon/cpu:0"));
  CHECK(w.initializer().device() == dev("/job:moon/cpu:0"));
  CHECK(a.device() == "/job:worker");
}

TEST_CASE("TF testPS2TasksNoMerging: with merge_devices=false an op with a device is left alone") {
  Graph g;
  auto setter =
      g.device(train::replica_device_setter({.merge_devices = false, .cluster = tf_cluster()}));
  Variable v = var(g, "v");
  Variable w;
  {
    auto ps = g.device("/job:ps");  // no task assigned when merge_devices=false
    w = var(g, "w");
  }
  Output a = v.value() + w.value();
  CHECK(v.device() == "/job:ps/task:0");
  CHECK(v.initializer().device() == "/job:ps/task:0");
  CHECK(w.device() == "/job:ps");
  CHECK(w.initializer().device() == "/job:ps");
  CHECK(a.device() == "/job:worker");
}

TEST_CASE("TF testPS2TasksWithClusterSpecDict/ClusterDef: a cluster read from TF_CONFIG") {
  Graph g;
  const ClusterSpec cluster = ClusterSpec::from_tf_config(
      R"({"cluster": {"ps": ["ps0:2222", "ps1:2222"],
                      "worker": ["worker0:2222", "worker1:2222", "worker2:2222"]},
          "task": {"type": "worker", "index": 0}})");
  auto setter = g.device(train::replica_device_setter({.cluster = cluster}));
  Variable v = var(g, "v");
  Variable w = var(g, "w");
  Output a = v.value() + w.value();
  CHECK(v.device() == "/job:ps/task:0");
  CHECK(w.device() == "/job:ps/task:1");
  CHECK(a.device() == "/job:worker");
}

TEST_CASE("TF testPS2TasksWithDevice: ps and worker jobs named by ps_device and worker_device") {
  Graph g;
  auto setter = g.device(train::replica_device_setter(
      {.ps_device = "/job:moon", .worker_device = "/job:sun", .cluster = sun_moon_cluster()}));
  Variable v = var(g, "v");
  Variable w = var(g, "w");
  Output a = v.value() + w.value();
  CHECK(v.device() == "/job:moon/task:0");
  CHECK(v.initializer().device() == "/job:moon/task:0");
  CHECK(w.device() == "/job:moon/task:1");
  CHECK(w.initializer().device() == "/job:moon/task:1");
  CHECK(a.device() == "/job:sun");
}

TEST_CASE("TF testPS2TasksWithCPUConstraint: a device type in ps_device is kept") {
  Graph g;
  auto setter = g.device(train::replica_device_setter({.ps_device = "/job:moon/cpu:0",
                                                       .worker_device = "/job:sun",
                                                       .cluster = sun_moon_cluster()}));
  Variable v = var(g, "v");
  Variable w = var(g, "w");
  Output a = v.value() + w.value();
  CHECK(v.device() == dev("/job:moon/task:0/cpu:0"));
  CHECK(v.initializer().device() == dev("/job:moon/task:0/cpu:0"));
  CHECK(w.device() == dev("/job:moon/task:1/cpu:0"));
  CHECK(w.initializer().device() == dev("/job:moon/task:1/cpu:0"));
  CHECK(a.device() == "/job:sun");
}

// ---------------------------------------------------------------------------------------------
// The seed program and more of TF's rules.

TEST_CASE("the seed: worker_device with a task, one ps task, VariableV2 w and b on the ps") {
  const ClusterSpec cluster(
      {{"ps", {"localhost:2222"}}, {"worker", {"localhost:2223", "localhost:2224"}}});
  Graph g;
  Output sum;
  Variable w, b;
  {
    auto setter = g.device(
        train::replica_device_setter({.worker_device = "/job:worker/task:0", .cluster = cluster}));
    w = get_variable(g, "w", {2, 2}, constant_initializer(1.0));
    b = get_variable(g, "b", {2, 2}, constant_initializer(2.0));
    sum = w.value() + b.value();
  }
  CHECK(g.operation("w").type() == "VariableV2");
  CHECK(g.operation("w").device() == "/job:ps/task:0");
  CHECK(g.operation("b").type() == "VariableV2");
  CHECK(g.operation("b").device() == "/job:ps/task:0");
  CHECK(g.operation("w/Assign").device() == "/job:ps/task:0");
  CHECK(g.operation("b/read").device() == "/job:ps/task:0");
  CHECK(sum.device() == "/job:worker/task:0");
  CHECK(sum.op().type() == "Add");
}

TEST_CASE("round robin over three ps tasks, only ps ops advance the counter") {
  Graph g;
  const ClusterSpec cluster({{"ps", {"ps0:1", "ps1:1", "ps2:1"}}, {"worker", {"w0:1"}}});
  auto setter = g.device(train::replica_device_setter({.cluster = cluster}));
  std::vector<std::string> devices;
  for (int i = 0; i < 7; ++i) {
    Variable v = var(g, std::string("v").append(std::to_string(i)));  // GCC 12 -O3 -Wrestrict
    ops::constant(g, Tensor(1.0f));  // not a ps op: no task consumed
    devices.push_back(v.device());
  }
  CHECK(devices == std::vector<std::string>{"/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2",
                                            "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2",
                                            "/job:ps/task:0"});
}

TEST_CASE("ps_tasks without a cluster: round robin over that many tasks of /job:ps") {
  Graph g;
  auto setter = g.device(train::replica_device_setter({.ps_tasks = 2}));
  CHECK(var(g, "a").device() == "/job:ps/task:0");
  CHECK(var(g, "b").device() == "/job:ps/task:1");
  CHECK(var(g, "c").device() == "/job:ps/task:0");
  CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:worker");
}

TEST_CASE("a given cluster decides the ps count, ps_tasks is then ignored, as in TF") {
  Graph g;
  auto setter = g.device(train::replica_device_setter({.ps_tasks = 5, .cluster = tf_cluster()}));
  CHECK(var(g, "a").device() == "/job:ps/task:0");
  CHECK(var(g, "b").device() == "/job:ps/task:1");
  CHECK(var(g, "c").device() == "/job:ps/task:0");
}

TEST_CASE("inner device scopes win field by field, for ps ops and worker ops") {
  Graph g;
  auto setter = g.device(train::replica_device_setter(
      {.worker_device = "/job:worker/task:1/device:CPU:0", .cluster = tf_cluster()}));
  {
    auto gpu = g.device("/device:GPU:1");
    Variable v = var(g, "v");
    CHECK(v.device() == "/job:ps/task:0/device:GPU:1");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:worker/task:1/device:GPU:1");
  }
  {
    auto task = g.device("/task:1");  // a task without a job: the strategy is still asked
    Variable v = var(g, "w");
    CHECK(v.device() == "/job:ps/task:1");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:worker/task:1/device:CPU:0");
    auto other = g.device("/job:eval/task:0");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:eval/task:0/device:CPU:0");
  }
  CHECK(var(g, "x").device() == "/job:ps/task:0");  // the task:1 scope above took index 1
  CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:worker/task:1/device:CPU:0");
}

TEST_CASE("merge_devices=false: only ops without a device are placed") {
  Graph g;
  auto setter = g.device(train::replica_device_setter(
      {.worker_device = "/job:worker/task:0", .merge_devices = false, .cluster = tf_cluster()}));
  {
    auto cpu = g.device("/cpu:0");
    CHECK(var(g, "v").device() == "/device:CPU:0");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "/device:CPU:0");
  }
  CHECK(var(g, "w").device() == "/job:ps/task:0");  // the /cpu:0 variable took no task
  CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:worker/task:0");
}

TEST_CASE("enclosing string scopes merge under the setter's choice") {
  Graph g;
  auto outer = g.device("/job:worker/replica:0/device:CPU:0");
  auto setter = g.device(train::replica_device_setter({.cluster = tf_cluster()}));
  CHECK(var(g, "v").device() == "/job:ps/replica:0/task:0/device:CPU:0");
  CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:worker/replica:0/device:CPU:0");
}

TEST_CASE("ps_device \"\" sends ps ops to the worker, worker_device \"\" keeps other ops") {
  SECTION("no ps device") {
    Graph g;
    auto setter = g.device(train::replica_device_setter({.ps_tasks = 2, .ps_device = ""}));
    CHECK(var(g, "v").device() == "/job:worker");
  }
  SECTION("no worker device") {
    Graph g;
    auto setter =
        g.device(train::replica_device_setter({.worker_device = "", .cluster = tf_cluster()}));
    CHECK(var(g, "v").device() == "/job:ps/task:0");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "");
    auto cpu = g.device("/cpu:0");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "/device:CPU:0");
  }
}

TEST_CASE("ps_ops chooses which op types go to the ps") {
  SECTION("none") {
    Graph g;
    auto setter = g.device(train::replica_device_setter({.cluster = tf_cluster(), .ps_ops = {}}));
    CHECK(var(g, "v").device() == "/job:worker");
  }
  SECTION("placeholders too") {
    Graph g;
    auto setter = g.device(train::replica_device_setter(
        {.cluster = tf_cluster(), .ps_ops = {"VariableV2", "Placeholder"}}));
    CHECK(var(g, "v").device() == "/job:ps/task:0");
    CHECK(ops::placeholder(g, DType::float32, {2}).device() == "/job:ps/task:1");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:worker");
  }
}

TEST_CASE("no ps tasks: the setter leaves every device as the scopes set it") {
  SECTION("ps_tasks 0 and no cluster") {
    Graph g;
    auto setter = g.device(train::replica_device_setter({}));
    CHECK(var(g, "v").device() == "");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "");
  }
  SECTION("a cluster without a ps job; enclosing scopes still apply (TF's None would drop them)") {
    Graph g;
    auto outer = g.device("/job:local/task:0");
    auto setter = g.device(train::replica_device_setter(
        {.ps_tasks = 3, .cluster = ClusterSpec({{"worker", {"w0:1", "w1:1"}}})}));
    CHECK(var(g, "v").device() == "/job:local/task:0");
    CHECK(ops::constant(g, Tensor(1.0f)).device() == "/job:local/task:0");
    auto cpu = g.device("/cpu:0");
    CHECK(var(g, "w").device() == "/job:local/task:0/device:CPU:0");
  }
  SECTION("a ps job with no tasks") {
    Graph g;
    auto setter = g.device(
        train::replica_device_setter({.cluster = ClusterSpec({{"ps", {}}, {"worker", {"w0:1"}}})}));
    CHECK(var(g, "v").device() == "");
  }
  SECTION("a cluster and a ps_device without a job") {
    Graph g;
    auto setter =
        g.device(train::replica_device_setter({.ps_device = "/cpu:0", .cluster = tf_cluster()}));
    CHECK(var(g, "v").device() == "");
  }
}

TEST_CASE("one setter used in two scopes shares its round-robin counter") {
  Graph g;
  const DeviceFunction setter = train::replica_device_setter({.cluster = tf_cluster()});
  {
    auto scope = g.device(setter);
    CHECK(var(g, "a").device() == "/job:ps/task:0");
  }
  auto scope = g.device(setter);
  CHECK(var(g, "b").device() == "/job:ps/task:1");
}

TEST_CASE("a custom ps_strategy is asked once per placed ps op, with the op") {
  Graph g;
  std::vector<std::string> asked;
  auto setter = g.device(train::replica_device_setter(
      {.cluster = tf_cluster(), .ps_strategy = [&](const Operation& op) {
         asked.push_back(op.name());
         return std::size_t{1};
       }}));
  CHECK(var(g, "a").device() == "/job:ps/task:1");
  CHECK(var(g, "b").device() == "/job:ps/task:1");
  {
    auto moon = g.device("/job:moon");
    CHECK(var(g, "c").device() == "/job:moon");
  }
  CHECK(asked == std::vector<std::string>{"a", "b"});
}

TEST_CASE("bad device strings and strategies are reported") {
  CHECK_THROWS_AS(train::replica_device_setter({.ps_device = "/job:ps/foo:1"}), InvalidArgument);
  CHECK_THROWS_AS(train::replica_device_setter({.worker_device = "/job:"}), InvalidArgument);
  CHECK_THROWS_AS(train::round_robin_strategy(0), InvalidArgument);
  CHECK_THROWS_AS(train::greedy_load_balancing_strategy(0), InvalidArgument);
  CHECK_THROWS_AS(train::greedy_load_balancing_strategy(2, nullptr), InvalidArgument);

  Graph g;
  auto setter = g.device(
      train::replica_device_setter({.cluster = tf_cluster(), .ps_strategy = [](const Operation&) {
                                      return std::size_t{1} << 40;
                                    }}));
  CHECK_THROWS_AS(var(g, "v"), InvalidArgument);
  CHECK_FALSE(g.find_operation("v"));  // the failed op is not left in the graph
}

TEST_CASE("round_robin_strategy cycles, and copies share the counter") {
  Graph g;
  const Operation op = ops::constant(g, Tensor(1.0f)).op();
  train::PsStrategy strategy = train::round_robin_strategy(3);
  train::PsStrategy copy = strategy;
  CHECK(strategy(op) == 0);
  CHECK(copy(op) == 1);
  CHECK(strategy(op) == 2);
  CHECK(copy(op) == 0);
}

// ---------------------------------------------------------------------------------------------
// tensorflow/contrib/training/python/training/device_setter_test.py

TEST_CASE("TF testUniformLoadEqualsRoundRobin") {
  Graph g;
  auto setter =
      g.device(train::replica_device_setter({.cluster = tf_cluster(),
                                             .ps_strategy = train::greedy_load_balancing_strategy(
                                                 2, [](const Operation&) { return 1.0; })}));
  Variable u = var(g, "u", {2, 2});
  Variable v = var(g, "v", {2, 1});
  Variable w = var(g, "w", {2, 2});
  Variable x = var(g, "x", {1, 3});
  Output a = v.value() + w.value();
  CHECK(u.device() == "/job:ps/task:0");
  CHECK(u.initializer().device() == "/job:ps/task:0");
  CHECK(v.device() == "/job:ps/task:1");
  CHECK(v.initializer().device() == "/job:ps/task:1");
  CHECK(w.device() == "/job:ps/task:0");
  CHECK(w.initializer().device() == "/job:ps/task:0");
  CHECK(x.device() == "/job:ps/task:1");
  CHECK(x.initializer().device() == "/job:ps/task:1");
  CHECK(a.device() == "/job:worker");
}

TEST_CASE("TF testByteSizeLoadFn: variables spread by bytes") {
  Graph g;
  auto setter = g.device(train::replica_device_setter(
      {.cluster = tf_cluster(), .ps_strategy = train::greedy_load_balancing_strategy(2)}));
  Variable u = var(g, "u", {2, 2});  // 16 bytes -> task 0 (16, 0)
  Variable v = var(g, "v", {2, 1});  //  8 bytes -> task 1 (16, 8)
  Variable w = var(g, "w", {2, 2});  // 16 bytes -> task 1 (16, 24)
  Variable x = var(g, "x", {1, 3});  // 12 bytes -> task 0 (28, 24)
  Output a = v.value() + w.value();
  CHECK(u.device() == "/job:ps/task:0");
  CHECK(u.initializer().device() == "/job:ps/task:0");
  CHECK(v.device() == "/job:ps/task:1");
  CHECK(v.initializer().device() == "/job:ps/task:1");
  CHECK(w.device() == "/job:ps/task:1");
  CHECK(w.initializer().device() == "/job:ps/task:1");
  CHECK(x.device() == "/job:ps/task:0");
  CHECK(x.initializer().device() == "/job:ps/task:0");
  CHECK(a.device() == "/job:worker");
}

TEST_CASE("TF testByteSizeLoadFnWithScalar") {
  Graph g;
  auto setter = g.device(train::replica_device_setter(
      {.cluster = tf_cluster(), .ps_strategy = train::greedy_load_balancing_strategy(2)}));
  Variable u = var(g, "u", {});
  CHECK(u.device() == "/job:ps/task:0");
  CHECK(u.initializer().device() == "/job:ps/task:0");
  CHECK(train::byte_size_load_fn(u.op()) == 4);
}

TEST_CASE("greedy: the least-loaded task wins, the lowest index on ties") {
  Graph g;
  const ClusterSpec cluster({{"ps", {"ps0:1", "ps1:1", "ps2:1"}}, {"worker", {"w0:1"}}});
  auto setter = g.device(train::replica_device_setter(
      {.cluster = cluster, .ps_strategy = train::greedy_load_balancing_strategy(3)}));
  CHECK(var(g, "a", {100}).device() == "/job:ps/task:0");  // loads 400 0 0
  CHECK(var(g, "b", {10}).device() == "/job:ps/task:1");   // 400 40 0
  CHECK(var(g, "c", {10}).device() == "/job:ps/task:2");   // 400 40 40
  CHECK(var(g, "d", {20}).device() == "/job:ps/task:1");   // tie 1/2 -> 1: 400 120 40
  CHECK(var(g, "e", {5}).device() == "/job:ps/task:2");    // 400 120 60
  CHECK(var(g, "f", {30}, DType::float64).device() == "/job:ps/task:2");  // 400 120 300
  CHECK(var(g, "h", {1}).device() == "/job:ps/task:1");                   // 400 124 300
}

TEST_CASE("greedy strategy copies share the loads") {
  Graph g;
  const Operation big = var(g, "big", {10}).op();
  const Operation small = var(g, "small", {1}).op();
  train::PsStrategy strategy = train::greedy_load_balancing_strategy(2);
  train::PsStrategy copy = strategy;
  CHECK(strategy(big) == 0);
  CHECK(copy(small) == 1);
  CHECK(strategy(small) == 1);
  CHECK(copy(small) == 1);
  CHECK(strategy(big) == 1);
}

TEST_CASE("byte_size_load_fn: element count times dtype size, like TF's") {
  Graph g;
  CHECK(train::byte_size_load_fn(var(g, "f32", {2, 3}).op()) == 24);
  CHECK(train::byte_size_load_fn(var(g, "f64", {2, 3}, DType::float64).op()) == 48);
  CHECK(train::byte_size_load_fn(var(g, "i32", {5}, DType::int32).op()) == 20);
  CHECK(train::byte_size_load_fn(var(g, "i64", {5}, DType::int64).op()) == 40);
  CHECK(train::byte_size_load_fn(var(g, "flag", {7}, DType::boolean).op()) == 7);
  CHECK(train::byte_size_load_fn(var(g, "empty", {0, 4}).op()) == 0);
  // Any single-output op with a known shape counts, as in TF.
  CHECK(train::byte_size_load_fn(ops::constant(g, Tensor(1.0)).op()) == 8);
  // TF raises ValueError for an unknown shape or not exactly one output.
  CHECK_THROWS_AS(train::byte_size_load_fn(ops::placeholder(g, DType::float32, {-1, 3}).op()),
                  InvalidArgument);
  CHECK_THROWS_AS(train::byte_size_load_fn(ops::no_op(g)), InvalidArgument);
}
