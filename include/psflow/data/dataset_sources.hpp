// The sources of a Dataset (data/dataset.hpp): slices of tensors, the lines of
// text files, the records of TFRecord files, and file names matching a pattern.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/data/dataset.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <glob.h>

#include <algorithm>
#include <type_traits>

#include "psflow/data/compression.hpp"
#include "psflow/data/record_reader.hpp"
#endif

namespace psflow::data {

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

class TensorSlicesNode : public DatasetNode {
 public:
  explicit TensorSlicesNode(std::vector<Tensor> components) : components_(std::move(components)) {
    if (components_.empty()) throw InvalidArgument("from_tensor_slices needs at least one tensor");
    for (std::size_t c = 0; c < components_.size(); ++c) {
      const Tensor& t = components_[c];
      if (t.empty() || t.rank() == 0 || t.shape()[0] != components_[0].shape()[0])
        throw InvalidArgument(
            "from_tensor_slices: tensor " + std::to_string(c) + " is " + t.summary() +
            "; every tensor needs a first dimension of " +
            std::to_string(components_[0].rank() ? components_[0].shape()[0] : 0) +
            ", the number of elements");
    }
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t) const override {
    struct Slices : ElementIterator {
      const std::vector<Tensor>& components;
      std::size_t next_index = 0;
      explicit Slices(const std::vector<Tensor>& c) : components(c) {}
      std::optional<Element> next() override {
        if (next_index == components[0].shape()[0]) return std::nullopt;
        Element e;
        e.origin.kind = Origin::Kind::slice;
        e.origin.index = next_index;
        for (const Tensor& t : components) {
          Tensor slice(t.dtype(), Shape(t.shape().begin() + 1, t.shape().end()));
          copy_elements(slice, 0, t, next_index * slice.size(), slice.size());
          e.components.push_back(std::move(slice));
        }
        ++next_index;
        return e;
      }
    };
    return std::make_unique<Slices>(components_);
  }
  ElementSpec spec() const override {
    ElementSpec spec;
    for (const Tensor& t : components_)
      spec.push_back(
          {t.dtype(), PartialShape::of_shape(Shape(t.shape().begin() + 1, t.shape().end()))});
    return spec;
  }
  std::string name() const override { return "from_tensor_slices"; }

 private:
  std::vector<Tensor> components_;  // shared with every iterator: never written
};

// The lines or records of files, one file after another: scalar strings.
template <class Reader>
class FileRecordsNode : public DatasetNode {
 public:
  FileRecordsNode(std::vector<std::string> files, std::string_view compression, std::string name)
      : compression_(compression), name_(std::move(name)) {
    for (auto& f : files) files_.push_back(std::make_shared<const std::string>(std::move(f)));
    zlib_window_bits(compression_, name_);  // checked now: a typo fails where it is written
  }
  std::unique_ptr<ElementIterator> iterate(std::uint64_t) const override {
    struct Records : ElementIterator {
      const FileRecordsNode& node;
      std::size_t file = 0;
      std::unique_ptr<Reader> reader;
      std::uint64_t count = 0;
      explicit Records(const FileRecordsNode& n) : node(n) {}
      std::optional<Element> next() override {
        for (;;) {
          if (!reader) {
            if (file == node.files_.size()) return std::nullopt;
            reader = std::make_unique<Reader>(*node.files_[file], node.compression_);
            count = 0;
          }
          Element e;
          e.origin.file = node.files_[file];
          if constexpr (std::is_same_v<Reader, TFRecordReader>) {
            e.origin.kind = Origin::Kind::record;
            e.origin.byte = reader->offset();
            e.origin.index = count;
          }
          if (auto text = reader->next()) {
            ++count;
            if constexpr (std::is_same_v<Reader, TextLineReader>) {
              e.origin.kind = Origin::Kind::line;
              e.origin.index = reader->line_number();
            }
            e.components.push_back(Tensor(std::move(*text)));
            return e;
          }
          reader.reset();
          ++file;
        }
      }
    };
    return std::make_unique<Records>(*this);
  }
  ElementSpec spec() const override { return {{DType::string, PartialShape::scalar()}}; }
  std::string name() const override { return name_; }

 private:
  std::vector<std::shared_ptr<const std::string>> files_;
  std::string compression_;
  std::string name_;
};

}  // namespace detail

PSFLOW_DECL std::vector<std::string> match_files(std::string_view pattern) {
  glob_t found{};
  const int status = ::glob(std::string(pattern).c_str(), 0, nullptr, &found);
  std::vector<std::string> files;
  if (status == 0)
    for (std::size_t i = 0; i < found.gl_pathc; ++i) files.emplace_back(found.gl_pathv[i]);
  ::globfree(&found);
  if (files.empty()) throw NotFound("no files match the pattern '" + std::string(pattern) + "'");
  std::sort(files.begin(), files.end());
  return files;
}

PSFLOW_DECL Dataset Dataset::from_tensor_slices(std::vector<Tensor> components) {
  return Dataset(std::make_shared<detail::TensorSlicesNode>(std::move(components)));
}

PSFLOW_DECL Dataset Dataset::list_files(std::string_view pattern, bool shuffle,
                                        std::uint64_t seed) {
  std::vector<std::string> files = match_files(pattern);
  const std::size_t count = files.size();
  Dataset names = from_tensor_slices({Tensor::from_vector(std::move(files))});
  return shuffle ? names.shuffle(count, seed) : names;
}

PSFLOW_DECL Dataset TextLineDataset(std::vector<std::string> files, std::string_view compression) {
  return Dataset(std::make_shared<detail::FileRecordsNode<TextLineReader>>(
      std::move(files), compression, "TextLineDataset"));
}

PSFLOW_DECL Dataset TFRecordDataset(std::vector<std::string> files, std::string_view compression) {
  return Dataset(std::make_shared<detail::FileRecordsNode<TFRecordReader>>(
      std::move(files), compression, "TFRecordDataset"));
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::data
