// Embedding ops: TF1's embedding_lookup and embedding_lookup_sparse over a Variable or a
// PartitionedVariable, and the ops they are made of. Kernels:
// runtime/kernels/embedding_kernels.hpp.
//   ShardIds(ids) -> (shard, local_id)          which shard holds each id, and its row there
//                                                 ("mod" or "div", as TF's partition_strategy)
//   DynamicPartition(data, partitions)           data split into num_partitions outputs (TF's)
//   DynamicStitch(indices..., data...)           the inverse: rows put back in order (TF's)
//   SparseSegmentSum/Mean/SqrtN(data, indices, segment_ids, num_segments[, weights])
//       out[s] = sum over i with segment_ids[i] == s of w_i * data[indices[i]], divided by
//       1 / sum w_i / sqrt(sum w_i^2); w_i = 1 without weights; an empty segment is zeros
//   SparseSegmentSumGrad/MeanGrad/SqrtNGrad(grad, indices, segment_ids, data[, weights])
//       their gradient with respect to data (data gives the row count only)
//
// How a lookup runs (embedding_lookup(params, ids)):
//   1. the distinct ids of the batch (Unique), so each row is read and sent once;
//   2. for a PartitionedVariable, ShardIds routes them ("mod": id % n holds row id / n; "div":
//      contiguous blocks, the first rows % n shards one row longer) and DynamicPartition splits
//      them per shard;
//   3. each shard's rows are read by a ResourceGather colocated with the shard, so it runs on the
//      ps that holds it and only the rows travel;
//   4. DynamicStitch puts the rows back in the order of the distinct ids, and a gather by the
//      Unique positions expands them to the batch: ids.shape + params.shape[1:].
// The result equals TF's. Step 1 is psflow's addition (TF's embedding_lookup_sparse does it, its
// embedding_lookup does not): it also makes the gradient sum duplicate ids on the worker, so
// each shard gets one gradient row per distinct id. The gradient of the table is an
// IndexedSlices per shard (graph/sparse_ops.hpp), applied by the optimizers' sparse kernels on
// the shard's ps.
//
// Ids are int32 or int64. A negative id or one >= the table's rows fails the step with
// InvalidArgument naming the table and the id. An unknown partition strategy or combiner is an
// InvalidArgument when the graph is built.
//
// partition_strategy (TF's): "mod" or "div", how ids are routed to shards (step 2). The default
// "" means the table's own strategy when get_variable fixed one (asking for the other one is then
// an InvalidArgument naming the table and both), else "mod" (TF's default). Every lookup notes
// its strategy on the table (PartitionedVariable::lookup_strategy(): "both" once read both ways),
// which the Saver stores so that the table restores into another shard count with every id
// keeping its row (train/partition_layout.hpp).
//
// embedding_lookup_sparse(params, sp_ids, [sp_weights,] combiner[, partition_strategy]): the rows
// of each batch row's ids, combined by "sum", "mean" (default, weighted mean) or "sqrtn" (sum /
// sqrt(sum of squared weights)), ids routed as embedding_lookup routes them. The result has
// dense_shape[0] rows (psflow's choice: a batch row without ids gives zeros, as TF's
// safe_embedding_lookup_sparse; TF1's plain version drops trailing empty rows). Weights are taken
// as given: they get no gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/partitioned_variable.hpp"
#include "psflow/graph/sparse_ops.hpp"

