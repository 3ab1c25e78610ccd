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

// A Feature message's list: its kind (0 float_list, 1 int64_list, 2 bytes_list; the last one set
// wins, as protobuf's oneof) and the list's bytes. kind -1: no list.
struct FeatureList {
  int kind = -1;
  std::string_view bytes;
};

PSFLOW_DECL FeatureList feature_list(std::string_view feature) {
  FeatureList list;
  observe::ProtoReader reader(feature, std::string());  // a short `what`: no allocation
  for (observe::ProtoReader::Field f; reader.next(f);) {
    if (f.wire_type != 2 || f.number < 1 || f.number > 3) continue;  // unknown fields: skipped
    list.kind = f.number == 1 ? 2 : f.number == 2 ? 0 : 1;
    list.bytes = f.bytes;
  }
  return list;
}

// Calls put(i, bytes, bits) for value i of `list`: its bytes for a bytes_list, else the float's
// bits or the int64. Packed and unpacked repeated values both count.
template <class Put>
void for_each_value(const FeatureList& list, Put&& put) {
  observe::ProtoReader reader(list.bytes, std::string());
  std::size_t i = 0;
  for (observe::ProtoReader::Field e; reader.next(e);) {
    if (e.number != 1) continue;
    if (list.kind == 2) {
      if (e.wire_type == 2) put(i++, e.bytes, std::uint64_t{0});
    } else if (list.kind == 0 && e.wire_type == 5) {
      put(i++, std::string_view(), e.value);
    } else if (list.kind == 1 && e.wire_type == 0) {
      put(i++, std::string_view(), e.value);
    } else if (e.wire_type == 2 && list.kind == 0) {
      if (e.bytes.size() % 4 != 0) reader.fail("a packed float list is not a multiple of 4 bytes");
      for (std::size_t at = 0; at < e.bytes.size(); at += 4) {
        std::uint32_t bits;
        std::memcpy(&bits, e.bytes.data() + at, 4);
        put(i++, std::string_view(), std::uint64_t{bits});
      }
    } else if (e.wire_type == 2 && list.kind == 1) {
      for (std::int64_t v : reader.packed_varints(e.bytes))
        put(i++, std::string_view(), static_cast<std::uint64_t>(v));
    }
  }
}

PSFLOW_DECL std::size_t count_values(const FeatureList& list) {
  std::size_t n = 0;
  for_each_value(list, [&](std::size_t, std::string_view, std::uint64_t) { ++n; });
  return n;
}

