// Partitioned variables and embeddings: shard layout, names and placement; seeded tables equal
// for any shard count; embedding_lookup ("mod" and "div") against the whole table;
// embedding_lookup_sparse combiners; partition strategies (fixed by get_variable, the default,
// the "both" record, the sparse lookup's); gradients that stay IndexedSlices and match central
// differences; each sparse optimizer against values computed here from TF's formulas, with
// rows (and slots) outside the batch bit-identical; and the bad-input errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "psflow/psflow.hpp"

namespace embedding_test {

using namespace psflow;
using Catch::Contains;

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> out;
  visit_floating_dtype(t.dtype(), "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (T v : t.values<T>()) out.push_back(static_cast<double>(v));
  });
  return out;
}

Tensor ids64(std::vector<std::int64_t> v, Shape shape = {}) {
  if (shape.empty()) shape = {v.size()};
  return Tensor::from_vector(v, shape);
}

// A table whose row r is {r, 100 + r, ...}: easy to recognise in lookups.
Initializer row_number_initializer() {
  return Initializer([](Graph& g, const Shape& shape, DType, const PartitionInfo* part) {
    const std::size_t first = part ? part->offset[0] : 0;
    Tensor t(DType::float64, shape);
    const std::size_t cols = shape.size() > 1 ? shape[1] : 1;
    for (std::size_t r = 0; r < shape[0]; ++r)
      for (std::size_t c = 0; c < cols; ++c)
        t.data<double>()[r * cols + c] = static_cast<double>(first + r) + 100.0 * c;
    return ops::constant(g, t, "rows");
  });
}

// The row of the whole table that `id` names under `strategy` in a table of `rows` rows split
// into `shards` (TF's layout), as a row index into the shards concatenated.
std::size_t concat_row(std::size_t id, std::size_t rows, std::size_t shards,
                       const std::string& strategy) {
  if (strategy == "div") return id;
  const auto offsets = shard_offsets(rows, shards);
  return offsets[id % shards] + id / shards;
}

// A 6 x 2 float64 table of row_number_initializer in 2 shards, and a batch of 3 rows as sparse
// ids: row 0 has ids {1, 4}, row 1 none, row 2 {4, 4, 5}; weights {1, 3, 2, 2, 1}.
struct SparseBatch {
  PartitionedVariable emb;
  SparseTensor sp, weights;
  explicit SparseBatch(Graph& g)
      : emb(get_variable(g, "emb", {6, 2}, row_number_initializer(), fixed_size_partitioner(2),
                         DType::float64)),
        sp{ops::constant(g,
                         Tensor::from_vector<std::int64_t>({0, 0, 0, 1, 2, 0, 2, 1, 2, 2}, {5, 2})),
           ops::constant(g, ids64({1, 4, 4, 4, 5})), ops::constant(g, ids64({3, 3}))},
        weights{sp.indices, ops::constant(g, Tensor::from_vector<double>({1, 3, 2, 2, 1})),
                sp.dense_shape} {}
};

}  // namespace embedding_test

using namespace embedding_test;

TEST_CASE("a partitioned variable: shard names, TF's shard sizes, and offsets") {
  Graph g;
  auto emb = get_variable(g, "emb", {10, 4}, zeros_initializer(), fixed_size_partitioner(3));
  CHECK(emb.name() == "emb");
  CHECK(emb.shape() == Shape{10, 4});
  CHECK(emb.num_partitions() == 3);
  const auto parts = emb.partitions();
  const std::vector<Shape> shapes{{4, 4}, {3, 4}, {3, 4}};
  const std::vector<std::size_t> offsets{0, 4, 7};
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("part " << i);
    CHECK(parts[i].name() == "emb/part_" + std::to_string(i));
    CHECK(parts[i].shape() == shapes[i]);
    REQUIRE(parts[i].save_slice_info());
    CHECK(parts[i].save_slice_info()->full_name == "emb");
    CHECK(parts[i].save_slice_info()->var_offset == std::vector<std::size_t>{offsets[i], 0});
  }
  CHECK(parts[1].save_slice_info()->spec() == "10 4 4,3:0,4");
  CHECK(trainable_variables(g).size() == 3);
  CHECK(partitioned_variables(g).size() == 1);
  CHECK(emb.as_tensor().shape().dims == std::vector<std::int64_t>{10, 4});
}

