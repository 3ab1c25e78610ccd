// Sparse ops: the row-wise reads and updates that embedding tables are built from, and the
// sparse gradient they produce. Kernels: runtime/kernels/sparse_kernels.hpp.
//   GatherV2(params, indices)            rows of a tensor (TF's tf.gather, axis 0)
//   ResourceGather(ref, indices)         rows of a variable, read under its lock (TF's name for
//                                        the gather of a resource variable): only the rows are
//                                        copied, no reference to the whole table is held
//   ScatterAdd/Sub/Update(ref, i, u)     change only rows i of a variable
//   Unique(x) -> (y, idx)                the distinct ids of a batch
//   UnsortedSegmentSum(data, seg, n)     rows of data summed into n segments
//   IndexedSlicesToDense(v, i, shape)    the dense value of an IndexedSlices
//
// Ids are int32 or int64. Semantics are TF1's: gather output shape is indices.shape +
// params.shape[1:]; scatter_add/sub sum duplicate ids; scatter_update with duplicate ids keeps
// one of their updates; unique lists values in order of first appearance. An id outside
// [0, rows) fails the step with InvalidArgument naming the id and the table, and a scatter
// checks every id before it writes a row, so nothing is half-applied.
//
// Sparse gradients. The gradient of a gather with respect to its table is an IndexedSlices
// (values: the gradient rows, indices: the ids, dense_shape: the table's shape), as in TF. In the
// graph it is the output of an IndexedSlicesToDense op, so it travels through gradients() and
// compute_gradients()/apply_gradients() like any Output; the optimizers recognise that op and
// apply its values and indices with sparse kernels, so the dense value is never computed unless
// something else consumes it. Several IndexedSlices for one tensor are concatenated (not summed)
// into one, as TF's gradient aggregation does.
//
// Unique indices. An embedding lookup gathers each distinct id once (its ids come from Unique
// on the worker), so the gradient of that gather has each index once: the gather carries the
// attr "distinct_indices", its gradient's IndexedSlicesToDense too, and IndexedSlices says so
// in unique_indices. The optimizers then apply it as is instead of summing duplicates again
// next to the variable (on the ps). Concatenating several slices drops the mark.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/state_ops.hpp"
#include "psflow/graph/variable.hpp"

namespace psflow {

// A sparse gradient (TF's tf.IndexedSlices): row values[i] belongs to row indices[i] of a tensor
// of dense_shape; rows not listed are zero, listed twice add up.
struct IndexedSlices {
  Output values;       // [n, row...]
  Output indices;      // [n], int32 or int64
  Output dense_shape;  // int64 [rank]
  // Each index appears once (known from how the gradient was built): no de-duplication needed.
  bool unique_indices = false;

