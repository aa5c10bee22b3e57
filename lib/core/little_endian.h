// Little-endian integers in byte buffers, as every wccl wire format stores them
// (docs/protocol.md), whatever the host's byte order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wccl {

template <typename T>
void put_le(uint8_t *p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i)
    p[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

template <typename T>
T get_le(const uint8_t *p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace wccl
