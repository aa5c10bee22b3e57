// The codec kernels of one instruction-set tier. lib/meson.build compiles this file once per tier
// with -DWCCL_CODEC_TIER=<tier>, that tier's target flags, -O3 and -ffp-contract=off (a fused
// multiply-add would round differently from the other tiers and from the CUDA kernels). The loops
// are written for the vectoriser: restrict pointers, integer reductions (never float ones, which
// it would only reorder under fast-math), and no calls. Everything here has internal linkage or
// lives in the tier's own namespace, so no function compiled for one tier can be picked up by
// another at link time.
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "codec/fp8.h"
#include "codec/half.h"
#include "codec/kernels.h"

#ifndef WCCL_CODEC_TIER
#error "compile with -DWCCL_CODEC_TIER=<tier>"
#endif

namespace wccl::codec::WCCL_CODEC_TIER {
namespace {

// Integer SUM and PROD wrap around (two's complement), as in NCCL and MPI implementations: the
// arithmetic is done in the unsigned type, so overflow is defined.
template <typename T>
struct Sum {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
template <typename T>
struct Prod {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // unsigned int, not the narrow unsigned type: uint8 * uint8 would promote to signed int.
      using U =
          std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
      return static_cast<T>(
          static_cast<U>(static_cast<U>(static_cast<std::make_unsigned_t<T>>(a)) *
                         static_cast<U>(static_cast<std::make_unsigned_t<T>>(b))));
    } else {
      return a * b;
    }
  }
};
template <typename T>
struct Min {
  static T apply(T a, T b) { return b < a ? b : a; }
};
template <typename T>
struct Max {
  static T apply(T a, T b) { return a < b ? b : a; }
};

template <typename T, template <typename> class Op>
void loop(T *__restrict dst, const T *__restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op<T>::apply(dst[i], src[i]);
}
template <typename T, template <typename> class Op>
void loop3(T *__restrict dst, const T *__restrict a, const T *__restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Op<T>::apply(a[i], b[i]);
}

// 16-bit floats: widen, combine in F32, round back once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), template <typename> class Op>
void loop16(uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Narrow(Op<float>::apply(Widen(a[i]), Widen(b[i])));
}

template <template <typename> class Op>
void dispatch(Dtype t, void *dst, const void *a, const void *b, size_t n) {
  // a == dst is the in-place form; restrict forbids aliasing, so it has its own loop.
  const bool inplace = a == dst;
  auto run = [&](auto *d) {
    using T = std::remove_pointer_t<decltype(d)>;
    if (inplace) {
      loop<T, Op>(d, static_cast<const T *>(b), n);
    } else {
      loop3<T, Op>(d, static_cast<const T *>(a), static_cast<const T *>(b), n);
    }
  };
  switch (t) {
    case Dtype::kF32:
      return run(static_cast<float *>(dst));
    case Dtype::kF64:
      return run(static_cast<double *>(dst));
    case Dtype::kI8:
      return run(static_cast<int8_t *>(dst));
    case Dtype::kU8:
      return run(static_cast<uint8_t *>(dst));
    case Dtype::kI32:
      return run(static_cast<int32_t *>(dst));
    case Dtype::kI64:
      return run(static_cast<int64_t *>(dst));
    case Dtype::kF16:
      return loop16<half_to_float, float_to_half, Op>(static_cast<uint16_t *>(dst),
                                                      static_cast<const uint16_t *>(a),
                                                      static_cast<const uint16_t *>(b), n);
    case Dtype::kBF16:
      return loop16<bf16_to_float, float_to_bf16, Op>(static_cast<uint16_t *>(dst),
                                                      static_cast<const uint16_t *>(a),
                                                      static_cast<const uint16_t *>(b), n);
  }
}

void reduce_into(Dtype t, RedOp op, void *dst, const void *a, const void *b, size_t n) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return dispatch<Sum>(t, dst, a, b, n);
    case RedOp::kMin:
      return dispatch<Min>(t, dst, a, b, n);
    case RedOp::kMax:
      return dispatch<Max>(t, dst, a, b, n);
    case RedOp::kProd:
      return dispatch<Prod>(t, dst, a, b, n);
  }
}