namespace psflow {

// A sparse tensor (TF's tf.SparseTensor): values[i] sits at indices[i] of a dense tensor of
// dense_shape. For embedding_lookup_sparse: indices int64 [N, 2] (batch row, position), values
// [N] ids (int32 or int64) or weights (float), dense_shape int64 [2].
struct SparseTensor {
  Output indices;
  Output values;
  Output dense_shape;
};

namespace detail {

// The rows of `distinct` ids (each once) read shard by shard: shard[i] (int32) is the shard of
// `num_shards` that holds id i, keys[i] what that shard knows it by (its local row, or the id);
// read(p, keys of shard p) reads shard p's rows on its device. The rows come back in the order
// of `distinct` (DynamicPartition there, DynamicStitch back).
PSFLOW_DECL Output read_sharded_rows(Output distinct, Output shard, Output keys,
                                     std::size_t num_shards,
                                     const std::function<Output(std::size_t, Output)>& read);

// ids.shape + row shape: rows_of(the distinct ids of `ids`), expanded back to the batch, in the
// name scope "embedding_lookup" (steps 1 and 4 of the file comment).
PSFLOW_DECL Output lookup_through_distinct(Output ids,
                                           const std::function<Output(Output)>& rows_of);

// Op type of a combiner, or InvalidArgument naming what is allowed.
inline const char* sparse_segment_type(std::string_view combiner) {
  if (combiner == "sum") return "SparseSegmentSum";
  if (combiner == "mean") return "SparseSegmentMean";
  if (combiner == "sqrtn") return "SparseSegmentSqrtN";
  throw InvalidArgument("embedding_lookup_sparse: unknown combiner \"" + std::string(combiner) +
                        "\": use \"sum\", \"mean\" or \"sqrtn\"");
}

}  // namespace detail

namespace ops {

// (shard, local id) of each id of a table of `rows` rows in `num_shards` shards.
PSFLOW_DECL std::pair<Output, Output> shard_ids(Output ids, std::int64_t num_shards,
                                                std::int64_t rows, std::string_view strategy,
                                                std::string_view table, std::string_view name = "");

// data split by `partitions` (int32, values in [0, num_partitions)): output p holds, in order,
// the rows of data whose partition is p (TF's tf.dynamic_partition).
PSFLOW_DECL std::vector<Output> dynamic_partition(Output data, Output partitions,
                                                  std::int64_t num_partitions,
                                                  std::string_view name = "");

// merged[indices[m][i]] = data[m][i] (TF's tf.dynamic_stitch; with a repeated index, the last
// one wins).
PSFLOW_DECL Output dynamic_stitch(const std::vector<Output>& indices,
                                  const std::vector<Output>& data, std::string_view name = "");

}  // namespace ops

namespace ops {

// Rows `ids` of `params` (TF's tf.nn.embedding_lookup): ids.shape + params.shape[1:]. Read on
// the variable's device; see the file comment.
PSFLOW_DECL Output embedding_lookup(const Variable& params, Output ids);

// The same over the shards of `params`, ids routed by `partition_strategy` ("mod" or "div"; ""
// is the table's own, else "mod": see the file comment).
PSFLOW_DECL Output embedding_lookup(const PartitionedVariable& params, Output ids,
                                    std::string_view partition_strategy = "");

// The combined rows of each batch row's ids (TF's tf.nn.embedding_lookup_sparse; see the file
// comment): [dense_shape[0]] + params.shape[1:].
PSFLOW_DECL Output embedding_lookup_sparse(const PartitionedVariable& params,
                                           const SparseTensor& sp_ids,
                                           const std::optional<SparseTensor>& sp_weights,
                                           std::string_view combiner = "mean");

PSFLOW_DECL Output embedding_lookup_sparse(const PartitionedVariable& params,
                                           const SparseTensor& sp_ids,
                                           std::string_view combiner = "mean");

// The same with ids routed by `partition_strategy` (as embedding_lookup's).
PSFLOW_DECL Output embedding_lookup_sparse(const PartitionedVariable& params,
                                           const SparseTensor& sp_ids,
                                           const std::optional<SparseTensor>& sp_weights,
                                           std::string_view combiner,
                                           std::string_view partition_strategy);

PSFLOW_DECL Output embedding_lookup_sparse(const PartitionedVariable& params,
                                           const SparseTensor& sp_ids, std::string_view combiner,
                                           std::string_view partition_strategy);

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL void expect_id_dtype(const InferenceContext& ctx, std::size_t i) {
  if (ctx.input_dtypes[i] != DType::int32 && ctx.input_dtypes[i] != DType::int64)
    ctx.fail("ids must be int32 or int64, got " + ctx.describe_input(i));
}

// [-1] + shape[skip:] of input `i`, or unknown.
PSFLOW_DECL PartialShape rows_of(const InferenceContext& ctx, std::size_t i, std::size_t skip) {
  const auto& s = ctx.input_shapes[i];
  if (!s.known || s.dims.size() < skip) return PartialShape::unknown();
  std::vector<std::int64_t> dims{-1};
  dims.insert(dims.end(), s.dims.begin() + static_cast<std::ptrdiff_t>(skip), s.dims.end());
  return PartialShape::of(dims);
}

PSFLOW_DECL std::vector<OutputSpec> infer_shard_ids(const InferenceContext& ctx) {
  expect_id_dtype(ctx, 0);
  const auto& strategy = ctx.attr<std::string>("strategy");
  if (strategy != "mod" && strategy != "div")
    ctx.fail("partition strategy must be \"mod\" or \"div\", got \"" + strategy + "\"");
  if (ctx.attr<std::int64_t>("num_shards") < 1) ctx.fail("num_shards must be at least 1");
  return {OutputSpec{DType::int32, ctx.input_shapes[0]},
          OutputSpec{ctx.input_dtypes[0], ctx.input_shapes[0]}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_dynamic_partition(const InferenceContext& ctx) {
  if (ctx.input_dtypes[1] != DType::int32)
    ctx.fail("partitions must be int32, got " + ctx.describe_input(1));
  const auto n = ctx.attr<std::int64_t>("num_partitions");
  if (n < 1) ctx.fail("num_partitions must be at least 1");
  const std::size_t skip = ctx.input_shapes[1].known ? ctx.input_shapes[1].dims.size() : 0;
  PartialShape shape = ctx.input_shapes[1].known ? rows_of(ctx, 0, skip) : PartialShape::unknown();
  return std::vector<OutputSpec>(static_cast<std::size_t>(n),
                                 OutputSpec{ctx.input_dtypes[0], shape});
}

PSFLOW_DECL std::vector<OutputSpec> infer_dynamic_stitch(const InferenceContext& ctx) {
  const auto n = static_cast<std::size_t>(ctx.attr<std::int64_t>("N"));
  if (n < 1 || ctx.input_dtypes.size() != 2 * n)
    ctx.fail("needs N index tensors then N data tensors, N = " + std::to_string(n));
  for (std::size_t i = 0; i < n; ++i) {
    if (ctx.input_dtypes[i] != DType::int32 && ctx.input_dtypes[i] != DType::int64)
      ctx.fail("indices must be int32 or int64, got " + ctx.describe_input(i));
    ctx.expect_same_dtype(n, n + i);
  }
  const std::size_t skip = ctx.input_shapes[0].known ? ctx.input_shapes[0].dims.size() : 0;
  return {OutputSpec{ctx.input_dtypes[n],
                     ctx.input_shapes[0].known ? rows_of(ctx, n, skip) : PartialShape::unknown()}};
}

// SparseSegment*(data, indices, segment_ids, num_segments[, weights]).
PSFLOW_DECL std::vector<OutputSpec> infer_sparse_segment(const InferenceContext& ctx) {
  const std::size_t n = ctx.input_dtypes.size();
  if (n != 4 && n != 5)
    ctx.fail("takes data, indices, segment_ids, num_segments and optional weights, got " +
             std::to_string(n) + " inputs");
  expect_floating(ctx, 0);
  expect_id_dtype(ctx, 1);
  expect_id_dtype(ctx, 2);
  expect_id_dtype(ctx, 3);
  if (n == 5) ctx.expect_same_dtype(0, 4);
  return {OutputSpec{ctx.input_dtypes[0], rows_of(ctx, 0, 1)}};
}

// SparseSegment*Grad(grad, indices, segment_ids, data[, weights]): data's dtype and shape.
PSFLOW_DECL std::vector<OutputSpec> infer_sparse_segment_grad(const InferenceContext& ctx) {
  const std::size_t n = ctx.input_dtypes.size();
  if (n != 4 && n != 5) ctx.fail("takes grad, indices, segment_ids, data and optional weights");
  ctx.expect_same_dtype(0, 3);
  return {OutputSpec{ctx.input_dtypes[3], ctx.input_shapes[3]}};
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL std::pair<Output, Output> shard_ids(Output ids, std::int64_t num_shards,
                                                std::int64_t rows, std::string_view strategy,
                                                std::string_view table, std::string_view name) {
  auto op = detail::build_op("ShardIds", {ids},
                             {{"num_shards", num_shards},
                              {"rows", rows},
                              {"strategy", std::string(strategy)},
                              {"table", std::string(table)}},
                             name, "ShardIds");
  return {op.output(0), op.output(1)};
}

PSFLOW_DECL std::vector<Output> dynamic_partition(Output data, Output partitions,
                                                  std::int64_t num_partitions,
                                                  std::string_view name) {
  auto op = detail::build_op("DynamicPartition", {data, partitions},
                             {{"num_partitions", num_partitions}}, name, "DynamicPartition");
  std::vector<Output> out;
  for (int p = 0; p < op.num_outputs(); ++p) out.push_back(op.output(p));
  return out;
}

PSFLOW_DECL Output dynamic_stitch(const std::vector<Output>& indices,
                                  const std::vector<Output>& data, std::string_view name) {
  if (indices.empty() || indices.size() != data.size())
    throw InvalidArgument("dynamic_stitch: needs as many index tensors as data tensors (" +
                          std::to_string(indices.size()) + " and " + std::to_string(data.size()) +
                          ") and at least one");
  std::vector<Output> inputs = indices;
  inputs.insert(inputs.end(), data.begin(), data.end());
  return detail::build_op("DynamicStitch", inputs,
                          {{"N", static_cast<std::int64_t>(indices.size())}}, name, "DynamicStitch")
      .output(0);
}

}  // namespace psflow::ops

namespace psflow::detail {

// Rows `distinct_ids` (each id once) of the table made of `parts`, in that order: each part's
// rows read on its own device. `full_rows` is the table's row count.
PSFLOW_DECL Output read_sharded_rows(Output distinct, Output shard, Output keys,
                                     std::size_t num_shards,
                                     const std::function<Output(std::size_t, Output)>& read) {
  Graph& graph = distinct.graph();
  const auto n = static_cast<std::int64_t>(num_shards);
  const Output positions =
      ops::range(ops::constant(graph, Tensor(std::int64_t{0})), ops::size(distinct),
                 ops::constant(graph, Tensor(std::int64_t{1})));
  const std::vector<Output> shard_keys = ops::dynamic_partition(keys, shard, n);
  const std::vector<Output> where = ops::dynamic_partition(positions, shard, n);
  std::vector<Output> rows;
  for (std::size_t p = 0; p < num_shards; ++p) rows.push_back(read(p, shard_keys[p]));
  return ops::dynamic_stitch(where, rows);
}

PSFLOW_DECL Output lookup_through_distinct(Output ids,
                                           const std::function<Output(Output)>& rows_of) {
  Graph& graph = ids.graph();
  auto scope = graph.name_scope("embedding_lookup");
  const bool is_vector = ids.shape().known && ids.shape().dims.size() == 1;
  const Output flat = is_vector ? ids : ops::reshape(ids, {-1});
  auto [distinct, position] = ops::unique(flat);
  const Output rows = rows_of(distinct);
  const Output where = is_vector ? position : ops::reshape_to_shape_of(position, ids);
  return ops::gather(rows, where);
}

PSFLOW_DECL Output lookup_distinct(const std::vector<Variable>& parts, const std::string& table,
                                   std::size_t full_rows, Output distinct_ids,
                                   std::string_view strategy) {
  if (parts.size() == 1) return gather_distinct(parts.front().ref(), distinct_ids);
  auto [shard, local] = ops::shard_ids(distinct_ids, static_cast<std::int64_t>(parts.size()),
                                       static_cast<std::int64_t>(full_rows), strategy, table);
  return read_sharded_rows(
      distinct_ids, shard, local, parts.size(),
      [&](std::size_t p, Output ids) { return gather_distinct(parts[p].ref(), ids); });
}

// The rows of `ids` (any shape) from the table `parts`: ids.shape + row shape.
PSFLOW_DECL Output lookup(const std::vector<Variable>& parts, const std::string& table,
                          std::size_t full_rows, Output ids, std::string_view strategy) {
  if (!ids.valid()) throw InvalidArgument("embedding_lookup: ids is an empty Output");
  if (ids.dtype() != DType::int32 && ids.dtype() != DType::int64)
    throw InvalidArgument("embedding_lookup on '" + table + "': ids '" + ids.name() +
                          "' must be int32 or int64, got " + std::string(dtype_name(ids.dtype())));
  return lookup_through_distinct(ids, [&](Output distinct) {
    return lookup_distinct(parts, table, full_rows, distinct, strategy);
  });
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output embedding_lookup(const Variable& params, Output ids) {
  if (params.shape().empty())
    throw InvalidArgument("embedding_lookup: variable '" + params.name() +
                          "' has no rows (scalar)");
  return detail::lookup({params}, params.name(), params.shape()[0], ids, "mod");
}

PSFLOW_DECL Output embedding_lookup(const PartitionedVariable& params, Output ids,
                                    std::string_view partition_strategy) {
  if (params.axis() != 0)
    throw InvalidArgument("embedding_lookup: partitioned variable '" + params.name() +
                          "' is split along axis " + std::to_string(params.axis()) +
                          "; a lookup needs it split along axis 0 (rows)");
  const std::string strategy = detail::use_partition_strategy(params, partition_strategy);
  return detail::lookup(params.partitions(), params.name(), params.shape()[0], ids, strategy);
}

PSFLOW_DECL Output embedding_lookup_sparse(const PartitionedVariable& params,
                                           const SparseTensor& sp_ids,
                                           const std::optional<SparseTensor>& sp_weights,
                                           std::string_view combiner) {
  return embedding_lookup_sparse(params, sp_ids, sp_weights, combiner, "");
}

PSFLOW_DECL Output embedding_lookup_sparse(const PartitionedVariable& params,
                                           const SparseTensor& sp_ids, std::string_view combiner,
                                           std::string_view partition_strategy) {
  return embedding_lookup_sparse(params, sp_ids, std::nullopt, combiner, partition_strategy);
}

PSFLOW_DECL Output embedding_lookup_sparse(const PartitionedVariable& params,
                                           const SparseTensor& sp_ids,
                                           const std::optional<SparseTensor>& sp_weights,
                                           std::string_view combiner,
                                           std::string_view partition_strategy) {
  const char* type = detail::sparse_segment_type(combiner);
  if (!sp_ids.indices.valid() || !sp_ids.values.valid() || !sp_ids.dense_shape.valid())
    throw InvalidArgument("embedding_lookup_sparse on '" + params.name() +
                          "': sp_ids needs indices, values and dense_shape");
  if (sp_ids.indices.dtype() != DType::int64 || sp_ids.dense_shape.dtype() != DType::int64)
    throw InvalidArgument("embedding_lookup_sparse on '" + params.name() +
                          "': sp_ids.indices and sp_ids.dense_shape must be int64");
  if (sp_weights && (!sp_weights->values.valid() || sp_weights->values.dtype() != params.dtype()))
    throw InvalidArgument("embedding_lookup_sparse on '" + params.name() +
                          "': sp_weights.values must be " +
                          std::string(dtype_name(params.dtype())) + " like the table");
  Graph& graph = sp_ids.values.graph();
  auto scope = graph.name_scope("embedding_lookup_sparse");
  const Output segment_ids = reshape(slice(sp_ids.indices, {0, 0}, {-1, 1}), {-1});
  const Output num_segments = reshape(slice(sp_ids.dense_shape, {0}, {1}), {});
  const Output ids = sp_ids.values;
  if (ids.dtype() != DType::int32 && ids.dtype() != DType::int64)
    throw InvalidArgument("embedding_lookup_sparse on '" + params.name() + "': ids '" + ids.name() +
                          "' must be int32 or int64, got " + std::string(dtype_name(ids.dtype())));
  if (params.axis() != 0)
    throw InvalidArgument("embedding_lookup_sparse: partitioned variable '" + params.name() +
                          "' is split along axis " + std::to_string(params.axis()) +
                          "; a lookup needs it split along axis 0 (rows)");
  const std::string strategy = detail::use_partition_strategy(params, partition_strategy);
  auto [distinct, position] = unique(ids);
  const Output rows = detail::lookup_distinct(params.partitions(), params.name(), params.shape()[0],
                                              distinct, strategy);
  std::vector<Output> inputs{rows, position, segment_ids, num_segments};
  if (sp_weights) inputs.push_back(sp_weights->values);
  return detail::build_op(type, inputs, {}, "", type).output(0);
}

PSFLOW_DECL Output embedding_lookup_sparse(const PartitionedVariable& params,
                                           const SparseTensor& sp_ids, std::string_view combiner) {
  return embedding_lookup_sparse(params, sp_ids, std::nullopt, combiner);
}

}  // namespace psflow::ops

namespace psflow::detail {

// d/d(data) of a SparseSegment op; indices, segment ids, counts and weights get none.
PSFLOW_DECL GradientFunction sparse_segment_grad(const char* grad_type) {
  return [grad_type](const Operation& op, const Grads& g) {
    std::vector<Output> inputs{g[0], op.input(1), op.input(2), op.input(0)};
    if (op.num_inputs() == 5) inputs.push_back(op.input(4));
    Grads out(static_cast<std::size_t>(op.num_inputs()));
    out[0] = build_op(grad_type, inputs, {}, "", grad_type).output(0);
    return out;
  };
}

// Each data tensor gets the rows of the gradient it was stitched into.
PSFLOW_DECL Grads dynamic_stitch_grad(const Operation& op, const Grads& g) {
  const auto n = static_cast<std::size_t>(op_attr<std::int64_t>(op, "N"));
  Grads out(2 * n);
  for (std::size_t m = 0; m < n; ++m) out[n + m] = ops::gather(g[0], op.input(static_cast<int>(m)));
  return out;
}

PSFLOW_REGISTERED_AT_STARTUP const bool embedding_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "ShardIds", .num_inputs = 1, .infer = infer_shard_ids});
  defs.add({.type = "DynamicPartition", .num_inputs = 2, .infer = infer_dynamic_partition});
  defs.add({.type = "DynamicStitch", .num_inputs = -1, .infer = infer_dynamic_stitch});
  auto& grads = GradientRegistry::global();
  for (auto [type, grad_type] : {std::pair{"SparseSegmentSum", "SparseSegmentSumGrad"},
                                 std::pair{"SparseSegmentMean", "SparseSegmentMeanGrad"},
                                 std::pair{"SparseSegmentSqrtN", "SparseSegmentSqrtNGrad"}}) {
    defs.add({.type = type, .num_inputs = -1, .infer = infer_sparse_segment});
    defs.add({.type = grad_type, .num_inputs = -1, .infer = infer_sparse_segment_grad});
    grads.add(type, sparse_segment_grad(grad_type));
  }
  grads.add("DynamicStitch", dynamic_stitch_grad);
  grads.add_not_differentiable({"ShardIds"});
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