TEST_CASE("replica_device_setter spreads the shards over the ps tasks round-robin") {
  Graph g;
  auto setter = g.device(train::replica_device_setter({.ps_tasks = 2}));
  auto emb = get_variable(g, "emb", {9, 2}, zeros_initializer(), fixed_size_partitioner(3));
  const auto parts = emb.partitions();
  CHECK(parts[0].device() == "/job:ps/task:0");
  CHECK(parts[1].device() == "/job:ps/task:1");
  CHECK(parts[2].device() == "/job:ps/task:0");
}

TEST_CASE("a seeded initializer gives the same table whatever the shard count") {
  for (const char* kind : {"normal", "glorot"}) {
    INFO(kind);
    auto init = std::string(kind) == "normal" ? random_normal_initializer(0.5, 2.0, 42)
                                              : glorot_uniform_initializer(42);
    Graph g;
    auto whole = get_variable(g, "whole", {11, 3}, init);
    auto three = get_variable(g, "three", {11, 3}, init, fixed_size_partitioner(3));
    auto four = get_variable(g, "four", {11, 3}, init, fixed_size_partitioner(4));
    auto cols = get_variable(g, "cols", {11, 3}, init, fixed_size_partitioner(2, 1));
    Session sess(g);
    sess.run(global_variables_initializer(g));
    auto out = sess.run({whole.value(), three.as_tensor(), four.as_tensor(), cols.as_tensor()});
    CHECK(out[0].equals(out[1]));
    CHECK(out[0].equals(out[2]));
    CHECK(out[0].equals(out[3]));
  }
}

TEST_CASE("partitioned variable errors name the variable and the value") {
  Graph g;
  CHECK_THROWS_WITH(get_variable(g, "tiny", {2, 4}, zeros_initializer(),
                                 [](const Shape& s, DType) {
                                   return std::vector<std::size_t>{3, s[1] / s[1]};
                                 }),
                    Contains("'tiny'") && Contains("axis 0 has only 2 rows"));
  CHECK_THROWS_AS(get_variable(g, "s", {}, zeros_initializer(), fixed_size_partitioner(2)),
                  InvalidArgument);
  CHECK_THROWS_AS(get_variable(g, "e", {4}, zeros_initializer(), Partitioner{}), InvalidArgument);
  get_variable(g, "emb", {4, 2}, zeros_initializer(), fixed_size_partitioner(2));
  CHECK_THROWS_AS(get_variable(g, "emb", {4, 2}, zeros_initializer(), fixed_size_partitioner(2)),
                  AlreadyExists);
}

TEST_CASE("embedding_lookup with mod and div equals the whole table's rows") {
  const std::size_t rows = 11, shards = 3;
  for (const std::string strategy : {"mod", "div"}) {
    INFO(strategy);
    Graph g;
    auto emb = get_variable(g, "emb", {rows, 2}, row_number_initializer(),
                            fixed_size_partitioner(shards), DType::float64);
    auto ids = ops::placeholder(g, DType::int64, {-1, 2}, "ids");
    auto ids32 = ops::placeholder(g, DType::int32, {-1}, "ids32");
    auto looked = ops::embedding_lookup(emb, ids, strategy);
    auto looked32 = ops::embedding_lookup(emb, ids32, strategy);
    CHECK(looked.shape().dims == std::vector<std::int64_t>{-1, 2, 2});
    Session sess(g);
    sess.run(global_variables_initializer(g));
    const std::vector<std::int64_t> batch{10, 0, 3, 3, 7, 10};
    auto out = sess.run(
        {looked, looked32, emb.as_tensor()},
        {{ids, ids64(batch, {3, 2})}, {ids32, Tensor::from_vector<std::int32_t>({5, 1, 5})}});
    CHECK(out[0].shape() == Shape{3, 2, 2});
    const auto table = doubles(out[2]);
    const auto got = doubles(out[0]);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::size_t r = concat_row(static_cast<std::size_t>(batch[i]), rows, shards, strategy);
      CHECK(got[2 * i] == table[2 * r]);
      CHECK(got[2 * i + 1] == table[2 * r + 1]);
    }
    // A "div" table holds row id at concatenated row id, whose value the initializer made id.
    if (strategy == "div") CHECK(got[0] == 10.0);
    const auto got32 = doubles(out[1]);
    CHECK(got32[0] == table[2 * concat_row(5, rows, shards, strategy)]);
    CHECK(got32[2] == table[2 * concat_row(1, rows, shards, strategy)]);
  }
}

