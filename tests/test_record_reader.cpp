// Reading and writing a dataset's files (data/record_reader.hpp,
// data/record_writer.hpp): TFRecord files round-trip uncompressed, ZLIB and
// GZIP; text lines come without "\n" or
// "\r\n"; a missing file is NotFound, and a damaged or truncated record
// DataLoss naming the file and the byte offset. A hidden case reads the files
// an independent writer made (tools/write_examples.py, python3-protobuf): CTest
// runs it after that script.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "psflow/data/example.hpp"
#include "psflow/data/record_reader.hpp"
#include "psflow/data/record_writer.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

using Catch::Contains;
using psflow::DataLoss;
using psflow::NotFound;
namespace data = psflow::data;
using psflow::testing::TempDir;

namespace {

std::vector<std::string> sample_records() {
  std::vector<std::string> records{"", "a", std::string("n\0l", 3)};
  records.push_back(std::string(300000, 'r'));  // larger than the readers' buffers
  for (int i = 0; i < 100; ++i) records.push_back("record " + std::to_string(i));
  return records;
}

std::vector<std::string> read_all(const std::string& path, const std::string& compression) {
  data::TFRecordReader reader(path, compression);
  std::vector<std::string> out;
  while (auto r = reader.next()) out.push_back(std::move(*r));
  return out;
}

// What DataLoss reading every record of `path` throws.
std::string data_loss(const std::string& path, const std::string& compression = "") {
  try {
    read_all(path, compression);
  } catch (const DataLoss& e) {
    return e.what();
  }
  FAIL("no DataLoss reading " << path);
  return {};
}

}  // namespace

TEST_CASE("TFRecord files round-trip, uncompressed, ZLIB and GZIP") {
  TempDir dir("records");
  const auto records = sample_records();
  for (const std::string compression : {"", "ZLIB", "GZIP"}) {
    INFO("compression '" << compression << "'");
    const std::string path = dir / ("r" + compression);
    {
      data::TFRecordWriter writer(path, compression);
      for (const auto& r : records) writer.write(r);
      writer.close();
    }
    CHECK(read_all(path, compression) == records);
  }
  // The uncompressed file is exactly the framing observe/tfrecord.hpp writes.
  std::string framed;
  for (const auto& r : records) framed += psflow::observe::frame_tfrecord(r);
  CHECK(psflow::testing::read_file(dir / "r") == framed);
  // GZIP output is a gzip file (magic 1f 8b).
  CHECK(psflow::testing::read_file(dir / "rGZIP").substr(0, 2) == "\x1f\x8b");
}

TEST_CASE("text lines come without their line ends, compressed or not") {
  TempDir dir("lines");
  const std::string text = "first\r\nsecond\n\nlast without newline";
  psflow::testing::write_file(dir / "plain.txt", text);
  gzFile gz = gzopen((dir / "text.gz").c_str(), "wb");
  REQUIRE(gz);
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  for (const auto& [file, compression] :
       std::vector<std::pair<std::string, std::string>>{{"plain.txt", ""}, {"text.gz", "GZIP"}}) {
    INFO(file);
    data::TextLineReader reader(dir / file, compression);
    std::vector<std::string> lines;
    std::vector<std::uint64_t> numbers;
    while (auto line = reader.next()) {
      lines.push_back(*line);
      numbers.push_back(reader.line_number());
    }
    CHECK(lines == std::vector<std::string>{"first", "second", "", "last without newline"});
    CHECK(numbers == std::vector<std::uint64_t>{1, 2, 3, 4});
  }
  psflow::testing::write_file(dir / "empty.txt", "");
  CHECK_FALSE(data::TextLineReader(dir / "empty.txt").next());
  psflow::testing::write_file(dir / "newline.txt", "x\n");
  data::TextLineReader one(dir / "newline.txt");
  CHECK(one.next() == "x");
  CHECK_FALSE(one.next());
}

TEST_CASE(
    "a missing file is NotFound naming it, an unknown compression "
    "InvalidArgument") {
  CHECK_THROWS_AS(data::TFRecordReader("/nonexistent/psflow/x.tfrecord"), NotFound);
  CHECK_THROWS_WITH(data::TextLineReader("/nonexistent/psflow/x.csv"),
                    Contains("/nonexistent/psflow/x.csv"));
  TempDir dir("records");
  psflow::testing::write_file(dir / "f", "");
  CHECK_THROWS_WITH(data::TFRecordReader(dir / "f", "BZIP2"), Contains("unknown compression"));
}

