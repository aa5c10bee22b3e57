#include "pattern.h"

#include <cstring>

namespace wccl::test {

namespace {
uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
}  // namespace

void fill_pattern(uint8_t *buf, size_t n, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = splitmix(seed * 0x1000000000ULL + i / 8);
    std::memcpy(buf + i, &v, 8);
  }
  const uint64_t tail = splitmix(seed * 0x1000000000ULL + i / 8);
  for (size_t k = 0; i < n; ++i, ++k) buf[i] = static_cast<uint8_t>(tail >> (8 * k));
}

size_t check_pattern(const uint8_t *buf, size_t n, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = splitmix(seed * 0x1000000000ULL + i / 8);
    if (std::memcmp(buf + i, &v, 8) != 0) {
      for (size_t k = 0; k < 8; ++k) {
        if (buf[i + k] != static_cast<uint8_t>(v >> (8 * k))) return i + k;
      }
    }
  }
  const uint64_t tail = splitmix(seed * 0x1000000000ULL + i / 8);
  for (size_t k = 0; i < n; ++i, ++k) {
    if (buf[i] != static_cast<uint8_t>(tail >> (8 * k))) return i;
  }
  return n;
}

}  // namespace wccl::test
