// The transformations of a Dataset (data/dataset.hpp): each stage wraps its
// input's iterator. map runs its function on a pool of its own threads and
// prefetch on a thread of its own; both are stopped and joined when their
// iterator is destroyed, and an error on one of them reaches next() at the
// position of the element it belongs to.
#pragma once

#include "psflow/core/compilation.hpp"
#include "psflow/data/dataset.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "psflow/runtime/thread_pool.hpp"
#endif

namespace psflow::data {

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

// Runs a user function of stage `node` on an element; what it throws becomes a
// psflow::Error (its own type when it threw one) naming the stage and the
// element.
template <class Fn>
auto call_user_function(const DatasetNode& node, const Origin& origin, Fn&& fn) {
  try {
    return fn();
  } catch (...) {
    Status::from_current_exception()
        .with_context(node.where() + ": its function failed on the element from " +
                      origin.describe())
        .raise_if_error();
    throw;  // not reached: the status is an error
  }
}

// A stage with one input.
class UnaryNode : public DatasetNode {
 public:
  explicit UnaryNode(std::shared_ptr<const DatasetNode> input) : input_(std::move(input)) {}
  const DatasetNode* input() const override { return input_.get(); }
  ElementSpec spec() const override { return input_->spec(); }

 protected:
  // The input's first element, on which a stage with a function learns what it returns (as TF
  // traces a function).
  Element first_of_input() const {
    std::optional<Element> first = input_->iterate(0)->next();
    if (!first)
      throw InvalidArgument(where() +
                            ": cannot learn what the function returns, its input is empty");
    return std::move(*first);
  }

  std::shared_ptr<const DatasetNode> input_;
};

// An iterator over an input iterator, for stages that transform element by
// element.
template <class Next>
class FunctionIterator : public ElementIterator {
 public:
  FunctionIterator(std::unique_ptr<ElementIterator> input, Next next)
      : input_(std::move(input)), next_(std::move(next)) {}
  std::optional<Element> next() override { return next_(*input_); }

 private:
  std::unique_ptr<ElementIterator> input_;
  Next next_;
};
template <class Next>
std::unique_ptr<ElementIterator> function_iterator(std::unique_ptr<ElementIterator> input,
                                                   Next next) {
  return std::make_unique<FunctionIterator<Next>>(std::move(input), std::move(next));
}

// ---------------------------------------------------------------------------------------------
// map

class MapNode : public UnaryNode {
 public:
  MapNode(std::shared_ptr<const DatasetNode> input, Dataset::MapFn fn, int parallel)
      : UnaryNode(std::move(input)), fn_(std::move(fn)), parallel_(parallel) {
    if (!fn_) throw InvalidArgument("Dataset.map needs a function");
    if (parallel_ < 1)
      throw InvalidArgument("Dataset.map: num_parallel_calls must be at least 1, got " +
                            std::to_string(parallel_));
  }

  Element apply(Element e) const {
    Origin origin = e.origin;
    std::vector<Tensor> out =
        call_user_function(*this, origin, [&] { return fn_(std::move(e.components)); });
    return Element{std::move(out), std::move(origin)};
  }

  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override;

  // Learnt from the function's output on the first element of the input:
  // dtypes, and ranks with every dimension unknown (another element may
  // differ).
  ElementSpec spec() const override {
    ElementSpec spec;
    for (const Tensor& t : apply(first_of_input()).components)
      spec.push_back({t.dtype(), PartialShape::of(std::vector<std::int64_t>(t.rank(), -1))});
    return spec;
  }
  std::string name() const override { return "map"; }

