// PartialShape: what graph building knows about a tensor's shape before it runs.
// An unknown rank is `known == false`; an unknown dimension is -1 (as in TF).
// Also numpy's broadcasting rule, shared by shape inference and the element-wise kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/shape.hpp"

namespace psflow {

struct PartialShape {
  bool known = false;              // rank known?
  std::vector<std::int64_t> dims;  // valid when known; -1 for an unknown dimension

  static PartialShape unknown() { return {}; }
  static PartialShape of(std::vector<std::int64_t> dims) { return {true, std::move(dims)}; }
  static PartialShape of_shape(const Shape& shape) {
    return {true, std::vector<std::int64_t>(shape.begin(), shape.end())};
  }
  static PartialShape scalar() { return {true, {}}; }

  bool fully_defined() const {
    return known && std::none_of(dims.begin(), dims.end(), [](auto d) { return d < 0; });
  }
  std::int64_t rank() const { return known ? static_cast<std::int64_t>(dims.size()) : -1; }
  Shape to_shape() const { return Shape(dims.begin(), dims.end()); }  // only when fully_defined()
  // nullopt when not fully defined; InvalidArgument when the count does not fit in 64 bits.
  std::optional<std::int64_t> num_elements() const {
    if (!fully_defined()) return std::nullopt;
    std::int64_t n = 1;
    for (auto d : dims)
      if (__builtin_mul_overflow(n, d, &n))
        throw InvalidArgument("shape " + to_string() + " has more elements than 64 bits count");
    return n;
  }

  // True when a tensor of `shape` may flow where this shape is expected.
  bool is_compatible_with(const Shape& shape) const {
    if (!known) return true;
    if (dims.size() != shape.size()) return false;
    for (std::size_t i = 0; i < dims.size(); ++i)
      if (dims[i] >= 0 && static_cast<std::size_t>(dims[i]) != shape[i]) return false;
    return true;
  }

  std::string to_string() const { return known ? shape_string(dims) : std::string("<unknown>"); }
  bool operator==(const PartialShape&) const = default;
};

// numpy broadcasting of two known shapes; nullopt when they are incompatible.
// Unknown (-1) dimensions broadcast against anything and stay unknown unless the other is > 1.
PSFLOW_DECL std::optional<std::vector<std::int64_t>> broadcast_dims(
    const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b);

PSFLOW_DECL std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

namespace psflow {

PSFLOW_DECL std::optional<std::vector<std::int64_t>> broadcast_dims(
    const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  std::vector<std::int64_t> out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db)
      out[i] = da;
    else if (da == 1)
      out[i] = db;
    else if (db == 1)
      out[i] = da;
    else if (da < 0)
      out[i] = db > 1 ? db : -1;
    else if (db < 0)
      out[i] = da > 1 ? da : -1;
    else
      return std::nullopt;
  }
  return out;
}

PSFLOW_DECL std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  auto dims = broadcast_dims(std::vector<std::int64_t>(a.begin(), a.end()),
                             std::vector<std::int64_t>(b.begin(), b.end()));
  if (!dims) return std::nullopt;
  return Shape(dims->begin(), dims->end());
}

}  // namespace psflow

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
