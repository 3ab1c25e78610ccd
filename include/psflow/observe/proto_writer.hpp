// ProtoWriter: a minimal protocol-buffer encoder, enough to write TensorBoard's Event, Summary
// and GraphDef messages without depending on libprotobuf. It appends fields in the wire format
// (https://protobuf.dev/programming-guides/encoding/): a key varint (field number << 3 | wire
// type), then varints (wire type 0) for integers, enums and bools, fixed 8 little-endian bytes
// (type 1) for doubles, fixed 4 (type 5) for floats, and a length varint then the bytes (type 2)
// for strings, bytes, nested messages and packed repeated scalars. Decoding is the reader's
// business (tests/tools/read_events.py decodes with the real protobuf library).
//
// A value type; not thread-safe (build one message on one thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "psflow/core/compilation.hpp"

#if PSFLOW_COMPILES_IMPLEMENTATION  // what the definitions below use
#include <bit>
#endif

namespace psflow::observe {

class ProtoWriter {
 public:
  // int32/int64/uint64/enum fields (a negative int64 takes ten bytes, as protobuf encodes it).
  ProtoWriter& varint(int field, std::uint64_t value);
  ProtoWriter& int64(int field, std::int64_t value);
  ProtoWriter& boolean(int field, bool value);
  ProtoWriter& float64(int field, double value);  // fixed64
  ProtoWriter& float32(int field, float value);   // fixed32
  // string and bytes fields.
  ProtoWriter& bytes(int field, std::string_view value);
  // A nested message field.
  ProtoWriter& message(int field, const ProtoWriter& nested);
  // A packed repeated int64/int32/enum field.
  ProtoWriter& packed_varints(int field, const std::vector<std::int64_t>& values);

  const std::string& str() const noexcept { return out_; }

  // The varint encoding of `value`: 7 bits a byte, least significant first, high bit = more.
  static std::string encode_varint(std::uint64_t value);

 private:
  void key(int field, int wire_type);
  void append_varint(std::uint64_t value);
  void append_fixed(std::uint64_t value, int n);

  std::string out_;
};

// Implementation, compiled where psflow's is (core/compilation.hpp).
#if PSFLOW_COMPILES_IMPLEMENTATION

PSFLOW_DECL ProtoWriter& ProtoWriter::varint(int field, std::uint64_t value) {
  key(field, 0);
  append_varint(value);
  return *this;
}
PSFLOW_DECL ProtoWriter& ProtoWriter::int64(int field, std::int64_t value) {
  return varint(field, static_cast<std::uint64_t>(value));
}
PSFLOW_DECL ProtoWriter& ProtoWriter::boolean(int field, bool value) {
  return varint(field, value ? 1 : 0);
}
PSFLOW_DECL ProtoWriter& ProtoWriter::float64(int field, double value) {
  key(field, 1);
  append_fixed(std::bit_cast<std::uint64_t>(value), 8);
  return *this;
}
PSFLOW_DECL ProtoWriter& ProtoWriter::float32(int field, float value) {
  key(field, 5);
  append_fixed(std::bit_cast<std::uint32_t>(value), 4);
  return *this;
}
PSFLOW_DECL ProtoWriter& ProtoWriter::bytes(int field, std::string_view value) {
  key(field, 2);
  append_varint(value.size());
  out_.append(value);
  return *this;
}
PSFLOW_DECL ProtoWriter& ProtoWriter::message(int field, const ProtoWriter& nested) {
  return bytes(field, nested.out_);
}
PSFLOW_DECL ProtoWriter& ProtoWriter::packed_varints(int field,
                                                     const std::vector<std::int64_t>& values) {
  ProtoWriter packed;
  for (std::int64_t v : values) packed.append_varint(static_cast<std::uint64_t>(v));
  return bytes(field, packed.out_);
}

PSFLOW_DECL std::string ProtoWriter::encode_varint(std::uint64_t value) {
  ProtoWriter w;
  w.append_varint(value);
  return w.out_;
}

PSFLOW_DECL void ProtoWriter::key(int field, int wire_type) {
  append_varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type));
}
PSFLOW_DECL void ProtoWriter::append_varint(std::uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}
PSFLOW_DECL void ProtoWriter::append_fixed(std::uint64_t value, int n) {
  for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

#endif  // PSFLOW_COMPILES_IMPLEMENTATION

}  // namespace psflow::observe
