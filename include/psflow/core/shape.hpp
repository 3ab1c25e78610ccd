// Shape of a tensor (row-major dimension sizes) and small helpers around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace psflow {

using Shape = std::vector<std::size_t>;

inline std::size_t num_elements(const Shape& shape) {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// "[2,3]"; a scalar prints "[]". Used in every shape-related error message.
template <class Dims>
std::string shape_string(const Dims& dims) {
  std::string out = "[";
  bool first = true;
  for (auto d : dims) {
    if (!first) out += ",";
    first = false;
    if constexpr (std::is_signed_v<std::decay_t<decltype(d)>>) {
      out += d < 0 ? std::string("?") : std::to_string(d);
    } else {
      out += std::to_string(d);
    }
  }
  return out + "]";
}

}  // namespace psflow
