// The trainer example's Fashion-MNIST loader: the real files of Debian's dataset-fashion-mnist
// load with the right shapes and labels; the trainer's Dataset shards them; slices; truncated,
// corrupt, mislabelled or missing files throw DataLoss / NotFound naming the file.
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "psflow/data.hpp"
#include "support/temp_dir.hpp"
#include "trainer/fashion_mnist.hpp"

namespace fs = std::filesystem;

using psflow::testing::TempDir;

namespace {

const std::string kDir = fashion_mnist::kDefaultDir;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// `content` gzip-compressed into `path`.
void write_gz(const fs::path& path, const std::vector<unsigned char>& content) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, content.data(), static_cast<unsigned>(content.size())) ==
          static_cast<int>(content.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

std::vector<unsigned char> idx_header(std::uint32_t magic, std::vector<std::uint32_t> dims) {
  std::vector<unsigned char> out;
  dims.insert(dims.begin(), magic);
  for (std::uint32_t v : dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<unsigned char>(v >> shift));
  return out;
}

// n examples; example i has every pixel i / 1000 and label i % 10.
fashion_mnist::Dataset synthetic(std::size_t n) {
  fashion_mnist::Dataset d;
  d.images = psflow::Tensor(psflow::DType::float32, {n, fashion_mnist::kPixels});
  d.labels = psflow::Tensor(psflow::DType::float32, {n, fashion_mnist::kClasses});
  for (std::size_t i = 0; i < n; ++i) {
    std::fill_n(d.images.data<float>() + i * fashion_mnist::kPixels, fashion_mnist::kPixels,
                static_cast<float>(i) / 1000.0f);
    d.labels.data<float>()[i * fashion_mnist::kClasses + i % 10] = 1.0f;
    d.label_ids.push_back(static_cast<int>(i % 10));
  }
  return d;
}

// The example index of each row (pixel 0 * 1000).
std::vector<int> example_ids(const psflow::Tensor& images) {
  std::vector<int> ids;
  for (std::size_t r = 0; r < images.shape()[0]; ++r)
    ids.push_back(
        static_cast<int>(std::lround(images.data<float>()[r * fashion_mnist::kPixels] * 1000.0f)));
  return ids;
}

void check_dataset(const fashion_mnist::Dataset& d, std::size_t n) {
  REQUIRE(d.size() == n);
  CHECK(d.images.dtype() == psflow::DType::float32);
  CHECK(d.labels.dtype() == psflow::DType::float32);
  CHECK(d.images.shape() == psflow::Shape{n, 784});
  CHECK(d.labels.shape() == psflow::Shape{n, 10});
  const auto pixels = d.images.values<float>();
  const auto [lo, hi] = std::minmax_element(pixels.begin(), pixels.end());
  CHECK(*lo == 0.0f);
  CHECK(*hi == 1.0f);
  std::vector<std::size_t> per_class(10, 0);
  bool labels_in_range = true, one_hot_ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    const int label = d.label_ids[i];
    if (label < 0 || label >= 10) {
      labels_in_range = false;
      continue;
    }
    ++per_class[static_cast<std::size_t>(label)];
    const float* row = d.labels.data<float>() + i * 10;
    for (int k = 0; k < 10; ++k) one_hot_ok = one_hot_ok && row[k] == (k == label ? 1.0f : 0.0f);
  }
  CHECK(labels_in_range);
  CHECK(one_hot_ok);
  for (std::size_t c = 0; c < 10; ++c) CHECK(per_class[c] == n / 10);  // Fashion-MNIST is balanced
}

}  // namespace

TEST_CASE("the real Fashion-MNIST files load with the right shapes, pixel range and labels") {
  INFO("needs Debian's dataset-fashion-mnist package in " << kDir
                                                          << " (scripts/setup.sh installs it)");
  REQUIRE(fs::exists(kDir + "/t10k-images-idx3-ubyte.gz"));
  check_dataset(fashion_mnist::load(kDir, fashion_mnist::Split::test), 10000);
  const fashion_mnist::Dataset train = fashion_mnist::load(kDir, fashion_mnist::Split::train);
  check_dataset(train, 60000);

  // Worker 1 of 2 gets examples 1, 3, 5, ... through the trainer's Dataset.
  const auto odd = psflow::data::Dataset::from_tensor_slices({train.images, train.labels})
                       .shard(2, 1)
                       .batch(30000)
                       .make_iterator()
                       ->next();
  REQUIRE(odd);
  REQUIRE(odd->components[0].shape() == psflow::Shape{30000, 784});
  CHECK(std::equal(odd->components[0].data<float>(), odd->components[0].data<float>() + 784,
                   train.images.data<float>() + 784));
  CHECK(std::equal(odd->components[1].data<float>(), odd->components[1].data<float>() + 10,
                   train.labels.data<float>() + 10));
}

TEST_CASE("slice gives examples in order, and refuses a range past the end") {
  const fashion_mnist::Dataset d = synthetic(10);
  const fashion_mnist::Batch tail = fashion_mnist::slice(d, 8, 2);
  CHECK(example_ids(tail.images) == std::vector<int>{8, 9});
  CHECK(tail.label_ids == std::vector<int>{8, 9});
  CHECK(tail.labels.shape() == psflow::Shape{2, 10});
  CHECK_THROWS_AS(fashion_mnist::slice(d, 8, 3), psflow::InvalidArgument);
}

