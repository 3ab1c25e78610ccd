// Counter-based random numbers: value number `counter` of the stream `key` is a pure function of
// the two, so a value can be drawn again anywhere (another process, another shard count, another
// order) and comes out the same. The random kernels draw element e of a tensor this way, and a
// dynamic embedding table draws the initial row of a key.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace psflow::detail {

// Output `counter` of splitmix64 started at `key`: a well-mixed 64-bit value per counter.
inline std::uint64_t splitmix64_at(std::uint64_t key, std::uint64_t counter) {
  std::uint64_t z = key + (counter + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform on [0, 1) from 53 random bits.
inline double unit_uniform(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Element `index` of a stream of standard normal values: Box-Muller, elements 2k and 2k+1
// sharing two uniforms (the cosine and the sine of one draw).
inline double standard_normal_at(std::uint64_t key, std::uint64_t index) {
  const std::uint64_t pair = index / 2;
  const double u1 = 1.0 - unit_uniform(splitmix64_at(key, 2 * pair));  // (0, 1]
  const double u2 = unit_uniform(splitmix64_at(key, 2 * pair + 1));
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2 * std::numbers::pi * u2;
  return radius * (index % 2 == 0 ? std::cos(angle) : std::sin(angle));
}

// The fixed 64-bit hash of an int64 key that places it in a dynamic embedding table: its
// shard (the high half) and its stripe within the shard (the low bits).
inline std::uint64_t key_hash(std::int64_t key) {
  return splitmix64_at(0x243F6A8885A308D3ULL, static_cast<std::uint64_t>(key));
}

}  // namespace psflow::detail
