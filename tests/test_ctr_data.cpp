// The CTR example's data side: the synthetic click log is deterministic, random-access and
// matches its documented formulas (pinned values were computed by an independent Python
// transcription of the header's description), its ids stay in their table, and its click
// rate and best AUC lie in the documented ranges; the metrics agree with hand-computed cases
// and a brute-force AUC; the sparse Fashion-MNIST features follow their documented hashing.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ctr/click_log.hpp"
#include "ctr/feature_hash.hpp"
#include "ctr/metrics.hpp"
#include "ctr/sparse_fashion_mnist.hpp"

using Catch::Contains;
using Catch::WithinAbs;
using Catch::WithinRel;

namespace {

std::string invalid_argument_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const psflow::InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<threw something other than InvalidArgument: ") + e.what() + ">";
  }
  return "<no InvalidArgument thrown>";
}

void check_same(const ctr::ClickExample& a, const ctr::ClickExample& b) {
  CHECK(a.feature_ids == b.feature_ids);
  CHECK(a.field_values == b.field_values);
  CHECK(a.label == b.label);
  CHECK(a.true_probability == b.true_probability);
}

// O(n^2) AUC straight from its definition: positive-negative pairs, ties counting one half.
double brute_force_auc(const std::vector<double>& scores, const std::vector<int>& labels) {
  double wins = 0, pairs = 0;
  for (std::size_t i = 0; i < scores.size(); ++i)
    for (std::size_t j = 0; j < scores.size(); ++j)
      if (labels[i] == 1 && labels[j] == 0) {
        pairs += 1;
        wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
      }
  return wins / pairs;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The hash

TEST_CASE("the hash is SplitMix64 and hash_of chains it as documented", "[ctr]") {
  // SplitMix64 seeded with 0 first outputs 0xE220A8397B1DCDAF (Vigna's reference code).
  CHECK(ctr::splitmix64(0) == 0xE220A8397B1DCDAFULL);
  CHECK(ctr::hash_of(1, 2, 3) == 15020427595393229491ULL);
  CHECK(ctr::hash_of(1, 2, 3) == ctr::splitmix64(ctr::splitmix64(ctr::splitmix64(1) ^ 2) ^ 3));
  CHECK(ctr::hash_of(3, 5) != ctr::hash_of(5, 3));
  CHECK(ctr::uniform01(0) == 0.0);
  CHECK(ctr::uniform01(~std::uint64_t{0}) < 1.0);
  CHECK(ctr::uniform01(std::uint64_t{1} << 63) == 0.5);
}

// ---------------------------------------------------------------------------------------------
// The click log

TEST_CASE("the click log matches an independent transcription of its documentation", "[ctr]") {
  const ctr::ClickLog log;
  REQUIRE(log.num_fields() == 8);
  REQUIRE(log.num_crosses() == 3);
  REQUIRE(log.num_features() == 11);
  CHECK(log.field_feature_id(0, 0) == 100035);
  CHECK(log.field_feature_id(7, 9) == 147683);
  CHECK(log.cross_feature_id(2, 5, 7) == 149253);

  const ctr::ClickExample e0 = log.example(0);
  CHECK(e0.field_values == std::vector<std::uint32_t>{718, 1, 3, 601, 75, 7, 2, 0});
  CHECK(e0.feature_ids == std::vector<std::uint64_t>{197998, 95716, 221875, 196171, 242130, 594,
                                                     140784, 164277, 259437, 26906, 207489});
  CHECK_THAT(e0.true_probability, WithinRel(0.10953393502082027, 1e-12));
  CHECK(e0.label == 0.0f);

  const ctr::ClickExample e7 = log.example(7);  // the first click
  CHECK(e7.field_values == std::vector<std::uint32_t>{0, 3007, 10, 153, 213, 8, 2, 4});
  CHECK(e7.feature_ids == std::vector<std::uint64_t>{100035, 80662, 125236, 107023, 213128, 134670,
                                                     140784, 33531, 61456, 188704, 187531});
  CHECK_THAT(e7.true_probability, WithinRel(0.5093934665543913, 1e-12));
  CHECK(e7.label == 1.0f);
  for (std::uint64_t i = 0; i < 7; ++i) CHECK(log.example(i).label == 0.0f);

  const ctr::ClickExample t0 = log.test_example(0);
  CHECK(t0.field_values == std::vector<std::uint32_t>{69, 3, 612, 91, 9, 4, 18, 2});
  CHECK(t0.feature_ids == std::vector<std::uint64_t>{179576, 229822, 201745, 15354, 148755, 167624,
                                                     60912, 153498, 190645, 101896, 100082});
  CHECK_THAT(t0.true_probability, WithinRel(0.038990401384038226, 1e-12));
  CHECK(t0.label == 0.0f);

  // The ids are the documented hashes of the values; the probability is sigmoid(true_logit).
  for (const auto& e : {e0, e7, t0}) {
    for (std::size_t f = 0; f < 8; ++f)
      CHECK(e.feature_ids[f] == ctr::hash_of(1, f, e.field_values[f]) % (1 << 18));
    const auto& crosses = log.config().crosses;
    for (std::size_t c = 0; c < 3; ++c)
      CHECK(e.feature_ids[8 + c] == ctr::hash_of(2, c, e.field_values[crosses[c].first],
                                                 e.field_values[crosses[c].second]) %
                                        (1 << 18));
    CHECK_THAT(e.true_probability,
               WithinRel(1 / (1 + std::exp(-log.true_logit(e.field_values))), 1e-15));
  }
}

TEST_CASE("the click log is deterministic and random-access", "[ctr]") {
  const ctr::ClickLog a;
  const ctr::ClickLog b;

  SECTION("two logs of one seed agree, whatever order examples are made in") {
    std::vector<ctr::ClickExample> forward;
    for (std::uint64_t i = 0; i < 200; ++i) forward.push_back(a.example(i));
    for (std::uint64_t i = 200; i-- > 0;) {
      INFO("example " << i);
      check_same(b.example(i), forward[i]);
    }
    check_same(a.example(123456789012345ULL), b.example(123456789012345ULL));
  }
  SECTION("worker k of n takes examples k, k + n, ... through batch(first, count, stride)") {
    const std::size_t workers = 3, batch_size = 5;
    for (std::size_t k = 0; k < workers; ++k) {
      for (std::size_t j = 0; j < 2; ++j) {
        const ctr::ClickBatch batch = a.batch(k + j * batch_size * workers, batch_size, workers);
        REQUIRE(batch.size() == batch_size);
        REQUIRE(batch.num_features == 11);
        REQUIRE(batch.ids.size() == batch_size * 11);
        for (std::size_t i = 0; i < batch_size; ++i) {
          const auto e = a.example(k + (j * batch_size + i) * workers);
          INFO("worker " << k << " batch " << j << " row " << i);
          CHECK(std::equal(e.feature_ids.begin(), e.feature_ids.end(),
                           batch.ids.begin() + static_cast<std::ptrdiff_t>(i * 11)));
          CHECK(batch.labels[i] == e.label);
          CHECK(batch.true_probabilities[i] == e.true_probability);
        }
      }
    }
  }
  SECTION("the test set is its own range") {
    check_same(a.test_example(17), a.example(ctr::ClickLog::kTestBegin + 17));
    const auto test = a.test_batch(0, 4);
    for (std::size_t i = 0; i < 4; ++i)
      CHECK(test.true_probabilities[i] == a.test_example(i).true_probability);
    CHECK(a.test_example(0).field_values != a.example(0).field_values);
  }
  SECTION("another seed gives other values and weights, but the same id hash") {
    const ctr::ClickLog other(ctr::ClickLogConfig{.seed = 2});
    std::size_t same_values = 0;
    for (std::uint64_t i = 0; i < 100; ++i)
      same_values += other.example(i).field_values == a.example(i).field_values;
    CHECK(same_values < 10);  // a few examples can have all-hot values in both
    CHECK(other.field_weight(0, 0) != a.field_weight(0, 0));
    CHECK(other.field_feature_id(3, 17) == a.field_feature_id(3, 17));
  }
}

TEST_CASE("click log ids, values and weights stay in their ranges", "[ctr]") {
  SECTION("the default table") {
    const ctr::ClickLog log;
    const auto& sizes = log.config().vocabulary_sizes;
    std::size_t bad = 0;  // examples with something out of range
    for (std::uint64_t i = 0; i < 20000; ++i) {
      const auto e = log.example(i);
      bool ok = e.feature_ids.size() == 11 && e.field_values.size() == 8 &&
                (e.label == 0.0f || e.label == 1.0f) && e.true_probability > 0 &&
                e.true_probability < 1;
      for (const auto id : e.feature_ids) ok = ok && id < log.table_rows();
      for (std::size_t f = 0; ok && f < 8; ++f) ok = e.field_values[f] < sizes[f];
      if (!ok && bad++ == 0) FAIL_CHECK("example " << i << " has a value out of range");
    }
    CHECK(bad == 0);
  }
  SECTION("a tiny table, one field and no cross") {
    const ctr::ClickLog log(
        ctr::ClickLogConfig{.vocabulary_sizes = {1}, .crosses = {}, .table_rows = 7});
    REQUIRE(log.num_features() == 1);
    for (std::uint64_t i = 0; i < 100; ++i) {
      const auto e = log.example(i);
      CHECK(e.field_values == std::vector<std::uint32_t>{0});
      CHECK(e.feature_ids[0] < 7);
    }
  }
  SECTION("values follow the Zipf law: value 0 of field 0 takes 14.6% of the examples") {
    const ctr::ClickLog log;
    const std::size_t n = 100000;
    std::size_t hot0 = 0, hot7 = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      hot0 += log.field_value(i, 0) == 0;
      hot7 += log.field_value(i, 7) == 0;
    }
    // 1 / sum_{k=1..V} k^-1.1: 0.1459 for V = 20000, 0.3727 for V = 10 (binomial sd ~0.0015).
    CHECK_THAT(static_cast<double>(hot0) / n, WithinAbs(0.1459, 0.006));
    CHECK_THAT(static_cast<double>(hot7) / n, WithinAbs(0.3727, 0.006));
  }
  SECTION("weights are pseudo-normal with the configured standard deviation") {
    const ctr::ClickLog log;
    double sum = 0, squares = 0, lo = 0, hi = 0;
    const std::uint32_t n = 20000;
    for (std::uint32_t v = 0; v < n; ++v) {
      const double w = log.field_weight(0, v);
      sum += w;
      squares += w * w;
      lo = std::min(lo, w);
      hi = std::max(hi, w);
    }
    const double mean = sum / n;
    CHECK_THAT(mean, WithinAbs(0, 0.01));
    CHECK_THAT(std::sqrt(squares / n - mean * mean), WithinAbs(0.35, 0.01));
    // Irwin-Hall with 4 terms: within +-2 sqrt(3) standard deviations.
    CHECK(lo >= -2 * std::sqrt(3.0) * 0.35);
    CHECK(hi <= 2 * std::sqrt(3.0) * 0.35);
  }
}