TEST_CASE("embedding_lookup of a plain variable, and the bad-input errors") {
  Graph g;
  auto table = get_variable(g, "table", {4, 2}, row_number_initializer(), DType::float64);
  auto emb = get_variable(g, "emb", {5, 2}, row_number_initializer(), fixed_size_partitioner(2),
                          DType::float64);
  auto ids = ops::placeholder(g, DType::int64, {-1}, "ids");
  auto plain = ops::embedding_lookup(table, ids);
  auto sharded = ops::embedding_lookup(emb, ids, "div");
  Session sess(g);
  sess.run(global_variables_initializer(g));
  CHECK(doubles(sess.run({plain}, {{ids, ids64({3, 0, 3})}})[0]) ==
        std::vector<double>{3, 103, 0, 100, 3, 103});
  for (std::int64_t bad : {std::int64_t{5}, std::int64_t{-2}}) {
    INFO("id " << bad);
    CHECK_THROWS_WITH(sess.run({sharded}, {{ids, ids64({1, bad})}}),
                      Contains("'emb'") && Contains("id " + std::to_string(bad)));
    CHECK_THROWS_WITH(sess.run({plain}, {{ids, ids64({bad})}}),
                      Contains("'table'") && Contains("id " + std::to_string(bad)));
  }
  CHECK_THROWS_WITH(ops::embedding_lookup(emb, ids, "modulo"), Contains("\"modulo\""));
  auto floats = ops::placeholder(g, DType::float32, {-1});
  CHECK_THROWS_WITH(ops::embedding_lookup(emb, floats), Contains("int32 or int64"));
}

TEST_CASE("embedding_lookup_sparse combines each batch row's rows: sum, mean, sqrtn") {
  Graph g;
  const SparseBatch batch(g);
  const auto& [emb, sp, weights] = batch;
  std::vector<Output> outs;
  for (const char* combiner : {"sum", "mean", "sqrtn"}) {
    outs.push_back(ops::embedding_lookup_sparse(emb, sp, combiner));
    outs.push_back(ops::embedding_lookup_sparse(emb, sp, weights, combiner));
  }
  Session sess(g);
  sess.run(global_variables_initializer(g));
  auto out = sess.run(outs);
  auto col0 = [&](std::size_t k) {
    auto v = doubles(out[k]);
    return std::vector<double>{v[0], v[2], v[4]};
  };
  // "mod" over 2 shards of 6 rows: id 1 is row 3 of the shards concatenated (value 3), id 4
  // row 2 (value 2), id 5 row 5 (value 5).
  CHECK(out[0].shape() == Shape{3, 2});
  CHECK(col0(0) == std::vector<double>{5, 0, 9});               // sum: 3 + 2, 2 + 2 + 5
  CHECK(col0(1) == std::vector<double>{9, 0, 13});              // weighted: 3 + 3*2, 2*2 + 2*2 + 5
  CHECK(col0(2) == std::vector<double>{2.5, 0, 3});             // mean
  CHECK(col0(3) == std::vector<double>{9.0 / 4, 0, 13.0 / 5});  // weighted mean
  CHECK(col0(4)[0] == Approx(5 / std::sqrt(2.0)));              // sqrtn
  CHECK(col0(4)[2] == Approx(9 / std::sqrt(3.0)));
  CHECK(col0(5)[0] == Approx(9 / std::sqrt(10.0)));  // weighted sqrtn
  CHECK(col0(5)[2] == Approx(13 / std::sqrt(9.0)));
  CHECK(doubles(out[0])[1] == 205);  // column 1 holds 100 + row
  CHECK_THROWS_WITH(ops::embedding_lookup_sparse(emb, sp, "max"), Contains("\"max\""));
}

