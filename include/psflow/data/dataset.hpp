// data::Dataset: TF1's tf.data. A Dataset is an immutable description of a
// pipeline (a source, then transformations); each transformation returns a new
// Dataset sharing the old one. Iterating it builds the pipeline's stages
// afresh: make_iterator() gives a C++ iterator, and the graph's iterators
// (data/iterator.hpp) pull from one inside a step.
//
// Sources: from_tensor_slices, TextLineDataset, TFRecordDataset, list_files.
// Transformations: map (a C++ function over an element's tensors, on
// num_parallel_calls threads, in order), filter, interleave, shuffle, batch,
// padded_batch, repeat, take, skip, shard, prefetch (a background thread
// filling a bounded buffer), cache (in memory).
//
// Determinism: with a seed, shuffle and list_files give the same order on every
// run; with reshuffle_each_iteration each repetition of the input (each epoch
// under repeat) gets its own order, the same on every run. Seed 0 means no
// seed: a new order every run, as TF's seed=None.
//
// Errors: a function of map, filter or interleave that throws fails the
// iterator's next() with a psflow::Error (its own type when it threw one) whose
// message names the stage ("Dataset.map, stage 2 of TextLineDataset -> map ->
// batch"), the element it was given (a file and line, or a record) and the
// function's own message. Iterators and their threads end with the iterator:
// its destructor stops and joins every thread it started.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/tensor.hpp"
#include "psflow/graph/partial_shape.hpp"

namespace psflow {
class Graph;
}

namespace psflow::data {

// Where an element came from, for error messages: a line of a text file, a
// record of a TFRecord file, an index of a source of slices. Cheap to copy; the
// text is made only on error.
struct Origin {
  enum class Kind { none, line, record, slice } kind = Kind::none;
  std::shared_ptr<const std::string> file;
  std::uint64_t index = 0;  // line number (from 1), record number (from 0), slice index
  std::uint64_t byte = 0;   // a record's byte offset
  std::string describe() const;
};

// One element: its component tensors, and where it came from.
struct Element {
  std::vector<Tensor> components;
  Origin origin;
};

// The dtype and shape of one component of every element (unknown dims: -1).
struct ComponentSpec {
  DType dtype = DType::float32;
  PartialShape shape;
};
using ElementSpec = std::vector<ComponentSpec>;

// One pass over a dataset. next() gives the elements in order, nullopt at the
// end (and after).
class ElementIterator {
 public:
  virtual ~ElementIterator() = default;
  virtual std::optional<Element> next() = 0;
};

namespace detail {

// A stage of a pipeline. `epoch` counts the passes over this stage in one
// iteration of the pipeline (repeat's repetitions), so that a shuffle can
// reshuffle each one reproducibly.
class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<ElementIterator> iterate(std::uint64_t epoch) const = 0;
  virtual ElementSpec spec() const = 0;
  // "TFRecordDataset", "map", ...; stage 1 is the source.
  virtual std::string name() const = 0;
  virtual const DatasetNode* input() const { return nullptr; }
  // "stage 2 of TextLineDataset -> map -> batch": where a failure happened.
  std::string where() const;
};

// An iterator of `node` that keeps the node (and so the whole pipeline before
// it) alive.
std::unique_ptr<ElementIterator> iterate_owned(std::shared_ptr<const DatasetNode> node,
                                               std::uint64_t epoch);

}  // namespace detail

class Iterator;

class Dataset {
 public:
  using MapFn = std::function<std::vector<Tensor>(std::vector<Tensor>)>;
  using Predicate = std::function<bool(const std::vector<Tensor>&)>;
  using InterleaveFn = std::function<Dataset(std::vector<Tensor>)>;

  // The slices along the first dimension of each component (all with the same
  // first dimension): element i is {components[0][i], components[1][i], ...}.
  static Dataset from_tensor_slices(std::vector<Tensor> components);
  // A dataset of the file names matching `pattern` (glob(3): *, ?, [...]),
  // sorted, or shuffled with `seed` when `shuffle`. NotFound naming the pattern
  // when nothing matches.
  static Dataset list_files(std::string_view pattern, bool shuffle = false, std::uint64_t seed = 0);

