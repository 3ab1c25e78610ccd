// tf.train.Example, read and written in the protocol-buffer wire format
// directly (no protobuf library): parse_example and parse_single_example with
// TF's FixedLenFeature and VarLenFeature, and data::Example to build one (the
// CTR example's files, tests).
//
// The schema (tensorflow/core/example/example.proto and feature.proto):
//   Example { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }        // entries: key = 1,
//   value = 2 Feature { oneof kind { BytesList bytes_list = 1; FloatList
//   float_list = 2;
//                          Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value =
//   1 [packed]; } Int64List { repeated int64 value = 1 [packed]; }
// Packed and unpacked repeated values are both read, as protobuf requires; of a
// key given twice the last wins. A feature's dtype is float32 (float_list),
// int64 (int64_list) or string (bytes_list).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/tensor.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <algorithm>
#include <bit>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>

#include "psflow/observe/proto_reader.hpp"
#include "psflow/observe/proto_writer.hpp"
#endif

namespace psflow::data {

// A feature every example has `shape` values of (TF's tf.io.FixedLenFeature).
// An example without it takes `default_value` (of `shape`'s element count, or
// one element repeated); with no default it is InvalidArgument naming the
// feature.
struct FixedLenFeature {
  Shape shape;
  DType dtype;
  std::optional<Tensor> default_value;
};

// A feature with any number of values per example (tf.io.VarLenFeature): parsed
// into a sparse tensor {indices, values, dense_shape}.
struct VarLenFeature {
  DType dtype;
};

using Feature = std::variant<FixedLenFeature, VarLenFeature>;
// A dense Tensor for a FixedLenFeature; {indices (int64 [n, rank]), values [n],
// dense_shape} for a VarLenFeature.
using ParsedFeature = std::variant<Tensor, std::array<Tensor, 3>>;

// A vector of serialized Examples -> per feature [batch] + shape (FixedLen), or
// a sparse tensor with indices (example, position) and dense_shape [batch, most
// values] (VarLen).
std::map<std::string, ParsedFeature> parse_example(const Tensor& serialized,
                                                   const std::map<std::string, Feature>& features);

// One serialized Example (a scalar) -> per feature a tensor of `shape`
// (FixedLen), or a sparse tensor with indices (position) and dense_shape
// [values] (VarLen).
std::map<std::string, ParsedFeature> parse_single_example(
    const Tensor& serialized, const std::map<std::string, Feature>& features);

// Builds a tf.train.Example; serialize() writes its features in name order.
class Example {
 public:
  Example& set(const std::string& name, std::vector<float> values);
  Example& set(const std::string& name, std::vector<std::int64_t> values);
  Example& set(const std::string& name, std::vector<std::string> values);
  std::string serialize() const;

