// DynamicTable: one shard of a dynamic embedding table, kept on the ps task that holds it: a
// hash table from any int64 key to a row of `dim` values and the row's optimizer slots, which
// grows when new keys arrive and shrinks when rows are evicted.
//
// Layout. The keys are spread over kStripes stripes by a fixed hash; each stripe has its own
// mutex, an open-addressing index (key -> row number, linear probing, at most 3/4 full) and its
// rows in chunks of kChunkRows that never move when the stripe grows (from the table's
// ChunkPool: 2 MiB blocks on transparent huge pages, runtime/chunk_pool.hpp). A row holds its key,
// the step it was last updated at, when it was last looked up and how often (for eviction), its
// values and then each slot's values, side by side, so evicting a row drops its slots with it.
//
// Locking (the one design for sparse state, docs/architecture.md):
//   - a batch is grouped by stripe and each stripe is locked once for its keys, one stripe at a
//     time: batches of different keys proceed in parallel, and no lock is held across a batch;
//   - growth (a stripe's index doubling, a new chunk) happens under that stripe's lock only, and
//     rows never move between chunks, so a reader never sees a torn or half-moved row;
//   - a layout lock (shared by every lookup and update, exclusive when the slots change or a
//     checkpoint is imported) guards the row format;
//   - eviction collects its victims stripe by stripe, then removes each one only if it was not
//     used since (at most one eviction pass runs at a time; others skip it);
//   - the admission sketch is lock-free (runtime/count_min_sketch.hpp).
// Updates therefore always hold the row's stripe lock: a dynamic table is never updated
// lock-free, whatever the optimizer's use_locking says, since a concurrent insert can move the
// index under a lock-free writer.
//
// Admission (min_count > 1): a key's row is made on its min_count-th sighting, counted by a
// count-min sketch; until then a lookup reads zeros and its gradient is dropped. Eviction: over
// `capacity` rows, the least recently (lru) or least frequently (lfu, ties by recency) looked-up
// rows go, down to capacity - capacity / 16 so that the scan runs once per capacity / 16 new
// rows; ttl_steps > 0: evict() drops rows not updated in the last ttl_steps steps. A key that
// comes back after eviction starts again from its initial value.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "psflow/core/counter_random.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/runtime/chunk_pool.hpp"
#include "psflow/runtime/count_min_sketch.hpp"

namespace psflow {

enum class EvictionPolicy { lru, lfu };

// The initial row of a key, a function of (seed, key) only: the same on any shard, in any
// order, in any process.
struct RowInitializer {
  enum class Kind { constant, uniform, normal };
  Kind kind = Kind::constant;
  double a = 0;  // constant: the value; uniform: the low end; normal: the mean
  double b = 0;  // uniform: the high end (excluded); normal: the standard deviation
  std::uint64_t seed = 0;

  template <class T>
  void fill(std::int64_t key, T* row, std::size_t dim) const {
    const std::uint64_t stream = detail::splitmix64_at(seed, static_cast<std::uint64_t>(key));
    for (std::size_t j = 0; j < dim; ++j) {
      switch (kind) {
        case Kind::constant:
          row[j] = static_cast<T>(a);
          break;
        case Kind::uniform: {
          row[j] =
              static_cast<T>(a + (b - a) * detail::unit_uniform(detail::splitmix64_at(stream, j)));
          if (row[j] >= static_cast<T>(b)) row[j] = std::nextafter(static_cast<T>(b), T(a));
          break;
        }
        case Kind::normal:
          row[j] = static_cast<T>(a + b * detail::standard_normal_at(stream, j));
          break;
      }
    }
  }
};

struct DynamicTableConfig {
  std::string name;  // the shard's name, for errors
  DType dtype = DType::float32;
  std::size_t dim = 1;
  std::size_t capacity = 0;  // rows; 0: unbounded
  EvictionPolicy eviction = EvictionPolicy::lru;
  std::int64_t min_count = 1;
  std::int64_t ttl_steps = 0;
  RowInitializer initializer;
};

// An optimizer slot kept in every row, e.g. {"Adagrad/accumulator", 0.1}.
struct RowSlot {
  std::string name;
  double initial = 0;
};

// The live rows of a table, row i of every tensor belonging to keys[i].
struct DynamicTableRows {
  std::vector<std::int64_t> keys;
  Tensor values;                          // [n, dim]
  std::vector<Tensor> slots;              // [n, dim] each, in the order asked for
  std::vector<std::int64_t> steps;        // when each row was last updated
  std::vector<std::int64_t> frequencies;  // how often each row was looked up
};

class DynamicTable {
 public:
  static constexpr std::size_t kStripes = 32;
  static constexpr std::size_t kChunkRows = 128;