// Integers divide in 64 bits: `by` (a member count) need not fit the element type.
template <typename T>
void divide(T *__restrict d, size_t n, int by) {
  using Wide = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
  for (size_t i = 0; i < n; ++i)
    d[i] = static_cast<T>(static_cast<Wide>(d[i]) / static_cast<Wide>(by));
}
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide16(uint16_t *__restrict d, size_t n, int by) {
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(Widen(d[i]) / static_cast<float>(by));
}

void finish_avg(Dtype t, void *dst, size_t n, int by) {
  switch (t) {
    case Dtype::kF32:
      return divide(static_cast<float *>(dst), n, by);
    case Dtype::kF64:
      return divide(static_cast<double *>(dst), n, by);
    case Dtype::kI8:
      return divide(static_cast<int8_t *>(dst), n, by);
    case Dtype::kU8:
      return divide(static_cast<uint8_t *>(dst), n, by);
    case Dtype::kI32:
      return divide(static_cast<int32_t *>(dst), n, by);
    case Dtype::kI64:
      return divide(static_cast<int64_t *>(dst), n, by);
    case Dtype::kF16:
      return divide16<half_to_float, float_to_half>(static_cast<uint16_t *>(dst), n, by);
    case Dtype::kBF16:
      return divide16<bf16_to_float, float_to_bf16>(static_cast<uint16_t *>(dst), n, by);
  }
}

// --- Block-quantized wires: INT8, INT4, INT2, FP8, TOPK ------------------------------------------

