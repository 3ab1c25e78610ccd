// data::Dataset (data/dataset.hpp) iterated in C++: every source and
// transformation in order, shard's disjoint cover, seeded shuffles that repeat
// across runs and reshuffle per epoch, map on several threads keeping order,
// errors of user functions naming the stage, the element (file:line) and the
// function's own message, and prefetch's thread ending with its iterator.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "psflow/data/csv.hpp"
#include "psflow/data/dataset.hpp"
#include "psflow/data/record_writer.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

using Catch::Contains;
using psflow::DType;
using psflow::InvalidArgument;
using psflow::Tensor;
namespace data = psflow::data;
using data::Dataset;
using psflow::testing::TempDir;

namespace {

Dataset range(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return Dataset::from_tensor_slices({Tensor::from_vector(std::move(v))});
}

// The first component of every element, as int64 scalars or the flattened
// values of each.
std::vector<std::int64_t> ints(const Dataset& d) {
  std::vector<std::int64_t> out;
  auto it = d.make_iterator();
  for (int guard = 0; guard < 100000; ++guard) {
    auto e = it->next();
    if (!e) return out;
    for (std::int64_t v : e->components.at(0).values<std::int64_t>()) out.push_back(v);
  }
  FAIL("the dataset did not end");
  return out;
}

std::vector<std::string> strings(const Dataset& d) {
  std::vector<std::string> out;
  auto it = d.make_iterator();
  while (auto e = it->next()) out.push_back(e->components.at(0).scalar<std::string>());
  return out;
}

std::vector<std::int64_t> iota(std::int64_t from, std::int64_t to) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST_CASE("from_tensor_slices, batch, repeat, take and skip give TF's order") {
  const Dataset pairs =
      Dataset::from_tensor_slices({Tensor::from_vector<std::int64_t>({1, 2, 3, 4, 5, 6}, {3, 2}),
                                   Tensor::from_vector<std::string>({"a", "b", "c"})});
  auto it = pairs.make_iterator();
  auto first = it->next();
  REQUIRE(first);
  CHECK(first->components[0].equals(Tensor::from_vector<std::int64_t>({1, 2})));
  CHECK(first->components[1].scalar<std::string>() == "a");

  CHECK(ints(range(7).batch(3)) == iota(0, 7));
  auto batches = range(7).batch(3).make_iterator();
  CHECK(batches->next()->components[0].shape() == psflow::Shape{3});
  batches->next();
  CHECK(batches->next()->components[0].shape() == psflow::Shape{1});  // the remainder
  CHECK_FALSE(batches->next());
  CHECK(ints(range(7).batch(3, true)) == iota(0, 6));
  CHECK(ints(range(3).repeat(2)) == std::vector<std::int64_t>{0, 1, 2, 0, 1, 2});
  CHECK(ints(range(3).repeat().take(7)) == std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0});
  CHECK(ints(range(5).skip(2)) == iota(2, 5));
  CHECK(ints(range(5).skip(-1)).empty());
  CHECK(ints(range(5).take(-1)) == iota(0, 5));
  CHECK(ints(range(0).repeat()).empty());  // an empty dataset repeated forever is empty
  CHECK(ints(range(6).filter([](const std::vector<Tensor>& e) {
          return e[0].scalar<std::int64_t>() % 2 == 0;
        })) == std::vector<std::int64_t>{0, 2, 4});
}

TEST_CASE(
    "shard gives disjoint shards whose union is the dataset, uneven "
    "counts too") {
  for (std::size_t shards : {1u, 2u, 3u}) {
    INFO(shards << " shards of 10");
    std::multiset<std::int64_t> all;
    for (std::size_t i = 0; i < shards; ++i) {
      const auto part = ints(range(10).shard(shards, i));
      for (std::int64_t v : part) CHECK(static_cast<std::size_t>(v) % shards == i);
      all.insert(part.begin(), part.end());
    }
    CHECK(std::vector<std::int64_t>(all.begin(), all.end()) == iota(0, 10));
  }
  CHECK_THROWS_WITH(range(3).shard(2, 2), Contains("index 2 must be below num_shards 2"));
}