  // Throws InvalidArgument for a dtype other than float32/float64, dim < 1 or min_count < 1.
  explicit DynamicTable(DynamicTableConfig config) : config_(std::move(config)) {
    if (config_.dtype != DType::float32 && config_.dtype != DType::float64)
      throw InvalidArgument("dynamic table '" + config_.name + "': dtype must be float32 or " +
                            "float64, got " + std::string(dtype_name(config_.dtype)));
    if (config_.dim < 1)
      throw InvalidArgument("dynamic table '" + config_.name + "': dim must be at least 1");
    if (config_.min_count < 1)
      throw InvalidArgument("dynamic table '" + config_.name + "': min_count must be at least 1, " +
                            "got " + std::to_string(config_.min_count));
    if (config_.min_count > 1) sketch_ = std::make_unique<CountMinSketch>();
    set_layout_locked({});
  }

  DynamicTable(const DynamicTable&) = delete;
  DynamicTable& operator=(const DynamicTable&) = delete;

  const DynamicTableConfig& config() const noexcept { return config_; }
  const std::string& name() const noexcept { return config_.name; }

  // Live rows.
  std::size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }
  // The newest step an update carried (or counted, see apply).
  std::int64_t current_step() const noexcept {
    return current_step_.load(std::memory_order_relaxed);
  }
  // The slots every row has now, in row order.
  std::vector<RowSlot> slots() const {
    std::shared_lock layout(layout_mutex_);
    return slots_;
  }

  // The rows of the `n` distinct keys into out (n * dim values of T, the table's dtype). A live
  // row is copied (and counted as used). A missing key, with `insert`: counted by the admission
  // sketch, and once admitted given its initial row (which is returned), else zeros; without
  // `insert`: its initial row is returned and the table is left unchanged. Over capacity after
  // the inserts, rows are evicted (see the file comment). Throws InvalidArgument for another
  // dtype, or when capacity is below n (the batch could not fit).
  template <class T>
  void lookup(const std::int64_t* keys, std::size_t n, T* out, bool insert) {
    check_dtype<T>("lookup");
    if (insert && config_.capacity > 0 && n > config_.capacity)
      throw InvalidArgument("dynamic table '" + config_.name + "': a batch looks up " +
                            std::to_string(n) + " distinct keys on this shard, more than its " +
                            "capacity of " + std::to_string(config_.capacity) +
                            " rows: raise capacity (or num_shards), or use smaller batches");
    const std::size_t dim = config_.dim;
    {
      std::shared_lock layout(layout_mutex_);
      const std::uint64_t tick = tick_.fetch_add(1, std::memory_order_relaxed) + 1;
      for_each_key(keys, n, [&](Stripe& stripe, std::size_t i, std::size_t row, std::uint64_t h) {
        const std::int64_t key = keys[i];
        T* dst = out + i * dim;
        if (row == kNoRow) row = stripe.find(key, h);  // a key given twice, inserted since
        if (row == kNoRow) {
          if (!insert) {
            config_.initializer.fill(key, dst, dim);
            return;
          }
          if (sketch_ && sketch_->add(key) < static_cast<std::uint64_t>(config_.min_count)) {
            std::fill(dst, dst + dim, T(0));
            return;
          }
          row = insert_row<T>(stripe, key);
          stripe.meta(row, stride_).tick = tick;
        } else if (insert) {
          RowMeta& meta = stripe.meta(row, stride_);
          meta.tick = tick;
          if (meta.frequency < UINT32_MAX) ++meta.frequency;
        }
        const T* src = row_values<T>(stripe, row);
        std::copy(src, src + dim, dst);
      });
    }
    if (insert && config_.capacity > 0 && size() > config_.capacity) evict_over_capacity();
  }

