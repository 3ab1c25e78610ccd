// fingerprint64: FarmHash's Fingerprint64 (its "na" Hash64), the hash TF's
// string_to_hash_bucket_fast and feature crosses use. Written from FarmHash's published
// algorithm (Geoff Pike, MIT licence) so that a string hashes to the same bucket in psflow as
// in a TF model; the tests check it against published values.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

namespace psflow {

namespace detail::farmhash {

inline constexpr std::uint64_t k0 = 0xc3a5c85c97cb3127ULL;
inline constexpr std::uint64_t k1 = 0xb492b66fbe98f273ULL;
inline constexpr std::uint64_t k2 = 0x9ae16a3b2f90404fULL;

// Little-endian loads: the fingerprint is defined on little-endian byte order.
inline std::uint64_t fetch64(const char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}
inline std::uint32_t fetch32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}

inline std::uint64_t rotate(std::uint64_t v, int shift) {
  return shift == 0 ? v : (v >> shift) | (v << (64 - shift));
}
inline std::uint64_t shift_mix(std::uint64_t v) { return v ^ (v >> 47); }

inline std::uint64_t hash_len16(std::uint64_t u, std::uint64_t v, std::uint64_t mul) {
  std::uint64_t a = (u ^ v) * mul;
  a ^= a >> 47;
  std::uint64_t b = (v ^ a) * mul;
  b ^= b >> 47;
  return b * mul;
}

inline std::uint64_t hash_len0_to16(const char* s, std::size_t len) {
  if (len >= 8) {
    const std::uint64_t mul = k2 + len * 2;
    const std::uint64_t a = fetch64(s) + k2;
    const std::uint64_t b = fetch64(s + len - 8);
    const std::uint64_t c = rotate(b, 37) * mul + a;
    const std::uint64_t d = (rotate(a, 25) + b) * mul;
    return hash_len16(c, d, mul);
  }
  if (len >= 4) {
    const std::uint64_t mul = k2 + len * 2;
    const std::uint64_t a = fetch32(s);
    return hash_len16(len + (a << 3), fetch32(s + len - 4), mul);
  }
  if (len > 0) {
    const auto a = static_cast<std::uint8_t>(s[0]);
    const auto b = static_cast<std::uint8_t>(s[len >> 1]);
    const auto c = static_cast<std::uint8_t>(s[len - 1]);
    const std::uint32_t y = std::uint32_t{a} + (std::uint32_t{b} << 8);
    const std::uint32_t z = static_cast<std::uint32_t>(len) + (std::uint32_t{c} << 2);
    return shift_mix(y * k2 ^ z * k0) * k2;
  }
  return k2;
}

inline std::uint64_t hash_len17_to32(const char* s, std::size_t len) {
  const std::uint64_t mul = k2 + len * 2;
  const std::uint64_t a = fetch64(s) * k1;
  const std::uint64_t b = fetch64(s + 8);
  const std::uint64_t c = fetch64(s + len - 8) * mul;
  const std::uint64_t d = fetch64(s + len - 16) * k2;
  return hash_len16(rotate(a + b, 43) + rotate(c, 30) + d, a + rotate(b + k2, 18) + c, mul);
}

inline std::uint64_t hash_len33_to64(const char* s, std::size_t len) {
  const std::uint64_t mul = k2 + len * 2;
  const std::uint64_t a = fetch64(s) * k2;
  const std::uint64_t b = fetch64(s + 8);
  const std::uint64_t c = fetch64(s + len - 8) * mul;
  const std::uint64_t d = fetch64(s + len - 16) * k2;
  const std::uint64_t y = rotate(a + b, 43) + rotate(c, 30) + d;
  const std::uint64_t z = hash_len16(y, a + rotate(b + k2, 18) + c, mul);
  const std::uint64_t e = fetch64(s + 16) * mul;
  const std::uint64_t f = fetch64(s + 24);
  const std::uint64_t g = (y + fetch64(s + len - 32)) * mul;
  const std::uint64_t h = (z + fetch64(s + len - 24)) * mul;
  return hash_len16(rotate(e + f, 43) + rotate(g, 30) + h, e + rotate(f + a, 18) + g, mul);
}

// Two 64-bit halves from 32 bytes and two seeds.
inline std::pair<std::uint64_t, std::uint64_t> weak_hash_len32(const char* s, std::uint64_t a,
                                                               std::uint64_t b) {
  const std::uint64_t w = fetch64(s), x = fetch64(s + 8), y = fetch64(s + 16), z = fetch64(s + 24);
  a += w;
  b = rotate(b + a + z, 21);
  const std::uint64_t c = a;
  a += x;
  a += y;
  b += rotate(a, 44);
  return {a + z, b + c};
}

// One round over 64 bytes at `s`, shared by the loop and the final (possibly overlapping) block.
struct LongState {
  std::uint64_t x, y, z;
  std::pair<std::uint64_t, std::uint64_t> v{0, 0}, w{0, 0};

  void round(const char* s, std::uint64_t mul, std::uint64_t mix) {
    x = rotate(x + y + v.first + fetch64(s + 8), 37) * mul;
    y = rotate(y + v.second + fetch64(s + 48), 42) * mul;
    x ^= w.second * mix;
    y += v.first * mix + fetch64(s + 40);
    z = rotate(z + w.first, 33) * mul;
    v = weak_hash_len32(s, v.second * mul, x + w.first);
    w = weak_hash_len32(s + 32, z + w.second, y + fetch64(s + 16));
    std::swap(z, x);
  }
};

inline std::uint64_t hash_long(const char* s, std::size_t len) {
  constexpr std::uint64_t seed = 81;
  LongState st{.x = seed, .y = seed * k1 + 113, .z = 0};
  st.z = shift_mix(st.y * k2 + 113) * k2;
  st.x = st.x * k2 + fetch64(s);
  const char* end = s + ((len - 1) / 64) * 64;
  const char* last64 = end + ((len - 1) & 63) - 63;
  do {
    st.round(s, k1, 1);
    s += 64;
  } while (s != end);
  const std::uint64_t mul = k1 + ((st.z & 0xff) << 1);
  st.w.first += (len - 1) & 63;
  st.v.first += st.w.first;
  st.w.first += st.v.first;
  st.round(last64, mul, 9);
  return hash_len16(hash_len16(st.v.first, st.w.first, mul) + shift_mix(st.y) * k0 + st.z,
                    hash_len16(st.v.second, st.w.second, mul) + st.x, mul);
}

}  // namespace detail::farmhash

// FarmHash Fingerprint64 of `bytes`: stable across platforms and releases.
inline std::uint64_t fingerprint64(std::string_view bytes) {
  namespace fh = detail::farmhash;
  const char* s = bytes.data();
  const std::size_t len = bytes.size();
  if (len <= 16) return fh::hash_len0_to16(s, len);
  if (len <= 32) return fh::hash_len17_to32(s, len);
  if (len <= 64) return fh::hash_len33_to64(s, len);
  return fh::hash_long(s, len);
}

}  // namespace psflow