TEST_CASE("the default click log has the documented click rate and best AUC", "[ctr]") {
  const ctr::ClickLog log;
  const std::size_t n = 100000;
  const ctr::ClickBatch test = log.test_batch(0, n);
  double clicks = 0, expected = 0;
  for (std::size_t i = 0; i < n; ++i) {
    clicks += test.labels[i];
    expected += test.true_probabilities[i];
  }
  const double click_rate = clicks / n;
  const double best = ctr::best_auc(log, n);
  const double best_loss = ctr::best_log_loss(log, n);
  INFO("click rate " << click_rate << ", best AUC " << best << ", best log-loss " << best_loss);
  CHECK(click_rate > 0.10);
  CHECK(click_rate < 0.25);
  CHECK_THAT(click_rate, WithinAbs(expected / n, 0.005));  // labels follow the probabilities
  CHECK(best > 0.75);
  CHECK(best < 0.85);
  // A constant prediction of the click rate scores the label entropy; the truth beats it.
  const double entropy =
      -(click_rate * std::log(click_rate) + (1 - click_rate) * std::log(1 - click_rate));
  CHECK(best_loss < entropy - 0.05);

  SECTION("the crosses matter: the fields' weights alone rank worse") {
    std::vector<double> fields_only(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto e = log.test_example(i);
      double logit = log.config().bias;
      for (std::size_t f = 0; f < log.num_fields(); ++f)
        logit += log.field_weight(f, e.field_values[f]);
      fields_only[i] = logit;
    }
    const double without_crosses = ctr::auc(fields_only, test.labels);
    INFO("AUC of the fields' true weights alone " << without_crosses);
    CHECK(without_crosses < best - 0.03);
  }
  SECTION("best_auc of a list of examples is the AUC of their true probabilities") {
    std::vector<ctr::ClickExample> some;
    for (std::uint64_t i = 0; i < 1000; ++i) some.push_back(log.test_example(i));
    CHECK(ctr::best_auc(some) == ctr::best_auc(log, 1000));
  }
}

