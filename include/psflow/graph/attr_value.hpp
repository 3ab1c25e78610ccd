// Attributes of a graph node (TF's AttrValue): the static parameters an op is built with,
// such as a constant's value, a reduction's axes or a variable's shape.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/dtype.hpp"
#include "psflow/core/error.hpp"
#include "psflow/core/tensor.hpp"

namespace psflow {

using AttrValue =
    std::variant<bool, std::int64_t, double, std::string, DType, std::vector<std::int64_t>, Tensor>;
using AttrMap = std::map<std::string, AttrValue, std::less<>>;

namespace detail {

template <class T>
const T& attr_or_throw(const AttrMap& attrs, std::string_view key, std::string_view node) {
  auto it = attrs.find(key);
  if (it == attrs.end())
    throw InvalidArgument("node '" + std::string(node) + "' has no attribute '" + std::string(key) +
                          "'");
  if (const T* value = std::get_if<T>(&it->second)) return *value;
  throw InvalidArgument("attribute '" + std::string(key) + "' of node '" + std::string(node) +
                        "' has the wrong type");
}

}  // namespace detail

}  // namespace psflow

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

#endif  // PSFLOW_COMPILES_IMPLEMENTATION
