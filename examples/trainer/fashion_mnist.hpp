// Fashion-MNIST for the trainer example: reads the gzip'd IDX files of Debian's package
// dataset-fashion-mnist (/usr/share/datasets/fashion-mnist) into tensors, which the trainer
// shards, shuffles and batches with a data::Dataset.
//
//   auto train = fashion_mnist::load(dir, fashion_mnist::Split::train);   // 60000 examples
//   // train.images float32 [60000,784], train.labels one-hot float32 [60000,10]
//   fashion_mnist::Batch b = fashion_mnist::slice(test, 0, 1000);          // in order
//
// The IDX format (big-endian): images "00 00 08 03, N, rows, cols" then N*rows*cols bytes;
// labels "00 00 08 01, N" then N bytes. Everything the file claims is checked against what it
// holds: a missing file throws psflow::NotFound; a truncated or corrupt gzip stream, a wrong
// magic number, image dimensions other than 28x28, fewer or more bytes than the header claims,
// an image/label count mismatch and a label outside 0..9 throw psflow::DataLoss. Every message
// names the file and what is wrong with it.
//
// Header-only; depends on psflow's core (Tensor, errors) and zlib. A const Dataset may be read
// from several threads.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"

namespace fashion_mnist {

inline constexpr std::size_t kRows = 28;
inline constexpr std::size_t kCols = 28;
inline constexpr std::size_t kPixels = kRows * kCols;  // 784
inline constexpr std::size_t kClasses = 10;
inline constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";

// Fashion-MNIST's class names, by label.
inline constexpr const char* kClassNames[kClasses] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

enum class Split { train, test };

// N examples: images float32 [N,784] in [0,1] (pixel / 255), labels one-hot float32 [N,10], and
// the raw labels 0..9.
struct Dataset {
  psflow::Tensor images;
  psflow::Tensor labels;
  std::vector<int> label_ids;
  std::size_t size() const noexcept { return label_ids.size(); }
};

// One mini-batch, shaped like a Dataset.
struct Batch {
  psflow::Tensor images;  // float32 [B,784]
  psflow::Tensor labels;  // float32 [B,10]
  std::vector<int> label_ids;
  std::size_t size() const noexcept { return label_ids.size(); }
};

// The whole decompressed content of a gzip file (a plain file is read as is, as zlib does).
// NotFound when it does not exist or cannot be opened; DataLoss when the gzip stream is
// truncated or corrupt (bad data, bad CRC, missing trailer).
inline std::vector<unsigned char> read_gz_file(const std::string& path);

// One IDX file, validated. `expected_dims`: 3 for images (N, rows, cols), 1 for labels (N).
struct IdxFile {
  std::vector<std::uint32_t> dims;
  std::vector<unsigned char> data;  // the N*... payload bytes
};
inline IdxFile read_idx_file(const std::string& path, std::size_t expected_dims);

// The images and labels of a pair of files, validated against each other.
inline Dataset load_files(const std::string& images_path, const std::string& labels_path);
// "<dir>/train-images-idx3-ubyte.gz" + "<dir>/train-labels-idx1-ubyte.gz", or t10k-* for test.
inline Dataset load(const std::string& dir, Split split);

// Examples [begin, begin + count) as a batch, in order (e.g. for evaluation).
inline Batch slice(const Dataset& data, std::size_t begin, std::size_t count);

// ---------------------------------------------------------------------------------------------
// Implementation.

namespace detail {

inline constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
inline constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
// No real IDX file of this kind is larger; a bigger claim is corruption, caught before
// allocating.
inline constexpr std::uint32_t kMaxExamples = 10'000'000;

inline std::uint32_t big_endian_u32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

inline std::string hex32(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

inline void copy_rows(const Dataset& from, const std::vector<std::size_t>& rows,
                      psflow::Tensor& images, psflow::Tensor& labels, std::vector<int>& ids) {
  images = psflow::Tensor::uninitialized(psflow::DType::float32, {rows.size(), kPixels});
  labels = psflow::Tensor::uninitialized(psflow::DType::float32, {rows.size(), kClasses});
  ids.resize(rows.size());
  const float* src_images = from.images.data<float>();
  const float* src_labels = from.labels.data<float>();
  float* dst_images = images.data<float>();
  float* dst_labels = labels.data<float>();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::size_t r = rows[i];
    std::memcpy(dst_images + i * kPixels, src_images + r * kPixels, kPixels * sizeof(float));
    std::memcpy(dst_labels + i * kClasses, src_labels + r * kClasses, kClasses * sizeof(float));
    ids[i] = from.label_ids[r];
  }
}

}  // namespace detail

inline std::vector<unsigned char> read_gz_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw psflow::NotFound(
        "Fashion-MNIST file " + path +
        " does not exist: install Debian's dataset-fashion-mnist package "
        "(apt-get install dataset-fashion-mnist) or pass --data_dir=<dir with the "
        "*-ubyte.gz files>");
  errno = 0;
  std::unique_ptr<gzFile_s, detail::GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file)
    throw psflow::NotFound("cannot open Fashion-MNIST file " + path + ": " +
                           (errno ? std::strerror(errno) : "out of memory"));
  gzbuffer(file.get(), 1 << 17);
  std::vector<unsigned char> out;
  if (const auto compressed = std::filesystem::file_size(path, ec);
      !ec && compressed < (std::uintmax_t{1} << 32))
    out.reserve(static_cast<std::size_t>(compressed) * 2);
  constexpr unsigned kChunk = 1u << 20;
  for (;;) {
    const std::size_t old = out.size();
    out.resize(old + kChunk);
    const int got = gzread(file.get(), out.data() + old, kChunk);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      throw psflow::DataLoss("Fashion-MNIST file " + path +
                             " is corrupt: the gzip stream fails after " + std::to_string(old) +
                             " decompressed bytes (" + (message ? message : "unknown error") +
                             "); reinstall dataset-fashion-mnist");
    }
    out.resize(old + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  // zlib reports a stream that ends early (no trailer) as Z_BUF_ERROR at EOF, not as a failed read.
  int code = Z_OK;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END)
    throw psflow::DataLoss("Fashion-MNIST file " + path + " is truncated or corrupt after " +
                           std::to_string(out.size()) + " decompressed bytes (" +
                           (message ? message : "unknown error") +
                           "); reinstall dataset-fashion-mnist");
  return out;
}

