// Fashion-MNIST as a sparse, hashed-feature problem: a real data set for the CTR example's
// embedding model, next to its synthetic click log (click_log.hpp).
//
// A CTR model sees each example as a bag of categorical feature ids, looked up in hashed
// embedding tables and summed or averaged (TF's embedding_lookup_sparse). This turns an image
// into such a bag, so the same model code can train on real data with a known reference (the
// dense MLP of examples/trainer reaches about 0.89 test accuracy):
//
//   intensity   pixel byte / 255, as fashion_mnist::load gives it
//   bucket      0 for an inactive pixel (intensity <= threshold, default 0.1); for an active
//               one 1 + floor((intensity - threshold) / (1 - threshold) * buckets), at most
//               `buckets` (default 4): the range above the threshold cut into equal parts
//   ids         for each active pixel p = 28 * row + col, in row-major order:
//                 pixel feature   hash_of(3, p, bucket(p)) % table_rows
//                 right cross     hash_of(4, p, bucket(p), bucket(p + 1)) % table_rows
//                                 (unless col is 27)
//                 lower cross     hash_of(5, p, bucket(p), bucket(p + 28)) % table_rows
//                                 (unless row is 27)
//               (hash_of in feature_hash.hpp). The crosses pair a pixel with its right and
//               lower neighbours' buckets, 0 included, so they encode edges and strokes; set
//               neighbour_crosses = false for the pixel features alone.
//
// An image gets a variable number of ids: on average about 1240 for a T-shirt and 590 for a
// sandal, from 89 to 2152 over the whole data set. The feature space is 784 * buckets pixel
// features plus 2 * 784 * buckets * (buckets + 1) crosses (34496 with 4 buckets), hashed into
// `table_rows` rows (default 2^17); as in any hashed feature space some features share a row
// (the 60000 training images use 29008 distinct rows), and a bag can hold one id twice (most
// images have a few such pairs; embedding_lookup_sparse's sum counts both). Everything is a
// pure function of the pixels: the same image gives the same ids on every platform. Features
// for the 10000 test images take about 0.1 s to compute (optimised build).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ctr/feature_hash.hpp"
#include "psflow/core/error.hpp"
#include "trainer/fashion_mnist.hpp"