 private:
  Dataset::MapFn fn_;
  int parallel_;
};

// Keeps up to `parallel` elements in the function at once, on a pool of its own
// threads, and gives the results in input order. The pool is joined before the
// rest goes.
class ParallelMapIterator : public ElementIterator {
 public:
  ParallelMapIterator(const MapNode& node, std::unique_ptr<ElementIterator> input, int parallel)
      : node_(node),
        input_(std::move(input)),
        parallel_(static_cast<std::size_t>(parallel)),
        pool_(std::make_unique<ThreadPool>(parallel_)) {}
  ~ParallelMapIterator() override { pool_.reset(); }  // runs or drains every call first
  std::optional<Element> next() override {
    while (!input_done_ && in_flight_.size() < parallel_) {
      std::optional<Element> e = input_->next();
      if (!e) {
        input_done_ = true;
        break;
      }
      auto call = std::make_shared<std::packaged_task<Element()>>(
          [this, e = std::move(*e)]() mutable { return node_.apply(std::move(e)); });
      in_flight_.push_back(call->get_future());
      pool_->submit([call] { (*call)(); });
    }
    if (in_flight_.empty()) return std::nullopt;
    std::future<Element> front = std::move(in_flight_.front());
    in_flight_.pop_front();
    return front.get();
  }

 private:
  const MapNode& node_;
  std::unique_ptr<ElementIterator> input_;
  std::size_t parallel_;
  bool input_done_ = false;
  std::deque<std::future<Element>> in_flight_;
  std::unique_ptr<ThreadPool> pool_;  // last: its threads go first
};

PSFLOW_DECL std::unique_ptr<ElementIterator> MapNode::iterate(std::uint64_t epoch) const {
  auto input = input_->iterate(epoch);
  if (parallel_ > 1)
    return std::make_unique<ParallelMapIterator>(*this, std::move(input), parallel_);
  return function_iterator(std::move(input), [this](ElementIterator& in) -> std::optional<Element> {
    std::optional<Element> e = in.next();
    if (!e) return std::nullopt;
    return apply(std::move(*e));
  });
}

// ---------------------------------------------------------------------------------------------
// filter, take, skip, shard, repeat

class FilterNode : public UnaryNode {
 public:
  FilterNode(std::shared_ptr<const DatasetNode> input, Dataset::Predicate predicate)
      : UnaryNode(std::move(input)), predicate_(std::move(predicate)) {
    if (!predicate_) throw InvalidArgument("Dataset.filter needs a predicate");
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    return function_iterator(input_->iterate(epoch), [this](ElementIterator& in) {
      for (;;) {
        std::optional<Element> e = in.next();
        if (!e || call_user_function(*this, e->origin, [&] { return predicate_(e->components); }))
          return e;
      }
    });
  }
  std::string name() const override { return "filter"; }

 private:
  Dataset::Predicate predicate_;
};

// take (keep the first n) and skip (drop the first n); n -1: all.
class TakeSkipNode : public UnaryNode {
 public:
  TakeSkipNode(std::shared_ptr<const DatasetNode> input, std::int64_t n, bool take)
      : UnaryNode(std::move(input)), n_(n), take_(take) {
    if (n_ < -1)
      throw InvalidArgument(std::string("Dataset.") + name() + ": n must be -1 or more, got " +
                            std::to_string(n_));
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    return function_iterator(
        input_->iterate(epoch),
        [this, seen = std::int64_t{0}](ElementIterator& in) mutable -> std::optional<Element> {
          if (take_) {
            if (n_ >= 0 && seen >= n_) return std::nullopt;
            ++seen;
            return in.next();
          }
          if (n_ < 0) return std::nullopt;  // skip(-1): everything
          for (; seen < n_; ++seen)
            if (!in.next()) return std::nullopt;
          return in.next();
        });
  }
  std::string name() const override { return take_ ? "take" : "skip"; }

 private:
  std::int64_t n_;
  bool take_;
};

class ShardNode : public UnaryNode {
 public:
  ShardNode(std::shared_ptr<const DatasetNode> input, std::size_t num_shards, std::size_t index)
      : UnaryNode(std::move(input)), num_shards_(num_shards), index_(index) {
    if (num_shards_ == 0 || index_ >= num_shards_)
      throw InvalidArgument("Dataset.shard: index " + std::to_string(index_) +
                            " must be below num_shards " + std::to_string(num_shards_) +
                            " (and num_shards at least 1)");
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    return function_iterator(
        input_->iterate(epoch),
        [this, position = std::size_t{0}](ElementIterator& in) mutable -> std::optional<Element> {
          for (;;) {
            std::optional<Element> e = in.next();
            if (!e) return std::nullopt;
            if (position++ % num_shards_ == index_) return e;
          }
        });
  }
  std::string name() const override { return "shard"; }

