// Graph building: unique names, name scopes, device scopes (strings, functions, reset) merging
// like TF, colocation of variable ops, control dependencies and build-time checks.
#include <catch2/catch.hpp>

#include "psflow/graph.hpp"

using namespace psflow;

namespace {
Output const_f(Graph& g, float v = 1.0f, std::string_view name = "") {
  return ops::constant(g, Tensor(v), name);
}
}  // namespace

TEST_CASE("default names are unique like TF's: add, add_1, add_2") {
  Graph g;
  Output a = const_f(g), b = const_f(g);
  CHECK(a.op().name() == "Const");
  CHECK(b.op().name() == "Const_1");
  CHECK((a + b).op().name() == "add");
  CHECK((a + b).op().name() == "add_1");
  CHECK((a * b).op().name() == "mul");
  CHECK((a / b).op().name() == "truediv");
  CHECK((a / b).op().type() == "RealDiv");
  CHECK((a + b).name() == "add_2:0");
}

TEST_CASE("an explicit name that is taken gets a suffix, and generated names skip taken ones") {
  Graph g;
  Output a = const_f(g, 1, "x");
  Output b = const_f(g, 1, "x");
  CHECK(b.op().name() == "x_1");
  const_f(g, 1, "add_1");
  CHECK((a + b).op().name() == "add");
  CHECK((a + b).op().name() == "add_2");  // add_1 is taken explicitly
  CHECK(g.operation("add_2").type() == "Add");
  CHECK_THROWS_AS(g.operation("nope"), NotFound);
  CHECK(g.tensor("add_2:0") == g.operation("add_2").output(0));
}

TEST_CASE("name scopes prefix op names and are made unique") {
  Graph g;
  Output x = const_f(g);
  {
    auto layer = g.name_scope("layer");
    CHECK(ops::relu(x).op().name() == "layer/Relu");
    auto inner = g.name_scope("inner");
    CHECK((x + x).op().name() == "layer/inner/add");
  }
  {
    auto layer = g.name_scope("layer");
    CHECK(ops::relu(x).op().name() == "layer_1/Relu");
  }
  CHECK((x + x).op().name() == "add");
}

TEST_CASE("nested string device scopes merge field by field, inner fields win") {
  Graph g;
  auto outer = g.device("/job:worker");
  Output a = const_f(g);
  CHECK(a.device() == "/job:worker");
  {
    auto inner = g.device("/device:GPU:1");  // TF's documented case
    CHECK(const_f(g).device() == "/job:worker/device:GPU:1");
    auto innermost = g.device("/job:ps/task:3");
    CHECK(const_f(g).device() == "/job:ps/task:3/device:GPU:1");
  }
  {
    auto legacy = g.device("/cpu:0");
    CHECK(const_f(g).device() == "/job:worker/device:CPU:0");
  }
  CHECK(const_f(g).device() == "/job:worker");
}

TEST_CASE("device(nullptr) resets every enclosing device scope") {
  Graph g;
  auto outer = g.device("/job:ps/task:0");
  {
    auto none = g.device(nullptr);
    CHECK(const_f(g).device() == "");
    auto inner = g.device("/task:2");
    CHECK(const_f(g).device() == "/task:2");
  }
  CHECK(const_f(g).device() == "/job:ps/task:0");
}

TEST_CASE("a device function sees the op, with inner scopes already applied") {
  Graph g;
  std::vector<std::string> seen;
  auto fn = g.device([&](const Operation& op) {
    seen.push_back(op.type() + "@" + op.device());
    return op.type() == "VariableV2" ? std::string("/job:ps/task:0") : op.device();
  });
  Output c = const_f(g);
  CHECK(c.device() == "");
  {
    auto inner = g.device("/job:worker/task:1");
    CHECK(const_f(g).device() == "/job:worker/task:1");
  }
  Variable v = get_variable(g, "v", {2}, zeros_initializer());
  CHECK(v.device() == "/job:ps/task:0");
  CHECK(seen.at(1) == "Const@/job:worker/task:1");
  CHECK_THROWS_AS(g.device(DeviceFunction{}), InvalidArgument);
}

TEST_CASE("a device function returning a malformed device string fails op creation cleanly") {
  Graph g;
  auto fn = g.device([](const Operation&) { return std::string("/job:ps/bogus:1"); });
  const auto before = g.num_nodes();
  CHECK_THROWS_AS(const_f(g), InvalidArgument);
  CHECK(g.num_nodes() == before);
}

