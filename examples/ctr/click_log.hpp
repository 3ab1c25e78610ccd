// A synthetic click log whose true model is known, for the CTR (click-through-rate) example.
//
// The example's data side lives in this folder: this generator, sparse_fashion_mnist.hpp (real
// images as bags of hashed feature ids), metrics.hpp (exact AUC, log-loss, accuracy) and
// feature_hash.hpp (the hash all of them use). Each is header-only and needs only psflow's
// errors (and zlib, through examples/trainer's loader, for the images).
//
// Why synthetic: public click logs (Criteo, Avazu) are gigabytes, not installed here, and their
// best achievable AUC is unknown, so a trainer's 0.78 could be excellent or poor. Here every
// label is drawn from a logistic model we wrote down, so the AUC of the true probabilities on
// the held-out examples is the best any model can reach on them (the Bayes ranking: sorting by
// the true click probability maximises the expected AUC). A trainer's AUC is judged against
// that ceiling, and its log-loss against the true model's.
//
// The generator
// -------------
// An example has F categorical fields (default 8). Field f takes a value in [0, V_f) drawn from
// a Zipf-like law, P(value = k) proportional to 1 / (k + 1)^s (default s = 1.1): value 0 is the
// most frequent, a few values cover much of the traffic and most values are rare, like ad ids,
// sites or user ids. The true model is logistic:
//
//   logit = bias + sum_f w_f[value_f] + sum_{(f, g) in crosses} w_fg[value_f, value_g]
//   true_probability = sigmoid(logit),   label = 1 with that probability, else 0
//
// Every weight is pseudo-normal, the mean of 4 hashed uniforms rescaled to mean 0 and the
// configured standard deviation (Irwin-Hall: exact arithmetic, no std::normal_distribution),
// from the hash of (seed, field, value) or (seed, cross, value_f, value_g). Nothing is stored:
// the weights of the 20000 x 10000 possible pairs of a cross are computed when needed. The
// crosses make the log a wide-and-deep problem: a model of the fields alone cannot reach the
// best AUC, a model that also has the crossed features (or learns interactions) can approach it.
//
// With the default configuration, measured on the 100000 held-out examples: click rate 0.172,
// best AUC 0.797, best log-loss 0.371 (a constant prediction scores 0.458), and the fields'
// true weights without the crosses rank at AUC 0.722. tests/test_ctr_data.cpp checks the
// documented ranges, 0.10-0.25 for the click rate and 0.75-0.85 for the best AUC. The bias and
// weight scales were tuned for that; other seeds land nearby (seeds 1-8: click rate 0.13-0.19,
// best AUC 0.787-0.813), the spread coming from the weights the hot values happen to draw.
// The skew: in field 0 (20000 values) value 0 takes 14.6% of the examples and the top 1% of
// the values 68%; in field 7 (10 values) value 0 takes 37%.
//
// Exactly, with hash_of and uniform01 from feature_hash.hpp and u(...) = uniform01(hash_of(...)):
//
//   value_f of example i     the first k with cdf_f[k] > u(seed, 1, i, f), where cdf_f[k] is
//                            sum_{j<=k} (j+1)^-s / sum_{j<V_f} (j+1)^-s (its last entry set to 1)
//   label of example i       1 if u(seed, 2, i) < true_probability, else 0
//   w_f[v]                   field_weight_stddev * sqrt(3) * (sum_{k=0..3} u(seed, 3, f, v, k) - 2)
//   w_c[v, w] (cross c)      cross_weight_stddev * sqrt(3) * (sum_k u(seed, 4, c, v, w, k) - 2)
//
// Determinism and random access
// -----------------------------
// Every number is a counter-based hash (feature_hash.hpp) of the seed and the example index, so
// example(i) is the same whichever worker makes it, in any order, on any platform; there is no
// generator state. The only floating-point functions are std::pow (the Zipf table), std::exp
// (the sigmoid) and a square root of 3 written as a constant; C libraries agree on pow and exp
// to the last bit or differ by one ulp, which moves a draw only if its uniform lands within
// 1e-16 of a threshold.
//
// Training examples are the indices [0, 2^62); the held-out test set is test_example(i) =
// example(2^62 + i), never a training example. Worker k of n takes examples k, k + n, k + 2n,
// ...: its j-th batch of B examples is batch(k + j * B * n, B, n).
//
// Feature ids
// -----------
// Each example carries F + C feature ids (C crosses), each a row of a hashed table of
// `table_rows` rows (default 2^18):
//
//   field f, value v                 hash_of(1, f, v) % table_rows
//   cross c = (f, g), values v, w    hash_of(2, c, v, w) % table_rows
//
// (hash_of in feature_hash.hpp; the ids do not depend on the seed.) Different features can
// share a row, as in any hashed feature space. With raw_ids the ids are the whole 64-bit hashes
// (as int64: any value, negative too), for a dynamic embedding table that needs no range and
// where no two features collide.
//
// Drift: with fresh_id_rate > 0 every example carries one more feature, a "session" id that is,
// with that probability, an id no other example has (hash_of(3, example index)), else one of 100
// common ones (hash_of(4, k)). It carries no weight in the true model (the best achievable AUC
// is unchanged); it makes the id space keep growing, as new users and items do in a real log. The
// same ids feed both halves of a wide-and-deep model: a wide table of one float per row (a linear
// model, FTRL-trained in TF's canonical setup) and a deep table of `dim` floats per row
// (embeddings, Adagrad-trained) whose rows are concatenated, F + C of them, into the input of an
// MLP.
//
// A ClickLog is immutable after construction and may be used from several threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ctr/feature_hash.hpp"
#include "ctr/metrics.hpp"
#include "psflow/core/error.hpp"