 private:
  std::size_t num_shards_, index_;
};

class RepeatNode : public UnaryNode {
 public:
  RepeatNode(std::shared_ptr<const DatasetNode> input, std::int64_t count)
      : UnaryNode(std::move(input)), count_(count) {
    if (count_ < -1)
      throw InvalidArgument("Dataset.repeat: count must be -1 (forever) or more, got " +
                            std::to_string(count_));
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    struct Repeat : ElementIterator {
      const RepeatNode& node;
      std::uint64_t outer_epoch;
      std::int64_t pass = 0;
      std::unique_ptr<ElementIterator> current;
      bool empty_pass = true;
      Repeat(const RepeatNode& n, std::uint64_t e) : node(n), outer_epoch(e) {}
      std::optional<Element> next() override {
        for (;;) {
          if (!current) {
            if (node.count_ >= 0 && pass >= node.count_) return std::nullopt;
            // Each pass is an epoch of the input: a shuffle there reshuffles,
            // reproducibly.
            current =
                node.input_->iterate(outer_epoch * 1000003 + static_cast<std::uint64_t>(pass));
            empty_pass = true;
          }
          if (std::optional<Element> e = current->next()) {
            empty_pass = false;
            return e;
          }
          current.reset();
          ++pass;
          if (empty_pass) return std::nullopt;  // an empty input repeated forever is empty
        }
      }
    };
    return std::make_unique<Repeat>(*this, epoch);
  }
  std::string name() const override { return "repeat"; }

 private:
  std::int64_t count_;
};

// ---------------------------------------------------------------------------------------------
// shuffle

// A 64-bit mix (splitmix64's finaliser), to turn a seed and an epoch into a
// generator's seed.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class ShuffleNode : public UnaryNode {
 public:
  ShuffleNode(std::shared_ptr<const DatasetNode> input, std::size_t buffer_size, std::uint64_t seed,
              bool reshuffle)
      : UnaryNode(std::move(input)),
        buffer_size_(buffer_size),
        seed_(seed != 0 ? seed : std::random_device{}() | (std::uint64_t{1} << 63)),
        reshuffle_(reshuffle) {
    if (buffer_size_ == 0) throw InvalidArgument("Dataset.shuffle: buffer_size must be at least 1");
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    std::mt19937_64 rng(mix64(seed_ ^ mix64(reshuffle_ ? epoch + 1 : 0)));
    return function_iterator(
        input_->iterate(epoch),
        [this, rng, buffer = std::vector<Element>(),
         input_done = false](ElementIterator& in) mutable -> std::optional<Element> {
          while (!input_done && buffer.size() < buffer_size_) {
            std::optional<Element> e = in.next();
            if (!e) {
              input_done = true;
              break;
            }
            buffer.push_back(std::move(*e));
          }
          if (buffer.empty()) return std::nullopt;
          std::uniform_int_distribution<std::size_t> pick(0, buffer.size() - 1);
          const std::size_t at = pick(rng);
          std::swap(buffer[at], buffer.back());
          Element out = std::move(buffer.back());
          buffer.pop_back();
          return out;
        });
  }
  std::string name() const override { return "shuffle"; }

 private:
  std::size_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_;
};

// ---------------------------------------------------------------------------------------------
// batch and padded_batch

