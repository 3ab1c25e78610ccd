// Serving bundles (serving/bundle.hpp, export.hpp, model.hpp): export from a trained session,
// from a checkpoint and from a cluster's chief; Model::load and predict equal to the training
// session's forward pass, for dense, partitioned and dynamic tables; predict from many threads;
// what the bundle holds (GraphDef protobuf without optimizer or devices, manifest); and the
// bad-input errors of export, load and predict.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "psflow/psflow.hpp"
#include "support/local_cluster.hpp"
#include "support/temp_dir.hpp"

namespace serving_test {

using namespace psflow;
using Catch::Contains;
using testing::TempDir;

// A CTR-like model: ids through a partitioned table and a dynamic table, dense features through
// a weight matrix; probability = sigmoid(sum of both). Trained a few steps so the optimizer is
// in the graph (and must be pruned away) and the values are not the initial ones.
struct CtrGraph {
  Output ids, dense, labels, probability, loss;
  Operation train_op;

  explicit CtrGraph(Graph& g, bool with_dynamic_table = true) {
    ids = ops::placeholder(g, DType::int64, {-1}, "ids");
    dense = ops::placeholder(g, DType::float32, {-1, 3}, "dense");
    labels = ops::placeholder(g, DType::float32, {-1}, "labels");
    auto table = get_variable(g, "emb", {10, 4}, random_normal_initializer(0, 0.5, 3),
                              fixed_size_partitioner(2), DType::float32, true);
    Output rows = ops::embedding_lookup(table, ops::clip_by_value(ids, 0, 9));
    if (with_dynamic_table) {
      auto users = get_dynamic_embedding(g, "users", 4, random_normal_initializer(0, 0.5, 5),
                                         {.num_shards = 2});
      rows = rows + ops::embedding_lookup(users, ids);
    }
    auto w = get_variable(g, "w", {3, 1}, random_normal_initializer(0, 1, 1));
    auto b = get_variable(g, "b", {1}, constant_initializer(0.25));
    auto logits =
        ops::reduce_sum(rows, {1}) + ops::reshape(ops::matmul(dense, w.value()), {-1}) + b.value();
    probability = ops::sigmoid(logits, "probability");
    loss = ops::reduce_sum(ops::square(probability - labels));
    train_op = train::GradientDescentOptimizer(0.1).minimize(loss);
  }
  serving::Signature signature() const {
    return {.inputs = {{"ids", ids}, {"dense", dense}}, .outputs = {{"probability", probability}}};
  }
  FeedMap feeds(const std::map<std::string, Tensor>& in) const {
    return {{ids, in.at("ids")}, {dense, in.at("dense")}};
  }
  void train(Session& sess, int steps) const {
    for (int s = 0; s < steps; ++s) {
      FeedMap f = feeds(batch({1, 2, 3, 7, 9, 1000 + s}));
      f.emplace_back(labels, Tensor::from_vector(std::vector<float>{1, 0, 1, 0, 1, 0}));
      sess.run({}, f, {train_op});
    }
  }
  static std::map<std::string, Tensor> batch(std::vector<std::int64_t> id_values) {
    std::vector<float> d;
    for (std::size_t i = 0; i < id_values.size() * 3; ++i)
      d.push_back(0.1f * static_cast<float>(i % 7));
    const std::size_t n = id_values.size();
    return {{"ids", Tensor::from_vector(id_values)}, {"dense", Tensor::from_vector(d, {n, 3})}};
  }
};

// The model in a graph of its own, initialized and trained in-process.
struct CtrModel {
  Graph g;
  CtrGraph m{g};
  Session sess{g};
  explicit CtrModel(int steps = 3) {
    sess.run(global_variables_initializer(g));
    m.train(sess, steps);
  }
  Tensor forward(const std::map<std::string, Tensor>& in) {
    return sess.run({m.probability}, m.feeds(in))[0];
  }
};

void check_close(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.dtype() == expected.dtype());
  REQUIRE(got.shape() == expected.shape());
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(got.data<float>()[i] == Approx(expected.data<float>()[i]).margin(1e-6));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_CASE("an exported model predicts what the training session computes") {
  CtrModel trained(5);
  TempDir dir("serving");
  serving::export_model(trained.sess, dir / "model", trained.m.signature());

  const auto model = serving::Model::load(dir / "model");
  CHECK(model.input_names() == std::vector<std::string>{"dense", "ids"});
  CHECK(model.output_names() == std::vector<std::string>{"probability"});
  // Batch 1 and batch 6, with ids the tables hold and one the dynamic table never saw (it reads
  // its initial row, which the training lookup makes the same).
  for (const auto& ids :
       {std::vector<std::int64_t>{3}, std::vector<std::int64_t>{1, 2, 3, 7, 9, 5}}) {
    const auto in = CtrGraph::batch(ids);
    const auto out = model.predict(in);
    REQUIRE(out.size() == 1);
    check_close(out.at("probability"), trained.forward(in));
  }
}

TEST_CASE(
    "an input whose default is a training iterator's batch is served as a plain placeholder") {
  Graph g;
  data::Iterator input = data::Dataset::from_tensor_slices(
                             {Tensor::from_vector<std::string>({"a", "bb", "ccc", "dddd"}, {4, 1})})
                             .batch(2)
                             .make_one_shot_iterator(g);
  const Output words = ops::placeholder_with_default(input.get_next()[0], {-1, 1}, "words");
  const Output ids = ops::string_to_hash_bucket_fast(words, 10);
  auto table = get_variable(g, "emb", {10, 2}, random_normal_initializer(0, 1, 7));
  const Output score = ops::reduce_sum(ops::embedding_lookup(table, ids), {1, 2}, false, "score");
  Session sess(g);
  sess.run(global_variables_initializer(g));
  sess.run({score});  // trained from the iterator, with no feed
  TempDir dir("serving");
  serving::export_model(sess, dir / "model",
                        {.inputs = {{"words", words}}, .outputs = {{"score", score}}});
  const std::string graph_def = read_file(dir / "model/graph.pb");
  CHECK(graph_def.find("Iterator") == std::string::npos);
  const Tensor request = Tensor::from_vector<std::string>({"bb", "zzz"}, {2, 1});
  check_close(serving::Model::load(dir / "model").predict({{"words", request}}).at("score"),
              sess.run({score}, {{words, request}})[0]);
}

TEST_CASE("a bundle holds the pruned inference graph as a GraphDef, its variables and a manifest") {
  CtrModel trained(1);
  TempDir dir("serving");
  serving::export_model(trained.sess, dir / "1", trained.m.signature());
  CHECK(dir.entries() == std::vector<std::string>{"1"});  // no temporary directory left

  const GraphDef graph = observe::parse_graph_def(read_file(dir / "1/graph.pb"), "graph.pb");
  std::set<std::string> types, names;
  for (const NodeDef& node : graph.nodes) {
    types.insert(node.op);
    names.insert(node.name);
    CHECK(node.device.empty());
    if (node.op == "DynamicTableFind") CHECK(std::get<bool>(node.attrs.at("insert")) == false);
  }
  for (const char* absent : {"ApplyGradientDescent", "Assign", "_Send", "_Recv", "Send", "Recv"})
    CHECK(types.count(absent) == 0);
  CHECK(names.count("labels") == 0);
  CHECK(types.count("DynamicTableFind") == 1);

  std::set<std::string> stored;
  for (const auto& [name, t] : train::read_checkpoint(dir / "1/variables.psflow"))
    stored.insert(name);
  CHECK(stored == std::set<std::string>{"b", "emb/part_0", "emb/part_1", "users/part_0-keys",
                                        "users/part_0-values", "users/part_1-keys",
                                        "users/part_1-values", "w"});

  const auto manifest = nlohmann::json::parse(read_file(dir / "1/manifest.json"));
  CHECK(manifest["format_version"] == 1);
  CHECK(manifest["psflow_version"] == version_string);
  const auto& dense = manifest["signature_def"]["serving_default"]["inputs"]["dense"];
  CHECK(dense["name"] == "dense:0");
  CHECK(dense["dtype"] == "DT_FLOAT");
  CHECK(dense["tensor_shape"]["dim"][0]["size"] == "-1");
  CHECK(dense["tensor_shape"]["dim"][1]["size"] == "3");
  CHECK(manifest["signature_def"]["serving_default"]["outputs"]["probability"]["dtype"] ==
        "DT_FLOAT");
  CHECK(manifest["files"]["graph.pb"]["bytes"] == std::filesystem::file_size(dir / "1/graph.pb"));
}

TEST_CASE("a complete GraphDef gives back every attribute exactly") {
  Graph g;
  auto x = ops::placeholder(g, DType::float64, {-1, 2}, "x");
  auto c = ops::constant(g, Tensor::from_vector(std::vector<double>(600, 0.1), {300, 2}), "big");
  auto y = ops::mul(x + c, ops::scalar_like(x, 0.1));
  ops::constant(g, Tensor::from_vector(std::vector<bool>{true, false}), "flags");
  ops::constant(g, Tensor::from_vector<std::string>({"", std::string("a\0b", 3), "vocab"}),
                "words");
  const GraphDef def = observe::parse_graph_def(
      observe::serialize_graph_def(g, {}, observe::GraphDefContent::complete), "test");
  REQUIRE(def.nodes.size() == g.num_nodes());
  for (std::size_t i = 0; i < def.nodes.size(); ++i) {
    const auto& node = g.node(static_cast<int>(i));
    CHECK(def.nodes[i].name == node.name);
    CHECK(def.nodes[i].op == node.type);
    CHECK(def.nodes[i].attrs.size() == node.attrs.size());
    for (const auto& [key, value] : node.attrs) {
      REQUIRE(def.nodes[i].attrs.count(key) == 1);
      const AttrValue& back = def.nodes[i].attrs.at(key);
      REQUIRE(back.index() == value.index());
      std::visit(
          [&](const auto& original) {
            using T = std::decay_t<decltype(original)>;
            if constexpr (std::is_same_v<T, Tensor>)
              CHECK(std::get<Tensor>(back).equals(original));
            else
              CHECK(std::get<T>(back) == original);
          },
          value);
    }
  }
  Graph rebuilt;
  import_graph_def(rebuilt, def);
  Session a(g), b(rebuilt);
  const Tensor feed = Tensor::from_vector(std::vector<double>(600, 1.0 / 3), {300, 2});
  CHECK(a.run({y}, {{x, feed}})[0].equals(
      b.run({rebuilt.find_operation(y.op().name())->output(0)},
            {{rebuilt.find_operation("x")->output(0), feed}})[0]));
  // TensorBoard's form leaves the large constant's values out, and loading such a graph says so.
  CHECK_THROWS_AS(observe::parse_graph_def(observe::serialize_graph_def(g), "drawn"), DataLoss);
  CHECK_THROWS_WITH(observe::parse_graph_def(observe::serialize_graph_def(g), "drawn"),
                    Contains("without its values"));
}

TEST_CASE("predict runs from many threads at once and each gets its own answer") {
  CtrModel trained(2);
  TempDir dir("serving");
  serving::export_model(trained.sess, dir / "m", trained.m.signature());
  const auto model = serving::Model::load(dir / "m");
  std::vector<Tensor> expected;
  for (std::int64_t k = 0; k < 4; ++k)
    expected.push_back(trained.forward(CtrGraph::batch({k, k + 1, 9 - k})));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (std::int64_t k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      const auto in = CtrGraph::batch({k, k + 1, 9 - k});
      for (int i = 0; i < 200; ++i)
        if (!model.predict(in).at("probability").equals(expected[static_cast<std::size_t>(k)]))
          ++mismatches[static_cast<std::size_t>(k)];
    });
  for (auto& t : threads) t.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("export_model_from_checkpoint needs no cluster and answers as the trained session") {
  TempDir dir("serving");
  const auto in = CtrGraph::batch({1, 4, 8, 1000});
  Tensor expected;
  {
    Graph g;
    CtrGraph m(g);
    train::Saver saver(g, {});
    Session sess(g);
    sess.run(global_variables_initializer(g));
    m.train(sess, 3);
    saver.save(sess, dir / "ckpt");
    expected = sess.run({m.probability}, m.feeds(in))[0];
  }
  serving::export_model_from_checkpoint([](Graph& g) { return CtrGraph(g).signature(); },
                                        dir / "ckpt", dir / "from_builder");
  serving::export_model_from_checkpoint([](Graph& g) { CtrGraph built(g); }, dir / "ckpt",
                                        dir / "from_names",
                                        {.inputs = {{"ids", "ids:0"}, {"dense", "dense"}},
                                         .outputs = {{"probability", "probability:0"}}});
  for (const char* bundle : {"from_builder", "from_names"})
    check_close(serving::Model::load(dir / bundle).predict(in).at("probability"), expected);
  CHECK_THROWS_AS(serving::export_model_from_checkpoint(
                      [](Graph& g) { CtrGraph built(g); }, dir / "ckpt", dir / "bad",
                      {.inputs = {}, .outputs = {{"p", "nope:0"}}}),
                  NotFound);
}

TEST_CASE("the chief of a cluster exports, fetching the variables from the ps tasks") {
  testing::LocalCluster cluster(2, 1);
  Server worker(cluster.spec(), "worker", 0, cluster.quiet());
  Graph g;
  std::optional<CtrGraph> m;
  {
    auto placement = g.device(train::replica_device_setter(
        {.worker_device = "/job:worker/task:0", .cluster = cluster.spec()}));
    m.emplace(g);
  }
  Session sess(g, worker.target());
  sess.run(global_variables_initializer(g));
  m->train(sess, 3);
  TempDir dir("serving");
  serving::export_model(sess, dir / "chief", m->signature());
  const auto in = CtrGraph::batch({2, 3, 9, 77});
  check_close(serving::Model::load(dir / "chief").predict(in).at("probability"),
              sess.run({m->probability}, m->feeds(in))[0]);
  // The bundle runs alone: no device of the cluster in it.
  for (const NodeDef& node :
       observe::parse_graph_def(read_file(dir / "chief/graph.pb"), "graph.pb").nodes)
    CHECK(node.device.empty());
}

TEST_CASE("export refuses signatures it cannot serve, and leaves nothing behind") {
  CtrModel trained(0);
  const CtrGraph& m = trained.m;
  TempDir dir("serving");
  auto refuses = [&](const serving::Signature& signature, const std::string& message) {
    CHECK_THROWS_AS(serving::export_model(trained.sess, dir / "x", signature), InvalidArgument);
    CHECK_THROWS_WITH(serving::export_model(trained.sess, dir / "x", signature), Contains(message));
  };
  refuses({.inputs = {}, .outputs = {}}, "no outputs");
  refuses({.inputs = {{"dense", m.dense}}, .outputs = {{"p", m.probability}}},
          "need placeholder 'ids', which is not a signature input");
  refuses(
      {.inputs = {{"dense", m.dense}, {"ids", m.ids}, {"labels", m.labels}},
       .outputs = {{"p", m.probability},
                   {"train", m.train_op.graph()
                                 .find_operation("GradientDescent/update_w/ApplyGradientDescent")
                                 ->output(0)}}},
      "changes a variable");
  refuses({.inputs = {{"x", m.probability}}, .outputs = {{"p", m.probability}}},
          "must be a placeholder's output");
  Graph other;
  refuses({.inputs = {}, .outputs = {{"p", ops::constant(other, Tensor::filled(1.0f, {1}))}}},
          "another Graph");
  CHECK(dir.entries().empty());

  serving::export_model(trained.sess, dir / "1", m.signature());
  CHECK_THROWS_AS(serving::export_model(trained.sess, dir / "1", m.signature()), AlreadyExists);
  std::filesystem::create_directories(dir / "empty");
  serving::export_model(trained.sess, dir / "empty", m.signature());  // an empty one is fine
  CHECK(dir.entries() == std::vector<std::string>{"1", "empty"});
}

TEST_CASE("predict names the input that does not fit the signature") {
  CtrModel trained(0);
  TempDir dir("serving");
  serving::export_model(trained.sess, dir / "m", trained.m.signature());
  const auto model = serving::Model::load(dir / "m");
  auto in = CtrGraph::batch({1, 2});
  auto refuses = [&](const std::map<std::string, Tensor>& feed, const std::string& message) {
    CHECK_THROWS_AS(model.predict(feed), InvalidArgument);
    CHECK_THROWS_WITH(model.predict(feed), Contains(message));
  };
  auto extra = in;
  extra["idz"] = Tensor::from_vector(std::vector<std::int64_t>{1});
  refuses(extra, "unknown input 'idz'; the signature's inputs are 'dense', 'ids'");
  refuses({{"ids", in.at("ids")}}, "input 'dense' (float32 [?,3]) is missing");
  auto wrong_dtype = in;
  wrong_dtype["ids"] = Tensor::from_vector(std::vector<float>{1, 2});
  refuses(wrong_dtype, "input 'ids' is float32 [2], but the signature expects int64 [?]");
  auto wrong_shape = in;
  wrong_shape["dense"] = Tensor::filled(1.0f, {2, 4});
  refuses(wrong_shape, "input 'dense' is float32 [2,4], but the signature expects float32 [?,3]");
  CHECK(model.predict(in).at("probability").shape() == Shape{2});  // still serving
}

TEST_CASE("a damaged, incomplete or newer bundle fails to load with a typed error naming it") {
  CtrModel trained(1);
  TempDir dir("serving");
  serving::export_model(trained.sess, dir / "good", trained.m.signature());
  auto copy = [&](const std::string& name) {
    std::filesystem::copy(dir / "good", dir / name, std::filesystem::copy_options::recursive);
    return dir / name;
  };
  auto fails = [&](const std::string& bundle, auto type_tag, const std::string& message) {
    using Expected = decltype(type_tag);
    CHECK_THROWS_AS(serving::Model::load(bundle), Expected);
    CHECK_THROWS_WITH(serving::Model::load(bundle), Contains(message));
  };
  for (const char* file : {"graph.pb", "variables.psflow", "manifest.json"}) {
    const std::string missing = copy(std::string("missing-") + file);
    std::filesystem::remove(missing + "/" + file);
    fails(missing, DataLoss(""), std::string("has no file '") + file + "'");
  }
  for (const char* file : {"graph.pb", "variables.psflow"}) {
    const std::string flipped = copy(std::string("flipped-") + file);
    std::string bytes = read_file(flipped + "/" + file);
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
    write_file(flipped + "/" + file, bytes);
    fails(flipped, DataLoss(""), flipped + "/" + file + "' is damaged");
  }
  const std::string not_json = copy("not-json");
  write_file(not_json + "/manifest.json", R"({"format": )");
  fails(not_json, DataLoss(""), "manifest.json' is damaged: not JSON");

  const std::string newer = copy("newer");
  auto manifest = nlohmann::json::parse(read_file(newer + "/manifest.json"));
  manifest["format_version"] = 2;
  write_file(newer + "/manifest.json", manifest.dump());
  fails(newer, FailedPrecondition(""), "has format version 2");
  fails(newer, FailedPrecondition(""), "reads versions up to 1");

  fails(dir / "nowhere", NotFound(""), "is not a directory");
  CHECK(serving::Model::load(dir / "good").predict(CtrGraph::batch({1})).size() == 1);
}

}  // namespace serving_test