  // Applies rule(value, slots, grad) to the row of each of the `n` distinct keys: value and
  // grad point at dim values, slots at one pointer per slot of `wanted` (in that order), each
  // at dim values. Keys without a row (not admitted yet, or evicted since their lookup) are
  // skipped: their gradient is dropped. Slots of `wanted` the rows lack are added first, set to
  // their initial value in every row. `step` >= 0 is the global step of this update; < 0 counts
  // this table's updates instead. Returns how many rows were updated.
  template <class T, class Rule>
  std::size_t apply(const std::int64_t* keys, std::size_t n, const T* grads,
                    const std::vector<RowSlot>& wanted, std::int64_t step, Rule&& rule) {
    check_dtype<T>("update");
    ensure_slots(wanted);
    const std::int64_t at = step >= 0 ? step : own_steps_.fetch_add(1) + 1;
    std::int64_t seen = current_step_.load(std::memory_order_relaxed);
    while (at > seen && !current_step_.compare_exchange_weak(seen, at)) {
    }
    const std::size_t dim = config_.dim;
    std::size_t updated = 0;
    std::shared_lock layout(layout_mutex_);
    std::vector<std::size_t> slot_index;
    for (const auto& s : wanted) slot_index.push_back(slot_position(s.name));
    std::vector<T*> slot_ptrs(wanted.size());
    for_each_key(keys, n, [&](Stripe& stripe, std::size_t i, std::size_t row, std::uint64_t) {
      if (row == kNoRow) return;
      T* value = row_values<T>(stripe, row);
      for (std::size_t s = 0; s < slot_index.size(); ++s)
        slot_ptrs[s] = value + (1 + slot_index[s]) * dim;
      rule(value, slot_ptrs.data(), grads + i * dim);
      stripe.meta(row, stride_).step = at;
      ++updated;
    });
    return updated;
  }

  // Applies ttl_steps and capacity now; returns how many rows went.
  std::size_t evict() {
    std::size_t evicted = 0;
    if (config_.ttl_steps > 0) {
      const std::int64_t cutoff = current_step() - config_.ttl_steps;
      std::shared_lock layout(layout_mutex_);
      for (auto& stripe : stripes_) {
        std::lock_guard lock(stripe.mutex);
        for (std::size_t row = stripe.rows; row-- > 0;) {
          if (stripe.meta(row, stride_).step > cutoff) continue;
          remove_row(stripe, row);
          ++evicted;
        }
      }
    }
    if (config_.capacity > 0 && size() > config_.capacity) evicted += evict_over_capacity();
    return evicted;
  }

  // Drops every row and the admission counts (the table's initializer).
  void clear() {
    std::unique_lock layout(layout_mutex_);
    for (auto& stripe : stripes_) {
      std::lock_guard lock(stripe.mutex);
      stripe.reset(*pool_);
    }
    size_.store(0);
    if (sketch_) sketch_->clear();
  }