namespace ctr {

// A crossed pair of fields (indices into ClickLogConfig::vocabulary_sizes).
struct FieldCross {
  std::size_t first = 0;
  std::size_t second = 0;
};

struct ClickLogConfig {
  std::uint64_t seed = 1;
  // V_f per field; the number of fields F is its size.
  std::vector<std::uint32_t> vocabulary_sizes = {20000, 10000, 5000, 2000, 1000, 200, 50, 10};
  double zipf_exponent = 1.1;  // s; 0 draws every value equally often
  std::vector<FieldCross> crosses = {{0, 1}, {2, 6}, {4, 7}};
  double bias = -2.3;
  double field_weight_stddev = 0.35;
  double cross_weight_stddev = 0.5;
  std::uint64_t table_rows = std::uint64_t{1} << 18;
  bool raw_ids = false;      // ids are the whole 64-bit hashes, not hashes % table_rows
  double fresh_id_rate = 0;  // > 0: a "session" feature, new with this probability (drift)
};

struct ClickExample {
  // F field ids, then one id per cross, in config order, then the session id with drift; each in
  // [0, table_rows), or any 64-bit value with raw_ids.
  std::vector<std::uint64_t> feature_ids;
  float label = 0;  // 0 or 1
  double true_probability = 0;
  std::vector<std::uint32_t> field_values;  // the F raw values, value_f in [0, V_f)
};

// Examples in the layout a trainer feeds: ids int64 [size, num_features] row-major (for an
// embedding lookup), labels [size] (for a float32 [size, 1] or [size] placeholder).
struct ClickBatch {
  std::size_t num_features = 0;
  std::vector<std::int64_t> ids;
  std::vector<float> labels;
  std::vector<double> true_probabilities;
  std::size_t size() const noexcept { return labels.size(); }
};

class ClickLog {
 public:
  // Index of test example 0; training examples are the indices below it.
  static constexpr std::uint64_t kTestBegin = std::uint64_t{1} << 62;

  // Throws InvalidArgument for a configuration it cannot generate from (no fields, an empty
  // vocabulary, a cross of a field with itself or with a missing field, no table rows, a
  // negative exponent or standard deviation), saying which setting to change.
  explicit ClickLog(ClickLogConfig config = {});

  const ClickLogConfig& config() const noexcept { return config_; }
  std::size_t num_fields() const noexcept { return config_.vocabulary_sizes.size(); }
  std::size_t num_crosses() const noexcept { return config_.crosses.size(); }
  std::size_t num_features() const noexcept {
    return num_fields() + num_crosses() + (config_.fresh_id_rate > 0 ? 1 : 0);
  }
  std::uint64_t table_rows() const noexcept { return config_.table_rows; }

  ClickExample example(std::uint64_t index) const;
  ClickExample test_example(std::uint64_t i) const { return example(kTestBegin + i); }
  // Examples first, first + stride, ..., first + (count - 1) * stride.
  ClickBatch batch(std::uint64_t first, std::size_t count, std::uint64_t stride = 1) const;
  ClickBatch test_batch(std::uint64_t first, std::size_t count) const {
    return batch(kTestBegin + first, count);
  }

