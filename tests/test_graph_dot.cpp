// Graph pictures (--explain=dot): the DOT text of a real ps + worker partition plan (one cluster
// per task, ops coloured by kind, one dashed edge per transfer with its name, dtype, shape and
// bytes, odd names escaped), Graphviz accepting it, and the demo writing its picture.
// Graphviz's `dot` is required (scripts/setup.sh installs it): without it these tests fail.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "psflow/graph.hpp"
#include "psflow/graph/subgraph.hpp"
#include "psflow/observe/dot_files.hpp"
#include "psflow/observe/graph_dot.hpp"
#include "psflow/runtime/partition.hpp"
#include "psflow/runtime/placer.hpp"
#include "psflow/train/gradient_descent.hpp"
#include "support/child_process.hpp"
#include "support/demo_command.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

using namespace psflow;
using namespace std::chrono_literals;
using psflow::testing::ChildProcess;
using psflow::testing::TempDir;

namespace graph_dot_test {

const std::string kPs0 = "/job:ps/replica:0/task:0/device:CPU:0";
const std::string kWorker = "/job:worker/replica:0/task:0/device:CPU:0";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The index of the first of `lines` holding `what` (lines.size() when none does), and how far a
// line is indented: a box nested in another is indented further.
std::size_t line_of(const std::vector<std::string>& lines, const std::string& what) {
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find(what) != std::string::npos) return i;
  return lines.size();
}
std::size_t indent(const std::string& line) { return line.find_first_not_of(' '); }

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The DOT line that declares the node labelled "<name>\n<type>" (and maybe more lines).
std::string node_line(const std::string& dot, const std::string& name, const std::string& type) {
  std::string label = "[label=" + observe::dot_quote(name + "\n" + type);
  label.pop_back();  // the closing quote, or a line break before "[fetched]"
  for (const std::string& line : lines_of(dot)) {
    const auto at = line.find(label);
    if (at != std::string::npos && (line.compare(at + label.size(), 1, "\"") == 0 ||
                                    line.compare(at + label.size(), 2, "\\n") == 0))
      return line;
  }
  return "";
}

std::string fill(observe::OpKind kind) {
  return "fillcolor=\"" + std::string(observe::kind_color(kind)) + "\"";
}

void require_graphviz() {
  if (!observe::find_on_path("dot"))
    FAIL("Graphviz's dot is not on PATH: run scripts/setup.sh (it installs the graphviz package)");
}

// A variable on ps0 trained by gradient descent from the worker, and a batch of rows sent to ps0
// (its first dimension unknown): a plan with transfers both ways, as partition_graph makes it.
struct TrainingPlan {
  Graph graph;
  PartitionPlan plan;
  TrainingPlan() {
    Variable w;
    Output x = ops::placeholder(graph, DType::float32, {-1, 4}, "x");
    Output scaled;
    {
      auto ps = graph.device("/job:ps/task:0");
      w = get_variable(graph, "w", {4}, constant_initializer(1));
      scaled = x * 3.0;
    }
    Output loss = ops::reduce_sum(scaled * w.value());
    train::GradientDescentOptimizer sgd(0.1);
    Operation train_op = sgd.minimize(loss);
    const auto nodes = needed_nodes(graph, {loss.id()}, {train_op.id()}, {x.id()});
    const auto devices = place_nodes(graph, nodes, {kPs0, kWorker}, kWorker);
    plan = partition_graph(graph, nodes, devices, {x.id()}, {loss.id()}, kWorker,
                           [](const std::string&) { return 5u; });
  }
};

}  // namespace graph_dot_test

using namespace graph_dot_test;

TEST_CASE("a ps and worker plan: one cluster per task, the worker marked as running the session") {
  TrainingPlan t;
  REQUIRE(t.plan.graphs.size() == 2);
  const std::string dot = observe::graph_dot(t.graph, t.plan);
  CHECK(dot.rfind("digraph psflow {", 0) == 0);
  CHECK(count(dot, "subgraph \"cluster_task_") == 2);
  CHECK(count(dot, "label=\"ps0 = /job:ps/replica:0/task:0\";") == 1);
  CHECK(count(dot,
              "label=\"worker0 = /job:worker/replica:0/task:0\\n[this process: runs the "
              "session]\";") == 1);
  CHECK(count(dot, "[this process") == 1);
  // Every op of every partition is drawn once.
  std::size_t ops = 0;
  for (const auto& [device, def] : t.plan.graphs) ops += def.nodes.size();
  CHECK(count(dot, " [label=") == ops);
}