TEST_CASE("embedding_lookup_sparse routes ids by its partition_strategy") {
  Graph g;
  const SparseBatch batch(g);
  const auto& [emb, sp, weights] = batch;
  std::vector<Output> outs;
  for (const char* strategy : {"mod", "div"}) {
    outs.push_back(ops::embedding_lookup_sparse(emb, sp, "sum", strategy));
    outs.push_back(ops::embedding_lookup_sparse(emb, sp, weights, "sum", strategy));
  }
  Session sess(g);
  sess.run(global_variables_initializer(g));
  auto out = sess.run(outs);
  // Id i's row holds the value of its row in the shards concatenated (concat_row).
  auto value = [](std::int64_t id, const std::string& strategy) {
    return static_cast<double>(concat_row(static_cast<std::size_t>(id), 6, 2, strategy));
  };
  for (std::size_t k = 0; k < 2; ++k) {
    const std::string strategy = k == 0 ? "mod" : "div";
    INFO(strategy);
    const auto sum = doubles(out[2 * k]), weighted = doubles(out[2 * k + 1]);
    CHECK(sum[0] == value(1, strategy) + value(4, strategy));
    CHECK(sum[4] == 2 * value(4, strategy) + value(5, strategy));
    CHECK(weighted[0] == value(1, strategy) + 3 * value(4, strategy));
    CHECK(weighted[4] == 4 * value(4, strategy) + value(5, strategy));
  }
  CHECK(doubles(out[0])[4] != doubles(out[2])[4]);  // the strategies route differently here
  CHECK(emb.lookup_strategy() == "both");
  CHECK_THROWS_WITH(ops::embedding_lookup_sparse(emb, sp, "sum", "modulo"), Contains("\"modulo\""));
}

TEST_CASE("get_variable with a partition_strategy fixes how the table's lookups route ids") {
  const std::size_t rows = 11;
  Graph unused;
  CHECK_THROWS_WITH(get_variable(unused, "bad", {rows, 2}, zeros_initializer(),
                                 fixed_size_partitioner(3), DType::float64, true, "modulo"),
                    Contains("'bad'") && Contains("\"modulo\""));
  for (const std::string strategy : {"mod", "div"}) {
    INFO(strategy);
    const std::string other = strategy == "mod" ? "div" : "mod";
    Graph g;
    auto emb = get_variable(g, "emb", {rows, 2}, row_number_initializer(),
                            fixed_size_partitioner(3), DType::float64, true, strategy);
    CHECK(emb.partition_strategy() == strategy);
    CHECK(emb.lookup_strategy().empty());
    auto ids = ops::placeholder(g, DType::int64, {-1}, "ids");
    auto by_default = ops::embedding_lookup(emb, ids);  // the table's own strategy
    auto by_name = ops::embedding_lookup(emb, ids, strategy);
    SparseTensor sp{ops::constant(g, Tensor::from_vector<std::int64_t>({0, 0, 1, 0}, {2, 2})),
                    ops::constant(g, ids64({7, 10})), ops::constant(g, ids64({2, 1}))};
    auto sparse = ops::embedding_lookup_sparse(emb, sp, "sum");
    CHECK(emb.lookup_strategy() == strategy);
    // The other strategy names the table and both strategies.
    CHECK_THROWS_WITH(ops::embedding_lookup(emb, ids, other), Contains("'emb'") &&
                                                                  Contains("\"" + other + "\"") &&
                                                                  Contains("\"" + strategy + "\""));
    CHECK_THROWS_WITH(ops::embedding_lookup_sparse(emb, sp, "sum", other),
                      Contains("'emb'") && Contains("\"" + other + "\""));
    CHECK(emb.lookup_strategy() == strategy);  // a refused lookup notes nothing
    // Reusing it with the other strategy is refused; with its own (or none) it is the same table.
    {
      Graph scoped;
      PartitionedVariable created;
      {
        auto scope = scoped.variable_scope("t");
        created = get_variable(scoped, "emb", {4, 2}, zeros_initializer(),
                               fixed_size_partitioner(2), DType::float32, true, strategy);
      }
      auto reuse = scoped.variable_scope("t", VariableReuse::reuse);
      CHECK_THROWS_WITH(
          get_variable(scoped, "emb", {4, 2}, zeros_initializer(), fixed_size_partitioner(2),
                       DType::float32, true, other),
          Contains("'t/emb'") && Contains("\"" + other + "\"") && Contains("\"" + strategy + "\""));
      CHECK(get_variable(scoped, "emb", {4, 2}, zeros_initializer(), fixed_size_partitioner(2),
                         DType::float32, true, strategy) == created);
      CHECK(get_variable(scoped, "emb", {4, 2}, zeros_initializer(), fixed_size_partitioner(2)) ==
            created);
    }
    Session sess(g);
    sess.run(global_variables_initializer(g));
    const std::vector<std::int64_t> batch{10, 0, 3, 7};
    auto out = sess.run({by_default, by_name, emb.as_tensor(), sparse}, {{ids, ids64(batch)}});
    CHECK(out[0].equals(out[1]));
    const auto table = doubles(out[2]), got = doubles(out[0]);
    for (std::size_t i = 0; i < batch.size(); ++i)
      CHECK(got[2 * i] ==
            table[2 * concat_row(static_cast<std::size_t>(batch[i]), rows, 3, strategy)]);
    // The sparse lookup (batch row 0: id 7, row 1: id 10) routes the same way.
    CHECK(doubles(out[3])[0] == table[2 * concat_row(7, rows, 3, strategy)]);
    CHECK(doubles(out[3])[2] == table[2 * concat_row(10, rows, 3, strategy)]);
  }
}

