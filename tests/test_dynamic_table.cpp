// DynamicTable (runtime/dynamic_table.hpp): one shard of a dynamic embedding table on its own,
// without a graph: rows made on first sight, deterministic initial rows, admission, eviction
// by capacity (lru, lfu) and ttl, slots, export and import, and concurrent writers while the
// table grows and evicts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "psflow/runtime/dynamic_table.hpp"

using namespace psflow;

namespace {

DynamicTableConfig config(std::size_t dim, RowInitializer init = {}) {
  DynamicTableConfig c;
  c.name = "emb/shard_0";
  c.dim = dim;
  c.initializer = init;
  return c;
}

std::vector<float> lookup(DynamicTable& table, const std::vector<std::int64_t>& keys,
                          bool insert = true) {
  std::vector<float> out(keys.size() * table.config().dim, -1.0f);
  table.lookup(keys.data(), keys.size(), out.data(), insert);
  return out;
}

// Adds the gradient rows to the values (a rule that makes every update visible).
std::size_t add(DynamicTable& table, const std::vector<std::int64_t>& keys, float delta,
                std::int64_t step = -1) {
  std::vector<float> grads(keys.size() * table.config().dim, delta);
  const std::size_t dim = table.config().dim;
  return table.apply(keys.data(), keys.size(), grads.data(), {}, step,
                     [dim](float* value, float* const*, const float* g) {
                       for (std::size_t j = 0; j < dim; ++j) value[j] += g[j];
                     });
}

std::set<std::int64_t> live_keys(const DynamicTable& table) {
  const auto rows = table.export_rows({});
  return {rows.keys.begin(), rows.keys.end()};
}

}  // namespace

TEST_CASE("a key seen for the first time gets its initial row, the same in any table and order") {
  const RowInitializer normal{RowInitializer::Kind::normal, 0.5, 2.0, 42};
  DynamicTable a(config(8, normal));
  DynamicTable b(config(8, normal));
  const std::vector<std::int64_t> keys{7, -3, std::int64_t{1} << 62, INT64_MIN, INT64_MAX, 0};
  const auto first = lookup(a, keys);
  std::vector<std::int64_t> reversed(keys.rbegin(), keys.rend());
  const auto second = lookup(b, reversed);
  for (std::size_t i = 0; i < keys.size(); ++i)
    for (std::size_t j = 0; j < 8; ++j)
      CHECK(first[i * 8 + j] == second[(keys.size() - 1 - i) * 8 + j]);
  CHECK(a.size() == keys.size());
  // Rows differ between keys and are not all equal within a row.
  CHECK(first[0] != first[8]);
  CHECK(first[0] != first[1]);
  // Another seed, other rows.
  DynamicTable c(config(8, {RowInitializer::Kind::normal, 0.5, 2.0, 43}));
  CHECK(lookup(c, {7})[0] != first[0]);
  // A second lookup reads the same row back.
  CHECK(lookup(a, keys) == first);
}

TEST_CASE("normal and uniform initial rows have the asked mean and spread") {
  DynamicTable normal(config(64, {RowInitializer::Kind::normal, 1.0, 0.5, 9}));
  DynamicTable uniform(config(64, {RowInitializer::Kind::uniform, -2.0, 2.0, 9}));
  std::vector<std::int64_t> keys(500);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<std::int64_t>(i * 7919);
  const auto n = lookup(normal, keys), u = lookup(uniform, keys);
  double mean = 0, sq = 0;
  for (float v : n) mean += v;
  mean /= static_cast<double>(n.size());
  for (float v : n) sq += (v - mean) * (v - mean);
  CHECK(mean == Approx(1.0).margin(0.02));
  CHECK(std::sqrt(sq / static_cast<double>(n.size())) == Approx(0.5).margin(0.02));
  CHECK(*std::min_element(u.begin(), u.end()) >= -2.0f);
  CHECK(*std::max_element(u.begin(), u.end()) < 2.0f);
}

