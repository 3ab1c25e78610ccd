// Evaluation metrics of the CTR example, computed exactly on the host (not TF's streaming,
// bucketed tf.metrics.auc, whose value depends on its number of thresholds):
//
//   auc(scores, labels)               area under the ROC curve: the probability that a random
//                                     positive scores above a random negative, ties counting
//                                     one half (so all-equal scores give 0.5)
//   log_loss(probabilities, labels)   mean of -(y log p + (1 - y) log(1 - p)), p clipped to
//                                     [eps, 1 - eps] so a confident mistake costs -log(eps)
//                                     instead of infinity (sklearn's log_loss does the same)
//   binary_accuracy(scores, labels)   the fraction with (score > threshold) == (label > 0.5)
//   accuracy(predicted, labels)       the fraction of equal entries (class ids of one signedness)
//
// Each takes any two random-access ranges of numbers of one size (std::vector, std::span, a
// Tensor's values<T>()). A label counts as positive when it is above 0.5. They throw
// psflow::InvalidArgument, saying what to pass instead, for ranges of different sizes, empty
// ranges, NaN scores, and (AUC) a set without both positives and negatives.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <ranges>
#include <string>
#include <vector>

#include "psflow/core/error.hpp"

namespace ctr {

namespace detail {

template <class A, class B>
std::size_t checked_size(const char* metric, const A& a, const B& b) {
  const auto n = static_cast<std::size_t>(std::ranges::size(a));
  if (n != static_cast<std::size_t>(std::ranges::size(b)))
    throw psflow::InvalidArgument(std::string("ctr::") + metric + ": got " + std::to_string(n) +
                                  " predictions but " + std::to_string(std::ranges::size(b)) +
                                  " labels; pass one label per prediction");
  if (n == 0)
    throw psflow::InvalidArgument(std::string("ctr::") + metric +
                                  ": no examples; evaluate on at least one");
  return n;
}

}  // namespace detail

// O(n log n): sorts the scores, gives each tie group its average rank (1-based), and uses the
// Mann-Whitney identity AUC = (sum of the positives' ranks - P (P + 1) / 2) / (P N).
template <std::ranges::random_access_range Scores, std::ranges::random_access_range Labels>
double auc(const Scores& scores, const Labels& labels) {
  const std::size_t n = detail::checked_size("auc", scores, labels);
  std::vector<double> s(n);
  for (std::size_t i = 0; i < n; ++i) {
    s[i] = static_cast<double>(std::ranges::begin(scores)[static_cast<std::ptrdiff_t>(i)]);
    if (std::isnan(s[i]))
      throw psflow::InvalidArgument("ctr::auc: score " + std::to_string(i) +
                                    " is NaN; check the model's output for overflow");
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s[a] < s[b]; });
  double positive_rank_sum = 0;
  std::size_t positives = 0;
  for (std::size_t begin = 0; begin < n;) {
    std::size_t end = begin + 1;
    while (end < n && s[order[end]] == s[order[begin]]) ++end;
    const double rank = 0.5 * static_cast<double>(begin + 1 + end);  // mean of begin+1 .. end
    for (std::size_t k = begin; k < end; ++k)
      if (static_cast<double>(std::ranges::begin(labels)[static_cast<std::ptrdiff_t>(order[k])]) >
          0.5) {
        positive_rank_sum += rank;
        ++positives;
      }
    begin = end;
  }
  const std::size_t negatives = n - positives;
  if (positives == 0 || negatives == 0)
    throw psflow::InvalidArgument("ctr::auc: the " + std::to_string(n) + " labels are all " +
                                  (positives == 0 ? "negative" : "positive") +
                                  "; AUC needs both classes: evaluate on more examples");
  const double p = static_cast<double>(positives), q = static_cast<double>(negatives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * q);
}

// The default `eps` suits float32 predictions: 1e-7 is about a float32's spacing just below 1,
// so a prediction that rounded to exactly 0 or 1 still costs a finite -log(1e-7) = 16.1.
// Labels may be soft (in [0, 1]).
template <std::ranges::random_access_range Probabilities, std::ranges::random_access_range Labels>
double log_loss(const Probabilities& probabilities, const Labels& labels, double eps = 1e-7) {
  const std::size_t n = detail::checked_size("log_loss", probabilities, labels);
  if (!(eps > 0 && eps < 0.5))
    throw psflow::InvalidArgument("ctr::log_loss: eps " + std::to_string(eps) +
                                  " must lie in (0, 0.5)");
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::ptrdiff_t>(i);
    const double p = static_cast<double>(std::ranges::begin(probabilities)[k]);
    if (std::isnan(p))
      throw psflow::InvalidArgument("ctr::log_loss: probability " + std::to_string(i) +
                                    " is NaN; check the model's output for overflow");
    const double y = static_cast<double>(std::ranges::begin(labels)[k]);
    const double clipped = std::clamp(p, eps, 1 - eps);
    sum -= y * std::log(clipped) + (1 - y) * std::log(1 - clipped);
  }
  return sum / static_cast<double>(n);
}

template <std::ranges::random_access_range Scores, std::ranges::random_access_range Labels>
double binary_accuracy(const Scores& scores, const Labels& labels, double threshold = 0.5) {
  const std::size_t n = detail::checked_size("binary_accuracy", scores, labels);
  std::size_t right = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::ptrdiff_t>(i);
    const bool predicted = static_cast<double>(std::ranges::begin(scores)[k]) > threshold;
    const bool actual = static_cast<double>(std::ranges::begin(labels)[k]) > 0.5;
    right += predicted == actual;
  }
  return static_cast<double>(right) / static_cast<double>(n);
}

template <std::ranges::random_access_range Predicted, std::ranges::random_access_range Labels>
double accuracy(const Predicted& predicted, const Labels& labels) {
  const std::size_t n = detail::checked_size("accuracy", predicted, labels);
  std::size_t right = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::ptrdiff_t>(i);
    right += std::ranges::begin(predicted)[k] == std::ranges::begin(labels)[k];
  }
  return static_cast<double>(right) / static_cast<double>(n);
}

}  // namespace ctr
