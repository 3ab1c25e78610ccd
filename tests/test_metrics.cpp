// Streaming metrics (graph/metrics.hpp) against values computed here by hand: batches add up
// across update_op runs, local_variables_initializer starts them over, an empty metric is 0;
// AUC follows TF1's thresholds and trapezoid (checked against the same sum written out here)
// and comes within 0.005 of the exact AUC (the Mann-Whitney statistic) on random scores; the
// variables are local (not saved, not trainable) and named like TF's; bad arguments are typed.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "psflow/runtime.hpp"

namespace metrics_test {

namespace ops = psflow::ops;
namespace metrics = psflow::metrics;
using psflow::DType;
using psflow::Graph;
using psflow::Output;
using psflow::Session;
using psflow::Tensor;

struct Batch {
  std::vector<float> labels, scores;
};

// TF1's tf.metrics.auc, written out: the thresholds, the four counts per threshold, the sum.
double tf_auc(const std::vector<Batch>& batches, int num_thresholds, bool roc) {
  const auto n = static_cast<std::size_t>(num_thresholds);
  std::vector<float> thresholds(n);
  thresholds[0] = static_cast<float>(-1e-7);
  for (std::size_t i = 0; i + 2 < n; ++i)
    thresholds[i + 1] = static_cast<float>(static_cast<double>(i + 1) / static_cast<double>(n - 1));
  thresholds[n - 1] = static_cast<float>(1 + 1e-7);
  std::vector<double> tp(n), fn(n), tn(n), fp(n);
  for (const Batch& b : batches)
    for (std::size_t k = 0; k < b.labels.size(); ++k)
      for (std::size_t t = 0; t < n; ++t) {
        const bool positive = b.labels[k] != 0, predicted = b.scores[k] > thresholds[t];
        (positive ? (predicted ? tp : fn) : (predicted ? fp : tn))[t] += 1;
      }
  const double eps = 1e-7;
  std::vector<double> x(n), y(n);
  for (std::size_t t = 0; t < n; ++t) {
    const double recall = (tp[t] + eps) / (tp[t] + fn[t] + eps);
    x[t] = roc ? fp[t] / (fp[t] + tn[t] + eps) : recall;
    y[t] = roc ? recall : (tp[t] + eps) / (tp[t] + fp[t] + eps);
  }
  double area = 0;
  for (std::size_t t = 0; t + 1 < n; ++t) area += (x[t] - x[t + 1]) * (y[t] + y[t + 1]) / 2;
  return area;
}

// The exact ROC AUC: the chance that a random positive scores above a random negative.
double exact_auc(const std::vector<Batch>& batches) {
  std::vector<float> positives, negatives;
  for (const Batch& b : batches)
    for (std::size_t k = 0; k < b.labels.size(); ++k)
      (b.labels[k] != 0 ? positives : negatives).push_back(b.scores[k]);
  double wins = 0;
  for (float p : positives)
    for (float q : negatives) wins += p > q ? 1.0 : p == q ? 0.5 : 0.0;
  return wins / (static_cast<double>(positives.size()) * static_cast<double>(negatives.size()));
}

// Scores that rank positives higher, with overlap: an AUC well inside (0.5, 1).
std::vector<Batch> random_batches(std::size_t count, std::size_t size, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0, 1);
  std::vector<Batch> batches(count);
  for (Batch& b : batches)
    for (std::size_t k = 0; k < size; ++k) {
      const bool positive = uniform(rng) < 0.3f;
      b.labels.push_back(positive ? 1.0f : 0.0f);
      b.scores.push_back(std::clamp(uniform(rng) * 0.7f + (positive ? 0.25f : 0.0f), 0.0f, 1.0f));
    }
  return batches;
}

struct AucGraph {
  Graph g;
  Output labels = ops::placeholder(g, DType::float32, {-1}, "labels");
  Output scores = ops::placeholder(g, DType::float32, {-1}, "scores");
};

double run_auc(const std::vector<Batch>& batches, int num_thresholds, const char* curve) {
  AucGraph m;
  auto [value, update] = metrics::auc(m.labels, m.scores, num_thresholds, curve);
  Session sess(m.g);
  sess.run(psflow::local_variables_initializer(m.g));
  for (const Batch& b : batches)
    sess.run(update, {{m.labels, Tensor::from_vector(b.labels, {b.labels.size()})},
                      {m.scores, Tensor::from_vector(b.scores, {b.scores.size()})}});
  return sess.run({value})[0].scalar<float>();
}

}  // namespace metrics_test

using namespace metrics_test;

TEST_CASE("auc follows TF1's thresholds and trapezoid, for ROC and PR, summed over batches") {
  const auto batches = random_batches(5, 64, 7);
  for (const int thresholds : {2, 3, 10, 200}) {
    INFO(thresholds << " thresholds");
    CHECK(run_auc(batches, thresholds, "ROC") ==
          Approx(tf_auc(batches, thresholds, true)).margin(1e-5));
    CHECK(run_auc(batches, thresholds, "PR") ==
          Approx(tf_auc(batches, thresholds, false)).margin(1e-5));
  }
}