TEST_CASE("ops are coloured by kind: variables, compute, optimizer updates, send and recv") {
  TrainingPlan t;
  const std::string dot = observe::graph_dot(t.graph, t.plan);
  using observe::OpKind;
  CHECK_THAT(node_line(dot, "w", "VariableV2"), Catch::Contains(fill(OpKind::variable)));
  CHECK_THAT(node_line(dot, "w/read", "Identity"), Catch::Contains(fill(OpKind::variable)));
  CHECK_THAT(node_line(dot, "mul", "Mul"), Catch::Contains(fill(OpKind::compute)));
  bool found_update = false, found_send = false, found_recv = false;
  for (const auto& [device, def] : t.plan.graphs)
    for (const NodeDef& node : def.nodes) {
      const std::string line = node_line(dot, node.name, node.op);
      CAPTURE(node.name, node.op);
      REQUIRE_FALSE(line.empty());
      if (node.op == "ApplyGradientDescent") {
        found_update = true;
        CHECK(device == kPs0);
        CHECK_THAT(line, Catch::Contains(fill(OpKind::update)));
      }
      if (node.op == "_Send" || node.op == "_Recv" || node.op == "_Feed") {
        found_send = found_send || node.op == "_Send";
        found_recv = found_recv || node.op == "_Recv";
        CHECK_THAT(line, Catch::Contains(fill(OpKind::transfer)));
      }
    }
  CHECK(found_update);
  CHECK(found_send);
  CHECK(found_recv);
  // The legend names each kind with its colour.
  for (OpKind kind : {OpKind::variable, OpKind::compute, OpKind::update, OpKind::transfer})
    CHECK(count(dot, "<TD BGCOLOR=\"" + std::string(observe::kind_color(kind)) + "\">" +
                         std::string(observe::kind_name(kind)) + "</TD>") == 1);
  CHECK(observe::op_kind("SparseApplyAdagrad", "x") == OpKind::update);
  CHECK(observe::op_kind("ScatterAdd", "x") == OpKind::update);
  CHECK(observe::op_kind("AssignAdd", "global_step/add") == OpKind::update);
  CHECK(observe::op_kind("Fill", "w/Initializer/zeros") == OpKind::variable);
  CHECK(observe::op_kind("Identity", "h", "MatMul") == OpKind::compute);
}

TEST_CASE("each transfer is exactly one dashed edge, labelled with name, dtype, shape and bytes") {
  TrainingPlan t;
  const std::string dot = observe::graph_dot(t.graph, t.plan);
  REQUIRE(t.plan.transfers.size() >= 3);  // x to ps0, w's value to the worker, the gradient back
  std::vector<std::string> dashed;
  for (const std::string& line : lines_of(dot))
    if (line.find("style=dashed") != std::string::npos) dashed.push_back(line);
  CHECK(dashed.size() == t.plan.transfers.size());
  bool saw_rows = false;
  for (const Transfer& tr : t.plan.transfers) {
    CAPTURE(tr.tensor);
    const std::string bytes = observe::detail::bytes_label(tr, false);
    const std::string label =
        observe::dot_quote(tr.control ? tr.tensor + "\ncontrol signal"
                                      : tr.tensor + "\n" + std::string(dtype_name(tr.dtype)) +
                                            tr.shape.to_string() + "\n" + bytes);
    const auto matching = std::count_if(dashed.begin(), dashed.end(), [&](const std::string& l) {
      return l.find("label=" + label) != std::string::npos &&
             l.find(observe::dot_quote("rendezvous key " + tr.key)) != std::string::npos;
    });
    CHECK(matching == 1);
    if (tr.tensor == "x:0") {
      saw_rows = true;
      CHECK(bytes == "16 bytes per row x rows known at run time");
      CHECK(tr.dst_device == kPs0);
    }
    if (tr.tensor == "w/read:0") CHECK(bytes == "16 bytes");
  }
  CHECK(saw_rows);
}

