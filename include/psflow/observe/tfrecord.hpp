// TFRecord framing, the container of TensorBoard's event files: each record is
//   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
//   `length` bytes of data, uint32 masked CRC-32C of the data.
// frame_tfrecord builds one record; read_tfrecord takes one back apart and checks both
// checksums. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"
#include "psflow/observe/crc32c.hpp"

namespace psflow::observe {

// The bytes of one record holding `data`.
std::string frame_tfrecord(std::string_view data);

// Reads the record that starts at `offset` of `bytes` and moves `offset` past it. nullopt at
// the end of `bytes`; DataLoss for a truncated record or a checksum that does not match
// (`what` names the file in the message).
std::optional<std::string> read_tfrecord(std::string_view bytes, std::size_t& offset,
                                         std::string_view what = "TFRecord data");

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION
namespace detail {

PSFLOW_DECL void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}
PSFLOW_DECL std::uint64_t read_le(std::string_view bytes, std::size_t at, int n) {
  std::uint64_t value = 0;
  for (int i = 0; i < n; ++i)
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return value;
}

}  // namespace detail

PSFLOW_DECL std::string frame_tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  detail::append_le(out, data.size(), 8);
  detail::append_le(out, masked_crc32c(out), 4);
  out.append(data);
  detail::append_le(out, masked_crc32c(data), 4);
  return out;
}

PSFLOW_DECL std::optional<std::string> read_tfrecord(std::string_view bytes, std::size_t& offset,
                                                     std::string_view what) {
  if (offset == bytes.size()) return std::nullopt;
  const auto fail = [&](const std::string& problem) -> DataLoss {
    return DataLoss(std::string(what) + ": record at byte " + std::to_string(offset) + " " +
                    problem);
  };
  if (bytes.size() - offset < 12) throw fail("is truncated (no complete length header)");
  const std::uint64_t length = detail::read_le(bytes, offset, 8);
  if (detail::read_le(bytes, offset + 8, 4) != masked_crc32c(bytes.substr(offset, 8)))
    throw fail("has a length whose checksum does not match");
  if (bytes.size() - offset - 12 < length || bytes.size() - offset - 12 - length < 4)
    throw fail("is truncated (" + std::to_string(length) + " bytes of data announced)");
  std::string data(bytes.substr(offset + 12, length));
  if (detail::read_le(bytes, offset + 12 + length, 4) != masked_crc32c(data))
    throw fail("has data whose checksum does not match");
  offset += 16 + length;
  return data;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