TEST_CASE("raw ids are the whole hashes, and drift adds a session id, new at the given rate",
          "[ctr]") {
  const ctr::ClickLog hashed;
  const ctr::ClickLog raw(ctr::ClickLogConfig{.raw_ids = true});
  const ctr::ClickExample a = hashed.example(12), b = raw.example(12);
  REQUIRE(a.feature_ids.size() == b.feature_ids.size());
  bool beyond_rows = false;
  for (std::size_t i = 0; i < a.feature_ids.size(); ++i) {
    CHECK(a.feature_ids[i] == b.feature_ids[i] % hashed.table_rows());
    beyond_rows = beyond_rows || b.feature_ids[i] >= hashed.table_rows();
  }
  CHECK(beyond_rows);
  CHECK(a.label == b.label);  // the same examples, only the ids' range differs

  const ctr::ClickLog drifting(ctr::ClickLogConfig{.raw_ids = true, .fresh_id_rate = 0.25});
  CHECK(drifting.num_features() == raw.num_features() + 1);
  const ctr::ClickBatch batch = drifting.batch(0, 4000);
  std::map<std::int64_t, int> seen;
  for (std::size_t i = 0; i < batch.size(); ++i)
    ++seen[batch.ids[i * batch.num_features + batch.num_features - 1]];
  std::size_t once = 0;
  for (const auto& [id, n] : seen) once += n == 1;
  CHECK(once > 900);  // about 1000 fresh ids, each seen once
  CHECK(once < 1100);
  CHECK(seen.size() <= once + 100);                          // and at most 100 common ones
  CHECK(drifting.example(7).label == raw.example(7).label);  // no weight in the true model
  CHECK_THAT(
      invalid_argument_message([] { ctr::ClickLog(ctr::ClickLogConfig{.fresh_id_rate = 2}); }),
      Contains("fresh_id_rate"));
}