// Floats as integers that order the same way (-0 just below +0), so the min/max scan is an
// integer reduction: it vectorises without fast-math and gives the same answer in any order, on
// every tier and on the GPU.
inline int32_t order_key(uint32_t bits) {
  const auto s = static_cast<int32_t>(bits);
  return s ^ ((s >> 31) & 0x7fffffff);
}
inline float from_order_key(int32_t key) {
  const auto bits = static_cast<uint32_t>(key ^ ((key >> 31) & 0x7fffffff));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The index of the first NaN or Inf of k elements, or k.
size_t first_non_finite(const float *x, size_t k) {
  for (size_t j = 0; j < k; ++j) {
    uint32_t u;
    std::memcpy(&u, &x[j], 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return j;
  }
  return k;
}

// Where a block of k elements that holds a magnitude of 2^127 or more (FP8, TOPK) stops its
// encoder: its first NaN or Inf names itself, else the block's first element.
size_t refused_at(const float *x, size_t k) {
  const size_t j = first_non_finite(x, k);
  return j < k ? j : 0;
}

// Scans k elements for the smallest and largest (as order keys). Returns k, or the index of the
// first NaN or Inf.
size_t scan_range(const float *__restrict x, size_t k, int32_t *lo_key, int32_t *hi_key) {
  int32_t kmin = INT32_MAX, kmax = INT32_MIN;
  uint32_t bad = 0;
  for (size_t j = 0; j < k; ++j) {
    uint32_t u;
    std::memcpy(&u, &x[j], 4);
    const int32_t key = order_key(u);
    kmin = key < kmin ? key : kmin;
    kmax = kmax < key ? key : kmax;
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  *lo_key = kmin;
  *hi_key = kmax;
  return bad != 0 ? first_non_finite(x, k) : k;
}

// The nearest of Levels + 1 codes: x - offset >= 0, so adding 0.5 and truncating rounds half up;
// the clamp catches the float rounding of the top element (and x - offset overflowing to Inf in
// a huge block).
template <int Levels>
inline uint8_t uniform_code(float x, float offset, float inv) {
  float v = (x - offset) * inv + 0.5f;
  v = v < static_cast<float>(Levels) ? v : static_cast<float>(Levels);
  return static_cast<uint8_t>(static_cast<int32_t>(v));
}

// Encodes one block of k (1..format's block) elements at out (header, then codes) with
// Levels + 1 uniform steps from the block's minimum to its maximum: INT8 (255) one code per byte,
// INT4 (15) two per byte, INT2 (3) four per byte, the first in the low bits. Returns k, or the
// index in the block of the element that stops it.
template <int Levels>
size_t uniform_block(const BlockFormat & /*f*/, const float *__restrict x, size_t k,
                     uint8_t *__restrict out) {
  int32_t kmin, kmax;
  const size_t finite = scan_range(x, k, &kmin, &kmax);
  if (finite != k) return finite;
  const float lo = from_order_key(kmin), hi = from_order_key(kmax);
  const float range = hi - lo;
  float scale = range / static_cast<float>(Levels);
  const float offset = lo + 0.0f;  // -0 becomes +0: the header does not depend on which zero won
  // Every code must decode to a finite float.
  if (!(range <= FLT_MAX) || !(offset + static_cast<float>(Levels) * scale <= FLT_MAX)) return 0;
  // A constant block, or one whose range is so small that its step would be subnormal, is
  // encoded as its minimum (error at most the range, below Levels * FLT_MIN).
  if (!(scale >= FLT_MIN)) scale = 0.0f;
  std::memcpy(out, &scale, 4);
  std::memcpy(out + 4, &offset, 4);
  uint8_t *__restrict codes = out + 8;
  const float inv = scale == 0.0f ? 0.0f : 1.0f / scale;  // inv 0 makes every code 0
  if constexpr (Levels == 255) {
    for (size_t j = 0; j < k; ++j) codes[j] = uniform_code<Levels>(x[j], offset, inv);
  } else {
    constexpr size_t kPer = Levels == 15 ? 2 : 4;  // codes per byte
    constexpr unsigned kBits = 8 / kPer;
    const size_t full = k / kPer;
    for (size_t p = 0; p < full; ++p) {
      unsigned byte = 0;
      for (size_t e = 0; e < kPer; ++e)
        byte |= static_cast<unsigned>(uniform_code<Levels>(x[kPer * p + e], offset, inv))
                << (kBits * e);
      codes[p] = static_cast<uint8_t>(byte);
    }
    if (k % kPer != 0) {
      unsigned byte = 0;
      for (size_t e = 0; e < k % kPer; ++e)
        byte |= static_cast<unsigned>(uniform_code<Levels>(x[kPer * full + e], offset, inv))
                << (kBits * e);
      codes[full] = static_cast<uint8_t>(byte);
    }
  }
  return k;
}

// Encodes one FP8 block: the power-of-two scale that brings the largest magnitude within 448,
// then each element divided by it (exactly: a power of two) and rounded to E4M3.
size_t fp8_block(const BlockFormat & /*f*/, const float *__restrict x, size_t k,
                 uint8_t *__restrict out) {
  uint32_t amax = 0, bad = 0;
  for (size_t j = 0; j < k; ++j) {
    uint32_t u;
    std::memcpy(&u, &x[j], 4);
    const uint32_t a = u & 0x7fffffffu;
    amax = amax < a ? a : amax;
    bad |= static_cast<uint32_t>(a >= 0x7f000000u);  // 2^127 and up, Inf and NaN
  }
  if (bad != 0) return refused_at(x, k);
  const int e = fp8_scale_exponent(amax);
  const float scale = fp8_pow2(e), inv = fp8_pow2(-e);
  std::memcpy(out, &scale, 4);
  uint8_t *__restrict codes = out + 4;
  for (size_t j = 0; j < k; ++j) codes[j] = fp8_from_float(x[j] * inv);
  return k;
}

// Picks the e (1..k) largest of k keys (ties: the lower index) into pick, in ascending index order,
// and returns the largest key. Few picks take them one at a time, each as the largest key and the
// lowest index holding it (two integer reductions that vectorise; a taken key becomes 0), then
// sort them: 2e passes over the block. From kTopkBisectFrom picks that is more than finding the
// e-th largest key t bit by bit (31 counting passes, keys being below 2^31) and taking, in one
// pass, every key above t and the lowest-indexed ones equal to it. Both pick the same elements.
inline constexpr size_t kTopkBisectFrom = 16;
uint32_t topk_pick(int32_t *__restrict key, size_t k, size_t e, uint8_t *__restrict pick) {
  int32_t top = 0;
  if (e < kTopkBisectFrom) {
    for (size_t i = 0; i < e; ++i) {
      int32_t best = 0;
      for (size_t j = 0; j < k; ++j) best = best < key[j] ? key[j] : best;
      uint32_t at = kTopkBlock;
      for (size_t j = 0; j < k; ++j) {
        const uint32_t here = key[j] == best ? static_cast<uint32_t>(j) : kTopkBlock;
        at = here < at ? here : at;
      }
      if (i == 0) top = best;
      key[at] = 0;
      pick[i] = static_cast<uint8_t>(at);
    }
    for (size_t i = 1; i < e; ++i) {  // ascending index order
      const uint8_t v = pick[i];
      size_t p = i;
      for (; p > 0 && pick[p - 1] > v; --p) pick[p] = pick[p - 1];
      pick[p] = v;
    }
    return static_cast<uint32_t>(top);
  }
  for (size_t j = 0; j < k; ++j) top = top < key[j] ? key[j] : top;
  int32_t t = 0;  // the largest t with at least e keys >= t
  for (int b = 30; b >= 0; --b) {
    const int32_t c = t | (int32_t{1} << b);
    size_t n = 0;
    for (size_t j = 0; j < k; ++j) n += static_cast<size_t>(key[j] >= c);
    if (n >= e) t = c;
  }
  size_t above = 0;
  for (size_t j = 0; j < k; ++j) above += static_cast<size_t>(key[j] > t);
  size_t ties = e - above, m = 0;  // keys equal to t taken, lowest indices first
  for (size_t j = 0; j < k; ++j) {
    const bool tie = key[j] == t && ties > 0;
    if (key[j] > t || tie) pick[m++] = static_cast<uint8_t>(j);
    ties -= static_cast<size_t>(tie);
  }
  return static_cast<uint32_t>(top);
}

// Encodes one TOPK block: the f.keep largest magnitudes (ties: the lower index), each a key of its
// magnitude bits + 1 (topk_pick), written in ascending index order, each as a sign and a magnitude
// code in steps of a seventh of the largest.
size_t topk_block(const BlockFormat &f, const float *__restrict x, size_t k,
                  uint8_t *__restrict out) {
  int32_t key[kTopkBlock];
  uint32_t bad = 0;
  for (size_t j = 0; j < k; ++j) {
    uint32_t u;
    std::memcpy(&u, &x[j], 4);
    const uint32_t a = u & 0x7fffffffu;
    bad |= static_cast<uint32_t>(a >= 0x7f000000u);  // 2^127 and up, Inf and NaN
    key[j] = static_cast<int32_t>(a + 1);
  }
  if (bad != 0) return refused_at(x, k);
  const size_t e = f.coded(k);
  uint8_t pick[kTopkMaxKeep];
  const uint32_t amax = topk_pick(key, k, e, pick) - 1;
  float top;
  std::memcpy(&top, &amax, 4);
  float scale = top / static_cast<float>(kTopkLevels);
  if (!(scale >= FLT_MIN))
    scale = 0.0f;  // every kept element decodes to 0: each is below 7 * FLT_MIN
  const float inv = scale == 0.0f ? 0.0f : 1.0f / scale;
  std::memcpy(out, &scale, 4);
  uint8_t *__restrict index = out + f.header;
  uint8_t *__restrict codes = index + e;
  for (size_t i = 0; i < e; ++i) index[i] = pick[i];
  for (size_t i = 0; i < (e + 1) / 2; ++i) codes[i] = 0;
  for (size_t i = 0; i < e; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[pick[i]], 4);
    float a;
    const uint32_t abs = u & 0x7fffffffu;
    std::memcpy(&a, &abs, 4);
    const unsigned code = uniform_code<kTopkLevels>(a, 0.0f, inv) | ((u >> 31) << 3);
    codes[i / 2] = static_cast<uint8_t>(codes[i / 2] | (code << (4 * (i % 2))));
  }
  return k;
}

// The format a kernel walks: the wire's own, fixed when compiled (F; the compiler then knows the
// block and header sizes), or, F null, the one it is given (TOPK's, whose keep varies).
template <const BlockFormat *F>
constexpr const BlockFormat &walked(const BlockFormat &given) {
  if constexpr (F != nullptr) {
    return *F;
  } else {
    return given;
  }
}

template <size_t (*Block)(const BlockFormat &, const float *, size_t, uint8_t *),
          const BlockFormat *F>
size_t encode_blocks(const BlockFormat &given, const float *src, size_t n, uint8_t *dst) {
  const BlockFormat &f = walked<F>(given);
  for (size_t b = 0; b < n; b += f.block) {
    const size_t k = n - b < f.block ? n - b : f.block;
    const size_t done = Block(f, src + b, k, dst);
    if (done != k) return b + done;
    dst += f.block_bytes(k);
  }
  return n;
}

// Decoding, one block at a time. A BlockDecoder turns one block's codes into floats:
// decode(codes, k, coded, scale, offset, mine, dst) sets dst[j] = mine[j] + element j (mine null:
// the element alone); `coded` of the k elements carry a code (fewer than k on TOPK only). The
// in-place form (dst == mine) has its own loop, since restrict forbids aliasing; INT4 and INT2 walk
// byte by byte (packed), so that they vectorise.
struct Int8Elements {
  static float at(const uint8_t *__restrict codes, size_t j, float scale, float offset) {
    return offset + static_cast<float>(codes[j]) * scale;
  }
};
struct Fp8Elements {
  static float at(const uint8_t *__restrict codes, size_t j, float scale, float /*offset*/) {
    return fp8_to_float(codes[j]) * scale;
  }
};

template <typename E>
void per_element(const uint8_t *__restrict codes, size_t k, size_t /*coded*/, float scale,
                 float offset, const float *mine, float *dst) {
  float *__restrict d = dst;
  if (mine == nullptr) {
    for (size_t j = 0; j < k; ++j) d[j] = E::at(codes, j, scale, offset);
  } else if (mine == dst) {
    for (size_t j = 0; j < k; ++j) d[j] = d[j] + E::at(codes, j, scale, offset);
  } else {
    const float *__restrict m = mine;
    for (size_t j = 0; j < k; ++j) d[j] = m[j] + E::at(codes, j, scale, offset);
  }
}

// INT4 and INT2: 8 / Bits codes per byte, each step of the loop one byte, so that it vectorises.
template <unsigned Bits>
void packed(const uint8_t *__restrict codes, size_t k, size_t /*coded*/, float scale, float offset,
            const float *mine, float *dst) {
  constexpr size_t kPer = 8 / Bits;
  constexpr unsigned kMask = (1u << Bits) - 1;
  float *__restrict d = dst;
  const size_t full = k / kPer;
  auto at = [&](size_t p, size_t e) {
    return offset + static_cast<float>((codes[p] >> (Bits * e)) & kMask) * scale;
  };
  if (mine == nullptr) {
    for (size_t p = 0; p < full; ++p) {
      for (size_t e = 0; e < kPer; ++e) d[kPer * p + e] = at(p, e);
    }
  } else if (mine == dst) {
    for (size_t p = 0; p < full; ++p) {
      for (size_t e = 0; e < kPer; ++e) d[kPer * p + e] = d[kPer * p + e] + at(p, e);
    }
  } else {
    const float *__restrict m = mine;
    for (size_t p = 0; p < full; ++p) {
      for (size_t e = 0; e < kPer; ++e) d[kPer * p + e] = m[kPer * p + e] + at(p, e);
    }
  }
  for (size_t e = 0; e < k % kPer; ++e) {
    const size_t j = kPer * full + e;
    d[j] = (mine == nullptr ? 0.0f : mine[j]) + at(full, e);
  }
}

// TOPK: every element is mine[j] + 0 (or 0), then each of the e kept ones mine[j] + its value,
// mine[j] read before the first pass may overwrite it (dst == mine). E is e when the compiler may
// know it (the default keep: its short loops unrolled), else 0.
template <size_t E>
void topk_scatter(const uint8_t *__restrict index, size_t k, size_t e, float scale,
                  const float *mine, float *dst) {
  if constexpr (E != 0) e = E;
  const uint8_t *__restrict codes = index + e;
  float base[E != 0 ? E : kTopkMaxKeep];
  for (size_t i = 0; i < e; ++i) base[i] = mine == nullptr ? 0.0f : mine[index[i]];
  float *__restrict d = dst;
  if (mine == nullptr) {
    for (size_t j = 0; j < k; ++j) d[j] = 0.0f;
  } else if (mine == dst) {
    for (size_t j = 0; j < k; ++j) d[j] = d[j] + 0.0f;
  } else {
    const float *__restrict m = mine;
    for (size_t j = 0; j < k; ++j) d[j] = m[j] + 0.0f;
  }
  for (size_t i = 0; i < e; ++i) {
    const unsigned code = (codes[i / 2] >> (4 * (i % 2))) & 15u;
    const float v = static_cast<float>(code & 7u) * scale;
    d[index[i]] = base[i] + ((code & 8u) != 0 ? -v : v);
  }
}

void topk_sparse(const uint8_t *__restrict index, size_t k, size_t e, float scale, float /*offset*/,
                 const float *mine, float *dst) {
  if (e == kTopkDefaultKeep) return topk_scatter<kTopkDefaultKeep>(index, k, e, scale, mine, dst);
  topk_scatter<0>(index, k, e, scale, mine, dst);
}

using BlockDecoder = void (*)(const uint8_t *, size_t, size_t, float, float, const float *,
                              float *);

template <BlockDecoder Decode, const BlockFormat *F>
void decode_blocks(const BlockFormat &given, const uint8_t *src, size_t n, float *dst,
                   const float *mine) {
  const BlockFormat &f = walked<F>(given);
  for (size_t b = 0; b < n; b += f.block) {
    const size_t k = n - b < f.block ? n - b : f.block;
    float scale, offset = 0.0f;
    std::memcpy(&scale, src, 4);
    if (f.header == 8) std::memcpy(&offset, src + 4, 4);
    Decode(src + f.header, k, f.coded(k), scale, offset, mine == nullptr ? nullptr : mine + b,
           dst + b);
    src += f.block_bytes(k);
  }
}

template <BlockDecoder Decode, const BlockFormat *F>
void decode_only(const BlockFormat &given, const uint8_t *src, size_t n, float *dst) {
  decode_blocks<Decode, F>(given, src, n, dst, nullptr);
}

// --- FP16 / BF16 ---------------------------------------------------------------------------------

// The 16-bit wire data may sit at any address (a message inside a receive buffer): it is read
// and written through memcpy, which compiles to plain unaligned loads and stores.
template <uint16_t (*Narrow)(float)>
void encode16(const float *__restrict src, size_t n, uint8_t *__restrict dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = Narrow(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}
template <float (*Widen)(uint16_t)>
void decode16(const uint8_t *__restrict src, size_t n, float *__restrict dst) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = Widen(h);
  }
}

#define WCCL_STRINGIFY2(x) #x
#define WCCL_STRINGIFY(x) WCCL_STRINGIFY2(x)

}  // namespace