  // The live rows with the slots `wanted` (a slot the rows lack reads as its initial value).
  DynamicTableRows export_rows(const std::vector<RowSlot>& wanted) const {
    std::shared_lock layout(layout_mutex_);
    std::vector<std::size_t> position;
    for (const auto& s : wanted) position.push_back(find_slot(s.name));
    DynamicTableRows out;
    const std::size_t total = size();
    out.keys.reserve(total);
    std::vector<std::vector<std::byte>> parts(1 + wanted.size());
    const std::size_t dim = config_.dim, elem = dtype_size(config_.dtype);
    for (const auto& stripe : stripes_) {
      std::lock_guard lock(stripe.mutex);
      for (std::size_t row = 0; row < stripe.rows; ++row) {
        const RowMeta& meta = stripe.meta(row, stride_);
        out.keys.push_back(meta.key);
        out.steps.push_back(meta.step);
        out.frequencies.push_back(static_cast<std::int64_t>(meta.frequency));
        const std::byte* values = stripe.row(row, stride_) + sizeof(RowMeta);
        append(parts[0], values, dim * elem);
        for (std::size_t s = 0; s < wanted.size(); ++s) {
          if (position[s] != kNoRow) {
            append(parts[1 + s], values + (1 + position[s]) * dim * elem, dim * elem);
          } else {
            const std::size_t at = parts[1 + s].size();
            parts[1 + s].resize(at + dim * elem);
            fill_constant(parts[1 + s].data() + at, dim, wanted[s].initial);
          }
        }
      }
    }
    const Shape shape{out.keys.size(), dim};
    auto to_tensor = [&](const std::vector<std::byte>& bytes) {
      Tensor t = Tensor::uninitialized(config_.dtype, shape);
      if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
      return t;
    };
    out.values = to_tensor(parts[0]);
    for (std::size_t s = 0; s < wanted.size(); ++s) out.slots.push_back(to_tensor(parts[1 + s]));
    return out;
  }

