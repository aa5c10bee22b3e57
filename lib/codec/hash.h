// A fast non-cryptographic 64-bit hash of bytes, for state sync (DESIGN §6): members compare
// tensors by hash and move only those that differ. Not a defence against a malicious peer (TLS
// authenticates peers; a member that lies about its tensors is outside the threat model), but
// every bit of the input reaches every bit of the result, so accidental differences (a joiner's
// zeroed tensors, one changed element) are caught with probability 1 - 2^-64.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wccl::codec {

// The hash of len bytes at data, the same on every little-endian machine. Four independent
// multiply-rotate lanes over 32-byte stripes, then a tail and an avalanche (the structure of
// xxHash64, with which it is not bit-compatible). About one byte per cycle per lane.
uint64_t hash64(const void *data, size_t len);

}  // namespace wccl::codec