extern const Kernels kKernels;
const Kernels kKernels = {
    WCCL_STRINGIFY(WCCL_CODEC_TIER),
    reduce_into,
    finish_avg,
    {encode_blocks<uniform_block<255>, &kInt8Format>,
     decode_only<per_element<Int8Elements>, &kInt8Format>,
     decode_blocks<per_element<Int8Elements>, &kInt8Format>},
    {encode_blocks<uniform_block<15>, &kInt4Format>, decode_only<packed<4>, &kInt4Format>,
     decode_blocks<packed<4>, &kInt4Format>},
    {encode_blocks<uniform_block<3>, &kInt2Format>, decode_only<packed<2>, &kInt2Format>,
     decode_blocks<packed<2>, &kInt2Format>},
    {encode_blocks<fp8_block, &kFp8Format>, decode_only<per_element<Fp8Elements>, &kFp8Format>,
     decode_blocks<per_element<Fp8Elements>, &kFp8Format>},
    {encode_blocks<topk_block, nullptr>, decode_only<topk_sparse, nullptr>,
     decode_blocks<topk_sparse, nullptr>},
    encode16<float_to_half>,
    decode16<half_to_float>,
    encode16<float_to_bf16>,
    decode16<bf16_to_float>,
};

}  // namespace wccl::codec::WCCL_CODEC_TIER