TEST_CASE(
    "auc with 200 thresholds is within 0.005 of the exact AUC and right for perfect and reversed "
    "scores") {
  const auto batches = random_batches(8, 250, 11);
  const double exact = exact_auc(batches);
  CHECK(exact > 0.6);
  CHECK(exact < 0.95);
  CHECK(run_auc(batches, 200, "ROC") == Approx(exact).margin(0.005));
  const std::vector<Batch> perfect{{{0, 0, 1, 1}, {0.1f, 0.2f, 0.8f, 0.9f}}};
  CHECK(run_auc(perfect, 200, "ROC") == Approx(1.0).margin(1e-3));
  const std::vector<Batch> reversed{{{1, 1, 0, 0}, {0.1f, 0.2f, 0.8f, 0.9f}}};
  CHECK(run_auc(reversed, 200, "ROC") == Approx(0.0).margin(1e-3));
}

TEST_CASE(
    "mean and accuracy add up across update_op runs and start over at the local initializer") {
  Graph g;
  const Output values = ops::placeholder(g, DType::float32, {-1}, "values");
  const Output labels = ops::placeholder(g, DType::int64, {-1}, "labels");
  const Output predicted = ops::placeholder(g, DType::int64, {-1}, "predicted");
  auto [mean, mean_update] = metrics::mean(values);
  auto [accuracy, accuracy_update] = metrics::accuracy(labels, predicted);
  Session sess(g);
  sess.run(psflow::local_variables_initializer(g));
  CHECK(sess.run({mean})[0].scalar<float>() == 0.0f);  // nothing counted: 0, not NaN
  CHECK(sess.run({accuracy})[0].scalar<float>() == 0.0f);
  sess.run(mean_update, {{values, Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})}});
  sess.run(mean_update, {{values, Tensor::from_vector(std::vector<float>{10}, {1})}});
  CHECK(sess.run({mean})[0].scalar<float>() == Approx(4.0));  // 16 / 4, not the mean of means
  auto ints = [](std::vector<std::int64_t> v) { return Tensor::from_vector(v, {v.size()}); };
  sess.run(accuracy_update, {{labels, ints({1, 2, 3, 4})}, {predicted, ints({1, 0, 3, 0})}});
  sess.run(accuracy_update, {{labels, ints({5, 6})}, {predicted, ints({5, 6})}});
  CHECK(sess.run({accuracy})[0].scalar<float>() == Approx(4.0 / 6.0));
  sess.run(psflow::local_variables_initializer(g));
  CHECK(sess.run({mean})[0].scalar<float>() == 0.0f);
  CHECK(sess.run({accuracy})[0].scalar<float>() == 0.0f);
}

TEST_CASE("precision and recall count true and false positives and negatives") {
  Graph g;
  const Output labels = ops::placeholder(g, DType::boolean, {-1}, "labels");
  const Output predicted = ops::placeholder(g, DType::float32, {-1}, "predicted");
  auto [precision, precision_update] = metrics::precision(labels, predicted);
  auto [recall, recall_update] = metrics::recall(labels, predicted);
  Session sess(g);
  sess.run(psflow::local_variables_initializer(g));
  // labels    1 1 1 0 0 1 ; predicted (nonzero) 1 0 1 1 0 0: tp 2, fp 1, fn 2
  const psflow::FeedMap feeds{
      {labels, Tensor::from_vector(std::vector<bool>{true, true, true, false, false, true}, {6})},
      {predicted, Tensor::from_vector(std::vector<float>{0.5f, 0, 2, 1, 0, 0}, {6})}};
  sess.run(psflow::ops::group({precision_update, recall_update}), feeds);
  CHECK(sess.run({precision})[0].scalar<float>() == Approx(2.0 / 3.0));
  CHECK(sess.run({recall})[0].scalar<float>() == Approx(2.0 / 4.0));
}

TEST_CASE("metric variables are local, named like TF's, and a Saver leaves them out") {
  AucGraph m;
  metrics::auc(m.labels, m.scores);
  metrics::auc(m.labels, m.scores, 50, "PR");
  metrics::mean(m.scores);
  CHECK(psflow::global_variables(m.g).empty());
  CHECK(psflow::trainable_variables(m.g).empty());
  std::vector<std::string> names;
  for (const auto& v : psflow::local_variables(m.g)) names.push_back(v.name());
  CHECK(names == std::vector<std::string>{
                     "auc/true_positives", "auc/false_negatives", "auc/true_negatives",
                     "auc/false_positives", "auc_1/true_positives", "auc_1/false_negatives",
                     "auc_1/true_negatives", "auc_1/false_positives", "mean/total", "mean/count"});
  CHECK(psflow::find_variable(m.g, "auc_1/true_positives")->shape() == psflow::Shape{50});
}

TEST_CASE("bad metric arguments are InvalidArgument naming what is wrong") {
  AucGraph m;
  CHECK_THROWS_AS(metrics::auc(m.labels, m.scores, 1), psflow::InvalidArgument);
  CHECK_THROWS_WITH(metrics::auc(m.labels, m.scores, 1),
                    Catch::Contains("num_thresholds must be at least 2"));
  CHECK_THROWS_AS(metrics::auc(m.labels, m.scores, 200, "roc"), psflow::InvalidArgument);
  CHECK_THROWS_WITH(metrics::auc(m.labels, m.scores, 200, "roc"),
                    Catch::Contains("\"ROC\" or \"PR\""));
  auto [value, update] = metrics::auc(m.labels, m.scores);
  Session sess(m.g);
  sess.run(psflow::local_variables_initializer(m.g));
  CHECK_THROWS_AS(
      sess.run(update, {{m.labels, Tensor::from_vector(std::vector<float>{1, 0}, {2})},
                        {m.scores, Tensor::from_vector(std::vector<float>{0.5f}, {1})}}),
      psflow::InvalidArgument);
}