TEST_CASE("a lookup without insert reads the initial row and leaves the table unchanged") {
  DynamicTable table(config(4, {RowInitializer::Kind::constant, 0.25, 0, 0}));
  lookup(table, {1});
  add(table, {1}, 1.0f);
  const auto rows = lookup(table, {1, 2}, /*insert=*/false);
  CHECK(rows == std::vector<float>{1.25f, 1.25f, 1.25f, 1.25f, 0.25f, 0.25f, 0.25f, 0.25f});
  CHECK(table.size() == 1);
  CHECK(add(table, {2}, 1.0f) == 0);  // no row: the gradient is dropped
}

TEST_CASE("min_count admits a key on its min_count-th sighting, until then zeros and no update") {
  auto c = config(2, {RowInitializer::Kind::constant, 0.5, 0, 0});
  c.min_count = 3;
  DynamicTable table(c);
  CHECK(lookup(table, {10, 11}) == std::vector<float>{0, 0, 0, 0});
  CHECK(add(table, {10}, 1.0f) == 0);
  CHECK(lookup(table, {10}) == std::vector<float>{0, 0});
  CHECK(table.size() == 0);
  CHECK(lookup(table, {10}) == std::vector<float>{0.5f, 0.5f});  // third sighting
  CHECK(table.size() == 1);
  CHECK(add(table, {10, 11}, 1.0f) == 1);
  CHECK(lookup(table, {10, 11}) == std::vector<float>{1.5f, 1.5f, 0.0f, 0.0f});  // 11: 2nd
  CHECK(lookup(table, {11}) == std::vector<float>{0.5f, 0.5f});
}

TEST_CASE("min_count below 1, dim below 1 or an integer dtype is rejected") {
  auto c = config(2);
  c.min_count = 0;
  CHECK_THROWS_AS(DynamicTable(c), InvalidArgument);
  CHECK_THROWS_AS(DynamicTable(config(0)), InvalidArgument);
  auto ints = config(2);
  ints.dtype = DType::int32;
  CHECK_THROWS_AS(DynamicTable(ints), InvalidArgument);
  DynamicTable table(config(2));
  std::vector<double> wrong(2);
  const std::int64_t key = 1;
  CHECK_THROWS_AS(table.lookup(&key, 1, wrong.data(), true), InvalidArgument);
}

TEST_CASE("over capacity, lru evicts the least recently looked-up rows") {
  auto c = config(1);
  c.capacity = 64;
  DynamicTable table(c);
  for (std::int64_t k = 0; k < 64; ++k) lookup(table, {k});
  lookup(table, {0, 1, 2, 3});  // used again: now the most recent
  lookup(table, {100});         // over capacity: down to 64 - 4 = 60
  CHECK(table.size() == 60);
  const auto live = live_keys(table);
  for (std::int64_t k : {0, 1, 2, 3, 100}) CHECK(live.count(k) == 1);
  for (std::int64_t k = 4; k < 9; ++k) CHECK(live.count(k) == 0);  // the 5 oldest went
  CHECK(live.count(9) == 1);
}

TEST_CASE("over capacity, lfu evicts the least often looked-up rows") {
  auto c = config(1);
  c.capacity = 32;
  c.eviction = EvictionPolicy::lfu;
  DynamicTable table(c);
  for (std::int64_t k = 0; k < 32; ++k) lookup(table, {k});
  for (int round = 0; round < 3; ++round)
    for (std::int64_t k = 0; k < 32; k += 2) lookup(table, {k});  // even keys: 4 lookups
  lookup(table, {1000, 1001});                                    // 34 rows: down to 30
  CHECK(table.size() == 30);
  const auto live = live_keys(table);
  for (std::int64_t k = 0; k < 32; k += 2) CHECK(live.count(k) == 1);
  CHECK(live.count(1) == 0);  // the odd keys seen once: the oldest of them went first
  CHECK(live.count(3) == 0);
  CHECK(live.count(1000) == 1);
}