TEST_CASE("a seeded shuffle is the same on every run and reshuffles each epoch") {
  const auto once = ints(range(50).shuffle(10, 42).repeat(3));
  CHECK(once == ints(range(50).shuffle(10, 42).repeat(3)));  // another run, the same order
  const std::vector<std::int64_t> epoch0(once.begin(), once.begin() + 50);
  const std::vector<std::int64_t> epoch1(once.begin() + 50, once.begin() + 100);
  CHECK(epoch0 != epoch1);  // reshuffled
  CHECK(std::multiset<std::int64_t>(epoch1.begin(), epoch1.end()) ==
        std::multiset<std::int64_t>(epoch0.begin(), epoch0.end()));
  CHECK(epoch0 != iota(0, 50));
  CHECK(ints(range(50).shuffle(10, 43)) != epoch0);  // another seed, another order
  const auto fixed = ints(range(20).shuffle(20, 7, false).repeat(2));
  CHECK(std::vector<std::int64_t>(fixed.begin(), fixed.begin() + 20) ==
        std::vector<std::int64_t>(fixed.begin() + 20, fixed.end()));
}

TEST_CASE(
    "map runs on several threads and keeps the order, and cache replays "
    "without it") {
  std::atomic<int> calls{0};
  const Dataset squares = range(200).map(
      [&](std::vector<Tensor> e) {
        ++calls;
        const std::int64_t v = e[0].scalar<std::int64_t>();
        return std::vector<Tensor>{Tensor(v * v), Tensor(std::to_string(v))};
      },
      4);
  std::vector<std::int64_t> want;
  for (std::int64_t i = 0; i < 200; ++i) want.push_back(i * i);
  CHECK(ints(squares) == want);
  calls = 0;
  CHECK(ints(squares.cache().repeat(3)).size() == 600);
  CHECK(calls == 200);  // the second and third passes come from the cache
  const auto spec = squares.element_spec();
  REQUIRE(spec.size() == 2);
  CHECK(spec[0].dtype == DType::int64);
  CHECK(spec[1].dtype == DType::string);
}

TEST_CASE("padded_batch pads variable-length components, and batch refuses them") {
  const Dataset ragged = range(4).map([](std::vector<Tensor> e) {
    const std::int64_t n = e[0].scalar<std::int64_t>();
    return std::vector<Tensor>{
        Tensor::from_vector(std::vector<std::int64_t>(static_cast<std::size_t>(n), n))};
  });
  auto it = ragged.padded_batch(4).make_iterator();
  const auto b = it->next();
  REQUIRE(b);
  CHECK(b->components[0].equals(
      Tensor::from_vector<std::int64_t>({0, 0, 0, 1, 0, 0, 2, 2, 0, 3, 3, 3}, {4, 3})));
  CHECK_THROWS_WITH(ragged.batch(4).make_iterator()->next(),
                    Contains("Dataset.batch") && Contains("need padded_batch"));
}

TEST_CASE(
    "interleave reads cycle_length datasets at once, block_length "
    "elements each") {
  const Dataset outer = range(3);
  const Dataset mixed = outer.interleave(
      [](std::vector<Tensor> e) {
        const std::int64_t k = e[0].scalar<std::int64_t>();
        return range(3).map([k](std::vector<Tensor> x) {
          return std::vector<Tensor>{Tensor(k * 10 + x[0].scalar<std::int64_t>())};
        });
      },
      2, 2);
  // TF's order: 0 and 1 in the cycle, two from each; 2 takes 0's place when 0
  // ends.
  CHECK(ints(mixed) == std::vector<std::int64_t>{0, 1, 10, 11, 2, 12, 20, 21, 22});
}