TEST_CASE("click log configurations it cannot generate from are rejected", "[ctr]") {
  using Config = ctr::ClickLogConfig;
  CHECK_THAT(invalid_argument_message([] { ctr::ClickLog(Config{.vocabulary_sizes = {}}); }),
             Contains("vocabulary_sizes is empty"));
  CHECK_THAT(invalid_argument_message([] {
               ctr::ClickLog(Config{.vocabulary_sizes = {3, 0}});
             }),
             Contains("field 1 has an empty vocabulary"));
  CHECK_THAT(invalid_argument_message([] {
               ctr::ClickLog(Config{.crosses = {{2, 2}}});
             }),
             Contains("cross 0 pairs fields 2 and 2"));
  CHECK_THAT(invalid_argument_message([] {
               ctr::ClickLog(Config{.crosses = {{0, 1}, {3, 8}}});
             }),
             Contains("cross 1 pairs fields 3 and 8") && Contains("below 8"));
  CHECK_THAT(invalid_argument_message([] { ctr::ClickLog(Config{.table_rows = 0}); }),
             Contains("table_rows is 0"));
  CHECK_THAT(invalid_argument_message([] { ctr::ClickLog(Config{.zipf_exponent = -1}); }),
             Contains("zipf_exponent"));
  CHECK_THAT(invalid_argument_message([] { ctr::ClickLog(Config{.cross_weight_stddev = -1}); }),
             Contains("standard deviations"));
  const ctr::ClickLog log;
  CHECK_THAT(invalid_argument_message([&] { log.batch(0, 3, 0); }), Contains("stride 0"));
  CHECK_THAT(invalid_argument_message([&] {
               log.true_logit({1, 2});
             }),
             Contains("got 2 field values for 8 fields"));
}

// ---------------------------------------------------------------------------------------------
// Metrics