TEST_CASE("a table without a fixed strategy is read both ways, as before, and notes it") {
  Graph g;
  auto emb = get_variable(g, "emb", {5, 2}, row_number_initializer(), fixed_size_partitioner(2),
                          DType::float64);
  CHECK(emb.partition_strategy().empty());
  auto ids = ops::constant(g, ids64({3}));
  auto by_default = ops::embedding_lookup(emb, ids);  // "mod", TF's default
  CHECK(emb.lookup_strategy() == "mod");
  auto by_mod = ops::embedding_lookup(emb, ids, "mod");
  CHECK(emb.lookup_strategy() == "mod");
  auto by_div = ops::embedding_lookup(emb, ids, "div");
  CHECK(emb.lookup_strategy() == "both");
  Session sess(g);
  sess.run(global_variables_initializer(g));
  auto out = sess.run({by_default, by_mod, by_div});
  CHECK(out[0].equals(out[1]));
  CHECK(doubles(out[0])[0] == static_cast<double>(concat_row(3, 5, 2, "mod")));
  CHECK(doubles(out[2])[0] == 3.0);
}

TEST_CASE("the gradient of a lookup is IndexedSlices per shard, applied without densifying") {
  Graph g;
  auto emb = get_variable(g, "emb", {7, 2}, row_number_initializer(), fixed_size_partitioner(2),
                          DType::float64);
  auto ids = ops::placeholder(g, DType::int64, {-1}, "ids");
  auto loss = ops::reduce_sum(ops::square(ops::embedding_lookup(emb, ids, "div")));
  train::GradientDescentOptimizer sgd(0.25);
  auto grads = sgd.compute_gradients(loss);
  REQUIRE(grads.size() == 2);
  for (const auto& [grad, var] : grads) {
    INFO(var.name());
    auto slices = as_indexed_slices(grad);
    REQUIRE(slices);
    CHECK(slices->values.dtype() == DType::float64);
    CHECK(slices->unique_indices);  // the lookup gathered each distinct id once
  }
  auto train_op = sgd.apply_gradients(grads);
  for (const auto& op : g.operations()) CHECK(op.type() != "ApplyGradientDescent");
  Session sess(g);
  sess.run(global_variables_initializer(g));
  // Row 1 twice (duplicates add up), row 5 once: d(x^2)/dx = 2x.
  sess.run(train_op, {{ids, ids64({1, 5, 1})}});
  auto table = doubles(sess.run({emb.as_tensor()})[0]);
  CHECK(table[2] == 1 - 0.25 * 2 * (2 * 1.0));
  CHECK(table[3] == 101 - 0.25 * 2 * (2 * 101.0));
  CHECK(table[10] == 5 - 0.25 * 2 * 5.0);
  for (std::size_t r : {0, 2, 3, 4, 6}) {
    INFO("untouched row " << r);
    CHECK(table[2 * r] == static_cast<double>(r));
  }
}