TEST_CASE("odd names are escaped, and Graphviz renders the pictures") {
  require_graphviz();
  PartitionPlan plan;
  plan.client_device = kWorker;
  const std::string odd = "we\"ird\\name\nline\x01 \xc3\xa9 \xff";
  plan.graphs[kPs0].nodes.push_back(NodeDef{odd, "VariableV2", {}, kPs0, {}});
  plan.graphs[kWorker].nodes.push_back(NodeDef{"use", "Identity", {}, kWorker, {}});
  plan.transfers.push_back(Transfer{odd + ":0", kPs0, kWorker, "key \"quoted\"", DType::float32,
                                    PartialShape::of({2}), false});
  Graph empty;
  const std::string dot = observe::graph_dot(empty, plan);
  CHECK(observe::dot_quote(odd) == "\"we\\\"ird\\\\name\\nline? \xc3\xa9 ?\"");
  CHECK_THAT(dot, Catch::Contains("[label=" + observe::dot_quote(odd + "\nVariableV2")));
  CHECK(count(dot, "style=dashed") == 1);  // stand-ins for the _Send and _Recv it lacks
  CHECK_THAT(dot, Catch::Contains("tooltip=\"rendezvous key key \\\"quoted\\\"\""));

  TempDir dir("graph_dot");
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"odd", dot},
        {"training", observe::graph_dot(TrainingPlan().graph, TrainingPlan().plan)}}) {
    const auto files = observe::write_dot_files(text, dir.path() + "/pictures", name);
    INFO(files.summary());
    CHECK(files.dot_path == dir.path() + "/pictures/" + name + ".dot");
    CHECK(psflow::testing::read_file(files.dot_path) == text);
    REQUIRE(files.svg_path == dir.path() + "/pictures/" + name + ".svg");
    CHECK(files.svg_problem.empty());
    CHECK_THAT(psflow::testing::read_file(files.svg_path), Catch::Contains("<svg"));
    CHECK(files.summary() == "wrote " + files.dot_path + " and " + files.svg_path);
  }
}

TEST_CASE("a picture Graphviz rejects is reported, not thrown, and a bad name is an error") {
  require_graphviz();
  TempDir dir("graph_dot_bad");
  const auto files = observe::write_dot_files("digraph { this is not DOT", dir.path(), "broken");
  CHECK(files.svg_path.empty());
  CHECK_THAT(files.svg_problem, Catch::Contains("exited with status"));
  CHECK_THAT(files.summary(), Catch::Contains("broken.dot (no .svg: "));
  CHECK(dir.entries() == std::vector<std::string>{"broken.dot"});
  CHECK_THROWS_AS(observe::write_dot_files("digraph {}", dir.path(), "a/b"), InvalidArgument);
  CHECK_THROWS_AS(observe::write_dot_files("digraph {}", dir.path(), ""), InvalidArgument);
  CHECK_THROWS_AS(observe::write_dot_files("digraph {}", dir.file("broken.dot"), "x"),
                  FailedPrecondition);
}

TEST_CASE("a dot that hangs is stopped after the timeout, and the picture reported missing") {
  TempDir dir("graph_dot_hang");
  psflow::testing::write_file(dir / "dot", "#!/bin/sh\nexec /bin/sleep 30\n");
  std::filesystem::permissions(dir / "dot", std::filesystem::perms::owner_all);
  const char* old_path = std::getenv("PATH");
  const std::string saved = old_path ? old_path : "";
  ::setenv("PATH", dir.path().c_str(), 1);
  const auto started = std::chrono::steady_clock::now();
  const auto files = observe::write_dot_files("digraph {}", dir / "out", "slow", 300ms);
  const auto took = std::chrono::steady_clock::now() - started;
  ::setenv("PATH", saved.c_str(), 1);
  CHECK(took < 10s);
  CHECK(files.svg_path.empty());
  CHECK_THAT(files.svg_problem, Catch::Contains("took longer than 300 ms"));
}

TEST_CASE("an in-process run is one cluster with no transfers") {
  Graph g;
  Variable v = get_variable(g, "v", {2}, zeros_initializer());
  Output y = v.value() * 2.0;
  const PartitionPlan plan = observe::in_process_plan(g, {y});
  const std::string dot = observe::graph_dot(g, plan);
  CHECK(count(dot, "subgraph \"cluster_task_") == 1);
  CHECK_THAT(dot, Catch::Contains("localhost0 = /job:localhost/replica:0/task:0"));
  CHECK(count(dot, "style=dashed") == 0);
  CHECK_THAT(node_line(dot, "mul", "Mul"), Catch::Contains("[fetched]"));
  Session sess(g);
  CHECK(observe::graph_dot(sess, {y}) == dot);
}

