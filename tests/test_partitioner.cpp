// Partitioners and the shard layout, as table tests of TF1's arithmetic
// (partitioned_variables.py): the counts each partitioner returns and the rows of each shard.
#include <catch2/catch.hpp>
#include <cstddef>
#include <vector>

#include "psflow/graph/partitioner.hpp"

using namespace psflow;
using Catch::Contains;
using Counts = std::vector<std::size_t>;

TEST_CASE("fixed_size_partitioner splits one axis into num_shards, at most one per row") {
  struct Row {
    std::size_t shards;
    int axis;
    Shape shape;
    Counts expected;
  };
  for (const Row& row : {Row{4, 0, {10, 3}, {4, 1}}, Row{20, 0, {10, 3}, {10, 1}},
                         Row{2, 1, {10, 3}, {1, 2}}, Row{1, 0, {7}, {1}}, Row{3, 0, {3}, {3}}}) {
    INFO("fixed_size_partitioner(" << row.shards << ", " << row.axis << ") of "
                                   << shape_string(row.shape));
    CHECK(fixed_size_partitioner(row.shards, row.axis)(row.shape, DType::float32) == row.expected);
  }
}

TEST_CASE("min_max_variable_partitioner keeps min_slice_size bytes per shard, at most max") {
  struct Row {
    std::size_t max_partitions;
    std::size_t min_slice_size;
    Shape shape;
    DType dtype;
    Counts expected;
  };
  // TF's own example: a float32 [1024, 1024] is 4 MiB, 16 slices of 256 KiB.
  for (const Row& row : {Row{16, 256 << 10, {1024, 1024}, DType::float32, {16, 1}},
                         Row{100, 256 << 10, {1024, 1024}, DType::float32, {16, 1}},
                         Row{8, 256 << 10, {1024, 1024}, DType::float32, {8, 1}},
                         Row{100, 256 << 10, {1024, 1024}, DType::float64, {32, 1}},
                         Row{100, 256 << 10, {10, 10}, DType::float32, {1, 1}},
                         Row{100, 256 << 10, {4, 1 << 20}, DType::float32, {4, 1}},
                         Row{100, 1000, {10, 30}, DType::float32, {2, 1}}}) {
    INFO("min_max_variable_partitioner(" << row.max_partitions << ", 0, " << row.min_slice_size
                                         << ") of " << shape_string(row.shape));
    CHECK(min_max_variable_partitioner(row.max_partitions, 0, row.min_slice_size)(
              row.shape, row.dtype) == row.expected);
  }
}

TEST_CASE("variable_axis_size_partitioner keeps shards under max_shard_bytes, rows whole") {
  struct Row {
    std::size_t max_shard_bytes;
    std::size_t max_shards;
    Shape shape;
    Counts expected;
  };
  // float32 [100, 10]: 40 bytes a row.
  for (const Row& row : {Row{1000, 0, {100, 10}, {4, 1}},   // 25 rows a shard
                         Row{1040, 0, {100, 10}, {4, 1}},   // 26 rows a shard: ceil(100/26)
                         Row{4000, 0, {100, 10}, {1, 1}},   // everything fits
                         Row{10, 0, {100, 10}, {100, 1}},   // a row is larger: one per row
                         Row{10, 8, {100, 10}, {8, 1}}}) {  // capped by max_shards
    INFO("variable_axis_size_partitioner(" << row.max_shard_bytes << ", 0, " << row.max_shards
                                           << ") of " << shape_string(row.shape));
    CHECK(variable_axis_size_partitioner(row.max_shard_bytes, 0, row.max_shards)(
              row.shape, DType::float32) == row.expected);
  }
}

TEST_CASE("shards take dim / n rows, the first dim % n one more") {
  CHECK(shard_sizes(10, 3) == Counts{4, 3, 3});
  CHECK(shard_offsets(10, 3) == Counts{0, 4, 7});
  CHECK(shard_sizes(12, 4) == Counts{3, 3, 3, 3});
  CHECK(shard_sizes(5, 5) == Counts{1, 1, 1, 1, 1});
  CHECK(shard_sizes(4194304, 3) == Counts{1398102, 1398101, 1398101});
}

TEST_CASE("bad partitioner arguments and results are InvalidArgument naming what is wrong") {
  CHECK_THROWS_WITH(fixed_size_partitioner(0), Contains("num_shards must be at least 1"));
  CHECK_THROWS_WITH(variable_axis_size_partitioner(0), Contains("max_shard_bytes"));
  CHECK_THROWS_WITH(min_max_variable_partitioner(0), Contains("max_partitions"));
  CHECK_THROWS_WITH(fixed_size_partitioner(2, 2)({4, 4}, DType::float32),
                    Contains("shape [4,4] along axis 2"));
  CHECK_THROWS_WITH(fixed_size_partitioner(2)({}, DType::float32), Contains("along axis 0"));
  CHECK_THROWS_WITH(check_partitions("emb", {3, 4}, {4, 1}),
                    Contains("'emb'") && Contains("[4,1]") && Contains("only 3 rows"));
  CHECK_THROWS_WITH(check_partitions("emb", {3, 4}, {2, 2}), Contains("only one axis"));
  CHECK_THROWS_WITH(check_partitions("emb", {3, 4}, {2}), Contains("one count per axis"));
  CHECK_THROWS_WITH(check_partitions("emb", {3, 4}, {0, 1}), Contains("at least 1"));
  CHECK_NOTHROW(check_partitions("emb", {3, 4}, {3, 1}));
}