  // Replaces every row with `rows` (slots named by `slots`, whose rows must match; other slots
  // the rows have keep their initial value). Throws InvalidArgument for a dtype or dim that
  // differs from the table's, sizes that disagree, or a key given twice; the table is unchanged
  // then.
  void import_rows(const DynamicTableRows& rows, const std::vector<RowSlot>& slots) {
    const std::size_t n = rows.keys.size();
    auto expect = [&](const Tensor& t, const std::string& what) {
      if (t.dtype() != config_.dtype || t.shape() != Shape{n, config_.dim})
        throw InvalidArgument("dynamic table '" + config_.name + "': restored " + what + " are " +
                              t.summary() + ", the table needs " +
                              std::string(dtype_name(config_.dtype)) + "[" + std::to_string(n) +
                              "," + std::to_string(config_.dim) + "] (dim " +
                              std::to_string(config_.dim) + ")");
    };
    expect(rows.values, "values");
    if (rows.slots.size() != slots.size())
      throw InvalidArgument("dynamic table '" + config_.name +
                            "': " + std::to_string(rows.slots.size()) + " slot tensors for " +
                            std::to_string(slots.size()) + " slots");
    for (std::size_t s = 0; s < slots.size(); ++s) expect(rows.slots[s], "slot " + slots[s].name);
    if ((!rows.steps.empty() && rows.steps.size() != n) ||
        (!rows.frequencies.empty() && rows.frequencies.size() != n))
      throw InvalidArgument("dynamic table '" + config_.name +
                            "': restored row steps or frequencies do not match the keys");
    {
      std::vector<std::int64_t> sorted = rows.keys;
      std::sort(sorted.begin(), sorted.end());
      if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end())
        throw InvalidArgument("dynamic table '" + config_.name + "': the restored rows hold key " +
                              std::to_string(*twice) + " twice");
    }
    ensure_slots(slots);
    std::unique_lock layout(layout_mutex_);
    for (auto& stripe : stripes_) stripe.reset(*pool_);
    size_.store(0);
    std::vector<std::size_t> position;
    for (const auto& s : slots) position.push_back(slot_position(s.name));
    const std::size_t dim = config_.dim, elem = dtype_size(config_.dtype);
    const auto* values = static_cast<const std::byte*>(rows.values.raw_data());
    std::int64_t newest = current_step();
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t key = rows.keys[i];
      Stripe& stripe = stripe_of(hash(key));
      const std::size_t row = append_row(stripe, key);
      std::byte* dst = stripe.row(row, stride_) + sizeof(RowMeta);
      std::memcpy(dst, values + i * dim * elem, dim * elem);
      for (std::size_t s = 0; s < slots.size(); ++s)
        std::memcpy(dst + (1 + position[s]) * dim * elem,
                    static_cast<const std::byte*>(rows.slots[s].raw_data()) + i * dim * elem,
                    dim * elem);
      RowMeta& meta = stripe.meta(row, stride_);
      if (!rows.steps.empty()) meta.step = rows.steps[i];
      if (!rows.frequencies.empty())
        meta.frequency = static_cast<std::uint32_t>(std::max<std::int64_t>(rows.frequencies[i], 0));
      newest = std::max(newest, meta.step);
    }
    current_step_.store(newest);
  }

  // The admission counts (empty when min_count is 1), to save them; merge_admission adds saved
  // ones (several shards' counts may be merged, see CountMinSketch::merge).
  std::vector<std::uint32_t> admission_counts() const {
    return sketch_ ? sketch_->counters() : std::vector<std::uint32_t>{};
  }
  void merge_admission(const std::uint32_t* counts, std::size_t n) {
    if (sketch_ && n > 0) sketch_->merge(counts, n);
  }

  // Bytes held: rows (with their slots and bookkeeping), indexes and the admission sketch.
  std::size_t memory_bytes() const {
    std::shared_lock layout(layout_mutex_);
    std::size_t bytes = sketch_ ? sketch_->depth() * sketch_->width() * 4 : 0;
    for (const auto& stripe : stripes_) {
      std::lock_guard lock(stripe.mutex);
      bytes += stripe.index.capacity() * sizeof(Bucket);
    }
    return bytes + pool_->bytes();
  }

  // The fixed 64-bit hash that spreads keys over stripes (and, graph side, over shards).
  static std::uint64_t hash(std::int64_t key) { return detail::key_hash(key); }

 private:
  static constexpr std::size_t kNoRow = static_cast<std::size_t>(-1);

  struct RowMeta {
    std::int64_t key;
    std::int64_t step;        // last update
    std::uint64_t tick;       // last lookup
    std::uint32_t frequency;  // lookups
    std::uint32_t unused;
  };

  // A key and its row side by side, so a probe touches one cache line.
  struct Bucket {
    std::int64_t key;
    std::uint32_t row;  // row + 1; 0: an empty bucket
  };

  struct Stripe {
    mutable std::mutex mutex;
    std::vector<Bucket> index;
    std::size_t rows = 0;
    std::vector<std::byte*> chunks;  // from the table's pool_

    std::byte* row(std::size_t r, std::size_t stride) const {
      return chunks[r / kChunkRows] + (r % kChunkRows) * stride;
    }
    RowMeta& meta(std::size_t r, std::size_t stride) const {
      return *reinterpret_cast<RowMeta*>(row(r, stride));
    }
    static std::size_t home(std::uint64_t h, std::size_t mask) { return (h >> 8) & mask; }
    void prefetch(std::uint64_t h) const {
      if (!index.empty()) __builtin_prefetch(&index[home(h, index.size() - 1)]);
    }
    std::size_t find(std::int64_t key, std::uint64_t h) const {
      if (index.empty()) return kNoRow;
      const std::size_t mask = index.size() - 1;
      for (std::size_t b = home(h, mask);; b = (b + 1) & mask) {
        if (index[b].row == 0) return kNoRow;
        if (index[b].key == key) return index[b].row - 1;
      }
    }
    std::size_t bucket_of(std::int64_t key) const {
      const std::size_t mask = index.size() - 1;
      for (std::size_t b = home(hash(key), mask);; b = (b + 1) & mask)
        if (index[b].row != 0 && index[b].key == key) return b;
    }
    void index_insert(std::int64_t key, std::size_t r) {
      if ((rows + 1) * 4 > index.size() * 3) grow_index();
      const std::size_t mask = index.size() - 1;
      std::size_t b = home(hash(key), mask);
      while (index[b].row != 0) b = (b + 1) & mask;
      index[b] = {key, static_cast<std::uint32_t>(r + 1)};
    }
    void grow_index() {
      std::vector<Bucket> old(std::max<std::size_t>(16, index.size() * 2), Bucket{0, 0});
      old.swap(index);
      const std::size_t mask = index.size() - 1;
      for (const Bucket& bucket : old) {
        if (bucket.row == 0) continue;
        std::size_t to = home(hash(bucket.key), mask);
        while (index[to].row != 0) to = (to + 1) & mask;
        index[to] = bucket;
      }
    }
    // Empties bucket b, shifting later buckets of the probe run back (no tombstones).
    void index_erase(std::size_t b) {
      const std::size_t mask = index.size() - 1;
      std::size_t hole = b;
      for (std::size_t next = (b + 1) & mask; index[next].row != 0; next = (next + 1) & mask) {
        const std::size_t want = home(hash(index[next].key), mask);
        // Move `next` into the hole unless its home lies cyclically in (hole, next].
        const bool stays =
            hole <= next ? (hole < want && want <= next) : (hole < want || want <= next);
        if (stays) continue;
        index[hole] = index[next];
        hole = next;
      }
      index[hole].row = 0;
    }
    void reset(ChunkPool& pool) {
      index.clear();
      index.shrink_to_fit();
      for (std::byte* chunk : chunks) pool.release(chunk);
      chunks.clear();
      rows = 0;
    }
  };

  template <class T>
  void check_dtype(const char* what) const {
    if (dtype_of<T>() != config_.dtype)
      throw InvalidArgument("dynamic table '" + config_.name + "' holds " +
                            std::string(dtype_name(config_.dtype)) + " rows; a " + what + " of " +
                            std::string(dtype_name(dtype_of<T>())) + " rows was asked");
  }

  Stripe& stripe_of(std::uint64_t h) { return stripes_[h % kStripes]; }

  // Calls fn(stripe, i, row, hash) for each of keys[0..n), grouped by stripe, each stripe
  // locked once for its keys (one stripe at a time): row is keys[i]'s row in `stripe` as found
  // before fn's first call for that stripe (kNoRow when absent), hash its hash. A stripe's index
  // buckets, then its rows, are prefetched for the whole group first: a batch's keys hit random
  // places of a large table, and waiting for each miss in turn would dominate.
  template <class Fn>
  void for_each_key(const std::int64_t* keys, std::size_t n, Fn&& fn) {
    std::array<std::size_t, kStripes + 1> start{};
    std::vector<std::uint8_t> stripe_at(n);
    std::vector<std::uint64_t> hashes(n);
    for (std::size_t i = 0; i < n; ++i) {
      hashes[i] = hash(keys[i]);
      stripe_at[i] = static_cast<std::uint8_t>(hashes[i] % kStripes);
      ++start[stripe_at[i] + 1];
    }
    for (std::size_t s = 0; s < kStripes; ++s) start[s + 1] += start[s];
    std::vector<std::size_t> order(n), found(n);
    std::array<std::size_t, kStripes> fill{};
    for (std::size_t i = 0; i < n; ++i) order[start[stripe_at[i]] + fill[stripe_at[i]]++] = i;
    for (std::size_t s = 0; s < kStripes; ++s) {
      if (start[s + 1] == start[s]) continue;
      Stripe& stripe = stripes_[s];
      std::lock_guard lock(stripe.mutex);
      for (std::size_t q = start[s]; q < start[s + 1]; ++q) stripe.prefetch(hashes[order[q]]);
      for (std::size_t q = start[s]; q < start[s + 1]; ++q) {
        const std::size_t i = order[q];
        found[i] = stripe.find(keys[i], hashes[i]);
        if (found[i] != kNoRow) __builtin_prefetch(stripe.row(found[i], stride_));
      }
      for (std::size_t q = start[s]; q < start[s + 1]; ++q)
        fn(stripe, order[q], found[order[q]], hashes[order[q]]);
    }
  }

  template <class T>
  T* row_values(const Stripe& stripe, std::size_t row) const {
    return reinterpret_cast<T*>(stripe.row(row, stride_) + sizeof(RowMeta));
  }

  // A new row for `key` at the end of the stripe, its bookkeeping set, values unset.
  std::size_t append_row(Stripe& stripe, std::int64_t key) {
    const std::size_t row = stripe.rows;
    if (row / kChunkRows >= stripe.chunks.size())
      stripe.chunks.push_back(pool_->allocate());  // rows written on use
    stripe.index_insert(key, row);
    ++stripe.rows;
    size_.fetch_add(1, std::memory_order_relaxed);
    RowMeta& meta = stripe.meta(row, stride_);
    meta = RowMeta{key, current_step(), tick_.load(std::memory_order_relaxed), 1, 0};
    return row;
  }

  // A new row for `key` with its initial values and slots.
  template <class T>
  std::size_t insert_row(Stripe& stripe, std::int64_t key) {
    const std::size_t row = append_row(stripe, key);
    T* values = row_values<T>(stripe, row);
    config_.initializer.fill(key, values, config_.dim);
    for (std::size_t s = 0; s < slots_.size(); ++s)
      std::fill(values + (1 + s) * config_.dim, values + (2 + s) * config_.dim,
                static_cast<T>(slots_[s].initial));
    return row;
  }

  // Removes row `row` (the stripe's last row takes its place).
  void remove_row(Stripe& stripe, std::size_t row) {
    const std::int64_t key = stripe.meta(row, stride_).key;
    stripe.index_erase(stripe.bucket_of(key));
    const std::size_t last = stripe.rows - 1;
    if (row != last) {
      std::memcpy(stripe.row(row, stride_), stripe.row(last, stride_), stride_);
      stripe.index[stripe.bucket_of(stripe.meta(row, stride_).key)].row =
          static_cast<std::uint32_t>(row + 1);
    }
    --stripe.rows;
    size_.fetch_sub(1, std::memory_order_relaxed);
    // Keep one spare chunk at most, so memory follows the live rows under eviction.
    while (stripe.chunks.size() > stripe.rows / kChunkRows + 2) {
      pool_->release(stripe.chunks.back());
      stripe.chunks.pop_back();
    }
  }

  // Evicts down to capacity - capacity / 16; returns how many rows went.
  std::size_t evict_over_capacity() {
    std::unique_lock<std::mutex> single(eviction_mutex_, std::try_to_lock);
    if (!single.owns_lock()) return 0;  // another pass is at it
    const std::size_t capacity = config_.capacity;
    const std::size_t target = capacity - capacity / 16;
    const std::size_t live = size();
    if (live <= target) return 0;
    const std::size_t excess = live - target;
    // The `excess` rows with the lowest score, by a bounded max-heap over every stripe.
    struct Victim {
      std::uint64_t primary, secondary;
      std::int64_t key;
      std::size_t stripe;
      bool operator<(const Victim& o) const {
        return primary != o.primary ? primary < o.primary : secondary < o.secondary;
      }
    };
    std::shared_lock layout(layout_mutex_);
    std::priority_queue<Victim> heap;
    const bool lfu = config_.eviction == EvictionPolicy::lfu;
    for (std::size_t s = 0; s < kStripes; ++s) {
      const Stripe& stripe = stripes_[s];
      std::lock_guard lock(stripe.mutex);
      for (std::size_t row = 0; row < stripe.rows; ++row) {
        const RowMeta& meta = stripe.meta(row, stride_);
        const Victim v{lfu ? meta.frequency : meta.tick, lfu ? meta.tick : 0, meta.key, s};
        if (heap.size() < excess) {
          heap.push(v);
        } else if (v < heap.top()) {
          heap.pop();
          heap.push(v);
        }
      }
    }
    std::size_t evicted = 0;
    std::vector<std::vector<Victim>> by_stripe(kStripes);
    for (; !heap.empty(); heap.pop()) by_stripe[heap.top().stripe].push_back(heap.top());
    for (std::size_t s = 0; s < kStripes; ++s) {
      if (by_stripe[s].empty()) continue;
      Stripe& stripe = stripes_[s];
      std::lock_guard lock(stripe.mutex);
      for (const Victim& v : by_stripe[s]) {
        const std::size_t row = stripe.find(v.key, hash(v.key));
        if (row == kNoRow) continue;
        const RowMeta& meta = stripe.meta(row, stride_);
        if (meta.tick != (lfu ? v.secondary : v.primary)) continue;  // used since: keep it
        remove_row(stripe, row);
        ++evicted;
      }
    }
    return evicted;
  }

  std::size_t find_slot(const std::string& name) const {
    for (std::size_t s = 0; s < slots_.size(); ++s)
      if (slots_[s].name == name) return s;
    return kNoRow;
  }
  std::size_t slot_position(const std::string& name) const {
    const std::size_t s = find_slot(name);
    if (s == kNoRow) throw Internal("dynamic table '" + config_.name + "' has no slot " + name);
    return s;
  }

  // Adds the slots of `wanted` that rows lack (every row gets their initial value).
  void ensure_slots(const std::vector<RowSlot>& wanted) {
    {
      std::shared_lock layout(layout_mutex_);
      if (std::all_of(wanted.begin(), wanted.end(),
                      [&](const RowSlot& s) { return find_slot(s.name) != kNoRow; }))
        return;
    }
    std::unique_lock layout(layout_mutex_);
    std::vector<RowSlot> slots = slots_;
    for (const auto& s : wanted)
      if (find_slot(s.name) == kNoRow) slots.push_back(s);
    if (slots.size() == slots_.size()) return;
    const std::size_t old_stride = stride_;
    const std::size_t old_slots = slots_.size();
    std::unique_ptr<ChunkPool> old_pool = set_layout_locked(slots);  // rows copied out of it
    const std::size_t dim = config_.dim, elem = dtype_size(config_.dtype);
    for (auto& stripe : stripes_) {
      std::lock_guard lock(stripe.mutex);
      std::vector<std::byte*> chunks;
      for (std::size_t c = 0; c < stripe.chunks.size(); ++c) chunks.push_back(pool_->allocate());
      for (std::size_t row = 0; row < stripe.rows; ++row) {
        const std::byte* from = stripe.chunks[row / kChunkRows] + (row % kChunkRows) * old_stride;
        std::byte* to = chunks[row / kChunkRows] + (row % kChunkRows) * stride_;
        std::memcpy(to, from, old_stride);
        std::byte* values = to + sizeof(RowMeta);
        for (std::size_t s = old_slots; s < slots_.size(); ++s)
          fill_constant(values + (1 + s) * dim * elem, dim, slots_[s].initial);
      }
      stripe.chunks = std::move(chunks);
    }
  }

  // Sets the row format and a pool of chunks of its rows; returns the old pool.
  std::unique_ptr<ChunkPool> set_layout_locked(std::vector<RowSlot> slots) {
    slots_ = std::move(slots);
    const std::size_t bytes =
        sizeof(RowMeta) + (1 + slots_.size()) * config_.dim * dtype_size(config_.dtype);
    stride_ = (bytes + 7) / 8 * 8;
    return std::exchange(pool_, std::make_unique<ChunkPool>(kChunkRows * stride_));
  }

  void fill_constant(std::byte* at, std::size_t n, double value) const {
    if (config_.dtype == DType::float32)
      std::fill_n(reinterpret_cast<float*>(at), n, static_cast<float>(value));
    else
      std::fill_n(reinterpret_cast<double*>(at), n, value);
  }
  static void append(std::vector<std::byte>& to, const std::byte* from, std::size_t n) {
    to.insert(to.end(), from, from + n);
  }

  const DynamicTableConfig config_;
  mutable std::shared_mutex layout_mutex_;  // guards slots_ and stride_ (see the file comment)
  std::vector<RowSlot> slots_;
  std::size_t stride_ = 0;           // bytes per row
  std::unique_ptr<ChunkPool> pool_;  // the rows' chunks, kChunkRows * stride_ bytes each
  std::array<Stripe, kStripes> stripes_;
  std::atomic<std::size_t> size_{0};
  std::atomic<std::uint64_t> tick_{0};
  std::atomic<std::int64_t> current_step_{0};
  std::atomic<std::int64_t> own_steps_{0};
  std::mutex eviction_mutex_;
  std::unique_ptr<CountMinSketch> sketch_;
};

}  // namespace psflow
