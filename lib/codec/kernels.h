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

// INT8 wire format: the elements are cut into blocks of kInt8Block (the last may be shorter).
// Each block is a header, the float32 `scale` then the float32 `offset` (little-endian), followed
// by one code byte per element; element i decodes to offset + code * scale.
inline constexpr size_t kInt8Block = 1024;
inline constexpr size_t kInt8Header = 8;

struct Kernels {
  const char *name;
  // dst[i] = a[i] (op) b[i]; dst may equal a. AVG combines as SUM.
  void (*reduce_into)(Dtype t, RedOp op, void *dst, const void *a, const void *b, size_t n);
  // dst[i] /= by.
  void (*finish_avg)(Dtype t, void *dst, size_t n, int by);
  // INT8 encode of n floats into dst (int8_encoded_size(n) bytes). Returns n, or the index of the
  // first element that cannot be encoded: a NaN or Inf, or the first element of a block whose
  // range does not fit a float.
  size_t (*int8_encode)(const float *src, size_t n, uint8_t *dst);
  // dst[i] = decoded element i; dst[i] = mine[i] + decoded element i (dst may equal mine).
  void (*int8_decode)(const uint8_t *src, size_t n, float *dst);
  void (*int8_decode_add)(const uint8_t *src, size_t n, float *dst, const float *mine);
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

inline size_t int8_encoded_size(size_t n) { return n + (n + kInt8Block - 1) / kInt8Block * kInt8Header; }

}  // namespace wccl::codec
