// WireLimits: the most a peer's frame may claim (distributed/wire.hpp checks every frame header
// against them before allocating anything). Part of ServerOptions.
#pragma once

#include <cstdint>

namespace psflow::wire {

struct WireLimits {
  std::uint64_t max_metadata_bytes = 256ull << 20;  // graph definitions can hold constants
  std::uint64_t max_tensor_bytes = 16ull << 30;     // one tensor
  std::uint64_t max_frame_bytes = 32ull << 30;      // all payloads of one frame
  std::uint32_t max_tensors = 1u << 16;             // tensors in one frame
};

}  // namespace psflow::wire