// Writes the first `room` values of `list` into `out` from element `at` on; returns how many
// values the list has (more than `room`: the rest are not written).
PSFLOW_DECL std::size_t write_values(const FeatureList& list, Tensor& out, std::size_t at,
                                     std::size_t room) {
  std::size_t n = 0;
  switch (list.kind) {
    case 0: {
      float* dst = out.data<float>() + at;
      for_each_value(list, [&](std::size_t i, std::string_view, std::uint64_t bits) {
        if (i < room) dst[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
        n = i + 1;
      });
      break;
    }
    case 1: {
      std::int64_t* dst = out.data<std::int64_t>() + at;
      for_each_value(list, [&](std::size_t i, std::string_view, std::uint64_t v) {
        if (i < room) dst[i] = static_cast<std::int64_t>(v);
        n = i + 1;
      });
      break;
    }
    default: {
      std::string* dst = out.data<std::string>() + at;
      for_each_value(list, [&](std::size_t i, std::string_view bytes, std::uint64_t) {
        if (i < room) dst[i].assign(bytes);
        n = i + 1;
      });
    }
  }
  return n;
}

// The wanted features, sorted by name, for finding an entry's key without allocating.
struct WantedFeature {
  std::string_view name;
  const Feature* spec;
};

// Records, for example `i`, the Feature bytes of each wanted feature it has (the last entry of a
// key wins, an entry without a list counts as absent) into lists[i * wanted.size() + slot].
PSFLOW_DECL void scan_example(std::string_view bytes, const std::vector<WantedFeature>& wanted,
                              FeatureList* lists) {
  observe::ProtoReader example(bytes, std::string());
  std::size_t hint = 0;
  for (observe::ProtoReader::Field f; example.next(f);) {
    if (f.number != 1 || f.wire_type != 2) continue;
    observe::ProtoReader features(f.bytes, std::string());
    for (observe::ProtoReader::Field entry; features.next(entry);) {
      if (entry.number != 1 || entry.wire_type != 2) continue;
      std::string_view key, value;
      observe::ProtoReader kv(entry.bytes, std::string());
      for (observe::ProtoReader::Field e; kv.next(e);) {
        if (e.wire_type != 2) continue;
        if (e.number == 1) key = e.bytes;
        if (e.number == 2) value = e.bytes;
      }
      // Writers usually give the keys in sorted order, so the slot after the last one found is
      // tried first.
      std::size_t slot = hint;
      if (slot >= wanted.size() || wanted[slot].name != key) {
        const auto it =
            std::lower_bound(wanted.begin(), wanted.end(), key,
                             [](const WantedFeature& w, std::string_view k) { return w.name < k; });
        if (it == wanted.end() || it->name != key) continue;
        slot = static_cast<std::size_t>(it - wanted.begin());
      }
      lists[slot] = feature_list(value);
      hint = slot + 1;
    }
  }
}

// Parses `count` examples (a vector, or one scalar when `single`): each example's wanted
// features are found first (views into the serialized bytes), then each is decoded straight
// into its output tensor.
PSFLOW_DECL std::map<std::string, ParsedFeature> parse_examples(
    const Tensor& serialized, const std::map<std::string, Feature>& features, bool single) {
  const char* op = single ? "parse_single_example" : "parse_example";
  if (serialized.dtype() != DType::string || serialized.rank() != (single ? 0u : 1u))
    throw InvalidArgument(std::string(op) + ": serialized must be " +
                          (single ? "a string scalar" : "a vector of strings") + ", got " +
                          serialized.summary());
  const auto records = serialized.values<std::string>();
  const std::size_t batch = records.size();
  std::vector<WantedFeature> wanted;
  for (const auto& [name, spec] : features) wanted.push_back({name, &spec});  // map order: sorted
  const std::size_t slots = wanted.size();
  std::vector<FeatureList> lists(batch * slots);
  for (std::size_t i = 0; i < batch; ++i) {
    try {
      scan_example(records[i], wanted, lists.data() + i * slots);
    } catch (const DataLoss& e) {  // its message follows the empty `what`: " is not a ..."
      throw DataLoss(std::string(op) + ": serialized example " + std::to_string(i) + e.message());
    }
  }
  auto list_of = [&](std::size_t i, std::size_t slot) -> const FeatureList& {
    return lists[i * slots + slot];
  };

  std::map<std::string, ParsedFeature> out;
  std::size_t slot = 0;
  for (const auto& [feature_name, spec] : features) {
    const std::string& name = feature_name;
    auto where = [&](std::size_t i) {
      return std::string(op) + ": example " + std::to_string(i) + ", feature '" + name + "'";
    };
    auto check_kind = [&](const FeatureList& list, std::size_t want, std::size_t i) {
      if (static_cast<std::size_t>(list.kind) != want)
        throw InvalidArgument(where(i) + " holds " +
                              feature_kind_name(static_cast<std::size_t>(list.kind)) +
                              " values, the feature is declared " + feature_kind_name(want));
    };
    // A damaged list's DataLoss names the example and the feature.
    auto naming_example = [&](std::size_t i, auto&& read) {
      try {
        return read();
      } catch (const DataLoss& e) {
        throw DataLoss(where(i) + e.message());
      }
    };
    auto counted = [&](const FeatureList& list, std::size_t i) {
      return naming_example(i, [&] { return count_values(list); });
    };
    auto written = [&](const FeatureList& list, Tensor& dst, std::size_t at, std::size_t room,
                       std::size_t i) {
      return naming_example(i, [&] { return write_values(list, dst, at, room); });
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
        const FeatureList& list = list_of(i, slot);
        if (list.kind < 0) {
          if (!fixed->default_value)
            throw InvalidArgument(where(i) + " is missing and has no default_value");
          const Tensor& d = *fixed->default_value;
          for (std::size_t k = 0; k < per_example; ++k)
            copy_elements(dense, i * per_example + k, d, d.size() == 1 ? 0 : k, 1);
          continue;
        }
        check_kind(list, kind, i);
        if (const std::size_t n = written(list, dense, i * per_example, per_example, i);
            n != per_example)
          throw InvalidArgument(where(i) + " has " + std::to_string(n) + " values, its shape " +
                                shape_string(fixed->shape) + " needs " +
                                std::to_string(per_example));
      }
      out.emplace(name, std::move(dense));
    } else {
      const auto& var = std::get<VarLenFeature>(spec);
      const std::size_t kind = feature_kind_of(var.dtype, name);
      std::size_t total = 0, widest = 0;
      std::vector<std::size_t> sizes(batch, 0);
      for (std::size_t i = 0; i < batch; ++i) {
        const FeatureList& list = list_of(i, slot);
        if (list.kind < 0) continue;
        check_kind(list, kind, i);
        sizes[i] = counted(list, i);
        total += sizes[i];
        widest = std::max(widest, sizes[i]);
      }
      const std::size_t rank = single ? 1 : 2;
      Tensor indices(DType::int64, {total, rank});
      Tensor values(var.dtype, {total});
      auto* idx = indices.data<std::int64_t>();
      std::size_t at = 0;
      for (std::size_t i = 0; i < batch; ++i) {
        if (sizes[i] == 0) continue;
        written(list_of(i, slot), values, at, sizes[i], i);
        for (std::size_t k = 0; k < sizes[i]; ++k, ++at) {
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
    ++slot;
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