TEST_CASE("text and TFRecord files as datasets, and list_files") {
  TempDir dir("dataset");
  psflow::testing::write_file(dir / "a.txt", "1\n2\n");
  psflow::testing::write_file(dir / "b.txt", "3\r\n");
  CHECK(strings(data::TextLineDataset({dir / "a.txt", dir / "b.txt"})) ==
        std::vector<std::string>{"1", "2", "3"});
  {
    data::TFRecordWriter w(dir / "r.tfrecord.gz", "GZIP");
    w.write("x");
    w.write(std::string("y\0z", 3));
  }
  CHECK(strings(data::TFRecordDataset({dir / "r.tfrecord.gz"}, "GZIP")) ==
        std::vector<std::string>{"x", std::string("y\0z", 3)});
  CHECK(strings(Dataset::list_files(dir / "*.txt")) ==
        std::vector<std::string>{dir / "a.txt", dir / "b.txt"});
  CHECK_THROWS_WITH(Dataset::list_files(dir / "*.csv"), Contains("*.csv"));
  CHECK_THROWS_AS(Dataset::list_files(dir / "*.csv"), psflow::NotFound);
  CHECK_THROWS_AS(data::TextLineDataset({dir / "missing.txt"}).make_iterator()->next(),
                  psflow::NotFound);
  CHECK_THROWS_WITH(data::TFRecordDataset({dir / "a.txt"}, "BZIP2"), Contains("compression"));
}

TEST_CASE(
    "a failing user function names the stage, the file and line, and its "
    "own message") {
  TempDir dir("dataset");
  psflow::testing::write_file(dir / "data.csv", "1,2.5\n2,oops\n");
  const Dataset parsed = data::TextLineDataset({dir / "data.csv"}).map([](std::vector<Tensor> e) {
    return data::decode_csv(e[0], {Tensor(std::int32_t{0}), Tensor(0.0f)});
  });
  auto it = parsed.make_iterator();
  CHECK(it->next());
  try {
    it->next();
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Contains("Dataset.map, stage 2 of TextLineDataset -> map"));
    CHECK_THAT(message, Contains(dir / "data.csv:2"));
    CHECK_THAT(message, Contains("column 1: b'oops' is not a valid float32"));
  }
  // A plain C++ exception becomes a psflow::Error with the function's message;
  // prefetch carries it to the reader at its position.
  const Dataset throwing = range(5).map([](std::vector<Tensor> e) {
    if (e[0].scalar<std::int64_t>() == 3) throw std::runtime_error("no threes here");
    return e;
  });
  auto prefetched = throwing.prefetch(4).make_iterator();
  for (int i = 0; i < 3; ++i) CHECK(prefetched->next());
  CHECK_THROWS_WITH(prefetched->next(), Contains("no threes here") && Contains("slice 3"));
  CHECK_THROWS_AS(throwing.skip(3).make_iterator()->next(), psflow::Error);
}

TEST_CASE(
    "prefetch keeps the order, and its thread ends with the iterator, "
    "mid-stream too") {
  CHECK(ints(range(100).prefetch(3)) == iota(0, 100));
  for (int round = 0; round < 20; ++round) {
    auto it = range(1000)
                  .repeat()
                  .map([](std::vector<Tensor> e) { return e; }, 2)
                  .prefetch(8)
                  .make_iterator();
    CHECK(it->next());
  }  // each destroyed with its buffer full and its thread waiting: joined, not
     // leaked
}

TEST_CASE("element_spec: shapes of slices, batches and what map returns") {
  const Dataset d = Dataset::from_tensor_slices(
      {Tensor(DType::float32, {10, 28, 28}), Tensor(DType::int64, {10})});
  auto spec = d.batch(4).element_spec();
  CHECK(spec[0].shape == psflow::PartialShape::of({-1, 28, 28}));
  CHECK(spec[1].shape == psflow::PartialShape::of({-1}));
  spec = d.batch(4, true).element_spec();
  CHECK(spec[0].shape == psflow::PartialShape::of({4, 28, 28}));
  CHECK_THROWS_WITH(range(0).map([](std::vector<Tensor> e) { return e; }).element_spec(),
                    Contains("its input is empty"));
}
