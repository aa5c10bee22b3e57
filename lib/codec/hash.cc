// hash64: four lanes of acc = rotl(acc + w * K2, 31) * K1 over 8-byte words, merged and mixed
// with the length, then the tail words and bytes, then an avalanche of shifts and multiplies.
// The constants are odd 64-bit primes with well-spread bits.
#include "codec/hash.h"

#include <cstring>

namespace wccl::codec {
namespace {

constexpr uint64_t K1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t K2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t K3 = 0x165667B19E3779F9ull;
constexpr uint64_t K4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t K5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline uint32_t load32(const uint8_t *p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline uint64_t round(uint64_t acc, uint64_t word) { return rotl(acc + word * K2, 31) * K1; }

inline uint64_t merge(uint64_t h, uint64_t acc) { return (h ^ round(0, acc)) * K1 + K4; }

}  // namespace

uint64_t hash64(const void *data, size_t len) {
  // Walks by counting the bytes left, never by comparing pointers past the end (data may be null
  // when len is 0).
  const uint8_t *p = static_cast<const uint8_t *>(data);
  size_t left = len;
  uint64_t h;
  if (left >= 32) {
    uint64_t a = K1 + K2, b = K2, c = 0, d = 0 - K1;
    for (; left >= 32; p += 32, left -= 32) {
      a = round(a, load64(p));
      b = round(b, load64(p + 8));
      c = round(c, load64(p + 16));
      d = round(d, load64(p + 24));
    }
    h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18);
    h = merge(merge(merge(merge(h, a), b), c), d);
  } else {
    h = K5;
  }
  h += static_cast<uint64_t>(len);
  for (; left >= 8; p += 8, left -= 8) h = rotl(h ^ round(0, load64(p)), 27) * K1 + K4;
  if (left >= 4) {
    h = rotl(h ^ (static_cast<uint64_t>(load32(p)) * K1), 23) * K2 + K3;
    p += 4;
    left -= 4;
  }
  for (; left > 0; ++p, --left) h = rotl(h ^ (*p * K5), 11) * K1;
  h ^= h >> 33;
  h *= K2;
  h ^= h >> 29;
  h *= K3;
  h ^= h >> 32;
  return h;
}

}  // namespace wccl::codec