  // The pieces of the ground truth, for tests and for inspecting a trained model.
  std::uint32_t field_value(std::uint64_t index, std::size_t field) const;
  double field_weight(std::size_t field, std::uint32_t value) const;
  double cross_weight(std::size_t cross, std::uint32_t value_first,
                      std::uint32_t value_second) const;
  double true_logit(const std::vector<std::uint32_t>& field_values) const;
  std::uint64_t field_feature_id(std::size_t field, std::uint32_t value) const {
    return feature_id(hash_of(1, field, value));
  }
  std::uint64_t cross_feature_id(std::size_t cross, std::uint32_t value_first,
                                 std::uint32_t value_second) const {
    return feature_id(hash_of(2, cross, value_first, value_second));
  }
  // The session feature of example `index` (fresh_id_rate > 0).
  std::uint64_t session_feature_id(std::uint64_t index) const {
    const bool fresh = uniform01(hash_of(config_.seed, kFresh, index)) < config_.fresh_id_rate;
    return feature_id(fresh ? hash_of(3, index)
                            : hash_of(4, hash_of(config_.seed, kCommon, index) % 100));
  }

 private:
  // Hash streams: each kind of random number has its own, so they never share a hash.
  enum Stream : std::uint64_t {
    kValue = 1,
    kLabel = 2,
    kFieldWeight = 3,
    kCrossWeight = 4,
    kFresh = 5,
    kCommon = 6
  };

  std::uint64_t feature_id(std::uint64_t hash) const {
    return config_.raw_ids ? hash : hash % config_.table_rows;
  }

  // Mean 0, standard deviation 1, within +-2 sqrt(3): the sum of 4 uniforms, centred and scaled.
  template <class... Key>
  double pseudo_normal(Key... key) const {
    double sum = 0;
    for (std::uint64_t k = 0; k < 4; ++k) sum += uniform01(hash_of(config_.seed, key..., k));
    return (sum - 2.0) * 1.7320508075688772;  // variance 4/12 scaled to 1 by sqrt(3)
  }

