// ProtoReader: a minimal protocol-buffer decoder, the reading half of ProtoWriter. It walks the
// fields of one message in the wire format (https://protobuf.dev/programming-guides/encoding/):
// a key varint (field number << 3 | wire type), then a varint (type 0), 8 little-endian bytes
// (type 1), a length and that many bytes (type 2: strings, bytes, nested messages, packed
// repeated scalars) or 4 bytes (type 5). Nested messages are read by a ProtoReader over the
// field's bytes. Groups (types 3 and 4, deprecated since proto2) are refused.
//
// Input comes from files a user may hand over damaged, so every length is checked against
// what is left before it is used; anything malformed is a DataLoss naming `what` (e.g. the
// file) and the problem. A value type over borrowed bytes; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "psflow/core/compilation.hpp"
#include "psflow/core/error.hpp"

namespace psflow::observe {

class ProtoReader {
 public:
  struct Field {
    int number = 0;
    int wire_type = 0;
    std::uint64_t value = 0;  // types 0, 1, 5: the value's bits
    std::string_view bytes;   // type 2: the bytes
  };

  // `what` names the data in errors, e.g. "graph.pb".
  ProtoReader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}

  // The next field into `field`; false at the end of the message. Throws DataLoss.
  bool next(Field& field);

  // The int64s of a packed repeated field's bytes.
  std::vector<std::int64_t> packed_varints(std::string_view bytes) const;
  [[noreturn]] void fail(const std::string& problem) const;
  const std::string& what() const noexcept { return what_; }

 private:
  std::uint64_t read_varint(std::string_view& in) const;

  std::string_view data_;
  std::string what_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

PSFLOW_DECL void ProtoReader::fail(const std::string& problem) const {
  throw DataLoss(what_ + " is not a valid protocol buffer: " + problem +
                 "; write it again (a damaged copy or another file format)");
}

PSFLOW_DECL std::uint64_t ProtoReader::read_varint(std::string_view& in) const {
  // One byte, the common case (keys and short lengths).
  if (!in.empty() && !(static_cast<unsigned char>(in.front()) & 0x80)) {
    const auto value = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    return value;
  }
  std::uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) fail("a varint runs past the end");
    const auto byte = static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
    value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return value;
  }
  fail("a varint is longer than 10 bytes");
}

PSFLOW_DECL bool ProtoReader::next(Field& field) {
  if (data_.empty()) return false;
  const std::uint64_t key = read_varint(data_);
  field = Field{};
  field.number = static_cast<int>(key >> 3);
  field.wire_type = static_cast<int>(key & 7);
  if (field.number <= 0 || (key >> 3) > 0x1FFFFFFF) fail("a field number is out of range");
  auto fixed = [&](std::size_t n) {
    if (data_.size() < n) fail("a fixed-size field runs past the end");
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(data_[i]);
    data_.remove_prefix(n);
    return v;
  };
  switch (field.wire_type) {
    case 0:
      field.value = read_varint(data_);
      return true;
    case 1:
      field.value = fixed(8);
      return true;
    case 2: {
      const std::uint64_t length = read_varint(data_);
      if (length > data_.size())
        fail("field " + std::to_string(field.number) + " says " + std::to_string(length) +
             " bytes but only " + std::to_string(data_.size()) + " are left");
      field.bytes = data_.substr(0, static_cast<std::size_t>(length));
      data_.remove_prefix(static_cast<std::size_t>(length));
      return true;
    }
    case 5:
      field.value = fixed(4);
      return true;
    default:
      fail("field " + std::to_string(field.number) + " has wire type " +
           std::to_string(field.wire_type) + ", which this reader does not take");
  }
}

PSFLOW_DECL std::vector<std::int64_t> ProtoReader::packed_varints(std::string_view bytes) const {
  std::vector<std::int64_t> out;
  while (!bytes.empty()) out.push_back(static_cast<std::int64_t>(read_varint(bytes)));
  return out;
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