TEST_CASE(
    "a lookup's unique gradient is not de-duplicated again next to the table, two lookups' are") {
  auto count_unique = [](const Graph& g) {
    std::size_t n = 0;
    for (const auto& op : g.operations()) n += op.type() == "Unique";
    return n;
  };
  SECTION("one lookup") {
    Graph g;
    auto emb = get_variable(g, "emb", {7, 2}, row_number_initializer(), fixed_size_partitioner(2),
                            DType::float64);
    auto ids = ops::placeholder(g, DType::int64, {-1}, "ids");
    auto loss = ops::reduce_sum(ops::square(ops::embedding_lookup(emb, ids, "div")));
    REQUIRE(count_unique(g) == 1);
    train::AdagradOptimizer opt(0.1);
    opt.minimize(loss);
    CHECK(count_unique(g) == 1);  // only the worker's, in the lookup
  }
  SECTION("two lookups of one table: their slices are concatenated, duplicates possible") {
    Graph g;
    auto emb = get_variable(g, "emb", {7, 2}, row_number_initializer(), fixed_size_partitioner(1),
                            DType::float64);
    auto ids = ops::placeholder(g, DType::int64, {-1}, "ids");
    auto loss = ops::reduce_sum(ops::embedding_lookup(emb, ids)) +
                ops::reduce_sum(ops::embedding_lookup(emb, ids));
    train::AdagradOptimizer opt(0.1, 0.1);
    auto grads = opt.compute_gradients(loss);
    REQUIRE(grads.size() == 1);
    auto slices = as_indexed_slices(grads[0].first);
    REQUIRE(slices);
    CHECK_FALSE(slices->unique_indices);
    auto train_op = opt.apply_gradients(grads);
    CHECK(count_unique(g) == 3);  // two lookups' and the optimizer's
    Session sess(g);
    sess.run(global_variables_initializer(g));
    sess.run(train_op, {{ids, ids64({3})}});
    // Row 3 got gradient 1 from each lookup: summed to 2 before Adagrad squares it.
    const double acc = 0.1 + 2.0 * 2.0;
    auto table = doubles(sess.run({emb.as_tensor()})[0]);
    CHECK(table[6] == Approx(3 - 0.1 * 2.0 / std::sqrt(acc)));
  }
}

TEST_CASE("gradients through gather and embedding_lookup match central differences") {
  Graph g;
  auto table = get_variable(g, "table", {5, 3}, random_normal_initializer(0, 1, 3), DType::float64);
  auto emb = get_variable(g, "emb", {5, 3}, random_normal_initializer(0, 1, 4),
                          fixed_size_partitioner(2), DType::float64);
  auto ids = ops::constant(g, ids64({4, 1, 4, 0}));
  auto weights = ops::constant(
      g,
      Tensor::from_vector<double>({0.5, -1, 2, 1.5, 0.3, -0.7, 1, 2, -2, 0.1, 0.2, 0.9}, {4, 3}));
  auto y = ops::reduce_sum(ops::square(ops::embedding_lookup(table, ids)) * weights) +
           ops::reduce_sum(ops::embedding_lookup(emb, ids, "mod") * weights) +
           ops::reduce_sum(ops::gather(table.value(), ids) * weights);
  std::vector<Variable> vars{table, emb.partitions()[0], emb.partitions()[1]};
  std::vector<Output> xs;
  for (const auto& v : vars) xs.push_back(v.value());
  auto grads = gradients(y, xs);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  auto analytic = sess.run(grads);
  const double eps = 1e-6;
  for (std::size_t k = 0; k < vars.size(); ++k) {
    INFO(vars[k].name());
    const Tensor base = sess.run({vars[k].value()})[0].deep_copy();
    auto value = ops::placeholder(g, DType::float64, {-1, 3});
    auto assign = vars[k].assign(value);
    for (std::size_t j = 0; j < base.size(); ++j) {
      auto at = [&](double delta) {
        Tensor t = base.deep_copy();
        t.data<double>()[j] += delta;
        sess.run(assign.op(), {{value, t}});
        return sess.run({y})[0].data<double>()[0];
      };
      const double numeric = (at(eps) - at(-eps)) / (2 * eps);
      CHECK(analytic[k].data<double>()[j] == Approx(numeric).epsilon(1e-5).margin(1e-6));
    }
    sess.run(assign.op(), {{value, base}});
  }
}

namespace embedding_test {

// Runs `steps` sparse updates of a 6x2 float64 table by `opt` on the loss sum(w * lookup(ids)),
// whose gradient rows are exactly `w` per id; returns the table and every slot, by name.
std::map<std::string, std::vector<double>> run_sparse(train::Optimizer& opt,
                                                      const std::vector<std::int64_t>& batch,
                                                      const std::vector<double>& w, int steps) {
  Graph g;
  auto table = get_variable(g, "t", {6, 2}, row_number_initializer(), DType::float64);
  auto ids = ops::constant(g, ids64(batch));
  auto weights = ops::constant(g, Tensor::from_vector(w, {batch.size(), 2}));
  auto loss = ops::reduce_sum(ops::embedding_lookup(table, ids) * weights);
  auto train_op = opt.minimize(loss);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  for (int s = 0; s < steps; ++s) sess.run(train_op);
  std::map<std::string, std::vector<double>> out;
  for (const auto& v : global_variables(g)) out[v.name()] = doubles(sess.run({v.value()})[0]);
  return out;
}

}  // namespace embedding_test