TEST_CASE("AUC against hand-computed cases, ties counting one half", "[ctr][metrics]") {
  CHECK(ctr::auc(std::vector<double>{0.1, 0.2, 0.3, 0.4}, std::vector<int>{0, 0, 1, 1}) == 1.0);
  CHECK(ctr::auc(std::vector<double>{0.4, 0.3, 0.2, 0.1}, std::vector<int>{0, 0, 1, 1}) == 0.0);
  // sklearn's roc_auc_score example: 3 of the 4 positive-negative pairs are ordered right.
  CHECK(ctr::auc(std::vector<double>{0.1, 0.4, 0.35, 0.8}, std::vector<int>{0, 0, 1, 1}) == 0.75);
  // All scores equal: every pair is a tie.
  CHECK(ctr::auc(std::vector<float>(6, 0.3f), std::vector<float>{1, 0, 0, 1, 0, 1}) == 0.5);
  // Pairs (pos 0.5, neg 0.5) tie, the other three are right: 3.5 / 4.
  CHECK(ctr::auc(std::vector<double>{0.5, 0.5, 0.2, 0.9}, std::vector<float>{1, 0, 0, 1}) == 0.875);
  // Spans of floats work too (a Tensor's values<float>()).
  const float scores[] = {0.9f, 0.1f, 0.6f};
  const float labels[] = {1, 0, 0};
  CHECK(ctr::auc(std::span<const float>(scores), std::span<const float>(labels)) == 1.0);

  SECTION("equals the pairwise definition on random scores with many ties") {
    std::vector<double> s;
    std::vector<int> y;
    for (std::uint64_t i = 0; i < 2000; ++i) {
      const double u = ctr::uniform01(ctr::hash_of(77, i));
      s.push_back(std::round(u * 20) / 20);  // 21 distinct scores
      y.push_back(ctr::uniform01(ctr::hash_of(78, i)) < 0.3 + 0.4 * u ? 1 : 0);
    }
    CHECK_THAT(ctr::auc(s, y), WithinAbs(brute_force_auc(s, y), 1e-12));
  }
  SECTION("errors say what to pass") {
    CHECK_THAT(invalid_argument_message([] {
                 ctr::auc(std::vector<double>{0.1, 0.2}, std::vector<int>{1});
               }),
               Contains("2 predictions but 1 labels"));
    CHECK_THAT(
        invalid_argument_message([] { ctr::auc(std::vector<double>{}, std::vector<int>{}); }),
        Contains("no examples"));
    CHECK_THAT(invalid_argument_message([] {
                 ctr::auc(std::vector<double>{0.1, 0.2}, std::vector<int>{1, 1});
               }),
               Contains("all positive") && Contains("both classes"));
    CHECK_THAT(invalid_argument_message([] {
                 ctr::auc(std::vector<double>{0.1, std::nan("")}, std::vector<int>{0, 1});
               }),
               Contains("score 1 is NaN"));
  }
}

TEST_CASE("log-loss against hand values, clipped", "[ctr][metrics]") {
  // -(log 0.9 + log 0.8) / 2
  CHECK_THAT(ctr::log_loss(std::vector<double>{0.9, 0.2}, std::vector<float>{1, 0}),
             WithinRel(0.164252033486018, 1e-12));
  // Confident mistakes cost -log(1e-7) = 16.118..., not infinity; confident hits about 1e-7.
  // (1 - (1 - 1e-7) is 1e-7 only to 9 digits in double arithmetic.)
  CHECK_THAT(ctr::log_loss(std::vector<double>{0, 1}, std::vector<float>{1, 0}),
             WithinRel(16.11809565095832, 1e-9));
  CHECK_THAT(ctr::log_loss(std::vector<double>{1, 0}, std::vector<float>{1, 0}),
             WithinRel(1.00000005e-7, 1e-6));
  CHECK_THAT(ctr::log_loss(std::vector<double>{0, 1}, std::vector<float>{1, 0}, 1e-3),
             WithinRel(6.907755278982137, 1e-12));
  // Soft labels: the cross-entropy of 0.5 against 0.5 is log 2.
  CHECK_THAT(ctr::log_loss(std::vector<float>{0.5f}, std::vector<float>{0.5f}),
             WithinRel(std::log(2.0), 1e-12));
  CHECK_THAT(invalid_argument_message(
                 [] { ctr::log_loss(std::vector<double>{0.5}, std::vector<float>{1}, 0); }),
             Contains("eps"));
}