class BatchNode : public UnaryNode {
 public:
  BatchNode(std::shared_ptr<const DatasetNode> input, std::size_t batch_size, bool drop_remainder,
            bool padded)
      : UnaryNode(std::move(input)),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder),
        padded_(padded) {
    if (batch_size_ == 0)
      throw InvalidArgument("Dataset." + name() + ": batch_size must be at least 1");
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    return function_iterator(input_->iterate(epoch),
                             [this](ElementIterator& in) -> std::optional<Element> {
                               std::vector<Element> batch;
                               while (batch.size() < batch_size_) {
                                 std::optional<Element> e = in.next();
                                 if (!e) break;
                                 batch.push_back(std::move(*e));
                               }
                               if (batch.empty() || (drop_remainder_ && batch.size() < batch_size_))
                                 return std::nullopt;
                               return stack(batch);
                             });
  }
  ElementSpec spec() const override {
    ElementSpec spec = input_->spec();
    for (ComponentSpec& c : spec) {
      const std::int64_t first = drop_remainder_ ? static_cast<std::int64_t>(batch_size_) : -1;
      if (padded_ && c.shape.known)
        c.shape = PartialShape::of(std::vector<std::int64_t>(c.shape.dims.size(), -1));
      if (c.shape.known) c.shape.dims.insert(c.shape.dims.begin(), first);
    }
    return spec;
  }
  std::string name() const override { return padded_ ? "padded_batch" : "batch"; }

 private:
  Element stack(std::vector<Element>& batch) const {
    Element out;
    out.origin = batch.front().origin;
    const std::size_t n = batch.size();
    for (std::size_t c = 0; c < batch.front().components.size(); ++c) {
      const Tensor& first = batch.front().components[c];
      Shape shape = first.shape();
      for (const Element& e : batch) {
        if (e.components.size() != batch.front().components.size() ||
            e.components[c].dtype() != first.dtype() || e.components[c].rank() != first.rank() ||
            (!padded_ && e.components[c].shape() != first.shape()))
          throw InvalidArgument(
              where() + ": component " + std::to_string(c) + " is " + first.summary() +
              " in the element from " + batch.front().origin.describe() + " but " +
              (c < e.components.size() ? e.components[c].summary() : "missing") +
              " in the element from " + e.origin.describe() +
              (padded_ ? "" : "; elements of different shapes need padded_batch"));
        for (std::size_t d = 0; d < shape.size(); ++d)
          shape[d] = std::max(shape[d], e.components[c].shape()[d]);
      }
      Shape stacked = shape;
      stacked.insert(stacked.begin(), n);
      Tensor t(first.dtype(), stacked);  // zeros, or empty strings: the padding
      const std::size_t per_element = num_elements(shape);
      for (std::size_t i = 0; i < n; ++i)
        copy_padded(batch[i].components[c], t, i * per_element, shape);
      out.components.push_back(std::move(t));
    }
    return out;
  }

  // Moves `x` (an element this stage owns) into `out` from element `at` on, laid out in the
  // (larger or equal) `shape`.
  static void copy_padded(Tensor& x, Tensor& out, std::size_t at, const Shape& shape) {
    if (x.shape() == shape) {
      move_elements(out, at, x, 0, x.size());
      return;
    }
    if (x.size() == 0) return;
    const std::size_t rank = shape.size();
    const std::size_t row = x.shape()[rank - 1];
    std::vector<std::size_t> coord(rank, 0);
    for (std::size_t src = 0; src < x.size(); src += row) {
      std::size_t dst = 0;
      for (std::size_t d = 0; d < rank; ++d) dst = dst * shape[d] + coord[d];
      copy_elements(out, at + dst, x, src, row);
      for (std::size_t d = rank - 1; d-- > 0;) {  // the next row of x
        if (++coord[d] < x.shape()[d]) break;
        coord[d] = 0;
      }
    }
  }

  std::size_t batch_size_;
  bool drop_remainder_, padded_;
};

// ---------------------------------------------------------------------------------------------
// interleave