TEST_CASE(
    "truncated, corrupt or inconsistent files throw DataLoss naming the file, missing ones "
    "NotFound") {
  TempDir tmp("fashion_mnist");
  const std::string labels = tmp.file("t10k-labels-idx1-ubyte.gz");
  const std::string images = tmp.file("t10k-images-idx3-ubyte.gz");

  SECTION("a gzip file cut in half") {
    const std::vector<char> real = read_bytes(kDir + "/t10k-labels-idx1-ubyte.gz");
    REQUIRE(real.size() > 100);
    write_bytes(labels, std::vector<char>(real.begin(), real.begin() + static_cast<std::ptrdiff_t>(
                                                                           real.size() / 2)));
    CHECK_THROWS_AS(fashion_mnist::read_idx_file(labels, 1), psflow::DataLoss);
    CHECK_THROWS_WITH(fashion_mnist::read_idx_file(labels, 1),
                      Catch::Contains(labels) && Catch::Contains("truncated"));
  }
  SECTION("a truncated copy of the real image file, through load()") {
    const std::vector<char> real = read_bytes(kDir + "/t10k-images-idx3-ubyte.gz");
    REQUIRE(real.size() > 1000);
    write_bytes(images, std::vector<char>(real.begin(), real.end() - 1000));
    fs::copy_file(kDir + "/t10k-labels-idx1-ubyte.gz", labels);
    CHECK_THROWS_AS(fashion_mnist::load(tmp.path(), fashion_mnist::Split::test), psflow::DataLoss);
    CHECK_THROWS_WITH(fashion_mnist::load(tmp.path(), fashion_mnist::Split::test),
                      Catch::Contains(images));
  }
  SECTION("flipped bytes inside the compressed stream") {
    std::vector<char> real = read_bytes(kDir + "/t10k-labels-idx1-ubyte.gz");
    for (std::size_t i = real.size() / 2; i < real.size() / 2 + 16; ++i)
      real[i] = static_cast<char>(~real[i]);
    write_bytes(labels, real);
    CHECK_THROWS_AS(fashion_mnist::read_idx_file(labels, 1), psflow::DataLoss);
  }
  SECTION("a valid gzip stream holding fewer examples than its header claims") {
    std::vector<unsigned char> content = idx_header(0x801, {100});
    content.resize(content.size() + 60, 3);
    write_gz(labels, content);
    CHECK_THROWS_WITH(fashion_mnist::read_idx_file(labels, 1), Catch::Contains(labels) &&
                                                                   Catch::Contains("truncated") &&
                                                                   Catch::Contains("100 examples"));
  }
  SECTION("more bytes than the header claims") {
    std::vector<unsigned char> content = idx_header(0x801, {10});
    content.resize(content.size() + 11, 3);
    write_gz(labels, content);
    CHECK_THROWS_WITH(fashion_mnist::read_idx_file(labels, 1), Catch::Contains("trailing data"));
  }
  SECTION("a wrong magic number (an image file read as labels)") {
    write_gz(labels, idx_header(0x803, {1, 28, 28}));
    CHECK_THROWS_WITH(fashion_mnist::read_idx_file(labels, 1),
                      Catch::Contains("magic number 0x00000803"));
  }
  SECTION("images that are not 28x28") {
    std::vector<unsigned char> content = idx_header(0x803, {2, 32, 32});
    content.resize(content.size() + 2 * 32 * 32);
    write_gz(images, content);
    CHECK_THROWS_WITH(fashion_mnist::read_idx_file(images, 3), Catch::Contains("32x32"));
  }
  SECTION("an empty file") {
    write_bytes(labels, {});
    CHECK_THROWS_AS(fashion_mnist::read_idx_file(labels, 1), psflow::DataLoss);
  }
  SECTION("a label outside 0..9, and image and label counts that disagree") {
    std::vector<unsigned char> image_content = idx_header(0x803, {2, 28, 28});
    image_content.resize(image_content.size() + 2 * 784, 255);
    write_gz(images, image_content);
    std::vector<unsigned char> label_content = idx_header(0x801, {2});
    label_content.push_back(3);
    label_content.push_back(10);
    write_gz(labels, label_content);
    CHECK_THROWS_WITH(fashion_mnist::load_files(images, labels), Catch::Contains("label 10"));
    std::vector<unsigned char> one = idx_header(0x801, {1});
    one.push_back(4);
    write_gz(labels, one);
    CHECK_THROWS_WITH(fashion_mnist::load_files(images, labels), Catch::Contains("disagree"));
    // And a consistent pair loads: all-white pixels are 1.0.
    label_content.back() = 9;
    write_gz(labels, label_content);
    const fashion_mnist::Dataset d = fashion_mnist::load_files(images, labels);
    CHECK(d.label_ids == std::vector<int>{3, 9});
    CHECK(d.images.data<float>()[0] == 1.0f);
  }
  SECTION("a missing file") {
    CHECK_THROWS_AS(fashion_mnist::load(tmp.file("nowhere"), fashion_mnist::Split::train),
                    psflow::NotFound);
    CHECK_THROWS_WITH(
        fashion_mnist::load(tmp.file("nowhere"), fashion_mnist::Split::train),
        Catch::Contains("train-images-idx3-ubyte.gz") && Catch::Contains("dataset-fashion-mnist"));
  }
}