  // The dense value, as an IndexedSlicesToDense op (created in the graph of `values`, where the
  // caller's scopes say). Computed only if something runs it; optimizers read the slices back.
  operator Output() const;  // NOLINT: implicit, as TF converts IndexedSlices to tensors
};

// The slices behind `t` when it is an IndexedSlicesToDense output (a sparse gradient), else
// nullopt.
PSFLOW_DECL std::optional<IndexedSlices> as_indexed_slices(const Output& t);

namespace detail {
// The attr marking a gather whose indices are distinct, and the IndexedSlicesToDense of a
// gradient whose indices are.
inline constexpr const char* kDistinctIndices = "distinct_indices";
// gather(params, indices) for indices known to be distinct (a lookup's Unique ids): its
// gradient's IndexedSlices has unique_indices set.
PSFLOW_DECL Output gather_distinct(Output params, Output indices);
// The ResourceGather of variable reference `ref`, colocated with it, with `attrs`.
PSFLOW_DECL Output resource_gather(Output ref, Output indices, AttrMap attrs,
                                   std::string_view name);
}  // namespace detail

namespace ops {

// The dense value of `slices` (TF's convert_to_tensor of an IndexedSlices).
PSFLOW_DECL Output indexed_slices_to_dense(const IndexedSlices& slices, std::string_view name = "");

// Sums the rows of `data` by segment: out[segment_ids[i], ...] += data[i, ...] for num_segments
// segments (TF's tf.unsorted_segment_sum; ids outside [0, num_segments) fail the step).
PSFLOW_DECL Output unsorted_segment_sum(Output data, Output segment_ids, Output num_segments,
                                        std::string_view name = "");

// Rows `indices` of `params` (TF's tf.gather on axis 0). Build it under the table's device
// (or colocated with its variable) so that only the gathered rows leave the ps.
// A variable reference (Variable::ref()) makes a ResourceGather, which copies the rows under the
// variable's lock instead of holding a reference to the whole table while it reads.
PSFLOW_DECL Output gather(Output params, Output indices, std::string_view name = "");

// Adds updates[i] to row indices[i] of the variable (duplicate ids add up); returns the new
// value. Runs on the variable's device, changing only the given rows.
PSFLOW_DECL Output scatter_add(const Variable& ref, Output indices, Output updates,
                               std::string_view name = "", bool use_locking = true);
// Subtracts updates[i] from row indices[i] (duplicate ids add up); returns the new value.
PSFLOW_DECL Output scatter_sub(const Variable& ref, Output indices, Output updates,
                               std::string_view name = "", bool use_locking = true);
// Sets row indices[i] to updates[i]; with duplicate ids one of their updates wins (as TF).
// use_locking (TF's, default true here): false writes the rows without the variable's lock,
// racing with other such writers (TF's Hogwild updates; see VariableResource::LockFreeWriter).
PSFLOW_DECL Output scatter_update(const Variable& ref, Output indices, Output updates,
                                  std::string_view name = "", bool use_locking = true);

// {y, idx}: the distinct values of vector x in order of first appearance, and for each element
// of x its position in y (int32), so that x == gather(y, idx).
PSFLOW_DECL std::pair<Output, Output> unique(Output x, std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL void expect_ids(const InferenceContext& ctx, std::size_t i) {
  if (ctx.input_dtypes[i] != DType::int32 && ctx.input_dtypes[i] != DType::int64)
    ctx.fail("ids must be int32 or int64, got " + ctx.describe_input(i));
}

// GatherV2(params, indices): indices.shape + params.shape[1:].
PSFLOW_DECL std::vector<OutputSpec> infer_gather(const InferenceContext& ctx) {
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
PSFLOW_DECL std::vector<OutputSpec> infer_scatter(const InferenceContext& ctx) {
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
  return {OutputSpec{ctx.input_dtypes[0], var, true}};  // the variable again, like Assign
}

// Unique(x) -> (y, idx): x is a vector; y its distinct values, idx (int32) with x = y[idx].
PSFLOW_DECL std::vector<OutputSpec> infer_unique(const InferenceContext& ctx) {
  const auto& x = ctx.input_shapes[0];
  if (x.known && x.dims.size() != 1) ctx.fail("x must be a vector, got " + ctx.describe_input(0));
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of({-1})},
          OutputSpec{DType::int32, x.known ? x : PartialShape::of({-1})}};
}

// UnsortedSegmentSum(data, segment_ids, num_segments): [num_segments] + data.shape[ids.rank:].
PSFLOW_DECL std::vector<OutputSpec> infer_unsorted_segment_sum(const InferenceContext& ctx) {
  expect_ids(ctx, 1);
  expect_ids(ctx, 2);
  expect_numeric(ctx, 0);
  const auto& data = ctx.input_shapes[0];
  const auto& ids = ctx.input_shapes[1];
  if (!data.known || !ids.known) return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  if (ids.dims.size() > data.dims.size())
    ctx.fail("segment_ids " + ctx.describe_input(1) + " must not have more dimensions than data " +
             ctx.describe_input(0));
  std::vector<std::int64_t> dims{-1};
  dims.insert(dims.end(), data.dims.begin() + static_cast<std::ptrdiff_t>(ids.dims.size()),
              data.dims.end());
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

// IndexedSlicesToDense(values, indices, dense_shape): values' dtype, rank of values minus
// indices' plus one.
PSFLOW_DECL std::vector<OutputSpec> infer_indexed_slices_to_dense(const InferenceContext& ctx) {
  expect_ids(ctx, 1);
  if (ctx.input_dtypes[2] != DType::int64)
    ctx.fail("dense_shape must be an int64 vector, got " + ctx.describe_input(2));
  const auto& values = ctx.input_shapes[0];
  const auto& indices = ctx.input_shapes[1];
  if (!values.known || !indices.known)
    return {OutputSpec{ctx.input_dtypes[0], PartialShape::unknown()}};
  std::vector<std::int64_t> dims{-1};
  dims.insert(dims.end(), values.dims.begin() + static_cast<std::ptrdiff_t>(indices.dims.size()),
              values.dims.end());
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::of(dims)}};
}

}  // namespace psflow::detail