class InterleaveNode : public UnaryNode {
 public:
  InterleaveNode(std::shared_ptr<const DatasetNode> input, Dataset::InterleaveFn fn, int cycle,
                 int block)
      : UnaryNode(std::move(input)), fn_(std::move(fn)), cycle_(cycle), block_(block) {
    if (!fn_) throw InvalidArgument("Dataset.interleave needs a function");
    if (cycle_ < 1 || block_ < 1)
      throw InvalidArgument(
          "Dataset.interleave: cycle_length and block_length "
          "must be at least 1, "
          "got " +
          std::to_string(cycle_) + " and " + std::to_string(block_));
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    struct Interleave : ElementIterator {
      const InterleaveNode& node;
      std::unique_ptr<ElementIterator> input;
      std::uint64_t epoch;
      std::vector<std::unique_ptr<ElementIterator>> open;  // the cycle; null: a free slot
      std::size_t slot = 0;
      int taken = 0;  // from the current slot in this block
      bool input_done = false;
      Interleave(const InterleaveNode& n, std::unique_ptr<ElementIterator> in, std::uint64_t e)
          : node(n), input(std::move(in)), epoch(e), open(static_cast<std::size_t>(n.cycle_)) {}
      bool fill(std::size_t i) {  // opens the next input element's dataset in slot i
        while (!input_done) {
          std::optional<Element> e = input->next();
          if (!e) {
            input_done = true;
            break;
          }
          Dataset d = call_user_function(node, e->origin, [&] { return node.fn_(e->components); });
          open[i] = iterate_owned(d.node(), epoch);
          return true;
        }
        return false;
      }
      std::optional<Element> next() override {
        for (;;) {
          if (!open[slot] && !fill(slot)) {
            if (std::none_of(open.begin(), open.end(),
                             [](const auto& it) { return it != nullptr; }))
              return std::nullopt;  // the input is used up and every dataset
                                    // ended
            advance();
            continue;
          }
          if (std::optional<Element> e = open[slot]->next()) {
            if (++taken == node.block_) advance();
            return e;
          }
          open[slot].reset();  // ended: the next input element's dataset takes
                               // the slot
          advance();
        }
      }
      void advance() {
        slot = (slot + 1) % open.size();
        taken = 0;
      }
    };
    return std::make_unique<Interleave>(*this, input_->iterate(epoch), epoch);
  }
  ElementSpec spec() const override {
    const Element first = first_of_input();
    return call_user_function(*this, first.origin, [&] { return fn_(first.components); })
        .element_spec();
  }
  std::string name() const override { return "interleave"; }

 private:
  Dataset::InterleaveFn fn_;
  int cycle_, block_;
};

// ---------------------------------------------------------------------------------------------
// prefetch and cache

// A thread of its own fills a buffer of up to buffer_size elements (or the
// error that ended its input); the destructor stops and joins it.
class PrefetchIterator : public ElementIterator {
 public:
  PrefetchIterator(std::unique_ptr<ElementIterator> input, std::size_t buffer_size)
      : input_(std::move(input)), capacity_(buffer_size) {
    thread_ = std::thread([this] { fill(); });
  }
  ~PrefetchIterator() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  std::optional<Element> next() override {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !buffer_.empty() || done_; });
    if (buffer_.empty()) {
      if (!error_.ok()) {
        const Status error = std::exchange(error_, Status());
        lock.unlock();
        error.raise_if_error();
      }
      return std::nullopt;
    }
    std::optional<Element> e = std::move(buffer_.front());
    buffer_.pop_front();
    changed_.notify_all();
    return e;
  }

 private:
  void fill() {
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || buffer_.size() < capacity_; });
        if (stopping_) return;
      }
      std::optional<Element> e;
      Status error;
      try {
        e = input_->next();
      } catch (...) {
        error = Status::from_current_exception();
      }
      std::lock_guard lock(mutex_);
      if (e) {
        buffer_.push_back(std::move(*e));
      } else {
        error_ = error;
        done_ = true;
      }
      changed_.notify_all();
      if (done_) return;
    }
  }

  std::unique_ptr<ElementIterator> input_;  // used by the thread only
  const std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Element> buffer_;
  bool done_ = false, stopping_ = false;
  Status error_;
  std::thread thread_;
};

