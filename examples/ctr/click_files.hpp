// The click log as files, and the input pipeline that reads them back: what a TF1 click model
// trains from (ctr --write_data=DIR, then ctr --train_data=DIR).
//
// The files: DIR/train-0000K-of-00008.tfrecord.gz (training examples 0 .. N-1 of the click log,
// in 8 consecutive runs) and DIR/test-00000-of-00001.tfrecord.gz (the held-out examples),
// gzip-compressed TFRecord files of tf.train.Example protocol buffers and nothing else. An
// example has
//   one string per categorical field, named by kFieldNames: "user:12345", "ad:7", ... (the
//       field's raw value, not a hash: the trainer hashes them, with string_to_hash_bucket_fast);
//   "label" (float, 0 or 1) and "true_probability" (float: the click log's true model, so that
//       the trainer states the best achievable AUC from the files alone).
//
// The pipeline (a worker's share of the training files, repeated, shuffled, batched, parsed and
// prefetched) gives elements of three components: the fields as strings [batch, F], the labels
// float32 [batch] and the true probabilities float32 [batch]. hashed_feature_ids() turns the
// strings into the model's F + C feature ids inside the graph: each field's string and each
// cross's two strings joined by "_X_" (TF's crossed columns), hashed into num_buckets.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <psflow/psflow.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ctr/click_log.hpp"

