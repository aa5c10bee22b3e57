#include "codec/hash.h"

#include <vector>

namespace wccl::codec {

uint64_t combine_block_hashes(const uint64_t *hashes, size_t blocks) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "block hashes are combined as little-endian bytes");
  return hash64(hashes, blocks * sizeof(uint64_t));
}

uint64_t tensor_hash(const void *data, size_t len) {
  const auto *p = static_cast<const uint8_t *>(data);
  std::vector<uint64_t> blocks(hash_blocks(len));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const size_t at = i * kHashBlock;
    blocks[i] = hash64(p + at, len - at < kHashBlock ? len - at : kHashBlock);
  }
  return combine_block_hashes(blocks.data(), blocks.size());
}

}  // namespace wccl::codec