TEST_CASE("a batch with more distinct keys than capacity is an error naming the table") {
  auto c = config(1);
  c.capacity = 4;
  DynamicTable table(c);
  const std::vector<std::int64_t> keys{1, 2, 3, 4, 5};
  std::vector<float> out(5);
  try {
    table.lookup(keys.data(), keys.size(), out.data(), true);
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.what(), Catch::Contains("emb/shard_0") && Catch::Contains("capacity"));
  }
  CHECK(table.size() == 0);
}

TEST_CASE("ttl_steps: evict() drops rows not updated in the last ttl_steps steps") {
  auto c = config(1);
  c.ttl_steps = 10;
  DynamicTable table(c);
  lookup(table, {1, 2, 3});
  add(table, {1, 2, 3}, 1.0f, /*step=*/5);
  add(table, {2}, 1.0f, /*step=*/12);
  add(table, {3}, 1.0f, /*step=*/20);
  CHECK(table.current_step() == 20);
  CHECK(table.evict() == 1);  // key 1: updated at 5, 15 steps ago
  CHECK(live_keys(table) == std::set<std::int64_t>{2, 3});
  // An evicted key that comes back starts again from its initial value.
  CHECK(lookup(table, {1}) == std::vector<float>{0.0f});
}

TEST_CASE("rows stay right through heavy insert and eviction churn (against a reference map)") {
  auto c = config(3);
  c.capacity = 200;
  DynamicTable table(c);
  std::map<std::int64_t, float> updates;  // key -> sum of updates while live
  std::mt19937_64 rng(5);
  for (int step = 0; step < 400; ++step) {
    std::set<std::int64_t> batch;
    while (batch.size() < 20) batch.insert(static_cast<std::int64_t>(rng() % 1000) - 500);
    std::vector<std::int64_t> keys(batch.begin(), batch.end());
    const auto live_before = live_keys(table);
    const auto rows = lookup(table, keys);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const float expected = live_before.count(keys[i]) ? updates[keys[i]] : 0.0f;
      REQUIRE(rows[i * 3] == expected);
      REQUIRE(rows[i * 3 + 2] == expected);
    }
    const auto live = live_keys(table);
    REQUIRE(live.size() == table.size());
    REQUIRE(table.size() <= 200);
    for (auto it = updates.begin(); it != updates.end();)
      it = live.count(it->first) ? std::next(it) : updates.erase(it);
    add(table, keys, 1.0f);
    for (auto k : keys)
      if (live.count(k)) updates[k] += 1.0f;
  }
}

TEST_CASE("slots live in each row, and export and import carry keys, rows, slots and steps") {
  DynamicTable table(config(2, {RowInitializer::Kind::constant, 1.0, 0, 0}));
  lookup(table, {5, -6});
  const std::vector<RowSlot> slots{{"Adagrad/accumulator", 0.1}};
  std::vector<float> grads{1, 2, 3, 4};
  const std::vector<std::int64_t> keys{5, -6};
  table.apply(keys.data(), 2, grads.data(), slots, 7,
              [](float* value, float* const* slot, const float* g) {
                for (int j = 0; j < 2; ++j) {
                  slot[0][j] += g[j] * g[j];
                  value[j] -= g[j];
                }
              });
  auto rows = table.export_rows({{"Adagrad/accumulator", 0.1}, {"Momentum/momentum", 0.0}});
  REQUIRE(rows.keys.size() == 2);
  const std::size_t i5 = rows.keys[0] == 5 ? 0 : 1;
  CHECK(rows.values.data<float>()[i5 * 2] == 0.0f);
  CHECK(rows.slots[0].data<float>()[i5 * 2 + 1] == Approx(4.1f));
  CHECK(rows.slots[1].data<float>()[i5 * 2] == 0.0f);  // a slot the rows lack: its initial value
  CHECK(rows.steps[i5] == 7);

  DynamicTable copy(config(2));
  copy.import_rows(rows, {{"Adagrad/accumulator", 0.1}, {"Momentum/momentum", 0.0}});
  CHECK(copy.size() == 2);
  CHECK(copy.current_step() == 7);
  const auto again = copy.export_rows({{"Adagrad/accumulator", 0.1}});
  const std::size_t j5 = again.keys[0] == 5 ? 0 : 1;
  CHECK(again.slots[0].data<float>()[j5 * 2 + 1] == Approx(4.1f));
  CHECK(again.values.data<float>()[j5 * 2 + 1] == -1.0f);

  DynamicTable wrong_dim(config(3));
  CHECK_THROWS_AS(
      wrong_dim.import_rows(rows, {{"Adagrad/accumulator", 0.1}, {"Momentum/momentum", 0.0}}),
      InvalidArgument);
  rows.keys[1] = rows.keys[0];
  CHECK_THROWS_AS(
      copy.import_rows(rows, {{"Adagrad/accumulator", 0.1}, {"Momentum/momentum", 0.0}}),
      InvalidArgument);
  CHECK(copy.size() == 2);  // unchanged by the failed import
}

