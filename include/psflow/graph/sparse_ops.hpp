// Sparse ops: the row-wise reads and updates that embedding tables are built from. GatherV2
// reads rows of a table, ScatterAdd / ScatterSub / ScatterUpdate change only the given rows of
// a variable in place, Unique finds the distinct ids of a batch. Kernels:
// runtime/kernels/sparse_kernels.hpp.
//
// Ids are int32 or int64. Semantics are TF1's: gather is GatherV2 on axis 0 (output shape
// indices.shape + params.shape[1:]); scatter_add/sub sum duplicate ids; scatter_update with
// duplicate ids keeps one of their updates; unique lists values in order of first appearance.
// An id outside [0, rows) fails the step with InvalidArgument naming the id and the table, and a
// scatter checks every id before it writes a row, so nothing is half-applied.
//
// Gradients: scatters and Unique are not differentiable; GatherV2's gradient (IndexedSlices,
// sparse updates on the table's ps) is not registered yet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/graph/variable.hpp"

namespace psflow {

namespace detail {

inline void expect_ids(const InferenceContext& ctx, std::size_t i) {
  if (ctx.input_dtypes[i] != DType::int32 && ctx.input_dtypes[i] != DType::int64)
    ctx.fail("ids must be int32 or int64, got " + ctx.describe_input(i));
}

// GatherV2(params, indices): indices.shape + params.shape[1:].
inline std::vector<OutputSpec> infer_gather(const InferenceContext& ctx) {
  expect_ids(ctx, 1);
  const auto& params = ctx.input_shapes[0];
  const auto& indices = ctx.input_shapes[1];
  if (params.known && params.dims.empty())
    ctx.fail("params must have at least one dimension (rows), got " + ctx.describe_input(0));
  if (!params.known || !indices.known)
    return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  std::vector<std::int64_t> dims = indices.dims;
  dims.insert(dims.end(), params.dims.begin() + 1, params.dims.end());
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// Scatter*(ref, indices, updates): updates must be indices.shape + ref.shape[1:]; the output
// is the variable's new value.
inline std::vector<OutputSpec> infer_scatter(const InferenceContext& ctx) {
  expect_ids(ctx, 1);
  ctx.expect_same_dtype(0, 2);
  const auto& var = ctx.input_shapes[0];
  const auto& indices = ctx.input_shapes[1];
  const auto& updates = ctx.input_shapes[2];
  if (var.known && var.dims.empty())
    ctx.fail("the variable must have at least one dimension (rows), got " + ctx.describe_input(0));
  if (var.known && indices.known && updates.known) {
    std::vector<std::int64_t> expected = indices.dims;
    expected.insert(expected.end(), var.dims.begin() + 1, var.dims.end());
    if (!shapes_compatible(PartialShape::of(expected), updates))
      ctx.fail("updates must have shape indices.shape + variable.shape[1:] = " +
               shape_string(expected) + ", got " + ctx.describe_input(2));
  }
  return {OutputSpec{ctx.input_dtypes[0], var}};
}

// Unique(x) -> (y, idx): x is a vector; y its distinct values, idx (int32) with x = y[idx].
inline std::vector<OutputSpec> infer_unique(const InferenceContext& ctx) {
  const auto& x = ctx.input_shapes[0];
  if (x.known && x.dims.size() != 1) ctx.fail("x must be a vector, got " + ctx.describe_input(0));
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of({-1})},
          OutputSpec{DType::int32, x.known ? x : PartialShape::of({-1})}};
}

}  // namespace detail

namespace ops {

// Rows `indices` of `params` (TF's tf.gather on axis 0). Build it under the table's device
// (or colocated with its variable) so that only the gathered rows leave the ps.
inline Output gather(Output params, Output indices, std::string_view name = "") {
  return detail::build_op("GatherV2", {params, indices}, {{"axis", std::int64_t{0}}}, name,
                          "GatherV2")
      .output(0);
}

// Adds updates[i] to row indices[i] of the variable (duplicate ids add up); returns the new
// value. Runs on the variable's device, changing only the given rows.
inline Output scatter_add(const Variable& ref, Output indices, Output updates,
                          std::string_view name = "") {
  return detail::assign_op("ScatterAdd", ref.ref(), {indices, updates}, {}, name);
}
// Subtracts updates[i] from row indices[i] (duplicate ids add up); returns the new value.
inline Output scatter_sub(const Variable& ref, Output indices, Output updates,
                          std::string_view name = "") {
  return detail::assign_op("ScatterSub", ref.ref(), {indices, updates}, {}, name);
}
// Sets row indices[i] to updates[i]; with duplicate ids one of their updates wins (as TF).
inline Output scatter_update(const Variable& ref, Output indices, Output updates,
                             std::string_view name = "") {
  return detail::assign_op("ScatterUpdate", ref.ref(), {indices, updates}, {}, name);
}

// {y, idx}: the distinct values of vector x in order of first appearance, and for each element
// of x its position in y (int32), so that x == gather(y, idx).
inline std::pair<Output, Output> unique(Output x, std::string_view name = "") {
  auto op = detail::build_op("Unique", {x}, {}, name, "Unique");
  return {op.output(0), op.output(1)};
}

}  // namespace ops

namespace detail {

inline const bool sparse_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "GatherV2", .num_inputs = 2, .infer = infer_gather});
  for (const char* type : {"ScatterAdd", "ScatterSub", "ScatterUpdate"})
    defs.add({.type = type,
              .num_inputs = 3,
              .ref_inputs = {0},
              .stateful = true,
              .infer = infer_scatter});
  defs.add({.type = "Unique", .num_inputs = 1, .infer = infer_unique});
  GradientRegistry::global().add_not_differentiable(
      {"ScatterAdd", "ScatterSub", "ScatterUpdate", "Unique"});
  return true;
}();

}  // namespace detail

}  // namespace psflow