TEST_CASE("variable ops are named like TF and colocated with the variable") {
  Graph g;
  Variable w;
  {
    auto ps = g.device("/job:ps/task:0");
    w = get_variable(g, "w", {2, 2}, constant_initializer(2));
  }
  CHECK(w.name() == "w");
  CHECK(w.op().type() == "VariableV2");
  CHECK(w.device() == "/job:ps/task:0");
  CHECK(w.value().name() == "w/read:0");
  CHECK(w.initializer().name() == "w/Assign");
  CHECK(g.operation("w/Initializer/Const").type() == "Fill");
  for (const auto& name : {"w/read", "w/Assign", "w/Initializer/Const"}) {
    CAPTURE(name);
    CHECK(g.operation(name).device() == "/job:ps/task:0");
    CHECK(g.operation(name).node().colocate_with == w.op().id());
  }
  // An update created under another device scope still sits with the variable.
  auto worker = g.device("/job:worker/task:0");
  Output update = w.assign_add(ops::fill(g, DType::float32, {2, 2}, 1.0));
  CHECK(update.device() == "/job:ps/task:0");
  CHECK((w + w).device() == "/job:worker/task:0");
}

TEST_CASE("get_variable ignores name scopes and refuses duplicates") {
  Graph g;
  auto scope = g.name_scope("layer1");
  Variable v = get_variable(g, "weights", {3}, zeros_initializer());
  CHECK(v.name() == "weights");
  CHECK_THROWS_AS(get_variable(g, "weights", {3}, zeros_initializer()), AlreadyExists);
  CHECK(find_variable(g, "weights").has_value());
  get_variable(g, "frozen", {1}, zeros_initializer(), DType::float32, /*trainable=*/false);
  CHECK(global_variables(g).size() == 2);
  REQUIRE(trainable_variables(g).size() == 1);
  CHECK(trainable_variables(g)[0].name() == "weights");
}

TEST_CASE("variable_scope prefixes get_variable and shares a tower's variables on reuse") {
  Graph g;
  auto tower = [&g](const Output& x) {
    Variable w = get_variable(g, "w", {2}, constant_initializer(3));
    return std::pair{w, x * w.value()};
  };
  Output x = const_f(g, 2.0f, "x");
  std::pair<Variable, Output> first, second;
  {
    auto scope = g.variable_scope("tower");
    first = tower(x);
  }
  {
    auto scope = g.variable_scope("tower", VariableReuse::reuse);
    second = tower(x);
  }
  CHECK(first.first.name() == "tower/w");
  CHECK(second.first == first.first);
  CHECK(global_variables(g).size() == 1);
  // Ops get a name scope like TF's: unique on each entry, variables keep the scope's name.
  CHECK(first.second.op().name() == "tower/mul");
  CHECK(second.second.op().name() == "tower_1/mul");
  CHECK(g.current_variable_scope().name.empty());
}

TEST_CASE("variable_scope nests, inherits reuse and follows TF's reuse rules") {
  Graph g;
  {
    auto outer = g.variable_scope("model");
    auto inner = g.variable_scope("layer1");
    CHECK(g.current_variable_scope().name == "model/layer1");
    CHECK(get_variable(g, "b", {1}, zeros_initializer()).name() == "model/layer1/b");
    // Without reuse, a second get_variable of the same name is refused, naming the fix.
    CHECK_THROWS_WITH(get_variable(g, "b", {1}, zeros_initializer()),
                      Catch::Contains("model/layer1/b") && Catch::Contains("VariableReuse::reuse"));
  }
  {
    auto outer = g.variable_scope("model", VariableReuse::reuse);
    // reuse is inherited and cannot be turned off inside
    auto inner = g.variable_scope("layer1", VariableReuse::inherit);
    CHECK(g.current_variable_scope().reuse == VariableReuse::reuse);
    CHECK(get_variable(g, "b", {1}, zeros_initializer()).name() == "model/layer1/b");
    CHECK_THROWS_AS(get_variable(g, "missing", {1}, zeros_initializer()), NotFound);
    CHECK_THROWS_WITH(get_variable(g, "b", {2}, zeros_initializer()),
                      Catch::Contains("float32[1]") && Catch::Contains("float32[2]"));
  }
  {
    auto scope = g.variable_scope("shared", VariableReuse::auto_reuse);
    Variable a = get_variable(g, "a", {1}, zeros_initializer());
    CHECK(get_variable(g, "a", {1}, zeros_initializer()) == a);
  }
  {
    auto scope = g.variable_scope("later");
    Variable c = get_variable(g, "c", {1}, zeros_initializer());
    g.reuse_variables();  // TF's get_variable_scope().reuse_variables()
    CHECK(get_variable(g, "c", {1}, zeros_initializer()) == c);
  }
  CHECK_THROWS_AS(g.reuse_variables(), InvalidArgument);
  CHECK_THROWS_AS(g.variable_scope(""), InvalidArgument);
  CHECK_THROWS_AS(g.variable_scope("a:b"), InvalidArgument);
}

