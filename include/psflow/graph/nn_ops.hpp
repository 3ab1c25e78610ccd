// Neural-network ops: softmax cross-entropy (loss and its gradient in one kernel, as in TF).
#pragma once

#include <string_view>

#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

inline const bool nn_ops_registered = [] {
  // Inputs (logits, labels), both [batch, classes]; outputs loss [batch] and backprop
  // [batch, classes] = softmax(logits) - labels, which the gradient reuses.
  OpRegistry::global().add(OpDef{"SoftmaxCrossEntropyWithLogits", 2, {}, false,
                                 [](const InferenceContext& ctx) {
    expect_floating(ctx, 0);
    ctx.expect_same_dtype(0, 1);
    const auto& logits = ctx.input_shapes[0];
    const auto& labels = ctx.input_shapes[1];
    for (std::size_t i = 0; i < 2; ++i)
      if (ctx.input_shapes[i].known && ctx.input_shapes[i].dims.size() != 2)
        ctx.fail("logits and labels must be [batch, classes], got " + ctx.describe_input(i));
    std::vector<std::int64_t> dims = {-1, -1};
    for (const auto* s : {&logits, &labels}) {
      if (!s->known) continue;
      for (std::size_t i = 0; i < 2; ++i) {
        if (s->dims[i] < 0) continue;
        if (dims[i] >= 0 && dims[i] != s->dims[i])
          ctx.fail("logits and labels must have the same shape, got " + ctx.describe_input(0) +
                   " and " + ctx.describe_input(1));
        dims[i] = s->dims[i];
      }
    }
    const DType t = ctx.input_dtypes[0];
    return std::vector<OutputSpec>{{t, PartialShape::of({dims[0]})}, {t, PartialShape::of(dims)}};
  }});
  return true;
}();

}  // namespace detail

namespace ops {

// Per-example softmax cross-entropy between `labels` (a distribution per row) and `logits`.
inline Output softmax_cross_entropy_with_logits(Output labels, Output logits,
                                                std::string_view name = "") {
  return detail::build_op("SoftmaxCrossEntropyWithLogits", {logits, labels}, {}, name,
                          "SoftmaxCrossEntropyWithLogits")
      .output(0);
}

}  // namespace ops

}  // namespace psflow