TEST_CASE("sparse optimizers update only the batch's rows, duplicates summed") {
  // Ids {4, 1, 4}: row 4 gets the sum of two gradient rows, row 1 one; rows 0, 2, 3, 5 never.
  const std::vector<std::int64_t> batch{4, 1, 4};
  const std::vector<double> w{0.5, -1, 2, 0.25, 1, 1};
  const std::map<std::size_t, std::vector<double>> g{{4, {1.5, 0}}, {1, {2, 0.25}}};
  auto initial = [](std::size_t r, std::size_t c) { return static_cast<double>(r) + 100.0 * c; };
  auto untouched_rows_stay = [&](const std::vector<double>& table,
                                 const std::function<double(std::size_t, std::size_t)>& first) {
    for (std::size_t r : {0, 2, 3, 5})
      for (std::size_t c = 0; c < 2; ++c) {
        INFO("row " << r << " column " << c);
        CHECK(table[2 * r + c] == first(r, c));
      }
  };
  const int steps = 3;

  SECTION("Momentum") {
    train::MomentumOptimizer opt(0.1, 0.9);
    auto out = run_sparse(opt, batch, w, steps);
    for (auto& [row, grad] : g)
      for (std::size_t c = 0; c < 2; ++c) {
        double var = initial(row, c), acc = 0;
        for (int s = 0; s < steps; ++s) {
          acc = acc * 0.9 + grad[c];
          var -= 0.1 * acc;
        }
        CHECK(out["t"][2 * row + c] == Approx(var));
        CHECK(out["t/Momentum"][2 * row + c] == Approx(acc));
      }
    untouched_rows_stay(out["t"], initial);
    untouched_rows_stay(out["t/Momentum"], [](auto, auto) { return 0.0; });
  }
  SECTION("Adagrad") {
    train::AdagradOptimizer opt(0.1, 0.1);
    auto out = run_sparse(opt, batch, w, steps);
    for (auto& [row, grad] : g)
      for (std::size_t c = 0; c < 2; ++c) {
        double var = initial(row, c), acc = 0.1;
        for (int s = 0; s < steps; ++s) {
          acc += grad[c] * grad[c];
          var -= 0.1 * grad[c] / std::sqrt(acc);
        }
        CHECK(out["t"][2 * row + c] == Approx(var));
        CHECK(out["t/Adagrad"][2 * row + c] == Approx(acc));
      }
    untouched_rows_stay(out["t"], initial);
    untouched_rows_stay(out["t/Adagrad"], [](auto, auto) { return 0.1; });
  }
  SECTION("Ftrl") {
    const double lr = 0.5, l1 = 0.1, l2 = 0.2;
    train::FtrlOptimizer opt(lr, -0.5, 0.1, l1, l2);
    auto out = run_sparse(opt, batch, w, steps);
    for (auto& [row, grad] : g)
      for (std::size_t c = 0; c < 2; ++c) {
        double var = initial(row, c), acc = 0.1, lin = 0;
        for (int s = 0; s < steps; ++s) {
          const double new_acc = acc + grad[c] * grad[c];
          lin += grad[c] - (std::sqrt(new_acc) - std::sqrt(acc)) / lr * var;
          const double quad = std::sqrt(new_acc) / lr + 2 * l2;
          var = std::abs(lin) > l1 ? ((lin > 0 ? l1 : -l1) - lin) / quad : 0.0;
          acc = new_acc;
        }
        CHECK(out["t"][2 * row + c] == Approx(var));
        CHECK(out["t/Ftrl"][2 * row + c] == Approx(acc));
        CHECK(out["t/Ftrl_1"][2 * row + c] == Approx(lin));
      }
    untouched_rows_stay(out["t"], initial);
    untouched_rows_stay(out["t/Ftrl"], [](auto, auto) { return 0.1; });
    untouched_rows_stay(out["t/Ftrl_1"], [](auto, auto) { return 0.0; });
  }
  SECTION("Adam, lazy and TF1's default") {
    for (bool lazy : {true, false}) {
      INFO("lazy " << lazy);
      const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
      train::AdamOptimizer opt(lr, b1, b2, eps, "Adam", lazy);
      auto out = run_sparse(opt, batch, w, steps);
      for (std::size_t row = 0; row < 6; ++row)
        for (std::size_t c = 0; c < 2; ++c) {
          const bool in_batch = g.count(row) != 0;
          const double gc = in_batch ? g.at(row)[c] : 0.0;
          double var = initial(row, c), m = 0, v = 0, p1 = b1, p2 = b2;
          for (int s = 0; s < steps; ++s) {
            if (in_batch || !lazy) {
              const double alpha = lr * std::sqrt(1 - p2) / (1 - p1);
              m = b1 * m + (1 - b1) * gc;
              v = b2 * v + (1 - b2) * gc * gc;
              var -= alpha * m / (std::sqrt(v) + eps);
            }
            p1 *= b1;
            p2 *= b2;
          }
          INFO("row " << row << " column " << c);
          CHECK(out["t"][2 * row + c] == Approx(var).epsilon(1e-12));
          CHECK(out["t/Adam"][2 * row + c] == Approx(m).margin(1e-15));
          if (lazy && !in_batch) CHECK(out["t"][2 * row + c] == initial(row, c));
        }
    }
  }
  SECTION("Adam: a row left out of a batch moves on unless lazy") {
    // Step 1 touches row 0, step 2 only row 1: TF1's Adam still moves row 0 with its decayed
    // moment, LazyAdam leaves it exactly where step 1 put it.
    for (bool lazy : {true, false}) {
      INFO("lazy " << lazy);
      Graph graph;
      auto table = get_variable(graph, "t", {3, 1}, zeros_initializer(), DType::float64);
      auto ids = ops::placeholder(graph, DType::int64, {-1}, "ids");
      train::AdamOptimizer opt(0.1, 0.9, 0.999, 1e-8, "Adam", lazy);
      auto train_op = opt.minimize(ops::reduce_sum(ops::embedding_lookup(table, ids)));
      Session sess(graph);
      sess.run(global_variables_initializer(graph));
      sess.run({}, {{ids, ids64({0})}}, {train_op});
      const double after_first = doubles(sess.run({table.value()})[0])[0];
      CHECK(after_first == Approx(-0.1));  // Adam's first step is lr * sign(grad)
      sess.run({}, {{ids, ids64({1})}}, {train_op});
      const auto after_second = doubles(sess.run({table.value()})[0]);
      if (lazy) {
        CHECK(after_second[0] == after_first);
      } else {
        CHECK(after_second[0] < after_first);
      }
      CHECK(after_second[1] < 0);
      CHECK(after_second[2] == 0);  // never in a batch, never a moment: unchanged either way
    }
  }
  SECTION("GradientDescent") {
    train::GradientDescentOptimizer opt(0.5);
    auto out = run_sparse(opt, batch, w, steps);
    for (auto& [row, grad] : g)
      for (std::size_t c = 0; c < 2; ++c)
        CHECK(out["t"][2 * row + c] == Approx(initial(row, c) - steps * 0.5 * grad[c]));
    untouched_rows_stay(out["t"], initial);
  }
}