TEST_CASE("admission counts survive export and merge") {
  auto c = config(1);
  c.min_count = 2;
  DynamicTable table(c);
  lookup(table, {77});
  DynamicTable restored(c);
  const auto counts = table.admission_counts();
  restored.merge_admission(counts.data(), counts.size());
  lookup(restored, {77});  // the second sighting, counted across the restore
  CHECK(restored.size() == 1);
}

TEST_CASE("4 writers look up and update one table while it grows and evicts: no lost update") {
  auto c = config(4);
  c.capacity = 4096;
  c.eviction = EvictionPolicy::lfu;
  DynamicTable table(c);
  constexpr int kThreads = 4, kSteps = 300, kHot = 64, kCold = 32;
  std::vector<std::int64_t> hot(kHot);
  for (int i = 0; i < kHot; ++i) hot[static_cast<std::size_t>(i)] = (std::int64_t{i} << 40) - 3;
  std::vector<std::vector<std::int64_t>> cold_seen(kThreads);
  std::vector<std::size_t> hot_updates(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int step = 0; step < kSteps; ++step) {
        // Every step: the hot keys and 32 keys this thread alone sees once (10 times the
        // capacity stream through), so the table keeps growing and evicting.
        std::vector<std::int64_t> keys = hot;
        for (int j = 0; j < kCold; ++j)
          keys.push_back(static_cast<std::int64_t>(((t * kSteps + step) * kCold + j)) * 977 + 1);
        lookup(table, keys);
        hot_updates[static_cast<std::size_t>(t)] += add(table, hot, 1.0f);
        std::vector<std::int64_t> cold(keys.begin() + kHot, keys.end());
        add(table, cold, 1.0f);
        cold_seen[static_cast<std::size_t>(t)].insert(cold_seen[static_cast<std::size_t>(t)].end(),
                                                      cold.begin(), cold.end());
      }
    });
  for (auto& th : threads) th.join();
  // Hot keys are looked up every step, so lfu never evicts them: every update is there.
  std::size_t applied = 0;
  for (auto n : hot_updates) applied += n;
  CHECK(applied == std::size_t{kThreads} * kSteps * kHot);
  const auto rows = lookup(table, hot, /*insert=*/false);
  for (std::size_t i = 0; i < rows.size(); ++i)
    REQUIRE(rows[i] == static_cast<float>(kThreads * kSteps));
  // Cold keys got one update each: a live one holds exactly it, never a torn or foreign row.
  const auto all = table.export_rows({});
  std::set<std::int64_t> hot_set(hot.begin(), hot.end());
  for (std::size_t i = 0; i < all.keys.size(); ++i) {
    if (hot_set.count(all.keys[i])) continue;
    for (std::size_t j = 0; j < 4; ++j) REQUIRE(all.values.data<float>()[i * 4 + j] == 1.0f);
  }
  CHECK(table.size() <= 4096 + kThreads * (kHot + kCold));
  CHECK(table.size() >= 4096 - 4096 / 16 - kThreads * (kHot + kCold));
}