namespace psflow {

PSFLOW_DECL std::optional<IndexedSlices> as_indexed_slices(const Output& t) {
  if (!t.valid() || t.op().type() != "IndexedSlicesToDense") return std::nullopt;
  return IndexedSlices{t.op().input(0), t.op().input(1), t.op().input(2),
                       t.op().attrs().count(detail::kDistinctIndices) > 0};
}

}  // namespace psflow

namespace psflow::ops {

PSFLOW_DECL Output indexed_slices_to_dense(const IndexedSlices& slices, std::string_view name) {
  AttrMap attrs;
  if (slices.unique_indices) attrs[detail::kDistinctIndices] = true;
  return detail::build_op("IndexedSlicesToDense",
                          {slices.values, slices.indices, slices.dense_shape}, std::move(attrs),
                          name, "IndexedSlicesToDense")
      .output(0);
}

PSFLOW_DECL Output unsorted_segment_sum(Output data, Output segment_ids, Output num_segments,
                                        std::string_view name) {
  return detail::build_op("UnsortedSegmentSum", {data, segment_ids, num_segments}, {}, name,
                          "UnsortedSegmentSum")
      .output(0);
}

PSFLOW_DECL Output gather(Output params, Output indices, std::string_view name) {
  if (params.valid() && params.is_ref()) return detail::resource_gather(params, indices, {}, name);
  return detail::build_op("GatherV2", {params, indices}, {{"axis", std::int64_t{0}}}, name,
                          "GatherV2")
      .output(0);
}

PSFLOW_DECL Output scatter_add(const Variable& ref, Output indices, Output updates,
                               std::string_view name, bool use_locking) {
  return detail::assign_op("ScatterAdd", ref.ref(), {indices, updates},
                           {{"use_locking", use_locking}}, name);
}

PSFLOW_DECL Output scatter_sub(const Variable& ref, Output indices, Output updates,
                               std::string_view name, bool use_locking) {
  return detail::assign_op("ScatterSub", ref.ref(), {indices, updates},
                           {{"use_locking", use_locking}}, name);
}

PSFLOW_DECL Output scatter_update(const Variable& ref, Output indices, Output updates,
                                  std::string_view name, bool use_locking) {
  return detail::assign_op("ScatterUpdate", ref.ref(), {indices, updates},
                           {{"use_locking", use_locking}}, name);
}

PSFLOW_DECL std::pair<Output, Output> unique(Output x, std::string_view name) {
  auto op = detail::build_op("Unique", {x}, {}, name, "Unique");
  return {op.output(0), op.output(1)};
}

}  // namespace psflow::ops

namespace psflow {

// namespace ops
PSFLOW_DECL IndexedSlices::operator Output() const { return ops::indexed_slices_to_dense(*this); }

}  // namespace psflow