 private:
  std::map<std::string,
           std::variant<std::vector<float>, std::vector<std::int64_t>, std::vector<std::string>>>
      features_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace detail {

// The values of one feature of one example, as the wire holds them.
using FeatureValues =
    std::variant<std::vector<float>, std::vector<std::int64_t>, std::vector<std::string>>;

PSFLOW_DECL const char* feature_kind_name(std::size_t index) {
  constexpr const char* names[] = {"float32", "int64", "string"};
  return names[index];
}

PSFLOW_DECL std::size_t feature_kind_of(DType dtype, const std::string& name) {
  switch (dtype) {
    case DType::float32:
      return 0;
    case DType::int64:
      return 1;
    case DType::string:
      return 2;
    default:
      throw InvalidArgument("feature '" + name + "' has dtype " + std::string(dtype_name(dtype)) +
                            "; a tf.Example feature is float32, int64 or string");
  }
}

// One Feature message: its list's values, nullopt when no kind is set.
PSFLOW_DECL std::optional<FeatureValues> read_feature(std::string_view bytes,
                                                      const std::string& what) {
  std::optional<FeatureValues> values;
  observe::ProtoReader feature(bytes, what);
  for (observe::ProtoReader::Field f; feature.next(f);) {
    if (f.wire_type != 2 || f.number < 1 || f.number > 3) continue;  // unknown fields: skipped
    observe::ProtoReader list(f.bytes, what);
    if (f.number == 1) {
      std::vector<std::string> v;
      for (observe::ProtoReader::Field e; list.next(e);)
        if (e.number == 1 && e.wire_type == 2) v.emplace_back(e.bytes);
      values = std::move(v);
    } else if (f.number == 2) {
      std::vector<float> v;
      auto add = [&v](std::uint32_t bits) { v.push_back(std::bit_cast<float>(bits)); };
      for (observe::ProtoReader::Field e; list.next(e);) {
        if (e.number != 1) continue;
        if (e.wire_type == 5) {
          add(static_cast<std::uint32_t>(e.value));
        } else if (e.wire_type == 2) {
          if (e.bytes.size() % 4 != 0)
            list.fail("a packed float list is not a multiple of 4 bytes");
          for (std::size_t i = 0; i < e.bytes.size(); i += 4) {
            std::uint32_t bits;
            std::memcpy(&bits, e.bytes.data() + i, 4);
            add(bits);
          }
        }
      }
      values = std::move(v);
    } else {
      std::vector<std::int64_t> v;
      for (observe::ProtoReader::Field e; list.next(e);) {
        if (e.number != 1) continue;
        if (e.wire_type == 0) {
          v.push_back(static_cast<std::int64_t>(e.value));
        } else if (e.wire_type == 2) {
          const auto packed = list.packed_varints(e.bytes);
          v.insert(v.end(), packed.begin(), packed.end());
        }
      }
      values = std::move(v);
    }
  }
  return values;
}

// The features of one serialized Example that `wanted` names (others are
// skipped unread).
PSFLOW_DECL std::map<std::string, FeatureValues> read_example(
    std::string_view bytes, const std::map<std::string, Feature>& wanted, const std::string& what) {
  std::map<std::string, FeatureValues> found;
  observe::ProtoReader example(bytes, what);
  for (observe::ProtoReader::Field f; example.next(f);) {
    if (f.number != 1 || f.wire_type != 2) continue;
    observe::ProtoReader features(f.bytes, what);
    for (observe::ProtoReader::Field entry; features.next(entry);) {
      if (entry.number != 1 || entry.wire_type != 2) continue;
      std::string key;
      std::string_view value;
      observe::ProtoReader kv(entry.bytes, what);
      for (observe::ProtoReader::Field e; kv.next(e);) {
        if (e.wire_type != 2) continue;
        if (e.number == 1) key.assign(e.bytes);
        if (e.number == 2) value = e.bytes;
      }
      if (!wanted.count(key)) continue;
      if (auto values = read_feature(value, what))
        found[key] = std::move(*values);
      else
        found.erase(key);  // the last entry of a key wins, an empty one too
    }
  }
  return found;
}

// Copies `values` into `out` from element `at` on.
PSFLOW_DECL void put_values(const FeatureValues& values, Tensor& out, std::size_t at) {
  std::visit(
      [&](const auto& v) {
        using T = typename std::decay_t<decltype(v)>::value_type;
        std::copy(v.begin(), v.end(), out.data<T>() + at);
      },
      values);
}

PSFLOW_DECL std::size_t values_size(const FeatureValues& values) {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

// Parses `count` examples (a vector, or one scalar when `single`).
PSFLOW_DECL std::map<std::string, ParsedFeature> parse_examples(
    const Tensor& serialized, const std::map<std::string, Feature>& features, bool single) {
  const char* op = single ? "parse_single_example" : "parse_example";
  if (serialized.dtype() != DType::string || serialized.rank() != (single ? 0u : 1u))
    throw InvalidArgument(std::string(op) + ": serialized must be " +
                          (single ? "a string scalar" : "a vector of strings") + ", got " +
                          serialized.summary());
  const auto records = serialized.values<std::string>();
  const std::size_t batch = records.size();
  std::vector<std::map<std::string, FeatureValues>> examples;
  examples.reserve(batch);
  for (std::size_t i = 0; i < batch; ++i)
    examples.push_back(read_example(records[i], features,
                                    std::string(op) + ": serialized example " + std::to_string(i)));

  std::map<std::string, ParsedFeature> out;
  for (const auto& [name, spec] : features) {
    auto where = [&, &name = name](std::size_t i) {
      return std::string(op) + ": example " + std::to_string(i) + ", feature '" + name + "'";
    };
    auto check_kind = [&](const FeatureValues& v, std::size_t want, std::size_t i) {
      if (v.index() != want)
        throw InvalidArgument(where(i) + " holds " + feature_kind_name(v.index()) +
                              " values, the feature is declared " + feature_kind_name(want));
    };
    if (const auto* fixed = std::get_if<FixedLenFeature>(&spec)) {
      const std::size_t kind = feature_kind_of(fixed->dtype, name);
      const std::size_t per_example = num_elements(fixed->shape);
      if (fixed->default_value) {
        const Tensor& d = *fixed->default_value;
        if (d.dtype() != fixed->dtype || (d.size() != per_example && d.size() != 1))
          throw InvalidArgument(std::string(op) + ": the default of feature '" + name + "' is " +
                                d.summary() + ", it must be " +
                                std::string(dtype_name(fixed->dtype)) + shape_string(fixed->shape) +
                                " or one element");
      }
      Shape shape = fixed->shape;
      if (!single) shape.insert(shape.begin(), batch);
      Tensor dense(fixed->dtype, shape);
      for (std::size_t i = 0; i < batch; ++i) {
        const auto it = examples[i].find(name);
        if (it == examples[i].end()) {
          if (!fixed->default_value)
            throw InvalidArgument(where(i) + " is missing and has no default_value");
          const Tensor& d = *fixed->default_value;
          for (std::size_t k = 0; k < per_example; ++k)
            copy_elements(dense, i * per_example + k, d, d.size() == 1 ? 0 : k, 1);
          continue;
        }
        check_kind(it->second, kind, i);
        if (values_size(it->second) != per_example)
          throw InvalidArgument(where(i) + " has " + std::to_string(values_size(it->second)) +
                                " values, its shape " + shape_string(fixed->shape) + " needs " +
                                std::to_string(per_example));
        put_values(it->second, dense, i * per_example);
      }
      out.emplace(name, std::move(dense));
    } else {
      const auto& var = std::get<VarLenFeature>(spec);
      const std::size_t kind = feature_kind_of(var.dtype, name);
      std::size_t total = 0, widest = 0;
      for (std::size_t i = 0; i < batch; ++i)
        if (const auto it = examples[i].find(name); it != examples[i].end()) {
          check_kind(it->second, kind, i);
          total += values_size(it->second);
          widest = std::max(widest, values_size(it->second));
        }
      const std::size_t rank = single ? 1 : 2;
      Tensor indices(DType::int64, {total, rank});
      Tensor values(var.dtype, {total});
      auto* idx = indices.data<std::int64_t>();
      std::size_t at = 0;
      for (std::size_t i = 0; i < batch; ++i) {
        const auto it = examples[i].find(name);
        if (it == examples[i].end()) continue;
        put_values(it->second, values, at);
        for (std::size_t k = 0; k < values_size(it->second); ++k, ++at) {
          if (!single) *idx++ = static_cast<std::int64_t>(i);
          *idx++ = static_cast<std::int64_t>(k);
        }
      }
      std::vector<std::int64_t> dense_shape;
      if (!single) dense_shape.push_back(static_cast<std::int64_t>(batch));
      dense_shape.push_back(static_cast<std::int64_t>(widest));
      out.emplace(name, std::array<Tensor, 3>{std::move(indices), std::move(values),
                                              Tensor::from_vector(std::move(dense_shape))});
    }
  }
  return out;
}

}  // namespace detail

PSFLOW_DECL std::map<std::string, ParsedFeature> parse_example(
    const Tensor& serialized, const std::map<std::string, Feature>& features) {
  return detail::parse_examples(serialized, features, false);
}

PSFLOW_DECL std::map<std::string, ParsedFeature> parse_single_example(
    const Tensor& serialized, const std::map<std::string, Feature>& features) {
  return detail::parse_examples(serialized, features, true);
}

PSFLOW_DECL Example& Example::set(const std::string& name, std::vector<float> values) {
  features_[name] = std::move(values);
  return *this;
}
PSFLOW_DECL Example& Example::set(const std::string& name, std::vector<std::int64_t> values) {
  features_[name] = std::move(values);
  return *this;
}
PSFLOW_DECL Example& Example::set(const std::string& name, std::vector<std::string> values) {
  features_[name] = std::move(values);
  return *this;
}

PSFLOW_DECL std::string Example::serialize() const {
  observe::ProtoWriter features;
  for (const auto& [name, values] : features_) {
    observe::ProtoWriter list;
    int kind = 0;
    std::visit(
        [&](const auto& v) {
          using T = typename std::decay_t<decltype(v)>::value_type;
          if constexpr (std::is_same_v<T, float>) {
            kind = 2;
            std::string packed;
            for (float x : v) {
              const auto bits = std::bit_cast<std::uint32_t>(x);
              for (int b = 0; b < 4; ++b) packed.push_back(static_cast<char>(bits >> (8 * b)));
            }
            list.bytes(1, packed);
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            kind = 3;
            list.packed_varints(1, v);
          } else {
            kind = 1;
            for (const std::string& s : v) list.bytes(1, s);
          }
        },
        values);
    observe::ProtoWriter feature;
    feature.message(kind, list);
    features.message(1, observe::ProtoWriter().bytes(1, name).message(2, feature));
  }
  return observe::ProtoWriter().message(1, features).str();
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::data
