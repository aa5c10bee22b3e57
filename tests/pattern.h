// A data pattern that depends on a seed and on each byte's offset, so that a byte landing at the
// wrong offset or from the wrong message is caught. Used to verify transfers in tests and demos.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wccl::test {

void fill_pattern(uint8_t *buf, size_t n, uint64_t seed);
// Index of the first byte that differs from the pattern, or n when all match.
size_t check_pattern(const uint8_t *buf, size_t n, uint64_t seed);

}  // namespace wccl::test