inline IdxFile read_idx_file(const std::string& path, std::size_t expected_dims) {
  const std::vector<unsigned char> bytes = read_gz_file(path);
  const std::uint32_t expected_magic =
      expected_dims == 3 ? detail::kImagesMagic : detail::kLabelsMagic;
  const std::size_t header = 4 + 4 * expected_dims;
  const std::string what = expected_dims == 3 ? "an IDX image file" : "an IDX label file";
  if (bytes.size() < header)
    throw psflow::DataLoss(
        "Fashion-MNIST file " + path + " is truncated: " + std::to_string(bytes.size()) +
        " bytes, less than the " + std::to_string(header) + "-byte header of " + what);
  const std::uint32_t magic = detail::big_endian_u32(bytes.data());
  if (magic != expected_magic)
    throw psflow::DataLoss("Fashion-MNIST file " + path + " has magic number " +
                           detail::hex32(magic) + ", expected " + detail::hex32(expected_magic) +
                           " for " + what + " (is it the right file, and is it intact?)");
  IdxFile idx;
  std::size_t payload = 1;
  for (std::size_t d = 0; d < expected_dims; ++d) {
    idx.dims.push_back(detail::big_endian_u32(bytes.data() + 4 + 4 * d));
    payload *= idx.dims.back();
  }
  if (idx.dims[0] == 0 || idx.dims[0] > detail::kMaxExamples)
    throw psflow::DataLoss("Fashion-MNIST file " + path + " claims " + std::to_string(idx.dims[0]) +
                           " examples; a valid file has between 1 and " +
                           std::to_string(detail::kMaxExamples));
  if (expected_dims == 3 && (idx.dims[1] != kRows || idx.dims[2] != kCols))
    throw psflow::DataLoss("Fashion-MNIST file " + path + " claims images of " +
                           std::to_string(idx.dims[1]) + "x" + std::to_string(idx.dims[2]) +
                           " pixels; Fashion-MNIST images are 28x28");
  const std::size_t actual = bytes.size() - header;
  if (actual != payload)
    throw psflow::DataLoss("Fashion-MNIST file " + path +
                           (actual < payload ? " is truncated" : " has trailing data") +
                           ": its header claims " + std::to_string(idx.dims[0]) + " examples (" +
                           std::to_string(payload) + " bytes) but it holds " +
                           std::to_string(actual) + " bytes after the header");
  idx.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return idx;
}

inline Dataset load_files(const std::string& images_path, const std::string& labels_path) {
  const IdxFile images = read_idx_file(images_path, 3);
  const IdxFile labels = read_idx_file(labels_path, 1);
  const std::size_t n = images.dims[0];
  if (labels.dims[0] != n)
    throw psflow::DataLoss("Fashion-MNIST files disagree: " + images_path + " holds " +
                           std::to_string(n) + " images but " + labels_path + " holds " +
                           std::to_string(labels.dims[0]) + " labels");
  Dataset out;
  out.images = psflow::Tensor::uninitialized(psflow::DType::float32, {n, kPixels});
  out.labels = psflow::Tensor(psflow::DType::float32, {n, kClasses});  // zeros
  out.label_ids.resize(n);
  float* pixels = out.images.data<float>();
  for (std::size_t i = 0; i < n * kPixels; ++i)
    pixels[i] = static_cast<float>(images.data[i]) * (1.0f / 255.0f);
  float* one_hot = out.labels.data<float>();
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned label = labels.data[i];
    if (label >= kClasses)
      throw psflow::DataLoss("Fashion-MNIST file " + labels_path + " holds label " +
                             std::to_string(label) + " at example " + std::to_string(i) +
                             "; labels are 0..9");
    out.label_ids[i] = static_cast<int>(label);
    one_hot[i * kClasses + label] = 1.0f;
  }
  return out;
}

inline Dataset load(const std::string& dir, Split split) {
  const std::string prefix = dir + (dir.empty() || dir.back() == '/' ? "" : "/") +
                             (split == Split::train ? "train" : "t10k");
  return load_files(prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz");
}

inline Batch slice(const Dataset& data, std::size_t begin, std::size_t count) {
  if (begin > data.size() || count > data.size() - begin)
    throw psflow::InvalidArgument("fashion_mnist::slice: examples [" + std::to_string(begin) +
                                  ", " + std::to_string(begin + count) + ") are out of range (" +
                                  std::to_string(data.size()) + " examples)");
  std::vector<std::size_t> rows(count);
  std::iota(rows.begin(), rows.end(), begin);
  Batch out;
  detail::copy_rows(data, rows, out.images, out.labels, out.label_ids);
  return out;
}

}  // namespace fashion_mnist