TEST_CASE("partitioned variables share through variable_scope too") {
  Graph g;
  PartitionedVariable first, again;
  {
    auto scope = g.variable_scope("emb_scope");
    first = get_variable(g, "table", {10, 4}, zeros_initializer(), fixed_size_partitioner(2));
  }
  {
    auto scope = g.variable_scope("emb_scope", VariableReuse::reuse);
    again = get_variable(g, "table", {10, 4}, zeros_initializer(), fixed_size_partitioner(2));
  }
  CHECK(first.name() == "emb_scope/table");
  CHECK(first.partitions()[1].name() == "emb_scope/table/part_1");
  CHECK(again == first);
}

TEST_CASE("global_variables_initializer groups every initializer") {
  Graph g;
  auto a = get_variable(g, "a", {1}, zeros_initializer());
  auto b = get_variable(g, "b", {1}, zeros_initializer());
  Operation init = global_variables_initializer(g);
  CHECK(init.name() == "init");
  CHECK(init.type() == "NoOp");
  REQUIRE(init.control_inputs().size() == 2);
  CHECK(init.control_inputs()[0] == a.initializer());
  CHECK(init.control_inputs()[1] == b.initializer());
}

TEST_CASE("control_dependencies adds control inputs to ops created inside") {
  Graph g;
  Output x = const_f(g);
  Operation first = ops::no_op(g, "first");
  {
    auto deps = g.control_dependencies({first});
    Output y = x + x;
    REQUIRE(y.op().control_inputs().size() == 1);
    CHECK(y.op().control_inputs()[0] == first);
    // Variables never inherit control dependencies.
    Variable v = get_variable(g, "v", {1}, zeros_initializer());
    CHECK(v.op().control_inputs().empty());
  }
  CHECK((x + x).op().control_inputs().empty());
}

TEST_CASE("build-time errors name the op, its inputs and their shapes") {
  Graph g;
  Output x = ops::placeholder(g, DType::float32, {2, 3}, "x");
  Output y = ops::placeholder(g, DType::float32, {4}, "y");
  Output i = ops::placeholder(g, DType::int32, {2, 3}, "i");
  CHECK_THROWS_WITH(x + y,
                    Catch::Contains("'x:0' float32[2,3]") && Catch::Contains("'y:0' float32[4]"));
  CHECK_THROWS_AS(x + y, InvalidArgument);
  CHECK_THROWS_WITH(x * i, Catch::Contains("same dtype") && Catch::Contains("'i:0' int32[2,3]"));
  CHECK_THROWS_WITH(ops::matmul(x, x), Catch::Contains("inner dimensions"));
  CHECK_THROWS_AS(ops::sigmoid(i), InvalidArgument);
  CHECK_THROWS_AS(x + Output(), InvalidArgument);
  Graph other;
  Output z = ops::placeholder(other, DType::float32, {2, 3}, "z");
  CHECK_THROWS_WITH(x + z, Catch::Contains("another Graph"));
}

TEST_CASE("shapes are inferred at build time, with -1 for unknown dimensions") {
  Graph g;
  Output x = ops::placeholder(g, DType::float32, {-1, 784}, "x");
  Variable w = get_variable(g, "w", {784, 10}, zeros_initializer());
  Output logits = ops::matmul(x, w);
  CHECK(logits.shape() == PartialShape::of({-1, 10}));
  CHECK(ops::reduce_mean(logits).shape() == PartialShape::scalar());
  CHECK(ops::reduce_sum(logits, {0}).shape() == PartialShape::of({10}));
  CHECK(ops::reduce_sum(logits, {1}, true).shape() == PartialShape::of({-1, 1}));
  CHECK(ops::reshape(w, {-1}).shape() == PartialShape::of({7840}));
  CHECK((logits + ops::constant(g, Tensor::filled(1.0f, {10}))).shape() ==
        PartialShape::of({-1, 10}));
  CHECK(logits.dtype() == DType::float32);
}

TEST_CASE("empty handles can be declared first and assigned later, as TF programs do") {
  Graph g;
  Output out;
  Operation op;
  Variable v;
  CHECK_FALSE(out.valid());
  CHECK_FALSE(op.valid());
  CHECK_FALSE(v.valid());
  CHECK_THROWS_AS(op.name(), InvalidArgument);
  CHECK_THROWS_AS(v.value(), InvalidArgument);
  {
    auto d = g.device("/job:worker/task:0");
    out = const_f(g) + const_f(g);
  }
  CHECK(out.valid());
  CHECK(out.device() == "/job:worker/task:0");
}
