// The one hash of the CTR example: both its synthetic click log and its sparse Fashion-MNIST
// features draw every random number and every feature id from it.
//
// A counter-based hash, not a random engine or a std:: distribution: the value for (example 7,
// field 3) is a pure function of those numbers, so examples can be made in any order, by any
// worker, and the C++ standard libraries' distributions (whose algorithms differ between
// libstdc++, libc++ and MSVC) never decide a value. It uses only 64-bit integer arithmetic, so
// every platform computes the same bits.
//
//   splitmix64(x)          the output function of Vigna's SplitMix64 generator for the state x
//                          (a bijection of 64-bit integers with good avalanche)
//   hash_of(a, b, c, ...)  h = splitmix64(a), then for each next value v: h = splitmix64(h ^ v);
//                          order matters, so (3, 5) and (5, 3) differ
//   uniform01(h)           h's top 53 bits as a double in [0, 1), exact
//
// A feature's row in a hashed table of `rows` rows is hash % rows (the modulo's bias is below
// rows / 2^64: nothing, for any table that fits in memory).
#pragma once

#include <cstdint>

namespace ctr {

inline constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

template <class... Rest>
inline constexpr std::uint64_t hash_of(std::uint64_t first, Rest... rest) noexcept {
  std::uint64_t h = splitmix64(first);
  ((h = splitmix64(h ^ static_cast<std::uint64_t>(rest))), ...);
  return h;
}

inline constexpr double uniform01(std::uint64_t h) noexcept {
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace ctr