TEST_CASE("FtrlOptimizer on a dense gradient, and its argument checks") {
  Graph g;
  auto x = get_variable(g, "x", {2}, constant_initializer(1.0), DType::float64);
  auto loss = ops::reduce_sum(x.value() * ops::constant(g, Tensor::from_vector<double>({3, -4})));
  train::FtrlOptimizer opt(1.0, -0.5, 0.1, 0.5, 0.0);
  auto train_op = opt.minimize(loss);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  sess.run(train_op);
  auto v = doubles(sess.run({x.value()})[0]);
  for (std::size_t i = 0; i < 2; ++i) {
    const double grad = i == 0 ? 3 : -4;
    const double acc = 0.1 + grad * grad;
    const double lin = grad - (std::sqrt(acc) - std::sqrt(0.1)) / 1.0 * 1.0;
    const double want = std::abs(lin) > 0.5 ? ((lin > 0 ? 0.5 : -0.5) - lin) / std::sqrt(acc) : 0;
    CHECK(v[i] == Approx(want));
  }
  CHECK_THROWS_AS(train::FtrlOptimizer(0.1, 0.5), InvalidArgument);
  CHECK_THROWS_AS(train::FtrlOptimizer(0.1, -0.5, -1.0), InvalidArgument);
  CHECK_THROWS_AS(train::FtrlOptimizer(0.1, -0.5, 0.1, -1.0), InvalidArgument);
  CHECK_THROWS_AS(train::FtrlOptimizer(0.0), InvalidArgument);
}
