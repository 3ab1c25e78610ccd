// Raw frame headers for tests that speak the wire by hand (partial, oversized or lying frames).
#pragma once

#include <cstdint>
#include <string>

#include "psflow/distributed/wire.hpp"

namespace psflow::testing {

// The 40 header bytes of a frame claiming these sizes.
inline std::string header_bytes(wire::MessageType type, std::uint32_t metadata, std::uint32_t table,
                                std::uint64_t payload, std::uint32_t tensors,
                                std::uint64_t request_id = 0) {
  wire::FrameHeader h;
  h.type = type;
  h.request_id = request_id;
  h.metadata_bytes = metadata;
  h.table_bytes = table;
  h.payload_bytes = payload;
  h.tensor_count = tensors;
  std::string bytes(wire::kHeaderBytes, '\0');
  wire::encode_header(h, reinterpret_cast<unsigned char*>(bytes.data()));
  return bytes;
}

}  // namespace psflow::testing
