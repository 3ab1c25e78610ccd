// Streaming metrics, TF1's tf.metrics: each returns {value, update_op}. The counts live in
// local variables (local_variables_initializer() zeroes them; MonitoredTrainingSession runs it
// in every session it makes; a Saver never saves them); each run of update_op adds one batch to
// them, and value reads the metric of everything added so far, so a test set is evaluated by
// running update_op over its batches and then value once.
//
//   auto [auc, auc_update] = metrics::auc(labels, predictions);
//   sess.run(local_variables_initializer(graph));
//   for (const auto& batch : test_set) sess.run(auc_update, feeds_of(batch));
//   double value = sess.run({auc})[0].scalar<float>();
//
// Variables are named like TF's ("auc/true_positives", then "auc_1/..." for a second AUC) and
// placed by the device scopes like any variable: under replica_device_setter on a ps task, as
// in TF. A metric meant per worker is built inside graph.device("/job:worker/task:N").
// A value with nothing counted yet is 0, as TF's safe division gives.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "psflow/core/compilation.hpp"
#include "psflow/graph/graph.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <cstddef>
#include <cstdint>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/graph/array_ops.hpp"
#include "psflow/graph/control_ops.hpp"
#include "psflow/graph/grad_ops.hpp"
#include "psflow/graph/logic_ops.hpp"
#include "psflow/graph/math_ops.hpp"
#include "psflow/graph/variable.hpp"
#endif

namespace psflow::metrics {

// Area under the ROC curve ("ROC", TF's default) or the precision-recall curve ("PR"), TF1's
// tf.metrics.auc with its trapezoidal sum: predictions (floats in [0, 1], any shape) are
// compared with num_thresholds thresholds spread evenly over [0, 1] (the first just below 0,
// the last just above 1); labels (same number of elements; nonzero or true is positive) are
// counted per threshold as true/false positives/negatives. More thresholds, a finer curve.
// InvalidArgument for num_thresholds < 2, another curve, or labels and predictions of different
// element counts (at run time when the shapes are not known before).
std::pair<Output, Operation> auc(Output labels, Output predictions, int num_thresholds = 200,
                                 std::string_view curve = "ROC");

// The fraction of predictions equal to their labels (tf.metrics.accuracy); predictions are cast
// to the labels' dtype first.
std::pair<Output, Operation> accuracy(Output labels, Output predictions);

// The mean of every element of every batch of `values` (tf.metrics.mean), as float32.
std::pair<Output, Operation> mean(Output values);

// true positives / predicted positives (tf.metrics.precision); labels and predictions are read
// as booleans (nonzero is true).
std::pair<Output, Operation> precision(Output labels, Output predictions);

// true positives / actual positives (tf.metrics.recall); booleans as for precision.
std::pair<Output, Operation> recall(Output labels, Output predictions);

}  // namespace psflow::metrics

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
// ---------------------------------------------------------------------------------------------

namespace psflow::metrics::detail {

// The scope of one metric's variables and ops: `default_name`, or default_name_1, _2, ... when
// the graph has ops under that name already (TF's variable_scope default_name).
PSFLOW_DECL std::string metric_scope(Graph& graph, const std::string& default_name) {
  const std::vector<Operation> existing = graph.operations();
  auto taken = [&](const std::string& scope) {
    for (const Operation& op : existing)
      if (op.name() == scope || op.name().rfind(scope + "/", 0) == 0) return true;
    return false;
  };
  std::string scope = default_name;
  for (int i = 1; taken(scope); ++i) scope = default_name + "_" + std::to_string(i);
  return scope;
}

// A float32 local variable of `shape`, zero to begin with, named scope/name.
PSFLOW_DECL Variable metric_variable(Graph& graph, const std::string& scope,
                                     const std::string& name, const Shape& shape) {
  return psflow::detail::create_variable(graph, scope + "/" + name, shape, zeros_initializer(),
                                         DType::float32, false, nullptr, std::nullopt,
                                         /*local=*/true);
}

// x / y elementwise where y > 0, else 0 (TF's safe division of counts).
PSFLOW_DECL Output safe_div(Output x, Output y) {
  const Output positive = ops::greater(y, ops::zeros_like(y));
  return ops::where(positive, ops::div(x, ops::where(positive, y, ops::ones_like(y))),
                    ops::zeros_like(x));
}

// Nonzero (or true) as true.
PSFLOW_DECL Output as_bool(Output x) {
  return x.dtype() == DType::boolean ? x : ops::not_equal(x, ops::zeros_like(x));
}

// `labels` in the shape of `predictions`: an InvalidArgument naming the two shapes when their
// element counts differ, where broadcasting would silently pair a batch with one label.
PSFLOW_DECL Output labels_like(Output labels, Output predictions) {
  return ops::reshape_to_shape_of(labels, predictions, "labels");
}

// How many elements of bool `b` are true, as a float32 scalar (or per row with `axes`).
PSFLOW_DECL Output count_true(Output b, std::vector<int> axes = {}) {
  return ops::reduce_sum(ops::cast(b, DType::float32), std::move(axes));
}

// mean() with its variables under `default_name` ("mean", "accuracy").
PSFLOW_DECL std::pair<Output, Operation> mean_in_scope(Output values,
                                                       const std::string& default_name) {
  Graph& g = values.graph();
  const std::string scope = metric_scope(g, default_name);
  const Variable total = metric_variable(g, scope, "total", {});
  const Variable count = metric_variable(g, scope, "count", {});
  auto names = g.name_scope(scope);
  const Output as_float = ops::cast(values, DType::float32);
  const Operation update =
      ops::group({total.assign_add(ops::reduce_sum(as_float)).op(),
                  count.assign_add(ops::cast(ops::size(as_float), DType::float32)).op()},
                 "update_op");
  return {safe_div(total.value(), count.value()), update};
}

// precision() and recall(): true positives over true positives plus `other` (false positives,
// false negatives), under `default_name`.
PSFLOW_DECL std::pair<Output, Operation> ratio_of_positives(Output labels, Output predictions,
                                                            const std::string& default_name,
                                                            bool over_predicted) {
  Graph& g = labels.graph();
  const std::string scope = metric_scope(g, default_name);
  const Variable true_positives = metric_variable(g, scope, "true_positives", {});
  const Variable other =
      metric_variable(g, scope, over_predicted ? "false_positives" : "false_negatives", {});
  auto names = g.name_scope(scope);
  const Output predicted = as_bool(predictions);
  const Output label = as_bool(labels_like(labels, predictions));
  const Output others = over_predicted ? ops::logical_and(ops::logical_not(label), predicted)
                                       : ops::logical_and(label, ops::logical_not(predicted));
  const Operation update =
      ops::group({true_positives.assign_add(count_true(ops::logical_and(label, predicted))).op(),
                  other.assign_add(count_true(others)).op()},
                 "update_op");
  return {safe_div(true_positives.value(), true_positives.value() + other.value()), update};
}

}  // namespace psflow::metrics::detail