  // fn(element's tensors) -> the new element's tensors, on num_parallel_calls
  // threads; the order of the elements is kept.
  Dataset map(MapFn fn, int num_parallel_calls = 1) const;
  // The elements for which predicate is true.
  Dataset filter(Predicate predicate) const;
  // fn(element) -> a dataset; cycle_length of them are read at once,
  // block_length elements from each in turn.
  Dataset interleave(InterleaveFn fn, int cycle_length, int block_length = 1) const;
  // Picks each next element at random from a buffer of buffer_size.
  Dataset shuffle(std::size_t buffer_size, std::uint64_t seed = 0,
                  bool reshuffle_each_iteration = true) const;
  // batch_size elements stacked into one (a new first dimension); the last
  // batch may be smaller unless drop_remainder. Components must have one shape
  // within a batch.
  Dataset batch(std::size_t batch_size, bool drop_remainder = false) const;
  // As batch, padding each component to the largest shape in its batch with
  // zeros (empty strings), for variable-length features.
  Dataset padded_batch(std::size_t batch_size, bool drop_remainder = false) const;
  // The dataset count times (-1: forever).
  Dataset repeat(std::int64_t count = -1) const;
  Dataset take(std::int64_t n) const;  // the first n elements (-1: all)
  Dataset skip(std::int64_t n) const;  // all but the first n (-1: none)
  // Every num_shards-th element from index on: disjoint shards whose union is
  // the dataset.
  Dataset shard(std::size_t num_shards, std::size_t index) const;
  // Fills a buffer of buffer_size elements ahead of the reader, on a background
  // thread.
  Dataset prefetch(std::size_t buffer_size) const;
  // The elements kept in memory on the first pass, replayed on later ones
  // (under repeat).
  Dataset cache() const;

  // A fresh pass over the pipeline, outside any graph.
  std::unique_ptr<ElementIterator> make_iterator() const;
  // The pipeline in `graph` (data/iterator.hpp): a one-shot iterator starts its pass on its
  // first get_next; an initializable one on each run of its initializer().
  Iterator make_one_shot_iterator(Graph& graph) const;
  Iterator make_initializable_iterator(Graph& graph) const;
  // The dtype and shape of each component. A map's output is learnt by running
  // its function on the first element of its input, as TF traces a map
  // function; a shape stays unknown where it may vary.
  ElementSpec element_spec() const;

  explicit Dataset(std::shared_ptr<const detail::DatasetNode> node) : node_(std::move(node)) {}
  const std::shared_ptr<const detail::DatasetNode>& node() const noexcept { return node_; }

 private:
  std::shared_ptr<const detail::DatasetNode> node_;
};

// The lines of `files`, in order, without their line ends: scalar strings.
Dataset TextLineDataset(std::vector<std::string> files, std::string_view compression = "");
// The records of `files`, in order: scalar strings. compression "", "ZLIB" or
// "GZIP".
Dataset TFRecordDataset(std::vector<std::string> files, std::string_view compression = "");

// The file names matching `pattern`, sorted; NotFound naming the pattern when
// none does.
std::vector<std::string> match_files(std::string_view pattern);

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

PSFLOW_DECL std::string Origin::describe() const {
  const std::string name = file ? *file : std::string("the input");
  switch (kind) {
    case Kind::line:
      return name + ":" + std::to_string(index);
    case Kind::record:
      return name + ", record " + std::to_string(index) + " (byte " + std::to_string(byte) + ")";
    case Kind::slice:
      return "slice " + std::to_string(index);
    case Kind::none:
      break;
  }
  return "an element";
}

namespace detail {

PSFLOW_DECL std::string DatasetNode::where() const {
  std::vector<std::string> names;
  for (const DatasetNode* n = this; n; n = n->input()) names.push_back(n->name());
  std::string chain;
  for (std::size_t i = names.size(); i-- > 0;) chain += names[i] + (i ? " -> " : "");
  return "Dataset." + name() + ", stage " + std::to_string(names.size()) + " of " + chain;
}

}  // namespace detail

PSFLOW_DECL std::unique_ptr<ElementIterator> detail::iterate_owned(
    std::shared_ptr<const DatasetNode> node, std::uint64_t epoch) {
  struct Owning : ElementIterator {
    std::shared_ptr<const DatasetNode> node;  // declared first: destroyed after the iterator
    std::unique_ptr<ElementIterator> iterator;
    std::optional<Element> next() override { return iterator->next(); }
  };
  auto owning = std::make_unique<Owning>();
  owning->iterator = node->iterate(epoch);
  owning->node = std::move(node);
  return owning;
}

PSFLOW_DECL std::unique_ptr<ElementIterator> Dataset::make_iterator() const {
  return detail::iterate_owned(node_, 0);
}

PSFLOW_DECL ElementSpec Dataset::element_spec() const { return node_->spec(); }

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::data

#include "psflow/data/dataset_sources.hpp"
#include "psflow/data/dataset_transformations.hpp"
#include "psflow/data/iterator.hpp"