namespace ctr {

struct SparseImageConfig {
  std::uint64_t table_rows = std::uint64_t{1} << 17;
  double threshold = 0.1;  // a pixel is active when its intensity is above this
  int buckets = 4;         // intensity buckets of active pixels
  bool neighbour_crosses = true;
};

struct SparseImage {
  std::vector<std::int64_t> ids;  // each in [0, table_rows)
  int label = 0;                  // 0..9
};

// A batch in the layout of a SparseTensor of ids (TF's embedding_lookup_sparse input): entry k
// is ids[k] at (row indices[2k], column indices[2k + 1]) of a [size(), max_ids] matrix.
struct SparseImageBatch {
  std::vector<std::int64_t> indices;  // [n, 2] row-major: (example, position in its bag)
  std::vector<std::int64_t> ids;      // [n]
  std::int64_t max_ids = 0;           // the longest bag: dense_shape = {size(), max_ids}
  std::vector<int> labels;            // [size()]
  std::size_t size() const noexcept { return labels.size(); }
};

// The bucket (0: inactive, else 1..buckets) of one intensity in [0, 1].
inline int intensity_bucket(double intensity, const SparseImageConfig& config = {});

// The ids of one image of fashion_mnist::kPixels intensities.
inline std::vector<std::int64_t> sparse_image_features(std::span<const float> pixels,
                                                       const SparseImageConfig& config = {});

// Example `index` of `data`, and every example of `data` in order.
inline SparseImage sparse_image(const fashion_mnist::Dataset& data, std::size_t index,
                                const SparseImageConfig& config = {});
inline std::vector<SparseImage> sparse_images(const fashion_mnist::Dataset& data,
                                              const SparseImageConfig& config = {});

// images[first], images[first + stride], ... (count of them) as one batch.
inline SparseImageBatch sparse_image_batch(const std::vector<SparseImage>& images,
                                           std::size_t first, std::size_t count,
                                           std::size_t stride = 1);

// ---------------------------------------------------------------------------------------------
// Implementation.

namespace detail {

inline void check_sparse_image_config(const SparseImageConfig& config) {
  if (config.table_rows == 0)
    throw psflow::InvalidArgument(
        "ctr::SparseImageConfig: table_rows is 0; the hashed table needs at least one row");
  if (config.buckets < 1)
    throw psflow::InvalidArgument("ctr::SparseImageConfig: buckets is " +
                                  std::to_string(config.buckets) + "; use at least 1");
  if (!(config.threshold >= 0 && config.threshold < 1))
    throw psflow::InvalidArgument("ctr::SparseImageConfig: threshold " +
                                  std::to_string(config.threshold) +
                                  " must lie in [0, 1) so that some intensity is above it");
}

}  // namespace detail

inline int intensity_bucket(double intensity, const SparseImageConfig& config) {
  if (!(intensity > config.threshold)) return 0;
  const double scaled = (intensity - config.threshold) / (1 - config.threshold) * config.buckets;
  const int bucket = 1 + static_cast<int>(std::floor(scaled));
  return bucket > config.buckets ? config.buckets : bucket;
}

inline std::vector<std::int64_t> sparse_image_features(std::span<const float> pixels,
                                                       const SparseImageConfig& config) {
  detail::check_sparse_image_config(config);
  constexpr std::size_t rows = fashion_mnist::kRows, cols = fashion_mnist::kCols;
  if (pixels.size() != rows * cols)
    throw psflow::InvalidArgument("ctr::sparse_image_features: got " +
                                  std::to_string(pixels.size()) + " pixels; pass one " +
                                  std::to_string(rows) + "x" + std::to_string(cols) + " image (" +
                                  std::to_string(rows * cols) + " intensities)");
  std::vector<int> bucket(pixels.size());
  for (std::size_t p = 0; p < pixels.size(); ++p) bucket[p] = intensity_bucket(pixels[p], config);
  const auto row_of = [&](std::uint64_t h) {
    return static_cast<std::int64_t>(h % config.table_rows);
  };
  std::vector<std::int64_t> ids;
  for (std::size_t p = 0; p < pixels.size(); ++p) {
    if (bucket[p] == 0) continue;
    ids.push_back(row_of(hash_of(3, p, bucket[p])));
    if (!config.neighbour_crosses) continue;
    if (p % cols + 1 < cols) ids.push_back(row_of(hash_of(4, p, bucket[p], bucket[p + 1])));
    if (p / cols + 1 < rows) ids.push_back(row_of(hash_of(5, p, bucket[p], bucket[p + cols])));
  }
  return ids;
}

inline SparseImage sparse_image(const fashion_mnist::Dataset& data, std::size_t index,
                                const SparseImageConfig& config) {
  if (index >= data.size())
    throw psflow::InvalidArgument("ctr::sparse_image: example " + std::to_string(index) +
                                  " is out of range (" + std::to_string(data.size()) +
                                  " examples)");
  const float* image = data.images.data<float>() + index * fashion_mnist::kPixels;
  return {sparse_image_features({image, fashion_mnist::kPixels}, config), data.label_ids[index]};
}

inline std::vector<SparseImage> sparse_images(const fashion_mnist::Dataset& data,
                                              const SparseImageConfig& config) {
  std::vector<SparseImage> out;
  out.reserve(data.size());
  for (std::size_t i = 0; i < data.size(); ++i) out.push_back(sparse_image(data, i, config));
  return out;
}

inline SparseImageBatch sparse_image_batch(const std::vector<SparseImage>& images,
                                           std::size_t first, std::size_t count,
                                           std::size_t stride) {
  if (stride == 0 ||
      (count > 0 && (first >= images.size() || (count - 1) > (images.size() - 1 - first) / stride)))
    throw psflow::InvalidArgument(
        "ctr::sparse_image_batch: " + std::to_string(count) + " images from " +
        std::to_string(first) + " with stride " + std::to_string(stride) + " do not fit in the " +
        std::to_string(images.size()) + " given; ask for fewer, or a stride of at least 1");
  SparseImageBatch b;
  for (std::size_t i = 0; i < count; ++i) {
    const SparseImage& image = images[first + i * stride];
    for (std::size_t k = 0; k < image.ids.size(); ++k) {
      b.indices.push_back(static_cast<std::int64_t>(i));
      b.indices.push_back(static_cast<std::int64_t>(k));
      b.ids.push_back(image.ids[k]);
    }
    b.max_ids = std::max(b.max_ids, static_cast<std::int64_t>(image.ids.size()));
    b.labels.push_back(image.label);
  }
  return b;
}

}  // namespace ctr
