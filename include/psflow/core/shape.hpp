// Shape of a tensor (row-major dimension sizes) and small helpers around it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "psflow/core/error.hpp"

namespace psflow {

using Shape = std::vector<std::size_t>;

// a * b, or InvalidArgument naming `what` when the product does not fit in size_t (a shape
// or byte count from a peer or a user must never wrap around into a small allocation).
inline std::size_t checked_product(std::size_t a, std::size_t b, std::string_view what) {
  std::size_t product;
  if (__builtin_mul_overflow(a, b, &product))
    throw InvalidArgument(std::string(what) + " overflows: " + std::to_string(a) + " x " +
                          std::to_string(b) + " does not fit in 64 bits; check the shape");
  return product;
}

inline std::size_t num_elements(const Shape& shape) {
  std::size_t n = 1;
  for (auto d : shape) n = checked_product(n, d, "the number of elements of a tensor");
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