TEST_CASE("accuracy of binary scores and of class ids", "[ctr][metrics]") {
  // 0.5 is not above the threshold, so row 2 (label 1) is wrong, and so is row 3.
  CHECK(ctr::binary_accuracy(std::vector<double>{0.2, 0.7, 0.5, 0.9},
                             std::vector<float>{0, 1, 1, 0}) == 0.5);
  CHECK(ctr::binary_accuracy(std::vector<double>{0.2, 0.7, 0.5, 0.9},
                             std::vector<float>{0, 1, 1, 0}, 0.1) == 0.5);
  CHECK_THAT(ctr::accuracy(std::vector<int>{1, 2, 3}, std::vector<int>{1, 0, 3}),
             WithinRel(2.0 / 3, 1e-15));
  CHECK_THAT(invalid_argument_message([] {
               ctr::accuracy(std::vector<int>{1, 2, 3}, std::vector<int>{1});
             }),
             Contains("3 predictions but 1 labels"));
}

// ---------------------------------------------------------------------------------------------
// Sparse Fashion-MNIST

TEST_CASE("sparse image features follow their documented hashing", "[ctr][fashion_mnist]") {
  const ctr::SparseImageConfig config;  // threshold 0.1, 4 buckets, 2^17 rows
  SECTION("intensity buckets") {
    CHECK(ctr::intensity_bucket(0.0) == 0);
    CHECK(ctr::intensity_bucket(0.1) == 0);  // not above the threshold
    CHECK(ctr::intensity_bucket(0.1001) == 1);
    CHECK(ctr::intensity_bucket(0.3249) == 1);
    CHECK(ctr::intensity_bucket(0.3251) == 2);  // (0.325 - 0.1) / 0.9 * 4 = 1
    CHECK(ctr::intensity_bucket(0.99) == 4);
    CHECK(ctr::intensity_bucket(1.0) == 4);  // the top edge stays in the last bucket
    CHECK(ctr::intensity_bucket(0.5, {.threshold = 0, .buckets = 2}) == 2);
  }
  SECTION("a hand-made image") {
    std::vector<float> image(fashion_mnist::kPixels, 0.0f);
    image[0] = 1.0f;    // (0, 0) bucket 4; its right neighbour (0, 1) is below the threshold
    image[1] = 0.05f;   //
    image[27] = 0.5f;   // (0, 27) bucket 2: no right neighbour
    image[783] = 0.2f;  // (27, 27) bucket 1: no right and no lower neighbour
    // Values from an independent Python transcription of the documented hashes.
    CHECK(ctr::sparse_image_features(image) ==
          std::vector<std::int64_t>{76727, 16956, 26734, 95344, 82875, 115037});
    const std::uint64_t rows = config.table_rows;
    CHECK(ctr::sparse_image_features(image) ==
          std::vector<std::int64_t>{static_cast<std::int64_t>(ctr::hash_of(3, 0, 4) % rows),
                                    static_cast<std::int64_t>(ctr::hash_of(4, 0, 4, 0) % rows),
                                    static_cast<std::int64_t>(ctr::hash_of(5, 0, 4, 0) % rows),
                                    static_cast<std::int64_t>(ctr::hash_of(3, 27, 2) % rows),
                                    static_cast<std::int64_t>(ctr::hash_of(5, 27, 2, 0) % rows),
                                    static_cast<std::int64_t>(ctr::hash_of(3, 783, 1) % rows)});
    CHECK(ctr::sparse_image_features(image, {.neighbour_crosses = false}) ==
          std::vector<std::int64_t>{76727, 95344, 115037});
    CHECK(ctr::sparse_image_features(std::vector<float>(fashion_mnist::kPixels, 0.0f)).empty());
  }
  SECTION("errors") {
    CHECK_THAT(
        invalid_argument_message([] { ctr::sparse_image_features(std::vector<float>(100, 0.5f)); }),
        Contains("got 100 pixels") && Contains("784"));
    const std::vector<float> image(fashion_mnist::kPixels, 0.5f);
    CHECK_THAT(
        invalid_argument_message([&] { ctr::sparse_image_features(image, {.table_rows = 0}); }),
        Contains("table_rows is 0"));
    CHECK_THAT(invalid_argument_message([&] { ctr::sparse_image_features(image, {.buckets = 0}); }),
               Contains("buckets is 0"));
    CHECK_THAT(
        invalid_argument_message([&] { ctr::sparse_image_features(image, {.threshold = 1}); }),
        Contains("threshold"));
  }
}