TEST_CASE(
    "a damaged or truncated record is DataLoss naming the file and the "
    "byte offset") {
  TempDir dir("records");
  const std::string first = psflow::observe::frame_tfrecord("hello");  // 21 bytes
  const std::string second = psflow::observe::frame_tfrecord("world!");
  const std::string good = first + second;
  const std::string path = dir / "bad.tfrecord";

  std::string bad_data = good;
  bad_data[first.size() + 12] ^= 1;  // a byte of "world!"
  psflow::testing::write_file(path, bad_data);
  CHECK_THAT(data_loss(path), Contains(path) && Contains("record at byte 21") &&
                                  Contains("data whose checksum does not match"));

  std::string bad_length = good;
  bad_length[first.size()] ^= 1;
  psflow::testing::write_file(path, bad_length);
  CHECK_THAT(data_loss(path), Contains("record at byte 21") && Contains("length whose checksum"));

  for (std::size_t cut : {first.size() + 5, first.size() + 14, good.size() - 2}) {
    INFO("cut at " << cut);
    psflow::testing::write_file(path, good.substr(0, cut));
    CHECK_THAT(data_loss(path), Contains("record at byte 21") && Contains("truncated"));
  }

  // Compressed data that is damaged, or read with the wrong compression type.
  {
    data::TFRecordWriter writer(dir / "z", "ZLIB");
    writer.write("payload");
  }
  std::string z = psflow::testing::read_file(dir / "z");
  CHECK_THAT(data_loss(dir / "z", "GZIP"), Contains("compression type right"));
  psflow::testing::write_file(dir / "z", z.substr(0, z.size() - 3));
  CHECK_THAT(data_loss(dir / "z", "ZLIB"), Contains("ends early"));
}

// Run by CTest after tools/write_examples.py DIR, with
// PSFLOW_INDEPENDENT_EXAMPLES=DIR.
TEST_CASE(
    "files written by an independent TFRecord and tf.Example writer read "
    "back exactly",
    "[.independent]") {
  const char* dir = std::getenv("PSFLOW_INDEPENDENT_EXAMPLES");
  REQUIRE(dir);
  const std::map<std::string, data::Feature> features{
      {"id", data::FixedLenFeature{{2}, psflow::DType::int64, {}}},
      {"score", data::FixedLenFeature{{2}, psflow::DType::float32, {}}},
      {"user", data::FixedLenFeature{{}, psflow::DType::string, {}}},
      {"tags", data::VarLenFeature{psflow::DType::string}},
      {"blob", data::FixedLenFeature{{1}, psflow::DType::string, {}}}};
  for (const auto& [file, compression] :
       std::vector<std::pair<std::string, std::string>>{{"examples.tfrecord", ""},
                                                        {"examples.tfrecord.gz", "GZIP"},
                                                        {"examples.tfrecord.zlib", "ZLIB"}}) {
    INFO(file);
    const auto records = read_all(std::string(dir) + "/" + file, compression);
    REQUIRE(records.size() == 50);
    const auto parsed = data::parse_example(psflow::Tensor::from_vector(records), features);
    const auto ids = std::get<psflow::Tensor>(parsed.at("id")).values<std::int64_t>();
    const auto scores = std::get<psflow::Tensor>(parsed.at("score")).values<float>();
    const auto users = std::get<psflow::Tensor>(parsed.at("user")).values<std::string>();
    const auto blobs = std::get<psflow::Tensor>(parsed.at("blob")).values<std::string>();
    const auto& tags = std::get<std::array<psflow::Tensor, 3>>(parsed.at("tags"));
    std::vector<std::int64_t> tag_indices;
    std::vector<std::string> tag_values;
    for (std::int64_t i = 0; i < 50; ++i) {
      const auto at = static_cast<std::size_t>(i);
      CHECK(ids[2 * at] == i);
      CHECK(ids[2 * at + 1] == -i * 1000000007);
      CHECK(scores[2 * at] == static_cast<float>(i) / 4);
      CHECK(scores[2 * at + 1] == -1.5f);
      CHECK(users[at] == std::string("user:").append(std::to_string(i)));
      std::string blob;
      for (int b = 0; b < i % 7; ++b) blob.push_back(static_cast<char>(b));
      CHECK(blobs[at] == blob);
      for (std::int64_t k = 0; k < i % 4; ++k) {
        tag_indices.insert(tag_indices.end(), {i, k});
        tag_values.push_back(std::string("t").append(std::to_string(k)));  // not "t" + ...: a
                                                                           // false -Wrestrict
      }
    }
    const auto got_indices = tags[0].values<std::int64_t>();
    CHECK(std::vector<std::int64_t>(got_indices.begin(), got_indices.end()) == tag_indices);
    const auto got_values = tags[1].values<std::string>();
    CHECK(std::vector<std::string>(got_values.begin(), got_values.end()) == tag_values);
    CHECK(tags[2].equals(psflow::Tensor::from_vector<std::int64_t>({50, 3})));
  }
}
