// Input pipeline benchmark: reading a TFRecord file of tf.train.Example records and parsing them
// into batches through data::Dataset, next to a hand-written loop that reads and decodes the
// same file into the same batches, in the same run.
//
//   data/parse/hand_loop             the baseline: the whole file read into memory, each record's
//                                    length and masked CRC-32C checked, each Example decoded by a
//                                    protobuf walk written for this schema, batches of 256 made
//   data/parse/pipeline/threads:N    TFRecordDataset(file).batch(256)
//                                      .map(ctr::parse_click_examples, N).prefetch(2):
//                                    the records, batched, parsed by data::parse_example on N
//                                    threads, in order
//
// The file: 200000 examples written by the CTR example (examples/ctr/click_files.hpp): 8 string
// features such as "user:12345" and 2 floats (label, true_probability); about 48 MB.
// Both produce, per batch, the 8 fields as a string tensor [256, 8] and the two floats [256].
// Counters: items_per_second (examples/s) and bytes_per_second (file bytes/s).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <psflow/observe/crc32c.hpp>
#include <psflow/psflow.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "ctr/click_files.hpp"

using namespace psflow;
namespace data = psflow::data;

namespace {

constexpr std::size_t kExamples = 200000;
constexpr std::size_t kBatch = 256;
const std::vector<std::string>& kFields = ctr::kFieldNames;
const std::vector<std::uint32_t> kVocabulary = {20000, 10000, 5000, 2000, 1000, 200, 50, 10};

// The ctr example's files: one uncompressed TFRecord file of its tf.train.Examples.
struct DataEnv {
  bench::TempDir dir{"bench-data"};
  std::string path = dir / "clicks.tfrecord";
  std::size_t file_bytes = 0;