TEST_CASE("a cond's branches are boxes inside their task's, nested as the conds are") {
  require_graphviz();
  Graph g;
  Output pred = ops::placeholder(g, DType::boolean, {}, "pred");
  Output x = ops::placeholder(g, DType::float32, {2}, "x");
  Output y = ops::cond(
      pred,
      [&] {
        return ops::cond(
            pred, [&] { return std::vector<Output>{ops::mul(x, x, "inner_product")}; },
            [&] { return std::vector<Output>{ops::neg(x, "inner_negated")}; });
      },
      [&] { return std::vector<Output>{ops::add(x, x, "outer_sum")}; })[0];
  const std::string dot = observe::graph_dot(g, observe::in_process_plan(g, {y}));
  CHECK(count(dot, "subgraph \"cluster_context_") == 4);  // 2 branches, each with 2 inside one
  const auto lines = lines_of(dot);
  const std::size_t outer_true = line_of(lines, "cond 'cond': when 'pred:0' is true");
  const std::size_t inner_true = line_of(lines, "cond 'cond/cond': when 'pred:0' is true");
  const std::size_t product = line_of(lines, "inner_product");
  REQUIRE(outer_true < lines.size());
  CHECK(outer_true < inner_true);
  CHECK(inner_true < product);
  // The inner box's ops are indented inside its subgraph line, which is inside the outer box's.
  CHECK(indent(lines[inner_true - 1]) > indent(lines[outer_true - 1]));
  CHECK(indent(lines[product]) > indent(lines[inner_true - 1]));
  TempDir dir("dot-cond");
  const auto written = observe::write_dot_files(dot, dir.path(), "cond");
  CHECK(written.svg_problem == "");
}

TEST_CASE("a while_loop's frame is a box, with a cond in its body nested inside") {
  require_graphviz();
  Graph g;
  Output x = ops::placeholder(g, DType::float32, {}, "x");
  const auto out = ops::while_loop(
      [&](const std::vector<Output>& v) { return ops::less(v[0], x); },
      [&](const std::vector<Output>& v) {
        return ops::cond(
            ops::less(v[0], ops::constant(g, Tensor(1.0f))),
            [&] { return std::vector<Output>{ops::add(v[0], v[0], "doubled")}; },
            [&] { return std::vector<Output>{ops::add(v[0], ops::constant(g, Tensor(1.0f)))}; });
      },
      {ops::constant(g, Tensor(0.5f))});
  const std::string dot = observe::graph_dot(g, observe::in_process_plan(g, {out[0]}));
  CHECK(count(dot, "subgraph \"cluster_context_") == 3);  // the loop, and the cond's 2 branches
  const auto lines = lines_of(dot);
  const std::size_t loop = line_of(lines, "while_loop 'while'");
  const std::size_t branch = line_of(lines, "cond 'while/cond': when");
  const std::size_t doubled = line_of(lines, "doubled");
  REQUIRE(loop < lines.size());
  CHECK(loop < branch);
  CHECK(branch < doubled);
  CHECK(indent(lines[branch - 1]) > indent(lines[loop - 1]));
  const std::size_t next_iteration = line_of(lines, "NextIteration");
  REQUIRE(next_iteration < lines.size());
  CHECK(indent(lines[next_iteration]) > indent(lines[loop - 1]));
  TempDir dir("dot-loop");
  CHECK(observe::write_dot_files(dot, dir.path(), "loop").svg_problem == "");
}

TEST_CASE("the demo worker with --explain=dot writes its picture and logs where") {
  require_graphviz();
  if (std::string(PSFLOW_DEMO_BINARY).empty())
    FAIL("configure with PSFLOW_BUILD_EXAMPLES=ON to run the demo test");
  TempDir dir("demo_dot");
  const std::string ps_host = psflow::testing::loopback(psflow::testing::reserve_port());
  const std::string worker_host = psflow::testing::loopback(psflow::testing::reserve_port());
  auto args = [&](const std::string& job) {
    return psflow::testing::demo_command(
        PSFLOW_DEMO_BINARY, job, ps_host, worker_host, dir / "simple_log",
        {"--interval_ms=0", "--explain=dot", "--explain_dir=" + (dir / ("pictures_" + job))});
  };
  ChildProcess worker(args("worker"), dir / "worker");
  ChildProcess ps(args("ps"), dir / "ps");
  REQUIRE(worker.wait_for(60s));
  REQUIRE(ps.wait_for(20s));
  INFO("worker stderr:\n" << worker.err() << "\nps stderr:\n" << ps.err());
  CHECK(worker.exit_code() == 0);
  CHECK(ps.exit_code() == 0);
  const std::string dot_path = dir / "pictures_worker/add_mul_div_graph.dot";
  const std::string svg_path = dir / "pictures_worker/add_mul_div_graph.svg";
  CHECK_THAT(worker.err(), Catch::Contains("[add_mul_div] explain: wrote " + dot_path + " and " +
                                           svg_path + "\n"));
  const std::string dot = psflow::testing::read_file(dot_path);
  CHECK(count(dot, "subgraph \"cluster_task_") == 2);
  CHECK(count(dot, "style=dashed") == 2);  // the values of w and b, to the worker
  CHECK_THAT(psflow::testing::read_file(svg_path), Catch::Contains("<svg"));
  // The standard output stays the seed's; the ps writes nothing.
  CHECK(worker.out().find("explain") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "pictures_ps"));
}
