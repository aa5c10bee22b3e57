// A fast non-cryptographic 64-bit hash of bytes, for state sync (DESIGN §6): members compare
// tensors by hash and move only those that differ. Not a defence against a malicious peer (TLS
// authenticates peers; a member that lies about its tensors is outside the threat model), but
// every bit of the input reaches every bit of the result, so accidental differences (a joiner's
// zeroed tensors, one changed element) are caught with probability 1 - 2^-64.
//
// hash64 is plain integer arithmetic in this header so that the CUDA kernels (lib/gpu/kernels.cu)
// hash device tensors with the same function: a tensor's hash is a hash of the hashes of its
// kHashBlock-byte blocks, which a GPU computes one block per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define WCCL_HASH_HOST_DEVICE __host__ __device__
#else
#define WCCL_HASH_HOST_DEVICE
#endif

namespace wccl::codec {

namespace hash_detail {

constexpr uint64_t K1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t K2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t K3 = 0x165667B19E3779F9ull;
constexpr uint64_t K4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t K5 = 0x27D4EB2F165667C5ull;

inline WCCL_HASH_HOST_DEVICE uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline WCCL_HASH_HOST_DEVICE uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}
inline WCCL_HASH_HOST_DEVICE uint32_t load32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}
inline WCCL_HASH_HOST_DEVICE uint64_t round(uint64_t acc, uint64_t word) {
  return rotl(acc + word * K2, 31) * K1;
}
inline WCCL_HASH_HOST_DEVICE uint64_t merge(uint64_t h, uint64_t acc) {
  return (h ^ round(0, acc)) * K1 + K4;
}

}  // namespace hash_detail

// The hash of len bytes at data, the same on every little-endian machine. Four independent
// multiply-rotate lanes over 32-byte stripes, then a tail and an avalanche (the structure of
// xxHash64, with which it is not bit-compatible). About one byte per cycle per lane.
inline WCCL_HASH_HOST_DEVICE uint64_t hash64(const void *data, size_t len) {
  using namespace hash_detail;
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

// A tensor's hash: hash64 of the little-endian hash64s of its kHashBlock-byte blocks (the last
// may be shorter; no blocks for no bytes).
inline constexpr size_t kHashBlock = 16384;
inline size_t hash_blocks(size_t len) { return (len + kHashBlock - 1) / kHashBlock; }
uint64_t tensor_hash(const void *data, size_t len);
// The last step, from the blocks' hashes (a GPU computes those).
uint64_t combine_block_hashes(const uint64_t *hashes, size_t blocks);

}  // namespace wccl::codec
