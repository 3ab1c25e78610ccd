// siphash24: SipHash-2-4 (Aumasson and Bernstein), the keyed hash TF's
// string_to_hash_bucket_strong uses (its StrongKeyedHash): without the 128-bit key, inputs
// cannot be chosen to collide. Written from the published algorithm; the tests check it against
// the reference vectors and TF's bucket values.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace psflow {

// SipHash-2-4 of `bytes` under key {k0, k1} (the key's first and last 8 bytes, little-endian).
inline std::uint64_t siphash24(const std::array<std::uint64_t, 2>& key, std::string_view bytes) {
  std::uint64_t v0 = 0x736f6d6570736575ULL ^ key[0];
  std::uint64_t v1 = 0x646f72616e646f6dULL ^ key[1];
  std::uint64_t v2 = 0x6c7967656e657261ULL ^ key[0];
  std::uint64_t v3 = 0x7465646279746573ULL ^ key[1];
  auto round = [&] {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  };
  auto absorb = [&](std::uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  };
  const std::size_t len = bytes.size();
  const std::size_t whole = len - len % 8;
  for (std::size_t i = 0; i < whole; i += 8) {
    std::uint64_t m;
    std::memcpy(&m, bytes.data() + i, 8);
    if constexpr (std::endian::native == std::endian::big) m = __builtin_bswap64(m);
    absorb(m);
  }
  std::uint64_t last = static_cast<std::uint64_t>(len & 0xff) << 56;
  for (std::size_t i = whole; i < len; ++i)
    last |= std::uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * (i - whole));
  absorb(last);
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

}  // namespace psflow
