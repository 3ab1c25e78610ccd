// Neural-network ops: softmax cross-entropy (loss and its gradient in one kernel, as in TF) and
// sigmoid cross-entropy (one fused op where TF composes it from element-wise ops).
// Kernels: runtime/kernels/nn_kernels.hpp.
#pragma once

#include <string_view>

#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace detail {

// TF's _SoftmaxCrossEntropyWithLogitsGrad: the kernel's second output, softmax(logits) - labels,
// times the per-example incoming gradient expanded to a column. Inputs are (logits, labels);
// like TF1's softmax_cross_entropy_with_logits (v1), labels get no gradient.
inline Grads softmax_xent_grad(const Operation& op, const Grads& g) {
  if (g.size() > 1 && g[1].valid())
    throw InvalidArgument("gradients: op '" + op.name() +
                          "' (SoftmaxCrossEntropyWithLogits) is differentiated through its "
                          "backprop output (output 1), which has no gradient: use output 0");
  if (!g[0].valid()) return {Output{}, Output{}};
  return {ops::mul(ops::reshape(g[0], {-1, 1}), op.output(1)), Output{}};
}

inline const bool nn_ops_registered = [] {
  // Inputs (logits, labels), both [batch, classes]; outputs loss [batch] and backprop
  // [batch, classes] = softmax(logits) - labels, which the gradient reuses.
  OpRegistry::global().add(OpDef{
      .type = "SoftmaxCrossEntropyWithLogits",
      .num_inputs = 2,
      .infer = [](const InferenceContext& ctx) {
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
        return std::vector<OutputSpec>{{t, PartialShape::of({dims[0]})},
                                       {t, PartialShape::of(dims)}};
      }});
  GradientRegistry::global().add("SoftmaxCrossEntropyWithLogits", softmax_xent_grad);
  return true;
}();

// Inputs (logits, labels) of one floating dtype and one shape (no broadcasting, as TF1 requires);
// the loss has that shape too.
inline std::vector<OutputSpec> infer_sigmoid_xent(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  ctx.expect_same_dtype(0, 1);
  const auto& logits = ctx.input_shapes[0];
  const auto& labels = ctx.input_shapes[1];
  if (logits.known && labels.known) {
    bool same = logits.dims.size() == labels.dims.size();
    for (std::size_t i = 0; same && i < logits.dims.size(); ++i)
      same = logits.dims[i] < 0 || labels.dims[i] < 0 || logits.dims[i] == labels.dims[i];
    if (!same)
      ctx.fail("logits and labels must have the same shape, got " + ctx.describe_input(0) +
               " and " + ctx.describe_input(1) + ": reshape the labels to the logits' shape");
  }
  return {OutputSpec{ctx.input_dtypes[0], merge_shapes(logits, labels)}};
}

}  // namespace detail

namespace ops {

// Per-example softmax cross-entropy between `labels` (a distribution per row) and `logits`.
inline Output softmax_cross_entropy_with_logits(Output labels, Output logits,
                                                std::string_view name = "") {
  return detail::build_op("SoftmaxCrossEntropyWithLogits", {logits, labels}, {}, name,
                          "SoftmaxCrossEntropyWithLogits")
      .output(0);
}

// Element-wise logistic loss of `logits` x against `labels` z (probabilities in [0, 1]), as
// TF1's tf.nn.sigmoid_cross_entropy_with_logits: z * -log(sigmoid(x)) + (1 - z) *
// -log(1 - sigmoid(x)), computed as max(x, 0) - x * z + log(1 + exp(-|x|)) so that no large
// |x| overflows. TF builds that formula from element-wise ops; psflow runs it as one op,
// "SigmoidCrossEntropyWithLogits" (inputs logits, labels), with the gradient below. Both inputs
// are float32 or float64 of one dtype and one shape. The node is named "logistic_loss" by default,
// TF's name for it.
inline Output sigmoid_cross_entropy_with_logits(Output labels, Output logits,
                                                std::string_view name = "") {
  return detail::build_op("SigmoidCrossEntropyWithLogits", {logits, labels}, {}, name,
                          "logistic_loss")
      .output(0);
}

}  // namespace ops

namespace detail {

// What TF's composed formula differentiates to: d/dx = sigmoid(x) - z and, for the labels (TF
// gives them one too), d/dz = -x, each times the incoming gradient.
inline Grads sigmoid_xent_grad(const Operation& op, const Grads& g) {
  if (!g[0].valid()) return {Output{}, Output{}};
  const Output logits = op.input(0), labels = op.input(1);
  return {ops::mul(g[0], ops::sub(ops::sigmoid(logits), labels)), ops::neg(ops::mul(g[0], logits))};
}

inline const bool sigmoid_xent_registered = [] {
  OpRegistry::global().add(
      OpDef{.type = "SigmoidCrossEntropyWithLogits", .num_inputs = 2, .infer = infer_sigmoid_xent});
  GradientRegistry::global().add("SigmoidCrossEntropyWithLogits", sigmoid_xent_grad);
  return true;
}();

}  // namespace detail

}  // namespace psflow