namespace psflow::metrics {

PSFLOW_DECL std::pair<Output, Operation> mean(Output values) {
  return detail::mean_in_scope(values, "mean");
}

PSFLOW_DECL std::pair<Output, Operation> accuracy(Output labels, Output predictions) {
  const Output same_dtype =
      predictions.dtype() == labels.dtype() ? predictions : ops::cast(predictions, labels.dtype());
  return detail::mean_in_scope(ops::equal(same_dtype, detail::labels_like(labels, predictions)),
                               "accuracy");
}

PSFLOW_DECL std::pair<Output, Operation> precision(Output labels, Output predictions) {
  return detail::ratio_of_positives(labels, predictions, "precision", true);
}

PSFLOW_DECL std::pair<Output, Operation> recall(Output labels, Output predictions) {
  return detail::ratio_of_positives(labels, predictions, "recall", false);
}

PSFLOW_DECL std::pair<Output, Operation> auc(Output labels, Output predictions, int num_thresholds,
                                             std::string_view curve) {
  if (num_thresholds < 2)
    throw InvalidArgument("metrics::auc: num_thresholds must be at least 2, got " +
                          std::to_string(num_thresholds));
  if (curve != "ROC" && curve != "PR")
    throw InvalidArgument("metrics::auc: curve must be \"ROC\" or \"PR\", got \"" +
                          std::string(curve) + "\"");
  const auto n = static_cast<std::size_t>(num_thresholds);
  Graph& g = labels.graph();
  const std::string scope = detail::metric_scope(g, "auc");
  const Variable tp = detail::metric_variable(g, scope, "true_positives", {n});
  const Variable fn = detail::metric_variable(g, scope, "false_negatives", {n});
  const Variable tn = detail::metric_variable(g, scope, "true_negatives", {n});
  const Variable fp = detail::metric_variable(g, scope, "false_positives", {n});
  auto names = g.name_scope(scope);

  // TF's thresholds: just below 0, (i + 1) / (n - 1) for i < n - 2, just above 1.
  constexpr double kEpsilon = 1e-7;
  std::vector<float> thresholds(n);
  thresholds.front() = static_cast<float>(0.0 - kEpsilon);
  for (std::size_t i = 0; i + 2 < n; ++i)
    thresholds[i + 1] = static_cast<float>(static_cast<double>(i + 1) / static_cast<double>(n - 1));
  thresholds.back() = static_cast<float>(1.0 + kEpsilon);

  // [n, 1] thresholds against [1, batch] predictions and labels: [n, batch] by broadcasting.
  const Output threshold_column =
      ops::constant(g, Tensor::from_vector(thresholds, {n, 1}), "thresholds");
  const Output prediction_row = ops::reshape(ops::cast(predictions, DType::float32), {1, -1});
  const Output label_row =
      ops::reshape(detail::as_bool(detail::labels_like(labels, predictions)), {1, -1});
  const Output predicted_positive = ops::greater(prediction_row, threshold_column);
  const Output predicted_negative = ops::logical_not(predicted_positive);
  const Output label_negative = ops::logical_not(label_row);
  auto count = [](Output label, Output predicted) {
    return detail::count_true(ops::logical_and(label, predicted), {1});
  };
  const Operation update =
      ops::group({tp.assign_add(count(label_row, predicted_positive)).op(),
                  fn.assign_add(count(label_row, predicted_negative)).op(),
                  tn.assign_add(count(label_negative, predicted_negative)).op(),
                  fp.assign_add(count(label_negative, predicted_positive)).op()},
                 "update_op");

  // TF's compute_auc, summation_method "trapezoidal".
  const Output eps = ops::scalar_like(tp.value(), kEpsilon);
  const Output recall = (tp.value() + eps) / (tp.value() + fn.value() + eps);
  Output x, y;
  if (curve == "ROC") {
    x = fp.value() / (fp.value() + tn.value() + eps);
    y = recall;
  } else {
    x = recall;
    y = (tp.value() + eps) / (tp.value() + fp.value() + eps);
  }
  const auto m = static_cast<std::int64_t>(n) - 1;
  const Output x_left = ops::slice(x, {0}, {m}), x_right = ops::slice(x, {1}, {m});
  const Output y_left = ops::slice(y, {0}, {m}), y_right = ops::slice(y, {1}, {m});
  const Output value =
      ops::reduce_sum((x_left - x_right) * ((y_left + y_right) * 0.5), {}, false, "value");
  return {value, update};
}

}  // namespace psflow::metrics

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