  ClickLogConfig config_;
  std::vector<std::vector<double>> cdf_;  // per field: P(value <= k), the last entry exactly 1
};

// The AUC of the true probabilities on `examples`: the best any model can reach on them.
inline double best_auc(const std::vector<ClickExample>& examples) {
  std::vector<double> p;
  std::vector<float> y;
  for (const auto& e : examples) {
    p.push_back(e.true_probability);
    y.push_back(e.label);
  }
  return auc(p, y);
}

// The same on the test examples [0, test_size).
inline double best_auc(const ClickLog& log, std::size_t test_size) {
  const ClickBatch b = log.test_batch(0, test_size);
  return auc(b.true_probabilities, b.labels);
}

// The true model's log-loss on the test examples [0, test_size): what a perfect model scores.
inline double best_log_loss(const ClickLog& log, std::size_t test_size) {
  const ClickBatch b = log.test_batch(0, test_size);
  return log_loss(b.true_probabilities, b.labels);
}

// ---------------------------------------------------------------------------------------------
// Implementation.

inline ClickLog::ClickLog(ClickLogConfig config) : config_(std::move(config)) {
  const auto fail = [](const std::string& what) {
    throw psflow::InvalidArgument("ctr::ClickLog: " + what);
  };
  const std::size_t fields = config_.vocabulary_sizes.size();
  if (fields == 0) fail("vocabulary_sizes is empty; give one vocabulary size per field");
  for (std::size_t f = 0; f < fields; ++f)
    if (config_.vocabulary_sizes[f] == 0)
      fail("field " + std::to_string(f) + " has an empty vocabulary; sizes must be at least 1");
  for (std::size_t c = 0; c < config_.crosses.size(); ++c) {
    const auto [a, b] = config_.crosses[c];
    if (a >= fields || b >= fields || a == b)
      fail("cross " + std::to_string(c) + " pairs fields " + std::to_string(a) + " and " +
           std::to_string(b) + "; a cross needs two different fields below " +
           std::to_string(fields));
  }
  if (config_.table_rows == 0) fail("table_rows is 0; the hashed table needs at least one row");
  if (!(config_.zipf_exponent >= 0 && std::isfinite(config_.zipf_exponent)))
    fail("zipf_exponent " + std::to_string(config_.zipf_exponent) +
         " must be finite and at least 0 (0: uniform)");
  if (!(config_.field_weight_stddev >= 0) || !(config_.cross_weight_stddev >= 0) ||
      !std::isfinite(config_.bias))
    fail("the weight standard deviations must be at least 0 and the bias finite");
  if (!(config_.fresh_id_rate >= 0 && config_.fresh_id_rate <= 1))
    fail("fresh_id_rate " + std::to_string(config_.fresh_id_rate) + " must be in [0, 1]");

  cdf_.resize(fields);
  for (std::size_t f = 0; f < fields; ++f) {
    auto& cdf = cdf_[f];
    cdf.resize(config_.vocabulary_sizes[f]);
    double total = 0;
    for (std::size_t k = 0; k < cdf.size(); ++k) {
      total += std::pow(static_cast<double>(k + 1), -config_.zipf_exponent);
      cdf[k] = total;
    }
    for (auto& c : cdf) c /= total;
    cdf.back() = 1.0;  // every uniform in [0, 1) finds a value, whatever the rounding
  }
}

inline std::uint32_t ClickLog::field_value(std::uint64_t index, std::size_t field) const {
  const double u = uniform01(hash_of(config_.seed, kValue, index, field));
  const auto& cdf = cdf_.at(field);
  return static_cast<std::uint32_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
}

inline double ClickLog::field_weight(std::size_t field, std::uint32_t value) const {
  return config_.field_weight_stddev * pseudo_normal(kFieldWeight, field, value);
}

inline double ClickLog::cross_weight(std::size_t cross, std::uint32_t value_first,
                                     std::uint32_t value_second) const {
  return config_.cross_weight_stddev *
         pseudo_normal(kCrossWeight, cross, value_first, value_second);
}

inline double ClickLog::true_logit(const std::vector<std::uint32_t>& field_values) const {
  if (field_values.size() != num_fields())
    throw psflow::InvalidArgument("ctr::ClickLog::true_logit: got " +
                                  std::to_string(field_values.size()) + " field values for " +
                                  std::to_string(num_fields()) + " fields; pass one per field");
  double logit = config_.bias;
  for (std::size_t f = 0; f < field_values.size(); ++f) logit += field_weight(f, field_values[f]);
  for (std::size_t c = 0; c < config_.crosses.size(); ++c) {
    const auto [a, b] = config_.crosses[c];
    logit += cross_weight(c, field_values[a], field_values[b]);
  }
  return logit;
}

inline ClickExample ClickLog::example(std::uint64_t index) const {
  ClickExample e;
  e.field_values.resize(num_fields());
  e.feature_ids.reserve(num_features());
  for (std::size_t f = 0; f < num_fields(); ++f) {
    e.field_values[f] = field_value(index, f);
    e.feature_ids.push_back(field_feature_id(f, e.field_values[f]));
  }
  for (std::size_t c = 0; c < num_crosses(); ++c) {
    const auto [a, b] = config_.crosses[c];
    e.feature_ids.push_back(cross_feature_id(c, e.field_values[a], e.field_values[b]));
  }
  if (config_.fresh_id_rate > 0) e.feature_ids.push_back(session_feature_id(index));
  e.true_probability = 1.0 / (1.0 + std::exp(-true_logit(e.field_values)));
  e.label = uniform01(hash_of(config_.seed, kLabel, index)) < e.true_probability ? 1.0f : 0.0f;
  return e;
}

inline ClickBatch ClickLog::batch(std::uint64_t first, std::size_t count,
                                  std::uint64_t stride) const {
  if (stride == 0)
    throw psflow::InvalidArgument(
        "ctr::ClickLog::batch: stride 0 would repeat one example; "
        "use 1 for consecutive examples");
  ClickBatch b;
  b.num_features = num_features();
  b.ids.reserve(count * b.num_features);
  b.labels.reserve(count);
  b.true_probabilities.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const ClickExample e = example(first + i * stride);
    for (const std::uint64_t id : e.feature_ids) b.ids.push_back(static_cast<std::int64_t>(id));
    b.labels.push_back(e.label);
    b.true_probabilities.push_back(e.true_probability);
  }
  return b;
}

}  // namespace ctr