  DataEnv() {
    std::mt19937_64 random(1);
    data::TFRecordWriter out(path);
    for (std::size_t i = 0; i < kExamples; ++i) {
      ctr::ClickExample e;
      for (const std::uint32_t vocabulary : kVocabulary)
        e.field_values.push_back(static_cast<std::uint32_t>(random() % vocabulary));
      e.label = static_cast<float>(random() % 2);
      e.true_probability = 0.25;
      out.write(ctr::serialized_example(e));
    }
    out.close();
    file_bytes =
        static_cast<std::size_t>(std::ifstream(path, std::ios::binary | std::ios::ate).tellg());
  }
};

DataEnv& env() {
  static DataEnv e;
  return e;
}

// One batch as the hand loop makes it, in ctr::parse_click_examples' layout.
struct Columns {
  std::vector<std::string> fields;  // [n, 8] row-major
  std::vector<float> labels, probabilities;
  std::vector<Tensor> tensors() {
    const std::size_t n = labels.size();
    return {Tensor::from_vector(std::move(fields), {n, kFields.size()}),
            Tensor::from_vector(std::move(labels), {n}),
            Tensor::from_vector(std::move(probabilities), {n})};
  }
};

// ---- the hand-written loop -------------------------------------------------------------------

std::uint64_t varint(const char*& p, const char* end) {
  std::uint64_t v = 0;
  for (int shift = 0; p < end && shift < 64; shift += 7) {
    const auto byte = static_cast<unsigned char>(*p++);
    v |= std::uint64_t{byte & 0x7fu} << shift;
    if (!(byte & 0x80)) return v;
  }
  throw DataLoss("bad varint");
}

// The length-delimited fields of a message: calls fn(field number, begin, end) for each.
template <class Fn>
void each_field(const char* p, const char* end, Fn&& fn) {
  while (p < end) {
    const std::uint64_t key = varint(p, end);
    switch (key & 7) {
      case 0:
        varint(p, end);
        break;
      case 5:
        p += 4;
        break;
      case 1:
        p += 8;
        break;
      case 2: {
        const std::uint64_t n = varint(p, end);
        if (n > static_cast<std::uint64_t>(end - p)) throw DataLoss("field past the end");
        fn(static_cast<int>(key >> 3), p, p + n);
        p += n;
        break;
      }
      default:
        throw DataLoss("unknown wire type");
    }
  }
}

// Example{features: Features{map<string, Feature> feature = 1} = 1} into the next row of `out`
// (whose fields are sized for the batch).
void decode_example(const char* p, const char* end, Columns& out) {
  const std::size_t row = out.labels.size();
  std::size_t found = 0;
  each_field(p, end, [&](int number, const char* fp, const char* fend) {
    if (number != 1) return;
    each_field(fp, fend, [&](int entry_number, const char* ep, const char* eend) {
      if (entry_number != 1) return;
      std::string_view key;
      const char* value = nullptr;
      const char* value_end = nullptr;
      each_field(ep, eend, [&](int n, const char* b, const char* e) {
        if (n == 1) key = std::string_view(b, static_cast<std::size_t>(e - b));
        if (n == 2) value = b, value_end = e;
      });
      if (!value) return;
      each_field(value, value_end, [&](int kind, const char* lp, const char* lend) {
        if (kind == 1) {  // BytesList{repeated bytes value = 1}
          each_field(lp, lend, [&](int, const char* b, const char* e) {
            for (std::size_t f = 0; f < kFields.size(); ++f)
              if (key == kFields[f]) {
                out.fields[row * kFields.size() + f].assign(b, e);
                ++found;
              }
          });
        } else if (kind == 2) {  // FloatList{repeated float value = 1 [packed]}
          each_field(lp, lend, [&](int, const char* b, const char*) {
            float v;
            std::memcpy(&v, b, sizeof v);
            (key == "label" ? out.labels : out.probabilities).push_back(v);
            ++found;
          });
        }
      });
    });
  });
  if (found != kFields.size() + 2) throw DataLoss("an example lacks a feature");
}

void hand_loop(benchmark::State& state) {
  DataEnv& e = env();
  for (auto _ : state) {
    std::ifstream in(e.path, std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t examples = 0;
    Columns batch;
    for (std::size_t at = 0; at < file.size();) {
      std::uint64_t length;
      std::uint32_t length_crc, data_crc;
      if (file.size() - at < 12) throw DataLoss("a cut record header");
      std::memcpy(&length, file.data() + at, 8);
      std::memcpy(&length_crc, file.data() + at + 8, 4);
      if (observe::masked_crc32c(std::string_view(file.data() + at, 8)) != length_crc)
        throw DataLoss("bad length CRC");
      if (file.size() - at - 12 < length + 4) throw DataLoss("a cut record");
      const char* record = file.data() + at + 12;
      std::memcpy(&data_crc, record + length, 4);
      if (observe::masked_crc32c(std::string_view(record, length)) != data_crc)
        throw DataLoss("bad data CRC");
      if (batch.labels.empty()) batch.fields.assign(kBatch * kFields.size(), {});
      decode_example(record, record + length, batch);
      at += 12 + length + 4;
      ++examples;
      if (batch.labels.size() == kBatch || at == file.size()) {
        batch.fields.resize(batch.labels.size() * kFields.size());
        benchmark::DoNotOptimize(batch.tensors());
        batch = Columns{};
      }
    }
    if (examples != kExamples) state.SkipWithError("the hand loop lost examples");
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kExamples));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * e.file_bytes));
}

// ---- the pipeline ----------------------------------------------------------------------------

void pipeline(benchmark::State& state) {
  DataEnv& e = env();
  const data::Dataset batches =
      data::TFRecordDataset({e.path})
          .batch(kBatch)
          .map(ctr::parse_click_examples, static_cast<int>(state.range(0)))
          .prefetch(2);
  for (auto _ : state) {
    std::size_t examples = 0;
    const auto it = batches.make_iterator();
    while (auto batch = it->next()) examples += batch->components[1].size();
    if (examples != kExamples) state.SkipWithError("the pipeline lost examples");
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kExamples));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * e.file_bytes));
}

}  // namespace

BENCHMARK(hand_loop)->Name("data/parse/hand_loop")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(pipeline)
    ->Name("data/parse/pipeline")
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  return bench::run_registered_benchmarks("bench_data");
}
