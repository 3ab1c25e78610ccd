// Partitioners: how many shards a variable is split into along each axis (TF1's
// tf.fixed_size_partitioner, tf.min_max_variable_partitioner, tf.variable_axis_size_partitioner,
// with TF's arithmetic), and the shard layout: along the partitioned axis the first
// (dim % n) shards get one extra row. A partitioner returns one count per axis, at most one of
// them above 1.
//
// Pure functions of (shape, dtype): thread-safe, no graph involved.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/shape.hpp"

namespace psflow {

using Partitioner = std::function<std::vector<std::size_t>(const Shape&, DType)>;

// Where one shard sits in its whole variable (TF's PartitionInfo). Initializers get it, so a
// seeded initializer gives each element the value it has in the unpartitioned variable, and
// the table is the same whatever the shard count.
struct PartitionInfo {
  Shape full_shape;                 // the whole variable
  std::vector<std::size_t> offset;  // the shard's first element, one coordinate per axis
};

// `num_shards` shards along `axis` (fewer when the axis has fewer rows).
PSFLOW_DECL Partitioner fixed_size_partitioner(std::size_t num_shards, int axis = 0);

// As many shards as keep each at least `min_slice_size` bytes, at most `max_partitions` and at
// most the rows of `axis` (and at least one).
PSFLOW_DECL Partitioner min_max_variable_partitioner(std::size_t max_partitions = 1, int axis = 0,
                                                     std::size_t min_slice_size = 256 << 10);

// As few shards as keep each at most `max_shard_bytes` (a shard holds at least one row, so a
// row larger than that makes one shard per row); `max_shards` (0: no limit) caps the count.
PSFLOW_DECL Partitioner variable_axis_size_partitioner(std::size_t max_shard_bytes, int axis = 0,
                                                       std::size_t max_shards = 0);

// Rows of each of `num_shards` shards of an axis of `dim` rows: the first dim % num_shards
// shards get one extra row (TF's layout).
PSFLOW_DECL std::vector<std::size_t> shard_sizes(std::size_t dim, std::size_t num_shards);
// Where each shard starts along the axis: the running sum of shard_sizes.
PSFLOW_DECL std::vector<std::size_t> shard_offsets(std::size_t dim, std::size_t num_shards);

// Where id `id` of a table of `rows` rows in `num_shards` shards lives, by TF's
// partition_strategy: "mod" (mod = true) shard id % n, row id / n; "div" contiguous blocks of
// shard_sizes (the first rows % n shards one row longer). Inline: ShardIds calls it per id.
struct ShardRow {
  std::size_t shard;
  std::size_t row;
};
inline ShardRow route_id(bool mod, std::size_t num_shards, std::size_t rows, std::size_t id) {
  if (mod) return {id % num_shards, id / num_shards};
  const std::size_t per = rows / num_shards, extras = rows % num_shards;
  const std::size_t long_rows = extras * (per + 1);
  if (id < long_rows) return {id / (per + 1), id % (per + 1)};
  return {extras + (id - long_rows) / per, (id - long_rows) % per};
}

// Checks what a partitioner returned for variable `name` of `shape`: one count per axis, each
// at least 1 and at most the axis' rows, at most one axis split. Throws InvalidArgument naming
// the variable and the counts.
PSFLOW_DECL void check_partitions(const std::string& name, const Shape& shape,
                                  const std::vector<std::size_t>& partitions);

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

// The index of `axis` in `shape`, or InvalidArgument naming the partitioner.
PSFLOW_DECL std::size_t partition_axis(const char* partitioner, int axis, const Shape& shape) {
  if (axis < 0 || static_cast<std::size_t>(axis) >= shape.size())
    throw InvalidArgument(std::string(partitioner) + ": cannot partition a variable of shape " +
                          shape_string(shape) + " along axis " + std::to_string(axis) +
                          " (pass an axis in [0, rank))");
  return static_cast<std::size_t>(axis);
}

// One count per axis, `count` along `axis`.
PSFLOW_DECL std::vector<std::size_t> along(const Shape& shape, std::size_t axis,
                                           std::size_t count) {
  std::vector<std::size_t> partitions(shape.size(), 1);
  partitions[axis] = count;
  return partitions;
}

}  // namespace psflow::detail

