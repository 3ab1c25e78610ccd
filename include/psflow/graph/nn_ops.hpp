// Neural-network ops: softmax cross-entropy (loss and its gradient in one kernel, as in TF) and
// sigmoid cross-entropy (one fused op where TF composes it from element-wise ops); softmax and
// log_softmax over the last axis, sparse softmax cross-entropy with integer labels, softplus, elu,
// leaky_relu and l2_loss.
// Kernels: runtime/kernels/nn_kernels.hpp.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/gradient_registry.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/op_builder.hpp"

namespace psflow {

namespace ops {

// Per-example softmax cross-entropy between `labels` (a distribution per row) and `logits`.
PSFLOW_DECL Output softmax_cross_entropy_with_logits(Output labels, Output logits,
                                                     std::string_view name = "");

// Element-wise logistic loss of `logits` x against `labels` z (probabilities in [0, 1]), as
// TF1's tf.nn.sigmoid_cross_entropy_with_logits: z * -log(sigmoid(x)) + (1 - z) *
// -log(1 - sigmoid(x)), computed as max(x, 0) - x * z + log(1 + exp(-|x|)) so that no large
// |x| overflows. TF builds that formula from element-wise ops; psflow runs it as one op,
// "SigmoidCrossEntropyWithLogits" (inputs logits, labels), with the gradient below. Both inputs
// are float32 or float64 of one dtype and one shape. The node is named "logistic_loss" by default,
// TF's name for it.
PSFLOW_DECL Output sigmoid_cross_entropy_with_logits(Output labels, Output logits,
                                                     std::string_view name = "");

}  // namespace ops

// --- Model-building breadth: softmax, log_softmax, sparse softmax cross-entropy, softplus, elu,
// leaky_relu, l2_loss ---

namespace ops {

// softmax(logits) over the last axis: exp(x - max) / sum(exp(x - max)) per row, so large logits
// do not overflow (TF's tf.nn.softmax with the default axis). Rank >= 1, float32 or float64.
PSFLOW_DECL Output softmax(Output logits, std::string_view name = "");

// log(softmax(logits)) over the last axis, computed as x - max - log(sum(exp(x - max))).
PSFLOW_DECL Output log_softmax(Output logits, std::string_view name = "");

// Per-example cross-entropy of `logits` [batch, classes] against integer class `labels` [batch]
// (int32 or int64), TF1's tf.nn.sparse_softmax_cross_entropy_with_logits (labels first, as in
// psflow's other cross-entropies). A label outside [0, classes) fails the step with
// InvalidArgument naming the node and the label. Labels get no gradient.
PSFLOW_DECL Output sparse_softmax_cross_entropy_with_logits(Output labels, Output logits,
                                                            std::string_view name = "");

// log(1 + exp(x)), computed without overflow for large |x|.
PSFLOW_DECL Output softplus(Output x, std::string_view name = "");

// exp(x) - 1 where x < 0, else x.
PSFLOW_DECL Output elu(Output x, std::string_view name = "");

// x where x > 0, else alpha * x (TF's tf.nn.leaky_relu; attr alpha).
PSFLOW_DECL Output leaky_relu(Output x, double alpha = 0.2, std::string_view name = "");

// sum(x ** 2) / 2 over every element: a scalar of x's dtype.
PSFLOW_DECL Output l2_loss(Output x, std::string_view name = "");

}  // namespace ops

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow::detail {

// TF's _SoftmaxCrossEntropyWithLogitsGrad: the kernel's second output, softmax(logits) - labels,
// times the per-example incoming gradient expanded to a column. Inputs are (logits, labels);
// like TF1's softmax_cross_entropy_with_logits (v1), labels get no gradient.
PSFLOW_DECL Grads softmax_xent_grad(const Operation& op, const Grads& g) {
  if (g.size() > 1 && g[1].valid())
    throw InvalidArgument("gradients: op '" + op.name() +
                          "' (SoftmaxCrossEntropyWithLogits) is differentiated through its "
                          "backprop output (output 1), which has no gradient: use output 0");
  if (!g[0].valid()) return {Output{}, Output{}};
  return {ops::mul(ops::reshape(g[0], {-1, 1}), op.output(1)), Output{}};
}

PSFLOW_REGISTERED_AT_STARTUP const bool nn_ops_registered = [] {
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
PSFLOW_DECL std::vector<OutputSpec> infer_sigmoid_xent(const InferenceContext& ctx) {
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

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output softmax_cross_entropy_with_logits(Output labels, Output logits,
                                                     std::string_view name) {
  return detail::build_op("SoftmaxCrossEntropyWithLogits", {logits, labels}, {}, name,
                          "SoftmaxCrossEntropyWithLogits")
      .output(0);
}

PSFLOW_DECL Output sigmoid_cross_entropy_with_logits(Output labels, Output logits,
                                                     std::string_view name) {
  return detail::build_op("SigmoidCrossEntropyWithLogits", {logits, labels}, {}, name,
                          "logistic_loss")
      .output(0);
}

}  // namespace psflow::ops

namespace psflow::detail {

// What TF's composed formula differentiates to: d/dx = sigmoid(x) - z and, for the labels (TF
// gives them one too), d/dz = -x, each times the incoming gradient.
PSFLOW_DECL Grads sigmoid_xent_grad(const Operation& op, const Grads& g) {
  if (!g[0].valid()) return {Output{}, Output{}};
  const Output logits = op.input(0), labels = op.input(1);
  return {ops::mul(g[0], ops::sub(ops::sigmoid(logits), labels)), ops::neg(ops::mul(g[0], logits))};
}

PSFLOW_REGISTERED_AT_STARTUP const bool sigmoid_xent_registered = [] {
  OpRegistry::global().add(
      OpDef{.type = "SigmoidCrossEntropyWithLogits", .num_inputs = 2, .infer = infer_sigmoid_xent});
  GradientRegistry::global().add("SigmoidCrossEntropyWithLogits", sigmoid_xent_grad);
  return true;
}();

// Softmax and LogSoftmax: floating logits of rank >= 1, normalised over the last axis.
PSFLOW_DECL std::vector<OutputSpec> infer_softmax(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  const auto& s = ctx.input_shapes[0];
  if (s.known && s.dims.empty())
    ctx.fail("logits must have rank >= 1 (softmax runs over the last axis), got " +
             ctx.describe_input(0));
  return same_as_input(ctx);
}

// Inputs (logits [batch, classes] float, labels [batch] int32/int64); outputs loss [batch] and
// backprop [batch, classes] = softmax(logits) - one_hot(labels).
PSFLOW_DECL std::vector<OutputSpec> infer_sparse_softmax_xent(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  if (ctx.input_dtypes[1] != DType::int32 && ctx.input_dtypes[1] != DType::int64)
    ctx.fail("labels must be int32 or int64 class indices, got " + ctx.describe_input(1));
  const auto& logits = ctx.input_shapes[0];
  const auto& labels = ctx.input_shapes[1];
  if (logits.known && logits.dims.size() != 2)
    ctx.fail("logits must be [batch, classes], got " + ctx.describe_input(0));
  if (labels.known && labels.dims.size() != 1)
    ctx.fail("labels must be [batch] (one class index per example), got " + ctx.describe_input(1));
  std::int64_t batch = logits.known ? logits.dims[0] : -1;
  const std::int64_t classes = logits.known ? logits.dims[1] : -1;
  if (labels.known && labels.dims[0] >= 0) {
    if (batch >= 0 && batch != labels.dims[0])
      ctx.fail("labels and logits must have the same batch size, got " + ctx.describe_input(1) +
               " and " + ctx.describe_input(0));
    batch = labels.dims[0];
  }
  const DType t = ctx.input_dtypes[0];
  return {OutputSpec{t, PartialShape::of({batch})},
          OutputSpec{t, PartialShape::of({batch, classes})}};
}

PSFLOW_DECL std::vector<OutputSpec> infer_l2_loss(const InferenceContext& ctx) {
  expect_floating(ctx, 0);
  return {OutputSpec{ctx.input_dtypes[0], PartialShape::scalar()}};
}

}  // namespace psflow::detail

namespace psflow::ops {

PSFLOW_DECL Output softmax(Output logits, std::string_view name) {
  return detail::build_op("Softmax", {logits}, {}, name, "Softmax").output(0);
}

PSFLOW_DECL Output log_softmax(Output logits, std::string_view name) {
  return detail::build_op("LogSoftmax", {logits}, {}, name, "LogSoftmax").output(0);
}

PSFLOW_DECL Output sparse_softmax_cross_entropy_with_logits(Output labels, Output logits,
                                                            std::string_view name) {
  return detail::build_op("SparseSoftmaxCrossEntropyWithLogits", {logits, labels}, {}, name,
                          "SparseSoftmaxCrossEntropyWithLogits")
      .output(0);
}

PSFLOW_DECL Output softplus(Output x, std::string_view name) {
  return detail::build_op("Softplus", {x}, {}, name, "Softplus").output(0);
}

PSFLOW_DECL Output elu(Output x, std::string_view name) {
  return detail::build_op("Elu", {x}, {}, name, "Elu").output(0);
}

PSFLOW_DECL Output leaky_relu(Output x, double alpha, std::string_view name) {
  return detail::build_op("LeakyRelu", {x}, {{"alpha", alpha}}, name, "LeakyRelu").output(0);
}

PSFLOW_DECL Output l2_loss(Output x, std::string_view name) {
  return detail::build_op("L2Loss", {x}, {}, name, "L2Loss").output(0);
}

}  // namespace psflow::ops

namespace psflow::detail {

// TF's _SoftmaxGrad: (g - sum(g * y, last axis)) * y, from the output y.
PSFLOW_DECL Grads softmax_grad(const Operation& op, const Grads& g) {
  const Output y = op.output(0);
  return {ops::mul(ops::sub(g[0], ops::reduce_sum(ops::mul(g[0], y), {-1}, true)), y)};
}

// TF's _LogSoftmaxGrad: g - sum(g, last axis) * exp(y), from the output y.
PSFLOW_DECL Grads log_softmax_grad(const Operation& op, const Grads& g) {
  const Output y = op.output(0);
  return {ops::sub(g[0], ops::mul(ops::reduce_sum(g[0], {-1}, true), ops::exp(y)))};
}

// Like SoftmaxCrossEntropyWithLogits: output 1 (the backprop) times the per-example gradient;
// the integer labels get none.
PSFLOW_DECL Grads sparse_softmax_xent_grad(const Operation& op, const Grads& g) {
  if (g.size() > 1 && g[1].valid())
    throw InvalidArgument("gradients: op '" + op.name() +
                          "' (SparseSoftmaxCrossEntropyWithLogits) is differentiated through its "
                          "backprop output (output 1), which has no gradient: use output 0");
  if (!g[0].valid()) return {Output{}, Output{}};
  return {ops::mul(ops::reshape(g[0], {-1, 1}), op.output(1)), Output{}};
}

// d softplus(x) = sigmoid(x).
PSFLOW_DECL Grads softplus_grad(const Operation& op, const Grads& g) {
  return {ops::mul(g[0], ops::sigmoid(op.input(0)))};
}

// TF's EluGrad from the output y: g * (y + 1) where y < 0, else g; composed here as
// g * (min(y, 0) + 1), which is the same thing without a separate op.
PSFLOW_DECL Grads elu_grad(const Operation& op, const Grads& g) {
  const Output y = op.output(0);
  return {ops::mul(g[0],
                   ops::add(ops::minimum(y, ops::scalar_like(y, 0.0)), ops::scalar_like(y, 1.0)))};
}

// TF's LeakyReluGrad: g where x > 0, else alpha * g; composed as
// alpha * g + (1 - alpha) * relu_grad(g, x).
PSFLOW_DECL Grads leaky_relu_grad(const Operation& op, const Grads& g) {
  const double alpha = op_attr<double>(op, "alpha");
  const Output x = op.input(0);
  return {ops::add(ops::mul(g[0], ops::scalar_like(g[0], alpha)),
                   ops::mul(ops::relu_grad(g[0], x), ops::scalar_like(g[0], 1.0 - alpha)))};
}

// d (sum(x^2) / 2) = x, times the scalar incoming gradient.
PSFLOW_DECL Grads l2_loss_grad(const Operation& op, const Grads& g) {
  return {ops::mul(op.input(0), g[0])};
}

PSFLOW_REGISTERED_AT_STARTUP const bool nn_breadth_ops_registered = [] {
  auto& defs = OpRegistry::global();
  auto& grads = GradientRegistry::global();
  defs.add({.type = "Softmax", .num_inputs = 1, .infer = infer_softmax});
  grads.add("Softmax", softmax_grad);
  defs.add({.type = "LogSoftmax", .num_inputs = 1, .infer = infer_softmax});
  grads.add("LogSoftmax", log_softmax_grad);
  defs.add({.type = "SparseSoftmaxCrossEntropyWithLogits",
            .num_inputs = 2,
            .infer = infer_sparse_softmax_xent});
  grads.add("SparseSoftmaxCrossEntropyWithLogits", sparse_softmax_xent_grad);
  const std::pair<const char*, GradientFunction> unary[] = {
      {"Softplus", softplus_grad}, {"Elu", elu_grad}, {"LeakyRelu", leaky_relu_grad}};
  for (const auto& [type, grad] : unary) {
    defs.add({.type = type, .num_inputs = 1, .infer = infer_unary_floating});
    grads.add(type, grad);
  }
  defs.add({.type = "L2Loss", .num_inputs = 1, .infer = infer_l2_loss});
  grads.add("L2Loss", l2_loss_grad);
  return true;
}();

}  // namespace psflow::detail

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