namespace ctr {

// The names of the click log's 8 default fields, in ClickLogConfig::vocabulary_sizes order.
inline const std::vector<std::string> kFieldNames = {"user",   "ad",     "site",     "campaign",
                                                     "device", "region", "position", "slot"};
inline constexpr std::size_t kTrainFiles = 8;

inline std::string train_file_name(std::size_t k) {
  char name[64];
  std::snprintf(name, sizeof name, "train-%05zu-of-%05zu.tfrecord.gz", k, kTrainFiles);
  return name;
}
inline constexpr const char* kTestFileName = "test-00000-of-00001.tfrecord.gz";

// Example `e` as the tf.train.Example written for it.
inline std::string serialized_example(const ClickExample& e) {
  psflow::data::Example example;
  for (std::size_t f = 0; f < e.field_values.size(); ++f)
    example.set(kFieldNames.at(f),
                std::vector<std::string>{kFieldNames[f] + ":" + std::to_string(e.field_values[f])});
  example.set("label", std::vector<float>{e.label});
  example.set("true_probability", std::vector<float>{static_cast<float>(e.true_probability)});
  return example.serialize();
}

// Writes the files described at the top into `dir` (made; it must not hold files already):
// training examples [0, train_examples) and held-out test examples [0, test_examples). Uses up
// to `threads` threads, a file each.
inline void write_click_files(const ClickLog& log, const std::string& dir,
                              std::uint64_t train_examples, std::uint64_t test_examples,
                              unsigned threads) {
  namespace fs = std::filesystem;
  if (log.num_fields() != kFieldNames.size() || log.config().fresh_id_rate > 0)
    throw psflow::InvalidArgument(
        "--write_data writes the default click log's 8 named fields, without --new_ids_per_step");
  if (fs::exists(dir) && !fs::is_empty(dir))
    throw psflow::AlreadyExists("--write_data=" + dir +
                                ": the directory is not empty; give a new or an empty one");
  fs::create_directories(dir);
  struct File {
    std::string path;
    std::uint64_t first, count;
  };
  std::vector<File> files;
  for (std::size_t k = 0; k < kTrainFiles; ++k) {
    const std::uint64_t begin = train_examples * k / kTrainFiles;
    const std::uint64_t end = train_examples * (k + 1) / kTrainFiles;
    files.push_back({dir + "/" + train_file_name(k), begin, end - begin});
  }
  files.push_back({dir + "/" + kTestFileName, ClickLog::kTestBegin, test_examples});
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<std::size_t> next{0};
  auto writer = [&] {
    for (std::size_t k; (k = next.fetch_add(1)) < files.size();) {
      try {
        psflow::data::TFRecordWriter out(files[k].path, "GZIP");
        for (std::uint64_t i = 0; i < files[k].count; ++i)
          out.write(serialized_example(log.example(files[k].first + i)));
        out.close();
      } catch (...) {
        errors[k] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, threads); ++t) pool.emplace_back(writer);
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// A batch of serialized examples -> {fields string [batch, F], labels [batch], true
// probabilities [batch]}: the pipeline's map function.
inline std::vector<psflow::Tensor> parse_click_examples(std::vector<psflow::Tensor> batch) {
  namespace data = psflow::data;
  std::map<std::string, data::Feature> features;
  for (const std::string& name : kFieldNames)
    features[name] = data::FixedLenFeature{psflow::Shape{}, psflow::DType::string, std::nullopt};
  for (const char* name : {"label", "true_probability"})
    features[name] = data::FixedLenFeature{psflow::Shape{}, psflow::DType::float32, std::nullopt};
  auto parsed = data::parse_example(batch.at(0), features);
  const std::size_t n = batch[0].size(), f = kFieldNames.size();
  std::vector<std::string> fields(n * f);
  for (std::size_t k = 0; k < f; ++k) {
    const auto column = std::get<psflow::Tensor>(parsed[kFieldNames[k]]).values<std::string>();
    for (std::size_t i = 0; i < n; ++i) fields[i * f + k] = column[i];
  }
  return {psflow::Tensor::from_vector(std::move(fields), {n, f}),
          std::get<psflow::Tensor>(parsed["label"]),
          std::get<psflow::Tensor>(parsed["true_probability"])};
}

// Worker `index` of `workers`: its share of the training files (whole files when there are at
// least as many files as workers, else every workers-th record), read in turn two files at a
// time, repeated forever, shuffled, batched, parsed on 2 threads and prefetched.
inline psflow::data::Dataset training_pipeline(const std::string& dir, std::size_t workers,
                                               std::size_t index, std::size_t batch_size,
                                               std::uint64_t seed) {
  namespace data = psflow::data;
  const auto read = [](std::vector<psflow::Tensor> file) {
    return data::TFRecordDataset({file.at(0).scalar<std::string>()}, "GZIP");
  };
  const data::Dataset files = data::Dataset::list_files(dir + "/train-*.tfrecord.gz");
  const data::Dataset records = workers <= kTrainFiles
                                    ? files.shard(workers, index).interleave(read, 2)
                                    : files.interleave(read, 1).shard(workers, index);
  return records.repeat()
      .shuffle(8192, seed + index)
      .batch(batch_size, true)
      .map(parse_click_examples, 2)
      .prefetch(2);
}

// The held-out examples, in batches of batch_size.
inline psflow::data::Dataset test_pipeline(const std::string& dir, std::size_t batch_size) {
  namespace data = psflow::data;
  return data::TFRecordDataset({dir + "/" + kTestFileName}, "GZIP")
      .batch(batch_size)
      .map(parse_click_examples);
}

// The model's F + C feature ids (int64 [batch, F + C]) of `fields` (string [batch, F]): each
// field's string, then each cross's two strings joined by "_X_", hashed into num_buckets.
inline psflow::Output hashed_feature_ids(psflow::Output fields, const ClickLogConfig& config,
                                         std::int64_t num_buckets) {
  namespace ops = psflow::ops;
  auto column = [&](std::size_t f) {
    return ops::slice(fields, {0, static_cast<std::int64_t>(f)}, {-1, 1});
  };
  std::vector<psflow::Output> features = {fields};
  for (const FieldCross& c : config.crosses)
    features.push_back(ops::string_join({column(c.first), column(c.second)}, "_X_"));
  return ops::string_to_hash_bucket_fast(ops::concat(features, 1), num_buckets, "feature_ids");
}

}  // namespace ctr