class PrefetchNode : public UnaryNode {
 public:
  PrefetchNode(std::shared_ptr<const DatasetNode> input, std::size_t buffer_size)
      : UnaryNode(std::move(input)), buffer_size_(buffer_size) {
    if (buffer_size_ == 0)
      throw InvalidArgument("Dataset.prefetch: buffer_size must be at least 1");
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    return std::make_unique<PrefetchIterator>(input_->iterate(epoch), buffer_size_);
  }
  std::string name() const override { return "prefetch"; }

 private:
  std::size_t buffer_size_;
};

// The first complete pass is recorded (per node, shared by its iterators: TF's
// in-memory cache); later passes replay it.
class CacheNode : public UnaryNode {
 public:
  using UnaryNode::UnaryNode;
  std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const override {
    {
      std::lock_guard lock(mutex_);
      if (complete_) {
        struct Replay : ElementIterator {
          std::shared_ptr<const std::vector<Element>> elements;
          std::size_t at = 0;
          std::optional<Element> next() override {
            if (at == elements->size()) return std::nullopt;
            return (*elements)[at++];
          }
        };
        auto replay = std::make_unique<Replay>();
        replay->elements = complete_;
        return replay;
      }
    }
    return function_iterator(input_->iterate(epoch),
                             [this, recorded = std::make_shared<std::vector<Element>>()](
                                 ElementIterator& in) -> std::optional<Element> {
                               std::optional<Element> e = in.next();
                               if (e) {
                                 recorded->push_back(*e);
                               } else {
                                 std::lock_guard lock(mutex_);
                                 if (!complete_) complete_ = recorded;
                               }
                               return e;
                             });
  }
  std::string name() const override { return "cache"; }

 private:
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const std::vector<Element>> complete_;
};

}  // namespace detail

PSFLOW_DECL Dataset Dataset::map(MapFn fn, int num_parallel_calls) const {
  return Dataset(std::make_shared<detail::MapNode>(node_, std::move(fn), num_parallel_calls));
}
PSFLOW_DECL Dataset Dataset::filter(Predicate predicate) const {
  return Dataset(std::make_shared<detail::FilterNode>(node_, std::move(predicate)));
}
PSFLOW_DECL Dataset Dataset::interleave(InterleaveFn fn, int cycle_length, int block_length) const {
  return Dataset(
      std::make_shared<detail::InterleaveNode>(node_, std::move(fn), cycle_length, block_length));
}
PSFLOW_DECL Dataset Dataset::shuffle(std::size_t buffer_size, std::uint64_t seed,
                                     bool reshuffle_each_iteration) const {
  return Dataset(
      std::make_shared<detail::ShuffleNode>(node_, buffer_size, seed, reshuffle_each_iteration));
}
PSFLOW_DECL Dataset Dataset::batch(std::size_t batch_size, bool drop_remainder) const {
  return Dataset(std::make_shared<detail::BatchNode>(node_, batch_size, drop_remainder, false));
}
PSFLOW_DECL Dataset Dataset::padded_batch(std::size_t batch_size, bool drop_remainder) const {
  return Dataset(std::make_shared<detail::BatchNode>(node_, batch_size, drop_remainder, true));
}
PSFLOW_DECL Dataset Dataset::repeat(std::int64_t count) const {
  return Dataset(std::make_shared<detail::RepeatNode>(node_, count));
}
PSFLOW_DECL Dataset Dataset::take(std::int64_t n) const {
  return Dataset(std::make_shared<detail::TakeSkipNode>(node_, n, true));
}
PSFLOW_DECL Dataset Dataset::skip(std::int64_t n) const {
  return Dataset(std::make_shared<detail::TakeSkipNode>(node_, n, false));
}
PSFLOW_DECL Dataset Dataset::shard(std::size_t num_shards, std::size_t index) const {
  return Dataset(std::make_shared<detail::ShardNode>(node_, num_shards, index));
}
PSFLOW_DECL Dataset Dataset::prefetch(std::size_t buffer_size) const {
  return Dataset(std::make_shared<detail::PrefetchNode>(node_, buffer_size));
}
PSFLOW_DECL Dataset Dataset::cache() const {
  return Dataset(std::make_shared<detail::CacheNode>(node_));
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::data
