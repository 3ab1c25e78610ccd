// CRC-32C (Castagnoli), the checksum of TFRecord files (TensorBoard's event files among them),
// and TF's masking of it: a record's checksums are stored masked, so that a checksum of data
// that itself holds checksums is not trivially related to them.
//
// Table-driven, one byte at a time: event files are small, and this keeps the code portable
// (no SSE4.2 instruction). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "psflow/core/compilation.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <array>
#endif

namespace psflow::observe {

// CRC-32C of `data`, continuing from `crc` (the CRC-32C of what came before; 0 to start).
std::uint32_t crc32c_extend(std::uint32_t crc, std::string_view data);
// CRC-32C of `data`: crc32c("123456789") == 0xE3069283.
inline std::uint32_t crc32c(std::string_view data) { return crc32c_extend(0, data); }
// TF's mask: rotate right by 15 bits and add a constant.
constexpr std::uint32_t mask_crc32c(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
// The inverse of mask_crc32c.
constexpr std::uint32_t unmask_crc32c(std::uint32_t masked) {
  const std::uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}
// What a TFRecord stores: the masked CRC-32C of `data`.
inline std::uint32_t masked_crc32c(std::string_view data) { return mask_crc32c(crc32c(data)); }

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

// The reflected Castagnoli polynomial 0x1EDC6F41.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
inline constexpr std::array<std::uint32_t, 256> kCrc32cTable = make_crc32c_table();

}  // namespace detail

PSFLOW_DECL std::uint32_t crc32c_extend(std::uint32_t crc, std::string_view data) {
  std::uint32_t c = ~crc;
  for (unsigned char byte : data) c = detail::kCrc32cTable[(c ^ byte) & 0xFF] ^ (c >> 8);
  return ~c;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