namespace psflow {

// namespace detail
PSFLOW_DECL Partitioner fixed_size_partitioner(std::size_t num_shards, int axis) {
  if (num_shards == 0)
    throw InvalidArgument("fixed_size_partitioner: num_shards must be at least 1");
  return [num_shards, axis](const Shape& shape, DType) {
    const std::size_t a = detail::partition_axis("fixed_size_partitioner", axis, shape);
    return detail::along(shape, a, std::max<std::size_t>(1, std::min(num_shards, shape[a])));
  };
}

PSFLOW_DECL Partitioner min_max_variable_partitioner(std::size_t max_partitions, int axis,
                                                     std::size_t min_slice_size) {
  if (max_partitions == 0 || min_slice_size == 0)
    throw InvalidArgument(
        "min_max_variable_partitioner: max_partitions and min_slice_size must be at least 1");
  return [max_partitions, axis, min_slice_size](const Shape& shape, DType dtype) {
    const std::size_t a = detail::partition_axis("min_max_variable_partitioner", axis, shape);
    const double total_bytes = static_cast<double>(num_elements(shape) * dtype_size(dtype));
    const auto wanted = static_cast<std::size_t>(std::ceil(total_bytes / min_slice_size));
    return detail::along(shape, a,
                         std::max<std::size_t>(1, std::min({shape[a], max_partitions, wanted})));
  };
}

PSFLOW_DECL Partitioner variable_axis_size_partitioner(std::size_t max_shard_bytes, int axis,
                                                       std::size_t max_shards) {
  if (max_shard_bytes == 0)
    throw InvalidArgument("variable_axis_size_partitioner: max_shard_bytes must be at least 1");
  return [max_shard_bytes, axis, max_shards](const Shape& shape, DType dtype) {
    const std::size_t a = detail::partition_axis("variable_axis_size_partitioner", axis, shape);
    if (shape[a] == 0) return detail::along(shape, a, 1);
    const double bytes_per_row =
        static_cast<double>(num_elements(shape) / shape[a] * dtype_size(dtype));
    // Rows that fit in one shard (at least one), then shards for all rows.
    const double rows_per_shard = std::max(1.0, std::floor(max_shard_bytes / bytes_per_row));
    auto shards =
        static_cast<std::size_t>(std::ceil(static_cast<double>(shape[a]) / rows_per_shard));
    if (max_shards > 0) shards = std::min(shards, max_shards);
    return detail::along(shape, a, std::max<std::size_t>(1, shards));
  };
}

PSFLOW_DECL std::vector<std::size_t> shard_sizes(std::size_t dim, std::size_t num_shards) {
  if (num_shards == 0) throw InvalidArgument("shard_sizes: num_shards must be at least 1");
  std::vector<std::size_t> sizes(num_shards, dim / num_shards);
  for (std::size_t i = 0; i < dim % num_shards; ++i) ++sizes[i];
  return sizes;
}

PSFLOW_DECL std::vector<std::size_t> shard_offsets(std::size_t dim, std::size_t num_shards) {
  std::vector<std::size_t> offsets;
  std::size_t offset = 0;
  for (std::size_t rows : shard_sizes(dim, num_shards)) {
    offsets.push_back(offset);
    offset += rows;
  }
  return offsets;
}

PSFLOW_DECL void check_partitions(const std::string& name, const Shape& shape,
                                  const std::vector<std::size_t>& partitions) {
  auto fail = [&](const std::string& why) {
    throw InvalidArgument("partitioned variable '" + name + "' of shape " + shape_string(shape) +
                          ": the partitioner returned " + shape_string(partitions) + ", but " +
                          why);
  };
  if (partitions.size() != shape.size()) fail("it needs one count per axis");
  std::size_t split_axes = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (partitions[i] == 0) fail("every count must be at least 1");
    if (partitions[i] > std::max<std::size_t>(shape[i], 1))
      fail("axis " + std::to_string(i) + " has only " + std::to_string(shape[i]) +
           " rows, fewer than the shards asked for");
    if (partitions[i] > 1) ++split_axes;
  }
  if (split_axes > 1) fail("only one axis may be split");
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
