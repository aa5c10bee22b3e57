// The codec kernels, one table per instruction-set tier, chosen once at run time (DESIGN §2).
//
// Every tier is the same source (kernels_impl.cc) compiled with its own target flags and
// floating-point contraction off, so all tiers produce bit-identical results: the wider tiers are
// only faster. `scalar` has vectorisation turned off and is the oracle the tests compare the
// others with; `generic` is vectorised for the build's baseline (SSE2 on x86-64, NEON on arm64)
// and is what non-x86 machines run.
//
// The kernels trust their arguments: lengths, aliasing and the contents of encoded blocks are
// checked by the callers in wire.cc and reduce.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "codec/reduce.h"

namespace wccl::codec {

// The block-quantized wires cut the elements into blocks (the last may be shorter); each block is
// a little-endian header followed by its codes. docs/protocol.md specifies them, wire.h states
// their error bounds.
//   INT8  blocks of 1024: float32 scale, float32 offset, one byte per element; element j decodes
//         to offset + code_j * scale (code 0..255).
//   INT4  blocks of 128: float32 scale, float32 offset, then a nibble per element, element 2p in
//         the low nibble of byte p and 2p+1 in the high one (an odd tail leaves the last high
//         nibble 0); element j decodes to offset + code_j * scale (code 0..15).
//   INT2  blocks of 128: float32 scale, float32 offset, then two bits per element, element 4p + e
//         in bits 2e..2e+1 of byte p (a short tail leaves the unused bits 0); element j decodes
//         to offset + code_j * scale (code 0..3).
//   TOPK  blocks of 256 elements, of which the `keep` (1..64; 8 unless the operation says)
//         largest in magnitude (ties: the lower index) are kept, in ascending index order:
//         float32 scale (zero, or a normal float up to 2^127 / 7), then each kept element's index
//         in the block (one byte, strictly increasing), then its code, two to a byte as INT4's
//         (the last high nibble of an odd count 0): bit 3 the sign, bits 0-2 a magnitude q; the
//         element decodes to (-1)^sign * q * scale, every other to 0. A block of k <= keep
//         elements keeps all k. 4 + 1.5 keep bytes per 256 elements (rounded up): at keep 8, 16
//         bytes, 64 times fewer than F32; at 2, 7 bytes, 146 times fewer.
//   FP8   blocks of 1024: float32 scale (zero or a power of two, 2^-126..2^119), then one OCP
//         E4M3 byte per element (sign, 4 exponent bits biased by 7, 3 mantissa bits; no
//         infinities, S.1111.111 is NaN and never sent); element j decodes to e4m3(code_j) * scale.
struct BlockFormat {
  size_t block;     // elements per block
  size_t header;    // bytes before the codes
  size_t bits;      // bits per code: 8, 4 or 2
  size_t keep = 0;  // sparse (TOPK): elements kept per block, each as an index byte and a code
  // Elements of a block of k that carry a code.
  constexpr size_t coded(size_t k) const { return keep != 0 && keep < k ? keep : k; }
  // Bytes of one block of k elements.
  constexpr size_t block_bytes(size_t k) const {
    return header + (keep != 0 ? coded(k) : 0) + (coded(k) * bits + 7) / 8;
  }
  // Bytes of n elements.
  constexpr size_t encoded_size(size_t n) const {
    return n / block * block_bytes(block) + (n % block != 0 ? block_bytes(n % block) : 0);
  }
};
inline constexpr BlockFormat kInt8Format{1024, 8, 8};
inline constexpr BlockFormat kInt4Format{128, 8, 4};
inline constexpr BlockFormat kInt2Format{128, 8, 2};
inline constexpr BlockFormat kFp8Format{1024, 4, 8};
inline constexpr size_t kTopkBlock = 256;
inline constexpr size_t kTopkDefaultKeep = 8;  // what TOPK keeps per block unless told
inline constexpr size_t kTopkMaxKeep = 64;     // a quarter of the block (INT2 is denser beyond)
constexpr BlockFormat topk_format(size_t keep) { return BlockFormat{kTopkBlock, 4, 4, keep}; }
inline constexpr unsigned kTopkLevels = 7;  // TOPK's magnitude codes: 0..7 steps of its scale
inline constexpr size_t kMaxBlock = 1024;   // the largest block of any format

// FP8 and TOPK blocks hold magnitudes below 2^127: above, FP8's power-of-two scale that fits the
// block into E4M3's range (448) would let the largest codes decode beyond the float range (and
// TOPK's step, a seventh of the largest, would be too).
inline constexpr float kFp8Limit = 1.70141183e38f;  // 2^127

// One block-quantized wire's kernels, each given the wire's format f (its own: f varies only in
// TOPK's keep). encode writes f.encoded_size(n) bytes and returns n, or the index of the first
// element that cannot be encoded: a NaN or Inf, or the first element of a block that does not
// fit (INT8, INT4 and INT2: its range exceeds the float range; FP8 and TOPK: it holds a magnitude
// of 2^127 or more). decode writes dst[i] = element i; decode_add dst[i] = mine[i] + element i,
// rounded once (dst may equal mine).
struct BlockCodec {
  size_t (*encode)(const BlockFormat &f, const float *src, size_t n, uint8_t *dst);
  void (*decode)(const BlockFormat &f, const uint8_t *src, size_t n, float *dst);
  void (*decode_add)(const BlockFormat &f, const uint8_t *src, size_t n, float *dst,
                     const float *mine);
};

struct Kernels {
  const char *name;
  // dst[i] = a[i] (op) b[i]; dst may equal a. AVG combines as SUM.
  void (*reduce_into)(Dtype t, RedOp op, void *dst, const void *a, const void *b, size_t n);
  // dst[i] /= by.
  void (*finish_avg)(Dtype t, void *dst, size_t n, int by);
  BlockCodec int8, int4, int2, fp8, topk;
  // Float to binary16 / bfloat16 (round to nearest-even, 2 little-endian bytes each, at any
  // alignment) and back.
  void (*f16_encode)(const float *src, size_t n, uint8_t *dst);
  void (*f16_decode)(const uint8_t *src, size_t n, float *dst);
  void (*bf16_encode)(const float *src, size_t n, uint8_t *dst);
  void (*bf16_decode)(const uint8_t *src, size_t n, float *dst);
};

enum class Tier { kScalar, kGeneric, kAvx2, kAvx512 };
inline constexpr Tier kTiers[] = {Tier::kScalar, Tier::kGeneric, Tier::kAvx2, Tier::kAvx512};

// The table of tier t, or null when this build or this CPU lacks it.
const Kernels *kernels_for(Tier t);
// The fastest tier this CPU runs (decided on first use).
const Kernels &kernels();

}  // namespace wccl::codec