TEST_CASE("sparse Fashion-MNIST test images: ids in range, deterministic, labels kept",
          "[ctr][fashion_mnist]") {
  const std::string dir = fashion_mnist::kDefaultDir;
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz") ||
      !std::filesystem::exists(dir + "/t10k-labels-idx1-ubyte.gz")) {
    WARN("skipped: the Fashion-MNIST test files are not in " << dir
                                                             << " (apt-get install "
                                                                "dataset-fashion-mnist)");
    return;
  }
  const auto data = fashion_mnist::load(dir, fashion_mnist::Split::test);
  const ctr::SparseImageConfig config;
  const auto images = ctr::sparse_images(data, config);
  REQUIRE(images.size() == 10000);
  std::size_t total = 0, smallest = std::numeric_limits<std::size_t>::max(), largest = 0;
  std::size_t out_of_range = 0, wrong_labels = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const auto& ids = images[i].ids;
    wrong_labels += images[i].label != data.label_ids[i];
    for (const auto id : ids)
      out_of_range += id < 0 || static_cast<std::uint64_t>(id) >= config.table_rows;
    total += ids.size();
    smallest = std::min(smallest, ids.size());
    largest = std::max(largest, ids.size());
  }
  INFO("ids per image: mean " << total / images.size() << ", " << smallest << " to " << largest);
  CHECK(out_of_range == 0);
  CHECK(wrong_labels == 0);
  CHECK(smallest > 0);
  CHECK(largest <= 3 * fashion_mnist::kPixels);
  // Pinned from an independent Python transcription of the documented features (reading the
  // same files): a change of the hashing or bucketing shows here.
  const auto sum_of = [](const std::vector<std::int64_t>& ids) {
    std::int64_t sum = 0;
    for (const auto id : ids) sum += id;
    return sum;
  };
  CHECK(images[0].label == 9);
  CHECK(images[0].ids.size() == 700);
  REQUIRE(images[0].ids.size() >= 3);
  CHECK(std::vector<std::int64_t>(images[0].ids.begin(), images[0].ids.begin() + 3) ==
        std::vector<std::int64_t>{5005, 128533, 64738});
  CHECK(sum_of(images[0].ids) == 45609378);
  CHECK(images[1].label == 2);
  CHECK(images[1].ids.size() == 1419);
  CHECK(sum_of(images[1].ids) == 92303192);

  SECTION("the same image gives the same ids, also through sparse_image") {
    for (const std::size_t i : {0, 1, 4321, 9999}) {
      CHECK(ctr::sparse_image(data, i, config).ids == images[i].ids);
      CHECK(ctr::sparse_image(data, i).ids == images[i].ids);
    }
  }
  SECTION("a smaller table keeps every id in range") {
    const ctr::SparseImageConfig small{.table_rows = 1000};
    for (const std::size_t i : {0, 1, 2, 3}) {
      const auto ids = ctr::sparse_image(data, i, small).ids;
      CHECK(ids.size() == images[i].ids.size());
      for (const auto id : ids) CHECK((id >= 0 && id < 1000));
    }
  }
  SECTION("a batch in SparseTensor layout") {
    const auto batch = ctr::sparse_image_batch(images, 10, 3, 2);  // images 10, 12, 14
    REQUIRE(batch.size() == 3);
    std::size_t k = 0;
    std::int64_t longest = 0;
    for (std::size_t row = 0; row < 3; ++row) {
      const auto& image = images[10 + 2 * row];
      CHECK(batch.labels[row] == image.label);
      longest = std::max(longest, static_cast<std::int64_t>(image.ids.size()));
      for (std::size_t j = 0; j < image.ids.size(); ++j, ++k) {
        REQUIRE(k < batch.ids.size());
        CHECK(batch.indices[2 * k] == static_cast<std::int64_t>(row));
        CHECK(batch.indices[2 * k + 1] == static_cast<std::int64_t>(j));
        CHECK(batch.ids[k] == image.ids[j]);
      }
    }
    CHECK(k == batch.ids.size());
    CHECK(batch.indices.size() == 2 * k);
    CHECK(batch.max_ids == longest);
    CHECK_THAT(invalid_argument_message([&] { ctr::sparse_image_batch(images, 9999, 2); }),
               Contains("do not fit"));
    CHECK_THAT(invalid_argument_message([&] { ctr::sparse_image_batch(images, 0, 2, 0); }),
               Contains("stride"));
    CHECK_THAT(invalid_argument_message([&] { ctr::sparse_image(data, 10000); }),
               Contains("out of range"));
  }
}
