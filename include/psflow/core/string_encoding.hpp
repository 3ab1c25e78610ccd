// The bytes of a string tensor where a flat buffer is expected (the wire between tasks,
// checkpoint files): a u64 little-endian length per element, then the bytes of every element,
// so that any length and embedded NULs come back unchanged.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "psflow/core/tensor.hpp"

namespace psflow {

static_assert(std::endian::native == std::endian::little,
              "the string encoding's lengths are written as this host stores them");

// The encoded size of string tensor `t`, without encoding it.
inline std::uint64_t encoded_strings_size(const Tensor& t) {
  std::uint64_t bytes = 8 * std::uint64_t{t.size()};
  for (const std::string& s : t.values<std::string>()) bytes += s.size();
  return bytes;
}

inline std::string encode_strings(const Tensor& t) {
  std::string out;
  out.reserve(encoded_strings_size(t));
  for (const std::string& s : t.values<std::string>()) {
    const std::uint64_t n = s.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
  }
  for (const std::string& s : t.values<std::string>()) out += s;
  return out;
}

// Fills string tensor `t` (its shape gives the element count) from `bytes`. Returns what is
// wrong, empty when the lengths account for exactly every byte.
inline std::string decode_strings(std::string_view bytes, Tensor& t) {
  const std::size_t n = t.size();
  if (bytes.size() / 8 < n)
    return "its " + std::to_string(bytes.size()) + " bytes cannot hold the lengths of " +
           std::to_string(n) + " strings";
  std::string_view chars = bytes.substr(8 * n);
  std::span<std::string> out = t.values<std::string>();
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t len;
    std::memcpy(&len, bytes.data() + 8 * i, sizeof len);
    if (len > chars.size())
      return "string " + std::to_string(i) + " of length " + std::to_string(len) +
             " runs past the end of the bytes";
    out[i].assign(chars.substr(0, len));
    chars.remove_prefix(len);
  }
  if (!chars.empty()) return std::to_string(chars.size()) + " bytes follow the last string";
  return {};
}

}  // namespace psflow
