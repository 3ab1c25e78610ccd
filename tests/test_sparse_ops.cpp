// Sparse ops: gather rows, scatter into a variable's rows, unique ids. Expected values are
// written out by hand (numpy's take / np.add.at / np.unique give the same).
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "psflow/runtime.hpp"

using namespace psflow;
using Catch::Contains;

namespace {

Tensor f32(std::vector<float> values, Shape shape) {
  return Tensor::from_vector(values, std::move(shape));
}

// A 4x2 table: row r holds {10r, 10r + 1}.
Tensor table_4x2() { return f32({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}); }

}  // namespace

TEST_CASE("gather takes rows in id order, for int32 and int64 ids of any rank") {
  Graph g;
  Output table = ops::constant(g, table_4x2(), "table");
  Output ids32 = ops::constant(g, Tensor::from_vector<std::int32_t>({3, 0, 3}), "ids32");
  Output ids64 = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 2, 2, 0}, {2, 2}), "ids64");
  Output a = ops::gather(table, ids32);
  Output b = ops::gather(table, ids64);
  CHECK(a.shape().dims == std::vector<std::int64_t>{3, 2});
  CHECK(b.shape().dims == std::vector<std::int64_t>{2, 2, 2});
  Session sess(g);
  auto out = sess.run({a, b});
  CHECK(out[0].equals(f32({30, 31, 0, 1, 30, 31}, {3, 2})));
  CHECK(out[1].equals(f32({10, 11, 20, 21, 20, 21, 0, 1}, {2, 2, 2})));

  // A vector table gives scalars per id; no ids give no rows.
  Output vec = ops::constant(g, f32({5, 6, 7}, {3}));
  Output none = ops::constant(g, Tensor(DType::int64, {0}));
  Output vec_ids = ops::constant(g, Tensor::from_vector<std::int32_t>({2, 0, 2}));
  auto more = sess.run({ops::gather(vec, vec_ids), ops::gather(table, none)});
  CHECK(more[0].equals(f32({7, 5, 7}, {3})));
  CHECK(more[1].shape() == Shape{0, 2});
}

TEST_CASE("gather refuses an id outside the table, naming the id and the table") {
  Graph g;
  Output table = ops::constant(g, table_4x2(), "table");
  Output ids = ops::placeholder(g, DType::int64, {-1}, "ids");
  Output rows = ops::gather(table, ids, "lookup");
  Session sess(g);
  for (std::int64_t bad : {std::int64_t{4}, std::int64_t{-1}}) {
    INFO("id " << bad);
    CHECK_THROWS_MATCHES(
        sess.run({rows}, {{ids, Tensor::from_vector<std::int64_t>({0, bad})}}), InvalidArgument,
        Catch::Matchers::Predicate<InvalidArgument>([bad](const InvalidArgument& e) {
          const std::string m = e.what();
          return m.find("id " + std::to_string(bad) + " (position 1") != std::string::npos &&
                 m.find("'table:0'") != std::string::npos && m.find("[0, 4)") != std::string::npos;
        }));
  }
  // Ids must be integers: a clear build-time error.
  CHECK_THROWS_WITH(ops::gather(table, ops::constant(g, f32({1}, {1}))),
                    Contains("ids must be int32 or int64"));
}

TEST_CASE("scatter_add and scatter_sub change only the given rows, summing duplicate ids") {
  Graph g;
  Variable v = get_variable(g, "v", {4, 2}, constant_initializer(1));
  Output ids = ops::constant(g, Tensor::from_vector<std::int32_t>({2, 0, 2}));
  Output updates = ops::constant(g, f32({1, 2, 10, 20, 100, 200}, {3, 2}));
  Output added = ops::scatter_add(v, ids, updates);
  Output subtracted = ops::scatter_sub(v, ids, updates);
  CHECK(added.device() == v.device());
  Session sess(g);
  sess.run(global_variables_initializer(g));
  auto after_add = sess.run({added})[0];
  CHECK(after_add.equals(f32({11, 21, 1, 1, 102, 203, 1, 1}, {4, 2})));
  CHECK(sess.run({v.value()})[0].equals(after_add));
  CHECK(sess.run({subtracted})[0].equals(f32({1, 1, 1, 1, 1, 1, 1, 1}, {4, 2})));
}

TEST_CASE("scatter_update sets rows, and with duplicate ids one of their updates wins") {
  Graph g;
  Variable v = get_variable(g, "v", {3, 2}, constant_initializer(0), DType::float32);
  Output ids = ops::constant(g, Tensor::from_vector<std::int64_t>({1, 1}));
  Output updates = ops::constant(g, f32({5, 6, 7, 8}, {2, 2}));
  Session sess(g);
  sess.run(global_variables_initializer(g));
  const Tensor out = sess.run({ops::scatter_update(v, ids, updates)})[0];
  const float* p = out.data<float>();
  CHECK(p[0] == 0);
  CHECK(p[1] == 0);
  CHECK(((p[2] == 5 && p[3] == 6) || (p[2] == 7 && p[3] == 8)));
  CHECK(p[4] == 0);
  CHECK(p[5] == 0);
}

TEST_CASE("a scatter with one bad id applies nothing and names the variable and the id") {
  Graph g;
  Variable v = get_variable(g, "table", {4, 2}, constant_initializer(1));
  Output ids = ops::placeholder(g, DType::int32, {2}, "ids");
  Output updates = ops::constant(g, f32({1, 1, 1, 1}, {2, 2}));
  Output add = ops::scatter_add(v, ids, updates);
  Session sess(g);
  sess.run(global_variables_initializer(g));
  // Reading the value keeps a reference, so the update below works on a copy: both paths fail.
  const Tensor before = sess.run({v.value()})[0];
  CHECK_THROWS_WITH(
      sess.run({add}, {{ids, Tensor::from_vector<std::int32_t>({0, 9})}}),
      Contains("ScatterAdd") && Contains("'table'") && Contains("id 9") && Contains("[0, 4)"));
  CHECK(sess.run({v.value()})[0].equals(f32({1, 1, 1, 1, 1, 1, 1, 1}, {4, 2})));
  CHECK(before.equals(f32({1, 1, 1, 1, 1, 1, 1, 1}, {4, 2})));

  // Updates of the wrong shape fail when the graph is built.
  CHECK_THROWS_WITH(ops::scatter_add(v, ops::constant(g, Tensor::from_vector<std::int32_t>({0})),
                                     ops::constant(g, f32({1, 2, 3}, {1, 3}))),
                    Contains("indices.shape + variable.shape[1:] = [1,2]"));
  // The first input must be a variable's state, as for assign.
  CHECK_THROWS_AS(
      ops::scatter_add(Variable(), ops::constant(g, Tensor::from_vector<std::int32_t>({0})),
                       updates),
      Error);
}

TEST_CASE("unique lists values in order of first appearance, with x == gather(y, idx)") {
  Graph g;
  Output x = ops::constant(g, Tensor::from_vector<std::int64_t>({7, 3, 7, 7, 1, 3}));
  auto [y, idx] = ops::unique(x);
  Session sess(g);
  auto out = sess.run({y, idx, ops::gather(y, idx)});
  CHECK(out[0].equals(Tensor::from_vector<std::int64_t>({7, 3, 1})));
  CHECK(out[1].equals(Tensor::from_vector<std::int32_t>({0, 1, 0, 0, 2, 1})));
  CHECK(out[2].equals(Tensor::from_vector<std::int64_t>({7, 3, 7, 7, 1, 3})));
  CHECK_THROWS_WITH(ops::unique(ops::constant(g, table_4x2())), Contains("x must be a vector"));
}
