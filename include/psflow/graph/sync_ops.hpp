// Ops of synchronous training: gradient accumulators and the token queue, each a named resource
// on the device the op runs on (colocate them with their variable / the global step).
//   AccumulatorApplyGradient(grad, local_step) -> accepted (bool)
//   AccumulatorTakeGradient() -> average of num_required gradients (waits)
//   AccumulatorSetGlobalStep(step), AccumulatorNumDropped() -> int64, AccumulatorSetClosed
//   TokenQueueEnqueueMany(tokens), TokenQueueDequeue() -> int64 (waits, bounded by timeout_ms),
//   TokenQueueSetClosed, TokenQueueSize() -> int64,
//   TokenQueueReleaseWaiters(token) -> int64 (gives `token` to every waiting dequeue, counts them)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/op_builder.hpp"
#include "psflow/graph/sparse_ops.hpp"

namespace psflow {

namespace ops {

// An accumulator is named by `shared_name` and declared by dtype and shape on every op.
struct AccumulatorSpec {
  std::string shared_name;
  DType dtype = DType::float32;
  PartialShape shape;
  bool sparse = false;  // accumulates IndexedSlices (use the sparse_accumulator_* ops)
};

PSFLOW_DECL Output accumulator_apply_gradient(const AccumulatorSpec& acc, Output gradient,
                                              Output local_step, std::string_view name = "");
PSFLOW_DECL Output accumulator_take_gradient(Graph& g, const AccumulatorSpec& acc, int num_required,
                                             std::string_view name = "");
// Pushes an IndexedSlices gradient (rows `values` at `indices`) into a sparse accumulator.
PSFLOW_DECL Output sparse_accumulator_apply_gradient(const AccumulatorSpec& acc, Output indices,
                                                     Output values, Output local_step,
                                                     std::string_view name = "");
// The average of `num_required` IndexedSlices gradients: {indices (sorted), rows, dense_shape}.
PSFLOW_DECL IndexedSlices sparse_accumulator_take_gradient(Graph& g, const AccumulatorSpec& acc,
                                                           int num_required,
                                                           std::string_view name = "");
PSFLOW_DECL Operation accumulator_set_global_step(const AccumulatorSpec& acc, Output step,
                                                  std::string_view name = "");
PSFLOW_DECL Output accumulator_num_dropped(Graph& g, const AccumulatorSpec& acc,
                                           std::string_view name = "");
PSFLOW_DECL Operation accumulator_set_closed(Graph& g, const AccumulatorSpec& acc, bool closed,
                                             std::string_view name = "");

PSFLOW_DECL Operation token_queue_enqueue_many(Output tokens, const std::string& shared_name,
                                               std::string_view name = "");
// Waits for a token; fails with DeadlineExceeded after `timeout_ms` (0: no deadline).
PSFLOW_DECL Output token_queue_dequeue(Graph& g, const std::string& shared_name,
                                       std::int64_t timeout_ms, std::string_view name = "");
PSFLOW_DECL Operation token_queue_set_closed(Graph& g, const std::string& shared_name, bool closed,
                                             std::string_view name = "");
// Hands `token` to every dequeue waiting at that moment; outputs how many were released.
PSFLOW_DECL Output token_queue_release_waiters(Output token, const std::string& shared_name,
                                               std::string_view name = "");
PSFLOW_DECL Output token_queue_size(Graph& g, const std::string& shared_name,
                                    std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

PSFLOW_DECL void expect_int64_scalar(const InferenceContext& ctx, std::size_t i) {
  if (ctx.input_dtypes[i] != DType::int64 ||
      (ctx.input_shapes[i].known && !ctx.input_shapes[i].dims.empty()))
    ctx.fail("needs an int64 scalar (a global step), got " + ctx.describe_input(i));
}

PSFLOW_REGISTERED_AT_STARTUP const bool sync_ops_registered = [] {
  auto& r = OpRegistry::global();
  auto none = [](const InferenceContext&) { return std::vector<OutputSpec>{}; };
  auto int64_scalar = [](const InferenceContext&) {
    return std::vector<OutputSpec>{{DType::int64, PartialShape::scalar()}};
  };
  r.add(OpDef{.type = "AccumulatorApplyGradient",
              .num_inputs = 2,
              .stateful = true,
              .infer = [](const InferenceContext& ctx) {
                if (ctx.input_dtypes[0] != ctx.attr<DType>("dtype"))
                  ctx.fail("gradient dtype does not match the accumulator: " +
                           ctx.describe_input(0));
                expect_int64_scalar(ctx, 1);
                return std::vector<OutputSpec>{{DType::boolean, PartialShape::scalar()}};
              }});
  r.add(OpDef{
      .type = "AccumulatorTakeGradient", .stateful = true, .infer = spec_from_dtype_shape_attrs});
  // The IndexedSlices forms (TF's SparseConditionalAccumulator): (indices, rows, local_step) in,
  // (indices int64, rows, dense_shape int64) out.
  r.add(OpDef{.type = "SparseAccumulatorApplyGradient",
              .num_inputs = 3,
              .stateful = true,
              .infer = [](const InferenceContext& ctx) {
                if (ctx.input_dtypes[0] != DType::int32 && ctx.input_dtypes[0] != DType::int64)
                  ctx.fail("indices must be int32 or int64, got " + ctx.describe_input(0));
                if (ctx.input_dtypes[1] != ctx.attr<DType>("dtype"))
                  ctx.fail("gradient rows' dtype does not match the accumulator: " +
                           ctx.describe_input(1));
                expect_int64_scalar(ctx, 2);
                return std::vector<OutputSpec>{{DType::boolean, PartialShape::scalar()}};
              }});
  r.add(OpDef{.type = "SparseAccumulatorTakeGradient",
              .stateful = true,
              .infer = [](const InferenceContext& ctx) {
                auto rows = spec_from_dtype_shape_attrs(ctx)[0];
                if (rows.shape.known && !rows.shape.dims.empty()) rows.shape.dims[0] = -1;
                const std::int64_t rank = rows.shape.known ? rows.shape.rank() : -1;
                return std::vector<OutputSpec>{{DType::int64, PartialShape::of({-1})},
                                               rows,
                                               {DType::int64, PartialShape::of({rank})}};
              }});
  r.add(OpDef{.type = "AccumulatorSetGlobalStep",
              .num_inputs = 1,
              .stateful = true,
              .infer = [none](const InferenceContext& ctx) {
                expect_int64_scalar(ctx, 0);
                return none(ctx);
              }});
  r.add(OpDef{.type = "AccumulatorNumDropped", .stateful = true, .infer = int64_scalar});
  r.add(OpDef{.type = "AccumulatorSetClosed", .stateful = true, .infer = none});
  r.add(OpDef{.type = "TokenQueueEnqueueMany",
              .num_inputs = 1,
              .stateful = true,
              .infer = [none](const InferenceContext& ctx) {
                if (ctx.input_dtypes[0] != DType::int64)
                  ctx.fail("tokens must be int64, got " + ctx.describe_input(0));
                return none(ctx);
              }});
  r.add(OpDef{.type = "TokenQueueDequeue", .stateful = true, .infer = int64_scalar});
  r.add(OpDef{.type = "TokenQueueSetClosed", .stateful = true, .infer = none});
  r.add(OpDef{.type = "TokenQueueSize", .stateful = true, .infer = int64_scalar});
  r.add(OpDef{.type = "TokenQueueReleaseWaiters",
              .num_inputs = 1,
              .stateful = true,
              .infer = [int64_scalar](const InferenceContext& ctx) {
                if (ctx.input_dtypes[0] != DType::int64)
                  ctx.fail("the token must be int64, got " + ctx.describe_input(0));
                return int64_scalar(ctx);
              }});
  return true;
}();

PSFLOW_DECL AttrMap accumulator_attrs(const std::string& shared_name, DType dtype,
                                      const PartialShape& shape, bool sparse = false) {
  AttrMap attrs{{"shared_name", shared_name},
                {"dtype", dtype},
                {"shape", shape.dims},
                {"shape_known", shape.known}};
  if (sparse) attrs.emplace("sparse", true);
  return attrs;
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output accumulator_apply_gradient(const AccumulatorSpec& acc, Output gradient,
                                              Output local_step, std::string_view name) {
  return detail::build_op(
             "AccumulatorApplyGradient", {gradient, local_step},
             detail::accumulator_attrs(acc.shared_name, acc.dtype, acc.shape, acc.sparse), name,
             "AccumulatorApplyGradient")
      .output(0);
}

PSFLOW_DECL Output accumulator_take_gradient(Graph& g, const AccumulatorSpec& acc, int num_required,
                                             std::string_view name) {
  AttrMap attrs = detail::accumulator_attrs(acc.shared_name, acc.dtype, acc.shape, acc.sparse);
  attrs["num_required"] = std::int64_t{num_required};
  return detail::build_source_op(g, "AccumulatorTakeGradient", std::move(attrs), name,
                                 "AccumulatorTakeGradient")
      .output(0);
}

PSFLOW_DECL Output sparse_accumulator_apply_gradient(const AccumulatorSpec& acc, Output indices,
                                                     Output values, Output local_step,
                                                     std::string_view name) {
  return detail::build_op("SparseAccumulatorApplyGradient", {indices, values, local_step},
                          detail::accumulator_attrs(acc.shared_name, acc.dtype, acc.shape, true),
                          name, "SparseAccumulatorApplyGradient")
      .output(0);
}

PSFLOW_DECL IndexedSlices sparse_accumulator_take_gradient(Graph& g, const AccumulatorSpec& acc,
                                                           int num_required,
                                                           std::string_view name) {
  AttrMap attrs = detail::accumulator_attrs(acc.shared_name, acc.dtype, acc.shape, true);
  attrs["num_required"] = std::int64_t{num_required};
  auto op = detail::build_source_op(g, "SparseAccumulatorTakeGradient", std::move(attrs), name,
                                    "SparseAccumulatorTakeGradient");
  return IndexedSlices{op.output(1), op.output(0), op.output(2)};
}

PSFLOW_DECL Operation accumulator_set_global_step(const AccumulatorSpec& acc, Output step,
                                                  std::string_view name) {
  return detail::build_op(
      "AccumulatorSetGlobalStep", {step},
      detail::accumulator_attrs(acc.shared_name, acc.dtype, acc.shape, acc.sparse), name,
      "SetGlobalStep");
}

PSFLOW_DECL Output accumulator_num_dropped(Graph& g, const AccumulatorSpec& acc,
                                           std::string_view name) {
  return detail::build_source_op(
             g, "AccumulatorNumDropped",
             detail::accumulator_attrs(acc.shared_name, acc.dtype, acc.shape, acc.sparse), name,
             "AccumulatorNumDropped")
      .output(0);
}

PSFLOW_DECL Operation accumulator_set_closed(Graph& g, const AccumulatorSpec& acc, bool closed,
                                             std::string_view name) {
  AttrMap attrs = detail::accumulator_attrs(acc.shared_name, acc.dtype, acc.shape, acc.sparse);
  attrs["closed"] = closed;
  return detail::build_source_op(g, "AccumulatorSetClosed", std::move(attrs), name,
                                 closed ? "CloseAccumulator" : "OpenAccumulator");
}

PSFLOW_DECL Operation token_queue_enqueue_many(Output tokens, const std::string& shared_name,
                                               std::string_view name) {
  return detail::build_op("TokenQueueEnqueueMany", {tokens}, {{"shared_name", shared_name}}, name,
                          "EnqueueMany");
}

PSFLOW_DECL Output token_queue_dequeue(Graph& g, const std::string& shared_name,
                                       std::int64_t timeout_ms, std::string_view name) {
  return detail::build_source_op(g, "TokenQueueDequeue",
                                 {{"shared_name", shared_name}, {"timeout_ms", timeout_ms}}, name,
                                 "Dequeue")
      .output(0);
}

PSFLOW_DECL Operation token_queue_set_closed(Graph& g, const std::string& shared_name, bool closed,
                                             std::string_view name) {
  return detail::build_source_op(g, "TokenQueueSetClosed",
                                 {{"shared_name", shared_name}, {"closed", closed}}, name,
                                 closed ? "CloseQueue" : "OpenQueue");
}

PSFLOW_DECL Output token_queue_release_waiters(Output token, const std::string& shared_name,
                                               std::string_view name) {
  return detail::build_op("TokenQueueReleaseWaiters", {token}, {{"shared_name", shared_name}}, name,
                          "ReleaseWaiters")
      .output(0);
}

PSFLOW_DECL Output token_queue_size(Graph& g, const std::string& shared_name,
                                    std::string_view name) {
  return detail::build_source_op(g, "TokenQueueSize", {{"shared_name", shared_name}}, name,
                                 "QueueSize")
      .output(0);
}

}  // namespace psflow::ops

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