namespace psflow::detail {

PSFLOW_DECL Output resource_gather(Output ref, Output indices, AttrMap attrs,
                                   std::string_view name) {
  auto colocated = ref.graph().colocate_with(ref.op());
  return build_op("ResourceGather", {ref, indices}, std::move(attrs), name, "Gather").output(0);
}

PSFLOW_DECL Output gather_distinct(Output params, Output indices) {
  if (!params.valid() || !params.is_ref()) return ops::gather(params, indices);
  return resource_gather(params, indices, {{kDistinctIndices, true}}, "");
}

// d(gather(params, ids))/d(params): IndexedSlices of the incoming rows at the ids, shaped like
// params (statically when known, else by a Shape op next to params).
PSFLOW_DECL Grads gather_grad(const Operation& op, const Grads& g) {
  const Output params = op.input(0);
  const PartialShape shape = params.shape();
  Output dense_shape;
  if (shape.fully_defined()) {
    Tensor dims(DType::int64, {shape.dims.size()});
    for (std::size_t d = 0; d < shape.dims.size(); ++d)
      dims.data<std::int64_t>()[d] = shape.dims[d];
    dense_shape = ops::constant(params.graph(), dims, "dense_shape");
  } else {
    dense_shape = ops::shape(params, "dense_shape");
  }
  Output values = g[0];
  if (shape.known && std::all_of(shape.dims.begin() + 1, shape.dims.end(),
                                 [](std::int64_t d) { return d >= 0; })) {
    std::vector<std::int64_t> rows{-1};
    rows.insert(rows.end(), shape.dims.begin() + 1, shape.dims.end());
    values = ops::reshape(values, rows, "values");
  }
  const Output indices = ops::reshape(op.input(1), {-1}, "indices");
  const bool distinct = op.attrs().count(kDistinctIndices) > 0;
  return {ops::indexed_slices_to_dense({values, indices, dense_shape, distinct}), Output()};
}

// Each row of data gets the gradient of the segment it was summed into.
PSFLOW_DECL Grads unsorted_segment_sum_grad(const Operation& op, const Grads& g) {
  return {ops::gather(g[0], op.input(1)), Output(), Output()};
}

// Each value row gets the gradient of the row it lands in.
PSFLOW_DECL Grads indexed_slices_to_dense_grad(const Operation& op, const Grads& g) {
  return {ops::gather(g[0], op.input(1)), Output(), Output()};
}

PSFLOW_REGISTERED_AT_STARTUP const bool sparse_ops_registered = [] {
  auto& defs = OpRegistry::global();
  defs.add({.type = "GatherV2", .num_inputs = 2, .infer = infer_gather});
  defs.add({.type = "ResourceGather", .num_inputs = 2, .ref_inputs = {0}, .infer = infer_gather});
  defs.add({.type = "UnsortedSegmentSum", .num_inputs = 3, .infer = infer_unsorted_segment_sum});
  defs.add(
      {.type = "IndexedSlicesToDense", .num_inputs = 3, .infer = infer_indexed_slices_to_dense});
  for (const char* type : {"ScatterAdd", "ScatterSub", "ScatterUpdate"})
    defs.add({.type = type,
              .num_inputs = 3,
              .ref_inputs = {0},
              .stateful = true,
              .infer = infer_scatter});
  defs.add({.type = "Unique", .num_inputs = 1, .infer = infer_unique});
  auto& grads = GradientRegistry::global();
  grads.add("GatherV2", gather_grad);
  grads.add("ResourceGather", gather_grad);
  grads.add("UnsortedSegmentSum", unsorted_segment_sum_grad);
  grads.add("IndexedSlicesToDense", indexed_slices_to_dense_grad);
  grads.add_not_differentiable({"ScatterAdd", "ScatterSub", "ScatterUpdate", "Unique"});
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
